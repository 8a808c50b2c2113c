/* The tokenizer from a Hugging Face folder: tokenizer.json (model BPE: vocab, merges, added tokens,
 * normalizer, pre-tokenizer), tokenizer_config.json (BOS/EOS flags, chat template) and
 * generation_config.json (EOS ids); and gp_tok_load, which picks GGUF or JSON by the path. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <utf8proc.h>

#include "ir/core.h"
#include "tokenizer/tok_impl.h"
#include "weights/filemap.h"

typedef struct {
    const char *name;
    char *err;
    size_t errlen;
} ctx;

/* "NAME: bad tokenizer (REASON)"; -1. */
#define fail(c, ...) gp_err_bad((c)->err, (c)->errlen, (c)->name, "tokenizer", __VA_ARGS__)

static const char *type_of(json_t *o)
{
    json_t *ty = json_object_get(o, "type");
    return json_is_string(ty) ? json_string_value(ty) : "";
}

/* Collected while walking the pre-tokenizer and normalizer trees. */
typedef struct {
    const char *pat[GP_TOK_MAX_RE];
    char *owned[GP_TOK_MAX_RE];
    int n;
    int byte_level, metaspace, prepend, replace_space, nfc;
} shape;

static int add_pat(ctx *c, shape *sh, const char *p, int own)
{
    if (sh->n == GP_TOK_MAX_RE)
        return fail(c, "more than %d pre-tokenizer splits", GP_TOK_MAX_RE);
    if (own) {
        sh->owned[sh->n] = strdup(p);
        if (!sh->owned[sh->n])
            return fail(c, "out of memory");
        p = sh->owned[sh->n];
    }
    sh->pat[sh->n++] = p;
    return 0;
}

static int walk_pre(ctx *c, shape *sh, json_t *p)
{
    if (!p || json_is_null(p))
        return 0;
    const char *ty = type_of(p);
    if (!strcmp(ty, "Sequence")) {
        json_t *list = json_object_get(p, "pretokenizers");
        size_t i;
        json_t *e;
        json_array_foreach(list, i, e)
            if (walk_pre(c, sh, e) != 0)
                return -1;
        return 0;
    }
    if (!strcmp(ty, "Split")) {
        json_t *pat = json_object_get(p, "pattern");
        json_t *re = json_object_get(pat, "Regex");
        json_t *str = json_object_get(pat, "String");
        const char *beh = json_string_value(json_object_get(p, "behavior"));
        if (json_is_true(json_object_get(p, "invert")))
            return fail(c, "inverted Split pre-tokenizers are not supported");
        if (!beh || strcmp(beh, "Isolated") != 0)
            return fail(c, "Split behavior '%s' is not supported (Isolated is)",
                        beh ? beh : "?");
        if (json_is_string(re))
            return add_pat(c, sh, json_string_value(re), 1);
        if (json_is_string(str)) {
            /* a literal: quoted for PCRE2 */
            const char *s = json_string_value(str);
            size_t n = strlen(s);
            char *q = malloc(n + 5);
            if (!q)
                return fail(c, "out of memory");
            snprintf(q, n + 5, "\\Q%s\\E", s);
            int rc = add_pat(c, sh, q, 1);
            free(q);
            return rc;
        }
        return fail(c, "Split without a pattern");
    }
    if (!strcmp(ty, "ByteLevel")) {
        sh->byte_level = 1;
        if (json_is_true(json_object_get(p, "add_prefix_space")))
            return fail(c, "ByteLevel add_prefix_space is not supported");
        json_t *ur = json_object_get(p, "use_regex");
        if (!ur || json_is_true(ur))
            return add_pat(c, sh, gp_tok_gpt2_pattern, 0);
        return 0;
    }
    if (!strcmp(ty, "Digits"))
        return add_pat(c, sh, json_is_true(json_object_get(p, "individual_digits")) ? "\\p{N}"
                                                                                     : "\\p{N}+",
                       0);
    if (!strcmp(ty, "Metaspace")) {
        if (json_is_true(json_object_get(p, "split")))
            return fail(c, "Metaspace with split is not supported");
        sh->metaspace = 1;
        const char *scheme = json_string_value(json_object_get(p, "prepend_scheme"));
        if (!scheme || strcmp(scheme, "never") != 0)
            sh->prepend = 1;
        return 0;
    }
    return fail(c, "pre-tokenizer '%s' is not supported", ty);
}

