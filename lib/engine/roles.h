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
 * groups.  The mapping (rank_roles_build) is pure.  struct groups gives
 * each group a struct comm (engine/comm.h): over MPI (mpi/groups.h:
 * mpi_groups_build splits the world communicator), or, for one process
 * playing the one GPU a plan uses, the group of one (groups_self).
 *
 * And what a rank holds of a plan: for each layout it is in, that
 * rank's state as the engine keeps it (struct rank_state). */
#ifndef NEREUS_ENGINE_ROLES_H
#define NEREUS_ENGINE_ROLES_H

#include <stdbool.h>

#include "common/err.h"
#include "engine/comm.h"
#include "engine/lm.h"
#include "plan/plan.h"
#include "state/exec.h"
#include "state/store.h"

enum group_kind { GROUP_POOL, GROUP_TP, GROUP_PP, GROUP_DP, GROUP_EMBED, NGROUPS };
extern const char *const roles_group_kind_names[NGROUPS + 1]; /* "pool", "tp", ... */

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

/* Whether world rank w is in a pool of one of the job's models (the
 * generation engines' pool aside). */
bool roles_holds_model(const struct rank_roles *rr, int w);

/* World rank world_rank's roles in plan p, of world_size ranks.  NR_EINPUT
 * when a model or the generation engines are in no pool, when a pool's
 * size is not its layout's tp·pp·dp, or when p puts a pool on a GPU that
 * no rank plays (a plan for more ranks than run), naming it; the message
 * is the same on every rank. */
int rank_roles_build(const struct env *v, const struct plan *p, int world_rank, int world_size,
		     struct rank_roles *rr, struct err *e);
void rank_roles_free(struct rank_roles *rr);
/* The world and every group of a plan as struct comm: comm[i][k] is group
 * k of rr.r[i]; for a group the rank is not in, a struct comm of size 0
 * whose calls fail naming it. */
struct groups {
	struct rank_roles rr;
	struct comm world;         /* every rank, by world rank */
	/* the ranks that hold a model (roles_holds_model), by world rank:
	 * where a step's stages meet while generation engines on a pool of
	 * their own generate the next step's rollouts (trainer.h); size 0 on
	 * a rank that holds none */
	struct comm trainers;
	struct comm comm[MAX_ITEMS][NGROUPS];
};

/* One process playing the one GPU plan p uses: every group it is in is
 * the group of one.  NR_EINPUT as rank_roles_build for a plan of more
 * GPUs. */
int groups_self(struct groups *g, const struct env *v, const struct plan *p, struct err *e);
void groups_self_free(struct groups *g);

/* --- what a rank holds ------------------------------------------------------------ */

/* What one rank holds of a plan: for each layout it is in, that rank's
 * state as the engine keeps it.  Indexed as state/emu.h's emu_set and
 * groups.h's rank_roles: the job's models, then the generation engines
 * (the actor's weights, TP × DP). */
struct rank_state {
	int n;                     /* job models + 1 */
	bool held[MAX_ITEMS];      /* the rank keeps the layout's state */
	/* The generation layout, when it is the actor's home layout
	 * (plan_gen_aliases, as the planner prices it), is the actor's
	 * weights, not a copy of them (verl's hybrid engine): alias[gen] is
	 * the actor's index and held[gen] false.  -1 elsewhere. */
	int alias[MAX_ITEMS];
	struct mstate st[MAX_ITEMS];
};

/* Zeroed buffers for every layout of a plan that rr (groups.h: the
 * plan's roles of this rank) is in, at its coordinates: weights, and for a trainable model's
 * home layout master, Adam m and v (split across DP with zero 1, 2 or 3)
 * and gradients, with FSDP (zero 3) the weights split across DP too;
 * none for a generation layout that is the actor's (alias). */
int rank_state_init(struct rank_state *s, const struct env *v, const struct rank_roles *rr,
		    struct err *e);
void rank_state_free(struct rank_state *s);

/* Fill every held layout from the store r (each model by its name;
 * mstate_load: any layout, every kind, fp32). */
int rank_state_load(struct rank_state *s, struct store_reader *r, const char *store,
		    struct err *e);

/* The engine's state as a source (s: plan A's) or as a sink (s: plan B's,
 * made by rank_state_init). */
struct exec_source rank_state_source(const struct rank_state *s);
struct exec_sink rank_state_sink(struct rank_state *s);

#endif
