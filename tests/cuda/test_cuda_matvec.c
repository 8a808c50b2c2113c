/* CUDA tests of the matrix-vector kernels (one-token products: norms computed inside, clusters,
 * residual adds, accumulation, pairs, groups) against the CPU (suite "cuda"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>
#include <cuda_runtime_api.h>

#include "cuda/cuda_kernels.h"
#include "cpu/cpu_kernels.h"
#include "gplan/gplan.h"
#include "plan/plan.h"
#include "tests/cuda/cuda_tests.h"
#include "tests/cuda/cuda_testutil.h"
#include "tests/testutil.h"

/* The epilogue v + bias, then gelu (GPT-2's c_fc), into out. */
static gp_cu_epilogue epi_bias_gelu(gp_cu_tensor bias, gp_cu_tensor out)
{
    gp_cu_epilogue e;
    memset(&e, 0, sizeof e);
    e.n = 2;
    e.op[0] = GP_OP_ADD;
    e.other[0] = bias;
    e.op[1] = GP_OP_GELU;
    e.out = out;
    return e;
}

/* A norm's operands for the tests of matvecs that compute it: x [M, K] (f32), its weight g and
 * bias b [K] (f16), h = norm(x) [M, K] on the host unless norm is NORM_NONE (its device copy
 * poisoned: a kernel computing the norm never reads it), and pre as gp_cuda_matmul_fused takes
 * it. Made first, in this order, so the random values stay those the tests were written with. */
enum { NORM_NONE, NORM_LN, NORM_RMS };

typedef struct {
    tt x, g, b, h;
    gp_cu_prenorm pre;
} tnorm;

static void tnorm_new(tnorm *n, int norm, int64_t M, int64_t K)
{
    int64_t sx[2] = {M, K}, sk[1] = {K};
    tt_new(&n->x, GP_F32, 2, sx, 3.0f);
    tt_new(&n->g, GP_F16, 1, sk, 1.0f);
    tt_new(&n->b, GP_F16, 1, sk, 1.0f);
    tt_new(&n->h, GP_F32, 2, sx, 1.0f);
    if (norm != NORM_NONE) {
        gp_attrs an = {{0}, {1e-5, 0}};
        gp_ktensor nin[3] = {n->x.h, n->g.h, n->b.h};
        gp_cpu_compute(norm == NORM_LN ? GP_OP_LAYER_NORM : GP_OP_RMS_NORM, &an, &n->h.h, nin,
                       norm == NORM_LN ? 3 : 2, NULL, 0, 0, 1);
    }
    gp_cu_prenorm pre = {norm == NORM_LN, 1e-5f, n->x.d, n->g.d, n->b.d, NULL, 0.0f};
    if (norm != NORM_LN)
        pre.b.data = NULL;
    n->pre = pre;
    cudaMemset(n->h.d.data, 0xff, n->h.bytes);
}

static void tnorm_free(tnorm *n)
{
    tt_free(&n->x);
    tt_free(&n->g);
    tt_free(&n->b);
    tt_free(&n->h);
    cudaFree((void *)n->pre.fold);
}

/* n's layer norm folded into the product with w (gp_cuda_fold): the constants in a buffer of their
 * own in n->pre.fold (tnorm_free frees it). Returns gp_cuda_fold's count (0: not taken). */
static int64_t tnorm_fold(kctx *k, tnorm *n, const gp_attrs *am, const tt *w)
{
    int64_t cnt = gp_cuda_fold(&k->c, &n->pre, am, &w->d, NULL);
    CU_ASSERT(cnt >= 0);
    if (cnt <= 0)
        return cnt;
    float *d = NULL;
    CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&d, (size_t)cnt * sizeof(float)), cudaSuccess);
    CU_ASSERT_EQUAL(gp_cuda_fold(&k->c, &n->pre, am, &w->d, d), cnt);
    CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
    n->pre.fold = d;
    return cnt;
}

/* A norm computed inside the matrix-vector kernel (gp_cu_prenorm) against the CPU's norm then
 * matmul: layer norm with bias and rms norm, weights [K, N] and [N, K], f16, bf16 and f32, a
 * layer norm of x far from 0 and of x whose first element carries nearly all its variance; with
 * two rows the matmul refuses the norm and launches nothing. Each layer norm before [K, N]
 * weights of K <= 2048 again folded (gp_cuda_fold), which the others refuse. */
