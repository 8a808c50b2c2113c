/* CUDA tests of the products on more than one row (cuBLAS with its epilogue, batched, fallback)
 * and of sizes read from the param block (suite "cuda"). */
#include <math.h>
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

/* One row width of test_blas_epilogue's cases. */
static void blas_epilogue_rows(kctx *kc, void *ws, int64_t N)
{
    gp_attrs am = {{0, 0, 0, 0}, {0}}, none = {{0}, {0}};
    enum { M = 37, K = 96 };
    int64_t sa[2] = {M, K}, sw[2] = {K, N}, so[2] = {M, N}, sn[1] = {N};
    tt a, w, prod, bias, res, out;
    tt_new(&a, GP_F32, 2, sa, 1.0f);
    tt_new(&w, GP_F16, 2, sw, 1.0f);
    tt_new(&bias, GP_F16, 1, sn, 1.0f);
    gp_cu_tensor din[2] = {a.d, w.d};
    /* 0 bias, gelu; 1 bias, + residual over it; 2 bias over the product; 3 switched off; 4 out at
     * an offset into the product */
    for (int cs = 0; cs < 5; cs++) {
        tt_new(&prod, GP_F32, 2, so, 1.0f);
        tt_new(&res, GP_F32, 2, so, 2.0f);
        tt_new(&out, GP_F32, 2, so, 1.0f);
        /* The product alone first: the reference is the CPU's epilogue of the device's product
         * (cuBLAS multiplies a in f16), so that the epilogue's own error shows. */
        int fused = -1;
        kc->c.blas_epi = 1;
        CU_ASSERT_EQUAL(gp_cuda_matmul_fused(&kc->c, &am, &prod.d, din, ws,
                                             (size_t)GP_WS_CUBLAS_BYTES, NULL, NULL, &fused, NULL),
                        0);
        CU_ASSERT_EQUAL(fused, 0);
        tt_download(&prod);
        gp_ktensor bin[2] = {prod.h, bias.h};
        gp_cpu_compute(GP_OP_ADD, &none, &out.h, bin, 2, NULL, 0, 0, 1); /* out = prod + bias */
        gp_cu_epilogue epi;
        memset(&epi, 0, sizeof epi);
        epi.n = cs == 0 || cs == 1 ? 2 : 1;
        epi.op[0] = GP_OP_ADD;
        epi.other[0] = bias.d;
        epi.out = out.d;
        tt *want = &out;
        if (cs == 0) {
            epi.op[1] = GP_OP_GELU;
            gp_cpu_compute(GP_OP_GELU, &none, &out.h, &out.h, 1, NULL, 0, 0, 1);
        } else if (cs == 1) {
            epi.op[1] = GP_OP_ADD;
            epi.other[1] = res.d;
            epi.out = res.d;
            gp_ktensor rin[2] = {out.h, res.h};
            gp_cpu_compute(GP_OP_ADD, &none, &res.h, rin, 2, NULL, 0, 0, 1);
            want = &res;
        } else if (cs == 2) {
            epi.out = prod.d;
            memcpy(prod.h.data, out.h.data, prod.bytes);
            want = &prod;
        } else if (cs == 4) {
            /* the product's shape from row 1, column 1 (only looked at: nothing is written) */
            epi.out.data = (char *)prod.d.data + 4 * (N + 1);
        }
        if (cs >= 3) /* the product alone, again */
            want = &prod;
        kc->c.blas_epi = cs != 3;
        int64_t n0 = gp_cuda_blas_epilogue_count(0), v0 = gp_cuda_blas_epilogue_count(1);
        CU_ASSERT_EQUAL(gp_cuda_matmul_fused(&kc->c, &am, &prod.d, din, ws,
                                             (size_t)GP_WS_CUBLAS_BYTES, &epi, NULL, &fused, NULL),
                        0);
        CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
        CU_ASSERT_EQUAL(fused, cs < 3);
        CU_ASSERT_EQUAL(gp_cuda_blas_epilogue_count(0) - n0, cs < 3);
        CU_ASSERT_EQUAL(gp_cuda_blas_epilogue_count(1) - v0, cs < 3 && N % 4 == 0);
        char name[64];
        snprintf(name, sizeof name, "cuBLAS product with its epilogue, N %lld, case %d",
                 (long long)N, cs);
        CHECK_ERR(name, device_err(want), 1e-6);
        tt_free(&prod);
        tt_free(&res);
        tt_free(&out);
    }
    tt_free(&a);
    tt_free(&w);
    tt_free(&bias);
}

