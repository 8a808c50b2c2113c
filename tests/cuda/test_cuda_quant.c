/* CUDA tests of the quantized weights (cuda/cuda_quant.cu) against the CPU's kernels (suite
 * "cuda"), and of their arithmetic compiled for the host (suite "cuda_host", no GPU needed). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>
#include <cuda_runtime_api.h>

#include "cuda/cuda_kernels.h"
#include "cuda/cuda_quant.cuh"
#include "ir/f16.h"
#include "gplan/gplan.h"
#include "plan/plan.h"
#include "cpu/quant.h"
#include "tests/cuda/cuda_tests.h"
#include "tests/cuda/cuda_testutil.h"
#include "tests/testmodel.h"
#include "tests/testutil.h"

static const gp_dtype quant_types[8] = {GP_Q4_0, GP_Q4_1, GP_Q5_0, GP_Q5_1,
                                        GP_Q8_0, GP_Q4_K, GP_Q5_K, GP_Q6_K};

/* Random [rows, n] values quantized to t (rows of gp_dtype_row_bytes), each row's scale its own
 * (1/8 .. 4) so that the blocks' scales differ; *deq gets their values dequantized. */
static uint8_t *quant_rows(gp_dtype t, int64_t rows, int64_t n, float **deq)
{
    size_t rb = gp_dtype_row_bytes(t, n);
    uint8_t *q = malloc((size_t)rows * rb);
    float *f = malloc((size_t)n * sizeof *f);
    *deq = malloc((size_t)(rows * n) * sizeof **deq);
    for (int64_t r = 0; r < rows; r++) {
        float s = 0.125f * (float)(1 + r % 32);
        for (int64_t i = 0; i < n; i++)
            f[i] = frand() * s;
        gp_quant_quantize_row(t, f, q + (size_t)r * rb, n);
        gp_quant_dequantize_row(t, q + (size_t)r * rb, *deq + r * n, n);
    }
    free(f);
    return q;
}

static gp_cu_tensor dev_2d(void *data, gp_dtype t, int64_t d0, int64_t d1, int64_t nb0,
                           int64_t nb1, int sym0)
{
    gp_cu_tensor k;
    memset(&k, 0, sizeof k);
    k.data = data;
    k.dtype = t;
    k.ndim = 2;
    k.ne[0] = d0;
    k.ne[1] = d1;
    k.nb[0] = nb0;
    k.nb[1] = nb1;
    for (int d = 0; d < GP_MAX_DIMS; d++)
        k.sym[d] = -1;
    k.sym[0] = sym0;
    return k;
}

/* The error bound of k_qdot's products (cuda_qdot.cu): x's quantization in two 8-bit parts, at
 * most d_x / 508 an element (d_x = max |x| / 127 over its block of 32), times the element's
 * integer part's weight |a q| <= |w| + |m| (m the block's offset, at most 2 max |w| over its block
 * here), plus f32 rounding, 1e-5 of sum |x| |w|. */
static double qdot_bound(const float *x, const float *w, int64_t K)
{
    double b = 0, sxw = 0;
    for (int64_t k0 = 0; k0 < K; k0 += 32) {
        double am = 0, wm = 0, sw = 0;
        for (int i = 0; i < 32; i++) {
            am = fmax(am, fabs(x[k0 + i]));
            wm = fmax(wm, fabs(w[k0 + i]));
            sw += fabs(w[k0 + i]);
            sxw += fabs((double)x[k0 + i] * w[k0 + i]);
        }
        b += am / 127.0 / 508.0 * (sw + 64 * wm);
    }
    return b + 1e-5 * sxw;
}

/*
 * One product y [M, N] = x [M, K] W [N, K]^T on the GPU (gp_cuda_compute, as the backend
 * launches it) against gp_quant_matmul_f32 (the CPU's f32 products on quantized weights) and a
 * double sum over the dequantized values: every output within tol of its sum |x| |w| of both,
 * tol 1e-5 for f32 sums, 2e-3 for the prompt path on cuBLAS (x and W rounded to f16: each product
 * within 2^-10 of its size). ws_bytes > 0: a workspace of that many bytes (the cuBLAS path's).
 * M_exact < M: M symbolic (the param block says M_exact); rows past it stay unwritten (but on
 * cuBLAS, which computes the launch's rows). Returns the largest error against the CPU over that
 * scale; path gets the kernel used (0 one token, 1 tiles, 2 one token in k_qdot, 3 cuBLAS).
 */
