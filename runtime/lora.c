/* PEFT LoRA adapters: reads adapter_config.json and adapter_model.safetensors, matches each module
 * to a weight of the plan, checks shapes, then merges W += s * delta with the CPU kernels. */
#include "runtime/lora.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cpu_kernels.h"
#include "runtime/safetensors.h"
#include "runtime/weights.h"

#define LORA_PREFIX "base_model.model."
#define LORA_A_SUFFIX ".lora_A.weight"
#define LORA_B_SUFFIX ".lora_B.weight"
#define LORA_ALIGN 64
#define LORA_MAX_TARGETS 64 /* target_modules entries */

/* Module names gplan's examples use: GPT-2's Conv1D layers and Llama's Linear layers. */
static const char *const known_modules[] = {"c_attn", "c_proj", "c_fc", "q_proj", "k_proj",
                                            "v_proj", "o_proj", "gate_proj", "up_proj",
                                            "down_proj"};

typedef struct {
    int64_t r;
    double alpha;
    int fan_in_fan_out, use_rslora;
    char *targets[LORA_MAX_TARGETS]; /* [n_targets] module names */
    int n_targets;
} lora_config;

/* One module to merge: the plan weight and its A [r, in] and B [out, r]. */
typedef struct {
    int id;
    const gp_st_tensor *a, *b;
    int64_t out, in;
} lora_target;

static void set_err(char *err, size_t n, const char *fmt, ...)
{
    if (!err || !n)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

static void config_free(lora_config *c)
{
    for (int i = 0; i < c->n_targets; i++)
        free(c->targets[i]);
    c->n_targets = 0;
}

static int known_module(const char *name)
{
    for (size_t i = 0; i < sizeof known_modules / sizeof *known_modules; i++)
        if (!strcmp(name, known_modules[i]))
            return 1;
    return 0;
}

/* An optional boolean field: 0 when absent or null; -1 when not a boolean. */
static int opt_bool(json_t *root, const char *key, int *out)
{
    json_t *v = json_object_get(root, key);
    *out = 0;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v))
        return -1;
    *out = json_is_true(v);
    return 0;
}

/* A pattern field (rank_pattern, alpha_pattern) must be absent or empty: per-module ranks are
 * not supported. */
static int empty_object(json_t *root, const char *key)
{
    json_t *v = json_object_get(root, key);
    return !v || json_is_null(v) || (json_is_object(v) && json_object_size(v) == 0);
}

static int read_config(const char *path, lora_config *c, char *err, size_t n)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) {
        if (je.line > 0)
            set_err(err, n, "%s: bad adapter config (%s, line %d)", path, je.text, je.line);
        else
            set_err(err, n, "%s: bad adapter config (%s)", path, je.text);
        return -1;
    }
    int rc = -1;
    const char *why = NULL;
    json_t *r = json_object_get(root, "r"), *alpha = json_object_get(root, "lora_alpha");
    json_t *peft = json_object_get(root, "peft_type"), *tm = json_object_get(root, "target_modules");
    int dora = 0;
    if (!json_is_object(root))
        why = "not a JSON object";
    else if (peft && !(json_is_string(peft) && !strcmp(json_string_value(peft), "LORA")))
        why = "peft_type is not \"LORA\"";
    else if (!json_is_integer(r) || json_integer_value(r) <= 0 || json_integer_value(r) > 65536)
        why = "\"r\" must be an integer in [1, 65536]";
    else if (!json_is_number(alpha))
        why = "\"lora_alpha\" must be a number";
    else if (opt_bool(root, "fan_in_fan_out", &c->fan_in_fan_out))
        why = "\"fan_in_fan_out\" must be true or false";
    else if (opt_bool(root, "use_rslora", &c->use_rslora))
        why = "\"use_rslora\" must be true or false";
    else if (opt_bool(root, "use_dora", &dora) || dora)
        why = "DoRA (use_dora) is not supported";
    else if (!empty_object(root, "rank_pattern") || !empty_object(root, "alpha_pattern"))
        why = "rank_pattern and alpha_pattern are not supported";
    else if (!json_is_array(tm) || json_array_size(tm) == 0 ||
             json_array_size(tm) > LORA_MAX_TARGETS)
        why = "\"target_modules\" must be a list of 1 to 64 module names";
    if (why) {
        set_err(err, n, "%s: bad adapter config (%s)", path, why);
        goto done;
    }
    c->r = (int64_t)json_integer_value(r);
    c->alpha = json_number_value(alpha);
    for (size_t i = 0; i < json_array_size(tm); i++) {
        json_t *e = json_array_get(tm, i);
        if (!json_is_string(e)) {
            set_err(err, n, "%s: bad adapter config (target_modules[%zu] is not a string)", path, i);
            goto done;
        }
        const char *name = json_string_value(e);
        if (!known_module(name)) {
            set_err(err, n, "%s: unknown target module \"%s\" (gplan knows c_attn, c_proj, c_fc, "
                    "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)", path, name);
            goto done;
        }
        c->targets[c->n_targets] = malloc(strlen(name) + 1);
        if (!c->targets[c->n_targets]) {
            set_err(err, n, "%s: out of memory", path);
            goto done;
        }
        strcpy(c->targets[c->n_targets++], name);
    }
    rc = 0;
