/* Tests of LoRA adapters (suite "lora"): PEFT-style adapters written here with random A and B.
 * Merge mode: the merge graph (planner/lora_merge.c), merge plans run by gp_model_apply_lora against
 * weights merged in double precision by the test on the reference executor; layouts, rslora,
 * scale 0, skipped targets, errors (adapter, merge plan, model), no allocation in the merge or in
 * evals. Runtime mode (gp_model_bind_adapter on graphs compiled with lora_r): equal to merge mode,
 * rebinding between evals, no eval allocation, errors. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dsl/dsl.h"
#include "planner/lora_merge.h"
#include "planner/planner.h"
#include "gplan/gplan.h"
#include "runtime/lora.h"
#include "weights/weights.h"
#include "tests/alloc/alloc_count.h"
#include "tests/testmodel.h"
#include "tests/testutil.h"

#define MAX_MODS 32
#define SEED 11
#define N_TOK 5


/* An adapter as the test built it: per module, the plan weight name, its shape and A, B. */
typedef struct {
    int n;
    int64_t r;
    char wname[MAX_MODS][128];  /* "<module>.weight" */
    char aname[MAX_MODS][160];  /* PEFT names */
    char bname[MAX_MODS][160];
    int64_t out[MAX_MODS], in[MAX_MODS];
    int fan[MAX_MODS];          /* W is [in, out] */
    float *a[MAX_MODS];         /* [r, in] */
    float *b[MAX_MODS];         /* [out, r] */
} adapter;

static void adapter_free(adapter *ad)
{
    for (int k = 0; k < ad->n; k++) {
        free(ad->a[k]);
        free(ad->b[k]);
    }
    ad->n = 0;
}

static gp_model *compile_model(const char *example, const char **defs, int n_defs, gp_graph **gout)
{
    gp_test_model_opts o = {defs, n_defs, NULL, 1, 0};
    return gp_test_model(example, &o, gout);
}

/* Builds random A, B for every weight of g named "*.<target>.weight" for a target in `targets`
 * (space separated); fan: W is [in, out] (Conv1D) rather than [out, in]. */
/* Module k's PEFT tensor names: base_model.model.MOD.lora_A.weight and .lora_B.weight. */
static void name_module(adapter *ad, int k, const char *mod)
{
    snprintf(ad->aname[k], sizeof ad->aname[k], "base_model.model.%s.lora_A.weight", mod);
    snprintf(ad->bname[k], sizeof ad->bname[k], "base_model.model.%s.lora_B.weight", mod);
}

static void make_adapter(const gp_graph *g, const char *targets, int64_t r, int fan, uint64_t seed,
                         adapter *ad)
{
    memset(ad, 0, sizeof *ad);
    ad->r = r;
    uint64_t rng = seed;
    for (int i = 0; i < g->n_tensors && ad->n < MAX_MODS; i++) {
        const gp_tensor *t = &g->tensors[i];
        if (t->kind != GP_TENSOR_WEIGHT || t->ndim != 2)
            continue;
        char mod[128];
        snprintf(mod, sizeof mod, "%s", t->weight_name);
        char *dot = strrchr(mod, '.');
        if (!dot || strcmp(dot, ".weight"))
            continue;
        *dot = 0;
        const char *last = strrchr(mod, '.');
        last = last ? last + 1 : mod;
        char key[160];
        snprintf(key, sizeof key, " %s ", last);
        char list[512];
        snprintf(list, sizeof list, " %s ", targets);
        if (!strstr(list, key))
            continue;
        int k = ad->n++;
        snprintf(ad->wname[k], sizeof ad->wname[k], "%s", t->weight_name);
        name_module(ad, k, mod);
        ad->fan[k] = fan;
        ad->out[k] = fan ? t->shape[1].size : t->shape[0].size;
        ad->in[k] = fan ? t->shape[0].size : t->shape[1].size;
        ad->a[k] = malloc((size_t)(r * ad->in[k]) * sizeof(float));
        ad->b[k] = malloc((size_t)(ad->out[k] * r) * sizeof(float));
        gp_test_uniform(ad->a[k], (size_t)(r * ad->in[k]), -0.1f, 0.1f, &rng);
        gp_test_uniform(ad->b[k], (size_t)(ad->out[k] * r), -0.1f, 0.1f, &rng);
    }
}

static const char *tmpdir(void)
{
    static char dir[512];
    snprintf(dir, sizeof dir, "%s", gp_test_tmpfile(".lora"));
    mkdir(dir, 0755);
    return dir;
}

static void write_text(const char *dir, const char *name, const char *text)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    CU_ASSERT_EQUAL(gp_test_write_file(path, text, strlen(text)), 0);
}

/* Writes adapter_model.safetensors (A and B of every module, or only A of module `drop_b`). */
static void write_weights(const char *dir, const adapter *ad, int drop_b)
{
    gp_st_tensor ts[2 * MAX_MODS];
    memset(ts, 0, sizeof ts);
    int n = 0;
    for (int k = 0; k < ad->n; k++) {
        gp_st_tensor *a = &ts[n++];
        a->name = ad->aname[k];
        a->dtype = GP_F32;
        a->ndim = 2;
        a->shape[0] = ad->r;
        a->shape[1] = ad->in[k];
        a->data = ad->a[k];
        a->nbytes = (size_t)(ad->r * ad->in[k]) * sizeof(float);
        if (k == drop_b)
            continue;
        gp_st_tensor *b = &ts[n++];
        b->name = ad->bname[k];
        b->dtype = GP_F32;
        b->ndim = 2;
        b->shape[0] = ad->out[k];
        b->shape[1] = ad->r;
        b->data = ad->b[k];
        b->nbytes = (size_t)(ad->out[k] * ad->r) * sizeof(float);
    }
    char path[700], err[512];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    int rc = gp_st_write(path, ts, n, NULL, err, sizeof err);
    if (rc)
        fprintf(stderr, "%s\n", err);
    CU_ASSERT_EQUAL(rc, 0);
}

static void write_config(const char *dir, int64_t r, double alpha, const char *targets_json, int fan,
                         int rslora)
{
    char cfg[1024];
    snprintf(cfg, sizeof cfg,
             "{\"peft_type\": \"LORA\", \"r\": %lld, \"lora_alpha\": %g, \"target_modules\": %s, "
             "\"fan_in_fan_out\": %s, \"use_rslora\": %s, \"lora_dropout\": 0.0, "
             "\"bias\": \"none\"}",
             (long long)r, alpha, targets_json, fan ? "true" : "false", rslora ? "true" : "false");
    write_text(dir, "adapter_config.json", cfg);
}

/* An adapter for the targets of g (rank r, fan, random A and B from seed) into *ad, written to a
 * fresh folder with its config (alpha, targets_json, the config's fan_in_fan_out, rslora): the
 * folder's path. The caller frees *ad. */
