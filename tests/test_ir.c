/* Tests of ir/: op table, diagnostics (golden texts), shape inference for every op (a success and an
 * error case each), broadcasting, graph outputs and the printer. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "ir/ir.h"
#include "tests/testutil.h"

/* ---- fixture: a graph with T <= 512 and S <= 1024, and an in-memory diagnostic sink ---- */

static gp_graph *g;
static gp_diag *d;
static int T, S; /* sym ids */
static const gp_loc here = {NULL, 0, 0};

static void fresh(void)
{
    gp_graph_free(g);
    gp_diag_free(d);
    g = gp_graph_new("test");
    d = gp_diag_new(NULL);
    T = gp_graph_add_sym(g, "T", 512, here);
    S = gp_graph_add_sym(g, "S", 1024, here);
}

static int suite_clean(void)
{
    gp_graph_free(g);
    gp_diag_free(d);
    g = NULL;
    d = NULL;
    return 0;
}

#define SYMT (-1000)
#define SYMS (-1001)

/* A leaf tensor; dims are constants, or SYMT / SYMS for the symbolic dims. */
static int leaf(const char *name, gp_tensor_kind kind, gp_dtype dt, int ndim, ...)
{
    gp_dim shape[GP_MAX_DIMS + 2];
    va_list ap;
    va_start(ap, ndim);
    for (int i = 0; i < ndim; i++) {
        int v = va_arg(ap, int);
        if (v == SYMT)
            shape[i] = (gp_dim){512, T};
        else if (v == SYMS)
            shape[i] = (gp_dim){1024, S};
        else
            shape[i] = (gp_dim){v, -1};
    }
    va_end(ap);
    return gp_graph_add_tensor(g, d, name, kind, dt, ndim, shape, NULL, here);
}

static int in(const char *name, gp_dtype dt, int ndim, int a, int b, int c)
{
    return leaf(name, GP_TENSOR_INPUT, dt, ndim, a, b, c);
}

static int node(gp_op op, int n, int i0, int i1, int i2, int i3, const gp_attrs *a)
{
    int ins[4] = {i0, i1, i2, i3};
    return gp_graph_add_node(g, d, op, ins, n, a, NULL, 0, GP_F32, NULL, here);
}

static int node1(gp_op op, int x) { return node(op, 1, x, 0, 0, 0, NULL); }
static int node2(gp_op op, int a, int b) { return node(op, 2, a, b, 0, 0, NULL); }

static const gp_tensor *tt(int id) { return &g->tensors[id]; }

/* Output shape check: ndim, then each dim as a constant or SYMT/SYMS. */
static int shape_is(int id, int ndim, ...)
{
    if (id < 0 || tt(id)->ndim != ndim)
        return 0;
    va_list ap;
    va_start(ap, ndim);
    int ok = 1;
    for (int i = 0; i < ndim; i++) {
        int v = va_arg(ap, int);
        gp_dim dm = tt(id)->shape[i];
        if (v == SYMT)
            ok &= dm.sym == T && dm.size == 512;
        else if (v == SYMS)
            ok &= dm.sym == S && dm.size == 1024;
        else
            ok &= dm.sym == -1 && dm.size == v;
    }
    va_end(ap);
    return ok;
}

static int strides_are(int id, int ndim, ...)
{
    va_list ap;
    va_start(ap, ndim);
    int ok = tt(id)->ndim == ndim;
    for (int i = 0; i < ndim; i++)
        ok &= tt(id)->stride[i] == va_arg(ap, int);
    va_end(ap);
    return ok;
}

static int has_error(const char *sub)
{
    return gp_diag_count(d) == 1 && strstr(gp_diag_text(d), sub) != NULL;
}

#define CHECK_ERR(id, sub)                                   \
    do {                                                     \
        CU_ASSERT_EQUAL(id, -1);                             \
        CU_ASSERT(has_error(sub));                           \
        if (!has_error(sub))                                 \
            fprintf(stderr, "\n  got: %s", gp_diag_text(d)); \
    } while (0)

#define CHECK_OUT(id, kind_, dtype_)                   \
    do {                                               \
        CU_ASSERT(id >= 0);                            \
        CU_ASSERT_EQUAL(gp_diag_count(d), 0);          \
        if (id >= 0) {                                 \
            CU_ASSERT_EQUAL(tt(id)->kind, kind_);      \
            CU_ASSERT_EQUAL(tt(id)->dtype, dtype_);    \
            CU_ASSERT_EQUAL(tt(id)->producer, g->n_nodes - 1); \
        }                                              \
    } while (0)

/* ---- core tables ---- */

static void test_core_tables(void)
{
    static const char *const names[] = {
        "get_rows", "add", "sub", "mul", "div", "scale", "matmul", "layer_norm", "rms_norm",
        "softmax", "gelu", "gelu_erf", "silu", "swiglu", "rope", "reshape", "permute", "slice",
        "view", "cont", "cast", "concat", "store", "attention", "all_reduce", "argmax", "moe"};
    CU_ASSERT_EQUAL(sizeof names / sizeof names[0], GP_OP_COUNT - 1);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        gp_op op = GP_OP_NONE;
        CU_ASSERT_EQUAL(gp_op_from_name(names[i], &op), 0);
        CU_ASSERT_EQUAL(op, (gp_op)(i + 1));
        CU_ASSERT_STRING_EQUAL(gp_op_get(op)->name, names[i]);
    }
    gp_op op;
    CU_ASSERT_EQUAL(gp_op_from_name("none", &op), -1);
    CU_ASSERT_EQUAL(gp_op_from_name("matmull", &op), -1);
    CU_ASSERT_PTR_NULL(gp_op_get(GP_OP_COUNT));
    CU_ASSERT_PTR_NULL(gp_op_get((gp_op)-1));

    CU_ASSERT_EQUAL(gp_op_get(GP_OP_LAYER_NORM)->min_inputs, 2);
    CU_ASSERT_EQUAL(gp_op_get(GP_OP_LAYER_NORM)->max_inputs, 3);
    CU_ASSERT_EQUAL(gp_op_get(GP_OP_ATTENTION)->min_inputs, 4);
    CU_ASSERT_EQUAL(gp_op_get(GP_OP_STORE)->max_inputs, 3);
    CU_ASSERT_EQUAL(gp_op_get(GP_OP_GET_ROWS)->max_inputs, 2);
    CU_ASSERT_EQUAL(gp_op_get(GP_OP_ADD)->inplace, 0);
    CU_ASSERT_EQUAL(gp_op_get(GP_OP_ROPE)->inplace, 0);
    CU_ASSERT_EQUAL(gp_op_get(GP_OP_SWIGLU)->inplace, 0);
    CU_ASSERT_EQUAL(gp_op_get(GP_OP_MATMUL)->inplace, -1);
    CU_ASSERT_EQUAL(gp_op_get(GP_OP_CONT)->inplace, -1);
    CU_ASSERT_EQUAL(gp_op_get(GP_OP_ATTENTION)->inplace, -1);
    int views = 0;
    for (int o = 0; o < GP_OP_COUNT; o++)
        views += gp_op_get((gp_op)o)->is_view;
    CU_ASSERT_EQUAL(views, 5);
    CU_ASSERT(gp_op_get(GP_OP_STORE)->is_view);
    CU_ASSERT(gp_op_get(GP_OP_PERMUTE)->is_view);
    CU_ASSERT(!gp_op_get(GP_OP_CONT)->is_view);

    gp_dtype t;
    CU_ASSERT_EQUAL(gp_dtype_from_name("bf16", &t), 0);
    CU_ASSERT_EQUAL(t, GP_BF16);
    CU_ASSERT_EQUAL(gp_dtype_from_name("f64", &t), -1);
    CU_ASSERT_EQUAL(gp_dtype_size(GP_F32), 4);
    CU_ASSERT_EQUAL(gp_dtype_size(GP_F16), 2);
    CU_ASSERT_EQUAL(gp_dtype_size(GP_BF16), 2);
    CU_ASSERT_EQUAL(gp_dtype_size(GP_I32), 4);
    CU_ASSERT_STRING_EQUAL(gp_dtype_name(GP_I32), "i32");
    CU_ASSERT_STRING_EQUAL(gp_tensor_kind_name(GP_TENSOR_STATE), "state");
    CU_ASSERT_STRING_EQUAL(gp_tensor_kind_name(GP_TENSOR_VIEW), "view");
}

/* ---- diagnostics ---- */

