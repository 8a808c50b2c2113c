/* Encoding: UTF-8 check, added/special tokens matched first, pre-tokenization (PCRE2 splits),
 * then ranked pair merging (byte-level BPE per word with a word cache; SentencePiece per
 * fragment), BOS/EOS. Scratch memory grows per call, never per token. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tok_impl.h"

typedef struct {
    uint32_t rank;
    int32_t pos, l, r, out;
} hent;

typedef struct {
    uint64_t h;
    const unsigned char *w; /* the word, inside the text being encoded */
    uint32_t wlen, ioff, n;
} centry;

typedef struct {
    int32_t *ids; /* [n_ids] every id so far (the caller gets the first cap) */
    int64_t n_ids, cap_ids;
    int32_t *sym, *next, *prev; /* [sym_cap] the word's symbols as a linked list */
    size_t sym_cap;
    hent *heap;
    size_t n_heap, heap_cap;
    uint32_t *frag[2]; /* [2 * frag_cap] (offset, length) pairs, ping-ponged per pattern */
    size_t n_frag[2], frag_cap[2];
    char *buf; /* the SentencePiece-escaped fragment, or a word in mapped form */
    size_t buf_cap;
    centry *cache; /* [cache_mask + 1] word -> ids */
    uint32_t cache_mask, cache_n;
    int32_t *cids; /* [n_cids] the cached words' ids */
    size_t n_cids, cap_cids;
    pcre2_match_data *md;
    pcre2_match_context *mc;
    pcre2_jit_stack *js;
    int oom;
} scratch;

static void *grow(void *p, size_t *cap, size_t need, size_t elem, int *oom)
{
    if (need <= *cap)
        return p;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(p, c * elem);
    if (!q) {
        *oom = 1;
        return NULL;
    }
    *cap = c;
    return q;
}

static void emit(scratch *s, int32_t id)
{
    if (s->n_ids == s->cap_ids) {
        size_t cap = (size_t)s->cap_ids;
        int32_t *p = grow(s->ids, &cap, (size_t)s->n_ids + 1, sizeof *p, &s->oom);
        if (!p)
            return;
        s->ids = p;
        s->cap_ids = (int64_t)cap;
    }
    s->ids[s->n_ids++] = id;
}

static inline int hless(const hent *a, const hent *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(scratch *s, hent e)
{
    if (s->n_heap == s->heap_cap) {
        hent *p = grow(s->heap, &s->heap_cap, s->n_heap + 1, sizeof *p, &s->oom);
        if (!p)
            return;
        s->heap = p;
    }
    size_t i = s->n_heap++;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!hless(&e, &s->heap[up]))
            break;
        s->heap[i] = s->heap[up];
        i = up;
    }
    s->heap[i] = e;
}

static hent heap_pop(scratch *s)
{
    hent top = s->heap[0], last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && hless(&s->heap[c + 1], &s->heap[c]))
            c++;
        if (!hless(&s->heap[c], &last))
            break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n)
        s->heap[i] = last;
    return top;
}

static void try_pair(const gp_tok *t, scratch *s, int32_t a, int32_t b)
{
    uint32_t rank;
    int32_t out;
    if (gp_tok_merge_find(t, s->sym[a], s->sym[b], &rank, &out))
        heap_push(s, (hent){rank, a, s->sym[a], s->sym[b], out});
}

static int reserve_syms(scratch *s, size_t n)
{
    if (n <= s->sym_cap)
        return 0;
    size_t c1 = s->sym_cap, c2 = s->sym_cap, c3 = s->sym_cap;
    int32_t *a = grow(s->sym, &c1, n, sizeof *a, &s->oom);
    if (a)
        s->sym = a;
    int32_t *b = grow(s->next, &c2, n, sizeof *b, &s->oom);
    if (b)
        s->next = b;
    int32_t *c = grow(s->prev, &c3, n, sizeof *c, &s->oom);
    if (c)
        s->prev = c;
    if (!a || !b || !c)
        return -1;
    s->sym_cap = n;
    return 0;
}

/* Merges sym[base .. base + n) pair by pair, the lowest-ranked pair first, leftmost among equals,
 * then emits what is left. A heap entry remembers the pair it was made for: when either side has
 * merged since, the entry is stale and skipped. */
