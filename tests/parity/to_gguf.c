/* parity-to-gguf: writes a parity fixture's checkpoint (FIXTURE/config.json and
 * model.safetensors) as a GGUF file laid out as llama.cpp's convert_hf_to_gguf.py lays out the
 * gpt2, llama, gemma2, gemma3 and phi3 architectures, so the --gguf parity tests run on the
 * fixture's own weights with no committed GGUF and no Python. No vocabulary.
 * scripts/parity/make_gguf.py writes the same bytes with gguf-py (for gemma2, gemma3 and phi3 with
 * gguf-py's tensor names; tests/parity/to_gguf_check.sh compares the two where Python is there).
 *
 * What the converter does and this does too (docs/gguf.md, "What llama.cpp's converter changed"):
 * - gpt2 (model_type gpt2): the Conv1D weights (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj)
 *   transposed to [out, in]; attn.bias and attn.masked_bias buffers dropped.
 * - llama (model_type llama or mistral): q_proj and k_proj rows permuted for ggml's interleaved
 *   rope.
 * - llama with rope_type "llama3" (Llama 3.1 and later; rope_parameters, its full_attention entry,
 *   or rope_scaling): no rope scaling metadata but a tensor rope_freqs.weight f32[head_dim / 2],
 *   pair j's factor (ggml divides the frequency by it: 1, factor, or 1 / ((1 - s) / factor + s)
 *   between), computed in float32 as LlamaModel.generate_extra_tensors computes it with torch;
 *   first in the file, as the converter yields it before the checkpoint's tensors.
 * - phi3 with rope_type "longrope" (the 128k models, Phi-3.5): rope_factors_long.weight and
 *   rope_factors_short.weight from the config's long_factor and short_factor, first in the file,
 *   and rope.scaling.attn_factor (sqrt(1 + ln(s) / ln(original)), s the context's growth).
 * - gemma2, gemma3 (model_type gemma3 or gemma3_text): every norm weight + 1 (transformers scales
 *   by 1 + w); Gemma 2's lm_head dropped (llama.cpp's head is the embedding).
 * - phi3: the fused qkv_proj and gate_up_proj kept as they are (attn_qkv, ffn_up).
 * - mixtral (arch llama) and qwen3_moe (arch qwen3moe, q and k not permuted): each layer's
 *   experts.E.* merged into one [E, out, in] tensor, blk.N.ffn_{gate,up,down}_exps, as the
 *   converter merges them; with --split-experts (Mixtral only) written one by one under the old
 *   files' names, blk.N.ffn_gate.E, each kind's experts one after another. The router
 *   (ffn_gate_inp) stays f32 with --f16, as the converter keeps it.
 * - a tied lm_head dropped; names by gp_gguf_name_from_hf; ARCH.* metadata from config.json, only
 *   the keys the converter writes, in its order; every tensor f32, or with --f16 every 2-dim one
 *   f16 (the converter's default --outtype f16).
 * Tensors go in the checkpoint's name order (strcmp), data aligned to 32 bytes.
 *
 * usage: parity-to-gguf [--f16] [--sliding-window] [--no-head-dim] [--split-experts]
 *                       [--config CONFIG.json] FIXTURE_DIR OUT.gguf
 *                       [KEY=u32:N | KEY=f32:X | KEY=str:S]...
 *   --sliding-window also writes llama.attention.sliding_window from config.json (llama.cpp's
 *   converter does not for llama files; gplan-compile --gguf reads it when it is there).
 *   --config reads CONFIG.json in place of FIXTURE_DIR/config.json (a variant of a fixture's
 *   configuration over the same weights).
 *   --no-head-dim writes no llama.attention.key_length / value_length, as the converter does for a
 *   config without head_dim (gplan-compile --gguf then takes embedding_length / head_count).
 *   each KEY (after "ARCH.") is added, or replaces the converter's, as given: keys llama.cpp reads
 *   that the converter leaves out (gemma3's attention.sliding_window_pattern), or bad values.
 * Exit status 0, or 1 with a message. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/f16.h"
#include "weights/gguf.h"
#include "weights/safetensors.h"
#include "weights/weights.h"
#include "tests/gguf_writer.h"

#define ALIGN 32
#define MAX_KV 48
#define MAX_TENSORS 4096

enum { GGML_F32 = 0, GGML_F16 = 1, LLAMA_FTYPE_F32 = 0, LLAMA_FTYPE_F16 = 1 };

typedef enum { A_GPT2, A_LLAMA, A_GEMMA2, A_GEMMA3, A_PHI3, A_QWEN3MOE } arch_id;

static const struct {
    const char *model_type, *arch;
    arch_id id;
} archs[] = {
    {"gpt2", "gpt2", A_GPT2},       {"llama", "llama", A_LLAMA},
    {"mistral", "llama", A_LLAMA},  {"gemma2", "gemma2", A_GEMMA2},
    {"gemma3", "gemma3", A_GEMMA3}, {"gemma3_text", "gemma3", A_GEMMA3},
    {"phi3", "phi3", A_PHI3},       {"mixtral", "llama", A_LLAMA},
    {"qwen3_moe", "qwen3moe", A_QWEN3MOE},
};

/* One metadata value to write. */
typedef struct {
    char key[128];
    gp_gguf_type type; /* GP_GGUF_UINT32, GP_GGUF_FLOAT32 or GP_GGUF_STRING */
    uint32_t u;
    float f;
    char s[64];
} kv;

