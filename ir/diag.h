/* Diagnostics for user input: `file:line:col: error: message`, then the source line and a caret.
 * Every IR node keeps the location it came from, so any stage can point at the source. */
#ifndef GP_IR_DIAG_H
#define GP_IR_DIAG_H

#include <stdarg.h>
#include <stdio.h>

typedef struct {
    const char *file; /* owned by the gp_diag that registered the source; NULL when unknown */
    int line, col;    /* 1-based; 0 when unknown */
} gp_loc;

typedef struct gp_diag gp_diag;

/* A sink that prints to `out` (stderr usually). With out == NULL messages are only kept in memory
 * (tests read them with gp_diag_text). */
gp_diag *gp_diag_new(FILE *out);
void gp_diag_free(gp_diag *d);

/* Registers a source text (copied) so that messages can quote its lines; returns the stable file
 * name to put in gp_loc.file. */
const char *gp_diag_add_source(gp_diag *d, const char *file, const char *text, size_t len);

/* Reports an error at loc (printf-style): `FILE:LINE:COL: error: MESSAGE` (the parts of loc that are
 * unknown left out), then, when loc.file's text was registered and the line is printable (no
 * control bytes but tabs, at most 4096 bytes), the line and a caret under the column. Messages
 * past a limit (100) are counted, not kept. */
void gp_diag_error(gp_diag *d, gp_loc loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void gp_diag_verror(gp_diag *d, gp_loc loc, const char *fmt, va_list ap);

int gp_diag_count(const gp_diag *d);   /* errors reported so far */
const char *gp_diag_text(const gp_diag *d); /* everything reported so far, as printed */

#endif
