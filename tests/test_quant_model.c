/* Quantized weights through the whole stack: the Llama graph compiled with -D wtype=TYPE, random
 * weights quantized at load, against the same graph in f32 bound to those weights dequantized
 * (written to a safetensors file). The products compute in f32 from dequantized blocks, so the two
 * differ by summation order only. Also: the same bits for 1 and 2 threads and the reference
 * executor, and a float checkpoint quantized at load equal to random weights quantized. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>

#include "runtime/lora.h"
#include "plan/plan.h"
#include "cpu/quant.h"
#include "weights/safetensors.h"
#include "tests/testmodel.h"
#include "tests/testutil.h"

#define VOCAB 96

static gp_model *model_of(const char *wtype, uint64_t seed)
{
    return gp_test_llama_small(32, 8, wtype, seed);
}

/* Logits of a 5-token prompt then 3 single tokens: out [8, VOCAB]. */
static int run(const gp_model *m, const char *backend, int threads, float *out)
{
    char err[512];
    gp_session_opts o = {backend, threads, 0};
    gp_session *s = gp_session_new(m, &o, err, sizeof err);
    if (!s) {
        fprintf(stderr, "session: %s\n", err);
        return -1;
    }
    float rows[5 * VOCAB];
    int rc = gp_test_eval_tokens(s, 5, 0, 7, rows, VOCAB);
    if (!rc)
        memcpy(out, rows + 4 * VOCAB, VOCAB * sizeof *out);
    for (int i = 0; i < 3 && !rc; i++)
        rc = gp_test_eval_tokens(s, 1, 5 + i, 7, out + (1 + i) * VOCAB, VOCAB);
    gp_session_free(s);
    return rc;
}

static const char *const types[] = {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q5_k", "q6_k"};

static void test_against_dequantized(void)
{
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        gp_model *q, *f;
        const char *path = gp_test_llama_dequantized(32, 8, types[k], 11, &q, &f);
        CU_ASSERT_PTR_NOT_NULL_FATAL(path);
        float lq[4 * VOCAB], lf[4 * VOCAB], l1[4 * VOCAB], lr[4 * VOCAB];
        CU_ASSERT_EQUAL_FATAL(run(q, "cpu", 2, lq), 0);
        CU_ASSERT_EQUAL_FATAL(run(f, "cpu", 2, lf), 0);
        CU_ASSERT_EQUAL_FATAL(run(q, "cpu", 1, l1), 0);
        CU_ASSERT_EQUAL_FATAL(run(q, "reference", 1, lr), 0);
        double err_max = 0, scale = 0;
        for (int i = 0; i < 4 * VOCAB; i++) { /* not fmax: GCC 12 for aarch64 fails on two
                                                 * fmax reductions (internal compiler error) */
            double e = fabs((double)lq[i] - lf[i]), a = fabs((double)lf[i]);
            err_max = e > err_max ? e : err_max;
            scale = a > scale ? a : scale;
        }
        /* f32 sums in another order over K = 256..512, 2 layers: a few ulps of the largest terms. */
        if (!(err_max <= 1e-4 * scale))
            fprintf(stderr, "%s: logits differ from the dequantized f32 model by %.3e (scale %.3e)\n",
                    types[k], err_max, scale);
        CU_ASSERT(err_max <= 1e-4 * scale);
        CU_ASSERT(scale > 0);
        CU_ASSERT_EQUAL(memcmp(lq, l1, sizeof lq), 0); /* 1 and 2 threads */
        CU_ASSERT_EQUAL(memcmp(lq, lr, sizeof lq), 0); /* planned and reference */
        remove(path);
        gp_model_free(q);
        gp_model_free(f);
    }
}

/* A float checkpoint bound to a plan declaring q8_0 is quantized at load: the same bytes as the
 * random weights quantized from the same f32 values. */
static void test_quantize_at_load(void)
{
    gp_model *f = model_of("f32", 5), *q = model_of("q8_0", 5), *qb = model_of("q8_0", 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_PTR_NOT_NULL_FATAL(q);
    CU_ASSERT_PTR_NOT_NULL_FATAL(qb);
    const char *path = gp_test_write_dequantized(f); /* f32 as it is */
    CU_ASSERT_PTR_NOT_NULL_FATAL(path);
    char err[2048];
    CU_ASSERT_EQUAL_FATAL(gp_model_bind_weights(qb, path, err, sizeof err), 0);
    const gp_plan *p = gp_model_plan(q);
    int quantized = 0;
    for (int i = 0; i < p->n_tensors; i++) {
        const gp_plan_tensor *t = &p->tensors[i];
        if (t->kind != GP_TENSOR_WEIGHT)
            continue;
        quantized += gp_dtype_is_quant(t->dtype);
        CU_ASSERT_EQUAL(memcmp(gp_model_weight_data(q, i), gp_model_weight_data(qb, i),
                               (size_t)t->size), 0);
    }
    CU_ASSERT(quantized >= 8); /* embed and the products; norms stay f32 */
    remove(path);
    gp_model_free(f);
    gp_model_free(q);
    gp_model_free(qb);
}

void gp_suite_quant_model(void)
{
    static const gp_test_case tests[] = {
        {"quantized llama against its weights dequantized in f32", test_against_dequantized},
        {"a float checkpoint quantized at load", test_quantize_at_load},
    };
    gp_test_add_suite("quant_model", NULL, NULL, tests, GP_TEST_COUNT(tests));
}
