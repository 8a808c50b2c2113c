/* gplan's server API: a model (<gplan/text.h>) served over HTTP/1.1 with OpenAI's API, as
 * gplan-serve does: POST /v1/chat/completions and /v1/completions (streamed as server-sent events
 * with "stream": true), GET /v1/models, /health (503 until the engine is ready) and /metrics
 * (Prometheus text). The engine runs up to n_slots sequences in one batched eval a step
 * (continuous batching, gp_batch) on a thread of its own that allocates nothing once warm; the
 * HTTP side (libmicrohttpd, a thread per connection) submits requests to it.
 * Library libgplan_server.a (CMake gplan::gplan_server, which brings libgplan, libgplan_alloc.a,
 * libmicrohttpd and jansson), installed as <gplan/server.h> when libmicrohttpd was found; apart
 * from libgplan because it counts its engine thread's allocations with <gplan/alloc_interpose.h>.
 *
 *     gp_http_opts ho = gp_http_defaults();               // 127.0.0.1:8080
 *     gp_http *h = gp_http_start(&ho, err, sizeof err);   // listens; /health answers 503
 *     gp_lm_opts lo = gp_lm_defaults();
 *     lo.n_seq = 4;                                       // a ragged batch of the engine's slots
 *     gp_lm *lm = gp_lm_load("model.gguf", &lo, err, sizeof err);
 *     gp_engine_opts eo = gp_engine_defaults();           // 4 slots
 *     gp_engine *e = gp_engine_new(lm, &eo, err, sizeof err);
 *     gp_http_serve(h, lm, e);                            // answers once gp_engine_ready(e)
 *     ... until the program stops: gp_http_drain, gp_engine_close, then when gp_http_active is 0
 *     gp_http_stop(h); gp_engine_free(e); gp_lm_free(lm);
 *
 * Errors: functions return NULL with a message in err, as <gplan/text.h>'s.
 */
#ifndef GPLAN_SERVER_H
#define GPLAN_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "text.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the engine: slots over one model, a queue, the thread that steps them ---- */

typedef struct gp_engine gp_engine;

typedef struct {
    int n_slots;    /* sequences generating at once: at most the model's batch (gp_lm_opts.n_seq,
                       or a plan's -D n_seq) */
    int n_queue;    /* requests waiting for a slot beyond them; one past them is refused (503) */
    int alloc_mark; /* mark the engine thread for <gplan/alloc_interpose.h>'s per-thread count */
    int64_t prompt_budget; /* prompt tokens a step takes while others generate
                              (gp_batch_set_prompt_budget) */
} gp_engine_opts;

/* 4 slots, 16 queued, alloc_mark 1, a prompt budget of 64 tokens (gplan-serve's defaults). */
gp_engine_opts gp_engine_defaults(void);

/* Allocates the slots (sessions) and starts the engine thread, which warms each slot up before
 * serving. o NULL: the defaults. NULL with err (no tokenizer or KV cache, a model of a smaller
 * batch, bad options). */
gp_engine *gp_engine_new(gp_lm *lm, const gp_engine_opts *o, char *err, size_t err_len);
/* Cancels what runs, stops the thread, frees everything; NULL is a no-op. */
void gp_engine_free(gp_engine *e);
/* The warm-up's failure once the engine thread gave up; "" while it warms up or serves. */
const char *gp_engine_error(gp_engine *e);
/* 1 when the slots are warm and the engine serves. */
int gp_engine_ready(const gp_engine *e);
/* Stops admitting new requests; what is queued or running goes on. */
void gp_engine_close(gp_engine *e);
/* Cancels every queued and running request. */
void gp_engine_cancel_all(gp_engine *e);
/* Positions a slot holds (the model's context). */
int64_t gp_engine_context(const gp_engine *e);

/* What /metrics reports. */
typedef struct {
    int n_slots, running, waiting, free_slots;
    int64_t kv_positions, kv_free;         /* positions of every slot; of them unused */
    int64_t prompt_tokens, cached_tokens;  /* counters since start */
    int64_t completion_tokens, steps;
    int64_t finished[5];                   /* by gp_finish (GP_FINISH_NONE: errors) */
    int64_t rejected_queue_full;
    int alloc_counting;                    /* the counts below are taken (not in sanitizer builds) */
    long warmup_allocs, allocs;            /* the engine thread's: during warm-up, after it */
} gp_engine_stats;

void gp_engine_get_stats(gp_engine *e, gp_engine_stats *s);

/* ---- the HTTP side ---- */

typedef struct gp_http gp_http;

/* The strings must outlive the server. */
typedef struct {
    const char *host;       /* address to listen on */
    int port;               /* 0: any free port (gp_http_port) */
    size_t max_body;        /* bytes a request body may hold; more: 413 */
    int max_connections;
    int timeout_s;          /* an idle connection is closed after it */
    const char *model_name; /* what /v1/models and responses call the model; NULL: "gplan" */
    int verbose;            /* libmicrohttpd's messages on stderr */
} gp_http_opts;

/* 127.0.0.1, port 8080, 1 MiB bodies, 256 connections, 60 s idle, "gplan" (gplan-serve's). */
gp_http_opts gp_http_defaults(void);

/* Listens (/health answers 503 until gp_http_serve). o NULL: the defaults. NULL with err
 * ("--host ADDR: ..." for an address that does not resolve, a port taken, ...). */
gp_http *gp_http_start(const gp_http_opts *o, char *err, size_t err_len);
int gp_http_port(const gp_http *h); /* the port listened on */
/* The model is loaded: the endpoints serve it once the engine is ready. */
void gp_http_serve(gp_http *h, gp_lm *lm, gp_engine *e);
/* Shutting down: no new connections; requests are refused with 503, running ones go on. */
void gp_http_drain(gp_http *h);
/* Requests being answered. */
int gp_http_active(gp_http *h);
/* Closes every connection and stops; NULL is a no-op. */
void gp_http_stop(gp_http *h);

#ifdef __cplusplus
}
#endif

#endif
