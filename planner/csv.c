/* Reading and writing MiniMalloc's CSV buffers (see csv.h), and the `gplan-compile --buffers`
 * entry point built on them. */
#include "planner/csv.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ir/core.h"
#include "ir/diag.h"

enum { COL_ID, COL_LOWER, COL_UPPER, COL_SIZE, COL_OFFSET, NUM_COLS };
static const char *const col_names[NUM_COLS] = {"id", "lower", "upper", "size", "offset"};
enum { MAX_COLS = 16 };

void gp_csv_free(gp_csv *c)
{
    if (!c)
        return;
    if (c->ids)
        for (size_t i = 0; i < c->n; i++)
            free(c->ids[i]);
    free(c->ids);
    free(c->buf);
    free(c);
}

/* The message `NAME:LINE:COL: error: REASON` (LINE 0: `NAME: error: REASON`), then the line and a
 * caret as ir/diag.h formats them when the whole of it fits in err. */
static void fail(char *err, size_t err_len, const char *name, const char *text, size_t len,
                 size_t line, size_t col, const char *fmt, ...) __attribute__((format(printf, 8, 9)));
static void fail(char *err, size_t err_len, const char *name, const char *text, size_t len,
                 size_t line, size_t col, const char *fmt, ...)
{
    if (!err || !err_len)
        return;
    char reason[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    gp_diag *d = gp_diag_new(NULL);
    const char *file = d ? gp_diag_add_source(d, name, text, len) : NULL;
    if (!file) { /* out of memory: the message alone */
        if (line)
            snprintf(err, err_len, "%s:%zu:%zu: error: %s", name, line, col, reason);
        else
            snprintf(err, err_len, "%s: error: %s", name, reason);
        gp_diag_free(d);
        return;
    }
    gp_diag_error(d, (gp_loc){file, (int)line, (int)col}, "%s", reason);
    const char *t = gp_diag_text(d);
    size_t n = strlen(t);
    const char *nl = strchr(t, '\n');
    if (n >= err_len && nl) /* too long to quote the line: the first line only */
        n = (size_t)(nl - t);
    if (n >= err_len)
        n = err_len - 1;
    while (n > 0 && t[n - 1] == '\n')
        n--;
    memcpy(err, t, n);
    err[n] = '\0';
    gp_diag_free(d);
}

/* Splits line[0..len) at commas into fields (pointers into line, which gets NULs) and returns how
 * many there are; only the first MAX_COLS + 1 are stored. */
static int split(char *line, size_t len, char **field, size_t *flen)
{
    int nf = 0;
    size_t start = 0;
    for (size_t k = 0; k <= len; k++)
        if (k == len || line[k] == ',') {
            if (nf <= MAX_COLS) {
                field[nf] = line + start;
                flen[nf] = k - start;
            }
            nf++;
            start = k + 1;
        }
    return nf;
}

static int parse_i64(const char *s, size_t len, int64_t *v)
{
    char buf[32];
    if (len == 0 || len >= sizeof buf)
        return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    char *end;
    errno = 0;
    long long x = strtoll(buf, &end, 10);
    if (errno != 0 || *end != '\0' || !(buf[0] == '-' || buf[0] == '+' || (buf[0] >= '0' && buf[0] <= '9')))
        return -1;
    *v = (int64_t)x;
    return 0;
}

typedef struct {
    const char *id;
    size_t line, col;
} id_line;

static int id_line_cmp(const void *pa, const void *pb)
{
    const id_line *a = pa, *b = pb;
    int c = strcmp(a->id, b->id);
    if (c)
        return c;
    return (a->line > b->line) - (a->line < b->line);
}

int gp_csv_parse(const char *text, size_t len, const char *name, gp_csv **out, char *err,
                 size_t err_len)
{
#define FAIL(line, col, ...) fail(err, err_len, name, text, len, (line), (col), __VA_ARGS__)
    *out = NULL;
    if (err && err_len)
        err[0] = '\0';
    const char *nul = memchr(text, '\0', len);
    if (nul) {
        size_t line = 1, line_start = 0;
        for (size_t k = 0; text + k < nul; k++)
            if (text[k] == '\n') {
                line++;
                line_start = k + 1;
            }
        FAIL(line, (size_t)(nul - text) - line_start + 1, "NUL byte (is this a binary file?)");
        return -1;
    }
    char *copy = malloc(len + 1);
    gp_csv *c = calloc(1, sizeof *c);
    size_t cap = 0;
    id_line *at = NULL, *order = NULL; /* each buffer's line and the column of its id */
    if (!copy || !c) {
        FAIL(0, 0, "out of memory");
        goto bad;
    }
    memcpy(copy, text, len);
    copy[len] = '\0';
    int col_of[NUM_COLS] = {-1, -1, -1, -1, -1}; /* field index of each named column */
    int ncols = 0;
    size_t lineno = 0, pos = 0;
    while (pos < len || lineno == 0) {
        lineno++;
        char *line = copy + pos;
        char *nl = memchr(line, '\n', len - pos);
        size_t llen = nl ? (size_t)(nl - line) : len - pos;
        pos += llen + (nl ? 1 : 0);
        if (llen > 0 && line[llen - 1] == '\r')
            llen--;
        line[llen] = '\0';
        char *field[MAX_COLS + 1];
        size_t flen[MAX_COLS + 1];
#define COL(f) ((size_t)(field[f] - line) + 1) /* field f's column */
        if (lineno == 1) {
            if (llen == 0) {
                FAIL(lineno, 1, "missing header line id,lower,upper,size");
                goto bad;
            }
            ncols = split(line, llen, field, flen);
            if (ncols > MAX_COLS) {
                FAIL(lineno, COL(MAX_COLS), "more than %d columns in the header", MAX_COLS);
                goto bad;
            }
            for (int f = 0; f < ncols; f++) {
                int which = -1;
                for (int k = 0; k < NUM_COLS; k++)
                    if (strlen(col_names[k]) == flen[f] && memcmp(col_names[k], field[f], flen[f]) == 0)
                        which = k;
                if (which < 0) {
                    FAIL(lineno, COL(f), "unknown column '%.*s' in the header; expected id,lower,upper,size[,offset]",
                         (int)(flen[f] > 40 ? 40 : flen[f]), field[f]);
                    goto bad;
                }
                if (col_of[which] >= 0) {
                    FAIL(lineno, COL(f), "column '%s' appears twice", col_names[which]);
                    goto bad;
                }
                col_of[which] = f;
            }
            for (int k = 0; k < COL_OFFSET; k++)
                if (col_of[k] < 0) {
                    FAIL(lineno, llen + 1, "the header has no '%s' column", col_names[k]);
                    goto bad;
                }
            c->has_offsets = col_of[COL_OFFSET] >= 0;
            if (pos >= len)
                break;
            continue;
        }
        if (llen == 0) {
            if (pos >= len)
                break; /* the final newline */
            FAIL(lineno, 1, "empty line");
            goto bad;
        }
        int nf = split(line, llen, field, flen);
        if (nf != ncols) {
            /* at the first field too many, or at the end of the line */
            FAIL(lineno, nf > ncols ? COL(ncols) : llen + 1, "%d fields, the header has %d", nf,
                 ncols);
            goto bad;
        }
        if (c->n == cap) {
            size_t ncap = cap ? 2 * cap : 64;
            gp_buffer *nb = realloc(c->buf, ncap * sizeof *nb);
            if (nb)
                c->buf = nb;
            char **ni = nb ? realloc(c->ids, ncap * sizeof *ni) : NULL;
            if (ni)
                c->ids = ni;
            id_line *nat = ni ? realloc(at, ncap * sizeof *nat) : NULL;
            if (!nat) {
                FAIL(0, 0, "out of memory");
                goto bad;
            }
            at = nat;
            cap = ncap;
        }
        gp_buffer b = {0, 0, 0, 0};
        int64_t *dst[NUM_COLS] = {NULL, &b.lower, &b.upper, &b.size, &b.offset};
        for (int k = COL_LOWER; k < NUM_COLS; k++) {
            if (col_of[k] < 0)
                continue;
            int f = col_of[k];
            if (parse_i64(field[f], flen[f], dst[k]) != 0) {
                FAIL(lineno, COL(f), "%s '%.*s' is not a 64-bit integer", col_names[k],
                     (int)(flen[f] > 40 ? 40 : flen[f]), field[f]);
                goto bad;
            }
        }
        if (b.lower >= b.upper) {
            FAIL(lineno, COL(col_of[COL_LOWER]), "empty lifespan: lower %lld >= upper %lld",
                 (long long)b.lower, (long long)b.upper);
            goto bad;
        }
        if (b.size <= 0) {
            FAIL(lineno, COL(col_of[COL_SIZE]), "size %lld is not positive", (long long)b.size);
            goto bad;
        }
        if (c->has_offsets && b.offset < 0) {
            FAIL(lineno, COL(col_of[COL_OFFSET]), "offset %lld is negative", (long long)b.offset);
            goto bad;
        }
        int f = col_of[COL_ID];
        if (flen[f] == 0) {
            FAIL(lineno, COL(f), "empty id");
            goto bad;
        }
        char *id = malloc(flen[f] + 1);
        if (!id) {
            FAIL(0, 0, "out of memory");
            goto bad;
        }
        memcpy(id, field[f], flen[f]);
        id[flen[f]] = '\0';
        c->buf[c->n] = b;
        c->ids[c->n] = id;
        at[c->n] = (id_line){id, lineno, COL(f)};
        c->n++;
#undef COL
    }
    /* Ids name buffers in the solution, so they must be unique. */
    if (c->n > 1) {
        order = malloc(c->n * sizeof *order);
        if (!order) {
            FAIL(0, 0, "out of memory");
            goto bad;
        }
        memcpy(order, at, c->n * sizeof *order);
        qsort(order, c->n, sizeof *order, id_line_cmp);
        const id_line *dup = NULL, *first = NULL;
        for (size_t i = 1; i < c->n; i++)
            if (strcmp(order[i].id, order[i - 1].id) == 0 && (!dup || order[i].line < dup->line)) {
                dup = &order[i];
                first = &order[i - 1];
            }
        if (dup) {
            FAIL(dup->line, dup->col, "duplicate id '%.40s', first on line %zu", dup->id,
                 first->line);
            goto bad;
        }
    }
    free(order);
    free(at);
    free(copy);
    *out = c;
    return 0;
bad:
    free(order);
    free(at);
    free(copy);
    gp_csv_free(c);
    return -1;
#undef FAIL
}

int gp_csv_read(const char *path, gp_csv **out, char *err, size_t err_len)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (err && err_len)
            snprintf(err, err_len, "%s: cannot read (%s)", path, strerror(errno));
        return -1;
    }
    size_t n = 0;
    char *text = gp_read_stream(f, &n);
    int rd_err = ferror(f);
    fclose(f);
    if (!text || rd_err) {
        if (err && err_len)
            snprintf(err, err_len, "%s: cannot read (%s)", path, text ? "read error" : "out of memory");
        free(text);
        return -1;
    }
    int rc = gp_csv_parse(text, n, path, out, err, err_len);
    free(text);
    return rc;
}

