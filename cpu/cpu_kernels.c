/* CPU kernels for the row-wise ops (elementwise, broadcasting arithmetic, norms, softmax, rope,
 * copies, lookups, stores) and the dispatcher; matmul and attention live in their own files. */
#include "cpu/cpu_kernels.h"

#include <math.h>
#include <string.h>

#include "cpu/cpu_internal.h"
#include "cpu/moe.h"
#include "cpu/quant.h"
#include "plan/plan.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#include <stdatomic.h>
/* Contiguous f16 -> f32 with the F16C instruction (exact, NaNs quieted: the same bits as
 * gp_f16_to_f32), for CPUs that have it: weights are often f16, and this runs per matmul block. */
__attribute__((target("avx,f16c"))) static void f16_row_f16c(float *dst, const char *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + 2 * i))));
    for (; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        dst[i] = gp_f16_to_f32(h);
    }
}
/* Whether the CPU (and OS, for the AVX registers) supports F16C; asked once, then cached. */
static int have_f16c(void)
{
    static atomic_int known; /* 0: not asked yet, 1: no, 2: yes */
    int s = atomic_load_explicit(&known, memory_order_relaxed);
    if (s == 0) {
        unsigned a, b, c, d;
        s = __builtin_cpu_supports("avx") && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) ? 2 : 1;
        atomic_store_explicit(&known, s, memory_order_relaxed);
    }
    return s == 2;
}
#define GP_HAVE_F16C() have_f16c()
#elif defined(__aarch64__) && defined(__GNUC__)
#include <arm_neon.h>
/* The same with FCVTL, which every ARMv8-A processor has (exact, NaNs quieted: gp_f16_to_f32's
 * bits). */
static void f16_row_f16c(float *dst, const char *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint16_t h[8];
        memcpy(h, src + 2 * i, sizeof h);
        float16x8_t v = vreinterpretq_f16_u16(vld1q_u16(h));
        vst1q_f32(dst + i, vcvt_f32_f16(vget_low_f16(v)));
        vst1q_f32(dst + i + 4, vcvt_high_f32_f16(v));
    }
    for (; i < n; i++) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        dst[i] = gp_f16_to_f32(h);
    }
}
#define GP_HAVE_F16C() 1
#else
#define GP_HAVE_F16C() 0
#define f16_row_f16c(dst, src, n) ((void)0)
#endif

void gp_cpu_load_row(float *dst, const char *src, int64_t n, int64_t stride, gp_dtype t)
{
    switch (t) {
    case GP_F32:
        if (stride == 4) {
            memcpy(dst, src, (size_t)n * 4);
        } else {
            for (int64_t i = 0; i < n; i++)
                memcpy(&dst[i], src + i * stride, 4);
        }
        break;
    case GP_F16:
        if (stride == 2 && GP_HAVE_F16C()) {
            f16_row_f16c(dst, src, n);
            break;
        }
        if (stride == 2) { /* a constant stride, so the loop vectorizes */
            for (int64_t i = 0; i < n; i++) {
                uint16_t h;
                memcpy(&h, src + 2 * i, 2);
                dst[i] = gp_f16_to_f32(h);
            }
            break;
        }
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + i * stride, 2);
            dst[i] = gp_f16_to_f32(h);
        }
        break;
    case GP_BF16:
        if (stride == 2) {
            for (int64_t i = 0; i < n; i++) {
                uint16_t h;
                memcpy(&h, src + 2 * i, 2);
                dst[i] = gp_bf16_to_f32(h);
            }
            break;
        }
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + i * stride, 2);
            dst[i] = gp_bf16_to_f32(h);
        }
        break;
    case GP_I32:
        for (int64_t i = 0; i < n; i++) {
            int32_t v;
            memcpy(&v, src + i * stride, 4);
            dst[i] = (float)v;
        }
        break;
    default:
        GP_ASSERT(!"load_row: bad dtype");
    }
}