done:
    json_decref(root);
    return rc;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* "[d0, d1, ...]" of a shape. */
static void shape_str(char *buf, size_t n, int ndim, const int64_t *shape)
{
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (k < n)
        snprintf(buf + k, n - k, "]");
}

/* The plan's weight tensor with checkpoint name `name` (the first, when tied), or -1. */
static int find_weight(const gp_plan *p, const char *name)
{
    for (int i = 0; i < p->n_tensors; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        const char *wn = t->weight_name ? t->weight_name : t->name;
        if (t->kind == GP_TENSOR_WEIGHT && !strcmp(wn, name))
            return i;
    }
    return -1;
}

static int target_listed(const lora_config *c, const char *module)
{
    const char *last = strrchr(module, '.');
    last = last ? last + 1 : module;
    for (int i = 0; i < c->n_targets; i++)
        if (!strcmp(last, c->targets[i]))
            return 1;
    return 0;
}

static int check_shape(const gp_st_tensor *t, int64_t d0, int64_t d1, const char *wname,
                       const gp_plan_tensor *w, int fan, char *err, size_t n)
{
    gp_dtype dt;
    if (!t->supported || gp_st_dtype_supported(t->file_dtype, &dt) || dt == GP_I32) {
        set_err(err, n, "lora: \"%s\": dtype %s, expected F32, F16 or BF16", t->name,
                t->file_dtype);
        return -1;
    }
    if (t->ndim == 2 && t->shape[0] == d0 && t->shape[1] == d1)
        return 0;
    char want[64], have[128], ws[128];
    int64_t wd[2] = {d0, d1};
    shape_str(want, sizeof want, 2, wd);
    shape_str(have, sizeof have, t->ndim > GP_MAX_DIMS ? GP_MAX_DIMS : t->ndim, t->shape);
    shape_str(ws, sizeof ws, w->ndim, w->dims);
    set_err(err, n, "lora: \"%s\": expected shape %s, file has %s (target \"%s\" %s, %s)", t->name,
            want, have, wname, ws, fan ? "fan_in_fan_out" : "not fan_in_fan_out");
    return -1;
}

