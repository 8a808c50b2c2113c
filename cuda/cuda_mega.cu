/*
 * The persistent decode kernel ("mega"): the launches of a one-token eval that it can take (one-row
 * matmuls with their norms and epilogues, matmul groups, the fused one-token attention, single
 * norms) are recorded as stages instead of launched, and a run of consecutive stages becomes one
 * cooperative kernel: every block stays resident and the stages are separated by grid barriers, so
 * a stage costs a barrier (~1 us) instead of a launch with its ramp-up and last wave (~7 us). While
 * a matmul stage runs, its blocks bring the next matmul stage's weights into L2 (one bulk prefetch
 * per block over its own rows), so the weight stream does not stop at the barriers.
 *
 * Recording happens while a graph is captured (gp_cu_ctx.mk set); the stage table is copied to the
 * device once, after the capture, by gp_cuda_mk_upload. Results equal the separate kernels' up to
 * float reassociation (the rows are split over warps differently); the cache rows are bit for bit.
 */
#include <atomic>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/cuda_attention.cuh"
#include "cuda/cuda_matvec.cuh"

enum { MK_MV = 1, MK_ATT = 2, MK_NORM = 3 };
/* U (a template parameter): 16-byte chunks of a row each lane has in flight (two rows at a time): MK_U_MANY with
 * several blocks per multiprocessor, MK_U_ONE with one (fewer blocks make a cheaper barrier). */
enum { MK_WARPS = ATT_WARPS, MK_THREADS = MK_WARPS * 32, MK_U_MANY = 8, MK_U_ONE = 16 };
enum { MK_MAX_K = 12288 };             /* x staged in shared memory: K floats */
#define MK_TIMEOUT_NS 5000000000ull    /* a grid barrier that waits longer traps (never hangs) */

/* A strided vector: element i at p + i * nb. */
struct MkVec {
    char *p;
    int t;
    int64_t nb;
};

/* out_s = x w_s^T for the products s of a matmul stage (rows [row0[s], row0[s + 1]) of the stage);
 * glu: one pair, out_0 = silu(x w_0^T) * (x w_1^T). n == 1: the epilogue e is applied. */
struct MkMv {
    int n, glu, wt, pre;
    int64_t K;
    const float *x; /* [K] f32 contiguous; with pre, the norm's input */
    NORM nm;
    MkVec pre_out;  /* p != NULL: block 0 also stores the normalized x (the norm node's output) */
    const char *w[GP_CU_MAX_GROUP];
    int64_t ldw[GP_CU_MAX_GROUP];
    int64_t row0[GP_CU_MAX_GROUP + 1];
    MkVec o[GP_CU_MAX_GROUP];
    EPI e;
};

struct alignas(16) MkStage {
    int kind;
    int J, nsplit; /* attention: the register tile (2, 4 or 8) and the splits per head */
    MkMv mv;       /* MK_MV; MK_NORM uses pre, x, nm, K and pre_out */
    DecArgs att;   /* MK_ATT */
};

struct gp_cu_mk {
    MkStage *h, *d;  /* the stage table: host, device [cap] */
    int cap, n;      /* stages recorded */
    int first;       /* the first stage not yet launched (== n: none pending) */
    unsigned *bar;   /* device [MK_BAR_WORDS]: the grid barrier (grid_sync) */
    int grid;        /* blocks: all resident at once */
    int64_t pf_cap;  /* bytes of weights one block prefetches per stage */
    size_t smem;     /* the pending segment's dynamic shared memory */
    int launches;    /* kernels launched */
    int barriers_only; /* GPLAN_CUDA_MEGA_TIMING=barriers: stages do nothing (wrong results) */
    void (*kernel)(const MkStage *, int, unsigned *, int64_t, int); /* k_mega<MK_U_*> */
    int disabled;    /* a launch failed: record nothing more */
};

/* ---- device ---- */

