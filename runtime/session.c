/* Models (a plan plus its host weights) and sessions (the extras block, the host io block, the
 * runtime dims and a backend instance): everything is allocated at creation, so an eval allocates
 * nothing. Implements include/gplan/gplan.h. */
#include "gplan/gplan.h"

#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_kernels.h"
#include "cpu/quant.h"
#include "cpu/threadpool.h"
#include "plan/plan.h"
#include "runtime/backend.h"
#include "runtime/lora.h"
#include "runtime/split.h"
#include "weights/weights.h"

#define GP_SESSION_ERR_BYTES 1024
#define GP_HOST_ALIGN 64 /* host blocks start on a cache line at least */

struct gp_model {
    gp_plan *plan;
    char *name;                /* the plan file name, for messages */
    gp_weights *ckpt;          /* the open (memory-mapped) checkpoint, or NULL */
    void *weight_block;        /* converted or generated weights, one allocation, or NULL */
    void *lora_block;          /* weights with a LoRA adapter merged (runtime/lora.c), or NULL */
    /* [n_devices * n_tensors]: device r's host bytes of weight i at [r * n_tensors + i] (the same
     * pointer on every device unless the weight is split); NULL for other tensors */
    const void **weight_data;
    int weights_bound;
    int64_t adapter_version; /* bumped whenever an adapter slot is handed out for writing */
    int64_t bytes_mapped, bytes_loaded;
    int tokens, positions, logits; /* tensor ids, or -1 */
    int rows;                  /* the rows input (get_rows of an activation before the LM head:
                                  which tokens' logits are computed), or -1 */
    int64_t vocab, context;
    int *io_ids;               /* [n_io] the inputs and outputs, in tensor order: what the calls
                                  by name and each eval's input copies go over (not all the
                                  plan's tensors) */
    int n_io;
};

typedef void (*gp_mark_fn)(int in_eval);

/* One device of a tensor-parallel session: its backend instance, io block and last error. */
typedef struct {
    gp_backend_init init;    /* what its instance was made from (create runs on its thread) */
    void *ctx;
    unsigned char *io;       /* rank 0: the session's io; others their own copy */
    int rc;
    char err[GP_SESSION_ERR_BYTES - 64]; /* room for the session's "device R: " prefix */
} gp_rank;

struct gp_session {
    const gp_model *m;
    const gp_plan *p;
    const gp_backend_ops *ops;
    gp_rank *ranks;          /* [n_devices] */
    void *comm;              /* the backend's communicator when n_devices > 1, else NULL */
    gp_threadpool *rank_threads; /* n_devices threads, rank r runs on thread r; NULL for one */
    unsigned char *extras;   /* [regions[EXTRAS].size] records of every tensor */
    unsigned char *io;       /* [regions[IO].size] host inputs and outputs at plan offsets */
    int64_t *sym_values;     /* [n_syms] current runtime dims */
    /* The records and the shape checks depend on the dims alone: they are redone only when the
     * dims differ from those of the last eval that passed every check. */
    int64_t *checked_syms;   /* [n_syms] the dims of that eval */
    int checked;             /* 1: the records and shape checks hold for checked_syms */
    int *index_nodes;        /* [n_nodes] nodes whose index values are checked at every eval:
                                one per (op, index tensor, bound), in schedule order */
    int n_index_nodes;
    gp_mark_fn mark;         /* the allocation shim's eval marker, or NULL */
    int *slots;              /* [n_slots] LoRA adapter slot weights, reloaded into the backend
                                when the model's adapter_version moves (backends that copy) */
    int n_slots;
    int64_t adapter_version; /* the model's when the slots were last copied */
    int64_t evals;
    char err[GP_SESSION_ERR_BYTES];
};

/* ---- helpers ---- */

static void *alloc_aligned(size_t align, size_t size)
{
    void *p = NULL;
    if (align < GP_HOST_ALIGN)
        align = GP_HOST_ALIGN;
    size = (size + align - 1) / align * align;
    if (size == 0)
        size = align;
    if (posix_memalign(&p, align, size))
        return NULL;
    memset(p, 0, size);
    return p;
}

static int root_of(const gp_plan *p, int id)
{
    while (p->tensors[id].view_src >= 0)
        id = p->tensors[id].view_src;
    return id;
}

/* -1 when the product overflows (possible: a stride-0 tensor spans few bytes at any dims). */
static int64_t numel_at_bounds(const gp_plan_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->dims[d] < 0 || (t->dims[d] != 0 && n > INT64_MAX / t->dims[d]))
            return -1;
        n *= t->dims[d];
    }
    return n;
}

/* ---- model ---- */

/* Views must be outputs of view ops on their source with attributes that match the plan, so the
 * runtime's recomputation (views.c) stays inside the storage the loader checked. */
static int check_views(const gp_plan *p, char *why, size_t n)
{
    for (int i = 0; i < p->n_tensors; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        if (t->view_src < 0)
            continue;
        const gp_plan_node *nd = t->producer >= 0 ? &p->nodes[t->producer] : NULL;
        const gp_op_info *info = nd ? gp_op_get(nd->op) : NULL;
        if (!nd || !info || !info->is_view || nd->output != i || nd->inputs[0] != t->view_src) {
            gp_errf(why, n, "view %s is not the output of a view op on its source", t->name);
            return -1;
        }
        const gp_plan_tensor *s = &p->tensors[t->view_src];
        int64_t es = (int64_t)gp_dtype_size(s->dtype);
        int ok = t->dtype == s->dtype;
        switch (nd->op) {
        case GP_OP_PERMUTE: {
            int seen[GP_MAX_DIMS] = {0};
            ok = ok && t->ndim == s->ndim && t->view_offset == 0;
            for (int d = 0; ok && d < t->ndim; d++) {
                int64_t a = nd->attrs.i[GP_PERMUTE_AXES + d];
                ok = a >= 0 && a < s->ndim && !seen[a] && t->dims[d] == s->dims[a] &&
                     t->sym[d] == s->sym[a];
                if (ok)
                    seen[a] = 1;
            }
            break;
        }
        case GP_OP_SLICE: {
            int64_t ax = nd->attrs.i[GP_SLICE_AXIS], start = nd->attrs.i[GP_SLICE_START];
            ok = ok && t->ndim == s->ndim && ax >= 0 && ax < s->ndim && s->sym[ax] < 0 &&
                 start >= 0 && start <= s->dims[ax] - t->dims[ax] &&
                 t->view_offset == start * s->stride[ax] * es; /* <= s's span */
            for (int d = 0; ok && d < t->ndim; d++)
                ok = t->sym[d] == s->sym[d] && (d == ax || t->dims[d] == s->dims[d]);
            break;
        }
        case GP_OP_VIEW:
            ok = ok && t->view_offset == nd->attrs.i[GP_VIEW_OFFSET];
            break;
        case GP_OP_STORE:
            ok = ok && t->ndim == s->ndim && t->view_offset == 0;
            for (int d = 0; ok && d < t->ndim; d++)
                ok = t->dims[d] == s->dims[d] && t->sym[d] == s->sym[d];
            break;
        default: /* reshape: same element count, contiguous source */
            ok = ok && t->view_offset == 0 && numel_at_bounds(t) >= 0 &&
                 numel_at_bounds(t) == numel_at_bounds(s);
            break;
        }
        /* A view must never reach past its source at any runtime dims: its span at the bounds is
         * the largest (strides only shrink with the dims). */
        if (!ok || t->size > s->size - t->view_offset) {
            gp_errf(why, n, "view %s does not match its op %s on %s", t->name, info->name, s->name);
            return -1;
        }
    }
    return 0;
}

