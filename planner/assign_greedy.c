/* Heuristic offset assignment: buffers in one of several orders, each placed into the tightest gap
 * left by the already-placed buffers that overlap it in time (best fit), else on top of them.
 * A segment tree over time sections keeps, per node, the union of placed offsets as disjoint
 * intervals, so a query touches O(log sections) short lists instead of every overlapping buffer. */
#include <stdlib.h>
#include <string.h>

#include "planner/assign_internal.h"

static const char *const order_names[GP_GREEDY_ORDERS] = {
    "greedy-breadth", "greedy-size", "greedy-duration", "greedy-area", "greedy-contention",
};

const char *gp_greedy_name(int order)
{
    return order >= 0 && order < GP_GREEDY_ORDERS ? order_names[order] : "greedy";
}

/* ---- sorted sets of disjoint byte intervals ---- */

typedef struct {
    int64_t *v;    /* [2 * cap] start, end pairs sorted by start; disjoint and not touching */
    int n, cap;
    int64_t *pend; /* [2 * pcap] intervals added but not merged into v yet (unsorted) */
    int np, pcap;
} ivset;

static void ivset_free(ivset *s)
{
    free(s->v);
    free(s->pend);
}

static int ivset_add(ivset *s, int64_t a, int64_t e)
{
    /* i: first interval ending at or after a; j: last starting at or before e. Intervals i..j
     * touch [a, e) and merge with it. */
    int lo = 0, hi = s->n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (s->v[2 * mid + 1] < a)
            lo = mid + 1;
        else
            hi = mid;
    }
    int i = lo;
    lo = i;
    hi = s->n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (s->v[2 * mid] <= e)
            lo = mid + 1;
        else
            hi = mid;
    }
    int j = lo - 1;
    if (i > j) {
        if (s->n == s->cap) {
            int cap = s->cap ? 2 * s->cap : 2;
            int64_t *v = realloc(s->v, (size_t)cap * 2 * sizeof *v);
            if (!v)
                return -1;
            s->v = v;
            s->cap = cap;
        }
        memmove(s->v + 2 * (i + 1), s->v + 2 * i, (size_t)(s->n - i) * 2 * sizeof *s->v);
        s->v[2 * i] = a;
        s->v[2 * i + 1] = e;
        s->n++;
        return 0;
    }
    if (s->v[2 * i] < a)
        a = s->v[2 * i];
    if (s->v[2 * j + 1] > e)
        e = s->v[2 * j + 1];
    s->v[2 * i] = a;
    s->v[2 * i + 1] = e;
    memmove(s->v + 2 * (i + 1), s->v + 2 * (j + 1), (size_t)(s->n - j - 1) * 2 * sizeof *s->v);
    s->n -= j - i;
    return 0;
}

static int pair_cmp(const void *pa, const void *pb)
{
    const int64_t *a = pa, *b = pb;
    return (a[0] > b[0]) - (a[0] < b[0]);
}

/* Merges the pending intervals into v (sort them, then one linear union). */
static int ivset_flush(ivset *s)
{
    if (s->np == 0)
        return 0;
    qsort(s->pend, (size_t)s->np, 2 * sizeof *s->pend, pair_cmp);
    int cap = s->n + s->np;
    int64_t *out = malloc((size_t)cap * 2 * sizeof *out);
    if (!out)
        return -1;
    int i = 0, j = 0, k = 0;
    while (i < s->n || j < s->np) {
        const int64_t *x;
        if (j == s->np || (i < s->n && s->v[2 * i] <= s->pend[2 * j]))
            x = s->v + 2 * i++;
        else
            x = s->pend + 2 * j++;
        if (k > 0 && x[0] <= out[2 * k - 1]) {
            if (x[1] > out[2 * k - 1])
                out[2 * k - 1] = x[1];
        } else {
            out[2 * k] = x[0];
            out[2 * k + 1] = x[1];
            k++;
        }
    }
    free(s->v);
    s->v = out;
    s->n = k;
    s->cap = cap;
    s->np = 0;
    return 0;
}

/* Adds an interval lazily: nodes high in the tree get many adds and few queries. The backlog is
 * merged when it outgrows the merged list, so memory stays linear. */
