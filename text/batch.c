/* gp_batch: the sequences of a ragged-batch plan (-D n_seq) evaluated together: one session, a
 * block table over its KV pool (inputs seq, kv_row and kv_table, docs/language.md "Ragged
 * batches"), free blocks on a stack, and each step's tokens gathered into buffers sized by the
 * plan, so that steps allocate nothing. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "plan/plan.h"
#include "runtime/lora.h" /* gp_model_plan */
#include "text/lm_impl.h"

struct gp_batch {
    gp_lm *lm;
    gp_session *s;
    int n_seq;
    int64_t block, seq_blocks, n_blocks; /* rows a block; blocks a table row holds; the pool's */
    gp_seq **seqs;                       /* [n_seq] */
    int32_t *table;                      /* [n_seq, seq_blocks] each slot's blocks, in order */
    int64_t *owned;                      /* [n_seq] blocks each slot holds (its row's first) */
    int64_t *idle_since;                 /* [n_seq] the eval count when it last ran */
    int64_t *started;                    /* [n_seq] its start's order (prompts: first come first) */
    unsigned char *held;                 /* [n_seq] left out of the steps (gp_batch_hold) */
    int32_t *free_blocks;                /* [n_blocks] a stack */
    int32_t *refs;                       /* [n_blocks] the slots holding each block (a shared
                                            prefix: full blocks only, never written again) */
    int64_t n_free, evals, starts;
    /* one eval: tokens, positions, sequences, pool rows; rows of logits and whose they are */
    int32_t *tok, *pos, *seq, *row, *rows;
    int *row_slot, *row_kind, *order;    /* row_kind: 1 a generated token, 2 a prompt chunk */
    int64_t *row_len;
    int64_t max_t, max_r;
    int64_t prompt_budget;               /* prompt tokens a step (gp_batch_set_prompt_budget) */
    char err[1024];
};

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* The plan's pool: kv_table's shape and the block rows of its attention. */
static int find_pool(gp_batch *b, char *err, size_t n)
{
    const gp_plan *p = gp_model_plan(b->lm->m);
    int table = -1;
    for (int i = 0; i < p->n_tensors && table < 0; i++)
        if (p->tensors[i].kind == GP_TENSOR_INPUT && p->tensors[i].name &&
            !strcmp(p->tensors[i].name, "kv_table") && p->tensors[i].ndim == 2)
            table = i;
    for (int k = 0; k < p->n_nodes && table >= 0; k++) {
        const gp_plan_node *nd = &p->nodes[k];
        if (nd->op != GP_OP_ATTENTION || nd->n_inputs != 6)
            continue;
        b->n_seq = (int)p->tensors[table].dims[0];
        b->seq_blocks = p->tensors[table].dims[1];
        b->block = nd->attrs.i[GP_ATTENTION_BLOCK];
        b->n_blocks = p->tensors[nd->inputs[1]].dims[0] / b->block;
        return 0;
    }
    snprintf(err, n, "%s: the plan holds one sequence (no ragged batch: plan it with n_seq > 0)",
             b->lm->plan_path[0] ? b->lm->plan_path : "model");
    return -1;
}

