/* Products of f32 activations with block-quantized weights dequantized on the fly
 * (gp_quant_matmul_f32, cpu/quant.h): the portable path and the selector of the SIMD ones. */
#include <string.h>

#include "cpu/quant.h"
#include "cpu/quant_f32_internal.h"

/* The architectures with SIMD paths: x86-64 (AVX2, AVX-512, AMX) and aarch64 (NEON). */
#if defined(__x86_64__) && defined(__GNUC__)
#define QF_X86 1
#elif defined(__aarch64__) && defined(__GNUC__)
#define QF_NEON 1
#endif

/* The fixed tree of quant_f32_internal.h over 32 lane sums. */
static float red32(const float *l)
{
    float s16[16], s8[8], s4[4], s2[2];
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

/* Plain C: a row's values come from gp_quant_dequantize_row 256 columns at a time (a whole number
 * of blocks of every type), then x * w rounded and added into the 32 lanes. */
#define PCH 256
#define PM 8

static void qf32_portable(gp_dtype wt, const uint8_t *w, int64_t n0, int64_t n1, const float *x,
                          int64_t ldx, int64_t M, int64_t K, float *y, int64_t ldy)
{
    size_t rb = gp_dtype_row_bytes(wt, K), bb = gp_dtype_block_bytes(wt);
    int64_t qk = gp_dtype_block(wt);
    float wv[PCH], acc[PM][GP_QF32_LANES];
    for (int64_t n = n0; n < n1; n++) {
        const uint8_t *row = w + (size_t)n * rb;
        for (int64_t m0 = 0; m0 < M; m0 += PM) {
            int mm = M - m0 < PM ? (int)(M - m0) : PM;
            memset(acc, 0, sizeof acc);
            for (int64_t k0 = 0; k0 < K; k0 += PCH) {
                int64_t kc = K - k0 < PCH ? K - k0 : PCH;
                gp_quant_dequantize_row(wt, row + (size_t)(k0 / qk) * bb, wv, kc);
                for (int m = 0; m < mm; m++) {
                    const float *xr = x + (m0 + m) * ldx + k0;
                    for (int64_t j = 0; j < kc; j += GP_QF32_LANES)
                        for (int l = 0; l < GP_QF32_LANES; l++) {
                            float p = xr[j + l] * wv[j + l];
                            acc[m][l] = acc[m][l] + p;
                        }
                }
            }
            for (int m = 0; m < mm; m++)
                y[(m0 + m) * ldy + n] = red32(acc[m]);
        }
    }
}

void gp_quant_matmul_f32(gp_dtype wt, const void *w, int64_t n0, int64_t n1, const float *x,
                         int64_t ldx, int64_t M, int64_t K, float *y, int64_t ldy)
{
    GP_ASSERT(gp_dtype_is_quant(wt) && K > 0 && K % gp_dtype_block(wt) == 0);
    GP_ASSERT(0 <= n0 && n0 <= n1 && M >= 0 && ldx >= K && (M <= 1 || ldy >= n1));
    if (n0 == n1 || M == 0)
        return;
    gp_qf32_fn fn = qf32_portable;
#ifdef QF_X86
    static const gp_qf32_fn fns[GP_QUANT_ISA_COUNT] = {qf32_portable,  gp_qf32_avx2,
                                                       gp_qf32_avx512, gp_qf32_avx512,
                                                       gp_qf32_avx512, gp_qf32_avx2};
    fn = fns[gp_quant_isa()];
#elif defined(QF_NEON)
    if (gp_quant_isa() != GP_QUANT_ISA_PORTABLE) /* neon, dotprod, i8mm */
        fn = gp_qf32_neon;
#endif
    fn(wt, w, n0, n1, x, ldx, M, K, y, ldy);
}

/* Every block format has an integer form (cpu/quant_int_x86.h, cpu/quant_int_neon.h). */
int gp_qint_supports(gp_dtype wt)
{
    return gp_dtype_is_quant(wt);
}

/* The integer path of each gp_quant_isa (NULL: none; amx has its own): AVX-512 without VNNI
 * takes the AVX2 variant. */
static const gp_qint_path *qint_path(int isa)
{
#if defined(QF_X86) || defined(QF_NEON)
    static const gp_qint_path *const paths[GP_QUANT_ISA_COUNT] = {
#ifdef QF_X86
        [GP_QUANT_ISA_AVX2] = &gp_qint_avx2,
        [GP_QUANT_ISA_AVX512] = &gp_qint_avx2,
        [GP_QUANT_ISA_VNNI] = &gp_qint_avx512,
        [GP_QUANT_ISA_AVXVNNI] = &gp_qint_avxvnni,
#else
        [GP_QUANT_ISA_NEON] = &gp_qint_neon,
        [GP_QUANT_ISA_DOTPROD] = &gp_qint_dotprod,
        [GP_QUANT_ISA_I8MM] = &gp_qint_i8mm,
#endif
    };
    return isa >= 0 && isa < GP_QUANT_ISA_COUNT ? paths[isa] : NULL;
#else
    (void)isa;
    return NULL;
#endif
}

int gp_quant_matmul_ws_taken(gp_dtype wt, int64_t M, int64_t K, const void *ws, size_t ws_size)
{
    GP_ASSERT(gp_dtype_is_quant(wt) && K > 0 && K % gp_dtype_block(wt) == 0);
    int isa = gp_quant_isa();
    const gp_qint_path *p = qint_path(isa);
    if (M == 1) /* a prompt's workspace, lent to a decode step's one row */
        return ws && (int64_t)ws_size >= gp_qint_ws_bytes(1, K) && p && p->row &&
               gp_qint_row_supports(wt);
    return M > GP_QUANT_WS_MIN_M && ws && (int64_t)ws_size >= gp_quant_matmul_ws_bytes(M, K) &&
           (isa == GP_QUANT_ISA_AMX ||
            (p && gp_qint_supports(wt) && (gp_dtype_block(wt) == 32 || M >= GP_QUANT_VNNI_MIN_M)));
}

#if defined(QF_X86) || defined(QF_NEON)
int gp_quant_matmul_ws(gp_dtype wt, const void *w, int64_t N, const float *x, int64_t ldx,
                       int64_t M, int64_t K, float *y, int64_t ldy, void *ws, size_t ws_size,
                       int ith, int nth)
{
    GP_ASSERT(N >= 0 && M >= 0 && ldx >= K && (M <= 1 || ldy >= N) && 0 <= ith && ith < nth);
    if (!gp_quant_matmul_ws_taken(wt, M, K, ws, ws_size))
        return 0;
    if (N > 0 && gp_quant_isa() == GP_QUANT_ISA_AMX) {
#ifdef QF_X86
        gp_qamx(wt, w, N, x, ldx, M, K, y, ldy, ws, ith, nth);
#endif
    } else if (N > 0) { /* integer: this thread's rows, all columns */
        const gp_qint_path *p = qint_path(gp_quant_isa());
        int64_t m0 = M * ith / nth, m1 = M * (ith + 1) / nth;
        p->prep(x, ldx, M, K, ws, m0, m1);
        if (M == 1 && m0 < m1)
            p->row(wt, w, 0, N, K, y, ws);
        else
            p->cols(wt, w, 0, N, M, K, y, ldy, ws, m0, m1);
    }
    return 1;
}

void gp_quant_matmul_ws_prep(const float *x, int64_t ldx, int64_t M, int64_t K, void *ws, int ith,
                             int nth)
{
    const gp_qint_path *p = qint_path(gp_quant_isa());
    if (p) {
        p->prep(x, ldx, M, K, ws, M * ith / nth, M * (ith + 1) / nth);
        return;
    }
#ifdef QF_X86
    int64_t mt = (M + 15) / 16;
    gp_qamx_prep(x, ldx, M, K, ws, mt * ith / nth, mt * (ith + 1) / nth);
#else
    GP_ASSERT(!"no integer path chosen");
#endif
}

void gp_quant_matmul_ws_cols(gp_dtype wt, const void *w, int64_t n0, int64_t n1, int64_t M,
                             int64_t K, float *y, int64_t ldy, const void *ws)
{
    GP_ASSERT(0 <= n0 && n0 <= n1 && (M <= 1 || ldy >= n1));
    const gp_qint_path *p = qint_path(gp_quant_isa());
    if (p && M == 1) {
        p->row(wt, w, n0, n1, K, y, ws);
        return;
    }
    if (p) {
        p->cols(wt, w, n0, n1, M, K, y, ldy, ws, 0, M);
        return;
    }
#ifdef QF_X86
    gp_qamx_cols(wt, w, n0, n1, M, K, y, ldy, ws, 0, (M + 15) / 16);
#else
    GP_ASSERT(!"no integer path chosen");
#endif
}
#else
/* no workspace path in this build: gp_quant_matmul_ws_taken is never true */
int gp_quant_matmul_ws(gp_dtype wt, const void *w, int64_t N, const float *x, int64_t ldx,
                       int64_t M, int64_t K, float *y, int64_t ldy, void *ws, size_t ws_size,
                       int ith, int nth)
{
    (void)wt, (void)w, (void)N, (void)x, (void)ldx, (void)M, (void)K, (void)y, (void)ldy;
    (void)ws, (void)ws_size, (void)ith, (void)nth;
    return 0;
}

void gp_quant_matmul_ws_prep(const float *x, int64_t ldx, int64_t M, int64_t K, void *ws, int ith,
                             int nth)
{
    (void)x, (void)ldx, (void)M, (void)K, (void)ws, (void)ith, (void)nth;
    GP_ASSERT(!"no amx path in this build");
}

void gp_quant_matmul_ws_cols(gp_dtype wt, const void *w, int64_t n0, int64_t n1, int64_t M,
                             int64_t K, float *y, int64_t ldy, const void *ws)
{
    (void)wt, (void)w, (void)n0, (void)n1, (void)M, (void)K, (void)y, (void)ldy, (void)ws;
    GP_ASSERT(!"no amx path in this build");
}
#endif