static int ivset_push(ivset *s, int64_t a, int64_t e)
{
    if (s->np == s->pcap) {
        if (s->np >= 64 && s->np >= s->n)
            return ivset_flush(s) != 0 ? -1 : ivset_push(s, a, e);
        int cap = s->pcap ? 2 * s->pcap : 4;
        int64_t *p = realloc(s->pend, (size_t)cap * 2 * sizeof *p);
        if (!p)
            return -1;
        s->pend = p;
        s->pcap = cap;
    }
    s->pend[2 * s->np] = a;
    s->pend[2 * s->np + 1] = e;
    s->np++;
    return 0;
}

/* ---- the time index ---- */

enum { MAX_LISTS = 256 }; /* a query gathers at most 4 lists per tree level */

typedef struct {
    int64_t start; /* the list's next interval start */
    int list, pos;
} merge_item;

typedef struct {
    int ns;
    ivset *cover; /* [4 ns] offsets of buffers whose canonical segments include the node */
    ivset *touch; /* [4 ns] offsets of buffers with a canonical segment in the node's subtree */
    ivset *got[MAX_LISTS]; /* the sorted lists a query gathered */
    int ngot;
    merge_item heap[MAX_LISTS]; /* k-way merge of the gathered lists */
} tindex;

static int tindex_insert(tindex *t, int node, int nl, int nr, int l, int r, int64_t a, int64_t e)
{
    if (r <= nl || nr <= l)
        return 0;
    if (l <= nl && nr <= r) {
        /* A leaf's subtree is itself: its touch list would equal its cover list. */
        if (nr - nl > 1 && ivset_push(&t->touch[node], a, e) != 0)
            return -1;
        return ivset_add(&t->cover[node], a, e);
    }
    if (ivset_push(&t->touch[node], a, e) != 0)
        return -1;
    int mid = nl + (nr - nl) / 2;
    if (tindex_insert(t, 2 * node, nl, mid, l, r, a, e) != 0)
        return -1;
    return tindex_insert(t, 2 * node + 1, mid, nr, l, r, a, e);
}

static int gather(tindex *t, ivset *s)
{
    if (ivset_flush(s) != 0)
        return -1;
    if (s->n > 0 && t->ngot < MAX_LISTS)
        t->got[t->ngot++] = s;
    return 0;
}

static int tindex_query(tindex *t, int node, int nl, int nr, int l, int r)
{
    if (r <= nl || nr <= l)
        return 0;
    if (l <= nl && nr <= r)
        return gather(t, nr - nl > 1 ? &t->touch[node] : &t->cover[node]);
    if (gather(t, &t->cover[node]) != 0)
        return -1;
    int mid = nl + (nr - nl) / 2;
    if (tindex_query(t, 2 * node, nl, mid, l, r) != 0)
        return -1;
    return tindex_query(t, 2 * node + 1, mid, nr, l, r);
}

static void sift_down(merge_item *h, int n, int k)
{
    merge_item x = h[k];
    for (;;) {
        int c = 2 * k + 1;
        if (c >= n)
            break;
        if (c + 1 < n && h[c + 1].start < h[c].start)
            c++;
        if (x.start <= h[c].start)
            break;
        h[k] = h[c];
        k = c;
    }
    h[k] = x;
}

/* Best fit for size among the gathered lists: walks their intervals in start order (a k-way
 * merge) and keeps the smallest gap that holds size, lowest first; else the top. */
static int64_t best_fit(tindex *t, int64_t size)
{
    int n = t->ngot;
    merge_item *h = t->heap;
    for (int k = 0; k < n; k++)
        h[k] = (merge_item){t->got[k]->v[0], k, 0};
    for (int k = n / 2 - 1; k >= 0; k--)
        sift_down(h, n, k);
    int64_t top = 0, best = -1, best_gap = 0;
    while (n > 0) {
        const ivset *l = t->got[h[0].list];
        const int64_t *v = l->v + 2 * h[0].pos;
        if (v[0] > top) {
            int64_t gap = v[0] - top;
            if (gap >= size && (best < 0 || gap < best_gap)) {
                best = top;
                best_gap = gap;
                if (gap == size)
                    return best; /* nothing fits tighter */
            }
        }
        if (v[1] > top)
            top = v[1];
        /* Skip this list's intervals that end at or below top (ends are sorted): a long merged
         * interval in one list hides many short ones in the others. */
        int a = h[0].pos + 1, b = l->n, step = 1;
        while (a + step < b && l->v[2 * (a + step) + 1] <= top) {
            a += step;
            step *= 2;
        }
        if (a + step < b)
            b = a + step;
        while (a < b) {
            int mid = a + (b - a) / 2;
            if (l->v[2 * mid + 1] <= top)
                a = mid + 1;
            else
                b = mid;
        }
        if (a == l->n) {
            h[0] = h[--n];
        } else {
            h[0].pos = a;
            h[0].start = l->v[2 * a];
        }
        sift_down(h, n, 0);
    }
    return best >= 0 ? best : top;
}

