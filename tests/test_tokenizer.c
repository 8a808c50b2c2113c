/* Tests of tokenizer/: llama.cpp's vocabulary test files (exact ids through the GGUF and the
 * tokenizer.json loaders), round trips, streaming decode, special tokens, bad vocabularies and
 * bad input. The vocabularies come from $GPLAN_VOCAB_DIR (scripts/fetch_vocab.sh) and
 * ../shared/data/vocab; one found in neither is reported skipped by name. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "weights/gguf.h"
#include "tests/testutil.h"
#include "tests/tokvocab.h"
#include "tokenizer/tokenizer.h"

static char err[2048];

/* Under valgrind every vocabulary takes minutes: there the exact-id checks run for the four of
 * ../shared/data/vocab only (the plain and sanitizer builds check them all). */
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define UNDER_VALGRIND() RUNNING_ON_VALGRIND
#endif
#endif
#ifndef UNDER_VALGRIND
#define UNDER_VALGRIND() 0
#endif

static int light(const char *name)
{
    static const char *const shared[] = {"gpt-2", "llama-spm", "llama-bpe", "phi-3"};
    if (!UNDER_VALGRIND())
        return 1;
    for (size_t i = 0; i < sizeof shared / sizeof *shared; i++)
        if (!strcmp(name, shared[i]))
            return 1;
    return 0;
}

/* ---- finding the vocabularies ---- */

static int exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0;
}

/* dir/ggml-vocab-NAME.gguf in the first folder that has it (and its .inp/.out), or NULL. */
static const char *vocab_file(const char *name, const char *suffix)
{
    static char buf[4096];
    const char *env = getenv("GPLAN_VOCAB_DIR");
    const char *dirs[3] = {env, gp_test_path("../shared/data/vocab"), NULL};
    char shared[4096];
    snprintf(shared, sizeof shared, "%s", dirs[1]);
    dirs[1] = shared;
    for (int i = 0; i < 2; i++) {
        if (!dirs[i] || !*dirs[i])
            continue;
        int n = snprintf(buf, sizeof buf, "%s/ggml-vocab-%s.gguf.out", dirs[i], name);
        if (n < 0 || (size_t)n >= sizeof buf || !exists(buf))
            continue;
        n = snprintf(buf, sizeof buf, "%s/ggml-vocab-%s.gguf%s", dirs[i], name, suffix);
        if (n < 0 || (size_t)n >= sizeof buf)
            continue;
        return buf;
    }
    return NULL;
}

/* The tokenizer.json folder made by scripts/tokenizer/make_json.py: committed under
 * tests/tokenizer/json/NAME, or made into $GPLAN_VOCAB_DIR/json/NAME. */
static const char *json_dir(const char *name)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/tokenizer.json", gp_test_path("tests/tokenizer/json"));
    snprintf(buf, sizeof buf, "%s/%s/tokenizer.json", gp_test_path("tests/tokenizer/json"), name);
    if (exists(buf)) {
        buf[strlen(buf) - strlen("/tokenizer.json")] = '\0';
        return buf;
    }
    const char *env = getenv("GPLAN_VOCAB_DIR");
    if (env && *env) {
        snprintf(buf, sizeof buf, "%s/json/%s/tokenizer.json", env, name);
        if (exists(buf)) {
            buf[strlen(buf) - strlen("/tokenizer.json")] = '\0';
            return buf;
        }
    }
    return NULL;
}

/* ---- the .inp/.out pairs ---- */

typedef struct {
    char **text; /* [n] the test strings */
    size_t *len;
    char **ids;  /* [n] the expected lines */
    int n;
} cases;

static void cases_free(cases *c)
{
    for (int i = 0; i < c->n; i++) {
        free(c->text[i]);
        free(c->ids[i]);
    }
    free(c->text);
    free(c->len);
    free(c->ids);
    memset(c, 0, sizeof *c);
}

