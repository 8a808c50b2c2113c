/* CUDA attention: causal scaled-dot-product attention of new queries over a KV cache (grouped-query),
 * with an online softmax. Few queries (decode): the cache rows 0..pos[t] are split over
 * GP_WS_ATTN_SPLITS blocks whose partial results go to the planned workspace and are combined by
 * the last of those blocks to finish (or by a second kernel); many queries (a prompt): tiles of 64
 * queries of a head against tiles of 64 cache rows, on tensor cores for f16 caches
 * (k_attention_mma), else in f32 (k_attention_tiles), or one block per (query, head). One token
 * with its K/V cache stores (and the ropes before them) inside: gp_cuda_attention_decode. */
#include <atomic>
#include <stdio.h>
#include <string.h>

#include "cuda/cuda_attention.cuh"
#include "cuda/cuda_matvec.cuh"

/*
 * q (1, T, H, D), k and v (1, S, G, D), pos [T] -> out (1, T, H, D), one block per (h, t, split);
 * query t attends to positions att_lo..pos[t] (their rows in a ring), scores soft-capped (mk).
 * nsplit == 1: the normalized result goes to out. Else partials to part: f32 [nsplit, Tl, H, D + 2]
 * (accumulator scaled by exp(-max), then max and sum), Tl the launch T; with counters (zero between
 * launches, [Tl * H]), the last block of each (h, t) to finish combines them into out and resets
 * its counter; without, k_attention_combine does.
 */
template <int J>
__global__ void __launch_bounds__(ATT_WARPS * 32)
    k_attention(float scale, AttMask mk0, KT o, KT q, KT k, KT v, KT pos, float *part, int64_t Tl,
                unsigned *counters, int pf, const int64_t *syms)
{
    __shared__ AttSmem<J> sm;
    if (pf)
        prefetch_rows(q, k, v, pos, syms, mk0);
    pdl_begin();
    kt_resolve(o, syms);
    kt_resolve(q, syms);
    int64_t T = q.ne[1], H = q.ne[2], D = q.ne[3], S = k.ne[1], G = k.ne[2];
    int64_t h = blockIdx.x, t = blockIdx.y, g = h / (H / G);
    int nsplit = gridDim.z, split = blockIdx.z, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (t >= T)
        return;
    int32_t p = *(const int32_t *)(pos.p + t * pos.nb[3]);
    if (!att_pos_ok(mk0, p, S))
        return; /* the runtime checks pos before the eval */
    AttMask mk = att_for_query(mk0, t);
    int64_t s0, s1;
    split_rows(att_lo(mk, p), p, nsplit, split, &s0, &s1);
    float qv[J], acc[J];
    uint32_t qb[J];
    const char *pq = q.p + t * q.nb[1] + h * q.nb[2], *pk = k.p + g * k.nb[2];
    const char *pv = v.p + g * v.nb[2];
#pragma unroll
    for (int j = 0; j < J; j++) {
        int64_t d = lane + 32 * j;
        qb[j] = d < D ? ld_bits(pq + d * q.nb[3], q.t) : 0;
    }
#pragma unroll
    for (int j = 0; j < J; j++) {
        qv[j] = lane + 32 * j < D ? bits_f(qb[j], q.t) : 0.0f;
        acc[j] = 0.0f;
    }
    /* Each warp takes every ATT_WARPS-th key. (Prompts run many blocks: no AttPipe here.) */
    KvRows<J> rows;
    float m = -INFINITY, l = 0.0f;
    attend_rows<J, false>(qv, rows, pk, pv, k, v, D, s0 + w, s1, scale, mk, m, l, acc);
    attend_finish(sm, m, l, acc, o, h, t, nsplit, split, part, Tl, counters);
}

/* Combines the nsplit partials of each (h, t): one block each. */
__global__ void k_attention_combine(int nsplit, KT o, KT pos, int64_t S, int ring,
                                    const float *part, int64_t Tl, const int64_t *syms)
{
    __shared__ float wgt[GP_WS_ATTN_SPLITS];
    __shared__ float inv_l;
    pdl_begin();
    kt_resolve(o, syms);
    int64_t T = o.ne[1], h = blockIdx.x, t = blockIdx.y;
    if (t >= T)
        return;
    int32_t p = *(const int32_t *)(pos.p + t * pos.nb[3]);
    if (p < 0 || (!ring && p >= S))
        return;
    combine_partials(nsplit, o, h, t, part, Tl, wgt, &inv_l);
}

template <int J>
static void launch_att(dim3 grid, float scale, const AttMask &mk, KT o, KT q, KT k, KT v, KT p,
                       float *part, int64_t Tl, unsigned *counters, const gp_cu_ctx *c)
{
    gp_cu_launch(c, k_attention<J>, grid, ATT_WARPS * 32, 0, scale, mk, o, q, k, v, p, part, Tl,
                 counters, c->pdl && c->kv_prefetch && !mk.block, c->d_syms);
}

/* ---- prompts: tiles of queries against tiles of keys ---- */

/*
 * Many queries (a prompt): a block takes FA_BQ queries of one head and walks the cache rows
 * 0..max(pos) of its KV head FA_BK at a time, as in flash attention: the scores of the query
 * tile against a key tile, the online softmax per query row, the value tile times the
 * probabilities into the accumulator; shared memory holds the four tiles in f32, nothing goes to
 * global memory but out. The FA_THREADS threads are a 16 x 16 grid: thread (ty, tx) owns queries
 * 4 ty .. 4 ty + 3, keys tx + 16 j of a tile (j < 4) in the scores and dims 4 tx .. 4 tx + 3
 * (+ 64 per DP / 64) in the accumulator, so that a query row's 16 threads are one half-warp (its
 * max and sum: four shuffles). DP: D padded to 64 or 128. Query t attends rows 0..pos[t], as
 * k_attention, or its window's (mk; over a ring, position s in row s % S), scores soft-capped by
 * mk; its sums come in another order (f32 throughout).
 */
/*
 * One key tile's step of a query row's online softmax, the row spread over W lanes: x, this
 * thread's N scores of it (-INFINITY where masked), becomes exp(x - max); the row's running max
 * m and sum l move on. Returns the factor that rescales the row's accumulator (0 while m is
 * -INFINITY, when the accumulator holds nothing yet).
 */
template <int W, int N>
__device__ __forceinline__ float softmax_step(float (&x)[N], float &m, float &l)
{
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < N; j++)
        mx = fmaxf(mx, x[j]);
    mx = lanes_max<W>(mx);
    float mn = fmaxf(m, mx), base = mn == -INFINITY ? 0.0f : mn;
    float corr = expf(m - base), sum = 0.0f;
#pragma unroll
    for (int j = 0; j < N; j++) {
        x[j] = expf(x[j] - base);
        sum += x[j];
    }
    l = l * corr + lanes_sum<W>(sum);
    m = mn;
    return corr;
}

enum { FA_BQ = 64, FA_BK = 64, FA_THREADS = 256, FA_PAD = 4 };

template <int DP> struct FaSmem {
    enum { QK = DP + FA_PAD, /* a Q or K row (queries, keys: rows of DP dims) */
           P = FA_BQ + FA_PAD, /* a row of the probabilities, [key][query], over K's */
           FLOATS = FA_BQ * QK + FA_BK * QK + FA_BK * QK };
};

/* Rows [r0, r0 + 64) of x's head `hd` (x: [rows, heads, D]; rows before `first`, rows from
 * `rows` on and dims from D on are zeros) into s[64][stride], f32; ring > 0: row i of those is
 * x's row i % ring (positions in a ring cache). All of a thread's loads are issued before the
 * first conversion. */
template <int DP>
__device__ __forceinline__ void fa_load_tile(float *s, int stride, const KT &x, int64_t r0,
                                             int64_t rows, int64_t hd, int64_t D,
                                             int64_t first = 0, int64_t ring = 0)
{
    enum { STEP = FA_THREADS / DP, PER = 64 / STEP }; /* a thread: dim d of rows r + STEP i */
    int r = threadIdx.x / DP, d = threadIdx.x % DP;
    const char *p = x.p + hd * x.nb[2] + (r0 + r) * x.nb[1] + d * x.nb[3];
    const char *pr = x.p + hd * x.nb[2] + d * x.nb[3];
    int64_t adv = STEP * x.nb[1], left = d < D ? rows - r0 - r : 0, skip = first - r0 - r;
    uint32_t b[PER];
#pragma unroll
    for (int i = 0; i < PER; i++)
        b[i] = STEP * i < left && STEP * i >= skip
                   ? ld_bits(ring ? pr + (r0 + r + STEP * i) % ring * x.nb[1] : p + i * adv, x.t)
                   : 0;
#pragma unroll
    for (int i = 0; i < PER; i++)
        s[(r + STEP * i) * stride + d] = bits_f(b[i], x.t); /* 0 bits: 0.0f */
}

