/* gp_cpu_check: the runtime's guard before a node runs, so a kernel never meets shapes it cannot
 * handle or an index out of range (ids and positions come from the caller, untrusted). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cpu/cpu_kernels.h"

static int fail(char *err, size_t n, gp_op op, const char *fmt, ...)
{
    const gp_op_info *info = gp_op_get(op);
    int k = snprintf(err, n, "%s: ", info ? info->name : "?");
    if (k >= 0 && (size_t)k < n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err + k, n - (size_t)k, fmt, ap);
        va_end(ap);
    }
    return -1;
}

static int is_float(gp_dtype t)
{
    return t == GP_F32 || t == GP_F16 || t == GP_BF16;
}

static int same_shape(const gp_ktensor *x, const gp_ktensor *y)
{
    if (x->ndim != y->ndim)
        return 0;
    for (int d = 0; d < x->ndim; d++)
        if (x->ne[d] != y->ne[d])
            return 0;
    return 1;
}

/* The first index of ids (i32 [n]) outside [0, bound), or -1. */
static int64_t bad_index(const gp_ktensor *ids, int64_t bound, int32_t *val)
{
    for (int64_t i = 0; i < ids->ne[0]; i++) {
        int32_t v;
        memcpy(&v, (const char *)ids->data + i * ids->nb[0], 4);
        if (v < 0 || v >= bound) {
            *val = v;
            return i;
        }
    }
    return -1;
}

/* An i32 [n] index vector with n = want. */
static int check_index(const gp_ktensor *ids, int64_t want, int64_t bound, const char *what,
                       gp_op op, char *err, size_t n)
{
    int32_t v = 0;
    if (ids->dtype != GP_I32 || ids->ndim != 1 || ids->ne[0] != want)
        return fail(err, n, op, "%s must be i32 [%lld]", what, (long long)want);
    int64_t i = bad_index(ids, bound, &v);
    if (i >= 0)
        return fail(err, n, op, "%s[%lld] = %d is out of range [0, %lld)", what, (long long)i, v,
                    (long long)bound);
    return 0;
}

/* A ragged batch's attention: seq [T] names rows of blocks [N, M], pos [T] stays under M * block,
 * and the blocks query t reads (those of positions 0..pos[t]) are blocks of the cache. */
static int check_blocks(const gp_attrs *a, const gp_ktensor *x, const gp_ktensor *k,
                        const gp_ktensor *in, gp_op op, char *err, size_t n)
{
    const gp_ktensor *pos = &in[3], *seq = &in[4], *tab = &in[5];
    int64_t block = a->i[GP_ATTENTION_BLOCK], T = x->ne[0];
    if (tab->dtype != GP_I32 || tab->ndim != 2 || block < 1 || k->ne[0] % block ||
        tab->ne[1] > INT32_MAX / block || a->i[GP_ATTENTION_RING])
        return fail(err, n, op, "blocks must be i32 [N, M] with block >= 1 dividing the cache "
                    "and no ring");
    if (check_index(seq, T, tab->ne[0], "seq", op, err, n) ||
        check_index(pos, T, tab->ne[1] * block, "pos", op, err, n))
        return -1;
    int64_t n_blocks = k->ne[0] / block;
    for (int64_t t = 0; t < T; t++) {
        int32_t s, p, b;
        memcpy(&s, (const char *)seq->data + t * seq->nb[0], 4);
        memcpy(&p, (const char *)pos->data + t * pos->nb[0], 4);
        for (int64_t j = 0; j <= p / block; j++) {
            memcpy(&b, (const char *)tab->data + s * tab->nb[0] + j * tab->nb[1], 4);
            if (b < 0 || b >= n_blocks)
                return fail(err, n, op, "blocks[%d, %lld] = %d (read by token %lld at position "
                            "%d) is out of range [0, %lld)", s, (long long)j, b, (long long)t, p,
                            (long long)n_blocks);
        }
    }
    return 0;
}