static int cases_read(const char *name, cases *c)
{
    memset(c, 0, sizeof *c);
    char inp_path[4096], out_path[4096];
    snprintf(inp_path, sizeof inp_path, "%s", vocab_file(name, ".inp"));
    snprintf(out_path, sizeof out_path, "%s", vocab_file(name, ".out"));
    size_t ni, no;
    char *inp = gp_test_read_file(inp_path, &ni), *out = gp_test_read_file(out_path, &no);
    if (!inp || !out) {
        free(inp);
        free(out);
        return -1;
    }
    static const char sep[] = "\n__ggml_vocab_test__\n";
    int cap = 0;
    char *p = inp, *q = out;
    for (;;) {
        char *e = strstr(p, sep);
        char *nl = strchr(q, '\n');
        if (!e || !nl)
            break;
        if (c->n == cap) {
            cap = cap ? 2 * cap : 64;
            c->text = realloc(c->text, (size_t)cap * sizeof *c->text);
            c->len = realloc(c->len, (size_t)cap * sizeof *c->len);
            c->ids = realloc(c->ids, (size_t)cap * sizeof *c->ids);
        }
        c->len[c->n] = (size_t)(e - p);
        c->text[c->n] = malloc(c->len[c->n] + 1);
        memcpy(c->text[c->n], p, c->len[c->n]);
        c->text[c->n][c->len[c->n]] = '\0';
        c->ids[c->n] = malloc((size_t)(nl - q) + 1);
        memcpy(c->ids[c->n], q, (size_t)(nl - q));
        c->ids[c->n][nl - q] = '\0';
        c->n++;
        p = e + strlen(sep);
        q = nl + 1;
    }
    free(inp);
    free(out);
    return c->n > 0 ? 0 : -1;
}

/* Encodes every case; counts those whose ids differ from the .out line, printing the first few. */
static int check_cases(const gp_tok *t, const cases *c, const char *what)
{
    int bad = 0;
    for (int i = 0; i < c->n; i++) {
        int32_t ids[4096];
        int64_t n = gp_tok_encode(t, c->text[i], c->len[i], 0, 0, ids, 4096, err, sizeof err);
        char got[65536];
        size_t pos = 0;
        got[0] = '\0';
        for (int64_t k = 0; k < n && k < 4096 && pos + 16 < sizeof got; k++)
            pos += (size_t)snprintf(got + pos, sizeof got - pos, " %d", ids[k]);
        /* the .out files differ in leading spaces: compare the numbers */
        int same = n >= 0;
        const char *w = c->ids[i];
        for (int64_t k = 0; same && k < n; k++) {
            char *end;
            long v = strtol(w, &end, 10);
            same = end != w && v == ids[k];
            w = end;
        }
        while (same && *w == ' ')
            w++;
        if (!same || *w) {
            if (bad < 3)
                printf("\n  %s case %d %.40s%s\n    want%s\n    got %s%s\n", what, i, c->text[i],
                       c->len[i] > 40 ? "..." : "", c->ids[i], got, n < 0 ? err : "");
            bad++;
        }
    }
    if (bad)
        printf("  %s: %d of %d cases differ\n", what, bad, c->n);
    return bad;
}

static void run_vocab(const char *name, int json)
{
    cases c;
    CU_ASSERT_FATAL(cases_read(name, &c) == 0);
    char what[256];
    snprintf(what, sizeof what, "%s (%s)", name, json ? "tokenizer.json" : "GGUF");
    gp_tok *t = gp_tok_load(json ? json_dir(name) : vocab_file(name, ""), err, sizeof err);
    if (!t)
        printf("\n  %s: %s\n", what, err);
    CU_ASSERT_FATAL(t != NULL);
    CU_ASSERT_EQUAL(check_cases(t, &c, what), 0);
    gp_tok_free(t);
    cases_free(&c);
}

/* ---- the built-in vocabularies (tests/tokvocab.h) ---- */

static gp_tok *from_mem(tv_buf *b, const char *name)
{
    gp_gguf *g = gp_gguf_open_mem(b->p, b->n, name, err, sizeof err);
    gp_tok *t = g ? gp_tok_from_gguf(g, err, sizeof err) : NULL;
    gp_gguf_close(g);
    return t;
}

static gp_tok *tiny(int spm)
{
    tv_buf b = spm ? tv_spm(0) : tv_bpe(0);
    gp_tok *t = from_mem(&b, spm ? "tiny-spm" : "tiny-bpe");
    free(b.p);
    if (!t)
        printf("\n  %s\n", err);
    return t;
}

