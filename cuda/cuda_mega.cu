/*
 * The persistent decode kernel ("mega"): the launches of a one-token eval that it can take (one-row
 * matmuls with their norms and epilogues, matmul groups, the fused one-token attention, single
 * norms) are recorded as stages instead of launched, and a run of consecutive stages becomes one
 * cooperative kernel: every block stays resident and the stages are separated by grid barriers, so
 * a stage costs a barrier (~1 us) instead of a launch with its ramp-up and last wave (~7 us). While
 * a matmul stage runs, its blocks bring the next matmul stage's weights into L2 (one bulk prefetch
 * per block over its own rows), so the weight stream does not stop at the barriers.
 *
 * The streaming variant (k_mega_stream, below) runs the same stage table with one block per
 * multiprocessor whose producer warp brings the weights through shared memory, and counters per
 * stage instead of grid barriers. Both are opt-in: each measured slower than the launches
 * (bench/gpu-notes.md, fourth and ninth sessions).
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
    int stream;      /* k_mega_stream instead of k_mega */
    unsigned *cnt;   /* stream: device [(cap + 1) ST_CW]: the stages' counters, then the exits */
    uint64_t *prof;  /* stream, GPLAN_CUDA_MEGA_PROFILE: device [grid, cap, ST_PROF] */
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

/* Polls *count (acquire) until it reaches target; traps after MK_TIMEOUT_NS (never hangs). */
__device__ __forceinline__ void wait_count(const unsigned *count, unsigned target)
{
    uint64_t t0 = ns_now();
    while (ld_acquire(count) < target)
        if (ns_now() - t0 > MK_TIMEOUT_NS)
            __trap();
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
        wait_count(count, target);
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
__device__ __noinline__ void att_stage(const MkStage &s, AttSmem<J> &sm)
{
    int64_t H = s.att.q.ne[2], units = H * s.nsplit;
    for (int64_t u = blockIdx.x; u < units; u += gridDim.x) {
        int64_t h = u % H;
        int split = (int)(u / H);
        DecState st;
        att_sync(); /* the block before in this loop is done with sm */
        decode_begin(s.att, sm, s.nsplit, split, st);
        KvRows<J> first;
        decode_run(s.att, sm, h, s.nsplit, split, st, first, false);
    }
}

/* Starts copying stage st into shared memory s (every thread, or the first nt when nt > 0;
 * asynchronously: copy_wait and a barrier of those threads come before s is read). */
__device__ __forceinline__ void copy_stage(MkStage *s, const MkStage *st, int nt = 0)
{
    for (int k = threadIdx.x; k < (int)(sizeof *s / 16); k += nt > 0 ? nt : (int)blockDim.x) {
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

/* ---- the streaming variant (GPLAN_CUDA_MEGA=2) ----
 *
 * One block per multiprocessor. ST_CONS consumer warps run the stages; a producer warp streams
 * every matmul stage's weights for this block's rows, in the consumers' order, into a ring of
 * ST_SLOTS slots of shared memory (one bulk copy per product and chunk, completing on the slot's
 * mbarrier). Weights depend on nothing an eval writes, so the producer runs ahead across stage
 * boundaries as far as the ring allows, and HBM keeps streaming while the consumers wait.
 *
 * A stage waits for the stage before through that stage's counter: every block adds one when its
 * share is stored; the consumers of the next stage poll it until it counts the grid. That orders
 * stages as a grid barrier would, but only the consumers wait; the producer never does.
 *
 * The consumers stage x in shared memory after the ring (normalized there when the stage takes a
 * norm in) and take the rows of a chunk a warp each; no consumer barrier inside a stage: each warp
 * releases a slot for itself. The attention's stages run on the first ATT_WARPS consumer warps.
 */
enum { ST_CONS = 8, ST_CT = ST_CONS * 32, ST_THREADS = ST_CT + 32 }; /* consumers, producer */
enum { ST_SLOTS = 7, ST_SLOT = 25600 }; /* the ring: 175 KB */
enum { ST_RMAX = 16 };                  /* units of a chunk (a slot) at most */
enum { ST_MAXK = 8192 };                /* x in shared memory after the ring: K floats at most */
enum { ST_CW = 32 };                    /* words from one stage's counter to the next (128 bytes) */

/* Units of stage weights of unit_bytes each that one chunk takes (0: a unit does not fit). */
__host__ __device__ __forceinline__ int64_t st_per_chunk(int64_t unit_bytes)
{
    int64_t n = ST_SLOT / unit_bytes;
    return n < ST_RMAX ? n : (int64_t)ST_RMAX;
}

/* Experiments (GPLAN_CUDA_MEGA_STREAM=chunk:BYTES,nocompute): chunks of at most st_chunk bytes
 * (still one unit at least); consumers that only wait for the chunks (wrong results). */
__device__ int st_chunk = ST_SLOT, st_nocompute = 0;

__device__ __forceinline__ int64_t st_units(int64_t unit_bytes)
{
    int64_t n = st_per_chunk(unit_bytes), m = st_chunk / unit_bytes;
    return m < 1 ? 1 : m < n ? m : n;
}

__device__ __forceinline__ int64_t st_row_bytes(const MkMv &m)
{
    return m.K * (m.wt == GP_F32 ? 4 : 2);
}

/* A chunk of a matmul stage in the ring: `rows` units of product s from its row `local` (a unit:
 * a row; with glu, the row of each product, product 0's rows first in the slot). */
struct StChunk {
    int s;
    int64_t local, rows;
};

/* The next chunk of this block's rows [*r, r1) of stage m, at most per units and never across
 * products; 0 when there is none. The producer and the consumers walk the same sequence. */
__device__ __forceinline__ int st_next(const MkMv &m, int64_t *r, int64_t r1, int64_t per,
                                       StChunk &c)
{
    if (*r >= r1)
        return 0;
    c.s = mv_product(m, *r, &c.local);
    int64_t end = m.glu ? r1 : min(r1, m.row0[c.s + 1]);
    c.rows = min(per, end - *r);
    *r += c.rows;
    return 1;
}

__device__ __forceinline__ unsigned smem_u32(const void *p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}

/* 16 bytes of shared memory at a (a shared-space address: the ring and x are reached through
 * pointers the compiler cannot place in shared memory). */
__device__ __forceinline__ uint4 lds16(unsigned a)
{
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(a));
    return v;
}

/* mbarriers and bulk copies (sm_90; the host runs this kernel on such devices only). */
__device__ __forceinline__ void mbar_init(uint64_t *b, unsigned count)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(count)
                 : "memory");
#endif
}