/* Matches every tensor of the adapter to a plan weight; fills ts[*nt]. */
static int match(const gp_plan *p, const gp_model *m, const lora_config *c, const gp_st_file *f,
                 lora_target *ts, int *nt, char *err, size_t n)
{
    char module[1024], name[1100];
    size_t pre = strlen(LORA_PREFIX);
    *nt = 0;
    for (int i = 0; i < gp_st_count(f); i++) {
        const gp_st_tensor *t = gp_st_get(f, i);
        int is_a = ends_with(t->name, LORA_A_SUFFIX), is_b = ends_with(t->name, LORA_B_SUFFIX);
        size_t len = strlen(t->name), suf = strlen(LORA_A_SUFFIX);
        if (strncmp(t->name, LORA_PREFIX, pre) || (!is_a && !is_b) || len <= pre + suf ||
            len - pre - suf >= sizeof module) {
            set_err(err, n, "lora: %s: \"%s\" is not a LoRA tensor (expected "
                    LORA_PREFIX "<module>" LORA_A_SUFFIX " or " LORA_B_SUFFIX ")",
                    gp_st_path(f), t->name);
            return -1;
        }
        memcpy(module, t->name + pre, len - pre - suf);
        module[len - pre - suf] = 0;
        snprintf(name, sizeof name, LORA_PREFIX "%s%s", module, is_a ? LORA_B_SUFFIX : LORA_A_SUFFIX);
        const gp_st_tensor *other = gp_st_find(f, name);
        if (!other) {
            set_err(err, n, "lora: \"%s\" has no matching \"%s\"", t->name, name);
            return -1;
        }
        if (is_b) /* each pair is handled at its A */
            continue;
        if (!target_listed(c, module)) {
            set_err(err, n, "lora: \"%s\": module \"%s\" is not in target_modules", t->name, module);
            return -1;
        }
        snprintf(name, sizeof name, "%s.weight", module);
        int id = find_weight(p, name);
        if (id >= 0 && !gp_model_weight_data(m, id)) {
            set_err(err, n, "lora: bind the model's weights before applying an adapter");
            return -1;
        }
        if (id < 0) {
            set_err(err, n, "lora: \"%s\": the plan has no weight \"%s\"", t->name, name);
            return -1;
        }
        const gp_plan_tensor *w = &p->tensors[id];
        if (w->ndim != 2 || w->dtype == GP_I32) {
            char ws[128];
            shape_str(ws, sizeof ws, w->ndim, w->dims);
            set_err(err, n, "lora: \"%s\": target \"%s\" is %s %s, expected a 2-dim float weight",
                    t->name, name, gp_dtype_name(w->dtype), ws);
            return -1;
        }
        lora_target *g = &ts[*nt];
        g->id = id;
        g->a = t;
        g->b = other;
        g->out = c->fan_in_fan_out ? w->dims[1] : w->dims[0];
        g->in = c->fan_in_fan_out ? w->dims[0] : w->dims[1];
        if (check_shape(t, c->r, g->in, name, w, c->fan_in_fan_out, err, n) ||
            check_shape(other, g->out, c->r, name, w, c->fan_in_fan_out, err, n))
            return -1;
        (*nt)++;
    }
    if (*nt == 0) {
        set_err(err, n, "lora: %s: no LoRA tensors", gp_st_path(f));
        return -1;
    }
    return 0;
}

static gp_ktensor ktensor(void *data, gp_dtype t, int64_t d0, int64_t d1)
{
    gp_ktensor k;
    memset(&k, 0, sizeof k);
    k.data = data;
    k.dtype = t;
    k.ndim = 2;
    k.ne[0] = d0;
    k.ne[1] = d1;
    k.nb[1] = (int64_t)gp_dtype_size(t);
    k.nb[0] = d1 * k.nb[1];
    return k;
}

/* w (the target's copy, dtype of the plan) += s * delta, delta computed in `scratch`:
 * a f32 [r, in], b f32 [out, r], delta f32 [out, in] (or [in, out] when fan_in_fan_out). */
static int merge_one(const lora_target *g, const lora_config *c, double s, void *w, gp_dtype wt,
                     float *scratch, char *err, size_t n)
{
    int64_t r = c->r;
    float *a = scratch, *b = a + r * g->in, *delta = b + g->out * r;
    if (gp_weights_read(g->a, GP_F32, a, (size_t)(r * g->in) * 4, err, n) ||
        gp_weights_read(g->b, GP_F32, b, (size_t)(g->out * r) * 4, err, n))
        return -1;
    gp_attrs at;
    memset(&at, 0, sizeof at);
    gp_ktensor in[2], out;
    if (c->fan_in_fan_out) { /* delta [in, out] = A^T [in, r] B^T [r, out] */
        in[0] = ktensor(a, GP_F32, r, g->in);
        in[1] = ktensor(b, GP_F32, g->out, r);
        at.i[0] = at.i[1] = 1;
        out = ktensor(delta, GP_F32, g->in, g->out);
    } else { /* delta [out, in] = B [out, r] A [r, in] */
        in[0] = ktensor(b, GP_F32, g->out, r);
        in[1] = ktensor(a, GP_F32, r, g->in);
        out = ktensor(delta, GP_F32, g->out, g->in);
    }
    char why[256];
    if (gp_cpu_check(GP_OP_MATMUL, &at, &out, in, 2, why, sizeof why)) {
        set_err(err, n, "lora: \"%s\": %s", g->a->name, why);
        return -1;
    }
    gp_cpu_compute(GP_OP_MATMUL, &at, &out, in, 2, NULL, 0, 0, 1);
    memset(&at, 0, sizeof at);
    at.f[0] = s;
    gp_cpu_compute(GP_OP_SCALE, &at, &out, &out, 1, NULL, 0, 0, 1);
    gp_ktensor wk = ktensor(w, wt, out.ne[0], out.ne[1]);
    in[0] = wk;
    in[1] = out;
    gp_cpu_compute(GP_OP_ADD, &at, &wk, in, 2, NULL, 0, 0, 1); /* in place into w */
    return 0;
}

