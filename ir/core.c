/* The tables shared by compiler and runtime: dtype sizes and names, tensor kind names and the op
 * table (language name, arity, in-place input, view-ness); and gp_errf, the one formatter of error
 * messages into a caller's buffer. */
#include "ir/core.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;        /* bytes of an element; 0 for block formats */
    int block;          /* elements per block */
    size_t block_bytes; /* bytes per block */
} dtypes[GP_DTYPE_COUNT] = {
    [GP_F32] = {"f32", 4, 1, 4},
    [GP_F16] = {"f16", 2, 1, 2},
    [GP_BF16] = {"bf16", 2, 1, 2},
    [GP_I32] = {"i32", 4, 1, 4},
    [GP_Q4_0] = {"q4_0", 0, 32, 2 + 16},
    [GP_Q4_1] = {"q4_1", 0, 32, 2 + 2 + 16},
    [GP_Q5_0] = {"q5_0", 0, 32, 2 + 4 + 16},
    [GP_Q5_1] = {"q5_1", 0, 32, 2 + 2 + 4 + 16},
    [GP_Q8_0] = {"q8_0", 0, 32, 2 + 32},
    [GP_Q4_K] = {"q4_k", 0, 256, 2 + 2 + 12 + 128},
    [GP_Q5_K] = {"q5_k", 0, 256, 2 + 2 + 12 + 32 + 128},
    [GP_Q6_K] = {"q6_k", 0, 256, 128 + 64 + 16 + 2},
};

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
    [GP_OP_ATTENTION] = {"attention", 4, 4, -1, 0},
    [GP_OP_ALL_REDUCE] = {"all_reduce", 1, 2, 0, 0},
    [GP_OP_ARGMAX] = {"argmax", 1, 1, -1, 0},
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

/* ---- rope's frequency scaling, linear, longrope and llama3 (core.h, GP_OP_ROPE) ---- */

int64_t gp_rope_factors_pack(float low_freq_factor, float high_freq_factor)
{
    uint32_t lo, hi;
    memcpy(&lo, &low_freq_factor, 4);
    memcpy(&hi, &high_freq_factor, 4);
    return (int64_t)(((uint64_t)hi << 32) | lo);
}

void gp_rope_factors(const gp_attrs *a, float *low_freq_factor, float *high_freq_factor)
{
    uint64_t v = (uint64_t)a->i[3];
    uint32_t lo = (uint32_t)v, hi = (uint32_t)(v >> 32);
    memcpy(low_freq_factor, &lo, 4);
    memcpy(high_freq_factor, &hi, 4);
}

int gp_rope_check_scaling(const gp_attrs *a, char *err, size_t n)
{
    if (a->i[2] == 0)
        return 0;
    if (a->i[2] == GP_ROPE_LINEAR) {
        if (a->f[1] > 0 && isfinite(a->f[1]))
            return 0;
        gp_errf(err, n, "rope: bad linear scaling (factor %g): expected a factor > 0", a->f[1]);
        return -1;
    }
    if (a->i[2] == GP_ROPE_LONGROPE) {
        if (a->f[1] > 0 && isfinite(a->f[1]))
            return 0;
        gp_errf(err, n, "rope: bad longrope scaling (attn_factor %g): expected a factor > 0",
                a->f[1]);
        return -1;
    }
    float lo, hi;
    gp_rope_factors(a, &lo, &hi);
    if (a->i[2] < 0 || !(a->f[1] > 0) || !isfinite(a->f[1]) || !(lo > 0) || !(hi > lo) ||
        !isfinite(hi)) {
        gp_errf(err, n,
                "rope: bad llama3 scaling (original_max_position_embeddings %lld, factor %g, "
                "low_freq_factor %g, high_freq_factor %g): expected L > 0, factor > 0 and "
                "0 < low < high",
                (long long)a->i[2], a->f[1], (double)lo, (double)hi);
        return -1;
    }
    return 0;
}

double gp_rope_freq(const gp_attrs *a, int64_t j, int64_t n)
{
    double freq = pow(a->f[0], -2.0 * (double)j / (double)n);
    if (a->i[2] == GP_ROPE_LINEAR)
        return freq / a->f[1];
    if (a->i[2] <= 0)
        return freq;
    float lo, hi;
    gp_rope_factors(a, &lo, &hi);
    double len = (double)a->i[2], factor = a->f[1];
    double wavelen = 2.0 * 3.14159265358979323846 / freq;
    if (wavelen < len / hi)
        return freq; /* high frequencies: unchanged */
    if (wavelen > len / lo)
        return freq / factor; /* low frequencies: stretched by factor */
    double s = (len / wavelen - lo) / (hi - lo);
    return (1.0 - s) * freq / factor + s * freq;
}
