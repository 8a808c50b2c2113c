/* Tests of the routed experts (suite "moe"): the CPU kernel against a double-precision reference
 * (routing, normalisations, ties, grouping with uneven counts, float and quantized experts), the
 * same bits for every thread count and for a token alone or in a batch, gp_cpu_check's refusals,
 * the planned workspace; and whole MoE graphs: no allocation per eval whatever the routing, 1 and
 * 2 threads bit-identical, stacked expert weights from safetensors and GGUF files (merged, one
 * by one adjacent or not), and the refusals of bad expert tensors. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_kernels.h"
#include "cpu/cpu_internal.h"
#include "cpu/moe.h"
#include "cpu/quant.h"
#include "ir/f16.h"
#include "plan/plan.h"
#include "runtime/lora.h" /* gp_model_plan */
#include "tests/alloc/alloc_count.h"
#include "tests/gguf_writer.h"
#include "tests/testmodel.h"
#include "tests/testutil.h"
#include "weights/gguf.h"
#include "weights/safetensors.h"

/* ---- a weight in any dtype and the values the kernel sees ---- */

typedef struct {
    gp_dtype t;
    int64_t rows, k; /* rows of k elements */
    void *bytes;     /* the stored rows */
    double *v;       /* [rows, k] their values (rounded, or dequantized) */
    size_t row_bytes;
} wbuf;

static wbuf wbuf_of(gp_dtype t, const float *src, int64_t rows, int64_t k)
{
    wbuf w = {t, rows, k, NULL, malloc((size_t)(rows * k) * sizeof(double)), 0};
    w.row_bytes = gp_dtype_is_quant(t) ? gp_dtype_row_bytes(t, k) : gp_dtype_size(t) * (size_t)k;
    w.bytes = malloc(w.row_bytes * (size_t)rows);
    float *tmp = malloc((size_t)k * sizeof *tmp);
    for (int64_t r = 0; r < rows; r++) {
        const float *s = src + r * k;
        char *dst = (char *)w.bytes + (size_t)r * w.row_bytes;
        if (gp_dtype_is_quant(t)) {
            gp_quant_quantize_row(t, s, dst, k);
            gp_quant_dequantize_row(t, dst, tmp, k);
        } else {
            for (int64_t i = 0; i < k; i++) {
                uint16_t h;
                if (t == GP_F32) {
                    memcpy(dst + 4 * i, &s[i], 4);
                    tmp[i] = s[i];
                } else if (t == GP_F16) {
                    h = gp_f32_to_f16(s[i]);
                    memcpy(dst + 2 * i, &h, 2);
                    tmp[i] = gp_f16_to_f32(h);
                } else {
                    h = gp_f32_to_bf16(s[i]);
                    memcpy(dst + 2 * i, &h, 2);
                    tmp[i] = gp_bf16_to_f32(h);
                }
            }
        }
        for (int64_t i = 0; i < k; i++)
            w.v[r * k + i] = tmp[i];
    }
    free(tmp);
    return w;
}

static void wbuf_free(wbuf *w)
{
    free(w->bytes);
    free(w->v);
}

/* w as a kernel tensor of shape [e, n, k] (e = 0: [n, k]). */
static gp_ktensor kt_of(const wbuf *w, int64_t e, int64_t n)
{
    int64_t es = gp_dtype_is_quant(w->t) ? 0 : (int64_t)gp_dtype_size(w->t);
    if (e == 0)
        return (gp_ktensor){w->bytes, w->t, 2, {n, w->k}, {(int64_t)w->row_bytes, es}};
    return (gp_ktensor){w->bytes, w->t, 3, {e, n, w->k},
                        {(int64_t)w->row_bytes * n, (int64_t)w->row_bytes, es}};
}

/* ---- the case: x [T, H], router [E, H], gate, up [E, F, H], down [E, H, F] ---- */

typedef struct {
    int64_t T, H, E, F, K, norm;
    float *x;             /* [T, H] */
    wbuf r, g, u, d;
} mcase;

static uint64_t rng = 0x5eed5eedull;

/* Random weights (router rows of gain rg) of dtypes rt and et; x uniform in [-1, 1). */
static mcase case_new(int64_t T, int64_t H, int64_t E, int64_t F, int64_t K, int64_t norm,
                      gp_dtype rt, gp_dtype et, float rg)
{
    mcase c = {T, H, E, F, K, norm, malloc((size_t)(T * H) * sizeof(float)), {0}, {0}, {0}, {0}};
    gp_test_uniform(c.x, (size_t)(T * H), -1, 1, &rng);
    size_t n = (size_t)(E * F * H);
    float *w = malloc(n * sizeof *w);
    gp_test_normal(w, (size_t)(E * H), rg / sqrtf((float)H), &rng);
    c.r = wbuf_of(rt, w, E, H);
    gp_test_normal(w, n, 1.0f / sqrtf((float)H), &rng);
    c.g = wbuf_of(et, w, E * F, H);
    gp_test_normal(w, n, 1.0f / sqrtf((float)H), &rng);
    c.u = wbuf_of(et, w, E * F, H);
    gp_test_normal(w, n, 1.0f / sqrtf((float)F), &rng);
    c.d = wbuf_of(et, w, E * H, F);
    free(w);
    return c;
}

static void case_free(mcase *c)
{
    free(c->x);
    wbuf_free(&c->r);
    wbuf_free(&c->g);
    wbuf_free(&c->u);
    wbuf_free(&c->d);
}

/* The k largest of v[n], ties to the lower index, into pick[k] (largest first). */
static void ref_top_k(const double *v, int64_t n, int64_t k, int32_t *pick)
{
    for (int64_t j = 0; j < k; j++) {
        int64_t best = -1;
        for (int64_t e = 0; e < n; e++) {
            int taken = 0;
            for (int64_t q = 0; q < j; q++)
                taken |= pick[q] == e;
            if (!taken && (best < 0 || v[e] > v[best]))
                best = e;
        }
        pick[j] = (int32_t)best;
    }
}

static void ref_softmax(double *v, int64_t n)
{
    double mx = -INFINITY, s = 0;
    for (int64_t i = 0; i < n; i++)
        mx = v[i] > mx ? v[i] : mx;
    for (int64_t i = 0; i < n; i++)
        s += v[i] = exp(v[i] - mx);
    for (int64_t i = 0; i < n; i++)
        v[i] /= s;
}

