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
    char backend[32];
    int n_threads, device;
};

/* Sets a sequence's error (printf-style); returns -1. */
int gp_seq_fail(gp_seq *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
