/* The tokenizer from a GGUF file's tokenizer.ggml.* metadata (llama.cpp's keys): the token texts,
 * types and scores, the merges, the special ids and flags, the pre-tokenizer's name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/core.h"
#include "tokenizer/tok_impl.h"

/* "NAME: bad tokenizer (REASON)", and NULL. */
#define BAD(...) (gp_err_bad(err, errlen, name, "tokenizer", __VA_ARGS__), (gp_tok *)NULL)

/* An array of n elements under key, or -1 (absent: *n = 0) / -2 (not an array of elem). */
static int64_t array(const gp_gguf *g, const char *key, int want_str, uint64_t *n)
{
    gp_gguf_type elem;
    *n = 0;
    int rc = gp_gguf_get_arr(g, key, &elem, n);
    if (rc == 1)
        return -1;
    if (rc != 0 || (want_str ? elem != GP_GGUF_STRING : elem == GP_GGUF_STRING))
        return -2;
    return gp_gguf_find(g, key);
}

static int id_key(const gp_gguf *g, const char *key, int32_t n_vocab, int32_t *out)
{
    int64_t v;
    int rc = gp_gguf_get_int(g, key, &v);
    if (rc == 1)
        return 0;
    if (rc != 0 || v < -1 || v >= n_vocab)
        return -1;
    *out = (int32_t)v;
    return 0;
}

static int flag_key(const gp_gguf *g, const char *key, int *out)
{
    int v;
    int rc = gp_gguf_get_bool(g, key, &v);
    if (rc == 1)
        return 0;
    if (rc != 0)
        return -1;
    *out = v;
    return 0;
}

