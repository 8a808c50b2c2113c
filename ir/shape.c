/* Adding nodes: checks each op's inputs and attributes and infers the output's shape, dtype and
 * (for views) strides and offset, following the op descriptions in ir/core.h. */
#include <math.h>
#include <string.h>

#include "ir/ir_internal.h"

/* The role of each input in messages, as in the op descriptions of core.h. */
static const char *const roles[GP_OP_COUNT][GP_MAX_INPUTS] = {
    [GP_OP_GET_ROWS] = {"table", "ids"},  [GP_OP_ADD] = {"a", "b"},
    [GP_OP_SUB] = {"a", "b"},             [GP_OP_MUL] = {"a", "b"},
    [GP_OP_DIV] = {"a", "b"},             [GP_OP_SCALE] = {"x"},
    [GP_OP_MATMUL] = {"a", "b"},          [GP_OP_LAYER_NORM] = {"x", "w", "b"},
    [GP_OP_RMS_NORM] = {"x", "w"},        [GP_OP_SOFTMAX] = {"x"},
    [GP_OP_GELU] = {"x"},                 [GP_OP_GELU_ERF] = {"x"},
    [GP_OP_SILU] = {"x"},                 [GP_OP_SWIGLU] = {"gate", "up"},
    [GP_OP_ROPE] = {"x", "pos", "freq_factors"}, [GP_OP_RESHAPE] = {"x"},
    [GP_OP_PERMUTE] = {"x"},              [GP_OP_SLICE] = {"x"},
    [GP_OP_VIEW] = {"x"},                 [GP_OP_CONT] = {"x"},
    [GP_OP_CAST] = {"x"},                 [GP_OP_CONCAT] = {"a", "b"},
    [GP_OP_STORE] = {"dst", "pos", "src"}, [GP_OP_ATTENTION] = {"q", "k", "v", "pos", "seq", "blocks"},
    [GP_OP_ALL_REDUCE] = {"x", "y"},      [GP_OP_ARGMAX] = {"x"},
    [GP_OP_MOE] = {"x", "router", "gate", "up", "down", "router_bias", "gate_bias", "up_bias",
                   "down_bias"},
};

/* What one add_node call works on. */
typedef struct {
    const gp_graph *g;
    gp_diag *d;
    gp_loc loc;
    gp_op op;
    const char *opname;
    int n_in;
    const gp_tensor *in[GP_MAX_INPUTS];
    gp_attrs *attrs;      /* the node's own copy: defaults are filled in */
    const gp_dim *shape;  /* [ndim], the caller's output shape (reshape, view) */
    int ndim;
    gp_dtype dtype;       /* cast's target */
    gp_tensor *out;
} ctx;

#define ERR(c, ...) (gp_diag_error((c)->d, (c)->loc, __VA_ARGS__), -1)

/* `ROLE [shape]` of input i into buf. */
static const char *desc(const ctx *c, int i, char *buf)
{
    char s[GP_SHAPE_STR];
    gp_ir_shape_str(c->g, c->in[i]->ndim, c->in[i]->shape, s);
    snprintf(buf, GP_SHAPE_STR + 32, "%s %s", roles[c->op][i], s);
    return buf;
}

static const char *shp(const ctx *c, const gp_tensor *t, char *buf)
{
    return gp_ir_shape_str(c->g, t->ndim, t->shape, buf);
}

static const char *dimstr(const ctx *c, gp_dim dm, char *buf)
{
    if (dm.sym >= 0 && dm.sym < c->g->n_syms)
        snprintf(buf, 64, "%s", c->g->syms[dm.sym].name);
    else
        snprintf(buf, 64, "%lld", (long long)dm.size);
    return buf;
}

static int need_float(const ctx *c, int i)
{
    if (c->in[i]->dtype == GP_I32)
        return ERR(c, "%s: %s ('%s') is i32, expected a float tensor", c->opname,
                   roles[c->op][i], c->in[i]->name);
    return 0;
}

static int need_floats(const ctx *c)
{
    for (int i = 0; i < c->n_in; i++)
        if (need_float(c, i))
            return -1;
    return 0;
}

static int need_ndim(const ctx *c, int i, int ndim)
{
    char b[GP_SHAPE_STR + 32];
    if (c->in[i]->ndim != ndim)
        return ERR(c, "%s: %s must have %d dims, got %s", c->opname, roles[c->op][i], ndim,
                   desc(c, i, b));
    return 0;
}

static int need_min_ndim(const ctx *c, int i, int ndim)
{
    char b[GP_SHAPE_STR + 32];
    if (c->in[i]->ndim < ndim)
        return ERR(c, "%s: %s must have at least %d dims, got %s", c->opname, roles[c->op][i],
                   ndim, desc(c, i, b));
    return 0;
}

/* Input i is an i32 index vector [n] with n == want (the caller's dim `wname`). */
static int need_index(const ctx *c, int i, gp_dim want, const char *wname)
{
    const gp_tensor *t = c->in[i];
    char b[GP_SHAPE_STR + 32], w[64];
    if (t->dtype != GP_I32)
        return ERR(c, "%s: %s ('%s') is %s, expected i32", c->opname, roles[c->op][i], t->name,
                   gp_dtype_name(t->dtype));
    if (t->ndim != 1 || !gp_ir_dim_eq(t->shape[0], want))
        return ERR(c, "%s: %s is %s, expected [%s] (%s)", c->opname, roles[c->op][i],
                   desc(c, i, b), dimstr(c, want, w), wname);
    return 0;
}