typedef struct {
    const char *arch;
    kv v[MAX_KV];
    int n;
    int bad; /* a key config.json lacks, a bad argument: reported, the file not written */
} meta;

typedef struct {
    char name[160];  /* GGUF name */
    uint32_t type;   /* GGML_F32 or GGML_F16 */
    uint32_t ndim;
    int64_t ne[4];   /* [ndim] ggml order, innermost first */
    void *data;      /* [nbytes] */
    size_t nbytes;
} out_tensor;

static int fail(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "parity-to-gguf: ");
    fprintf(stderr, fmt, a, b);
    fputc('\n', stderr);
    return -1;
}

/* The entry of KEY (ARCH.KEY unless it starts with "general." or "tokenizer."), a new one or the
 * one already there (a command-line key replaces it in place). NULL when full. */
static kv *add(meta *m, const char *key, gp_gguf_type type)
{
    char full[128];
    if (strncmp(key, "general.", 8) == 0 || strncmp(key, "tokenizer.", 10) == 0)
        snprintf(full, sizeof full, "%s", key);
    else
        snprintf(full, sizeof full, "%s.%s", m->arch, key);
    kv *e = NULL;
    for (int i = 0; i < m->n && !e; i++)
        if (strcmp(m->v[i].key, full) == 0)
            e = &m->v[i];
    if (!e && m->n == MAX_KV) {
        m->bad = fail("too many keys%s%s", "", "");
        return NULL;
    }
    if (!e)
        e = &m->v[m->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->key, sizeof e->key, "%s", full);
    e->type = type;
    return e;
}

static void add_u32(meta *m, const char *key, double v)
{
    kv *e = add(m, key, GP_GGUF_UINT32);
    if (e)
        e->u = (uint32_t)v;
}

static void add_f32(meta *m, const char *key, double v)
{
    kv *e = add(m, key, GP_GGUF_FLOAT32);
    if (e)
        e->f = (float)v;
}

static void add_str(meta *m, const char *key, const char *s)
{
    kv *e = add(m, key, GP_GGUF_STRING);
    if (e)
        snprintf(e->s, sizeof e->s, "%s", s);
}

/* A value by a dotted path ("rope_parameters.full_attention.rope_theta"), NULL when absent. */
static const json_t *at(const json_t *cfg, const char *path)
{
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    const json_t *j = cfg;
    for (char *part = strtok(buf, "."); part && j; part = strtok(NULL, "."))
        j = json_is_object(j) ? json_object_get(j, part) : NULL;
    return j && !json_is_null(j) ? j : NULL;
}

/* The first of the paths (NULL-terminated) that holds a number; 0 with *v set, -1 when none. */
static int num(const json_t *cfg, const char *const *paths, double *v)
{
    for (; *paths; paths++) {
        const json_t *j = at(cfg, *paths);
        if (j && json_is_number(j)) {
            *v = json_number_value(j);
            return 0;
        }
    }
    return -1;
}

/* config[path] as a number; 0 with m->bad set and a message when absent. */
static double need(meta *m, const json_t *cfg, const char *path)
{
    double v = 0;
    const char *paths[] = {path, NULL};
    if (num(cfg, paths, &v) == 0)
        return v;
    m->bad = fail("config.json: no number \"%s\"%s", path, "");
    return 0;
}

/* num_key_value_heads, num_attention_heads when absent. */
static double kv_heads(meta *m, const json_t *cfg)
{
    double v = 0;
    const char *paths[] = {"num_key_value_heads", NULL};
    return num(cfg, paths, &v) == 0 ? v : need(m, cfg, "num_attention_heads");
}

/* The keys every llama-like converter writes first (TextModel's), in the order of llama's. */
static void common(meta *m, const json_t *cfg)
{
    add_u32(m, "block_count", need(m, cfg, "num_hidden_layers"));
    add_u32(m, "context_length", need(m, cfg, "max_position_embeddings"));
    add_u32(m, "embedding_length", need(m, cfg, "hidden_size"));
    add_u32(m, "feed_forward_length", need(m, cfg, "intermediate_size"));
    add_u32(m, "attention.head_count", need(m, cfg, "num_attention_heads"));
    add_u32(m, "attention.head_count_kv", kv_heads(m, cfg));
}

