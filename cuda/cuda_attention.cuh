/* Device code of the attention kernels (cuda_attention.cu): the online softmax over cache rows,
 * the split partials and their combine, and the one-token attention with its ropes and cache
 * stores (decode_begin, decode_run). */
#ifndef GP_CUDA_ATTENTION_CUH
#define GP_CUDA_ATTENTION_CUH

#include <cooperative_groups.h>
#include <math.h>

#include "cuda/cuda_internal.cuh"
#include "plan/plan.h"

enum { ATT_WARPS = 4, ATT_MAXJ = 8 }; /* D <= 32 * ATT_MAXJ */
/* The threads that run an attention block (every attention kernel's whole block), synchronized
 * by att_sync. */
enum { ATT_THREADS = ATT_WARPS * 32 };
__device__ __forceinline__ void att_sync()
{
    sync_group<ATT_THREADS>();
}

/* One block's shared memory: each warp's running max, sum and accumulator [ATT_WARPS, 32 J], what
 * the split combine needs, and a one-token attention's rope angles by pair (q's, and the new key's
 * when its rope differs): cos and sin [n / 2 <= 16 J]. */
template <int J>
struct AttSmem {
    float m[ATT_WARPS], l[ATT_WARPS], acc[ATT_WARPS][32 * J];
    float wgt[GP_WS_ATTN_SPLITS];
    float inv_l;
    int last;
    float qcs[16 * J], qsn[16 * J], kcs[16 * J], ksn[16 * J];
    /* cluster_finish: the splits' partials of this block's dims, written by the splits */
    float pin[32 * J + GP_WS_ATTN_SPLITS], pin_m[GP_WS_ATTN_SPLITS], pin_l[GP_WS_ATTN_SPLITS];
};

/* A split's maximum as the combine counts it: none (-inf) when it attended no row (sum 0). */
__device__ __forceinline__ float split_max(float m, float l)
{
    return l > 0.0f ? m : -INFINITY;
}

/* The weight of a split of maximum m (split_max) against the largest, M. */
__device__ __forceinline__ float split_weight(float m, float M)
{
    return m == -INFINITY ? 0.0f : expf(m - M);
}

/* Combines the nsplit partials of (h, t) into out: each thread's first dim's partials are loaded
 * with the splits' maxima and sums (one round trip), then every thread adds its dims over the
 * splits. Partials are read past L1 (other blocks of this launch may have written them). */
template <int NT = 0>
__device__ __forceinline__ void combine_partials(int nsplit, const KT &o, int64_t h, int64_t t,
                                                 const float *part, int64_t Tl, float *wgt,
                                                 float *inv_l)
{
    int64_t H = o.ne[2], D = o.ne[3], d0 = threadIdx.x;
    float x[GP_WS_ATTN_SPLITS];
#pragma unroll
    for (int i = 0; i < GP_WS_ATTN_SPLITS; i++)
        x[i] = i < nsplit && d0 < D ? __ldcg(part + ((i * Tl + t) * H + h) * (D + 2) + d0) : 0.0f;
    if (threadIdx.x < 32) {
        int i = threadIdx.x;
        float m = -INFINITY, l = 0.0f;
        if (i < nsplit) {
            const float *pp = part + ((i * Tl + t) * H + h) * (D + 2);
            l = __ldcg(pp + D + 1);
            m = split_max(__ldcg(pp + D), l);
        }
        float M = warp_max(m);
        float w = split_weight(m, M);
        float L = warp_sum(l * w);
        if (i < nsplit)
            wgt[i] = w;
        if (i == 0)
            *inv_l = 1.0f / L;
    }
    sync_group<NT>();
    for (int64_t d = d0; d < D; d += NT ? NT : blockDim.x) {
        if (d != d0) {
#pragma unroll
            for (int i = 0; i < GP_WS_ATTN_SPLITS; i++)
                x[i] = i < nsplit ? __ldcg(part + ((i * Tl + t) * H + h) * (D + 2) + d) : 0.0f;
        }
        float a = 0.0f;
#pragma unroll
        for (int i = 0; i < GP_WS_ATTN_SPLITS; i++)
            if (i < nsplit && wgt[i] != 0.0f)
                a += x[i] * wgt[i];
        st_f(o.p + t * o.nb[1] + h * o.nb[2] + d * o.nb[3], o.t, a * *inv_l);
    }
}

