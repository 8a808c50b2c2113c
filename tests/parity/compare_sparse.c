/* parity-compare-sparse: compares gplan-run's logits and tokens with a sparse Hugging Face fixture
 * (scripts/parity/make_smollm2_fixture.py: for each position, the top logits and a sample of the
 * row, too large a vocabulary to commit whole rows), and prints one table row.
 *
 * FIXTURE lines: "prompt ID ..." "greedy ID ..." "row P ID:LOGIT ... | ID:LOGIT ...". GOT_LOGITS holds
 * rows of `vocab` floats for positions FIRST, FIRST + 1, ... (gplan-run --logits-out: the last row
 * of every eval). Relative error of a row: max |got - want| / max |want| over the fixture's entries.
 * Exit status: 0 within tolerance and tokens equal, 1 not, 2 bad usage or input. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { EXIT_PASS = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };
enum { MAX_IDS = 4096 };

static int bad(const char *what, const char *path)
{
    fprintf(stderr, "parity-compare-sparse: %s: %s\n", path, what);
    return EXIT_USAGE;
}

/* Space-separated integers after `prefix` on a line: count, or -1. */
static int parse_ids(const char *s, long *out, int cap)
{
    int n = 0;
    for (;;) {
        while (*s == ' ' || *s == ',')
            s++;
        if (!*s || *s == '\n')
            return n;
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || n == cap)
            return -1;
        out[n++] = v;
        s = end;
    }
}

int main(int argc, char **argv)
{
    if (argc != 8) {
        fprintf(stderr, "usage: parity-compare-sparse FIXTURE GOT_LOGITS GOT_TOKENS VOCAB FIRST TOL "
                        "NAME\n");
        return EXIT_USAGE;
    }
    const char *fixture = argv[1], *logits = argv[2], *tokens = argv[3], *name = argv[7];
    long vocab = strtol(argv[4], NULL, 10), first = strtol(argv[5], NULL, 10);
    double tol = strtod(argv[6], NULL);
    if (vocab <= 0 || first < 0 || !(tol > 0))
        return bad("bad VOCAB, FIRST or TOL", fixture);

    FILE *lf = fopen(logits, "rb");
    if (!lf)
        return bad(strerror(errno), logits);
    fseek(lf, 0, SEEK_END);
    long bytes = ftell(lf);
    fseek(lf, 0, SEEK_SET);
    long rows = bytes / (long)(vocab * sizeof(float));
    float *got = rows > 0 ? malloc((size_t)bytes) : NULL;
    if (!got || fread(got, 1, (size_t)bytes, lf) != (size_t)bytes) {
        fclose(lf);
        free(got);
        return bad("no logits rows", logits);
    }
    fclose(lf);

    static long want_tok[MAX_IDS], got_tok[MAX_IDS];
    int n_want = -1, n_got = -1;
    char line[1 << 16];
    FILE *tf = fopen(tokens, "r");
    if (!tf) {
        free(got);
        return bad(strerror(errno), tokens);
    }
    if (fgets(line, sizeof line, tf))
        n_got = parse_ids(line, got_tok, MAX_IDS);
    fclose(tf);

    FILE *ff = fopen(fixture, "r");
    if (!ff) {
        free(got);
        return bad(strerror(errno), fixture);
    }
    double worst = 0;
    long worst_pos = -1, compared = 0;
    int rc = EXIT_PASS;
    while (fgets(line, sizeof line, ff)) {
        if (!strncmp(line, "greedy ", 7)) {
            n_want = parse_ids(line + 7, want_tok, MAX_IDS);
            continue;
        }
        if (strncmp(line, "row ", 4))
            continue;
        char *s = line + 4, *end;
        long pos = strtol(s, &end, 10);
        long r = pos - first;
        if (r < 0 || r >= rows)
            continue; /* a position this run did not output */
        double err = 0, scale = 0;
        for (s = end; *s && *s != '\n';) {
            while (*s == ' ' || *s == '|')
                s++;
            if (!*s || *s == '\n')
                break;
            long id = strtol(s, &end, 10);
            if (end == s || *end != ':' || id < 0 || id >= vocab) {
                rc = bad("bad row entry", fixture);
                break;
            }
            double want = strtod(end + 1, &s);
            double g = got[r * vocab + id];
            double e = isfinite(g) ? fabs(g - want) : INFINITY;
            err = e > err ? e : err;
            scale = fabs(want) > scale ? fabs(want) : scale;
        }
        if (rc != EXIT_PASS)
            break;
        double rel = scale > 0 ? err / scale : err;
        if (rel > worst || worst_pos < 0) {
            worst = rel;
            worst_pos = pos;
        }
        compared++;
    }
    fclose(ff);
    free(got);
    if (rc != EXIT_PASS)
        return rc;
    if (n_want <= 0 || n_got < 0 || compared == 0)
        return bad("no greedy line, no tokens or no row compared", fixture);
    int same = 0;
    while (same < n_want && same < n_got && want_tok[same] == got_tok[same])
        same++;
    int pass = worst <= tol && same == n_want && n_got == n_want;
    printf("%-28s %3ld rows  max rel err %.3e (position %ld)  tokens %d/%d  %s\n", name, compared,
           worst, worst_pos, same, n_want, pass ? "PASS" : "FAIL");
    return pass ? EXIT_PASS : EXIT_FAIL;
}