/* The reference in double: out [T, H]; sel and wt [T, K] by ascending expert. */
static void moe_ref(const mcase *c, double *out, int32_t *sel, double *wt)
{
    int64_t T = c->T, H = c->H, E = c->E, F = c->F, K = c->K;
    double *l = malloc((size_t)E * sizeof *l), *h = malloc((size_t)F * sizeof *h);
    for (int64_t t = 0; t < T; t++) {
        const float *x = c->x + t * H;
        for (int64_t e = 0; e < E; e++) {
            l[e] = 0;
            for (int64_t i = 0; i < H; i++)
                l[e] += (double)x[i] * c->r.v[e * H + i];
        }
        if (c->norm != GP_MOE_TOPK_SOFTMAX)
            ref_softmax(l, E);
        int32_t pick[GP_MOE_MAX_K];
        double w[GP_MOE_MAX_K], sum = 0;
        ref_top_k(l, E, K, pick);
        for (int64_t j = 0; j < K; j++)
            sum += w[j] = l[pick[j]];
        if (c->norm == GP_MOE_TOPK_SOFTMAX)
            ref_softmax(w, K);
        for (int64_t j = 0; c->norm == GP_MOE_SOFTMAX_NORM && j < K; j++)
            w[j] /= sum;
        for (int64_t j = 1; j < K; j++) /* by expert */
            for (int64_t q = j; q > 0 && pick[q - 1] > pick[q]; q--) {
                int32_t pe = pick[q];
                double pw = w[q];
                pick[q] = pick[q - 1], w[q] = w[q - 1];
                pick[q - 1] = pe, w[q - 1] = pw;
            }
        for (int64_t i = 0; i < H; i++)
            out[t * H + i] = 0;
        for (int64_t j = 0; j < K; j++) {
            int64_t e = pick[j];
            sel[t * K + j] = pick[j];
            wt[t * K + j] = w[j];
            for (int64_t f = 0; f < F; f++) {
                double gs = 0, us = 0;
                for (int64_t i = 0; i < H; i++) {
                    gs += (double)x[i] * c->g.v[(e * F + f) * H + i];
                    us += (double)x[i] * c->u.v[(e * F + f) * H + i];
                }
                h[f] = gs / (1 + exp(-gs)) * us;
            }
            for (int64_t i = 0; i < H; i++) {
                double y = 0;
                for (int64_t f = 0; f < F; f++)
                    y += h[f] * c->d.v[(e * H + i) * F + f];
                out[t * H + i] += w[j] * y;
            }
        }
    }
    free(l);
    free(h);
}

/* The kernel's inputs and output for c (out [T, H] f32 into y). */
static void kernel_tensors(const mcase *c, float *y, gp_ktensor in[5], gp_ktensor *out)
{
    in[0] = (gp_ktensor){c->x, GP_F32, 2, {c->T, c->H}, {c->H * 4, 4}};
    in[1] = kt_of(&c->r, 0, c->E);
    in[2] = kt_of(&c->g, c->E, c->F);
    in[3] = kt_of(&c->u, c->E, c->F);
    in[4] = kt_of(&c->d, c->E, c->H);
    *out = (gp_ktensor){y, GP_F32, 2, {c->T, c->H}, {c->H * 4, 4}};
}

/* Runs c on nth threads (0: gp_cpu_compute on one; else the phases with every thread of a phase
 * before the next, as the backend's barrier does) into y; the workspace, for its routing, in
 * *ws_out (the caller frees). */
static void run(const mcase *c, int nth, float *y, void **ws_out)
{
    gp_ktensor in[5], out;
    kernel_tensors(c, y, in, &out);
    gp_attrs a = {.i = {[GP_MOE_TOP_K] = c->K, [GP_MOE_NORM] = c->norm}};
    char err[256];
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_MOE, &a, &out, in, 5, err, sizeof err), 0);
    size_t ws_size = gp_cpu_workspace_bytes(GP_OP_MOE, &a, &out, in, 5, nth ? nth : 1);
    CU_ASSERT_EQUAL(ws_size,
                    (size_t)gp_moe_ws(c->T, c->H, c->E, c->K, c->F, gp_dtype_is_quant(c->g.t)).total);
    void *ws = malloc(ws_size);
    memset(ws, 0xa5, ws_size); /* no stale zeros to lean on */
    if (nth == 0) {
        gp_cpu_compute(GP_OP_MOE, &a, &out, in, 5, ws, ws_size, 0, 1);
    } else {
        int ph = gp_cpu_phases(GP_OP_MOE, &out, in, 5, ws, ws_size);
        CU_ASSERT_EQUAL(ph, GP_MOE_PHASES);
        for (int p = 0; p < ph; p++)
            for (int ith = nth - 1; ith >= 0; ith--) /* threads in any order */
                gp_cpu_compute_phase(GP_OP_MOE, &a, &out, in, 5, ws, ws_size, ith, nth, p);
    }
    if (ws_out)
        *ws_out = ws;
    else
        free(ws);
}

/* max |y - ref| / max |ref|. */
static double rel_err(const float *y, const double *ref, int64_t n)
{
    double e = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)y[i] - ref[i]);
        e = d > e || isnan(d) ? d : e;
        m = fabs(ref[i]) > m ? fabs(ref[i]) : m;
    }
    return m > 0 ? e / m : e;
}

/* Runs c, checks the routing in the workspace against the reference's (experts exactly, weights
 * within wtol) and the output within tol; returns the output's error. */
static double check_case(const mcase *c, double tol, double wtol)
{
    int64_t n = c->T * c->H, tk = c->T * c->K;
    float *y = malloc((size_t)n * sizeof *y);
    double *ref = malloc((size_t)n * sizeof *ref), *rw = malloc((size_t)tk * sizeof *rw);
    int32_t *rs = malloc((size_t)tk * sizeof *rs);
    void *ws;
    moe_ref(c, ref, rs, rw);
    run(c, 0, y, &ws);
    gp_moe_ws_layout l = gp_moe_ws(c->T, c->H, c->E, c->K, c->F, gp_dtype_is_quant(c->g.t));
    const int32_t *sel = (const int32_t *)(const void *)((const char *)ws + l.sel);
    const float *wt = (const float *)(const void *)((const char *)ws + l.wt);
    int bad_sel = 0, bad_wt = 0;
    for (int64_t i = 0; i < tk; i++) {
        bad_sel += sel[i] != rs[i];
        bad_wt += !(fabs(wt[i] - rw[i]) <= wtol);
    }
    CU_ASSERT_EQUAL(bad_sel, 0);
    CU_ASSERT_EQUAL(bad_wt, 0);
    double e = rel_err(y, ref, n);
    CU_ASSERT(e <= tol);
    if (!(e <= tol) || bad_sel || bad_wt)
        fprintf(stderr, "\n  moe T %lld H %lld E %lld F %lld k %lld norm %lld %s/%s: error %.3g "
                "(bound %.3g), %d experts and %d weights differ\n", (long long)c->T,
                (long long)c->H, (long long)c->E, (long long)c->F, (long long)c->K,
                (long long)c->norm, gp_dtype_name(c->r.t), gp_dtype_name(c->g.t), e, tol, bad_sel,
                bad_wt);
    free(ws);
    free(y);
    free(ref);
    free(rw);
    free(rs);
    return e;
}

/* ---- routing ---- */

/* Router rows of one-hot vectors: token t's logits are x[t][0..E) exactly. */
static void one_hot_router(mcase *c)
{
    float *w = calloc((size_t)(c->E * c->H), sizeof *w);
    for (int64_t e = 0; e < c->E; e++)
        w[e * c->H + e] = 1;
    wbuf_free(&c->r);
    c->r = wbuf_of(GP_F32, w, c->E, c->H);
    free(w);
}

static void set_logits(mcase *c, int64_t t, const float *l)
{
    memcpy(c->x + t * c->H, l, (size_t)c->E * sizeof *l);
}