static int walk_norm(ctx *c, shape *sh, json_t *p)
{
    if (!p || json_is_null(p))
        return 0;
    const char *ty = type_of(p);
    if (!strcmp(ty, "Sequence")) {
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(p, "normalizers"), i, e)
            if (walk_norm(c, sh, e) != 0)
                return -1;
        return 0;
    }
    if (!strcmp(ty, "Prepend")) {
        const char *s = json_string_value(json_object_get(p, "prepend"));
        if (!s || strcmp(s, "\xe2\x96\x81") != 0)
            return fail(c, "Prepend of anything but U+2581 is not supported");
        sh->prepend = 1;
        return 0;
    }
    if (!strcmp(ty, "Replace")) {
        const char *s = json_string_value(json_object_get(json_object_get(p, "pattern"),
                                                          "String"));
        const char *to = json_string_value(json_object_get(p, "content"));
        if (!s || !to || strcmp(s, " ") != 0 || strcmp(to, "\xe2\x96\x81") != 0)
            return fail(c, "Replace other than ' ' -> U+2581 is not supported");
        sh->replace_space = 1;
        return 0;
    }
    static const struct {
        const char *name;
        int flags;
    } forms[] = {{"NFC", UTF8PROC_COMPOSE}, {"NFKC", UTF8PROC_COMPOSE | UTF8PROC_COMPAT},
                 {"NFD", UTF8PROC_DECOMPOSE}, {"NFKD", UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT}};
    for (size_t i = 0; i < sizeof forms / sizeof *forms; i++)
        if (!strcmp(ty, forms[i].name)) {
            sh->nfc = forms[i].flags;
            return 0;
        }
    return fail(c, "normalizer '%s' is not supported", ty);
}

static int split_merge(json_t *m, const char **a, size_t *la, const char **b, size_t *lb)
{
    if (json_is_string(m)) {
        const char *s = json_string_value(m);
        const char *sp = strchr(s, ' ');
        if (!sp || sp == s || !sp[1])
            return -1;
        *a = s;
        *la = (size_t)(sp - s);
        *b = sp + 1;
        *lb = strlen(sp + 1);
        return 0;
    }
    if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        *a = json_string_value(json_array_get(m, 0));
        *la = json_string_length(json_array_get(m, 0));
        *b = json_string_value(json_array_get(m, 1));
        *lb = json_string_length(json_array_get(m, 1));
        return 0;
    }
    return -1;
}

/* A token named by a config: a string, or an object with "content". */
static const char *token_text(json_t *v)
{
    if (json_is_string(v))
        return json_string_value(v);
    return json_string_value(json_object_get(v, "content"));
}

static int32_t id_of_text(const gp_tok *t, const char *s)
{
    return s ? gp_tok_find(t, s, strlen(s)) : -1;
}

static json_t *load_json_file(const char *path, int required, ctx *c, int *rc)
{
    json_error_t je;
    struct stat st;
    *rc = 0;
    if (stat(path, &st) != 0) {
        if (required) {
            snprintf(c->err, c->errlen, "%s: cannot open", path);
            *rc = -1;
        }
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) { /* a FIFO would block the read */
        gp_file_check(path, c->err, c->errlen);
        *rc = -1;
        return NULL;
    }
    json_t *j = json_load_file(path, JSON_ALLOW_NUL, &je);
    if (!j) {
        snprintf(c->err, c->errlen, "%s:%d:%d: error: %s", path, je.line, je.column, je.text);
        *rc = -1;
    }
    return j;
}