static int64_t enc(const gp_tok *t, const char *s, int add, int parse, int32_t *ids, int64_t cap)
{
    return gp_tok_encode(t, s, strlen(s), add, parse, ids, cap, err, sizeof err);
}

/* Ids of text through the tiny byte-level vocabulary, by their texts. */
static void test_tiny_bpe(void)
{
    gp_tok *t = tiny(0);
    CU_ASSERT_FATAL(t != NULL);
    int32_t ids[64];
    int64_t n = enc(t, "Hello the world", 0, 0, ids, 64);
    /* "Hello", " the", " world": the merges' results are ids 256.. in merge order */
    CU_ASSERT_EQUAL(n, 3);
    CU_ASSERT_EQUAL(ids[0], 256 + 22);
    CU_ASSERT_EQUAL(ids[1], 256 + 2);
    CU_ASSERT_EQUAL(ids[2], 256 + 18);
    /* an unmerged byte is its byte's token; a two-byte character with no merge is two tokens */
    n = enc(t, "\xc3\xa9", 0, 0, ids, 64);
    CU_ASSERT_EQUAL(n, 2);
    CU_ASSERT_EQUAL(ids[0], 0xc3);
    CU_ASSERT_EQUAL(ids[1], 0xa9);
    /* cap smaller than the need: the count still comes back, only cap ids are written */
    ids[1] = -7;
    CU_ASSERT_EQUAL(enc(t, "Hello the world", 0, 0, ids, 1), 3);
    CU_ASSERT_EQUAL(ids[0], 256 + 22);
    CU_ASSERT_EQUAL(ids[1], -7);
    gp_tok_free(t);
}

/* Control tokens become their ids only with parse_special; user tokens always; BOS by the rules. */
static void test_specials(void)
{
    gp_tok *t = tiny(0);
    CU_ASSERT_FATAL(t != NULL);
    int32_t end = gp_tok_vocab_size(t) - 2, user = gp_tok_vocab_size(t) - 1;
    int32_t ids[64];
    int64_t n = enc(t, "a<|end|>b", 0, 1, ids, 64);
    CU_ASSERT_EQUAL(n, 3);
    CU_ASSERT_EQUAL(ids[1], end);
    n = enc(t, "a<|end|>b", 0, 0, ids, 64);
    CU_ASSERT(n > 3);
    for (int64_t i = 0; i < n; i++)
        CU_ASSERT_NOT_EQUAL(ids[i], end);
    n = enc(t, "x<user>y", 0, 0, ids, 64);
    CU_ASSERT_EQUAL(n, 3);
    CU_ASSERT_EQUAL(ids[1], user);
    CU_ASSERT(gp_tok_is_eog(t, end));
    CU_ASSERT(!gp_tok_is_eog(t, user));
    /* the piece of a control token shows only when asked */
    char buf[64];
    CU_ASSERT_EQUAL(gp_tok_piece(t, end, 0, buf, sizeof buf), 0);
    CU_ASSERT_EQUAL(gp_tok_piece(t, end, 1, buf, sizeof buf), 7);
    CU_ASSERT(memcmp(buf, "<|end|>", 7) == 0);
    CU_ASSERT_EQUAL(gp_tok_piece(t, -1, 1, buf, sizeof buf), -1);
    CU_ASSERT_EQUAL(gp_tok_piece(t, gp_tok_vocab_size(t), 1, buf, sizeof buf), -1);
    gp_tok_free(t);

    t = tiny(1);
    CU_ASSERT_FATAL(t != NULL);
    n = enc(t, "Hello world", 1, 0, ids, 64);
    CU_ASSERT_EQUAL(n, 3);
    CU_ASSERT_EQUAL(ids[0], 1); /* add_bos_token */
    CU_ASSERT_EQUAL(gp_tok_bos(t), 1);
    CU_ASSERT_EQUAL(gp_tok_eos(t), 2);
    /* after a special token the next text gets SentencePiece's space prefix again */
    n = enc(t, "Hello</s>Hello", 0, 1, ids, 64);
    CU_ASSERT_EQUAL(n, 3);
    CU_ASSERT_EQUAL(ids[1], 2);
    CU_ASSERT_EQUAL(ids[0], ids[2]);
    gp_tok_free(t);
}

