/* Tests of the CPU kernels (every op against a double-precision reference, on odd, strided,
 * broadcast, half-precision and in-place cases, bit-identical over thread counts), the half
 * conversions (exhaustive) and the thread pool. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <CUnit/CUnit.h>

#include "cpu/cpu_dot.h"
#include "cpu/cpu_internal.h"
#include "cpu/cpu_kernels.h"
#include "ir/f16.h"
#include "cpu/threadpool.h"
#include "tests/testutil.h"

/* ---- test tensors ---- */

typedef struct {
    gp_ktensor k;
    void *buf;   /* the allocation; k.data points into it */
    size_t size; /* bytes of buf */
} tt;

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static int64_t irand(int64_t n) /* [0, n) */
{
    return (int64_t)(gp_test_rand(&rng) % (uint64_t)n);
}

/* A tensor of shape ne. layout 0: contiguous; 1: dims stored in a random order with 1-2 elements
 * of padding each (every stride is "odd"); 2: as 1 but the last dim kept innermost. */
static tt *tt_new(gp_dtype t, int ndim, const int64_t *ne, int layout)
{
    tt *x = calloc(1, sizeof *x);
    int order[GP_MAX_DIMS]; /* storage order, outermost first */
    int64_t ext[GP_MAX_DIMS];
    for (int d = 0; d < ndim; d++) {
        order[d] = d;
        ext[d] = ne[d] + (layout ? 1 + irand(2) : 0);
    }
    if (layout) {
        for (int d = ndim - (layout == 2 ? 2 : 1); d > 0; d--) {
            int j = (int)irand(d + 1), s = order[d];
            order[d] = order[j];
            order[j] = s;
        }
    }
    int64_t es = (int64_t)gp_dtype_size(t), stride = es;
    for (int i = ndim - 1; i >= 0; i--) {
        x->k.nb[order[i]] = stride;
        stride *= ext[order[i]];
    }
    x->size = (size_t)stride + 16;
    x->buf = malloc(x->size);
    memset(x->buf, 0x5a, x->size);
    x->k.data = x->buf;
    x->k.dtype = t;
    x->k.ndim = ndim;
    for (int d = 0; d < ndim; d++)
        x->k.ne[d] = ne[d];
    return x;
}

static void tt_free(tt *x)
{
    if (x) {
        free(x->buf);
        free(x);
    }
}

static int64_t tt_count(const tt *x)
{
    int64_t n = 1;
    for (int d = 0; d < x->k.ndim; d++)
        n *= x->k.ne[d];
    return n;
}

/* idx[0..ndim) of flat row-major element i. */
static void unravel(int64_t i, int ndim, const int64_t *ne, int64_t *idx)
{
    for (int d = ndim - 1; d >= 0; d--) {
        idx[d] = i % ne[d];
        i /= ne[d];
    }
}

static char *tt_ptr(const tt *x, const int64_t *idx)
{
    char *p = x->k.data;
    for (int d = 0; d < x->k.ndim; d++)
        p += idx[d] * x->k.nb[d];
    return p;
}

/* binary16 decoded independently of f16.h. */
static double ref_f16(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return h & 0x8000 ? -v : v;
}

static double ref_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static double tt_get(const tt *x, const int64_t *idx)
{
    const char *p = tt_ptr(x, idx);
    float f;
    uint16_t h;
    int32_t i;
    switch (x->k.dtype) {
    case GP_F32: memcpy(&f, p, 4); return f;
    case GP_F16: memcpy(&h, p, 2); return ref_f16(h);
    case GP_BF16: memcpy(&h, p, 2); return ref_bf16(h);
    default: memcpy(&i, p, 4); return i;
    }
}

static void tt_set(tt *x, const int64_t *idx, double v)
{
    char *p = tt_ptr(x, idx);
    float f = (float)v;
    uint16_t h;
    int32_t i = (int32_t)v;
    switch (x->k.dtype) {
    case GP_F32: memcpy(p, &f, 4); break;
    case GP_F16: h = gp_f32_to_f16(f); memcpy(p, &h, 2); break;
    case GP_BF16: h = gp_f32_to_bf16(f); memcpy(p, &h, 2); break;
    default: memcpy(p, &i, 4); break;
    }
}

/* Element i in row-major order of the logical shape. */
static double tt_geti(const tt *x, int64_t i)
{
    int64_t idx[GP_MAX_DIMS];
    unravel(i, x->k.ndim, x->k.ne, idx);
    return tt_get(x, idx);
}

/* Random values in +-[lo, hi]: never zero. */
static tt *tt_rand(gp_dtype t, int ndim, const int64_t *ne, int layout, double lo, double hi)
{
    tt *x = tt_new(t, ndim, ne, layout);
    int64_t idx[GP_MAX_DIMS];
    for (int64_t i = 0; i < tt_count(x); i++) {
        unravel(i, ndim, ne, idx);
        float v;
        gp_test_uniform(&v, 1, (float)lo, (float)hi, &rng);
        tt_set(x, idx, gp_test_rand(&rng) & 1 ? v : -v);
    }
    return x;
}

static tt *tt_ids(int64_t n, int64_t bound) /* i32 [n] in [0, bound), a strided vector */
{
    int64_t ne[1] = {n};
    tt *x = tt_new(GP_I32, 1, ne, 1);
    for (int64_t i = 0; i < n; i++)
        tt_set(x, &i, (double)irand(bound));
    return x;
}

static tt *tt_dims(gp_dtype t, int layout, int ndim, int64_t d0, int64_t d1, int64_t d2, int64_t d3)
{
    int64_t ne[4] = {d0, d1, d2, d3};
    return tt_rand(t, ndim, ne, layout, 0.1, 1.0);
}

/* ---- running a node ---- */

typedef struct {
    const char *name;
    gp_op op;
    gp_attrs at;
    tt *in[GP_MAX_INPUTS];
    int n_in;
    tt *out;      /* may be one of in[] (in place, store) */
    double tol;   /* on ||out - ref|| / ||ref|| */
} kcase;

static void run_node(kcase *c, int nth)
{
    gp_ktensor in[GP_MAX_INPUTS];
    for (int i = 0; i < c->n_in; i++)
        in[i] = c->in[i]->k;
    size_t ws_size = gp_cpu_workspace_bytes(c->op, &c->at, &c->out->k, in, c->n_in, nth);
    void *ws = ws_size ? malloc(ws_size) : NULL;
    /* Calls in reverse order: a share must not depend on another having run. */
    for (int ith = nth - 1; ith >= 0; ith--)
        gp_cpu_compute(c->op, &c->at, &c->out->k, in, c->n_in, ws, ws_size, ith, nth);
    free(ws);
}

/* Runs c with 1..4 threads from the same inputs; checks each result against ref (row-major over
 * out's shape) and that all are the same bytes. Frees the case's tensors. */
static void check_case(kcase *c, const double *ref)
{
    char err[256];
    gp_ktensor in[GP_MAX_INPUTS];
    for (int i = 0; i < c->n_in; i++)
        in[i] = c->in[i]->k;
    int rc = gp_cpu_check(c->op, &c->at, &c->out->k, in, c->n_in, err, sizeof err);
    if (rc != 0)
        fprintf(stderr, "\n%s: gp_cpu_check: %s\n", c->name, err);
    CU_ASSERT_EQUAL(rc, 0);

    void *saved[GP_MAX_INPUTS], *first = NULL;
    for (int i = 0; i < c->n_in; i++) {
        saved[i] = malloc(c->in[i]->size);
        memcpy(saved[i], c->in[i]->buf, c->in[i]->size);
    }
    int64_t n = tt_count(c->out);
    for (int nth = 1; nth <= 4; nth++) {
        for (int i = 0; i < c->n_in; i++)
            memcpy(c->in[i]->buf, saved[i], c->in[i]->size);
        int aliased = 0;
        for (int i = 0; i < c->n_in; i++)
            aliased |= c->out == c->in[i];
        if (!aliased)
            memset(c->out->buf, 0xff, c->out->size); /* NaNs where nothing was written */
        run_node(c, nth);
        double e2 = 0, r2 = 0;
        for (int64_t i = 0; i < n; i++) {
            double o = tt_geti(c->out, i);
            e2 += (o - ref[i]) * (o - ref[i]);
            r2 += ref[i] * ref[i];
        }
        double rel = sqrt(e2 / (r2 > 0 ? r2 : 1));
        if (!(rel <= c->tol))
            fprintf(stderr, "\n%s (nth %d): relative error %g > %g\n", c->name, nth, rel, c->tol);
        CU_ASSERT(rel <= c->tol);
        if (nth == 1) {
            first = malloc(c->out->size);
            memcpy(first, c->out->buf, c->out->size);
        } else {
            int same = memcmp(first, c->out->buf, c->out->size) == 0;
            if (!same)
                fprintf(stderr, "\n%s: nth %d differs from nth 1\n", c->name, nth);
            CU_ASSERT(same);
        }
    }
    free(first);
    for (int i = 0; i < c->n_in; i++) {
        free(saved[i]);
        if (c->in[i] != c->out)
            tt_free(c->in[i]);
    }
    tt_free(c->out);
}

/* Tolerance for results stored as dtype t (its rounding) plus the f32 math's `base`. */
static double tol_for(gp_dtype t, double base)
{
    return base + (t == GP_F16 ? 1e-3 : t == GP_BF16 ? 8e-3 : 0);
}

/* Index of out element idx (out rank nd) in a tensor x broadcast to it (right-aligned). */
static void bcast_idx(const tt *x, int nd, const int64_t *idx, int64_t *xi)
{
    for (int d = 0; d < x->k.ndim; d++) {
        int od = d + nd - x->k.ndim;
        xi[d] = x->k.ne[d] == 1 ? 0 : idx[od];
    }
}

/* ---- elementwise ---- */

static double ref_unary(gp_op op, double x, double s)
{
    switch (op) {
    case GP_OP_SCALE: return x * s;
    case GP_OP_GELU: return 0.5 * x * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
    case GP_OP_GELU_ERF: return 0.5 * x * (1 + erf(x / sqrt(2)));
    default: return x / (1 + exp(-x)); /* silu */
    }
}

static double ref_binary(gp_op op, double a, double b)
{
    switch (op) {
    case GP_OP_ADD: return a + b;
    case GP_OP_SUB: return a - b;
    case GP_OP_MUL: return a * b;
    case GP_OP_DIV: return a / b;
    default: return a / (1 + exp(-a)) * b; /* swiglu */
    }
}

/* out = op(a, b) with broadcasting; out takes a's place when inplace. */
static void case_binary(gp_op op, tt *a, tt *b, gp_dtype odt, int inplace, const char *name)
{
    int nd = a->k.ndim > b->k.ndim ? a->k.ndim : b->k.ndim;
    int64_t ne[GP_MAX_DIMS];
    for (int d = 0; d < nd; d++) {
        int da = d - (nd - a->k.ndim), db = d - (nd - b->k.ndim);
        int64_t ea = da >= 0 ? a->k.ne[da] : 1, eb = db >= 0 ? b->k.ne[db] : 1;
        ne[d] = ea == 1 ? eb : ea;
    }
    kcase c = {.name = name, .op = op, .in = {a, b}, .n_in = 2};
    c.out = inplace ? a : tt_new(odt, nd, ne, 0);
    c.tol = tol_for(c.out->k.dtype, 1e-6);
    int64_t n = tt_count(c.out), idx[4], ia[4], ib[4];
    double *ref = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        unravel(i, nd, ne, idx);
        bcast_idx(a, nd, idx, ia);
        bcast_idx(b, nd, idx, ib);
        ref[i] = ref_binary(op, tt_get(a, ia), tt_get(b, ib));
    }
    check_case(&c, ref);
    free(ref);
}

static void test_binary(void)
{
    const gp_op ops[] = {GP_OP_ADD, GP_OP_SUB, GP_OP_MUL, GP_OP_DIV};
    for (int o = 0; o < 4; o++) {
        gp_op op = ops[o];
        case_binary(op, tt_dims(GP_F32, 0, 3, 3, 17, 67, 0), tt_dims(GP_F32, 0, 1, 67, 0, 0, 0),
                    GP_F32, 0, "binary [3,17,67] x [67]");
        case_binary(op, tt_dims(GP_F32, 1, 3, 3, 1, 67, 0), tt_dims(GP_F16, 1, 2, 17, 1, 0, 0),
                    GP_F32, 0, "binary strided [3,1,67] x f16 [17,1]");
        case_binary(op, tt_dims(GP_BF16, 0, 1, 130, 0, 0, 0), tt_dims(GP_F32, 0, 1, 1, 0, 0, 0),
                    GP_BF16, 0, "binary bf16 [130] x [1]");
        case_binary(op, tt_dims(GP_F32, 1, 4, 2, 3, 17, 5), tt_dims(GP_F32, 1, 3, 3, 1, 5, 0),
                    GP_F32, 1, "binary in place strided [2,3,17,5] x [3,1,5]");
        case_binary(op, tt_dims(GP_F16, 0, 2, 1, 3, 0, 0), tt_dims(GP_F32, 0, 2, 67, 1, 0, 0),
                    GP_F16, 0, "binary f16 [1,3] x [67,1]");
        case_binary(op, tt_dims(GP_F32, 0, 2, 67, 130, 0, 0), tt_dims(GP_F32, 2, 2, 67, 130, 0, 0),
                    GP_F32, 1, "binary in place [67,130]");
        case_binary(op, tt_dims(GP_F32, 1, 2, 17, 1, 0, 0), tt_dims(GP_F16, 1, 2, 1, 67, 0, 0),
                    GP_F32, 0, "binary strided [17,1] x [1,67]");
    }
    case_binary(GP_OP_SWIGLU, tt_dims(GP_F32, 1, 2, 17, 67, 0, 0),
                tt_dims(GP_F16, 1, 2, 17, 67, 0, 0), GP_F32, 0, "swiglu strided, f16 up");
    case_binary(GP_OP_SWIGLU, tt_dims(GP_F32, 0, 3, 3, 5, 130, 0), tt_dims(GP_F32, 0, 3, 3, 5, 130, 0),
                GP_F32, 1, "swiglu in place");
    case_binary(GP_OP_SWIGLU, tt_dims(GP_BF16, 0, 1, 1, 0, 0, 0), tt_dims(GP_BF16, 0, 1, 1, 0, 0, 0),
                GP_BF16, 0, "swiglu bf16 [1]");
}

