/* CPU matmul: out[..., M, N] = a[..., M, K] b[..., K, N] over any strides, dtypes and transposes.
 * B with columns contiguous in k (every Linear weight, tb=1): the lanes path, FMA kernels per
 * instruction set (cpu/cpu_dot.h) reading the weights in their stored dtype; with rows
 * contiguous in n (a [K, N] weight) the rows path, the same kernels' other form. Any other B: the
 * cache-blocked path, tiles of A and B packed to f32 on the stack (no workspace), then a 4x16
 * register kernel accumulating in f32 with k in ascending order (no FMA). Every path stores rows
 * through an optional epilogue (bias, activation, residual: gp_mm_epilogue) and takes its work
 * items either in even shares or from a counter the threads share (gp_cpu_matmul_epi). */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "cpu/cpu_dot.h"
#include "cpu/cpu_internal.h"
#include "cpu/quant.h"

/* Block sizes: an A block [MB, KB] (32 KiB) and a B block [KB, NB] (32 KiB) fit in L2, one B
 * panel [KB, NR] (8 KiB) in L1. Stack use: (MB KB + KB NB + MB NB + KB) floats = 80.5 KiB. */
enum { MR = 4, NR = 16, MB = 64, NB = 64, KB = 128 };

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

/* One matmul after shape handling: nbat batches of out[M, N] = A[M, K] B[K, N]. */
typedef struct {
    gp_t4 o, a, b; /* batch dims in [0], [1]; a dim of 1 broadcasts */
    int64_t M, N, K;
    int64_t sam, sak, sbk, sbn, som, son; /* byte strides of A (m, k), B (k, n), out (m, n) */
    const gp_mm_epilogue *epi;            /* 2-D products only; else NULL */
    atomic_llong *next;                   /* shared item counter (from 0), or NULL: static shares */
} mm_problem;

/* The next run of work items [*i0, *i1) out of n for thread ith; 0 when none is left. Without a
 * counter, thread ith's even share in one run; with one, runs of about n / (8 nth) items taken in
 * turn, so a thread that runs late (a loaded machine) leaves its items to the others. Every item
 * is computed whole by whichever thread takes it, so the results do not depend on the split. */
static int take_items(const mm_problem *q, int64_t n, int ith, int nth, int *first, int64_t *i0,
                      int64_t *i1)
{
    if (!q->next) {
        if (!*first)
            return 0;
        *first = 0;
        gp_share(n, ith, nth, i0, i1);
        return 1;
    }
    int64_t run = n / (8 * (int64_t)nth);
    if (run < 1)
        run = 1;
    int64_t s = (int64_t)atomic_fetch_add_explicit(q->next, (long long)run, memory_order_relaxed);
    if (s >= n)
        return 0;
    *i0 = s;
    *i1 = s + run < n ? s + run : n;
    return 1;
}

/* Stores row m (of M; batch base po) of out, columns [n0, n0 + nc) from v[0..nc), after the
 * epilogue's steps (v is scratch). */
static void out_row(const mm_problem *q, char *po, int64_t m, int64_t n0, float *v, int64_t nc)
{
    const gp_mm_epilogue *e = q->epi;
    for (int s = 0; e && s < e->n; s++) {
        if (e->s[s].kind == GP_EPI_BIAS) {
            const float *t = e->s[s].t + n0;
            for (int64_t j = 0; j < nc; j++)
                v[j] += t[j];
        } else if (e->s[s].kind == GP_EPI_RESIDUAL) {
            const float *t = e->s[s].t + m * e->s[s].ld + n0;
            for (int64_t j = 0; j < nc; j++)
                v[j] += t[j];
        } else {
            gp_cpu_unary(e->s[s].op, e->s[s].at, v, nc);
        }
    }
    gp_cpu_store_row(po + m * q->som + n0 * q->son, q->son, q->o.t, v, nc);
}

/* A and B of batch bi, and out's batch base. */
static void mm_batch(const mm_problem *q, int64_t bi, mview *A, mview *B, char **po)
{
    int64_t b0 = bi / q->o.ne[1], b1 = bi % q->o.ne[1];
    A->p = q->a.p + (q->a.ne[0] == 1 ? 0 : b0 * q->a.nb[0]) + (q->a.ne[1] == 1 ? 0 : b1 * q->a.nb[1]);
    A->t = q->a.t;
    A->si = q->sam;
    A->sj = q->sak;
    B->p = q->b.p + (q->b.ne[0] == 1 ? 0 : b0 * q->b.nb[0]) + (q->b.ne[1] == 1 ? 0 : b1 * q->b.nb[1]);
    B->t = q->b.t;
    B->si = q->sbk;
    B->sj = q->sbn;
    *po = q->o.p + b0 * q->o.nb[0] + b1 * q->o.nb[1];
}

