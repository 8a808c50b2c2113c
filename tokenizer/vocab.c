/* The tokenizer's tables: token texts and the text -> id index, ranked merges, decoded pieces,
 * the special-token list; built by the loaders, read by the encoder and decoder. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_impl.h"

/* PCRE2's JIT code reads memory in ways valgrind's memcheck cannot follow (false "uninitialised"
 * reports from generated code): under valgrind the patterns run interpreted, same matches. */
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define GP_UNDER_VALGRIND() RUNNING_ON_VALGRIND
#endif
#endif
#ifndef GP_UNDER_VALGRIND
#define GP_UNDER_VALGRIND() 0
#endif

#define TOK_ERR(...) (snprintf(err, errlen, __VA_ARGS__), -1)

uint64_t gp_tok_hash(const void *s, size_t len)
{
    /* FNV-1a folded with a final mix: texts are short, and the mix spreads the low bits that the
     * power-of-two tables index by. */
    const unsigned char *p = s;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 32);
}

int gp_tok_utf8_len(unsigned char c)
{
    if (c < 0xc0)
        return 1;
    if (c < 0xe0)
        return 2;
    if (c < 0xf0)
        return 3;
    return c < 0xf8 ? 4 : 1;
}

int64_t gp_tok_utf8_check(const unsigned char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t n;
        unsigned lo = 0x80, hi = 0xbf;
        if (c >= 0xc2 && c <= 0xdf)
            n = 2;
        else if (c >= 0xe0 && c <= 0xef) {
            n = 3;
            if (c == 0xe0)
                lo = 0xa0; /* overlong */
            if (c == 0xed)
                hi = 0x9f; /* surrogates */
        } else if (c >= 0xf0 && c <= 0xf4) {
            n = 4;
            if (c == 0xf0)
                lo = 0x90;
            if (c == 0xf4)
                hi = 0x8f; /* above U+10FFFF */
        } else
            return (int64_t)i;
        if (i + n > len)
            return (int64_t)i;
        if (s[i + 1] < lo || s[i + 1] > hi)
            return (int64_t)i;
        for (size_t k = 2; k < n; k++)
            if ((s[i + k] & 0xc0) != 0x80)
                return (int64_t)i;
        i += n;
    }
    return -1;
}

int gp_tok_utf8_valid(const char *s, size_t len)
{
    return gp_tok_utf8_check((const unsigned char *)s, len) < 0;
}

uint32_t gp_tok_byte_cp(unsigned b)
{
    /* Printable Latin-1 bytes stand for themselves; the others (controls, space, DEL, NBSP,
     * soft hyphen) take 256, 257, ... in byte order: GPT-2's bytes_to_unicode. */
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)
        return b;
    uint32_t n = 0;
    for (unsigned x = 0; x < b; x++)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174))
            n++;
    return 256 + n;
}

gp_tok *gp_tok_alloc(int32_t n_vocab, gp_tok_kind kind, const char *name)
{
    gp_tok *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->kind = kind;
    t->n_vocab = n_vocab;
    t->text_off = calloc((size_t)n_vocab + 1, sizeof *t->text_off);
    t->type = malloc((size_t)n_vocab + 1);
    t->unk = t->bos = t->eos = t->eot = t->eom = t->pad = -1;
    snprintf(t->name, sizeof t->name, "%s", name);
    if (!t->text_off || !t->type) {
        gp_tok_free(t);
        return NULL;
    }
    memset(t->type, GP_TOKT_NORMAL, (size_t)n_vocab + 1);
    /* texts are set in id order; an id never set keeps an empty text */
    return t;
}