static double quant_matmul_case(gp_dtype t, int64_t M, int64_t M_exact, int64_t K, int64_t N,
                                size_t ws_bytes, int *path)
{
    float *wd, *x = malloc((size_t)(M * K) * sizeof *x);
    uint8_t *wq = quant_rows(t, N, K, &wd);
    size_t rb = gp_dtype_row_bytes(t, K);
    for (int64_t i = 0; i < M * K; i++)
        x[i] = frand();
    float *yref = malloc((size_t)(M * N) * sizeof *yref), *yg = malloc((size_t)(M * N) * sizeof *yg);
    gp_quant_matmul_f32(t, wq, 0, N, x, K, M_exact, K, yref, N);
    int sym = M_exact < M;
    int64_t launch[1] = {M}, exact[1] = {M_exact};
    kctx k;
    kctx_new(&k, exact, launch, sym ? 1 : 0);
    void *dx = NULL, *dw = NULL, *dy = NULL;
    CU_ASSERT_EQUAL_FATAL(cudaMalloc(&dx, (size_t)(M * K) * 4), cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaMalloc(&dw, (size_t)N * rb), cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaMalloc(&dy, (size_t)(M * N) * 4), cudaSuccess);
    cudaMemcpy(dx, x, (size_t)(M * K) * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dw, wq, (size_t)N * rb, cudaMemcpyHostToDevice);
    cudaMemset(dy, 0xff, (size_t)(M * N) * 4);
    void *dws = NULL;
    if (ws_bytes)
        CU_ASSERT_EQUAL_FATAL(cudaMalloc(&dws, ws_bytes), cudaSuccess);
    gp_cu_tensor in[2] = {dev_2d(dx, GP_F32, M, K, K * 4, 4, sym ? 0 : -1),
                          dev_2d(dw, t, N, K, (int64_t)rb, 0, -1)};
    gp_cu_tensor out = dev_2d(dy, GP_F32, M, N, N * 4, 4, sym ? 0 : -1);
    gp_attrs a;
    memset(&a, 0, sizeof a);
    a.i[1] = 1; /* tb */
    int64_t c0 = gp_cuda_quant_count(0), c1 = gp_cuda_quant_count(1), c3 = gp_cuda_quant_count(3);
    int64_t c4 = gp_cuda_quant_count(4);
    int r = gp_cuda_compute(&k.c, GP_OP_MATMUL, &a, &out, in, 2, dws, ws_bytes);
    if (r)
        fprintf(stderr, "\n  %s: gp_cuda_compute: %s\n", gp_dtype_name(t), k.c.err);
    CU_ASSERT_EQUAL(r, 0);
    CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
    *path = gp_cuda_quant_count(1) > c1 ? 1 : 0;
    CU_ASSERT_EQUAL(gp_cuda_quant_count(0) - c0 + gp_cuda_quant_count(1) - c1, 1);
    CU_ASSERT_EQUAL(*path, M > 8); /* the launch size picks the kernel */
    /* one token, x's rows staged within k_qdot's shared memory: the fast kernel (k_qdot) */
    int fast = M <= 8 && M * K * 11 / 4 <= (200 << 10);
    CU_ASSERT_EQUAL(gp_cuda_quant_count(3) - c3, fast);
    if (!*path && fast)
        *path = 2;
    /* a prompt with a workspace: on cuBLAS */
    CU_ASSERT_EQUAL(gp_cuda_quant_count(4) - c4, M > 8 && ws_bytes > 0);
    if (gp_cuda_quant_count(4) > c4)
        *path = 3;
    double tol = *path == 3 ? 2e-3 : 1e-5;
    cudaMemcpy(yg, dy, (size_t)(M * N) * 4, cudaMemcpyDeviceToHost);
    double worst = 0;
    int bad = 0, unwritten = 1;
    for (int64_t m = 0; m < M_exact; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = 0, bound = 0;
            for (int64_t i = 0; i < K; i++) {
                s += (double)x[m * K + i] * wd[n * K + i];
                bound += fabs((double)x[m * K + i] * wd[n * K + i]);
            }
            double g = yg[m * N + n], e = fabs(g - yref[m * N + n]) / (bound > 0 ? bound : 1);
            /* k_qdot: within its bound of x's quantization (of the CPU's f32 path: and 1e-5) */
            double qb = *path == 2 ? qdot_bound(x + m * K, wd + n * K, K) : 0;
            if (*path == 2 ? !(fabs(g - s) <= qb) || !(fabs(g - yref[m * N + n]) <= qb + 1e-5 * bound)
                           : !(e <= tol) || !(fabs(g - s) <= tol * bound + 1e-30))
                bad++;
            worst = e > worst || e != e ? e : worst;
        }
    for (int64_t i = M_exact * N; i < M * N && *path != 3; i++)
        unwritten &= isnan(yg[i]);
    if (bad)
        fprintf(stderr, "\n  %s M %lld (exact %lld) K %lld N %lld: %d outputs off (worst %.3g)\n",
                gp_dtype_name(t), (long long)M, (long long)M_exact, (long long)K, (long long)N, bad,
                worst);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(unwritten);
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dy);
    cudaFree(dws);
    kctx_free(&k);
    free(x);
    free(wq);
    free(wd);
    free(yref);
    free(yg);
    return worst;
}

/* Every type, M in {1, 3, 17, 64}, K in {256, 576, 1536, 2048} (576 for the 32-blocks only), N
 * in {96, 576}, prompts with a workspace (cuBLAS); one token at K 4096 (M 1, 3); then M symbolic (3 of a launch of 8, 17 of 64,
 * with no workspace: the tiles), and a prompt [64, 4352] x [576, 4352]^T in a workspace that holds
 * tiles of 256 rows only (three of W's rows, two of K). Prints the worst error per type and
 * kernel (a table for the GPU run). */
