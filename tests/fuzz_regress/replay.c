/* Replays fuzz inputs through a fuzz target's entry point without libFuzzer: every file named, and
 * every file inside each folder named (not recursive), in name order. Linked with the normal
 * libraries, so the regression inputs run in every build (plain, ASan, valgrind).
 * Usage: fuzz_replay_<target> FILE_OR_DIR...; a missing path is skipped (a target may have no
 * regressions yet). Exit status 0 when at least one input ran, else 1; a crash, leak or sanitizer
 * report fails it the way it failed the fuzzer. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz/fuzz.h"
#include "ir/core.h"

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open\n", path);
        return -1;
    }
    size_t n = 0;
    char *buf = gp_read_stream(f, &n);
    fclose(f);
    if (!buf) {
        fprintf(stderr, "%s: out of memory\n", path);
        return -1;
    }
    /* An exact-size copy, so reading one byte past the input is caught as it is under libFuzzer. */
    uint8_t *exact = malloc(n ? n : 1);
    if (!exact) {
        free(buf);
        return -1;
    }
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The regular files of a folder, in name order; returns how many ran or -1. */
static int run_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **nn = realloc(names, cap * sizeof *nn);
            if (!nn)
                break;
            names = nn;
        }
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        if ((names[n] = malloc(len)) == NULL)
            break;
        snprintf(names[n], len, "%s/%s", dir, e->d_name);
        n++;
    }
    closedir(d);
    if (n)
        qsort(names, n, sizeof *names, cmp_name);
    int ran = 0;
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode) && run_file(names[i]) == 0)
            ran++;
        free(names[i]);
    }
    free(names);
    return ran;
}

int main(int argc, char **argv)
{
    int total = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            printf("%s: none (skipped)\n", argv[i]);
        } else if (S_ISDIR(st.st_mode)) {
            int k = run_dir(argv[i]);
            if (k < 0) {
                fprintf(stderr, "%s: cannot list\n", argv[i]);
                bad = 1;
            } else {
                total += k;
            }
        } else if (run_file(argv[i]) == 0) {
            total++;
        } else {
            bad = 1;
        }
    }
    printf("%s: replayed %d inputs\n", argv[0], total);
    return bad || total == 0;
}
