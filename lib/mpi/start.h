/* Starting and stopping MPI, for every tool that carries ranks: whether a
 * launcher started this process, and MPI_Init and MPI_Finalize, each done
 * once however often asked.  This header does not include <mpi.h>: the
 * tools that use it are compiled with the plain C compiler and only linked
 * with mpicc. */
#ifndef NEREUS_MPI_START_H
#define NEREUS_MPI_START_H

#include <stdbool.h>

#include "common/err.h"

/* Whether this process was started by an MPI launcher (mpirun, srun):
 * the launchers' environment variables are set. */
bool mpi_launched(void);

/* MPI_Init, unless MPI is up already; *rank and *size of MPI_COMM_WORLD.
 * NR_EIO when MPI does not start. */
int mpi_begin(int *argc, char ***argv, int *rank, int *size, struct err *e);

/* MPI_Finalize, unless MPI is down already. */
void mpi_end(void);

#endif