/* SentencePiece: scores pick the merges, unknown characters fall back to <0xNN> bytes. */
static void test_tiny_spm(void)
{
    gp_tok *t = tiny(1);
    CU_ASSERT_FATAL(t != NULL);
    int32_t ids[64];
    int64_t n = enc(t, "Hello world", 0, 0, ids, 64);
    CU_ASSERT_EQUAL(n, 2);
    char out[256];
    CU_ASSERT_EQUAL(gp_tok_piece(t, ids[0], 0, out, sizeof out), 6);
    CU_ASSERT(memcmp(out, " Hello", 6) == 0);
    n = enc(t, "\xe4\xb8\x80", 0, 0, ids, 64); /* U+4E00: not a piece */
    CU_ASSERT_EQUAL(n, 4);                     /* the space, then three byte tokens */
    CU_ASSERT_EQUAL(ids[1], 3 + 0xe4);
    CU_ASSERT_EQUAL(ids[2], 3 + 0xb8);
    CU_ASSERT_EQUAL(ids[3], 3 + 0x80);
    CU_ASSERT_EQUAL(gp_tok_decode(t, ids, n, 0, out, sizeof out), 3);
    CU_ASSERT_STRING_EQUAL(out, "\xe4\xb8\x80");
    gp_tok_free(t);
}

/* A random string of characters from ASCII, Latin, Cyrillic, CJK, emoji, combining marks and
 * whitespace (tabs, newlines, runs of spaces). */
static size_t random_text(uint64_t *rng, char *out, size_t cap)
{
    static const uint32_t ranges[][2] = {{0x20, 0x7e}, {0x20, 0x20}, {0x0a, 0x0a}, {0x09, 0x0d},
                                         {0xa0, 0x17f}, {0x400, 0x45f}, {0x300, 0x36f},
                                         {0x4e00, 0x4fff}, {0x1f600, 0x1f64f}, {0x30, 0x39},
                                         {0x2000, 0x206f}, {0xac00, 0xac50}, {0x10000, 0x10100}};
    size_t n = 0, chars = gp_test_rand(rng) % 60;
    for (size_t i = 0; i < chars && n + 4 < cap; i++) {
        const uint32_t *r = ranges[gp_test_rand(rng) % (sizeof ranges / sizeof *ranges)];
        uint32_t cp = r[0] + (uint32_t)(gp_test_rand(rng) % (r[1] - r[0] + 1));
        if (cp >= 0xd800 && cp < 0xe000)
            cp = 'x';
        if (cp < 0x80)
            out[n++] = (char)cp;
        else if (cp < 0x800) {
            out[n++] = (char)(0xc0 | cp >> 6);
            out[n++] = (char)(0x80 | (cp & 0x3f));
        } else if (cp < 0x10000) {
            out[n++] = (char)(0xe0 | cp >> 12);
            out[n++] = (char)(0x80 | ((cp >> 6) & 0x3f));
            out[n++] = (char)(0x80 | (cp & 0x3f));
        } else {
            out[n++] = (char)(0xf0 | cp >> 18);
            out[n++] = (char)(0x80 | ((cp >> 12) & 0x3f));
            out[n++] = (char)(0x80 | ((cp >> 6) & 0x3f));
            out[n++] = (char)(0x80 | (cp & 0x3f));
        }
    }
    out[n] = '\0';
    return n;
}