static void gpt2_meta(meta *m, const json_t *cfg, int opt_window, int opt_no_head_dim)
{
    (void)opt_window, (void)opt_no_head_dim;
    const char *ctx[] = {"n_ctx", "n_positions", NULL};
    double v = 0;
    if (num(cfg, ctx, &v))
        m->bad = fail("config.json: no number \"%s\"%s", "n_positions", "");
    add_u32(m, "block_count", need(m, cfg, "n_layer"));
    add_u32(m, "context_length", v);
    add_u32(m, "embedding_length", need(m, cfg, "n_embd"));
    add_u32(m, "feed_forward_length", 4 * need(m, cfg, "n_embd"));
    add_u32(m, "attention.head_count", need(m, cfg, "n_head"));
    add_f32(m, "attention.layer_norm_epsilon", need(m, cfg, "layer_norm_epsilon"));
}

static void llama_meta(meta *m, const json_t *cfg, int opt_window, int opt_no_head_dim)
{
    double theta = 10000.0, head_dim;
    common(m, cfg);
    /* transformers 5 keeps rope_theta inside "rope_parameters" */
    const char *th[] = {"rope_theta", "rope_parameters.rope_theta", NULL};
    num(cfg, th, &theta);
    add_f32(m, "rope.freq_base", theta);
    add_f32(m, "attention.layer_norm_rms_epsilon", need(m, cfg, "rms_norm_eps"));
    const char *hd[] = {"head_dim", NULL};
    if (num(cfg, hd, &head_dim) == 0 && !opt_no_head_dim) {
        add_u32(m, "attention.key_length", head_dim);
        add_u32(m, "attention.value_length", head_dim);
    } else {
        head_dim = need(m, cfg, "hidden_size") / need(m, cfg, "num_attention_heads");
    }
    if (opt_window)
        add_u32(m, "attention.sliding_window", need(m, cfg, "sliding_window"));
    add_u32(m, "vocab_size", need(m, cfg, "vocab_size"));
    add_u32(m, "rope.dimension_count", head_dim);
}

static void gemma2_meta(meta *m, const json_t *cfg, int opt_window, int opt_no_head_dim)
{
    (void)opt_window, (void)opt_no_head_dim;
    common(m, cfg);
    add_f32(m, "attention.layer_norm_rms_epsilon", need(m, cfg, "rms_norm_eps"));
    add_u32(m, "attention.key_length", need(m, cfg, "head_dim"));
    add_u32(m, "attention.value_length", need(m, cfg, "head_dim"));
    add_f32(m, "attn_logit_softcapping", need(m, cfg, "attn_logit_softcapping"));
    add_f32(m, "final_logit_softcapping", need(m, cfg, "final_logit_softcapping"));
    add_u32(m, "attention.sliding_window", need(m, cfg, "sliding_window"));
    /* no rope.freq_base: Gemma 2's converter writes none (llama.cpp's default is 10000) */
}

static void gemma3_meta(meta *m, const json_t *cfg, int opt_window, int opt_no_head_dim)
{
    (void)opt_window, (void)opt_no_head_dim;
    double v = 0;
    common(m, cfg);
    add_f32(m, "attention.layer_norm_rms_epsilon", need(m, cfg, "rms_norm_eps"));
    add_u32(m, "attention.key_length", need(m, cfg, "head_dim"));
    add_u32(m, "attention.value_length", need(m, cfg, "head_dim"));
    const char *theta[] = {"rope_parameters.full_attention.rope_theta", "rope_theta", NULL};
    if (num(cfg, theta, &v) == 0)
        add_f32(m, "rope.freq_base", v);
    const char *local[] = {"rope_parameters.sliding_attention.rope_theta", "rope_local_base_freq",
                           NULL};
    if (num(cfg, local, &v) == 0)
        add_f32(m, "rope.freq_base_swa", v);
    const json_t *scaling = at(cfg, "rope_parameters.full_attention");
    if (!scaling)
        scaling = at(cfg, "rope_scaling");
    const json_t *type = scaling ? json_object_get(scaling, "rope_type") : NULL;
    const json_t *factor = scaling ? json_object_get(scaling, "factor") : NULL;
    if (type && json_is_string(type) && strcmp(json_string_value(type), "linear") == 0 &&
        json_is_number(factor)) {
        add_str(m, "rope.scaling.type", "linear");
        add_f32(m, "rope.scaling.factor", json_number_value(factor));
    }
    const char *cap[] = {"final_logit_softcapping", NULL};
    if (num(cfg, cap, &v) == 0 && v != 0)
        add_f32(m, "final_logit_softcapping", v);
    const char *pattern[] = {"sliding_window_pattern", NULL};
    if (num(cfg, pattern, &v) != 0 || v != 1)
        add_u32(m, "attention.sliding_window", need(m, cfg, "sliding_window"));
}

