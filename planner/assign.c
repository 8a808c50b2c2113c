/* Offset assignment driver: validates the buffers, computes the lower bound, runs the heuristic
 * orders and then, while above the target, the exact search on each independent partition. */
#include "planner/assign.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "planner/assign_internal.h"

/* The exact search gives up on partitions with more overlapping pairs than this (its adjacency
 * lists would not fit in memory, and nodes cost O(buffers) each). */
enum { AUTO_PAIR_LIMIT = 8000000, EXACT_PAIR_LIMIT = 40000000 };
/* AUTO also skips partitions this large: a node costs O(buffers), so a leaf is out of reach. */
enum { AUTO_BUFFER_LIMIT = 32768 };
static const double DEFAULT_TIME_LIMIT = 10.0;
/* Probes: nodes per buffer of a partition, and when to stop bisecting (within 1/PROBE_CLOSE). */
enum { PROBE_NODES = 4, PROBE_CLOSE = 2000 };
/* The share of the time limit the exact search may use when minimizing. */
static const double EXACT_SHARE = 0.6;

double gp_assign_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- lower bound: one sweep over sorted events ---- */

typedef struct {
    int64_t t;
    int64_t delta; /* +size at a start, -size at an end */
} event;

static int event_cmp(const void *pa, const void *pb)
{
    const event *a = pa, *b = pb;
    if (a->t != b->t)
        return a->t < b->t ? -1 : 1;
    /* Lifespans are half-open: at equal times ends (negative deltas) come first. */
    if ((a->delta < 0) != (b->delta < 0))
        return a->delta < 0 ? -1 : 1;
    return 0;
}

int64_t gp_assign_lower_bound(const gp_buffer *b, size_t n)
{
    if (n == 0)
        return 0;
    event *ev = malloc(2 * n * sizeof *ev);
    if (!ev)
        return -1;
    for (size_t i = 0; i < n; i++) {
        ev[2 * i] = (event){b[i].lower, b[i].size};
        ev[2 * i + 1] = (event){b[i].upper, -b[i].size};
    }
    qsort(ev, 2 * n, sizeof *ev, event_cmp);
    int64_t live = 0, best = 0;
    for (size_t i = 0; i < 2 * n; i++) {
        live += ev[i].delta;
        if (live > best)
            best = live;
    }
    free(ev);
    return best;
}

/* ---- the prepared problem ---- */

static int i64_cmp(const void *pa, const void *pb)
{
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    return (a > b) - (a < b);
}

