/* Diagnostics for user input: formats `file:line:col: error: message` with the quoted source line
 * and a caret, keeps everything printed in memory (for tests) and counts errors. */
#include "ir/diag.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ir/core.h"

#define GP_DIAG_MAX_KEPT 100
#define GP_DIAG_MAX_QUOTE 4096 /* bytes of a source line quoted under a message */

typedef struct {
    char *name; /* the stable name handed out as gp_loc.file */
    char *text; /* [len + 1], a copy of the source */
    size_t len;
} diag_source;

struct gp_diag {
    FILE *out;
    diag_source *srcs;
    int n_srcs, cap_srcs;
    char *buf; /* everything printed, NUL-terminated */
    size_t len, cap;
    int count;
};

gp_diag *gp_diag_new(FILE *out)
{
    gp_diag *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->out = out;
    d->buf = calloc(1, 1);
    if (!d->buf) {
        free(d);
        return NULL;
    }
    d->cap = 1;
    return d;
}

void gp_diag_free(gp_diag *d)
{
    if (!d)
        return;
    for (int i = 0; i < d->n_srcs; i++) {
        free(d->srcs[i].name);
        free(d->srcs[i].text);
    }
    free(d->srcs);
    free(d->buf);
    free(d);
}

static char *dup_bytes(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (!p)
        return NULL;
    if (n)
        memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

const char *gp_diag_add_source(gp_diag *d, const char *file, const char *text, size_t len)
{
    if (!d || !file)
        return NULL;
    if (d->n_srcs == d->cap_srcs) {
        int cap = d->cap_srcs ? 2 * d->cap_srcs : 4;
        diag_source *s = realloc(d->srcs, (size_t)cap * sizeof *s);
        if (!s)
            return NULL;
        d->srcs = s;
        d->cap_srcs = cap;
    }
    diag_source *s = &d->srcs[d->n_srcs];
    s->name = dup_bytes(file, strlen(file));
    s->text = dup_bytes(text ? text : "", text ? len : 0);
    s->len = text ? len : 0;
    if (!s->name || !s->text) {
        free(s->name);
        free(s->text);
        return NULL;
    }
    d->n_srcs++;
    return s->name;
}

/* The source registered as `file`: by pointer first (the usual case), then by name. The latest
 * registration wins when a name was registered twice. */
static const diag_source *find_source(const gp_diag *d, const char *file)
{
    for (int i = d->n_srcs - 1; i >= 0; i--)
        if (d->srcs[i].name == file)
            return &d->srcs[i];
    for (int i = d->n_srcs - 1; i >= 0; i--)
        if (strcmp(d->srcs[i].name, file) == 0)
            return &d->srcs[i];
    return NULL;
}

/* Line `line` (1-based) of s: start and length without the line ending; 0 if past the end. */
static int find_line(const diag_source *s, int line, const char **start, size_t *len)
{
    size_t pos = 0;
    for (int l = 1; l < line; l++) {
        const char *nl = memchr(s->text + pos, '\n', s->len - pos);
        if (!nl)
            return 0;
        pos = (size_t)(nl - s->text) + 1;
    }
    if (pos >= s->len)
        return 0;
    size_t end = pos;
    while (end < s->len && s->text[end] != '\n')
        end++;
    if (end > pos && s->text[end - 1] == '\r')
        end--;
    *start = s->text + pos;
    *len = end - pos;
    return 1;
}

/* A line worth quoting: no control bytes but tabs (a NUL, a terminal escape: binary data) and not
 * enormous. Bytes from 0x80 up are left to the terminal (UTF-8 text). */
static int printable(const char *line, size_t len)
{
    if (len > GP_DIAG_MAX_QUOTE)
        return 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)line[i];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return 0;
    }
    return 1;
}

static void emit(gp_diag *d, const char *s, size_t n)
{
    if (d->len + n + 1 > d->cap) {
        size_t cap = d->cap;
        while (d->len + n + 1 > cap)
            cap *= 2;
        char *b = realloc(d->buf, cap);
        if (!b)
            return; /* out of memory: the text loses this piece, the count stays right */
        d->buf = b;
        d->cap = cap;
    }
    memcpy(d->buf + d->len, s, n);
    d->len += n;
    d->buf[d->len] = '\0';
    if (d->out)
        fwrite(s, 1, n, d->out);
}

static void emits(gp_diag *d, const char *s) { emit(d, s, strlen(s)); }

void gp_diag_verror(gp_diag *d, gp_loc loc, const char *fmt, va_list ap)
{
    if (!d)
        return;
    d->count++;
    if (d->count > GP_DIAG_MAX_KEPT) {
        if (d->count == GP_DIAG_MAX_KEPT + 1)
            emits(d, "error: too many errors, stopping\n");
        return;
    }

    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    char *msg = malloc(n > 0 ? (size_t)n + 1 : 1);
    if (!msg)
        return;
    if (n > 0)
        vsnprintf(msg, (size_t)n + 1, fmt, ap);
    else
        msg[0] = '\0';

    char head[64];
    if (loc.file) {
        emits(d, loc.file);
        if (loc.line > 0) {
            if (loc.col > 0)
                snprintf(head, sizeof head, ":%d:%d", loc.line, loc.col);
            else
                snprintf(head, sizeof head, ":%d", loc.line);
            emits(d, head);
        }
        emits(d, ": ");
    }
    emits(d, "error: ");
    emits(d, msg);
    emits(d, "\n");
    free(msg);

    const diag_source *s = loc.file && loc.line > 0 ? find_source(d, loc.file) : NULL;
    const char *line;
    size_t len;
    if (!s || !find_line(s, loc.line, &line, &len) || !printable(line, len))
        return;
    emit(d, line, len);
    emits(d, "\n");
    if (loc.col <= 0)
        return;
    /* Columns count bytes. Tabs are copied so that the caret lines up however the terminal expands
     * them, and a UTF-8 character takes one space, not one per byte. A column past the end of the
     * line (a bad location) puts the caret just after it. */
    size_t col = (size_t)loc.col;
    if (col > len + 1)
        col = len + 1;
    for (size_t i = 0; i + 1 < col; i++) {
        unsigned char c = i < len ? (unsigned char)line[i] : ' ';
        if (c >= 0x80 && c < 0xc0)
            continue; /* a continuation byte */
        emits(d, c == '\t' ? "\t" : " ");
    }
    emits(d, "^\n");
}

void gp_diag_error(gp_diag *d, gp_loc loc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    gp_diag_verror(d, loc, fmt, ap);
    va_end(ap);
}

int gp_diag_count(const gp_diag *d) { return d ? d->count : 0; }

const char *gp_diag_text(const gp_diag *d) { return d ? d->buf : ""; }