/* The input holding indices (token ids, positions) of an op, or -1. */
static int index_input(gp_op op)
{
    switch (op) {
    case GP_OP_GET_ROWS:
    case GP_OP_STORE:
    case GP_OP_ROPE: return 1;
    case GP_OP_ATTENTION: return 3;
    default: return -1;
    }
}

/* Finds the inputs and sizes a language model uses and checks that every index input (read by the
 * host-side checks) lives in the io region. */
static int analyze(gp_model *m, char *why, size_t n)
{
    const gp_plan *p = m->plan;
    m->tokens = m->positions = m->logits = m->rows = -1;
    int store_index = -1; /* the positions of a graph with stores and neither rope nor attention */
    for (int k = 0; k < m->n_io && m->logits < 0; k++)
        if (p->tensors[m->io_ids[k]].kind == GP_TENSOR_OUTPUT)
            m->logits = m->io_ids[k];
    for (int k = 0; k < p->n_nodes; k++) {
        const gp_plan_node *nd = &p->nodes[k];
        int idx = index_input(nd->op);
        if (idx < 0)
            continue;
        int in = nd->inputs[idx], root = root_of(p, in);
        if (p->tensors[root].region != GP_REGION_IO || p->tensors[root].kind != GP_TENSOR_INPUT) {
            gp_errf(why, n, "node %d (%s): index input %s is computed inside the graph; the runtime "
                    "needs ids and positions to be graph inputs", k, gp_op_get(nd->op)->name,
                    p->tensors[in].name);
            return -1;
        }
        if (nd->op == GP_OP_GET_ROWS) {
            /* A table computed by the graph (the final hidden states [T, C]) is read at the rows
             * whose logits are wanted; a weight, state or input table is the embedding. */
            int table = p->tensors[root_of(p, nd->inputs[0])].kind == GP_TENSOR_INTERMEDIATE;
            if (table && m->rows < 0 && root != m->tokens) {
                m->rows = root;
            } else if (!table && m->tokens < 0) {
                m->tokens = root;
                m->vocab = p->tensors[nd->inputs[0]].dims[0];
            }
        } else if (nd->op != GP_OP_STORE && m->positions < 0) {
            m->positions = root; /* rope's or attention's: a ragged batch stores at kv_row */
        } else if (nd->op == GP_OP_STORE && store_index < 0) {
            store_index = root;
        }
        if (nd->op == GP_OP_ATTENTION && !nd->attrs.i[GP_ATTENTION_RING]) { /* a ring limits no context */
            int64_t s = p->tensors[nd->inputs[1]].dims[0];
            if (nd->n_inputs == 6) /* a ragged batch: the positions of one sequence */
                s = p->tensors[nd->inputs[5]].dims[1] * nd->attrs.i[GP_ATTENTION_BLOCK];
            if (m->context == 0 || s < m->context)
                m->context = s;
        }
    }
    if (m->positions < 0)
        m->positions = store_index;
    return check_views(p, why, n);
}

static gp_model *model_from_plan(gp_plan *plan, const char *name, char *err, size_t err_len)
{
    gp_model *m = calloc(1, sizeof *m);
    if (!m) {
        gp_plan_free(plan);
        gp_errf(err, err_len, "%s: out of memory", name);
        return NULL;
    }
    m->plan = plan;
    m->name = malloc(strlen(name) + 1);
    m->weight_data = calloc((size_t)plan->n_devices * (size_t)plan->n_tensors + 1,
                            sizeof *m->weight_data);
    m->io_ids = malloc(sizeof *m->io_ids * ((size_t)plan->n_tensors + 1));
    if (!m->name || !m->weight_data || !m->io_ids) {
        gp_model_free(m);
        gp_errf(err, err_len, "%s: out of memory", name);
        return NULL;
    }
    strcpy(m->name, name);
    for (int i = 0; i < plan->n_tensors; i++)
        if (plan->tensors[i].kind == GP_TENSOR_INPUT || plan->tensors[i].kind == GP_TENSOR_OUTPUT)
            m->io_ids[m->n_io++] = i;
    char why[512];
    if (analyze(m, why, sizeof why)) {
        gp_errf(err, err_len, "%s: cannot run this plan (%s)", name, why);
        gp_model_free(m);
        return NULL;
    }
    int n_weights = 0;
    for (int i = 0; i < plan->n_tensors; i++)
        n_weights += plan->tensors[i].kind == GP_TENSOR_WEIGHT;
    m->weights_bound = n_weights == 0;
    return m;
}

gp_model *gp_model_load(const char *plan_path, char *err, size_t err_len)
{
    gp_plan *plan = NULL;
    if (gp_plan_load(plan_path, &plan, err, err_len))
        return NULL;
    return model_from_plan(plan, plan_path, err, err_len);
}

gp_model *gp_model_load_mem(const void *data, size_t len, const char *name, char *err,
                            size_t err_len)
{
    gp_plan *plan = NULL;
    if (gp_plan_load_mem(data, len, name, &plan, err, err_len))
        return NULL;
    return model_from_plan(plan, name, err, err_len);
}

static void unbind(gp_model *m)
{
    gp_weights_close(m->ckpt);
    m->ckpt = NULL;
    free(m->weight_block);
    m->weight_block = NULL;
    free(m->lora_block);
    m->lora_block = NULL;
    if (m->weight_data)
        memset(m->weight_data, 0,
               (size_t)m->plan->n_devices * (size_t)m->plan->n_tensors * sizeof *m->weight_data);
    m->bytes_mapped = m->bytes_loaded = 0;
    m->weights_bound = 0;
}

void gp_model_free(gp_model *m)
{
    if (!m)
        return;
    unbind(m);
    free(m->weight_data);
    free(m->io_ids);
    free(m->name);
    gp_plan_free(m->plan);
    free(m);
}

static const char *weight_name(const gp_plan_tensor *t)
{
    return t->weight_name ? t->weight_name : t->name;
}

/* An earlier weight tensor with the same checkpoint name, dtype and dims (tied weights share their
 * bytes), or -1. */
static int same_weight(const gp_plan *p, int i)
{
    const gp_plan_tensor *t = &p->tensors[i];
    for (int j = 0; j < i; j++) {
        const gp_plan_tensor *u = &p->tensors[j];
        if (u->kind == GP_TENSOR_WEIGHT && !strcmp(weight_name(u), weight_name(t)) &&
            u->dtype == t->dtype && u->ndim == t->ndim &&
            !memcmp(u->dims, t->dims, sizeof t->dims) && !memcmp(&u->split, &t->split,
                                                                 sizeof t->split))
            return j;
    }
    return -1;
}