static int coord_index(const int64_t *t, int nt, int64_t v)
{
    int lo = 0, hi = nt - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (t[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void gp_aprob_release(gp_aprob *p)
{
    free(p->lo);
    free(p->hi);
    free(p->sec_total);
    free(p->part);
    free(p->part_s0);
    free(p->part_s1);
    free(p->part_lb);
    free(p->part_buf);
    free(p->part_start);
    free(p->adj_start);
    free(p->adj);
    memset(p, 0, sizeof *p);
}

int gp_key3_cmp(const void *pa, const void *pb)
{
    const gp_key3 *a = pa, *b = pb;
    for (int i = 0; i < 3; i++)
        if (a->k[i] != b->k[i])
            return a->k[i] > b->k[i] ? -1 : 1;
    return (a->idx > b->idx) - (a->idx < b->idx);
}

int gp_lokey_cmp(const void *pa, const void *pb)
{
    const gp_lokey *a = pa, *b = pb;
    if (a->lo != b->lo)
        return a->lo < b->lo ? -1 : 1;
    return (a->idx > b->idx) - (a->idx < b->idx);
}

/* Counts the overlapping pairs and, when there are few enough, lists them per buffer. */
static int build_adjacency(gp_aprob *p)
{
    size_t n = p->n;
    gp_lokey *s = malloc(n * sizeof *s);
    if (!s)
        return -1;
    for (size_t i = 0; i < n; i++)
        s[i] = (gp_lokey){p->lo[i], (int)i};
    qsort(s, n, sizeof *s, gp_lokey_cmp);
    /* In start order, the buffers that start before k ends overlap k. */
    int64_t pairs = 0;
    for (size_t k = 0; k < n && pairs <= GP_ADJ_PAIR_LIMIT; k++) {
        size_t a = k + 1, e = n;
        int end = p->hi[s[k].idx];
        while (a < e) {
            size_t mid = a + (e - a) / 2;
            if (s[mid].lo < end)
                a = mid + 1;
            else
                e = mid;
        }
        pairs += (int64_t)(a - k - 1);
    }
    p->pairs = pairs;
    if (pairs > GP_ADJ_PAIR_LIMIT) {
        free(s);
        return 0;
    }
    p->adj_start = calloc(n + 1, sizeof *p->adj_start);
    p->adj = malloc((size_t)(2 * pairs + 1) * sizeof *p->adj);
    int64_t *fill = malloc((n + 1) * sizeof *fill);
    if (!p->adj_start || !p->adj || !fill) {
        free(s);
        free(fill);
        return -1;
    }
    for (size_t k = 0; k < n; k++)
        for (size_t j = k + 1; j < n && s[j].lo < p->hi[s[k].idx]; j++) {
            p->adj_start[s[k].idx + 1]++;
            p->adj_start[s[j].idx + 1]++;
        }
    for (size_t i = 0; i < n; i++)
        p->adj_start[i + 1] += p->adj_start[i];
    memcpy(fill, p->adj_start, n * sizeof *fill);
    for (size_t k = 0; k < n; k++)
        for (size_t j = k + 1; j < n && s[j].lo < p->hi[s[k].idx]; j++) {
            p->adj[fill[s[k].idx]++] = s[j].idx;
            p->adj[fill[s[j].idx]++] = s[k].idx;
        }
    free(fill);
    free(s);
    return 0;
}

int gp_aprob_init(gp_aprob *p, const gp_buffer *b, size_t n)
{
    memset(p, 0, sizeof *p);
    p->n = n;
    p->b = b;
    int64_t *t = malloc(2 * n * sizeof *t);
    int64_t *cut = NULL; /* [ns] buffers crossing from section s into s + 1 */
    int *psec = NULL;    /* [ns] partition of each section, before dropping empty ones */
    int *remap = NULL;
    p->lo = malloc(n * sizeof *p->lo);
    p->hi = malloc(n * sizeof *p->hi);
    p->part = malloc(n * sizeof *p->part);
    p->part_buf = malloc(n * sizeof *p->part_buf);
    if (!t || !p->lo || !p->hi || !p->part || !p->part_buf)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        t[2 * i] = b[i].lower;
        t[2 * i + 1] = b[i].upper;
    }
    qsort(t, 2 * n, sizeof *t, i64_cmp);
    int nt = 0;
    for (size_t i = 0; i < 2 * n; i++)
        if (nt == 0 || t[nt - 1] != t[i])
            t[nt++] = t[i];
    int ns = nt - 1; /* >= 1 since every lifespan is non-empty */
    p->ns = ns;
    p->sec_total = calloc((size_t)ns + 1, sizeof *p->sec_total);
    cut = calloc((size_t)ns + 1, sizeof *cut);
    psec = malloc((size_t)ns * sizeof *psec);
    remap = malloc((size_t)ns * sizeof *remap);
    if (!p->sec_total || !cut || !psec || !remap)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        p->lo[i] = coord_index(t, nt, b[i].lower);
        p->hi[i] = coord_index(t, nt, b[i].upper);
        p->sec_total[p->lo[i]] += b[i].size;
        p->sec_total[p->hi[i]] -= b[i].size;
        if (p->hi[i] - 1 > p->lo[i]) {
            cut[p->lo[i]]++;
            cut[p->hi[i] - 1]--;
        }
    }
    int64_t run = 0, crossing = 0;
    int np = 0;
    for (int s = 0; s < ns; s++) {
        run += p->sec_total[s];
        p->sec_total[s] = run;
        if (run > p->lower_bound)
            p->lower_bound = run;
        crossing += cut[s];
        psec[s] = np;
        if (crossing == 0)
            np++; /* nothing crosses into s + 1: a new partition starts there */
    }
    p->sec_total[ns] = 0;
    /* Drop partitions without buffers (gaps in time). */
    int *count = calloc((size_t)np + 1, sizeof *count);
    if (!count)
        goto fail;
    for (size_t i = 0; i < n; i++)
        count[psec[p->lo[i]]]++;
    int used = 0;
    for (int q = 0; q < np; q++)
        remap[q] = count[q] ? used++ : -1;
    free(count);
    p->np = used;
    p->part_s0 = malloc((size_t)used * sizeof *p->part_s0);
    p->part_s1 = malloc((size_t)used * sizeof *p->part_s1);
    p->part_lb = calloc((size_t)used, sizeof *p->part_lb);
    p->part_start = calloc((size_t)used + 1, sizeof *p->part_start);
    if (!p->part_s0 || !p->part_s1 || !p->part_lb || !p->part_start)
        goto fail;
    for (int s = 0; s < ns; s++) {
        int q = remap[psec[s]];
        if (q < 0)
            continue;
        if (s == 0 || remap[psec[s - 1]] != q)
            p->part_s0[q] = s;
        p->part_s1[q] = s + 1;
        if (p->sec_total[s] > p->part_lb[q])
            p->part_lb[q] = p->sec_total[s];
    }
    for (size_t i = 0; i < n; i++) {
        p->part[i] = remap[psec[p->lo[i]]];
        p->part_start[p->part[i] + 1]++;
    }
    for (int q = 0; q < used; q++)
        p->part_start[q + 1] += p->part_start[q];
    int *fill = malloc((size_t)used * sizeof *fill);
    if (!fill)
        goto fail;
    memcpy(fill, p->part_start, (size_t)used * sizeof *fill);
    for (size_t i = 0; i < n; i++)
        p->part_buf[fill[p->part[i]]++] = (int)i;
    free(fill);
    if (build_adjacency(p) != 0)
        goto fail;
    free(t);
    free(cut);
    free(psec);
    free(remap);
    return 0;
fail:
    free(t);
    free(cut);
    free(psec);
    free(remap);
    gp_aprob_release(p);
    return -1;
}

/* ---- the driver ---- */

static int validate(const gp_buffer *b, size_t n)
{
    if (n > (size_t)INT_MAX / 4)
        return -1;
    int64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        if (b[i].size <= 0 || b[i].lower >= b[i].upper)
            return -1;
        /* Offsets never exceed the sum of sizes; keeping it below INT64_MAX / 2 keeps every
         * offset + size in range. */
        if (b[i].size > INT64_MAX / 2 - sum)
            return -1;
        sum += b[i].size;
    }
    return 0;
}

