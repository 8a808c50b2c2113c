/* Improvement of a placement by ruin and recreate (large neighbourhood search): take a buffer that
 * rises above a goal between the target and the peak, lift out the buffers around it in time and
 * height, put them back one by one with best or first fit among the buffers that stayed, and keep
 * the result when the area above the goal did not grow (beyond a small random slack) and the peak
 * did not rise. Each move touches one time window, so a move
 * costs about the same on 1,000 or 100,000 buffers. Neighbours in time come from an interval query
 * over the partition (no overlap lists), so memory stays linear in the buffers. */
#include <stdlib.h>
#include <string.h>

#include "planner/assign_internal.h"

/* At most this many buffers are lifted out per move: the neighbourhood of a long-lived buffer can
 * be the whole partition. */
enum { RUIN_MAX = 384 };
/* Moves without progress before the goal eases; violators drawn per tournament; how much worse
 * (a random share of this, relative) a move's area above the goal may get and still be kept;
 * buffers living this many times longer than the chosen one stay put in most moves. */
enum { STALL_MOVES = 500, TOURNAMENT = 4 };
static const double SLACK = 0.02, LONG_FACTOR = 32.0;

/* ---- the time index: buffers sorted by start, a max-of-ends tree over that order ---- */

typedef struct {
    int m;
    int *id;        /* [m] global buffer ids by (lifespan start, id) */
    int64_t *lo;    /* [m] lower of id[k] */
    int64_t *hi;    /* [m] upper of id[k] */
    int64_t *mx;    /* [2 size] max of hi over each node; leaves at size + k */
    int size;       /* power of two >= m */
} tquery;

static int lo_cmp(const void *pa, const void *pb)
{
    const int64_t *a = pa, *b = pb; /* (lower, id) pairs */
    if (a[0] != b[0])
        return a[0] < b[0] ? -1 : 1;
    return (a[1] > b[1]) - (a[1] < b[1]);
}

static void tquery_free(tquery *t)
{
    free(t->id);
    free(t->lo);
    free(t->hi);
    free(t->mx);
}

static int tquery_init(tquery *t, const gp_aprob *p, int q)
{
    memset(t, 0, sizeof *t);
    int m = p->part_start[q + 1] - p->part_start[q];
    t->m = m;
    t->size = 1;
    while (t->size < m)
        t->size *= 2;
    int64_t *pairs = malloc((size_t)m * 2 * sizeof *pairs);
    t->id = malloc((size_t)m * sizeof *t->id);
    t->lo = malloc((size_t)m * sizeof *t->lo);
    t->hi = malloc((size_t)m * sizeof *t->hi);
    t->mx = calloc(2 * (size_t)t->size, sizeof *t->mx);
    if (!pairs || !t->id || !t->lo || !t->hi || !t->mx) {
        free(pairs);
        tquery_free(t);
        return -1;
    }
    for (int k = 0; k < m; k++) {
        int g = p->part_buf[p->part_start[q] + k];
        pairs[2 * k] = p->b[g].lower;
        pairs[2 * k + 1] = g;
    }
    qsort(pairs, (size_t)m, 2 * sizeof *pairs, lo_cmp);
    for (int k = 0; k < m; k++) {
        int g = (int)pairs[2 * k + 1];
        t->id[k] = g;
        t->lo[k] = p->b[g].lower;
        t->hi[k] = p->b[g].upper;
        t->mx[t->size + k] = t->hi[k];
    }
    for (int k = t->size - 1; k >= 1; k--)
        t->mx[k] = t->mx[2 * k] > t->mx[2 * k + 1] ? t->mx[2 * k] : t->mx[2 * k + 1];
    free(pairs);
    return 0;
}

/* Writes the ids of the buffers alive somewhere in [a, e) other than self into out; returns how
 * many. Among those starting before e, descends only into nodes whose latest end is past a. */
static int tquery_overlap(const tquery *t, int64_t a, int64_t e, int self, int *out)
{
    int lim = 0, hi = t->m; /* first position starting at or after e */
    while (lim < hi) {
        int mid = lim + (hi - lim) / 2;
        if (t->lo[mid] < e)
            lim = mid + 1;
        else
            hi = mid;
    }
    int n = 0, stack[64], sp = 0;
    int node_lo[64], node_w[64];
    stack[sp] = 1;
    node_lo[sp] = 0;
    node_w[sp] = t->size;
    sp++;
    while (sp > 0) {
        sp--;
        int node = stack[sp], nl = node_lo[sp], w = node_w[sp];
        if (nl >= lim || t->mx[node] <= a)
            continue;
        if (w == 1) {
            if (t->id[nl] != self)
                out[n++] = t->id[nl];
            continue;
        }
        stack[sp] = 2 * node + 1;
        node_lo[sp] = nl + w / 2;
        node_w[sp] = w / 2;
        sp++;
        stack[sp] = 2 * node;
        node_lo[sp] = nl;
        node_w[sp] = w / 2;
        sp++;
    }
    return n;
}

