/* Speed of the products on quantized weights (runtime/quant.h): M = 1 matvecs in GB/s of weight
 * bytes against memcpy and read bandwidth measured in the same run, M = 128 prompts in GFLOP/s,
 * each ISA path, and dequantize-on-the-fly for comparison. Notes: bench/quant-notes.md.
 * Usage: bench_quant [SECONDS_PER_FIGURE (0.3)] [TYPE ...] */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/quant.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double secs = 0.3; /* measuring time per figure */

/* The process's CPU seconds: on a machine shared with other work (this VM's 2 cores), wall time
 * includes time the scheduler gave to others; CPU time over the threads does not. */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double last_cpu; /* time_runs' best CPU seconds per run, divided by the thread count */

static void *xalloc(size_t n)
{
    void *p = aligned_alloc(64, (n + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "bench_quant: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    memset(p, 0, n); /* touch every page before timing */
    return p;
}

/* ---- a two-worker pool: each run splits the output columns [0, N) in nth contiguous shares ---- */

typedef struct {
    gp_dtype t;
    const unsigned char *w;  /* [N] rows */
    const float *x;          /* [M, K] */
    unsigned char *xq;       /* [M] activation rows */
    float *y;                /* [M, N] */
    int64_t M, N, K;
    int deq;                 /* M = 1 dequantizing on the fly instead: 1 the library's
                              * gp_quant_dequantize_row + an f32 dot, 2 dot_fly */
    float *tmp[2];           /* [K] per thread, for deq */
} job;

static job cur;
static int nthreads = 1, stop = 0;
static pthread_barrier_t bar;

static float dot_f32(const float *a, const float *b, int64_t n)
{
    float s[8] = {0};
    for (int64_t i = 0; i < n; i += 8)
        for (int j = 0; j < 8; j++)
            s[j] += a[i + j] * b[i + j]; /* vectorizes: 8 independent sums */
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

#if defined(__x86_64__)
#include <immintrin.h>
/* Dequantize-on-the-fly done well, for the comparison: q4_0 and q8_0 blocks unpacked to f32 in
 * AVX-512 registers and multiplied with f32 activations (no activation rounding). */
__attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c"))) static float
dot_fly(gp_dtype t, const unsigned char *w, const float *x, int64_t K)
{
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    size_t bb = gp_dtype_block_bytes(t);
    for (int64_t b = 0; b < K / 32; b++, w += bb) {
        uint16_t h;
        memcpy(&h, w, 2);
        __m512 d = _mm512_set1_ps(_cvtsh_ss(h)), lo, hi;
        if (t == GP_Q8_0) {
            lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const void *)(w + 2))));
            hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const void *)(w + 18))));
        } else {
            __m128i q = _mm_loadu_si128((const void *)(w + 2)), m = _mm_set1_epi8(15);
            __m512i e = _mm512_set1_epi32(8);
            lo = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_and_si128(q, m)), e));
            hi = _mm512_cvtepi32_ps(
                _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(q, 4), m)), e));
        }
        __m512 s = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + 32 * b + 16),
                                   _mm512_mul_ps(lo, _mm512_loadu_ps(x + 32 * b)));
        if (b & 1)
            acc1 = _mm512_fmadd_ps(d, s, acc1);
        else
            acc0 = _mm512_fmadd_ps(d, s, acc0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}
static int have_fly(gp_dtype t)
{
    return (t == GP_Q4_0 || t == GP_Q8_0) && __builtin_cpu_supports("avx512bw");
}
#else
static float dot_fly(gp_dtype t, const unsigned char *w, const float *x, int64_t K)
{
    (void)t, (void)w, (void)x, (void)K;
    return 0;
}
static int have_fly(gp_dtype t)
{
    (void)t;
    return 0;
}
#endif

static void work(int ith)
{
    job *j = &cur;
    int64_t n0 = j->N * ith / nthreads, n1 = j->N * (ith + 1) / nthreads;
    size_t rb = gp_dtype_row_bytes(j->t, j->K);
    if (j->deq == 2) {
        for (int64_t n = n0; n < n1; n++)
            j->y[n] = dot_fly(j->t, j->w + (size_t)n * rb, j->x, j->K);
        return;
    }
    if (j->deq) {
        for (int64_t n = n0; n < n1; n++) {
            gp_quant_dequantize_row(j->t, j->w + (size_t)n * rb, j->tmp[ith], j->K);
            j->y[n] = dot_f32(j->tmp[ith], j->x, j->K);
        }
        return;
    }
    /* the activations: each thread its share of the rows (all of them for M = 1: thread 0) */
    int64_t m0 = j->M * ith / nthreads, m1 = j->M * (ith + 1) / nthreads;
    if (m1 > m0)
        gp_quant_act_quantize(j->t, j->x, m0, m1, j->K, j->K, j->xq);
    if (nthreads > 1)
        pthread_barrier_wait(&bar);
    gp_quant_matmul(j->t, j->w, n0, n1, j->xq, j->M, j->K, j->y, j->N);
}

