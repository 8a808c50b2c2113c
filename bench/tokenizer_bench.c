/* tokenizer-bench: encodes a text file with a tokenizer (a .gguf, tokenizer.json or folder) on one
 * thread, repeatedly, and prints the best time and MB/s (one line, key=value) and the id count.
 * Usage: tokenizer-bench MODEL TEXT_FILE [REPEATS] */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "tokenizer/tokenizer.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: tokenizer-bench MODEL TEXT_FILE [REPEATS]\n");
        return 2;
    }
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    char err[1024];
    double t0 = now();
    gp_tok *t = gp_tok_load(argv[1], err, sizeof err);
    double t_load = now() - t0;
    if (!t) {
        fprintf(stderr, "tokenizer-bench: %s\n", err);
        return 1;
    }
    FILE *f = fopen(argv[2], "rb");
    if (!f) {
        fprintf(stderr, "tokenizer-bench: cannot open %s\n", argv[2]);
        gp_tok_free(t);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)len + 1);
    size_t got = text ? fread(text, 1, (size_t)len, f) : 0;
    fclose(f);
    int32_t *ids = malloc(((size_t)len + 16) * sizeof *ids); /* never more ids than bytes + BOS */
    if (!text || !ids || got != (size_t)len) {
        fprintf(stderr, "tokenizer-bench: cannot read %s\n", argv[2]);
        return 1;
    }
    double best = 1e30;
    int64_t n = 0;
    for (int r = 0; r < reps; r++) {
        double a = now();
        n = gp_tok_encode(t, text, (size_t)len, 0, 0, ids, len + 16, err, sizeof err);
        double b = now() - a;
        if (n < 0) {
            fprintf(stderr, "tokenizer-bench: %s\n", err);
            return 1;
        }
        if (b < best)
            best = b;
    }
    /* a checksum of the ids, so two implementations' outputs can be compared */
    uint64_t h = 1469598103934665603ull;
    for (int64_t i = 0; i < n; i++)
        h = (h ^ (uint32_t)ids[i]) * 1099511628211ull;
    printf("impl=gplan bytes=%ld ids=%lld best_s=%.4f mb_s=%.2f load_s=%.3f fnv=%016llx\n", len,
           (long long)n, best, (double)len / 1e6 / best, t_load, (unsigned long long)h);
    free(text);
    free(ids);
    gp_tok_free(t);
    return 0;
}