static size_t weight_bytes(const gp_plan_tensor *t)
{
    if (gp_dtype_is_quant(t->dtype)) /* rows of whole blocks (plan_load checked) */
        return (size_t)(numel_at_bounds(t) / t->dims[t->ndim - 1]) *
               gp_dtype_row_bytes(t->dtype, t->dims[t->ndim - 1]);
    return (size_t)numel_at_bounds(t) * gp_dtype_size(t->dtype);
}

/* Fills quantized weight t's bytes at dst (weight_bytes long) from f32 values, made a slice of
 * rows at a time by fill(ctx, first element, count, f32 out). The slice buffer is the one
 * allocation; -1 when it fails. */
typedef int (*f32_source)(void *ctx, int64_t first, int64_t n, float *out);

static int quantize_weight(const gp_plan_tensor *t, void *dst, f32_source fill, void *ctx)
{
    int64_t k = t->dims[t->ndim - 1], rows = numel_at_bounds(t) / k;
    int64_t chunk = (((int64_t)1 << 20) + k - 1) / k; /* ~4 MiB of f32 at a time */
    size_t row = gp_dtype_row_bytes(t->dtype, k);
    float *buf = malloc((size_t)(chunk < rows ? chunk : rows) * (size_t)k * sizeof *buf);
    if (!buf)
        return -1;
    for (int64_t r = 0; r < rows; r += chunk) {
        int64_t nr = rows - r < chunk ? rows - r : chunk;
        if (fill(ctx, r * k, nr * k, buf)) {
            free(buf);
            return -1;
        }
        for (int64_t i = 0; i < nr; i++)
            gp_quant_quantize_row(t->dtype, buf + i * k, (char *)dst + (size_t)(r + i) * row, k);
    }
    free(buf);
    return 0;
}

/* f32_source over a checkpoint tensor already read as f32 whole (reading it in slices would need
 * a reader by range: a load-time cost only). */
static int from_f32(void *ctx, int64_t first, int64_t n, float *out)
{
    memcpy(out, (const float *)ctx + first, (size_t)n * sizeof *out);
    return 0;
}

typedef struct {
    uint64_t seed;
    uint64_t key;
    gp_weights_init init;
} random_src;

static int from_random(void *ctx, int64_t first, int64_t n, float *out)
{
    const random_src *r = ctx;
    gp_weights_random_fill(out, GP_F32, first, n, r->seed, r->key, r->init.center, r->init.scale);
    return 0;
}

static size_t round_up(size_t x, size_t a)
{
    return (x + a - 1) / a * a;
}

/* Device r's weight pointers: [n_tensors], NULL for tensors that are not weights. */
static const void **device_weights(const gp_model *m, int r)
{
    return m->weight_data + (size_t)r * (size_t)m->plan->n_tensors;
}

/* Bytes of weight t's block space: one share per device when split, else one copy. */
static size_t block_bytes(const gp_plan *p, const gp_plan_tensor *t)
{
    size_t copies = t->split.groups ? (size_t)p->n_devices : 1;
    return copies * round_up(weight_bytes(t), GP_HOST_ALIGN);
}

/* Places weight i's bytes for every device: `full` is the checkpoint tensor (plan dtype); a split
 * weight's shares are cut into dst (block_bytes of room), anything else is used as it is. full NULL:
 * dst already holds the bytes (zeros: an adapter slot). */
static void place_weight(gp_model *m, int i, const void *full, unsigned char *dst)
{
    const gp_plan *p = m->plan;
    const gp_plan_tensor *t = &p->tensors[i];
    for (int r = 0; r < p->n_devices; r++) {
        const void *mine = full;
        if (t->split.groups) {
            mine = dst + (size_t)r * round_up(weight_bytes(t), GP_HOST_ALIGN);
            if (full)
                gp_split_copy(t, r, full, (void *)mine);
        } else if (!full) {
            mine = dst;
        }
        device_weights(m, r)[i] = mine;
    }
}

/* Tied weights share their first copy's bytes, on every device. */
static void share_tied(gp_model *m)
{
    const gp_plan *p = m->plan;
    for (int i = 0; i < p->n_tensors; i++) {
        int j = p->tensors[i].kind == GP_TENSOR_WEIGHT ? same_weight(p, i) : -1;
        for (int r = 0; j >= 0 && r < p->n_devices; r++)
            device_weights(m, r)[i] = device_weights(m, r)[j];
    }
}

/* Checkpoint weight d read into `into` (bytes long) as dtype dt: its one tensor, or a stacked
 * weight's slices one after another (weights/weights.h). 0, or -1 with err. */
static int read_weight(const gp_weights *w, const gp_weight_decl *d, gp_dtype dt, void *into,
                       size_t bytes, char *err, size_t err_len)
{
    const gp_st_tensor *one = gp_weights_find(w, d->name);
    if (one)
        return gp_weights_read(one, dt, into, bytes, err, err_len);
    int64_t n = d->shape[0];
    const gp_st_tensor **parts = malloc((size_t)(n > 0 ? n : 1) * sizeof *parts);
    char missing[512];
    int rc = -1;
    if (!parts)
        gp_errf(err, err_len, "weights: \"%s\": out of memory", d->name);
    else if (gp_weights_parts(w, d->name, n, parts, missing, sizeof missing) != n)
        gp_errf(err, err_len, "weights: missing tensor \"%s\"", missing);
    else if (bytes % (size_t)n)
        gp_errf(err, err_len, "weights: \"%s\": %zu bytes for %lld slices", d->name, bytes,
                (long long)n);
    else
        for (int64_t e = (rc = 0); e < n && rc == 0; e++)
            rc = gp_weights_read(parts[e], dt, (char *)into + (size_t)e * (bytes / (size_t)n),
                                 bytes / (size_t)n, err, err_len);
    free(parts);
    return rc;
}

/* The tensor that holds weight d's bytes in place: its one tensor, or a stacked weight's first
 * slice when the slices lie one after another; NULL when none does. *src gets the dtype the
 * checkpoint holds it in. */
static const gp_st_tensor *in_place(const gp_weights *w, const gp_weight_decl *d, gp_dtype *src,
                                    size_t *nbytes)
{
    const gp_st_tensor *one = gp_weights_find(w, d->name);
    if (one) {
        *src = one->dtype;
        *nbytes = one->nbytes;
        return one;
    }
    int64_t n = d->shape[0];
    const gp_st_tensor **parts = malloc((size_t)(n > 0 ? n : 1) * sizeof *parts);
    const gp_st_tensor *t = NULL;
    if (parts && gp_weights_parts(w, d->name, n, parts, NULL, 0) == n) {
        *src = parts[0]->dtype;
        *nbytes = parts[0]->nbytes * (size_t)n;
        if (gp_weights_parts_adjacent(parts, n))
            t = parts[0];
    }
    free(parts);
    return t;
}

