/* parity-to-gguf: a Hugging Face parity fixture (config.json + model.safetensors, f32) rewritten as
 * the GGUF file llama.cpp's convert_hf_to_gguf.py makes of such a checkpoint, for the gemma2,
 * gemma3 and phi3 architectures: its ARCH.* metadata keys (only those the converter writes), its
 * tensor names, and its changes to the weights (every Gemma norm weight + 1, Gemma 2's lm_head
 * dropped). No vocabulary. The --gguf parity tests (tests/parity/CMakeLists.txt) make their files
 * with it at test time; docs/gguf.md describes the layout.
 *
 * usage: parity-to-gguf [--f16] ARCH FIXTURE_DIR OUT.gguf [KEY=u32:N | KEY=f32:X | KEY=str:S]...
 *   --f16: 2-dim tensors in f16, the rest f32 (the converter's --outtype f16).
 *   each KEY (after "ARCH.") is added, or replaces the converter's, as given: keys llama.cpp reads
 *   that the converter leaves out (gemma3's attention.sliding_window_pattern), or bad values.
 * Exit status 0, or 1 with a message. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/f16.h"
#include "runtime/safetensors.h"
#include "tests/gguf_writer.h"

#define MAX_KV 48
#define MAX_TENSORS 512

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
} meta;

static void die(const char *fmt, const char *a)
{
    fprintf(stderr, "parity-to-gguf: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, "\n");
    exit(1);
}

/* The entry of ARCH.key, a new one or the one already there (a command-line key replaces it). */
static kv *add(meta *m, const char *key, gp_gguf_type type)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", m->arch, key);
    kv *e = NULL;
    for (int i = 0; i < m->n && !e; i++)
        if (strcmp(m->v[i].key, full) == 0)
            e = &m->v[i];
    if (!e && m->n == MAX_KV)
        die("too many keys%s", "");
    if (!e)
        e = &m->v[m->n++];
    memset(e, 0, sizeof *e);
    snprintf(e->key, sizeof e->key, "%s", full);
    e->type = type;
    return e;
}

static void add_u32(meta *m, const char *key, double v)
{
    add(m, key, GP_GGUF_UINT32)->u = (uint32_t)v;
}

static void add_f32(meta *m, const char *key, double v)
{
    add(m, key, GP_GGUF_FLOAT32)->f = (float)v;
}