typedef struct {
    const gp_aprob *p;
    int64_t *off;       /* [n] the best offsets so far, per partition */
    int64_t *part_peak; /* [np] peak of each partition in off */
    gp_exact **ex;      /* [np] exact searchers, made on first use */
    int pair_limit, buffer_limit;
    int exact_used;     /* the exact search improved some partition */
    int improve_used;   /* ruin and recreate improved some partition */
    int64_t best;       /* the lowest overall peak so far, reached at time t_best */
    double t_best;
    int64_t bound;      /* proven: no placement has a lower peak */
} state;

static int64_t overall_peak(const state *st)
{
    int64_t peak = 0;
    for (int q = 0; q < st->p->np; q++)
        if (st->part_peak[q] > peak)
            peak = st->part_peak[q];
    return peak;
}

/* Records when the overall peak last fell (when: the time it happened). */
static void note_best(state *st, double when)
{
    int64_t peak = overall_peak(st);
    if (peak < st->best) {
        st->best = peak;
        st->t_best = when;
    }
}

static int64_t peak_of(const gp_aprob *p, int q, const int64_t *off)
{
    int64_t peak = 0;
    for (int k = p->part_start[q]; k < p->part_start[q + 1]; k++) {
        int i = p->part_buf[k];
        if (off[i] + p->b[i].size > peak)
            peak = off[i] + p->b[i].size;
    }
    return peak;
}

/* Runs the heuristic orders, keeping the best per partition; a partition at its lower bound is
 * skipped by the later orders. Returns the order that placed the peak partition, -1 on OOM. */
static int run_heuristics(state *st)
{
    const gp_aprob *p = st->p;
    int64_t *tmp = malloc(p->n * sizeof *tmp);
    unsigned char *skip = calloc((size_t)p->np, 1);
    int *from = calloc((size_t)p->np, sizeof *from); /* the order behind each partition's best */
    int rc = -1;
    if (!tmp || !skip || !from)
        goto done;
    for (int o = 0; o < GP_GREEDY_ORDERS; o++) {
        int todo = 0;
        for (int q = 0; q < p->np; q++) {
            skip[q] = o > 0 && st->part_peak[q] <= p->part_lb[q];
            todo += !skip[q];
        }
        if (!todo)
            break;
        if (gp_greedy_run(p, o, skip, 0, tmp) != 0)
            goto done;
        for (int q = 0; q < p->np; q++) {
            if (skip[q])
                continue;
            int64_t pk = peak_of(p, q, tmp);
            if (o == 0 || pk < st->part_peak[q]) {
                st->part_peak[q] = pk;
                from[q] = o;
                for (int k = p->part_start[q]; k < p->part_start[q + 1]; k++)
                    st->off[p->part_buf[k]] = tmp[p->part_buf[k]];
            }
        }
    }
    int64_t peak = overall_peak(st);
    rc = 0;
    for (int q = 0; q < p->np; q++)
        if (st->part_peak[q] == peak) {
            rc = from[q];
            break;
        }
done:
    free(tmp);
    free(skip);
    free(from);
    return rc;
}