int gp_model_bind_weights(gp_model *m, const char *path, char *err, size_t err_len)
{
    if (!m || !path) {
        gp_errf(err, err_len, "gp_model_bind_weights: no model or path");
        return -1;
    }
    unbind(m);
    const gp_plan *p = m->plan;
    gp_weights *w = gp_weights_open(path, err, err_len);
    if (!w)
        return -1;
    gp_weight_decl *decls = calloc((size_t)p->n_tensors + 1, sizeof *decls);
    int *ids = calloc((size_t)p->n_tensors + 1, sizeof *ids);
    unsigned char *convert = calloc((size_t)p->n_tensors + 1, 1);
    char *problems = malloc(4096);
    void *full = NULL; /* a split weight's whole checkpoint tensor, read before it is cut */
    size_t full_max = 0;
    int n = 0, rc = -1;
    if (!decls || !ids || !convert || !problems) {
        gp_errf(err, err_len, "%s: out of memory", path);
        goto done;
    }
    for (int i = 0; i < p->n_tensors; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        if (t->kind != GP_TENSOR_WEIGHT || same_weight(p, i) >= 0 ||
            gp_lora_is_slot(weight_name(t)))
            continue;
        decls[n].name = weight_name(t);
        decls[n].dtype = t->dtype;
        decls[n].ndim = t->ndim;
        memcpy(decls[n].shape, t->dims, sizeof t->dims);
        if (t->split.groups) { /* the checkpoint holds the whole tensor: every device's share */
            decls[n].shape[t->split.dim] = t->split.full;
            size_t fb = (size_t)gp_split_full_numel(t) * gp_dtype_size(t->dtype);
            full_max = fb > full_max ? fb : full_max;
        }
        ids[n++] = i;
    }
    int bad = gp_weights_check(w, decls, n, convert, problems, 4096);
    if (bad) {
        gp_errf(err, err_len, "%s: %d problem%s with the weights the plan declares:\n%s", path, bad,
                bad == 1 ? "" : "s", problems);
        goto done;
    }
    /* Tensors usable in place, and the size of the block for the rest. */
    size_t block = 0;
    for (int k = 0; k < n; k++) {
        const gp_plan_tensor *t = &p->tensors[ids[k]];
        gp_dtype src = t->dtype;
        size_t nbytes = 0;
        const gp_st_tensor *st = in_place(w, &decls[k], &src, &nbytes);
        size_t es = gp_dtype_is_quant(t->dtype) ? 2 : gp_dtype_size(t->dtype); /* f16 scales */
        if (st && !t->split.groups && !convert[k] && src == t->dtype &&
            nbytes == weight_bytes(t) && (uintptr_t)st->data % es == 0) {
            place_weight(m, ids[k], st->data, NULL);
            m->bytes_mapped += (int64_t)nbytes;
        } else {
            block = round_up(block, GP_HOST_ALIGN) + block_bytes(p, t);
        }
    }
    /* LoRA adapter slots (runtime mode) come from gp_model_bind_adapter, not the checkpoint:
     * zeroed (no adapter) in the same block. */
    int n_ckpt = n;
    for (int i = 0; i < p->n_tensors; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        if (t->kind == GP_TENSOR_WEIGHT && same_weight(p, i) < 0 &&
            gp_lora_is_slot(weight_name(t))) {
            ids[n++] = i;
            block = round_up(block, GP_HOST_ALIGN) + block_bytes(p, t);
        }
    }
    if (full_max && !(full = malloc(full_max))) {
        gp_errf(err, err_len, "%s: cannot allocate %zu bytes to cut split weights", path,
                full_max);
        goto done;
    }
    if (block) {
        m->weight_block = alloc_aligned(GP_HOST_ALIGN, block);
        if (!m->weight_block) {
            gp_errf(err, err_len, "%s: cannot allocate %zu bytes for converted weights", path,
                    block);
            goto done;
        }
    }
    size_t off = 0;
    for (int k = 0; k < n; k++) {
        const gp_plan_tensor *t = &p->tensors[ids[k]];
        if (m->weight_data[ids[k]])
            continue;
        off = round_up(off, GP_HOST_ALIGN);
        unsigned char *dst = (unsigned char *)m->weight_block + off;
        unsigned char *into = t->split.groups ? full : dst;
        size_t bytes = t->split.groups
                           ? (size_t)gp_split_full_numel(t) * gp_dtype_size(t->dtype)
                           : weight_bytes(t);
        gp_dtype src = t->dtype;
        size_t src_bytes = 0;
        if (k < n_ckpt)
            (void)in_place(w, &decls[k], &src, &src_bytes);
        if (k < n_ckpt && gp_dtype_is_quant(t->dtype) && !gp_dtype_is_quant(src)) {
            /* A float checkpoint tensor declared quantized (-D wtype=q8_0): f32, then blocks. */
            size_t nf = (size_t)gp_split_full_numel(t) * sizeof(float);
            float *f = malloc(nf ? nf : 1);
            int bad = !f || read_weight(w, &decls[k], GP_F32, f, nf, err, err_len) ||
                      quantize_weight(t, into, from_f32, f);
            if (bad && !f)
                gp_errf(err, err_len, "%s: cannot allocate %zu bytes to quantize %s", path, nf,
                        decls[k].name);
            free(f);
            if (bad)
                goto done;
        } else if (k < n_ckpt &&
                   read_weight(w, &decls[k], t->dtype, into, bytes, err, err_len)) {
            goto done;
        }
        place_weight(m, ids[k], k < n_ckpt ? into : NULL, dst);
        m->bytes_loaded += (int64_t)block_bytes(p, t);
        off += block_bytes(p, t);
    }
    share_tied(m);
    m->ckpt = w;
    w = NULL;
    m->weights_bound = 1;
    rc = 0;
done:
    if (rc) {
        gp_weights_close(w);
        unbind(m);
    }
    free(decls);
    free(ids);
    free(convert);
    free(problems);
    free(full);
    return rc;
}

int gp_model_random_weights(gp_model *m, uint64_t seed, char *err, size_t err_len)
{
    if (!m) {
        gp_errf(err, err_len, "gp_model_random_weights: no model");
        return -1;
    }
    unbind(m);
    const gp_plan *p = m->plan;
    size_t block = 0, full_max = 0;
    for (int i = 0; i < p->n_tensors; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        if (t->kind != GP_TENSOR_WEIGHT || same_weight(p, i) >= 0)
            continue;
        block = round_up(block, GP_HOST_ALIGN) + block_bytes(p, t);
        if (t->split.groups) {
            size_t fb = (size_t)gp_split_full_numel(t) * gp_dtype_size(t->dtype);
            full_max = fb > full_max ? fb : full_max;
        }
    }
    /* A split weight is generated whole, as on one device, then cut: every device count sees the
     * same model. */
    void *full = full_max ? malloc(full_max) : NULL;
    if (block)
        m->weight_block = alloc_aligned(GP_HOST_ALIGN, block);
    if ((block && !m->weight_block) || (full_max && !full)) {
        gp_errf(err, err_len, "%s: cannot allocate %zu bytes for random weights", m->name,
                block + full_max);
        free(full);
        unbind(m);
        return -1;
    }
    size_t off = 0;
    for (int i = 0; i < p->n_tensors; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        if (t->kind != GP_TENSOR_WEIGHT || same_weight(p, i) >= 0)
            continue;
        off = round_up(off, GP_HOST_ALIGN);
        unsigned char *dst = (unsigned char *)m->weight_block + off;
        void *into = t->split.groups ? full : dst;
        int slot = gp_lora_is_slot(weight_name(t)); /* adapter slots stay zero: no adapter */
        if (!slot && gp_dtype_is_quant(t->dtype)) {
            /* The f32 stream of the name, quantized: the same values a float plan gets. */
            random_src r = {seed, gp_weights_name_key(weight_name(t)),
                            gp_weights_init_for(weight_name(t))};
            if (quantize_weight(t, into, from_random, &r)) {
                gp_errf(err, err_len, "%s: cannot allocate memory to quantize random weights",
                        m->name);
                free(full);
                unbind(m);
                return -1;
            }
        } else if (!slot) {
            gp_weights_random_named(into, t->dtype, gp_split_full_numel(t), seed, weight_name(t));
        }
        place_weight(m, i, slot ? NULL : into, dst);
        m->bytes_loaded += (int64_t)block_bytes(p, t);
        off += block_bytes(p, t);
    }
    share_tied(m);
    free(full);
    m->weights_bound = 1;
    return 0;
}