void test_matvec_prenorm(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    enum { PLAIN, OFFSET, OUTLIER };
    const struct {
        int is_ln, tb;
        gp_dtype wt;
        int64_t K, N, M;
        int x;
    } cs[] = {{1, 0, GP_F16, 1600, 4800, 1, PLAIN}, {0, 1, GP_F32, 256, 72, 1, PLAIN},
              {1, 1, GP_F16, 768, 200, 1, PLAIN},   {0, 0, GP_BF16, 64, 256, 1, PLAIN},
              {1, 0, GP_F16, 128, 256, 2, PLAIN},   {1, 0, GP_F16, 1600, 4800, 1, OFFSET},
              {1, 1, GP_F16, 1600, 200, 1, OUTLIER}, {1, 0, GP_F16, 1600, 4800, 1, OUTLIER},
              {1, 0, GP_BF16, 1000, 320, 1, PLAIN}, {1, 0, GP_F32, 2048, 96, 1, PLAIN},
              {1, 0, GP_F16, 2560, 512, 1, PLAIN}};
    /* Each case draws from a seed of its own, so its data depend on no test run before it. The
     * shared generator is then moved on as far as this test always moved it, so that the tests
     * after it keep the data they were written with. */
    uint64_t entry = rng, draws = 0;
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        int64_t K = cs[i].K, N = cs[i].N, M = cs[i].M;
        int64_t sw[2] = {cs[i].tb ? N : K, cs[i].tb ? K : N}, so[2] = {M, N};
        tnorm nm;
        tt w, out;
        rng = 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull * (i + 1);
        draws += (uint64_t)(2 * M * K + 2 * K + K * N + M * N); /* x, g, b, h, w, out */
        tnorm_new(&nm, cs[i].is_ln ? NORM_LN : NORM_RMS, M, K);
        if (cs[i].x != PLAIN) {
            /* x far from 0 (1000 + [-3, 3)), or x[0] an outlier carrying nearly all the variance
             * (3000 among [-3, 3)): the worst case for the layer norm's shifted sums */
            float *xv = nm.x.h.data;
            for (int64_t j = 0; j < M * K; j++)
                xv[j] += cs[i].x == OFFSET ? 1000.0f : 0.0f;
            if (cs[i].x == OUTLIER)
                xv[0] = 3000.0f;
            cudaMemcpy(nm.x.d.data, xv, nm.x.bytes, cudaMemcpyHostToDevice);
            gp_attrs an = {{0}, {1e-5, 0}};
            gp_ktensor nin[3] = {nm.x.h, nm.g.h, nm.b.h};
            gp_cpu_compute(GP_OP_LAYER_NORM, &an, &nm.h.h, nin, 3, NULL, 0, 0, 1);
        }
        /* The tolerance (relative L2 error of the output), from the case's own x. Both sides
         * read the same x, g, b and weights and compute in f32; the product's sums in another
         * order differ by about sqrt(K) eps_f32 of the output (< 1e-5 here), within the flat
         * 1e-5 (f32 weights) or 1e-4. A layer norm adds its variance: the kernel takes it from
         * sums shifted by x[0] (norm_stats, cuda/cuda_internal.cuh), E[(x-x0)^2] - E[x-x0]^2,
         * two terms of about var + (x0 - mean)^2 that cancel down to var. Each carries a few
         * eps_f32 of itself (the squares' and the tree reduction's roundings, about 11 levels
         * for K = 1600): the variance's relative error is up to ~20 eps_f32 (x0 - mean)^2 / var,
         * and 1 / sqrt(var), which scales every h and so the output, half of it. With x[0] the
         * outlier, (x0 - mean)^2 / var = K - 1: ~1e-4 typical (past a flat 1e-4 at times),
         * ~1e-3 at worst; for x of no outlier the term stays below 2e-6. */
        double tol = cs[i].wt == GP_F32 ? 1e-5 : 1e-4;
        if (cs[i].is_ln) {
            const float *xv = nm.x.h.data;
            double mean = 0, var = 0;
            for (int64_t j = 0; j < K; j++)
                mean += xv[j];
            mean /= (double)K;
            for (int64_t j = 0; j < K; j++)
                var += (xv[j] - mean) * (xv[j] - mean);
            var /= (double)K;
            tol += 10 * 0x1p-24 * (xv[0] - mean) * (xv[0] - mean) / var;
        }
        tt_new(&w, cs[i].wt, 2, sw, 1.0f);
        tt_new(&out, GP_F32, 2, so, 1.0f);
        gp_attrs am = {{0, cs[i].tb, 0, 0}, {0}};
        gp_ktensor min[2] = {nm.h.h, w.h};
        gp_cpu_compute(GP_OP_MATMUL, &am, &out.h, min, 2, NULL, 0, 0, 1);
        gp_cu_tensor din[2] = {nm.h.d, w.d};
        void *ws = NULL;
        cudaMalloc(&ws, (size_t)GP_WS_CUBLAS_BYTES);
        int folds = cs[i].is_ln && !cs[i].tb && K <= 2048;
        for (int f = 0; f <= folds; f++) {
            int64_t want = folds ? 2 * N : 0;
            CU_ASSERT_EQUAL(f ? tnorm_fold(&k, &nm, &am, &w)
                              : gp_cuda_fold(&k.c, &nm.pre, &am, &w.d, NULL),
                            want);
            cudaMemset(out.d.data, 0xff, out.bytes);
            int fused = -1, used = -1;
            gp_cu_epilogue epi;
            memset(&epi, 0, sizeof epi);
            k.c.pdl = (int)(i % 2);
            /* even cases: weights and the norm's weights loaded before the wait (nothing
             * written during the launch is read before it) */
            k.c.const_lo = i % 2 ? NULL : (const void *)1;
            k.c.const_hi = i % 2 ? NULL : (const void *)UINTPTR_MAX;
            int64_t f0 = gp_cuda_matvec_fold_count();
            CU_ASSERT_EQUAL(gp_cuda_matmul_fused(&k.c, &am, &out.d, din, ws,
                                                 (size_t)GP_WS_CUBLAS_BYTES, &epi, &nm.pre, &fused,
                                                 &used),
                            0);
            CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
            CU_ASSERT_EQUAL(used, M == 1);
            CU_ASSERT_EQUAL(gp_cuda_matvec_fold_count() - f0, f && M == 1);
            if (M == 1) {
                char name[64];
                snprintf(name, sizeof name, "matvec with norm, case %zu%s", i,
                         f ? ", folded" : "");
                CHECK_ERR(name, device_err(&out), tol);
            } else {
                CU_ASSERT(device_untouched(&out)); /* nothing launched */
            }
        }
        cudaFree(ws);
        tnorm_free(&nm);
        tt_free(&w);
        tt_free(&out);
    }
    rng = entry;
    for (uint64_t j = 0; j < draws; j++)
        gp_test_rand(&rng);
    kctx_free(&k);
}

/* [K, N] products whose splits combine inside a cluster (k_matvec_kc) against the CPU's matmul,
 * norm and epilogue: GPT-2 1558M's and 117M's four products (staged layer norm, bias, gelu,
 * residual), a staged rms norm, f32 and bf16 weights, a K split over 15 blocks of 7 rows, a
 * product wide enough for one block per column tile (no cluster); with clusters of up to 16 and
 * of up to 8, the same bits on a second launch, and the split-K kernel through global memory
 * (clusters off) right too; the layer norms again folded (gp_cuda_fold). The counters stay at
 * zero. */
