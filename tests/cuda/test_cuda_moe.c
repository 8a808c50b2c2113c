/* CUDA tests of the moe op (cuda/cuda_moe.cu): its routing and grouping arithmetic on the host
 * against cpu/cpu_moe.c's (suite "cuda_host", no GPU needed), and the op on the GPU against the
 * CPU's for every weight dtype, with whole Qwen3-MoE and Mixtral models (suite "cuda"). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>
#include <cuda_runtime_api.h>

#include "cpu/cpu_kernels.h"
#include "cpu/moe.h"
#include "cpu/quant.h"
#include "cuda/cuda_kernels.h"
#include "cuda/cuda_moe.h"
#include "gplan/gplan.h"
#include "ir/f16.h"
#include "tests/cuda/cuda_tests.h"
#include "tests/cuda/cuda_testutil.h"
#include "tests/testmodel.h"
#include "tests/testutil.h"

static gp_attrs moe_attrs(int k, int norm)
{
    gp_attrs a;
    memset(&a, 0, sizeof a);
    a.i[GP_MOE_TOP_K] = k;
    a.i[GP_MOE_NORM] = norm;
    a.i[GP_MOE_ACT] = GP_MOE_SILU;
    return a;
}

static int64_t draw(int64_t n)
{
    return (int64_t)(gp_test_rand(&rng) % (uint64_t)n);
}

/* ---- host: routing and grouping against the CPU's ---- */

/* One case on the host: x [T, H] of small integers and a router of quarters (every logit exact
 * in any summation order, and many equal: ties), or with router row `nan_row` NaN; the CPU's
 * moe runs and its workspace's routing and grouping (cpu/moe.h) are compared with the twins'. */
static int host_case(int T, int E, int k, int norm, int kind, int nan_row)
{
    const int H = 32, F = 16;
    float *x = malloc(sizeof(float) * (size_t)(T * H)), *r = malloc(sizeof(float) * (size_t)(E * H));
    float *gw = calloc((size_t)(E * F * H), sizeof(float)), *dw = calloc((size_t)(E * H * F), sizeof(float));
    float *out = malloc(sizeof(float) * (size_t)(T * H)), *lg = malloc(sizeof(float) * (size_t)(T * E));
    for (int i = 0; i < T * H; i++)
        x[i] = (float)(draw(5) - 2);
    for (int i = 0; i < E * H; i++)
        r[i] = kind == 1 ? 0.0f : (float)(draw(9) - 4) * 0.25f; /* kind 1: every logit 0 */
    if (kind == 2) /* every token on expert E - 1: x[:, 0] = 1, its router weight 256 (> 64) */
        for (int t = 0; t < T; t++) {
            x[t * H] = 1.0f;
            r[(E - 1) * H] = 256.0f;
        }
    if (nan_row >= 0)
        for (int h = 0; h < H; h++)
            r[nan_row * H + h] = NAN;
    for (int t = 0; t < T; t++)
        for (int e = 0; e < E; e++) {
            double s = 0;
            for (int h = 0; h < H; h++)
                s += (double)x[t * H + h] * r[e * H + h];
            lg[t * E + e] = (float)s;
        }
    gp_attrs a = moe_attrs(k, norm);
    gp_ktensor o = {out, GP_F32, 2, {T, H}, {4 * H, 4}};
    gp_ktensor in[5] = {
        {x, GP_F32, 2, {T, H}, {4 * H, 4}},
        {r, GP_F32, 2, {E, H}, {4 * H, 4}},
        {gw, GP_F32, 3, {E, F, H}, {4 * F * H, 4 * H, 4}},
        {gw, GP_F32, 3, {E, F, H}, {4 * F * H, 4 * H, 4}},
        {dw, GP_F32, 3, {E, H, F}, {4 * H * F, 4 * F, 4}},
    };
    size_t wsz = gp_cpu_workspace_bytes(GP_OP_MOE, &a, &o, in, 5, 1);
    gp_moe_ws_layout l = gp_moe_ws(T, H, E, k, F, 0);
    CU_ASSERT_FATAL(wsz >= (size_t)l.total);
    char *ws = malloc(wsz);
    gp_cpu_compute(GP_OP_MOE, &a, &o, in, 5, ws, wsz, 0, 1);
    const int32_t *csel = (const int32_t *)(ws + l.sel), *coff = (const int32_t *)(ws + l.off);
    const int32_t *cslot = (const int32_t *)(ws + l.slot);
    const float *cwt = (const float *)(ws + l.wt);
    int n = T * k, bad = 0;
    int32_t *sel = malloc(sizeof(int32_t) * (size_t)n), *slot = malloc(sizeof(int32_t) * (size_t)n);
    int32_t *off = malloc(sizeof(int32_t) * (size_t)(E + 1)), *toff = malloc(sizeof(int32_t) * (size_t)(E + 1));
    float *wt = malloc(sizeof(float) * (size_t)n);
    CU_ASSERT_EQUAL_FATAL(gp_cuda_moe_route_host(lg, T, E, k, norm, sel, wt), 0);
    for (int i = 0; i < n; i++) {
        bad += sel[i] != csel[i];
        int both_nan = isnan(wt[i]) && isnan(cwt[i]);
        bad += !both_nan && !(fabsf(wt[i] - cwt[i]) <= 1e-6f);
    }
    CU_ASSERT_EQUAL_FATAL(gp_cuda_moe_group_host(sel, n, E, off, toff, slot), 0);
    for (int e = 0; e <= E; e++)
        bad += off[e] != coff[e];
    for (int i = 0; i < n; i++)
        bad += slot[i] != cslot[i];
    for (int e = 0; e < E; e++) /* tiles of GP_CUDA_MOE_TM rows */
        bad += toff[e + 1] - toff[e] != (off[e + 1] - off[e] + GP_CUDA_MOE_TM - 1) / GP_CUDA_MOE_TM;
    for (int q = 0; q < n; q++) { /* each row's expert, and each tile's */
        int e = gp_cuda_moe_row_expert_host(off, E, q);
        bad += !(off[e] <= q && q < off[e + 1]);
    }
    for (int y = 0; y < toff[E]; y++) {
        int e = gp_cuda_moe_row_expert_host(toff, E, y);
        bad += !(toff[e] <= y && y < toff[e + 1]);
    }
    if (kind == 2)
        for (int t = 0; t < T; t++)
            bad += sel[t * k + k - 1] != E - 1; /* ascending: the forced expert last */
    if (bad)
        fprintf(stderr, "\n  moe host T %d E %d k %d norm %d kind %d nan %d: %d differences\n", T, E,
                k, norm, kind, nan_row, bad);
    free(x), free(r), free(gw), free(dw), free(out), free(lg), free(ws);
    free(sel), free(slot), free(off), free(toff), free(wt);
    return bad;
}