/* ---- the model's side of runtime/lora.h ---- */

const gp_plan *gp_model_plan(const gp_model *m)
{
    return m ? m->plan : NULL;
}

const void *gp_model_weight_data(const gp_model *m, int id)
{
    if (!m || !m->weights_bound || id < 0 || id >= m->plan->n_tensors ||
        m->plan->tensors[id].kind != GP_TENSOR_WEIGHT)
        return NULL;
    return m->weight_data[id];
}

void *gp_model_adapter_slot(gp_model *m, int id)
{
    /* Several devices would need each device's share of the adapter: not supported yet. */
    if (!m || !m->weights_bound || m->plan->n_devices > 1 || id < 0 || id >= m->plan->n_tensors ||
        m->plan->tensors[id].kind != GP_TENSOR_WEIGHT ||
        !gp_lora_is_slot(weight_name(&m->plan->tensors[id])))
        return NULL;
    /* The slots live in weight_block, which the model owns and allocated writable. Sessions copy
     * them again before their next eval. */
    m->adapter_version++;
    return (void *)m->weight_data[id];
}

int gp_model_adopt_weights(gp_model *m, void *block, size_t bytes, const int *ids,
                           void *const *data, int n)
{
    if (!m || m->lora_block || !m->weights_bound || m->plan->n_devices > 1)
        return -1;
    for (int k = 0; k < n; k++) {
        const void *old = m->weight_data[ids[k]];
        for (int i = 0; i < m->plan->n_tensors; i++)
            if (m->weight_data[i] == old)
                m->weight_data[i] = data[k];
    }
    m->lora_block = block;
    m->bytes_loaded += (int64_t)bytes;
    return 0;
}

void gp_model_get_info(const gp_model *m, gp_model_info *o)
{
    memset(o, 0, sizeof *o);
    if (!m)
        return;
    const gp_plan *p = m->plan;
    o->graph_name = p->graph_name;
    for (int k = 0; k < m->n_io; k++) {
        o->n_inputs += p->tensors[m->io_ids[k]].kind == GP_TENSOR_INPUT;
        o->n_outputs += p->tensors[m->io_ids[k]].kind == GP_TENSOR_OUTPUT;
    }
    if (m->tokens >= 0) {
        const gp_plan_tensor *t = &p->tensors[m->tokens];
        o->tokens = t->name;
        o->max_tokens = t->ndim ? t->dims[0] : 1;
        if (t->ndim && t->sym[0] >= 0) {
            o->tokens_dim = p->syms[t->sym[0]].name;
            o->max_tokens = p->syms[t->sym[0]].bound;
        }
    }
    o->positions = m->positions >= 0 ? p->tensors[m->positions].name : NULL;
    o->logits = m->logits >= 0 ? p->tensors[m->logits].name : NULL;
    o->vocab = m->vocab;
    o->context = m->context;
    if (m->rows >= 0) {
        const gp_plan_tensor *t = &p->tensors[m->rows];
        o->rows = t->name;
        o->max_rows = t->ndim ? t->dims[0] : 1;
        if (t->ndim && t->sym[0] >= 0) {
            o->rows_dim = p->syms[t->sym[0]].name;
            o->max_rows = p->syms[t->sym[0]].bound;
        }
    }
    o->weights_mapped = m->bytes_mapped;
    o->weights_loaded = m->bytes_loaded;
    for (int r = 0; r < GP_REGION_COUNT && r < 5; r++)
        o->region_bytes[r] = p->regions[r].size;
}

int gp_model_dim_count(const gp_model *m)
{
    return m ? m->plan->n_syms : 0;
}

int gp_model_dim(const gp_model *m, int i, const char **name, int64_t *bound)
{
    if (!m || i < 0 || i >= m->plan->n_syms)
        return -1;
    if (name)
        *name = m->plan->syms[i].name;
    if (bound)
        *bound = m->plan->syms[i].bound;
    return 0;
}

/* ---- backends ---- */

#ifdef GPLAN_HAVE_CUDA
extern const gp_backend_ops gp_backend_cuda;
#endif

const gp_backend_ops *gp_backend_find(const char *name)
{
    static const gp_backend_ops *const all[] = {
        &gp_backend_cpu,
        &gp_backend_reference,
#ifdef GPLAN_HAVE_CUDA
        &gp_backend_cuda,
#endif
    };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(all[i]->name, name))
            return all[i];
    return NULL;
}

/* ---- sessions ---- */

/* The allocation shim's marker, when one is loaded (tests/alloc/). Looked up once per session. */
static gp_mark_fn find_marker(void)
{
    gp_mark_fn fn = NULL;
    void *self = dlopen(NULL, RTLD_LAZY);
    if (!self)
        return NULL;
    void *sym = dlsym(self, "gp_alloc_shim_eval");
    memcpy(&fn, &sym, sizeof fn); /* POSIX: a data pointer from dlsym converts to a function */
    dlclose(self);
    return fn;
}

/* fn(s, r, n) for every rank r, each on its own device thread (rank 0's is the caller's). */
static void on_ranks(gp_session *s, gp_threadpool_fn fn)
{
    if (s->rank_threads)
        gp_threadpool_run(s->rank_threads, fn, s);
    else
        fn(s, 0, 1);
}

/* 0 when every rank's last call succeeded; else -1 and the first failing rank's message in err,
 * naming the device when there are several. */
static int rank_error(const gp_session *s, char *err, size_t err_len)
{
    for (int r = 0; r < s->p->n_devices; r++) {
        if (!s->ranks[r].rc)
            continue;
        if (s->p->n_devices > 1)
            gp_errf(err, err_len, "device %d: %s", r, s->ranks[r].err);
        else
            gp_errf(err, err_len, "%s", s->ranks[r].err);
        return -1;
    }
    return 0;
}

static void create_rank(void *vs, int ith, int nth)
{
    (void)nth;
    gp_session *s = vs;
    gp_rank *k = &s->ranks[ith];
    k->err[0] = '\0';
    k->rc = s->ops->create(&k->init, &k->ctx, k->err, sizeof k->err);
    if (k->rc)
        k->ctx = NULL;
}

/* The backend instances, one per device: rank r on device o->device + r with its share of the
 * weights; with several, the backend's communicator and one thread per rank. */