/* fail() for tensor i of a node: "out" (i < 0) or "input i" first, its name formatted only here,
 * on failure, since every eval checks the index nodes again. */
static int tensor_fail(char *err, size_t n, gp_op op, int i, const char *fmt, ...)
{
    char what[24], rest[160];
    if (i < 0)
        snprintf(what, sizeof what, "out");
    else
        snprintf(what, sizeof what, "input %d", i);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rest, sizeof rest, fmt, ap);
    va_end(ap);
    return fail(err, n, op, "%s %s", what, rest);
}

/* Tensor t: out (i < 0) or input i. */
static int check_tensor(const gp_ktensor *t, int i, gp_op op, char *err, size_t n)
{
    if (!t)
        return tensor_fail(err, n, op, i, "is missing");
    if (t->ndim < 0 || t->ndim > GP_MAX_DIMS || (int)t->dtype < 0 || t->dtype >= GP_DTYPE_COUNT)
        return tensor_fail(err, n, op, i, "has a bad rank %d or dtype %d", t->ndim, (int)t->dtype);
    int64_t count = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->ne[d] < 0)
            return tensor_fail(err, n, op, i, "has a negative dim %lld", (long long)t->ne[d]);
        count *= t->ne[d];
    }
    if (count > 0 && !t->data)
        return tensor_fail(err, n, op, i, "has no data");
    return 0;
}

/* Expert weight w (input i): dims [d0, d1, d2] of the dtype's whole rows, rows contiguous, as
 * the product kernels read them; float weights (read by gp_cpu_matmul, any strides) may be
 * strided views (Hugging Face gpt-oss's gate_up_proj, its bias), biases (inputs 5..8) too. */
static int expert_weight(const gp_ktensor *w, int i, int ndim, const int64_t *want, gp_op op,
                         char *err, size_t n)
{
    static const char *const names[] = {"x",           "router",    "gate",    "up",       "down",
                                        "router_bias", "gate_bias", "up_bias", "down_bias"};
    int ok = w->ndim == ndim;
    for (int d = 0; ok && d < ndim; d++)
        ok = w->ne[d] == want[d];
    int64_t k = want[ndim - 1];
    int quant = gp_dtype_is_quant(w->dtype);
    size_t row = quant ? gp_dtype_row_bytes(w->dtype, k) : gp_dtype_size(w->dtype) * (size_t)k;
    if (!ok || row == 0) {
        char shape[96];
        int at = 0;
        for (int d = 0; d < ndim; d++)
            at += snprintf(shape + at, sizeof shape - (size_t)at, "%s%lld", d ? ", " : "[",
                           (long long)want[d]);
        snprintf(shape + at, sizeof shape - (size_t)at, "]");
        return fail(err, n, op, "%s must be %s of whole %s rows", names[i], shape,
                    gp_dtype_name(w->dtype));
    }
    if (!quant && (w->dtype == GP_F32 || w->dtype == GP_F16 || w->dtype == GP_BF16))
        return 0; /* any strides (gp_cpu_matmul's general path) */
    if ((!quant && w->nb[ndim - 1] != (int64_t)gp_dtype_size(w->dtype)) ||
        (ndim == 3 && w->nb[1] != (int64_t)row) || w->nb[0] < (int64_t)row * (ndim == 3 ? want[1] : 1))
        return fail(err, n, op, "%s's rows must be contiguous", names[i]);
    return 0;
}

/* moe: x f32 [T, H] (rows of contiguous elements), router [E, H], gate and up [E, F, H], down
 * [E, H, F], out f32 [T, H]; 1 <= top_k <= min(E, GP_MOE_MAX_K); the norm and act known. */
