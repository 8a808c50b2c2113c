/* Checkpoints as the runtime sees them: one safetensors file, a sharded folder or a GGUF file,
 * checked against the weights a graph declares, read with f32/f16/bf16 conversion; and
 * deterministic random weights. */
#ifndef GP_WEIGHTS_WEIGHTS_H
#define GP_WEIGHTS_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "ir/core.h"
#include "weights/safetensors.h"

/* At most this many problems are spelled out by gp_weights_check; the rest are counted. */
#define GP_WEIGHTS_MAX_REPORTED 16

typedef struct gp_weights gp_weights;

/* path is one of
 *   a GGUF file (any name; told by its magic "GGUF"): its tensors as records with the gp_dtype of
 *     their ggml type (f32, f16, bf16, i32, q4_0 ... q6_k; others listed with supported = 0), the
 *     shape in gplan's order (outermost first: the reverse of ggml's ne) and the data in place in
 *     the mapping; gp_weights_find also takes the Hugging Face name of each (gp_gguf_name_to_hf,
 *     weights/gguf.h, docs/gguf.md); errors are "PATH: bad GGUF file (REASON)",
 *   a safetensors file (any other name),
 *   a model.safetensors.index.json (its "weight_map" names shards in the same folder),
 *   a folder holding model.safetensors, or else model.safetensors.index.json + its shards.
 * Shard names must be plain file names (no '/' or ".."); every mapped name must exist in its shard.
 * NULL on failure with err set ("PATH: bad safetensors index (REASON)", or the shard's error). */
gp_weights *gp_weights_open(const char *path, char *err, size_t errlen);
void gp_weights_close(gp_weights *w); /* NULL is a no-op */

int gp_weights_count(const gp_weights *w);
const gp_st_tensor *gp_weights_get(const gp_weights *w, int i); /* name order; NULL out of range */
/* NULL when absent; on a GGUF source the name may also be the Hugging Face one. */
const gp_st_tensor *gp_weights_find(const gp_weights *w, const char *name);
int gp_weights_shard_count(const gp_weights *w); /* 1 for a GGUF file */

/* A weight a graph declares: the checkpoint name and the dtype and shape the plan expects. */
typedef struct {
    const char *name;
    gp_dtype dtype;
    int ndim;
    int64_t shape[GP_MAX_DIMS]; /* [ndim] */
} gp_weight_decl;

/* Checks every declaration: the tensor exists, has the same shape, and its dtype is the same or one
 * gp_weights_read converts (f32, f16, bf16 among themselves; a quantized tensor only as itself). Extra tensors in the checkpoint are
 * fine. convert, when not NULL, is [n]: set to 1 where the file dtype differs and reading converts,
 * or where a stacked weight's slices must be copied into one buffer (not adjacent in memory).
 * Returns the number of problems (0: all good). err gets one line per problem, e.g.
 *   weights: missing tensor "transformer.h.3.attn.c_attn.weight"
 *   weights: "transformer.wte.weight": expected shape [50257, 768] f32, file has [50257, 512] f32
 * up to GP_WEIGHTS_MAX_REPORTED, then "weights: ... and K more problems". */
int gp_weights_check(const gp_weights *w, const gp_weight_decl *decls, int n,
                     unsigned char *convert, char *err, size_t errlen);

/* Stacked weights: a weight name holding '*' (the experts of a mixture of experts,
 * "model.layers.3.mlp.experts.*.gate_proj.weight" [E, F, H]) is one tensor of that name (a GGUF
 * file's merged blk.3.ffn_gate_exps through its alias), or else its dim 0 as n tensors, '*'
 * replaced by 0 .. n - 1, each of the rest of the shape. gp_weights_check checks either form. */
int gp_weights_is_stacked(const char *name);
/* Slice e of stacked weight `name` (the name with '*' replaced by e), or NULL. */
const gp_st_tensor *gp_weights_slice(const gp_weights *w, const char *name, int64_t e);
/* The tensors of weight `name` (dim 0 of n): parts[0] the one tensor (returns 1), or a stacked
 * name's n slices into parts[n] (returns n); 0 when one is absent, its name in missing[cap]. */
int gp_weights_parts(const gp_weights *w, const char *name, int64_t n, const gp_st_tensor **parts,
                     char *missing, size_t cap);
/* 1 when the n parts have one dtype and size and lie one after another in memory (then
 * parts[0]->data is the stacked tensor, in place). */
int gp_weights_parts_adjacent(const gp_st_tensor *const *parts, int64_t n);

/* Copies a tensor into dst ([numel] of dtype, dst_bytes long), converting between f32, f16 and bf16
 * (round to nearest even); i32 only to i32; a quantized tensor only into its own dtype (its
 * nbytes, a plain copy: dequantizing is not connected yet). 0 on success, -1 with err set. */
int gp_weights_read(const gp_st_tensor *t, gp_dtype dtype, void *dst, size_t dst_bytes, char *err,
                    size_t errlen);

/* ---- random weights (weights_random.c) ----
 * Element i of a tensor is a pure function of (seed, key, i): splitmix64's i-th output from a state
 * derived from seed and key, so the bytes do not depend on threads, chunking or call order.
 * Default initialisation by name (gp_weights_init_for):
 *   norm weights (last component before ".weight" starts with "ln" or contains "norm", any case:
 *     ln_1, ln_f, norm, input_layernorm, post_attention_layernorm, q_norm): 1.0 +- 0.05
 *   biases (".bias", norms' too): 0 +- 0.01
 *   everything else (embeddings, linear weights): 0 +- 0.02 (GPT-2 uses normal(0, 0.02))
 * Values are uniform in [center - scale, center + scale), then rounded to the dtype; i32 tensors
 * get the value rounded to the nearest integer. */
typedef struct {
    float center;
    float scale;
} gp_weights_init;

uint64_t gp_weights_name_key(const char *name); /* FNV-1a 64 of the name */
gp_weights_init gp_weights_init_for(const char *name);
/* Fills dst ([n] of dtype) with elements first .. first + n - 1 of the tensor's stream; threads may
 * fill disjoint ranges of one tensor and get the same bytes as one call. */
void gp_weights_random_fill(void *dst, gp_dtype dtype, int64_t first, int64_t n, uint64_t seed,
                            uint64_t key, float center, float scale);
/* gp_weights_random_fill with the name's key and default initialisation. */
void gp_weights_random_named(void *dst, gp_dtype dtype, int64_t n, uint64_t seed, const char *name);

#endif
