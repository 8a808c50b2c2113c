/* gplan-compile --gguf: a GGUF file's ARCH.* metadata as graph parameters (named as the
 * transformers config keys, the way --config reads config.json), and each weight's dtype as the
 * file stores it, so the plan holds the file's quantized tensors as they are. */
#include "family/gguf_params.h"

#include "family/family.h"
#include "ir/ir.h"
#include "plan/plan.h" /* gp_lora_is_slot */

#include <stdio.h>

/* The largest count a key may hold: a context of more positions is past any model (and a plan
 * of it past any machine). */
#define GP_GGUF_MAX_COUNT (1 << 24)
#include <stdlib.h>
#include <string.h>

/* The keys of llama.cpp's TextModel, which every architecture but gpt2 reads first
 * (gp_family_gguf.text_keys). */
static const gp_family_key text_keys[] = {
    {"block_count", "num_hidden_layers", 0, GP_KEY_REQUIRED},
    {"embedding_length", "hidden_size", 0, GP_KEY_REQUIRED},
    {"feed_forward_length", "intermediate_size", 0, GP_KEY_POSITIVE},
    {"attention.head_count", "num_attention_heads", 0, GP_KEY_REQUIRED},
    {"attention.head_count_kv", "num_key_value_heads", 0, GP_KEY_POSITIVE},
    {"context_length", "max_position_embeddings", 0, GP_KEY_POSITIVE},
    {"attention.layer_norm_rms_epsilon", "rms_norm_eps", 1, GP_KEY_POSITIVE},
    {"rope.freq_base", "rope_theta", 1, GP_KEY_POSITIVE},
    {"attention.sliding_window", "sliding_window", 0, GP_KEY_OPTIONAL},
};

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

static int push_text(gp_gguf_params *p, const char *text)
{
    if (p->n == GP_GGUF_MAX_PARAMS || !(p->text[p->n] = strdup(text)))
        return -1;
    p->n++;
    return 0;
}

/* "FILE: bad GGUF file (KEY is a string, not an integer)" for a key gp_gguf_get_int or
 * gp_gguf_get_float would not take. */
static void wrong_type(const gp_gguf *g, const char *path, const char *key, int is_float,
                       char *err, size_t errlen)
{
    gp_gguf_type t = gp_gguf_kv_type(g, gp_gguf_find(g, key));
    const char *name = gp_gguf_value_type_name(t);
    snprintf(err, errlen, "%s: bad GGUF file (%s is a%s %s%s, not %s)", path, key,
             name[0] == 'i' || name[0] == 'a' ? "n" : "", name,
             t == GP_GGUF_UINT64 ? " past 2^63" : "", is_float ? "a number" : "an integer");
}

/* ARCH.key as an integer: 0 found, 1 absent, -1 wrong type (err set). */
static int arch_int(const gp_gguf *g, const char *path, const char *arch, const char *key,
                    int64_t *v, char *err, size_t errlen)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    int got = gp_gguf_get_int(g, k, v);
    if (got < 0)
        wrong_type(g, path, k, 0, err, errlen);
    return got;
}

/* head_dim (a parameter of graphs whose heads need not be hidden_size / heads, as Mistral's):
 * attention.key_length when the file has it (llama.cpp's converter writes it only when the
 * config has a head_dim), else embedding_length / head_count, as llama.cpp reads it. */
int gp_gguf_params_derive_llama(const gp_gguf *g, const char *path, const char *arch,
                                gp_gguf_params *p, char *err, size_t errlen)
{
    int64_t kl = 0, embd = 0, heads = 0;
    int has_kl = arch_int(g, path, arch, "attention.key_length", &kl, err, errlen);
    int has_embd = arch_int(g, path, arch, "embedding_length", &embd, err, errlen);
    int has_heads = arch_int(g, path, arch, "attention.head_count", &heads, err, errlen);
    if (has_kl < 0 || has_embd < 0 || has_heads < 0)
        return -1;
    if (has_kl == 1 && has_embd == 0 && has_heads == 0 && heads > 0 && embd % heads == 0 &&
        push(p, "%s=%lld", "head_dim", (double)(embd / heads), 0))
        goto oom;
    /* Llama 3.1's rope scaling is no metadata but a tensor, one frequency factor a rotated pair
     * (examples/llama3.gplan binds it when rope_freqs is true). */
    if (gp_gguf_tensor_find(g, "rope_freqs.weight") && push_text(p, "rope_freqs=true"))
        goto oom;
    return 0;
oom:
    snprintf(err, errlen, "%s: out of memory", path);
    return -1;
}