gp_batch *gp_batch_new(gp_lm *lm, char *err, size_t err_len)
{
    gp_batch *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    b->lm = lm;
    if (find_pool(b, err, err_len)) {
        free(b);
        return NULL;
    }
    gp_session_opts o = {lm->backend, lm->n_threads, lm->device};
    if (!(b->s = gp_session_new(lm->m, &o, err, err_len))) {
        free(b);
        return NULL;
    }
    b->max_t = lm->info.max_tokens;
    b->max_r = lm->info.rows ? lm->info.max_rows : b->max_t;
    b->prompt_budget = b->max_t;
    size_t ns = (size_t)b->n_seq, nt = (size_t)b->max_t;
    b->seqs = calloc(ns, sizeof *b->seqs);
    b->table = calloc(ns * (size_t)b->seq_blocks, sizeof *b->table);
    b->owned = calloc(ns, sizeof *b->owned);
    b->idle_since = calloc(ns, sizeof *b->idle_since);
    b->started = calloc(ns, sizeof *b->started);
    b->held = calloc(ns, 1);
    b->free_blocks = malloc((size_t)b->n_blocks * sizeof *b->free_blocks);
    b->refs = calloc((size_t)b->n_blocks, sizeof *b->refs);
    b->tok = malloc(nt * sizeof *b->tok);
    b->pos = malloc(nt * sizeof *b->pos);
    b->seq = malloc(nt * sizeof *b->seq);
    b->row = malloc(nt * sizeof *b->row);
    b->rows = malloc(ns * sizeof *b->rows);
    b->row_slot = malloc(ns * sizeof *b->row_slot);
    b->row_kind = malloc(ns * sizeof *b->row_kind);
    b->row_len = malloc(ns * sizeof *b->row_len);
    b->order = malloc(ns * sizeof *b->order);
    if (!b->seqs || !b->table || !b->owned || !b->idle_since || !b->started || !b->free_blocks ||
        !b->refs || !b->held ||
        !b->tok || !b->pos || !b->seq || !b->row || !b->rows || !b->row_slot || !b->row_kind ||
        !b->row_len || !b->order) {
        snprintf(err, err_len, "out of memory");
        gp_batch_free(b);
        return NULL;
    }
    if (b->max_r < b->n_seq) {
        snprintf(err, err_len, "the plan computes %lld rows of logits an eval, fewer than its %d "
                 "sequences (plan n_rows >= n_seq)", (long long)b->max_r, b->n_seq);
        gp_batch_free(b);
        return NULL;
    }
    for (int64_t i = 0; i < b->n_blocks; i++) /* block 0 on top */
        b->free_blocks[i] = (int32_t)(b->n_blocks - 1 - i);
    b->n_free = b->n_blocks;
    for (int i = 0; i < b->n_seq; i++)
        if (!(b->seqs[i] = gp_seq_new_in(lm, b, i, NULL, err, err_len))) {
            gp_batch_free(b);
            return NULL;
        }
    return b;
}

void gp_batch_free(gp_batch *b)
{
    if (!b)
        return;
    for (int i = 0; b->seqs && i < b->n_seq; i++)
        gp_seq_free(b->seqs[i]);
    gp_session_free(b->s);
    free(b->seqs);
    free(b->table);
    free(b->owned);
    free(b->idle_since);
    free(b->started);
    free(b->held);
    free(b->free_blocks);
    free(b->refs);
    free(b->tok);
    free(b->pos);
    free(b->seq);
    free(b->row);
    free(b->rows);
    free(b->row_slot);
    free(b->row_kind);
    free(b->row_len);
    free(b->order);
    free(b);
}

int gp_batch_slots(const gp_batch *b) { return b->n_seq; }
const char *gp_batch_error(const gp_batch *b) { return b->err; }
int64_t gp_batch_free_blocks(const gp_batch *b) { return b->n_free; }
int64_t gp_batch_blocks(const gp_batch *b) { return b->n_blocks; }
int64_t gp_batch_block_rows(const gp_batch *b) { return b->block; }
int64_t gp_batch_evals(const gp_batch *b) { return b->evals; }

gp_seq *gp_batch_seq(gp_batch *b, int slot)
{
    return slot >= 0 && slot < b->n_seq ? b->seqs[slot] : NULL;
}

void gp_batch_set_prompt_budget(gp_batch *b, int64_t tokens)
{
    b->prompt_budget = tokens > 0 && tokens < b->max_t ? tokens : b->max_t;
}

void gp_batch_hold(gp_batch *b, int slot, int hold)
{
    if (slot >= 0 && slot < b->n_seq)
        b->held[slot] = hold != 0;
}

int gp_batch_state(const gp_batch *b, int slot)
{
    return slot >= 0 && slot < b->n_seq ? gp_seq_running(b->seqs[slot]) : 0;
}

int gp_batch_pick_slot(const gp_batch *b, const int32_t *ids, int64_t n, int64_t *common)
{
    int best = -1;
    int64_t best_len = -1;
    for (int i = 0; i < b->n_seq; i++) {
        if (gp_seq_running(b->seqs[i]))
            continue;
        const int32_t *have = gp_seq_tokens(b->seqs[i]);
        int64_t m = gp_seq_length(b->seqs[i]), k = 0;
        while (k < n && k < m && have[k] == ids[k])
            k++;
        if (k > best_len || (k == best_len && b->idle_since[i] < b->idle_since[best])) {
            best = i;
            best_len = k;
        }
    }
    if (common)
        *common = best_len < 0 ? 0 : best_len;
    return best;
}

/* Slot i gives back its blocks past the first keep (its cache shrinks to keep * block rows); a
 * block returns to the pool when no slot holds it. */
static void release(gp_batch *b, int i, int64_t keep)
{
    int32_t *t = b->table + (size_t)i * (size_t)b->seq_blocks;
    while (b->owned[i] > keep) {
        int32_t blk = t[--b->owned[i]];
        if (--b->refs[blk] == 0)
            b->free_blocks[b->n_free++] = blk;
    }
    gp_seq_set_limit(b->seqs[i], b->owned[i] * b->block);
}