/* Numpy broadcasting of two shapes, aligned right; -1 when they do not broadcast. */
static int broadcast(int na, const gp_dim *a, int nb, const gp_dim *b, gp_dim *out, int *nout)
{
    int n = na > nb ? na : nb;
    for (int k = 0; k < n; k++) {
        int ia = na - n + k, ib = nb - n + k;
        gp_dim one = {1, -1};
        gp_dim da = ia >= 0 ? a[ia] : one, db = ib >= 0 ? b[ib] : one;
        if (gp_ir_dim_eq(da, db))
            out[k] = da;
        else if (da.sym < 0 && da.size == 1)
            out[k] = db;
        else if (db.sym < 0 && db.size == 1)
            out[k] = da;
        else
            return -1;
    }
    *nout = n;
    return 0;
}

static void same_shape(ctx *c, const gp_tensor *t)
{
    c->out->ndim = t->ndim;
    memcpy(c->out->shape, t->shape, sizeof t->shape);
}

static int infer_binary(ctx *c)
{
    const gp_tensor *a = c->in[0], *b = c->in[1];
    char s1[GP_SHAPE_STR], s2[GP_SHAPE_STR];
    if (need_floats(c))
        return -1;
    if (broadcast(a->ndim, a->shape, b->ndim, b->shape, c->out->shape, &c->out->ndim))
        return ERR(c, "%s: shapes %s and %s do not broadcast", c->opname, shp(c, a, s1),
                   shp(c, b, s2));
    return 0;
}

static int infer_unary(ctx *c)
{
    if (need_floats(c))
        return -1;
    same_shape(c, c->in[0]);
    return 0;
}

static int infer_all_reduce(ctx *c)
{
    char s1[GP_SHAPE_STR], s2[GP_SHAPE_STR];
    if (need_floats(c))
        return -1;
    int same = c->n_in < 2 || c->in[1]->ndim == c->in[0]->ndim;
    for (int d = 0; same && c->n_in == 2 && d < c->in[0]->ndim; d++)
        same = gp_ir_dim_eq(c->in[0]->shape[d], c->in[1]->shape[d]);
    if (!same)
        return ERR(c, "all_reduce: y %s must have x's shape %s",
                   gp_ir_shape_str(c->g, c->in[1]->ndim, c->in[1]->shape, s2),
                   gp_ir_shape_str(c->g, c->in[0]->ndim, c->in[0]->shape, s1));
    same_shape(c, c->in[0]);
    return 0;
}

static int infer_get_rows(ctx *c)
{
    const gp_tensor *tab = c->in[0], *ids = c->in[1];
    char b[GP_SHAPE_STR + 32];
    if (need_float(c, 0) || need_ndim(c, 0, 2))
        return -1;
    if (ids->dtype != GP_I32)
        return ERR(c, "get_rows: ids ('%s') is %s, expected i32", ids->name,
                   gp_dtype_name(ids->dtype));
    if (ids->ndim != 1)
        return ERR(c, "get_rows: ids must have 1 dim, got %s", desc(c, 1, b));
    c->out->dtype = GP_F32;
    c->out->ndim = 2;
    c->out->shape[0] = ids->shape[0];
    c->out->shape[1] = tab->shape[1];
    return 0;
}

static int infer_matmul(ctx *c)
{
    const gp_tensor *a = c->in[0], *b = c->in[1];
    char s1[GP_SHAPE_STR], s2[GP_SHAPE_STR], k[64];
    int ta = c->attrs->i[GP_MATMUL_TA] != 0, tb = c->attrs->i[GP_MATMUL_TB] != 0;
    if (need_floats(c) || need_min_ndim(c, 0, 2) || need_min_ndim(c, 1, 2))
        return -1;
    if (gp_dtype_is_quant(b->dtype) && (a->ndim != 2 || ta || a->dtype != GP_F32))
        return ERR(c, "matmul: a %s b needs an f32 a [M, K] (not transposed), got %s a %s",
                   gp_dtype_name(b->dtype), gp_dtype_name(a->dtype), shp(c, a, s1));
    gp_dim m = a->shape[a->ndim - (ta ? 1 : 2)], ka = a->shape[a->ndim - (ta ? 2 : 1)];
    gp_dim kb = b->shape[b->ndim - (tb ? 1 : 2)], n = b->shape[b->ndim - (tb ? 2 : 1)];
    if (!gp_ir_dim_eq(ka, kb)) {
        char want[160];
        dimstr(c, ka, k);
        snprintf(want, sizeof want, "[%s%s%s%s]", b->ndim > 2 ? "..., " : "", tb ? "N, " : k,
                 tb ? k : ", N", "");
        return ERR(c, "matmul: inner dims differ: a is %s, b is %s (expected b %s)",
                   shp(c, a, s1), shp(c, b, s2), want);
    }
    int nb;
    if (broadcast(a->ndim - 2, a->shape, b->ndim - 2, b->shape, c->out->shape, &nb))
        return ERR(c, "matmul: batch dims of a %s and b %s do not broadcast", shp(c, a, s1),
                   shp(c, b, s2));
    c->out->dtype = GP_F32;
    c->out->ndim = nb + 2;
    c->out->shape[nb] = m;
    c->out->shape[nb + 1] = n;
    return 0;
}

