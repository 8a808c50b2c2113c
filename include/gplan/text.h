/* gplan's text API: a language model from a GGUF file or a Hugging Face folder, text in and out.
 * Library libgplan, installed as <gplan/text.h> beside <gplan/gplan.h> (whose session API it is
 * built on and which stays available: gp_lm_model gives the plan's gp_model).
 *
 *     char err[1024];
 *     gp_lm *lm = gp_lm_load("SmolLM2-135M-Instruct.Q4_1.gguf", NULL, err, sizeof err);
 *     gp_seq *s = gp_seq_new(lm, NULL, err, sizeof err);   // greedy
 *     gp_gen_opts g = gp_gen_defaults();
 *     g.max_tokens = 32;
 *     g.on_text = print_piece;                             // streams whole UTF-8 characters
 *     gp_gen_result r;
 *     if (gp_seq_generate(s, "The capital of France is", &g, &r)) puts(gp_seq_error(s));
 *     gp_seq_free(s);
 *     gp_lm_free(lm);
 *
 * Loading: the graph is chosen by the file's architecture (general.architecture, or config.json's
 * model_type) from the graphs built into the library, planned in process, and the plan kept in a
 * cache folder keyed by the model file (path, size, modification time), the graph, the options,
 * gplan's version and its build (the library's or the program's file), so a second load plans
 * nothing and a rebuilt gplan plans again. The folder keeps 32 plans: writing another removes the
 * least recently used (a load marks its plan used by its modification time). A given plan file skips all of that.
 *
 * Sequences: a model serves any number of sequences; each has its own session (KV cache), sampler
 * state and text stream, and is used by one thread at a time. gp_seq_new allocates everything a
 * sequence uses; after it, generating allocates nothing (the callbacks are the caller's).
 *
 * Errors: functions return -1 (or NULL) with a message in err, or in gp_seq_error for a sequence.
 * A prompt longer than the context: "the prompt has 5000 tokens, more than the context of 4096
 * positions" (gp_gen_result.prompt_tokens and gp_lm_context give the numbers).
 */
#ifndef GPLAN_TEXT_H
#define GPLAN_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "gplan.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gp_lm gp_lm;   /* a model: plan, weights, tokenizer, chat template (read-only) */
typedef struct gp_seq gp_seq; /* one sequence of a model: KV cache, sampler, stream */
typedef struct gp_batch gp_batch; /* sequences evaluated together (a ragged batch) */

/* ---- models ---- */

typedef struct {
    const char *plan;        /* a plan file made by gplan-compile; NULL: plan from the architecture */
    const char *tokenizer;   /* a .gguf, tokenizer.json or folder; NULL: the model's own (the
                                GGUF file, else a tokenizer.json in or beside the checkpoint);
                                "": none (token ids only) */
    const char *const *defines; /* [n_defines] graph parameters "NAME=VALUE", as gplan-compile -D */
    int n_defines;
    int64_t context;         /* positions of the KV cache; 0: the file's, at most 4096 */
    int64_t batch;           /* tokens per eval at most (prompt chunks); 0: 512 */
    const char *cache_dir;   /* plans' cache; NULL: $GPLAN_CACHE_DIR, else $XDG_CACHE_HOME/gplan,
                                else ~/.cache/gplan; "": no cache (plan in memory) */
    const char *backend;     /* sessions' backend: "cpu" (NULL), "reference", "cuda" */
    int n_threads;           /* CPU threads; <= 0: the online cores (at most 64) */
    int device;              /* CUDA device ordinal */
    int allow_unused;        /* a GGUF file's tensors need not all be in the graph (refused
                                otherwise: more layers than block_count says, another model) */
    int random_weights;      /* bind deterministic random weights of random_seed, not the file's */
    uint64_t random_seed;
    int n_seq;               /* > 0: plan a ragged batch of up to n_seq sequences (gp_batch), whose
                                KV caches share a pool of blocks; 0: one sequence a session */
    int64_t kv_positions;    /* with n_seq: the pool's positions (all sequences together); 0:
                                n_seq * context */
    const char *chat_format; /* a built-in chat format by name instead of the template's, as
                                gp_lm_set_chat_format; NULL: the template's */
    const char *lora;        /* a PEFT adapter folder applied at load (gplan.h), or NULL: merged
                                into the weights by lora_merge_plan (gp_model_apply_lora), else
                                bound into the adapter slots of a plan of -D lora_r=R
                                (runtime mode, gp_model_bind_adapter) */
    const char *lora_merge_plan;
    double lora_scale;       /* multiplies the adapter's lora_alpha / r; gp_lm_defaults: 1 */
    int64_t memory;          /* > 0: the bytes the plan may hold on its device (gplan/plan.h's
                                gp_plan_memory.total); with no context given (context 0, no -D
                                of it), the largest context up to the default's that fits;
                                else, or when one position does not fit, refused with the
                                figures. 0: no budget */
} gp_lm_opts;

