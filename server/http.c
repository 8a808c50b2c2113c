/* The HTTP side of gplan-serve (<gplan/server.h>): libmicrohttpd with a thread per connection. A
 * request's body is gathered (up to --max-body), parsed by server/api.c, its prompt templated and
 * tokenized here (the text API's tokenizer and templates are read-only, safe from any thread),
 * and its job submitted to the engine; the thread then drains the job's ring into one response or
 * into server-sent events, and cancels the job when the client goes away. */
#define _GNU_SOURCE /* POLLRDHUP */
#include "gplan/server.h"

#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server/api.h"

enum route { R_NONE, R_CHAT, R_COMPLETIONS, R_MODELS, R_HEALTH, R_METRICS };

/* Why requests were refused, for /metrics. */
enum reject {
    X_BAD_REQUEST, X_CONTEXT, X_TOO_LARGE, X_NOT_FOUND, X_METHOD, X_QUEUE_FULL, X_UNAVAILABLE,
    X_COUNT
};
static const char *const reject_names[X_COUNT] = {
    "bad_request", "context_length_exceeded", "body_too_large", "not_found",
    "method_not_allowed", "queue_full", "unavailable"};

struct gp_http {
    struct MHD_Daemon *d;
    gp_http_opts o;
    char model[256];
    int port;
    long long started;
    gp_lm *_Atomic lm;
    gp_engine *_Atomic engine;
    atomic_int draining, active;
    atomic_long rejects[X_COUNT], requests[2]; /* chat, completions */
    atomic_ullong ids;
};

/* One request on a connection, from its headers to MHD's completion callback. */
typedef struct {
    gp_http *h;
    struct MHD_Connection *c;
    enum route route;
    char *body;          /* [n_body] */
    size_t n_body, cap_body;
    int too_big;
    gp_api_request req;
    gp_job *job;
    gp_api_meta meta;
    char *text;          /* [n_text] the response's text (streaming: the next delta) */
    size_t n_text, cap_text, text_total;
    gp_api_logprobs *lp;
    char *pieces;        /* [GP_ENGINE_MAX_TOP + 1][piece_cap] token texts for logprobs */
    size_t piece_cap;
    int oom;
    /* server-sent events */
    char *out;           /* [out_n] bytes to send, from out_at */
    size_t out_n, out_at, out_cap;
    int sent_role, sse_done;
} conn;

static long long now_s(void) { return (long long)time(NULL); }

static int grow(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 256;
    while (c < need)
        c *= 2;
    char *b = realloc(*buf, c);
    if (!b)
        return -1;
    *buf = b;
    *cap = c;
    return 0;
}

/* ---- responses ---- */

