/* The roofline beside bench/quant_f32_bench.c: memcpy and read bandwidth over 256 MiB, and the
 * speed of gp_quant_dequantize_row (cpu/quant.h) per type, in GB/s of blocks. Notes:
 * bench/quant-notes.md. Usage: bench_quant [SECONDS_PER_FIGURE (0.3)] [TYPE ...] */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/quant.h"

static double secs = 0.3; /* measuring time per figure */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The process's CPU seconds: on a machine shared with other work, wall time includes time the
 * scheduler gave to others; CPU time does not. */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

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

#define BIG ((size_t)256 << 20) /* more than the caches: every pass reads memory */

static void measure_memory(void)
{
    unsigned char *a = xalloc(BIG), *b = xalloc(BIG);
    double best = 1e30, bestr = 1e30;
    volatile uint64_t sink = 0;
    for (int r = 0; r < 3; r++) {
        double t0 = now();
        memcpy(b, a, BIG);
        best = fmin(best, now() - t0);
        t0 = now();
        const uint64_t *p = (const uint64_t *)a;
        uint64_t s[8] = {0};
        for (size_t i = 0; i < BIG / 8; i += 8)
            for (int j = 0; j < 8; j++)
                s[j] += p[i + j]; /* 8 independent sums: vectorizes */
        bestr = fmin(bestr, now() - t0);
        sink += s[0] + s[7];
    }
    (void)sink;
    printf("memcpy 256 MiB: %.1f GB/s copied (%.1f GB/s of traffic); read-only sum: %.1f GB/s\n",
           (double)BIG / best / 1e9, 2 * (double)BIG / best / 1e9, (double)BIG / bestr / 1e9);
    free(a);
    free(b);
}

/* Rows of K = 2048 dequantized into one L1-sized buffer: "cached" the same 1 MiB of blocks each
 * pass, "from memory" cycling through 256 MiB. The best of 5 rounds, by wall and CPU time. */
static void bench_type(gp_dtype t)
{
    enum { K = 2048 };
    size_t rb = gp_dtype_row_bytes(t, K), hot = ((size_t)1 << 20) / rb, all = BIG / rb;
    unsigned char *w = xalloc(all * rb);
    float *x = xalloc(K * sizeof *x), *y = xalloc(K * sizeof *y);
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < K; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        x[i] = (float)((double)(s >> 11) * 0x1p-53 * 2 - 1);
    }
    gp_quant_quantize_row(t, x, w, K);
    for (size_t r = 1; r < all; r++)
        memcpy(w + r * rb, w, rb); /* the same row everywhere: only speed counts */
    printf("%-5s", gp_dtype_name(t));
    for (int cold = 0; cold < 2; cold++) {
        size_t rows = cold ? all : hot, r = 0;
        double wall = 1e30, cpu = 1e30;
        volatile float sink = 0;
        for (int round = 0; round < 5; round++) {
            int64_t it = 0;
            double t0 = now(), c0 = cpu_now(), el;
            do {
                gp_quant_dequantize_row(t, w + r * rb, y, K);
                sink += y[K - 1];
                r = r + 1 < rows ? r + 1 : 0;
                it++;
                el = now() - t0;
            } while (el < secs / 5);
            wall = fmin(wall, el / (double)it);
            cpu = fmin(cpu, (cpu_now() - c0) / (double)it);
        }
        (void)sink;
        printf("  %s %.1f / %.1f GB/s", cold ? "from memory" : "cached", (double)rb / wall / 1e9,
               (double)rb / cpu / 1e9);
    }
    printf(" (wall / cpu)\n");
    free(w);
    free(x);
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
    printf("quant bench: %.2f s a figure, best of 5 rounds; dequantize_row K = 2048, GB/s of blocks\n",
           secs);
    measure_memory();
    for (int i = 0; i < nt; i++)
        bench_type(types[i]);
    return 0;
}
