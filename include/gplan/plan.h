/* gplan's plan API: a plan file (docs/plan-format.md) loaded and validated, shown (its summary, the
 * tensor table, the arena's map over the steps, JSON, SVG) and written. Library libgplan, installed
 * as <gplan/plan.h>; <gplan/compile.h> makes plans, <gplan/gplan.h> runs them (gp_model_load), and
 * gplan-inspect is a thin main over this header.
 *
 *     char err[1024];
 *     gp_plan *p = NULL;
 *     if (gp_plan_load("gpt2.plan", &p, err, sizeof err)) { fprintf(stderr, "%s\n", err); ... }
 *     gp_plan_summary_print(p, stdout);                    // regions, arena vs its lower bound
 *     gp_plan_memory m;
 *     gp_plan_memory_of(p, &m);                            // m.total: bytes on one device
 *     gp_plan_free(p);
 *
 * A plan is read-only once loaded: any number of threads may print one at once.
 *
 * Errors: functions return -1 (or NULL) with a message in err, as <gplan/text.h>'s; the printers
 * write to a FILE and return -1 only when out of memory.
 */
#ifndef GPLAN_PLAN_H
#define GPLAN_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gp_plan gp_plan; /* every tensor's region, offset and lifetime, every node */

/* Limits every plan obeys (the loader refuses a file beyond them). */
#define GP_PLAN_MAX_DEVICES 64
#define GP_PLAN_MAX_ALIGNMENT ((int64_t)1 << 20) /* alignments are powers of two up to 1 MiB */
#define GP_PLAN_MAX_DIM ((int64_t)1 << 40)

/* How the arena's offsets were chosen; a plan file records it (its META section), so the values
 * are fixed. */
typedef enum {
    GP_STRATEGY_AUTO,   /* heuristics, then the exact search while above the lower bound */
    GP_STRATEGY_GREEDY, /* heuristics only */
    GP_STRATEGY_EXACT,  /* the exact search (seeded by the heuristics) */
} gp_strategy;

/* The backends a plan's workspaces can be sized for (gplan-compile --backend; a bit mask in
 * gp_plan_opts.backends, <gplan/compile.h>). A plan sized for one backend is refused by the other
 * at session creation when a workspace is too small. */
typedef enum { GP_BACKEND_CPU, GP_BACKEND_CUDA, GP_BACKEND_COUNT } gp_backend;
#define GP_BACKEND_BIT(b) (1u << (b))
#define GP_BACKENDS_ALL ((1u << GP_BACKEND_COUNT) - 1u)

const char *gp_backend_name(gp_backend b); /* "cpu", "cuda"; "?" out of range */

/* ---- files ---- */

/* Loads and validates a plan file (untrusted input). On failure returns -1, sets *out = NULL and
 * writes `FILE: bad plan file (REASON)` (or `FILE: cannot read: ...`) to err. */
int gp_plan_load(const char *path, gp_plan **out, char *err, size_t err_len);
/* The same from bytes in memory; `name` stands for FILE in messages. */
int gp_plan_load_mem(const void *data, size_t len, const char *name, gp_plan **out, char *err,
                     size_t err_len);
void gp_plan_free(gp_plan *p); /* NULL is a no-op */

/* Writes the plan file (to PATH.tmp, then renamed over PATH). 0, or -1 with a message
 * `PATH: ...` in err. */
int gp_plan_write(const gp_plan *p, const char *path, char *err, size_t err_len);
/* The plan file's bytes in memory; *data is malloc'd (the caller frees). 0 or -1 with err. */
int gp_plan_write_mem(const gp_plan *p, unsigned char **data, size_t *len, char *err,
                      size_t err_len);

/* ---- what it holds ---- */

/* The summary the tools print: sizes of every region, the arena against its lower bound and the
 * naive size, in-place count, planning time. */
void gp_plan_summary_print(const gp_plan *p, FILE *out);
/* The tensor table after a blank line: id, name, kind, dtype, shape (symbolic dims as T=8), region,
 * offset, size, first and last step, and what it shares or is (in-place of, view of, workspace of,
 * the weight's checkpoint name and split). */
void gp_plan_table_print(const gp_plan *p, FILE *out);
/* The arena's map over the schedule after a blank line: a row per step, width columns (at least
 * 1) of arena bytes each, every live tensor drawn with its symbol (a legend follows; they repeat after
 * 62 tensors) and '!' where two tensors that share no storage overlap. 0, or -1 when out of
 * memory (nothing printed). */
int gp_plan_timeline_print(const gp_plan *p, int width, FILE *out);
/* Everything as one JSON object and a newline (gplan-inspect --json; the keys are its --help's).
 * 0, or -1 when out of memory or out cannot be written (the newline is written either way). */
int gp_plan_json_print(const gp_plan *p, FILE *out);
/* An SVG picture of the arena: x the step, y the offset, a rectangle per tensor (blue
 * intermediate, green in-place, orange workspace; its name on hover), the lower bound as a red
 * line. */
void gp_plan_svg_print(const gp_plan *p, FILE *out);

/* bytes as text into buf: "512 B", "1.50 KiB" ... "2.00 TiB" (binary units); returns buf */
const char *gp_plan_bytes_text(int64_t bytes, char *buf, size_t n);

/* What a plan of one device holds on it, from its regions: every byte the runtime allocates for
 * it (the CUDA runtime's own context comes on top). */
typedef struct {
    int64_t weights, state, arena, io, extras, total;
} gp_plan_memory;

void gp_plan_memory_of(const gp_plan *p, gp_plan_memory *m);
/* "weights 4.58 GiB, state 2.00 GiB, arena 301.20 MiB, io 512.00 KiB, extras 82.00 KiB" */
void gp_plan_memory_print(const gp_plan_memory *m, FILE *out);

#ifdef __cplusplus
}
#endif

#endif
