/* The built-in engine's ranks over MPI (ranks.h). */
#include "mpi/ranks.h"

#include "mpi/groups.h"
#include "mpi/live.h"
#include "mpi/start.h"

static int ranks_groups(const struct env *v, const struct plan *p, struct groups *g,
			struct err *e)
{
	return mpi_groups_build(g, v, p, e);
}

static int ranks_move(const struct env *v, const struct plan *a, const struct plan *b,
		      const struct rank_state *from, struct rank_state *to, struct err *e)
{
	struct exec_stats st;

	return live_move(v, a, b, from, to, &st, e);
}

static int ranks_gen_move(const struct env *v, const struct plan *p, struct rank_state *s,
			  struct exec_stats *st, struct err *e)
{
	struct tg_select sel = tg_select_gen_weights(v->job);
	struct exec_source src = rank_state_source(s);
	struct exec_sink sink = rank_state_sink(s);

	return live_walk_world_select(v, p, p, &sel, &src, &sink, st, e);
}

struct builtin_ranks mpi_builtin_ranks(const struct comm *world)
{
	return (struct builtin_ranks){ world, ranks_groups, mpi_groups_free, ranks_move,
				       ranks_gen_move };
}

int mpi_start_ranks(const struct cluster *c, struct comm *world, struct builtin_ranks *ranks,
		    int *rank, struct err *e)
{
	int argc = 0, size, rc;
	char **argv = NULL;

	if (mpi_begin(&argc, &argv, rank, &size, e))
		return err_set(e, NR_EIO, "started by mpirun, but MPI does not start");
	if ((rc = mpi_check_hosts(c, e))) {
		mpi_end();
		return rc;
	}
	if ((rc = mpi_world(world, e)))
		return rc;
	*ranks = mpi_builtin_ranks(world);
	return NR_OK;
}
