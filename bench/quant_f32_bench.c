/* Speed of gp_quant_matmul_f32 (cpu/quant.h): decode (M = 1, GB/s of weights read) and prompt
 * (M = 128, GFLOP/s; where the path is amx, through gp_quant_matmul_ws_prep and _cols, the CPU
 * backend's two phases) on transformer shapes, 1 and 2 threads splitting the columns; notes in
 * bench/quant-notes.md. Usage: quant-f32-bench [ROUNDS] [ISA|-] [cpu] [TYPE]: ISA portable, avx2,
 * avx512, vnni, amx; "cpu": one thread only, timed by its CPU time (for a loaded machine); TYPE:
 * only it. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/quant.h"

static clockid_t clk = CLOCK_MONOTONIC;

static double now(void)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- a spinning two-thread pool: thread creation would cost more than a small product ---- */

typedef struct {
    gp_dtype t;
    const unsigned char *w;
    int64_t N, K, M;
    const float *x;
    float *y;
} job;

static job cur;
static atomic_int go, done, quit;
static int nthreads;

static void *ws; /* gp_quant_matmul_ws's workspace (the amx path takes prompts) */
static size_t ws_size;
static int phase; /* the amx path's two phases, as the CPU backend runs them: 0 x's halves, 1 columns */

static void part(int i)
{
    if (gp_quant_matmul_ws_taken(cur.t, cur.M, cur.K, ws, ws_size)) {
        if (phase == 0) {
            gp_quant_matmul_ws_prep(cur.x, cur.K, cur.M, cur.K, ws, i, nthreads);
        } else {
            int64_t n0 = (cur.N + 31) / 32 * i / nthreads * 32;
            int64_t n1 = (cur.N + 31) / 32 * (i + 1) / nthreads * 32;
            gp_quant_matmul_ws_cols(cur.t, cur.w, n0, n1 < cur.N ? n1 : cur.N, cur.M, cur.K, cur.y,
                                    cur.N, ws);
        }
        return;
    }
    /* column ranges on multiples of 4 rows, as a runtime's split would be */
    int64_t n0 = cur.N * i / nthreads / 4 * 4, n1 = i + 1 == nthreads ? cur.N : cur.N * (i + 1) / nthreads / 4 * 4;
    gp_quant_matmul_f32(cur.t, cur.w, n0, n1, cur.x, cur.K, cur.M, cur.K, cur.y, cur.N);
}

static void *worker(void *arg)
{
    (void)arg;
    int seen = 0;
    for (;;) {
        int g;
        while ((g = atomic_load_explicit(&go, memory_order_acquire)) == seen && !atomic_load(&quit))
            sched_yield(); /* the machine may be shared: spinning alone would starve the caller */
        if (atomic_load(&quit))
            return NULL;
        seen = g;
        part(1);
        atomic_fetch_add_explicit(&done, 1, memory_order_release);
    }
}

static void call1(void);

static void call(void)
{
    phase = 0;
    call1();
    if (gp_quant_matmul_ws_taken(cur.t, cur.M, cur.K, ws, ws_size)) { /* the join: a barrier */
        phase = 1;
        call1();
    }
}

static void call1(void)
{
    if (nthreads == 1) {
        part(0);
        return;
    }
    int d0 = atomic_load(&done);
    atomic_fetch_add_explicit(&go, 1, memory_order_release);
    part(0);
    while (atomic_load_explicit(&done, memory_order_acquire) == d0)
        sched_yield();
}

/* ---- measurement ---- */

typedef struct {
    double call;        /* seconds: the fastest single call (the machine's own speed, best seen) */
    double best, worst; /* seconds per call: min and max over rounds of each round's mean */
} timing;

/* copies: the matrix is replicated so that successive calls read different memory (decode reads a
 * whole model per token, far beyond the caches) */
static timing measure(job j, const unsigned char *wbase, size_t wbytes, int copies, int rounds)
{
    timing tm = {1e30, 1e30, 0};
    cur = j;
    int iters = 1;
    for (;;) { /* a round of at least ~30 ms */
        double t0 = now();
        for (int i = 0; i < iters; i++) {
            cur.w = wbase + (size_t)(i % copies) * wbytes;
            call();
        }
        if (now() - t0 > 0.03 || iters > (1 << 20))
            break;
        iters *= 2;
    }
    for (int r = 0; r < rounds; r++) {
        double t0 = now(), s = 0;
        for (int i = 0; i < iters; i++) {
            cur.w = wbase + (size_t)(i % copies) * wbytes;
            double c0 = now();
            call();
            double c = now() - c0;
            s += c;
            tm.call = c < tm.call ? c : tm.call;
        }
        (void)t0;
        s /= iters;
        tm.best = s < tm.best ? s : tm.best;
        tm.worst = s > tm.worst ? s : tm.worst;
    }
    return tm;
}

static unsigned long long rng = 88172645463325252ull;

