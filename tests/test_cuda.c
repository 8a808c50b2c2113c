/* Tests of the CUDA backend (suite "cuda"): every op on the GPU against gp_cpu_compute (normalized
 * error, a tolerance per op, outputs poisoned first), sizes read from the param block, and whole-model
 * parity CPU vs CUDA on examples/tiny.gplan with no allocation during evals. Without a GPU the suite
 * registers no test and says so: skipped, not passed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CUnit/CUnit.h>
#include <cuda_runtime_api.h>

#include "cuda/cuda_backend.h"
#include "cuda/cuda_kernels.h"
#include "cuda/cuda_quant.cuh"
#include "dsl/dsl.h"
#include "planner/planner.h"
#include "runtime/cpu_kernels.h"
#include "runtime/f16.h"
#include "runtime/gplan.h"
#include "runtime/lora.h"
#include "runtime/plan.h"
#include "runtime/quant.h"
#include "runtime/safetensors.h"
#include "tests/testmodel.h"
#include "tests/testutil.h"

/* ---- host/device test tensors ---- */

typedef struct {
    gp_ktensor h;    /* host copy (contiguous unless a test changes strides) */
    gp_cu_tensor d;  /* the device copy with the same layout */
    size_t bytes;    /* storage bytes */
} tt;

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float frand(void)
{
    return (float)((gp_test_rand(&rng) >> 11) * 0x1p-53) * 2.0f - 1.0f;
}

static void store_val(void *p, gp_dtype t, float v)
{
    uint16_t h;
    int32_t i;
    switch (t) {
    case GP_F32: memcpy(p, &v, 4); break;
    case GP_F16: h = gp_f32_to_f16(v); memcpy(p, &h, 2); break;
    case GP_BF16: h = gp_f32_to_bf16(v); memcpy(p, &h, 2); break;
    default: i = (int32_t)v; memcpy(p, &i, 4); break;
    }
}

static double load_val(const void *p, gp_dtype t)
{
    uint16_t h;
    float f;
    int32_t i;
    switch (t) {
    case GP_F32: memcpy(&f, p, 4); return f;
    case GP_F16: memcpy(&h, p, 2); return gp_f16_to_f32(h);
    case GP_BF16: memcpy(&h, p, 2); return gp_bf16_to_f32(h);
    default: memcpy(&i, p, 4); return i;
    }
}

/* A contiguous tensor of random values in [-scale, scale) (i32: integers in [0, scale)), copied to
 * the device. */
static void tt_new(tt *t, gp_dtype dt, int ndim, const int64_t *ne, float scale)
{
    memset(t, 0, sizeof *t);
    size_t es = gp_dtype_size(dt), n = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        t->h.ne[d] = t->d.ne[d] = ne[d];
        t->h.nb[d] = t->d.nb[d] = (int64_t)(n * es);
        t->d.sym[d] = -1;
        n *= (size_t)ne[d];
    }
    for (int d = ndim; d < GP_MAX_DIMS; d++)
        t->d.sym[d] = -1;
    t->h.ndim = t->d.ndim = ndim;
    t->h.dtype = t->d.dtype = dt;
    t->bytes = n * es;
    t->h.data = malloc(t->bytes + 1);
    for (size_t i = 0; i < n; i++) {
        float v = dt == GP_I32 ? (float)(gp_test_rand(&rng) % (uint64_t)scale) : frand() * scale;
        store_val((char *)t->h.data + i * es, dt, v);
    }
    void *p = NULL;
    CU_ASSERT_EQUAL_FATAL(cudaMalloc(&p, t->bytes + 16), cudaSuccess);
    t->d.data = p;
    cudaMemcpy(p, t->h.data, t->bytes, cudaMemcpyHostToDevice);
}

static void tt_free(tt *t)
{
    free(t->h.data);
    cudaFree(t->d.data);
}

/* The device copy back into the host copy. */
static void tt_download(tt *t)
{
    CU_ASSERT_EQUAL(cudaMemcpy(t->h.data, t->d.data, t->bytes, cudaMemcpyDeviceToHost), cudaSuccess);
}

/* Sets the same strides (bytes) on both copies: a view of the same storage. */
static void tt_view(tt *t, int ndim, const int64_t *ne, const int64_t *nb)
{
    t->h.ndim = t->d.ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        t->h.ne[d] = t->d.ne[d] = ne[d];
        t->h.nb[d] = t->d.nb[d] = nb[d];
        t->d.sym[d] = -1;
    }
}

/* A kernel context for tests: a stream, cuBLAS, split-K counters, optional sizes. */
typedef struct {
    gp_cu_ctx c;
    unsigned *counters;
    int64_t *d_syms;
} kctx;

static void kctx_new(kctx *k, const int64_t *syms_exact, int64_t *syms_launch, int n_syms)
{
    memset(k, 0, sizeof *k);
    CU_ASSERT_EQUAL_FATAL(cublasCreate(&k->c.blas), CUBLAS_STATUS_SUCCESS);
    cudaMalloc((void **)&k->counters, sizeof(unsigned) * GP_CU_COUNTERS);
    cudaMemset(k->counters, 0, sizeof(unsigned) * GP_CU_COUNTERS);
    k->c.d_counters = k->counters;
    k->c.n_counters = GP_CU_COUNTERS;
    /* as the backend has them by default */
    k->c.epi_early = k->c.epi_const = k->c.norm_early = k->c.mv_pairs = k->c.kv_regs = 1;
    if (n_syms) {
        cudaMalloc((void **)&k->d_syms, sizeof(int64_t) * (size_t)n_syms);
        cudaMemcpy(k->d_syms, syms_exact, sizeof(int64_t) * (size_t)n_syms, cudaMemcpyHostToDevice);
        k->c.d_syms = k->d_syms;
        k->c.h_syms = syms_launch;
        k->c.n_syms = n_syms;
    }
}

static void kctx_free(kctx *k)
{
    cublasDestroy(k->c.blas);
    cudaFree(k->counters);
    cudaFree(k->d_syms);
}

/* ‖gpu − cpu‖ / ‖cpu‖ over the elements of out's shape; NaN (an unwritten element: outputs are
 * poisoned) gives INFINITY. */
static double rel_err(const gp_ktensor *gpu, const gp_ktensor *cpu)
{
    int64_t n = 1;
    for (int d = 0; d < cpu->ndim; d++)
        n *= cpu->ne[d];
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t off = 0, r = i;
        for (int d = cpu->ndim - 1; d >= 0; d--) {
            off += (r % cpu->ne[d]) * cpu->nb[d];
            r /= cpu->ne[d];
        }
        double g = load_val((const char *)gpu->data + off, gpu->dtype);
        double c = load_val((const char *)cpu->data + off, cpu->dtype);
        if (g != g || c != c)
            return INFINITY;
        num += (g - c) * (g - c);
        den += c * c;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* The normalized error of t's device copy against its host copy (the CPU's result). */
static double device_err(const tt *t)
{
    gp_ktensor g = t->h;
    g.data = malloc(t->bytes);
    cudaMemcpy(g.data, t->d.data, t->bytes, cudaMemcpyDeviceToHost);
    double e = rel_err(&g, &t->h);
    free(g.data);
    return e;
}

/* 1 when every float of t's f32 device copy is still NaN: poisoned with 0xff bytes before, then
 * written by nothing. */
static int device_untouched(const tt *t)
{
    float *g = malloc(t->bytes);
    cudaMemcpy(g, t->d.data, t->bytes, cudaMemcpyDeviceToHost);
    int untouched = 1;
    for (size_t j = 0; j < t->bytes / sizeof(float); j++)
        untouched &= isnan(g[j]);
    free(g);
    return untouched;
}

/* Runs op on the CPU (into out's host copy) and on the GPU (into a poisoned copy of out), and
 * returns the normalized error. ins: n_in test tensors; ws_gpu: a device workspace (or 0 bytes). */
static double run_op(gp_op op, const gp_attrs *a, tt *out, tt **ins, int n_in, size_t ws_gpu,
                     kctx *k)
{
    gp_ktensor hin[GP_MAX_INPUTS];
    gp_cu_tensor din[GP_MAX_INPUTS];
    for (int i = 0; i < n_in; i++) {
        hin[i] = ins[i]->h;
        din[i] = ins[i]->d;
    }
    size_t wsz = gp_cpu_workspace_bytes(op, &out->h, hin, n_in, 1);
    void *ws = wsz ? malloc(wsz) : NULL;
    gp_cpu_compute(op, a, &out->h, hin, n_in, ws, wsz, 0, 1);
    free(ws);
    void *dws = NULL;
    if (ws_gpu)
        cudaMalloc(&dws, ws_gpu);
    cudaMemset(out->d.data, 0xff, out->bytes); /* NaN in every float dtype */
    int r = gp_cuda_compute(&k->c, op, a, &out->d, din, n_in, dws, ws_gpu);
    if (r)
        fprintf(stderr, "\n  gp_cuda_compute: %s\n", k->c.err);
    CU_ASSERT_EQUAL(r, 0);
    CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
    cudaFree(dws);
    return device_err(out);
}

#define CHECK_ERR(name, e, tol)                                                   \
    do {                                                                          \
        double e_ = (e);                                                          \
        if (!(e_ <= (tol)))                                                       \
            fprintf(stderr, "\n  %s: error %.3g > %.3g\n", name, e_, (double)(tol)); \
        CU_ASSERT(e_ <= (tol));                                                   \
    } while (0)

/* Two lookups and their sum in one launch (gp_cuda_get_rows_add) against the CPU's get_rows,
 * get_rows and add: the same bits, for one token and for a prompt of 7 (f16 and f32 tables; width
 * 2100 is more than one load batch of a row); a token id out of range leaves its row unwritten;
 * bad operands are refused with an error. */
static void test_get_rows_add(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    const struct {
        int64_t T, C;
        gp_dtype t1, t2;
        int bad; /* index of a token id set out of range, or -1 */
    } cs[] = {{1, 768, GP_F16, GP_F16, -1},
              {7, 2100, GP_F16, GP_F32, 3},
              {7, 72, GP_F32, GP_F16, -1}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        int64_t T = cs[i].T, C = cs[i].C, V1 = 500, V2 = 64;
        int64_t s1[2] = {V1, C}, s2[2] = {V2, C}, si[1] = {T}, so[2] = {T, C};
        tt w1, w2, ids, pos, a, b, out;
        tt_new(&w1, cs[i].t1, 2, s1, 1.0f);
        tt_new(&w2, cs[i].t2, 2, s2, 1.0f);
        tt_new(&ids, GP_I32, 1, si, (float)V1);
        tt_new(&pos, GP_I32, 1, si, (float)V2);
        tt_new(&a, GP_F32, 2, so, 1.0f);
        tt_new(&b, GP_F32, 2, so, 1.0f);
        tt_new(&out, GP_F32, 2, so, 1.0f);
        gp_attrs none = {{0}, {0}};
        gp_ktensor g1[2] = {w1.h, ids.h}, g2[2] = {w2.h, pos.h}, ad[2] = {a.h, b.h};
        gp_cpu_compute(GP_OP_GET_ROWS, &none, &a.h, g1, 2, NULL, 0, 0, 1);
        gp_cpu_compute(GP_OP_GET_ROWS, &none, &b.h, g2, 2, NULL, 0, 0, 1);
        gp_cpu_compute(GP_OP_ADD, &none, &out.h, ad, 2, NULL, 0, 0, 1);
        if (cs[i].bad >= 0) { /* on the device only (the CPU's lookups assert ids in range) */
            int32_t past = (int32_t)V1; /* one past the table */
            cudaMemcpy((int32_t *)ids.d.data + cs[i].bad, &past, 4, cudaMemcpyHostToDevice);
        }
        cudaMemset(out.d.data, 0xff, out.bytes);
        k.c.pdl = (int)(i % 2);
        CU_ASSERT_EQUAL(gp_cuda_get_rows_add(&k.c, &out.d, &w1.d, &ids.d, &w2.d, &pos.d), 0);
        CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
        float *g = malloc(out.bytes);
        cudaMemcpy(g, out.d.data, out.bytes, cudaMemcpyDeviceToHost);
        int64_t same = 0, untouched = 0;
        for (int64_t t = 0; t < T; t++)
            for (int64_t c = 0; c < C; c++) {
                float gv = g[t * C + c], cv = ((const float *)out.h.data)[t * C + c];
                if (t == cs[i].bad)
                    untouched += isnan(gv);
                else
                    same += memcmp(&gv, &cv, sizeof gv) == 0;
            }
        CU_ASSERT_EQUAL(same, (cs[i].bad >= 0 ? T - 1 : T) * C);
        CU_ASSERT_EQUAL(untouched, cs[i].bad >= 0 ? C : 0);
        free(g);
        /* refused: ids of another dtype, a table of another width */
        gp_cu_tensor f = pos.d;
        f.dtype = GP_F32;
        CU_ASSERT_EQUAL(gp_cuda_get_rows_add(&k.c, &out.d, &w1.d, &ids.d, &w2.d, &f), -1);
        CU_ASSERT_PTR_NOT_NULL(strstr(k.c.err, "get_rows_add"));
        gp_cu_tensor narrow = w2.d;
        narrow.ne[1] = C - 8;
        CU_ASSERT_EQUAL(gp_cuda_get_rows_add(&k.c, &out.d, &w1.d, &ids.d, &narrow, &pos.d), -1);
        tt_free(&w1);
        tt_free(&w2);
        tt_free(&ids);
        tt_free(&pos);
        tt_free(&a);
        tt_free(&b);
        tt_free(&out);
    }
    kctx_free(&k);
}

/* ---- ops ---- */

static void test_elementwise(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    const gp_op bin[] = {GP_OP_ADD, GP_OP_SUB, GP_OP_MUL, GP_OP_DIV, GP_OP_SWIGLU};
    for (size_t i = 0; i < sizeof bin / sizeof bin[0]; i++) {
        int64_t sa[3] = {4, 33, 96}, sb[3] = {4, 1, 96}, sc[1] = {96};
        tt a, b, out;
        gp_dtype odt = i % 2 ? GP_F16 : GP_F32;
        tt_new(&a, GP_F32, 3, sa, 2.0f);
        /* swiglu needs equal shapes; the others broadcast b over rows or a whole row vector */
        if (bin[i] == GP_OP_SWIGLU)
            tt_new(&b, GP_BF16, 3, sa, 2.0f);
        else if (i % 2)
            tt_new(&b, GP_F16, 3, sb, 2.0f);
        else
            tt_new(&b, GP_F16, 1, sc, 2.0f);
        tt_new(&out, odt, 3, sa, 1.0f);
        tt *ins[2] = {&a, &b};
        gp_attrs at = {{0}, {0}};
        CHECK_ERR(gp_op_get(bin[i])->name, run_op(bin[i], &at, &out, ins, 2, 0, &k),
                  odt == GP_F16 ? 1e-3 : 1e-6);
        tt_free(&a);
        tt_free(&b);
        tt_free(&out);
    }
    /* Rows longer than a block's span (1024), with b a column (its last dim broadcast) or a
     * row. */
    for (int i = 0; i < 2; i++) {
        int64_t sa[3] = {2, 3, 2500}, sb[3] = {2, 3, 1}, sr[1] = {2500};
        tt a, b, out;
        tt_new(&a, GP_F32, 3, sa, 2.0f);
        if (i)
            tt_new(&b, GP_F32, 1, sr, 2.0f);
        else
            tt_new(&b, GP_F32, 3, sb, 2.0f);
        tt_new(&out, GP_F32, 3, sa, 1.0f);
        tt *ins[2] = {&a, &b};
        gp_attrs at = {{0}, {0}};
        CHECK_ERR(i ? "add, long rows, row vector" : "add, long rows, column",
                  run_op(GP_OP_ADD, &at, &out, ins, 2, 0, &k), 0.0);
        tt_free(&a);
        tt_free(&b);
        tt_free(&out);
    }
    const gp_op un[] = {GP_OP_SCALE, GP_OP_GELU, GP_OP_GELU_ERF, GP_OP_SILU};
    for (size_t i = 0; i < sizeof un / sizeof un[0]; i++) {
        int64_t s[2] = {7, 300};
        tt x, out;
        tt_new(&x, GP_BF16, 2, s, 4.0f);
        tt_new(&out, i % 2 ? GP_BF16 : GP_F32, 2, s, 1.0f);
        tt *ins[1] = {&x};
        gp_attrs at = {{0}, {0.37, 0}};
        CHECK_ERR(gp_op_get(un[i])->name, run_op(un[i], &at, &out, ins, 1, 0, &k),
                  i % 2 ? 1e-2 : 1e-6);
        tt_free(&x);
        tt_free(&out);
    }
    kctx_free(&k);
}

static void test_norms_softmax(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    /* widths: rows in registers at any block size (1600), at the largest (4096, Llama's), and
     * too wide for registers (11008) */
    const int64_t widths[3] = {1600, 4096, 11008};
    for (int op = 0; op < 6; op++) {
        int64_t n = widths[op / 2], sx[2] = {5, n}, sw[1] = {n};
        tt x, w, b, out;
        tt_new(&x, GP_F32, 2, sx, 3.0f);
        tt_new(&w, GP_F16, 1, sw, 1.0f);
        tt_new(&b, GP_F16, 1, sw, 1.0f);
        tt_new(&out, GP_F32, 2, sx, 1.0f);
        tt *ins[3] = {&x, &w, &b};
        gp_attrs at = {{0}, {1e-5, 0}};
        gp_op o = op % 2 ? GP_OP_RMS_NORM : GP_OP_LAYER_NORM;
        CHECK_ERR(gp_op_get(o)->name, run_op(o, &at, &out, ins, op % 2 ? 2 : 3, 0, &k), 1e-5);
        tt_free(&x);
        tt_free(&w);
        tt_free(&b);
        tt_free(&out);
    }
    /* softmax: causal and not, S > T and S < T (fully masked rows give zeros) */
    const int64_t shapes[3][3] = {{2, 7, 40}, {3, 9, 5}, {1, 4, 1000}};
    for (int i = 0; i < 3; i++)
        for (int causal = 0; causal < 2; causal++) {
            tt x, out;
            tt_new(&x, GP_F32, 3, shapes[i], 5.0f);
            tt_new(&out, GP_F32, 3, shapes[i], 1.0f);
            tt *ins[1] = {&x};
            gp_attrs at = {{causal, 0, 0, 0}, {0.125, 0}};
            CHECK_ERR("softmax", run_op(GP_OP_SOFTMAX, &at, &out, ins, 1, 0, &k), 1e-5);
            tt_free(&x);
            tt_free(&out);
        }
    kctx_free(&k);
}

static void test_rope_rows_copies(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    for (int mode = 0; mode < 2; mode++) {
        int64_t sx[3] = {6, 4, 64}, sp[1] = {6};
        tt x, pos, out;
        tt_new(&x, GP_F32, 3, sx, 1.0f);
        tt_new(&pos, GP_I32, 1, sp, 1000.0f);
        tt_new(&out, GP_F32, 3, sx, 1.0f);
        tt *ins[2] = {&x, &pos};
        gp_attrs at = {{mode, 48, 0, 0}, {10000.0, 0}};
        /* the same bits as the CPU: products and sums rounded one by one on both */
        CHECK_ERR("rope", run_op(GP_OP_ROPE, &at, &out, ins, 2, 0, &k), 0.0);
        tt_free(&x);
        tt_free(&pos);
        tt_free(&out);
    }
    {
        int64_t st[2] = {100, 72}, si[1] = {9}, so[2] = {9, 72};
        tt table, ids, out;
        tt_new(&table, GP_F16, 2, st, 1.0f);
        tt_new(&ids, GP_I32, 1, si, 100.0f);
        tt_new(&out, GP_F32, 2, so, 1.0f);
        tt *ins[2] = {&table, &ids};
        gp_attrs at = {{0}, {0}};
        CHECK_ERR("get_rows", run_op(GP_OP_GET_ROWS, &at, &out, ins, 2, 0, &k), 0.0);
        tt_free(&table);
        tt_free(&ids);
        tt_free(&out);
    }
    /* cont of a permuted view [6, 4, 10] of [4, 6, 10]; casts between dtypes */
    const gp_dtype casts[4][2] = {{GP_F32, GP_F32}, {GP_F32, GP_F16}, {GP_F32, GP_I32},
                                  {GP_I32, GP_BF16}};
    for (int i = 0; i < 4; i++) {
        int64_t sx[3] = {4, 6, 10}, sv[3] = {6, 4, 10}, so[3] = {6, 4, 10};
        tt x, out;
        tt_new(&x, casts[i][0], 3, sx, 100.0f);
        int64_t es = (int64_t)gp_dtype_size(casts[i][0]);
        int64_t nb[3] = {10 * es, 60 * es, es};
        tt_view(&x, 3, sv, nb);
        tt_new(&out, casts[i][1], 3, so, 1.0f);
        tt *ins[1] = {&x};
        gp_attrs at = {{0}, {0}};
        CHECK_ERR("cont/cast", run_op(i ? GP_OP_CAST : GP_OP_CONT, &at, &out, ins, 1, 0, &k),
                  casts[i][1] == GP_F32 || casts[i][1] == GP_I32 ? 0.0 : 1e-2);
        tt_free(&x);
        tt_free(&out);
    }
    for (int ax = 1; ax < 3; ax++) {
        int64_t sa[3] = {3, 5, 8}, sb[3] = {3, 5, 8}, so[3] = {3, 5, 8};
        sb[ax] = 2;
        so[ax] = sa[ax] + 2;
        tt a, b, out;
        tt_new(&a, GP_F32, 3, sa, 1.0f);
        tt_new(&b, GP_F16, 3, sb, 1.0f);
        tt_new(&out, GP_F32, 3, so, 1.0f);
        tt *ins[2] = {&a, &b};
        gp_attrs at = {{ax, 0, 0, 0}, {0}};
        CHECK_ERR("concat", run_op(GP_OP_CONCAT, &at, &out, ins, 2, 0, &k), 0.0);
        tt_free(&a);
        tt_free(&b);
        tt_free(&out);
    }
    kctx_free(&k);
}

/* argmax against the CPU, index for index: GPT-2's logits rows, f16 and bf16, a row to a scalar,
 * and rows of ties, infinities and NaN (first of the largest; NaN never wins); a block per row
 * and, where the device has clusters, a cluster per row. */
static void test_argmax(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    const struct {
        gp_dtype t;
        int ndim;
        int64_t ne[3];
    } cs[] = {{GP_F32, 2, {5, 50257}}, {GP_F16, 3, {3, 4, 300}}, {GP_BF16, 1, {1000}},
              {GP_F32, 2, {5, 6}}, {GP_F32, 2, {2, 5000}}};
    static const float special[5][6] = {{1, 3, 2, 3, 0, 3},
                                        {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, 7},
                                        {NAN, -INFINITY, NAN, -5, NAN, -INFINITY},
                                        {NAN, NAN, NAN, NAN, NAN, NAN},
                                        {NAN, INFINITY, 1, INFINITY, NAN, 2}};
    const int32_t want[5] = {1, 5, 3, 0, 1};
    int clusters = gp_cuda_matvec_cluster_ok(8, NULL);
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        tt x, out;
        tt_new(&x, cs[i].t, cs[i].ndim, cs[i].ne, 4.0f);
        tt_new(&out, GP_I32, cs[i].ndim - 1, cs[i].ne, 1.0f);
        if (i == 3)
            memcpy(x.h.data, special, sizeof special);
        if (i == 4) { /* ties far apart (other blocks of a cluster); NaN around a -inf and a 2 */
            float *v = x.h.data;
            for (int j = 0; j < 5000; j++) {
                v[j] = 1.0f;
                v[5000 + j] = NAN;
            }
            v[4000] = v[1234] = v[4999] = 7.0f;
            v[5000 + 3000] = -INFINITY;
            v[5000 + 4500] = 2.0f;
        }
        if (i >= 3)
            cudaMemcpy(x.d.data, x.h.data, x.bytes, cudaMemcpyHostToDevice);
        tt *ins[1] = {&x};
        gp_attrs at = {{0}, {0}};
        k.c.pdl = (int)(i % 2);
        for (int cl = 0; cl <= clusters; cl++) {
            k.c.clusters = cl;
            char name[48];
            snprintf(name, sizeof name, "argmax case %zu, clusters %d", i, cl);
            CHECK_ERR(name, run_op(GP_OP_ARGMAX, &at, &out, ins, 1, 0, &k), 0.0);
            int32_t *g = malloc(out.bytes);
            cudaMemcpy(g, out.d.data, out.bytes, cudaMemcpyDeviceToHost);
            CU_ASSERT_EQUAL(memcmp(g, out.h.data, out.bytes), 0);
            for (int r = 0; i == 3 && r < 5; r++)
                CU_ASSERT_EQUAL(g[r], want[r]);
            CU_ASSERT(i != 4 || (g[0] == 1234 && g[1] == 4500));
            free(g);
            /* The argmax that writes x and its result to mapped host memory as it goes: the same
             * indices and x's bits (NaNs too); f32 x only. */
            unsigned char *hx = NULL, *ho = NULL;
            void *dx = NULL, *dout = NULL;
            CU_ASSERT_EQUAL_FATAL(cudaHostAlloc((void **)&hx, x.bytes, cudaHostAllocMapped), 0);
            CU_ASSERT_EQUAL_FATAL(cudaHostAlloc((void **)&ho, out.bytes, cudaHostAllocMapped), 0);
            CU_ASSERT_EQUAL(cudaHostGetDevicePointer(&dx, hx, 0), 0);
            CU_ASSERT_EQUAL(cudaHostGetDevicePointer(&dout, ho, 0), 0);
            memset(hx, 0xee, x.bytes);
            memset(ho, 0xee, out.bytes);
            gp_cu_tensor oh = out.d;
            oh.data = dout;
            int rc = gp_cuda_argmax_copy(&k.c, &oh, &x.d, dx);
            CU_ASSERT_EQUAL(rc, cs[i].t == GP_F32 ? 0 : -1);
            CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
            if (cs[i].t == GP_F32) {
                CU_ASSERT_EQUAL(memcmp(hx, x.h.data, x.bytes), 0);
                CU_ASSERT_EQUAL(memcmp(ho, out.h.data, out.bytes), 0);
            }
            cudaFreeHost(hx);
            cudaFreeHost(ho);
        }
        tt_free(&x);
        tt_free(&out);
    }
    kctx_free(&k);
}

static void test_store(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    int64_t sd[3] = {20, 4, 16}, sp[1] = {6}, ss[3] = {6, 4, 16};
    tt dst, pos, src;
    tt_new(&dst, GP_F16, 3, sd, 1.0f);
    tt_new(&pos, GP_I32, 1, sp, 20.0f);
    tt_new(&src, GP_F32, 3, ss, 1.0f);
    /* A repeated position: the largest t must win, as on the CPU. */
    int32_t p[6] = {3, 17, 3, 0, 19, 3};
    memcpy(pos.h.data, p, sizeof p);
    cudaMemcpy(pos.d.data, p, sizeof p, cudaMemcpyHostToDevice);
    gp_ktensor hin[3] = {dst.h, pos.h, src.h};
    gp_cu_tensor din[3] = {dst.d, pos.d, src.d};
    gp_attrs at = {{0}, {0}};
    gp_cpu_compute(GP_OP_STORE, &at, &dst.h, hin, 3, NULL, 0, 0, 1);
    CU_ASSERT_EQUAL(gp_cuda_compute(&k.c, GP_OP_STORE, &at, &dst.d, din, 3, NULL, 0), 0);
    cudaDeviceSynchronize();
    gp_ktensor g = dst.h;
    g.data = malloc(dst.bytes);
    cudaMemcpy(g.data, dst.d.data, dst.bytes, cudaMemcpyDeviceToHost);
    CU_ASSERT_EQUAL(memcmp(g.data, dst.h.data, dst.bytes), 0);
    free(g.data);
    tt_free(&dst);
    tt_free(&pos);
    tt_free(&src);
    kctx_free(&k);
}

/* Two stores in one launch (a layer's K and V), each source a strided view into one wider tensor
 * (as q, k and v are column blocks of one projection), against two CPU stores. */
