/* CUDA tests of whole models through gp_backend_cuda: examples/tiny.gplan, Llama and GPT-2 decode
 * with each fusion on and off, against the CPU backend (suite "cuda"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_kernels.h"
#include "gplan/gplan.h"
#include "tests/cuda/cuda_tests.h"
#include "tests/cuda/cuda_testutil.h"
#include "tests/testmodel.h"
#include "tests/testutil.h"

static gp_model *tiny_model(const char *wtype)
{
    char def[32];
    snprintf(def, sizeof def, "wtype=%s", wtype);
    const char *defs[1] = {def};
    gp_test_model_opts o = {defs, 1, NULL, 1, 42};
    return gp_test_model("examples/tiny.gplan", &o, NULL);
}

static void model_parity(const char *wtype, double tol)
{
    gp_model *m = tiny_model(wtype);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char err[1024];
    gp_session_opts oc = {"cpu", 1, 0}, og = {"cuda", 1, 0};
    /* graphs are captured at creation */
    int64_t tiles0 = gp_cuda_attention_tiles_count(), epi0 = gp_cuda_blas_epilogue_count(0);
    gp_session *sc = gp_session_new(m, &oc, err, sizeof err);
    gp_session *sg = gp_session_new(m, &og, err, sizeof err);
    if (!sg)
        fprintf(stderr, "\n  cuda session: %s\n", err);
    CU_ASSERT_PTR_NOT_NULL(sc);
    CU_ASSERT_PTR_NOT_NULL(sg);
    if (sc && sg) {
        int64_t V = gp_test_vocab(m);
        float *lc = malloc(sizeof(float) * 64 * (size_t)V), *lg = malloc(sizeof(float) * 64 * (size_t)V);
        /* A 5-token prompt (bucket 8: padded launches), 3 decode steps, then 3 tokens (bucket 4),
         * then a reset and the prompt again; a reset, a 40-token prompt (bucket 64: the
         * attention in tiles), a step, 20 tokens (bucket 32). */
        const int plan[][2] = {{5, 0}, {1, 5}, {1, 6}, {1, 7}, {3, 8}, {5, 0},
                               {40, 0}, {1, 40}, {20, 41}};
        for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
            if (i == 5 || i == 6) {
                CU_ASSERT_EQUAL(gp_session_reset(sc), 0);
                CU_ASSERT_EQUAL(gp_session_reset(sg), 0);
            }
            int n = plan[i][0];
            CU_ASSERT_EQUAL_FATAL(step(sc, n, plan[i][1], lc, V), 0);
            CU_ASSERT_EQUAL_FATAL(step(sg, n, plan[i][1], lg, V), 0);
            double e = gp_test_rel_err(lg, lc, (size_t)n * (size_t)V, GP_TEST_L2);
            if (!(e <= tol))
                fprintf(stderr, "\n  tiny %s step %zu: logits error %.3g > %.3g\n", wtype, i, e, tol);
            CU_ASSERT(e <= tol);
        }
        CU_ASSERT_EQUAL(gp_session_backend_allocs(sg), 0);
        /* The attentions of buckets 32 and 64 (one per layer) are in tiles, unless switched
         * off. */
        const char *off = getenv("GPLAN_CUDA_DISABLE");
        int64_t tiles = gp_cuda_attention_tiles_count() - tiles0;
        int tiles_off = off && (strstr(off, "all") || strstr(off, "tiles"));
        CU_ASSERT(tiles_off ? tiles == 0 : tiles >= 2 * 2);
        /* and the prompts' products their epilogues (bias, gelu, residual) in one launch */
        int64_t epis = gp_cuda_blas_epilogue_count(0) - epi0;
        int epi_off = off && strstr(off, "all");
        CU_ASSERT(epi_off ? epis == 0 : epis >= 2 * 4);
        free(lc);
        free(lg);
    }
    gp_session_free(sc);
    gp_session_free(sg);
    gp_model_free(m);
}

