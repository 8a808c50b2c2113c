/* Tests of tensor parallelism (suite "tp"): cutting split weights (runtime/split.c), the host
 * all-reduce (runtime/comm.c), and whole models planned for N devices on the CPU: equal to one
 * device, the planned backend equal to the reference executor bit for bit, and no allocation
 * during evals on any thread. */
#include <CUnit/CUnit.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsl/dsl.h"
#include "planner/planner.h"
#include "runtime/comm.h"
#include "ir/f16.h"
#include "gplan/gplan.h"
#include "runtime/split.h"
#include "tests/alloc/alloc_count.h"
#include "tests/testmodel.h"
#include "tests/testutil.h"

/* ---- cutting ---- */

/* A 2-D weight's plan record as the device sees it: dims [d0, d1] of its share, cut as sp. */
static gp_plan_tensor split_weight(gp_dtype dt, int64_t d0, int64_t d1, gp_split sp)
{
    gp_plan_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dt;
    t.ndim = 2;
    t.dims[0] = d0;
    t.dims[1] = d1;
    t.split = sp;
    return t;
}

/* A [2, 12] f32 weight split on dim 1 as 2 groups of 3 units of 2 columns over 2 devices: each
 * device gets cdiv(3, 2) = 2 units per group, device 1's second unit of each group is padding. */
static void test_split_copy(void)
{
    gp_plan_tensor t = split_weight(GP_F32, 2, 8 /* 2 groups x 2 units x 2 */,
                                    (gp_split){2, 1, 2, 12});
    CU_ASSERT_EQUAL(gp_split_full_numel(&t), 24);
    float full[24], got[16];
    for (int i = 0; i < 24; i++)
        full[i] = (float)(i + 1);
    for (int r = 0; r < 2; r++) {
        memset(got, 0xff, sizeof got);
        gp_split_copy(&t, r, full, got);
        for (int row = 0; row < 2; row++) {
            for (int g = 0; g < 2; g++) {
                for (int u = 0; u < 2; u++) {
                    int unit = r * 2 + u; /* of the group's 3 */
                    for (int e = 0; e < 2; e++) {
                        float want = unit < 3 ? full[row * 12 + g * 6 + unit * 2 + e] : 0.0f;
                        CU_ASSERT_EQUAL(got[row * 8 + g * 4 + u * 2 + e], want);
                    }
                }
            }
        }
    }
}

/* Dim 0 of a [6, 3] f16 weight in units of 1 over 3 devices: rows 2r and 2r + 1. */
static void test_split_rows(void)
{
    gp_plan_tensor t = split_weight(GP_F16, 2, 3, (gp_split){1, 0, 1, 6});
    uint16_t full[18], got[6];
    for (int i = 0; i < 18; i++)
        full[i] = (uint16_t)(100 + i);
    for (int r = 0; r < 3; r++) {
        gp_split_copy(&t, r, full, got);
        CU_ASSERT_EQUAL(memcmp(got, full + 6 * r, sizeof got), 0);
    }
}

/* ---- the host all-reduce ---- */

#define RANKS 3
#define COUNT 1000 /* not a multiple of RANKS: uneven chunks */

typedef struct {
    gp_host_comm *c;
    int rank;
    gp_dtype dt;
    float f[COUNT];
    uint16_t h[COUNT];
    int rc;
} reduce_arg;

static void *reduce_thread(void *v)
{
    reduce_arg *a = v;
    for (int round = 0; round < 3 && !a->rc; round++) /* the communicator is reusable */
        a->rc = gp_host_comm_all_reduce(a->c, a->rank, a->dt == GP_F32 ? (void *)a->f
                                                                       : (void *)a->h,
                                        COUNT, a->dt);
    return NULL;
}

static void check_all_reduce(gp_dtype dt)
{
    gp_host_comm *c = gp_host_comm_new(RANKS);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    static reduce_arg a[RANKS];
    pthread_t th[RANKS];
    for (int r = 0; r < RANKS; r++) {
        a[r].c = c;
        a[r].rank = r;
        a[r].dt = dt;
        a[r].rc = 0;
        for (int i = 0; i < COUNT; i++) {
            float v = (float)((i % 7) - 3) * 0.25f + (float)r; /* exact in f16 */
            a[r].f[i] = v;
            a[r].h[i] = gp_f32_to_f16(v);
        }
    }
    for (int r = 0; r < RANKS; r++)
        CU_ASSERT_EQUAL_FATAL(pthread_create(&th[r], NULL, reduce_thread, &a[r]), 0);
    for (int r = 0; r < RANKS; r++)
        pthread_join(th[r], NULL);
    /* Three rounds: each sums the previous round's sums, so x -> 3x + ... ; compute directly. */
    for (int r = 0; r < RANKS; r++) {
        CU_ASSERT_EQUAL(a[r].rc, 0);
        int bad = 0;
        for (int i = 0; i < COUNT; i++) {
            float base = (float)((i % 7) - 3) * 0.25f;
            float s = 0; /* round 1: sum over ranks of base + r */
            for (int q = 0; q < RANKS; q++)
                s += base + (float)q;
            s = s * RANKS * RANKS; /* rounds 2 and 3 multiply by RANKS */
            float got = dt == GP_F32 ? a[r].f[i] : gp_f16_to_f32(a[r].h[i]);
            bad += got != s;
        }
        CU_ASSERT_EQUAL(bad, 0);
    }
    gp_host_comm_free(c);
}

