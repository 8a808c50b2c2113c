/* Prompt products on quantized weights with AMX-BF16 tiles (gp_quant_matmul_ws and its two-phase
 * form, cpu/quant.h), built with AVX-512 + AVX512-BF16 + AMX flags only (cpu/CMakeLists.txt);
 * chosen at run time (path amx).
 *
 * Each weight w (gp_quant_dequantize_row's value, dequantized in registers by quant_f32_x86.h's
 * deq) and each activation x is split into two bf16: hi = bf16(v), lo = bf16(v - hi) (v - hi is
 * exact in f32; lo keeps v to ~2^-17 relative). The product is hi_w hi_x + hi_w lo_x + lo_w hi_x
 * (the dropped lo_w lo_x is < 2^-16 |w x|), summed by TDPBF16PS in f32. The activations' halves
 * go to the workspace once, in the pair layout of a B tile; the weights' halves to a stack tile
 * per 32 rows and 256 columns, reused by up to AMG tiles of 16 activation rows.
 *
 * gp_qamx splits the 16-row tiles of x over threads (each converts its own rows, so no thread waits
 * for another); gp_qamx_prep + gp_qamx_cols split the rows for the conversion and the columns for
 * the products, with a barrier between (the CPU backend). Each output is computed by one sequence
 * of tile operations that depends on its row, its column and K only, so every split gives the same
 * bits. */
#define QF_BITS 512
#define QF_DEQ_ONLY
#include "cpu/quant_f32_x86.h"

#include "cpu/quant.h"

/* columns per weight chunk (a multiple of every block) and 16-row tiles of x per group */
#define AKC 256
#define AMG 8
/* columns a pass: the halves of AMG tiles of x for AKS columns (512 AKS bytes: 1 MiB) stay in L2
 * while every 32 weight rows pass over them; each pass's C tile goes to y (added from the second
 * on) */
#define AKS 2048

typedef struct {
    uint8_t palette, start;
    uint8_t rsv[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tilecfg;

/* bf16 halves (as 16-bit words in element order) of 32 f32: *hi, *lo */
AI void split(__m512 a0, __m512 a1, __m512i *hi, __m512i *lo)
{
    __m512i h = (__m512i)_mm512_cvtne2ps_pbh(a1, a0);
    __m512 h0 = _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm512_castsi512_si256(h)), 16));
    __m512 h1 = _mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(h, 1)), 16));
    *hi = h;
    *lo = (__m512i)_mm512_cvtne2ps_pbh(_mm512_sub_ps(a1, h1), _mm512_sub_ps(a0, h0));
}

/* A 16 x 16 matrix of 32-bit elements transposed: r[i] holds row i; on return r[c] holds what
 * was column c. Four rounds of in-lane and 128-bit-lane shuffles (64 in all). */
AI void transpose16(__m512i r[16])
{
    __m512i t[16], u[16];
    for (int i = 0; i < 16; i += 2) { /* t[i]: r[i][j] r[i+1][j] pairs, j = 0, 1; t[i+1]: j = 2, 3 */
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int b = 0; b < 16; b += 4) { /* u[b + j]: rows b .. b + 3 of column j (+ 4 L in lane L) */
        u[b] = _mm512_unpacklo_epi64(t[b], t[b + 2]);
        u[b + 1] = _mm512_unpackhi_epi64(t[b], t[b + 2]);
        u[b + 2] = _mm512_unpacklo_epi64(t[b + 1], t[b + 3]);
        u[b + 3] = _mm512_unpackhi_epi64(t[b + 1], t[b + 3]);
    }
    for (int j = 0; j < 4; j++) { /* lanes 0, 2 and 1, 3 of rows 0-7, then of rows 8-15 */
        __m512i v0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x88);
        __m512i v1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xdd);
        __m512i w0 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x88);
        __m512i w1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xdd);
        r[j] = _mm512_shuffle_i32x4(v0, w0, 0x88);
        r[8 + j] = _mm512_shuffle_i32x4(v0, w0, 0xdd);
        r[4 + j] = _mm512_shuffle_i32x4(v1, w1, 0x88);
        r[12 + j] = _mm512_shuffle_i32x4(v1, w1, 0xdd);
    }
}

/* Rows m0 .. m0 + 15 of x (zeros from row M on) into the B-tile pair layout, per 32 columns s:
 * xt[s][part][k / 2][m - m0][k % 2], part 0 the hi halves, 1 the lo (2 KiB a step). */