static void phi3_meta(meta *m, const json_t *cfg, int opt_window, int opt_no_head_dim)
{
    (void)opt_window, (void)opt_no_head_dim;
    double v = 0, rot = 1;
    common(m, cfg);
    add_f32(m, "attention.layer_norm_rms_epsilon", need(m, cfg, "rms_norm_eps"));
    const char *orig[] = {"original_max_position_embeddings",
                          "rope_parameters.original_max_position_embeddings", NULL};
    if (num(cfg, orig, &v) == 0)
        add_u32(m, "rope.scaling.original_context_length", v);
    const char *pct[] = {"rope_parameters.partial_rotary_factor", "partial_rotary_factor", NULL};
    num(cfg, pct, &rot);
    double heads = need(m, cfg, "num_attention_heads");
    add_u32(m, "rope.dimension_count",
            heads > 0 ? floor(floor(rot * need(m, cfg, "hidden_size")) / heads) : 0);
    const char *theta[] = {"rope_parameters.rope_theta", "rope_theta", NULL};
    if (num(cfg, theta, &v))
        m->bad = fail("config.json: no number \"%s\"%s", "rope_theta", "");
    add_f32(m, "rope.freq_base", v);
    const char *window[] = {"sliding_window", NULL};
    add_u32(m, "attention.sliding_window", num(cfg, window, &v) == 0 ? v : 0);
}

/* The experts' keys TextModel writes (num_local_experts or num_experts, num_experts_per_tok)
 * and Qwen3-MoE's expert_feed_forward_length; nothing for a dense config. */
static void expert_meta(meta *m, const json_t *cfg)
{
    double v = 0;
    const char *n[] = {"num_local_experts", "num_experts", NULL};
    if (num(cfg, n, &v) == 0)
        add_u32(m, "expert_count", v);
    const char *k[] = {"num_experts_per_tok", NULL};
    if (num(cfg, k, &v) == 0)
        add_u32(m, "expert_used_count", v);
}

static void mixtral_llama_meta(meta *m, const json_t *cfg, int opt_window, int opt_no_head_dim)
{
    llama_meta(m, cfg, opt_window, opt_no_head_dim);
    expert_meta(m, cfg);
}

static void qwen3moe_meta(meta *m, const json_t *cfg, int opt_window, int opt_no_head_dim)
{
    llama_meta(m, cfg, opt_window, opt_no_head_dim);
    expert_meta(m, cfg);
    add_u32(m, "expert_feed_forward_length", need(m, cfg, "moe_intermediate_size"));
}

static void (*const arch_meta[])(meta *, const json_t *, int, int) = {
    [A_GPT2] = gpt2_meta,     [A_LLAMA] = mixtral_llama_meta, [A_GEMMA2] = gemma2_meta,
    [A_GEMMA3] = gemma3_meta, [A_PHI3] = phi3_meta,          [A_QWEN3MOE] = qwen3moe_meta,
};

/* "KEY=u32:N", "KEY=f32:X" or "KEY=str:S". */
static void extra(meta *m, const char *arg)
{
    char key[128];
    const char *eq = strchr(arg, '=');
    const char *type = eq && (size_t)(eq - arg) < sizeof key ? eq + 1 : "";
    snprintf(key, sizeof key, "%.*s", eq ? (int)(eq - arg) : 0, arg);
    if (strncmp(type, "u32:", 4) == 0)
        add_u32(m, key, strtod(type + 4, NULL));
    else if (strncmp(type, "f32:", 4) == 0)
        add_f32(m, key, strtod(type + 4, NULL));
    else if (strncmp(type, "str:", 4) == 0)
        add_str(m, key, type + 4);
    else
        m->bad = fail("bad key argument '%s' (KEY=u32:N, KEY=f32:X or KEY=str:S)%s", arg, "");
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* The tensor's values as f32, changed as the converter does: [rows, cols] in, the same count
 * out. NULL with a message. */
static float *converted(const gp_st_tensor *t, arch_id arch, int n_head, int n_kv_head,
                        int64_t *rows, int64_t *cols)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    *rows = t->ndim == 2 ? t->shape[0] : 1;
    *cols = t->ndim == 2 ? t->shape[1] : n;
    float *src = malloc((size_t)n * sizeof *src);
    char err[256];
    if (!src || gp_weights_read(t, GP_F32, src, (size_t)n * sizeof *src, err, sizeof err)) {
        free(src);
        fail("%s: %s", t->name, src ? err : "out of memory");
        return NULL;
    }
    /* Gemma's RMSNorms scale by (1 + w): the converter stores 1 + w */
    if ((arch == A_GEMMA2 || arch == A_GEMMA3) && ends_with(t->name, "norm.weight"))
        for (int64_t k = 0; k < n; k++)
            src[k] += 1.0f;
    int transpose = arch == A_GPT2 && t->ndim == 2 &&
                    (ends_with(t->name, ".attn.c_attn.weight") ||
                     ends_with(t->name, ".attn.c_proj.weight") ||
                     ends_with(t->name, ".mlp.c_fc.weight") || ends_with(t->name, ".mlp.c_proj.weight"));
    int heads = 0;
    if (arch == A_LLAMA && (ends_with(t->name, ".self_attn.q_proj.weight") ||
                            ends_with(t->name, ".self_attn.q_proj.bias")))
        heads = n_head;
    if (arch == A_LLAMA && (ends_with(t->name, ".self_attn.k_proj.weight") ||
                            ends_with(t->name, ".self_attn.k_proj.bias")))
        heads = n_kv_head;
    if (!transpose && !heads)
        return src;
    float *dst = malloc((size_t)n * sizeof *dst);
    if (!dst) {
        free(src);
        fail("%s: %s", t->name, "out of memory");
        return NULL;
    }
    if (transpose) { /* [in, out] -> [out, in] */
        for (int64_t r = 0; r < *rows; r++)
            for (int64_t c = 0; c < *cols; c++)
                dst[c * *rows + r] = src[r * *cols + c];
        int64_t tmp = *rows;
        *rows = *cols;
        *cols = tmp;
    } else { /* row h*d + 2j + i of the file is row h*d + i*d/2 + j of the checkpoint */
        int64_t r_all = t->ndim == 2 ? *rows : n, width = t->ndim == 2 ? *cols : 1;
        int64_t d = r_all / heads;
        if (d * heads != r_all || d % 2) {
            free(src);
            free(dst);
            fail("%s: %s", t->name, "rows are not heads of an even head_dim");
            return NULL;
        }
        for (int64_t h = 0; h < heads; h++)
            for (int64_t j = 0; j < d / 2; j++)
                for (int64_t i = 0; i < 2; i++)
                    memcpy(dst + (h * d + 2 * j + i) * width, src + (h * d + i * d / 2 + j) * width,
                           (size_t)width * sizeof *dst);
    }
    free(src);
    return dst;
}