static int create_ranks(gp_session *s, const gp_session_opts *o, char *err, size_t err_len)
{
    const gp_plan *p = s->p;
    int n = p->n_devices;
    s->ranks = calloc((size_t)n, sizeof *s->ranks);
    if (!s->ranks) {
        gp_errf(err, err_len, "gp_session_new: out of memory");
        return -1;
    }
    if (n > 1) {
        int devices[GP_PLAN_MAX_DEVICES];
        for (int r = 0; r < n; r++)
            devices[r] = o->device + r;
        if (!s->ops->comm_new) {
            gp_errf(err, err_len, "backend %s runs on one device; this plan is for %d",
                    s->ops->name, n);
            return -1;
        }
        if (s->ops->comm_new(n, devices, &s->comm, err, err_len)) {
            s->comm = NULL;
            return -1;
        }
        s->rank_threads = gp_threadpool_new(n);
        if (!s->rank_threads) {
            gp_errf(err, err_len, "gp_session_new: cannot start %d device threads", n);
            return -1;
        }
    }
    for (int r = 0; r < n; r++) {
        gp_rank *k = &s->ranks[r];
        k->io = r == 0 ? s->io
                       : alloc_aligned((size_t)p->regions[GP_REGION_IO].alignment,
                                       (size_t)p->regions[GP_REGION_IO].size);
        if (!k->io) {
            gp_errf(err, err_len, "gp_session_new: out of memory");
            return -1;
        }
        k->init = (gp_backend_init){p, r, o->device + r, o->n_threads > 0 ? o->n_threads : 1,
                                    device_weights(s->m, r), k->io,
                                    s->extras, r, n, s->comm};
    }
    /* Each instance is made on the thread that will run its evals, so whatever a library sets up
     * per thread (a CUDA context made current) is set up now, not in the first eval. */
    on_ranks(s, create_rank);
    return rank_error(s, err, err_len);
}

/* The adapter slots a backend that copies weights must reload after gp_model_bind_adapter. */
static int find_slots(gp_session *s, char *err, size_t err_len)
{
    const gp_plan *p = s->p;
    s->adapter_version = s->m->adapter_version;
    if (!s->ops->reload_weights)
        return 0;
    s->slots = calloc((size_t)p->n_tensors + 1, sizeof *s->slots);
    if (!s->slots) {
        gp_errf(err, err_len, "gp_session_new: out of memory");
        return -1;
    }
    for (int i = 0; i < p->n_tensors; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        if (t->kind == GP_TENSOR_WEIGHT && t->view_src < 0 && gp_lora_is_slot(weight_name(t)))
            s->slots[s->n_slots++] = i;
    }
    return 0;
}

/* A new adapter was bound since the last eval: copy its slots to every device. */
static int reload_slots(gp_session *s)
{
    if (s->adapter_version == s->m->adapter_version)
        return 0;
    for (int r = 0; r < s->p->n_devices && s->n_slots; r++) {
        gp_rank *k = &s->ranks[r];
        if (s->ops->reload_weights(k->ctx, s->slots, s->n_slots, s->err, sizeof s->err))
            return -1;
    }
    s->adapter_version = s->m->adapter_version;
    return 0;
}

gp_session *gp_session_new(const gp_model *m, const gp_session_opts *o, char *err, size_t err_len)
{
    gp_session_opts def = {"cpu", 1, 0};
    if (!o)
        o = &def;
    const char *bname = o->backend ? o->backend : "cpu";
    if (!m) {
        gp_errf(err, err_len, "gp_session_new: no model");
        return NULL;
    }
    if (!m->weights_bound) {
        gp_errf(err, err_len, "%s: no weights bound (bind a checkpoint or random weights first)",
                m->name);
        return NULL;
    }
    const gp_backend_ops *ops = gp_backend_find(bname);
    if (!ops) {
        if (!strcmp(bname, "cuda"))
            gp_errf(err, err_len, "backend cuda: this build has no CUDA support (configure with "
                    "-DGPLAN_CUDA=ON on a machine with nvcc)");
        else
            gp_errf(err, err_len, "unknown backend \"%s\" (cpu, reference%s)", bname,
                    gp_backend_find("cuda") ? ", cuda" : "");
        return NULL;
    }
    const gp_plan *p = m->plan;
    gp_backend kind = strcmp(bname, "cuda") == 0 ? GP_BACKEND_CUDA : GP_BACKEND_CPU;
    if (gp_plan_check_workspaces(p, kind, err, err_len))
        return NULL;
    gp_session *s = calloc(1, sizeof *s);
    if (!s) {
        gp_errf(err, err_len, "gp_session_new: out of memory");
        return NULL;
    }
    s->m = m;
    s->p = p;
    s->ops = ops;
    s->extras = alloc_aligned(GP_EXTRAS_ALIGNMENT, (size_t)p->regions[GP_REGION_EXTRAS].size);
    s->io = alloc_aligned((size_t)p->regions[GP_REGION_IO].alignment,
                          (size_t)p->regions[GP_REGION_IO].size);
    s->sym_values = calloc((size_t)p->n_syms + 1, sizeof *s->sym_values);
    s->checked_syms = calloc((size_t)p->n_syms + 1, sizeof *s->checked_syms);
    s->index_nodes = calloc((size_t)p->n_nodes + 1, sizeof *s->index_nodes);
    if (!s->extras || !s->io || !s->sym_values || !s->checked_syms || !s->index_nodes) {
        gp_errf(err, err_len, "gp_session_new: out of memory");
        gp_session_free(s);
        return NULL;
    }
    for (int i = 0; i < p->n_syms; i++)
        s->sym_values[i] = p->syms[i].bound;
    if (create_ranks(s, o, err, err_len) || find_slots(s, err, err_len)) {
        gp_session_free(s);
        return NULL;
    }
    gp_views_update(p, s->sym_values, s->extras, p->n_devices);
    s->mark = find_marker();
    return s;
}

void gp_session_free(gp_session *s)
{
    if (!s)
        return;
    gp_threadpool_free(s->rank_threads);
    for (int r = 0; s->ranks && r < s->p->n_devices; r++) {
        if (s->ranks[r].ctx)
            s->ops->destroy(s->ranks[r].ctx);
        if (r > 0)
            free(s->ranks[r].io);
    }
    if (s->comm && s->ops->comm_free)
        s->ops->comm_free(s->comm);
    free(s->ranks);
    free(s->slots);
    free(s->extras);
    free(s->io);
    free(s->sym_values);
    free(s->checked_syms);
    free(s->index_nodes);
    free(s);
}

const char *gp_session_error(const gp_session *s)
{
    return s ? s->err : "no session";
}

static int fail(gp_session *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->err, sizeof s->err, fmt, ap);
    va_end(ap);
    return -1;
}

int gp_session_set_dim(gp_session *s, const char *dim, int64_t value)
{
    if (!s || !dim)
        return -1;
    s->err[0] = '\0';
    for (int i = 0; i < s->p->n_syms; i++) {
        if (strcmp(s->p->syms[i].name, dim))
            continue;
        if (value < 1 || value > s->p->syms[i].bound)
            return fail(s, "%s = %lld is outside [1, %lld] (the plan's bound)", dim,
                        (long long)value, (long long)s->p->syms[i].bound);
        s->sym_values[i] = value;
        return 0;
    }
    return fail(s, "no runtime dim named \"%s\"", dim);
}

