/* CUDA tests of the attention kernels (split-KV, prompts, one-token attention with its ropes and
 * K/V stores, one block a head) against the CPU (suite "cuda"). */
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

void test_attention(void)
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

/* A ragged batch (seq and a block table over a pool, block 4): three sequences of different
 * lengths, a decode token, a chunk and a prompt in one launch, scattered blocks, a window; the
 * CPU's kernel is the reference. f16 and f32 caches, split or not. */
void test_attention_ragged(void)
{
    kctx k;
    kctx_new(&k, NULL, NULL, 0);
    enum { B = 4, NB = 16, M = 6, N = 3 };
    const int32_t tab[N][M] = {{7, 2, 9, 0, 0, 0}, {3, 4, 5, 11, 12, 0}, {10, 1, 0, 0, 0, 0}};
    const int32_t len[N] = {11, 19, 6}, news[N] = {1, 5, 6};
    for (int c = 0; c < 4; c++) {
        int64_t H = 4, G = 2, D = c == 3 ? 128 : 64, T = 12, window = c == 2 ? 5 : 0;
        gp_dtype kvt = c % 2 ? GP_F32 : GP_F16;
        int64_t sq[3] = {T, H, D}, skv[3] = {NB * B, G, D}, st[1] = {T}, stab[2] = {N, M};
        tt q, kk, v, pos, seq, tb, out;
        tt_new(&q, GP_F32, 3, sq, 1.0f);
        tt_new(&kk, kvt, 3, skv, 1.0f);
        tt_new(&v, kvt, 3, skv, 1.0f);
        tt_new(&pos, GP_I32, 1, st, 1.0f);
        tt_new(&seq, GP_I32, 1, st, 1.0f);
        tt_new(&tb, GP_I32, 2, stab, 1.0f);
        tt_new(&out, GP_F32, 3, sq, 1.0f);
        for (int s = 0, t = 0; s < N; s++)
            for (int j = 0; j < news[s]; j++, t++) {
                set_i32(&seq, t, s);
                set_i32(&pos, t, len[s] - news[s] + j);
            }
        for (int i = 0; i < N * M; i++)
            set_i32(&tb, i, tab[i / M][i % M]);
        tt *ins[6] = {&q, &kk, &v, &pos, &seq, &tb};
        gp_attrs at = {{[GP_ATTENTION_WINDOW] = window, [GP_ATTENTION_BLOCK] = B},
                       {1.0 / sqrt((double)D), 0}};
        size_t ws = (size_t)16 * (size_t)T * (size_t)H * (size_t)(D + 2) * 4;
        for (int mode = 0; mode < 2; mode++) {
            k.c.att_combine = k.c.pdl = k.c.kv_prefetch = mode;
            k.c.att_tiles = k.c.att_mma = 1; /* asked for, never taken by a ragged batch */
            int64_t n0 = gp_cuda_attention_tiles_count(), m0 = gp_cuda_attention_mma_count();
            char name[96];
            snprintf(name, sizeof name, "ragged attention case %d mode %d", c, mode);
            CHECK_ERR(name, run_op(GP_OP_ATTENTION, &at, &out, ins, 6, ws, &k), 1e-5);
            CU_ASSERT_EQUAL(gp_cuda_attention_tiles_count() - n0, 0);
            CU_ASSERT_EQUAL(gp_cuda_attention_mma_count() - m0, 0);
        }
        tt *all[] = {&q, &kk, &v, &pos, &seq, &tb, &out};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            tt_free(all[i]);
    }
    kctx_free(&k);
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
    size_t wsz = gp_cpu_workspace_bytes(GP_OP_ATTENTION, NULL, &c->out.h, ain, 4, 1);
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
void test_attention_decode(void)
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
                    gp_cu_rope rn = {1, 0, D - 16, 10000.0, GP_F32, 0, 0, 0, 0, NULL, 0, 1.0f},
                               ri = {1, 1, D / 2, 10000.0, GP_F32, 0, 0, 0, 0, NULL, 0, 1.0f};
                    gp_cu_rope off = {0, 0, 0, 0.0, GP_F32, 0, 0, 0, 0, NULL, 0, 1.0f}, rk2 = ri;
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
void test_attention_head(void)
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
                    gp_cu_rope off = {0, 0, 0, 0.0, GP_F32, 0, 0, 0, 0, NULL, 0, 1.0f};
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
void test_attention_decode_edges(void)
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
    gp_cu_rope rope = {1, 0, D, 10000.0, GP_F32, 0, 0, 0, 0, NULL, 0, 1.0f};
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
    size_t wsz = gp_cpu_workspace_bytes(GP_OP_ATTENTION, NULL, &ref.h, ain, 4, 1);
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
