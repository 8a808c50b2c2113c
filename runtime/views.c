/* Per-eval tensor records: every tensor's shape, strides and (for views) data address for this eval's
 * symbolic dims, written into its slot of the extras block. Allocates nothing. */
#include <string.h>

#include "runtime/backend.h"

static int64_t *rec_data(unsigned char *rec, int n)
{
    (void)n; /* the data pointers come first whatever the device count */
    return (int64_t *)(void *)(rec + GP_EXTRAS_DATA_OFF(n));
}

static int64_t *rec_ne(unsigned char *rec, int n)
{
    return (int64_t *)(void *)(rec + GP_EXTRAS_NE_OFF(n));
}

static int64_t *rec_nb(unsigned char *rec, int n)
{
    return (int64_t *)(void *)(rec + GP_EXTRAS_NB_OFF(n));
}

void gp_extras_read(const unsigned char *extras, const gp_plan *p, int tensor, int slot,
                    gp_extras_view *out)
{
    int n = p->n_devices;
    const unsigned char *rec = extras + p->tensors[tensor].extras_offset;
    memcpy(&out->data, rec + GP_EXTRAS_DATA_OFF(n) + 8 * slot, 8);
    memcpy(out->ne, rec + GP_EXTRAS_NE_OFF(n), sizeof out->ne);
    memcpy(out->nb, rec + GP_EXTRAS_NB_OFF(n), sizeof out->nb);
}

void gp_extras_set_data(unsigned char *extras, const gp_plan *p, int tensor, int slot,
                        uint64_t addr)
{
    unsigned char *rec = extras + p->tensors[tensor].extras_offset;
    memcpy(rec + GP_EXTRAS_DATA_OFF(p->n_devices) + 8 * slot, &addr, 8);
}

int64_t gp_extras_packed_bytes(const gp_plan_tensor *t, const gp_extras_view *v)
{
    if (gp_dtype_is_quant(t->dtype)) { /* rows of whole blocks */
        int64_t n = (int64_t)gp_dtype_row_bytes(t->dtype, v->ne[t->ndim - 1]);
        for (int d = 0; d < t->ndim - 1; d++)
            n *= v->ne[d];
        return n;
    }
    int64_t n = (int64_t)gp_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++)
        n *= v->ne[d];
    return n;
}

/* ne[0..GP_MAX_DIMS) of t at this eval's dims; unused dims 1. */
static void runtime_shape(const gp_plan_tensor *t, const int64_t *sym_values, int64_t *ne)
{
    for (int d = 0; d < GP_MAX_DIMS; d++)
        ne[d] = d >= t->ndim ? 1 : t->sym[d] >= 0 ? sym_values[t->sym[d]] : t->dims[d];
}

/* Packed byte strides for shape ne of t's rank; unused dims 0. */
static void packed_strides(const gp_plan_tensor *t, const int64_t *ne, int64_t *nb)
{
    int64_t s = (int64_t)gp_dtype_size(t->dtype);
    for (int d = GP_MAX_DIMS - 1; d >= 0; d--) {
        if (d >= t->ndim) {
            nb[d] = 0;
            continue;
        }
        nb[d] = s;
        s *= ne[d];
    }
}

/* A reshape's strides: packed over a packed source; over a strided one (ir/shape.c allows only
 * dims of size 1 added or dropped there, index's drop of axis 0 on a permuted view), each dim
 * of more than 1 element the stride of the source's next such dim, a dim of 1 the stride of what
 * follows it. */
static void reshape_strides(const gp_plan_tensor *t, const gp_plan_tensor *s, const int64_t *ne,
                            const int64_t *src_ne, const int64_t *src_nb, int64_t *nb)
{
    int64_t src_packed[GP_MAX_DIMS];
    packed_strides(s, src_ne, src_packed);
    int packed = 1;
    for (int d = 0; d < s->ndim; d++)
        packed &= src_ne[d] <= 1 || src_nb[d] == src_packed[d];
    packed_strides(t, ne, nb);
    if (packed)
        return;
    int i = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (ne[d] == 1)
            continue;
        while (i < s->ndim && src_ne[i] == 1)
            i++;
        nb[d] = i < s->ndim ? src_nb[i++] : nb[d];
    }
    int64_t next = (int64_t)gp_dtype_size(t->dtype);
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (ne[d] == 1)
            nb[d] = next;
        next = nb[d] * ne[d];
    }
}

