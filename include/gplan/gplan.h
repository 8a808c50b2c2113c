/* gplan's embedding API: load a plan, bind weights, create a session on a backend, set inputs and
 * runtime dims, evaluate, read outputs. Part of libgplan (gp_runtime); the text API,
 * <gplan/text.h>, is built on it and plans models in process.
 *
 * Typical use (error handling shortened):
 *
 *     char err[1024];
 *     gp_model *m = gp_model_load("gpt2.plan", err, sizeof err);
 *     gp_model_bind_weights(m, "model.safetensors", err, sizeof err); // or gp_model_random_weights
 *     gp_session_opts o = {"cpu", 4, 0};
 *     gp_session *s = gp_session_new(m, &o, err, sizeof err);
 *     int32_t ids[3] = {464, 2068, 7586}, pos[3] = {0, 1, 2};
 *     gp_session_set_tokens(s, ids, pos, 3);               // also sets T = 3 (and rows = [2])
 *     gp_session_set_rows(s, NULL, 3);                     // optional: every token's logits
 *     if (gp_session_eval(s)) puts(gp_session_error(s));
 *     gp_tensor_info logits;
 *     const float *l = gp_session_output(s, "logits", &logits); // [3, vocab], packed
 *     gp_session_free(s);
 *     gp_model_free(m);
 *
 * Memory: gp_session_new allocates everything a session will use (extras records, the io block, the
 * backend's arena and state regions, the thread pool); after it, set_* / eval / output allocate
 * nothing, create no thread and print nothing; errors go to a buffer inside the session.
 * Threads: a model may be shared by sessions; one session is used by one thread at a time.
 *
 * Installed as <gplan/gplan.h> (libgplan, pkg-config gplan, CMake find_package(gplan) -> gplan::gplan);
 * it needs no internal header.
 */
#ifndef GP_GPLAN_GPLAN_H
#define GP_GPLAN_GPLAN_H

#include <stddef.h>
#include <stdint.h>

/* Public: the element types and the version (installed beside this header as gplan/). */
#include "gplan_types.h"
#include "gplan_version.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gp_model gp_model;     /* a loaded plan plus its weights (read-only after binding) */
typedef struct gp_session gp_session; /* one running instance: its own state (KV cache) and buffers */

/* ---- models ---- */

/* Loads and validates a plan file. NULL with err set: "FILE: bad plan file (REASON)", or a reason
 * the runtime cannot run it (e.g. an index input computed inside the graph). */
gp_model *gp_model_load(const char *plan_path, char *err, size_t err_len);
/* The same from the plan file's bytes; `name` stands for FILE in messages. */
gp_model *gp_model_load_mem(const void *data, size_t len, const char *name, char *err,
                            size_t err_len);
/* NULL is a no-op. Free every session of the model first. */
void gp_model_free(gp_model *m);

/* Binds a checkpoint: a safetensors file, a model.safetensors.index.json, or a folder holding either.
 * Every weight the plan declares must be there with the declared shape, and a dtype equal to or
 * convertible to the declared one (f32/f16/bf16); else -1 and err lists the problems, one a line:
 *   weights: missing tensor "transformer.h.0.attn.c_attn.weight"
 *   weights: "transformer.wte.weight": expected shape [50257, 768] f32, file has [50257, 512] f32
 * A tensor whose file dtype matches and whose bytes are aligned to its element size is used in
 * place from the memory-mapped file; the others are converted into one allocation. */
int gp_model_bind_weights(gp_model *m, const char *path, char *err, size_t err_len);
/* Binds deterministic random weights (gp_weights_random_named: a pure function of seed and name). */
int gp_model_random_weights(gp_model *m, uint64_t seed, char *err, size_t err_len);

/* Merges a PEFT LoRA adapter folder (adapter_config.json, adapter_model.safetensors) into the bound
 * weights, W += scale * (lora_alpha / r) * delta, by running the merge plan written by
 * gplan-compile MODEL -D lora_r=R --lora-merge -o MERGE_PLAN. Call after binding, before creating
 * sessions. Details and messages: runtime/lora.h. 0, or -1 with err set. */
int gp_model_apply_lora(gp_model *m, const char *dir, const char *merge_plan, double scale,
                        char *err, size_t err_len);
/* Runtime mode: copies a PEFT adapter into the adapter slots of a plan compiled with -D lora_r=R
 * (A and s * B, s = scale * lora_alpha / r); call again between evals to switch adapters, with no
 * allocation of weights and no replanning. Details: runtime/lora.h. 0, or -1 with err set. */
