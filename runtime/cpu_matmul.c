/* CPU matmul: out[..., M, N] = a[..., M, K] b[..., K, N] over any strides, dtypes and transposes.
 * Cache-blocked: tiles of A and B are packed to f32 on the stack (no workspace), then a 4x16
 * register kernel accumulates in f32 with k in ascending order, the same for every element. */
#include <string.h>

#include "runtime/cpu_internal.h"

/* Block sizes: an A block [MB, KB] (16 KiB) and a B block [KB, NB] (32 KiB) fit in L2, one B
 * panel [KB, NR] (8 KiB) in L1. Stack use: (MB KB + KB NB + MB NB + KB) floats = 57 KiB. */
enum { MR = 4, NR = 16, MB = 32, NB = 64, KB = 128 };

typedef float v8 __attribute__((vector_size(32)));

/* One build for AVX2 machines and a portable one, picked at load time. The arithmetic is the same
 * IEEE operations in the same order (no FMA: gp_cpu builds with -ffp-contract=off), so both give
 * the same bits. */
#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones) && !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define GP_CLONES __attribute__((target_clones("avx2", "default")))
#endif
#endif
#ifndef GP_CLONES
#define GP_CLONES
#endif

/* Unaligned vector loads and stores (macros: a function returning v8 would change the ABI
 * between the two builds). */
#define V8_LOAD(v, p) memcpy(&(v), (p), sizeof(v8))
#define V8_STORE(p, v) memcpy((p), &(v), sizeof(v8))

/* c[r][0..16) += sum over k < kc of a[r][k] * b[k][0..16), for r < mr (a constant after inlining).
 * a: [mr, lda], b: [kc, ldb], c: [mr, ldc]. */
static inline __attribute__((always_inline)) void tile(int mr, int64_t kc, const float *a,
                                                       int64_t lda, const float *b, int64_t ldb,
                                                       float *c, int64_t ldc)
{
    v8 c0[MR], c1[MR];
    for (int r = 0; r < mr; r++) {
        V8_LOAD(c0[r], c + r * ldc);
        V8_LOAD(c1[r], c + r * ldc + 8);
    }
    for (int64_t k = 0; k < kc; k++) {
        v8 b0, b1;
        V8_LOAD(b0, b + k * ldb);
        V8_LOAD(b1, b + k * ldb + 8);
        for (int r = 0; r < mr; r++) {
            float av = a[r * lda + k];
            c0[r] += b0 * av;
            c1[r] += b1 * av;
        }
    }
    for (int r = 0; r < mr; r++) {
        V8_STORE(c + r * ldc, c0[r]);
        V8_STORE(c + r * ldc + 8, c1[r]);
    }
}

/* ct[mc, NB] += ap[mc, KB] bp[kc, NB] over the first ncp (a multiple of NR) columns. */
GP_CLONES static void block(int64_t mc, int64_t ncp, int64_t kc, const float *ap, const float *bp,
                            float *ct)
{
    for (int64_t m = 0; m < mc; m += MR) {
        int64_t mr = mc - m < MR ? mc - m : MR;
        for (int64_t n = 0; n < ncp; n += NR) {
            const float *a = ap + m * KB, *b = bp + n;
            float *c = ct + m * NB + n;
            switch (mr) {
            case 4: tile(4, kc, a, KB, b, NB, c, NB); break;
            case 3: tile(3, kc, a, KB, b, NB, c, NB); break;
            case 2: tile(2, kc, a, KB, b, NB, c, NB); break;
            default: tile(1, kc, a, KB, b, NB, c, NB); break;
            }
        }
    }
}

/* A matrix view: element (i, j) at p + i * si + j * sj. */
typedef struct {
    const char *p;
    gp_dtype t;
    int64_t si, sj;
} mview;

/* bp[k][j] = B(k0 + k, n0 + j) for k < kc, j < nc; columns nc..ncp are zero. */
static void pack_b(float *bp, const mview *B, int64_t k0, int64_t kc, int64_t n0, int64_t nc,
                   int64_t ncp)
{
    int64_t es = (int64_t)gp_dtype_size(B->t);
    if (B->si == es && B->sj != es) {
        /* Columns are contiguous (a transposed B, as a Linear weight [N, K]): load, then scatter. */
        float col[KB];
        for (int64_t j = 0; j < nc; j++) {
            gp_cpu_load_row(col, B->p + k0 * B->si + (n0 + j) * B->sj, kc, B->si, B->t);
            for (int64_t k = 0; k < kc; k++)
                bp[k * NB + j] = col[k];
        }
    } else {
        for (int64_t k = 0; k < kc; k++)
            gp_cpu_load_row(bp + k * NB, B->p + (k0 + k) * B->si + n0 * B->sj, nc, B->sj, B->t);
    }
    for (int64_t k = 0; k < kc; k++)
        for (int64_t j = nc; j < ncp; j++)
            bp[k * NB + j] = 0.0f;
}

