/* The process groups of a plan, for ranks that play its GPUs.
 *
 * World rank r plays GPU r of the cluster document (nodes are hosts, GPUs
 * per node ranks per host).  Each layout of a plan is an EMU (state/emu.h):
 * every model's home layout, and the actor's generation layout (TP × DP,
 * pp 1).  Its ranks are the GPUs of its pool in increasing order, TP
 * fastest, then DP, then PP (pconf.h), so layout rank r is
 * (tp_rank, dp_rank, pp_rank) = (r % tp, r / tp % dp, r / (tp dp)).  A
 * rank of a layout is in five of its groups, each listed in group rank
 * order:
 *
 *   pool   every rank of the layout, in layout order
 *   tp     the ranks of its (pp, dp), by tp_rank: Megatron's all-reduces
 *   pp     the ranks of its (tp, dp), by stage: activations and gradients
 *   dp     the ranks of its (tp, pp), by dp_rank: gradients, ZeRO blocks
 *   embed  the first and the last stage of its pp group (one rank when
 *          pp is 1), where tied embeddings' gradients are summed; ranks
 *          of middle stages are in none
 *
 * A rank in no pool of a layout holds nothing of it and is in none of its
 * groups.  The mapping (rank_roles_build) is pure.  mpi_groups_build splits
 * the world communicator into one communicator per group and wraps each
 * in the engine's struct comm (engine/comm.h), rebuilt for a new plan.
 *
 * Floating-point sums.  MPI lets an implementation reduce in any order:
 * it takes every predefined operation as associative and commutative, and
 * only recommends (MPI-4.0, 6.9.1) that the same arguments in the same
 * order give the same result.  Open MPI picks recursive doubling, a ring
 * or a segmented tree by message and group size, and each sums an
 * element's contributions in its own order (a ring starts chunk k at
 * another rank than chunk k + 1), so MPI_Allreduce with MPI_SUM on floats
 * can give other bits for the same contributions in a group of another
 * size, for a longer message, or under another version.  The groups here
 * never use it for floats: each rank takes one chunk of the buffer from
 * every member (MPI_Alltoallv), sums each element's contributions in
 * group rank order, rank 0 first, in double, rounds once to float, and
 * the chunks go back to every member (MPI_Allgatherv).  Every member gets
 * the same bits, run after run, whatever MPI's algorithms, at a ring's
 * cost (each rank sends and receives 2(n-1)/n of the buffer).  A max is
 * exact in any order; it is taken the same way, so that a NaN anywhere
 * gives NaN everywhere.
 *
 * This header does not include <mpi.h>: the tools are compiled with the
 * plain C compiler and only linked with mpicc. */
#ifndef NEREUS_GROUPS_H
#define NEREUS_GROUPS_H

#include <stdbool.h>

#include "common/err.h"
#include "engine/comm.h"
#include "plan/plan.h"

enum group_kind { GROUP_POOL, GROUP_TP, GROUP_PP, GROUP_DP, GROUP_EMBED, NGROUPS };
extern const char *const group_kind_names[NGROUPS + 1]; /* "pool", "tp", ... */

/* A rank's part in one layout of a plan. */
struct rank_role {
	int item;                  /* the plan item: ITEM_GEN or 1 + model */
	int model;                 /* whose state: the job's model (the actor for ITEM_GEN) */
	struct pconf conf;         /* tp, pp, dp, zero (pp 1 for the generation layout) */
	int pool;                  /* the plan's pool */
	int nranks;                /* tp·pp·dp */
	int *world;                /* [nranks]: layout rank → world rank */
	bool member;               /* this rank is in the pool */
	int rank;                  /* its layout rank; -1 when not a member */
	int tp_rank, pp_rank, dp_rank; /* -1 when not a member */
	int nmembers[NGROUPS];     /* 0: not in that group */
	int *members[NGROUPS];     /* world ranks, in group rank order */
	int group_rank[NGROUPS];   /* its rank in each group, -1 when not in it */
};

/* A rank's parts in every layout of a plan: the job's models, then the
 * generation layout (the order of state/emu.h's emu_set). */
struct rank_roles {
	int world_rank, world_size;
	int n;                     /* job models + 1 */
	struct rank_role r[MAX_ITEMS];
};

/* Layout rank r's coordinates under c (pconf.h's order), and back. */
void rank_coords(const struct pconf *c, int r, int *tp_rank, int *pp_rank, int *dp_rank);
int rank_of_coords(const struct pconf *c, int tp_rank, int pp_rank, int dp_rank);

/* Index into rank_roles.r of plan item `item`. */
int rank_roles_index(const struct rank_roles *rr, int item);

/* World rank world_rank's roles in plan p, of world_size ranks.  NR_EINPUT
 * when a model or the generation engines are in no pool, when a pool's
 * size is not its layout's tp·pp·dp, or when p puts a pool on a GPU that
 * no rank plays (a plan for more ranks than run), naming it; the message
 * is the same on every rank. */
int rank_roles_build(const struct env *v, const struct plan *p, int world_rank, int world_size,
		     struct rank_roles *rr, struct err *e);
void rank_roles_free(struct rank_roles *rr);

/* --- over MPI (groups_mpi.c) ------------------------------------------------- */

/* The world and every group of a plan as communicators.  comm[i][k] is
 * group k of rr.r[i]; for a group the rank is not in, a struct comm of
 * size 0 whose calls fail naming it. */
struct mpi_groups {
	struct rank_roles rr;
	struct comm world;         /* every rank, by world rank */
	struct comm comm[MAX_ITEMS][NGROUPS];
};

/* MPI is started and stopped by live_init and live_finalize (live.h).
 *
 * Collective over the world: the groups of plan p, split from the world
 * communicator.  Every rank returns the same code and message. */
int mpi_groups_build(struct mpi_groups *g, const struct env *v, const struct plan *p,
		     struct err *e);
/* Collective: the groups of plan p in place of g's, whose communicators
 * are freed once the new ones stand; on failure g is left as it was. */
int mpi_groups_rebuild(struct mpi_groups *g, const struct env *v, const struct plan *p,
		       struct err *e);
/* Collective: free every communicator.  A message sent in a group and not
 * yet received is waited for. */
void mpi_groups_free(struct mpi_groups *g);

#endif
