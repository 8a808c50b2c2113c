/* The CUDA backend's kernels: one entry point enqueues one node's computation on a stream, with the
 * semantics of cpu/cpu_kernels.h (gp_cpu_compute), and is tested against it. */
#ifndef GP_CUDA_KERNELS_H
#define GP_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "ir/core.h"

/*
 * A tensor as a CUDA kernel sees it. Sizes that change per eval (symbolic dims) are not baked into
 * launches: a kernel reads them from the device parameter block (gp_cu_ctx.d_syms) when it runs, so
 * a captured graph replays correctly for any size up to the one it was launched for.
 */
typedef struct {
    void *data;              /* device address of element 0 */
    gp_dtype dtype;
    int ndim;                /* 0..GP_MAX_DIMS */
    int64_t ne[GP_MAX_DIMS]; /* [ndim] shape; a symbolic dim holds its bound (unused here) */
    int sym[GP_MAX_DIMS];    /* [ndim] symbolic dim index into the param block, or -1 */
    int64_t nb[GP_MAX_DIMS]; /* [ndim] strides in bytes (0 allowed: a broadcast) */
} gp_cu_tensor;

enum { GP_LATE_NORM = 1, GP_LATE_ATT = 2 };

/* What every launch needs. Owned by the caller (the backend, or a test). */
typedef struct {
    cudaStream_t stream;
    cublasHandle_t blas;     /* NULL: matmuls use gplan's own kernels only */
    const int64_t *d_syms;   /* device [n_syms]: each symbolic dim's size for this eval */
    const int64_t *h_syms;   /* host [n_syms]: launch sizes, >= the eval's (a graph bucket's top) */
    int n_syms;
    unsigned *d_counters;    /* device [n_counters], zero between launches: split-K matvec tiles */
    int n_counters;
    int no_matvec;           /* 1: M == 1 matmuls go to cuBLAS too (for benchmarks) */
    int pdl;                 /* 1: launches ask for programmatic dependent launch (overlap) */
    int att_combine;         /* 1: split attention combines in its last block (no 2nd kernel) */
    int att_cluster;         /* > 1: a one-token attention's splits are that many blocks of one
                                cluster, combined in shared memory (gp_cuda_attention_cluster_ok) */
    int att_cluster_small;   /* the same for head dims <= 64 only, when att_cluster is 0 */
    int kc_generic;          /* 1: k_matvec_kc's adds run its generic instances (no instance
                                for the operands' dtypes; for measurements) */
    int att_generic;         /* 1: one-token attentions always run their generic kernel (no
                                instance for the operands' dtypes; for measurements) */
    int ops_generic;         /* 1: norms and lookups always run their generic kernels (no
                                instance for the operands' dtypes; for measurements) */
    int att_tiles;           /* 1: prompts' attention (no split) in tiles of queries and keys,
                                for head dims <= 128 (k_attention_tiles) */
    int att_mma;             /* 1: those tiles on tensor cores where the caches are f16
                                (k_attention_mma) */
    int blas_epi;            /* 1: the epilogue of a product cuBLAS computes (prompts) in one
                                launch after it (k_epilogue) */
    int kv_prefetch;         /* 1: attention kernels prefetch their cache rows likewise */
    int kv_regs;             /* 1: one-token attentions load their first cache rows before
                                their PDL wait, into registers (decode_first) */
    int att_head;            /* 1: one-token attentions of heads of up to 64 dims run in one
                                block a head where they can (k_attention_head), not split */
    int late;                /* GP_LATE_* bits: those kernels let the next one start only once
                                their loads are done, not at their start (the norm; the
                                one-token attention without qkvatt) */
    int no_early;            /* 1: matvecs load no weights before that wait (for benchmarks) */
    int epi_const;           /* 1: [K, N] matvecs whose epilogue's operands are all weights (a
                                bias) load them before that wait (EARLY_EPIC) */
    int epi_early;           /* 1: matvecs load their epilogue's operands right after that wait,
                                not after their sums */
    int norm_early;          /* 1: [K, N] matvecs load a staged norm's weights before that wait */
    int mv_pairs;            /* 1: [N, K] matvecs of short rows take two rows per warp */
    int clusters;            /* 1: the device runs thread block clusters (sm_90 on): argmax
                                splits a row over a cluster */
    int mv_cluster;          /* > 1: [K, N] matvecs split K over at most that many blocks of one
                                cluster, combined in shared memory (gp_cuda_matvec_cluster_ok) */
    int mv_cluster_bps;      /* their target blocks per multiprocessor (0: 3) */
    int mv_cluster_pre;      /* > 0: also those computing a norm of x first, for about that many
                                blocks per multiprocessor (0: kn2 takes them) */
    int mv_cluster_fit[17];  /* [C]: how many clusters of C of them fit at once (0: unknown) */
    int mv_add;              /* > 1: those whose result is added into a residual in place split K
                                over at most that many blocks that add their sums into it with
                                atomics (no cluster; last bits vary between runs) */
    int mv_add_narrow;       /* > 1: at most that many instead for N <= 1024 */
    /* Requests to the next matmul, set by the caller around one gp_cuda_matmul_fused call (the
     * backend's accumulated outputs, docs/plan-format.md): zero_p, zero_n floats its [K, N]
     * matvec kernel zeroes after its wait (zero_done: it did); acc, its output holds zeros, so
     * its splits may add into it with atomics, leaving a trailing gelu of its epilogue to the
     * output's reader when acc_gelu (acc_done, acc_gelu_done: they did); x_gelu, its x is to be
     * read as gelu(x) (cleared once done: staged by the kernel, or x in place first). */
    float *zero_p;
    int64_t zero_n;
    int trig_early;          /* 1: its [K, N] kernel (or block-a-head attention) lets the next
                                kernel start at its own start, not after its wait (the next
                                one's wait still waits for it) */
    int acc, acc_gelu, x_gelu;
    int zero_done, acc_done, acc_gelu_done;
    const void *const_lo;    /* device bytes [const_lo, const_hi) that no kernel writes during */
    const void *const_hi;    /* evals (the weights): matvecs load them before the wait above */
    int n_sm;                /* multiprocessors (0: 132, an H100/H200) */
    int mv_bps;              /* matvec target blocks per multiprocessor (0: 4) */
    void *blas_ws;           /* the workspace cuBLAS was last given (cublasSetWorkspace) */
    size_t blas_ws_size;
    int64_t launches;        /* kernels and library calls enqueued so far */
    char err[256];           /* the last error */
} gp_cu_ctx;