static int check_moe(const gp_attrs *a, const gp_ktensor *out, const gp_ktensor *in, int n_in,
                     char *err, size_t n)
{
    const gp_op op = GP_OP_MOE;
    const gp_ktensor *x = &in[0];
    if (x->dtype != GP_F32 || x->ndim != 2 || x->nb[1] != 4 || in[1].ndim != 2 || in[2].ndim != 3)
        return fail(err, n, op, "expected x f32 [T, H] (rows contiguous), router [E, H] and "
                    "gate, up [E, F, H]");
    int64_t T = x->ne[0], H = x->ne[1], E = in[1].ne[0], F = in[2].ne[1];
    int64_t k = a->i[GP_MOE_TOP_K], norm = a->i[GP_MOE_NORM];
    int64_t r[2] = {E, H}, gu[3] = {E, F, H}, dn[3] = {E, H, F};
    if (expert_weight(&in[1], 1, 2, r, op, err, n) || expert_weight(&in[2], 2, 3, gu, op, err, n) ||
        expert_weight(&in[3], 3, 3, gu, op, err, n) || expert_weight(&in[4], 4, 3, dn, op, err, n))
        return -1;
    if (E < 1 || k < 1 || k > E || k > GP_MOE_MAX_K)
        return fail(err, n, op, "top_k %lld for %lld experts (expected 1..%d and at most E)",
                    (long long)k, (long long)E, GP_MOE_MAX_K);
    int64_t act = a->i[GP_MOE_ACT];
    if (norm < 0 || norm >= GP_MOE_NORM_COUNT || act < 0 || act >= GP_MOE_ACT_COUNT)
        return fail(err, n, op, "unknown norm %lld or act %lld", (long long)norm, (long long)act);
    if (act == GP_MOE_SWIGLU_OAI && !(a->f[GP_MOE_LIMIT] > 0))
        return fail(err, n, op, "the clamped swiglu needs a limit > 0");
    if (n_in != 5 && n_in != 9)
        return fail(err, n, op, "%d inputs: the four biases come together", n_in);
    int64_t rb[1] = {E}, gb[2] = {E, F}, db[2] = {E, H};
    if (n_in == 9 &&
        (expert_weight(&in[5], 5, 1, rb, op, err, n) || expert_weight(&in[6], 6, 2, gb, op, err, n) ||
         expert_weight(&in[7], 7, 2, gb, op, err, n) || expert_weight(&in[8], 8, 2, db, op, err, n)))
        return -1;
    for (int i = 5; i < n_in; i++)
        if (in[i].dtype != GP_F32 && in[i].dtype != GP_F16 && in[i].dtype != GP_BF16)
            return fail(err, n, op, "the biases must be f32, f16 or bf16");
    if (out->dtype != GP_F32 || out->ndim != 2 || out->ne[0] != T || out->ne[1] != H)
        return fail(err, n, op, "out must be f32 [%lld, %lld]", (long long)T, (long long)H);
    return 0;
}

