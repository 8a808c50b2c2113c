/* CPU attention: causal scaled-dot-product attention of new queries over a KV cache, grouped-query,
 * with a stable softmax. Threads split the (h, t) query rows; scores go to a per-thread slice of ws.
 * Cache rows with contiguous heads go through cpu/cpu_dot.h's fused loops (FMA, f16 widened
 * in registers); the general case loads rows as f32 and multiplies and adds unfused. */
#include <math.h>
#include <string.h>

#include "cpu/cpu_dot.h"
#include "cpu/cpu_internal.h"

/* The portable builds of cpu/cpu_dot.h's attention loops: fmaf, the same lanes. */
void gp_attn_scores_portable(const float *q, const char *k, int64_t ks, gp_dtype kt, int64_t d,
                             int64_t n, float scale, float *sc)
{
    int64_t dp = (d + GP_DOT_LANES - 1) / GP_DOT_LANES * GP_DOT_LANES;
    for (int64_t s = 0; s < n; s++) {
        float c[GP_DOT_LANES] = {0};
        for (int64_t i = 0; i < dp; i++) {
            float x = i < d ? q[i] : 0.0f, y = i < d ? gp_dot_elt(kt, k + s * ks, i) : 0.0f;
            c[i % GP_DOT_LANES] = fmaf(x, y, c[i % GP_DOT_LANES]);
        }
        sc[s] = gp_dot_total(c) * scale;
    }
}

void gp_attn_accum_portable(const float *w, const char *v, int64_t vs, gp_dtype vt, int64_t d,
                            int64_t n, float *acc)
{
    for (int64_t s = 0; s < n; s++)
        for (int64_t i = 0; i < d; i++)
            acc[i] = fmaf(w[s], gp_dot_elt(vt, v + s * vs, i), acc[i]);
}

/* Softmax of the n scores sc[] in place (soft-capped first when cap > 0): exp(s - max) each,
 * their sum's inverse returned. A sink (sinks: a finite logit, else -INFINITY for none) joins
 * the max and, as exp(sink - max), the sum after the scores' (transformers' gpt-oss: the sink is
 * the softmax's last column). */
static float softmax_row(float *sc, int64_t n, float cap, float sink)
{
    float mx = -INFINITY;
    for (int64_t s = 0; s < n; s++) {
        if (cap > 0)
            sc[s] = cap * tanhf(sc[s] / cap);
    }
    for (int64_t s = 0; s < n; s++) /* fmaxf's result (no NaN in sc), as a select */
        mx = sc[s] > mx ? sc[s] : mx;
    mx = sink > mx ? sink : mx;
    gp_acc8 sum;
    gp_acc8_zero(&sum);
    for (int64_t s = 0; s < n; s++)
        sc[s] = gp_expf(sc[s] - mx);
    gp_acc8_add(&sum, sc, n);
    float total = gp_acc8_total(&sum);
    if (sink > -INFINITY)
        total += gp_expf(sink - mx);
    return 1.0f / total;
}

/* Head h's sink logit (attention's sinks: input 4, f32 [H]), or -INFINITY without sinks. */
static float sink_of(const gp_attrs *at, const gp_ktensor *in, int n_in, int64_t h)
{
    if (!at->i[GP_ATTENTION_SINKS] || n_in != 5)
        return -INFINITY;
    float w;
    memcpy(&w, (const char *)in[4].data + h * in[4].nb[0], 4);
    return w;
}

/* Where query t's positions are in the cache: row s (a plain cache), s % S (a ring) or, in a
 * ragged batch, blocks[seq[t], s / block] * block + s % block. */
typedef struct {
    int64_t ring;         /* S in a ring, else INT64_MAX */
    int64_t block;        /* rows of a block in a ragged batch, else 0 */
    const char *tab;      /* the query's sequence's row of blocks */
    int64_t tab_stride;   /* bytes between its entries */
} rows_map;

static rows_map rows_of(const gp_attrs *at, const gp_ktensor *in, int n_in, int64_t t)
{
    rows_map m = {at->i[GP_ATTENTION_RING] ? in[1].ne[0] : INT64_MAX, 0, NULL, 0};
    if (n_in == 6) {
        int32_t sq;
        memcpy(&sq, (const char *)in[4].data + t * in[4].nb[0], 4);
        GP_ASSERT(sq >= 0 && sq < in[5].ne[0]);
        m.block = at->i[GP_ATTENTION_BLOCK];
        m.tab = (const char *)in[5].data + sq * in[5].nb[0];
        m.tab_stride = in[5].nb[1];
    }
    return m;
}

