/* PEFT LoRA adapters: reads adapter_config.json and adapter_model.safetensors; merge mode runs a
 * merge plan (gplan-compile --lora-merge) on the CPU kernels, runtime mode fills adapter slots. */
#include "runtime/lora.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cpu/cpu_kernels.h"
#include "weights/filemap.h"
#include "weights/safetensors.h"
#include "weights/weights.h"

#define LORA_PREFIX GP_LORA_PREFIX
#define LORA_A_SUFFIX GP_LORA_A_SUFFIX
#define LORA_B_SUFFIX GP_LORA_B_SUFFIX
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
    struct stat st; /* a FIFO would block jansson's open: what exists must be a regular file */
    if (!stat(path, &st) && gp_file_check(path, err, n))
        return -1;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) {
        if (je.line > 0)
            gp_errf(err, n, "%s: bad adapter config (%s, line %d)", path, je.text, je.line);
        else
            gp_errf(err, n, "%s: bad adapter config (%s)", path, je.text);
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
        gp_errf(err, n, "%s: bad adapter config (%s)", path, why);
        goto done;
    }
    c->r = (int64_t)json_integer_value(r);
    c->alpha = json_number_value(alpha);
    for (size_t i = 0; i < json_array_size(tm); i++) {
        json_t *e = json_array_get(tm, i);
        if (!json_is_string(e)) {
            gp_errf(err, n, "%s: bad adapter config (target_modules[%zu] is not a string)", path, i);
            goto done;
        }
        const char *name = json_string_value(e);
        if (!known_module(name)) {
            gp_errf(err, n, "%s: unknown target module \"%s\" (gplan knows c_attn, c_proj, c_fc, "
                    "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)", path, name);
            goto done;
        }
        c->targets[c->n_targets] = malloc(strlen(name) + 1);
        if (!c->targets[c->n_targets]) {
            gp_errf(err, n, "%s: out of memory", path);
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

/* Reads DIR/adapter_config.json into c and opens DIR/adapter_model.safetensors into *f: the part
 * both modes share. On failure returns -1 with err set; the caller frees c and *f either way. */
static int open_adapter(const char *dir, double scale, lora_config *c, gp_st_file **f, char *err,
                        size_t err_len)
{
    memset(c, 0, sizeof *c);
    *f = NULL;
    if (!isfinite(scale)) {
        gp_errf(err, err_len, "lora: scale %g is not finite", scale);
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

/* Splits adapter tensor t's name "base_model.model.<module>.lora_{A,B}.weight" into module[n];
 * checks that its partner is in the file and that the config targets the module. */
static int adapter_module(const gp_st_file *f, const gp_st_tensor *t, const lora_config *c,
                          char *module, size_t n, int *is_a, char *err, size_t err_len)
{
    char name[1100];
    size_t pre = strlen(LORA_PREFIX), suf = strlen(LORA_A_SUFFIX), len = strlen(t->name);
    if (!gp_lora_is_slot(t->name) || len <= pre + suf || len - pre - suf >= n ||
        len - pre - suf + 100 >= sizeof name) {
        gp_errf(err, err_len, "lora: %s: \"%s\" is not a LoRA tensor (expected "
                LORA_PREFIX "<module>" LORA_A_SUFFIX " or " LORA_B_SUFFIX ")", gp_st_path(f),
                t->name);
        return -1;
    }
    memcpy(module, t->name + pre, len - pre - suf);
    module[len - pre - suf] = 0;
    *is_a = ends_with(t->name, LORA_A_SUFFIX);
    snprintf(name, sizeof name, LORA_PREFIX "%s%s", module, *is_a ? LORA_B_SUFFIX : LORA_A_SUFFIX);
    if (!gp_st_find(f, name)) {
        gp_errf(err, err_len, "lora: \"%s\" has no matching \"%s\"", t->name, name);
        return -1;
    }
    if (!target_listed(c, module)) {
        gp_errf(err, err_len, "lora: \"%s\": module \"%s\" is not in target_modules", t->name,
                module);
        return -1;
    }
    return 0;
}

/* ---- merge mode: the merge plan (gplan-compile --lora-merge) run on the CPU kernels ---- */

/* One target of the merge plan: tensor ids in the merge plan, its three nodes, the model's
 * weight, and the adapter's tensors (NULL while the adapter does not cover the target). */
typedef struct {
    int w, a, b, out;          /* merge plan tensors: W, A [R, in], B [out, R], the merged W */
    int nodes[3];              /* matmul, mul, add */
    int fan;                   /* W is [in, out] (Conv1D): delta = (B A)^T */
    int model_id;              /* W in the model's plan, or -1 until matched */
    const gp_st_tensor *ta, *tb;
} merge_target;

struct gp_lora_merge {
    gp_model *m;
    gp_plan *p;                /* the merge plan */
    char *path;                /* its file name, for messages */
    merge_target *ts;          /* [n_targets] in schedule order */
    int n_targets, n_present;  /* targets, and those the adapter covers */
    int *node_target;          /* [p->n_nodes] index into ts */
    int64_t rank;
    unsigned char *arena;      /* [regions[ARENA].size] the deltas, reused by liveness */
    unsigned char *io;         /* [regions[IO].size] A, B, lora_scale and the merged weights */
    gp_ktensor *kt;            /* [p->n_tensors] every tensor as the kernels see it */
    int *ids;                  /* [n_present] model weight ids of the merged targets */
    void **data;               /* [n_present] their merged bytes (in io) */
    int ran;
};

static int not_merge_plan(const char *path, char *err, size_t n, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    gp_errf(err, n, "%s: not a LoRA merge plan (%s; make one with gplan-compile MODEL.gplan "
            "-D lora_r=R --lora-merge -o FILE)", path, why);
    return -1;
}

/* The node that produces `tensor` when its op is `op`, else -1. */
static int producer_of(const gp_plan *p, int tensor, gp_op op)
{
    int s = p->tensors[tensor].producer;
    return s >= 0 && p->nodes[s].op == op ? s : -1;
}

/* Recognizes the merge plan's targets: per add node, add(W, mul(matmul(..A, B..), lora_scale)),
 * as planner/lora_merge.c builds them; every node belongs to exactly one target. */
static int parse_merge_plan(gp_lora_merge *g, char *err, size_t n)
{
    const gp_plan *p = g->p;
    const char *path = g->path;
    int scale = -1;
    for (int i = 0; i < p->n_tensors; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        if (!strcmp(t->name, GP_LORA_SCALE_INPUT) && t->kind == GP_TENSOR_INPUT &&
            t->dtype == GP_F32 && t->ndim == 1 && t->dims[0] == 1)
            scale = i;
    }
    if (scale < 0)
        return not_merge_plan(path, err, n, "no input \"" GP_LORA_SCALE_INPUT "\" f32 [1]");
    for (int i = 0; i < p->n_tensors; i++)
        if (p->tensors[i].view_src >= 0)
            return not_merge_plan(path, err, n, "tensor \"%s\" is a view", p->tensors[i].name);
    if (p->n_syms)
        return not_merge_plan(path, err, n, "it has symbolic dims");
    g->ts = calloc((size_t)p->n_nodes / 3 + 1, sizeof *g->ts);
    g->node_target = malloc(((size_t)p->n_nodes + 1) * sizeof *g->node_target);
    if (!g->ts || !g->node_target) {
        gp_errf(err, n, "lora: out of memory");
        return -1;
    }
    for (int i = 0; i < p->n_nodes; i++)
        g->node_target[i] = -1;
    for (int i = 0; i < p->n_nodes; i++) {
        const gp_plan_node *add = &p->nodes[i];
        if (add->op != GP_OP_ADD)
            continue;
        int w = add->inputs[0], s = add->n_inputs == 2 ? add->inputs[1] : -1;
        int mul = s >= 0 ? producer_of(p, s, GP_OP_MUL) : -1;
        int mm = mul >= 0 && p->nodes[mul].inputs[1] == scale
                     ? producer_of(p, p->nodes[mul].inputs[0], GP_OP_MATMUL) : -1;
        const gp_plan_tensor *tw = &p->tensors[w], *to = &p->tensors[add->output];
        if (mm < 0 || tw->kind != GP_TENSOR_WEIGHT || tw->ndim != 2 ||
            to->kind != GP_TENSOR_OUTPUT || to->dtype != tw->dtype ||
            memcmp(to->dims, tw->dims, sizeof tw->dims))
            return not_merge_plan(path, err, n, "node %d (add -> %s) is not add(W, "
                                  "mul(matmul(A, B), " GP_LORA_SCALE_INPUT "))", i, to->name);
        const gp_plan_node *nm = &p->nodes[mm];
        int fan = nm->attrs.i[GP_MATMUL_TA] != 0;
        int a = fan ? nm->inputs[0] : nm->inputs[1], b = fan ? nm->inputs[1] : nm->inputs[0];
        const gp_plan_tensor *ta = &p->tensors[a], *tb = &p->tensors[b];
        char want[1100];
        snprintf(want, sizeof want, LORA_PREFIX "%.*s" LORA_A_SUFFIX,
                 (int)(strlen(tw->name) - (ends_with(tw->name, ".weight") ? 7 : 0)), tw->name);
        int shapes = ta->ndim == 2 && tb->ndim == 2 && ta->dims[0] == tb->dims[1] &&
                     (fan ? tw->dims[0] == ta->dims[1] && tw->dims[1] == tb->dims[0]
                          : tw->dims[0] == tb->dims[0] && tw->dims[1] == ta->dims[1]);
        if (nm->attrs.i[GP_MATMUL_TA] != nm->attrs.i[GP_MATMUL_TB] ||
            ta->kind != GP_TENSOR_INPUT || tb->kind != GP_TENSOR_INPUT ||
            !ends_with(tw->name, ".weight") || strcmp(ta->name, want) || !gp_lora_is_slot(tb->name) ||
            !ends_with(tb->name, LORA_B_SUFFIX) ||
            strncmp(ta->name, tb->name, strlen(ta->name) - strlen(LORA_A_SUFFIX)) || !shapes)
            return not_merge_plan(path, err, n, "node %d (matmul -> %s) does not compute the "
                                  "delta of \"%s\" from its lora_A and lora_B", mm,
                                  p->tensors[nm->output].name, tw->name);
        if (g->n_targets && ta->dims[0] != g->rank)
            return not_merge_plan(path, err, n, "targets of ranks %lld and %lld",
                                  (long long)g->rank, (long long)ta->dims[0]);
        g->rank = ta->dims[0];
        int nodes[3] = {mm, mul, i};
        for (int k = 0; k < 3; k++) {
            if (g->node_target[nodes[k]] >= 0)
                return not_merge_plan(path, err, n, "node %d belongs to two targets", nodes[k]);
            g->node_target[nodes[k]] = g->n_targets;
        }
        merge_target *mt = &g->ts[g->n_targets++];
        mt->w = w;
        mt->a = a;
        mt->b = b;
        mt->out = add->output;
        memcpy(mt->nodes, nodes, sizeof nodes);
        mt->fan = fan;
        mt->model_id = -1;
    }
    for (int i = 0; i < p->n_nodes; i++)
        if (g->node_target[i] < 0)
            return not_merge_plan(path, err, n, "node %d (%s -> %s) is not part of a target", i,
                                  gp_op_get(p->nodes[i].op)->name,
                                  p->tensors[p->nodes[i].output].name);
    if (!g->n_targets)
        return not_merge_plan(path, err, n, "no targets");
    return 0;
}

/* The target whose A (is_a) or B input is named `name`, or -1. */
static int find_target(const gp_lora_merge *g, const char *name, int is_a)
{
    for (int k = 0; k < g->n_targets; k++)
        if (!strcmp(g->p->tensors[is_a ? g->ts[k].a : g->ts[k].b].name, name))
            return k;
    return -1;
}

/* Matches every adapter tensor to an input of the merge plan (name and shape) and every covered
 * target to a weight of the model (checkpoint name, dtype, shape). */
static int match_merge(gp_lora_merge *g, const lora_config *c, const gp_st_file *f, char *err,
                       size_t n)
{
    const gp_plan *p = g->p, *mp = gp_model_plan(g->m);
    char module[1024];
    for (int i = 0; i < gp_st_count(f); i++) {
        const gp_st_tensor *t = gp_st_get(f, i);
        int is_a;
        if (adapter_module(f, t, c, module, sizeof module, &is_a, err, n))
            return -1;
        int k = find_target(g, t->name, is_a);
        if (k < 0) {
            gp_errf(err, n, "lora: \"%s\": the merge plan %s has no target \"%s.weight\" (its "
                    "targets are the adapter weights the graph declares with -D lora_r=R)",
                    t->name, g->path, module);
            return -1;
        }
        merge_target *mt = &g->ts[k];
        const gp_plan_tensor *in = &p->tensors[is_a ? mt->a : mt->b], *w = &p->tensors[mt->w];
        gp_dtype dt;
        if (!t->supported || gp_st_dtype_supported(t->file_dtype, &dt) || dt == GP_I32) {
            gp_errf(err, n, "lora: \"%s\": dtype %s, expected F32, F16 or BF16", t->name,
                    t->file_dtype);
            return -1;
        }
        if (t->ndim != 2 || t->shape[0] != in->dims[0] || t->shape[1] != in->dims[1]) {
            char want[64], have[128], ws[64];
            shape_str(want, sizeof want, 2, in->dims);
            shape_str(have, sizeof have, t->ndim > GP_MAX_DIMS ? GP_MAX_DIMS : t->ndim, t->shape);
            shape_str(ws, sizeof ws, 2, w->dims);
            gp_errf(err, n, "lora: \"%s\": expected shape %s, file has %s (target \"%s\" %s, %s)",
                    t->name, want, have, w->name, ws,
                    mt->fan ? "Conv1D [in, out]" : "Linear [out, in]");
            return -1;
        }
        if (is_a)
            mt->ta = t;
        else
            mt->tb = t;
    }
    if (gp_st_count(f) == 0) {
        gp_errf(err, n, "lora: %s: no LoRA tensors", gp_st_path(f));
        return -1;
    }
    for (int k = 0; k < g->n_targets; k++) {
        merge_target *mt = &g->ts[k];
        if (!mt->ta)
            continue;
        const gp_plan_tensor *w = &p->tensors[mt->w];
        int id = find_weight(mp, w->name);
        const gp_plan_tensor *mw = id >= 0 ? &mp->tensors[id] : NULL;
        if (!mw || mw->dtype != w->dtype || mw->ndim != 2 ||
            memcmp(mw->dims, w->dims, sizeof w->dims)) {
            char ws[64], ms[64] = "", has[128] = "has no such weight";
            shape_str(ws, sizeof ws, 2, w->dims);
            if (mw) {
                shape_str(ms, sizeof ms, mw->ndim, mw->dims);
                snprintf(has, sizeof has, "has it as %s %s", gp_dtype_name(mw->dtype), ms);
            }
            gp_errf(err, n, "lora: merge plan %s: \"%s\" is %s %s, but the model's plan \"%s\" "
                    "%s (compile both from the same graph and parameters)", g->path, w->name,
                    gp_dtype_name(w->dtype), ws, mp->graph_name, has);
            return -1;
        }
        if (!gp_model_weight_data(g->m, id)) {
            gp_errf(err, n, "lora: bind the model's weights before applying an adapter");
            return -1;
        }
        mt->model_id = id;
        g->n_present++;
    }
    return 0;
}

static void *alloc_region(const gp_plan_region *r)
{
    void *p = NULL;
    size_t align = r->alignment < LORA_ALIGN ? LORA_ALIGN : (size_t)r->alignment;
    size_t size = r->size > 0 ? (size_t)r->size : align;
    if (posix_memalign(&p, align, size))
        return NULL;
    memset(p, 0, size);
    return p;
}

/* Tensor i as the kernels see it: its planned region and offset, or for W the model's bytes. */
static gp_ktensor plan_ktensor(const gp_lora_merge *g, int i)
{
    const gp_plan_tensor *t = &g->p->tensors[i];
    gp_ktensor k;
    memset(&k, 0, sizeof k);
    k.dtype = t->dtype;
    k.ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) {
        k.ne[d] = t->dims[d];
        k.nb[d] = t->stride[d] * (int64_t)gp_dtype_size(t->dtype);
    }
    if (t->region == GP_REGION_ARENA)
        k.data = g->arena + t->offset;
    else if (t->region == GP_REGION_IO)
        k.data = g->io + t->offset;
    return k;
}

void gp_lora_merge_free(gp_lora_merge *g)
{
    if (!g)
        return;
    gp_plan_free(g->p);
    free(g->path);
    free(g->ts);
    free(g->node_target);
    free(g->arena);
    free(g->io);
    free(g->kt);
    free(g->ids);
    free(g->data);
    free(g);
}

gp_lora_merge *gp_lora_merge_new(gp_model *m, const char *dir, const char *merge_plan,
                                 double scale, char *err, size_t err_len)
{
    const gp_plan *mp = gp_model_plan(m);
    if (!mp || !dir || !merge_plan) {
        gp_errf(err, err_len, "gp_lora_merge_new: no model, adapter folder or merge plan");
        return NULL;
    }
    lora_config c;
    gp_st_file *f = NULL;
    gp_lora_merge *g = calloc(1, sizeof *g);
    int ok = 0;
    memset(&c, 0, sizeof c);
    if (!g || !(g->path = malloc(strlen(merge_plan) + 1))) {
        gp_errf(err, err_len, "lora: out of memory");
        goto done;
    }
    strcpy(g->path, merge_plan);
    g->m = m;
    if (gp_plan_load(merge_plan, &g->p, err, err_len) || parse_merge_plan(g, err, err_len) ||
        open_adapter(dir, scale, &c, &f, err, err_len))
        goto done;
    if (c.r != g->rank) {
        gp_errf(err, err_len, "lora: %s: the adapter has rank %lld, the merge plan %s rank %lld "
                "(compile it with -D lora_r=%lld)", dir, (long long)c.r, merge_plan,
                (long long)g->rank, (long long)c.r);
        goto done;
    }
    if (match_merge(g, &c, f, err, err_len))
        goto done;
    const gp_plan *p = g->p;
    g->kt = calloc((size_t)p->n_tensors, sizeof *g->kt);
    g->ids = calloc((size_t)g->n_present + 1, sizeof *g->ids);
    g->data = calloc((size_t)g->n_present + 1, sizeof *g->data);
    g->arena = alloc_region(&p->regions[GP_REGION_ARENA]);
    g->io = alloc_region(&p->regions[GP_REGION_IO]);
    if (!g->kt || !g->ids || !g->data || !g->arena || !g->io) {
        gp_errf(err, err_len, "lora: cannot allocate the merge plan's arena (%lld bytes) and io "
                "(%lld bytes)", (long long)p->regions[GP_REGION_ARENA].size,
                (long long)p->regions[GP_REGION_IO].size);
        goto done;
    }
    for (int i = 0; i < p->n_tensors; i++)
        g->kt[i] = plan_ktensor(g, i);
    /* Inputs: lora_scale, then A and B of every covered target (converted to the plan's dtype). */
    double s = adapter_scale(&c, scale);
    for (int i = 0; i < p->n_tensors; i++)
        if (!strcmp(p->tensors[i].name, GP_LORA_SCALE_INPUT))
            *(float *)g->kt[i].data = (float)s;
    int np = 0;
    for (int k = 0; k < g->n_targets; k++) {
        merge_target *mt = &g->ts[k];
        if (!mt->ta)
            continue;
        g->kt[mt->w].data = (void *)gp_model_weight_data(m, mt->model_id);
        const gp_plan_tensor *ta = &p->tensors[mt->a], *tb = &p->tensors[mt->b];
        if (gp_weights_read(mt->ta, ta->dtype, g->kt[mt->a].data, (size_t)ta->size, err,
                            err_len) ||
            gp_weights_read(mt->tb, tb->dtype, g->kt[mt->b].data, (size_t)tb->size, err, err_len))
            goto done;
        g->ids[np] = mt->model_id;
        g->data[np++] = g->kt[mt->out].data;
        /* Every node is checked before any runs (shapes, dtypes, layouts as the kernels see them). */
        for (int j = 0; j < 3; j++) {
            const gp_plan_node *nd = &p->nodes[mt->nodes[j]];
            gp_ktensor in[GP_MAX_INPUTS];
            int unplaced = !g->kt[nd->output].data;
            for (int q = 0; q < nd->n_inputs; q++) {
                in[q] = g->kt[nd->inputs[q]];
                unplaced |= !in[q].data;
            }
            if (unplaced) { /* e.g. a state tensor: nothing a merge plan has */
                not_merge_plan(merge_plan, err, err_len, "node %d (%s -> %s) uses a tensor "
                               "outside the arena, io and the target's W", mt->nodes[j],
                               gp_op_get(nd->op)->name, p->tensors[nd->output].name);
                goto done;
            }
            char why[256];
            if (gp_cpu_check(nd->op, &nd->attrs, &g->kt[nd->output], in, nd->n_inputs, why,
                             sizeof why)) {
                gp_errf(err, err_len, "lora: merge plan %s: node %d (%s -> %s): %s", merge_plan,
                        mt->nodes[j], gp_op_get(nd->op)->name, p->tensors[nd->output].name, why);
                goto done;
            }
        }
    }
    ok = 1;
done:
    gp_st_close(f);
    config_free(&c);
    if (!ok) {
        gp_lora_merge_free(g);
        return NULL;
    }
    return g;
}

int gp_lora_merge_run(gp_lora_merge *g)
{
    if (!g || g->ran)
        return -1;
    const gp_plan *p = g->p;
    for (int i = 0; i < p->n_nodes; i++) {
        const gp_plan_node *nd = &p->nodes[i];
        if (!g->ts[g->node_target[i]].ta)
            continue; /* a target the adapter does not cover: its weight stays as it is */
        gp_ktensor in[GP_MAX_INPUTS];
        for (int q = 0; q < nd->n_inputs; q++)
            in[q] = g->kt[nd->inputs[q]];
        void *ws = nd->workspace >= 0 ? g->kt[nd->workspace].data : NULL;
        size_t ws_size = nd->workspace >= 0 ? (size_t)p->tensors[nd->workspace].size : 0;
        gp_cpu_compute(nd->op, &nd->attrs, &g->kt[nd->output], in, nd->n_inputs, ws, ws_size, 0,
                       1);
    }
    g->ran = 1;
    return 0;
}

int gp_lora_merge_finish(gp_lora_merge *g, char *err, size_t err_len)
{
    if (!g || !g->ran) {
        gp_errf(err, err_len, "gp_lora_merge_finish: the merge has not run");
        return -1;
    }
    if (gp_model_adopt_weights(g->m, g->io, (size_t)g->p->regions[GP_REGION_IO].size, g->ids,
                               g->data, g->n_present)) {
        gp_errf(err, err_len, "lora: the model already has an adapter merged (bind the weights "
                "again first)");
        return -1;
    }
    g->io = NULL; /* the model owns it now */
    return 0;
}

void gp_lora_merge_info(const gp_lora_merge *g, int *n_targets, int *n_merged, int64_t *arena,
                        int64_t *io)
{
    *n_targets = g ? g->n_targets : 0;
    *n_merged = g ? g->n_present : 0;
    *arena = g ? g->p->regions[GP_REGION_ARENA].size : 0;
    *io = g ? g->p->regions[GP_REGION_IO].size : 0;
}

int gp_model_apply_lora(gp_model *m, const char *dir, const char *merge_plan, double scale,
                        char *err, size_t err_len)
{
    if (!gp_model_plan(m) || !dir || !merge_plan) {
        gp_errf(err, err_len, "gp_model_apply_lora: no model, adapter folder or merge plan");
        return -1;
    }
    gp_lora_merge *g = gp_lora_merge_new(m, dir, merge_plan, scale, err, err_len);
    int rc = g && !gp_lora_merge_run(g) && !gp_lora_merge_finish(g, err, err_len) ? 0 : -1;
    gp_lora_merge_free(g);
    return rc;
}

/* ---- runtime mode: adapter slots in the plan, bound and rebound between evals ---- */

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
        gp_errf(err, n, "lora: \"%s\": dtype %s, expected F32, F16 or BF16", t->name,
                t->file_dtype);
        return -1;
    }
    if (t->ndim == w->ndim && !memcmp(t->shape, w->dims, (size_t)w->ndim * sizeof *w->dims))
        return 0;
    char want[128], have[128];
    shape_str(want, sizeof want, w->ndim, w->dims);
    shape_str(have, sizeof have, t->ndim > GP_MAX_DIMS ? GP_MAX_DIMS : t->ndim, t->shape);
    gp_errf(err, n, "lora: \"%s\": the plan's slot is %s, file has %s", t->name, want, have);
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
            gp_errf(err, n, "lora: %s: \"%s\" is not a LoRA tensor (expected "
                    LORA_PREFIX "<module>" LORA_A_SUFFIX " or " LORA_B_SUFFIX ")",
                    gp_st_path(f), t->name);
            return -1;
        }
        memcpy(module, t->name + pre, len - pre - suf);
        module[len - pre - suf] = 0;
        int is_a = ends_with(t->name, LORA_A_SUFFIX);
        snprintf(name, sizeof name, LORA_PREFIX "%s%s", module, is_a ? LORA_B_SUFFIX : LORA_A_SUFFIX);
        if (!gp_st_find(f, name)) {
            gp_errf(err, n, "lora: \"%s\" has no matching \"%s\"", t->name, name);
            return -1;
        }
        if (!target_listed(c, module)) {
            gp_errf(err, n, "lora: \"%s\": module \"%s\" is not in target_modules", t->name, module);
            return -1;
        }
        ids[i] = find_slot(p, t->name);
        if (ids[i] < 0) {
            gp_errf(err, n, "lora: \"%s\": the plan has no adapter slot of that name (see "
                    "docs/lora.md: the graph declares the targets of runtime mode)", t->name);
            return -1;
        }
        if (check_slot(t, &p->tensors[ids[i]], err, n))
            return -1;
    }
    if (gp_st_count(f) == 0) {
        gp_errf(err, n, "lora: %s: no LoRA tensors", gp_st_path(f));
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
        gp_errf(err, err_len, "gp_model_bind_adapter: no model or adapter folder");
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
        gp_errf(err, err_len, "lora: plan \"%s\" has no adapter slots (compile the graph with "
                "-D lora_r=R for runtime adapters)", p->graph_name);
        return -1;
    }
    if (!gp_model_adapter_slot(m, first)) {
        gp_errf(err, err_len, "lora: bind the model's weights before binding an adapter");
        return -1;
    }
    lora_config c;
    gp_st_file *f;
    int *ids = NULL, rc = -1;
    if (open_adapter(dir, scale, &c, &f, err, err_len))
        goto done;
    if (c.r != rank) {
        gp_errf(err, err_len, "lora: %s: the adapter has rank %lld, the plan's slots rank %lld "
                "(compile with -D lora_r=%lld)", dir, (long long)c.r, (long long)rank,
                (long long)c.r);
        goto done;
    }
    ids = calloc((size_t)gp_st_count(f) + 1, sizeof *ids);
    if (!ids) {
        gp_errf(err, err_len, "lora: out of memory");
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
            at.f[GP_SCALE_FACTOR] = s;
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