void test_quant_matmul(void)
{
    static const int64_t Ms[4] = {1, 3, 17, 64}, Ks[4] = {256, 576, 1536, 2048}, Ns[2] = {96, 576};
    const size_t ws = (size_t)GP_WS_CUBLAS_BYTES;
    printf("\n  quant matmul: worst |gpu - cpu| / sum |x||w| (tolerance 1e-5; cuBLAS 2e-3)\n"
           "  %-5s %10s %10s %10s %10s %6s\n", "type", "one-token", "tiles", "fast", "cublas",
           "cases");
    for (int ti = 0; ti < 8; ti++) {
        gp_dtype t = quant_types[ti];
        double worst[4] = {0, 0, 0, 0};
        int cases = 0;
        for (int ki = 0; ki < 4; ki++) {
            if (Ks[ki] % gp_dtype_block(t))
                continue;
            for (int ni = 0; ni < 2; ni++)
                for (int mi = 0; mi < 4; mi++) {
                    int path = 0;
                    double e = quant_matmul_case(t, Ms[mi], Ms[mi], Ks[ki], Ns[ni], ws, &path);
                    worst[path] = e > worst[path] || e != e ? e : worst[path];
                    cases++;
                }
        }
        for (int mi = 0; mi < 2; mi++) { /* 16 steps a row, 3 groups of 32 rows: half-warp rows */
            int path = 0;
            double e = quant_matmul_case(t, Ms[mi], Ms[mi], 4096, 96, ws, &path);
            worst[path] = e > worst[path] || e != e ? e : worst[path];
            cases++;
        }
        for (int s = 0; s < 3; s++) {
            int path = 0;
            /* 4 MiB for cuBLAS, x's [64, 4096] and W's [256, 4096] in f16 */
            size_t small = ((size_t)4 << 20) + 64 * 4096 * 2 + 256 * 4096 * 2 + 512;
            double e = s < 2 ? quant_matmul_case(t, s ? 64 : 8, s ? 17 : 3, 256, 96, 0, &path)
                             : quant_matmul_case(t, 64, 64, 4352, 576, small, &path);
            worst[path] = e > worst[path] || e != e ? e : worst[path];
            cases++;
        }
        printf("  %-5s %10.3g %10.3g %10.3g %10.3g %6d\n", gp_dtype_name(t), worst[0], worst[1],
               worst[2], worst[3], cases);
    }
}

/* Quantized groups (gp_cuda_matvec_group -> gp_cu_quant_group, one k_qdot launch): q, k, v of
 * q4_k and q6_k (Q4_K_M's mix) with and without the rms_norm before them, gate/up/swiglu of q4_k
 * and of q4_0 with the norm, q8_0 products; each output within k_qdot's bound (qdot_bound, through
 * silu for GLU) plus 1e-5 of sum |x'| |w| of the double sums over the dequantized weights (x' the
 * normed x, computed in double), outputs past N
 * untouched; a pair of q4_0 and q4_k is not taken (nothing launched). */
