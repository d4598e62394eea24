/* The transition executor: the schedule nereus-transition computes
 * (tgraph.h), carried out by processes that hold their pieces in memory.
 *
 * Every process builds the same transition graph; fills the pieces plan A
 * keeps on the GPUs it plays from a source; walks the graph's steps in
 * order — allocating destination segments, running rounds of moves,
 * freeing source segments — so that its memory follows the schedule; and
 * ends holding the pieces plan B keeps there, which it hands to a sink.
 * Sources: a store laid out as plan A (exec_store.c), every piece read
 * checked against the manifest's checksum; or the engine's state, narrowed
 * to the dtype the graph moves a kind in.  Sinks: a store laid out as plan
 * B (store_apply's output: the file path), which checks every piece; or
 * the engine's state for plan B, widened back to fp32.
 *
 * The walker is one; only the transport of a round's messages differs:
 * MPI point-to-point between ranks (mpi/live.c), NCCL between the GPUs of
 * one process (cuda/live_nccl.cu).  Processes agree on failure before and
 * after every round, so an error on one never leaves the others waiting. */
#ifndef NEREUS_EXEC_H
#define NEREUS_EXEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "plan/plan.h"
#include "state/emu.h"
#include "state/tgraph.h"

struct exec_stats {
	int ranks;
	int rounds;
	double seconds;            /* the schedule's execution, the slowest rank's */
	double total_seconds;      /* the whole call: graph, filling, schedule, handing
				    * over; the slowest rank's */
	double predicted_s;        /* the graph's prediction of the schedule (tgraph.h) */
	double lower_bound_s;      /* its busiest link's bytes over its bandwidth */
	uint64_t bytes_sent;       /* between ranks, all ranks together */
	long pieces_taken;         /* non-empty pieces handed to the sink, all ranks */
	long pieces_verified;      /* of those, checked against a store (exec_run) */
};

/* --- sources and sinks --------------------------------------------------------- */

/* A piece a GPU holds in one layout of a plan, as the walker holds it. */
struct exec_piece {
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
struct exec_source {
	/* Fill dst, p->pc->local_len elements of p->elem_bytes whose padding
	 * tail is zero already, with a piece plan A keeps on a GPU played
	 * here. */
	int (*fill)(void *ctx, const struct exec_piece *p, void *dst, struct err *e);
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
struct exec_sink {
	int (*take)(void *ctx, const struct exec_piece *p, const void *data, struct err *e);
	void *ctx;
};

/* A store as a source (reading every piece against its checksum) or as a
 * sink (checking every piece against it: by its checksum when the store
 * holds exactly that box, else element for element). */
struct exec_store;
int exec_store_open(struct exec_store **s, const struct env *v, const char *path,
		    struct err *e);
void exec_store_close(struct exec_store *s);
struct exec_source exec_store_source(struct exec_store *s);
struct exec_sink exec_store_verifier(struct exec_store *s);

/* --- for transports ---------------------------------------------------------- */

/* One message of a round: bytes from rank src to rank dst.  send is set
 * when this process plays src, recv when it plays dst. */
struct exec_msg {
	int src, dst;
	const void *send;
	void *recv;
	size_t bytes;
	int tag;                   /* its index among the round's messages */
};

struct exec_xport {
	int nranks;
	const int *mine;           /* mine[r]: this process plays rank r */
	/* Rank r plays GPU r, and GPUs no rank plays must hold nothing in
	 * either plan; else (false) ranks play every GPU of the cluster or
	 * only those holding state, as live_reshard says. */
	bool gpu_is_rank;
	/* Deliver every message of a round; NR_OK or NR_EIO. */
	int (*round)(void *ctx, const struct exec_msg *m, int n, struct err *e);
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
int exec_walk(const struct env *v, const struct plan *a, const struct plan *b,
	      const struct exec_source *src, const struct exec_sink *sink,
	      const struct exec_xport *x, struct exec_stats *st, struct err *e);

/* exec_walk of the state sel selects only (tgraph.h): what plan A holds
 * of it is filled from src, what plan B holds of it handed to sink, and
 * nothing else read, moved or written.  With a = b and
 * tg_select_gen_weights, the actor's weights into its engines. */
int exec_walk_select(const struct env *v, const struct plan *a, const struct plan *b,
		     const struct tg_select *sel, const struct exec_source *src,
		     const struct exec_sink *sink, const struct exec_xport *x,
		     struct exec_stats *st, struct err *e);

/* exec_walk from the store src_store, verified against verify_store (may
 * be NULL): live_reshard's walk, for other transports. */
int exec_run(const struct env *v, const struct plan *a, const struct plan *b,
	     const char *src_store, const char *verify_store, const struct exec_xport *x,
	     struct exec_stats *st, struct err *e);

#endif