static void act_tile(const float *x, int64_t ldx, int64_t m0, int64_t M, int64_t K, uint16_t *xt)
{
    for (int64_t s = 0; s < K / 32; s++) {
        uint16_t *o = xt + s * 1024;
        __m512i hi[16], lo[16];
        for (int i = 0; i < 16; i++) {
            hi[i] = lo[i] = _mm512_setzero_si512();
            if (m0 + i < M) {
                const float *r = x + (m0 + i) * ldx + 32 * s;
                split(_mm512_loadu_ps(r), _mm512_loadu_ps(r + 16), &hi[i], &lo[i]);
            }
        }
        /* dword j of a row (its columns 2 j, 2 j + 1) to pair row j, column i */
        transpose16(hi);
        transpose16(lo);
        for (int j = 0; j < 16; j++) {
            _mm512_storeu_si512(o + 32 * j, hi[j]);
            _mm512_storeu_si512(o + 512 + 32 * j, lo[j]);
        }
    }
}

/* Weight rows n .. n + 31 (zeros from row N on), columns k0 .. k0 + kc - 1, as bf16 halves:
 * wb[part][r][k - k0] (part 0 hi, 1 lo), AKC columns a row. */
AI void w_tile(gp_dtype t, const uint8_t *w, size_t rb, int64_t n, int64_t N, int64_t k0,
               int64_t kc, uint16_t *wb)
{
    for (int r = 0; r < 32; r++) {
        uint16_t *oh = wb + r * AKC, *ol = wb + 32 * AKC + r * AKC;
        if (n + r >= N) {
            for (int64_t k = 0; k < kc; k += 32) {
                _mm512_storeu_si512(oh + k, _mm512_setzero_si512());
                _mm512_storeu_si512(ol + k, _mm512_setzero_si512());
            }
            continue;
        }
        const uint8_t *row = w + (size_t)(n + r) * rb;
        for (int64_t s = k0 / QK(t); s < (k0 + kc) / QK(t); s++) {
            const uint8_t *b = row + (size_t)s * BB(t);
            bctx c;
            prep(t, b, &c);
            for (int g = 0; g < QK(t) / 32; g++) {
                vf w0, w1;
                deq(t, b, &c, g, &w0, &w1);
                __m512i hi, lo;
                split(w0, w1, &hi, &lo);
                int64_t k = s * QK(t) + 32 * g - k0;
                _mm512_storeu_si512(oh + k, hi);
                _mm512_storeu_si512(ol + k, lo);
            }
        }
    }
}

static void w_tile_any(gp_dtype t, const uint8_t *w, size_t rb, int64_t n, int64_t N, int64_t k0,
                       int64_t kc, uint16_t *wb)
{
#define QA_W(T, ...)                                                                               \
    case T:                                                                                    \
        w_tile(T, w, rb, n, N, k0, kc, wb);                                                    \
        break;
    switch (t) {
        GP_QUANT_DTYPES(QA_W)
    default:
        GP_ASSERT(!"not a quantized dtype");
    }
#undef QA_W
}

/* C tile [16 weight rows n][16 x rows m] into y (only rows < M, columns < N) */
static void put(const float *c, int64_t m0, int64_t M, int64_t n, int64_t N, float *y,
                int64_t ldy, int add)
{
    if (n >= N)
        return;
    __m512i r[16];
    for (int i = 0; i < 16; i++)
        r[i] = _mm512_loadu_si512(c + 16 * i);
    transpose16(r);
    __mmask16 k = N - n >= 16 ? 0xffff : (__mmask16)((1u << (N - n)) - 1);
    for (int j = 0; j < 16 && m0 + j < M; j++) {
        float *o = y + (m0 + j) * ldy + n;
        __m512 v = _mm512_castsi512_ps(r[j]);
        if (add) /* y + c, one rounding */
            v = _mm512_add_ps(_mm512_maskz_loadu_ps(k, o), v);
        _mm512_mask_storeu_ps(o, k, v);
    }
}

/* Rows 16 mt0 .. 16 mt1 - 1 of x (M rows) into their halves in ws */
void gp_qamx_prep(const float *x, int64_t ldx, int64_t M, int64_t K, void *ws, int64_t mt0,
                  int64_t mt1)
{
    uint16_t *xt = ws; /* [mtiles][K / 32][2][16][16][2] */
    for (int64_t mt = mt0; mt < mt1; mt++)
        act_tile(x, ldx, 16 * mt, M, K, xt + mt * 16 * K * 2);
}