/*
 * A prompt's product (cuBLAS, 37 rows) with its epilogue in one launch after it (k_epilogue)
 * against the CPU's matmul and elementwise nodes: bias and gelu into another tensor; bias and a
 * residual written over the residual; bias written over the product itself; rows of 1500 (two
 * spans of a block, in vectors of 4) and 1501 (one by one). Not fused: when switched off, and
 * when out overlaps the product at an offset (a thread would read what another wrote), where the
 * product alone is written.
 */
void test_blas_epilogue(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    void *ws = NULL;
    cudaMalloc(&ws, (size_t)GP_WS_CUBLAS_BYTES);
    blas_epilogue_rows(&k, ws, 1500); /* in vectors of 4 */
    blas_epilogue_rows(&k, ws, 1501); /* one by one */
    cudaFree(ws);
    kctx_free(&k);
}

void test_matmul(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    /* M, K, N, ta, tb, a dtype, b dtype, batch (a b0, a b1, b b0, b b1), tolerance */
    struct {
        int64_t M, K, N;
        int ta, tb;
        gp_dtype at, bt;
        int64_t ab0, ab1, bb0, bb1;
        double tol;
    } cs[] = {
        {1, 256, 512, 0, 0, GP_F32, GP_F16, 1, 1, 1, 1, 1e-5},   /* matvec [K, N] split-K */
        {1, 256, 384, 0, 1, GP_F32, GP_F16, 1, 1, 1, 1, 1e-5},   /* matvec [N, K] */
        {1, 1600, 4800, 0, 0, GP_F32, GP_BF16, 1, 1, 1, 1, 1e-5},
        {1, 200, 72, 0, 1, GP_F32, GP_F32, 1, 1, 1, 1, 1e-5},
        {1, 64, 40, 0, 0, GP_F32, GP_F32, 1, 1, 1, 1, 1e-5},
        {1, 6400, 1600, 0, 0, GP_F32, GP_F16, 1, 1, 1, 1, 1e-5}, /* GPT-2 1558M mlp proj */
        {1, 1600, 1600, 0, 0, GP_F32, GP_F16, 1, 1, 1, 1, 1e-5},
        {1, 1600, 5003, 0, 1, GP_F32, GP_F16, 1, 1, 1, 1, 1e-5}, /* [N, K], one batch */
        {1, 2560, 300, 0, 1, GP_F32, GP_F16, 1, 1, 1, 1, 1e-5},  /* [N, K], two batches */
        {33, 256, 320, 0, 0, GP_F32, GP_F16, 1, 1, 1, 1, 2e-3}, /* cuBLAS, a converted to f16 */
        {17, 40, 24, 0, 0, GP_F32, GP_F32, 2, 3, 1, 3, 1e-5},   /* batched, b broadcast on b0 */
        {17, 40, 24, 1, 0, GP_F32, GP_F32, 1, 2, 1, 2, 1e-5},   /* a transposed */
        {9, 31, 13, 0, 1, GP_F16, GP_F16, 2, 1, 2, 1, 1e-3},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        int64_t sa[4] = {cs[i].ab0, cs[i].ab1, cs[i].ta ? cs[i].K : cs[i].M, cs[i].ta ? cs[i].M : cs[i].K};
        int64_t sb[4] = {cs[i].bb0, cs[i].bb1, cs[i].tb ? cs[i].N : cs[i].K, cs[i].tb ? cs[i].K : cs[i].N};
        int64_t b0 = cs[i].ab0 > cs[i].bb0 ? cs[i].ab0 : cs[i].bb0;
        int64_t b1 = cs[i].ab1 > cs[i].bb1 ? cs[i].ab1 : cs[i].bb1;
        int64_t so[4] = {b0, b1, cs[i].M, cs[i].N};
        tt a, b, out;
        tt_new(&a, cs[i].at, 4, sa, 1.0f);
        tt_new(&b, cs[i].bt, 4, sb, 1.0f);
        tt_new(&out, GP_F32, 4, so, 1.0f);
        tt *ins[2] = {&a, &b};
        gp_attrs at = {{cs[i].ta, cs[i].tb, 0, 0}, {0}};
        char name[64];
        snprintf(name, sizeof name, "matmul case %zu", i);
        /* Matvecs: weights loaded before the PDL wait (everything "constant") on odd cases. */
        k.c.pdl = (int)(i % 2);
        k.c.const_lo = i % 2 ? (const void *)1 : NULL;
        k.c.const_hi = i % 2 ? (const void *)UINTPTR_MAX : NULL;
        CHECK_ERR(name, run_op(GP_OP_MATMUL, &at, &out, ins, 2, (size_t)GP_WS_CUBLAS_BYTES, &k),
                  cs[i].tol);
        k.c.const_lo = k.c.const_hi = NULL;
        k.c.pdl = 0;
        tt_free(&a);
        tt_free(&b);
        tt_free(&out);
    }
    /* A layout cuBLAS cannot take (no unit stride: every other element): the fallback kernel. */
    {
        int64_t sa[2] = {5, 48}, sb[2] = {24, 16}, so[2] = {5, 16};
        tt a, b, out;
        tt_new(&a, GP_F32, 2, sa, 1.0f);
        tt_new(&b, GP_F32, 2, sb, 1.0f);
        tt_new(&out, GP_F32, 2, so, 1.0f);
        int64_t va[2] = {5, 24}, nba[2] = {48 * 4, 8};
        tt_view(&a, 2, va, nba);
        tt *ins[2] = {&a, &b};
        gp_attrs at = {{0}, {0}};
        CHECK_ERR("matmul strided", run_op(GP_OP_MATMUL, &at, &out, ins, 2, 0, &k), 1e-5);
        tt_free(&a);
        tt_free(&b);
        tt_free(&out);
    }
    kctx_free(&k);
}