static void add_str(meta *m, const char *key, const char *s)
{
    snprintf(add(m, key, GP_GGUF_STRING)->s, sizeof m->v[0].s, "%s", s);
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

/* The first of the paths that holds a number; 0 with *v set, -1 when none does. */
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

static double need(const json_t *cfg, const char *path)
{
    double v;
    const char *paths[] = {path, NULL};
    if (num(cfg, paths, &v))
        die("config.json has no number %s", path);
    return v;
}

/* What every family's converter writes (TextModel's keys). */
static void common(meta *m, const json_t *cfg)
{
    add_u32(m, "context_length", need(cfg, "max_position_embeddings"));
    add_u32(m, "embedding_length", need(cfg, "hidden_size"));
    add_u32(m, "feed_forward_length", need(cfg, "intermediate_size"));
    add_u32(m, "block_count", need(cfg, "num_hidden_layers"));
    add_u32(m, "attention.head_count", need(cfg, "num_attention_heads"));
    add_u32(m, "attention.head_count_kv", need(cfg, "num_key_value_heads"));
    add_f32(m, "attention.layer_norm_rms_epsilon", need(cfg, "rms_norm_eps"));
}

static void gemma2_meta(meta *m, const json_t *cfg)
{
    common(m, cfg);
    add_u32(m, "attention.key_length", need(cfg, "head_dim"));
    add_u32(m, "attention.value_length", need(cfg, "head_dim"));
    add_f32(m, "attn_logit_softcapping", need(cfg, "attn_logit_softcapping"));
    add_f32(m, "final_logit_softcapping", need(cfg, "final_logit_softcapping"));
    add_u32(m, "attention.sliding_window", need(cfg, "sliding_window"));
    /* no rope.freq_base: Gemma 2's converter writes none (llama.cpp's default is 10000) */
}

static void gemma3_meta(meta *m, const json_t *cfg)
{
    double v;
    common(m, cfg);
    add_u32(m, "attention.key_length", need(cfg, "head_dim"));
    add_u32(m, "attention.value_length", need(cfg, "head_dim"));
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
        add_u32(m, "attention.sliding_window", need(cfg, "sliding_window"));
}

static void phi3_meta(meta *m, const json_t *cfg)
{
    double v, rot = 1;
    common(m, cfg);
    const char *orig[] = {"original_max_position_embeddings",
                          "rope_parameters.original_max_position_embeddings", NULL};
    if (num(cfg, orig, &v) == 0)
        add_u32(m, "rope.scaling.original_context_length", v);
    const char *pct[] = {"rope_parameters.partial_rotary_factor", "partial_rotary_factor", NULL};
    num(cfg, pct, &rot);
    add_u32(m, "rope.dimension_count",
            floor(floor(rot * need(cfg, "hidden_size")) / need(cfg, "num_attention_heads")));
    const char *theta[] = {"rope_parameters.rope_theta", "rope_theta", NULL};
    if (num(cfg, theta, &v))
        die("config.json has no rope_theta%s", "");
    add_f32(m, "rope.freq_base", v);
    const char *window[] = {"sliding_window", NULL};
    add_u32(m, "attention.sliding_window", num(cfg, window, &v) == 0 ? v : 0);
}

/* Hugging Face name stems (without the layer prefix "model.layers.N.") to llama.cpp's. */
typedef struct {
    const char *hf, *gguf;
} name_pair;

static const name_pair gemma_top[] = {
    {"model.embed_tokens", "token_embd"}, {"model.norm", "output_norm"}, {"lm_head", "output"}};
static const name_pair gemma_layer[] = {
    {"input_layernorm", "attn_norm"},
    {"self_attn.q_proj", "attn_q"},
    {"self_attn.k_proj", "attn_k"},
    {"self_attn.v_proj", "attn_v"},
    {"self_attn.o_proj", "attn_output"},
    {"self_attn.q_norm", "attn_q_norm"},
    {"self_attn.k_norm", "attn_k_norm"},
    {"post_attention_layernorm", "post_attention_norm"},
    {"pre_feedforward_layernorm", "ffn_norm"},
    {"post_feedforward_layernorm", "post_ffw_norm"},
    {"mlp.gate_proj", "ffn_gate"},
    {"mlp.up_proj", "ffn_up"},
    {"mlp.down_proj", "ffn_down"},
};
static const name_pair phi3_top[] = {
    {"model.embed_tokens", "token_embd"}, {"model.norm", "output_norm"}, {"lm_head", "output"}};
static const name_pair phi3_layer[] = {
    {"input_layernorm", "attn_norm"},
    {"self_attn.qkv_proj", "attn_qkv"},
    {"self_attn.o_proj", "attn_output"},
    {"post_attention_layernorm", "ffn_norm"},
    {"mlp.gate_up_proj", "ffn_up"},
    {"mlp.down_proj", "ffn_down"},
};

static const char *find(const name_pair *r, size_t n, const char *hf, size_t len)
{
    for (size_t i = 0; i < n; i++)
        if (strlen(r[i].hf) == len && strncmp(r[i].hf, hf, len) == 0)
            return r[i].gguf;
    return NULL;
}

/* The GGUF name of a checkpoint tensor into out[n]; 0, or -1 when it has none. */
static int gguf_name(const char *arch, const char *name, char *out, size_t n)
{
    int phi3 = strcmp(arch, "phi3") == 0;
    const name_pair *top = phi3 ? phi3_top : gemma_top, *layer = phi3 ? phi3_layer : gemma_layer;
    size_t n_top = phi3 ? sizeof phi3_top / sizeof *phi3_top : sizeof gemma_top / sizeof *gemma_top;
    size_t n_layer = phi3 ? sizeof phi3_layer / sizeof *phi3_layer
                          : sizeof gemma_layer / sizeof *gemma_layer;
    const char *dot = strrchr(name, '.'); /* ".weight" / ".bias" */
    if (!dot)
        return -1;
    unsigned l;
    int used = 0;
    if (sscanf(name, "model.layers.%u.%n", &l, &used) == 1 && used > 0) {
        const char *g = find(layer, n_layer, name + used, (size_t)(dot - name - used));
        return g && snprintf(out, n, "blk.%u.%s%s", l, g, dot) < (int)n ? 0 : -1;
    }
    const char *g = find(top, n_top, name, (size_t)(dot - name));
    return g && snprintf(out, n, "%s%s", g, dot) < (int)n ? 0 : -1;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* "KEY=u32:N", "KEY=f32:X" or "KEY=str:S". */
static void extra(meta *m, const char *arg)
{
    char key[128];
    const char *eq = strchr(arg, '=');
    if (!eq || (size_t)(eq - arg) >= sizeof key)
        die("bad key argument '%s' (KEY=u32:N, KEY=f32:X or KEY=str:S)", arg);
    snprintf(key, sizeof key, "%.*s", (int)(eq - arg), arg);
    if (strncmp(eq + 1, "u32:", 4) == 0)
        add_u32(m, key, strtod(eq + 5, NULL));
    else if (strncmp(eq + 1, "f32:", 4) == 0)
        add_f32(m, key, strtod(eq + 5, NULL));
    else if (strncmp(eq + 1, "str:", 4) == 0)
        add_str(m, key, eq + 5);
    else
        die("bad key argument '%s' (KEY=u32:N, KEY=f32:X or KEY=str:S)", arg);
}

int main(int argc, char **argv)
{
    int f16 = argc > 1 && strcmp(argv[1], "--f16") == 0;
    argc -= f16;
    argv += f16;
    if (argc < 4) {
        fprintf(stderr, "usage: parity-to-gguf [--f16] gemma2|gemma3|phi3 FIXTURE_DIR OUT.gguf "
                        "[KEY=u32:N|KEY=f32:X|KEY=str:S]...\n");
        return 1;
    }
    const char *arch = argv[1];
    int gemma = strcmp(arch, "gemma2") == 0 || strcmp(arch, "gemma3") == 0;
    if (!gemma && strcmp(arch, "phi3") != 0)
        die("architecture '%s' is not one of gemma2, gemma3, phi3", arch);
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/config.json", argv[2]);
    json_error_t je;
    json_t *cfg = json_load_file(path, 0, &je);
    if (!cfg)
        die("cannot read %s", path);
    static meta m;
    m.arch = arch;
    if (strcmp(arch, "gemma2") == 0)
        gemma2_meta(&m, cfg);
    else if (strcmp(arch, "gemma3") == 0)
        gemma3_meta(&m, cfg);
    else
        phi3_meta(&m, cfg);
    for (int i = 4; i < argc; i++)
        extra(&m, argv[i]);

    snprintf(path, sizeof path, "%s/model.safetensors", argv[2]);
    gp_st_file *st = gp_st_open(path, err, sizeof err);
    if (!st)
        die("%s", err);
    static char names[MAX_TENSORS][128];
    static gp_gw_tensor t[MAX_TENSORS];
    static float *bufs[MAX_TENSORS];
    static uint16_t *halves[MAX_TENSORS]; /* the f16 copies (--f16) */
    int n = 0;
    for (int i = 0; i < gp_st_count(st); i++) {
        const gp_st_tensor *s = gp_st_get(st, i);
        /* llama.cpp's Gemma 2 never reads an lm_head (its head is the embedding) */
        if (strcmp(arch, "gemma2") == 0 && strcmp(s->name, "lm_head.weight") == 0)
            continue;
        if (n == MAX_TENSORS || strcmp(s->file_dtype, "F32") != 0 || s->ndim < 1 || s->ndim > 4)
            die("%s: only f32 tensors of 1 to 4 dims", s->name);
        if (gguf_name(arch, s->name, names[n], sizeof names[n]))
            die("no GGUF name for %s", s->name);
        float *b = malloc(s->nbytes);
        if (!b)
            die("out of memory%s", "");
        memcpy(b, s->data, s->nbytes);
        /* Gemma's RMSNorms scale by (1 + w): the converter stores 1 + w */
        if (gemma && ends_with(s->name, "norm.weight"))
            for (size_t k = 0; k < s->nbytes / 4; k++)
                b[k] += 1.0f;
        bufs[n] = b;
        t[n] = (gp_gw_tensor){.name = names[n], .ggml_type = 0, .ndim = (uint32_t)s->ndim,
                              .data = b, .nbytes = s->nbytes};
        if (f16 && s->ndim >= 2) {
            uint16_t *h = malloc(s->nbytes / 2);
            if (!h)
                die("out of memory%s", "");
            for (size_t k = 0; k < s->nbytes / 4; k++)
                h[k] = gp_f32_to_f16(b[k]);
            halves[n] = h;
            t[n].data = h;
            t[n].ggml_type = 1;
            t[n].nbytes = s->nbytes / 2;
        }
        for (int d = 0; d < s->ndim; d++)
            t[n].ne[d] = s->shape[s->ndim - 1 - d]; /* ggml's order: innermost first */
        n++;
    }

    gp_gw w;
    gp_gw_init(&w);
    gp_gw_header(&w, 3, (uint64_t)n, (uint64_t)m.n + 2);
    gp_gw_kv_str(&w, "general.architecture", arch);
    gp_gw_kv_u32(&w, "general.file_type", f16); /* 0 all f32, 1 mostly f16 */
    for (int i = 0; i < m.n; i++) {
        const kv *e = &m.v[i];
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
    for (int i = 0; i < n; i++) {
        gp_gw_tensor_info(&w, t[i].name, t[i].ndim, t[i].ne, t[i].ggml_type, off);
        off += (t[i].nbytes + 31) / 32 * 32;
    }
    gp_gw_pad(&w, 32);
    for (int i = 0; i < n; i++) {
        gp_gw_bytes(&w, t[i].data, t[i].nbytes);
        gp_gw_pad(&w, 32);
    }
    int rc = gp_gw_save(&w, argv[3]);
    if (rc)
        die("cannot write %s", argv[3]);
    gp_gw_free(&w);
    for (int i = 0; i < n; i++) {
        free(bufs[i]);
        free(halves[i]);
    }
    gp_st_close(st);
    json_decref(cfg);
    return 0;
}