static size_t round_up(size_t x, size_t a)
{
    return (x + a - 1) / a * a;
}

/* Reads DIR/adapter_config.json into c and opens DIR/adapter_model.safetensors into *f: the part
 * both modes share. On failure returns -1 with err set; the caller frees c and *f either way. */
static int open_adapter(const char *dir, double scale, lora_config *c, gp_st_file **f, char *err,
                        size_t err_len)
{
    memset(c, 0, sizeof *c);
    *f = NULL;
    if (!isfinite(scale)) {
        set_err(err, err_len, "lora: scale %g is not finite", scale);
        return -1;
    }
    char cpath[4096], wpath[4096];
    snprintf(cpath, sizeof cpath, "%s/adapter_config.json", dir);
    snprintf(wpath, sizeof wpath, "%s/adapter_model.safetensors", dir);
    if (read_config(cpath, c, err, err_len))
        return -1;
    *f = gp_st_open(wpath, err, err_len);
    return *f ? 0 : -1;
}

/* The factor B A is multiplied by: scale * alpha / r, or alpha / sqrt(r) with rslora. */
static double adapter_scale(const lora_config *c, double scale)
{
    return scale * c->alpha / (c->use_rslora ? sqrt((double)c->r) : (double)c->r);
}

int gp_model_apply_lora(gp_model *m, const char *dir, double scale, char *err, size_t err_len)
{
    const gp_plan *p = gp_model_plan(m);
    if (!p || !dir) {
        set_err(err, err_len, "gp_model_apply_lora: no model or adapter folder");
        return -1;
    }
    lora_config c;
    gp_st_file *f;
    lora_target *ts = NULL;
    void *block = NULL, **data = NULL;
    int *ids = NULL;
    float *scratch = NULL;
    int rc = -1, nt = 0;
    if (open_adapter(dir, scale, &c, &f, err, err_len))
        goto done;
    ts = calloc((size_t)gp_st_count(f) + 1, sizeof *ts);
    if (!ts) {
        set_err(err, err_len, "lora: out of memory");
        goto done;
    }
    if (match(p, m, &c, f, ts, &nt, err, err_len))
        goto done;
    /* Plan the memory: the merged copies back to back, and one scratch for the largest delta. */
    size_t bytes = 0, floats = 0;
    for (int k = 0; k < nt; k++) {
        const gp_plan_tensor *w = &p->tensors[ts[k].id];
        bytes = round_up(bytes, LORA_ALIGN) +
                (size_t)(w->dims[0] * w->dims[1]) * gp_dtype_size(w->dtype);
        size_t need = (size_t)(c.r * ts[k].in + ts[k].out * c.r + ts[k].out * ts[k].in);
        if (need > floats)
            floats = need;
    }
    data = calloc((size_t)nt, sizeof *data);
    ids = calloc((size_t)nt, sizeof *ids);
    scratch = malloc(floats * sizeof *scratch);
    if (!data || !ids || !scratch || posix_memalign(&block, LORA_ALIGN, bytes)) {
        block = NULL;
        set_err(err, err_len, "lora: cannot allocate %zu bytes for merged weights", bytes);
        goto done;
    }
    double s = adapter_scale(&c, scale);
    size_t off = 0;
    for (int k = 0; k < nt; k++) {
        const gp_plan_tensor *w = &p->tensors[ts[k].id];
        size_t wb = (size_t)(w->dims[0] * w->dims[1]) * gp_dtype_size(w->dtype);
        off = round_up(off, LORA_ALIGN);
        data[k] = (unsigned char *)block + off;
        ids[k] = ts[k].id;
        memcpy(data[k], gp_model_weight_data(m, ts[k].id), wb);
        if (merge_one(&ts[k], &c, s, data[k], w->dtype, scratch, err, err_len))
            goto done;
        off += wb;
    }
    if (gp_model_adopt_weights(m, block, bytes, ids, data, nt)) {
        set_err(err, err_len, "lora: %s: the model already has an adapter merged (bind the weights "
                "again first)", dir);
        goto done;
    }
    block = NULL;
    rc = 0;
done:
    free(block);
    free(scratch);
    free(ids);
    free(data);
    free(ts);
    gp_st_close(f);
    config_free(&c);
    return rc;
}