__device__ __forceinline__ void mbar_arrive(uint64_t *b)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(b)) : "memory");
#endif
}

/* The producer's arrival on a full barrier: the phase completes once `bytes` have landed. */
__device__ __forceinline__ void mbar_expect(uint64_t *b, unsigned bytes)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(b)),
                 "r"(bytes)
                 : "memory");
#endif
}

/* Waits for phase `parity` of b to complete; traps after MK_TIMEOUT_NS (never hangs). */
__device__ __forceinline__ void mbar_wait(uint64_t *b, unsigned parity)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    unsigned a = smem_u32(b), done;
    uint64_t t0 = 0;
    for (;;) {
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done)
                     : "r"(a), "r"(parity)
                     : "memory");
        if (done)
            return;
        if (!t0)
            t0 = ns_now();
        else if (ns_now() - t0 > MK_TIMEOUT_NS)
            __trap();
    }
#else
    __trap();
#endif
}

/* bytes (a multiple of 16) from global src to shared dst, completing on b; weights are read once
 * per eval, so they are first out of L2. */
__device__ __forceinline__ void bulk_copy(char *dst, const char *src, unsigned bytes, uint64_t *b,
                                          uint64_t policy)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
                 " [%0], [%1], %2, [%3], %4;" ::"r"(smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(b)), "l"(policy)
                 : "memory");
#endif
}

/* Profiling (GPLAN_CUDA_MEGA_PROFILE=FILE): per block and stage of a launch, ST_PROF globaltimer
 * stamps, written to FILE when the kernel is destroyed (the last launch's); 8 to 11: warp 0's
 * clock cycles in a matmul stage waiting for chunks, summing them, finishing units, and the
 * chunks. */
enum { ST_PROF = 12 };
__device__ uint64_t *st_prof;
__device__ int st_prof_cap;
__shared__ uint64_t *st_prof_b; /* this block's stamps (st_prof), or NULL */

__device__ __forceinline__ void prof(int i, int k)
{
    if (st_prof_b && i < st_prof_cap)
        st_prof_b[i * ST_PROF + k] = ns_now();
}