/* query_pre_attn_scalar, which no Gemma file holds: llama.cpp scales scores by head_dim^-1/2,
 * by (hidden_size / heads)^-1/2 for the 27B models (big_layers layers), as their configs say. */
static int gemma_scalar(const gp_gguf *g, const char *path, const char *arch, int64_t big_layers,
                        gp_gguf_params *p, char *err, size_t errlen)
{
    int64_t layers = 0, embd = 0, heads = 0, head_dim = 0;
    if (arch_int(g, path, arch, "block_count", &layers, err, errlen) < 0 ||
        arch_int(g, path, arch, "embedding_length", &embd, err, errlen) < 0 ||
        arch_int(g, path, arch, "attention.head_count", &heads, err, errlen) < 0)
        return -1;
    int got = arch_int(g, path, arch, "attention.key_length", &head_dim, err, errlen);
    if (got < 0)
        return -1;
    if (got == 1 || layers == big_layers)
        head_dim = heads > 0 ? embd / heads : 0;
    if (head_dim > 0 && push(p, "%s=%lld", "query_pre_attn_scalar", (double)head_dim, 0))
        goto oom;
    return 0;
oom:
    snprintf(err, errlen, "%s: out of memory", path);
    return -1;
}

int gp_gguf_params_derive_gemma2(const gp_gguf *g, const char *path, const char *arch,
                                 gp_gguf_params *p, char *err, size_t errlen)
{
    return gemma_scalar(g, path, arch, 46, p, err, errlen);
}

/* Gemma 3's local and global layers: none local without a window; else one global layer every
 * attention.sliding_window_pattern (6 when absent, as llama.cpp assumes; the converter writes
 * none), which llama.cpp also takes as an array of bools, true for a local layer. The global
 * layers' rope scaling from rope.scaling.type. */
int gp_gguf_params_derive_gemma3(const gp_gguf *g, const char *path, const char *arch,
                                 gp_gguf_params *p, char *err, size_t errlen)
{
    char key[128], text[96];
    if (gemma_scalar(g, path, arch, 62, p, err, errlen))
        return -1;
    int64_t window = 0, period = 0;
    int got = arch_int(g, path, arch, "attention.sliding_window", &window, err, errlen);
    if (got < 0)
        return -1;
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", arch);
    gp_gguf_type elem;
    uint64_t n;
    if (got == 1 || window <= 0) {
        period = 1; /* every layer global */
    } else if (gp_gguf_get_arr(g, key, &elem, &n) == 0) {
        int64_t kv = gp_gguf_find(g, key);
        period = (int64_t)n + 1;
        for (uint64_t i = 0; i < n && period == (int64_t)n + 1; i++) {
            int64_t local;
            if (gp_gguf_arr_int(g, kv, i, &local) != 0) {
                snprintf(err, errlen, "%s: metadata %s has the wrong type", path, key);
                return -1;
            }
            if (!local)
                period = (int64_t)i + 1;
        }
        for (uint64_t i = 0; i < n; i++) {
            int64_t local;
            gp_gguf_arr_int(g, kv, i, &local);
            if ((local == 0) != ((int64_t)(i + 1) % period == 0)) {
                snprintf(err, errlen,
                         "%s: metadata %s: layer %llu breaks the pattern of one global layer "
                         "every %lld (sliding_window_pattern)",
                         path, key, (unsigned long long)i, (long long)period);
                return -1;
            }
        }
    } else if (arch_int(g, path, arch, "attention.sliding_window_pattern", &period, err,
                        errlen) < 0) {
        return -1;
    }
    if (period > 0 && push(p, "%s=%lld", "sliding_window_pattern", (double)period, 0))
        goto oom;
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    gp_gguf_str type;
    if (gp_gguf_get_str(g, key, &type) == 0 && type.len < 32) {
        snprintf(text, sizeof text, "rope_type=%.*s", (int)type.len, type.s);
        if (type.len == 4 && memcmp(type.s, "none", 4) == 0)
            snprintf(text, sizeof text, "rope_type=default");
        if (push_text(p, text))
            goto oom;
    }
    return 0;
oom:
    snprintf(err, errlen, "%s: out of memory", path);
    return -1;
}