/*
 * The attention's window, ring and soft-capping (its attributes window, ring and softcap): the
 * query at position p attends to positions lo..p, lo = max(0, p - window + 1) (window 0: lo 0);
 * position s is cache row s % ring in a ring (ring = S; 0: row s); each score, after the scale,
 * becomes cap tanh(score / cap) when cap > 0. All zero: causal attention over rows 0..p.
 * A ragged batch (block > 0): position s of the query's sequence is row tab[s / block] * block +
 * s % block, tab that sequence's row of the block table (att_for_query sets it), positions under
 * span (the table's width times block).
 */
struct AttMask {
    int64_t window, ring;
    float cap;
    int64_t block, span;
    const char *tab;          /* the block table [N, M] (att_for_query: the query's row) */
    int64_t tab_row, tab_col; /* its strides in bytes */
    const char *seq;          /* seq [T]: each query's sequence */
    int64_t seq_nb;
};

__device__ __forceinline__ int64_t att_lo(const AttMask &mk, int32_t p)
{
    return mk.window > 0 && p - mk.window + 1 > 0 ? p - mk.window + 1 : 0;
}

/* The cache row of position s >= 0. */
__device__ __forceinline__ int64_t att_row(const AttMask &mk, int64_t s)
{
    if (mk.block)
        return (int64_t)*(const int32_t *)(mk.tab + s / mk.block * mk.tab_col) * mk.block +
               s % mk.block;
    return mk.ring ? s % mk.ring : s;
}

/* The mask of query t: in a ragged batch, its sequence's row of the block table. */
__device__ __forceinline__ AttMask att_for_query(const AttMask &mk, int64_t t)
{
    AttMask m = mk;
    if (mk.block)
        m.tab += (int64_t)*(const int32_t *)(mk.seq + t * mk.seq_nb) * mk.tab_row;
    return m;
}

__device__ __forceinline__ float att_cap(const AttMask &mk, float x)
{
    return mk.cap > 0.0f ? mk.cap * tanhf(x / mk.cap) : x;
}

/* A position the attention can take with a cache of S rows (the runtime checks pos before the
 * eval; a ring takes any p >= 0). */
__device__ __forceinline__ bool att_pos_ok(const AttMask &mk, int32_t p, int64_t S)
{
    return p >= 0 && (mk.ring || p < (mk.block ? mk.span : S));
}

/* Positions [*s0, *s1) of split `split` of nsplit over positions lo..p. */
__device__ __forceinline__ void split_rows(int64_t lo, int32_t p, int nsplit, int split,
                                           int64_t *s0, int64_t *s1)
{
    int64_t per = (p + 1 - lo + nsplit - 1) / nsplit;
    *s0 = lo + split * per;
    *s1 = min((int64_t)p + 1, *s0 + per);
}

/* Brings the rows of positions [s0, s1) of KV head g of the K and V caches into L2 (a hint:
 * harmless on rows that are being written). */
__device__ __forceinline__ void prefetch_kv(const KT &k, const KT &v, int64_t g, int64_t D,
                                           int64_t s0, int64_t s1, const AttMask &mk)
{
    int64_t bytes = D * k.nb[3];
    for (int64_t s = s0 + threadIdx.x; s < s1; s += blockDim.x) {
        int64_t r = att_row(mk, s);
        for (int64_t b = 0; b < bytes; b += 128) {
            prefetch_l2(k.p + r * k.nb[1] + g * k.nb[2] + b);
            prefetch_l2(v.p + r * v.nb[1] + g * v.nb[2] + b);
        }
    }
}

/* Brings this block's K and V cache rows into L2 before it waits for the kernel before it. Only
 * what no kernel of this eval writes is read here: the sizes and positions, copied in before the
 * first kernel. (Row pos[t] itself is being written by the store before this kernel; a prefetch
 * is a hint, so that is harmless.) */
__device__ __forceinline__ void prefetch_rows(KT q, const KT &k, const KT &v, const KT &pos,
                                              const int64_t *syms, const AttMask &mk)
{
    kt_resolve(q, syms);
    int64_t T = q.ne[1], H = q.ne[2], D = q.ne[3], S = k.ne[1], G = k.ne[2];
    int64_t h = blockIdx.x, t = blockIdx.y, g = h / (H / G);
    if (t >= T)
        return;
    int32_t p = *(const int32_t *)(pos.p + t * pos.nb[3]);
    if (!att_pos_ok(mk, p, S))
        return;
    int64_t s0, s1;
    split_rows(att_lo(mk, p), p, gridDim.z, blockIdx.z, &s0, &s1);
    prefetch_kv(k, v, g, D, s0, s1, mk);
}