/* The SM's clock when profiling (for durations), else 0. */
__device__ __forceinline__ uint64_t prof_clock()
{
    return st_prof_b ? clock64() : 0;
}

__device__ __forceinline__ void prof_set(int i, int k, uint64_t v)
{
    if (st_prof_b && i < st_prof_cap)
        st_prof_b[i * ST_PROF + k] = v;
}

/* The producer (one thread): every chunk of every matmul stage of this block, in order, each into
 * the next slot once the consumers have released that slot's previous chunk. */
__device__ void st_produce(const MkStage *st, int n, char *ring, uint64_t *full, uint64_t *empty)
{
    uint64_t policy = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
#endif
    unsigned q = 0;
    for (int i = 0; i < n; i++) {
        if (st[i].kind != MK_MV)
            continue;
        const MkMv &m = st[i].mv;
        int np = m.glu ? 2 : 1;
        int64_t r, r1, rb = st_row_bytes(m), per = st_units(rb * np);
        mv_rows(m, &r, &r1);
        StChunk c;
        for (int first = 1; st_next(m, &r, r1, per, c); q++, first = 0) {
            unsigned slot = q % ST_SLOTS;
            if (q >= ST_SLOTS)
                mbar_wait(&empty[slot], (q / ST_SLOTS - 1) & 1);
            if (first)
                prof(i, 6);
            prof(i, 7);
            char *dst = ring + slot * ST_SLOT;
            mbar_expect(&full[slot], (unsigned)(c.rows * rb * np));
            for (int k = 0; k < np; k++) {
                int sk = m.glu ? k : c.s;
                const char *src = m.w[sk] + c.local * m.ldw[sk];
                if (m.ldw[sk] == rb) {
                    bulk_copy(dst, src, (unsigned)(c.rows * rb), &full[slot], policy);
                    dst += c.rows * rb;
                    continue;
                }
                for (int64_t j = 0; j < c.rows; j++, dst += rb)
                    bulk_copy(dst, src + j * m.ldw[sk], (unsigned)rb, &full[slot], policy);
            }
        }
    }
}

/* The barrier of the consumer warps (named barrier 2; the attention's is 1, over its first
 * ATT_THREADS). */
__device__ __forceinline__ void cons_sync()
{
    asm volatile("bar.sync 2, %0;" ::"n"((int)ST_CT) : "memory");
}

/* The consumers wait until every block has finished the stage before (cnt NULL: none). */
__device__ __forceinline__ void st_wait(const unsigned *cnt)
{
    if (cnt && threadIdx.x == 0)
        wait_count(cnt, gridDim.x);
    cons_sync();
}

/* This block's share of the stage is stored: count it (after every consumer's stores; the release
 * makes them visible to whoever acquires the count). */
__device__ __forceinline__ void st_done(unsigned *cnt)
{
    cons_sync();
    if (threadIdx.x == 0)
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(cnt) : "memory");
}

/* v summed over the consumer warps (every consumer gets it, the warps added in order). sh:
 * ST_CONS floats, written again only after a later consumer barrier. */
__device__ __forceinline__ float cons_sum(float v, float *sh)
{
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0)
        sh[threadIdx.x >> 5] = v;
    cons_sync();
    float t = 0.0f;
#pragma unroll
    for (int k = 0; k < ST_CONS; k++)
        t += sh[k];
    return t;
}

/* Element j's index of consumer thread t's share of x: float4 number t + ST_CT (j / 4). */
__device__ __forceinline__ int64_t st_elem(int j)
{
    return 4 * ((int64_t)threadIdx.x + ST_CT * (j / 4)) + j % 4;
}

/* x's elements per consumer thread for K (XN: 8, 16 or ST_MAXK / ST_CT = 32). */
__device__ __forceinline__ int st_xn(int64_t K)
{
    return K <= 8 * ST_CT ? 8 : K <= 16 * ST_CT ? 16 : 32;
}

/* x [K] (written by other blocks: read past L1) into shared memory xs, normalized with pre (the
 * sums over the consumer warps; up to 16 elements a thread, the norm's weights are loaded with x,
 * one round trip for both; past that they would spill, and are loaded where they are used);
 * block 0 stores the norm's output to pre_out when asked. Ends in a consumer barrier. sh: 2
 * ST_CONS floats. */