static void merge_emit(const gp_tok *t, scratch *s, int base, int n)
{
    int32_t *id = s->sym, *nx = s->next, *pv = s->prev;
    for (int i = base; i < base + n; i++) {
        nx[i] = i + 1 < base + n ? i + 1 : -1;
        pv[i] = i - 1 >= base ? i - 1 : -1;
    }
    s->n_heap = 0;
    for (int i = base; i + 1 < base + n; i++)
        try_pair(t, s, i, i + 1);
    while (s->n_heap) {
        hent e = heap_pop(s);
        int32_t q = nx[e.pos];
        if (id[e.pos] != e.l || q < 0 || id[q] != e.r)
            continue;
        id[e.pos] = e.out;
        nx[e.pos] = nx[q];
        if (nx[q] >= 0)
            pv[nx[q]] = e.pos;
        id[q] = -2;
        if (pv[e.pos] >= 0)
            try_pair(t, s, pv[e.pos], e.pos);
        if (nx[e.pos] >= 0)
            try_pair(t, s, e.pos, nx[e.pos]);
    }
    for (int i = base; i >= 0 && n > 0; i = nx[i])
        if (id[i] >= 0)
            emit(s, id[i]);
}

#define CACHE_MAX_WORD 64

static void byte_word(const gp_tok *t, scratch *s, const unsigned char *w, size_t len)
{
    if (len == 1) {
        int32_t id = t->byte_id[w[0]] >= 0 ? t->byte_id[w[0]] : t->unk;
        if (id >= 0)
            emit(s, id);
        return;
    }
    uint64_t h = 0;
    uint32_t slot = 0;
    int cacheable = len <= CACHE_MAX_WORD && s->cache;
    if (cacheable) {
        h = gp_tok_hash(w, len);
        slot = (uint32_t)h & s->cache_mask;
        for (;;) {
            centry *c = &s->cache[slot];
            if (!c->w)
                break;
            if (c->h == h && c->wlen == len && memcmp(c->w, w, len) == 0) {
                for (uint32_t k = 0; k < c->n; k++)
                    emit(s, s->cids[c->ioff + k]);
                return;
            }
            slot = (slot + 1) & s->cache_mask;
        }
    }
    size_t first = (size_t)s->n_ids;
    int done = 0;
    if (t->ignore_merges) {
        /* the word in the vocabulary's mapped form: at most 2 bytes a byte */
        char *p = grow(s->buf, &s->buf_cap, 2 * len, 1, &s->oom);
        if (!p)
            return;
        s->buf = p;
        size_t m = 0;
        for (size_t i = 0; i < len; i++) {
            uint32_t cp = gp_tok_byte_cp(w[i]);
            if (cp < 0x80)
                p[m++] = (char)cp;
            else {
                p[m++] = (char)(0xc0 | cp >> 6);
                p[m++] = (char)(0x80 | (cp & 0x3f));
            }
        }
        int32_t id = gp_tok_find(t, p, m);
        if (id >= 0) {
            emit(s, id);
            done = 1;
        }
    }
    if (!done) {
        if (reserve_syms(s, len) != 0)
            return;
        int n = 0;
        for (size_t i = 0; i < len; i++) {
            int32_t id = t->byte_id[w[i]] >= 0 ? t->byte_id[w[i]] : t->unk;
            if (id >= 0)
                s->sym[n++] = id;
        }
        merge_emit(t, s, 0, n);
    }
    if (cacheable && s->cache_n < (s->cache_mask + 1) / 2 && !s->oom) {
        uint32_t n = (uint32_t)((size_t)s->n_ids - first);
        int32_t *p = grow(s->cids, &s->cap_cids, s->n_cids + n, sizeof *p, &s->oom);
        if (!p)
            return;
        s->cids = p;
        if (n)
            memcpy(s->cids + s->n_cids, s->ids + first, n * sizeof *p);
        s->cache[slot] = (centry){h, w, (uint32_t)len, (uint32_t)s->n_cids, n};
        s->n_cids += n;
        s->cache_n++;
    }
}

static int push_frag(scratch *s, int k, uint32_t off, uint32_t len)
{
    if (!len)
        return 0;
    uint32_t *p = grow(s->frag[k], &s->frag_cap[k], 2 * (s->n_frag[k] + 1), sizeof *p, &s->oom);
    if (!p)
        return -1;
    s->frag[k] = p;
    p[2 * s->n_frag[k]] = off;
    p[2 * s->n_frag[k] + 1] = len;
    s->n_frag[k]++;
    return 0;
}

/* Pre-tokenization: each pattern in turn isolates its matches inside the pieces the previous one
 * left (the text between matches stays a piece too). The pieces end in s->frag[*which]. */
