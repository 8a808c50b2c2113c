/* The sampler of runtime/sample.h: filters over a copy of the logits, the candidates found by
 * quickselects (top-k by rank, top-p by mass) rather than a sort, in buffers sized by the
 * vocabulary at creation, so a pick allocates nothing. */
#include "runtime/sample.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gplan/gplan.h"

struct gp_sampler {
    gp_sampler_opts o;
    int64_t vocab;
    float *z;       /* [vocab] the logits of the call, penalized, NaN as -inf */
    int32_t *cand;  /* [vocab] candidate ids, most likely first (a heap while selecting) */
    float *prob;    /* [vocab] the candidates' probabilities, same order */
    float *e;       /* [vocab] each id's weight exp((z - max) / temp) */
    uint32_t *seen; /* [vocab] the stamp of the last call that penalized the id */
    uint32_t stamp;
    int32_t *hist;  /* [hist_cap >= repeat_last_n] ring of the last accepted ids */
    int64_t hist_cap;
    int64_t n_hist, hist_at;
    int by_id;      /* the last filter left every id a candidate, weighing e[id] of total */
    double total;
    uint64_t rng;
};

gp_sampler_opts gp_sampler_defaults(void)
{
    gp_sampler_opts o = {0.0, 0, 1.0, 0.0, 1.0, 64, 1};
    return o;
}

/* What is wrong with options d, or NULL. */
static const char *bad_opts(const gp_sampler_opts *o)
{
    const gp_sampler_opts d = *o;
    const char *bad = NULL;
    if (!(d.temp >= 0) || !isfinite(d.temp))
        bad = "temperature must be a number >= 0";
    else if (d.top_k < 0)
        bad = "top-k must be >= 0";
    else if (!(d.top_p > 0 && d.top_p <= 1))
        bad = "top-p must be in (0, 1]";
    else if (!(d.min_p >= 0 && d.min_p <= 1))
        bad = "min-p must be in [0, 1]";
    else if (!(d.repeat_penalty > 0) || !isfinite(d.repeat_penalty))
        bad = "repeat penalty must be a number > 0";
    else if (d.repeat_last_n < 0 || d.repeat_last_n > INT32_MAX)
        bad = "repeat-last-n must be in [0, 2^31)";
    return bad;
}

gp_sampler *gp_sampler_new(int64_t vocab, const gp_sampler_opts *o, char *err, size_t err_len)
{
    gp_sampler_opts d = o ? *o : gp_sampler_defaults();
    const char *bad = vocab < 1 || vocab > INT32_MAX ? "vocabulary size outside [1, 2^31)"
                                                     : bad_opts(&d);
    if (bad) {
        snprintf(err, err_len, "sampler: %s", bad);
        return NULL;
    }
    gp_sampler *s = calloc(1, sizeof *s);
    if (s) {
        s->o = d;
        s->vocab = vocab;
        s->z = malloc((size_t)vocab * sizeof *s->z);
        s->cand = malloc((size_t)vocab * sizeof *s->cand);
        s->prob = malloc((size_t)vocab * sizeof *s->prob);
        s->e = malloc((size_t)vocab * sizeof *s->e);
        s->seen = calloc((size_t)vocab, sizeof *s->seen);
        s->hist_cap = d.repeat_last_n > GP_SAMPLER_MIN_HIST ? d.repeat_last_n : GP_SAMPLER_MIN_HIST;
        s->hist = malloc((size_t)s->hist_cap * sizeof *s->hist);
        s->rng = d.seed;
    }
    if (!s || !s->z || !s->cand || !s->prob || !s->e || !s->seen || !s->hist) {
        gp_sampler_free(s);
        snprintf(err, err_len, "sampler: out of memory for a vocabulary of %lld",
                 (long long)vocab);
        return NULL;
    }
    return s;
}

void gp_sampler_free(gp_sampler *s)
{
    if (!s)
        return;
    free(s->z);
    free(s->cand);
    free(s->prob);
    free(s->e);
    free(s->seen);
    free(s->hist);
    free(s);
}

static int penalizes(const gp_sampler *s)
{
    return s->o.repeat_penalty != 1.0 && s->o.repeat_last_n > 0;
}

int gp_sampler_is_greedy(const gp_sampler *s)
{
    return s->o.temp <= 0 && (!penalizes(s) || s->n_hist == 0);
}

void gp_sampler_accept(gp_sampler *s, int32_t id)
{
    if (s->o.repeat_last_n == 0)
        return;
    s->hist[s->hist_at] = id;
    s->hist_at = (s->hist_at + 1) % s->o.repeat_last_n;
    if (s->n_hist < s->o.repeat_last_n)
        s->n_hist++;
}

