/* Tests of the runtime (suite "runtime"): sessions on the planned CPU backend against the reference
 * executor bit for bit, input and weight errors, state across evals, outputs at T < bound, and no
 * allocation during evals (counted with -Wl,--wrap, tests/alloc/). */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsl/dsl.h"
#include "planner/planner.h"
#include "gplan/gplan.h"
#include "weights/weights.h"
#include "tests/alloc/alloc_count.h"
#include "tests/testmodel.h"
#include "tests/testutil.h"

/* ---- helpers ---- */

/* Compiles an example with -D overrides, plans it and loads the plan file's bytes as a model;
 * *graph_out (optional) gets the graph. NULL on any failure (reported). */
static gp_model *compile_model(const char *example, const char **defines, int n_defines,
                               gp_graph **graph_out)
{
    gp_test_model_opts o = {defines, n_defines, NULL, 1, 0};
    return gp_test_model(example, &o, graph_out);
}

static gp_session *new_session(const gp_model *m, const char *backend, int threads)
{
    char err[1024];
    gp_session_opts o = {backend, threads, 0};
    gp_session *s = gp_session_new(m, &o, err, sizeof err);
    if (!s)
        fprintf(stderr, "gp_session_new: %s\n", err);
    return s;
}

/* One eval of n tokens at positions pos0..pos0+n-1 with ids drawn from *rng. */
typedef struct {
    int64_t n, pos0;
} step;

/* Runs the steps; returns the concatenated logits of every step (malloc'd), NULL on failure. */
static float *run_steps(gp_session *s, const step *steps, int n_steps, int64_t vocab, uint64_t seed,
                        size_t *total_floats)
{
    size_t total = 0;
    for (int i = 0; i < n_steps; i++)
        total += (size_t)(steps[i].n * vocab);
    float *out = malloc(total * sizeof *out);
    int32_t ids[64], pos[64];
    uint64_t rng = seed;
    size_t at = 0;
    if (!out)
        return NULL;
    for (int i = 0; i < n_steps; i++) {
        for (int64_t t = 0; t < steps[i].n; t++) {
            ids[t] = (int32_t)(gp_test_rand(&rng) % (uint64_t)vocab);
            pos[t] = (int32_t)(steps[i].pos0 + t);
        }
        gp_tensor_info info;
        const float *l;
        /* every row's logits (a graph with a rows input computes the last one by default) */
        if (gp_session_set_tokens(s, ids, pos, steps[i].n) ||
            gp_session_set_rows(s, NULL, steps[i].n) || gp_session_eval(s) ||
            !(l = gp_session_output(s, "logits", &info))) {
            fprintf(stderr, "step %d: %s\n", i, gp_session_error(s));
            free(out);
            return NULL;
        }
        CU_ASSERT_EQUAL(info.ne[0], steps[i].n);
        CU_ASSERT_EQUAL(info.bytes, (size_t)(steps[i].n * vocab) * sizeof(float));
        memcpy(out + at, l, info.bytes);
        at += (size_t)(steps[i].n * vocab);
    }
    *total_floats = total;
    return out;
}

/* The planned CPU backend at each thread count equals the reference executor bit for bit over the
 * steps (several consecutive evals: the KV cache carries between them). */