static void case_unary(gp_op op, double s, tt *x, gp_dtype odt, int inplace, const char *name)
{
    kcase c = {.name = name, .op = op, .in = {x}, .n_in = 1};
    c.at.f[GP_SCALE_FACTOR] = s;
    c.out = inplace ? x : tt_new(odt, x->k.ndim, x->k.ne, 0);
    /* exp(u) in f32 carries u's rounding: a few ulps for |u| ~ 20. */
    c.tol = tol_for(c.out->k.dtype, op == GP_OP_SCALE ? 2e-7 : 5e-6);
    int64_t n = tt_count(x);
    double *ref = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        ref[i] = ref_unary(op, tt_geti(x, i), s);
    check_case(&c, ref);
    free(ref);
}

/* scale's soft-capping (softcap = cap): cap tanh(x s / cap). */
static void case_softcap(double s, double cap, tt *x, gp_dtype odt, const char *name)
{
    kcase c = {.name = name, .op = GP_OP_SCALE, .in = {x}, .n_in = 1};
    c.at.f[GP_SCALE_FACTOR] = s;
    c.at.f[GP_SCALE_SOFTCAP] = cap;
    c.out = tt_new(odt, x->k.ndim, x->k.ne, 0);
    c.tol = tol_for(odt, 1e-6);
    int64_t n = tt_count(x);
    double *ref = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        ref[i] = cap * tanh(tt_geti(x, i) * s / cap);
    check_case(&c, ref);
    free(ref);
}

static void test_unary(void)
{
    case_softcap(1.0, 1.5, tt_rand(GP_F32, 2, (int64_t[]){17, 67}, 0, 0.1, 4), GP_F32,
                 "softcap 1.5 [17,67]");
    case_softcap(3.0, 30.0, tt_rand(GP_F16, 2, (int64_t[]){5, 9}, 1, 0.1, 4), GP_F16,
                 "scale 3 softcap 30 f16");
    const gp_op ops[] = {GP_OP_SCALE, GP_OP_GELU, GP_OP_GELU_ERF, GP_OP_SILU};
    for (int o = 0; o < 4; o++) {
        gp_op op = ops[o];
        case_unary(op, 0.37, tt_rand(GP_F32, 2, (int64_t[]){17, 67}, 0, 0.1, 4), GP_F32, 0,
                   "unary [17,67]");
        case_unary(op, -1.5, tt_rand(GP_F32, 3, (int64_t[]){3, 5, 130}, 1, 0.1, 4), GP_F32, 0,
                   "unary permuted [3,5,130]");
        case_unary(op, 2.0, tt_rand(GP_F16, 2, (int64_t[]){67, 3}, 1, 0.1, 4), GP_F16, 1,
                   "unary f16 in place strided");
        case_unary(op, 0.5, tt_rand(GP_BF16, 1, (int64_t[]){1}, 0, 0.1, 4), GP_F32, 0,
                   "unary bf16 [1] -> f32");
        case_unary(op, 3.0, tt_rand(GP_F32, 4, (int64_t[]){2, 3, 1, 17}, 0, 0.1, 4), GP_F32, 1,
                   "unary in place [2,3,1,17]");
        /* One element at a time: no large value hides a poor result for a small one. */
        for (int i = 0; i < 20; i++)
            case_unary(op, 0.5, tt_rand(GP_F32, 1, (int64_t[]){1}, 0, 0.1, 6), GP_F32, 0,
                       "unary one element");
    }
}

/* ---- matmul ---- */

static void case_matmul(int64_t M, int64_t K, int64_t N, int ta, int tb, gp_dtype at, gp_dtype bt,
                        int layout, int nda, const int64_t *ba, int ndb, const int64_t *bb,
                        const char *name)
{
    /* a [ba..., M, K] (or [.., K, M]), b [bb..., K, N] (or [.., N, K]). */
    int64_t nea[4], neb[4];
    for (int d = 0; d < nda - 2; d++)
        nea[d] = ba[d];
    for (int d = 0; d < ndb - 2; d++)
        neb[d] = bb[d];
    nea[nda - 2] = ta ? K : M;
    nea[nda - 1] = ta ? M : K;
    neb[ndb - 2] = tb ? N : K;
    neb[ndb - 1] = tb ? K : N;
    tt *a = tt_rand(at, nda, nea, layout, 0.1, 1), *b = tt_rand(bt, ndb, neb, layout, 0.1, 1);
    int nd = nda > ndb ? nda : ndb;
    int64_t ne[4];
    for (int d = 0; d < nd - 2; d++) {
        int da = d - (nd - nda), db = d - (nd - ndb);
        int64_t ea = da >= 0 ? nea[da] : 1, eb = db >= 0 ? neb[db] : 1;
        ne[d] = ea == 1 ? eb : ea;
    }
    ne[nd - 2] = M;
    ne[nd - 1] = N;
    kcase c = {.name = name, .op = GP_OP_MATMUL, .in = {a, b}, .n_in = 2, .tol = 2e-6};
    c.at.i[GP_MATMUL_TA] = ta;
    c.at.i[GP_MATMUL_TB] = tb;
    c.out = tt_new(GP_F32, nd, ne, 0);
    int64_t n = tt_count(c.out), idx[4], ia[4], ib[4];
    double *ref = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        unravel(i, nd, ne, idx);
        int64_t m = idx[nd - 2], j = idx[nd - 1];
        bcast_idx(a, nd, idx, ia);
        bcast_idx(b, nd, idx, ib);
        double s = 0;
        for (int64_t k = 0; k < K; k++) {
            ia[nda - 2] = ta ? k : m;
            ia[nda - 1] = ta ? m : k;
            ib[ndb - 2] = tb ? j : k;
            ib[ndb - 1] = tb ? k : j;
            s += tt_get(a, ia) * tt_get(b, ib);
        }
        ref[i] = s;
    }
    check_case(&c, ref);
    free(ref);
}

static void test_matmul(void)
{
    /* A transposed B takes the lanes path (FMA: closer to the double reference than unfused
     * products, so the f32 tolerance 2e-6 relative holds), the others the blocked one. */
    static const int64_t sizes[][3] = {{1, 67, 130}, {17, 130, 67}, {3, 1, 3}, {67, 17, 1},
                                       {33, 300, 70}, {8, 600, 37}};
    for (int s = 0; s < 6; s++)
        for (int t = 0; t < 4; t++) {
            const int64_t *z = sizes[s];
            char name[96];
            snprintf(name, sizeof name, "matmul M %lld K %lld N %lld ta %d tb %d", (long long)z[0],
                     (long long)z[1], (long long)z[2], t & 1, t >> 1);
            case_matmul(z[0], z[1], z[2], t & 1, t >> 1, GP_F32, GP_F32, 0, 2, NULL, 2, NULL, name);
            case_matmul(z[0], z[1], z[2], t & 1, t >> 1, GP_F32, t & 1 ? GP_BF16 : GP_F16, 1, 2,
                        NULL, 2, NULL, name);
        }
    /* Batch dims: a shared weight (folded into rows), broadcast both ways, strided. */
    case_matmul(5, 67, 17, 0, 1, GP_F32, GP_F16, 0, 4, (int64_t[]){2, 3}, 2, NULL,
                "matmul [2,3,5,67] x f16 [17,67]^T");
    case_matmul(5, 67, 17, 0, 1, GP_F32, GP_F32, 1, 3, (int64_t[]){3}, 2, NULL,
                "matmul strided [3,5,67] x [17,67]^T");
    case_matmul(5, 17, 7, 0, 0, GP_F32, GP_F32, 0, 3, (int64_t[]){3}, 3, (int64_t[]){3},
                "matmul batched [3,5,17] x [3,17,7]");
    case_matmul(3, 17, 5, 0, 0, GP_F32, GP_F32, 1, 3, (int64_t[]){3}, 4, (int64_t[]){2, 1},
                "matmul [3,3,17] x [2,1,17,5]");
    case_matmul(4, 16, 7, 1, 1, GP_F16, GP_BF16, 1, 4, (int64_t[]){2, 1}, 4, (int64_t[]){1, 3},
                "matmul f16 [2,1,16,4]^T x bf16 [1,3,7,16]^T");
}

/* ---- norms, softmax ---- */

/* offset: rms_norm's, added to w (Gemma's (1 + w)). */
static void case_norm_off(gp_op op, tt *x, tt *w, tt *b, int inplace, double offset,
                          const char *name)
{
    kcase c = {.name = name, .op = op, .in = {x, w, b}, .n_in = b ? 3 : 2};
    c.at.f[op == GP_OP_LAYER_NORM ? GP_LAYER_NORM_EPS : GP_RMS_NORM_EPS] = 1e-5;
    c.at.f[GP_RMS_NORM_OFFSET] = offset; /* 0 for layer_norm, which has no offset */
    c.out = inplace ? x : tt_new(x->k.dtype, x->k.ndim, x->k.ne, 0);
    c.tol = tol_for(c.out->k.dtype, 2e-6);
    int64_t n = tt_count(x), C = x->k.ne[x->k.ndim - 1];
    double *ref = malloc(sizeof(double) * (size_t)n);
    for (int64_t r = 0; r < n / C; r++) {
        double mean = 0, var = 0;
        if (op == GP_OP_LAYER_NORM) {
            for (int64_t j = 0; j < C; j++)
                mean += tt_geti(x, r * C + j) / (double)C;
        }
        for (int64_t j = 0; j < C; j++) {
            double d = tt_geti(x, r * C + j) - mean;
            var += d * d / (double)C;
        }
        for (int64_t j = 0; j < C; j++)
            ref[r * C + j] = (tt_geti(x, r * C + j) - mean) / sqrt(var + 1e-5) *
                                 (tt_geti(w, j) + offset) + (b ? tt_geti(b, j) : 0);
    }
    check_case(&c, ref);
    free(ref);
}

static void case_norm(gp_op op, tt *x, tt *w, tt *b, int inplace, const char *name)
{
    case_norm_off(op, x, w, b, inplace, 0, name);
}

static void test_norms(void)
{
    for (int o = 0; o < 2; o++) {
        gp_op op = o ? GP_OP_RMS_NORM : GP_OP_LAYER_NORM;
        int bias = op == GP_OP_LAYER_NORM;
        case_norm(op, tt_dims(GP_F32, 0, 2, 17, 67, 0, 0), tt_dims(GP_F32, 0, 1, 67, 0, 0, 0),
                  bias ? tt_dims(GP_F32, 0, 1, 67, 0, 0, 0) : NULL, 0, "norm [17,67]");
        case_norm(op, tt_dims(GP_F32, 1, 3, 2, 3, 300, 0), tt_dims(GP_F16, 1, 1, 300, 0, 0, 0),
                  bias ? tt_dims(GP_BF16, 1, 1, 300, 0, 0, 0) : NULL, 0, "norm strided [2,3,300]");
        case_norm(op, tt_dims(GP_F16, 1, 2, 5, 130, 0, 0), tt_dims(GP_F32, 0, 1, 130, 0, 0, 0), NULL,
                  1, "norm f16 in place");
        case_norm(op, tt_dims(GP_F32, 0, 1, 3, 0, 0, 0), tt_dims(GP_F32, 0, 1, 3, 0, 0, 0), NULL, 1,
                  "norm [3] in place");
    }
    case_norm_off(GP_OP_RMS_NORM, tt_dims(GP_F32, 0, 2, 5, 67, 0, 0),
                  tt_dims(GP_F32, 0, 1, 67, 0, 0, 0), NULL, 0, 1.0, "rms_norm (1 + w)");
    case_norm_off(GP_OP_RMS_NORM, tt_dims(GP_F16, 1, 3, 2, 3, 40, 0),
                  tt_dims(GP_BF16, 0, 1, 40, 0, 0, 0), NULL, 1, -0.5, "rms_norm (w - 0.5) f16");
}

