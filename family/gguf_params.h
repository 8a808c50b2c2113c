/* gplan-compile --gguf: graph parameters and weight dtypes from a GGUF file (gguf_params.c), as
 * the family table (family/family.h) says each architecture's metadata is read. */
#ifndef GP_FAMILY_GGUF_PARAMS_H
#define GP_FAMILY_GGUF_PARAMS_H

#include "ir/ir.h"
#include "weights/gguf.h"
#include "weights/weights.h"

#define GP_GGUF_MAX_PARAMS 32

typedef struct gp_gguf_params {
    char *text[GP_GGUF_MAX_PARAMS]; /* [n] "NAME=VALUE", for gp_dsl_opts.file_params */
    int n;
} gp_gguf_params;

/* Reads the parameters of a GGUF file of a family's architecture (llama, qwen2, qwen3, gpt2,
 * gemma2, gemma3 or phi3): its ARCH.* metadata under the transformers config names,
 * vocab_size from token_embd.weight, tie_word_embeddings when there is no output.weight; the
 * layout of llama.cpp's converter: for llama rope_mode = gptj (q and k permuted), for gpt2
 * conv1d_transposed = true (the Conv1D weights transposed), for gemma2 and gemma3 norm_offset = 0
 * (1 added to the norm weights); for the llama-like ones head_dim (key_length, else
 * embedding_length / head_count); and what llama.cpp assumes where the file is silent
 * (docs/gguf.md). 0, or -1 with err set. */
int gp_gguf_params_read(const char *path, gp_gguf_params *p, char *err, size_t errlen);
void gp_gguf_params_free(gp_gguf_params *p);

/* A GGUF file's tensors as the graph compiler sees them: the dtype of each, and which the graph
 * asked for, so that a file with tensors the graph leaves unused (more layers than its
 * block_count says, another model's tensors) is refused rather than half read. */
typedef struct {
    gp_weights *w;
    unsigned char *used;             /* [gp_weights_count(w)] */
    const char *const *optional;     /* the family's gp_family_gguf.optional_tensors */
} gp_gguf_weights;

/* 0, or -1 with err (the file's message). */
int gp_gguf_weights_open(gp_gguf_weights *gw, const char *path, char *err, size_t errlen);
void gp_gguf_weights_close(gp_gguf_weights *gw); /* a zeroed one is a no-op */
/* gp_dsl_opts.weight_dtype over a gp_gguf_weights (ctx): the file tensor's dtype, found by its
 * checkpoint name or GGUF alias (and marked used), else the declared one. */
gp_dtype gp_gguf_weight_dtype(void *ctx, const char *checkpoint_name, gp_dtype declared);
/* 0 when the graph asked for every tensor of the file, else -1 with err: "PATH: 28 tensors of
 * the file are not in the graph (blk.2.attn_k.weight, ...): ...". */
int gp_gguf_weights_unused(const gp_gguf_weights *gw, const char *path, char *err,
                           size_t errlen);
/* 0 when every weight of g (adapter slots aside: their tensors come from an adapter) is in the
 * file with the graph's shape (or the file holds none but the family's optional ones: metadata
 * alone), else -1 with err: "PATH: weights: missing tensor \"NAME\"" or
 * "PATH: weights: \"NAME\": expected shape [8, 8] f16, file has [4, 8] f16". */
int gp_gguf_weights_missing(const gp_gguf_weights *gw, const gp_graph *g, const char *path,
                            char *err, size_t errlen);

/* The families' gp_family_gguf.derive hooks: what no key of the file says. 0, or -1 with err. */
int gp_gguf_params_derive_llama(const gp_gguf *g, const char *path, const char *arch,
                                gp_gguf_params *p, char *err, size_t errlen);
int gp_gguf_params_derive_gemma2(const gp_gguf *g, const char *path, const char *arch,
                                 gp_gguf_params *p, char *err, size_t errlen);
int gp_gguf_params_derive_gemma3(const gp_gguf *g, const char *path, const char *arch,
                                 gp_gguf_params *p, char *err, size_t errlen);
int gp_gguf_params_derive_phi3(const gp_gguf *g, const char *path, const char *arch,
                               gp_gguf_params *p, char *err, size_t errlen);
/* gpt-oss: always -1, "PATH: gpt-oss GGUF files are not supported yet (...)": its experts are
 * MXFP4 (ggml type 39, not read) and split into gate and up, which examples/gpt_oss.gplan, over
 * transformers' fused layout, does not take (docs/moe.md). */
int gp_gguf_params_derive_gpt_oss(const gp_gguf *g, const char *path, const char *arch,
                                  gp_gguf_params *p, char *err, size_t errlen);

#endif
