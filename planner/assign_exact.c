/* Exact offset assignment on one partition, after MiniMalloc (Moffitt, ASPLOS 2023): a depth-first
 * branch and bound deciding whether the buffers fit a capacity. Written from the paper's ideas:
 * canonical placements in non-decreasing offset order, cross-section bounds, dominance, dynamic
 * temporal decomposition, and several static orders tried round-robin with a doubling node limit.
 * The search keeps an explicit stack and an undo trail, so its depth costs no C stack. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "planner/assign_internal.h"

/* Undoable state lives in int64 arrays; the trail records (array, index, old value). A context's
 * buffers sit in the arena with the unplaced ones first (ST_REMAIN of them) and ST_APOS is each
 * buffer's place there: placing swaps the buffer behind the others without the trail, since
 * restoring the count restores the set; only a new context's copy is trailed, so that leaving
 * the context finds the positions in its parent again. */
enum {
    ST_OFFSET, ST_MINOFF, ST_RANK, ST_APOS, ST_FLOOR, ST_TOTAL, ST_CUT, ST_UNPL, ST_REMAIN, ST_COUNT
};
enum { NUM_ORDERS = 3 };
static const char *order_keys[NUM_ORDERS] = {"WAT", "TAW", "TWA"};
enum { DFS_ABORT = 100 }; /* the node limit ran out: try the next order */

typedef struct {
    int kind, idx;
    int64_t old;
} trail_entry;

/* An independent sub-problem: the still unplaced buffers of a time range. */
typedef struct {
    int start, n;  /* its buffers: arena[start .. start + n) */
    int s0, s1;    /* its sections */
    int cont;      /* the context to solve once this one is done; -1: all done */
    int decomp;    /* the frame whose placement created it; -1 for the root */
} context;

/* One level of the search: which candidate it tried last. */
typedef struct {
    int ctx;
    int root;               /* first frame of its context */
    int64_t cur_off;        /* candidates must come after (cur_off, cur_rank) */
    int cur_rank;
    int64_t min_height;     /* dominance: nothing is placed at or above this */
    int hatless;            /* the candidate tried last overlaps no unplaced buffer */
    size_t trail_mark;
    int ctx_mark, arena_mark;
} frame;

/* The static orders (MiniMalloc's WAT, TAW, TWA) sort gp_key3 keys: W lifespan width, A area, T
 * the largest section total the buffer lives through; all descending, ties by index. */
struct gp_exact {
    const gp_aprob *p;
    int m, S, s0;          /* buffers, sections, first global section */
    int *gid;              /* [m] global buffer index */
    int *lo, *hi;          /* [m] local section span */
    int64_t *size;         /* [m] */
    int *adj_start, *adj;  /* CSR: buffers overlapping each buffer in time */
    int *sec_start, *sec;  /* CSR: buffers live in each section, the unplaced ones first (ST_UNPL
                            * of them); placing a buffer swaps it behind them, and undoing the
                            * count restores the set, so the order itself needs no undo */
    int *pbase, *pos;      /* pos[pbase[i] + s - lo[i]]: where buffer i sits in section s's list */
    int64_t *total0, *cut0;/* [S] initial section totals; buffers crossing s -> s + 1 */
    int64_t part_lb;
    int *rank;             /* [NUM_ORDERS, m] position of each buffer in each static order */
    double *width, *area;  /* [m] order keys that never change */
    int order;             /* the order of the current search */
    gp_key3 *keys;         /* [m] scratch for re-ranking a new context */
    int64_t *st[ST_COUNT]; /* dynamic state: offset [m], minoff [m], floor/total/cut/unpl [S],
                            * remain */
    trail_entry *trail;
    size_t ntrail, trail_cap;
    frame *frames;         /* [m + 2] */
    context *ctxs;         /* [2 m + 2] */
    int nctx;
    int *arena;
    int narena, arena_cap;
    int *witness;          /* [S] position in sec of an unplaced buffer at or below the floor */
    int *piece;            /* [S + 1] scratch for decomposition */
    int64_t nodes;
    int searched;          /* a search ran: the state arrays hold its last placement */
};

