/* Graph parameters' overrides: reads a Hugging Face config.json and -D NAME=VALUE texts and
 * converts them to the kind of each parameter's default. */
#include "dsl/params.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gp_dsl_params {
    gp_diag *d;
    const char *const *defines; /* n_defines "NAME=VALUE" texts, owned by the options */
    int n_defines;
    const char *const *file_params; /* n_file_params the same, from a checkpoint's metadata */
    int n_file_params;
    json_t *cfg;                /* the config's top-level object, or NULL */
    const char *cfg_file;       /* its name in d */
    char *cfg_text;             /* [cfg_len] its text, for the keys' locations */
    size_t cfg_len;
};

static const value ERR = {V_ERR, 0, 0, NULL};

/* Hugging Face spells dtypes "float32"; the language spells them "f32". */
static int dtype_from_text(const char *s, gp_dtype *out)
{
    static const struct {
        const char *hf;
        gp_dtype t;
    } aliases[] = {{"float32", GP_F32}, {"float16", GP_F16}, {"bfloat16", GP_BF16},
                   {"int32", GP_I32}};
    if (gp_dtype_from_name(s, out) == 0)
        return 0;
    for (size_t k = 0; k < sizeof aliases / sizeof aliases[0]; k++)
        if (strcmp(s, aliases[k].hf) == 0) {
            *out = aliases[k].t;
            return 0;
        }
    return -1;
}

/* A -D value converted to the kind of the parameter's default; ERR (reported) if it does not fit. */
static value from_text(gp_diag *d, value def, const char *name, const char *text)
{
    char *end;
    gp_loc none = {NULL, 0, 0};
    if (def.k == V_INT || def.k == V_FLOAT) {
        if (strcmp(text, "true") == 0 || strcmp(text, "false") == 0)
            return def.k == V_INT ? vint(text[0] == 't') : vfloat(text[0] == 't');
        errno = 0;
        if (def.k == V_INT) {
            long long v = strtoll(text, &end, 10);
            if (*text && !*end && errno == 0)
                return vint(v);
            gp_diag_error(d, none, "-D %s=%s: expected an integer", name, text);
            return ERR;
        }
        double v = strtod(text, &end);
        if (*text && !*end && errno == 0 && isfinite(v))
            return vfloat(v);
        gp_diag_error(d, none, "-D %s=%s: expected a number", name, text);
        return ERR;
    }
    if (def.k == V_DTYPE) {
        gp_dtype t;
        if (dtype_from_text(text, &t) == 0)
            return (value){V_DTYPE, t, 0, NULL};
        gp_diag_error(d, none, "-D %s=%s: expected a dtype (f32, f16, bf16 or i32)", name, text);
        return ERR;
    }
    return (value){V_STR, 0, 0, text};
}

/* ---- Locations in config.json: jansson keeps none for values, so messages find the keys in the
 * text (already parsed, so well formed). ---- */

#define NPOS ((size_t)-1)