static void test_routing(void)
{
    /* Each norm on random routing, k = 1..4 of 8. */
    for (int64_t norm = 0; norm < GP_MOE_NORM_COUNT; norm++)
        for (int64_t k = 1; k <= 4; k++) {
            mcase c = case_new(6, 32, 8, 16, k, norm, GP_F32, GP_F32, 3.0f);
            check_case(&c, 1e-5, 1e-6);
            case_free(&c);
        }
    /* Ties to the lower index; the weights of each rule exactly as the formulas give them. */
    mcase c = case_new(4, 16, 5, 16, 2, GP_MOE_SOFTMAX, GP_F32, GP_F32, 1);
    one_hot_router(&c);
    static const float l0[5] = {1, 3, 3, 0, 3}, l1[5] = {0, 0, 0, 0, 0},
                       l2[5] = {0.5f, -1, 2, 0.1f, 1}, l3[5] = {-2, 7, -2, 7, 7};
    set_logits(&c, 0, l0);
    set_logits(&c, 1, l1);
    set_logits(&c, 2, l2);
    set_logits(&c, 3, l3);
    static const int32_t want[4][2] = {{1, 2}, {0, 1}, {2, 4}, {1, 3}};
    for (int64_t norm = 0; norm < GP_MOE_NORM_COUNT; norm++) {
        c.norm = norm;
        check_case(&c, 1e-5, 1e-6);
        float y[4 * 16];
        void *ws;
        run(&c, 0, y, &ws);
        gp_moe_ws_layout l = gp_moe_ws(4, 16, 5, 2, 16, 0);
        const int32_t *sel = (const int32_t *)(const void *)((const char *)ws + l.sel);
        const float *wt = (const float *)(const void *)((const char *)ws + l.wt);
        for (int t = 0; t < 4; t++) {
            CU_ASSERT_EQUAL(sel[2 * t], want[t][0]);
            CU_ASSERT_EQUAL(sel[2 * t + 1], want[t][1]);
        }
        /* tied experts get equal weights: 1/2 each once normalised, p itself otherwise */
        double p0 = exp(3.0) / (exp(1.0) + 3 * exp(3.0) + 1);
        double w0 = norm == GP_MOE_SOFTMAX ? p0 : 0.5, w1 = norm == GP_MOE_SOFTMAX ? 0.2 : 0.5;
        CU_ASSERT_DOUBLE_EQUAL(wt[0], w0, 1e-6);
        CU_ASSERT_DOUBLE_EQUAL(wt[1], w0, 1e-6);
        CU_ASSERT_DOUBLE_EQUAL(wt[2], w1, 1e-6);
        CU_ASSERT_DOUBLE_EQUAL(wt[3], w1, 1e-6);
        free(ws);
    }
    case_free(&c);
}

/* Grouping with uneven counts: an expert with no token, one with every token (k = 1, and
 * k = 2 with all tokens on experts 0 and 1), the rows of each expert at off[e]. */
static void test_grouping(void)
{
    for (int k = 1; k <= 2; k++) {
        mcase c = case_new(7, 32, 4, 16, k, GP_MOE_SOFTMAX_NORM, GP_F32, GP_F32, 1);
        one_hot_router(&c);
        static const float all[4] = {5, 4, 0, 0};
        for (int64_t t = 0; t < c.T; t++)
            set_logits(&c, t, all);
        check_case(&c, 1e-5, 1e-6);
        float y[7 * 32];
        void *ws;
        run(&c, 2, y, &ws);
        gp_moe_ws_layout l = gp_moe_ws(7, 32, 4, k, 16, 0);
        const int32_t *off = (const int32_t *)(const void *)((const char *)ws + l.off);
        int32_t want1[5] = {0, 7, 7, 7, 7}, want2[5] = {0, 7, 14, 14, 14};
        CU_ASSERT_EQUAL(memcmp(off, k == 1 ? want1 : want2, sizeof want1), 0);
        free(ws);
        /* Every token to the last expert but token 3 (to expert 1; k = 2: and expert 0, the
         * lowest of the tied rest, to every other token): expert 2 idle. */
        static const float last[4] = {0, 0, 0, 9}, one[4] = {0, 9, 0, 1};
        for (int64_t t = 0; t < c.T; t++)
            set_logits(&c, t, t == 3 ? one : last);
        check_case(&c, 1e-5, 1e-6);
        run(&c, 3, y, &ws);
        off = (const int32_t *)(const void *)((const char *)ws + l.off);
        int32_t w1[5] = {0, 0, 1, 1, 7}, w2[5] = {0, 6, 7, 7, 14};
        CU_ASSERT_EQUAL(memcmp(off, k == 1 ? w1 : w2, sizeof w1), 0);
        free(ws);
        case_free(&c);
    }
}

/* ---- experts in every dtype ---- */

static void test_dtypes(void)
{
    /* f16 and bf16 experts (and router): the reference reads the same rounded values. */
    static const gp_dtype floats[] = {GP_F16, GP_BF16};
    for (int i = 0; i < 2; i++) {
        mcase c = case_new(5, 64, 8, 32, 2, GP_MOE_SOFTMAX_NORM, floats[i], floats[i], 3);
        check_case(&c, 1e-5, 1e-6);
        case_free(&c);
    }
    /* Block-quantized experts: within 1e-4 of the reference on their dequantized values (the
     * f32 sums' order is all that differs), and against the same model's f32 experts within the
     * format's own error (bounds about twice what these weights show: 0.145 q4_0, 0.13 q4_1,
     * 0.045 q5_0, 0.058 q5_1, 0.0084 q8_0, 0.13 q4_k, 0.072 q5_k, 0.041 q6_k). */
    static const struct {
        gp_dtype t;
        double vs_f32;
    } q[] = {{GP_Q4_0, 0.3}, {GP_Q4_1, 0.26}, {GP_Q5_0, 0.09}, {GP_Q5_1, 0.12},
             {GP_Q8_0, 0.02}, {GP_Q4_K, 0.27}, {GP_Q5_K, 0.15}, {GP_Q6_K, 0.08}};
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
        uint64_t seed = rng;
        mcase c = case_new(5, 256, 4, 256, 2, GP_MOE_SOFTMAX_NORM, GP_F32, q[i].t, 3);
        check_case(&c, 1e-4, 1e-6);
        uint64_t after = rng;
        rng = seed; /* the same values in f32 */
        mcase f = case_new(5, 256, 4, 256, 2, GP_MOE_SOFTMAX_NORM, GP_F32, GP_F32, 3);
        rng = after;
        int64_t n = c.T * c.H;
        float *yq = malloc((size_t)n * sizeof *yq);
        double *ref = malloc((size_t)n * sizeof *ref), w[10];
        int32_t s[10];
        run(&c, 0, yq, NULL);
        moe_ref(&f, ref, s, w);
        double e = rel_err(yq, ref, n);
        CU_ASSERT(e <= q[i].vs_f32);
        if (!(e <= q[i].vs_f32))
            fprintf(stderr, "\n  %s experts: %.3g from the f32 experts' output (bound %.3g)\n",
                    gp_dtype_name(q[i].t), e, q[i].vs_f32);
        free(yq);
        free(ref);
        case_free(&f);
        case_free(&c);
    }
    /* A quantized router too (its logits the dequantized router's). */
    mcase c = case_new(5, 256, 8, 32, 3, GP_MOE_SOFTMAX, GP_Q8_0, GP_F32, 3);
    check_case(&c, 1e-5, 1e-6);
    case_free(&c);
}