static void case_softmax(tt *x, double scale, int causal, gp_dtype odt, int inplace, const char *name)
{
    kcase c = {.name = name, .op = GP_OP_SOFTMAX, .in = {x}, .n_in = 1};
    c.at.f[GP_SOFTMAX_SCALE] = scale;
    c.at.i[GP_SOFTMAX_CAUSAL] = causal;
    c.out = inplace ? x : tt_new(odt, x->k.ndim, x->k.ne, 0);
    c.tol = tol_for(c.out->k.dtype, 2e-6);
    int nd = x->k.ndim;
    int64_t n = tt_count(x), S = x->k.ne[nd - 1], T = nd > 1 ? x->k.ne[nd - 2] : 1;
    double *ref = malloc(sizeof(double) * (size_t)n);
    for (int64_t r = 0; r < n / S; r++) {
        int64_t t = r % T;
        double mx = -INFINITY, sum = 0;
        for (int64_t s = 0; s < S; s++)
            if (!causal || s <= t + S - T)
                mx = fmax(mx, tt_geti(x, r * S + s) * scale);
        for (int64_t s = 0; s < S; s++)
            if (!causal || s <= t + S - T)
                sum += exp(tt_geti(x, r * S + s) * scale - mx);
        for (int64_t s = 0; s < S; s++)
            ref[r * S + s] =
                !causal || s <= t + S - T ? exp(tt_geti(x, r * S + s) * scale - mx) / sum : 0;
    }
    check_case(&c, ref);
    free(ref);
}

static void test_softmax(void)
{
    case_softmax(tt_rand(GP_F32, 3, (int64_t[]){3, 17, 67}, 0, 0.1, 8), 0.5, 0, GP_F32, 0,
                 "softmax [3,17,67]");
    case_softmax(tt_rand(GP_F32, 3, (int64_t[]){3, 17, 67}, 1, 0.1, 8), 0.5, 1, GP_F32, 0,
                 "softmax causal strided [3,17,67]");
    case_softmax(tt_rand(GP_F16, 2, (int64_t[]){5, 300}, 1, 0.1, 8), 1.0, 1, GP_F16, 1,
                 "softmax causal f16 in place [5,300]");
    case_softmax(tt_rand(GP_F32, 2, (int64_t[]){5, 3}, 0, 0.1, 8), 1.0, 1, GP_F32, 0,
                 "softmax causal T > S (rows 0, 1 all masked)");
    case_softmax(tt_rand(GP_BF16, 1, (int64_t[]){130}, 0, 0.1, 8), 2.0, 0, GP_F32, 0,
                 "softmax bf16 [130]");
    /* The causal mask, by value: row t of [3, 5] keeps s <= t + 2. */
    int64_t ne[2] = {3, 5};
    tt *x = tt_new(GP_F32, 2, ne, 0), *o = tt_new(GP_F32, 2, ne, 0);
    for (int64_t i = 0; i < 15; i++)
        ((float *)x->k.data)[i] = 1.0f;
    gp_attrs at = {.i = {[GP_SOFTMAX_CAUSAL] = 1}, .f = {[GP_SOFTMAX_SCALE] = 1.0}};
    gp_cpu_compute(GP_OP_SOFTMAX, &at, &o->k, &x->k, 1, NULL, 0, 0, 1);
    const float *y = o->k.data;
    for (int t = 0; t < 3; t++)
        for (int s = 0; s < 5; s++)
            CU_ASSERT_DOUBLE_EQUAL(y[t * 5 + s], s <= t + 2 ? 1.0 / (t + 3) : 0.0, 1e-7);
    tt_free(x);
    tt_free(o);
}

/* ---- argmax ---- */

/* The reference: the first index of the largest value of row r (of n at stride 1 in v); NaN
 * never wins; 0 when every value is NaN. */
static int32_t ref_argmax(const double *v, int64_t n)
{
    int64_t at = -1;
    for (int64_t i = 0; i < n; i++)
        if (!isnan(v[i]) && (at < 0 || v[i] > v[at]))
            at = i;
    return at < 0 ? 0 : (int32_t)at;
}

/* argmax over the last dim of x, against ref_argmax, for every row. */
static void case_argmax(tt *x, const char *name)
{
    int nd = x->k.ndim;
    int64_t N = x->k.ne[nd - 1], rows = tt_count(x) / N;
    tt *o = tt_new(GP_I32, nd - 1, x->k.ne, 1);
    gp_attrs at = {{0}, {0}};
    char err[256];
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_ARGMAX, &at, &o->k, &x->k, 1, err, sizeof err), 0);
    double *row = malloc(sizeof(double) * (size_t)N);
    for (int nth = 1; nth <= 3; nth += 2) { /* rows shared over threads: the same answers */
        memset(o->buf, 0xff, o->size);
        for (int ith = 0; ith < nth; ith++)
            gp_cpu_compute(GP_OP_ARGMAX, &at, &o->k, &x->k, 1, NULL, 0, ith, nth);
        int bad = 0;
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t i = 0; i < N; i++)
                row[i] = tt_geti(x, r * N + i);
            bad += tt_geti(o, r) != ref_argmax(row, N);
        }
        if (bad)
            fprintf(stderr, "\n  %s, %d threads: %d rows wrong\n", name, nth, bad);
        CU_ASSERT_EQUAL(bad, 0);
    }
    free(row);
    tt_free(o);
    tt_free(x);
}

static void test_argmax(void)
{
    case_argmax(tt_rand(GP_F32, 2, (int64_t[]){5, 50257}, 0, 0.1, 8), "argmax [5, 50257]");
    case_argmax(tt_rand(GP_F16, 3, (int64_t[]){2, 3, 300}, 1, 0.1, 8), "argmax f16 strided");
    case_argmax(tt_rand(GP_BF16, 1, (int64_t[]){77}, 0, 0.1, 8), "argmax bf16 [77]");
    /* Ties, infinities and NaN, by value: rows of 6. */
    static const float rows[][6] = {
        {1, 3, 2, 3, 0, 3},                            /* ties: the first, 1 */
        {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY}, /* 0 */
        {NAN, -INFINITY, NAN, -5, NAN, -INFINITY},     /* NaN never wins: 3 */
        {NAN, NAN, NAN, NAN, NAN, NAN},                /* 0 */
        {NAN, INFINITY, 1, INFINITY, NAN, 2},          /* 1 */
    };
    const int32_t want[5] = {1, 0, 3, 0, 1};
    int64_t ne[2] = {5, 6};
    tt *x = tt_new(GP_F32, 2, ne, 1), *o = tt_new(GP_I32, 1, ne, 0);
    for (int r = 0; r < 5; r++)
        for (int i = 0; i < 6; i++)
            tt_set(x, (int64_t[]){r, i}, rows[r][i]);
    gp_attrs at = {{0}, {0}};
    gp_cpu_compute(GP_OP_ARGMAX, &at, &o->k, &x->k, 1, NULL, 0, 0, 1);
    for (int r = 0; r < 5; r++)
        CU_ASSERT_EQUAL(tt_geti(o, r), want[r]);
    /* The check: out must be i32 with x's rows. */
    char err[256];
    tt *of = tt_new(GP_F32, 1, ne, 0), *o2 = tt_new(GP_I32, 2, ne, 0);
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_ARGMAX, &at, &of->k, &x->k, 1, err, sizeof err), -1);
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_ARGMAX, &at, &o2->k, &x->k, 1, err, sizeof err), -1);
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_ARGMAX, &at, &o->k, &x->k, 1, err, sizeof err), 0);
    tt_free(x);
    tt_free(o);
    tt_free(of);
    tt_free(o2);
}

/* ---- rope ---- */

/* Llama 3 scaling, written out from transformers' definition (rope_type "llama3"): scale[4] =
 * {factor, low_freq_factor, high_freq_factor, original_max_position_embeddings}; NULL: none.
 * scale[3] = GP_ROPE_LONGROPE: Phi-3's LongRoPE, {attn_factor, 0, 0, GP_ROPE_LONGROPE}: the
 * frequency unchanged (its factors are freq_factors), cosines and sines times attn_factor. */
static double llama3_freq(double freq, const double *scale)
{
    if (!scale || scale[3] == GP_ROPE_LONGROPE)
        return freq;
    double wl = 2 * 3.14159265358979323846 / freq, len = scale[3];
    if (wl < len / scale[2])
        return freq;
    if (wl > len / scale[1])
        return freq / scale[0];
    double sm = (len / wl - scale[1]) / (scale[2] - scale[1]);
    return (1 - sm) * freq / scale[0] + sm * freq;
}

/* ff: freq_factors f32 [n/2] (input 2: pair j's frequency over ff[j]), or NULL. */
static void case_rope_ff(int mode, int64_t n, double theta, const double *scale, tt *ff, tt *x,
                         int inplace, const char *name)
{
    int64_t T = x->k.ne[0], H = x->k.ne[1], D = x->k.ne[2];
    tt *pos = tt_ids(T, 3000);
    kcase c = {.name = name, .op = GP_OP_ROPE, .in = {x, pos, ff}, .n_in = ff ? 3 : 2};
    double *w = malloc(sizeof(double) * (size_t)(n / 2 + 1));
    for (int64_t j = 0; j < n / 2; j++)
        w[j] = ff ? tt_geti(ff, j) : 1.0; /* read now: check_case frees ff */
    c.at.i[GP_ROPE_MODE] = mode;
    c.at.i[GP_ROPE_N_DIMS] = n;
    c.at.f[GP_ROPE_THETA] = theta;
    if (scale) {
        c.at.f[GP_ROPE_FACTOR] = scale[0];
        c.at.i[GP_ROPE_SCALING] = (int64_t)scale[3];
        c.at.f[GP_ROPE_LOW_FACTOR] = (float)scale[1];
        c.at.f[GP_ROPE_HIGH_FACTOR] = (float)scale[2];
    }
    c.out = inplace ? x : tt_new(x->k.dtype, 3, x->k.ne, 0);
    c.tol = tol_for(c.out->k.dtype, 1e-6);
    double *ref = malloc(sizeof(double) * (size_t)(T * H * D));
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            int64_t base = (t * H + h) * D;
            double p = tt_geti(pos, t);
            for (int64_t d = n; d < D; d++)
                ref[base + d] = tt_geti(x, base + d);
            for (int64_t j = 0; j < n / 2; j++) {
                int64_t u = mode ? 2 * j : j, v = mode ? 2 * j + 1 : j + n / 2;
                double f = llama3_freq(pow(theta, -2.0 * (double)j / (double)n), scale);
                double ang = p * f / w[j];
                double m = scale && scale[3] == GP_ROPE_LONGROPE ? scale[0] : 1;
                double xu = tt_geti(x, base + u), xv = tt_geti(x, base + v);
                ref[base + u] = m * (xu * cos(ang) - xv * sin(ang));
                ref[base + v] = m * (xu * sin(ang) + xv * cos(ang));
            }
        }
    check_case(&c, ref);
    free(ref);
    free(w);
}

static void case_rope_scaled(int mode, int64_t n, double theta, const double *scale, tt *x,
                             int inplace, const char *name)
{
    case_rope_ff(mode, n, theta, scale, NULL, x, inplace, name);
}

/* freq_factors f32 [m], strided: factors in [1, 8] as Llama 3.1's rope_freqs. */
static tt *rope_factors(int64_t m)
{
    tt *ff = tt_new(GP_F32, 1, &m, 1);
    for (int64_t j = 0; j < m; j++) {
        float f;
        gp_test_uniform(&f, 1, 1.0f, 8.0f, &rng);
        tt_set(ff, &j, f);
    }
    return ff;
}

static void case_rope(int mode, int64_t n, double theta, tt *x, int inplace, const char *name)
{
    case_rope_scaled(mode, n, theta, NULL, x, inplace, name);
}