void test_quant_group(void)
{
    const struct {
        gp_dtype t[3];
        int n, glu, norm;
        int64_t K, N[3];
    } cs[] = {{{GP_Q4_K, GP_Q4_K, GP_Q6_K}, 3, 0, 0, 2048, {96, 64, 40}},
              {{GP_Q4_K, GP_Q4_K, GP_Q6_K}, 3, 0, 1, 2048, {160, 32, 32}},
              {{GP_Q4_K, GP_Q4_K}, 2, 1, 1, 512, {200, 200}},
              {{GP_Q4_0, GP_Q4_0}, 2, 1, 0, 768, {64, 64}},
              {{GP_Q8_0, GP_Q8_0, GP_Q8_0}, 3, 0, 1, 256, {32, 8, 8}},
              {{GP_Q4_0, GP_Q4_K}, 2, 0, 0, 256, {32, 32}}};
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        int64_t K = cs[c].K;
        float *x = malloc((size_t)K * sizeof *x), *nw = malloc((size_t)K * sizeof *nw);
        double *xn = malloc((size_t)K * sizeof *xn), ssq = 0;
        for (int64_t i = 0; i < K; i++) {
            x[i] = frand() * 3.0f;
            nw[i] = 0.5f + 0.5f * (frand() + 1.0f);
            ssq += (double)x[i] * x[i];
        }
        const float eps = 1e-5f;
        double inv = 1.0 / sqrt(ssq / (double)K + eps);
        float *xf = malloc((size_t)K * sizeof *xf);
        for (int64_t i = 0; i < K; i++) {
            xn[i] = cs[c].norm ? (double)x[i] * inv * nw[i] : x[i];
            xf[i] = (float)xn[i];
        }
        void *dx = NULL, *dnw = NULL, *dw[3] = {NULL}, *dy[3] = {NULL};
        uint8_t *wq[3] = {NULL};
        float *wd[3] = {NULL};
        CU_ASSERT_EQUAL_FATAL(cudaMalloc(&dx, (size_t)K * 4), cudaSuccess);
        CU_ASSERT_EQUAL_FATAL(cudaMalloc(&dnw, (size_t)K * 4), cudaSuccess);
        cudaMemcpy(dx, x, (size_t)K * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(dnw, nw, (size_t)K * 4, cudaMemcpyHostToDevice);
        gp_cu_group g;
        memset(&g, 0, sizeof g);
        g.n = cs[c].n;
        g.glu = cs[c].glu;
        g.x = dev_2d(dx, GP_F32, 1, K, K * 4, 4, -1);
        for (int s = 0; s < cs[c].n; s++) {
            gp_dtype t = cs[c].t[s];
            int64_t N = cs[c].N[s];
            size_t rb = gp_dtype_row_bytes(t, K);
            wq[s] = quant_rows(t, N, K, &wd[s]);
            CU_ASSERT_EQUAL_FATAL(cudaMalloc(&dw[s], (size_t)N * rb), cudaSuccess);
            CU_ASSERT_EQUAL_FATAL(cudaMalloc(&dy[s], (size_t)(N + 8) * 4), cudaSuccess);
            cudaMemcpy(dw[s], wq[s], (size_t)N * rb, cudaMemcpyHostToDevice);
            cudaMemset(dy[s], 0xff, (size_t)(N + 8) * 4);
            g.w[s] = dev_2d(dw[s], t, N, K, (int64_t)rb, 0, -1);
            g.tb[s] = 1;
            g.out[s] = dev_2d(dy[s], GP_F32, 1, N, N * 4, 4, -1);
        }
        if (cs[c].norm) {
            g.has_norm = 1;
            g.norm.eps = eps;
            g.norm.x = g.x;
            g.norm.w = dev_2d(dnw, GP_F32, 1, K, K * 4, 4, -1);
            g.norm.w.ndim = 1;
            g.norm.w.ne[0] = K;
            g.norm.w.nb[0] = 4;
        }
        int64_t g0 = gp_cuda_quant_count(5);
        int launched = -1;
        CU_ASSERT_EQUAL(gp_cuda_matvec_group(&k.c, &g, &launched), 0);
        CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
        int want = cs[c].t[0] != GP_Q4_0 || cs[c].t[1] != GP_Q4_K;
        CU_ASSERT_EQUAL(launched, want);
        CU_ASSERT_EQUAL(gp_cuda_quant_count(5) - g0, want);
        int bad = 0;
        double worst = 0;
        for (int s = 0; s < (cs[c].glu ? 1 : cs[c].n) && want; s++) {
            int64_t N = cs[c].N[s];
            float *y = malloc((size_t)(N + 8) * 4);
            cudaMemcpy(y, dy[s], (size_t)(N + 8) * 4, cudaMemcpyDeviceToHost);
            for (int64_t n = 0; n < N; n++) {
                double a = 0, ab = 0, b = 0, bb = 0;
                for (int64_t i = 0; i < K; i++) {
                    a += xn[i] * wd[s][n * K + i];
                    ab += fabs(xn[i] * wd[s][n * K + i]);
                    if (cs[c].glu) {
                        b += xn[i] * wd[1][n * K + i];
                        bb += fabs(xn[i] * wd[1][n * K + i]);
                    }
                }
                /* k_qdot's bound of x's quantization (qdot_bound, of the normed x) */
                double qa = qdot_bound(xf, wd[s] + n * K, K), qb = 0;
                if (cs[c].glu)
                    qb = qdot_bound(xf, wd[1] + n * K, K);
                double ref = a, bound = ab, qt = qa;
                if (cs[c].glu) { /* silu(a) b: its error from a's and b's */
                    double sg = 1.0 / (1.0 + exp(-a));
                    ref = a * sg * b;
                    bound = fabs(sg * (1 + a * (1 - sg)) * b) * ab + fabs(a * sg) * bb;
                    qt = fabs(sg * (1 + a * (1 - sg)) * b) * qa + fabs(a * sg) * qb;
                }
                /* below -88.7 silu's exp(-a) overflows f32 and silu(a) is 0 (as on the CPU):
                 * a product then within 1e-30 of its tiny double value passes */
                double e = (fabs(y[n] - ref) - qt) / (bound > 0 ? bound : 1);
                if (fabs(y[n] - ref) <= 1e-30)
                    e = 0;
                if (!(e <= 1e-5) && bad < 4)
                    printf("  quant group case %zu output %lld: %.9g, want %.9g (a %.9g, b %.9g, "
                           "bound %.3g, error %.3g)\n", c, (long long)n, y[n], ref, a, b, bound,
                           e);
                bad += !(e <= 1e-5);
                worst = e > worst || e != e ? e : worst;
            }
            for (int64_t n = N; n < N + 8; n++)
                bad += !isnan(y[n]);
            free(y);
        }
        if (bad)
            fprintf(stderr, "\n  quant group case %zu: %d outputs off (worst %.3g)\n", c, bad, worst);
        CU_ASSERT_EQUAL(bad, 0);
        for (int s = 0; s < cs[c].n; s++) {
            cudaFree(dw[s]);
            cudaFree(dy[s]);
            free(wq[s]);
            free(wd[s]);
        }
        cudaFree(dx);
        cudaFree(dnw);
        free(x);
        free(nw);
        free(xn);
        free(xf);
    }
    kctx_free(&k);
}

/* Lookups in a quantized table [40, 512]: rows of valid ids are gp_quant_dequantize_row's values
 * bit for bit (f32 out; f16 out: those rounded as gp_f32_to_f16 does), rows of ids out of range
 * (-1, 40) stay unwritten; a table whose rows are not whole blocks is refused. */