static const char *write_adapter(const gp_graph *g, const char *targets, int64_t r, int fan,
                                 uint64_t seed, double alpha, const char *targets_json, int cfg_fan,
                                 int rslora, adapter *ad)
{
    make_adapter(g, targets, r, fan, seed, ad);
    CU_ASSERT(ad->n > 0);
    const char *dir = tmpdir();
    write_config(dir, r, alpha, targets_json, cfg_fan, rslora);
    write_weights(dir, ad, -1);
    return dir;
}

/* Writes g's random weights (SEED) with the adapter merged in double precision:
 * W += s * B A (or (B A)^T where ad->fan), rounded to f32 once. */
static void write_merged(const gp_graph *g, const adapter *ad, double s, const char *path)
{
    gp_st_tensor *ts = calloc((size_t)g->n_tensors, sizeof *ts);
    float **bufs = calloc((size_t)g->n_tensors, sizeof *bufs);
    int n = 0;
    for (int i = 0; i < g->n_tensors; i++) {
        const gp_tensor *t = &g->tensors[i];
        int dup = t->kind != GP_TENSOR_WEIGHT;
        for (int k = 0; k < n && !dup; k++)
            dup = !strcmp(ts[k].name, t->weight_name);
        if (dup)
            continue;
        int64_t numel = 1;
        ts[n].name = t->weight_name;
        ts[n].dtype = GP_F32;
        ts[n].ndim = t->ndim;
        for (int d = 0; d < t->ndim; d++) {
            ts[n].shape[d] = t->shape[d].size;
            numel *= t->shape[d].size;
        }
        float *w = bufs[n] = malloc((size_t)numel * sizeof(float));
        gp_weights_random_named(w, GP_F32, numel, SEED, t->weight_name);
        for (int k = 0; k < ad->n; k++) {
            if (strcmp(ad->wname[k], t->weight_name))
                continue;
            for (int64_t o = 0; o < ad->out[k]; o++)
                for (int64_t x = 0; x < ad->in[k]; x++) {
                    double d = 0;
                    for (int64_t j = 0; j < ad->r; j++)
                        d += (double)ad->b[k][o * ad->r + j] * (double)ad->a[k][j * ad->in[k] + x];
                    int64_t at = ad->fan[k] ? x * ad->out[k] + o : o * ad->in[k] + x;
                    w[at] = (float)((double)w[at] + s * d);
                }
        }
        ts[n].data = w;
        ts[n].nbytes = (size_t)numel * sizeof(float);
        n++;
    }
    char err[512];
    CU_ASSERT_EQUAL(gp_st_write(path, ts, n, NULL, err, sizeof err), 0);
    for (int k = 0; k < n; k++)
        free(bufs[k]);
    free(bufs);
    free(ts);
}

/* Logits [N_TOK, vocab] of one eval of fixed tokens on a fresh session; malloc'd, NULL on failure. */
static float *logits_of(const gp_model *m, const char *backend, size_t *n)
{
    char err[1024];
    gp_session_opts o = {backend, 2, 0};
    gp_session *s = gp_session_new(m, &o, err, sizeof err);
    if (!s) {
        fprintf(stderr, "%s\n", err);
        return NULL;
    }
    gp_model_info info;
    gp_model_get_info(m, &info);
    int32_t ids[N_TOK], pos[N_TOK];
    for (int t = 0; t < N_TOK; t++) {
        ids[t] = (int32_t)((t * 37 + 3) % info.vocab);
        pos[t] = t;
    }
    float *out = NULL;
    gp_tensor_info ti;
    const float *l;
    if (!gp_session_set_tokens(s, ids, pos, N_TOK) && !gp_session_set_rows(s, NULL, N_TOK) &&
        !gp_session_eval(s) &&
        (l = gp_session_output(s, "logits", &ti)) != NULL && (out = malloc(ti.bytes)) != NULL) {
        memcpy(out, l, ti.bytes);
        *n = ti.bytes / sizeof(float);
    }
    gp_session_free(s);
    return out;
}

/* Whether m's CPU logits are base [nb], bit for bit. */
static int logits_are(const gp_model *m, const float *base, size_t nb)
{
    size_t n = 0;
    float *l = logits_of(m, "cpu", &n);
    int same = l && n == nb && memcmp(l, base, n * sizeof(float)) == 0;
    free(l);
    return same;
}

/* Writes the plan of `example` compiled with defs (merge: its merge plan, as gplan-compile
 * --lora-merge does; the last def is then lora_r=R) to a new file; returns its path (static
 * storage: copy it) or NULL. */
static const char *plan_file(const char *example, const char **defs, int n_defs, int merge,
                             gp_plan **pout)
{
    static char path[600];
    char err[1024];
    gp_diag *d = gp_diag_new(NULL);
    gp_dsl_opts o = {.defines = defs, .n_defines = n_defs};
    gp_graph *g = gp_dsl_compile_file(gp_test_path(example), &o, d);
    gp_graph *mg = g && merge ? gp_lora_merge_graph(g, d) : g;
    gp_plan_opts po;
    memset(&po, 0, sizeof po);
    po.backends = merge ? GP_BACKEND_BIT(GP_BACKEND_CPU) : GP_BACKENDS_ALL;
    gp_plan *p = NULL;
    snprintf(path, sizeof path, "%s", gp_test_tmpfile(".merge.plan"));
    int ok = mg && !gp_plan_build(mg, &po, &p, d) && !gp_plan_write(p, path, err, sizeof err);
    if (!ok)
        fprintf(stderr, "merge plan of %s: %s %s\n", example, gp_diag_text(d), err);
    if (pout && ok)
        *pout = p;
    else
        gp_plan_free(p);
    if (mg != g)
        gp_graph_free(mg);
    gp_graph_free(g);
    gp_diag_free(d);
    return ok ? path : NULL;
}

static const char *merge_plan_file(const char *example, const char **defs, int n_defs,
                                   gp_plan **pout)
{
    return plan_file(example, defs, n_defs, 1, pout);
}

/* Merges the adapter (built in layout `fan`; config r, alpha, cfg_fan, rslora; apply scale) with
 * the merge plan on the CPU and compares with the double-precision merge of s_ref (square weights
 * read in layout ref_fan) on the reference executor. defs end with lora_r=R (the merge plan's);
 * the model is compiled without it. Returns gp_test_rel_err (GP_TEST_MAX), or -1 on failure;
 * *base_diff: the same against no adapter. */