static void test_rope(void)
{
    /* Llama 3 scaling over 16 dims at theta 10000 with L = 32: wavelengths 6.3 (kept), 19.9
     * (smoothed), 63 and more (divided by 8), as tests/parity/llama3 has; and Llama 3.1's own. */
    const double l3_small[4] = {8, 1, 4, 32}, l31[4] = {8, 1, 4, 8192};
    const double longrope[4] = {1.1902380714238083, 0, 0, GP_ROPE_LONGROPE}; /* 128k over 4k */
    for (int mode = 0; mode < 2; mode++) {
        case_rope_scaled(mode, 16, 10000, l3_small, tt_dims(GP_F32, 0, 3, 5, 3, 16, 0), 0,
                         "rope llama3 bands");
        case_rope_scaled(mode, 128, 500000, l31, tt_dims(GP_F16, 0, 3, 2, 2, 128, 0), 1,
                         "rope llama3.1 f16 in place");
    }
    /* The scaling changes the result (factor 8 on the low band), so the cases above can fail. */
    {
        float xs[16], y0[16], y1[16];
        for (int i = 0; i < 16; i++)
            xs[i] = (float)(i + 1);
        int32_t p = 20;
        gp_ktensor in[2] = {{xs, GP_F32, 3, {1, 1, 16}, {64, 64, 4}}, {&p, GP_I32, 1, {1}, {4}}};
        gp_ktensor o0 = {y0, GP_F32, 3, {1, 1, 16}, {64, 64, 4}}, o1 = o0;
        o1.data = y1;
        gp_attrs plain = {.i = {[GP_ROPE_N_DIMS] = 16}, .f = {[GP_ROPE_THETA] = 10000.0}};
        gp_attrs scaled = plain;
        scaled.i[GP_ROPE_SCALING] = 32;
        scaled.f[GP_ROPE_LOW_FACTOR] = 1;
        scaled.f[GP_ROPE_HIGH_FACTOR] = 4;
        scaled.f[GP_ROPE_FACTOR] = 8;
        gp_cpu_compute(GP_OP_ROPE, &plain, &o0, in, 2, NULL, 0, 0, 1);
        gp_cpu_compute(GP_OP_ROPE, &scaled, &o1, in, 2, NULL, 0, 0, 1);
        CU_ASSERT_DOUBLE_EQUAL(y1[0], y0[0], 1e-6); /* pair 0: the high band, unchanged */
        CU_ASSERT(fabs(y1[2] - y0[2]) > 0.5);       /* pair 2: the low band, 8 times slower */
    }
    /* freq_factors (llama.cpp's rope_freqs tensor), alone and on top of a scaling. */
    for (int mode = 0; mode < 2; mode++) {
        case_rope_ff(mode, 16, 10000, NULL, rope_factors(8),
                     tt_dims(GP_F32, 0, 3, 5, 3, 16, 0), 0, "rope freq_factors");
        case_rope_ff(mode, 8, 500, NULL, rope_factors(4),
                     tt_dims(GP_F16, 2, 3, 7, 3, 12, 0), 1, "rope freq_factors partial f16");
        case_rope_ff(mode, 16, 10000, l3_small, rope_factors(8),
                     tt_dims(GP_F32, 0, 3, 5, 3, 16, 0), 0, "rope freq_factors on llama3");
        case_rope_ff(mode, 16, 10000, longrope, rope_factors(8),
                     tt_dims(GP_F32, 0, 3, 5, 3, 16, 0), 0, "rope longrope");
        case_rope_ff(mode, 8, 500, longrope, rope_factors(4),
                     tt_dims(GP_F16, 2, 3, 7, 3, 12, 0), 1, "rope longrope partial f16");
    }
    /* LongRoPE's attention factor scales the rotated dims only (those past n pass through), so
     * the cases above can fail: by hand, n 2 of D 4, pos 0 (no turn), factor 1.25. */
    {
        float xs[4] = {1, 2, 3, 4}, ys[4], one[1] = {1};
        int32_t p = 0;
        gp_ktensor in[3] = {{xs, GP_F32, 3, {1, 1, 4}, {16, 16, 4}}, {&p, GP_I32, 1, {1}, {4}},
                            {one, GP_F32, 1, {1}, {4}}};
        gp_ktensor out = {ys, GP_F32, 3, {1, 1, 4}, {16, 16, 4}};
        gp_attrs at = {.i = {[GP_ROPE_N_DIMS] = 2, [GP_ROPE_SCALING] = GP_ROPE_LONGROPE},
                       .f = {[GP_ROPE_THETA] = 10000.0, [GP_ROPE_FACTOR] = 1.25}};
        gp_cpu_compute(GP_OP_ROPE, &at, &out, in, 3, NULL, 0, 0, 1);
        const float want[4] = {1.25f, 2.5f, 3, 4};
        for (int i = 0; i < 4; i++)
            CU_ASSERT_EQUAL(ys[i], want[i]);
    }
    for (int mode = 0; mode < 2; mode++) {
        case_rope(mode, 16, 10000, tt_dims(GP_F32, 0, 3, 5, 3, 16, 0), 0, "rope full");
        case_rope(mode, 8, 500, tt_dims(GP_F32, 2, 3, 17, 3, 16, 0), 0, "rope partial strided");
        case_rope(mode, 6, 10000, tt_dims(GP_F16, 0, 3, 3, 2, 10, 0), 1, "rope f16 in place");
        case_rope(mode, 130, 10000, tt_dims(GP_F32, 0, 3, 1, 1, 132, 0), 1, "rope n 130");
    }
    /* By hand: x [1, 1, 4] = (1, 2, 3, 4) at pos 2, theta 100, n 4: pair 0 turns by 2 rad, pair 1
     * by 2 * 100^(-1/2) = 0.2 rad. Rotate-half pairs (x0, x2), (x1, x3); interleaved (x0, x1),
     * (x2, x3). */
    const double c2 = -0.41614683654714241, s2 = 0.90929742682568170;
    const double c02 = 0.98006657784124163, s02 = 0.19866933079506122;
    const double want[2][4] = {
        {1 * c2 - 3 * s2, 2 * c02 - 4 * s02, 1 * s2 + 3 * c2, 2 * s02 + 4 * c02},
        {1 * c2 - 2 * s2, 1 * s2 + 2 * c2, 3 * c02 - 4 * s02, 3 * s02 + 4 * c02},
    };
    for (int mode = 0; mode < 2; mode++) {
        float xs[4] = {1, 2, 3, 4}, ys[4];
        int32_t p = 2;
        gp_ktensor in[2] = {{xs, GP_F32, 3, {1, 1, 4}, {16, 16, 4}}, {&p, GP_I32, 1, {1}, {4}}};
        gp_ktensor out = {ys, GP_F32, 3, {1, 1, 4}, {16, 16, 4}};
        gp_attrs at = {.i = {[GP_ROPE_MODE] = mode, [GP_ROPE_N_DIMS] = 4},
                       .f = {[GP_ROPE_THETA] = 100.0}};
        gp_cpu_compute(GP_OP_ROPE, &at, &out, in, 2, NULL, 0, 0, 1);
        for (int i = 0; i < 4; i++)
            CU_ASSERT_DOUBLE_EQUAL(ys[i], want[mode][i], 1e-6);
    }
    /* Linear scaling (Gemma 3's global layers): factor 2 halves both angles of the case above,
     * pair 0 turning by 1 rad and pair 1 by 0.1 (rotate-half pairs (x0, x2), (x1, x3)). */
    {
        float xs[4] = {1, 2, 3, 4}, ys[4];
        int32_t p = 2;
        gp_ktensor in[2] = {{xs, GP_F32, 3, {1, 1, 4}, {16, 16, 4}}, {&p, GP_I32, 1, {1}, {4}}};
        gp_ktensor out = {ys, GP_F32, 3, {1, 1, 4}, {16, 16, 4}};
        gp_attrs at = {.i = {[GP_ROPE_N_DIMS] = 4, [GP_ROPE_SCALING] = GP_ROPE_LINEAR},
                       .f = {[GP_ROPE_THETA] = 100.0, [GP_ROPE_FACTOR] = 2.0}};
        gp_cpu_compute(GP_OP_ROPE, &at, &out, in, 2, NULL, 0, 0, 1);
        const double lin[4] = {1 * cos(1.0) - 3 * sin(1.0), 2 * cos(0.1) - 4 * sin(0.1),
                               1 * sin(1.0) + 3 * cos(1.0), 2 * sin(0.1) + 4 * cos(0.1)};
        for (int i = 0; i < 4; i++)
            CU_ASSERT_DOUBLE_EQUAL(ys[i], lin[i], 1e-6);
    }
}

/* ---- copies, lookups, stores ---- */

static void case_copy(gp_op op, tt *x, gp_dtype odt, double tol, const char *name)
{
    kcase c = {.name = name, .op = op, .in = {x}, .n_in = 1, .tol = tol};
    c.out = tt_new(odt, x->k.ndim, x->k.ne, 0);
    int64_t n = tt_count(x);
    double *ref = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        double v = tt_geti(x, i);
        ref[i] = odt == GP_I32 ? trunc(v) : v;
    }
    check_case(&c, ref);
    free(ref);
}

static void test_copies(void)
{
    case_copy(GP_OP_CONT, tt_dims(GP_F32, 1, 3, 3, 17, 67, 0), GP_F32, 0, "cont permuted");
    case_copy(GP_OP_CONT, tt_dims(GP_F16, 1, 4, 2, 3, 5, 7), GP_F16, 0, "cont f16 permuted");
    case_copy(GP_OP_CONT, tt_dims(GP_BF16, 2, 2, 130, 3, 0, 0), GP_BF16, 0, "cont bf16 padded");
    case_copy(GP_OP_CAST, tt_dims(GP_F32, 1, 2, 17, 67, 0, 0), GP_F16, 1e-3, "cast f32 -> f16");
    case_copy(GP_OP_CAST, tt_dims(GP_F16, 0, 2, 17, 67, 0, 0), GP_BF16, 8e-3, "cast f16 -> bf16");
    case_copy(GP_OP_CAST, tt_dims(GP_BF16, 1, 1, 130, 0, 0, 0), GP_F32, 0, "cast bf16 -> f32");
    case_copy(GP_OP_CAST, tt_dims(GP_F16, 1, 3, 3, 1, 67, 0), GP_F32, 0, "cast f16 -> f32");
    tt *big = tt_rand(GP_F32, 2, (int64_t[]){5, 17}, 1, 1, 100000);
    case_copy(GP_OP_CAST, big, GP_I32, 0, "cast f32 -> i32");
    tt *ids = tt_ids(67, 1 << 30);
    case_copy(GP_OP_CAST, ids, GP_I32, 0, "cast i32 -> i32");
    ids = tt_ids(67, 1 << 20);
    case_copy(GP_OP_CAST, ids, GP_F32, 0, "cast i32 -> f32");
}

static void case_get_rows(tt *table, int64_t T, const char *name)
{
    int64_t V = table->k.ne[0], C = table->k.ne[1];
    tt *ids = tt_ids(T, V);
    kcase c = {.name = name, .op = GP_OP_GET_ROWS, .in = {table, ids}, .n_in = 2, .tol = 0};
    c.out = tt_new(GP_F32, 2, (int64_t[]){T, C}, 0);
    double *ref = malloc(sizeof(double) * (size_t)(T * C));
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < C; j++)
            ref[t * C + j] = tt_get(table, (int64_t[]){(int64_t)tt_geti(ids, t), j});
    check_case(&c, ref);
    free(ref);
}

static void test_get_rows(void)
{
    case_get_rows(tt_dims(GP_F32, 0, 2, 67, 17, 0, 0), 5, "get_rows f32");
    case_get_rows(tt_dims(GP_F16, 1, 2, 67, 130, 0, 0), 17, "get_rows f16 transposed table");
    case_get_rows(tt_dims(GP_BF16, 0, 2, 3, 1, 0, 0), 1, "get_rows bf16");
}

static void case_concat(tt *a, tt *b, int axis, gp_dtype odt, const char *name)
{
    int nd = a->k.ndim, ax = axis < 0 ? axis + nd : axis;
    int64_t ne[4], idx[4];
    for (int d = 0; d < nd; d++)
        ne[d] = d == ax ? a->k.ne[d] + b->k.ne[d] : a->k.ne[d];
    kcase c = {.name = name, .op = GP_OP_CONCAT, .in = {a, b}, .n_in = 2, .tol = tol_for(odt, 0)};
    c.at.i[GP_CONCAT_AXIS] = axis;
    c.out = tt_new(odt, nd, ne, 0);
    int64_t n = tt_count(c.out);
    double *ref = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        unravel(i, nd, ne, idx);
        if (idx[ax] < a->k.ne[ax]) {
            ref[i] = tt_get(a, idx);
        } else {
            idx[ax] -= a->k.ne[ax];
            ref[i] = tt_get(b, idx);
        }
    }
    check_case(&c, ref);
    free(ref);
}

static void test_concat(void)
{
    case_concat(tt_dims(GP_F32, 0, 3, 3, 5, 7, 0), tt_dims(GP_F32, 1, 3, 2, 5, 7, 0), 0, GP_F32,
                "concat axis 0");
    case_concat(tt_dims(GP_F32, 1, 3, 3, 5, 7, 0), tt_dims(GP_F16, 1, 3, 3, 17, 7, 0), 1, GP_F32,
                "concat axis 1, f16 b");
    case_concat(tt_dims(GP_F16, 1, 2, 17, 67, 0, 0), tt_dims(GP_F16, 0, 2, 17, 1, 0, 0), -1, GP_F16,
                "concat last axis (-1)");
    case_concat(tt_dims(GP_F32, 0, 1, 1, 0, 0, 0), tt_dims(GP_F32, 0, 1, 130, 0, 0, 0), 0, GP_F32,
                "concat 1-d");
}

/* store: dst [S, ...] gets src rows at pos; unchanged elsewhere. pos may repeat (last t wins). */
static void case_store_ring(tt *dst, tt *src, tt *pos, int ring, const char *name)
{
    kcase c = {.name = name, .op = GP_OP_STORE, .in = {dst, pos, src}, .n_in = 3};
    c.at.i[GP_STORE_RING] = ring;
    c.out = dst;
    c.tol = tol_for(dst->k.dtype, 0);
    int64_t n = tt_count(dst), T = src->k.ne[0], row = n / dst->k.ne[0];
    double *ref = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        ref[i] = tt_geti(dst, i);
    for (int64_t t = 0; t < T; t++) {
        int64_t p = (int64_t)tt_geti(pos, t) % (ring ? dst->k.ne[0] : INT64_MAX);
        for (int64_t j = 0; j < row; j++)
            ref[p * row + j] = tt_geti(src, t * row + j);
    }
    check_case(&c, ref);
    free(ref);
}

static void case_store(tt *dst, tt *src, tt *pos, const char *name)
{
    case_store_ring(dst, src, pos, 0, name);
}