/* Texts must be set in increasing id order (every loader does). */
int gp_tok_set_text(gp_tok *t, int32_t id, const char *s, size_t len)
{
    if (len > UINT32_MAX - t->text_len)
        return -1;
    if (t->text_len + len > t->text_cap) {
        size_t cap = t->text_cap ? t->text_cap : 1 << 16;
        while (cap < t->text_len + len)
            cap *= 2;
        char *p = realloc(t->text, cap);
        if (!p)
            return -1;
        t->text = p;
        t->text_cap = cap;
    }
    if (id < t->n_set || id >= t->n_vocab)
        return -1;
    for (int32_t i = t->n_set; i < id; i++)
        t->text_off[i + 1] = (uint32_t)t->text_len; /* ids skipped: empty texts */
    memcpy(t->text + t->text_len, s, len);
    t->text_len += len;
    t->text_off[id + 1] = (uint32_t)t->text_len;
    t->n_set = id + 1;
    return 0;
}

int32_t gp_tok_find(const gp_tok *t, const char *s, size_t len)
{
    uint32_t i = (uint32_t)gp_tok_hash(s, len) & t->tab_mask;
    for (;;) {
        int32_t id = t->tab[i];
        if (id < 0)
            return -1;
        uint32_t o = t->text_off[id], n = t->text_off[id + 1] - o;
        if (n == len && memcmp(t->text + o, s, len) == 0)
            return id;
        i = (i + 1) & t->tab_mask;
    }
}

int gp_tok_index(gp_tok *t, char *err, size_t errlen)
{
    for (int32_t i = t->n_set; i < t->n_vocab; i++)
        t->text_off[i + 1] = (uint32_t)t->text_len;
    t->n_set = t->n_vocab;
    uint32_t cap = 1024;
    while (cap < (uint32_t)t->n_vocab * 2u)
        cap *= 2;
    free(t->tab);
    t->tab = malloc(cap * sizeof *t->tab);
    if (!t->tab)
        return TOK_ERR("%s: out of memory", t->name);
    memset(t->tab, 0xff, cap * sizeof *t->tab);
    t->tab_mask = cap - 1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        uint32_t o = t->text_off[id], n = t->text_off[id + 1] - o;
        uint32_t i = (uint32_t)gp_tok_hash(t->text + o, n) & t->tab_mask;
        for (;;) {
            int32_t j = t->tab[i];
            if (j < 0) {
                t->tab[i] = id;
                break;
            }
            uint32_t oj = t->text_off[j];
            if (t->text_off[j + 1] - oj == n && memcmp(t->text + oj, t->text + o, n) == 0) {
                t->tab[i] = id; /* a repeated text names its last id, as llama.cpp reads it */
                break;
            }
            i = (i + 1) & t->tab_mask;
        }
    }
    return 0;
}

static inline uint32_t merge_slot(uint64_t key, uint32_t mask)
{
    return (uint32_t)((key * 0x9e3779b97f4a7c15ull) >> 32) & mask;
}

int gp_tok_merges_reserve(gp_tok *t, int64_t n)
{
    uint64_t cap = 1024;
    while (cap < (uint64_t)n * 2)
        cap *= 2;
    if (cap > (1ull << 31))
        return -1;
    t->mkey = calloc(cap, sizeof *t->mkey);
    t->mrank = malloc(cap * sizeof *t->mrank);
    t->mout = malloc(cap * sizeof *t->mout);
    if (!t->mkey || !t->mrank || !t->mout)
        return -1;
    t->mmask = (uint32_t)(cap - 1);
    return 0;
}

/* The first merge of a pair wins (a later duplicate line never applies). */
void gp_tok_merge_add(gp_tok *t, int32_t l, int32_t r, int32_t out, uint32_t rank)
{
    uint64_t key = ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) + 1;
    uint32_t i = merge_slot(key, t->mmask);
    while (t->mkey[i]) {
        if (t->mkey[i] == key)
            return;
        i = (i + 1) & t->mmask;
    }
    t->mkey[i] = key;
    t->mrank[i] = rank;
    t->mout[i] = out;
    t->n_merges++;
}

