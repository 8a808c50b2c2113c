/* CPU routed experts (GP_OP_MOE): each token's router picks k experts, tokens are grouped by
 * expert, and each used expert runs one product over its tokens' rows with the existing product
 * kernels on its slice of the merged weights; only the chosen experts' weights are read. Five
 * phases with a barrier between them (gp_cpu_phases), every scratch byte in the planned workspace
 * (cpu/moe.h). */
#include <math.h>
#include <string.h>

#include "cpu/cpu_internal.h"
#include "cpu/moe.h"
#include "cpu/quant.h"

/* Rows of 16 columns: the quantized products' SIMD tiles, and a cache line of f32 outputs. */
#define COLS 16

typedef struct {
    int64_t T, H, E, K, F;
    int quant; /* block-quantized experts: q and qrow planned */
    /* the biases (inputs 5..8: router [E], gate and up [E, F], down [E, H]), or NULL */
    const gp_ktensor *bias;
    gp_moe_ws_layout l;
    int32_t *sel, *off, *cur, *slot;
    int64_t *qrow;
    float *wt, *logits, *xg, *g, *u;
    char *q;
} moe_ctx;

static moe_ctx ctx_of(const gp_attrs *a, const gp_ktensor *in, int n_in, void *ws,
                      size_t ws_size)
{
    moe_ctx c;
    c.bias = n_in == 9 ? &in[5] : NULL;
    c.T = in[0].ne[0];
    c.H = in[0].ne[1];
    c.E = in[1].ne[0];
    c.F = in[2].ne[1];
    c.K = a->i[GP_MOE_TOP_K];
    c.quant = gp_dtype_is_quant(in[2].dtype);
    c.l = gp_moe_ws(c.T, c.H, c.E, c.K, c.F, c.quant);
    GP_ASSERT(ws && (int64_t)ws_size >= c.l.total);
    char *w = ws;
    c.sel = (int32_t *)(void *)(w + c.l.sel);
    c.wt = (float *)(void *)(w + c.l.wt);
    c.logits = (float *)(void *)(w + c.l.logits);
    c.off = (int32_t *)(void *)(w + c.l.off);
    c.cur = (int32_t *)(void *)(w + c.l.cur);
    c.slot = (int32_t *)(void *)(w + c.l.slot);
    c.xg = (float *)(void *)(w + c.l.xg);
    c.g = (float *)(void *)(w + c.l.g);
    c.u = (float *)(void *)(w + c.l.u);
    c.qrow = (int64_t *)(void *)(w + c.l.qrow);
    c.q = w + c.l.q;
    return c;
}

/* y[m * ldy + n] = sum_k x[m * ldx + k] W[n, k] for m < M, n in [n0, n1): W is w itself (the
 * router, [N, K]) when e < 0, else expert e of w [E, N, K]. These kernels' results depend on K
 * alone (the lanes path; gp_quant_matmul_f32), not on M or the columns taken; an expert of more
 * than GP_QUANT_WS_MIN_M rows of quantized weights takes the integer path instead
 * (expert_product), whose results depend on x's quantization (cpu/quant.h), not on the columns
 * taken: every thread count gives the same bits. */
static void product(const gp_ktensor *w, int64_t e, int64_t n0, int64_t n1, const float *x,
                    int64_t ldx, int64_t M, int64_t K, float *y, int64_t ldy)
{
    if (M == 0 || n0 >= n1)
        return;
    int nd = w->ndim;
    const char *base = (const char *)w->data + (e < 0 ? 0 : e * w->nb[0]);
    if (gp_dtype_is_quant(w->dtype)) {
        gp_quant_matmul_f32(w->dtype, base, n0, n1, x, ldx, M, K, y, ldy);
        return;
    }
    gp_attrs at;
    memset(&at, 0, sizeof at);
    at.i[GP_MATMUL_TB] = 1;
    gp_ktensor o = {y + n0, GP_F32, 2, {M, n1 - n0}, {ldy * 4, 4}};
    gp_ktensor ab[2] = {
        {(void *)(uintptr_t)x, GP_F32, 2, {M, K}, {ldx * 4, 4}},
        {(void *)(uintptr_t)(base + n0 * w->nb[nd - 2]), w->dtype, 2, {n1 - n0, K},
         {w->nb[nd - 2], w->nb[nd - 1]}},
    };
    gp_cpu_matmul(&at, &o, ab, 0, 1);
}

/* y[r * ldy + n] += bias b (b [E, N], or [N] when e < 0: its row e) for the m rows of y and n
 * in [n0, n1): the product's bias, added after it (transformers' x W + b). */