static void test_diag_format(void)
{
    gp_diag *dg = gp_diag_new(NULL);
    const char *src = "graph g\n\tx = add(a,  b)\r\nlast";
    const char *f = gp_diag_add_source(dg, "m.gplan", src, strlen(src));
    CU_ASSERT_STRING_EQUAL(f, "m.gplan");
    gp_diag_error(dg, (gp_loc){f, 2, 14}, "bad %s", "thing");
    CU_ASSERT_STRING_EQUAL(gp_diag_text(dg), "m.gplan:2:14: error: bad thing\n"
                                             "\tx = add(a,  b)\n"
                                             "\t            ^\n");
    gp_diag_free(dg);

    dg = gp_diag_new(NULL);
    f = gp_diag_add_source(dg, "m.gplan", src, strlen(src));
    gp_diag_error(dg, (gp_loc){f, 1, 1}, "first col");
    gp_diag_error(dg, (gp_loc){f, 3, 4}, "last line");
    gp_diag_error(dg, (gp_loc){f, 9, 2}, "past the end");
    gp_diag_error(dg, (gp_loc){NULL, 0, 0}, "nowhere");
    gp_diag_error(dg, (gp_loc){f, 0, 0}, "file only");
    gp_diag_error(dg, (gp_loc){"other.gplan", 5, 3}, "unregistered");
    CU_ASSERT_STRING_EQUAL(gp_diag_text(dg), "m.gplan:1:1: error: first col\n"
                                             "graph g\n"
                                             "^\n"
                                             "m.gplan:3:4: error: last line\n"
                                             "last\n"
                                             "   ^\n"
                                             "m.gplan:9:2: error: past the end\n"
                                             "error: nowhere\n"
                                             "m.gplan: error: file only\n"
                                             "other.gplan:5:3: error: unregistered\n");
    CU_ASSERT_EQUAL(gp_diag_count(dg), 6);
    gp_diag_free(dg);
    gp_diag_free(NULL);

    /* Lines with control bytes (binary data) or of more than 4096 bytes are not quoted; a UTF-8
     * character before the column takes one space under it, the column counting its bytes. */
    static char big[5000];
    memset(big, 'x', sizeof big - 1);
    const char bin[] = "ok\na\x01b\nc\x7f\nd\0e\n\xc3\xa9t\xc3\xa9 = 1\n";
    dg = gp_diag_new(NULL);
    f = gp_diag_add_source(dg, "b.gplan", bin, sizeof bin - 1);
    const char *fb = gp_diag_add_source(dg, "big.gplan", big, strlen(big));
    gp_diag_error(dg, (gp_loc){f, 2, 2}, "control");
    gp_diag_error(dg, (gp_loc){f, 3, 2}, "delete");
    gp_diag_error(dg, (gp_loc){f, 4, 2}, "nul");
    gp_diag_error(dg, (gp_loc){f, 5, 7}, "utf-8");
    gp_diag_error(dg, (gp_loc){fb, 1, 4097}, "long");
    CU_ASSERT_STRING_EQUAL(gp_diag_text(dg), "b.gplan:2:2: error: control\n"
                                             "b.gplan:3:2: error: delete\n"
                                             "b.gplan:4:2: error: nul\n"
                                             "b.gplan:5:7: error: utf-8\n"
                                             "\xc3\xa9t\xc3\xa9 = 1\n"
                                             "    ^\n"
                                             "big.gplan:1:4097: error: long\n");
    gp_diag_free(dg);
}

static void test_diag_copies_and_prints(void)
{
    char name[] = "a.gplan";
    char text[] = "x\n";
    gp_diag *dg = gp_diag_new(NULL);
    const char *f = gp_diag_add_source(dg, name, text, 2);
    name[0] = 'z';
    text[0] = 'y';
    gp_diag_error(dg, (gp_loc){f, 1, 1}, "m");
    CU_ASSERT_STRING_EQUAL(gp_diag_text(dg), "a.gplan:1:1: error: m\nx\n^\n");
    gp_diag_free(dg);

    const char *path = gp_test_tmpfile(".txt");
    FILE *fp = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    dg = gp_diag_new(fp);
    gp_diag_error(dg, here, "to the file %d", 7);
    fclose(fp);
    char *got = gp_test_read_file(path, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(got);
    CU_ASSERT_STRING_EQUAL(got, "error: to the file 7\n");
    CU_ASSERT_STRING_EQUAL(gp_diag_text(dg), got);
    free(got);
    remove(path);
    gp_diag_free(dg);
}

static void test_diag_limit(void)
{
    gp_diag *dg = gp_diag_new(NULL);
    for (int i = 0; i < 150; i++)
        gp_diag_error(dg, here, "e%d", i);
    CU_ASSERT_EQUAL(gp_diag_count(dg), 150);
    const char *t = gp_diag_text(dg);
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "error: e99\n"));
    CU_ASSERT_PTR_NULL(strstr(t, "error: e100\n"));
    const char *stop = strstr(t, "error: too many errors, stopping\n");
    CU_ASSERT_PTR_NOT_NULL(stop);
    CU_ASSERT(stop && strcmp(stop, "error: too many errors, stopping\n") == 0);
    int lines = 0;
    for (; *t; t++)
        lines += *t == '\n';
    CU_ASSERT_EQUAL(lines, 101);
    gp_diag_free(dg);
}

/* ---- leaf tensors and names ---- */

static void test_add_tensor(void)
{
    fresh();
    gp_dim sh[2] = {{0, T}, {768, -1}};
    int x = gp_graph_add_tensor(g, d, "x", GP_TENSOR_INPUT, GP_F16, 2, sh, NULL, here);
    CU_ASSERT_EQUAL(x, 0);
    CU_ASSERT(shape_is(x, 2, SYMT, 768)); /* the symbolic size is set to the bound */
    CU_ASSERT(strides_are(x, 2, 768, 1));
    CU_ASSERT_EQUAL(tt(x)->view_src, -1);
    CU_ASSERT_EQUAL(tt(x)->producer, -1);
    CU_ASSERT_EQUAL(gp_tensor_nbytes(tt(x)), 512 * 768 * 2);
    CU_ASSERT(gp_tensor_is_contiguous(tt(x)));
    CU_ASSERT_EQUAL(gp_graph_find_tensor(g, "x"), x);
    CU_ASSERT_EQUAL(gp_graph_find_tensor(g, "y"), -1);

    int w = gp_graph_add_tensor(g, d, "w", GP_TENSOR_WEIGHT, GP_F32, 1, sh + 1, "h.0.w",
                                here);
    CU_ASSERT(w >= 0);
    CU_ASSERT_STRING_EQUAL(tt(w)->weight_name, "h.0.w");

    int sc = gp_graph_add_tensor(g, d, "s", GP_TENSOR_STATE, GP_F32, 0, NULL, NULL, here);
    CU_ASSERT_EQUAL(tt(sc)->ndim, 0);
    CU_ASSERT_EQUAL(gp_tensor_nbytes(tt(sc)), 4);
    CU_ASSERT_EQUAL(gp_diag_count(d), 0);

    CHECK_ERR(gp_graph_add_tensor(g, d, "x", GP_TENSOR_INPUT, GP_F32, 2, sh, NULL, here),
              "'x' is already defined");
    fresh();
    gp_dim big[5] = {{2, -1}, {2, -1}, {2, -1}, {2, -1}, {2, -1}};
    CHECK_ERR(gp_graph_add_tensor(g, d, "b", GP_TENSOR_INPUT, GP_F32, 5, big, NULL, here),
              "tensor 'b': 5 dims (at most 4");
    fresh();
    gp_dim zero[2] = {{4, -1}, {0, -1}};
    CHECK_ERR(gp_graph_add_tensor(g, d, "z", GP_TENSOR_INPUT, GP_F32, 2, zero, NULL, here),
              "tensor 'z': dim 1 has size 0");
    fresh();
    gp_dim huge[3] = {{1LL << 30, -1}, {1LL << 30, -1}, {8, -1}};
    CHECK_ERR(gp_graph_add_tensor(g, d, "h", GP_TENSOR_INPUT, GP_F32, 3, huge, NULL, here),
              "tensor 'h': shape [1073741824, 1073741824, 8] is too large");
    fresh();
    gp_dim bad_sym[1] = {{4, 7}};
    CHECK_ERR(gp_graph_add_tensor(g, d, "q", GP_TENSOR_INPUT, GP_F32, 1, bad_sym, NULL, here),
              "unknown symbolic dim 7");
    fresh();
    CHECK_ERR(gp_graph_add_tensor(g, d, "i", GP_TENSOR_INTERMEDIATE, GP_F32, 1, sh + 1, NULL,
                                  here),
              "kind intermediate cannot be declared");
    CU_ASSERT_EQUAL(gp_graph_add_sym(g, "T", 3, here), -1);
    CU_ASSERT_EQUAL(gp_graph_add_sym(g, "U", 0, here), -1);
    CU_ASSERT_EQUAL(gp_graph_add_sym(g, "U", 3, here), 2);
}

static void test_names(void)
{
    fresh();
    int x = in("x", GP_F32, 1, 8, 0, 0);
    int ins[1] = {x};
    int a = gp_graph_add_node(g, d, GP_OP_GELU, ins, 1, NULL, NULL, 0, GP_F32, "h", here);
    int b = gp_graph_add_node(g, d, GP_OP_GELU, ins, 1, NULL, NULL, 0, GP_F32, "h", here);
    int c = gp_graph_add_node(g, d, GP_OP_GELU, ins, 1, NULL, NULL, 0, GP_F32, "h", here);
    int e = gp_graph_add_node(g, d, GP_OP_GELU, ins, 1, NULL, NULL, 0, GP_F32, NULL, here);
    CU_ASSERT_STRING_EQUAL(tt(a)->name, "h");
    CU_ASSERT_STRING_EQUAL(tt(b)->name, "h.1");
    CU_ASSERT_STRING_EQUAL(tt(c)->name, "h.2");
    CU_ASSERT_STRING_EQUAL(tt(e)->name, "t4");
    CU_ASSERT_EQUAL(gp_graph_find_tensor(g, "h.2"), c);
    CU_ASSERT_EQUAL(g->n_nodes, 4);
    CU_ASSERT_EQUAL(g->nodes[3].output, e);
    CU_ASSERT_EQUAL(g->nodes[3].inputs[0], x);
}

/* ---- elementwise ops ---- */