int gp_tok_merge_find(const gp_tok *t, int32_t l, int32_t r, uint32_t *rank, int32_t *out)
{
    if (!t->mkey)
        return 0;
    uint64_t key = ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) + 1;
    uint32_t i = merge_slot(key, t->mmask);
    for (;;) {
        uint64_t k = t->mkey[i];
        if (k == key) {
            *rank = t->mrank[i];
            *out = t->mout[i];
            return 1;
        }
        if (!k)
            return 0;
        i = (i + 1) & t->mmask;
    }
}

typedef struct {
    float score;
    int32_t id;
} scored;

static int by_score_desc(const void *a, const void *b)
{
    const scored *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int mergeable(const gp_tok *t, int32_t id)
{
    uint8_t ty = t->type[id];
    return ty == GP_TOKT_NORMAL || ty == GP_TOKT_USER || ty == GP_TOKT_UNDEFINED;
}

/* Ids with equal scores share a rank. */
int gp_tok_merges_from_scores(gp_tok *t, char *err, size_t errlen)
{
    int32_t n = t->n_vocab;
    scored *order = malloc((size_t)n * sizeof *order);
    uint32_t *rank = malloc((size_t)n * sizeof *rank);
    if (!order || !rank) {
        free(order);
        free(rank);
        return TOK_ERR("%s: out of memory", t->name);
    }
    for (int32_t i = 0; i < n; i++)
        order[i] = (scored){t->score[i], i};
    qsort(order, (size_t)n, sizeof *order, by_score_desc);
    uint32_t r = 0;
    for (int32_t i = 0; i < n; i++) {
        if (i > 0 && order[i].score != order[i - 1].score)
            r++;
        rank[order[i].id] = r;
    }
    free(order);
    int64_t pairs = 0;
    for (int32_t id = 0; id < n; id++)
        if (mergeable(t, id))
            pairs += t->text_off[id + 1] - t->text_off[id];
    if (gp_tok_merges_reserve(t, pairs + 1) != 0) {
        free(rank);
        return TOK_ERR("%s: out of memory", t->name);
    }
    for (int32_t id = 0; id < n; id++) {
        if (!mergeable(t, id))
            continue;
        const char *s = t->text + t->text_off[id];
        size_t len = t->text_off[id + 1] - t->text_off[id];
        for (size_t k = (size_t)gp_tok_utf8_len((unsigned char)s[0]); k < len;
             k += (size_t)gp_tok_utf8_len((unsigned char)s[k])) {
            int32_t a = gp_tok_find(t, s, k), b = gp_tok_find(t, s + k, len - k);
            if (a >= 0 && b >= 0 && mergeable(t, a) && mergeable(t, b))
                gp_tok_merge_add(t, a, b, id, rank[id]);
        }
    }
    free(rank);
    return 0;
}

int gp_tok_set_pretok(gp_tok *t, const char *const *patterns, int n, char *err, size_t errlen)
{
    if (n > GP_TOK_MAX_RE)
        return TOK_ERR("%s: bad tokenizer (%d pre-tokenizer patterns, at most %d)", t->name, n,
                       GP_TOK_MAX_RE);
    for (int i = 0; i < n; i++) {
        int ec;
        PCRE2_SIZE off;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)patterns[i], PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &ec, &off, NULL);
        if (!re) {
            char msg[256];
            pcre2_get_error_message(ec, (PCRE2_UCHAR *)msg, sizeof msg);
            return TOK_ERR("%s: bad tokenizer (pre-tokenizer pattern %d at offset %zu: %s)",
                           t->name, i, (size_t)off, msg);
        }
        /* JIT is an optimization: a platform without it still matches (interpreted) */
        if (!GP_UNDER_VALGRIND())
            (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
        t->re[t->n_re++] = re;
    }
    return 0;
}

int gp_tok_add_eog(gp_tok *t, int32_t id)
{
    if (id < 0 || id >= t->n_vocab)
        return 0;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return 0;
    int32_t *p = realloc(t->eog, ((size_t)t->n_eog + 1) * sizeof *p);
    if (!p)
        return -1;
    t->eog = p;
    t->eog[t->n_eog++] = id;
    return 0;
}