void test_model_f32(void)
{
    model_parity("f32", 1e-4);
}

void test_model_f16(void)
{
    /* f16 weights: the prompt's activations are converted to f16 for cuBLAS */
    model_parity("f16", 5e-3);
}

/* The same with every fusion off, then with programmatic dependent launches on and off (switched
 * by the environment at session creation). */
void test_model_switches(void)
{
    setenv("GPLAN_CUDA_DISABLE", "all", 1);
    model_parity("f16", 5e-3);
    unsetenv("GPLAN_CUDA_DISABLE");
    const char *pdl = getenv("GPLAN_CUDA_PDL");
    char saved[16] = "";
    if (pdl)
        snprintf(saved, sizeof saved, "%s", pdl);
    setenv("GPLAN_CUDA_PDL", "1", 1);
    model_parity("f32", 1e-4);
    setenv("GPLAN_CUDA_PDL", "0", 1);
    model_parity("f32", 1e-4);
    if (pdl)
        setenv("GPLAN_CUDA_PDL", saved, 1);
    else
        unsetenv("GPLAN_CUDA_PDL");
}

/* 1 when the plan has no output "next", or its t rows are the argmax of the t rows of logits l. */
static int next_agrees(gp_session *s, const float *l, int t, int64_t V)
{
    const int32_t *nx = gp_session_output(s, "next", NULL);
    for (int r = 0; nx && r < t; r++)
        if (nx[r] != gp_argmax(l + (size_t)r * (size_t)V, V))
            return 0;
    return 1;
}

/*
 * A model through a prompt, one-token steps past 16 cache rows, a 3-token eval and more steps, on a
 * CUDA session with a fusion on (on_var=on_val), one with it off (off_var=off_val) and the CPU: the
 * same logits (on against off within tol, against the CPU within tol_cpu: 1e-4 each for f32
 * weights), and each session's "next" (when the plan has it) their argmax; count(), what that
 * fusion enqueued in this process, grew by at least min_on while the session with it on was
 * created and not at all for the one with it off.
 */