/* The bits of the cache rows of positions s and s + ATT_WARPS (when < s1) of a KV head's keys
 * (pk) and values (pv) at a warp's dims d = lane + 32 j < D; zero elsewhere. */
template <int J> struct KvRows {
    uint32_t k1[J], k2[J], v1[J], v2[J];
};

template <int J>
__device__ __forceinline__ void kv_load(KvRows<J> &r, const char *pk, const char *pv, const KT &k,
                                        const KT &v, int64_t D, int64_t s, int64_t s1,
                                        const AttMask &mk)
{
    int lane = threadIdx.x & 31;
    int64_t s2 = s + ATT_WARPS;
    int64_t r1 = s < s1 ? att_row(mk, s) : 0, r2 = s2 < s1 ? att_row(mk, s2) : 0;
#pragma unroll
    for (int j = 0; j < J; j++) {
        int64_t d = lane + 32 * j;
        r.k1[j] = r.k2[j] = r.v1[j] = r.v2[j] = 0;
        if (d < D && s < s1) {
            r.k1[j] = ld_bits(pk + r1 * k.nb[1] + d * k.nb[3], k.t);
            r.v1[j] = ld_bits(pv + r1 * v.nb[1] + d * v.nb[3], v.t);
            if (s2 < s1) {
                r.k2[j] = ld_bits(pk + r2 * k.nb[1] + d * k.nb[3], k.t);
                r.v2[j] = ld_bits(pv + r2 * v.nb[1] + d * v.nb[3], v.t);
            }
        }
    }
}

/* Whether a one-token attention of J (head dims / 32) overlaps its loads: the first cache rows
 * with q and the new row, the next rows with the current ones. J = 2 only: at J = 4 the
 * attentions get no faster and the eval slower (bench/gpu-notes.md). */
template <int J> struct AttPipe {
    enum { on = J <= 2 };
};

/* One warp's online softmax over positions s0, s0 + ATT_WARPS, ... < s1 (their rows, mk) of the
 * KV head at pk and pv, two at a time so their reductions overlap, scores soft-capped by mk: m, l
 * and acc (its lanes' dims d = lane + 32 j) updated. With PIPE, cur holds rows s0 and
 * s0 + ATT_WARPS (kv_load, issued by the caller) and each step loads the next two rows before it
 * uses these (one round trip in all when the warp has two rows or fewer); without, cur is scratch
 * and each step loads its own rows. */
template <int J, bool PIPE>
__device__ __forceinline__ void attend_rows(const float (&qv)[J], KvRows<J> &cur, const char *pk,
                                            const char *pv, const KT &k, const KT &v, int64_t D,
                                            int64_t s0, int64_t s1, float scale,
                                            const AttMask &mk, float &m, float &l, float (&acc)[J])
{
    int lane = threadIdx.x & 31;
    for (int64_t s = s0; s < s1; s += 2 * ATT_WARPS) {
        int two = s + ATT_WARPS < s1;
        KvRows<J> nx;
        if (PIPE)
            kv_load(nx, pk, pv, k, v, D, s + 2 * ATT_WARPS, s1, mk);
        else
            kv_load(cur, pk, pv, k, v, D, s, s1, mk);
        float d1 = 0.0f, d2 = 0.0f;
#pragma unroll
        for (int j = 0; j < J; j++) {
            if (lane + 32 * j < D) {
                d1 += qv[j] * bits_f(cur.k1[j], k.t);
                if (two)
                    d2 += qv[j] * bits_f(cur.k2[j], k.t);
            }
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            d1 += __shfl_xor_sync(0xffffffffu, d1, off);
            d2 += __shfl_xor_sync(0xffffffffu, d2, off);
        }
        d1 = att_cap(mk, d1 * scale);
        d2 = two ? att_cap(mk, d2 * scale) : -INFINITY;
        float mn = fmaxf(m, fmaxf(d1, d2));
        float corr = expf(m - mn), e1 = expf(d1 - mn), e2 = two ? expf(d2 - mn) : 0.0f;
        l = l * corr + e1 + e2;
#pragma unroll
        for (int j = 0; j < J; j++) {
            if (lane + 32 * j < D) {
                float a = acc[j] * corr + e1 * bits_f(cur.v1[j], v.t);
                if (two)
                    a += e2 * bits_f(cur.v2[j], v.t);
                acc[j] = a;
            }
        }
        m = mn;
        if (PIPE)
            cur = nx;
    }
}