template <int XN> __device__ __forceinline__ void st_stage_x(const MkMv &m, float *xs, float *sh)
{
    enum { EARLY = XN <= 16, NW = EARLY ? XN : 1 };
    float v[XN], nw[NW], nb[NW];
    int64_t K = m.K;
#pragma unroll
    for (int j = 0; j < XN; j += 4) {
        int64_t e = st_elem(j);
        float4 f = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (e + 4 <= K) {
            f = __ldcg((const float4 *)(m.x + e));
        } else if (e < K) {
            f.x = __ldcg(m.x + e);
            f.y = e + 1 < K ? __ldcg(m.x + e + 1) : 0.0f;
            f.z = e + 2 < K ? __ldcg(m.x + e + 2) : 0.0f;
        }
        v[j] = f.x;
        v[j + 1] = f.y;
        v[j + 2] = f.z;
        v[j + 3] = f.w;
    }
    if (m.pre) {
        const NORM &nm = m.nm;
#pragma unroll
        for (int j = 0; j < NW; j++) {
            int64_t e = st_elem(j);
            nw[j] = EARLY && e < K ? norm_w(nm, e) : 0.0f;
            nb[j] = EARLY && e < K ? norm_b(nm, e) : 0.0f;
        }
        float mean = 0.0f, acc = 0.0f;
        if (nm.is_ln) {
#pragma unroll
            for (int j = 0; j < XN; j++)
                acc += v[j];
            mean = cons_sum(acc, sh) / (float)K;
            acc = 0.0f;
        }
#pragma unroll
        for (int j = 0; j < XN; j++) {
            float d = v[j] - mean;
            acc += st_elem(j) < K ? d * d : 0.0f;
        }
        float inv = 1.0f / sqrtf(cons_sum(acc, sh + ST_CONS) / (float)K + nm.eps);
        int store = m.pre_out.p && blockIdx.x == 0;
#pragma unroll
        for (int j = 0; j < XN; j++) {
            int64_t e = st_elem(j);
            float wj = EARLY ? nw[j % NW] : e < K ? norm_w(nm, e) : 0.0f;
            float bj = EARLY ? nb[j % NW] : e < K ? norm_b(nm, e) : 0.0f;
            v[j] = norm_val(nm, v[j], mean, inv, wj, bj);
            if (store && e < K)
                st_f(m.pre_out.p + e * m.pre_out.nb, m.pre_out.t, v[j]);
        }
    }
#pragma unroll
    for (int j = 0; j < XN; j += 4) {
        int64_t e = st_elem(j);
        if (e < K)
            *(float4 *)(xs + e) = make_float4(v[j], v[j + 1], v[j + 2], v[j + 3]);
    }
    cons_sync();
}

/* The ring and what the consumers keep between chunks. */
struct StRing {
    char *ring;
    uint64_t *full, *empty;
    float *xs;  /* x of the stage [K <= ST_MAXK] */
    float *sh;  /* [2 ST_CONS] */
    unsigned q; /* chunks consumed */
    int i;      /* the stage */
};

/*
 * A matmul stage: x into shared memory (normalized with pre), then this block's chunks from the
 * ring. Unit u of the block's share (counted from its first row) is warp u % ST_CONS's: a warp
 * takes its up to ST_RMAX / ST_CONS units of a chunk together (each x load serves them all), lane
 * l the 16-byte pieces l + 32 i of each row; lane j stores unit j's result (glu, the epilogue,
 * whose operands it loads before the chunk arrives). Each warp releases a slot for itself.
 */
enum { ST_R = ST_RMAX / ST_CONS, ST_U = 1 }; /* a warp's units of a chunk; pieces per batch */

/*
 * This warp's sums of its units j0, j0 + ST_CONS, ... (mine of them) of a chunk at base (rows rb
 * bytes apart; glu: product 1's rows after product 0's) with x at xs (shared-space addresses):
 * lane l takes pieces l + 32 i, ST_U at a time with every load of a batch in flight before its
 * sums. Units past mine load zeros (their sums are not used): no branch inside.
 */
