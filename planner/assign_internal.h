/* Internal to offset assignment (assign.c, assign_greedy.c, assign_exact.c): the prepared problem
 * shared by the heuristics and the exact search. Not part of the public API. */
#ifndef GP_PLANNER_ASSIGN_INTERNAL_H
#define GP_PLANNER_ASSIGN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "planner/assign.h"

/* Time is cut into sections: section s is [t[s], t[s+1]) over the sorted distinct lifespan ends,
 * so the set of live buffers is constant inside a section. A partition is a maximal range of
 * sections that no buffer crosses out of; partitions are independent sub-problems. */
typedef struct {
    size_t n;
    const gp_buffer *b;  /* [n] the caller's buffers (offsets ignored) */
    int ns;              /* number of sections */
    int *lo, *hi;        /* [n] section span [lo, hi) of each buffer */
    int64_t *sec_total;  /* [ns] sum of sizes live in each section */
    int64_t lower_bound; /* max of sec_total */
    int np;              /* number of partitions */
    int *part;           /* [n] partition of each buffer */
    int *part_s0;        /* [np] first section of each partition */
    int *part_s1;        /* [np] one past its last section */
    int64_t *part_lb;    /* [np] max section total inside it */
    int *part_buf;       /* [n] buffer ids grouped by partition (ascending within one) */
    int *part_start;     /* [np + 1] partition p's buffers are part_buf[part_start[p] ..] */
    int64_t pairs;       /* pairs of buffers overlapping in time (counted up to a limit) */
    int64_t *adj_start;  /* [n + 1] CSR of each buffer's time-overlapping buffers, */
    int *adj;            /* [2 pairs] or both NULL when pairs exceed GP_ADJ_PAIR_LIMIT */
} gp_aprob;

/* Above this many overlapping pairs the heuristics use the interval tree instead of lists. */
enum { GP_ADJ_PAIR_LIMIT = 16000000 };

/* Fills p from b (already validated); 0 on success, -1 when out of memory. */
int gp_aprob_init(gp_aprob *p, const gp_buffer *b, size_t n);
void gp_aprob_release(gp_aprob *p);

/* qsort keys of the orders (assign.c): gp_key3, three keys compared descending, ties by index;
 * gp_lokey, a buffer's first section ascending, ties by index. */
typedef struct {
    double k[3];
    int idx;
} gp_key3;
int gp_key3_cmp(const void *pa, const void *pb);
typedef struct {
    int lo, idx;
} gp_lokey;
int gp_lokey_cmp(const void *pa, const void *pb);

/* Seconds on a monotonic clock. */
double gp_assign_now(void);

/* The heuristic orders (assign_greedy.c). */
enum { GP_GREEDY_ORDERS = 5 };
const char *gp_greedy_name(int order);

/* Places every buffer in the given order with best fit among time-overlapping placed buffers;
 * writes off[i] for every buffer whose partition q has skip[q] == 0 (skip may be NULL).
 * use_tree forces the interval tree even when the overlap lists exist (tests compare the two).
 * 0 on success, -1 when out of memory. */
int gp_greedy_run(const gp_aprob *p, int order, const unsigned char *skip, int use_tree, int64_t *off);

/* Sorts n (start, end) pairs by start (stable); returns whichever of v and scratch ([2 n] each)
 * holds the result. */
int64_t *gp_pairs_sort(int64_t *v, int n, int64_t *scratch);

/* Ruin-and-recreate improvement of partition q (assign_improve.c): moves the partition's buffers
 * in off (a valid placement on entry, still valid on return) to shrink their area above target;
 * the partition's peak never rises. Stops when every buffer is at or below target, after
 * max_moves moves or at deadline (gp_assign_now() seconds). 0 on success, -1 when out of memory. */
typedef struct {
    int64_t moves, accepted; /* moves tried, moves kept */
    int64_t start_peak, peak; /* the partition's peak before and after */
    double when;              /* gp_assign_now() when the peak last fell (0: never) */
} gp_improve_stats;
int gp_improve_run(const gp_aprob *p, int q, int64_t target, double deadline, int64_t max_moves,
                   uint64_t seed, int64_t *off, gp_improve_stats *stats);

/* Completes a partial placement of partition q: every buffer with off[id] < 0 goes, largest
 * first, into the tightest gap among its placed neighbours in time, else on top. 0 on success,
 * -1 when out of memory. */
int gp_improve_complete(const gp_aprob *p, int q, int64_t *off);

/* Exact search on one partition (assign_exact.c). */
typedef struct gp_exact gp_exact;
typedef enum { GP_EXACT_FOUND, GP_EXACT_INFEASIBLE, GP_EXACT_TIMEOUT, GP_EXACT_NOMEM } gp_exact_status;

/* NULL when out of memory or when the partition is too large to search (see *too_big). */
gp_exact *gp_exact_new(const gp_aprob *p, int part, int size_limit, int *too_big);
void gp_exact_free(gp_exact *e);

/* Decision: a placement of the partition's buffers within capacity, searched until deadline
 * (gp_assign_now() seconds) or, when max_nodes > 0, until that many nodes (TIMEOUT either way).
 * On FOUND writes off[id] for the partition's buffers only. */
gp_exact_status gp_exact_decide(gp_exact *e, int64_t capacity, double deadline, int64_t max_nodes,
                                int64_t *off);

/* After a decision that did not find a placement: the placement the search stood at when it
 * stopped (within the capacity, but partial), off[id] for the partition's buffers, -1 for those
 * not placed. -1 when no search ran (e NULL or never decided). */
int gp_exact_partial(const gp_exact *e, int64_t *off);

/* Nodes expanded so far (for the benchmark's curiosity and tests). */
int64_t gp_exact_nodes(const gp_exact *e);

#endif