int gp_model_bind_adapter(gp_model *m, const char *dir, double scale, char *err, size_t err_len);

/* ---- checking a checkpoint's values ---- */

/* One tensor as gp_weights_scan saw it. */
typedef struct {
    const char *name;     /* as the file names it */
    const char *dtype;    /* the file's dtype: "f32", "q4_1", "BF16", ... */
    int64_t values;       /* its elements */
    int64_t nonfinite;    /* values that are NaN or infinite (a block format's: every value of a
                             block whose scale, d or the min's m / dmin, is); -1: a dtype the
                             scan does not read (i8, q2_k, ...) */
    int64_t first;        /* the first such value's element index, row-major; -1 when none */
    const char *first_is; /* "nan", "inf" or "-inf" (a block's: its scale's); "" when none */
} gp_tensor_scan;
typedef void (*gp_tensor_scan_fn)(void *user, const gp_tensor_scan *t);

/* What a whole scan saw, for its summary. */
typedef struct {
    int64_t tensors; /* the checkpoint's tensors */
    int64_t values;  /* the elements of those it scanned */
    int64_t skipped; /* tensors of a dtype the scan does not read (nonfinite -1) */
} gp_weights_scan_totals;

/* Checks every tensor of a checkpoint (a GGUF file, a safetensors file, an index.json or a folder,
 * as gp_model_bind_weights takes) for NaNs and infinities, in place in the memory-mapped file, a
 * tensor at a time: f32, f16, bf16, f64, and the scales of q4_0 ... q6_k. fn (may be NULL) gets
 * each tensor in name order (its strings last until fn returns); totals (may be NULL) the counts.
 * The number of tensors holding non-finite values (0: all finite), or -1 with err set when the
 * checkpoint cannot be read. */
int64_t gp_weights_scan(const char *path, gp_tensor_scan_fn fn, void *user,
                        gp_weights_scan_totals *totals, char *err, size_t err_len);

typedef struct {
    const char *graph_name;
    int n_inputs, n_outputs;  /* INPUT / OUTPUT tensors */
    const char *tokens;       /* the token-id input (get_rows' ids), or NULL when none */
    const char *positions;    /* the positions input (rope/store/attention pos), or NULL */
    const char *logits;       /* the first output, or NULL */
    const char *tokens_dim;   /* the symbolic dim of the tokens' length ("T"), or NULL if constant */
    int64_t max_tokens;       /* tokens per eval at most (the bound of tokens_dim); 0 when no tokens */
    int64_t vocab;            /* rows of the embedding table (valid ids are [0, vocab)); 0 when none */
    int64_t context;          /* positions the KV cache holds (rows of attention's k); 0 when none */
    int64_t weights_mapped;   /* weight bytes used in place from the mapped checkpoint */
    int64_t weights_loaded;   /* weight bytes read (converted) or generated into memory */
    int64_t region_bytes[5];  /* the plan's region sizes, by gp_region (plan/plan.h) */
    /* The rows input: indices into the eval's tokens whose logits the graph computes (get_rows of
     * the final hidden states before the LM head, examples/llama.gplan), or NULL when the graph
     * computes every token's logits (logits [T, vocab]). */
    const char *rows;
    const char *rows_dim;     /* its symbolic dim ("R"), or NULL if constant */
    int64_t max_rows;         /* rows per eval at most (the bound of rows_dim); 0 when no rows */
} gp_model_info;

void gp_model_get_info(const gp_model *m, gp_model_info *out);

/* Symbolic dims (runtime dims): count, and name/bound of dim i. -1 when i is out of range. */
int gp_model_dim_count(const gp_model *m);
int gp_model_dim(const gp_model *m, int i, const char **name, int64_t *bound);

/* ---- sessions ---- */

typedef struct {
    const char *backend; /* "cpu" (default when NULL), "reference", "cuda" (when built) */
    int n_threads;       /* CPU threads, the caller included; <= 0: 1 */
    int device;          /* device ordinal for "cuda"; 0. A plan for N devices (gplan-compile
                            --devices N) runs on devices device .. device + N - 1: the session makes
                            one backend instance and one thread per device (on the CPU backends
                            the devices are threads), cuts each device's share of the weights and
                            returns the outputs every device agrees on */
} gp_session_opts;

