/* gp_seq: one sequence of a gp_lm: prompts evaluated in chunks of the plan's batch, the KV cache's
 * ids kept so that a prompt sharing a prefix evaluates only the rest, tokens sampled, streamed as
 * whole UTF-8 characters with stop strings held back, and ended by EOS, stop strings, length, the
 * context or the caller. Every buffer a step touches is allocated by gp_seq_new or a start. */
#define _GNU_SOURCE /* memmem */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/sample.h"
#include "text/lm_impl.h"

#define GP_SEQ_MAX_STOPS 16
#define GP_SEQ_MAX_STOP_LEN 256

struct gp_seq {
    gp_lm *lm;
    gp_session *s;
    gp_sampler *sampler;
    gp_sampler_opts so;
    int32_t *pos;           /* [max_tokens] one eval's positions */
    int32_t *ids;           /* [ctx] the ids in the cache, positions 0 .. n_past - 1; NULL when
                               the graph has no cache */
    int64_t n_past;
    int32_t *prompt;        /* [prompt_cap] a prompt's ids */
    int64_t prompt_cap;
    char *fmt;              /* [fmt_cap] a formatted conversation */
    size_t fmt_cap;

    /* the running generation */
    gp_gen_opts g;
    char stops[GP_SEQ_MAX_STOPS][GP_SEQ_MAX_STOP_LEN + 1];
    const char *stop_ptrs[GP_SEQ_MAX_STOPS];
    size_t max_stop;
    gp_gen_result r;
    gp_gen_result past;     /* the generations before r, summed (gp_seq_totals) */
    int started, chat;      /* chat: every emitted token is evaluated (the reply is cached) */
    int32_t pending;        /* the next id to emit */
    const float *row;       /* the last evaluated token's logits */
    int64_t next;           /* the plan's argmax of that row ("next" output), or -1 */
    atomic_int cancel;

    /* text: the stream and what it emitted, the chat's cached text */
    gp_tok_stream st;
    size_t piece_cap;       /* gp_tok_stream_cap */
    char *hold;             /* [max_stop + piece_cap] text that may begin a stop string */
    char *piece;            /* [piece_cap] one token's text */
    size_t hold_cap, n_hold;
    int stopped;
    char *out;              /* [out_cap] the emitted text, NUL-terminated */
    size_t n_out, out_cap;
    char *text;             /* [text_cap] the text the cache holds (chat), reply from reply_at,
                               NUL-terminated */
    size_t n_text, text_cap, reply_at;
    int text_valid;

    gp_eval_hooks hooks;