/* The route and group kernels' arithmetic (gp_cuda_moe_route_host, gp_cuda_moe_group_host) against
 * cpu_moe.c's on the same logits: the same experts, weights within 1e-6 (the same operations:
 * the same bits in practice), the same offsets and slots; each row's and tile's expert found; T 1,
 * 3, 17 and 100 (several ballots), E 8 and 64, top k 1, 2 and 8, each norm; all logits equal (ties:
 * the lower experts), every token on one expert, a NaN router row. */
void test_moe_host(void)
{
    static const int Ts[4] = {1, 3, 17, 100}, Es[2] = {8, 64}, ks[3] = {1, 2, 8};
    int bad = 0;
    for (int ti = 0; ti < 4; ti++)
        for (int ei = 0; ei < 2; ei++)
            for (int ki = 0; ki < 3; ki++)
                for (int norm = 0; norm < GP_MOE_NORM_COUNT; norm++)
                    for (int kind = 0; kind < 3; kind++)
                        bad += host_case(Ts[ti], Es[ei], ks[ki], norm, kind, -1);
    for (int norm = 0; norm < GP_MOE_NORM_COUNT; norm++) {
        bad += host_case(3, 8, 2, norm, 0, 0);
        bad += host_case(3, 8, 2, norm, 0, 5);
        bad += host_case(17, 64, 8, norm, 0, 7);
    }
    CU_ASSERT_EQUAL(bad, 0);
    int32_t sel[4] = {0, 9, 1, 2}, off[9], toff[9], slot[4];
    CU_ASSERT_EQUAL(gp_cuda_moe_group_host(sel, 4, 8, off, toff, slot), -1);
    float lg[8] = {0};
    CU_ASSERT_EQUAL(gp_cuda_moe_route_host(lg, 1, 8, 9, 0, sel, lg), -1);
    CU_ASSERT_EQUAL(gp_cuda_moe_route_host(lg, 1, 8, 2, 3, sel, lg), -1);
}