static int infer_norm(ctx *c)
{
    const gp_tensor *x = c->in[0];
    char b[GP_SHAPE_STR + 32], s[GP_SHAPE_STR], w[64];
    if (need_floats(c) || need_min_ndim(c, 0, 1))
        return -1;
    gp_dim ch = x->shape[x->ndim - 1];
    for (int i = 1; i < c->n_in; i++) {
        if (c->in[i]->ndim != 1 || !gp_ir_dim_eq(c->in[i]->shape[0], ch))
            return ERR(c, "%s: %s is %s, expected [%s] (the last dim of x %s)", c->opname,
                       roles[c->op][i], desc(c, i, b), dimstr(c, ch, w), shp(c, x, s));
    }
    same_shape(c, x);
    return 0;
}

static int infer_softmax(ctx *c)
{
    if (need_floats(c) || need_min_ndim(c, 0, 1))
        return -1;
    int64_t causal = c->attrs->i[GP_SOFTMAX_CAUSAL];
    if (causal != 0 && causal != 1)
        return ERR(c, "softmax: causal must be 0 or 1, got %lld", (long long)causal);
    if (causal && need_min_ndim(c, 0, 2))
        return -1;
    if (c->attrs->f[GP_SOFTMAX_SCALE] == 0)
        c->attrs->f[GP_SOFTMAX_SCALE] = 1; /* unset: no scaling */
    same_shape(c, c->in[0]);
    return 0;
}

static int infer_swiglu(ctx *c)
{
    const gp_tensor *a = c->in[0], *b = c->in[1];
    char s1[GP_SHAPE_STR], s2[GP_SHAPE_STR];
    if (need_floats(c))
        return -1;
    int same = a->ndim == b->ndim;
    for (int i = 0; same && i < a->ndim; i++)
        same = gp_ir_dim_eq(a->shape[i], b->shape[i]);
    if (!same)
        return ERR(c, "swiglu: gate is %s, up is %s (expected the same shape)", shp(c, a, s1),
                   shp(c, b, s2));
    same_shape(c, a);
    return 0;
}

static int infer_rope(ctx *c)
{
    const gp_tensor *x = c->in[0];
    char b[GP_SHAPE_STR + 32];
    if (need_float(c, 0))
        return -1;
    if (x->ndim != 3)
        return ERR(c, "rope: x must be [T, H, D], got %s", desc(c, 0, b));
    if (need_index(c, 1, x->shape[0], "the first dim of x"))
        return -1;
    int64_t dd = x->shape[2].size;
    if (x->shape[2].sym >= 0)
        return ERR(c, "rope: the head dim D of x %s must be constant", desc(c, 0, b));
    if (c->attrs->i[GP_ROPE_MODE] != 0 && c->attrs->i[GP_ROPE_MODE] != 1)
        return ERR(c, "rope: mode must be 0 (rotate-half) or 1 (interleaved), got %lld",
                   (long long)c->attrs->i[GP_ROPE_MODE]);
    if (c->attrs->i[GP_ROPE_N_DIMS] == 0)
        c->attrs->i[GP_ROPE_N_DIMS] = dd;
    int64_t n = c->attrs->i[GP_ROPE_N_DIMS];
    if (n < 0 || n > dd || n % 2)
        return ERR(c, "rope: rotated dims n = %lld must be even and in 1..%lld (D of x %s)",
                   (long long)n, (long long)dd, desc(c, 0, b));
    if (c->attrs->f[GP_ROPE_THETA] == 0)
        c->attrs->f[GP_ROPE_THETA] = 10000.0; /* unset: the usual base */
    char why[192];
    if (gp_rope_check_scaling(c->attrs, why, sizeof why))
        return ERR(c, "%s", why);
    if (c->n_in > 2) { /* one f32 factor a rotated pair */
        const gp_tensor *w = c->in[2];
        if (w->dtype != GP_F32 || w->ndim != 1 || w->shape[0].sym >= 0 || w->shape[0].size != n / 2)
            return ERR(c, "rope: freq_factors '%s' is %s%s, expected f32[%lld] (one factor for "
                       "each pair of the %lld rotated dims)", w->name, gp_dtype_name(w->dtype),
                       shp(c, w, b), (long long)(n / 2), (long long)n);
    }
    same_shape(c, x);
    return 0;
}

/* A ragged batch's inputs: seq i32[T], blocks i32[N, M] (constant), and block rows dividing
 * the constant S; or neither, and no block. */