template <typename W, int GLU>
__device__ __forceinline__ void st_sums(unsigned base, unsigned xs, int rb, int nc, int j0, int mine,
                                        int rows, float (&a)[ST_R], float (&b)[ST_R])
{
    typedef vec16<W> V;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    for (int p0 = threadIdx.x & 31; p0 < nc; p0 += 32 * ST_U) {
        uint4 wa[ST_R][ST_U], wb[ST_R][ST_U];
#pragma unroll
        for (int u = 0; u < ST_U; u++) {
            int p = p0 + 32 * u;
#pragma unroll
            for (int k = 0; k < ST_R; k++) {
                unsigned row = base + (unsigned)((j0 + k * ST_CONS) * rb + p * 16);
                bool on = k < mine && p < nc;
                wa[k][u] = on ? lds16(row) : zero;
                wb[k][u] = GLU && on ? lds16(row + (unsigned)(rows * rb)) : zero;
            }
        }
#pragma unroll
        for (int u = 0; u < ST_U; u++) {
            int p = p0 + 32 * u < nc ? p0 + 32 * u : 0; /* x of a piece past the row: any */
            float xv[V::N];
#pragma unroll
            for (int q = 0; q < V::N; q += 4) {
                uint4 x4 = lds16(xs + (unsigned)((p * V::N + q) * sizeof(float)));
                xv[q] = __uint_as_float(x4.x);
                xv[q + 1] = __uint_as_float(x4.y);
                xv[q + 2] = __uint_as_float(x4.z);
                xv[q + 3] = __uint_as_float(x4.w);
            }
#pragma unroll
            for (int k = 0; k < ST_R; k++) {
                float f[V::N];
                V::unpack(wa[k][u], f);
#pragma unroll
                for (int q = 0; q < V::N; q++)
                    a[k] += f[q] * xv[q];
                if (GLU) {
                    V::unpack(wb[k][u], f);
#pragma unroll
                    for (int q = 0; q < V::N; q++)
                        b[k] += f[q] * xv[q];
                }
            }
        }
    }
}

template <typename W, int XN>
__device__ __noinline__ void st_mv(const MkMv &m, const unsigned *dep, StRing &rg)
{
    typedef vec16<W> V;
    int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
    st_wait(dep);
    if (threadIdx.x == 0)
        prof(rg.i, 1);
    st_stage_x<XN>(m, rg.xs, rg.sh);
    if (threadIdx.x == 0)
        prof(rg.i, 2);
    int np = m.glu ? 2 : 1;
    int64_t r, r1, rb = st_row_bytes(m), per = st_units(rb * np), nc = m.K / V::N;
    if (st_nocompute)
        nc = 0;
    mv_rows(m, &r, &r1);
    int64_t u0 = 0; /* the chunk's first unit in the block's share */
    StChunk c;
    uint64_t cy[4] = {0, 0, 0, 0}, c0 = prof_clock(), c1;
    for (int first = 1; st_next(m, &r, r1, per, c); rg.q++, u0 += c.rows, first = 0) {
        unsigned slot = rg.q % ST_SLOTS;
        /* This warp's units of the chunk: j0, j0 + ST_CONS, ... < rows. */
        int j0 = (int)((w - u0 % ST_CONS + ST_CONS) % ST_CONS);
        int mine = c.rows > j0 ? (int)((c.rows - j0 + ST_CONS - 1) / ST_CONS) : 0;
        EpiVals ev = {};
        if (lane < mine && m.n == 1)
            ev = epi_load(m.e, c.local + j0 + lane * ST_CONS);
        c1 = prof_clock();
        cy[3] += c1 - c0; /* bookkeeping, epilogue loads */
        c0 = c1;
        mbar_wait(&rg.full[slot], (rg.q / ST_SLOTS) & 1);
        if (threadIdx.x == 0)
            prof(rg.i, first ? 3 : 4);
        c1 = prof_clock();
        cy[0] += c1 - c0;
        c0 = c1;
        unsigned base = smem_u32(rg.ring + slot * ST_SLOT), xs = smem_u32(rg.xs);
        float a[ST_R], b[ST_R];
#pragma unroll
        for (int k = 0; k < ST_R; k++)
            a[k] = b[k] = 0.0f;
        /* A warp with no unit in the chunk only waits for it and releases it. */
        if (mine > 0 && m.glu)
            st_sums<W, 1>(base, xs, (int)rb, (int)nc, j0, mine, (int)c.rows, a, b);
        else if (mine > 0)
            st_sums<W, 0>(base, xs, (int)rb, (int)nc, j0, mine, (int)c.rows, a, b);
        __syncwarp();
        c1 = prof_clock();
        cy[1] += c1 - c0;
        c0 = c1;
        if (lane == 0)
            mbar_arrive(&rg.empty[slot]); /* this warp is done with the slot */
        float out = 0.0f, outb = 0.0f;
#pragma unroll
        for (int k = 0; k < ST_R; k++) {
            if (k >= mine)
                break;
            float s = warp_sum(a[k]), sb = m.glu ? warp_sum(b[k]) : 0.0f;
            if (lane == k) {
                out = s;
                outb = sb;
            }
        }
        if (lane < mine) {
            float v = m.glu ? out / (1.0f + expf(-out)) * outb : out;
            if (m.n == 1)
                v = epi_apply_vals(m.e, ev, v);
            const MkVec &o = m.o[m.glu ? 0 : c.s];
            st_f(o.p + (c.local + j0 + lane * ST_CONS) * o.nb, o.t, v);
        }
        c1 = prof_clock();
        cy[2] += c1 - c0;
        c0 = c1;
    }
    if (threadIdx.x == 0) {
        prof_set(rg.i, 8, cy[0]);
        prof_set(rg.i, 9, cy[1]);
        prof_set(rg.i, 10, cy[2]);
        prof_set(rg.i, 11, cy[3]);
    }
}