/* The rope object llama.cpp's converter reads (rope_parameters, else rope_scaling; its
 * full_attention entry when it has one), or NULL. */
static const json_t *rope_params(const json_t *cfg)
{
    const json_t *rp = json_object_get(cfg, "rope_parameters");
    if (!json_is_object(rp))
        rp = json_object_get(cfg, "rope_scaling");
    if (!json_is_object(rp))
        return NULL;
    const json_t *full = json_object_get(rp, "full_attention");
    return json_is_object(full) ? full : rp;
}

static double param_or(const json_t *o, const char *name, double dflt)
{
    const json_t *j = json_object_get(o, name);
    return json_is_number(j) ? json_number_value(j) : dflt;
}

/* rope_freqs.weight for a rope_type "llama3" config into *t: 0 (t->data set), 1 when the config
 * has no llama3 scaling, -1 with a message. The steps and their float32 roundings are the
 * converter's (torch float32 tensors against Python floats). */
static int llama3_rope_freqs(const json_t *cfg, out_tensor *t)
{
    const json_t *rp = rope_params(cfg);
    const char *type = rp ? json_string_value(json_object_get(rp, "rope_type")) : NULL;
    if (!type || strcmp(type, "llama3") != 0)
        return 1;
    double theta = param_or(rp, "rope_theta", param_or(cfg, "rope_theta", 10000.0));
    int64_t heads = (int64_t)param_or(cfg, "num_attention_heads", 0);
    int64_t hidden = (int64_t)param_or(cfg, "hidden_size", 0);
    int64_t dim = (int64_t)param_or(cfg, "head_dim", heads > 0 ? (double)(hidden / heads) : 0);
    if (dim < 2 || dim % 2 || dim > 1 << 20)
        return fail("config.json: head_dim is not an even number in 2..2^20%s%s", "", "");
    double lo_d = param_or(rp, "low_freq_factor", 1.0);
    double hi_d = param_or(rp, "high_freq_factor", 4.0);
    double old_len = param_or(rp, "original_max_position_embeddings", 8192.0);
    double lo_wavelen = old_len / lo_d, hi_wavelen = old_len / hi_d;
    float factor = (float)param_or(rp, "factor", 8.0), lo = (float)lo_d;
    float *f = malloc((size_t)dim / 2 * sizeof *f);
    if (!f)
        return fail("rope_freqs: %s%s", "out of memory", "");
    for (int64_t j = 0; j < dim / 2; j++) {
        float freq = 1.0f / powf((float)theta, (float)(2 * j) / (float)dim);
        float wavelen = (float)(2.0 * 3.14159265358979323846) / freq;
        if (wavelen < (float)hi_wavelen) {
            f[j] = 1.0f;
        } else if (wavelen > (float)lo_wavelen) {
            f[j] = factor;
        } else {
            float smooth = ((float)old_len / wavelen - lo) / (float)(hi_d - lo_d);
            f[j] = 1.0f / ((1.0f - smooth) / factor + smooth);
        }
    }
    snprintf(t->name, sizeof t->name, "rope_freqs.weight");
    t->type = GGML_F32;
    t->ndim = 1;
    t->ne[0] = dim / 2;
    t->data = f;
    t->nbytes = (size_t)dim / 2 * sizeof *f;
    return 0;
}