__device__ __forceinline__ unsigned ld_acquire(const unsigned *p)
{
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ uint64_t ns_now()
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* The grid barrier's words, each on a cache line of its own: two arrival counters that barriers
 * use in turn, and the count of blocks that have finished the launch. */
enum { MK_BAR_A = 0, MK_BAR_B = 32, MK_BAR_EXIT = 64, MK_BAR_WORDS = 96 };

/*
 * Grid barrier k: every block waits until all have arrived; what any block wrote before is visible
 * to every block after (release add, acquire polls). Barrier k counts on word k % 2 up to
 * (k / 2 + 1) * blocks: counts only grow during a launch, so nothing is reset while a block may
 * still poll it, and each barrier costs one atomic per block and no second round trip.
 * mk_exit resets the words when the last block leaves.
 */
__device__ __forceinline__ void grid_sync(unsigned *bar, int k)
{
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned *count = bar + (k & 1 ? MK_BAR_B : MK_BAR_A);
        unsigned target = (unsigned)(k / 2 + 1) * gridDim.x;
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(count) : "memory");
        uint64_t t0 = ns_now();
        while (ld_acquire(count) < target)
            if (ns_now() - t0 > MK_TIMEOUT_NS)
                __trap();
    }
    __syncthreads();
}

/* The end of a launch: the last block to leave zeroes the counters for the next launch (every
 * other block has passed its last barrier, so none polls them any more). */
__device__ __forceinline__ void mk_exit(unsigned *bar)
{
    if (threadIdx.x == 0 && atomicAdd(bar + MK_BAR_EXIT, 1u) == gridDim.x - 1) {
        bar[MK_BAR_A] = 0;
        bar[MK_BAR_B] = 0;
        bar[MK_BAR_EXIT] = 0;
        __threadfence();
    }
}

/* This block's rows [*r0, *r1) of a matmul stage of R rows (a contiguous share). */
__device__ __forceinline__ void mv_rows(const MkMv &m, int64_t *r0, int64_t *r1)
{
    int64_t R = m.row0[m.glu ? 1 : m.n];
    int64_t per = (R + gridDim.x - 1) / gridDim.x;
    *r0 = min(R, (int64_t)blockIdx.x * per);
    *r1 = min(R, *r0 + per);
}

/* Product s of row r (a row of the stage) and r's row within it. */
__device__ __forceinline__ int mv_product(const MkMv &m, int64_t r, int64_t *local)
{
    int s = 0;
    while (s + 1 < m.n && r >= m.row0[s + 1])
        s++;
    *local = r - m.row0[s];
    return s;
}

/* Brings up to cap bytes of this block's weight rows of stage m into L2 (thread 0; a hint). */
__device__ __forceinline__ void mv_prefetch(const MkMv &m, int64_t cap)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    int64_t r0, r1;
    mv_rows(m, &r0, &r1);
    for (int64_t r = r0; r < r1 && cap > 0;) {
        int64_t local;
        int s = mv_product(m, r, &local);
        int64_t n = min(r1, m.glu ? r1 : m.row0[s + 1]) - r;
        for (int k = 0; k < (m.glu ? 2 : 1); k++) {
            int sk = m.glu ? k : s;
            const char *p = m.w[sk] + local * m.ldw[sk];
            int64_t bytes = min(cap, n * m.ldw[sk]);
            cap -= bytes;
            for (int64_t off = 0; off < bytes; off += 65536) {
                unsigned len = (unsigned)min((int64_t)65536, bytes - off) & ~15u;
                if (len)
                    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + off),
                                 "r"(len)
                                 : "memory");
            }
        }
        r += n;
    }
#endif
}

/* x staged into xs [K]: one pass of plain loads (the activations were written before the last
 * grid barrier, by any block; the read-only path is not ordered by the barrier), then with pre
 * normalized in place as norm_stats and norm_one compute it. Block 0 stores the norm's output when
 * asked. */
__device__ __forceinline__ void stage_x(const MkMv &m, float *xs)
{
    for (int64_t i = threadIdx.x; i < m.K; i += blockDim.x)
        xs[i] = m.x[i];
    __syncthreads();
    if (!m.pre)
        return;
    float mean, inv;
    norm_stats(m.nm, xs, m.K, &mean, &inv);
    for (int64_t i = threadIdx.x; i < m.K; i += blockDim.x) {
        float y = norm_one(m.nm, xs, i, mean, inv);
        xs[i] = y;
        if (m.pre_out.p && blockIdx.x == 0)
            st_f(m.pre_out.p + i * m.pre_out.nb, m.pre_out.t, y);
    }
    __syncthreads();
}