void test_quant_get_rows(void)
{
    const int64_t V = 40, C = 512, T = 7;
    const int32_t ids[7] = {3, 39, 0, -1, 17, 40, 3};
    for (int ti = 0; ti < 8; ti++) {
        gp_dtype t = quant_types[ti];
        float *deq;
        uint8_t *q = quant_rows(t, V, C, &deq);
        size_t rb = gp_dtype_row_bytes(t, C);
        void *dt = NULL, *di = NULL, *dout = NULL;
        CU_ASSERT_EQUAL_FATAL(cudaMalloc(&dt, (size_t)V * rb), cudaSuccess);
        CU_ASSERT_EQUAL_FATAL(cudaMalloc(&di, sizeof ids), cudaSuccess);
        CU_ASSERT_EQUAL_FATAL(cudaMalloc(&dout, (size_t)(T * C) * 4), cudaSuccess);
        cudaMemcpy(dt, q, (size_t)V * rb, cudaMemcpyHostToDevice);
        cudaMemcpy(di, ids, sizeof ids, cudaMemcpyHostToDevice);
        kctx k;
        kctx_new(&k, NULL, NULL, 0);
        gp_cu_tensor ki = dev_2d(di, GP_I32, T, 0, 4, 0, -1); /* the ids [T] */
        ki.ndim = 1;
        for (int f16 = 0; f16 < 2; f16++) {
            gp_dtype ot = f16 ? GP_F16 : GP_F32;
            size_t es = f16 ? 2 : 4;
            gp_cu_tensor in[2] = {dev_2d(dt, t, V, C, (int64_t)rb, 0, -1), ki};
            gp_cu_tensor out = dev_2d(dout, ot, T, C, C * (int64_t)es, (int64_t)es, -1);
            cudaMemset(dout, 0xff, (size_t)(T * C) * 4);
            gp_attrs a;
            memset(&a, 0, sizeof a);
            int64_t c2 = gp_cuda_quant_count(2);
            int r = gp_cuda_compute(&k.c, GP_OP_GET_ROWS, &a, &out, in, 2, NULL, 0);
            if (r)
                fprintf(stderr, "\n  %s get_rows: %s\n", gp_dtype_name(t), k.c.err);
            CU_ASSERT_EQUAL(r, 0);
            CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
            CU_ASSERT_EQUAL(gp_cuda_quant_count(2), c2 + 1);
            unsigned char *g = malloc((size_t)(T * C) * es);
            cudaMemcpy(g, dout, (size_t)(T * C) * es, cudaMemcpyDeviceToHost);
            int bad = 0;
            for (int64_t r2 = 0; r2 < T; r2++)
                for (int64_t i = 0; i < C; i++) {
                    const unsigned char *e = g + (size_t)(r2 * C + i) * es;
                    uint16_t h = 0;
                    float v = 0;
                    if (f16)
                        memcpy(&h, e, 2);
                    else
                        memcpy(&v, e, 4);
                    if (ids[r2] < 0 || ids[r2] >= V) {
                        bad += f16 ? h != 0xffff : !isnan(v);
                        continue;
                    }
                    float want = deq[ids[r2] * C + i];
                    if (f16)
                        bad += h != gp_f32_to_f16(want);
                    else
                        bad += memcmp(&v, &want, 4) != 0;
                }
            if (bad)
                fprintf(stderr, "\n  %s get_rows (%s out): %d elements off\n", gp_dtype_name(t),
                        f16 ? "f16" : "f32", bad);
            CU_ASSERT_EQUAL(bad, 0);
            free(g);
        }
        /* rows of 500 elements: not whole blocks */
        gp_cu_tensor in[2] = {dev_2d(dt, t, V, 500, (int64_t)rb, 0, -1), ki};
        gp_cu_tensor out = dev_2d(dout, GP_F32, T, 500, 2000, 4, -1);
        gp_attrs a;
        memset(&a, 0, sizeof a);
        CU_ASSERT_EQUAL(gp_cuda_compute(&k.c, GP_OP_GET_ROWS, &a, &out, in, 2, NULL, 0), -1);
        CU_ASSERT_PTR_NOT_NULL(strstr(k.c.err, "multiple of"));
        kctx_free(&k);
        cudaFree(dt);
        cudaFree(di);
        cudaFree(dout);
        free(q);
        free(deq);
    }
}

/* Layouts the quantized products do not take are refused with an error, nothing launched. */
void test_quant_matmul_refusals(void)
{
    float *wd;
    uint8_t *wq = quant_rows(GP_Q8_0, 4, 64, &wd);
    void *dx = NULL, *dw = NULL, *dy = NULL;
    cudaMalloc(&dx, 64 * 4);
    cudaMalloc(&dw, 4 * gp_dtype_row_bytes(GP_Q8_0, 64));
    cudaMalloc(&dy, 64 * 4);
    cudaMemset(dx, 0, 64 * 4);
    cudaMemcpy(dw, wq, 4 * gp_dtype_row_bytes(GP_Q8_0, 64), cudaMemcpyHostToDevice);
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    gp_attrs a;
    memset(&a, 0, sizeof a);
    gp_cu_tensor in[2] = {dev_2d(dx, GP_F32, 1, 64, 256, 4, -1),
                          dev_2d(dw, GP_Q8_0, 4, 64, 68, 0, -1)};
    gp_cu_tensor out = dev_2d(dy, GP_F32, 1, 4, 16, 4, -1);
    int64_t c0 = k.c.launches;
    /* not transposed (W [K, N] is not a form quantized weights take) */
    CU_ASSERT_EQUAL(gp_cuda_compute(&k.c, GP_OP_MATMUL, &a, &out, in, 2, NULL, 0), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(k.c.err, "q8_0 weight needs"));
    a.i[1] = 1;
    in[0].dtype = GP_F16; /* x must be f32 */
    CU_ASSERT_EQUAL(gp_cuda_compute(&k.c, GP_OP_MATMUL, &a, &out, in, 2, NULL, 0), -1);
    in[0].dtype = GP_F32;
    in[0].ne[1] = in[1].ne[1] = 48; /* K not whole blocks */
    CU_ASSERT_EQUAL(gp_cuda_compute(&k.c, GP_OP_MATMUL, &a, &out, in, 2, NULL, 0), -1);
    CU_ASSERT_EQUAL(k.c.launches, c0);
    in[0].ne[1] = in[1].ne[1] = 64;
    CU_ASSERT_EQUAL(gp_cuda_compute(&k.c, GP_OP_MATMUL, &a, &out, in, 2, NULL, 0), 0);
    CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
    kctx_free(&k);
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dy);
    free(wq);
    free(wd);
}

