/* CUDA tests of LoRA's runtime mode: adapters rebound in a live session, branches merged into the
 * products, against the CPU backend (suite "cuda"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CUnit/CUnit.h>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_kernels.h"
#include "gplan/gplan.h"
#include "weights/safetensors.h"
#include "tests/cuda/cuda_tests.h"
#include "tests/cuda/cuda_testutil.h"
#include "tests/testmodel.h"
#include "tests/testutil.h"

/* Runtime-mode LoRA: adapters bound into a live CUDA session between evals (no new session, no
 * replanning) give what the CPU backend, which reads the slots in place, gives. */
void test_lora_rebind(void)
{
    char err[1024], config[1024], adapter[1024];
    snprintf(config, sizeof config, "%s", gp_test_path("tests/parity/gpt2/config.json"));
    snprintf(adapter, sizeof adapter, "%s", gp_test_path("tests/parity/gpt2_lora"));
    const char *defs[] = {"lora_r=4"};
    gp_test_model_opts mo = {defs, 1, config, 1, 5};
    gp_model *m = gp_test_model("examples/gpt2.gplan", &mo, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    gp_session_opts oc = {"cpu", 1, 0}, og = {"cuda", 1, 0};
    gp_session *sc = gp_session_new(m, &oc, err, sizeof err);
    gp_session *sg = gp_session_new(m, &og, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sc);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sg);
    int64_t V = gp_test_vocab(m);
    float *lc = malloc(sizeof(float) * 8 * (size_t)V), *lg = malloc(sizeof(float) * 8 * (size_t)V);
    float *base = malloc(sizeof(float) * 8 * (size_t)V);
    /* No adapter (zero slots), then the adapter at scale 1, then at scale 0.5, then none again:
     * each on the same two sessions, each a 4-token prompt from position 0. */
    const double scales[] = {0, 1, 0.5, 0};
    for (int k = 0; k < 4; k++) {
        if (k > 0) {
            CU_ASSERT_EQUAL(gp_model_bind_adapter(m, adapter, scales[k], err, sizeof err), 0);
            CU_ASSERT_EQUAL(gp_session_reset(sc), 0);
            CU_ASSERT_EQUAL(gp_session_reset(sg), 0);
        }
        CU_ASSERT_EQUAL_FATAL(step(sc, 4, 0, lc, V), 0);
        CU_ASSERT_EQUAL_FATAL(step(sg, 4, 0, lg, V), 0);
        double e = gp_test_rel_err(lg, lc, 4 * (size_t)V, GP_TEST_L2);
        if (!(e <= 1e-4))
            fprintf(stderr, "\n  lora rebind %d (scale %g): CUDA vs CPU %.3g\n", k, scales[k], e);
        CU_ASSERT(e <= 1e-4);
        if (k == 0)
            memcpy(base, lc, sizeof(float) * 4 * (size_t)V);
        /* the adapter did something, or not */
        double moved = gp_test_rel_err(lc, base, 4 * (size_t)V, GP_TEST_L2);
        CU_ASSERT(scales[k] == 0 ? moved == 0 : moved > 1e-3);
    }
    CU_ASSERT_EQUAL(gp_session_backend_allocs(sg), 0);
    free(lc);
    free(lg);
    free(base);
    gp_session_free(sc);
    gp_session_free(sg);
    gp_model_free(m);
}

/*
 * LoRA runtime mode folded into the products (the backend's "lora"): GPT-2 with branches of rank
 * R on every projection, an adapter of random A and B bound before the sessions exist, then
 * another at half the scale between evals. The merged path (the default), the branches launched
 * as nodes ("lora" off) and the CPU give the same logits; merged, a one-token eval launches what
 * the plan without branches launches (eager evals count their kernels), 4 branches a layer.
 */
enum { LORA_LAYERS = 2, LORA_EMBD = 128 };

/* An adapter of rank r for GPT-2's four projections in dir (PEFT's names and layout: A [r, in],
 * B [out, r], f32), lora_alpha = r (scale 1); values uniform in [-0.1, 0.1) from seed. */
