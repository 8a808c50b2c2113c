/* The one plan file loader, shared by the runtime and every tool. A plan file is untrusted input:
 * every count, offset, reference and enum is checked before use (docs/plan-format.md). */
#include "plan/plan.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

/* ---- small helpers ---- */

static uint16_t rd_u16(const unsigned char *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t rd_u32(const unsigned char *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static uint64_t rd_u64(const unsigned char *p)
{
    return (uint64_t)rd_u32(p) | ((uint64_t)rd_u32(p + 4) << 32);
}

static int32_t rd_i32(const unsigned char *p)
{
    return (int32_t)rd_u32(p);
}

static int64_t rd_i64(const unsigned char *p)
{
    return (int64_t)rd_u64(p);
}

static double rd_f64(const unsigned char *p)
{
    uint64_t u = rd_u64(p);
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

uint32_t gp_plan_crc(uint32_t crc, const unsigned char *p, size_t n)
{
    uLong c = crc;
    while (n > 0) {
        uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
        c = crc32(c, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return (uint32_t)c;
}

const char *gp_region_name(gp_region r)
{
    static const char *const names[GP_REGION_COUNT] = {"arena", "state", "weights", "io", "extras"};
    if ((int)r < 0 || r >= GP_REGION_COUNT)
        return "?";
    return names[r];
}

/* ---- allocation ---- */

gp_plan *gp_plan_alloc(int n_syms, int n_tensors, int n_nodes)
{
    if (n_syms < 0 || n_tensors < 0 || n_nodes < 0)
        return NULL;
    gp_plan *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->syms = n_syms ? calloc((size_t)n_syms, sizeof *p->syms) : NULL;
    p->tensors = n_tensors ? calloc((size_t)n_tensors, sizeof *p->tensors) : NULL;
    p->nodes = n_nodes ? calloc((size_t)n_nodes, sizeof *p->nodes) : NULL;
    if ((n_syms && !p->syms) || (n_tensors && !p->tensors) || (n_nodes && !p->nodes)) {
        gp_plan_free(p);
        return NULL;
    }
    p->n_syms = n_syms;
    p->n_tensors = n_tensors;
    p->n_nodes = n_nodes;
    p->version_major = GP_PLAN_VERSION_MAJOR;
    p->version_minor = GP_PLAN_VERSION_MINOR;
    return p;
}

void gp_plan_free(gp_plan *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->n_syms; i++)
        free(p->syms[i].name);
    for (int i = 0; i < p->n_tensors; i++) {
        free(p->tensors[i].name);
        free(p->tensors[i].weight_name);
    }
    free(p->syms);
    free(p->tensors);
    free(p->nodes);
    free(p->graph_name);
    free(p->source);
    free(p->method);
    free(p);
}

/* ---- semantic validation ---- */

/* a * b into *out; -1 on overflow (both >= 0). */
static int mul_ok(int64_t a, int64_t b, int64_t *out)
{
    if (a != 0 && b > INT64_MAX / a)
        return -1;
    *out = a * b;
    return 0;
}

/* A block-quantized tensor is packed rows of whole blocks (ir/core.h): contiguous strides, the last
 * dim a multiple of the block; its bytes are rows * row bytes. */
static int64_t quant_span(const gp_plan_tensor *t)
{
    if (t->ndim < 1 || t->ndim > GP_MAX_DIMS)
        return -1;
    int64_t rows = 1, want = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->dims[d] < 1 || t->dims[d] > GP_PLAN_MAX_DIM || t->stride[d] != want)
            return -1;
        if (d < t->ndim - 1 && mul_ok(rows, t->dims[d], &rows))
            return -1;
        if (mul_ok(want, t->dims[d], &want))
            return -1;
    }
    int64_t row = (int64_t)gp_dtype_row_bytes(t->dtype, t->dims[t->ndim - 1]), bytes;
    if (row <= 0 || mul_ok(rows, row, &bytes))
        return -1;
    return bytes;
}

int64_t gp_plan_tensor_span(const gp_plan_tensor *t)
{
    int64_t es = (int64_t)gp_dtype_size(t->dtype);
    if (gp_dtype_is_quant(t->dtype))
        return quant_span(t);
    if (es == 0 || t->ndim < 0 || t->ndim > GP_MAX_DIMS)
        return -1;
    int64_t last = 0; /* index of the last element, in elements */
    for (int d = 0; d < t->ndim; d++) {
        int64_t term;
        if (t->dims[d] < 1 || t->dims[d] > GP_PLAN_MAX_DIM || t->stride[d] < 0 ||
            t->stride[d] > GP_PLAN_MAX_DIM)
            return -1;
        if (mul_ok(t->dims[d] - 1, t->stride[d], &term) || term > INT64_MAX - last)
            return -1;
        last += term;
    }
    int64_t bytes;
    if (last == INT64_MAX || mul_ok(last + 1, es, &bytes))
        return -1;
    return bytes;
}

static int is_pow2(int64_t x)
{
    return x > 0 && (x & (x - 1)) == 0;
}

static gp_region kind_region(gp_tensor_kind k)
{
    switch (k) {
    case GP_TENSOR_INPUT:
    case GP_TENSOR_OUTPUT: return GP_REGION_IO;
    case GP_TENSOR_WEIGHT: return GP_REGION_WEIGHTS;
    case GP_TENSOR_STATE: return GP_REGION_STATE;
    case GP_TENSOR_INTERMEDIATE: return GP_REGION_ARENA;
    default: return GP_REGION_COUNT;
    }
}

static int check_regions(const gp_plan *p, char *why, size_t n)
{
    for (int r = 0; r < GP_REGION_COUNT; r++) {
        const gp_plan_region *g = &p->regions[r];
        const char *rn = gp_region_name((gp_region)r);
        if (!is_pow2(g->alignment) || g->alignment > GP_PLAN_MAX_ALIGNMENT) {
            gp_errf(why, n, "region %s: alignment %lld is not a power of two in [1, %lld]", rn,
                    (long long)g->alignment, (long long)GP_PLAN_MAX_ALIGNMENT);
            return -1;
        }
        if (g->size < 0 || g->size % g->alignment != 0) {
            gp_errf(why, n, "region %s: size %lld is not a multiple of its alignment %lld", rn,
                    (long long)g->size, (long long)g->alignment);
            return -1;
        }
    }
    int64_t rec = GP_EXTRAS_RECORD_BYTES(p->n_devices);
    if (p->regions[GP_REGION_EXTRAS].size / rec < p->n_tensors) {
        gp_errf(why, n, "region extras: %lld bytes cannot hold %d records of %lld bytes",
                (long long)p->regions[GP_REGION_EXTRAS].size, p->n_tensors, (long long)rec);
        return -1;
    }
    if (p->lower_bound < 0 || p->lower_bound > p->regions[GP_REGION_ARENA].size) {
        gp_errf(why, n, "lower bound %lld outside [0, arena size %lld]", (long long)p->lower_bound,
                (long long)p->regions[GP_REGION_ARENA].size);
        return -1;
    }
    if (p->naive_bytes < 0) {
        gp_errf(why, n, "naive bytes %lld negative", (long long)p->naive_bytes);
        return -1;
    }
    return 0;
}

/* Shape, dtype, kind and region of tensor i, on their own. */
/* A split weight: its share of the checkpoint dim is cdiv(units, n_devices) units per group. */
static int check_split(const gp_plan *p, int i, char *why, size_t n)
{
    const gp_plan_tensor *t = &p->tensors[i];
    const gp_split *s = &t->split;
    if (s->groups == 0 && s->dim == 0 && s->unit == 0 && s->full == 0)
        return 0;
    int64_t per = 0, units = 0, share = 0;
    if (t->kind != GP_TENSOR_WEIGHT || p->n_devices < 2 || s->groups < 1 || s->dim < 0 ||
        s->dim >= t->ndim || s->unit < 1 || s->full < 1 || s->full > GP_PLAN_MAX_DIM ||
        __builtin_mul_overflow((int64_t)s->groups, s->unit, &per) || s->full % per != 0) {
        gp_errf(why, n, "tensor %d (%s): bad split (groups %d, dim %d, unit %lld, full %lld)", i,
                t->name, s->groups, s->dim, (long long)s->unit, (long long)s->full);
        return -1;
    }
    units = s->full / per;
    share = units / p->n_devices + (units % p->n_devices != 0);
    if (t->dims[s->dim] != share * per) {
        gp_errf(why, n, "tensor %d (%s): dim %d is %lld, but a split of %lld over %d devices gives "
                "%lld", i, t->name, s->dim, (long long)t->dims[s->dim], (long long)s->full,
                p->n_devices, (long long)(share * per));
        return -1;
    }
    return 0;
}

static int check_tensor_fields(const gp_plan *p, int i, char *why, size_t n)
{
    const gp_plan_tensor *t = &p->tensors[i];
    const char *nm = t->name ? t->name : "?";
    if ((int)t->kind < 0 || t->kind >= GP_TENSOR_KIND_COUNT) {
        gp_errf(why, n, "tensor %d (%s): kind %d out of range", i, nm, (int)t->kind);
        return -1;
    }
    if ((int)t->dtype < 0 || t->dtype >= GP_DTYPE_COUNT) {
        gp_errf(why, n, "tensor %d (%s): dtype %d out of range", i, nm, (int)t->dtype);
        return -1;
    }
    if (gp_dtype_is_quant(t->dtype) && (t->kind != GP_TENSOR_WEIGHT || t->split.groups)) {
        gp_errf(why, n, "tensor %d (%s): a %s %s (only whole weights are quantized)", i, nm,
                gp_dtype_name(t->dtype), gp_tensor_kind_name(t->kind));
        return -1;
    }
    if (t->ndim < 0 || t->ndim > GP_MAX_DIMS) {
        gp_errf(why, n, "tensor %d (%s): ndim %d > %d", i, nm, t->ndim, GP_MAX_DIMS);
        return -1;
    }
    if ((int)t->region < 0 || t->region >= GP_REGION_EXTRAS) {
        gp_errf(why, n, "tensor %d (%s): region %d out of range", i, nm, (int)t->region);
        return -1;
    }
    for (int d = 0; d < GP_MAX_DIMS; d++) {
        if (d >= t->ndim) {
            if (t->dims[d] != 1 || t->sym[d] != -1 || t->stride[d] != 0) {
                gp_errf(why, n, "tensor %d (%s): unused dim %d not (1, -1, 0)", i, nm, d);
                return -1;
            }
            continue;
        }
        if (t->dims[d] < 1 || t->dims[d] > GP_PLAN_MAX_DIM) {
            gp_errf(why, n, "tensor %d (%s): dim %d is %lld, outside [1, %lld]", i, nm, d,
                    (long long)t->dims[d], (long long)GP_PLAN_MAX_DIM);
            return -1;
        }
        if (t->sym[d] < -1 || t->sym[d] >= p->n_syms) {
            gp_errf(why, n, "tensor %d (%s): dim %d: sym reference %d out of range (%d syms)", i, nm,
                    d, t->sym[d], p->n_syms);
            return -1;
        }
        if (t->sym[d] >= 0 && t->dims[d] > p->syms[t->sym[d]].bound) {
            gp_errf(why, n, "tensor %d (%s): dim %d is %lld, above the bound %lld of sym %s", i, nm,
                    d, (long long)t->dims[d], (long long)p->syms[t->sym[d]].bound,
                    p->syms[t->sym[d]].name);
            return -1;
        }
        /* Symbolic dims are planned at their bounds; a smaller one would overflow its storage
         * when an eval uses the bound. */
        if (t->sym[d] >= 0 && t->dims[d] < p->syms[t->sym[d]].bound) {
            gp_errf(why, n, "tensor %d (%s): dim %d is %lld, below the bound %lld of sym %s", i, nm,
                    d, (long long)t->dims[d], (long long)p->syms[t->sym[d]].bound,
                    p->syms[t->sym[d]].name);
            return -1;
        }
        if (t->stride[d] < 0 || t->stride[d] > GP_PLAN_MAX_DIM) {
            gp_errf(why, n, "tensor %d (%s): stride %d is %lld, out of range", i, nm, d,
                    (long long)t->stride[d]);
            return -1;
        }
    }
    int64_t span = gp_plan_tensor_span(t);
    if (span < 0) {
        gp_errf(why, n, "tensor %d (%s): size overflows", i, nm);
        return -1;
    }
    if (t->size < span) {
        gp_errf(why, n, "tensor %d (%s): size %lld smaller than its elements' span %lld", i, nm,
                (long long)t->size, (long long)span);
        return -1;
    }
    int is_view = t->kind == GP_TENSOR_VIEW;
    if (is_view != (t->view_src >= 0) || (!is_view && t->view_src != -1)) {
        gp_errf(why, n, "tensor %d (%s): kind %s with view source %d", i, nm,
                gp_tensor_kind_name(t->kind), t->view_src);
        return -1;
    }
    if (t->view_src >= p->n_tensors) {
        gp_errf(why, n, "tensor %d (%s): view source %d out of range (%d tensors)", i, nm,
                t->view_src, p->n_tensors);
        return -1;
    }
    if (!is_view && t->region != kind_region(t->kind)) {
        gp_errf(why, n, "tensor %d (%s): kind %s placed in region %s", i, nm,
                gp_tensor_kind_name(t->kind), gp_region_name(t->region));
        return -1;
    }
    const gp_plan_region *reg = &p->regions[t->region];
    if (t->offset < 0 || t->offset > reg->size || t->size > reg->size - t->offset) {
        gp_errf(why, n, "tensor %d (%s): bytes [%lld, +%lld) past the end of region %s (%lld)", i,
                nm, (long long)t->offset, (long long)t->size, gp_region_name(t->region),
                (long long)reg->size);
        return -1;
    }
    if (!is_view && t->offset % reg->alignment != 0) {
        gp_errf(why, n, "tensor %d (%s): offset %lld not aligned to %lld", i, nm,
                (long long)t->offset, (long long)reg->alignment);
        return -1;
    }
    if (!is_view && t->view_offset != 0) {
        gp_errf(why, n, "tensor %d (%s): view offset %lld on a non-view", i, nm,
                (long long)t->view_offset);
        return -1;
    }
    if (t->producer < -1 || t->producer >= p->n_nodes) {
        gp_errf(why, n, "tensor %d (%s): producer %d out of range (%d nodes)", i, nm, t->producer,
                p->n_nodes);
        return -1;
    }
    int max_step = p->n_nodes > 0 ? p->n_nodes - 1 : 0;
    if (t->first < 0 || t->first > t->last || t->last > max_step) {
        gp_errf(why, n, "tensor %d (%s): lifetime [%d, %d] outside the %d steps", i, nm, t->first,
                t->last, p->n_nodes);
        return -1;
    }
    if (t->producer >= 0 && t->first > t->producer) {
        gp_errf(why, n, "tensor %d (%s): first step %d is not its producer %d", i, nm, t->first,
                t->producer);
        return -1;
    }
    return check_split(p, i, why, n);
}

/* Views: acyclic chains, inside their base, same region, offsets consistent. Runs after every
 * tensor passed check_tensor_fields. */
static int check_views(const gp_plan *p, char *why, size_t n)
{
    for (int i = 0; i < p->n_tensors; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        if (t->view_src < 0)
            continue;
        /* A chain longer than the tensor count must revisit a tensor. */
        int steps = 0;
        for (int j = t->view_src; j >= 0; j = p->tensors[j].view_src) {
            if (j == i || ++steps > p->n_tensors) {
                gp_errf(why, n, "tensor %d (%s): view chain is a cycle", i, t->name);
                return -1;
            }
        }
        const gp_plan_tensor *s = &p->tensors[t->view_src];
        if (t->region != s->region) {
            gp_errf(why, n, "tensor %d (%s): view in region %s, its source %s in %s", i, t->name,
                    gp_region_name(t->region), s->name, gp_region_name(s->region));
            return -1;
        }
        if (t->view_offset < 0 || t->view_offset > s->size || t->size > s->size - t->view_offset) {
            gp_errf(why, n, "tensor %d (%s): view [%lld, +%lld) outside its base %s (%lld bytes)", i,
                    t->name, (long long)t->view_offset, (long long)t->size, s->name,
                    (long long)s->size);
            return -1;
        }
        if (t->offset != s->offset + t->view_offset) {
            gp_errf(why, n, "tensor %d (%s): offset %lld is not its base's %lld + view offset %lld",
                    i, t->name, (long long)t->offset, (long long)s->offset,
                    (long long)t->view_offset);
            return -1;
        }
    }
    return 0;
}

static int check_tensor_links(const gp_plan *p, unsigned char *slot_used, char *why, size_t n)
{
    int64_t rec = GP_EXTRAS_RECORD_BYTES(p->n_devices);
    for (int i = 0; i < p->n_tensors; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        if (t->inplace_of != -1) {
            if (t->inplace_of < 0 || t->inplace_of >= p->n_tensors || t->inplace_of == i) {
                gp_errf(why, n, "tensor %d (%s): in-place target %d out of range", i, t->name,
                        t->inplace_of);
                return -1;
            }
            const gp_plan_tensor *s = &p->tensors[t->inplace_of];
            if (t->kind != GP_TENSOR_INTERMEDIATE || s->region != GP_REGION_ARENA ||
                s->offset != t->offset || s->size < t->size) {
                gp_errf(why, n, "tensor %d (%s): in-place target %s does not hold its bytes", i,
                        t->name, s->name);
                return -1;
            }
            /* Its storage (the view root, whose last covers every view) must be dead by then. */
            const gp_plan_tensor *r = s;
            while (r->view_src >= 0)
                r = &p->tensors[r->view_src];
            if (r->last > t->first) {
                gp_errf(why, n, "tensor %d (%s): in-place target %s is still read at step %d, "
                        "after step %d overwrites it", i, t->name, s->name, r->last, t->first);
                return -1;
            }
        }
        if (t->extras_offset < 0 || t->extras_offset % rec != 0 ||
            t->extras_offset > p->regions[GP_REGION_EXTRAS].size - rec ||
            t->extras_offset / rec >= p->n_tensors) {
            gp_errf(why, n, "tensor %d (%s): extras offset %lld is not a record slot of region "
                    "extras (%lld bytes, records of %lld)", i, t->name,
                    (long long)t->extras_offset, (long long)p->regions[GP_REGION_EXTRAS].size,
                    (long long)rec);
            return -1;
        }
        int64_t slot = t->extras_offset / rec;
        if (slot_used[slot]) {
            gp_errf(why, n, "tensor %d (%s): extras slot %lld shared with another tensor", i,
                    t->name, (long long)slot);
            return -1;
        }
        slot_used[slot] = 1;
    }
    return 0;
}

/* The storage a tensor's bytes belong to: its view root, then (in-place) its target's, repeated.
 * -1 when the chain does not end (a cycle). */
static int storage_group(const gp_plan *p, int t)
{
    for (int steps = 0; steps <= 2 * p->n_tensors; steps++) {
        while (p->tensors[t].view_src >= 0)
            t = p->tensors[t].view_src; /* acyclic: check_views ran */
        if (p->tensors[t].inplace_of < 0)
            return t;
        t = p->tensors[t].inplace_of;
    }
    return -1;
}

typedef struct {
    int64_t offset, end; /* bytes [offset, end) */
    int first, last;     /* steps [first, last] */
    int tensor;          /* the group's root, for messages */
} arena_group;

static int by_offset(const void *a, const void *b)
{
    const arena_group *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* No two arena storages alive at the same step share a byte (in-place chains share one storage).
 * Independent of the planner's checker: the runtime trusts these offsets. */
static int check_arena(const gp_plan *p, char *why, size_t n)
{
    int nt = p->n_tensors;
    int *grp = malloc(((size_t)nt + 1) * sizeof *grp);       /* [nt] tensor -> group index */
    arena_group *g = malloc(((size_t)nt + 1) * sizeof *g);   /* [n_groups] */
    if (!grp || !g) {
        free(grp);
        free(g);
        gp_errf(why, n, "out of memory");
        return -1;
    }
    int ng = 0, rc = 0;
    for (int i = 0; i < nt; i++)
        grp[i] = -1;
    for (int i = 0; i < nt && rc == 0; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        if (t->region != GP_REGION_ARENA || t->view_src >= 0)
            continue;
        int r = storage_group(p, i);
        if (r < 0) {
            gp_errf(why, n, "tensor %d (%s): in-place chain is a cycle", i, t->name);
            rc = -1;
            break;
        }
        if (grp[r] < 0) {
            grp[r] = ng;
            g[ng++] = (arena_group){t->offset, t->offset + t->size, t->first, t->last, r};
        }
        arena_group *a = &g[grp[r]];
        if (t->offset + t->size > a->end)
            a->end = t->offset + t->size;
        if (t->first < a->first)
            a->first = t->first;
        if (t->last > a->last)
            a->last = t->last;
    }
    if (rc == 0)
        qsort(g, (size_t)ng, sizeof *g, by_offset);
    for (int i = 0; i < ng && rc == 0; i++) {
        for (int j = i + 1; j < ng && g[j].offset < g[i].end; j++) {
            if (g[i].first <= g[j].last && g[j].first <= g[i].last) {
                gp_errf(why, n, "arena tensors %s [%lld, %lld) and %s [%lld, %lld) overlap while "
                        "both alive (steps %d..%d and %d..%d)", p->tensors[g[i].tensor].name,
                        (long long)g[i].offset, (long long)g[i].end, p->tensors[g[j].tensor].name,
                        (long long)g[j].offset, (long long)g[j].end, g[i].first, g[i].last,
                        g[j].first, g[j].last);
                rc = -1;
                break;
            }
        }
    }
    free(grp);
    free(g);
    return rc;
}

static int check_tensor_ref(const gp_plan *p, int node, const char *what, int id, char *why,
                            size_t n)
{
    if (id < 0 || id >= p->n_tensors) {
        gp_errf(why, n, "node %d: %s: tensor reference %d out of range (%d tensors)", node, what, id,
                p->n_tensors);
        return -1;
    }
    return 0;
}

/* What a node record can hold (gp_plan_attrs_encode): float32 values in an op's float slots past
 * the f64 ones (NaN included), and nothing of its own in the integer slot that carries them. */
static int check_attr_storage(const gp_plan_node *nd, int i, char *why, size_t n)
{
    int n_attrs;
    const gp_attr_info *e = gp_op_attrs(nd->op, &n_attrs);
    for (int k = 0; k < n_attrs; k++) {
        double v = e[k].kind == GP_ATTR_F ? nd->attrs.f[e[k].slot] : 0;
        if (e[k].slot >= GP_PLAN_FATTRS && v == v && (double)(float)v != v) {
            gp_errf(why, n, "node %d: %s's %s %.17g is not a float32 value", i,
                    gp_op_get(nd->op)->name, e[k].name, v);
            return -1;
        }
    }
    if (gp_op_attr_slots(nd->op, GP_ATTR_F) > GP_PLAN_FATTRS && nd->attrs.i[GP_MAX_IATTRS - 1]) {
        gp_errf(why, n, "node %d: %s's unused integer attribute %d is %lld, not 0", i,
                gp_op_get(nd->op)->name, GP_MAX_IATTRS - 1,
                (long long)nd->attrs.i[GP_MAX_IATTRS - 1]);
        return -1;
    }
    return 0;
}

static int check_nodes(const gp_plan *p, char *why, size_t n)
{
    for (int i = 0; i < p->n_nodes; i++) {
        const gp_plan_node *nd = &p->nodes[i];
        const gp_op_info *info = gp_op_get(nd->op);
        if (!info || nd->op == GP_OP_NONE) {
            gp_errf(why, n, "node %d: unknown op %d", i, (int)nd->op);
            return -1;
        }
        if (nd->n_inputs < info->min_inputs || nd->n_inputs > info->max_inputs) {
            gp_errf(why, n, "node %d: op %s takes %d..%d inputs, has %d", i, info->name,
                    info->min_inputs, info->max_inputs, nd->n_inputs);
            return -1;
        }
        if (check_attr_storage(nd, i, why, n))
            return -1;
        for (int k = 0; k < GP_MAX_INPUTS; k++) {
            if (k >= nd->n_inputs) {
                if (nd->inputs[k] != -1) {
                    gp_errf(why, n, "node %d: unused input %d is %d, not -1", i, k, nd->inputs[k]);
                    return -1;
                }
                continue;
            }
            if (check_tensor_ref(p, i, "input", nd->inputs[k], why, n))
                return -1;
            const gp_plan_tensor *in = &p->tensors[nd->inputs[k]];
            /* The kernels that read quantized weights: get_rows' table, matmul's [N, K] b, moe's
             * router and experts. */
            if (gp_dtype_is_quant(in->dtype) && !(nd->op == GP_OP_GET_ROWS && k == 0) &&
                !(nd->op == GP_OP_MATMUL && k == 1 && nd->attrs.i[GP_MATMUL_TB] &&
                  !nd->attrs.i[GP_MATMUL_TA] && in->ndim == 2) &&
                !(nd->op == GP_OP_MOE && k >= 1)) {
                gp_errf(why, n, "node %d: op %s reads %s tensor %s as input %d", i, info->name,
                        gp_dtype_name(in->dtype), in->name, k);
                return -1;
            }
            if (in->producer >= i) {
                gp_errf(why, n, "node %d: reads tensor %s before step %d produces it", i, in->name,
                        in->producer);
                return -1;
            }
            if (in->last < i) {
                gp_errf(why, n, "node %d: reads tensor %s after its last step %d", i, in->name,
                        in->last);
                return -1;
            }
        }
        if (check_tensor_ref(p, i, "output", nd->output, why, n))
            return -1;
        if (p->tensors[nd->output].producer != i) {
            gp_errf(why, n, "node %d: output %s names producer %d", i, p->tensors[nd->output].name,
                    p->tensors[nd->output].producer);
            return -1;
        }
        if (nd->workspace != -1) {
            if (check_tensor_ref(p, i, "workspace", nd->workspace, why, n))
                return -1;
            const gp_plan_tensor *w = &p->tensors[nd->workspace];
            if (nd->workspace == nd->output || w->kind != GP_TENSOR_INTERMEDIATE ||
                w->producer != i || w->last != i) {
                gp_errf(why, n, "node %d: workspace %s is not an arena tensor live at step %d only",
                        i, w->name, i);
                return -1;
            }
        }
    }
    for (int i = 0; i < p->n_tensors; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        if (t->producer >= 0 && p->nodes[t->producer].output != i &&
            p->nodes[t->producer].workspace != i) {
            gp_errf(why, n, "tensor %d (%s): producer %d neither outputs it nor uses it as its "
                    "workspace", i, t->name, t->producer);
            return -1;
        }
        if (t->producer < 0 || t->first == t->producer)
            continue;
        /* Only an attention's workspace and output and a matmul's output may start before their
         * node (docs/plan-format.md). */
        const gp_plan_node *pn = &p->nodes[t->producer];
        int early_ok = (pn->op == GP_OP_ATTENTION && (pn->workspace == i || pn->output == i)) ||
                       (pn->op == GP_OP_MATMUL && pn->output == i);
        if (t->first > t->producer || !early_ok) {
            gp_errf(why, n, "tensor %d (%s): first step %d is not its producer %d", i, t->name,
                    t->first, t->producer);
            return -1;
        }
    }
    return 0;
}

int gp_plan_validate(const gp_plan *p, char *why, size_t why_len)
{
    if (!p) {
        gp_errf(why, why_len, "no plan");
        return -1;
    }
    if (p->n_devices < 1 || p->n_devices > GP_PLAN_MAX_DEVICES) {
        gp_errf(why, why_len, "n_devices %d outside [1, %d]", p->n_devices, GP_PLAN_MAX_DEVICES);
        return -1;
    }
    if (p->strategy < 0 || p->strategy > 2) {
        gp_errf(why, why_len, "strategy %d out of range", p->strategy);
        return -1;
    }
    if (p->n_syms < 0 || p->n_tensors < 0 || p->n_nodes < 0) {
        gp_errf(why, why_len, "negative count");
        return -1;
    }
    for (int s = 0; s < p->n_syms; s++) {
        if (p->syms[s].bound < 1 || p->syms[s].bound > GP_PLAN_MAX_DIM) {
            gp_errf(why, why_len, "sym %d (%s): bound %lld outside [1, %lld]", s, p->syms[s].name,
                    (long long)p->syms[s].bound, (long long)GP_PLAN_MAX_DIM);
            return -1;
        }
    }
    if (check_regions(p, why, why_len))
        return -1;
    for (int i = 0; i < p->n_tensors; i++)
        if (check_tensor_fields(p, i, why, why_len))
            return -1;
    if (check_views(p, why, why_len))
        return -1;
    unsigned char *slot_used = calloc((size_t)p->n_tensors + 1, 1);
    if (!slot_used) {
        gp_errf(why, why_len, "out of memory");
        return -1;
    }
    int rc = check_tensor_links(p, slot_used, why, why_len);
    free(slot_used);
    if (rc)
        return -1;
    if (check_nodes(p, why, why_len))
        return -1;
    return check_arena(p, why, why_len);
}

/* ---- parsing ---- */

typedef struct {
    const unsigned char *data; /* [len] the whole file */
    size_t len;
    const unsigned char *sec[GP_PLAN_SEC_NODES + 1]; /* by section id; NULL when absent */
    uint64_t sec_size[GP_PLAN_SEC_NODES + 1];
    char *why;
    size_t why_len;
} reader;

static const char *section_name(uint32_t id)
{
    switch (id) {
    case GP_PLAN_SEC_STRINGS: return "strings";
    case GP_PLAN_SEC_META: return "meta";
    case GP_PLAN_SEC_REGIONS: return "regions";
    case GP_PLAN_SEC_SYMS: return "syms";
    case GP_PLAN_SEC_TENSORS: return "tensors";
    case GP_PLAN_SEC_NODES: return "nodes";
    default: return "unknown";
    }
}

/* A copy of the string at `ref` in the string table; NULL with the reason in r->why when the
 * reference is out of range or the string runs off the table. `none_ok` accepts GP_PLAN_STR_NONE
 * (and then returns NULL with *failed left 0). */
static char *read_string(reader *r, uint32_t ref, int none_ok, const char *what, int *failed)
{
    uint64_t size = r->sec_size[GP_PLAN_SEC_STRINGS];
    if (none_ok && ref == GP_PLAN_STR_NONE)
        return NULL;
    *failed = 1;
    if (ref >= size) {
        gp_errf(r->why, r->why_len, "%s: string reference %u out of range (string table has %llu "
                "bytes)", what, ref, (unsigned long long)size);
        return NULL;
    }
    const unsigned char *s = r->sec[GP_PLAN_SEC_STRINGS] + ref;
    const unsigned char *nul = memchr(s, 0, (size_t)(size - ref));
    if (!nul) {
        gp_errf(r->why, r->why_len, "%s: string at %u not NUL-terminated inside the string table",
                what, ref);
        return NULL;
    }
    char *copy = malloc((size_t)(nul - s) + 1);
    if (!copy) {
        gp_errf(r->why, r->why_len, "out of memory");
        return NULL;
    }
    memcpy(copy, s, (size_t)(nul - s) + 1);
    *failed = 0;
    return copy;
}

/* The count and record size of a record section; checks count * record size against the section
 * size before anything is allocated. */
static int read_records(reader *r, uint32_t id, uint32_t min_rec, uint32_t *count,
                        uint32_t *rec_bytes, const unsigned char **first)
{
    const unsigned char *s = r->sec[id];
    uint64_t size = r->sec_size[id];
    if (size < 8) {
        gp_errf(r->why, r->why_len, "section %s: %llu bytes, too short for its count",
                section_name(id), (unsigned long long)size);
        return -1;
    }
    *count = rd_u32(s);
    *rec_bytes = rd_u32(s + 4);
    if (*rec_bytes < min_rec || *rec_bytes > (1u << 16) || *rec_bytes % 8 != 0) {
        gp_errf(r->why, r->why_len, "section %s: record size %u (this loader needs %u, a multiple "
                "of 8, at most 65536)", section_name(id), *rec_bytes, min_rec);
        return -1;
    }
    if (*count > (size - 8) / *rec_bytes || *count > (uint32_t)INT32_MAX) {
        gp_errf(r->why, r->why_len, "section %s: count %u does not fit in its %llu bytes",
                section_name(id), *count, (unsigned long long)size);
        return -1;
    }
    *first = s + 8;
    return 0;
}

static int parse_meta(reader *r, gp_plan *p)
{
    const unsigned char *m = r->sec[GP_PLAN_SEC_META];
    if (r->sec_size[GP_PLAN_SEC_META] < GP_PLAN_META_BYTES) {
        gp_errf(r->why, r->why_len, "section meta: %llu bytes, needs %d",
                (unsigned long long)r->sec_size[GP_PLAN_SEC_META], GP_PLAN_META_BYTES);
        return -1;
    }
    uint32_t n_dev = rd_u32(m), strategy = rd_u32(m + 4);
    /* Values past INT32_MAX become -1: still out of range for validation, which names them. */
    p->n_devices = n_dev > INT32_MAX ? -1 : (int)n_dev;
    p->strategy = strategy > INT32_MAX ? -1 : (int)strategy;
    int failed = 0;
    p->graph_name = read_string(r, rd_u32(m + 8), 0, "graph name", &failed);
    if (failed)
        return -1;
    p->source = read_string(r, rd_u32(m + 12), 0, "source name", &failed);
    if (failed)
        return -1;
    p->method = read_string(r, rd_u32(m + 16), 0, "method", &failed);
    if (failed)
        return -1;
    p->plan_seconds = rd_f64(m + 24);
    p->lower_bound = rd_i64(m + 32);
    p->naive_bytes = rd_i64(m + 40);
    return 0;
}

static int parse_regions(reader *r, gp_plan *p)
{
    uint32_t count, rec;
    const unsigned char *q;
    if (read_records(r, GP_PLAN_SEC_REGIONS, GP_PLAN_REGION_BYTES, &count, &rec, &q))
        return -1;
    if (count != GP_REGION_COUNT) {
        gp_errf(r->why, r->why_len, "section regions: %u regions, expected %d", count,
                GP_REGION_COUNT);
        return -1;
    }
    for (uint32_t i = 0; i < count; i++, q += rec) {
        p->regions[i].size = rd_i64(q);
        p->regions[i].alignment = rd_i64(q + 8);
    }
    return 0;
}

static int parse_syms(reader *r, gp_plan *p, uint32_t count, uint32_t rec, const unsigned char *q)
{
    char what[64];
    for (uint32_t i = 0; i < count; i++, q += rec) {
        int failed = 0;
        snprintf(what, sizeof what, "sym %u name", i);
        p->syms[i].name = read_string(r, rd_u32(q), 0, what, &failed);
        if (failed)
            return -1;
        p->syms[i].bound = rd_i64(q + 8);
    }
    return 0;
}

/* Reads an i32 tensor/node reference; values that do not fit an int become INT32_MIN (refused by
 * validation as out of range). */
static int parse_tensors(reader *r, gp_plan *p, uint32_t count, uint32_t rec,
                         const unsigned char *q)
{
    char what[64];
    for (uint32_t i = 0; i < count; i++, q += rec) {
        gp_plan_tensor *t = &p->tensors[i];
        int failed = 0;
        snprintf(what, sizeof what, "tensor %u name", i);
        t->name = read_string(r, rd_u32(q), 0, what, &failed);
        if (failed)
            return -1;
        snprintf(what, sizeof what, "tensor %u weight name", i);
        t->weight_name = read_string(r, rd_u32(q + 4), 1, what, &failed);
        if (failed)
            return -1;
        t->kind = (gp_tensor_kind)q[8];
        t->dtype = (gp_dtype)q[9];
        t->ndim = q[10];
        t->region = (gp_region)q[11];
        t->view_src = rd_i32(q + 12);
        t->inplace_of = rd_i32(q + 16);
        t->producer = rd_i32(q + 20);
        t->first = rd_i32(q + 24);
        t->last = rd_i32(q + 28);
        for (int d = 0; d < GP_MAX_DIMS; d++) {
            t->dims[d] = rd_i64(q + 32 + 8 * d);
            t->sym[d] = rd_i32(q + 64 + 4 * d);
            t->stride[d] = rd_i64(q + 80 + 8 * d);
        }
        t->view_offset = rd_i64(q + 112);
        t->offset = rd_i64(q + 120);
        t->size = rd_i64(q + 128);
        t->extras_offset = rd_i64(q + 136);
        uint32_t line = rd_u32(q + 144), col = rd_u32(q + 148);
        t->line = line > INT32_MAX ? 0 : (int)line;
        t->col = col > INT32_MAX ? 0 : (int)col;
        if (rec >= GP_PLAN_TENSOR_BYTES) { /* version 1.1 */
            t->split.groups = rd_i32(q + 152);
            t->split.dim = rd_i32(q + 156);
            t->split.unit = rd_i64(q + 160);
            t->split.full = rd_i64(q + 168);
        }
    }
    return 0;
}

/* Float32 attributes beyond the record's f64 ones sit in the last integer slot, two to a slot. */
_Static_assert(GP_MAX_FATTRS - GP_PLAN_FATTRS <= 2, "float32 attributes: two fit in iattr[3]");

static int packs_floats(gp_op op) { return gp_op_attr_slots(op, GP_ATTR_F) > GP_PLAN_FATTRS; }

void gp_plan_attrs_encode(gp_op op, const gp_attrs *a, int64_t iattr[GP_MAX_IATTRS],
                          double fattr[GP_PLAN_FATTRS])
{
    memcpy(iattr, a->i, sizeof a->i);
    memcpy(fattr, a->f, sizeof(double) * GP_PLAN_FATTRS);
    if (packs_floats(op)) {
        uint64_t bits = 0;
        for (int k = GP_PLAN_FATTRS; k < GP_MAX_FATTRS; k++) {
            float v = (float)a->f[k];
            uint32_t u;
            memcpy(&u, &v, 4);
            bits |= (uint64_t)u << (32 * (k - GP_PLAN_FATTRS));
        }
        iattr[GP_MAX_IATTRS - 1] = (int64_t)bits;
    }
}

void gp_plan_attrs_decode(gp_op op, const int64_t iattr[GP_MAX_IATTRS],
                          const double fattr[GP_PLAN_FATTRS], gp_attrs *a)
{
    memset(a, 0, sizeof *a);
    memcpy(a->i, iattr, sizeof a->i);
    memcpy(a->f, fattr, sizeof(double) * GP_PLAN_FATTRS);
    if (packs_floats(op)) {
        uint64_t bits = (uint64_t)iattr[GP_MAX_IATTRS - 1];
        for (int k = GP_PLAN_FATTRS; k < GP_MAX_FATTRS; k++) {
            uint32_t u = (uint32_t)(bits >> (32 * (k - GP_PLAN_FATTRS)));
            float v;
            memcpy(&v, &u, 4);
            a->f[k] = v;
        }
        a->i[GP_MAX_IATTRS - 1] = 0;
    }
}

static void parse_nodes(gp_plan *p, uint32_t count, uint32_t rec, const unsigned char *q)
{
    for (uint32_t i = 0; i < count; i++, q += rec) {
        gp_plan_node *nd = &p->nodes[i];
        nd->op = (gp_op)rd_u16(q);
        nd->n_inputs = q[2];
        for (int k = 0; k < GP_MAX_INPUTS; k++) /* 4 and 5 from version 1.2, 6..9 from 1.3 */
            nd->inputs[k] = k < 4                               ? rd_i32(q + 4 + 4 * k)
                            : k < 6 && rec >= GP_PLAN_NODE_BYTES_1_2 ? rd_i32(q + 88 + 4 * (k - 4))
                            : k >= 6 && rec >= GP_PLAN_NODE_BYTES ? rd_i32(q + 96 + 4 * (k - 6))
                                                                 : -1;
        nd->output = rd_i32(q + 20);
        nd->workspace = rd_i32(q + 24);
        uint32_t line = rd_u32(q + 28), col = rd_u32(q + 32);
        nd->line = line > INT32_MAX ? 0 : (int)line;
        nd->col = col > INT32_MAX ? 0 : (int)col;
        int64_t iattr[GP_MAX_IATTRS];
        double fattr[GP_PLAN_FATTRS];
        for (int k = 0; k < GP_MAX_IATTRS; k++)
            iattr[k] = rd_i64(q + 40 + 8 * k);
        for (int k = 0; k < GP_PLAN_FATTRS; k++)
            fattr[k] = rd_f64(q + 72 + 8 * k);
        gp_plan_attrs_decode(nd->op, iattr, fattr, &nd->attrs);
    }
}

/* Header and section table: everything that locates the sections. */
static int parse_header(reader *r, uint16_t *minor)
{
    const unsigned char *h = r->data;
    size_t len = r->len;
    if (len < GP_PLAN_HEADER_BYTES) {
        gp_errf(r->why, r->why_len, "file too short: %zu bytes, the header alone is %d", len,
                GP_PLAN_HEADER_BYTES);
        return -1;
    }
    if (memcmp(h, GP_PLAN_MAGIC, 6) != 0) {
        gp_errf(r->why, r->why_len, "bad magic: not a gplan plan file");
        return -1;
    }
    if (memcmp(h + 6, GP_PLAN_TRIPWIRE, 4) != 0) {
        gp_errf(r->why, r->why_len, "line-ending tripwire damaged: file was transferred as text?");
        return -1;
    }
    uint16_t major = rd_u16(h + 10);
    *minor = rd_u16(h + 12);
    if (major != GP_PLAN_VERSION_MAJOR) {
        gp_errf(r->why, r->why_len, "unsupported major version %u (this loader reads %d.x)", major,
                GP_PLAN_VERSION_MAJOR);
        return -1;
    }
    uint16_t header_bytes = rd_u16(h + 14);
    if (header_bytes < GP_PLAN_HEADER_BYTES || header_bytes % 8 != 0 || header_bytes > len) {
        gp_errf(r->why, r->why_len, "header size %u (needs a multiple of 8 in [%d, file size])",
                header_bytes, GP_PLAN_HEADER_BYTES);
        return -1;
    }
    if (rd_u32(h + 16) != GP_PLAN_SENTINEL_U32) {
        gp_errf(r->why, r->why_len, "u32 sentinel is 0x%08x, expected 0x%08x: byte order or width "
                "mismatch", rd_u32(h + 16), GP_PLAN_SENTINEL_U32);
        return -1;
    }
    if (rd_u64(h + 24) != GP_PLAN_SENTINEL_U64) {
        gp_errf(r->why, r->why_len, "u64 sentinel is 0x%016llx, expected 0x%016llx: byte order or "
                "width mismatch", (unsigned long long)rd_u64(h + 24),
                (unsigned long long)GP_PLAN_SENTINEL_U64);
        return -1;
    }
    if (rd_f64(h + 32) != GP_PLAN_SENTINEL_F64) {
        gp_errf(r->why, r->why_len, "f64 sentinel is %g, expected %g: floating-point format "
                "mismatch", rd_f64(h + 32), GP_PLAN_SENTINEL_F64);
        return -1;
    }
    uint64_t file_size = rd_u64(h + 40);
    if (file_size != len) {
        gp_errf(r->why, r->why_len, "file size field says %llu bytes, the file has %zu (%s?)",
                (unsigned long long)file_size, len, len < file_size ? "truncated" : "data appended");
        return -1;
    }
    uint32_t n_sec = rd_u32(h + 20);
    if (n_sec > (len - header_bytes) / GP_PLAN_SECTION_ENTRY_BYTES) {
        gp_errf(r->why, r->why_len, "section count %u does not fit in the file", n_sec);
        return -1;
    }
    size_t table_end = header_bytes + (size_t)n_sec * GP_PLAN_SECTION_ENTRY_BYTES;
    uint32_t crc = gp_plan_crc(0, h, 60);
    crc = gp_plan_crc(crc, h + GP_PLAN_HEADER_BYTES, table_end - GP_PLAN_HEADER_BYTES);
    if (crc != rd_u32(h + 60)) {
        gp_errf(r->why, r->why_len, "header checksum mismatch (stored 0x%08x, computed 0x%08x)",
                rd_u32(h + 60), crc);
        return -1;
    }
    for (uint32_t i = 0; i < n_sec; i++) {
        const unsigned char *e = h + header_bytes + (size_t)i * GP_PLAN_SECTION_ENTRY_BYTES;
        uint32_t id = rd_u32(e), sec_crc = rd_u32(e + 4);
        uint64_t off = rd_u64(e + 8), size = rd_u64(e + 16);
        if (off < table_end || off > len || size > len - off) {
            gp_errf(r->why, r->why_len, "section %u (%s): bytes [%llu, +%llu) outside the file's "
                    "data (%zu..%zu)", i, section_name(id), (unsigned long long)off,
                    (unsigned long long)size, table_end, len);
            return -1;
        }
        if (off % 8 != 0) {
            gp_errf(r->why, r->why_len, "section %u (%s): offset %llu not a multiple of 8", i,
                    section_name(id), (unsigned long long)off);
            return -1;
        }
        if (gp_plan_crc(0, h + off, (size_t)size) != sec_crc) {
            gp_errf(r->why, r->why_len, "checksum mismatch in section %s", section_name(id));
            return -1;
        }
        if (id < GP_PLAN_SEC_STRINGS || id > GP_PLAN_SEC_NODES)
            continue; /* a section of a newer minor version */
        if (r->sec[id]) {
            gp_errf(r->why, r->why_len, "duplicate section %s", section_name(id));
            return -1;
        }
        r->sec[id] = h + off;
        r->sec_size[id] = size;
    }
    for (uint32_t id = GP_PLAN_SEC_STRINGS; id <= GP_PLAN_SEC_NODES; id++) {
        if (!r->sec[id]) {
            gp_errf(r->why, r->why_len, "missing section %s", section_name(id));
            return -1;
        }
    }
    if (r->sec_size[GP_PLAN_SEC_STRINGS] > UINT32_MAX) {
        gp_errf(r->why, r->why_len, "string table of %llu bytes is over 4 GiB",
                (unsigned long long)r->sec_size[GP_PLAN_SEC_STRINGS]);
        return -1;
    }
    return 0;
}

static int parse(reader *r, gp_plan **out)
{
    uint16_t minor;
    if (parse_header(r, &minor))
        return -1;
    uint32_t n_syms, n_tensors, n_nodes, rec_s, rec_t, rec_n;
    const unsigned char *q_s, *q_t, *q_n;
    if (read_records(r, GP_PLAN_SEC_SYMS, GP_PLAN_SYM_BYTES, &n_syms, &rec_s, &q_s) ||
        read_records(r, GP_PLAN_SEC_TENSORS, GP_PLAN_TENSOR_BYTES_1_0, &n_tensors, &rec_t, &q_t) ||
        read_records(r, GP_PLAN_SEC_NODES, GP_PLAN_NODE_BYTES_1_1, &n_nodes, &rec_n, &q_n))
        return -1;
    /* The counts are bounded by the file's size now, so these allocations are too. */
    gp_plan *p = gp_plan_alloc((int)n_syms, (int)n_tensors, (int)n_nodes);
    if (!p) {
        gp_errf(r->why, r->why_len, "out of memory");
        return -1;
    }
    p->version_minor = minor;
    if (parse_meta(r, p) || parse_regions(r, p) || parse_syms(r, p, n_syms, rec_s, q_s) ||
        parse_tensors(r, p, n_tensors, rec_t, q_t)) {
        gp_plan_free(p);
        return -1;
    }
    parse_nodes(p, n_nodes, rec_n, q_n);
    if (gp_plan_validate(p, r->why, r->why_len)) {
        gp_plan_free(p);
        return -1;
    }
    *out = p;
    return 0;
}

int gp_plan_load_mem(const void *data, size_t len, const char *name, gp_plan **out, char *err,
                     size_t err_len)
{
    char why[512] = "";
    if (out)
        *out = NULL;
    if (!name)
        name = "<memory>";
    if (!out || (!data && len > 0)) {
        gp_errf(err, err_len, "%s: bad plan file (no data)", name);
        return -1;
    }
    reader r = {.data = data, .len = len, .why = why, .why_len = sizeof why};
    if (parse(&r, out)) {
        gp_errf(err, err_len, "%s: bad plan file (%s)", name, why);
        return -1;
    }
    return 0;
}

/* Opens path for reading when it is a regular file. O_NONBLOCK: a FIFO named as a plan must not
 * block the open (it is refused after it); a device or a folder is refused the same way. */
static FILE *open_regular(const char *path, char *err, size_t err_len)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    FILE *f = NULL;
    if (fd < 0) {
        gp_errf(err, err_len, "%s: cannot open: %s", path, strerror(errno));
    } else if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        mode_t m = st.st_mode;
        gp_errf(err, err_len, "%s: cannot open: not a regular file%s", path,
                S_ISDIR(m) ? " (a folder)" : S_ISFIFO(m) ? " (a FIFO)"
                : S_ISCHR(m) || S_ISBLK(m) ? " (a device)" : "");
    } else if (!(f = fdopen(fd, "rb"))) {
        gp_errf(err, err_len, "%s: cannot open: %s", path, strerror(errno));
    }
    if (fd >= 0 && !f)
        close(fd);
    return f;
}

int gp_plan_load(const char *path, gp_plan **out, char *err, size_t err_len)
{
    if (out)
        *out = NULL;
    FILE *f = open_regular(path, err, err_len);
    if (!f)
        return -1;
    size_t len = 0;
    unsigned char *buf = (unsigned char *)gp_read_stream(f, &len);
    int rc = -1;
    if (!buf)
        gp_errf(err, err_len, "%s: cannot read: out of memory", path);
    else if (ferror(f))
        gp_errf(err, err_len, "%s: cannot read: %s", path, strerror(errno));
    else
        rc = gp_plan_load_mem(buf, len, path, out, err, err_len);
    free(buf);
    fclose(f);
    return rc;
}
