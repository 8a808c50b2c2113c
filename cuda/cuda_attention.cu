/* CUDA attention: causal scaled-dot-product attention of new queries over a KV cache (grouped-query),
 * with an online softmax. Few queries (decode): the cache rows 0..pos[t] are split over
 * GP_WS_ATTN_SPLITS blocks whose partial results go to the planned workspace and are combined by
 * the last of those blocks to finish (or by a second kernel); many queries (a prompt): one block per
 * (query, head). One token with its K/V cache stores (and the ropes before them) inside:
 * gp_cuda_attention_decode. */
#include <atomic>
#include <math.h>
#include <stdio.h>

#include "cuda/cuda_internal.cuh"
#include "runtime/plan.h"

enum { ATT_WARPS = 4, ATT_MAXJ = 8 }; /* D <= 32 * ATT_MAXJ */

/* One block's shared memory: each warp's running max, sum and accumulator [ATT_WARPS, 32 J], then
 * what the split combine needs. */
template <int J>
struct AttSmem {
    float m[ATT_WARPS], l[ATT_WARPS], acc[ATT_WARPS][32 * J];
    float wgt[GP_WS_ATTN_SPLITS];
    float inv_l;
    int last;
};

/* Combines the nsplit partials of (h, t) into out: the splits' maxima and sums are read at once
 * into shared memory, then every thread adds its dims over the splits. Partials are read past L1
 * (other blocks of this launch may have written them). */
__device__ __forceinline__ void combine_partials(int nsplit, const KT &o, int64_t h, int64_t t,
                                                 const float *part, int64_t Tl, float *wgt,
                                                 float *inv_l)
{
    int64_t H = o.ne[2], D = o.ne[3];
    if (threadIdx.x < 32) {
        int i = threadIdx.x;
        float m = -INFINITY, l = 0.0f;
        if (i < nsplit) {
            const float *pp = part + ((i * Tl + t) * H + h) * (D + 2);
            m = __ldcg(pp + D);
            l = __ldcg(pp + D + 1);
            if (!(l > 0.0f))
                m = -INFINITY;
        }
        float M = warp_max(m);
        float w = m == -INFINITY ? 0.0f : expf(m - M);
        float L = warp_sum(l * w);
        if (i < nsplit)
            wgt[i] = w;
        if (i == 0)
            *inv_l = 1.0f / L;
    }
    __syncthreads();
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        float a = 0.0f;
#pragma unroll 4
        for (int i = 0; i < nsplit; i++)
            if (wgt[i] != 0.0f)
                a += __ldcg(part + ((i * Tl + t) * H + h) * (D + 2) + d) * wgt[i];
        st_f(o.p + t * o.nb[1] + h * o.nb[2] + d * o.nb[3], o.t, a * *inv_l);
    }
}

/* Cache rows [*s0, *s1) of split `split` of nsplit over rows 0..p. */
__device__ __forceinline__ void split_rows(int32_t p, int nsplit, int split, int64_t *s0, int64_t *s1)
{
    int64_t per = (p + 1 + nsplit - 1) / nsplit;
    *s0 = split * per;
    *s1 = min((int64_t)p + 1, *s0 + per);
}

/* Brings rows [s0, s1) of KV head g of the K and V caches into L2 (a hint: harmless on rows that
 * are being written). */
__device__ __forceinline__ void prefetch_kv(const KT &k, const KT &v, int64_t g, int64_t D,
                                           int64_t s0, int64_t s1)
{
    int64_t bytes = D * k.nb[3];
    for (int64_t s = s0 + threadIdx.x; s < s1; s += blockDim.x)
        for (int64_t b = 0; b < bytes; b += 128) {
            prefetch_l2(k.p + s * k.nb[1] + g * k.nb[2] + b);
            prefetch_l2(v.p + s * v.nb[1] + g * v.nb[2] + b);
        }
}

/* Brings this block's K and V cache rows into L2 before it waits for the kernel before it. Only
 * what no kernel of this eval writes is read here: the sizes and positions, copied in before the
 * first kernel. (Row pos[t] itself is being written by the store before this kernel; a prefetch
 * is a hint, so that is harmless.) */
