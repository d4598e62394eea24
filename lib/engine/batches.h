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

/* The model of a store (manifest m, the store store) to run: the one
 * called name, or with name NULL the only one or the actor (the model
 * nereus-run init made first); its index in *index, its name and
 * architecture in *md.  To generate (score false) it must be a language
 * model: one with a score head scores.  NR_EINPUT naming the store or the
 * model. */
int batches_model(const struct manifest *m, const char *name, const char *store, bool score,
		  int *index, struct model *md, struct err *e);
/* The positions a sequence of md may take: its max_pos, or 2^20 when it
 * gives none. */
long batches_positions(const struct model *md);
/* What a prompt for md may be: ids in its vocabulary, and as long as its
 * positions allow, less the one a continuation needs when not scoring. */
struct prompt_limits batches_limits(const struct model *md, bool score);
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

/* The text of a continuation of len tokens: up to its first stop token
 * (s), decoded, a character it cuts in two shown as U+FFFD; a new *text of
 * *n bytes (the caller frees it).  NR_EIO when memory runs out. */
int batches_text(const struct tokenizer *tok, const struct stops *s, const int *tokens,
		 int len, char **text, size_t *n, struct err *e);

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