/* Packed bytes of tensor t at the current dims. */
static size_t current_bytes(const gp_session *s, const gp_plan_tensor *t)
{
    size_t n = gp_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++)
        n *= (size_t)(t->sym[d] >= 0 ? s->sym_values[t->sym[d]] : t->dims[d]);
    return n;
}

/* The input or output (kind) named name, or -1. */
static int find_tensor(const gp_model *m, const char *name, gp_tensor_kind kind)
{
    const gp_plan *p = m->plan;
    for (int k = 0; k < m->n_io; k++) {
        int i = m->io_ids[k];
        if (p->tensors[i].kind == kind && !strcmp(p->tensors[i].name, name))
            return i;
    }
    return -1;
}

static int copy_input(gp_session *s, int id, const void *data, size_t bytes)
{
    const gp_plan_tensor *t = &s->p->tensors[id];
    size_t want = current_bytes(s, t);
    if (bytes != want)
        return fail(s, "input %s: %zu bytes given, %zu expected at the current dims", t->name,
                    bytes, want);
    if (bytes)
        memcpy(s->io + t->offset, data, bytes);
    return 0;
}

int gp_session_set_input(gp_session *s, const char *name, const void *data, size_t bytes)
{
    if (!s || !name)
        return -1;
    s->err[0] = '\0';
    int id = find_tensor(s->m, name, GP_TENSOR_INPUT);
    if (id < 0)
        return fail(s, "no input named \"%s\"", name);
    if (bytes && !data)
        return fail(s, "input %s: no data", name);
    return copy_input(s, id, data, bytes);
}

int gp_session_set_tokens(gp_session *s, const int32_t *ids, const int32_t *pos, int64_t n)
{
    if (!s)
        return -1;
    s->err[0] = '\0';
    const gp_model *m = s->m;
    if (m->tokens < 0 || m->positions < 0)
        return fail(s, "this graph has no token-id and positions inputs");
    if (!ids || !pos || n < 1)
        return fail(s, "set_tokens: need at least one token id and its position");
    const gp_plan_tensor *t = &s->p->tensors[m->tokens];
    if (t->ndim >= 1 && t->sym[0] >= 0) {
        if (gp_session_set_dim(s, s->p->syms[t->sym[0]].name, n))
            return -1;
    }
    if (copy_input(s, m->tokens, ids, (size_t)n * sizeof *ids) ||
        copy_input(s, m->positions, pos, (size_t)n * sizeof *pos))
        return -1;
    if (m->rows < 0)
        return 0;
    int32_t last = (int32_t)(n - 1);
    return gp_session_set_rows(s, &last, 1);
}

int gp_session_set_rows(gp_session *s, const int32_t *rows, int64_t n)
{
    if (!s)
        return -1;
    s->err[0] = '\0';
    const gp_model *m = s->m;
    if (m->rows < 0) {
        /* Such a graph computes every token's logits: asking for all of them is no change. */
        const gp_plan_tensor *tk = m->tokens >= 0 ? &s->p->tensors[m->tokens] : NULL;
        if (!rows && tk && (int64_t)(current_bytes(s, tk) / sizeof(int32_t)) == n)
            return 0;
        return fail(s, "set_rows: this graph has no rows input (it computes every token's "
                    "logits)");
    }
    const gp_plan_tensor *t = &s->p->tensors[m->rows];
    if (n < 1)
        return fail(s, "set_rows: need at least one row");
    if (t->ndim >= 1 && t->sym[0] >= 0) {
        const gp_plan_sym *d = &s->p->syms[t->sym[0]];
        if (n > d->bound)
            return fail(s, "set_rows: %lld rows asked for, the plan computes at most %lld (%s <= "
                        "%lld; compile with a larger bound, e.g. gplan-compile -D n_rows=N)",
                        (long long)n, (long long)d->bound, d->name, (long long)d->bound);
        s->sym_values[t->sym[0]] = n;
    }
    size_t bytes = current_bytes(s, t);
    if (bytes != (size_t)n * sizeof(int32_t))
        return fail(s, "set_rows: %lld rows given, the rows input %s holds %zu", (long long)n,
                    t->name, bytes / sizeof(int32_t));
    int32_t *dst = (int32_t *)(void *)(s->io + t->offset); /* [n] */
    for (int64_t i = 0; i < n; i++)
        dst[i] = rows ? rows[i] : (int32_t)i;
    return 0;
}

/* The host address of tensor id for the host-side checks: inside the host io block for io tensors
 * (inputs are there before the backend sees them); a placeholder for the rest, whose bytes the
 * checks do not read (every index input lives in io, see analyze()). */
static void *host_addr(gp_session *s, int id, uint64_t dev_addr)
{
    static unsigned char placeholder[8];
    const gp_plan *p = s->p;
    if (p->tensors[id].region != GP_REGION_IO)
        return placeholder;
    int root = root_of(p, id);
    gp_extras_view rv;
    gp_extras_read(s->extras, p, root, 0, &rv);
    return s->io + p->tensors[root].offset + (dev_addr - rv.data);
}

static void ktensor_of(gp_session *s, int id, gp_ktensor *k)
{
    gp_extras_view v;
    const gp_plan_tensor *t = &s->p->tensors[id];
    gp_extras_read(s->extras, s->p, id, 0, &v);
    k->data = host_addr(s, id, v.data);
    k->dtype = t->dtype;
    k->ndim = t->ndim;
    memcpy(k->ne, v.ne, sizeof k->ne);
    memcpy(k->nb, v.nb, sizeof k->nb);
}

/* Checks node k at the current dims and index values (gp_cpu_check). */
static int check_node(gp_session *s, int k)
{
    const gp_plan *p = s->p;
    const gp_plan_node *nd = &p->nodes[k];
    char why[400];
    gp_ktensor out, in[GP_MAX_INPUTS];
    ktensor_of(s, nd->output, &out);
    for (int i = 0; i < nd->n_inputs; i++)
        ktensor_of(s, nd->inputs[i], &in[i]);
    if (gp_cpu_check(nd->op, &nd->attrs, &out, in, nd->n_inputs, why, sizeof why)) {
        /* Name the index input too: the kernel's message calls it "ids" or "pos". */
        int idx = index_input(nd->op);
        int iroot = idx >= 0 ? root_of(p, nd->inputs[idx]) : -1;
        const char *iname = iroot >= 0 ? p->tensors[iroot].name : NULL;
        if (iroot >= 0 && iroot == s->m->rows && nd->op == GP_OP_GET_ROWS)
            return fail(s, "eval: %s: the rows asked for must be tokens of this eval: node %d (%s "
                        "-> %s, line %d): %s", iname, k, gp_op_get(nd->op)->name,
                        p->tensors[nd->output].name, nd->line, why);
        return fail(s, "eval: node %d (%s -> %s, line %d%s%s): %s", k, gp_op_get(nd->op)->name,
                    p->tensors[nd->output].name, nd->line, iname ? ", index input " : "",
                    iname ? iname : "", why);
    }
    return 0;
}