/* One f32 [n] tensor of a JSON array of n numbers into *t: 0, or -1 with a message. */
static int array_tensor(const json_t *a, int64_t n, const char *name, out_tensor *t)
{
    if (!json_is_array(a) || (int64_t)json_array_size(a) != n)
        return fail("config.json: rope %s is not an array of rope_dims / 2 numbers%s", name, "");
    float *f = malloc((size_t)(n > 0 ? n : 1) * sizeof *f);
    if (!f)
        return fail("%s: %s", name, "out of memory");
    for (int64_t j = 0; j < n; j++)
        f[j] = (float)json_number_value(json_array_get(a, (size_t)j));
    snprintf(t->name, sizeof t->name, "rope_factors_%s.weight",
             strcmp(name, "long_factor") ? "short" : "long");
    t->type = GGML_F32;
    t->ndim = 1;
    t->ne[0] = n;
    t->data = f;
    t->nbytes = (size_t)n * sizeof *f;
    return 0;
}

/* Phi-3's LongRoPE (rope_type "longrope" with long_factor and short_factor): the two factor
 * tensors into t[0] (long) and t[1] (short), first in the file as the converter yields them, and
 * rope.scaling.attn_factor: sqrt(1 + ln(s) / ln(original)) for s = max_position_embeddings /
 * original_max_position_embeddings > 1, else 1. Returns the tensors written (0 without LongRoPE
 * or 2), or -1 with a message. */
static int phi3_longrope(meta *m, const json_t *cfg, out_tensor *t)
{
    const json_t *rp = rope_params(cfg);
    const char *type = rp ? json_string_value(json_object_get(rp, "rope_type")) : NULL;
    if (!type)
        type = rp ? json_string_value(json_object_get(rp, "type")) : NULL;
    if (!type || (strcmp(type, "longrope") != 0 && strcmp(type, "su") != 0))
        return 0;
    double heads = param_or(cfg, "num_attention_heads", 0);
    double hidden = param_or(cfg, "hidden_size", 0);
    double rot = param_or(rp, "partial_rotary_factor", param_or(cfg, "partial_rotary_factor", 1.0));
    int64_t dims = heads > 0 ? (int64_t)(floor(rot * hidden) / heads) : 0;
    double max_pos = param_or(cfg, "max_position_embeddings", 0);
    double orig = param_or(cfg, "original_max_position_embeddings",
                           param_or(rp, "original_max_position_embeddings", 0));
    if (dims < 2 || dims > 1 << 20 || !(orig > 1))
        return fail("config.json: LongRoPE needs rope dims in 2..2^20 and "
                    "original_max_position_embeddings > 1%s%s", "", "");
    double scale = max_pos / orig;
    add_f32(m, "rope.scaling.attn_factor", scale > 1 ? sqrt(1 + log(scale) / log(orig)) : 1.0);
    if (array_tensor(json_object_get(rp, "long_factor"), dims / 2, "long_factor", &t[0]))
        return -1;
    if (array_tensor(json_object_get(rp, "short_factor"), dims / 2, "short_factor", &t[1])) {
        free(t[0].data);
        return -1;
    }
    return 2;
}

/* The expert index E of a checkpoint name "...experts.E.rest", or -1. */
static int expert_of(const char *name)
{
    const char *at = strstr(name, ".experts.");
    if (!at)
        return -1;
    char *end;
    long e = strtol(at + 9, &end, 10);
    return end != at + 9 && *end == '.' && e >= 0 && e < 4096 ? (int)e : -1;
}

/* The experts 0 .. n - 1 of expert 0's tensor s ("...experts.0.rest"), one [n, rows, cols]
 * tensor into *o under the GGUF name of the stacked "...experts.*.rest" (f16 with --f16). */
static int merge_experts(const gp_st_file *st, const gp_st_tensor *s, int64_t n, const char *arch,
                         int f16, out_tensor *o)
{
    char stacked[256], part[256];
    const char *at = strstr(s->name, ".experts.0.");
    if (!at || n < 1 || s->ndim != 2)
        return fail("%s: an expert weight of a config without experts, or not 2 dims%s", s->name,
                    "");
    snprintf(stacked, sizeof stacked, "%.*s.experts.*.%s", (int)(at - s->name), s->name, at + 11);
    if (gp_gguf_name_from_hf(arch, stacked, o->name, sizeof o->name))
        return fail("%s: no GGUF name for the %s architecture", stacked, arch);
    int64_t rows = s->shape[0], cols = s->shape[1], each = rows * cols;
    float *all = malloc((size_t)(n * each) * sizeof *all);
    if (!all)
        return fail("%s: %s", s->name, "out of memory");
    for (int64_t e = 0; e < n; e++) {
        char err[256];
        snprintf(part, sizeof part, "%.*s.experts.%lld.%s", (int)(at - s->name), s->name,
                 (long long)e, at + 11);
        const gp_st_tensor *p = gp_st_find(st, part);
        if (!p || p->ndim != 2 || p->shape[0] != rows || p->shape[1] != cols ||
            gp_weights_read(p, GP_F32, all + e * each, (size_t)each * sizeof *all, err,
                            sizeof err)) {
            free(all);
            return fail("%s: %s", part, p ? "not of expert 0's shape" : "missing");
        }
    }
    o->ndim = 3;
    o->ne[0] = cols;
    o->ne[1] = rows;
    o->ne[2] = n;
    size_t count = (size_t)(n * each);
    if (f16) {
        uint16_t *h = malloc(count * sizeof *h);
        if (!h) {
            free(all);
            return fail("%s: %s", s->name, "out of memory");
        }
        for (size_t k = 0; k < count; k++)
            h[k] = gp_f32_to_f16(all[k]);
        free(all);
        o->type = GGML_F16;
        o->data = h;
        o->nbytes = count * sizeof *h;
    } else {
        o->type = GGML_F32;
        o->data = all;
        o->nbytes = count * sizeof *all;
    }
    return 0;
}