/* Phi-3: the graph rotates whole heads; LongRoPE's factors are tensors of the file. */
int gp_gguf_params_derive_phi3(const gp_gguf *g, const char *path, const char *arch,
                               gp_gguf_params *p, char *err, size_t errlen)
{
    int64_t embd = 0, heads = 0, rot = 0;
    if (arch_int(g, path, arch, "embedding_length", &embd, err, errlen) < 0 ||
        arch_int(g, path, arch, "attention.head_count", &heads, err, errlen) < 0)
        return -1;
    int got = arch_int(g, path, arch, "rope.dimension_count", &rot, err, errlen);
    if (got < 0)
        return -1;
    if (got == 0 && heads > 0 && rot != embd / heads) {
        snprintf(err, errlen,
                 "%s: %s.rope.dimension_count is %lld, not the head size %lld: partial rotary "
                 "embeddings (Phi-4-mini) are not supported",
                 path, arch, (long long)rot, (long long)(embd / heads));
        return -1;
    }
    /* LongRoPE's per-frequency factors, short and long: the graph picks one by its context. */
    if (gp_gguf_tensor_find(g, "rope_factors_long.weight")) {
        int64_t ctx = 0, orig = 0;
        int has_ctx = arch_int(g, path, arch, "context_length", &ctx, err, errlen);
        int has_orig = arch_int(g, path, arch, "rope.scaling.original_context_length", &orig, err,
                                errlen);
        if (has_ctx < 0 || has_orig < 0)
            return -1;
        if ((push_text(p, "rope_type=longrope") || push_text(p, "rope_factors=true")) ||
            (has_orig == 1 && has_ctx == 0 &&
             push(p, "%s=%lld", "original_max_position_embeddings", (double)ctx, 0))) {
            snprintf(err, errlen, "%s: out of memory", path);
            return -1;
        }
    }
    return 0;
}

/* A key's value against its meaning: counts positive, floats finite (and positive where they
 * must be), a context a plan can hold. 0, or -1 with err "PATH: bad GGUF file (KEY = V: why)". */
static int bad_value(const char *path, const char *key, const gp_family_key *m, double f,
                     int64_t i, char *err, size_t errlen)
{
    const char *why = NULL;
    if (m->is_float)
        why = !(f - f == 0) ? "not a finite number"
              : m->need != GP_KEY_OPTIONAL && !(f > 0) ? "must be positive" : NULL;
    else
        why = i < 0 ? "negative" : m->need != GP_KEY_OPTIONAL && i == 0 ? "must be positive"
              : i > GP_GGUF_MAX_COUNT ? "more than a plan can hold (2^24)" : NULL;
    if (!why)
        return 0;
    if (m->is_float)
        snprintf(err, errlen, "%s: bad GGUF file (%s = %g: %s)", path, key, f, why);
    else
        snprintf(err, errlen, "%s: bad GGUF file (%s = %lld: %s)", path, key, (long long)i, why);
    return -1;
}

/* The heads of llama.cpp's TextModel: head_count_kv absent is head_count (the format's default,
 * not the graph's); the KV heads divide the query heads, and without attention.key_length the
 * heads divide the embedding. 0, or -1 with err. */