/* The size an index input of node nd must stay under: rows of the table (get_rows), of the
 * destination (store) or of the cache (attention); -1 for ops that read no index values (rope). */
static int64_t index_bound(gp_session *s, const gp_plan_node *nd)
{
    gp_extras_view v;
    int t = nd->op == GP_OP_ATTENTION ? nd->inputs[1] : nd->inputs[0];
    if (nd->op != GP_OP_GET_ROWS && nd->op != GP_OP_STORE && nd->op != GP_OP_ATTENTION)
        return -1;
    /* A ring cache takes any position: a bound of its own. */
    if ((nd->op == GP_OP_STORE && nd->attrs.i[GP_STORE_RING]) ||
        (nd->op == GP_OP_ATTENTION && nd->attrs.i[GP_ATTENTION_RING]))
        return INT32_MAX;
    gp_extras_read(s->extras, s->p, t, 0, &v);
    return v.ne[0];
}

/*
 * Every node at the current dims, before anything runs; on success, the nodes whose index values
 * must be checked again at later evals with the same dims: once the shapes hold, gp_cpu_check's
 * outcome for a node depends only on its index tensor's values and its bound, so one node per
 * (op, index tensor, bound) stands for all (the first in schedule order, so the first failing
 * node is still the one named).
 */
static int check_nodes(gp_session *s)
{
    const gp_plan *p = s->p;
    s->n_index_nodes = 0;
    for (int k = 0; k < p->n_nodes; k++)
        if (check_node(s, k))
            return -1;
    for (int k = 0; k < p->n_nodes; k++) {
        const gp_plan_node *nd = &p->nodes[k];
        int idx = index_input(nd->op);
        int64_t bound = idx >= 0 ? index_bound(s, nd) : -1;
        if (bound < 0)
            continue;
        int dup = 0;
        for (int j = 0; j < s->n_index_nodes && !dup; j++) {
            const gp_plan_node *o = &p->nodes[s->index_nodes[j]];
            dup = o->op == nd->op && o->inputs[idx] == nd->inputs[idx] && index_bound(s, o) == bound;
            /* a ragged batch's attention also depends on its seq and blocks */
            if (dup && nd->op == GP_OP_ATTENTION)
                dup = o->n_inputs == nd->n_inputs && o->inputs[4] == nd->inputs[4] &&
                      o->inputs[5] == nd->inputs[5] &&
                      o->attrs.i[GP_ATTENTION_BLOCK] == nd->attrs.i[GP_ATTENTION_BLOCK];
        }
        if (!dup)
            s->index_nodes[s->n_index_nodes++] = k;
    }
    return 0;
}

/* The checks an eval needs: everything when the dims changed since the last eval that passed
 * (records rewritten first), else only the index values. */
static int check_eval(gp_session *s)
{
    const gp_plan *p = s->p;
    size_t sym_bytes = (size_t)p->n_syms * sizeof *s->sym_values;
    if (s->checked && !memcmp(s->checked_syms, s->sym_values, sym_bytes)) {
        for (int j = 0; j < s->n_index_nodes; j++)
            if (check_node(s, s->index_nodes[j]))
                return -1;
        return 0;
    }
    s->checked = 0;
    gp_views_update(p, s->sym_values, s->extras, p->n_devices);
    if (check_nodes(s))
        return -1;
    memcpy(s->checked_syms, s->sym_values, sym_bytes);
    s->checked = 1;
    return 0;
}

/* Rank ith's eval, on its own device thread. */
static void eval_rank(void *vs, int ith, int nth)
{
    (void)nth;
    gp_session *s = vs;
    gp_rank *k = &s->ranks[ith];
    k->err[0] = '\0';
    k->rc = s->ops->eval(k->ctx, s->extras, k->err, sizeof k->err);
}

/* Every device's eval at once: the inputs copied into the other ranks' io blocks first (rank 0's
 * is the session's); the first failing rank's message is the session's. */
static int eval_ranks(gp_session *s)
{
    const gp_plan *p = s->p;
    for (int k = 0; k < s->m->n_io && p->n_devices > 1; k++) {
        const gp_plan_tensor *t = &p->tensors[s->m->io_ids[k]];
        if (t->kind != GP_TENSOR_INPUT)
            continue;
        size_t bytes = current_bytes(s, t);
        for (int r = 1; r < p->n_devices; r++)
            memcpy(s->ranks[r].io + t->offset, s->io + t->offset, bytes);
    }
    on_ranks(s, eval_rank);
    return rank_error(s, s->err, sizeof s->err);
}

int gp_session_eval(gp_session *s)
{
    if (!s)
        return -1;
    if (s->mark)
        s->mark(1);
    s->err[0] = '\0';
    int rc = check_eval(s);
    if (!rc)
        rc = reload_slots(s);
    if (!rc)
        rc = eval_ranks(s);
    if (!rc)
        s->evals++;
    if (s->mark)
        s->mark(0);
    return rc;
}

const void *gp_session_output(gp_session *s, const char *name, gp_tensor_info *info)
{
    if (!s || !name)
        return NULL;
    int id = find_tensor(s->m, name, GP_TENSOR_OUTPUT);
    if (id < 0) {
        fail(s, "no output named \"%s\"", name);
        return NULL;
    }
    const gp_plan_tensor *t = &s->p->tensors[id];
    if (info) {
        gp_extras_view v;
        gp_extras_read(s->extras, s->p, id, 0, &v);
        memset(info, 0, sizeof *info);
        info->dtype = t->dtype;
        info->ndim = t->ndim;
        memcpy(info->ne, v.ne, sizeof info->ne);
        info->bytes = (size_t)gp_extras_packed_bytes(t, &v);
    }
    return s->io + t->offset;
}

int64_t gp_argmax(const float *x, int64_t n)
{
    enum { L = 16 };
    float m[L], best = -INFINITY;
    int64_t i = 0;
    for (int l = 0; l < L; l++)
        m[l] = -INFINITY;
    /* The largest value: L independent maxima (a NaN compares false and is passed over). */
    for (; i + L <= n; i += L)
        for (int l = 0; l < L; l++)
            m[l] = x[i + l] > m[l] ? x[i + l] : m[l];
    for (; i < n; i++)
        best = x[i] > best ? x[i] : best;
    for (int l = 0; l < L; l++)
        best = m[l] > best ? m[l] : best;
    /* Its first index. */
    for (i = 0; i < n; i++)
        if (x[i] == best)
            return i;
    return 0;
}

int gp_session_reset(gp_session *s)
{
    if (!s)
        return -1;
    s->err[0] = '\0';
    for (int r = 0; r < s->p->n_devices; r++)
        if (s->ops->reset_state(s->ranks[r].ctx, s->err, sizeof s->err))
            return -1;
    return 0;
}

int64_t gp_session_eval_count(const gp_session *s)
{
    return s ? s->evals : 0;
}

int64_t gp_session_backend_allocs(const gp_session *s)
{
    int64_t n = 0;
    for (int r = 0; s && s->ops->alloc_count && r < s->p->n_devices; r++)
        n += s->ops->alloc_count(s->ranks[r].ctx);
    return n;
}

const char *gp_session_backend(const gp_session *s)
{
    return s ? s->ops->name : "";
}