/* ---- orders (gp_key3: keys compared descending) ---- */

/* For each buffer, the largest section total over its span and the first section reaching it
 * (sparse table over sections). */
static int breadth(const gp_aprob *p, int64_t *tot, int *arg)
{
    int ns = p->ns, levels = 1;
    while ((1 << levels) <= ns)
        levels++;
    int *st = malloc((size_t)levels * (size_t)ns * sizeof *st); /* [levels, ns] argmax */
    if (!st)
        return -1;
    for (int s = 0; s < ns; s++)
        st[s] = s;
    for (int l = 1; l < levels; l++)
        for (int s = 0; s + (1 << l) <= ns; s++) {
            int a = st[(l - 1) * ns + s], c = st[(l - 1) * ns + s + (1 << (l - 1))];
            st[l * ns + s] = p->sec_total[c] > p->sec_total[a] ? c : a;
        }
    for (size_t i = 0; i < p->n; i++) {
        int lo = p->lo[i], len = p->hi[i] - lo, l = 0;
        while ((2 << l) <= len)
            l++;
        int a = st[l * ns + lo], c = st[l * ns + p->hi[i] - (1 << l)];
        arg[i] = p->sec_total[c] > p->sec_total[a] ? c : a;
        tot[i] = p->sec_total[arg[i]];
    }
    free(st);
    return 0;
}

static int make_order(const gp_aprob *p, int order, gp_key3 *keys)
{
    int64_t *tot = NULL;
    int *arg = NULL;
    if (order == 0 || order == 4) {
        tot = malloc(p->n * sizeof *tot);
        arg = malloc(p->n * sizeof *arg);
        if (!tot || !arg || breadth(p, tot, arg) != 0) {
            free(tot);
            free(arg);
            return -1;
        }
    }
    for (size_t i = 0; i < p->n; i++) {
        const gp_buffer *b = &p->b[i];
        double size = (double)b->size, dur = (double)b->upper - (double)b->lower;
        gp_key3 *k = &keys[i];
        k->idx = (int)i;
        switch (order) {
        /* breadth: the steps with the largest live total first, each step's buffers by size */
        case 0: k->k[0] = (double)tot[i]; k->k[1] = -(double)arg[i]; k->k[2] = size; break;
        case 1: k->k[0] = size; k->k[1] = dur; k->k[2] = 0; break;
        case 2: k->k[0] = dur; k->k[1] = size; k->k[2] = 0; break;
        case 3: k->k[0] = size * dur; k->k[1] = size; k->k[2] = 0; break;
        default: k->k[0] = (double)tot[i]; k->k[1] = size * dur; k->k[2] = size; break;
        }
    }
    free(tot);
    free(arg);
    qsort(keys, p->n, sizeof *keys, gp_key3_cmp);
    return 0;
}

/* ---- best fit with overlap lists (few overlapping pairs) ---- */

/* Insertion sort on runs of 16, then merges that alternate between v and scratch. */
int64_t *gp_pairs_sort(int64_t *v, int n, int64_t *scratch)
{
    enum { RUN = 16 };
    for (int r = 0; r < n; r += RUN) {
        int end = r + RUN < n ? r + RUN : n;
        for (int i = r + 1; i < end; i++) {
            int64_t a = v[2 * i], e = v[2 * i + 1];
            int j = i - 1;
            while (j >= r && v[2 * j] > a) {
                v[2 * j + 2] = v[2 * j];
                v[2 * j + 3] = v[2 * j + 1];
                j--;
            }
            v[2 * j + 2] = a;
            v[2 * j + 3] = e;
        }
    }
    int64_t *src = v, *dst = scratch;
    for (int w = RUN; w < n; w *= 2) {
        for (int l = 0; l < n; l += 2 * w) {
            int mid = l + w < n ? l + w : n, r = l + 2 * w < n ? l + 2 * w : n;
            int i = l, j = mid, k = l;
            while (i < mid && j < r) {
                int from = src[2 * i] <= src[2 * j] ? i++ : j++;
                dst[2 * k] = src[2 * from];
                dst[2 * k + 1] = src[2 * from + 1];
                k++;
            }
            if (i < mid)
                memcpy(dst + 2 * k, src + 2 * i, (size_t)(mid - i) * 2 * sizeof *src);
            else if (j < r)
                memcpy(dst + 2 * k, src + 2 * j, (size_t)(r - j) * 2 * sizeof *src);
        }
        int64_t *t = src;
        src = dst;
        dst = t;
    }
    return src;
}

