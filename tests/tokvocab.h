/* Small GGUF tokenizer vocabularies built in memory, for the tokenizer's tests and its fuzz target
 * (fuzz/fuzz_tokenizer.c): a byte-level BPE one (GPT-2's byte map, a few merges, a control and a
 * user token) and a SentencePiece one (scores, <0xNN> byte tokens). Header-only: both include
 * it. */
#ifndef GP_TESTS_TOKVOCAB_H
#define GP_TESTS_TOKVOCAB_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    unsigned char *p; /* [n] the file's bytes */
    size_t n, cap;
    uint64_t n_kv;
    size_t kv_count_at;
} tv_buf;

static inline void tv_put(tv_buf *b, const void *s, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n)
            cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p)
            abort();
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static inline void tv_u32(tv_buf *b, uint32_t v)
{
    unsigned char x[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    tv_put(b, x, 4);
}

static inline void tv_u64(tv_buf *b, uint64_t v)
{
    tv_u32(b, (uint32_t)v);
    tv_u32(b, (uint32_t)(v >> 32));
}

static inline void tv_str(tv_buf *b, const char *s, size_t n)
{
    tv_u64(b, n);
    tv_put(b, s, n);
}

static inline void tv_begin(tv_buf *b)
{
    memset(b, 0, sizeof *b);
    tv_put(b, "GGUF", 4);
    tv_u32(b, 3);
    tv_u64(b, 0); /* tensors */
    b->kv_count_at = b->n;
    tv_u64(b, 0); /* kvs, patched by tv_end */
}

static inline void tv_end(tv_buf *b)
{
    for (int i = 0; i < 8; i++)
        b->p[b->kv_count_at + (size_t)i] = (unsigned char)(b->n_kv >> (8 * i));
}

static inline void tv_key(tv_buf *b, const char *key, uint32_t type)
{
    tv_str(b, key, strlen(key));
    tv_u32(b, type);
    b->n_kv++;
}

static inline void tv_kv_str(tv_buf *b, const char *key, const char *v)
{
    tv_key(b, key, 8);
    tv_str(b, v, strlen(v));
}

static inline void tv_kv_u32(tv_buf *b, const char *key, uint32_t v)
{
    tv_key(b, key, 4);
    tv_u32(b, v);
}

static inline void tv_kv_bool(tv_buf *b, const char *key, int v)
{
    unsigned char c = (unsigned char)(v != 0);
    tv_key(b, key, 7);
    tv_put(b, &c, 1);
}

static inline void tv_kv_strs(tv_buf *b, const char *key, char **v, size_t n)
{
    tv_key(b, key, 9);
    tv_u32(b, 8);
    tv_u64(b, n);
    for (size_t i = 0; i < n; i++)
        tv_str(b, v[i], strlen(v[i]));
}

static inline void tv_kv_i32s(tv_buf *b, const char *key, const int32_t *v, size_t n)
{
    tv_key(b, key, 9);
    tv_u32(b, 5);
    tv_u64(b, n);
    for (size_t i = 0; i < n; i++)
        tv_u32(b, (uint32_t)v[i]);
}

static inline void tv_kv_f32s(tv_buf *b, const char *key, const float *v, size_t n)
{
    tv_key(b, key, 9);
    tv_u32(b, 6);
    tv_u64(b, n);
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        tv_u32(b, u);
    }
}

/* A list of owned strings. */
typedef struct {
    char **s;
    size_t n;
} tv_list;

static inline void tv_add(tv_list *l, const char *s)
{
    char **p = realloc(l->s, (l->n + 1) * sizeof *p);
    if (!p)
        abort();
    l->s = p;
    l->s[l->n++] = strdup(s);
}

static inline void tv_list_free(tv_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->s[i]);
    free(l->s);
}

/* GPT-2's byte -> character map, UTF-8 encoded into out (NUL-terminated). */
static inline void tv_byte_char(unsigned b, char out[3])
{
    unsigned cp = b, k = 0;
    if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)) {
        for (unsigned x = 0; x < b; x++)
            if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174))
                k++;
        cp = 256 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        out[1] = 0;
    } else {
        out[0] = (char)(0xc0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3f));
        out[2] = 0;
    }
}

/* Merges of the byte-level vocabulary, "left right" in the mapped form (\xc4\xa0 is the space). */
static const char *const tv_bpe_merges[] = {
    "\xc4\xa0 t", "h e", "\xc4\xa0t he", "i n", "in g", "e r", "o n", "\xc4\xa0 a", "a n",
    "an d", "\xc4\xa0 an", "\u0120an d", "r e", "e s", "o r", "\xc4\xa0 w", "\xc4\xa0w or",
    "l d", "\xc4\xa0wor ld", "H e", "He l", "Hel l", "Hell o", "\xc3\xa2 \xc4\xa2",
};

/* The byte-level BPE vocabulary: 256 byte characters, the merges' results, then "<|end|>"
 * (control) and "<user>" (user-defined). Mutations: bad_merge names an unknown token, bad_type
 * gives token 3 type 9, short_types gives one type fewer than tokens. */