static void test_binary_broadcast(void)
{
    fresh();
    int a = in("a", GP_F16, 2, SYMT, 768, 0);
    int b = in("b", GP_F32, 1, 768, 0, 0);
    int c = in("c", GP_F32, 3, 4, 1, 768);
    int one = in("one", GP_F32, 2, 1, 1, 0);
    int s = in("s", GP_F32, 1, SYMS, 0, 0);
    int r = node2(GP_OP_ADD, a, b);
    CHECK_OUT(r, GP_TENSOR_INTERMEDIATE, GP_F16); /* dtype of input 0 */
    CU_ASSERT(shape_is(r, 2, SYMT, 768));
    CU_ASSERT(strides_are(r, 2, 768, 1));
    r = node2(GP_OP_SUB, c, a);
    CHECK_OUT(r, GP_TENSOR_INTERMEDIATE, GP_F32);
    CU_ASSERT(shape_is(r, 3, 4, SYMT, 768));
    r = node2(GP_OP_MUL, one, c);
    CU_ASSERT(shape_is(r, 3, 4, 1, 768));
    r = node2(GP_OP_DIV, a, a);
    CU_ASSERT(shape_is(r, 2, SYMT, 768));
    CU_ASSERT_EQUAL(g->nodes[g->n_nodes - 1].op, GP_OP_DIV);

    int t1 = in("t1", GP_F32, 2, 4, 512, 0);
    CHECK_ERR(node2(GP_OP_ADD, t1, a), "add: shapes [4, 512] and [T, 768] do not broadcast");
    fresh();
    a = in("a", GP_F32, 2, 4, 768, 0);
    b = in("b", GP_F32, 2, 4, 512, 0);
    CHECK_ERR(node2(GP_OP_MUL, a, b), "mul: shapes [4, 768] and [4, 512] do not broadcast");
    fresh();
    /* Two symbolic dims are equal only when they are the same sym, even with the same bound. */
    int u = gp_graph_add_sym(g, "U", 512, here);
    gp_dim su[1] = {{512, u}};
    a = in("a", GP_F32, 1, SYMT, 0, 0);
    b = gp_graph_add_tensor(g, d, "b", GP_TENSOR_INPUT, GP_F32, 1, su, NULL, here);
    CHECK_ERR(node2(GP_OP_SUB, a, b), "sub: shapes [T] and [U] do not broadcast");
    fresh();
    a = in("a", GP_F32, 1, SYMT, 0, 0);
    b = in("b", GP_F32, 1, 512, 0, 0);
    CHECK_ERR(node2(GP_OP_DIV, a, b), "div: shapes [T] and [512] do not broadcast");
    (void)s;
    fresh();
    a = in("a", GP_F32, 1, 8, 0, 0);
    b = in("ids", GP_I32, 1, 8, 0, 0);
    CHECK_ERR(node2(GP_OP_ADD, a, b), "add: b ('ids') is i32, expected a float tensor");
}

static void test_unary(void)
{
    static const gp_op ops[] = {GP_OP_SCALE, GP_OP_GELU, GP_OP_GELU_ERF, GP_OP_SILU};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        fresh();
        int x = in("x", GP_BF16, 3, 2, SYMT, 64);
        int r = node1(ops[i], x);
        CHECK_OUT(r, GP_TENSOR_INTERMEDIATE, GP_BF16);
        CU_ASSERT(shape_is(r, 3, 2, SYMT, 64));
        int ids = in("ids", GP_I32, 1, SYMT, 0, 0);
        CHECK_ERR(node1(ops[i], ids), "is i32, expected a float tensor");
        CU_ASSERT_PTR_NOT_NULL(strstr(gp_diag_text(d), gp_op_get(ops[i])->name));
    }
    fresh();
    int x = in("x", GP_F32, 1, 4, 0, 0);
    CHECK_ERR(node(GP_OP_SCALE, 2, x, x, 0, 0, NULL), "scale: takes 1 inputs, got 2");
    fresh();
    x = in("x", GP_F32, 1, 4, 0, 0);
    CHECK_ERR(node(GP_OP_GELU, 1, 99, 0, 0, 0, NULL), "gelu: x is not a tensor (id 99)");
    fresh();
    CHECK_ERR(node(GP_OP_NONE, 0, 0, 0, 0, 0, NULL), "unknown op 0");
}

static void test_swiglu(void)
{
    fresh();
    int a = in("gate", GP_F32, 2, SYMT, 2048, 0);
    int b = in("up", GP_F32, 2, SYMT, 2048, 0);
    int r = node2(GP_OP_SWIGLU, a, b);
    CHECK_OUT(r, GP_TENSOR_INTERMEDIATE, GP_F32);
    CU_ASSERT(shape_is(r, 2, SYMT, 2048));
    int c = in("c", GP_F32, 1, 2048, 0, 0);
    CHECK_ERR(node2(GP_OP_SWIGLU, a, c),
              "swiglu: gate is [T, 2048], up is [2048] (expected the same shape)");
}

/* ---- matmul ---- */

static void test_matmul(void)
{
    fresh();
    int x = in("x", GP_F16, 2, SYMT, 768, 0);
    int w = in("w", GP_F16, 2, 768, 2304, 0);
    int r = node2(GP_OP_MATMUL, x, w);
    CHECK_OUT(r, GP_TENSOR_INTERMEDIATE, GP_F32); /* matmul is always f32 */
    CU_ASSERT(shape_is(r, 2, SYMT, 2304));

    int wt = in("wt", GP_F32, 2, 2304, 768, 0);
    gp_attrs tb = {.i = {[GP_MATMUL_TB] = 1}};
    r = node(GP_OP_MATMUL, 2, x, wt, 0, 0, &tb);
    CU_ASSERT(shape_is(r, 2, SYMT, 2304));
    CU_ASSERT_EQUAL(g->nodes[g->n_nodes - 1].attrs.i[GP_MATMUL_TB], 1);

    int xt = in("xt", GP_F32, 2, 768, SYMT, 0);
    gp_attrs ta = {.i = {[GP_MATMUL_TA] = 1}};
    r = node(GP_OP_MATMUL, 2, xt, w, 0, 0, &ta);
    CU_ASSERT(shape_is(r, 2, SYMT, 2304));

    /* batched: q [H, T, D] x k^T [H, S, D] -> [H, T, S]; b 2-D with a 3-D a; broadcast batch */
    int q = in("q", GP_F32, 3, 12, SYMT, 64);
    int k = in("k", GP_F32, 3, 12, SYMS, 64);
    r = node(GP_OP_MATMUL, 2, q, k, 0, 0, &tb);
    CU_ASSERT(shape_is(r, 3, 12, SYMT, SYMS));
    int w2 = in("w2", GP_F32, 2, 64, 32, 0);
    r = node2(GP_OP_MATMUL, q, w2);
    CU_ASSERT(shape_is(r, 3, 12, SYMT, 32));
    int a4 = leaf("a4", GP_TENSOR_INPUT, GP_F32, 4, 2, 1, 5, 6);
    int b3 = in("b3", GP_F32, 3, 3, 6, 7);
    r = node2(GP_OP_MATMUL, a4, b3);
    CU_ASSERT(shape_is(r, 4, 2, 3, 5, 7));
    CU_ASSERT_EQUAL(gp_diag_count(d), 0);

    fresh();
    int a = in("a", GP_F32, 2, 4, 768, 0);
    int b = in("b", GP_F32, 2, 512, 2304, 0);
    CHECK_ERR(node2(GP_OP_MATMUL, a, b),
              "matmul: inner dims differ: a is [4, 768], b is [512, 2304] (expected b [768, N])");
    fresh();
    a = in("a", GP_F32, 2, 4, 768, 0);
    b = in("b", GP_F32, 2, 2304, 512, 0);
    CHECK_ERR(node(GP_OP_MATMUL, 2, a, b, 0, 0, &tb), "(expected b [N, 768])");
    fresh();
    a = in("a", GP_F32, 3, 2, 4, 8);
    b = in("b", GP_F32, 3, 3, 8, 5);
    CHECK_ERR(node2(GP_OP_MATMUL, a, b),
              "matmul: batch dims of a [2, 4, 8] and b [3, 8, 5] do not broadcast");
    fresh();
    a = in("a", GP_F32, 1, 8, 0, 0);
    b = in("b", GP_F32, 2, 8, 5, 0);
    CHECK_ERR(node2(GP_OP_MATMUL, a, b), "matmul: a must have at least 2 dims, got a [8]");
}

/* ---- normalization, softmax, rope, attention ---- */

static void test_norms(void)
{
    fresh();
    int x = in("x", GP_F32, 2, SYMT, 768, 0);
    int w = in("w", GP_F32, 1, 768, 0, 0);
    int b = in("b", GP_F16, 1, 768, 0, 0);
    gp_attrs eps = {.f = {[GP_LAYER_NORM_EPS] = 1e-5}};
    int r = node(GP_OP_LAYER_NORM, 3, x, w, b, 0, &eps);
    CHECK_OUT(r, GP_TENSOR_INTERMEDIATE, GP_F32);
    CU_ASSERT(shape_is(r, 2, SYMT, 768));
    CU_ASSERT_EQUAL(g->nodes[0].n_inputs, 3);
    r = node(GP_OP_LAYER_NORM, 2, x, w, 0, 0, &eps);
    CU_ASSERT(shape_is(r, 2, SYMT, 768));
    r = node(GP_OP_RMS_NORM, 2, x, w, 0, 0, &eps);
    CHECK_OUT(r, GP_TENSOR_INTERMEDIATE, GP_F32);
    CU_ASSERT(shape_is(r, 2, SYMT, 768));

    int w5 = in("w5", GP_F32, 1, 512, 0, 0);
    CHECK_ERR(node(GP_OP_LAYER_NORM, 3, x, w, w5, 0, &eps),
              "layer_norm: b is b [512], expected [768] (the last dim of x [T, 768])");
    fresh();
    x = in("x", GP_F32, 2, SYMT, 768, 0);
    w = in("w", GP_F32, 2, 1, 768, 0);
    CHECK_ERR(node(GP_OP_RMS_NORM, 2, x, w, 0, 0, &eps), "rms_norm: w is w [1, 768], expected");
    fresh();
    x = in("x", GP_F32, 2, SYMT, 768, 0);
    CHECK_ERR(node(GP_OP_LAYER_NORM, 1, x, 0, 0, 0, &eps), "layer_norm: takes 2 to 3 inputs");
}

