/* CUDA attention: causal scaled-dot-product attention of new queries over a KV cache (grouped-query),
 * with an online softmax. Few queries (decode): the cache rows 0..pos[t] are split over
 * GP_WS_ATTN_SPLITS blocks whose partial results go to the planned workspace and are combined by
 * the last of those blocks to finish (or by a second kernel); many queries (a prompt): one block per
 * (query, head). */
#include <math.h>
#include <stdio.h>

#include "cuda/cuda_internal.cuh"
#include "runtime/plan.h"

enum { ATT_WARPS = 4, ATT_MAXJ = 8 }; /* D <= 32 * ATT_MAXJ */

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
    int nsplit = gridDim.z;
    int64_t per = (p + 1 + nsplit - 1) / nsplit, s0 = blockIdx.z * per;
    int64_t s1 = min((int64_t)p + 1, s0 + per), bytes = D * k.nb[3];
    for (int64_t s = s0 + threadIdx.x; s < s1; s += blockDim.x)
        for (int64_t b = 0; b < bytes; b += 128) {
            prefetch_l2(k.p + s * k.nb[1] + g * k.nb[2] + b);
            prefetch_l2(v.p + s * v.nb[1] + g * v.nb[2] + b);
        }
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
    __shared__ float sm[ATT_WARPS], sl[ATT_WARPS], sacc[ATT_WARPS][32 * J];
    __shared__ float wgt[GP_WS_ATTN_SPLITS];
    __shared__ float inv_l;
    __shared__ int last;
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
    int64_t per = (p + 1 + nsplit - 1) / nsplit, s0 = split * per, s1 = min((int64_t)p + 1, s0 + per);
    float qv[J], acc[J];
    const char *pq = q.p + t * q.nb[1] + h * q.nb[2];
#pragma unroll
    for (int j = 0; j < J; j++) {
        int64_t d = lane + 32 * j;
        qv[j] = d < D ? ld_f(pq + d * q.nb[3], q.t) : 0.0f;
        acc[j] = 0.0f;
    }
    const char *pk = k.p + g * k.nb[2], *pv = v.p + g * v.nb[2];
    float m = -INFINITY, l = 0.0f;
    /* Each warp takes every ATT_WARPS-th key, two at a time so their reductions overlap. */
    for (int64_t s = s0 + w; s < s1; s += 2 * ATT_WARPS) {
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
    /* Combine the warps. */
    if (lane == 0) {
        sm[w] = m;
        sl[w] = l;
    }
#pragma unroll
    for (int j = 0; j < J; j++)
        sacc[w][lane + 32 * j] = acc[j];
    __syncthreads();
    float M = -INFINITY;
    for (int i = 0; i < ATT_WARPS; i++)
        M = fmaxf(M, sm[i]);
    float L = 0.0f, f[ATT_WARPS];
    for (int i = 0; i < ATT_WARPS; i++) {
        f[i] = sm[i] == -INFINITY ? 0.0f : expf(sm[i] - M);
        L += sl[i] * f[i];
    }
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        float a = 0.0f;
        for (int i = 0; i < ATT_WARPS; i++)
            a += sacc[i][d] * f[i];
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
        last = atomicAdd(cnt, 1u) == (unsigned)nsplit - 1;
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    combine_partials(nsplit, o, h, t, part, Tl, wgt, &inv_l);
    if (threadIdx.x == 0)
        *cnt = 0;
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
    int nsplit = 1;
    size_t need = (size_t)GP_WS_ATTN_SPLITS * T * H * (D + 2) * sizeof(float);
    if (T <= GP_WS_ATTN_SPLIT_MAX_T && ws && ws_size >= need)
        nsplit = GP_WS_ATTN_SPLITS;
    dim3 grid((unsigned)H, (unsigned)T, (unsigned)nsplit);
    float scale = (float)a->f[0], *part = (float *)ws;
    /* Combining in the last block needs a counter per (t, h). */
    unsigned *counters = NULL;
    if (nsplit > 1 && c->att_combine && c->d_counters && T * H <= c->n_counters)
        counters = c->d_counters;
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