/* The blocked path: work items are (batch, column block, row block) tiles of out. */
static void mm_gemm(const mm_problem *q, int ith, int nth)
{
    int64_t M = q->M, N = q->N, K = q->K;
    int64_t nbat = q->o.ne[0] * q->o.ne[1], mblk = (M + MB - 1) / MB, nblk = (N + NB - 1) / NB;
    int64_t i0, i1;
    _Alignas(64) float ap[MB * KB];
    _Alignas(64) float bp[KB * NB];
    _Alignas(64) float ct[MB * NB];
    for (int first = 1; take_items(q, nbat * nblk * mblk, ith, nth, &first, &i0, &i1);)
    for (int64_t item = i0; item < i1; item++) {
        /* Items run batch, then column block, then row block. */
        int64_t bi = item / (nblk * mblk), nbi = (item / mblk) % nblk, mbi = item % mblk;
        mview A, B;
        char *po;
        mm_batch(q, bi, &A, &B, &po);
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
            out_row(q, po, m0 + i, n0, ct + i * NB, nc);
    }
}

/* ---- the lanes path: B's columns contiguous in k (a Linear weight [N, K]), any M ----
 * out(m, n) = the 16 lanes of cpu/cpu_dot.h (lane l: fused multiply-adds over k % 16 == l,
 * k ascending) summed pairwise (gp_dot_total): an order fixed by K
 * alone, the same for decode and prompts, every block size and every thread count. Weights are
 * read in their stored dtype, widened in registers. Work items: (batch, group of NG columns,
 * block of MB rows), rows fastest, so a thread reuses a column group's weights from L2 for every
 * row block; within an item, blocks of KB k keep the rows of a and w in L1 across kernel calls.
 * Stack: (MB NG 17 + MB KB + NG KB) floats = 179 KiB. */
enum { MB_L = 48, NG_L = 16, KB_L = 512 };

/* The portable build of the kernel: the same lanes and fused operations (fmaf), so the same bits
 * as the SIMD builds. */
void gp_dot_portable(int rm, int64_t kc, const float *const *a, const char *const *w, gp_dtype wt,
                     float *acc, int64_t am, int first, float *tot, int64_t ldt, int64_t pf)
{
    (void)pf;
    int64_t kp = (kc + GP_DOT_LANES - 1) / GP_DOT_LANES * GP_DOT_LANES;
    for (int m = 0; m < rm; m++)
        for (int n = 0; n < GP_DOT_RN; n++) {
            float c[GP_DOT_LANES];
            for (int l = 0; l < GP_DOT_LANES; l++)
                c[l] = first ? 0.0f : acc[m * am + n * GP_DOT_LANES + l];
            for (int64_t k = 0; k < kp; k++) {
                float x = k < kc ? a[m][k] : 0.0f, y = k < kc ? gp_dot_elt(wt, w[n], k) : 0.0f;
                c[k % GP_DOT_LANES] = fmaf(x, y, c[k % GP_DOT_LANES]);
            }
            if (tot)
                tot[m * ldt + n] = gp_dot_total(c);
            else
                memcpy(acc + m * am + n * GP_DOT_LANES, c, sizeof c);
        }
}

static atomic_int dot_level = -1; /* -1: not chosen yet */

#ifdef GP_DOT_X86
#include <cpuid.h>
/* F16C from CPUID (clang's __builtin_cpu_supports does not know "f16c"). */
static int cpu_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#endif

static int dot_best(void)
{
#ifdef GP_DOT_X86
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_f16c();
    if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl"))
        return 2;
    return avx2 ? 1 : 0;
#elif defined(GP_DOT_NEON)
    return 1; /* Advanced SIMD: every ARMv8-A processor */
#else
    return 0;
#endif
}

int gp_cpu_dot_level(int want)
{
    int best = dot_best();
    int l = want < 0 || want > best ? best : want;
    atomic_store(&dot_level, l);
    return l;
}