/* The same for one row held in registers (kn, vn: zero past D). */
template <int J>
__device__ __forceinline__ void attend_regs(const float (&qv)[J], const float (&kn)[J],
                                            const float (&vn)[J], float scale, const AttMask &mk,
                                            float &m, float &l, float (&acc)[J])
{
    float d1 = 0.0f;
#pragma unroll
    for (int j = 0; j < J; j++)
        d1 += qv[j] * kn[j];
    d1 = att_cap(mk, warp_sum(d1) * scale);
    float mn = fmaxf(m, d1), corr = expf(m - mn), e1 = expf(d1 - mn);
    l = l * corr + e1;
#pragma unroll
    for (int j = 0; j < J; j++)
        acc[j] = acc[j] * corr + e1 * vn[j];
    m = mn;
}

/*
 * The splits of (h, t) combined through distributed shared memory, when they were launched as one
 * cluster (one block per split, block rank = split): block r combines dims [r c, r c + c) for
 * c = ceil(D / nsplit) from its own shared memory, where every split wrote its partial of those
 * dims (cluster_push) before one cluster barrier. A group of P lanes (nsplit <= P, a power of
 * two) takes one dim, a lane per split: the splits' maximum, weights and sums are reduced across
 * the group with shuffles, so each thread computes one weight, not every split's. (An unrolled
 * loop over the splits would be several KB of the kernel's code, which every launch fetches
 * cold.) Nothing reads another block's memory after the barrier, so no block waits for
 * the others to leave. Every thread of every block of the cluster calls it.
 */
template <int J>
__device__ __forceinline__ void cluster_finish(AttSmem<J> &sm, const KT &o, int64_t h, int64_t t)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
    __trap(); /* no clusters before sm_90: gp_cuda_attention_cluster_ok keeps them off there */
#elif defined(__CUDA_ARCH__)
    namespace cg = cooperative_groups;
    cg::cluster_group cl = cg::this_cluster();
    cl.sync();
    STAMP(6);
    int D = (int)o.ne[3], ns = (int)cl.num_blocks(), r = (int)cl.block_rank();
    int c = (D + ns - 1) / ns, P = ns <= 2 ? 2 : ns <= 4 ? 4 : ns <= 8 ? 8 : 16;
    int i = threadIdx.x & (P - 1);
    if (threadIdx.x >= ATT_THREADS || ns > GP_WS_ATTN_SPLITS)
        return;
    float m = -INFINITY, l = 0.0f;
    if (i < ns) {
        l = sm.pin_l[i];
        m = split_max(sm.pin_m[i], l);
    }
    float M = m;
    for (int off = P / 2; off > 0; off >>= 1)
        M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, off));
    float w = split_weight(m, M), L = l * w;
    for (int off = P / 2; off > 0; off >>= 1)
        L += __shfl_xor_sync(0xffffffffu, L, off);
    /* every lane runs every step (the shuffles), whether its dim exists or not */
    for (int j0 = 0; j0 < c; j0 += ATT_THREADS / P) {
        int j = j0 + (int)threadIdx.x / P, d = r * c + j;
        float a = i < ns && j < c && w != 0.0f ? sm.pin[i * c + j] * w : 0.0f;
        for (int off = P / 2; off > 0; off >>= 1)
            a += __shfl_xor_sync(0xffffffffu, a, off);
        if (i == 0 && j < c && d < D)
            st_f(o.p + t * o.nb[1] + h * o.nb[2] + d * o.nb[3], o.t, a * (1.0f / L));
    }
#endif
}

/* This split's partial a of dim d into the shared memory of the cluster's block that combines d
 * (cluster_finish). */
template <int J>
__device__ __forceinline__ void cluster_push(AttSmem<J> &sm, int D, int nsplit, int split, int d,
                                             float a)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cooperative_groups::cluster_group cl = cooperative_groups::this_cluster();
    int c = (D + nsplit - 1) / nsplit;
    cl.map_shared_rank(&sm, (unsigned)(d / c))->pin[split * c + d % c] = a;
#endif
}