    /* in a batch (text/batch.c evaluates it): its slot, and a prompt being evaluated */
    gp_batch *batch;
    int slot;
    int prefill;            /* s->prompt[fed .. n_feed) still to evaluate */
    int64_t fed, n_feed;
    int64_t limit;          /* positions it may fill: the context, or a batch slot's blocks */
    char err[1024];
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int gp_seq_fail(gp_seq *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return -1;
}
#define fail gp_seq_fail

gp_gen_opts gp_gen_defaults(void)
{
    gp_gen_opts g;
    memset(&g, 0, sizeof g);
    g.max_tokens = 16;
    g.eos = -1;
    return g;
}

const char *gp_finish_name(gp_finish f)
{
    static const char *const names[] = {"", "length", "stop", "context", "cancel"};
    return (unsigned)f < sizeof names / sizeof names[0] ? names[f] : "";
}

gp_seq *gp_seq_new(gp_lm *lm, const gp_sampler_opts *so, char *err, size_t err_len)
{
    if (lm->n_seq > 0) {
        snprintf(err, err_len, "the plan holds a ragged batch of %d sequences: its sequences are a "
                 "gp_batch's (gp_batch_new)", lm->n_seq);
        return NULL;
    }
    return gp_seq_new_in(lm, NULL, 0, so, err, err_len);
}

gp_seq *gp_seq_new_in(gp_lm *lm, gp_batch *b, int slot, const gp_sampler_opts *so, char *err,
                      size_t err_len)
{
    gp_seq *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    s->lm = lm;
    s->so = so ? *so : gp_sampler_defaults();
    s->next = -1;
    s->pending = -1;
    s->batch = b;
    s->slot = slot;
    s->limit = lm->ctx;
    gp_session_opts o = {lm->backend, lm->n_threads, lm->device};
    if ((!b && !(s->s = gp_session_new(lm->m, &o, err, err_len))) ||
        !(s->sampler = gp_sampler_new(lm->n_pick, &s->so, err, err_len)))
        goto fail;
    s->pos = malloc((size_t)lm->info.max_tokens * sizeof *s->pos);
    if (lm->ctx != INT64_MAX) {
        s->ids = malloc((size_t)lm->ctx * sizeof *s->ids);
        s->prompt_cap = lm->ctx;
        s->prompt = malloc((size_t)lm->ctx * sizeof *s->prompt);
    }
    s->piece_cap = lm->tok ? gp_tok_stream_cap(lm->tok) : 16;
    s->hold_cap = GP_SEQ_MAX_STOP_LEN + s->piece_cap;
    s->hold = malloc(s->hold_cap + s->piece_cap);
    if (!s->pos || !s->hold || (lm->ctx != INT64_MAX && (!s->ids || !s->prompt))) {
        snprintf(err, err_len, "out of memory");
        goto fail;
    }
    s->piece = s->hold + s->hold_cap;
    return s;
fail:
    gp_seq_free(s);
    return NULL;
}

void gp_seq_free(gp_seq *s)
{
    if (!s)
        return;
    gp_session_free(s->s);
    gp_sampler_free(s->sampler);
    free(s->pos);
    free(s->ids);
    free(s->prompt);
    free(s->fmt);
    free(s->hold);
    free(s->out);
    free(s->text);
    free(s);
}

const char *gp_seq_error(const gp_seq *s) { return s->err; }
gp_lm *gp_seq_lm(const gp_seq *s) { return s->lm; }
gp_session *gp_seq_session(gp_seq *s) { return s->s; }
int64_t gp_seq_length(const gp_seq *s) { return s->n_past; }
const int32_t *gp_seq_tokens(const gp_seq *s) { return s->ids; }
const float *gp_seq_logits(gp_seq *s) { return s->row; }
void gp_seq_cancel(gp_seq *s) { atomic_store(&s->cancel, 1); }
void gp_seq_result(const gp_seq *s, gp_gen_result *r) { *r = s->r; }

void gp_seq_totals(const gp_seq *s, gp_gen_result *r)
{
    gp_gen_result t = s->r;
    t.prompt_tokens += s->past.prompt_tokens;
    t.cached_tokens += s->past.cached_tokens;
    t.completion_tokens += s->past.completion_tokens;
    t.prompt_ms += s->past.prompt_ms;
    t.gen_ms += s->past.gen_ms;
    t.prompt_evals += s->past.prompt_evals;
    t.gen_evals += s->past.gen_evals;
    t.prompt_rows += s->past.prompt_rows;
    *r = t;
}

const char *gp_seq_text(const gp_seq *s, size_t *len)
{
    if (len)
        *len = s->n_out;
    return s->out ? s->out : "";
}

const char *gp_seq_reply(const gp_seq *s, size_t *len)
{
    int ok = s->text_valid && s->text;
    if (len)
        *len = ok ? s->n_text - s->reply_at : 0;
    return ok ? s->text + s->reply_at : "";
}

int gp_seq_set_sampler(gp_seq *s, const gp_sampler_opts *so)
{
    gp_sampler_opts d = gp_sampler_defaults();
    if (!so)
        so = &d;
    if (so->repeat_last_n <= GP_SAMPLER_MIN_HIST) { /* in place: no allocation */
        if (gp_sampler_set(s->sampler, so, s->err, sizeof s->err))
            return -1;
        s->so = *so;
        return 0;
    }
    gp_sampler *n = gp_sampler_new(s->lm->n_pick, so, s->err, sizeof s->err);
    if (!n)
        return -1;
    gp_sampler_free(s->sampler);
    s->sampler = n;
    s->so = *so;
    return 0;
}

void gp_seq_reset(gp_seq *s)
{
    s->n_past = 0;
    s->text_valid = 0;
    s->started = s->prefill = 0;
    if (s->s)
        gp_session_reset(s->s);
}

int gp_seq_set_eval_hooks(gp_seq *s, const gp_eval_hooks *h)
{
    if (s->batch && h)
        return fail(s, "%s", "a batch's sequences have no eval hooks (their evals are shared)");
    if (h)
        s->hooks = *h;
    else
        memset(&s->hooks, 0, sizeof s->hooks);
    return 0;
}

/* ---- evals ---- */

/* One eval of ids[n] at positions pos0 ..; leaves the last row's logits in s->row. */
static int eval_chunk(gp_seq *s, const int32_t *ids, int64_t n, int64_t pos0, int is_prompt)
{
    const gp_model_info *info = &s->lm->info;
    for (int64_t i = 0; i < n; i++)
        s->pos[i] = (int32_t)(pos0 + i);
    if (gp_session_set_tokens(s->s, ids, s->pos, n) ||
        (s->hooks.all_rows && info->rows && gp_session_set_rows(s->s, NULL, n)))
        return fail(s, "%s", gp_session_error(s->s));
    if (s->hooks.before)
        s->hooks.before(s->hooks.user, n);
    double t0 = now_ms();
    int rc = gp_session_eval(s->s);
    double dt = now_ms() - t0;
    if (rc)
        return fail(s, "%s", gp_session_error(s->s));
    gp_tensor_info li, ni;
    const float *logits = gp_session_output(s->s, info->logits, &li);
    int64_t rows = li.ndim >= 1 ? li.ne[0] : 1;
    const int32_t *next = gp_session_output(s->s, "next", &ni);
    int64_t nx = next && ni.ndim == 1 && ni.ne[0] == rows && ni.bytes == (size_t)rows * 4
                     ? next[rows - 1]
                     : -1;
    if (gp_seq_take_row(s, logits + (rows - 1) * info->vocab, nx, n, is_prompt, dt))
        return -1;
    if (s->hooks.after)
        s->hooks.after(s->hooks.user, s->hooks.all_rows ? logits : s->row,
                       s->hooks.all_rows ? rows : 1, info->vocab);
    return 0;
}

int gp_seq_take_row(gp_seq *s, const float *row, int64_t next, int64_t n, int is_prompt, double dt)
{
    const gp_model_info *info = &s->lm->info;
    if (is_prompt) {
        s->r.prompt_evals++;
        s->r.prompt_rows += n;
        s->r.prompt_ms += dt;
    } else {
        s->r.gen_evals++;
        s->r.gen_ms += dt;
    }
    s->row = row;
    s->next = next;
    /* A NaN or an infinity would be sampled as an id of garbage (greedy: id 0 every step). */
    int64_t bad = -1;
    for (int64_t i = 0; i < info->vocab && bad < 0; i += 1024) {
        int64_t e = i + 1024 < info->vocab ? i + 1024 : info->vocab, nan = 0;
        for (int64_t k = i; k < e; k++)
            nan |= !(s->row[k] - s->row[k] == 0.0f);
        for (int64_t k = i; nan && k < e && bad < 0; k++)
            bad = !(s->row[k] - s->row[k] == 0.0f) ? k : -1;
    }
    if (bad >= 0) {
        s->started = s->prefill = 0; /* a batch's sequence stops; alone, gp_seq_step fails */
        snprintf(s->err, sizeof s->err, "eval %lld (%s, %lld tokens generated): logit %lld is %g: "
                 "the weights or the computation give non-finite values",
                 (long long)(s->r.prompt_evals + s->r.gen_evals), is_prompt ? "prompt" : "generation",
                 (long long)s->r.completion_tokens, (long long)bad, (double)s->row[bad]);
        return -1;
    }
    return 0;
}

/* The next id from the last row: the plan's own argmax when the pick is greedy. Ids past the
 * tokenizer's (a padded embedding) are never picked: the sampler sees the first n_pick logits. */
static int32_t pick(gp_seq *s)
{
    if (gp_sampler_is_greedy(s->sampler) && s->next >= 0 && s->next < s->lm->n_pick)
        return (int32_t)s->next;
    return gp_sampler_sample(s->sampler, s->row);
}

/* ---- streamed text ---- */

static void emit(gp_seq *s, const char *p, size_t n)
{
    if (!n)
        return;
    size_t room = s->out_cap > s->n_out + 1 ? s->out_cap - s->n_out - 1 : 0;
    size_t k = n < room ? n : room;
    if (k) {
        memcpy(s->out + s->n_out, p, k);
        s->n_out += k;
        s->out[s->n_out] = '\0';
    }
    if (s->g.on_text && s->g.on_text(s->g.user, p, n))
        atomic_store(&s->cancel, 1);
}

/* Takes n <= piece_cap bytes; emits what can no longer be part of a stop string. */
static void text_put(gp_seq *s, const char *p, size_t n)
{
    if (s->stopped || !n)
        return;
    if (!s->g.n_stop) {
        emit(s, p, n);
        return;
    }
    memcpy(s->hold + s->n_hold, p, n);
    s->n_hold += n;
    size_t cut = SIZE_MAX;
    for (int i = 0; i < s->g.n_stop; i++) {
        const char *at = memmem(s->hold, s->n_hold, s->stops[i], strlen(s->stops[i]));
        if (at && (size_t)(at - s->hold) < cut)
            cut = (size_t)(at - s->hold);
    }
    if (cut != SIZE_MAX) {
        emit(s, s->hold, cut);
        s->n_hold = 0;
        s->stopped = 1;
        return;
    }
    /* Keep the longest end of the held text that begins some stop string. */
    size_t keep = 0;
    for (size_t k = s->n_hold < s->max_stop ? s->n_hold : s->max_stop - 1; k > 0 && !keep; k--)
        for (int i = 0; i < s->g.n_stop && !keep; i++)
            if (strlen(s->stops[i]) > k && !memcmp(s->hold + s->n_hold - k, s->stops[i], k))
                keep = k;
    emit(s, s->hold, s->n_hold - keep);
    memmove(s->hold, s->hold + s->n_hold - keep, keep);
    s->n_hold = keep;
}

static void text_flush(gp_seq *s)
{
    char buf[16];
    int n = s->lm->tok ? gp_tok_stream_flush(&s->st, buf, sizeof buf) : 0;
    if (n > 0)
        text_put(s, buf, (size_t)n);
    if (!s->stopped)
        emit(s, s->hold, s->n_hold);
    s->n_hold = 0;
}

/* ---- starting ---- */

/* Makes room for a buffer of need bytes (a start may allocate; steps never do). */
static int grow(gp_seq *s, char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    char *b = realloc(*buf, need);
    if (!b)
        return fail(s, "%s", "out of memory");
    *buf = b;
    *cap = need;
    return 0;
}

static int set_gen(gp_seq *s, const gp_gen_opts *g)
{
    gp_gen_opts d = gp_gen_defaults();
    if (!g)
        g = &d;
    if (g->n_stop < 0 || g->n_stop > GP_SEQ_MAX_STOPS)
        return fail(s, "%s", "more than 16 stop strings");
    if (g->restart && (s->chat || s->batch))
        return fail(s, "%s", "restart is for a sequence of its own, not a chat or a batch's");
    s->max_stop = 0;
    for (int i = 0; i < g->n_stop; i++) {
        size_t n = g->stop[i] ? strlen(g->stop[i]) : 0;
        if (!n || n > GP_SEQ_MAX_STOP_LEN)
            return fail(s, "%s", "a stop string is empty or longer than 256 bytes");
        memcpy(s->stops[i], g->stop[i], n + 1);
        s->stop_ptrs[i] = s->stops[i];
        if (n > s->max_stop)
            s->max_stop = n;
    }
    s->g = *g;
    s->g.stop = s->stop_ptrs;
    return 0;
}

/* The prompt ids[n] (which may be s->prompt): keeps the cached prefix when keep_prefix, evaluates
 * the rest, picks the first id. The caller set s->g and checked the context. */
static int feed(gp_seq *s, const int32_t *ids, int64_t n, int keep_prefix)
{
    const gp_lm *lm = s->lm;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= lm->info.vocab) {
            snprintf(s->err, sizeof s->err, "prompt token %lld is %d, outside the vocabulary "
                     "[0, %lld)", (long long)i, ids[i], (long long)lm->info.vocab);
            return -1;
        }
    int64_t keep = 0;
    if (keep_prefix && s->ids)
        while (keep < n - 1 && keep < s->n_past && s->ids[keep] == ids[keep])
            keep++;
    if (keep_prefix && s->batch) /* another slot's cache may hold more of it */
        keep = gp_batch_share(s->batch, s->slot, ids, n, keep, s->ids);
    /* The cache's text is a chat's: a plain prompt (and its tokens) would put ids in the cache
     * that the text lacks. gp_seq_start_chat sets it again once its prompt is in. */
    s->text_valid = 0;
    s->n_past = keep;
    /* Room for the text of every token the generation may emit. */
    int64_t room = lm->ctx == INT64_MAX ? 4096 : lm->ctx - n + 1;
    if (s->g.max_tokens >= 0 && s->g.max_tokens < room)
        room = s->g.max_tokens;
    if (grow(s, &s->out, &s->out_cap, (size_t)room * s->piece_cap + 16))
        return -1;
    s->r.prompt_tokens = n;
    s->r.cached_tokens = keep;
    s->n_out = 0;
    s->out[0] = '\0';
    s->n_hold = 0;
    s->stopped = 0;
    gp_tok_stream_init(&s->st);
    atomic_store(&s->cancel, 0);
    s->started = s->prefill = 0;
    if (s->batch) { /* gp_batch_step evaluates it */
        int64_t need = s->g.max_tokens < 0 || n + s->g.max_tokens > lm->ctx ? lm->ctx
                                                                             : n + s->g.max_tokens;
        int64_t keep0 = keep;
        int rc = gp_batch_reserve(s->batch, s->slot, &keep, need, s->err, sizeof s->err);
        if (rc) {
            s->n_past = keep0;
            return rc;
        }
        s->n_past = keep;
        s->r.cached_tokens = keep;
        if (ids != s->prompt)
            memcpy(s->prompt, ids, (size_t)n * sizeof *ids);
        s->fed = keep;
        s->n_feed = n;
        s->prefill = 1;
        return 0;
    }
    for (int64_t i = keep; i < n; i += lm->info.max_tokens) {
        int64_t k = n - i < lm->info.max_tokens ? n - i : lm->info.max_tokens;
        if (eval_chunk(s, ids + i, k, i, 1))
            return -1;
        if (s->ids)
            memmove(s->ids + i, ids + i, (size_t)k * sizeof *ids);
        s->n_past = i + k;
    }
    gp_seq_fed(s, ids, n);
    return 0;
}