/* ---- the same bits ---- */

static void test_bits(void)
{
    static const gp_dtype ets[] = {GP_F32, GP_BF16, GP_Q4_K, GP_Q8_0};
    for (size_t i = 0; i < sizeof ets / sizeof ets[0]; i++) {
        int64_t H = gp_dtype_is_quant(ets[i]) ? 256 : 96, F = H == 256 ? 256 : 48;
        mcase c = case_new(9, H, 6, F, 2, GP_MOE_SOFTMAX_NORM, GP_F32, ets[i], 3);
        int64_t n = c.T * H;
        float *y0 = malloc((size_t)n * sizeof *y0), *y = malloc((size_t)n * sizeof *y);
        run(&c, 0, y0, NULL);
        for (int nth = 1; nth <= 3; nth++) {
            memset(y, 0, (size_t)n * sizeof *y);
            run(&c, nth, y, NULL);
            CU_ASSERT_EQUAL(memcmp(y, y0, (size_t)n * sizeof *y), 0);
        }
        /* Each token alone gives its row of the batch, bit for bit (the products' sums depend on
         * K alone, not on the rows an expert takes). */
        int same = 1;
        for (int64_t t = 0; t < c.T; t++) {
            mcase one = c;
            one.T = 1;
            one.x = c.x + t * H;
            run(&one, 2, y, NULL);
            same &= !memcmp(y, y0 + t * H, (size_t)H * sizeof *y);
        }
        CU_ASSERT(same);
        free(y0);
        free(y);
        case_free(&c);
    }
}

/* ---- the integer products ---- */

/* Experts of many rows (40 tokens, 2 of 4 experts each: about 20 rows an expert) of quantized
 * weights take the integer path (x's rows quantized in two 8-bit parts, cpu/quant.h) where the
 * CPU has one: within its error of the dequantized reference, the same bits for 1 to 3 threads,
 * and not the bits of the f32 path (forced with gp_quant_force_isa), which is within 1e-4. */
static void test_integer_path(void)
{
    static const gp_dtype q[] = {GP_Q4_0, GP_Q4_1, GP_Q5_0, GP_Q5_1,
                                 GP_Q8_0, GP_Q4_K, GP_Q5_K, GP_Q6_K};
    int have = gp_quant_isa() != GP_QUANT_ISA_PORTABLE;
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
        mcase c = case_new(40, 256, 4, 256, 2, GP_MOE_SOFTMAX_NORM, GP_F32, q[i], 3);
        int64_t n = c.T * c.H;
        float *y = malloc((size_t)n * sizeof *y), *y1 = malloc((size_t)n * sizeof *y1);
        double e = check_case(&c, 5e-4, 1e-6); /* measured 0.35e-4 to 1.15e-4 */
        run(&c, 1, y1, NULL);
        for (int nth = 2; nth <= 3; nth++) {
            run(&c, nth, y, NULL);
            CU_ASSERT_EQUAL(memcmp(y, y1, (size_t)n * sizeof *y), 0);
        }
        gp_quant_force_isa(GP_QUANT_ISA_PORTABLE);
        double ef = check_case(&c, 1e-4, 1e-6);
        run(&c, 1, y, NULL);
        gp_quant_force_isa(GP_QUANT_ISA_AUTO);
        if (have)
            CU_ASSERT(memcmp(y, y1, (size_t)n * sizeof *y) != 0);
        if (getenv("GP_TEST_VERBOSE"))
            fprintf(stderr, "\n  %s: integer %.3g, f32 %.3g", gp_dtype_name(q[i]), e, ef);
        free(y);
        free(y1);
        case_free(&c);
    }
}

/* ---- refusals ---- */

static void test_check(void)
{
    mcase c = case_new(3, 32, 4, 16, 2, 0, GP_F32, GP_F32, 1);
    float y[3 * 32];
    gp_ktensor in[5], out;
    char err[256];
    static const struct {
        int64_t k, norm;
        const char *msg;
    } attrs[] = {{5, 0, "moe: top_k 5 for 4 experts (expected 1..64 and at most E)"},
                 {0, 0, "moe: top_k 0 for 4 experts"},
                 {2, 3, "moe: unknown norm 3 or act 0"}};
    for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
        kernel_tensors(&c, y, in, &out);
        gp_attrs a = {.i = {[GP_MOE_TOP_K] = attrs[i].k, [GP_MOE_NORM] = attrs[i].norm}};
        CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_MOE, &a, &out, in, 5, err, sizeof err), -1);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, attrs[i].msg));
    }
    gp_attrs a = {.i = {[GP_MOE_TOP_K] = 2}};
    kernel_tensors(&c, y, in, &out);
    in[3].ne[0] = 3; /* up of 3 experts */
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_MOE, &a, &out, in, 5, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "moe: up must be [4, 16, 32] of whole f32 rows");
    kernel_tensors(&c, y, in, &out);
    in[4].ne[2] = 32; /* down [E, H, H] */
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_MOE, &a, &out, in, 5, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "moe: down must be [4, 32, 16] of whole f32 rows");
    kernel_tensors(&c, y, in, &out);
    in[1].ne[1] = 16;
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_MOE, &a, &out, in, 5, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "moe: router must be [4, 32] of whole f32 rows");
    kernel_tensors(&c, y, in, &out);
    out.ne[1] = 16;
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_MOE, &a, &out, in, 5, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "moe: out must be f32 [3, 32]");
    kernel_tensors(&c, y, in, &out);
    in[0].dtype = GP_F16;
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_MOE, &a, &out, in, 5, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "expected x f32 [T, H] (rows contiguous)"));
    kernel_tensors(&c, y, in, &out);
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_MOE, &a, &out, in, 4, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "4 inputs, expected 5..9"));
    gp_ktensor in6[6] = {in[0], in[1], in[2], in[3], in[4], in[1]};
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_MOE, &a, &out, in6, 6, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "6 inputs: the four biases come together"));
    case_free(&c);
}

/* ---- gpt-oss's experts: biases, the clamped SwiGLU, transformers' layout through views ---- */

/* transformers' GptOssExperts in double: gate_up [E, H, 2F] (gate the even columns, up the odd),
 * gate_up_b [E, 2F], down [E, F, H], down_b [E, H]; the router [E, H] with rb [E], its top k
 * logits softmaxed; the clamped SwiGLU of limit and alpha. */