static void test_softmax(void)
{
    fresh();
    int x = in("x", GP_F16, 3, 12, SYMT, SYMS);
    gp_attrs a = {.i = {[GP_SOFTMAX_CAUSAL] = 1}, .f = {[GP_SOFTMAX_SCALE] = 0.125}};
    int r = node(GP_OP_SOFTMAX, 1, x, 0, 0, 0, &a);
    CHECK_OUT(r, GP_TENSOR_INTERMEDIATE, GP_F16);
    CU_ASSERT(shape_is(r, 3, 12, SYMT, SYMS));
    CU_ASSERT_DOUBLE_EQUAL(g->nodes[0].attrs.f[GP_SOFTMAX_SCALE], 0.125, 0);
    r = node1(GP_OP_SOFTMAX, x);
    CU_ASSERT_DOUBLE_EQUAL(g->nodes[1].attrs.f[GP_SOFTMAX_SCALE], 1.0, 0); /* unset scale means 1 */

    gp_attrs bad = {.i = {[GP_SOFTMAX_CAUSAL] = 2}};
    CHECK_ERR(node(GP_OP_SOFTMAX, 1, x, 0, 0, 0, &bad), "softmax: causal must be 0 or 1, got 2");
    fresh();
    x = in("x", GP_F32, 1, 8, 0, 0);
    gp_attrs causal = {.i = {[GP_SOFTMAX_CAUSAL] = 1}};
    CHECK_ERR(node(GP_OP_SOFTMAX, 1, x, 0, 0, 0, &causal),
              "softmax: x must have at least 2 dims, got x [8]");
}

static void test_rope(void)
{
    fresh();
    int x = in("x", GP_F32, 3, SYMT, 32, 128);
    int pos = in("pos", GP_I32, 1, SYMT, 0, 0);
    gp_attrs a = {0};
    int r = node(GP_OP_ROPE, 2, x, pos, 0, 0, &a);
    CHECK_OUT(r, GP_TENSOR_INTERMEDIATE, GP_F32);
    CU_ASSERT(shape_is(r, 3, SYMT, 32, 128));
    CU_ASSERT_EQUAL(g->nodes[0].attrs.i[GP_ROPE_N_DIMS], 128); /* n = 0 means all of D */
    CU_ASSERT_DOUBLE_EQUAL(g->nodes[0].attrs.f[GP_ROPE_THETA], 10000.0, 0);
    gp_attrs part = {.i = {[GP_ROPE_MODE] = 1, [GP_ROPE_N_DIMS] = 64},
                     .f = {[GP_ROPE_THETA] = 500000.0}};
    r = node(GP_OP_ROPE, 2, x, pos, 0, 0, &part);
    CU_ASSERT_EQUAL(g->nodes[1].attrs.i[GP_ROPE_N_DIMS], 64);
    CU_ASSERT_DOUBLE_EQUAL(g->nodes[1].attrs.f[GP_ROPE_THETA], 500000.0, 0);

    gp_attrs odd = {.i = {[GP_ROPE_N_DIMS] = 63}};
    CHECK_ERR(node(GP_OP_ROPE, 2, x, pos, 0, 0, &odd),
              "rope: rotated dims n = 63 must be even and in 1..128");
    fresh();
    x = in("x", GP_F32, 3, SYMT, 32, 128);
    pos = in("pos", GP_I32, 1, SYMT, 0, 0);
    gp_attrs big = {.i = {[GP_ROPE_N_DIMS] = 130}};
    CHECK_ERR(node(GP_OP_ROPE, 2, x, pos, 0, 0, &big), "n = 130 must be even");
    fresh();
    x = in("x", GP_F32, 2, SYMT, 4096, 0);
    pos = in("pos", GP_I32, 1, SYMT, 0, 0);
    CHECK_ERR(node2(GP_OP_ROPE, x, pos), "rope: x must be [T, H, D], got x [T, 4096]");
    fresh();
    x = in("x", GP_F32, 3, SYMT, 32, 128);
    pos = in("pos", GP_F32, 1, SYMT, 0, 0);
    CHECK_ERR(node2(GP_OP_ROPE, x, pos), "rope: pos ('pos') is f32, expected i32");
    fresh();
    x = in("x", GP_F32, 3, SYMT, 32, 128);
    pos = in("pos", GP_I32, 1, 7, 0, 0);
    CHECK_ERR(node2(GP_OP_ROPE, x, pos), "rope: pos is pos [7], expected [T]");

    /* Linear scaling (rope_type "linear"): every frequency divided by the factor > 0. */
    fresh();
    x = in("x", GP_F32, 3, SYMT, 4, 16);
    pos = in("pos", GP_I32, 1, SYMT, 0, 0);
    gp_attrs lin = {.i = {[GP_ROPE_SCALING] = GP_ROPE_LINEAR},
                    .f = {[GP_ROPE_THETA] = 50000.0, [GP_ROPE_FACTOR] = 4.0}};
    node(GP_OP_ROPE, 2, x, pos, 0, 0, &lin);
    CU_ASSERT_EQUAL(g->nodes[0].attrs.i[GP_ROPE_SCALING], GP_ROPE_LINEAR);
    for (int j = 0; j < 8; j++)
        CU_ASSERT_DOUBLE_EQUAL(gp_rope_freq(&g->nodes[0].attrs, j, 16),
                               pow(50000.0, -2.0 * j / 16) / 4.0, 1e-15);
    char why[192];
    gp_attrs no_factor = {.i = {[GP_ROPE_N_DIMS] = 16, [GP_ROPE_SCALING] = GP_ROPE_LINEAR},
                          .f = {[GP_ROPE_THETA] = 10000.0}};
    CU_ASSERT_EQUAL(gp_rope_check_scaling(&no_factor, why, sizeof why), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "rope: bad linear scaling (factor 0)"));
    /* the factor is read only under a scaling */
    gp_attrs unscaled = {.i = {[GP_ROPE_N_DIMS] = 16},
                         .f = {[GP_ROPE_THETA] = 10000.0, [GP_ROPE_FACTOR] = 4.0}};
    CU_ASSERT_EQUAL(gp_rope_check_scaling(&unscaled, why, sizeof why), 0);
    CU_ASSERT_DOUBLE_EQUAL(gp_rope_freq(&unscaled, 1, 16), pow(10000.0, -2.0 / 16), 1e-15);
    CHECK_ERR(node(GP_OP_ROPE, 2, x, pos, 0, 0, &no_factor), "rope: bad linear scaling (factor 0)");

    /* YaRN (rope_type "yarn"): transformers 5.25's _compute_yarn_parameters, float32, for
     * gpt-oss's rope_parameters (head_dim 64, theta 150000, factor 32, beta_fast 32, beta_slow 1,
     * original_max_position_embeddings 4096, truncate false), and with truncate for Llama's
     * theta 10000, factor 8, original 2048: inverse frequencies and attention factors. */
    static const double oss[32] = {
        1.0, 0.6890442967414856, 0.4747820496559143, 0.32714587450027466, 0.22541800141334534,
        0.15532298386096954, 0.1070244237780571, 0.07374456524848938, 0.05081327259540558,
        0.031705696135759354, 0.019334999844431877, 0.011592049151659012, 0.006794959306716919,
        0.0038603590801358223, 0.002093792660161853, 0.00105260219424963, 0.0004564839182421565,
        0.00012931869423482567, 3.830881178146228e-05, 2.6396468456368893e-05,
        1.818833698052913e-05, 1.253256959898863e-05, 8.635495760245249e-06,
        5.95023948335438e-06, 4.099978468730114e-06, 2.8250667583051836e-06,
        1.9465962850517826e-06, 1.3412909538601525e-06, 9.242089618055616e-07,
        6.368209142237902e-07, 4.38797854940276e-07, 3.023511396804679e-07};
    static const double trunc8[32] = {
        1.0, 0.7498942017555237, 0.5623413324356079, 0.4216965138912201, 0.3162277638912201,
        0.23713736236095428, 0.17782793939113617, 0.1333521455526352, 0.10000000149011612,
        0.06994204968214035, 0.0486641488969326, 0.03365462273359299, 0.0231089536100626,
        0.015733150765299797, 0.010601281188428402, 0.007052276749163866, 0.00461538415402174,
        0.002956313779577613, 0.0018384235445410013, 0.0010947888949885964,
        0.0006081303581595421, 0.00029642172739841044, 0.00022228492889553308,
        0.00016669018077664077, 0.0001250000059371814, 9.373677312396467e-05,
        7.029266271274537e-05, 5.271206100587733e-05, 3.9528473280370235e-05,
        2.9642173103638925e-05, 2.2228492525755428e-05, 1.666901880525984e-05};
    for (int c = 0; c < 2; c++) {
        double theta = c ? 10000.0 : 150000.0, lo, hi;
        gp_rope_yarn_range(64, theta, c ? 2048 : 4096, 32, 1, c, &lo, &hi);
        if (!c) { /* 64 ln(4096 / (beta 2 pi)) / (2 ln 150000), no truncation */
            CU_ASSERT_DOUBLE_EQUAL(lo, 8.092779115512402, 1e-12);
            CU_ASSERT_DOUBLE_EQUAL(hi, 17.39802450158856, 1e-12);
        } else {
            CU_ASSERT_DOUBLE_EQUAL(lo, 8, 0); /* floor(8.06) and ceil(20.1) */
            CU_ASSERT_DOUBLE_EQUAL(hi, 21, 0);
        }
        gp_attrs y = {.i = {[GP_ROPE_N_DIMS] = 64, [GP_ROPE_SCALING] = GP_ROPE_YARN},
                      .f = {[GP_ROPE_THETA] = theta, [GP_ROPE_FACTOR] = c ? 8.0 : 32.0,
                            [GP_ROPE_LOW_FACTOR] = (float)lo, [GP_ROPE_HIGH_FACTOR] = (float)hi}};
        CU_ASSERT_EQUAL(gp_rope_check_scaling(&y, why, sizeof why), 0);
        for (int j = 0; j < 32; j++) { /* transformers' float32 values: 1e-6 relative */
            double want = c ? trunc8[j] : oss[j], got = gp_rope_freq(&y, j, 64);
            CU_ASSERT(fabs(got - want) <= 1e-6 * want);
        }
        CU_ASSERT_DOUBLE_EQUAL(gp_rope_cos_factor(&y), c ? 1.2079441541679836 : 1.3465735902799727,
                               1e-7);
        y.f[GP_ROPE_HIGH_FACTOR] = y.f[GP_ROPE_LOW_FACTOR];
        CU_ASSERT_EQUAL(gp_rope_check_scaling(&y, why, sizeof why), -1);
        CU_ASSERT_PTR_NOT_NULL(strstr(why, "rope: bad yarn scaling"));
    }
    CU_ASSERT_DOUBLE_EQUAL(gp_rope_cos_factor(&lin), 1.0, 0); /* none but longrope's and yarn's */
}