/* decode(encode(s)) == s, and the stream decoder gives the same bytes in whole characters. */
static int round_trips(const gp_tok *t, int n_strings, int *held)
{
    uint64_t rng = 0x5eed;
    int bad = 0;
    for (int k = 0; k < n_strings; k++) {
        char s[512], back[4096];
        size_t len = random_text(&rng, s, sizeof s);
        int32_t ids[512];
        int64_t n = gp_tok_encode(t, s, len, 0, 0, ids, 512, err, sizeof err);
        if (n < 0 || n > 512) {
            bad++;
            continue;
        }
        int64_t m = gp_tok_decode(t, ids, n, 0, back, sizeof back);
        if (m != (int64_t)len || memcmp(back, s, len) != 0) {
            if (bad < 3) {
                size_t d = 0;
                while (d < len && (int64_t)d < m && back[d] == s[d])
                    d++;
                printf("\n  round trip %d: %zu bytes -> %lld, first difference at byte %zu: "
                       "'%.12s' -> '%.12s'\n", k, len, (long long)m, d, s + d, back + d);
                if (getenv("GP_TOK_DUMP"))
                    gp_test_write_file(getenv("GP_TOK_DUMP"), s, len);
            }
            bad++;
        }
        gp_tok_stream st;
        gp_tok_stream_init(&st);
        size_t pos = 0;
        for (int64_t i = 0; i < n; i++) {
            char chunk[256];
            int w = gp_tok_stream_push(t, &st, ids[i], chunk, sizeof chunk);
            if (w < 0 || gp_tok_utf8_valid(chunk, (size_t)w) != 1) {
                bad++;
                break;
            }
            if (w == 0 && st.n_pending)
                (*held)++;
            memcpy(back + pos, chunk, (size_t)w);
            pos += (size_t)w;
        }
        char tail[8];
        int w = gp_tok_stream_flush(&st, tail, sizeof tail);
        if (w != 0 || pos != len || memcmp(back, s, len) != 0) {
            if (bad < 3)
                printf("\n  stream %d: '%s' -> '%.*s'\n", k, s, (int)pos, back);
            bad++;
        }
    }
    return bad;
}

static void test_round_trip_tiny(void)
{
    for (int spm = 0; spm < 2; spm++) {
        gp_tok *t = tiny(spm);
        CU_ASSERT_FATAL(t != NULL);
        int held = 0;
        CU_ASSERT_EQUAL(round_trips(t, 300, &held), 0);
        CU_ASSERT(held > 0); /* characters were split across tokens and held */
        gp_tok_free(t);
    }
}

static void test_round_trip_real(void)
{
    /* vocabularies with a token for every byte (falcon's lacks some control bytes: those are
     * dropped, as Hugging Face drops them) */
    static const char *const names[] = {"gpt-2", "llama-bpe", "llama-spm", "phi-3", "qwen2"};
    int tested = 0;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        const char *path = vocab_file(names[i], "");
        if (!path || !light(names[i]) || (UNDER_VALGRIND() && i > 0))
            continue;
        gp_tok *t = gp_tok_load(path, err, sizeof err);
        CU_ASSERT_FATAL(t != NULL);
        int held = 0;
        int bad = round_trips(t, 300, &held);
        if (bad)
            printf("  %s: %d round trips failed\n", names[i], bad);
        CU_ASSERT_EQUAL(bad, 0);
        CU_ASSERT(held > 0);
        gp_tok_free(t);
        tested++;
    }
    CU_ASSERT(tested > 0);
}

/* A character split across tokens comes out of the stream only when whole: U+1F999 in GPT-2 is
 * several byte tokens. */
static void test_stream_split(void)
{
    gp_tok *t = tiny(0);
    CU_ASSERT_FATAL(t != NULL);
    const char *s = "a\xf0\x9f\xa6\x99" "b";
    int32_t ids[16];
    int64_t n = enc(t, s, 0, 0, ids, 16);
    CU_ASSERT_EQUAL_FATAL(n, 6); /* no merges for these bytes: one token a byte */
    gp_tok_stream st;
    gp_tok_stream_init(&st);
    char out[256];
    int want[6] = {1, 0, 0, 0, 4, 1};
    for (int i = 0; i < 6; i++)
        CU_ASSERT_EQUAL(gp_tok_stream_push(t, &st, ids[i], out, sizeof out), want[i]);
    /* an incomplete character at the end becomes U+FFFD; a byte that cannot continue it too */
    gp_tok_stream_init(&st);
    CU_ASSERT_EQUAL(gp_tok_stream_push(t, &st, ids[1], out, sizeof out), 0);
    CU_ASSERT_EQUAL(gp_tok_stream_flush(&st, out, sizeof out), 3);
    CU_ASSERT_STRING_EQUAL(out, "\xef\xbf\xbd");
    CU_ASSERT_EQUAL(gp_tok_stream_push(t, &st, ids[1], out, sizeof out), 0);
    CU_ASSERT_EQUAL(gp_tok_stream_push(t, &st, ids[0], out, sizeof out), 4);
    CU_ASSERT_STRING_EQUAL(out, "\xef\xbf\xbd" "a");
    CU_ASSERT_EQUAL(gp_tok_stream_push(t, &st, -1, out, sizeof out), -1);
    CU_ASSERT_EQUAL(gp_tok_stream_cap(t), 3 * (7 + 4) + 1); /* "<|end|>" is the longest piece */
    CU_ASSERT_EQUAL(gp_tok_stream_push(t, &st, ids[0], out, 1), -1); /* no room for a byte */
    gp_tok_free(t);
}