/* Sizes from the param block: launched for 8 rows, run for 3; rows 3.. stay untouched. */
void test_param_block(void)
{
    int64_t exact[1] = {3}, launch[1] = {8};
    kctx k;
    kctx_new(&k, exact, launch, 1);
    int64_t sx[2] = {8, 64}, sw[1] = {64};
    tt x, w, out;
    tt_new(&x, GP_F32, 2, sx, 1.0f);
    tt_new(&w, GP_F32, 1, sw, 1.0f);
    tt_new(&out, GP_F32, 2, sx, 1.0f);
    x.d.sym[0] = out.d.sym[0] = 0;
    cudaMemset(out.d.data, 0xff, out.bytes);
    gp_cu_tensor din[2] = {x.d, w.d};
    gp_attrs at = {{0}, {1e-5, 0}};
    CU_ASSERT_EQUAL(gp_cuda_compute(&k.c, GP_OP_RMS_NORM, &at, &out.d, din, 2, NULL, 0), 0);
    cudaDeviceSynchronize();
    gp_ktensor hx = x.h, hw = w.h, ho = out.h;
    hx.ne[0] = ho.ne[0] = 3;
    gp_ktensor hin[2] = {hx, hw};
    gp_cpu_compute(GP_OP_RMS_NORM, &at, &ho, hin, 2, NULL, 0, 0, 1);
    float *g = malloc(out.bytes);
    cudaMemcpy(g, out.d.data, out.bytes, cudaMemcpyDeviceToHost);
    gp_ktensor gk = ho;
    gk.data = g;
    CU_ASSERT(rel_err(&gk, &ho) < 1e-5);
    int untouched = 1;
    for (int i = 3 * 64; i < 8 * 64; i++)
        untouched &= isnan(g[i]);
    CU_ASSERT(untouched);
    free(g);
    tt_free(&x);
    tt_free(&w);
    tt_free(&out);
    kctx_free(&k);
}
