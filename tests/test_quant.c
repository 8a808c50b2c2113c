/* Tests of runtime/quant.h: dequantization bit for bit against the python gguf package's
 * (tests/quant/TYPE.bin, scripts/quant/make_fixtures.py), the quantizers (gguf's bytes where the
 * rule is ggml's, error bounds, exact round trips), the 8-bit activation rows and the products on
 * every ISA path the machine has against a double-precision reference and the portable path. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <CUnit/CUnit.h>

#include "runtime/f16.h"
#include "runtime/quant.h"
#include "tests/testutil.h"

static const gp_dtype types[] = {GP_Q4_0, GP_Q4_1, GP_Q5_0, GP_Q5_1,
                                 GP_Q8_0, GP_Q4_K, GP_Q5_K, GP_Q6_K};
#define NTYPES 8
static const char *const fixture[NTYPES] = {"q4_0", "q4_1", "q5_0", "q5_1",
                                            "q8_0", "q4_k", "q5_k", "q6_k"};
static const unsigned ggml_id[NTYPES] = {2, 3, 6, 7, 8, 12, 13, 14}; /* GGMLQuantizationType */

static uint64_t rng = 0x243f6a8885a308d3ull;

static double urand(void) /* [0, 1) */
{
    return (double)(gp_test_rand(&rng) >> 11) * 0x1p-53;
}