__device__ __forceinline__ void prefetch_rows(KT q, const KT &k, const KT &v, const KT &pos,
                                              const int64_t *syms)
{
    kt_resolve(q, syms);
    int64_t T = q.ne[1], H = q.ne[2], D = q.ne[3], S = k.ne[1], G = k.ne[2];
    int64_t h = blockIdx.x, t = blockIdx.y, g = h / (H / G);
    if (t >= T)
        return;
    int32_t p = *(const int32_t *)(pos.p + t * pos.nb[3]);
    if (p < 0 || p >= S)
        return;
    int64_t s0, s1;
    split_rows(p, gridDim.z, blockIdx.z, &s0, &s1);
    prefetch_kv(k, v, g, D, s0, s1);
}

/* One warp's online softmax over cache rows s0, s0 + ATT_WARPS, ... < s1 of the KV head at pk and
 * pv, two at a time so their reductions overlap: m, l and acc (its lanes' dims d = lane + 32 j)
 * updated. */
template <int J>
__device__ __forceinline__ void attend_rows(const float (&qv)[J], const char *pk, const char *pv,
                                            const KT &k, const KT &v, int64_t D, int64_t s0,
                                            int64_t s1, float scale, float &m, float &l,
                                            float (&acc)[J])
{
    int lane = threadIdx.x & 31;
    for (int64_t s = s0; s < s1; s += 2 * ATT_WARPS) {
        int64_t s2 = s + ATT_WARPS;
        int two = s2 < s1;
        float d1 = 0.0f, d2 = 0.0f;
#pragma unroll
        for (int j = 0; j < J; j++) {
            int64_t d = lane + 32 * j;
            if (d < D) {
                d1 += qv[j] * ld_f(pk + s * k.nb[1] + d * k.nb[3], k.t);
                if (two)
                    d2 += qv[j] * ld_f(pk + s2 * k.nb[1] + d * k.nb[3], k.t);
            }
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            d1 += __shfl_xor_sync(0xffffffffu, d1, off);
            d2 += __shfl_xor_sync(0xffffffffu, d2, off);
        }
        d1 *= scale;
        d2 = two ? d2 * scale : -INFINITY;
        float mn = fmaxf(m, fmaxf(d1, d2));
        float corr = expf(m - mn), e1 = expf(d1 - mn), e2 = two ? expf(d2 - mn) : 0.0f;
        l = l * corr + e1 + e2;
#pragma unroll
        for (int j = 0; j < J; j++) {
            int64_t d = lane + 32 * j;
            if (d < D) {
                float a = acc[j] * corr + e1 * ld_f(pv + s * v.nb[1] + d * v.nb[3], v.t);
                if (two)
                    a += e2 * ld_f(pv + s2 * v.nb[1] + d * v.nb[3], v.t);
                acc[j] = a;
            }
        }
        m = mn;
    }
}

/* The same for one row held in registers (kn, vn: zero past D). */
template <int J>
__device__ __forceinline__ void attend_regs(const float (&qv)[J], const float (&kn)[J],
                                            const float (&vn)[J], float scale, float &m, float &l,
                                            float (&acc)[J])
{
    float d1 = 0.0f;
#pragma unroll
    for (int j = 0; j < J; j++)
        d1 += qv[j] * kn[j];
    d1 = warp_sum(d1) * scale;
    float mn = fmaxf(m, d1), corr = expf(m - mn), e1 = expf(d1 - mn);
    l = l * corr + e1;
#pragma unroll
    for (int j = 0; j < J; j++)
        acc[j] = acc[j] * corr + e1 * vn[j];
    m = mn;
}

/*
 * The end of an attention block: its warps' results combined; nsplit == 1: the normalized result
 * to out; else partials to part (f32 [nsplit, Tl, H, D + 2]) and, with counters, the last split
 * block of (h, t) to get here combines them into out and resets its counter.
 */
