/* Tokenizers: text to token ids and back. Byte-level BPE (GPT-2 and the pre-tokenizers derived from
 * it) and SentencePiece-style BPE with scores and byte fallback, loaded from GGUF metadata
 * (tokenizer.ggml.*) or a Hugging Face folder (tokenizer.json + tokenizer_config.json).
 * Library gp_tokenizer: links the runtime's GGUF reader, never the compiler. */
#ifndef GP_TOKENIZER_TOKENIZER_H
#define GP_TOKENIZER_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "weights/gguf.h"

typedef struct gp_tok gp_tok;

/* path: a .gguf file, a tokenizer.json, or a folder holding tokenizer.json (and optionally
 * tokenizer_config.json, generation_config.json). NULL with err set on failure:
 * "PATH: bad tokenizer (REASON)", "PATH: bad GGUF file (REASON)", ... */
gp_tok *gp_tok_load(const char *path, char *err, size_t errlen);
/* From an open GGUF file's tokenizer.ggml.* metadata; the tokenizer copies what it keeps. */
gp_tok *gp_tok_from_gguf(const gp_gguf *g, char *err, size_t errlen);
void gp_tok_free(gp_tok *t); /* NULL is a no-op */

int32_t gp_tok_vocab_size(const gp_tok *t);
/* Special ids, -1 when the vocabulary has none. */
int32_t gp_tok_bos(const gp_tok *t);
int32_t gp_tok_eos(const gp_tok *t);
/* 1 when generation stops at id: EOS, EOT/end-of-turn tokens, generation_config's eos ids. */
int gp_tok_is_eog(const gp_tok *t, int32_t id);
/* The chat template text (GGUF tokenizer.chat_template or tokenizer_config.json's), or NULL. */
const char *gp_tok_chat_template(const gp_tok *t);

/* Encodes len bytes of UTF-8. add_special: BOS (and EOS) as the vocabulary's rules say;
 * parse_special: control/special token texts in the input become their ids (else they are plain
 * text). Writes at most cap ids; returns the number of ids the text needs (may exceed cap: call
 * again with a larger buffer), or -1 with err set (invalid UTF-8 at byte N, ...). */
int64_t gp_tok_encode(const gp_tok *t, const char *text, size_t len, int add_special,
                      int parse_special, int32_t *ids, int64_t cap, char *err, size_t errlen);

/* The bytes a token stands for when decoded (byte-level BPE: the byte-decoded piece; SentencePiece:
 * '\xe2\x96\x81' as space, <0xNN> as the byte). Returns the piece's length, writing at most cap
 * bytes; -1 for an id out of range. Special tokens give their text when render_special, else "". */
int gp_tok_piece(const gp_tok *t, int32_t id, int render_special, char *buf, size_t cap);

/* Decodes ids to text (leading space of SentencePiece's first piece removed as the vocabulary says).
 * Returns the length needed (may exceed cap), -1 for a bad id. Output is NUL-terminated when
 * cap > 0. */
int64_t gp_tok_decode(const gp_tok *t, const int32_t *ids, int64_t n, int render_special,
                      char *out, size_t cap);

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