int gp_csv_write(const char *path, const gp_csv *c, char *err, size_t err_len)
{
    FILE *f = fopen(path, "wb");
    if (!f) {
        if (err && err_len)
            snprintf(err, err_len, "%s: cannot write (%s)", path, strerror(errno));
        return -1;
    }
    int bad = fprintf(f, "id,lower,upper,size,offset\n") < 0;
    for (size_t i = 0; i < c->n && !bad; i++)
        bad = fprintf(f, "%s,%lld,%lld,%lld,%lld\n", c->ids[i], (long long)c->buf[i].lower,
                      (long long)c->buf[i].upper, (long long)c->buf[i].size,
                      (long long)c->buf[i].offset) < 0;
    if (fclose(f) != 0)
        bad = 1;
    if (bad) {
        if (err && err_len)
            snprintf(err, err_len, "%s: cannot write (%s)", path, strerror(errno));
        return -1;
    }
    return 0;
}

int gp_buffers_solve(const char *in, const char *out, int64_t capacity, double time_limit,
                     gp_strategy s, FILE *log)
{
    if (!log)
        log = stderr;
    char err[3 * 4096]; /* a message, a quoted line and its caret */
    gp_csv *c = NULL;
    if (gp_csv_read(in, &c, err, sizeof err) != 0) {
        fprintf(log, "%s\n", err);
        return 1;
    }
    gp_assign_opts opts = {s, time_limit, capacity};
    gp_assign_result r;
    gp_assign_status st = gp_assign(c->buf, c->n, &opts, &r);
    if (st == GP_ASSIGN_ERROR) {
        fprintf(log, "%s: cannot assign offsets (%s)\n", in, r.method);
        gp_csv_free(c);
        return 2;
    }
    double ratio = r.lower_bound > 0 ? (double)r.peak / (double)r.lower_bound : 1.0;
    fprintf(log, "%s: %zu buffers, lower bound %lld, peak %lld (%.4fx%s), %.2f s, %s\n", in, c->n,
            (long long)r.lower_bound, (long long)r.peak, ratio, r.optimal ? ", optimal" : "",
            r.seconds, r.method);
    if (st == GP_ASSIGN_NO_FIT) {
        fprintf(log, "%s: no placement within capacity %lld found in the time limit\n", in,
                (long long)capacity);
        gp_csv_free(c);
        return 3;
    }
    if (gp_assign_check(c->buf, c->n, capacity, err, sizeof err) != 0) {
        fprintf(log, "%s: internal error: the assignment fails the check: %s\n", in, err);
        gp_csv_free(c);
        return 2;
    }
    int rc = 0;
    if (gp_csv_write(out, c, err, sizeof err) != 0) {
        fprintf(log, "%s\n", err);
        rc = 2;
    }
    gp_csv_free(c);
    return rc;
}