static void test_invalid_utf8(void)
{
    gp_tok *t = tiny(0);
    CU_ASSERT_FATAL(t != NULL);
    static const struct {
        const char *s;
        int at;
    } bad[] = {{"ab\xff" "cd", 2}, {"abc\xe2\x82", 3}, {"\xc0\xaf", 0}, {"ok \xed\xa0\x80", 3},
               {"x\xf4\x90\x80\x80", 1}, {"\x80", 0}, {"a\xe2(b", 1}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int32_t ids[16];
        CU_ASSERT_EQUAL(enc(t, bad[i].s, 0, 0, ids, 16), -1);
        char want[64];
        snprintf(want, sizeof want, "invalid UTF-8 at byte %d", bad[i].at);
        CU_ASSERT_STRING_EQUAL(err, want);
    }
    int32_t ids[4] = {0, 5, (int32_t)gp_tok_vocab_size(t), 1};
    char out[16];
    CU_ASSERT_EQUAL(gp_tok_decode(t, ids, 4, 0, out, sizeof out), -1);
    CU_ASSERT_EQUAL(gp_tok_decode(t, ids, 2, 0, out, 1), 2); /* the need, with truncation */
    CU_ASSERT_EQUAL(out[0], '\0');
    gp_tok_free(t);
}

/* Every loader check: a clear message, no crash, no leak. */
static void test_bad_vocab(void)
{
    static const struct {
        int spm, flaws;
        const char *msg;
    } cases[] = {
        {0, TV_BAD_MERGE, "bad tokenizer (merge 24 'zz qq' names an unknown token)"},
        {0, TV_BAD_TYPE, "bad tokenizer (token 3 has a bad token_type)"},
        {0, TV_SHORT_TYPES, "bad tokenizer (282 tokens but 281 token types)"},
        {0, TV_NO_MODEL, "bad tokenizer (no tokenizer.ggml.model string)"},
        {0, TV_BAD_PRE, "bad tokenizer (unknown pre-tokenizer tokenizer.ggml.pre = 'no-such-pre')"},
        {1, TV_SHORT_TYPES, "bad tokenizer (294 tokens but 293 scores)"},
        {1, TV_BAD_TYPE, "bad tokenizer (token 270 is a byte token but its text is not <0xNN>)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tv_buf b = cases[i].spm ? tv_spm(cases[i].flaws) : tv_bpe(cases[i].flaws);
        err[0] = '\0';
        gp_tok *t = from_mem(&b, "v.gguf");
        CU_ASSERT_PTR_NULL(t);
        gp_tok_free(t);
        char want[512];
        snprintf(want, sizeof want, "v.gguf: %s", cases[i].msg);
        if (strcmp(err, want) != 0)
            printf("\n  case %zu: got '%s'\n        want '%s'\n", i, err, want);
        CU_ASSERT_STRING_EQUAL(err, want);
        free(b.p);
    }
    /* truncated anywhere: the GGUF reader or the tokenizer says why, never crashes */
    tv_buf b = tv_bpe(0);
    for (size_t cut = 0; cut < b.n; cut += 1 + cut / 8) {
        gp_tok *t = from_mem(&(tv_buf){b.p, cut, cut, 0, 0}, "cut.gguf");
        CU_ASSERT_PTR_NULL(t);
        CU_ASSERT(strstr(err, "cut.gguf: bad ") == err);
        gp_tok_free(t);
    }
    free(b.p);
    /* files */
    CU_ASSERT_PTR_NULL(gp_tok_load("/nonexistent/tokenizer.json", err, sizeof err));
    CU_ASSERT(strstr(err, "cannot open") != NULL);
    const char *p = gp_test_tmpfile(".json");
    static const char *const bad_json[][2] = {
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}, "
         "\"decoder\": {\"type\": \"ByteLevel\"}}",
         "bad tokenizer (merge 0 names an unknown token)"},
        {"{\"model\": {\"type\": \"Unigram\"}}", "bad tokenizer (model type 'Unigram' is not "
         "supported (BPE is))"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"decoder\": "
         "{\"type\": \"ByteLevel\"}, \"pre_tokenizer\": {\"type\": \"Whitespace\"}}",
         "bad tokenizer (pre-tokenizer 'Whitespace' is not supported)"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -4}, \"merges\": []}, "
         "\"decoder\": {\"type\": \"ByteLevel\"}}",
         "bad tokenizer (vocab entry 'a' has a bad id)"},
        {"{\"model\": ", "1:10: error: "},
    };
    for (size_t i = 0; i < sizeof bad_json / sizeof *bad_json; i++) {
        gp_test_write_file(p, bad_json[i][0], strlen(bad_json[i][0]));
        gp_tok *t = gp_tok_load(p, err, sizeof err);
        CU_ASSERT_PTR_NULL(t);
        gp_tok_free(t);
        if (!strstr(err, bad_json[i][1]))
            printf("\n  json %zu: got '%s'\n", i, err);
        CU_ASSERT(strstr(err, bad_json[i][1]) != NULL);
        CU_ASSERT(strncmp(err, p, strlen(p)) == 0);
    }
    remove(p);
}