static int64_t pairs_bounded(const int *lo_sorted, const int *hi_by_lo, int m, int64_t limit)
{
    int64_t pairs = 0;
    for (int k = 0; k < m && pairs <= limit; k++) {
        /* Buffers after k in start order that start before k ends overlap it. */
        int a = k + 1, b = m;
        while (a < b) {
            int mid = a + (b - a) / 2;
            if (lo_sorted[mid] < hi_by_lo[k])
                a = mid + 1;
            else
                b = mid;
        }
        pairs += a - k - 1;
    }
    return pairs;
}

void gp_exact_free(gp_exact *e)
{
    if (!e)
        return;
    free(e->gid);
    free(e->lo);
    free(e->hi);
    free(e->size);
    free(e->adj_start);
    free(e->adj);
    free(e->sec_start);
    free(e->sec);
    free(e->pbase);
    free(e->pos);
    free(e->total0);
    free(e->cut0);
    free(e->rank);
    free(e->width);
    free(e->area);
    free(e->keys);
    for (int k = 0; k < ST_COUNT; k++)
        free(e->st[k]);
    free(e->trail);
    free(e->frames);
    free(e->ctxs);
    free(e->arena);
    free(e->witness);
    free(e->piece);
    free(e);
}

static int set(gp_exact *e, int kind, int idx, int64_t v);

static int build_orders(gp_exact *e)
{
    const gp_buffer *b = e->p->b;
    int m = e->m;
    gp_key3 *keys = malloc((size_t)m * sizeof *keys);
    double *w = malloc((size_t)m * sizeof *w), *a = malloc((size_t)m * sizeof *a),
           *t = malloc((size_t)m * sizeof *t);
    e->width = w;
    e->area = a;
    e->keys = keys;
    int rc = -1;
    if (!keys || !w || !a || !t)
        goto done;
    for (int i = 0; i < m; i++) {
        const gp_buffer *x = &b[e->gid[i]];
        w[i] = (double)x->upper - (double)x->lower;
        a[i] = w[i] * (double)x->size;
        int64_t mx = 0;
        for (int s = e->lo[i]; s < e->hi[i]; s++)
            if (e->total0[s] > mx)
                mx = e->total0[s];
        t[i] = (double)mx;
    }
    for (int o = 0; o < NUM_ORDERS; o++) {
        for (int i = 0; i < m; i++) {
            keys[i].idx = i;
            for (int c = 0; c < 3; c++) {
                char ch = order_keys[o][c];
                keys[i].k[c] = ch == 'W' ? w[i] : ch == 'A' ? a[i] : ch == 'Z' ? (double)e->size[i] : t[i];
            }
        }
        qsort(keys, (size_t)m, sizeof *keys, gp_key3_cmp);
        for (int r = 0; r < m; r++)
            e->rank[o * m + keys[r].idx] = r;
    }
    rc = 0;
done:
    free(t);
    return rc;
}

/* Ranks a new context's buffers by the current order, with T from the current section totals
 * (what is still unplaced), as MiniMalloc does for each sub-problem. */
static int rerank(gp_exact *e, const context *c)
{
    const int64_t *total = e->st[ST_TOTAL];
    const char *key = order_keys[e->order];
    for (int k = 0; k < c->n; k++) {
        int i = e->arena[c->start + k];
        int64_t mx = 0;
        for (int s = e->lo[i]; s < e->hi[i]; s++)
            if (total[s] > mx)
                mx = total[s];
        e->keys[k].idx = i;
        for (int q = 0; q < 3; q++)
            e->keys[k].k[q] = key[q] == 'W'   ? e->width[i]
                              : key[q] == 'A' ? e->area[i]
                              : key[q] == 'Z' ? (double)e->size[i]
                                              : (double)mx;
    }
    qsort(e->keys, (size_t)c->n, sizeof *e->keys, gp_key3_cmp);
    for (int r = 0; r < c->n; r++)
        if (set(e, ST_RANK, e->keys[r].idx, r) != 0)
            return -1;
    return 0;
}