static void oss_ref(int64_t T, int64_t H, int64_t E, int64_t F, int64_t K, const float *x,
                    const float *r, const float *rb, const float *gu, const float *gub,
                    const float *dn, const float *db, double alpha, double limit, double *out,
                    int *clamped)
{
    double l[64], act[64];
    for (int64_t t = 0; t < T; t++) {
        for (int64_t e = 0; e < E; e++) {
            l[e] = rb[e];
            for (int64_t i = 0; i < H; i++)
                l[e] += (double)x[t * H + i] * r[e * H + i];
        }
        int32_t pick[GP_MOE_MAX_K];
        double w[GP_MOE_MAX_K];
        ref_top_k(l, E, K, pick);
        for (int64_t j = 0; j < K; j++)
            w[j] = l[pick[j]];
        ref_softmax(w, K);
        for (int64_t i = 0; i < H; i++)
            out[t * H + i] = 0;
        for (int64_t j = 0; j < K; j++) {
            int64_t e = pick[j];
            for (int64_t f = 0; f < F; f++) {
                double g = gub[e * 2 * F + 2 * f], u = gub[e * 2 * F + 2 * f + 1];
                for (int64_t i = 0; i < H; i++) {
                    g += (double)x[t * H + i] * gu[(e * H + i) * 2 * F + 2 * f];
                    u += (double)x[t * H + i] * gu[(e * H + i) * 2 * F + 2 * f + 1];
                }
                *clamped += g > limit || fabs(u) > limit;
                g = g < limit ? g : limit;
                u = u < -limit ? -limit : u > limit ? limit : u;
                act[f] = (u + 1) * g / (1 + exp(-alpha * g));
            }
            for (int64_t i = 0; i < H; i++) {
                double y = db[e * H + i];
                for (int64_t f = 0; f < F; f++)
                    y += act[f] * dn[(e * F + f) * H + i];
                out[t * H + i] += w[j] * y;
            }
        }
    }
}

static void test_gpt_oss(void)
{
    enum { T = 7, H = 32, E = 6, F = 16, K = 3 };
    static float x[T * H], r[E * H], rb[E], gu[E * H * 2 * F], gub[E * 2 * F], dn[E * F * H],
        db[E * H], y[T * H];
    static double ref[T * H];
    gp_test_uniform(x, T * H, -1, 1, &rng);
    gp_test_normal(r, E * H, 2.0f / sqrtf(H), &rng);
    gp_test_normal(rb, E, 0.5f, &rng);
    gp_test_normal(gu, E * H * 2 * F, 2.0f / sqrtf(H), &rng);
    gp_test_normal(gub, E * 2 * F, 0.5f, &rng);
    gp_test_normal(dn, E * F * H, 1.0f / sqrtf(F), &rng);
    gp_test_normal(db, E * H, 0.1f, &rng);
    double alpha = 1.702, limit = 1.25; /* a limit the products pass often */
    int clamped = 0;
    oss_ref(T, H, E, F, K, x, r, rb, gu, gub, dn, db, alpha, limit, ref, &clamped);
    CU_ASSERT(clamped > 20);
    /* The graph's views: gate and up the even and odd columns of gate_up [E, H, 2F] as
     * [E, F, H], down [E, F, H] as [E, H, F], the biases' even and odd columns. */
    gp_ktensor in[9] = {
        {x, GP_F32, 2, {T, H}, {H * 4, 4}},
        {r, GP_F32, 2, {E, H}, {H * 4, 4}},
        {gu, GP_F32, 3, {E, F, H}, {H * 2 * F * 4, 8, 2 * F * 4}},
        {gu + 1, GP_F32, 3, {E, F, H}, {H * 2 * F * 4, 8, 2 * F * 4}},
        {dn, GP_F32, 3, {E, H, F}, {F * H * 4, 4, H * 4}},
        {rb, GP_F32, 1, {E}, {4}},
        {gub, GP_F32, 2, {E, F}, {2 * F * 4, 8}},
        {gub + 1, GP_F32, 2, {E, F}, {2 * F * 4, 8}},
        {db, GP_F32, 2, {E, H}, {H * 4, 4}},
    };
    gp_ktensor out = {y, GP_F32, 2, {T, H}, {H * 4, 4}};
    gp_attrs a = {.i = {[GP_MOE_TOP_K] = K, [GP_MOE_NORM] = GP_MOE_TOPK_SOFTMAX,
                        [GP_MOE_ACT] = GP_MOE_SWIGLU_OAI},
                  .f = {[GP_MOE_ALPHA] = alpha, [GP_MOE_LIMIT] = limit}};
    char err[256];
    CU_ASSERT_EQUAL_FATAL(gp_cpu_check(GP_OP_MOE, &a, &out, in, 9, err, sizeof err), 0);
    size_t ws_size = gp_cpu_workspace_bytes(GP_OP_MOE, &a, &out, in, 9, 3);
    void *ws = malloc(ws_size);
    float first[T * H];
    for (int nth = 0; nth <= 3; nth += 3) { /* one thread; then 3, the phases */
        memset(ws, 0xa5, ws_size);
        memset(y, 0, sizeof y);
        if (nth == 0) {
            gp_cpu_compute(GP_OP_MOE, &a, &out, in, 9, ws, ws_size, 0, 1);
            memcpy(first, y, sizeof y);
        } else {
            for (int p = 0; p < GP_MOE_PHASES; p++)
                for (int ith = nth - 1; ith >= 0; ith--)
                    gp_cpu_compute_phase(GP_OP_MOE, &a, &out, in, 9, ws, ws_size, ith, nth, p);
            CU_ASSERT_EQUAL(memcmp(first, y, sizeof y), 0); /* the same bits */
        }
        double e = rel_err(y, ref, T * H);
        CU_ASSERT(e <= 2e-6);
        if (!(e <= 2e-6))
            fprintf(stderr, "\n  gpt-oss experts, %d threads: error %.3g\n", nth, e);
    }
    /* silu with the biases: the clamped SwiGLU's absence changes the output */
    a.i[GP_MOE_ACT] = GP_MOE_SILU;
    gp_cpu_compute(GP_OP_MOE, &a, &out, in, 9, ws, ws_size, 0, 1);
    CU_ASSERT(rel_err(y, ref, T * H) > 1e-2);
    a.i[GP_MOE_ACT] = GP_MOE_SWIGLU_OAI;
    a.f[GP_MOE_LIMIT] = 0;
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_MOE, &a, &out, in, 9, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "the clamped swiglu needs a limit > 0"));
    free(ws);
}

/* ---- the workspace ---- */

static void test_workspace(void)
{
    /* Parts in order, aligned, not overlapping, covering every row whatever the routing. */
    gp_moe_ws_layout l = gp_moe_ws(5, 64, 8, 3, 32, 0);
    int64_t at[] = {l.sel, l.wt, l.logits, l.off, l.cur, l.slot, l.xg, l.g, l.u, l.total};
    int64_t need[] = {4 * 15, 4 * 15, 4 * 40, 4 * 9, 4 * 8, 4 * 15, 4 * 15 * 64, 4 * 15 * 32,
                      4 * 15 * 32};
    for (int i = 0; i < 9; i++) {
        CU_ASSERT_EQUAL(at[i] % 64, 0);
        CU_ASSERT(at[i + 1] - at[i] >= need[i]);
    }
    CU_ASSERT_EQUAL(at[0], 0);
    CU_ASSERT(gp_moe_ws(4, 64, 8, 3, 32, 0).total < l.total);
}

/* ---- whole graphs ---- */

static const char *const small_defs[] = {
    "num_hidden_layers=2", "hidden_size=64", "moe_intermediate_size=32", "num_experts=8",
    "num_experts_per_tok=2", "num_attention_heads=4", "num_key_value_heads=2", "head_dim=16",
    "vocab_size=96", "max_position_embeddings=64", "n_batch=16"};
#define N_SMALL ((int)(sizeof small_defs / sizeof small_defs[0]))

