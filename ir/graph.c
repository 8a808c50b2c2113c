/* The graph builder: symbolic dims, leaf tensors, unique names, graph outputs and the byte sizes
 * of tensors. Nodes and their shape inference are in shape.c. */
#include <stdlib.h>
#include <string.h>

#include "ir/ir_internal.h"

static char *dup_str(const char *s)
{
    size_t n = strlen(s);
    char *p = malloc(n + 1);
    if (p)
        memcpy(p, s, n + 1);
    return p;
}

gp_graph *gp_graph_new(const char *name)
{
    gp_graph *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->name = dup_str(name ? name : "graph");
    if (!g->name) {
        free(g);
        return NULL;
    }
    return g;
}

void gp_graph_free(gp_graph *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n_tensors; i++) {
        free(g->tensors[i].name);
        free(g->tensors[i].weight_name);
    }
    for (int i = 0; i < g->n_syms; i++)
        free(g->syms[i].name);
    free(g->tensors);
    free(g->nodes);
    free(g->syms);
    free(g->name_index);
    free(g->name);
    free(g);
}

/* Grows an array of elem-sized items so that one more fits; 0 on success. */
static int grow(void **items, int n, int *cap, size_t elem)
{
    if (n < *cap)
        return 0;
    int c = *cap ? 2 * *cap : 16;
    void *p = realloc(*items, (size_t)c * elem);
    if (!p)
        return -1;
    *items = p;
    *cap = c;
    return 0;
}

int gp_graph_add_sym(gp_graph *g, const char *name, int64_t bound, gp_loc loc)
{
    if (!g || !name || bound <= 0)
        return -1;
    for (int i = 0; i < g->n_syms; i++)
        if (strcmp(g->syms[i].name, name) == 0)
            return -1;
    if (grow((void **)&g->syms, g->n_syms, &g->cap_syms, sizeof *g->syms))
        return -1;
    gp_sym *s = &g->syms[g->n_syms];
    s->name = dup_str(name);
    if (!s->name)
        return -1;
    s->bound = bound;
    s->loc = loc;
    return g->n_syms++;
}

/* Tensor names are looked up for every tensor added (uniqueness), so a graph of n tensors would
 * cost O(n^2) with a scan: an open-addressing hash keeps it linear. */
static uint32_t name_hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static void index_put(int *slots, int n_slots, const char *name, int id)
{
    uint32_t mask = (uint32_t)n_slots - 1, i = name_hash(name) & mask;
    while (slots[i])
        i = (i + 1) & mask;
    slots[i] = id + 1;
}

/* Rebuilds the index for the current tensors, growing it to keep the load under one half. On
 * failure the index is dropped and lookups scan. */
void gp_ir_reindex(gp_graph *g)
{
    int want = 64;
    while (want < 2 * (g->n_tensors + 1) && want < (1 << 29))
        want *= 2;
    int *slots = calloc((size_t)want, sizeof *slots);
    free(g->name_index);
    g->name_index = slots;
    g->name_slots = slots ? want : 0;
    for (int i = 0; slots && i < g->n_tensors; i++)
        index_put(slots, want, g->tensors[i].name, i);
}

/* Adds tensor id (already stored) to the index. */
static void index_add(gp_graph *g, int id)
{
    if (g->name_slots < 2 * (g->n_tensors + 1) || !g->name_index)
        gp_ir_reindex(g); /* includes id */
    else
        index_put(g->name_index, g->name_slots, g->tensors[id].name, id);
}

int gp_graph_find_tensor(const gp_graph *g, const char *name)
{
    if (!g || !name)
        return -1;
    if (!g->name_index) {
        for (int i = 0; i < g->n_tensors; i++)
            if (strcmp(g->tensors[i].name, name) == 0)
                return i;
        return -1;
    }
    uint32_t mask = (uint32_t)g->name_slots - 1, i = name_hash(name) & mask;
    for (; g->name_index[i]; i = (i + 1) & mask) {
        int id = g->name_index[i] - 1;
        if (strcmp(g->tensors[id].name, name) == 0)
            return id;
    }
    return -1;
}