gp_exact *gp_exact_new(const gp_aprob *p, int q, int pair_limit, int *too_big)
{
    *too_big = 0;
    int m = p->part_start[q + 1] - p->part_start[q];
    int s0 = p->part_s0[q], S = p->part_s1[q] - s0;
    gp_exact *e = calloc(1, sizeof *e);
    gp_lokey *byl = malloc((size_t)m * sizeof *byl);
    int *los = malloc((size_t)m * sizeof *los), *his = malloc((size_t)m * sizeof *his);
    if (!e || !byl || !los || !his)
        goto fail;
    e->p = p;
    e->m = m;
    e->S = S;
    e->s0 = s0;
    e->part_lb = p->part_lb[q];
    e->gid = malloc((size_t)m * sizeof *e->gid);
    e->lo = malloc((size_t)m * sizeof *e->lo);
    e->hi = malloc((size_t)m * sizeof *e->hi);
    e->size = malloc((size_t)m * sizeof *e->size);
    if (!e->gid || !e->lo || !e->hi || !e->size)
        goto fail;
    int64_t span = 0;
    for (int i = 0; i < m; i++) {
        int g = p->part_buf[p->part_start[q] + i];
        e->gid[i] = g;
        e->lo[i] = p->lo[g] - s0;
        e->hi[i] = p->hi[g] - s0;
        e->size[i] = p->b[g].size;
        span += e->hi[i] - e->lo[i];
        byl[i] = (gp_lokey){e->lo[i], i};
    }
    qsort(byl, (size_t)m, sizeof *byl, gp_lokey_cmp);
    for (int k = 0; k < m; k++) {
        los[k] = byl[k].lo;
        his[k] = e->hi[byl[k].idx];
    }
    int64_t pairs = pairs_bounded(los, his, m, pair_limit);
    if (pairs > pair_limit || span > 4 * (int64_t)pair_limit + 4 * (int64_t)m) {
        *too_big = 1;
        goto fail;
    }
    /* Overlap lists. */
    e->adj_start = calloc((size_t)m + 1, sizeof *e->adj_start);
    e->adj = malloc((size_t)(2 * pairs + 1) * sizeof *e->adj);
    e->sec_start = calloc((size_t)S + 1, sizeof *e->sec_start);
    e->sec = malloc((size_t)(span + 1) * sizeof *e->sec);
    e->pbase = malloc(((size_t)m + 1) * sizeof *e->pbase);
    e->pos = malloc((size_t)(span + 1) * sizeof *e->pos);
    e->total0 = calloc((size_t)S, sizeof *e->total0);
    e->cut0 = calloc((size_t)S, sizeof *e->cut0);
    e->rank = malloc((size_t)NUM_ORDERS * (size_t)m * sizeof *e->rank);
    if (!e->adj_start || !e->adj || !e->sec_start || !e->sec || !e->pbase || !e->pos ||
        !e->total0 || !e->cut0 || !e->rank)
        goto fail;
    for (int k = 0; k < m; k++)
        for (int j = k + 1; j < m && los[j] < his[k]; j++) {
            e->adj_start[byl[k].idx + 1]++;
            e->adj_start[byl[j].idx + 1]++;
        }
    for (int i = 0; i < m; i++)
        e->adj_start[i + 1] += e->adj_start[i];
    int *fill = malloc(((size_t)m + (size_t)S + 1) * sizeof *fill);
    if (!fill)
        goto fail;
    memcpy(fill, e->adj_start, (size_t)m * sizeof *fill);
    for (int k = 0; k < m; k++)
        for (int j = k + 1; j < m && los[j] < his[k]; j++) {
            int a = byl[k].idx, b = byl[j].idx;
            e->adj[fill[a]++] = b;
            e->adj[fill[b]++] = a;
        }
    /* Section lists, totals and cut counts. */
    for (int i = 0; i < m; i++)
        for (int s = e->lo[i]; s < e->hi[i]; s++) {
            e->sec_start[s + 1]++;
            e->total0[s] += e->size[i];
            if (s + 1 < e->hi[i])
                e->cut0[s]++;
        }
    for (int s = 0; s < S; s++)
        e->sec_start[s + 1] += e->sec_start[s];
    memcpy(fill, e->sec_start, (size_t)S * sizeof *fill);
    for (int i = 0, base = 0; i < m; i++) {
        e->pbase[i] = base;
        for (int s = e->lo[i]; s < e->hi[i]; s++) {
            e->pos[base++] = fill[s];
            e->sec[fill[s]++] = i;
        }
    }
    free(fill);
    if (build_orders(e) != 0)
        goto fail;
    for (int k = 0; k < ST_COUNT; k++) {
        size_t len = k <= ST_APOS ? (size_t)m : k == ST_REMAIN ? 2 * (size_t)m + 2 : (size_t)S;
        e->st[k] = malloc(len * sizeof(int64_t));
        if (!e->st[k])
            goto fail;
    }
    e->frames = malloc(((size_t)m + 2) * sizeof *e->frames);
    e->ctxs = malloc((2 * (size_t)m + 2) * sizeof *e->ctxs);
    e->witness = malloc((size_t)S * sizeof *e->witness);
    e->piece = malloc(((size_t)S + 1) * sizeof *e->piece);
    if (!e->frames || !e->ctxs || !e->witness || !e->piece)
        goto fail;
    for (int s = 0; s < S; s++)
        e->witness[s] = e->sec_start[s];
    free(byl);
    free(los);
    free(his);
    return e;
fail:
    free(byl);
    free(los);
    free(his);
    gp_exact_free(e);
    return NULL;
}

