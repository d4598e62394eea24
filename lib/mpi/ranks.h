/* The built-in engine's ranks over MPI (engine/builtin.h's struct
 * builtin_ranks): world rank r plays GPU r of the cluster, the groups are
 * mpi_groups_build's, a switch is live_move. */
#ifndef NEREUS_MPI_RANKS_H
#define NEREUS_MPI_RANKS_H

#include "engine/builtin.h"

/* world: mpi_world's, which the caller keeps while the run lasts. */
struct builtin_ranks mpi_builtin_ranks(const struct comm *world);

#endif