static int infer_attention_blocks(ctx *c)
{
    const gp_tensor *k = c->in[1];
    int64_t block = c->attrs->i[GP_ATTENTION_BLOCK];
    char b[GP_SHAPE_STR + 32];
    if (c->n_in == 5)
        return ERR(c, "attention: seq needs blocks (a ragged batch gives both)");
    if (c->n_in < 6)
        return block ? ERR(c, "attention: block=%lld needs the inputs seq and blocks",
                           (long long)block) : 0;
    if (need_index(c, 4, c->in[0]->shape[0], "the first dim of q"))
        return -1;
    const gp_tensor *t = c->in[5];
    if (t->dtype != GP_I32 || t->ndim != 2 || t->shape[0].sym >= 0 || t->shape[1].sym >= 0)
        return ERR(c, "attention: %s, expected i32[N, M] (constant)", desc(c, 5, b));
    if (block < 1)
        return ERR(c, "attention: seq and blocks need block=B (rows of a KV block)");
    if (c->attrs->i[GP_ATTENTION_RING])
        return ERR(c, "attention: a ragged batch has no ring (a window reads its sequence's rows)");
    if (k->shape[0].sym >= 0 || k->shape[0].size % block)
        return ERR(c, "attention: the cache %s is not a whole number of blocks of %lld rows",
                   desc(c, 1, b), (long long)block);
    if (t->shape[1].size > INT32_MAX / block)
        return ERR(c, "attention: %s of %lld rows: more than 2^31 positions",
                   desc(c, 5, b), (long long)block);
    return 0;
}

static int infer_attention(ctx *c)
{
    const gp_tensor *q = c->in[0], *k = c->in[1], *v = c->in[2];
    char b1[GP_SHAPE_STR + 32], b2[GP_SHAPE_STR + 32];
    for (int i = 0; i < 3; i++)
        if (need_float(c, i))
            return -1;
    if (q->ndim != 3)
        return ERR(c, "attention: q must be [T, H, D], got %s", desc(c, 0, b1));
    if (k->ndim != 3)
        return ERR(c, "attention: k must be [S, G, D], got %s", desc(c, 1, b1));
    int same = v->ndim == k->ndim;
    for (int i = 0; same && i < k->ndim; i++)
        same = gp_ir_dim_eq(k->shape[i], v->shape[i]);
    if (!same)
        return ERR(c, "attention: %s and %s differ (expected the same shape)", desc(c, 1, b1),
                   desc(c, 2, b2));
    if (!gp_ir_dim_eq(q->shape[2], k->shape[2]))
        return ERR(c, "attention: head dims differ: %s, %s (expected the same D)",
                   desc(c, 0, b1), desc(c, 1, b2));
    if (q->shape[1].sym >= 0 || k->shape[1].sym >= 0 || q->shape[2].sym >= 0)
        return ERR(c, "attention: head counts and head dim must be constant: %s, %s",
                   desc(c, 0, b1), desc(c, 1, b2));
    if (q->shape[1].size % k->shape[1].size)
        return ERR(c, "attention: q has %lld heads, not a multiple of k's %lld (%s, %s)",
                   (long long)q->shape[1].size, (long long)k->shape[1].size, desc(c, 0, b1),
                   desc(c, 1, b2));
    if (need_index(c, 3, q->shape[0], "the first dim of q"))
        return -1;
    int64_t window = c->attrs->i[GP_ATTENTION_WINDOW];
    if (window < 0 || window > INT32_MAX)
        return ERR(c, "attention: window must be in 0..%d, got %lld", INT32_MAX, (long long)window);
    if (c->attrs->i[GP_ATTENTION_RING] &&
        (window < 1 || k->shape[0].sym >= 0 || window > k->shape[0].size))
        return ERR(c, "attention: a ring cache needs a window of 1..S rows (S constant), got "
                   "window %lld for %s", (long long)window, desc(c, 1, b1));
    if (c->attrs->i[GP_ATTENTION_SINKS]) { /* sinks f32[H] as input 4, no ragged batch */
        const gp_tensor *w = c->n_in == 5 ? c->in[4] : NULL;
        if (!w || c->attrs->i[GP_ATTENTION_BLOCK])
            return ERR(c, "attention: sinks take input 4, so not with a ragged batch (seq, "
                       "blocks)");
        if (w->dtype != GP_F32 || w->ndim != 1 || w->shape[0].sym >= 0 ||
            w->shape[0].size != q->shape[1].size)
            return ERR(c, "attention: sinks '%s' is %s%s, expected f32[%lld] (one a query head)",
                       w->name, gp_dtype_name(w->dtype), shp(c, w, b1),
                       (long long)q->shape[1].size);
    } else if (infer_attention_blocks(c)) {
        return -1;
    }
    if (c->attrs->f[GP_ATTENTION_SCALE] == 0)
        c->attrs->f[GP_ATTENTION_SCALE] = 1.0 / sqrt((double)q->shape[2].size);
    c->out->dtype = GP_F32;
    same_shape(c, q);
    return 0;
}

static int infer_store(ctx *c)
{
    const gp_tensor *dst = c->in[0], *src = c->in[2];
    char b1[GP_SHAPE_STR + 32], b2[GP_SHAPE_STR + 32];
    if (need_float(c, 0) || need_float(c, 2) || need_min_ndim(c, 0, 1))
        return -1;
    int same = src->ndim == dst->ndim;
    for (int i = 1; same && i < dst->ndim; i++)
        same = gp_ir_dim_eq(dst->shape[i], src->shape[i]);
    if (!same)
        return ERR(c, "store: %s does not fit rows of %s (expected src [T%s])", desc(c, 2, b1),
                   desc(c, 0, b2), dst->ndim > 1 ? ", ..." : "");
    if (need_index(c, 1, src->shape[0], "the first dim of src"))
        return -1;
    c->out->dtype = dst->dtype;
    same_shape(c, dst);
    memcpy(c->out->stride, dst->stride, sizeof dst->stride);
    c->out->view_offset = 0;
    return 0;
}

