/* ElasticModelUnits: the distributed state of a plan, as the pieces each
 * GPU holds.
 *
 * A plan has one EMU per model, in its home layout (where its inference
 * and training stages run), and one for the actor's generation engines.
 * Rank r of an EMU is the r-th GPU of its pool in increasing GPU order,
 * ranks ordered TP fastest, then DP, then PP (pconf.h), as plan_move
 * counts them.  Trainable models hold their weights, fp32 master weights
 * and Adam m and v, the last three split across DP when the plan shards
 * the optimizer (pconf.zero, ZeRO-1 on); frozen models hold weights only;
 * with ZeRO-3 (FSDP) weights and optimizer state alike are split across DP, in
 * the layout's DP blocks.  The engines hold the actor's weights only, in
 * its dtype (as vLLM runs a model in the dtype it was given), TP by DP
 * with no pipeline.
 *
 * DP ranks of a kind that is not split hold the same pieces, so an EMU
 * keeps each distinct piece list once (struct emu_list) with the GPUs
 * that hold it: 1024 GPUs of an 8B model are a few thousand lists, not a
 * few million pieces.  Over an EMU's ranks the pieces that are not copies
 * tile every global tensor of every kind it holds exactly once. */
#ifndef NEREUS_EMU_H
#define NEREUS_EMU_H

#include <stdbool.h>
#include <stdint.h>

#include "plan/plan.h"
#include "state/layout.h"

/* The pieces of one kind that a set of ranks hold alike. */
struct emu_list {
	enum state_kind kind;
	int tp, pp;
	int dp;                  /* its DP rank, or -1: every DP rank's (copies beyond DP rank 0) */
	struct piece *pieces;    /* as layout_pieces gives them for DP rank max(dp, 0) */
	size_t npieces;
	bool shared;             /* pieces are an earlier kind's, split across DP alike */
	int64_t bytes;           /* the buffer: local_len × element bytes, summed */
	int ngpus;
	int *gpus;               /* the GPUs holding it, increasing */
	int *dps;                /* the DP rank of each */
};

struct emu {
	int item;                /* the plan item: ITEM_GEN or 1 + model */
	int model;               /* whose state: the job's model (the actor for ITEM_GEN) */
	bool host;               /* offloaded: held in host memory between stages */
	struct pconf conf;       /* tp, pp, dp, zero (pp 1 for the engines) */
	struct layout lo;        /* its layout (dist_opt: some kind is split across DP) */
	int elem_bytes[NKINDS];  /* bytes per element of each kind held, 0 if not held */
	int nranks;
	int *rank_gpu;           /* rank → GPU */
	int *rank_list[NKINDS];  /* rank → index into lists; NULL for kinds not held */
	int nlists;
	struct emu_list *lists;
};

struct emu_set {
	int n;                   /* job models + 1: models first, the engines last */
	struct emu u[MAX_ITEMS];
};

/* The EMUs of plan p.  NR_EINPUT when a model or the engines are in no
 * pool, when tp·pp·dp is not their pool's size, or when the layout does
 * not fit the architecture (a TP that does not divide a dimension, a PP
 * that does not divide the layers), naming the model. */
int emu_build(const struct env *v, const struct plan *p, struct emu_set *s, struct err *e);
void emu_free(struct emu_set *s);

/* Rank r's TP, PP and DP coordinates. */
void emu_rank_coords(const struct emu *u, int r, int *tp, int *pp, int *dp);
/* Whether a piece of list l is a copy when held by DP rank dp_rank. */
bool emu_piece_copy(const struct emu_list *l, const struct piece *pc, int dp_rank);
/* Bytes of every kind an EMU keeps on rank r. */
int64_t emu_rank_bytes(const struct emu *u, int r);

#endif
