/* The table of model families (family/family.h) and the lookups over it: by name, by a GGUF
 * file's architecture and markers, by a Hugging Face config.json. */
#include "family/family.h"
#include "weights/filemap.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "family/graphs.h"
#include "family/gguf_params.h"

/* ---- GGUF metadata, one reading an architecture (gp_family_gguf) ---- */

/* The expert counts are Mixtral's (llama with experts; 0 or absent in a dense model). */
static const gp_family_key llama_keys[] = {
    {"attention.key_length", "head_dim", 0, GP_KEY_POSITIVE},
    {"rope.dimension_count", "rope_dims", 0, GP_KEY_POSITIVE},
    {"expert_count", "num_local_experts", 0, GP_KEY_OPTIONAL},
    {"expert_used_count", "num_experts_per_tok", 0, GP_KEY_OPTIONAL},
};

/* Qwen3-MoE: the experts are its shape (a file without them is refused). */
static const gp_family_key qwen3moe_keys[] = {
    {"attention.key_length", "head_dim", 0, GP_KEY_POSITIVE},
    {"rope.dimension_count", "rope_dims", 0, GP_KEY_POSITIVE},
    {"expert_count", "num_experts", 0, GP_KEY_REQUIRED},
    {"expert_used_count", "num_experts_per_tok", 0, GP_KEY_REQUIRED},
    {"expert_feed_forward_length", "moe_intermediate_size", 0, GP_KEY_REQUIRED},
};

static const gp_family_key gpt2_keys[] = {
    {"block_count", "n_layer", 0, GP_KEY_REQUIRED},
    {"embedding_length", "n_embd", 0, GP_KEY_REQUIRED},
    {"attention.head_count", "n_head", 0, GP_KEY_REQUIRED},
    {"context_length", "n_positions", 0, GP_KEY_POSITIVE},
    {"attention.layer_norm_epsilon", "layer_norm_epsilon", 1, GP_KEY_POSITIVE},
};

static const gp_family_key gemma_keys[] = {
    {"attention.key_length", "head_dim", 0, GP_KEY_POSITIVE},
    {"rope.freq_base_swa", "rope_local_base_freq", 1, GP_KEY_POSITIVE},       /* gemma3 */
    {"rope.scaling.factor", "factor", 1, GP_KEY_POSITIVE},                     /* gemma3 */
    {"attn_logit_softcapping", "attn_logit_softcapping", 1, GP_KEY_OPTIONAL}, /* gemma2 */
    {"final_logit_softcapping", "final_logit_softcapping", 1, GP_KEY_OPTIONAL},
};

/* LongRoPE's (the 128k models, Phi-3.5): the cosines' and sines' factor and the context its
 * short factors serve (examples/phi3.gplan); absent, llama.cpp takes 1 and context_length. */
static const gp_family_key phi3_keys[] = {
    {"rope.scaling.attn_factor", "attn_factor", 1, GP_KEY_POSITIVE},
    {"rope.scaling.original_context_length", "original_max_position_embeddings", 0,
     GP_KEY_POSITIVE},
};

/* llama's q and k rows are permuted for the interleaved rotary form (docs/gguf.md); llama.cpp
 * keeps qwen2's and qwen3's in the checkpoint's rotate-half order. GPT-2's Conv1D weights are
 * stored transposed, [out, in] (examples/gpt2.gplan). */
static const char *const llama_assumed[] = {"rope_mode=gptj", NULL};
static const char *const no_assumed[] = {NULL};
static const char *const gpt2_assumed[] = {"conv1d_transposed=true", NULL};
/* The converter adds 1 to every Gemma norm weight (transformers' (1 + w)), so the graphs'
 * norm_offset is 0 for these files. Gemma 2's converter writes no rope.freq_base; llama.cpp's
 * defaults fill in what is absent (some of the transformers config is left out of gemma2,
 * gemma3 and phi3 files). */