template <int DP>
__global__ void __launch_bounds__(FA_THREADS, 2)
    k_attention_tiles(float scale, AttMask mk, KT o, KT q, KT k, KT v, KT pos, const int64_t *syms)
{
    typedef FaSmem<DP> L;
    enum { NJ = DP / 64 }; /* accumulator dims per thread: 4 NJ */
    extern __shared__ float4 fa_raw[];
    float *qs = (float *)fa_raw, *ks = qs + FA_BQ * L::QK, *vs = ks + FA_BK * L::QK;
    float *ps = ks; /* the probabilities, once the scores are taken */
    __shared__ int32_t qpos[FA_BQ];
    __shared__ int32_t kend, kbeg; /* the block's positions: [kbeg, kend] (a window's start) */
    pdl_begin();
    kt_resolve(o, syms);
    kt_resolve(q, syms);
    kt_resolve(pos, syms);
    int64_t T = q.ne[1], H = q.ne[2], D = q.ne[3], S = k.ne[1], G = k.ne[2];
    int64_t h = blockIdx.x, g = h / (H / G);
    int64_t t0 = (int64_t)(gridDim.y - 1 - blockIdx.y) * FA_BQ; /* the longest tiles first */
    if (t0 >= T)
        return;
    int tid = threadIdx.x, ty = tid >> 4, tx = tid & 15;
    if (tid == 0) {
        kend = -1;
        kbeg = INT32_MAX;
    }
    __syncthreads();
    if (tid < FA_BQ) {
        int32_t p = t0 + tid < T ? *(const int32_t *)(pos.p + (t0 + tid) * pos.nb[3]) : -1;
        qpos[tid] = att_pos_ok(mk, p, S) ? p : -1; /* the runtime checks pos before the eval */
        atomicMax(&kend, qpos[tid]);
        if (qpos[tid] >= 0)
            atomicMin(&kbeg, (int32_t)att_lo(mk, qpos[tid]));
    }
    fa_load_tile<DP>(qs, L::QK, q, t0, T, h, D);
    __syncthreads();
    int32_t pr[4], lo[4];
    float m[4], l[4], acc[4][4 * NJ];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        pr[i] = qpos[4 * ty + i];
        lo[i] = pr[i] >= 0 ? (int32_t)att_lo(mk, pr[i]) : 0;
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int j = 0; j < 4 * NJ; j++)
            acc[i][j] = 0.0f;
    }
    int64_t first = kend >= 0 ? kbeg : 0; /* the windows' first row */
    for (int64_t s0 = first / FA_BK * FA_BK; s0 <= kend; s0 += FA_BK) {
        /* Rows past the block's last position, or before its windows' first, are zeros: no
         * query attends them, and a cache row not written yet must not bring a NaN into 0 * v. */
        fa_load_tile<DP>(ks, L::QK, k, s0, kend + 1, g, D, first, mk.ring);
        fa_load_tile<DP>(vs, L::QK, v, s0, kend + 1, g, D, first, mk.ring);
        __syncthreads();
        float sc[4][4];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
                sc[i][j] = 0.0f;
#pragma unroll 4
        for (int d = 0; d < DP; d += 4) {
            float4 qa[4], kb[4];
#pragma unroll
            for (int i = 0; i < 4; i++)
                qa[i] = *(const float4 *)(qs + (4 * ty + i) * L::QK + d);
#pragma unroll
            for (int j = 0; j < 4; j++)
                kb[j] = *(const float4 *)(ks + (tx + 16 * j) * L::QK + d);
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    sc[i][j] += qa[i].x * kb[j].x + qa[i].y * kb[j].y + qa[i].z * kb[j].z +
                                qa[i].w * kb[j].w;
        }
        __syncthreads(); /* every thread's scores are taken: P goes over K */
#pragma unroll
        for (int i = 0; i < 4; i++) {
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int64_t s = s0 + tx + 16 * j; /* a window's rows lo..p, soft-capped (mk) */
                sc[i][j] = s <= pr[i] && s >= lo[i] ? att_cap(mk, sc[i][j] * scale) : -INFINITY;
            }
            float corr = softmax_step<16>(sc[i], m[i], l[i]);
#pragma unroll
            for (int j = 0; j < 4 * NJ; j++)
                acc[i][j] *= corr;
        }
#pragma unroll
        for (int j = 0; j < 4; j++)
            *(float4 *)(ps + (tx + 16 * j) * L::P + 4 * ty) =
                make_float4(sc[0][j], sc[1][j], sc[2][j], sc[3][j]);
        __syncthreads();
#pragma unroll 4
        for (int c = 0; c < FA_BK; c++) {
            float4 pa = *(const float4 *)(ps + c * L::P + 4 * ty);
            float pv[4] = {pa.x, pa.y, pa.z, pa.w};
#pragma unroll
            for (int n = 0; n < NJ; n++) {
                float4 vb = *(const float4 *)(vs + c * L::QK + 64 * n + 4 * tx);
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    acc[i][4 * n] += pv[i] * vb.x;
                    acc[i][4 * n + 1] += pv[i] * vb.y;
                    acc[i][4 * n + 2] += pv[i] * vb.z;
                    acc[i][4 * n + 3] += pv[i] * vb.w;
                }
            }
        }
        __syncthreads(); /* K (under P) and V are loaded again */
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int64_t t = t0 + 4 * ty + i;
        if (pr[i] < 0)
            continue;
        char *po = o.p + t * o.nb[1] + h * o.nb[2];
#pragma unroll
        for (int n = 0; n < NJ; n++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int64_t d = 64 * n + 4 * tx + j;
                if (d < D)
                    st_f(po + d * o.nb[3], o.t, acc[i][4 * n + j] / l[i]);
            }
    }
}


/*
 * The same on tensor cores, for f16 caches (k_attention_mma): a block's 4 warps take 16 queries
 * each; per tile of 64 cache rows, S = q k^T and acc += P v are m16n8k16 products (f16 inputs,
 * f32 sums). q and P are f32: each is split into an f16 part and the f16 rest (x - f16(x)), and
 * both parts are multiplied, so the products keep ~22 bits of q and P (the cache's f16 values are
 * exact): about f32's accuracy, at twice the products. The tiles of K and V come into shared
 * memory with cp.async, the next while the current one is used. P stays in registers (a product's
 * result is laid out as the next product's operand). Needs D % 8 == 0, D <= 128, f16 rows of
 * 16-byte aligned chunks (tc_ok). A window (mk) starts the walk at the block's first window
 * position; over a ring, position s is row s % S; scores soft-capped by mk.
 */
enum { TC_WARPS = 4, TC_BQ = 16 * TC_WARPS, TC_BK = 64 };

template <int DP> struct TcSmem {
    enum { ROW = DP + 8, /* halves per K or V row: rows 16-byte aligned, conflict-free reads */
           TILE = TC_BK * ROW, /* halves of a K or V tile */
           BYTES = 2 * 2 * TILE * 2 /* two stages of K and V */ };
};

__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/* x as f16 (hi) and the f16 of what that leaves (lo), two columns packed per register. */
__device__ __forceinline__ void split2(float x0, float x1, uint32_t *hi, uint32_t *lo)
{
    __half h0 = __float2half_rn(x0), h1 = __float2half_rn(x1);
    __half l0 = __float2half_rn(x0 - __half2float(h0)), l1 = __float2half_rn(x1 - __half2float(h1));
    __half2 ph = __halves2half2(h0, h1), pl = __halves2half2(l0, l1);
    *hi = *(uint32_t *)&ph;
    *lo = *(uint32_t *)&pl;
}

/* Rows [s0, s0 + TC_BK) of a cache's KV head (its bytes at base, rows nb1 apart) into dst
 * [TC_BK][ROW] halves with cp.async; rows before `first`, rows from `rows` on and dims from D on
 * are zeros; ring > 0: row i of those is the cache's row i % ring. */
template <int DP>
__device__ __forceinline__ void tc_copy(__half *dst, const char *base, int64_t nb1, int64_t s0,
                                        int64_t rows, int64_t D, int64_t first, int64_t ring)
{
    enum { CH = DP / 8, N = TC_BK * CH / (TC_WARPS * 32) }; /* 16-byte chunks: a row, a thread */
#pragma unroll
    for (int i = 0; i < N; i++) {
        int c = threadIdx.x + TC_WARPS * 32 * i, r = c / CH, ch = c % CH;
        int ok = s0 + r >= first && s0 + r < rows && ch * 8 < D;
        int64_t row = ring ? (s0 + r) % ring : s0 + r;
        const char *src = ok ? base + row * nb1 + ch * 16 : base;
        unsigned d = (unsigned)__cvta_generic_to_shared(dst + r * TcSmem<DP>::ROW + ch * 8);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src),
                     "r"(ok ? 16 : 0)
                     : "memory");
#endif
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

template <int N> __device__ __forceinline__ void cp_async_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

