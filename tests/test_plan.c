/* Tests of the static planner and the plan file: liveness, views, every in-place rule, workspaces,
 * extras, random DAG properties (no overlap, arena >= lower bound), write -> load round trips and
 * every loader check on corrupted files. */
#include <CUnit/CUnit.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "dsl/dsl.h"
#include "planner/planner.h"
#include "tests/testutil.h"

/* ---- graph building ---- */

static const gp_loc here = {NULL, 0, 0};

static gp_dim C(int64_t n)
{
    return (gp_dim){n, -1};
}

static int leaf2(gp_graph *g, gp_diag *d, const char *name, gp_tensor_kind k, gp_dim a, gp_dim b)
{
    gp_dim s[2] = {a, b};
    return gp_graph_add_tensor(g, d, name, k, GP_F32, 2, s, NULL, here);
}

static int op(gp_graph *g, gp_diag *d, gp_op o, const char *name, int n, ...)
{
    int in[GP_MAX_INPUTS];
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++)
        in[i] = va_arg(ap, int);
    va_end(ap);
    gp_attrs a;
    memset(&a, 0, sizeof a);
    if (o == GP_OP_SCALE)
        a.f[GP_SCALE_FACTOR] = 0.5;
    return gp_graph_add_node(g, d, o, in, n, &a, NULL, 0, GP_F32, name, here);
}

static int reshape1(gp_graph *g, gp_diag *d, int x, int64_t n, const char *name)
{
    gp_dim s[1] = {C(n)};
    gp_attrs a;
    memset(&a, 0, sizeof a);
    return gp_graph_add_node(g, d, GP_OP_RESHAPE, &x, 1, &a, s, 1, GP_F32, name, here);
}

static int slice(gp_graph *g, gp_diag *d, int x, int axis, int start, int len, const char *name)
{
    gp_attrs a;
    memset(&a, 0, sizeof a);
    a.i[GP_SLICE_AXIS] = axis;
    a.i[GP_SLICE_START] = start;
    a.i[GP_SLICE_LEN] = len;
    return gp_graph_add_node(g, d, GP_OP_SLICE, &x, 1, &a, NULL, 0, GP_F32, name, here);
}

static gp_plan *build(const gp_graph *g, const gp_plan_opts *o)
{
    gp_diag *d = gp_diag_new(NULL);
    gp_plan *p = NULL;
    int rc = gp_plan_build(g, o, &p, d);
    if (rc)
        fprintf(stderr, "gp_plan_build: %s\n", gp_diag_text(d));
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_EQUAL(gp_diag_count(d), 0);
    gp_diag_free(d);
    return p;
}

/* Bytes [offset, offset + size) of two tensors intersect. */
static int bytes_meet(const gp_plan_tensor *a, const gp_plan_tensor *b)
{
    return a->offset < b->offset + b->size && b->offset < a->offset + a->size;
}

/* ---- liveness ---- */

/* x, w -> a = matmul(x, w) -> b = gelu(a) -> c = add(b, x) -> e = scale(c) = output "out". */
static gp_graph *chain4(void)
{
    gp_graph *g = gp_graph_new("chain4");
    gp_diag *d = gp_diag_new(NULL);
    int x = leaf2(g, d, "x", GP_TENSOR_INPUT, C(4), C(8));
    int w = leaf2(g, d, "w", GP_TENSOR_WEIGHT, C(8), C(8));
    int a = op(g, d, GP_OP_MATMUL, "a", 2, x, w);
    int b = op(g, d, GP_OP_GELU, "b", 1, a);
    int c = op(g, d, GP_OP_ADD, "c", 2, b, x);
    int e = op(g, d, GP_OP_SCALE, "e", 1, c);
    gp_dim s[2] = {C(4), C(8)};
    int out = gp_graph_make_output(g, d, e, "out", GP_F32, 2, s, here);
    CU_ASSERT_EQUAL(out, e);
    CU_ASSERT_EQUAL(gp_diag_count(d), 0);
    gp_diag_free(d);
    return g;
}