/* Blocks that releasing slot i past its first keep would return to the pool. */
static int64_t freed_by(const gp_batch *b, int i, int64_t keep)
{
    const int32_t *t = b->table + (size_t)i * (size_t)b->seq_blocks;
    int64_t k = 0;
    for (int64_t j = keep; j < b->owned[i]; j++)
        k += b->refs[t[j]] == 1;
    return k;
}

int64_t gp_batch_share(gp_batch *b, int slot, const int32_t *ids, int64_t n, int64_t keep,
                       int32_t *cache)
{
    int best = -1;
    int64_t best_blocks = keep / b->block;
    for (int j = 0; j < b->n_seq; j++) {
        if (j == slot)
            continue;
        const int32_t *have = gp_seq_tokens(b->seqs[j]);
        int64_t m = gp_seq_length(b->seqs[j]), k = 0;
        while (k < n - 1 && k < m && have[k] == ids[k])
            k++;
        if (k / b->block > best_blocks) {
            best = j;
            best_blocks = k / b->block;
        }
    }
    if (best < 0)
        return keep;
    /* The other slot's full blocks of the common prefix: they are never written again (its own
     * writes come after its length, a restart of it copies before writing). */
    release(b, slot, 0);
    const int32_t *from = b->table + (size_t)best * (size_t)b->seq_blocks;
    int32_t *t = b->table + (size_t)slot * (size_t)b->seq_blocks;
    for (int64_t j = 0; j < best_blocks; j++) {
        t[j] = from[j];
        b->refs[t[j]]++;
    }
    b->owned[slot] = best_blocks;
    memcpy(cache, gp_seq_tokens(b->seqs[best]), (size_t)(best_blocks * b->block) * sizeof *cache);
    return best_blocks * b->block;
}

int gp_batch_reserve(gp_batch *b, int slot, int64_t *keep_io, int64_t need, char *err, size_t n)
{
    int64_t keep = *keep_io;
    int64_t want = (need + b->block - 1) / b->block, kept = (keep + b->block - 1) / b->block;
    if (want > b->seq_blocks)
        want = b->seq_blocks;
    if (kept > b->owned[slot])
        kept = b->owned[slot];
    /* The block that the first new position goes to must be this slot's alone: a shared one is
     * left to the others, and its kept positions are evaluated again. */
    const int32_t *own = b->table + (size_t)slot * (size_t)b->seq_blocks;
    if (kept > keep / b->block && b->refs[own[keep / b->block]] > 1) {
        kept = keep / b->block;
        keep = kept * b->block;
    }
    /* What the pool can give: the free blocks, this slot's own past its prefix, and every idle
     * slot's cache (blocks others hold too are not counted). */
    int64_t have = b->n_free + freed_by(b, slot, kept);
    for (int i = 0; i < b->n_seq; i++)
        if (i != slot && !gp_seq_running(b->seqs[i]))
            have += freed_by(b, i, 0);
    if (want - kept > have) {
        snprintf(err, n, "the KV pool has %lld free blocks of %lld positions (%lld with idle "
                 "sequences' caches dropped); this sequence needs %lld more for %lld positions",
                 (long long)b->n_free, (long long)b->block, (long long)have,
                 (long long)(want - kept), (long long)need);
        return GP_SEQ_NO_ROOM;
    }
    release(b, slot, kept);
    *keep_io = keep;
    while (b->n_free < want - kept) { /* the idle cache unused longest goes first */
        int victim = -1;
        for (int i = 0; i < b->n_seq; i++)
            if (i != slot && b->owned[i] && !gp_seq_running(b->seqs[i]) &&
                (victim < 0 || b->idle_since[i] < b->idle_since[victim]))
                victim = i;
        gp_seq_reset(b->seqs[victim]);
        release(b, victim, 0);
    }
    int32_t *t = b->table + (size_t)slot * (size_t)b->seq_blocks;
    while (b->owned[slot] < want) {
        int32_t blk = b->free_blocks[--b->n_free];
        b->refs[blk] = 1;
        t[b->owned[slot]++] = blk;
    }
    gp_seq_set_limit(b->seqs[slot], b->owned[slot] * b->block);
    b->started[slot] = ++b->starts;
    return 0;
}

/* Token k of the eval: id at position p of slot i, stored in the slot's block for p. */
static void put(gp_batch *b, int64_t k, int i, int32_t id, int64_t p)
{
    const int32_t *t = b->table + (size_t)i * (size_t)b->seq_blocks;
    b->tok[k] = id;
    b->pos[k] = (int32_t)p;
    b->seq[k] = i;
    b->row[k] = (int32_t)(t[p / b->block] * b->block + p % b->block);
}