enum { TV_OK = 0, TV_BAD_MERGE = 1, TV_BAD_TYPE = 2, TV_SHORT_TYPES = 4, TV_NO_MODEL = 8,
       TV_BAD_PRE = 16 };

static inline tv_buf tv_bpe(int flaws)
{
    tv_list tok = {0}, mer = {0};
    char c[3];
    for (unsigned b = 0; b < 256; b++) {
        tv_byte_char(b, c);
        tv_add(&tok, c);
    }
    for (size_t i = 0; i < sizeof tv_bpe_merges / sizeof *tv_bpe_merges; i++) {
        const char *m = tv_bpe_merges[i], *sp = strchr(m, ' ');
        char joined[64];
        size_t la = (size_t)(sp - m);
        memcpy(joined, m, la);
        strcpy(joined + la, sp + 1);
        tv_add(&tok, joined);
        tv_add(&mer, m);
    }
    if (flaws & TV_BAD_MERGE)
        tv_add(&mer, "zz qq");
    tv_add(&tok, "<|end|>");
    tv_add(&tok, "<user>");
    int32_t *types = malloc(tok.n * sizeof *types);
    for (size_t i = 0; i < tok.n; i++)
        types[i] = 1;
    types[tok.n - 2] = 3;
    types[tok.n - 1] = 4;
    if (flaws & TV_BAD_TYPE)
        types[3] = 9;
    tv_buf b;
    tv_begin(&b);
    if (!(flaws & TV_NO_MODEL))
        tv_kv_str(&b, "tokenizer.ggml.model", "gpt2");
    tv_kv_str(&b, "tokenizer.ggml.pre", flaws & TV_BAD_PRE ? "no-such-pre" : "gpt-2");
    tv_kv_strs(&b, "tokenizer.ggml.tokens", tok.s, tok.n);
    tv_kv_i32s(&b, "tokenizer.ggml.token_type", types, tok.n - (flaws & TV_SHORT_TYPES ? 1 : 0));
    tv_kv_strs(&b, "tokenizer.ggml.merges", mer.s, mer.n);
    tv_kv_u32(&b, "tokenizer.ggml.eos_token_id", (uint32_t)tok.n - 2);
    tv_kv_u32(&b, "tokenizer.ggml.bos_token_id", (uint32_t)tok.n - 2);
    tv_end(&b);
    free(types);
    tv_list_free(&tok);
    tv_list_free(&mer);
    return b;
}

/* The SentencePiece vocabulary: <unk>, <s>, </s>, the 256 <0xNN> byte tokens, then pieces with
 * descending scores. Mutations: TV_SHORT_TYPES drops one score instead. */
static inline tv_buf tv_spm(int flaws)
{
    static const char *const pieces[] = {
        "\xe2\x96\x81", "e", "t", "a", "o", "h", "l", "n", "s", "r", "d", "w", "H", "i", "g",
        "\xe2\x96\x81t", "he", "\xe2\x96\x81the", "in", "ing", "\u2581a", "er", "ll", "lo",
        "llo", "He", "Hello", "\xe2\x96\x81Hello", "or", "ld", "orld", "\xe2\x96\x81w",
        "\xe2\x96\x81world", "\xe2\x96\x81\xe2\x96\x81", "\xc3\xa9",
    };
    tv_list tok = {0};
    tv_add(&tok, "<unk>");
    tv_add(&tok, "<s>");
    tv_add(&tok, "</s>");
    for (unsigned v = 0; v < 256; v++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", v);
        tv_add(&tok, s);
    }
    size_t n_pieces = sizeof pieces / sizeof *pieces;
    for (size_t i = 0; i < n_pieces; i++)
        tv_add(&tok, pieces[i]);
    int32_t *types = malloc(tok.n * sizeof *types);
    float *scores = malloc(tok.n * sizeof *scores);
    for (size_t i = 0; i < tok.n; i++) {
        types[i] = i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1;
        scores[i] = i < 259 ? 0.0f : -(float)(i - 259);
    }
    if (flaws & TV_BAD_TYPE)
        types[270] = 6; /* a byte token whose text is no <0xNN> */
    tv_buf b;
    tv_begin(&b);
    tv_kv_str(&b, "tokenizer.ggml.model", "llama");
    tv_kv_strs(&b, "tokenizer.ggml.tokens", tok.s, tok.n);
    tv_kv_i32s(&b, "tokenizer.ggml.token_type", types, tok.n);
    tv_kv_f32s(&b, "tokenizer.ggml.scores", scores, tok.n - (flaws & TV_SHORT_TYPES ? 1 : 0));
    tv_kv_u32(&b, "tokenizer.ggml.unknown_token_id", 0);
    tv_kv_u32(&b, "tokenizer.ggml.bos_token_id", 1);
    tv_kv_u32(&b, "tokenizer.ggml.eos_token_id", 2);
    tv_kv_bool(&b, "tokenizer.ggml.add_bos_token", 1);
    tv_end(&b);
    free(types);
    free(scores);
    tv_list_free(&tok);
    return b;
}

#endif
