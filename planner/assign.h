/* Offset assignment: place buffers with known lifespans and sizes in one block so that buffers
 * alive at the same time never overlap. This is the bare problem, independent of graphs: the
 * planner turns tensors into gp_buffers (sizes already rounded up to the alignment), and
 * `gplan-compile --buffers` reads it from MiniMalloc's CSV format. */
#ifndef GP_PLANNER_ASSIGN_H
#define GP_PLANNER_ASSIGN_H

#include <stddef.h>
#include <stdint.h>

#include "gplan/plan.h" /* gp_strategy */

typedef struct {
    int64_t lower, upper; /* alive over [lower, upper), half-open; lower < upper */
    int64_t size;         /* bytes, > 0 */
    int64_t offset;       /* the answer: written by gp_assign */
} gp_buffer;

typedef struct {
    gp_strategy strategy;
    double time_limit; /* seconds for the search after the heuristics (exact search, ruin and
                        * recreate); <= 0 means the default (10 s) */
    int64_t capacity;  /* 0: minimize the peak; > 0: the answer must fit in this many bytes */
} gp_assign_opts;

typedef enum {
    GP_ASSIGN_OK,     /* every buffer placed (within capacity when one was given) */
    GP_ASSIGN_NO_FIT, /* capacity given and no fitting placement found within the time limit */
    GP_ASSIGN_ERROR,  /* bad input (empty lifespan, size <= 0) or out of memory */
} gp_assign_status;

typedef struct {
    gp_assign_status status;
    int64_t peak;        /* max over buffers of offset + size */
    int64_t lower_bound; /* largest sum of sizes alive at one time */
    int64_t proven_bound; /* >= lower_bound: the exact search proved that no peak is lower */
    int optimal;         /* peak == lower_bound, or the exact search proved optimality */
    double seconds;      /* wall time spent */
    double seconds_best; /* wall time until the final peak was first reached */
    char method[32];     /* which heuristic or search produced the answer, e.g. "greedy-size" */
} gp_assign_result;

/* The largest sum of sizes alive at the same time (one sweep over sorted events). */
int64_t gp_assign_lower_bound(const gp_buffer *b, size_t n);

/* Assigns b[i].offset for every buffer. Returns the status (also in r->status). */
gp_assign_status gp_assign(gp_buffer *b, size_t n, const gp_assign_opts *opts, gp_assign_result *r);

/* The checker, independent of the assigner's code: 0 when no two buffers alive at the same time
 * overlap, every offset is >= 0 and (capacity > 0) offset + size <= capacity; else -1 with the
 * first conflict described in why (ids are indices into b). */
int gp_assign_check(const gp_buffer *b, size_t n, int64_t capacity, char *why, size_t why_len);

#endif
