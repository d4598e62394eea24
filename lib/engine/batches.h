/* A file's prompts through one model of a store in batches (nereus-run
 * generate and score): the model and the tokenizer, then continuations
 * sampled from each prompt, or the log-probabilities (a score head's
 * values) of each as a sequence.  Each prompt's result goes
 * to a callback in the prompts' order as soon as its batch is done. */
#ifndef NEREUS_ENGINE_BATCHES_H
#define NEREUS_ENGINE_BATCHES_H

#include <stddef.h>

#include "common/err.h"
#include "engine/generate.h"
#include "engine/lm.h"
#include "engine/stops.h"
#include "engine/task.h"
#include "state/store.h"

#define BATCHES_PROMPTS 64 /* prompts run together */

/* The model of store r to run, its index: the one called name, or with
 * name NULL the only one or the actor (the model nereus-run init made
 * first); NR_EINPUT naming the store when there is no such model. */
int batches_model(struct store_reader *r, const char *name, const char *store, int *index,
		  struct err *e);
/* The tokenizer of the text for r's models: file (a tokenizer.json), or
 * the byte vocabulary when r says its models speak it; *have false (and
 * tok and stops untouched) when neither.  Its stop tokens: its eos and
 * those the configuration of file's checkpoint folder names. */
int batches_tokenizer(struct store_reader *r, const char *file, struct tokenizer *tok,
		      struct stops *stops, bool *have, struct err *e);

/* Prompt i's generated tokens and their log-probs, len of each. */
typedef int (*batches_generated)(void *arg, size_t i, const int *tokens, const float *logprobs,
				 int len, struct err *e);
/* Prompt i's n log-probs (of each token after the first) or values (of
 * each token), all finite. */
typedef int (*batches_scored)(void *arg, size_t i, const float *v, int n, struct err *e);

/* Continue every prompt of ps as p says (p->max_new tokens at most), a
 * sequence also stopping at ctx tokens, the model's positions; prompt i
 * is sequence i of the sampler's draws, whatever its batch.  NR_EIO for
 * logits that are not finite names the prompt's line. */
int batches_generate(struct lm *m, const struct prompts *ps, const struct gen_params *p,
		     long ctx, batches_generated done, void *arg, struct err *e);
/* Score every prompt of ps: the log-prob of each token given those before
 * it, or with a score head its value at each token.  NR_EIO names the
 * line and the token of a value that is not finite. */
int batches_score(struct lm *m, const struct prompts *ps, batches_scored done, void *arg,
		  struct err *e);

#endif
