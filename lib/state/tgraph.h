/* The global transition graph: what moves, from where to where, and in
 * which order, when a job switches from plan A to plan B — every model and
 * the generation engines at once.
 *
 * Edges.  Each piece B keeps on a GPU (emu.h) is cut into regions by the
 * pieces A holds of the same tensor and kind (any replica, the training
 * layout and the engines alike): one box intersection per pair, only
 * between pieces of the same tensor.  Each region comes from the cheapest
 * holder that is up: the same GPU (a piece identical to one A keeps there,
 * in the same model-stage, is kept in place and never moves; any other is a
 * device copy, "local"), a GPU of the same node ("intra"), host memory of
 * the node (offloaded state, "host"), another node ("inter"), and when no
 * GPU that is up holds it, the state store ("store").  Among equal holders
 * the least loaded is taken, and a destination keeps taking from the holder
 * it took from last, so what one source sends one destination from one
 * segment to another, up to 64 pieces apart, is one edge.  A piece that
 * one holder has whole, no further than the nearest holder of any of its
 * regions, comes whole from it.  Lists laid out alike in A and in B
 * (Adam's m and v as the master weights, with FSDP the weights too, two
 * frozen models of one shape) take the same holders, the later kind or
 * model the earlier's.
 *
 * Relays.  A list B keeps on many GPUs (replicated weights, say) would
 * otherwise have each holder gather every piece A has cut across other
 * nodes: holders times sources edges, and the few holders of A sending
 * the same bytes to all of them.  Instead, holders that already have a
 * piece pass it on, as a broadcast does, in trees of their own for each
 * run of pieces (capacity / 256 bytes at most).  A run enters a node
 * through one of its holders, another for each run, so that every GPU's
 * network port takes a share; the others take the run from it over
 * NVLink, in a binary tree, unless A holds all of a piece on that node.
 * Across nodes, the holder a run enters by takes it from one of the two
 * children of the holder it entered another node by, in a binary tree
 * over the nodes rooted at node after node, when A has cut the piece
 * or holds some part of it on fewer GPUs than there are such nodes.  A
 * relay edge carries pieces of one run and leaves only after the edges
 * bringing them to the relaying GPU are done.
 *
 * Memory.  A GPU starts with what A keeps there and ends with what B keeps
 * there.  Pieces are allocated and freed by segments: runs of consecutive
 * pieces of one buffer of at most capacity / 64 bytes.  A destination
 * segment is allocated only when its GPU has room for it next to
 * everything resident; a source segment is freed after its last outgoing
 * edge unless B keeps it.  When every waiting GPU is full of sources that
 * wait on other full GPUs, the cycle is broken by staging: a source segment
 * goes to host memory (an edge of its own), is freed, and its remaining
 * edges leave from host memory.  No GPU exceeds its capacity at any step.
 *
 * Rounds.  A GPU's links are its network port (NVLink or InfiniBand, one
 * transfer out and one in at a time), its host link (PCIe, one each way)
 * and its copy engine.  Each round gives every busy link transfers of at
 * most one quantum of time in all, one after another, the links with the
 * most bytes left served first, each taking first what relays wait on; a
 * round lasts as long as its busiest link plus the cost model's
 * per-collective latency.  The lower bound is the busiest link's
 * bytes over its bandwidth; the predicted time, the sum of the rounds, is
 * never below it. */
#ifndef NEREUS_TGRAPH_H
#define NEREUS_TGRAPH_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "state/emu.h"

enum tg_link { TG_LOCAL, TG_INTRA, TG_HOST, TG_INTER, TG_STORE, TG_NLINKS };
extern const char *const tg_link_names[TG_NLINKS + 1]; /* "local", "intra", ... */

/* A piece list of A (source) or B (destination), cut into segments. */
struct tg_list {
	const struct emu *u;
	const struct emu_list *l;
	int nseg;
	int *seg_first;          /* segment s holds pieces [seg_first[s], seg_first[s + 1]) */
	int *seg_of;             /* piece → segment */
	int seg0;                /* segment s of the holder at position pos is seg0 + pos·nseg + s */
};

/* One holder's segment: what is allocated (B) or freed (A) at once. */
struct tg_seg {
	int gpu;
	bool host;               /* in host memory: not counted against the GPU */
	int list, pos;           /* its list and the holder's position in the list's GPUs */
	int first, count;        /* its pieces */
	int64_t bytes;           /* allocated or freed: its pieces not kept in place */
	int64_t kept;            /* its pieces kept in place */
};

/* A transfer of pieces from one source to one destination.  With whole,
 * piece first + k of dst_list, for each bit k set in mask (k < count ≤
 * 64), receives all it shares with the source's piece of the same tensor
 * in src_list (all of it from the store); else (count 1) piece first
 * receives the elements of box.  A staging edge moves pieces [first,
 * first + count) of src_list whole, padding included. */