void gp_cpu_store_row(char *dst, int64_t stride, gp_dtype t, const float *src, int64_t n)
{
    switch (t) {
    case GP_F32:
        if (stride == 4) {
            memcpy(dst, src, (size_t)n * 4);
        } else {
            for (int64_t i = 0; i < n; i++)
                memcpy(dst + i * stride, &src[i], 4);
        }
        break;
    case GP_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = gp_f32_to_f16(src[i]);
            memcpy(dst + i * stride, &h, 2);
        }
        break;
    case GP_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = gp_f32_to_bf16(src[i]);
            memcpy(dst + i * stride, &h, 2);
        }
        break;
    case GP_I32:
        for (int64_t i = 0; i < n; i++) {
            int32_t v = gp_f32_to_i32_sat(src[i]);
            memcpy(dst + i * stride, &v, 4);
        }
        break;
    default:
        GP_ASSERT(!"store_row: bad dtype");
    }
}

/* n elements from src (dtype st, stride ss) to dst (dt, ds): raw bytes when the dtypes match (exact
 * for i32 and NaN payloads too), else through f32. */
static void copy_row(char *dst, int64_t ds, gp_dtype dt, const char *src, int64_t ss, gp_dtype st,
                     int64_t n)
{
    if (dt == st) {
        size_t es = gp_dtype_size(dt);
        if (ds == (int64_t)es && ss == (int64_t)es) {
            memmove(dst, src, (size_t)n * es);
        } else {
            for (int64_t i = 0; i < n; i++)
                memmove(dst + i * ds, src + i * ss, es);
        }
        return;
    }
    float buf[GP_CHUNK];
    for (int64_t c = 0; c < n; c += GP_CHUNK) {
        int64_t m = n - c < GP_CHUNK ? n - c : GP_CHUNK;
        gp_cpu_load_row(buf, src + c * ss, m, ss, st);
        gp_cpu_store_row(dst + c * ds, ds, dt, buf, m);
    }
}