int gp_sampler_set(gp_sampler *s, const gp_sampler_opts *o, char *err, size_t err_len)
{
    gp_sampler_opts d = o ? *o : gp_sampler_defaults();
    const char *bad = bad_opts(&d);
    if (!bad && d.repeat_last_n > s->hist_cap)
        bad = "repeat-last-n is over what this sampler holds";
    if (bad) {
        snprintf(err, err_len, "sampler: %s", bad);
        return -1;
    }
    s->o = d;
    gp_sampler_reset(s);
    return 0;
}

void gp_sampler_reset(gp_sampler *s)
{
    s->n_hist = s->hist_at = 0;
    s->rng = s->o.seed;
}

/* splitmix64: a full-period 64-bit generator; its top 53 bits as a double in [0, 1). */
static double uniform(gp_sampler *s)
{
    uint64_t z = (s->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

/* z = logits with NaN as -inf and the penalty applied once to each id of the window. */
static void penalize(gp_sampler *s, const float *logits)
{
    for (int64_t i = 0; i < s->vocab; i++)
        s->z[i] = isnan(logits[i]) ? -INFINITY : logits[i];
    if (!penalizes(s) || s->n_hist == 0)
        return;
    if (++s->stamp == 0) { /* wrapped: old stamps could match again */
        memset(s->seen, 0, (size_t)s->vocab * sizeof *s->seen);
        s->stamp = 1;
    }
    float pen = (float)s->o.repeat_penalty;
    for (int64_t h = 0; h < s->n_hist; h++) {
        int32_t id = s->hist[h];
        if (id < 0 || id >= s->vocab || s->seen[id] == s->stamp)
            continue;
        s->seen[id] = s->stamp;
        s->z[id] = s->z[id] > 0 ? s->z[id] / pen : s->z[id] * pen;
    }
}

/* a ranks before b: a larger logit, or the same and a lower id. */
static int better(const float *z, int32_t a, int32_t b)
{
    return z[a] > z[b] || (z[a] == z[b] && a < b);
}

/* Restores the heap below i: each node ranks after (is worse than) its children, the worst at 0. */
static void sift(const float *z, int32_t *h, int64_t n, int64_t i)
{
    for (;;) {
        int64_t w = i, l = 2 * i + 1, r = l + 1;
        if (l < n && better(z, h[w], h[l]))
            w = l;
        if (r < n && better(z, h[w], h[r]))
            w = r;
        if (w == i)
            return;
        int32_t t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* a[0, n) best first (a heap sort: the worst taken off to the end). */
static void sort_best_first(const float *z, int32_t *a, int64_t n)
{
    for (int64_t i = n / 2; i-- > 0;)
        sift(z, a, n, i);
    for (int64_t end = n - 1; end > 0; end--) {
        int32_t t = a[0];
        a[0] = a[end];
        a[end] = t;
        sift(z, a, end, 0);
    }
}

static void swap_ids(int32_t *a, int64_t i, int64_t j)
{
    int32_t t = a[i];
    a[i] = a[j];
    a[j] = t;
}

/* Partitions a[0, n) around the median of its first, middle and last ids: the ids better than the
 * pivot first, then the pivot, whose index is returned, then the worse ones. */
static int64_t partition(const float *z, int32_t *a, int64_t n)
{
    int64_t mid = n / 2, last = n - 1;
    if (better(z, a[mid], a[0]))
        swap_ids(a, mid, 0);
    if (better(z, a[last], a[0]))
        swap_ids(a, last, 0);
    if (better(z, a[last], a[mid]))
        swap_ids(a, last, mid);
    swap_ids(a, mid, last); /* the median of the three, as the pivot, at the end */
    int32_t pivot = a[last];
    int64_t store = 0;
    for (int64_t i = 0; i < last; i++)
        if (better(z, a[i], pivot))
            swap_ids(a, i, store++);
    swap_ids(a, store, last);
    return store;
}

/* cand[0, k) = the k best ids of z[0, n), in no order, for k small next to n: a heap of the best
 * so far with the worst on top, which most ids fail to enter after one compare. */
static void select_best_heap(const float *z, int32_t *h, int64_t n, int64_t k)
{
    for (int64_t i = 0; i < k; i++)
        h[i] = (int32_t)i;
    for (int64_t i = k / 2; i-- > 0;)
        sift(z, h, k, i);
    for (int64_t i = k; i < n; i++)
        if (better(z, (int32_t)i, h[0])) {
            h[0] = (int32_t)i;
            sift(z, h, k, 0);
        }
}

/* a[0, k) = the k best of a[0, n), in no order (quickselect: O(n) expected). */
static void select_best(const float *z, int32_t *a, int64_t n, int64_t k)
{
    int64_t lo = 0, hi = n;
    while (hi - lo > 1) {
        int64_t p = lo + partition(z, a + lo, hi - lo);
        if (p == k)
            return;
        if (p < k)
            lo = p + 1;
        else
            hi = p;
    }
}

/* The length L of the smallest best-first prefix of a[0, n) whose weights e[id] sum to at least
 * target, with that prefix moved to a[0, L) in no order: a quickselect on the running mass, O(n)
 * expected instead of a sort. */
static int64_t select_mass(const float *z, const float *e, int32_t *a, int64_t n, double target)
{
    int64_t lo = 0, hi = n;
    double acc = 0; /* the mass of a[0, lo), all of it in the prefix; acc < target */
    while (hi > lo) {
        int64_t p = lo + partition(z, a + lo, hi - lo);
        double better_mass = 0;
        for (int64_t i = lo; i < p; i++)
            better_mass += e[a[i]];
        if (acc + better_mass >= target) {
            hi = p;
            continue;
        }
        acc += better_mass + e[a[p]];
        if (acc >= target)
            return p + 1;
        lo = p + 1;
    }
    return lo; /* rounding left the whole mass short of the target: all of it */
}

/* Fills cand/prob with the filtered candidates; returns their count. sorted = 0 lets the case
 * without filters skip the candidates: then n = vocab, cand is unset and prob[i] is id i's; else
 * cand is best first when sorted, in no order otherwise. */
static int64_t filter(gp_sampler *s, const float *logits, int sorted)
{
    penalize(s, logits);
    s->by_id = 0;
    int64_t best = gp_argmax(s->z, s->vocab), V = s->vocab;
    float m = s->z[best], inv_t = (float)(1.0 / s->o.temp);
    /* Greedy also when 1 / temp overflows a float (0 * inf would make the best's weight NaN). */
    if (s->o.temp <= 0 || !isfinite(m) || !isfinite(inv_t)) {
        s->cand[0] = (int32_t)best;
        s->prob[0] = 1;
        return 1;
    }
    const float *z = s->z;
    float *e = s->e; /* exp((z - m) / temp): the most likely weighs 1; set for the candidates */
    int32_t *cand = s->cand;
    int by_k = s->o.top_k > 0 && s->o.top_k < V, by_p = s->o.top_p < 1, by_min = s->o.min_p > 0;
    int64_t n = V;
    double total = 0;
    if (by_k) {
        n = s->o.top_k;
        if (n <= V / 16) {
            select_best_heap(z, cand, V, n);
        } else {
            for (int64_t i = 0; i < V; i++)
                cand[i] = (int32_t)i;
            select_best(z, cand, V, n);
        }
        for (int64_t i = 0; i < n; i++)
            total += e[cand[i]] = expf((z[cand[i]] - m) * inv_t);
    } else {
        for (int64_t i = 0; i < V; i++)
            total += e[i] = expf((z[i] - m) * inv_t);
        if (!by_p && !by_min && !sorted) {
            s->by_id = 1; /* sample draws from e and total itself */
            s->total = total;
            return V;
        }
        for (int64_t i = 0; i < V; i++)
            cand[i] = (int32_t)i;
    }
    /* Top-p's mass is over what top-k kept. */
    if (by_p)
        n = select_mass(z, e, cand, n, s->o.top_p * total);
    /* min-p and the ids of no weight (-inf logits) drop out; the most likely (weight 1) stays. */
    float min_w = by_min ? (float)s->o.min_p : 0;
    int64_t kept = 0;
    for (int64_t i = 0; i < n; i++)
        if (e[cand[i]] >= min_w && e[cand[i]] > 0)
            cand[kept++] = cand[i];
    n = kept;
    if (sorted)
        sort_best_first(z, cand, n);
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += e[cand[i]];
    for (int64_t i = 0; i < n; i++)
        s->prob[i] = (float)(e[cand[i]] / sum);
    return n;
}

int64_t gp_sampler_candidates(gp_sampler *s, const float *logits, const int32_t **ids,
                              const float **probs)
{
    int64_t n = filter(s, logits, 1);
    *ids = s->cand;
    *probs = s->prob;
    return n;
}

int32_t gp_sampler_sample(gp_sampler *s, const float *logits)
{
    int64_t n = filter(s, logits, 0);
    if (n == 1)
        return s->cand[0];
    /* Every id (no filter): weights e[id] of total; else the candidates with probabilities. */
    const float *w = s->by_id ? s->e : s->prob;
    double u = uniform(s) * (s->by_id ? s->total : 1.0), acc = 0;
    for (int64_t i = 0; i < n; i++) {
        acc += w[i];
        if (acc > u)
            return s->by_id ? (int32_t)i : s->cand[i];
    }
    /* Rounding left u above the sum: the last candidate with any weight. */
    for (int64_t i = n; i-- > 0;)
        if (w[i] > 0)
            return s->by_id ? (int32_t)i : s->cand[i];
    return s->by_id ? 0 : s->cand[0];
}