/* examples/qwen3moe.gplan at a small shape (+ extra defines), random weights of seed. */
static gp_model *small_model(const char *extra, uint64_t seed, gp_graph **g)
{
    const char *defs[N_SMALL + 1];
    memcpy(defs, small_defs, sizeof small_defs);
    defs[N_SMALL] = extra;
    gp_test_model_opts o = {defs, N_SMALL + (extra != NULL), NULL, 1, seed};
    return gp_test_model("examples/qwen3moe.gplan", &o, g);
}

static gp_session *session(gp_model *m, const char *backend, int threads)
{
    char err[512];
    gp_session_opts o = {backend, threads, 0};
    gp_session *s = gp_session_new(m, &o, err, sizeof err);
    if (!s)
        fprintf(stderr, "\n  session: %s\n", err);
    return s;
}

/* The plan reserves the moe nodes' workspace at the bound of T; 1 and 2 threads, and the
 * reference backend, give the same logits bit for bit; evals allocate nothing, whatever the
 * routing of their tokens. m: 2 MoE layers of hidden 64, 8 experts of 32, top 2, n_batch 16. */
static void model_checks(gp_model *m)
{
    const gp_plan *p = gp_model_plan(m);
    int moes = 0;
    for (int i = 0; i < p->n_nodes; i++) {
        if (p->nodes[i].op != GP_OP_MOE)
            continue;
        moes++;
        CU_ASSERT(p->nodes[i].workspace >= 0);
        if (p->nodes[i].workspace >= 0)
            CU_ASSERT(p->tensors[p->nodes[i].workspace].size >= gp_moe_ws(16, 64, 8, 2, 32, 0).total);
    }
    CU_ASSERT_EQUAL(moes, 2);
    int64_t V = gp_test_vocab(m);
    gp_session *s1 = session(m, "cpu", 1), *s2 = session(m, "cpu", 2);
    gp_session *sr = session(m, "reference", 1);
    CU_ASSERT_FATAL(s1 && s2 && sr);
    float *a = malloc(sizeof(float) * 16 * (size_t)V), *b = malloc(sizeof(float) * 16 * (size_t)V);
    float *r = malloc(sizeof(float) * 16 * (size_t)V);
    /* a prompt of 12, then decode steps */
    int steps[] = {12, 1, 1, 3, 1}, start = 0, same = 1, same_ref = 1;
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        int n = steps[i];
        CU_ASSERT_EQUAL(gp_test_eval_tokens(s1, n, start, 37, a, V), 0);
        CU_ASSERT_EQUAL(gp_test_eval_tokens(s2, n, start, 37, b, V), 0);
        CU_ASSERT_EQUAL(gp_test_eval_tokens(sr, n, start, 37, r, V), 0);
        same &= !memcmp(a, b, sizeof(float) * (size_t)(n * V));
        same_ref &= !memcmp(a, r, sizeof(float) * (size_t)(n * V));
        start += n;
    }
    CU_ASSERT(same);
    CU_ASSERT(same_ref);

    /* No allocation during evals: token ids vary (so does the routing), T from 1 to 16. */
    int failures = 0;
    gp_alloc_count_start();
    for (int i = 0; i < 40; i++) {
        int n = 1 + (i * 7) % 16;
        if (i % 8 == 0)
            failures += gp_session_reset(s2) != 0;
        failures += gp_test_eval_tokens(s2, n, (i % 8) * 4 % (64 - 16), 11 + i, b, V) != 0;
    }
    CU_ASSERT_EQUAL(gp_alloc_count_stop(), 0);
    CU_ASSERT_EQUAL(failures, 0);
    free(a);
    free(b);
    free(r);
    gp_session_free(s1);
    gp_session_free(s2);
    gp_session_free(sr);
}

/* examples/gpt_oss.gplan at the same small shape (its sinks, biases, yarn rope, alternating
 * windows and clamped SwiGLU), random weights. */
static const char *const gpt_oss_defs[] = {
    "num_hidden_layers=2", "hidden_size=64", "intermediate_size=32", "num_local_experts=8",
    "num_experts_per_tok=2", "num_attention_heads=4", "num_key_value_heads=2", "head_dim=16",
    "vocab_size=96", "max_position_embeddings=64", "n_batch=16", "sliding_window=5",
    "original_max_position_embeddings=256", "factor=4", "swiglu_limit=1.5"};