static void test_store2(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    int64_t sd[3] = {20, 4, 16}, sp[1] = {5}, sqkv[2] = {5, 3 * 64};
    tt d0, d1, pos, qkv;
    tt_new(&d0, GP_F16, 3, sd, 1.0f);
    tt_new(&d1, GP_F32, 3, sd, 1.0f);
    tt_new(&pos, GP_I32, 1, sp, 20.0f);
    tt_new(&qkv, GP_F32, 2, sqkv, 1.0f);
    int32_t p[5] = {7, 2, 19, 7, 0};
    memcpy(pos.h.data, p, sizeof p);
    cudaMemcpy(pos.d.data, p, sizeof p, cudaMemcpyHostToDevice);
    /* k = qkv[:, 64:128] and v = qkv[:, 128:192] as [5, 4, 16] */
    int64_t ve[3] = {5, 4, 16}, vb[3] = {3 * 64 * 4, 16 * 4, 4};
    gp_ktensor hk = qkv.h, hv = qkv.h;
    gp_cu_tensor dk = qkv.d, dv = qkv.d;
    hk.ndim = hv.ndim = dk.ndim = dv.ndim = 3;
    for (int d = 0; d < 3; d++) {
        hk.ne[d] = hv.ne[d] = dk.ne[d] = dv.ne[d] = ve[d];
        hk.nb[d] = hv.nb[d] = dk.nb[d] = dv.nb[d] = vb[d];
        dk.sym[d] = dv.sym[d] = -1;
    }
    hk.data = (char *)qkv.h.data + 64 * 4;
    hv.data = (char *)qkv.h.data + 128 * 4;
    dk.data = (char *)qkv.d.data + 64 * 4;
    dv.data = (char *)qkv.d.data + 128 * 4;
    gp_ktensor h0[3] = {d0.h, pos.h, hk}, h1[3] = {d1.h, pos.h, hv};
    gp_cu_tensor g0[3] = {d0.d, pos.d, dk}, g1[3] = {d1.d, pos.d, dv};
    gp_attrs at = {{0}, {0}};
    gp_cpu_compute(GP_OP_STORE, &at, &d0.h, h0, 3, NULL, 0, 0, 1);
    gp_cpu_compute(GP_OP_STORE, &at, &d1.h, h1, 3, NULL, 0, 0, 1);
    k.c.pdl = 1;
    CU_ASSERT_EQUAL(gp_cuda_store2(&k.c, g0, g1, 0), 0);
    CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
    tt *dst[2] = {&d0, &d1};
    for (int i = 0; i < 2; i++) {
        void *g = malloc(dst[i]->bytes);
        cudaMemcpy(g, dst[i]->d.data, dst[i]->bytes, cudaMemcpyDeviceToHost);
        CU_ASSERT_EQUAL(memcmp(g, dst[i]->h.data, dst[i]->bytes), 0);
        free(g);
    }
    /* Sources with different rows are refused. */
    gp_cu_tensor g1b[3] = {d1.d, pos.d, dv};
    g1b[2].ne[0] = 4;
    CU_ASSERT_EQUAL(gp_cuda_store2(&k.c, g0, g1b, 0), -1);
    tt_free(&d0);
    tt_free(&d1);
    tt_free(&pos);
    tt_free(&qkv);
    kctx_free(&k);
}

/* The epilogue v + bias, then gelu (GPT-2's c_fc), into out. */
static gp_cu_epilogue epi_bias_gelu(gp_cu_tensor bias, gp_cu_tensor out)
{
    gp_cu_epilogue e;
    memset(&e, 0, sizeof e);
    e.n = 2;
    e.op[0] = GP_OP_ADD;
    e.other[0] = bias;
    e.op[1] = GP_OP_GELU;
    e.out = out;
    return e;
}

/* A norm's operands for the tests of matvecs that compute it: x [M, K] (f32), its weight g and
 * bias b [K] (f16), h = norm(x) [M, K] on the host unless norm is NORM_NONE (its device copy
 * poisoned: a kernel computing the norm never reads it), and pre as gp_cuda_matmul_fused takes
 * it. Made first, in this order, so the random values stay those the tests were written with. */
enum { NORM_NONE, NORM_LN, NORM_RMS };
typedef struct {
    tt x, g, b, h;
    gp_cu_prenorm pre;
} tnorm;

static void tnorm_new(tnorm *n, int norm, int64_t M, int64_t K)
{
    int64_t sx[2] = {M, K}, sk[1] = {K};
    tt_new(&n->x, GP_F32, 2, sx, 3.0f);
    tt_new(&n->g, GP_F16, 1, sk, 1.0f);
    tt_new(&n->b, GP_F16, 1, sk, 1.0f);
    tt_new(&n->h, GP_F32, 2, sx, 1.0f);
    if (norm != NORM_NONE) {
        gp_attrs an = {{0}, {1e-5, 0}};
        gp_ktensor nin[3] = {n->x.h, n->g.h, n->b.h};
        gp_cpu_compute(norm == NORM_LN ? GP_OP_LAYER_NORM : GP_OP_RMS_NORM, &an, &n->h.h, nin,
                       norm == NORM_LN ? 3 : 2, NULL, 0, 0, 1);
    }
    gp_cu_prenorm pre = {norm == NORM_LN, 1e-5f, n->x.d, n->g.d, n->b.d, NULL, 0.0f};
    if (norm != NORM_LN)
        pre.b.data = NULL;
    n->pre = pre;
    cudaMemset(n->h.d.data, 0xff, n->h.bytes);
}

static void tnorm_free(tnorm *n)
{
    tt_free(&n->x);
    tt_free(&n->g);
    tt_free(&n->b);
    tt_free(&n->h);
    cudaFree((void *)n->pre.fold);
}

/* n's layer norm folded into the product with w (gp_cuda_fold): the constants in a buffer of their
 * own in n->pre.fold (tnorm_free frees it). Returns gp_cuda_fold's count (0: not taken). */
static int64_t tnorm_fold(kctx *k, tnorm *n, const gp_attrs *am, const tt *w)
{
    int64_t cnt = gp_cuda_fold(&k->c, &n->pre, am, &w->d, NULL);
    CU_ASSERT(cnt >= 0);
    if (cnt <= 0)
        return cnt;
    float *d = NULL;
    CU_ASSERT_EQUAL_FATAL(cudaMalloc((void **)&d, (size_t)cnt * sizeof(float)), cudaSuccess);
    CU_ASSERT_EQUAL(gp_cuda_fold(&k->c, &n->pre, am, &w->d, d), cnt);
    CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
    n->pre.fold = d;
    return cnt;
}

/* A norm computed inside the matrix-vector kernel (gp_cu_prenorm) against the CPU's norm then
 * matmul: layer norm with bias and rms norm, weights [K, N] and [N, K], f16, bf16 and f32, a
 * layer norm of x far from 0 and of x whose first element carries nearly all its variance; with
 * two rows the matmul refuses the norm and launches nothing. Each layer norm before [K, N]
 * weights of K <= 2048 again folded (gp_cuda_fold), which the others refuse. */
static void test_matvec_prenorm(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    enum { PLAIN, OFFSET, OUTLIER };
    const struct {
        int is_ln, tb;
        gp_dtype wt;
        int64_t K, N, M;
        int x;
    } cs[] = {{1, 0, GP_F16, 1600, 4800, 1, PLAIN}, {0, 1, GP_F32, 256, 72, 1, PLAIN},
              {1, 1, GP_F16, 768, 200, 1, PLAIN},   {0, 0, GP_BF16, 64, 256, 1, PLAIN},
              {1, 0, GP_F16, 128, 256, 2, PLAIN},   {1, 0, GP_F16, 1600, 4800, 1, OFFSET},
              {1, 1, GP_F16, 1600, 200, 1, OUTLIER}, {1, 0, GP_F16, 1600, 4800, 1, OUTLIER},
              {1, 0, GP_BF16, 1000, 320, 1, PLAIN}, {1, 0, GP_F32, 2048, 96, 1, PLAIN},
              {1, 0, GP_F16, 2560, 512, 1, PLAIN}};
    /* Each case draws from a seed of its own, so its data depend on no test run before it. The
     * shared generator is then moved on as far as this test always moved it, so that the tests
     * after it keep the data they were written with. */
    uint64_t entry = rng, draws = 0;
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        int64_t K = cs[i].K, N = cs[i].N, M = cs[i].M;
        int64_t sw[2] = {cs[i].tb ? N : K, cs[i].tb ? K : N}, so[2] = {M, N};
        tnorm nm;
        tt w, out;
        rng = 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull * (i + 1);
        draws += (uint64_t)(2 * M * K + 2 * K + K * N + M * N); /* x, g, b, h, w, out */
        tnorm_new(&nm, cs[i].is_ln ? NORM_LN : NORM_RMS, M, K);
        if (cs[i].x != PLAIN) {
            /* x far from 0 (1000 + [-3, 3)), or x[0] an outlier carrying nearly all the variance
             * (3000 among [-3, 3)): the worst case for the layer norm's shifted sums */
            float *xv = nm.x.h.data;
            for (int64_t j = 0; j < M * K; j++)
                xv[j] += cs[i].x == OFFSET ? 1000.0f : 0.0f;
            if (cs[i].x == OUTLIER)
                xv[0] = 3000.0f;
            cudaMemcpy(nm.x.d.data, xv, nm.x.bytes, cudaMemcpyHostToDevice);
            gp_attrs an = {{0}, {1e-5, 0}};
            gp_ktensor nin[3] = {nm.x.h, nm.g.h, nm.b.h};
            gp_cpu_compute(GP_OP_LAYER_NORM, &an, &nm.h.h, nin, 3, NULL, 0, 0, 1);
        }
        /* The tolerance (relative L2 error of the output), from the case's own x. Both sides
         * read the same x, g, b and weights and compute in f32; the product's sums in another
         * order differ by about sqrt(K) eps_f32 of the output (< 1e-5 here), within the flat
         * 1e-5 (f32 weights) or 1e-4. A layer norm adds its variance: the kernel takes it from
         * sums shifted by x[0] (norm_stats, cuda/cuda_internal.cuh), E[(x-x0)^2] - E[x-x0]^2,
         * two terms of about var + (x0 - mean)^2 that cancel down to var. Each carries a few
         * eps_f32 of itself (the squares' and the tree reduction's roundings, about 11 levels
         * for K = 1600): the variance's relative error is up to ~20 eps_f32 (x0 - mean)^2 / var,
         * and 1 / sqrt(var), which scales every h and so the output, half of it. With x[0] the
         * outlier, (x0 - mean)^2 / var = K - 1: ~1e-4 typical (1.49e-4 was seen once against a
         * flat 1e-4), ~1e-3 at worst; for x of no outlier the term stays below 2e-6. */
        double tol = cs[i].wt == GP_F32 ? 1e-5 : 1e-4;
        if (cs[i].is_ln) {
            const float *xv = nm.x.h.data;
            double mean = 0, var = 0;
            for (int64_t j = 0; j < K; j++)
                mean += xv[j];
            mean /= (double)K;
            for (int64_t j = 0; j < K; j++)
                var += (xv[j] - mean) * (xv[j] - mean);
            var /= (double)K;
            tol += 10 * 0x1p-24 * (xv[0] - mean) * (xv[0] - mean) / var;
        }
        tt_new(&w, cs[i].wt, 2, sw, 1.0f);
        tt_new(&out, GP_F32, 2, so, 1.0f);
        gp_attrs am = {{0, cs[i].tb, 0, 0}, {0}};
        gp_ktensor min[2] = {nm.h.h, w.h};
        gp_cpu_compute(GP_OP_MATMUL, &am, &out.h, min, 2, NULL, 0, 0, 1);
        gp_cu_tensor din[2] = {nm.h.d, w.d};
        void *ws = NULL;
        cudaMalloc(&ws, (size_t)GP_WS_CUBLAS_BYTES);
        int folds = cs[i].is_ln && !cs[i].tb && K <= 2048;
        for (int f = 0; f <= folds; f++) {
            int64_t want = folds ? 2 * N : 0;
            CU_ASSERT_EQUAL(f ? tnorm_fold(&k, &nm, &am, &w)
                              : gp_cuda_fold(&k.c, &nm.pre, &am, &w.d, NULL),
                            want);
            cudaMemset(out.d.data, 0xff, out.bytes);
            int fused = -1, used = -1;
            gp_cu_epilogue epi;
            memset(&epi, 0, sizeof epi);
            k.c.pdl = (int)(i % 2);
            /* even cases: weights and the norm's weights loaded before the wait (nothing
             * written during the launch is read before it) */
            k.c.const_lo = i % 2 ? NULL : (const void *)1;
            k.c.const_hi = i % 2 ? NULL : (const void *)UINTPTR_MAX;
            int64_t f0 = gp_cuda_matvec_fold_count();
            CU_ASSERT_EQUAL(gp_cuda_matmul_fused(&k.c, &am, &out.d, din, ws,
                                                 (size_t)GP_WS_CUBLAS_BYTES, &epi, &nm.pre, &fused,
                                                 &used),
                            0);
            CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
            CU_ASSERT_EQUAL(used, M == 1);
            CU_ASSERT_EQUAL(gp_cuda_matvec_fold_count() - f0, f && M == 1);
            if (M == 1) {
                char name[64];
                snprintf(name, sizeof name, "matvec with norm, case %zu%s", i,
                         f ? ", folded" : "");
                CHECK_ERR(name, device_err(&out), tol);
            } else {
                CU_ASSERT(device_untouched(&out)); /* nothing launched */
            }
        }
        cudaFree(ws);
        tnorm_free(&nm);
        tt_free(&w);
        tt_free(&out);
    }
    rng = entry;
    for (uint64_t j = 0; j < draws; j++)
        gp_test_rand(&rng);
    kctx_free(&k);
}

/* One row width of test_blas_epilogue's cases. */
static void blas_epilogue_rows(kctx *kc, void *ws, int64_t N)
{
    gp_attrs am = {{0, 0, 0, 0}, {0}}, none = {{0}, {0}};
    enum { M = 37, K = 96 };
    int64_t sa[2] = {M, K}, sw[2] = {K, N}, so[2] = {M, N}, sn[1] = {N};
    tt a, w, prod, bias, res, out;
    tt_new(&a, GP_F32, 2, sa, 1.0f);
    tt_new(&w, GP_F16, 2, sw, 1.0f);
    tt_new(&bias, GP_F16, 1, sn, 1.0f);
    gp_cu_tensor din[2] = {a.d, w.d};
    /* 0 bias, gelu; 1 bias, + residual over it; 2 bias over the product; 3 switched off; 4 out at
     * an offset into the product */
    for (int cs = 0; cs < 5; cs++) {
        tt_new(&prod, GP_F32, 2, so, 1.0f);
        tt_new(&res, GP_F32, 2, so, 2.0f);
        tt_new(&out, GP_F32, 2, so, 1.0f);
        /* The product alone first: the reference is the CPU's epilogue of the device's product
         * (cuBLAS multiplies a in f16), so that the epilogue's own error shows. */
        int fused = -1;
        kc->c.blas_epi = 1;
        CU_ASSERT_EQUAL(gp_cuda_matmul_fused(&kc->c, &am, &prod.d, din, ws,
                                             (size_t)GP_WS_CUBLAS_BYTES, NULL, NULL, &fused, NULL),
                        0);
        CU_ASSERT_EQUAL(fused, 0);
        tt_download(&prod);
        gp_ktensor bin[2] = {prod.h, bias.h};
        gp_cpu_compute(GP_OP_ADD, &none, &out.h, bin, 2, NULL, 0, 0, 1); /* out = prod + bias */
        gp_cu_epilogue epi;
        memset(&epi, 0, sizeof epi);
        epi.n = cs == 0 || cs == 1 ? 2 : 1;
        epi.op[0] = GP_OP_ADD;
        epi.other[0] = bias.d;
        epi.out = out.d;
        tt *want = &out;
        if (cs == 0) {
            epi.op[1] = GP_OP_GELU;
            gp_cpu_compute(GP_OP_GELU, &none, &out.h, &out.h, 1, NULL, 0, 0, 1);
        } else if (cs == 1) {
            epi.op[1] = GP_OP_ADD;
            epi.other[1] = res.d;
            epi.out = res.d;
            gp_ktensor rin[2] = {out.h, res.h};
            gp_cpu_compute(GP_OP_ADD, &none, &res.h, rin, 2, NULL, 0, 0, 1);
            want = &res;
        } else if (cs == 2) {
            epi.out = prod.d;
            memcpy(prod.h.data, out.h.data, prod.bytes);
            want = &prod;
        } else if (cs == 4) {
            /* the product's shape from row 1, column 1 (only looked at: nothing is written) */
            epi.out.data = (char *)prod.d.data + 4 * (N + 1);
        }
        if (cs >= 3) /* the product alone, again */
            want = &prod;
        kc->c.blas_epi = cs != 3;
        int64_t n0 = gp_cuda_blas_epilogue_count(0), v0 = gp_cuda_blas_epilogue_count(1);
        CU_ASSERT_EQUAL(gp_cuda_matmul_fused(&kc->c, &am, &prod.d, din, ws,
                                             (size_t)GP_WS_CUBLAS_BYTES, &epi, NULL, &fused, NULL),
                        0);
        CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
        CU_ASSERT_EQUAL(fused, cs < 3);
        CU_ASSERT_EQUAL(gp_cuda_blas_epilogue_count(0) - n0, cs < 3);
        CU_ASSERT_EQUAL(gp_cuda_blas_epilogue_count(1) - v0, cs < 3 && N % 4 == 0);
        char name[64];
        snprintf(name, sizeof name, "cuBLAS product with its epilogue, N %lld, case %d",
                 (long long)N, cs);
        CHECK_ERR(name, device_err(want), 1e-6);
        tt_free(&prod);
        tt_free(&res);
        tt_free(&out);
    }
    tt_free(&a);
    tt_free(&w);
    tt_free(&bias);
}

/*
 * A prompt's product (cuBLAS, 37 rows) with its epilogue in one launch after it (k_epilogue)
 * against the CPU's matmul and elementwise nodes: bias and gelu into another tensor; bias and a
 * residual written over the residual; bias written over the product itself; rows of 1500 (two
 * spans of a block, in vectors of 4) and 1501 (one by one). Not fused: when switched off, and
 * when out overlaps the product at an offset (a thread would read what another wrote), where the
 * product alone is written.
 */
static void test_blas_epilogue(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    void *ws = NULL;
    cudaMalloc(&ws, (size_t)GP_WS_CUBLAS_BYTES);
    blas_epilogue_rows(&k, ws, 1500); /* in vectors of 4 */
    blas_epilogue_rows(&k, ws, 1501); /* one by one */
    cudaFree(ws);
    kctx_free(&k);
}

/* [K, N] products whose splits combine inside a cluster (k_matvec_kc) against the CPU's matmul,
 * norm and epilogue: GPT-2 1558M's and 117M's four products (staged layer norm, bias, gelu,
 * residual), a staged rms norm, f32 and bf16 weights, a K split over 15 blocks of 7 rows, a
 * product wide enough for one block per column tile (no cluster); with clusters of up to 16 and
 * of up to 8, the same bits on a second launch, and the split-K kernel through global memory
 * (clusters off) right too; the layer norms again folded (gp_cuda_fold). The counters stay at
 * zero. */
static void test_matvec_cluster(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    int major = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    int ok16 = gp_cuda_matvec_cluster_ok(16, k.c.mv_cluster_fit);
    CU_ASSERT_EQUAL(ok16, major >= 9); /* clusters: sm_90 on */
    CU_ASSERT_EQUAL(gp_cuda_matvec_cluster_ok(8, NULL), major >= 9);
    CU_ASSERT_EQUAL(gp_cuda_matvec_cluster_ok(17, NULL), 0);
    CU_ASSERT_EQUAL(gp_cuda_matvec_cluster_ok(1, NULL), 0);
    CU_ASSERT(!ok16 || k.c.mv_cluster_fit[2] >= 1);
    for (int c = 3; ok16 && c <= 16; c++) /* at least one fits, fewer as they grow */
        CU_ASSERT(k.c.mv_cluster_fit[c] >= 1 && k.c.mv_cluster_fit[c] <= k.c.mv_cluster_fit[c - 1]);
    enum { NONE = NORM_NONE, LN = NORM_LN, RMS = NORM_RMS };
    enum { E_NONE, E_BIAS, E_GELU, E_RES };
    const struct {
        int norm, epi;
        gp_dtype wt;
        int64_t K, N;
    } cs[] = {{LN, E_BIAS, GP_F16, 1600, 4800}, {NONE, E_RES, GP_F16, 1600, 1600},
              {LN, E_GELU, GP_F16, 1600, 6400}, {NONE, E_RES, GP_F16, 6400, 1600},
              {LN, E_BIAS, GP_F16, 768, 2304},  {NONE, E_RES, GP_F16, 3072, 768},
              {RMS, E_NONE, GP_BF16, 768, 2304}, {NONE, E_NONE, GP_F32, 1000, 332},
              {LN, E_GELU, GP_F16, 100, 40},    {RMS, E_BIAS, GP_F16, 64, 50000}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        int64_t K = cs[i].K, N = cs[i].N;
        int64_t sw[2] = {K, N}, so[2] = {1, N}, sn[1] = {N};
        tnorm nm;
        tt w, prod, bias, res, out;
        tnorm_new(&nm, cs[i].norm, 1, K);
        tt_new(&w, cs[i].wt, 2, sw, 1.0f);
        tt_new(&prod, GP_F32, 2, so, 1.0f);
        tt_new(&bias, GP_F16, 1, sn, 1.0f);
        tt_new(&res, GP_F32, 2, so, 2.0f);
        tt_new(&out, GP_F32, 2, so, 1.0f);
        gp_attrs am = {{0, 0, 0, 0}, {0}}, none = {{0}, {0}};
        gp_ktensor min[2] = {cs[i].norm ? nm.h.h : nm.x.h, w.h};
        gp_cpu_compute(GP_OP_MATMUL, &am, cs[i].epi ? &prod.h : &out.h, min, 2, NULL, 0, 0, 1);
        gp_ktensor bin[2] = {prod.h, bias.h}, rin[2] = {prod.h, res.h};
        if (cs[i].epi == E_BIAS)
            gp_cpu_compute(GP_OP_ADD, &none, &out.h, bin, 2, NULL, 0, 0, 1);
        if (cs[i].epi == E_GELU) {
            gp_cpu_compute(GP_OP_ADD, &none, &prod.h, bin, 2, NULL, 0, 0, 1);
            gp_cpu_compute(GP_OP_GELU, &none, &out.h, &prod.h, 1, NULL, 0, 0, 1);
        }
        if (cs[i].epi == E_RES) {
            gp_cpu_compute(GP_OP_ADD, &none, &prod.h, bin, 2, NULL, 0, 0, 1);
            gp_cpu_compute(GP_OP_ADD, &none, &out.h, rin, 2, NULL, 0, 0, 1);
        }
        gp_cu_epilogue epi;
        memset(&epi, 0, sizeof epi);
        epi.n = cs[i].epi == E_NONE ? 0 : cs[i].epi == E_BIAS ? 1 : 2;
        epi.op[0] = GP_OP_ADD;
        epi.other[0] = bias.d;
        epi.op[1] = cs[i].epi == E_GELU ? GP_OP_GELU : GP_OP_ADD;
        epi.other[1] = res.d;
        epi.out = out.d;
        gp_cu_tensor din[2] = {cs[i].norm ? nm.h.d : nm.x.d, w.d};
        void *ws = NULL;
        cudaMalloc(&ws, (size_t)GP_WS_CUBLAS_BYTES);
        /* odd cases: weights, the norm's weights and the epilogue's operands loaded early */
        k.c.pdl = (int)(i % 2);
        k.c.const_lo = i % 2 ? (const void *)1 : NULL;
        k.c.const_hi = i % 2 ? (const void *)UINTPTR_MAX : NULL;
        k.c.epi_early = (int)(i % 2);
        const int cl[3] = {ok16 ? 16 : 0, ok16 ? 8 : 0, 0};
        k.c.mv_cluster_pre = 3;
        /* layer norms: then folded (gp_cuda_fold), in clusters and in kn2 */
        int folds = cs[i].norm == LN;
        for (int v = 0; v < 3 * (1 + folds); v++) {
            if (v == 3)
                CU_ASSERT_EQUAL(tnorm_fold(&k, &nm, &am, &w), 2 * N);
            k.c.mv_cluster = cl[v % 3];
            float *bits[2];
            int64_t f0 = gp_cuda_matvec_fold_count();
            for (int rep = 0; rep < 2; rep++) {
                cudaMemset(out.d.data, 0xff, out.bytes);
                int fused = -1, used = -1;
                CU_ASSERT_EQUAL(gp_cuda_matmul_fused(&k.c, &am, epi.n ? &prod.d : &out.d, din, ws,
                                                     (size_t)GP_WS_CUBLAS_BYTES,
                                                     epi.n ? &epi : NULL,
                                                     cs[i].norm ? &nm.pre : NULL, &fused, &used),
                                0);
                CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
                CU_ASSERT_EQUAL(fused, epi.n > 0);
                CU_ASSERT_EQUAL(used, cs[i].norm != NONE);
                bits[rep] = malloc(out.bytes);
                cudaMemcpy(bits[rep], out.d.data, out.bytes, cudaMemcpyDeviceToHost);
            }
            CU_ASSERT_EQUAL(gp_cuda_matvec_fold_count() - f0, v >= 3 ? 2 : 0);
            CU_ASSERT(memcmp(bits[0], bits[1], out.bytes) == 0);
            free(bits[0]);
            free(bits[1]);
            char name[80];
            snprintf(name, sizeof name, "matvec, cluster of up to %d, case %zu%s", cl[v % 3], i,
                     v >= 3 ? ", folded" : "");
            CHECK_ERR(name, device_err(&out), cs[i].wt == GP_F32 ? 1e-5 : 1e-4);
        }
        unsigned cnt[GP_CU_COUNTERS], left = 0;
        cudaMemcpy(cnt, k.counters, sizeof cnt, cudaMemcpyDeviceToHost);
        for (int c = 0; c < GP_CU_COUNTERS; c++)
            left += cnt[c];
        CU_ASSERT_EQUAL(left, 0);
        cudaFree(ws);
        tnorm_free(&nm);
        tt *all[5] = {&w, &prod, &bias, &res, &out};
        for (int t = 0; t < 5; t++)
            tt_free(all[t]);
    }
    k.c.mv_cluster = 0;
    kctx_free(&k);
}

/*
 * [K, N] products added into a residual in place (out = x W + bias + out, k_matvec_kc's add: every
 * split adds its sums with atomics) against the CPU: GPT-2 1558M's and 117M's c_proj and proj, f32
 * weights with the residual alone, bf16 with the residual added first, the product of a layer norm
 * folded into it (gp_cuda_fold: split 0 adds the fold's constants); with clusters or without,
 * weights and operands early or not, at most 16 or 8 splits (right each time; the bits may
 * differ between runs). Refused, and still right by the cluster kernel: a residual in another
 * buffer, a MUL in the epilogue.
 */
static void test_matvec_add(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    int ok16 = gp_cuda_matvec_cluster_ok(16, k.c.mv_cluster_fit);
    enum { BIAS_RES, RES, RES_BIAS, APART, MUL, LN_BIAS_RES };
    const struct {
        int kind;
        gp_dtype wt;
        int64_t K, N;
    } cs[] = {{BIAS_RES, GP_F16, 1600, 1600}, {BIAS_RES, GP_F16, 6400, 1600},
              {BIAS_RES, GP_F16, 768, 768},   {BIAS_RES, GP_F16, 3072, 768},
              {RES, GP_F32, 1000, 332},       {RES_BIAS, GP_BF16, 2048, 512},
              {APART, GP_F16, 1600, 1600},    {MUL, GP_F16, 1600, 1600},
              {LN_BIAS_RES, GP_F16, 1600, 1600}};
    void *ws = NULL;
    cudaMalloc(&ws, (size_t)GP_WS_CUBLAS_BYTES);
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        int kind = cs[i].kind, takes = kind <= RES_BIAS || kind == LN_BIAS_RES;
        int64_t K = cs[i].K, N = cs[i].N;
        int64_t sw[2] = {K, N}, sx[2] = {1, K}, so[2] = {1, N}, sn[1] = {N};
        tt w, x, prod, bias, res, out, scale;
        tt_new(&w, cs[i].wt, 2, sw, 1.0f);
        tt_new(&x, GP_F32, 2, sx, 1.0f);
        tt_new(&prod, GP_F32, 2, so, 1.0f);
        tt_new(&bias, GP_F16, 1, sn, 1.0f);
        tt_new(&res, GP_F32, 2, so, 2.0f);
        tt_new(&out, GP_F32, 2, so, 1.0f);
        tt_new(&scale, GP_F32, 1, sn, 1.0f);
        gp_attrs am = {{0, 0, 0, 0}, {0}}, none = {{0}, {0}};
        /* LN_BIAS_RES: the product of x's layer norm, folded (gp_cuda_fold) */
        tnorm nm;
        tnorm_new(&nm, kind == LN_BIAS_RES ? NORM_LN : NORM_NONE, 1, K);
        if (kind == LN_BIAS_RES)
            CU_ASSERT_EQUAL(tnorm_fold(&k, &nm, &am, &w), 2 * N);
        gp_ktensor min[2] = {kind == LN_BIAS_RES ? nm.h.h : x.h, w.h};
        gp_cpu_compute(GP_OP_MATMUL, &am, &prod.h, min, 2, NULL, 0, 0, 1);
        gp_ktensor bin[2] = {prod.h, bias.h}, rin[2] = {prod.h, res.h};
        if (kind != RES)
            gp_cpu_compute(GP_OP_ADD, &none, &prod.h, kind == RES_BIAS ? rin : bin, 2, NULL, 0, 0,
                           1);
        gp_cpu_compute(GP_OP_ADD, &none, &out.h, kind == RES_BIAS ? bin : rin, 2, NULL, 0, 0, 1);
        if (kind == MUL) {
            memcpy(prod.h.data, out.h.data, out.bytes);
            gp_ktensor m2[2] = {prod.h, scale.h};
            gp_cpu_compute(GP_OP_MUL, &none, &out.h, m2, 2, NULL, 0, 0, 1);
        }
        /* The device's output: res's bytes (in place) except for APART. */
        gp_cu_tensor dout = kind == APART ? out.d : res.d, dres = res.d;
        gp_cu_epilogue epi;
        memset(&epi, 0, sizeof epi);
        epi.n = kind == RES ? 1 : kind == MUL ? 3 : 2;
        epi.op[0] = epi.op[1] = epi.op[2] = GP_OP_ADD;
        epi.other[0] = kind == RES || kind == RES_BIAS ? dres : bias.d;
        epi.other[1] = kind == RES_BIAS ? bias.d : dres;
        if (kind == MUL) {
            epi.op[2] = GP_OP_MUL;
            epi.other[2] = scale.d;
        }
        epi.out = dout;
        gp_cu_tensor din[2] = {kind == LN_BIAS_RES ? nm.h.d : x.d, w.d};
        for (int v = 0; v < 4; v++) {
            k.c.pdl = v % 2;
            k.c.const_lo = v % 2 ? (const void *)1 : NULL;
            k.c.const_hi = v % 2 ? (const void *)UINTPTR_MAX : NULL;
            k.c.epi_early = v % 2;
            k.c.mv_cluster = v / 2 && ok16 ? 16 : 0;
            k.c.mv_add = 16;
            k.c.mv_add_narrow = v == 3 ? 8 : 0; /* at most 8 splits for N <= 1024 */
            k.c.mv_cluster_pre = 3;              /* LN_BIAS_RES: the norm's product in kc too */
            cudaMemcpy(res.d.data, res.h.data, res.bytes, cudaMemcpyHostToDevice);
            cudaMemset(out.d.data, 0xff, out.bytes);
            int64_t n0 = gp_cuda_matvec_add_count(), f0 = gp_cuda_matvec_fold_count();
            int fused = -1, used = -1;
            CU_ASSERT_EQUAL(gp_cuda_matmul_fused(&k.c, &am, &prod.d, din, ws,
                                                 (size_t)GP_WS_CUBLAS_BYTES, &epi,
                                                 kind == LN_BIAS_RES ? &nm.pre : NULL, &fused,
                                                 &used),
                            0);
            CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
            CU_ASSERT_EQUAL(fused, 1);
            CU_ASSERT_EQUAL(used, kind == LN_BIAS_RES);
            CU_ASSERT_EQUAL(gp_cuda_matvec_add_count() - n0, takes);
            CU_ASSERT_EQUAL(gp_cuda_matvec_fold_count() - f0, kind == LN_BIAS_RES);
            tt got = out;
            got.d = dout;
            char name[80];
            snprintf(name, sizeof name, "matvec add, case %zu, variant %d", i, v);
            CHECK_ERR(name, device_err(&got), cs[i].wt == GP_F32 ? 1e-5 : 1e-4);
        }
        tt *all[7] = {&w, &x, &prod, &bias, &res, &out, &scale};
        for (int t = 0; t < 7; t++)
            tt_free(all[t]);
        tnorm_free(&nm);
    }
    cudaFree(ws);
    kctx_free(&k);
}

