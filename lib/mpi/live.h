/* Live resharding: the schedule nereus-transition computes (tgraph.h),
 * executed by ranks that hold their pieces in memory.
 *
 * Every rank builds the same transition graph; fills the pieces plan A
 * keeps on the GPUs it plays from a source; walks the graph's steps in
 * order — allocating destination segments, running rounds of moves,
 * freeing source segments — so that its memory follows the schedule; and
 * ends holding the pieces plan B keeps there, which it hands to a sink.
 * Sources: a store laid out as plan A, every piece read checked against
 * the manifest's checksum; or the engine's state (mstate.h: fp32 buffers
 * laid out by layout_pieces), narrowed to the dtype the graph moves a
 * kind in.  Sinks: a store laid out as plan B (store_apply's output: the
 * file path), which checks every piece; or the engine's state for plan B,
 * widened back to fp32.
 *
 * The schedule walker is one; only the transport of a round's messages
 * differs: MPI point-to-point between ranks here, NCCL between the GPUs
 * of one process in lib/cuda/live_nccl.cu.  Ranks agree on failure before
 * and after every round, so an error on one rank never leaves the others
 * waiting. */
#ifndef NEREUS_LIVE_H
#define NEREUS_LIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/mstate.h"
#include "engine/roles.h"
#include "plan/plan.h"
#include "state/emu.h"

struct rank_roles;

struct live_stats {
	int ranks;
	int rounds;
	double seconds;            /* the schedule's execution, the slowest rank's */
	double total_seconds;      /* the whole call: graph, filling, schedule, handing
				    * over; the slowest rank's */
	double predicted_s;        /* the graph's prediction of the schedule (tgraph.h) */
	double lower_bound_s;      /* its busiest link's bytes over its bandwidth */
	uint64_t bytes_sent;       /* between ranks, all ranks together */
	long pieces_taken;         /* non-empty pieces handed to the sink, all ranks */
	long pieces_verified;      /* of those, checked against a store (live_run) */
};

/* MPI_Init; NR_OK, or NR_EIO when MPI does not start. */
int live_init(int *argc, char ***argv, int *rank, int *size);
void live_finalize(void);

/* Reshard from plan a to plan b over MPI_COMM_WORLD; every rank calls it.
 * Rank r plays GPU r of the cluster (or, with as many ranks as GPUs that
 * hold state in either plan, the r-th of those), loading the pieces plan
 * A keeps there from src_store.  verify_store may be NULL.  NR_EINPUT
 * when the number of ranks fits neither the cluster nor the GPUs the
 * plans use, or a plan or store does not match the job; NR_EINFEASIBLE as
 * tgraph_build; NR_EIO for a piece whose checksum does not match (naming
 * the tensor and rank) or a failed transfer.  Every rank returns the same
 * code and message, and fills st with the totals of all ranks. */
int live_reshard(const struct env *v, const struct plan *a, const struct plan *b,
		 const char *src_store, const char *verify_store, struct live_stats *st,
		 struct err *e);

/* --- the engine's state, moved in memory (live_mem.c) -------------------------- */

/* Collective over MPI_COMM_WORLD, world rank r playing GPU r of the
 * cluster: move every layout's state from plan a's layouts to plan b's,
 * by the transition graph's schedule, in memory.  from is this rank's
 * state of a (rank_state_init for a, filled), left as it is; to is made
 * here for b and filled (on failure it is left empty).  The state of a
 * GPU that is down in v's cluster is lost: hand it over (switch with the
 * GPU still up) before marking it down.  A kind moves in the dtype the
 * graph gives it (the model's for weights, so a tensor the engine keeps
 * in fp32 beside bf16 weights is refused, naming it).  st: the measured
 * times (the slowest rank's), the graph's prediction and the totals of
 * all ranks.  Every rank returns the same code and message. */
int live_move(const struct env *v, const struct plan *a, const struct plan *b,
	      const struct rank_state *from, struct rank_state *to, struct live_stats *st,
	      struct err *e);

/* --- sources and sinks --------------------------------------------------------- */

/* A piece a GPU holds in one layout of a plan, as the walker holds it. */
struct live_piece {
	const struct emu *u;       /* the layout: item, model, conf, lo */
	int emu;                   /* u's index in its plan's emu_set */
	const char *name;          /* the job's model whose state it is */
	enum state_kind kind;
	int gpu, rank;             /* the GPU holding it and the rank playing that GPU */
	int tp, pp, dp;            /* the holder's coordinates in u */
	const struct piece *pc;    /* tensor, box, local_off and local_len in the
				    * holder's buffer of kind (layout_pieces) */
	int elem_bytes;            /* bytes per element the walker holds it in */
};

/* Where plan A's pieces come from. */
struct live_source {
	/* Fill dst, p->pc->local_len elements of p->elem_bytes whose padding
	 * tail is zero already, with a piece plan A keeps on a GPU played
	 * here. */
	int (*fill)(void *ctx, const struct live_piece *p, void *dst, struct err *e);
	/* Fill region of dst, a buffer holding dbox of tensor of the job's
	 * model (kind, eb bytes an element), from the state at rest: what no
	 * GPU that is up holds in A (tgraph.h's store edges).  NULL: there is
	 * none, and a switch that needs it fails. */
	int (*fill_region)(void *ctx, int model, enum state_kind kind, int tensor,
			   const struct box *region, void *dst, const struct box *dbox, int eb,
			   struct err *e);
	void *ctx;
};

/* Where plan B's pieces go, once the schedule is done: take is called for
 * every piece plan B keeps on a GPU played here (data valid during the
 * call only). */
struct live_sink {
	int (*take)(void *ctx, const struct live_piece *p, const void *data, struct err *e);
	void *ctx;
};

/* A store as a source (reading every piece against its checksum) or as a
 * sink (checking every piece against it: by its checksum when the store
 * holds exactly that box, else element for element). */
struct live_store;
int live_store_open(struct live_store **s, const struct env *v, const char *path,
		    struct err *e);
void live_store_close(struct live_store *s);
struct live_source live_store_source(struct live_store *s);
struct live_sink live_store_verifier(struct live_store *s);

/* The engine's state as a source (s: plan A's) or as a sink (s: plan B's,
 * made by rank_state_init). */
struct live_source live_mem_source(const struct rank_state *s);
struct live_sink live_mem_sink(struct rank_state *s);

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
	/* Rank r plays GPU r, and GPUs no rank plays must hold nothing in
	 * either plan; else (false) ranks play every GPU of the cluster or
	 * only those holding state, as live_reshard says. */
	bool gpu_is_rank;
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

/* The schedule walker, over any transport, from any source to any sink
 * (NULL: the pieces are dropped).  Fills st; seconds and total_seconds
 * are the slowest process's. */
int live_walk(const struct env *v, const struct plan *a, const struct plan *b,
	      const struct live_source *src, const struct live_sink *sink,
	      const struct live_xport *x, struct live_stats *st, struct err *e);

/* live_walk over MPI_COMM_WORLD, world rank r playing GPU r (GPUs no rank
 * plays must hold nothing): live_move's transport, for other sources and
 * sinks.  Collective. */
int live_walk_world(const struct env *v, const struct plan *a, const struct plan *b,
		    const struct live_source *src, const struct live_sink *sink,
		    struct live_stats *st, struct err *e);

/* live_walk from the store src_store, verified against verify_store (may
 * be NULL): live_reshard's walk, for other transports. */
int live_run(const struct env *v, const struct plan *a, const struct plan *b,
	     const char *src_store, const char *verify_store, const struct live_xport *x,
	     struct live_stats *st, struct err *e);

#endif