static void test_store(void)
{
    case_store(tt_dims(GP_F16, 1, 3, 20, 3, 5, 0), tt_dims(GP_F32, 1, 3, 4, 3, 5, 0), tt_ids(4, 20),
               "store f32 -> f16 [20,3,5]");
    case_store(tt_dims(GP_F32, 2, 2, 17, 130, 0, 0), tt_dims(GP_BF16, 0, 2, 3, 130, 0, 0),
               tt_ids(3, 17), "store bf16 -> f32 [17,130]");
    case_store(tt_dims(GP_F32, 0, 1, 7, 0, 0, 0), tt_dims(GP_F32, 0, 1, 1, 0, 0, 0), tt_ids(1, 7),
               "store [7] scalar rows");
    tt *pos = tt_ids(3, 9);
    int64_t i;
    for (i = 0; i < 3; i++)
        tt_set(pos, &i, 4.0); /* the same row three times: src row 2 must win */
    case_store(tt_dims(GP_F32, 0, 2, 9, 67, 0, 0), tt_dims(GP_F32, 1, 2, 3, 67, 0, 0), pos,
               "store repeated pos");
    /* A ring of 7 rows: positions 5..14 wrap (12 and 5 share row 5: the later t, 12, wins). */
    tt *rp = tt_ids(10, 1);
    for (i = 0; i < 10; i++)
        tt_set(rp, &i, (double)(5 + i));
    case_store_ring(tt_dims(GP_F16, 1, 3, 7, 2, 5, 0), tt_dims(GP_F32, 0, 3, 10, 2, 5, 0), rp, 1,
                    "store ring of 7, 10 rows wrapping");
}

/* ---- attention ---- */

/* ring: positions run from 40 on, position s in row s % S (needs window + T - 1 <= S). sinks:
 * input 4, a logit a head in [-1, 3) joining each softmax's max and denominator (gpt-oss). */
static void case_attention_ws(int64_t T, int64_t H, int64_t G, int64_t D, int64_t S, gp_dtype kvt,
                              int layout, int64_t window, int ring, double cap, int sinks,
                              const char *name)
{
    tt *q = tt_dims(GP_F32, layout, 3, T, H, D, 0);
    tt *k = tt_rand(kvt, 3, (int64_t[]){S, G, D}, layout, 0.1, 2);
    tt *v = tt_dims(kvt, layout, 3, S, G, D, 0);
    tt *pos = tt_ids(T, 1);
    /* Decoding positions: the T new tokens are the last T of the first p0 + T rows, as a cache
     * fills; one query (t = 0) also looks only at row 0. */
    int64_t p0 = S - T - irand(S - T + 1);
    for (int64_t t = 0; t < T; t++)
        tt_set(pos, &t, ring ? (double)(40 + t) : (double)(t == 0 && T > 2 ? 0 : p0 + t));
    kcase c = {.name = name, .op = GP_OP_ATTENTION, .in = {q, k, v, pos}, .n_in = 4, .tol = 2e-6};
    tt *sk = NULL;
    if (sinks) {
        sk = tt_rand(GP_F32, 1, (int64_t[]){H}, 0, -1, 3);
        c.in[4] = sk;
        c.n_in = 5;
        c.at.i[GP_ATTENTION_SINKS] = 1;
    }
    c.at.f[GP_ATTENTION_SCALE] = 1.0 / sqrt((double)D);
    c.at.i[GP_ATTENTION_WINDOW] = window;
    c.at.i[GP_ATTENTION_RING] = ring;
    c.at.f[GP_ATTENTION_SOFTCAP] = cap;
    int64_t rows = ring ? S : INT64_MAX;
    c.out = tt_new(GP_F32, 3, (int64_t[]){T, H, D}, 0);
    double *ref = malloc(sizeof(double) * (size_t)(T * H * D));
    double *sc = malloc(sizeof(double) * (size_t)(S + 64)); /* [max pos + 1] */
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++) {
            int64_t g = h / (H / G), p = (int64_t)tt_geti(pos, t);
            int64_t s0 = window > 0 && p - window + 1 > 0 ? p - window + 1 : 0;
            double mx = -INFINITY, sum = 0;
            for (int64_t s = s0; s <= p; s++) {
                double dot = 0;
                for (int64_t d = 0; d < D; d++)
                    dot += tt_get(q, (int64_t[]){t, h, d}) * tt_get(k, (int64_t[]){s % rows, g, d});
                sc[s] = dot * c.at.f[GP_ATTENTION_SCALE];
                if (cap > 0)
                    sc[s] = cap * tanh(sc[s] / cap);
                mx = fmax(mx, sc[s]);
            }
            double sink = sk ? tt_geti(sk, h) : -INFINITY;
            mx = fmax(mx, sink);
            for (int64_t s = s0; s <= p; s++)
                sum += sc[s] = exp(sc[s] - mx);
            if (sk)
                sum += exp(sink - mx);
            for (int64_t d = 0; d < D; d++) {
                double o = 0;
                for (int64_t s = s0; s <= p; s++)
                    o += sc[s] * tt_get(v, (int64_t[]){s % rows, g, d});
                ref[(t * H + h) * D + d] = o / sum;
            }
        }
    check_case(&c, ref);
    free(ref);
    free(sc);
}

static void case_attention_w(int64_t T, int64_t H, int64_t G, int64_t D, int64_t S, gp_dtype kvt,
                             int layout, int64_t window, int ring, double cap, const char *name)
{
    case_attention_ws(T, H, G, D, S, kvt, layout, window, ring, cap, 0, name);
}

static void case_attention(int64_t T, int64_t H, int64_t G, int64_t D, int64_t S, gp_dtype kvt,
                           int layout, const char *name)
{
    case_attention_w(T, H, G, D, S, kvt, layout, 0, 0, 0.0, name);
}

static void test_attention(void)
{
    /* Sliding windows (Mistral): of 3 rows over 20, of 1 row (each query its own row only), and
     * wider than the cache (all rows, as window 0). */
    case_attention_w(5, 4, 2, 16, 20, GP_F32, 0, 3, 0, 0.0, "attention window 3");
    case_attention_w(4, 3, 1, 8, 12, GP_F16, 1, 1, 0, 0.0, "attention window 1 f16 strided");
    case_attention_w(3, 2, 2, 8, 6, GP_F32, 0, 100, 0, 0.0, "attention window > S");
    /* Rings: 7 rows for a window of 4 and 4 tokens (positions 40..43), and one token's window
     * filling the ring (5 of 5). */
    case_attention_w(4, 4, 2, 16, 7, GP_F32, 0, 4, 1, 0.0, "attention ring 7, window 4");
    case_attention_w(1, 2, 1, 8, 5, GP_F16, 1, 5, 1, 0.0, "attention ring 5, window 5 f16");
    /* Soft-capped scores (Gemma 2), with a window too. */
    case_attention_w(5, 4, 2, 16, 20, GP_F32, 0, 0, 0, 0.05, "attention softcap 0.05");
    case_attention_w(3, 2, 1, 8, 9, GP_F16, 1, 4, 0, 0.5, "attention softcap 0.5 window 4");
    case_attention(5, 4, 2, 16, 20, GP_F32, 0, "attention GQA 4/2");
    case_attention(3, 3, 3, 17, 67, GP_F16, 1, "attention MHA f16 cache strided");
    case_attention(1, 6, 1, 8, 1, GP_BF16, 0, "attention MQA bf16 decode S 1");
    case_attention(4, 2, 1, 300, 9, GP_F32, 1, "attention D 300");
    /* Sinks (gpt-oss): with GQA, a window, f16, strided, a ring, a head of 300 dims. */
    case_attention_ws(5, 4, 2, 16, 20, GP_F32, 0, 0, 0, 0.0, 1, "attention sinks GQA 4/2");
    case_attention_ws(4, 6, 2, 64, 30, GP_F16, 1, 3, 0, 0.0, 1, "attention sinks window 3 f16");
    case_attention_ws(4, 4, 2, 16, 7, GP_F32, 0, 4, 1, 0.0, 1, "attention sinks ring 7");
    case_attention_ws(2, 2, 1, 300, 9, GP_F32, 1, 0, 0, 0.0, 1, "attention sinks D 300");

    /* The head mapping, by value: v of KV head g is constant g + 1, so head h's output is
     * h / (H / G) + 1 whatever the weights. */
    int64_t T = 2, H = 6, G = 3, D = 4, S = 5;
    tt *q = tt_dims(GP_F32, 0, 3, T, H, D, 0), *k = tt_dims(GP_F32, 0, 3, S, G, D, 0);
    tt *v = tt_new(GP_F32, 3, (int64_t[]){S, G, D}, 0), *o = tt_new(GP_F32, 3, (int64_t[]){T, H, D}, 0);
    int32_t pos[2] = {3, 4};
    for (int64_t i = 0; i < S * G * D; i++)
        ((float *)v->k.data)[i] = (float)((i / D) % G + 1);
    gp_ktensor in[4] = {q->k, k->k, v->k, {pos, GP_I32, 1, {2}, {4}}};
    gp_attrs at = {.f = {[GP_ATTENTION_SCALE] = 0.5}};
    size_t ws = gp_cpu_workspace_bytes(GP_OP_ATTENTION, NULL, &o->k, in, 4, 2);
    CU_ASSERT_EQUAL(ws, 2 * S * sizeof(float));
    /* plan.h plans scores for at most 64 threads. */
    CU_ASSERT_EQUAL(gp_cpu_workspace_bytes(GP_OP_ATTENTION, NULL, &o->k, in, 4, 100), 64 * S * sizeof(float));
    float *w = malloc(ws);
    /* A workspace for one thread: the second call must not touch anything. */
    gp_cpu_compute(GP_OP_ATTENTION, &at, &o->k, in, 4, w, ws / 2, 1, 2);
    CU_ASSERT_EQUAL(((unsigned char *)o->k.data)[0], 0x5a);
    gp_cpu_compute(GP_OP_ATTENTION, &at, &o->k, in, 4, w, ws / 2, 0, 2);
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t d = 0; d < D; d++)
                CU_ASSERT_DOUBLE_EQUAL(((float *)o->k.data)[(t * H + h) * D + d], h / 2 + 1, 1e-6);
    free(w);
    tt_free(q);
    tt_free(k);
    tt_free(v);
    tt_free(o);
}

/* The heads of a KV group R at a time (a workspace with room for R score rows a thread, as plans
 * give) against one head at a time (room for one): the same bits, for groups of 2 to 8 heads
 * (chunks of 4 and the rest), head sizes of 16 to 128 (partial vectors), each cache dtype,
 * windows and soft-capping, 1 and 2 threads. On a CPU without AVX-512 both runs take the one-head
 * path. */
static void test_attention_grouped(void)
{
    const struct {
        int64_t T, H, G, D, S, window;
        gp_dtype kvt;
        double cap;
        int sinks;
    } cs[] = {{1, 32, 4, 64, 300, 0, GP_F16, 0, 0},   {5, 12, 2, 80, 40, 0, GP_BF16, 0, 0},
              {3, 6, 2, 128, 33, 7, GP_F32, 0, 0},     {7, 8, 4, 16, 21, 0, GP_F16, 0.5, 0},
              {2, 28, 4, 128, 64, 20, GP_F16, 0, 0},   {4, 16, 2, 64, 40, 9, GP_F16, 0, 1}};
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        int64_t T = cs[c].T, H = cs[c].H, G = cs[c].G, D = cs[c].D, S = cs[c].S;
        tt *q = tt_rand(GP_F32, 3, (int64_t[]){T, H, D}, 0, -1, 1);
        tt *k = tt_rand(cs[c].kvt, 3, (int64_t[]){S, G, D}, c % 2, -1, 1);
        tt *v = tt_rand(cs[c].kvt, 3, (int64_t[]){S, G, D}, 0, -1, 1);
        tt *o1 = tt_new(GP_F32, 3, (int64_t[]){T, H, D}, 0), *og = tt_new(GP_F32, 3, (int64_t[]){T, H, D}, 0);
        int32_t pos[8];
        for (int64_t t = 0; t < T; t++)
            pos[t] = (int32_t)(S - T + t);
        tt *sk = tt_rand(GP_F32, 1, (int64_t[]){H}, 0, -1, 3);
        gp_ktensor in[5] = {q->k, k->k, v->k, {pos, GP_I32, 1, {T}, {4}}, sk->k};
        int n_in = cs[c].sinks ? 5 : 4;
        gp_attrs at = {.i = {[GP_ATTENTION_WINDOW] = cs[c].window,
                             [GP_ATTENTION_SINKS] = cs[c].sinks},
                       .f = {[GP_ATTENTION_SCALE] = 1.0 / sqrt((double)D),
                             [GP_ATTENTION_SOFTCAP] = cs[c].cap}};
        size_t big = gp_cpu_workspace_bytes(GP_OP_ATTENTION, NULL, &o1->k, in, 4, 64);
        float *w = malloc(big);
        for (int nth = 1; nth <= 2; nth++) {
            size_t one = gp_cpu_workspace_bytes(GP_OP_ATTENTION, NULL, &o1->k, in, 4, nth);
            for (int ith = 0; ith < nth; ith++) {
                gp_cpu_compute(GP_OP_ATTENTION, &at, &o1->k, in, n_in, w, one, ith, nth);
                gp_cpu_compute(GP_OP_ATTENTION, &at, &og->k, in, n_in, w, big, ith, nth);
            }
            int same = memcmp(o1->k.data, og->k.data, (size_t)(T * H * D) * sizeof(float)) == 0;
            if (!same)
                printf("\n  attention grouped case %zu, %d threads: not the one-head bits\n", c, nth);
            CU_ASSERT(same);
        }
        free(w);
        tt *all[] = {q, k, v, o1, og, sk};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            tt_free(all[i]);
    }
}

/* A ragged batch: three sequences of different lengths in one eval over a pool of KV blocks
 * (scattered, two of them adjacent), each query's output the bits of its sequence alone over a
 * contiguous cache; then tables and indices out of range refused by gp_cpu_check. Each cache
 * dtype, GQA and MHA, a window, 1 and 2 threads. */