/* examples/llama.gplan with -D wtype=TYPE (random weights quantized at load) on CUDA against the
 * same graph in f32 on the CPU, bound to those weights dequantized (a safetensors file). A prompt
 * of 20 tokens (bucket 32: products on cuBLAS, x and W rounded to f16, so the tolerance of f16
 * weights' models, 5e-3), then 8 decode steps (the one-token kernels, f32 sums of the same
 * values, on a KV cache the prompt wrote); no allocation in evals. */
static void quant_model_parity(const char *wtype)
{
    gp_model *q, *f;
    const char *path = gp_test_llama_dequantized(64, 32, wtype, 11, &q, &f);
    CU_ASSERT_PTR_NOT_NULL_FATAL(path);
    char err[2048];
    gp_session_opts oc = {"cpu", 2, 0}, og = {"cuda", 1, 0};
    int64_t c0 = gp_cuda_quant_count(0), c1 = gp_cuda_quant_count(1), c2 = gp_cuda_quant_count(2);
    int64_t c3 = gp_cuda_quant_count(3), c4 = gp_cuda_quant_count(4), c5 = gp_cuda_quant_count(5);
    int64_t e0 = gp_cuda_blas_epilogue_count(0);
    gp_session *sc = gp_session_new(f, &oc, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sc);
    gp_session *sg = gp_session_new(q, &og, err, sizeof err);
    if (!sg)
        fprintf(stderr, "\n  cuda session (%s): %s\n", wtype, err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sg);
    int64_t V = gp_test_vocab(q);
    float *lc = malloc(sizeof(float) * 20 * (size_t)V), *lg = malloc(sizeof(float) * 20 * (size_t)V);
    double worst = 0;
    for (int i = 0; i < 9; i++) {
        int n = i == 0 ? 20 : 1, start = i == 0 ? 0 : 19 + i;
        CU_ASSERT_EQUAL_FATAL(step(sc, n, start, lc, V), 0);
        CU_ASSERT_EQUAL_FATAL(step(sg, n, start, lg, V), 0);
        double e = gp_test_rel_err(lg, lc, (size_t)n * (size_t)V, GP_TEST_L2);
        if (!(e <= 5e-3))
            fprintf(stderr, "\n  llama %s step %d: logits error %.3g > 5e-3\n", wtype, i, e);
        CU_ASSERT(e <= 5e-3);
        worst = e > worst || e != e ? e : worst;
    }
    int64_t allocs = gp_session_backend_allocs(sg);
    CU_ASSERT_EQUAL(allocs, 0);
    /* graphs captured at creation launched both kernels and the lookup */
    int64_t n0 = gp_cuda_quant_count(0) - c0, n1 = gp_cuda_quant_count(1) - c1;
    int64_t n2 = gp_cuda_quant_count(2) - c2;
    int64_t n3 = gp_cuda_quant_count(3) - c3, n4 = gp_cuda_quant_count(4) - c4;
    CU_ASSERT(n0 > 0 && n1 > 0 && n2 > 0);
    CU_ASSERT(n3 > 0 && n4 > 0); /* one token: k_qdot; prompts: cuBLAS */
    /* q, k, v and gate, up, swiglu grouped (with their norms) for the types built for groups; the
     * residual adds after o and down in the prompts' products: one epilogue launch after cuBLAS */
    int64_t n5 = gp_cuda_quant_count(5) - c5, ne = gp_cuda_blas_epilogue_count(0) - e0;
    CU_ASSERT(n5 > 0); /* every block type */
    CU_ASSERT(ne > 0);
    printf("  llama %-5s CUDA vs CPU f32 (dequantized): worst logits error %.3g (tolerance 5e-3), "
           "eval allocations %lld, launches: one-token %lld (k_qdot %lld, grouped launches %lld) "
           "prompt %lld (cuBLAS %lld, epilogues after %lld) lookups %lld\n",
           wtype, worst, (long long)allocs, (long long)n0, (long long)n3, (long long)n5,
           (long long)n1, (long long)n4, (long long)ne, (long long)n2);
    free(lc);
    free(lg);
    gp_session_free(sg);
    gp_session_free(sc);
    remove(path);
    gp_model_free(q);
    gp_model_free(f);
}

void test_quant_model(void)
{
    printf("\n");
    quant_model_parity("q4_k");
    quant_model_parity("q8_0");
    quant_model_parity("q4_1");
}

/* Speed of the quantized products on this GPU, printed for the record and asserted on nothing
 * but success: W [N, K] of random blocks (sane f16 scales) for Llama-3-8B's shapes, one token (GB/s
 * of W read) and, for [4096, 4096], a prompt of 512 (TFLOP/s), the mean of 20 launches after 3
 * warm-up ones. */