struct tg_edge {
	int model;               /* the job's model whose state moves */
	enum state_kind kind;
	int src, dst;            /* GPUs; src -1: the state store */
	bool src_host, dst_host; /* that end is host memory of the GPU's node */
	int src_list, dst_list;  /* tg->lists; src_list -1: the store; dst_list -1: staging */
	int first, count;        /* pieces of dst_list (of src_list when staging) */
	uint64_t mask;           /* with whole: which of them */
	bool whole;
	struct box box;
	int64_t bytes;
	enum tg_link link;
	int sseg, dseg;          /* the segments it reads and writes; -1 none */
	int rseg;                /* a relay: the destination segment of src it copies
				  * (src_list is then a list of B), else -1 */
	bool staging;            /* moves source segment sseg to host memory */
	bool staged;             /* leaves from host memory, where sseg was staged */
};

enum tg_step_kind { TG_ALLOC, TG_FREE, TG_ROUND };
struct tg_step {
	enum tg_step_kind kind;
	int index;               /* destination segment, source segment or round */
};

struct tg_move {
	int edge;
	int64_t off, bytes;      /* bytes [off, off + bytes) of the edge */
};

struct tg_round {
	double seconds;
	int transfers;           /* transfers between pairs of links */
	int64_t bytes;
	int move0, nmoves;       /* its moves */
	bool staging;            /* moves a staged segment to host memory */
};

struct tg_stage {
	int sseg, edge;          /* the segment staged and the edge that stages it */
	int round;               /* the round that moves it to host memory */
};

/* Which state a transition moves: the lists of A's EMUs whose item has
 * its bit in a_items, of B's EMUs whose item has its bit in b_items, of
 * the kinds with their bit in kinds.  The rest of either plan stays where
 * it is: no edge reads or writes it, and the memory the graph schedules
 * is what the selected lists hold.  Taking the actor's home weights as A
 * and its engines' as B, with one plan on both sides, is the per-step
 * move of the actor's weights into generation. */
struct tg_select {
	uint32_t a_items, b_items;
	uint32_t kinds;
};

/* All of both plans. */
extern const struct tg_select tg_select_all;

/* The actor's weights, from its home layout in a to its engines in b. */
struct tg_select tg_select_gen_weights(const struct job *job);

struct tgraph {
	struct emu_set a, b;
	struct tg_select sel;
	int ngpus;
	double capacity;         /* bytes per GPU: cluster_gpu_bytes */
	int64_t *before, *after, *peak; /* per GPU: resident bytes in A, in B, the most at any step */
	int nlists, na;          /* lists [0, na) are A's */
	struct tg_list *lists;
	int nsseg, ndseg;
	struct tg_seg *sseg, *dseg;
	int nedges;
	struct tg_edge *edges;
	int nsteps;
	struct tg_step *steps;
	int nrounds;
	struct tg_round *rounds;
	int nmoves;
	struct tg_move *moves;
	int nstages;
	struct tg_stage *stages;
	int gpus_lost;           /* GPUs that hold state in A and are down */
	int64_t kept_bytes;
	int link_edges[TG_NLINKS];
	int64_t link_bytes[TG_NLINKS];
	double link_seconds[TG_NLINKS]; /* bytes over bandwidth, summed */
	double quantum_s;        /* the most time a link carries transfers in a round */
	double predicted_s;
	double lower_bound_s;
};

/* Build the graph and its schedule from plan a to plan b, both for v's
 * job and cluster (GPUs of a that are down now hold nothing).  NR_EINPUT
 * when a plan does not match the job (emu_build); NR_EINFEASIBLE when b
 * puts state on a GPU that is down or more on a GPU than it can hold, or
 * when a holds more than that on a GPU that is up. */
int tgraph_build(const struct env *v, const struct plan *a, const struct plan *b,
		 struct tgraph *g, struct err *e);
/* tgraph_build of the state sel selects only. */
int tgraph_build_select(const struct env *v, const struct plan *a, const struct plan *b,
			const struct tg_select *sel, struct tgraph *g, struct err *e);
/* The same graph built as the definition above reads, for tests to hold
 * the fast paths to: every atom of every piece from a holder chosen for it
 * alone (then grouped), every list on its own, each step without the
 * shortcuts that find its answer sooner. */
int tgraph_build_literal(const struct env *v, const struct plan *a, const struct plan *b,
			 struct tgraph *g, struct err *e);
void tgraph_free(struct tgraph *g);

/* The predicted seconds of the switch from a to b (for the switch
 * decision). */
int tgraph_transition_seconds(const struct env *v, const struct plan *a, const struct plan *b,
			      double *seconds, struct err *e);

/* The piece of tensor in a list, or NULL. */
const struct piece *tgraph_find_piece(const struct tg_list *l, int tensor);
/* Bandwidth in bytes/s of one link class (staging and host: the host link). */
double tgraph_link_bw(const struct env *v, enum tg_link link);

/* The transition document from a to b, nereus-transition(5); edges
 * listed when with_edges (tgrender.c). */
json_t *tgraph_to_json(const struct env *v, const struct plan *a, const struct plan *b,
		       const struct tgraph *g, bool with_edges);
/* A summary for people, as a malloc'd string; NULL when out of memory. */
char *tgraph_table(const struct env *v, const struct plan *a, const struct plan *b,
		   const struct tgraph *g);
/* Rounds × GPUs as SVG, written atomically. */
int tgraph_svg(const struct env *v, const struct tgraph *g, const char *file, struct err *e);

#endif