/* path: a .gguf file, a Hugging Face folder (config.json, safetensors, tokenizer.json), or with
 * o->plan a checkpoint for that plan (defines, context, batch and memory are then refused: a plan's are
 * fixed by gplan-compile). o may be NULL. NULL with err set: the file and what is wrong,
 * e.g. "x.gguf: unsupported architecture 'mamba' (supported: gemma2, gemma3, ...)". */
gp_lm *gp_lm_load(const char *path, const gp_lm_opts *o, char *err, size_t err_len);
/* The options' defaults: every field 0 / NULL but lora_scale, 1. */
gp_lm_opts gp_lm_defaults(void);
/* 1 when path is for gp_lm_load as the model itself rather than as o->plan: a folder, a regular
 * file starting with GGUF's magic, or what is no regular file (a FIFO, a device: the loader
 * refuses it, saying what it is); 0 for another regular file (a plan), a missing path or NULL.
 * Only a regular file is opened, so it never blocks. */
int gp_lm_is_model(const char *path);
void gp_lm_free(gp_lm *lm); /* NULL is a no-op; free its sequences first */

gp_model *gp_lm_model(gp_lm *lm);         /* the plan and weights, for gplan.h's session API */
const char *gp_lm_plan_path(const gp_lm *lm); /* the plan file used (cache or given), or "" */
const char *gp_lm_arch(const gp_lm *lm);  /* the architecture ("llama", ...), or "" with a plan */
int64_t gp_lm_context(const gp_lm *lm);   /* positions a sequence holds */
int64_t gp_lm_vocab(const gp_lm *lm);     /* logits per row */
int gp_lm_threads(const gp_lm *lm);       /* CPU threads a session uses (n_threads resolved) */
int gp_lm_has_tokenizer(const gp_lm *lm);
/* The tokenizer's ids (0 without one). When fewer than gp_lm_vocab (an embedding padded past the
 * vocabulary), the ids past them are never sampled. */
int64_t gp_lm_tokenizer_vocab(const gp_lm *lm);
/* What the load noticed without refusing it, a sentence for the user ("" when nothing): today a
 * tokenizer of fewer ids than the embedding's rows ("the tokenizer has 49152 ids, the embedding
 * 49280 rows: the ids past the tokenizer's are never sampled"). */
const char *gp_lm_note(const gp_lm *lm);
/* 1 when generation ends at id: the vocabulary's EOS, end-of-turn and generation_config's ids. */
int gp_lm_is_eog(const gp_lm *lm, int32_t id);
/* The offset of the first byte of s[len] that is not well-formed UTF-8, or -1 when all are. */
int64_t gp_utf8_invalid_at(const char *s, size_t len);

/* Text to ids: special tokens' texts become their ids; add_special adds BOS (and EOS) as the
 * vocabulary says. Returns the count, which may exceed cap (nothing past cap is written), or -1
 * with err (invalid UTF-8, no tokenizer). */
int64_t gp_lm_tokenize(const gp_lm *lm, const char *text, size_t len, int add_special,
                       int32_t *ids, int64_t cap, char *err, size_t err_len);