/* ---- the search ---- */

typedef struct {
    const gp_aprob *p;
    tquery tq;
    int64_t *off;      /* [n] the caller's offsets (only this partition's are read or written) */
    unsigned char *lifted; /* [n] 1 while a buffer is lifted out */
    unsigned char *inr;  /* [n] 1 while a buffer is in the ruin set being built */
    int *nb;           /* [m] neighbour scratch */
    int64_t *iv;       /* [2 m] placed intervals of one reinsertion */
    int64_t *scratch;  /* [2 m] */
    int *ruin;         /* [RUIN_MAX] */
    int *saved_id;     /* [RUIN_MAX] the ruin set before reordering */
    int64_t *saved;    /* [RUIN_MAX] their offsets before the move */
    double *key;       /* [RUIN_MAX] reinsertion keys */
    int *viol;         /* [m] buffers above the goal (rebuilt when stale) */
    int cap;           /* this move's ruin size limit */
    int nviol;
    uint64_t rng;
} lns;

static uint64_t next_rand(lns *s)
{
    uint64_t x = s->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    s->rng = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static double uniform(lns *s)
{
    return (double)(next_rand(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* Area of buffer i above the goal: what the search drives to zero. */
static double excess(const lns *s, int i, int64_t goal)
{
    const gp_buffer *b = &s->p->b[i];
    int64_t top = s->off[i] + b->size;
    if (top <= goal)
        return 0;
    int64_t from = s->off[i] > goal ? s->off[i] : goal;
    return (double)(top - from) * ((double)b->upper - (double)b->lower);
}

static void rebuild_viol(lns *s, int q, int64_t target)
{
    const gp_aprob *p = s->p;
    s->nviol = 0;
    for (int k = p->part_start[q]; k < p->part_start[q + 1]; k++) {
        int i = p->part_buf[k];
        if (s->off[i] + p->b[i].size > target)
            s->viol[s->nviol++] = i;
    }
}

static int64_t part_peak(const lns *s, int q)
{
    const gp_aprob *p = s->p;
    int64_t peak = 0;
    for (int k = p->part_start[q]; k < p->part_start[q + 1]; k++) {
        int i = p->part_buf[k];
        if (s->off[i] + p->b[i].size > peak)
            peak = s->off[i] + p->b[i].size;
    }
    return peak;
}

/* The offset for buffer i among its placed neighbours: the tightest gap that holds it (best) or
 * the lowest (first), else on top. */
static int64_t fit(lns *s, int i, int first_fit)
{
    const gp_buffer *b = &s->p->b[i];
    int nn = tquery_overlap(&s->tq, b->lower, b->upper, i, s->nb);
    int cnt = 0;
    for (int k = 0; k < nn; k++) {
        int j = s->nb[k];
        if (s->lifted[j])
            continue;
        s->iv[2 * cnt] = s->off[j];
        s->iv[2 * cnt + 1] = s->off[j] + s->p->b[j].size;
        cnt++;
    }
    const int64_t *iv = gp_pairs_sort(s->iv, cnt, s->scratch);
    int64_t top = 0, best = -1, best_gap = 0;
    for (int k = 0; k < cnt; k++) {
        const int64_t *x = iv + 2 * k;
        if (x[0] > top) {
            int64_t gap = x[0] - top;
            if (gap >= b->size && (best < 0 || gap < best_gap)) {
                best = top;
                best_gap = gap;
                if (first_fit || gap == b->size)
                    break;
            }
        }
        if (x[1] > top)
            top = x[1];
    }
    return best >= 0 ? best : top;
}

static void add_ruin(lns *s, int *nr, int j)
{
    if (*nr < s->cap && !s->inr[j]) {
        s->inr[j] = 1;
        s->ruin[(*nr)++] = j;
    }
}

/* Lifts out the buffers around v whose tops reach above low: v's time neighbours, and sometimes a
 * neighbour's neighbours too, which widens the window. */
static int build_ruin(lns *s, int v, int64_t low)
{
    const gp_aprob *p = s->p;
    int nr = 0;
    add_ruin(s, &nr, v);
    int hops = (next_rand(s) & 1) ? 2 : 1;
    /* Buffers living much longer than v are the skeleton around it: moving one costs a sort of
     * all its neighbours and seldom pays, so most moves leave them in place. */
    double span = (double)p->b[v].upper - (double)p->b[v].lower;
    double longest = (next_rand(s) % 8) == 0 ? 1e300 : LONG_FACTOR * span;
    for (int h = 0, from = 0; h < hops && nr < s->cap; h++) {
        int c = h == 0 ? v : s->ruin[from + (int)(next_rand(s) % (uint64_t)(nr - from))];
        from = nr;
        int nn = tquery_overlap(&s->tq, p->b[c].lower, p->b[c].upper, c, s->nb);
        /* Start the scan at a random place so a capped ruin set is not always the same. */
        int start = nn ? (int)(next_rand(s) % (uint64_t)nn) : 0;
        for (int k = 0; k < nn && nr < s->cap; k++) {
            int j = s->nb[(start + k) % nn];
            if (s->off[j] + p->b[j].size > low &&
                (double)p->b[j].upper - (double)p->b[j].lower <= longest)
                add_ruin(s, &nr, j);
        }
        if (nr == from)
            break;
    }
    return nr;
}

/* Reinsertion orders: by key descending, each with some noise. */
static void order_ruin(lns *s, int nr)
{
    const gp_aprob *p = s->p;
    int kind = (int)(next_rand(s) % 4);
    double noise = (next_rand(s) & 1) ? 0.3 : 0.0;
    for (int k = 0; k < nr; k++) {
        const gp_buffer *b = &p->b[s->ruin[k]];
        double size = (double)b->size, dur = (double)b->upper - (double)b->lower;
        double key = kind == 0   ? size
                     : kind == 1 ? size * dur
                     : kind == 2 ? dur
                                 : size * (0.5 + uniform(s));
        s->key[k] = key * (1.0 + noise * uniform(s));
    }
    /* Insertion sort: ruin sets are small. */
    for (int k = 1; k < nr; k++) {
        int r = s->ruin[k];
        double key = s->key[k];
        int j = k - 1;
        while (j >= 0 && s->key[j] < key) {
            s->ruin[j + 1] = s->ruin[j];
            s->key[j + 1] = s->key[j];
            j--;
        }
        s->ruin[j + 1] = r;
        s->key[j + 1] = key;
    }
}

int gp_improve_run(const gp_aprob *p, int q, int64_t target, double deadline, int64_t max_moves,
                   uint64_t seed, int64_t *off, gp_improve_stats *stats)
{
    int m = p->part_start[q + 1] - p->part_start[q];
    lns s;
    memset(&s, 0, sizeof s);
    s.p = p;
    s.off = off;
    s.rng = seed ? seed : 0x9E3779B97F4A7C15ull;
    if (stats)
        memset(stats, 0, sizeof *stats);
    int rc = -1;
    if (tquery_init(&s.tq, p, q) != 0)
        return -1;
    s.lifted = calloc(p->n, 1);
    s.inr = calloc(p->n, 1);
    s.nb = malloc(((size_t)m + 1) * sizeof *s.nb);
    s.iv = malloc(2 * ((size_t)m + 1) * sizeof *s.iv);
    s.scratch = malloc(2 * ((size_t)m + 1) * sizeof *s.scratch);
    s.ruin = malloc(RUIN_MAX * sizeof *s.ruin);
    s.saved_id = malloc(RUIN_MAX * sizeof *s.saved_id);
    s.saved = malloc(RUIN_MAX * sizeof *s.saved);
    s.key = malloc(RUIN_MAX * sizeof *s.key);
    s.viol = malloc(((size_t)m + 1) * sizeof *s.viol);
    if (!s.lifted || !s.inr || !s.nb || !s.iv || !s.scratch || !s.ruin || !s.saved_id || !s.saved ||
        !s.key || !s.viol)
        goto done;
    int64_t peak = part_peak(&s, q);
    int64_t start_peak = peak;
    /* The goal sits between the target and the peak: the area above it measures how far the top
     * band is from clearing. Reached, it halves the distance again; after a long stall it moves
     * up, an easier step. */
    int64_t goal = target + (peak - target) / 2;
    rebuild_viol(&s, q, goal);
    int64_t moves = 0, accepted = 0, stall = 0;
    double when = 0;
    while (peak > target && moves < max_moves) {
        if (s.nviol == 0 || stall > STALL_MOVES) {
            goal = s.nviol == 0 ? target + (peak - target) / 2 : goal + (peak - goal + 1) / 2;
            stall = 0;
            rebuild_viol(&s, q, goal);
            if (s.nviol == 0)
                continue;
        }
        if ((moves & 15) == 0 && gp_assign_now() >= deadline)
            break;
        moves++;
        stall++;
        /* A tournament: of a few violators the highest, so the peak gets most of the moves. */
        int v = s.viol[next_rand(&s) % (uint64_t)s.nviol];
        for (int t = 1; t < TOURNAMENT; t++) {
            int w = s.viol[next_rand(&s) % (uint64_t)s.nviol];
            if (off[w] + p->b[w].size > off[v] + p->b[v].size)
                v = w;
        }
        int64_t size_v = p->b[v].size;
        if (off[v] + size_v <= goal) {
            rebuild_viol(&s, q, goal);
            continue;
        }
        /* How deep to dig below the goal: v's own height, plus a random share of the goal. */
        static const double depth[] = {0.0, 0.01, 0.05, 0.25, 1.0};
        double d = depth[next_rand(&s) % (sizeof depth / sizeof *depth)];
        int64_t low = goal - size_v - (int64_t)(d * (double)goal);
        if (low < 0)
            low = 0;
        /* Mostly small moves (cheap, many), sometimes a large one. */
        static const int caps[] = {RUIN_MAX / 16, RUIN_MAX / 4, RUIN_MAX / 4, RUIN_MAX};
        s.cap = caps[next_rand(&s) % 4];
        int nr = build_ruin(&s, v, low);
        double before = 0;
        int64_t top_before = 0;
        for (int k = 0; k < nr; k++) {
            int j = s.ruin[k];
            s.saved_id[k] = j;
            s.saved[k] = off[j];
            before += excess(&s, j, goal);
            if (off[j] + p->b[j].size > top_before)
                top_before = off[j] + p->b[j].size;
            s.lifted[j] = 1;
            s.inr[j] = 0;
        }
        order_ruin(&s, nr);
        int first_fit = (int)(next_rand(&s) & 1);
        double after = 0, allow = before * (1.0 + SLACK * uniform(&s));
        int ok = 1;
        for (int k = 0; k < nr && ok; k++) {
            int j = s.ruin[k];
            off[j] = fit(&s, j, first_fit);
            s.lifted[j] = 0;
            after += excess(&s, j, goal);
            ok = off[j] + p->b[j].size <= peak && after <= allow;
        }
        if (!ok) {
            for (int k = 0; k < nr; k++) {
                off[s.saved_id[k]] = s.saved[k];
                s.lifted[s.saved_id[k]] = 0;
            }
            continue;
        }
        accepted++;
        if (top_before == peak) {
            int64_t now_peak = part_peak(&s, q);
            if (now_peak < peak)
                when = gp_assign_now();
            peak = now_peak;
        }
        if (after < before) {
            stall = 0;
            rebuild_viol(&s, q, goal);
        }
    }
    if (stats) {
        stats->moves = moves;
        stats->accepted = accepted;
        stats->start_peak = start_peak;
        stats->peak = peak;
        stats->when = when;
    }
    rc = 0;
done:
    tquery_free(&s.tq);
    free(s.lifted);
    free(s.inr);
    free(s.nb);
    free(s.iv);
    free(s.scratch);
    free(s.ruin);
    free(s.saved_id);
    free(s.saved);
    free(s.key);
    free(s.viol);
    return rc;
}

static int size_desc(const void *pa, const void *pb)
{
    const int64_t *a = pa, *b = pb; /* (size, id) pairs */
    if (a[0] != b[0])
        return a[0] > b[0] ? -1 : 1;
    return (a[1] > b[1]) - (a[1] < b[1]);
}

int gp_improve_complete(const gp_aprob *p, int q, int64_t *off)
{
    int m = p->part_start[q + 1] - p->part_start[q];
    lns s;
    memset(&s, 0, sizeof s);
    s.p = p;
    s.off = off;
    int rc = -1;
    int64_t *todo = malloc(2 * ((size_t)m + 1) * sizeof *todo);
    if (!todo || tquery_init(&s.tq, p, q) != 0) {
        free(todo);
        return -1;
    }
    s.lifted = calloc(p->n, 1);
    s.nb = malloc(((size_t)m + 1) * sizeof *s.nb);
    s.iv = malloc(2 * ((size_t)m + 1) * sizeof *s.iv);
    s.scratch = malloc(2 * ((size_t)m + 1) * sizeof *s.scratch);
    if (!s.lifted || !s.nb || !s.iv || !s.scratch)
        goto done;
    int nt = 0;
    for (int k = p->part_start[q]; k < p->part_start[q + 1]; k++) {
        int i = p->part_buf[k];
        if (off[i] < 0) {
            s.lifted[i] = 1;
            todo[2 * nt] = p->b[i].size;
            todo[2 * nt + 1] = i;
            nt++;
        }
    }
    qsort(todo, (size_t)nt, 2 * sizeof *todo, size_desc);
    for (int k = 0; k < nt; k++) {
        int i = (int)todo[2 * k + 1];
        off[i] = fit(&s, i, 0);
        s.lifted[i] = 0;
    }
    rc = 0;
done:
    tquery_free(&s.tq);
    free(todo);
    free(s.lifted);
    free(s.nb);
    free(s.iv);
    free(s.scratch);
    return rc;
}