/* This split's max M and sum L into block `to`'s shared memory (cluster_finish). */
template <int J>
__device__ __forceinline__ void cluster_push_stats(AttSmem<J> &sm, int split, unsigned to, float M,
                                                   float L)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    AttSmem<J> *b = cooperative_groups::this_cluster().map_shared_rank(&sm, to);
    b->pin_m[split] = M;
    b->pin_l[split] = L;
#endif
}

/*
 * The end of an attention block: its warps' results combined; cluster (nsplit > 1 then): the
 * partial to the blocks that combine it (cluster_push; every block of the cluster has started,
 * which the caller made sure of), then cluster_finish; nsplit == 1: the normalized result to out;
 * else partials to part (f32 [nsplit, Tl, H, D + 2]) and, with counters, the last split block of
 * (h, t) to get here combines them into out and resets its counter. Lane i < ATT_WARPS of every
 * warp computes warp i's weight, which the lanes then share.
 */
template <int J>
__device__ __forceinline__ void attend_finish(AttSmem<J> &sm, float m, float l,
                                              const float (&acc)[J], const KT &o, int64_t h,
                                              int64_t t, int nsplit, int split, float *part,
                                              int64_t Tl, unsigned *counters, int cluster = 0)
{
    int64_t H = o.ne[2];
    int D = (int)o.ne[3], lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) {
        sm.m[w] = m;
        sm.l[w] = l;
    }
#pragma unroll
    for (int j = 0; j < J; j++)
        sm.acc[w][lane + 32 * j] = acc[j];
    att_sync();
    float M = -INFINITY;
#pragma unroll
    for (int i = 0; i < ATT_WARPS; i++)
        M = fmaxf(M, sm.m[i]);
    float fi = 0.0f, li = 0.0f;
    if (lane < ATT_WARPS) {
        li = sm.l[lane];
        fi = sm.m[lane] == -INFINITY ? 0.0f : expf(sm.m[lane] - M);
    }
    float L = li * fi, f[ATT_WARPS];
    for (int off = ATT_WARPS / 2; off > 0; off >>= 1)
        L += __shfl_xor_sync(0xffffffffu, L, off);
    L = __shfl_sync(0xffffffffu, L, 0);
#pragma unroll
    for (int i = 0; i < ATT_WARPS; i++)
        f[i] = __shfl_sync(0xffffffffu, fi, i);
#pragma unroll 1 /* one step where D <= ATT_THREADS */
    for (int d = threadIdx.x; d < D; d += ATT_THREADS) {
        float a = 0.0f;
#pragma unroll
        for (int i = 0; i < ATT_WARPS; i++)
            a += sm.acc[i][d] * f[i];
        if (cluster) {
            cluster_push(sm, D, nsplit, split, d, a);
        } else if (nsplit == 1) {
            st_f(o.p + t * o.nb[1] + h * o.nb[2] + d * o.nb[3], o.t, a / L);
        } else {
            float *pp = part + ((split * Tl + t) * H + h) * (D + 2);
            pp[d] = a;
            if (d == 0) {
                pp[D] = M;
                pp[D + 1] = L;
            }
        }
    }
    if (cluster) {
        if (threadIdx.x < nsplit)
            cluster_push_stats(sm, split, threadIdx.x, M, L);
        STAMP(5);
        cluster_finish(sm, o, h, t);
        return;
    }
    if (nsplit == 1 || !counters)
        return;
    /* The last split block of (h, t) to get here combines: its partials are visible to it. */
    unsigned *cnt = counters + t * H + h;
    if (!last_of<ATT_THREADS>(cnt, (unsigned)nsplit, &sm.last))
        return;
    combine_partials<ATT_THREADS>(nsplit, o, h, t, part, Tl, sm.wgt, &sm.inv_l);
    if (threadIdx.x == 0)
        *cnt = 0;
}

/* v as stored in dtype t and read back (st_f then ld_f). */
__device__ __forceinline__ float round_to(float v, int t)
{
    switch (t) {
    case GP_F32:
        return v;
    case GP_F16:
        return __half2float(__float2half_rn(v));
    case GP_BF16:
        return __bfloat162float(__float2bfloat16_rn(v));
    default:
        return (float)gp_f32_to_i32_sat(v);
    }
}

/* The angles of rope r at position p: cos and sin of p * theta^(-2i/n) for its pairs i < n/2, one
 * pair per thread of the block; in double, then rounded to f32, as k_rope and the CPU compute them.
 * (Each lane computing its own dims' angles would cost ~100 double operations per dim.) */