template <int DP>
__global__ void __launch_bounds__(TC_WARPS * 32)
    k_attention_mma(float scale, AttMask mk, KT o, KT q, KT k, KT v, KT pos, const int64_t *syms)
{
    typedef TcSmem<DP> L;
    enum { KS = DP / 16, NT = TC_BK / 8, DT = DP / 8 };
    extern __shared__ uint4 tc_raw[];
    __half *sm = (__half *)tc_raw; /* stage s: K at sm + 2 s TILE, V after it */
    pdl_begin();
    kt_resolve(o, syms);
    kt_resolve(q, syms);
    kt_resolve(pos, syms);
    int64_t T = q.ne[1], H = q.ne[2], D = q.ne[3], S = k.ne[1], G = k.ne[2];
    int64_t h = blockIdx.x, hk = h / (H / G);
    int64_t t0 = (int64_t)(gridDim.y - 1 - blockIdx.y) * TC_BQ; /* the longest tiles first */
    if (t0 >= T)
        return;
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, tg = lane & 3;
    /* This thread's rows: r[0] = 16 w + g and r[1] = r[0] + 8 of the block's queries. */
    __shared__ int32_t warp_max[TC_WARPS], warp_min[TC_WARPS];
    int32_t pr[2], lo[2];
    int64_t tr[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        tr[i] = t0 + 16 * w + g + 8 * i;
        int32_t p = tr[i] < T ? *(const int32_t *)(pos.p + tr[i] * pos.nb[3]) : -1;
        pr[i] = att_pos_ok(mk, p, S) ? p : -1; /* the runtime checks pos before the eval */
        lo[i] = pr[i] >= 0 ? (int32_t)att_lo(mk, pr[i]) : INT32_MAX; /* a window's first row */
    }
    /* The last row a warp's queries attend, and the block's; the block's first. */
    int32_t wmax = max(pr[0], pr[1]), bmax = -1, wmin = min(lo[0], lo[1]), bmin = INT32_MAX;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        wmax = max(wmax, __shfl_xor_sync(0xffffffffu, wmax, off));
        wmin = min(wmin, __shfl_xor_sync(0xffffffffu, wmin, off));
    }
    if (lane == 0) {
        warp_max[w] = wmax;
        warp_min[w] = wmin;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < TC_WARPS; i++) {
        bmax = max(bmax, warp_max[i]);
        bmin = min(bmin, warp_min[i]);
    }
    const char *kb = k.p + hk * k.nb[2], *vb = v.p + hk * v.nb[2];
    /* rows past the last or before the first: zeros (no NaN of an unwritten row) */
    int64_t rows = (int64_t)bmax + 1, first = bmax >= 0 ? bmin : 0;
    int64_t sbeg = first / TC_BK * TC_BK;
    if (bmax >= 0) {
        tc_copy<DP>(sm, kb, k.nb[1], sbeg, rows, D, first, mk.ring);
        tc_copy<DP>(sm + L::TILE, vb, v.nb[1], sbeg, rows, D, first, mk.ring);
    }
    /* q's fragments (rows g, g + 8; dims 16 ks + 2 tg (+1) and + 8), split in two f16 parts. */
    uint32_t qh[KS][4], ql[KS][4];
#pragma unroll
    for (int ks = 0; ks < KS; ks++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int i = j & 1, d = 16 * ks + 2 * tg + 8 * (j >> 1);
            const char *pq = q.p + tr[i] * q.nb[1] + h * q.nb[2];
            int ok = pr[i] >= 0;
            float x0 = ok && d < D ? bits_f(ld_bits(pq + d * q.nb[3], q.t), q.t) : 0.0f;
            float x1 = ok && d + 1 < D ? bits_f(ld_bits(pq + (d + 1) * q.nb[3], q.t), q.t) : 0.0f;
            split2(x0, x1, &qh[ks][j], &ql[ks][j]);
        }
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, acc[DT][4];
#pragma unroll
    for (int dt = 0; dt < DT; dt++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            acc[dt][j] = 0.0f;
    int stage = 0;
    for (int64_t s0 = sbeg; s0 <= bmax; s0 += TC_BK, stage ^= 1) {
        if (s0 + TC_BK <= bmax) { /* the next tile into the other stage */
            __half *nx = sm + 2 * (stage ^ 1) * L::TILE;
            tc_copy<DP>(nx, kb, k.nb[1], s0 + TC_BK, rows, D, first, mk.ring);
            tc_copy<DP>(nx + L::TILE, vb, v.nb[1], s0 + TC_BK, rows, D, first, mk.ring);
            cp_async_wait<2>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const __half *ks_ = sm + 2 * stage * L::TILE, *vs_ = ks_ + L::TILE;
        if (s0 <= wmax) { /* else no row of this warp reaches the tile */
            float sc[NT][4];
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
#pragma unroll
                for (int j = 0; j < 4; j++)
                    sc[nt][j] = 0.0f;
                const __half *kr = ks_ + (8 * nt + g) * L::ROW + 2 * tg;
#pragma unroll
                for (int ks = 0; ks < KS; ks++) {
                    uint32_t b0 = *(const uint32_t *)(kr + 16 * ks);
                    uint32_t b1 = *(const uint32_t *)(kr + 16 * ks + 8);
                    mma16816(sc[nt], qh[ks], b0, b1);
                    mma16816(sc[nt], ql[ks], b0, b1);
                }
            }
            /* The online softmax of rows g (j = 0, 1) and g + 8 (j = 2, 3): a row is a quad. */
#pragma unroll
            for (int i = 0; i < 2; i++) {
                float x[2 * NT]; /* the row's scores in this thread, key order */
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        int64_t s = s0 + 8 * nt + 2 * tg + e; /* a window's, soft-capped */
                        x[2 * nt + e] = s <= pr[i] && s >= lo[i]
                                            ? att_cap(mk, sc[nt][2 * i + e] * scale)
                                            : -INFINITY;
                    }
                float corr = softmax_step<4>(x, m[i], l[i]);
#pragma unroll
                for (int nt = 0; nt < NT; nt++)
#pragma unroll
                    for (int e = 0; e < 2; e++)
                        sc[nt][2 * i + e] = x[2 * nt + e];
#pragma unroll
                for (int dt = 0; dt < DT; dt++) {
                    acc[dt][2 * i] *= corr;
                    acc[dt][2 * i + 1] *= corr;
                }
            }
            /* acc += P v, 16 cache rows at a time; v's operands through ldmatrix.trans. */
#pragma unroll
            for (int kk = 0; kk < TC_BK / 16; kk++) {
                uint32_t ph[4], pl[4];
                split2(sc[2 * kk][0], sc[2 * kk][1], &ph[0], &pl[0]);
                split2(sc[2 * kk][2], sc[2 * kk][3], &ph[1], &pl[1]);
                split2(sc[2 * kk + 1][0], sc[2 * kk + 1][1], &ph[2], &pl[2]);
                split2(sc[2 * kk + 1][2], sc[2 * kk + 1][3], &ph[3], &pl[3]);
                /* lanes 0-7: rows 16 kk + 0..7, 8-15: + 8..15 (dims 8 dt), 16-31: dims 8 dt + 8 */
                const __half *vr = vs_ + (16 * kk + (lane & 15)) * L::ROW + 8 * (lane >> 4);
#pragma unroll
                for (int dt = 0; dt < DT; dt += 2) {
                    uint32_t b[4];
                    unsigned a = (unsigned)__cvta_generic_to_shared(vr + 8 * dt);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
                    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, "
                                 "[%4];"
                                 : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                                 : "r"(a));
#endif
                    mma16816(acc[dt], ph, b[0], b[1]);
                    mma16816(acc[dt], pl, b[0], b[1]);
                    mma16816(acc[dt + 1], ph, b[2], b[3]);
                    mma16816(acc[dt + 1], pl, b[2], b[3]);
                }
            }
        }
        __syncthreads(); /* this stage is copied over next */
    }
#pragma unroll
    for (int i = 0; i < 2; i++) {
        if (pr[i] < 0)
            continue;
        char *po = o.p + tr[i] * o.nb[1] + h * o.nb[2];
#pragma unroll
        for (int dt = 0; dt < DT; dt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int64_t d = 8 * dt + 2 * tg + e;
                if (d < D)
                    st_f(po + d * o.nb[3], o.t, acc[dt][2 * i + e] / l[i]);
            }
    }
}

static std::atomic<long long> tiles_launches(0), mma_launches(0);

extern "C" int64_t gp_cuda_attention_tiles_count(void)
{
    return tiles_launches.load();
}

extern "C" int64_t gp_cuda_attention_mma_count(void)
{
    return mma_launches.load();
}

/* 1 when the tensor-core kernel takes these operands: f16 caches of 16-byte aligned rows. */
static int tc_ok(const KT &k, const KT &v, int64_t D)
{
    const KT *x[2] = {&k, &v};
    for (int i = 0; i < 2; i++)
        if (x[i]->t != GP_F16 || x[i]->nb[3] != 2 || ((uintptr_t)x[i]->p & 15) ||
            x[i]->nb[1] % 16 || x[i]->nb[2] % 16)
            return 0;
    return D % 8 == 0 && D <= 128;
}

/* 1 when the tensor-core kernel for DP runs on the current device (built for sm_80 or later) and
 * takes its shared memory there (an attribute of each device's copy of the kernel: set at each
 * launch, as the decode kernels' cluster attributes). */
template <int DP> static int mma_ready()
{
    cudaFuncAttributes fa;
    int r = cudaFuncGetAttributes(&fa, k_attention_mma<DP>) == cudaSuccess &&
            fa.binaryVersion >= 80 &&
            cudaFuncSetAttribute(k_attention_mma<DP>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)TcSmem<DP>::BYTES) == cudaSuccess;
    cudaGetLastError();
    return r;
}

template <int DP>
static int launch_mma(float scale, const AttMask &mk, KT o, KT q, KT k, KT v, KT p,
                      const gp_cu_ctx *c)
{
    if (!mma_ready<DP>())
        return 0;
    dim3 grid((unsigned)q.ne[2], (unsigned)((q.ne[1] + TC_BQ - 1) / TC_BQ));
    gp_cu_launch(c, k_attention_mma<DP>, grid, TC_WARPS * 32, (size_t)TcSmem<DP>::BYTES, scale, mk,
                 o, q, k, v, p, c->d_syms);
    mma_launches++;
    return 1;
}