char *gp_ir_unique_name(const gp_graph *g, const char *name)
{
    char gen[32];
    if (!name) {
        snprintf(gen, sizeof gen, "t%d", g->n_tensors);
        name = gen;
    }
    if (gp_graph_find_tensor(g, name) < 0)
        return dup_str(name);
    size_t n = strlen(name) + 24;
    char *buf = malloc(n);
    if (!buf)
        return NULL;
    for (long k = 1;; k++) {
        snprintf(buf, n, "%s.%ld", name, k);
        if (gp_graph_find_tensor(g, buf) < 0)
            return buf;
    }
}

int gp_ir_push_tensor(gp_graph *g, const gp_tensor *t, const char *name)
{
    if (grow((void **)&g->tensors, g->n_tensors, &g->cap_tensors, sizeof *g->tensors))
        return -1;
    char *uname = gp_ir_unique_name(g, name);
    if (!uname)
        return -1;
    g->tensors[g->n_tensors] = *t;
    g->tensors[g->n_tensors].name = uname;
    g->n_tensors++;
    index_add(g, g->n_tensors - 1);
    return g->n_tensors - 1;
}

int gp_ir_push_node(gp_graph *g, const gp_node *n)
{
    if (grow((void **)&g->nodes, g->n_nodes, &g->cap_nodes, sizeof *g->nodes))
        return -1;
    g->nodes[g->n_nodes] = *n;
    return g->n_nodes++;
}

const char *gp_ir_shape_str(const gp_graph *g, int ndim, const gp_dim *shape,
                            char buf[GP_SHAPE_STR])
{
    size_t pos = 0;
    buf[pos++] = '[';
    buf[pos] = '\0';
    for (int i = 0; i < ndim && pos < GP_SHAPE_STR; i++) {
        const char *sep = i ? ", " : "";
        int n;
        if (shape[i].sym >= 0 && g && shape[i].sym < g->n_syms)
            n = snprintf(buf + pos, GP_SHAPE_STR - pos, "%s%s", sep, g->syms[shape[i].sym].name);
        else if (shape[i].sym >= 0)
            n = snprintf(buf + pos, GP_SHAPE_STR - pos, "%s?%d", sep, shape[i].sym);
        else
            n = snprintf(buf + pos, GP_SHAPE_STR - pos, "%s%lld", sep, (long long)shape[i].size);
        if (n < 0)
            break;
        pos += (size_t)n;
    }
    if (pos + 2 <= GP_SHAPE_STR) {
        buf[pos++] = ']';
        buf[pos] = '\0';
    } else {
        /* Truncated (very long sym names): mark it rather than print a wrong shape. */
        memcpy(buf + GP_SHAPE_STR - 5, "...]", 5);
    }
    return buf;
}

int gp_ir_dim_eq(gp_dim a, gp_dim b)
{
    if (a.sym >= 0 || b.sym >= 0)
        return a.sym == b.sym;
    return a.size == b.size;
}