static int shape_check(const gp_gguf *g, const char *path, const char *arch, gp_gguf_params *p,
                       char *err, size_t errlen)
{
    int64_t embd = 0, heads = 0, kv = 0, kl = 0;
    int has_kv = arch_int(g, path, arch, "attention.head_count_kv", &kv, err, errlen);
    int has_kl = arch_int(g, path, arch, "attention.key_length", &kl, err, errlen);
    if (arch_int(g, path, arch, "embedding_length", &embd, err, errlen) ||
        arch_int(g, path, arch, "attention.head_count", &heads, err, errlen) || has_kv < 0 ||
        has_kl < 0)
        return -1;
    if (has_kv == 1)
        kv = heads;
    if (heads % kv) {
        snprintf(err, errlen, "%s: bad GGUF file (%s.attention.head_count_kv = %lld: does not "
                 "divide %s.attention.head_count = %lld)", path, arch, (long long)kv, arch,
                 (long long)heads);
        return -1;
    }
    if (has_kl == 1 && embd % heads) {
        snprintf(err, errlen, "%s: bad GGUF file (%s.attention.head_count = %lld: does not divide "
                 "%s.embedding_length = %lld)", path, arch, (long long)heads, arch,
                 (long long)embd);
        return -1;
    }
    if (has_kv == 1 && push(p, "%s=%lld", "num_key_value_heads", (double)kv, 0)) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    return 0;
}

/* The family of architecture arch (any of its families: they share their gp_family_gguf). */
static const gp_family *find_family(gp_gguf_str arch)
{
    char name[64];
    if (arch.len >= sizeof name || memchr(arch.s, 0, arch.len))
        return NULL;
    memcpy(name, arch.s, arch.len);
    name[arch.len] = 0;
    return gp_family_find(name);
}

int gp_gguf_params_read(const char *path, gp_gguf_params *p, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    gp_gguf *g = gp_gguf_open(path, err, errlen);
    if (!g)
        return -1;
    gp_gguf_str arch;
    const gp_family *fam = NULL;
    int rc = -1;
    if (gp_gguf_get_str(g, "general.architecture", &arch) != 0) {
        snprintf(err, errlen, "%s: no general.architecture string in the metadata", path);
        goto done;
    }
    if (!(fam = find_family(arch))) {
        /* The architectures in table order, each once. */
        char names[128] = "";
        for (int i = 0; i < gp_family_count(); i++) {
            const char *a = gp_family_at(i)->gguf_arch;
            if (gp_family_find(a) == gp_family_at(i))
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                         names[0] ? ", " : "", a);
        }
        snprintf(err, errlen, "%s: architecture \"%.*s\" is not supported by --gguf (%s)", path,
                 (int)(arch.len < 64 ? arch.len : 64), arch.s, names);
        goto done;
    }
    const gp_family_gguf *spec = fam->gguf;
    for (const char *const *a = spec->assumed; *a; a++)
        if (push_text(p, *a))
            goto oom;
    size_t n_text = spec->text_keys ? sizeof text_keys / sizeof text_keys[0] : 0;
    for (size_t k = 0; k < n_text + spec->n_keys; k++) {
        const gp_family_key *m = k < n_text ? &text_keys[k] : &spec->keys[k - n_text];
        char key[128];
        snprintf(key, sizeof key, "%s.%s", fam->gguf_arch, m->key);
        double f;
        int64_t i;
        int got = m->is_float ? gp_gguf_get_float(g, key, &f) : gp_gguf_get_int(g, key, &i);
        if (got < 0) {
            wrong_type(g, path, key, m->is_float, err, errlen);
            goto done;
        }
        if (got == 1 && m->need == GP_KEY_REQUIRED) {
            snprintf(err, errlen, "%s: bad GGUF file (no %s: the model's shape cannot come from "
                     "the graph's defaults)", path, key);
            goto done;
        }
        if (got == 0 && bad_value(path, key, m, f, i, err, errlen))
            goto done;
        if (got == 0 && push(p, "%s=%lld", m->param, m->is_float ? f : (double)i, m->is_float))
            goto oom;
    }
    if (spec->text_keys && shape_check(g, path, fam->gguf_arch, p, err, errlen))
        goto done;
    /* The vocabulary: rows of the embedding table (ne[1] in ggml's order). */
    const gp_gguf_tensor *emb = gp_gguf_tensor_find(g, "token_embd.weight");
    if (emb && emb->ndim == 2 && push(p, "%s=%lld", "vocab_size", (double)emb->ne[1], 0))
        goto oom;
    /* llama.cpp's converter writes no output.weight when the head is the embedding. */
    if (!gp_gguf_tensor_find(g, "output.weight") &&
        push(p, "%s=%lld", "tie_word_embeddings", 1, 0))
        goto oom;
    if (spec->derive && spec->derive(g, path, fam->gguf_arch, p, err, errlen))
        goto done;
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