static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) * 0x1p-53 * 2 - 1);
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 7;
    int only_cpu = argc > 3 && strcmp(argv[3], "cpu") == 0;
    const char *only = argc > 4 ? argv[4] : NULL;
    if (only_cpu)
        clk = CLOCK_THREAD_CPUTIME_ID;
    if (argc > 2 && strcmp(argv[2], "-") != 0) {
        int isa = -1;
        for (int i = 0; i < GP_QUANT_ISA_COUNT; i++)
            if (strcmp(argv[2], gp_quant_isa_name(i)) == 0)
                isa = i;
        if (isa < 0 || gp_quant_force_isa(isa) != 0) {
            fprintf(stderr, "quant_f32_bench: ISA %s not available here\n", argv[2]);
            return 1;
        }
    }
    /* the first five by default; TYPE picks any */
    static const gp_dtype types[] = {GP_Q4_1, GP_Q4_0, GP_Q8_0, GP_Q4_K, GP_Q6_K,
                                     GP_Q5_0, GP_Q5_1, GP_Q5_K};
    static const char *const names[] = {"q4_1", "q4_0", "q8_0", "q4_k", "q6_k", "q5_0", "q5_1", "q5_k"};
    static const int64_t shapes[][2] = {{576, 1536}, {1536, 576}, {2048, 5632}}; /* N x K */
    printf("path %s; %d rounds; %s\n", gp_quant_isa_name(gp_quant_isa()), rounds,
           only_cpu ? "thread CPU time" : "wall-clock time");
    printf("M = 1: GB/s of weights; M = 128: GFLOP/s. best: the fastest call; rounds: the best "
           "round's mean (spread: the worst round's mean / the best's - 1). hot: one copy of the "
           "matrix (caches); cold: 256 MiB of copies in turn (memory)\n");
    printf("%-5s %-10s %3s %4s | %6s %6s %6s | %6s %6s %6s | %s\n", "type", "N x K", "thr", "M",
           "best", "rounds", "spread", "cold", "rounds", "spread", "time");
    pthread_t th;
    for (int s = 0; s < 3; s++) {
        int64_t N = shapes[s][0], K = shapes[s][1];
        float *wf = malloc((size_t)(N * K) * sizeof *wf);
        for (int64_t i = 0; i < N * K; i++)
            wf[i] = frand() * 0.05f;
        float *x = malloc((size_t)(128 * K) * sizeof *x), *y = malloc((size_t)(128 * N) * sizeof *y);
        ws_size = (size_t)gp_quant_matmul_ws_bytes(128, K);
        ws = aligned_alloc(64, ws_size);
        for (int64_t i = 0; i < 128 * K; i++)
            x[i] = frand();
        for (int ti = 0; ti < (only ? 8 : 5); ti++) {
            gp_dtype t = types[ti];
            if (K % gp_dtype_block(t) != 0 || (only && strcmp(only, names[ti]) != 0))
                continue; /* the k-quants need K a multiple of 256 */
            size_t rb = gp_dtype_row_bytes(t, K), wbytes = (size_t)N * rb;
            int copies = (int)((256u << 20) / wbytes) + 1; /* 256 MiB of copies for the cold column */
            unsigned char *w = malloc(wbytes * (size_t)copies);
            for (int64_t n = 0; n < N; n++)
                gp_quant_quantize_row(t, wf + n * K, w + n * rb, K);
            for (int c = 1; c < copies; c++)
                memcpy(w + (size_t)c * wbytes, w, wbytes);
            for (nthreads = 1; nthreads <= (only_cpu ? 1 : 2); nthreads++) {
                atomic_store(&quit, 0);
                atomic_store(&go, 0);
                atomic_store(&done, 0);
                if (nthreads == 2)
                    pthread_create(&th, NULL, worker, NULL);
                for (int M = 1; M <= 128; M *= 128) {
                    job j = {t, w, N, K, M, x, y};
                    timing hot = measure(j, w, wbytes, 1, rounds);
                    timing cold = M == 1 ? measure(j, w, wbytes, copies, rounds) : hot;
                    char tag[32];
                    snprintf(tag, sizeof tag, "%lldx%lld", (long long)N, (long long)K);
                    double u = M == 1 ? (double)wbytes * 1e-9 : 2.0 * M * N * K * 1e-9;
                    printf("%-5s %-10s %3d %4d | %6.1f %6.1f %5.0f%% | ", names[ti], tag, nthreads, M,
                           u / hot.call, u / hot.best, 100 * (hot.worst / hot.best - 1));
                    if (M == 1)
                        printf("%6.1f %6.1f %5.0f%% | ", u / cold.call, u / cold.best,
                               100 * (cold.worst / cold.best - 1));
                    else
                        printf("%6s %6s %6s | ", "", "", "");
                    printf("%.1f us\n", hot.call * 1e6);
                    fflush(stdout);
                }
                if (nthreads == 2) {
                    atomic_store(&quit, 1);
                    pthread_join(th, NULL);
                }
            }
            free(w);
        }
        free(wf);
        free(ws);
        free(x);
        free(y);
    }
    return 0;
}