/* The level in use, set to the best the CPU has on first use. */
static int level_now(void)
{
    int l = atomic_load_explicit(&dot_level, memory_order_relaxed);
    return l < 0 ? gp_cpu_dot_level(-1) : l;
}

const char *gp_cpu_dot_name(void)
{
#ifdef GP_DOT_NEON
    static const char *const names[] = {"portable", "neon"};
#else
    static const char *const names[] = {"portable", "avx2", "avx512"};
#endif
    return names[level_now()];
}

gp_dot_fn gp_cpu_dot(void)
{
    int l = level_now();
#ifdef GP_DOT_X86
    if (l == 2)
        return gp_dot_avx512;
    if (l == 1)
        return gp_dot_avx2;
#elif defined(GP_DOT_NEON)
    if (l == 1)
        return gp_dot_neon;
#endif
    return gp_dot_portable;
}

gp_rows_fn gp_cpu_rows(void)
{
    int l = level_now();
#ifdef GP_DOT_X86
    if (l == 2)
        return gp_rows_avx512;
    if (l == 1)
        return gp_rows_avx2;
#elif defined(GP_DOT_NEON)
    if (l == 1)
        return gp_rows_neon;
#endif
    return gp_rows_portable;
}

void gp_rows_portable(int rm, int64_t kc, const float *const *a, const char *b, int64_t ldb,
                      gp_dtype bt, int nc, float *acc, int first)
{
    for (int m = 0; m < rm; m++)
        for (int j = 0; j < nc; j++) {
            float c = first ? 0.0f : acc[m * 64 + j];
            for (int64_t k = 0; k < kc; k++)
                c = fmaf(a[m][k], gp_dot_elt(bt, b + k * ldb, j), c);
            acc[m * 64 + j] = c;
        }
}

gp_attn_scores_fn gp_cpu_attn_scores(void)
{
    int l = level_now();
#ifdef GP_DOT_X86
    if (l == 2)
        return gp_attn_scores_avx512;
    if (l == 1)
        return gp_attn_scores_avx2;
#elif defined(GP_DOT_NEON)
    if (l == 1)
        return gp_attn_scores_neon;
#endif
    return gp_attn_scores_portable;
}

int gp_cpu_attn_group(gp_attn_scores_group_fn *scores, gp_attn_accum_group_fn *accum)
{
#ifdef GP_DOT_X86
    if (level_now() == 2) {
        *scores = gp_attn_scores_group_avx512;
        *accum = gp_attn_accum_group_avx512;
        return 1;
    }
#elif defined(GP_DOT_NEON)
    if (level_now() == 1) {
        *scores = gp_attn_scores_group_neon;
        *accum = gp_attn_accum_group_neon;
        return 1;
    }
#endif
    (void)scores, (void)accum;
    return 0;
}

gp_attn_accum_fn gp_cpu_attn_accum(void)
{
    int l = level_now();
#ifdef GP_DOT_X86
    if (l == 2)
        return gp_attn_accum_avx512;
    if (l == 1)
        return gp_attn_accum_avx2;
#elif defined(GP_DOT_NEON)
    if (l == 1)
        return gp_attn_accum_neon;
#endif
    return gp_attn_accum_portable;
}

/* The lanes path when a is f32 with contiguous rows and the weights are read in place: every
 * kernel call runs over all of k (the lanes stay in registers from the first k to the totals,
 * rather than being stored between blocks of KB_L k). Work items: (batch, strip of NS_F columns,
 * block of MB_L rows), rows fastest; in an item, each slice of GP_DOT_RM rows of a meets every
 * column group of the strip before the next slice, the strip's weights staying in L2. */
enum { NS_F = 64 };