/*
 * Accumulated outputs, as plan_accumulate asks for them around gp_cuda_matmul_fused (gp_cu_ctx's
 * zero_p, acc, x_gelu), against the CPU: a [K, N] product zeroes the bytes a later one adds into
 * (an [N, K] one does not); that product, of a folded layer norm, adds its splits into them with
 * its bias and leaves its gelu to the next (GPT-2 1558M's and 117M's c_fc); the next (mlp.c_proj,
 * into the residual in place) stages gelu(x) (never made gelu(x) in place first: its kernel serves).
 * Asked without the gelu left, the product writes gelu itself.
 */
static void test_matvec_acc(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    k.c.mv_add = 16;
    const struct {
        int64_t K, N;
        int gelu_left;
    } cs[] = {{1600, 6400, 1}, {768, 3072, 1}, {768, 3072, 0}};
    void *ws = NULL;
    cudaMalloc(&ws, (size_t)GP_WS_CUBLAS_BYTES);
    gp_attrs am = {{0, 0, 0, 0}, {0}}, at = {{0, 1, 0, 0}, {0}}, none = {{0}, {0}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        int64_t K = cs[i].K, N = cs[i].N;
        int64_t s1[2] = {K, N}, s2[2] = {N, K}, sh[2] = {1, N}, sk[2] = {1, K}, sn[1] = {N},
                sb[1] = {K}, sz[2] = {K, K};
        tnorm nm;
        tnorm_new(&nm, NORM_LN, 1, K);
        tt w1, b1, h, hg, w2, b2, res, x0, w0, o0;
        tt_new(&w1, GP_F16, 2, s1, 1.0f);
        tt_new(&b1, GP_F16, 1, sn, 1.0f);
        tt_new(&h, GP_F32, 2, sh, 1.0f);
        tt_new(&hg, GP_F32, 2, sh, 1.0f);
        tt_new(&w2, GP_F16, 2, s2, 0.1f);
        tt_new(&b2, GP_F16, 1, sb, 1.0f);
        tt_new(&res, GP_F32, 2, sk, 2.0f);
        tt_new(&x0, GP_F32, 2, sk, 1.0f);
        tt_new(&w0, GP_F16, 2, sz, 1.0f);
        tt_new(&o0, GP_F32, 2, sk, 1.0f);
        /* the CPU: h = norm(x) w1 + b1, hg = gelu(h), res = hg w2 + b2 + res */
        gp_ktensor m1[2] = {nm.h.h, w1.h}, a1[2] = {h.h, b1.h};
        gp_cpu_compute(GP_OP_MATMUL, &am, &h.h, m1, 2, NULL, 0, 0, 1);
        gp_cpu_compute(GP_OP_ADD, &none, &h.h, a1, 2, NULL, 0, 0, 1);
        gp_cpu_compute(GP_OP_GELU, &none, &hg.h, &h.h, 1, NULL, 0, 0, 1);
        tt y;
        tt_new(&y, GP_F32, 2, sk, 1.0f);
        gp_ktensor m2[2] = {hg.h, w2.h}, a2[2] = {y.h, b2.h}, a3[2] = {y.h, res.h};
        gp_cpu_compute(GP_OP_MATMUL, &am, &y.h, m2, 2, NULL, 0, 0, 1);
        gp_cpu_compute(GP_OP_ADD, &none, &y.h, a2, 2, NULL, 0, 0, 1);
        gp_cpu_compute(GP_OP_ADD, &none, &y.h, a3, 2, NULL, 0, 0, 1);
        int fused = -1, used = -1;
        char name[80];
        /* 1. A [N, K] product leaves h alone; a [K, N] one zeroes it. */
        cudaMemset(h.d.data, 0xff, h.bytes);
        gp_cu_epilogue e0;
        memset(&e0, 0, sizeof e0);
        gp_cu_tensor d0[2] = {x0.d, w0.d};
        for (int tr = 1; tr >= 0; tr--) {
            k.c.zero_p = (float *)h.d.data;
            k.c.zero_n = N;
            CU_ASSERT_EQUAL(gp_cuda_matmul_fused(&k.c, tr ? &at : &am, &o0.d, d0, ws,
                                                 (size_t)GP_WS_CUBLAS_BYTES, &e0, NULL, &fused,
                                                 NULL),
                            0);
            CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
            CU_ASSERT_EQUAL(k.c.zero_done, !tr);
            if (tr)
                CU_ASSERT(device_untouched(&h));
            k.c.zero_p = NULL;
            k.c.zero_n = k.c.zero_done = 0;
        }
        int zeros = 1;
        {
            float *z = malloc(h.bytes);
            cudaMemcpy(z, h.d.data, h.bytes, cudaMemcpyDeviceToHost);
            for (int64_t j = 0; j < N; j++)
                zeros &= z[j] == 0.0f;
            free(z);
        }
        CU_ASSERT(zeros);
        /* 2. The folded product adds into the zeros: h = norm(x) w1 + b1, its gelu left. */
        CU_ASSERT_EQUAL(tnorm_fold(&k, &nm, &am, &w1), 2 * N);
        gp_cu_epilogue e1 = epi_bias_gelu(b1.d, h.d);
        gp_cu_tensor d1[2] = {nm.h.d, w1.d};
        k.c.acc = 1;
        k.c.acc_gelu = cs[i].gelu_left;
        int64_t n_acc = gp_cuda_matvec_acc_count(0);
        CU_ASSERT_EQUAL(gp_cuda_matmul_fused(&k.c, &am, &h.d, d1, ws, (size_t)GP_WS_CUBLAS_BYTES,
                                             &e1, &nm.pre, &fused, &used),
                        0);
        CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
        CU_ASSERT_EQUAL(used, 1);
        CU_ASSERT_EQUAL(k.c.acc_done, cs[i].gelu_left); /* a GELU not left: no adds only */
        CU_ASSERT_EQUAL(k.c.acc_gelu_done, cs[i].gelu_left);
        CU_ASSERT_EQUAL(gp_cuda_matvec_acc_count(0) - n_acc, cs[i].gelu_left);
        snprintf(name, sizeof name, "accumulated c_fc, case %zu", i);
        if (cs[i].gelu_left) {
            CHECK_ERR(name, device_err(&h), 1e-4);
        } else {
            tt hgd = hg;
            hgd.d = h.d; /* written whole, gelu included */
            CHECK_ERR(name, device_err(&hgd), 1e-4);
        }
        k.c.acc = k.c.acc_gelu = k.c.acc_done = k.c.acc_gelu_done = 0;
        /* 3. The next product reads gelu(h): staged by its kernel, or h made gelu(h) first. */
        gp_cu_epilogue e2;
        memset(&e2, 0, sizeof e2);
        e2.n = 2;
        e2.op[0] = e2.op[1] = GP_OP_ADD;
        e2.other[0] = b2.d;
        e2.other[1] = res.d;
        e2.out = res.d;
        gp_cu_tensor d2[2] = {h.d, w2.d};
        k.c.x_gelu = cs[i].gelu_left;
        int64_t n_st = gp_cuda_matvec_acc_count(1), n_in = gp_cuda_matvec_acc_count(2);
        CU_ASSERT_EQUAL(gp_cuda_matmul_fused(&k.c, &am, &res.d, d2, ws,
                                             (size_t)GP_WS_CUBLAS_BYTES, &e2, NULL, &fused, NULL),
                        0);
        CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
        CU_ASSERT_EQUAL(k.c.x_gelu, 0);
        CU_ASSERT_EQUAL(gp_cuda_matvec_acc_count(1) - n_st, cs[i].gelu_left);
        CU_ASSERT_EQUAL(gp_cuda_matvec_acc_count(2) - n_in, 0);
        tt yd = y;
        yd.d = res.d;
        snprintf(name, sizeof name, "mlp.c_proj of gelu(x), case %zu", i);
        CHECK_ERR(name, device_err(&yd), 1e-4);
        tt *all[11] = {&w1, &b1, &h, &hg, &w2, &b2, &res, &x0, &w0, &o0, &y};
        for (int t = 0; t < 11; t++)
            tt_free(all[t]);
        tnorm_free(&nm);
    }
    cudaFree(ws);
    kctx_free(&k);
}

/* [N, K] products of short rows, two rows per warp (k_matvec_nk2_pairs): the same bits as one row
 * per warp, and right against the CPU; GPT-2 117M's LM head, an odd N, a full 128 chunks, f32
 * rows of 50 chunks, an epilogue, weights loaded before the wait or after. */
static void test_matvec_pairs(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    const struct {
        gp_dtype wt;
        int64_t K, N;
        int epi;
    } cs[] = {{GP_F16, 768, 50257, 0}, {GP_F16, 1024, 77, 1}, {GP_BF16, 256, 384, 0},
              {GP_F32, 200, 9, 1}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        int64_t K = cs[i].K, N = cs[i].N;
        int64_t sx[2] = {1, K}, sw[2] = {N, K}, so[2] = {1, N}, sn[1] = {N};
        tt x, w, prod, bias, out;
        tt_new(&x, GP_F32, 2, sx, 1.0f);
        tt_new(&w, cs[i].wt, 2, sw, 1.0f);
        tt_new(&prod, GP_F32, 2, so, 1.0f);
        tt_new(&bias, GP_F16, 1, sn, 1.0f);
        tt_new(&out, GP_F32, 2, so, 1.0f);
        gp_attrs am = {{0, 1, 0, 0}, {0}}, none = {{0}, {0}};
        gp_ktensor min[2] = {x.h, w.h}, ain[2] = {prod.h, bias.h};
        gp_cpu_compute(GP_OP_MATMUL, &am, cs[i].epi ? &prod.h : &out.h, min, 2, NULL, 0, 0, 1);
        if (cs[i].epi) {
            gp_cpu_compute(GP_OP_ADD, &none, &prod.h, ain, 2, NULL, 0, 0, 1);
            gp_cpu_compute(GP_OP_GELU, &none, &out.h, &prod.h, 1, NULL, 0, 0, 1);
        }
        gp_cu_epilogue epi = epi_bias_gelu(bias.d, out.d);
        gp_cu_tensor din[2] = {x.d, w.d};
        k.c.pdl = (int)(i % 2);
        k.c.const_lo = i % 2 ? (const void *)1 : NULL;
        k.c.const_hi = i % 2 ? (const void *)UINTPTR_MAX : NULL;
        float *bits[2];
        for (int pairs = 0; pairs < 2; pairs++) {
            k.c.mv_pairs = pairs;
            cudaMemset(out.d.data, 0xff, out.bytes);
            int fused = -1;
            CU_ASSERT_EQUAL(gp_cuda_matmul_fused(&k.c, &am, cs[i].epi ? &prod.d : &out.d, din,
                                                 NULL, 0, cs[i].epi ? &epi : NULL, NULL, &fused,
                                                 NULL), 0);
            CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
            CU_ASSERT_EQUAL(fused, cs[i].epi);
            bits[pairs] = malloc(out.bytes);
            cudaMemcpy(bits[pairs], out.d.data, out.bytes, cudaMemcpyDeviceToHost);
        }
        CU_ASSERT(memcmp(bits[0], bits[1], out.bytes) == 0);
        char name[64];
        snprintf(name, sizeof name, "matvec pairs, case %zu", i);
        CHECK_ERR(name, device_err(&out), cs[i].wt == GP_F32 ? 1e-5 : 1e-4);
        free(bits[0]);
        free(bits[1]);
        tt_free(&x);
        tt_free(&w);
        tt_free(&prod);
        tt_free(&bias);
        tt_free(&out);
    }
    kctx_free(&k);
}

/* A group test's products of x: for each of the n weights w[s] [N[s], K] of dtype wt (made here),
 * the single-launch product each[s] (checked against the CPU's, kept in each[s].h; `what` names
 * it) and the group's output fused[s] [M, N[s]] (0xff-filled), with g's w, tb and out set; sw_out
 * [M, N[0]], with glu the swiglu of each[0] and each[1] (checked too). group_products_free frees
 * them. */
static void group_products(kctx *k, gp_cu_group *g, tt *x, gp_dtype wt, int n, int glu, int64_t K,
                           int64_t M, const int64_t *N, const char *what, tt *w, tt *each,
                           tt *fused, tt *sw_out)
{
    gp_attrs am = {{0, 1, 0, 0}, {0}};
    for (int s = 0; s < n; s++) {
        int64_t sw[2] = {N[s], K}, so[2] = {M, N[s]};
        tt_new(&w[s], wt, 2, sw, 1.0f);
        tt_new(&each[s], GP_F32, 2, so, 1.0f);
        tt_new(&fused[s], GP_F32, 2, so, 1.0f);
        cudaMemset(fused[s].d.data, 0xff, fused[s].bytes);
        g->w[s] = w[s].d;
        g->tb[s] = 1;
        g->out[s] = fused[s].d;
        tt *ins[2] = {x, &w[s]};
        CHECK_ERR(what, run_op(GP_OP_MATMUL, &am, &each[s], ins, 2, 0, k),
                  wt == GP_F32 ? 1e-5 : 1e-4);
    }
    int64_t so0[2] = {M, N[0]};
    tt_new(sw_out, GP_F32, 2, so0, 1.0f);
    if (glu) {
        /* the swiglu's own launch on the single-launch products; CPU: on the CPU's */
        tt *ins[2] = {&each[0], &each[1]};
        gp_attrs none = {{0}, {0}};
        CHECK_ERR("swiglu", run_op(GP_OP_SWIGLU, &none, sw_out, ins, 2, 0, k), 1e-5);
    }
}

static void group_products_free(int n, tt *w, tt *each, tt *fused, tt *sw_out)
{
    for (int s = 0; s < n; s++) {
        tt_free(&w[s]);
        tt_free(&each[s]);
        tt_free(&fused[s]);
    }
    tt_free(sw_out);
}

/* The same group computing the rms_norm before it (Llama's attention and FFN norms, whose output
 * only q, k and v, or gate and up, read): against the CPU's norm then products (then swiglu). A
 * prompt (two rows), a layer norm and norm weights of another dtype than the products' are
 * refused: nothing launched, nothing written. */
static void test_matvec_group_norm(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    const struct {
        gp_dtype wt, gt;
        int glu, n, is_ln;
        int64_t K, M, N[3];
    } cs[] = {{GP_F16, GP_F16, 0, 3, 0, 4096, 1, {512, 128, 128}},
              {GP_BF16, GP_BF16, 1, 2, 0, 2048, 1, {300, 300}},
              {GP_F32, GP_F32, 0, 2, 0, 96, 1, {8, 5}},
              {GP_F16, GP_F16, 1, 2, 0, 11008, 1, {64, 64}},
              {GP_F16, GP_F16, 0, 2, 0, 128, 2, {16, 16}},
              {GP_F16, GP_F16, 0, 2, 1, 256, 1, {16, 16}},
              {GP_BF16, GP_F32, 0, 2, 0, 512, 1, {32, 32}}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        int64_t K = cs[i].K, M = cs[i].M, sx[2] = {M, K}, sg[1] = {K};
        tt x, gw, h, w[3], each[3], fused[3], sw_out;
        tt_new(&x, GP_F32, 2, sx, 3.0f);
        tt_new(&gw, cs[i].gt, 1, sg, 1.0f);
        tt_new(&h, GP_F32, 2, sx, 1.0f);
        gp_attrs an = {{0}, {1e-5, 0}};
        tt *nin[2] = {&x, &gw};
        CHECK_ERR("rms_norm", run_op(GP_OP_RMS_NORM, &an, &h, nin, 2, 0, &k), 1e-5);
        gp_cu_group g;
        memset(&g, 0, sizeof g);
        g.n = cs[i].n;
        g.glu = cs[i].glu;
        g.x = h.d;
        g.has_norm = 1;
        g.norm.is_ln = cs[i].is_ln;
        g.norm.eps = 1e-5f;
        g.norm.x = x.d;
        g.norm.w = gw.d;
        /* each[s].h: the CPU's product of the CPU's norm */
        group_products(&k, &g, &h, cs[i].wt, cs[i].n, cs[i].glu, K, M, cs[i].N,
                       "matvec after the norm", w, each, fused, &sw_out);
        k.c.pdl = (int)(i % 2);
        k.c.const_lo = i % 2 ? NULL : (const void *)16;
        k.c.const_hi = i % 2 ? NULL : (const void *)(UINTPTR_MAX - 16);
        int launched = -1, want = M == 1 && !cs[i].is_ln && cs[i].gt == cs[i].wt;
        CU_ASSERT_EQUAL(gp_cuda_matvec_group(&k.c, &g, &launched), 0);
        CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
        CU_ASSERT_EQUAL(launched, want);
        for (int s = 0; s < (cs[i].glu ? 1 : cs[i].n); s++) {
            if (!want) {
                CU_ASSERT(device_untouched(&fused[s]));
                continue;
            }
            memcpy(fused[s].h.data, cs[i].glu ? sw_out.h.data : each[s].h.data, fused[s].bytes);
            char name[64];
            snprintf(name, sizeof name, "group with its norm, case %zu product %d", i, s);
            CHECK_ERR(name, device_err(&fused[s]), cs[i].wt == GP_F32 ? 1e-5 : 1e-4);
        }
        group_products_free(cs[i].n, w, each, fused, &sw_out);
        tt_free(&x);
        tt_free(&gw);
        tt_free(&h);
    }
    kctx_free(&k);
}

/* The products of one x in one launch (q, k, v; gate and up with swiglu): the same bits as one
 * launch per product (and the swiglu's own kernel), and close to the CPU; with two rows nothing is
 * launched. */
static void test_matvec_group(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    const struct {
        gp_dtype wt;
        int glu, n;
        int64_t K, M, N[3];
    } cs[] = {{GP_F16, 0, 3, 2560, 1, {1000, 200, 200}}, {GP_BF16, 0, 2, 512, 1, {64, 17}},
              {GP_F32, 0, 3, 96, 1, {8, 5, 33}},       {GP_F16, 1, 2, 4096, 1, {300, 300}},
              {GP_BF16, 1, 2, 768, 1, {64, 64}},        {GP_F16, 0, 2, 128, 2, {16, 16}}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        int64_t K = cs[i].K, M = cs[i].M, sx[2] = {M, K};
        tt x, w[3], each[3], fused[3], sw_out;
        tt_new(&x, GP_F32, 2, sx, 1.0f);
        gp_cu_group g;
        memset(&g, 0, sizeof g);
        g.n = cs[i].n;
        g.glu = cs[i].glu;
        g.x = x.d;
        /* one launch per product, and the CPU's result in each[s].h */
        group_products(&k, &g, &x, cs[i].wt, cs[i].n, cs[i].glu, K, M, cs[i].N,
                       "matvec, one product", w, each, fused, &sw_out);
        k.c.pdl = (int)(i % 2);
        /* Even cases: weights loaded before the PDL wait (every byte counts as constant: nothing
         * else runs on the stream before this launch). */
        k.c.const_lo = i % 2 ? NULL : (const void *)16;
        k.c.const_hi = i % 2 ? NULL : (const void *)(UINTPTR_MAX - 16);
        int launched = -1;
        CU_ASSERT_EQUAL(gp_cuda_matvec_group(&k.c, &g, &launched), 0);
        CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
        CU_ASSERT_EQUAL(launched, M == 1);
        int outs = cs[i].glu ? 1 : cs[i].n;
        for (int s = 0; s < outs; s++) {
            /* The single launches' bytes (each[s].d, or the swiglu's) against the group's. */
            size_t bytes = fused[s].bytes;
            unsigned char *a = malloc(bytes), *b = malloc(bytes);
            cudaMemcpy(a, cs[i].glu ? sw_out.d.data : each[s].d.data, bytes, cudaMemcpyDeviceToHost);
            cudaMemcpy(b, fused[s].d.data, bytes, cudaMemcpyDeviceToHost);
            if (M == 1) {
                if (memcmp(a, b, bytes))
                    fprintf(stderr, "\n  group case %zu product %d: bits differ\n", i, s);
                CU_ASSERT_EQUAL(memcmp(a, b, bytes), 0);
            } else {
                CU_ASSERT(device_untouched(&fused[s]));
            }
            free(a);
            free(b);
        }
        if (cs[i].glu && M == 1) {
            gp_ktensor gk = sw_out.h;
            gk.data = malloc(sw_out.bytes);
            cudaMemcpy(gk.data, fused[0].d.data, sw_out.bytes, cudaMemcpyDeviceToHost);
            CHECK_ERR("grouped gate/up/swiglu vs CPU", rel_err(&gk, &sw_out.h), 1e-4);
            free(gk.data);
        }
        group_products_free(cs[i].n, w, each, fused, &sw_out);
        tt_free(&x);
    }
    kctx_free(&k);
}

/* Sets t's i32 element i to v on both copies. */
static void set_i32(tt *t, int64_t i, int32_t v)
{
    memcpy((char *)t->h.data + 4 * i, &v, 4);
    cudaMemcpy((char *)t->d.data + 4 * i, &v, 4, cudaMemcpyHostToDevice);
}

