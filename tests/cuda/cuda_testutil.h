/* Helpers shared by the CUDA test files (tests/cuda/): tensors with a host and a device copy, a
 * kernel context, the normalized error of a device result against the CPU's, model sessions. */
#ifndef GP_TESTS_CUDA_TESTUTIL_H
#define GP_TESTS_CUDA_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <CUnit/CUnit.h>

#include "cuda/cuda_kernels.h"
#include "cpu/cpu_kernels.h"
#include "gplan/gplan.h"

/* A tensor with a host and a device copy. */
typedef struct {
    gp_ktensor h;    /* host copy (contiguous unless a test changes strides) */
    gp_cu_tensor d;  /* the device copy with the same layout */
    size_t bytes;    /* storage bytes */
} tt;

/* The generator every test draws from, in registration order (one state: the tests keep the
 * data they were written with). */
extern uint64_t rng;

/* A value in [-1, 1) drawn from rng. */
float frand(void);

/* A contiguous tensor of random values in [-scale, scale) (i32: integers in [0, scale)), copied to
 * the device. */
void tt_new(tt *t, gp_dtype dt, int ndim, const int64_t *ne, float scale);

/* Frees both copies. */
void tt_free(tt *t);

/* The device copy back into the host copy. */
void tt_download(tt *t);

/* Sets the same strides (bytes) on both copies: a view of the same storage. */
void tt_view(tt *t, int ndim, const int64_t *ne, const int64_t *nb);

/* A kernel context for tests: a stream, cuBLAS, split-K counters, optional sizes. */
typedef struct {
    gp_cu_ctx c;
    unsigned *counters;
    int64_t *d_syms;
} kctx;

/* n_syms sizes: syms_exact copied to the device, syms_launch the host copy launches read (none: 0). */
void kctx_new(kctx *k, const int64_t *syms_exact, int64_t *syms_launch, int n_syms);
void kctx_free(kctx *k);

/* ‖gpu − cpu‖ / ‖cpu‖ over the elements of out's shape; NaN (an unwritten element: outputs are
 * poisoned) gives INFINITY. gp_test_rel_err's GP_TEST_L2 for strided tensors of any dtype (an
 * all-zero cpu gives ‖gpu‖ here). */
double rel_err(const gp_ktensor *gpu, const gp_ktensor *cpu);

/* The normalized error of t's device copy against its host copy (the CPU's result). */
double device_err(const tt *t);

/* 1 when every float of t's f32 device copy is still NaN: poisoned with 0xff bytes before, then
 * written by nothing. */
int device_untouched(const tt *t);

/* Runs op on the CPU (into out's host copy) and on the GPU (into a poisoned copy of out), and
 * returns the normalized error. ins: n_in test tensors; ws_gpu: a device workspace (or 0 bytes). */
double run_op(gp_op op, const gp_attrs *a, tt *out, tt **ins, int n_in, size_t ws_gpu, kctx *k);

/* Asserts e <= tol, printing name and e when it is not. */
#define CHECK_ERR(name, e, tol)                                                   \
    do {                                                                          \
        double e_ = (e);                                                          \
        if (!(e_ <= (tol)))                                                       \
            fprintf(stderr, "\n  %s: error %.3g > %.3g\n", name, e_, (double)(tol)); \
        CU_ASSERT(e_ <= (tol));                                                   \
    } while (0)

/* Sets t's i32 element i to v on both copies. */
void set_i32(tt *t, int64_t i, int32_t v);

/* A [1, n, D] view at element `off` of a one-row tensor (a column block of GPT-2's qkv). */
void row_view(const tt *t, int64_t off, int64_t n, int64_t D, gp_ktensor *h, gp_cu_tensor *d);

/* 1 when the device copy of t holds the same bytes as its host copy. */
int same_on_device(const tt *t);

/* Evaluates n tokens at positions start.. on s; the logits [n, vocab] into out. */
int step(gp_session *s, int n, int start, float *out, int64_t vocab);

/* A CUDA session created with environment variable var set to val (var NULL: as it is). */
gp_session *session_with(gp_model *m, const char *var, const char *val);

#endif