static int split(const gp_tok *t, scratch *s, const unsigned char *text, size_t len, int *which,
                 char *err, size_t errlen)
{
    s->n_frag[0] = 0;
    if (push_frag(s, 0, 0, (uint32_t)len) != 0)
        return -1;
    int cur = 0;
    for (int r = 0; r < t->n_re; r++) {
        int nxt = 1 - cur;
        s->n_frag[nxt] = 0;
        for (size_t f = 0; f < s->n_frag[cur]; f++) {
            uint32_t off = s->frag[cur][2 * f], flen = s->frag[cur][2 * f + 1];
            const unsigned char *subj = text + off;
            size_t start = 0, done = 0;
            while (start < flen) {
                int rc = pcre2_match(t->re[r], subj, flen, start, PCRE2_NO_UTF_CHECK, s->md,
                                     s->mc);
                if (rc == PCRE2_ERROR_NOMATCH)
                    break;
                if (rc < 0) {
                    char msg[256];
                    pcre2_get_error_message(rc, (PCRE2_UCHAR *)msg, sizeof msg);
                    snprintf(err, errlen, "%s: pre-tokenizer pattern %d failed at byte %zu: %s",
                             t->name, r, (size_t)off + start, msg);
                    return -1;
                }
                PCRE2_SIZE *ov = pcre2_get_ovector_pointer(s->md);
                size_t ms = ov[0], me = ov[1];
                if (me == ms) { /* an empty match splits nothing: step over one character */
                    start = ms + (size_t)gp_tok_utf8_len(subj[ms]);
                    continue;
                }
                if (push_frag(s, nxt, off + (uint32_t)done, (uint32_t)(ms - done)) != 0 ||
                    push_frag(s, nxt, off + (uint32_t)ms, (uint32_t)(me - ms)) != 0)
                    return -1;
                done = start = me;
            }
            if (push_frag(s, nxt, off + (uint32_t)done, (uint32_t)(flen - done)) != 0)
                return -1;
        }
        cur = nxt;
    }
    *which = cur;
    return 0;
}

/* Byte-level BPE over a fragment of plain text: each pre-tokenized piece is a word. */
static int byte_fragment(const gp_tok *t, scratch *s, const unsigned char *text, size_t len,
                         char *err, size_t errlen)
{
    int cur;
    if (split(t, s, text, len, &cur, err, errlen) != 0)
        return -1;
    for (size_t f = 0; f < s->n_frag[cur]; f++)
        byte_word(t, s, text + s->frag[cur][2 * f], s->frag[cur][2 * f + 1]);
    return s->oom ? -1 : 0;
}

/* SentencePiece over a fragment: spaces become U+2581 (and one leads when asked), then the
 * characters merge by score over the whole fragment; a character outside the vocabulary becomes
 * its bytes' <0xNN> tokens. */
static int spm_fragment(const gp_tok *t, scratch *s, const unsigned char *text, size_t len,
                        int prefix)
{
    char *b = grow(s->buf, &s->buf_cap, 3 * len + 3, 1, &s->oom);
    if (!b)
        return -1;
    s->buf = b;
    size_t m = 0;
    if (prefix) {
        memcpy(b, "\xe2\x96\x81", 3);
        m = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(b + m, "\xe2\x96\x81", 3);
            m += 3;
        } else
            b[m++] = (char)text[i];
    }
    if (reserve_syms(s, m) != 0)
        return -1;
    int n = 0;
    for (size_t i = 0; i < m;) {
        size_t k = (size_t)gp_tok_utf8_len((unsigned char)b[i]);
        int32_t id = gp_tok_find(t, b + i, k);
        if (id >= 0 && t->type[id] != GP_TOKT_CONTROL)
            s->sym[n++] = id;
        else
            for (size_t j = 0; j < k; j++) {
                int32_t bid = t->byte_id[(unsigned char)b[i + j]];
                if (bid >= 0)
                    s->sym[n++] = bid;
                else if (t->unk >= 0 && j == 0)
                    s->sym[n++] = t->unk;
            }
        i += k;
    }
    /* A symbol in no merge pair (a byte fallback, often the newline) never joins its neighbours:
     * the runs between such symbols merge independently, each with a small heap. */
    for (int a = 0; a < n;) {
        int b = a;
        while (b < n && t->in_merge[s->sym[b]])
            b++;
        if (b > a)
            merge_emit(t, s, a, b - a);
        if (b < n)
            emit(s, s->sym[b]);
        a = b + 1;
    }
    return s->oom ? -1 : 0;
}

