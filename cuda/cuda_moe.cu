/* CUDA routed experts (GP_OP_MOE), the CPU's five phases as seven launches with no host round
 * trip: the router's logits, each token's k experts and weights (one warp a token), the rows
 * grouped by expert (a counting sort in one block), x's rows gathered, gate and up with their
 * silu(gate) * up, down, and each token's weighted sum over its experts in ascending order. Only
 * the chosen experts' weights are read; every scratch byte is the op's planned workspace
 * (cuda/cuda_moe.h). */
#include <atomic>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_moe.cuh"

/* Rows of f32, f16 or bf16 weights: elements e0 .. e0 + 7 of a row (0 past K). */
template <int DT> struct FloatRows {
    static __device__ __forceinline__ void ld8(const uint8_t *row, int e0, int K, float (&v)[8])
    {
        const int es = DT == GP_F32 ? 4 : 2;
#pragma unroll
        for (int u = 0; u < 8; u++)
            v[u] = e0 + u < K ? bits_f(ld_bits((const char *)row + (int64_t)(e0 + u) * es, DT), DT)
                              : 0.0f;
    }
};

/* Launch sizes of up to this many tokens run the products one output a warp (k_moe_vec), each
 * row reading its expert's weights; more run in tiles, each expert's weights read once a tile of
 * rows. */
enum { MOE_VEC_MAX_T = 8, RT_WARPS = 4, GR_THREADS = 512, ROW_THREADS = 256 };

/* The eval's tokens: the symbol's size (capped at the launch's), or the launch's. */
__device__ __forceinline__ int64_t moe_tokens(int64_t t_launch, int tsym, const int64_t *syms)
{
    int64_t T = tsym >= 0 ? syms[tsym] : t_launch;
    return T < t_launch ? T : t_launch;
}

/*
 * Routing, one warp a token t: logits [T, E] (the router's, in the workspace) become
 * probabilities in place (softmax norms) by cpu_moe.c's operations (the max over the lanes, the
 * exponentials a lane each, the 8 lanes of the sum by lanes 0..7 in the CPU's order); then k rounds
 * of top-k, each lane's best of its experts reduced over the warp (moe_better: a total order, so
 * the same pick in any order); lane 0 derives the weights and sorts them by expert (moe_finish).
 */
__global__ void __launch_bounds__(RT_WARPS * 32)
    k_moe_route(float *logits, int32_t *sel, float *wt, int E, int k, int norm, int64_t t_launch,
                int tsym, const int64_t *syms)
{
    __shared__ int32_t pick_s[RT_WARPS][GP_MOE_MAX_K];
    __shared__ float w_s[RT_WARPS][GP_MOE_MAX_K];
    __shared__ float part_s[RT_WARPS][8];
    pdl_begin();
    int64_t T = moe_tokens(t_launch, tsym, syms);
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int32_t *pick = pick_s[w];
    for (int64_t t = (int64_t)blockIdx.x * RT_WARPS + w; t < T; t += (int64_t)gridDim.x * RT_WARPS) {
        float *v = logits + t * E;
        if (norm != GP_MOE_TOPK_SOFTMAX) {
            float mx = -INFINITY;
            for (int e = lane; e < E; e += 32)
                mx = fmaxf(mx, v[e]);
            mx = warp_max(mx);
            for (int e = lane; e < E; e += 32)
                v[e] = moe_expf(sub_rn(v[e], mx));
            __syncwarp();
            if (lane < 8) {
                float s = 0.0f;
                for (int e = lane; e < E; e += 8)
                    s = add_rn(s, v[e]);
                part_s[w][lane] = s;
            }
            __syncwarp();
            float sum = moe_acc8_total(part_s[w]);
            for (int e = lane; e < E; e += 32)
                v[e] = div_rn(v[e], sum);
            __syncwarp();
        }
        for (int j = 0; j < k; j++) {
            int first;
            MoePick b = moe_lane_best(v, E, lane, 32, pick, j, &first);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                MoePick ob;
                ob.v = __shfl_xor_sync(0xffffffffu, b.v, o);
                ob.i = __shfl_xor_sync(0xffffffffu, b.i, o);
                int of = __shfl_xor_sync(0xffffffffu, first, o);
                b = moe_better(b, ob);
                first = of < first ? of : first;
            }
            __syncwarp(); /* every lane has read pick[0..j) */
            if (lane == 0)
                pick[j] = moe_round_pick(v, first, b);
            __syncwarp();
        }
        if (lane == 0) {
            moe_finish(v, pick, w_s[w], k, norm);
            for (int j = 0; j < k; j++) {
                sel[t * k + j] = pick[j];
                wt[t * k + j] = w_s[w][j];
            }
        }
        __syncwarp();
    }
}

