/* What the transition graph's source files share and tgraph.h does not
 * show: the context a build carries through its parts, and the functions
 * one part calls in another.  Private to lib/state/tgraph*.c. */
#ifndef NEREUS_TGRAPH_IMPL_H
#define NEREUS_TGRAPH_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "state/tgraph.h"

#define RECENT 8           /* sources a destination remembers */
#define NSLOTS 2           /* tilings of a tensor: the home layout, the engines */

/* Each GPU's links: network out and in, host link out and in, copy engine. */
enum { P_NET_OUT, P_NET_IN, P_HOST_OUT, P_HOST_IN, P_COPY, NPORTS };

/* --- the source index --------------------------------------------------------- */

struct src_ref {
	int list, piece;
};

/* A distinct box of one tiling of one tensor and kind, and its holders. */
struct src_ent {
	struct box box;
	int ref0, nref;
};

/* The entries of one (key, slot), sorted by their offset along dim. */
struct bucket {
	int ent0, nent;
	int dim;
	int64_t maxext;
};

struct atom {
	struct box box;
	int ent[NSLOTS];           /* the entry of each tiling holding it, -1 none */
};

/* How a source list reaches the destination in hand (stamp: which). */
struct reachc {
	int stamp;
	enum tg_link link;
	int lo, hi;                /* the holders giving it, in the list's up holders */
	int pick;                  /* the one taken last, -1 none */
};

/* --- a build ------------------------------------------------------------------ */

/* A build in progress: the graph, its source index, and what the part in
 * hand keeps between calls. */
struct ctx {
	const struct env *v;
	struct tgraph *g;
	bool literal;              /* no shortcut: tgraph_build_literal */
	int gpn;
	double bw[TG_NLINKS];
	int nmodels;
	int key0[MAX_MODELS];      /* first key of each model */
	int ntens[MAX_MODELS];
	int nbuckets;
	struct bucket *bk;
	struct src_ent *ent;
	struct src_ref *ref;
	int *entof, *entof0;       /* entof[entof0[l] + i]: piece i of A list l's entry, or -1 */
	int *same_for;             /* per A list: the list of B it was last compared with… */
	bool *same;                /* …and whether they hold the same pieces */
	int **upg, **uppos, *nup;  /* per A list: its holders that are up, and their positions */
	int **upnode, *nupnode;    /* per A list: the nodes of those holders */
	double *load;              /* per port: seconds routed through it */
	int ecap;
	struct atom *at, *rem, *rem2, *lat;
	int atcap, remcap, rem2cap, latcap;
	int *aoff;                 /* per piece of the list in hand: its atoms in lat */
	int aoffcap;
	struct reachc *rc;         /* per A list, for the destination in hand */
	int *cand;                 /* tg_choose's references of the nearest class (na at most) */
	bool *held;                /* [item · ngpus + gpu]: A's EMU of item holds state on gpu, up */
	int stamp;
	int *otab, omask, nopen;   /* open edges of the destination segment in hand, */
	int open0;                 /* made from edge open0 on */
	int *oused, ousedcap;
	/* relays of the destination list in hand (relay_prepare) */
	int *rbuf, rbufcap;        /* holds rnode, rlead, rstamp and rwhole */
	int *rnode;                /* per holder: its node's index in the list */
	int *rlead;                /* per node of the list: its first holder; then the count */
	int rnodes;
	int *ron, roncap;          /* per piece and node: atoms A holds on the node */
	int *rheld, rheldcap;      /* per piece: A's up holders of its least held atom */
	int *rrun, rruncap;        /* per piece: its run, whose tree starts from node run % nodes */
	int *rmap;                 /* per node of the cluster: its index in the list, -1 */
	int *rstamp, rtick;        /* per node of the list: the atom last counted */
	int *rwhole;               /* per node of the list: the piece it holds all of */
	int64_t relay_max;         /* bytes of a run, beyond its first piece */
	/* kinds copied from a twin (tg_find_twins) */
	int *twin;                 /* per list: the list of an earlier kind it copies, -1 */
	int *ashift;               /* per list of B that copies: its A lists' offset */
	int *e0;                   /* per list of B and one more: its first edge */
};

/* --- choosing holders --------------------------------------------------------- */

/* The links a transfer takes: its source's and destination's ports. */
struct route {
	int sport, dport;
	double bw;
};

/* A destination: the holders it took from last. */
struct dinst {
	int dst;
	bool dh;
	int recent[RECENT];        /* src · 2 + host, most recent first; -1 none */
};

struct choice {
	int src;                   /* -1: the store */
	bool sh;
	int list, piece, pos;      /* the holder's list, its piece, its position in the list */
	enum tg_link link;
	int atom;                  /* the atom it gives */
	int rseg;                  /* a relay: the segment of list it copies, else -1 */
};

/* --- small helpers (tgraph.c) ---------------------------------------------- */

/* Make room in *pp (*cap elements of size bytes) for need elements,
 * doubling; -1 when out of memory. */
int tg_grow(void *pp, int *cap, int need, size_t size);
/* First index in sorted a[0, n) with a[i] >= x. */
int tg_lower_bound(const int *a, int n, int x);

/* --- the source index (tgraph_index.c) ------------------------------------- */

/* The (key, slot) of a piece of tensor of kind k in u's lists. */
int tg_bucket_of(const struct ctx *c, const struct emu *u, enum state_kind k, int tensor);
/* Index every box A holds that is up and not a twin's. */
int tg_build_index(struct ctx *c, struct err *e);
/* Cut D into atoms (in c->at); their count, or -1 when out of memory. */
int tg_atoms_of(struct ctx *c, int bucket0, const struct box *D);
/* The links a transfer from src (host memory when sh) to dst takes. */
struct route tg_route_of(const struct ctx *c, int src, bool sh, int dst, bool dh,
			 enum tg_link link);
/* The holder atom a comes from for destination di; src -1: the store. */
struct choice tg_choose(struct ctx *c, const struct dinst *di, const struct atom *a);

/* --- the edges (tgraph_edges.c) -------------------------------------------- */

/* The edges of destination list dl, made from the index; -1 when out of
 * memory. */
int tg_list_edges(struct ctx *c, int dl, struct dinst *di);
/* Which lists copy an earlier group's edges (c->twin, c->ashift). */
int tg_find_twins(struct ctx *c);
/* The edges of a list with a twin: its twin's, changed. */
int tg_copy_edges(struct ctx *c, int dl);
/* A's segments of a copied group keep what its twin's keep. */
void tg_copy_kept(struct tgraph *g, const int *twin);

/* --- lists, segments and the schedule (tgraph_sched.c) --------------------- */

/* Add the lists of s that g->sel selects (of items in items) to g, cut
 * into segments of at most seg_max bytes; *nseg counts the segments. */
int tg_add_lists(struct tgraph *g, const struct emu_set *s, uint32_t items, int64_t seg_max,
		 int *nseg);
/* The segments of lists [from, to) into seg. */
void tg_fill_segs(struct tgraph *g, int from, int to, struct tg_seg *seg);
/* Schedule g's edges in rounds between allocations and frees. */
int tg_schedule(struct ctx *c, struct err *e);

#endif
