/* Fuzz target: text through gp_tok_encode/decode/stream with two small built-in vocabularies
 * (tests/tokvocab.h: byte-level BPE and SentencePiece, made once at start). The first byte picks
 * the vocabulary and the flags, the rest is the text. Invalid UTF-8 must be refused with its byte
 * offset; valid text must round-trip where that is defined, and the stream must give the same bytes
 * as decode. An input starting with "GGUF" is instead a vocabulary: loaded, and if it loads,
 * used. */
#define _GNU_SOURCE /* memmem */
#include <string.h>

#include "fuzz/fuzz.h"
#include "tests/tokvocab.h"
#include "tokenizer/tokenizer.h"

static gp_tok *vocab[2]; /* byte-level, SentencePiece */

static void free_vocab(void)
{
    gp_tok_free(vocab[0]);
    gp_tok_free(vocab[1]);
}

static gp_tok *load_mem(const void *p, size_t n, char *err, size_t errlen)
{
    gp_gguf *g = gp_gguf_open_mem(p, n, "fuzz.gguf", err, errlen);
    gp_tok *t = g ? gp_tok_from_gguf(g, err, errlen) : NULL;
    gp_gguf_close(g);
    return t;
}

static void init(void)
{
    char err[512];
    for (int k = 0; k < 2; k++) {
        tv_buf b = k ? tv_spm(0) : tv_bpe(0);
        vocab[k] = load_mem(b.p, b.n, err, sizeof err);
        free(b.p);
        GP_FUZZ_CHECK(vocab[k] != NULL);
    }
    atexit(free_vocab);
}

/* Encodes, decodes and streams text; checks what must hold (strict: for the built-in vocabularies,
 * whose pieces cover every byte; a vocabulary from the input need not). */
static void exercise(const gp_tok *t, const char *text, size_t len, int add, int parse, int spm,
                     int strict)
{
    char err[512];
    int64_t n = gp_tok_encode(t, text, len, add, parse, NULL, 0, err, sizeof err);
    int valid = gp_tok_utf8_valid(text, len);
    if (!valid) {
        GP_FUZZ_CHECK(n == -1 && strncmp(err, "invalid UTF-8 at byte ", 22) == 0);
        return;
    }
    if (n < 0)
        return; /* a vocabulary from the input may fail (out of memory is the only other error) */
    int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
    GP_FUZZ_CHECK(ids != NULL);
    GP_FUZZ_CHECK(gp_tok_encode(t, text, len, add, parse, ids, n, err, sizeof err) == n);
    for (int64_t i = 0; i < n; i++)
        GP_FUZZ_CHECK(ids[i] >= 0 && ids[i] < gp_tok_vocab_size(t));
    int64_t need = gp_tok_decode(t, ids, n, parse, NULL, 0);
    GP_FUZZ_CHECK(need >= 0);
    char *out = malloc((size_t)need + 1);
    GP_FUZZ_CHECK(out != NULL);
    GP_FUZZ_CHECK(gp_tok_decode(t, ids, n, parse, out, (size_t)need + 1) == need);
    /* the round trip: no BOS/EOS added; SentencePiece turns a literal U+2581 into a space and puts
     * a space after each special token, so there only plain text without U+2581 comes back */
    int defined = strict && !add && (!spm || (!parse && !memmem(text, len, "\xe2\x96\x81", 3)));
    if (defined)
        GP_FUZZ_CHECK((size_t)need == len && memcmp(out, text, len) == 0);
    if (!parse && strict) {
        /* streaming gives decode's bytes, whole characters at a time */
        char *acc = malloc((size_t)need + 4), chunk[256];
        GP_FUZZ_CHECK(acc != NULL);
        size_t pos = 0;
        gp_tok_stream st;
        gp_tok_stream_init(&st);
        for (int64_t i = 0; i < n; i++) {
            int w = gp_tok_stream_push(t, &st, ids[i], chunk, sizeof chunk);
            GP_FUZZ_CHECK(w >= 0 && gp_tok_utf8_valid(chunk, (size_t)w));
            GP_FUZZ_CHECK(pos + (size_t)w <= (size_t)need);
            memcpy(acc + pos, chunk, (size_t)w);
            pos += (size_t)w;
        }
        GP_FUZZ_CHECK(gp_tok_stream_flush(&st, chunk, sizeof chunk) == 0);
        GP_FUZZ_CHECK(pos == (size_t)need && memcmp(acc, out, pos) == 0);
        free(acc);
    }
    free(out);
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!vocab[0])
        init();
    if (size >= 4 && memcmp(data, "GGUF", 4) == 0) {
        char err[512];
        gp_tok *t = load_mem(data, size, err, sizeof err);
        if (t) {
            static const char probe[] =
                "Hello world, it's 2024! \xe4\xb8\x80 <|end|> \xf0\x9f\xa6\x99";
            exercise(t, probe, sizeof probe - 1, 1, 1, 1, 0);
            exercise(t, probe, sizeof probe - 1, 0, 0, 1, 0);
            gp_tok_free(t);
        }
        return 0;
    }
    if (size == 0)
        return 0;
    int k = data[0] & 1, add = (data[0] >> 1) & 1, parse = (data[0] >> 2) & 1;
    exercise(vocab[k], (const char *)data + 1, size - 1, add, parse, k, 1);
    return 0;
}
