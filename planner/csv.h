/* MiniMalloc's CSV format for the bare assignment problem: a header naming the columns id, lower,
 * upper, size (any order; an optional offset column is loaded), then one buffer per line, live
 * over [lower, upper). Solutions are written back with an added offset column. */
#ifndef GP_PLANNER_CSV_H
#define GP_PLANNER_CSV_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "gplan/compile.h" /* gp_buffers_solve: gplan-compile --buffers, built on these */
#include "planner/assign.h"

typedef struct {
    size_t n;
    gp_buffer *buf;  /* [n] */
    char **ids;      /* [n] the id column, kept verbatim for writing back */
    int has_offsets; /* the input had an offset column; its values are in buf[i].offset */
} gp_csv;

/* Parses text[0..len) (name is used in messages). On error returns -1, *out = NULL and err holds
 * `NAME:LINE:COL: error: REASON` (COL: the field's; docs/errors.md lists them), then the line and
 * a caret under the column (ir/diag.h) when it is printable and all of it fits in err; no final
 * newline. */
int gp_csv_parse(const char *text, size_t len, const char *name, gp_csv **out, char *err,
                 size_t err_len);

/* Reads and parses a file; errors as gp_csv_parse, or `PATH: cannot read (REASON)`. */
int gp_csv_read(const char *path, gp_csv **out, char *err, size_t err_len);

/* Writes `id,lower,upper,size,offset` rows; -1 with `PATH: cannot write (reason)` on failure. */
int gp_csv_write(const char *path, const gp_csv *c, char *err, size_t err_len);

void gp_csv_free(gp_csv *c);

#endif