/* A Hugging Face folder: BOS from tokenizer_config.json, EOG ids from generation_config.json, the
 * "default" one of named chat templates. */
static void test_json_folder(void)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", gp_test_tmpfile("-hf"));
    CU_ASSERT_FATAL(mkdir(dir, 0700) == 0);
    char p[3][4200];
    snprintf(p[0], sizeof p[0], "%s/tokenizer.json", dir);
    snprintf(p[1], sizeof p[1], "%s/tokenizer_config.json", dir);
    snprintf(p[2], sizeof p[2], "%s/generation_config.json", dir);
    static const char tj[] =
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"H\": 0, \"i\": 1, \"Hi\": 5}, \"merges\": "
        "[\"H i\"]}, \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false}, "
        "\"decoder\": {\"type\": \"ByteLevel\"}, \"added_tokens\": [{\"id\": 2, \"content\": "
        "\"<s>\", \"special\": true}, {\"id\": 3, \"content\": \"</s>\", \"special\": true}, "
        "{\"id\": 4, \"content\": \"<eot>\", \"special\": true}]}";
    static const char cfg[] =
        "{\"bos_token\": \"<s>\", \"eos_token\": {\"content\": \"</s>\"}, \"add_bos_token\": true, "
        "\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}, {\"name\": "
        "\"default\", \"template\": \"D\"}]}";
    static const char gen[] = "{\"eos_token_id\": [3, 4]}";
    gp_test_write_file(p[0], tj, strlen(tj));
    gp_test_write_file(p[1], cfg, strlen(cfg));
    gp_test_write_file(p[2], gen, strlen(gen));
    gp_tok *t = gp_tok_load(dir, err, sizeof err);
    if (!t)
        printf("\n  %s\n", err);
    CU_ASSERT_FATAL(t != NULL);
    int32_t ids[8];
    CU_ASSERT_EQUAL(enc(t, "HiH<eot>", 1, 1, ids, 8), 4);
    CU_ASSERT_EQUAL(ids[0], 2);
    CU_ASSERT_EQUAL(ids[1], 5);
    CU_ASSERT_EQUAL(ids[2], 0);
    CU_ASSERT_EQUAL(ids[3], 4);
    CU_ASSERT_EQUAL(gp_tok_bos(t), 2);
    CU_ASSERT_EQUAL(gp_tok_eos(t), 3);
    CU_ASSERT(gp_tok_is_eog(t, 3) && gp_tok_is_eog(t, 4) && !gp_tok_is_eog(t, 2));
    CU_ASSERT_PTR_NOT_NULL_FATAL(gp_tok_chat_template(t));
    CU_ASSERT_STRING_EQUAL(gp_tok_chat_template(t), "D");
    gp_tok_free(t);
    /* an NFKC normalizer: U+FB01 (the fi ligature) is "fi"; "H" + U+0301 composes under NFC */
    static const char tn[] =
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"f\": 0, \"i\": 1, \"fi\": 2}, "
        "\"merges\": [\"f i\"]}, \"normalizer\": {\"type\": \"NFKC\"}, \"decoder\": "
        "{\"type\": \"ByteLevel\"}, \"pre_tokenizer\": null}";
    gp_test_write_file(p[0], tn, strlen(tn));
    t = gp_tok_load(dir, err, sizeof err);
    CU_ASSERT_FATAL(t != NULL);
    CU_ASSERT_EQUAL(enc(t, "\xef\xac\x81", 0, 0, ids, 8), 1);
    CU_ASSERT_EQUAL(ids[0], 2);
    gp_tok_free(t);
    for (int i = 0; i < 3; i++)
        remove(p[i]);
    rmdir(dir);
}

