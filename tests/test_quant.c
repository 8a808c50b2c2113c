/* Tests of cpu/quant.h: dequantization bit for bit against the python gguf package's
 * (tests/quant/TYPE.bin, scripts/quant/make_fixtures.py), the quantizers (gguf's bytes where the
 * rule is ggml's, error bounds, exact round trips) and the ISA selector. The products are
 * tests/test_quant_f32.c's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <CUnit/CUnit.h>

#include "cpu/quant.h"
#include "tests/testutil.h"

static const gp_dtype types[] = {GP_Q4_0, GP_Q4_1, GP_Q5_0, GP_Q5_1,
                                 GP_Q8_0, GP_Q4_K, GP_Q5_K, GP_Q6_K};
#define NTYPES 8
static const char *const fixture[NTYPES] = {"q4_0", "q4_1", "q5_0", "q5_1",
                                            "q8_0", "q4_k", "q5_k", "q6_k"};
static const unsigned ggml_id[NTYPES] = {2, 3, 6, 7, 8, 12, 13, 14}; /* GGMLQuantizationType */

static uint64_t rng = 0x243f6a8885a308d3ull;

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
    gp_test_normal(x, N, 1.0f, &rng);
    for (int i = 0; i < N; i++)
        x[i] = x[i] * (i < N / 2 ? 1.0f : 0.01f) + (i >= 3 * N / 4 ? 0.02f : 0); /* scale, offset */
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

/* ---- the ISA selector ---- */

/* Every path the CPU has can be forced and reads back; an unsupported or out-of-range one is
 * refused and changes nothing; AUTO picks a supported path, the best in the documented order. */
static void test_isa_select(void)
{
    static const int order[] = {GP_QUANT_ISA_AMX,     GP_QUANT_ISA_VNNI,    GP_QUANT_ISA_AVX512,
                                GP_QUANT_ISA_AVXVNNI, GP_QUANT_ISA_AVX2,    GP_QUANT_ISA_I8MM,
                                GP_QUANT_ISA_DOTPROD, GP_QUANT_ISA_NEON,    GP_QUANT_ISA_PORTABLE};
    CU_ASSERT(gp_quant_isa_supported(GP_QUANT_ISA_PORTABLE) == 1);
    CU_ASSERT(gp_quant_isa_supported(GP_QUANT_ISA_COUNT) == 0);
    CU_ASSERT(gp_quant_isa_supported(GP_QUANT_ISA_AUTO) == 0);
    printf("\n  paths:");
    for (int isa = 0; isa < GP_QUANT_ISA_COUNT; isa++) {
        const char *name = gp_quant_isa_name(isa);
        CU_ASSERT(strcmp(name, "auto") != 0);
        for (int j = 0; j < isa; j++)
            CU_ASSERT(strcmp(name, gp_quant_isa_name(j)) != 0);
        if (!gp_quant_isa_supported(isa)) {
            int before = gp_quant_isa();
            CU_ASSERT(gp_quant_force_isa(isa) == -1);
            CU_ASSERT(gp_quant_isa() == before);
            continue;
        }
        printf(" %s", name);
        CU_ASSERT_FATAL(gp_quant_force_isa(isa) == 0);
        CU_ASSERT(gp_quant_isa() == isa);
    }
    printf("\n");
    CU_ASSERT(gp_quant_isa_supported(GP_QUANT_ISA_AMX) <= gp_quant_isa_supported(GP_QUANT_ISA_VNNI));
    CU_ASSERT(gp_quant_isa_supported(GP_QUANT_ISA_VNNI) <= gp_quant_isa_supported(GP_QUANT_ISA_AVX512));
    CU_ASSERT(gp_quant_isa_supported(GP_QUANT_ISA_AVX512) <= gp_quant_isa_supported(GP_QUANT_ISA_AVX2));
    CU_ASSERT(gp_quant_isa_supported(GP_QUANT_ISA_AVXVNNI) <= gp_quant_isa_supported(GP_QUANT_ISA_AVX2));
    CU_ASSERT(gp_quant_isa_supported(GP_QUANT_ISA_I8MM) <= gp_quant_isa_supported(GP_QUANT_ISA_DOTPROD));
    CU_ASSERT(gp_quant_isa_supported(GP_QUANT_ISA_DOTPROD) <= gp_quant_isa_supported(GP_QUANT_ISA_NEON));
    /* one architecture's paths at most */
    CU_ASSERT(!(gp_quant_isa_supported(GP_QUANT_ISA_NEON) && gp_quant_isa_supported(GP_QUANT_ISA_AVX2)));
    CU_ASSERT(gp_quant_force_isa(GP_QUANT_ISA_COUNT) == -1);
    CU_ASSERT(strcmp(gp_quant_isa_name(GP_QUANT_ISA_COUNT), "auto") == 0);
    CU_ASSERT(gp_quant_force_isa(GP_QUANT_ISA_AUTO) == 0);
    int best = 0;
    while (!gp_quant_isa_supported(order[best])) /* the last, portable, always is */
        best++;
    CU_ASSERT(gp_quant_isa() == order[best]);
}

void gp_suite_quant(void)
{
    static const gp_test_case tests[] = {
        {"dequantize = gguf, bit for bit", test_dequantize_gguf},
        {"quantize = gguf bytes (ggml's rules)", test_quantize_gguf},
        {"quantize error bounds", test_quantize_error},
        {"quantize exact values", test_quantize_exact},
        {"ISA selector", test_isa_select},
    };
    gp_test_add_suite("quant", NULL, NULL, tests, GP_TEST_COUNT(tests));
}