int64_t gp_exact_nodes(const gp_exact *e)
{
    return e ? e->nodes : 0;
}

int gp_exact_partial(const gp_exact *e, int64_t *off)
{
    if (!e || !e->searched)
        return -1;
    for (int i = 0; i < e->m; i++)
        off[e->gid[i]] = e->st[ST_OFFSET][i];
    return 0;
}

/* ---- undoable state ---- */

static int set(gp_exact *e, int kind, int idx, int64_t v)
{
    if (e->ntrail == e->trail_cap) {
        size_t cap = e->trail_cap ? 2 * e->trail_cap : 1024;
        trail_entry *t = realloc(e->trail, cap * sizeof *t);
        if (!t)
            return -1;
        e->trail = t;
        e->trail_cap = cap;
    }
    e->trail[e->ntrail++] = (trail_entry){kind, idx, e->st[kind][idx]};
    e->st[kind][idx] = v;
    return 0;
}

static void undo(gp_exact *e, size_t mark)
{
    while (e->ntrail > mark) {
        trail_entry *t = &e->trail[--e->ntrail];
        e->st[t->kind][t->idx] = t->old;
    }
}

static int arena_reserve(gp_exact *e, int more)
{
    if (e->narena + more <= e->arena_cap)
        return 0;
    int cap = e->arena_cap ? e->arena_cap : 1024;
    while (cap < e->narena + more)
        cap *= 2;
    int *a = realloc(e->arena, (size_t)cap * sizeof *a);
    if (!a)
        return -1;
    e->arena = a;
    e->arena_cap = cap;
    return 0;
}

/* ---- the search ---- */

/* The frame's dominance height is computed on its first visit, in the same scan that picks the
 * first candidate (the state is the same on every visit, after the undo). */
static void push_frame(gp_exact *e, int *nf, int ctx, int64_t off, int rank, int root)
{
    e->frames[(*nf)++] = (frame){ctx, root, off, rank, -1, 0, e->ntrail, e->nctx, e->narena};
}

/* Places buffer i at off and propagates: neighbours' lowest offsets, section floors and totals,
 * and the floor of every section whose unplaced buffers all sit higher now. *hatless: no unplaced
 * buffer overlaps i. */