static int check_shapes(gp_op op, const gp_attrs *a, const gp_ktensor *out, const gp_ktensor *in,
                        int n_in, char *err, size_t n)
{
    const gp_ktensor *x = n_in > 0 ? &in[0] : NULL;
    if (gp_op_computes_nothing(op))
        return 0;
    switch (op) {
    case GP_OP_GET_ROWS:
        if (x->ndim != 2 || out->ndim != 2 || out->ne[0] != in[1].ne[0] || out->ne[1] != x->ne[1])
            return fail(err, n, op, "expected table [V, C], ids [T], out [T, C]");
        return check_index(&in[1], out->ne[0], x->ne[0], "ids", op, err, n);
    case GP_OP_ADD:
    case GP_OP_SUB:
    case GP_OP_MUL:
    case GP_OP_DIV: {
        const gp_ktensor *y = &in[1];
        int nd = x->ndim > y->ndim ? x->ndim : y->ndim;
        if (out->ndim != nd)
            return fail(err, n, op, "out has %d dims, expected %d", out->ndim, nd);
        for (int d = 0; d < nd; d++) {
            int dx = d - (nd - x->ndim), dy = d - (nd - y->ndim);
            int64_t ex = dx >= 0 ? x->ne[dx] : 1, ey = dy >= 0 ? y->ne[dy] : 1;
            int64_t want = ex == 1 ? ey : ex;
            if ((ex != 1 && ey != 1 && ex != ey) || out->ne[d] != want)
                return fail(err, n, op, "dim %d: a %lld, b %lld, out %lld do not broadcast", d,
                            (long long)ex, (long long)ey, (long long)out->ne[d]);
        }
        return 0;
    }
    case GP_OP_SWIGLU:
        if (!same_shape(x, &in[1]) || !same_shape(x, out))
            return fail(err, n, op, "gate, up and out must have the same shape");
        return 0;
    case GP_OP_SCALE:
    case GP_OP_GELU:
    case GP_OP_GELU_ERF:
    case GP_OP_SILU:
    case GP_OP_SOFTMAX:
    case GP_OP_ALL_REDUCE:
        if (!same_shape(x, out) || (n_in > 1 && !same_shape(&in[1], out)))
            return fail(err, n, op, "x, y and out must have one shape");
        return 0;
    case GP_OP_CONT:
    case GP_OP_CAST:
        if (!same_shape(x, out))
            return fail(err, n, op, "out must have the shape of x");
        return 0;
    case GP_OP_MOE:
        return check_moe(a, out, in, n_in, err, n);
    case GP_OP_ARGMAX: {
        int ok = x->ndim >= 1 && out->ndim == x->ndim - 1 && out->dtype == GP_I32;
        for (int d = 0; ok && d < out->ndim; d++)
            ok = out->ne[d] == x->ne[d];
        return ok ? 0 : fail(err, n, op, "expected x [..., N] and out i32 [...]");
    }
    case GP_OP_MATMUL: {
        const gp_ktensor *y = &in[1];
        if (x->ndim < 2 || y->ndim < 2 || out->ndim < 2)
            return fail(err, n, op, "a, b and out need at least 2 dims");
        int ta = a->i[GP_MATMUL_TA] != 0, tb = a->i[GP_MATMUL_TB] != 0;
        int64_t M = x->ne[x->ndim - 2 + ta], K = x->ne[x->ndim - 1 - ta];
        int64_t K2 = y->ne[y->ndim - 2 + tb], N = y->ne[y->ndim - 1 - tb];
        if (K != K2 || out->ne[out->ndim - 2] != M || out->ne[out->ndim - 1] != N)
            return fail(err, n, op, "a is [%lld, %lld], b is [%lld, %lld], out is [%lld, %lld]",
                        (long long)M, (long long)K, (long long)K2, (long long)N,
                        (long long)out->ne[out->ndim - 2], (long long)out->ne[out->ndim - 1]);
        int nd = x->ndim > y->ndim ? x->ndim : y->ndim;
        if (out->ndim != nd)
            return fail(err, n, op, "out has %d dims, expected %d", out->ndim, nd);
        for (int d = 0; d < nd - 2; d++) {
            int dx = d - (nd - x->ndim), dy = d - (nd - y->ndim);
            int64_t ex = dx >= 0 ? x->ne[dx] : 1, ey = dy >= 0 ? y->ne[dy] : 1;
            if ((ex != 1 && ey != 1 && ex != ey) || out->ne[d] != (ex == 1 ? ey : ex))
                return fail(err, n, op, "batch dim %d: a %lld, b %lld, out %lld", d, (long long)ex,
                            (long long)ey, (long long)out->ne[d]);
        }
        if (out->dtype != GP_F32)
            return fail(err, n, op, "out must be f32");
        if (gp_dtype_is_quant(y->dtype)) {
            /* The quantized path: x [M, K] f32 rows, W [N, K] rows of blocks, out packed. */
            if (ta || !tb || x->ndim != 2 || y->ndim != 2 || x->dtype != GP_F32 ||
                x->nb[1] != 4 || x->nb[0] % 4 || out->nb[1] != 4 || out->nb[0] % 4)
                return fail(err, n, op, "a %s b needs an f32 a [M, K] with contiguous rows and "
                            "b [N, K] (tb=1)", gp_dtype_name(y->dtype));
            if (K % gp_dtype_block(y->dtype))
                return fail(err, n, op, "K = %lld is not a multiple of %s's block of %d",
                            (long long)K, gp_dtype_name(y->dtype), gp_dtype_block(y->dtype));
        }
        return 0;
    }
    case GP_OP_LAYER_NORM:
    case GP_OP_RMS_NORM:
        if (x->ndim < 1 || !same_shape(x, out))
            return fail(err, n, op, "out must have the shape of x, with at least 1 dim");
        for (int i = 1; i < n_in; i++)
            if (in[i].ndim != 1 || in[i].ne[0] != x->ne[x->ndim - 1])
                return fail(err, n, op, "input %d must be [%lld]", i,
                            (long long)x->ne[x->ndim - 1]);
        return 0;
    case GP_OP_ROPE: {
        if (x->ndim != 3 || !same_shape(x, out))
            return fail(err, n, op, "x and out must be [T, H, D]");
        int64_t mode = a->i[GP_ROPE_MODE], dims = a->i[GP_ROPE_N_DIMS];
        if ((mode != 0 && mode != 1) || dims < 0 || dims > x->ne[2] || dims % 2)
            return fail(err, n, op, "bad mode %lld or rotated dims %lld (D = %lld)",
                        (long long)mode, (long long)dims, (long long)x->ne[2]);
        if (in[1].dtype != GP_I32 || in[1].ndim != 1 || in[1].ne[0] != x->ne[0])
            return fail(err, n, op, "pos must be i32 [%lld]", (long long)x->ne[0]);
        if (n_in > 2 && (in[2].dtype != GP_F32 || in[2].ndim != 1 || in[2].ne[0] != dims / 2))
            return fail(err, n, op, "freq_factors must be f32 [%lld]", (long long)(dims / 2));
        return gp_rope_check_scaling(a, err, n);
    }
    case GP_OP_CONCAT: {
        const gp_ktensor *y = &in[1];
        int64_t axis = a->i[GP_CONCAT_AXIS], ax = axis < 0 ? axis + x->ndim : axis;
        if (ax < 0 || ax >= x->ndim || y->ndim != x->ndim || out->ndim != x->ndim)
            return fail(err, n, op, "bad axis %lld or ranks", (long long)axis);
        for (int d = 0; d < x->ndim; d++) {
            int64_t want = d == ax ? x->ne[d] + y->ne[d] : x->ne[d];
            if ((d != ax && y->ne[d] != x->ne[d]) || out->ne[d] != want)
                return fail(err, n, op, "dim %d: a %lld, b %lld, out %lld", d,
                            (long long)x->ne[d], (long long)y->ne[d], (long long)out->ne[d]);
        }
        return 0;
    }
    case GP_OP_STORE: {
        const gp_ktensor *src = &in[2];
        if (x->ndim < 1 || src->ndim != x->ndim)
            return fail(err, n, op, "dst and src need the same rank, at least 1");
        for (int d = 1; d < x->ndim; d++)
            if (src->ne[d] != x->ne[d])
                return fail(err, n, op, "dim %d: dst %lld, src %lld", d, (long long)x->ne[d],
                            (long long)src->ne[d]);
        if (!is_float(src->dtype) || !is_float(x->dtype))
            return fail(err, n, op, "dst and src must be float tensors");
        int64_t ring = a->i[GP_STORE_RING];
        if (ring != 0 && ring != 1)
            return fail(err, n, op, "bad ring flag %lld", (long long)ring);
        /* A ring takes any position (row pos % S). */
        return check_index(&in[1], src->ne[0], ring ? INT32_MAX : x->ne[0], "pos", op, err, n);
    }
    case GP_OP_ATTENTION: {
        const gp_ktensor *k = &in[1], *v = &in[2];
        if (x->ndim != 3 || k->ndim != 3 || !same_shape(k, v) || !same_shape(x, out))
            return fail(err, n, op, "expected q, out [T, H, D] and k, v [S, G, D]");
        if (k->ne[2] != x->ne[2] || k->ne[1] < 1 || x->ne[1] % k->ne[1])
            return fail(err, n, op, "q [%lld, %lld, %lld] does not fit k [%lld, %lld, %lld]",
                        (long long)x->ne[0], (long long)x->ne[1], (long long)x->ne[2],
                        (long long)k->ne[0], (long long)k->ne[1], (long long)k->ne[2]);
        if (!is_float(k->dtype) || !is_float(v->dtype))
            return fail(err, n, op, "k and v must be float tensors");
        int64_t window = a->i[GP_ATTENTION_WINDOW], ring = a->i[GP_ATTENTION_RING];
        if (window < 0 || window > INT32_MAX)
            return fail(err, n, op, "bad window %lld", (long long)window);
        if (ring != 0 && ring != 1)
            return fail(err, n, op, "bad ring flag %lld", (long long)ring);
        if (ring && (window < 1 || window + x->ne[0] - 1 > k->ne[0]))
            return fail(err, n, op, "a ring of %lld rows cannot hold a window of %lld for %lld "
                        "new tokens (needs window + tokens - 1 rows)", (long long)k->ne[0],
                        (long long)window, (long long)x->ne[0]);
        if (a->i[GP_ATTENTION_SINKS] &&
            (n_in != 5 || in[4].dtype != GP_F32 || in[4].ndim != 1 || in[4].ne[0] != x->ne[1]))
            return fail(err, n, op, "sinks must be input 4, f32 [%lld]", (long long)x->ne[1]);
        if (n_in == 6)
            return check_blocks(a, x, k, in, op, err, n);
        return check_index(&in[3], x->ne[0], ring ? INT32_MAX : k->ne[0], "pos", op, err, n);
    }
    default:
        return fail(err, n, op, "unknown op %d", (int)op);
    }
}

