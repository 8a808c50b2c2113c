/* The in-memory plan: every tensor's region, offset and lifetime, every node, the regions' sizes and
 * the per-tensor extras layout. The contract between the planner (which builds it), the tools and
 * the runtime; library gp_plan loads, validates, writes and prints it. The file format is
 * docs/plan-format.md. The public part (gp_plan as an opaque handle, load, write, the printers,
 * backends and strategies) is <gplan/plan.h>; here the struct and what the planner and the
 * runtime share besides. */
#ifndef GP_PLAN_PLAN_H
#define GP_PLAN_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gplan/plan.h"
#include "ir/core.h"

/* The plan file's version. A loader reads any minor version of its major version (newer minors only
 * add fields at the end of records or new sections, which it skips) and refuses another major. */
#define GP_PLAN_VERSION_MAJOR 1
#define GP_PLAN_VERSION_MINOR 3 /* 1.1: tensor records end with the weight's split; 1.2: node
                                 * records end with inputs 4 and 5; 1.3: with inputs 6..9 */

/* Where a tensor's bytes live. Each region is one allocation per device made once per session. */
typedef enum {
    GP_REGION_ARENA,   /* intermediates and op workspaces, reused over the eval by liveness */
    GP_REGION_STATE,   /* persists across evals, zeroed once at session creation (KV cache) */
    GP_REGION_WEIGHTS, /* loaded once, read-only */
    GP_REGION_IO,      /* inputs and outputs, pinned for the whole eval */
    GP_REGION_EXTRAS,  /* the per-tensor runtime records (see GP_EXTRAS_* below); holds no tensor */
    GP_REGION_COUNT
} gp_region;

const char *gp_region_name(gp_region r); /* "arena", ... ; "?" out of range */

/*
 * Tensor extras: each tensor's runtime record has a fixed slot in the extras region, so an eval
 * allocates none (the records that llama.cpp allocated per eval and leaked, see docs/plan-format.md).
 * One record, for n = n_devices, all fields little-endian host words, native alignment:
 *   u64 data[n];             device (or host) address of element 0 on each device; 0 = none
 *   i64 ne[GP_MAX_DIMS];     shape for the current eval (symbolic dims shrunk), unused dims 1
 *   i64 nb[GP_MAX_DIMS];     strides in bytes for the current eval
 *   u64 sync[n];             one synchronization slot per device (event handle or ready counter)
 * 16 n + 64 bytes; a multiple of 16, so every record starting at a multiple of its size is aligned.
 */
#define GP_EXTRAS_DATA_OFF(n) ((int64_t)0)
#define GP_EXTRAS_NE_OFF(n) ((int64_t)8 * (n))
#define GP_EXTRAS_NB_OFF(n) ((int64_t)8 * (n) + 8 * GP_MAX_DIMS)
#define GP_EXTRAS_SYNC_OFF(n) ((int64_t)8 * (n) + 16 * GP_MAX_DIMS)
#define GP_EXTRAS_RECORD_BYTES(n) ((int64_t)16 * (n) + 16 * GP_MAX_DIMS)
#define GP_EXTRAS_ALIGNMENT 64 /* the extras region's alignment (a cache line) */

/*
 * Op workspaces, fixed here because planner and backends must agree on them: the planner reserves
 * the maximum over backends so one plan serves CPU and CUDA; a backend uses at most its own share.
 *   matmul:    CUDA: a cuBLAS workspace of GP_WS_CUBLAS_BYTES; CPU: none, except on quantized
 *              weights with a 2-dim x [M, K]: gp_quant_matmul_ws_bytes(M, K) (cpu/quant.h,
 *              the activations as bf16 halves for AMX prompts; 4 K (M rounded up to 16) bytes when
 *              M > 5: GP_QUANT_WS_MIN_M). A CPU runs with less (gp_plan_workspace_min is 0), by
 *              the f32 path.
 *   attention: CUDA: split-KV partial results for decode, used only when T <= GP_WS_ATTN_SPLIT_MAX_T:
 *              f32 [GP_WS_ATTN_SPLITS, min(T, GP_WS_ATTN_SPLIT_MAX_T), H, D + 2] (output, max, sum);
 *              CPU: per-thread scores f32 [GP_WS_CPU_MAX_THREADS, S]: a CPU backend uses at most
 *              GP_WS_CPU_MAX_THREADS threads for attention.
 *   moe:       CPU: gp_moe_ws(T, H, E, top_k, F, quantized experts).total (cpu/moe.h: the routing, the grouping and
 *              the experts' T top_k rows of x, gate, up and down, whatever the routing), all of
 *              it required; CUDA: gp_cuda_moe_ws(T, H, E, top_k, F).total (cuda/cuda_moe.h: the
 *              router's logits, the routing, the grouping with its row tiles, the T top_k rows of
 *              x (then of down) and of silu(gate) * up; never more than the CPU's), required.
 *   others:    none.
 */