/* The CUDA workspace is what its layout says, within the CPU's (so a plan for both backends is the
 * CPU's size), and every token on one expert needs no more than any routing: the layout depends
 * on T, H, E, k and F only. */
void test_moe_ws_host(void)
{
    static const int64_t shapes[][5] = {{1, 64, 8, 2, 32}, {512, 2048, 128, 8, 768},
                                        {17, 4096, 8, 2, 14336}, {3, 32, 64, 64, 16}};
    for (int i = 0; i < 4; i++) {
        const int64_t *s = shapes[i];
        gp_cuda_moe_ws_layout l = gp_cuda_moe_ws(s[0], s[1], s[2], s[3], s[4]);
        int64_t rows = s[0] * s[3];
        CU_ASSERT(l.total <= gp_moe_ws(s[0], s[1], s[2], s[3], s[4], 0).total);
        CU_ASSERT(l.act + 4 * rows * s[4] <= l.total);
        CU_ASSERT(l.xg + 4 * rows * s[1] <= l.act);
        CU_ASSERT(l.off % 64 == 0 && l.toff % 64 == 0 && l.xg % 64 == 0);
        CU_ASSERT(l.toff >= l.off + 4 * (s[2] + 1));
    }
}

/* ---- the GPU ---- */

/* Element i of t's host copy (f32, f16 or bf16) set to v. */
static void set_float(tt *t, int64_t i, float v)
{
    if (t->h.dtype == GP_F32) {
        ((float *)t->h.data)[i] = v;
    } else {
        uint16_t h = t->h.dtype == GP_F16 ? gp_f32_to_f16(v) : gp_f32_to_bf16(v);
        ((uint16_t *)t->h.data)[i] = h;
    }
}

/* A [d0, d1, d2] weight of dtype t on both copies: random values of scale s (quantized to t for a
 * block format: the CPU and the GPU read the same blocks). */
static void weight_new(tt *w, gp_dtype t, int64_t d0, int64_t d1, int64_t d2, float s)
{
    if (!gp_dtype_is_quant(t)) {
        int64_t ne[3] = {d0, d1, d2};
        tt_new(w, t, 3, ne, s);
        return;
    }
    memset(w, 0, sizeof *w);
    size_t rb = gp_dtype_row_bytes(t, d2);
    w->bytes = (size_t)(d0 * d1) * rb;
    w->h.data = malloc(w->bytes + 1);
    float *f = malloc(sizeof(float) * (size_t)d2);
    for (int64_t row = 0; row < d0 * d1; row++) {
        for (int64_t i = 0; i < d2; i++)
            f[i] = frand() * s * (float)(1 + row % 4);
        gp_quant_quantize_row(t, f, (char *)w->h.data + (size_t)row * rb, d2);
    }
    free(f);
    int64_t ne[3] = {d0, d1, d2}, nb[3] = {d1 * (int64_t)rb, (int64_t)rb, 1};
    w->h.dtype = w->d.dtype = t;
    w->h.ndim = w->d.ndim = 3;
    for (int d = 0; d < GP_MAX_DIMS; d++) {
        w->h.ne[d] = w->d.ne[d] = d < 3 ? ne[d] : 1;
        w->h.nb[d] = w->d.nb[d] = d < 3 ? nb[d] : 0;
        w->d.sym[d] = -1;
    }
    void *p = NULL;
    CU_ASSERT_EQUAL_FATAL(cudaMalloc(&p, w->bytes + 16), cudaSuccess);
    w->d.data = p;
    cudaMemcpy(p, w->h.data, w->bytes, cudaMemcpyHostToDevice);
}

static const gp_dtype moe_dtypes[11] = {GP_F32, GP_F16, GP_BF16, GP_Q4_0, GP_Q4_1, GP_Q5_0,
                                        GP_Q5_1, GP_Q8_0, GP_Q4_K, GP_Q5_K, GP_Q6_K};

/* One op on the GPU against the CPU: x [T, H], E experts of F in dtype wt, router of rt; force:
 * every token's first pick expert E - 1 (x[:, 0] = 4, its router weight 8); t_exact < T: the
 * eval's T read from the param block (launched at T). The normalized error of the output. */