template <typename W> __device__ void st_mv_k(const MkMv &m, const unsigned *dep, StRing &rg)
{
    int xn = st_xn(m.K);
    if (xn == 8)
        st_mv<W, 8>(m, dep, rg);
    else if (xn == 16)
        st_mv<W, 16>(m, dep, rg);
    else
        st_mv<W, 32>(m, dep, rg);
}

/* A norm on its own: block 0 normalizes x and stores it. */
template <int XN> __device__ __noinline__ void st_norm_only(const MkMv &m, float *xs, float *sh)
{
    st_stage_x<XN>(m, xs, sh);
}

__global__ void __launch_bounds__(ST_THREADS, 1)
    k_mega_stream(const MkStage *st, int n, unsigned *cnt, unsigned *exits)
{
    extern __shared__ float4 st_ring4[];
    __shared__ MkAttSmem sm;
    __shared__ float sh[2 * ST_CONS];
    __shared__ uint64_t full[ST_SLOTS], empty[ST_SLOTS];
    __shared__ MkStage ss[2];
    char *ring = (char *)st_ring4;
    if (n <= 0)
        return;
    if (threadIdx.x == 0) {
        st_prof_b = st_prof ? st_prof + (int64_t)blockIdx.x * st_prof_cap * ST_PROF : NULL;
        for (int k = 0; k < ST_SLOTS; k++) {
            mbar_init(&full[k], 1);
            mbar_init(&empty[k], ST_CONS);
        }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
    }
    __syncthreads(); /* the last barrier of the whole block: the producer leaves below */
    if (threadIdx.x >= ST_CONS * 32) {
        if (threadIdx.x == ST_CONS * 32)
            st_produce(st, n, ring, full, empty);
        return;
    }
    StRing rg = {ring, full, empty, (float *)(ring + ST_SLOTS * ST_SLOT), sh, 0, 0};
    copy_stage(&ss[0], st, ST_CT);
    copy_wait();
    cons_sync();
    for (int i = 0; i < n; i++) {
        if (i + 1 < n)
            copy_stage(&ss[(i + 1) & 1], st + i + 1, ST_CT); /* stage i - 1 is done */
        const MkStage &s = ss[i & 1];
        const unsigned *dep = i > 0 ? cnt + (i - 1) * ST_CW : NULL;
        rg.i = i;
        if (threadIdx.x == 0)
            prof(i, 0);
        if (s.kind == MK_MV) {
            if (s.mv.wt == GP_F16)
                st_mv_k<__half>(s.mv, dep, rg);
            else if (s.mv.wt == GP_BF16)
                st_mv_k<__nv_bfloat16>(s.mv, dep, rg);
            else
                st_mv_k<float>(s.mv, dep, rg);
        } else if (s.kind == MK_NORM) {
            st_wait(dep);
            if (threadIdx.x == 0)
                prof(i, 1);
            if (blockIdx.x == 0 && st_xn(s.mv.K) == 8)
                st_norm_only<8>(s.mv, rg.xs, sh);
            else if (blockIdx.x == 0 && st_xn(s.mv.K) == 16)
                st_norm_only<16>(s.mv, rg.xs, sh);
            else if (blockIdx.x == 0)
                st_norm_only<32>(s.mv, rg.xs, sh);
        } else {
            st_wait(dep);
            if (threadIdx.x == 0)
                prof(i, 1);
            /* The attention's blocks are ATT_THREADS threads: the first consumer warps. */
            if (threadIdx.x >= ATT_THREADS)
                ;
            else if (s.J == 2)
                att_stage<2>(s, sm.a2);
            else if (s.J == 4)
                att_stage<4>(s, sm.a4);
            else
                att_stage<ATT_MAXJ>(s, sm.a8);
        }
        copy_wait();
        if (threadIdx.x == 0)
            prof(i, 5);
        st_done(cnt + i * ST_CW);
    }
    /* The last block to leave zeroes the counters for the next launch (every other block has
     * passed its last wait). */
    if (threadIdx.x == 0 && atomicAdd(exits, 1u) == gridDim.x - 1) {
        for (int i = 0; i < n; i++)
            cnt[i * ST_CW] = 0;
        *exits = 0;
        __threadfence();
    }
}