static int infer_concat(ctx *c)
{
    const gp_tensor *a = c->in[0], *b = c->in[1];
    char s1[GP_SHAPE_STR], s2[GP_SHAPE_STR];
    int64_t axis = c->attrs->i[GP_CONCAT_AXIS];
    if ((a->dtype == GP_I32) != (b->dtype == GP_I32))
        return ERR(c, "concat: a is %s, b is %s (expected both float or both i32)",
                   gp_dtype_name(a->dtype), gp_dtype_name(b->dtype));
    if (a->ndim != b->ndim || a->ndim == 0)
        return ERR(c, "concat: a %s and b %s must have the same number (>= 1) of dims",
                   shp(c, a, s1), shp(c, b, s2));
    if (axis < 0 || axis >= a->ndim)
        return ERR(c, "concat: axis %lld out of range for %d dims", (long long)axis, a->ndim);
    for (int i = 0; i < a->ndim; i++) {
        if (i != axis && !gp_ir_dim_eq(a->shape[i], b->shape[i]))
            return ERR(c, "concat: a %s and b %s differ in dim %d (only axis %lld may differ)",
                       shp(c, a, s1), shp(c, b, s2), i, (long long)axis);
    }
    if (a->shape[axis].sym >= 0 || b->shape[axis].sym >= 0)
        return ERR(c, "concat: cannot join a %s and b %s along symbolic dim %lld", shp(c, a, s1),
                   shp(c, b, s2), (long long)axis);
    same_shape(c, a);
    c->out->shape[axis].size = a->shape[axis].size + b->shape[axis].size;
    return 0;
}

/* reshape of a strided x: only dims of size 1 added or dropped (index's drop of axis 0 on a
 * permuted view: examples/gpt_oss.gplan's experts), the others in order keeping their strides;
 * an added dim of 1 takes the stride of what follows it. */
static int reshape_units(ctx *c, const gp_dim *want, const char *s2)
{
    const gp_tensor *x = c->in[0];
    char s1[GP_SHAPE_STR];
    int64_t stride[GP_MAX_DIMS];
    int i = 0;
    for (int j = 0; j < c->ndim; j++) {
        if (want[j].sym < 0 && want[j].size == 1)
            continue;
        while (i < x->ndim && x->shape[i].sym < 0 && x->shape[i].size == 1)
            i++;
        if (i == x->ndim || !gp_ir_dim_eq(x->shape[i], want[j]))
            return ERR(c, "reshape: x ('%s' %s) is not contiguous (cont it first)", x->name,
                       shp(c, x, s1));
        stride[j] = x->stride[i++];
    }
    while (i < x->ndim && x->shape[i].sym < 0 && x->shape[i].size == 1)
        i++;
    if (i != x->ndim)
        return ERR(c, "reshape: x ('%s' %s) is not contiguous (cont it first)", x->name,
                   shp(c, x, s1));
    int64_t next = 1;
    for (int j = c->ndim - 1; j >= 0; j--) {
        if (want[j].sym < 0 && want[j].size == 1)
            stride[j] = next;
        next = stride[j] * (want[j].sym < 0 ? want[j].size : 1);
    }
    (void)s2;
    c->out->ndim = c->ndim;
    memcpy(c->out->shape, want, sizeof(gp_dim) * GP_MAX_DIMS);
    memcpy(c->out->stride, stride, sizeof(int64_t) * (size_t)c->ndim);
    return 0;
}

static int infer_reshape(ctx *c)
{
    const gp_tensor *x = c->in[0];
    char s1[GP_SHAPE_STR], s2[GP_SHAPE_STR];
    gp_dim want[GP_MAX_DIMS];
    if (gp_ir_check_shape(c->g, c->d, c->loc, "reshape: target shape", x->dtype, c->ndim,
                          c->shape, want))
        return -1;
    gp_ir_shape_str(c->g, c->ndim, want, s2);
    if (!gp_tensor_is_contiguous(x))
        return reshape_units(c, want, s2);
    /* Symbolic dims must appear in the same order and the constant dims hold as many elements. */
    int syms_x[GP_MAX_DIMS], syms_w[GP_MAX_DIMS], nx = 0, nw = 0;
    int64_t px = 1, pw = 1;
    for (int i = 0; i < x->ndim; i++) {
        if (x->shape[i].sym >= 0)
            syms_x[nx++] = x->shape[i].sym;
        else
            px *= x->shape[i].size;
    }
    for (int j = 0; j < c->ndim; j++) {
        if (want[j].sym >= 0)
            syms_w[nw++] = want[j].sym;
        else
            pw *= want[j].size;
    }
    if (nx != nw || memcmp(syms_x, syms_w, (size_t)nx * sizeof syms_x[0]))
        return ERR(c, "reshape: cannot reshape x %s to %s (symbolic dims must appear in the same "
                   "order)", shp(c, x, s1), s2);
    if (px != pw)
        return ERR(c, "reshape: cannot reshape x %s to %s (element counts differ)", shp(c, x, s1),
                   s2);
    /* The constant dims between symbolic dims must also match run by run: only then is the
     * layout right for every size the symbolic dims take, not just at their bounds. */
    for (int i = 0, j = 0;;) {
        int64_t ri = 1, rj = 1;
        while (i < x->ndim && x->shape[i].sym < 0)
            ri *= x->shape[i++].size;
        while (j < c->ndim && want[j].sym < 0)
            rj *= want[j++].size;
        if (ri != rj)
            return ERR(c, "reshape: cannot reshape x %s to %s (a symbolic dim moves across "
                       "constant dims)", shp(c, x, s1), s2);
        if (i == x->ndim)
            break;
        i++;
        j++;
    }
    c->out->ndim = c->ndim;
    memcpy(c->out->shape, want, sizeof want);
    gp_ir_contiguous_strides(c->ndim, want, c->out->stride);
    return 0;
}