void test_matvec_cluster(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    int major = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    int ok16 = gp_cuda_matvec_cluster_ok(16, k.c.mv_cluster_fit);
    CU_ASSERT_EQUAL(ok16, major >= 9); /* clusters: sm_90 on */
    CU_ASSERT_EQUAL(gp_cuda_matvec_cluster_ok(8, NULL), major >= 9);
    CU_ASSERT_EQUAL(gp_cuda_matvec_cluster_ok(17, NULL), 0);
    CU_ASSERT_EQUAL(gp_cuda_matvec_cluster_ok(1, NULL), 0);
    CU_ASSERT(!ok16 || k.c.mv_cluster_fit[2] >= 1);
    for (int c = 3; ok16 && c <= 16; c++) /* at least one fits, fewer as they grow */
        CU_ASSERT(k.c.mv_cluster_fit[c] >= 1 && k.c.mv_cluster_fit[c] <= k.c.mv_cluster_fit[c - 1]);
    enum { NONE = NORM_NONE, LN = NORM_LN, RMS = NORM_RMS };
    enum { E_NONE, E_BIAS, E_GELU, E_RES };
    const struct {
        int norm, epi;
        gp_dtype wt;
        int64_t K, N;
    } cs[] = {{LN, E_BIAS, GP_F16, 1600, 4800}, {NONE, E_RES, GP_F16, 1600, 1600},
              {LN, E_GELU, GP_F16, 1600, 6400}, {NONE, E_RES, GP_F16, 6400, 1600},
              {LN, E_BIAS, GP_F16, 768, 2304},  {NONE, E_RES, GP_F16, 3072, 768},
              {RMS, E_NONE, GP_BF16, 768, 2304}, {NONE, E_NONE, GP_F32, 1000, 332},
              {LN, E_GELU, GP_F16, 100, 40},    {RMS, E_BIAS, GP_F16, 64, 50000}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        int64_t K = cs[i].K, N = cs[i].N;
        int64_t sw[2] = {K, N}, so[2] = {1, N}, sn[1] = {N};
        tnorm nm;
        tt w, prod, bias, res, out;
        tnorm_new(&nm, cs[i].norm, 1, K);
        tt_new(&w, cs[i].wt, 2, sw, 1.0f);
        tt_new(&prod, GP_F32, 2, so, 1.0f);
        tt_new(&bias, GP_F16, 1, sn, 1.0f);
        tt_new(&res, GP_F32, 2, so, 2.0f);
        tt_new(&out, GP_F32, 2, so, 1.0f);
        gp_attrs am = {{0, 0, 0, 0}, {0}}, none = {{0}, {0}};
        gp_ktensor min[2] = {cs[i].norm ? nm.h.h : nm.x.h, w.h};
        gp_cpu_compute(GP_OP_MATMUL, &am, cs[i].epi ? &prod.h : &out.h, min, 2, NULL, 0, 0, 1);
        gp_ktensor bin[2] = {prod.h, bias.h}, rin[2] = {prod.h, res.h};
        if (cs[i].epi == E_BIAS)
            gp_cpu_compute(GP_OP_ADD, &none, &out.h, bin, 2, NULL, 0, 0, 1);
        if (cs[i].epi == E_GELU) {
            gp_cpu_compute(GP_OP_ADD, &none, &prod.h, bin, 2, NULL, 0, 0, 1);
            gp_cpu_compute(GP_OP_GELU, &none, &out.h, &prod.h, 1, NULL, 0, 0, 1);
        }
        if (cs[i].epi == E_RES) {
            gp_cpu_compute(GP_OP_ADD, &none, &prod.h, bin, 2, NULL, 0, 0, 1);
            gp_cpu_compute(GP_OP_ADD, &none, &out.h, rin, 2, NULL, 0, 0, 1);
        }
        gp_cu_epilogue epi;
        memset(&epi, 0, sizeof epi);
        epi.n = cs[i].epi == E_NONE ? 0 : cs[i].epi == E_BIAS ? 1 : 2;
        epi.op[0] = GP_OP_ADD;
        epi.other[0] = bias.d;
        epi.op[1] = cs[i].epi == E_GELU ? GP_OP_GELU : GP_OP_ADD;
        epi.other[1] = res.d;
        epi.out = out.d;
        gp_cu_tensor din[2] = {cs[i].norm ? nm.h.d : nm.x.d, w.d};
        void *ws = NULL;
        cudaMalloc(&ws, (size_t)GP_WS_CUBLAS_BYTES);
        /* odd cases: weights, the norm's weights and the epilogue's operands loaded early */
        k.c.pdl = (int)(i % 2);
        k.c.const_lo = i % 2 ? (const void *)1 : NULL;
        k.c.const_hi = i % 2 ? (const void *)UINTPTR_MAX : NULL;
        k.c.epi_early = (int)(i % 2);
        const int cl[3] = {ok16 ? 16 : 0, ok16 ? 8 : 0, 0};
        k.c.mv_cluster_pre = 3;
        /* layer norms: then folded (gp_cuda_fold), in clusters and in kn2 */
        int folds = cs[i].norm == LN;
        for (int v = 0; v < 3 * (1 + folds); v++) {
            if (v == 3)
                CU_ASSERT_EQUAL(tnorm_fold(&k, &nm, &am, &w), 2 * N);
            k.c.mv_cluster = cl[v % 3];
            float *bits[2];
            int64_t f0 = gp_cuda_matvec_fold_count();
            for (int rep = 0; rep < 2; rep++) {
                cudaMemset(out.d.data, 0xff, out.bytes);
                int fused = -1, used = -1;
                CU_ASSERT_EQUAL(gp_cuda_matmul_fused(&k.c, &am, epi.n ? &prod.d : &out.d, din, ws,
                                                     (size_t)GP_WS_CUBLAS_BYTES,
                                                     epi.n ? &epi : NULL,
                                                     cs[i].norm ? &nm.pre : NULL, &fused, &used),
                                0);
                CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
                CU_ASSERT_EQUAL(fused, epi.n > 0);
                CU_ASSERT_EQUAL(used, cs[i].norm != NONE);
                bits[rep] = malloc(out.bytes);
                cudaMemcpy(bits[rep], out.d.data, out.bytes, cudaMemcpyDeviceToHost);
            }
            CU_ASSERT_EQUAL(gp_cuda_matvec_fold_count() - f0, v >= 3 ? 2 : 0);
            CU_ASSERT(memcmp(bits[0], bits[1], out.bytes) == 0);
            free(bits[0]);
            free(bits[1]);
            char name[80];
            snprintf(name, sizeof name, "matvec, cluster of up to %d, case %zu%s", cl[v % 3], i,
                     v >= 3 ? ", folded" : "");
            CHECK_ERR(name, device_err(&out), cs[i].wt == GP_F32 ? 1e-5 : 1e-4);
        }
        unsigned cnt[GP_CU_COUNTERS], left = 0;
        cudaMemcpy(cnt, k.counters, sizeof cnt, cudaMemcpyDeviceToHost);
        for (int c = 0; c < GP_CU_COUNTERS; c++)
            left += cnt[c];
        CU_ASSERT_EQUAL(left, 0);
        cudaFree(ws);
        tnorm_free(&nm);
        tt *all[5] = {&w, &prod, &bias, &res, &out};
        for (int t = 0; t < 5; t++)
            tt_free(all[t]);
    }
    k.c.mv_cluster = 0;
    kctx_free(&k);
}

