/* One model's state on one rank: the buffers of every state kind it keeps,
 * as the pieces of its layout (layout.h), in fp32.
 *
 * The weights buffer is what the model computes with (model_bind points
 * its tensors into it); for a model of a narrower dtype its values are
 * exactly that dtype's (each tensor's own dtype, as the store keeps it),
 * so saving them loses nothing.  A trainable model also keeps a gradient
 * buffer with the weights' offsets, and master weights and Adam's moments
 * as its optimizer's kinds (split across DP with a distributed
 * optimizer); after each optimizer step the weights are the master
 * rounded to their dtype.
 *
 * Random initialisation draws every element from the counter-based
 * generator by its global index, so a model comes out the same whatever
 * layout it is made in. */
#ifndef NEREUS_ENGINE_MSTATE_H
#define NEREUS_ENGINE_MSTATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "doc/job.h"
#include "state/layout.h"
#include "state/store.h"

struct mstate {
	char name[NAME_MAX_LEN];  /* the job's model */
	int index;                /* in the job */
	struct layout lo;
	int tp_rank, pp_rank, dp_rank;
	bool trainable;           /* keeps gradients, master, m and v */
	bool zero;                /* the optimizer's kinds are split across DP */
	float *buf[NKINDS];       /* NULL for a kind it does not keep */
	size_t len[NKINDS];       /* floats of each */
	float *grad;              /* [len[KIND_WEIGHT]] when trainable */
	unsigned char *wdtype;    /* per global tensor, its weights' enum st_dtype */
};

/* Buffers for rank (tp_rank, pp_rank, dp_rank) of model m (the job's
 * index-th) laid out tp·pp·dp (zero: a distributed optimizer), zeroed. */
int mstate_init(struct mstate *s, const struct model *m, int index, int tp, int pp, int dp,
		bool zero, bool trainable, int tp_rank, int pp_rank, int dp_rank,
		struct err *e);
void mstate_free(struct mstate *s);

/* Bytes the state holds: every buffer, the gradients included. */
int64_t mstate_bytes(const struct mstate *s);

/* A random model: weights N(0, 0.02²), the residual branches' output
 * projections (linear_proj, linear_fc2) N(0, (0.02/√(2L))²) as Megatron-LM
 * scales them, norms 1, biases 0; element i of tensor t of model index
 * from rng_normal(seed, RNG_INIT, index, t, i).  Master = weights, m = v =
 * 0. */
void mstate_random(struct mstate *s, uint64_t seed);

/* Load the state from model store_model of r: the weights, and for a
 * trainable model the master and moments (or, when the store has none,
 * master = weights and m = v = 0, as Adam starts).  Takes each tensor's
 * dtype from the store. */
int mstate_load(struct mstate *s, struct store_reader *r, int store_model, struct err *e);

/* The weights from the master after an optimizer step: each element
 * rounded to its tensor's dtype.  Without a distributed optimizer the
 * master holds what the weights do; with one, the rank's DP block only
 * (the caller gathers the rest). */
void mstate_weights_from_master(struct mstate *s);

/* Whether every element of the weights (and the master, when trainable)
 * is finite: a NaN never reaches a saved store. */
bool mstate_finite(const struct mstate *s);

/* The store_state (store.h) that saves s alone: its buffers for its rank,
 * the other ranks' being the caller's to provide. */
const float *mstate_buffer(void *ctx, enum state_kind kind, int tp, int pp, int dp);

#endif