__device__ __forceinline__ void rope_table(const gp_cu_rope &r, int32_t p, float *cs, float *sn)
{
    if (!r.on)
        return;
    for (int64_t i = threadIdx.x; i < r.n / 2; i += ATT_THREADS)
        rope_cos_sin(r, (double)p, i, &cs[i], &sn[i]);
}

/* Dim d's angle from rope r's table (cs, sn by pair): pairs (i, i + n/2), or (2i, 2i + 1)
 * interleaved; no rotation past n or with the rope off. */
__device__ __forceinline__ void rope_angle(const gp_cu_rope &r, const float *cs, const float *sn,
                                           int64_t d, float *c, float *s)
{
    *c = 1.0f;
    *s = 0.0f;
    if (!r.on || d >= r.n)
        return;
    int64_t half = r.n / 2, i = r.interleaved ? d / 2 : d < half ? d : d - half;
    *c = cs[i];
    *s = sn[i];
}

/* Dims d = lane + 32 j < D of row x (stride nb, dtype t; 0 past D) after rope r, in two steps so
 * that the loads of several rows can be in flight at once: rope_load issues the loads (with r's
 * angles by pair from cs, sn), rope_mix computes. Pairs (u, v) = (i, i + n/2), or (2i, 2i + 1)
 * interleaved, become (u cs - v sn, u sn + v cs), rounded to the rope's output dtype; dims past n
 * are only rounded; with r off, x as it is. The products and sums are rounded one by one (no FMA),
 * as the CPU's rope. */
template <int J> struct RopeRow {
    uint32_t u[J], v[J]; /* the bits of each dim and of its pair's other element */
    int second[J];       /* the dim is its pair's second element */
    float c[J], s[J];    /* its angle's cos and sin */
};

/* rope_load also reads each dim's angle from r's table cs, sn (shared memory, or the eval's table
 * in global memory), so those loads are in flight with the row's. */
template <int J>
__device__ __forceinline__ void rope_load(RopeRow<J> &x, const gp_cu_rope &r, const float *cs,
                                          const float *sn, const char *px, int64_t nb, int t,
                                          int64_t D)
{
    int lane = threadIdx.x & 31;
    int64_t off = r.interleaved ? 1 : r.n / 2;
#pragma unroll
    for (int j = 0; j < J; j++) {
        int64_t d = lane + 32 * j;
        int rot = r.on && d < r.n;
        x.second[j] = rot && (r.interleaved ? (int)(d & 1) : d >= off);
        int64_t du = x.second[j] ? d - off : d;
        x.u[j] = x.v[j] = 0;
        if (d < D) {
            x.u[j] = ld_bits(px + du * nb, t);
            if (rot)
                x.v[j] = ld_bits(px + (du + off) * nb, t);
        }
        rope_angle(r, cs, sn, d, &x.c[j], &x.s[j]);
    }
}

template <int J>
__device__ __forceinline__ void rope_mix(const RopeRow<J> &x, const gp_cu_rope &r, int t, int64_t D,
                                         float (&y)[J])
{
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int j = 0; j < J; j++) {
        int64_t d = lane + 32 * j;
        float u = bits_f(x.u[j], t), v = bits_f(x.v[j], t), c = x.c[j], sa = x.s[j];
        float z = x.second[j] ? __fadd_rn(__fmul_rn(u, sa), __fmul_rn(v, c))
                              : __fsub_rn(__fmul_rn(u, c), __fmul_rn(v, sa));
        y[j] = d >= D ? 0.0f : !r.on ? u : d >= r.n ? round_to(u, r.dtype) : round_to(z, r.dtype);
    }
}

/* The same rope (both off, or the same n, theta, mode and scaling): the same angles. */
__device__ __forceinline__ int same_angles(const gp_cu_rope &a, const gp_cu_rope &b)
{
    return a.on == b.on &&
           (!a.on || (a.n == b.n && a.theta == b.theta && a.interleaved == b.interleaved &&
                      a.orig_len == b.orig_len &&
                      (a.orig_len == 0 ||
                       (a.factor == b.factor && a.low == b.low && a.high == b.high))));
}