static void *worker(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_barrier_wait(&bar);
        if (stop) /* set_threads waits for this thread before it clears stop */
            return NULL;
        work(1);
        pthread_barrier_wait(&bar);
    }
}

static void run_once(void)
{
    if (nthreads > 1)
        pthread_barrier_wait(&bar);
    work(0);
    if (nthreads > 1)
        pthread_barrier_wait(&bar);
}

/* Wall seconds per run: the best of 5 rounds of repeated runs, each about secs / 5 long (and
 * last_cpu likewise from CPU time). */
static double time_runs(void (*setup)(int64_t i))
{
    double best = 1e30;
    last_cpu = 1e30;
    for (int round = 0; round < 5; round++) {
        int64_t it = 0;
        double t0 = now(), c0 = cpu_now(), t;
        do {
            if (setup)
                setup(it);
            run_once();
            it++;
            t = now() - t0;
        } while (t < secs / 5);
        best = fmin(best, t / (double)it);
        last_cpu = fmin(last_cpu, (cpu_now() - c0) / (double)it / nthreads);
    }
    return best;
}

/* M = 1 from memory: the runs cycle through copies of the weights that together exceed the
 * caches (>= 256 MiB), as a real model's layers do. */
static unsigned char **copies;
static int ncopies;

static void next_copy(int64_t i)
{
    cur.w = copies[i % ncopies];
}

static const char *tname(gp_dtype t)
{
    return gp_dtype_name(t);
}

static float frand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (float)((double)(*s >> 11) * 0x1p-53 * 2 - 1);
}

static double bw_memcpy, bw_read;

static void measure_memory(void)
{
    size_t n = (size_t)256 << 20;
    unsigned char *a = xalloc(n), *b = xalloc(n);
    double best = 1e30, bestr = 1e30;
    volatile uint64_t sink = 0;
    for (int r = 0; r < 3; r++) {
        double t0 = now();
        memcpy(b, a, n);
        best = fmin(best, now() - t0);
        t0 = now();
        const uint64_t *p = (const uint64_t *)a;
        uint64_t s[8] = {0};
        for (size_t i = 0; i < n / 8; i += 8)
            for (int j = 0; j < 8; j++)
                s[j] += p[i + j];
        bestr = fmin(bestr, now() - t0);
        sink += s[0] + s[7];
    }
    (void)sink;
    bw_memcpy = (double)n / best / 1e9;
    bw_read = (double)n / bestr / 1e9;
    printf("memcpy 256 MiB: %.1f GB/s copied (%.1f GB/s of traffic); read-only sum: %.1f GB/s\n",
           bw_memcpy, 2 * bw_memcpy, bw_read);
    free(a);
    free(b);
}

static void set_threads(int nth)
{
    static pthread_t th;
    if (nth == nthreads)
        return;
    if (nthreads > 1) { /* stop the old worker */
        stop = 1;
        pthread_barrier_wait(&bar);
        pthread_join(th, NULL);
        stop = 0;
        pthread_barrier_destroy(&bar);
    }
    nthreads = nth;
    if (nth > 1) {
        pthread_barrier_init(&bar, NULL, 2);
        pthread_create(&th, NULL, worker, NULL);
    }
}

static void bench_type(gp_dtype t)
{
    static const int64_t shapes[2][2] = {{5632, 2048}, {576, 1536}}; /* N, K */
    uint64_t seed = 88172645463325252ull;
    for (int s = 0; s < 2; s++) {
        int64_t N = shapes[s][0], K = shapes[s][1];
        size_t rb = gp_dtype_row_bytes(t, K), wbytes = rb * (size_t)N;
        float *wf = xalloc((size_t)K * sizeof *wf), *x = xalloc((size_t)128 * K * sizeof *x);
        unsigned char *w = xalloc(wbytes);
        for (int64_t n = 0; n < N; n++) {
            for (int64_t k = 0; k < K; k++)
                wf[k] = frand(&seed) * 0.05f;
            gp_quant_quantize_row(t, wf, w + n * rb, K);
        }
        for (int64_t i = 0; i < 128 * K; i++)
            x[i] = frand(&seed);
        ncopies = (int)(((size_t)256 << 20) / wbytes) + 1;
        copies = malloc((size_t)ncopies * sizeof *copies);
        for (int c = 0; c < ncopies; c++) {
            copies[c] = xalloc(wbytes);
            memcpy(copies[c], w, wbytes);
        }
        unsigned char *xq = xalloc(128 * gp_quant_act_row_bytes(t, K));
        float *y = xalloc((size_t)128 * N * sizeof *y);
        float *tmp0 = xalloc((size_t)K * 4), *tmp1 = xalloc((size_t)K * 4);
        cur = (job){t, w, x, xq, y, 1, N, K, 0, {tmp0, tmp1}};
        for (int nth = 1; nth <= 2; nth++) {
            set_threads(nth);
            cur.M = 1;
            cur.w = w;
            double gb = (double)wbytes / 1e9;
            double hot = time_runs(NULL), hotc = last_cpu;
            double cold = time_runs(next_copy), coldc = last_cpu;
            cur.deq = 1;
            double deq = time_runs(next_copy), deqc = last_cpu;
            double fly = 0, flyc = 0;
            if (have_fly(t)) {
                cur.deq = 2;
                fly = time_runs(next_copy);
                flyc = last_cpu;
            }
            cur.deq = 0;
            cur.w = w;
            printf("%-5s %4lld x %-4lld %d thr  M=1 from memory %7.1f us %5.1f GB/s (%3.0f%% of read"
                   " bw; cpu %5.1f)  cached %5.1f GB/s (cpu %5.1f)  deq-on-the-fly %4.1f (cpu %4.1f)",
                   tname(t), (long long)N, (long long)K, nth, cold * 1e6, gb / cold,
                   100 * gb / cold / bw_read, gb / coldc, gb / hot, gb / hotc, gb / deq, gb / deqc);
            if (have_fly(t))
                printf("  avx512-fly %4.1f (cpu %4.1f)", gb / fly, gb / flyc);
            if (s == 0) {
                cur.M = 128;
                double p = time_runs(NULL), flop = 2.0 * 128 * (double)N * (double)K / 1e9;
                printf("  M=128 %5.1f GFLOP/s (cpu %5.1f)", flop / p, flop / last_cpu);
            }
            printf("\n");
        }
        set_threads(1);
        for (int c = 0; c < ncopies; c++)
            free(copies[c]);
        free(copies);
        free(wf);
        free(x);
        free(w);
        free(xq);
        free(y);
        free(tmp0);
        free(tmp1);
    }
}