/* 1 when the tiled kernel for DP takes its shared memory on the current device (mma_ready). */
template <int DP> static int tiles_ready()
{
    size_t smem = sizeof(float) * (size_t)FaSmem<DP>::FLOATS;
    if (cudaFuncSetAttribute(k_attention_tiles<DP>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)smem) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return 1;
}

template <int DP>
static int launch_tiles(float scale, const AttMask &mk, KT o, KT q, KT k, KT v, KT p,
                        const gp_cu_ctx *c)
{
    if (!tiles_ready<DP>())
        return 0;
    dim3 grid((unsigned)q.ne[2], (unsigned)((q.ne[1] + FA_BQ - 1) / FA_BQ));
    gp_cu_launch(c, k_attention_tiles<DP>, grid, FA_THREADS,
                 sizeof(float) * (size_t)FaSmem<DP>::FLOATS, scale, mk, o, q, k, v, p, c->d_syms);
    tiles_launches++;
    return 1;
}

/* How many splits a launch for T queries of H heads of D dims gets from a workspace of ws_size. */
static int att_splits(int64_t T, int64_t H, int64_t D, const void *ws, size_t ws_size)
{
    size_t need = (size_t)GP_WS_ATTN_SPLITS * T * H * (D + 2) * sizeof(float);
    return T <= GP_WS_ATTN_SPLIT_MAX_T && ws && ws_size >= need ? GP_WS_ATTN_SPLITS : 1;
}

/* The split combine's counters for T * H (query, head) pairs, or NULL: a second kernel combines. */
static unsigned *att_counters(const gp_cu_ctx *c, int nsplit, int64_t T, int64_t H)
{
    if (nsplit > 1 && c->att_combine && c->d_counters && T * H <= c->n_counters)
        return c->d_counters;
    return NULL;
}

/* The attention node's window, ring and softcap over a cache of S rows. */
static AttMask att_mask(const gp_attrs *a, int64_t S)
{
    AttMask mk;
    memset(&mk, 0, sizeof mk);
    int64_t window = a->i[GP_ATTENTION_WINDOW];
    double cap = a->f[GP_ATTENTION_SOFTCAP];
    mk.window = window > 0 ? window : 0;
    mk.ring = a->i[GP_ATTENTION_RING] ? S : 0;
    mk.cap = cap > 0 ? (float)cap : 0.0f;
    return mk;
}

int gp_cu_attention(gp_cu_ctx *c, const gp_attrs *a, const gp_cu_tensor *out,
                    const gp_cu_tensor *in, void *ws, size_t ws_size)
{
    KT o = gp_kt_of(c, out), q = gp_kt_of(c, &in[0]), k = gp_kt_of(c, &in[1]);
    KT v = gp_kt_of(c, &in[2]), p = gp_kt_of(c, &in[3]);
    int64_t T = q.ne[1], H = q.ne[2], D = q.ne[3], S = k.ne[1], G = k.ne[2];
    if (in[0].ndim != 3 || in[1].ndim != 3 || in[2].ndim != 3 || G < 1 || H % G || D > 32 * ATT_MAXJ ||
        k.ne[3] != D || v.ne[1] != S || v.ne[2] != G || v.ne[3] != D) {
        snprintf(c->err, sizeof c->err,
                 "attention: needs q [T, H, D], k and v [S, G, D], H %% G == 0, D <= %d",
                 32 * ATT_MAXJ);
        return -1;
    }
    int64_t window = a->i[GP_ATTENTION_WINDOW];
    if (a->i[GP_ATTENTION_RING] && !(window > 0 && window <= S)) {
        snprintf(c->err, sizeof c->err, "attention: a ring needs a window of 1 to S = %lld rows",
                 (long long)S);
        return -1;
    }
    if (T == 0 || H == 0)
        return 0;
    if (T > 65535 || H > 65535) {
        snprintf(c->err, sizeof c->err, "attention: T = %lld or H = %lld too large", (long long)T,
                 (long long)H);
        return -1;
    }
    /* Split over the cache when few queries would leave the GPU idle and the partials fit. */
    int nsplit = att_splits(T, H, D, ws, ws_size);
    dim3 grid((unsigned)H, (unsigned)T, (unsigned)nsplit);
    float scale = (float)a->f[GP_ATTENTION_SCALE], *part = (float *)ws;
    /* Combining in the last block needs a counter per (t, h). */
    unsigned *counters = att_counters(c, nsplit, T, H);
    int J = (int)((D + 31) / 32);
    AttMask mk = att_mask(a, S);
    if (a->i[GP_ATTENTION_BLOCK] > 0) { /* a ragged batch: inputs seq [T] and blocks [N, M] */
        KT sq = gp_kt_of(c, &in[4]), tb = gp_kt_of(c, &in[5]);
        mk.block = a->i[GP_ATTENTION_BLOCK];
        mk.span = in[5].ne[1] * mk.block;
        mk.tab = tb.p;
        mk.tab_row = tb.nb[2];
        mk.tab_col = tb.nb[3];
        mk.seq = sq.p;
        mk.seq_nb = sq.nb[3];
    }
    /* The tiles walk positions (a window's, of a ring's rows) with capped scores as any others;
     * a ragged batch's rows take the one-block-a-query kernel. */
    if (nsplit == 1 && !mk.block && c->att_mma && tc_ok(k, v, D) &&
        (D <= 64 ? launch_mma<64>(scale, mk, o, q, k, v, p, c)
                 : launch_mma<128>(scale, mk, o, q, k, v, p, c)))
        return gp_cu_check_launch(c, "attention (tensor cores)");
    if (nsplit == 1 && !mk.block && c->att_tiles && D <= 128 &&
        (D <= 64 ? launch_tiles<64>(scale, mk, o, q, k, v, p, c)
                 : launch_tiles<128>(scale, mk, o, q, k, v, p, c)))
        return gp_cu_check_launch(c, "attention (tiles)");
    if (J <= 2)
        launch_att<2>(grid, scale, mk, o, q, k, v, p, part, T, counters, c);
    else if (J <= 4)
        launch_att<4>(grid, scale, mk, o, q, k, v, p, part, T, counters, c);
    else
        launch_att<ATT_MAXJ>(grid, scale, mk, o, q, k, v, p, part, T, counters, c);
    if (gp_cu_check_launch(c, "attention"))
        return -1;
    if (nsplit == 1 || counters)
        return 0;
    gp_cu_launch(c, k_attention_combine, dim3((unsigned)H, (unsigned)T), 64, 0, nsplit, o, p, S,
                 (int)(mk.ring != 0 || mk.block), (const float *)part, T, c->d_syms);
    return gp_cu_check_launch(c, "attention_combine");
}

/* ---- one token, with the K/V cache stores and the ropes before them inside ---- */

/* What the one-token kernels load before their PDL wait (pf, a bit set): PF_L2 their cache rows
 * into L2, PF_REGS each warp's first two rows into registers (decode_first), when pos is read
 * early. */
enum { PF_L2 = 1, PF_REGS = 2 };

static int att_pf(const gp_cu_ctx *c)
{
    return c->pdl ? (c->kv_prefetch ? PF_L2 : 0) | (c->kv_regs ? PF_REGS : 0) : 0;
}

/*
 * Instances of the one-token kernels for GPT-2's operands, with them as constants: the generic
 * kernel switches at run time on each dtype and on the ropes and clusters it may have, code
 * that runs cold from the instruction caches every launch; with the switches folded it is a
 * fraction of that size. att_kv (host) gives the caches'
 * dtype when an instance takes the operands (both caches f16, or both f32; for the attention
 * kernel (act) q, the new rows and the output f32, no ropes, a cluster per head; pos read before
 * the wait, early), else -1 (the generic kernel); dec_typed (device) sets those in a's copy, so
 * that the compiler folds them.
 */
static std::atomic<long long> typed_launches(0); /* launches of those instances */

static int att_kv(const gp_cu_ctx *c, const DecArgs &d, int act, int early)
{
    int kv = d.kc.t == d.vc.t && (d.kc.t == GP_F16 || d.kc.t == GP_F32) ? d.kc.t : -1;
    if (c->att_generic || !early ||
        (act && (d.q.t != GP_F32 || d.kx.t != GP_F32 || d.vx.t != GP_F32 || d.o.t != GP_F32 ||
                 d.rq.on || d.rk.on || !d.cluster)))
        return -1;
    return kv;
}

__device__ __forceinline__ DecArgs dec_typed(DecArgs a, int kv)
{
    a.kc.t = a.vc.t = kv;
    a.q.t = a.kx.t = a.vx.t = a.o.t = GP_F32;
    a.rq.on = a.rk.on = 0;
    a.cluster = 1;
    return a;
}

/*
 * One token (T = 1): q (1, 1, H, D) and the new key and value rows kx, vx (1, 1, G, D) from their
 * sources; the caches kc, vc (1, S, G, D); pos [1] -> out (1, 1, H, D); one block per (h, split),
 * as k_attention with T = 1 (same partials, counters and combine). q and kx are rotated here when
 * rq / rk are on. Row p = pos[0] is the new one: the blocks whose split holds it take it from the
 * sources, in registers (rounded to the cache's dtype, as the store would have written it), while
 * the block of each KV group's first head writes it into both caches; every other row is read
 * from the caches. early: pos is written by no kernel of the eval, so it is read (and the angles
 * computed, the rows prefetched into L2 when pf & PF_L2, each warp's first two rows loaded when
 * pf & PF_REGS) before the wait for the kernel before this one.
 */
