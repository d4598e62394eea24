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
 * With FSDP (zero 3) the weights are split across DP too, in the blocks
 * the master's are (layout.h), and the weights buffer holds the rank's
 * block alone, laid out as the master: that is what the rank keeps, saves
 * and moves.  The model computes with the weights whole across DP (full),
 * which the trainer gathers from every DP rank's block for a model-stage
 * and drops at its end; the gradients have full's offsets.  Without FSDP
 * full is the weights buffer itself.
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
#include "doc/pconf.h"
#include "state/layout.h"
#include "state/store.h"

struct mstate {
	char name[NAME_MAX_LEN];  /* the job's model */
	int index;                /* in the job */
	struct layout lo;
	int tp_rank, pp_rank, dp_rank;
	bool trainable;           /* keeps gradients, master, m and v */
	bool zero;                /* the optimizer's kinds are split across DP */
	bool fsdp;                /* the weights are split across DP too (zero 3) */
	float *buf[NKINDS];       /* NULL for a kind it does not keep */
	size_t len[NKINDS];       /* floats of each */
	float *full;              /* the weights whole across DP [full_len]: buf[KIND_WEIGHT]
				   * without FSDP; with it, gathered (NULL between stages) */
	size_t full_len;
	float *grad;              /* [full_len] when trainable */
	unsigned char *wdtype;    /* per global tensor, its weights' enum st_dtype */
};

/* Buffers for rank (tp_rank, pp_rank, dp_rank) of model m (the job's
 * index-th) laid out tp·pp·dp, zeroed: zero 1 and 2 split a trainable
 * model's optimizer kinds across DP, zero 3 its weights too (any model's). */
int mstate_init(struct mstate *s, const struct model *m, int index, int tp, int pp, int dp,
		enum zero_stage zero, bool trainable, int tp_rank, int pp_rank, int dp_rank,
		struct err *e);
void mstate_free(struct mstate *s);

/* Bytes the state holds: every buffer, the gradients and FSDP's gathered
 * weights included. */
int64_t mstate_bytes(const struct mstate *s);

/* The pieces of the weights buffer (the master's with FSDP); *out is
 * malloc'd. */
int mstate_weight_pieces(const struct mstate *s, struct piece **out, size_t *n, struct err *e);

/* FSDP: full allocated and holding the rank's block of the weights, zeros
 * elsewhere, so that the sum of every DP rank's is the weights whole (the
 * caller sums it over DP). */
int mstate_full_begin(struct mstate *s, struct err *e);
/* FSDP: full dropped.  Without FSDP, nothing. */
void mstate_full_end(struct mstate *s);

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
 * (the caller gathers the rest; with FSDP the weights are that block). */
void mstate_weights_from_master(struct mstate *s);

/* Whether every element of the weights (and the master, when trainable)
 * is finite: a NaN never reaches a saved store. */
bool mstate_finite(const struct mstate *s);

/* The store_state (store.h) that saves s alone: its buffers for its rank,
 * the other ranks' being the caller's to provide. */
const float *mstate_buffer(void *ctx, enum state_kind kind, int tp, int pp, int dp);

#endif