static double merged_vs_reference(const char *example, const char **defs, int n_defs,
                                  const char *targets, const char *targets_json, int64_t r,
                                  double alpha, int fan, int cfg_fan, int rslora, double scale,
                                  double s_ref, int ref_fan, double *base_diff)
{
    gp_graph *g = NULL;
    gp_model *m = compile_model(example, defs, n_defs - 1, &g);
    gp_model *ref = compile_model(example, defs, n_defs - 1, NULL);
    char mplan[600];
    const char *mp = merge_plan_file(example, defs, n_defs, NULL);
    snprintf(mplan, sizeof mplan, "%s", mp ? mp : "");
    double rd = -1;
    char err[2048];
    adapter ad;
    const char *dir = write_adapter(g, targets, r, fan, 99, alpha, targets_json, cfg_fan, rslora,
                                    &ad);
    char ckpt[700];
    snprintf(ckpt, sizeof ckpt, "%s/merged.safetensors", dir);
    adapter ad_ref = ad; /* the same A, B; square weights read with the reference orientation */
    for (int k = 0; k < ad.n; k++)
        if (ad.out[k] == ad.in[k])
            ad_ref.fan[k] = ref_fan;
    write_merged(g, &ad_ref, s_ref, ckpt);
    size_t n1 = 0, n2 = 0, n0 = 0;
    float *got = NULL, *want = NULL, *base = NULL;
    if (!m || !ref || !mp || gp_model_random_weights(m, SEED, err, sizeof err))
        goto done;
    base = logits_of(m, "cpu", &n0);
    if (gp_model_apply_lora(m, dir, mplan, scale, err, sizeof err)) {
        fprintf(stderr, "apply: %s\n", err);
        goto done;
    }
    if (gp_model_bind_weights(ref, ckpt, err, sizeof err)) {
        fprintf(stderr, "bind: %s\n", err);
        goto done;
    }
    got = logits_of(m, "cpu", &n1);
    want = logits_of(ref, "reference", &n2);
    if (got && want && base && n1 == n2 && n0 == n1) {
        rd = gp_test_rel_err(got, want, n1, GP_TEST_MAX);
        *base_diff = gp_test_rel_err(base, want, n1, GP_TEST_MAX);
    }
done:
    free(got);
    free(want);
    free(base);
    adapter_free(&ad);
    gp_model_free(m);
    gp_model_free(ref);
    gp_graph_free(g);
    return rd;
}

/* ---- tests ---- */

static const char *gpt2_defs[] = {"n_layer=2", "n_embd=64", "n_head=4", "vocab_size=256",
                                  "n_positions=64", "n_batch=8", "lora_r=4"};
static const char *llama_rt_defs[] = {"num_hidden_layers=2", "hidden_size=64",
                                      "intermediate_size=96", "num_attention_heads=4",
                                      "num_key_value_heads=2", "vocab_size=128",
                                      "max_position_embeddings=32", "n_batch=8", "lora_r=4"};
#define ALL_GPT2 "c_attn c_proj c_fc", "[\"c_attn\", \"c_proj\", \"c_fc\"]"

/* The merge graph: 3 nodes per target (GPT-2: c_attn, attn.c_proj, c_fc, mlp.c_proj per layer),
 * Conv1D deltas (B A)^T and Linear deltas B A, one arena reused by every layer (the largest delta,
 * at the lower bound), and no merge graph for a graph without LoRA weights. */
static void test_merge_graph(void)
{
    gp_plan *p = NULL, *q = NULL;
    CU_ASSERT_PTR_NOT_NULL_FATAL(merge_plan_file("examples/gpt2.gplan", gpt2_defs, 7, &p));
    CU_ASSERT_EQUAL(p->n_nodes, 2 * 4 * 3);
    CU_ASSERT_STRING_EQUAL(p->graph_name, "gpt2_lora_merge");
    int matmuls = 0, fan = 0;
    for (int i = 0; i < p->n_nodes; i++)
        if (p->nodes[i].op == GP_OP_MATMUL) {
            matmuls++;
            fan += p->nodes[i].attrs.i[GP_MATMUL_TA] == 1 && p->nodes[i].attrs.i[GP_MATMUL_TB] == 1;
        }
    CU_ASSERT_EQUAL(matmuls, 8);
    CU_ASSERT_EQUAL(fan, 8); /* every GPT-2 target is a Conv1D */
    /* The largest delta: c_fc [64, 256] f32; the scale is applied in place. */
    CU_ASSERT_EQUAL(p->regions[GP_REGION_ARENA].size, 64 * 256 * 4);
    CU_ASSERT_EQUAL(p->lower_bound, p->regions[GP_REGION_ARENA].size);
    CU_ASSERT_EQUAL(p->naive_bytes, 2 * 2 * (64 * 192 + 64 * 64 + 64 * 256 + 256 * 64) * 4);

    CU_ASSERT_PTR_NOT_NULL_FATAL(merge_plan_file("examples/llama.gplan", llama_rt_defs, 9, &q));
    CU_ASSERT_EQUAL(q->n_nodes, 2 * 4 * 3);
    for (int i = 0; i < q->n_nodes; i++) {
        const gp_plan_node *nd = &q->nodes[i];
        if (nd->op != GP_OP_MATMUL)
            continue;
        CU_ASSERT_EQUAL(nd->attrs.i[GP_MATMUL_TA] + nd->attrs.i[GP_MATMUL_TB], 0); /* B A */
        CU_ASSERT(strstr(q->tensors[nd->inputs[0]].name, ".lora_B.weight") != NULL);
    }
    /* k_proj [32, 64]: B [32, 4], A [4, 64]. */
    int found = 0;
    for (int i = 0; i < q->n_tensors; i++)
        if (!strcmp(q->tensors[i].name,
                    "base_model.model.model.layers.1.self_attn.k_proj.lora_B.weight")) {
            found = 1;
            CU_ASSERT_EQUAL(q->tensors[i].dims[0], 32);
            CU_ASSERT_EQUAL(q->tensors[i].dims[1], 4);
            CU_ASSERT_EQUAL(q->tensors[i].kind, GP_TENSOR_INPUT);
        }
    CU_ASSERT(found);
    gp_plan_free(p);
    gp_plan_free(q);

    gp_diag *d = gp_diag_new(NULL);
    gp_dsl_opts o = {.defines = gpt2_defs, .n_defines = 6};
    gp_graph *g = gp_dsl_compile_file(gp_test_path("examples/gpt2.gplan"), &o, d);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_PTR_NULL(gp_lora_merge_graph(g, d));
    CU_ASSERT(strstr(gp_diag_text(d), "graph 'gpt2' declares no LoRA weights "
                     "(base_model.model.<module>.lora_A.weight): compile it with -D lora_r=R to "
                     "build its merge graph") != NULL);
    gp_graph_free(g);
    gp_diag_free(d);
}