template <int J, int KV>
__global__ void __launch_bounds__(ATT_WARPS * 32)
    k_attention_decode(DecArgs a, int early, int pf)
{
    __shared__ AttSmem<J> sm;
    STAMP_BEGIN(2);
    if (KV >= 0) { /* what the host checked, as constants (att_kv) */
        a = dec_typed(a, KV);
        early = 1;
    }
    if (a.cluster)
        cluster_started_arrive();
    int64_t h = blockIdx.x;
    int nsplit = gridDim.z, split = blockIdx.z;
    DecState st;
    KvRows<J> first;
    int regs = early && (pf & PF_REGS) && AttPipe<J>::on;
    if (early) {
        decode_begin(a, sm, nsplit, split, st);
        if ((pf & PF_L2) && st.p >= 0) {
            int64_t H = a.q.ne[2], G = a.kc.ne[2];
            prefetch_kv(a.kc, a.vc, h / (H / G), a.q.ne[3], st.s0, min(st.s1, (int64_t)st.p),
                        a.mk);
        }
        if (regs)
            decode_first(a, h, st, first);
    }
    pdl_wait();
    if (!a.late)
        pdl_trigger();
    STAMP(1);
    if (!early)
        decode_begin(a, sm, nsplit, split, st);
    if (a.cluster) /* decode_run writes the other blocks' shared memory */
        cluster_started_wait();
    STAMP(2);
    decode_run(a, sm, h, nsplit, split, st, first, regs);
}


template <int J> static void launch_dec(dim3 grid, const DecArgs &d, int early, const gp_cu_ctx *c)
{
    int pf = att_pf(c), kv = att_kv(c, d, 1, early);
    typed_launches += kv >= 0;
    gp_cu_launch_z(c, d.cluster ? grid.z : 0,
                   kv == GP_F16   ? k_attention_decode<J, GP_F16>
                   : kv == GP_F32 ? k_attention_decode<J, GP_F32>
                                  : k_attention_decode<J, -1>,
                   grid, ATT_WARPS * 32, 0, d, early, pf);
}

/* ---- one token, one block per head: no split, no cluster ---- */

/*
 * A one-token attention of a head of D <= 64 dims (even) in one block of AH_WARPS warps: the
 * cluster kernel above splits a head's rows over 16 blocks and combines their partials through
 * distributed shared memory, two cluster barriers that weigh heavily at GPT-2's lengths. Here
 * the warps share the rows and combine
 * in the block's own shared memory, after one barrier.
 *
 * Lane l holds dims 2l and 2l + 1 of every row it sees (one 4- or 8-byte load a row). The rows
 * come in chunks of AhRows::R rows a warp: warp w takes rows c CH + w + AH_WARPS i (i < R) of
 * chunk c (CH = R AH_WARPS rows); row p = pos[0] is the new one, from the sources, every other
 * row from the caches. pos is an input (read before the wait), and no kernel of the eval writes
 * the cache rows before p, so the first two chunks are loaded before the PDL wait: all the rows
 * up to 2 CH (256 with f16 caches) arrive while the kernel before runs. Past the first two
 * chunks each chunk is a round trip after the wait, and the split kernel is faster: the backend
 * runs that one there (plan_head_pos in cuda_backend.c).
 *
 * The next kernel may start right after the wait (a.late is not read): with a block a head,
 * every block is resident by then, and the next one's weights load while this one attends. With
 * a.trig (the next product triggers early too: plan_trig) it may start at this kernel's start, so
 * that its weights load while the product before this one ends; plan_trig asks for it only where
 * that pays (bench/gpu-notes.md).
 */
enum { AH_WARPS = 16, AH_THREADS = 32 * AH_WARPS };

/* Dims 2l and 2l + 1 of a row of dtype KV: their bits, and their values. */
template <int KV> struct AhBits {
    typedef uint32_t T; /* f16: a half2 */
};
template <> struct AhBits<GP_F32> {
    typedef uint2 T;
};

template <int KV> struct AhRows {
    enum { R = KV == GP_F16 ? 8 : 4 }; /* rows of a chunk a warp (two chunks in registers) */
};

__device__ __forceinline__ float2 ah_val(uint32_t b)
{
    return __half22float2(*(const __half2 *)&b);
}

__device__ __forceinline__ float2 ah_val(uint2 b)
{
    return make_float2(__uint_as_float(b.x), __uint_as_float(b.y));
}

/* v rounded to the cache's dtype (to nearest, as the store rounds), as its bits. */
template <int KV> __device__ __forceinline__ typename AhBits<KV>::T ah_bits(float2 v);
template <> __device__ __forceinline__ uint32_t ah_bits<GP_F16>(float2 v)
{
    __half2 h = __floats2half2_rn(v.x, v.y);
    return *(const uint32_t *)&h;
}
template <> __device__ __forceinline__ uint2 ah_bits<GP_F32>(float2 v)
{
    return make_uint2(__float_as_uint(v.x), __float_as_uint(v.y));
}

template <int KV> struct AhChunk {
    typename AhBits<KV>::T k[AhRows<KV>::R], v[AhRows<KV>::R];
};

/* Chunk c's rows of this warp below p (the cached ones) from the caches at pk, pv (this warp's
 * row 0 and this lane's dims; rows nbk and nbv apart); zero elsewhere, and for lanes past D. */
template <int KV>
__device__ __forceinline__ void ah_load(AhChunk<KV> &ch, const char *pk, const char *pv,
                                        int64_t nbk, int64_t nbv, int c, int p, bool on)
{
    typedef typename AhBits<KV>::T T;
    enum { R = AhRows<KV>::R };
    int r0 = c * R * AH_WARPS + (threadIdx.x >> 5);
    pk += r0 * nbk;
    pv += r0 * nbv;
#pragma unroll
    for (int i = 0; i < R; i++) {
        ch.k[i] = ch.v[i] = T();
        if (on && r0 + AH_WARPS * i < p) {
            ch.k[i] = *(const T *)(pk + i * AH_WARPS * nbk);
            ch.v[i] = *(const T *)(pv + i * AH_WARPS * nbv);
        }
    }
}

/* Each lane's sums s[i] of R rows -> the warp's sum of row lane / (32 / R), in every lane: a
 * reduction that halves the rows at each exchange (R - 1 + log2(32 / R) shuffles, not 5 R). */
template <int R> __device__ __forceinline__ float ah_rows_sum(float (&s)[R])
{
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int n = R, o = 16; n > 1; n >>= 1, o >>= 1) {
        bool up = lane & o;
#pragma unroll
        for (int i = 0; i < n / 2; i++) {
            float keep = up ? s[i + n / 2] : s[i], give = up ? s[i] : s[i + n / 2];
            s[i] = keep + __shfl_xor_sync(0xffffffffu, give, o);
        }
    }
    return lanes_sum<32 / R>(s[0]);
}

/* Chunk c of this warp into its running max m, sum l and accumulator acc (dims 2l, 2l + 1). */
template <int KV>
__device__ __forceinline__ void ah_attend(const AhChunk<KV> &ch, float2 q, float scale, int c,
                                          int p, float &m, float &l, float2 &acc)
{
    enum { R = AhRows<KV>::R, LPR = 32 / R }; /* lanes a row after the reduction */
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    float s[R];
#pragma unroll
    for (int i = 0; i < R; i++) {
        float2 k = ah_val(ch.k[i]);
        s[i] = q.x * k.x + q.y * k.y;
    }
    int r = c * R * AH_WARPS + w + AH_WARPS * (lane / LPR);
    float x = ah_rows_sum<R>(s) * scale; /* every lane: its shuffles take the whole warp */
    x = r <= p ? x : -INFINITY;
    float mn = fmaxf(m, across_max<LPR>(x)); /* a row's LPR lanes hold the same x */
    if (mn == -INFINITY) /* no row of this warp in the chunk (warp-uniform) */
        return;
    float corr = expf(m - mn), e = expf(x - mn);
    l = l * corr + across_sum<LPR>(e);
    acc.x *= corr;
    acc.y *= corr;
#pragma unroll
    for (int i = 0; i < R; i++) {
        float ei = __shfl_sync(0xffffffffu, e, i * LPR);
        float2 v = ah_val(ch.v[i]);
        acc.x += ei * v.x;
        acc.y += ei * v.y;
    }
    m = mn;
}