static int place(gp_exact *e, int i, int64_t off, int *hatless)
{
    int64_t *offset = e->st[ST_OFFSET], *minoff = e->st[ST_MINOFF], *floor_ = e->st[ST_FLOOR];
    int64_t top = off + e->size[i];
    if (set(e, ST_OFFSET, i, off) != 0)
        return -1;
    /* Every neighbour overlaps i, so the sections of those whose lowest offset rose, with i's own,
     * form one range. */
    int a0 = INT_MAX, a1 = -1;
    *hatless = 1;
    for (int k = e->adj_start[i]; k < e->adj_start[i + 1]; k++) {
        int j = e->adj[k];
        if (offset[j] >= 0)
            continue;
        *hatless = 0;
        if (minoff[j] >= top)
            continue;
        if (set(e, ST_MINOFF, j, top) != 0)
            return -1;
        if (e->lo[j] < a0)
            a0 = e->lo[j];
        if (e->hi[j] > a1)
            a1 = e->hi[j];
    }
    int64_t *unpl = e->st[ST_UNPL];
    for (int s = e->lo[i]; s < e->hi[i]; s++) {
        if (set(e, ST_FLOOR, s, top) != 0 || set(e, ST_TOTAL, s, e->st[ST_TOTAL][s] - e->size[i]) != 0)
            return -1;
        /* Swap i behind the unplaced buffers of s. */
        int last = e->sec_start[s] + (int)unpl[s] - 1, at = e->pos[e->pbase[i] + s - e->lo[i]];
        int x = e->sec[last];
        e->sec[at] = x;
        e->pos[e->pbase[x] + s - e->lo[x]] = at;
        e->sec[last] = i;
        e->pos[e->pbase[i] + s - e->lo[i]] = last;
        if (set(e, ST_UNPL, s, unpl[s] - 1) != 0)
            return -1;
    }
    if (a1 >= 0) {
        if (e->lo[i] < a0)
            a0 = e->lo[i];
        if (e->hi[i] > a1)
            a1 = e->hi[i];
    }
    for (int s = a0; s < a1; s++) {
        if (unpl[s] == 0)
            continue;
        /* The floor rises only when every unplaced buffer of s sits above it: one that does not
         * (a witness, remembered per section as a hint) settles it without the full scan. */
        int w = e->sec[e->witness[s]];
        if (offset[w] < 0 && minoff[w] <= floor_[s])
            continue;
        int64_t low = INT64_MAX;
        for (int k = e->sec_start[s]; k < e->sec_start[s] + unpl[s]; k++) {
            int j = e->sec[k];
            if (minoff[j] <= floor_[s]) {
                e->witness[s] = k;
                low = INT64_MAX;
                break;
            }
            if (minoff[j] < low)
                low = minoff[j];
        }
        if (low != INT64_MAX && set(e, ST_FLOOR, s, low) != 0)
            return -1;
    }
    return 0;
}

/* Cross-section bound: in every section, everything unplaced stacks above the floor, and (offsets
 * never decrease) above the offset just placed. */
static int fits(const gp_exact *e, const context *c, int64_t off, int64_t cap)
{
    const int64_t *floor_ = e->st[ST_FLOOR], *total = e->st[ST_TOTAL];
    for (int s = c->s0; s < c->s1; s++) {
        int64_t f = floor_[s] > off ? floor_[s] : off;
        if (total[s] > 0 && f + total[s] > cap)
            return 0;
        if (floor_[s] > cap)
            return 0;
    }
    return 1;
}

/* After placing i: when no unplaced buffer crosses some section boundary of context ci any more,
 * its buffers split into independent contexts. Returns the first new context, -1 if no split,
 * -2 when out of memory. */