template <int J>
__device__ __forceinline__ void attend_finish(AttSmem<J> &sm, float m, float l,
                                              const float (&acc)[J], const KT &o, int64_t h,
                                              int64_t t, int nsplit, int split, float *part,
                                              int64_t Tl, unsigned *counters)
{
    int64_t H = o.ne[2], D = o.ne[3];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) {
        sm.m[w] = m;
        sm.l[w] = l;
    }
#pragma unroll
    for (int j = 0; j < J; j++)
        sm.acc[w][lane + 32 * j] = acc[j];
    __syncthreads();
    float M = -INFINITY;
    for (int i = 0; i < ATT_WARPS; i++)
        M = fmaxf(M, sm.m[i]);
    float L = 0.0f, f[ATT_WARPS];
    for (int i = 0; i < ATT_WARPS; i++) {
        f[i] = sm.m[i] == -INFINITY ? 0.0f : expf(sm.m[i] - M);
        L += sm.l[i] * f[i];
    }
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        float a = 0.0f;
        for (int i = 0; i < ATT_WARPS; i++)
            a += sm.acc[i][d] * f[i];
        if (nsplit == 1) {
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
    if (nsplit == 1 || !counters)
        return;
    /* The last split block of (h, t) to get here combines: its partials are visible to it. */
    __threadfence();
    __syncthreads();
    unsigned *cnt = counters + t * H + h;
    if (threadIdx.x == 0)
        sm.last = atomicAdd(cnt, 1u) == (unsigned)nsplit - 1;
    __syncthreads();
    if (!sm.last)
        return;
    __threadfence();
    combine_partials(nsplit, o, h, t, part, Tl, sm.wgt, &sm.inv_l);
    if (threadIdx.x == 0)
        *cnt = 0;
}

/*
 * q (1, T, H, D), k and v (1, S, G, D), pos [T] -> out (1, T, H, D), one block per (h, t, split).
 * nsplit == 1: the normalized result goes to out. Else partials to part: f32 [nsplit, Tl, H, D + 2]
 * (accumulator scaled by exp(-max), then max and sum), Tl the launch T; with counters (zero between
 * launches, [Tl * H]), the last block of each (h, t) to finish combines them into out and resets
 * its counter; without, k_attention_combine does.
 */