static void test_attention(void)
{
    fresh();
    int q = in("q", GP_F32, 3, SYMT, 32, 128);
    int k = leaf("k", GP_TENSOR_STATE, GP_F16, 3, 2048, 8, 128);
    int v = leaf("v", GP_TENSOR_STATE, GP_F16, 3, 2048, 8, 128);
    int pos = in("pos", GP_I32, 1, SYMT, 0, 0);
    int r = node(GP_OP_ATTENTION, 4, q, k, v, pos, NULL);
    CHECK_OUT(r, GP_TENSOR_INTERMEDIATE, GP_F32);
    CU_ASSERT(shape_is(r, 3, SYMT, 32, 128));
    CU_ASSERT_DOUBLE_EQUAL(g->nodes[0].attrs.f[GP_ATTENTION_SCALE], 1.0 / sqrt(128.0), 1e-15);
    gp_attrs sc = {.f = {[GP_ATTENTION_SCALE] = 0.5}};
    node(GP_OP_ATTENTION, 4, q, k, v, pos, &sc);
    CU_ASSERT_DOUBLE_EQUAL(g->nodes[1].attrs.f[GP_ATTENTION_SCALE], 0.5, 0);

    int k6 = leaf("k6", GP_TENSOR_STATE, GP_F16, 3, 2048, 6, 128);
    int v6 = leaf("v6", GP_TENSOR_STATE, GP_F16, 3, 2048, 6, 128);
    CHECK_ERR(node(GP_OP_ATTENTION, 4, q, k6, v6, pos, NULL),
              "attention: q has 32 heads, not a multiple of k's 6");
    fresh();
    q = in("q", GP_F32, 3, SYMT, 32, 128);
    k = leaf("k", GP_TENSOR_STATE, GP_F16, 3, 2048, 8, 128);
    v = leaf("v", GP_TENSOR_STATE, GP_F16, 3, 1024, 8, 128);
    pos = in("pos", GP_I32, 1, SYMT, 0, 0);
    CHECK_ERR(node(GP_OP_ATTENTION, 4, q, k, v, pos, NULL),
              "attention: k [2048, 8, 128] and v [1024, 8, 128] differ");
    fresh();
    q = in("q", GP_F32, 3, SYMT, 32, 64);
    k = leaf("k", GP_TENSOR_STATE, GP_F16, 3, 2048, 8, 128);
    pos = in("pos", GP_I32, 1, SYMT, 0, 0);
    CHECK_ERR(node(GP_OP_ATTENTION, 4, q, k, k, pos, NULL), "attention: head dims differ");
    fresh();
    q = in("q", GP_F32, 2, SYMT, 4096, 0);
    k = leaf("k", GP_TENSOR_STATE, GP_F16, 3, 2048, 8, 128);
    pos = in("pos", GP_I32, 1, SYMT, 0, 0);
    CHECK_ERR(node(GP_OP_ATTENTION, 4, q, k, k, pos, NULL),
              "attention: q must be [T, H, D], got q [T, 4096]");
    fresh();
    q = in("q", GP_F32, 3, SYMT, 32, 128);
    k = leaf("k", GP_TENSOR_STATE, GP_F16, 3, 2048, 8, 128);
    pos = in("pos", GP_I32, 1, SYMS, 0, 0);
    CHECK_ERR(node(GP_OP_ATTENTION, 4, q, k, k, pos, NULL), "attention: pos is pos [S], expected [T]");
}

/* ---- get_rows, store, concat, cast, cont ---- */

static void test_get_rows(void)
{
    fresh();
    int tab = leaf("wte", GP_TENSOR_WEIGHT, GP_F16, 2, 50257, 768);
    int ids = in("ids", GP_I32, 1, SYMT, 0, 0);
    int r = node2(GP_OP_GET_ROWS, tab, ids);
    CHECK_OUT(r, GP_TENSOR_INTERMEDIATE, GP_F32);
    CU_ASSERT(shape_is(r, 2, SYMT, 768));
    int fids = in("fids", GP_F32, 1, SYMT, 0, 0);
    CHECK_ERR(node2(GP_OP_GET_ROWS, tab, fids), "get_rows: ids ('fids') is f32, expected i32");
    fresh();
    tab = leaf("wte", GP_TENSOR_WEIGHT, GP_F16, 3, 2, 50257, 768);
    ids = in("ids", GP_I32, 1, SYMT, 0, 0);
    CHECK_ERR(node2(GP_OP_GET_ROWS, tab, ids),
              "get_rows: table must have 2 dims, got table [2, 50257, 768]");
}

static void test_store(void)
{
    fresh();
    int dst = leaf("kc", GP_TENSOR_STATE, GP_F16, 3, 1024, 12, 64);
    int pos = in("pos", GP_I32, 1, SYMT, 0, 0);
    int src = in("k", GP_F32, 3, SYMT, 12, 64);
    int r = node(GP_OP_STORE, 3, dst, pos, src, 0, NULL);
    CHECK_OUT(r, GP_TENSOR_VIEW, GP_F16);
    CU_ASSERT(shape_is(r, 3, 1024, 12, 64));
    CU_ASSERT_EQUAL(tt(r)->view_src, dst);
    CU_ASSERT_EQUAL(tt(r)->view_offset, 0);
    CU_ASSERT(strides_are(r, 3, 768, 64, 1));
    CU_ASSERT_EQUAL(gp_tensor_nbytes(tt(r)), 1024 * 768 * 2);

    int bad = in("kb", GP_F32, 3, SYMT, 12, 32);
    CHECK_ERR(node(GP_OP_STORE, 3, dst, pos, bad, 0, NULL),
              "store: src [T, 12, 32] does not fit rows of dst [1024, 12, 64]");
    fresh();
    dst = leaf("kc", GP_TENSOR_STATE, GP_F16, 2, 1024, 768);
    pos = in("pos", GP_I32, 1, 4, 0, 0);
    src = in("k", GP_F32, 2, SYMT, 768, 0);
    CHECK_ERR(node(GP_OP_STORE, 3, dst, pos, src, 0, NULL),
              "store: pos is pos [4], expected [T] (the first dim of src)");
}

static void test_concat(void)
{
    fresh();
    int a = in("a", GP_F32, 2, SYMT, 64, 0);
    int b = in("b", GP_F16, 2, SYMT, 32, 0);
    gp_attrs ax = {.i = {[GP_CONCAT_AXIS] = 1}};
    int r = node(GP_OP_CONCAT, 2, a, b, 0, 0, &ax);
    CHECK_OUT(r, GP_TENSOR_INTERMEDIATE, GP_F32);
    CU_ASSERT(shape_is(r, 2, SYMT, 96));
    int b2 = in("b2", GP_F32, 2, SYMT, 64, 0);
    CHECK_ERR(node2(GP_OP_CONCAT, a, b2), "concat: cannot join a [T, 64] and b [T, 64] along "
                                          "symbolic dim 0");
    fresh();
    a = in("a", GP_F32, 2, 3, 64, 0);
    b = in("b", GP_F32, 2, 3, 32, 0);
    CHECK_ERR(node2(GP_OP_CONCAT, a, b),
              "concat: a [3, 64] and b [3, 32] differ in dim 1 (only axis 0 may differ)");
    fresh();
    a = in("a", GP_F32, 2, 3, 64, 0);
    gp_attrs ax5 = {.i = {[GP_CONCAT_AXIS] = 5}};
    CHECK_ERR(node(GP_OP_CONCAT, 2, a, a, 0, 0, &ax5), "concat: axis 5 out of range for 2 dims");
}

static void test_argmax(void)
{
    fresh();
    int x = in("x", GP_F16, 2, SYMT, 50257, 0);
    int r = node1(GP_OP_ARGMAX, x);
    CHECK_OUT(r, GP_TENSOR_INTERMEDIATE, GP_I32);
    CU_ASSERT(shape_is(r, 1, SYMT));
    int v = in("v", GP_F32, 1, 8, 0, 0);
    r = node1(GP_OP_ARGMAX, v);
    CHECK_OUT(r, GP_TENSOR_INTERMEDIATE, GP_I32);
    CU_ASSERT(shape_is(r, 0)); /* a scalar */
    int ids = in("ids", GP_I32, 1, SYMT, 0, 0);
    CHECK_ERR(node1(GP_OP_ARGMAX, ids), "argmax: x ('ids') is i32, expected a float tensor");
}