static float nrand(void) /* standard normal (Box-Muller) */
{
    double u = urand() + 0x1p-60, v = urand();
    return (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
}

static uint32_t rd32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ---- fixtures ---- */

typedef struct {
    unsigned char *file;
    size_t len;
    uint32_t qk, bb, nb, nq;
    const unsigned char *blocks; /* [nb * bb] */
    const unsigned char *values; /* [nb * qk] f32 */
    const unsigned char *qin;    /* [nq * qk] f32 */
    const unsigned char *qout;   /* [nq * bb] */
} fix;

static int fix_load(int i, fix *f)
{
    char rel[64];
    snprintf(rel, sizeof rel, "tests/quant/%s.bin", fixture[i]);
    memset(f, 0, sizeof *f);
    f->file = (unsigned char *)gp_test_read_file(gp_test_path(rel), &f->len);
    if (!f->file || f->len < 28 || memcmp(f->file, "GPQF", 4) != 0 || rd32(f->file + 4) != 1 ||
        rd32(f->file + 8) != ggml_id[i])
        return -1;
    f->qk = rd32(f->file + 12);
    f->bb = rd32(f->file + 16);
    f->nb = rd32(f->file + 20);
    f->nq = rd32(f->file + 24);
    if (f->qk != (uint32_t)gp_dtype_block(types[i]) || f->bb != gp_dtype_block_bytes(types[i]) ||
        f->len != 28 + (size_t)(f->nb + f->nq) * (f->bb + 4 * f->qk))
        return -1;
    f->blocks = f->file + 28;
    f->values = f->blocks + (size_t)f->nb * f->bb;
    f->qin = f->values + (size_t)f->nb * f->qk * 4;
    f->qout = f->qin + (size_t)f->nq * f->qk * 4;
    return 0;
}

/* Every type's fixture blocks dequantize to gguf's floats, bit for bit. */
static void test_dequantize_gguf(void)
{
    for (int i = 0; i < NTYPES; i++) {
        fix f;
        int ok = fix_load(i, &f) == 0;
        CU_ASSERT_FATAL(ok);
        size_t n = (size_t)f.nb * f.qk;
        float *y = malloc(n * sizeof *y), *ref = malloc(n * sizeof *ref);
        memcpy(ref, f.values, n * sizeof *ref); /* the host is little-endian, as the file */
        gp_quant_dequantize_row(types[i], f.blocks, y, (int64_t)n);
        int same = memcmp(y, ref, n * sizeof *y) == 0;
        if (!same)
            printf("\n%s: dequantization differs from gguf\n", fixture[i]);
        CU_ASSERT(same);
        /* block by block too (n = one block): the same bits */
        gp_quant_dequantize_row(types[i], f.blocks + (size_t)(f.nb - 1) * f.bb, y, f.qk);
        CU_ASSERT(memcmp(y, ref + (size_t)(f.nb - 1) * f.qk, f.qk * sizeof *y) == 0);
        free(y);
        free(ref);
        free(f.file);
    }
}

/* q4_0, q4_1, q5_0, q5_1, q8_0 (the types gguf.quants quantizes, with ggml's rules): the bytes. */
static void test_quantize_gguf(void)
{
    int checked = 0;
    for (int i = 0; i < NTYPES; i++) {
        fix f;
        CU_ASSERT_FATAL(fix_load(i, &f) == 0);
        if (f.nq) {
            float *x = malloc((size_t)f.nq * f.qk * sizeof *x);
            unsigned char *q = malloc((size_t)f.nq * f.bb);
            memcpy(x, f.qin, (size_t)f.nq * f.qk * sizeof *x);
            gp_quant_quantize_row(types[i], x, q, (int64_t)f.nq * f.qk);
            int same = memcmp(q, f.qout, (size_t)f.nq * f.bb) == 0;
            if (!same)
                printf("\n%s: quantized bytes differ from gguf\n", fixture[i]);
            CU_ASSERT(same);
            checked++;
            free(x);
            free(q);
        }
        free(f.file);
    }
    CU_ASSERT(checked == 5);
}

/* ---- quantization error ---- */

/* Round trips of random normal data: the rms error over rms(x) and the largest error over the
 * 32 elements' absmax, each within a bound per type. The max bounds are the rules' worst cases plus
 * a little f16 rounding: q4_0 / q5_0 put the largest magnitude at -8 d (-16 d), so its opposite clips
 * at 7 d (15 d): 1/8 (1/16); q4_1 / q5_1: half a step of range / 15 (31) with range <= 2 absmax;
 * q8_0: 1/254; the k-quants also round their 6- or 8-bit sub-block scales. */
static void test_quantize_error(void)
{
    /* rms / rms(x), max / absmax(block) */
    static const double rms_bound[NTYPES] = {0.11, 0.09, 0.055, 0.045, 0.0065, 0.09, 0.045, 0.035};
    static const double max_bound[NTYPES] = {0.13, 0.07, 0.066, 0.034, 0.0045, 0.09, 0.045, 0.03};
    enum { N = 8192 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    unsigned char *q = malloc(N * 2);
    for (int i = 0; i < N; i++)
        x[i] = nrand() * (i < N / 2 ? 1.0f : 0.01f) + (i >= 3 * N / 4 ? 0.02f : 0); /* scale, offset */
    for (int t = 0; t < NTYPES; t++) {
        gp_quant_quantize_row(types[t], x, q, N);
        gp_quant_dequantize_row(types[t], q, y, N);
        double se = 0, sx = 0, worst = 0;
        for (int b = 0; b < N; b += 32) {
            double amax = 0, emax = 0;
            for (int i = b; i < b + 32; i++) {
                double e = (double)y[i] - x[i];
                se += e * e;
                sx += (double)x[i] * x[i];
                amax = fmax(amax, fabs(x[i]));
                emax = fmax(emax, fabs(e));
            }
            worst = fmax(worst, emax / amax);
        }
        double rel = sqrt(se / sx);
        printf("\n  %s: rms error / rms %.5f, max error / block absmax %.5f", fixture[t], rel, worst);
        CU_ASSERT(rel < rms_bound[t]);
        CU_ASSERT(worst < max_bound[t]);
    }
    printf("\n");
    free(x);
    free(y);
    free(q);
}

/* Values the format holds exactly (one per f16 power-of-two scale, the extreme codes present, so
 * the quantizer's scale comes out the same) come back exactly. */
static void test_quantize_exact(void)
{
    enum { NB = 8 };
    for (int t = 0; t < NTYPES; t++) {
        int qk = gp_dtype_block(types[t]);
        int64_t n = (int64_t)NB * qk;
        float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
        unsigned char *q = malloc((size_t)NB * gp_dtype_block_bytes(types[t]));
        for (int b = 0; b < NB; b++) {
            float *xb = x + (int64_t)b * qk;
            float d = ldexpf(1.0f, -(int)(gp_test_rand(&rng) % 12)), m = ldexpf(1.0f, -3 - b % 4);
            for (int i = 0; i < qk; i++) {
                int r = (int)(gp_test_rand(&rng) % 1000);
                switch (types[t]) {
                case GP_Q4_0: xb[i] = d * (float)(i == 5 ? -8 : r % 16 - 8); break;
                case GP_Q5_0: xb[i] = d * (float)(i == 5 ? -16 : r % 32 - 16); break;
                case GP_Q8_0: xb[i] = d * (float)(i == 5 ? 127 : r % 255 - 127); break;
                case GP_Q4_1: xb[i] = d * (float)(i == 3 ? 0 : i == 9 ? 15 : r % 16) - m; break;
                case GP_Q5_1: xb[i] = d * (float)(i == 3 ? 0 : i == 9 ? 31 : r % 32) - m; break;
                case GP_Q4_K:
                case GP_Q5_K: {
                    /* sub-block j: scale sc_j (sub-block 0: 63), min m_j (sub-block 1: 63) */
                    int lv = types[t] == GP_Q4_K ? 15 : 31, j = i / 32, l = i % 32;
                    int sc = j == 0 ? 63 : 1 + (int)(((unsigned)b * 7 + (unsigned)j * 13) % 63);
                    int mn = j == 1 ? 63 : (int)(((unsigned)b * 5 + (unsigned)j * 11) % 64);
                    int qv = l == 0 ? 0 : l == 1 ? lv : r % (lv + 1);
                    xb[i] = d * (float)sc * (float)qv - m * (float)mn;
                    break;
                }
                default: { /* q6_k: scales per 16 (group 0: 127), q - 32 in -31..31 with +-31 */
                    int g = i / 16, l = i % 16;
                    int sc = g == 0 ? 127 : 1 + (int)(((unsigned)b * 7 + (unsigned)g * 13) % 127);
                    int qv = l == 0 ? -31 : l == 1 ? 31 : r % 63 - 31;
                    xb[i] = d * (float)sc * (float)qv;
                    break;
                }
                }
            }
        }
        gp_quant_quantize_row(types[t], x, q, n);
        gp_quant_dequantize_row(types[t], q, y, n);
        int same = memcmp(x, y, (size_t)n * sizeof *x) == 0;
        if (!same)
            printf("\n%s: representable values do not round-trip\n", fixture[t]);
        CU_ASSERT(same);
        free(x);
        free(y);
        free(q);
    }
}

/* ---- activation rows ---- */

/* q * d reconstructs x within d / 2 per element; ds and bsum are the blocks' sums. */
static void test_act_quantize(void)
{
    enum { K = 512, M = 3, LDX = K + 7 };
    float *x = malloc(M * LDX * sizeof *x);
    for (int i = 0; i < M * LDX; i++)
        x[i] = nrand() * (i % 97 == 0 ? 30.0f : 1.0f);
    for (int t = 0; t < NTYPES; t++) {
        size_t ab = gp_quant_act_row_bytes(types[t], K);
        int kq = types[t] >= GP_Q4_K, qk = kq ? 256 : 32;
        CU_ASSERT(ab == (kq ? K + 4 * (K / 256) + 2 * (K / 16) : K + 8 * (K / 32)));
        unsigned char *xq = aligned_alloc(64, (M * ab + 63) / 64 * 64);
        memset(xq, 0xa5, M * ab);
        gp_quant_act_quantize(types[t], x, 1, M, K, LDX, xq); /* rows 1, 2 only */
        unsigned char row0 = xq[0];
        gp_quant_act_quantize(types[t], x, 0, 1, K, LDX, xq);
        CU_ASSERT(row0 == 0xa5); /* the first call left row 0 alone */
        for (int m = 0; m < M; m++) {
            const unsigned char *r = xq + m * ab;
            const signed char *q = (const signed char *)r;
            const float *d = (const float *)(r + K);
            for (int b = 0; b < K / qk; b++) {
                double amax = 0;
                int sum = 0;
                for (int i = b * qk; i < (b + 1) * qk; i++) {
                    amax = fmax(amax, fabs(x[m * LDX + i]));
                    CU_ASSERT(fabs((double)q[i] * d[b] - x[m * LDX + i]) <= 0.5001 * d[b]);
                    sum += q[i];
                }
                CU_ASSERT(fabs(d[b] - amax / 127) <= 1e-6 * amax);
                if (kq) {
                    const short *bs = (const short *)(r + K + 4 * (K / 256));
                    for (int g = 0; g < 16; g++) {
                        int s = 0;
                        for (int l = 0; l < 16; l++)
                            s += q[b * 256 + g * 16 + l];
                        CU_ASSERT(bs[b * 16 + g] == s);
                    }
                } else {
                    CU_ASSERT(d[K / 32 + b] == d[b] * (float)sum);
                }
            }
        }
        free(xq);
    }
    free(x);
}

/* ---- products ---- */

/* y = x W^T on every path present, every type, M in {1, 3, 17}, K in {256, 768, 2048} (and 608):
 *  - against sum_k deq(W)[n, k] x[m, k] in double, within the activation rounding's worst case
 *    sum_blocks (d_x / 2) sum |w| (d_x = the block's absmax / 127) plus f32 summation error
 *    (1e-5 of sum |w x|); the weights' own error is not counted (the reference uses deq(W));
 *  - the SIMD paths against the portable one within the summation error alone (they compute the
 *    same integer dots; only the order of the f32 sums differs);
 *  - a split of the columns over two calls (two threads' shares) gives the same bits. */
static void test_matmul(void)
{
    /* K = 608 (19 blocks, 32-block types only): the 512-bit paths' 2-block step and scalar block */
    static const int Ms[] = {1, 3, 17}, Ks[] = {256, 768, 2048, 608};
    enum { N = 21 };
    int paths = 0;
    for (int isa = 0; isa < GP_QUANT_ISA_COUNT; isa++)
        paths += gp_quant_isa_supported(isa);
    printf("\n  paths:");
    for (int isa = 0; isa < GP_QUANT_ISA_COUNT; isa++)
        if (gp_quant_isa_supported(isa))
            printf(" %s", gp_quant_isa_name(isa));
    printf("\n");
    CU_ASSERT(paths >= 1);
    for (int t = 0; t < NTYPES; t++) {
        for (int ki = 0; ki < 4; ki++) {
            int K = Ks[ki], qa = types[t] >= GP_Q4_K ? 256 : 32;
            if (K % qa)
                continue;
            size_t rb = gp_dtype_row_bytes(types[t], K);
            float *wf = malloc((size_t)N * K * sizeof *wf);
            unsigned char *w = malloc(N * rb);
            for (int i = 0; i < N * K; i++)
                wf[i] = nrand() * 0.1f + (i % 5 == 0 ? 0.05f : 0);
            for (int n = 0; n < N; n++)
                gp_quant_quantize_row(types[t], wf + (size_t)n * K, w + n * rb, K);
            for (int n = 0; n < N; n++)
                gp_quant_dequantize_row(types[t], w + n * rb, wf + (size_t)n * K, K);
            for (int mi = 0; mi < 3; mi++) {
                int M = Ms[mi], ld = N + 3;
                float *x = malloc((size_t)M * K * sizeof *x);
                for (int i = 0; i < M * K; i++)
                    x[i] = nrand() * (i % 61 == 0 ? 8.0f : 1.0f);
                size_t ab = gp_quant_act_row_bytes(types[t], K);
                unsigned char *xq = aligned_alloc(64, (M * ab + 63) / 64 * 64);
                gp_quant_act_quantize(types[t], x, 0, M, K, K, xq);
                double *ref = malloc((size_t)M * N * sizeof *ref), *bound = malloc((size_t)M * N * sizeof *bound),
                       *mag = malloc((size_t)M * N * sizeof *mag);
                for (int m = 0; m < M; m++) {
                    for (int n = 0; n < N; n++) {
                        double s = 0, e = 0, a = 0;
                        for (int b = 0; b < K; b += qa) {
                            double amax = 0, sw = 0;
                            for (int k = b; k < b + qa; k++) {
                                double wv = wf[(size_t)n * K + k], xv = x[(size_t)m * K + k];
                                s += wv * xv;
                                a += fabs(wv * xv);
                                sw += fabs(wv);
                                amax = fmax(amax, fabs(xv));
                            }
                            e += amax / 127 / 2 * sw;
                        }
                        ref[m * N + n] = s;
                        mag[m * N + n] = a;
                        bound[m * N + n] = 1.0001 * e + 1e-5 * a;
                    }
                }
                float *y = malloc((size_t)M * ld * sizeof *y), *y0 = malloc((size_t)M * ld * sizeof *y0),
                      *ys = malloc((size_t)M * ld * sizeof *ys);
                for (int isa = 0; isa < GP_QUANT_ISA_COUNT; isa++) {
                    if (!gp_quant_isa_supported(isa))
                        continue;
                    CU_ASSERT_FATAL(gp_quant_force_isa(isa) == 0);
                    CU_ASSERT(gp_quant_isa() == isa);
                    for (int i = 0; i < M * ld; i++)
                        y[i] = ys[i] = -1234.5f;
                    gp_quant_matmul(types[t], w, 0, N, xq, M, K, y, ld);
                    gp_quant_matmul(types[t], w, 0, 8, xq, M, K, ys, ld);
                    gp_quant_matmul(types[t], w, 8, N, xq, M, K, ys, ld);
                    int bad = 0, split = 0, vs = 0, pad = 0;
                    for (int m = 0; m < M; m++) {
                        for (int n = 0; n < N; n++) {
                            float v = y[m * ld + n];
                            bad += !(fabs(v - ref[m * N + n]) <= bound[m * N + n]);
                            split += memcmp(&v, &ys[m * ld + n], sizeof v) != 0;
                            if (isa == 0)
                                y0[m * ld + n] = v;
                            else
                                vs += !(fabs(v - y0[m * ld + n]) <= 1e-5 * mag[m * N + n] + 1e-30);
                        }
                        for (int n = N; n < ld; n++)
                            pad += y[m * ld + n] != -1234.5f;
                    }
                    if (bad || split || vs || pad)
                        printf("\n%s %s M %d K %d: %d outside the bound, %d split, %d vs portable, %d pad\n",
                               fixture[t], gp_quant_isa_name(isa), M, K, bad, split, vs, pad);
                    CU_ASSERT(bad == 0 && split == 0 && vs == 0 && pad == 0);
                }
                free(y);
                free(y0);
                free(ys);
                free(ref);
                free(bound);
                free(mag);
                free(xq);
                free(x);
            }
            free(wf);
            free(w);
        }
    }
    CU_ASSERT(gp_quant_force_isa(GP_QUANT_ISA_AUTO) == 0);
    CU_ASSERT(gp_quant_force_isa(GP_QUANT_ISA_COUNT) == -1);
}

/* Several weight tiles (the M > 1 blocking) and an odd number of 32-blocks (the 512-bit paths'
 * scalar last block), every type and path: the same bits as one activation row at a time. */
static void test_matmul_tiles(void)
{
    enum { N = 130, M = 6 }; /* q8_0, K = 2080: rows of 2210 B, 59 a tile */
    for (int t = 0; t < NTYPES; t++) {
        int K = types[t] >= GP_Q4_K ? 2304 : 2080; /* 65 32-blocks; 9 super-blocks */
        size_t rb = gp_dtype_row_bytes(types[t], K), ab = gp_quant_act_row_bytes(types[t], K);
        float *wf = malloc((size_t)N * K * sizeof *wf), *x = malloc((size_t)M * K * sizeof *x);
        unsigned char *w = malloc(N * rb), *xq = aligned_alloc(64, (M * ab + 63) / 64 * 64);
        for (int i = 0; i < N * K; i++)
            wf[i] = nrand();
        for (int i = 0; i < M * K; i++)
            x[i] = nrand();
        gp_quant_quantize_row(types[t], wf, w, (int64_t)N * K);
        gp_quant_act_quantize(types[t], x, 0, M, K, K, xq);
        float *y = malloc(M * N * sizeof *y), *y1 = malloc(N * sizeof *y1);
        for (int isa = 0; isa < GP_QUANT_ISA_COUNT; isa++) {
            if (gp_quant_force_isa(isa) != 0)
                continue;
            gp_quant_matmul(types[t], w, 0, N, xq, M, K, y, N);
            int diff = 0;
            for (int m = 0; m < M; m++) {
                gp_quant_matmul(types[t], w, 0, N, xq + m * ab, 1, K, y1, N);
                diff += memcmp(y1, y + m * N, N * sizeof *y1) != 0;
            }
            if (diff)
                printf("\n%s %s: M = %d and M = 1 differ\n", fixture[t], gp_quant_isa_name(isa), M);
            CU_ASSERT(diff == 0);
        }
        gp_quant_force_isa(GP_QUANT_ISA_AUTO);
        free(wf);
        free(x);
        free(w);
        free(xq);
        free(y);
        free(y1);
    }
}

void gp_suite_quant(void)
{
    CU_pSuite s = CU_add_suite("quant", NULL, NULL);
    CU_add_test(s, "dequantize = gguf, bit for bit", test_dequantize_gguf);
    CU_add_test(s, "quantize = gguf bytes (ggml's rules)", test_quantize_gguf);
    CU_add_test(s, "quantize error bounds", test_quantize_error);
    CU_add_test(s, "quantize exact values", test_quantize_exact);
    CU_add_test(s, "activation rows", test_act_quantize);
    CU_add_test(s, "matmul every path vs reference", test_matmul);
    CU_add_test(s, "matmul tiles and odd blocks", test_matmul_tiles);
}