/* One warp's job j of a matmul stage: rows ra (and rb, or ra's glu partner in pb), chunks [cb,
 * ce) of each. Warps take two rows at a time (glu: one row of both products), or, when the block
 * has fewer rows than warps, a share of one row (split: S warps per row, job 0 only). */
struct MvJob {
    const char *pa, *pb;
    int64_t ra, rb, cb, ce;
};

__device__ __forceinline__ const char *mv_row(const MkMv &m, int64_t r, int k)
{
    int64_t local;
    int s = mv_product(m, r, &local);
    s = m.glu ? k : s;
    return m.w[s] + local * m.ldw[s];
}

__device__ __forceinline__ bool mv_job(const MkMv &m, int64_t r0, int64_t rows, int64_t nc, int j,
                                       MvJob &jb)
{
    int w = threadIdx.x >> 5;
    jb.cb = 0;
    jb.ce = nc;
    jb.rb = -1;
    jb.pb = NULL;
    if (rows < MK_WARPS) {
        int S = (int)(MK_WARPS / rows), i = w / S, ks = w % S;
        if (j > 0 || i >= rows)
            return false;
        int64_t per = (nc + S - 1) / S;
        jb.cb = min(nc, ks * per);
        jb.ce = min(nc, jb.cb + per);
        jb.ra = r0 + i;
    } else if (m.glu) {
        int64_t i = w + (int64_t)j * MK_WARPS;
        if (i >= rows)
            return false;
        jb.ra = r0 + i;
    } else {
        int64_t i = w + (int64_t)j * 2 * MK_WARPS;
        if (i >= rows)
            return false;
        jb.ra = r0 + i;
        jb.rb = i + MK_WARPS < rows ? jb.ra + MK_WARPS : -1;
    }
    jb.pa = mv_row(m, jb.ra, 0);
    jb.pb = m.glu ? mv_row(m, jb.ra, 1) : jb.rb >= 0 ? mv_row(m, jb.rb, 0) : NULL;
    return true;
}

/* The first batch of chunks of job jb: U chunks of each row, lane l taking cb + l + 32 i. */
template <int U>
__device__ __forceinline__ void mv_load(const MvJob &jb, int64_t c0, uint4 *ua, uint4 *ub)
{
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < U; i++) {
        int64_t c = c0 + lane + 32 * i;
        ua[i] = c < jb.ce ? ld_stream(jb.pa + c * 16) : make_uint4(0, 0, 0, 0);
        ub[i] = jb.pb && c < jb.ce ? ld_stream(jb.pb + c * 16) : make_uint4(0, 0, 0, 0);
    }
}

/* Loads the first batch of this warp's first job of stage m (weights: no stage writes them, so
 * before the grid barrier that precedes the stage). 1 when there is one. */
template <int U>
__device__ __forceinline__ int mv_preload(const MkMv &m, int vn, uint4 *ua, uint4 *ub)
{
    int64_t r0, r1;
    mv_rows(m, &r0, &r1);
    MvJob jb;
    if (r1 <= r0 || !mv_job(m, r0, r1 - r0, m.K / vn, 0, jb))
        return 0;
    mv_load<U>(jb, jb.cb, ua, ub);
    return 1;
}

/* The dot products of x (shared memory) with job jb's rows (warp sums in *sa, *sb). have: the
 * first batch is already in ua, ub. */