/* moe(x, router, gate, up, down): node of five inputs (the helper node() takes four). */
static int moe_node(int x, int r, int gt, int up, int dn, int64_t k, int64_t norm)
{
    int ins[5] = {x, r, gt, up, dn};
    gp_attrs a = {.i = {[GP_MOE_TOP_K] = k, [GP_MOE_NORM] = norm}};
    return gp_graph_add_node(g, d, GP_OP_MOE, ins, 5, &a, NULL, 0, GP_F32, NULL, here);
}

static int wt(const char *name, gp_dtype dt, int ndim, int a, int b, int c)
{
    return leaf(name, GP_TENSOR_WEIGHT, dt, ndim, a, b, c);
}

static void test_moe(void)
{
    fresh();
    int x = in("x", GP_F32, 2, SYMT, 64, 0);
    int r = wt("r", GP_F32, 2, 8, 64, 0), gt = wt("g", GP_Q4_K, 3, 8, 32, 256 - 192);
    /* a q4_k row needs 256 elements: the gate's [8, 32, 64] cannot be q4_k */
    CU_ASSERT_EQUAL(gt, -1);
    fresh();
    x = in("x", GP_F32, 2, SYMT, 256, 0);
    r = wt("r", GP_F32, 2, 8, 256, 0);
    gt = wt("g", GP_Q4_K, 3, 8, 32, 256);
    int up = wt("u", GP_Q8_0, 3, 8, 32, 256), dn = wt("d", GP_F16, 3, 8, 256, 32);
    int y = moe_node(x, r, gt, up, dn, 2, GP_MOE_SOFTMAX_NORM);
    CHECK_OUT(y, GP_TENSOR_INTERMEDIATE, GP_F32);
    CU_ASSERT(shape_is(y, 2, SYMT, 256));
    CU_ASSERT_EQUAL(g->nodes[g->n_nodes - 1].attrs.i[GP_MOE_TOP_K], 2);
    /* top_k out of 1..E, a bad norm, an unknown act */
    CHECK_ERR(moe_node(x, r, gt, up, dn, 9, 0),
              "moe: top_k 9, expected 1..8 (the experts of router [8, 256]; at most 64)");
    fresh();
    x = in("x", GP_F32, 2, SYMT, 256, 0);
    r = wt("r", GP_F32, 2, 8, 256, 0);
    gt = wt("g", GP_F32, 3, 8, 32, 256);
    up = wt("u", GP_F32, 3, 8, 32, 256);
    dn = wt("d", GP_F32, 3, 8, 256, 32);
    CHECK_ERR(moe_node(x, r, gt, up, dn, 0, 0), "moe: top_k 0, expected 1..8");
    fresh();
    x = in("x", GP_F32, 2, SYMT, 256, 0);
    r = wt("r", GP_F32, 2, 8, 256, 0);
    gt = wt("g", GP_F32, 3, 8, 32, 256);
    up = wt("u", GP_F32, 3, 8, 32, 256);
    dn = wt("d", GP_F32, 3, 8, 256, 32);
    CHECK_ERR(moe_node(x, r, gt, up, dn, 2, 7), "moe: norm 7, expected 0..2");
    /* mismatched experts: up of 7 experts, down [E, F, H] (gate's layout), the router's H */
    fresh();
    x = in("x", GP_F32, 2, SYMT, 256, 0);
    r = wt("r", GP_F32, 2, 8, 256, 0);
    gt = wt("g", GP_F32, 3, 8, 32, 256);
    up = wt("u", GP_F32, 3, 7, 32, 256);
    dn = wt("d", GP_F32, 3, 8, 256, 32);
    CHECK_ERR(moe_node(x, r, gt, up, dn, 2, 0),
              "moe: up [7, 32, 256], expected [8, 32, 256] (E, F, H: router [E, H], gate");
    fresh();
    x = in("x", GP_F32, 2, SYMT, 256, 0);
    r = wt("r", GP_F32, 2, 8, 256, 0);
    gt = wt("g", GP_F32, 3, 8, 32, 256);
    dn = wt("d", GP_F32, 3, 8, 32, 256);
    CHECK_ERR(moe_node(x, r, gt, gt, dn, 2, 0),
              "moe: down [8, 32, 256], expected [8, 256, 32] (E, H, F: each expert's [H, F]");
    fresh();
    x = in("x", GP_F32, 2, SYMT, 256, 0);
    r = wt("r", GP_F32, 2, 8, 128, 0);
    gt = wt("g", GP_F32, 3, 8, 32, 256);
    CHECK_ERR(moe_node(x, r, gt, gt, gt, 2, 0),
              "moe: router [8, 128], expected [E, 256] (E experts; H the last dim of x)");
    fresh();
    x = in("x", GP_F16, 2, SYMT, 256, 0);
    r = wt("r", GP_F32, 2, 8, 256, 0);
    CHECK_ERR(moe_node(x, r, r, r, r, 2, 0), "moe: x must be f32 [T, H], got f16 x [T, 256]");
}

static void test_cast_cont(void)
{
    fresh();
    int x = in("x", GP_F32, 2, SYMT, 64, 0);
    int ins[1] = {x};
    int r = gp_graph_add_node(g, d, GP_OP_CAST, ins, 1, NULL, NULL, 0, GP_BF16, "y", here);
    CHECK_OUT(r, GP_TENSOR_INTERMEDIATE, GP_BF16);
    CU_ASSERT(shape_is(r, 2, SYMT, 64));
    CU_ASSERT_STRING_EQUAL(tt(r)->name, "y");
    int ids = in("ids", GP_I32, 1, SYMT, 0, 0);
    ins[0] = ids;
    r = gp_graph_add_node(g, d, GP_OP_CAST, ins, 1, NULL, NULL, 0, GP_F32, NULL, here);
    CHECK_OUT(r, GP_TENSOR_INTERMEDIATE, GP_F32); /* cast reads any dtype */
    CHECK_ERR(gp_graph_add_node(g, d, GP_OP_CAST, ins, 1, NULL, NULL, 0, (gp_dtype)9, NULL, here),
              "cast: bad target dtype 9");

    fresh();
    x = in("x", GP_F16, 3, SYMT, 12, 64);
    gp_attrs perm = {.i = {[GP_PERMUTE_AXES] = 1, 0, 2}};
    int p = node(GP_OP_PERMUTE, 1, x, 0, 0, 0, &perm);
    CU_ASSERT(!gp_tensor_is_contiguous(tt(p)));
    r = node1(GP_OP_CONT, p);
    CHECK_OUT(r, GP_TENSOR_INTERMEDIATE, GP_F16);
    CU_ASSERT(shape_is(r, 3, 12, SYMT, 64));
    CU_ASSERT(strides_are(r, 3, 512 * 64, 64, 1));
    CU_ASSERT(gp_tensor_is_contiguous(tt(r)));
    CHECK_ERR(node2(GP_OP_CONT, x, x), "cont: takes 1 inputs, got 2");
}

/* ---- views ---- */

static void test_reshape(void)
{
    fresh();
    int x = in("x", GP_F32, 2, SYMT, 768, 0);
    gp_dim sh[3] = {{0, T}, {12, -1}, {64, -1}};
    int ins[1] = {x};
    int r = gp_graph_add_node(g, d, GP_OP_RESHAPE, ins, 1, NULL, sh, 3, GP_F32, "q", here);
    CHECK_OUT(r, GP_TENSOR_VIEW, GP_F32);
    CU_ASSERT(shape_is(r, 3, SYMT, 12, 64));
    CU_ASSERT_EQUAL(tt(r)->view_src, x);
    CU_ASSERT_EQUAL(tt(r)->view_offset, 0);
    CU_ASSERT(strides_are(r, 3, 768, 64, 1));
    gp_dim back[3] = {{1, -1}, {0, T}, {768, -1}};
    ins[0] = r;
    int r2 = gp_graph_add_node(g, d, GP_OP_RESHAPE, ins, 1, NULL, back, 3, GP_F32, NULL, here);
    CU_ASSERT(shape_is(r2, 3, 1, SYMT, 768));
    CU_ASSERT_EQUAL(tt(r2)->view_src, r);

    gp_dim wrong[3] = {{0, T}, {12, -1}, {32, -1}};
    ins[0] = x;
    CHECK_ERR(gp_graph_add_node(g, d, GP_OP_RESHAPE, ins, 1, NULL, wrong, 3, GP_F32, NULL, here),
              "reshape: cannot reshape x [T, 768] to [T, 12, 32] (element counts differ)");
    fresh();
    x = in("x", GP_F32, 2, SYMT, 768, 0);
    gp_dim moved[2] = {{768, -1}, {0, T}};
    ins[0] = x;
    CHECK_ERR(gp_graph_add_node(g, d, GP_OP_RESHAPE, ins, 1, NULL, moved, 2, GP_F32, NULL, here),
              "reshape: cannot reshape x [T, 768] to [768, T] (a symbolic dim moves");
    fresh();
    x = in("x", GP_F32, 2, SYMT, 768, 0);
    gp_dim other[2] = {{0, S}, {768, -1}};
    ins[0] = x;
    CHECK_ERR(gp_graph_add_node(g, d, GP_OP_RESHAPE, ins, 1, NULL, other, 2, GP_F32, NULL, here),
              "to [S, 768] (symbolic dims must appear in the same order)");
    fresh();
    x = in("x", GP_F32, 2, SYMT, 768, 0);
    gp_dim nosym[2] = {{512, -1}, {768, -1}};
    ins[0] = x;
    CHECK_ERR(gp_graph_add_node(g, d, GP_OP_RESHAPE, ins, 1, NULL, nosym, 2, GP_F32, NULL, here),
              "reshape: cannot reshape x [T, 768] to [512, 768]");
    fresh();
    x = in("x", GP_F32, 2, 4, 6, 0);
    gp_attrs perm = {.i = {[GP_PERMUTE_AXES] = 1, 0}};
    int p = node(GP_OP_PERMUTE, 1, x, 0, 0, 0, &perm);
    gp_dim flat[1] = {{24, -1}};
    ins[0] = p;
    CHECK_ERR(gp_graph_add_node(g, d, GP_OP_RESHAPE, ins, 1, NULL, flat, 1, GP_F32, NULL, here),
              "is not contiguous");
    fresh();
    x = in("x", GP_F32, 2, 4, 6, 0);
    gp_dim neg[2] = {{-4, -1}, {-6, -1}};
    ins[0] = x;
    CHECK_ERR(gp_graph_add_node(g, d, GP_OP_RESHAPE, ins, 1, NULL, neg, 2, GP_F32, NULL, here),
              "reshape: target shape: dim 0 has size -4");
}

