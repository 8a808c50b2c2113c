/* Picking the next token from a row of logits: repetition penalty, temperature, top-k, top-p,
 * min-p and a seeded PRNG; greedy at temperature 0. Every buffer is allocated by gp_sampler_new
 * (vocabulary size and options known then): sampling allocates nothing. Part of gp_runtime. */
#ifndef GP_RUNTIME_SAMPLE_H
#define GP_RUNTIME_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "gplan/text.h"

typedef struct gp_sampler gp_sampler;

/* gp_sampler_opts and gp_sampler_defaults are public (gplan/text.h). */

/* vocab: the logits row's length. NULL with err set for bad options (temp < 0, top_p outside
 * (0, 1], min_p outside [0, 1], repeat_penalty <= 0, negative counts) or no memory. */
gp_sampler *gp_sampler_new(int64_t vocab, const gp_sampler_opts *o, char *err, size_t err_len);
void gp_sampler_free(gp_sampler *s); /* NULL is a no-op */
/* New options for the same vocabulary without allocating (the PRNG restarts from the seed, the
 * seen ids are forgotten): -1 with err for bad options or a repeat_last_n over the largest the
 * sampler was made with (at least GP_SAMPLER_MIN_HIST). */
#define GP_SAMPLER_MIN_HIST 1024
int gp_sampler_set(gp_sampler *s, const gp_sampler_opts *o, char *err, size_t err_len);

/* 1 when a pick is the argmax of the raw logits (temp 0 and no penalty in effect): a caller may use
 * the argmax it already has. */
int gp_sampler_is_greedy(const gp_sampler *s);

/* Records an id as seen (prompt or generated) for the repetition penalty's window. */
void gp_sampler_accept(gp_sampler *s, int32_t id);
/* Forgets the seen ids and restarts the PRNG from the seed. */
void gp_sampler_reset(gp_sampler *s);

/* Picks an id from logits[vocab] (not modified); does not accept it. NaN logits never win. */
int32_t gp_sampler_sample(gp_sampler *s, const float *logits);

/* What sample draws from, for tests and tools: the candidates left after the filters, most
 * likely first (ties: lower id first), and their probabilities renormalized over them. Returns the
 * count n (>= 1); *ids and *probs point into the sampler, valid until its next call. At temp 0 the
 * one candidate is the argmax (penalized). */
int64_t gp_sampler_candidates(gp_sampler *s, const float *logits, const int32_t **ids,
                              const float **probs);

#endif