void gp_cpu_matmul(const gp_attrs *at, const gp_ktensor *out, const gp_ktensor *in, int ith,
                   int nth)
{
    gp_t4 o = gp_t4_of(out), a = gp_t4_of(&in[0]), b = gp_t4_of(&in[1]);
    int ta = at->i[0] != 0, tb = at->i[1] != 0;
    int64_t M = o.ne[2], N = o.ne[3], K = ta ? a.ne[2] : a.ne[3];
    int64_t sam = ta ? a.nb[3] : a.nb[2], sak = ta ? a.nb[2] : a.nb[3];
    int64_t sbk = tb ? b.nb[3] : b.nb[2], sbn = tb ? b.nb[2] : b.nb[3];
    int64_t som = o.nb[2], son = o.nb[3];
    GP_ASSERT((ta ? a.ne[3] : a.ne[2]) == M && (tb ? b.ne[2] : b.ne[3]) == N);
    GP_ASSERT((tb ? b.ne[3] : b.ne[2]) == K);

    /* A shared B (no batch dims of its own): fold a's batch dims into M when its rows and out's
     * are evenly spaced across them, so B blocks are packed once for all rows. */
    if (b.ne[0] == 1 && b.ne[1] == 1) {
        for (int d = 1; d >= 0; d--) {
            int64_t n = o.ne[d];
            if (n == 1 || (a.ne[d] == n && a.nb[d] == M * sam && o.nb[d] == M * som)) {
                M *= n;
                o.ne[d] = a.ne[d] = 1;
            } else {
                break;
            }
        }
    }

    int64_t nbat = o.ne[0] * o.ne[1], mblk = (M + MB - 1) / MB, nblk = (N + NB - 1) / NB, i0, i1;
    _Alignas(64) float ap[MB * KB];
    _Alignas(64) float bp[KB * NB];
    _Alignas(64) float ct[MB * NB];
    gp_share(nbat * nblk * mblk, ith, nth, &i0, &i1);
    for (int64_t item = i0; item < i1; item++) {
        /* Items run batch, then column block, then row block: consecutive items of one thread
         * share a column block of B. */
        int64_t bi = item / (nblk * mblk), nbi = (item / mblk) % nblk, mbi = item % mblk;
        int64_t b0 = bi / o.ne[1], b1 = bi % o.ne[1];
        mview A = {a.p + (a.ne[0] == 1 ? 0 : b0 * a.nb[0]) + (a.ne[1] == 1 ? 0 : b1 * a.nb[1]), a.t,
                   sam, sak};
        mview B = {b.p + (b.ne[0] == 1 ? 0 : b0 * b.nb[0]) + (b.ne[1] == 1 ? 0 : b1 * b.nb[1]), b.t,
                   sbk, sbn};
        char *po = o.p + b0 * o.nb[0] + b1 * o.nb[1];
        int64_t m0 = mbi * MB, mc = M - m0 < MB ? M - m0 : MB;
        int64_t n0 = nbi * NB, nc = N - n0 < NB ? N - n0 : NB, ncp = (nc + NR - 1) / NR * NR;
        for (int64_t i = 0; i < mc * NB; i++)
            ct[i] = 0.0f;
        for (int64_t k0 = 0; k0 < K; k0 += KB) {
            int64_t kc = K - k0 < KB ? K - k0 : KB;
            for (int64_t i = 0; i < mc; i++)
                gp_cpu_load_row(ap + i * KB, A.p + (m0 + i) * A.si + k0 * A.sj, kc, A.sj, A.t);
            pack_b(bp, &B, k0, kc, n0, nc, ncp);
            block(mc, ncp, kc, ap, bp, ct);
        }
        for (int64_t i = 0; i < mc; i++)
            gp_cpu_store_row(po + (m0 + i) * som + n0 * son, son, o.t, ct + i * NB, nc);
    }
}