/*
 * Grouping, one block: each expert's row count (integer atomics: the same counts in any order),
 * the offsets of rows and tiles (thread 0, moe_offsets), then for each used expert, a warp's
 * ballots over sel in index order give its rows their slots: token order within the expert, as
 * the CPU's counting sort. cnt: E ints of dynamic shared memory.
 */
__global__ void __launch_bounds__(GR_THREADS)
    k_moe_group(const int32_t *sel, int32_t *off, int32_t *toff, int32_t *slot, int E, int k,
                int64_t t_launch, int tsym, const int64_t *syms)
{
    extern __shared__ int32_t cnt[];
    pdl_begin();
    int n = (int)(moe_tokens(t_launch, tsym, syms) * k);
    for (int e = threadIdx.x; e < E; e += blockDim.x)
        cnt[e] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        if ((unsigned)sel[i] < (unsigned)E)
            atomicAdd(&cnt[sel[i]], 1);
    __syncthreads();
    if (threadIdx.x == 0)
        moe_offsets(cnt, E, off, toff);
    __syncthreads();
    int lane = threadIdx.x & 31;
    for (int e = threadIdx.x >> 5; e < E; e += blockDim.x >> 5) {
        if (cnt[e] == 0)
            continue;
        int base = off[e], run = 0;
        for (int c = 0; c < n; c += 32) {
            int i = c + lane;
            bool hit = i < n && sel[i] == e;
            unsigned m = __ballot_sync(0xffffffffu, hit);
            if (hit)
                slot[i] = base + run + moe_rank(m, lane);
            run += __popc(m);
        }
    }
}

/* x's row of each (t, j) copied to its slot's row of xg [T k, H]. */
__global__ void k_moe_gather(const float *x, int64_t ldx, const int32_t *slot, float *xg, int H,
                             int k, int64_t t_launch, int tsym, const int64_t *syms)
{
    pdl_begin();
    int64_t n = moe_tokens(t_launch, tsym, syms) * k;
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
        const float *src = x + (i / k) * ldx;
        float *dst = xg + (int64_t)slot[i] * H;
        for (int h = threadIdx.x; h < H; h += blockDim.x)
            dst[h] = src[h];
    }
}

/* out[t] = sum over j of wt[t, j] y[slot[t, j]], j ascending (the experts ascending), each product
 * and sum rounded on its own as the CPU's; stored in out's dtype. */
__global__ void k_moe_combine(KT o, const float *y, const int32_t *slot, const float *wt, int H,
                              int k, int64_t t_launch, int tsym, const int64_t *syms)
{
    pdl_begin();
    int64_t T = moe_tokens(t_launch, tsym, syms);
    for (int64_t t = blockIdx.x; t < T; t += gridDim.x)
        for (int h = threadIdx.x; h < H; h += blockDim.x) {
            float acc = 0.0f;
            for (int j = 0; j < k; j++) {
                int64_t i = t * k + j;
                acc = add_rn(acc, mul_rn(wt[i], y[(int64_t)slot[i] * H + h]));
            }
            st_f(o.p + t * o.nb[2] + (int64_t)h * o.nb[3], o.t, acc);
        }
}

/* ---- host ---- */

static std::atomic<int64_t> moe_counts[2];

