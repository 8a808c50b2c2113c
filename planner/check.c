/* The independent checker for offset assignments: a sweep over time keeping the live buffers in an
 * array sorted by offset; each arriving buffer only needs comparing with its two neighbours there,
 * because the live buffers are pairwise disjoint. Shares no code with the assigner. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/assign.h"

typedef struct {
    int64_t t;
    int start; /* 1 for a start, 0 for an end: at equal times ends go first (half-open) */
    size_t idx;
} check_event;

static int check_event_cmp(const void *pa, const void *pb)
{
    const check_event *a = pa, *b = pb;
    if (a->t != b->t)
        return a->t < b->t ? -1 : 1;
    if (a->start != b->start)
        return a->start - b->start;
    return (a->idx > b->idx) - (a->idx < b->idx);
}

/* Position of buffer i in live[0..n) ordered by (offset, index): first element not before it. */
static size_t live_pos(const gp_buffer *b, const size_t *live, size_t n, size_t i)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        size_t j = live[mid];
        if (b[j].offset < b[i].offset || (b[j].offset == b[i].offset && j < i))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void describe(const gp_buffer *b, size_t i, size_t j, char *why, size_t why_len)
{
    if (why && why_len)
        snprintf(why, why_len,
                 "buffers %zu and %zu overlap: %zu lives [%lld, %lld) at bytes [%lld, %lld), "
                 "%zu lives [%lld, %lld) at bytes [%lld, %lld)",
                 i, j, i, (long long)b[i].lower, (long long)b[i].upper, (long long)b[i].offset,
                 (long long)(b[i].offset + b[i].size), j, (long long)b[j].lower,
                 (long long)b[j].upper, (long long)b[j].offset, (long long)(b[j].offset + b[j].size));
}

int gp_assign_check(const gp_buffer *b, size_t n, int64_t capacity, char *why, size_t why_len)
{
    if (why && why_len)
        why[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        const char *bad = NULL;
        if (b[i].size <= 0)
            bad = "size <= 0";
        else if (b[i].lower >= b[i].upper)
            bad = "empty lifespan";
        else if (b[i].offset < 0)
            bad = "negative offset";
        else if (b[i].offset > INT64_MAX - b[i].size)
            bad = "offset + size overflows";
        else if (capacity > 0 && b[i].offset + b[i].size > capacity)
            bad = "ends above the capacity";
        if (bad) {
            if (why && why_len)
                snprintf(why, why_len, "buffer %zu (offset %lld, size %lld, lifespan [%lld, %lld)): %s",
                         i, (long long)b[i].offset, (long long)b[i].size, (long long)b[i].lower,
                         (long long)b[i].upper, bad);
            return -1;
        }
    }
    if (n == 0)
        return 0;
    check_event *ev = malloc(2 * n * sizeof *ev);
    size_t *live = malloc(n * sizeof *live);
    if (!ev || !live) {
        free(ev);
        free(live);
        if (why && why_len)
            snprintf(why, why_len, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        ev[2 * i] = (check_event){b[i].lower, 1, i};
        ev[2 * i + 1] = (check_event){b[i].upper, 0, i};
    }
    qsort(ev, 2 * n, sizeof *ev, check_event_cmp);
    size_t nlive = 0;
    int rc = 0;
    for (size_t k = 0; k < 2 * n && rc == 0; k++) {
        size_t i = ev[k].idx;
        size_t pos = live_pos(b, live, nlive, i);
        if (!ev[k].start) {
            /* It is live, so it is at pos. */
            memmove(live + pos, live + pos + 1, (nlive - pos - 1) * sizeof *live);
            nlive--;
            continue;
        }
        if (pos > 0) {
            size_t j = live[pos - 1];
            if (b[j].offset + b[j].size > b[i].offset) {
                describe(b, j, i, why, why_len);
                rc = -1;
            }
        }
        if (rc == 0 && pos < nlive) {
            size_t j = live[pos];
            if (b[i].offset + b[i].size > b[j].offset) {
                describe(b, i, j, why, why_len);
                rc = -1;
            }
        }
        memmove(live + pos + 1, live + pos, (nlive - pos) * sizeof *live);
        live[pos] = i;
        nlive++;
    }
    free(ev);
    free(live);
    return rc;
}