int gp_cpu_check(gp_op op, const gp_attrs *a, const gp_ktensor *out, const gp_ktensor *in, int n_in,
                 char *err, size_t err_size)
{
    const gp_op_info *info = gp_op_get(op);
    if (err_size)
        err[0] = '\0';
    if (!info)
        return fail(err, err_size, op, "unknown op %d", (int)op);
    if (!a || n_in < info->min_inputs || n_in > info->max_inputs || (n_in > 0 && !in))
        return fail(err, err_size, op, "%d inputs, expected %d..%d", n_in, info->min_inputs,
                    info->max_inputs);
    if (check_tensor(out, -1, op, err, err_size))
        return -1;
    for (int i = 0; i < n_in; i++) {
        if (check_tensor(&in[i], i, op, err, err_size))
            return -1;
        /* Index inputs are checked per op; every other input and out are floats (cast: any). */
        int index_in = (op == GP_OP_GET_ROWS && i == 1) || (op == GP_OP_ROPE && i == 1) ||
                       (op == GP_OP_STORE && i == 1) || (op == GP_OP_ATTENTION && i >= 3 &&
                                                      !(i == 4 && a->i[GP_ATTENTION_SINKS]));
        /* Quantized weights: get_rows' table, matmul's b, moe's router and experts (checked
         * with the shapes). */
        int quant_in = gp_dtype_is_quant(in[i].dtype) &&
                       ((op == GP_OP_GET_ROWS && i == 0) || (op == GP_OP_MATMUL && i == 1) ||
                        (op == GP_OP_MOE && i >= 1));
        if (!index_in && !quant_in && !is_float(in[i].dtype) && op != GP_OP_CAST &&
            !info->is_view)
            return fail(err, err_size, op, "input %d must be a float tensor, not %s", i,
                        gp_dtype_name(in[i].dtype));
    }
    if (!is_float(out->dtype) && op != GP_OP_CAST && op != GP_OP_ARGMAX && !info->is_view)
        return fail(err, err_size, op, "out must be a float tensor, not %s",
                    gp_dtype_name(out->dtype));
    return check_shapes(op, a, out, in, n_in, err, err_size);
}