/* y's rows of the 16-row tiles mt0 .. mt1 - 1 (M rows in all), columns n0 .. n1 - 1, from the
 * halves gp_qamx_prep left in ws */
void gp_qamx_cols(gp_dtype wt, const uint8_t *w, int64_t n0, int64_t n1, int64_t M, int64_t K,
                  float *y, int64_t ldy, const void *ws, int64_t mt0, int64_t mt1)
{
    if (mt0 >= mt1 || n0 >= n1)
        return;
    size_t rb = gp_dtype_row_bytes(wt, K);
    const uint16_t *xt = ws;
    uint16_t wb[2 * 32 * AKC] __attribute__((aligned(64)));
    float cb[AMG][2][256] __attribute__((aligned(64))); /* C tiles between column chunks */
    tilecfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int i = 0; i < 8; i++) {
        cfg.colsb[i] = 64;
        cfg.rows[i] = 16;
    }
    _tile_loadconfig(&cfg);
    /* AMG tiles of x a group whatever K (each weight chunk is unpacked once a group: fewer
     * tiles to fit L2 at large K would unpack each chunk more often) */
    const int64_t amg = AMG;
    for (int64_t g0 = mt0; g0 < mt1; g0 += amg) {
        int64_t g1 = mt1 - g0 < amg ? mt1 : g0 + amg;
        for (int64_t ks = 0; ks < K; ks += AKS) {
        int64_t ke = K - ks < AKS ? K : ks + AKS;
        for (int64_t n = n0; n < n1; n += 32) {
            for (int64_t k0 = ks; k0 < ke; k0 += AKC) {
                int64_t kc = ke - k0 < AKC ? ke - k0 : AKC;
                w_tile_any(wt, w, rb, n, n1, k0, kc, wb);
                for (int64_t mt = g0; mt < g1; mt++) {
                    float *c0 = cb[mt - g0][0], *c1 = cb[mt - g0][1];
                    if (k0 == ks) {
                        _tile_zero(0);
                        _tile_zero(1);
                    } else {
                        _tile_loadd(0, c0, 64);
                        _tile_loadd(1, c1, 64);
                    }
                    const uint16_t *xs = xt + mt * 16 * K * 2 + (k0 / 32) * 1024;
                    for (int64_t s = 0; s < kc / 32; s++) {
                        _tile_loadd(2, wb + 32 * s, 2 * AKC);
                        _tile_loadd(3, wb + 32 * AKC + 32 * s, 2 * AKC);
                        _tile_loadd(4, wb + 16 * AKC + 32 * s, 2 * AKC);
                        _tile_loadd(5, wb + 48 * AKC + 32 * s, 2 * AKC);
                        _tile_loadd(6, xs + s * 1024, 64);
                        _tile_loadd(7, xs + s * 1024 + 512, 64);
                        _tile_dpbf16ps(0, 2, 6);
                        _tile_dpbf16ps(1, 4, 6);
                        _tile_dpbf16ps(0, 2, 7);
                        _tile_dpbf16ps(1, 4, 7);
                        _tile_dpbf16ps(0, 3, 6);
                        _tile_dpbf16ps(1, 5, 6);
                    }
                    _tile_stored(0, c0, 64);
                    _tile_stored(1, c1, 64);
                    if (k0 + kc == ke) {
                        put(c0, 16 * mt, M, n, n1, y, ldy, ks > 0);
                        put(c1, 16 * mt, M, n + 16, n1, y, ldy, ks > 0);
                    }
                }
            }
        }
        }
    }
    _tile_release();
}

void gp_qamx(gp_dtype wt, const uint8_t *w, int64_t N, const float *x, int64_t ldx, int64_t M,
             int64_t K, float *y, int64_t ldy, void *ws, int ith, int nth)
{
    int64_t mtiles = (M + 15) / 16;
    int64_t mt0 = mtiles * ith / nth, mt1 = mtiles * (ith + 1) / nth;
    gp_qamx_prep(x, ldx, M, K, ws, mt0, mt1);
    gp_qamx_cols(wt, w, 0, N, M, K, y, ldy, ws, mt0, mt1);
}
