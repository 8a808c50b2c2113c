/* The definitions shared by compiler and runtime: dtypes, tensor kinds and the op set.
 * The runtime links only this part of ir/ (library gp_core), never the graph builder. */
#ifndef GP_IR_CORE_H
#define GP_IR_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "gplan/gplan_types.h"

#define GP_MAX_INPUTS 10
#define GP_MAX_IATTRS 4
#define GP_MAX_FATTRS 4

/* Always-on invariant check: prints file:line and the expression, then aborts. */
#define GP_ASSERT(cond)                                                                   \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            fprintf(stderr, "%s:%d: GP_ASSERT(%s) failed\n", __FILE__, __LINE__, #cond); \
            abort();                                                                      \
        }                                                                                 \
    } while (0)

/* Formats a message into err[n] (a caller's error buffer); nothing when err is NULL or n is 0. */
void gp_errf(char *err, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A loader's one message form, "PATH: bad WHAT (REASON)" ("x.gguf: bad GGUF file (...)"), REASON
 * from fmt, into err[n] as gp_errf does. Returns -1, for `return gp_err_bad(...)`. */
int gp_err_bad(char *err, size_t n, const char *path, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Reads the rest of f into a fresh buffer (the caller frees) of *len bytes and a NUL after them, in
 * chunks, so a file of any size (or a pipe) is read without trusting its length. NULL when out of
 * memory; the caller asks ferror(f) whether a read failed. */
char *gp_read_stream(FILE *f, size_t *len);

/* gp_dtype (the element types) and GP_MAX_DIMS are public: include/gplan/gplan_types.h. */

/* The dtypes, a row each: the enum, its name, bytes of an element (0 for a block format),
 * elements and bytes of a block, and its ggml type id in GGUF files. Every per-dtype table,
 * dispatch and reader is made from it: gp_dtype_* here, GP_QUANT_DTYPES, the GGUF reader's ids,
 * the kernels' constant block sizes. Layouts: gplan_types.h, cpu/quant.h. */
#define GP_DTYPE_TABLE(X)                                                                      \
    X(GP_F32, "f32", 4, 1, 4, 0)                                                               \
    X(GP_F16, "f16", 2, 1, 2, 1)                                                               \
    X(GP_BF16, "bf16", 2, 1, 2, 30)                                                            \
    X(GP_I32, "i32", 4, 1, 4, 26)                                                              \
    GP_QUANT_DTYPES(X)
/* The block-quantized rows, for code that instantiates a kernel per type:
 * switch (t) { GP_QUANT_DTYPES(CASE) default: ... } with CASE(T, ...) expanding to `case T: ...`. */
#define GP_QUANT_DTYPES(X)                                                                     \
    X(GP_Q4_0, "q4_0", 0, 32, 2 + 16, 2)                                                       \
    X(GP_Q4_1, "q4_1", 0, 32, 2 + 2 + 16, 3)                                                   \
    X(GP_Q5_0, "q5_0", 0, 32, 2 + 4 + 16, 6)                                                   \
    X(GP_Q5_1, "q5_1", 0, 32, 2 + 2 + 4 + 16, 7)                                               \
    X(GP_Q8_0, "q8_0", 0, 32, 2 + 32, 8)                                                       \
    X(GP_Q4_K, "q4_k", 0, 256, 2 + 2 + 12 + 128, 12)                                           \
    X(GP_Q5_K, "q5_k", 0, 256, 2 + 2 + 12 + 32 + 128, 13)                                      \
    X(GP_Q6_K, "q6_k", 0, 256, 128 + 64 + 16 + 2, 14)

/* Bytes of one element; 0 for the block-quantized dtypes (use gp_dtype_row_bytes). */
size_t gp_dtype_size(gp_dtype t);
/* Elements per block (1 for f32/f16/bf16/i32) and bytes per block. */
int gp_dtype_block(gp_dtype t);
size_t gp_dtype_block_bytes(gp_dtype t);
int gp_dtype_is_quant(gp_dtype t);
/* The same as constant expressions (kernels specialised per dtype fold them; CUDA's enums and
 * templates take them): elements and bytes of a block, 0 for no dtype. */
#ifdef __CUDACC__
#define GP_DTYPE_CONST __host__ __device__ constexpr inline
#else
#define GP_DTYPE_CONST static inline
#endif
#define GP_DTYPE_BLOCK_CASE_(T, name, size, block, bytes, ggml) case T: return block;
#define GP_DTYPE_BYTES_CASE_(T, name, size, block, bytes, ggml) case T: return bytes;
GP_DTYPE_CONST int gp_dtype_block_c(int t)
{
    switch (t) { GP_DTYPE_TABLE(GP_DTYPE_BLOCK_CASE_) default: return 0; }
}
GP_DTYPE_CONST int gp_dtype_bytes_c(int t)
{
    switch (t) { GP_DTYPE_TABLE(GP_DTYPE_BYTES_CASE_) default: return 0; }
}
/* The dtype of a ggml type id, or -1 when gplan has none. */
int gp_dtype_from_ggml(uint32_t ggml_type);
/* Bytes of n elements: n * size, or n / block * block_bytes; 0 when n is not a whole number of
 * blocks (callers check gp_dtype_block first and report a located error). */
size_t gp_dtype_row_bytes(gp_dtype t, int64_t n);
const char *gp_dtype_name(gp_dtype t);
int gp_dtype_from_name(const char *name, gp_dtype *out); /* 0 on success, -1 unknown */

typedef enum {
    GP_TENSOR_INPUT,        /* set by the caller before each eval (token ids, positions) */
    GP_TENSOR_OUTPUT,       /* read by the caller after each eval (logits) */
    GP_TENSOR_WEIGHT,       /* loaded once from a checkpoint, read-only */
    GP_TENSOR_STATE,        /* persists across evals, zeroed at session creation (KV cache) */
    GP_TENSOR_INTERMEDIATE, /* lives in the scratch arena for part of one eval */
    GP_TENSOR_VIEW,         /* a window into another tensor's storage (offset + strides) */
    GP_TENSOR_KIND_COUNT
} gp_tensor_kind;

const char *gp_tensor_kind_name(gp_tensor_kind k);

/*
 * The op set. Shapes are written outermost first, as in PyTorch: [T, C] is T rows of C elements.
 * "..." is any number of leading dims. Unless stated otherwise an op computes in f32, reads inputs of
 * any float dtype, and its output dtype is that of input 0. An op's attributes (gp_attrs) are named
 * in GP_OP_ATTRS below, which says what each one holds; the comments here use those names.
 * INPLACE names the input whose storage the output may take over when that input dies at this op.
 */
typedef enum {
    GP_OP_NONE,
    /* get_rows(table [V, C], ids i32[T]) -> f32[T, C]: embedding lookup, row ids[t] of table. */
    GP_OP_GET_ROWS,
    /* add/sub/mul/div(a, b) -> broadcast(a, b): numpy broadcasting, dims aligned right.
     * INPLACE a when the output shape equals a's. */
    GP_OP_ADD,
    GP_OP_SUB,
    GP_OP_MUL,
    GP_OP_DIV,
    /* scale(x) -> x * s, or soft-capped: c tanh(x s / c) (Gemma 2's logits; the language's
     * softcap(x, c)). INPLACE x. */
    GP_OP_SCALE,
    /* matmul(a [..., M, K], b [..., K, N]) -> f32[..., M, N], either transposed (ta, tb). Batch
     * dims broadcast. */
    GP_OP_MATMUL,
    /* layer_norm(x [..., C], w [C], b [C]) -> [..., C]; b is optional. INPLACE x. */
    GP_OP_LAYER_NORM,
    /* rms_norm(x [..., C], w [C]) -> [..., C], the weight w + offset. INPLACE x. */
    GP_OP_RMS_NORM,
    /* softmax(x [..., T, S]) over the last dim of x * scale, causal or not. INPLACE x. */
    GP_OP_SOFTMAX,
    /* gelu(x): tanh approximation, as GPT-2's gelu_new. INPLACE x. */
    GP_OP_GELU,
    /* gelu_erf(x): 0.5 x (1 + erf(x / sqrt 2)). INPLACE x. */
    GP_OP_GELU_ERF,
    /* silu(x) = x * sigmoid(x). INPLACE x. */
    GP_OP_SILU,
    /* swiglu(gate, up) = silu(gate) * up, same shapes. INPLACE gate. */
    GP_OP_SWIGLU,
    /* rope(x [T, H, D], pos i32[T][, freq_factors]) -> [T, H, D]: rotary embedding at pos of the
     * first n of D dims (the rest pass through), pair j at frequency gp_rope_freq (theta and the
     * scaling). Optional input 2, freq_factors f32[n/2] (llama.cpp's rope_freqs tensor; LongRoPE's
     * short or long factors): the frequency of pair j, scaled or not, is divided by
     * freq_factors[j]. INPLACE x. */
    GP_OP_ROPE,
    /* Views: the output is a GP_TENSOR_VIEW of input 0 (no data moves).
     * reshape(x, dims...) requires x contiguous; the output tensor holds the new shape. */
    GP_OP_RESHAPE,
    /* permute(x, axes...): output dim k is input dim axes[k]. transpose is permute of the last
     * two. */
    GP_OP_PERMUTE,
    /* slice(x) along axis; index(x, l) is slice + drop of axis 0. */
    GP_OP_SLICE,
    /* view(x): the output tensor's shape and strides at a byte offset within x. */
    GP_OP_VIEW,
    /* cont(x) -> contiguous copy of x (of a view, usually). */
    GP_OP_CONT,
    /* cast(x) -> x converted to the output tensor's dtype. */
    GP_OP_CAST,
    /* concat(a, b) along axis; all other dims equal; dtype of a. */
    GP_OP_CONCAT,
    /* store(dst [S, ...], pos i32[T], src [T, ...]) -> view of dst: dst[pos[t]] = src[t] (converted to
     * dst's dtype), or dst[pos[t] % S] in a ring. The output is a new name for the updated dst, so
     * readers come after the write. */
    GP_OP_STORE,
    /* attention(q [T, H, D], k [S, G, D], v [S, G, D], pos i32[T]) -> f32[T, H, D]: causal
     * scaled-dot-product attention over a KV cache: query t attends to cache rows 0..pos[t], or
     * the last window of them. H % G == 0 (grouped-query: head h reads KV head h / (H / G)).
     * With inputs 4 and 5, seq i32[T] and blocks i32[N, M] (a ragged batch over a pool of KV
     * blocks of `block` rows): query t belongs to sequence seq[t], whose position j is cache row
     * blocks[seq[t], j / block] * block + j % block; positions run to M * block. With `sinks`,
     * input 4 is sinks f32[H] instead: head h's softmax over its scores s has the extra term
     * exp(sinks[h]) in its denominator (and its max), weighting no value row. */
    GP_OP_ATTENTION,
    /* all_reduce(x [, y]) -> x summed over the devices of a tensor-parallel plan (every device
     * gets the same sum, added in device order), plus y once when given: y is the same on every
     * device (the residual stream), device 0 adds it to its term. x + y on one device. INPLACE x. */
    GP_OP_ALL_REDUCE,
    /* argmax(x [..., N]) -> i32[...]: the index of the largest element of each row, the first one
     * on ties; NaN is never the largest (a row of NaN only gives 0). For greedy decoding on the
     * device: a few bytes to read back instead of the row. */
    GP_OP_ARGMAX,
    /* moe(x f32[T, H], router [E, H], gate [E, F, H], up [E, F, H], down [E, H, F]
     * [, router_bias [E], gate_bias [E, F], up_bias [E, F], down_bias [E, H]]) -> f32[T, H]:
     * routed experts (a mixture-of-experts MLP). Each token's router logits x W_r^T (+ router_bias)
     * pick top_k of the E experts with weights by the NORM rule (GP_MOE_*); the output is the sum
     * over the chosen experts e of w_e down_e(act(gate_e x, up_e x)), the experts taken in
     * ascending order, each product plus its bias when the four biases (inputs 5..8, all or
     * none; gpt-oss) are given. gate, up and down hold every expert's Linear weight ([out, in],
     * llama.cpp's merged ffn_*_exps tensors; float weights may be strided views, as of Hugging
     * Face gpt-oss's fused gate_up_proj). Top-k ties go to the lower expert index. */
    GP_OP_MOE,
    GP_OP_COUNT
} gp_op;

/*
 * Every op's attributes: the one place that says which slot of gp_attrs holds what.
 * X(OP, KIND, SLOT, NAME, "label", SHOW): attribute GP_<OP>_<NAME> of GP_OP_<OP> is
 * gp_attrs.i[SLOT] (KIND I) or gp_attrs.f[SLOT] (KIND F). "label" names it in printed IR and
 * messages. SHOW says when the IR printer shows it: ALWAYS, NONZERO, or DIMS (one value per
 * output dim from SLOT on, shown as a tuple). An op's entries are consecutive, in print order.
 * "0 given: v" is the default shape inference fills in.
 */
#define GP_OP_ATTRS(X)                                                                            \
    /* the factor */                                                                              \
    X(SCALE, F, 0, FACTOR, "s", ALWAYS)                                                           \
    /* c > 0: soft-capped, c tanh(x s / c); 0: none */                                            \
    X(SCALE, F, 1, SOFTCAP, "softcap", NONZERO)                                                   \
    /* 1: a transposed (a is [..., K, M]) */                                                      \
    X(MATMUL, I, 0, TA, "ta", NONZERO)                                                            \
    /* 1: b transposed (b is [..., N, K], as a torch Linear weight) */                            \
    X(MATMUL, I, 1, TB, "tb", NONZERO)                                                            \
    X(LAYER_NORM, F, 0, EPS, "eps", ALWAYS)                                                       \
    X(RMS_NORM, F, 0, EPS, "eps", ALWAYS)                                                         \
    /* added to the weight (Gemma's (1 + w): 1) */                                                \
    X(RMS_NORM, F, 1, OFFSET, "offset", NONZERO)                                                  \
    /* x's factor before the softmax (0 given: 1) */                                              \
    X(SOFTMAX, F, 0, SCALE, "scale", ALWAYS)                                                      \
    /* 1: element (t, s) is masked when s > t + S - T (the last T of S positions are new) */      \
    X(SOFTMAX, I, 0, CAUSAL, "causal", NONZERO)                                                   \
    /* 0 rotate-half (HF Llama / NeoX: pairs (j, j + n/2)), 1 interleaved (GPT-J: (2j, 2j + 1)) */ \
    X(ROPE, I, 0, MODE, "mode", ALWAYS)                                                           \
    /* n, the rotated dims: <= D, even (0 given: D) */                                            \
    X(ROPE, I, 1, N_DIMS, "n", ALWAYS)                                                            \
    /* the base: pair j turns at theta^(-2j/n) unscaled (0 given: 10000) */                       \
    X(ROPE, F, 0, THETA, "theta", ALWAYS)                                                         \
    /* 0: none; L > 0: Llama 3's (rope_type "llama3"), L = original_max_position_embeddings;     \
     * GP_ROPE_LINEAR: linear (Gemma 3's global layers); GP_ROPE_LONGROPE: Phi-3's LongRoPE    \
     * (its factors are input freq_factors); GP_ROPE_YARN: YaRN (gpt-oss). gp_rope_freq has the  \
     * formulas. */                                                                               \
    X(ROPE, I, 2, SCALING, "scaling", NONZERO)                                                    \
    /* llama3, linear and yarn: the factor the frequencies are divided by; longrope: attn_factor, \
     * on the cosines and sines */                                                                \
    X(ROPE, F, 1, FACTOR, "factor", NONZERO)                                                      \
    /* llama3's low_freq_factor and high_freq_factor, float32 values (0 < low < high); yarn's   \
     * correction range, the pairs low..high where the ramp runs (0 <= low < high) */            \
    X(ROPE, F, 2, LOW_FACTOR, "low", NONZERO)                                                     \
    X(ROPE, F, 3, HIGH_FACTOR, "high", NONZERO)                                                   \
    /* output dim k is input dim axes[k] */                                                       \
    X(PERMUTE, I, 0, AXES, "axes", DIMS)                                                          \
    X(SLICE, I, 0, AXIS, "axis", ALWAYS)                                                          \
    X(SLICE, I, 1, START, "start", ALWAYS)                                                        \
    X(SLICE, I, 2, LEN, "len", ALWAYS)                                                            \
    /* in bytes */                                                                                \
    X(VIEW, I, 0, OFFSET, "offset", ALWAYS)                                                       \
    X(CONCAT, I, 0, AXIS, "axis", ALWAYS)                                                         \
    /* 1: dst is a ring, dst[pos[t] % S] (a sliding-window layer's KV cache of S rows; t        \
     * ascending, so the latest position wins a row) */                                           \
    X(STORE, I, 0, RING, "ring", NONZERO)                                                         \
    /* of the scores (0 given: 1/sqrt(D)) */                                                      \
    X(ATTENTION, F, 0, SCALE, "scale", ALWAYS)                                                    \
    /* W > 0: sliding-window attention (Mistral), rows max(0, pos[t] - W + 1)..pos[t]; 0: all */  \
    X(ATTENTION, I, 0, WINDOW, "window", NONZERO)                                                 \
    /* 1: position s is cache row s % S (store's ring); needs 0 < W and W + T - 1 <= S, so      \
     * that storing the T new rows keeps every row a query of this eval reads */                  \
    X(ATTENTION, I, 1, RING, "ring", NONZERO)                                                     \
    /* c > 0 soft-caps the scores after the scale: c tanh(score / c) (Gemma 2) */                 \
    X(ATTENTION, F, 1, SOFTCAP, "softcap", NONZERO)                                               \
    /* rows of a KV block when inputs seq and blocks are given (a ragged batch); 0: none */       \
    X(ATTENTION, I, 2, BLOCK, "block", NONZERO)                                                   \
    /* 1: input 4 is sinks f32[H], a logit of each head's own that joins its softmax's          \
     * denominator only (gpt-oss's learned sinks); not with a ragged batch */                     \
    X(ATTENTION, I, 3, SINKS, "sinks", NONZERO)                                                   \
    /* k: the experts each token runs, 1 <= k <= min(E, GP_MOE_MAX_K) */                          \
    X(MOE, I, 0, TOP_K, "top_k", ALWAYS)                                                          \
    /* the weights of the k: GP_MOE_SOFTMAX, GP_MOE_SOFTMAX_NORM or GP_MOE_TOPK_SOFTMAX */        \
    X(MOE, I, 1, NORM, "norm", ALWAYS)                                                            \
    /* the experts' activation: GP_MOE_SILU (silu(gate) * up) or GP_MOE_SWIGLU_OAI */            \
    X(MOE, I, 2, ACT, "act", NONZERO)                                                             \
    /* GP_MOE_SWIGLU_OAI's alpha (gpt-oss's swiglu_alpha, 1.702) */                               \
    X(MOE, F, 0, ALPHA, "alpha", NONZERO)                                                         \
    /* GP_MOE_SWIGLU_OAI's limit > 0 (gpt-oss's swiglu_limit, 7) */                               \
    X(MOE, F, 1, LIMIT, "limit", NONZERO)

/* The slots: GP_ROPE_MODE indexes gp_attrs.i, GP_ROPE_THETA gp_attrs.f; integer and float
 * attributes in enums of their own. */
#define GP_ATTR_SLOT_I_I(id, slot) id = slot,
#define GP_ATTR_SLOT_I_F(id, slot)
#define GP_ATTR_SLOT_F_I(id, slot)
#define GP_ATTR_SLOT_F_F(id, slot) id = slot,
#define GP_ATTR_SLOT_I(op, kind, slot, name, label, show) \
    GP_ATTR_SLOT_I_##kind(GP_##op##_##name, slot)
#define GP_ATTR_SLOT_F(op, kind, slot, name, label, show) \
    GP_ATTR_SLOT_F_##kind(GP_##op##_##name, slot)
typedef enum { GP_OP_ATTRS(GP_ATTR_SLOT_I) } gp_iattr;
typedef enum { GP_OP_ATTRS(GP_ATTR_SLOT_F) } gp_fattr;

/* moe's NORM: how the k chosen experts are weighted from the router logits l [E].
 * SOFTMAX: p = softmax(l) over all E, the k largest p as they are (Qwen3-MoE with
 * norm_topk_prob false). SOFTMAX_NORM: the same k p divided by their sum (Qwen3-MoE's
 * norm_topk_prob, Mixtral: transformers computes both so). TOPK_SOFTMAX: the k largest l, then
 * softmax over those k (the same values as SOFTMAX_NORM up to rounding; gpt-oss's order). */
enum { GP_MOE_SOFTMAX = 0, GP_MOE_SOFTMAX_NORM = 1, GP_MOE_TOPK_SOFTMAX = 2, GP_MOE_NORM_COUNT };
/* The most experts a token may run (kernels keep a token's k on the stack). */
#define GP_MOE_MAX_K 64
/* moe's ACT on an expert's gate g and up u (each with its bias when the moe has biases):
 * SILU: silu(g) * u. SWIGLU_OAI (gpt-oss's clamped SwiGLU, transformers' GptOssExperts):
 * g' = min(g, limit), u' = clamp(u, -limit, limit), (u' + 1) g' sigmoid(alpha g'). */
enum { GP_MOE_SILU = 0, GP_MOE_SWIGLU_OAI = 1, GP_MOE_ACT_COUNT };

/* rope's scaling for linear frequency scaling, LongRoPE and YaRN; > 0 is llama3's, 0 none. */
#define GP_ROPE_LINEAR (-1)
#define GP_ROPE_LONGROPE (-2)
#define GP_ROPE_YARN (-3)

/* How a weight of a tensor-parallel graph is cut from its checkpoint tensor (docs/language.md,
 * "Several devices"). The checkpoint's dim `dim` (`full` elements) is `groups` equal blocks of
 * units of `unit` elements; each block's n units are dealt out in order, cdiv(n, devices) to a
 * device, the last device's share padded with zeros. The tensor's own shape is one device's. */
typedef struct {
    int groups;   /* 0: not split (the whole checkpoint tensor on every device) */
    int dim;
    int64_t unit;
    int64_t full; /* the checkpoint's size of `dim` */
} gp_split;

/* An op's attributes, read by name: a->i[GP_ROPE_MODE], a->f[GP_ROPE_THETA] (GP_OP_ATTRS).
 * f[2] and f[3] hold float32 values: a plan file keeps them as two float32 bit patterns in i[3]'s
 * place, so an op that has them leaves i[3] unused (docs/plan-format.md, nodes). */
typedef struct {
    int64_t i[GP_MAX_IATTRS];
    double f[GP_MAX_FATTRS];
} gp_attrs;

typedef struct {
    const char *name;     /* as written in the graph language */
    int min_inputs, max_inputs;
    int inplace;          /* index of the input the output may overwrite, or -1 */
    int is_view;          /* output aliases input 0's storage */
} gp_op_info;

const gp_op_info *gp_op_get(gp_op op); /* NULL for an op out of range */

/* What a backend launches nothing for: GP_OP_NONE and the views that only describe input 0's
 * storage anew (reshape, permute, slice, view; a store, also is_view, writes its cache). */
static inline int gp_op_computes_nothing(gp_op op)
{
    return op == GP_OP_NONE || op == GP_OP_RESHAPE || op == GP_OP_PERMUTE || op == GP_OP_SLICE ||
           op == GP_OP_VIEW;
}
int gp_op_from_name(const char *name, gp_op *out); /* 0 on success, -1 unknown */

typedef enum { GP_ATTR_I, GP_ATTR_F } gp_attr_kind;     /* gp_attrs.i or gp_attrs.f */
typedef enum { GP_ATTR_ALWAYS, GP_ATTR_NONZERO, GP_ATTR_DIMS } gp_attr_show;

/* One entry of GP_OP_ATTRS. */
typedef struct {
    gp_op op;
    gp_attr_kind kind;
    int slot;          /* the first index into gp_attrs.i or .f */
    int len;           /* slots taken: 1, or GP_MAX_DIMS for GP_ATTR_DIMS */
    const char *name;  /* the label */
    gp_attr_show show;
} gp_attr_info;

/* The whole table, *n entries. */
const gp_attr_info *gp_attr_table(int *n);
/* The attributes of op in print order: *n consecutive entries of the table (0 for an op without
 * attributes or out of range). */
const gp_attr_info *gp_op_attrs(gp_op op, int *n);
/* Slots of gp_attrs.i (GP_ATTR_I) or .f (GP_ATTR_F) op uses: 1 + the highest, 0 for none. */
int gp_op_attr_slots(gp_op op, gp_attr_kind kind);
/* Prints op's attributes as ` label=value` pairs, by the table's SHOW (out_ndim: the output's dims,
 * for GP_ATTR_DIMS). */
void gp_attrs_print(gp_op op, const gp_attrs *a, int out_ndim, FILE *out);

/* 0 when rope's scaling attributes are usable (none, linear with a finite factor > 0, longrope
 * with a finite attn_factor > 0, llama3 with factor > 0, finite factors, 0 < low < high, or
 * yarn with factor > 0 and a finite range 0 <= low < high); else -1 with a message in err. */
int gp_rope_check_scaling(const gp_attrs *a, char *err, size_t n);
/* The frequency of rotary pair j of n rotated dims (radians per position), scaling included
 * (not freq_factors, an input; LongRoPE's is the unscaled frequency). Unscaled and LongRoPE's:
 * freq = theta^(-2j/n). Linear: freq / factor. Llama 3's, with L its scaling, low and high:
 * wavelength w = 2 pi / freq; w < L / high keeps freq, w > L / low divides it by factor, and
 * between them s = (L / w - low) / (high - low) mixes the two: (1 - s) freq / factor + s freq.
 * YaRN (transformers' _compute_yarn_parameters): with r = clamp((j - low) / (high - low), 0, 1)
 * (low and high float32, the ramp in float32 as transformers'), freq / factor * r + freq (1 - r):
 * pairs below low keep freq, pairs past high are divided by factor. low and high are the
 * correction range, found when the graph is lowered (gp_rope_yarn_range). */
double gp_rope_freq(const gp_attrs *a, int64_t j, int64_t n);
/* The factor on rope's cosines and sines: LongRoPE's attn_factor; YaRN's attention factor
 * 0.1 ln(factor) + 1 (1 when factor <= 1: transformers' default, without mscale or
 * attention_factor); else 1. */
float gp_rope_cos_factor(const gp_attrs *a);
/* YaRN's correction range for n rotated dims of base theta, original context L, beta_fast and
 * beta_slow: low and high = n ln(L / (beta 2 pi)) / (2 ln theta) for beta_fast and beta_slow,
 * floored and ceiled when truncate, then low at least 0 and high at most n - 1; high 0.001 past
 * low when they meet (transformers' find_correction_range and linear_ramp_factor). */
void gp_rope_yarn_range(int64_t n, double theta, double L, double beta_fast, double beta_slow,
                        int truncate, double *low, double *high);
#endif