static void test_liveness_exact(void)
{
    gp_graph *g = chain4();
    gp_liveness *lv = gp_liveness_new(g, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lv);
    /*                    x  w  a  b  c  out */
    const int first[] = {0, 0, 0, 1, 2, 3};
    const int last[] = {2, 0, 1, 2, 3, 3};
    CU_ASSERT_EQUAL_FATAL(lv->n_tensors, 6);
    for (int t = 0; t < 6; t++) {
        CU_ASSERT_EQUAL(lv->first[t], first[t]);
        CU_ASSERT_EQUAL(lv->last[t], last[t]);
        CU_ASSERT_EQUAL(lv->root[t], t);
        CU_ASSERT_EQUAL(lv->root_offset[t], 0);
        CU_ASSERT_EQUAL(lv->storage_last[t], last[t]);
    }
    gp_liveness_free(lv);

    gp_plan *p = build(g, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL_FATAL(p->n_tensors, 7); /* + ws.a, the matmul's workspace */
    for (int t = 0; t < 6; t++) {
        CU_ASSERT_EQUAL(p->tensors[t].first, first[t]);
        CU_ASSERT_EQUAL(p->tensors[t].last, last[t]);
    }
    CU_ASSERT_EQUAL(p->tensors[0].region, GP_REGION_IO);
    CU_ASSERT_EQUAL(p->tensors[1].region, GP_REGION_WEIGHTS);
    CU_ASSERT_EQUAL(p->tensors[2].region, GP_REGION_ARENA);
    CU_ASSERT_EQUAL(p->tensors[5].region, GP_REGION_IO);
    CU_ASSERT_EQUAL(p->tensors[5].offset, 256); /* after x (128 B, aligned to 256) */
    CU_ASSERT_EQUAL(p->regions[GP_REGION_IO].size, 512);
    CU_ASSERT_EQUAL(p->regions[GP_REGION_WEIGHTS].size, 256);
    CU_ASSERT_EQUAL(p->regions[GP_REGION_STATE].size, 0);
    /* b and c reuse a's bytes in place; a (with b, c) and the 32 MiB workspace meet at step 0. */
    CU_ASSERT_EQUAL(p->tensors[3].inplace_of, 2);
    CU_ASSERT_EQUAL(p->tensors[4].inplace_of, 3);
    CU_ASSERT_EQUAL(p->tensors[2].inplace_of, -1);
    CU_ASSERT_EQUAL(p->tensors[5].inplace_of, -1); /* an output lives in io */
    CU_ASSERT_EQUAL(p->tensors[3].offset, p->tensors[2].offset);
    CU_ASSERT_EQUAL(p->tensors[4].offset, p->tensors[2].offset);
    CU_ASSERT_EQUAL(p->regions[GP_REGION_ARENA].size, GP_WS_CUBLAS_BYTES + 256);
    CU_ASSERT_EQUAL(p->lower_bound, GP_WS_CUBLAS_BYTES + 256);
    CU_ASSERT_EQUAL(p->naive_bytes, GP_WS_CUBLAS_BYTES + 3 * 256);
    /* Extras: record i for tensor i, 80 bytes each with one device. */
    CU_ASSERT_EQUAL(GP_EXTRAS_RECORD_BYTES(1), 80);
    for (int t = 0; t < 7; t++)
        CU_ASSERT_EQUAL(p->tensors[t].extras_offset, 80 * t);
    CU_ASSERT_EQUAL(p->regions[GP_REGION_EXTRAS].size, 576); /* 7 * 80 rounded up to 64 */
    gp_plan_free(p);

    gp_plan_opts o = {.no_inplace = 1, .alignment = 64, .n_devices = 2};
    p = build(g, &o);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    for (int t = 0; t < 7; t++)
        CU_ASSERT_EQUAL(p->tensors[t].inplace_of, -1);
    /* a, b live together at step 1 (b written while a read), b, c at step 2: distinct bytes. */
    CU_ASSERT_FALSE(bytes_meet(&p->tensors[2], &p->tensors[3]));
    CU_ASSERT_FALSE(bytes_meet(&p->tensors[3], &p->tensors[4]));
    CU_ASSERT_EQUAL(p->regions[GP_REGION_ARENA].alignment, 64);
    CU_ASSERT_EQUAL(p->tensors[6].extras_offset, 6 * GP_EXTRAS_RECORD_BYTES(2));
    CU_ASSERT_EQUAL(p->n_devices, 2);
    gp_plan_free(p);
    gp_graph_free(g);
}

/* The io region: the inputs first (in id order, an input declared after an output too), then the
 * outputs smallest first, so that each direction is one span a backend can copy at once. */
static void test_io_order(void)
{
    gp_graph *g = gp_graph_new("io");
    gp_diag *d = gp_diag_new(NULL);
    int x = leaf2(g, d, "x", GP_TENSOR_INPUT, C(4), C(8));    /* 128 B */
    int w = leaf2(g, d, "w", GP_TENSOR_WEIGHT, C(8), C(16));
    int a = op(g, d, GP_OP_MATMUL, "a", 2, x, w);
    gp_dim sa[2] = {C(4), C(16)}, se[2] = {C(4), C(8)}, sv[1] = {C(4)};
    int big = gp_graph_make_output(g, d, a, "big", GP_F32, 2, sa, here); /* 256 B */
    int late = leaf2(g, d, "late", GP_TENSOR_INPUT, C(4), C(8));
    int e = op(g, d, GP_OP_ADD, "e", 2, x, late);
    int mid = gp_graph_make_output(g, d, e, "mid", GP_F32, 2, se, here); /* 128 B */
    gp_attrs a0;
    memset(&a0, 0, sizeof a0);
    int am = gp_graph_add_node(g, d, GP_OP_ARGMAX, &big, 1, &a0, NULL, 0, GP_I32, "am", here);
    int small = gp_graph_make_output(g, d, am, "small", GP_I32, 1, sv, here); /* 16 B */
    if (gp_diag_count(d))
        fprintf(stderr, "%s", gp_diag_text(d));
    CU_ASSERT_EQUAL_FATAL(gp_diag_count(d), 0);
    gp_plan *p = build(g, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    int ids[5] = {x, late, small, mid, big};
    for (int k = 0; k < 5; k++) {
        CU_ASSERT_EQUAL(p->tensors[ids[k]].region, GP_REGION_IO);
        CU_ASSERT_EQUAL(p->tensors[ids[k]].offset, 256 * k);
    }
    CU_ASSERT_EQUAL(p->regions[GP_REGION_IO].size, 5 * 256);
    gp_plan_free(p);
    gp_graph_free(g);
    gp_diag_free(d);
}

static void test_view_lifetime(void)
{
    gp_graph *g = gp_graph_new("views");
    gp_diag *d = gp_diag_new(NULL);
    int x = leaf2(g, d, "x", GP_TENSOR_INPUT, C(4), C(8));
    int w = leaf2(g, d, "w", GP_TENSOR_WEIGHT, C(8), C(8));
    int a = op(g, d, GP_OP_MATMUL, "a", 2, x, w);    /* step 0 */
    int v = reshape1(g, d, a, 32, "v");               /* step 1: view of a */
    int s = slice(g, d, v, 0, 8, 16, "s");            /* step 2: view of v, bytes 32.. of a */
    int b = op(g, d, GP_OP_GELU, "b", 1, x);          /* step 3 */
    int c = op(g, d, GP_OP_SCALE, "c", 1, s);         /* step 4: reads a's storage via s */
    int e = op(g, d, GP_OP_ADD, "e", 2, b, x);        /* step 5 */
    CU_ASSERT_EQUAL(gp_diag_count(d), 0);
    gp_liveness *lv = gp_liveness_new(g, d);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lv);
    CU_ASSERT_EQUAL(lv->last[a], 1);
    CU_ASSERT_EQUAL(lv->first[v], 1);
    CU_ASSERT_EQUAL(lv->last[v], 2);
    CU_ASSERT_EQUAL(lv->first[s], 2);
    CU_ASSERT_EQUAL(lv->last[s], 4);
    CU_ASSERT_EQUAL(lv->root[v], a);
    CU_ASSERT_EQUAL(lv->root[s], a);
    CU_ASSERT_EQUAL(lv->root_offset[s], 32);
    CU_ASSERT_EQUAL(lv->storage_last[a], 4); /* extended by the view s */
    CU_ASSERT_EQUAL(lv->storage_last[v], -1);
    CU_ASSERT_EQUAL(lv->last[c], 4);
    CU_ASSERT_EQUAL(lv->last[e], 5);
    gp_liveness_free(lv);

    gp_plan *p = build(g, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL(p->tensors[a].last, 4);
    CU_ASSERT_EQUAL(p->tensors[v].region, GP_REGION_ARENA);
    CU_ASSERT_EQUAL(p->tensors[s].offset, p->tensors[a].offset + 32);
    CU_ASSERT_EQUAL(p->tensors[s].size, 64);
    CU_ASSERT_EQUAL(p->tensors[s].view_src, v);
    CU_ASSERT_EQUAL(p->tensors[s].view_offset, 32);
    /* b (steps 3..5) must not take a's bytes, which s still reads at step 4. */
    CU_ASSERT_FALSE(bytes_meet(&p->tensors[a], &p->tensors[b]));
    gp_plan_free(p);
    gp_diag_free(d);
    gp_graph_free(g);
}

/* ---- in-place ---- */

static void test_inplace_chain(void)
{
    gp_graph *g = gp_graph_new("chain");
    gp_diag *d = gp_diag_new(NULL);
    int x = leaf2(g, d, "x", GP_TENSOR_INPUT, C(4), C(8));
    int w = leaf2(g, d, "w", GP_TENSOR_WEIGHT, C(8), C(8));
    gp_dim s8[1] = {C(8)};
    int wn = gp_graph_add_tensor(g, d, "wn", GP_TENSOR_WEIGHT, GP_F32, 1, s8, "norm.weight", here);
    int a = op(g, d, GP_OP_MATMUL, "a", 2, x, w);
    int b = op(g, d, GP_OP_GELU, "b", 1, a);
    int c = op(g, d, GP_OP_SILU, "c", 1, b);
    int e = op(g, d, GP_OP_SCALE, "e", 1, c);
    int f = op(g, d, GP_OP_RMS_NORM, "f", 2, e, wn);
    int h = op(g, d, GP_OP_MATMUL, "h", 2, f, w); /* no in-place for matmul */
    CU_ASSERT_EQUAL(gp_diag_count(d), 0);
    gp_plan *p = build(g, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL(p->tensors[b].inplace_of, a);
    CU_ASSERT_EQUAL(p->tensors[c].inplace_of, b);
    CU_ASSERT_EQUAL(p->tensors[e].inplace_of, c);
    CU_ASSERT_EQUAL(p->tensors[f].inplace_of, e);
    CU_ASSERT_EQUAL(p->tensors[h].inplace_of, -1);
    int ids[] = {b, c, e, f};
    for (int i = 0; i < 4; i++)
        CU_ASSERT_EQUAL(p->tensors[ids[i]].offset, p->tensors[a].offset);
    CU_ASSERT_FALSE(bytes_meet(&p->tensors[f], &p->tensors[h]));
    CU_ASSERT_STRING_EQUAL(p->tensors[wn].weight_name, "norm.weight");
    gp_plan_free(p);
    gp_diag_free(d);
    gp_graph_free(g);
}

static void test_inplace_refused(void)
{
    gp_graph *g = gp_graph_new("refused");
    gp_diag *d = gp_diag_new(NULL);
    int x = leaf2(g, d, "x", GP_TENSOR_INPUT, C(4), C(8));
    int x1 = leaf2(g, d, "x1", GP_TENSOR_INPUT, C(1), C(8));
    int w = leaf2(g, d, "w", GP_TENSOR_WEIGHT, C(8), C(8));
    int st = leaf2(g, d, "st", GP_TENSOR_STATE, C(4), C(8));
    int w48 = leaf2(g, d, "w48", GP_TENSOR_WEIGHT, C(4), C(8));
    /* Read later: a is read again by c after b = gelu(a). */
    int a = op(g, d, GP_OP_MATMUL, "a", 2, x, w);
    int b = op(g, d, GP_OP_GELU, "b", 1, a);
    int c = op(g, d, GP_OP_ADD, "c", 2, b, a); /* b dies here: c may take it */
    /* A view of it read later: v = reshape(m) is read after n = gelu(m). */
    int m = op(g, d, GP_OP_MATMUL, "m", 2, x, w);
    int v = reshape1(g, d, m, 32, "v");
    int n = op(g, d, GP_OP_GELU, "n", 1, m);
    int q = op(g, d, GP_OP_SCALE, "q", 1, v);
    /* Sizes differ: k [1, 8] + x [4, 8] broadcasts to [4, 8]. */
    int k = op(g, d, GP_OP_MATMUL, "k", 2, x1, w);
    int kb = op(g, d, GP_OP_ADD, "kb", 2, k, x);
    /* Leaves: an input, a weight, a state. */
    int gi = op(g, d, GP_OP_GELU, "gi", 1, x);
    int gw = op(g, d, GP_OP_SCALE, "gw", 1, w48);
    int gs = op(g, d, GP_OP_SILU, "gs", 1, st);
    /* Another input shares the storage: ma = mul(r, view of r). */
    int r = op(g, d, GP_OP_MATMUL, "r", 2, x, w);
    int rv = slice(g, d, r, 0, 0, 4, "rv");
    int ma = op(g, d, GP_OP_MUL, "ma", 2, r, rv);
    /* Keep everything read to the end so that only the rule under test decides. */
    int sink = op(g, d, GP_OP_ADD, "s1", 2, c, n);
    sink = op(g, d, GP_OP_ADD, "s2", 2, sink, kb);
    sink = op(g, d, GP_OP_ADD, "s3", 2, sink, gi);
    sink = op(g, d, GP_OP_ADD, "s4", 2, sink, gs);
    sink = op(g, d, GP_OP_ADD, "s5", 2, sink, ma);
    int q2 = op(g, d, GP_OP_ADD, "s6", 2, gw, x);
    CU_ASSERT_EQUAL_FATAL(gp_diag_count(d), 0);
    gp_plan *p = build(g, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL(p->tensors[b].inplace_of, -1);
    CU_ASSERT_EQUAL(p->tensors[c].inplace_of, b);
    CU_ASSERT_EQUAL(p->tensors[n].inplace_of, -1);
    /* q = scale(v): v is all of m, contiguous, and m's storage dies at q: taken over. */
    CU_ASSERT_EQUAL(p->tensors[q].inplace_of, v);
    CU_ASSERT_EQUAL(p->tensors[kb].inplace_of, -1);
    CU_ASSERT_EQUAL(p->tensors[gi].inplace_of, -1);
    CU_ASSERT_EQUAL(p->tensors[gw].inplace_of, -1);
    CU_ASSERT_EQUAL(p->tensors[gs].inplace_of, -1);
    CU_ASSERT_EQUAL(p->tensors[ma].inplace_of, -1);
    CU_ASSERT_EQUAL(p->tensors[q2].inplace_of, gw); /* gw dies at s6: the control case */
    CU_ASSERT_FALSE(bytes_meet(&p->tensors[a], &p->tensors[b]));
    CU_ASSERT_FALSE(bytes_meet(&p->tensors[m], &p->tensors[n]));
    CU_ASSERT_FALSE(bytes_meet(&p->tensors[k], &p->tensors[kb]));
    CU_ASSERT_FALSE(bytes_meet(&p->tensors[r], &p->tensors[ma]));
    gp_plan_free(p);
    gp_diag_free(d);
    gp_graph_free(g);
}

/* A reshape view of an intermediate that dies at the op is taken over: the view has the output's
 * shape and sits at offset 0 of its storage. */
static void test_inplace_through_view(void)
{
    gp_graph *g = gp_graph_new("viewin");
    gp_diag *d = gp_diag_new(NULL);
    int x = leaf2(g, d, "x", GP_TENSOR_INPUT, C(4), C(8));
    int w = leaf2(g, d, "w", GP_TENSOR_WEIGHT, C(8), C(8));
    int a = op(g, d, GP_OP_MATMUL, "a", 2, x, w);
    int v = reshape1(g, d, a, 32, "v");
    int b = op(g, d, GP_OP_GELU, "b", 1, v);
    int s = slice(g, d, a, 0, 1, 3, "s"); /* offset 32: never in place */
    int c = op(g, d, GP_OP_GELU, "c", 1, s);
    (void)c;
    CU_ASSERT_EQUAL_FATAL(gp_diag_count(d), 0);
    gp_plan *p = build(g, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    /* a is still read (through s) after b: refused. */
    CU_ASSERT_EQUAL(p->tensors[b].inplace_of, -1);
    CU_ASSERT_EQUAL(p->tensors[c].inplace_of, -1);
    gp_plan_free(p);

    gp_graph *g2 = gp_graph_new("viewin2");
    x = leaf2(g2, d, "x", GP_TENSOR_INPUT, C(4), C(8));
    w = leaf2(g2, d, "w", GP_TENSOR_WEIGHT, C(8), C(8));
    a = op(g2, d, GP_OP_MATMUL, "a", 2, x, w);
    v = reshape1(g2, d, a, 32, "v");
    b = op(g2, d, GP_OP_GELU, "b", 1, v);
    CU_ASSERT_EQUAL_FATAL(gp_diag_count(d), 0);
    p = build(g2, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL(p->tensors[b].inplace_of, v);
    CU_ASSERT_EQUAL(p->tensors[b].offset, p->tensors[a].offset);
    gp_plan_free(p);
    gp_graph_free(g2);
    gp_diag_free(d);
    gp_graph_free(g);
}

/* ---- workspaces ---- */

static void test_workspaces(void)
{
    gp_graph *g = gp_graph_new("ws");
    gp_diag *d = gp_diag_new(NULL);
    int T = gp_graph_add_sym(g, "T", 64, here);
    gp_dim sq[3] = {{64, T}, C(8), C(16)}, skv[3] = {C(32), C(2), C(16)}, sp[1] = {{64, T}};
    int q = gp_graph_add_tensor(g, d, "q", GP_TENSOR_INPUT, GP_F32, 3, sq, NULL, here);
    int k = gp_graph_add_tensor(g, d, "k", GP_TENSOR_STATE, GP_F32, 3, skv, NULL, here);
    int vv = gp_graph_add_tensor(g, d, "v", GP_TENSOR_STATE, GP_F32, 3, skv, NULL, here);
    int pos = gp_graph_add_tensor(g, d, "pos", GP_TENSOR_INPUT, GP_I32, 1, sp, NULL, here);
    int att = op(g, d, GP_OP_ATTENTION, "att", 4, q, k, vv, pos); /* step 0 */
    int sm = op(g, d, GP_OP_SOFTMAX, "sm", 1, att);                /* step 1 */
    int w = leaf2(g, d, "w", GP_TENSOR_WEIGHT, C(16), C(16));
    int mm = op(g, d, GP_OP_MATMUL, "mm", 2, sm, w);               /* step 2 */
    CU_ASSERT_EQUAL_FATAL(gp_diag_count(d), 0);

    const gp_node *na = &g->nodes[0], *ns = &g->nodes[1], *nm = &g->nodes[2];
    /* CUDA: 16 splits x min(T, 16) rows x 8 heads x (16 + 2) f32; CPU: 64 threads x S f32. */
    CU_ASSERT_EQUAL(gp_op_workspace_bytes(na, g, GP_BACKEND_CUDA), 16 * 16 * 8 * 18 * 4);
    CU_ASSERT_EQUAL(gp_op_workspace_bytes(na, g, GP_BACKEND_CPU), 64 * 32 * 4);
    CU_ASSERT_EQUAL(gp_op_workspace_bytes(ns, g, GP_BACKEND_CUDA), 0);
    CU_ASSERT_EQUAL(gp_op_workspace_bytes(ns, g, GP_BACKEND_CPU), 0);
    CU_ASSERT_EQUAL(gp_op_workspace_bytes(nm, g, GP_BACKEND_CUDA), 32 << 20);
    CU_ASSERT_EQUAL(gp_op_workspace_bytes(nm, g, GP_BACKEND_CPU), 0);

    /* a quantized weight: on the CPU the activations' bf16 halves for AMX prompts, 4 K bytes a
     * row, rows rounded up to 16 (cpu/quant.h); none for a row count <= 5 */
    {
        gp_graph *gq = gp_graph_new("wsq");
        int R = gp_graph_add_sym(gq, "R", 37, here);
        gp_dim sx[2] = {{37, R}, C(64)}, sw[2] = {C(48), C(64)}, s1[2] = {C(5), C(64)};
        int x = gp_graph_add_tensor(gq, d, "x", GP_TENSOR_INPUT, GP_F32, 2, sx, NULL, here);
        int x1 = gp_graph_add_tensor(gq, d, "x1", GP_TENSOR_INPUT, GP_F32, 2, s1, NULL, here);
        int wq = gp_graph_add_tensor(gq, d, "wq", GP_TENSOR_WEIGHT, GP_Q4_0, 2, sw, NULL, here);
        gp_attrs at;
        memset(&at, 0, sizeof at);
        at.i[GP_MATMUL_TB] = 1; /* b [N, K] */
        int in0[2] = {x, wq}, in1[2] = {x1, wq};
        gp_graph_add_node(gq, d, GP_OP_MATMUL, in0, 2, &at, NULL, 0, GP_F32, "yq", here);
        gp_graph_add_node(gq, d, GP_OP_MATMUL, in1, 2, &at, NULL, 0, GP_F32, "y1", here);
        CU_ASSERT_EQUAL_FATAL(gp_diag_count(d), 0);
        CU_ASSERT_EQUAL(gp_op_workspace_bytes(&gq->nodes[0], gq, GP_BACKEND_CPU), 4 * 64 * 48);
        CU_ASSERT_EQUAL(gp_op_workspace_bytes(&gq->nodes[0], gq, GP_BACKEND_CUDA), 32 << 20);
        CU_ASSERT_EQUAL(gp_op_workspace_bytes(&gq->nodes[1], gq, GP_BACKEND_CPU), 0);
        gp_graph_free(gq);
    }

    gp_plan *p = build(g, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL_FATAL(p->n_tensors, g->n_tensors + 2);
    int wa = p->nodes[0].workspace, wm = p->nodes[2].workspace;
    CU_ASSERT_EQUAL(p->nodes[1].workspace, -1);
    CU_ASSERT_EQUAL(wa, g->n_tensors);
    CU_ASSERT_EQUAL(wm, g->n_tensors + 1);
    CU_ASSERT_STRING_EQUAL(p->tensors[wa].name, "ws.att");
    CU_ASSERT_STRING_EQUAL(p->tensors[wm].name, "ws.mm");
    CU_ASSERT_EQUAL(p->tensors[wa].size, 16 * 16 * 8 * 18 * 4);
    CU_ASSERT_EQUAL(p->tensors[wm].size, 32 << 20);
    CU_ASSERT_EQUAL(p->tensors[wa].kind, GP_TENSOR_INTERMEDIATE);
    CU_ASSERT_EQUAL(p->tensors[wa].region, GP_REGION_ARENA);
    CU_ASSERT_EQUAL(p->tensors[wa].first, 0);
    CU_ASSERT_EQUAL(p->tensors[wa].last, 0);
    CU_ASSERT_EQUAL(p->tensors[wm].first, 2);
    CU_ASSERT_EQUAL(p->tensors[wm].last, 2);
    CU_ASSERT_EQUAL(p->tensors[wa].producer, 0);
    /* Live with att (written at step 0) and with sm and mm at step 2. */
    CU_ASSERT_FALSE(bytes_meet(&p->tensors[wa], &p->tensors[att]));
    CU_ASSERT_FALSE(bytes_meet(&p->tensors[wm], &p->tensors[sm]));
    CU_ASSERT_FALSE(bytes_meet(&p->tensors[wm], &p->tensors[mm]));
    /* The softmax runs in place of att; the workspaces live one step and may share bytes. */
    CU_ASSERT_EQUAL(p->tensors[sm].inplace_of, att);
    /* Symbolic dims are planned at their bounds and recorded per dim. */
    CU_ASSERT_EQUAL(p->n_syms, 1);
    CU_ASSERT_STRING_EQUAL(p->syms[0].name, "T");
    CU_ASSERT_EQUAL(p->syms[0].bound, 64);
    CU_ASSERT_EQUAL(p->tensors[att].sym[0], T);
    CU_ASSERT_EQUAL(p->tensors[att].sym[1], -1);
    CU_ASSERT_EQUAL(p->tensors[att].dims[0], 64);
    CU_ASSERT_EQUAL(p->tensors[att].size, 64 * 8 * 16 * 4);
    CU_ASSERT_EQUAL(p->tensors[mm].sym[0], T);
    /* A plan sized for every backend satisfies both. */
    char err[512];
    CU_ASSERT_EQUAL(gp_plan_check_workspaces(p, GP_BACKEND_CPU, err, sizeof err), 0);
    CU_ASSERT_EQUAL(gp_plan_check_workspaces(p, GP_BACKEND_CUDA, err, sizeof err), 0);
    gp_plan_free(p);

    /* Sized for the CPU only: no matmul workspace, attention's is the CPU one; CUDA refuses it. */
    gp_plan_opts cpu = {.backends = GP_BACKEND_BIT(GP_BACKEND_CPU)};
    p = build(g, &cpu);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL(p->n_tensors, g->n_tensors + 1);
    CU_ASSERT_EQUAL(p->nodes[2].workspace, -1);
    CU_ASSERT_EQUAL(p->tensors[p->nodes[0].workspace].size, 64 * 32 * 4);
    CU_ASSERT_EQUAL(gp_plan_check_workspaces(p, GP_BACKEND_CPU, err, sizeof err), 0);
    CU_ASSERT_EQUAL(gp_plan_check_workspaces(p, GP_BACKEND_CUDA, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "ws: node 0 (attention) has a workspace of 8192 bytes, the cuda "
                                "backend needs 147456: the plan was built for another backend "
                                "(gplan-compile --backend cuda or any)");
    gp_plan_free(p);

    /* Sized for CUDA only: the CPU runs attention on as many threads as the workspace holds. */
    gp_plan_opts cuda = {.backends = GP_BACKEND_BIT(GP_BACKEND_CUDA)};
    p = build(g, &cuda);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    CU_ASSERT_EQUAL(p->tensors[p->nodes[0].workspace].size, 16 * 16 * 8 * 18 * 4);
    CU_ASSERT_EQUAL(gp_plan_check_workspaces(p, GP_BACKEND_CPU, err, sizeof err), 0);
    CU_ASSERT_EQUAL(gp_plan_check_workspaces(p, GP_BACKEND_CUDA, err, sizeof err), 0);
    gp_plan_free(p);

    /* A CPU-only plan whose attention workspace is below one thread's scores is refused there. */
    p = build(g, &cpu);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    p->tensors[p->nodes[0].workspace].size = 32 * 4 - 1;
    CU_ASSERT_EQUAL(gp_plan_check_workspaces(p, GP_BACKEND_CPU, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "the cpu backend needs 128"));
    gp_plan_free(p);
    gp_diag_free(d);
    gp_graph_free(g);
}

/*
 * A one-token attention that a backend may run fused with what feeds it (CUDA: the ropes and the
 * K/V cache stores run inside the attention kernel, which reads their sources in their place): its
 * workspace lives from the first of those nodes, so its bytes never lie over a source.
 */
static void test_workspace_fused_attention(void)
{
    gp_graph *g = gp_graph_new("fused");
    gp_diag *d = gp_diag_new(NULL);
    int T = gp_graph_add_sym(g, "T", 64, here);
    gp_dim sq[3] = {{64, T}, C(8), C(16)}, sk[3] = {{64, T}, C(2), C(16)};
    gp_dim sc[3] = {C(32), C(2), C(16)}, sp[1] = {{64, T}};
    int xq = gp_graph_add_tensor(g, d, "xq", GP_TENSOR_INPUT, GP_F32, 3, sq, NULL, here);
    int xk = gp_graph_add_tensor(g, d, "xk", GP_TENSOR_INPUT, GP_F32, 3, sk, NULL, here);
    int kc = gp_graph_add_tensor(g, d, "kc", GP_TENSOR_STATE, GP_F32, 3, sc, NULL, here);
    int vc = gp_graph_add_tensor(g, d, "vc", GP_TENSOR_STATE, GP_F32, 3, sc, NULL, here);
    int pos = gp_graph_add_tensor(g, d, "pos", GP_TENSOR_INPUT, GP_I32, 1, sp, NULL, here);
    int q0 = op(g, d, GP_OP_SCALE, "q0", 1, xq);               /* step 0 */
    int k0 = op(g, d, GP_OP_SCALE, "k0", 1, xk);               /* step 1 */
    int v0 = op(g, d, GP_OP_GELU, "v0", 1, xk);                /* step 2 */
    int qr = op(g, d, GP_OP_ROPE, "qr", 2, q0, pos);           /* step 3 */
    int kr = op(g, d, GP_OP_ROPE, "kr", 2, k0, pos);           /* step 4 */
    int ks = op(g, d, GP_OP_STORE, "ks", 3, kc, pos, kr);      /* step 5 */
    int vs = op(g, d, GP_OP_STORE, "vs", 3, vc, pos, v0);      /* step 6 */
    int att = op(g, d, GP_OP_ATTENTION, "att", 4, qr, ks, vs, pos); /* step 7 */
    op(g, d, GP_OP_SCALE, "out", 1, att);                      /* step 8 */
    CU_ASSERT_EQUAL_FATAL(gp_diag_count(d), 0);
    gp_plan *p = build(g, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    int w = p->nodes[7].workspace;
    CU_ASSERT_FATAL(w >= 0);
    const gp_plan_tensor *ws = &p->tensors[w];
    /* From the first rope (step 3; the scales are not fused) to the attention. */
    CU_ASSERT_EQUAL(ws->first, 3);
    CU_ASSERT_EQUAL(ws->last, 7);
    const int reads[] = {q0, k0, v0, qr, kr};
    for (int i = 0; i < 5; i++)
        CU_ASSERT_FALSE(bytes_meet(ws, &p->tensors[reads[i]]));
    gp_plan_free(p);
    gp_diag_free(d);
    gp_graph_free(g);
}

static void test_bad_options(void)
{
    gp_graph *g = chain4();
    gp_diag *d = gp_diag_new(NULL);
    gp_plan *p = (gp_plan *)&p;
    gp_plan_opts o = {.alignment = 48};
    CU_ASSERT_EQUAL(gp_plan_build(g, &o, &p, d), -1);
    CU_ASSERT_PTR_NULL(p);
    CU_ASSERT_PTR_NOT_NULL(strstr(gp_diag_text(d), "alignment 48 is not a power of two"));
    o = (gp_plan_opts){.n_devices = 65};
    CU_ASSERT_EQUAL(gp_plan_build(g, &o, &p, d), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(gp_diag_text(d), "65 devices"));
    o = (gp_plan_opts){.backends = 0x10};
    CU_ASSERT_EQUAL(gp_plan_build(g, &o, &p, d), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(gp_diag_text(d), "unknown backend mask 0x10"));
    o = (gp_plan_opts){.strategy = (gp_strategy)7};
    CU_ASSERT_EQUAL(gp_plan_build(g, &o, &p, d), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(gp_diag_text(d), "unknown strategy 7"));
    gp_diag_free(d);
    gp_graph_free(g);
}

/* ---- random DAGs ---- */

/* A random graph of elementwise ops, matmuls, norms and views over [R, C] tensors, R maybe
 * symbolic. */
static gp_graph *random_graph(uint64_t *rng, int n_ops)
{
    gp_graph *g = gp_graph_new("random");
    gp_diag *d = gp_diag_new(NULL);
    int T = gp_graph_add_sym(g, "T", 1 + (int64_t)(gp_test_rand(rng) % 16), here);
    gp_dim rows = gp_test_rand(rng) % 2 ? (gp_dim){g->syms[T].bound, T}
                                        : C(1 + (int64_t)(gp_test_rand(rng) % 8));
    static const int64_t cols[] = {4, 8, 16, 64};
    int n_in = 1 + (int)(gp_test_rand(rng) % 3);
    for (int i = 0; i < n_in; i++) {
        char name[16];
        snprintf(name, sizeof name, "in%d", i);
        leaf2(g, d, name, GP_TENSOR_INPUT, rows, C(cols[gp_test_rand(rng) % 4]));
    }
    int weights[4];
    for (int i = 0; i < 4; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        weights[i] = leaf2(g, d, name, GP_TENSOR_WEIGHT, C(cols[i]),
                           C(cols[gp_test_rand(rng) % 4]));
    }
    for (int k = 0; k < n_ops; k++) {
        /* Pick a recent 2-d float tensor that is not a weight. */
        int x = -1;
        for (int tries = 0; tries < 20 && x < 0; tries++) {
            int back = 1 + (int)(gp_test_rand(rng) % 6);
            int cand = g->n_tensors - back;
            if (cand >= 0 && g->tensors[cand].ndim == 2 && g->tensors[cand].kind != GP_TENSOR_WEIGHT)
                x = cand;
        }
        if (x < 0)
            x = 0;
        const gp_tensor *xt = &g->tensors[x];
        int64_t xc = xt->shape[1].size;
        int const_cols = xt->shape[1].sym < 0;
        int wi = xc == 4 ? 0 : xc == 8 ? 1 : xc == 16 ? 2 : xc == 64 ? 3 : -1;
        int r = (int)(gp_test_rand(rng) % 10);
        if (r >= 3 && r < 5) {
            /* A binary op with an earlier tensor of the same shape, else with itself. */
            int y = x;
            for (int t = 0; t < g->n_tensors; t++) {
                int c = (int)(gp_test_rand(rng) % (uint64_t)g->n_tensors);
                const gp_tensor *ct = &g->tensors[c];
                if (c != x && ct->ndim == 2 && ct->kind != GP_TENSOR_WEIGHT &&
                    ct->shape[0].sym == xt->shape[0].sym && ct->shape[0].size == xt->shape[0].size &&
                    ct->shape[1].sym == xt->shape[1].sym && ct->shape[1].size == xc) {
                    y = c;
                    break;
                }
            }
            static const gp_op bin[] = {GP_OP_ADD, GP_OP_MUL, GP_OP_SUB};
            if (gp_test_rand(rng) % 2)
                op(g, d, bin[gp_test_rand(rng) % 3], NULL, 2, x, y);
            else
                op(g, d, bin[gp_test_rand(rng) % 3], NULL, 2, y, x);
        } else if (r >= 5 && r < 7 && const_cols && wi >= 0) {
            op(g, d, GP_OP_MATMUL, NULL, 2, x, weights[wi]);
        } else if (r == 7 && const_cols && xc > 1) {
            int64_t len = 1 + (int64_t)(gp_test_rand(rng) % (uint64_t)(xc - 1));
            gp_attrs a;
            memset(&a, 0, sizeof a);
            a.i[GP_SLICE_AXIS] = 1;
            a.i[GP_SLICE_START] = (int64_t)(gp_test_rand(rng) % (uint64_t)(xc - len + 1));
            a.i[GP_SLICE_LEN] = len;
            int s = gp_graph_add_node(g, d, GP_OP_SLICE, &x, 1, &a, NULL, 0, GP_F32, NULL, here);
            if (gp_test_rand(rng) % 2)
                op(g, d, GP_OP_CONT, NULL, 1, s);
        } else if (r == 8 && const_cols && xc % 2 == 0 && gp_tensor_is_contiguous(xt)) {
            /* Reshape [R, C] -> [R, C/2, 2] -> [R, C]: a view chain back to the same shape. */
            gp_dim s3[3] = {xt->shape[0], C(xc / 2), C(2)}, s2[2] = {xt->shape[0], C(xc)};
            gp_attrs a;
            memset(&a, 0, sizeof a);
            int v = gp_graph_add_node(g, d, GP_OP_RESHAPE, &x, 1, &a, s3, 3, GP_F32, NULL, here);
            gp_graph_add_node(g, d, GP_OP_RESHAPE, &v, 1, &a, s2, 2, GP_F32, NULL, here);
        } else if (r == 9) {
            gp_attrs a;
            memset(&a, 0, sizeof a);
            a.i[GP_PERMUTE_AXES + 0] = 1;
            a.i[GP_PERMUTE_AXES + 1] = 0;
            int t = gp_graph_add_node(g, d, GP_OP_PERMUTE, &x, 1, &a, NULL, 0, GP_F32, NULL, here);
            op(g, d, GP_OP_CONT, NULL, 1, t);
        } else {
            static const gp_op un[] = {GP_OP_GELU, GP_OP_SILU, GP_OP_SCALE, GP_OP_SOFTMAX};
            op(g, d, un[gp_test_rand(rng) % 4], NULL, 1, x);
        }
    }
    int last = g->n_tensors - 1;
    if (gp_test_rand(rng) % 2 && g->tensors[last].kind == GP_TENSOR_INTERMEDIATE) {
        const gp_tensor *lt = &g->tensors[last];
        gp_graph_make_output(g, d, last, "out", lt->dtype, lt->ndim, lt->shape, here);
    }
    CU_ASSERT_EQUAL(gp_diag_count(d), 0);
    if (gp_diag_count(d))
        fprintf(stderr, "%s", gp_diag_text(d));
    gp_diag_free(d);
    return g;
}

static int storage_root(const gp_plan *p, int t)
{
    while (p->tensors[t].view_src >= 0)
        t = p->tensors[t].view_src;
    return t;
}

/* The root of t's in-place group: through views and in-place targets. */
static int group_of(const gp_plan *p, int t)
{
    t = storage_root(p, t);
    while (p->tensors[t].inplace_of >= 0)
        t = storage_root(p, p->tensors[t].inplace_of);
    return t;
}

static void check_plan_properties(const gp_plan *p, int64_t align)
{
    int n = p->n_tensors;
    int64_t arena = p->regions[GP_REGION_ARENA].size;
    /* Every intermediate placed, aligned, inside the arena. */
    for (int i = 0; i < n; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        if (t->kind == GP_TENSOR_INTERMEDIATE) {
            CU_ASSERT_EQUAL(t->region, GP_REGION_ARENA);
            CU_ASSERT_EQUAL(t->offset % align, 0);
            CU_ASSERT(t->offset >= 0 && t->offset + t->size <= arena);
        }
    }
    /* Pairwise, independent of the planner: distinct groups alive at one step never share bytes. */
    for (int i = 0; i < n; i++) {
        const gp_plan_tensor *a = &p->tensors[i];
        if (a->region != GP_REGION_ARENA || a->view_src >= 0)
            continue;
        for (int j = i + 1; j < n; j++) {
            const gp_plan_tensor *b = &p->tensors[j];
            if (b->region != GP_REGION_ARENA || b->view_src >= 0 || group_of(p, i) == group_of(p, j))
                continue;
            int time = a->first <= b->last && b->first <= a->last;
            if (time && bytes_meet(a, b)) {
                CU_FAIL("two live arena tensors overlap");
                fprintf(stderr, "overlap: %s [%d,%d] @%lld+%lld and %s [%d,%d] @%lld+%lld\n",
                        a->name, a->first, a->last, (long long)a->offset, (long long)a->size,
                        b->name, b->first, b->last, (long long)b->offset, (long long)b->size);
                return;
            }
        }
    }
    /* The same through gp_assign_check, one buffer per group, and the lower bound recomputed. */
    gp_buffer *bufs = calloc((size_t)n + 1, sizeof *bufs);
    int *slot = malloc(((size_t)n + 1) * sizeof *slot);
    size_t nb = 0;
    for (int i = 0; i < n; i++)
        slot[i] = -1;
    for (int i = 0; i < n; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        if (t->region != GP_REGION_ARENA || t->view_src >= 0)
            continue;
        int gi = group_of(p, i);
        if (slot[gi] < 0) {
            slot[gi] = (int)nb;
            bufs[nb] = (gp_buffer){t->first, t->last + 1, (t->size + align - 1) / align * align,
                                   t->offset};
            nb++;
        }
        gp_buffer *bf = &bufs[slot[gi]];
        if (t->first < bf->lower)
            bf->lower = t->first;
        if (t->last + 1 > bf->upper)
            bf->upper = t->last + 1;
        CU_ASSERT_EQUAL(bf->offset, t->offset);
    }
    char why[256];
    CU_ASSERT_EQUAL(gp_assign_check(bufs, nb, arena, why, sizeof why), 0);
    int64_t lb = 0;
    for (int s = 0; s < (p->n_nodes ? p->n_nodes : 1); s++) {
        int64_t live = 0;
        for (size_t k = 0; k < nb; k++)
            if (bufs[k].lower <= s && s < bufs[k].upper)
                live += bufs[k].size;
        if (live > lb)
            lb = live;
    }
    CU_ASSERT_EQUAL(p->lower_bound, lb);
    CU_ASSERT(arena >= lb);
    free(bufs);
    free(slot);
    /* Every node reads storage that is alive; an in-place output's input storage is read no more
     * after the output is written (recomputed from the nodes). */
    int *maxread = malloc(((size_t)n + 1) * sizeof *maxread);
    for (int i = 0; i < n; i++)
        maxread[i] = -1;
    for (int s = 0; s < p->n_nodes; s++) {
        for (int k = 0; k < p->nodes[s].n_inputs; k++) {
            int r = storage_root(p, p->nodes[s].inputs[k]);
            CU_ASSERT(p->tensors[r].first <= s && s <= p->tensors[r].last);
            if (maxread[r] < s)
                maxread[r] = s;
        }
    }
    for (int i = 0; i < n; i++) {
        int x = p->tensors[i].inplace_of;
        if (x >= 0)
            CU_ASSERT(maxread[storage_root(p, x)] <= p->tensors[i].first);
    }
    free(maxread);
}

static void test_random_dags(void)
{
    uint64_t rng = 12345;
    int total_inplace = 0, total_views = 0;
    for (int seed = 0; seed < 300; seed++) {
        gp_graph *g = random_graph(&rng, 5 + (int)(gp_test_rand(&rng) % 60));
        gp_plan_opts o = {0};
        o.alignment = (int64_t)1 << (gp_test_rand(&rng) % 9);
        o.strategy = (gp_strategy)(gp_test_rand(&rng) % 2 ? GP_STRATEGY_AUTO : GP_STRATEGY_GREEDY);
        o.time_limit = 0.05;
        o.no_inplace = gp_test_rand(&rng) % 5 == 0;
        gp_plan *p = build(g, &o);
        CU_ASSERT_PTR_NOT_NULL(p);
        if (p) {
            check_plan_properties(p, o.alignment);
            for (int i = 0; i < p->n_tensors; i++) {
                total_inplace += p->tensors[i].inplace_of >= 0;
                total_views += p->tensors[i].view_src >= 0;
            }
            /* Every generated plan survives the loader. */
            unsigned char *buf;
            size_t len;
            char err[256];
            CU_ASSERT_EQUAL(gp_plan_write_mem(p, &buf, &len, err, sizeof err), 0);
            gp_plan *q = NULL;
            int rc = gp_plan_load_mem(buf, len, "random", &q, err, sizeof err);
            if (rc)
                fprintf(stderr, "%s\n", err);
            CU_ASSERT_EQUAL(rc, 0);
            gp_plan_free(q);
            free(buf);
        }
        gp_plan_free(p);
        gp_graph_free(g);
    }
    /* The generator exercises in-place ops and views (else the properties prove little). */
    CU_ASSERT(total_inplace > 100);
    CU_ASSERT(total_views > 100);
}

/* ---- the plan file ---- */

/* A graph with every feature the format carries: a symbolic dim, an input of i32, a weight with a
 * checkpoint name, state, a store (a view of the state), a slice view, in-place ops, workspaces,
 * an output and source locations. */
static gp_graph *fixture_graph(gp_diag *d)
{
    gp_graph *g = gp_graph_new("fixture");
    const char *file = gp_diag_add_source(d, "fixture.gplan", "x\n", 2);
    gp_loc L1 = {file, 3, 5}, L2 = {file, 7, 9};
    int T = gp_graph_add_sym(g, "T", 8, L1);
    gp_dim sx[2] = {{8, T}, C(16)}, sp[1] = {{8, T}}, sw[2] = {C(16), C(16)}, sc[2] = {C(32), C(16)};
    int x = gp_graph_add_tensor(g, d, "x", GP_TENSOR_INPUT, GP_F32, 2, sx, NULL, L1);
    int pos = gp_graph_add_tensor(g, d, "pos", GP_TENSOR_INPUT, GP_I32, 1, sp, NULL, L1);
    int w = gp_graph_add_tensor(g, d, "w", GP_TENSOR_WEIGHT, GP_F16, 2, sw, "layer.0.w", L1);
    int cache = gp_graph_add_tensor(g, d, "cache", GP_TENSOR_STATE, GP_F32, 2, sc, NULL, L1);
    gp_attrs a0;
    memset(&a0, 0, sizeof a0);
    int in2[2] = {x, w};
    int a = gp_graph_add_node(g, d, GP_OP_MATMUL, in2, 2, &a0, NULL, 0, GP_F32, "a", L2);
    int b = gp_graph_add_node(g, d, GP_OP_GELU, &a, 1, &a0, NULL, 0, GP_F32, "b", L2);
    int in3[3] = {cache, pos, b};
    int kv = gp_graph_add_node(g, d, GP_OP_STORE, in3, 3, &a0, NULL, 0, GP_F32, "kv", L2);
    gp_attrs sa = a0;
    sa.i[GP_SLICE_AXIS] = 0;
    sa.i[GP_SLICE_START] = 8;
    sa.i[GP_SLICE_LEN] = 8;
    int sl = gp_graph_add_node(g, d, GP_OP_SLICE, &kv, 1, &sa, NULL, 0, GP_F32, "sl", L2);
    int in4[2] = {b, x};
    int c = gp_graph_add_node(g, d, GP_OP_ADD, in4, 2, &a0, NULL, 0, GP_F32, "c", L2);
    gp_attrs ta = a0;
    ta.i[GP_MATMUL_TB] = 1; /* b transposed: sl is [N, K] */
    int in5[2] = {c, sl};
    int m = gp_graph_add_node(g, d, GP_OP_MATMUL, in5, 2, &ta, NULL, 0, GP_F32, "m", L2);
    gp_attrs sc2 = a0;
    sc2.f[GP_SCALE_FACTOR] = 0.125;
    int s = gp_graph_add_node(g, d, GP_OP_SCALE, &m, 1, &sc2, NULL, 0, GP_F32, "s", L2);
    gp_dim so[2] = {{8, T}, C(8)};
    int out = gp_graph_make_output(g, d, s, "logits", GP_F32, 2, so, L2);
    CU_ASSERT(out >= 0);
    if (gp_diag_count(d))
        fprintf(stderr, "%s", gp_diag_text(d));
    CU_ASSERT_EQUAL(gp_diag_count(d), 0);
    return g;
}

static gp_plan *fixture_plan(void)
{
    /* The graph's locations point into the diag's file names: free it after planning. */
    gp_diag *d = gp_diag_new(NULL);
    gp_graph *g = fixture_graph(d);
    gp_plan *p = build(g, NULL);
    gp_graph_free(g);
    gp_diag_free(d);
    return p;
}

/*
 * Accumulated outputs (docs/plan-format.md): in plans for CUDA the output of a matmul of the norm
 * right before it lives from the matmul before it (or that one's norm, when it has one), so that
 * matmul's kernel may zero its bytes; in CPU plans, and for other matmuls, from its own step.
 */
static void test_accumulated_outputs(void)
{
    /* n1 = rms_norm(x) at 0, a = n1 w at 1, n2 = rms_norm(a) at 2, m = n2 w2 at 3, b = a w3 at
     * 4, n3 = rms_norm(b) at 5, k = n3 w4 at 6, out = k + m at 7 */
    gp_graph *g = gp_graph_new("normed");
    gp_diag *d = gp_diag_new(NULL);
    int x = leaf2(g, d, "x", GP_TENSOR_INPUT, C(4), C(8));
    gp_dim sk[1] = {C(8)};
    int gw = gp_graph_add_tensor(g, d, "g", GP_TENSOR_WEIGHT, GP_F32, 1, sk, NULL, here);
    int w[4];
    for (int i = 0; i < 4; i++) {
        char nm[8];
        snprintf(nm, sizeof nm, "w%d", i);
        w[i] = leaf2(g, d, nm, GP_TENSOR_WEIGHT, C(8), C(8));
    }
    gp_attrs an;
    memset(&an, 0, sizeof an);
    an.f[GP_RMS_NORM_EPS] = 1e-5;
    int in1[2] = {x, gw};
    int n1 = gp_graph_add_node(g, d, GP_OP_RMS_NORM, in1, 2, &an, NULL, 0, GP_F32, "n1", here);
    int a = op(g, d, GP_OP_MATMUL, "a", 2, n1, w[0]);
    int in2[2] = {a, gw};
    int n2 = gp_graph_add_node(g, d, GP_OP_RMS_NORM, in2, 2, &an, NULL, 0, GP_F32, "n2", here);
    int m = op(g, d, GP_OP_MATMUL, "m", 2, n2, w[1]);
    int b = op(g, d, GP_OP_MATMUL, "b", 2, a, w[2]);
    int in3[2] = {b, gw};
    int n3 = gp_graph_add_node(g, d, GP_OP_RMS_NORM, in3, 2, &an, NULL, 0, GP_F32, "n3", here);
    int k = op(g, d, GP_OP_MATMUL, "k", 2, n3, w[3]);
    int e = op(g, d, GP_OP_ADD, "e", 2, k, m);
    gp_dim s[2] = {C(4), C(8)};
    CU_ASSERT(gp_graph_make_output(g, d, e, "out", GP_F32, 2, s, here) >= 0);
    CU_ASSERT_EQUAL(gp_diag_count(d), 0);
    gp_plan_opts cpu = {.backends = GP_BACKEND_BIT(GP_BACKEND_CPU)};
    gp_plan_opts cuda = {.backends = GP_BACKEND_BIT(GP_BACKEND_CUDA)};
    gp_plan *pc = build(g, &cpu), *pg = build(g, &cuda), *pa = build(g, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pc);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pa);
    const struct {
        int t, cpu, cuda;
    } want[] = {{a, 1, 1},  /* normed, no matmul before it: its own step */
                {m, 3, 0},  /* normed, after a, whose norm is at step 0 */
                {b, 4, 4},  /* not normed */
                {k, 6, 4},  /* normed, after b, which is not */
                {n2, 2, 2}, {e, 7, 7}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        CU_ASSERT_EQUAL(pc->tensors[want[i].t].first, want[i].cpu);
        CU_ASSERT_EQUAL(pg->tensors[want[i].t].first, want[i].cuda);
        CU_ASSERT_EQUAL(pa->tensors[want[i].t].first, want[i].cuda); /* "any" serves CUDA too */
    }
    /* m's and k's bytes lie over nothing else alive meanwhile */
    for (int t = 0; t < pg->n_tensors; t++) {
        const gp_plan_tensor *pt = &pg->tensors[t];
        if (pt->region != GP_REGION_ARENA || pt->view_src >= 0)
            continue;
        if (t != m && pt->last >= 0 && pt->first <= 3)
            CU_ASSERT_FALSE(bytes_meet(pt, &pg->tensors[m]));
        if (t != k && t != m && pt->last >= 4 && pt->first <= 6)
            CU_ASSERT_FALSE(bytes_meet(pt, &pg->tensors[k]));
    }
    char why[256];
    CU_ASSERT_EQUAL(gp_plan_validate(pg, why, sizeof why), 0);
    gp_plan_free(pc);
    gp_plan_free(pg);
    gp_plan_free(pa);
    gp_graph_free(g);
    gp_diag_free(d);
}

/*
 * In plans for CUDA a one-token attention's launch may run the nodes feeding it (GPT-2's q, k and v
 * conts, from the slices of qkv, and the cache stores), reading their sources while it writes its
 * output and workspace: both start at the first of those nodes, so that neither lies over qkv,
 * which lives past it; in CPU plans the output starts at its node. The plan passes the loader's
 * checks (no two arena tensors alive at one step meet).
 */
static void test_attention_lifetimes(void)
{
    const char *defs[4] = {"n_layer=2", "n_embd=128", "n_head=4", "vocab_size=512"};
    gp_diag *d = gp_diag_new(NULL);
    gp_dsl_opts o = {.defines = defs, .n_defines = 4};
    gp_graph *g = gp_dsl_compile_file(gp_test_path("examples/gpt2.gplan"), &o, d);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    gp_plan_opts cpu = {.backends = GP_BACKEND_BIT(GP_BACKEND_CPU)};
    gp_plan_opts cuda = {.backends = GP_BACKEND_BIT(GP_BACKEND_CUDA)};
    gp_plan *pc = build(g, &cpu), *pg = build(g, &cuda);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pc);
    CU_ASSERT_PTR_NOT_NULL_FATAL(pg);
    int seen = 0;
    for (int a = 0; a < g->n_nodes; a++) {
        if (g->nodes[a].op != GP_OP_ATTENTION)
            continue;
        seen++;
        /* the first node reading qkv: the slice view under the cont of q */
        int mm = -1, first = -1, qkv = -1;
        for (int s = a - 1; s >= 0 && mm < 0; s--)
            if (g->nodes[s].op == GP_OP_MATMUL)
                mm = s;
        for (int s = mm + 1; s < a && first < 0; s++)
            if (g->nodes[s].op == GP_OP_CONT)
                first = s;
        CU_ASSERT_FATAL(mm >= 0 && first >= 0);
        for (qkv = g->nodes[first].inputs[0]; g->tensors[qkv].producer >= 0; ) {
            int v = g->tensors[qkv].producer;
            if (!gp_op_get(g->nodes[v].op)->is_view)
                break;
            first = v;
            qkv = g->nodes[v].inputs[0];
        }
        int out = g->nodes[a].output, ws = pg->nodes[a].workspace;
        CU_ASSERT_EQUAL(pg->tensors[out].first, first);
        CU_ASSERT_EQUAL(pg->tensors[ws].first, first);
        CU_ASSERT_EQUAL(pc->tensors[out].first, a);
        /* qkv lives up to its last cont, past that step */
        CU_ASSERT(first > mm && pg->tensors[qkv].last > first);
    }
    CU_ASSERT_EQUAL(seen, 2);
    char why[256]; /* the loader's checks: among them, no two arena tensors alive at once meet */
    CU_ASSERT_EQUAL(gp_plan_validate(pg, why, sizeof why), 0);
    gp_plan_free(pc);
    gp_plan_free(pg);
    gp_graph_free(g);
    gp_diag_free(d);
}

static void assert_plans_equal(const gp_plan *a, const gp_plan *b)
{
    CU_ASSERT_EQUAL(a->version_major, b->version_major);
    CU_ASSERT_EQUAL(a->version_minor, b->version_minor);
    CU_ASSERT_STRING_EQUAL(a->graph_name, b->graph_name);
    CU_ASSERT_STRING_EQUAL(a->source, b->source);
    CU_ASSERT_STRING_EQUAL(a->method, b->method);
    CU_ASSERT_EQUAL(a->n_devices, b->n_devices);
    CU_ASSERT_EQUAL(a->strategy, b->strategy);
    CU_ASSERT_EQUAL(a->plan_seconds, b->plan_seconds);
    CU_ASSERT_EQUAL(a->lower_bound, b->lower_bound);
    CU_ASSERT_EQUAL(a->naive_bytes, b->naive_bytes);
    for (int r = 0; r < GP_REGION_COUNT; r++) {
        CU_ASSERT_EQUAL(a->regions[r].size, b->regions[r].size);
        CU_ASSERT_EQUAL(a->regions[r].alignment, b->regions[r].alignment);
    }
    CU_ASSERT_EQUAL_FATAL(a->n_syms, b->n_syms);
    for (int s = 0; s < a->n_syms; s++) {
        CU_ASSERT_STRING_EQUAL(a->syms[s].name, b->syms[s].name);
        CU_ASSERT_EQUAL(a->syms[s].bound, b->syms[s].bound);
    }
    CU_ASSERT_EQUAL_FATAL(a->n_tensors, b->n_tensors);
    for (int i = 0; i < a->n_tensors; i++) {
        const gp_plan_tensor *x = &a->tensors[i], *y = &b->tensors[i];
        CU_ASSERT_STRING_EQUAL(x->name, y->name);
        CU_ASSERT((x->weight_name == NULL) == (y->weight_name == NULL));
        if (x->weight_name && y->weight_name)
            CU_ASSERT_STRING_EQUAL(x->weight_name, y->weight_name);
        CU_ASSERT_EQUAL(x->kind, y->kind);
        CU_ASSERT_EQUAL(x->dtype, y->dtype);
        CU_ASSERT_EQUAL(x->ndim, y->ndim);
        for (int dd = 0; dd < GP_MAX_DIMS; dd++) {
            CU_ASSERT_EQUAL(x->dims[dd], y->dims[dd]);
            CU_ASSERT_EQUAL(x->sym[dd], y->sym[dd]);
            CU_ASSERT_EQUAL(x->stride[dd], y->stride[dd]);
        }
        CU_ASSERT_EQUAL(x->region, y->region);
        CU_ASSERT_EQUAL(x->offset, y->offset);
        CU_ASSERT_EQUAL(x->size, y->size);
        CU_ASSERT_EQUAL(x->view_src, y->view_src);
        CU_ASSERT_EQUAL(x->view_offset, y->view_offset);
        CU_ASSERT_EQUAL(x->inplace_of, y->inplace_of);
        CU_ASSERT_EQUAL(x->producer, y->producer);
        CU_ASSERT_EQUAL(x->first, y->first);
        CU_ASSERT_EQUAL(x->last, y->last);
        CU_ASSERT_EQUAL(x->extras_offset, y->extras_offset);
        CU_ASSERT_EQUAL(memcmp(&x->split, &y->split, sizeof x->split), 0);
        CU_ASSERT_EQUAL(x->line, y->line);
        CU_ASSERT_EQUAL(x->col, y->col);
    }
    CU_ASSERT_EQUAL_FATAL(a->n_nodes, b->n_nodes);
    for (int i = 0; i < a->n_nodes; i++) {
        const gp_plan_node *x = &a->nodes[i], *y = &b->nodes[i];
        CU_ASSERT_EQUAL(x->op, y->op);
        CU_ASSERT_EQUAL(x->n_inputs, y->n_inputs);
        for (int k = 0; k < GP_MAX_INPUTS; k++)
            CU_ASSERT_EQUAL(x->inputs[k], y->inputs[k]);
        CU_ASSERT_EQUAL(x->output, y->output);
        CU_ASSERT_EQUAL(x->workspace, y->workspace);
        for (int k = 0; k < GP_MAX_IATTRS; k++)
            CU_ASSERT_EQUAL(x->attrs.i[k], y->attrs.i[k]);
        for (int k = 0; k < GP_MAX_FATTRS; k++)
            CU_ASSERT_EQUAL(x->attrs.f[k], y->attrs.f[k]);
        CU_ASSERT_EQUAL(x->line, y->line);
        CU_ASSERT_EQUAL(x->col, y->col);
    }
}

static void test_fixture_contents(void)
{
    gp_plan *p = fixture_plan();
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    /* x pos w cache a b kv sl c m logits + ws.a ws.m */
    CU_ASSERT_EQUAL_FATAL(p->n_tensors, 13);
    CU_ASSERT_EQUAL(p->n_nodes, 7);
    CU_ASSERT_STRING_EQUAL(p->source, "fixture.gplan");
    CU_ASSERT_STRING_EQUAL(p->tensors[6].name, "kv");
    CU_ASSERT_EQUAL(p->tensors[6].kind, GP_TENSOR_VIEW);
    CU_ASSERT_EQUAL(p->tensors[6].region, GP_REGION_STATE);
    CU_ASSERT_EQUAL(p->tensors[7].region, GP_REGION_STATE);
    CU_ASSERT_EQUAL(p->tensors[7].offset, p->tensors[3].offset + 8 * 16 * 4);
    CU_ASSERT_EQUAL(p->tensors[3].last, 5); /* the state is read through sl by m at step 5 */
    CU_ASSERT_EQUAL(p->tensors[5].inplace_of, 4); /* b = gelu(a) */
    CU_ASSERT_EQUAL(p->tensors[8].inplace_of, 5); /* c = add(b, x) */
    CU_ASSERT_EQUAL(p->tensors[10].kind, GP_TENSOR_OUTPUT);
    CU_ASSERT_EQUAL(p->tensors[2].dtype, GP_F16);
    CU_ASSERT_EQUAL(p->tensors[4].line, 7);
    CU_ASSERT_EQUAL(p->tensors[4].col, 9);
    CU_ASSERT(p->nodes[6].op == GP_OP_SCALE && p->nodes[5].op == GP_OP_MATMUL);
    CU_ASSERT_EQUAL(p->nodes[6].attrs.f[GP_SCALE_FACTOR], 0.125);
    CU_ASSERT_EQUAL(p->nodes[5].attrs.i[GP_MATMUL_TB], 1);
    gp_plan_free(p);
}

static void test_round_trip(void)
{
    gp_plan *p = fixture_plan();
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    unsigned char *buf;
    size_t len;
    char err[512];
    CU_ASSERT_EQUAL_FATAL(gp_plan_write_mem(p, &buf, &len, err, sizeof err), 0);
    gp_plan *q = NULL;
    CU_ASSERT_EQUAL(gp_plan_load_mem(buf, len, "mem", &q, err, sizeof err), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(q);
    assert_plans_equal(p, q);
    /* Writing the loaded plan gives the same bytes. */
    unsigned char *buf2;
    size_t len2;
    CU_ASSERT_EQUAL(gp_plan_write_mem(q, &buf2, &len2, err, sizeof err), 0);
    CU_ASSERT_EQUAL(len, len2);
    CU_ASSERT(len == len2 && memcmp(buf, buf2, len) == 0);
    free(buf2);
    gp_plan_free(q);

    const char *path = gp_test_tmpfile(".plan");
    char *path_copy = strdup(path);
    CU_ASSERT_EQUAL(gp_plan_write(p, path_copy, err, sizeof err), 0);
    q = NULL;
    CU_ASSERT_EQUAL(gp_plan_load(path_copy, &q, err, sizeof err), 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(q);
    assert_plans_equal(p, q);
    gp_plan_free(q);
    size_t flen;
    char *fdata = gp_test_read_file(path_copy, &flen);
    CU_ASSERT(fdata && flen == len && memcmp(fdata, buf, len) == 0);
    free(fdata);
    remove(path_copy);
    free(path_copy);

    /* Missing file and unwritable path: messages, no crash. */
    q = (gp_plan *)&q;
    CU_ASSERT_EQUAL(gp_plan_load("/nonexistent/dir/x.plan", &q, err, sizeof err), -1);
    CU_ASSERT_PTR_NULL(q);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "/nonexistent/dir/x.plan: cannot open"));
    CU_ASSERT_EQUAL(gp_plan_write(p, "/nonexistent/dir/x.plan", err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "cannot create"));
    /* The writer refuses an invalid plan. */
    p->tensors[0].dims[0] = 0;
    CU_ASSERT_EQUAL(gp_plan_write_mem(p, &buf2, &len2, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "refusing to write an invalid plan"));
    CU_ASSERT_PTR_NULL(buf2);
    free(buf);
    gp_plan_free(p);
    gp_plan_free(NULL);
}

/* Degenerate graphs: nothing at all, and leaves with no nodes. */
static void test_empty_graphs(void)
{
    for (int k = 0; k < 2; k++) {
        gp_graph *g = gp_graph_new("empty");
        gp_diag *d = gp_diag_new(NULL);
        if (k == 1)
            leaf2(g, d, "x", GP_TENSOR_INPUT, C(2), C(3));
        gp_plan *p = build(g, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(p);
        CU_ASSERT_EQUAL(p->n_tensors, k);
        CU_ASSERT_EQUAL(p->n_nodes, 0);
        CU_ASSERT_EQUAL(p->regions[GP_REGION_ARENA].size, 0);
        CU_ASSERT_EQUAL(p->regions[GP_REGION_IO].size, k ? 256 : 0);
        CU_ASSERT_STRING_EQUAL(p->method, "none");
        unsigned char *buf;
        size_t len;
        char err[256];
        CU_ASSERT_EQUAL_FATAL(gp_plan_write_mem(p, &buf, &len, err, sizeof err), 0);
        gp_plan *q = NULL;
        CU_ASSERT_EQUAL(gp_plan_load_mem(buf, len, "empty", &q, err, sizeof err), 0);
        CU_ASSERT_PTR_NOT_NULL_FATAL(q);
        assert_plans_equal(p, q);
        gp_plan_free(q);
        free(buf);
        gp_plan_free(p);
        gp_diag_free(d);
        gp_graph_free(g);
    }
}

static void test_summary(void)
{
    gp_plan *p = fixture_plan();
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    char *text = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&text, &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    gp_plan_summary_print(p, f);
    fclose(f);
    char want[64];
    snprintf(want, sizeof want, "arena    %12lld B", (long long)p->regions[GP_REGION_ARENA].size);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, want));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "plan fixture (fixture.gplan)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "T <= 8"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "2 in-place, 2 workspaces"));
    free(text);
    gp_plan_free(p);
}

/* ---- corrupted files ---- */

static unsigned char *good;  /* [good_len] the fixture plan's file */
static size_t good_len;
static int good_n_tensors, good_n_nodes;

/* Builds the good file on first use (CUnit allows no assertions in a suite's set-up). */
static int have_good(void)
{
    if (good)
        return 1;
    gp_plan *p = fixture_plan();
    if (!p)
        return 0;
    char err[256];
    int rc = gp_plan_write_mem(p, &good, &good_len, err, sizeof err);
    CU_ASSERT_EQUAL(rc, 0);
    good_n_tensors = p->n_tensors;
    good_n_nodes = p->n_nodes;
    gp_plan_free(p);
    return rc == 0;
}

static int corrupt_clean(void)
{
    free(good);
    good = NULL;
    return 0;
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const unsigned char *p)
{
    return get32(p) | (uint64_t)get32(p + 4) << 32;
}

static void set32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void set64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static unsigned char *entry(unsigned char *buf, uint32_t id) /* its section table entry */
{
    uint32_t n = get32(buf + 20);
    for (uint32_t i = 0; i < n; i++)
        if (get32(buf + 64 + 24 * i) == id)
            return buf + 64 + 24 * i;
    return NULL;
}

static unsigned char *section(unsigned char *buf, uint32_t id)
{
    return buf + get64(entry(buf, id) + 8);
}

static unsigned char *tensor_rec(unsigned char *buf, int i)
{
    return section(buf, GP_PLAN_SEC_TENSORS) + 8 + (size_t)i * GP_PLAN_TENSOR_BYTES;
}

static unsigned char *node_rec(unsigned char *buf, int i)
{
    return section(buf, GP_PLAN_SEC_NODES) + 8 + (size_t)i * GP_PLAN_NODE_BYTES;
}

/* Recomputes every section CRC and the header CRC, so a test reaches the check after them. */
static void fix_crcs(unsigned char *buf)
{
    uint32_t n = get32(buf + 20);
    for (uint32_t i = 0; i < n; i++) {
        unsigned char *e = buf + 64 + 24 * i;
        uint64_t off = get64(e + 8), size = get64(e + 16);
        if (off <= good_len && size <= good_len - off)
            set32(e + 4, (uint32_t)crc32(0, buf + off, (uInt)size));
    }
    uLong c = crc32(0, buf, 60);
    c = crc32(c, buf + 64, (uInt)(24 * n));
    set32(buf + 60, (uint32_t)c);
}

static unsigned char *copy_good(void)
{
    unsigned char *b = malloc(good_len);
    memcpy(b, good, good_len);
    return b;
}

/* Loads buf (freeing it) and asserts the loader refuses it with `reason` in the message. */
static void expect_bad_len(unsigned char *buf, size_t len, const char *reason)
{
    char err[512] = "";
    gp_plan *p = (gp_plan *)&err;
    int rc = gp_plan_load_mem(buf, len, "c.plan", &p, err, sizeof err);
    CU_ASSERT_EQUAL(rc, -1);
    CU_ASSERT_PTR_NULL(p);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "c.plan: bad plan file ("));
    if (!strstr(err, reason)) {
        fprintf(stderr, "\n  expected reason '%s', got '%s'\n", reason, err);
        CU_FAIL("wrong reason");
    }
    if (rc == 0)
        gp_plan_free(p);
    free(buf);
}

static void expect_bad(unsigned char *buf, const char *reason)
{
    expect_bad_len(buf, good_len, reason);
}

/* The same after fixing the CRCs. */
static void expect_bad_fixed(unsigned char *buf, const char *reason)
{
    fix_crcs(buf);
    expect_bad(buf, reason);
}

static void test_corrupt_good_loads(void)
{
    CU_ASSERT_FATAL(have_good());
    gp_plan *p = NULL;
    char err[256];
    CU_ASSERT_EQUAL(gp_plan_load_mem(good, good_len, "c.plan", &p, err, sizeof err), 0);
    gp_plan_free(p);
    /* fix_crcs on an intact file changes nothing. */
    unsigned char *b = copy_good();
    fix_crcs(b);
    CU_ASSERT_EQUAL(memcmp(b, good, good_len), 0);
    /* A newer minor version is read (it only adds what this loader skips). */
    b[12] = 7;
    fix_crcs(b);
    CU_ASSERT_EQUAL(gp_plan_load_mem(b, good_len, "c.plan", &p, err, sizeof err), 0);
    CU_ASSERT(p && p->version_minor == 7);
    gp_plan_free(p);
    free(b);
}

/* rope's float32 attributes f[2] and f[3] are bits 0..31 and 32..63 of the record's iattr[3]
 * (docs/plan-format.md, nodes), and come back as they were; values the record cannot hold are
 * refused by the writer. */
static void test_node_attrs_record(void)
{
    gp_graph *g = gp_graph_new("r");
    gp_diag *d = gp_diag_new(NULL);
    gp_dim sx[3] = {C(4), C(2), C(8)}, sp[1] = {C(4)};
    int x = gp_graph_add_tensor(g, d, "x", GP_TENSOR_INPUT, GP_F32, 3, sx, NULL, here);
    int pos = gp_graph_add_tensor(g, d, "pos", GP_TENSOR_INPUT, GP_I32, 1, sp, NULL, here);
    gp_attrs ra = {.i = {[GP_ROPE_N_DIMS] = 8, [GP_ROPE_SCALING] = 32},
                   .f = {[GP_ROPE_THETA] = 10000, [GP_ROPE_FACTOR] = 8,
                         [GP_ROPE_LOW_FACTOR] = 1.5, [GP_ROPE_HIGH_FACTOR] = 4.25}};
    int in[2] = {x, pos};
    int r = gp_graph_add_node(g, d, GP_OP_ROPE, in, 2, &ra, NULL, 0, GP_F32, "r", here);
    gp_graph_make_output(g, d, r, "out", GP_F32, 3, sx, here);
    CU_ASSERT_EQUAL_FATAL(gp_diag_count(d), 0);
    gp_plan *p = build(g, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    int k = 0;
    while (k < p->n_nodes && p->nodes[k].op != GP_OP_ROPE)
        k++;
    CU_ASSERT_FATAL(k < p->n_nodes);
    char err[256];
    unsigned char *data = NULL;
    size_t len = 0;
    CU_ASSERT_EQUAL_FATAL(gp_plan_write_mem(p, &data, &len, err, sizeof err), 0);
    const unsigned char *rec = section(data, GP_PLAN_SEC_NODES) + 8 + (size_t)k * GP_PLAN_NODE_BYTES;
    float lo = 1.5f, hi = 4.25f;
    uint32_t ulo, uhi;
    memcpy(&ulo, &lo, 4);
    memcpy(&uhi, &hi, 4);
    CU_ASSERT_EQUAL(get64(rec + 40 + 8 * 1), 8);
    CU_ASSERT_EQUAL(get64(rec + 40 + 8 * 2), 32);
    CU_ASSERT_EQUAL(get64(rec + 40 + 8 * 3), ((uint64_t)uhi << 32) | ulo);
    double f0, f1;
    uint64_t b0 = get64(rec + 72), b1 = get64(rec + 80);
    memcpy(&f0, &b0, 8);
    memcpy(&f1, &b1, 8);
    CU_ASSERT(f0 == 10000 && f1 == 8);
    gp_plan *q = NULL;
    CU_ASSERT_EQUAL_FATAL(gp_plan_load_mem(data, len, "r.plan", &q, err, sizeof err), 0);
    CU_ASSERT_EQUAL(memcmp(&q->nodes[k].attrs, &p->nodes[k].attrs, sizeof(gp_attrs)), 0);
    CU_ASSERT(q->nodes[k].attrs.f[GP_ROPE_HIGH_FACTOR] == 4.25);
    CU_ASSERT_EQUAL(q->nodes[k].attrs.i[GP_MAX_IATTRS - 1], 0);
    gp_plan_free(q);
    free(data);

    p->nodes[k].attrs.f[GP_ROPE_LOW_FACTOR] = 0.1; /* not a float32 value */
    CU_ASSERT_EQUAL(gp_plan_write_mem(p, &data, &len, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "rope's low 0.10000000000000001 is not a float32 value"));
    p->nodes[k].attrs.f[GP_ROPE_LOW_FACTOR] = 1.5;
    p->nodes[k].attrs.i[GP_MAX_IATTRS - 1] = 5; /* the record's iattr[3] carries low and high */
    CU_ASSERT_EQUAL(gp_plan_write_mem(p, &data, &len, err, sizeof err), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "rope's unused integer attribute 3 is 5, not 0"));
    gp_plan_free(p);
    gp_diag_free(d);
    gp_graph_free(g);
}

static void test_corrupt_header(void)
{
    CU_ASSERT_FATAL(have_good());
    unsigned char *b;
    expect_bad_len(copy_good(), 10, "file too short: 10 bytes");
    expect_bad_len(copy_good(), 0, "file too short: 0 bytes");
    b = copy_good(); b[0] = 'X'; expect_bad(b, "bad magic");
    b = copy_good(); b[5] = '1'; expect_bad(b, "bad magic");
    b = copy_good(); b[6] = '\n'; expect_bad(b, "line-ending tripwire damaged");
    b = copy_good(); b[8] = 0; expect_bad(b, "line-ending tripwire damaged");
    /* Text-mode damage: CR LF -> LF shifts everything after it. */
    b = copy_good();
    memmove(b + 6, b + 7, good_len - 7);
    expect_bad_len(b, good_len - 1, "line-ending tripwire damaged");
    b = copy_good(); b[10] = 2; expect_bad(b, "unsupported major version 2 (this loader reads 1.x)");
    b = copy_good(); b[10] = 0; expect_bad(b, "unsupported major version 0");
    b = copy_good(); b[14] = 8; expect_bad(b, "header size 8");
    b = copy_good(); b[14] = 65; expect_bad(b, "header size 65");
    b = copy_good(); set32(b + 16, 0x04030201); expect_bad(b, "u32 sentinel is 0x04030201");
    b = copy_good(); b[24] ^= 1; expect_bad(b, "u64 sentinel");
    b = copy_good(); set64(b + 32, 0x1122334455667788ull); expect_bad(b, "f64 sentinel");
    b = copy_good(); set64(b + 40, good_len + 1); expect_bad(b, "file size field says");
    b = copy_good(); set32(b + 20, 0xFFFFFFFFu); expect_bad(b, "section count 4294967295");
    b = copy_good(); b[48] = 1; expect_bad(b, "header checksum mismatch");
    b = copy_good(); b[56] = 1; expect_bad(b, "header checksum mismatch");
    b = copy_good(); b[60] ^= 0xFF; expect_bad(b, "header checksum mismatch");
    b = copy_good(); b[12] = 4; expect_bad(b, "header checksum mismatch"); /* minor, unfixed */
    b = copy_good(); set32(b + 20, 5); expect_bad(b, "header checksum mismatch");
    b = copy_good(); set32(b + 20, 5); expect_bad_fixed(b, "missing section nodes");
    b = copy_good(); b[64 + 24 * 2 + 8] ^= 8; expect_bad(b, "header checksum mismatch");
}

static void test_corrupt_sections(void)
{
    CU_ASSERT_FATAL(have_good());
    static const char *const names[] = {"", "strings", "meta", "regions", "syms", "tensors",
                                        "nodes"};
    for (uint32_t id = 1; id <= 6; id++) {
        unsigned char *b = copy_good();
        unsigned char *e = entry(b, id);
        b[get64(e + 8) + get64(e + 16) / 2] ^= 0x40;
        char want[64];
        snprintf(want, sizeof want, "checksum mismatch in section %s", names[id]);
        expect_bad(b, want);
        /* Past the end, huge sizes, misaligned, overlapping the header. */
        b = copy_good();
        set64(entry(b, id) + 8, good_len + 8);
        expect_bad_fixed(b, "outside the file's data");
        b = copy_good();
        set64(entry(b, id) + 16, UINT64_MAX);
        expect_bad_fixed(b, "outside the file's data");
        b = copy_good();
        set64(entry(b, id) + 8, 0);
        expect_bad_fixed(b, "outside the file's data");
        b = copy_good();
        set64(entry(b, id) + 8, get64(entry(b, id) + 8) + 4);
        set64(entry(b, id) + 16, 0);
        expect_bad_fixed(b, "not a multiple of 8");
        /* The same id twice, or missing. */
        b = copy_good();
        set32(entry(b, id), id == 1 ? 2 : 1);
        expect_bad_fixed(b, "duplicate section");
        b = copy_good();
        set32(entry(b, id), 99);
        snprintf(want, sizeof want, "missing section %s", names[id]);
        expect_bad_fixed(b, want);
    }
    /* Counts and record sizes. */
    static const uint32_t recs[] = {GP_PLAN_SEC_REGIONS, GP_PLAN_SEC_SYMS, GP_PLAN_SEC_TENSORS,
                                    GP_PLAN_SEC_NODES};
    for (int i = 0; i < 4; i++) {
        unsigned char *b = copy_good();
        set32(section(b, recs[i]), 0xFFFFFFFFu);
        expect_bad_fixed(b, "count 4294967295 does not fit");
        b = copy_good();
        set32(section(b, recs[i]), 0x10000);
        expect_bad_fixed(b, "count 65536 does not fit");
        b = copy_good();
        set32(section(b, recs[i]) + 4, 8);
        expect_bad_fixed(b, "record size 8");
        b = copy_good();
        set32(section(b, recs[i]) + 4, 0xFFFFFFF8u);
        expect_bad_fixed(b, "record size 4294967288");
        b = copy_good();
        set64(entry(b, recs[i]) + 16, 4);
        expect_bad_fixed(b, "too short for its count");
    }
    unsigned char *b = copy_good();
    set32(section(b, GP_PLAN_SEC_REGIONS), 4);
    expect_bad_fixed(b, "4 regions, expected 5");
    b = copy_good();
    set64(entry(b, GP_PLAN_SEC_META) + 16, 40);
    expect_bad_fixed(b, "section meta: 40 bytes, needs 48");
}

static void test_corrupt_truncated(void)
{
    CU_ASSERT_FATAL(have_good());
    /* Every length short of the whole file. */
    for (size_t n = 0; n < good_len; n++) {
        unsigned char *b = copy_good();
        expect_bad_len(b, n, n < 64 ? "file too short" : "file size field says");
    }
    /* And cut files whose size field is patched to match: sections fall outside the file. */
    for (size_t n = 64; n < good_len; n += 8) {
        unsigned char *b = copy_good();
        set64(b + 40, n);
        fix_crcs(b);
        char err[512];
        gp_plan *p = NULL;
        CU_ASSERT_EQUAL(gp_plan_load_mem(b, n, "c.plan", &p, err, sizeof err), -1);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, "c.plan: bad plan file ("));
        free(b);
    }
}

static void test_corrupt_every_byte(void)
{
    CU_ASSERT_FATAL(have_good());
    /* Header CRC + section CRCs cover every byte: any single flipped byte is refused. */
    for (size_t i = 0; i < good_len; i++) {
        unsigned char *b = copy_good();
        b[i] ^= 0x5A;
        char err[512];
        gp_plan *p = NULL;
        int rc = gp_plan_load_mem(b, good_len, "c.plan", &p, err, sizeof err);
        CU_ASSERT_EQUAL(rc, -1);
        if (rc == 0) {
            fprintf(stderr, "byte %zu flipped was accepted\n", i);
            gp_plan_free(p);
        }
        free(b);
    }
}

/* Random damage behind valid CRCs reaches the semantic checks: never a crash (run under ASan), and
 * either a refusal in the loader's format or a plan that passes validation. */
static void test_corrupt_random_fixed(void)
{
    CU_ASSERT_FATAL(have_good());
    uint64_t rng = 99;
    size_t data_start = 64 + 24 * 6;
    int refused = 0;
    for (int it = 0; it < 4000; it++) {
        unsigned char *b = copy_good();
        int n = 1 + (int)(gp_test_rand(&rng) % 4);
        for (int k = 0; k < n; k++) {
            size_t at = data_start + (size_t)(gp_test_rand(&rng) % (good_len - data_start));
            uint64_t r = gp_test_rand(&rng);
            b[at] = (r & 0x100) ? (unsigned char)r : (unsigned char)(b[at] ^ (1u << (r % 8)));
        }
        fix_crcs(b);
        char err[512] = "";
        gp_plan *p = NULL;
        int rc = gp_plan_load_mem(b, good_len, "c.plan", &p, err, sizeof err);
        if (rc) {
            refused++;
            CU_ASSERT_PTR_NULL(p);
            CU_ASSERT_PTR_NOT_NULL(strstr(err, "c.plan: bad plan file ("));
        } else {
            char why[256];
            CU_ASSERT_EQUAL(gp_plan_validate(p, why, sizeof why), 0);
            gp_plan_free(p);
        }
        free(b);
    }
    /* Most damage is caught (a changed attribute or line number is legitimately accepted). */
    CU_ASSERT(refused > 2000);
}

/* Tensor ids in the fixture. */
enum { FX_X, FX_POS, FX_W, FX_CACHE, FX_A, FX_B, FX_KV, FX_SL, FX_C, FX_M, FX_OUT, FX_WSA, FX_WSM };

static void test_corrupt_strings(void)
{
    CU_ASSERT_FATAL(have_good());
    unsigned char *b = copy_good();
    set32(tensor_rec(b, 0), 0x00FFFFFF);
    expect_bad_fixed(b, "tensor 0 name: string reference 16777215 out of range");
    b = copy_good();
    set32(tensor_rec(b, FX_X) + 4, 0x7FFFFFFF);
    expect_bad_fixed(b, "tensor 0 weight name: string reference");
    b = copy_good();
    set32(section(b, GP_PLAN_SEC_META) + 8, 0xFFFFFF00u);
    expect_bad_fixed(b, "graph name: string reference");
    b = copy_good();
    set32(section(b, GP_PLAN_SEC_SYMS) + 8, 100000);
    expect_bad_fixed(b, "sym 0 name: string reference");
    /* A string running off the end of the table. */
    b = copy_good();
    unsigned char *e = entry(b, GP_PLAN_SEC_STRINGS);
    unsigned char *st = section(b, GP_PLAN_SEC_STRINGS);
    uint64_t size = get64(e + 16);
    memset(st + size - 12, 'x', 12);
    set32(tensor_rec(b, 0), (uint32_t)(size - 3));
    expect_bad_fixed(b, "not NUL-terminated inside the string table");
    /* Strings section of 4 GiB + is refused before use (size checked against the file first). */
}

static void test_corrupt_meta_regions(void)
{
    CU_ASSERT_FATAL(have_good());
    unsigned char *b = copy_good();
    set32(section(b, GP_PLAN_SEC_META), 0);
    expect_bad_fixed(b, "n_devices 0 outside [1, 64]");
    b = copy_good();
    set32(section(b, GP_PLAN_SEC_META), 0xFFFFFFFFu);
    expect_bad_fixed(b, "n_devices -1 outside");
    b = copy_good();
    set32(section(b, GP_PLAN_SEC_META) + 4, 9);
    expect_bad_fixed(b, "strategy 9 out of range");
    b = copy_good();
    set64(section(b, GP_PLAN_SEC_META) + 32, (uint64_t)-5);
    expect_bad_fixed(b, "lower bound -5 outside");
    b = copy_good();
    set64(section(b, GP_PLAN_SEC_META) + 40, (uint64_t)-1);
    expect_bad_fixed(b, "naive bytes -1 negative");
    unsigned char *reg = NULL;
    b = copy_good();
    reg = section(b, GP_PLAN_SEC_REGIONS) + 8;
    set64(reg + 8, 3);
    expect_bad_fixed(b, "region arena: alignment 3 is not a power of two");
    b = copy_good();
    reg = section(b, GP_PLAN_SEC_REGIONS) + 8;
    set64(reg + 16 * GP_REGION_STATE + 8, (uint64_t)1 << 21);
    expect_bad_fixed(b, "region state: alignment 2097152");
    b = copy_good();
    reg = section(b, GP_PLAN_SEC_REGIONS) + 8;
    set64(reg + 16 * GP_REGION_WEIGHTS, 100);
    expect_bad_fixed(b, "region weights: size 100 is not a multiple");
    b = copy_good();
    reg = section(b, GP_PLAN_SEC_REGIONS) + 8;
    set64(reg + 16 * GP_REGION_IO, (uint64_t)-256);
    expect_bad_fixed(b, "region io: size -256");
    b = copy_good();
    reg = section(b, GP_PLAN_SEC_REGIONS) + 8;
    set64(reg + 16 * GP_REGION_EXTRAS, 64);
    expect_bad_fixed(b, "region extras: 64 bytes cannot hold 13 records");
    b = copy_good();
    set64(section(b, GP_PLAN_SEC_SYMS) + 8 + 8, 0);
    expect_bad_fixed(b, "sym 0 (T): bound 0 outside");
    b = copy_good();
    set64(section(b, GP_PLAN_SEC_SYMS) + 8 + 8, 4);
    expect_bad_fixed(b, "tensor 0 (x): dim 0 is 8, above the bound 4 of sym T");
}

static void test_corrupt_tensors(void)
{
    CU_ASSERT_FATAL(have_good());
    unsigned char *b;
    b = copy_good(); tensor_rec(b, FX_A)[8] = 9; expect_bad_fixed(b, "tensor 4 (a): kind 9 out of range");
    b = copy_good(); tensor_rec(b, FX_A)[9] = 77; expect_bad_fixed(b, "tensor 4 (a): dtype 77 out of range");
    b = copy_good(); tensor_rec(b, FX_A)[10] = 5; expect_bad_fixed(b, "tensor 4 (a): ndim 5 > 4");
    b = copy_good(); tensor_rec(b, FX_A)[11] = 4; expect_bad_fixed(b, "tensor 4 (a): region 4 out of range");
    b = copy_good(); tensor_rec(b, FX_A)[11] = 200; expect_bad_fixed(b, "region 200 out of range");
    b = copy_good(); tensor_rec(b, FX_A)[11] = GP_REGION_IO; expect_bad_fixed(b, "kind intermediate placed in region io");
    b = copy_good(); tensor_rec(b, FX_A)[10] = 1; expect_bad_fixed(b, "unused dim 1 not (1, -1, 0)");
    b = copy_good(); set64(tensor_rec(b, FX_A) + 32, 0); expect_bad_fixed(b, "dim 0 is 0, outside");
    b = copy_good(); set64(tensor_rec(b, FX_W) + 32, (uint64_t)-7); expect_bad_fixed(b, "tensor 2 (w): dim 0 is -7");
    b = copy_good(); set64(tensor_rec(b, FX_W) + 32, (uint64_t)1 << 41); expect_bad_fixed(b, "dim 0 is 2199023255552, outside");
    b = copy_good(); set32(tensor_rec(b, FX_A) + 64, 3); expect_bad_fixed(b, "sym reference 3 out of range (1 syms)");
    b = copy_good(); set32(tensor_rec(b, FX_A) + 64, (uint32_t)-2); expect_bad_fixed(b, "sym reference -2 out of range");
    b = copy_good(); set64(tensor_rec(b, FX_A) + 80, (uint64_t)-1); expect_bad_fixed(b, "stride 0 is -1, out of range");
    b = copy_good(); set64(tensor_rec(b, FX_A) + 80, 1000); expect_bad_fixed(b, "smaller than its elements' span");
    b = copy_good(); set64(tensor_rec(b, FX_A) + 128, 4); expect_bad_fixed(b, "size 4 smaller than its elements' span 512");
    /* Offsets past regions and alignment. */
    b = copy_good(); set64(tensor_rec(b, FX_A) + 120, get64(section(b, GP_PLAN_SEC_REGIONS) + 8)); expect_bad_fixed(b, "past the end of region arena");
    b = copy_good(); set64(tensor_rec(b, FX_A) + 120, (uint64_t)-256); expect_bad_fixed(b, "past the end of region arena");
    b = copy_good(); set64(tensor_rec(b, FX_A) + 128, INT64_MAX); expect_bad_fixed(b, "past the end of region arena");
    b = copy_good(); set64(tensor_rec(b, FX_POS) + 120, 520); expect_bad_fixed(b, "tensor 1 (pos): offset 520 not aligned to 256");
    b = copy_good(); set64(tensor_rec(b, FX_CACHE) + 120, 1 << 20); expect_bad_fixed(b, "past the end of region state");
    /* Views. */
    b = copy_good(); set32(tensor_rec(b, FX_SL) + 12, 200); expect_bad_fixed(b, "tensor 7 (sl): view source 200 out of range");
    b = copy_good(); set32(tensor_rec(b, FX_SL) + 12, (uint32_t)-1); expect_bad_fixed(b, "tensor 7 (sl): kind view with view source -1");
    b = copy_good(); set32(tensor_rec(b, FX_A) + 12, FX_X); expect_bad_fixed(b, "tensor 4 (a): kind intermediate with view source 0");
    b = copy_good(); set32(tensor_rec(b, FX_SL) + 12, FX_SL); expect_bad_fixed(b, "tensor 7 (sl): view chain is a cycle");
    b = copy_good();
    /* kv views sl, sl views kv. */
    set32(tensor_rec(b, FX_KV) + 12, FX_SL);
    expect_bad_fixed(b, "view chain is a cycle");
    b = copy_good(); set64(tensor_rec(b, FX_SL) + 112, 2048 - 512 + 4); expect_bad_fixed(b, "view [1540, +512) outside its base kv");
    b = copy_good(); set64(tensor_rec(b, FX_SL) + 120, 0); expect_bad_fixed(b, "is not its base's");
    b = copy_good(); tensor_rec(b, FX_SL)[11] = GP_REGION_ARENA; expect_bad_fixed(b, "view in region arena, its source kv in state");
    b = copy_good(); set64(tensor_rec(b, FX_A) + 112, 4); expect_bad_fixed(b, "view offset 4 on a non-view");
    /* In-place, producers, lifetimes, extras. */
    b = copy_good(); set32(tensor_rec(b, FX_B) + 16, 99); expect_bad_fixed(b, "tensor 5 (b): in-place target 99 out of range");
    b = copy_good(); set32(tensor_rec(b, FX_B) + 16, FX_B); expect_bad_fixed(b, "in-place target 5 out of range");
    b = copy_good(); set32(tensor_rec(b, FX_B) + 16, FX_X); expect_bad_fixed(b, "in-place target x does not hold its bytes");
    b = copy_good(); set32(tensor_rec(b, FX_A) + 20, 7); expect_bad_fixed(b, "producer 7 out of range (7 nodes)");
    b = copy_good(); set32(tensor_rec(b, FX_X) + 20, 0); expect_bad_fixed(b, "node 0: reads tensor x before step 0 produces it");
    b = copy_good(); set32(tensor_rec(b, FX_X) + 20, 1); expect_bad_fixed(b, "node 0: reads tensor x before step 1 produces it");
    /* Only an attention's workspace may start before its node. */
    b = copy_good();
    uint32_t wsm_step = get32(tensor_rec(b, FX_WSM) + 20);
    set32(tensor_rec(b, FX_WSM) + 24, wsm_step - 1);
    char why_wsm[64];
    snprintf(why_wsm, sizeof why_wsm, "first step %u is not its producer %u", wsm_step - 1, wsm_step);
    expect_bad_fixed(b, why_wsm);
    /* A matmul's output may start earlier (accumulated outputs), never later; another node's
     * output never earlier. */
    b = copy_good(); set32(tensor_rec(b, FX_M) + 24, 6); expect_bad_fixed(b, "tensor 9 (m): first step 6 is not its producer 5");
    b = copy_good(); set32(tensor_rec(b, FX_OUT) + 24, 5); expect_bad_fixed(b, "(logits): first step 5 is not its producer 6");
    b = copy_good(); set32(tensor_rec(b, FX_A) + 28, 7); expect_bad_fixed(b, "lifetime [0, 7] outside the 7 steps");
    b = copy_good(); set32(tensor_rec(b, FX_C) + 24, 6); expect_bad_fixed(b, "lifetime [6, 5]");
    b = copy_good(); set32(tensor_rec(b, FX_A) + 24, (uint32_t)-1); expect_bad_fixed(b, "lifetime [-1,");
    b = copy_good(); set32(tensor_rec(b, FX_A) + 28, 2); expect_bad_fixed(b, "tensor 5 (b): in-place target a is still read at step 2, after step 1 overwrites it");
    b = copy_good(); set32(tensor_rec(b, FX_B) + 16, FX_C); expect_bad_fixed(b, "tensor 5 (b): in-place target c is still read at step 5");
    b = copy_good();
    memcpy(tensor_rec(b, FX_M) + 120, tensor_rec(b, FX_WSM) + 120, 8);
    expect_bad_fixed(b, "arena tensors ");
    b = copy_good();
    memcpy(tensor_rec(b, FX_M) + 120, tensor_rec(b, FX_WSM) + 120, 8);
    {
        char err[512];
        gp_plan *p = NULL;
        fix_crcs(b);
        CU_ASSERT_EQUAL(gp_plan_load_mem(b, good_len, "c.plan", &p, err, sizeof err), -1);
        CU_ASSERT(strstr(err, "overlap while both alive (steps 5..5 and 5..6)") != NULL ||
                  strstr(err, "overlap while both alive (steps 5..6 and 5..5)") != NULL);
        free(b);
    }
    b = copy_good(); set64(tensor_rec(b, FX_A) + 136, 3); expect_bad_fixed(b, "extras offset 3 is not a record slot");
    b = copy_good(); set64(tensor_rec(b, FX_A) + 136, 80 * 13); expect_bad_fixed(b, "extras offset 1040 is not a record slot");
    b = copy_good(); set64(tensor_rec(b, FX_A) + 136, 0); expect_bad_fixed(b, "extras slot 0 shared");
    b = copy_good(); set64(tensor_rec(b, FX_A) + 136, (uint64_t)-80); expect_bad_fixed(b, "extras offset -80");
}

/* A weight split over 2 devices: round trip, then every inconsistent split refused; a split in a
 * plan of one device is refused too. */
static void test_corrupt_split(void)
{
    CU_ASSERT_FATAL(have_good());
    unsigned char *b = copy_good();
    set32(tensor_rec(b, FX_W) + 152, 1);
    set64(tensor_rec(b, FX_W) + 160, 1);
    set64(tensor_rec(b, FX_W) + 168, 16);
    expect_bad_fixed(b, "tensor 2 (w): bad split (groups 1, dim 0, unit 1, full 16)");

    gp_diag *d = gp_diag_new(NULL);
    gp_graph *g = fixture_graph(d);
    gp_tensor *w = &g->tensors[FX_W];
    w->split = (gp_split){1, 0, 1, 2 * w->shape[0].size};
    gp_plan_opts o = {0};
    o.n_devices = 2;
    gp_plan *p = build(g, &o);
    gp_graph_free(g);
    gp_diag_free(d);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    unsigned char *two = NULL;
    size_t len = 0;
    char err[512];
    CU_ASSERT_EQUAL_FATAL(gp_plan_write_mem(p, &two, &len, err, sizeof err), 0);
    gp_plan *q = NULL;
    CU_ASSERT_EQUAL(gp_plan_load_mem(two, len, "c.plan", &q, err, sizeof err), 0);
    if (q) {
        assert_plans_equal(p, q);
        CU_ASSERT_EQUAL(q->tensors[FX_W].split.full, 2 * p->tensors[FX_W].dims[0]);
        gp_plan_free(q);
    }
    int64_t rows = p->tensors[FX_W].dims[0];
    gp_plan_free(p);
    static const struct {
        int at, bytes;
        int64_t value;
        const char *why;
    } cases[] = {
        {168, 8, 0, "bad split"},                       /* full 0 */
        {168, 8, -4, "bad split"},
        {156, 4, 7, "bad split (groups 1, dim 7"},      /* dim out of range */
        {152, 4, 0, "bad split (groups 0"},             /* groups 0 with the rest set */
        {152, 4, -1, "bad split"},
        {160, 8, 0, "bad split"},                       /* unit 0 */
        {160, 8, 3, "bad split"},                       /* full not a multiple of the unit */
        {168, 8, -1, "bad split"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        unsigned char *c = malloc(len);
        memcpy(c, two, len);
        unsigned char *rec = section(c, GP_PLAN_SEC_TENSORS) + 8 + (size_t)FX_W * GP_PLAN_TENSOR_BYTES;
        if (cases[k].bytes == 4)
            set32(rec + cases[k].at, (uint32_t)cases[k].value);
        else
            set64(rec + cases[k].at, (uint64_t)cases[k].value);
        size_t keep = good_len;
        good_len = len; /* fix_crcs and expect_bad use it */
        expect_bad_fixed(c, cases[k].why);
        good_len = keep;
    }
    /* A share that does not match the whole: 4 rows over 2 devices are 2 per device, not 3. */
    unsigned char *c = malloc(len);
    memcpy(c, two, len);
    set64(section(c, GP_PLAN_SEC_TENSORS) + 8 + (size_t)FX_W * GP_PLAN_TENSOR_BYTES + 168,
          (uint64_t)(3 * rows));
    size_t keep = good_len;
    good_len = len;
    char want[128];
    snprintf(want, sizeof want, "dim 0 is %lld, but a split of %lld over 2 devices gives %lld",
             (long long)rows, (long long)(3 * rows), (long long)((3 * rows + 1) / 2));
    expect_bad_fixed(c, want);
    good_len = keep;
    free(two);
}

static void test_corrupt_nodes(void)
{
    CU_ASSERT_FATAL(have_good());
    unsigned char *b;
    b = copy_good(); node_rec(b, 1)[0] = 0; expect_bad_fixed(b, "node 1: unknown op 0");
    b = copy_good(); set32(node_rec(b, 1), 999); expect_bad_fixed(b, "node 1: unknown op 999");
    b = copy_good(); node_rec(b, 1)[0] = GP_OP_COUNT; node_rec(b, 1)[1] = 0; expect_bad_fixed(b, "unknown op");
    b = copy_good(); node_rec(b, 1)[2] = 3; expect_bad_fixed(b, "node 1: op gelu takes 1..1 inputs, has 3");
    b = copy_good(); node_rec(b, 0)[2] = 0; expect_bad_fixed(b, "node 0: op matmul takes 2..2 inputs, has 0");
    b = copy_good(); node_rec(b, 0)[2] = 200; expect_bad_fixed(b, "has 200");
    b = copy_good(); set32(node_rec(b, 1) + 8, 4); expect_bad_fixed(b, "node 1: unused input 1 is 4, not -1");
    b = copy_good(); set32(node_rec(b, 1) + 4, 13); expect_bad_fixed(b, "node 1: input: tensor reference 13 out of range (13 tensors)");
    b = copy_good(); set32(node_rec(b, 1) + 4, (uint32_t)-3); expect_bad_fixed(b, "node 1: input: tensor reference -3 out of range");
    b = copy_good(); set32(node_rec(b, 1) + 20, 5000); expect_bad_fixed(b, "node 1: output: tensor reference 5000 out of range");
    b = copy_good(); set32(node_rec(b, 0) + 24, 77); expect_bad_fixed(b, "node 0: workspace: tensor reference 77 out of range");
    b = copy_good(); set32(node_rec(b, 0) + 24, FX_A); expect_bad_fixed(b, "node 0: workspace a is not an arena tensor");
    b = copy_good(); set32(node_rec(b, 1) + 20, FX_C); expect_bad_fixed(b, "node 1: output c names producer 4");
    b = copy_good(); set32(node_rec(b, 1) + 4, FX_C); expect_bad_fixed(b, "node 1: reads tensor c before step 4 produces it");
    b = copy_good(); set32(node_rec(b, 5) + 4, FX_A); expect_bad_fixed(b, "node 5: reads tensor a after its last step 1");
    b = copy_good(); set32(node_rec(b, 0) + 24, (uint32_t)-1); expect_bad_fixed(b, "tensor 11 (ws.a): producer 0 neither outputs it");
    /* Counts that disagree between sections. */
    b = copy_good(); set32(section(b, GP_PLAN_SEC_NODES), 6); expect_bad_fixed(b, "tensor 9 (m): lifetime [5, 6] outside the 6 steps");
    b = copy_good(); set32(section(b, GP_PLAN_SEC_TENSORS), 12); expect_bad_fixed(b, "tensor reference 12 out of range (12 tensors)");
    (void)good_n_nodes;
    (void)good_n_tensors;
}

void gp_suite_plan(void)
{
    static const gp_test_case tests[] = {
        {"liveness: exact first/last, regions, in-place, extras", test_liveness_exact},
        {"liveness: views extend their root's life", test_view_lifetime},
        {"regions: io inputs first, then outputs smallest first", test_io_order},
        {"liveness: accumulated outputs in plans for CUDA", test_accumulated_outputs},
        {"liveness: what a one-token attention's launch writes, in plans for CUDA",
         test_attention_lifetimes},
        {"in-place: chains", test_inplace_chain},
        {"in-place: every refusal rule", test_inplace_refused},
        {"in-place: through a reshape view", test_inplace_through_view},
        {"workspaces: sizes per backend and lifetimes; syms", test_workspaces},
        {"workspaces: a fused attention's from the ropes and stores it absorbs",
         test_workspace_fused_attention},
        {"options: refused with a message", test_bad_options},
        {"random DAGs: no overlap, lower bound, loader accepts", test_random_dags},
        {"fixture plan contents", test_fixture_contents},
        {"write -> load round trip, every field", test_round_trip},
        {"empty graphs", test_empty_graphs},
        {"summary text", test_summary},
        {"node attributes in a record", test_node_attrs_record},
    };
    gp_test_add_suite("plan", NULL, NULL, tests, GP_TEST_COUNT(tests));
    static const gp_test_case c_tests[] = {
        {"the good file loads; newer minor accepted", test_corrupt_good_loads},
        {"header fields", test_corrupt_header},
        {"section table, CRCs, counts", test_corrupt_sections},
        {"truncated at every length", test_corrupt_truncated},
        {"every single byte flipped", test_corrupt_every_byte},
        {"random damage behind fixed CRCs", test_corrupt_random_fixed},
        {"string references", test_corrupt_strings},
        {"meta, regions, syms", test_corrupt_meta_regions},
        {"tensor records", test_corrupt_tensors},
        {"node records", test_corrupt_nodes},
        {"weight splits (plan format 1.1)", test_corrupt_split},
    };
    gp_test_add_suite("plan file corruption", NULL, corrupt_clean, c_tests, GP_TEST_COUNT(c_tests));
}