/* Old Mixtral files' experts one by one: blk.N.KIND.E.weight's key blk.N.KIND.weight and E
 * (-1 for any other name). */
static long expert_key(const char *name, char *key, size_t cap)
{
    const char *w = strrchr(name, '.'), *d = w;
    while (d && d > name && d[-1] >= '0' && d[-1] <= '9')
        d--;
    if (!w || d == w || d == name || d[-1] != '.' || strncmp(name, "blk.", 4) != 0 ||
        strchr(name + 4, '.') >= d - 1) {
        snprintf(key, cap, "%s", name);
        return -1;
    }
    snprintf(key, cap, "%.*s%s", (int)(d - 1 - name), name, w);
    return strtol(d, NULL, 10);
}

/* Each kind's experts one after another in ascending order (a stable sort by key, then E), as
 * the old files hold them. */
static void group_experts(out_tensor *t, int n)
{
    for (int i = 1; i < n; i++) {
        out_tensor x = t[i];
        char kx[160], kj[160];
        long ex = expert_key(x.name, kx, sizeof kx);
        int j = i;
        for (; j > 0; j--) {
            long ej = expert_key(t[j - 1].name, kj, sizeof kj);
            int c = strcmp(kj, kx);
            if (c < 0 || (c == 0 && ej <= ex))
                break;
            t[j] = t[j - 1];
        }
        t[j] = x;
    }
}

static int write_file(const char *path, const meta *m, const out_tensor *t, int n_t)
{
    gp_gw w;
    gp_gw_init(&w);
    gp_gw_header(&w, 3, (uint64_t)n_t, (uint64_t)m->n + 1);
    gp_gw_kv_str(&w, "general.architecture", m->arch);
    for (int i = 0; i < m->n; i++) {
        const kv *e = &m->v[i];
        if (e->type == GP_GGUF_UINT32) {
            gp_gw_kv_u32(&w, e->key, e->u);
        } else if (e->type == GP_GGUF_FLOAT32) {
            gp_gw_key(&w, e->key, GP_GGUF_FLOAT32);
            gp_gw_f32(&w, e->f);
        } else {
            gp_gw_kv_str(&w, e->key, e->s);
        }
    }
    uint64_t off = 0;
    for (int i = 0; i < n_t; i++) {
        gp_gw_tensor_info(&w, t[i].name, t[i].ndim, t[i].ne, t[i].type, off);
        off += (t[i].nbytes + ALIGN - 1) / ALIGN * ALIGN;
    }
    gp_gw_pad(&w, ALIGN);
    for (int i = 0; i < n_t; i++) {
        gp_gw_bytes(&w, t[i].data, t[i].nbytes);
        gp_gw_pad(&w, ALIGN);
    }
    int rc = gp_gw_save(&w, path);
    gp_gw_free(&w);
    return rc ? fail("%s: cannot write%s", path, "") : 0;
}