static void mm_lanes_full(const mm_problem *q, int ith, int nth)
{
    int64_t M = q->M, N = q->N, K = q->K, nbat = q->o.ne[0] * q->o.ne[1];
    int64_t mblk = (M + MB_L - 1) / MB_L, nstr = (N + NS_F - 1) / NS_F, i0, i1;
    gp_dot_fn dot = gp_cpu_dot();
    _Alignas(64) float tot[MB_L * NS_F]; /* [MB][NS] the sums */
    for (int first = 1; take_items(q, nbat * nstr * mblk, ith, nth, &first, &i0, &i1);)
    for (int64_t item = i0; item < i1; item++) {
        int64_t bi = item / (nstr * mblk), st = (item / mblk) % nstr, mbi = item % mblk;
        mview A, B;
        char *po;
        mm_batch(q, bi, &A, &B, &po);
        int64_t m0 = mbi * MB_L, mc = M - m0 < MB_L ? M - m0 : MB_L;
        int64_t n0 = st * NS_F, nc = N - n0 < NS_F ? N - n0 : NS_F;
        /* The first slice reads the strip's weights from memory: it prefetches the next call's
         * rows; the later slices find them in L2. */
        int64_t pf = GP_DOT_RN * B.sj;
        const float *ar[MB_L];
        const char *wr[NS_F];
        for (int64_t i = 0; i < mc; i++)
            ar[i] = (const float *)(const void *)(A.p + (m0 + i) * A.si);
        for (int64_t j = 0; j < NS_F; j++) /* columns past nc repeat the last (never stored) */
            wr[j] = B.p + (n0 + (j < nc ? j : nc - 1)) * B.sj;
        if (K == 0)
            memset(tot, 0, sizeof tot);
        else
            for (int64_t i = 0; i < mc; i += GP_DOT_RM) {
                int rm = mc - i < GP_DOT_RM ? (int)(mc - i) : GP_DOT_RM;
                for (int64_t j = 0; j < nc; j += GP_DOT_RN)
                    dot(rm, K, ar + i, wr + j, B.t, NULL, 0, 1, tot + i * NS_F + j, NS_F,
                        i == 0 ? pf : 0);
            }
        for (int64_t i = 0; i < mc; i++)
            out_row(q, po, m0 + i, n0, tot + i * NS_F, nc);
    }
}

static void mm_lanes(const mm_problem *q, int ith, int nth)
{
    int64_t M = q->M, N = q->N, K = q->K, nbat = q->o.ne[0] * q->o.ne[1];
    int64_t mblk = (M + MB_L - 1) / MB_L, ngrp = (N + NG_L - 1) / NG_L, i0, i1;
    gp_dot_fn dot = gp_cpu_dot();
    int a_direct = q->a.t == GP_F32 && q->sak == 4;
    int w_direct = q->b.t == GP_F32 || q->b.t == GP_F16 || q->b.t == GP_BF16;
    _Alignas(64) float acc[MB_L * NG_L * GP_DOT_LANES]; /* [MB][NG][16] */
    _Alignas(64) float tot[MB_L * NG_L];                /* [MB][NG] the sums */
    _Alignas(64) float abuf[MB_L * KB_L];               /* [MB][KB] rows of a as f32 */
    _Alignas(64) float wbuf[NG_L * KB_L];               /* [NG][KB] rows of w as f32 */
    for (int first = 1; take_items(q, nbat * ngrp * mblk, ith, nth, &first, &i0, &i1);)
    for (int64_t item = i0; item < i1; item++) {
        int64_t bi = item / (ngrp * mblk), g = (item / mblk) % ngrp, mbi = item % mblk;
        mview A, B;
        char *po;
        mm_batch(q, bi, &A, &B, &po);
        int64_t m0 = mbi * MB_L, mc = M - m0 < MB_L ? M - m0 : MB_L;
        int64_t n0 = g * NG_L, nc = N - n0 < NG_L ? N - n0 : NG_L;
        /* One pass over all of k when nothing needs converting and the rows fit one kernel call
         * (decode): the weights then stream once, row by row. */
        int64_t kb = a_direct && w_direct && mc <= GP_DOT_RM ? K : KB_L;
        gp_dtype wt = w_direct ? B.t : GP_F32;
        /* Weights read in place stream from memory at decode: each call prefetches, at the k it
         * reads, the rows of the next call (GP_DOT_RN rows on); short rows (GPT-2's K of 768)
         * leave a fixed distance along a row no room to run ahead. */
        int64_t pf = w_direct ? GP_DOT_RN * B.sj : 0;
        if (K == 0)
            memset(tot, 0, sizeof tot);
        for (int64_t k0 = 0; k0 < K; k0 += kb) {
            int64_t kc = K - k0 < kb ? K - k0 : kb;
            const float *ar[MB_L];
            const char *wr[NG_L];
            for (int64_t i = 0; i < mc; i++) {
                const char *src = A.p + (m0 + i) * A.si + k0 * A.sj;
                if (a_direct) {
                    ar[i] = (const float *)(const void *)src;
                } else {
                    gp_cpu_load_row(abuf + i * KB_L, src, kc, A.sj, A.t);
                    ar[i] = abuf + i * KB_L;
                }
            }
            for (int64_t j = 0; j < NG_L; j++) {
                /* Columns past nc repeat the last one; their sums are never stored. */
                int64_t jj = j < nc ? j : nc - 1;
                const char *src = B.p + (n0 + jj) * B.sj + k0 * B.si;
                if (w_direct) {
                    wr[j] = src;
                } else if (j < nc) {
                    gp_cpu_load_row(wbuf + j * KB_L, src, kc, B.si, B.t);
                    wr[j] = (const char *)(wbuf + j * KB_L);
                } else {
                    wr[j] = wr[nc - 1];
                }
            }
            for (int64_t i = 0; i < mc; i += GP_DOT_RM) {
                int rm = mc - i < GP_DOT_RM ? (int)(mc - i) : GP_DOT_RM;
                for (int64_t j = 0; j < nc; j += GP_DOT_RN)
                    dot(rm, kc, ar + i, wr + j, wt, acc + (i * NG_L + j) * GP_DOT_LANES,
                        NG_L * GP_DOT_LANES, k0 == 0, k0 + kc >= K ? tot + i * NG_L + j : NULL,
                        NG_L, pf);
            }
        }
        for (int64_t i = 0; i < mc; i++)
            out_row(q, po, m0 + i, n0, tot + i * NG_L, nc);
    }
}