template <int KV>
__global__ void __launch_bounds__(AH_THREADS, 1) k_attention_head(DecArgs a)
{
    typedef typename AhBits<KV>::T T;
    enum { R = AhRows<KV>::R, CH = R * AH_WARPS };
    __shared__ float sm_m[AH_WARPS], sm_l[AH_WARPS];
    __shared__ float2 sm_acc[AH_WARPS][32];
    STAMP_BEGIN(3);
    a = dec_typed(a, KV);
    const KT &kc = a.kc, &vc = a.vc;
    int64_t h = blockIdx.x, H = a.q.ne[2], D = a.q.ne[3], G = kc.ne[2], g = h / (H / G);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    bool on = 2 * lane < D;
    int p = *(const int32_t *)a.pos.p; /* an input: read before the wait */
    if (p < 0 || p >= kc.ne[1])
        p = -1;
    const char *pk = kc.p + g * kc.nb[2] + lane * sizeof(T);
    const char *pv = vc.p + g * vc.nb[2] + lane * sizeof(T);
    AhChunk<KV> cur, nxt;
    if (a.trig) /* the next kernel may start now (its wait still waits for this one) */
        pdl_trigger();
    ah_load<KV>(cur, pk, pv, kc.nb[1], vc.nb[1], 0, p, on);
    ah_load<KV>(nxt, pk, pv, kc.nb[1], vc.nb[1], 1, p, on);
    pdl_begin(); /* the next kernel's blocks may start: these are all resident by now */
    STAMP(1);
    if (p < 0)
        return;
    /* q, and the new row for the warp that takes it (chunk p / CH, slot p % CH / AH_WARPS) */
    float2 q = on ? *(const float2 *)(a.q.p + h * a.q.nb[2] + 8 * lane) : make_float2(0.f, 0.f);
    int pc = p / CH, pi = p % CH / AH_WARPS;
    bool takes_new = w == p % AH_WARPS;
    T kn = T(), vn = T();
    if (takes_new && on) {
        float2 kx = *(const float2 *)(a.kx.p + g * a.kx.nb[2] + 8 * lane);
        float2 vx = *(const float2 *)(a.vx.p + g * a.vx.nb[2] + 8 * lane);
        kn = ah_bits<KV>(kx); /* rounded to the cache's dtype, as the store writes it */
        vn = ah_bits<KV>(vx);
        if (h % (H / G) == 0) { /* the group's first head writes the row */
            *(T *)(pk + p * kc.nb[1]) = kn;
            *(T *)(pv + p * vc.nb[1]) = vn;
        }
    }
    STAMP(2);
    float m = -INFINITY, l = 0.0f;
    float2 acc = make_float2(0.f, 0.f);
    for (int c = 0; c <= pc; c++) {
        if (c == pc && takes_new) {
#pragma unroll
            for (int i = 0; i < R; i++)
                if (i == pi) {
                    cur.k[i] = kn;
                    cur.v[i] = vn;
                }
        }
        ah_attend<KV>(cur, q, a.scale, c, p, m, l, acc);
        cur = nxt;
        if (c + 2 <= pc)
            ah_load<KV>(nxt, pk, pv, kc.nb[1], vc.nb[1], c + 2, p, on);
    }
    STAMP(3);
    if (lane == 0) {
        sm_m[w] = m;
        sm_l[w] = l;
    }
    sm_acc[w][lane] = acc;
    __syncthreads();
    if (w != 0 || !on)
        return;
    float M = -INFINITY, L = 0.0f;
    float2 o = make_float2(0.f, 0.f);
#pragma unroll
    for (int i = 0; i < AH_WARPS; i++)
        M = fmaxf(M, sm_m[i]);
#pragma unroll
    for (int i = 0; i < AH_WARPS; i++) {
        float f = split_weight(sm_m[i], M);
        float2 x = sm_acc[i][lane];
        L += f * sm_l[i];
        o.x += f * x.x;
        o.y += f * x.y;
    }
    *(float2 *)(a.o.p + h * a.o.nb[2] + 8 * lane) = make_float2(o.x / L, o.y / L);
    STAMP(4);
}

static std::atomic<long long> head_launches(0); /* launches of k_attention_head */
static std::atomic<long long> head_trigs(0);    /* those with DecArgs.trig */

extern "C" int gp_cuda_attention_head_rows(int kv)
{
    return kv == GP_F16 ? 2 * AH_WARPS * AhRows<GP_F16>::R : 2 * AH_WARPS * AhRows<GP_F32>::R;
}

/* 1 when a one-token attention kernel can run clusters of n blocks (n <= 8 is portable; 16 is
 * allowed here where the device can). */
template <int J, int KV> static int cluster_fits(int n)
{
    if (n > 8 && cudaFuncSetAttribute(k_attention_decode<J, KV>,
                                      cudaFuncAttributeNonPortableClusterSizeAllowed, 1))
        return 0;
    cudaLaunchAttribute at[2];
    cudaLaunchConfig_t cfg =
        gp_cu_config(NULL, 0, (unsigned)n, dim3(1, 1, (unsigned)n), dim3(ATT_WARPS * 32), 0, at);
    int clusters = 0;
    return cudaOccupancyMaxActiveClusters(&clusters, k_attention_decode<J, KV>, &cfg) ==
               cudaSuccess &&
           clusters > 0;
}

/* cluster_fits for each dtype instance */
template <int J> static int cluster_fits_all(int n)
{
    return cluster_fits<J, -1>(n) && cluster_fits<J, GP_F16>(n) && cluster_fits<J, GP_F32>(n);
}

extern "C" int gp_cuda_attention_cluster_ok(int n)
{
    int ok = n >= 2 && n <= GP_WS_ATTN_SPLITS && cluster_fits_all<2>(n) &&
             cluster_fits_all<4>(n) && cluster_fits_all<ATT_MAXJ>(n);
    cudaGetLastError();
    return ok;
}

/* Why the operands of a one-token attention are not supported, or NULL (T not checked). */
static const char *decode_unsupported(const gp_cu_decode_att *a, const gp_cu_tensor *out)
{
    const gp_cu_tensor *q = &a->q, *kc = &a->k_cache, *vc = &a->v_cache;
    if (q->ndim != 3 || out->ndim != 3 || a->k.ndim != 3 || a->v.ndim != 3 || kc->ndim != 3 ||
        vc->ndim != 3 || a->pos.ndim != 1 || a->pos.dtype != GP_I32)
        return "needs q and out [1, H, D], k and v [1, G, D], caches [S, G, D], pos i32 [1]";
    int64_t H = q->ne[1], D = q->ne[2], G = kc->ne[1];
    if (out->ne[1] != H || out->ne[2] != D || G < 1 || H < 1 || H % G || H > 65535 || D < 1 ||
        D > 32 * ATT_MAXJ || kc->ne[2] != D || vc->ne[0] != kc->ne[0] || vc->ne[1] != G ||
        vc->ne[2] != D || a->k.ne[1] != G || a->k.ne[2] != D || a->v.ne[1] != G ||
        a->v.ne[2] != D)
        return "shapes differ, or H % G != 0, or D > 256";
    const gp_cu_rope *r[2] = {&a->rope_q, &a->rope_k};
    for (int i = 0; i < 2; i++)
        if (r[i]->on && (r[i]->n < 0 || r[i]->n > D || r[i]->n % 2))
            return "rope: needs an even n <= D";
    if (a->ring && !(a->window > 0 && a->window <= kc->ne[0]))
        return "a ring needs a window of 1 to S rows";
    return NULL;
}

extern "C" int gp_cuda_attention_head_kv(const gp_cu_decode_att *a, const gp_cu_tensor *out)
{
    const gp_cu_tensor *f[4] = {&a->q, &a->k, &a->v, out}, *cv[2] = {&a->k_cache, &a->v_cache};
    int t = cv[0]->dtype, kv = t == cv[1]->dtype && (t == GP_F16 || t == GP_F32) ? t : -1;
    int64_t D = a->q.ne[2], es = kv == GP_F16 ? 2 : 4;
    if (kv < 0 || decode_unsupported(a, out) || !a->pos_const || a->rope_q.on || a->rope_k.on ||
        D > 64 || D % 2 || a->window > 0 || a->ring || a->softcap > 0.0f)
        return -1;
    for (int i = 0; i < 4; i++) /* rows of f32, dims in pairs of 8 bytes */
        if (f[i]->dtype != GP_F32 || f[i]->nb[2] != 4 || f[i]->nb[1] % 8 ||
            (uintptr_t)f[i]->data % 8)
            return -1;
    for (int i = 0; i < 2; i++) /* cache rows [S, G, D]: dims in pairs of 2 es bytes */
        if (cv[i]->nb[2] != es || cv[i]->nb[0] % (2 * es) || cv[i]->nb[1] % (2 * es) ||
            (uintptr_t)cv[i]->data % (2 * es))
            return -1;
    return kv;
}

/* ---- qkvatt: a one-token attention that first computes its head's q, k and v ---- */

/* Head dim 64; a row of a head's 3 x 64 columns is QA_CH 16-byte chunks; a block's 128 threads
 * take QA_PH rows at a time (threads past QA_PH * QA_CH idle in the sums), QA_U rows each, all
 * loaded before the PDL wait: a split is at most QA_MAXPER rows (K <= 16 * QA_MAXPER = 1280).
 * Wider products are not taken: they would need a second batch of loads after the wait, which
 * costs more than the fusion saves (bench/gpu-notes.md). */
enum { QA_D = 64, QA_CH = 3 * QA_D / 8, QA_PH = ATT_THREADS / QA_CH, QA_U = 16,
       QA_MAXPER = QA_PH * QA_U, QA_V4 = 3 * QA_D / 4 };

struct QkvArgs {
    const char *w;    /* [K, 3 C] (16-bit), row k at w + k * ldw bytes; q, k, v: columns from 0, C,
                         2 C, head h's D at h * D within each */
    int64_t ldw, K, C, per; /* per: the rows of a split */
    KT bias;          /* [3 C] */
    NORM nm;          /* the norm of x the product reads */
    const float *x;   /* [K] */
};

/* Rows k, k + QA_PH, ... (QA_U of them, below k1) of the 16-byte chunk at column col. */
template <typename W>
__device__ __forceinline__ void qa_load(uint4 (&u)[QA_U], const QkvArgs &m, int64_t col, int64_t k,
                                        int64_t k1, bool on)
{
#pragma unroll
    for (int i = 0; i < QA_U; i++) {
        int64_t row = k + (int64_t)QA_PH * i;
        u[i] = on && row < k1 ? ld_stream(m.w + row * m.ldw + col * (int64_t)sizeof(W))
                              : make_uint4(0, 0, 0, 0);
    }
}