void test_quant_speed(void)
{
    static const int64_t shapes[3][2] = {{4096, 4096}, {14336, 4096}, {4096, 14336}};
    const int64_t MP = 512;
    static const gp_dtype ts[4] = {GP_Q4_0, GP_Q8_0, GP_Q4_K, GP_Q6_K};
    printf("\n  quant speed: one token (M 1) and a prompt (M %lld)\n"
           "  %-5s %6s %6s %10s %10s %12s %10s\n", (long long)MP, "type", "N", "K", "M1 us",
           "M1 GB/s", "M512 ms", "TFLOP/s");
    for (int si = 0; si < 3; si++)
        for (int ti = 0; ti < 4; ti++) {
            gp_dtype t = ts[ti];
            int64_t N = shapes[si][0], K = shapes[si][1];
            size_t rb = gp_dtype_row_bytes(t, K), wb = (size_t)N * rb;
            unsigned char *h = malloc(wb);
            for (size_t i = 0; i < wb; i++)
                h[i] = (unsigned char)gp_test_rand(&rng);
            /* scales about 1e-3 (no NaN or Inf): each block's f16 at its place */
            int64_t qk = gp_dtype_block(t), bs = (int64_t)gp_dtype_row_bytes(t, qk);
            int64_t doff = t == GP_Q6_K ? 208 : 0;
            for (size_t b = 0; b < wb / (size_t)bs; b++) {
                unsigned char *blk = h + b * (size_t)bs + doff;
                blk[0] = 0x19, blk[1] = 0x12; /* ~7.5e-4 */
                if (t == GP_Q4_K)
                    blk[2] = 0x19, blk[3] = 0x12;
            }
            void *dw = NULL, *dx = NULL, *dy = NULL;
            CU_ASSERT_EQUAL_FATAL(cudaMalloc(&dw, wb), cudaSuccess);
            CU_ASSERT_EQUAL_FATAL(cudaMalloc(&dx, (size_t)(MP * K) * 4), cudaSuccess);
            CU_ASSERT_EQUAL_FATAL(cudaMalloc(&dy, (size_t)(MP * N) * 4), cudaSuccess);
            cudaMemcpy(dw, h, wb, cudaMemcpyHostToDevice);
            cudaMemset(dx, 0, (size_t)(MP * K) * 4);
            kctx k;
            kctx_new(&k, NULL, NULL, 0);
            cudaStreamCreate(&k.c.stream);
            gp_attrs a;
            memset(&a, 0, sizeof a);
            a.i[1] = 1;
            double us[2] = {0, 0};
            for (int p = 0; p < (si == 0 ? 2 : 1); p++) {
                int64_t M = p ? MP : 1;
                gp_cu_tensor in[2] = {dev_2d(dx, GP_F32, M, K, K * 4, 4, -1),
                                      dev_2d(dw, t, N, K, (int64_t)rb, 0, -1)};
                gp_cu_tensor out = dev_2d(dy, GP_F32, M, N, N * 4, 4, -1);
                cudaEvent_t e0, e1;
                cudaEventCreate(&e0);
                cudaEventCreate(&e1);
                int r = 0;
                for (int i = 0; i < 3; i++)
                    r |= gp_cuda_compute(&k.c, GP_OP_MATMUL, &a, &out, in, 2, NULL, 0);
                cudaEventRecord(e0, k.c.stream);
                for (int i = 0; i < 20; i++)
                    r |= gp_cuda_compute(&k.c, GP_OP_MATMUL, &a, &out, in, 2, NULL, 0);
                cudaEventRecord(e1, k.c.stream);
                CU_ASSERT_EQUAL(r, 0);
                CU_ASSERT_EQUAL(cudaEventSynchronize(e1), cudaSuccess);
                float ms = 0;
                cudaEventElapsedTime(&ms, e0, e1);
                us[p] = 1e3 * ms / 20;
                cudaEventDestroy(e0);
                cudaEventDestroy(e1);
            }
            if (si == 0)
                printf("  %-5s %6lld %6lld %10.1f %10.0f %12.3f %10.2f\n", gp_dtype_name(t),
                       (long long)N, (long long)K, us[0], (double)wb / (us[0] * 1e3), us[1] / 1e3,
                       2.0 * MP * N * K / (us[1] * 1e6));
            else
                printf("  %-5s %6lld %6lld %10.1f %10.0f\n", gp_dtype_name(t), (long long)N,
                       (long long)K, us[0], (double)wb / (us[0] * 1e3));
            cudaStreamDestroy(k.c.stream);
            kctx_free(&k);
            cudaFree(dw);
            cudaFree(dx);
            cudaFree(dy);
            free(h);
        }
}

/* The quantized kernels' dequantization (cuda_quant.cu's deq8, compiled for the host) gives
 * gp_quant_dequantize_row's values bit for bit: rows of every type from real values, and rows of
 * random bytes (any scales: subnormal, huge, NaN and Inf binary16 included, any q); a bad e0 or
 * type is refused. */