static int json_ws(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

static size_t skip_ws(const char *t, size_t len, size_t k)
{
    while (k < len && json_ws(t[k]))
        k++;
    return k;
}

/* The offset of member `key`'s opening quote in the object whose '{' is at obj, or NPOS (also for
 * a key spelled with escapes). */
static size_t json_member_at(const char *t, size_t len, size_t obj, const char *key)
{
    size_t kl = strlen(key);
    int depth = 0;
    for (size_t k = obj + 1; k < len; k++) {
        char c = t[k];
        if (c == '"') {
            size_t open = k++;
            while (k < len && t[k] != '"')
                k += t[k] == '\\' ? 2 : 1;
            if (k >= len)
                return NPOS;
            size_t colon = skip_ws(t, len, k + 1);
            if (depth == 0 && colon < len && t[colon] == ':' && k - open - 1 == kl &&
                memcmp(t + open + 1, key, kl) == 0)
                return open;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (depth-- == 0)
                return NPOS;
        }
    }
    return NPOS;
}

/* The offset of the '{' of member `key`'s value in the object at obj, or NPOS. */
static size_t json_object_at(const char *t, size_t len, size_t obj, const char *key)
{
    size_t at = json_member_at(t, len, obj, key);
    if (at == NPOS)
        return NPOS;
    size_t k = at + 1;
    while (k < len && t[k] != '"')
        k += t[k] == '\\' ? 2 : 1;
    k = skip_ws(t, len, k + 1);                 /* the ':' */
    k = k < len ? skip_ws(t, len, k + 1) : len; /* the value */
    return k < len && t[k] == '{' ? k : NPOS;
}

/* The line and byte column of offset `at` in text (1-based). */
static gp_loc offset_loc(const char *file, const char *text, size_t len, size_t at)
{
    int line = 1;
    size_t line_start = 0;
    for (size_t k = 0; k < at && k < len; k++)
        if (text[k] == '\n') {
            line++;
            line_start = k + 1;
        }
    return (gp_loc){file, line, (int)(at - line_start) + 1};
}

/* Where the config's value for `key` is (config_value's search, in its order): its key, or the
 * '{' of the object holding it when the key is spelled with escapes. */
static gp_loc config_loc(const gp_dsl_params *p, const char *key)
{
    static const char *const nested[] = {"rope_parameters", "text_config", "rope_scaling"};
    size_t top = skip_ws(p->cfg_text, p->cfg_len, 0), obj = top, at = NPOS;
    if (!json_object_get(p->cfg, key))
        for (size_t i = 0; i < sizeof nested / sizeof nested[0]; i++) {
            const json_t *sub = json_object_get(p->cfg, nested[i]);
            if (json_is_object(sub) && json_object_get(sub, key)) {
                obj = json_object_at(p->cfg_text, p->cfg_len, top, nested[i]);
                break;
            }
        }
    if (obj != NPOS)
        at = json_member_at(p->cfg_text, p->cfg_len, obj, key);
    return offset_loc(p->cfg_file, p->cfg_text, p->cfg_len,
                      at != NPOS ? at : obj != NPOS ? obj : top);
}

static const char *json_kind(const json_t *j, char *buf, size_t cap)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: snprintf(buf, cap, "the string \"%.40s\"", json_string_value(j)); return buf;
    case JSON_INTEGER: snprintf(buf, cap, "%lld", (long long)json_integer_value(j)); return buf;
    case JSON_REAL: snprintf(buf, cap, "%g", json_real_value(j)); return buf;
    case JSON_TRUE: return "true";
    case JSON_FALSE: return "false";
    default: return "null";
    }
}

/* A config.json value converted to the kind of the parameter's default. */
static value from_json(gp_diag *d, value def, const char *key, const json_t *j, gp_loc loc)
{
    char buf[96];
    if (def.k == V_INT) {
        if (json_is_integer(j))
            return vint(json_integer_value(j));
        if (json_is_boolean(j))
            return vint(json_is_true(j));
        double r = json_is_real(j) ? json_real_value(j) : 0.5;
        if (r == floor(r) && fabs(r) < 9e15)
            return vint((int64_t)r);
        gp_diag_error(d, loc, "config key '%s': expected an integer, got %s", key,
                      json_kind(j, buf, sizeof buf));
        return ERR;
    }
    if (def.k == V_FLOAT) {
        if (json_is_number(j))
            return vfloat(json_number_value(j));
        if (json_is_boolean(j))
            return vfloat(json_is_true(j));
        gp_diag_error(d, loc, "config key '%s': expected a number, got %s", key,
                      json_kind(j, buf, sizeof buf));
        return ERR;
    }
    if (def.k == V_DTYPE) {
        gp_dtype t;
        if (json_is_string(j) && dtype_from_text(json_string_value(j), &t) == 0)
            return (value){V_DTYPE, t, 0, NULL};
        gp_diag_error(d, loc, "config key '%s': expected a dtype name, got %s", key,
                      json_kind(j, buf, sizeof buf));
        return ERR;
    }
    if (json_is_string(j))
        return (value){V_STR, 0, 0, json_string_value(j)};
    gp_diag_error(d, loc, "config key '%s': expected a string, got %s", key,
                  json_kind(j, buf, sizeof buf));
    return ERR;
}

/* A parameter's value in a config.json: a top-level key, else one of the nested objects where
 * transformers keeps some settings (since transformers 5, rope_theta lives in "rope_parameters";
 * configs written by transformers 4 keep Llama 3's rope_type and factors in "rope_scaling"). */