template <typename W, int U>
__device__ __forceinline__ void dot2(const MvJob &jb, const float *xs, uint4 *ua, uint4 *ub, int have,
                                     float *sa, float *sb)
{
    typedef vec16<W> V;
    int lane = threadIdx.x & 31;
    float aa = 0.0f, ab = 0.0f;
    for (int64_t c0 = jb.cb; c0 < jb.ce; c0 += 32 * U) {
        if (!have || c0 != jb.cb)
            mv_load<U>(jb, c0, ua, ub);
#pragma unroll
        for (int i = 0; i < U; i++) {
            int64_t c = c0 + lane + 32 * i;
            if (c >= jb.ce)
                break;
            float wa[V::N], wb[V::N];
            V::unpack(ua[i], wa);
            V::unpack(ub[i], wb);
#pragma unroll
            for (int q = 0; q < V::N; q += 4) {
                float4 x4 = *(const float4 *)(xs + c * V::N + q);
                aa += wa[q] * x4.x + wa[q + 1] * x4.y + wa[q + 2] * x4.z + wa[q + 3] * x4.w;
                ab += wb[q] * x4.x + wb[q + 1] * x4.y + wb[q + 2] * x4.z + wb[q + 3] * x4.w;
            }
        }
    }
    *sa = warp_sum(aa);
    *sb = warp_sum(ab);
}

/* Row r's results stored (lane 0 of the warp that has the sums). */
__device__ __forceinline__ void mv_store(const MkMv &m, int64_t r, float a, float b)
{
    int64_t local;
    int s = mv_product(m, r, &local);
    float v = m.glu ? a / (1.0f + expf(-a)) * b : a;
    if (m.n == 1)
        v = epi_apply(m.e, local, v);
    const MkVec &o = m.o[m.glu ? 0 : s];
    st_f(o.p + local * o.nb, o.t, v);
}

/* A matmul stage: this block's rows (mv_rows), by the warps' jobs (mv_job); a split row's sums
 * are added in order in shared memory. have: the first job's first batch is in ua, ub. */
template <typename W, int U>
__device__ void mv_stage(const MkMv &m, float *xs, float *red, uint4 *ua, uint4 *ub, int have)
{
    typedef vec16<W> V;
    stage_x(m, xs);
    int64_t r0, r1, nc = m.K / V::N;
    mv_rows(m, &r0, &r1);
    int64_t rows = r1 - r0;
    if (rows <= 0)
        return;
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    MvJob jb;
    float a = 0.0f, b = 0.0f;
    if (rows >= MK_WARPS) {
        for (int j = 0; mv_job(m, r0, rows, nc, j, jb); j++) {
            dot2<W, U>(jb, xs, ua, ub, have && j == 0, &a, &b);
            if (lane == 0) {
                mv_store(m, jb.ra, a, b);
                if (!m.glu && jb.rb >= 0)
                    mv_store(m, jb.rb, b, 0.0f);
            }
        }
        return;
    }
    int S = (int)(MK_WARPS / rows);
    if (mv_job(m, r0, rows, nc, 0, jb))
        dot2<W, U>(jb, xs, ua, ub, have, &a, &b);
    if (lane == 0) {
        red[w] = a;
        red[MK_WARPS + w] = b;
    }
    __syncthreads();
    if (w / S < rows && w % S == 0 && lane == 0) {
        float ta = 0.0f, tb = 0.0f;
        for (int k = 0; k < S; k++) {
            ta += red[w + k];
            tb += red[MK_WARPS + w + k];
        }
        mv_store(m, r0 + w / S, ta, tb);
    }
}

/* A norm on its own (its output read by a launch that is not a matmul stage): block 0. */
__device__ void norm_stage(const MkMv &m, float *xs)
{
    if (blockIdx.x == 0)
        stage_x(m, xs);
}

union MkAttSmem {
    AttSmem<2> a2;
    AttSmem<4> a4;
    AttSmem<ATT_MAXJ> a8;
};

template <int J>
__device__ void att_stage(const MkStage &s, AttSmem<J> &sm)
{
    int64_t H = s.att.q.ne[2], units = H * s.nsplit;
    for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
        int64_t h = u % H;
        int split = (int)(u / H);
        DecState st;
        __syncthreads(); /* the block before in this loop is done with sm */
        decode_begin(s.att, sm, s.nsplit, split, st);
        decode_run(s.att, sm, h, s.nsplit, split, st);
    }
}

/* Starts copying stage st into shared memory s (every thread, asynchronously: copy_wait and a
 * block barrier come before s is read). */
