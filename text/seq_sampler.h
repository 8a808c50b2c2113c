/* Samplers made off a sequence's stepping thread: a server builds a request's sampler (which
 * allocates) where it parses the request, and its engine thread swaps it into the sequence it
 * admits the request to, allocating nothing (gp_seq_set_sampler allocates and frees). Internal to
 * the repository (server/engine.c); not part of gplan/text.h. */
#ifndef GP_TEXT_SEQ_SAMPLER_H
#define GP_TEXT_SEQ_SAMPLER_H

#include "gplan/text.h"
#include "runtime/sample.h"

/* The logits a sampler of lm's sequences sees (gp_sampler_new's vocab): the tokenizer's ids, else
 * the vocabulary. */
int64_t gp_seq_sampler_vocab(const gp_lm *lm);
/* Puts n (made with gp_sampler_new(gp_seq_sampler_vocab(lm), so, ...)) in s with its options so,
 * and returns the sampler it replaces, which the caller frees. The PRNG restarts at the next
 * start, as after gp_seq_set_sampler. */
gp_sampler *gp_seq_swap_sampler(gp_seq *s, gp_sampler *n, const gp_sampler_opts *so);

#endif