/*
 * Block (h, split)'s share of head h's q, k and v: rows [k0, k1) (k1 - k0 <= QA_MAXPER) of
 * norm(x) @ w for the head's 3 x 64 columns, into ps (sums, no bias). The weights and the norm's
 * weights are loaded before the PDL wait, which this does; x after it (as k_matvec_kn2 stages a
 * norm).
 */
template <typename W>
__device__ __forceinline__ void qa_sums(const QkvArgs &m, int64_t h, int64_t k0, int64_t k1,
                                        float *xs, float (*red)[3 * QA_D], float *ps)
{
    typedef vec16<W> V;
    int t = threadIdx.x, cc = t % QA_CH, ph = t / QA_CH;
    bool on = ph < QA_PH;
    int64_t col = (cc / (QA_D / V::N)) * m.C + h * QA_D + (cc % (QA_D / V::N)) * V::N;
    bool ahead = k1 - k0 <= (int64_t)blockDim.x;
    float gw = 0.0f, gb = 0.0f;
    if (ahead && k0 + t < k1) {
        gw = norm_w(m.nm, k0 + t);
        gb = norm_b(m.nm, k0 + t);
    }
    uint4 u[QA_U];
    qa_load<W>(u, m, col, k0 + ph, k1, on);
    pdl_begin();
    STAMP(1);
    float mean, inv;
    norm_stats(m.nm, m.x, m.K, &mean, &inv);
    for (int64_t j = t; j < k1 - k0; j += blockDim.x)
        xs[j] = ahead ? norm_val(m.nm, m.x[k0 + j], mean, inv, gw, gb)
                      : norm_one(m.nm, m.x, k0 + j, mean, inv);
    __syncthreads();
    float acc[V::N];
#pragma unroll
    for (int q = 0; q < V::N; q++)
        acc[q] = 0.0f;
    rows_fma<W>(u, xs, k0 + ph, QA_PH, k0, k1, acc);
    if (on) {
#pragma unroll
        for (int q = 0; q < V::N; q++)
            red[ph][cc * V::N + q] = acc[q];
    }
    __syncthreads();
    for (int j = t; j < 3 * QA_D; j += blockDim.x) {
        float s = 0.0f;
#pragma unroll
        for (int p = 0; p < QA_PH; p++)
            s += red[p][j];
        ps[j] = s;
    }
}

/*
 * One cluster of S = gridDim.z blocks per head h (block rank = split): each block sums its rows
 * of the head's q, k and v (qa_sums), then, after a cluster barrier, adds the S blocks' sums in
 * rank order and the bias into its own shared copy of q, k and v, and attends its split of the
 * cache rows from it as k_attention_decode does (decode_run: the new row into the caches, the
 * splits combined in the cluster). q, k and v never go to memory. early: pos is read before the
 * wait (an input).
 */
template <typename W, int KV>
__global__ void __launch_bounds__(ATT_THREADS) k_qkv_attention(DecArgs a, QkvArgs m, int early,
                                                                int pf)
{
    __shared__ AttSmem<2> sm;
    __shared__ float xs[QA_MAXPER], red[QA_PH][3 * QA_D];
    __shared__ __align__(16) float ps[3 * QA_D];
    STAMP_BEGIN(1);
    if (KV >= 0) { /* what the host checked, as constants (att_kv) */
        a.kc.t = a.vc.t = KV;
        m.nm.w.t = m.nm.b.t = m.bias.t = vec16<W>::T;
        early = 1;
    }
    a.rq.on = a.rk.on = 0; /* never with ropes, always in a cluster, never late (its conditions) */
    a.mk = AttMask();      /* nor with a window, a ring or soft-capping */
    a.cluster = 1;
    a.late = 0;
    int64_t h = blockIdx.x;
    int S = gridDim.z, r = blockIdx.z;
    DecState st;
    KvRows<2> first;
    int regs = early && (pf & PF_REGS);
    if (early) {
        decode_begin(a, sm, S, r, st);
        if ((pf & PF_L2) && st.p >= 0)
            prefetch_kv(a.kc, a.vc, h, QA_D, st.s0, min(st.s1, (int64_t)st.p), a.mk);
        if (regs)
            decode_first(a, h, st, first);
    }
    /* thread t < QA_V4 sums columns [4 t, 4 t + 4) of q, k and v over the cluster (below); their
     * bias: weights, read before the wait */
    float bias[4];
    for (int i = 0; i < 4; i++) {
        int j = 4 * threadIdx.x + i;
        int64_t col = (j / QA_D) * m.C + h * QA_D + j % QA_D;
        bias[i] = j < 3 * QA_D ? ld_f(m.bias.p + col * m.bias.nb[3], m.bias.t) : 0.0f;
    }
    int64_t k0 = r * m.per, k1 = min(m.K, k0 + m.per);
    qa_sums<W>(m, h, k0, k1, xs, red, ps);
    if (!early)
        decode_begin(a, sm, S, r, st);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
    __trap(); /* no clusters before sm_90: gp_cuda_qkv_attention_ok refuses there */
#elif defined(__CUDA_ARCH__)
    namespace cg = cooperative_groups;
    __shared__ float qkv[3 * QA_D];
    cg::cluster_group cl = cg::this_cluster();
    cl.sync();
    /* Distributed shared memory serves a request at a time, however wide: ps's 3 D columns from
     * each of the S blocks go as float4s, four columns a thread (a float a thread would make four
     * times as many requests), with no branch between the loads
     * (ranks past S read rank 0 and count nothing). */
    if (threadIdx.x < QA_V4) {
        float4 v[GP_WS_ATTN_SPLITS];
#pragma unroll
        for (int k = 0; k < GP_WS_ATTN_SPLITS; k++)
            v[k] = *(const float4 *)cl.map_shared_rank(&ps[4 * threadIdx.x], k < S ? k : 0);
        float4 s = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int k = 0; k < GP_WS_ATTN_SPLITS; k++)
            if (k < S) {
                s.x += v[k].x;
                s.y += v[k].y;
                s.z += v[k].z;
                s.w += v[k].w;
            }
        qkv[4 * threadIdx.x] = s.x + bias[0];
        qkv[4 * threadIdx.x + 1] = s.y + bias[1];
        qkv[4 * threadIdx.x + 2] = s.z + bias[2];
        qkv[4 * threadIdx.x + 3] = s.w + bias[3];
    }
    __syncthreads();
    if (st.p < 0) { /* no attention (pos out of range): stay until the others have read ps */
        cl.sync();
        return;
    }
    DecArgs b = a; /* q, k and v from shared memory (f32), the same address for every head */
    KT *src[3] = {&b.q, &b.kx, &b.vx};
    for (int i = 0; i < 3; i++) {
        src[i]->p = (char *)(qkv + i * QA_D);
        src[i]->t = GP_F32;
        src[i]->nb[2] = 0;
        src[i]->nb[3] = 4;
    }
    STAMP(2);
    decode_run(b, sm, h, S, r, st, first, regs);
#endif
}

/* 1 when k_qkv_attention<W> runs in clusters of GP_WS_ATTN_SPLITS (16: non-portable) here. */
template <typename W, int KV> static int qa_cluster_fits1()
{
    if (cudaFuncSetAttribute(k_qkv_attention<W, KV>, cudaFuncAttributeNonPortableClusterSizeAllowed,
                             1))
        return 0;
    cudaLaunchAttribute at[2];
    unsigned n = GP_WS_ATTN_SPLITS;
    cudaLaunchConfig_t cfg = gp_cu_config(NULL, 0, n, dim3(1, 1, n), dim3(ATT_THREADS), 0, at);
    int clusters = 0;
    return cudaOccupancyMaxActiveClusters(&clusters, k_qkv_attention<W, KV>, &cfg) ==
               cudaSuccess &&
           clusters > 0;
}

template <typename W> static int qa_cluster_fits()
{
    return qa_cluster_fits1<W, -1>() && qa_cluster_fits1<W, GP_F16>() &&
           qa_cluster_fits1<W, GP_F32>();
}

/* k_qkv_attention by weight and cache dtype (att_kv) */
template <typename W> static void (*qa_kernel(int kv))(DecArgs, QkvArgs, int, int)
{
    return kv == GP_F16 ? k_qkv_attention<W, GP_F16>
           : kv == GP_F32 ? k_qkv_attention<W, GP_F32>
                          : k_qkv_attention<W, -1>;
}