/* A one-token attention's operands (gp_cu_decode_att as kernels see it). */
struct DecArgs {
    float scale;
    KT o, q, kx, vx, kc, vc, pos;
    gp_cu_rope rq, rk;
    float *part;        /* split partials [nsplit, 1, H, D + 2] */
    unsigned *counters; /* [H], zero between launches: the last split block combines */
    const float *tq, *tk; /* rq's and rk's angles for this eval (gp_cu_decode_att.tab_q, tab_k):
                             cos [n/2], then sin [n/2]; NULL: each block computes them */
    int late;             /* the next kernel may start once the rows are attended, not before */
    int cluster;          /* the nsplit blocks of a head are one cluster: cluster_finish combines */
    int trig;             /* k_attention_head: the next kernel may start at this one's start
                             (gp_cu_ctx.trig_early) */
    AttMask mk;           /* window, ring and soft-capping (gp_cu_decode_att) */
};

/* Where block (h, split) reads the angles (cos, sin by pair) of rope q, or with k the new key's:
 * the eval's table, else its shared memory's (the key's are q's when the angles are the same). */
template <int J>
__device__ __forceinline__ void dec_angles(const DecArgs &a, const AttSmem<J> &sm, int k,
                                           const float **cs, const float **sn)
{
    int own = k && !same_angles(a.rq, a.rk); /* the key's angles are its own */
    const float *t = own ? a.tk : a.tq;
    const gp_cu_rope &r = k ? a.rk : a.rq; /* the same n as q's when not own */
    *cs = t ? t : own ? sm.kcs : sm.qcs;
    *sn = t ? t + r.n / 2 : own ? sm.ksn : sm.qsn;
}

/* What block (h, split) of a one-token attention knows once it has read pos: p, its rows [s0, s1),
 * whether row p is among them and which warp takes it. */
struct DecState {
    int32_t p;
    int64_t s0, s1;
    int has_new, wnew;
};

/* Reads pos and sets st up for block (h, split) of nsplit (p = -1 when pos is out of range, which
 * the runtime checks before the eval), with q's angles in sm (non-empty splits) and the new key's
 * (its block, when its rope differs). Every thread of the block calls it: it ends in a barrier. */
template <int J>
__device__ __forceinline__ void decode_begin(const DecArgs &a, AttSmem<J> &sm, int nsplit, int split,
                                             DecState &st)
{
    st.p = *(const int32_t *)a.pos.p;
    st.s0 = st.s1 = 0;
    st.has_new = st.wnew = 0;
    if (!att_pos_ok(a.mk, st.p, a.kc.ne[1])) {
        st.p = -1;
    } else {
        split_rows(att_lo(a.mk, st.p), st.p, nsplit, split, &st.s0, &st.s1);
        st.has_new = st.s0 < st.s1 && st.s1 == (int64_t)st.p + 1;
        st.wnew = (int)((st.p - st.s0) % ATT_WARPS);
        if (st.s0 < st.s1 && !a.tq)
            rope_table(a.rq, st.p, sm.qcs, sm.qsn);
        if (st.has_new && !same_angles(a.rq, a.rk) && !a.tk)
            rope_table(a.rk, st.p, sm.kcs, sm.ksn);
    }
    att_sync();
}

/* The loads of the new row: its key's (rope_load, rope rk, angles cs and sn) and its value's bits
 * (vb). */
template <int J>
__device__ __forceinline__ void new_row_load(RopeRow<J> &kr, uint32_t (&vb)[J], const gp_cu_rope &rk,
                                             const float *cs, const float *sn, const char *pkx,
                                             const KT &kx, const char *pvx, const KT &vx, int64_t D)
{
    int lane = threadIdx.x & 31;
    rope_load(kr, rk, cs, sn, pkx, kx.nb[3], kx.t, D);
#pragma unroll
    for (int j = 0; j < J; j++) {
        int64_t d = lane + 32 * j;
        vb[j] = d < D ? ld_bits(pvx + d * vx.nb[3], vx.t) : 0;
    }
}

/* The cache rows a warp of block (h, split) attends first (AttPipe): its first two of the block's
 * rows before the new one. No kernel of the eval writes them, so a caller that has read pos early
 * issues these loads before its PDL wait (decode_run then takes them, `first`); zero when the
 * block has no rows. */
