/* The tokenizer's internal state, shared by the loaders (load_gguf.c, load_json.c), the builder
 * (vocab.c), the pre-tokenizer (pretok.c), the merge engine (bpe.c) and the codecs. */
#ifndef GP_TOKENIZER_TOK_IMPL_H
#define GP_TOKENIZER_TOK_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

/* Token types, numbered as GGUF's tokenizer.ggml.token_type (llama.cpp's). */
enum {
    GP_TOKT_UNDEFINED = 0,
    GP_TOKT_NORMAL = 1,
    GP_TOKT_UNKNOWN = 2,
    GP_TOKT_CONTROL = 3,
    GP_TOKT_USER = 4,
    GP_TOKT_UNUSED = 5,
    GP_TOKT_BYTE = 6,
    GP_TOKT_COUNT
};

typedef enum {
    GP_TOK_BYTE_BPE = 1, /* GPT-2 style: bytes mapped to printable characters, ranked merges */
    GP_TOK_SPM = 2,      /* SentencePiece style: '\xe2\x96\x81' for spaces, byte fallback */
} gp_tok_kind;

#define GP_TOK_MAX_RE 8

struct gp_tok {
    gp_tok_kind kind;
    int32_t n_vocab;
    char *text;          /* [text_len] every token's text, back to back (the vocabulary's form) */
    size_t text_len, text_cap;
    int32_t n_set;       /* ids 0 .. n_set - 1 have their texts */
    uint32_t *text_off;  /* [n_vocab + 1] */
    char *piece;         /* [piece_off[n_vocab]] the bytes each token decodes to */
    uint32_t max_piece;  /* the longest piece's bytes */
    uint32_t *piece_off; /* [n_vocab + 1] */
    uint8_t *type;       /* [n_vocab] GP_TOKT_* */
    float *score;        /* [n_vocab] SentencePiece scores (NULL for byte-level BPE) */

    int32_t *tab;        /* [tab_mask + 1] text -> id, open addressing, -1 empty */
    uint32_t tab_mask;

    uint64_t *mkey;      /* [mmask + 1] (left << 32 | right) + 1, 0 empty */
    uint32_t *mrank;     /* [mmask + 1] lower merges first */
    int32_t *mout;       /* [mmask + 1] the merged token */
    uint32_t mmask;
    int64_t n_merges;
    uint8_t *in_merge;   /* [n_vocab] 1 when the token is a side of some merge */

    int32_t byte_id[256];  /* byte-level: the token of byte b's mapped character; SPM: <0xNN> */
    int32_t unk, bos, eos, eot, eom, pad;
    int add_bos, add_eos, add_space_prefix, ignore_merges;
    int32_t *eog;        /* [n_eog] ids that end generation */
    int n_eog;

    /* Added/special tokens matched in the text before pre-tokenization, longest first. */
    int32_t *special;    /* [n_special] sorted by first byte, then by length descending */
    int n_special;
    int32_t first_at[257]; /* special[first_at[b] .. first_at[b + 1]) start with byte b */

    pcre2_code *re[GP_TOK_MAX_RE]; /* pre-tokenizer splits, applied in order (each isolates its
                                      matches inside the pieces the previous one made) */
    int n_re;
    int nfc;             /* utf8proc_map options the text is normalized with first (NFC, NFKC,
                            NFD, NFKD), 0 for none */

    char *chat_template;
    char name[256];      /* what it was loaded from, for messages */
};

/* Building (vocab.c). */
gp_tok *gp_tok_alloc(int32_t n_vocab, gp_tok_kind kind, const char *name);
int gp_tok_set_text(gp_tok *t, int32_t id, const char *s, size_t len);
int gp_tok_index(gp_tok *t, char *err, size_t errlen);                   /* text -> id table */
int32_t gp_tok_find(const gp_tok *t, const char *s, size_t len);         /* -1 when absent */
int gp_tok_merges_reserve(gp_tok *t, int64_t n);
void gp_tok_merge_add(gp_tok *t, int32_t l, int32_t r, int32_t out, uint32_t rank);
int gp_tok_merge_find(const gp_tok *t, int32_t l, int32_t r, uint32_t *rank, int32_t *out);
/* SentencePiece: every split of a token into two tokens becomes a merge ranked by the token's
 * score (equal scores share a rank: the leftmost pair goes first, as SentencePiece does). */
int gp_tok_merges_from_scores(gp_tok *t, char *err, size_t errlen);
int gp_tok_set_pretok(gp_tok *t, const char *const *patterns, int n, char *err, size_t errlen);
/* Pre-tokenizer regexes named by GGUF's tokenizer.ggml.pre; NULL for an unknown name. */
const char *const *gp_tok_pre_patterns(const char *pre, int *n, int *ignore_merges);
extern const char *const gp_tok_gpt2_pattern;
/* Pieces, byte map, special list, EOG set; last step of every loader. */
int gp_tok_finish(gp_tok *t, char *err, size_t errlen);
int gp_tok_add_eog(gp_tok *t, int32_t id);

/* Encoding pieces. */
uint64_t gp_tok_hash(const void *s, size_t len);
/* First invalid byte offset of s, or -1 when s is valid UTF-8. */
int64_t gp_tok_utf8_check(const unsigned char *s, size_t len);
int gp_tok_utf8_len(unsigned char lead); /* 1..4; 1 for a byte that starts no sequence */

/* The GPT-2 byte <-> character map: byte b is written as code point gp_tok_byte_cp(b). */
uint32_t gp_tok_byte_cp(unsigned b);

#endif