/* ---- runtime mode: adapter slots in the plan, bound and rebound between evals ---- */

int gp_lora_is_slot(const char *weight_name)
{
    return weight_name && !strncmp(weight_name, LORA_PREFIX, strlen(LORA_PREFIX)) &&
           (ends_with(weight_name, LORA_A_SUFFIX) || ends_with(weight_name, LORA_B_SUFFIX));
}

/* The plan's adapter slot named `name` (a weight), or -1. */
static int find_slot(const gp_plan *p, const char *name)
{
    int id = find_weight(p, name);
    return id >= 0 && gp_lora_is_slot(name) ? id : -1;
}

/* A float tensor of the file whose shape equals slot w's (2 dims). */
static int check_slot(const gp_st_tensor *t, const gp_plan_tensor *w, char *err, size_t n)
{
    gp_dtype dt;
    if (!t->supported || gp_st_dtype_supported(t->file_dtype, &dt) || dt == GP_I32) {
        set_err(err, n, "lora: \"%s\": dtype %s, expected F32, F16 or BF16", t->name,
                t->file_dtype);
        return -1;
    }
    if (t->ndim == w->ndim && !memcmp(t->shape, w->dims, (size_t)w->ndim * sizeof *w->dims))
        return 0;
    char want[128], have[128];
    shape_str(want, sizeof want, w->ndim, w->dims);
    shape_str(have, sizeof have, t->ndim > GP_MAX_DIMS ? GP_MAX_DIMS : t->ndim, t->shape);
    set_err(err, n, "lora: \"%s\": the plan's slot is %s, file has %s", t->name, want, have);
    return -1;
}

/* Matches every tensor of the adapter to a slot of the plan: ids[k] of tensor k of the file. */
static int match_slots(const gp_plan *p, const lora_config *c, const gp_st_file *f, int *ids,
                       char *err, size_t n)
{
    char module[1024], name[1100];
    size_t pre = strlen(LORA_PREFIX), suf = strlen(LORA_A_SUFFIX);
    for (int i = 0; i < gp_st_count(f); i++) {
        const gp_st_tensor *t = gp_st_get(f, i);
        size_t len = strlen(t->name);
        if (!gp_lora_is_slot(t->name) || len <= pre + suf || len - pre - suf >= sizeof module) {
            set_err(err, n, "lora: %s: \"%s\" is not a LoRA tensor (expected "
                    LORA_PREFIX "<module>" LORA_A_SUFFIX " or " LORA_B_SUFFIX ")",
                    gp_st_path(f), t->name);
            return -1;
        }
        memcpy(module, t->name + pre, len - pre - suf);
        module[len - pre - suf] = 0;
        int is_a = ends_with(t->name, LORA_A_SUFFIX);
        snprintf(name, sizeof name, LORA_PREFIX "%s%s", module, is_a ? LORA_B_SUFFIX : LORA_A_SUFFIX);
        if (!gp_st_find(f, name)) {
            set_err(err, n, "lora: \"%s\" has no matching \"%s\"", t->name, name);
            return -1;
        }
        if (!target_listed(c, module)) {
            set_err(err, n, "lora: \"%s\": module \"%s\" is not in target_modules", t->name, module);
            return -1;
        }
        ids[i] = find_slot(p, t->name);
        if (ids[i] < 0) {
            set_err(err, n, "lora: \"%s\": the plan has no adapter slot of that name (see "
                    "docs/lora.md: the graph declares the targets of runtime mode)", t->name);
            return -1;
        }
        if (check_slot(t, &p->tensors[ids[i]], err, n))
            return -1;
    }
    if (gp_st_count(f) == 0) {
        set_err(err, n, "lora: %s: no LoRA tensors", gp_st_path(f));
        return -1;
    }
    return 0;
}