void gp_seq_fed(gp_seq *s, const int32_t *ids, int64_t n)
{
    s->n_past = n;
    s->prefill = 0;
    /* The sampler sees the whole sequence, so a prompt and seed give the same ids whatever the
     * cache held before. */
    gp_sampler_reset(s->sampler);
    for (int64_t i = 0; i < n; i++)
        gp_sampler_accept(s->sampler, ids[i]);
    s->pending = s->g.max_tokens != 0 ? pick(s) : -1;
    s->started = 1;
}

/* A start: no error, no generation, fresh counts (the last generation's summed into past). */
static int begin(gp_seq *s, int chat, const gp_gen_opts *g)
{
    s->err[0] = '\0';
    s->chat = chat;
    s->started = 0;
    gp_seq_totals(s, &s->past);
    memset(&s->r, 0, sizeof s->r);
    s->r.stop_token = -1;
    return set_gen(s, g);
}

static int too_long(gp_seq *s, int64_t n, const char *what)
{
    s->r.prompt_tokens = n;
    snprintf(s->err, sizeof s->err, "the %s has %lld tokens, more than the planned context of "
             "%lld positions%s", what, (long long)n, (long long)s->lm->ctx,
             s->chat ? " (with a position for the reply)" : "");
    return GP_SEQ_TOO_LONG;
}