/* Ids to text (special tokens rendered as their texts): the length, which may exceed cap; out
 * NUL-terminated when cap > 0. -1 for an id outside the vocabulary or no tokenizer. */
int64_t gp_lm_detokenize(const gp_lm *lm, const int32_t *ids, int64_t n, char *out, size_t cap);

typedef struct {
    const char *role; /* "system", "user" or "assistant" */
    const char *content;
} gp_msg;

/* Formats a conversation with the model's chat template (or the format named by
 * gp_lm_set_chat_format) and, when add_assistant, the start of the assistant's reply. The length,
 * which may exceed cap; -1 with err (no template, a role the format does not take). */
int64_t gp_lm_chat_apply(const gp_lm *lm, const gp_msg *msgs, size_t n, int add_assistant,
                         char *out, size_t cap, char *err, size_t err_len);
/* Chooses a built-in chat format by name ("chatml", "llama3", ...) instead of the template's.
 * -1 with err listing the names. */
int gp_lm_set_chat_format(gp_lm *lm, const char *name, char *err, size_t err_len);
const char *gp_lm_chat_formats(void); /* the names, comma-separated */
/* 1 when the model has a chat template or a format was chosen. */
int gp_lm_has_chat(const gp_lm *lm);

/* ---- sampling ---- */

/* The filters run in Hugging Face's order: repetition penalty, temperature, top-k, top-p (over
 * what top-k kept), min-p; each off at its default. */
typedef struct {
    double temp;           /* > 0 scales the logits by 1 / temp; 0: greedy (argmax) */
    int64_t top_k;         /* keep the k most likely; 0: off */
    double top_p;          /* keep the smallest most-likely prefix whose mass >= top_p; 1: off */
    double min_p;          /* keep tokens with p >= min_p * p(most likely); 0: off */
    double repeat_penalty; /* > 0; a recently seen id's logit l becomes l / penalty when l > 0,
                              l * penalty otherwise (CTRL's rule); 1: off */
    int64_t repeat_last_n; /* how many of the last ids (prompt included) the penalty sees */
    uint64_t seed;         /* the same seed and logits give the same ids */
} gp_sampler_opts;

/* Greedy, every filter off, repeat_last_n 64, seed 1. */
gp_sampler_opts gp_sampler_defaults(void);

/* ---- sequences ---- */

/* A sequence: allocates its session and every buffer. so NULL: gp_sampler_defaults(). NULL with
 * err for bad sampler options or no memory. */
gp_seq *gp_seq_new(gp_lm *lm, const gp_sampler_opts *so, char *err, size_t err_len);
void gp_seq_free(gp_seq *s); /* NULL is a no-op */
const char *gp_seq_error(const gp_seq *s); /* the last error, "" when none */
gp_session *gp_seq_session(gp_seq *s);     /* its session, for gplan.h's calls */

/* New sampler options for the next tokens (the PRNG restarts from the seed); so NULL: the
 * defaults. 0, or -1 (the old sampler kept). */
int gp_seq_set_sampler(gp_seq *s, const gp_sampler_opts *so);
/* Forgets the sequence: the next prompt starts at position 0 (the KV cache is not cleared: its
 * rows are overwritten as positions are filled). */
void gp_seq_reset(gp_seq *s);
int64_t gp_seq_length(const gp_seq *s);                /* positions filled */
const int32_t *gp_seq_tokens(const gp_seq *s);         /* [gp_seq_length] the ids in the cache */

typedef enum {
    GP_FINISH_NONE,    /* still generating (gp_seq_step) */
    GP_FINISH_LENGTH,  /* max_tokens generated */
    GP_FINISH_STOP,    /* an end-of-generation token or a stop string */
    GP_FINISH_CONTEXT, /* the context is full */
    GP_FINISH_CANCEL,  /* the callback asked to stop, or gp_seq_cancel */
} gp_finish;
const char *gp_finish_name(gp_finish f); /* "length", "stop", "context", "cancel", "" */