static void test_attention_ragged(void)
{
    enum { B = 4, NB = 12, M = 5, N = 3 };
    const int32_t tab[N][M] = {{7, 2, 9, 0, 0}, {3, 4, 5, 11, 0}, {10, 1, 0, 0, 0}};
    const int32_t len[N] = {11, 17, 6}; /* positions each sequence holds after this eval */
    const int32_t news[N] = {1, 4, 6};  /* of which new in this eval: a decode, a chunk, a prompt */
    const struct {
        int64_t H, G, D, window;
        gp_dtype kvt;
    } cs[] = {{4, 2, 16, 0, GP_F32}, {6, 2, 64, 0, GP_F16}, {3, 3, 32, 5, GP_BF16}};
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        int64_t H = cs[c].H, G = cs[c].G, D = cs[c].D, T = news[0] + news[1] + news[2];
        tt *pool_k = tt_rand(cs[c].kvt, 3, (int64_t[]){NB * B, G, D}, 0, -1, 1);
        tt *pool_v = tt_rand(cs[c].kvt, 3, (int64_t[]){NB * B, G, D}, 0, -1, 1);
        tt *q = tt_rand(GP_F32, 3, (int64_t[]){T, H, D}, 0, -1, 1);
        tt *o = tt_new(GP_F32, 3, (int64_t[]){T, H, D}, 0);
        int32_t pos[16], seq[16];
        for (int64_t t = 0, sq = 0, k = 0; sq < N; sq++)
            for (k = 0; k < news[sq]; k++, t++) {
                seq[t] = (int32_t)sq;
                pos[t] = len[sq] - news[sq] + (int32_t)k;
            }
        gp_ktensor in[6] = {q->k, pool_k->k, pool_v->k, {pos, GP_I32, 1, {T}, {4}},
                            {seq, GP_I32, 1, {T}, {4}}, {(void *)tab, GP_I32, 2, {N, M}, {M * 4, 4}}};
        gp_attrs at = {.i = {[GP_ATTENTION_WINDOW] = cs[c].window, [GP_ATTENTION_BLOCK] = B},
                       .f = {[GP_ATTENTION_SCALE] = 1.0 / sqrt((double)D)}};
        char err[256];
        CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_ATTENTION, &at, &o->k, in, 6, err, sizeof err), 0);
        size_t wsz = gp_cpu_workspace_bytes(GP_OP_ATTENTION, &at, &o->k, in, 6, 2);
        CU_ASSERT_EQUAL(wsz, 2 * M * B * sizeof(float));
        float *w = malloc(wsz);
        size_t row = (size_t)pool_k->k.nb[0];
        for (int nth = 1; nth <= 2; nth++) {
            for (int ith = 0; ith < nth; ith++)
                gp_cpu_compute(GP_OP_ATTENTION, &at, &o->k, in, 6, w, wsz, ith, nth);
            /* Each sequence alone: its rows copied out of the pool into a contiguous cache. */
            for (int64_t sq = 0, t0 = 0; sq < N; t0 += news[sq], sq++) {
                int64_t S = len[sq];
                tt *kc = tt_new(cs[c].kvt, 3, (int64_t[]){S, G, D}, 0);
                tt *vc = tt_new(cs[c].kvt, 3, (int64_t[]){S, G, D}, 0);
                for (int64_t j = 0; j < S; j++) {
                    size_t at_row = (size_t)(tab[sq][j / B] * B + j % B) * row;
                    memcpy((char *)kc->k.data + j * row, (char *)pool_k->k.data + at_row, row);
                    memcpy((char *)vc->k.data + j * row, (char *)pool_v->k.data + at_row, row);
                }
                tt *q1 = tt_new(GP_F32, 3, (int64_t[]){news[sq], H, D}, 0);
                tt *o1 = tt_new(GP_F32, 3, (int64_t[]){news[sq], H, D}, 0);
                size_t qrow = (size_t)(H * D) * sizeof(float);
                memcpy(q1->k.data, (char *)q->k.data + t0 * qrow, (size_t)news[sq] * qrow);
                gp_ktensor in1[4] = {q1->k, kc->k, vc->k, {pos + t0, GP_I32, 1, {news[sq]}, {4}}};
                gp_attrs at1 = at;
                at1.i[GP_ATTENTION_BLOCK] = 0;
                size_t w1 = gp_cpu_workspace_bytes(GP_OP_ATTENTION, &at1, &o1->k, in1, 4, nth);
                float *ws1 = malloc(w1);
                for (int ith = 0; ith < nth; ith++)
                    gp_cpu_compute(GP_OP_ATTENTION, &at1, &o1->k, in1, 4, ws1, w1, ith, nth);
                int same = !memcmp(o1->k.data, (char *)o->k.data + t0 * qrow, (size_t)news[sq] * qrow);
                if (!same)
                    printf("\n  ragged attention case %zu, sequence %lld, %d threads: not the bits of "
                           "the sequence alone\n", c, (long long)sq, nth);
                CU_ASSERT(same);
                free(ws1);
                tt *all[] = {kc, vc, q1, o1};
                for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
                    tt_free(all[i]);
            }
        }
        /* Refused: a sequence past the table, a block past the pool, a position past M * B. */
        seq[0] = N;
        CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_ATTENTION, &at, &o->k, in, 6, err, sizeof err), -1);
        CU_ASSERT(strstr(err, "seq[0] = 3 is out of range [0, 3)") != NULL);
        seq[0] = 0;
        int32_t bad[N][M];
        memcpy(bad, tab, sizeof bad);
        bad[1][3] = NB;
        in[5].data = bad;
        CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_ATTENTION, &at, &o->k, in, 6, err, sizeof err), -1);
        CU_ASSERT(strstr(err, "blocks[1, 3] = 12") != NULL);
        bad[1][3] = 11;
        bad[2][4] = -1; /* past every position in use: not read, not refused */
        CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_ATTENTION, &at, &o->k, in, 6, err, sizeof err), 0);
        pos[T - 1] = M * B;
        CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_ATTENTION, &at, &o->k, in, 6, err, sizeof err), -1);
        CU_ASSERT(strstr(err, "pos[") != NULL && strstr(err, "out of range [0, 20)") != NULL);
        free(w);
        tt *all[] = {pool_k, pool_v, q, o};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            tt_free(all[i]);
    }
}

/* Views compute nothing: out stays as it was. */
static void test_views(void)
{
    const gp_op views[] = {GP_OP_RESHAPE, GP_OP_PERMUTE, GP_OP_SLICE, GP_OP_VIEW};
    tt *x = tt_dims(GP_F32, 0, 2, 3, 5, 0, 0), *o = tt_new(GP_F32, 2, (int64_t[]){3, 5}, 0);
    gp_attrs at = {{0}, {0}};
    for (int i = 0; i < 4; i++) {
        gp_cpu_compute(views[i], &at, &o->k, &x->k, 1, NULL, 0, 0, 1);
        CU_ASSERT_EQUAL(((unsigned char *)o->buf)[0], 0x5a);
        CU_ASSERT_EQUAL(gp_cpu_workspace_bytes(views[i], NULL, &o->k, &x->k, 1, 4), 0);
    }
    tt_free(x);
    tt_free(o);
}

/* gp_cpu_check refuses what the kernels cannot run. */
static void test_check(void)
{
    char err[256];
    tt *table = tt_dims(GP_F32, 0, 2, 10, 4, 0, 0), *ids = tt_ids(3, 10);
    tt *out = tt_new(GP_F32, 2, (int64_t[]){3, 4}, 0);
    gp_ktensor in[2] = {table->k, ids->k};
    gp_attrs at = {{0}, {0}};
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_GET_ROWS, &at, &out->k, in, 2, err, sizeof err), 0);
    int32_t bad[3] = {1, 10, 2};
    in[1].data = bad;
    in[1].nb[0] = 4;
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_GET_ROWS, &at, &out->k, in, 2, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "get_rows: ids[1] = 10 is out of range [0, 10)");
    bad[1] = -1;
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_GET_ROWS, &at, &out->k, in, 2, err, sizeof err), -1);
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_GET_ROWS, &at, &out->k, in, 1, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "get_rows: 1 inputs, expected 2..2");
    /* the tensor at fault named: an input by its index, or out */
    in[1] = ids->k;
    in[1].ne[0] = -3;
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_GET_ROWS, &at, &out->k, in, 2, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "get_rows: input 1 has a negative dim -3");
    in[1] = ids->k;
    gp_ktensor nodata = out->k;
    nodata.data = NULL;
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_GET_ROWS, &at, &nodata, in, 2, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "get_rows: out has no data");
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_GET_ROWS, &at, NULL, in, 2, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "get_rows: out is missing");

    /* Broadcasting: [3, 4] with [4] is fine, with [3] is not. */
    tt *b4 = tt_dims(GP_F32, 0, 1, 4, 0, 0, 0), *b3 = tt_dims(GP_F32, 0, 1, 3, 0, 0, 0);
    gp_ktensor ab[2] = {out->k, b4->k};
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_ADD, &at, &out->k, ab, 2, err, sizeof err), 0);
    ab[1] = b3->k;
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_ADD, &at, &out->k, ab, 2, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "add: dim 1: a 4, b 3, out 4 do not broadcast");

    /* matmul: K must agree. */
    tt *w = tt_dims(GP_F32, 0, 2, 5, 4, 0, 0), *mo = tt_new(GP_F32, 2, (int64_t[]){3, 5}, 0);
    gp_ktensor mm[2] = {out->k, w->k};
    at.i[GP_MATMUL_TB] = 1;
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_MATMUL, &at, &mo->k, mm, 2, err, sizeof err), 0);
    at.i[GP_MATMUL_TB] = 0;
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_MATMUL, &at, &mo->k, mm, 2, err, sizeof err), -1);

    /* store and attention positions beyond the cache. */
    tt *dst = tt_dims(GP_F16, 0, 2, 8, 4, 0, 0), *src = tt_dims(GP_F32, 0, 2, 3, 4, 0, 0);
    int32_t pos[3] = {0, 7, 8};
    gp_ktensor st[3] = {dst->k, {pos, GP_I32, 1, {3}, {4}}, src->k};
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_STORE, &at, &dst->k, st, 3, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "store: pos[2] = 8 is out of range [0, 8)");
    pos[2] = 6;
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_STORE, &at, &dst->k, st, 3, err, sizeof err), 0);
    tt *q = tt_dims(GP_F32, 0, 3, 3, 4, 2, 0), *kv = tt_dims(GP_F32, 0, 3, 8, 2, 2, 0);
    tt *ao = tt_new(GP_F32, 3, (int64_t[]){3, 4, 2}, 0);
    gp_ktensor att[4] = {q->k, kv->k, kv->k, st[1]};
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_ATTENTION, &at, &ao->k, att, 4, err, sizeof err), 0);
    /* A hostile plan's window: negative, or beyond an i32 position. */
    at.i[GP_ATTENTION_WINDOW] = -1;
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_ATTENTION, &at, &ao->k, att, 4, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "attention: bad window -1");
    at.i[GP_ATTENTION_WINDOW] = (int64_t)INT32_MAX + 1;
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_ATTENTION, &at, &ao->k, att, 4, err, sizeof err), -1);
    at.i[GP_ATTENTION_WINDOW] = 5;
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_ATTENTION, &at, &ao->k, att, 4, err, sizeof err), 0);
    /* A ring of 8 rows: a window of 6 for the 3 tokens fits (6 + 3 - 1 = 8), 7 does not; no
     * window, or a bad flag, is refused; positions past the ring are fine. */
    at.i[GP_ATTENTION_RING] = 1;
    at.i[GP_ATTENTION_WINDOW] = 6;
    pos[2] = 1000;
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_ATTENTION, &at, &ao->k, att, 4, err, sizeof err), 0);
    at.i[GP_ATTENTION_WINDOW] = 7;
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_ATTENTION, &at, &ao->k, att, 4, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "attention: a ring of 8 rows cannot hold a window of 7 for 3 new "
                                "tokens (needs window + tokens - 1 rows)");
    at.i[GP_ATTENTION_WINDOW] = 0;
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_ATTENTION, &at, &ao->k, att, 4, err, sizeof err), -1);
    at.i[GP_ATTENTION_WINDOW] = 6;
    at.i[GP_ATTENTION_RING] = 2;
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_ATTENTION, &at, &ao->k, att, 4, err, sizeof err), -1);
    at.i[GP_ATTENTION_RING] = 0;
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_ATTENTION, &at, &ao->k, att, 4, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "attention: pos[2] = 1000 is out of range [0, 8)");
    /* A ring store takes any position >= 0, a plain one only rows of dst. */
    at.i[GP_STORE_RING] = 1;
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_STORE, &at, &dst->k, st, 3, err, sizeof err), 0);
    pos[1] = -1;
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_STORE, &at, &dst->k, st, 3, err, sizeof err), -1);
    at.i[GP_STORE_RING] = 2;
    pos[1] = 7;
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_STORE, &at, &dst->k, st, 3, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "store: bad ring flag 2");
    at.i[GP_STORE_RING] = 0;
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_STORE, &at, &dst->k, st, 3, err, sizeof err), -1);
    pos[2] = 6;
    pos[0] = -3;
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_ATTENTION, &at, &ao->k, att, 4, err, sizeof err), -1);
    CU_ASSERT_STRING_EQUAL(err, "attention: pos[0] = -3 is out of range [0, 8)");
    tt *kv3 = tt_dims(GP_F32, 0, 3, 8, 3, 2, 0);
    att[1] = att[2] = kv3->k;
    pos[0] = 0;
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_ATTENTION, &at, &ao->k, att, 4, err, sizeof err), -1);
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_COUNT, &at, &ao->k, att, 4, err, sizeof err), -1);


    /* rope's llama3 scaling attributes from a hostile plan: each bad value refused. */
    tt *rx = tt_dims(GP_F32, 0, 3, 3, 2, 8, 0), *ro = tt_new(GP_F32, 3, (int64_t[]){3, 2, 8}, 0);
    int32_t rp[3] = {0, 1, 2};
    gp_ktensor rin[2] = {rx->k, {rp, GP_I32, 1, {3}, {4}}};
    gp_attrs ra = {.i = {[GP_ROPE_N_DIMS] = 8, [GP_ROPE_SCALING] = 32},
                   .f = {[GP_ROPE_THETA] = 10000.0, [GP_ROPE_FACTOR] = 8.0,
                         [GP_ROPE_LOW_FACTOR] = 1.0, [GP_ROPE_HIGH_FACTOR] = 4.0}};
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_ROPE, &ra, &ro->k, rin, 2, err, sizeof err), 0);
    const struct { int64_t len; float lo, hi; double factor; } bad_scaling[] = {
        {-7, 1, 4, 8}, {32, 4, 1, 8}, {32, 0, 4, 8}, {32, 1, INFINITY, 8}, {32, 1, 4, 0},
        {32, 1, 4, NAN}, {32, NAN, 4, 8},
    };
    for (size_t i = 0; i < sizeof bad_scaling / sizeof bad_scaling[0]; i++) {
        gp_attrs b = ra;
        b.i[GP_ROPE_SCALING] = bad_scaling[i].len;
        b.f[GP_ROPE_LOW_FACTOR] = bad_scaling[i].lo;
        b.f[GP_ROPE_HIGH_FACTOR] = bad_scaling[i].hi;
        b.f[GP_ROPE_FACTOR] = bad_scaling[i].factor;
        CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_ROPE, &b, &ro->k, rin, 2, err, sizeof err), -1);
        CU_ASSERT(strstr(err, "rope: bad llama3 scaling") == err);
    }
    /* Linear scaling (GP_ROPE_LINEAR) and LongRoPE (GP_ROPE_LONGROPE): a factor (LongRoPE's, the
     * attention factor) that is not finite and > 0 refused, a good one taken. */
    const double bad_factor[] = {0, -2, NAN, INFINITY};
    const struct {
        int64_t scaling;
        const char *why;
        double good;
    } factored[] = {{GP_ROPE_LINEAR, "rope: bad linear scaling", 8.0},
                    {GP_ROPE_LONGROPE, "rope: bad longrope scaling", 1.19}};
    for (size_t s = 0; s < sizeof factored / sizeof factored[0]; s++) {
        gp_attrs b = {.i = {[GP_ROPE_N_DIMS] = 8, [GP_ROPE_SCALING] = factored[s].scaling},
                      .f = {[GP_ROPE_THETA] = 10000.0}};
        for (size_t i = 0; i < sizeof bad_factor / sizeof bad_factor[0]; i++) {
            b.f[GP_ROPE_FACTOR] = bad_factor[i];
            CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_ROPE, &b, &ro->k, rin, 2, err, sizeof err), -1);
            CU_ASSERT(strstr(err, factored[s].why) == err);
        }
        b.f[GP_ROPE_FACTOR] = factored[s].good;
        CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_ROPE, &b, &ro->k, rin, 2, err, sizeof err), 0);
    }
    gp_attrs lin = {.i = {[GP_ROPE_N_DIMS] = 8, [GP_ROPE_SCALING] = GP_ROPE_LINEAR},
                    .f = {[GP_ROPE_THETA] = 10000.0, [GP_ROPE_FACTOR] = 8.0}};
    /* freq_factors: f32 [n/2] only. */
    float fw[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    gp_ktensor fin[3] = {rx->k, rin[1], {fw, GP_F32, 1, {4}, {4}}};
    CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_ROPE, &lin, &ro->k, fin, 3, err, sizeof err), 0);
    const gp_ktensor bad_ff[] = {{fw, GP_F32, 1, {8}, {4}}, {fw, GP_F16, 1, {4}, {2}},
                                 {fw, GP_F32, 2, {2, 2}, {8, 4}}};
    for (size_t i = 0; i < sizeof bad_ff / sizeof bad_ff[0]; i++) {
        fin[2] = bad_ff[i];
        CU_ASSERT_EQUAL(gp_cpu_check(GP_OP_ROPE, &lin, &ro->k, fin, 3, err, sizeof err), -1);
        CU_ASSERT(strstr(err, "freq_factors must be f32 [4]") != NULL);
    }

    tt *all[] = {table, ids, out, b4, b3, w, mo, dst, src, q, kv, ao, kv3, rx, ro};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        tt_free(all[i]);
}