static int run_lists(const gp_aprob *p, const gp_key3 *keys, const unsigned char *skip, int64_t *off)
{
    int64_t maxdeg = 0;
    for (size_t i = 0; i < p->n; i++)
        if (p->adj_start[i + 1] - p->adj_start[i] > maxdeg)
            maxdeg = p->adj_start[i + 1] - p->adj_start[i];
    /* at[2 j], at[2 j + 1]: offset and end of buffer j once placed (end 0 before): one compact
     * array, since the neighbour loop is bound by memory traffic. */
    int64_t *at = calloc(2 * p->n, sizeof *at);
    int64_t *v = malloc((size_t)(2 * maxdeg + 2) * sizeof *v);
    int64_t *scratch = malloc((size_t)(2 * maxdeg + 2) * sizeof *scratch);
    int rc = -1;
    if (!at || !v || !scratch)
        goto done;
    for (size_t k = 0; k < p->n; k++) {
        int i = keys[k].idx;
        if (skip && skip[p->part[i]])
            continue;
        int cnt = 0;
        for (int64_t a = p->adj_start[i]; a < p->adj_start[i + 1]; a++) {
            /* Branch-free: whether a neighbour is placed yet is a coin flip. */
            const int64_t *x = at + 2 * p->adj[a];
            v[2 * cnt] = x[0];
            v[2 * cnt + 1] = x[1];
            cnt += x[1] > 0;
        }
        const int64_t *iv = gp_pairs_sort(v, cnt, scratch);
        int64_t size = p->b[i].size, top = 0, best = -1, best_gap = 0;
        for (int q = 0; q < cnt; q++) {
            if (iv[2 * q] > top) {
                int64_t gap = iv[2 * q] - top;
                if (gap >= size && (best < 0 || gap < best_gap)) {
                    best = top;
                    best_gap = gap;
                    if (gap == size)
                        break;
                }
            }
            if (iv[2 * q + 1] > top)
                top = iv[2 * q + 1];
        }
        off[i] = best >= 0 ? best : top;
        at[2 * i] = off[i];
        at[2 * i + 1] = off[i] + size;
    }
    rc = 0;
done:
    free(at);
    free(v);
    free(scratch);
    return rc;
}

int gp_greedy_run(const gp_aprob *p, int order, const unsigned char *skip, int use_tree, int64_t *off)
{
    gp_key3 *keys = malloc(p->n * sizeof *keys);
    tindex t;
    memset(&t, 0, sizeof t);
    t.ns = p->ns;
    int rc = -1;
    if (!keys || make_order(p, order, keys) != 0)
        goto done;
    if (p->adj && !use_tree) {
        rc = run_lists(p, keys, skip, off);
        goto done;
    }
    t.cover = calloc(4 * (size_t)p->ns, sizeof(ivset));
    t.touch = calloc(4 * (size_t)p->ns, sizeof(ivset));
    if (!t.cover || !t.touch)
        goto done;
    for (size_t k = 0; k < p->n; k++) {
        int i = keys[k].idx;
        if (skip && skip[p->part[i]])
            continue;
        t.ngot = 0;
        if (tindex_query(&t, 1, 0, p->ns, p->lo[i], p->hi[i]) != 0)
            goto done;
        off[i] = best_fit(&t, p->b[i].size);
        if (tindex_insert(&t, 1, 0, p->ns, p->lo[i], p->hi[i], off[i], off[i] + p->b[i].size) != 0)
            goto done;
    }
    rc = 0;
done:
    if (t.cover && t.touch)
        for (size_t k = 0; k < 4 * (size_t)p->ns; k++) {
            ivset_free(&t.cover[k]);
            ivset_free(&t.touch[k]);
        }
    free(t.cover);
    free(t.touch);
    free(keys);
    return rc;
}