/*
 * Enqueues node `op` on ctx->stream: out from in[0..n_in), as gp_cpu_compute. ws (ws_size bytes,
 * device) is the node's planned workspace (plan/plan.h: GP_WS_CUBLAS_BYTES for matmul, the
 * split-KV partials for attention); it may be NULL when the op needs none. Allocates nothing.
 * Index inputs out of range are skipped by the kernels (no out-of-bounds access); the runtime
 * checks them before the eval. Returns 0, or -1 with ctx->err set (a launch or cuBLAS failure, an
 * unsupported layout).
 */
int gp_cuda_compute(gp_cu_ctx *ctx, gp_op op, const gp_attrs *a, const gp_cu_tensor *out,
                    const gp_cu_tensor *in, int n_in, void *ws, size_t ws_size);

/* Elementwise ops that follow a matmul, applied in its kernel when the matrix-vector path serves it
 * (one row): v = product; for each k: v = v + other[k] (GP_OP_ADD), v * other[k] (GP_OP_MUL) or
 * gelu(v) (GP_OP_GELU); then out = v. other[k] is [N] or [1, N] (or broadcasts a scalar). */
/* A norm whose only reader is the matmul after it (a = layer_norm(x, w, b) or rms_norm(x, w)),
 * computed inside the matrix-vector kernel from x when the product has one row. */