static int infer_permute(ctx *c)
{
    const gp_tensor *x = c->in[0];
    char b[GP_SHAPE_STR + 32];
    int seen[GP_MAX_DIMS] = {0};
    for (int k = 0; k < x->ndim; k++) {
        int64_t p = c->attrs->i[GP_PERMUTE_AXES + k];
        if (p < 0 || p >= x->ndim || seen[p]) {
            char axes[96] = "";
            size_t pos = 0;
            for (int m = 0; m < x->ndim; m++)
                pos += (size_t)snprintf(axes + pos, sizeof axes - pos, "%s%lld", m ? ", " : "",
                                        (long long)c->attrs->i[GP_PERMUTE_AXES + m]);
            return ERR(c, "permute: axes (%s) are not a permutation of 0..%d for %s", axes,
                       x->ndim - 1, desc(c, 0, b));
        }
        seen[p] = 1;
    }
    c->out->ndim = x->ndim;
    for (int k = 0; k < x->ndim; k++) {
        c->out->shape[k] = x->shape[c->attrs->i[GP_PERMUTE_AXES + k]];
        c->out->stride[k] = x->stride[c->attrs->i[GP_PERMUTE_AXES + k]];
    }
    return 0;
}

static int infer_slice(ctx *c)
{
    const gp_tensor *x = c->in[0];
    char b[GP_SHAPE_STR + 32];
    int64_t axis = c->attrs->i[GP_SLICE_AXIS], start = c->attrs->i[GP_SLICE_START];
    int64_t len = c->attrs->i[GP_SLICE_LEN];
    if (axis < 0 || axis >= x->ndim)
        return ERR(c, "slice: axis %lld out of range for %s", (long long)axis, desc(c, 0, b));
    if (x->shape[axis].sym >= 0)
        return ERR(c, "slice: cannot slice symbolic dim %lld of %s", (long long)axis,
                   desc(c, 0, b));
    int64_t size = x->shape[axis].size;
    if (start < 0 || len <= 0 || start > size || len > size - start)
        return ERR(c, "slice: [%lld, %lld) is outside dim %lld of %s (size %lld)",
                   (long long)start, (long long)start + len, (long long)axis, desc(c, 0, b),
                   (long long)size);
    same_shape(c, x);
    memcpy(c->out->stride, x->stride, sizeof x->stride);
    c->out->shape[axis].size = len;
    c->out->view_offset = start * x->stride[axis] * (int64_t)gp_dtype_size(x->dtype);
    return 0;
}

static int infer_view(ctx *c)
{
    const gp_tensor *x = c->in[0];
    char b[GP_SHAPE_STR + 32], s[GP_SHAPE_STR];
    gp_dim want[GP_MAX_DIMS];
    int64_t off = c->attrs->i[GP_VIEW_OFFSET], el = (int64_t)gp_dtype_size(x->dtype);
    if (gp_ir_check_shape(c->g, c->d, c->loc, "view: shape", x->dtype, c->ndim, c->shape, want))
        return -1;
    c->out->ndim = c->ndim;
    memcpy(c->out->shape, want, sizeof want);
    gp_ir_contiguous_strides(c->ndim, want, c->out->stride);
    c->out->dtype = x->dtype;
    int64_t ext = gp_tensor_nbytes(c->out), have = gp_tensor_nbytes(x);
    if (off < 0 || off % el)
        return ERR(c, "view: offset %lld is not a multiple of the %lld-byte element size",
                   (long long)off, (long long)el);
    if (off > have || ext > have - off)
        return ERR(c, "view: %s at byte offset %lld (%lld bytes) does not fit in %s (%lld bytes)",
                   gp_ir_shape_str(c->g, c->ndim, want, s), (long long)off, (long long)ext,
                   desc(c, 0, b), (long long)have);
    c->out->view_offset = off;
    return 0;
}

static int infer_cast(ctx *c)
{
    if (gp_dtype_size(c->dtype) == 0)
        return ERR(c, "cast: bad target dtype %d", (int)c->dtype);
    c->out->dtype = c->dtype;
    same_shape(c, c->in[0]);
    return 0;
}

static int infer_argmax(ctx *c)
{
    const gp_tensor *x = c->in[0];
    if (need_floats(c) || need_min_ndim(c, 0, 1))
        return -1;
    c->out->dtype = GP_I32;
    c->out->ndim = x->ndim - 1;
    for (int d = 0; d < x->ndim - 1; d++)
        c->out->shape[d] = x->shape[d];
    return 0;
}

