/* The engine's state as the live walker's source and sink (live.h): what
 * a rank holds of a plan, one mstate per layout it is in, and live_move,
 * which carries it from one plan's layouts to another's over the world.
 *
 * The walker holds each piece in the dtype the transition graph moves its
 * kind in (the model's for weights, fp32 for the optimizer's kinds); the
 * engine holds fp32.  Weights are exactly their dtype's values (mstate.h),
 * so narrowing them on the way out and widening them on the way in loses
 * nothing. */
#include "mpi/live.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/lm.h"
#include "mpi/groups.h"
#include "mpi/mpi_impl.h"
#include "state/safetensors.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int live_move(const struct env *v, const struct plan *a, const struct plan *b,
	      const struct rank_state *from, struct rank_state *to, struct exec_stats *st,
	      struct err *e)
{
	struct rank_roles rb;
	struct exec_source src = rank_state_source(from);
	struct exec_sink sink;
	double t0 = now_s(), t;
	int me, size, rc;

	memset(to, 0, sizeof *to);
	memset(st, 0, sizeof *st);
	MPI_Comm_rank(MPI_COMM_WORLD, &me);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	rc = rank_roles_build(v, b, me, size, &rb, e);
	if (!rc) {
		rc = rank_state_init(to, v, &rb, e);
		rank_roles_free(&rb);
	}
	if ((rc = mpi_agree_on(MPI_COMM_WORLD, rc, e))) {
		rank_state_free(to);
		return rc;
	}
	sink = rank_state_sink(to);
	if ((rc = live_walk_world(v, a, b, &src, &sink, st, e))) {
		rank_state_free(to);
		return rc;
	}
	t = now_s() - t0;
	MPI_Allreduce(&t, &st->total_seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	return NR_OK;
}
