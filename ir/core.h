/* The definitions shared by compiler and runtime: dtypes, tensor kinds and the op set.
 * The runtime links only this part of ir/ (library gp_core), never the graph builder. */
#ifndef GP_IR_CORE_H
#define GP_IR_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "gplan/gplan_types.h"

#define GP_MAX_INPUTS 4
#define GP_MAX_IATTRS 4
#define GP_MAX_FATTRS 2

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

/* gp_dtype (the element types) and GP_MAX_DIMS are public: include/gplan/gplan_types.h. */

/* Bytes of one element; 0 for the block-quantized dtypes (use gp_dtype_row_bytes). */
size_t gp_dtype_size(gp_dtype t);
/* Elements per block (1 for f32/f16/bf16/i32) and bytes per block. */
int gp_dtype_block(gp_dtype t);
size_t gp_dtype_block_bytes(gp_dtype t);
int gp_dtype_is_quant(gp_dtype t);
/* Every block-quantized dtype, for code that instantiates a kernel per type:
 * switch (t) { GP_QUANT_DTYPES(CASE) default: ... } with CASE(T) expanding to `case T: ...`. */
#define GP_QUANT_DTYPES(X) X(GP_Q4_0) X(GP_Q4_1) X(GP_Q5_0) X(GP_Q5_1) X(GP_Q8_0) X(GP_Q4_K) X(GP_Q5_K) X(GP_Q6_K)
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
 * any float dtype, and its output dtype is that of input 0. Attributes live in gp_attrs: i[] and f[].
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
    /* scale(x) -> x * f[0]; with f[1] = c > 0, soft-capped: c tanh(x f[0] / c) (Gemma 2's logits;
     * the language's softcap(x, c)). INPLACE x. */
    GP_OP_SCALE,
    /* matmul(a [..., M, K], b [..., K, N]) -> f32[..., M, N]. i[0]: a transposed (a is [..., K, M]),
     * i[1]: b transposed (b is [..., N, K], as a torch Linear weight). Batch dims broadcast. */
    GP_OP_MATMUL,
    /* layer_norm(x [..., C], w [C], b [C]) -> [..., C]; f[0] = eps; b is optional. INPLACE x. */
    GP_OP_LAYER_NORM,
    /* rms_norm(x [..., C], w [C]) -> [..., C]; f[0] = eps, f[1] = offset added to w (Gemma's
     * (1 + w): 1). INPLACE x. */
    GP_OP_RMS_NORM,
    /* softmax(x [..., T, S]) over the last dim of x * f[0] (scale, default 1). i[0] = causal: element
     * (t, s) is masked when s > t + S - T (the last T of S positions are the new tokens). INPLACE x. */
    GP_OP_SOFTMAX,
    /* gelu(x): tanh approximation, as GPT-2's gelu_new. INPLACE x. */
    GP_OP_GELU,
    /* gelu_erf(x): 0.5 x (1 + erf(x / sqrt 2)). INPLACE x. */
    GP_OP_GELU_ERF,
    /* silu(x) = x * sigmoid(x). INPLACE x. */
    GP_OP_SILU,
    /* swiglu(gate, up) = silu(gate) * up, same shapes. INPLACE gate. */
    GP_OP_SWIGLU,
    /* rope(x [T, H, D], pos i32[T][, freq_factors]) -> [T, H, D]: rotary embedding at pos.
     * i[0] = mode: 0 rotate-half (HF Llama / NeoX: pairs (j, j + n/2)), 1 interleaved (GPT-J:
     * pairs (2j, 2j + 1)); i[1] = n, the rotated dims (<= D, even; the rest pass through);
     * f[0] = theta (base, 10000 by default). Frequency of pair j: theta^(-2j/n). INPLACE x.
     * Llama 3 scaling of the frequencies (rope_type "llama3") when i[2] > 0: i[2] =
     * original_max_position_embeddings L, f[1] = factor, i[3] = low_freq_factor and
     * high_freq_factor as two float32 bit patterns (gp_rope_factors; the plan's node record has
     * two float slots). Wavelength w = 2 pi / freq: w < L / high keeps freq, w > L / low divides
     * it by factor, and between them s = (L / w - low) / (high - low) mixes the two:
     * (1 - s) freq / factor + s freq (gp_rope_freq). i[2] = GP_ROPE_LINEAR (-1): linear scaling
     * (rope_type "linear", Gemma 3's global layers): every frequency divided by f[1] = factor.
     * i[2] = GP_ROPE_LONGROPE (-2): Phi-3's LongRoPE (rope_type "longrope"), the frequencies
     * divided by freq_factors (its short or long factors) and the cosines and sines multiplied by
     * f[1] = attn_factor. Optional input 2, freq_factors f32[n/2] (llama.cpp's rope_freqs tensor):
     * the frequency of pair j, scaled or not, is divided by freq_factors[j]. */
    GP_OP_ROPE,
    /* Views: the output is a GP_TENSOR_VIEW of input 0 (no data moves).
     * reshape(x, dims...) requires x contiguous; the output tensor holds the new shape. */
    GP_OP_RESHAPE,
    /* permute(x, axes...): output dim k is input dim i[k]. transpose is permute of the last two. */
    GP_OP_PERMUTE,
    /* slice(x): i[0] = axis, i[1] = start, i[2] = length; index(x, l) is slice + drop of axis 0. */
    GP_OP_SLICE,
    /* view(x): the output tensor's shape and strides at byte offset i[0] within x. */
    GP_OP_VIEW,
    /* cont(x) -> contiguous copy of x (of a view, usually). */
    GP_OP_CONT,
    /* cast(x) -> x converted to the output tensor's dtype. */
    GP_OP_CAST,
    /* concat(a, b) along axis i[0]; all other dims equal; dtype of a. */
    GP_OP_CONCAT,
    /* store(dst [S, ...], pos i32[T], src [T, ...]) -> view of dst: dst[pos[t]] = src[t] (converted to
     * dst's dtype). The output is a new name for the updated dst, so readers come after the write.
     * i[0] = ring: dst[pos[t] % S] (a sliding-window layer's KV cache of S rows; t ascending, so
     * the latest position wins a row). */
    GP_OP_STORE,
    /* attention(q [T, H, D], k [S, G, D], v [S, G, D], pos i32[T]) -> f32[T, H, D]: causal
     * scaled-dot-product attention over a KV cache: query t attends to cache rows 0..pos[t].
     * H % G == 0 (grouped-query: head h reads KV head h / (H / G)). f[0] = scale (1/sqrt(D) default).
     * i[0] = window W (sliding-window attention, Mistral): rows max(0, pos[t] - W + 1)..pos[t];
     * 0: all rows. f[1] = c > 0 soft-caps the scores (after the scale): c tanh(score / c) (Gemma 2).
     * i[1] = ring: position s is cache row s % S (store's ring); needs 0 < W and
     * W + T - 1 <= S, so that storing the T new rows keeps every row a query of this eval reads. */
    GP_OP_ATTENTION,
    /* all_reduce(x [, y]) -> x summed over the devices of a tensor-parallel plan (every device
     * gets the same sum, added in device order), plus y once when given: y is the same on every
     * device (the residual stream), device 0 adds it to its term. x + y on one device. INPLACE x. */
    GP_OP_ALL_REDUCE,
    /* argmax(x [..., N]) -> i32[...]: the index of the largest element of each row, the first one
     * on ties; NaN is never the largest (a row of NaN only gives 0). For greedy decoding on the
     * device: a few bytes to read back instead of the row. */
    GP_OP_ARGMAX,
    GP_OP_COUNT
} gp_op;

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

/* rope's i[2] for linear frequency scaling and for LongRoPE (GP_OP_ROPE); i[2] > 0 is llama3's,
 * 0 none. */
#define GP_ROPE_LINEAR (-1)
#define GP_ROPE_LONGROPE (-2)
/* rope's llama3 scaling factors in and out of attribute i[3] (low in bits 0..31, high in 32..63). */
int64_t gp_rope_factors_pack(float low_freq_factor, float high_freq_factor);
void gp_rope_factors(const gp_attrs *a, float *low_freq_factor, float *high_freq_factor);
/* 0 when rope's scaling attributes are usable (none, linear with a finite factor > 0, longrope
 * with a finite attn_factor > 0, or llama3 with factor > 0, finite factors, 0 < low < high);
 * else -1 with a message in err. */
int gp_rope_check_scaling(const gp_attrs *a, char *err, size_t n);
/* The frequency of rotary pair j of n rotated dims (radians per position), scaling included
 * (not freq_factors, an input; LongRoPE's is the unscaled frequency). */
double gp_rope_freq(const gp_attrs *a, int64_t j, int64_t n);
int gp_op_from_name(const char *name, gp_op *out); /* 0 on success, -1 unknown */

#endif
