/* parity-to-gguf: writes a parity fixture's checkpoint (FIXTURE/config.json and
 * model.safetensors) as a GGUF file laid out as llama.cpp's convert_hf_to_gguf.py lays out the
 * gpt2 and llama architectures, so the --gguf parity tests run on the fixture's own weights with no
 * committed GGUF and no Python (scripts/parity/make_gguf.py writes the same bytes with gguf-py;
 * tests/parity/to_gguf_check.sh compares the two where Python is there).
 *
 * What the converter does and this does too (docs/gguf.md, "What llama.cpp's converter changed"):
 * - gpt2 (model_type gpt2): the Conv1D weights (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj)
 *   transposed to [out, in]; attn.bias and attn.masked_bias buffers dropped.
 * - llama (model_type llama or mistral): q_proj and k_proj rows permuted for ggml's interleaved
 *   rope; a tied lm_head dropped.
 * - names by gp_gguf_name_from_hf; ARCH.* metadata from config.json; every tensor f32, or with
 *   --f16 every 2-dim one f16 (the converter's default --outtype f16).
 * Tensors go in the checkpoint's name order (strcmp), data aligned to 32 bytes.
 *
 * usage: parity-to-gguf [--f16] [--sliding-window] [--no-head-dim] FIXTURE_DIR OUT.gguf
 *   --sliding-window also writes llama.attention.sliding_window from config.json (llama.cpp's
 *   converter does not for llama files; gplan-compile --gguf reads it when it is there).
 *   --no-head-dim writes no attention.key_length / value_length, as the converter does for a
 *   config without head_dim (gplan-compile --gguf then takes embedding_length / head_count).
 * Exit status 0, or 1 with a message. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/f16.h"
#include "runtime/gguf.h"
#include "runtime/safetensors.h"
#include "runtime/weights.h"
#include "tests/gguf_writer.h"

#define ALIGN 32
#define MAX_TENSORS 4096

enum { GGML_F32 = 0, GGML_F16 = 1, LLAMA_FTYPE_F32 = 0, LLAMA_FTYPE_F16 = 1 };

/* One metadata value to write: a u32 or an f32. */
typedef struct {
    char key[96];
    int is_float;
    uint32_t u;
    float f;
} kv;

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

/* config[name] as a number; -1 with a message when absent or not a number. */
static int cfg_num(const json_t *cfg, const char *name, double *out)
{
    const json_t *j = json_object_get(cfg, name);
    if (!json_is_number(j))
        return fail("config.json: no number \"%s\"%s", name, "");
    *out = json_number_value(j);
    return 0;
}

static void add_u32(kv *k, int *n, const char *arch, const char *key, double v)
{
    snprintf(k[*n].key, sizeof k[*n].key, "%s.%s", arch, key);
    k[*n].is_float = 0;
    k[*n].u = (uint32_t)v;
    (*n)++;
}

static void add_f32(kv *k, int *n, const char *arch, const char *key, double v)
{
    snprintf(k[*n].key, sizeof k[*n].key, "%s.%s", arch, key);
    k[*n].is_float = 1;
    k[*n].f = (float)v;
    (*n)++;
}