static void test_all_reduce_f32(void) { check_all_reduce(GP_F32); }
static void test_all_reduce_f16(void) { check_all_reduce(GP_F16); }

/* An aborted communicator releases a rank waiting for the others and fails later calls. */
static void *abort_later(void *v)
{
    gp_host_comm_abort(v);
    return NULL;
}

static void test_all_reduce_abort(void)
{
    gp_host_comm *c = gp_host_comm_new(2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    float x[4] = {1, 2, 3, 4};
    pthread_t th;
    CU_ASSERT_EQUAL_FATAL(pthread_create(&th, NULL, abort_later, c), 0);
    CU_ASSERT_EQUAL(gp_host_comm_all_reduce(c, 0, x, 4, GP_F32), -1); /* rank 1 never comes */
    pthread_join(th, NULL);
    CU_ASSERT_EQUAL(gp_host_comm_all_reduce(c, 0, x, 4, GP_F32), -1);
    gp_host_comm_reset(c);
    gp_host_comm *one = gp_host_comm_new(1);
    CU_ASSERT_EQUAL(gp_host_comm_all_reduce(one, 0, x, 4, GP_F32), 0);
    CU_ASSERT_EQUAL(x[3], 4.0f);
    CU_ASSERT_PTR_NULL(gp_host_comm_new(0));
    CU_ASSERT_PTR_NULL(gp_host_comm_new(65));
    gp_host_comm_free(one);
    gp_host_comm_free(c);
}

/* ---- whole models ---- */

static gp_model *compile_model(const char *example, const char **defines, int n_defines,
                               int devices)
{
    gp_test_model_opts o = {defines, n_defines, NULL, devices, 11};
    return gp_test_model(example, &o, NULL);
}

/* A prompt of 6 tokens then 4 one-token evals; returns every logits row (malloc'd) or NULL. */
static float *run(const gp_model *m, const char *backend, int threads, int64_t vocab)
{
    char err[1024];
    gp_session_opts o = {backend, threads, 0};
    gp_session *s = gp_session_new(m, &o, err, sizeof err);
    if (!s) {
        fprintf(stderr, "%s\n", err);
        return NULL;
    }
    float *out = malloc((size_t)(10 * vocab) * sizeof *out);
    int32_t ids[6] = {3, 141, 59, 26, 5, 35}, pos[6] = {0, 1, 2, 3, 4, 5};
    int rows = 0, ok = out != NULL;
    for (int step = 0; step < 5 && ok; step++) {
        int n = step == 0 ? 6 : 1;
        if (step > 0) {
            ids[0] = (int32_t)((ids[0] * 31 + 7) % vocab);
            pos[0] = 5 + step;
        }
        const float *l = NULL;
        ok = !gp_session_set_tokens(s, ids, pos, n) && !gp_session_set_rows(s, NULL, n) &&
             !gp_session_eval(s) &&
             (l = gp_session_output(s, "logits", NULL)) != NULL;
        if (ok)
            memcpy(out + rows * vocab, l, (size_t)(n * vocab) * sizeof *l);
        else
            fprintf(stderr, "eval: %s\n", gp_session_error(s));
        rows += n;
    }
    gp_session_free(s);
    if (!ok) {
        free(out);
        return NULL;
    }
    return out;
}

/* N devices on the CPU equal one device (within f32 rounding: the sums are split), and the
 * planned backend equals the reference executor with the same N bit for bit. */
static void check_devices(const char *example, const char **defs, int n_defs, const int *devs,
                          int n_devs)
{
    gp_model *one = compile_model(example, defs, n_defs, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(one);
    gp_model_info info;
    gp_model_get_info(one, &info);
    size_t n = (size_t)(10 * info.vocab);
    float *want = run(one, "cpu", 2, info.vocab);
    CU_ASSERT_PTR_NOT_NULL_FATAL(want);
    for (int k = 0; k < n_devs; k++) {
        gp_model *m = compile_model(example, defs, n_defs, devs[k]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        float *got = run(m, "cpu", 1 + k % 2, info.vocab);
        float *ref = run(m, "reference", 1, info.vocab);
        CU_ASSERT_PTR_NOT_NULL(got);
        CU_ASSERT_PTR_NOT_NULL(ref);
        if (got && ref) {
            double e = gp_test_rel_err(got, want, n, GP_TEST_MAX);
            if (!(e <= 1e-5))
                fprintf(stderr, "%s, %d devices: max rel err %.3g vs one device\n", example,
                        devs[k], e);
            CU_ASSERT(e <= 1e-5);
            CU_ASSERT(e > 0 || devs[k] == 1); /* the split sums round differently: a real run */
            CU_ASSERT_EQUAL(memcmp(got, ref, n * sizeof *got), 0);
        }
        free(got);
        free(ref);
        gp_model_free(m);
    }
    free(want);
    gp_model_free(one);
}

static void test_gpt2_devices(void)
{
    /* 6 heads: 2 and 3 devices divide them, 4 devices hold 2 heads each (2 zero-padded). */
    static const char *defs[] = {"n_layer=2", "n_embd=96", "n_head=6", "vocab_size=300",
                                 "n_positions=32", "n_batch=8"};
    static const int devs[] = {2, 3, 4};
    check_devices("examples/gpt2.gplan", defs, 6, devs, 3);
}

static void test_llama_devices(void)
{
    static const char *defs[] = {"num_hidden_layers=2", "hidden_size=128",
                                 "intermediate_size=344", "num_attention_heads=8",
                                 "num_key_value_heads=4", "vocab_size=300",
                                 "max_position_embeddings=32", "n_batch=8"};
    static const int devs[] = {2, 4};
    check_devices("examples/llama.gplan", defs, 8, devs, 2);
}

/* The per-device plan: shapes cut, KV cache cut, memory per device about 1/N. */
static void test_model_info(void)
{
    static const char *defs[] = {"n_layer=2", "n_embd=96", "n_head=6", "vocab_size=300",
                                 "n_positions=32", "n_batch=8"};
    gp_model *one = compile_model("examples/gpt2.gplan", defs, 6, 1);
    gp_model *two = compile_model("examples/gpt2.gplan", defs, 6, 2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(one);
    CU_ASSERT_PTR_NOT_NULL_FATAL(two);
    gp_model_info a, b;
    gp_model_get_info(one, &a);
    gp_model_get_info(two, &b);
    CU_ASSERT_EQUAL(b.region_bytes[1] * 2, a.region_bytes[1]); /* state: KV heads halved */
    CU_ASSERT(b.region_bytes[2] < a.region_bytes[2]);          /* weights: blocks halved, */
    CU_ASSERT(b.region_bytes[2] * 2 > a.region_bytes[2]);      /* embeddings on both */
    gp_model_free(one);
    gp_model_free(two);
}

/* Nothing allocates during evals on any thread (the rank threads and their pools included). */
static void test_no_alloc(void)
{
    static const char *defs[] = {"num_hidden_layers=2", "hidden_size=64",
                                 "intermediate_size=128", "num_attention_heads=4",
                                 "num_key_value_heads=2", "vocab_size=256",
                                 "max_position_embeddings=64", "n_batch=8"};
    gp_model *m = compile_model("examples/llama.gplan", defs, 8, 2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    char err[1024];
    gp_session_opts o = {"cpu", 2, 0};
    gp_alloc_count_start();
    gp_session *s = gp_session_new(m, &o, err, sizeof err);
    int64_t at_create = gp_alloc_count_stop();
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT(at_create >= 8); /* the counter sees this: two backends, threads, io blocks */
    int failures = 0;
    int32_t id = 1, pos = 0;
    gp_alloc_count_start();
    for (int i = 0; i < 300; i++) {
        pos = i % 64;
        if (pos == 0 && gp_session_reset(s))
            failures++;
        if (gp_session_set_tokens(s, &id, &pos, 1) || gp_session_eval(s))
            failures++;
        id = (int32_t)((id * 13 + 5) % 256);
    }
    int64_t during = gp_alloc_count_stop();
    CU_ASSERT_EQUAL(failures, 0);
    CU_ASSERT_EQUAL(during, 0);
    CU_ASSERT_EQUAL(gp_session_eval_count(s), 300);
    gp_session_free(s);
    gp_model_free(m);
}

void gp_suite_tp(void);
void gp_suite_tp(void)
{
    static const gp_test_case tests[] = {
        {"split: groups, units, zero padding", test_split_copy},
        {"split: rows of f16", test_split_rows},
        {"host all-reduce f32, 3 ranks, uneven chunks", test_all_reduce_f32},
        {"host all-reduce f16", test_all_reduce_f16},
        {"host all-reduce: abort and reset", test_all_reduce_abort},
        {"gpt2: 2, 3, 4 devices = 1 device; cpu = reference", test_gpt2_devices},
        {"llama (GQA): 2, 4 devices = 1 device", test_llama_devices},
        {"per-device memory", test_model_info},
        {"no allocation during 300 evals on 2 devices", test_no_alloc},
    };
    gp_test_add_suite("tp", NULL, NULL, tests, GP_TEST_COUNT(tests));
}