static const char *const gemma2_assumed[] = {
    "norm_offset=0", "rope_theta=10000", "sliding_window=4096", "attn_logit_softcapping=50",
    "final_logit_softcapping=30", NULL};
static const char *const gemma3_assumed[] = {
    "norm_offset=0", "rope_theta=10000", "rope_local_base_freq=10000", "rope_type=default",
    "sliding_window_pattern=6", NULL};
/* llama.cpp renormalises Qwen3-MoE's top k (its configs' norm_topk_prob); no key says so. */
static const char *const qwen3moe_assumed[] = {"norm_topk_prob=true", NULL};
/* No attention.sliding_window: no window (Phi-3's converters write 0 for none). */
static const char *const phi3_assumed[] = {"sliding_window=0", NULL};

#define KEYS(t) t, sizeof t / sizeof t[0]
/* qwen2 and qwen3 files carry llama's keys under their own prefix. */
static const char *const phi3_optional[] = {"rope_factors_short.weight",
                                            "rope_factors_long.weight", NULL};
static const gp_family_gguf llama_gguf = {1, KEYS(llama_keys), llama_assumed,
                                          gp_gguf_params_derive_llama, NULL};
static const gp_family_gguf qwen_gguf = {1, KEYS(llama_keys), no_assumed,
                                         gp_gguf_params_derive_llama, NULL};
static const gp_family_gguf qwen3moe_gguf = {1, KEYS(qwen3moe_keys), qwen3moe_assumed,
                                             gp_gguf_params_derive_llama, NULL};
static const gp_family_gguf gpt2_gguf = {0, KEYS(gpt2_keys), gpt2_assumed, NULL, NULL};
static const gp_family_gguf gemma2_gguf = {1, KEYS(gemma_keys), gemma2_assumed,
                                           gp_gguf_params_derive_gemma2, NULL};
static const gp_family_gguf gemma3_gguf = {1, KEYS(gemma_keys), gemma3_assumed,
                                           gp_gguf_params_derive_gemma3, NULL};
static const gp_family_gguf phi3_gguf = {1, KEYS(phi3_keys), phi3_assumed,
                                         gp_gguf_params_derive_phi3, phi3_optional};
/* gpt-oss's files are refused by its derive (family/gguf_params.h). */
static const gp_family_gguf gpt_oss_gguf = {1, NULL, 0, no_assumed, gp_gguf_params_derive_gpt_oss,
                                            NULL};

/* ---- markers: which of the families of one architecture ---- */

/* Llama 3.1 and later: the converter's rope scaling tensor; Llama 3.0 too: its BPE pre-tokenizer
 * (Llama 2, Mistral and TinyLlama files have SentencePiece's "llama" vocabulary). */
static const gp_family_marker llama3_gguf_marks[] = {
    {GP_FAMILY_MARK_TENSOR, "rope_freqs.weight", NULL},
    {GP_FAMILY_MARK_STR, "tokenizer.ggml.pre", "llama-bpe"},
    {GP_FAMILY_MARK_END, NULL, NULL}};
/* Mistral files are arch llama; the converter writes no window for them (a file that has one
 * needs mistral's graph), so the name is the other mark. */
static const gp_family_marker mistral_gguf_marks[] = {
    {GP_FAMILY_MARK_KEY, "llama.attention.sliding_window", NULL},
    {GP_FAMILY_MARK_STR_HAS, "general.name", "mistral"},
    {GP_FAMILY_MARK_END, NULL, NULL}};
/* Mixtral files are arch llama with experts (llama.cpp's converter writes expert_count only for
 * a model that has them). */
static const gp_family_marker mixtral_gguf_marks[] = {
    {GP_FAMILY_MARK_POSITIVE, "llama.expert_count", NULL},
    {GP_FAMILY_MARK_END, NULL, NULL}};
/* transformers 5 writes rope_parameters, 4 rope_scaling (Llama 3.0's is null: llama's graph). */
static const gp_family_marker llama3_hf_marks[] = {
    {GP_FAMILY_MARK_STR, "rope_parameters.rope_type", "llama3"},
    {GP_FAMILY_MARK_STR, "rope_scaling.rope_type", "llama3"},
    {GP_FAMILY_MARK_END, NULL, NULL}};