__device__ __forceinline__ void copy_stage(MkStage *s, const MkStage *st)
{
    for (int k = threadIdx.x; k < (int)(sizeof *s / 16); k += blockDim.x) {
        unsigned dst = (unsigned)__cvta_generic_to_shared((char *)s + 16 * k);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst),
                     "l"((const char *)st + 16 * k)
                     : "memory");
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
}

__device__ __forceinline__ void copy_wait()
{
    asm volatile("cp.async.wait_all;" ::: "memory");
}

/* 16 / element size of a matmul stage's weights. */
__device__ __forceinline__ int mv_vn(const MkMv &m)
{
    return m.wt == GP_F32 ? 4 : 8;
}

/*
 * Stages st[0, n) with grid barriers between; every block of the grid resident (cooperative). The
 * next stage's description and this warp's first batch of its weights are loaded before the
 * barrier that precedes it, so they arrive while the blocks wait.
 */
template <int U>
__global__ void __launch_bounds__(MK_THREADS, U == MK_U_MANY ? 3 : 1)
    k_mega(const MkStage *st, int n, unsigned *bar, int64_t pf_cap, int barriers_only)
{
    extern __shared__ float4 mk_xs4[];
    __shared__ MkAttSmem sm;
    __shared__ float red[2 * MK_WARPS];
    __shared__ MkStage ss[2]; /* the stage being run and the next: read from shared memory */
    float *xs = (float *)mk_xs4;
    uint4 ua[U], ub[U];
    int have = 0;
    if (n <= 0)
        return;
    copy_stage(&ss[0], st);
    copy_wait();
    __syncthreads();
    if (n > 1)
        copy_stage(&ss[1], st + 1);
    if (threadIdx.x == 0 && pf_cap > 0 && ss[0].kind == MK_MV)
        mv_prefetch(ss[0].mv, pf_cap);
    if (ss[0].kind == MK_MV && !barriers_only)
        have = mv_preload<U>(ss[0].mv, mv_vn(ss[0].mv), ua, ub);
    for (int i = 0; i < n; i++) {
        const MkStage &s = ss[i & 1];
        if (barriers_only) {
            /* timing: the barriers and prefetches alone */
        } else if (s.kind == MK_MV) {
            if (s.mv.wt == GP_F16)
                mv_stage<__half, U>(s.mv, xs, red, ua, ub, have);
            else if (s.mv.wt == GP_BF16)
                mv_stage<__nv_bfloat16, U>(s.mv, xs, red, ua, ub, have);
            else
                mv_stage<float, U>(s.mv, xs, red, ua, ub, have);
        } else if (s.kind == MK_NORM) {
            norm_stage(s.mv, xs);
        } else if (s.J == 2) {
            att_stage<2>(s, sm.a2);
        } else if (s.J == 4) {
            att_stage<4>(s, sm.a4);
        } else {
            att_stage<ATT_MAXJ>(s, sm.a8);
        }
        if (i + 1 == n)
            break;
        /* The next stage (copied while this one ran): its weights' first batch, and the rest of
         * this block's share into L2, before the barrier. */
        copy_wait();
        __syncthreads();
        const MkStage &next = ss[(i + 1) & 1];
        if (threadIdx.x == 0 && pf_cap > 0 && next.kind == MK_MV)
            mv_prefetch(next.mv, pf_cap);
        have = next.kind == MK_MV && !barriers_only ? mv_preload<U>(next.mv, mv_vn(next.mv), ua, ub)
                                                    : 0;
        grid_sync(bar, i);
        if (i + 2 < n)
            copy_stage(&ss[i & 1], st + i + 2); /* every thread is done with stage i */
    }
    mk_exit(bar);
}

/* ---- host ---- */