int gp_seq_start(gp_seq *s, const int32_t *ids, int64_t n, int keep_prefix, const gp_gen_opts *g)
{
    if (begin(s, 0, g))
        return -1;
    if (n <= 0)
        return fail(s, "%s", "the prompt is empty (no tokens)");
    if (n > s->lm->ctx)
        return too_long(s, n, "prompt");
    return feed(s, ids, n, keep_prefix);
}

/* Encodes text into s->prompt from offset at, growing it when the graph has no cache (the
 * context bounds it otherwise). The count, or -1. */
static int64_t encode(gp_seq *s, const char *text, size_t len, int add_special, int64_t at)
{
    int64_t cap = s->prompt_cap - at;
    int64_t n = gp_lm_tokenize(s->lm, text, len, add_special, s->prompt + at, cap, s->err,
                               sizeof s->err);
    if (n > cap && s->lm->ctx == INT64_MAX) {
        int32_t *p = realloc(s->prompt, (size_t)(at + n) * sizeof *p);
        if (!p)
            return fail(s, "%s", "out of memory");
        s->prompt = p;
        s->prompt_cap = at + n;
        n = gp_lm_tokenize(s->lm, text, len, add_special, s->prompt + at, n, s->err,
                           sizeof s->err);
    }
    return n;
}