static void test_permute(void)
{
    fresh();
    int x = leaf("x", GP_TENSOR_INPUT, GP_F32, 4, 2, SYMT, 12, 64);
    gp_attrs perm = {.i = {[GP_PERMUTE_AXES] = 0, 2, 1, 3}};
    int r = node(GP_OP_PERMUTE, 1, x, 0, 0, 0, &perm);
    CHECK_OUT(r, GP_TENSOR_VIEW, GP_F32);
    CU_ASSERT(shape_is(r, 4, 2, 12, SYMT, 64));
    CU_ASSERT(strides_are(r, 4, 512 * 768, 64, 768, 1));
    CU_ASSERT_EQUAL(tt(r)->view_src, x);
    CU_ASSERT_EQUAL(tt(r)->view_offset, 0);
    CU_ASSERT_EQUAL(gp_tensor_nbytes(tt(r)), 2 * 512 * 768 * 4);
    gp_attrs dup = {.i = {[GP_PERMUTE_AXES] = 0, 2, 2, 3}};
    CHECK_ERR(node(GP_OP_PERMUTE, 1, x, 0, 0, 0, &dup),
              "permute: axes (0, 2, 2, 3) are not a permutation of 0..3 for x [2, T, 12, 64]");
}

static void test_slice(void)
{
    fresh();
    int x = in("x", GP_F16, 2, SYMT, 2304, 0);
    gp_attrs a = {.i = {[GP_SLICE_AXIS] = 1, [GP_SLICE_START] = 768, [GP_SLICE_LEN] = 768}};
    int r = node(GP_OP_SLICE, 1, x, 0, 0, 0, &a);
    CHECK_OUT(r, GP_TENSOR_VIEW, GP_F16);
    CU_ASSERT(shape_is(r, 2, SYMT, 768));
    CU_ASSERT(strides_are(r, 2, 2304, 1));
    CU_ASSERT_EQUAL(tt(r)->view_src, x);
    CU_ASSERT_EQUAL(tt(r)->view_offset, 768 * 2);
    CU_ASSERT(!gp_tensor_is_contiguous(tt(r)));
    CU_ASSERT_EQUAL(gp_tensor_nbytes(tt(r)), ((511LL * 2304 + 767) + 1) * 2);
    /* a slice of a slice: the offset is relative to its own source */
    gp_attrs a2 = {.i = {[GP_SLICE_AXIS] = 1, [GP_SLICE_START] = 64, [GP_SLICE_LEN] = 64}};
    int r2 = node(GP_OP_SLICE, 1, r, 0, 0, 0, &a2);
    CU_ASSERT_EQUAL(tt(r2)->view_src, r);
    CU_ASSERT_EQUAL(tt(r2)->view_offset, 64 * 2);

    gp_attrs over = {.i = {[GP_SLICE_AXIS] = 1, [GP_SLICE_START] = 2000, [GP_SLICE_LEN] = 768}};
    CHECK_ERR(node(GP_OP_SLICE, 1, x, 0, 0, 0, &over),
              "slice: [2000, 2768) is outside dim 1 of x [T, 2304] (size 2304)");
    fresh();
    x = in("x", GP_F16, 2, SYMT, 2304, 0);
    gp_attrs sym = {.i = {[GP_SLICE_LEN] = 1}};
    CHECK_ERR(node(GP_OP_SLICE, 1, x, 0, 0, 0, &sym), "slice: cannot slice symbolic dim 0");
    fresh();
    x = in("x", GP_F16, 2, SYMT, 2304, 0);
    gp_attrs ax = {.i = {[GP_SLICE_AXIS] = 2, [GP_SLICE_LEN] = 1}};
    CHECK_ERR(node(GP_OP_SLICE, 1, x, 0, 0, 0, &ax), "slice: axis 2 out of range");
}

static void test_view(void)
{
    fresh();
    int x = in("x", GP_F32, 2, 16, 64, 0);
    gp_attrs off = {.i = {[GP_VIEW_OFFSET] = 256 * 4}};
    gp_dim sh[2] = {{4, -1}, {128, -1}};
    int ins[1] = {x};
    int r = gp_graph_add_node(g, d, GP_OP_VIEW, ins, 1, &off, sh, 2, GP_F32, NULL, here);
    CHECK_OUT(r, GP_TENSOR_VIEW, GP_F32);
    CU_ASSERT(shape_is(r, 2, 4, 128));
    CU_ASSERT(strides_are(r, 2, 128, 1));
    CU_ASSERT_EQUAL(tt(r)->view_src, x);
    CU_ASSERT_EQUAL(tt(r)->view_offset, 1024);
    CU_ASSERT_EQUAL(gp_tensor_nbytes(tt(r)), 4 * 128 * 4);

    gp_attrs far = {.i = {[GP_VIEW_OFFSET] = (16 * 64 - 511) * 4}};
    CHECK_ERR(gp_graph_add_node(g, d, GP_OP_VIEW, ins, 1, &far, sh, 2, GP_F32, NULL, here),
              "view: [4, 128] at byte offset 2052 (2048 bytes) does not fit in x [16, 64] "
              "(4096 bytes)");
    fresh();
    x = in("x", GP_F32, 2, 16, 64, 0);
    gp_attrs odd = {.i = {[GP_VIEW_OFFSET] = 3}};
    ins[0] = x;
    CHECK_ERR(gp_graph_add_node(g, d, GP_OP_VIEW, ins, 1, &odd, sh, 2, GP_F32, NULL, here),
              "view: offset 3 is not a multiple of the 4-byte element size");
}

/* ---- graph outputs ---- */

static void test_make_output(void)
{
    fresh();
    int x = in("x", GP_F32, 2, SYMT, 768, 0);
    int w = in("w", GP_F32, 2, 768, 100, 0);
    int ins[2] = {x, w};
    int h = gp_graph_add_node(g, d, GP_OP_MATMUL, ins, 2, NULL, NULL, 0, GP_F32, "logits", here);
    int nn = g->n_nodes, nt = g->n_tensors;
    gp_dim sh[2] = {{0, T}, {100, -1}};
    /* same dtype and shape: the intermediate becomes the output, no copy */
    int o = gp_graph_make_output(g, d, h, "logits", GP_F32, 2, sh, here);
    CU_ASSERT_EQUAL(o, h);
    CU_ASSERT_EQUAL(tt(o)->kind, GP_TENSOR_OUTPUT);
    CU_ASSERT_EQUAL(g->n_nodes, nn);
    CU_ASSERT_EQUAL(g->n_tensors, nt);
    CU_ASSERT_EQUAL(gp_diag_count(d), 0);

    /* other dtype: a cast named like the output */
    int o2 = gp_graph_make_output(g, d, h, "logits16", GP_F16, 2, sh, here);
    CU_ASSERT(o2 >= 0 && o2 != h);
    CU_ASSERT_EQUAL(tt(o2)->kind, GP_TENSOR_OUTPUT);
    CU_ASSERT_EQUAL(tt(o2)->dtype, GP_F16);
    CU_ASSERT_STRING_EQUAL(tt(o2)->name, "logits16");
    CU_ASSERT_EQUAL(g->nodes[g->n_nodes - 1].op, GP_OP_CAST);

    /* a view (the value is named like the output): a cont copy takes the name */
    gp_attrs sl = {.i = {[GP_SLICE_AXIS] = 1, [GP_SLICE_LEN] = 10}};
    int v = gp_graph_add_node(g, d, GP_OP_SLICE, &h, 1, &sl, NULL, 0, GP_F32, "top", here);
    gp_dim sh10[2] = {{0, T}, {10, -1}};
    int o3 = gp_graph_make_output(g, d, v, "top", GP_F32, 2, sh10, here);
    CU_ASSERT(o3 >= 0 && o3 != v);
    CU_ASSERT_EQUAL(g->nodes[g->n_nodes - 1].op, GP_OP_CONT);
    CU_ASSERT_EQUAL(g->nodes[g->n_nodes - 1].inputs[0], v);
    CU_ASSERT_STRING_EQUAL(tt(o3)->name, "top");
    CU_ASSERT_STRING_EQUAL(tt(v)->name, "top.1");
    CU_ASSERT_EQUAL(tt(o3)->kind, GP_TENSOR_OUTPUT);
    CU_ASSERT(shape_is(o3, 2, SYMT, 10));

    /* an input: copied */
    int o4 = gp_graph_make_output(g, d, x, "echo", GP_F32, 2, (gp_dim[]){{0, T}, {768, -1}}, here);
    CU_ASSERT(o4 >= 0 && o4 != x);
    CU_ASSERT_EQUAL(tt(x)->kind, GP_TENSOR_INPUT);
    CU_ASSERT_EQUAL(gp_diag_count(d), 0);

    CHECK_ERR(gp_graph_make_output(g, d, h, "bad", GP_F32, 2, sh10, here),
              "output 'bad': shape mismatch: expected [T, 10], value 'logits' is [T, 100]");
    fresh();
    x = in("x", GP_F32, 1, 4, 0, 0);
    CHECK_ERR(gp_graph_make_output(g, d, x, "x", GP_F32, 1, (gp_dim[]){{4, -1}}, here),
              "output 'x': the name is already used by input 'x'");
}

