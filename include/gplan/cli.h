/* gplan's command-line helpers: what the gplan-* tools share, for a program of one's own on gplan
 * too: the answers to -h/--help and --version, one form of a usage error, a table of options
 * parsed into typed destinations (numbers in ranges, strings, lists, token ids), and a whole file
 * or stream read into memory. Header-only (nothing of it
 * is in libgplan), installed as <gplan/cli.h>; it needs only the C library.
 *
 *     static int n_threads = 1, verbose;
 *     static const char *out;
 *     const gp_cli_opt opts[] = {
 *         {"--threads", GP_CLI_INT, &n_threads, 1, 256, "--threads needs 1..256", NULL},
 *         {"-o", GP_CLI_STR, &out, 0, 0, NULL, NULL},
 *         {"--verbose", GP_CLI_FLAG, &verbose, 0, 0, NULL, NULL},
 *     };
 *     const char *model = NULL;
 *     int rc = gp_cli_parse("my-tool", "1.0", usage, opts, 3, argc, argv, &model);
 *     if (rc >= 0)
 *         return rc; // 0 after --help or --version, GP_CLI_EXIT_USAGE after a usage error
 */
#ifndef GPLAN_CLI_H
#define GPLAN_CLI_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Exit status of bad usage, for every tool. */
enum { GP_CLI_EXIT_USAGE = 2 };

/* When arg is -h/--help (usage printed to stdout) or --version ("PROG VERSION"): 1, and the tool
 * exits with status 0; otherwise 0. */
static inline int gp_cli_help_version(const char *arg, const char *prog, const char *version,
                                      void (*usage)(FILE *))
{
    if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
        usage(stdout);
        return 1;
    }
    if (!strcmp(arg, "--version")) {
        printf("%s %s\n", prog, version);
        return 1;
    }
    return 0;
}

/* "PROG: MSG[: ARG]" and the pointer to --help on stderr; returns GP_CLI_EXIT_USAGE. */
static inline int gp_cli_usage_error(const char *prog, const char *msg, const char *arg)
{
    fprintf(stderr, "%s: %s%s%s\ntry '%s --help'\n", prog, msg, arg ? ": " : "", arg ? arg : "",
            prog);
    return GP_CLI_EXIT_USAGE;
}

/* 1 when word is an item of list, items separated by commas and spaces ("merge, runtime"). */
static inline int gp_cli_in_list(const char *word, const char *list)
{
    size_t n = strlen(word);
    if (!n || strpbrk(word, ", ")) /* never two items, nor an empty one */
        return 0;
    for (const char *p = list; (p = strstr(p, word)); p += n)
        if ((p == list || p[-1] == ' ' || p[-1] == ',') && (!p[n] || p[n] == ',' || p[n] == ' '))
            return 1;
    return 0;
}

/* What an option's value becomes, in the destination's type. */
typedef enum {
    GP_CLI_FLAG, /* int, set to 1; takes no value */
    GP_CLI_STR,  /* const char *, the value itself */
    GP_CLI_INT,  /* int: a decimal integer in [lo, hi] */
    GP_CLI_I64,  /* int64_t: a decimal integer in [lo, hi] */
    GP_CLI_U64,  /* uint64_t: decimal, 0x hexadecimal or 0 octal, no sign (a seed) */
    GP_CLI_NUM,  /* double: a number in [lo, hi] */
    GP_CLI_LIST, /* const char *[hi]: each value appended, *seen the count; repeatable */
    GP_CLI_DEFINES, /* a LIST of NAME=VALUE (gplan-compile's -D): a value without '=' is bad */
    GP_CLI_IDS,  /* int32_t *: comma-separated integers ("1,2,3"), allocated (the caller frees
                    it, also after a usage error), *seen their count */
} gp_cli_kind;

typedef struct {
    const char *name; /* as given on the command line: "--temp", "-n" */
    gp_cli_kind kind;
    void *dst;
    double lo, hi;    /* INT, I64, NUM: the values allowed; LIST: the most values */
    /* The usage error for a bad value (the value follows it, "bad --temp: x"); a LIST's for an
     * empty value, a DEFINES' also for one without '=' (nothing follows). NULL: "bad NAME". */
    const char *msg;
    int *seen;        /* set to 1 when the option is given (NULL: not kept); LIST, DEFINES, IDS:
                         the count */
} gp_cli_opt;

/* Parses argv[1 .. argc) by opts[n] and at most one positional argument (*positional, left as it
 * is when none; a second is "unexpected argument"; "-" alone is positional). -h/--help prints
 * usage(stdout), --version "PROG VERSION". -1 to go on, or the status to exit with: 0 after help
 * or version, GP_CLI_EXIT_USAGE after a usage error (printed by gp_cli_usage_error: unknown
 * option, missing value, a value out of range, a full LIST: "more than HI NAME values"). */