/* Creates a session: allocates every buffer once, zeroes the state (KV cache), sets every runtime
 * dim to its bound. o may be NULL (cpu, 1 thread). The model must have weights bound and must
 * outlive the session. NULL with err set ("unknown backend ...", "cuda: not built ...", ...). */
gp_session *gp_session_new(const gp_model *m, const gp_session_opts *o, char *err, size_t err_len);
void gp_session_free(gp_session *s); /* NULL is a no-op */

/* The last error of a session call, "" when none. */
const char *gp_session_error(const gp_session *s);

/* Sets a runtime dim for the next evals: value in [1, bound]. 0, or -1 with the error set. */
int gp_session_set_dim(gp_session *s, const char *dim, int64_t value);

/* Copies an input for the next eval: `bytes` must equal its size at the current runtime dims
 * (packed, dtype as planned), so set dims first. 0, or -1 (unknown name, wrong size). */
int gp_session_set_input(gp_session *s, const char *name, const void *data, size_t bytes);

/* The usual language-model step: n tokens ids[n] at positions pos[n]; sets the tokens' symbolic
 * dim to n, then the tokens and positions inputs, and, when the graph has a rows input
 * (gp_model_info.rows), asks for the last token's logits only: rows = [n - 1], logits [1, vocab].
 * Values are checked by gp_session_eval. */
int gp_session_set_tokens(gp_session *s, const int32_t *ids, const int32_t *pos, int64_t n);

/* Asks for the logits of n rows of the eval's tokens (call after gp_session_set_tokens, which
 * resets it to the last row): rows[n] in [0, T), any order, repeats allowed; rows NULL asks for
 * rows 0 .. n - 1, so gp_session_set_rows(s, NULL, n) after set_tokens of n tokens gives every
 * row. Sets the rows' symbolic dim to n; logits are then [n, vocab], row i the logits of token
 * rows[i]. Row values are checked by gp_session_eval. -1 when n is over the plan's bound or the
 * graph has no rows input (it computes every row anyway: there rows NULL with n the tokens' count
 * is allowed and changes nothing, so "every row" works on any language model). */
int gp_session_set_rows(gp_session *s, const int32_t *rows, int64_t n);

/* Runs the graph once. Before anything runs every node is checked at the current dims (token ids
 * in [0, vocab), positions inside the context, shapes): a bad input gives -1 and a message such as
 * "eval: node 0 (get_rows -> x, line 12): get_rows: ids[2] = 50300 is out of range [0, 50257)";
 * the state is then untouched. 0 on success. */
int gp_session_eval(gp_session *s);

/* Shape of a tensor at the current runtime dims. */
typedef struct {
    gp_dtype dtype;
    int ndim;
    int64_t ne[GP_MAX_DIMS]; /* [ndim] outermost first */
    size_t bytes;            /* packed size */
} gp_tensor_info;

/* The host copy of an output after the last eval, packed at the current dims ([R, vocab] logits:
 * row i at i * vocab; [T, vocab] for a graph without a rows input). Valid until the next eval or free. NULL for an unknown name. info may be
 * NULL. */
const void *gp_session_output(gp_session *s, const char *name, gp_tensor_info *info);
/* The index of the largest of x[0, n): the first on ties; NaN never wins (0 when all are NaN or n
 * is 0). Greedy decoding's pick from a logits row, in two passes that vectorize, where
 * `if (x[i] > x[best]) best = i` would make each compare wait for the load of x[best] that the one
 * before chose. */
int64_t gp_argmax(const float *x, int64_t n);

/* Zeroes the state (KV cache) as at creation, to start a new sequence. 0 or -1. */
int gp_session_reset(gp_session *s);

/* Successful evals so far. */
int64_t gp_session_eval_count(const gp_session *s);
/* Allocations the backend made after creation (device memory on CUDA; 0 expected). */
int64_t gp_session_backend_allocs(const gp_session *s);
/* The backend's name ("cpu", ...). */
const char *gp_session_backend(const gp_session *s);

/* ---- allocation tracing ----
 * An allocation-counting shim (tests/alloc/, loaded with LD_PRELOAD) may export
 *     void gp_alloc_shim_eval(int in_eval);
 * gp_session_new looks it up once (dlsym); gp_session_eval then calls it with 1 on entry and 0 on
 * return, so the shim counts only what happens during evals. Without the shim nothing is called. */

#ifdef __cplusplus
}
#endif

#endif