template <int J>
__global__ void __launch_bounds__(ATT_WARPS * 32)
    k_attention(float scale, KT o, KT q, KT k, KT v, KT pos, float *part, int64_t Tl,
                unsigned *counters, int pf, const int64_t *syms)
{
    __shared__ AttSmem<J> sm;
    if (pf)
        prefetch_rows(q, k, v, pos, syms);
    pdl_begin();
    kt_resolve(o, syms);
    kt_resolve(q, syms);
    int64_t T = q.ne[1], H = q.ne[2], D = q.ne[3], S = k.ne[1], G = k.ne[2];
    int64_t h = blockIdx.x, t = blockIdx.y, g = h / (H / G);
    int nsplit = gridDim.z, split = blockIdx.z, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (t >= T)
        return;
    int32_t p = *(const int32_t *)(pos.p + t * pos.nb[3]);
    if (p < 0 || p >= S)
        return; /* the runtime checks pos before the eval */
    int64_t s0, s1;
    split_rows(p, nsplit, split, &s0, &s1);
    float qv[J], acc[J];
    const char *pq = q.p + t * q.nb[1] + h * q.nb[2];
#pragma unroll
    for (int j = 0; j < J; j++) {
        int64_t d = lane + 32 * j;
        qv[j] = d < D ? ld_f(pq + d * q.nb[3], q.t) : 0.0f;
        acc[j] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    /* Each warp takes every ATT_WARPS-th key. */
    attend_rows(qv, k.p + g * k.nb[2], v.p + g * v.nb[2], k, v, D, s0 + w, s1, scale, m, l, acc);
    attend_finish(sm, m, l, acc, o, h, t, nsplit, split, part, Tl, counters);
}

/* Combines the nsplit partials of each (h, t): one block each. */
__global__ void k_attention_combine(int nsplit, KT o, KT pos, int64_t S, const float *part, int64_t Tl,
                                    const int64_t *syms)
{
    __shared__ float wgt[GP_WS_ATTN_SPLITS];
    __shared__ float inv_l;
    pdl_begin();
    kt_resolve(o, syms);
    int64_t T = o.ne[1], h = blockIdx.x, t = blockIdx.y;
    if (t >= T)
        return;
    int32_t p = *(const int32_t *)(pos.p + t * pos.nb[3]);
    if (p < 0 || p >= S)
        return;
    combine_partials(nsplit, o, h, t, part, Tl, wgt, &inv_l);
}

template <int J>
static void launch_att(dim3 grid, float scale, KT o, KT q, KT k, KT v, KT p, float *part, int64_t Tl,
                       unsigned *counters, const gp_cu_ctx *c)
{
    gp_cu_launch(c, k_attention<J>, grid, ATT_WARPS * 32, 0, scale, o, q, k, v, p, part, Tl,
                 counters, c->pdl && c->prefetch, c->d_syms);
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
    float scale = (float)a->f[0], *part = (float *)ws;
    /* Combining in the last block needs a counter per (t, h). */
    unsigned *counters = att_counters(c, nsplit, T, H);
    int J = (int)((D + 31) / 32);
    if (J <= 2)
        launch_att<2>(grid, scale, o, q, k, v, p, part, T, counters, c);
    else if (J <= 4)
        launch_att<4>(grid, scale, o, q, k, v, p, part, T, counters, c);
    else
        launch_att<ATT_MAXJ>(grid, scale, o, q, k, v, p, part, T, counters, c);
    if (gp_cu_check_launch(c, "attention"))
        return -1;
    if (nsplit == 1 || counters)
        return 0;
    gp_cu_launch(c, k_attention_combine, dim3((unsigned)H, (unsigned)T), 64, 0, nsplit, o, p, S,
                 (const float *)part, T, c->d_syms);
    return gp_cu_check_launch(c, "attention_combine");
}

/* ---- one token, with the K/V cache stores and the ropes before them inside ---- */

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
        return (float)f2i_sat(v);
    }
}

/* Each lane's rope angles at position p: cos and sin of p * theta^(-2i/n) for the pair i of its
 * dims d = lane + 32 j < n; in double, then rounded to f32, as k_rope and the CPU compute them. */
template <int J>
__device__ __forceinline__ void rope_angles(const gp_cu_rope &r, int32_t p, float (&cs)[J],
                                            float (&sn)[J])
{
    int lane = threadIdx.x & 31;
    int64_t half = r.n / 2;
#pragma unroll
    for (int j = 0; j < J; j++) {
        int64_t d = lane + 32 * j;
        cs[j] = 1.0f;
        sn[j] = 0.0f;
        if (r.on && d < r.n) {
            int64_t i = r.interleaved ? d / 2 : d < half ? d : d - half;
            double ang = (double)p * pow(r.theta, -2.0 * (double)i / (double)r.n);
            cs[j] = (float)cos(ang);
            sn[j] = (float)sin(ang);
        }
    }
}

/* Element d of row x after rope r (none: x[d] as it is), given d's angle: pairs (u, v) = (i, i +
 * n/2), or (2i, 2i + 1) interleaved, become (u cs - v sn, u sn + v cs), rounded to the rope's
 * output dtype. The products and sums are rounded one by one (no FMA), as the CPU's rope. */
__device__ __forceinline__ float rope_elem(const gp_cu_rope &r, const char *px, int64_t nb, int t,
                                           int64_t d, float cs, float sn)
{
    if (!r.on)
        return ld_f(px + d * nb, t);
    if (d >= r.n)
        return round_to(ld_f(px + d * nb, t), r.dtype);
    int64_t off = r.interleaved ? 1 : r.n / 2;
    int second = r.interleaved ? (int)(d & 1) : d >= off;
    int64_t du = second ? d - off : d;
    float u = ld_f(px + du * nb, t), v = ld_f(px + (du + off) * nb, t);
    float y = second ? __fadd_rn(__fmul_rn(u, sn), __fmul_rn(v, cs))
                     : __fsub_rn(__fmul_rn(u, cs), __fmul_rn(v, sn));
    return round_to(y, r.dtype);
}

