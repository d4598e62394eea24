/* The built-in engine's ranks over MPI (engine/builtin.h's struct
 * builtin_ranks): world rank r plays GPU r of the cluster, the groups are
 * mpi_groups_build's, a switch is live_move. */
#ifndef NEREUS_MPI_RANKS_H
#define NEREUS_MPI_RANKS_H

#include "engine/builtin.h"

/* world: mpi_world's, which the caller keeps while the run lasts. */
struct builtin_ranks mpi_builtin_ranks(const struct comm *world);

/* MPI for a run over ranks: MPI started, the ranks found on the hosts
 * cluster c says (mpi_check_hosts), the world (kept by the caller while the
 * run lasts), this process's rank in it, and the engine's ranks over it. */
int mpi_start_ranks(const struct cluster *c, struct comm *world, struct builtin_ranks *ranks,
		    int *rank, struct err *e);

#endif
