/* The tables shared by compiler and runtime: dtype sizes and names, tensor kind names, the op
 * table (language name, arity, in-place input, view-ness) and its attributes (GP_OP_ATTRS); and
 * gp_errf, the one formatter of error messages into a caller's buffer; gp_read_stream. */
#include "ir/core.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;        /* bytes of an element; 0 for block formats */
    int block;          /* elements per block */
    size_t block_bytes; /* bytes per block */
    uint32_t ggml;      /* ggml type id */
} dtypes[GP_DTYPE_COUNT] = {
#define GP_DTYPE_ROW_(T, name, size, block, bytes, ggml) [T] = {name, size, block, bytes, ggml},
    GP_DTYPE_TABLE(GP_DTYPE_ROW_)
#undef GP_DTYPE_ROW_
};

int gp_dtype_from_ggml(uint32_t ggml_type)
{
    for (int t = 0; t < GP_DTYPE_COUNT; t++)
        if (dtypes[t].name && dtypes[t].ggml == ggml_type)
            return t;
    return -1;
}

size_t gp_dtype_size(gp_dtype t)
{
    if ((int)t < 0 || t >= GP_DTYPE_COUNT)
        return 0;
    return dtypes[t].size;
}

int gp_dtype_block(gp_dtype t)
{
    if ((int)t < 0 || t >= GP_DTYPE_COUNT)
        return 0;
    return dtypes[t].block;
}

size_t gp_dtype_block_bytes(gp_dtype t)
{
    if ((int)t < 0 || t >= GP_DTYPE_COUNT)
        return 0;
    return dtypes[t].block_bytes;
}

int gp_dtype_is_quant(gp_dtype t)
{
    return gp_dtype_block(t) > 1;
}

size_t gp_dtype_row_bytes(gp_dtype t, int64_t n)
{
    int b = gp_dtype_block(t);
    if (b <= 0 || n < 0 || n % b)
        return 0;
    return (size_t)(n / b) * dtypes[t].block_bytes;
}

const char *gp_dtype_name(gp_dtype t)
{
    if ((int)t < 0 || t >= GP_DTYPE_COUNT)
        return "?";
    return dtypes[t].name;
}

int gp_dtype_from_name(const char *name, gp_dtype *out)
{
    if (!name)
        return -1;
    for (int t = 0; t < GP_DTYPE_COUNT; t++) {
        if (strcmp(name, dtypes[t].name) == 0) {
            if (out)
                *out = (gp_dtype)t;
            return 0;
        }
    }
    return -1;
}

static const char *const kind_names[GP_TENSOR_KIND_COUNT] = {
    [GP_TENSOR_INPUT] = "input",   [GP_TENSOR_OUTPUT] = "output",
    [GP_TENSOR_WEIGHT] = "weight", [GP_TENSOR_STATE] = "state",
    [GP_TENSOR_INTERMEDIATE] = "intermediate", [GP_TENSOR_VIEW] = "view",
};

const char *gp_tensor_kind_name(gp_tensor_kind k)
{
    if ((int)k < 0 || k >= GP_TENSOR_KIND_COUNT)
        return "?";
    return kind_names[k];
}

/* name, min inputs, max inputs, in-place input (-1: none), is_view */
static const gp_op_info ops[GP_OP_COUNT] = {
    [GP_OP_NONE] = {"none", 0, 0, -1, 0},
    [GP_OP_GET_ROWS] = {"get_rows", 2, 2, -1, 0},
    [GP_OP_ADD] = {"add", 2, 2, 0, 0},
    [GP_OP_SUB] = {"sub", 2, 2, 0, 0},
    [GP_OP_MUL] = {"mul", 2, 2, 0, 0},
    [GP_OP_DIV] = {"div", 2, 2, 0, 0},
    [GP_OP_SCALE] = {"scale", 1, 1, 0, 0},
    [GP_OP_MATMUL] = {"matmul", 2, 2, -1, 0},
    [GP_OP_LAYER_NORM] = {"layer_norm", 2, 3, 0, 0},
    [GP_OP_RMS_NORM] = {"rms_norm", 2, 2, 0, 0},
    [GP_OP_SOFTMAX] = {"softmax", 1, 1, 0, 0},
    [GP_OP_GELU] = {"gelu", 1, 1, 0, 0},
    [GP_OP_GELU_ERF] = {"gelu_erf", 1, 1, 0, 0},
    [GP_OP_SILU] = {"silu", 1, 1, 0, 0},
    [GP_OP_SWIGLU] = {"swiglu", 2, 2, 0, 0},
    [GP_OP_ROPE] = {"rope", 2, 3, 0, 0},
    [GP_OP_RESHAPE] = {"reshape", 1, 1, -1, 1},
    [GP_OP_PERMUTE] = {"permute", 1, 1, -1, 1},
    [GP_OP_SLICE] = {"slice", 1, 1, -1, 1},
    [GP_OP_VIEW] = {"view", 1, 1, -1, 1},
    [GP_OP_CONT] = {"cont", 1, 1, -1, 0},
    [GP_OP_CAST] = {"cast", 1, 1, -1, 0},
    [GP_OP_CONCAT] = {"concat", 2, 2, -1, 0},
    [GP_OP_STORE] = {"store", 3, 3, -1, 1},
    [GP_OP_ATTENTION] = {"attention", 4, 6, -1, 0},
    [GP_OP_ALL_REDUCE] = {"all_reduce", 1, 2, 0, 0},
    [GP_OP_ARGMAX] = {"argmax", 1, 1, -1, 0},
    [GP_OP_MOE] = {"moe", 5, 9, -1, 0},
};

