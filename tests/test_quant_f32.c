/* Tests of gp_quant_matmul_f32 (cpu/quant.h): every type and ISA path against a double
 * reference, the documented summation order bit for bit, and the same bits for every column split
 * and every batch size (decode M = 1 against prompt M = 37). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <CUnit/CUnit.h>

#include "cpu/cpu_kernels.h"
#include "cpu/quant.h"
#include "cpu/quant_f32_internal.h" /* gp_qint_supports, gp_qint_ws_bytes */
#include "cpu/quant_internal.h"     /* gp_quant_k_scales */
#include "ir/f16.h"
#include "tests/testutil.h"

static const gp_dtype types[] = {GP_Q4_0, GP_Q4_1, GP_Q5_0, GP_Q5_1,
                                 GP_Q8_0, GP_Q4_K, GP_Q5_K, GP_Q6_K};
static const char *const tname[] = {"q4_0", "q4_1", "q5_0", "q5_1",
                                    "q8_0", "q4_k", "q5_k", "q6_k"};
#define NTYPES 8

static uint64_t rng = 0x13198a2e03707344ull;

/* The order cpu/quant_f32_internal.h documents: 32 lanes (k mod 32) in increasing k, fused
 * (SIMD paths) or product-then-add (portable), then the fixed tree. */
static float emulate(const float *x, const float *w, int K, int fused)
{
    float l[32] = {0}, s16[16], s8[8], s4[4], s2[2];
    for (int k = 0; k < K; k++) {
        if (fused) {
            l[k % 32] = fmaf(x[k], w[k], l[k % 32]);
        } else {
            float p = x[k] * w[k];
            l[k % 32] = l[k % 32] + p;
        }
    }
    for (int i = 0; i < 16; i++)
        s16[i] = l[i] + l[16 + i];
    for (int i = 0; i < 8; i++)
        s8[i] = s16[i] + s16[8 + i];
    for (int i = 0; i < 4; i++)
        s4[i] = s8[i] + s8[4 + i];
    for (int i = 0; i < 2; i++)
        s2[i] = s4[i] + s4[2 + i];
    return s2[0] + s2[1];
}

typedef struct {
    gp_dtype t;
    int N, K, M, ldx, ldy;
    unsigned char *w; /* [N] rows of rb bytes */
    float *wf;        /* [N, K] W's values (gp_quant_dequantize_row) */
    float *x;         /* [M, ldx] */
    double *ref;      /* [M, N] the exact-ish dot in double */
    double *mag;      /* [M, N] sum |x| |w| */
} problem;

static void problem_make(problem *p, gp_dtype t, int N, int K, int M)
{
    p->t = t;
    p->N = N;
    p->K = K;
    p->M = M;
    p->ldx = K + 5; /* strides wider than the rows: nothing may read or write past them */
    p->ldy = N + 3;
    size_t rb = gp_dtype_row_bytes(t, K);
    p->wf = malloc((size_t)N * K * sizeof *p->wf);
    p->w = malloc((size_t)N * rb);
    gp_test_normal(p->wf, (size_t)N * K, 1.0f, &rng);
    for (int i = 0; i < N * K; i++)
        p->wf[i] = p->wf[i] * 0.05f + (i % 97 == 0 ? 0.3f : 0.0f);
    for (int n = 0; n < N; n++)
        gp_quant_quantize_row(t, p->wf + (size_t)n * K, p->w + n * rb, K);
    for (int n = 0; n < N; n++)
        gp_quant_dequantize_row(t, p->w + n * rb, p->wf + (size_t)n * K, K);
    p->x = malloc((size_t)M * p->ldx * sizeof *p->x);
    gp_test_normal(p->x, (size_t)M * p->ldx, 1.0f, &rng);
    for (int i = 0; i < M * p->ldx; i++)
        p->x[i] *= i % 61 == 0 ? 8.0f : 1.0f;
    p->ref = malloc((size_t)M * N * sizeof *p->ref);
    p->mag = malloc((size_t)M * N * sizeof *p->mag);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = 0, a = 0;
            for (int k = 0; k < K; k++) {
                double v = (double)p->x[(size_t)m * p->ldx + k] * p->wf[(size_t)n * K + k];
                s += v;
                a += fabs(v);
            }
            p->ref[m * N + n] = s;
            p->mag[m * N + n] = a;
        }
}

static void problem_free(problem *p)
{
    free(p->w);
    free(p->wf);
    free(p->x);
    free(p->ref);
    free(p->mag);
}

static float *run(const problem *p, int M, const float *x, const int *cuts, int ncuts)
{
    float *y = malloc((size_t)M * p->ldy * sizeof *y);
    for (int i = 0; i < M * p->ldy; i++)
        y[i] = -1234.5f;
    for (int c = 0; c + 1 < ncuts; c++)
        gp_quant_matmul_f32(p->t, p->w, cuts[c], cuts[c + 1], x, p->ldx, M, p->K, y, p->ldy);
    return y;
}

/*
 * Bound: W's values are the reference's, so the only error is the f32 sum. Each of the 32 lanes
 * adds K / 32 terms and the tree 5 more levels; with a rounded product (portable) that is at most
 * K / 32 + 6 roundings on any term, |y - ref| <= gamma(K / 32 + 6) sum |x||w|, gamma(n) = n u /
 * (1 - n u), u = 2^-24: for K = 2048 that is 70 * 6e-8 = 4.2e-6, under the 1e-5 the test allows.
 */