/* A probe that ran out of nodes stood at a placement within the capacity but partial, often
 * nearly complete: finished by best fit, it can beat the heuristics (and gives ruin and
 * recreate a better start). Kept when its peak is lower. */
static int salvage(state *st, int q)
{
    const gp_aprob *p = st->p;
    int64_t *tmp = malloc(p->n * sizeof *tmp);
    if (!tmp)
        return -1;
    if (gp_exact_partial(st->ex[q], tmp) != 0) {
        free(tmp);
        return 0;
    }
    if (gp_improve_complete(p, q, tmp) != 0) {
        free(tmp);
        return -1;
    }
    int64_t pk = peak_of(p, q, tmp);
    if (pk < st->part_peak[q]) {
        for (int k = p->part_start[q]; k < p->part_start[q + 1]; k++)
            st->off[p->part_buf[k]] = tmp[p->part_buf[k]];
        st->part_peak[q] = pk;
        st->exact_used = 1;
        note_best(st, gp_assign_now());
    }
    free(tmp);
    return 0;
}

/* Decides whether partition q fits in capacity; on success keeps the offsets. */
static gp_exact_status decide(state *st, int q, int64_t capacity, double deadline, int64_t budget,
                              int *too_big)
{
    if (!st->ex[q]) {
        if (st->p->part_start[q + 1] - st->p->part_start[q] > st->buffer_limit) {
            *too_big = 1;
            return GP_EXACT_TIMEOUT;
        }
        int big = 0;
        st->ex[q] = gp_exact_new(st->p, q, st->pair_limit, &big);
        if (!st->ex[q]) {
            *too_big = big;
            return big ? GP_EXACT_TIMEOUT : GP_EXACT_NOMEM;
        }
    }
    int64_t nodes = budget > 0 ? budget * (st->p->part_start[q + 1] - st->p->part_start[q]) : 0;
    gp_exact_status s = gp_exact_decide(st->ex[q], capacity, deadline, nodes, st->off);
    if (s == GP_EXACT_TIMEOUT && budget > 0 && salvage(st, q) != 0)
        return GP_EXACT_NOMEM;
    if (s == GP_EXACT_FOUND) {
        int64_t pk = peak_of(st->p, q, st->off);
        if (pk < st->part_peak[q])
            st->exact_used = 1;
        st->part_peak[q] = pk;
        note_best(st, gp_assign_now());
    }
    return s;
}

/* All partitions above capacity searched against it; 1 when all fit. *proven stays 1 while every
 * failure was a proof of infeasibility. budget > 0: at most budget nodes per buffer of a
 * partition (a probe, not a proof). */
static int fit_all(state *st, int64_t capacity, double deadline, int64_t budget, int *proven,
                   int *nomem, int *too_big)
{
    for (int q = 0; q < st->p->np; q++) {
        if (st->part_peak[q] <= capacity)
            continue;
        gp_exact_status s = decide(st, q, capacity, deadline, budget, too_big);
        if (s == GP_EXACT_FOUND)
            continue;
        if (s == GP_EXACT_NOMEM)
            *nomem = 1;
        if (s != GP_EXACT_INFEASIBLE)
            *proven = 0;
        else if (capacity + 1 > st->bound)
            st->bound = capacity + 1; /* partitions are independent: the whole needs more too */
        return 0;
    }
    return 1;
}

/* Ruin and recreate on partition q until its peak reaches target or the deadline. */
static void improve(state *st, int q, int64_t target, double deadline, int *nomem)
{
    gp_improve_stats s;
    if (gp_improve_run(st->p, q, target, deadline, INT64_MAX, (uint64_t)q + 1, st->off, &s) != 0) {
        *nomem = 1;
        return;
    }
    if (s.peak < st->part_peak[q]) {
        st->part_peak[q] = s.peak;
        st->improve_used = 1;
        note_best(st, s.when);
    }
}

/* What ruin and recreate aims at in partition q: the capacity when one is given, else the lower
 * bound; -1 when the partition is there already or cannot get there. */