static void add_bias(const gp_ktensor *b, int64_t e, int64_t n0, int64_t n1, float *y,
                     int64_t ldy, int64_t m)
{
    if (!b || n0 >= n1)
        return;
    float bv[COLS];
    const char *row = (const char *)b->data + (e < 0 ? 0 : e * b->nb[0]);
    int64_t st = b->nb[b->ndim - 1];
    for (int64_t c0 = n0; c0 < n1; c0 += COLS) {
        int64_t nc = n1 - c0 < COLS ? n1 - c0 : COLS;
        gp_cpu_load_row(bv, row + c0 * st, nc, st, b->dtype);
        for (int64_t r = 0; r < m; r++)
            for (int64_t i = 0; i < nc; i++)
                y[r * ldy + c0 + i] += bv[i];
    }
}

/* Thread ith's columns of N, in whole groups of COLS. */
static void col_share(int64_t N, int ith, int nth, int64_t *n0, int64_t *n1)
{
    gp_share((N + COLS - 1) / COLS, ith, nth, n0, n1);
    *n0 *= COLS;
    *n1 = *n1 * COLS < N ? *n1 * COLS : N;
}

/* The k largest of v[0..E) into pick[0..k), largest first, ties to the lower index (a NaN is
 * never larger, so it is picked only when nothing else is left). */
static void top_k(const float *v, int64_t E, int64_t k, int32_t *pick)
{
    for (int64_t j = 0; j < k; j++) {
        int64_t best = -1;
        for (int64_t e = 0; e < E; e++) {
            int taken = 0;
            for (int64_t q = 0; q < j && !taken; q++)
                taken = pick[q] == e;
            if (!taken && (best < 0 || v[e] > v[best]))
                best = e;
        }
        pick[j] = (int32_t)best;
    }
}

/* softmax of v[0..n) in place: exponentials of v - max, summed in a fixed order. */
static void softmax(float *v, int64_t n)
{
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        mx = fmaxf(mx, v[i]);
    for (int64_t i = 0; i < n; i++)
        v[i] = gp_expf(v[i] - mx);
    gp_acc8 acc;
    gp_acc8_zero(&acc);
    gp_acc8_add(&acc, v, n);
    float sum = gp_acc8_total(&acc);
    for (int64_t i = 0; i < n; i++)
        v[i] /= sum;
}

/* Phase 0, a share of the tokens: router logits, the k experts and their weights (core.h,
 * GP_MOE_*), stored by ascending expert. */
static void route(const moe_ctx *c, const gp_attrs *a, const gp_ktensor *in, int ith, int nth)
{
    int64_t t0, t1, K = c->K, E = c->E;
    gp_share(c->T, ith, nth, &t0, &t1);
    int64_t ldx = in[0].nb[0] / 4;
    product(&in[1], -1, 0, E, (const float *)in[0].data + t0 * ldx, ldx, t1 - t0, c->H,
            c->logits + t0 * E, E);
    add_bias(c->bias ? &c->bias[0] : NULL, -1, 0, E, c->logits + t0 * E, E, t1 - t0);
    int64_t norm = a->i[GP_MOE_NORM];
    for (int64_t t = t0; t < t1; t++) {
        float *l = c->logits + t * E, w[GP_MOE_MAX_K];
        int32_t pick[GP_MOE_MAX_K];
        if (norm != GP_MOE_TOPK_SOFTMAX)
            softmax(l, E);
        top_k(l, E, K, pick);
        for (int64_t j = 0; j < K; j++)
            w[j] = l[pick[j]];
        if (norm == GP_MOE_TOPK_SOFTMAX) {
            softmax(w, K);
        } else if (norm == GP_MOE_SOFTMAX_NORM) {
            float sum = 0.0f; /* in rank order, as the probabilities' sum over the top k */
            for (int64_t j = 0; j < K; j++)
                sum += w[j];
            for (int64_t j = 0; j < K; j++)
                w[j] /= sum;
        }
        /* by expert: the order the outputs are summed in */
        for (int64_t j = 1; j < K; j++)
            for (int64_t q = j; q > 0 && pick[q - 1] > pick[q]; q--) {
                int32_t pe = pick[q];
                float pw = w[q];
                pick[q] = pick[q - 1], w[q] = w[q - 1];
                pick[q - 1] = pe, w[q - 1] = pw;
            }
        memcpy(c->sel + t * K, pick, (size_t)K * sizeof *pick);
        memcpy(c->wt + t * K, w, (size_t)K * sizeof *w);
    }
}

/* Expert e's rows of q as the integer products' workspace for rows of K (NULL: none planned,
 * or too few rows for the integer path), its bytes in *bytes. */