static enum MHD_Result queue(conn *k, unsigned status, const char *ctype, char *body,
                             const char *hname, const char *hvalue)
{
    if (!body)
        return MHD_NO;
    size_t n = strlen(body);
    struct MHD_Response *r = MHD_create_response_from_buffer(n, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (hname)
        MHD_add_response_header(r, hname, hvalue);
    if (atomic_load(&k->h->draining))
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result rc = MHD_queue_response(k->c, status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result send_error(conn *k, const gp_api_error *e, enum reject why)
{
    atomic_fetch_add(&k->h->rejects[why], 1);
    const char *hname = NULL, *hvalue = NULL;
    if (e->status == 503)
        hname = MHD_HTTP_HEADER_RETRY_AFTER, hvalue = "1";
    else if (e->status == 405)
        hname = MHD_HTTP_HEADER_ALLOW, hvalue = k->route == R_CHAT || k->route == R_COMPLETIONS
                                                    ? "POST" : "GET, HEAD";
    return queue(k, (unsigned)e->status, "application/json", gp_api_error_json(e), hname, hvalue);
}

static enum MHD_Result fail(conn *k, int status, const char *type, const char *code,
                            enum reject why, const char *msg)
{
    gp_api_error e;
    gp_api_error_set(&e, status, type, code, NULL, "%s", msg);
    return send_error(k, &e, why);
}

/* ---- the job's output (this connection's thread) ---- */

static void on_text(void *user, const char *text, size_t len)
{
    conn *k = user;
    if (grow(&k->text, &k->cap_text, k->n_text + len + 1)) {
        k->oom = 1;
        return;
    }
    memcpy(k->text + k->n_text, text, len);
    k->n_text += len;
    k->text_total += len;
}

static void on_token(void *user, const gp_job_token *t)
{
    conn *k = user;
    if (!k->lp || !k->pieces)
        return;
    gp_lm *lm = atomic_load(&k->h->lm);
    const char *texts[GP_ENGINE_MAX_TOP + 1]; /* the token's, then its alternatives' */
    size_t lens[GP_ENGINE_MAX_TOP + 1];
    for (int i = 0; i <= t->n_top; i++) {
        char *p = k->pieces + (size_t)i * k->piece_cap;
        int32_t id = i ? t->top_id[i - 1] : t->id;
        int64_t got = gp_lm_detokenize(lm, &id, 1, p, k->piece_cap);
        texts[i] = p;
        lens[i] = got < 0 ? 0 : (size_t)got < k->piece_cap ? (size_t)got : k->piece_cap - 1;
    }
    gp_api_logprobs_add(k->lp, texts[0], lens[0], t->logprob, t->n_top, texts + 1, lens + 1,
                        t->top_logprob, k->text_total);
}

/* The client closed its end (checked while waiting, so a gone client's job is cancelled even
 * before anything is written to it). */
static int client_gone(conn *k)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(k->c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci)
        return 0;
    struct pollfd p = {ci->connect_fd, POLLRDHUP, 0};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static const char *finish_name(gp_finish f)
{
    return f == GP_FINISH_STOP ? "stop" : "length"; /* the context, or cancelled at shutdown */
}

static gp_api_usage usage_of(const gp_job_status *st)
{
    gp_api_usage u = {st->prompt_tokens, st->completion_tokens, st->cached_tokens};
    return u;
}

static int out_put(conn *k, char *s)
{
    if (!s)
        return -1;
    size_t n = strlen(s);
    int rc = grow(&k->out, &k->out_cap, k->out_n + n);
    if (!rc) {
        memcpy(k->out + k->out_n, s, n);
        k->out_n += n;
    }
    free(s);
    return rc;
}

static ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    conn *k = cls;
    (void)pos;
    while (k->out_at == k->out_n) {
        k->out_at = k->out_n = 0;
        if (k->sse_done)
            return MHD_CONTENT_READER_END_OF_STREAM;
        int usage = k->req.include_usage;
        if (!k->sent_role) {
            k->sent_role = 1;
            if (k->meta.chat && out_put(k, gp_api_chunk_sse(&k->meta, 1, "", 0, NULL, NULL, usage)))
                return MHD_CONTENT_READER_END_WITH_ERROR;
            continue;
        }
        gp_job_status st;
        gp_job_state s = gp_job_drain(k->job, 100, 2048, on_text, on_token, k, &st);
        if (k->oom)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if ((k->n_text || (k->lp && gp_api_logprobs_count(k->lp))) &&
            out_put(k, gp_api_chunk_sse(&k->meta, 0, k->text, k->n_text, k->lp, NULL, usage)))
            return MHD_CONTENT_READER_END_WITH_ERROR;
        k->n_text = 0;
        if (s == GP_JOB_ERROR) {
            gp_api_error e;
            gp_api_error_set(&e, 500, "server_error", NULL, NULL, "%s", st.message);
            char *j = gp_api_error_json(&e), *ev = j ? malloc(strlen(j) + 9) : NULL;
            if (ev)
                sprintf(ev, "data: %s\n\n", j);
            free(j);
            k->sse_done = 1;
            if (out_put(k, ev) || out_put(k, strdup("data: [DONE]\n\n")))
                return MHD_CONTENT_READER_END_WITH_ERROR;
        } else if (s == GP_JOB_DONE) {
            gp_api_usage u = usage_of(&st);
            k->sse_done = 1;
            if (out_put(k, gp_api_chunk_sse(&k->meta, 0, "", 0, NULL, finish_name(st.finish),
                                            usage)) ||
                (usage && out_put(k, gp_api_usage_sse(&k->meta, &u))) ||
                out_put(k, strdup("data: [DONE]\n\n")))
                return MHD_CONTENT_READER_END_WITH_ERROR;
        } else if (client_gone(k)) {
            gp_job_cancel(k->job);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
    size_t n = k->out_n - k->out_at < max ? k->out_n - k->out_at : max;
    memcpy(buf, k->out + k->out_at, n);
    k->out_at += n;
    return (ssize_t)n;
}

/* ---- the completion endpoints ---- */

/* The prompt's ids into the job's buffer: the count (which may exceed the buffer), or -1 with e. */
static int64_t prompt_ids(conn *k, gp_lm *lm, gp_api_error *e)
{
    int64_t cap;
    int32_t *ids = gp_job_prompt(k->job, &cap);
    char msg[512] = "";
    gp_api_request *r = &k->req;
    if (r->chat) {
        int64_t len = gp_lm_chat_apply(lm, r->msgs, r->n_msgs, 1, NULL, 0, msg, sizeof msg);
        char *fmt = len >= 0 ? malloc((size_t)len + 1) : NULL;
        if (len >= 0 && !fmt)
            snprintf(msg, sizeof msg, "out of memory");
        if (fmt)
            len = gp_lm_chat_apply(lm, r->msgs, r->n_msgs, 1, fmt, (size_t)len + 1, msg,
                                   sizeof msg);
        int64_t n = fmt && len >= 0 ? gp_lm_tokenize(lm, fmt, (size_t)len, 0, ids, cap, msg,
                                                     sizeof msg)
                                    : -1;
        free(fmt);
        if (n < 0)
            gp_api_error_set(e, 400, "invalid_request_error", NULL, "messages", "%s", msg);
        return n;
    }
    if (r->prompt) {
        int64_t n = gp_lm_tokenize(lm, r->prompt, r->prompt_len, 1, ids, cap, msg, sizeof msg);
        if (n < 0)
            gp_api_error_set(e, 400, "invalid_request_error", NULL, "prompt", "%s", msg);
        return n;
    }
    int64_t vocab = gp_lm_tokenizer_vocab(lm) ? gp_lm_tokenizer_vocab(lm) : gp_lm_vocab(lm);
    for (int64_t i = 0; i < r->n_prompt_ids; i++) {
        if (r->prompt_ids[i] >= vocab) {
            gp_api_error_set(e, 400, "invalid_request_error", NULL, "prompt",
                             "'prompt[%lld]' is %d, outside the vocabulary [0, %lld)",
                             (long long)i, r->prompt_ids[i], (long long)vocab);
            return -1;
        }
        if (i < cap)
            ids[i] = r->prompt_ids[i];
    }
    return r->n_prompt_ids;
}

static enum MHD_Result complete(conn *k)
{
    gp_http *h = k->h;
    gp_engine *eng = atomic_load(&h->engine);
    gp_lm *lm = atomic_load(&h->lm);
    if (!eng || !gp_engine_ready(eng))
        return fail(k, 503, "unavailable_error", NULL, X_UNAVAILABLE, "the model is loading");
    if (atomic_load(&h->draining))
        return fail(k, 503, "unavailable_error", NULL, X_UNAVAILABLE,
                    "the server is shutting down");
    gp_api_error e;
    int chat = k->route == R_CHAT;
    atomic_fetch_add(&h->requests[!chat], 1);
    if (gp_api_parse(&k->req, chat, k->body, k->n_body, &e))
        return send_error(k, &e, X_BAD_REQUEST);
    if (!(k->job = gp_engine_job_new(eng)))
        return fail(k, 500, "server_error", NULL, X_UNAVAILABLE, "out of memory");
    if (chat && !gp_lm_has_chat(lm))
        return fail(k, 400, "invalid_request_error", NULL, X_BAD_REQUEST,
                    "the model has no chat template: use /v1/completions");
    int64_t n = prompt_ids(k, lm, &e), ctx = gp_engine_context(eng);
    if (n < 0)
        return send_error(k, &e, X_BAD_REQUEST);
    if (n == 0)
        return fail(k, 400, "invalid_request_error", NULL, X_BAD_REQUEST,
                    "the prompt is empty (no tokens)");
    if (n > ctx) {
        gp_api_error_set(&e, 400, "invalid_request_error", "context_length_exceeded",
                         chat ? "messages" : "prompt",
                         "This model's maximum context length is %lld tokens. However, your %s "
                         "resulted in %lld tokens. Please reduce the length of the %s.",
                         (long long)ctx, chat ? "messages" : "prompt", (long long)n,
                         chat ? "messages" : "prompt");
        return send_error(k, &e, X_CONTEXT);
    }
    gp_job_params p = k->req.p;
    if (p.max_tokens < 0 && !chat)
        p.max_tokens = 16; /* OpenAI's default for completions */
    if (p.logprobs) {
        k->lp = gp_api_logprobs_new(chat);
        k->piece_cap = gp_engine_max_piece(eng) + 1;
        k->pieces = malloc((GP_ENGINE_MAX_TOP + 1) * k->piece_cap);
        if (!k->lp || !k->pieces)
            return fail(k, 500, "server_error", NULL, X_UNAVAILABLE, "out of memory");
    }
    char msg[512];
    if (gp_job_submit(k->job, n, &p, msg, sizeof msg)) {
        int closing = atomic_load(&h->draining) || strstr(msg, "shutting down");
        int full = strstr(msg, "queue is full") != NULL;
        return fail(k, full || closing ? 503 : 400, full || closing ? "unavailable_error"
                                                                    : "invalid_request_error",
                    NULL, full ? X_QUEUE_FULL : closing ? X_UNAVAILABLE : X_BAD_REQUEST, msg);
    }
    k->meta.chat = chat;
    k->meta.created = now_s();
    k->meta.model = h->model;
    snprintf(k->meta.id, sizeof k->meta.id, "%s-%llx%08llx", chat ? "chatcmpl" : "cmpl",
             (unsigned long long)k->meta.created,
             (unsigned long long)atomic_fetch_add(&h->ids, 1));
    if (k->req.stream) {
        struct MHD_Response *r =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_reader, k, NULL);
        if (!r)
            return MHD_NO;
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        if (atomic_load(&h->draining))
            MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
        enum MHD_Result rc = MHD_queue_response(k->c, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        return rc;
    }
    gp_job_status st;
    gp_job_state s;
    while ((s = gp_job_drain(k->job, 100, 0, on_text, on_token, k, &st)) < GP_JOB_DONE)
        if (client_gone(k)) {
            gp_job_cancel(k->job);
            return MHD_NO; /* closes the connection */
        }
    if (k->oom)
        return fail(k, 500, "server_error", NULL, X_UNAVAILABLE, "out of memory");
    if (s == GP_JOB_ERROR)
        return fail(k, 500, "server_error", NULL, X_UNAVAILABLE, st.message);
    gp_api_usage u = usage_of(&st);
    return queue(k, MHD_HTTP_OK, "application/json",
                 gp_api_response_json(&k->meta, k->text ? k->text : "", k->n_text,
                                      finish_name(st.finish), k->lp, &u),
                 NULL, NULL);
}

/* ---- GET endpoints ---- */

static char *metrics_text(gp_http *h)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f)
        return NULL;
    gp_engine *e = atomic_load(&h->engine);
    gp_engine_stats s;
    memset(&s, 0, sizeof s);
    if (e)
        gp_engine_get_stats(e, &s);
#define GAUGE(name, help, v)                                                                      \
    fprintf(f, "# HELP gplan_" name " " help "\n# TYPE gplan_" name " gauge\ngplan_" name " %lld\n", \
            (long long)(v))
#define COUNTER(name, help, v)                                                                    \
    fprintf(f, "# HELP gplan_" name " " help "\n# TYPE gplan_" name " counter\ngplan_" name         \
            " %lld\n", (long long)(v))
    GAUGE("ready", "1 when the model is loaded and the slots are warm.", e && gp_engine_ready(e));
    GAUGE("requests_running", "Requests generating in a slot.", s.running);
    GAUGE("requests_waiting", "Requests queued for a slot.", s.waiting);
    GAUGE("slots_total", "Slots (sequences at once).", s.n_slots);
    GAUGE("slots_free", "Slots without a request.", s.free_slots);
    GAUGE("kv_positions_total", "KV cache positions of every slot.", s.kv_positions);
    GAUGE("kv_positions_free", "KV cache positions no running request fills.", s.kv_free);
    GAUGE("http_requests_active", "HTTP requests being answered.", atomic_load(&h->active));
    fprintf(f, "# HELP gplan_requests_total Completion requests received, by endpoint.\n"
            "# TYPE gplan_requests_total counter\n"
            "gplan_requests_total{endpoint=\"chat\"} %ld\n"
            "gplan_requests_total{endpoint=\"completions\"} %ld\n",
            atomic_load(&h->requests[0]), atomic_load(&h->requests[1]));
    COUNTER("prompt_tokens_total", "Prompt tokens of finished requests.", s.prompt_tokens);
    COUNTER("prompt_tokens_cached_total", "Of them, found in a slot's cache.", s.cached_tokens);
    COUNTER("completion_tokens_total", "Tokens generated.", s.completion_tokens);
    COUNTER("engine_steps_total", "Engine steps.", s.steps);
    fprintf(f, "# HELP gplan_requests_finished_total Requests finished, by reason.\n"
            "# TYPE gplan_requests_finished_total counter\n");
    static const char *const fin[] = {"error", "length", "stop", "context", "cancel"};
    for (int i = 0; i < 5; i++)
        fprintf(f, "gplan_requests_finished_total{reason=\"%s\"} %lld\n", fin[i],
                (long long)s.finished[i]);
    fprintf(f, "# HELP gplan_rejects_total Requests refused, by reason.\n"
            "# TYPE gplan_rejects_total counter\n");
    for (int i = 0; i < X_COUNT; i++)
        fprintf(f, "gplan_rejects_total{reason=\"%s\"} %ld\n", reject_names[i],
                atomic_load(&h->rejects[i]));
    GAUGE("engine_alloc_counting", "1 when the engine thread's allocations are counted (not in "
          "sanitizer builds).", s.alloc_counting);
    COUNTER("engine_warmup_allocations_total", "Allocations on the engine thread while warming "
            "up.", s.warmup_allocs);
    COUNTER("engine_allocations_total", "Allocations on the engine thread since warm-up (0 "
            "expected).", s.allocs);
#undef GAUGE
#undef COUNTER
    fclose(f);
    return buf;
}

static enum MHD_Result answer_get(conn *k)
{
    gp_http *h = k->h;
    gp_engine *e = atomic_load(&h->engine);
    int ready = e && gp_engine_ready(e);
    switch (k->route) {
    case R_HEALTH:
        if (atomic_load(&h->draining))
            return queue(k, 503, "application/json", strdup("{\"status\":\"shutting down\"}"),
                         NULL, NULL);
        return ready ? queue(k, 200, "application/json", strdup("{\"status\":\"ok\"}"), NULL, NULL)
                     : queue(k, 503, "application/json", strdup("{\"status\":\"loading\"}"),
                             MHD_HTTP_HEADER_RETRY_AFTER, "1");
    case R_MODELS:
        return queue(k, 200, "application/json", gp_api_models_json(h->model, h->started), NULL,
                     NULL);
    default:
        return queue(k, 200, "text/plain; version=0.0.4", metrics_text(h), NULL, NULL);
    }
}

/* ---- libmicrohttpd's callbacks ---- */

static enum route route_of(const char *url)
{
    static const struct {
        const char *path;
        enum route r;
    } routes[] = {{"/v1/chat/completions", R_CHAT}, {"/v1/completions", R_COMPLETIONS},
                  {"/v1/models", R_MODELS},         {"/health", R_HEALTH},
                  {"/metrics", R_METRICS}};
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (!strcmp(url, routes[i].path))
            return routes[i].r;
    return R_NONE;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_size, void **con_cls)
{
    gp_http *h = cls;
    conn *k = *con_cls;
    (void)version;
    if (!k) {
        if (!(k = calloc(1, sizeof *k)))
            return MHD_NO;
        k->h = h;
        k->c = c;
        k->route = route_of(url);
        *con_cls = k;
        atomic_fetch_add(&h->active, 1);
        /* A bounded send buffer (no autotuning to megabytes): a client that reads nothing soon
         * fills it, its job's ring fills behind it and the engine stops generating for it. */
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        int sndbuf = 32 << 10;
        if (ci)
            setsockopt(ci->connect_fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
        int post = k->route == R_CHAT || k->route == R_COMPLETIONS;
        int is_get = !strcmp(method, MHD_HTTP_METHOD_GET) || !strcmp(method, MHD_HTTP_METHOD_HEAD);
        if (k->route == R_NONE)
            return fail(k, 404, "invalid_request_error", "unknown_url", X_NOT_FOUND,
                        "Unknown request URL. Try /v1/chat/completions, /v1/completions, "
                        "/v1/models, /health or /metrics.");
        if (post ? strcmp(method, MHD_HTTP_METHOD_POST) : !is_get) {
            char msg[128];
            snprintf(msg, sizeof msg, "%s is not allowed on %s (%s)", method, url,
                     post ? "POST" : "GET");
            return fail(k, 405, "invalid_request_error", "method_not_allowed", X_METHOD, msg);
        }
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (post && cl && strtoull(cl, NULL, 10) > h->o.max_body) {
            char msg[128];
            snprintf(msg, sizeof msg, "the body has %s bytes, more than the %zu of --max-body",
                     cl, h->o.max_body);
            return fail(k, 413, "invalid_request_error", "request_too_large", X_TOO_LARGE, msg);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        /* A body past the limit (chunked, so no Content-Length said so) is read and dropped. */
        if (!k->too_big && k->n_body + *upload_size > h->o.max_body) {
            k->too_big = 1;
            free(k->body);
            k->body = NULL;
            k->n_body = k->cap_body = 0;
        }
        if (!k->too_big) {
            if (grow(&k->body, &k->cap_body, k->n_body + *upload_size + 1))
                return MHD_NO;
            memcpy(k->body + k->n_body, upload, *upload_size);
            k->n_body += *upload_size;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (k->too_big) {
        char msg[128];
        snprintf(msg, sizeof msg, "the body is larger than the %zu bytes of --max-body",
                 h->o.max_body);
        return fail(k, 413, "invalid_request_error", "request_too_large", X_TOO_LARGE, msg);
    }
    if (k->route == R_CHAT || k->route == R_COMPLETIONS)
        return complete(k);
    return answer_get(k);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode why)
{
    gp_http *h = cls;
    conn *k = *con_cls;
    (void)c, (void)why;
    if (!k)
        return;
    gp_job_release(k->job);
    gp_api_request_free(&k->req);
    gp_api_logprobs_free(k->lp);
    free(k->pieces);
    free(k->body);
    free(k->text);
    free(k->out);
    free(k);
    *con_cls = NULL;
    atomic_fetch_sub(&h->active, 1);
}

static void logger(void *cls, const char *fmt, va_list ap)
{
    gp_http *h = cls;
    if (!h->o.verbose)
        return;
    fprintf(stderr, "gplan-serve: libmicrohttpd: ");
    vfprintf(stderr, fmt, ap);
}

/* ---- the daemon ---- */

gp_http_opts gp_http_defaults(void)
{
    gp_http_opts o = {"127.0.0.1", 8080, (size_t)1 << 20, 256, 60, "gplan", 0};
    return o;
}

gp_http *gp_http_start(const gp_http_opts *o, char *err, size_t err_len)
{
    gp_http_opts defaults = gp_http_defaults();
    if (!o)
        o = &defaults;
    gp_http *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    h->o = *o;
    snprintf(h->model, sizeof h->model, "%s", o->model_name ? o->model_name : "gplan");
    h->started = now_s();
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int gai = getaddrinfo(o->host, port, &hints, &ai);
    if (gai) {
        snprintf(err, err_len, "--host %s: %s", o->host, gai_strerror(gai));
        free(h);
        return NULL;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL | MHD_USE_ITC | MHD_USE_ERROR_LOG |
                     (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    h->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, handler, h,
                            MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)o->max_connections,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->timeout_s,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, h,
                            MHD_OPTION_EXTERNAL_LOGGER, logger, h, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!h->d) {
        snprintf(err, err_len, "cannot listen on %s port %d (in use, or not an address of this "
                 "host)", o->host, o->port);
        free(h);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di ? di->port : o->port;
    return h;
}

int gp_http_port(const gp_http *h) { return h->port; }

void gp_http_serve(gp_http *h, gp_lm *lm, gp_engine *e)
{
    atomic_store(&h->lm, lm);
    atomic_store(&h->engine, e);
}

void gp_http_drain(gp_http *h)
{
    atomic_store(&h->draining, 1);
    MHD_socket fd = MHD_quiesce_daemon(h->d);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
}

int gp_http_active(gp_http *h) { return atomic_load(&h->active); }

void gp_http_stop(gp_http *h)
{
    if (!h)
        return;
    MHD_stop_daemon(h->d);
    free(h);
}
