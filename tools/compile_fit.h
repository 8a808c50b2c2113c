/* gplan-compile's memory budgets (--memory, --fit): the bytes a plan of one device needs, and the
 * search for the largest value of one parameter (a context length, a number of sequences) whose
 * plan fits a budget. */
#ifndef GP_TOOLS_COMPILE_FIT_H
#define GP_TOOLS_COMPILE_FIT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "plan/plan.h"

/* What a plan of one device holds on it, from its regions: every byte the runtime allocates for it
 * (the CUDA runtime's own context comes on top). */
typedef struct {
    int64_t weights, state, arena, io, extras, total;
} fit_bytes;

void fit_bytes_of(const gp_plan *p, fit_bytes *b);

/* "cuda=8GiB" or "cpu=512MiB" (B, KiB, MiB, GiB, TiB; K, M, G, T the same; or bare bytes) into
 * the device name and bytes. 0, or -1 with err set. */
int fit_parse_budget(const char *s, char *dev, size_t dev_len, int64_t *bytes, char *err,
                     size_t err_len);

/* Plans the graph with the parameter at value v: 0 and *out, or -1 with err set. */
typedef int (*fit_build_fn)(void *ctx, int64_t v, gp_plan **out, char *err, size_t err_len);

/* The largest v in [1, hi] whose plan fits budget bytes (plans grow with v, so a bisection); hi
 * <= 0: no upper limit given (doubled from 1 until a plan does not fit, at most 2^30). 1 and *best
 * and its bytes (*bb) when one fits; 0 when not even v = 1 does (*bb: that plan's bytes); -1 with
 * err set when a plan cannot be built. */
int fit_search(fit_build_fn build, void *ctx, int64_t hi, int64_t budget, int64_t *best,
               fit_bytes *bb, char *err, size_t err_len);

/* "weights 4.58 GiB, state 2.00 GiB, arena 301.2 MiB, io 0.5 MiB, extras 82.0 KiB" */
void fit_bytes_print(const fit_bytes *b, FILE *out);

#endif
