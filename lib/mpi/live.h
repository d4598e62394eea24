/* Live resharding: the schedule nereus-transition computes (tgraph.h),
 * executed by ranks that hold their pieces in memory.
 *
 * Rank r plays GPU r of the cluster (or, with as many ranks as GPUs that
 * hold state in either plan, the r-th of those).  Each rank loads the
 * pieces plan A keeps on its GPU from a store laid out as plan A, checking
 * every piece read against the manifest's checksum; builds the same
 * transition graph as every other rank; walks its steps in order —
 * allocating destination segments, running rounds of moves, freeing
 * source segments — so that its memory follows the schedule; and ends
 * holding the pieces plan B keeps there.  A store laid out as plan B
 * (store_apply's output: the file path) then checks every piece held.
 *
 * The schedule walker is one; only the transport of a round's messages
 * differs: MPI point-to-point between ranks here, NCCL between the GPUs
 * of one process in lib/cuda/live_nccl.cu.  Ranks agree on failure before
 * and after every round, so an error on one rank never leaves the others
 * waiting. */
#ifndef NEREUS_LIVE_H
#define NEREUS_LIVE_H

#include <stddef.h>
#include <stdint.h>

struct env;
struct plan;
struct err;

struct live_stats {
	int ranks;
	int rounds;
	double seconds;            /* the execution phase, the slowest rank's */
	uint64_t bytes_sent;       /* between ranks, all ranks together */
	long pieces_verified;      /* all ranks together */
};

/* MPI_Init; NR_OK, or NR_EIO when MPI does not start. */
int live_init(int *argc, char ***argv, int *rank, int *size);
void live_finalize(void);

/* Reshard from plan a to plan b over MPI_COMM_WORLD; every rank calls it.
 * verify_store may be NULL.  NR_EINPUT when the number of ranks fits
 * neither the cluster nor the GPUs the plans use, or a plan or store does
 * not match the job; NR_EINFEASIBLE as tgraph_build; NR_EIO for a piece
 * whose checksum does not match (naming the tensor and rank) or a failed
 * transfer.  Every rank returns the same code and message, and fills st
 * with the totals of all ranks. */
int live_reshard(const struct env *v, const struct plan *a, const struct plan *b,
		 const char *src_store, const char *verify_store, struct live_stats *st,
		 struct err *e);

/* --- for transports ---------------------------------------------------------- */

/* One message of a round: bytes from rank src to rank dst.  send is set
 * when this process plays src, recv when it plays dst. */
struct live_msg {
	int src, dst;
	const void *send;
	void *recv;
	size_t bytes;
	int tag;                   /* its index among the round's messages */
};

struct live_xport {
	int nranks;
	const int *mine;           /* mine[r]: this process plays rank r */
	/* Deliver every message of a round; NR_OK or NR_EIO. */
	int (*round)(void *ctx, const struct live_msg *m, int n, struct err *e);
	/* Agree on rc over all processes: NR_OK when it is NR_OK everywhere,
	 * else every process takes the code and message of the lowest rank
	 * that failed, into e, and returns the code (NULL: one process). */
	int (*agree)(void *ctx, int rc, struct err *e);
	/* Sum n counters over all processes (NULL: one process). */
	void (*sum)(void *ctx, uint64_t *c, int n);
	/* The most of t over all processes (NULL: one process). */
	double (*max)(void *ctx, double t);
	void *ctx;
};

/* The schedule walker behind live_reshard, over any transport. */
int live_run(const struct env *v, const struct plan *a, const struct plan *b,
	     const char *src_store, const char *verify_store, const struct live_xport *x,
	     struct live_stats *st, struct err *e);

#endif