/* Each ISA path, 1 thread, on the big shape: M = 1 from memory and M = 128. */
static void bench_isas(gp_dtype t)
{
    int64_t N = 5632, K = 2048;
    size_t rb = gp_dtype_row_bytes(t, K), wbytes = rb * (size_t)N;
    uint64_t seed = 1234567;
    float *wf = xalloc((size_t)K * 4), *x = xalloc((size_t)128 * K * 4);
    unsigned char *w = xalloc(wbytes);
    for (int64_t n = 0; n < N; n++) {
        for (int64_t k = 0; k < K; k++)
            wf[k] = frand(&seed) * 0.05f;
        gp_quant_quantize_row(t, wf, w + n * rb, K);
    }
    for (int64_t i = 0; i < 128 * K; i++)
        x[i] = frand(&seed);
    unsigned char *xq = xalloc(128 * gp_quant_act_row_bytes(t, K));
    float *y = xalloc((size_t)128 * N * 4);
    cur = (job){t, w, x, xq, y, 1, N, K, 0, {NULL, NULL}};
    set_threads(1);
    printf("%-5s 5632 x 2048, 1 thread, cached, CPU time:", tname(t));
    for (int isa = 0; isa < GP_QUANT_ISA_COUNT; isa++) {
        if (gp_quant_force_isa(isa) != 0)
            continue;
        cur.M = 1;
        time_runs(NULL);
        double m1 = last_cpu;
        cur.M = isa == 0 ? 8 : 128; /* the portable path is slow */
        time_runs(NULL);
        printf("  %s %.1f GB/s %.1f GFLOP/s", gp_quant_isa_name(isa), (double)wbytes / m1 / 1e9,
               2.0 * (double)cur.M * (double)N * (double)K / last_cpu / 1e9);
    }
    printf("\n");
    gp_quant_force_isa(GP_QUANT_ISA_AUTO);
    free(wf);
    free(x);
    free(w);
    free(xq);
    free(y);
}

int main(int argc, char **argv)
{
    static const gp_dtype all[] = {GP_Q4_0, GP_Q4_1, GP_Q5_0, GP_Q5_1,
                                   GP_Q8_0, GP_Q4_K, GP_Q5_K, GP_Q6_K};
    gp_dtype types[8];
    int nt = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 1)
        secs = atof(argv[1]);
    for (int i = 2; i < argc && nt < 8; i++) {
        int t = 0;
        while (t < 8 && strcmp(argv[i], gp_dtype_name(all[t])) != 0)
            t++;
        if (t == 8) {
            fprintf(stderr, "bench_quant: %s: not a quantized type\n", argv[i]);
            return 1;
        }
        types[nt++] = all[t];
    }
    if (nt == 0)
        for (; nt < 8; nt++)
            types[nt] = all[nt];
    printf("quant bench: path %s (supported:", gp_quant_isa_name(gp_quant_isa()));
    for (int isa = 0; isa < GP_QUANT_ISA_COUNT; isa++)
        if (gp_quant_isa_supported(isa))
            printf(" %s", gp_quant_isa_name(isa));
    printf("), %.2f s a figure, best of 5 rounds\n", secs);
    measure_memory();
    for (int i = 0; i < nt; i++)
        bench_type(types[i]);
    for (int i = 0; i < nt; i++)
        bench_isas(types[i]);
    set_threads(1);
    return 0;
}
