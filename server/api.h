/* OpenAI's HTTP API as gplan-serve speaks it: request bodies of /v1/chat/completions and
 * /v1/completions parsed and checked field by field (jansson), and the JSON of responses,
 * server-sent-event chunks and errors. No HTTP and no engine here: the fuzz target
 * (fuzz/fuzz_request.c) runs the parser alone. */
#ifndef GP_SERVER_API_H
#define GP_SERVER_API_H

#include <stddef.h>
#include <stdint.h>

#include "gplan/text.h"
#include "server/engine.h"

/* An error in OpenAI's shape: {"error": {"message", "type", "param", "code"}}. */
typedef struct {
    int status;       /* the HTTP status */
    const char *type; /* "invalid_request_error", "server_error", ... */
    const char *code; /* NULL, or e.g. "context_length_exceeded" */
    char param[64];   /* the field at fault, "" for none */
    char message[512];
} gp_api_error;

void gp_api_error_set(gp_api_error *e, int status, const char *type, const char *code,
                      const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* The error's JSON body (malloc'd, NUL-terminated), or NULL without memory. */
char *gp_api_error_json(const gp_api_error *e);

typedef struct {
    int chat;                  /* /v1/chat/completions (else /v1/completions) */
    const char *model;         /* the model asked for, NULL when absent */
    gp_msg *msgs;              /* [n_msgs] chat messages */
    size_t n_msgs;
    const char *prompt;        /* completions: [prompt_len] text, or NULL with prompt_ids */
    size_t prompt_len;
    int32_t *prompt_ids;       /* completions: [n_prompt_ids] token ids */
    int64_t n_prompt_ids;
    gp_job_params p;           /* max_tokens < 0 when not given */
    int stream, include_usage;
    void *json;                /* the parsed body, owning the strings above */
    char **parts;              /* [n_msgs] contents joined from arrays of text parts, or NULL */
} gp_api_request;

/* Parses a body: 0, or -1 with err (400, naming the field). r is freed with gp_api_request_free
 * either way. */
int gp_api_parse(gp_api_request *r, int chat, const char *body, size_t len, gp_api_error *err);
void gp_api_request_free(gp_api_request *r);

/* ---- responses ---- */

typedef struct {
    int64_t prompt_tokens, completion_tokens, cached_tokens;
} gp_api_usage;

/* What a response is about: the endpoint, its id ("chatcmpl-..." / "cmpl-..."), time and model. */
typedef struct {
    int chat;
    char id[48];
    long long created;
    const char *model;
} gp_api_meta;

/* Logprobs of the tokens so far, in the endpoint's shape (a JSON array for chat's
 * logprobs.content, the parallel arrays of completions' logprobs). */
typedef struct gp_api_logprobs gp_api_logprobs;
gp_api_logprobs *gp_api_logprobs_new(int chat);
void gp_api_logprobs_free(gp_api_logprobs *l);
/* Appends a token whose text is text[len] (any bytes) with its alternatives' texts. text_at is
 * the token's offset in the completion's text. */
void gp_api_logprobs_add(gp_api_logprobs *l, const char *text, size_t len, float logprob,
                         int n_top, const char *const *top_text, const size_t *top_len,
                         const float *top_logprob, size_t text_at);
int gp_api_logprobs_count(const gp_api_logprobs *l);

/* The non-streamed response (malloc'd). finish: "stop" or "length". logprobs may be NULL. */
char *gp_api_response_json(const gp_api_meta *m, const char *text, size_t len, const char *finish,
                           const gp_api_logprobs *logprobs, const gp_api_usage *u);
/* One chunk as "data: {...}\n\n" (malloc'd): role (chat's first chunk), a text delta, logprobs
 * (taken and cleared when not NULL), a finish reason or NULL; with_usage adds "usage": null. */
char *gp_api_chunk_sse(const gp_api_meta *m, int role, const char *text, size_t len,
                       gp_api_logprobs *logprobs, const char *finish, int with_usage);
/* The usage chunk of stream_options.include_usage (choices empty), as "data: {...}\n\n". */
char *gp_api_usage_sse(const gp_api_meta *m, const gp_api_usage *u);
/* GET /v1/models. */
char *gp_api_models_json(const char *model, long long created);

#endif