extern "C" int64_t gp_cuda_moe_count(int which)
{
    return which >= 0 && which < 2 ? moe_counts[which].load() : 0;
}

static int products(const gp_cu_ctx *c, gp_dtype t, const MoeProd &p, int vec, int64_t tiles)
{
    switch (t) {
    case GP_F32: moe_launch<FloatRows<GP_F32>>(c, p, vec, tiles); return 0;
    case GP_F16: moe_launch<FloatRows<GP_F16>>(c, p, vec, tiles); return 0;
    case GP_BF16: moe_launch<FloatRows<GP_BF16>>(c, p, vec, tiles); return 0;
    default: return gp_cu_moe_quant_launch(c, t, p, vec, tiles);
    }
}

/* 1 when w (ndim 2 or 3, [..., N, K]) has rows the loaders read: float elements contiguous, or
 * quantized rows of whole blocks one after another; *rb gets the bytes between rows. */
static int weight_ok(const gp_cu_tensor *w, int64_t K, int64_t *rb, int64_t *eb)
{
    int nd = w->ndim;
    gp_dtype t = w->dtype;
    *rb = w->nb[nd - 2];
    *eb = w->nb[0];
    if (gp_dtype_is_quant(t)) {
        /* the runtime gives quantized weights no strides (packed rows of whole blocks, which
         * plan_load checked): rows and experts from the shape */
        *rb = (int64_t)gp_dtype_row_bytes(t, K);
        *eb = w->ne[nd - 2] * *rb;
        return K % gp_dtype_block(t) == 0 && w->ne[nd - 1] == K;
    }
    return (t == GP_F32 || t == GP_F16 || t == GP_BF16) &&
           w->nb[nd - 1] == (int64_t)gp_dtype_size(t);
}

static int fail(gp_cu_ctx *c, const char *why)
{
    snprintf(c->err, sizeof c->err, "moe: %s", why);
    return -1;
}