int gp_ir_check_shape(const gp_graph *g, gp_diag *d, gp_loc loc, const char *what, gp_dtype dtype,
                      int ndim, const gp_dim *shape, gp_dim *out)
{
    if (ndim < 0 || ndim > GP_MAX_DIMS) {
        gp_diag_error(d, loc, "%s: %d dims (at most %d are supported)", what, ndim, GP_MAX_DIMS);
        return -1;
    }
    if (ndim > 0 && !shape) {
        gp_diag_error(d, loc, "%s: missing shape", what);
        return -1;
    }
    int64_t bytes = (int64_t)gp_dtype_size(dtype), block = gp_dtype_block(dtype);
    if (block > 1) {
        /* A block-quantized tensor: a [..., K] of rows, K a whole number of blocks. */
        if (ndim < 1 || shape[ndim - 1].sym >= 0 || shape[ndim - 1].size % block) {
            char s[GP_SHAPE_STR];
            gp_diag_error(d, loc, "%s: %s packs rows in blocks of %lld: the last dim of %s must "
                          "be a multiple of %lld", what, gp_dtype_name(dtype), (long long)block,
                          gp_ir_shape_str(g, ndim, shape, s), (long long)block);
            return -1;
        }
        bytes = (int64_t)gp_dtype_block_bytes(dtype);
    }
    if (bytes == 0) {
        gp_diag_error(d, loc, "%s: bad dtype %d", what, (int)dtype);
        return -1;
    }
    gp_dim tmp[GP_MAX_DIMS];
    for (int i = 0; i < ndim; i++) {
        tmp[i] = shape[i];
        if (tmp[i].sym >= 0) {
            if (tmp[i].sym >= g->n_syms) {
                gp_diag_error(d, loc, "%s: dim %d uses unknown symbolic dim %d", what, i,
                              tmp[i].sym);
                return -1;
            }
            tmp[i].size = g->syms[tmp[i].sym].bound;
        } else if (tmp[i].sym != -1) {
            tmp[i].sym = -1;
        }
        if (tmp[i].size <= 0) {
            gp_diag_error(d, loc, "%s: dim %d has size %lld (sizes must be > 0)", what, i,
                          (long long)tmp[i].size);
            return -1;
        }
        if (bytes > GP_MAX_BYTES / tmp[i].size) {
            char s[GP_SHAPE_STR];
            gp_diag_error(d, loc, "%s: shape %s is too large (more than 2^62 bytes)", what,
                          gp_ir_shape_str(g, ndim, shape, s));
            return -1;
        }
        bytes *= i == ndim - 1 && block > 1 ? tmp[i].size / block : tmp[i].size;
    }
    for (int i = 0; i < ndim; i++)
        out[i] = tmp[i];
    return 0;
}

void gp_ir_contiguous_strides(int ndim, const gp_dim *shape, int64_t *stride)
{
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        stride[i] = s;
        s *= shape[i].size;
    }
}

int gp_graph_add_tensor(gp_graph *g, gp_diag *d, const char *name, gp_tensor_kind kind,
                        gp_dtype dtype, int ndim, const gp_dim *shape, const char *weight_name,
                        gp_loc loc)
{
    if (!g)
        return -1;
    if (kind != GP_TENSOR_INPUT && kind != GP_TENSOR_OUTPUT && kind != GP_TENSOR_WEIGHT &&
        kind != GP_TENSOR_STATE) {
        gp_diag_error(d, loc, "tensor '%s': kind %s cannot be declared (only input, output, "
                      "weight and state)", name ? name : "?", gp_tensor_kind_name(kind));
        return -1;
    }
    if (name) {
        int old = gp_graph_find_tensor(g, name);
        if (old >= 0) {
            const gp_loc *l = &g->tensors[old].loc;
            if (l->file && l->line > 0)
                gp_diag_error(d, loc, "'%s' is already defined (at %s:%d)", name, l->file,
                              l->line);
            else
                gp_diag_error(d, loc, "'%s' is already defined", name);
            return -1;
        }
    }
    char what[128];
    snprintf(what, sizeof what, "tensor '%s'", name ? name : "?");
    if (gp_dtype_is_quant(dtype) && kind != GP_TENSOR_WEIGHT) {
        gp_diag_error(d, loc, "%s: %s is a weight format: only weights can be %s", what,
                      gp_dtype_name(dtype), gp_dtype_name(dtype));
        return -1;
    }
    gp_tensor t;
    memset(&t, 0, sizeof t);
    if (gp_ir_check_shape(g, d, loc, what, dtype, ndim, shape, t.shape))
        return -1;
    t.kind = kind;
    t.dtype = dtype;
    t.ndim = ndim;
    gp_ir_contiguous_strides(ndim, t.shape, t.stride);
    t.view_src = -1;
    t.producer = -1;
    t.loc = loc;
    if (weight_name) {
        t.weight_name = dup_str(weight_name);
        if (!t.weight_name)
            return -1;
    }
    int id = gp_ir_push_tensor(g, &t, name);
    if (id < 0)
        free(t.weight_name);
    return id;
}