/*
 * [K, N] products added into a residual in place (out = x W + bias + out, k_matvec_kc's add: every
 * split adds its sums with atomics) against the CPU: GPT-2 1558M's and 117M's c_proj and proj, f32
 * weights with the residual alone, bf16 with the residual added first, the product of a layer norm
 * folded into it (gp_cuda_fold: split 0 adds the fold's constants); with clusters or without,
 * weights and operands early or not, at most 16 or 8 splits (right each time; the bits may
 * differ between runs). Refused, and still right by the cluster kernel: a residual in another
 * buffer, a MUL in the epilogue.
 */
void test_matvec_add(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    int ok16 = gp_cuda_matvec_cluster_ok(16, k.c.mv_cluster_fit);
    enum { BIAS_RES, RES, RES_BIAS, APART, MUL, LN_BIAS_RES };
    const struct {
        int kind;
        gp_dtype wt;
        int64_t K, N;
    } cs[] = {{BIAS_RES, GP_F16, 1600, 1600}, {BIAS_RES, GP_F16, 6400, 1600},
              {BIAS_RES, GP_F16, 768, 768},   {BIAS_RES, GP_F16, 3072, 768},
              {RES, GP_F32, 1000, 332},       {RES_BIAS, GP_BF16, 2048, 512},
              {APART, GP_F16, 1600, 1600},    {MUL, GP_F16, 1600, 1600},
              {LN_BIAS_RES, GP_F16, 1600, 1600}};
    void *ws = NULL;
    cudaMalloc(&ws, (size_t)GP_WS_CUBLAS_BYTES);
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        int kind = cs[i].kind, takes = kind <= RES_BIAS || kind == LN_BIAS_RES;
        int64_t K = cs[i].K, N = cs[i].N;
        int64_t sw[2] = {K, N}, sx[2] = {1, K}, so[2] = {1, N}, sn[1] = {N};
        tt w, x, prod, bias, res, out, scale;
        tt_new(&w, cs[i].wt, 2, sw, 1.0f);
        tt_new(&x, GP_F32, 2, sx, 1.0f);
        tt_new(&prod, GP_F32, 2, so, 1.0f);
        tt_new(&bias, GP_F16, 1, sn, 1.0f);
        tt_new(&res, GP_F32, 2, so, 2.0f);
        tt_new(&out, GP_F32, 2, so, 1.0f);
        tt_new(&scale, GP_F32, 1, sn, 1.0f);
        gp_attrs am = {{0, 0, 0, 0}, {0}}, none = {{0}, {0}};
        /* LN_BIAS_RES: the product of x's layer norm, folded (gp_cuda_fold) */
        tnorm nm;
        tnorm_new(&nm, kind == LN_BIAS_RES ? NORM_LN : NORM_NONE, 1, K);
        if (kind == LN_BIAS_RES)
            CU_ASSERT_EQUAL(tnorm_fold(&k, &nm, &am, &w), 2 * N);
        gp_ktensor min[2] = {kind == LN_BIAS_RES ? nm.h.h : x.h, w.h};
        gp_cpu_compute(GP_OP_MATMUL, &am, &prod.h, min, 2, NULL, 0, 0, 1);
        gp_ktensor bin[2] = {prod.h, bias.h}, rin[2] = {prod.h, res.h};
        if (kind != RES)
            gp_cpu_compute(GP_OP_ADD, &none, &prod.h, kind == RES_BIAS ? rin : bin, 2, NULL, 0, 0,
                           1);
        gp_cpu_compute(GP_OP_ADD, &none, &out.h, kind == RES_BIAS ? bin : rin, 2, NULL, 0, 0, 1);
        if (kind == MUL) {
            memcpy(prod.h.data, out.h.data, out.bytes);
            gp_ktensor m2[2] = {prod.h, scale.h};
            gp_cpu_compute(GP_OP_MUL, &none, &out.h, m2, 2, NULL, 0, 0, 1);
        }
        /* The device's output: res's bytes (in place) except for APART. */
        gp_cu_tensor dout = kind == APART ? out.d : res.d, dres = res.d;
        gp_cu_epilogue epi;
        memset(&epi, 0, sizeof epi);
        epi.n = kind == RES ? 1 : kind == MUL ? 3 : 2;
        epi.op[0] = epi.op[1] = epi.op[2] = GP_OP_ADD;
        epi.other[0] = kind == RES || kind == RES_BIAS ? dres : bias.d;
        epi.other[1] = kind == RES_BIAS ? bias.d : dres;
        if (kind == MUL) {
            epi.op[2] = GP_OP_MUL;
            epi.other[2] = scale.d;
        }
        epi.out = dout;
        gp_cu_tensor din[2] = {kind == LN_BIAS_RES ? nm.h.d : x.d, w.d};
        for (int v = 0; v < 4; v++) {
            k.c.pdl = v % 2;
            k.c.const_lo = v % 2 ? (const void *)1 : NULL;
            k.c.const_hi = v % 2 ? (const void *)UINTPTR_MAX : NULL;
            k.c.epi_early = v % 2;
            k.c.mv_cluster = v / 2 && ok16 ? 16 : 0;
            k.c.mv_add = 16;
            k.c.mv_add_narrow = v == 3 ? 8 : 0; /* at most 8 splits for N <= 1024 */
            k.c.mv_cluster_pre = 3;              /* LN_BIAS_RES: the norm's product in kc too */
            cudaMemcpy(res.d.data, res.h.data, res.bytes, cudaMemcpyHostToDevice);
            cudaMemset(out.d.data, 0xff, out.bytes);
            int64_t n0 = gp_cuda_matvec_add_count(), f0 = gp_cuda_matvec_fold_count();
            int fused = -1, used = -1;
            CU_ASSERT_EQUAL(gp_cuda_matmul_fused(&k.c, &am, &prod.d, din, ws,
                                                 (size_t)GP_WS_CUBLAS_BYTES, &epi,
                                                 kind == LN_BIAS_RES ? &nm.pre : NULL, &fused,
                                                 &used),
                            0);
            CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
            CU_ASSERT_EQUAL(fused, 1);
            CU_ASSERT_EQUAL(used, kind == LN_BIAS_RES);
            CU_ASSERT_EQUAL(gp_cuda_matvec_add_count() - n0, takes);
            CU_ASSERT_EQUAL(gp_cuda_matvec_fold_count() - f0, kind == LN_BIAS_RES);
            tt got = out;
            got.d = dout;
            char name[80];
            snprintf(name, sizeof name, "matvec add, case %zu, variant %d", i, v);
            CHECK_ERR(name, device_err(&got), cs[i].wt == GP_F32 ? 1e-5 : 1e-4);
        }
        tt *all[7] = {&w, &x, &prod, &bias, &res, &out, &scale};
        for (int t = 0; t < 7; t++)
            tt_free(all[t]);
        tnorm_free(&nm);
    }
    cudaFree(ws);
    kctx_free(&k);
}