/* ---- host ---- */

/* The streaming variant's part of gp_cuda_mk_create: an sm_90 device, its ring's shared memory,
 * one block per multiprocessor, the counters. */
static cudaError_t mk_create_stream(gp_cu_mk *mk, int n_sm)
{
    int dev = 0, major = 0, occ = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (e == cudaSuccess && major < 9)
        e = cudaErrorInvalidDeviceFunction; /* bulk copies and mbarrier waits: sm_90 */
    mk->smem = ST_SLOTS * ST_SLOT + ST_MAXK * sizeof(float);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(k_mega_stream, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)mk->smem);
    if (e == cudaSuccess)
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k_mega_stream, ST_THREADS,
                                                          mk->smem);
    if (e == cudaSuccess && occ < 1)
        e = cudaErrorInvalidConfiguration;
    size_t words = ((size_t)mk->cap + 1) * ST_CW;
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&mk->cnt, words * sizeof(unsigned));
    if (e == cudaSuccess)
        e = cudaMemset(mk->cnt, 0, words * sizeof(unsigned));
    mk->grid = n_sm > 0 ? n_sm : 132;
    size_t pn = (size_t)mk->grid * mk->cap * ST_PROF;
    const char *ex = getenv("GPLAN_CUDA_MEGA_STREAM");
    int chunk = ex && strstr(ex, "chunk:") ? atoi(strstr(ex, "chunk:") + 6) : ST_SLOT;
    int noc = ex && strstr(ex, "nocompute") != NULL;
    if (e == cudaSuccess && chunk > 0 && chunk <= ST_SLOT)
        e = cudaMemcpyToSymbol(st_chunk, &chunk, sizeof chunk);
    if (e == cudaSuccess)
        e = cudaMemcpyToSymbol(st_nocompute, &noc, sizeof noc);
    if (e == cudaSuccess && getenv("GPLAN_CUDA_MEGA_PROFILE")) {
        e = cudaMalloc((void **)&mk->prof, pn * sizeof(uint64_t));
        if (e == cudaSuccess)
            e = cudaMemset(mk->prof, 0, pn * sizeof(uint64_t));
        if (e == cudaSuccess)
            e = cudaMemcpyToSymbol(st_prof, &mk->prof, sizeof mk->prof);
        if (e == cudaSuccess)
            e = cudaMemcpyToSymbol(st_prof_cap, &mk->cap, sizeof mk->cap);
    }
    return e;
}

/* The profile of the last launch to GPLAN_CUDA_MEGA_PROFILE: grid, cap (int32), then the stamps. */
static void mk_write_profile(const gp_cu_mk *mk)
{
    const char *path = getenv("GPLAN_CUDA_MEGA_PROFILE");
    size_t pn = (size_t)mk->grid * mk->cap * ST_PROF;
    uint64_t *h = (uint64_t *)malloc(pn * sizeof *h);
    FILE *f = h ? fopen(path, "wb") : NULL;
    if (f && cudaMemcpy(h, mk->prof, pn * sizeof *h, cudaMemcpyDeviceToHost) == cudaSuccess) {
        int32_t hdr[2] = {mk->grid, mk->cap};
        fwrite(hdr, sizeof hdr, 1, f);
        fwrite(h, sizeof *h, pn, f);
    }
    if (f)
        fclose(f);
    free(h);
}