static double gpu_case(gp_dtype wt, gp_dtype rt, int64_t T, int64_t E, int k, int norm, int force,
                       int64_t t_exact)
{
    int64_t H = 256, F = 256; /* whole super-blocks for every format */
    int64_t nx[2] = {T, H}, nr[2] = {E, H};
    tt x, r, g, u, d, out;
    tt_new(&x, GP_F32, 2, nx, 1.0f);
    tt_new(&r, rt, 2, nr, 0.5f);
    tt_new(&out, GP_F32, 2, nx, 1.0f);
    if (force) {
        for (int64_t t = 0; t < T; t++)
            ((float *)x.h.data)[t * H] = 4.0f;
        cudaMemcpy(x.d.data, x.h.data, x.bytes, cudaMemcpyHostToDevice);
        set_float(&r, (E - 1) * H, 8.0f);
        cudaMemcpy(r.d.data, r.h.data, r.bytes, cudaMemcpyHostToDevice);
    }
    weight_new(&g, wt, E, F, H, 0.1f);
    weight_new(&u, wt, E, F, H, 0.1f);
    weight_new(&d, wt, E, H, F, 0.1f);
    gp_attrs a = moe_attrs(k, norm);
    kctx kc;
    int64_t exact[1] = {t_exact}, launch[1] = {T};
    kctx_new(&kc, exact, launch, 1);
    if (t_exact < T) { /* the CPU's tensors at the eval's size, the GPU's symbolic */
        x.h.ne[0] = out.h.ne[0] = t_exact;
        x.d.sym[0] = out.d.sym[0] = 0;
    }
    tt *ins[5] = {&x, &r, &g, &u, &d};
    size_t ws = (size_t)gp_cuda_moe_ws(T, H, E, k, F).total;
    double e = run_op(GP_OP_MOE, &a, &out, ins, 5, ws, &kc);
    kctx_free(&kc);
    tt_free(&x), tt_free(&r), tt_free(&g), tt_free(&u), tt_free(&d), tt_free(&out);
    return e;
}

/* moe on the GPU against the CPU for every weight dtype: T 1 and 3 (one output a warp), 17 (in
 * tiles), E 8 and 64, top k 1, 2 and 8, each norm, every token on one expert, T from the param
 * block; f32, f16 and bf16 routers. Both read the same weights (the same dequantized values), so
 * the outputs differ by their sums' order: within 2e-5 (f32 and 16-bit weights) and 1e-4 (block
 * formats, as test_moe.c's check of the CPU's quantized experts against its dequantized
 * reference). Both paths are asserted to have run. */
void test_moe_ops(void)
{
    int64_t vec0 = gp_cuda_moe_count(0), tiles0 = gp_cuda_moe_count(1);
    static const int64_t Ts[3] = {1, 3, 17}, Es[2] = {8, 64};
    static const int ks[3] = {1, 2, 8};
    for (int di = 0; di < 11; di++) {
        gp_dtype t = moe_dtypes[di];
        double tol = gp_dtype_is_quant(t) ? 1e-4 : 2e-5, worst = 0;
        for (int ti = 0; ti < 3; ti++)
            for (int ei = 0; ei < 2; ei++)
                for (int ki = 0; ki < 3; ki++) {
                    int norm = (ti + ei + ki) % GP_MOE_NORM_COUNT;
                    gp_dtype rt = ki == 1 ? GP_F16 : ki == 2 && ei ? GP_BF16 : GP_F32;
                    double e = gpu_case(t, rt, Ts[ti], Es[ei], ks[ki], norm, 0, Ts[ti]);
                    char name[96];
                    snprintf(name, sizeof name, "moe %s T %lld E %lld k %d norm %d",
                             gp_dtype_name(t), (long long)Ts[ti], (long long)Es[ei], ks[ki], norm);
                    CHECK_ERR(name, e, tol);
                    worst = e > worst || e != e ? e : worst;
                }
        /* every token on one expert, prompts and decode; T from the param block */
        for (int ki = 0; ki < 2; ki++) {
            double e1 = gpu_case(t, GP_F32, 17, 8, ks[ki], GP_MOE_SOFTMAX_NORM, 1, 17);
            double e2 = gpu_case(t, GP_F32, 3, 64, ks[ki], GP_MOE_SOFTMAX, 1, 3);
            double e3 = gpu_case(t, GP_F32, 17, 64, 8, ki ? GP_MOE_TOPK_SOFTMAX : 0, 0, 5);
            CHECK_ERR("moe: every token on one expert, T 17", e1, tol);
            CHECK_ERR("moe: every token on one expert, T 3", e2, tol);
            CHECK_ERR("moe: T 5 from the param block, launched at 17", e3, tol);
        }
        printf(" %s %.2g", gp_dtype_name(t), worst);
    }
    CU_ASSERT(gp_cuda_moe_count(0) > vec0);
    CU_ASSERT(gp_cuda_moe_count(1) > tiles0);
}