static void test_model(void)
{
    gp_model *m = small_model(NULL, 5, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    model_checks(m);
    gp_model_free(m);
    gp_test_model_opts o = {gpt_oss_defs, (int)(sizeof gpt_oss_defs / sizeof *gpt_oss_defs),
                            NULL, 1, 6};
    m = gp_test_model("examples/gpt_oss.gplan", &o, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    model_checks(m);
    gp_model_free(m);
}

/* ---- stacked expert weights from checkpoints ---- */

static const char *const mixtral_defs[] = {
    "num_hidden_layers=2", "hidden_size=64", "intermediate_size=32", "num_local_experts=8",
    "num_experts_per_tok=2", "num_attention_heads=4", "num_key_value_heads=2", "head_dim=16",
    "vocab_size=96", "max_position_embeddings=64", "n_batch=16"};

static gp_model *family_model(const char *family, uint64_t seed)
{
    char path[64];
    snprintf(path, sizeof path, "examples/%s.gplan", family);
    int mix = !strcmp(family, "mixtral");
    gp_test_model_opts o = {mix ? mixtral_defs : small_defs,
                            mix ? (int)(sizeof mixtral_defs / sizeof *mixtral_defs) : N_SMALL,
                            NULL, 1, seed};
    return gp_test_model(path, &o, NULL);
}

/* How a test writes m's weights. */
enum { ST_SPLIT, ST_SPLIT_ADJACENT, GGUF_MERGED, GGUF_SPLIT, GGUF_SPLIT_INTERLEAVED };

typedef struct {
    char name[160];
    gp_dtype t;
    int ndim;
    int64_t shape[GP_MAX_DIMS];
    const char *data;
    size_t nbytes;
    int expert, kind; /* a slice: its index, and which stacked weight (its tensor id); else -1 */
} out_t;

/* m's weights (one per checkpoint name) as out tensors: stacked ones one a slice, or whole,
 * GGUF names under arch when arch; *n of them (the caller frees). `bad` changes one: 1 drops
 * slice 5 of the first down weight, 2 gives slice 3 of the first up weight [F, H - 16]. */
static out_t *weights_of(const gp_model *m, const char *arch, int split, int bad, int *n)
{
    const gp_plan *p = gp_model_plan(m);
    out_t *o = calloc(4096, sizeof *o);
    int k = 0, downs = 0, ups = 0;
    for (int i = 0; i < p->n_tensors; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        if (t->kind != GP_TENSOR_WEIGHT)
            continue;
        const char *wn = t->weight_name ? t->weight_name : t->name;
        int dup = 0;
        for (int j = 0; j < k && !dup; j++)
            dup = o[j].kind == i || (o[j].kind < 0 && !strcmp(o[j].name, wn));
        const char *data = gp_model_weight_data(m, i);
        size_t bytes = (size_t)t->size;
        if (dup || !data)
            continue;
        int stacked = strchr(wn, '*') != NULL;
        int parts = stacked && split ? (int)t->dims[0] : 1;
        int is_down = stacked && (strstr(wn, "down_proj") || strstr(wn, ".w2."));
        int is_up = stacked && (strstr(wn, "up_proj") || strstr(wn, ".w3."));
        downs += is_down;
        ups += is_up;
        for (int e = 0; e < parts; e++) {
            if (bad == 1 && is_down && downs == 1 && e == 5)
                continue;
            out_t *x = &o[k++];
            char hf[160];
            const char *star = strchr(wn, '*');
            if (parts > 1)
                snprintf(hf, sizeof hf, "%.*s%d%s", (int)(star - wn), wn, e, star + 1);
            else
                snprintf(hf, sizeof hf, "%s", wn);
            if (!arch || gp_gguf_name_from_hf(arch, hf, x->name, sizeof x->name))
                snprintf(x->name, sizeof x->name, "%s", hf);
            x->t = t->dtype;
            x->ndim = parts > 1 ? t->ndim - 1 : t->ndim;
            for (int d = 0; d < x->ndim; d++)
                x->shape[d] = t->dims[d + (parts > 1)];
            x->nbytes = bytes / (size_t)parts;
            x->data = data + (size_t)e * x->nbytes;
            x->expert = parts > 1 ? e : -1;
            x->kind = parts > 1 ? i : -1;
            if (bad == 2 && is_up && ups == 1 && e == 3) {
                x->shape[x->ndim - 1] -= 16; /* the same bytes' first rows, narrower */
                x->nbytes = (size_t)(x->shape[0] * x->shape[1]) * 4;
            }
        }
    }
    *n = k;
    return o;
}

/* Writes them: safetensors (slices interleaved, as a Hugging Face checkpoint's name order has
 * them: every weight's slice 0, then every slice 1, ...; or one weight's after another) or GGUF
 * (the same choice). */
static void write_ckpt(const char *path, const char *arch, out_t *o, int n, int interleave)
{
    out_t *ord = calloc((size_t)n, sizeof *ord);
    int k = 0;
    for (int pass = 0; pass < (interleave ? 64 : 1); pass++)
        for (int i = 0; i < n; i++)
            if (!interleave || o[i].expert == pass || (pass == 0 && o[i].expert < 0))
                ord[k++] = o[i];
    CU_ASSERT_EQUAL(k, n);
    if (!arch) {
        gp_st_tensor *ts = calloc((size_t)n, sizeof *ts);
        for (int i = 0; i < n; i++)
            ts[i] = (gp_st_tensor){ord[i].name, NULL, 1, ord[i].t, ord[i].ndim,
                                   {ord[i].shape[0], ord[i].shape[1], ord[i].shape[2],
                                    ord[i].shape[3]},
                                   ord[i].data, ord[i].nbytes};
        char err[512];
        CU_ASSERT_EQUAL(gp_st_write(path, ts, n, NULL, err, sizeof err), 0);
        free(ts);
        free(ord);
        return;
    }
    gp_gw_tensor *gt = calloc((size_t)n, sizeof *gt);
    for (int i = 0; i < n; i++) {
        gt[i].name = ord[i].name;
        gt[i].ggml_type = 0; /* f32 */
        gt[i].ndim = (uint32_t)ord[i].ndim;
        for (int d = 0; d < ord[i].ndim; d++)
            gt[i].ne[d] = ord[i].shape[ord[i].ndim - 1 - d];
        gt[i].data = ord[i].data;
        gt[i].nbytes = ord[i].nbytes;
    }
    gp_gw w;
    gp_gw_init(&w);
    gp_gw_model(&w, arch, 32, gt, n);
    CU_ASSERT_EQUAL(gp_gw_save(&w, path), 0);
    gp_gw_free(&w);
    free(gt);
    free(ord);
}

/* ref's weights written as `how`, bound to a fresh model of the same plan: 0 and the same
 * logits bit for bit, or -1 with the binding's error in err. */
static int bind_same(const char *family, gp_model *ref, const char *arch, int how, int bad,
                     char *err, size_t n, gp_model_info *info)
{
    int count;
    out_t *o = weights_of(ref, arch, how != GGUF_MERGED, bad, &count);
    const char *path = gp_test_tmpfile(arch ? "gguf" : "safetensors");
    write_ckpt(path, arch, o, count, how == GGUF_SPLIT_INTERLEAVED || how == ST_SPLIT);
    gp_model *m = family_model(family, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    int rc = gp_model_bind_weights(m, path, err, n);
    if (rc == 0) {
        gp_model_get_info(m, info);
        int64_t V = gp_test_vocab(m);
        gp_session *a = session(ref, "cpu", 2), *b = session(m, "cpu", 2);
        float *la = malloc(sizeof(float) * 9 * (size_t)V), *lb = malloc(sizeof(float) * 9 * (size_t)V);
        CU_ASSERT_EQUAL(gp_test_eval_tokens(a, 9, 0, 13, la, V), 0);
        CU_ASSERT_EQUAL(gp_test_eval_tokens(b, 9, 0, 13, lb, V), 0);
        CU_ASSERT_EQUAL(memcmp(la, lb, sizeof(float) * 9 * (size_t)V), 0);
        free(la);
        free(lb);
        gp_session_free(a);
        gp_session_free(b);
    }
    gp_model_free(m);
    remove(path);
    free(o);
    return rc;
}

static void test_stacked_weights(void)
{
    char err[2048];
    gp_model_info info;
    gp_model *q = family_model("qwen3moe", 9), *x = family_model("mixtral", 10);
    CU_ASSERT_PTR_NOT_NULL_FATAL(q);
    CU_ASSERT_PTR_NOT_NULL_FATAL(x);
    /* 2 layers of 3 stacked [8, 32, 64] f32 weights */
    const int64_t experts = 2 * 3 * 8 * 32 * 64 * 4;

    /* A Hugging Face checkpoint's experts one by one: stacked once, at load (the bytes
     * counted as loaded); in place where the file has them one after another. */
    CU_ASSERT_EQUAL(bind_same("qwen3moe", q, NULL, ST_SPLIT, 0, err, sizeof err, &info), 0);
    CU_ASSERT_EQUAL(info.weights_loaded, experts);
    CU_ASSERT_EQUAL(bind_same("mixtral", x, NULL, ST_SPLIT, 0, err, sizeof err, &info), 0);
    CU_ASSERT_EQUAL(info.weights_loaded, experts);
    CU_ASSERT_EQUAL(bind_same("qwen3moe", q, NULL, ST_SPLIT_ADJACENT, 0, err, sizeof err, &info),
                    0);
    CU_ASSERT_EQUAL(info.weights_loaded, 0);
    /* llama.cpp's merged ffn_*_exps: in place, nothing copied. */
    CU_ASSERT_EQUAL(bind_same("qwen3moe", q, "qwen3moe", GGUF_MERGED, 0, err, sizeof err, &info),
                    0);
    CU_ASSERT_EQUAL(info.weights_loaded, 0);
    CU_ASSERT(info.weights_mapped >= experts);
    CU_ASSERT_EQUAL(bind_same("mixtral", x, "llama", GGUF_MERGED, 0, err, sizeof err, &info), 0);
    CU_ASSERT_EQUAL(info.weights_loaded, 0);
    /* Old Mixtral files' experts one by one (blk.N.ffn_gate.E): in place when adjacent ... */
    CU_ASSERT_EQUAL(bind_same("mixtral", x, "llama", GGUF_SPLIT, 0, err, sizeof err, &info), 0);
    CU_ASSERT_EQUAL(info.weights_loaded, 0);
    /* ... refused when not. */
    CU_ASSERT_EQUAL(
        bind_same("mixtral", x, "llama", GGUF_SPLIT_INTERLEAVED, 0, err, sizeof err, &info), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "weights: \"model.layers.0.block_sparse_moe.experts.*.w1."
                                       "weight\": the file holds its 8 slices as separate tensors "
                                       "(blk.0.ffn_gate.0.weight, ...) that are not adjacent in "
                                       "the file; gplan maps a GGUF file's experts in place only"));
    /* docs/errors.md E514 (tests/cli/errors.sh greps this line) */
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "that are not adjacent in the file; gplan maps a GGUF file's experts in place only: convert the model again with a current llama.cpp, which merges them (ffn_*_exps)"));
    /* An expert missing, an expert of another shape. */
    CU_ASSERT_EQUAL(bind_same("qwen3moe", q, NULL, ST_SPLIT, 1, err, sizeof err, &info), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "weights: missing tensor \"model.layers.0.mlp.experts.5."
                                       "down_proj.weight\" (the stacked \"model.layers.0.mlp."
                                       "experts.*.down_proj.weight\" is one tensor or 8"));
    /* docs/errors.md E512 */
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "is one tensor or 8, '*' standing for the index)"));
    CU_ASSERT_EQUAL(bind_same("qwen3moe", q, NULL, ST_SPLIT, 2, err, sizeof err, &info), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "weights: \"model.layers.0.mlp.experts.3.up_proj.weight\" "
                                       "(slice 3 of \"model.layers.0.mlp.experts.*.up_proj."
                                       "weight\"): expected shape [32, 64] f32, file has [32, 48] "
                                       "f32"));
    /* docs/errors.md E513 */
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "up_proj.weight\"): expected shape [32, 64] f32, file has [32, 48] f32"));
    CU_ASSERT_EQUAL(bind_same("mixtral", x, "llama", GGUF_SPLIT, 2, err, sizeof err, &info), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "weights: \"blk.0.ffn_up.3.weight\" (slice 3 of "
                                       "\"model.layers.0.block_sparse_moe.experts.*.w3.weight\"): "
                                       "expected shape [32, 64] f32, file has [32, 48] f32"));
    if (!strstr(err, "blk.0.ffn_up.3.weight"))
        fprintf(stderr, "\n  got: %s\n", err);

    /* A float checkpoint quantized at load (-D wtype=q8_0): the experts one by one give the
     * merged tensor's bits. */
    float *l[2];
    int64_t V = 0;
    for (int how = 0; how < 2; how++) {
        int count;
        out_t *o = weights_of(q, how ? NULL : "qwen3moe", how, 0, &count);
        const char *path = gp_test_tmpfile(how ? "safetensors" : "gguf");
        write_ckpt(path, how ? NULL : "qwen3moe", o, count, how);
        gp_model *m = small_model("wtype=q8_0", 0, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        CU_ASSERT_EQUAL(gp_model_bind_weights(m, path, err, sizeof err), 0);
        V = gp_test_vocab(m);
        l[how] = malloc(sizeof(float) * 5 * (size_t)V);
        gp_session *ss = session(m, "cpu", 2);
        CU_ASSERT_EQUAL(gp_test_eval_tokens(ss, 5, 0, 7, l[how], V), 0);
        gp_session_free(ss);
        gp_model_free(m);
        remove(path);
        free(o);
    }
    CU_ASSERT_EQUAL(memcmp(l[0], l[1], sizeof(float) * 5 * (size_t)V), 0);
    free(l[0]);
    free(l[1]);
    gp_model_free(q);
    gp_model_free(x);
}