static void decode_on_vs_off(const char *example, const char *const *defs, int n_defs,
                             const char *on_var, const char *on_val, const char *off_var,
                             const char *off_val, int64_t (*count)(void), int64_t min_on,
                             double tol, double tol_cpu)
{
    gp_test_model_opts o = {defs, n_defs, NULL, 1, 42};
    gp_model *m = gp_test_model(example, &o, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char err[1024];
    gp_session_opts oc = {"cpu", 1, 0};
    int64_t c0 = count();
    gp_session *off = session_with(m, off_var, off_val);
    int64_t c1 = count();
    gp_session *on = session_with(m, on_var, on_val);
    int64_t c2 = count();
    gp_session *cpu = gp_session_new(m, &oc, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL(off);
    CU_ASSERT_PTR_NOT_NULL(on);
    CU_ASSERT_PTR_NOT_NULL(cpu);
    CU_ASSERT_EQUAL(c1, c0);
    CU_ASSERT(c2 - c1 >= min_on);
    if (getenv("GPLAN_TEST_VERBOSE") && (c1 != c0 || c2 - c1 < min_on))
        fprintf(stderr, "\n  %s %s=%s: counted %lld with it off, %lld on (at least %lld)\n",
                example, off_var ? off_var : "-", off_val ? off_val : "-", (long long)(c1 - c0),
                (long long)(c2 - c1), (long long)min_on);
    if (off && on && cpu) {
        int64_t V = gp_test_vocab(m);
        size_t n = 8 * (size_t)V;
        float *l_on = malloc(sizeof(float) * n), *l_off = malloc(sizeof(float) * n);
        float *l_cpu = malloc(sizeof(float) * n);
        int start = 0;
        for (int i = 0; i < 26; i++) {
            int t = i == 0 ? 5 : i == 20 ? 3 : 1;
            CU_ASSERT_EQUAL_FATAL(step(on, t, start, l_on, V), 0);
            CU_ASSERT_EQUAL_FATAL(step(off, t, start, l_off, V), 0);
            CU_ASSERT_EQUAL_FATAL(step(cpu, t, start, l_cpu, V), 0);
            CU_ASSERT(next_agrees(on, l_on, t, V));
            CU_ASSERT(next_agrees(off, l_off, t, V));
            CU_ASSERT(next_agrees(cpu, l_cpu, t, V));
            double e = gp_test_rel_err(l_on, l_off, (size_t)t * (size_t)V, GP_TEST_L2);
            double ec = gp_test_rel_err(l_on, l_cpu, (size_t)t * (size_t)V, GP_TEST_L2);
            if (!(e <= tol && ec <= tol_cpu))
                fprintf(stderr, "\n  %s %s=%s step %d (%d tokens at %d): on vs off %.3g, vs CPU %.3g\n",
                        example, on_var ? on_var : off_var, on_var ? on_val : off_val, i, t, start,
                        e, ec);
            CU_ASSERT(e <= tol);
            CU_ASSERT(ec <= tol_cpu);
            start += t;
        }
        CU_ASSERT_EQUAL(gp_session_backend_allocs(on), 0);
        free(l_on);
        free(l_off);
        free(l_cpu);
    }
    gp_session_free(cpu);
    gp_session_free(on);
    gp_session_free(off);
    gp_model_free(m);
}

/* The decode models the fusion tests run: Llama (grouped-query heads) and GPT-2 with two layers,
 * f32 and f16 caches (the new rows rounded as the stores round them), and one layer at TinyLlama's
 * widths (K = 5632 rows: there a planner that did not keep an attention's workspace live from the
 * ropes and stores it may absorb would lay it over k and v). */
#define TINY_LLAMA                                                                                 \
    "num_hidden_layers=2", "hidden_size=256", "intermediate_size=256", "num_attention_heads=4",    \
        "num_key_value_heads=2", "vocab_size=512", "max_position_embeddings=64", "n_batch=64",     \
        "wtype=f32"

#define TINY_GPT2                                                                                  \
    "n_layer=2", "n_embd=128", "n_head=4", "vocab_size=512", "n_positions=64", "wtype=f32"

typedef struct {
    const char *example;
    const char *defs[10];
    int n_defs, n_layer;
} decode_case;

static const decode_case decode_cases[] = {
    {"examples/llama.gplan", {TINY_LLAMA, "kv_type=f32"}, 10, 2},
    {"examples/gpt2.gplan", {TINY_GPT2, "kv_type=f32"}, 7, 2},
    {"examples/llama.gplan",
     {"num_hidden_layers=1", "hidden_size=2048", "intermediate_size=5632", "num_attention_heads=32",
      "num_key_value_heads=4", "vocab_size=512", "max_position_embeddings=64", "n_batch=512",
      "wtype=f32", "kv_type=f32"},
     10, 1},
    {"examples/llama.gplan", {TINY_LLAMA, "kv_type=f16"}, 10, 2},
    {"examples/gpt2.gplan", {TINY_GPT2, "kv_type=f16"}, 7, 2},
};

/*
 * A prompt's attention in tiles on tensor cores (the default for f16 caches), in f32 tiles
 * (GPLAN_CUDA_DISABLE=tensor) and one block per query (=tiles), against the CPU: a 40-token
 * prompt (bucket 64), a step, 20 tokens (bucket 32), a step, with f16 caches (Llama's grouped
 * heads and ropes, GPT-2). Every session's graphs are captured at its creation: the tensor-core
 * kernel is in those of buckets 32 and 64 of the first session only, for every layer.
 */
void test_model_prompt_tiles(void)
{
    static const char *const off[3] = {NULL, "tensor", "tiles"};
    for (size_t c = 0; c < sizeof decode_cases / sizeof decode_cases[0]; c++) {
        const decode_case *dc = &decode_cases[c];
        if (strcmp(dc->defs[dc->n_defs - 1], "kv_type=f16"))
            continue;
        gp_test_model_opts o = {dc->defs, dc->n_defs, NULL, 1, 42};
        gp_model *m = gp_test_model(dc->example, &o, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        char err[1024];
        gp_session_opts oc = {"cpu", 1, 0};
        gp_session *s[3], *cpu = gp_session_new(m, &oc, err, sizeof err);
        int64_t made[3];
        for (int i = 0; i < 3; i++) {
            int64_t m0 = gp_cuda_attention_mma_count();
            s[i] = session_with(m, off[i] ? "GPLAN_CUDA_DISABLE" : NULL, off[i]);
            made[i] = gp_cuda_attention_mma_count() - m0;
            CU_ASSERT_PTR_NOT_NULL_FATAL(s[i]);
        }
        CU_ASSERT(made[0] >= 2 * dc->n_layer);
        CU_ASSERT_EQUAL(made[1], 0);
        CU_ASSERT_EQUAL(made[2], 0);
        CU_ASSERT_PTR_NOT_NULL_FATAL(cpu);
        int64_t V = gp_test_vocab(m);
        size_t bytes = sizeof(float) * 40 * (size_t)V;
        float *lc = malloc(bytes), *lg = malloc(bytes);
        const int plan[][2] = {{40, 0}, {1, 40}, {20, 41}, {1, 61}};
        for (size_t p = 0; p < sizeof plan / sizeof plan[0]; p++) {
            int n = plan[p][0];
            CU_ASSERT_EQUAL_FATAL(step(cpu, n, plan[p][1], lc, V), 0);
            for (int i = 0; i < 3; i++) {
                CU_ASSERT_EQUAL_FATAL(step(s[i], n, plan[p][1], lg, V), 0);
                double e = gp_test_rel_err(lg, lc, (size_t)n * (size_t)V, GP_TEST_L2);
                if (!(e <= 1e-4))
                    fprintf(stderr, "\n  %s prompt tiles (off: %s) step %zu: vs CPU %.3g\n",
                            dc->example, off[i] ? off[i] : "-", p, e);
                CU_ASSERT(e <= 1e-4);
            }
        }
        for (int i = 0; i < 3; i++) {
            CU_ASSERT_EQUAL(gp_session_backend_allocs(s[i]), 0);
            gp_session_free(s[i]);
        }
        free(lc);
        free(lg);
        gp_session_free(cpu);
        gp_model_free(m);
    }
}

/* attnfuse: the one-token attention fused (the default) or not; enqueued for every layer. */
void test_model_attnfuse(void)
{
    for (size_t i = 0; i < sizeof decode_cases / sizeof decode_cases[0]; i++) {
        const decode_case *c = &decode_cases[i];
        decode_on_vs_off(c->example, c->defs, c->n_defs, NULL, NULL, "GPLAN_CUDA_DISABLE",
                         "attnfuse", gp_cuda_attention_decode_count, c->n_layer, 1e-4, 1e-4);
    }
}

/*
 * "copies": an eval's sizes and inputs go to the device in one copy, and GPT-2's next and logits
 * reach the host from the argmax's kernel, with no copy (the default), or all in copies of their
 * own (GPLAN_CUDA_DISABLE=copies): the same logits and tokens, and the CPU's. Eager evals
 * (GPLAN_CUDA_GRAPHS=0) enqueue their copies at every eval: one a GPT-2 eval with it on, whatever
 * the token count, and five with it off (the sizes, tokens, pos, logits, next).
 */
static int64_t merged_copies(void)
{
    return gp_cuda_copies_count(1);
}

void test_model_copies(void)
{
    for (size_t i = 0; i < sizeof decode_cases / sizeof decode_cases[0]; i++) {
        const decode_case *c = &decode_cases[i];
        decode_on_vs_off(c->example, c->defs, c->n_defs, NULL, NULL, "GPLAN_CUDA_DISABLE",
                         "copies", merged_copies, 2, 1e-4, 1e-4);
    }
    const decode_case *c = &decode_cases[1];
    gp_test_model_opts o = {c->defs, c->n_defs, NULL, 1, 42};
    gp_model *m = gp_test_model(c->example, &o, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    gp_model_info info;
    gp_model_get_info(m, &info);
    float *l = malloc(sizeof(float) * 8 * (size_t)info.vocab);
    CU_ASSERT_PTR_NOT_NULL_FATAL(l);
    setenv("GPLAN_CUDA_GRAPHS", "0", 1);
    for (int on = 1; on >= 0; on--) {
        gp_session *s = session_with(m, on ? NULL : "GPLAN_CUDA_DISABLE", "copies");
        CU_ASSERT_PTR_NOT_NULL(s);
        static const int tokens[4] = {5, 1, 1, 3};
        for (int k = 0, start = 0; s && k < 4; start += tokens[k++]) {
            int64_t c0 = gp_cuda_copies_count(0);
            CU_ASSERT_EQUAL(step(s, tokens[k], start, l, info.vocab), 0);
            /* merged: one copy; apart: one per input and output, and the runtime dims */
            CU_ASSERT_EQUAL(gp_cuda_copies_count(0) - c0,
                            on ? 1 : info.n_inputs + info.n_outputs + 1);
            CU_ASSERT(next_agrees(s, l, tokens[k], info.vocab));
        }
        gp_session_free(s);
    }
    unsetenv("GPLAN_CUDA_GRAPHS");
    free(l);
    gp_model_free(m);
}

/* qkvatt: GPT-2 heads of 64 with 16-bit weights compute c_attn inside the one-token attention
 * (with atthead off: by default the attention runs in one block a head, c_attn before it) or not;
 * enqueued for every layer. The CPU reference is looser with 16-bit weights (prompts go through
 * cuBLAS in f16), and with an f16 cache, where a new row rounds either way. */
void test_model_qkvatt(void)
{
    static const char *const defs[][7] = {
        {"n_layer=2", "n_embd=128", "n_head=2", "vocab_size=512", "n_positions=64", "wtype=f16",
         "kv_type=f32"},
        {"n_layer=1", "n_embd=1280", "n_head=20", "vocab_size=512", "n_positions=64",
         "wtype=bf16", "kv_type=f16"}};
    for (int i = 0; i < 2; i++)
        decode_on_vs_off("examples/gpt2.gplan", defs[i], 7, "GPLAN_CUDA_DISABLE", "atthead",
                         "GPLAN_CUDA_DISABLE", "atthead,qkvatt", gp_cuda_qkv_attention_count,
                         i ? 1 : 2, i ? 5e-3 : 1e-4, i ? 1e-2 : 2e-3);
}

/* Two GPT-2 layers of heads of 64, f16 weights and an f32 cache. */
static const char *const gpt2_heads64[7] = {"n_layer=2", "n_embd=128", "n_head=2",
                                            "vocab_size=512", "n_positions=64", "wtype=f16",
                                            "kv_type=f32"};

/* One GPT-2 layer 1280 wide, bf16 weights and an f16 cache. */
static const char *const gpt2_wide[7] = {"n_layer=1", "n_embd=1280", "n_head=20", "vocab_size=512",
                                         "n_positions=64", "wtype=bf16", "kv_type=f16"};

/* decode_on_vs_off for each GPT-2 model of decode_cases (f32 weights, within 1e-4), with
 * environment variable var=off in one session and var=on in the other (on NULL: var unset), and
 * count() growing by at least per_layer a layer, less `less`, with it on. */
static void gpt2_cases_on_vs_off(const char *var, const char *on, const char *off,
                                 int64_t (*count)(void), int per_layer, int less)
{
    for (size_t i = 0; i < sizeof decode_cases / sizeof decode_cases[0]; i++) {
        const decode_case *c = &decode_cases[i];
        if (strstr(c->example, "gpt2"))
            decode_on_vs_off(c->example, c->defs, c->n_defs, on ? var : NULL, on, var, off, count,
                             per_layer * c->n_layer - less, 1e-4, 1e-4);
    }
}

/* gpt2_cases_on_vs_off, then two layers of heads of 64 with f16 weights and a 1280-wide layer of
 * bf16 weights (tolerances for 16-bit weights), count() growing by at least n64 and nwide. */
static void gpt2_all_on_vs_off(const char *var, const char *on, const char *off,
                               int64_t (*count)(void), int per_layer, int less, int n64,
                               int nwide)
{
    gpt2_cases_on_vs_off(var, on, off, count, per_layer, less);
    decode_on_vs_off("examples/gpt2.gplan", gpt2_heads64, 7, on ? var : NULL, on, var, off, count,
                     n64, 1e-4, 2e-3);
    decode_on_vs_off("examples/gpt2.gplan", gpt2_wide, 7, on ? var : NULL, on, var, off, count,
                     nwide, 5e-3, 1e-2);
}

/* atomic: GPT-2's c_proj and mlp.c_proj, added into the residual in place, add their splits with
 * atomics (the default) or combine them in a cluster; both for every layer, f32 and f16 caches,
 * and a 1280-wide layer of bf16 weights. Llama's o and down ([N, K] weights) take other kernels. */
void test_model_atomic(void)
{
    gpt2_cases_on_vs_off("GPLAN_CUDA_DISABLE", NULL, "atomic", gp_cuda_matvec_add_count, 2, 0);
    decode_on_vs_off("examples/gpt2.gplan", gpt2_wide, 7, NULL, NULL, "GPLAN_CUDA_DISABLE",
                     "atomic", gp_cuda_matvec_add_count, 2, 5e-3, 1e-2);
}

/* fold: the layer norms before GPT-2's c_attn and c_fc folded into their one-row products (the
 * default) against the same model unfolded and the CPU: f32 weights, f32 and f16 caches; f16
 * weights with qkvatt off (c_attn in the matvec); a 1280-wide layer of bf16 weights with atthead
 * off, where qkvatt takes c_attn and normalizes x itself, and only c_fc folds. */
void test_model_fold(void)
{
    gpt2_cases_on_vs_off("GPLAN_CUDA_DISABLE", NULL, "fold", gp_cuda_matvec_fold_count, 2, 0);
    decode_on_vs_off("examples/gpt2.gplan", gpt2_heads64, 7, "GPLAN_CUDA_DISABLE", "qkvatt",
                     "GPLAN_CUDA_DISABLE", "qkvatt,fold", gp_cuda_matvec_fold_count, 4, 1e-4, 2e-3);
    int64_t q0 = gp_cuda_qkv_attention_count();
    decode_on_vs_off("examples/gpt2.gplan", gpt2_wide, 7, "GPLAN_CUDA_DISABLE", "atthead",
                     "GPLAN_CUDA_DISABLE", "atthead,fold", gp_cuda_matvec_fold_count, 1, 5e-3,
                     1e-2);
    CU_ASSERT(gp_cuda_qkv_attention_count() - q0 >= 2); /* c_attn in qkvatt, on and off */
}

static int64_t acc_count(void)
{
    return gp_cuda_matvec_acc_count(0);
}

/* accum: GPT-2's c_attn and c_fc add their splits into outputs the matmul before them zeroed
 * (c_fc leaving its gelu to mlp.c_proj), or not, against the CPU: every layer's c_fc and every
 * c_attn but the first layer's (no matmul before it), f32 and f16 caches; with qkvatt (c_fc only)
 * at head dims 64, f16 weights, and in a 1280-wide layer of bf16 weights. */
void test_model_accum(void)
{
    gpt2_all_on_vs_off("GPLAN_CUDA_DISABLE", NULL, "accum", acc_count, 1, 0, 2, 1);
}

static int64_t typed_count(void)
{
    return gp_cuda_matvec_typed_count() + gp_cuda_attention_typed_count() +
           gp_cuda_ops_typed_count();
}

/* atttyped, kctyped and optyped: the instances of the one-token attention (qkvatt too; atthead
 * off, so that the attention runs its cluster kernel), of the adding [K, N] matvecs and of the
 * norms and lookups for their operands' dtypes (the default) against the generic kernels and the
 * CPU:
 * GPT-2 with f32 weights, f32 and f16 caches (the attention and at least one product a layer);
 * f16 weights with qkvatt at head dims 64 and an f32 cache; a 1280-wide layer of bf16 weights and
 * an f16 cache. */
void test_model_typed(void)
{
    gpt2_all_on_vs_off("GPLAN_CUDA_DISABLE", "atthead", "atthead,atttyped,kctyped,optyped",
                       typed_count, 2, 0, 4, 2);
}

/* atthead: GPT-2's one-token attentions in one block a head (k_attention_head; the default,
 * where qkvatt is not planned) against the cluster kernel (qkvatt off too) and the CPU, one a
 * layer: f32 weights with f32 and f16 caches, heads of 64 with f16 weights and an f32 cache, a
 * 1280-wide layer of bf16 weights and an f16 cache. */
void test_model_atthead(void)
{
    gpt2_all_on_vs_off("GPLAN_CUDA_DISABLE", NULL, "atthead,qkvatt",
                       gp_cuda_attention_head_count, 1, 0, 2, 1);
}

/* atthead past the rows it loads early: one-token evals at later positions replay a graph with
 * the split attention instead (gp_cuda_long_evals counts them). GPT-2 with heads of 64 and f32
 * weights, an f16 cache (256 rows early) after a 250-token prompt and an f32 cache (128 rows)
 * after 120 (in evals of at most 64 tokens), then 12 steps each: logits against the CPU's every
 * step, and exactly the steps at or past those rows counted, none with atthead off. */
void test_model_atthead_long(void)
{
    static const char *const defs[2][7] = {
        {"n_layer=2", "n_embd=128", "n_head=2", "vocab_size=512", "n_positions=320", "wtype=f32",
         "kv_type=f16"},
        {"n_layer=2", "n_embd=128", "n_head=2", "vocab_size=512", "n_positions=160", "wtype=f32",
         "kv_type=f32"}};
    const int prompt[2] = {250, 120}, rows[2] = {256, 128};
    for (int c = 0; c < 2; c++) {
        gp_test_model_opts o = {defs[c], 7, NULL, 1, 42};
        gp_model *m = gp_test_model("examples/gpt2.gplan", &o, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        char err[1024];
        gp_session_opts oc = {"cpu", 1, 0};
        gp_session *on = session_with(m, NULL, NULL);
        gp_session *off = session_with(m, "GPLAN_CUDA_DISABLE", "atthead");
        gp_session *cpu = gp_session_new(m, &oc, err, sizeof err);
        CU_ASSERT_PTR_NOT_NULL_FATAL(on);
        CU_ASSERT_PTR_NOT_NULL_FATAL(off);
        CU_ASSERT_PTR_NOT_NULL_FATAL(cpu);
        int64_t V = gp_test_vocab(m);
        size_t n = 64 * (size_t)V; /* gp_test_eval_tokens' most tokens an eval */
        float *l_on = malloc(sizeof(float) * n), *l_cpu = malloc(sizeof(float) * n);
        int start = 0, longs = 0;
        for (int i = 0; start < prompt[c] + 12; i++) {
            int t = start < prompt[c] ? (prompt[c] - start < 64 ? prompt[c] - start : 64) : 1;
            CU_ASSERT_EQUAL_FATAL(step(cpu, t, start, l_cpu, V), 0);
            int64_t l0 = gp_cuda_long_evals();
            CU_ASSERT_EQUAL_FATAL(step(off, t, start, l_on, V), 0);
            CU_ASSERT_EQUAL(gp_cuda_long_evals(), l0);
            CU_ASSERT_EQUAL_FATAL(step(on, t, start, l_on, V), 0);
            int is_long = t == 1 && start >= rows[c];
            longs += is_long;
            CU_ASSERT_EQUAL(gp_cuda_long_evals(), l0 + is_long);
            CU_ASSERT(next_agrees(on, l_on, t, V));
            double e = gp_test_rel_err(l_on, l_cpu, (size_t)t * (size_t)V, GP_TEST_L2);
            if (!(e <= 1e-4))
                fprintf(stderr, "\n  atthead long: case %d step %d (%d tokens at %d): %.3g\n", c, i,
                        t, start, e);
            CU_ASSERT(e <= 1e-4);
            start += t;
        }
        CU_ASSERT_EQUAL(longs, prompt[c] + 12 - rows[c]);
        CU_ASSERT_EQUAL(gp_session_backend_allocs(on), 0);
        free(l_on);
        free(l_cpu);
        gp_session_free(cpu);
        gp_session_free(off);
        gp_session_free(on);
        gp_model_free(m);
    }
}

/* Early triggers (plan_trig): the [K, N] products whose next launch is a product let it start at
 * their own start (GPLAN_CUDA_TRIG=0: whatever its size; by default only past 8 MiB of weights,
 * which these models don't reach) or not (none), against the CPU: GPT-2's c_proj, c_fc and
 * mlp.c_proj (the last layer's at least before the LM head), f32 and f16 caches, heads of 64
 * with f16 weights and a 1280-wide layer of bf16 weights. */
void test_model_trig(void)
{
    gpt2_all_on_vs_off("GPLAN_CUDA_TRIG", "0", "none", gp_cuda_matvec_trig_count, 3, 1, 5, 2);
}

/* The one-token attention in one block a head lets c_proj start at its start when c_proj does
 * so for c_fc (threshold 0 MiB: every layer's), or not (none), against the CPU: the cases of
 * test_model_atthead. */
void test_model_atttrig(void)
{
    gpt2_all_on_vs_off("GPLAN_CUDA_TRIG", "0", "none", gp_cuda_attention_trig_count, 1, 0, 2, 1);
}

/* A plan with a moe node (routed experts, no CUDA kernel yet) is refused at session creation
 * with the node named, before any device is touched: on a host without a GPU too. */
void test_model_refuses_moe(void)
{
    const char *defs[] = {"num_hidden_layers=1", "hidden_size=64", "moe_intermediate_size=32",
                          "num_experts=4", "num_experts_per_tok=2", "num_attention_heads=4",
                          "num_key_value_heads=2", "head_dim=16", "vocab_size=64",
                          "max_position_embeddings=32", "n_batch=4"};
    gp_test_model_opts o = {defs, (int)(sizeof defs / sizeof defs[0]), NULL, 1, 3};
    gp_model *m = gp_test_model("examples/qwen3moe.gplan", &o, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char err[1024] = "";
    gp_session_opts og = {"cuda", 1, 0};
    gp_session *s = gp_session_new(m, &og, err, sizeof err);
    CU_ASSERT_PTR_NULL(s);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "cuda: node "));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, " (moe -> "));
    /* docs/errors.md E704 (tests/cli/errors.sh greps this line) */
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "the CUDA backend has no kernel for moe (routed experts) yet; run this plan on the CPU backend"));
    if (!strstr(err, "no kernel for moe"))
        fprintf(stderr, "\n  got: %s\n", err);
    gp_session_free(s);
    gp_model_free(m);
}