static void test_gpt2_merge(void)
{
    double base = 0;
    /* alpha 16, r 4: s = 4. */
    double rd = merged_vs_reference("examples/gpt2.gplan", gpt2_defs, 7, ALL_GPT2, 4, 16, 1, 1, 0,
                                    1.0, 4.0, 1, &base);
    CU_ASSERT(rd >= 0 && rd <= 1e-5);
    CU_ASSERT(base > 1e-3); /* the adapter changes the logits */
    /* The same adapter at --lora-scale 0.5. */
    rd = merged_vs_reference("examples/gpt2.gplan", gpt2_defs, 7, ALL_GPT2, 4, 16, 1, 1, 0, 0.5,
                             2.0, 1, &base);
    CU_ASSERT(rd >= 0 && rd <= 1e-5);
    /* An adapter of c_fc alone: the plan's other targets are skipped, their weights unchanged. */
    rd = merged_vs_reference("examples/gpt2.gplan", gpt2_defs, 7, "c_fc", "[\"c_fc\"]", 4, 16, 1,
                             1, 0, 1.0, 4.0, 1, &base);
    CU_ASSERT(rd >= 0 && rd <= 1e-5);
    CU_ASSERT(base > 1e-3);
}

static void test_fan_in_fan_out(void)
{
    /* attn.c_proj is square: A and B fit both orientations. The merge plan takes the layout from
     * the model (Conv1D: (B A)^T), whatever the config says, as PEFT does: equal to the transposed
     * delta, not to B A (mlp.c_proj, [256, 64], is always merged the right way in the reference). */
    double base = 0;
    double rd = merged_vs_reference("examples/gpt2.gplan", gpt2_defs, 7, "c_proj", "[\"c_proj\"]",
                                    4, 16, 1, 1, 0, 1.0, 4.0, 1, &base);
    CU_ASSERT(rd >= 0 && rd <= 1e-5);
    rd = merged_vs_reference("examples/gpt2.gplan", gpt2_defs, 7, "c_proj", "[\"c_proj\"]", 4, 16,
                             1, 1, 0, 1.0, 4.0, 0, &base);
    CU_ASSERT(rd > 1e-3);
    rd = merged_vs_reference("examples/gpt2.gplan", gpt2_defs, 7, "c_proj", "[\"c_proj\"]", 4, 16,
                             1, 0, 0, 1.0, 4.0, 1, &base);
    CU_ASSERT(rd >= 0 && rd <= 1e-5);
    /* Llama's square q_proj and o_proj are Linear: B A, even with fan_in_fan_out set. */
    const char *qo = "[\"q_proj\", \"o_proj\"]";
    rd = merged_vs_reference("examples/llama.gplan", llama_rt_defs, 9, "q_proj o_proj", qo, 4, 8,
                             0, 1, 0, 1.0, 2.0, 0, &base);
    CU_ASSERT(rd >= 0 && rd <= 1e-5);
    rd = merged_vs_reference("examples/llama.gplan", llama_rt_defs, 9, "q_proj o_proj", qo, 4, 8,
                             0, 1, 0, 1.0, 2.0, 1, &base);
    CU_ASSERT(rd > 1e-3);
}

static void test_llama_merge(void)
{
    double base = 0;
    const char *mods = "q_proj k_proj v_proj o_proj";
    const char *json = "[\"q_proj\", \"k_proj\", \"v_proj\", \"o_proj\"]";
    double rd = merged_vs_reference("examples/llama.gplan", llama_rt_defs, 9, mods, json, 4, 8, 0,
                                    0, 0, 1.0, 2.0, 0, &base);
    CU_ASSERT(rd >= 0 && rd <= 1e-5);
    CU_ASSERT(base > 1e-3);
    /* rslora: s = alpha / sqrt(r) = 8 / 2 = 4 (not 2). */
    rd = merged_vs_reference("examples/llama.gplan", llama_rt_defs, 9, mods, json, 4, 8, 0, 0, 1,
                             1.0, 4.0, 0, &base);
    CU_ASSERT(rd >= 0 && rd <= 1e-5);
    rd = merged_vs_reference("examples/llama.gplan", llama_rt_defs, 9, mods, json, 4, 8, 0, 0, 1,
                             1.0, 2.0, 0, &base);
    CU_ASSERT(rd > 1e-3);
}

/* Scale 0 leaves the logits bit for bit; the model's plan is unchanged; the merged weights are the
 * merge plan's io region, adopted by the model. */