int64_t gp_tensor_nbytes(const gp_tensor *t)
{
    if (!t)
        return 0;
    /* The extent: from the first element to one past the last, following the strides. Sizes and
     * counts were checked against 2^62 when the tensor was made. */
    int64_t last = 0;
    for (int i = 0; i < t->ndim; i++)
        last += (t->shape[i].size - 1) * t->stride[i];
    if (gp_dtype_is_quant(t->dtype)) /* always contiguous (only weights are quantized) */
        return (last + 1) / t->shape[t->ndim - 1].size *
               (int64_t)gp_dtype_row_bytes(t->dtype, t->shape[t->ndim - 1].size);
    return (last + 1) * (int64_t)gp_dtype_size(t->dtype);
}

int gp_tensor_is_contiguous(const gp_tensor *t)
{
    if (!t)
        return 0;
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        /* A dim of size 1 is never stepped along, so its stride does not matter. */
        if (t->shape[i].size != 1 && t->stride[i] != s)
            return 0;
        s *= t->shape[i].size;
    }
    return 1;
}

int gp_graph_make_output(gp_graph *g, gp_diag *d, int value_id, const char *name, gp_dtype dtype,
                         int ndim, const gp_dim *shape, gp_loc loc)
{
    if (!g || !name)
        return -1;
    if (value_id < 0 || value_id >= g->n_tensors) {
        gp_diag_error(d, loc, "output '%s': no such value (tensor %d)", name, value_id);
        return -1;
    }
    char what[128];
    snprintf(what, sizeof what, "output '%s'", name);
    gp_dim want[GP_MAX_DIMS];
    if (gp_ir_check_shape(g, d, loc, what, dtype, ndim, shape, want))
        return -1;
    const gp_tensor *v = &g->tensors[value_id];
    int same = v->ndim == ndim;
    for (int i = 0; same && i < ndim; i++)
        same = gp_ir_dim_eq(v->shape[i], want[i]);
    if (!same) {
        char s1[GP_SHAPE_STR], s2[GP_SHAPE_STR];
        gp_diag_error(d, loc, "output '%s': shape mismatch: expected %s, value '%s' is %s", name,
                      gp_ir_shape_str(g, ndim, want, s1), v->name,
                      gp_ir_shape_str(g, v->ndim, v->shape, s2));
        return -1;
    }

    /* An intermediate of the right dtype becomes the output itself; anything else is copied. */
    int in_place = v->kind == GP_TENSOR_INTERMEDIATE && v->dtype == dtype;

    /* The output's name is what the caller asks the runtime for, so it must be exact: a value
     * holding it (a loop variable, say) gives it up; a declared tensor holding it is an error. */
    int holder = gp_graph_find_tensor(g, name);
    if (holder >= 0 && !(in_place && holder == value_id)) {
        gp_tensor *h = &g->tensors[holder];
        if (h->kind != GP_TENSOR_INTERMEDIATE && h->kind != GP_TENSOR_VIEW) {
            gp_diag_error(d, loc, "output '%s': the name is already used by %s '%s'", name,
                          gp_tensor_kind_name(h->kind), name);
            return -1;
        }
        char *other = gp_ir_unique_name(g, name);
        if (!other)
            return -1;
        free(h->name);
        h->name = other;
        gp_ir_reindex(g);
    }

    if (in_place) {
        gp_tensor *t = &g->tensors[value_id];
        if (holder != value_id) {
            char *n = dup_str(name);
            if (!n)
                return -1;
            free(t->name);
            t->name = n;
            gp_ir_reindex(g);
        }
        t->kind = GP_TENSOR_OUTPUT;
        return value_id;
    }

    gp_op op = v->dtype == dtype ? GP_OP_CONT : GP_OP_CAST;
    gp_attrs a;
    memset(&a, 0, sizeof a);
    int id = gp_graph_add_node(g, d, op, &value_id, 1, &a, NULL, 0, dtype, name, loc);
    if (id < 0)
        return -1;
    g->tensors[id].kind = GP_TENSOR_OUTPUT;
    return id;
}