extern "C" gp_cu_mk *gp_cuda_mk_create(int cap, int n_sm, int blocks_per_sm, int64_t pf_bytes,
                                       char *err, size_t err_len)
{
    gp_cu_mk *mk = (gp_cu_mk *)calloc(1, sizeof *mk);
    size_t smem = MK_MAX_K * sizeof(float);
    int occ = 0;
    cudaError_t e = mk ? cudaSuccess : cudaErrorMemoryAllocation;
    if (mk)
        mk->kernel = blocks_per_sm == 1 ? k_mega<MK_U_ONE> : k_mega<MK_U_MANY>;
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(mk->kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (e == cudaSuccess)
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, mk->kernel, MK_THREADS, smem);
    if (e == cudaSuccess && occ < 1)
        e = cudaErrorInvalidConfiguration;
    if (e == cudaSuccess) {
        mk->cap = cap;
        mk->h = (MkStage *)calloc((size_t)cap, sizeof(MkStage));
        e = mk->h ? cudaMalloc((void **)&mk->d, (size_t)cap * sizeof(MkStage))
                  : cudaErrorMemoryAllocation;
    }
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&mk->bar, MK_BAR_WORDS * sizeof(unsigned));
    if (e == cudaSuccess)
        e = cudaMemset(mk->bar, 0, MK_BAR_WORDS * sizeof(unsigned));
    if (e != cudaSuccess) {
        snprintf(err, err_len, "cuda: persistent decode kernel: %s", cudaGetErrorString(e));
        gp_cuda_mk_destroy(mk);
        return NULL;
    }
    int bps = blocks_per_sm > 0 && blocks_per_sm < occ ? blocks_per_sm : occ;
    mk->grid = (n_sm > 0 ? n_sm : 132) * bps;
    mk->pf_cap = pf_bytes > 0 ? pf_bytes / mk->grid / 16 * 16 : 0;
    const char *tm = getenv("GPLAN_CUDA_MEGA_TIMING");
    mk->barriers_only = tm && strcmp(tm, "barriers") == 0;
    return mk;
}

extern "C" void gp_cuda_mk_destroy(gp_cu_mk *mk)
{
    if (!mk)
        return;
    cudaFree(mk->d);
    cudaFree(mk->bar);
    free(mk->h);
    free(mk);
}

extern "C" int gp_cuda_mk_grid(const gp_cu_mk *mk)
{
    return mk ? mk->grid : 0;
}

extern "C" int gp_cuda_mk_launches(const gp_cu_mk *mk)
{
    return mk ? mk->launches : 0;
}

extern "C" int gp_cuda_mk_stages(const gp_cu_mk *mk)
{
    return mk ? mk->n : 0;
}

