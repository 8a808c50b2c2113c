/* One way for the test suites to get a runnable model from an example graph (tests/testmodel.h). */
#include "tests/testmodel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsl/dsl.h"
#include "planner/planner.h"
#include "runtime/lora.h"
#include "plan/plan.h"
#include "cpu/quant.h"
#include "weights/safetensors.h"
#include "tests/testutil.h"

gp_model *gp_test_model(const char *example, const gp_test_model_opts *o, gp_graph **graph_out)
{
    static const gp_test_model_opts none = {0};
    if (!o)
        o = &none;
    char err[1024] = "";
    gp_diag *d = gp_diag_new(NULL);
    gp_dsl_opts dopts = {.defines = (const char **)o->defines,
                        .n_defines = o->n_defines,
                        .config_path = o->config,
                        .devices = o->devices};
    gp_plan_opts popts = {0};
    popts.n_devices = o->devices > 0 ? o->devices : 1;
    gp_graph *g = gp_dsl_compile_file(gp_test_path(example), &dopts, d);
    gp_plan *p = NULL;
    unsigned char *bytes = NULL;
    size_t len = 0;
    gp_model *m = NULL;
    if (g && !gp_plan_build(g, &popts, &p, d) &&
        !gp_plan_write_mem(p, &bytes, &len, err, sizeof err)) {
        m = gp_model_load_mem(bytes, len, example, err, sizeof err);
        if (m && o->seed && gp_model_random_weights(m, o->seed, err, sizeof err)) {
            gp_model_free(m);
            m = NULL;
        }
    }
    if (!m)
        fprintf(stderr, "\n  %s (%d device%s): %s%s\n", example, popts.n_devices,
                popts.n_devices == 1 ? "" : "s", gp_diag_text(d), err);
    free(bytes);
    gp_plan_free(p);
    if (graph_out && m)
        *graph_out = g;
    else
        gp_graph_free(g);
    gp_diag_free(d);
    return m;
}

gp_model *gp_test_llama_small(int n_ctx, int n_batch, const char *wtype, uint64_t seed)
{
    char ctx[48], batch[32], w[32];
    snprintf(ctx, sizeof ctx, "max_position_embeddings=%d", n_ctx);
    snprintf(batch, sizeof batch, "n_batch=%d", n_batch);
    snprintf(w, sizeof w, "wtype=%s", wtype);
    const char *defs[] = {"num_hidden_layers=2",  "hidden_size=256",       "intermediate_size=512",
                          "num_attention_heads=4", "num_key_value_heads=2", "vocab_size=96",
                          ctx, batch, w};
    gp_test_model_opts o = {defs, (int)(sizeof defs / sizeof defs[0]), NULL, 1, seed};
    return gp_test_model("examples/llama.gplan", &o, NULL);
}

int64_t gp_test_vocab(const gp_model *m)
{
    gp_model_info info;
    gp_model_get_info(m, &info);
    return info.vocab;
}

int gp_test_eval_tokens(gp_session *s, int n, int start, int mult, float *out, int64_t vocab)
{
    int32_t ids[64], pos[64];
    if (n < 1 || n > 64)
        return -1;
    for (int i = 0; i < n; i++) {
        ids[i] = (int32_t)((int64_t)(start + i) * mult % vocab);
        pos[i] = start + i;
    }
    const float *l = NULL;
    /* Every row's logits: a graph with a rows input computes only the last one by default. */
    if (gp_session_set_tokens(s, ids, pos, n) || gp_session_set_rows(s, NULL, n) ||
        gp_session_eval(s) ||
        !(l = gp_session_output(s, "logits", NULL))) {
        fprintf(stderr, "\n  eval: %s\n", gp_session_error(s));
        return -1;
    }
    memcpy(out, l, sizeof(float) * (size_t)n * (size_t)vocab);
    return 0;
}

const char *gp_test_write_dequantized(const gp_model *m)
{
    const gp_plan *p = gp_model_plan(m);
    gp_st_tensor *ts = calloc((size_t)p->n_tensors, sizeof *ts);
    float **bufs = calloc((size_t)p->n_tensors, sizeof *bufs);
    int n = 0, bad = 0;
    for (int i = 0; i < p->n_tensors && !bad; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        if (t->kind != GP_TENSOR_WEIGHT || gp_lora_is_slot(t->weight_name))
            continue;
        int dup = 0;
        for (int k = 0; k < n && !dup; k++)
            dup = !strcmp(ts[k].name, t->weight_name ? t->weight_name : t->name);
        if (dup)
            continue;
        int64_t numel = 1;
        for (int d = 0; d < t->ndim; d++)
            numel *= t->dims[d];
        float *f = malloc((size_t)numel * sizeof *f);
        const char *src = gp_model_weight_data(m, i);
        if (gp_dtype_is_quant(t->dtype)) {
            int64_t k = t->dims[t->ndim - 1];
            size_t row = gp_dtype_row_bytes(t->dtype, k);
            for (int64_t r = 0; r < numel / k; r++)
                gp_quant_dequantize_row(t->dtype, src + r * row, f + r * k, k);
        } else if (t->dtype == GP_F32) {
            memcpy(f, src, (size_t)numel * sizeof *f);
        } else {
            fprintf(stderr, "gp_test_write_dequantized: %s is %s, not f32 or quantized\n",
                    t->name, gp_dtype_name(t->dtype));
            free(f);
            bad = 1;
            continue;
        }
        bufs[n] = f;
        ts[n].name = t->weight_name ? t->weight_name : t->name;
        ts[n].dtype = GP_F32;
        ts[n].ndim = t->ndim;
        memcpy(ts[n].shape, t->dims, sizeof t->dims);
        ts[n].data = f;
        ts[n].nbytes = (size_t)numel * sizeof *f;
        n++;
    }
    const char *path = gp_test_tmpfile(".safetensors");
    char err[512];
    int rc = bad ? -1 : gp_st_write(path, ts, n, NULL, err, sizeof err);
    if (rc && !bad)
        fprintf(stderr, "gp_test_write_dequantized: %s\n", err);
    for (int k = 0; k < n; k++)
        free(bufs[k]);
    free(bufs);
    free(ts);
    return rc ? NULL : path;
}

const char *gp_test_llama_dequantized(int n_ctx, int n_batch, const char *wtype, uint64_t seed,
                                      gp_model **q, gp_model **f)
{
    *q = gp_test_llama_small(n_ctx, n_batch, wtype, seed);
    *f = gp_test_llama_small(n_ctx, n_batch, "f32", 0);
    const char *path = *q && *f ? gp_test_write_dequantized(*q) : NULL;
    char err[2048];
    if (path && gp_model_bind_weights(*f, path, err, sizeof err)) {
        fprintf(stderr, "gp_test_llama_dequantized: %s\n", err);
        remove(path);
        path = NULL;
    }
    if (!path) {
        gp_model_free(*q);
        gp_model_free(*f);
        *q = *f = NULL;
    }
    return path;
}