static int append_utf8(char *out, uint32_t cp)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    out[0] = (char)(0xe0 | cp >> 12);
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[2] = (char)(0x80 | (cp & 0x3f));
    return 3;
}

/* Byte-level: the token's characters mapped back to bytes; a text that is not made of mapped
 * characters (an added token kept raw) stands for itself. */
static size_t byte_level_piece(const char *s, size_t len, const int16_t *cp_byte, char *out)
{
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)s[i];
        uint32_t cp;
        int k = gp_tok_utf8_len(c);
        if (c < 0x80)
            cp = c;
        else if (k == 2 && i + 1 < len)
            cp = (uint32_t)(c & 0x1f) << 6 | ((unsigned char)s[i + 1] & 0x3f);
        else
            cp = 0xffff;
        if (cp >= 512 || cp_byte[cp] < 0) {
            memcpy(out, s, len);
            return len;
        }
        out[n++] = (char)cp_byte[cp];
        i += (size_t)k;
    }
    return n;
}

static int parse_byte_token(const char *s, size_t len)
{
    /* "<0xNN>" */
    if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10
              : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

typedef struct {
    uint32_t first, len;
    int32_t id;
} special_key;

static int by_first_then_longer(const void *a, const void *b)
{
    const special_key *x = a, *y = b;
    if (x->first != y->first)
        return x->first < y->first ? -1 : 1;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

int gp_tok_finish(gp_tok *t, char *err, size_t errlen)
{
    int32_t n = t->n_vocab;
    /* decoded pieces */
    int16_t cp_byte[512];
    memset(cp_byte, 0xff, sizeof cp_byte);
    for (unsigned b = 0; b < 256; b++)
        cp_byte[gp_tok_byte_cp(b)] = (int16_t)b;
    t->piece = malloc(t->text_len + 1);
    t->piece_off = malloc(((size_t)n + 1) * sizeof *t->piece_off);
    if (!t->piece || !t->piece_off)
        return TOK_ERR("%s: out of memory", t->name);
    size_t pn = 0;
    for (int32_t id = 0; id < n; id++) {
        const char *s = t->text + t->text_off[id];
        size_t len = t->text_off[id + 1] - t->text_off[id];
        t->piece_off[id] = (uint32_t)pn;
        uint8_t ty = t->type[id];
        int bv = parse_byte_token(s, len);
        if (ty == GP_TOKT_BYTE && bv < 0 && t->kind == GP_TOK_SPM)
            return TOK_ERR("%s: bad tokenizer (token %d is a byte token but its text is not "
                           "<0xNN>)", t->name, (int)id);
        if (ty == GP_TOKT_CONTROL || ty == GP_TOKT_USER || ty == GP_TOKT_UNKNOWN) {
            memcpy(t->piece + pn, s, len); /* raw text; control ones shown only on request */
            pn += len;
        } else if (t->kind == GP_TOK_SPM && ty == GP_TOKT_BYTE) {
            t->piece[pn++] = (char)bv;
        } else if (t->kind == GP_TOK_SPM) {
            for (size_t i = 0; i < len;) {
                if (i + 3 <= len && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
                    t->piece[pn++] = ' ';
                    i += 3;
                } else
                    t->piece[pn++] = s[i++];
            }
        } else {
            pn += byte_level_piece(s, len, cp_byte, t->piece + pn);
        }
    }
    t->piece_off[n] = (uint32_t)pn;
    for (int32_t id = 0; id < n; id++)
        if (t->piece_off[id + 1] - t->piece_off[id] > t->max_piece)
            t->max_piece = t->piece_off[id + 1] - t->piece_off[id];

    t->in_merge = calloc((size_t)n + 1, 1);
    if (!t->in_merge)
        return TOK_ERR("%s: out of memory", t->name);
    for (uint64_t i = 0; t->mkey && i <= t->mmask; i++)
        if (t->mkey[i]) {
            uint64_t k = t->mkey[i] - 1;
            t->in_merge[(uint32_t)(k >> 32)] = 1;
            t->in_merge[(uint32_t)k] = 1;
        }

    /* the tokens the first symbols of a word are */
    for (unsigned b = 0; b < 256; b++) {
        t->byte_id[b] = -1;
        if (t->kind == GP_TOK_BYTE_BPE) {
            char u[4];
            int k = append_utf8(u, gp_tok_byte_cp(b));
            t->byte_id[b] = gp_tok_find(t, u, (size_t)k);
        } else {
            char u[8];
            snprintf(u, sizeof u, "<0x%02X>", b);
            int32_t id = gp_tok_find(t, u, 6);
            t->byte_id[b] = id >= 0 && t->type[id] == GP_TOKT_BYTE ? id : -1;
        }
    }

    /* tokens matched before pre-tokenization */
    free(t->special);
    t->special = malloc(((size_t)n + 1) * sizeof *t->special);
    if (!t->special)
        return TOK_ERR("%s: out of memory", t->name);
    special_key *keys = malloc(((size_t)n + 1) * sizeof *keys);
    if (!keys)
        return TOK_ERR("%s: out of memory", t->name);
    t->n_special = 0;
    for (int32_t id = 0; id < n; id++)
        if ((t->type[id] == GP_TOKT_CONTROL || t->type[id] == GP_TOKT_USER) &&
            t->text_off[id + 1] > t->text_off[id])
            keys[t->n_special++] = (special_key){(unsigned char)t->text[t->text_off[id]],
                                                 t->text_off[id + 1] - t->text_off[id], id};
    qsort(keys, (size_t)t->n_special, sizeof *keys, by_first_then_longer);
    for (int i = 0; i < t->n_special; i++)
        t->special[i] = keys[i].id;
    free(keys);
    int k = 0;
    for (int b = 0; b <= 256; b++) {
        while (k < t->n_special && (unsigned char)t->text[t->text_off[t->special[k]]] < b)
            k++;
        t->first_at[b] = k;
    }

    if (t->eos >= 0 && gp_tok_add_eog(t, t->eos) != 0)
        return TOK_ERR("%s: out of memory", t->name);
    if (t->eot >= 0 && gp_tok_add_eog(t, t->eot) != 0)
        return TOK_ERR("%s: out of memory", t->name);
    if (t->eom >= 0 && gp_tok_add_eog(t, t->eom) != 0)
        return TOK_ERR("%s: out of memory", t->name);
    /* end-of-turn texts the chat formats use, when they are control tokens */
    static const char *const eot_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                            "<|endoftext|>", "<|eom_id|>", "<|END_OF_TURN_TOKEN|>"};
    for (size_t i = 0; i < sizeof eot_texts / sizeof *eot_texts; i++) {
        int32_t id = gp_tok_find(t, eot_texts[i], strlen(eot_texts[i]));
        if (id >= 0 && t->type[id] == GP_TOKT_CONTROL && gp_tok_add_eog(t, id) != 0)
            return TOK_ERR("%s: out of memory", t->name);
    }
    return 0;
}

void gp_tok_free(gp_tok *t)
{
    if (!t)
        return;
    free(t->text);
    free(t->text_off);
    free(t->piece);
    free(t->piece_off);
    free(t->type);
    free(t->score);
    free(t->tab);
    free(t->mkey);
    free(t->mrank);
    free(t->mout);
    free(t->in_merge);
    free(t->eog);
    free(t->special);
    for (int i = 0; i < t->n_re; i++)
        pcre2_code_free(t->re[i]);
    free(t->chat_template);
    free(t);
}

int32_t gp_tok_vocab_size(const gp_tok *t) { return t->n_vocab; }
int32_t gp_tok_bos(const gp_tok *t) { return t->bos; }
int32_t gp_tok_eos(const gp_tok *t) { return t->eos; }
const char *gp_tok_chat_template(const gp_tok *t) { return t->chat_template; }

int gp_tok_is_eog(const gp_tok *t, int32_t id)
{
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id)
            return 1;
    return 0;
}