extern "C" int gp_cu_moe(gp_cu_ctx *c, const gp_attrs *a, const gp_cu_tensor *out,
                         const gp_cu_tensor *in, void *ws, size_t ws_size)
{
    const gp_cu_tensor *x = &in[0], *r = &in[1], *g = &in[2], *u = &in[3], *d = &in[4];
    if (x->ndim != 2 || x->dtype != GP_F32 || x->nb[1] != 4 || x->nb[0] % 4 || r->ndim != 2 ||
        g->ndim != 3 || u->ndim != 3 || d->ndim != 3 || out->ndim != 2)
        return fail(c, "needs x f32 [T, H] (elements contiguous), router [E, H], gate and up "
                       "[E, F, H], down [E, H, F], out [T, H]");
    KT kx = gp_kt_of(c, x), ko = gp_kt_of(c, out);
    int64_t T = kx.ne[2], H = x->ne[1], E = r->ne[0], F = g->ne[1], k = a->i[GP_MOE_TOP_K];
    int64_t norm = a->i[GP_MOE_NORM], rbr, rbg, rbu, rbd;
    int tsym = x->sym[0];
    if (T == 0)
        return 0;
    if (k < 1 || k > E || k > GP_MOE_MAX_K || norm < 0 || norm >= GP_MOE_NORM_COUNT ||
        a->i[GP_MOE_ACT] != GP_MOE_SILU)
        return fail(c, "top_k, norm or act out of range");
    if (E > 12288 || T * k > INT32_MAX / 2 || H > INT32_MAX / 2 || F > INT32_MAX / 2 ||
        ko.ne[2] != T || out->ne[1] != H)
        return fail(c, "sizes out of the kernels' range (at most 12288 experts)");
    const gp_cu_tensor *ws4[4] = {r, g, u, d};
    int64_t *rbs[4] = {&rbr, &rbg, &rbu, &rbd}, ebs[4];
    for (int i = 0; i < 4; i++)
        if (!weight_ok(ws4[i], i == 3 ? F : H, rbs[i], &ebs[i])) {
            const gp_cu_tensor *t = ws4[i];
            snprintf(c->err, sizeof c->err,
                     "moe: the %s weight (%s, ne %lld %lld %lld, nb %lld %lld %lld) is not in rows "
                     "of contiguous elements or of whole blocks",
                     i == 0 ? "router" : i == 1 ? "gate" : i == 2 ? "up" : "down",
                     gp_dtype_name(t->dtype), (long long)t->ne[0], (long long)t->ne[1],
                     (long long)t->ne[2], (long long)t->nb[0], (long long)t->nb[1],
                     (long long)t->nb[2]);
            return -1;
        }
    if (g->dtype != u->dtype || ebs[1] != ebs[2] || rbg != rbu || d->ne[1] != H ||
        g->ne[0] != E || d->ne[0] != E || u->ne[1] != F)
        return fail(c, "needs gate and up of one dtype and layout, and down [E, H, F]");
    gp_cuda_moe_ws_layout l = gp_cuda_moe_ws(T, H, E, k, F);
    if (!ws || (int64_t)ws_size < l.total) {
        snprintf(c->err, sizeof c->err,
                 "moe: a workspace of %zu bytes, %lld needed (gp_cuda_moe_ws at T = %lld)",
                 ws_size, (long long)l.total, (long long)T);
        return -1;
    }
    char *w = (char *)ws;
    float *logits = (float *)(w + l.logits), *wt = (float *)(w + l.wt);
    float *xg = (float *)(w + l.xg), *act = (float *)(w + l.act);
    int32_t *sel = (int32_t *)(w + l.sel), *off = (int32_t *)(w + l.off);
    int32_t *toff = (int32_t *)(w + l.toff), *slot = (int32_t *)(w + l.slot);
    int64_t n = T * k, tiles = (n + GP_CUDA_MOE_TM - 1) / GP_CUDA_MOE_TM + (E < n ? E : n);
    int vec = T <= MOE_VEC_MAX_T;
    unsigned tg = (unsigned)(T < 65535 ? T : 65535), ng = (unsigned)(n < 65535 ? n : 65535);

    /* the router: one matrix, T rows */
    MoeProd p;
    memset(&p, 0, sizeof p);
    p.w0 = (const uint8_t *)r->data;
    p.rb = rbr;
    p.x = (const float *)x->data;
    p.ldx = x->nb[0] / 4;
    p.y = logits;
    p.ldy = E;
    p.K = (int)H, p.N = (int)E, p.E = 1;
    p.rows_launch = T;
    p.rsym = tsym;
    if (products(c, r->dtype, p, 1, 0) || gp_cu_check_launch(c, "moe_router"))
        return -1;
    gp_cu_launch(c, k_moe_route, dim3((unsigned)((T + RT_WARPS - 1) / RT_WARPS < 65535
                                                     ? (T + RT_WARPS - 1) / RT_WARPS
                                                     : 65535)),
                 dim3(RT_WARPS * 32), 0, logits, sel, wt, (int)E, (int)k, (int)norm, T, tsym,
                 c->d_syms);
    if (gp_cu_check_launch(c, "moe_route"))
        return -1;
    gp_cu_launch(c, k_moe_group, dim3(1), dim3(GR_THREADS), (size_t)E * 4, sel, off, toff, slot,
                 (int)E, (int)k, T, tsym, c->d_syms);
    if (gp_cu_check_launch(c, "moe_group"))
        return -1;
    gp_cu_launch(c, k_moe_gather, dim3(ng), dim3(ROW_THREADS), 0, (const float *)x->data,
                 (int64_t)(x->nb[0] / 4), slot, xg, (int)H, (int)k, T, tsym, c->d_syms);
    if (gp_cu_check_launch(c, "moe_gather"))
        return -1;

    /* gate and up with silu(gate) * up, then down, over each expert's rows */
    memset(&p, 0, sizeof p);
    p.w0 = (const uint8_t *)g->data;
    p.w1 = (const uint8_t *)u->data;
    p.eb = ebs[1];
    p.rb = rbg;
    p.x = xg;
    p.ldx = H;
    p.y = act;
    p.ldy = F;
    p.K = (int)H, p.N = (int)F, p.E = (int)E, p.glu = 1;
    p.off = off;
    p.toff = toff;
    p.rows_launch = n;
    p.rsym = -1;
    if (products(c, g->dtype, p, vec, tiles) || gp_cu_check_launch(c, "moe_gate_up"))
        return -1;
    p.w0 = (const uint8_t *)d->data;
    p.w1 = NULL;
    p.eb = ebs[3];
    p.rb = rbd;
    p.x = act;
    p.ldx = F;
    p.y = xg;
    p.ldy = H;
    p.K = (int)F, p.N = (int)H, p.glu = 0;
    if (products(c, d->dtype, p, vec, tiles) || gp_cu_check_launch(c, "moe_down"))
        return -1;
    gp_cu_launch(c, k_moe_combine, dim3(tg), dim3(ROW_THREADS), 0, ko, (const float *)xg,
                 (const int32_t *)slot, (const float *)wt, (int)H, (int)k, T, tsym, c->d_syms);
    moe_counts[vec ? 0 : 1]++;
    return gp_cu_check_launch(c, "moe_combine");
}