gp_tok *gp_tok_from_gguf(const gp_gguf *g, char *err, size_t errlen)
{
    const char *name = gp_gguf_path(g);
    gp_gguf_str model;
    if (gp_gguf_get_str(g, "tokenizer.ggml.model", &model) != 0)
        return BAD("no tokenizer.ggml.model string");
    gp_tok_kind kind;
    /* gemma4: SentencePiece-style text (U+2581 spaces, byte fallback) with ranked merges */
    int ranked_spm = model.len == 6 && memcmp(model.s, "gemma4", 6) == 0;
    if (model.len == 4 && memcmp(model.s, "gpt2", 4) == 0)
        kind = GP_TOK_BYTE_BPE;
    else if ((model.len == 5 && memcmp(model.s, "llama", 5) == 0) || ranked_spm)
        kind = GP_TOK_SPM;
    else
        return BAD("tokenizer.ggml.model '%.*s' is not supported (gpt2, llama and gemma4 are)",
                   (int)(model.len > 64 ? 64 : model.len), model.s);

    uint64_t n_tok, n_scores, n_types, n_merges;
    int64_t kv_tok = array(g, "tokenizer.ggml.tokens", 1, &n_tok);
    int64_t kv_scores = array(g, "tokenizer.ggml.scores", 0, &n_scores);
    int64_t kv_types = array(g, "tokenizer.ggml.token_type", 0, &n_types);
    int64_t kv_merges = array(g, "tokenizer.ggml.merges", 1, &n_merges);
    if (kv_tok < 0)
        return BAD("tokenizer.ggml.tokens is %s", kv_tok == -1 ? "missing"
                                                              : "not an array of strings");
    if (n_tok == 0 || n_tok > (1u << 30))
        return BAD("%llu tokens", (unsigned long long)n_tok);
    if (kv_scores == -2 || kv_types == -2 || kv_merges == -2)
        return BAD("%s has the wrong type", kv_scores == -2 ? "tokenizer.ggml.scores"
                                            : kv_types == -2 ? "tokenizer.ggml.token_type"
                                                             : "tokenizer.ggml.merges");
    if (kv_scores >= 0 && n_scores != n_tok)
        return BAD("%llu tokens but %llu scores", (unsigned long long)n_tok,
                   (unsigned long long)n_scores);
    if (kv_types >= 0 && n_types != n_tok)
        return BAD("%llu tokens but %llu token types", (unsigned long long)n_tok,
                   (unsigned long long)n_types);
    if (kind == GP_TOK_SPM && !ranked_spm && kv_scores < 0)
        return BAD("a llama (SentencePiece) vocabulary needs tokenizer.ggml.scores");
    if ((kind == GP_TOK_BYTE_BPE || ranked_spm) && kv_merges < 0)
        return BAD("a %s vocabulary needs tokenizer.ggml.merges", ranked_spm ? "gemma4" : "gpt2");

    int32_t n = (int32_t)n_tok;
    gp_tok *t = gp_tok_alloc(n, kind, name);
    if (!t)
        return BAD("out of memory");
    if (kv_scores >= 0 && !(t->score = malloc((size_t)n * sizeof *t->score)))
        goto oom;
    for (int32_t i = 0; i < n; i++) {
        gp_gguf_str s;
        if (gp_gguf_arr_str(g, kv_tok, (uint64_t)i, &s) != 0 || s.len > (1u << 20)) {
            gp_tok_free(t);
            return BAD("token %d is unreadable", (int)i);
        }
        if (gp_tok_set_text(t, i, s.s, (size_t)s.len) != 0)
            goto oom;
        if (kv_types >= 0) {
            int64_t ty;
            if (gp_gguf_arr_int(g, kv_types, (uint64_t)i, &ty) != 0 || ty < 0 ||
                ty >= GP_TOKT_COUNT) {
                gp_tok_free(t);
                return BAD("token %d has a bad token_type", (int)i);
            }
            t->type[i] = (uint8_t)ty;
        }
        if (t->score) {
            double v;
            if (gp_gguf_arr_float(g, kv_scores, (uint64_t)i, &v) != 0) {
                gp_tok_free(t);
                return BAD("score %d is unreadable", (int)i);
            }
            t->score[i] = (float)v;
        }
    }
    if (gp_tok_index(t, err, errlen) != 0) {
        gp_tok_free(t);
        return NULL;
    }

    if (kind == GP_TOK_BYTE_BPE || ranked_spm) {
        if (gp_tok_merges_reserve(t, (int64_t)n_merges) != 0)
            goto oom;
        for (uint64_t j = 0; j < n_merges; j++) {
            gp_gguf_str s;
            if (gp_gguf_arr_str(g, kv_merges, j, &s) != 0) {
                gp_tok_free(t);
                return BAD("merge %llu is unreadable", (unsigned long long)j);
            }
            const char *sp = memchr(s.s, ' ', (size_t)s.len);
            if (!sp || sp == s.s || sp == s.s + s.len - 1) {
                gp_tok_free(t);
                return BAD("merge %llu '%.*s' is not two tokens separated by a space",
                           (unsigned long long)j, (int)(s.len > 64 ? 64 : s.len), s.s);
            }
            size_t la = (size_t)(sp - s.s), lb = (size_t)s.len - la - 1;
            int32_t a = gp_tok_find(t, s.s, la), b = gp_tok_find(t, sp + 1, lb);
            /* the merged text, for its id */
            char stack[512];
            char *m = la + lb <= sizeof stack ? stack : malloc(la + lb);
            if (!m)
                goto oom;
            memcpy(m, s.s, la);
            memcpy(m + la, sp + 1, lb);
            int32_t out = gp_tok_find(t, m, la + lb);
            if (m != stack)
                free(m);
            if (a < 0 || b < 0 || out < 0) {
                gp_tok_free(t);
                return BAD("merge %llu '%.*s' names %s", (unsigned long long)j,
                           (int)(s.len > 64 ? 64 : s.len), s.s,
                           a < 0 || b < 0 ? "an unknown token" : "a pair whose merge is no token");
            }
            gp_tok_merge_add(t, a, b, out, (uint32_t)j);
        }
    } else if (gp_tok_merges_from_scores(t, err, errlen) != 0) {
        gp_tok_free(t);
        return NULL;
    }

    if (id_key(g, "tokenizer.ggml.bos_token_id", n, &t->bos) != 0 ||
        id_key(g, "tokenizer.ggml.eos_token_id", n, &t->eos) != 0 ||
        id_key(g, "tokenizer.ggml.unknown_token_id", n, &t->unk) != 0 ||
        id_key(g, "tokenizer.ggml.eot_token_id", n, &t->eot) != 0 ||
        id_key(g, "tokenizer.ggml.eom_token_id", n, &t->eom) != 0 ||
        id_key(g, "tokenizer.ggml.padding_token_id", n, &t->pad) != 0) {
        gp_tok_free(t);
        return BAD("a special token id is not an integer in [-1, %d)", (int)n);
    }
    gp_gguf_str pre = {0};
    char pre_name[128] = "default";
    if (gp_gguf_get_str(g, "tokenizer.ggml.pre", &pre) == 0 && pre.len < sizeof pre_name) {
        memcpy(pre_name, pre.s, (size_t)pre.len);
        pre_name[pre.len] = '\0';
    }
    t->add_bos = kind == GP_TOK_SPM;
    t->add_space_prefix = kind == GP_TOK_SPM && !ranked_spm;
    if (ranked_spm) {
        static const char *const newlines[] = {"[^\\n]+|[\\n]+"};
        if (gp_tok_set_pretok(t, newlines, 1, err, errlen) != 0) {
            gp_tok_free(t);
            return NULL;
        }
    }
    if (kind == GP_TOK_BYTE_BPE) {
        int np = 0;
        const char *const *pats = gp_tok_pre_patterns(pre_name, &np, &t->ignore_merges);
        if (!pats) {
            gp_tok_free(t);
            return BAD("unknown pre-tokenizer tokenizer.ggml.pre = '%s'", pre_name);
        }
        /* Llama 3's family starts every sequence with BOS */
        t->add_bos = t->ignore_merges;
        if (gp_tok_set_pretok(t, pats, np, err, errlen) != 0) {
            gp_tok_free(t);
            return NULL;
        }
    }
    if (flag_key(g, "tokenizer.ggml.add_bos_token", &t->add_bos) != 0 ||
        flag_key(g, "tokenizer.ggml.add_eos_token", &t->add_eos) != 0 ||
        flag_key(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix) != 0) {
        gp_tok_free(t);
        return BAD("tokenizer.ggml.add_bos_token, add_eos_token or add_space_prefix is not a "
                   "bool");
    }
    gp_gguf_str tmpl;
    if (gp_gguf_get_str(g, "tokenizer.chat_template", &tmpl) == 0) {
        t->chat_template = malloc((size_t)tmpl.len + 1);
        if (!t->chat_template)
            goto oom;
        memcpy(t->chat_template, tmpl.s, (size_t)tmpl.len);
        t->chat_template[tmpl.len] = '\0';
    }
    if (gp_tok_finish(t, err, errlen) != 0) {
        gp_tok_free(t);
        return NULL;
    }
    return t;
oom:
    gp_tok_free(t);
    return BAD("out of memory");
}