/* Zeroes every adapter slot: the branches then add exactly 0 (no adapter). */
static void clear_slots(gp_model *m, const gp_plan *p)
{
    for (int i = 0; i < p->n_tensors; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        void *slot = gp_model_adapter_slot(m, i);
        if (slot)
            memset(slot, 0, (size_t)(t->dims[0] * t->dims[1]) * gp_dtype_size(t->dtype));
    }
}

int gp_model_bind_adapter(gp_model *m, const char *dir, double scale, char *err, size_t err_len)
{
    const gp_plan *p = gp_model_plan(m);
    if (!p || !dir) {
        set_err(err, err_len, "gp_model_bind_adapter: no model or adapter folder");
        return -1;
    }
    /* The plan's rank: rows of its first A slot. */
    int64_t rank = 0;
    int first = -1;
    for (int i = 0; i < p->n_tensors && first < 0; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        const char *wn = t->weight_name ? t->weight_name : t->name;
        if (t->kind == GP_TENSOR_WEIGHT && t->ndim == 2 && gp_lora_is_slot(wn) &&
            ends_with(wn, LORA_A_SUFFIX)) {
            first = i;
            rank = t->dims[0];
        }
    }
    if (first < 0) {
        set_err(err, err_len, "lora: plan \"%s\" has no adapter slots (compile the graph with "
                "-D lora_r=R for runtime adapters)", p->graph_name);
        return -1;
    }
    if (!gp_model_adapter_slot(m, first)) {
        set_err(err, err_len, "lora: bind the model's weights before binding an adapter");
        return -1;
    }
    lora_config c;
    gp_st_file *f;
    int *ids = NULL, rc = -1;
    if (open_adapter(dir, scale, &c, &f, err, err_len))
        goto done;
    if (c.r != rank) {
        set_err(err, err_len, "lora: %s: the adapter has rank %lld, the plan's slots rank %lld "
                "(compile with -D lora_r=%lld)", dir, (long long)c.r, (long long)rank,
                (long long)c.r);
        goto done;
    }
    ids = calloc((size_t)gp_st_count(f) + 1, sizeof *ids);
    if (!ids) {
        set_err(err, err_len, "lora: out of memory");
        goto done;
    }
    if (match_slots(p, &c, f, ids, err, err_len))
        goto done;
    /* Everything checked: clear every slot (modules the adapter lacks add nothing), then copy. The
     * scale is folded into B, so the graph's branch is two matmuls and an add. */
    clear_slots(m, p);
    double s = adapter_scale(&c, scale);
    for (int k = 0; k < gp_st_count(f); k++) {
        const gp_plan_tensor *w = &p->tensors[ids[k]];
        void *slot = gp_model_adapter_slot(m, ids[k]);
        size_t bytes = (size_t)(w->dims[0] * w->dims[1]) * gp_dtype_size(w->dtype);
        if (gp_weights_read(gp_st_get(f, k), w->dtype, slot, bytes, err, err_len)) {
            clear_slots(m, p);
            goto done;
        }
        if (ends_with(gp_st_get(f, k)->name, LORA_B_SUFFIX)) {
            gp_attrs at;
            memset(&at, 0, sizeof at);
            at.f[0] = s;
            gp_ktensor b = ktensor(slot, w->dtype, w->dims[0], w->dims[1]);
            gp_cpu_compute(GP_OP_SCALE, &at, &b, &b, 1, NULL, 0, 0, 1);
        }
    }
    rc = 0;
done:
    free(ids);
    gp_st_close(f);
    config_free(&c);
    return rc;
}