/* ---- the attribute table ---- */

/* gp_attrs_print's text for op and a. */
static char *attrs_text(gp_op op, const gp_attrs *a, int out_ndim)
{
    static char buf[512];
    FILE *f = tmpfile();
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    gp_attrs_print(op, a, out_ndim, f);
    rewind(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static void test_attr_table(void)
{
    int n_all, seen = 0;
    const gp_attr_info *all = gp_attr_table(&n_all);
    CU_ASSERT_FATAL(n_all > 0);
    for (int op = 0; op < GP_OP_COUNT; op++) {
        int n;
        const gp_attr_info *e = gp_op_attrs((gp_op)op, &n);
        seen += n; /* every entry counted once: an op's entries are consecutive */
        int used[2][GP_MAX_IATTRS > GP_MAX_FATTRS ? GP_MAX_IATTRS : GP_MAX_FATTRS] = {{0}};
        for (int k = 0; k < n; k++) {
            CU_ASSERT_EQUAL(e[k].op, op);
            CU_ASSERT(e[k].kind == GP_ATTR_I || e[k].kind == GP_ATTR_F);
            int cap = e[k].kind == GP_ATTR_I ? GP_MAX_IATTRS : GP_MAX_FATTRS;
            CU_ASSERT_EQUAL(e[k].len, e[k].show == GP_ATTR_DIMS ? GP_MAX_DIMS : 1);
            CU_ASSERT(e[k].show != GP_ATTR_DIMS || e[k].kind == GP_ATTR_I);
            CU_ASSERT_FATAL(e[k].slot >= 0 && e[k].slot + e[k].len <= cap); /* fits the array */
            for (int s = e[k].slot; s < e[k].slot + e[k].len; s++)
                CU_ASSERT_EQUAL(used[e[k].kind][s]++, 0); /* no slot holds two attributes */
            CU_ASSERT(e[k].name && strlen(e[k].name) > 0 &&
                      strspn(e[k].name, "abcdefghijklmnopqrstuvwxyz_") == strlen(e[k].name));
            for (int j = 0; j < k; j++)
                CU_ASSERT(strcmp(e[j].name, e[k].name) != 0); /* names unique per op */
        }
        /* f[2] and f[3] are stored in i[3]'s place in a plan (core.h, gp_attrs) */
        if (gp_op_attr_slots((gp_op)op, GP_ATTR_F) > 2)
            CU_ASSERT(gp_op_attr_slots((gp_op)op, GP_ATTR_I) < GP_MAX_IATTRS);
    }
    CU_ASSERT_EQUAL(seen, n_all);
    CU_ASSERT(all[0].op > GP_OP_NONE);

    int n = -1;
    CU_ASSERT_PTR_NULL(gp_op_attrs(GP_OP_GELU, &n));
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_PTR_NULL(gp_op_attrs(GP_OP_COUNT, &n));
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_EQUAL(gp_op_attr_slots(GP_OP_ROPE, GP_ATTR_I), 3);
    CU_ASSERT_EQUAL(gp_op_attr_slots(GP_OP_ROPE, GP_ATTR_F), 4);
    CU_ASSERT_EQUAL(gp_op_attr_slots(GP_OP_PERMUTE, GP_ATTR_I), GP_MAX_DIMS);
    CU_ASSERT_EQUAL(gp_op_attr_slots(GP_OP_ADD, GP_ATTR_F), 0);
    CU_ASSERT_EQUAL(GP_ROPE_SCALING, 2);
    CU_ASSERT_EQUAL(GP_ROPE_HIGH_FACTOR, 3);
    CU_ASSERT_EQUAL(GP_ATTENTION_RING, 1);

    /* The printer shows the named attributes, ALWAYS ones always and NONZERO ones when set. */
    gp_attrs r = {.i = {[GP_ROPE_MODE] = 1, [GP_ROPE_N_DIMS] = 64, [GP_ROPE_SCALING] = 8192},
                  .f = {[GP_ROPE_THETA] = 500000, [GP_ROPE_FACTOR] = 8,
                        [GP_ROPE_LOW_FACTOR] = 1, [GP_ROPE_HIGH_FACTOR] = 4}};
    CU_ASSERT_STRING_EQUAL(attrs_text(GP_OP_ROPE, &r, 3),
                           " mode=1 n=64 theta=500000 scaling=8192 factor=8 low=1 high=4");
    gp_attrs plain = {.i = {[GP_ROPE_N_DIMS] = 16}, .f = {[GP_ROPE_THETA] = 10000}};
    CU_ASSERT_STRING_EQUAL(attrs_text(GP_OP_ROPE, &plain, 3), " mode=0 n=16 theta=10000");
    gp_attrs at = {.i = {[GP_ATTENTION_WINDOW] = 4096, [GP_ATTENTION_RING] = 1},
                   .f = {[GP_ATTENTION_SCALE] = 0.125, [GP_ATTENTION_SOFTCAP] = 50}};
    CU_ASSERT_STRING_EQUAL(attrs_text(GP_OP_ATTENTION, &at, 3),
                           " scale=0.125 window=4096 ring=1 softcap=50");
    gp_attrs perm = {.i = {[GP_PERMUTE_AXES] = 1, 0, 2}};
    CU_ASSERT_STRING_EQUAL(attrs_text(GP_OP_PERMUTE, &perm, 3), " axes=(1, 0, 2)");
    gp_attrs sm = {.i = {[GP_SOFTMAX_CAUSAL] = 1}, .f = {[GP_SOFTMAX_SCALE] = 1}};
    CU_ASSERT_STRING_EQUAL(attrs_text(GP_OP_SOFTMAX, &sm, 2), " scale=1 causal=1");
    CU_ASSERT_STRING_EQUAL(attrs_text(GP_OP_ADD, &sm, 2), "");
    CU_ASSERT_STRING_EQUAL(attrs_text(GP_OP_COUNT, &sm, 2), "");
}

/* ---- printer ---- */

static void test_print(void)
{
    fresh();
    gp_diag *dg = gp_diag_new(NULL);
    const char *f = gp_diag_add_source(dg, "m.gplan", "", 0);
    gp_dim sh[2] = {{0, T}, {768, -1}};
    int x = gp_graph_add_tensor(g, d, "x", GP_TENSOR_INPUT, GP_F32, 2, sh, NULL, here);
    gp_dim wsh[2] = {{2304, -1}, {768, -1}};
    int w = gp_graph_add_tensor(g, d, "w", GP_TENSOR_WEIGHT, GP_F16, 2, wsh, "h.0.attn.w", here);
    gp_attrs tb = {.i = {[GP_MATMUL_TB] = 1}};
    int ins[2] = {x, w};
    int m = gp_graph_add_node(g, d, GP_OP_MATMUL, ins, 2, &tb, NULL, 0, GP_F32, "qkv",
                              (gp_loc){f, 12, 5});
    gp_attrs sl = {.i = {[GP_SLICE_AXIS] = 1, [GP_SLICE_START] = 768, [GP_SLICE_LEN] = 768}};
    gp_graph_add_node(g, d, GP_OP_SLICE, &m, 1, &sl, NULL, 0, GP_F32, "k", here);
    CU_ASSERT_EQUAL(gp_diag_count(d), 0);

    const char *path = gp_test_tmpfile(".ir");
    FILE *fp = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    gp_graph_print(g, fp);
    fclose(fp);
    char *text = gp_test_read_file(path, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    CU_ASSERT_STRING_EQUAL(text, "graph test\n"
                                 "sym T <= 512\n"
                                 "sym S <= 1024\n"
                                 "tensor %0 x: input f32 [T, 768]\n"
                                 "tensor %1 w: weight f16 [2304, 768] = \"h.0.attn.w\"\n"
                                 "tensor %2 qkv: intermediate f32 [T, 2304]\n"
                                 "tensor %3 k: view f32 [T, 768] of %2 +3072 stride [2304, 1]\n"
                                 "%2 = matmul(%0, %1) tb=1 -> [T, 2304] f32   # m.gplan:12\n"
                                 "%3 = slice(%2) axis=1 start=768 len=768 -> [T, 768] f32\n");
    free(text);
    remove(path);
    gp_diag_free(dg);
    gp_graph_print(NULL, stdout); /* no-op */
    gp_graph_free(NULL);
}

void gp_suite_ir(void)
{
    static const gp_test_case tests[] = {
        {"core tables", test_core_tables},
        {"attribute table", test_attr_table},
        {"diag format", test_diag_format},
        {"diag copies and prints", test_diag_copies_and_prints},
        {"diag limit", test_diag_limit},
        {"add tensor", test_add_tensor},
        {"names", test_names},
        {"binary broadcast", test_binary_broadcast},
        {"unary", test_unary},
        {"swiglu", test_swiglu},
        {"matmul", test_matmul},
        {"norms", test_norms},
        {"softmax", test_softmax},
        {"argmax", test_argmax},
        {"moe: shapes, top_k, norm, mismatched experts", test_moe},
        {"rope", test_rope},
        {"attention", test_attention},
        {"get_rows", test_get_rows},
        {"store", test_store},
        {"concat", test_concat},
        {"cast and cont", test_cast_cont},
        {"reshape", test_reshape},
        {"permute", test_permute},
        {"slice", test_slice},
        {"view", test_view},
        {"make_output", test_make_output},
        {"print", test_print},
    };
    gp_test_add_suite("ir", NULL, suite_clean, tests, GP_TEST_COUNT(tests));
}