/* Every vocabulary with llama.cpp test files whose type the tokenizer implements. */
#define VOCABS(X)                                                                                \
    X(gpt_2, "gpt-2") X(llama_bpe, "llama-bpe") X(llama_spm, "llama-spm") X(phi_3, "phi-3")      \
    X(qwen2, "qwen2") X(qwen35, "qwen35") X(deepseek_llm, "deepseek-llm")                        \
    X(deepseek_coder, "deepseek-coder") X(falcon, "falcon") X(starcoder, "starcoder")            \
    X(refact, "refact") X(mpt, "mpt") X(command_r, "command-r") X(gemma_4, "gemma-4")

#define DEF(id, name)                                                                            \
    static void test_gguf_##id(void) { run_vocab(name, 0); }                                     \
    static void test_json_##id(void) { run_vocab(name, 1); }
VOCABS(DEF)

void gp_suite_tokenizer(void)
{
    static const gp_test_case tests[] = {
        {"byte-level BPE ids (built-in vocabulary)", test_tiny_bpe},
        {"SentencePiece ids and byte fallback (built-in vocabulary)", test_tiny_spm},
        {"special and user tokens, BOS, space prefix after specials", test_specials},
        {"round trip and stream on random UTF-8 (built-in)", test_round_trip_tiny},
        {"stream holds split characters", test_stream_split},
        {"invalid UTF-8 named by byte offset; bad ids", test_invalid_utf8},
        {"bad vocabularies: clear errors", test_bad_vocab},
        {"Hugging Face folder: BOS, EOG ids, chat template", test_json_folder},
    };
    CU_pSuite s = gp_test_add_suite("tokenizer", NULL, NULL, tests, GP_TEST_COUNT(tests));
    if (vocab_file("gpt-2", ""))
        CU_add_test(s, "round trip and stream on random UTF-8 (real vocabularies)",
                    test_round_trip_real);
    char title[256];
#define REG(id, name)                                                                            \
    if (!light(name)) {                                                                          \
        printf("tokenizer: vocabulary %s skipped under valgrind (checked in the other "         \
               "builds)\n", name);                                                               \
    } else if (vocab_file(name, "")) {                                                           \
        snprintf(title, sizeof title, "llama.cpp's %s ids (GGUF)", name);                        \
        CU_add_test(s, title, test_gguf_##id);                                           \
        if (json_dir(name)) {                                                                    \
            snprintf(title, sizeof title, "llama.cpp's %s ids (tokenizer.json)", name);          \
            CU_add_test(s, title, test_json_##id);                                       \
        } else                                                                                   \
            printf("tokenizer: %s tokenizer.json skipped (not in tests/tokenizer/json or "       \
                   "$GPLAN_VOCAB_DIR/json)\n", name);                                            \
    } else                                                                                       \
        printf("tokenizer: vocabulary %s skipped (ggml-vocab-%s.gguf.out in neither "            \
               "$GPLAN_VOCAB_DIR nor ../shared/data/vocab)\n", name, name);
    VOCABS(REG)
}