static int decompose(gp_exact *e, int fi, int ci, int i)
{
    int64_t *cut = e->st[ST_CUT];
    int zero = 0;
    for (int s = e->lo[i]; s + 1 < e->hi[i]; s++) {
        if (set(e, ST_CUT, s, cut[s] - 1) != 0)
            return -2;
        if (cut[s] == 0)
            zero = 1;
    }
    if (!zero)
        return -1;
    context c = e->ctxs[ci];
    const int64_t *offset = e->st[ST_OFFSET];
    /* piece[s]: index of the piece holding section s; counts reuse piece[] after S. */
    int np = 0;
    for (int s = c.s0; s < c.s1; s++) {
        e->piece[s] = np;
        if (s + 1 < c.s1 && cut[s] == 0)
            np++;
    }
    np++;
    int *cnt = calloc((size_t)np, sizeof *cnt);
    if (!cnt)
        return -2;
    int left = 0, live = (int)e->st[ST_REMAIN][ci];
    for (int k = 0; k < live; k++) {
        int j = e->arena[c.start + k];
        if (offset[j] < 0) {
            cnt[e->piece[e->lo[j]]]++;
            left++;
        }
    }
    int nonempty = 0;
    for (int q = 0; q < np; q++)
        nonempty += cnt[q] > 0;
    /* Even one piece is a fresh sub-problem: narrower sections, a new canonical start, ranks
     * from what is left. */
    if (nonempty < 1 || e->nctx + nonempty > 2 * e->m + 2 || arena_reserve(e, left) != 0) {
        free(cnt);
        return nonempty < 1 ? -1 : -2;
    }
    /* One context per non-empty piece, in time order, chained by cont. */
    int first = e->nctx, pos = e->narena;
    int *at = calloc((size_t)np, sizeof *at); /* arena position of each piece's list */
    if (!at) {
        free(cnt);
        return -2;
    }
    for (int q = 0, s = c.s0; q < np; q++) {
        int s_begin = s;
        while (s < c.s1 && e->piece[s] == q)
            s++;
        if (!cnt[q])
            continue;
        at[q] = pos;
        int id = e->nctx++;
        e->ctxs[id] = (context){pos, 0, s_begin, s, -1, fi};
        e->st[ST_REMAIN][id] = cnt[q];
        if (id > first)
            e->ctxs[id - 1].cont = id;
        pos += cnt[q];
    }
    e->ctxs[e->nctx - 1].cont = c.cont;
    for (int k = 0; k < live; k++) {
        int j = e->arena[c.start + k];
        if (offset[j] < 0) {
            int q = e->piece[e->lo[j]];
            if (set(e, ST_APOS, j, at[q]) != 0) {
                free(at);
                free(cnt);
                return -2;
            }
            e->arena[at[q]++] = j;
        }
    }
    for (int id = first; id < e->nctx; id++)
        e->ctxs[id].n = (int)e->st[ST_REMAIN][id];
    e->narena = pos;
    free(at);
    free(cnt);
    for (int id = first; id < e->nctx; id++)
        if (rerank(e, &e->ctxs[id]) != 0)
            return -2;
    return first;
}

