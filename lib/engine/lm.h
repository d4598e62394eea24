/* A model of the job on this process, ready to run: its state
 * (mstate.h), the decoder bound to it (model.h) and its activations, and
 * the forward passes the commands and the trainer share.  Under TP1·PP1
 * one struct lm is the whole model. */
#ifndef NEREUS_ENGINE_LM_H
#define NEREUS_ENGINE_LM_H

#include "engine/model.h"
#include "engine/mstate.h"

struct lm {
	struct mstate st;
	struct decoder dec;
	struct model_acts acts;   /* grown by lm_acts as batches need */
	bool has_acts;
};

/* Model md (the job's index-th; its draws at random are that index's) as
 * one rank (TP1·PP1·DP1): from model store_model of r (whose
 * architecture, RoPE and epsilon included, it takes), or (r NULL) at
 * random from seed.  A trainable model keeps gradients and the
 * optimizer's state. */
int lm_open(struct lm *m, const struct model *md, int index, bool trainable,
	    struct store_reader *r, int store_model, uint64_t seed, struct err *e);
void lm_close(struct lm *m);

/* Activations for batches of up to max_tokens tokens and sequences of up
 * to max_len (training: kept for a backward); reallocated only when
 * larger or of the other kind. */
int lm_acts(struct lm *m, int max_tokens, int max_len, bool training, struct err *e);

/* A trainable model's gradients, zeroed and bound to the decoder; kept
 * when it holds them already. */
int lm_grads(struct lm *m, struct err *e);

/* Drop what one model-stage of m used beyond its state, as a GPU
 * framework's stages give their memory back to the next: the
 * activations, and a trainable model's gradients (unbound). */
void lm_release(struct lm *m);

/* Bytes the model holds now: its state (with gradients while it has
 * them) and its activations. */
int64_t lm_bytes(const struct lm *m);

/* The store model called name in r, or NR_EINPUT naming the store's
 * models; the architecture must be the job model's in every field
 * (arch_compare_all): a job that trains a store computes as the store's
 * own architecture says, or not at all. */
int lm_find(struct store_reader *r, const struct model *m, const char *store, int *index,
	    struct err *e);

#endif
