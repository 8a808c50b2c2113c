/* The engine of server/engine.h: the slots of a gp_batch (a ragged-batch plan), a FIFO of waiting
 * jobs, one thread that admits a job into the free slot whose cache holds the longest prefix of
 * its prompt, starts it when the KV pool has the blocks its prompt and max_tokens need, and runs
 * one batched eval a step for every running sequence (gp_batch_step), writing text and tokens
 * into each job's ring for the HTTP side. */
#define _GNU_SOURCE /* pthread_condattr_setclock */
#include "server/engine.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gplan/alloc_interpose.h"

enum { REC_TEXT = 1, REC_TOKEN = 2 };

/* One record of a ring: a header, then len bytes (text, or a gp_job_token). */
typedef struct {
    uint32_t kind, len;
} rec_head;

struct gp_job {
    gp_engine *e;
    gp_job *next;              /* the free list or the queue (engine mutex) */
    int released, engine_done; /* both set: back to the free list (engine mutex) */
    int in_use, queued;

    pthread_mutex_t mu;        /* the ring, state and status */
    pthread_cond_t cv;         /* output, or the end */
    unsigned char *ring;       /* [ring_cap] records; head and tail count bytes ever written/read */
    size_t ring_cap, head, tail;
    gp_job_state state;
    gp_job_status st;
    atomic_int cancel;

    int32_t *prompt;           /* [prompt_cap] */
    int64_t n_prompt, prompt_cap;
    gp_job_params p;
    char stops[GP_ENGINE_MAX_STOPS][257];
};

typedef struct {
    gp_engine *e;
    gp_seq *seq;  /* the batch's sequence of this slot */
    int index;
    gp_job *job;  /* running here, or NULL */
    int fresh;    /* admitted, prompt not fed yet */
} slot;

struct gp_engine {
    gp_lm *lm;
    gp_engine_opts o;
    int64_t ctx, vocab; /* positions a slot holds; logits a sampler sees */
    size_t max_piece, ring_cap, reserve; /* reserve: ring room one step may need */
    gp_batch *batch;
    slot *slots;        /* [n_slots] */

    pthread_mutex_t mu; /* everything below and the jobs' links */
    pthread_cond_t cv;  /* a submission, a cancel, room in a ring, stop */
    pthread_t thread;
    int started, stop, closed;
    atomic_int ready;
    gp_job *queue_head, *queue_tail, *free_jobs;
    int waiting;
    gp_engine_stats stats;
    char err[512];      /* a warm-up failure */
};

