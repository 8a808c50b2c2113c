/* gplan's tokenizer API: text to token ids and back with the tokenizer of a GGUF file
 * (tokenizer.ggml.* metadata) or of a Hugging Face folder (tokenizer.json, tokenizer_config.json,
 * generation_config.json), without a model: byte-level BPE (GPT-2 and the pre-tokenizers derived
 * from it) and SentencePiece-style BPE with scores and byte fallback (docs/tokenizer.md). Library
 * libgplan, installed as <gplan/tokenizer.h>; <gplan/text.h> tokenizes with a model's own
 * (gp_lm_tokenize), this is the same tokenizer on its own.
 *
 *     char err[1024];
 *     gp_tok *t = gp_tok_load("tokenizer.json", err, sizeof err);
 *     int32_t ids[64];
 *     int64_t n = gp_tok_encode(t, "Hello", 5, 1, 0, ids, 64, err, sizeof err); // BOS as it says
 *     char text[256];
 *     gp_tok_decode(t, ids, n < 64 ? n : 64, 0, text, sizeof text);
 *     gp_tok_free(t);
 *
 * A tokenizer is read-only once loaded: any number of threads may use one at once.
 *
 * Errors: functions return -1 (or NULL) with a message in err, as <gplan/text.h>'s.
 */
#ifndef GPLAN_TOKENIZER_H
#define GPLAN_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gp_tok gp_tok; /* a vocabulary, its merges, pre-tokenizer and special tokens */

/* path: a .gguf file, a tokenizer.json, or a folder holding tokenizer.json (and optionally
 * tokenizer_config.json, generation_config.json). NULL with err set on failure:
 * "PATH: bad tokenizer (REASON)", "PATH: bad GGUF file (REASON)", ... */
gp_tok *gp_tok_load(const char *path, char *err, size_t err_len);
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
                      int parse_special, int32_t *ids, int64_t cap, char *err, size_t err_len);

/* The bytes a token stands for when decoded (byte-level BPE: the byte-decoded piece; SentencePiece:
 * '\xe2\x96\x81' as space, <0xNN> as the byte). Returns the piece's length, writing at most cap
 * bytes; -1 for an id out of range. Special tokens give their text when render_special, else "". */
int gp_tok_piece(const gp_tok *t, int32_t id, int render_special, char *buf, size_t cap);

/* Decodes ids to text (leading space of SentencePiece's first piece removed as the vocabulary says).
 * Returns the length needed (may exceed cap), -1 for a bad id. Output is NUL-terminated when
 * cap > 0. */
int64_t gp_tok_decode(const gp_tok *t, const int32_t *ids, int64_t n, int render_special,
                      char *out, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