typedef struct {
    int is_ln;               /* 1: layer_norm (mean removed), 0: rms_norm */
    float eps;
    gp_cu_tensor x;          /* the norm's input [1, K] (or [K]), f32 contiguous */
    gp_cu_tensor w;          /* [K] */
    gp_cu_tensor b;          /* [K]; data NULL: none */
    const float *fold;       /* a layer norm's constants for the [K, N] product after it
                                (gp_cuda_fold; device, never written during evals); NULL: none */
    float offset;            /* rms_norm's weight offset: each weight is w + offset (Gemma's
                                (1 + w): 1); 0 for layer norms */
} gp_cu_prenorm;

#define GP_CU_MAX_EPI 3
typedef struct {
    int n;
    gp_op op[GP_CU_MAX_EPI];
    gp_cu_tensor other[GP_CU_MAX_EPI]; /* for ADD and MUL */
    gp_cu_tensor out;                  /* where the last result goes */
} gp_cu_epilogue;

/*
 * A matmul with its epilogue fused when it can be (*fused = 1: only epi->out is written), else
 * the plain matmul into `out` (*fused = 0: the caller runs the epilogue's nodes). With pre (may be
 * NULL): in[0] is the norm's output, which the kernel computes from pre->x itself when the
 * matrix-vector path serves the product (*pre_used = 1); when it cannot, nothing is launched and
 * *pre_used = 0: the caller runs the norm, then calls again without pre. 0, or -1 with err.
 */
int gp_cuda_matmul_fused(gp_cu_ctx *ctx, const gp_attrs *a, const gp_cu_tensor *out,
                         const gp_cu_tensor *in, void *ws, size_t ws_size,
                         const gp_cu_epilogue *epi, const gp_cu_prenorm *pre, int *fused,
                         int *pre_used);

/*
 * One-row products of the same x in one launch: a layer's q, k and v projections (glu = 0: out[s] =
 * x w[s], w[s] taken as b with transposed flag tb[s]), or a SwiGLU's gate and up projections (glu =
 * 1, n = 2: out[0] = silu(x w[0]) * (x w[1]), the swiglu node's output). The weights must be stored
 * [N, K] (K contiguous) in one dtype; x one f32 row of a fixed K. *launched = 0 when the products
 * don't fit (more than one row: a prompt, other layouts): nothing is launched and the caller runs
 * the nodes one by one. Same bits as those nodes' launches. With has_norm, x is rms_norm(norm.x,
 * norm.w), which the launch computes itself and never writes: each product is the dot with
 * norm.x * norm.w, scaled by 1 / rms at the end (close to the separate norm, not the same bits);
 * layer norms are not taken (*launched = 0). 0, or -1 with err.
 */
#define GP_CU_MAX_GROUP 4
typedef struct {
    int n;
    int glu;
    gp_cu_tensor x;
    gp_cu_tensor w[GP_CU_MAX_GROUP];
    int tb[GP_CU_MAX_GROUP];
    gp_cu_tensor out[GP_CU_MAX_GROUP];
    int has_norm;
    gp_cu_prenorm norm;
} gp_cu_group;

int gp_cuda_matvec_group(gp_cu_ctx *ctx, const gp_cu_group *g, int *launched);

/* Two store nodes with the same positions in one launch (the K and V cache writes of a layer):
 * in0 and in1 are each store's inputs (dst, pos, src), as gp_cuda_compute takes them. Both srcs
 * must have the same rows. ring: both stores are rings (store's attribute ring: row pos % S of
 * each dst). 0, or -1 with err. */
int gp_cuda_store2(gp_cu_ctx *ctx, const gp_cu_tensor *in0, const gp_cu_tensor *in1, int ring);

/* argmax (GP_OP_ARGMAX, as gp_cuda_compute) whose kernel also writes each value of x as it reads
 * it to x_copy, at x's byte offsets: f32 x; x_copy and out's data may be any memory the device
 * writes, such as mapped host memory (the CUDA backend's "copies": GPT-2's logits and next reach
 * the host with no copy after the kernel). 0, or -1 with err. */