/* The ARCH.* keys convert_hf_to_gguf.py writes for the architecture, in its order. */
static int read_metadata(const json_t *cfg, int is_gpt2, int f16, int window, int no_head_dim,
                         kv *k, int *n)
{
    double a, b, c, d, e;
    *n = 0;
    if (is_gpt2) {
        const json_t *ctx = json_object_get(cfg, "n_ctx");
        if (cfg_num(cfg, "n_layer", &a) || cfg_num(cfg, json_is_number(ctx) ? "n_ctx" : "n_positions", &b) ||
            cfg_num(cfg, "n_embd", &c) || cfg_num(cfg, "n_head", &d) ||
            cfg_num(cfg, "layer_norm_epsilon", &e))
            return -1;
        add_u32(k, n, "gpt2", "block_count", a);
        add_u32(k, n, "gpt2", "context_length", b);
        add_u32(k, n, "gpt2", "embedding_length", c);
        add_u32(k, n, "gpt2", "feed_forward_length", 4 * c);
        add_u32(k, n, "gpt2", "attention.head_count", d);
        add_f32(k, n, "gpt2", "attention.layer_norm_epsilon", e);
    } else {
        double heads, kv_heads, theta = 10000.0, hidden;
        if (cfg_num(cfg, "num_hidden_layers", &a) || cfg_num(cfg, "max_position_embeddings", &b) ||
            cfg_num(cfg, "hidden_size", &hidden) || cfg_num(cfg, "intermediate_size", &c) ||
            cfg_num(cfg, "num_attention_heads", &heads) || cfg_num(cfg, "rms_norm_eps", &e))
            return -1;
        kv_heads = heads;
        if (json_is_number(json_object_get(cfg, "num_key_value_heads")))
            cfg_num(cfg, "num_key_value_heads", &kv_heads);
        /* transformers 5 keeps rope_theta inside "rope_parameters" */
        const json_t *rp = json_object_get(cfg, "rope_parameters");
        if (json_is_number(json_object_get(cfg, "rope_theta")))
            cfg_num(cfg, "rope_theta", &theta);
        else if (json_is_object(rp) && json_is_number(json_object_get(rp, "rope_theta")))
            theta = json_number_value(json_object_get(rp, "rope_theta"));
        add_u32(k, n, "llama", "block_count", a);
        add_u32(k, n, "llama", "context_length", b);
        add_u32(k, n, "llama", "embedding_length", hidden);
        add_u32(k, n, "llama", "feed_forward_length", c);
        add_u32(k, n, "llama", "attention.head_count", heads);
        add_u32(k, n, "llama", "attention.head_count_kv", kv_heads);
        add_f32(k, n, "llama", "rope.freq_base", theta);
        add_f32(k, n, "llama", "attention.layer_norm_rms_epsilon", e);
        double head_dim = hidden / heads;
        if (json_is_number(json_object_get(cfg, "head_dim")) && !no_head_dim) {
            cfg_num(cfg, "head_dim", &head_dim);
            add_u32(k, n, "llama", "attention.key_length", head_dim);
            add_u32(k, n, "llama", "attention.value_length", head_dim);
        }
        if (window) {
            if (cfg_num(cfg, "sliding_window", &d))
                return -1;
            add_u32(k, n, "llama", "attention.sliding_window", d);
        }
        if (cfg_num(cfg, "vocab_size", &d))
            return -1;
        add_u32(k, n, "llama", "vocab_size", d);
        add_u32(k, n, "llama", "rope.dimension_count", head_dim);
    }
    /* general.file_type: all f32, or mostly f16 */
    snprintf(k[*n].key, sizeof k[*n].key, "general.file_type");
    k[*n].is_float = 0;
    k[*n].u = f16 ? LLAMA_FTYPE_F16 : LLAMA_FTYPE_F32;
    (*n)++;
    return 0;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* The tensor's values as f32, rearranged as the converter does: [rows, cols] in, the same count
 * out. NULL with a message. */
static float *converted(const gp_st_tensor *t, int is_gpt2, int n_head, int n_kv_head,
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
    int transpose = is_gpt2 && t->ndim == 2 &&
                    (ends_with(t->name, ".attn.c_attn.weight") ||
                     ends_with(t->name, ".attn.c_proj.weight") ||
                     ends_with(t->name, ".mlp.c_fc.weight") || ends_with(t->name, ".mlp.c_proj.weight"));
    int heads = 0;
    if (!is_gpt2 && (ends_with(t->name, ".self_attn.q_proj.weight") ||
                     ends_with(t->name, ".self_attn.q_proj.bias")))
        heads = n_head;
    if (!is_gpt2 && (ends_with(t->name, ".self_attn.k_proj.weight") ||
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

static int write_file(const char *path, const char *arch, const kv *k, int n_kv,
                      const out_tensor *t, int n_t)
{
    gp_gw w;
    gp_gw_init(&w);
    gp_gw_header(&w, 3, (uint64_t)n_t, (uint64_t)n_kv + 1);
    gp_gw_kv_str(&w, "general.architecture", arch);
    for (int i = 0; i < n_kv; i++) {
        if (k[i].is_float) {
            gp_gw_key(&w, k[i].key, GP_GGUF_FLOAT32);
            gp_gw_f32(&w, k[i].f);
        } else {
            gp_gw_kv_u32(&w, k[i].key, k[i].u);
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
    int f16 = 0, window = 0, no_head_dim = 0, a = 1;
    for (; a < argc && argv[a][0] == '-'; a++) {
        if (strcmp(argv[a], "--f16") == 0)
            f16 = 1;
        else if (strcmp(argv[a], "--sliding-window") == 0)
            window = 1;
        else if (strcmp(argv[a], "--no-head-dim") == 0)
            no_head_dim = 1;
        else
            break;
    }
    if (argc - a != 2) {
        fprintf(stderr, "usage: parity-to-gguf [--f16] [--sliding-window] [--no-head-dim] "
                        "FIXTURE_DIR OUT.gguf\n");
        return 1;
    }
    const char *dir = argv[a], *out = argv[a + 1];
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t jerr;
    json_t *cfg = json_load_file(path, 0, &jerr);
    if (!cfg)
        return fail("%s: %s", path, jerr.text), 1;
    const char *model_type = json_string_value(json_object_get(cfg, "model_type"));
    int is_gpt2 = model_type && strcmp(model_type, "gpt2") == 0;
    if (!is_gpt2 && !(model_type && (strcmp(model_type, "llama") == 0 ||
                                     strcmp(model_type, "mistral") == 0))) {
        fail("%s: model_type \"%s\" is not gpt2, llama or mistral", path, model_type ? model_type : "");
        json_decref(cfg);
        return 1;
    }
    const char *arch = is_gpt2 ? "gpt2" : "llama";
    kv keys[32];
    int n_kv = 0;
    double heads = 0, kv_heads = 0;
    int tied = json_is_true(json_object_get(cfg, "tie_word_embeddings"));
    if (read_metadata(cfg, is_gpt2, f16, window, no_head_dim, keys, &n_kv) ||
        (!is_gpt2 && cfg_num(cfg, "num_attention_heads", &heads))) {
        json_decref(cfg);
        return 1;
    }
    kv_heads = heads;
    if (!is_gpt2 && json_is_number(json_object_get(cfg, "num_key_value_heads")))
        kv_heads = json_number_value(json_object_get(cfg, "num_key_value_heads"));
    json_decref(cfg);

    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    gp_st_file *st = gp_st_open(path, err, sizeof err);
    if (!st)
        return fail("%s%s", err, ""), 1;
    static out_tensor t[MAX_TENSORS];
    int n_t = 0, rc = 1;
    for (int i = 0; i < gp_st_count(st); i++) {
        const gp_st_tensor *s = gp_st_get(st, i);
        if (is_gpt2 && (ends_with(s->name, ".attn.bias") || ends_with(s->name, ".attn.masked_bias")))
            continue;
        if (tied && strcmp(s->name, "lm_head.weight") == 0)
            continue;
        if (n_t == MAX_TENSORS || s->ndim < 1 || s->ndim > 2) {
            fail("%s: %s", s->name, n_t == MAX_TENSORS ? "too many tensors" : "not 1 or 2 dims");
            goto done;
        }
        out_tensor *o = &t[n_t];
        if (gp_gguf_name_from_hf(arch, s->name, o->name, sizeof o->name)) {
            fail("%s: no GGUF name for the %s architecture", s->name, arch);
            goto done;
        }
        int64_t rows, cols;
        float *v = converted(s, is_gpt2, (int)heads, (int)kv_heads, &rows, &cols);
        if (!v)
            goto done;
        n_t++;
        o->ndim = (uint32_t)s->ndim;
        o->ne[0] = cols;
        o->ne[1] = rows;
        size_t count = (size_t)(rows * cols);
        if (f16 && s->ndim == 2) {
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
    rc = write_file(out, arch, keys, n_kv, t, n_t) ? 1 : 0;
done:
    for (int i = 0; i < n_t; i++)
        free(t[i].data);
    gp_st_close(st);
    return rc;
}
