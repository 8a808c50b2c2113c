/* parity-compare: compares gplan-run's logits and tokens with a Hugging Face parity fixture
 * (tests/parity/NAME: logits.f32 [steps, vocab] and tokens.txt from scripts/parity/make_fixtures.py)
 * and prints one table row. Exit status: 0 within tolerance, 1 not, 2 bad usage or unreadable files.
 *
 * Relative error of a step: max_i |got_i - want_i| / max_i |want_i| over the step's logits row (a
 * non-finite got_i makes it infinite); the run's error is the largest over its steps. The same
 * definition is in scripts/parity/make_fixtures.py. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gplan/cli.h"

enum { EXIT_PASS = 0, EXIT_FAIL = 1, EXIT_USAGE = 2 };

static const char prog[] = "parity-compare";

#define MAX_FILE_BYTES (1L << 30) /* logits files beyond this are not a parity fixture */

typedef struct {
    const char *fixture;    /* folder with logits.f32 and tokens.txt */
    const char *got_logits; /* gplan-run --logits-out: [rows, vocab] f32 */
    const char *got_tokens; /* gplan-run's stdout, or NULL */
    const char *name;
    long skip;              /* leading rows of got_logits that are not steps */
    double tol;
    int require_argmax;     /* argmax of each got step row must be the fixture's token */
} options;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: parity-compare [options] FIXTURE_DIR GOT_LOGITS\n"
            "\n"
            "Compares GOT_LOGITS (gplan-run --logits-out: rows of float32 logits) with\n"
            "FIXTURE_DIR/logits.f32 and, with --got-tokens, gplan-run's tokens with\n"
            "FIXTURE_DIR/tokens.txt. Prints: name, steps, max relative error, worst step,\n"
            "tokens matched, argmax matched, PASS or FAIL.\n"
            "Relative error of a step: max|got - want| / max|want| over its row.\n"
            "\n"
            "options:\n"
            "  --got-tokens FILE   gplan-run's stdout; must list the fixture's tokens exactly\n"
            "  --skip K            GOT_LOGITS starts with K rows that are no step (a teacher-forced\n"
            "                      run with one token per eval: K = prompt length - 1)\n"
            "  --tol X             largest allowed relative error of a step (default 1e-4)\n"
            "  --argmax            the argmax of every step row must be the fixture's token\n"
            "  --name LABEL        the row's first column (default: FIXTURE_DIR)\n"
            "  -h, --help          this help\n"
            "exit status: 0 pass, 1 fail, 2 bad usage or unreadable input\n");
}

/* Reads a whole file (at most MAX_FILE_BYTES) into a NUL-terminated buffer; NULL with a message. */
static char *read_file(const char *path, long *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "parity-compare: %s: cannot open: %s\n", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && n <= MAX_FILE_BYTES &&
        fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL &&
        fread(buf, 1, (size_t)n, f) == (size_t)n) {
        buf[n] = '\0';
        fclose(f);
        *len = n;
        return buf;
    }
    fprintf(stderr, "parity-compare: %s: cannot read (%s)\n", path,
            n > MAX_FILE_BYTES ? "larger than 1 GiB" : "I/O error or out of memory");
    free(buf);
    fclose(f);
    return NULL;
}

/* Token ids separated by spaces, commas or newlines. Returns the count, or -1 with a message. */
static long parse_tokens(const char *path, const char *text, long **out)
{
    long cap = 16, n = 0;
    long *v = malloc((size_t)cap * sizeof *v);
    if (!v)
        return -1;
    const char *p = text;
    for (;;) {
        while (*p == ' ' || *p == ',' || *p == '\n' || *p == '\r' || *p == '\t')
            p++;
        if (!*p)
            break;
        char *end;
        errno = 0;
        long t = strtol(p, &end, 10);
        if (end == p || errno || t < 0 || t > INT32_MAX) {
            fprintf(stderr, "parity-compare: %s: bad token id at offset %ld\n", path,
                    (long)(p - text));
            free(v);
            return -1;
        }
        if (n == cap) {
            cap *= 2;
            long *nv = realloc(v, (size_t)cap * sizeof *v);
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv;
        }
        v[n++] = t;
        p = end;
    }
    *out = v;
    return n;
}