/* ---- half conversions ---- */

static void test_f16_exhaustive(void)
{
    int bad_decode = 0, bad_trip = 0, bad_nan = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = gp_f16_to_f32((uint16_t)h);
        double want = ref_f16((uint16_t)h);
        if (isnan(want)) {
            /* NaN stays NaN, sign and payload kept, quiet bit set both ways. */
            uint16_t back = gp_f32_to_f16(f);
            bad_nan += !isnan(f) || back != (uint16_t)(h | 0x0200) ||
                       (gp_f32_bits(f) >> 31) != (h >> 15);
            continue;
        }
        bad_decode += (double)f != want || !signbit(f) != !signbit(want);
        bad_trip += gp_f32_to_f16(f) != h;
    }
    CU_ASSERT_EQUAL(bad_decode, 0);
    CU_ASSERT_EQUAL(bad_trip, 0);
    CU_ASSERT_EQUAL(bad_nan, 0);

    /* The kernels' row conversions (vectorized, F16C where the CPU has it) give the same bits:
     * cast every pattern to f32 and back, contiguous and strided. */
    for (int layout = 0; layout < 2; layout++) {
        int64_t ne[1] = {65536};
        tt *h = tt_new(GP_F16, 1, ne, layout), *f = tt_new(GP_F32, 1, ne, layout);
        tt *back = tt_new(GP_F16, 1, ne, 0);
        for (int64_t i = 0; i < 65536; i++) {
            uint16_t v = (uint16_t)i;
            memcpy(tt_ptr(h, &i), &v, 2);
        }
        gp_attrs at = {{0}, {0}};
        gp_cpu_compute(GP_OP_CAST, &at, &f->k, &h->k, 1, NULL, 0, 0, 1);
        gp_cpu_compute(GP_OP_CAST, &at, &back->k, &f->k, 1, NULL, 0, 0, 1);
        int bad = 0;
        for (int64_t i = 0; i < 65536; i++) {
            float x;
            uint16_t y;
            memcpy(&x, tt_ptr(f, &i), 4);
            memcpy(&y, tt_ptr(back, &i), 2);
            bad += gp_f32_bits(x) != gp_f32_bits(gp_f16_to_f32((uint16_t)i));
            bad += y != gp_f32_to_f16(x);
        }
        CU_ASSERT_EQUAL(bad, 0);
        tt_free(h);
        tt_free(f);
        tt_free(back);
    }
}