static gp_tok *from_json(json_t *root, json_t *config, json_t *gen, ctx *c)
{
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model))
        return fail(c, "no model object"), NULL;
    if (strcmp(type_of(model), "BPE") != 0)
        return fail(c, "model type '%s' is not supported (BPE is)", type_of(model)), NULL;
    json_t *vocab = json_object_get(model, "vocab");
    json_t *merges = json_object_get(model, "merges");
    json_t *added = json_object_get(root, "added_tokens");
    if (!json_is_object(vocab) || !json_is_array(merges))
        return fail(c, "model.vocab must be an object and model.merges an array"), NULL;

    shape sh = {0};
    gp_tok *t = NULL;
    if (walk_pre(c, &sh, json_object_get(root, "pre_tokenizer")) != 0 ||
        walk_norm(c, &sh, json_object_get(root, "normalizer")) != 0)
        goto out;
    json_t *dec = json_object_get(root, "decoder");
    if (!strcmp(type_of(dec), "ByteLevel"))
        sh.byte_level = 1;
    gp_tok_kind kind = sh.byte_level ? GP_TOK_BYTE_BPE : GP_TOK_SPM;
    if (kind == GP_TOK_SPM && !sh.replace_space && !sh.metaspace) {
        fail(c, "neither byte-level nor SentencePiece-style (no ByteLevel, no ' ' -> U+2581)");
        goto out;
    }

    /* ids: the vocabulary's and the added tokens' */
    int64_t n = 0;
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) >= (1 << 30)) {
            fail(c, "vocab entry '%.64s' has a bad id", key);
            goto out;
        }
        if (json_integer_value(v) + 1 > n)
            n = json_integer_value(v) + 1;
    }
    size_t i;
    json_t *e;
    json_array_foreach(added, i, e) {
        json_t *id = json_object_get(e, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= (1 << 30) || !json_is_string(json_object_get(e, "content"))) {
            fail(c, "added token %zu has no id or content", i);
            goto out;
        }
        if (json_integer_value(id) + 1 > n)
            n = json_integer_value(id) + 1;
    }
    if (n == 0) {
        fail(c, "empty vocabulary");
        goto out;
    }
    /* texts by id (the object is unordered); an added token overrides the vocab's text */
    const char **texts = calloc((size_t)n, sizeof *texts);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    uint8_t *types = calloc((size_t)n, 1);
    if (!texts || !lens || !types) {
        free(texts);
        free(lens);
        free(types);
        fail(c, "out of memory");
        goto out;
    }
    json_object_foreach(vocab, key, v) {
        int64_t id = json_integer_value(v);
        if (texts[id]) {
            fail(c, "vocab ids %lld repeat", (long long)id);
            goto out_arrays;
        }
        texts[id] = key;
        lens[id] = strlen(key);
        types[id] = GP_TOKT_NORMAL;
    }
    json_array_foreach(added, i, e) {
        int64_t id = json_integer_value(json_object_get(e, "id"));
        texts[id] = json_string_value(json_object_get(e, "content"));
        lens[id] = json_string_length(json_object_get(e, "content"));
        types[id] = json_is_true(json_object_get(e, "special")) ? GP_TOKT_CONTROL : GP_TOKT_USER;
    }
    t = gp_tok_alloc((int32_t)n, kind, c->name);
    if (!t) {
        fail(c, "out of memory");
        goto out_arrays;
    }
    for (int64_t id = 0; id < n; id++) {
        if (texts[id] && gp_tok_set_text(t, (int32_t)id, texts[id], lens[id]) != 0) {
            fail(c, "out of memory");
            goto out_fail;
        }
        t->type[id] = texts[id] ? types[id] : GP_TOKT_UNUSED;
        if (kind == GP_TOK_SPM && types[id] == GP_TOKT_NORMAL && lens[id] == 6 &&
            !memcmp(texts[id], "<0x", 3) && texts[id][5] == '>' &&
            json_is_true(json_object_get(model, "byte_fallback")))
            t->type[id] = GP_TOKT_BYTE;
    }
    if (gp_tok_index(t, c->err, c->errlen) != 0)
        goto out_fail;
    if (gp_tok_merges_reserve(t, (int64_t)json_array_size(merges)) != 0) {
        fail(c, "out of memory");
        goto out_fail;
    }
    json_array_foreach(merges, i, e) {
        const char *a, *b;
        size_t la, lb;
        if (split_merge(e, &a, &la, &b, &lb) != 0) {
            fail(c, "merge %zu is not two tokens", i);
            goto out_fail;
        }
        char stack[512];
        char *m = la + lb <= sizeof stack ? stack : malloc(la + lb);
        if (!m) {
            fail(c, "out of memory");
            goto out_fail;
        }
        memcpy(m, a, la);
        memcpy(m + la, b, lb);
        int32_t ia = gp_tok_find(t, a, la), ib = gp_tok_find(t, b, lb);
        int32_t out = gp_tok_find(t, m, la + lb);
        if (m != stack)
            free(m);
        if (ia < 0 || ib < 0 || out < 0) {
            fail(c, "merge %zu names %s", i,
                 ia < 0 || ib < 0 ? "an unknown token" : "a pair whose merge is no token");
            goto out_fail;
        }
        gp_tok_merge_add(t, ia, ib, out, (uint32_t)i);
    }
    t->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
    t->add_space_prefix = sh.prepend;
    t->nfc = sh.nfc;
    if (gp_tok_set_pretok(t, sh.pat, sh.n, c->err, c->errlen) != 0)
        goto out_fail;
    t->unk = id_of_text(t, json_string_value(json_object_get(model, "unk_token")));

    /* BOS/EOS: tokenizer_config.json, else the post-processor's template */
    t->bos = id_of_text(t, token_text(json_object_get(config, "bos_token")));
    t->eos = id_of_text(t, token_text(json_object_get(config, "eos_token")));
    json_t *post = json_object_get(root, "post_processor");
    if (!strcmp(type_of(post), "TemplateProcessing")) {
        json_t *single = json_object_get(post, "single");
        size_t ns = json_array_size(single);
        json_t *first = json_object_get(json_array_get(single, 0), "SpecialToken");
        json_t *last = json_object_get(json_array_get(single, ns ? ns - 1 : 0), "SpecialToken");
        if (first) {
            int32_t id = id_of_text(t, json_string_value(json_object_get(first, "id")));
            t->add_bos = id >= 0;
            if (id >= 0)
                t->bos = id;
        }
        if (last && ns > 1) {
            int32_t id = id_of_text(t, json_string_value(json_object_get(last, "id")));
            t->add_eos = id >= 0;
            if (id >= 0)
                t->eos = id;
        }
    }
    json_t *ab = json_object_get(config, "add_bos_token");
    json_t *ae = json_object_get(config, "add_eos_token");
    if (json_is_boolean(ab))
        t->add_bos = json_is_true(ab) && t->bos >= 0;
    if (json_is_boolean(ae))
        t->add_eos = json_is_true(ae) && t->eos >= 0;
    json_t *tmpl = json_object_get(config, "chat_template");
    if (json_is_array(tmpl)) { /* named templates: the "default" one */
        json_t *named = tmpl;
        tmpl = NULL;
        json_array_foreach(named, i, e) {
            const char *nm = json_string_value(json_object_get(e, "name"));
            if (nm && !strcmp(nm, "default"))
                tmpl = json_object_get(e, "template");
        }
    }
    if (json_is_string(tmpl) && !(t->chat_template = strdup(json_string_value(tmpl)))) {
        fail(c, "out of memory");
        goto out_fail;
    }
    if (gp_tok_finish(t, c->err, c->errlen) != 0)
        goto out_fail;
    json_t *geos = json_object_get(gen, "eos_token_id");
    if (json_is_integer(geos) && gp_tok_add_eog(t, (int32_t)json_integer_value(geos)) != 0)
        goto out_fail;
    json_array_foreach(geos, i, e)
        if (json_is_integer(e) && gp_tok_add_eog(t, (int32_t)json_integer_value(e)) != 0)
            goto out_fail;
    free(texts);
    free(lens);
    free(types);
    goto out;