typedef struct {
    int64_t max_tokens;       /* tokens to generate at most; < 0: until the context is full */
    const char *const *stop;  /* [n_stop] strings that end generation; not part of the text */
    int n_stop;               /* at most 16, each at most 256 bytes */
    int ignore_eos;           /* go on past end-of-generation tokens */
    int64_t eos;              /* another id that ends generation, or -1 */
    /* Called with each piece of text as it becomes final (whole UTF-8 characters, held back
     * while it may be the start of a stop string); nonzero cancels. NULL: no streaming. */
    int (*on_text)(void *user, const char *text, size_t len);
    /* Called with each generated id as it is picked, before its text; nonzero cancels. */
    int (*on_token)(void *user, int32_t id);
    void *user;
    /* When the context is full: 0 finishes (GP_FINISH_CONTEXT); 1 starts again at position 0
     * from the last id, as a start of that one id would (the cache forgotten, the sampler
     * restarted from its seed), and goes on: generation longer than the context in constant
     * memory, its evals counted as generation's. Not for chats or a batch's sequences. */
    int restart;
} gp_gen_opts;

/* max_tokens 16, no stop strings, eos -1, no callbacks. */
gp_gen_opts gp_gen_defaults(void);

typedef struct {
    gp_finish finish;
    int64_t prompt_tokens;     /* the prompt's tokens */
    int64_t cached_tokens;     /* of which already in the KV cache (a shared prefix): not evaluated */
    int64_t completion_tokens; /* generated */
    double prompt_ms, gen_ms;  /* time in evals */
    int64_t prompt_evals, gen_evals;
    int64_t prompt_rows;       /* tokens evaluated by the prompt's evals */
    int32_t stop_token;        /* the end-of-generation id that ended it (not emitted), or -1 */
} gp_gen_result;

/* gp_seq_start*'s results besides 0 and -1: the prompt does not fit in the context (the message
 * says how many tokens were asked and how many positions there are; the sequence is unchanged). */
#define GP_SEQ_TOO_LONG 1
/* A batch's sequence whose prompt and max_tokens need more KV blocks than the pool has free, even
 * with every idle sequence's cache dropped (the message says how many; no other sequence is
 * touched). */
#define GP_SEQ_NO_ROOM 2

/* Feeds a prompt of ids: with keep_prefix the longest prefix that the cache already holds is kept
 * (at least the last id is evaluated), else the sequence starts over; the rest is evaluated at the
 * next positions in chunks of the plan's batch, and the first id to generate is picked. Then
 * gp_seq_step generates. 0; GP_SEQ_TOO_LONG when n exceeds the context; -1 with the error (a bad
 * id, an empty prompt, an eval failure). May allocate (growing the sequence's text buffers); the
 * steps never do. */
int gp_seq_start(gp_seq *s, const int32_t *ids, int64_t n, int keep_prefix, const gp_gen_opts *g);
/* The same from text (tokenized with add_special). */
int gp_seq_start_text(gp_seq *s, const char *text, size_t len, int keep_prefix,
                      const gp_gen_opts *g);
/* The same from a conversation, formatted with the chat template and the assistant's prompt;
 * the cache is reused where the formatted text continues the text the cache holds (the last
 * chat's prompt and reply, gp_seq_reply), else up to the first id that differs. A chat's steps
 * evaluate every emitted token, so the reply is in the cache for the next turn. GP_SEQ_TOO_LONG
 * when the conversation leaves no position for the reply. */
int gp_seq_start_chat(gp_seq *s, const gp_msg *msgs, size_t n, const gp_gen_opts *g);
/* One token: emits its text through the callbacks and evaluates it. GP_FINISH_NONE while
 * running, else why it finished (then the held text is flushed); -1 on an eval error, or when
 * the logits are not finite ("eval 7 (generation, 5 tokens generated): logit 0 is nan: ..."). */