static int32_t load_i32(const char *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* ---- elementwise ---- */

static float silu(float x)
{
    return x / (1.0f + gp_expf(-x));
}

static void unary_apply(gp_op op, const gp_attrs *a, float *x, int64_t n)
{
    switch (op) {
    case GP_OP_SCALE: {
        float s = (float)a->f[GP_SCALE_FACTOR], cap = (float)a->f[GP_SCALE_SOFTCAP];
        for (int64_t i = 0; i < n; i++)
            x[i] *= s;
        if (cap > 0) /* soft-capping */
            for (int64_t i = 0; i < n; i++)
                x[i] = cap * tanhf(x[i] / cap);
        break;
    }
    case GP_OP_GELU:
        /* 0.5 x (1 + tanh u) written as x / (1 + exp(-2u)): the same function without the
         * cancellation of 1 + tanh u for negative x. 1.5957691 = 2 sqrt(2 / pi). */
        for (int64_t i = 0; i < n; i++) {
            float v = x[i];
            x[i] = v / (1.0f + gp_expf(-1.5957691216f * (v + 0.044715f * v * v * v)));
        }
        break;
    case GP_OP_GELU_ERF:
        /* 1 + erf(z) = erfc(-z), again free of cancellation for negative x. */
        for (int64_t i = 0; i < n; i++)
            x[i] = 0.5f * x[i] * erfcf(x[i] * -0.70710678118654752f);
        break;
    case GP_OP_SILU:
        for (int64_t i = 0; i < n; i++)
            x[i] = silu(x[i]);
        break;
    default:
        GP_ASSERT(!"unary_apply: not a unary op");
    }
}

void gp_cpu_unary(gp_op op, const gp_attrs *a, float *x, int64_t n)
{
    unary_apply(op, a, x, n);
}

static void binary_apply(gp_op op, float *x, const float *y, int64_t n)
{
    switch (op) {
    case GP_OP_ADD:
        for (int64_t i = 0; i < n; i++)
            x[i] += y[i];
        break;
    case GP_OP_SUB:
        for (int64_t i = 0; i < n; i++)
            x[i] -= y[i];
        break;
    case GP_OP_MUL:
        for (int64_t i = 0; i < n; i++)
            x[i] *= y[i];
        break;
    case GP_OP_DIV:
        for (int64_t i = 0; i < n; i++)
            x[i] /= y[i];
        break;
    case GP_OP_SWIGLU:
        for (int64_t i = 0; i < n; i++)
            x[i] = silu(x[i]) * y[i];
        break;
    default:
        GP_ASSERT(!"binary_apply: not a binary op");
    }
}

/* Unary ops and, with y != NULL, binary ones: out = f(x[, y]) with x and y broadcast to out's shape
 * (numpy rules: a dim of 1 repeats). Rows of out are split over threads. */
static void k_elementwise(gp_op op, const gp_attrs *a, const gp_ktensor *out, const gp_ktensor *x,
                          const gp_ktensor *y, int ith, int nth)
{
    gp_t4 o = gp_t4_of(out), tx = gp_t4_of(x), ty;
    if (y)
        ty = gp_t4_of(y);
    int64_t r0, r1, n = o.ne[3];
    /* A last dim of 1 broadcasts with stride 0. */
    int64_t sx = tx.ne[3] == 1 ? 0 : tx.nb[3];
    int64_t sy = y ? (ty.ne[3] == 1 ? 0 : ty.nb[3]) : 0;
    float bx[GP_CHUNK], by[GP_CHUNK];
    gp_share(gp_t4_rows(&o), ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        char *po = o.p + gp_t4_row_off(&o, o.ne, r);
        const char *px = tx.p + gp_t4_row_off(&tx, o.ne, r);
        const char *py = y ? ty.p + gp_t4_row_off(&ty, o.ne, r) : NULL;
        for (int64_t c = 0; c < n; c += GP_CHUNK) {
            int64_t m = n - c < GP_CHUNK ? n - c : GP_CHUNK;
            gp_cpu_load_row(bx, px + c * sx, m, sx, tx.t);
            if (y) {
                gp_cpu_load_row(by, py + c * sy, m, sy, ty.t);
                binary_apply(op, bx, by, m);
            } else {
                unary_apply(op, a, bx, m);
            }
            gp_cpu_store_row(po + c * o.nb[3], o.nb[3], o.t, bx, m);
        }
    }
}

/* ---- norms and softmax: three passes over each row in stack chunks, so no workspace ---- */

static void k_norm(gp_op op, const gp_attrs *a, const gp_ktensor *out, const gp_ktensor *in, int n_in,
                   int ith, int nth)
{
    gp_t4 o = gp_t4_of(out), x = gp_t4_of(&in[0]);
    const gp_ktensor *w = &in[1], *b = op == GP_OP_LAYER_NORM && n_in > 2 ? &in[2] : NULL;
    int64_t n = o.ne[3], r0, r1;
    int ln = op == GP_OP_LAYER_NORM;
    float eps = (float)a->f[ln ? GP_LAYER_NORM_EPS : GP_RMS_NORM_EPS];
    float off = ln ? 0.0f : (float)a->f[GP_RMS_NORM_OFFSET];
    float bx[GP_CHUNK], bw[GP_CHUNK], bb[GP_CHUNK];
    gp_share(gp_t4_rows(&o), ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        char *po = o.p + gp_t4_row_off(&o, o.ne, r);
        const char *px = x.p + gp_t4_row_off(&x, o.ne, r);
        float mean = 0.0f, inv;
        gp_acc8 acc;
        gp_acc8_zero(&acc);
        if (op == GP_OP_LAYER_NORM) {
            for (int64_t c = 0; c < n; c += GP_CHUNK) {
                int64_t m = n - c < GP_CHUNK ? n - c : GP_CHUNK;
                gp_cpu_load_row(bx, px + c * x.nb[3], m, x.nb[3], x.t);
                gp_acc8_add(&acc, bx, m);
            }
            mean = gp_acc8_total(&acc) / (float)n;
            gp_acc8_zero(&acc);
        }
        /* Sum of squared deviations (layer_norm) or of squares (rms_norm, mean = 0). */
        for (int64_t c = 0; c < n; c += GP_CHUNK) {
            int64_t m = n - c < GP_CHUNK ? n - c : GP_CHUNK;
            gp_cpu_load_row(bx, px + c * x.nb[3], m, x.nb[3], x.t);
            for (int64_t i = 0; i < m; i++)
                bx[i] -= mean;
            gp_acc8_dot(&acc, bx, bx, m);
        }
        inv = 1.0f / sqrtf(gp_acc8_total(&acc) / (float)n + eps);
        for (int64_t c = 0; c < n; c += GP_CHUNK) {
            int64_t m = n - c < GP_CHUNK ? n - c : GP_CHUNK;
            gp_cpu_load_row(bx, px + c * x.nb[3], m, x.nb[3], x.t);
            gp_cpu_load_row(bw, (const char *)w->data + c * w->nb[0], m, w->nb[0], w->dtype);
            if (b)
                gp_cpu_load_row(bb, (const char *)b->data + c * b->nb[0], m, b->nb[0], b->dtype);
            for (int64_t i = 0; i < m; i++)
                bx[i] = (bx[i] - mean) * inv * (bw[i] + off) + (b ? bb[i] : 0.0f);
            gp_cpu_store_row(po + c * o.nb[3], o.nb[3], o.t, bx, m);
        }
    }
}

static void k_softmax(const gp_attrs *a, const gp_ktensor *out, const gp_ktensor *in, int ith,
                      int nth)
{
    gp_t4 o = gp_t4_of(out), x = gp_t4_of(in);
    int64_t S = o.ne[3], T = o.ne[2], r0, r1;
    float scale = (float)a->f[GP_SOFTMAX_SCALE];
    float bx[GP_CHUNK];
    gp_share(gp_t4_rows(&o), ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        char *po = o.p + gp_t4_row_off(&o, o.ne, r);
        const char *px = x.p + gp_t4_row_off(&x, o.ne, r);
        /* Causal: (t, s) is kept when s <= t + S - T. */
        int64_t nv = S;
        if (a->i[GP_SOFTMAX_CAUSAL]) {
            nv = r % T + S - T + 1;
            nv = nv < 0 ? 0 : nv > S ? S : nv;
        }
        float mx = -INFINITY, sum;
        for (int64_t c = 0; c < nv; c += GP_CHUNK) {
            int64_t m = nv - c < GP_CHUNK ? nv - c : GP_CHUNK;
            gp_cpu_load_row(bx, px + c * x.nb[3], m, x.nb[3], x.t);
            for (int64_t i = 0; i < m; i++)
                mx = fmaxf(mx, bx[i] * scale);
        }
        gp_acc8 acc;
        gp_acc8_zero(&acc);
        for (int64_t c = 0; c < nv; c += GP_CHUNK) {
            int64_t m = nv - c < GP_CHUNK ? nv - c : GP_CHUNK;
            gp_cpu_load_row(bx, px + c * x.nb[3], m, x.nb[3], x.t);
            for (int64_t i = 0; i < m; i++)
                bx[i] = gp_expf(bx[i] * scale - mx);
            gp_acc8_add(&acc, bx, m);
        }
        sum = gp_acc8_total(&acc);
        for (int64_t c = 0; c < S; c += GP_CHUNK) {
            int64_t m = S - c < GP_CHUNK ? S - c : GP_CHUNK;
            gp_cpu_load_row(bx, px + c * x.nb[3], m, x.nb[3], x.t);
            for (int64_t i = 0; i < m; i++)
                bx[i] = c + i < nv ? gp_expf(bx[i] * scale - mx) / sum : 0.0f;
            gp_cpu_store_row(po + c * o.nb[3], o.nb[3], o.t, bx, m);
        }
    }
}

/* ---- rope ---- */

static void k_rope(const gp_attrs *a, const gp_ktensor *out, const gp_ktensor *in, int n_in,
                   int ith, int nth)
{
    const gp_ktensor *x = &in[0], *pos = &in[1], *ff = n_in > 2 ? &in[2] : NULL; /* ff: [n/2] */
    int64_t T = out->ne[0], H = out->ne[1], D = out->ne[2], n = a->i[GP_ROPE_N_DIMS], half = n / 2;
    int64_t r0, r1;
    int interleaved = a->i[GP_ROPE_MODE] == 1;
    float bu[GP_CHUNK / 2], bv[GP_CHUNK / 2], cs[GP_CHUNK / 2], sn[GP_CHUNK / 2], bt[GP_CHUNK];
    GP_ASSERT(n >= 0 && n <= D && n % 2 == 0);
    (void)T;
    /* With every pair in one chunk (n <= GP_CHUNK), the angles of a position serve all its
     * heads: computed when t changes (rows run t-major), not per row. */
    int64_t angles_of = -1;
    /* LongRoPE's and YaRN's attention factor on the cosines and sines (1, exact, otherwise) */
    float mscale = gp_rope_cos_factor(a);
    gp_share(T * H, ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t t = r / H, h = r % H;
        const char *px = (const char *)x->data + t * x->nb[0] + h * x->nb[1];
        char *po = (char *)out->data + t * out->nb[0] + h * out->nb[1];
        double p = (double)load_i32((const char *)pos->data + t * pos->nb[0]);
        int64_t xs = x->nb[2], os = out->nb[2];
        /* Pair j rotates elements (u, v) = (j, j + n/2), or (2j, 2j + 1) when interleaved. */
        int64_t ustep = interleaved ? 2 : 1, voff = interleaved ? 1 : half;
        for (int64_t j0 = 0; j0 < half; j0 += GP_CHUNK / 2) {
            int64_t m = half - j0 < GP_CHUNK / 2 ? half - j0 : GP_CHUNK / 2;
            if (half > GP_CHUNK / 2 || angles_of != t)
                for (int64_t j = 0; j < m; j++) {
                    /* The angle in double: pos * freq loses too much in f32 at long positions. */
                    double f = gp_rope_freq(a, j0 + j, n);
                    if (ff) { /* llama.cpp's rope_freqs: the frequency over the pair's factor */
                        float w;
                        memcpy(&w, (const char *)ff->data + (j0 + j) * ff->nb[0], 4);
                        f /= w;
                    }
                    double ang = p * f;
                    cs[j] = (float)cos(ang) * mscale;
                    sn[j] = (float)sin(ang) * mscale;
                }
            angles_of = t;
            const char *pu = px + j0 * ustep * xs, *pv = px + (j0 * ustep + voff) * xs;
            gp_cpu_load_row(bu, pu, m, ustep * xs, x->dtype);
            gp_cpu_load_row(bv, pv, m, ustep * xs, x->dtype);
            for (int64_t j = 0; j < m; j++) {
                float u = bu[j], v = bv[j];
                bu[j] = u * cs[j] - v * sn[j];
                bv[j] = u * sn[j] + v * cs[j];
            }
            gp_cpu_store_row(po + j0 * ustep * os, ustep * os, out->dtype, bu, m);
            gp_cpu_store_row(po + (j0 * ustep + voff) * os, ustep * os, out->dtype, bv, m);
        }
        /* Dims n..D pass through. */
        for (int64_t c = n; c < D; c += GP_CHUNK) {
            int64_t m = D - c < GP_CHUNK ? D - c : GP_CHUNK;
            gp_cpu_load_row(bt, px + c * xs, m, xs, x->dtype);
            gp_cpu_store_row(po + c * os, os, out->dtype, bt, m);
        }
    }
}

/* ---- copies and lookups ---- */

/* cont and cast: out[i] = x[i] over any strides, converting the dtype. */
static void k_copy(const gp_ktensor *out, const gp_ktensor *in, int ith, int nth)
{
    gp_t4 o = gp_t4_of(out), x = gp_t4_of(in);
    int64_t r0, r1;
    gp_share(gp_t4_rows(&o), ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++)
        copy_row(o.p + gp_t4_row_off(&o, o.ne, r), o.nb[3], o.t,
                 x.p + gp_t4_row_off(&x, o.ne, r), x.nb[3], x.t, o.ne[3]);
}

static void k_get_rows(const gp_ktensor *out, const gp_ktensor *in, int ith, int nth)
{
    const gp_ktensor *table = &in[0], *ids = &in[1];
    int64_t r0, r1;
    gp_share(out->ne[0], ith, nth, &r0, &r1);
    for (int64_t t = r0; t < r1; t++) {
        int32_t id = load_i32((const char *)ids->data + t * ids->nb[0]);
        GP_ASSERT(id >= 0 && id < table->ne[0]);
        if (gp_dtype_is_quant(table->dtype)) { /* a row of blocks, dequantized */
            char *o = (char *)out->data + t * out->nb[0];
            int64_t n = out->ne[1], done = 0;
            float buf[1024];
            GP_ASSERT(n % gp_dtype_block(table->dtype) == 0);
            const char *row = (const char *)table->data + id * table->nb[0];
            size_t bb = gp_dtype_block_bytes(table->dtype), per = (size_t)gp_dtype_block(table->dtype);
            while (done < n) { /* in slices of whole blocks that fit buf */
                int64_t c = n - done < 1024 ? n - done : 1024;
                gp_quant_dequantize_row(table->dtype, row + (size_t)done / per * bb, buf, c);
                gp_cpu_store_row(o + done * out->nb[1], out->nb[1], out->dtype, buf, c);
                done += c;
            }
            continue;
        }
        copy_row((char *)out->data + t * out->nb[0], out->nb[1], out->dtype,
                 (const char *)table->data + id * table->nb[0], table->nb[1], table->dtype,
                 out->ne[1]);
    }
}

static void k_concat(const gp_attrs *at, const gp_ktensor *out, const gp_ktensor *in, int ith,
                     int nth)
{
    gp_t4 o = gp_t4_of(out), a = gp_t4_of(&in[0]), b = gp_t4_of(&in[1]);
    int64_t axis = at->i[GP_CONCAT_AXIS];
    int ax = (int)(axis < 0 ? axis + out->ndim : axis) + 4 - out->ndim;
    int64_t na = a.ne[ax], r0, r1;
    GP_ASSERT(ax >= 0 && ax < 4);
    gp_share(gp_t4_rows(&o), ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        int64_t idx[3] = {r / (o.ne[1] * o.ne[2]), (r / o.ne[2]) % o.ne[1], r % o.ne[2]};
        char *po = o.p + idx[0] * o.nb[0] + idx[1] * o.nb[1] + idx[2] * o.nb[2];
        if (ax == 3) {
            const char *pa = a.p + idx[0] * a.nb[0] + idx[1] * a.nb[1] + idx[2] * a.nb[2];
            const char *pb = b.p + idx[0] * b.nb[0] + idx[1] * b.nb[1] + idx[2] * b.nb[2];
            copy_row(po, o.nb[3], o.t, pa, a.nb[3], a.t, na);
            copy_row(po + na * o.nb[3], o.nb[3], o.t, pb, b.nb[3], b.t, b.ne[3]);
            continue;
        }
        const gp_t4 *s = idx[ax] < na ? &a : &b;
        if (idx[ax] >= na)
            idx[ax] -= na;
        copy_row(po, o.nb[3], o.t, s->p + idx[0] * s->nb[0] + idx[1] * s->nb[1] + idx[2] * s->nb[2],
                 s->nb[3], s->t, o.ne[3]);
    }
}

/* store: dst[pos[t]] = src[t]. Threads split the elements of one dst row (in units of 64 along the
 * last dim) and each walks t in order, so a repeated pos ends with the last t for any nth. */
static void k_store(const gp_attrs *a, const gp_ktensor *in, int ith, int nth)
{
    const gp_ktensor *dst = &in[0], *pos = &in[1], *src = &in[2];
    /* One row of dst and src: dims 1.. right-aligned to four. */
    gp_ktensor drow = *dst, srow = *src;
    drow.ndim = srow.ndim = dst->ndim - 1;
    for (int d = 1; d < dst->ndim; d++) {
        drow.ne[d - 1] = dst->ne[d];
        drow.nb[d - 1] = dst->nb[d];
        srow.ne[d - 1] = src->ne[d];
        srow.nb[d - 1] = src->nb[d];
    }
    gp_t4 d4 = gp_t4_of(&drow), s4 = gp_t4_of(&srow);
    int64_t C = d4.ne[3], nchunk = (C + 63) / 64, T = src->ne[0], S = dst->ne[0], u0, u1;
    gp_share(gp_t4_rows(&d4) * nchunk, ith, nth, &u0, &u1);
    for (int64_t u = u0; u < u1; u++) {
        int64_t row = u / nchunk, c = (u % nchunk) * 64, m = C - c < 64 ? C - c : 64;
        int64_t od = gp_t4_row_off(&d4, d4.ne, row) + c * d4.nb[3];
        int64_t os = gp_t4_row_off(&s4, d4.ne, row) + c * s4.nb[3];
        for (int64_t t = 0; t < T; t++) {
            int32_t p = load_i32((const char *)pos->data + t * pos->nb[0]);
            if (a->i[GP_STORE_RING])
                p = (int32_t)(p % S); /* a ring: gp_cpu_check allows any p >= 0 */
            GP_ASSERT(p >= 0 && p < S);
            copy_row((char *)dst->data + p * dst->nb[0] + od, d4.nb[3], d4.t,
                     (const char *)src->data + t * src->nb[0] + os, s4.nb[3], s4.t, m);
        }
    }
}

/* ---- argmax ---- */

/* out [...] (i32) = the first index of the largest value of each row of x [..., N]; NaN never
 * wins, a row of NaN only gives 0 (gp_argmax's rule). */
static void k_argmax(const gp_ktensor *out, const gp_ktensor *in, int ith, int nth)
{
    gp_t4 x = gp_t4_of(in), o;
    int off = 3 - out->ndim; /* out's dims are x's rows */
    o.p = out->data;
    o.t = out->dtype;
    for (int d = 0; d < 3; d++) {
        o.ne[d] = d < off ? 1 : out->ne[d - off];
        o.nb[d] = d < off ? 0 : out->nb[d - off];
    }
    o.ne[3] = 1;
    o.nb[3] = 4;
    int64_t N = x.ne[3], r0, r1;
    float bx[GP_CHUNK];
    gp_share(gp_t4_rows(&x), ith, nth, &r0, &r1);
    for (int64_t r = r0; r < r1; r++) {
        const char *px = x.p + gp_t4_row_off(&x, x.ne, r);
        float best = -INFINITY;
        int64_t at = -1;
        for (int64_t c = 0; c < N; c += GP_CHUNK) {
            int64_t m = N - c < GP_CHUNK ? N - c : GP_CHUNK;
            gp_cpu_load_row(bx, px + c * x.nb[3], m, x.nb[3], x.t);
            for (int64_t i = 0; i < m; i++)
                if (bx[i] > best || (at < 0 && bx[i] == bx[i])) {
                    best = bx[i];
                    at = c + i;
                }
        }
        int32_t v = at < 0 ? 0 : (int32_t)at;
        memcpy(o.p + gp_t4_row_off(&o, x.ne, r), &v, 4);
    }
}

/* ---- entry points ---- */

void gp_cpu_compute(gp_op op, const gp_attrs *a, const gp_ktensor *out, const gp_ktensor *in,
                    int n_in, void *ws, size_t ws_size, int ith, int nth)
{
    const gp_op_info *info = gp_op_get(op);
    GP_ASSERT(info && n_in >= info->min_inputs && n_in <= info->max_inputs);
    GP_ASSERT(nth >= 1 && ith >= 0 && ith < nth);
    if (gp_op_computes_nothing(op))
        return;
    switch (op) {
    case GP_OP_GET_ROWS:
        k_get_rows(out, in, ith, nth);
        break;
    case GP_OP_ADD:
    case GP_OP_SUB:
    case GP_OP_MUL:
    case GP_OP_DIV:
    case GP_OP_SWIGLU:
        k_elementwise(op, a, out, &in[0], &in[1], ith, nth);
        break;
    case GP_OP_SCALE:
    case GP_OP_GELU:
    case GP_OP_GELU_ERF:
    case GP_OP_SILU:
        k_elementwise(op, a, out, &in[0], NULL, ith, nth);
        break;
    case GP_OP_MATMUL:
        if (gp_dtype_is_quant(in[1].dtype))
            gp_cpu_matmul_quant(out, in, ws, ws_size, ith, nth);
        else
            gp_cpu_matmul(a, out, in, ith, nth);
        break;
    case GP_OP_LAYER_NORM:
    case GP_OP_RMS_NORM:
        k_norm(op, a, out, in, n_in, ith, nth);
        break;
    case GP_OP_SOFTMAX:
        k_softmax(a, out, in, ith, nth);
        break;
    case GP_OP_ROPE:
        k_rope(a, out, in, n_in, ith, nth);
        break;
    case GP_OP_CONT:
    case GP_OP_CAST:
        k_copy(out, in, ith, nth);
        break;
    case GP_OP_ALL_REDUCE: /* device 0's term (+ y); a backend adds the others' (comm.c) */
        if (n_in > 1)
            k_elementwise(GP_OP_ADD, a, out, &in[0], &in[1], ith, nth);
        else if (out->data != in[0].data)
            k_copy(out, in, ith, nth);
        break;
    case GP_OP_CONCAT:
        k_concat(a, out, in, ith, nth);
        break;
    case GP_OP_ARGMAX:
        k_argmax(out, in, ith, nth);
        break;
    case GP_OP_STORE:
        k_store(a, in, ith, nth);
        break;
    case GP_OP_ATTENTION:
        gp_cpu_attention(a, out, in, n_in, ws, ws_size, ith, nth);
        break;
    case GP_OP_MOE:
        gp_cpu_moe(a, out, in, n_in, ws, ws_size, ith, nth);
        break;
    default:
        GP_ASSERT(!"gp_cpu_compute: unknown op");
    }
}

int gp_cpu_phases(gp_op op, const gp_ktensor *out, const gp_ktensor *in, int n_in, const void *ws,
                  size_t ws_size)
{
    (void)out;
    if (op == GP_OP_MOE)
        return GP_MOE_PHASES;
    return op == GP_OP_MATMUL && n_in >= 2 && gp_dtype_is_quant(in[1].dtype) &&
                   gp_quant_matmul_ws_taken(in[1].dtype, in[0].ne[0], in[0].ne[1], ws, ws_size)
               ? 2
               : 1;
}

void gp_cpu_compute_phase(gp_op op, const gp_attrs *a, const gp_ktensor *out,
                          const gp_ktensor *in, int n_in, void *ws, size_t ws_size, int ith,
                          int nth, int phase)
{
    int n = gp_cpu_phases(op, out, in, n_in, ws, ws_size);
    GP_ASSERT(phase >= 0 && phase < n);
    if (n == 1) {
        gp_cpu_compute(op, a, out, in, n_in, ws, ws_size, ith, nth);
        return;
    }
    if (op == GP_OP_MOE) {
        gp_cpu_moe_phase(a, out, in, n_in, ws, ws_size, ith, nth, phase);
        return;
    }
    const gp_ktensor *x = &in[0], *w = &in[1];
    int64_t M = x->ne[0], K = x->ne[1], N = w->ne[0], n0, n1;
    if (phase == 0) {
        gp_quant_matmul_ws_prep(x->data, x->nb[0] / (int64_t)sizeof(float), M, K, ws, ith, nth);
        return;
    }
    gp_share((N + 31) / 32, ith, nth, &n0, &n1); /* whole pairs of 16-row weight tiles */
    n0 *= 32;
    n1 = n1 * 32 < N ? n1 * 32 : N;
    if (n0 < n1)
        gp_quant_matmul_ws_cols(w->dtype, w->data, n0, n1, M, K, out->data,
                                out->nb[0] / (int64_t)sizeof(float), ws);
}

size_t gp_cpu_workspace_bytes(gp_op op, const gp_attrs *a, const gp_ktensor *out,
                              const gp_ktensor *in, int n_in, int nth)
{
    (void)out;
    /* plan.h reserves scores for at most GP_WS_CPU_MAX_THREADS threads; the kernel uses no more
     * threads than the workspace has slices for. */
    if (nth > GP_WS_CPU_MAX_THREADS)
        nth = GP_WS_CPU_MAX_THREADS;
    if (op == GP_OP_ATTENTION && n_in >= 2 && nth > 0 && in[1].ne[0] > 0)
        return (size_t)nth * (size_t)gp_cpu_attention_span(a, in, n_in) * sizeof(float);
    if (op == GP_OP_MATMUL && n_in >= 2 && in[0].ndim == 2 && gp_dtype_is_quant(in[1].dtype))
        return (size_t)gp_quant_matmul_ws_bytes(in[0].ne[0], in[0].ne[1]);
    if (op == GP_OP_MOE && n_in >= 5 && a)
        return (size_t)gp_moe_ws(in[0].ne[0], in[0].ne[1], in[1].ne[0], a->i[GP_MOE_TOP_K],
                                 in[2].ne[1], gp_dtype_is_quant(in[2].dtype))
            .total;
    return 0;
}
