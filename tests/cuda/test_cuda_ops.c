/* CUDA tests of the elementwise, norm, rope, copy, argmax and store kernels against gp_cpu_compute
 * (suite "cuda", registered in tests/cuda/test_cuda.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>
#include <cuda_runtime_api.h>

#include "cuda/cuda_kernels.h"
#include "cpu/cpu_kernels.h"
#include "gplan/gplan.h"
#include "tests/cuda/cuda_tests.h"
#include "tests/cuda/cuda_testutil.h"

/* Two lookups and their sum in one launch (gp_cuda_get_rows_add) against the CPU's get_rows,
 * get_rows and add: the same bits, for one token and for a prompt of 7 (f16 and f32 tables; width
 * 2100 is more than one load batch of a row); a token id out of range leaves its row unwritten;
 * bad operands are refused with an error. */
void test_get_rows_add(void)
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

void test_elementwise(void)
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

void test_norms_softmax(void)
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

void test_rope_rows_copies(void)
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
void test_argmax(void)
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

void test_store(void)
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
void test_store2(void)
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