int gp_seq_step(gp_seq *s);
/* gp_seq_start_text (keep_prefix 1) and gp_seq_step until finished. 0, GP_SEQ_TOO_LONG (r has
 * the prompt's tokens) or -1. r may be NULL. */
int gp_seq_generate(gp_seq *s, const char *prompt, const gp_gen_opts *g, gp_gen_result *r);
/* gp_seq_start_chat and gp_seq_step until finished. 0, GP_SEQ_TOO_LONG or -1. */
int gp_seq_chat(gp_seq *s, const gp_msg *msgs, size_t n, const gp_gen_opts *g, gp_gen_result *r);
/* The text generated since the last start (what was streamed, stop strings cut): valid until the
 * next start. */
const char *gp_seq_text(const gp_seq *s, size_t *len);
/* The text of every token generated since the last start as the cache holds it (a stop string
 * and what follows it in its token included): the assistant's content that lets the next
 * gp_seq_start_chat continue the cache. Valid until the next start. */
const char *gp_seq_reply(const gp_seq *s, size_t *len);
/* Asks a running generation to stop at its next step (any thread). */
void gp_seq_cancel(gp_seq *s);
/* The counts and times of the last generation. */
void gp_seq_result(const gp_seq *s, gp_gen_result *r);
/* The counts and times of every generation since gp_seq_new, summed (chat turns, prompts, failed
 * starts' prompt_tokens); finish and stop_token are the last generation's. For figures over a
 * whole run: tokens per second of prompts (prompt_rows / prompt_ms) and generation. */
void gp_seq_totals(const gp_seq *s, gp_gen_result *r);

/* ---- batches ----
 * The sequences of a model planned with n_seq > 0, evaluated together: each gp_batch_step is one
 * eval holding the next token of every generating sequence and, in the room left of the plan's
 * batch, chunks of the prompts being evaluated (first started, first served), each sequence
 * reading and writing only its own blocks of the KV pool. A batch's sequences are started, read
 * and cancelled with the gp_seq calls (gp_seq_start*, gp_seq_text, gp_seq_result, ...; not
 * gp_seq_step, gp_seq_generate or eval hooks); a start reserves the KV blocks its prompt and
 * max_tokens need (GP_SEQ_NO_ROOM when the pool cannot hold them) and, with keep_prefix, keeps
 * the cached prefix of the slot's last sequence, or shares the whole blocks of a longer common
 * prefix in another slot's cache (a shared system prompt is evaluated once; gp_gen_result's
 * cached_tokens counts it). An idle slot keeps its cache until its blocks are needed. Steps
 * allocate nothing. One thread drives a batch (gp_seq_cancel may come from any). */
gp_batch *gp_batch_new(gp_lm *lm, char *err, size_t err_len);
void gp_batch_free(gp_batch *b); /* NULL is a no-op */
int gp_batch_slots(const gp_batch *b);
gp_seq *gp_batch_seq(gp_batch *b, int slot);  /* slot's sequence, 0 <= slot < gp_batch_slots */
/* One eval: the sequences that finish on it (a stop, the length, a cancel) are idle after it.
 * The count of sequences still running (generating or evaluating a prompt), or -1 with
 * gp_batch_error (an eval failure). A sequence whose logits are not finite fails alone: its
 * gp_seq_error says so, the others go on. */
int gp_batch_step(gp_batch *b);
const char *gp_batch_error(const gp_batch *b);
/* 1 generating, 2 evaluating its prompt, 0 idle (finished or never started). */
int gp_batch_state(const gp_batch *b, int slot);
/* hold 1: the slot's sequence takes no part in the next steps (its reader is behind); 0 again. */
void gp_batch_hold(gp_batch *b, int slot, int hold);
/* Prompt tokens a step takes at most besides the generated ones while some sequences generate (so
 * that a long prompt does not stall their next tokens for a whole batch's eval); a step of prompts
 * alone takes the whole batch. 0 or more than the plan's batch: no bound (the default). */