static void test_attention(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    /* T, H, G, D, S, positions: 0 random in [0, S), 1 causal at the cache's end (pos[t] = S - T +
     * t), 2 causal from 10 with the cache rows from 60 on NaN (no query reaches them), 3 the last
     * row. Decode (split over the cache), a few tokens, prompts (in tiles: three query tiles, the
     * last partial; head dims 16 and 80 padded, 128; one KV head), odd D, D > 128 (no tiles); the
     * last column: f32 caches (1, no tensor cores) or f16. */
    const int64_t cases[][7] = {{1, 8, 2, 64, 300, 0, 0},    {3, 4, 4, 64, 64, 0, 0},
                                {24, 6, 3, 64, 50, 0, 0},    {2, 2, 1, 80, 33, 0, 0},
                                {1, 25, 25, 64, 1024, 3, 0}, {130, 4, 2, 64, 200, 1, 0},
                                {70, 2, 2, 128, 100, 0, 0},  {40, 3, 1, 80, 90, 2, 0},
                                {33, 2, 2, 16, 64, 1, 0},    {20, 2, 1, 200, 40, 1, 0},
                                {40, 2, 2, 64, 60, 1, 1},    {150, 2, 1, 64, 400, 1, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t T = cases[i][0], H = cases[i][1], G = cases[i][2], D = cases[i][3], S = cases[i][4];
        int how = (int)cases[i][5];
        gp_dtype kvt = cases[i][6] ? GP_F32 : GP_F16;
        int64_t sq[3] = {T, H, D}, skv[3] = {S, G, D}, sp[1] = {T};
        tt q, kk, v, pos, out;
        tt_new(&q, GP_F32, 3, sq, 1.0f);
        tt_new(&kk, kvt, 3, skv, 1.0f);
        tt_new(&v, kvt, 3, skv, 1.0f);
        tt_new(&pos, GP_I32, 1, sp, (float)S);
        tt_new(&out, GP_F32, 3, sq, 1.0f);
        for (int64_t t = 0; how && t < T; t++)
            set_i32(&pos, t, how == 1 ? (int32_t)(S - T + t) : how == 2 ? (int32_t)(10 + t)
                                                                       : (int32_t)S - 1);
        if (how == 2) { /* rows 60.. NaN in both caches (f16 0x7e7e) */
            size_t row = (size_t)(G * D) * 2, n = (size_t)(S - 60) * row;
            memset((char *)kk.h.data + 60 * row, 0x7e, n);
            memset((char *)v.h.data + 60 * row, 0x7e, n);
            cudaMemcpy(kk.d.data, kk.h.data, kk.bytes, cudaMemcpyHostToDevice);
            cudaMemcpy(v.d.data, v.h.data, v.bytes, cudaMemcpyHostToDevice);
        }
        tt *ins[4] = {&q, &kk, &v, &pos};
        gp_attrs at = {{0}, {1.0 / sqrt((double)D), 0}};
        size_t ws = (size_t)16 * (size_t)(T < 16 ? T : 16) * (size_t)H * (size_t)(D + 2) * 4;
        /* The split combine in a second kernel, then in the last block (counters), with
         * programmatic dependent launches; then prompts in tiles, in f32 and on tensor cores. */
        for (int mode = 0; mode < 4; mode++) {
            k.c.att_combine = mode > 0;
            k.c.pdl = k.c.kv_prefetch = mode > 0;
            k.c.att_tiles = mode >= 2;
            k.c.att_mma = mode == 3;
            int64_t n0 = gp_cuda_attention_tiles_count(), m0 = gp_cuda_attention_mma_count();
            char name[96];
            snprintf(name, sizeof name, "attention T %lld H %lld G %lld D %lld mode %d",
                     (long long)T, (long long)H, (long long)G, (long long)D, mode);
            CHECK_ERR(name, run_op(GP_OP_ATTENTION, &at, &out, ins, 4, ws, &k), 1e-5);
            /* Tiles for the prompts (no split past 16 queries), when asked, for D <= 128; on
             * tensor cores when asked, for f16 caches and D % 8 == 0. */
            int tiles = T > GP_WS_ATTN_SPLIT_MAX_T && D <= 128;
            int mma = mode == 3 && tiles && kvt == GP_F16 && D % 8 == 0;
            CU_ASSERT_EQUAL(gp_cuda_attention_mma_count() - m0, mma);
            CU_ASSERT_EQUAL(gp_cuda_attention_tiles_count() - n0, mode >= 2 && tiles && !mma);
        }
        tt_free(&q);
        tt_free(&kk);
        tt_free(&v);
        tt_free(&pos);
        tt_free(&out);
    }
    kctx_free(&k);
}

/* A [1, n, D] view at element `off` of a one-row tensor (a column block of GPT-2's qkv). */
static void row_view(const tt *t, int64_t off, int64_t n, int64_t D, gp_ktensor *h, gp_cu_tensor *d)
{
    int64_t es = (int64_t)gp_dtype_size(t->h.dtype), ne[3] = {1, n, D};
    int64_t nb[3] = {t->h.ne[1] * es, D * es, es};
    *h = t->h;
    *d = t->d;
    h->data = (char *)t->h.data + off * es;
    d->data = (char *)t->d.data + off * es;
    h->ndim = d->ndim = 3;
    for (int i = 0; i < 3; i++) {
        h->ne[i] = d->ne[i] = ne[i];
        h->nb[i] = d->nb[i] = nb[i];
        d->sym[i] = -1;
    }
}

/* 1 when the device copy of t holds the same bytes as its host copy. */
static int same_on_device(const tt *t)
{
    void *g = malloc(t->bytes);
    cudaMemcpy(g, t->d.data, t->bytes, cudaMemcpyDeviceToHost);
    int same = !memcmp(g, t->h.data, t->bytes);
    free(g);
    return same;
}

/* The CPU's rope (when r is on) of x into y (a [1, n, D] f32 tensor), as the graph's rope node. */
static const gp_ktensor *cpu_rope(const gp_cu_rope *r, const gp_ktensor *x, const tt *pos, tt *y)
{
    if (!r->on)
        return x;
    gp_attrs at = {{r->interleaved, r->n, 0, 0}, {r->theta, 0}};
    gp_ktensor in[2] = {*x, pos->h};
    gp_cpu_compute(GP_OP_ROPE, &at, &y->h, in, 2, NULL, 0, 0, 1);
    return &y->h;
}

/* A one-token attention's operands and the CPU's result: q, k and v column blocks of one f32 row
 * (as GPT-2's qkv), caches [S, G, D] of dtype ct, pos = P; the CPU's ropes rq and rk, the two
 * stores (the caches' host copies then hold what the device's should after the launch) and the
 * attention into out's host copy. a: the launch's operands (ropes and scale set). */
typedef struct {
    tt qkv, kc, vc, pos, qr, kr, out;
    gp_ktensor hq, hk, hv;
    gp_cu_tensor dq, dk, dv;
    gp_cu_decode_att a;
} dec_case;

static void dec_case_new(dec_case *c, gp_dtype ct, int64_t H, int64_t G, int64_t D, int64_t S,
                         int32_t P, gp_cu_rope rq, gp_cu_rope rk)
{
    int64_t sw[2] = {1, (H + 2 * G) * D}, sc[3] = {S, G, D}, sq[3] = {1, H, D};
    int64_t sk[3] = {1, G, D}, sp[1] = {1};
    tt_new(&c->qkv, GP_F32, 2, sw, 1.0f);
    tt_new(&c->kc, ct, 3, sc, 1.0f);
    tt_new(&c->vc, ct, 3, sc, 1.0f);
    tt_new(&c->pos, GP_I32, 1, sp, 1.0f);
    tt_new(&c->qr, GP_F32, 3, sq, 1.0f);
    tt_new(&c->kr, GP_F32, 3, sk, 1.0f);
    tt_new(&c->out, GP_F32, 3, sq, 1.0f);
    memcpy(c->pos.h.data, &P, 4);
    cudaMemcpy(c->pos.d.data, &P, 4, cudaMemcpyHostToDevice);
    row_view(&c->qkv, 0, H, D, &c->hq, &c->dq);
    row_view(&c->qkv, H * D, G, D, &c->hk, &c->dk);
    row_view(&c->qkv, (H + G) * D, G, D, &c->hv, &c->dv);
    const gp_ktensor *q_in = cpu_rope(&rq, &c->hq, &c->pos, &c->qr);
    const gp_ktensor *k_in = cpu_rope(&rk, &c->hk, &c->pos, &c->kr);
    gp_attrs none = {{0}, {0}}, aa = {{0}, {1.0 / sqrt((double)D), 0}};
    gp_ktensor s0[3] = {c->kc.h, c->pos.h, *k_in}, s1[3] = {c->vc.h, c->pos.h, c->hv};
    gp_cpu_compute(GP_OP_STORE, &none, &c->kc.h, s0, 3, NULL, 0, 0, 1);
    gp_cpu_compute(GP_OP_STORE, &none, &c->vc.h, s1, 3, NULL, 0, 0, 1);
    gp_ktensor ain[4] = {*q_in, c->kc.h, c->vc.h, c->pos.h};
    size_t wsz = gp_cpu_workspace_bytes(GP_OP_ATTENTION, &c->out.h, ain, 4, 1);
    void *hws = malloc(wsz);
    gp_cpu_compute(GP_OP_ATTENTION, &aa, &c->out.h, ain, 4, hws, wsz, 0, 1);
    free(hws);
    c->a = (gp_cu_decode_att){.q = c->dq, .k = c->dk, .v = c->dv, .k_cache = c->kc.d,
                              .v_cache = c->vc.d, .pos = c->pos.d, .rope_q = rq, .rope_k = rk,
                              .scale = aa.f[0]};
}

/* After the launch: the device's caches hold the CPU's stores bit for bit, and its output (at
 * dev_out: out's device copy, or q's when written over it) is within 1e-5 of the CPU's. */
static void dec_case_check(const dec_case *c, const char *name, const void *dev_out)
{
    int same_k = same_on_device(&c->kc), same_v = same_on_device(&c->vc);
    if (!same_k || !same_v)
        fprintf(stderr, "\n  %s: caches differ from the CPU's stores (k %d, v %d)\n", name, !same_k,
                !same_v);
    CU_ASSERT(same_k && same_v);
    gp_ktensor g = c->out.h;
    g.data = malloc(c->out.bytes);
    cudaMemcpy(g.data, dev_out, c->out.bytes, cudaMemcpyDeviceToHost);
    CHECK_ERR(name, rel_err(&g, &c->out.h), 1e-5);
    free(g.data);
}

static void dec_case_free(dec_case *c)
{
    tt *t[7] = {&c->qkv, &c->kc, &c->vc, &c->pos, &c->qr, &c->kr, &c->out};
    for (int i = 0; i < 7; i++)
        tt_free(t[i]);
}

/*
 * One-token attention with its ropes and K/V stores inside (gp_cuda_attention_decode) against the
 * CPU's rope, store and attention nodes one by one: the caches bit for bit (the new rows and
 * nothing else written), the output within 1e-5. q, k and v are column blocks of one row (as
 * GPT-2's qkv); caches f32 and f16, grouped (H = 4, G = 2) or not, D 64 and 128, pos 0, inside
 * the first split and past 16 times the split rows; each rope on or off (rotate-half and
 * interleaved, n < D), their angles computed by the blocks or read from tables that
 * gp_cuda_rope_tables made; the combine in the last block or a second kernel, one split or 16, pos
 * read before or after the PDL wait.
 */
static void test_attention_decode(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    int dev = 0, major = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (major >= 9) /* clusters of 8 are portable from sm_90 on */
        CU_ASSERT_EQUAL(gp_cuda_attention_cluster_ok(8), 1);
    CU_ASSERT_EQUAL(gp_cuda_attention_cluster_ok(1), 0);
    CU_ASSERT_EQUAL(gp_cuda_attention_cluster_ok(GP_WS_ATTN_SPLITS + 1), 0);
    const int64_t S = 400;
    const int32_t poss[3] = {0, 9, 350};
    int idx = 0;
    for (int dt = 0; dt < 2; dt++)
        for (int gq = 0; gq < 2; gq++)
            for (int dd = 0; dd < 2; dd++)
                for (int pi = 0; pi < 3; pi++, idx++) {
                    int64_t H = 4, G = gq ? 2 : 4, D = dd ? 128 : 64;
                    int32_t P = poss[pi];
                    gp_dtype ct = dt ? GP_F16 : GP_F32;
                    /* ropes: none, both rotate-half, both interleaved, q rotate-half and k
                     * interleaved with another theta, k only */
                    int rv = idx % 5;
                    gp_cu_rope rn = {1, 0, D - 16, 10000.0, GP_F32, 0, 0, 0, 0},
                               ri = {1, 1, D / 2, 10000.0, GP_F32, 0, 0, 0, 0};
                    gp_cu_rope off = {0, 0, 0, 0.0, GP_F32, 0, 0, 0, 0}, rk2 = ri;
                    rk2.theta = 500000.0;
                    gp_cu_rope rq = rv == 1 || rv == 3 ? rn : rv == 2 ? ri : off;
                    gp_cu_rope rk = rv == 1 ? rn : rv == 2 ? ri : rv == 3 ? rk2 : rv == 4 ? rn : off;
                    dec_case dc;
                    dec_case_new(&dc, ct, H, G, D, S, P, rq, rk);
                    gp_cu_decode_att a = dc.a;
                    a.pos_const = idx % 2;
                    size_t dws = idx % 7 == 3 ? 0 : (size_t)GP_WS_ATTN_SPLITS * H * (D + 2) * 4;
                    void *ws = NULL;
                    if (dws)
                        cudaMalloc(&ws, dws);
                    k.c.att_combine = idx % 4 < 2;
                    k.c.pdl = k.c.kv_prefetch = idx % 2;
                    k.c.kv_regs = idx / 2 % 2; /* with pos early (pdl): first rows loaded then */
                    /* Every third case (another third than the tables'): the splits as one
                     * cluster, of 16 or 8 blocks, where the device can. */
                    int cl = idx % 3 == 2 ? (idx % 2 ? 16 : 8) : 0;
                    k.c.att_cluster = cl && gp_cuda_attention_cluster_ok(cl) ? cl : 0;
                    /* Every third case: the angles from tables made before the launch. */
                    float *tabs = NULL;
                    int use_tab = idx % 3 == 1 && (rq.on || rk.on);
                    if (use_tab) {
                        CU_ASSERT_EQUAL(cudaMalloc((void **)&tabs, sizeof(float) * 2 * D), cudaSuccess);
                        cudaMemset(tabs, 0xff, sizeof(float) * 2 * D);
                        gp_cu_rope_tab t[2];
                        int nt = 0;
                        if (rq.on) {
                            t[nt++] = (gp_cu_rope_tab){rq, dc.pos.d, tabs};
                            a.tab_q = tabs;
                        }
                        if (rk.on) {
                            t[nt++] = (gp_cu_rope_tab){rk, dc.pos.d, tabs + D};
                            a.tab_k = tabs + D;
                        }
                        CU_ASSERT_EQUAL(gp_cuda_rope_tables(&k.c, t, nt), 0);
                    }
                    cudaMemset(dc.out.d.data, 0xff, dc.out.bytes);
                    int64_t n0 = gp_cuda_attention_decode_count();
                    int64_t h0 = gp_cuda_attention_head_count();
                    k.c.att_head = 1; /* never taken here: a rope, D = 128 or pos not early */
                    CU_ASSERT_EQUAL(gp_cuda_attention_decode_ok(&a, &dc.out.d), 1);
                    int r = gp_cuda_attention_decode(&k.c, &a, &dc.out.d, ws, dws);
                    if (r)
                        fprintf(stderr, "\n  attention_decode: %s\n", k.c.err);
                    CU_ASSERT_EQUAL(r, 0);
                    CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
                    CU_ASSERT_EQUAL(gp_cuda_attention_decode_count(), n0 + 1);
                    CU_ASSERT_EQUAL(gp_cuda_attention_head_count(),
                                    h0 + (rv == 0 && D <= 64 && a.pos_const));
                    char name[128];
                    snprintf(name, sizeof name,
                             "attention_decode %s H %d G %d D %d pos %d rope %d%s cluster %d",
                             dt ? "f16" : "f32", (int)H, (int)G, (int)D, (int)P, rv,
                             use_tab ? " tables" : "", k.c.att_cluster);
                    dec_case_check(&dc, name, dc.out.d.data);
                    cudaFree(ws);
                    cudaFree(tabs);
                    dec_case_free(&dc);
                }
    kctx_free(&k);
}

/*
 * One-token attention in one block a head (k_attention_head) against the CPU's stores and
 * attention: caches f32 and f16, grouped (H = 4, G = 2) or not, D 64, 48 and 32, pos from 0 to
 * past four chunks of rows (a chunk is 64 to 128 rows: the first two are loaded before the PDL
 * wait, later ones in the loop), the output over q once; the caches bit for bit, the output
 * within 1e-5, and one launch of that kernel each. (test_attention_decode checks that operands
 * it does not take, ropes, D = 128 or a pos read after the wait, go to the other kernels.)
 */
static void test_attention_head(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    k.c.pdl = 1;
    const int64_t S = 640, H = 4;
    const int32_t poss[] = {0, 1, 15, 63, 64, 127, 128, 160, 255, 256, 257, 400, 639};
    const int np = (int)(sizeof poss / sizeof poss[0]);
    const int64_t dims[3] = {64, 48, 32};
    int idx = 0;
    for (int dt = 0; dt < 2; dt++)
        for (int gq = 0; gq < 2; gq++)
            for (int dd = 0; dd < 3; dd++)
                for (int pi = 0; pi < np; pi++, idx++) {
                    int64_t G = gq ? 2 : 4, D = dims[dd];
                    int32_t P = poss[pi];
                    gp_cu_rope off = {0, 0, 0, 0.0, GP_F32, 0, 0, 0, 0};
                    dec_case dc;
                    dec_case_new(&dc, dt ? GP_F16 : GP_F32, H, G, D, S, P, off, off);
                    gp_cu_decode_att a = dc.a;
                    a.pos_const = 1;
                    /* the last case of each cache type writes its output over q */
                    int over_q = pi == np - 1 && gq == 1 && dd == 0;
                    const gp_cu_tensor *o = over_q ? &dc.dq : &dc.out.d;
                    cudaMemset(dc.out.d.data, 0xff, dc.out.bytes);
                    k.c.att_head = 1;
                    int64_t n0 = gp_cuda_attention_head_count();
                    int r = gp_cuda_attention_decode(&k.c, &a, o, NULL, 0);
                    if (r)
                        fprintf(stderr, "\n  attention_head: %s\n", k.c.err);
                    CU_ASSERT_EQUAL(r, 0);
                    CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
                    CU_ASSERT_EQUAL(gp_cuda_attention_head_count(), n0 + 1);
                    char name[128];
                    snprintf(name, sizeof name, "attention_head %s H %d G %d D %d pos %d%s",
                             dt ? "f16" : "f32", (int)H, (int)G, (int)D, (int)P,
                             over_q ? " over q" : "");
                    /* over q: q's rows are qkv's first H D floats */
                    dec_case_check(&dc, name, over_q ? dc.qkv.d.data : dc.out.d.data);
                    dec_case_free(&dc);
                }
    kctx_free(&k);
}

/* The one-token attention writing its output over q's own elements (the planner may place it
 * there: GPT-2's q read straight from qkv) gives the same result; pos out of range writes
 * nothing; operands it cannot take are refused. */
static void test_attention_decode_edges(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    const int64_t H = 8, G = 2, D = 64, S = 300;
    int64_t sq[3] = {1, H, D}, sk[3] = {1, G, D}, sc[3] = {S, G, D}, sp[1] = {1};
    tt q, kx, vx, kc, vc, pos, qr, kr, out;
    tt_new(&q, GP_F32, 3, sq, 1.0f);
    tt_new(&kx, GP_F32, 3, sk, 1.0f);
    tt_new(&vx, GP_F32, 3, sk, 1.0f);
    tt_new(&kc, GP_F16, 3, sc, 1.0f);
    tt_new(&vc, GP_F16, 3, sc, 1.0f);
    tt_new(&pos, GP_I32, 1, sp, 1.0f);
    tt_new(&qr, GP_F32, 3, sq, 1.0f);
    tt_new(&kr, GP_F32, 3, sk, 1.0f);
    tt_new(&out, GP_F32, 3, sq, 1.0f);
    gp_cu_rope rope = {1, 0, D, 10000.0, GP_F32, 0, 0, 0, 0};
    gp_cu_decode_att a = {.q = q.d, .k = kx.d, .v = vx.d, .k_cache = kc.d, .v_cache = vc.d,
                          .pos = pos.d, .rope_q = rope, .rope_k = rope, .scale = 0.125,
                          .pos_const = 1};
    size_t dws = (size_t)GP_WS_ATTN_SPLITS * H * (D + 2) * 4;
    void *ws = NULL;
    cudaMalloc(&ws, dws);
    k.c.att_combine = k.c.pdl = 1;
    /* pos = S: out of range, nothing is written (the runtime refuses it before an eval). */
    int32_t P = (int32_t)S;
    cudaMemcpy(pos.d.data, &P, 4, cudaMemcpyHostToDevice);
    cudaMemset(out.d.data, 0xff, out.bytes);
    CU_ASSERT_EQUAL(gp_cuda_attention_decode(&k.c, &a, &out.d, ws, dws), 0);
    CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
    CU_ASSERT(same_on_device(&kc) && same_on_device(&vc));
    float o0;
    cudaMemcpy(&o0, out.d.data, 4, cudaMemcpyDeviceToHost);
    CU_ASSERT(isnan(o0));
    /* Output over q: the CPU's sequence, then the GPU writing into q's storage. */
    P = 260;
    memcpy(pos.h.data, &P, 4);
    cudaMemcpy(pos.d.data, &P, 4, cudaMemcpyHostToDevice);
    gp_attrs none = {{0}, {0}}, aa = {{0}, {0.125, 0}};
    const gp_ktensor *qin = cpu_rope(&rope, &q.h, &pos, &qr);
    const gp_ktensor *kin = cpu_rope(&rope, &kx.h, &pos, &kr);
    gp_ktensor s0[3] = {kc.h, pos.h, *kin}, s1[3] = {vc.h, pos.h, vx.h};
    gp_cpu_compute(GP_OP_STORE, &none, &kc.h, s0, 3, NULL, 0, 0, 1);
    gp_cpu_compute(GP_OP_STORE, &none, &vc.h, s1, 3, NULL, 0, 0, 1);
    tt ref;
    tt_new(&ref, GP_F32, 3, sq, 1.0f);
    gp_ktensor ain[4] = {*qin, kc.h, vc.h, pos.h};
    size_t wsz = gp_cpu_workspace_bytes(GP_OP_ATTENTION, &ref.h, ain, 4, 1);
    void *hws = malloc(wsz);
    gp_cpu_compute(GP_OP_ATTENTION, &aa, &ref.h, ain, 4, hws, wsz, 0, 1);
    free(hws);
    CU_ASSERT_EQUAL(gp_cuda_attention_decode(&k.c, &a, &q.d, ws, dws), 0);
    CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
    CU_ASSERT(same_on_device(&kc) && same_on_device(&vc));
    gp_ktensor g = ref.h;
    g.data = malloc(ref.bytes);
    cudaMemcpy(g.data, q.d.data, ref.bytes, cudaMemcpyDeviceToHost);
    CHECK_ERR("attention_decode into q", rel_err(&g, &ref.h), 1e-5);
    free(g.data);
    /* Refused: two tokens, an odd rope n, D > 256, H not a multiple of G. */
    gp_cu_decode_att b = a;
    b.q.ne[0] = 2;
    CU_ASSERT_EQUAL(gp_cuda_attention_decode(&k.c, &b, &out.d, ws, dws), -1);
    b = a;
    b.rope_k.n = 33;
    CU_ASSERT_EQUAL(gp_cuda_attention_decode_ok(&b, &out.d), 0);
    CU_ASSERT_EQUAL(gp_cuda_attention_decode(&k.c, &b, &out.d, ws, dws), -1);
    b = a;
    b.q.ne[2] = b.k.ne[2] = b.v.ne[2] = b.k_cache.ne[2] = b.v_cache.ne[2] = 288;
    gp_cu_tensor wide = out.d;
    wide.ne[2] = 288;
    CU_ASSERT_EQUAL(gp_cuda_attention_decode_ok(&b, &wide), 0);
    b = a;
    b.q.ne[1] = 7;
    CU_ASSERT_EQUAL(gp_cuda_attention_decode_ok(&b, &out.d), 0);
    /* Rope tables refused: none, too many, a rope off, an odd n, a pos not i32. */
    gp_cu_rope_tab t[GP_CU_ROPE_TABS + 1];
    for (int i = 0; i <= GP_CU_ROPE_TABS; i++)
        t[i] = (gp_cu_rope_tab){rope, pos.d, (float *)ws};
    CU_ASSERT_EQUAL(gp_cuda_rope_tables(&k.c, t, 0), -1);
    CU_ASSERT_STRING_EQUAL(k.c.err, "rope_tables: 0 tables (1 to 4)");
    CU_ASSERT_EQUAL(gp_cuda_rope_tables(&k.c, t, GP_CU_ROPE_TABS + 1), -1);
    const char *bad = "rope_tables: table 1: needs a rope with an even n and an i32 pos";
    t[1].rope.on = 0;
    CU_ASSERT_EQUAL(gp_cuda_rope_tables(&k.c, t, 2), -1);
    CU_ASSERT_STRING_EQUAL(k.c.err, bad);
    t[1] = t[0];
    t[1].rope.n = 33;
    CU_ASSERT_EQUAL(gp_cuda_rope_tables(&k.c, t, 2), -1);
    CU_ASSERT_STRING_EQUAL(k.c.err, bad);
    t[1] = t[0];
    t[1].pos.dtype = GP_F32;
    CU_ASSERT_EQUAL(gp_cuda_rope_tables(&k.c, t, 2), -1);
    CU_ASSERT_STRING_EQUAL(k.c.err, bad);
    CU_ASSERT_EQUAL(cudaGetLastError(), cudaSuccess);
    cudaFree(ws);
    tt_free(&q);
    tt_free(&kx);
    tt_free(&vx);
    tt_free(&kc);
    tt_free(&vc);
    tt_free(&pos);
    tt_free(&qr);
    tt_free(&kr);
    tt_free(&out);
    tt_free(&ref);
    kctx_free(&k);
}

static void test_matmul(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    /* M, K, N, ta, tb, a dtype, b dtype, batch (a b0, a b1, b b0, b b1), tolerance */
    struct {
        int64_t M, K, N;
        int ta, tb;
        gp_dtype at, bt;
        int64_t ab0, ab1, bb0, bb1;
        double tol;
    } cs[] = {
        {1, 256, 512, 0, 0, GP_F32, GP_F16, 1, 1, 1, 1, 1e-5},   /* matvec [K, N] split-K */
        {1, 256, 384, 0, 1, GP_F32, GP_F16, 1, 1, 1, 1, 1e-5},   /* matvec [N, K] */
        {1, 1600, 4800, 0, 0, GP_F32, GP_BF16, 1, 1, 1, 1, 1e-5},
        {1, 200, 72, 0, 1, GP_F32, GP_F32, 1, 1, 1, 1, 1e-5},
        {1, 64, 40, 0, 0, GP_F32, GP_F32, 1, 1, 1, 1, 1e-5},
        {1, 6400, 1600, 0, 0, GP_F32, GP_F16, 1, 1, 1, 1, 1e-5}, /* GPT-2 1558M mlp proj */
        {1, 1600, 1600, 0, 0, GP_F32, GP_F16, 1, 1, 1, 1, 1e-5},
        {1, 1600, 5003, 0, 1, GP_F32, GP_F16, 1, 1, 1, 1, 1e-5}, /* [N, K], one batch */
        {1, 2560, 300, 0, 1, GP_F32, GP_F16, 1, 1, 1, 1, 1e-5},  /* [N, K], two batches */
        {33, 256, 320, 0, 0, GP_F32, GP_F16, 1, 1, 1, 1, 2e-3}, /* cuBLAS, a converted to f16 */
        {17, 40, 24, 0, 0, GP_F32, GP_F32, 2, 3, 1, 3, 1e-5},   /* batched, b broadcast on b0 */
        {17, 40, 24, 1, 0, GP_F32, GP_F32, 1, 2, 1, 2, 1e-5},   /* a transposed */
        {9, 31, 13, 0, 1, GP_F16, GP_F16, 2, 1, 2, 1, 1e-3},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        int64_t sa[4] = {cs[i].ab0, cs[i].ab1, cs[i].ta ? cs[i].K : cs[i].M, cs[i].ta ? cs[i].M : cs[i].K};
        int64_t sb[4] = {cs[i].bb0, cs[i].bb1, cs[i].tb ? cs[i].N : cs[i].K, cs[i].tb ? cs[i].K : cs[i].N};
        int64_t b0 = cs[i].ab0 > cs[i].bb0 ? cs[i].ab0 : cs[i].bb0;
        int64_t b1 = cs[i].ab1 > cs[i].bb1 ? cs[i].ab1 : cs[i].bb1;
        int64_t so[4] = {b0, b1, cs[i].M, cs[i].N};
        tt a, b, out;
        tt_new(&a, cs[i].at, 4, sa, 1.0f);
        tt_new(&b, cs[i].bt, 4, sb, 1.0f);
        tt_new(&out, GP_F32, 4, so, 1.0f);
        tt *ins[2] = {&a, &b};
        gp_attrs at = {{cs[i].ta, cs[i].tb, 0, 0}, {0}};
        char name[64];
        snprintf(name, sizeof name, "matmul case %zu", i);
        /* Matvecs: weights loaded before the PDL wait (everything "constant") on odd cases. */
        k.c.pdl = (int)(i % 2);
        k.c.const_lo = i % 2 ? (const void *)1 : NULL;
        k.c.const_hi = i % 2 ? (const void *)UINTPTR_MAX : NULL;
        CHECK_ERR(name, run_op(GP_OP_MATMUL, &at, &out, ins, 2, (size_t)GP_WS_CUBLAS_BYTES, &k),
                  cs[i].tol);
        k.c.const_lo = k.c.const_hi = NULL;
        k.c.pdl = 0;
        tt_free(&a);
        tt_free(&b);
        tt_free(&out);
    }
    /* A layout cuBLAS cannot take (no unit stride: every other element): the fallback kernel. */
    {
        int64_t sa[2] = {5, 48}, sb[2] = {24, 16}, so[2] = {5, 16};
        tt a, b, out;
        tt_new(&a, GP_F32, 2, sa, 1.0f);
        tt_new(&b, GP_F32, 2, sb, 1.0f);
        tt_new(&out, GP_F32, 2, so, 1.0f);
        int64_t va[2] = {5, 24}, nba[2] = {48 * 4, 8};
        tt_view(&a, 2, va, nba);
        tt *ins[2] = {&a, &b};
        gp_attrs at = {{0}, {0}};
        CHECK_ERR("matmul strided", run_op(GP_OP_MATMUL, &at, &out, ins, 2, 0, &k), 1e-5);
        tt_free(&a);
        tt_free(&b);
        tt_free(&out);
    }
    kctx_free(&k);
}

/* Sizes from the param block: launched for 8 rows, run for 3; rows 3.. stay untouched. */
static void test_param_block(void)
{
    int64_t exact[1] = {3}, launch[1] = {8};
    kctx k;
    kctx_new(&k, exact, launch, 1);
    int64_t sx[2] = {8, 64}, sw[1] = {64};
    tt x, w, out;
    tt_new(&x, GP_F32, 2, sx, 1.0f);
    tt_new(&w, GP_F32, 1, sw, 1.0f);
    tt_new(&out, GP_F32, 2, sx, 1.0f);
    x.d.sym[0] = out.d.sym[0] = 0;
    cudaMemset(out.d.data, 0xff, out.bytes);
    gp_cu_tensor din[2] = {x.d, w.d};
    gp_attrs at = {{0}, {1e-5, 0}};
    CU_ASSERT_EQUAL(gp_cuda_compute(&k.c, GP_OP_RMS_NORM, &at, &out.d, din, 2, NULL, 0), 0);
    cudaDeviceSynchronize();
    gp_ktensor hx = x.h, hw = w.h, ho = out.h;
    hx.ne[0] = ho.ne[0] = 3;
    gp_ktensor hin[2] = {hx, hw};
    gp_cpu_compute(GP_OP_RMS_NORM, &at, &ho, hin, 2, NULL, 0, 0, 1);
    float *g = malloc(out.bytes);
    cudaMemcpy(g, out.d.data, out.bytes, cudaMemcpyDeviceToHost);
    gp_ktensor gk = ho;
    gk.data = g;
    CU_ASSERT(rel_err(&gk, &ho) < 1e-5);
    int untouched = 1;
    for (int i = 3 * 64; i < 8 * 64; i++)
        untouched &= isnan(g[i]);
    CU_ASSERT(untouched);
    free(g);
    tt_free(&x);
    tt_free(&w);
    tt_free(&out);
    kctx_free(&k);
}

/* ---- whole model: examples/tiny.gplan, CPU vs CUDA ---- */

static gp_model *tiny_model(const char *wtype)
{
    char def[32];
    snprintf(def, sizeof def, "wtype=%s", wtype);
    const char *defs[1] = {def};
    gp_test_model_opts o = {defs, 1, NULL, 1, 42};
    return gp_test_model("examples/tiny.gplan", &o, NULL);
}

/* Evaluates n tokens at positions start.. on s; the logits [n, vocab] into out. */
static int step(gp_session *s, int n, int start, float *out, int64_t vocab)
{
    return gp_test_eval_tokens(s, n, start, 37, out, vocab);
}

static double max_rel(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (a[i] != a[i] || b[i] != b[i])
            return INFINITY;
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void model_parity(const char *wtype, double tol)
{
    gp_model *m = tiny_model(wtype);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char err[1024];
    gp_session_opts oc = {"cpu", 1, 0}, og = {"cuda", 1, 0};
    /* graphs are captured at creation */
    int64_t tiles0 = gp_cuda_attention_tiles_count(), epi0 = gp_cuda_blas_epilogue_count(0);
    gp_session *sc = gp_session_new(m, &oc, err, sizeof err);
    gp_session *sg = gp_session_new(m, &og, err, sizeof err);
    if (!sg)
        fprintf(stderr, "\n  cuda session: %s\n", err);
    CU_ASSERT_PTR_NOT_NULL(sc);
    CU_ASSERT_PTR_NOT_NULL(sg);
    if (sc && sg) {
        gp_model_info info;
        gp_model_get_info(m, &info);
        int64_t V = info.vocab;
        float *lc = malloc(sizeof(float) * 64 * (size_t)V), *lg = malloc(sizeof(float) * 64 * (size_t)V);
        /* A 5-token prompt (bucket 8: padded launches), 3 decode steps, then 3 tokens (bucket 4),
         * then a reset and the prompt again; a reset, a 40-token prompt (bucket 64: the
         * attention in tiles), a step, 20 tokens (bucket 32). */
        const int plan[][2] = {{5, 0}, {1, 5}, {1, 6}, {1, 7}, {3, 8}, {5, 0},
                               {40, 0}, {1, 40}, {20, 41}};
        for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
            if (i == 5 || i == 6) {
                CU_ASSERT_EQUAL(gp_session_reset(sc), 0);
                CU_ASSERT_EQUAL(gp_session_reset(sg), 0);
            }
            int n = plan[i][0];
            CU_ASSERT_EQUAL_FATAL(step(sc, n, plan[i][1], lc, V), 0);
            CU_ASSERT_EQUAL_FATAL(step(sg, n, plan[i][1], lg, V), 0);
            double e = max_rel(lg, lc, (size_t)n * (size_t)V);
            if (!(e <= tol))
                fprintf(stderr, "\n  tiny %s step %zu: logits error %.3g > %.3g\n", wtype, i, e, tol);
            CU_ASSERT(e <= tol);
        }
        CU_ASSERT_EQUAL(gp_session_backend_allocs(sg), 0);
        /* The attentions of buckets 32 and 64 (one per layer) are in tiles, unless switched
         * off. */
        const char *off = getenv("GPLAN_CUDA_DISABLE");
        int64_t tiles = gp_cuda_attention_tiles_count() - tiles0;
        int tiles_off = off && (strstr(off, "all") || strstr(off, "tiles"));
        CU_ASSERT(tiles_off ? tiles == 0 : tiles >= 2 * 2);
        /* and the prompts' products their epilogues (bias, gelu, residual) in one launch */
        int64_t epis = gp_cuda_blas_epilogue_count(0) - epi0;
        int epi_off = off && strstr(off, "all");
        CU_ASSERT(epi_off ? epis == 0 : epis >= 2 * 4);
        free(lc);
        free(lg);
    }
    gp_session_free(sc);
    gp_session_free(sg);
    gp_model_free(m);
}

/* Runtime-mode LoRA: adapters bound into a live CUDA session between evals (no new session, no
 * replanning) give what the CPU backend, which reads the slots in place, gives. */
static void test_lora_rebind(void)
{
    char err[1024], config[1024], adapter[1024];
    snprintf(config, sizeof config, "%s", gp_test_path("tests/parity/gpt2/config.json"));
    snprintf(adapter, sizeof adapter, "%s", gp_test_path("tests/parity/gpt2_lora"));
    const char *defs[] = {"lora_r=4"};
    gp_test_model_opts mo = {defs, 1, config, 1, 5};
    gp_model *m = gp_test_model("examples/gpt2.gplan", &mo, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    gp_session_opts oc = {"cpu", 1, 0}, og = {"cuda", 1, 0};
    gp_session *sc = gp_session_new(m, &oc, err, sizeof err);
    gp_session *sg = gp_session_new(m, &og, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sc);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sg);
    gp_model_info info;
    gp_model_get_info(m, &info);
    int64_t V = info.vocab;
    float *lc = malloc(sizeof(float) * 8 * (size_t)V), *lg = malloc(sizeof(float) * 8 * (size_t)V);
    float *base = malloc(sizeof(float) * 8 * (size_t)V);
    /* No adapter (zero slots), then the adapter at scale 1, then at scale 0.5, then none again:
     * each on the same two sessions, each a 4-token prompt from position 0. */
    const double scales[] = {0, 1, 0.5, 0};
    for (int k = 0; k < 4; k++) {
        if (k > 0) {
            CU_ASSERT_EQUAL(gp_model_bind_adapter(m, adapter, scales[k], err, sizeof err), 0);
            CU_ASSERT_EQUAL(gp_session_reset(sc), 0);
            CU_ASSERT_EQUAL(gp_session_reset(sg), 0);
        }
        CU_ASSERT_EQUAL_FATAL(step(sc, 4, 0, lc, V), 0);
        CU_ASSERT_EQUAL_FATAL(step(sg, 4, 0, lg, V), 0);
        double e = max_rel(lg, lc, 4 * (size_t)V);
        if (!(e <= 1e-4))
            fprintf(stderr, "\n  lora rebind %d (scale %g): CUDA vs CPU %.3g\n", k, scales[k], e);
        CU_ASSERT(e <= 1e-4);
        if (k == 0)
            memcpy(base, lc, sizeof(float) * 4 * (size_t)V);
        double moved = max_rel(lc, base, 4 * (size_t)V); /* the adapter did something, or not */
        CU_ASSERT(scales[k] == 0 ? moved == 0 : moved > 1e-3);
    }
    CU_ASSERT_EQUAL(gp_session_backend_allocs(sg), 0);
    free(lc);
    free(lg);
    free(base);
    gp_session_free(sc);
    gp_session_free(sg);
    gp_model_free(m);
}

/*
 * LoRA runtime mode folded into the products (the backend's "lora"): GPT-2 with branches of rank
 * R on every projection, an adapter of random A and B bound before the sessions exist, then
 * another at half the scale between evals. The merged path (the default), the branches launched
 * as nodes ("lora" off) and the CPU give the same logits; merged, a one-token eval launches what
 * the plan without branches launches (eager evals count their kernels), 4 branches a layer.
 */
enum { LORA_LAYERS = 2, LORA_EMBD = 128 };

/* An adapter of rank r for GPT-2's four projections in dir (PEFT's names and layout: A [r, in],
 * B [out, r], f32), lora_alpha = r (scale 1); values uniform in [-0.1, 0.1) from seed. */
static void write_gpt2_adapter(const char *dir, int64_t r, uint32_t seed)
{
    static const char *const mods[4] = {"attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"};
    const int64_t in[4] = {LORA_EMBD, LORA_EMBD, LORA_EMBD, 4 * LORA_EMBD};
    const int64_t out[4] = {3 * LORA_EMBD, LORA_EMBD, 4 * LORA_EMBD, LORA_EMBD};
    gp_st_tensor ts[2 * 4 * LORA_LAYERS];
    char names[2 * 4 * LORA_LAYERS][96];
    float *data[2 * 4 * LORA_LAYERS];
    memset(ts, 0, sizeof ts);
    int n = 0;
    for (int l = 0; l < LORA_LAYERS; l++)
        for (int k = 0; k < 4; k++)
            for (int ab = 0; ab < 2; ab++, n++) {
                int64_t d0 = ab ? out[k] : r, d1 = ab ? r : in[k];
                snprintf(names[n], sizeof names[n],
                         "base_model.model.transformer.h.%d.%s.lora_%c.weight", l, mods[k],
                         ab ? 'B' : 'A');
                data[n] = malloc(sizeof(float) * (size_t)(d0 * d1));
                CU_ASSERT_PTR_NOT_NULL_FATAL(data[n]);
                for (int64_t i = 0; i < d0 * d1; i++) {
                    seed = seed * 1664525u + 1013904223u;
                    data[n][i] = ((float)(seed >> 8) / 16777216.0f - 0.5f) * 0.2f;
                }
                ts[n].name = names[n];
                ts[n].dtype = GP_F32;
                ts[n].ndim = 2;
                ts[n].shape[0] = d0;
                ts[n].shape[1] = d1;
                ts[n].data = data[n];
                ts[n].nbytes = sizeof(float) * (size_t)(d0 * d1);
            }
    char path[700], err[512], cfg[256];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    int rc = gp_st_write(path, ts, n, NULL, err, sizeof err);
    if (rc)
        fprintf(stderr, "\n  %s\n", err);
    CU_ASSERT_EQUAL(rc, 0);
    for (int k = 0; k < n; k++)
        free(data[k]);
    snprintf(cfg, sizeof cfg,
             "{\"peft_type\": \"LORA\", \"r\": %lld, \"lora_alpha\": %lld, \"target_modules\": "
             "[\"c_attn\", \"c_proj\", \"c_fc\"], \"fan_in_fan_out\": true}",
             (long long)r, (long long)r);
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    CU_ASSERT_EQUAL(gp_test_write_file(path, cfg, strlen(cfg)), 0);
}

static gp_session *session_with(gp_model *m, const char *var, const char *val);

/* What one eager one-token eval launches and which fusions its launches take, as the backend's
 * counters count them: the kernels, then products adding into zeroed outputs, [K, N] matvecs
 * staging gelu(x), x made gelu(x) in place, products adding with atomics, folded norms, early
 * triggers, typed instances (products, attentions, ops), attentions in one launch, in one block
 * a head, computing their q, k and v, and cuBLAS epilogues. */
enum { N_FUSION_COUNTS = 15 };

static const char *const fusion_count_names[N_FUSION_COUNTS] = {
    "launches", "accum", "x_gelu staged", "gelu in place", "atomic", "fold", "trig",
    "kc typed", "attention typed", "ops typed", "attnfuse", "atthead", "qkvatt",
    "cuBLAS epilogues", "attention trig"};

static void fusion_counts(int64_t *c)
{
    int64_t v[N_FUSION_COUNTS] = {gp_cuda_launch_count(),
                                  gp_cuda_matvec_acc_count(0),
                                  gp_cuda_matvec_acc_count(1),
                                  gp_cuda_matvec_acc_count(2),
                                  gp_cuda_matvec_add_count(),
                                  gp_cuda_matvec_fold_count(),
                                  gp_cuda_matvec_trig_count(),
                                  gp_cuda_matvec_typed_count(),
                                  gp_cuda_attention_typed_count(),
                                  gp_cuda_ops_typed_count(),
                                  gp_cuda_attention_decode_count(),
                                  gp_cuda_attention_head_count(),
                                  gp_cuda_qkv_attention_count(),
                                  gp_cuda_blas_epilogue_count(0),
                                  gp_cuda_attention_trig_count()};
    memcpy(c, v, sizeof v);
}

/* fusion_counts' growth over one eager one-token eval of a fresh CUDA session of m (after a
 * 3-token prompt), with environment variable var = val at creation (var NULL: as it is); every
 * count -1 when it failed. */
static void one_token_counts(gp_model *m, const char *var, const char *val, int64_t vocab,
                             int64_t *n)
{
    float *l = malloc(sizeof(float) * 4 * (size_t)vocab);
    setenv("GPLAN_CUDA_GRAPHS", "0", 1);
    gp_session *s = session_with(m, var, val);
    unsetenv("GPLAN_CUDA_GRAPHS");
    int64_t c0[N_FUSION_COUNTS];
    for (int k = 0; k < N_FUSION_COUNTS; k++)
        n[k] = -1;
    if (s && l && step(s, 3, 0, l, vocab) == 0) {
        fusion_counts(c0);
        if (step(s, 1, 3, l, vocab) == 0) {
            fusion_counts(n);
            for (int k = 0; k < N_FUSION_COUNTS; k++)
                n[k] -= c0[k];
        }
    }
    gp_session_free(s);
    free(l);
}

/* The kernels one eager one-token eval of a fresh CUDA session of m launches (one_token_counts). */
static int64_t one_token_launches(gp_model *m, const char *var, const char *val, int64_t vocab)
{
    int64_t n[N_FUSION_COUNTS];
    one_token_counts(m, var, val, vocab, n);
    return n[0];
}

/* Asserts that one-token evals of m (LoRA branches, merged) launch what those of base (no
 * branches) launch, fusion by fusion; what (the case) names them when they do not. nb: base's
 * counts. */
static void assert_same_fusions(gp_model *m, gp_model *base, int64_t vocab, const char *what,
                                int64_t *nb)
{
    int64_t nm[N_FUSION_COUNTS];
    one_token_counts(base, NULL, NULL, vocab, nb);
    one_token_counts(m, NULL, NULL, vocab, nm);
    CU_ASSERT(nb[0] > 0);
    for (int k = 0; k < N_FUSION_COUNTS; k++) {
        if (nm[k] != nb[k])
            fprintf(stderr, "\n  %s: %s %lld a token merged, %lld without branches\n", what,
                    fusion_count_names[k], (long long)nm[k], (long long)nb[k]);
        CU_ASSERT_EQUAL(nm[k], nb[k]);
    }
}

static void lora_case(const char *wtype, int64_t r, double tol)
{
    char defs_r[32], wdef[32], err[1024];
    snprintf(defs_r, sizeof defs_r, "lora_r=%lld", (long long)r);
    snprintf(wdef, sizeof wdef, "wtype=%s", wtype);
    const char *defs[8] = {"n_layer=2", "n_embd=128", "n_head=4", "vocab_size=512",
                           "n_positions=64", "kv_type=f32", wdef, defs_r};
    gp_test_model_opts mo = {defs, 8, NULL, 1, 11}, mb = {defs, 7, NULL, 1, 11};
    gp_model *m = gp_test_model("examples/gpt2.gplan", &mo, NULL);
    gp_model *base = gp_test_model("examples/gpt2.gplan", &mb, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_PTR_NOT_NULL_FATAL(base);
    char dir[600];
    snprintf(dir, sizeof dir, "%s", gp_test_tmpfile(".lora"));
    CU_ASSERT_EQUAL_FATAL(mkdir(dir, 0755), 0);
    write_gpt2_adapter(dir, r, 7u + (uint32_t)r);
    CU_ASSERT_EQUAL(gp_model_bind_adapter(m, dir, 1.0, err, sizeof err), 0);
    gp_model_info info;
    gp_model_get_info(m, &info);
    int64_t V = info.vocab;
    gp_session_opts oc = {"cpu", 1, 0};
    int64_t m0 = gp_cuda_lora_merged_count();
    gp_session *cpu = gp_session_new(m, &oc, err, sizeof err), *on = session_with(m, NULL, NULL);
    int64_t merged = gp_cuda_lora_merged_count() - m0;
    gp_session *off = session_with(m, "GPLAN_CUDA_DISABLE", "lora");
    CU_ASSERT_EQUAL(gp_cuda_lora_merged_count() - m0, merged); /* none with it off */
    CU_ASSERT_EQUAL(merged, 4 * LORA_LAYERS);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cpu);
    CU_ASSERT_PTR_NOT_NULL_FATAL(on);
    CU_ASSERT_PTR_NOT_NULL_FATAL(off);
    size_t bytes = sizeof(float) * 40 * (size_t)V;
    float *lc = malloc(bytes), *lg = malloc(bytes), *lb = malloc(bytes);
    gp_session *bs = gp_session_new(base, &oc, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(bs);
    /* A 5-token prompt, two steps, a 40-token prompt (tiles, cuBLAS) and a step; then the
     * adapter at half the scale, bound between evals, and the same again. */
    const int plan[][2] = {{5, 0}, {1, 5}, {1, 6}, {40, 0}, {1, 40}};
    for (int pass = 0; pass < 2; pass++) {
        if (pass) {
            CU_ASSERT_EQUAL(gp_model_bind_adapter(m, dir, 0.5, err, sizeof err), 0);
        }
        for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++) {
            int n = plan[i][0];
            if (plan[i][1] == 0) {
                CU_ASSERT_EQUAL(gp_session_reset(cpu), 0);
                CU_ASSERT_EQUAL(gp_session_reset(on), 0);
                CU_ASSERT_EQUAL(gp_session_reset(off), 0);
                CU_ASSERT_EQUAL(gp_session_reset(bs), 0);
            }
            CU_ASSERT_EQUAL_FATAL(step(cpu, n, plan[i][1], lc, V), 0);
            CU_ASSERT_EQUAL_FATAL(step(bs, n, plan[i][1], lb, V), 0);
            /* the adapter moves the logits: this checks the branches, not the base model */
            CU_ASSERT(max_rel(lc, lb, (size_t)n * (size_t)V) > 1e-3);
            gp_session *g[2] = {on, off};
            for (int k = 0; k < 2; k++) {
                CU_ASSERT_EQUAL_FATAL(step(g[k], n, plan[i][1], lg, V), 0);
                double e = max_rel(lg, lc, (size_t)n * (size_t)V);
                if (!(e <= tol))
                    fprintf(stderr, "\n  lora %s r %lld (%s) pass %d step %zu: vs CPU %.3g\n",
                            wtype, (long long)r, k ? "branches launched" : "merged", pass, i, e);
                CU_ASSERT(e <= tol);
            }
        }
    }
    CU_ASSERT_EQUAL(gp_session_backend_allocs(on), 0);
    CU_ASSERT_EQUAL(gp_session_backend_allocs(off), 0);
    gp_session_free(cpu);
    gp_session_free(bs);
    gp_session_free(on);
    gp_session_free(off);
    /* Merged, a one-token eval launches what the plan without branches does, with the same
     * fusions; launched as nodes, at least two more a branch. */
    char what[64];
    snprintf(what, sizeof what, "lora %s r %lld", wtype, (long long)r);
    int64_t nb[N_FUSION_COUNTS];
    assert_same_fusions(m, base, V, what, nb);
    int64_t n_off = one_token_launches(m, "GPLAN_CUDA_DISABLE", "lora", V);
    CU_ASSERT(n_off >= nb[0] + 2 * 4 * LORA_LAYERS);
    free(lc);
    free(lg);
    free(lb);
    char path[700];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    unlink(path);
    rmdir(dir);
    gp_model_free(m);
    gp_model_free(base);
}

static void test_model_lora(void)
{
    lora_case("f32", 8, 1e-4);
    lora_case("f32", 64, 1e-4);
    lora_case("f16", 8, 1e-2);
    lora_case("f16", 64, 1e-2);
}

/*
 * The same for GPT-2 117M's layer (768 wide, 12 heads of 64, f16 weights and caches, biases; two
 * layers, a small vocabulary), as bench/lora_gpu.sh runs it, ranks 8 and 64, adapter slots as
 * the random weights left them: merged, a one-token eval launches exactly the kernels of the plan
 * without branches with the same fusions, among them c_fc and the second c_attn adding into
 * outputs the product before them zeroed ("accum"), which needs those outputs' bytes kept from
 * that product's step on (the plan's accumulated outputs, whose first step the branches' own
 * products must not move).
 */
static void test_model_lora_117m(void)
{
    for (int k = 0; k < 2; k++) {
        const int64_t r = k ? 64 : 8;
        char defs_r[32], what[64];
        snprintf(defs_r, sizeof defs_r, "lora_r=%lld", (long long)r);
        const char *defs[8] = {"n_layer=2", "n_embd=768", "n_head=12", "vocab_size=512",
                               "n_positions=64", "wtype=f16", "kv_type=f16", defs_r};
        gp_test_model_opts mo = {defs, 8, NULL, 1, 11}, mb = {defs, 7, NULL, 1, 11};
        gp_model *m = gp_test_model("examples/gpt2.gplan", &mo, NULL);
        gp_model *base = gp_test_model("examples/gpt2.gplan", &mb, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        CU_ASSERT_PTR_NOT_NULL_FATAL(base);
        gp_model_info info;
        gp_model_get_info(m, &info);
        int64_t m0 = gp_cuda_lora_merged_count(), nb[N_FUSION_COUNTS];
        snprintf(what, sizeof what, "lora 117M-shaped f16 r %lld", (long long)r);
        assert_same_fusions(m, base, info.vocab, what, nb);
        CU_ASSERT_EQUAL(gp_cuda_lora_merged_count() - m0, 4 * 2);
        /* accum taken: both layers' c_fc and the second layer's c_attn */
        CU_ASSERT(nb[1] >= 3);
        gp_model_free(m);
        gp_model_free(base);
    }
}

static void test_model_f32(void)
{
    model_parity("f32", 1e-4);
}

static void test_model_f16(void)
{
    /* f16 weights: the prompt's activations are converted to f16 for cuBLAS */
    model_parity("f16", 5e-3);
}

/* The same with every fusion off, then with programmatic dependent launches on and off (switched
 * by the environment at session creation). */
static void test_model_switches(void)
{
    setenv("GPLAN_CUDA_DISABLE", "all", 1);
    model_parity("f16", 5e-3);
    unsetenv("GPLAN_CUDA_DISABLE");
    const char *pdl = getenv("GPLAN_CUDA_PDL");
    char saved[16] = "";
    if (pdl)
        snprintf(saved, sizeof saved, "%s", pdl);
    setenv("GPLAN_CUDA_PDL", "1", 1);
    model_parity("f32", 1e-4);
    setenv("GPLAN_CUDA_PDL", "0", 1);
    model_parity("f32", 1e-4);
    if (pdl)
        setenv("GPLAN_CUDA_PDL", saved, 1);
    else
        unsetenv("GPLAN_CUDA_PDL");
}

/* A CUDA session created with environment variable var set to val (var NULL: as it is). */
static gp_session *session_with(gp_model *m, const char *var, const char *val)
{
    gp_session_opts og = {"cuda", 1, 0};
    char err[1024];
    if (var)
        setenv(var, val, 1);
    gp_session *s = gp_session_new(m, &og, err, sizeof err);
    if (var)
        unsetenv(var);
    if (!s)
        fprintf(stderr, "\n  %s=%s: %s\n", var ? var : "-", var ? val : "-", err);
    return s;
}

/* 1 when the plan has no output "next", or its t rows are the argmax of the t rows of logits l. */
static int next_agrees(gp_session *s, const float *l, int t, int64_t V)
{
    const int32_t *nx = gp_session_output(s, "next", NULL);
    for (int r = 0; nx && r < t; r++)
        if (nx[r] != gp_argmax(l + (size_t)r * (size_t)V, V))
            return 0;
    return 1;
}

/*
 * A model through a prompt, one-token steps past 16 cache rows, a 3-token eval and more steps, on a
 * CUDA session with a fusion on (on_var=on_val), one with it off (off_var=off_val) and the CPU: the
 * same logits (on against off within tol, against the CPU within tol_cpu: 1e-4 each for f32
 * weights), and each session's "next" (when the plan has it) their argmax; count(), what that
 * fusion enqueued in this process, grew by at least min_on while the session with it on was
 * created and not at all for the one with it off.
 */
static void decode_on_vs_off(const char *example, const char *const *defs, int n_defs,
                             const char *on_var, const char *on_val, const char *off_var,
                             const char *off_val, int64_t (*count)(void), int64_t min_on,
                             double tol, double tol_cpu)
{
    gp_test_model_opts o = {defs, n_defs, NULL, 1, 42};
    gp_model *m = gp_test_model(example, &o, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char err[1024];
    gp_session_opts oc = {"cpu", 1, 0};
    int64_t c0 = count();
    gp_session *off = session_with(m, off_var, off_val);
    int64_t c1 = count();
    gp_session *on = session_with(m, on_var, on_val);
    int64_t c2 = count();
    gp_session *cpu = gp_session_new(m, &oc, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL(off);
    CU_ASSERT_PTR_NOT_NULL(on);
    CU_ASSERT_PTR_NOT_NULL(cpu);
    CU_ASSERT_EQUAL(c1, c0);
    CU_ASSERT(c2 - c1 >= min_on);
    if (getenv("GPLAN_TEST_VERBOSE") && (c1 != c0 || c2 - c1 < min_on))
        fprintf(stderr, "\n  %s %s=%s: counted %lld with it off, %lld on (at least %lld)\n",
                example, off_var ? off_var : "-", off_val ? off_val : "-", (long long)(c1 - c0),
                (long long)(c2 - c1), (long long)min_on);
    if (off && on && cpu) {
        gp_model_info info;
        gp_model_get_info(m, &info);
        int64_t V = info.vocab;
        size_t n = 8 * (size_t)V;
        float *l_on = malloc(sizeof(float) * n), *l_off = malloc(sizeof(float) * n);
        float *l_cpu = malloc(sizeof(float) * n);
        int start = 0;
        for (int i = 0; i < 26; i++) {
            int t = i == 0 ? 5 : i == 20 ? 3 : 1;
            CU_ASSERT_EQUAL_FATAL(step(on, t, start, l_on, V), 0);
            CU_ASSERT_EQUAL_FATAL(step(off, t, start, l_off, V), 0);
            CU_ASSERT_EQUAL_FATAL(step(cpu, t, start, l_cpu, V), 0);
            CU_ASSERT(next_agrees(on, l_on, t, V));
            CU_ASSERT(next_agrees(off, l_off, t, V));
            CU_ASSERT(next_agrees(cpu, l_cpu, t, V));
            double e = max_rel(l_on, l_off, (size_t)t * (size_t)V);
            double ec = max_rel(l_on, l_cpu, (size_t)t * (size_t)V);
            if (!(e <= tol && ec <= tol_cpu))
                fprintf(stderr, "\n  %s %s=%s step %d (%d tokens at %d): on vs off %.3g, vs CPU %.3g\n",
                        example, on_var ? on_var : off_var, on_var ? on_val : off_val, i, t, start,
                        e, ec);
            CU_ASSERT(e <= tol);
            CU_ASSERT(ec <= tol_cpu);
            start += t;
        }
        CU_ASSERT_EQUAL(gp_session_backend_allocs(on), 0);
        free(l_on);
        free(l_off);
        free(l_cpu);
    }
    gp_session_free(cpu);
    gp_session_free(on);
    gp_session_free(off);
    gp_model_free(m);
}

/* The decode models the fusion tests run: Llama (grouped-query heads) and GPT-2 with two layers,
 * f32 and f16 caches (the new rows rounded as the stores round them), and one layer at TinyLlama's
 * widths (K = 5632 rows; before the planner kept an attention's workspace live from the ropes and
 * stores it may absorb, it laid it over k and v there). */
#define TINY_LLAMA                                                                                 \
    "num_hidden_layers=2", "hidden_size=256", "intermediate_size=256", "num_attention_heads=4",    \
        "num_key_value_heads=2", "vocab_size=512", "max_position_embeddings=64", "n_batch=64",     \
        "wtype=f32"
#define TINY_GPT2                                                                                  \
    "n_layer=2", "n_embd=128", "n_head=4", "vocab_size=512", "n_positions=64", "wtype=f32"
typedef struct {
    const char *example;
    const char *defs[10];
    int n_defs, n_layer;
} decode_case;
static const decode_case decode_cases[] = {
    {"examples/llama.gplan", {TINY_LLAMA, "kv_type=f32"}, 10, 2},
    {"examples/gpt2.gplan", {TINY_GPT2, "kv_type=f32"}, 7, 2},
    {"examples/llama.gplan",
     {"num_hidden_layers=1", "hidden_size=2048", "intermediate_size=5632", "num_attention_heads=32",
      "num_key_value_heads=4", "vocab_size=512", "max_position_embeddings=64", "n_batch=512",
      "wtype=f32", "kv_type=f32"},
     10, 1},
    {"examples/llama.gplan", {TINY_LLAMA, "kv_type=f16"}, 10, 2},
    {"examples/gpt2.gplan", {TINY_GPT2, "kv_type=f16"}, 7, 2},
};

/*
 * A prompt's attention in tiles on tensor cores (the default for f16 caches), in f32 tiles
 * (GPLAN_CUDA_DISABLE=tensor) and one block per query (=tiles), against the CPU: a 40-token
 * prompt (bucket 64), a step, 20 tokens (bucket 32), a step, with f16 caches (Llama's grouped
 * heads and ropes, GPT-2). Every session's graphs are captured at its creation: the tensor-core
 * kernel is in those of buckets 32 and 64 of the first session only, for every layer.
 */
static void test_model_prompt_tiles(void)
{
    static const char *const off[3] = {NULL, "tensor", "tiles"};
    for (size_t c = 0; c < sizeof decode_cases / sizeof decode_cases[0]; c++) {
        const decode_case *dc = &decode_cases[c];
        if (strcmp(dc->defs[dc->n_defs - 1], "kv_type=f16"))
            continue;
        gp_test_model_opts o = {dc->defs, dc->n_defs, NULL, 1, 42};
        gp_model *m = gp_test_model(dc->example, &o, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        char err[1024];
        gp_session_opts oc = {"cpu", 1, 0};
        gp_session *s[3], *cpu = gp_session_new(m, &oc, err, sizeof err);
        int64_t made[3];
        for (int i = 0; i < 3; i++) {
            int64_t m0 = gp_cuda_attention_mma_count();
            s[i] = session_with(m, off[i] ? "GPLAN_CUDA_DISABLE" : NULL, off[i]);
            made[i] = gp_cuda_attention_mma_count() - m0;
            CU_ASSERT_PTR_NOT_NULL_FATAL(s[i]);
        }
        CU_ASSERT(made[0] >= 2 * dc->n_layer);
        CU_ASSERT_EQUAL(made[1], 0);
        CU_ASSERT_EQUAL(made[2], 0);
        CU_ASSERT_PTR_NOT_NULL_FATAL(cpu);
        gp_model_info info;
        gp_model_get_info(m, &info);
        int64_t V = info.vocab;
        size_t bytes = sizeof(float) * 40 * (size_t)V;
        float *lc = malloc(bytes), *lg = malloc(bytes);
        const int plan[][2] = {{40, 0}, {1, 40}, {20, 41}, {1, 61}};
        for (size_t p = 0; p < sizeof plan / sizeof plan[0]; p++) {
            int n = plan[p][0];
            CU_ASSERT_EQUAL_FATAL(step(cpu, n, plan[p][1], lc, V), 0);
            for (int i = 0; i < 3; i++) {
                CU_ASSERT_EQUAL_FATAL(step(s[i], n, plan[p][1], lg, V), 0);
                double e = max_rel(lg, lc, (size_t)n * (size_t)V);
                if (!(e <= 1e-4))
                    fprintf(stderr, "\n  %s prompt tiles (off: %s) step %zu: vs CPU %.3g\n",
                            dc->example, off[i] ? off[i] : "-", p, e);
                CU_ASSERT(e <= 1e-4);
            }
        }
        for (int i = 0; i < 3; i++) {
            CU_ASSERT_EQUAL(gp_session_backend_allocs(s[i]), 0);
            gp_session_free(s[i]);
        }
        free(lc);
        free(lg);
        gp_session_free(cpu);
        gp_model_free(m);
    }
}

/* attnfuse: the one-token attention fused (the default) or not; enqueued for every layer. */
static void test_model_attnfuse(void)
{
    for (size_t i = 0; i < sizeof decode_cases / sizeof decode_cases[0]; i++) {
        const decode_case *c = &decode_cases[i];
        decode_on_vs_off(c->example, c->defs, c->n_defs, NULL, NULL, "GPLAN_CUDA_DISABLE",
                         "attnfuse", gp_cuda_attention_decode_count, c->n_layer, 1e-4, 1e-4);
    }
}

/*
 * "copies": an eval's sizes and inputs go to the device in one copy, and GPT-2's next and logits
 * reach the host from the argmax's kernel, with no copy (the default), or all in copies of their
 * own (GPLAN_CUDA_DISABLE=copies): the same logits and tokens, and the CPU's. Eager evals
 * (GPLAN_CUDA_GRAPHS=0) enqueue their copies at every eval: one a GPT-2 eval with it on, whatever
 * the token count, and five with it off (the sizes, tokens, pos, logits, next).
 */
static int64_t merged_copies(void)
{
    return gp_cuda_copies_count(1);
}

static void test_model_copies(void)
{
    for (size_t i = 0; i < sizeof decode_cases / sizeof decode_cases[0]; i++) {
        const decode_case *c = &decode_cases[i];
        decode_on_vs_off(c->example, c->defs, c->n_defs, NULL, NULL, "GPLAN_CUDA_DISABLE",
                         "copies", merged_copies, 2, 1e-4, 1e-4);
    }
    const decode_case *c = &decode_cases[1];
    gp_test_model_opts o = {c->defs, c->n_defs, NULL, 1, 42};
    gp_model *m = gp_test_model(c->example, &o, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    gp_model_info info;
    gp_model_get_info(m, &info);
    float *l = malloc(sizeof(float) * 8 * (size_t)info.vocab);
    CU_ASSERT_PTR_NOT_NULL_FATAL(l);
    setenv("GPLAN_CUDA_GRAPHS", "0", 1);
    for (int on = 1; on >= 0; on--) {
        gp_session *s = session_with(m, on ? NULL : "GPLAN_CUDA_DISABLE", "copies");
        CU_ASSERT_PTR_NOT_NULL(s);
        static const int tokens[4] = {5, 1, 1, 3};
        for (int k = 0, start = 0; s && k < 4; start += tokens[k++]) {
            int64_t c0 = gp_cuda_copies_count(0);
            CU_ASSERT_EQUAL(step(s, tokens[k], start, l, info.vocab), 0);
            /* merged: one copy; apart: one per input and output, and the runtime dims */
            CU_ASSERT_EQUAL(gp_cuda_copies_count(0) - c0,
                            on ? 1 : info.n_inputs + info.n_outputs + 1);
            CU_ASSERT(next_agrees(s, l, tokens[k], info.vocab));
        }
        gp_session_free(s);
    }
    unsetenv("GPLAN_CUDA_GRAPHS");
    free(l);
    gp_model_free(m);
}

/* qkvatt: GPT-2 heads of 64 with 16-bit weights compute c_attn inside the one-token attention
 * (with atthead off: by default the attention runs in one block a head, c_attn before it) or not;
 * enqueued for every layer. The CPU reference is looser with 16-bit weights (prompts go through
 * cuBLAS in f16), and with an f16 cache, where a new row rounds either way. */
static void test_model_qkvatt(void)
{
    static const char *const defs[][7] = {
        {"n_layer=2", "n_embd=128", "n_head=2", "vocab_size=512", "n_positions=64", "wtype=f16",
         "kv_type=f32"},
        {"n_layer=1", "n_embd=1280", "n_head=20", "vocab_size=512", "n_positions=64",
         "wtype=bf16", "kv_type=f16"}};
    for (int i = 0; i < 2; i++)
        decode_on_vs_off("examples/gpt2.gplan", defs[i], 7, "GPLAN_CUDA_DISABLE", "atthead",
                         "GPLAN_CUDA_DISABLE", "atthead,qkvatt", gp_cuda_qkv_attention_count,
                         i ? 1 : 2, i ? 5e-3 : 1e-4, i ? 1e-2 : 2e-3);
}

/* Two GPT-2 layers of heads of 64, f16 weights and an f32 cache. */
static const char *const gpt2_heads64[7] = {"n_layer=2", "n_embd=128", "n_head=2",
                                            "vocab_size=512", "n_positions=64", "wtype=f16",
                                            "kv_type=f32"};

/* One GPT-2 layer 1280 wide, bf16 weights and an f16 cache. */
static const char *const gpt2_wide[7] = {"n_layer=1", "n_embd=1280", "n_head=20", "vocab_size=512",
                                         "n_positions=64", "wtype=bf16", "kv_type=f16"};

/* decode_on_vs_off for each GPT-2 model of decode_cases (f32 weights, within 1e-4), with
 * environment variable var=off in one session and var=on in the other (on NULL: var unset), and
 * count() growing by at least per_layer a layer, less `less`, with it on. */
static void gpt2_cases_on_vs_off(const char *var, const char *on, const char *off,
                                 int64_t (*count)(void), int per_layer, int less)
{
    for (size_t i = 0; i < sizeof decode_cases / sizeof decode_cases[0]; i++) {
        const decode_case *c = &decode_cases[i];
        if (strstr(c->example, "gpt2"))
            decode_on_vs_off(c->example, c->defs, c->n_defs, on ? var : NULL, on, var, off, count,
                             per_layer * c->n_layer - less, 1e-4, 1e-4);
    }
}

/* gpt2_cases_on_vs_off, then two layers of heads of 64 with f16 weights and a 1280-wide layer of
 * bf16 weights (tolerances for 16-bit weights), count() growing by at least n64 and nwide. */
static void gpt2_all_on_vs_off(const char *var, const char *on, const char *off,
                               int64_t (*count)(void), int per_layer, int less, int n64,
                               int nwide)
{
    gpt2_cases_on_vs_off(var, on, off, count, per_layer, less);
    decode_on_vs_off("examples/gpt2.gplan", gpt2_heads64, 7, on ? var : NULL, on, var, off, count,
                     n64, 1e-4, 2e-3);
    decode_on_vs_off("examples/gpt2.gplan", gpt2_wide, 7, on ? var : NULL, on, var, off, count,
                     nwide, 5e-3, 1e-2);
}

/* atomic: GPT-2's c_proj and mlp.c_proj, added into the residual in place, add their splits with
 * atomics (the default) or combine them in a cluster; both for every layer, f32 and f16 caches,
 * and a 1280-wide layer of bf16 weights. Llama's o and down ([N, K] weights) take other kernels. */
static void test_model_atomic(void)
{
    gpt2_cases_on_vs_off("GPLAN_CUDA_DISABLE", NULL, "atomic", gp_cuda_matvec_add_count, 2, 0);
    decode_on_vs_off("examples/gpt2.gplan", gpt2_wide, 7, NULL, NULL, "GPLAN_CUDA_DISABLE",
                     "atomic", gp_cuda_matvec_add_count, 2, 5e-3, 1e-2);
}

/* fold: the layer norms before GPT-2's c_attn and c_fc folded into their one-row products (the
 * default) against the same model unfolded and the CPU: f32 weights, f32 and f16 caches; f16
 * weights with qkvatt off (c_attn in the matvec); a 1280-wide layer of bf16 weights with atthead
 * off, where qkvatt takes c_attn and normalizes x itself, and only c_fc folds. */
static void test_model_fold(void)
{
    gpt2_cases_on_vs_off("GPLAN_CUDA_DISABLE", NULL, "fold", gp_cuda_matvec_fold_count, 2, 0);
    decode_on_vs_off("examples/gpt2.gplan", gpt2_heads64, 7, "GPLAN_CUDA_DISABLE", "qkvatt",
                     "GPLAN_CUDA_DISABLE", "qkvatt,fold", gp_cuda_matvec_fold_count, 4, 1e-4, 2e-3);
    int64_t q0 = gp_cuda_qkv_attention_count();
    decode_on_vs_off("examples/gpt2.gplan", gpt2_wide, 7, "GPLAN_CUDA_DISABLE", "atthead",
                     "GPLAN_CUDA_DISABLE", "atthead,fold", gp_cuda_matvec_fold_count, 1, 5e-3,
                     1e-2);
    CU_ASSERT(gp_cuda_qkv_attention_count() - q0 >= 2); /* c_attn in qkvatt, on and off */
}

static int64_t acc_count(void)
{
    return gp_cuda_matvec_acc_count(0);
}

/* accum: GPT-2's c_attn and c_fc add their splits into outputs the matmul before them zeroed
 * (c_fc leaving its gelu to mlp.c_proj), or not, against the CPU: every layer's c_fc and every
 * c_attn but the first layer's (no matmul before it), f32 and f16 caches; with qkvatt (c_fc only)
 * at head dims 64, f16 weights, and in a 1280-wide layer of bf16 weights. */
static void test_model_accum(void)
{
    gpt2_all_on_vs_off("GPLAN_CUDA_DISABLE", NULL, "accum", acc_count, 1, 0, 2, 1);
}

static int64_t typed_count(void)
{
    return gp_cuda_matvec_typed_count() + gp_cuda_attention_typed_count() +
           gp_cuda_ops_typed_count();
}

/* atttyped, kctyped and optyped: the instances of the one-token attention (qkvatt too; atthead
 * off, so that the attention runs its cluster kernel), of the adding [K, N] matvecs and of the
 * norms and lookups for their operands' dtypes (the default) against the generic kernels and the
 * CPU:
 * GPT-2 with f32 weights, f32 and f16 caches (the attention and at least one product a layer);
 * f16 weights with qkvatt at head dims 64 and an f32 cache; a 1280-wide layer of bf16 weights and
 * an f16 cache. */
static void test_model_typed(void)
{
    gpt2_all_on_vs_off("GPLAN_CUDA_DISABLE", "atthead", "atthead,atttyped,kctyped,optyped",
                       typed_count, 2, 0, 4, 2);
}

/* atthead: GPT-2's one-token attentions in one block a head (k_attention_head; the default,
 * where qkvatt is not planned) against the cluster kernel (qkvatt off too) and the CPU, one a
 * layer: f32 weights with f32 and f16 caches, heads of 64 with f16 weights and an f32 cache, a
 * 1280-wide layer of bf16 weights and an f16 cache. */
static void test_model_atthead(void)
{
    gpt2_all_on_vs_off("GPLAN_CUDA_DISABLE", NULL, "atthead,qkvatt",
                       gp_cuda_attention_head_count, 1, 0, 2, 1);
}

/* atthead past the rows it loads early: one-token evals at later positions replay a graph with
 * the split attention instead (gp_cuda_long_evals counts them). GPT-2 with heads of 64 and f32
 * weights, an f16 cache (256 rows early) after a 250-token prompt and an f32 cache (128 rows)
 * after 120 (in evals of at most 64 tokens), then 12 steps each: logits against the CPU's every
 * step, and exactly the steps at or past those rows counted, none with atthead off. */
static void test_model_atthead_long(void)
{
    static const char *const defs[2][7] = {
        {"n_layer=2", "n_embd=128", "n_head=2", "vocab_size=512", "n_positions=320", "wtype=f32",
         "kv_type=f16"},
        {"n_layer=2", "n_embd=128", "n_head=2", "vocab_size=512", "n_positions=160", "wtype=f32",
         "kv_type=f32"}};
    const int prompt[2] = {250, 120}, rows[2] = {256, 128};
    for (int c = 0; c < 2; c++) {
        gp_test_model_opts o = {defs[c], 7, NULL, 1, 42};
        gp_model *m = gp_test_model("examples/gpt2.gplan", &o, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        char err[1024];
        gp_session_opts oc = {"cpu", 1, 0};
        gp_session *on = session_with(m, NULL, NULL);
        gp_session *off = session_with(m, "GPLAN_CUDA_DISABLE", "atthead");
        gp_session *cpu = gp_session_new(m, &oc, err, sizeof err);
        CU_ASSERT_PTR_NOT_NULL_FATAL(on);
        CU_ASSERT_PTR_NOT_NULL_FATAL(off);
        CU_ASSERT_PTR_NOT_NULL_FATAL(cpu);
        gp_model_info info;
        gp_model_get_info(m, &info);
        int64_t V = info.vocab;
        size_t n = 64 * (size_t)V; /* gp_test_eval_tokens' most tokens an eval */
        float *l_on = malloc(sizeof(float) * n), *l_cpu = malloc(sizeof(float) * n);
        int start = 0, longs = 0;
        for (int i = 0; start < prompt[c] + 12; i++) {
            int t = start < prompt[c] ? (prompt[c] - start < 64 ? prompt[c] - start : 64) : 1;
            CU_ASSERT_EQUAL_FATAL(step(cpu, t, start, l_cpu, V), 0);
            int64_t l0 = gp_cuda_long_evals();
            CU_ASSERT_EQUAL_FATAL(step(off, t, start, l_on, V), 0);
            CU_ASSERT_EQUAL(gp_cuda_long_evals(), l0);
            CU_ASSERT_EQUAL_FATAL(step(on, t, start, l_on, V), 0);
            int is_long = t == 1 && start >= rows[c];
            longs += is_long;
            CU_ASSERT_EQUAL(gp_cuda_long_evals(), l0 + is_long);
            CU_ASSERT(next_agrees(on, l_on, t, V));
            double e = max_rel(l_on, l_cpu, (size_t)t * (size_t)V);
            if (!(e <= 1e-4))
                fprintf(stderr, "\n  atthead long: case %d step %d (%d tokens at %d): %.3g\n", c, i,
                        t, start, e);
            CU_ASSERT(e <= 1e-4);
            start += t;
        }
        CU_ASSERT_EQUAL(longs, prompt[c] + 12 - rows[c]);
        CU_ASSERT_EQUAL(gp_session_backend_allocs(on), 0);
        free(l_on);
        free(l_cpu);
        gp_session_free(cpu);
        gp_session_free(off);
        gp_session_free(on);
        gp_model_free(m);
    }
}

/* Early triggers (plan_trig): the [K, N] products whose next launch is a product let it start at
 * their own start (GPLAN_CUDA_TRIG=0: whatever its size; by default only past 8 MiB of weights,
 * which these models don't reach) or not (none), against the CPU: GPT-2's c_proj, c_fc and
 * mlp.c_proj (the last layer's at least before the LM head), f32 and f16 caches, heads of 64
 * with f16 weights and a 1280-wide layer of bf16 weights. */
static void test_model_trig(void)
{
    gpt2_all_on_vs_off("GPLAN_CUDA_TRIG", "0", "none", gp_cuda_matvec_trig_count, 3, 1, 5, 2);
}

/* The one-token attention in one block a head lets c_proj start at its start when c_proj does
 * so for c_fc (threshold 0 MiB: every layer's), or not (none), against the CPU: the cases of
 * test_model_atthead. */
static void test_model_atttrig(void)
{
    gpt2_all_on_vs_off("GPLAN_CUDA_TRIG", "0", "none", gp_cuda_attention_trig_count, 1, 0, 2, 1);
}

/* ---- quantized weights (cuda/cuda_quant.cu) against the CPU's kernels ---- */

static const gp_dtype quant_types[8] = {GP_Q4_0, GP_Q4_1, GP_Q5_0, GP_Q5_1,
                                        GP_Q8_0, GP_Q4_K, GP_Q5_K, GP_Q6_K};

/* Random [rows, n] values quantized to t (rows of gp_dtype_row_bytes), each row's scale its own
 * (1/8 .. 4) so that the blocks' scales differ; *deq gets their values dequantized. */
static uint8_t *quant_rows(gp_dtype t, int64_t rows, int64_t n, float **deq)
{
    size_t rb = gp_dtype_row_bytes(t, n);
    uint8_t *q = malloc((size_t)rows * rb);
    float *f = malloc((size_t)n * sizeof *f);
    *deq = malloc((size_t)(rows * n) * sizeof **deq);
    for (int64_t r = 0; r < rows; r++) {
        float s = 0.125f * (float)(1 + r % 32);
        for (int64_t i = 0; i < n; i++)
            f[i] = frand() * s;
        gp_quant_quantize_row(t, f, q + (size_t)r * rb, n);
        gp_quant_dequantize_row(t, q + (size_t)r * rb, *deq + r * n, n);
    }
    free(f);
    return q;
}

static gp_cu_tensor dev_2d(void *data, gp_dtype t, int64_t d0, int64_t d1, int64_t nb0,
                           int64_t nb1, int sym0)
{
    gp_cu_tensor k;
    memset(&k, 0, sizeof k);
    k.data = data;
    k.dtype = t;
    k.ndim = 2;
    k.ne[0] = d0;
    k.ne[1] = d1;
    k.nb[0] = nb0;
    k.nb[1] = nb1;
    for (int d = 0; d < GP_MAX_DIMS; d++)
        k.sym[d] = -1;
    k.sym[0] = sym0;
    return k;
}

/*
 * One product y [M, N] = x [M, K] W [N, K]^T on the GPU (gp_cuda_compute, as the backend
 * launches it) against gp_quant_matmul_f32 (the CPU's f32 products on quantized weights) and a
 * double sum over the dequantized values: every output within tol of its sum |x| |w| of both,
 * tol 1e-5 for f32 sums, 2e-3 for the prompt path on cuBLAS (x and W rounded to f16: each product
 * within 2^-10 of its size). ws_bytes > 0: a workspace of that many bytes (the cuBLAS path's).
 * M_exact < M: M symbolic (the param block says M_exact); rows past it stay unwritten (but on
 * cuBLAS, which computes the launch's rows). Returns the largest error against the CPU over that
 * scale; path gets the kernel used (0 one token, 1 tiles, 2 one token in k_qmv, 3 cuBLAS).
 */
static double quant_matmul_case(gp_dtype t, int64_t M, int64_t M_exact, int64_t K, int64_t N,
                                size_t ws_bytes, int *path)
{
    float *wd, *x = malloc((size_t)(M * K) * sizeof *x);
    uint8_t *wq = quant_rows(t, N, K, &wd);
    size_t rb = gp_dtype_row_bytes(t, K);
    for (int64_t i = 0; i < M * K; i++)
        x[i] = frand();
    float *yref = malloc((size_t)(M * N) * sizeof *yref), *yg = malloc((size_t)(M * N) * sizeof *yg);
    gp_quant_matmul_f32(t, wq, 0, N, x, K, M_exact, K, yref, N);
    int sym = M_exact < M;
    int64_t launch[1] = {M}, exact[1] = {M_exact};
    kctx k;
    kctx_new(&k, exact, launch, sym ? 1 : 0);
    void *dx = NULL, *dw = NULL, *dy = NULL;
    CU_ASSERT_EQUAL_FATAL(cudaMalloc(&dx, (size_t)(M * K) * 4), cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaMalloc(&dw, (size_t)N * rb), cudaSuccess);
    CU_ASSERT_EQUAL_FATAL(cudaMalloc(&dy, (size_t)(M * N) * 4), cudaSuccess);
    cudaMemcpy(dx, x, (size_t)(M * K) * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dw, wq, (size_t)N * rb, cudaMemcpyHostToDevice);
    cudaMemset(dy, 0xff, (size_t)(M * N) * 4);
    void *dws = NULL;
    if (ws_bytes)
        CU_ASSERT_EQUAL_FATAL(cudaMalloc(&dws, ws_bytes), cudaSuccess);
    gp_cu_tensor in[2] = {dev_2d(dx, GP_F32, M, K, K * 4, 4, sym ? 0 : -1),
                          dev_2d(dw, t, N, K, (int64_t)rb, 0, -1)};
    gp_cu_tensor out = dev_2d(dy, GP_F32, M, N, N * 4, 4, sym ? 0 : -1);
    gp_attrs a;
    memset(&a, 0, sizeof a);
    a.i[1] = 1; /* tb */
    int64_t c0 = gp_cuda_quant_count(0), c1 = gp_cuda_quant_count(1), c3 = gp_cuda_quant_count(3);
    int64_t c4 = gp_cuda_quant_count(4);
    int r = gp_cuda_compute(&k.c, GP_OP_MATMUL, &a, &out, in, 2, dws, ws_bytes);
    if (r)
        fprintf(stderr, "\n  %s: gp_cuda_compute: %s\n", gp_dtype_name(t), k.c.err);
    CU_ASSERT_EQUAL(r, 0);
    CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
    *path = gp_cuda_quant_count(1) > c1 ? 1 : 0;
    CU_ASSERT_EQUAL(gp_cuda_quant_count(0) - c0 + gp_cuda_quant_count(1) - c1, 1);
    CU_ASSERT_EQUAL(*path, M > 8); /* the launch size picks the kernel */
    /* one token, rows of 16-byte multiples, K of 256 (q6_k: 2048): the fast kernel (k_qmv) */
    int fast = M <= 8 && rb % 16 == 0 && K % (t == GP_Q6_K ? 2048 : 256) == 0;
    CU_ASSERT_EQUAL(gp_cuda_quant_count(3) - c3, fast);
    if (!*path && fast)
        *path = 2;
    /* a prompt with a workspace: on cuBLAS */
    CU_ASSERT_EQUAL(gp_cuda_quant_count(4) - c4, M > 8 && ws_bytes > 0);
    if (gp_cuda_quant_count(4) > c4)
        *path = 3;
    double tol = *path == 3 ? 2e-3 : 1e-5;
    cudaMemcpy(yg, dy, (size_t)(M * N) * 4, cudaMemcpyDeviceToHost);
    double worst = 0;
    int bad = 0, unwritten = 1;
    for (int64_t m = 0; m < M_exact; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = 0, bound = 0;
            for (int64_t i = 0; i < K; i++) {
                s += (double)x[m * K + i] * wd[n * K + i];
                bound += fabs((double)x[m * K + i] * wd[n * K + i]);
            }
            double g = yg[m * N + n], e = fabs(g - yref[m * N + n]) / (bound > 0 ? bound : 1);
            if (!(e <= tol) || !(fabs(g - s) <= tol * bound + 1e-30))
                bad++;
            worst = e > worst || e != e ? e : worst;
        }
    for (int64_t i = M_exact * N; i < M * N && *path != 3; i++)
        unwritten &= isnan(yg[i]);
    if (bad)
        fprintf(stderr, "\n  %s M %lld (exact %lld) K %lld N %lld: %d outputs off (worst %.3g)\n",
                gp_dtype_name(t), (long long)M, (long long)M_exact, (long long)K, (long long)N, bad,
                worst);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(unwritten);
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dy);
    cudaFree(dws);
    kctx_free(&k);
    free(x);
    free(wq);
    free(wd);
    free(yref);
    free(yg);
    return worst;
}

/* Every type, M in {1, 3, 17, 64}, K in {256, 576, 1536, 2048} (576 for the 32-blocks only), N
 * in {96, 576}, prompts with a workspace (cuBLAS); one token at K 4096 (M 1, 3); then M symbolic (3 of a launch of 8, 17 of 64,
 * with no workspace: the tiles), and a prompt [64, 4352] x [576, 4352]^T in a workspace that holds
 * tiles of 256 rows only (three of W's rows, two of K). Prints the worst error per type and
 * kernel (a table for the GPU run). */
static void test_quant_matmul(void)
{
    static const int64_t Ms[4] = {1, 3, 17, 64}, Ks[4] = {256, 576, 1536, 2048}, Ns[2] = {96, 576};
    const size_t ws = (size_t)GP_WS_CUBLAS_BYTES;
    printf("\n  quant matmul: worst |gpu - cpu| / sum |x||w| (tolerance 1e-5; cuBLAS 2e-3)\n"
           "  %-5s %10s %10s %10s %10s %6s\n", "type", "one-token", "tiles", "fast", "cublas",
           "cases");
    for (int ti = 0; ti < 8; ti++) {
        gp_dtype t = quant_types[ti];
        double worst[4] = {0, 0, 0, 0};
        int cases = 0;
        for (int ki = 0; ki < 4; ki++) {
            if (Ks[ki] % gp_dtype_block(t))
                continue;
            for (int ni = 0; ni < 2; ni++)
                for (int mi = 0; mi < 4; mi++) {
                    int path = 0;
                    double e = quant_matmul_case(t, Ms[mi], Ms[mi], Ks[ki], Ns[ni], ws, &path);
                    worst[path] = e > worst[path] || e != e ? e : worst[path];
                    cases++;
                }
        }
        for (int mi = 0; mi < 2; mi++) { /* 16 steps a row, 3 groups of 32 rows: half-warp rows */
            int path = 0;
            double e = quant_matmul_case(t, Ms[mi], Ms[mi], 4096, 96, ws, &path);
            worst[path] = e > worst[path] || e != e ? e : worst[path];
            cases++;
        }
        for (int s = 0; s < 3; s++) {
            int path = 0;
            /* 4 MiB for cuBLAS, x's [64, 4096] and W's [256, 4096] in f16 */
            size_t small = ((size_t)4 << 20) + 64 * 4096 * 2 + 256 * 4096 * 2 + 512;
            double e = s < 2 ? quant_matmul_case(t, s ? 64 : 8, s ? 17 : 3, 256, 96, 0, &path)
                             : quant_matmul_case(t, 64, 64, 4352, 576, small, &path);
            worst[path] = e > worst[path] || e != e ? e : worst[path];
            cases++;
        }
        printf("  %-5s %10.3g %10.3g %10.3g %10.3g %6d\n", gp_dtype_name(t), worst[0], worst[1],
               worst[2], worst[3], cases);
    }
}

/* Quantized groups (gp_cuda_matvec_group -> gp_cu_quant_group, one k_qmv launch): q, k, v of
 * q4_k and q6_k (Q4_K_M's mix) with and without the rms_norm before them, gate/up/swiglu of q4_k
 * and of q4_0 with the norm, q8_0 products; each output within 1e-5 of sum |x'| |w| of the double
 * sums over the dequantized weights (x' the normed x, computed in double), outputs past N
 * untouched; a pair of q4_0 and q4_k is not taken (nothing launched). */
static void test_quant_group(void)
{
    const struct {
        gp_dtype t[3];
        int n, glu, norm;
        int64_t K, N[3];
    } cs[] = {{{GP_Q4_K, GP_Q4_K, GP_Q6_K}, 3, 0, 0, 2048, {96, 64, 40}},
              {{GP_Q4_K, GP_Q4_K, GP_Q6_K}, 3, 0, 1, 2048, {160, 32, 32}},
              {{GP_Q4_K, GP_Q4_K}, 2, 1, 1, 512, {200, 200}},
              {{GP_Q4_0, GP_Q4_0}, 2, 1, 0, 768, {64, 64}},
              {{GP_Q8_0, GP_Q8_0, GP_Q8_0}, 3, 0, 1, 256, {32, 8, 8}},
              {{GP_Q4_0, GP_Q4_K}, 2, 0, 0, 256, {32, 32}}};
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        int64_t K = cs[c].K;
        float *x = malloc((size_t)K * sizeof *x), *nw = malloc((size_t)K * sizeof *nw);
        double *xn = malloc((size_t)K * sizeof *xn), ssq = 0;
        for (int64_t i = 0; i < K; i++) {
            x[i] = frand() * 3.0f;
            nw[i] = 0.5f + 0.5f * (frand() + 1.0f);
            ssq += (double)x[i] * x[i];
        }
        const float eps = 1e-5f;
        double inv = 1.0 / sqrt(ssq / (double)K + eps);
        for (int64_t i = 0; i < K; i++)
            xn[i] = cs[c].norm ? (double)x[i] * inv * nw[i] : x[i];
        void *dx = NULL, *dnw = NULL, *dw[3] = {NULL}, *dy[3] = {NULL};
        uint8_t *wq[3] = {NULL};
        float *wd[3] = {NULL};
        CU_ASSERT_EQUAL_FATAL(cudaMalloc(&dx, (size_t)K * 4), cudaSuccess);
        CU_ASSERT_EQUAL_FATAL(cudaMalloc(&dnw, (size_t)K * 4), cudaSuccess);
        cudaMemcpy(dx, x, (size_t)K * 4, cudaMemcpyHostToDevice);
        cudaMemcpy(dnw, nw, (size_t)K * 4, cudaMemcpyHostToDevice);
        gp_cu_group g;
        memset(&g, 0, sizeof g);
        g.n = cs[c].n;
        g.glu = cs[c].glu;
        g.x = dev_2d(dx, GP_F32, 1, K, K * 4, 4, -1);
        for (int s = 0; s < cs[c].n; s++) {
            gp_dtype t = cs[c].t[s];
            int64_t N = cs[c].N[s];
            size_t rb = gp_dtype_row_bytes(t, K);
            wq[s] = quant_rows(t, N, K, &wd[s]);
            CU_ASSERT_EQUAL_FATAL(cudaMalloc(&dw[s], (size_t)N * rb), cudaSuccess);
            CU_ASSERT_EQUAL_FATAL(cudaMalloc(&dy[s], (size_t)(N + 8) * 4), cudaSuccess);
            cudaMemcpy(dw[s], wq[s], (size_t)N * rb, cudaMemcpyHostToDevice);
            cudaMemset(dy[s], 0xff, (size_t)(N + 8) * 4);
            g.w[s] = dev_2d(dw[s], t, N, K, (int64_t)rb, 0, -1);
            g.tb[s] = 1;
            g.out[s] = dev_2d(dy[s], GP_F32, 1, N, N * 4, 4, -1);
        }
        if (cs[c].norm) {
            g.has_norm = 1;
            g.norm.eps = eps;
            g.norm.x = g.x;
            g.norm.w = dev_2d(dnw, GP_F32, 1, K, K * 4, 4, -1);
            g.norm.w.ndim = 1;
            g.norm.w.ne[0] = K;
            g.norm.w.nb[0] = 4;
        }
        int64_t g0 = gp_cuda_quant_count(5);
        int launched = -1;
        CU_ASSERT_EQUAL(gp_cuda_matvec_group(&k.c, &g, &launched), 0);
        CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
        int want = cs[c].t[0] != GP_Q4_0 || cs[c].t[1] != GP_Q4_K;
        CU_ASSERT_EQUAL(launched, want);
        CU_ASSERT_EQUAL(gp_cuda_quant_count(5) - g0, want);
        int bad = 0;
        double worst = 0;
        for (int s = 0; s < (cs[c].glu ? 1 : cs[c].n) && want; s++) {
            int64_t N = cs[c].N[s];
            float *y = malloc((size_t)(N + 8) * 4);
            cudaMemcpy(y, dy[s], (size_t)(N + 8) * 4, cudaMemcpyDeviceToHost);
            for (int64_t n = 0; n < N; n++) {
                double a = 0, ab = 0, b = 0, bb = 0;
                for (int64_t i = 0; i < K; i++) {
                    a += xn[i] * wd[s][n * K + i];
                    ab += fabs(xn[i] * wd[s][n * K + i]);
                    if (cs[c].glu) {
                        b += xn[i] * wd[1][n * K + i];
                        bb += fabs(xn[i] * wd[1][n * K + i]);
                    }
                }
                double ref = a, bound = ab;
                if (cs[c].glu) { /* silu(a) b: its error from a's and b's */
                    double sg = 1.0 / (1.0 + exp(-a));
                    ref = a * sg * b;
                    bound = fabs(sg * (1 + a * (1 - sg)) * b) * ab + fabs(a * sg) * bb;
                }
                /* below -88.7 silu's exp(-a) overflows f32 and silu(a) is 0 (as on the CPU):
                 * a product then within 1e-30 of its tiny double value passes */
                double e = fabs(y[n] - ref) / (bound > 0 ? bound : 1);
                if (fabs(y[n] - ref) <= 1e-30)
                    e = 0;
                if (!(e <= 1e-5) && bad < 4)
                    printf("  quant group case %zu output %lld: %.9g, want %.9g (a %.9g, b %.9g, "
                           "bound %.3g, error %.3g)\n", c, (long long)n, y[n], ref, a, b, bound,
                           e);
                bad += !(e <= 1e-5);
                worst = e > worst || e != e ? e : worst;
            }
            for (int64_t n = N; n < N + 8; n++)
                bad += !isnan(y[n]);
            free(y);
        }
        if (bad)
            fprintf(stderr, "\n  quant group case %zu: %d outputs off (worst %.3g)\n", c, bad, worst);
        CU_ASSERT_EQUAL(bad, 0);
        for (int s = 0; s < cs[c].n; s++) {
            cudaFree(dw[s]);
            cudaFree(dy[s]);
            free(wq[s]);
            free(wd[s]);
        }
        cudaFree(dx);
        cudaFree(dnw);
        free(x);
        free(nw);
        free(xn);
    }
    kctx_free(&k);
}

/* Lookups in a quantized table [40, 512]: rows of valid ids are gp_quant_dequantize_row's values
 * bit for bit (f32 out; f16 out: those rounded as gp_f32_to_f16 does), rows of ids out of range
 * (-1, 40) stay unwritten; a table whose rows are not whole blocks is refused. */
static void test_quant_get_rows(void)
{
    const int64_t V = 40, C = 512, T = 7;
    const int32_t ids[7] = {3, 39, 0, -1, 17, 40, 3};
    for (int ti = 0; ti < 8; ti++) {
        gp_dtype t = quant_types[ti];
        float *deq;
        uint8_t *q = quant_rows(t, V, C, &deq);
        size_t rb = gp_dtype_row_bytes(t, C);
        void *dt = NULL, *di = NULL, *dout = NULL;
        CU_ASSERT_EQUAL_FATAL(cudaMalloc(&dt, (size_t)V * rb), cudaSuccess);
        CU_ASSERT_EQUAL_FATAL(cudaMalloc(&di, sizeof ids), cudaSuccess);
        CU_ASSERT_EQUAL_FATAL(cudaMalloc(&dout, (size_t)(T * C) * 4), cudaSuccess);
        cudaMemcpy(dt, q, (size_t)V * rb, cudaMemcpyHostToDevice);
        cudaMemcpy(di, ids, sizeof ids, cudaMemcpyHostToDevice);
        kctx k;
        kctx_new(&k, NULL, NULL, 0);
        gp_cu_tensor ki;
        memset(&ki, 0, sizeof ki);
        ki.data = di;
        ki.dtype = GP_I32;
        ki.ndim = 1;
        ki.ne[0] = T;
        ki.nb[0] = 4;
        for (int d = 0; d < GP_MAX_DIMS; d++)
            ki.sym[d] = -1;
        for (int f16 = 0; f16 < 2; f16++) {
            gp_dtype ot = f16 ? GP_F16 : GP_F32;
            size_t es = f16 ? 2 : 4;
            gp_cu_tensor in[2] = {dev_2d(dt, t, V, C, (int64_t)rb, 0, -1), ki};
            gp_cu_tensor out = dev_2d(dout, ot, T, C, C * (int64_t)es, (int64_t)es, -1);
            cudaMemset(dout, 0xff, (size_t)(T * C) * 4);
            gp_attrs a;
            memset(&a, 0, sizeof a);
            int64_t c2 = gp_cuda_quant_count(2);
            int r = gp_cuda_compute(&k.c, GP_OP_GET_ROWS, &a, &out, in, 2, NULL, 0);
            if (r)
                fprintf(stderr, "\n  %s get_rows: %s\n", gp_dtype_name(t), k.c.err);
            CU_ASSERT_EQUAL(r, 0);
            CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
            CU_ASSERT_EQUAL(gp_cuda_quant_count(2), c2 + 1);
            unsigned char *g = malloc((size_t)(T * C) * es);
            cudaMemcpy(g, dout, (size_t)(T * C) * es, cudaMemcpyDeviceToHost);
            int bad = 0;
            for (int64_t r2 = 0; r2 < T; r2++)
                for (int64_t i = 0; i < C; i++) {
                    const unsigned char *e = g + (size_t)(r2 * C + i) * es;
                    uint16_t h = 0;
                    float v = 0;
                    if (f16)
                        memcpy(&h, e, 2);
                    else
                        memcpy(&v, e, 4);
                    if (ids[r2] < 0 || ids[r2] >= V) {
                        bad += f16 ? h != 0xffff : !isnan(v);
                        continue;
                    }
                    float want = deq[ids[r2] * C + i];
                    if (f16)
                        bad += h != gp_f32_to_f16(want);
                    else
                        bad += memcmp(&v, &want, 4) != 0;
                }
            if (bad)
                fprintf(stderr, "\n  %s get_rows (%s out): %d elements off\n", gp_dtype_name(t),
                        f16 ? "f16" : "f32", bad);
            CU_ASSERT_EQUAL(bad, 0);
            free(g);
        }
        /* rows of 500 elements: not whole blocks */
        gp_cu_tensor in[2] = {dev_2d(dt, t, V, 500, (int64_t)rb, 0, -1), ki};
        gp_cu_tensor out = dev_2d(dout, GP_F32, T, 500, 2000, 4, -1);
        gp_attrs a;
        memset(&a, 0, sizeof a);
        CU_ASSERT_EQUAL(gp_cuda_compute(&k.c, GP_OP_GET_ROWS, &a, &out, in, 2, NULL, 0), -1);
        CU_ASSERT_PTR_NOT_NULL(strstr(k.c.err, "multiple of"));
        kctx_free(&k);
        cudaFree(dt);
        cudaFree(di);
        cudaFree(dout);
        free(q);
        free(deq);
    }
}

/* Layouts the quantized products do not take are refused with an error, nothing launched. */
static void test_quant_matmul_refusals(void)
{
    float *wd;
    uint8_t *wq = quant_rows(GP_Q8_0, 4, 64, &wd);
    void *dx = NULL, *dw = NULL, *dy = NULL;
    cudaMalloc(&dx, 64 * 4);
    cudaMalloc(&dw, 4 * gp_dtype_row_bytes(GP_Q8_0, 64));
    cudaMalloc(&dy, 64 * 4);
    cudaMemset(dx, 0, 64 * 4);
    cudaMemcpy(dw, wq, 4 * gp_dtype_row_bytes(GP_Q8_0, 64), cudaMemcpyHostToDevice);
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    gp_attrs a;
    memset(&a, 0, sizeof a);
    gp_cu_tensor in[2] = {dev_2d(dx, GP_F32, 1, 64, 256, 4, -1),
                          dev_2d(dw, GP_Q8_0, 4, 64, 68, 0, -1)};
    gp_cu_tensor out = dev_2d(dy, GP_F32, 1, 4, 16, 4, -1);
    int64_t c0 = k.c.launches;
    /* not transposed (W [K, N] is not a form quantized weights take) */
    CU_ASSERT_EQUAL(gp_cuda_compute(&k.c, GP_OP_MATMUL, &a, &out, in, 2, NULL, 0), -1);
    CU_ASSERT_PTR_NOT_NULL(strstr(k.c.err, "q8_0 weight needs"));
    a.i[1] = 1;
    in[0].dtype = GP_F16; /* x must be f32 */
    CU_ASSERT_EQUAL(gp_cuda_compute(&k.c, GP_OP_MATMUL, &a, &out, in, 2, NULL, 0), -1);
    in[0].dtype = GP_F32;
    in[0].ne[1] = in[1].ne[1] = 48; /* K not whole blocks */
    CU_ASSERT_EQUAL(gp_cuda_compute(&k.c, GP_OP_MATMUL, &a, &out, in, 2, NULL, 0), -1);
    CU_ASSERT_EQUAL(k.c.launches, c0);
    in[0].ne[1] = in[1].ne[1] = 64;
    CU_ASSERT_EQUAL(gp_cuda_compute(&k.c, GP_OP_MATMUL, &a, &out, in, 2, NULL, 0), 0);
    CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
    kctx_free(&k);
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dy);
    free(wq);
    free(wd);
}

/* examples/llama.gplan with -D wtype=TYPE (random weights quantized at load) on CUDA against the
 * same graph in f32 on the CPU, bound to those weights dequantized (a safetensors file). A prompt
 * of 20 tokens (bucket 32: products on cuBLAS, x and W rounded to f16, so the tolerance of f16
 * weights' models, 5e-3), then 8 decode steps (the one-token kernels, f32 sums of the same
 * values, on a KV cache the prompt wrote); no allocation in evals. */
static const char *const quant_shape[] = {
    "num_hidden_layers=2", "hidden_size=256", "intermediate_size=512", "num_attention_heads=4",
    "num_key_value_heads=2", "vocab_size=96", "max_position_embeddings=64", "n_batch=32",
};
enum { N_QSHAPE = sizeof quant_shape / sizeof quant_shape[0] };

static gp_model *quant_llama(const char *wtype, uint64_t seed)
{
    const char *defs[N_QSHAPE + 1];
    char w[32];
    memcpy(defs, quant_shape, sizeof quant_shape);
    snprintf(w, sizeof w, "wtype=%s", wtype);
    defs[N_QSHAPE] = w;
    gp_test_model_opts o = {defs, N_QSHAPE + 1, NULL, 1, seed};
    return gp_test_model("examples/llama.gplan", &o, NULL);
}

static void quant_model_parity(const char *wtype)
{
    gp_model *q = quant_llama(wtype, 11), *f = quant_llama("f32", 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(q);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    const char *path = gp_test_write_dequantized(q);
    CU_ASSERT_PTR_NOT_NULL_FATAL(path);
    char err[2048];
    CU_ASSERT_EQUAL_FATAL(gp_model_bind_weights(f, path, err, sizeof err), 0);
    gp_session_opts oc = {"cpu", 2, 0}, og = {"cuda", 1, 0};
    int64_t c0 = gp_cuda_quant_count(0), c1 = gp_cuda_quant_count(1), c2 = gp_cuda_quant_count(2);
    int64_t c3 = gp_cuda_quant_count(3), c4 = gp_cuda_quant_count(4), c5 = gp_cuda_quant_count(5);
    int64_t e0 = gp_cuda_blas_epilogue_count(0);
    gp_session *sc = gp_session_new(f, &oc, err, sizeof err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sc);
    gp_session *sg = gp_session_new(q, &og, err, sizeof err);
    if (!sg)
        fprintf(stderr, "\n  cuda session (%s): %s\n", wtype, err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sg);
    gp_model_info info;
    gp_model_get_info(q, &info);
    int64_t V = info.vocab;
    float *lc = malloc(sizeof(float) * 20 * (size_t)V), *lg = malloc(sizeof(float) * 20 * (size_t)V);
    double worst = 0;
    for (int i = 0; i < 9; i++) {
        int n = i == 0 ? 20 : 1, start = i == 0 ? 0 : 19 + i;
        CU_ASSERT_EQUAL_FATAL(step(sc, n, start, lc, V), 0);
        CU_ASSERT_EQUAL_FATAL(step(sg, n, start, lg, V), 0);
        double e = max_rel(lg, lc, (size_t)n * (size_t)V);
        if (!(e <= 5e-3))
            fprintf(stderr, "\n  llama %s step %d: logits error %.3g > 5e-3\n", wtype, i, e);
        CU_ASSERT(e <= 5e-3);
        worst = e > worst || e != e ? e : worst;
    }
    int64_t allocs = gp_session_backend_allocs(sg);
    CU_ASSERT_EQUAL(allocs, 0);
    /* graphs captured at creation launched both kernels and the lookup */
    int64_t n0 = gp_cuda_quant_count(0) - c0, n1 = gp_cuda_quant_count(1) - c1;
    int64_t n2 = gp_cuda_quant_count(2) - c2;
    int64_t n3 = gp_cuda_quant_count(3) - c3, n4 = gp_cuda_quant_count(4) - c4;
    CU_ASSERT(n0 > 0 && n1 > 0 && n2 > 0);
    CU_ASSERT(n3 > 0 && n4 > 0); /* rows of 16-byte multiples (K 256, 512): k_qmv; prompts: cuBLAS */
    /* q, k, v and gate, up, swiglu grouped (with their norms) for the types built for groups; the
     * residual adds after o and down in the prompts' products: one epilogue launch after cuBLAS */
    int64_t n5 = gp_cuda_quant_count(5) - c5, ne = gp_cuda_blas_epilogue_count(0) - e0;
    int grouped = !strcmp(wtype, "q4_k") || !strcmp(wtype, "q8_0") || !strcmp(wtype, "q4_0");
    CU_ASSERT_EQUAL(n5 > 0, grouped);
    CU_ASSERT(ne > 0);
    printf("  llama %-5s CUDA vs CPU f32 (dequantized): worst logits error %.3g (tolerance 5e-3), "
           "eval allocations %lld, launches: one-token %lld (k_qmv %lld, grouped launches %lld) "
           "prompt %lld (cuBLAS %lld, epilogues after %lld) lookups %lld\n",
           wtype, worst, (long long)allocs, (long long)n0, (long long)n3, (long long)n5,
           (long long)n1, (long long)n4, (long long)ne, (long long)n2);
    free(lc);
    free(lg);
    gp_session_free(sg);
    gp_session_free(sc);
    remove(path);
    gp_model_free(q);
    gp_model_free(f);
}

static void test_quant_model(void)
{
    printf("\n");
    quant_model_parity("q4_k");
    quant_model_parity("q8_0");
    quant_model_parity("q4_1");
}

/* Speed of the quantized products on this GPU, printed for the record and asserted on nothing
 * but success: W [N, K] of random blocks (sane f16 scales) for Llama-3-8B's shapes, one token (GB/s
 * of W read) and, for [4096, 4096], a prompt of 512 (TFLOP/s), the mean of 20 launches after 3
 * warm-up ones. */
static void test_quant_speed(void)
{
    static const int64_t shapes[3][2] = {{4096, 4096}, {14336, 4096}, {4096, 14336}};
    const int64_t MP = 512;
    static const gp_dtype ts[4] = {GP_Q4_0, GP_Q8_0, GP_Q4_K, GP_Q6_K};
    printf("\n  quant speed: one token (M 1) and a prompt (M %lld)\n"
           "  %-5s %6s %6s %10s %10s %12s %10s\n", (long long)MP, "type", "N", "K", "M1 us",
           "M1 GB/s", "M512 ms", "TFLOP/s");
    for (int si = 0; si < 3; si++)
        for (int ti = 0; ti < 4; ti++) {
            gp_dtype t = ts[ti];
            int64_t N = shapes[si][0], K = shapes[si][1];
            size_t rb = gp_dtype_row_bytes(t, K), wb = (size_t)N * rb;
            unsigned char *h = malloc(wb);
            for (size_t i = 0; i < wb; i++)
                h[i] = (unsigned char)gp_test_rand(&rng);
            /* scales about 1e-3 (no NaN or Inf): each block's f16 at its place */
            int64_t qk = gp_dtype_block(t), bs = (int64_t)gp_dtype_row_bytes(t, qk);
            int64_t doff = t == GP_Q6_K ? 208 : 0;
            for (size_t b = 0; b < wb / (size_t)bs; b++) {
                unsigned char *blk = h + b * (size_t)bs + doff;
                blk[0] = 0x19, blk[1] = 0x12; /* ~7.5e-4 */
                if (t == GP_Q4_K)
                    blk[2] = 0x19, blk[3] = 0x12;
            }
            void *dw = NULL, *dx = NULL, *dy = NULL;
            CU_ASSERT_EQUAL_FATAL(cudaMalloc(&dw, wb), cudaSuccess);
            CU_ASSERT_EQUAL_FATAL(cudaMalloc(&dx, (size_t)(MP * K) * 4), cudaSuccess);
            CU_ASSERT_EQUAL_FATAL(cudaMalloc(&dy, (size_t)(MP * N) * 4), cudaSuccess);
            cudaMemcpy(dw, h, wb, cudaMemcpyHostToDevice);
            cudaMemset(dx, 0, (size_t)(MP * K) * 4);
            kctx k;
            kctx_new(&k, NULL, NULL, 0);
            cudaStreamCreate(&k.c.stream);
            gp_attrs a;
            memset(&a, 0, sizeof a);
            a.i[1] = 1;
            double us[2] = {0, 0};
            for (int p = 0; p < (si == 0 ? 2 : 1); p++) {
                int64_t M = p ? MP : 1;
                gp_cu_tensor in[2] = {dev_2d(dx, GP_F32, M, K, K * 4, 4, -1),
                                      dev_2d(dw, t, N, K, (int64_t)rb, 0, -1)};
                gp_cu_tensor out = dev_2d(dy, GP_F32, M, N, N * 4, 4, -1);
                cudaEvent_t e0, e1;
                cudaEventCreate(&e0);
                cudaEventCreate(&e1);
                int r = 0;
                for (int i = 0; i < 3; i++)
                    r |= gp_cuda_compute(&k.c, GP_OP_MATMUL, &a, &out, in, 2, NULL, 0);
                cudaEventRecord(e0, k.c.stream);
                for (int i = 0; i < 20; i++)
                    r |= gp_cuda_compute(&k.c, GP_OP_MATMUL, &a, &out, in, 2, NULL, 0);
                cudaEventRecord(e1, k.c.stream);
                CU_ASSERT_EQUAL(r, 0);
                CU_ASSERT_EQUAL(cudaEventSynchronize(e1), cudaSuccess);
                float ms = 0;
                cudaEventElapsedTime(&ms, e0, e1);
                us[p] = 1e3 * ms / 20;
                cudaEventDestroy(e0);
                cudaEventDestroy(e1);
            }
            if (si == 0)
                printf("  %-5s %6lld %6lld %10.1f %10.0f %12.3f %10.2f\n", gp_dtype_name(t),
                       (long long)N, (long long)K, us[0], (double)wb / (us[0] * 1e3), us[1] / 1e3,
                       2.0 * MP * N * K / (us[1] * 1e6));
            else
                printf("  %-5s %6lld %6lld %10.1f %10.0f\n", gp_dtype_name(t), (long long)N,
                       (long long)K, us[0], (double)wb / (us[0] * 1e3));
            cudaStreamDestroy(k.c.stream);
            kctx_free(&k);
            cudaFree(dw);
            cudaFree(dx);
            cudaFree(dy);
            free(h);
        }
}

static void fam_tests(CU_pSuite s); /* the model families' block, at the end */

void gp_suite_cuda(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
        cudaGetLastError();
        gp_test_skip("cuda", "no GPU");
        return;
    }
    CU_pSuite s = CU_add_suite("cuda", NULL, NULL);
    CU_add_test(s, "elementwise ops and broadcasting", test_elementwise);
    CU_add_test(s, "norms and softmax", test_norms_softmax);
    CU_add_test(s, "rope, get_rows, cont/cast, concat", test_rope_rows_copies);
    CU_add_test(s, "get_rows_add: two lookups and their sum in one launch", test_get_rows_add);
    CU_add_test(s, "store: the last repeated position wins", test_store);
    CU_add_test(s, "store2: K and V stores in one launch, strided sources", test_store2);
    CU_add_test(s, "matvec computing the norm before it", test_matvec_prenorm);
    CU_add_test(s, "matvec pairs: two short rows per warp", test_matvec_pairs);
    CU_add_test(s, "argmax: first of the largest, NaN never", test_argmax);
    CU_add_test(s, "matvec cluster: [K, N] splits combined in a cluster", test_matvec_cluster);
    CU_add_test(s, "matvec add: splits added into a residual in place", test_matvec_add);
    CU_add_test(s, "matvec acc: zeroed outputs added into, gelu(x) staged", test_matvec_acc);
    CU_add_test(s, "matvec group: q/k/v and gate/up/swiglu in one launch", test_matvec_group);
    CU_add_test(s, "matvec group computing the rms_norm before it", test_matvec_group_norm);
    CU_add_test(s, "attention: split-KV decode and prompts", test_attention);
    CU_add_test(s, "one-token attention with ropes and K/V stores inside", test_attention_decode);
    CU_add_test(s, "atthead: one-token attention in one block a head", test_attention_head);
    CU_add_test(s, "prompts: a cuBLAS product's epilogue in one launch", test_blas_epilogue);
    CU_add_test(s, "prompts: attention in tiles, on tensor cores, against the CPU",
                test_model_prompt_tiles);
    CU_add_test(s, "one-token attention: output over q, pos out of range, refusals",
                test_attention_decode_edges);
    CU_add_test(s, "matmul: matvec, cuBLAS, batched, fallback", test_matmul);
    CU_add_test(s, "sizes from the param block", test_param_block);
    CU_add_test(s, "tiny model f32: CPU vs CUDA, no eval allocations", test_model_f32);
    CU_add_test(s, "tiny model f16 weights: CPU vs CUDA", test_model_f16);
    CU_add_test(s, "tiny model: fusions off, PDL on and off", test_model_switches);
    CU_add_test(s, "Llama and GPT-2 decode: one-token attention fused or not", test_model_attnfuse);
    CU_add_test(s, "GPT-2 decode: c_attn inside the one-token attention or not", test_model_qkvatt);
    CU_add_test(s, "GPT-2 decode: residual products adding with atomics or not", test_model_atomic);
    CU_add_test(s, "GPT-2 decode: layer norms folded into their products or not", test_model_fold);
    CU_add_test(s, "GPT-2 decode: products adding into zeroed outputs or not", test_model_accum);
    CU_add_test(s, "GPT-2 decode: kernel instances for the operands' dtypes or generic ones",
                test_model_typed);
    CU_add_test(s, "GPT-2 decode: one-token attention in one block a head or in a cluster",
                test_model_atthead);
    CU_add_test(s, "GPT-2 decode: the split attention past the rows atthead loads early",
                test_model_atthead_long);
    CU_add_test(s, "GPT-2 decode: products letting the next one start at their start or not",
                test_model_trig);
    CU_add_test(s, "GPT-2 decode: the attention letting c_proj start at its start or not",
                test_model_atttrig);
    CU_add_test(s, "Llama and GPT-2 decode: inputs and outputs in one copy each or not",
                test_model_copies);
    CU_add_test(s, "LoRA runtime mode: adapters rebound in a live session", test_lora_rebind);
    CU_add_test(s, "LoRA runtime mode: branches merged into the products, ranks 8 and 64",
                test_model_lora);
    CU_add_test(s, "LoRA runtime mode: GPT-2 117M-shaped decode fuses as without branches",
                test_model_lora_117m);
    CU_add_test(s, "quant: products on the eight block types against the CPU", test_quant_matmul);
    CU_add_test(s, "quant: get_rows on quantized tables", test_quant_get_rows);
    CU_add_test(s, "quant: q/k/v and gate/up/swiglu groups in one launch", test_quant_group);
    CU_add_test(s, "quant: layouts the products refuse", test_quant_matmul_refusals);
    CU_add_test(s, "quant: Llama q4_k, q8_0, q4_1: CUDA vs CPU, no eval allocations",
                test_quant_model);
    CU_add_test(s, "quant: speed of the products (printed)", test_quant_speed);
    fam_tests(s);
}

/* ---- suite cuda_host: what runs without a GPU ---- */

/* The quantized kernels' dequantization (cuda_quant.cu's deq8, compiled for the host) gives
 * gp_quant_dequantize_row's values bit for bit: rows of every type from real values, and rows of
 * random bytes (any scales: subnormal, huge, NaN and Inf binary16 included, any q); a bad e0 or
 * type is refused. */
static void test_quant_deq8_host(void)
{
    const int64_t K = 1536;
    for (int ti = 0; ti < 8; ti++) {
        gp_dtype t = quant_types[ti];
        size_t rb = gp_dtype_row_bytes(t, K);
        uint8_t *q = malloc(rb);
        float *f = malloc((size_t)K * sizeof *f), *d = malloc((size_t)K * sizeof *d);
        int bad = 0;
        for (int rep = 0; rep < 40; rep++) {
            if (rep % 2) {
                for (size_t i = 0; i < rb; i++)
                    q[i] = (uint8_t)gp_test_rand(&rng);
            } else {
                for (int64_t i = 0; i < K; i++)
                    f[i] = frand() * (float)(1 + rep);
                gp_quant_quantize_row(t, f, q, K);
            }
            gp_quant_dequantize_row(t, q, d, K);
            for (int e0 = 0; e0 < K; e0 += 8) {
                float v[8];
                CU_ASSERT_EQUAL_FATAL(gp_cuda_quant_deq8_host(t, q, e0, v), 0);
                bad += memcmp(v, d + e0, sizeof v) != 0;
            }
        }
        if (bad)
            fprintf(stderr, "\n  %s: %d groups of 8 differ from gp_quant_dequantize_row\n",
                    gp_dtype_name(t), bad);
        CU_ASSERT_EQUAL(bad, 0);
        float v[8];
        CU_ASSERT_EQUAL(gp_cuda_quant_deq8_host(t, q, 4, v), -1);
        free(q);
        free(f);
        free(d);
    }
    float v[8];
    unsigned char row[64] = {0};
    CU_ASSERT_EQUAL(gp_cuda_quant_deq8_host(GP_F16, row, 0, v), -1);
}

/* k_qmv's arithmetic (its step, compiled for the host): one step of every type (q6_k at each of
 * its eight shifts) from real values of several sizes, against the double sum of the dequantized
 * values, within 1e-6 of sum |x| |w| (its bytes placed under a float's exponent cost a few bits of
 * the f32 sums); a bad shift is refused. */
static void test_quant_step_host(void)
{
    float worst[8] = {0};
    for (int ti = 0; ti < 8; ti++) {
        gp_dtype t = quant_types[ti];
        size_t sb = gp_dtype_row_bytes(t, 256);
        uint8_t *q = malloc(sb);
        float f[256], d[256], x[256];
        for (int rep = 0; rep < 200; rep++) {
            for (int i = 0; i < 256; i++) {
                f[i] = frand() * (float)(1 + rep % 7) * (i % 37 == 0 ? 8.0f : 1.0f);
                x[i] = frand() * (rep % 3 ? 1.0f : 100.0f);
            }
            gp_quant_quantize_row(t, f, q, 256);
            gp_quant_dequantize_row(t, q, d, 256);
            double sum = 0, bound = 0;
            for (int i = 0; i < 256; i++) {
                sum += (double)x[i] * d[i];
                bound += fabs((double)x[i] * d[i]);
            }
            for (int sh = 0; sh < (t == GP_Q6_K ? 16 : 2); sh += 2) {
                float got = 0;
                CU_ASSERT_EQUAL_FATAL(gp_cuda_quant_step_host(t, q, sh, x, &got), 0);
                double e = fabs(got - sum) / (bound > 0 ? bound : 1);
                worst[ti] = e > worst[ti] || e != e ? (float)e : worst[ti];
            }
        }
        float o;
        CU_ASSERT_EQUAL(gp_cuda_quant_step_host(t, q, 1, x, &o), -1);
        if (!(worst[ti] <= 1e-6))
            fprintf(stderr, "\n  %s: k_qmv's step off by %.3g of sum |x||w|\n", gp_dtype_name(t),
                    worst[ti]);
        CU_ASSERT(worst[ti] <= 1e-6);
        free(q);
    }
    printf("\n  k_qmv step on the host, worst error / sum |x||w|:");
    for (int ti = 0; ti < 8; ti++)
        printf(" %s %.2g", gp_dtype_name(quant_types[ti]), worst[ti]);
    printf("\n");
    float x[256] = {0}, o;
    unsigned char b[256] = {0};
    CU_ASSERT_EQUAL(gp_cuda_quant_step_host(GP_F16, b, 0, x, &o), -1);
}

void gp_suite_cuda_host(void)
{
    CU_pSuite s = CU_add_suite("cuda_host", NULL, NULL);
    CU_add_test(s, "quant: the kernels' dequantization on the host, bit for bit",
                test_quant_deq8_host);
    CU_add_test(s, "quant: k_qmv's step on the host against the dequantized sums",
                test_quant_step_host);
}

/* ==== Model families (issue 37): llama3 rope scaling, windows, rings, soft-capping, weight
 * offsets, on CUDA against the CPU backend. Registered by fam_tests() from gp_suite_cuda. ==== */

/* A rope node's attributes: n rotated dims, theta; L > 0: Llama 3 scaling with
 * original_max_position_embeddings L, factor 8, low 1 and high 4 (the parity fixture's);
 * L GP_ROPE_LINEAR: linear scaling by 8 (Gemma 3's global layers). */
static gp_attrs fam_rope_attrs(int64_t n, double theta, int64_t L)
{
    gp_attrs a = {{0, n, L}, {theta, L ? 8.0 : 0.0, L > 0 ? 1.0 : 0.0, L > 0 ? 4.0 : 0.0}};
    return a;
}

/* rope with llama3 scaling, with linear scaling and without (a control) against the CPU: f32 and
 * f16 outputs, all dims rotated or 48 of 64, positions 0, 77 and 5000 (with L 32 every frequency
 * band of llama3's is met: kept, mixed, divided by the factor). */
static void test_fam_rope(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    int64_t sx[3] = {3, 4, 64}, sp[1] = {3};
    const int32_t ps[3] = {0, 77, 5000};
    for (int c = 0; c < 12; c++) {
        gp_dtype ot = c & 1 ? GP_F16 : GP_F32;
        int64_t n = c & 2 ? 48 : 64, L = c >= 8 ? GP_ROPE_LINEAR : c & 4 ? 32 : 0;
        tt x, pos, out;
        tt_new(&x, GP_F32, 3, sx, 1.0f);
        tt_new(&pos, GP_I32, 1, sp, 1.0f);
        tt_new(&out, ot, 3, sx, 1.0f);
        for (int t = 0; t < 3; t++)
            set_i32(&pos, t, ps[t]);
        gp_attrs a = fam_rope_attrs(n, 10000.0, L);
        tt *ins[2] = {&x, &pos};
        char name[64];
        snprintf(name, sizeof name, "rope %s n %d scaling %s", ot == GP_F16 ? "f16" : "f32",
                 (int)n, L > 0 ? "llama3" : L ? "linear" : "none");
        CHECK_ERR(name, run_op(GP_OP_ROPE, &a, &out, ins, 2, 0, &k), 1e-5);
        tt_free(&x);
        tt_free(&pos);
        tt_free(&out);
    }
    kctx_free(&k);
}

/* scale with a cap (softcap) and rms_norm with a weight offset against the CPU: rows that stay in
 * registers (300) and rows that loop (5000), f32 and f16 weights; an offset of 0 as a control. */
static void test_fam_scale_norm(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    int64_t sx[2] = {7, 300};
    tt x, out;
    tt_new(&x, GP_F32, 2, sx, 6.0f);
    tt_new(&out, GP_F32, 2, sx, 1.0f);
    tt *ins[1] = {&x};
    gp_attrs sc = {{0}, {1.7, 2.5}}, plain = {{0}, {1.7, 0}};
    CHECK_ERR("scale softcap", run_op(GP_OP_SCALE, &sc, &out, ins, 1, 0, &k), 1e-5);
    CHECK_ERR("scale", run_op(GP_OP_SCALE, &plain, &out, ins, 1, 0, &k), 1e-6);
    /* capped values stay within the cap */
    float *g = malloc(out.bytes);
    run_op(GP_OP_SCALE, &sc, &out, ins, 1, 0, &k);
    cudaMemcpy(g, out.d.data, out.bytes, cudaMemcpyDeviceToHost);
    int within = 1;
    for (int i = 0; i < 7 * 300; i++)
        within &= fabsf(g[i]) <= 2.5f;
    CU_ASSERT(within);
    free(g);
    tt_free(&x);
    tt_free(&out);
    for (int c = 0; c < 8; c++) {
        int64_t C = c & 1 ? 5000 : 300, sr[2] = {c & 1 ? 3 : 5, C}, sw[1] = {C};
        gp_dtype wt = c & 2 ? GP_F16 : GP_F32;
        double off = c & 4 ? 1.0 : 0.0;
        tt xr, w, o;
        tt_new(&xr, GP_F32, 2, sr, 3.0f);
        tt_new(&w, wt, 1, sw, 0.5f);
        tt_new(&o, GP_F32, 2, sr, 1.0f);
        gp_attrs na = {{0}, {1e-6, off}};
        tt *ni[2] = {&xr, &w};
        char name[64];
        snprintf(name, sizeof name, "rms_norm C %d w %s offset %g", (int)C,
                 wt == GP_F16 ? "f16" : "f32", off);
        CHECK_ERR(name, run_op(GP_OP_RMS_NORM, &na, &o, ni, 2, 0, &k), 1e-5);
        tt_free(&xr);
        tt_free(&w);
        tt_free(&o);
    }
    kctx_free(&k);
}

/* 1 when the device copy of t holds its host copy's bytes; says which tensor otherwise. */
static int fam_same(const tt *t, const char *what)
{
    int same = same_on_device(t);
    if (!same)
        fprintf(stderr, "\n  %s: the device's bytes differ from the CPU's\n", what);
    return same;
}

/* Ring stores (store ring=1: row pos % S) against the CPU, bit for bit: 7 rows into 5 (positions
 * 3..9 wrap, rows 3 and 4 written twice: the later wins), alone and as a pair in one launch
 * (gp_cuda_store2), and a plain store of the same positions writing nothing past S. */
static void test_fam_store_ring(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    int64_t sd[3] = {5, 2, 8}, sp[1] = {7}, ss[3] = {7, 2, 8};
    tt d0, d1, pos, s0, s1;
    tt_new(&d0, GP_F16, 3, sd, 1.0f);
    tt_new(&d1, GP_F32, 3, sd, 1.0f);
    tt_new(&pos, GP_I32, 1, sp, 1.0f);
    tt_new(&s0, GP_F32, 3, ss, 1.0f);
    tt_new(&s1, GP_F32, 3, ss, 1.0f);
    for (int t = 0; t < 7; t++)
        set_i32(&pos, t, 3 + t);
    gp_attrs ring = {{1}, {0}};
    gp_ktensor h0[3] = {d0.h, pos.h, s0.h}, h1[3] = {d1.h, pos.h, s1.h};
    gp_cu_tensor g0[3] = {d0.d, pos.d, s0.d}, g1[3] = {d1.d, pos.d, s1.d};
    gp_cpu_compute(GP_OP_STORE, &ring, &d0.h, h0, 3, NULL, 0, 0, 1);
    CU_ASSERT_EQUAL(gp_cuda_compute(&k.c, GP_OP_STORE, &ring, &d0.d, g0, 3, NULL, 0), 0);
    CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
    CU_ASSERT(fam_same(&d0, "ring store"));
    /* the pair: both stores again with new sources */
    for (size_t i = 0; i < s0.bytes / 4; i++) {
        ((float *)s0.h.data)[i] = frand();
        ((float *)s1.h.data)[i] = frand();
    }
    cudaMemcpy(s0.d.data, s0.h.data, s0.bytes, cudaMemcpyHostToDevice);
    cudaMemcpy(s1.d.data, s1.h.data, s1.bytes, cudaMemcpyHostToDevice);
    gp_cpu_compute(GP_OP_STORE, &ring, &d0.h, h0, 3, NULL, 0, 0, 1);
    gp_cpu_compute(GP_OP_STORE, &ring, &d1.h, h1, 3, NULL, 0, 0, 1);
    CU_ASSERT_EQUAL(gp_cuda_store2(&k.c, g0, g1, 1), 0);
    CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
    CU_ASSERT(fam_same(&d0, "ring store2 (k)"));
    CU_ASSERT(fam_same(&d1, "ring store2 (v)"));
    /* not a ring: positions 5.. are past the 5 rows and write nothing; 3 and 4 as on the CPU
     * for those positions */
    gp_attrs plain = {{0}, {0}};
    CU_ASSERT_EQUAL(gp_cuda_compute(&k.c, GP_OP_STORE, &plain, &d1.d, g1, 3, NULL, 0), 0);
    CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
    memcpy((char *)d1.h.data + 3 * 64, s1.h.data, 64);            /* position 3, t 0 */
    memcpy((char *)d1.h.data + 4 * 64, (char *)s1.h.data + 64, 64); /* position 4, t 1 */
    CU_ASSERT(fam_same(&d1, "plain store of positions past S"));
    tt_free(&d0);
    tt_free(&d1);
    tt_free(&pos);
    tt_free(&s0);
    tt_free(&s1);
    kctx_free(&k);
}

/* The cache rows no query of pos reads (window W, a ring of S rows or not) made NaN in both host
 * copies and on the device: reading one would poison the output. */
static void fam_poison_unread(tt *kk, tt *v, const tt *pos, int64_t T, int64_t S, int64_t W,
                              int ring)
{
    char *used = calloc((size_t)S, 1);
    for (int64_t t = 0; t < T; t++) {
        int32_t p;
        memcpy(&p, (const char *)pos->h.data + 4 * t, 4);
        int64_t lo = W > 0 && p - W + 1 > 0 ? p - W + 1 : 0;
        for (int64_t s = lo; s <= p; s++)
            used[ring ? s % S : s] = 1;
    }
    tt *c[2] = {kk, v};
    for (int i = 0; i < 2; i++) {
        size_t row = (size_t)(kk->h.ne[1] * kk->h.ne[2]) * gp_dtype_size(c[i]->h.dtype);
        for (int64_t s = 0; s < S; s++)
            if (!used[s])
                memset((char *)c[i]->h.data + (size_t)s * row, 0x7f, row); /* NaN: f16, f32 */
        cudaMemcpy(c[i]->d.data, c[i]->h.data, c[i]->bytes, cudaMemcpyHostToDevice);
    }
    free(used);
}

/* Attention with a window, over rings and soft-capped (gp_cuda_compute) against the CPU: decode
 * (T 1, split over the rows), a few queries (T 9, split), a prompt (T 40: in tiles, on tensor
 * cores for f16 caches); grouped (8 heads on 2) and not, head dims
 * 16, 64, 128 and 256, f16 and f32 caches; rings of W + T - 1 rows with positions far past them
 * (wrapped several times); the rows no query may read NaN. Within 1e-5. */
static void test_fam_attention(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    /* T, H, G, D, W, ring, cap (x 10), first position */
    const int64_t cases[][8] = {
        {1, 8, 2, 64, 5, 0, 0, 30},    {1, 8, 2, 128, 5, 1, 0, 41},  {1, 4, 4, 256, 7, 1, 40, 100},
        {1, 8, 2, 64, 0, 0, 40, 50},   {9, 8, 2, 64, 5, 1, 0, 30},   {9, 4, 2, 16, 4, 0, 30, 20},
        {9, 4, 4, 256, 6, 1, 50, 77},  {40, 8, 2, 64, 5, 0, 0, 10},  {40, 4, 2, 128, 9, 1, 40, 70},
        {40, 2, 1, 64, 0, 0, 40, 0},   {3, 6, 3, 80, 2, 1, 20, 5},   {1, 2, 1, 64, 1, 1, 0, 9}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int64_t *c = cases[i];
        int64_t T = c[0], H = c[1], G = c[2], D = c[3], W = c[4], P0 = c[7];
        int ring = (int)c[5];
        int64_t S = ring ? W + T - 1 + 2 : 128; /* a ring: two rows more than needed */
        for (int dt = 0; dt < 2; dt++) {
            gp_dtype kvt = dt ? GP_F16 : GP_F32;
            int64_t sq[3] = {T, H, D}, skv[3] = {S, G, D}, sp[1] = {T};
            tt q, kk, v, pos, out;
            tt_new(&q, GP_F32, 3, sq, 1.0f);
            tt_new(&kk, kvt, 3, skv, 1.0f);
            tt_new(&v, kvt, 3, skv, 1.0f);
            tt_new(&pos, GP_I32, 1, sp, 1.0f);
            tt_new(&out, GP_F32, 3, sq, 1.0f);
            for (int64_t t = 0; t < T; t++)
                set_i32(&pos, t, (int32_t)(P0 + t));
            fam_poison_unread(&kk, &v, &pos, T, S, W, ring);
            tt *ins[4] = {&q, &kk, &v, &pos};
            gp_attrs at = {{W, ring}, {1.0 / sqrt((double)D), (double)c[6] / 10.0}};
            size_t ws = (size_t)16 * (size_t)(T < 16 ? T : 16) * (size_t)H * (size_t)(D + 2) * 4;
            for (int mode = 0; mode < 2; mode++) {
                k.c.att_combine = mode;
                k.c.pdl = k.c.kv_prefetch = mode;
                k.c.att_tiles = k.c.att_mma = 1;
                int64_t n0 = gp_cuda_attention_tiles_count(), m0 = gp_cuda_attention_mma_count();
                char name[128];
                snprintf(name, sizeof name,
                         "attention T %d H %d G %d D %d W %d ring %d (S %d) cap %g %s mode %d",
                         (int)T, (int)H, (int)G, (int)D, (int)W, ring, (int)S, at.f[1],
                         dt ? "f16" : "f32", mode);
                CHECK_ERR(name, run_op(GP_OP_ATTENTION, &at, &out, ins, 4, ws, &k), 1e-5);
                /* prompts in tiles (over a ring too): on tensor cores for f16 caches */
                int tiles = T > GP_WS_ATTN_SPLIT_MAX_T && D <= 128;
                int mma = tiles && dt && D % 8 == 0;
                CU_ASSERT_EQUAL(gp_cuda_attention_mma_count() - m0, mma);
                CU_ASSERT_EQUAL(gp_cuda_attention_tiles_count() - n0, tiles && !mma);
            }
            tt_free(&q);
            tt_free(&kk);
            tt_free(&v);
            tt_free(&pos);
            tt_free(&out);
        }
    }
    /* a ring needs a window of 1 to S rows */
    {
        int64_t sq[3] = {1, 2, 64}, skv[3] = {4, 2, 64}, sp[1] = {1};
        tt q, kk, v, pos, out;
        tt_new(&q, GP_F32, 3, sq, 1.0f);
        tt_new(&kk, GP_F32, 3, skv, 1.0f);
        tt_new(&v, GP_F32, 3, skv, 1.0f);
        tt_new(&pos, GP_I32, 1, sp, 1.0f);
        tt_new(&out, GP_F32, 3, sq, 1.0f);
        gp_cu_tensor in[4] = {q.d, kk.d, v.d, pos.d};
        gp_attrs bad = {{5, 1}, {0.125, 0}};
        CU_ASSERT_EQUAL(gp_cuda_compute(&k.c, GP_OP_ATTENTION, &bad, &out.d, in, 4, NULL, 0), -1);
        tt_free(&q);
        tt_free(&kk);
        tt_free(&v);
        tt_free(&pos);
        tt_free(&out);
    }
    k.c.att_tiles = k.c.att_mma = 0;
    kctx_free(&k);
}

/* One fused one-token attention (gp_cuda_attention_decode: ropes, ring or plain stores, the
 * attention) against the CPU's rope, store and attention nodes with the same attributes: the
 * caches bit for bit, the output within 1e-5. q, k and v column blocks of one f32 row. */
static void fam_decode_case(kctx *k, gp_dtype ct, int64_t H, int64_t G, int64_t D, int64_t S,
                            int32_t P, int64_t W, int ring, double cap, int64_t L, int variant)
{
    int64_t sw[2] = {1, (H + 2 * G) * D}, sc[3] = {S, G, D}, sq[3] = {1, H, D};
    int64_t sk[3] = {1, G, D}, sp[1] = {1};
    tt qkv, kc, vc, pos, qr, kr, out;
    tt_new(&qkv, GP_F32, 2, sw, 1.0f);
    tt_new(&kc, ct, 3, sc, 1.0f);
    tt_new(&vc, ct, 3, sc, 1.0f);
    tt_new(&pos, GP_I32, 1, sp, 1.0f);
    tt_new(&qr, GP_F32, 3, sq, 1.0f);
    tt_new(&kr, GP_F32, 3, sk, 1.0f);
    tt_new(&out, GP_F32, 3, sq, 1.0f);
    set_i32(&pos, 0, P);
    gp_ktensor hq, hk, hv;
    gp_cu_tensor dq, dk, dv;
    row_view(&qkv, 0, H, D, &hq, &dq);
    row_view(&qkv, H * D, G, D, &hk, &dk);
    row_view(&qkv, (H + G) * D, G, D, &hv, &dv);
    /* the CPU: ropes (all dims, llama3 scaling when L > 0), stores, attention */
    gp_attrs ra = fam_rope_attrs(D, 10000.0, L), st = {{ring}, {0}};
    gp_attrs aa = {{W, ring}, {1.0 / sqrt((double)D), cap}};
    gp_ktensor r0[2] = {hq, pos.h}, r1[2] = {hk, pos.h};
    gp_cpu_compute(GP_OP_ROPE, &ra, &qr.h, r0, 2, NULL, 0, 0, 1);
    gp_cpu_compute(GP_OP_ROPE, &ra, &kr.h, r1, 2, NULL, 0, 0, 1);
    gp_ktensor s0[3] = {kc.h, pos.h, kr.h}, s1[3] = {vc.h, pos.h, hv};
    gp_cpu_compute(GP_OP_STORE, &st, &kc.h, s0, 3, NULL, 0, 0, 1);
    gp_cpu_compute(GP_OP_STORE, &st, &vc.h, s1, 3, NULL, 0, 0, 1);
    gp_ktensor ain[4] = {qr.h, kc.h, vc.h, pos.h};
    size_t wsz = gp_cpu_workspace_bytes(GP_OP_ATTENTION, &out.h, ain, 4, 1);
    void *hws = malloc(wsz);
    gp_cpu_compute(GP_OP_ATTENTION, &aa, &out.h, ain, 4, hws, wsz, 0, 1);
    free(hws);
    gp_cu_rope rope = gp_cuda_rope_of(&ra, GP_F32);
    gp_cu_decode_att a = {.q = dq, .k = dk, .v = dv, .k_cache = kc.d, .v_cache = vc.d,
                          .pos = pos.d, .rope_q = rope, .rope_k = rope, .scale = aa.f[0],
                          .window = W, .ring = ring, .softcap = (float)cap};
    /* variants: pos read early or not, combine in the last block or a cluster, angles from a
     * table made before the launch (every third) */
    a.pos_const = variant & 1;
    k->c.pdl = k->c.kv_prefetch = variant & 1;
    k->c.kv_regs = 1;
    k->c.att_combine = 1;
    int cl = variant & 2 ? 16 : 0;
    k->c.att_cluster = cl && gp_cuda_attention_cluster_ok(cl) ? cl : 0;
    k->c.att_head = 1; /* declined: a window, a ring or a cap */
    float *tabs = NULL;
    if (variant % 3 == 2) {
        CU_ASSERT_EQUAL(cudaMalloc((void **)&tabs, sizeof(float) * D), cudaSuccess);
        gp_cu_rope_tab t = {rope, pos.d, tabs};
        CU_ASSERT_EQUAL(gp_cuda_rope_tables(&k->c, &t, 1), 0);
        a.tab_q = a.tab_k = tabs;
    }
    size_t dws = (size_t)GP_WS_ATTN_SPLITS * H * (D + 2) * 4;
    void *ws = NULL;
    cudaMalloc(&ws, dws);
    cudaMemset(out.d.data, 0xff, out.bytes);
    int64_t n0 = gp_cuda_attention_decode_count(), h0 = gp_cuda_attention_head_count();
    CU_ASSERT_EQUAL(gp_cuda_attention_decode_ok(&a, &out.d), 1);
    int r = gp_cuda_attention_decode(&k->c, &a, &out.d, ws, dws);
    if (r)
        fprintf(stderr, "\n  attention_decode: %s\n", k->c.err);
    CU_ASSERT_EQUAL(r, 0);
    CU_ASSERT_EQUAL(cudaDeviceSynchronize(), cudaSuccess);
    CU_ASSERT_EQUAL(gp_cuda_attention_decode_count(), n0 + 1);
    CU_ASSERT_EQUAL(gp_cuda_attention_head_count(), h0); /* D > 64 or a mask: never atthead */
    char name[160];
    snprintf(name, sizeof name,
             "fused decode %s H %d G %d D %d S %d pos %d W %d ring %d cap %g scaling %d var %d",
             ct == GP_F16 ? "f16" : "f32", (int)H, (int)G, (int)D, (int)S, (int)P, (int)W, ring,
             cap, (int)L, variant);
    CU_ASSERT(fam_same(&kc, name) && fam_same(&vc, name));
    gp_ktensor g = out.h;
    g.data = malloc(out.bytes);
    cudaMemcpy(g.data, out.d.data, out.bytes, cudaMemcpyDeviceToHost);
    CHECK_ERR(name, rel_err(&g, &out.h), 1e-5);
    free(g.data);
    cudaFree(ws);
    cudaFree(tabs);
    tt *all[7] = {&qkv, &kc, &vc, &pos, &qr, &kr, &out};
    for (int i = 0; i < 7; i++)
        tt_free(all[i]);
}

/* The fused one-token attention with a window, over a ring (positions before, at and far past
 * the ring's rows), soft-capped, with llama3- and linear-scaled ropes inside: grouped and not,
 * head dims 64, 128 and 256, f32 and f16 caches. */
static void test_fam_decode(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    const int32_t ring_pos[5] = {3, 7, 8, 21, 1000};
    int var = 0;
    for (int dt = 0; dt < 2; dt++) {
        gp_dtype ct = dt ? GP_F16 : GP_F32;
        for (int pi = 0; pi < 5; pi++, var++) /* a ring of 8 rows, window 6 */
            fam_decode_case(&k, ct, 8, 2, 64, 8, ring_pos[pi], 6, 1, 0.0, 0, var);
        fam_decode_case(&k, ct, 4, 4, 128, 9, 50, 9, 1, 30.0, 32, var++);
        fam_decode_case(&k, ct, 8, 4, 256, 200, 150, 1024, 0, 50.0, 0, var++); /* Gemma-like */
        fam_decode_case(&k, ct, 8, 4, 256, 200, 150, 7, 0, 0.0, 0, var++);
        fam_decode_case(&k, ct, 8, 2, 128, 300, 299, 0, 0, 0.0, 32, var++);    /* llama3 */
        fam_decode_case(&k, ct, 8, 2, 64, 300, 0, 5, 0, 4.0, 32, var++);
        fam_decode_case(&k, ct, 8, 4, 256, 80, 77, 0, 0, 0.0, GP_ROPE_LINEAR, var++); /* linear */
        fam_decode_case(&k, ct, 8, 4, 256, 12, 77, 4, 1, 0.0, GP_ROPE_LINEAR, var++);
    }
    kctx_free(&k);
}

/*
 * Whole models of each family with random weights, sized by their parity fixtures' configs, CPU
 * against CUDA: a 9-token prompt, 31 one-token evals (positions past the windows and around the
 * rings several times), then 5 tokens at once (a prompt over a wrapped ring); each eval's logits
 * within tol; no allocation during evals; the one-token evals' attentions fused (attnfuse).
 */
static void fam_model(const char *family, const char *wtype, const char *n_batch, double tol,
                      int fused)
{
    char config[1024], example[64], fixture[64], dw[32], dk[32], dn[32];
    snprintf(example, sizeof example, "examples/%s.gplan", family);
    snprintf(fixture, sizeof fixture, "tests/parity/%s/config.json", family);
    snprintf(config, sizeof config, "%s", gp_test_path(fixture));
    snprintf(dw, sizeof dw, "wtype=%s", wtype);
    snprintf(dk, sizeof dk, "kv_type=%s", wtype);
    snprintf(dn, sizeof dn, "n_batch=%s", n_batch);
    const char *defs[3] = {dw, dk, dn};
    gp_test_model_opts mo = {defs, 3, config, 1, 23};
    gp_model *m = gp_test_model(example, &mo, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char err[1024];
    gp_session_opts oc = {"cpu", 1, 0}, og = {"cuda", 1, 0};
    gp_session *sc = gp_session_new(m, &oc, err, sizeof err);
    int64_t d0 = gp_cuda_attention_decode_count(); /* graphs are captured at creation */
    gp_session *sg = gp_session_new(m, &og, err, sizeof err);
    if (!sg)
        fprintf(stderr, "\n  %s: cuda session: %s\n", example, err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sc);
    CU_ASSERT_PTR_NOT_NULL_FATAL(sg);
    gp_model_info info;
    gp_model_get_info(m, &info);
    int64_t V = info.vocab;
    float *lc = malloc(sizeof(float) * 9 * (size_t)V), *lg = malloc(sizeof(float) * 9 * (size_t)V);
    int at = 0;
    for (int e = 0; e < 33; e++) {
        int n = e == 0 ? 9 : e == 32 ? 5 : 1;
        CU_ASSERT_EQUAL_FATAL(step(sc, n, at, lc, V), 0);
        CU_ASSERT_EQUAL_FATAL(step(sg, n, at, lg, V), 0);
        double r = max_rel(lg, lc, (size_t)n * (size_t)V);
        if (!(r <= tol))
            fprintf(stderr, "\n  %s %s n_batch %s: eval %d (%d tokens at %d): error %.3g > %.3g\n",
                    example, wtype, n_batch, e, n, at, r, tol);
        CU_ASSERT(r <= tol);
        at += n;
    }
    CU_ASSERT_EQUAL(gp_session_backend_allocs(sg), 0);
    /* fused: both layers' one-token attentions ran fused (captured in a graph, or eager) */
    int64_t nd = gp_cuda_attention_decode_count() - d0;
    if (fused && nd < 2)
        fprintf(stderr, "\n  %s: %lld fused one-token attentions\n", example, (long long)nd);
    CU_ASSERT(!fused || nd >= 2);
    free(lc);
    free(lg);
    gp_session_free(sc);
    gp_session_free(sg);
    gp_model_free(m);
}

static void test_fam_models(void)
{
    /* llama3: rope scaling; mistral: a window (no ring at n_batch 64), a ring of 13 rows
     * (n_batch 9); phi3: a ring of 14 rows; gemma2: (1 + w) norms before the products and
     * alone, soft-capped scores and logits, a window on layer 0 */
    fam_model("llama3", "f32", "64", 1e-4, 1);
    fam_model("mistral", "f32", "64", 1e-4, 1);
    fam_model("mistral", "f32", "9", 1e-4, 1);
    fam_model("phi3", "f32", "9", 1e-4, 0);
    fam_model("gemma2", "f32", "9", 1e-4, 1);
    fam_model("gemma3", "f32", "9", 1e-4, 1); /* q/k norms, linear rope, rings of 12 rows */
    /* f16 weights and caches */
    fam_model("llama3", "f16", "9", 5e-3, 1);
    fam_model("mistral", "f16", "9", 5e-3, 1);
    fam_model("gemma2", "f16", "9", 5e-3, 1);
    fam_model("gemma3", "f16", "9", 5e-3, 1);
}

static void fam_tests(CU_pSuite s)
{
    CU_add_test(s, "families: rope with llama3 and linear scaling", test_fam_rope);
    CU_add_test(s, "families: scale's softcap, rms_norm's weight offset", test_fam_scale_norm);
    CU_add_test(s, "families: ring stores, alone and paired", test_fam_store_ring);
    CU_add_test(s, "families: attention with windows, rings, soft-capping", test_fam_attention);
    CU_add_test(s, "families: one-token attention with them, fused", test_fam_decode);
    CU_add_test(s, "families: llama3, mistral, phi3, gemma2, gemma3 CPU vs CUDA", test_fam_models);
}