static void timespec_in(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static void cond_init(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
}

static long engine_allocs(void)
{
    gp_alloc_interpose_counts c;
    gp_alloc_interpose_read(&c);
    return c.marked;
}

/* ---- rings (engine thread writes, HTTP side reads) ---- */

static size_t ring_room(const gp_job *j) { return j->ring_cap - (j->head - j->tail); }

static void ring_copy_in(gp_job *j, const void *src, size_t n)
{
    size_t at = j->head % j->ring_cap, first = j->ring_cap - at < n ? j->ring_cap - at : n;
    memcpy(j->ring + at, src, first);
    memcpy(j->ring, (const unsigned char *)src + first, n - first);
    j->head += n;
}

static void ring_copy_out(gp_job *j, void *dst, size_t n)
{
    size_t at = j->tail % j->ring_cap, first = j->ring_cap - at < n ? j->ring_cap - at : n;
    memcpy(dst, j->ring + at, first);
    memcpy((unsigned char *)dst + first, j->ring, n - first);
    j->tail += n;
}

/* A record; the step's reserve guarantees room (a record that does not fit ends the job). */
static int ring_put(gp_job *j, uint32_t kind, const void *data, size_t len)
{
    rec_head h = {kind, (uint32_t)len};
    pthread_mutex_lock(&j->mu);
    int ok = ring_room(j) >= sizeof h + len;
    if (ok) {
        ring_copy_in(j, &h, sizeof h);
        ring_copy_in(j, data, len);
        pthread_cond_signal(&j->cv);
    }
    pthread_mutex_unlock(&j->mu);
    return ok ? 0 : -1;
}

/* ---- the callbacks of a running sequence (engine thread) ---- */

static int on_text(void *user, const char *text, size_t len)
{
    slot *s = user;
    return ring_put(s->job, REC_TEXT, text, len) ? 1 : 0;
}

/* Log-softmax of the logits id was picked from, and the top alternatives. */
static int on_token(void *user, int32_t id)
{
    slot *s = user;
    gp_job *j = s->job;
    if (!j->p.logprobs)
        return 0;
    const float *row = gp_seq_logits(s->seq);
    int64_t n = s->e->vocab;
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (row[i] > mx)
            mx = row[i];
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += exp((double)row[i] - mx);
    double lse = mx + log(sum);
    gp_job_token t;
    memset(&t, 0, sizeof t);
    t.id = id;
    t.logprob = (float)(row[id] - lse);
    int k = j->p.top_logprobs;
    for (int64_t i = 0; i < n && k > 0; i++) {
        float v = row[i];
        if (t.n_top == k && v <= row[t.top_id[k - 1]])
            continue;
        int at = t.n_top < k ? t.n_top++ : k - 1;
        while (at > 0 && row[t.top_id[at - 1]] < v) {
            t.top_id[at] = t.top_id[at - 1];
            at--;
        }
        t.top_id[at] = (int32_t)i;
    }
    for (int i = 0; i < t.n_top; i++)
        t.top_logprob[i] = (float)(row[t.top_id[i]] - lse);
    return ring_put(j, REC_TOKEN, &t, sizeof t) ? 1 : 0;
}

/* ---- jobs: the HTTP side ---- */

gp_job *gp_engine_job_new(gp_engine *e)
{
    pthread_mutex_lock(&e->mu);
    gp_job *j = e->free_jobs;
    if (j)
        e->free_jobs = j->next;
    pthread_mutex_unlock(&e->mu);
    if (!j) {
        if (!(j = calloc(1, sizeof *j)))
            return NULL;
        j->e = e;
        j->ring_cap = e->ring_cap;
        j->prompt_cap = e->ctx;
        j->ring = malloc(j->ring_cap);
        j->prompt = malloc((size_t)j->prompt_cap * sizeof *j->prompt);
        if (!j->ring || !j->prompt) {
            free(j->ring);
            free(j->prompt);
            free(j);
            return NULL;
        }
        pthread_mutex_init(&j->mu, NULL);
        cond_init(&j->cv);
    }
    j->next = NULL;
    j->released = j->engine_done = j->queued = 0;
    j->in_use = 1;
    j->head = j->tail = 0;
    j->state = GP_JOB_QUEUED;
    memset(&j->st, 0, sizeof j->st);
    atomic_store(&j->cancel, 0);
    j->n_prompt = 0;
    return j;
}

int32_t *gp_job_prompt(gp_job *j, int64_t *cap)
{
    *cap = j->prompt_cap;
    return j->prompt;
}

int gp_job_submit(gp_job *j, int64_t n, const gp_job_params *p, char *err, size_t err_len)
{
    gp_engine *e = j->e;
    if (n < 1 || n > j->prompt_cap || p->n_stop < 0 || p->n_stop > GP_ENGINE_MAX_STOPS ||
        p->top_logprobs < 0 || p->top_logprobs > GP_ENGINE_MAX_TOP) {
        snprintf(err, err_len, "bad job (%lld prompt ids)", (long long)n);
        return -1;
    }
    j->n_prompt = n;
    j->p = *p;
    for (int i = 0; i < p->n_stop; i++) {
        snprintf(j->stops[i], sizeof j->stops[i], "%s", p->stop[i]);
        j->p.stop[i] = j->stops[i];
    }
    pthread_mutex_lock(&e->mu);
    int full = e->closed || e->stop || e->waiting >= e->o.n_queue + e->stats.free_slots;
    if (full) {
        e->stats.rejected_queue_full += !e->closed;
        snprintf(err, err_len, "%s", e->closed ? "the server is shutting down"
                                               : "the queue is full: try again later");
    } else {
        if (e->queue_tail)
            e->queue_tail->next = j;
        else
            e->queue_head = j;
        e->queue_tail = j;
        e->waiting++;
        j->queued = 1;
        pthread_cond_signal(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    return full ? -1 : 0;
}

gp_job_state gp_job_drain(gp_job *j, int timeout_ms, size_t max_bytes,
                          void (*text_cb)(void *user, const char *text, size_t len),
                          void (*token_cb)(void *user, const gp_job_token *t), void *user,
                          gp_job_status *st)
{
    struct timespec until;
    timespec_in(&until, timeout_ms);
    unsigned char buf[16384];
    gp_job_state state;
    size_t taken = 0;
    pthread_mutex_lock(&j->mu);
    while (j->head == j->tail && j->state < GP_JOB_DONE && timeout_ms > 0 &&
           pthread_cond_timedwait(&j->cv, &j->mu, &until) == 0)
        ;
    for (;;) {
        /* Whole records into buf, then the callbacks with the ring unlocked. */
        size_t n = 0;
        int was_tight = ring_room(j) < j->e->reserve;
        while (j->head != j->tail && (!max_bytes || taken < max_bytes)) {
            rec_head h;
            size_t at = j->tail;
            ring_copy_out(j, &h, sizeof h);
            if (n + sizeof h + h.len > sizeof buf) {
                if (!n) { /* larger than any step writes: never happens, but never stalls */
                    j->tail += h.len;
                    continue;
                }
                j->tail = at;
                break;
            }
            memcpy(buf + n, &h, sizeof h);
            ring_copy_out(j, buf + n + sizeof h, h.len);
            n += sizeof h + h.len;
            taken += sizeof h + h.len;
        }
        /* DONE with records left would end the response before them. */
        state = j->head == j->tail ? j->state : j->state < GP_JOB_DONE ? j->state : GP_JOB_RUNNING;
        if (st)
            *st = j->st;
        pthread_mutex_unlock(&j->mu);
        if (was_tight && n) { /* the engine may be holding this job back for room */
            pthread_mutex_lock(&j->e->mu);
            pthread_cond_signal(&j->e->cv);
            pthread_mutex_unlock(&j->e->mu);
        }
        for (size_t at = 0; at < n;) {
            rec_head h;
            memcpy(&h, buf + at, sizeof h);
            at += sizeof h;
            if (h.kind == REC_TEXT && text_cb) {
                text_cb(user, (const char *)buf + at, h.len);
            } else if (h.kind == REC_TOKEN && token_cb) {
                gp_job_token t;
                memcpy(&t, buf + at, sizeof t);
                token_cb(user, &t);
            }
            at += h.len;
        }
        pthread_mutex_lock(&j->mu);
        if (j->head == j->tail || (max_bytes && taken >= max_bytes))
            break;
    }
    /* The state read with the last records: a job that ended after them is seen next time. */
    pthread_mutex_unlock(&j->mu);
    return state;
}

void gp_job_cancel(gp_job *j)
{
    atomic_store(&j->cancel, 1);
    pthread_mutex_lock(&j->e->mu);
    pthread_cond_signal(&j->e->cv);
    pthread_mutex_unlock(&j->e->mu);
}

/* Under e->mu: back to the free list once both sides are done. */
static void job_maybe_free(gp_engine *e, gp_job *j)
{
    if (j->released && j->engine_done && j->in_use) {
        j->in_use = 0;
        j->next = e->free_jobs;
        e->free_jobs = j;
    }
}

void gp_job_release(gp_job *j)
{
    if (!j)
        return;
    gp_engine *e = j->e;
    atomic_store(&j->cancel, 1);
    pthread_mutex_lock(&e->mu);
    j->released = 1;
    /* Never queued (refused, or the caller gave up before submitting): the engine never saw it. */
    if (!j->queued)
        j->engine_done = 1;
    job_maybe_free(e, j);
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

/* ---- the engine thread ---- */

static void job_end(gp_job *j, gp_job_state state, const gp_gen_result *r, const char *msg)
{
    pthread_mutex_lock(&j->mu);
    j->state = state;
    if (r) {
        j->st.finish = r->finish;
        j->st.prompt_tokens = r->prompt_tokens;
        j->st.cached_tokens = r->cached_tokens;
        j->st.completion_tokens = r->completion_tokens;
    }
    j->st.state = state;
    if (msg)
        snprintf(j->st.message, sizeof j->st.message, "%s", msg);
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* Under e->mu: the slot's job is over (r NULL: never started). */
static void slot_finish(gp_engine *e, slot *s, gp_job_state state, const gp_gen_result *r,
                        const char *msg)
{
    gp_job *j = s->job;
    job_end(j, state, r, msg);
    if (r) {
        e->stats.prompt_tokens += r->prompt_tokens;
        e->stats.cached_tokens += r->cached_tokens;
        e->stats.completion_tokens += r->completion_tokens;
    }
    e->stats.finished[state == GP_JOB_ERROR ? 0 : r ? r->finish : GP_FINISH_CANCEL]++;
    j->engine_done = 1;
    job_maybe_free(e, j);
    s->job = NULL;
    e->stats.running--;
    e->stats.free_slots++;
}

/* Under e->mu: the free slot whose cache shares the longest prefix with the job's prompt; of
 * equals, the one holding least (an empty slot before another job's prefix). */
static slot *pick_slot(gp_engine *e, const gp_job *j)
{
    slot *best = NULL;
    int64_t best_n = -1, best_len = 0;
    for (int i = 0; i < e->o.n_slots; i++) {
        slot *s = &e->slots[i];
        if (s->job)
            continue;
        const int32_t *ids = gp_seq_tokens(s->seq);
        int64_t len = gp_seq_length(s->seq), k = 0;
        while (ids && k < len && k < j->n_prompt && ids[k] == j->prompt[k])
            k++;
        if (k > best_n || (k == best_n && len < best_len)) {
            best = s;
            best_n = k;
            best_len = len;
        }
    }
    return best;
}

/* Under e->mu: queued jobs into free slots (a cancelled one ends without a slot). */
static void admit(gp_engine *e)
{
    while (e->queue_head && e->stats.free_slots > 0) {
        gp_job *j = e->queue_head;
        e->queue_head = j->next;
        if (!e->queue_head)
            e->queue_tail = NULL;
        j->next = NULL;
        e->waiting--;
        if (atomic_load(&j->cancel)) {
            gp_gen_result r;
            memset(&r, 0, sizeof r);
            r.finish = GP_FINISH_CANCEL;
            r.prompt_tokens = j->n_prompt;
            job_end(j, GP_JOB_DONE, &r, NULL);
            e->stats.finished[GP_FINISH_CANCEL]++;
            j->engine_done = 1;
            job_maybe_free(e, j);
            continue;
        }
        slot *s = pick_slot(e, j);
        s->job = j;
        s->fresh = 1;
        e->stats.running++;
        e->stats.free_slots--;
    }
}

/* Under e->mu: a job the pool has no room for yet goes back to the queue's head. */
static void requeue(gp_engine *e, slot *s)
{
    gp_job *j = s->job;
    j->next = e->queue_head;
    e->queue_head = j;
    if (!e->queue_tail)
        e->queue_tail = j;
    e->waiting++;
    s->job = NULL;
    s->fresh = 0;
    e->stats.running--;
    e->stats.free_slots++;
}

/* Starts a fresh job's prompt (the batch evaluates it). 0; 1 when the KV pool has no room for it
 * yet (back in the queue); -1 with the job ended. */
static int slot_start(gp_engine *e, slot *s)
{
    gp_job *j = s->job;
    gp_job_params *p = &j->p;
    /* in place, allocating nothing: the API leaves repeat_last_n at its default (64) */
    int rc = gp_seq_set_sampler(s->seq, &p->so);
    gp_gen_opts g = gp_gen_defaults();
    g.max_tokens = p->max_tokens;
    g.stop = p->stop;
    g.n_stop = p->n_stop;
    g.ignore_eos = p->ignore_eos;
    g.on_text = on_text;
    g.on_token = on_token;
    g.user = s;
    pthread_mutex_lock(&j->mu);
    j->state = GP_JOB_RUNNING;
    j->st.state = GP_JOB_RUNNING;
    pthread_mutex_unlock(&j->mu);
    if (rc == 0)
        rc = gp_seq_start(s->seq, j->prompt, j->n_prompt, 1, &g);
    s->fresh = 0;
    if (rc == GP_SEQ_NO_ROOM) {
        pthread_mutex_lock(&j->mu);
        j->state = j->st.state = GP_JOB_QUEUED;
        pthread_mutex_unlock(&j->mu);
        pthread_mutex_lock(&e->mu);
        requeue(e, s);
        pthread_mutex_unlock(&e->mu);
        return 1;
    }
    if (rc) {
        gp_gen_result r;
        gp_seq_result(s->seq, &r);
        pthread_mutex_lock(&e->mu);
        slot_finish(e, s, GP_JOB_ERROR, &r, gp_seq_error(s->seq));
        pthread_mutex_unlock(&e->mu);
        return -1;
    }
    return 0;
}

/* The queue's head when nothing runs and the pool still has no room for it: it never will. */
static void fail_unfit(gp_engine *e)
{
    pthread_mutex_lock(&e->mu);
    gp_job *j = e->queue_head;
    if (!j) {
        pthread_mutex_unlock(&e->mu);
        return;
    }
    e->queue_head = j->next;
    if (!e->queue_head)
        e->queue_tail = NULL;
    j->next = NULL;
    e->waiting--;
    char msg[256];
    snprintf(msg, sizeof msg, "the KV pool holds %lld positions, fewer than this request's "
             "prompt and max_tokens need",
             (long long)(gp_batch_blocks(e->batch) * gp_batch_block_rows(e->batch)));
    gp_gen_result r;
    memset(&r, 0, sizeof r);
    r.prompt_tokens = j->n_prompt;
    job_end(j, GP_JOB_ERROR, &r, msg);
    e->stats.finished[0]++;
    j->engine_done = 1;
    job_maybe_free(e, j);
    pthread_mutex_unlock(&e->mu);
}

/* Before a step: cancels passed on, and a job whose reader is behind held out of it. */
static void slot_prepare(gp_engine *e, slot *s)
{
    gp_job *j = s->job;
    if (atomic_load(&j->cancel)) {
        gp_seq_cancel(s->seq);
        gp_batch_hold(e->batch, s->index, 0);
        return;
    }
    pthread_mutex_lock(&j->mu);
    int room = ring_room(j) >= e->reserve;
    pthread_mutex_unlock(&j->mu);
    gp_batch_hold(e->batch, s->index, !room);
}

/* After a step: a sequence that is idle now has finished (or failed alone). 1 when it ended. */
static int slot_check(gp_engine *e, slot *s, const char *batch_err)
{
    if (!batch_err && gp_batch_state(e->batch, s->index))
        return 0;
    gp_gen_result r;
    gp_seq_result(s->seq, &r);
    const char *msg = batch_err ? batch_err : gp_seq_error(s->seq);
    int failed = batch_err || (r.finish == GP_FINISH_NONE && msg[0]);
    if (batch_err)
        gp_seq_reset(s->seq);
    pthread_mutex_lock(&e->mu);
    slot_finish(e, s, failed ? GP_JOB_ERROR : GP_JOB_DONE, &r, failed ? msg : NULL);
    pthread_mutex_unlock(&e->mu);
    return 1;
}

/* Each slot's buffers at their largest (a generation as long as the context: a start sizes them
 * before it asks the pool for blocks) and the batch's session through its evals, one slot at a
 * time, so serving allocates nothing. */
static int warm_up(gp_engine *e)
{
    for (int i = 0; i < e->o.n_slots; i++) {
        gp_seq *q = e->slots[i].seq;
        int32_t id = 0;
        gp_gen_opts g = gp_gen_defaults();
        g.max_tokens = -1;
        g.ignore_eos = 1;
        int rc = gp_seq_start(q, &id, 1, 0, &g);
        if (rc == GP_SEQ_NO_ROOM)
            continue; /* the pool holds fewer than a context for it: the buffers are grown */
        for (int k = 0; rc == 0 && k < 2; k++)
            rc = gp_batch_step(e->batch) < 0 ? -1 : 0;
        gp_seq_cancel(q);
        if (rc == 0)
            rc = gp_batch_step(e->batch) < 0 ? -1 : 0;
        if (rc) {
            snprintf(e->err, sizeof e->err, "warm-up of slot %d: %s%s", i, gp_seq_error(q),
                     gp_batch_error(e->batch));
            return -1;
        }
        gp_seq_reset(q);
    }
    return 0;
}

static void *engine_main(void *arg)
{
    gp_engine *e = arg;
    if (e->o.alloc_mark)
        gp_alloc_interpose_mark_thread(1);
    long a0 = engine_allocs();
    int warm = warm_up(e);
    pthread_mutex_lock(&e->mu);
    e->stats.warmup_allocs = engine_allocs() - a0;
    long base = engine_allocs();
    if (warm) {
        e->closed = 1;
        pthread_mutex_unlock(&e->mu);
        return NULL;
    }
    atomic_store(&e->ready, 1);
    for (;;) {
        admit(e);
        e->stats.kv_free = gp_batch_free_blocks(e->batch) * gp_batch_block_rows(e->batch);
        e->stats.waiting = e->waiting;
        e->stats.allocs = engine_allocs() - base;
        if (e->stats.running == 0) {
            if (e->stop && !e->queue_head)
                break;
            pthread_cond_wait(&e->cv, &e->mu);
            continue;
        }
        pthread_mutex_unlock(&e->mu);
        /* Starts in admission order until the pool has no room (the rest wait in the queue),
         * then one eval for everything running. */
        int progress = 0, blocked = 0;
        for (int i = 0; i < e->o.n_slots; i++) {
            slot *s = &e->slots[i];
            if (!s->job || !s->fresh)
                continue;
            if (blocked) { /* first come, first served: none starts before the blocked one */
                pthread_mutex_lock(&e->mu);
                requeue(e, s);
                pthread_mutex_unlock(&e->mu);
                continue;
            }
            int rc = slot_start(e, s);
            blocked = rc == 1;
            progress |= rc != 1;
        }
        for (int i = 0; i < e->o.n_slots; i++)
            if (e->slots[i].job)
                slot_prepare(e, &e->slots[i]);
        int64_t evals = gp_batch_evals(e->batch);
        int rc = gp_batch_step(e->batch);
        progress |= gp_batch_evals(e->batch) != evals;
        int running = 0;
        for (int i = 0; i < e->o.n_slots; i++)
            if (e->slots[i].job && !e->slots[i].fresh) {
                int ended = slot_check(e, &e->slots[i], rc < 0 ? gp_batch_error(e->batch) : NULL);
                progress |= ended;
                running += !ended;
            }
        /* A job the empty pool cannot hold would wait forever: it ends with the reason. */
        if (blocked && !running)
            fail_unfit(e);
        pthread_mutex_lock(&e->mu);
        e->stats.steps++;
        if (!progress) {
            struct timespec until;
            timespec_in(&until, 5);
            pthread_cond_timedwait(&e->cv, &e->mu, &until);
        }
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* ---- the engine ---- */

gp_engine_opts gp_engine_defaults(void)
{
    gp_engine_opts o = {4, 16, 1, 64};
    return o;
}

gp_engine *gp_engine_new(gp_lm *lm, const gp_engine_opts *o, char *err, size_t err_len)
{
    gp_engine_opts defaults = gp_engine_defaults();
    if (!o)
        o = &defaults;
    if (o->n_slots < 1 || o->n_queue < 0) {
        snprintf(err, err_len, "gp_engine_new: %d slots, %d queued: need >= 1 and >= 0",
                 o->n_slots, o->n_queue);
        return NULL;
    }
    if (!gp_lm_has_tokenizer(lm) || gp_lm_context(lm) <= 0) {
        snprintf(err, err_len, "gp_engine_new: the model needs a tokenizer and a KV cache");
        return NULL;
    }
    gp_engine *e = calloc(1, sizeof *e);
    if (!e) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    e->lm = lm;
    e->o = *o;
    e->ctx = gp_lm_context(lm);
    e->vocab = gp_lm_tokenizer_vocab(lm); /* the ids a sampler sees: the engine needs a tokenizer */
    char piece[4096];
    for (int32_t id = 0; id < e->vocab; id++) {
        int64_t n = gp_lm_detokenize(lm, &id, 1, piece, sizeof piece);
        if (n > (int64_t)e->max_piece)
            e->max_piece = (size_t)n;
    }
    /* One step writes at most a token record, its text and what stop strings held back. */
    e->reserve = 2 * sizeof(rec_head) + sizeof(gp_job_token) + 2 * e->max_piece + 2 * 257 + 64;
    e->ring_cap = 4 * e->reserve > 32768 ? 4 * e->reserve : 32768;
    pthread_mutex_init(&e->mu, NULL);
    cond_init(&e->cv);
    e->slots = calloc((size_t)o->n_slots, sizeof *e->slots);
    if (!e->slots) {
        snprintf(err, err_len, "out of memory");
        gp_engine_free(e);
        return NULL;
    }
    if (!(e->batch = gp_batch_new(lm, err, err_len))) {
        gp_engine_free(e);
        return NULL;
    }
    if (o->n_slots > gp_batch_slots(e->batch)) {
        snprintf(err, err_len, "%d slots: the plan holds a batch of %d sequences (compile it with "
                 "-D n_seq=%d)", o->n_slots, gp_batch_slots(e->batch), o->n_slots);
        gp_engine_free(e);
        return NULL;
    }
    gp_batch_set_prompt_budget(e->batch, o->prompt_budget);
    for (int i = 0; i < o->n_slots; i++) {
        e->slots[i].e = e;
        e->slots[i].index = i;
        e->slots[i].seq = gp_batch_seq(e->batch, i);
    }
    e->stats.n_slots = e->stats.free_slots = o->n_slots;
    e->stats.kv_positions = e->stats.kv_free =
        gp_batch_blocks(e->batch) * gp_batch_block_rows(e->batch);
    e->stats.alloc_counting = o->alloc_mark && gp_alloc_interpose_active();
    if (pthread_create(&e->thread, NULL, engine_main, e)) {
        snprintf(err, err_len, "gp_engine_new: cannot start the engine thread");
        gp_engine_free(e);
        return NULL;
    }
    e->started = 1;
    return e;
}

int gp_engine_ready(const gp_engine *e) { return atomic_load(&((gp_engine *)e)->ready); }
int64_t gp_engine_context(const gp_engine *e) { return e->ctx; }
size_t gp_engine_max_piece(const gp_engine *e) { return e->max_piece; }

const char *gp_engine_error(gp_engine *e)
{
    pthread_mutex_lock(&e->mu);
    const char *m = e->closed && !atomic_load(&e->ready) ? e->err : "";
    pthread_mutex_unlock(&e->mu);
    return m;
}

void gp_engine_close(gp_engine *e)
{
    pthread_mutex_lock(&e->mu);
    e->closed = 1;
    pthread_mutex_unlock(&e->mu);
}

void gp_engine_cancel_all(gp_engine *e)
{
    pthread_mutex_lock(&e->mu);
    for (gp_job *j = e->queue_head; j; j = j->next)
        atomic_store(&j->cancel, 1);
    for (int i = 0; i < e->o.n_slots; i++)
        if (e->slots[i].job)
            atomic_store(&e->slots[i].job->cancel, 1);
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

void gp_engine_get_stats(gp_engine *e, gp_engine_stats *s)
{
    pthread_mutex_lock(&e->mu);
    *s = e->stats;
    pthread_mutex_unlock(&e->mu);
}

void gp_engine_free(gp_engine *e)
{
    if (!e)
        return;
    if (e->started) {
        gp_engine_cancel_all(e);
        pthread_mutex_lock(&e->mu);
        e->stop = 1;
        e->closed = 1;
        pthread_cond_signal(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
    }
    gp_batch_free(e->batch);
    free(e->slots);
    for (gp_job *j = e->free_jobs, *n; j; j = n) {
        n = j->next;
        pthread_mutex_destroy(&j->mu);
        pthread_cond_destroy(&j->cv);
        free(j->ring);
        free(j->prompt);
        free(j);
    }
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}