static int plain(const gp_tok *t, scratch *s, const unsigned char *text, size_t len, int *prev_sp,
                 char *err, size_t errlen)
{
    if (!len)
        return 0;
    int rc = 0;
    if (t->kind == GP_TOK_SPM && t->n_re) {
        /* SentencePiece-style BPE with a split (Gemma 4: newline runs apart from the text) */
        int cur;
        rc = split(t, s, text, len, &cur, err, errlen);
        for (size_t f = 0; !rc && f < s->n_frag[cur]; f++)
            rc = spm_fragment(t, s, text + s->frag[cur][2 * f], s->frag[cur][2 * f + 1],
                              t->add_space_prefix && *prev_sp && f == 0);
    } else if (t->kind == GP_TOK_SPM)
        rc = spm_fragment(t, s, text, len, t->add_space_prefix && *prev_sp);
    else
        rc = byte_fragment(t, s, text, len, err, errlen);
    *prev_sp = 0;
    return rc;
}

static void scratch_free(scratch *s)
{
    free(s->ids);
    free(s->sym);
    free(s->next);
    free(s->prev);
    free(s->heap);
    free(s->frag[0]);
    free(s->frag[1]);
    free(s->buf);
    free(s->cache);
    free(s->cids);
    pcre2_match_data_free(s->md);
    pcre2_match_context_free(s->mc);
    pcre2_jit_stack_free(s->js);
}

int64_t gp_tok_encode(const gp_tok *t, const char *text_in, size_t len, int add_special,
                      int parse_special, int32_t *ids, int64_t cap, char *err, size_t errlen)
{
    const unsigned char *text = (const unsigned char *)text_in;
    int64_t bad = gp_tok_utf8_check(text, len);
    if (bad >= 0) {
        snprintf(err, errlen, "invalid UTF-8 at byte %lld", (long long)bad);
        return -1;
    }
    unsigned char *normalized = NULL;
    if (t->nfc && len) {
        utf8proc_ssize_t n = utf8proc_map(text, (utf8proc_ssize_t)len, &normalized,
                                          (utf8proc_option_t)(UTF8PROC_STABLE | t->nfc));
        if (n < 0) {
            snprintf(err, errlen, "%s: normalization failed (%s)", t->name,
                     utf8proc_errmsg(n));
            return -1;
        }
        text = normalized;
        len = (size_t)n;
    }
    scratch s = {0};
    if (t->n_re) {
        uint32_t c = 1024;
        while (c < 65536 && c < len / 2)
            c *= 2;
        s.cache = calloc(c, sizeof *s.cache);
        s.cache_mask = c - 1;
        s.md = pcre2_match_data_create(1, NULL);
        s.mc = pcre2_match_context_create(NULL);
        s.js = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, NULL);
        if (!s.cache || !s.md || !s.mc || !s.js)
            s.oom = 1;
        else
            pcre2_jit_stack_assign(s.mc, NULL, s.js);
    }
    int rc = s.oom ? -1 : 0;
    if (!rc && add_special && t->add_bos && t->bos >= 0)
        emit(&s, t->bos);
    int prev_sp = 1; /* SentencePiece's space prefix: at the start and after a special token */
    size_t seg = 0, pos = 0;
    while (!rc && pos < len) {
        unsigned char c = text[pos];
        int matched = 0;
        for (int k = t->first_at[c]; k < t->first_at[c + 1] && (c & 0xc0) != 0x80; k++) {
            int32_t id = t->special[k];
            if (t->type[id] == GP_TOKT_CONTROL && !parse_special)
                continue;
            uint32_t o = t->text_off[id], n = t->text_off[id + 1] - o;
            if (n <= len - pos && memcmp(text + pos, t->text + o, n) == 0) {
                rc = plain(t, &s, text + seg, pos - seg, &prev_sp, err, errlen);
                emit(&s, id);
                prev_sp = 1;
                pos += n;
                seg = pos;
                matched = 1;
                break;
            }
        }
        if (!matched)
            pos++;
    }
    if (!rc)
        rc = plain(t, &s, text + seg, len - seg, &prev_sp, err, errlen);
    if (!rc && add_special && t->add_eos && t->eos >= 0)
        emit(&s, t->eos);
    if (!rc && s.oom)
        rc = -1;
    if (rc && s.oom)
        snprintf(err, errlen, "%s: out of memory encoding %zu bytes", t->name, len);
    int64_t n = rc ? -1 : s.n_ids;
    if (n > 0 && ids)
        memcpy(ids, s.ids, (size_t)(n < cap ? n : cap) * sizeof *ids);
    scratch_free(&s);
    free(normalized);
    return n;
}
