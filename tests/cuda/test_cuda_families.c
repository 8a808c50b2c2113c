/* CUDA tests of the model families' operations (llama3 rope scaling, windows, rings,
 * soft-capping, weight offsets) and whole models, against the CPU backend (suite "cuda"). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <CUnit/CUnit.h>
#include <cuda_runtime_api.h>

#include "cuda/cuda_kernels.h"
#include "cpu/cpu_kernels.h"
#include "gplan/gplan.h"
#include "plan/plan.h"
#include "tests/cuda/cuda_tests.h"
#include "tests/cuda/cuda_testutil.h"
#include "tests/testmodel.h"
#include "tests/testutil.h"

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
 * band of llama3's is met: kept, mixed, divided by the factor); then with a freq_factors input
 * (Llama 3.1's rope_freqs), unscaled, llama3 and LongRoPE (Phi-3's: its attention factor too). */
void test_fam_rope(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    int64_t sx[3] = {3, 4, 64}, sp[1] = {3};
    const int32_t ps[3] = {0, 77, 5000};
    for (int c = 0; c < 20; c++) {
        /* 12..19: with freq_factors (llama.cpp's rope_freqs), 16..19 LongRoPE's (its attention
         * factor on the cosines and sines) */
        gp_dtype ot = c & 1 ? GP_F16 : GP_F32;
        int64_t n = c & 2 ? 48 : 64;
        int64_t L = c >= 16 ? GP_ROPE_LONGROPE : c >= 8 && c < 12 ? GP_ROPE_LINEAR : c & 4 ? 32 : 0;
        int nin = c >= 12 ? 3 : 2;
        tt x, pos, out, ff;
        int64_t sf[1] = {n / 2};
        tt_new(&x, GP_F32, 3, sx, 1.0f);
        tt_new(&pos, GP_I32, 1, sp, 1.0f);
        tt_new(&out, ot, 3, sx, 1.0f);
        tt_new(&ff, GP_F32, 1, sf, 1.0f);
        for (int t = 0; t < 3; t++)
            set_i32(&pos, t, ps[t]);
        float *fv = (float *)ff.h.data;
        for (int64_t j = 0; j < n / 2; j++)
            fv[j] = 1.0f + 39.0f * fabsf(frand()); /* Llama 3.1's span: 1 .. 40 */
        cudaMemcpy(ff.d.data, fv, (size_t)(n / 2) * 4, cudaMemcpyHostToDevice);
        gp_attrs a = fam_rope_attrs(n, 10000.0, L);
        if (L == GP_ROPE_LONGROPE)
            a.f[GP_ROPE_FACTOR] = 1.19;
        tt *ins[3] = {&x, &pos, &ff};
        char name[64];
        snprintf(name, sizeof name, "rope %s n %d scaling %s%s", ot == GP_F16 ? "f16" : "f32",
                 (int)n, L == GP_ROPE_LONGROPE ? "longrope" : L > 0 ? "llama3" : L ? "linear" : "none",
                 nin > 2 ? " freq_factors" : "");
        CHECK_ERR(name, run_op(GP_OP_ROPE, &a, &out, ins, nin, 0, &k), 1e-5);
        tt_free(&x);
        tt_free(&pos);
        tt_free(&out);
        tt_free(&ff);
    }
    kctx_free(&k);
}

/* scale with a cap (softcap) and rms_norm with a weight offset against the CPU: rows that stay in
 * registers (300) and rows that loop (5000), f32 and f16 weights; an offset of 0 as a control. */
void test_fam_scale_norm(void)
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
void test_fam_store_ring(void)
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
void test_fam_attention(void)
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
    size_t wsz = gp_cpu_workspace_bytes(GP_OP_ATTENTION, NULL, &out.h, ain, 4, 1);
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
void test_fam_decode(void)
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
    int64_t V = gp_test_vocab(m);
    float *lc = malloc(sizeof(float) * 9 * (size_t)V), *lg = malloc(sizeof(float) * 9 * (size_t)V);
    int at = 0;
    for (int e = 0; e < 33; e++) {
        int n = e == 0 ? 9 : e == 32 ? 5 : 1;
        CU_ASSERT_EQUAL_FATAL(step(sc, n, at, lc, V), 0);
        CU_ASSERT_EQUAL_FATAL(step(sg, n, at, lg, V), 0);
        double r = gp_test_rel_err(lg, lc, (size_t)n * (size_t)V, GP_TEST_L2);
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

void test_fam_models(void)
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