/* The same rope (both off, or the same n, theta and mode): the same angles. */
__device__ __forceinline__ int same_angles(const gp_cu_rope &a, const gp_cu_rope &b)
{
    return a.on == b.on && (!a.on || (a.n == b.n && a.theta == b.theta &&
                                      a.interleaved == b.interleaved));
}

/* What a decode block needs from pos = p: its rows [s0, s1), whether row p is among them (has_new)
 * and which warp takes it (wnew), q's angles (non-empty splits) and the new key's (that warp). */
template <int J>
__device__ __forceinline__ void decode_setup(int32_t p, const gp_cu_rope &rq, const gp_cu_rope &rk,
                                             int64_t *s0, int64_t *s1, int *has_new, int *wnew,
                                             float (&qc)[J], float (&qs)[J], float (&kc)[J],
                                             float (&ks)[J])
{
    split_rows(p, gridDim.z, blockIdx.z, s0, s1);
    *has_new = *s0 < *s1 && *s1 == (int64_t)p + 1;
    *wnew = (int)((p - *s0) % ATT_WARPS);
    if (*s0 < *s1)
        rope_angles(rq, p, qc, qs);
    if (!*has_new || (int)(threadIdx.x >> 5) != *wnew)
        return;
    if (same_angles(rq, rk)) {
#pragma unroll
        for (int j = 0; j < J; j++) {
            kc[j] = qc[j];
            ks[j] = qs[j];
        }
    } else {
        rope_angles(rk, p, kc, ks);
    }
}

/*
 * One token (T = 1): q (1, 1, H, D) and the new key and value rows kx, vx (1, 1, G, D) from their
 * sources; the caches kc, vc (1, S, G, D); pos [1] -> out (1, 1, H, D); one block per (h, split),
 * as k_attention with T = 1 (same partials, counters and combine). q and kx are rotated here when
 * rq / rk are on. Row p = pos[0] is the new one: the blocks whose split holds it take it from the
 * sources, in registers (rounded to the cache's dtype, as the store would have written it), while
 * the block of each KV group's first head writes it into both caches; every other row is read
 * from the caches. early: pos is written by no kernel of the eval, so it is read (and the angles
 * computed, the rows prefetched when pf) before the wait for the kernel before this one.
 */