static inline int gp_cli_parse(const char *prog, const char *version, void (*usage)(FILE *),
                               const gp_cli_opt *opts, size_t n, int argc, char **argv,
                               const char **positional)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (gp_cli_help_version(a, prog, version, usage))
            return 0;
        if (a[0] != '-' || !a[1]) {
            if (*positional)
                return gp_cli_usage_error(prog, "unexpected argument", a);
            *positional = a;
            continue;
        }
        const gp_cli_opt *p = opts;
        while (p < opts + n && strcmp(p->name, a))
            p++;
        if (p == opts + n)
            return gp_cli_usage_error(prog, "unknown option", a);
        char bad[128];
        snprintf(bad, sizeof bad, "bad %s", a);
        const char *msg = p->msg ? p->msg : bad;
        int list = p->kind == GP_CLI_LIST || p->kind == GP_CLI_DEFINES;
        if (p->seen && !list && p->kind != GP_CLI_IDS)
            *p->seen = 1;
        if (p->kind == GP_CLI_FLAG) {
            *(int *)p->dst = 1;
            continue;
        }
        if (!v)
            return gp_cli_usage_error(prog, "missing value for", a);
        i++;
        char *end;
        errno = 0;
        if (p->kind == GP_CLI_STR) {
            *(const char **)p->dst = v;
        } else if (list) {
            if (!*v || (p->kind == GP_CLI_DEFINES && !strchr(v, '=')))
                return gp_cli_usage_error(prog, msg, NULL);
            if (*p->seen >= (int)p->hi) {
                snprintf(bad, sizeof bad, "more than %d %s values", (int)p->hi, a);
                return gp_cli_usage_error(prog, bad, NULL);
            }
            ((const char **)p->dst)[(*p->seen)++] = v;
        } else if (p->kind == GP_CLI_IDS) {
            int32_t **ids = (int32_t **)p->dst;
            int k = 1;
            for (const char *c = v; *c; c++)
                k += *c == ',';
            free(*ids);
            if (!(*ids = (int32_t *)malloc((size_t)k * sizeof **ids)))
                return gp_cli_usage_error(prog, "out of memory", NULL);
            *p->seen = 0;
            for (const char *c = v;; c++) {
                long long x = strtoll(c, &end, 10);
                if (end == c || errno || x < INT32_MIN || x > INT32_MAX || (*end && *end != ','))
                    return gp_cli_usage_error(prog, msg, v);
                (*ids)[(*p->seen)++] = (int32_t)x;
                if (!*(c = end))
                    break;
            }
        } else if (p->kind == GP_CLI_U64) {
            uint64_t x = strtoull(v, &end, 0);
            if (!*v || *end || errno || *v == '-')
                return gp_cli_usage_error(prog, msg, v);
            *(uint64_t *)p->dst = x;
        } else {
            double d = p->kind == GP_CLI_NUM ? strtod(v, &end) : (double)strtoll(v, &end, 10);
            if (!*v || *end || errno || !(d >= p->lo && d <= p->hi))
                return gp_cli_usage_error(prog, msg, v);
            if (p->kind == GP_CLI_INT)
                *(int *)p->dst = (int)d;
            else if (p->kind == GP_CLI_I64)
                *(int64_t *)p->dst = (int64_t)d;
            else
                *(double *)p->dst = d;
        }
    }
    return -1;
}

/* The rest of a stream, NUL-terminated (*len its bytes, the NUL not counted); the caller frees.
 * NULL on a read error or no memory (errno says which). */
static inline char *gp_cli_read_all(FILE *f, size_t *len)
{
    size_t cap = 0, n = 0;
    char *buf = NULL;
    for (;;) {
        char *more = (char *)realloc(buf, cap = 2 * cap + 4097);
        if (!more)
            break;
        buf = more;
        size_t want = cap - n - 1, got = fread(buf + n, 1, want, f);
        n += got;
        if (got == want)
            continue;
        if (ferror(f))
            break;
        buf[*len = n] = '\0';
        return buf;
    }
    free(buf);
    return NULL;
}

/* The whole file at path as gp_cli_read_all reads it; NULL with err set ("PATH: cannot open: No
 * such file or directory", "PATH: cannot read: ..."). */
static inline char *gp_cli_read_file(const char *path, size_t *len, char *err, size_t err_len)
{
    FILE *f = fopen(path, "rb");
    char *buf = f ? gp_cli_read_all(f, len) : NULL;
    if (!buf)
        snprintf(err, err_len, "%s: cannot %s: %s", path, f ? "read" : "open", strerror(errno));
    if (f)
        fclose(f);
    return buf;
}

#endif
