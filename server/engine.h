/* The serving engine: slots (one gp_seq each) over one gp_lm, a queue of waiting jobs, and one
 * engine thread that admits jobs into free slots and steps every running sequence once a step.
 * The HTTP side (server/http.c) only submits jobs, drains each job's output ring and cancels; how
 * a step is computed (one batched eval of every slot, gp_batch) stays behind this header. Once
 * warm the engine thread allocates nothing: slots, samplers, rings and prompts are allocated by
 * gp_engine_new or by the submitting thread. The engine's own calls (options, new, free, ready,
 * stats) are public, <gplan/server.h>; here the jobs, which the HTTP side makes. */
#ifndef GP_SERVER_ENGINE_H
#define GP_SERVER_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "gplan/server.h"
#include "gplan/text.h"

#define GP_ENGINE_MAX_STOPS 16
#define GP_ENGINE_MAX_TOP 20 /* top_logprobs at most */

typedef struct gp_job gp_job; /* one request, from gp_engine_job_new to gp_job_release */
/* Every job must be released before gp_engine_free (gp_http_stop releases the HTTP side's);
 * after gp_engine_close, gp_job_submit fails. */

/* What a job asks for. Strings are copied by gp_job_submit. */
typedef struct {
    int64_t max_tokens;     /* < 0: until the context is full */
    gp_sampler_opts so;
    const char *stop[GP_ENGINE_MAX_STOPS];
    int n_stop;
    int ignore_eos;
    int logprobs;           /* report each token's log-probability */
    int top_logprobs;       /* and this many alternatives (<= GP_ENGINE_MAX_TOP) */
} gp_job_params;

/* A generated token with logprobs asked: log-softmax of the logits it was picked from. */
typedef struct {
    int32_t id;
    float logprob;
    int n_top;
    int32_t top_id[GP_ENGINE_MAX_TOP];
    float top_logprob[GP_ENGINE_MAX_TOP]; /* most likely first */
} gp_job_token;

typedef enum {
    GP_JOB_QUEUED,
    GP_JOB_RUNNING,
    GP_JOB_DONE,  /* finished: finish, counts */
    GP_JOB_ERROR, /* an eval failed: message */
} gp_job_state;

typedef struct {
    gp_job_state state;
    gp_finish finish;
    int64_t prompt_tokens, cached_tokens, completion_tokens;
    char message[512];
} gp_job_status;

/* A job record with room for a prompt of gp_engine_context ids (allocated here, on the caller's
 * thread, or reused). NULL when out of memory. */
gp_job *gp_engine_job_new(gp_engine *e);
/* [*cap] the job's prompt buffer, to fill before gp_job_submit. */
int32_t *gp_job_prompt(gp_job *j, int64_t *cap);
/* Queues the job with n prompt ids (at most the context). 0; -1 when the queue is full or the
 * engine stops admitting (then release the job). */
int gp_job_submit(gp_job *j, int64_t n, const gp_job_params *p, char *err, size_t err_len);
/* Waits at most timeout_ms for output, then hands the text pieces and tokens the ring holds (of
 * at most max_bytes of records when > 0: a slow reader keeps the rest back, and the engine waits
 * when the ring is full) to the callbacks on the caller's thread and frees their room. Returns
 * the job's state, DONE or ERROR only once the ring is empty; *st (may be NULL) its status. */
gp_job_state gp_job_drain(gp_job *j, int timeout_ms, size_t max_bytes,
                          void (*on_text)(void *user, const char *text, size_t len),
                          void (*on_token)(void *user, const gp_job_token *t), void *user,
                          gp_job_status *st);
/* Asks the engine to stop the job; its slot is free after the next step. Any thread. */
void gp_job_cancel(gp_job *j);
/* The caller is done with the job (cancelled first when it still runs). NULL ok. */
void gp_job_release(gp_job *j);

/* The largest text of one token (special tokens rendered), for callers' buffers. */
size_t gp_engine_max_piece(const gp_engine *e);

#endif