extern "C" int gp_cuda_qkv_attention_ok(const gp_cu_ctx *c, const gp_cu_decode_att *a,
                                        const gp_cu_tensor *out)
{
    const gp_cu_tensor *w = &a->qkv_w, *bs = &a->qkv_b, *q = &a->q;
    int64_t K = w->ndim == 2 ? w->ne[0] : 0, H = q->ndim == 3 ? q->ne[1] : 0;
    int es = (int)gp_dtype_size(w->dtype);
    int ok = a->has_qkv && c->att_cluster_small == GP_WS_ATTN_SPLITS && !c->att_cluster &&
           decode_unsupported(a, out) == NULL && !a->rope_q.on && !a->rope_k.on &&
           !(a->window > 0) && !a->ring && !(a->softcap > 0.0f) &&
           q->ne[2] == QA_D && a->k.ne[1] == H && (w->dtype == GP_F16 || w->dtype == GP_BF16) &&
           w->nb[1] == es && w->nb[0] % 16 == 0 && w->ne[1] == 3 * H * QA_D && K > 0 &&
           (K + GP_WS_ATTN_SPLITS - 1) / GP_WS_ATTN_SPLITS <= QA_MAXPER && bs->ndim == 1 &&
           bs->ne[0] == w->ne[1] &&
           ((uintptr_t)w->data & 15) == 0 && a->qkv_norm.w.ndim >= 1 &&
           (w->dtype == GP_F16 ? qa_cluster_fits<__half>() : qa_cluster_fits<__nv_bfloat16>());
    cudaGetLastError();
    return ok;
}

static std::atomic<long long> decode_launches(0), qkv_launches(0);

extern "C" int64_t gp_cuda_attention_typed_count(void)
{
    return typed_launches.load();
}

extern "C" int gp_cuda_attention_decode_ok(const gp_cu_decode_att *a, const gp_cu_tensor *out)
{
    return decode_unsupported(a, out) == NULL;
}

extern "C" int64_t gp_cuda_attention_decode_count(void)
{
    return decode_launches.load();
}

extern "C" int64_t gp_cuda_qkv_attention_count(void)
{
    return qkv_launches.load();
}

extern "C" int64_t gp_cuda_attention_head_count(void)
{
    return head_launches.load();
}

extern "C" int64_t gp_cuda_attention_trig_count(void)
{
    return head_trigs.load();
}

extern "C" int gp_cuda_attention_decode(gp_cu_ctx *c, const gp_cu_decode_att *a,
                                        const gp_cu_tensor *out, void *ws, size_t ws_size)
{
    const char *why = decode_unsupported(a, out);
    KT o = gp_kt_of(c, out), q = gp_kt_of(c, &a->q), kx = gp_kt_of(c, &a->k);
    KT vx = gp_kt_of(c, &a->v), kc = gp_kt_of(c, &a->k_cache), vc = gp_kt_of(c, &a->v_cache);
    KT p = gp_kt_of(c, &a->pos);
    if (!why && (q.ne[1] != 1 || o.ne[1] != 1 || kx.ne[1] != 1 || vx.ne[1] != 1 || p.ne[3] != 1))
        why = "launched for more than one token";
    if (why) {
        snprintf(c->err, sizeof c->err, "attention_decode: %s", why);
        return -1;
    }
    int64_t H = q.ne[2], D = q.ne[3];
    /* With clusters, the splits combine in shared memory: no workspace, no counters. */
    int cl = c->att_cluster > 1 ? c->att_cluster : D <= 64 ? c->att_cluster_small : 0;
    int cluster = cl > 1;
    int nsplit = cluster ? cl : att_splits(1, H, D, ws, ws_size);
    unsigned *counters = cluster ? NULL : att_counters(c, nsplit, 1, H);
    float *part = (float *)ws;
    dim3 grid((unsigned)H, 1, (unsigned)nsplit);
    int J = (int)((D + 31) / 32);
    J = J <= 2 ? 2 : J <= 4 ? 4 : ATT_MAXJ;
    DecArgs d = {(float)a->scale, o, q, kx, vx, kc, vc, p, a->rope_q, a->rope_k, part, counters,
                 a->rope_q.on ? a->tab_q : NULL, a->rope_k.on ? a->tab_k : NULL,
                 /* not with qkvatt: a late trigger makes it slower (bench/gpu-notes.md) */
                 !a->has_qkv && (c->late & GP_LATE_ATT), cluster, 0, AttMask()};
    d.mk.window = a->window > 0 ? a->window : 0;
    d.mk.ring = a->ring ? kc.ne[1] : 0;
    d.mk.cap = a->softcap > 0.0f ? a->softcap : 0.0f;
    if (a->has_qkv) {
        if (!gp_cuda_qkv_attention_ok(c, a, out) || !cluster || nsplit != GP_WS_ATTN_SPLITS) {
            snprintf(c->err, sizeof c->err, "attention_decode: q, k and v computed in the launch: "
                     "not on this device or with these operands");
            return -1;
        }
        int64_t K = a->qkv_w.ne[0];
        QkvArgs m = {(const char *)a->qkv_w.data, a->qkv_w.nb[0], K, H * QA_D,
                     (K + nsplit - 1) / nsplit, gp_kt_of(c, &a->qkv_b),
                     norm_params(c, &a->qkv_norm), (const float *)a->qkv_norm.x.data};
        int pf = att_pf(c);
        int kv = att_kv(c, d, 0, a->pos_const);
        if (m.nm.w.t != a->qkv_w.dtype || (m.nm.has_b && m.nm.b.t != a->qkv_w.dtype) ||
            m.bias.t != a->qkv_w.dtype)
            kv = -1; /* the instances take the norm's weights and the bias in W's dtype */
        typed_launches += kv >= 0;
        gp_cu_launch_z(c, grid.z,
                       a->qkv_w.dtype == GP_F16 ? qa_kernel<__half>(kv)
                                                : qa_kernel<__nv_bfloat16>(kv),
                       grid, ATT_THREADS, 0, d, m, a->pos_const, pf);
        if (gp_cu_check_launch(c, "qkv_attention"))
            return -1;
        decode_launches++;
        qkv_launches++;
        return 0;
    }
    int hk = c->att_head ? gp_cuda_attention_head_kv(a, out) : -1;
    if (hk >= 0) {
        d.trig = c->trig_early;
        head_trigs += d.trig;
        gp_cu_launch(c, hk == GP_F16 ? k_attention_head<GP_F16> : k_attention_head<GP_F32>,
                     dim3((unsigned)H), AH_THREADS, 0, d);
        if (gp_cu_check_launch(c, "attention_head"))
            return -1;
        decode_launches++;
        head_launches++;
        return 0;
    }
    if (J == 2)
        launch_dec<2>(grid, d, a->pos_const, c);
    else if (J == 4)
        launch_dec<4>(grid, d, a->pos_const, c);
    else
        launch_dec<ATT_MAXJ>(grid, d, a->pos_const, c);
    if (gp_cu_check_launch(c, "attention_decode"))
        return -1;
    decode_launches++;
    if (nsplit == 1 || counters || cluster)
        return 0;
    gp_cu_launch(c, k_attention_combine, dim3((unsigned)H, 1), 64, 0, nsplit, o, p, kc.ne[1],
                 (int)(d.mk.ring != 0), (const float *)part, (int64_t)1, c->d_syms);
    return gp_cu_check_launch(c, "attention_combine");
}

void gp_cu_stamps_attention(void *f)
{
#ifdef GPLAN_STAMPS
    /* Phases (STAMP n: the end of phase n): 1 the wait for the kernel before, 2 ready to attend
     * (qkvatt: q, k and v summed in the cluster; decode: pos read), 3 q loaded (and roped), 4
     * the cache rows and the new row attended, 5 the warps combined and the partials pushed, 6
     * the cluster barrier, 7 the combined dims stored; head: 1 the wait, 2 q and the new row
     * loaded, 3 the rows attended, 4 the warps combined and stored. */
    static const char *const names[] = {"qkvatt", "decode", "head"};
    stamps_print((FILE *)f, "attention", names, 3);
#else
    (void)f;
#endif
}

/* ---- the eval's rope tables ---- */

struct RopeTabs {
    gp_cu_rope r[GP_CU_ROPE_TABS];
    KT pos[GP_CU_ROPE_TABS];
    float *out[GP_CU_ROPE_TABS];
};

/* Block b: table b, one pair per thread (rope_cos_sin: the bits the attention's blocks compute).
 * A position out of range makes no table: the attention reads none then. */
__global__ void k_rope_tables(RopeTabs t)
{
    pdl_begin();
    const gp_cu_rope &r = t.r[blockIdx.x];
    int32_t p = *(const int32_t *)t.pos[blockIdx.x].p;
    if (p < 0)
        return;
    float *out = t.out[blockIdx.x];
    for (int64_t i = threadIdx.x; i < r.n / 2; i += blockDim.x)
        rope_cos_sin(r, (double)p, i, &out[i], &out[r.n / 2 + i]);
}

extern "C" int gp_cuda_rope_tables(gp_cu_ctx *c, const gp_cu_rope_tab *t, int n)
{
    if (n < 1 || n > GP_CU_ROPE_TABS) {
        snprintf(c->err, sizeof c->err, "rope_tables: %d tables (1 to %d)", n, GP_CU_ROPE_TABS);
        return -1;
    }
    RopeTabs rt;
    memset(&rt, 0, sizeof rt);
    for (int i = 0; i < n; i++) {
        if (!t[i].rope.on || t[i].rope.n < 2 || t[i].rope.n % 2 || t[i].pos.dtype != GP_I32 ||
            !t[i].out) {
            snprintf(c->err, sizeof c->err, "rope_tables: table %d: needs a rope with an even n "
                     "and an i32 pos", i);
            return -1;
        }
        rt.r[i] = t[i].rope;
        rt.pos[i] = gp_kt_of(c, &t[i].pos);
        rt.out[i] = t[i].out;
    }
    gp_cu_launch(c, k_rope_tables, dim3((unsigned)n), 64, 0, rt);
    return gp_cu_check_launch(c, "rope_tables");
}