static void write_gpt2_adapter(const char *dir, int64_t r, uint32_t seed)
{
    static const char *const mods[4] = {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};
    const int64_t in[4] = {LORA_EMBD, LORA_EMBD, LORA_EMBD, 4 * LORA_EMBD};
    const int64_t out[4] = {3 * LORA_EMBD, LORA_EMBD, 4 * LORA_EMBD, LORA_EMBD};
    gp_st_tensor ts[2 * 4 * LORA_LAYERS];
    char names[2 * 4 * LORA_LAYERS][96];
    float *data[2 * 4 * LORA_LAYERS];
    memset(ts, 0, sizeof ts);
    int n = 0;
    for (int l = 0; l < LORA_LAYERS; l++)
        for (int k = 0; k < 4; k++)
            for (int ab = 0; ab < 2; ab++, n++) {
                int64_t d0 = ab ? out[k] : r, d1 = ab ? r : in[k];
                snprintf(names[n], sizeof names[n],
                         "base_model.model.transformer.h.%d.%s.lora_%c.weight", l, mods[k],
                         ab ? 'B' : 'A');
                data[n] = malloc(sizeof(float) * (size_t)(d0 * d1));
                CU_ASSERT_PTR_NOT_NULL_FATAL(data[n]);
                for (int64_t i = 0; i < d0 * d1; i++) {
                    seed = seed * 1664525u + 1013904223u;
                    data[n][i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 0.2f;
                }
                ts[n].name = names[n];
                ts[n].dtype = GP_F32;
                ts[n].ndim = 2;
                ts[n].shape[0] = d0;
                ts[n].shape[1] = d1;
                ts[n].data = data[n];
                ts[n].nbytes = sizeof(float) * (size_t)(d0 * d1);
            }
    char path[700], err[512], cfg[256];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    int rc = gp_st_write(path, ts, n, NULL, err, sizeof err);
    if (rc)
        fprintf(stderr, "\n  %s\n", err);
    CU_ASSERT_EQUAL(rc, 0);
    for (int k = 0; k < n; k++)
        free(data[k]);
    snprintf(cfg, sizeof cfg,
             "{\"peft_type\": \"LORA\", \"r\": %lld, \"lora_alpha\": %lld, \"target_modules\": "
             "[\"c_attn\", \"c_proj\", \"c_fc\"], \"fan_in_fan_out\": true}",
             (long long)r, (long long)r);
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    CU_ASSERT_EQUAL(gp_test_write_file(path, cfg, strlen(cfg)), 0);
}

/* What one eager one-token eval launches and which fusions its launches take, as the backend's
 * counters count them: the kernels, then products adding into zeroed outputs, [K, N] matvecs
 * staging gelu(x), x made gelu(x) in place, products adding with atomics, folded norms, early
 * triggers, typed instances (products, attentions, ops), attentions in one launch, in one block
 * a head, computing their q, k and v, and cuBLAS epilogues. */
enum { N_FUSION_COUNTS = 15 };

static const char *const fusion_count_names[N_FUSION_COUNTS] = {
    "launches", "accum", "x_gelu staged", "gelu in place", "atomic", "fold", "trig",
    "kc typed", "attention typed", "ops typed", "attnfuse", "atthead", "qkvatt",
    "cuBLAS epilogues", "attention trig"};

static void fusion_counts(int64_t *c)
{
    int64_t v[N_FUSION_COUNTS] = {gp_cuda_launch_count(),
                                  gp_cuda_matvec_acc_count(0),
                                  gp_cuda_matvec_acc_count(1),
                                  gp_cuda_matvec_acc_count(2),
                                  gp_cuda_matvec_add_count(),
                                  gp_cuda_matvec_fold_count(),
                                  gp_cuda_matvec_trig_count(),
                                  gp_cuda_matvec_typed_count(),
                                  gp_cuda_attention_typed_count(),
                                  gp_cuda_ops_typed_count(),
                                  gp_cuda_attention_decode_count(),
                                  gp_cuda_attention_head_count(),
                                  gp_cuda_qkv_attention_count(),
                                  gp_cuda_blas_epilogue_count(0),
                                  gp_cuda_attention_trig_count()};
    memcpy(c, v, sizeof v);
}

/* fusion_counts' growth over one eager one-token eval of a fresh CUDA session of m (after a
 * 3-token prompt), with environment variable var = val at creation (var NULL: as it is); every
 * count -1 when it failed. */
static void one_token_counts(gp_model *m, const char *var, const char *val, int64_t vocab,
                             int64_t *n)
{
    float *l = malloc(sizeof(float) * 4 * (size_t)vocab);
    setenv("GPLAN_CUDA_GRAPHS", "0", 1);
    gp_session *s = session_with(m, var, val);
    unsetenv("GPLAN_CUDA_GRAPHS");
    int64_t c0[N_FUSION_COUNTS];
    for (int k = 0; k < N_FUSION_COUNTS; k++)
        n[k] = -1;
    if (s && l && step(s, 3, 0, l, vocab) == 0) {
        fusion_counts(c0);
        if (step(s, 1, 3, l, vocab) == 0) {
            fusion_counts(n);
            for (int k = 0; k < N_FUSION_COUNTS; k++)
                n[k] -= c0[k];
        }
    }
    gp_session_free(s);
    free(l);
}

/* The kernels one eager one-token eval of a fresh CUDA session of m launches (one_token_counts). */
static int64_t one_token_launches(gp_model *m, const char *var, const char *val, int64_t vocab)
{
    int64_t n[N_FUSION_COUNTS];
    one_token_counts(m, var, val, vocab, n);
    return n[0];
}

/* Asserts that one-token evals of m (LoRA branches, merged) launch what those of base (no
 * branches) launch, fusion by fusion; what (the case) names them when they do not. nb: base's
 * counts. */
static void assert_same_fusions(gp_model *m, gp_model *base, int64_t vocab, const char *what,
                                int64_t *nb)
{
    int64_t nm[N_FUSION_COUNTS];
    one_token_counts(base, NULL, NULL, vocab, nb);
    one_token_counts(m, NULL, NULL, vocab, nm);
    CU_ASSERT(nb[0] > 0);
    for (int k = 0; k < N_FUSION_COUNTS; k++) {
        if (nm[k] != nb[k])
            fprintf(stderr, "\n  %s: %s %lld a token merged, %lld without branches\n", what,
                    fusion_count_names[k], (long long)nm[k], (long long)nb[k]);
        CU_ASSERT_EQUAL(nm[k], nb[k]);
    }
}

static void lora_case(const char *wtype, int64_t r, double tol)
{
    char defs_r[32], wdef[32], err[1024];
    snprintf(defs_r, sizeof defs_r, "lora_r=%lld", (long long)r);
    snprintf(wdef, sizeof wdef, "wtype=%s", wtype);
    const char *defs[8] = {"n_layer=2", "n_embd=128", "n_head=4", "vocab_size=512",
                           "n_positions=64", "kv_type=f32", wdef, defs_r};
    gp_test_model_opts mo = {defs, 8, NULL, 1, 11}, mb = {defs, 7, NULL, 1, 11};
    gp_model *m = gp_test_model("examples/gpt2.gplan", &mo, NULL);
    gp_model *base = gp_test_model("examples/gpt2.gplan", &mb, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_PTR_NOT_NULL_FATAL(base);
    char dir[600];
    snprintf(dir, sizeof dir, "%s", gp_test_tmpfile(".lora"));
    CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0755), 0);
    write_gpt2_adapter(dir, r, 7u + (uint32_t)r);
    CU_ASSERT_EQUAL(gp_model_bind_adapter(m, dir, 1.0, err, sizeof err), 0);
    int64_t V = gp_test_vocab(m);
    gp_session_opts oc = {"cpu", 1, 0};
    int64_t m0 = gp_cuda_lora_merged_count();
    gp_session *cpu = gp_session_new(m, &oc, err, sizeof err), *on = session_with(m, NULL, NULL);
    int64_t merged = gp_cuda_lora_merged_count() - m0;
    gp_session *off = session_with(m, "GPLAN_CUDA_DISABLE", "lora");
    CU_ASSERT_EQUAL(gp_cuda_lora_merged_count() - m0, merged); /* none with it off */
    CU_ASSERT_EQUAL(merged, 4 * LORA_LAYERS);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cpu);
    CU_ASSERT_PTR_NOT_NULL_FATAL(on);
    CU_ASSERT_PTR_NOT_NULL_FATAL(off);
    size_t bytes = sizeof(float) * 40 * (size_t)V;
    float *lc = malloc(bytes), *lg = malloc(bytes), *lb = malloc(bytes);
    gp_session *bs = gp_session_new(base, &oc, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(bs);
    /* A 5-token prompt, two steps, a 40-token prompt (tiles, cuBLAS) and a step; then the
     * adapter at half the scale, bound between evals, and the same again. */
    const int plan[][2] = {{5, 0}, {1, 5}, {1, 6}, {40, 0}, {1, 40}};
    for (int pass = 0; pass < 2; pass++) {
        if (pass) {
            CU_ASSERT_EQUAL(gp_model_bind_adapter(m, dir, 0.5, err, sizeof err), 0);
        }
        for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
            int n = plan[i][0];
            if (plan[i][1] == 0) {
                CU_ASSERT_EQUAL(gp_session_reset(cpu), 0);
                CU_ASSERT_EQUAL(gp_session_reset(on), 0);
                CU_ASSERT_EQUAL(gp_session_reset(off), 0);
                CU_ASSERT_EQUAL(gp_session_reset(bs), 0);
            }
            CU_ASSERT_EQUAL_FATAL(step(cpu, n, plan[i][1], lc, V), 0);
            CU_ASSERT_EQUAL_FATAL(step(bs, n, plan[i][1], lb, V), 0);
            /* the adapter moves the logits: this checks the branches, not the base model */
            CU_ASSERT(gp_test_rel_err(lc, lb, (size_t)n * (size_t)V, GP_TEST_L2) > 1e-3);
            gp_session *g[2] = {on, off};
            for (int k = 0; k < 2; k++) {
                CU_ASSERT_EQUAL_FATAL(step(g[k], n, plan[i][1], lg, V), 0);
                double e = gp_test_rel_err(lg, lc, (size_t)n * (size_t)V, GP_TEST_L2);
                if (!(e <= tol))
                    fprintf(stderr, "\n  lora %s r %lld (%s) pass %d step %zu: vs CPU %.3g\n",
                            wtype, (long long)r, k ? "branches launched" : "merged", pass, i, e);
                CU_ASSERT(e <= tol);
            }
        }
    }
    CU_ASSERT_EQUAL(gp_session_backend_allocs(on), 0);
    CU_ASSERT_EQUAL(gp_session_backend_allocs(off), 0);
    gp_session_free(cpu);
    gp_session_free(bs);
    gp_session_free(on);
    gp_session_free(off);
    /* Merged, a one-token eval launches what the plan without branches does, with the same
     * fusions; launched as nodes, at least two more a branch. */
    char what[64];
    snprintf(what, sizeof what, "lora %s r %lld", wtype, (long long)r);
    int64_t nb[N_FUSION_COUNTS];
    assert_same_fusions(m, base, V, what, nb);
    int64_t n_off = one_token_launches(m, "GPLAN_CUDA_DISABLE", "lora", V);
    CU_ASSERT(n_off >= nb[0] + 2 * 4 * LORA_LAYERS);
    free(lc);
    free(lg);
    free(lb);
    char path[700];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    unlink(path);
    rmdir(dir);
    gp_model_free(m);
    gp_model_free(base);
}

