/* Starting and stopping MPI, for every tool that carries ranks: whether a
 * launcher started this process, and MPI_Init and MPI_Finalize, each done
 * once however often asked.  This header does not include <mpi.h>: the
 * tools that use it are compiled with the plain C compiler and only linked
 * with mpicc. */
#ifndef NEREUS_MPI_START_H
#define NEREUS_MPI_START_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "doc/cluster.h"

/* Whether this process was started by an MPI launcher (mpirun, srun):
 * the launchers' environment variables are set. */
bool mpi_launched(void);

/* MPI_Init, unless MPI is up already; *rank and *size of MPI_COMM_WORLD.
 * NR_EIO when MPI does not start. */
int mpi_begin(int *argc, char ***argv, int *rank, int *size, struct err *e);

/* Whether the ranks sit where cluster c puts them: world rank r plays GPU r,
 * of node r / gpus_per_node, and a node is a host, so ranks of one node share
 * a host name (MPI_Get_processor_name) and ranks of different nodes do not.
 * Ranks past c's GPUs play none and are not checked.  Collective over
 * MPI_COMM_WORLD; NR_EINPUT naming the first rank out of place, its host
 * and its node, the same message on every rank. */
int mpi_check_hosts(const struct cluster *c, struct err *e);
/* mpi_check_hosts's rule over the host names of ranks 0..n-1, names[r]
 * stride bytes apart, nodes of gpn ranks: NR_EINPUT for the first rank on
 * another host than its node's first rank, or on the host of an earlier
 * node's first rank. */
int mpi_hosts_agree(const char *names, size_t stride, int n, int gpn, struct err *e);

/* MPI_Finalize, unless MPI is down already. */
void mpi_end(void);

#endif