void gp_batch_set_prompt_budget(gp_batch *b, int64_t tokens);
/* The slot whose cache holds the longest prefix of ids[n] among the idle ones (ties: the one
 * idle longest), *common that prefix's length; -1 when every slot is running. */
int gp_batch_pick_slot(const gp_batch *b, const int32_t *ids, int64_t n, int64_t *common);
int64_t gp_batch_free_blocks(const gp_batch *b); /* the pool's blocks no sequence holds */
int64_t gp_batch_blocks(const gp_batch *b);      /* the pool's blocks */
int64_t gp_batch_block_rows(const gp_batch *b);  /* positions one block holds */
int64_t gp_batch_evals(const gp_batch *b);       /* evals so far */

/* ---- conversations ----
 * A conversation on a sequence, as a chat program holds one: the messages so far (copied), each
 * user turn formatted with the chat template so that the cache is reused, the reply kept as the
 * assistant's message as the cache holds it. When a turn does not fit in the context, the oldest
 * turns are dropped (the system message kept) until it does, and the cache starts over. */
typedef struct gp_conv gp_conv;

/* system: the system message, or NULL (the template's default, if it has one). NULL with err,
 * also when the model has no chat format (no template nor gp_lm_set_chat_format: "the tokenizer
 * has no chat template: ...") or the plan no KV cache. */
gp_conv *gp_conv_new(gp_seq *s, const char *system, char *err, size_t err_len);
void gp_conv_free(gp_conv *c); /* NULL is a no-op; the sequence stays */
/* A user turn of len bytes and the reply, streamed through g's callbacks (r may be NULL). 0;
 * GP_SEQ_TOO_LONG when the system message and this turn alone do not fit (nothing is kept);
 * -1 with gp_seq_error (invalid UTF-8, ...), the turn not kept. */
int gp_conv_turn(gp_conv *c, const char *text, size_t len, const gp_gen_opts *g,
                 gp_gen_result *r);
/* gp_conv_turn in parts, for a caller that steps itself: start (the same results; on 0 call
 * gp_seq_step until it finishes), then end, which keeps the reply. */
int gp_conv_start(gp_conv *c, const char *text, size_t len, const gp_gen_opts *g);
int gp_conv_end(gp_conv *c);
/* The messages so far: [*n], valid until the next turn. */
const gp_msg *gp_conv_messages(const gp_conv *c, size_t *n);
/* Messages dropped by the last turn to fit the context (0: the cache was continued). */
size_t gp_conv_dropped(const gp_conv *c);

/* The sequence's figures as text, a line each starting with prefix (may be ""): its backend and
 * threads, the plan file; the evals of every generation since gp_seq_new (gp_seq_totals) and the
 * prompts' and generation's tokens, ms per eval and tokens per second; the device allocations its
 * evals made (0 expected); the weights mapped and loaded; the process's peak RSS. For a report at
 * the end of a run (gplan-run --stats); the host's allocations are <gplan/alloc_interpose.h>'s.
 * The length, which may exceed cap (out NUL-terminated when cap > 0). */
int64_t gp_seq_stats(gp_seq *s, const char *prefix, char *out, size_t cap);

/* The logits row of the last evaluated token: [gp_lm_vocab], valid until the next eval. */
const float *gp_seq_logits(gp_seq *s);

/* Calls around each eval of the sequence (prompt chunks and generated tokens), e.g. to time evals,
 * count allocations or keep logits. after gets the eval's logits [n_rows, vocab] (the last row
 * last); with all_rows the plan computes every token's row (its rows input's bound, -D n_rows,
 * must hold the chunk). */
typedef struct {
    void (*before)(void *user, int64_t n_tokens);
    void (*after)(void *user, const float *logits, int64_t n_rows, int64_t vocab);
    void *user;
    int all_rows;
} gp_eval_hooks;
/* h NULL: none. 0. With all_rows, an eval of more tokens than the plan's rows input holds fails
 * with the session's message. */
int gp_seq_set_eval_hooks(gp_seq *s, const gp_eval_hooks *h);

#ifdef __cplusplus
}
#endif

#endif