int gp_cuda_argmax_copy(gp_cu_ctx *ctx, const gp_cu_tensor *out, const gp_cu_tensor *x,
                        void *x_copy);

/* Two lookups and their sum in one launch (GPT-2's token and position embeddings): out [T, C] =
 * t1[ids1[t]] + t2[ids2[t]], tables [V, C] of any dtype, ids i32 (T elements at least), the sum
 * in f32 as get_rows into f32 rows then add would give it; a row whose id is out of range in
 * either table is left unwritten. 0, or -1 with err. */
int gp_cuda_get_rows_add(gp_cu_ctx *ctx, const gp_cu_tensor *out, const gp_cu_tensor *t1,
                         const gp_cu_tensor *ids1, const gp_cu_tensor *t2,
                         const gp_cu_tensor *ids2);

/* A rope (GP_OP_ROPE) applied inside a fused kernel, with the rope node's attributes. */
typedef struct {
    int on;          /* 0: none (the tensor is read as it is) */
    int interleaved; /* mode 1: pairs (2i, 2i + 1); else (i, i + n/2) */
    int64_t n;       /* rotated dims: even, <= D */
    double theta;
    gp_dtype dtype;  /* the rope's output dtype: each result is rounded to it */
    /* Scaling of the frequencies (the rope node's scaling and factor; ir/core.h, gp_rope_freq):
     * orig_len GP_ROPE_LINEAR, every frequency divided by factor; orig_len > 0, Llama 3's:
     * original_max_position_embeddings, factor, low and high_freq_factor; orig_len 0: unscaled. */
    int64_t orig_len;
    double factor;
    float low, high;
    /* the rope's freq_factors input (f32 [n / 2], element i at ff + i ff_nb; NULL: none), each
     * pair's frequency divided by its factor; mscale: LongRoPE's attention factor on the cosines
     * and sines (else 1) */
    const char *ff;
    int64_t ff_nb;
    float mscale;
} gp_cu_rope;

/* The rope node's attributes as a gp_cu_rope (on; dtype: the output's). */
gp_cu_rope gp_cuda_rope_of(const gp_attrs *a, gp_dtype dtype);

/* A one-token decode attention with the K and V cache stores (and the ropes before them) inside:
 * out = attention(rope_q(q), store(k_cache, pos, rope_k(k)), store(v_cache, pos, v), pos). */
typedef struct {
    gp_cu_tensor q;       /* [1, H, D]: the query, or rope_q's input */
    gp_cu_tensor k;       /* [1, G, D]: the new key row (the store's source), or rope_k's input */
    gp_cu_tensor v;       /* [1, G, D]: the new value row */
    gp_cu_tensor k_cache; /* [S, G, D]: the stores' destinations, read as attention's k and v */
    gp_cu_tensor v_cache;
    gp_cu_tensor pos;     /* i32 [1] */
    gp_cu_rope rope_q, rope_k;
    double scale;
    int64_t window;       /* the attention's window W (rows pos - W + 1..pos); 0: all rows */
    int ring;             /* the caches are rings: position s in row s % S (the stores' ring) */
    float softcap;        /* > 0: each score (after the scale) soft-capped, c tanh(score / c) */
    int pos_const;        /* 1: no kernel of the eval writes pos (an input): it may be read before
                             the wait for the kernel before */
    const float *tab_q;   /* rope_q's angles at pos, made earlier in the eval by
                             gp_cuda_rope_tables (cos [n/2], then sin [n/2]); NULL: the kernel's
                             blocks compute them */
    const float *tab_k;   /* rope_k's likewise */
    int has_qkv;          /* 1: q, k and v are columns of qkv = norm(qkv_norm) @ qkv_w + qkv_b,
                             which the launch computes itself (gp_cuda_qkv_attention_ok); q, k
                             and v then only describe where qkv's columns are, and are not read */
    gp_cu_tensor qkv_w;   /* [K, 3 H D], 16-bit */
    gp_cu_tensor qkv_b;   /* [3 H D] */
    gp_cu_prenorm qkv_norm;
} gp_cu_decode_att;