extern "C" gp_cu_mk *gp_cuda_mk_create(int cap, int n_sm, int blocks_per_sm, int64_t pf_bytes,
                                       int stream, char *err, size_t err_len)
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
    if (e == cudaSuccess && stream) {
        mk->stream = 1;
        e = mk_create_stream(mk, n_sm);
    }
    if (e != cudaSuccess) {
        snprintf(err, err_len, "cuda: persistent decode kernel: %s", cudaGetErrorString(e));
        gp_cuda_mk_destroy(mk);
        return NULL;
    }
    int bps = blocks_per_sm > 0 && blocks_per_sm < occ ? blocks_per_sm : occ;
    if (!mk->stream)
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
    if (mk->prof)
        mk_write_profile(mk);
    cudaFree(mk->d);
    cudaFree(mk->bar);
    cudaFree(mk->cnt);
    cudaFree(mk->prof);
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
    cfg.blockDim = dim3(mk->stream ? (unsigned)ST_THREADS : (unsigned)MK_THREADS);
    cfg.dynamicSmemBytes = mk->smem;
    cfg.stream = s;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    const MkStage *table = mk->d + first;
    cudaError_t e;
    if (mk->stream)
        e = cudaLaunchKernelEx(&cfg, k_mega_stream, table, n, mk->cnt,
                               mk->cnt + (size_t)mk->cap * ST_CW);
    else
        e = cudaLaunchKernelEx(&cfg, mk->kernel, table, n, mk->bar, mk->pf_cap,
                               mk->barriers_only);
    if (!mk->stream)
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
    if (!mk->stream && smem > mk->smem)
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
    /* A norm written over its own input (the planner's in-place) stays a stage of its own: block
     * 0 would store the output while the other blocks still read the input. */
    const char *in = (const char *)prev->mv.x, *out = prev->mv.pre_out.p;
    int64_t bytes = m->K * (int64_t)sizeof(float);
    if (out < in + bytes && in < out + bytes)
        return;
    m->pre = 1;
    m->nm = prev->mv.nm;
    m->x = prev->mv.x;
    m->pre_out = prev->mv.pre_out;
    *prev = mk->h[mk->n - 1];
    mk->n--;
}

/* Whether the streaming kernel takes a matmul stage of n products w [i] (rows ldw [i] bytes apart)
 * of K elements of type wt (glu: a unit is a row of each): a unit in a slot, rows that bulk copies
 * can take, x in shared memory. */
static int st_fits(int wt, int64_t K, int n, int glu, const char *const *w, const int64_t *ldw)
{
    int es = wt == GP_F32 ? 4 : 2;
    int64_t unit = K * es * (glu ? 2 : 1);
    for (int i = 0; i < n; i++)
        if (ldw[i] % 16 || (uintptr_t)w[i] % 16)
            return 0;
    return st_per_chunk(unit) >= 1 && K <= ST_MAXK;
}

/* Records a one-row matmul (gp_cu_matmul's [N, K] matrix-vector case); 1 when recorded. */
int gp_cu_mk_matvec(gp_cu_ctx *c, int wt, const char *w, int64_t ldw, int64_t K, int64_t N,
                    const float *x, const NORM *nm, const KT &o, const EPI &e)
{
    if (K > MK_MAX_K || N <= 0 || K % 8 || ((uintptr_t)x & 15))
        return 0;
    if (c->mk && c->mk->stream && !st_fits(wt, K, 1, 0, &w, &ldw))
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
    if (c->mk && c->mk->stream && !st_fits(wt, K, n, glu, w, ldw))
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
    /* The streaming kernel runs one block per multiprocessor: a block's units run one after the
     * other, so at most one unit per block. */
    int64_t H = a.q.ne[2];
    if (c->mk->stream && (int64_t)nsplit * H > c->mk->grid)
        nsplit = (int)(c->mk->grid / H > 1 ? c->mk->grid / H : 1);
    s->nsplit = nsplit;
    s->J = J;
    return 1;
}

/* Records a norm of one f32 row x [K] into out; 1 when recorded. */
int gp_cu_mk_norm(gp_cu_ctx *c, const NORM &nm, const float *x, int64_t K, const KT &o)
{
    if (K > MK_MAX_K || ((uintptr_t)x & 15) || (c->mk && c->mk->stream && K > ST_MAXK))
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
