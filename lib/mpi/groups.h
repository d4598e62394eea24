/* The process groups of a plan over MPI (engine/roles.h says what the
 * groups are): each group's communicator split from the world
 * communicator and wrapped in the engine's struct comm.
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

#include "engine/roles.h"

/* MPI is started and stopped by mpi_begin and mpi_end (start.h).
 *
 * Collective over the world: the groups of plan p, split from the world
 * communicator.  Every rank returns the same code and message. */
int mpi_groups_build(struct groups *g, const struct env *v, const struct plan *p,
		     struct err *e);
/* Collective: the groups of plan p in place of g's, whose communicators
 * are freed once the new ones stand; on failure g is left as it was. */
int mpi_groups_rebuild(struct groups *g, const struct env *v, const struct plan *p,
		       struct err *e);
/* Collective: free every communicator.  A message sent in a group and not
 * yet received is waited for. */
void mpi_groups_free(struct groups *g);

/* Collective: every rank of the world as one struct comm, by world rank,
 * for what is agreed before a plan's groups stand. */
int mpi_world(struct comm *c, struct err *e);
void mpi_world_free(struct comm *c);

#endif