static void *qws(const moe_ctx *c, int64_t e, int64_t K, size_t *bytes)
{
    int64_t m = c->off[e + 1] - c->off[e];
    *bytes = (size_t)gp_quant_matmul_ws_bytes(m, K);
    return c->quant && *bytes ? c->q + c->qrow[e] * 4 * K : NULL;
}

/* y (rows ldy apart) = the m rows of x times expert e's weights w, columns [n0, n1): on the
 * integer path (x's rows already quantized into qw) when it takes the product, else product(). */
static void expert_product(const moe_ctx *c, const gp_ktensor *w, int64_t e, int64_t n0,
                           int64_t n1, const float *x, int64_t K, float *y, int64_t ldy)
{
    int64_t m = c->off[e + 1] - c->off[e];
    size_t qb;
    const void *q = qws(c, e, K, &qb);
    if (q && gp_quant_matmul_ws_taken(w->dtype, m, K, q, qb))
        gp_quant_matmul_ws_cols(w->dtype, (const char *)w->data + e * w->nb[0], n0, n1, m, K, y,
                                ldy, q);
    else
        product(w, e, n0, n1, x, K, m, K, y, ldy);
}

/* Phases 3 and 5, a share of the rows: each expert's rows of x (K wide) quantized into its rows
 * of q where a product of weights a or b (b may be NULL) takes the integer path. */
static void quantize_rows(const moe_ctx *c, const float *x, int64_t K, const gp_ktensor *a,
                          const gp_ktensor *b, int ith, int nth)
{
    for (int64_t e = 0; c->quant && e < c->E; e++) {
        int64_t r0 = c->off[e], m = c->off[e + 1] - r0;
        size_t qb;
        void *q = qws(c, e, K, &qb);
        if (q && (gp_quant_matmul_ws_taken(a->dtype, m, K, q, qb) ||
                  (b && gp_quant_matmul_ws_taken(b->dtype, m, K, q, qb))))
            gp_quant_matmul_ws_prep(x + r0 * K, K, m, K, q, ith, nth);
    }
}

/* Phase 1, one thread: expert e's rows are its tokens in ascending order, at
 * [off[e], off[e + 1]); slot[t k + j] is the row of token t's j-th expert; with quantized
 * experts, e's rows of q from qrow[e] (its rows rounded up to 16). */
static void group(const moe_ctx *c)
{
    int64_t E = c->E, n = c->T * c->K;
    memset(c->off, 0, (size_t)(E + 1) * sizeof *c->off);
    for (int64_t i = 0; i < n; i++)
        c->off[c->sel[i] + 1]++;
    for (int64_t e = 0; e < E; e++) {
        c->off[e + 1] += c->off[e];
        c->cur[e] = c->off[e];
    }
    for (int64_t i = 0; i < n; i++)
        c->slot[i] = c->cur[c->sel[i]]++;
    if (c->quant) {
        c->qrow[0] = 0;
        for (int64_t e = 0; e < E; e++)
            c->qrow[e + 1] = c->qrow[e] + (c->off[e + 1] - c->off[e] + 15) / 16 * 16;
    }
}

/* Phase 2, a share of the tokens: each token's row of x copied to its experts' rows. */
static void gather(const moe_ctx *c, const gp_ktensor *x, int ith, int nth)
{
    int64_t t0, t1;
    gp_share(c->T, ith, nth, &t0, &t1);
    for (int64_t t = t0; t < t1; t++)
        for (int64_t j = 0; j < c->K; j++)
            memcpy(c->xg + c->slot[t * c->K + j] * c->H, (const char *)x->data + t * x->nb[0],
                   (size_t)c->H * sizeof(float));
}

/* The clamped SwiGLU of gpt-oss (core.h, GP_MOE_SWIGLU_OAI) of n gates g and ups u, into g:
 * transformers' GptOssExperts._apply_gate, each operation rounded to f32 as torch's. */
static void swiglu_oai(float *g, const float *u, int64_t n, float alpha, float limit)
{
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i] < limit ? g[i] : limit; /* clamp(max=limit): NaN stays NaN */
        float ui = u[i] < -limit ? -limit : u[i] > limit ? limit : u[i];
        if (g[i] != g[i])
            gi = g[i];
        float sig = 1.0f / (1.0f + gp_expf(-(gi * alpha)));
        float glu = gi * sig;
        g[i] = (ui + 1.0f) * glu;
    }
}

/* Phase 4, a share of F's columns for every used expert: gate and up products over its rows
 * (plus their biases), then the activation in gate's place: silu(gate) * up (the swiglu op's
 * operations) or the clamped SwiGLU. */