/* ---- the table ---- */

#define GRAPH(id) #id ".gplan", gp_family_graph_##id, sizeof gp_family_graph_##id - 1

/* name, graph, GGUF architecture and markers, GGUF reading, config.json model types, class and
 * markers, chat format, context parameter. The families of one GGUF architecture share its
 * reading; the first of them in this order is its entry in messages. */
static const gp_family families[] = {
    {"llama", GRAPH(llama), "llama", NULL, &llama_gguf, "llama", "LlamaForCausalLM", NULL,
     "llama2", "max_position_embeddings"},
    {"mixtral", GRAPH(mixtral), "llama", mixtral_gguf_marks, &llama_gguf, "mixtral",
     "MixtralForCausalLM", NULL, "mistral", "max_position_embeddings"},
    {"llama3", GRAPH(llama3), "llama", llama3_gguf_marks, &llama_gguf, "llama",
     "LlamaForCausalLM", llama3_hf_marks, "llama3", "max_position_embeddings"},
    {"mistral", GRAPH(mistral), "llama", mistral_gguf_marks, &llama_gguf, "mistral",
     "MistralForCausalLM", NULL, "mistral", "max_position_embeddings"},
    {"qwen2", GRAPH(qwen2), "qwen2", NULL, &qwen_gguf, "qwen2", "Qwen2ForCausalLM", NULL, "chatml",
     "max_position_embeddings"},
    {"qwen3", GRAPH(qwen3), "qwen3", NULL, &qwen_gguf, "qwen3", "Qwen3ForCausalLM", NULL, "chatml",
     "max_position_embeddings"},
    {"qwen3moe", GRAPH(qwen3moe), "qwen3moe", NULL, &qwen3moe_gguf, "qwen3_moe",
     "Qwen3MoeForCausalLM", NULL, "chatml", "max_position_embeddings"},
    {"gpt2", GRAPH(gpt2), "gpt2", NULL, &gpt2_gguf, "gpt2", "GPT2LMHeadModel", NULL, NULL,
     "n_positions"},
    {"gemma2", GRAPH(gemma2), "gemma2", NULL, &gemma2_gguf, "gemma2", "Gemma2ForCausalLM", NULL,
     "gemma", "max_position_embeddings"},
    {"gemma3", GRAPH(gemma3), "gemma3", NULL, &gemma3_gguf, "gemma3,gemma3_text",
     "Gemma3ForCausalLM", NULL, "gemma", "max_position_embeddings"},
    {"phi3", GRAPH(phi3), "phi3", NULL, &phi3_gguf, "phi3", "Phi3ForCausalLM", NULL, "phi3",
     "max_position_embeddings"},
    {"gpt_oss", GRAPH(gpt_oss), "gpt-oss", NULL, &gpt_oss_gguf, "gpt_oss", "GptOssForCausalLM",
     NULL, NULL, "max_position_embeddings"},
};
#define N_FAMILIES ((int)(sizeof families / sizeof families[0]))

int gp_family_count(void)
{
    return N_FAMILIES;
}

const gp_family *gp_family_at(int i)
{
    return i >= 0 && i < N_FAMILIES ? &families[i] : NULL;
}

const gp_family *gp_family_by_name(const char *name)
{
    for (int i = 0; name && i < N_FAMILIES; i++)
        if (!strcmp(families[i].name, name))
            return &families[i];
    return NULL;
}

const gp_family *gp_family_find(const char *gguf_arch)
{
    for (int i = 0; gguf_arch && i < N_FAMILIES; i++)
        if (!families[i].gguf_markers && !strcmp(families[i].gguf_arch, gguf_arch))
            return &families[i];
    return NULL;
}

/* ---- lists for messages ---- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Writes the sorted, distinct words of each family's field (a comma list: what(f)) into
 * buf[cap], ", "-separated; returns the whole length (as snprintf). */
