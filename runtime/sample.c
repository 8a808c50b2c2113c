/* The sampler of runtime/sample.h: filters over a copy of the logits and a heap selection of the
 * most likely ids, in buffers sized by the vocabulary at creation, so a pick allocates nothing. */
#include "runtime/sample.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/gplan.h"

struct gp_sampler {
    gp_sampler_opts o;
    int64_t vocab;
    float *z;       /* [vocab] the logits of the call, penalized, NaN as -inf */
    int32_t *cand;  /* [vocab] candidate ids, most likely first (a heap while selecting) */
    float *prob;    /* [vocab] the candidates' probabilities, same order */
    uint32_t *seen; /* [vocab] the stamp of the last call that penalized the id */
    uint32_t stamp;
    int32_t *hist;  /* [repeat_last_n] ring of the last accepted ids */
    int64_t n_hist, hist_at;
    int by_id;      /* the last filter left prob[i] as id i's (no filter, all ids candidates) */
    uint64_t rng;
};

gp_sampler_opts gp_sampler_defaults(void)
{
    gp_sampler_opts o = {0.0, 0, 1.0, 0.0, 1.0, 64, 1};
    return o;
}

gp_sampler *gp_sampler_new(int64_t vocab, const gp_sampler_opts *o, char *err, size_t err_len)
{
    gp_sampler_opts d = o ? *o : gp_sampler_defaults();
    const char *bad = NULL;
    if (vocab < 1 || vocab > INT32_MAX)
        bad = "vocabulary size outside [1, 2^31)";
    else if (!(d.temp >= 0) || !isfinite(d.temp))
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
        s->seen = calloc((size_t)vocab, sizeof *s->seen);
        s->hist = malloc((size_t)(d.repeat_last_n ? d.repeat_last_n : 1) * sizeof *s->hist);
        s->rng = d.seed;
    }
    if (!s || !s->z || !s->cand || !s->prob || !s->seen || !s->hist) {
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

/* cand[0, c) = the c best ids of z, best first: a heap of the c best so far, the worst on top, then
 * sorted by taking the worst off to the end. O(vocab log c). */
static void select_top(gp_sampler *s, int64_t c)
{
    const float *z = s->z;
    int32_t *h = s->cand;
    for (int64_t i = 0; i < c; i++)
        h[i] = (int32_t)i;
    for (int64_t i = c / 2; i-- > 0;)
        sift(z, h, c, i);
    for (int64_t i = c; i < s->vocab; i++) {
        if (better(z, (int32_t)i, h[0])) {
            h[0] = (int32_t)i;
            sift(z, h, c, 0);
        }
    }
    for (int64_t end = c - 1; end > 0; end--) {
        int32_t t = h[0];
        h[0] = h[end];
        h[end] = t;
        sift(z, h, end, 0);
    }
}

/* Fills cand/prob with the filtered candidates; returns their count. sorted = 0 lets the case
 * without filters skip the selection: then n = vocab, cand is unset and prob[i] is id i's. */
static int64_t filter(gp_sampler *s, const float *logits, int sorted)
{
    penalize(s, logits);
    s->by_id = 0;
    int64_t best = gp_argmax(s->z, s->vocab), V = s->vocab;
    double m = s->z[best];
    if (s->o.temp <= 0 || !isfinite(m)) {
        s->cand[0] = (int32_t)best;
        s->prob[0] = 1;
        return 1;
    }
    double inv_t = 1.0 / s->o.temp;
    const float *z = s->z;
    int by_k = s->o.top_k > 0 && s->o.top_k < V, by_p = s->o.top_p < 1, by_min = s->o.min_p > 0;
    if (!by_k && !by_p && !by_min && !sorted) {
        double sum = 0;
        for (int64_t i = 0; i < V; i++)
            sum += s->prob[i] = (float)exp((z[i] - m) * inv_t);
        for (int64_t i = 0; i < V; i++)
            s->prob[i] = (float)(s->prob[i] / sum);
        s->by_id = 1;
        return V;
    }
    /* min-p keeps the prefix with (z - m) / temp >= log(min_p): never more than this many. */
    double log_min = by_min ? log(s->o.min_p) : -INFINITY;
    int64_t cap = by_k ? s->o.top_k : V;
    if (by_min && !by_k) {
        cap = 0;
        for (int64_t i = 0; i < V; i++)
            cap += (z[i] - m) * inv_t >= log_min;
    }
    /* Top-p's mass is over what top-k keeps: the k selected, else the whole row. */
    double mass = 0;
    if (!by_k)
        for (int64_t i = 0; i < V; i++)
            mass += exp((z[i] - m) * inv_t);
    /* Without top-k, top-p usually needs only a few of the most likely: select 256, and more only
     * when their mass falls short. */
    int64_t c = by_p && !by_k && cap > 256 ? 256 : cap, n;
    for (;;) {
        select_top(s, c);
        if (by_k) {
            mass = 0;
            for (int64_t i = 0; i < c; i++)
                mass += exp((z[s->cand[i]] - m) * inv_t);
        }
        double cum = 0;
        n = c;
        for (int64_t i = 0; i < c; i++) {
            double p = exp((z[s->cand[i]] - m) * inv_t) / mass;
            s->prob[i] = (float)p;
            cum += p;
            if (by_p && cum >= s->o.top_p) {
                n = i + 1;
                break;
            }
        }
        if (n < c || !by_p || c == cap)
            break;
        c = c > cap / 8 ? cap : c * 8;
    }
    if (by_min) {
        int64_t keep = 1;
        while (keep < n && (z[s->cand[keep]] - m) * inv_t >= log_min)
            keep++;
        n = keep;
    }
    while (n > 1 && s->prob[n - 1] == 0) /* -inf logits */
        n--;
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += s->prob[i];
    for (int64_t i = 0; i < n; i++)
        s->prob[i] = (float)(s->prob[i] / sum);
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
    int unsorted = s->by_id;
    if (n == 1)
        return s->cand[0];
    double u = uniform(s), acc = 0;
    for (int64_t i = 0; i < n; i++) {
        acc += s->prob[i];
        if (acc > u)
            return unsorted ? (int32_t)i : s->cand[i];
    }
    /* Rounding left u above the sum: the last candidate with any mass. */
    for (int64_t i = n; i-- > 0;)
        if (s->prob[i] > 0)
            return unsorted ? (int32_t)i : s->cand[i];
    return unsorted ? 0 : s->cand[0];
}