static void test_reference(void)
{
    static const int Ms[] = {1, 2, 5, 37}, Ks[] = {256, 768, 2048, 1536};
    enum { N = 19 }; /* every decode (4, 2 rows) and prompt (3 rows) tile shape has a ragged tail */
    const int cuts_all[] = {0, N}, cuts_a[] = {0, 1, 6, 13, 14, 17, N}, cuts_b[] = {0, 3, 16, N};
    int checked = 0;
    for (int t = 0; t < NTYPES; t++) {
        for (int ki = 0; ki < 4; ki++) {
            problem p;
            problem_make(&p, types[t], N, Ks[ki], 37);
            CU_ASSERT_FATAL(gp_quant_force_isa(GP_QUANT_ISA_PORTABLE) == 0);
            float *ypor = run(&p, 37, p.x, cuts_all, 2);
            float *emu = malloc(2 * 37 * N * sizeof *emu); /* [fused][m][n] */
            for (int f = 0; f < 2; f++)
                for (int m = 0; m < 37; m++)
                    for (int n = 0; n < N; n++)
                        emu[(f * 37 + m) * N + n] = emulate(p.x + (size_t)m * p.ldx,
                                                            p.wf + (size_t)n * p.K, p.K, f);
            for (int isa = 0; isa < GP_QUANT_ISA_COUNT; isa++) {
                if (gp_quant_force_isa(isa) != 0)
                    continue;
                for (int mi = 0; mi < 4; mi++) {
                    int M = Ms[mi], bad = 0, order = 0, split = 0, vs = 0, pad = 0, batch = 0;
                    float *y = run(&p, M, p.x, cuts_all, 2);
                    float *ya = run(&p, M, p.x, cuts_a, 7);
                    float *yb = M == 1 || M == 37 ? run(&p, M, p.x, cuts_b, 4) : NULL;
                    for (int m = 0; m < M; m++) {
                        /* the same rows as decode (M = 1) and inside the batch of 37 */
                        float *y1 = run(&p, 1, p.x + (size_t)m * p.ldx, cuts_a, 7);
                        for (int n = 0; n < N; n++) {
                            float v = y[m * p.ldy + n];
                            double tol = 1e-5 * p.mag[m * N + n] + 1e-30;
                            bad += !(fabs(v - p.ref[m * N + n]) <= tol);
                            vs += !(fabs(v - ypor[m * p.ldy + n]) <= tol);
                            float e = emu[((isa != GP_QUANT_ISA_PORTABLE) * 37 + m) * N + n];
                            order += memcmp(&v, &e, sizeof v) != 0;
                            split += memcmp(&v, &ya[m * p.ldy + n], sizeof v) != 0;
                            split += yb && memcmp(&v, &yb[m * p.ldy + n], sizeof v) != 0;
                            batch += memcmp(&v, &y1[n], sizeof v) != 0;
                            checked++;
                        }
                        for (int n = N; n < p.ldy; n++)
                            pad += y[m * p.ldy + n] != -1234.5f || y1[n] != -1234.5f;
                        free(y1);
                    }
                    if (bad || order || split || vs || pad || batch)
                        printf("\n%s %s M %d K %d: %d off the reference, %d off the order, %d "
                               "split, %d vs portable, %d batch, %d pad\n",
                               tname[t], gp_quant_isa_name(isa), M, p.K, bad, order, split, vs,
                               batch, pad);
                    CU_ASSERT(bad == 0 && order == 0 && split == 0 && vs == 0 && pad == 0 &&
                              batch == 0);
                    free(y);
                    free(ya);
                    free(yb);
                }
            }
            free(ypor);
            free(emu);
            problem_free(&p);
        }
    }
    CU_ASSERT(checked > 0);
    CU_ASSERT(gp_quant_force_isa(GP_QUANT_ISA_AUTO) == 0);
}

/* Rows of a batch and the same rows alone (bits), and the SIMD paths (AVX2, AVX-512; NEON on
 * aarch64) against each other (the same documented order: the same bits): on a 32-block K that
 * is not a whole number of 256 columns, on prompt batches of every tail size, and with K = 8448,
 * beyond one column chunk of the prompt path and with a row group (~512 KiB of x) smaller than
 * M. */
static void test_batches_and_paths(void)
{
    static const int Ms[] = {4, 5, 6, 7, 8, 13, 24, 25, 49};
    static const int simd[] = {GP_QUANT_ISA_AVX2, GP_QUANT_ISA_AVX512, GP_QUANT_ISA_NEON};
    for (int c = 0; c < 2 * NTYPES; c++) {
        int t = c % NTYPES, N = 17, cuts[] = {0, N}, big = c >= NTYPES;
        int K = big ? 8448 : gp_dtype_block(types[t]) == 32 ? 288 + 32 : 512, MT = big ? 25 : 49;
        problem p;
        problem_make(&p, types[t], N, K, MT);
        float *prev = NULL;
        for (int si = 0; si < 3; si++) {
            int isa = simd[si];
            if (gp_quant_force_isa(isa) != 0)
                continue;
            float *y1 = malloc((size_t)MT * p.ldy * sizeof *y1); /* the rows one at a time */
            for (int m = 0; m < MT; m++) {
                float *r = run(&p, 1, p.x + (size_t)m * p.ldx, cuts, 2);
                memcpy(y1 + m * p.ldy, r, (size_t)N * sizeof *r);
                free(r);
            }
            int diff = 0;
            for (int mi = 0; mi < 9 && Ms[mi] <= MT; mi++) {
                float *y = run(&p, Ms[mi], p.x, cuts, 2);
                for (int m = 0; m < Ms[mi]; m++)
                    diff += memcmp(y + m * p.ldy, y1 + m * p.ldy, (size_t)N * sizeof *y) != 0;
                free(y);
            }
            if (diff)
                printf("\n%s %s K %d: %d rows differ from M = 1\n", tname[t], gp_quant_isa_name(isa),
                       K, diff);
            CU_ASSERT(diff == 0);
            if (prev) {
                int paths = 0;
                for (int m = 0; m < MT; m++)
                    paths += memcmp(prev + m * p.ldy, y1 + m * p.ldy, (size_t)N * sizeof *y1) != 0;
                CU_ASSERT(paths == 0);
                free(prev);
            }
            prev = y1;
        }
        free(prev);
        problem_free(&p);
    }
    CU_ASSERT(gp_quant_force_isa(GP_QUANT_ISA_AUTO) == 0);
}