static size_t list_words(const char *(*what)(const gp_family *), char *buf, size_t cap)
{
    char words[4 * N_FAMILIES][64];
    const char *sorted[4 * N_FAMILIES];
    int n = 0;
    for (int i = 0; i < N_FAMILIES; i++)
        for (const char *s = what(&families[i]); s && *s && n < 4 * N_FAMILIES;) {
            size_t len = strcspn(s, ",");
            snprintf(words[n], sizeof words[n], "%.*s", (int)len, s);
            sorted[n] = words[n];
            n++;
            s += len + (s[len] == ',');
        }
    qsort(sorted, (size_t)n, sizeof sorted[0], cmp_str);
    size_t len = 0;
    if (cap)
        buf[0] = 0;
    for (int i = 0; i < n; i++) {
        if (i && !strcmp(sorted[i], sorted[i - 1]))
            continue;
        int w = snprintf(len < cap ? buf + len : NULL, len < cap ? cap - len : 0, "%s%s",
                         len ? ", " : "", sorted[i]);
        len += (size_t)w;
    }
    return len;
}

static const char *name_of(const gp_family *f)
{
    return f->name;
}

static const char *arch_of(const gp_family *f)
{
    return f->gguf_arch;
}

static const char *types_of(const gp_family *f)
{
    return f->hf_model_types;
}

static const char *class_of(const gp_family *f)
{
    return f->hf_class;
}

size_t gp_family_list_text(char *buf, size_t cap)
{
    return list_words(name_of, buf, cap);
}

/* ---- GGUF files ---- */

static int lower(char c)
{
    return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c;
}

/* Whether s[len] holds the NUL-terminated sub, ASCII case ignored. */
static int has_text(const char *s, size_t len, const char *sub)
{
    size_t n = strlen(sub);
    for (size_t i = 0; i + n <= len; i++) {
        size_t k = 0;
        while (k < n && lower(s[i + k]) == lower(sub[k]))
            k++;
        if (k == n)
            return 1;
    }
    return 0;
}

static int str_matches(const gp_family_marker *m, const char *s, size_t len)
{
    if (m->kind == GP_FAMILY_MARK_STR)
        return strlen(m->value) == len && !memcmp(s, m->value, len);
    return has_text(s, len, m->value);
}

static int gguf_marked(const gp_gguf *g, const gp_family_marker *m)
{
    for (; m && m->kind != GP_FAMILY_MARK_END; m++) {
        gp_gguf_str s;
        int64_t v = 0;
        if ((m->kind == GP_FAMILY_MARK_TENSOR && gp_gguf_tensor_find(g, m->key)) ||
            (m->kind == GP_FAMILY_MARK_POSITIVE && gp_gguf_get_int(g, m->key, &v) == 0 && v > 0) ||
            (m->kind == GP_FAMILY_MARK_KEY && gp_gguf_find(g, m->key) >= 0) ||
            ((m->kind == GP_FAMILY_MARK_STR || m->kind == GP_FAMILY_MARK_STR_HAS) &&
             gp_gguf_get_str(g, m->key, &s) == 0 && str_matches(m, s.s, s.len)))
            return 1;
    }
    return 0;
}

/* The family of architecture arch[len] whose markers g matches, else its unmarked one. */
static const gp_family *find_gguf(const gp_gguf *g, const char *arch, size_t len)
{
    const gp_family *plain = NULL;
    for (int i = 0; i < N_FAMILIES; i++) {
        const gp_family *f = &families[i];
        if (strlen(f->gguf_arch) != len || memcmp(f->gguf_arch, arch, len))
            continue;
        if (!f->gguf_markers && !plain)
            plain = f;
        else if (f->gguf_markers && gguf_marked(g, f->gguf_markers))
            return f;
    }
    return plain;
}

const gp_family *gp_family_find_gguf(const gp_gguf *g)
{
    gp_gguf_str arch;
    if (!g || gp_gguf_get_str(g, "general.architecture", &arch) != 0)
        return NULL;
    return find_gguf(g, arch.s, arch.len);
}