template <int J>
__device__ __forceinline__ void decode_first(const DecArgs &a, int64_t h, const DecState &st,
                                             KvRows<J> &first)
{
    int64_t H = a.q.ne[2], G = a.kc.ne[2], g = h / (H / G);
    int w = threadIdx.x >> 5;
    int64_t s1 = st.p < 0 ? 0 : st.has_new ? (int64_t)st.p : st.s1;
    kv_load(first, a.kc.p + g * a.kc.nb[2], a.vc.p + g * a.vc.nb[2], a.kc, a.vc, a.q.ne[3],
            st.s0 + w, s1, a.mk);
}

/*
 * The rest of block (h, split): q rotated, rows [s0, s1) attended (row p, when among them, from
 * the sources, and written into both caches by the block of each KV group's first head), then
 * attend_finish. Every thread of the block (ATT_WARPS warps) calls it. With loaded, first holds
 * the rows of decode_first, loaded by the caller; else it is scratch.
 */
template <int J>
__device__ __forceinline__ void decode_run(const DecArgs &a, AttSmem<J> &sm, int64_t h, int nsplit,
                                           int split, const DecState &st, KvRows<J> &first,
                                           bool loaded)
{
    const KT &q = a.q, &kx = a.kx, &vx = a.vx, &kc = a.kc, &vc = a.vc;
    int64_t H = q.ne[2], D = q.ne[3], G = kc.ne[2], g = h / (H / G);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int32_t p = st.p;
    if (p < 0)
        return;
    /* With AttPipe, every load of the block's first step at once: q, this warp's first two cache
     * rows, and the new row's key and value for the warp that takes it; without, each where it
     * is used. */
    const bool pipe = AttPipe<J>::on;
    const char *pk = kc.p + g * kc.nb[2], *pv = vc.p + g * vc.nb[2];
    const char *pkx = kx.p + g * kx.nb[2], *pvx = vx.p + g * vx.nb[2];
    int64_t s1 = st.has_new ? (int64_t)p : st.s1;
    int takes_new = st.has_new && w == st.wnew;
    const float *kcs, *ksn;
    dec_angles(a, sm, 1, &kcs, &ksn);
    RopeRow<J> qr, kr;
    uint32_t vb[J];
    if (st.s0 < st.s1) {
        const float *qcs, *qsn;
        dec_angles(a, sm, 0, &qcs, &qsn);
        rope_load(qr, a.rq, qcs, qsn, q.p + h * q.nb[2], q.nb[3], q.t, D);
    }
    if (pipe && !loaded)
        decode_first(a, h, st, first);
    if (pipe && takes_new)
        new_row_load(kr, vb, a.rk, kcs, ksn, pkx, kx, pvx, vx, D);
    float qv[J], acc[J];
#pragma unroll
    for (int j = 0; j < J; j++)
        qv[j] = acc[j] = 0.0f;
    if (st.s0 < st.s1)
        rope_mix(qr, a.rq, q.t, D, qv);
    STAMP(3);
    float m = -INFINITY, l = 0.0f;
    attend_rows<J, pipe>(qv, first, pk, pv, kc, vc, D, st.s0 + w, s1, a.scale, a.mk, m, l, acc);
    if (takes_new) {
        /* The new row as the store writes it: rope's output rounded to its dtype, then to the
         * cache's. Only the first head's block of the group writes it (one writer per row). */
        float kn[J], vn[J];
        int writer = h % (H / G) == 0;
        int64_t pr = att_row(a.mk, p); /* the new row's place in the caches */
        if (!pipe)
            new_row_load(kr, vb, a.rk, kcs, ksn, pkx, kx, pvx, vx, D);
        rope_mix(kr, a.rk, kx.t, D, kn);
#pragma unroll
        for (int j = 0; j < J; j++) {
            int64_t d = lane + 32 * j;
            vn[j] = 0.0f;
            if (d < D) {
                kn[j] = round_to(kn[j], kc.t);
                vn[j] = round_to(bits_f(vb[j], vx.t), vc.t);
                if (writer) {
                    st_f(kc.p + pr * kc.nb[1] + g * kc.nb[2] + d * kc.nb[3], kc.t, kn[j]);
                    st_f(vc.p + pr * vc.nb[1] + g * vc.nb[2] + d * vc.nb[3], vc.t, vn[j]);
                }
            }
        }
        attend_regs(qv, kn, vn, a.scale, a.mk, m, l, acc);
    }
    if (a.late)
        pdl_trigger();
    STAMP(4);
    attend_finish(sm, m, l, acc, a.o, h, 0, nsplit, split, a.part, 1, a.counters, a.cluster);
    STAMP(7);
}


#endif