/* The record of a view tensor `id` produced by node nd, from its source's record. */
static void update_view(const gp_plan *p, const gp_plan_node *nd, int id, const int64_t *sym_values,
                        unsigned char *extras, int n_slots)
{
    const gp_plan_tensor *t = &p->tensors[id];
    int n = p->n_devices;
    unsigned char *rec = extras + t->extras_offset;
    const unsigned char *src = extras + p->tensors[t->view_src].extras_offset;
    const int64_t *src_ne = (const int64_t *)(const void *)(src + GP_EXTRAS_NE_OFF(n));
    const int64_t *src_nb = (const int64_t *)(const void *)(src + GP_EXTRAS_NB_OFF(n));
    const int64_t *src_data = (const int64_t *)(const void *)(src + GP_EXTRAS_DATA_OFF(n));
    int64_t ne[GP_MAX_DIMS], nb[GP_MAX_DIMS], delta = 0;

    runtime_shape(t, sym_values, ne);
    switch (nd->op) {
    case GP_OP_PERMUTE:
        for (int d = 0; d < GP_MAX_DIMS; d++)
            nb[d] = d < t->ndim ? src_nb[nd->attrs.i[GP_PERMUTE_AXES + d]] : 0;
        break;
    case GP_OP_SLICE:
        memcpy(nb, src_nb, sizeof nb);
        delta = nd->attrs.i[GP_SLICE_START] * src_nb[nd->attrs.i[GP_SLICE_AXIS]];
        break;
    case GP_OP_VIEW:
        packed_strides(t, ne, nb);
        delta = nd->attrs.i[GP_VIEW_OFFSET];
        break;
    case GP_OP_STORE:
        memcpy(ne, src_ne, sizeof ne);
        memcpy(nb, src_nb, sizeof nb);
        break;
    default: /* reshape: the new shape packs over the same bytes, or keeps a strided source's */
        reshape_strides(t, &p->tensors[t->view_src], ne, src_ne, src_nb, nb);
        break;
    }
    memcpy(rec_ne(rec, n), ne, sizeof ne);
    memcpy(rec_nb(rec, n), nb, sizeof nb);
    for (int s = 0; s < n_slots; s++) {
        int64_t base = src_data[s];
        rec_data(rec, n)[s] = base ? base + delta : 0;
    }
}

void gp_views_update(const gp_plan *p, const int64_t *sym_values, unsigned char *extras,
                     int n_slots)
{
    int n = p->n_devices;
    /* Tensors with their own storage first: views derive from them. */
    for (int i = 0; i < p->n_tensors; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        if (t->view_src >= 0)
            continue;
        unsigned char *rec = extras + t->extras_offset;
        int64_t ne[GP_MAX_DIMS], nb[GP_MAX_DIMS];
        runtime_shape(t, sym_values, ne);
        if (gp_dtype_is_quant(t->dtype)) {
            /* Packed rows of blocks (plan_load checked): nb of the last dim is 0, as elements
             * inside a row have no byte stride; the kernels read whole rows. */
            int64_t row = (int64_t)gp_dtype_row_bytes(t->dtype, t->dims[t->ndim - 1]);
            for (int d = 0; d < GP_MAX_DIMS; d++)
                nb[d] = 0;
            for (int d = t->ndim - 2; d >= 0; d--)
                nb[d] = d == t->ndim - 2 ? row : nb[d + 1] * t->dims[d + 1];
        } else if (t->region == GP_REGION_WEIGHTS || t->region == GP_REGION_STATE) {
            int64_t es = (int64_t)gp_dtype_size(t->dtype);
            for (int d = 0; d < GP_MAX_DIMS; d++)
                nb[d] = d < t->ndim ? t->stride[d] * es : 0;
        } else {
            packed_strides(t, ne, nb);
        }
        memcpy(rec_ne(rec, n), ne, sizeof ne);
        memcpy(rec_nb(rec, n), nb, sizeof nb);
    }
    /* Views in schedule order: a view's source is produced (or is a leaf) before it. */
    for (int k = 0; k < p->n_nodes; k++) {
        const gp_plan_node *nd = &p->nodes[k];
        if (p->tensors[nd->output].view_src >= 0)
            update_view(p, nd, nd->output, sym_values, extras, n_slots);
    }
}