/* A rope's angles at a position, computed once per eval for the one-token attentions that read
 * them (gp_cu_decode_att.tab_q, tab_k): out = cos [n/2], then sin [n/2], of rope's angles at pos
 * (i32 [1]), the same bits as those kernels compute. */
typedef struct {
    gp_cu_rope rope;
    gp_cu_tensor pos;
    float *out;
} gp_cu_rope_tab;

enum { GP_CU_ROPE_TABS = 4 }; /* the most tables one launch makes */

/* 1 when this device runs the one-token attention's splits as clusters of n blocks (2 <= n <=
 * GP_WS_ATTN_SPLITS), for gp_cu_ctx.att_cluster. */
int gp_cuda_attention_cluster_ok(int n);

/* Diagnostic builds (-DGPLAN_STAMPS=1): appends the mean cycles between the phases of the
 * matvec and one-token attention kernels launched so far to the file at path. Else nothing. */
void gp_cuda_stamps_dump(const char *path);

/* 1 when gp_cuda_attention_decode takes a with has_qkv set (its other fields as they would be
 * launched): the head dim is 64, no ropes, H == G, 16-bit weights, K <= 1280, clusters of 16. */
int gp_cuda_qkv_attention_ok(const gp_cu_ctx *ctx, const gp_cu_decode_att *a,
                             const gp_cu_tensor *out);

/* 1 when this device runs the [K, N] matvec's splits as clusters of up to n blocks (2 <= n <= 16),
 * for gp_cu_ctx.mv_cluster; fit (NULL, or [n + 1]) gets, for 2 <= C <= n, how many clusters of C
 * fit on the device at once (gp_cu_ctx.mv_cluster_fit). */
int gp_cuda_matvec_cluster_ok(int n, int *fit);

/* Enqueues the n <= GP_CU_ROPE_TABS tables t (one kernel); 0, or -1 with err. */
int gp_cuda_rope_tables(gp_cu_ctx *ctx, const gp_cu_rope_tab *t, int n);

/*
 * Enqueues that attention for one token (q's token dim must be 1 at the launch sizes): one kernel
 * rotates q and the new key, writes the new K and V rows into the caches at pos (rounded to their
 * dtypes, as the stores would) and attends over rows 0..pos, taking row pos from the sources; same
 * results as rope, store and attention launched one by one (up to float reassociation; the cache
 * rows bit for bit). ws: the attention node's workspace (split-KV partials). out must not overlap
 * what the kernel reads, except q at exactly out's element addresses (each head's output is
 * written after all of that head's reads). 0, or -1 with err.
 */
int gp_cuda_attention_decode(gp_cu_ctx *ctx, const gp_cu_decode_att *a, const gp_cu_tensor *out,
                             void *ws, size_t ws_size);
/* 1 when gp_cuda_attention_decode takes these operands (shapes, ropes; the token count aside). */
int gp_cuda_attention_decode_ok(const gp_cu_decode_att *a, const gp_cu_tensor *out);
/* gp_cuda_attention_decode calls enqueued in this process so far (tests: was it used). */
int64_t gp_cuda_attention_decode_count(void);
/* How many of those launches computed their q, k and v themselves (has_qkv; for tests). */
int64_t gp_cuda_qkv_attention_count(void);
/* How many ran in one block a head (k_attention_head; for tests). */
int64_t gp_cuda_attention_head_count(void);
/* Those of them that let the next kernel start at their start (gp_cu_ctx.trig_early). */
int64_t gp_cuda_attention_trig_count(void);
/* The caches' dtype (f16 or f32) when k_attention_head takes the one-token attention a into out,
 * else -1 (the context's switches aside: gp_cu_ctx.att_head): caches both f16 or both f32; q, the
 * new rows and out f32; no ropes; pos an input (pos_const); heads of at most 64 dims, an even
 * number; every row aligned for loads of two dims. */