int gp_family_from_gguf(const char *path, const gp_family **out, char *err, size_t n)
{
    *out = NULL;
    gp_gguf *g = gp_gguf_open(path, err, n);
    if (!g)
        return -1;
    gp_gguf_str arch;
    if (gp_gguf_get_str(g, "general.architecture", &arch) != 0) {
        snprintf(err, n, "%s: no general.architecture string in the metadata", path);
    } else if (!(*out = find_gguf(g, arch.s, arch.len))) {
        char list[256];
        list_words(arch_of, list, sizeof list);
        snprintf(err, n, "%s: unsupported architecture '%.*s' (supported: %s)", path,
                 (int)(arch.len < 64 ? arch.len : 64), arch.s, list);
    }
    gp_gguf_close(g);
    return *out ? 0 : -1;
}

/* ---- Hugging Face config.json ---- */

/* The member at a dotted path ("rope_scaling.rope_type"), or NULL. */
static json_t *json_at(json_t *root, const char *path)
{
    char name[128];
    while (root && *path) {
        size_t len = strcspn(path, ".");
        if (len >= sizeof name)
            return NULL;
        memcpy(name, path, len);
        name[len] = 0;
        root = json_is_object(root) ? json_object_get(root, name) : NULL;
        path += len + (path[len] == '.');
    }
    return root;
}

static int hf_marked(json_t *cfg, const gp_family_marker *m)
{
    for (; m && m->kind != GP_FAMILY_MARK_END; m++) {
        json_t *v = json_at(cfg, m->key);
        if ((m->kind == GP_FAMILY_MARK_KEY && v) ||
            (m->kind == GP_FAMILY_MARK_POSITIVE && json_is_number(v) && json_number_value(v) > 0) ||
            ((m->kind == GP_FAMILY_MARK_STR || m->kind == GP_FAMILY_MARK_STR_HAS) &&
             json_is_string(v) && str_matches(m, json_string_value(v), json_string_length(v))))
            return 1;
    }
    return 0;
}

/* Whether the comma list holds word. */
static int list_has(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *s = list; s && *s;) {
        size_t len = strcspn(s, ",");
        if (len == n && !memcmp(s, word, n))
            return 1;
        s += len + (s[len] == ',');
    }
    return 0;
}

int gp_family_from_hf_config(const char *config_json_path, const gp_family **out, char *err,
                             size_t n)
{
    *out = NULL;
    json_error_t jerr;
    if (gp_file_check(config_json_path, err, n))
        return -1;
    json_t *cfg = json_load_file(config_json_path, 0, &jerr);
    if (!cfg) {
        snprintf(err, n, "%s: cannot read config.json (%s)", config_json_path, jerr.text);
        return -1;
    }
    const char *type = json_string_value(json_object_get(cfg, "model_type"));
    const char *cls = json_string_value(json_array_get(json_object_get(cfg, "architectures"), 0));
    if (!json_is_object(cfg) || (!type && !cls)) {
        snprintf(err, n, "%s: no model_type or architectures", config_json_path);
        json_decref(cfg);
        return -1;
    }
    const gp_family *plain = NULL;
    for (int i = 0; i < N_FAMILIES && !*out; i++) {
        const gp_family *f = &families[i];
        if (type ? !list_has(f->hf_model_types, type) : strcmp(f->hf_class, cls))
            continue;
        if (!f->hf_markers && !plain)
            plain = f;
        else if (f->hf_markers && hf_marked(cfg, f->hf_markers))
            *out = f;
    }
    if (!*out)
        *out = plain;
    if (!*out) {
        char list[512];
        list_words(type ? types_of : class_of, list, sizeof list);
        snprintf(err, n, "%s: unsupported %s '%.*s' (supported: %s)", config_json_path,
                 type ? "model_type" : "architecture", 64, type ? type : cls, list);
    }
    json_decref(cfg);
    return *out ? 0 : -1;
}