static void check_bitexact(const char *example, const char **defines, int n_defines,
                           const step *steps, int n_steps, const int *threads, int n_threads)
{
    gp_model *m = compile_model(example, defines, n_defines, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char err[1024];
    CU_ASSERT_EQUAL_FATAL(gp_model_random_weights(m, 42, err, sizeof err), 0);
    gp_model_info info;
    gp_model_get_info(m, &info);
    gp_session *ref = new_session(m, "reference", 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
    size_t n_ref = 0, n_cpu = 0;
    float *want = run_steps(ref, steps, n_steps, info.vocab, 7, &n_ref);
    CU_ASSERT_PTR_NOT_NULL_FATAL(want);
    /* The result must mean something: finite, not constant, different from step to step. */
    int finite = 1, varied = 0;
    for (size_t i = 0; i < n_ref; i++) {
        finite &= isfinite(want[i]) != 0;
        varied |= want[i] != want[0];
    }
    CU_ASSERT(finite);
    CU_ASSERT(varied);
    for (int k = 0; k < n_threads; k++) {
        gp_session *s = new_session(m, "cpu", threads[k]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(s);
        float *got = run_steps(s, steps, n_steps, info.vocab, 7, &n_cpu);
        CU_ASSERT_PTR_NOT_NULL(got);
        if (got) {
            CU_ASSERT_EQUAL(n_cpu, n_ref);
            int same = memcmp(got, want, n_ref * sizeof *got) == 0;
            if (!same)
                fprintf(stderr, "%s: %d threads: logits differ from the reference\n", example,
                        threads[k]);
            CU_ASSERT(same);
        }
        CU_ASSERT_EQUAL(gp_session_eval_count(s), n_steps);
        free(got);
        gp_session_free(s);
    }
    free(want);
    gp_session_free(ref);
    gp_model_free(m);
}

/* ---- bit-exact runs ---- */

static void test_tiny_bitexact(void)
{
    /* T in 1..16 and at the bound (64 with the context 64: evaluated from position 0 alone). */
    static const step steps[] = {{5, 0}, {1, 5}, {3, 6}, {16, 9}, {1, 25}, {1, 26}, {7, 27}};
    static const int threads[] = {1, 2, 3};
    check_bitexact("examples/tiny.gplan", NULL, 0, steps, 7, threads, 3);
    static const step full[] = {{64, 0}};
    static const int one[] = {2};
    check_bitexact("examples/tiny.gplan", NULL, 0, full, 1, one, 1);
}

static void test_gpt2_bitexact(void)
{
    /* GPT-2 117M widths (768, 12 heads) with 2 layers, a smaller vocabulary and context. */
    static const char *defs[] = {"n_layer=2", "vocab_size=2048", "n_positions=64", "n_batch=16"};
    static const step steps[] = {{8, 0}, {1, 8}, {3, 9}, {16, 12}};
    static const int threads[] = {1, 2};
    check_bitexact("examples/gpt2.gplan", defs, 4, steps, 4, threads, 2);
}

static void test_llama_bitexact(void)
{
    /* Grouped-query attention: 8 query heads over 2 KV heads. */
    static const char *defs[] = {"num_hidden_layers=2", "hidden_size=128", "intermediate_size=344",
                                 "num_attention_heads=8", "num_key_value_heads=2",
                                 "vocab_size=512", "max_position_embeddings=64", "n_batch=16"};
    static const step steps[] = {{6, 0}, {1, 6}, {16, 7}, {2, 23}};
    static const int threads[] = {1, 2, 3};
    check_bitexact("examples/llama.gplan", defs, 8, steps, 4, threads, 3);
}

/* ---- errors ---- */

static void test_input_errors(void)
{
    gp_model *m = compile_model("examples/tiny.gplan", NULL, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char err[1024];
    CU_ASSERT_EQUAL_FATAL(gp_model_random_weights(m, 3, err, sizeof err), 0);
    gp_session *s = new_session(m, "cpu", 2);
    gp_session *ref = new_session(m, "reference", 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ref);

    int32_t ids[3] = {1, 256, 2}, pos[3] = {0, 1, 2};
    CU_ASSERT_EQUAL(gp_session_set_tokens(s, ids, pos, 3), 0);
    CU_ASSERT_EQUAL(gp_session_eval(s), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(gp_session_error(s), "ids[1] = 256 is out of range [0, 256)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(gp_session_error(s), "eval: node 0 (get_rows"));
    CU_ASSERT_PTR_NOT_NULL(strstr(gp_session_error(s), "index input tokens"));

    ids[1] = 5;
    pos[2] = 64; /* the context holds positions 0..63 */
    CU_ASSERT_EQUAL(gp_session_set_tokens(s, ids, pos, 3), 0);
    CU_ASSERT_EQUAL(gp_session_eval(s), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(gp_session_error(s), "index input pos"));
    CU_ASSERT_PTR_NOT_NULL(strstr(gp_session_error(s), "[2] = 64 is out of range [0, 64)"));
    pos[2] = -1;
    CU_ASSERT_EQUAL(gp_session_set_tokens(s, ids, pos, 3), 0);
    CU_ASSERT_EQUAL(gp_session_eval(s), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(gp_session_error(s), "[2] = -1 is out of range [0, 64)"));

    CU_ASSERT_EQUAL(gp_session_set_dim(s, "T", 65), -1);
    CU_ASSERT_STRING_EQUAL(gp_session_error(s), "T = 65 is outside [1, 64] (the plan's bound)");
    CU_ASSERT_EQUAL(gp_session_set_dim(s, "T", 0), -1);
    CU_ASSERT_EQUAL(gp_session_set_dim(s, "S", 1), -1);
    CU_ASSERT_STRING_EQUAL(gp_session_error(s), "no runtime dim named \"S\"");
    int32_t many[65] = {0}, many_pos[65] = {0};
    CU_ASSERT_EQUAL(gp_session_set_tokens(s, many, many_pos, 65), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(gp_session_error(s), "T = 65 is outside [1, 64]"));

    CU_ASSERT_EQUAL(gp_session_set_dim(s, "T", 2), 0);
    CU_ASSERT_EQUAL(gp_session_set_input(s, "tokens", ids, 3 * sizeof ids[0]), -1);
    CU_ASSERT_STRING_EQUAL(gp_session_error(s),
                           "input tokens: 12 bytes given, 8 expected at the current dims");
    CU_ASSERT_EQUAL(gp_session_set_input(s, "nope", ids, 8), -1);
    CU_ASSERT_STRING_EQUAL(gp_session_error(s), "no input named \"nope\"");
    CU_ASSERT_PTR_NULL(gp_session_output(s, "tokens", NULL)); /* an input, not an output */
    CU_ASSERT_STRING_EQUAL(gp_session_error(s), "no output named \"tokens\"");
    CU_ASSERT_PTR_NULL(gp_session_output(s, "nope", NULL));
    CU_ASSERT_STRING_EQUAL(gp_session_error(s), "no output named \"nope\"");

    /* Nothing ran: the state is as at creation, so a valid eval matches a fresh reference. */
    pos[0] = 0;
    pos[1] = 1;
    pos[2] = 2;
    CU_ASSERT_EQUAL(gp_session_set_tokens(s, ids, pos, 3), 0);
    CU_ASSERT_EQUAL(gp_session_eval(s), 0);
    CU_ASSERT_STRING_EQUAL(gp_session_error(s), "");
    CU_ASSERT_EQUAL(gp_session_set_tokens(ref, ids, pos, 3), 0);
    CU_ASSERT_EQUAL(gp_session_eval(ref), 0);
    gp_tensor_info a, b;
    const void *la = gp_session_output(s, "logits", &a), *lb = gp_session_output(ref, "logits", &b);
    CU_ASSERT_EQUAL_FATAL(a.bytes, b.bytes);
    CU_ASSERT(memcmp(la, lb, a.bytes) == 0);
    CU_ASSERT_EQUAL(gp_session_eval_count(s), 1);

    gp_session_free(ref);
    gp_session_free(s);
    gp_model_free(m);
}

/* After an eval passes, later evals at the same dims check only index values: a bad id or position
 * must still fail with the message a full check gives (compared with a fresh session's), and a
 * good eval after that, or at other dims, must still match the reference bit for bit. */
static void test_index_checks_same_dims(void)
{
    gp_model *m = compile_model("examples/tiny.gplan", NULL, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char err[1024];
    CU_ASSERT_EQUAL_FATAL(gp_model_random_weights(m, 5, err, sizeof err), 0);
    gp_session *s = new_session(m, "cpu", 2), *ref = new_session(m, "reference", 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
    int32_t ids[3] = {1, 2, 3}, pos[3] = {0, 1, 2};
    CU_ASSERT_EQUAL(gp_session_set_tokens(s, ids, pos, 3), 0);
    CU_ASSERT_EQUAL(gp_session_eval(s), 0);
    CU_ASSERT_EQUAL(gp_session_set_tokens(ref, ids, pos, 3), 0);
    CU_ASSERT_EQUAL(gp_session_eval(ref), 0);

    /* Same dims (T = 3): bad values, each against a fresh session's full check. */
    const int32_t bad[3][2] = {{1, 256}, {2, 64}, {0, -1}}; /* {index, value}: ids, then pos */
    for (int c = 0; c < 3; c++) {
        int32_t bi[3] = {1, 2, 3}, bp[3] = {3, 4, 5};
        if (c == 0)
            bi[bad[c][0]] = bad[c][1];
        else
            bp[bad[c][0]] = bad[c][1];
        gp_session *fresh = new_session(m, "cpu", 1);
        CU_ASSERT_PTR_NOT_NULL_FATAL(fresh);
        CU_ASSERT_EQUAL(gp_session_set_tokens(fresh, bi, bp, 3), 0);
        CU_ASSERT_EQUAL(gp_session_eval(fresh), -1);
        CU_ASSERT_EQUAL(gp_session_set_tokens(s, bi, bp, 3), 0);
        CU_ASSERT_EQUAL(gp_session_eval(s), -1);
        CU_ASSERT_STRING_EQUAL(gp_session_error(s), gp_session_error(fresh));
        CU_ASSERT_PTR_NOT_NULL(strstr(gp_session_error(s), "is out of range"));
        gp_session_free(fresh);
    }
    /* Good evals again: same dims, then T = 1, then T = 3; logits match the reference. */
    const int64_t steps[3][2] = {{3, 3}, {1, 6}, {3, 7}}; /* {n, first position} */
    for (int k = 0; k < 3; k++) {
        int32_t gi[3], gpos[3];
        for (int i = 0; i < 3; i++) {
            gi[i] = (int32_t)(11 * k + i);
            gpos[i] = (int32_t)steps[k][1] + i;
        }
        CU_ASSERT_EQUAL(gp_session_set_tokens(s, gi, gpos, steps[k][0]), 0);
        CU_ASSERT_EQUAL(gp_session_eval(s), 0);
        CU_ASSERT_EQUAL(gp_session_set_tokens(ref, gi, gpos, steps[k][0]), 0);
        CU_ASSERT_EQUAL(gp_session_eval(ref), 0);
        gp_tensor_info a, b;
        const void *la = gp_session_output(s, "logits", &a);
        const void *lb = gp_session_output(ref, "logits", &b);
        CU_ASSERT_EQUAL_FATAL(a.bytes, b.bytes);
        CU_ASSERT_EQUAL(a.ne[0], steps[k][0]);
        CU_ASSERT(memcmp(la, lb, a.bytes) == 0);
    }
    gp_session_free(s);
    gp_session_free(ref);
    gp_model_free(m);
}

static void test_session_errors(void)
{
    char err[1024];
    gp_session_free(NULL);
    gp_model_free(NULL);
    CU_ASSERT_PTR_NULL(gp_model_load_mem("not a plan", 10, "junk", err, sizeof err));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "junk: bad plan file"));
    CU_ASSERT_PTR_NULL(gp_model_load("/nonexistent/x.plan", err, sizeof err));

    gp_model *m = compile_model("examples/tiny.gplan", NULL, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    gp_session_opts o = {"cpu", 1, 0};
    CU_ASSERT_PTR_NULL(gp_session_new(m, &o, err, sizeof err));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "no weights bound"));
    CU_ASSERT_EQUAL_FATAL(gp_model_random_weights(m, 1, err, sizeof err), 0);
    o.backend = "tpu";
    CU_ASSERT_PTR_NULL(gp_session_new(m, &o, err, sizeof err));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "unknown backend \"tpu\""));
    o.backend = "cuda";
    gp_session *s = gp_session_new(m, &o, err, sizeof err);
    if (!s) /* without CUDA support or without a GPU: a clear error */
        CU_ASSERT(strstr(err, "cuda") != NULL);
    gp_session_free(s);
    o.backend = "cpu";
    o.n_threads = 1000;
    CU_ASSERT_PTR_NULL(gp_session_new(m, &o, err, sizeof err));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "cpu: 1000 threads"));

    gp_model_info info;
    gp_model_get_info(m, &info);
    CU_ASSERT_STRING_EQUAL(info.tokens, "tokens");
    CU_ASSERT_STRING_EQUAL(info.positions, "pos");
    CU_ASSERT_STRING_EQUAL(info.logits, "logits");
    CU_ASSERT_STRING_EQUAL(info.tokens_dim, "T");
    CU_ASSERT_EQUAL(info.vocab, 256);
    CU_ASSERT_EQUAL(info.context, 64);
    CU_ASSERT_EQUAL(info.max_tokens, 64);
    const char *name;
    int64_t bound;
    CU_ASSERT_EQUAL(gp_model_dim_count(m), 1);
    CU_ASSERT_EQUAL(gp_model_dim(m, 0, &name, &bound), 0);
    CU_ASSERT_STRING_EQUAL(name, "T");
    CU_ASSERT_EQUAL(bound, 64);
    CU_ASSERT_EQUAL(gp_model_dim(m, 1, &name, &bound), -1);
    gp_model_free(m);
}

/* Writes every weight of g as a safetensors file with the values of random seed `seed` (dtype
 * `as`), leaving out `skip` and writing `shrink` with half its first dim. 0 on success. */
static int write_checkpoint(const gp_graph *g, const char *path, uint64_t seed, gp_dtype as,
                            const char *skip, const char *shrink)
{
    gp_st_tensor *ts = calloc((size_t)g->n_tensors, sizeof *ts);
    void **bufs = calloc((size_t)g->n_tensors, sizeof *bufs);
    int n = 0, rc = -1;
    for (int i = 0; i < g->n_tensors; i++) {
        const gp_tensor *t = &g->tensors[i];
        if (t->kind != GP_TENSOR_WEIGHT || (skip && !strcmp(t->weight_name, skip)))
            continue;
        int dup = 0;
        for (int k = 0; k < n; k++)
            dup |= !strcmp(ts[k].name, t->weight_name);
        if (dup)
            continue;
        gp_st_tensor *s = &ts[n];
        s->name = t->weight_name;
        s->dtype = as;
        s->ndim = t->ndim;
        int64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            s->shape[d] = t->shape[d].size;
            if (d == 0 && shrink && !strcmp(t->weight_name, shrink))
                s->shape[d] /= 2;
            numel *= s->shape[d];
        }
        s->nbytes = (size_t)numel * gp_dtype_size(as);
        bufs[n] = malloc(s->nbytes ? s->nbytes : 1);
        if (!bufs[n])
            goto done;
        gp_weights_random_named(bufs[n], as, numel, seed, t->weight_name);
        s->data = bufs[n];
        n++;
    }
    char err[512];
    rc = gp_st_write(path, ts, n, NULL, err, sizeof err);
    if (rc)
        fprintf(stderr, "%s\n", err);
done:
    for (int k = 0; k < g->n_tensors; k++)
        free(bufs[k]);
    free(bufs);
    free(ts);
    return rc;
}

static void test_weights(void)
{
    gp_graph *g = NULL;
    gp_model *m = compile_model("examples/tiny.gplan", NULL, 0, &g);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char err[4096];
    const char *bad = gp_test_tmpfile(".safetensors");
    char bad_path[512];
    snprintf(bad_path, sizeof bad_path, "%s", bad);
    CU_ASSERT_EQUAL_FATAL(write_checkpoint(g, bad_path, 5, GP_F32,
                                           "transformer.h.1.mlp.c_fc.bias",
                                           "transformer.ln_f.weight"), 0);
    CU_ASSERT_EQUAL(gp_model_bind_weights(m, bad_path, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "2 problems with the weights the plan declares"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "weights: missing tensor \"transformer.h.1.mlp.c_fc.bias\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "weights: \"transformer.ln_f.weight\": expected shape [64] "
                                       "f32, file has [32] f32"));
    gp_session_opts o = {"cpu", 1, 0};
    CU_ASSERT_PTR_NULL(gp_session_new(m, &o, err, sizeof err)); /* nothing bound after a failure */
    CU_ASSERT_EQUAL(gp_model_bind_weights(m, "/nonexistent.safetensors", err, sizeof err), -1);

    /* A good f32 checkpoint is used in place and gives the same logits as the same random
     * weights generated in memory. */
    const char *good = gp_test_tmpfile(".safetensors");
    char good_path[512];
    snprintf(good_path, sizeof good_path, "%s", good);
    CU_ASSERT_EQUAL_FATAL(write_checkpoint(g, good_path, 5, GP_F32, NULL, NULL), 0);
    CU_ASSERT_EQUAL_FATAL(gp_model_bind_weights(m, good_path, err, sizeof err), 0);
    gp_model_info info;
    gp_model_get_info(m, &info);
    CU_ASSERT_EQUAL(info.weights_loaded, 0);
    CU_ASSERT(info.weights_mapped > 0);
    int64_t unique_bytes = info.weights_mapped;

    static const step steps[] = {{4, 0}, {1, 4}};
    size_t n1 = 0, n2 = 0, n3 = 0;
    gp_session *s = new_session(m, "cpu", 2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    float *from_file = run_steps(s, steps, 2, 256, 9, &n1);
    gp_session_free(s);
    gp_model *m2 = compile_model("examples/tiny.gplan", NULL, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m2);
    CU_ASSERT_EQUAL_FATAL(gp_model_random_weights(m2, 5, err, sizeof err), 0);
    s = new_session(m2, "cpu", 2);
    float *from_random = run_steps(s, steps, 2, 256, 9, &n2);
    gp_session_free(s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(from_file);
    CU_ASSERT_PTR_NOT_NULL_FATAL(from_random);
    CU_ASSERT_EQUAL(n1, n2);
    CU_ASSERT(memcmp(from_file, from_random, n1 * sizeof(float)) == 0);

    /* An f16 checkpoint is converted into memory: nothing mapped, every byte loaded. */
    const char *half = gp_test_tmpfile(".safetensors");
    char half_path[512];
    snprintf(half_path, sizeof half_path, "%s", half);
    CU_ASSERT_EQUAL_FATAL(write_checkpoint(g, half_path, 5, GP_F16, NULL, NULL), 0);
    CU_ASSERT_EQUAL_FATAL(gp_model_bind_weights(m, half_path, err, sizeof err), 0);
    gp_model_get_info(m, &info);
    CU_ASSERT_EQUAL(info.weights_mapped, 0);
    CU_ASSERT_EQUAL(info.weights_loaded, unique_bytes);
    s = new_session(m, "cpu", 1);
    float *from_half = run_steps(s, steps, 2, 256, 9, &n3);
    CU_ASSERT_PTR_NOT_NULL(from_half);
    if (from_half) /* rounded weights: close to, but not the same as, the f32 result */
        CU_ASSERT(memcmp(from_half, from_file, n1 * sizeof(float)) != 0);
    gp_session_free(s);

    free(from_half);
    free(from_file);
    free(from_random);
    remove(bad_path);
    remove(good_path);
    remove(half_path);
    gp_model_free(m2);
    gp_model_free(m);
    gp_graph_free(g);
}

/* ---- state, outputs ---- */

/* Logits of one token (id 7) at position 10. */
static int eval_one(gp_session *s, float *out, size_t floats)
{
    int32_t id = 7, pos = 10;
    gp_tensor_info info;
    if (gp_session_set_tokens(s, &id, &pos, 1) || gp_session_eval(s))
        return -1;
    const void *l = gp_session_output(s, "logits", &info);
    if (!l || info.bytes != floats * sizeof(float))
        return -1;
    memcpy(out, l, info.bytes);
    return 0;
}

static void test_state(void)
{
    gp_model *m = compile_model("examples/tiny.gplan", NULL, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char err[1024];
    CU_ASSERT_EQUAL_FATAL(gp_model_random_weights(m, 11, err, sizeof err), 0);
    static float fresh[256], fresh_ref[256], after[256], after_reset[256];
    static const step prefix[] = {{10, 0}};
    size_t n = 0;

    /* Dirty a session's memory, free it; the next session's state must start at zero anyway. */
    gp_session *s = new_session(m, "cpu", 2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    free(run_steps(s, prefix, 1, 256, 3, &n));
    gp_session_free(s);

    s = new_session(m, "cpu", 2);
    gp_session *ref = new_session(m, "reference", 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ref);
    CU_ASSERT_EQUAL(eval_one(s, fresh, 256), 0);
    CU_ASSERT_EQUAL(eval_one(ref, fresh_ref, 256), 0);
    CU_ASSERT(memcmp(fresh, fresh_ref, sizeof fresh) == 0);

    /* With tokens at positions 0..9 first, the cache holds them and the result changes. */
    CU_ASSERT_EQUAL(gp_session_reset(s), 0);
    float *pre = run_steps(s, prefix, 1, 256, 3, &n);
    CU_ASSERT_PTR_NOT_NULL(pre);
    free(pre);
    CU_ASSERT_EQUAL(eval_one(s, after, 256), 0);
    CU_ASSERT(memcmp(after, fresh, sizeof after) != 0);
    /* After a reset the cache is zero again. */
    CU_ASSERT_EQUAL(gp_session_reset(s), 0);
    CU_ASSERT_EQUAL(eval_one(s, after_reset, 256), 0);
    CU_ASSERT(memcmp(after_reset, fresh, sizeof fresh) == 0);

    gp_session_free(ref);
    gp_session_free(s);
    gp_model_free(m);
}

/* gp_argmax against the one-pass loop, at every length around its 16-wide blocks, and its edge
 * cases: ties (the first), NaN (never wins), -inf, empty. */
static void test_argmax(void)
{
    float x[100];
    uint64_t r = 12345;
    for (int n = 1; n <= 100; n++) {
        gp_test_uniform(x, (size_t)n, -0.5f, 0.5f, &r);
        for (int at = 0; at < n; at += 7) {
            float keep = x[at];
            x[at] = 2.0f;
            CU_ASSERT_EQUAL(gp_argmax(x, n), at);
            x[at] = keep;
        }
        int64_t best = 0;
        for (int i = 1; i < n; i++)
            if (x[i] > x[best])
                best = i;
        CU_ASSERT_EQUAL(gp_argmax(x, n), best);
    }
    float t[40];
    for (int i = 0; i < 40; i++)
        t[i] = (float)(i % 5);
    CU_ASSERT_EQUAL(gp_argmax(t, 40), 4); /* 4.0 at 4, 9, ...: the first */
    t[0] = NAN;
    t[33] = NAN;
    CU_ASSERT_EQUAL(gp_argmax(t, 40), 4);
    for (int i = 0; i < 40; i++)
        t[i] = -INFINITY;
    t[21] = NAN;
    CU_ASSERT_EQUAL(gp_argmax(t, 40), 0); /* all -inf but a NaN: the first -inf */
    t[0] = NAN;
    CU_ASSERT_EQUAL(gp_argmax(t, 40), 1);
    for (int i = 0; i < 40; i++)
        t[i] = NAN;
    CU_ASSERT_EQUAL(gp_argmax(t, 40), 0);
    CU_ASSERT_EQUAL(gp_argmax(t, 0), 0);
    CU_ASSERT_EQUAL(gp_argmax(NULL, 0), 0);
}

static void test_outputs_partial(void)
{
    gp_model *m = compile_model("examples/tiny.gplan", NULL, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char err[1024];
    CU_ASSERT_EQUAL_FATAL(gp_model_random_weights(m, 2, err, sizeof err), 0);
    gp_session *s = new_session(m, "cpu", 2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    int32_t ids[3] = {3, 4, 5}, pos[3] = {0, 1, 2};
    CU_ASSERT_EQUAL(gp_session_set_tokens(s, ids, pos, 3), 0);
    CU_ASSERT_EQUAL(gp_session_eval(s), 0);
    gp_tensor_info info;
    const float *l = gp_session_output(s, "logits", &info);
    CU_ASSERT_PTR_NOT_NULL_FATAL(l);
    CU_ASSERT_EQUAL(info.dtype, GP_F32);
    CU_ASSERT_EQUAL(info.ndim, 2);
    CU_ASSERT_EQUAL(info.ne[0], 3);
    CU_ASSERT_EQUAL(info.ne[1], 256);
    CU_ASSERT_EQUAL(info.bytes, 3 * 256 * sizeof(float));
    /* Packed rows: row 2 differs from row 0 (different token and position). */
    CU_ASSERT(memcmp(l, l + 2 * 256, 256 * sizeof *l) != 0);
    gp_session_free(s);
    gp_model_free(m);
}

/* ---- logits only for the rows asked for ---- */

/* One eval of ids[n] at positions 0..n-1 on a fresh sequence with rows[k] (NULL: set_tokens'
 * default, the last row; n_rows < 0: every row); copies the logits into out. Rows of logits, or -1
 * after printing the error. */
static int64_t rows_eval(gp_session *s, const int32_t *ids, int n, const int32_t *rows, int k,
                         float *out)
{
    int32_t pos[16];
    for (int i = 0; i < n; i++)
        pos[i] = i;
    gp_tensor_info ti;
    const float *l = NULL;
    if (gp_session_reset(s) || gp_session_set_tokens(s, ids, pos, n) ||
        (k && gp_session_set_rows(s, rows, k < 0 ? n : k)) || gp_session_eval(s) ||
        !(l = gp_session_output(s, "logits", &ti))) {
        fprintf(stderr, "\n  rows_eval: %s\n", gp_session_error(s));
        return -1;
    }
    memcpy(out, l, ti.bytes);
    return ti.ne[0];
}

static void test_rows(void)
{
    enum { V = 512, N = 5 };
    const char *defs[] = {"num_hidden_layers=2", "hidden_size=128", "intermediate_size=344",
                          "num_attention_heads=8", "num_key_value_heads=2", "vocab_size=512",
                          "max_position_embeddings=64", "n_batch=16", "n_rows=1"};
    gp_model *m = compile_model("examples/llama.gplan", defs, 8, NULL);
    gp_model *one = compile_model("examples/llama.gplan", defs, 9, NULL); /* R <= 1 */
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_PTR_NOT_NULL_FATAL(one);
    char err[1024];
    CU_ASSERT_EQUAL_FATAL(gp_model_random_weights(m, 5, err, sizeof err), 0);
    CU_ASSERT_EQUAL_FATAL(gp_model_random_weights(one, 5, err, sizeof err), 0);
    gp_model_info info, info1;
    gp_model_get_info(m, &info);
    gp_model_get_info(one, &info1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(info.rows);
    CU_ASSERT_STRING_EQUAL(info.rows, "rows");
    CU_ASSERT_STRING_EQUAL(info.rows_dim, "R");
    CU_ASSERT_EQUAL(info.max_rows, 16);
    CU_ASSERT_STRING_EQUAL(info.tokens, "tokens"); /* the embedding's ids, not the rows */
    CU_ASSERT_EQUAL(info.vocab, V);
    CU_ASSERT_EQUAL(info1.max_rows, 1);
    /* n_rows=1 plans logits and next for one row: the io region is 15 rows of logits smaller
     * (4 bytes each of vocab floats and of one i32, up to alignment). */
    int64_t saved = info.region_bytes[GP_REGION_IO] - info1.region_bytes[GP_REGION_IO];
    CU_ASSERT(saved >= 15 * V * 4 && saved <= 15 * V * 4 + 2 * 256);

    gp_session *s = new_session(m, "cpu", 2), *s1 = new_session(one, "cpu", 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s1);
    static float all[N * V], got[16 * V];
    const int32_t ids[N] = {7, 300, 12, 511, 40};
    CU_ASSERT_EQUAL_FATAL(rows_eval(s, ids, N, NULL, -1, all), N); /* every row */
    int differ = 0;
    for (int i = 1; i < N; i++)
        differ += memcmp(all, all + i * V, V * sizeof *all) != 0;
    CU_ASSERT_EQUAL(differ, N - 1);

    /* The default: the last row only, the same values; next is its argmax. */
    CU_ASSERT_EQUAL(rows_eval(s, ids, N, NULL, 0, got), 1);
    CU_ASSERT(memcmp(got, all + (N - 1) * V, V * sizeof *got) == 0);
    gp_tensor_info ni;
    const int32_t *next = gp_session_output(s, "next", &ni);
    CU_ASSERT_PTR_NOT_NULL_FATAL(next);
    CU_ASSERT_EQUAL(ni.ne[0], 1);
    CU_ASSERT_EQUAL(next[0], gp_argmax(all + (N - 1) * V, V));
    /* A plan for one row gives the same last row. */
    CU_ASSERT_EQUAL(rows_eval(s1, ids, N, NULL, 0, got), 1);
    CU_ASSERT(memcmp(got, all + (N - 1) * V, V * sizeof *got) == 0);

    /* Any subset, in any order, with repeats. */
    const int32_t pick[4] = {4, 0, 2, 2};
    CU_ASSERT_EQUAL(rows_eval(s, ids, N, pick, 4, got), 4);
    for (int i = 0; i < 4; i++)
        CU_ASSERT(memcmp(got + i * V, all + pick[i] * V, V * sizeof *got) == 0);

    /* Errors: a row outside the eval's tokens (at eval, the state untouched), too many rows,
     * none, more rows than a plan holds. */
    int32_t pos[16];
    for (int i = 0; i < 16; i++)
        pos[i] = i;
    int64_t evals = gp_session_eval_count(s);
    int32_t bad[2] = {1, N};
    CU_ASSERT_EQUAL(gp_session_set_tokens(s, ids, pos, N), 0);
    CU_ASSERT_EQUAL(gp_session_set_rows(s, bad, 2), 0);
    CU_ASSERT_EQUAL(gp_session_eval(s), -1);
    const char *e803 = "eval: rows: the rows asked for must be tokens of this eval: node ";
    CU_ASSERT_PTR_NOT_NULL(strstr(gp_session_error(s), e803));
    CU_ASSERT_PTR_NOT_NULL(strstr(gp_session_error(s), "ids[1] = 5 is out of range [0, 5)"));
    bad[1] = -1;
    CU_ASSERT_EQUAL(gp_session_set_rows(s, bad, 2), 0);
    CU_ASSERT_EQUAL(gp_session_eval(s), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(gp_session_error(s), "ids[1] = -1 is out of range [0, 5)"));
    CU_ASSERT_EQUAL(gp_session_eval_count(s), evals);
    CU_ASSERT_EQUAL(gp_session_set_rows(s, NULL, 17), -1);
    CU_ASSERT_STRING_EQUAL(gp_session_error(s), "set_rows: 17 rows asked for, the plan computes "
                           "at most 16 (R <= 16; compile with a larger bound, e.g. gplan-compile "
                           "-D n_rows=N)");
    CU_ASSERT_EQUAL(gp_session_set_rows(s, NULL, 0), -1);
    CU_ASSERT_STRING_EQUAL(gp_session_error(s), "set_rows: need at least one row");
    CU_ASSERT_EQUAL(gp_session_set_tokens(s1, ids, pos, N), 0);
    CU_ASSERT_EQUAL(gp_session_set_rows(s1, NULL, N), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(gp_session_error(s1), "5 rows asked for, the plan computes at "
                                                        "most 1 (R <= 1;"));
    /* After an error, the rows asked for again work: the state was untouched. */
    CU_ASSERT_EQUAL(rows_eval(s, ids, N, pick, 4, got), 4);
    CU_ASSERT(memcmp(got, all + 4 * V, V * sizeof *got) == 0);

    /* Evals with rows allocate nothing. */
    gp_alloc_count_start();
    int failures = 0;
    for (int i = 0; i < 20; i++) {
        int n = 1 + i % N;
        failures += gp_session_reset(s) || gp_session_set_tokens(s, ids, pos, n) ||
                    gp_session_set_rows(s, i % 2 ? NULL : pick + 1, i % 2 ? n : 1) ||
                    gp_session_eval(s);
    }
    CU_ASSERT_EQUAL(gp_alloc_count_stop(), 0);
    CU_ASSERT_EQUAL(failures, 0);
    gp_session_free(s);
    gp_session_free(s1);
    gp_model_free(m);
    gp_model_free(one);

    /* A graph without a rows input computes every row as before: "every row" is allowed, a
     * subset is not. */
    gp_model *t = compile_model("examples/tiny.gplan", NULL, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL_FATAL(gp_model_random_weights(t, 2, err, sizeof err), 0);
    gp_model_get_info(t, &info);
    CU_ASSERT_PTR_NULL(info.rows);
    CU_ASSERT_PTR_NULL(info.rows_dim);
    CU_ASSERT_EQUAL(info.max_rows, 0);
    gp_session *st = new_session(t, "cpu", 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(st);
    const int32_t tids[3] = {7, 12, 40}; /* tiny's vocabulary is 256 */
    CU_ASSERT_EQUAL(rows_eval(st, tids, 3, NULL, 0, got), 3);
    CU_ASSERT_EQUAL(rows_eval(st, tids, 3, NULL, -1, got), 3);
    CU_ASSERT_EQUAL(gp_session_set_rows(st, NULL, 2), -1);
    CU_ASSERT_EQUAL(gp_session_set_rows(st, pick, 1), -1);
    CU_ASSERT_STRING_EQUAL(gp_session_error(st), "set_rows: this graph has no rows input (it "
                           "computes every token's logits)");
    gp_session_free(st);
    gp_model_free(t);
}

/* ---- no allocation during evals ---- */

static void test_no_alloc(void)
{
    gp_model *m = compile_model("examples/tiny.gplan", NULL, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char err[1024];
    CU_ASSERT_EQUAL_FATAL(gp_model_random_weights(m, 4, err, sizeof err), 0);
    /* The counter works: creating a session allocates (regions, threads). */
    gp_alloc_count_start();
    gp_session *s = new_session(m, "cpu", 2);
    int64_t at_create = gp_alloc_count_stop();
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT(at_create >= 4);

    int32_t id = 1, pos = 0;
    int failures = 0;
    gp_alloc_count_start();
    for (int i = 0; i < 1000; i++) {
        pos = i % 64;
        if (pos == 0 && gp_session_reset(s))
            failures++;
        if (gp_session_set_tokens(s, &id, &pos, 1) || gp_session_eval(s))
            failures++;
        const float *l = gp_session_output(s, "logits", NULL);
        int64_t best = 0;
        for (int64_t v = 1; l && v < 256; v++)
            if (l[v] > l[best])
                best = v;
        id = (int32_t)best;
    }
    /* An error path allocates nothing either. */
    id = 999;
    if (gp_session_set_tokens(s, &id, &pos, 1) == 0 && gp_session_eval(s) == 0)
        failures++;
    int64_t during = gp_alloc_count_stop();
    CU_ASSERT_EQUAL(failures, 0);
    CU_ASSERT_EQUAL(during, 0);
    CU_ASSERT_EQUAL(gp_session_eval_count(s), 1000);
    CU_ASSERT_EQUAL(gp_session_backend_allocs(s), 0);
    gp_session_free(s);
    gp_model_free(m);
}

void gp_suite_runtime(void);
void gp_suite_runtime(void)
{
    static const gp_test_case tests[] = {
        {"tiny: planned CPU = reference, bit for bit", test_tiny_bitexact},
        {"gpt2 (2 layers): planned CPU = reference", test_gpt2_bitexact},
        {"llama (GQA): planned CPU = reference", test_llama_bitexact},
        {"input validation errors", test_input_errors},
        {"index checks after a passing eval at the same dims", test_index_checks_same_dims},
        {"session and model errors, model info", test_session_errors},
        {"weights: errors, in place, converted", test_weights},
        {"state: zeroed at creation, persists, reset", test_state},
        {"outputs at T < bound", test_outputs_partial},
        {"rows: the last row's logits by default, any rows on request", test_rows},
        {"no allocation in 1000 evals", test_no_alloc},
        {"gp_argmax", test_argmax},
    };
    gp_test_add_suite("runtime", NULL, NULL, tests, GP_TEST_COUNT(tests));
}