static float f32_le(const unsigned char *b)
{
    uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* max|got - want| / max|want| over one row of n; infinite when got holds a non-finite value. */
static double row_rel_err(const unsigned char *got, const unsigned char *want, long n)
{
    double diff = 0, scale = 0;
    for (long i = 0; i < n; i++) {
        double g = f32_le(got + 4 * i), w = f32_le(want + 4 * i);
        if (!isfinite(g))
            return INFINITY;
        if (fabs(g - w) > diff)
            diff = fabs(g - w);
        if (fabs(w) > scale)
            scale = fabs(w);
    }
    if (scale == 0)
        return diff == 0 ? 0 : INFINITY;
    return diff / scale;
}

static long row_argmax(const unsigned char *row, long n)
{
    long best = 0;
    for (long i = 1; i < n; i++)
        if (f32_le(row + 4 * i) > f32_le(row + 4 * best))
            best = i;
    return best;
}

static int parse_args(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->tol = 1e-4;
    const char *pos[2];
    int n_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return EXIT_PASS;
        } else if (!strcmp(a, "--argmax")) {
            o->require_argmax = 1;
        } else if (!strcmp(a, "--got-tokens") || !strcmp(a, "--skip") || !strcmp(a, "--tol") ||
                   !strcmp(a, "--name")) {
            if (!v)
                return gp_cli_usage_error(prog, "missing value for", a);
            i++;
            if (!strcmp(a, "--got-tokens")) {
                o->got_tokens = v;
            } else if (!strcmp(a, "--name")) {
                o->name = v;
            } else if (!strcmp(a, "--skip")) {
                errno = 0;
                o->skip = strtol(v, &end, 10);
                if (errno || end == v || *end || o->skip < 0 || o->skip > 1000000)
                    return gp_cli_usage_error(prog, "bad --skip", v);
            } else {
                o->tol = strtod(v, &end);
                if (end == v || *end || !(o->tol >= 0) || !isfinite(o->tol))
                    return gp_cli_usage_error(prog, "bad --tol (a number >= 0)", v);
            }
        } else if (a[0] == '-' && a[1]) {
            return gp_cli_usage_error(prog, "unknown option", a);
        } else if (n_pos < 2) {
            pos[n_pos++] = a;
        } else {
            return gp_cli_usage_error(prog, "unexpected argument", a);
        }
    }
    if (n_pos != 2)
        return gp_cli_usage_error(prog, "expected FIXTURE_DIR and GOT_LOGITS", NULL);
    o->fixture = pos[0];
    o->got_logits = pos[1];
    if (!o->name)
        o->name = o->fixture;
    return -1;
}

/* FIXTURE/FILE into a fresh buffer, or NULL with a message. */
static char *read_fixture(const char *dir, const char *file, long *len)
{
    size_t n = strlen(dir) + strlen(file) + 2;
    char *path = malloc(n);
    if (!path)
        return NULL;
    snprintf(path, n, "%s/%s", dir, file);
    char *buf = read_file(path, len);
    free(path);
    return buf;
}

int main(int argc, char **argv)
{
    options o;
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0)
        return rc;
    int status = EXIT_USAGE;
    long want_len = 0, got_len = 0, tok_len = 0, got_tok_len = 0;
    long *want_tok = NULL, *got_tok = NULL, n_got_tok = -1;
    char *tok_text = NULL, *got_tok_text = NULL;
    char *want = read_fixture(o.fixture, "logits.f32", &want_len);
    char *got = read_file(o.got_logits, &got_len);
    tok_text = read_fixture(o.fixture, "tokens.txt", &tok_len);
    if (!want || !got || !tok_text)
        goto done;
    long steps = parse_tokens("tokens.txt", tok_text, &want_tok);
    if (steps < 0)
        goto done;
    if (steps == 0 || want_len % (4 * steps)) {
        fprintf(stderr, "parity-compare: %s: logits.f32 has %ld bytes, not %ld rows of float32\n",
                o.fixture, want_len, steps);
        goto done;
    }
    long vocab = want_len / (4 * steps);
    if (got_len % (4 * vocab) || got_len / (4 * vocab) != o.skip + steps) {
        /* A wrong row count is a parity failure (an eval too many or too few), not bad usage. */
        printf("%-34s %5ld  %-12s got %ld bytes: %.2f rows of %ld, expected %ld + %ld  FAIL\n",
               o.name, steps, "-", got_len, got_len / (4.0 * vocab), vocab, o.skip, steps);
        status = EXIT_FAIL;
        goto done;
    }
    if (o.got_tokens) {
        got_tok_text = read_file(o.got_tokens, &got_tok_len);
        if (!got_tok_text || (n_got_tok = parse_tokens(o.got_tokens, got_tok_text, &got_tok)) < 0)
            goto done;
    }

    const unsigned char *g = (const unsigned char *)got + 4 * vocab * o.skip;
    const unsigned char *w = (const unsigned char *)want;
    double worst = 0;
    long worst_step = 0, argmax_ok = 0;
    for (long s = 0; s < steps; s++) {
        double e = row_rel_err(g + 4 * vocab * s, w + 4 * vocab * s, vocab);
        if (s == 0 || e > worst) {
            worst = e;
            worst_step = s;
        }
        argmax_ok += row_argmax(g + 4 * vocab * s, vocab) == want_tok[s];
    }
    long tok_ok = 0;
    if (o.got_tokens)
        while (tok_ok < steps && tok_ok < n_got_tok && got_tok[tok_ok] == want_tok[tok_ok])
            tok_ok++;
    int pass = worst <= o.tol && (!o.got_tokens || (tok_ok == steps && n_got_tok == steps)) &&
               (!o.require_argmax || argmax_ok == steps);
    char tok_col[64];
    if (o.got_tokens)
        snprintf(tok_col, sizeof tok_col, "%ld/%ld%s", tok_ok, steps,
                 n_got_tok != steps ? "(len)" : "");
    else
        snprintf(tok_col, sizeof tok_col, "-");
    printf("%-34s %5ld  %.3e (step %2ld) <= %.0e  tokens %-9s argmax %ld/%ld  %s\n", o.name, steps,
           worst, worst_step, o.tol, tok_col, argmax_ok, steps, pass ? "PASS" : "FAIL");
    if (o.got_tokens && tok_ok < steps && tok_ok < n_got_tok)
        printf("  first differing token: step %ld, got %ld, expected %ld\n", tok_ok, got_tok[tok_ok],
               want_tok[tok_ok]);
    status = pass ? EXIT_PASS : EXIT_FAIL;
done:
    free(want);
    free(got);
    free(tok_text);
    free(got_tok_text);
    free(want_tok);
    free(got_tok);
    return status;
}