/* Empty ranges write nothing; n0 > 0 writes only [n0, n1). */
static void test_ranges(void)
{
    problem p;
    problem_make(&p, GP_Q4_1, 8, 64, 3);
    for (int isa = 0; isa < GP_QUANT_ISA_COUNT; isa++) {
        if (gp_quant_force_isa(isa) != 0)
            continue;
        float y[3 * 11];
        for (int i = 0; i < 3 * 11; i++)
            y[i] = 7.0f;
        gp_quant_matmul_f32(GP_Q4_1, p.w, 5, 5, p.x, p.ldx, 3, 64, y, 11);
        gp_quant_matmul_f32(GP_Q4_1, p.w, 0, 8, p.x, p.ldx, 0, 64, y, 11);
        int untouched = 0;
        for (int i = 0; i < 3 * 11; i++)
            untouched += y[i] == 7.0f;
        CU_ASSERT(untouched == 3 * 11);
        gp_quant_matmul_f32(GP_Q4_1, p.w, 2, 6, p.x, p.ldx, 3, 64, y, 11);
        for (int m = 0; m < 3; m++)
            for (int n = 0; n < 11; n++) {
                float v = y[m * 11 + n];
                if (n >= 2 && n < 6)
                    CU_ASSERT(fabs(v - p.ref[m * 8 + n]) <= 1e-5 * p.mag[m * 8 + n])
                else
                    CU_ASSERT(v == 7.0f);
            }
    }
    CU_ASSERT(gp_quant_force_isa(GP_QUANT_ISA_AUTO) == 0);
    problem_free(&p);
}

/*
 * gp_quant_matmul_ws (the amx path): against the double reference within its bound, and the same
 * bits for every thread count and in the two-phase form (gp_quant_matmul_ws_prep / _cols). Each
 * product is computed from bf16 halves: hi_x hi_w + lo_x hi_w + hi_x lo_w, where v = hi + lo + r
 * with |r| <= 2^-17 |v| and |lo| <= 2^-8 |v|, so each term is off x w by at most ~(2^-17 + 2^-17 +
 * 2^-16) |x w| = 2^-15 |x w|; TDPBF16PS then adds the exact pair products into one f32 sum per
 * output, 3 K / 2 additions: gamma(3 K / 2) sum |x w|.
 */
static void test_amx(void)
{
    if (gp_quant_force_isa(GP_QUANT_ISA_AMX) != 0) {
        printf("(amx not available here: skipped) ");
        return;
    }
    static const int Ks[] = {256, 320, 1536, 2304}; /* 2304: two passes over K (2048 + 256) */
    static const int Ms[] = {6, 16, 17, 150};
    static const int nths[] = {2, 3, 7};
    double worst = 0;
    int checked = 0;
    for (int t = 0; t < NTYPES; t++)
        for (int ki = 0; ki < 4; ki++) {
            int K = Ks[ki], N = 37;
            if (K % gp_dtype_block(types[t]))
                continue;
            problem p;
            problem_make(&p, types[t], N, K, 150);
            size_t wsz = (size_t)gp_quant_matmul_ws_bytes(150, K);
            void *ws = aligned_alloc(64, wsz);
            float *y = malloc((size_t)150 * p.ldy * sizeof *y);
            float *y2 = malloc((size_t)150 * p.ldy * sizeof *y2);
            for (int mi = 0; mi < 4; mi++) {
                int M = Ms[mi], bad = 0, split = 0, pad = 0;
                for (int i = 0; i < 150 * p.ldy; i++)
                    y[i] = -1234.5f;
                CU_ASSERT(gp_quant_matmul_ws(p.t, p.w, N, p.x, p.ldx, M, K, y, p.ldy, ws, wsz, 0,
                                             1) == 1);
                double g = 1.5 * K * 0x1p-24 / (1 - 1.5 * K * 0x1p-24);
                for (int m = 0; m < M; m++) {
                    for (int n = 0; n < N; n++) {
                        double e = fabs(y[m * p.ldy + n] - p.ref[m * N + n]), a = p.mag[m * N + n];
                        bad += !(e <= (0x1p-15 + g) * a + 1e-30);
                        worst = e / a > worst ? e / a : worst;
                        checked++;
                    }
                    for (int n = N; n < p.ldy; n++)
                        pad += y[m * p.ldy + n] != -1234.5f;
                }
                for (int i = M * p.ldy; i < 150 * p.ldy; i++)
                    pad += y[i] != -1234.5f;
                for (int h = 0; h < 3; h++) {
                    memset(y2, 0, (size_t)150 * p.ldy * sizeof *y2);
                    for (int ith = nths[h] - 1; ith >= 0; ith--)
                        CU_ASSERT(gp_quant_matmul_ws(p.t, p.w, N, p.x, p.ldx, M, K, y2, p.ldy, ws,
                                                     wsz, ith, nths[h]) == 1);
                    for (int m = 0; m < M; m++)
                        split += memcmp(y + m * p.ldy, y2 + m * p.ldy, (size_t)N * sizeof *y) != 0;
                }
                /* the two-phase form: halves by 2 threads, then columns in uneven parts */
                {
                    static const int cuts[] = {0, 5, 32, 33, 37};
                    memset(y2, 0, (size_t)150 * p.ldy * sizeof *y2);
                    CU_ASSERT(gp_quant_matmul_ws_taken(p.t, M, K, ws, wsz));
                    gp_quant_matmul_ws_prep(p.x, p.ldx, M, K, ws, 1, 2);
                    gp_quant_matmul_ws_prep(p.x, p.ldx, M, K, ws, 0, 2);
                    for (int c = 3; c >= 0; c--)
                        gp_quant_matmul_ws_cols(p.t, p.w, cuts[c], cuts[c + 1], M, K, y2, p.ldy, ws);
                    for (int m = 0; m < M; m++)
                        split += memcmp(y + m * p.ldy, y2 + m * p.ldy, (size_t)N * sizeof *y) != 0;
                }
                if (bad || split || pad)
                    printf("\n%s amx M %d K %d: %d off the reference, %d rows differ by threads, "
                           "%d pad\n", tname[t], M, K, bad, split, pad);
                CU_ASSERT(bad == 0 && split == 0 && pad == 0);
            }
            /* not taken: M <= GP_QUANT_WS_MIN_M, a workspace too small, another path */
            CU_ASSERT(gp_quant_matmul_ws(p.t, p.w, N, p.x, p.ldx, 5, K, y, p.ldy, ws, wsz, 0, 1) ==
                      0);
            CU_ASSERT(!gp_quant_matmul_ws_taken(p.t, 5, K, ws, wsz));
            CU_ASSERT(!gp_quant_matmul_ws_taken(p.t, 6, K, NULL, wsz));
            CU_ASSERT(gp_quant_matmul_ws(p.t, p.w, N, p.x, p.ldx, 6, K, y, p.ldy, ws,
                                         (size_t)gp_quant_matmul_ws_bytes(6, K) - 1, 0, 1) == 0);
            CU_ASSERT(gp_quant_force_isa(GP_QUANT_ISA_VNNI) == 0);
            CU_ASSERT(gp_quant_matmul_ws(p.t, p.w, N, p.x, p.ldx, 6, K, y, p.ldy, ws, wsz, 0, 1) ==
                      (gp_dtype_block(p.t) == 32)); /* vnni: k-quants from GP_QUANT_VNNI_MIN_M */
            CU_ASSERT(gp_quant_force_isa(GP_QUANT_ISA_AMX) == 0);
            free(y);
            free(y2);
            free(ws);
            problem_free(&p);
        }
    printf("(largest |y - ref| / sum |x w|: %.2g) ", worst);
    CU_ASSERT(checked > 0);
    CU_ASSERT(gp_quant_force_isa(GP_QUANT_ISA_AUTO) == 0);
}