void test_quant_deq8_host(void)
{
    const int64_t K = 1536;
    for (int ti = 0; ti < 8; ti++) {
        gp_dtype t = quant_types[ti];
        size_t rb = gp_dtype_row_bytes(t, K);
        uint8_t *q = malloc(rb);
        float *f = malloc((size_t)K * sizeof *f), *d = malloc((size_t)K * sizeof *d);
        int bad = 0;
        for (int rep = 0; rep < 40; rep++) {
            if (rep % 2) {
                for (size_t i = 0; i < rb; i++)
                    q[i] = (uint8_t)gp_test_rand(&rng);
            } else {
                for (int64_t i = 0; i < K; i++)
                    f[i] = frand() * (float)(1 + rep);
                gp_quant_quantize_row(t, f, q, K);
            }
            gp_quant_dequantize_row(t, q, d, K);
            for (int e0 = 0; e0 < K; e0 += 8) {
                float v[8];
                CU_ASSERT_EQUAL_FATAL(gp_cuda_quant_deq8_host(t, q, e0, v), 0);
                bad += memcmp(v, d + e0, sizeof v) != 0;
            }
        }
        if (bad)
            fprintf(stderr, "\n  %s: %d groups of 8 differ from gp_quant_dequantize_row\n",
                    gp_dtype_name(t), bad);
        CU_ASSERT_EQUAL(bad, 0);
        float v[8];
        CU_ASSERT_EQUAL(gp_cuda_quant_deq8_host(t, q, 4, v), -1);
        free(q);
        free(f);
        free(d);
    }
    float v[8];
    unsigned char row[64] = {0};
    CU_ASSERT_EQUAL(gp_cuda_quant_deq8_host(GP_F16, row, 0, v), -1);
}

/* k_qdot's arithmetic (gp_cuda_qdot_host: x's staging, every unit as a lane computes it): rows of
 * every type from real values (odd numbers of blocks, so 2-byte-aligned rows and super-blocks
 * too), M 1, 3 and 8, x with outliers, against the double sums of the dequantized weights within
 * qdot_bound; a NaN in x makes its row's outputs NaN; shapes it does not take are refused. The
 * worst error over the bound is printed per type (1 would be at the bound). */
void test_qdot_host(void)
{
    static const int64_t Ks[3] = {256, 544, 2304};
    static const int Ms[3] = {1, 3, 8};
    const int N = 7;
    printf("\n  k_qdot on the host, worst error / its bound:");
    for (int ti = 0; ti < 8; ti++) {
        gp_dtype t = quant_types[ti];
        double worst = 0;
        int bad = 0;
        for (int ki = 0; ki < 3; ki++) {
            int64_t K = Ks[ki];
            if (K % gp_dtype_block(t))
                K = 768; /* 3 super-blocks: q6_k's odd count */
            float *wd;
            uint8_t *wq = quant_rows(t, N, K, &wd);
            size_t rb = gp_dtype_row_bytes(t, K);
            /* 16-byte aligned, with a word to spare past the rows (the kernel's aligned windows) */
            uint8_t *w16 = aligned_alloc(16, ((size_t)N * rb + 31) / 16 * 16);
            memcpy(w16, wq, (size_t)N * rb);
            for (int mi = 0; mi < 3; mi++) {
                int M = Ms[mi];
                float *x = malloc((size_t)M * K * sizeof *x), *y = malloc((size_t)M * N * sizeof *y);
                for (int64_t i = 0; i < M * K; i++)
                    x[i] = frand() * (i % 41 == 0 ? 30.0f : 1.0f) * (float)(1 + mi);
                CU_ASSERT_EQUAL_FATAL(gp_cuda_qdot_host(t, w16, N, x, (int)K, M, y), 0);
                for (int m = 0; m < M; m++)
                    for (int n = 0; n < N; n++) {
                        double s = 0;
                        for (int64_t i = 0; i < K; i++)
                            s += (double)x[m * K + i] * wd[n * K + i];
                        double e = fabs(y[m * N + n] - s) / qdot_bound(x + m * K, wd + n * K, K);
                        bad += !(e <= 1.0);
                        worst = e > worst || e != e ? e : worst;
                    }
                /* a NaN in row M - 1 */
                x[(M - 1) * K + K / 2] = NAN;
                CU_ASSERT_EQUAL_FATAL(gp_cuda_qdot_host(t, w16, N, x, (int)K, M, y), 0);
                for (int n = 0; n < N; n++) {
                    CU_ASSERT(isnan(y[(M - 1) * N + n]));
                    if (M > 1)
                        CU_ASSERT(!isnan(y[n]));
                }
                free(x);
                free(y);
            }
            free(w16);
            free(wq);
            free(wd);
        }
        if (bad)
            fprintf(stderr, "\n  %s: %d k_qdot outputs past the bound (worst %.3g)\n",
                    gp_dtype_name(t), bad, worst);
        CU_ASSERT_EQUAL(bad, 0);
        printf(" %s %.2g", gp_dtype_name(t), worst);
    }
    printf("\n");
    float x[64] = {0}, y[8];
    uint8_t *w = aligned_alloc(16, 256);
    memset(w, 0, 256);
    CU_ASSERT_EQUAL(gp_cuda_qdot_host(GP_F16, w, 1, x, 32, 1, y), -1);
    CU_ASSERT_EQUAL(gp_cuda_qdot_host(GP_Q4_K, w, 1, x, 32, 1, y), -1); /* K not of 256 */
    CU_ASSERT_EQUAL(gp_cuda_qdot_host(GP_Q4_0, w, 1, x, 48, 1, y), -1);
    CU_ASSERT_EQUAL(gp_cuda_qdot_host(GP_Q4_0, w, 1, x, 32, 9, y), -1);
    CU_ASSERT_EQUAL(gp_cuda_qdot_host(GP_Q4_0, w + 2, 1, x, 32, 1, y), -1);
    free(w);
}