/* Input i is [want[0], ..., want[n - 1]], all constant dims but none symbolic. */
static int need_dims(const ctx *c, int i, int n, const gp_dim *want, const char *expect)
{
    const gp_tensor *t = c->in[i];
    char b[GP_SHAPE_STR + 32];
    int ok = t->ndim == n;
    for (int d = 0; ok && d < n; d++)
        ok = gp_ir_dim_eq(t->shape[d], want[d]);
    if (!ok)
        return ERR(c, "moe: %s, expected %s", desc(c, i, b), expect);
    return 0;
}

/* x [T, H] f32, router [E, H], gate and up [E, F, H], down [E, H, F] (the experts' dims
 * constant), 1 <= top_k <= E. */
static int infer_moe(ctx *c)
{
    const gp_tensor *x = c->in[0], *r = c->in[1], *g = c->in[2];
    char b[GP_SHAPE_STR + 32], e1[GP_SHAPE_STR + 64];
    if (need_floats(c))
        return -1;
    if (x->dtype != GP_F32 || x->ndim != 2)
        return ERR(c, "moe: x must be f32 [T, H], got %s %s", gp_dtype_name(x->dtype),
                   desc(c, 0, b));
    if (r->ndim != 2 || r->shape[0].sym >= 0 || r->shape[1].sym >= 0 ||
        !gp_ir_dim_eq(r->shape[1], x->shape[1]))
        return ERR(c, "moe: %s, expected [E, %s] (E experts; H the last dim of x)",
                   desc(c, 1, b), dimstr(c, x->shape[1], e1));
    if (g->ndim != 3 || g->shape[1].sym >= 0)
        return ERR(c, "moe: %s, expected [E, F, H] (each expert's [F, H] gate weight)",
                   desc(c, 2, b));
    gp_dim E = r->shape[0], H = x->shape[1], F = g->shape[1];
    char es[64], fs[64], hs[64];
    dimstr(c, E, es), dimstr(c, F, fs), dimstr(c, H, hs);
    snprintf(e1, sizeof e1, "[%s, %s, %s] (E, F, H: router [E, H], gate [E, F, H])", es, fs, hs);
    gp_dim up[3] = {E, F, H}, down[3] = {E, H, F};
    if (need_dims(c, 2, 3, up, e1) || need_dims(c, 3, 3, up, e1))
        return -1;
    snprintf(e1, sizeof e1, "[%s, %s, %s] (E, H, F: each expert's [H, F] down weight)", es, hs,
             fs);
    if (need_dims(c, 4, 3, down, e1))
        return -1;
    int64_t k = c->attrs->i[GP_MOE_TOP_K], norm = c->attrs->i[GP_MOE_NORM];
    if (k < 1 || k > E.size || k > GP_MOE_MAX_K)
        return ERR(c, "moe: top_k %lld, expected 1..%lld (the experts of router %s; at most %d)",
                   (long long)k, (long long)(E.size < GP_MOE_MAX_K ? E.size : GP_MOE_MAX_K),
                   shp(c, r, b), GP_MOE_MAX_K);
    if (norm < 0 || norm >= GP_MOE_NORM_COUNT)
        return ERR(c, "moe: norm %lld, expected 0..%d", (long long)norm, GP_MOE_NORM_COUNT - 1);
    int64_t act = c->attrs->i[GP_MOE_ACT];
    if (act < 0 || act >= GP_MOE_ACT_COUNT)
        return ERR(c, "moe: act %lld, expected 0..%d", (long long)act, GP_MOE_ACT_COUNT - 1);
    double limit = c->attrs->f[GP_MOE_LIMIT], alpha = c->attrs->f[GP_MOE_ALPHA];
    if (act == GP_MOE_SWIGLU_OAI && (!(limit > 0) || !isfinite(limit) || !isfinite(alpha)))
        return ERR(c, "moe: the clamped swiglu needs a finite limit > 0 and alpha (got %g, %g)",
                   limit, alpha);
    if (c->n_in != 5 && c->n_in != 9)
        return ERR(c, "moe: %d inputs; the biases are four (router, gate, up, down) or none",
                   c->n_in);
    if (c->n_in == 9) { /* router_bias [E], gate_bias and up_bias [E, F], down_bias [E, H] */
        gp_dim rb[1] = {E}, gb[2] = {E, F}, db[2] = {E, H};
        snprintf(e1, sizeof e1, "[%s] (E)", es);
        if (need_dims(c, 5, 1, rb, e1))
            return -1;
        snprintf(e1, sizeof e1, "[%s, %s] (E, F)", es, fs);
        if (need_dims(c, 6, 2, gb, e1) || need_dims(c, 7, 2, gb, e1))
            return -1;
        snprintf(e1, sizeof e1, "[%s, %s] (E, H)", es, hs);
        if (need_dims(c, 8, 2, db, e1))
            return -1;
        for (int i = 5; i < 9; i++)
            if (gp_dtype_is_quant(c->in[i]->dtype))
                return ERR(c, "moe: %s is %s, expected a float tensor", desc(c, i, b),
                           gp_dtype_name(c->in[i]->dtype));
    }
    c->out->dtype = GP_F32;
    same_shape(c, x);
    return 0;
}