static int64_t improve_target(const state *st, int q, int64_t capacity)
{
    int64_t t = capacity > 0 ? capacity : st->p->part_lb[q];
    return st->part_peak[q] > t && st->p->part_lb[q] <= t ? t : -1;
}

/* Ruin and recreate on every partition above its target (only those too large for the exact
 * search when only_big), the time until deadline shared by buffer count. */
static void improve_all(state *st, int only_big, int64_t capacity, double deadline, int *nomem)
{
    const gp_aprob *p = st->p;
    int64_t total = 0;
    for (int q = 0; q < p->np; q++)
        if (improve_target(st, q, capacity) >= 0 &&
            (!only_big || p->part_start[q + 1] - p->part_start[q] > st->buffer_limit))
            total += p->part_start[q + 1] - p->part_start[q];
    for (int q = 0; q < p->np && total > 0 && !*nomem; q++) {
        int m = p->part_start[q + 1] - p->part_start[q];
        int64_t target = improve_target(st, q, capacity);
        if (target < 0 || (only_big && m <= st->buffer_limit))
            continue;
        double now = gp_assign_now();
        if (now >= deadline)
            return;
        improve(st, q, target, now + (deadline - now) * (double)m / (double)total, nomem);
        total -= m;
    }
}

/* Ruin and recreate on the partitions above their target (capacity, 0: their bounds) too large
 * for the exact search: half the time left when smaller ones above theirs need the search too. */
static void improve_big(state *st, int64_t capacity, double deadline, int *nomem)
{
    const gp_aprob *p = st->p;
    int big = 0, small = 0;
    for (int q = 0; q < p->np; q++)
        if (improve_target(st, q, capacity) >= 0) {
            if (p->part_start[q + 1] - p->part_start[q] > st->buffer_limit)
                big = 1;
            else
                small = 1;
        }
    if (big) {
        double now = gp_assign_now();
        improve_all(st, 1, capacity, small ? now + (deadline - now) / 2 : deadline, nomem);
    }
}

/* Deciding a capacity: ruin and recreate first on the partitions too large for the exact search,
 * the exact search, then ruin and recreate on whatever is still above. */
static void decide_capacity(state *st, int64_t capacity, double deadline, int *proven, int *nomem)
{
    improve_big(st, capacity, deadline, nomem);
    int too_big = 0;
    if (!*nomem && overall_peak(st) > capacity &&
        !fit_all(st, capacity, deadline, 0, proven, nomem, &too_big) && !*nomem && !*proven)
        improve_all(st, 0, capacity, deadline, nomem);
}

/* Minimizing the peak. Partitions too large for the exact search get ruin and recreate first.
 * Then cheap probes (a few nodes per buffer, so a dive or two per order) bisect between the lower
 * bound and the best peak, since on large partitions a search either finds a placement on its
 * first dives or not within any useful time; then the full search tries the lower bound (often
 * reachable, and a proof when not) and bisects; leftover time goes to ruin and recreate. */
static void minimize(state *st, double t0, double deadline, int *proven, int *nomem)
{
    const gp_aprob *p = st->p;
    improve_big(st, 0, deadline, nomem); /* above their bounds: improve_target's at capacity 0 */
    /* The search cannot take the large partitions: the peak stays at least theirs, so capacities
     * below it are not tried (and optimality is not proven while one is above its bound). */
    int64_t floor_big = p->lower_bound;
    for (int q = 0; q < p->np; q++)
        if (p->part_start[q + 1] - p->part_start[q] > st->buffer_limit) {
            if (st->part_peak[q] > floor_big)
                floor_big = st->part_peak[q];
            if (st->part_peak[q] > p->part_lb[q])
                *proven = 0;
        }
    int64_t lo = floor_big, hi = overall_peak(st);
    int first = 1, too_big = 0, unproven = 1;
    double probe_end = t0 + (deadline - t0) / 3;
    while (lo < hi && !*nomem && !too_big && (hi - lo) * PROBE_CLOSE > hi) {
        if (gp_assign_now() >= probe_end)
            break;
        int64_t c = first ? lo : lo + (hi - lo) / 2;
        first = 0;
        if (fit_all(st, c, probe_end, PROBE_NODES, &unproven, nomem, &too_big))
            hi = overall_peak(st);
        else
            lo = c + 1;
    }
    lo = floor_big;
    first = 1;
    too_big = 0;
    /* The full search stops early enough to leave ruin and recreate some time to polish. */
    double exact_end = t0 + (deadline - t0) * EXACT_SHARE;
    while (lo < hi && !*nomem && !too_big) {
        double now = gp_assign_now();
        if (now >= exact_end) {
            *proven = 0;
            break;
        }
        int64_t c = first ? lo : lo + (hi - lo) / 2;
        first = 0;
        double slice = now + (exact_end - now) / 2;
        if (fit_all(st, c, slice, 0, proven, nomem, &too_big))
            hi = overall_peak(st);
        else
            lo = c + 1;
    }
    if (too_big)
        *proven = 0;
    /* Proven optimal above the bound (lo reached hi by proofs): nothing left to improve. */
    if (!*nomem && !(lo >= hi && *proven) && overall_peak(st) > p->lower_bound)
        improve_all(st, 0, 0, deadline, nomem);
}