int gp_gguf_weights_open(gp_gguf_weights *gw, const char *path, char *err, size_t errlen)
{
    gw->used = NULL;
    gw->optional = NULL;
    gp_gguf *g = gp_gguf_open(path, err, errlen);
    gp_gguf_str arch;
    const gp_family *fam = g && !gp_gguf_get_str(g, "general.architecture", &arch)
                               ? find_family(arch) : NULL;
    gw->optional = fam ? fam->gguf->optional_tensors : NULL;
    gp_gguf_close(g);
    if (!(gw->w = gp_weights_open(path, err, errlen)))
        return -1;
    int n = gp_weights_count(gw->w);
    if (!(gw->used = calloc(n > 0 ? (size_t)n : 1, 1))) {
        gp_gguf_weights_close(gw);
        snprintf(err, errlen, "%s: out of memory", path);
        return -1;
    }
    return 0;
}

void gp_gguf_weights_close(gp_gguf_weights *gw)
{
    gp_weights_close(gw->w);
    free(gw->used);
    gw->w = NULL;
    gw->used = NULL;
}

/* Marks file tensor t used (the records are in name order). */
static void mark_used(gp_gguf_weights *gw, const gp_st_tensor *t)
{
    int lo = 0, hi = gp_weights_count(gw->w) - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(gp_weights_get(gw->w, mid)->name, t->name);
        if (!c) {
            gw->used[mid] = 1;
            break;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
}

gp_dtype gp_gguf_weight_dtype(void *ctx, const char *checkpoint_name, gp_dtype declared)
{
    gp_gguf_weights *gw = ctx;
    const gp_st_tensor *t = gp_weights_find(gw->w, checkpoint_name);
    if (!t && gp_weights_is_stacked(checkpoint_name)) {
        /* experts one by one (old Mixtral files): slice 0's dtype, every slice used */
        const gp_st_tensor *part;
        for (int64_t e = 0; (part = gp_weights_slice(gw->w, checkpoint_name, e)); e++) {
            mark_used(gw, part);
            t = t ? t : part;
        }
    }
    if (!t)
        return declared;
    mark_used(gw, t);
    return t->supported ? t->dtype : declared;
}

int gp_gguf_weights_unused(const gp_gguf_weights *gw, const char *path, char *err, size_t errlen)
{
    int n = gp_weights_count(gw->w), unused = 0;
    char names[512] = "";
    for (int i = 0; i < n; i++) {
        int optional = 0;
        for (const char *const *o = gw->optional; o && *o && !optional; o++)
            optional = !strcmp(*o, gp_weights_get(gw->w, i)->name);
        if (gw->used[i] || optional)
            continue;
        if (unused++ < 4)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%.96s",
                     unused > 1 ? ", " : "", gp_weights_get(gw->w, i)->name);
    }
    if (!unused)
        return 0;
    snprintf(err, errlen, "%s: %d tensor%s of the file %s not in the graph (%s%s): the file holds "
             "more layers than its block_count says, or another model's tensors (--allow-unused "
             "loads a part of a file on purpose)", path, unused, unused == 1 ? "" : "s",
             unused == 1 ? "is" : "are", names, unused > 4 ? ", ..." : "");
    return -1;
}

static void shape_str(char *out, size_t cap, int ndim, const int64_t *dims, gp_dtype t)
{
    size_t n = (size_t)snprintf(out, cap, "[");
    for (int d = 0; d < ndim && n < cap; d++)
        n += (size_t)snprintf(out + n, cap - n, "%s%lld", d ? ", " : "", (long long)dims[d]);
    if (n < cap)
        snprintf(out + n, cap - n, "] %s", gp_dtype_name(t));
}

