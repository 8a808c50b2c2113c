/* Tests that run models: an example graph compiled, planned and loaded from the plan file's bytes,
 * as gplan-compile then gplan-run would (links gp_dsl, gp_planner and gp_runtime). */
#ifndef GP_TESTS_TESTMODEL_H
#define GP_TESTS_TESTMODEL_H

#include <stdint.h>

#include "ir/ir.h"
#include "gplan/gplan.h"

typedef struct {
    const char *const *defines; /* [n_defines] -D NAME=VALUE overrides */
    int n_defines;
    const char *config;         /* a config.json path, or NULL */
    int devices;                /* --devices; <= 0 means 1 */
    uint64_t seed;              /* random weights bound with this seed; 0: no weights bound */
} gp_test_model_opts;

/* The model of `example` (a path under the source tree); NULL after printing why to stderr.
 * graph_out (optional) receives the IR graph, which the caller frees; its source locations point
 * into freed diagnostics, so only its tensors and nodes may be read. */
gp_model *gp_test_model(const char *example, const gp_test_model_opts *o, gp_graph **graph_out);

/* examples/llama.gplan at the quantized-weights tests' shape (2 layers, hidden 256, intermediate
 * 512, 4 heads, 2 KV heads, vocab 96) with max_position_embeddings=n_ctx, n_batch and -D
 * wtype=WTYPE, random weights of seed (quantized at load for a quantized wtype; 0: none bound). */
gp_model *gp_test_llama_small(int n_ctx, int n_batch, const char *wtype, uint64_t seed);

/* gp_test_llama_small in wtype (random weights of seed) into *q, and in f32 into *f bound to q's
 * weights dequantized (gp_test_write_dequantized): the file's path, which the caller removes. NULL
 * after printing why, *q and *f freed and NULL. */
const char *gp_test_llama_dequantized(int n_ctx, int n_batch, const char *wtype, uint64_t seed,
                                      gp_model **q, gp_model **f);

/* m's vocabulary size (gp_model_info's vocab). */
int64_t gp_test_vocab(const gp_model *m);

/* One eval of n tokens (n <= 64) at positions start..start+n-1, token i's id (start + i) * mult
 * mod vocab; copies the logits [n, vocab] into out. 0, or -1 after printing the session's error. */
int gp_test_eval_tokens(gp_session *s, int n, int start, int mult, float *out, int64_t vocab);

/* Writes m's weights as f32 (quantized ones dequantized, bit for bit) to a fresh temporary
 * safetensors file, one tensor per checkpoint name: its path (gp_test_tmpfile), or NULL after
 * printing why (a weight neither f32 nor quantized). For the tests that compare a quantized model
 * with the same graph in f32. */
const char *gp_test_write_dequantized(const gp_model *m);

#endif
