/* Tokenizers: text to token ids and back. Byte-level BPE (GPT-2 and the pre-tokenizers derived from
 * it) and SentencePiece-style BPE with scores and byte fallback, loaded from GGUF metadata
 * (tokenizer.ggml.*) or a Hugging Face folder (tokenizer.json + tokenizer_config.json).
 * Library gp_tokenizer: links the runtime's GGUF reader, never the compiler. The public part
 * (gp_tok, load, encode, decode, pieces) is <gplan/tokenizer.h>; here what the text API, the
 * fuzz target and the tests use besides. */
#ifndef GP_TOKENIZER_TOKENIZER_H
#define GP_TOKENIZER_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "gplan/tokenizer.h"
#include "weights/gguf.h"

/* From an open GGUF file's tokenizer.ggml.* metadata; the tokenizer copies what it keeps. */
gp_tok *gp_tok_from_gguf(const gp_gguf *g, char *err, size_t errlen);

/* 1 when len bytes are valid UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
int gp_tok_utf8_valid(const char *s, size_t len);

/* Streaming decode: push ids one at a time; only whole UTF-8 characters come out, a character split
 * across tokens is held until it completes. No allocation. */
typedef struct {
    unsigned char pending[8]; /* bytes of an incomplete character */
    int n_pending;
    int first;                /* no token pushed yet (SentencePiece's leading space) */
} gp_tok_stream;

void gp_tok_stream_init(gp_tok_stream *s);
/* Appends what id completes to out (at most cap bytes, NUL-terminated when cap > 0); returns the
 * bytes written, -1 for a bad id or cap too small (cap >= gp_tok_stream_cap(t) always suffices for
 * one token; 256 does for most vocabularies, but GPT-NeoX, MPT and Command-R have 512-byte
 * whitespace pieces). */
int gp_tok_stream_push(const gp_tok *t, gp_tok_stream *s, int32_t id, char *out, size_t cap);
/* The out buffer gp_tok_stream_push never overflows: 3 bytes a byte of the longest piece (each may
 * become U+FFFD) and the pending character's, plus the NUL. */
size_t gp_tok_stream_cap(const gp_tok *t);
/* Whatever is still pending at the end (an incomplete character becomes U+FFFD). */
int gp_tok_stream_flush(gp_tok_stream *s, char *out, size_t cap);

#endif