int gp_seq_start_text(gp_seq *s, const char *text, size_t len, int keep_prefix,
                      const gp_gen_opts *g)
{
    if (begin(s, 0, g))
        return -1;
    int64_t n = encode(s, text, len, 1, 0);
    if (n < 0)
        return -1;
    if (n == 0)
        return fail(s, "%s", "the prompt is empty (no tokens)");
    if (n > s->lm->ctx)
        return too_long(s, n, "prompt");
    return feed(s, s->prompt, n, keep_prefix);
}

int gp_seq_start_chat(gp_seq *s, const gp_msg *msgs, size_t n_msgs, const gp_gen_opts *g)
{
    if (begin(s, 1, g))
        return -1;
    if (!s->ids)
        return fail(s, "%s", "a chat needs a plan with a KV cache (an attention context)");
    int64_t len = gp_lm_chat_apply(s->lm, msgs, n_msgs, 1, s->fmt, s->fmt_cap, s->err,
                                   sizeof s->err);
    if (len >= 0 && (size_t)len >= s->fmt_cap) {
        if (grow(s, &s->fmt, &s->fmt_cap, (size_t)len + 1))
            return -1;
        len = gp_lm_chat_apply(s->lm, msgs, n_msgs, 1, s->fmt, s->fmt_cap, s->err, sizeof s->err);
    }
    if (len < 0)
        return -1;
    int64_t n;
    if (s->text_valid && s->n_past > 0 && s->n_text < (size_t)len &&
        !memcmp(s->fmt, s->text, s->n_text)) {
        /* The usual turn: the conversation continues the cached text; only the rest is new. */
        int64_t k = encode(s, s->fmt + s->n_text, (size_t)len - s->n_text, 0, s->n_past);
        if (k < 0)
            return -1;
        n = s->n_past + k;
        if (n < s->lm->ctx)
            memcpy(s->prompt, s->ids, (size_t)s->n_past * sizeof *s->ids);
    } else if ((n = encode(s, s->fmt, (size_t)len, 0, 0)) < 0) {
        return -1;
    }
    if (n >= s->lm->ctx)
        return too_long(s, n, "conversation");
    if (n == 0)
        return fail(s, "%s", "the conversation encodes to no tokens");
    /* The cache's text, with room for the reply's. */
    size_t need = (size_t)len + (size_t)(s->lm->ctx - n + 1) * s->lm->max_piece + 1;
    if (grow(s, &s->text, &s->text_cap, need))
        return -1;
    int rc = feed(s, s->prompt, n, 1);
    if (rc)
        return rc;
    memcpy(s->text, s->fmt, (size_t)len);
    s->n_text = s->reply_at = (size_t)len;
    s->text[s->n_text] = '\0';
    s->text_valid = 1;
    return 0;
}

