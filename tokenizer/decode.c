/* Decoding: ids to the bytes they stand for, whole or streamed one id at a time (only whole
 * UTF-8 characters come out of the stream). */
#include <string.h>

#include "tokenizer/tok_impl.h"

static const char *piece_of(const gp_tok *t, int32_t id, int render_special, size_t *len)
{
    uint8_t ty = t->type[id];
    if ((ty == GP_TOKT_CONTROL || ty == GP_TOKT_UNKNOWN) && !render_special) {
        *len = 0;
        return "";
    }
    *len = t->piece_off[id + 1] - t->piece_off[id];
    return t->piece + t->piece_off[id];
}

int gp_tok_piece(const gp_tok *t, int32_t id, int render_special, char *buf, size_t cap)
{
    if (id < 0 || id >= t->n_vocab)
        return -1;
    size_t len;
    const char *p = piece_of(t, id, render_special, &len);
    if (cap)
        memcpy(buf, p, len < cap ? len : cap);
    return (int)len;
}

/* SentencePiece's leading space: the one the encoder put before the text is not the text's. */
static int strips_space(const gp_tok *t) { return t->kind == GP_TOK_SPM && t->add_space_prefix; }

int64_t gp_tok_decode(const gp_tok *t, const int32_t *ids, int64_t n, int render_special,
                      char *out, size_t cap)
{
    size_t used = 0;
    int first = 1;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab)
            return -1;
        size_t len;
        const char *p = piece_of(t, ids[i], render_special, &len);
        if (first && len) {
            first = 0;
            if (strips_space(t) && p[0] == ' ') {
                p++;
                len--;
            }
        }
        if (used < cap)
            memcpy(out + used, p, used + len <= cap ? len : cap - used);
        used += len;
    }
    if (cap > 0)
        out[used < cap ? used : cap - 1] = '\0';
    return (int64_t)used;
}

size_t gp_tok_stream_cap(const gp_tok *t)
{
    return 3 * ((size_t)t->max_piece + 4) + 1;
}

void gp_tok_stream_init(gp_tok_stream *s)
{
    memset(s, 0, sizeof *s);
    s->first = 1;
}

/* The bytes a character that starts with lead needs, and the range of its second byte; 0 for a
 * byte that starts no character. */
static int seq_len(unsigned char c, unsigned char *lo, unsigned char *hi)
{
    *lo = 0x80;
    *hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf)
        return 2;
    if (c >= 0xe0 && c <= 0xef) {
        if (c == 0xe0)
            *lo = 0xa0;
        if (c == 0xed)
            *hi = 0x9f;
        return 3;
    }
    if (c >= 0xf0 && c <= 0xf4) {
        if (c == 0xf0)
            *lo = 0x90;
        if (c == 0xf4)
            *hi = 0x8f;
        return 4;
    }
    return 0;
}

static int put(char *out, size_t cap, size_t *used, const void *p, size_t n)
{
    if (*used + n + 1 > cap)
        return -1;
    memcpy(out + *used, p, n);
    *used += n;
    return 0;
}

static const char replacement[] = "\xef\xbf\xbd";

int gp_tok_stream_push(const gp_tok *t, gp_tok_stream *s, int32_t id, char *out, size_t cap)
{
    if (id < 0 || id >= t->n_vocab || cap == 0)
        return -1;
    size_t len, used = 0;
    const unsigned char *p = (const unsigned char *)piece_of(t, id, 0, &len);
    if (s->first && len) {
        s->first = 0;
        if (strips_space(t) && p[0] == ' ') {
            p++;
            len--;
        }
    }
    for (size_t i = 0; i < len;) {
        unsigned char c = p[i], lo, hi;
        if (s->n_pending == 0) {
            if (c < 0x80) {
                if (put(out, cap, &used, &c, 1) != 0)
                    return -1;
            } else if (seq_len(c, &lo, &hi)) {
                s->pending[s->n_pending++] = c;
            } else if (put(out, cap, &used, replacement, 3) != 0) {
                return -1;
            }
            i++;
            continue;
        }
        int need = seq_len(s->pending[0], &lo, &hi);
        int ok = s->n_pending == 1 ? (c >= lo && c <= hi) : (c & 0xc0) == 0x80;
        if (!ok) {
            /* the pending character never completes: one U+FFFD for it, then c afresh */
            s->n_pending = 0;
            if (put(out, cap, &used, replacement, 3) != 0)
                return -1;
            continue;
        }
        s->pending[s->n_pending++] = c;
        i++;
        if (s->n_pending == need) {
            if (put(out, cap, &used, s->pending, (size_t)need) != 0)
                return -1;
            s->n_pending = 0;
        }
    }
    out[used] = '\0';
    return (int)used;
}

int gp_tok_stream_flush(gp_tok_stream *s, char *out, size_t cap)
{
    size_t used = 0;
    if (cap == 0)
        return -1;
    if (s->n_pending) {
        s->n_pending = 0;
        if (put(out, cap, &used, replacement, 3) != 0)
            return -1;
    }
    out[used] = '\0';
    return (int)used;
}