/* Weight t [n, ...] stacked ('*' in its name) held as n tensors of the rest of its shape. */
static int stacked_missing(const gp_gguf_weights *gw, const gp_tensor *t, const char *path,
                           char *err, size_t errlen)
{
    for (int64_t e = 0; e < t->shape[0].size; e++) {
        const gp_st_tensor *f = gp_weights_slice(gw->w, t->weight_name, e);
        if (!f) {
            snprintf(err, errlen, "%s: weights: missing tensor \"%s\" (nor the slice %lld of "
                     "its experts one by one)", path, t->weight_name, (long long)e);
            return -1;
        }
        int same = f->ndim == t->ndim - 1;
        for (int d = 1; same && d < t->ndim; d++)
            same = f->shape[d - 1] == t->shape[d].size;
        if (!same) {
            int64_t want[GP_MAX_DIMS];
            char a[96], b[96];
            for (int d = 1; d < t->ndim; d++)
                want[d - 1] = t->shape[d].size;
            shape_str(a, sizeof a, t->ndim - 1, want, t->dtype);
            shape_str(b, sizeof b, f->ndim > GP_MAX_DIMS ? GP_MAX_DIMS : f->ndim, f->shape,
                      f->dtype);
            snprintf(err, errlen, "%s: weights: \"%s\" (slice %lld of \"%s\"): expected shape "
                     "%s, file has %s", path, f->name, (long long)e, t->weight_name, a, b);
            return -1;
        }
    }
    return 0;
}

int gp_gguf_weights_missing(const gp_gguf_weights *gw, const gp_graph *g, const char *path,
                            char *err, size_t errlen)
{
    /* A file of metadata alone (its family's optional tensors aside) gives parameters only. */
    int weights = 0;
    for (int i = 0; i < gp_weights_count(gw->w) && !weights; i++) {
        int optional = 0;
        for (const char *const *o = gw->optional; o && *o && !optional; o++)
            optional = !strcmp(*o, gp_weights_get(gw->w, i)->name);
        weights = !optional;
    }
    if (!weights)
        return 0;
    for (int i = 0; i < g->n_tensors; i++) {
        const gp_tensor *t = &g->tensors[i];
        if (t->kind != GP_TENSOR_WEIGHT || !t->weight_name || gp_lora_is_slot(t->weight_name))
            continue;
        const gp_st_tensor *f = gp_weights_find(gw->w, t->weight_name);
        if (!f && gp_weights_is_stacked(t->weight_name) && t->ndim >= 2) {
            /* experts one by one: each slice of the rest of the shape (their place in the file
             * is checked where they are bound) */
            if (stacked_missing(gw, t, path, err, errlen))
                return -1;
            continue;
        }
        if (!f) {
            snprintf(err, errlen, "%s: weights: missing tensor \"%s\"", path, t->weight_name);
            return -1;
        }
        /* A tensor-parallel weight holds one device's share of its split dim. */
        int64_t want[GP_MAX_DIMS];
        for (int d = 0; d < t->ndim; d++)
            want[d] = t->split.groups && d == t->split.dim ? t->split.full : t->shape[d].size;
        int same = f->ndim == t->ndim;
        for (int d = 0; same && d < t->ndim; d++)
            same = f->shape[d] == want[d];
        if (!same) {
            char a[96], b[96];
            shape_str(a, sizeof a, t->ndim, want, t->dtype);
            shape_str(b, sizeof b, f->ndim > GP_MAX_DIMS ? GP_MAX_DIMS : f->ndim, f->shape,
                      f->dtype);
            snprintf(err, errlen, "%s: weights: \"%s\": expected shape %s, file has %s", path,
                     t->weight_name, a, b);
            return -1;
        }
    }
    return 0;
}

int gp_gguf_params_derive_gpt_oss(const gp_gguf *g, const char *path, const char *arch,
                                  gp_gguf_params *p, char *err, size_t errlen)
{
    (void)g, (void)arch, (void)p;
    snprintf(err, errlen,
             "%s: gpt-oss GGUF files are not supported yet (MXFP4 experts, gate and up split; "
             "the Hugging Face folder in f32, f16 or bf16 runs on the CPU)",
             path);
    return -1;
}