static int infer(ctx *c)
{
    switch (c->op) {
    case GP_OP_GET_ROWS: return infer_get_rows(c);
    case GP_OP_ADD:
    case GP_OP_SUB:
    case GP_OP_MUL:
    case GP_OP_DIV: return infer_binary(c);
    case GP_OP_SCALE:
    case GP_OP_GELU:
    case GP_OP_GELU_ERF:
    case GP_OP_SILU: return infer_unary(c);
    case GP_OP_ALL_REDUCE: return infer_all_reduce(c);
    case GP_OP_MATMUL: return infer_matmul(c);
    case GP_OP_LAYER_NORM:
    case GP_OP_RMS_NORM: return infer_norm(c);
    case GP_OP_SOFTMAX: return infer_softmax(c);
    case GP_OP_SWIGLU: return infer_swiglu(c);
    case GP_OP_ROPE: return infer_rope(c);
    case GP_OP_RESHAPE: return infer_reshape(c);
    case GP_OP_PERMUTE: return infer_permute(c);
    case GP_OP_SLICE: return infer_slice(c);
    case GP_OP_VIEW: return infer_view(c);
    case GP_OP_CONT: same_shape(c, c->in[0]); return 0;
    case GP_OP_CAST: return infer_cast(c);
    case GP_OP_ARGMAX: return infer_argmax(c);
    case GP_OP_MOE: return infer_moe(c);
    case GP_OP_CONCAT: return infer_concat(c);
    case GP_OP_STORE: return infer_store(c);
    case GP_OP_ATTENTION: return infer_attention(c);
    default: return ERR(c, "unknown op %d", (int)c->op);
    }
}

int gp_graph_add_node(gp_graph *g, gp_diag *d, gp_op op, const int *inputs, int n_inputs,
                      const gp_attrs *attrs, const gp_dim *shape, int ndim, gp_dtype dtype,
                      const char *name, gp_loc loc)
{
    if (!g)
        return -1;
    const gp_op_info *info = gp_op_get(op);
    if (!info || op == GP_OP_NONE) {
        gp_diag_error(d, loc, "unknown op %d", (int)op);
        return -1;
    }
    if (n_inputs < info->min_inputs || n_inputs > info->max_inputs || (n_inputs && !inputs)) {
        if (info->min_inputs == info->max_inputs)
            gp_diag_error(d, loc, "%s: takes %d inputs, got %d", info->name, info->min_inputs,
                          n_inputs);
        else
            gp_diag_error(d, loc, "%s: takes %d to %d inputs, got %d", info->name,
                          info->min_inputs, info->max_inputs, n_inputs);
        return -1;
    }

    gp_node node;
    memset(&node, 0, sizeof node);
    node.op = op;
    node.n_inputs = n_inputs;
    node.loc = loc;
    if (attrs)
        node.attrs = *attrs;
    gp_tensor out;
    memset(&out, 0, sizeof out);
    ctx c = {g, d, loc, op, info->name, n_inputs, {0}, &node.attrs, shape, ndim, dtype, &out};
    for (int i = 0; i < n_inputs; i++) {
        if (inputs[i] < 0 || inputs[i] >= g->n_tensors) {
            gp_diag_error(d, loc, "%s: %s is not a tensor (id %d)", info->name, roles[op][i],
                          inputs[i]);
            return -1;
        }
        node.inputs[i] = inputs[i];
        c.in[i] = &g->tensors[inputs[i]];
        /* Quantized weights are read by the products and lookups that have kernels for them. */
        if (gp_dtype_is_quant(c.in[i]->dtype) &&
            !(op == GP_OP_GET_ROWS && i == 0) &&
            !(op == GP_OP_MATMUL && i == 1 && node.attrs.i[GP_MATMUL_TB] && c.in[i]->ndim == 2) &&
            !(op == GP_OP_MOE && i >= 1)) {
            gp_diag_error(d, loc, "%s: %s ('%s') is %s: quantized weights are read only by "
                          "get_rows (the table), matmul (a 2-dim b with tb=1) and moe (the "
                          "router and experts)", info->name,
                          roles[op][i], c.in[i]->name, gp_dtype_name(c.in[i]->dtype));
            return -1;
        }
    }

    out.dtype = c.in[0]->dtype;
    out.view_src = -1;
    if (infer(&c))
        return -1;
    char what[64];
    snprintf(what, sizeof what, "%s: output", info->name);
    if (gp_ir_check_shape(g, d, loc, what, out.dtype, out.ndim, out.shape, out.shape))
        return -1;
    if (info->is_view) {
        out.kind = GP_TENSOR_VIEW;
        out.view_src = inputs[0];
    } else {
        out.kind = GP_TENSOR_INTERMEDIATE;
        out.view_offset = 0;
        gp_ir_contiguous_strides(out.ndim, out.shape, out.stride);
    }
    out.producer = g->n_nodes;
    out.loc = loc;

    int id = gp_ir_push_tensor(g, &out, name);
    if (id < 0)
        return -1;
    node.output = id;
    if (gp_ir_push_node(g, &node) < 0) {
        free(g->tensors[--g->n_tensors].name);
        return -1;
    }
    return id;
}
