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

/* Where transformers keeps a setting in a config.json, searched in this order: at the top level;
 * in "rope_parameters" (transformers 5 moved rope_theta there), in its "full_attention" entry
 * (transformers 5 keeps Gemma 3's rope settings per layer type: the global layers' there, the
 * local layers' in "sliding_attention"); in "text_config" (a multimodal model's language model)
 * and its rope objects; in "rope_scaling" (transformers 4's Llama 3 and Gemma 3 scaling).
 * rope_local_base_freq (Gemma 3's local theta, a top-level key in transformers 4) is
 * rope_parameters.sliding_attention.rope_theta in transformers 5; num_experts (Qwen3-MoE's, as
 * the released configs spell it) is num_local_experts in what transformers 5 writes. */
typedef struct {
    const char *obj[3]; /* the nested objects, outermost first; NULL ends */
    const char *alias;  /* the key's name there for parameter `param`; NULL: the parameter's */
    const char *param;  /* the one parameter this place is for; NULL: any */
} cfg_place;

static const cfg_place CFG_PLACES[] = {
    {{NULL}, NULL, NULL},
    {{NULL}, "num_local_experts", "num_experts"}, /* Qwen3-MoE's, as transformers 5 writes it */
    {{"rope_parameters"}, NULL, NULL},
    {{"rope_parameters", "full_attention"}, NULL, NULL},
    {{"rope_parameters", "sliding_attention"}, "rope_theta", "rope_local_base_freq"},
    {{"text_config"}, NULL, NULL},
    {{"text_config", "rope_parameters"}, NULL, NULL},
    {{"text_config", "rope_parameters", "full_attention"}, NULL, NULL},
    {{"text_config", "rope_parameters", "sliding_attention"}, "rope_theta", "rope_local_base_freq"},
    {{"rope_scaling"}, NULL, NULL},
    {{"text_config", "rope_scaling"}, NULL, NULL},
};
#define N_CFG_PLACES (sizeof CFG_PLACES / sizeof CFG_PLACES[0])

/* The object of place k in cfg, or NULL. */
static const json_t *place_object(const json_t *cfg, size_t k)
{
    const json_t *o = cfg;
    for (int d = 0; d < 3 && o && CFG_PLACES[k].obj[d]; d++) {
        o = json_object_get(o, CFG_PLACES[k].obj[d]);
        if (!json_is_object(o))
            return NULL;
    }
    return o;
}

/* A parameter's value in the config (the first of CFG_PLACES that has it), or NULL; *place is
 * set to the place found. */
static const json_t *config_find(const json_t *cfg, const char *name, size_t *place)
{
    for (size_t k = 0; cfg && k < N_CFG_PLACES; k++) {
        const cfg_place *c = &CFG_PLACES[k];
        if (c->param && strcmp(c->param, name) != 0)
            continue;
        const json_t *o = place_object(cfg, k);
        const json_t *j = o ? json_object_get(o, c->alias ? c->alias : name) : NULL;
        if (j) {
            *place = k;
            return j;
        }
    }
    return NULL;
}

/* Where the config's value for parameter `name` is (config_find's place): its key, or the '{' of
 * the object holding it when the key is spelled with escapes. */
static gp_loc config_loc(const gp_dsl_params *p, const char *name)
{
    size_t top = skip_ws(p->cfg_text, p->cfg_len, 0), obj = top, at = NPOS, k = 0;
    const char *key = name;
    if (config_find(p->cfg, name, &k)) {
        for (int d = 0; d < 3 && obj != NPOS && CFG_PLACES[k].obj[d]; d++)
            obj = json_object_at(p->cfg_text, p->cfg_len, obj, CFG_PLACES[k].obj[d]);
        if (CFG_PLACES[k].alias)
            key = CFG_PLACES[k].alias;
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

gp_dsl_params *gp_dsl_params_new(gp_diag *d, const gp_ast_graph *ag, const gp_dsl_opts *o)
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

/* sliding_window_pattern P from the config's layer_types (transformers writes the list, and since
 * transformers 5 no longer the pattern): entry i must be "full_attention" when (i + 1) % P == 0
 * and "sliding_attention" otherwise, P one more than the first "full_attention"'s index (the
 * length plus one when every layer is local). 0 when there is no list (or an empty one), 1 with
 * *out set, -1 after reporting a list the pattern cannot describe. */
static int pattern_from_layer_types(gp_dsl_params *p, value *out)
{
    size_t place;
    const json_t *lt = config_find(p->cfg, "layer_types", &place);
    if (!lt || json_is_null(lt) || (json_is_array(lt) && json_array_size(lt) == 0))
        return 0;
    char buf[96];
    gp_loc at = config_loc(p, "layer_types");
    if (!json_is_array(lt)) {
        gp_diag_error(p->d, at,
                      "config key 'layer_types': expected an array of layer types, got %s",
                      json_kind(lt, buf, sizeof buf));
        return -1;
    }
    size_t n = json_array_size(lt), period = n + 1;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(lt, i);
        const char *t = json_is_string(e) ? json_string_value(e) : "";
        int full = strcmp(t, "full_attention") == 0;
        if (!full && strcmp(t, "sliding_attention") != 0) {
            gp_diag_error(p->d, at,
                          "config key 'layer_types': entry %zu is %s (expected \"sliding_attention\" "
                          "or \"full_attention\")",
                          i, json_kind(e, buf, sizeof buf));
            return -1;
        }
        if (full && period == n + 1)
            period = i + 1;
    }
    for (size_t i = 0; i < n; i++) {
        int full = strcmp(json_string_value(json_array_get(lt, i)), "full_attention") == 0;
        if (full != ((i + 1) % period == 0)) {
            gp_diag_error(p->d, at,
                          "config key 'layer_types': entry %zu breaks the pattern of one "
                          "\"full_attention\" layer every %zu (sliding_window_pattern)",
                          i, period);
            return -1;
        }
    }
    *out = vint((int64_t)period);
    return 1;
}

value gp_dsl_params_resolve(gp_dsl_params *p, const char *name, value def)
{
    value v = def;
    size_t place;
    const json_t *j = config_find(p->cfg, name, &place);
    int derived = 0;
    if (def.k == V_INT && strcmp(name, "sliding_window_pattern") == 0) {
        /* transformers follows layer_types when a config has both: so does the graph */
        derived = pattern_from_layer_types(p, &v);
        if (derived < 0)
            v = ERR;
    }
    if (def.k == V_INT && strcmp(name, "mlp_only_layers") == 0 && json_is_array(j)) {
        /* Qwen3-MoE's list of the layers with a dense MLP: the graph sees how many there are */
        v = vint((int64_t)json_array_size(j));
        derived = 1;
    }
    if (!derived && j && !json_is_null(j)) /* null (Mistral's "sliding_window": null): the default */
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