static int64_t row_at(const rows_map *m, int64_t s)
{
    if (!m->block)
        return s % m->ring;
    int32_t b;
    memcpy(&b, m->tab + s / m->block * m->tab_stride, 4);
    return (int64_t)b * m->block + s % m->block;
}

/* The run of positions from s (at most to p) held in consecutive cache rows: its length, and in
 * *row the first row. Without a ring or blocks, the whole of s..p. */
static int64_t run_at(const rows_map *m, int64_t s, int64_t p, int64_t *row)
{
    *row = row_at(m, s);
    if (!m->block)
        return m->ring == INT64_MAX ? p + 1 - s : 1;
    int64_t end = (s / m->block + 1) * m->block; /* adjacent blocks extend the run */
    while (end <= p && row_at(m, end) == *row + (end - s))
        end += m->block;
    return (end < p + 1 ? end : p + 1) - s;
}

/* The heads of one KV group R at a time (cpu/cpu_dot.h's group loops): each cache row read
 * once for R heads, every head's result bit for bit the one-head path's. Items (group, R heads,
 * query row), query rows fastest; sc: this thread's R score rows of S. */
static void attention_grouped(const gp_attrs *at, const gp_ktensor *out, const gp_ktensor *in,
                              int n_in, int64_t span, gp_attn_scores_group_fn scores,
                              gp_attn_accum_group_fn accum, float *sc, int R, int ith, int nuse)
{
    const gp_ktensor *q = &in[0], *k = &in[1], *v = &in[2], *pos = &in[3];
    int64_t T = q->ne[0], H = q->ne[1], D = q->ne[2], G = k->ne[1], hg = H / G;
    int64_t nch = (hg + R - 1) / R, r0, r1;
    float scale = (float)at->f[GP_ATTENTION_SCALE], cap = (float)at->f[GP_ATTENTION_SOFTCAP];
    int64_t window = at->i[GP_ATTENTION_WINDOW];
    float bq[GP_ATTN_GROUP][GP_CHUNK], acc[GP_ATTN_GROUP][GP_CHUNK], inv[GP_ATTN_GROUP];
    const float *qs[GP_ATTN_GROUP], *ws[GP_ATTN_GROUP];
    float *scs[GP_ATTN_GROUP], *accs[GP_ATTN_GROUP], *part[GP_ATTN_GROUP];
    const float *cpart[GP_ATTN_GROUP];
    gp_share(G * nch * T, ith, nuse, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t t = r % T, g = r / T / nch, h0 = g * hg + r / T % nch * R;
        int nr = hg - (h0 - g * hg) < R ? (int)(hg - (h0 - g * hg)) : R;
        int32_t p;
        memcpy(&p, (const char *)pos->data + t * pos->nb[0], 4);
        int64_t s0 = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0, n = p + 1 - s0;
        GP_ASSERT(p >= 0 && p < span);
        rows_map map = rows_of(at, in, n_in, t);
        for (int j = 0; j < nr; j++) {
            gp_cpu_load_row(bq[j], (const char *)q->data + t * q->nb[0] + (h0 + j) * q->nb[1], D,
                            q->nb[2], q->dtype);
            qs[j] = bq[j];
            scs[j] = sc + (size_t)j * (size_t)span;
            ws[j] = scs[j];
            accs[j] = acc[j];
        }
        for (int64_t s = s0, row, m; s <= p; s += m) {
            m = run_at(&map, s, p, &row);
            for (int j = 0; j < nr; j++)
                part[j] = scs[j] + (s - s0);
            scores(nr, qs, (const char *)k->data + g * k->nb[1] + row * k->nb[0], k->nb[0],
                   k->dtype, D, m, scale, part);
        }
        for (int j = 0; j < nr; j++) {
            inv[j] = softmax_row(scs[j], n, cap, sink_of(at, in, n_in, h0 + j));
            for (int64_t i = 0; i < D; i++)
                acc[j][i] = 0.0f;
        }
        for (int64_t s = s0, row, m; s <= p; s += m) {
            m = run_at(&map, s, p, &row);
            for (int j = 0; j < nr; j++)
                cpart[j] = ws[j] + (s - s0);
            accum(nr, cpart, (const char *)v->data + g * v->nb[1] + row * v->nb[0], v->nb[0],
                  v->dtype, D, m, accs);
        }
        for (int j = 0; j < nr; j++) {
            for (int64_t i = 0; i < D; i++)
                acc[j][i] *= inv[j];
            gp_cpu_store_row((char *)out->data + t * out->nb[0] + (h0 + j) * out->nb[1],
                             out->nb[2], out->dtype, acc[j], D);
        }
    }
}