static const json_t *config_value(const json_t *cfg, const char *key)
{
    static const char *const nested[] = {"rope_parameters", "text_config", "rope_scaling"};
    if (!cfg)
        return NULL;
    const json_t *j = json_object_get(cfg, key);
    for (size_t i = 0; !j && i < sizeof nested / sizeof nested[0]; i++) {
        const json_t *sub = json_object_get(cfg, nested[i]);
        if (json_is_object(sub))
            j = json_object_get(sub, key);
    }
    return j;
}

/* Loads config.json (registered with the diagnostics so that messages quote it). */
static json_t *load_config(gp_diag *d, const char *path, const char **file, char **text,
                           size_t *len)
{
    size_t n = 0;
    char *buf = gp_dsl_read_file(d, path, "config file", &n);
    if (!buf)
        return NULL;
    *file = gp_diag_add_source(d, path, buf, n);
    if (!*file)
        *file = path;
    json_error_t je;
    json_t *root = json_loadb(buf, n, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        /* jansson's line, and a byte column (its own counts characters) from its position: the
         * byte after the offending one, or the end of the text. */
        size_t pos = je.position > 0 ? (size_t)je.position : 0;
        gp_loc at = offset_loc(*file, buf, n, pos > 0 ? pos - 1 : 0);
        if (je.line > at.line) /* the position is at a newline that ends the text */
            at = (gp_loc){*file, je.line, 1};
        gp_diag_error(d, at, "bad JSON: %s", je.text);
        free(buf);
        return NULL;
    }
    if (!json_is_object(root)) {
        gp_diag_error(d, offset_loc(*file, buf, n, skip_ws(buf, n, 0)),
                      "expected a JSON object at the top level");
        json_decref(root);
        free(buf);
        return NULL;
    }
    *text = buf;
    *len = n;
    return root;
}

gp_dsl_params *gp_dsl_params_new(gp_diag *d, const ast_graph *ag, const gp_dsl_opts *o)
{
    gp_dsl_params *p = calloc(1, sizeof *p);
    GP_ASSERT(p != NULL);
    p->d = d;
    p->defines = o ? o->defines : NULL;
    p->n_defines = o ? o->n_defines : 0;
    p->file_params = o ? o->file_params : NULL;
    p->n_file_params = o ? o->n_file_params : 0;
    gp_loc none = {NULL, 0, 0};
    /* -D: syntax, and names that are no parameter. */
    for (int k = 0; k < p->n_defines; k++) {
        const char *def = p->defines[k];
        const char *eq = def ? strchr(def, '=') : NULL;
        if (!eq || eq == def) {
            gp_diag_error(d, none, "bad -D '%s': expected NAME=VALUE", def ? def : "(null)");
            continue;
        }
        int found = 0;
        for (int q = 0; q < ag->params->n && !found; q++)
            found = strlen(ag->params->v[q].key) == (size_t)(eq - def) &&
                    strncmp(ag->params->v[q].key, def, (size_t)(eq - def)) == 0;
        if (!found)
            gp_diag_error(d, none, "-D %.*s: graph '%s' has no parameter '%.*s'", (int)(eq - def),
                          def, ag->name, (int)(eq - def), def);
    }
    if (o && o->config_path)
        p->cfg = load_config(d, o->config_path, &p->cfg_file, &p->cfg_text, &p->cfg_len);
    return p;
}

value gp_dsl_params_resolve(gp_dsl_params *p, const char *name, value def)
{
    value v = def;
    const json_t *j = config_value(p->cfg, name);
    if (j && !json_is_null(j)) /* null (Mistral's "sliding_window": null): the default */
        v = from_json(p->d, v, name, j, config_loc(p, name));
    const char *text = NULL;
    size_t kl = strlen(name);
    for (int k = 0; k < p->n_file_params; k++) {
        const char *d = p->file_params[k];
        if (d && strncmp(d, name, kl) == 0 && d[kl] == '=')
            text = d + kl + 1;
    }
    if (text && v.k != V_ERR)
        v = from_text(p->d, v, name, text);
    text = NULL;
    for (int k = 0; k < p->n_defines; k++) {
        const char *d = p->defines[k];
        if (d && strncmp(d, name, kl) == 0 && d[kl] == '=')
            text = d + kl + 1; /* the last one wins */
    }
    if (text && v.k != V_ERR)
        v = from_text(p->d, v, name, text);
    return v;
}

void gp_dsl_params_free(gp_dsl_params *p)
{
    if (!p)
        return;
    json_decref(p->cfg);
    free(p->cfg_text);
    free(p);
}
