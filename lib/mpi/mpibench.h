/* Measuring MPI between the ranks of one job: send/recv, all-reduce and
 * all-gather bandwidth across message sizes, and what communicators cost
 * to create and to split (what a switch of plans pays for its groups).
 *
 * Bus bandwidth is computed as NCCL's nccl-tests do, so figures compare
 * across collectives and rank counts: algbw = S / t, with S the message
 * size (for all-gather, the total gathered size), and
 *   all-reduce  busbw = algbw * 2(n-1)/n
 *   all-gather  busbw = algbw * (n-1)/n
 *   send/recv   busbw = algbw (ping-pong between ranks 0 and 1, t one way).
 * Each timed run of a collective is the slowest rank's time; results are
 * gathered to rank 0.  MPI is started and stopped by start.h.
 *
 * This header does not include <mpi.h>: the tools that use it are compiled
 * with the plain C compiler and only linked with mpicc. */
#ifndef NEREUS_MPIBENCH_H
#define NEREUS_MPIBENCH_H

#include "common/err.h"
#include "profile/hwdoc.h"

/* Collective: the largest status of all ranks, returned on every rank (so
 * that a check made on one rank stops them all). */
int mpib_agree(int status);

/* Collective over MPI_COMM_WORLD (at least 2 ranks): runs the benchmarks;
 * *r is filled on rank 0 only.  Every rank returns the same status. */
int mpib_run(const struct hw_opts *o, struct hw_mpi *r, struct err *e);

/* Rank 0 does more work alone (CPU and GPU figures, writing the document)
 * while the other ranks wait in mpib_hold without spinning a core.  Rank 0
 * then calls mpib_release with its exit status, which mpib_hold returns on
 * every rank, so all ranks exit alike. */
int mpib_hold(void);
void mpib_release(int status);

#endif
