/* Memory bandwidth, two figures (bench/cpu.sh prints them beside the decode speed, whose weight
 * reads they bound):
 * - copy: STREAM-style, threads copy their shares of a 512 MiB array into another with memcpy;
 *   bytes read + bytes written per second;
 * - read: threads sum their shares of a 512 MiB array of 64-bit words, one sequential stream
 *   each, prefetched 1 KiB ahead, the array in transparent huge pages where the kernel gives them
 *   (as it maps a checkpoint file's pages on this development VM); bytes read per second.
 * Best of the repeats each. Usage: copy_bw [threads] [repeats] */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

enum { MAXTH = 64 };

static char *src, *dst;
static size_t total;
static int nth;
static pthread_barrier_t bar;
static int reading;              /* this round times the read, not the copy */
static volatile uint64_t sums[MAXTH]; /* the read's results, so that it is not optimized away */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *worker(void *arg)
{
    size_t i = (size_t)arg, lo = total / (size_t)nth * i, hi = total / (size_t)nth * (i + 1);
    memset(src + lo, (int)i + 1, hi - lo); /* first touch on this thread */
    memset(dst + lo, 0, hi - lo);
    pthread_barrier_wait(&bar);
    pthread_barrier_wait(&bar); /* the timed copy starts */
    if (reading) {
        /* 64-byte vectors (one load each where the target has them), four running sums */
        typedef uint64_t v8 __attribute__((vector_size(64)));
        const v8 *p = (const v8 *)(const void *)(src + lo);
        size_t n = (hi - lo) / sizeof *p;
        v8 s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
        for (size_t j = 0; j + 4 <= n; j += 4) {
            for (int l = 0; l < 4; l++)
                __builtin_prefetch(p + j + 16 + l, 0, 2);
            s0 += p[j];
            s1 += p[j + 1];
            s2 += p[j + 2];
            s3 += p[j + 3];
        }
        v8 t = s0 + s1 + s2 + s3;
        sums[i] = t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
    } else {
        memcpy(dst + lo, src + lo, hi - lo);
    }
    pthread_barrier_wait(&bar);
    return NULL;
}

int main(int argc, char **argv)
{
    nth = argc > 1 ? atoi(argv[1]) : 1;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    if (nth < 1 || nth > MAXTH || reps < 1) {
        fprintf(stderr, "usage: copy_bw [threads 1..%d] [repeats]\n", MAXTH);
        return 1;
    }
    total = (size_t)512 << 20;
    src = aligned_alloc((size_t)2 << 20, total);
    dst = malloc(total);
    if (!src || !dst) {
        fprintf(stderr, "copy_bw: out of memory\n");
        return 1;
    }
#ifdef MADV_HUGEPAGE
    madvise(src, total, MADV_HUGEPAGE); /* a hint: refused or ignored, the read runs on small pages */
#endif
    double best[2] = {0, 0};
    for (int r = 0; r < 2 * reps; r++) {
        reading = r % 2;
        pthread_t th[MAXTH];
        pthread_barrier_init(&bar, NULL, (unsigned)nth + 1);
        for (int i = 0; i < nth; i++)
            pthread_create(&th[i], NULL, worker, (void *)(size_t)i);
        pthread_barrier_wait(&bar);
        double t0 = now();
        pthread_barrier_wait(&bar);
        pthread_barrier_wait(&bar);
        double gbs = (reading ? 1.0 : 2.0) * (double)total / (now() - t0) * 1e-9;
        for (int i = 0; i < nth; i++)
            pthread_join(th[i], NULL);
        pthread_barrier_destroy(&bar);
        if (gbs > best[reading])
            best[reading] = gbs;
    }
    printf("copy %d threads: %.2f GB/s (read + write, best of %d)\n", nth, best[0], reps);
    printf("read %d threads: %.2f GB/s (sequential, best of %d)\n", nth, best[1], reps);
    free(src);
    free(dst);
    return 0;
}