/* The integers of the JSON array at text's first '[' (nested arrays flattened) into v[cap];
 * how many. */
static int json_ints(const char *text, long *v, int cap)
{
    int depth = 0, n = 0;
    for (const char *q = strchr(text, '['); q && *q; q++) {
        if (*q == '[')
            depth++;
        else if (*q == ']' && --depth == 0)
            break;
        else if (*q >= '0' && *q <= '9') {
            char *end;
            long x = strtol(q, &end, 10);
            if (n < cap)
                v[n] = x;
            n++;
            q = end - 1;
        }
    }
    return n;
}

/* The parity fixtures' routing is not degenerate: fixture.json (written by
 * scripts/parity/make_fixtures.py from transformers' routers over the prompt and the 32 tokens)
 * has each layer choose at least 4 of the 8 experts, no expert take every token, and the k-th
 * probability clear of the next (a tie's order would be torch.topk's own). */
static void test_fixture_routing(void)
{
    static const char *const fixtures[] = {"tests/parity/qwen3moe/fixture.json",
                                           "tests/parity/mixtral/fixture.json"};
    for (int f = 0; f < 2; f++) {
        char *text = gp_test_read_file(gp_test_path(fixtures[f]), NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(text);
        const char *used = strstr(text, "\"moe_experts_used_per_layer\":");
        const char *tok = strstr(text, "\"moe_expert_tokens_per_layer\":");
        const char *mg = strstr(text, "\"moe_min_topk_margin_rel\":");
        CU_ASSERT_FATAL(used && tok && mg);
        long v[64];
        CU_ASSERT_EQUAL(json_ints(used, v, 64), 2);
        CU_ASSERT(v[0] >= 4 && v[0] <= 8 && v[1] >= 4 && v[1] <= 8);
        /* 40 tokens (the prompt of 9 and 31 fed back) a layer, 2 experts each */
        CU_ASSERT_EQUAL_FATAL(json_ints(tok, v, 64), 16);
        for (int l = 0; l < 2; l++) {
            long sum = 0, most = 0;
            for (int e = 0; e < 8; e++) {
                sum += v[8 * l + e];
                most = v[8 * l + e] > most ? v[8 * l + e] : most;
            }
            CU_ASSERT_EQUAL(sum, 80);
            CU_ASSERT(most < 40);
        }
        CU_ASSERT(strtod(mg + strlen("\"moe_min_topk_margin_rel\":"), NULL) > 1e-4);
        free(text);
    }
}

void gp_suite_moe(void)
{
    static const gp_test_case tests[] = {
        {"routing: each norm, top-k, ties to the lower index", test_routing},
        {"grouping: idle experts, every token to one", test_grouping},
        {"experts f16, bf16 and every block format", test_dtypes},
        {"the same bits: 1 to 3 threads, a token alone or in a batch", test_bits},
        {"experts of many rows on the integer products", test_integer_path},
        {"gp_cpu_check refusals", test_check},
        {"gpt-oss's experts: biases, clamped SwiGLU, strided views", test_gpt_oss},
        {"the workspace's layout", test_workspace},
        {"Qwen3-MoE and gpt-oss graphs: threads, reference, no allocation per eval", test_model},
        {"stacked experts: safetensors, GGUF merged and one by one, refusals",
         test_stacked_weights},
        {"the parity fixtures' routing: many experts, no ties", test_fixture_routing},
    };
    gp_test_add_suite("moe", NULL, NULL, tests, GP_TEST_COUNT(tests));
}
