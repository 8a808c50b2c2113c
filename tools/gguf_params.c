/* gplan-compile --gguf: a GGUF file's ARCH.* metadata as graph parameters (named as the
 * transformers config keys, the way --config reads config.json), and each weight's dtype as the
 * file stores it, so the plan holds the file's quantized tensors as they are. */
#include "tools/gguf_params.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One metadata key (after "ARCH.") and the parameters it sets. */
typedef struct {
    const char *key;
    const char *param;
    int is_float;
} key_map;

static const key_map llama_keys[] = {
    {"block_count", "num_hidden_layers", 0},
    {"embedding_length", "hidden_size", 0},
    {"feed_forward_length", "intermediate_size", 0},
    {"attention.head_count", "num_attention_heads", 0},
    {"attention.head_count_kv", "num_key_value_heads", 0},
    {"attention.key_length", "head_dim", 0},
    {"context_length", "max_position_embeddings", 0},
    {"attention.layer_norm_rms_epsilon", "rms_norm_eps", 1},
    {"rope.freq_base", "rope_theta", 1},
    {"rope.dimension_count", "rope_dims", 0},
    {"attention.sliding_window", "sliding_window", 0},
};

static const key_map gpt2_keys[] = {
    {"block_count", "n_layer", 0},
    {"embedding_length", "n_embd", 0},
    {"attention.head_count", "n_head", 0},
    {"context_length", "n_positions", 0},
    {"attention.layer_norm_epsilon", "layer_norm_epsilon", 1},
};

static int push_text(gp_gguf_params *p, const char *text)
{
    if (p->n == GP_GGUF_MAX_PARAMS || !(p->text[p->n] = strdup(text)))
        return -1;
    p->n++;
    return 0;
}

static int push(gp_gguf_params *p, const char *fmt, const char *name, double v, int is_float)
{
    if (p->n == GP_GGUF_MAX_PARAMS)
        return -1;
    char *s = malloc(128);
    if (!s)
        return -1;
    if (is_float)
        snprintf(s, 128, "%s=%.17g", name, v);
    else
        snprintf(s, 128, fmt, name, (long long)v);
    p->text[p->n++] = s;
    return 0;
}

int gp_gguf_params_read(const char *path, gp_gguf_params *p, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    gp_gguf *g = gp_gguf_open(path, err, errlen);
    if (!g)
        return -1;
    gp_gguf_str arch;
    const key_map *keys = NULL;
    size_t n_keys = 0;
    int rc = -1;
    if (gp_gguf_get_str(g, "general.architecture", &arch) != 0) {
        snprintf(err, errlen, "%s: no general.architecture string in the metadata", path);
        goto done;
    }
    /* qwen2 and qwen3 files carry llama's keys under their own prefix, q and k unpermuted. */
    int llama_like = (arch.len == 5 && memcmp(arch.s, "llama", 5) == 0) ||
                     (arch.len == 5 && memcmp(arch.s, "qwen2", 5) == 0) ||
                     (arch.len == 5 && memcmp(arch.s, "qwen3", 5) == 0);
    if (llama_like) {
        keys = llama_keys;
        n_keys = sizeof llama_keys / sizeof llama_keys[0];
    } else if (arch.len == 4 && memcmp(arch.s, "gpt2", 4) == 0) {
        keys = gpt2_keys;
        n_keys = sizeof gpt2_keys / sizeof gpt2_keys[0];
    } else {
        snprintf(err, errlen, "%s: architecture \"%.*s\" is not supported by --gguf (llama, qwen2, qwen3, gpt2)",
                 path, (int)(arch.len < 64 ? arch.len : 64), arch.s);
        goto done;
    }
    for (size_t k = 0; k < n_keys; k++) {
        char key[128];
        snprintf(key, sizeof key, "%.*s.%s", (int)arch.len, arch.s, keys[k].key);
        double f;
        int64_t i;
        int got = keys[k].is_float ? gp_gguf_get_float(g, key, &f) : gp_gguf_get_int(g, key, &i);
        if (got < 0) {
            snprintf(err, errlen, "%s: metadata %s has the wrong type", path, key);
            goto done;
        }
        if (got == 0 && push(p, "%s=%lld", keys[k].param, keys[k].is_float ? f : (double)i,
                             keys[k].is_float))
            goto oom;
    }
    /* The vocabulary: rows of the embedding table (ne[1] in ggml's order). */
    const gp_gguf_tensor *emb = gp_gguf_tensor_find(g, "token_embd.weight");
    if (emb && emb->ndim == 2 && push(p, "%s=%lld", "vocab_size", (double)emb->ne[1], 0))
        goto oom;
    /* llama.cpp's converter writes no output.weight when the head is the embedding. */
    if (!gp_gguf_tensor_find(g, "output.weight") &&
        push(p, "%s=%lld", "tie_word_embeddings", 1, 0))
        goto oom;
    /* head_dim (a parameter of graphs whose heads need not be hidden_size / heads, as
     * Mistral's): attention.key_length when the file has it (llama.cpp's converter writes it only
     * when the config has a head_dim), else embedding_length / head_count, as llama.cpp reads it. */
    if (keys == llama_keys) {
        char key[128];
        int64_t kl, embd, heads;
        snprintf(key, sizeof key, "%.*s.attention.key_length", (int)arch.len, arch.s);
        int has_kl = gp_gguf_get_int(g, key, &kl) == 0;
        snprintf(key, sizeof key, "%.*s.embedding_length", (int)arch.len, arch.s);
        int has_embd = gp_gguf_get_int(g, key, &embd) == 0;
        snprintf(key, sizeof key, "%.*s.attention.head_count", (int)arch.len, arch.s);
        int has_heads = gp_gguf_get_int(g, key, &heads) == 0;
        if (!has_kl && has_embd && has_heads && heads > 0 && embd % heads == 0 &&
            push(p, "%s=%lld", "head_dim", (double)(embd / heads), 0))
            goto oom;
    }
    /* Its q and k rows are permuted for the interleaved rotary form (docs/gguf.md); llama.cpp
     * keeps qwen2's and qwen3's in the checkpoint's rotate-half order. */
    if (keys == llama_keys && memcmp(arch.s, "llama", 5) == 0 && push_text(p, "rope_mode=gptj"))
        goto oom;
    /* GPT-2's Conv1D weights are stored transposed, [out, in] (examples/gpt2.gplan). */
    if (keys == gpt2_keys && push_text(p, "conv1d_transposed=true"))
        goto oom;
    rc = 0;
    goto done;
oom:
    snprintf(err, errlen, "%s: out of memory", path);
done:
    gp_gguf_close(g);
    if (rc)
        gp_gguf_params_free(p);
    return rc;
}

void gp_gguf_params_free(gp_gguf_params *p)
{
    for (int i = 0; i < p->n; i++)
        free(p->text[i]);
    p->n = 0;
}

gp_dtype gp_gguf_weight_dtype(void *ctx, const char *checkpoint_name, gp_dtype declared)
{
    const gp_st_tensor *t = gp_weights_find((const gp_weights *)ctx, checkpoint_name);
    return t && t->supported ? t->dtype : declared;
}
