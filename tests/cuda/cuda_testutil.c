/* Helpers shared by the CUDA test files (see cuda_testutil.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>
#include <cuda_runtime_api.h>

#include "cuda/cuda_kernels.h"
#include "cpu/cpu_kernels.h"
#include "ir/f16.h"
#include "gplan/gplan.h"
#include "tests/cuda/cuda_testutil.h"
#include "tests/testmodel.h"
#include "tests/testutil.h"

uint64_t rng = 0x9e3779b97f4a7c15ull;

float frand(void)
{
    float v;
    gp_test_uniform(&v, 1, -1.0f, 1.0f, &rng);
    return v;
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

void tt_new(tt *t, gp_dtype dt, int ndim, const int64_t *ne, float scale)
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

void tt_free(tt *t)
{
    free(t->h.data);
    cudaFree(t->d.data);
}

void tt_download(tt *t)
{
    CU_ASSERT_EQUAL(cudaMemcpy(t->h.data, t->d.data, t->bytes, cudaMemcpyDeviceToHost), cudaSuccess);
}

void tt_view(tt *t, int ndim, const int64_t *ne, const int64_t *nb)
{
    t->h.ndim = t->d.ndim = ndim;
    for (int d = 0; d < ndim; d++) {
        t->h.ne[d] = t->d.ne[d] = ne[d];
        t->h.nb[d] = t->d.nb[d] = nb[d];
        t->d.sym[d] = -1;
    }
}

void kctx_new(kctx *k, const int64_t *syms_exact, int64_t *syms_launch, int n_syms)
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

void kctx_free(kctx *k)
{
    cublasDestroy(k->c.blas);
    cudaFree(k->counters);
    cudaFree(k->d_syms);
}

double rel_err(const gp_ktensor *gpu, const gp_ktensor *cpu)
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

double device_err(const tt *t)
{
    gp_ktensor g = t->h;
    g.data = malloc(t->bytes);
    cudaMemcpy(g.data, t->d.data, t->bytes, cudaMemcpyDeviceToHost);
    double e = rel_err(&g, &t->h);
    free(g.data);
    return e;
}

int device_untouched(const tt *t)
{
    float *g = malloc(t->bytes);
    cudaMemcpy(g, t->d.data, t->bytes, cudaMemcpyDeviceToHost);
    int untouched = 1;
    for (size_t j = 0; j < t->bytes / sizeof(float); j++)
        untouched &= isnan(g[j]);
    free(g);
    return untouched;
}

double run_op(gp_op op, const gp_attrs *a, tt *out, tt **ins, int n_in, size_t ws_gpu,
                     kctx *k)
{
    gp_ktensor hin[GP_MAX_INPUTS];
    gp_cu_tensor din[GP_MAX_INPUTS];
    for (int i = 0; i < n_in; i++) {
        hin[i] = ins[i]->h;
        din[i] = ins[i]->d;
    }
    size_t wsz = gp_cpu_workspace_bytes(op, a, &out->h, hin, n_in, 1);
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

void set_i32(tt *t, int64_t i, int32_t v)
{
    memcpy((char *)t->h.data + 4 * i, &v, 4);
    cudaMemcpy((char *)t->d.data + 4 * i, &v, 4, cudaMemcpyHostToDevice);
}

void row_view(const tt *t, int64_t off, int64_t n, int64_t D, gp_ktensor *h, gp_cu_tensor *d)
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

int same_on_device(const tt *t)
{
    void *g = malloc(t->bytes);
    cudaMemcpy(g, t->d.data, t->bytes, cudaMemcpyDeviceToHost);
    int same = !memcmp(g, t->h.data, t->bytes);
    free(g);
    return same;
}

int step(gp_session *s, int n, int start, float *out, int64_t vocab)
{
    return gp_test_eval_tokens(s, n, start, 37, out, vocab);
}

gp_session *session_with(gp_model *m, const char *var, const char *val)
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