#define GP_WS_CUBLAS_BYTES ((int64_t)32 << 20)
#define GP_WS_ATTN_SPLITS 16
#define GP_WS_ATTN_SPLIT_MAX_T 16
#define GP_WS_CPU_MAX_THREADS 64

/* Workspace bytes an op needs on `backend` (the GP_WS_* formulas above) at the bound shapes:
 * t, h, d from attention's q [T, H, D] and s the cache rows of its k [S, G, D]; 0 for ops that
 * need none. */
int64_t gp_workspace_bytes(gp_op op, gp_backend backend, int64_t t, int64_t h, int64_t d,
                           int64_t s);

typedef struct {
    int64_t size;      /* bytes; a multiple of alignment */
    int64_t alignment; /* every tensor placed in it starts at a multiple of this (views excepted) */
} gp_plan_region;

typedef struct {
    char *name;
    int64_t bound; /* every eval uses a size in [1, bound]; tensors are planned at the bound */
} gp_plan_sym;

typedef struct {
    char *name;
    char *weight_name;           /* weights: the checkpoint name; else NULL */
    gp_tensor_kind kind;
    gp_dtype dtype;
    int ndim;                    /* 0..GP_MAX_DIMS */
    int64_t dims[GP_MAX_DIMS];   /* [ndim], outermost first, at the bounds; unused dims are 1 */
    int sym[GP_MAX_DIMS];        /* [ndim] symbolic dim index per dim, or -1; unused dims -1 */
    int64_t stride[GP_MAX_DIMS]; /* [ndim] in elements, at the bounds; unused dims 0 */
    gp_region region;            /* views: their root's region */
    int64_t offset;              /* bytes from the start of the region (views: root offset + window) */
    int64_t size;                /* bytes spanned from offset at the bounds */
    int view_src;                /* views: the tensor viewed (maybe a view itself); else -1 */
    int64_t view_offset;         /* views: byte offset into view_src's storage; else 0 */
    int inplace_of;              /* written into this tensor's storage (in-place op); else -1 */
    int producer;                /* node computing it, or -1 */
    int first, last;             /* steps (node indices) during which its bytes must be kept */
    int64_t extras_offset;       /* its record in the extras region */
    int line, col;               /* where the graph source defines it; 0 when unknown */
    gp_split split;              /* weights of a tensor-parallel plan: how each device's share is
                                    cut from the checkpoint tensor (ir/core.h); else groups = 0 */
} gp_plan_tensor;

typedef struct {
    gp_op op;
    int n_inputs;
    int inputs[GP_MAX_INPUTS]; /* [n_inputs] tensor ids; unused -1 */
    int output;                /* tensor id */
    int workspace;             /* tensor id of its workspace (arena, live at this step only), or -1 */
    gp_attrs attrs;
    int line, col;             /* source location of the statement that made it; 0 when unknown */
} gp_plan_node;

struct gp_plan {
    int version_major, version_minor; /* of the file it was loaded from (the current when built) */
    char *graph_name;
    char *source;          /* the graph source file name; "" when unknown */
    int n_devices;         /* extras records hold this many data pointers and sync slots */
    int strategy;          /* the gp_strategy used for the arena (an int: the loader checks it) */
    char *method;          /* what produced the arena offsets, e.g. "greedy-size" */
    double plan_seconds;   /* time spent planning */
    int64_t lower_bound;   /* the arena's lower bound: most aligned bytes alive at one step */
    int64_t naive_bytes;   /* sum of all intermediate sizes (aligned): the arena with no reuse */
    gp_plan_region regions[GP_REGION_COUNT];
    gp_plan_sym *syms;     /* [n_syms] */
    int n_syms;
    gp_plan_tensor *tensors; /* [n_tensors]: the graph's tensors by id, then the workspaces */
    int n_tensors;
    gp_plan_node *nodes;   /* [n_nodes] in schedule order: node i runs at step i */
    int n_nodes;
};

/* The least workspace a backend can run node i with: all of gp_workspace_bytes on CUDA; on the CPU,
 * attention's scores for one thread (it then uses as many threads as the workspace holds). */
int64_t gp_plan_workspace_min(const gp_plan *p, int i, gp_backend backend);

/* 0 when every node's planned workspace is at least gp_plan_workspace_min for backend; else -1
 * and a message naming the node, the op, the bytes planned and needed, in err. */
int gp_plan_check_workspaces(const gp_plan *p, gp_backend backend, char *err, size_t err_len);