static int dfs(gp_exact *e, int order, int64_t cap, int64_t limit, double deadline, int64_t *out)
{
    const int m = e->m;
    int64_t *offset = e->st[ST_OFFSET], *minoff = e->st[ST_MINOFF], *rank = e->st[ST_RANK];
    e->order = order;
    e->searched = 1;
    for (int i = 0; i < m; i++) {
        offset[i] = -1;
        minoff[i] = 0;
        rank[i] = e->rank[(size_t)order * (size_t)m + (size_t)i];
    }
    memset(e->st[ST_FLOOR], 0, (size_t)e->S * sizeof(int64_t));
    memcpy(e->st[ST_TOTAL], e->total0, (size_t)e->S * sizeof(int64_t));
    memcpy(e->st[ST_CUT], e->cut0, (size_t)e->S * sizeof(int64_t));
    for (int s = 0; s < e->S; s++)
        e->st[ST_UNPL][s] = e->sec_start[s + 1] - e->sec_start[s];
    e->ntrail = 0;
    e->narena = 0;
    if (arena_reserve(e, m) != 0)
        return GP_EXACT_NOMEM;
    for (int i = 0; i < m; i++) {
        e->arena[i] = i;
        e->st[ST_APOS][i] = i;
    }
    e->narena = m;
    e->ctxs[0] = (context){0, m, 0, e->S, -1, -1};
    e->st[ST_REMAIN][0] = m;
    e->nctx = 1;
    int nf = 0;
    push_frame(e, &nf, 0, -1, -1, 1);
    int64_t used = 0;
    for (;;) {
        if (nf == 0)
            return GP_EXACT_INFEASIBLE;
        frame *f = &e->frames[nf - 1];
        undo(e, f->trail_mark);
        e->nctx = f->ctx_mark;
        e->narena = f->arena_mark;
        const context *c = &e->ctxs[f->ctx];
        /* The next candidate in (lowest offset, static rank) order after the last one tried. */
        int best = -1, best_rank = 0;
        int64_t best_off = 0, h = INT64_MAX;
        const int live = (int)e->st[ST_REMAIN][f->ctx];
        for (int k = 0; k < live; k++) {
            int i = e->arena[c->start + k];
            int64_t o = minoff[i];
            int r = (int)rank[i];
            if (o + e->size[i] < h)
                h = o + e->size[i];
            if (o + e->size[i] > cap)
                continue;
            if (o < f->cur_off || (o == f->cur_off && r <= f->cur_rank))
                continue;
            if (best < 0 || o < best_off || (o == best_off && r < best_rank)) {
                best = i;
                best_off = o;
                best_rank = r;
            }
        }
        /* Dominance: nothing at or above the lowest top of an unplaced buffer. Candidates come in
         * offset order, so checking the chosen one covers the rest. */
        if (f->min_height < 0)
            f->min_height = h;
        if (best >= 0 && best_off >= f->min_height)
            best = -1;
        /* A buffer that overlaps nothing unplaced keeps its lowest offset forever: when placing it
         * there failed, every later candidate (higher in canonical order) would strand it. */
        if (f->hatless)
            best = -1;
        if (best < 0) {
            /* Exhausted. A context that cannot be solved dooms the placement that created it,
             * whatever its independent siblings did. */
            if (f->root) {
                if (c->decomp < 0)
                    return GP_EXACT_INFEASIBLE;
                nf = c->decomp + 1;
            } else {
                nf--;
            }
            continue;
        }
        f->cur_off = best_off;
        f->cur_rank = best_rank;
        e->nodes++;
        if (++used > limit)
            return DFS_ABORT;
        if ((used & 255) == 0 && gp_assign_now() >= deadline)
            return GP_EXACT_TIMEOUT;
        int ci = f->ctx;
        if (place(e, best, best_off, &f->hatless) != 0)
            return GP_EXACT_NOMEM;
        if (!fits(e, c, best_off, cap))
            continue;
        if (set(e, ST_REMAIN, ci, e->st[ST_REMAIN][ci] - 1) != 0)
            return GP_EXACT_NOMEM;
        {
            /* Swap it behind the context's unplaced buffers (see ST_APOS). */
            int64_t *apos = e->st[ST_APOS];
            int last = c->start + (int)e->st[ST_REMAIN][ci], at = (int)apos[best];
            int x = e->arena[last];
            e->arena[at] = x;
            apos[x] = at;
            e->arena[last] = best;
            apos[best] = last;
        }
        if (e->st[ST_REMAIN][ci] == 0) {
            int next = c->cont;
            if (next < 0) {
                for (int i = 0; i < m; i++)
                    out[e->gid[i]] = offset[i];
                return GP_EXACT_FOUND;
            }
            push_frame(e, &nf, next, -1, -1, 1);
            continue;
        }
        int sub = decompose(e, nf - 1, ci, best);
        if (sub == -2)
            return GP_EXACT_NOMEM;
        if (sub >= 0)
            push_frame(e, &nf, sub, -1, -1, 1);
        else
            push_frame(e, &nf, ci, best_off, best_rank, 0);
    }
}

gp_exact_status gp_exact_decide(gp_exact *e, int64_t capacity, double deadline, int64_t max_nodes,
                                int64_t *off)
{
    if (e->part_lb > capacity)
        return GP_EXACT_INFEASIBLE;
    int64_t limit = e->m > 0 ? e->m : 1, start = e->nodes;
    for (;;) {
        if (limit < INT64_MAX / 4)
            limit *= 2;
        for (int o = 0; o < NUM_ORDERS; o++) {
            int64_t lim = limit;
            if (max_nodes > 0) {
                int64_t left = max_nodes - (e->nodes - start);
                if (left <= 0)
                    return GP_EXACT_TIMEOUT;
                if (left < lim)
                    lim = left;
            }
            int s = dfs(e, o, capacity, lim, deadline, off);
            if (s != DFS_ABORT)
                return (gp_exact_status)s;
        }
        if (gp_assign_now() >= deadline)
            return GP_EXACT_TIMEOUT;
    }
}