int gp_cuda_attention_head_kv(const gp_cu_decode_att *a, const gp_cu_tensor *out);
/* The cache rows k_attention_head loads before its PDL wait, for caches of dtype kv (f16 or
 * f32): it pays up to them; past them its rows' loads are round trips after the wait, and the
 * split kernel is faster (bench/gpu-notes.md). */
int gp_cuda_attention_head_rows(int kv);
/* Prompt attentions launched as tiles (k_attention_tiles) so far, for tests. */
int64_t gp_cuda_attention_tiles_count(void);
/* Those launched on tensor cores (k_attention_mma), for tests. */
int64_t gp_cuda_attention_mma_count(void);
/* Epilogues run in one launch after a cuBLAS product (k_epilogue) so far, for tests; vec: those
 * in vectors of 4. */
int64_t gp_cuda_blas_epilogue_count(int vec);
/* One-row products whose splits added into their output with atomics (mv_add) so far, for tests. */
int64_t gp_cuda_matvec_add_count(void);
/* One-row products that took their layer norm folded (gp_cu_prenorm.fold) so far, for tests. */
int64_t gp_cuda_matvec_fold_count(void);
/* For tests, so far: which 0, one-row products that added into zeroed outputs (gp_cu_ctx.acc);
 * 1, [K, N] matvecs that staged gelu(x) (x_gelu); 2, x made gelu(x) in place instead. */
int64_t gp_cuda_matvec_acc_count(int which);
/* [K, N] matvecs launched to let the next kernel start at their start (gp_cu_ctx.trig_early) so
 * far, for tests. */
int64_t gp_cuda_matvec_trig_count(void);
/* One-row [K, N] products that added with k_matvec_kc's instance for their operands' dtypes
 * (kc_typed), one-token attentions launched as the instance for GPT-2's operands (att_kv), and
 * norms and lookups launched as the instance for their dtypes (ops_typed). */
int64_t gp_cuda_matvec_typed_count(void);
int64_t gp_cuda_attention_typed_count(void);
int64_t gp_cuda_ops_typed_count(void);
/*
 * A layer norm folded into the one-row product after it, a = layer_norm(x, w, b) times weights
 * W [K, N] (attrs as the matmul's; W as its second operand): a W = inv ((x - s) w W - (mean - s)
 * c) + d, with c_j = sum_k w_k W_kj and d_j = sum_k b_k W_kj (0 without b) fixed by the weights,
 * so that the product's kernel sums x itself while it reduces the norm's statistics, and scales
 * the sums by them at the end. Enqueues dst [2 N] (device f32) = c, then d, and returns 2 N; 0
 * when the product's kernels would not take it (not a layer norm, W not [K, N] with N
 * contiguous, K over 2048); dst NULL: nothing enqueued, the count only. -1 with ctx->err set on
 * a launch error. Allocates nothing.
 */
int64_t gp_cuda_fold(gp_cu_ctx *ctx, const gp_cu_prenorm *pre, const gp_attrs *a,
                     const gp_cu_tensor *w, float *dst);

/*
 * A LoRA branch merged into its product's weights: the product x op(W) gains (x A^T) B^T, A
 * [r, in] and B [out, r], so W += the delta with op(W) = W [in, out] (tb 0) or W^T (W [out, in],
 * tb 1). W, A and B contiguous device arrays of one dtype (f32, f16 or bf16); each element's sum
 * in f32, then rounded once to W's dtype. Enqueued on ctx->stream, not for graph capture. 0, or
 * -1 with ctx->err set.
 */
int gp_cuda_lora_merge(gp_cu_ctx *ctx, void *w, const void *a, const void *b, gp_dtype dt,
                       int64_t in, int64_t out, int64_t r, int tb);

/* Counters gp_cuda_compute may use at once (the size d_counters must have). */
#define GP_CU_COUNTERS 4096

#ifdef __cplusplus
}
#endif

#endif