int64_t gp_cpu_attention_span(const gp_attrs *a, const gp_ktensor *in, int n_in)
{
    if (n_in == 6 && a)
        return in[5].ne[1] * a->i[GP_ATTENTION_BLOCK];
    return in[1].ne[0];
}

/* q [T, H, D], k [S, G, D], v [S, G, D], pos i32 [T] (and a ragged batch's seq i32 [T] and
 * blocks i32 [N, M], or sinks f32 [H]) -> out f32-or-other [T, H, D]. ws: f32 [nth_used, span] scores (with room
 * for R rows a thread: the heads of a KV group R at a time). */
void gp_cpu_attention(const gp_attrs *at, const gp_ktensor *out, const gp_ktensor *in, int n_in,
                      void *ws, size_t ws_size, int ith, int nth)
{
    const gp_ktensor *q = &in[0], *k = &in[1], *v = &in[2], *pos = &in[3];
    int64_t T = q->ne[0], H = q->ne[1], D = q->ne[2], S = k->ne[0], G = k->ne[1];
    int64_t span = gp_cpu_attention_span(at, in, n_in);
    GP_ASSERT(G > 0 && H % G == 0 && k->ne[2] == D && v->ne[0] == S && v->ne[1] == G &&
              v->ne[2] == D);
    /* Threads beyond the workspace's slices sit this node out (plan.h caps them). */
    size_t per = (size_t)(span > 0 ? span : 1) * sizeof(float);
    int nuse = ws_size / per < (size_t)nth ? (int)(ws_size / per) : nth;
    GP_ASSERT(nuse >= 1 || T == 0);
    if (ith >= nuse)
        return;
    float *sc = (float *)((char *)ws + (size_t)ith * per); /* [span] scores of one query row */
    /* cap > 0: soft-capped scores */
    float scale = (float)at->f[GP_ATTENTION_SCALE], cap = (float)at->f[GP_ATTENTION_SOFTCAP];
    int64_t window = at->i[GP_ATTENTION_WINDOW];
    int in_ring = at->i[GP_ATTENTION_RING] != 0;
    float bq[GP_CHUNK], bk[GP_CHUNK], acc[GP_CHUNK];
    int64_t r0, r1;
    /* Rows of k and v with contiguous heads of at most GP_CHUNK: the fused loops of cpu_dot.h
     * on the cache as it is stored (f16 widened in registers). */
    int64_t kes = (int64_t)gp_dtype_size(k->dtype), ves = (int64_t)gp_dtype_size(v->dtype);
    int fast = D <= GP_CHUNK && k->nb[2] == kes && v->nb[2] == ves &&
               (k->dtype == GP_F32 || k->dtype == GP_F16 || k->dtype == GP_BF16) &&
               (v->dtype == GP_F32 || v->dtype == GP_F16 || v->dtype == GP_BF16);
    /* Query heads sharing a KV group, on a cache without a ring, R at a time where the level
     * has the group loops and the workspace room for R score rows a thread (the plan reserves
     * GP_WS_CPU_MAX_THREADS rows). */
    int64_t hg = H / G, room = (int64_t)(ws_size / per) / nuse;
    gp_attn_scores_group_fn gscores;
    gp_attn_accum_group_fn gaccum;
    if (fast && !in_ring && hg > 1 && room > 1 && gp_cpu_attn_group(&gscores, &gaccum)) {
        int R = (int)(hg < GP_ATTN_GROUP ? hg : GP_ATTN_GROUP);
        if (R > room)
            R = (int)room;
        attention_grouped(at, out, in, n_in, span, gscores, gaccum,
                          (float *)((char *)ws + (size_t)ith * (size_t)R * per), R, ith, nuse);
        return;
    }
    gp_attn_scores_fn scores = gp_cpu_attn_scores();
    gp_attn_accum_fn accum = gp_cpu_attn_accum();
    /* Rows head-major: a thread's rows of one head (and the heads of one KV group) reuse the
     * same cache rows from L1/L2, and with a causal mask every thread gets early and late
     * queries alike (query-major would give the first thread a prompt's cheap half). */
    gp_share(T * H, ith, nuse, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t h = r / T, t = r % T, g = h / (H / G);
        int32_t p;
        memcpy(&p, (const char *)pos->data + t * pos->nb[0], 4);
        /* A sliding window of W rows (window > 0) starts at p - W + 1; position s is at cache row
         * row_at(s) (W <= S in a ring: gp_cpu_check). sc[s - s0] is position s's score. */
        int64_t s0 = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
        GP_ASSERT(p >= 0 && (p < span || in_ring) && p - s0 < span);
        rows_map map = rows_of(at, in, n_in, t);
        const char *pq = (const char *)q->data + t * q->nb[0] + h * q->nb[1];
        const char *pk = (const char *)k->data + g * k->nb[1];
        const char *pv = (const char *)v->data + g * v->nb[1];
        char *po = (char *)out->data + t * out->nb[0] + h * out->nb[1];
        /* Scores of positions s0..p and their maximum. A head of at most GP_CHUNK dims (the
         * usual case) loads q once; f32 rows of k are read in place. */
        float mx = -INFINITY;
        if (D <= GP_CHUNK)
            gp_cpu_load_row(bq, pq, D, q->nb[2], q->dtype);
        if (fast && !in_ring) { /* runs of consecutive rows: no ring */
            int64_t n = p + 1 - s0;
            for (int64_t s = s0, row, m; s <= p; s += m) {
                m = run_at(&map, s, p, &row);
                scores(bq, pk + row * k->nb[0], k->nb[0], k->dtype, D, m, scale, sc + (s - s0));
            }
            float inv = softmax_row(sc, n, cap, sink_of(at, in, n_in, h));
            for (int64_t i = 0; i < D; i++)
                acc[i] = 0.0f;
            for (int64_t s = s0, row, m; s <= p; s += m) {
                m = run_at(&map, s, p, &row);
                accum(sc + (s - s0), pv + row * v->nb[0], v->nb[0], v->dtype, D, m, acc);
            }
            for (int64_t i = 0; i < D; i++)
                acc[i] *= inv;
            gp_cpu_store_row(po, out->nb[2], out->dtype, acc, D);
            continue;
        }
        for (int64_t s = s0; s <= p; s++) {
            gp_acc8 dot;
            gp_acc8_zero(&dot);
            int64_t row = row_at(&map, s);
            for (int64_t c = 0; c < D; c += GP_CHUNK) {
                int64_t m = D - c < GP_CHUNK ? D - c : GP_CHUNK;
                if (D > GP_CHUNK)
                    gp_cpu_load_row(bq, pq + c * q->nb[2], m, q->nb[2], q->dtype);
                const float *kr = gp_cpu_row(bk, pk + row * k->nb[0] + c * k->nb[2], m,
                                             k->nb[2], k->dtype);
                gp_acc8_dot(&dot, bq, kr, m);
            }
            sc[s - s0] = gp_acc8_total(&dot) * scale;
            if (cap > 0)
                sc[s - s0] = cap * tanhf(sc[s - s0] / cap);
            mx = fmaxf(mx, sc[s - s0]);
        }
        float sink = sink_of(at, in, n_in, h); /* as softmax_row */
        mx = sink > mx ? sink : mx;
        gp_acc8 sum;
        gp_acc8_zero(&sum);
        for (int64_t s = s0; s <= p; s++)
            sc[s - s0] = gp_expf(sc[s - s0] - mx);
        gp_acc8_add(&sum, sc, p + 1 - s0);
        float total = gp_acc8_total(&sum);
        if (sink > -INFINITY)
            total += gp_expf(sink - mx);
        float inv = 1.0f / total;
        /* out = sum_s sc[s] v[s] / sum, one chunk of D at a time, s ascending. */
        for (int64_t c = 0; c < D; c += GP_CHUNK) {
            int64_t m = D - c < GP_CHUNK ? D - c : GP_CHUNK;
            for (int64_t i = 0; i < m; i++)
                acc[i] = 0.0f;
            for (int64_t s = s0; s <= p; s++) {
                const float *vr = gp_cpu_row(bk, pv + row_at(&map, s) * v->nb[0] + c * v->nb[2],
                                             m, v->nb[2], v->dtype);
                float w = sc[s - s0];
                for (int64_t i = 0; i < m; i++)
                    acc[i] += w * vr[i];
            }
            for (int64_t i = 0; i < m; i++)
                acc[i] *= inv;
            gp_cpu_store_row(po + c * out->nb[2], out->nb[2], out->dtype, acc, m);
        }
    }
}