/* A whole model of a family (examples/<graph>.gplan, 2 layers, 8 experts of 32, top 2, random
 * weights in wtype) on CUDA against the CPU: a 5-token prompt, decode steps, a 3-token eval;
 * logits within tol; no allocation during evals. */
static void moe_model(const char *graph, const char *wtype, double tol)
{
    char wdef[32];
    snprintf(wdef, sizeof wdef, "wtype=%s", wtype);
    const char *qwen[] = {"num_hidden_layers=2", "hidden_size=64", "moe_intermediate_size=32",
                          "num_experts=8", "num_experts_per_tok=2", "num_attention_heads=4",
                          "num_key_value_heads=2", "head_dim=16", "vocab_size=64",
                          "max_position_embeddings=32", "n_batch=8", wdef};
    const char *mix[] = {"num_hidden_layers=2", "hidden_size=64", "intermediate_size=32",
                         "num_local_experts=8", "num_experts_per_tok=2", "num_attention_heads=4",
                         "num_key_value_heads=2", "vocab_size=64", "max_position_embeddings=32",
                         "n_batch=8", wdef};
    int is_qwen = strstr(graph, "qwen3moe") != NULL;
    gp_test_model_opts o = {is_qwen ? qwen : mix, is_qwen ? 12 : 11, NULL, 1, 7};
    gp_model *m = gp_test_model(graph, &o, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char err[1024] = "";
    gp_session_opts oc = {"cpu", 1, 0}, og = {"cuda", 1, 0};
    gp_session *sc = gp_session_new(m, &oc, err, sizeof err);
    gp_session *sg = gp_session_new(m, &og, err, sizeof err);
    if (!sg)
        fprintf(stderr, "\n  cuda session (%s %s): %s\n", graph, wtype, err);
    CU_ASSERT_PTR_NOT_NULL(sc);
    CU_ASSERT_PTR_NOT_NULL(sg);
    if (sc && sg) {
        int64_t V = gp_test_vocab(m);
        float *lc = malloc(sizeof(float) * 8 * (size_t)V), *lg = malloc(sizeof(float) * 8 * (size_t)V);
        const int plan[][2] = {{5, 0}, {1, 5}, {1, 6}, {3, 7}, {8, 10}};
        for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
            int n = plan[i][0];
            CU_ASSERT_EQUAL_FATAL(step(sc, n, plan[i][1], lc, V), 0);
            CU_ASSERT_EQUAL_FATAL(step(sg, n, plan[i][1], lg, V), 0);
            double e = gp_test_rel_err(lg, lc, (size_t)n * (size_t)V, GP_TEST_L2);
            if (!(e <= tol))
                fprintf(stderr, "\n  %s %s step %zu: logits error %.3g > %.3g\n", graph, wtype, i,
                        e, tol);
            CU_ASSERT(e <= tol);
        }
        CU_ASSERT_EQUAL(gp_session_backend_allocs(sg), 0);
        free(lc);
        free(lg);
    }
    gp_session_free(sc);
    gp_session_free(sg);
    gp_model_free(m);
}

/* Qwen3-MoE and Mixtral on CUDA against the CPU: f32 within 1e-4, f16, q8_0 and q4_0 weights
 * within 5e-3 (the other products' tolerance in test_model_f16 and test_quant_model: cuBLAS in
 * f16, k_qdot's quantized x; a router input that moves can flip a near-tied expert). */
void test_moe_models(void)
{
    moe_model("examples/qwen3moe.gplan", "f32", 1e-4);
    moe_model("examples/mixtral.gplan", "f32", 1e-4);
    moe_model("examples/qwen3moe.gplan", "f16", 5e-3);
    moe_model("examples/qwen3moe.gplan", "q8_0", 5e-3);
    moe_model("examples/mixtral.gplan", "q4_0", 5e-3);
}