/* ---- the host twins (cuda/cuda_moe.h) ---- */

extern "C" int gp_cuda_moe_route_host(const float *logits, int T, int E, int k, int norm,
                                      int32_t *sel, float *wt)
{
    if (k < 1 || k > E || k > GP_MOE_MAX_K || norm < 0 || norm >= GP_MOE_NORM_COUNT)
        return -1;
    float *v = (float *)malloc((size_t)E * sizeof *v);
    if (!v)
        return -1;
    for (int t = 0; t < T; t++) {
        memcpy(v, logits + (size_t)t * E, (size_t)E * sizeof *v);
        if (norm != GP_MOE_TOPK_SOFTMAX)
            moe_softmax_seq(v, E); /* the kernel's warp runs these operations */
        int32_t pick[GP_MOE_MAX_K];
        float w[GP_MOE_MAX_K];
        for (int j = 0; j < k; j++) {
            MoePick b = {0.0f, -1};
            int first = INT_MAX;
            for (int lane = 0; lane < 32; lane++) { /* the warp's lanes, then its reduction */
                int f;
                b = moe_better(b, moe_lane_best(v, E, lane, 32, pick, j, &f));
                first = f < first ? f : first;
            }
            pick[j] = moe_round_pick(v, first, b);
        }
        moe_finish(v, pick, w, k, norm);
        memcpy(sel + (size_t)t * k, pick, (size_t)k * sizeof *pick);
        memcpy(wt + (size_t)t * k, w, (size_t)k * sizeof *w);
    }
    free(v);
    return 0;
}

extern "C" int gp_cuda_moe_group_host(const int32_t *sel, int n, int E, int32_t *off,
                                      int32_t *toff, int32_t *slot)
{
    int32_t *cnt = (int32_t *)calloc((size_t)E + 1, sizeof *cnt);
    if (!cnt)
        return -1;
    for (int i = 0; i < n; i++) {
        if ((unsigned)sel[i] >= (unsigned)E) {
            free(cnt);
            return -1;
        }
        cnt[sel[i]]++;
    }
    moe_offsets(cnt, E, off, toff);
    for (int e = 0; e < E; e++) { /* each expert's warp, its ballots lane by lane */
        if (cnt[e] == 0)
            continue;
        int base = off[e], run = 0;
        for (int c = 0; c < n; c += 32) {
            unsigned m = 0;
            for (int lane = 0; lane < 32; lane++)
                m |= (unsigned)(c + lane < n && sel[c + lane] == e) << lane;
            for (int lane = 0; lane < 32; lane++)
                if (m >> lane & 1)
                    slot[c + lane] = base + run + moe_rank(m, lane);
            run += __builtin_popcount(m);
        }
    }
    free(cnt);
    return 0;
}

extern "C" int gp_cuda_moe_row_expert_host(const int32_t *off, int E, int r)
{
    return moe_row_expert(off, E, r);
}
