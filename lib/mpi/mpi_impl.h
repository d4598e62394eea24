/* What lib/mpi's sources share over MPI itself.  This header includes
 * <mpi.h>: only lib/mpi's own sources include it, never a tool. */
#ifndef NEREUS_MPI_IMPL_H
#define NEREUS_MPI_IMPL_H

#include <mpi.h>

#include "common/err.h"

/* Agree on rc over every rank of comm: NR_OK when it is NR_OK everywhere,
 * else every rank takes the code and message of the lowest rank that
 * failed, into e, and returns the code. */
int mpi_agree_on(MPI_Comm comm, int rc, struct err *e);

/* MPI's words for an error code, into buf. */
const char *mpi_error_text(int code, char *buf, int len);

#endif