/* The integer paths (cpu/quant_int_x86.h, cpu/quant_int_neon.h), each the CPU has, forced
 * through gp_quant_force_isa; avx512 (no VNNI) runs the avx2 variant. */
static const int int_isas[] = {GP_QUANT_ISA_VNNI, GP_QUANT_ISA_AVXVNNI, GP_QUANT_ISA_AVX2,
                               GP_QUANT_ISA_AVX512, GP_QUANT_ISA_I8MM, GP_QUANT_ISA_DOTPROD,
                               GP_QUANT_ISA_NEON};
#define NINT 7

/* cvtps2dq (and the aarch64 variants' spelling of it): nearest, ties to even; INT_MIN where out
 * of range or NaN */
static int32_t cvt_x86(float v)
{
    return fabsf(v) < 2147483648.0f ? (int32_t)nearbyintf(v) : INT32_MIN;
}

/* x's block b of row m as the integer paths quantize it: the two parts, d and the sum of x in
 * quant_f32_internal.h's tree */
static void int_emulate_x(const float *x, int8_t *hi, int8_t *lo, float *d, float *sum)
{
    float amax = 0.0f;
    for (int i = 0; i < 32; i++)
        amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
    float dd = amax / 127.0f, id = dd != 0.0f ? 1.0f / dd : 0.0f, s2 = 254.0f * id;
    for (int i = 0; i < 32; i++) {
        int32_t h = cvt_x86(x[i] * id);
        h = h < -127 ? -127 : h;
        int32_t l = cvt_x86(fmaf(-(float)h, dd, x[i]) * s2);
        hi[i] = (int8_t)h;
        lo[i] = (int8_t)(l < -127 ? -127 : l);
    }
    float s16[16], s8[8], s4[4];
    for (int i = 0; i < 16; i++)
        s16[i] = x[i] + x[16 + i];
    for (int i = 0; i < 8; i++)
        s8[i] = s16[i] + s16[8 + i];
    for (int i = 0; i < 4; i++)
        s4[i] = s8[i] + s8[4 + i];
    *d = dd;
    *sum = (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

static float f16_at(const uint8_t *p)
{
    return gp_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

/* Block g (of 32 elements) of a weight row, from cpu/quant.h's layouts: q - zero (q6_k: q - 32),
 * the scale d, the offset m (0 where the format has none), q6_k's two int8 scales. */
static void int_emulate_w(gp_dtype t, const uint8_t *row, int g, int *q, float *d, float *m,
                          int *sc)
{
    size_t bb = gp_dtype_block_bytes(t);
    *m = 0.0f;
    if (gp_dtype_block(t) == 32) {
        const uint8_t *b = row + (size_t)g * bb;
        int zero = t == GP_Q4_0 ? 8 : t == GP_Q5_0 ? 16 : 0, qs = 0;
        uint32_t qh = 0;
        *d = f16_at(b);
        if (t == GP_Q4_1 || t == GP_Q5_1)
            *m = f16_at(b + 2);
        qs = t == GP_Q4_0 ? 2 : t == GP_Q4_1 ? 4 : t == GP_Q5_0 ? 6 : 8;
        if (t == GP_Q5_0 || t == GP_Q5_1)
            memcpy(&qh, b + qs - 4, 4);
        for (int i = 0; i < 32; i++) {
            if (t == GP_Q8_0)
                q[i] = (int8_t)b[2 + i];
            else
                q[i] = (i < 16 ? b[qs + i] & 15 : b[qs + i - 16] >> 4) + (int)(qh >> i & 1) * 16 -
                       zero;
        }
        return;
    }
    const uint8_t *b = row + (size_t)(g / 8) * bb;
    int j = g % 8;
    if (t == GP_Q6_K) {
        *d = f16_at(b + 208);
        sc[0] = (int8_t)b[192 + 2 * j];
        sc[1] = (int8_t)b[193 + 2 * j];
        for (int l = 0; l < 32; l++) {
            int i = 32 * j + l, h = i / 128, k = i % 128 / 32;
            q[l] = ((b[64 * h + 32 * (k & 1) + l] >> 4 * (k >> 1) & 15) |
                    (b[128 + 32 * h + l] >> 2 * k & 3) << 4) - 32;
        }
        return;
    }
    uint8_t s[8], mn[8];
    gp_quant_k_scales(b + 4, s, mn);
    *d = f16_at(b) * (float)s[j];
    *m = -f16_at(b + 2) * (float)mn[j];
    const uint8_t *qs = b + (t == GP_Q5_K ? 48 : 16) + 32 * (j >> 1);
    for (int l = 0; l < 32; l++)
        q[l] = (qs[l] >> 4 * (j & 1) & 15) | (t == GP_Q5_K ? (b[16 + l] >> j & 1) << 4 : 0);
}

/*
 * y[m, n] of the integer paths, computed from their documented arithmetic (cpu/quant_int_x86.h,
 * cpu/quant_int_neon.h) in scalar C: per block of 32, the exact integer dots of x's parts with
 * q - zero (q6_k: each group of 16's dot times its scale), f = lo / 254 + hi fused, y += f (d_w
 * d_x) fused, y += m_w (sum of x) fused for the formats with an offset. Every variant, on x86-64
 * and on aarch64, must give these bits.
 */
static float int_emulate(const problem *p, int m, int n)
{
    size_t rb = gp_dtype_row_bytes(p->t, p->K);
    int has_m = p->t == GP_Q4_1 || p->t == GP_Q5_1 || p->t == GP_Q4_K || p->t == GP_Q5_K;
    float acc = 0.0f;
    for (int g = 0; g < p->K / 32; g++) {
        int8_t hi[32], lo[32];
        int q[32], sc[2] = {1, 1};
        float dx, sx, dw, mw;
        int_emulate_x(p->x + (size_t)m * p->ldx + 32 * g, hi, lo, &dx, &sx);
        int_emulate_w(p->t, p->w + (size_t)n * rb, g, q, &dw, &mw, sc);
        int32_t eh = 0, el = 0;
        for (int h = 0; h < 2; h++) {
            int32_t gh = 0, gl = 0;
            for (int i = 16 * h; i < 16 * h + 16; i++) {
                gh += q[i] * hi[i];
                gl += q[i] * lo[i];
            }
            eh += gh * (p->t == GP_Q6_K ? sc[h] : 1);
            el += gl * (p->t == GP_Q6_K ? sc[h] : 1);
        }
        float f = fmaf((float)el, 1.0f / 254.0f, (float)eh);
        acc = fmaf(f, dw * dx, acc);
        if (has_m)
            acc = fmaf(mw, sx, acc);
    }
    return acc;
}

/* The bound of x's two 8-bit parts on y[m, n]: sum over blocks of (d / 508) sum |w| with d = max |x|
 * / 127 of the block, plus the f32 sum's. */
static int int_within(const problem *p, int m, int n, float y, double *worst)
{
    int K = p->K;
    double g = 2.0 * (K / 32 + 8) * 0x1p-24, bound = 0, mag = 0;
    for (int b = 0; b < K / 32; b++) {
        double amax = 0, sw = 0, wmax = 0, sx = 0;
        for (int i = 0; i < 32; i++) {
            double xv = fabs(p->x[(size_t)m * p->ldx + b * 32 + i]);
            double wv = fabs(p->wf[(size_t)n * K + b * 32 + i]);
            amax = xv > amax ? xv : amax;
            wmax = wv > wmax ? wv : wmax;
            sw += wv;
            sx += xv;
            mag += xv * wv;
        }
        bound += amax / 127 / 508 * sw * (1 + 1e-3);
        /* the f32 roundings fall on d q = w - m, not w: |x| (|w| + |m|), with |m| at most twice a
         * group's largest |w| */
        mag += 2 * wmax * sx;
    }
    double e = fabs(y - p->ref[m * p->N + n]);
    if (e / (bound + 1e-30) > *worst)
        *worst = e / (bound + 1e-30);
    return e <= bound + g * mag + 1e-30;
}

/*
 * Every integer path, every format, M > GP_QUANT_WS_MIN_M: within the bound of x's two 8-bit parts
 * (int_within); bit for bit the scalar emulation of the documented arithmetic (int_emulate: so
 * the same bits on x86-64 and aarch64); the same bits for every split of rows (one phase: odd
 * boundaries split SMMLA's pairs of rows) and of columns (two phases); the same bits on every path
 * (the first one available gives the bits the others must match); the k-quants not taken below
 * GP_QUANT_VNNI_MIN_M rows.
 */
static void test_vnni(void)
{
    static const int Ks[] = {64, 544, 1056, 1280}; /* 1056: tiles of 512, 512, 32; 1280: k-quants */
    static const int Ms[] = {6, GP_QUANT_VNNI_MIN_M, 70}; /* 6: not taken by the k-quants */
    double worst = 0;
    int checked = 0, paths = 0;
    for (int i = 0; i < NINT; i++)
        if (gp_quant_isa_supported(int_isas[i])) {
            printf("%s ", gp_quant_isa_name(int_isas[i]));
            paths++;
        }
    if (!paths) {
        printf("(no integer path here: skipped) ");
        return;
    }
    for (int t = 0; t < NTYPES; t++) {
        CU_ASSERT(gp_qint_supports(types[t]));
        for (int ki = 0; ki < 4; ki++) {
            int K = Ks[ki], N = 45; /* a full tile of 32 columns and 13 more */
            if (K % gp_dtype_block(types[t]))
                continue;
            problem p;
            problem_make(&p, types[t], N, K, 70);
            size_t wsz = (size_t)gp_quant_matmul_ws_bytes(70, K);
            void *ws = malloc(wsz);
            float *y = malloc((size_t)70 * p.ldy * sizeof *y), *y2 = malloc((size_t)70 * p.ldy * sizeof *y2);
            float *y0[3] = {NULL, NULL, NULL}; /* the first path's y for each M */
            float *emu = malloc((size_t)70 * N * sizeof *emu);
            for (int m = 0; m < 70; m++)
                for (int n = 0; n < N; n++)
                    emu[m * N + n] = int_emulate(&p, m, n);
            for (int pi = 0; pi < NINT; pi++) {
                if (gp_quant_force_isa(int_isas[pi]) != 0)
                    continue;
                const char *pname = gp_quant_isa_name(int_isas[pi]);
                for (int mi = 0; mi < 3; mi++) {
                    int M = Ms[mi], bad = 0, split = 0, pad = 0, other = 0, off = 0;
                    CU_ASSERT(gp_qint_ws_bytes(M, K) <= gp_quant_matmul_ws_bytes(M, K));
                    if (gp_dtype_block(p.t) != 32 && M < GP_QUANT_VNNI_MIN_M) {
                        CU_ASSERT(!gp_quant_matmul_ws_taken(p.t, M, K, ws, wsz));
                        continue;
                    }
                    for (int i = 0; i < 70 * p.ldy; i++)
                        y[i] = y2[i] = -1234.5f;
                    CU_ASSERT(gp_quant_matmul_ws(p.t, p.w, N, p.x, p.ldx, M, K, y, p.ldy, ws, wsz,
                                                 0, 1) == 1);
                    for (int m = 0; m < M; m++) {
                        for (int n = 0; n < N; n++) {
                            bad += !int_within(&p, m, n, y[m * p.ldy + n], &worst);
                            off += memcmp(&y[m * p.ldy + n], &emu[m * N + n], sizeof *y) != 0;
                            checked++;
                        }
                        for (int n = N; n < p.ldy; n++)
                            pad += y[m * p.ldy + n] != -1234.5f;
                    }
                    for (int i = M * p.ldy; i < 70 * p.ldy; i++)
                        pad += y[i] != -1234.5f;
                    if (!y0[mi]) {
                        y0[mi] = malloc((size_t)M * p.ldy * sizeof *y);
                        memcpy(y0[mi], y, (size_t)M * p.ldy * sizeof *y);
                    }
                    for (int m = 0; m < M; m++)
                        other += memcmp(y0[mi] + m * p.ldy, y + m * p.ldy, (size_t)N * sizeof *y) != 0;
                    /* rows split over 3 threads, one phase */
                    for (int ith = 2; ith >= 0; ith--)
                        CU_ASSERT(gp_quant_matmul_ws(p.t, p.w, N, p.x, p.ldx, M, K, y2, p.ldy, ws,
                                                     wsz, ith, 3) == 1);
                    for (int m = 0; m < M; m++)
                        split += memcmp(y + m * p.ldy, y2 + m * p.ldy, (size_t)N * sizeof *y) != 0;
                    /* two phases: rows by 2 threads, then columns in parts (8 and 32 column tiles) */
                    static const int cuts[] = {0, 8, 32, 45};
                    memset(y2, 0, (size_t)70 * p.ldy * sizeof *y2);
                    CU_ASSERT(gp_quant_matmul_ws_taken(p.t, M, K, ws, wsz));
                    gp_quant_matmul_ws_prep(p.x, p.ldx, M, K, ws, 1, 2);
                    gp_quant_matmul_ws_prep(p.x, p.ldx, M, K, ws, 0, 2);
                    for (int c = 2; c >= 0; c--)
                        gp_quant_matmul_ws_cols(p.t, p.w, cuts[c], cuts[c + 1], M, K, y2, p.ldy,
                                                ws);
                    for (int m = 0; m < M; m++)
                        split += memcmp(y + m * p.ldy, y2 + m * p.ldy, (size_t)N * sizeof *y) != 0;
                    if (bad || split || pad || other || off)
                        printf("\n%s %s M %d K %d: %d past the bound, %d rows differ by splits, "
                               "%d pad, %d rows differ from the first path, %d outputs from the "
                               "emulation\n",
                               tname[t], pname, M, K, bad, split, pad, other, off);
                    CU_ASSERT(bad == 0 && split == 0 && pad == 0 && other == 0 && off == 0);
                }
                CU_ASSERT(!gp_quant_matmul_ws_taken(p.t, GP_QUANT_WS_MIN_M, K, ws, wsz));
            }
            for (int mi = 0; mi < 3; mi++)
                free(y0[mi]);
            free(emu);
            free(y);
            free(y2);
            free(ws);
            problem_free(&p);
        }
    }
    printf("(largest |y - ref| / bound: %.2g) ", worst);
    CU_ASSERT(checked > 0);
    CU_ASSERT(gp_quant_force_isa(GP_QUANT_ISA_AUTO) == 0);
}

/*
 * The integer paths at the edges of their integer ranges, where vpmaddubsw's int16 sums would
 * saturate first: weight bytes all 0xff (q 15, 31, 63, q8_0 -1), all 0x80 (q8_0 -128, q6_k scales
 * -128) or drawn from {0x00, 0x0f, 0x7f, 0x80, 0xf0, 0xff}, block by block; x = +-1 per block all
 * alike or mixed (x's parts +-127 and 0), and blocks of +-1e-39 (d subnormal, 1 / d infinite: the
 * conversions out of range). Every path within the bound, bit for bit the first's and the
 * emulation's.
 */
static void test_int_extremes(void)
{
    enum { N = 37, K = 512, M = 9 };
    static const uint8_t pick[] = {0x00, 0x0f, 0x7f, 0x80, 0xf0, 0xff};
    double worst = 0;
    int checked = 0, paths = 0;
    for (int i = 0; i < NINT; i++)
        paths += gp_quant_isa_supported(int_isas[i]);
    if (!paths) {
        printf("(no integer path here: skipped) ");
        return;
    }
    for (int t = 0; t < NTYPES; t++) {
        problem p;
        problem_make(&p, types[t], N, K, M);
        size_t rb = gp_dtype_row_bytes(p.t, K), bb = gp_dtype_block_bytes(p.t);
        int qk = (int)gp_dtype_block(p.t);
        /* where each block keeps its f16 d (and m or dmin), set to finite values below */
        int hd = p.t == GP_Q6_K ? 208 : 0, nh = p.t == GP_Q4_1 || p.t == GP_Q5_1 ||
                                                         p.t == GP_Q4_K || p.t == GP_Q5_K ? 2 : 1;
        for (int n = 0; n < N; n++)
            for (int b = 0; b < K / qk; b++) {
                uint8_t *blk = p.w + (size_t)n * rb + (size_t)b * bb;
                uint64_t r = gp_test_rand(&rng) % 3;
                for (size_t i = 0; i < bb; i++)
                    blk[i] = r == 0 ? 0xff : r == 1 ? 0x80 : pick[gp_test_rand(&rng) % 6];
                for (int h = 0; h < nh; h++) {
                    uint16_t f = h ? 0xb800 : 0x3c00; /* 1, -0.5 */
                    memcpy(blk + hd + 2 * h, &f, 2);
                }
            }
        for (int n = 0; n < N; n++)
            gp_quant_dequantize_row(p.t, p.w + (size_t)n * rb, p.wf + (size_t)n * K, K);
        for (int m = 0; m < M; m++)
            for (int b = 0; b < K / 32; b++) {
                uint64_t r = gp_test_rand(&rng) % 4;
                for (int i = 0; i < 32; i++)
                    p.x[(size_t)m * p.ldx + b * 32 + i] =
                        r == 0 ? 1.0f : r == 1 ? -1.0f : (gp_test_rand(&rng) % 2 ? 1.0f : -1.0f) *
                                                             (r == 3 ? 1e-39f : 1.0f);
            }
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                double s = 0, a = 0;
                for (int k = 0; k < K; k++) {
                    double v = (double)p.x[(size_t)m * p.ldx + k] * p.wf[(size_t)n * K + k];
                    s += v;
                    a += fabs(v);
                }
                p.ref[m * N + n] = s;
                p.mag[m * N + n] = a;
            }
        size_t wsz = (size_t)gp_quant_matmul_ws_bytes(M, K);
        void *ws = malloc(wsz);
        float *y = malloc((size_t)M * p.ldy * sizeof *y), *y0 = NULL;
        for (int pi = 0; pi < NINT; pi++) {
            if (gp_quant_force_isa(int_isas[pi]) != 0)
                continue;
            int bad = 0, other = 0, off = 0;
            CU_ASSERT_FATAL(gp_quant_matmul_ws(p.t, p.w, N, p.x, p.ldx, M, K, y, p.ldy, ws, wsz,
                                               0, 1) == 1);
            for (int m = 0; m < M; m++)
                for (int n = 0; n < N; n++) {
                    float e = int_emulate(&p, m, n);
                    bad += !int_within(&p, m, n, y[m * p.ldy + n], &worst);
                    off += memcmp(&y[m * p.ldy + n], &e, sizeof e) != 0;
                    checked++;
                }
            if (!y0) {
                y0 = malloc((size_t)M * p.ldy * sizeof *y0);
                memcpy(y0, y, (size_t)M * p.ldy * sizeof *y);
            }
            for (int m = 0; m < M; m++)
                other += memcmp(y0 + m * p.ldy, y + m * p.ldy, (size_t)N * sizeof *y) != 0;
            if (bad || other || off)
                printf("\n%s %s extremes: %d past the bound, %d rows differ from the first path, "
                       "%d outputs from the emulation\n",
                       tname[t], gp_quant_isa_name(int_isas[pi]), bad, other, off);
            CU_ASSERT(bad == 0 && other == 0 && off == 0);
        }
        free(y0);
        free(y);
        free(ws);
        problem_free(&p);
    }
    printf("(largest |y - ref| / bound: %.2g) ", worst);
    CU_ASSERT(checked > 0);
    CU_ASSERT(gp_quant_force_isa(GP_QUANT_ISA_AUTO) == 0);
}

/* The CPU kernels' matmul node on quantized weights: gp_cpu_compute (rows split, one phase) and
 * the backend's phased form (gp_cpu_compute_phase, two phases) give the same bits for 1 to 3 threads;
 * without the workspace neither takes the amx path. */
static void test_amx_node(void)
{
    if (gp_quant_force_isa(GP_QUANT_ISA_AMX) != 0) {
        printf("(amx not available here: skipped) ");
        return;
    }
    enum { M = 37, N = 45, K = 512 };
    problem p;
    problem_make(&p, GP_Q4_K, N, K, M);
    float *y[2];
    gp_ktensor in[2], out;
    memset(in, 0, sizeof in);
    memset(&out, 0, sizeof out);
    in[0] = (gp_ktensor){p.x, GP_F32, 2, {M, K}, {p.ldx * 4, 4}};
    in[1] = (gp_ktensor){p.w, GP_Q4_K, 2, {N, K}, {(int64_t)gp_dtype_row_bytes(GP_Q4_K, K), 0}};
    gp_attrs at;
    memset(&at, 0, sizeof at);
    at.i[GP_MATMUL_TB] = 1; /* tb */
    size_t wsz = gp_cpu_workspace_bytes(GP_OP_MATMUL, NULL, &out, in, 2, 1);
    CU_ASSERT_EQUAL(wsz, (size_t)gp_quant_matmul_ws_bytes(M, K));
    void *ws = malloc(wsz);
    out = (gp_ktensor){NULL, GP_F32, 2, {M, N}, {p.ldy * 4, 4}};
    CU_ASSERT_EQUAL(gp_cpu_phases(GP_OP_MATMUL, &out, in, 2, NULL, 0), 1);
    CU_ASSERT_EQUAL(gp_cpu_phases(GP_OP_MATMUL, &out, in, 2, ws, wsz), 2);
    int diff = 0, bad = 0;
    for (int nth = 1; nth <= 3; nth++) {
        for (int f = 0; f < 2; f++) {
            y[f] = calloc((size_t)M * p.ldy, sizeof *y[f]);
            out.data = y[f];
            if (f == 0) {
                for (int ith = nth - 1; ith >= 0; ith--)
                    gp_cpu_compute(GP_OP_MATMUL, &at, &out, in, 2, ws, wsz, ith, nth);
            } else {
                for (int ph = 0; ph < 2; ph++)
                    for (int ith = nth - 1; ith >= 0; ith--)
                        gp_cpu_compute_phase(GP_OP_MATMUL, &at, &out, in, 2, ws, wsz, ith, nth,
                                             ph);
            }
        }
        for (int m = 0; m < M; m++) {
            diff += memcmp(y[0] + m * p.ldy, y[1] + m * p.ldy, N * sizeof(float)) != 0;
            for (int n = 0; n < N; n++)
                bad += !(fabs(y[1][m * p.ldy + n] - p.ref[m * N + n]) <= 1e-4 * p.mag[m * N + n]);
        }
        free(y[0]);
        free(y[1]);
    }
    CU_ASSERT(diff == 0 && bad == 0);
    free(ws);
    problem_free(&p);
    CU_ASSERT(gp_quant_force_isa(GP_QUANT_ISA_AUTO) == 0);
}

/*
 * One row (M = 1, cpu/quant_int_row.h): on the 256-bit x86 paths (avx2, avxvnni; avx512 runs
 * avx2's) the formats of 32-element blocks take it, within x's two-part bound; every split of the
 * columns gives the same bits, the outputs past N stay untouched; a workspace too small, the
 * k-quants and the other paths are not taken.
 */
static void test_int_row(void)
{
    static const int Ks[] = {32, 544, 768, 1056, 1280};
    static const int rows_isas[] = {GP_QUANT_ISA_AVXVNNI, GP_QUANT_ISA_AVX2, GP_QUANT_ISA_AVX512};
    double worst = 0;
    for (int pi = 0; pi < NINT; pi++) {
        if (gp_quant_force_isa(int_isas[pi]) != 0)
            continue;
        int has_row = 0;
        for (int i = 0; i < 3; i++)
            has_row |= int_isas[pi] == rows_isas[i];
        printf("%s%s ", gp_quant_isa_name(int_isas[pi]), has_row ? "" : " (none)");
        for (int t = 0; t < NTYPES; t++)
            for (int ki = 0; ki < 5; ki++) {
                int K = Ks[ki], N = 45, bad = 0, split = 0, pad = 0;
                if (K % gp_dtype_block(types[t]))
                    continue;
                problem p;
                problem_make(&p, types[t], N, K, 1);
                size_t wsz = (size_t)gp_qint_ws_bytes(1, K);
                void *ws = malloc(wsz);
                int want = has_row; /* every block format */
                CU_ASSERT(gp_quant_matmul_ws_taken(p.t, 1, K, ws, wsz) == want);
                CU_ASSERT(!gp_quant_matmul_ws_taken(p.t, 1, K, ws, wsz - 1));
                CU_ASSERT(!gp_quant_matmul_ws_taken(p.t, 1, K, NULL, wsz));
                if (want) {
                    float *y = malloc((size_t)p.ldy * sizeof *y), *y2 = malloc((size_t)p.ldy * sizeof *y2);
                    for (int i = 0; i < p.ldy; i++)
                        y[i] = y2[i] = -1234.5f;
                    CU_ASSERT(gp_quant_matmul_ws(p.t, p.w, N, p.x, p.ldx, 1, K, y, p.ldy, ws, wsz,
                                                 0, 1) == 1);
                    for (int n = 0; n < N; n++)
                        bad += !int_within(&p, 0, n, y[n], &worst);
                    for (int n = N; n < p.ldy; n++)
                        pad += y[n] != -1234.5f;
                    static const int cuts[] = {0, 3, 4, 32, 41, 45}; /* tiles of 4 and the rest */
                    gp_quant_matmul_ws_prep(p.x, p.ldx, 1, K, ws, 0, 1);
                    for (int c = 4; c >= 0; c--)
                        gp_quant_matmul_ws_cols(p.t, p.w, cuts[c], cuts[c + 1], 1, K, y2, p.ldy, ws);
                    split = memcmp(y, y2, (size_t)p.ldy * sizeof *y) != 0;
                    if (bad || split || pad)
                        printf("\n%s %s M 1 K %d: %d past the bound, splits differ %d, %d pad\n",
                               tname[t], gp_quant_isa_name(int_isas[pi]), K, bad, split, pad);
                    CU_ASSERT(bad == 0 && split == 0 && pad == 0);
                    free(y);
                    free(y2);
                }
                free(ws);
                problem_free(&p);
            }
    }
    printf("(largest |y - ref| / bound: %.2g) ", worst);
    CU_ASSERT(gp_quant_force_isa(GP_QUANT_ISA_AUTO) == 0);
}

void gp_suite_quant_f32(void)
{
    static const gp_test_case tests[] = {
        {"every type x path x M x K vs double, order, splits", test_reference},
        {"batches = single rows; the SIMD paths agree", test_batches_and_paths},
        {"column ranges", test_ranges},
        {"amx prompts vs double, thread counts", test_amx},
        {"amx matmul node: one phase = two phases", test_amx_node},
        {"integer paths: within x's quantization bound, = emulation, splits, paths agree",
         test_vnni},
        {"integer paths at the int16 edges (maddubs) and past 1 / d's range", test_int_extremes},
        {"integer paths, one row: within the bound, column splits, not taken", test_int_row},
    };
    gp_test_add_suite("quant_f32", NULL, NULL, tests, GP_TEST_COUNT(tests));
}