/* ---- generating ---- */

static int finish(gp_seq *s, gp_finish f)
{
    text_flush(s);
    s->r.finish = f;
    s->started = 0;
    return (int)f;
}

int gp_seq_step(gp_seq *s)
{
    if (s->batch)
        return fail(s, "%s", "a batch's sequences step in gp_batch_step");
    int32_t id = 0;
    int done = 0, rc = gp_seq_step_begin(s, &id, &done);
    if (rc != GP_SEQ_STEP_EVAL)
        return rc;
    if (eval_chunk(s, &id, 1, s->n_past, 0))
        return -1;
    return gp_seq_step_end(s, id, done);
}

int gp_seq_step_begin(gp_seq *s, int32_t *out, int *done_out)
{
    if (!s->started) {
        if (s->r.finish != GP_FINISH_NONE)
            return (int)s->r.finish;
        return fail(s, "%s", "no generation started");
    }
    const gp_lm *lm = s->lm;
    if (atomic_load(&s->cancel))
        return finish(s, GP_FINISH_CANCEL);
    if (s->g.max_tokens == 0 || s->r.completion_tokens == s->g.max_tokens)
        return finish(s, GP_FINISH_LENGTH);
    int32_t id = s->pending;
    if (!s->g.ignore_eos && (id == s->g.eos || gp_lm_is_eog(lm, id))) {
        s->r.stop_token = id;
        return finish(s, GP_FINISH_STOP);
    }
    s->r.completion_tokens++;
    if (s->g.on_token && s->g.on_token(s->g.user, id))
        atomic_store(&s->cancel, 1);
    if (lm->tok) {
        int n = gp_tok_stream_push(lm->tok, &s->st, id, s->piece, s->piece_cap);
        if (n > 0)
            text_put(s, s->piece, (size_t)n);
    }
    /* A chat evaluates its last token too, so that the next turn finds the reply cached. */
    int done = s->stopped || s->r.completion_tokens == s->g.max_tokens;
    if (done && !s->chat)
        return finish(s, s->stopped ? GP_FINISH_STOP : GP_FINISH_LENGTH);
    if (s->n_past >= s->limit && !s->g.restart)
        return finish(s, GP_FINISH_CONTEXT);
    if (s->n_past >= s->limit) { /* as gp_seq_start of this one id would: the sampler too */
        s->n_past = 0;
        gp_sampler_reset(s->sampler);
        if (gp_session_reset(s->s))
            return fail(s, "%s", gp_session_error(s->s));
    }
    *out = id;
    *done_out = done;
    return GP_SEQ_STEP_EVAL;
}