static void test_f16_rounding(void)
{
    /* Ties: the midpoint of two neighbors (exact in f32) goes to the even one; a hair above or
     * below goes to the nearer one. Covers subnormals, the normal boundary and the top (65504 +
     * 16 = 65520 ties to Inf). */
    int bad = 0;
    for (uint32_t h = 0; h < 0x7c00; h++) {
        double lo = ref_f16((uint16_t)h), hi = h + 1 == 0x7c00 ? 65536.0 : ref_f16((uint16_t)(h + 1));
        float mid = (float)((lo + hi) / 2);
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        bad += gp_f32_to_f16(mid) != even;
        bad += gp_f32_to_f16(-mid) != (even | 0x8000);
        bad += gp_f32_to_f16(nextafterf(mid, 0)) != h;
        bad += gp_f32_to_f16(nextafterf(mid, INFINITY)) != h + 1;
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(gp_f32_to_f16(65519.99f), 0x7bff);
    CU_ASSERT_EQUAL(gp_f32_to_f16(1e10f), 0x7c00);
    CU_ASSERT_EQUAL(gp_f32_to_f16(-INFINITY), 0xfc00);
    CU_ASSERT_EQUAL(gp_f32_to_f16(1e-10f), 0x0000);
    CU_ASSERT_EQUAL(gp_f32_to_f16(-0.0f), 0x8000);
    CU_ASSERT_EQUAL(gp_f32_to_f16(0x1p-24f), 0x0001);
    CU_ASSERT_EQUAL(gp_f32_to_f16(0x1p-25f), 0x0000); /* tie with 0: even */
    CU_ASSERT_EQUAL(gp_f32_to_f16(0x1.8p-24f), 0x0002); /* tie between 1 and 2: even */

    /* Random f32 bit patterns: the result is a nearest f16, ties to even. */
    bad = 0;
    for (int i = 0; i < 200000; i++) {
        float x = gp_f32_from_bits((uint32_t)gp_test_rand(&rng));
        if (isnan(x))
            continue;
        uint16_t r = gp_f32_to_f16(x), m = r & 0x7fff;
        double ax = fabs((double)x);
        if (ax >= 65520.0) {
            bad += m != 0x7c00;
            continue;
        }
        bad += (r >> 15) != (gp_f32_bits(x) >> 31) || m >= 0x7c00;
        double d = fabs(ax - ref_f16(m));
        double dlo = m > 0 ? fabs(ax - ref_f16((uint16_t)(m - 1))) : INFINITY;
        double dhi = m < 0x7bff ? fabs(ax - ref_f16((uint16_t)(m + 1))) : INFINITY;
        bad += d > dlo || d > dhi || ((d == dlo || d == dhi) && (m & 1));
    }
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_bf16(void)
{
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = gp_bf16_to_f32((uint16_t)h);
        bad += (gp_f32_bits(f) >> 16) != h;
        if (isnan(f))
            bad += gp_f32_to_bf16(f) != (h | 0x40);
        else
            bad += gp_f32_to_bf16(f) != h;
        /* The midpoint to the next pattern (same sign, finite) rounds to the even one. */
        if ((h & 0x7f80) != 0x7f80 && (h & 0x7fff) != 0x7f7f) {
            float mid = gp_f32_from_bits((h << 16) | 0x8000u);
            uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
            bad += gp_f32_to_bf16(mid) != even;
            bad += gp_f32_to_bf16(gp_f32_from_bits((h << 16) | 0x7fffu)) != h;
            bad += gp_f32_to_bf16(gp_f32_from_bits((h << 16) | 0x8001u)) != h + 1;
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(gp_f32_to_bf16(3.4e38f), 0x7f80); /* rounds up past the largest: Inf */
    CU_ASSERT(isnan(gp_bf16_to_f32(gp_f32_to_bf16(gp_f32_from_bits(0x7f800001u)))));
}

/* ---- thread pool ---- */

typedef struct {
    gp_threadpool *pool;
    atomic_int calls[8];
    int slots[8];
    atomic_int bad;
    int nth_seen[8];
} pool_ctx;

static void count_fn(void *ctx, int ith, int nth)
{
    pool_ctx *c = ctx;
    atomic_fetch_add(&c->calls[ith], 1);
    c->nth_seen[ith] = nth;
}

/* Phases: each thread writes its slot, waits, checks everyone's slot for this phase. */
static void phase_fn(void *ctx, int ith, int nth)
{
    pool_ctx *c = ctx;
    for (int phase = 1; phase <= 50; phase++) {
        c->slots[ith] = phase;
        gp_threadpool_barrier(c->pool);
        for (int j = 0; j < nth; j++)
            if (c->slots[j] != phase)
                atomic_fetch_add(&c->bad, 1);
        gp_threadpool_barrier(c->pool);
    }
}

static void test_threadpool(void)
{
    CU_ASSERT_PTR_NULL(gp_threadpool_new(0));
    gp_threadpool_free(NULL);
    CU_ASSERT_EQUAL(gp_threadpool_size(NULL), 1);
    for (int n = 1; n <= 4; n++) {
        pool_ctx c;
        memset(&c, 0, sizeof c);
        c.pool = gp_threadpool_new(n);
        CU_ASSERT_PTR_NOT_NULL_FATAL(c.pool);
        CU_ASSERT_EQUAL(gp_threadpool_size(c.pool), n);
        for (int run = 0; run < 300; run++)
            gp_threadpool_run(c.pool, count_fn, &c);
        for (int i = 0; i < 8; i++) {
            CU_ASSERT_EQUAL(atomic_load(&c.calls[i]), i < n ? 300 : 0);
            if (i < n)
                CU_ASSERT_EQUAL(c.nth_seen[i], n);
        }
        for (int run = 0; run < 5; run++)
            gp_threadpool_run(c.pool, phase_fn, &c);
        CU_ASSERT_EQUAL(atomic_load(&c.bad), 0);
        gp_threadpool_free(c.pool);
    }
    pool_ctx c;
    memset(&c, 0, sizeof c);
    gp_threadpool_run(NULL, count_fn, &c);
    CU_ASSERT_EQUAL(atomic_load(&c.calls[0]), 1);
    CU_ASSERT_EQUAL(c.nth_seen[0], 1);
}


/* A matmul fused with bias + gelu + residual (gp_cpu_matmul_epi, as the planned CPU backend runs
 * such chains) gives the unfused nodes' bits: decode and prompt shapes, f32 and f16 weights, work
 * items split evenly or taken from a shared counter by 1-3 threads, the residual apart from the
 * output or the output itself (an in-place add). */
static void test_matmul_epilogue(void)
{
    static const int64_t shapes[][3] = {{1, 768, 100}, {5, 20, 33}, {50, 64, 70}, {130, 40, 130}};
    for (int si = 0; si < 4; si++)
        for (int wi = 0; wi < 2; wi++) {
            int64_t M = shapes[si][0], K = shapes[si][1], N = shapes[si][2];
            tt *a = tt_rand(GP_F32, 2, (int64_t[]){M, K}, 0, 0.01, 1);
            tt *w = tt_rand(wi ? GP_F16 : GP_F32, 2, (int64_t[]){N, K}, 0, 0.01, 1);
            tt *b = tt_rand(GP_F32, 1, (int64_t[]){N}, 0, 0.01, 1);
            tt *r = tt_rand(GP_F32, 2, (int64_t[]){M, N}, 0, 0.01, 1);
            tt *ref = tt_new(GP_F32, 2, (int64_t[]){M, N}, 0);
            tt *out = tt_new(GP_F32, 2, (int64_t[]){M, N}, 0);
            gp_attrs at = {.i = {[GP_MATMUL_TB] = 1}}, none = {0};
            gp_ktensor mm[2] = {a->k, w->k}, add_b[2] = {ref->k, b->k}, add_r[2] = {r->k, ref->k};
            gp_cpu_compute(GP_OP_MATMUL, &at, &ref->k, mm, 2, NULL, 0, 0, 1);
            gp_cpu_compute(GP_OP_ADD, &none, &ref->k, add_b, 2, NULL, 0, 0, 1);
            gp_cpu_compute(GP_OP_GELU, &none, &ref->k, &ref->k, 1, NULL, 0, 0, 1);
            gp_cpu_compute(GP_OP_ADD, &none, &ref->k, add_r, 2, NULL, 0, 0, 1);
            size_t bytes = sizeof(float) * (size_t)(M * N);
            for (int nth = 1; nth <= 3; nth++)
                for (int mode = 0; mode < 3; mode++) { /* static, counter, counter in place */
                    gp_mm_epilogue e = {.n = 3};
                    e.s[0].kind = GP_EPI_BIAS;
                    e.s[0].t = b->k.data;
                    e.s[1].kind = GP_EPI_UNARY;
                    e.s[1].op = GP_OP_GELU;
                    e.s[1].at = &none;
                    e.s[2].kind = GP_EPI_RESIDUAL;
                    e.s[2].t = mode == 2 ? out->k.data : r->k.data;
                    e.s[2].ld = N;
                    memset(out->k.data, 0x5a, bytes);
                    if (mode == 2)
                        memcpy(out->k.data, r->k.data, bytes);
                    atomic_llong next;
                    atomic_init(&next, 0);
                    for (int ith = nth - 1; ith >= 0; ith--)
                        gp_cpu_matmul_epi(&at, &out->k, mm, &e, mode ? &next : NULL, ith, nth);
                    int same = memcmp(out->k.data, ref->k.data, bytes) == 0;
                    if (!same)
                        fprintf(stderr, "\nepilogue M %lld K %lld N %lld %s nth %d mode %d differs\n",
                                (long long)M, (long long)K, (long long)N, wi ? "f16" : "f32", nth,
                                mode);
                    CU_ASSERT(same);
                }
            tt_free(a);
            tt_free(w);
            tt_free(b);
            tt_free(r);
            tt_free(ref);
            tt_free(out);
        }
}

/* A matmul through the pool gives the serial result's bytes. */
typedef struct {
    const gp_ktensor *out, *in;
    gp_attrs at;
} mm_ctx;

static void mm_fn(void *ctx, int ith, int nth)
{
    mm_ctx *c = ctx;
    gp_cpu_compute(GP_OP_MATMUL, &c->at, c->out, c->in, 2, NULL, 0, ith, nth);
}

static void test_pool_matmul(void)
{
    tt *a = tt_dims(GP_F32, 0, 2, 70, 131, 0, 0), *b = tt_dims(GP_F16, 0, 2, 200, 131, 0, 0);
    tt *o1 = tt_new(GP_F32, 2, (int64_t[]){70, 200}, 0), *o3 = tt_new(GP_F32, 2, (int64_t[]){70, 200}, 0);
    gp_ktensor in[2] = {a->k, b->k};
    mm_ctx c = {&o1->k, in, {.i = {[GP_MATMUL_TB] = 1}}};
    gp_threadpool_run(NULL, mm_fn, &c);
    gp_threadpool *pool = gp_threadpool_new(3);
    c.out = &o3->k;
    gp_threadpool_run(pool, mm_fn, &c);
    gp_threadpool_free(pool);
    CU_ASSERT_EQUAL(memcmp(o1->buf, o3->buf, o1->size), 0);
    tt_free(a);
    tt_free(b);
    tt_free(o1);
    tt_free(o3);
}

/* ---- matmul's kernel builds (cpu/cpu_dot.h) ---- */

/* out of a [M, K] x b ([N, K]^T when tb, else [K, N]) at kernel level `level`, into a fresh
 * buffer. */
static float *mm_at_level(int level, const tt *a, const tt *b, int64_t M, int64_t N, int tb)
{
    CU_ASSERT_EQUAL(gp_cpu_dot_level(level), level);
    tt *o = tt_new(GP_F32, 2, (int64_t[]){M, N}, 0);
    gp_ktensor in[2] = {a->k, b->k};
    gp_attrs at = {.i = {[GP_MATMUL_TB] = tb}};
    for (int ith = 1; ith >= 0; ith--)
        gp_cpu_compute(GP_OP_MATMUL, &at, &o->k, in, 2, NULL, 0, ith, 2);
    float *r = malloc(sizeof(float) * (size_t)(M * N));
    for (int64_t i = 0; i < M * N; i++)
        r[i] = (float)tt_geti(o, i);
    tt_free(o);
    return r;
}

/* The portable, AVX2 and AVX-512 builds give the same bits (decode and prompt shapes, k tails,
 * every weight dtype, a strided a, weights [N, K] and [K, N]); and products are fused: lane 0 of the one output of a K = 17
 * product gets (1 + 2^-11) (-1), then + (1 + 2^-12)^2, which is 2^-24 exactly only when that
 * multiply-add is not rounded in between (unfused, the product rounds to 1 + 2^-11: 0). */
static void test_matmul_levels(void)
{
    int best = gp_cpu_dot_level(-1);
    static const int64_t shapes[][3] = {{1, 67, 37}, {3, 600, 21}, {13, 515, 19}, {50, 1040, 33}};
    static const gp_dtype wts[] = {GP_F32, GP_F16, GP_BF16};
    for (int s = 0; s < 8; s++)
        for (int t = 0; t < 3; t++) {
            /* s < 4: b [N, K] (the lanes path); else b [K, N] (the rows path). */
            int tb = s < 4;
            int64_t M = shapes[s % 4][0], K = shapes[s % 4][1], N = shapes[s % 4][2];
            tt *a = tt_rand(GP_F32, 2, (int64_t[]){M, K}, s & 1, 0.1, 1);
            tt *b = tt_rand(wts[t], 2, tb ? (int64_t[]){N, K} : (int64_t[]){K, N}, 0, 0.1, 1);
            float *r0 = mm_at_level(0, a, b, M, N, tb);
            for (int l = 1; l <= best; l++) {
                float *r = mm_at_level(l, a, b, M, N, tb);
                int same = memcmp(r0, r, sizeof(float) * (size_t)(M * N)) == 0;
                if (!same)
                    fprintf(stderr, "\nmatmul M %lld K %lld N %lld %s tb %d: level %d differs\n",
                            (long long)M, (long long)K, (long long)N, gp_dtype_name(wts[t]), tb, l);
                CU_ASSERT(same);
                free(r);
            }
            free(r0);
            tt_free(a);
            tt_free(b);
        }
    for (int64_t M = 1; M <= 20; M += 19) {
        tt *a = tt_new(GP_F32, 2, (int64_t[]){M, 17}, 0), *b = tt_new(GP_F32, 2, (int64_t[]){1, 17}, 0);
        int64_t idx[2];
        for (idx[0] = 0; idx[0] < M; idx[0]++)
            for (idx[1] = 0; idx[1] < 17; idx[1]++)
                tt_set(a, idx, idx[1] == 0 ? 1 + 0x1p-11 : idx[1] == 16 ? 1 + 0x1p-12 : 0);
        idx[0] = 0;
        for (idx[1] = 0; idx[1] < 17; idx[1]++)
            tt_set(b, idx, idx[1] == 0 ? -1 : idx[1] == 16 ? 1 + 0x1p-12 : 0);
        for (int l = 0; l <= best; l++) {
            float *r = mm_at_level(l, a, b, M, 1, 1);
            for (int64_t m = 0; m < M; m++)
                CU_ASSERT_EQUAL(r[m], 0x1p-24f);
            free(r);
        }
        tt_free(a);
        tt_free(b);
    }
    gp_cpu_dot_level(-1);
}

/* Attention's fused loops: the portable and AVX-512 builds give the same bits (f32, f16 and bf16
 * caches, heads of 20, 64 and 100, GQA, a prompt of 3 at positions 5..7). */
static void test_attention_levels(void)
{
    int best = gp_cpu_dot_level(-1);
    static const int64_t dims[] = {20, 64, 100};
    static const gp_dtype kts[] = {GP_F32, GP_F16, GP_BF16};
    for (int di = 0; di < 3; di++)
        for (int t = 0; t < 3; t++) {
            int64_t T = 3, H = 4, G = 2, D = dims[di], S = 8;
            tt *q = tt_rand(GP_F32, 3, (int64_t[]){T, H, D}, 0, 0.1, 1);
            tt *k = tt_rand(kts[t], 3, (int64_t[]){S, G, D}, 0, 0.1, 1);
            tt *v = tt_rand(kts[t], 3, (int64_t[]){S, G, D}, 0, 0.1, 1);
            int32_t pos[3] = {5, 6, 7};
            gp_ktensor in[4] = {q->k, k->k, v->k, {pos, GP_I32, 1, {3}, {4}}};
            gp_attrs at = {.f = {[GP_ATTENTION_SCALE] = 0.125}};
            float *r[3] = {NULL, NULL, NULL};
            for (int l = 0; l <= best; l++) {
                CU_ASSERT_EQUAL(gp_cpu_dot_level(l), l);
                tt *o = tt_new(GP_F32, 3, (int64_t[]){T, H, D}, 0);
                size_t ws = gp_cpu_workspace_bytes(GP_OP_ATTENTION, NULL, &o->k, in, 4, 1);
                void *w = malloc(ws);
                gp_cpu_compute(GP_OP_ATTENTION, &at, &o->k, in, 4, w, ws, 0, 1);
                r[l] = malloc(sizeof(float) * (size_t)(T * H * D));
                memcpy(r[l], o->k.data, sizeof(float) * (size_t)(T * H * D));
                free(w);
                tt_free(o);
                if (l > 0) {
                    int same = memcmp(r[0], r[l], sizeof(float) * (size_t)(T * H * D)) == 0;
                    if (!same)
                        fprintf(stderr, "\nattention D %lld %s: level %d differs from 0\n",
                                (long long)D, gp_dtype_name(kts[t]), l);
                    CU_ASSERT(same);
                }
            }
            for (int l = 0; l < 3; l++)
                free(r[l]);
            tt_free(q);
            tt_free(k);
            tt_free(v);
        }
    gp_cpu_dot_level(-1);
}

void gp_suite_kernels(void)
{
    static const gp_test_case tests[] = {
        {"f16 exhaustive round trip", test_f16_exhaustive},
        {"f16 rounding and ties", test_f16_rounding},
        {"bf16 exhaustive and ties", test_bf16},
        {"thread pool counts and barrier phases", test_threadpool},
        {"get_rows", test_get_rows},
        {"add sub mul div swiglu with broadcasting", test_binary},
        {"scale gelu gelu_erf silu", test_unary},
        {"matmul", test_matmul},
        {"matmul: every kernel build the same bits, products fused", test_matmul_levels},
        {"layer_norm rms_norm", test_norms},
        {"softmax and the causal mask", test_softmax},
        {"argmax: first of the largest, NaN never", test_argmax},
        {"rope both modes", test_rope},
        {"cont cast", test_copies},
        {"concat", test_concat},
        {"store", test_store},
        {"attention with GQA", test_attention},
        {"attention: a KV group's heads at once, the one-head bits", test_attention_grouped},
        {"attention: a ragged batch over KV blocks, the bits of each sequence alone",
         test_attention_ragged},
        {"attention: every kernel build the same bits", test_attention_levels},
        {"views compute nothing", test_views},
        {"gp_cpu_check", test_check},
        {"matmul through the pool", test_pool_matmul},
        {"matmul with a fused epilogue: the unfused nodes' bits", test_matmul_epilogue},
    };
    gp_test_add_suite("kernels", NULL, NULL, tests, GP_TEST_COUNT(tests));
}
