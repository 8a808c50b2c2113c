/* What text/lm.c and text/seq.c share: the model behind gp_lm (include/gplan/text.h). */
#ifndef GP_TEXT_LM_IMPL_H
#define GP_TEXT_LM_IMPL_H

#include "gplan/text.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

struct gp_lm {
    gp_model *m;
    gp_model_info info;
    int64_t n_pick;          /* ids that may be picked: the tokenizer's, else the vocabulary */
    int64_t ctx;             /* positions a sequence holds (INT64_MAX: the graph has no cache) */
    gp_tok *tok;             /* NULL: ids only */
    size_t max_piece;        /* the longest token text (special tokens rendered) */
    gp_chat_template tpl;    /* valid when has_chat */
    int has_chat;
    char chat_err[512];      /* why there is no chat format, for gp_lm_chat_apply */
    char bos[256], eos[256]; /* the vocabulary's BOS/EOS texts ("" when none) */
    char arch[64];           /* the family's GGUF architecture, "" with a given plan */
    char plan_path[4096];    /* the plan file used, "" for a plan in memory */
    char note[256];          /* gp_lm_note's */
    char backend[32];
    int n_threads, device;
    int n_seq;               /* a ragged batch's sequences (kv_table's rows), 0: one sequence */
    int64_t kv_block;        /* its KV blocks' rows, and the blocks of the pool */
    int64_t kv_blocks;
};

/* Sets a sequence's error (printf-style); returns -1. */
int gp_seq_fail(gp_seq *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
gp_lm *gp_seq_lm(const gp_seq *s); /* the sequence's model (text/conv.c) */

/* ---- text/seq.c for text/batch.c: the sequences of a batch, whose evals the batch runs ---- */

/* A sequence without a session of its own when b is given (slot: its row of the block table). */
gp_seq *gp_seq_new_in(gp_lm *lm, gp_batch *b, int slot, const gp_sampler_opts *so, char *err,
                      size_t err_len);
/* The first half of a step, up to its eval: GP_SEQ_STEP_EVAL with the id to evaluate at position
 * gp_seq_length (and whether it is the last), or what gp_seq_step returns when no eval follows. */
#define GP_SEQ_STEP_EVAL 100
int gp_seq_step_begin(gp_seq *s, int32_t *id, int *done);
/* The second half, after the eval gave the sequence its row (gp_seq_take_row). */
int gp_seq_step_end(gp_seq *s, int32_t id, int done);
/* An eval's row for the sequence: its logits, the plan's argmax of them (or -1), the eval's size
 * and time for the counts; -1 when a logit is not finite. */
int gp_seq_take_row(gp_seq *s, const float *row, int64_t next, int64_t n, int is_prompt,
                    double dt);
/* A prompt in the cache: the sampler sees it, the first id is picked, generation starts. */
void gp_seq_fed(gp_seq *s, const int32_t *ids, int64_t n);
/* A batch sequence's prompt still to evaluate: the next at most room ids (their first position
 * in *pos0), 0 when none; gp_seq_prompt_took records that k of them were evaluated (the last
 * one's row given when the prompt is complete). */
int64_t gp_seq_prompt_next(gp_seq *s, int64_t room, const int32_t **ids, int64_t *pos0);
int gp_seq_prompt_took(gp_seq *s, int64_t k, const float *row, int64_t next, double dt);
int gp_seq_running(const gp_seq *s); /* 1 generating, 2 evaluating its prompt, 0 idle */
void gp_seq_set_limit(gp_seq *s, int64_t positions);

/* text/batch.c for text/seq.c: a batch sequence's blocks for positions 0 .. need - 1, of which
 * 0 .. *keep - 1 are its cached prefix (lowered to a block's start when that block is shared).
 * 0, or GP_SEQ_NO_ROOM with err when the pool cannot hold them even with idle sequences' caches
 * dropped (nothing changed then). */
int gp_batch_reserve(gp_batch *b, int slot, int64_t *keep, int64_t need, char *err, size_t n);
/* A longer cached prefix of ids[n] than the slot's own keep, in whole blocks of another slot's
 * cache (a shared system prompt): those blocks shared, their ids copied to cache; the new keep,
 * or keep when no other slot has more. */
int64_t gp_batch_share(gp_batch *b, int slot, const int32_t *ids, int64_t n, int64_t keep,
                       int32_t *cache);

#endif