int main(int argc, char **argv)
{
    int f16 = 0, window = 0, no_head_dim = 0, split_experts = 0, a = 1;
    const char *config = NULL;
    for (; a < argc && argv[a][0] == '-'; a++) {
        if (strcmp(argv[a], "--f16") == 0)
            f16 = 1;
        else if (strcmp(argv[a], "--config") == 0 && a + 1 < argc)
            config = argv[++a];
        else if (strcmp(argv[a], "--sliding-window") == 0)
            window = 1;
        else if (strcmp(argv[a], "--no-head-dim") == 0)
            no_head_dim = 1;
        else if (strcmp(argv[a], "--split-experts") == 0)
            split_experts = 1;
        else
            break;
    }
    if (argc - a < 2) {
        fprintf(stderr, "usage: parity-to-gguf [--f16] [--sliding-window] [--no-head-dim] "
                        "[--split-experts] [--config CONFIG.json] FIXTURE_DIR OUT.gguf "
                        "[KEY=u32:N|KEY=f32:X|KEY=str:S]...\n");
        return 1;
    }
    const char *dir = argv[a], *out = argv[a + 1];
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s", config ? config : "");
    if (!config)
        snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t jerr;
    json_t *cfg = json_load_file(path, 0, &jerr);
    if (!cfg)
        return fail("%s: %s", path, jerr.text), 1;
    const char *model_type = json_string_value(json_object_get(cfg, "model_type"));
    static meta m;
    arch_id arch = A_GPT2;
    for (size_t i = 0; i < sizeof archs / sizeof archs[0] && !m.arch; i++)
        if (model_type && strcmp(model_type, archs[i].model_type) == 0)
            m.arch = archs[i].arch, arch = archs[i].id;
    if (!m.arch) {
        fail("%s: model_type \"%s\" is not gpt2, llama, mistral, mixtral, gemma2, gemma3, "
             "gemma3_text, phi3 or qwen3_moe", path, model_type ? model_type : "");
        json_decref(cfg);
        return 1;
    }
    arch_meta[arch](&m, cfg, window, no_head_dim);
    static out_tensor t[MAX_TENSORS];
    int n_t = 0, rc = 1;
    /* rope tensors of the config: Llama 3.1's rope_freqs, Phi-3's LongRoPE factors */
    int freqs = arch == A_LLAMA && !m.bad ? llama3_rope_freqs(cfg, &t[0]) : 1;
    int longrope = arch == A_PHI3 && !m.bad ? phi3_longrope(&m, cfg, t) : 0;
    for (int i = a + 2; i < argc; i++)
        extra(&m, argv[i]);
    add_u32(&m, "general.file_type", f16 ? LLAMA_FTYPE_F16 : LLAMA_FTYPE_F32);
    int heads = 0, kv = 0;
    double experts = 0;
    const char *ne_keys[] = {"num_local_experts", "num_experts", NULL};
    if (num(cfg, ne_keys, &experts) || experts < 0 || experts > 4096)
        experts = 0;
    if (arch == A_LLAMA) {
        heads = (int)need(&m, cfg, "num_attention_heads");
        kv = (int)kv_heads(&m, cfg);
    }
    /* llama.cpp's Gemma 2 never reads an lm_head (its head is the embedding) */
    int drop_head = arch == A_GEMMA2 || json_is_true(json_object_get(cfg, "tie_word_embeddings"));
    json_decref(cfg);
    if (m.bad || freqs < 0 || longrope < 0) {
        for (int i = 0; i < (freqs == 0) + (longrope > 0 ? longrope : 0); i++)
            free(t[i].data);
        return 1;
    }
    n_t = (freqs == 0) + longrope;

    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    gp_st_file *st = gp_st_open(path, err, sizeof err);
    if (!st) {
        free(t[0].data);
        return fail("%s%s", err, ""), 1;
    }
    for (int i = 0; i < gp_st_count(st); i++) {
        const gp_st_tensor *s = gp_st_get(st, i);
        int expert = expert_of(s->name);
        if (expert >= 0 && !split_experts) {
            /* merged at its expert 0; the others are in it */
            if (expert > 0)
                continue;
            if (n_t == MAX_TENSORS) {
                fail("%s: %s", s->name, "too many tensors");
                goto done;
            }
            if (merge_experts(st, s, (int64_t)experts, m.arch, f16, &t[n_t]))
                goto done;
            n_t++;
            continue;
        }
        if (arch == A_GPT2 &&
            (ends_with(s->name, ".attn.bias") || ends_with(s->name, ".attn.masked_bias")))
            continue;
        if (drop_head && strcmp(s->name, "lm_head.weight") == 0)
            continue;
        if (n_t == MAX_TENSORS || s->ndim < 1 || s->ndim > 2) {
            fail("%s: %s", s->name, n_t == MAX_TENSORS ? "too many tensors" : "not 1 or 2 dims");
            goto done;
        }
        out_tensor *o = &t[n_t];
        if (gp_gguf_name_from_hf(m.arch, s->name, o->name, sizeof o->name)) {
            fail("%s: no GGUF name for the %s architecture", s->name, m.arch);
            goto done;
        }
        int64_t rows, cols;
        float *v = converted(s, arch, heads, kv, &rows, &cols);
        if (!v)
            goto done;
        n_t++;
        o->ndim = (uint32_t)s->ndim;
        o->ne[0] = cols;
        o->ne[1] = rows;
        size_t count = (size_t)(rows * cols);
        if (f16 && s->ndim == 2 && !ends_with(o->name, "ffn_gate_inp.weight")) {
            uint16_t *h = malloc(count * sizeof *h);
            if (!h) {
                free(v);
                fail("%s: %s", s->name, "out of memory");
                goto done;
            }
            for (size_t e = 0; e < count; e++)
                h[e] = gp_f32_to_f16(v[e]);
            free(v);
            o->type = GGML_F16;
            o->data = h;
            o->nbytes = count * sizeof *h;
        } else {
            o->type = GGML_F32;
            o->data = v;
            o->nbytes = count * sizeof *v;
        }
    }
    if (split_experts)
        group_experts(t, n_t);
    rc = write_file(out, &m, t, n_t) ? 1 : 0;
done:
    for (int i = 0; i < n_t; i++)
        free(t[i].data);
    gp_st_close(st);
    return rc;
}