static void gate_up(const moe_ctx *c, const gp_attrs *a, const gp_ktensor *in, int ith, int nth)
{
    int oai = a->i[GP_MOE_ACT] == GP_MOE_SWIGLU_OAI;
    float alpha = (float)a->f[GP_MOE_ALPHA], limit = (float)a->f[GP_MOE_LIMIT];
    int64_t f0, f1, F = c->F, H = c->H;
    col_share(F, ith, nth, &f0, &f1);
    if (f0 >= f1)
        return;
    for (int64_t e = 0; e < c->E; e++) {
        int64_t r0 = c->off[e], m = c->off[e + 1] - r0;
        if (m == 0)
            continue;
        expert_product(c, &in[2], e, f0, f1, c->xg + r0 * H, H, c->g + r0 * F, F);
        expert_product(c, &in[3], e, f0, f1, c->xg + r0 * H, H, c->u + r0 * F, F);
        if (c->bias) {
            add_bias(&c->bias[1], e, f0, f1, c->g + r0 * F, F, m);
            add_bias(&c->bias[2], e, f0, f1, c->u + r0 * F, F, m);
        }
        for (int64_t r = r0; r < r0 + m; r++) {
            float *g = c->g + r * F + f0;
            const float *u = c->u + r * F + f0;
            if (oai) {
                swiglu_oai(g, u, f1 - f0, alpha, limit);
                continue;
            }
            gp_cpu_unary(GP_OP_SILU, NULL, g, f1 - f0);
            for (int64_t i = 0; i < f1 - f0; i++)
                g[i] *= u[i];
        }
    }
}

/* Phase 6, a share of H's columns: every used expert's down product (into xg, whose rows x's
 * copies no longer need), then each token's weighted sum over its experts, ascending. */
static void down_combine(const moe_ctx *c, const gp_ktensor *in, const gp_ktensor *out, int ith,
                         int nth)
{
    int64_t h0, h1, F = c->F, H = c->H, K = c->K;
    col_share(H, ith, nth, &h0, &h1);
    if (h0 >= h1)
        return;
    for (int64_t e = 0; e < c->E; e++) {
        int64_t r0 = c->off[e], m = c->off[e + 1] - r0;
        if (m > 0)
            expert_product(c, &in[4], e, h0, h1, c->g + r0 * F, F, c->xg + r0 * H, H);
        if (m > 0 && c->bias)
            add_bias(&c->bias[3], e, h0, h1, c->xg + r0 * H, H, m);
    }
    float acc[COLS];
    for (int64_t t = 0; t < c->T; t++) {
        char *po = (char *)out->data + t * out->nb[0];
        for (int64_t n0 = h0; n0 < h1; n0 += COLS) {
            int64_t nc = h1 - n0 < COLS ? h1 - n0 : COLS;
            for (int64_t i = 0; i < nc; i++)
                acc[i] = 0.0f;
            for (int64_t j = 0; j < K; j++) {
                float w = c->wt[t * K + j];
                const float *y = c->xg + c->slot[t * K + j] * H + n0;
                for (int64_t i = 0; i < nc; i++)
                    acc[i] += w * y[i];
            }
            gp_cpu_store_row(po + n0 * out->nb[1], out->nb[1], out->dtype, acc, nc);
        }
    }
}

void gp_cpu_moe_phase(const gp_attrs *a, const gp_ktensor *out, const gp_ktensor *in, int n_in,
                      void *ws, size_t ws_size, int ith, int nth, int phase)
{
    moe_ctx c = ctx_of(a, in, n_in, ws, ws_size);
    switch (phase) {
    case 0: route(&c, a, in, ith, nth); break;
    case 1:
        if (ith == 0)
            group(&c);
        break;
    case 2: gather(&c, &in[0], ith, nth); break;
    case 3: quantize_rows(&c, c.xg, c.H, &in[2], &in[3], ith, nth); break;
    case 4: gate_up(&c, a, in, ith, nth); break;
    case 5: quantize_rows(&c, c.g, c.F, &in[4], NULL, ith, nth); break;
    case 6: down_combine(&c, in, out, ith, nth); break;
    default: GP_ASSERT(!"gp_cpu_moe_phase: no such phase");
    }
}

void gp_cpu_moe(const gp_attrs *a, const gp_ktensor *out, const gp_ktensor *in, int n_in,
                void *ws, size_t ws_size, int ith, int nth)
{
    (void)nth;
    if (ith != 0) /* no barrier between the phases here: one thread runs them all */
        return;
    for (int ph = 0; ph < GP_MOE_PHASES; ph++)
        gp_cpu_moe_phase(a, out, in, n_in, ws, ws_size, 0, 1, ph);
}