/*
 * Accumulated outputs, as plan_accumulate asks for them around gp_cuda_matmul_fused (gp_cu_ctx's
 * zero_p, acc, x_gelu), against the CPU: a [K, N] product zeroes the bytes a later one adds into
 * (an [N, K] one does not); that product, of a folded layer norm, adds its splits into them with
 * its bias and leaves its gelu to the next (GPT-2 1558M's and 117M's c_fc); the next (mlp.c_proj,
 * into the residual in place) stages gelu(x) (never made gelu(x) in place first: its kernel serves).
 * Asked without the gelu left, the product writes gelu itself.
 */
void test_matvec_acc(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    k.c.mv_add = 16;
    const struct {
        int64_t K, N;
        int gelu_left;
    } cs[] = {{1600, 6400, 1}, {768, 3072, 1}, {768, 3072, 0}};
    void *ws = NULL;
    cudaMalloc(&ws, (size_t)GP_WS_CUBLAS_BYTES);
    gp_attrs am = {{0, 0, 0, 0}, {0}}, at = {{0, 1, 0, 0}, {0}}, none = {{0}, {0}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        int64_t K = cs[i].K, N = cs[i].N;
        int64_t s1[2] = {K, N}, s2[2] = {N, K}, sh[2] = {1, N}, sk[2] = {1, K}, sn[1] = {N},
                sb[1] = {K}, sz[2] = {K, K};
        tnorm nm;
        tnorm_new(&nm, NORM_LN, 1, K);
        tt w1, b1, h, hg, w2, b2, res, x0, w0, o0;
        tt_new(&w1, GP_F16, 2, s1, 1.0f);
        tt_new(&b1, GP_F16, 1, sn, 1.0f);
        tt_new(&h, GP_F32, 2, sh, 1.0f);
        tt_new(&hg, GP_F32, 2, sh, 1.0f);
        tt_new(&w2, GP_F16, 2, s2, 0.1f);
        tt_new(&b2, GP_F16, 1, sb, 1.0f);
        tt_new(&res, GP_F32, 2, sk, 2.0f);
        tt_new(&x0, GP_F32, 2, sk, 1.0f);
        tt_new(&w0, GP_F16, 2, sz, 1.0f);
        tt_new(&o0, GP_F32, 2, sk, 1.0f);
        /* the CPU: h = norm(x) w1 + b1, hg = gelu(h), res = hg w2 + b2 + res */
        gp_ktensor m1[2] = {nm.h.h, w1.h}, a1[2] = {h.h, b1.h};
        gp_cpu_compute(GP_OP_MATMUL, &am, &h.h, m1, 2, NULL, 0, 0, 1);
        gp_cpu_compute(GP_OP_ADD, &none, &h.h, a1, 2, NULL, 0, 0, 1);
        gp_cpu_compute(GP_OP_GELU, &none, &hg.h, &h.h, 1, NULL, 0, 0, 1);
        tt y;
        tt_new(&y, GP_F32, 2, sk, 1.0f);
        gp_ktensor m2[2] = {hg.h, w2.h}, a2[2] = {y.h, b2.h}, a3[2] = {y.h, res.h};
        gp_cpu_compute(GP_OP_MATMUL, &am, &y.h, m2, 2, NULL, 0, 0, 1);
        gp_cpu_compute(GP_OP_ADD, &none, &y.h, a2, 2, NULL, 0, 0, 1);
        gp_cpu_compute(GP_OP_ADD, &none, &y.h, a3, 2, NULL, 0, 0, 1);
        int fused = -1, used = -1;
        char name[80];
        /* 1. A [N, K] product leaves h alone; a [K, N] one zeroes it. */
        cudaMemset(h.d.data, 0xff, h.bytes);
        gp_cu_epilogue e0;
        memset(&e0, 0, sizeof e0);
        gp_cu_tensor d0[2] = {x0.d, w0.d};
        for (int tr = 1; tr >= 0; tr--) {
            k.c.zero_p = (float *)h.d.data;
            k.c.zero_n = N;
            CU_ASSERT_EQUAL(gp_cuda_matmul_fused(&k.c, tr ? &at : &am, &o0.d, d0, ws,
                                                 (size_t)GP_WS_CUBLAS_BYTES, &e0, NULL, &fused,
                                                 NULL),
                            0);
            CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
            CU_ASSERT_EQUAL(k.c.zero_done, !tr);
            if (tr)
                CU_ASSERT(device_untouched(&h));
            k.c.zero_p = NULL;
            k.c.zero_n = k.c.zero_done = 0;
        }
        int zeros = 1;
        {
            float *z = malloc(h.bytes);
            cudaMemcpy(z, h.d.data, h.bytes, cudaMemcpyDeviceToHost);
            for (int64_t j = 0; j < N; j++)
                zeros &= z[j] == 0.0f;
            free(z);
        }
        CU_ASSERT(zeros);
        /* 2. The folded product adds into the zeros: h = norm(x) w1 + b1, its gelu left. */
        CU_ASSERT_EQUAL(tnorm_fold(&k, &nm, &am, &w1), 2 * N);
        gp_cu_epilogue e1 = epi_bias_gelu(b1.d, h.d);
        gp_cu_tensor d1[2] = {nm.h.d, w1.d};
        k.c.acc = 1;
        k.c.acc_gelu = cs[i].gelu_left;
        int64_t n_acc = gp_cuda_matvec_acc_count(0);
        CU_ASSERT_EQUAL(gp_cuda_matmul_fused(&k.c, &am, &h.d, d1, ws, (size_t)GP_WS_CUBLAS_BYTES,
                                             &e1, &nm.pre, &fused, &used),
                        0);
        CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
        CU_ASSERT_EQUAL(used, 1);
        CU_ASSERT_EQUAL(k.c.acc_done, cs[i].gelu_left); /* a GELU not left: no adds only */
        CU_ASSERT_EQUAL(k.c.acc_gelu_done, cs[i].gelu_left);
        CU_ASSERT_EQUAL(gp_cuda_matvec_acc_count(0) - n_acc, cs[i].gelu_left);
        snprintf(name, sizeof name, "accumulated c_fc, case %zu", i);
        if (cs[i].gelu_left) {
            CHECK_ERR(name, device_err(&h), 1e-4);
        } else {
            tt hgd = hg;
            hgd.d = h.d; /* written whole, gelu included */
            CHECK_ERR(name, device_err(&hgd), 1e-4);
        }
        k.c.acc = k.c.acc_gelu = k.c.acc_done = k.c.acc_gelu_done = 0;
        /* 3. The next product reads gelu(h): staged by its kernel, or h made gelu(h) first. */
        gp_cu_epilogue e2;
        memset(&e2, 0, sizeof e2);
        e2.n = 2;
        e2.op[0] = e2.op[1] = GP_OP_ADD;
        e2.other[0] = b2.d;
        e2.other[1] = res.d;
        e2.out = res.d;
        gp_cu_tensor d2[2] = {h.d, w2.d};
        k.c.x_gelu = cs[i].gelu_left;
        int64_t n_st = gp_cuda_matvec_acc_count(1), n_in = gp_cuda_matvec_acc_count(2);
        CU_ASSERT_EQUAL(gp_cuda_matmul_fused(&k.c, &am, &res.d, d2, ws,
                                             (size_t)GP_WS_CUBLAS_BYTES, &e2, NULL, &fused, NULL),
                        0);
        CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
        CU_ASSERT_EQUAL(k.c.x_gelu, 0);
        CU_ASSERT_EQUAL(gp_cuda_matvec_acc_count(1) - n_st, cs[i].gelu_left);
        CU_ASSERT_EQUAL(gp_cuda_matvec_acc_count(2) - n_in, 0);
        tt yd = y;
        yd.d = res.d;
        snprintf(name, sizeof name, "mlp.c_proj of gelu(x), case %zu", i);
        CHECK_ERR(name, device_err(&yd), 1e-4);
        tt *all[11] = {&w1, &b1, &h, &hg, &w2, &b2, &res, &x0, &w0, &o0, &y};
        for (int t = 0; t < 11; t++)
            tt_free(all[t]);
        tnorm_free(&nm);
    }
    cudaFree(ws);
    kctx_free(&k);
}