const gp_op_info *gp_op_get(gp_op op)
{
    if ((int)op < 0 || op >= GP_OP_COUNT)
        return NULL;
    return &ops[op];
}

int gp_op_from_name(const char *name, gp_op *out)
{
    if (!name)
        return -1;
    /* GP_OP_NONE is not part of the language. */
    for (int op = GP_OP_NONE + 1; op < GP_OP_COUNT; op++) {
        if (strcmp(name, ops[op].name) == 0) {
            if (out)
                *out = (gp_op)op;
            return 0;
        }
    }
    return -1;
}

void gp_errf(char *err, size_t n, const char *fmt, ...)
{
    if (!err || n == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
}

int gp_err_bad(char *err, size_t n, const char *path, const char *what, const char *fmt, ...)
{
    if (!err || n == 0)
        return -1;
    char reason[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    snprintf(err, n, "%s: bad %s (%s)", path, what, reason);
    return -1;
}

char *gp_read_stream(FILE *f, size_t *len)
{
    size_t cap = 1 << 16, n = 0, got;
    char *buf = malloc(cap + 1);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *nb = cap > (SIZE_MAX - 1) / 2 ? NULL : realloc(buf, 2 * cap + 1);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    if (buf) {
        buf[n] = '\0';
        *len = n;
    }
    return buf;
}

/* ---- op attributes (core.h, GP_OP_ATTRS) ---- */

#define ATTR_LEN_ALWAYS 1
#define ATTR_LEN_NONZERO 1
#define ATTR_LEN_DIMS GP_MAX_DIMS
#define ATTR_ENTRY(op, kind, slot, name, label, show) \
    {GP_OP_##op, GP_ATTR_##kind, slot, ATTR_LEN_##show, label, GP_ATTR_##show},
static const gp_attr_info attrs[] = {GP_OP_ATTRS(ATTR_ENTRY)};
#define N_ATTRS ((int)(sizeof attrs / sizeof attrs[0]))

const gp_attr_info *gp_attr_table(int *n)
{
    *n = N_ATTRS;
    return attrs;
}

const gp_attr_info *gp_op_attrs(gp_op op, int *n)
{
    int k = 0;
    while (k < N_ATTRS && attrs[k].op != op)
        k++;
    int m = 0;
    while (k + m < N_ATTRS && attrs[k + m].op == op)
        m++;
    *n = m;
    return m ? &attrs[k] : NULL;
}

int gp_op_attr_slots(gp_op op, gp_attr_kind kind)
{
    int n, top = 0;
    const gp_attr_info *e = gp_op_attrs(op, &n);
    for (int k = 0; k < n; k++)
        if (e[k].kind == kind && e[k].slot + e[k].len > top)
            top = e[k].slot + e[k].len;
    return top;
}

void gp_attrs_print(gp_op op, const gp_attrs *a, int out_ndim, FILE *out)
{
    int n;
    const gp_attr_info *e = gp_op_attrs(op, &n);
    for (int k = 0; k < n; k++, e++) {
        if (e->show == GP_ATTR_DIMS) { /* integer arrays only (permute's axes) */
            fprintf(out, " %s=(", e->name);
            for (int d = 0; d < out_ndim && d < e->len; d++)
                fprintf(out, "%s%lld", d ? ", " : "", (long long)a->i[e->slot + d]);
            fprintf(out, ")");
        } else if (e->kind == GP_ATTR_I) {
            if (e->show == GP_ATTR_ALWAYS || a->i[e->slot] != 0)
                fprintf(out, " %s=%lld", e->name, (long long)a->i[e->slot]);
        } else if (e->show == GP_ATTR_ALWAYS || a->f[e->slot] != 0) {
            fprintf(out, " %s=%g", e->name, a->f[e->slot]);
        }
    }
}

/* ---- rope's frequency scaling, linear, longrope, llama3 and yarn (core.h, GP_OP_ROPE) ---- */

int gp_rope_check_scaling(const gp_attrs *a, char *err, size_t n)
{
    int64_t scaling = a->i[GP_ROPE_SCALING];
    double factor = a->f[GP_ROPE_FACTOR];
    if (scaling == 0)
        return 0;
    if (scaling == GP_ROPE_LINEAR) {
        if (factor > 0 && isfinite(factor))
            return 0;
        gp_errf(err, n, "rope: bad linear scaling (factor %g): expected a factor > 0", factor);
        return -1;
    }
    if (scaling == GP_ROPE_LONGROPE) {
        if (factor > 0 && isfinite(factor))
            return 0;
        gp_errf(err, n, "rope: bad longrope scaling (attn_factor %g): expected a factor > 0",
                factor);
        return -1;
    }
    /* float32 values (core.h, gp_attrs), compared as such */
    float lo = (float)a->f[GP_ROPE_LOW_FACTOR], hi = (float)a->f[GP_ROPE_HIGH_FACTOR];
    if (scaling == GP_ROPE_YARN) {
        if (factor > 0 && isfinite(factor) && lo >= 0 && hi > lo && isfinite(hi))
            return 0;
        gp_errf(err, n,
                "rope: bad yarn scaling (factor %g, correction range %g..%g): expected a "
                "factor > 0 and 0 <= low < high",
                factor, (double)lo, (double)hi);
        return -1;
    }
    if (scaling < 0 || !(factor > 0) || !isfinite(factor) || !(lo > 0) || !(hi > lo) ||
        !isfinite(hi)) {
        gp_errf(err, n,
                "rope: bad llama3 scaling (original_max_position_embeddings %lld, factor %g, "
                "low_freq_factor %g, high_freq_factor %g): expected L > 0, factor > 0 and "
                "0 < low < high",
                (long long)scaling, factor, (double)lo, (double)hi);
        return -1;
    }
    return 0;
}

double gp_rope_freq(const gp_attrs *a, int64_t j, int64_t n)
{
    int64_t scaling = a->i[GP_ROPE_SCALING];
    double freq = pow(a->f[GP_ROPE_THETA], -2.0 * (double)j / (double)n);
    if (scaling == GP_ROPE_LINEAR)
        return freq / a->f[GP_ROPE_FACTOR];
    if (scaling == GP_ROPE_YARN) { /* the ramp in float32, as transformers computes it */
        float lo = (float)a->f[GP_ROPE_LOW_FACTOR], hi = (float)a->f[GP_ROPE_HIGH_FACTOR];
        float r = ((float)j - lo) / (hi - lo);
        r = r < 0.0f ? 0.0f : r > 1.0f ? 1.0f : r;
        return freq / a->f[GP_ROPE_FACTOR] * (double)r + freq * (1.0 - (double)r);
    }
    if (scaling <= 0)
        return freq;
    /* float32 values (core.h, gp_attrs): high - low is a float32 difference */
    float lo = (float)a->f[GP_ROPE_LOW_FACTOR], hi = (float)a->f[GP_ROPE_HIGH_FACTOR];
    double len = (double)scaling, factor = a->f[GP_ROPE_FACTOR];
    double wavelen = 2.0 * 3.14159265358979323846 / freq;
    if (wavelen < len / hi)
        return freq; /* high frequencies: unchanged */
    if (wavelen > len / lo)
        return freq / factor; /* low frequencies: stretched by factor */
    double s = (len / wavelen - lo) / (hi - lo);
    return (1.0 - s) * freq / factor + s * freq;
}

float gp_rope_cos_factor(const gp_attrs *a)
{
    int64_t scaling = a->i[GP_ROPE_SCALING];
    double factor = a->f[GP_ROPE_FACTOR];
    if (scaling == GP_ROPE_LONGROPE)
        return (float)factor;
    if (scaling == GP_ROPE_YARN && factor > 1)
        return (float)(0.1 * log(factor) + 1.0);
    return 1.0f;
}

void gp_rope_yarn_range(int64_t n, double theta, double L, double beta_fast, double beta_slow,
                        int truncate, double *low, double *high)
{
    const double pi = 3.14159265358979323846;
    double lo = (double)n * log(L / (beta_fast * 2 * pi)) / (2 * log(theta));
    double hi = (double)n * log(L / (beta_slow * 2 * pi)) / (2 * log(theta));
    if (truncate) {
        lo = floor(lo);
        hi = ceil(hi);
    }
    lo = lo > 0 ? lo : 0;
    hi = hi < (double)(n - 1) ? hi : (double)(n - 1);
    if (lo == hi)
        hi += 0.001;
    *low = lo;
    *high = hi;
}
