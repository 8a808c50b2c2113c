/* STREAM-style copy bandwidth: threads copy their shares of a 512 MiB array into another with
 * memcpy; bytes read + bytes written per second, best of the repeats (bench/cpu.sh prints it
 * beside the decode speed, whose weight reads it bounds). Usage: copy_bw [threads] [repeats] */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAXTH = 64 };

static char *src, *dst;
static size_t total;
static int nth;
static pthread_barrier_t bar;

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
    memcpy(dst + lo, src + lo, hi - lo);
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
    src = malloc(total);
    dst = malloc(total);
    if (!src || !dst) {
        fprintf(stderr, "copy_bw: out of memory\n");
        return 1;
    }
    double best = 0;
    for (int r = 0; r < reps; r++) {
        pthread_t th[MAXTH];
        pthread_barrier_init(&bar, NULL, (unsigned)nth + 1);
        for (int i = 0; i < nth; i++)
            pthread_create(&th[i], NULL, worker, (void *)(size_t)i);
        pthread_barrier_wait(&bar);
        double t0 = now();
        pthread_barrier_wait(&bar);
        pthread_barrier_wait(&bar);
        double gbs = 2.0 * (double)total / (now() - t0) * 1e-9;
        for (int i = 0; i < nth; i++)
            pthread_join(th[i], NULL);
        pthread_barrier_destroy(&bar);
        if (gbs > best)
            best = gbs;
    }
    printf("copy %d threads: %.2f GB/s (read + write, best of %d)\n", nth, best, reps);
    free(src);
    free(dst);
    return 0;
}