/* [N, K] products of short rows, two rows per warp (k_matvec_nk2_pairs): the same bits as one row
 * per warp, and right against the CPU; GPT-2 117M's LM head, an odd N, a full 128 chunks, f32
 * rows of 50 chunks, an epilogue, weights loaded before the wait or after. */
void test_matvec_pairs(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    const struct {
        gp_dtype wt;
        int64_t K, N;
        int epi;
    } cs[] = {{GP_F16, 768, 50257, 0}, {GP_F16, 1024, 77, 1}, {GP_BF16, 256, 384, 0},
              {GP_F32, 200, 9, 1}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        int64_t K = cs[i].K, N = cs[i].N;
        int64_t sx[2] = {1, K}, sw[2] = {N, K}, so[2] = {1, N}, sn[1] = {N};
        tt x, w, prod, bias, out;
        tt_new(&x, GP_F32, 2, sx, 1.0f);
        tt_new(&w, cs[i].wt, 2, sw, 1.0f);
        tt_new(&prod, GP_F32, 2, so, 1.0f);
        tt_new(&bias, GP_F16, 1, sn, 1.0f);
        tt_new(&out, GP_F32, 2, so, 1.0f);
        gp_attrs am = {{0, 1, 0, 0}, {0}}, none = {{0}, {0}};
        gp_ktensor min[2] = {x.h, w.h}, ain[2] = {prod.h, bias.h};
        gp_cpu_compute(GP_OP_MATMUL, &am, cs[i].epi ? &prod.h : &out.h, min, 2, NULL, 0, 0, 1);
        if (cs[i].epi) {
            gp_cpu_compute(GP_OP_ADD, &none, &prod.h, ain, 2, NULL, 0, 0, 1);
            gp_cpu_compute(GP_OP_GELU, &none, &out.h, &prod.h, 1, NULL, 0, 0, 1);
        }
        gp_cu_epilogue epi = epi_bias_gelu(bias.d, out.d);
        gp_cu_tensor din[2] = {x.d, w.d};
        k.c.pdl = (int)(i % 2);
        k.c.const_lo = i % 2 ? (const void *)1 : NULL;
        k.c.const_hi = i % 2 ? (const void *)UINTPTR_MAX : NULL;
        float *bits[2];
        for (int pairs = 0; pairs < 2; pairs++) {
            k.c.mv_pairs = pairs;
            cudaMemset(out.d.data, 0xff, out.bytes);
            int fused = -1;
            CU_ASSERT_EQUAL(gp_cuda_matmul_fused(&k.c, &am, cs[i].epi ? &prod.d : &out.d, din,
                                                 NULL, 0, cs[i].epi ? &epi : NULL, NULL, &fused,
                                                 NULL), 0);
            CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
            CU_ASSERT_EQUAL(fused, cs[i].epi);
            bits[pairs] = malloc(out.bytes);
            cudaMemcpy(bits[pairs], out.d.data, out.bytes, cudaMemcpyDeviceToHost);
        }
        CU_ASSERT(memcmp(bits[0], bits[1], out.bytes) == 0);
        char name[64];
        snprintf(name, sizeof name, "matvec pairs, case %zu", i);
        CHECK_ERR(name, device_err(&out), cs[i].wt == GP_F32 ? 1e-5 : 1e-4);
        free(bits[0]);
        free(bits[1]);
        tt_free(&x);
        tt_free(&w);
        tt_free(&prod);
        tt_free(&bias);
        tt_free(&out);
    }
    kctx_free(&k);
}