template <int J>
__global__ void __launch_bounds__(ATT_WARPS * 32)
    k_attention_decode(float scale, KT o, KT q, KT kx, KT vx, KT kc, KT vc, KT pos, gp_cu_rope rq,
                       gp_cu_rope rk, float *part, unsigned *counters, int early, int pf)
{
    __shared__ AttSmem<J> sm;
    int64_t H = q.ne[2], D = q.ne[3], S = kc.ne[1], G = kc.ne[2];
    int64_t h = blockIdx.x, g = h / (H / G);
    int nsplit = gridDim.z, split = blockIdx.z, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    int32_t p = -1;
    int64_t s0 = 0, s1 = 0;
    int has_new = 0, wnew = 0;
    float qc[J], qs[J], kcs[J], ksn[J]; /* q's and the new key's angles */
    if (early) {
        p = *(const int32_t *)pos.p;
        if (p >= 0 && p < S) {
            decode_setup(p, rq, rk, &s0, &s1, &has_new, &wnew, qc, qs, kcs, ksn);
            if (pf)
                prefetch_kv(kc, vc, g, D, s0, min(s1, (int64_t)p));
        }
    }
    pdl_begin();
    if (!early) {
        p = *(const int32_t *)pos.p;
        if (p >= 0 && p < S)
            decode_setup(p, rq, rk, &s0, &s1, &has_new, &wnew, qc, qs, kcs, ksn);
    }
    if (p < 0 || p >= S)
        return; /* the runtime checks pos before the eval */
    float qv[J], acc[J];
    const char *pq = q.p + h * q.nb[2];
#pragma unroll
    for (int j = 0; j < J; j++) {
        int64_t d = lane + 32 * j;
        qv[j] = s0 < s1 && d < D ? rope_elem(rq, pq, q.nb[3], q.t, d, qc[j], qs[j]) : 0.0f;
        acc[j] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    attend_rows(qv, kc.p + g * kc.nb[2], vc.p + g * vc.nb[2], kc, vc, D, s0 + w,
                has_new ? (int64_t)p : s1, scale, m, l, acc);
    if (has_new && w == wnew) {
        /* The new row as the store writes it: rope's output rounded to its dtype, then to the
         * cache's. Only the first head's block of the group writes it (one writer per row). */
        float kn[J], vn[J];
        const char *pk = kx.p + g * kx.nb[2], *pv = vx.p + g * vx.nb[2];
        int writer = h % (H / G) == 0;
#pragma unroll
        for (int j = 0; j < J; j++) {
            int64_t d = lane + 32 * j;
            kn[j] = vn[j] = 0.0f;
            if (d < D) {
                kn[j] = round_to(rope_elem(rk, pk, kx.nb[3], kx.t, d, kcs[j], ksn[j]), kc.t);
                vn[j] = round_to(ld_f(pv + d * vx.nb[3], vx.t), vc.t);
                if (writer) {
                    st_f(kc.p + p * kc.nb[1] + g * kc.nb[2] + d * kc.nb[3], kc.t, kn[j]);
                    st_f(vc.p + p * vc.nb[1] + g * vc.nb[2] + d * vc.nb[3], vc.t, vn[j]);
                }
            }
        }
        attend_regs(qv, kn, vn, scale, m, l, acc);
    }
    attend_finish(sm, m, l, acc, o, h, 0, nsplit, split, part, 1, counters);
}

template <int J>
static void launch_dec(dim3 grid, const gp_cu_decode_att *a, KT o, KT q, KT kx, KT vx, KT kc,
                       KT vc, KT p, float *part, unsigned *counters, const gp_cu_ctx *c)
{
    gp_cu_launch(c, k_attention_decode<J>, grid, ATT_WARPS * 32, 0, (float)a->scale, o, q, kx, vx,
                 kc, vc, p, a->rope_q, a->rope_k, part, counters, a->pos_const,
                 c->pdl && c->prefetch);
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
    return NULL;
}

static std::atomic<long long> decode_launches(0);

extern "C" int gp_cuda_attention_decode_ok(const gp_cu_decode_att *a, const gp_cu_tensor *out)
{
    return decode_unsupported(a, out) == NULL;
}

extern "C" int64_t gp_cuda_attention_decode_count(void)
{
    return decode_launches.load();
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
    int nsplit = att_splits(1, H, D, ws, ws_size);
    unsigned *counters = att_counters(c, nsplit, 1, H);
    float *part = (float *)ws;
    dim3 grid((unsigned)H, 1, (unsigned)nsplit);
    int J = (int)((D + 31) / 32);
    if (J <= 2)
        launch_dec<2>(grid, a, o, q, kx, vx, kc, vc, p, part, counters, c);
    else if (J <= 4)
        launch_dec<4>(grid, a, o, q, kx, vx, kc, vc, p, part, counters, c);
    else
        launch_dec<ATT_MAXJ>(grid, a, o, q, kx, vx, kc, vc, p, part, counters, c);
    if (gp_cu_check_launch(c, "attention_decode"))
        return -1;
    decode_launches++;
    if (nsplit == 1 || counters)
        return 0;
    gp_cu_launch(c, k_attention_combine, dim3((unsigned)H, 1), 64, 0, nsplit, o, p, kc.ne[1],
                 (const float *)part, (int64_t)1, c->d_syms);
    return gp_cu_check_launch(c, "attention_combine");
}