extern "C" int gp_cuda_mk_upload(gp_cu_mk *mk, char *err, size_t err_len)
{
    if (!mk || mk->n == 0)
        return 0;
    cudaError_t e = cudaMemcpy(mk->d, mk->h, (size_t)mk->n * sizeof(MkStage), cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
        return 0;
    snprintf(err, err_len, "cuda: persistent decode kernel: stage table: %s", cudaGetErrorString(e));
    return -1;
}

/* Launches the pending stages as one kernel (on the stream being captured). */
extern "C" int gp_cuda_mk_flush(gp_cu_mk *mk, cudaStream_t s)
{
    if (!mk || mk->first == mk->n)
        return 0;
    int first = mk->first, n = mk->n - first;
    mk->first = mk->n;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeCooperative;
    at[0].val.cooperative = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3((unsigned)mk->grid);
    cfg.blockDim = dim3(MK_THREADS);
    cfg.dynamicSmemBytes = mk->smem;
    cfg.stream = s;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    const MkStage *table = mk->d + first;
    cudaError_t e = cudaLaunchKernelEx(&cfg, mk->kernel, table, n, mk->bar, mk->pf_cap,
                                       mk->barriers_only);
    mk->smem = 0;
    mk->launches++;
    if (e != cudaSuccess)
        mk->disabled = 1;
    return e == cudaSuccess ? 0 : -1;
}

static std::atomic<long long> stages_recorded(0);

extern "C" int64_t gp_cuda_mk_stage_count(void)
{
    return stages_recorded.load();
}

/* A free stage, or NULL (the table is full, or recording stopped after a failure). */
static MkStage *mk_new(gp_cu_mk *mk, int kind, size_t smem)
{
    if (!mk || mk->disabled || mk->n >= mk->cap)
        return NULL;
    MkStage *s = &mk->h[mk->n++];
    memset(s, 0, sizeof *s);
    stages_recorded++;
    s->kind = kind;
    if (smem > mk->smem)
        mk->smem = smem;
    return s;
}

static MkVec vec_of(const KT &k)
{
    MkVec v = {k.p, k.t, k.nb[3]};
    return v;
}

/* x of a matmul stage when it is the output of the norm stage just recorded: the norm runs in the
 * matmul's blocks instead (block 0 still stores its output, which later nodes may read). */
static void mk_take_norm(gp_cu_mk *mk, MkMv *m)
{
    if (m->pre || mk->n < 2 || mk->first > mk->n - 2)
        return;
    MkStage *prev = &mk->h[mk->n - 2];
    if (prev->kind != MK_NORM || prev->mv.pre_out.p != (const char *)m->x ||
        prev->mv.pre_out.t != GP_F32 || prev->mv.pre_out.nb != 4 || prev->mv.K != m->K)
        return;
    m->pre = 1;
    m->nm = prev->mv.nm;
    m->x = prev->mv.x;
    m->pre_out = prev->mv.pre_out;
    *prev = mk->h[mk->n - 1];
    mk->n--;
}

/* Records a one-row matmul (gp_cu_matmul's [N, K] matrix-vector case); 1 when recorded. */
int gp_cu_mk_matvec(gp_cu_ctx *c, int wt, const char *w, int64_t ldw, int64_t K, int64_t N,
                    const float *x, const NORM *nm, const KT &o, const EPI &e)
{
    if (K > MK_MAX_K || N <= 0 || K % 8 || ((uintptr_t)x & 15))
        return 0;
    MkStage *s = mk_new(c->mk, MK_MV, (size_t)K * sizeof(float));
    if (!s)
        return 0;
    MkMv &m = s->mv;
    m.n = 1;
    m.wt = wt;
    m.K = K;
    m.x = x;
    m.pre = nm != NULL;
    if (nm)
        m.nm = *nm;
    m.w[0] = w;
    m.ldw[0] = ldw;
    m.row0[1] = N;
    m.o[0] = vec_of(o);
    m.e = e;
    mk_take_norm(c->mk, &m);
    return 1;
}

/* Records a matmul group (gp_cuda_matvec_group's products); 1 when recorded. */
int gp_cu_mk_group(gp_cu_ctx *c, int wt, int n, int glu, const char *const *w, const int64_t *ldw,
                   const int64_t *N, const KT *o, const float *x, int64_t K)
{
    if (K > MK_MAX_K || K % 8 || ((uintptr_t)x & 15))
        return 0;
    MkStage *s = mk_new(c->mk, MK_MV, (size_t)K * sizeof(float));
    if (!s)
        return 0;
    MkMv &m = s->mv;
    m.n = n;
    m.glu = glu;
    m.wt = wt;
    m.K = K;
    m.x = x;
    for (int i = 0; i < n; i++) {
        m.w[i] = w[i];
        m.ldw[i] = ldw[i];
        m.o[i] = vec_of(o[glu ? 0 : i]);
        m.row0[i + 1] = glu ? N[0] : m.row0[i] + N[i];
    }
    mk_take_norm(c->mk, &m);
    return 1;
}

/* Records a one-token attention (k_attention_decode's blocks); 1 when recorded. */
int gp_cu_mk_attention(gp_cu_ctx *c, const DecArgs &a, int nsplit, int J)
{
    MkStage *s = mk_new(c->mk, MK_ATT, 0);
    if (!s)
        return 0;
    s->att = a;
    s->nsplit = nsplit;
    s->J = J;
    return 1;
}

/* Records a norm of one f32 row x [K] into out; 1 when recorded. */
int gp_cu_mk_norm(gp_cu_ctx *c, const NORM &nm, const float *x, int64_t K, const KT &o)
{
    if (K > MK_MAX_K || ((uintptr_t)x & 15))
        return 0;
    MkStage *s = mk_new(c->mk, MK_NORM, (size_t)K * sizeof(float));
    if (!s)
        return 0;
    s->mv.pre = 1;
    s->mv.nm = nm;
    s->mv.x = x;
    s->mv.K = K;
    s->mv.pre_out = vec_of(o);
    return 1;
}