/* A group test's products of x: for each of the n weights w[s] [N[s], K] of dtype wt (made here),
 * the single-launch product each[s] (checked against the CPU's, kept in each[s].h; `what` names
 * it) and the group's output fused[s] [M, N[s]] (0xff-filled), with g's w, tb and out set; sw_out
 * [M, N[0]], with glu the swiglu of each[0] and each[1] (checked too). group_products_free frees
 * them. */
static void group_products(kctx *k, gp_cu_group *g, tt *x, gp_dtype wt, int n, int glu, int64_t K,
                           int64_t M, const int64_t *N, const char *what, tt *w, tt *each,
                           tt *fused, tt *sw_out)
{
    gp_attrs am = {{0, 1, 0, 0}, {0}};
    for (int s = 0; s < n; s++) {
        int64_t sw[2] = {N[s], K}, so[2] = {M, N[s]};
        tt_new(&w[s], wt, 2, sw, 1.0f);
        tt_new(&each[s], GP_F32, 2, so, 1.0f);
        tt_new(&fused[s], GP_F32, 2, so, 1.0f);
        cudaMemset(fused[s].d.data, 0xff, fused[s].bytes);
        g->w[s] = w[s].d;
        g->tb[s] = 1;
        g->out[s] = fused[s].d;
        tt *ins[2] = {x, &w[s]};
        CHECK_ERR(what, run_op(GP_OP_MATMUL, &am, &each[s], ins, 2, 0, k),
                  wt == GP_F32 ? 1e-5 : 1e-4);
    }
    int64_t so0[2] = {M, N[0]};
    tt_new(sw_out, GP_F32, 2, so0, 1.0f);
    if (glu) {
        /* the swiglu's own launch on the single-launch products; CPU: on the CPU's */
        tt *ins[2] = {&each[0], &each[1]};
        gp_attrs none = {{0}, {0}};
        CHECK_ERR("swiglu", run_op(GP_OP_SWIGLU, &none, sw_out, ins, 2, 0, k), 1e-5);
    }
}

static void group_products_free(int n, tt *w, tt *each, tt *fused, tt *sw_out)
{
    for (int s = 0; s < n; s++) {
        tt_free(&w[s]);
        tt_free(&each[s]);
        tt_free(&fused[s]);
    }
    tt_free(sw_out);
}

/* The same group computing the rms_norm before it (Llama's attention and FFN norms, whose output
 * only q, k and v, or gate and up, read): against the CPU's norm then products (then swiglu). A
 * prompt (two rows), a layer norm and norm weights of another dtype than the products' are
 * refused: nothing launched, nothing written. */