static void test_scale_zero(void)
{
    gp_graph *g = NULL;
    gp_model *m = compile_model("examples/gpt2.gplan", gpt2_defs, 6, &g);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    gp_plan *mp = NULL;
    char mplan[600], err[1024];
    const char *path = merge_plan_file("examples/gpt2.gplan", gpt2_defs, 7, &mp);
    CU_ASSERT_PTR_NOT_NULL_FATAL(path);
    snprintf(mplan, sizeof mplan, "%s", path);
    adapter ad;
    const char *dir =
        write_adapter(g, "c_attn c_fc", 4, 1, 5, 16, "[\"c_attn\", \"c_fc\"]", 1, 0, &ad);
    CU_ASSERT_EQUAL_FATAL(gp_model_random_weights(m, SEED, err, sizeof err), 0);
    gp_model_info before, after;
    gp_model_get_info(m, &before);
    size_t n0 = 0, n1 = 0;
    float *base = logits_of(m, "cpu", &n0);
    CU_ASSERT_EQUAL(gp_model_apply_lora(m, dir, mplan, 0.0, err, sizeof err), 0);
    float *zero = logits_of(m, "cpu", &n1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(base);
    CU_ASSERT_PTR_NOT_NULL_FATAL(zero);
    CU_ASSERT_EQUAL(n0, n1);
    CU_ASSERT(memcmp(base, zero, n0 * sizeof(float)) == 0);
    gp_model_get_info(m, &after);
    CU_ASSERT_EQUAL(after.weights_loaded - before.weights_loaded, mp->regions[GP_REGION_IO].size);
    /* the io region holds at least the merged copies of 2 layers x 4 targets, f32 */
    CU_ASSERT(mp->regions[GP_REGION_IO].size >= 2 * (64 * 192 + 64 * 64 + 2 * 64 * 256) * 4);
    for (int r = 0; r < 5; r++)
        CU_ASSERT_EQUAL(after.region_bytes[r], before.region_bytes[r]);
    free(base);
    free(zero);
    gp_plan_free(mp);
    adapter_free(&ad);
    gp_model_free(m);
    gp_graph_free(g);
}

/* One error case: write the config and weights, apply, compare the message; the weights must be
 * unchanged (the logits equal `base`). */
static void expect_error(gp_model *m, const char *dir, const char *mplan, const float *base,
                         size_t n_base, const char *want)
{
    char err[2048] = "";
    CU_ASSERT_EQUAL(gp_model_apply_lora(m, dir, mplan, 1.0, err, sizeof err), -1);
    if (strcmp(err, want))
        fprintf(stderr, "\n  got:  %s\n  want: %s\n", err, want);
    CU_ASSERT_STRING_EQUAL(err, want);
    size_t n = 0;
    float *l = logits_of(m, "cpu", &n);
    CU_ASSERT(l && n == n_base && memcmp(l, base, n * sizeof(float)) == 0);
    free(l);
}

static void test_errors(void)
{
    gp_graph *g = NULL;
    gp_model *m = compile_model("examples/gpt2.gplan", gpt2_defs, 6, &g);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char err[2048], want[2048], dir[512], mplan[600], other[600];
    const char *all = "[\"c_attn\", \"c_proj\", \"c_fc\"]";
    const char *path = merge_plan_file("examples/gpt2.gplan", gpt2_defs, 7, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(path);
    snprintf(mplan, sizeof mplan, "%s", path);

    /* Weights not bound. */
    snprintf(dir, sizeof dir, "%s", tmpdir());
    adapter ad;
    make_adapter(g, "c_attn", 4, 1, 3, &ad);
    write_config(dir, 4, 8, all, 1, 0);
    write_weights(dir, &ad, -1);
    CU_ASSERT_EQUAL(gp_model_apply_lora(m, dir, mplan, 1.0, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "lora: bind the model's weights before applying an adapter");

    CU_ASSERT_EQUAL_FATAL(gp_model_random_weights(m, SEED, err, sizeof err), 0);
    size_t nb = 0;
    float *base = logits_of(m, "cpu", &nb);
    CU_ASSERT_PTR_NOT_NULL_FATAL(base);

    /* No config file. */
    char empty[512];
    snprintf(empty, sizeof empty, "%s", tmpdir());
    CU_ASSERT_EQUAL(gp_model_apply_lora(m, empty, mplan, 1.0, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s/adapter_config.json: bad adapter config (", empty);
    CU_ASSERT_NSTRING_EQUAL(err, want, strlen(want));

    /* Bad config fields. */
    write_text(dir, "adapter_config.json", "{\"lora_alpha\": 8, \"target_modules\": [\"c_fc\"]}");
    snprintf(want, sizeof want,
             "%s/adapter_config.json: bad adapter config (\"r\" must be an integer in [1, 65536])",
             dir);
    expect_error(m, dir, mplan, base, nb, want);
    write_text(dir, "adapter_config.json",
               "{\"r\": 4, \"lora_alpha\": 8, \"target_modules\": \"c_fc\"}");
    snprintf(want, sizeof want, "%s/adapter_config.json: bad adapter config (\"target_modules\" "
             "must be a list of 1 to 64 module names)", dir);
    expect_error(m, dir, mplan, base, nb, want);
    write_text(dir, "adapter_config.json",
               "{\"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"c_fc\"], \"use_dora\": true}");
    snprintf(want, sizeof want,
             "%s/adapter_config.json: bad adapter config (DoRA (use_dora) is not supported)", dir);
    expect_error(m, dir, mplan, base, nb, want);

    /* Unknown target module. */
    write_config(dir, 4, 8, "[\"c_attn\", \"lm_head\"]", 1, 0);
    snprintf(want, sizeof want, "%s/adapter_config.json: unknown target module \"lm_head\" (gplan "
             "knows c_attn, c_proj, c_fc, q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, "
             "down_proj)", dir);
    expect_error(m, dir, mplan, base, nb, want);

    /* A module the config does not target. */
    write_config(dir, 4, 8, "[\"c_fc\"]", 1, 0);
    expect_error(m, dir, mplan, base, nb,
                 "lora: \"base_model.model.transformer.h.0.attn.c_attn.lora_A.weight\": module "
                 "\"transformer.h.0.attn.c_attn\" is not in target_modules");

    /* A without B. */
    write_config(dir, 4, 8, all, 1, 0);
    write_weights(dir, &ad, 1);
    expect_error(m, dir, mplan, base, nb,
                 "lora: \"base_model.model.transformer.h.1.attn.c_attn.lora_A.weight\" has no "
                 "matching \"base_model.model.transformer.h.1.attn.c_attn.lora_B.weight\"");

    /* The adapter's rank differs from the merge plan's. */
    write_config(dir, 8, 8, all, 1, 0);
    write_weights(dir, &ad, -1);
    snprintf(want, sizeof want, "lora: %s: the adapter has rank 8, the merge plan %s rank 4 "
             "(compile it with -D lora_r=8)", dir, mplan);
    expect_error(m, dir, mplan, base, nb, want);

    /* A laid out for a Linear: c_attn is a Conv1D [64, 192], A must be [4, 64]. */
    adapter lin;
    make_adapter(g, "c_attn", 4, 0, 3, &lin);
    write_config(dir, 4, 8, all, 0, 0);
    write_weights(dir, &lin, -1);
    adapter_free(&lin);
    snprintf(want, sizeof want,
             "lora: \"base_model.model.transformer.h.0.attn.c_attn.lora_A.weight\": expected "
             "shape [4, 64], file has [4, 192] (target \"transformer.h.0.attn.c_attn.weight\" "
             "[64, 192], Conv1D [in, out])");
    expect_error(m, dir, mplan, base, nb, want);

    /* B of the wrong shape. */
    write_config(dir, 4, 8, all, 1, 0);
    ad.out[0] = 96;
    write_weights(dir, &ad, -1);
    ad.out[0] = 192;
    expect_error(m, dir, mplan, base, nb,
                 "lora: \"base_model.model.transformer.h.0.attn.c_attn.lora_B.weight\": expected "
                 "shape [192, 4], file has [96, 4] (target \"transformer.h.0.attn.c_attn.weight\" "
                 "[64, 192], Conv1D [in, out])");

    /* A module of a layer the merge plan lacks. */
    name_module(&ad, 1, "transformer.h.7.attn.c_attn");
    write_weights(dir, &ad, -1);
    snprintf(want, sizeof want,
             "lora: \"base_model.model.transformer.h.7.attn.c_attn.lora_A.weight\": the merge plan "
             "%s has no target \"transformer.h.7.attn.c_attn.weight\" (its targets are the adapter "
             "weights the graph declares with -D lora_r=R)", mplan);
    expect_error(m, dir, mplan, base, nb, want);

    /* A tensor that is not LoRA's. */
    snprintf(ad.bname[1], sizeof ad.bname[1], "base_model.model.transformer.h.1.attn.c_attn.bias");
    write_weights(dir, &ad, -1);
    snprintf(want, sizeof want, "lora: %s/adapter_model.safetensors: "
             "\"base_model.model.transformer.h.1.attn.c_attn.bias\" is not a LoRA tensor "
             "(expected base_model.model.<module>.lora_A.weight or .lora_B.weight)", dir);
    expect_error(m, dir, mplan, base, nb, want);

    /* No tensors at all. */
    adapter none;
    memset(&none, 0, sizeof none);
    write_weights(dir, &none, -1);
    snprintf(want, sizeof want, "lora: %s/adapter_model.safetensors: no LoRA tensors", dir);
    expect_error(m, dir, mplan, base, nb, want);

    /* The right adapter with merge plans that do not fit: the model's own plan, a plan of other
     * weight dtypes, a plan of more layers whose extra layer the adapter covers, no file. */
    name_module(&ad, 1, "transformer.h.1.attn.c_attn");
    write_weights(dir, &ad, -1);
    snprintf(other, sizeof other, "%s", plan_file("examples/gpt2.gplan", gpt2_defs, 6, 0, NULL));
    snprintf(want, sizeof want, "%s: not a LoRA merge plan (no input \"lora_scale\" f32 [1]; make "
             "one with gplan-compile MODEL.gplan -D lora_r=R --lora-merge -o FILE)", other);
    expect_error(m, dir, other, base, nb, want);
    const char *f16_defs[] = {"n_layer=2", "n_embd=64", "n_head=4", "vocab_size=256",
                              "n_positions=64", "n_batch=8", "wtype=f16", "lora_r=4"};
    snprintf(other, sizeof other, "%s", merge_plan_file("examples/gpt2.gplan", f16_defs, 8, NULL));
    snprintf(want, sizeof want, "lora: merge plan %s: \"transformer.h.0.attn.c_attn.weight\" is "
             "f16 [64, 192], but the model's plan \"gpt2\" has it as f32 [64, 192] (compile both "
             "from the same graph and parameters)", other);
    expect_error(m, dir, other, base, nb, want);
    const char *l3_defs[] = {"n_layer=3", "n_embd=64", "n_head=4", "vocab_size=256",
                             "n_positions=64", "n_batch=8", "lora_r=4"};
    snprintf(other, sizeof other, "%s", merge_plan_file("examples/gpt2.gplan", l3_defs, 7, NULL));
    name_module(&ad, 1, "transformer.h.2.attn.c_attn");
    write_weights(dir, &ad, -1);
    snprintf(want, sizeof want, "lora: merge plan %s: \"transformer.h.2.attn.c_attn.weight\" is "
             "f32 [64, 192], but the model's plan \"gpt2\" has no such weight (compile both from "
             "the same graph and parameters)", other);
    expect_error(m, dir, other, base, nb, want);
    snprintf(other, sizeof other, "%s/none.plan", dir);
    CU_ASSERT_EQUAL(gp_model_apply_lora(m, dir, other, 1.0, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s: cannot open", other);
    CU_ASSERT_NSTRING_EQUAL(err, want, strlen(want));

    /* A second adapter on the same binding. */
    name_module(&ad, 1, "transformer.h.1.attn.c_attn");
    write_weights(dir, &ad, -1);
    CU_ASSERT_EQUAL(gp_model_apply_lora(m, dir, mplan, 1.0, err, sizeof err), 0);
    CU_ASSERT_EQUAL(gp_model_apply_lora(m, dir, mplan, 1.0, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "lora: the model already has an adapter merged (bind the weights "
                           "again first)");
    /* Binding again drops the merged copies. */
    CU_ASSERT_EQUAL(gp_model_random_weights(m, SEED, err, sizeof err), 0);
    CU_ASSERT(logits_are(m, base, nb));

    free(base);
    adapter_free(&ad);
    gp_model_free(m);
    gp_graph_free(g);
}

/* The planned merge allocates nothing once its arena and io region are allocated (nothing per
 * layer or per target), and a session on the merged weights allocates nothing during evals. */
static void test_no_alloc(void)
{
    gp_graph *g = NULL;
    gp_model *m = compile_model("examples/gpt2.gplan", gpt2_defs, 6, &g);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char err[1024], mplan[600];
    const char *path = merge_plan_file("examples/gpt2.gplan", gpt2_defs, 7, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(path);
    snprintf(mplan, sizeof mplan, "%s", path);
    adapter ad;
    const char *dir = write_adapter(g, "c_attn c_proj c_fc", 4, 1, 8, 8,
                                    "[\"c_attn\", \"c_proj\", \"c_fc\"]", 1, 0, &ad);
    CU_ASSERT_EQUAL_FATAL(gp_model_random_weights(m, SEED, err, sizeof err), 0);
    gp_lora_merge *mg = gp_lora_merge_new(m, dir, mplan, 1.0, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(mg);
    int n_targets = 0, n_merged = 0;
    int64_t arena = 0, io = 0;
    gp_lora_merge_info(mg, &n_targets, &n_merged, &arena, &io);
    CU_ASSERT_EQUAL(n_targets, 8);
    CU_ASSERT_EQUAL(n_merged, 8);
    CU_ASSERT_EQUAL(arena, 64 * 256 * 4);
    gp_alloc_count_start();
    int rc = gp_lora_merge_run(mg);
    int64_t merge_allocs = gp_alloc_count_stop();
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_EQUAL(merge_allocs, 0);
    CU_ASSERT_EQUAL(gp_lora_merge_run(mg), -1); /* once */
    CU_ASSERT_EQUAL(gp_lora_merge_finish(mg, err, sizeof err), 0);
    gp_lora_merge_free(mg);

    gp_session_opts o = {"cpu", 2, 0};
    gp_session *s = gp_session_new(m, &o, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    int failures = 0;
    gp_alloc_count_start();
    for (int i = 0; i < 200; i++) {
        int32_t id = i % 256, pos = i % 64;
        if (pos == 0 && gp_session_reset(s))
            failures++;
        if (gp_session_set_tokens(s, &id, &pos, 1) || gp_session_eval(s))
            failures++;
    }
    int64_t during = gp_alloc_count_stop();
    CU_ASSERT_EQUAL(failures, 0);
    CU_ASSERT_EQUAL(during, 0);
    gp_session_free(s);
    adapter_free(&ad);
    gp_model_free(m);
    gp_graph_free(g);
}

/* ---- runtime mode ---- */

/* Writes an adapter folder for the targets of graph g (random A, B from seed); returns its path. */
static const char *adapter_dir(const gp_graph *g, const char *targets, const char *json, int fan,
                               double alpha, uint64_t seed)
{
    adapter ad;
    const char *dir = write_adapter(g, targets, 4, fan, seed, alpha, json, fan, 0, &ad);
    adapter_free(&ad);
    return dir;
}

/* Logits of a plan without slots (the defs but the last, lora_r) with the adapter merged. */
static float *merged_logits(const char *example, const char **defs, int n_defs, const char *dir,
                            size_t *n)
{
    char err[2048] = "", mplan[600];
    gp_model *m = compile_model(example, defs, n_defs - 1, NULL);
    const char *path = merge_plan_file(example, defs, n_defs, NULL);
    snprintf(mplan, sizeof mplan, "%s", path ? path : "");
    float *l = NULL;
    if (m && path && !gp_model_random_weights(m, SEED, err, sizeof err) &&
        !gp_model_apply_lora(m, dir, mplan, 1.0, err, sizeof err))
        l = logits_of(m, "cpu", n);
    else
        fprintf(stderr, "merge: %s\n", err);
    gp_model_free(m);
    return l;
}

/* Runtime mode (slots bound by gp_model_bind_adapter) against merge mode, same adapter. */
static void runtime_vs_merge(const char *example, const char **defs, int n_defs,
                             const char *targets, const char *json, int fan)
{
    gp_graph *g = NULL;
    gp_model *m = compile_model(example, defs, n_defs, &g);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char err[2048];
    const char *dir = adapter_dir(g, targets, json, fan, 8, 21);
    CU_ASSERT_EQUAL_FATAL(gp_model_random_weights(m, SEED, err, sizeof err), 0);
    size_t n0 = 0, n1 = 0, n2 = 0;
    float *base = logits_of(m, "cpu", &n0); /* slots zero: the base model */
    int rc = gp_model_bind_adapter(m, dir, 1.0, err, sizeof err);
    if (rc)
        fprintf(stderr, "bind: %s\n", err);
    CU_ASSERT_EQUAL(rc, 0);
    float *got = logits_of(m, "cpu", &n1);
    float *want = merged_logits(example, defs, n_defs, dir, &n2);
    CU_ASSERT_FATAL(base && got && want && n0 == n1 && n1 == n2);
    double rd = gp_test_rel_err(got, want, n1, GP_TEST_MAX);
    CU_ASSERT(rd <= 1e-5);
    CU_ASSERT(gp_test_rel_err(base, want, n1, GP_TEST_MAX) > 1e-3); /* the adapter matters */
    printf("\n  %s: runtime vs merged, max rel diff %.2e ", example, rd);
    free(base);
    free(got);
    free(want);
    gp_model_free(m);
    gp_graph_free(g);
}

static void test_runtime_gpt2(void)
{
    runtime_vs_merge("examples/gpt2.gplan", gpt2_defs, 7, "c_attn c_proj c_fc",
                     "[\"c_attn\", \"c_proj\", \"c_fc\"]", 1);
}

static void test_runtime_llama(void)
{
    runtime_vs_merge("examples/llama.gplan", llama_rt_defs, 9, "q_proj k_proj v_proj o_proj",
                     "[\"q_proj\", \"k_proj\", \"v_proj\", \"o_proj\"]", 0);
}

/* Two adapters bound in turn to one session: each eval equals a fresh merge of that adapter, and
 * the evals allocate nothing; the weight bytes do not grow. lora_r adds 3 nodes per target. */
static void test_runtime_rebind(void)
{
    gp_graph *g = NULL, *g0 = NULL;
    gp_model *m = compile_model("examples/gpt2.gplan", gpt2_defs, 7, &g);
    gp_model *m0 = compile_model("examples/gpt2.gplan", gpt2_defs, 6, &g0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m0);
    CU_ASSERT_EQUAL(g->n_nodes - g0->n_nodes, 2 * 4 * 3); /* 2 layers, 4 targets */
    char err[2048], d1[512], d2[512];
    snprintf(d1, sizeof d1, "%s", adapter_dir(g, "c_attn c_proj c_fc",
                                              "[\"c_attn\", \"c_proj\", \"c_fc\"]", 1, 8, 31));
    snprintf(d2, sizeof d2, "%s", adapter_dir(g, "c_attn", "[\"c_attn\"]", 1, 32, 32));
    size_t n1 = 0, n2 = 0;
    float *want1 = merged_logits("examples/gpt2.gplan", gpt2_defs, 7, d1, &n1);
    float *want2 = merged_logits("examples/gpt2.gplan", gpt2_defs, 7, d2, &n2);
    CU_ASSERT_FATAL(want1 && want2 && n1 == n2 && n1 == N_TOK * 256);
    CU_ASSERT(gp_test_rel_err(want1, want2, n1, GP_TEST_MAX) > 1e-3);

    CU_ASSERT_EQUAL_FATAL(gp_model_random_weights(m, SEED, err, sizeof err), 0);
    gp_model_info before, after;
    gp_model_get_info(m, &before);
    gp_session_opts o = {"cpu", 2, 0};
    gp_session *s = gp_session_new(m, &o, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    int32_t ids[N_TOK], pos[N_TOK];
    for (int t = 0; t < N_TOK; t++) {
        ids[t] = (int32_t)((t * 37 + 3) % 256);
        pos[t] = t;
    }
    int64_t allocs = 0;
    int failures = 0;
    for (int round = 0; round < 6; round++) {
        const char *dir = round % 2 ? d2 : d1;
        const float *want = round % 2 ? want2 : want1;
        if (gp_model_bind_adapter(m, dir, 1.0, err, sizeof err) || gp_session_reset(s)) {
            fprintf(stderr, "rebind: %s\n", err);
            failures++;
            continue;
        }
        gp_alloc_count_start();
        int bad = gp_session_set_tokens(s, ids, pos, N_TOK) || gp_session_eval(s);
        for (int i = 0; i < 20 && !bad; i++) { /* decode steps: the same allocation-free path */
            int32_t id = i, p = N_TOK + i;
            bad = gp_session_set_tokens(s, &id, &p, 1) || gp_session_eval(s);
        }
        allocs += gp_alloc_count_stop();
        failures += bad;
        /* The prompt's logits again, on a fresh sequence, against the merged model. */
        gp_tensor_info ti;
        const float *l = NULL;
        if (bad || gp_session_reset(s) || gp_session_set_tokens(s, ids, pos, N_TOK) ||
            gp_session_set_rows(s, NULL, N_TOK) || gp_session_eval(s) || !(l = gp_session_output(s, "logits", &ti)) ||
            ti.bytes != n1 * sizeof(float) || gp_test_rel_err(l, want, n1, GP_TEST_MAX) > 1e-5)
            failures++;
    }
    CU_ASSERT_EQUAL(failures, 0);
    CU_ASSERT_EQUAL(allocs, 0);
    gp_model_get_info(m, &after);
    CU_ASSERT_EQUAL(after.weights_loaded, before.weights_loaded);
    gp_session_free(s);
    free(want1);
    free(want2);
    gp_model_free(m);
    gp_model_free(m0);
    gp_graph_free(g);
    gp_graph_free(g0);
}

static void test_runtime_errors(void)
{
    gp_graph *g = NULL;
    gp_model *m = compile_model("examples/gpt2.gplan", gpt2_defs, 7, &g);
    gp_model *m0 = compile_model("examples/gpt2.gplan", gpt2_defs, 6, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m0);
    char err[2048], want[2048];
    const char *dir = adapter_dir(g, "c_attn", "[\"c_attn\"]", 1, 8, 41);
    CU_ASSERT_EQUAL(gp_model_bind_adapter(m, dir, 1.0, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "lora: bind the model's weights before binding an adapter");
    CU_ASSERT_EQUAL(gp_model_random_weights(m0, SEED, err, sizeof err), 0);
    CU_ASSERT_EQUAL(gp_model_bind_adapter(m0, dir, 1.0, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "lora: plan \"gpt2\" has no adapter slots (compile the graph "
                           "with -D lora_r=R for runtime adapters)");
    CU_ASSERT_EQUAL_FATAL(gp_model_random_weights(m, SEED, err, sizeof err), 0);
    size_t nb = 0;
    float *base = logits_of(m, "cpu", &nb);
    CU_ASSERT_PTR_NOT_NULL_FATAL(base);

    /* Rank 8 against slots of rank 4. */
    write_config(dir, 8, 8, "[\"c_attn\"]", 1, 0);
    CU_ASSERT_EQUAL(gp_model_bind_adapter(m, dir, 1.0, err, sizeof err), -1);
    snprintf(want, sizeof want, "lora: %s: the adapter has rank 8, the plan's slots rank 4 "
             "(compile with -D lora_r=8)", dir);
    CU_ASSERT_STRING_EQUAL(err, want);

    /* B of the wrong shape. */
    adapter ad;
    make_adapter(g, "c_attn", 4, 1, 42, &ad);
    ad.out[0] = 96;
    write_config(dir, 4, 8, "[\"c_attn\"]", 1, 0);
    write_weights(dir, &ad, -1);
    ad.out[0] = 192;
    CU_ASSERT_EQUAL(gp_model_bind_adapter(m, dir, 1.0, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "lora: \"base_model.model.transformer.h.0.attn.c_attn.lora_B."
                           "weight\": the plan's slot is [192, 4], file has [96, 4]");

    /* A module the plan has no slot for (layer 7 of 2). */
    name_module(&ad, 1, "transformer.h.7.attn.c_attn");
    write_weights(dir, &ad, -1);
    CU_ASSERT_EQUAL(gp_model_bind_adapter(m, dir, 1.0, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "lora: \"base_model.model.transformer.h.7.attn.c_attn.lora_A."
                           "weight\": the plan has no adapter slot of that name (see docs/lora.md: "
                           "the graph declares the targets of runtime mode)");

    /* The slots are unchanged (still zero): the logits are the base model's. */
    CU_ASSERT(logits_are(m, base, nb));
    free(base);
    adapter_free(&ad);
    gp_model_free(m);
    gp_model_free(m0);
    gp_graph_free(g);
}

/* The tensor of p named name, or -1. */
static int tensor_named(const gp_plan *p, const char *name)
{
    for (int i = 0; i < p->n_tensors; i++)
        if (!strcmp(p->tensors[i].name, name))
            return i;
    return -1;
}

/* The first step of the product that the bias add making tensor name reads (c_fc's x W of
 * "f.L", c_attn's of "qkv.L"), or -1. */
static int product_first(const gp_plan *p, const char *name)
{
    int t = tensor_named(p, name);
    int s = t >= 0 ? p->tensors[t].producer : -1;
    if (s < 0 || p->nodes[s].op != GP_OP_ADD)
        return -1;
    int prod = p->nodes[s].inputs[0], m = p->tensors[prod].producer;
    return m >= 0 && p->nodes[m].op == GP_OP_MATMUL ? p->tensors[prod].first : -1;
}

/* The step of the node that makes tensor name, or -1. */
static int step_of(const gp_plan *p, const char *name)
{
    int t = tensor_named(p, name);
    return t >= 0 ? p->tensors[t].producer : -1;
}

/*
 * Runtime mode in plans for CUDA: the branches' products do not move the accumulated outputs'
 * first steps (docs/plan-format.md). c_fc's product starts at c_proj's step and c_attn's (past
 * the first layer) at the previous layer's mlp.c_proj's, with branches of rank 8 and 64 as
 * without: the CUDA backend merges the branches into the weights, so those products are the
 * launches before, which zero the outputs (its "accum").
 */
static void test_runtime_accumulated(void)
{
    for (int r = 0; r < 3; r++) {
        char defs_r[32], l0[16], l1[16];
        snprintf(defs_r, sizeof defs_r, "lora_r=%d", r == 0 ? 0 : r == 1 ? 8 : 64);
        const char *defs[7] = {"n_layer=2", "n_embd=64", "n_head=2", "vocab_size=128",
                               "n_positions=32", "wtype=f16", defs_r};
        gp_diag *d = gp_diag_new(NULL);
        gp_dsl_opts o = {.defines = defs, .n_defines = 7};
        gp_graph *g = gp_dsl_compile_file(gp_test_path("examples/gpt2.gplan"), &o, d);
        gp_plan_opts po;
        memset(&po, 0, sizeof po);
        po.backends = GP_BACKEND_BIT(GP_BACKEND_CUDA);
        gp_plan *p = NULL;
        CU_ASSERT_PTR_NOT_NULL_FATAL(g);
        CU_ASSERT_EQUAL_FATAL(gp_plan_build(g, &po, &p, d), 0);
        for (int l = 0; l < 2; l++) {
            snprintf(l0, sizeof l0, "f.%d", l);
            snprintf(l1, sizeof l1, "o.%d", l);
            int first = product_first(p, l0), at = step_of(p, l1);
            if (first != at)
                fprintf(stderr, "\n  %s: c_fc.%d's product from step %d, c_proj's at %d\n",
                        defs_r, l, first, at);
            CU_ASSERT(at >= 0);
            CU_ASSERT_EQUAL(first, at);
        }
        int first = product_first(p, "qkv.1"), at = step_of(p, "d.0");
        CU_ASSERT(at >= 0);
        CU_ASSERT_EQUAL(first, at);
        gp_plan_free(p);
        gp_graph_free(g);
        gp_diag_free(d);
    }
}

/* The tests share adapter folders and plan files (tmpdir, plan_file): removed after the suite. */
static int suite_clean(void)
{
    gp_test_tmp_remove_all();
    return 0;
}

void gp_suite_lora(void);
void gp_suite_lora(void)
{
    static const gp_test_case tests[] = {
        {"merge graph: 3 nodes per target, one arena for all layers", test_merge_graph},
        {"tiny GPT-2 (Conv1D): merged = double-precision reference", test_gpt2_merge},
        {"fan_in_fan_out: transposed delta by value", test_fan_in_fan_out},
        {"llama (Linear): merged = reference; rslora", test_llama_merge},
        {"scale 0: bit for bit the base model", test_scale_zero},
        {"errors, with weights unchanged", test_errors},
        {"no allocation in the planned merge and in evals", test_no_alloc},
        {"runtime mode, tiny GPT-2: = merged", test_runtime_gpt2},
        {"runtime mode, small llama: = merged", test_runtime_llama},
        {"runtime mode: rebinding between evals, no allocation", test_runtime_rebind},
        {"runtime mode: errors, slots unchanged", test_runtime_errors},
        {"runtime mode, plans for CUDA: accumulated outputs start as without branches",
         test_runtime_accumulated},
    };
    gp_test_add_suite("lora", NULL, suite_clean, tests, GP_TEST_COUNT(tests));
}
