/* Live resharding over MPI: the transition executor (state/exec.h) with
 * ranks as its processes, moving a store's pieces (nereus-transition
 * live) or the engine's state between plans (nereus-run's live switch). */
#ifndef NEREUS_LIVE_H
#define NEREUS_LIVE_H

#include "engine/roles.h"
#include "plan/plan.h"
#include "state/exec.h"

/* Reshard from plan a to plan b over MPI_COMM_WORLD; every rank calls it.
 * Rank r plays GPU r of the cluster (or, with as many ranks as GPUs that
 * hold state in either plan, the r-th of those), loading the pieces plan
 * A keeps there from src_store.  verify_store may be NULL.  NR_EINPUT
 * when the number of ranks fits neither the cluster nor the GPUs the
 * plans use, or a plan or store does not match the job; NR_EINFEASIBLE as
 * tgraph_build; NR_EIO for a piece whose checksum does not match (naming
 * the tensor and rank) or a failed transfer.  Every rank returns the same
 * code and message, and fills st with the totals of all ranks. */
int live_reshard(const struct env *v, const struct plan *a, const struct plan *b,
		 const char *src_store, const char *verify_store, struct exec_stats *st,
		 struct err *e);

/* --- the engine's state, moved in memory (live_mem.c) -------------------------- */

/* Collective over MPI_COMM_WORLD, world rank r playing GPU r of the
 * cluster: move every layout's state from plan a's layouts to plan b's,
 * by the transition graph's schedule, in memory.  from is this rank's
 * state of a (rank_state_init for a, filled), left as it is; to is made
 * here for b and filled (on failure it is left empty).  The state of a
 * GPU that is down in v's cluster is lost: hand it over (switch with the
 * GPU still up) before marking it down.  A kind moves in the dtype the
 * graph gives it (the model's for weights, so a tensor the engine keeps
 * in fp32 beside bf16 weights is refused, naming it).  st: the measured
 * times (the slowest rank's), the graph's prediction and the totals of
 * all ranks.  Every rank returns the same code and message. */
int live_move(const struct env *v, const struct plan *a, const struct plan *b,
	      const struct rank_state *from, struct rank_state *to, struct exec_stats *st,
	      struct err *e);

/* exec_walk over MPI_COMM_WORLD, world rank r playing GPU r (GPUs no rank
 * plays must hold nothing): live_move's transport, for other sources and
 * sinks.  Collective. */
int live_walk_world(const struct env *v, const struct plan *a, const struct plan *b,
		    const struct exec_source *src, const struct exec_sink *sink,
		    struct exec_stats *st, struct err *e);
/* live_walk_world of the state sel selects only (exec_walk_select). */
int live_walk_world_select(const struct env *v, const struct plan *a, const struct plan *b,
			   const struct tg_select *sel, const struct exec_source *src,
			   const struct exec_sink *sink, struct exec_stats *st, struct err *e);

#endif