/* ---- the rows path: B's rows contiguous in n (a [K, N] weight, tb=0) ----
 * out(m, n) = one chain of fused multiply-adds over k ascending (cpu/cpu_dot.h, gp_rows_fn),
 * B read in its stored dtype. Work items: (batch, strip of 64 columns, block of MB rows), rows
 * fastest; blocks of KB k (all of k for a block of at most 6 rows: decode streams B once). Stack:
 * (MB 64 + MB KB) floats = 60 KiB. */
enum { MB_R = 48, NS_R = 64, KB_R = 256 };

static void mm_rows(const mm_problem *q, int ith, int nth)
{
    int64_t M = q->M, N = q->N, K = q->K, nbat = q->o.ne[0] * q->o.ne[1];
    int64_t mblk = (M + MB_R - 1) / MB_R, nstr = (N + NS_R - 1) / NS_R, i0, i1;
    gp_rows_fn rows = gp_cpu_rows();
    int a_direct = q->a.t == GP_F32 && q->sak == 4;
    _Alignas(64) float acc[MB_R * NS_R]; /* [MB][64] */
    _Alignas(64) float abuf[MB_R * KB_R]; /* [MB][KB] rows of a as f32 */
    for (int first = 1; take_items(q, nbat * nstr * mblk, ith, nth, &first, &i0, &i1);)
    for (int64_t item = i0; item < i1; item++) {
        int64_t bi = item / (nstr * mblk), st = (item / mblk) % nstr, mbi = item % mblk;
        mview A, B;
        char *po;
        mm_batch(q, bi, &A, &B, &po);
        int64_t m0 = mbi * MB_R, mc = M - m0 < MB_R ? M - m0 : MB_R;
        int64_t n0 = st * NS_R, nc = N - n0 < NS_R ? N - n0 : NS_R;
        int64_t kb = a_direct && mc <= GP_DOT_RM ? K : KB_R;
        if (K == 0)
            memset(acc, 0, sizeof acc);
        for (int64_t k0 = 0; k0 < K; k0 += kb) {
            int64_t kc = K - k0 < kb ? K - k0 : kb;
            const float *ar[MB_R];
            for (int64_t i = 0; i < mc; i++) {
                const char *src = A.p + (m0 + i) * A.si + k0 * A.sj;
                if (a_direct) {
                    ar[i] = (const float *)(const void *)src;
                } else {
                    gp_cpu_load_row(abuf + i * KB_R, src, kc, A.sj, A.t);
                    ar[i] = abuf + i * KB_R;
                }
            }
            for (int64_t i = 0; i < mc; i += GP_DOT_RM) {
                int rm = mc - i < GP_DOT_RM ? (int)(mc - i) : GP_DOT_RM;
                rows(rm, kc, ar + i, B.p + k0 * B.si + n0 * B.sj, B.si, B.t, (int)nc,
                     acc + i * NS_R, k0 == 0);
            }
        }
        for (int64_t i = 0; i < mc; i++)
            out_row(q, po, m0 + i, n0, acc + i * NS_R, nc);
    }
}