static void set_method(gp_assign_result *r, const char *name)
{
    snprintf(r->method, sizeof r->method, "%s", name);
}

gp_assign_status gp_assign(gp_buffer *b, size_t n, const gp_assign_opts *opts, gp_assign_result *r)
{
    gp_assign_result local;
    if (!r)
        r = &local;
    memset(r, 0, sizeof *r);
    double t0 = gp_assign_now();
    gp_assign_opts o = {GP_STRATEGY_AUTO, 0, 0};
    if (opts)
        o = *opts;
    if ((!b && n > 0) || validate(b, n) != 0 || o.capacity < 0) {
        set_method(r, "invalid");
        return r->status = GP_ASSIGN_ERROR;
    }
    if (n == 0) {
        r->optimal = 1;
        set_method(r, "empty");
        r->seconds = gp_assign_now() - t0;
        return r->status = GP_ASSIGN_OK;
    }
    double limit = o.time_limit > 0 ? o.time_limit : DEFAULT_TIME_LIMIT;
    double deadline = t0 + limit;

    gp_aprob p;
    if (gp_aprob_init(&p, b, n) != 0) {
        set_method(r, "out of memory");
        return r->status = GP_ASSIGN_ERROR;
    }
    state st = {&p, malloc(n * sizeof(int64_t)), malloc((size_t)p.np * sizeof(int64_t)),
                calloc((size_t)p.np, sizeof(gp_exact *)),
                o.strategy == GP_STRATEGY_EXACT ? EXACT_PAIR_LIMIT : AUTO_PAIR_LIMIT,
                o.strategy == GP_STRATEGY_EXACT ? INT_MAX : AUTO_BUFFER_LIMIT, 0, 0, 0, 0, 0};
    gp_assign_status status = GP_ASSIGN_OK;
    int nomem = 0;
    int order = (st.off && st.part_peak && st.ex) ? run_heuristics(&st) : -1;
    if (order < 0) {
        set_method(r, "out of memory");
        status = GP_ASSIGN_ERROR;
        goto done;
    }
    set_method(r, gp_greedy_name(order));
    r->lower_bound = p.lower_bound;
    int64_t greedy_peak = overall_peak(&st);
    st.best = greedy_peak;
    st.t_best = gp_assign_now();
    st.bound = p.lower_bound;
    int proven = 1;

    if (o.strategy != GP_STRATEGY_GREEDY) {
        if (o.capacity > 0) {
            if (greedy_peak > o.capacity)
                decide_capacity(&st, o.capacity, deadline, &proven, &nomem);
        } else {
            minimize(&st, t0, deadline, &proven, &nomem);
        }
    }
    if (nomem) {
        set_method(r, "out of memory");
        status = GP_ASSIGN_ERROR;
        goto done;
    }
    r->peak = overall_peak(&st);
    if (r->peak < greedy_peak && (st.exact_used || st.improve_used))
        set_method(r, !st.improve_used ? "exact" : st.exact_used ? "exact+improve" : "improve");
    r->optimal = r->peak == p.lower_bound ||
                 (o.strategy != GP_STRATEGY_GREEDY && o.capacity == 0 && proven);
    r->proven_bound = r->optimal ? r->peak : st.bound;
    for (size_t i = 0; i < n; i++)
        b[i].offset = st.off[i];
    if (o.capacity > 0 && r->peak > o.capacity)
        status = GP_ASSIGN_NO_FIT;
done:
    if (st.ex)
        for (int q = 0; q < p.np; q++)
            gp_exact_free(st.ex[q]);
    free(st.ex);
    free(st.off);
    free(st.part_peak);
    gp_aprob_release(&p);
    r->seconds = gp_assign_now() - t0;
    r->seconds_best = status == GP_ASSIGN_ERROR ? r->seconds : st.t_best - t0;
    return r->status = status;
}