int gp_seq_step_end(gp_seq *s, int32_t id, int done)
{
    const gp_lm *lm = s->lm;
    gp_sampler_accept(s->sampler, id);
    if (s->ids)
        s->ids[s->n_past] = id;
    s->n_past++;
    if (s->chat && s->text_valid) {
        int pn = gp_tok_piece(lm->tok, id, 1, s->text + s->n_text, s->text_cap - s->n_text);
        if (pn > 0 && (size_t)pn < s->text_cap - s->n_text)
            s->n_text += (size_t)pn;
        s->text[s->n_text] = '\0'; /* gp_seq_reply's text is a string */
    }
    if (done)
        return finish(s, s->stopped ? GP_FINISH_STOP : GP_FINISH_LENGTH);
    s->pending = pick(s);
    return GP_FINISH_NONE;
}

/* ---- a batch's sequences (text/batch.c) ---- */

int gp_seq_running(const gp_seq *s) { return s->prefill ? 2 : s->started ? 1 : 0; }
void gp_seq_set_limit(gp_seq *s, int64_t positions) { s->limit = positions; }

int64_t gp_seq_prompt_next(gp_seq *s, int64_t room, const int32_t **ids, int64_t *pos0)
{
    if (!s->prefill)
        return 0;
    int64_t k = s->n_feed - s->fed < room ? s->n_feed - s->fed : room;
    *ids = s->prompt + s->fed;
    *pos0 = s->fed;
    return k;
}

int gp_seq_prompt_took(gp_seq *s, int64_t k, const float *row, int64_t next, double dt)
{
    memcpy(s->ids + s->fed, s->prompt + s->fed, (size_t)k * sizeof *s->ids);
    s->fed += k;
    s->n_past = s->fed;
    if (s->fed < s->n_feed) {
        s->r.prompt_evals++;
        s->r.prompt_rows += k;
        s->r.prompt_ms += dt;
        return 0;
    }
    if (gp_seq_take_row(s, row, next, k, 1, dt)) {
        s->prefill = 0;
        return -1;
    }
    gp_seq_fed(s, s->prompt, s->n_feed);
    return 0;
}

static int run(gp_seq *s, gp_gen_result *r)
{
    int rc;
    while ((rc = gp_seq_step(s)) == GP_FINISH_NONE)
        ;
    if (r)
        *r = s->r;
    return rc < 0 ? -1 : 0;
}

int gp_seq_generate(gp_seq *s, const char *prompt, const gp_gen_opts *g, gp_gen_result *r)
{
    int rc = gp_seq_start_text(s, prompt, strlen(prompt), 1, g);
    if (rc) {
        if (r)
            *r = s->r;
        return rc;
    }
    return run(s, r);
}

int gp_seq_chat(gp_seq *s, const gp_msg *msgs, size_t n, const gp_gen_opts *g, gp_gen_result *r)
{
    int rc = gp_seq_start_chat(s, msgs, n, g);
    if (rc) {
        if (r)
            *r = s->r;
        return rc;
    }
    return run(s, r);
}