/* The plan file's CRC-32 (zlib's) of n bytes at p continued from crc (0 to start), for the writer
 * and the loader; fed to zlib in pieces, as its crc32 takes a uInt length. */
uint32_t gp_plan_crc(uint32_t crc, const unsigned char *p, size_t n);

/* The semantic checks the loader runs after parsing, for a plan built in memory too: references in
 * range, regions, offsets, alignment, shapes, views. 0 when valid, else -1 and the reason in why. */
int gp_plan_validate(const gp_plan *p, char *why, size_t why_len);

/* Bytes spanned by a tensor's elements from its first: (1 + sum (dims[d] - 1) * stride[d]) * dtype
 * size, at the bounds; -1 when a dim or stride is out of range or the result overflows. */
int64_t gp_plan_tensor_span(const gp_plan_tensor *t);

/* Allocates a zeroed plan with room for the given counts (used by the loader and the planner);
 * NULL when out of memory. */
gp_plan *gp_plan_alloc(int n_syms, int n_tensors, int n_nodes);

/* 1 when tensor i is its producer's workspace. */
int gp_plan_is_workspace(const gp_plan *p, int i);

/* Bytes of zeros in device's shares of the split weights (their units past the checkpoint's
 * last); 0 for a plan of one device. */
int64_t gp_plan_split_padding(const gp_plan *p, int device);

/* LoRA adapters' names, shared by the graphs compiled with -D lora_r=R, the merge graph
 * (planner/lora_merge.c) and the runtime (runtime/lora.c). PEFT's names:
 * "base_model.model.<module>.lora_A.weight" [r, in], ".lora_B.weight" [out, r]; the base weight is
 * "<module>.weight". The merge plan's scalar input is GP_LORA_SCALE_INPUT f32 [1]. */
#define GP_LORA_PREFIX "base_model.model."
#define GP_LORA_A_SUFFIX ".lora_A.weight"
#define GP_LORA_B_SUFFIX ".lora_B.weight"
#define GP_LORA_SCALE_INPUT "lora_scale"

/* 1 when a checkpoint name is a runtime adapter slot's: base_model.model.*.lora_{A,B}.weight. */
int gp_lora_is_slot(const char *weight_name);

/* File layout constants shared by the writer (plan/plan_write.c) and the loader; each field is
 * described in docs/plan-format.md. */
#define GP_PLAN_MAGIC "GPLAN\0"           /* 6 bytes */
#define GP_PLAN_TRIPWIRE "\r\n\x1a\n"      /* 4 bytes: CR LF, DOS EOF, LF, as PNG's signature */
#define GP_PLAN_SENTINEL_U32 0x01020304u
#define GP_PLAN_SENTINEL_U64 0x0102030405060708ull
#define GP_PLAN_SENTINEL_F64 1234.5
#define GP_PLAN_HEADER_BYTES 64
#define GP_PLAN_SECTION_ENTRY_BYTES 24
#define GP_PLAN_STR_NONE 0xFFFFFFFFu /* a string reference to nothing (a tensor with no weight name) */
enum {
    GP_PLAN_SEC_STRINGS = 1,
    GP_PLAN_SEC_META = 2,
    GP_PLAN_SEC_REGIONS = 3,
    GP_PLAN_SEC_SYMS = 4,
    GP_PLAN_SEC_TENSORS = 5,
    GP_PLAN_SEC_NODES = 6,
};
#define GP_PLAN_META_BYTES 48    /* the META section's fixed part */
#define GP_PLAN_REGION_BYTES 16  /* one record of each record section (version 1.0) */
#define GP_PLAN_SYM_BYTES 16
#define GP_PLAN_TENSOR_BYTES 176 /* 152 in version 1.0, which had no split */
#define GP_PLAN_TENSOR_BYTES_1_0 152
#define GP_PLAN_NODE_BYTES 112   /* 96 before version 1.3 (six inputs), 88 before 1.2 (four) */
#define GP_PLAN_NODE_BYTES_1_2 96
#define GP_PLAN_NODE_BYTES_1_1 88
#define GP_PLAN_FATTRS 2         /* a node record's f64 attributes: gp_attrs.f[0..1] */

/* A node record's attribute fields (iattr, fattr) from gp_attrs and back. The two float32
 * attributes f[2] and f[3] (ir/core.h, gp_attrs) of an op that has them are bits 0..31 and 32..63
 * of iattr[3]; every other field is the slot of the same index. */
void gp_plan_attrs_encode(gp_op op, const gp_attrs *a, int64_t iattr[GP_MAX_IATTRS],
                          double fattr[GP_PLAN_FATTRS]);
void gp_plan_attrs_decode(gp_op op, const int64_t iattr[GP_MAX_IATTRS],
                          const double fattr[GP_PLAN_FATTRS], gp_attrs *a);

#endif