out_fail:
    gp_tok_free(t);
    t = NULL;
out_arrays:
    free(texts);
    free(lens);
    free(types);
out:
    for (int k = 0; k < sh.n; k++)
        free(sh.owned[k]);
    return t;
}

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int looks_gguf(const char *path)
{
    FILE *f = fopen(path, "rb");
    char m[4] = {0};
    if (!f)
        return 0;
    size_t n = fread(m, 1, 4, f);
    fclose(f);
    return n == 4 && memcmp(m, "GGUF", 4) == 0;
}

gp_tok *gp_tok_load(const char *path, char *err, size_t errlen)
{
    size_t n = strlen(path);
    int gguf_name = n >= 5 && strcmp(path + n - 5, ".gguf") == 0;
    if (!is_dir(path) && gp_file_check(path, err, errlen))
        return NULL;
    if (!is_dir(path) && (gguf_name || looks_gguf(path))) {
        gp_gguf *g = gp_gguf_open(path, err, errlen);
        if (!g)
            return NULL;
        gp_tok *t = gp_tok_from_gguf(g, err, errlen);
        gp_gguf_close(g);
        return t;
    }
    char dir[4096], file[4200];
    if (is_dir(path)) {
        snprintf(dir, sizeof dir, "%s", path);
        snprintf(file, sizeof file, "%s/tokenizer.json", path);
    } else {
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        else
            snprintf(dir, sizeof dir, ".");
        snprintf(file, sizeof file, "%s", path);
    }
    ctx c = {file, err, errlen};
    int rc;
    json_t *root = load_json_file(file, 1, &c, &rc);
    if (!root)
        return NULL;
    char cfg_path[4300], gen_path[4300];
    snprintf(cfg_path, sizeof cfg_path, "%s/tokenizer_config.json", dir);
    snprintf(gen_path, sizeof gen_path, "%s/generation_config.json", dir);
    json_t *cfg = load_json_file(cfg_path, 0, &c, &rc);
    json_t *gen = rc ? NULL : load_json_file(gen_path, 0, &c, &rc);
    gp_tok *t = rc ? NULL : from_json(root, cfg, gen, &c);
    json_decref(root);
    json_decref(cfg);
    json_decref(gen);
    return t;
}