void gp_cpu_matmul(const gp_attrs *at, const gp_ktensor *out, const gp_ktensor *in, int ith,
                   int nth)
{
    gp_cpu_matmul_epi(at, out, in, NULL, NULL, ith, nth);
}

void gp_cpu_matmul_epi(const gp_attrs *at, const gp_ktensor *out, const gp_ktensor *in,
                       const gp_mm_epilogue *e, atomic_llong *next, int ith, int nth)
{
    mm_problem q;
    GP_ASSERT(!e || (out->ndim == 2 && out->dtype == GP_F32));
    q.epi = e;
    q.next = next;
    q.o = gp_t4_of(out);
    q.a = gp_t4_of(&in[0]);
    q.b = gp_t4_of(&in[1]);
    int ta = at->i[GP_MATMUL_TA] != 0, tb = at->i[GP_MATMUL_TB] != 0;
    gp_t4 *o = &q.o, *a = &q.a, *b = &q.b;
    q.M = o->ne[2];
    q.N = o->ne[3];
    q.K = ta ? a->ne[2] : a->ne[3];
    q.sam = ta ? a->nb[3] : a->nb[2];
    q.sak = ta ? a->nb[2] : a->nb[3];
    q.sbk = tb ? b->nb[3] : b->nb[2];
    q.sbn = tb ? b->nb[2] : b->nb[3];
    q.som = o->nb[2];
    q.son = o->nb[3];
    GP_ASSERT((ta ? a->ne[3] : a->ne[2]) == q.M && (tb ? b->ne[2] : b->ne[3]) == q.N);
    GP_ASSERT((tb ? b->ne[3] : b->ne[2]) == q.K);

    /* A shared B (no batch dims of its own): fold a's batch dims into M when its rows and out's
     * are evenly spaced across them, so B is read once for all rows. */
    if (b->ne[0] == 1 && b->ne[1] == 1) {
        for (int d = 1; d >= 0; d--) {
            int64_t n = o->ne[d];
            if (n == 1 || (a->ne[d] == n && a->nb[d] == q.M * q.sam && o->nb[d] == q.M * q.som)) {
                q.M *= n;
                o->ne[d] = a->ne[d] = 1;
            } else {
                break;
            }
        }
    }
    /* The path depends on shapes only, never on nth. */
    int64_t es = (int64_t)gp_dtype_size(b->t);
    int fl = b->t == GP_F32 || b->t == GP_F16 || b->t == GP_BF16;
    if (q.sbk == es && q.a.t == GP_F32 && q.sak == 4 && fl && q.M > GP_DOT_RM)
        mm_lanes_full(&q, ith, nth);
    else if (q.sbk == es)
        mm_lanes(&q, ith, nth);
    else if (q.sbn == es && fl)
        mm_rows(&q, ith, nth);
    else
        mm_gemm(&q, ith, nth);
}

/* ---- quantized weights (cpu/quant.h) ----
 * f32 activations times blocks dequantized on the fly (gp_quant_matmul_f32): the result is the
 * dequantized weights' product up to summation order, as transformers computes a GGUF model.
 * Threads split the output columns; the split changes no result, so every thread count gives the
 * same bits. */

void gp_cpu_matmul_quant(const gp_ktensor *out, const gp_ktensor *in, void *ws, size_t ws_size,
                         int ith, int nth)
{
    const gp_ktensor *x = &in[0], *w = &in[1];
    int64_t n0, n1, N = w->ne[0];
    /* prompts on AMX where the CPU has it and the plan gave the workspace (cpu/quant.h) */
    if (gp_quant_matmul_ws(w->dtype, w->data, N, x->data, x->nb[0] / (int64_t)sizeof(float),
                           x->ne[0], x->ne[1], out->data, out->nb[0] / (int64_t)sizeof(float), ws,
                           ws_size, ith, nth))
        return;
    /* Shares of whole 16-column groups, so the SIMD paths see full tiles. */
    gp_share((N + 15) / 16, ith, nth, &n0, &n1);
    n0 *= 16;
    n1 = n1 * 16 < N ? n1 * 16 : N;
    if (n0 < n1)
        gp_quant_matmul_f32(w->dtype, w->data, n0, n1, x->data, x->nb[0] / (int64_t)sizeof(float),
                            x->ne[0], x->ne[1], out->data, out->nb[0] / (int64_t)sizeof(float));
}