void test_matvec_group_norm(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    const struct {
        gp_dtype wt, gt;
        int glu, n, is_ln;
        int64_t K, M, N[3];
    } cs[] = {{GP_F16, GP_F16, 0, 3, 0, 4096, 1, {512, 128, 128}},
              {GP_BF16, GP_BF16, 1, 2, 0, 2048, 1, {300, 300}},
              {GP_F32, GP_F32, 0, 2, 0, 96, 1, {8, 5}},
              {GP_F16, GP_F16, 1, 2, 0, 11008, 1, {64, 64}},
              {GP_F16, GP_F16, 0, 2, 0, 128, 2, {16, 16}},
              {GP_F16, GP_F16, 0, 2, 1, 256, 1, {16, 16}},
              {GP_BF16, GP_F32, 0, 2, 0, 512, 1, {32, 32}}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        int64_t K = cs[i].K, M = cs[i].M, sx[2] = {M, K}, sg[1] = {K};
        tt x, gw, h, w[3], each[3], fused[3], sw_out;
        tt_new(&x, GP_F32, 2, sx, 3.0f);
        tt_new(&gw, cs[i].gt, 1, sg, 1.0f);
        tt_new(&h, GP_F32, 2, sx, 1.0f);
        gp_attrs an = {{0}, {1e-5, 0}};
        tt *nin[2] = {&x, &gw};
        CHECK_ERR("rms_norm", run_op(GP_OP_RMS_NORM, &an, &h, nin, 2, 0, &k), 1e-5);
        gp_cu_group g;
        memset(&g, 0, sizeof g);
        g.n = cs[i].n;
        g.glu = cs[i].glu;
        g.x = h.d;
        g.has_norm = 1;
        g.norm.is_ln = cs[i].is_ln;
        g.norm.eps = 1e-5f;
        g.norm.x = x.d;
        g.norm.w = gw.d;
        /* each[s].h: the CPU's product of the CPU's norm */
        group_products(&k, &g, &h, cs[i].wt, cs[i].n, cs[i].glu, K, M, cs[i].N,
                       "matvec after the norm", w, each, fused, &sw_out);
        k.c.pdl = (int)(i % 2);
        k.c.const_lo = i % 2 ? NULL : (const void *)16;
        k.c.const_hi = i % 2 ? NULL : (const void *)(UINTPTR_MAX - 16);
        int launched = -1, want = M == 1 && !cs[i].is_ln && cs[i].gt == cs[i].wt;
        CU_ASSERT_EQUAL(gp_cuda_matvec_group(&k.c, &g, &launched), 0);
        CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
        CU_ASSERT_EQUAL(launched, want);
        for (int s = 0; s < (cs[i].glu ? 1 : cs[i].n); s++) {
            if (!want) {
                CU_ASSERT(device_untouched(&fused[s]));
                continue;
            }
            memcpy(fused[s].h.data, cs[i].glu ? sw_out.h.data : each[s].h.data, fused[s].bytes);
            char name[64];
            snprintf(name, sizeof name, "group with its norm, case %zu product %d", i, s);
            CHECK_ERR(name, device_err(&fused[s]), cs[i].wt == GP_F32 ? 1e-5 : 1e-4);
        }
        group_products_free(cs[i].n, w, each, fused, &sw_out);
        tt_free(&x);
        tt_free(&gw);
        tt_free(&h);
    }
    kctx_free(&k);
}

/* The products of one x in one launch (q, k, v; gate and up with swiglu): the same bits as one
 * launch per product (and the swiglu's own kernel), and close to the CPU; with two rows nothing is
 * launched. */
void test_matvec_group(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    const struct {
        gp_dtype wt;
        int glu, n;
        int64_t K, M, N[3];
    } cs[] = {{GP_F16, 0, 3, 2560, 1, {1000, 200, 200}}, {GP_BF16, 0, 2, 512, 1, {64, 17}},
              {GP_F32, 0, 3, 96, 1, {8, 5, 33}},       {GP_F16, 1, 2, 4096, 1, {300, 300}},
              {GP_BF16, 1, 2, 768, 1, {64, 64}},        {GP_F16, 0, 2, 128, 2, {16, 16}}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        int64_t K = cs[i].K, M = cs[i].M, sx[2] = {M, K};
        tt x, w[3], each[3], fused[3], sw_out;
        tt_new(&x, GP_F32, 2, sx, 1.0f);
        gp_cu_group g;
        memset(&g, 0, sizeof g);
        g.n = cs[i].n;
        g.glu = cs[i].glu;
        g.x = x.d;
        /* one launch per product, and the CPU's result in each[s].h */
        group_products(&k, &g, &x, cs[i].wt, cs[i].n, cs[i].glu, K, M, cs[i].N,
                       "matvec, one product", w, each, fused, &sw_out);
        k.c.pdl = (int)(i % 2);
        /* Even cases: weights loaded before the PDL wait (every byte counts as constant: nothing
         * else runs on the stream before this launch). */
        k.c.const_lo = i % 2 ? NULL : (const void *)16;
        k.c.const_hi = i % 2 ? NULL : (const void *)(UINTPTR_MAX - 16);
        int launched = -1;
        CU_ASSERT_EQUAL(gp_cuda_matvec_group(&k.c, &g, &launched), 0);
        CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
        CU_ASSERT_EQUAL(launched, M == 1);
        int outs = cs[i].glu ? 1 : cs[i].n;
        for (int s = 0; s < outs; s++) {
            /* The single launches' bytes (each[s].d, or the swiglu's) against the group's. */
            size_t bytes = fused[s].bytes;
            unsigned char *a = malloc(bytes), *b = malloc(bytes);
            cudaMemcpy(a, cs[i].glu ? sw_out.d.data : each[s].d.data, bytes, cudaMemcpyDeviceToHost);
            cudaMemcpy(b, fused[s].d.data, bytes, cudaMemcpyDeviceToHost);
            if (M == 1) {
                if (memcmp(a, b, bytes))
                    fprintf(stderr, "\n  group case %zu product %d: bits differ\n", i, s);
                CU_ASSERT_EQUAL(memcmp(a, b, bytes), 0);
            } else {
                CU_ASSERT(device_untouched(&fused[s]));
            }
            free(a);
            free(b);
        }
        if (cs[i].glu && M == 1) {
            gp_ktensor gk = sw_out.h;
            gk.data = malloc(sw_out.bytes);
            cudaMemcpy(gk.data, fused[0].d.data, sw_out.bytes, cudaMemcpyDeviceToHost);
            CHECK_ERR("grouped gate/up/swiglu vs CPU", rel_err(&gk, &sw_out.h), 1e-4);
            free(gk.data);
        }
        group_products_free(cs[i].n, w, each, fused, &sw_out);
        tt_free(&x);
    }
    kctx_free(&k);
}