int gp_batch_step(gp_batch *b)
{
    int64_t n = 0, r = 0;
    b->err[0] = '\0';
    /* A generated token for every generating sequence (those that finish now need no eval). */
    int32_t ids[1];
    for (int i = 0; i < b->n_seq; i++) {
        gp_seq *s = b->seqs[i];
        if (gp_seq_running(s) != 1 || b->held[i])
            continue;
        int done = 0, rc = gp_seq_step_begin(s, ids, &done);
        if (rc != GP_SEQ_STEP_EVAL) {
            b->idle_since[i] = b->evals;
            continue;
        }
        put(b, n, i, ids[0], gp_seq_length(s));
        b->rows[r] = (int32_t)n++;
        b->row_slot[r] = i;
        b->row_kind[r] = done ? 3 : 1; /* 3: the last token, evaluated for a chat's cache */
        b->row_len[r++] = 1;
    }
    /* Prompt chunks in the room left, the earliest started first. */
    int np = 0;
    for (int i = 0; i < b->n_seq; i++)
        if (gp_seq_running(b->seqs[i]) == 2 && !b->held[i])
            b->order[np++] = i;
    for (int a = 1; a < np; a++) /* insertion sort by start order: n_seq is small */
        for (int c = a; c > 0 && b->started[b->order[c]] < b->started[b->order[c - 1]]; c--) {
            int t = b->order[c];
            b->order[c] = b->order[c - 1];
            b->order[c - 1] = t;
        }
    /* With tokens being generated the prompts get the budget, alone the whole batch. */
    int64_t end = n && n + b->prompt_budget < b->max_t ? n + b->prompt_budget : b->max_t;
    for (int a = 0; a < np && n < end; a++) {
        int i = b->order[a];
        const int32_t *p;
        int64_t p0, k = gp_seq_prompt_next(b->seqs[i], end - n, &p, &p0);
        for (int64_t j = 0; j < k; j++)
            put(b, n + j, i, p[j], p0 + j);
        n += k;
        b->rows[r] = (int32_t)(n - 1);
        b->row_slot[r] = i;
        b->row_kind[r] = 2;
        b->row_len[r++] = k;
    }
    int running = 0;
    if (n == 0) {
        for (int i = 0; i < b->n_seq; i++)
            running += gp_seq_running(b->seqs[i]) != 0;
        return running;
    }
    const gp_model_info *info = &b->lm->info;
    if (gp_session_set_tokens(b->s, b->tok, b->pos, n) ||
        gp_session_set_input(b->s, "seq", b->seq, (size_t)n * sizeof *b->seq) ||
        gp_session_set_input(b->s, "kv_row", b->row, (size_t)n * sizeof *b->row) ||
        gp_session_set_input(b->s, "kv_table", b->table,
                             (size_t)b->n_seq * (size_t)b->seq_blocks * sizeof *b->table) ||
        (info->rows && gp_session_set_rows(b->s, b->rows, r))) {
        snprintf(b->err, sizeof b->err, "%s", gp_session_error(b->s));
        return -1;
    }
    double t0 = now_ms();
    if (gp_session_eval(b->s)) {
        snprintf(b->err, sizeof b->err, "%s", gp_session_error(b->s));
        return -1;
    }
    double dt = now_ms() - t0;
    b->evals++;
    const float *logits = gp_session_output(b->s, info->logits, NULL);
    gp_tensor_info ni;
    const int32_t *next = gp_session_output(b->s, "next", &ni);
    int have_next = next && ni.ndim == 1 && ni.ne[0] == (info->rows ? r : n);
    for (int64_t q = 0; q < r; q++) {
        int i = b->row_slot[q];
        int64_t at = info->rows ? q : b->rows[q];
        const float *row = logits + at * info->vocab;
        int64_t nx = have_next ? next[at] : -1;
        gp_seq *s = b->seqs[i];
        b->idle_since[i] = b->evals;
        if (b->row_kind[q] == 2) {
            gp_seq_prompt_took(s, b->row_len[q], row, nx, dt);
        } else if (!gp_seq_take_row(s, row, nx, 1, 0, dt)) {
            gp_seq_step_end(s, b->tok[b->rows[q]], b->row_kind[q] == 3);
        }
    }
    for (int i = 0; i < b->n_seq; i++)
        running += gp_seq_running(b->seqs[i]) != 0;
    return running;
}