void test_model_lora(void)
{
    lora_case("f32", 8, 1e-4);
    lora_case("f32", 64, 1e-4);
    lora_case("f16", 8, 1e-2);
    lora_case("f16", 64, 1e-2);
}

/*
 * The same for GPT-2 117M's layer (768 wide, 12 heads of 64, f16 weights and caches, biases; two
 * layers, a small vocabulary), as bench/lora_gpu.sh runs it, ranks 8 and 64, adapter slots as
 * the random weights left them: merged, a one-token eval launches exactly the kernels of the plan
 * without branches with the same fusions, among them c_fc and the second c_attn adding into
 * outputs the product before them zeroed ("accum"), which needs those outputs' bytes kept from
 * that product's step on (the plan's accumulated outputs, whose first step the branches' own
 * products must not move).
 */
void test_model_lora_117m(void)
{
    for (int k = 0; k < 2; k++) {
        const int64_t r = k ? 64 : 8;
        char defs_r[32], what[64];
        snprintf(defs_r, sizeof defs_r, "lora_r=%lld", (long long)r);
        const char *defs[8] = {"n_layer=2", "n_embd=768", "n_head=12", "vocab_size=512",
                               "n_positions=64", "wtype=f16", "kv_type=f16", defs_r};
        gp_test_model_opts mo = {defs, 8, NULL, 1, 11}, mb = {defs, 7, NULL, 1, 11};
        gp_model *m = gp_test_model("examples/gpt2.gplan", &mo, NULL);
        gp_model *base = gp_test_model("examples/gpt2.gplan", &mb, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        CU_ASSERT_PTR_NOT_NULL_FATAL(base);
        gp_model_info info;
        gp_model_get_info(m, &info);
        int64_t m0 = gp_cuda_lora_merged_count(), nb[N_FUSION_COUNTS];
        snprintf(what, sizeof what, "lora 117M-shaped f16 r %lld", (long long)r);
        assert_same_fusions(m, base, info.vocab, what, nb);
        CU_ASSERT_EQUAL(gp_cuda_lora_merged_count() - m0, 4 * 2);
        /* accum taken: both layers' c_fc and the second layer's c_attn */
        CU_ASSERT(nb[1] >= 3);
        gp_model_free(m);
        gp_model_free(base);
    }
}
