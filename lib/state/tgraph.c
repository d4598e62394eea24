/* The global transition graph and its memory-ordered schedule (tgraph.h).
 *
 * Building it has three parts.  The source index: every distinct box A
 * holds, by (model, kind, tensor) and by tiling (the home layout, or the
 * engines), with the piece lists that hold it.  The edges: each piece of
 * each B list is cut once into atoms by the source boxes it meets, then
 * every GPU holding the list takes each atom from its cheapest holder, or
 * the whole piece from another holder of the list (a relay); a group of
 * lists laid out like an earlier group copies its edges.  The schedule:
 * rounds of transfers between allocations and frees, until every edge is
 * done, relays after what they pass on.
 *
 * At a thousand GPUs that is millions of (destination, piece) pairs, so
 * the common cases go without a search: a piece inside a piece of the list
 * the last one lay in, a holder with nothing to choose between, a list
 * kept whole, a region joining the edge made last. */
#include "state/tgraph.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const tg_link_names[TG_NLINKS + 1] = { "local", "intra", "host", "inter", "store",
						   NULL };

#define SEG_DIV 64         /* a segment holds at most capacity / SEG_DIV bytes */
#define ROUNDS_TARGET 256  /* the quantum: the first lower bound / ROUNDS_TARGET… */
#define QUANTUM_LAT 100    /* …and at least this many round latencies */
#define RELAY_DIV 256      /* a run of pieces sharing relay trees: capacity / RELAY_DIV bytes */
#define RECENT 8           /* sources a destination remembers */
#define NSLOTS 2           /* tilings of a tensor: the home layout, the engines */

/* Each GPU's links: network out and in, host link out and in, copy engine. */
enum { P_NET_OUT, P_NET_IN, P_HOST_OUT, P_HOST_IN, P_COPY, NPORTS };

/* --- small helpers -------------------------------------------------------- */

static int grow(void *pp, int *cap, int need, size_t size)
{
	void **p = pp;
	int n = *cap ? *cap : 64;
	void *q;

	if (need <= *cap)
		return 0;
	while (n < need)
		n *= 2;
	q = realloc(*p, (size_t)n * size);
	if (!q)
		return -1;
	*p = q;
	*cap = n;
	return 0;
}

/* First index in sorted a[0, n) with a[i] >= x. */
static int lower_bound(const int *a, int n, int x)
{
	int lo = 0, hi = n;

	while (lo < hi) {
		int mid = (lo + hi) / 2;

		if (a[mid] < x)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

double tgraph_link_bw(const struct env *v, enum tg_link link)
{
	switch (link) {
	case TG_LOCAL:
		/* a device copy reads and writes every byte */
		return v->cl->gpu.hbm_gbps * 1e9 * v->k->decode_eff / 2;
	case TG_INTRA:
		return link_bw(v, 1);
	case TG_INTER:
		return link_bw(v, v->cl->gpus_per_node + 1);
	default:
		return host_bw(v);
	}
}

/* Pieces come in tensor order but for a tied embedding's copy at the
 * end. */
const struct piece *tgraph_find_piece(const struct tg_list *tl, int tensor)
{
	const struct emu_list *l = tl->l;
	int lo = 0, hi = (int)l->npieces;

	if (hi > 1 && l->pieces[hi - 1].tensor < l->pieces[hi - 2].tensor &&
	    l->pieces[--hi].tensor == tensor)
		return &l->pieces[hi];
	while (lo < hi) {
		int mid = (lo + hi) / 2;

		if (l->pieces[mid].tensor < tensor)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < (int)l->npieces && l->pieces[lo].tensor == tensor ? &l->pieces[lo] : NULL;
}

/* --- the source index ------------------------------------------------------ */

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

struct raw {
	int bucket, list, piece;
	int64_t key;               /* offset along the bucket's dim */
	const struct box *box;
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
	int *cand;                 /* choose's references of the nearest class (na at most) */
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
	/* kinds copied from a twin (find_twins) */
	int *twin;                 /* per list: the list of an earlier kind it copies, -1 */
	int *ashift;               /* per list of B that copies: its A lists' offset */
	int *e0;                   /* per list of B and one more: its first edge */
};

/* The engines hold the actor's weights in the actor's dtype (emu.h), so
 * their pieces and the actor's are one tensor's two tilings. */
static int bucket_of(const struct ctx *c, const struct emu *u, enum state_kind k, int tensor)
{
	int d = u->model;

	return (c->key0[d] + (int)k * c->ntens[d] + tensor) * NSLOTS + (u->item == ITEM_GEN);
}

static int cmp_raw(const void *pa, const void *pb)
{
	const struct raw *a = pa, *b = pb;

	if (a->bucket != b->bucket)
		return a->bucket < b->bucket ? -1 : 1;
	if (a->key != b->key)
		return a->key < b->key ? -1 : 1;
	for (int d = 0; d < a->box->ndim; d++) {
		if (a->box->off[d] != b->box->off[d])
			return a->box->off[d] < b->box->off[d] ? -1 : 1;
		if (a->box->ext[d] != b->box->ext[d])
			return a->box->ext[d] < b->box->ext[d] ? -1 : 1;
	}
	return a->list != b->list ? (a->list < b->list ? -1 : 1) : 0;
}

/* Lists come in (pp, dp, tp) order, and so, most often, do their boxes. */
static bool sorted(const struct raw *r, int n)
{
	for (int i = 1; i < n; i++)
		if (cmp_raw(&r[i - 1], &r[i]) > 0)
			return false;
	return true;
}

/* The dimension along which a bucket's boxes are cut into the most
 * blocks: sorted by their offset along it, a query scans only the boxes
 * that can meet it. */
static int index_dim(const struct raw *r, int n, const struct gtensor *t)
{
	int best = 0;
	int64_t most = 0;

	for (int d = 0; d < t->ndim; d++) {
		int64_t minext = t->shape[d];

		for (int i = 0; i < n; i++)
			if (r[i].box->ext[d] > 0 && r[i].box->ext[d] < minext)
				minext = r[i].box->ext[d];
		if (minext > 0 && t->shape[d] / minext > most) {
			most = t->shape[d] / minext;
			best = d;
		}
	}
	return best;
}

static int build_index(struct ctx *c, struct err *e)
{
	struct tgraph *g = c->g;
	struct raw *raw;
	int n = 0, nent = 0, *count;

	c->entof0 = malloc((size_t)(g->na + 1) * sizeof *c->entof0);
	for (int l = 0; c->entof0 && l < g->na; l++) {
		c->entof0[l] = n;
		n += (int)g->lists[l].l->npieces;
	}
	c->entof = malloc((size_t)(n ? n : 1) * sizeof *c->entof);
	if (!c->entof0 || !c->entof)
		return err_set(e, NR_EIO, "out of memory");
	memset(c->entof, -1, (size_t)(n ? n : 1) * sizeof *c->entof);
	raw = malloc((size_t)(n ? n : 1) * sizeof *raw);
	c->ent = malloc((size_t)(n ? n : 1) * sizeof *c->ent);
	c->ref = malloc((size_t)(n ? n : 1) * sizeof *c->ref);
	c->bk = calloc((size_t)c->nbuckets, sizeof *c->bk);
	count = calloc((size_t)c->nbuckets + 1, sizeof *count);
	if (!raw || !c->ent || !c->ref || !c->bk || !count) {
		free(raw);
		free(count);
		return err_set(e, NR_EIO, "out of memory");
	}
	n = 0;
	for (int l = 0; l < g->na; l++) {
		const struct tg_list *tl = &g->lists[l];

		if (c->nup[l] == 0 || c->twin[l] >= 0)
			continue; /* every holder is down, or its kind is copied: nothing asks it */
		for (size_t i = 0; i < tl->l->npieces; i++) {
			const struct piece *p = &tl->l->pieces[i];

			if (box_volume(&p->box) == 0)
				continue;
			raw[n++] = (struct raw){ bucket_of(c, tl->u, tl->l->kind, p->tensor), l,
						 (int)i, 0, &p->box };
			count[raw[n - 1].bucket + 1]++;
		}
	}
	/* Choose each bucket's dimension, key the raw refs by it, sort. */
	for (int b = 0; b < c->nbuckets; b++)
		count[b + 1] += count[b];
	{
		struct raw *by = malloc((size_t)(n ? n : 1) * sizeof *by);
		int *at = malloc((size_t)c->nbuckets * sizeof *at);

		if (!by || !at) {
			free(by);
			free(at);
			free(raw);
			free(count);
			return err_set(e, NR_EIO, "out of memory");
		}
		memcpy(at, count, (size_t)c->nbuckets * sizeof *at);
		for (int i = 0; i < n; i++)
			by[at[raw[i].bucket]++] = raw[i];
		free(at);
		free(raw);
		raw = by;
	}
	for (int b = 0; b < c->nbuckets; b++) {
		int lo = count[b], hi = count[b + 1];
		const struct tg_list *tl;
		int dim;

		if (lo == hi)
			continue;
		tl = &g->lists[raw[lo].list];
		dim = index_dim(raw + lo, hi - lo,
				&tl->u->lo.tensors[tl->l->pieces[raw[lo].piece].tensor]);
		c->bk[b].dim = dim;
		for (int i = lo; i < hi; i++)
			raw[i].key = raw[i].box->ndim ? raw[i].box->off[dim] : 0;
		if (!sorted(raw + lo, hi - lo))
			qsort(raw + lo, (size_t)(hi - lo), sizeof *raw, cmp_raw);
		c->bk[b].ent0 = nent;
		for (int i = lo; i < hi; i++) {
			if (i == lo || !box_eq(raw[i].box, &c->ent[nent - 1].box)) {
				c->ent[nent] = (struct src_ent){ *raw[i].box, i, 0 };
				if (raw[i].box->ndim && raw[i].box->ext[dim] > c->bk[b].maxext)
					c->bk[b].maxext = raw[i].box->ext[dim];
				nent++;
			}
			c->ref[i] = (struct src_ref){ raw[i].list, raw[i].piece };
			c->ent[nent - 1].nref++;
			c->entof[c->entof0[raw[i].list] + raw[i].piece] = nent - 1;
		}
		c->bk[b].nent = nent - c->bk[b].ent0;
	}
	free(raw);
	free(count);
	return NR_OK;
}

/* --- atoms ------------------------------------------------------------------ */

/* Append b \ x (x inside b) to *out: at most two boxes per dimension. */
static int subtract(struct atom **out, int *n, int *cap, const struct atom *b,
		    const struct box *x)
{
	struct box cur = b->box;

	for (int d = 0; d < cur.ndim; d++) {
		int64_t end = cur.off[d] + cur.ext[d], xend = x->off[d] + x->ext[d];

		if (grow(out, cap, *n + 2, sizeof **out))
			return -1;
		if (x->off[d] > cur.off[d]) {
			struct atom *a = &(*out)[(*n)++];

			*a = *b;
			a->box = cur;
			a->box.ext[d] = x->off[d] - cur.off[d];
		}
		if (xend < end) {
			struct atom *a = &(*out)[(*n)++];

			*a = *b;
			a->box = cur;
			a->box.off[d] = xend;
			a->box.ext[d] = end - xend;
		}
		cur.off[d] = x->off[d];
		cur.ext[d] = x->ext[d];
	}
	return 0;
}

/* Cut D into atoms, each inside one entry of every tiling or outside all
 * of its entries.  Returns the count in c->at, or -1 when out of memory. */
static int atoms_of(struct ctx *c, int bucket0, const struct box *D)
{
	int nat = 1;

	if (grow(&c->at, &c->atcap, 1, sizeof *c->at))
		return -1;
	c->at[0].box = *D;
	for (int s = 0; s < NSLOTS; s++)
		c->at[0].ent[s] = -1;
	for (int s = 0; s < NSLOTS; s++) {
		const struct bucket *b = &c->bk[bucket0 + s];
		int nrem = 0, lo = 0, hi = b->nent, ncov = 0;

		if (b->nent == 0)
			continue;
		/* every atom so far is outside this tiling until cut */
		if (grow(&c->rem, &c->remcap, nat, sizeof *c->rem))
			return -1;
		memcpy(c->rem, c->at, (size_t)nat * sizeof *c->rem);
		nrem = nat;
		if (D->ndim) {
			int64_t start = D->off[b->dim] - b->maxext;

			while (lo < hi) {
				int mid = (lo + hi) / 2;

				if (c->ent[b->ent0 + mid].box.off[b->dim] <= start)
					lo = mid + 1;
				else
					hi = mid;
			}
		}
		for (int i = lo; i < b->nent; i++) {
			const struct src_ent *en = &c->ent[b->ent0 + i];
			int n2 = 0;

			if (nrem == 0 ||
			    (D->ndim && en->box.off[b->dim] >= D->off[b->dim] + D->ext[b->dim]))
				break;
			if (!box_intersect(&en->box, D, NULL))
				continue;
			for (int k = 0; k < nrem; k++) {
				struct box x;

				if (box_contains(&en->box, &c->rem[k].box)) {
					/* the common case: all of it, nothing left */
					if (grow(&c->at, &c->atcap, ncov + 1, sizeof *c->at))
						return -1;
					c->at[ncov] = c->rem[k];
					c->at[ncov++].ent[s] = b->ent0 + i;
					continue;
				}
				if (!box_intersect(&c->rem[k].box, &en->box, &x)) {
					if (grow(&c->rem2, &c->rem2cap, n2 + 1, sizeof *c->rem2))
						return -1;
					c->rem2[n2++] = c->rem[k];
					continue;
				}
				if (grow(&c->at, &c->atcap, ncov + 1, sizeof *c->at))
					return -1;
				c->at[ncov] = c->rem[k];
				c->at[ncov].box = x;
				c->at[ncov++].ent[s] = b->ent0 + i;
				if (subtract(&c->rem2, &n2, &c->rem2cap, &c->rem[k], &x))
					return -1;
			}
			{
				struct atom *t = c->rem;
				int tc = c->remcap;

				c->rem = c->rem2;
				c->remcap = c->rem2cap;
				c->rem2 = t;
				c->rem2cap = tc;
				nrem = n2;
			}
		}
		if (grow(&c->at, &c->atcap, ncov + nrem, sizeof *c->at))
			return -1;
		if (nrem > 0) /* c->rem may be the spare that was never allocated */
			memcpy(c->at + ncov, c->rem, (size_t)nrem * sizeof *c->at);
		nat = ncov + nrem;
	}
	return nat;
}

/* --- choosing holders ------------------------------------------------------ */

struct route {
	int sport, dport;
	double bw;
};

static struct route route_of(const struct ctx *c, int src, bool sh, int dst, bool dh,
			     enum tg_link link)
{
	struct route r;

	r.bw = c->bw[link];
	switch (link) {
	case TG_LOCAL:
		r.sport = r.dport = dst * NPORTS + P_COPY;
		break;
	case TG_INTRA:
	case TG_INTER:
		r.sport = src * NPORTS + P_NET_OUT;
		r.dport = dst * NPORTS + P_NET_IN;
		break;
	case TG_HOST:
		/* host memory to a GPU over its host link, or a GPU to host memory */
		r.sport = r.dport = sh && !dh ? dst * NPORTS + P_HOST_IN : src * NPORTS + P_HOST_OUT;
		break;
	default:
		r.sport = r.dport = dst * NPORTS + P_HOST_IN;
		break;
	}
	return r;
}

/* The cheapest way list l reaches GPU dst (host memory when dh), and the
 * range of its up holders [*lo, *hi) that give it. */
static enum tg_link reach(const struct ctx *c, int l, int dst, bool dh, int *lo, int *hi)
{
	const int *up = c->upg[l];
	int n = c->nup[l], node = dst / c->gpn, k;
	bool sh = c->g->lists[l].u->host;

	*lo = lower_bound(up, n, node * c->gpn);
	*hi = lower_bound(up, n, (node + 1) * c->gpn);
	if (*lo == *hi) {
		*lo = 0;
		*hi = n;
		return TG_INTER;
	}
	if (sh && dh)
		return TG_LOCAL; /* one node's host memory */
	k = lower_bound(up, n, dst);
	if (k < n && up[k] == dst) {
		*lo = k;
		*hi = k + 1;
		return sh == dh ? TG_LOCAL : TG_HOST;
	}
	return sh || dh ? TG_HOST : TG_INTRA;
}

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

static bool same_holder(const struct choice *a, const struct choice *b)
{
	return a->src == b->src && a->sh == b->sh && a->list == b->list;
}

static int cmp_choice(const void *pa, const void *pb)
{
	const struct choice *a = pa, *b = pb;

	if (a->src != b->src)
		return a->src < b->src ? -1 : 1;
	if (a->sh != b->sh)
		return a->sh ? 1 : -1;
	if (a->list != b->list)
		return a->list < b->list ? -1 : 1;
	return a->atom - b->atom;
}

/* Atoms cut from blocks of a sharded source often come in their holders'
 * order already. */
static bool choices_sorted(const struct choice *ch, int n)
{
	for (int i = 1; i < n; i++)
		if (cmp_choice(&ch[i - 1], &ch[i]) > 0)
			return false;
	return true;
}

static void remember(int *a, int x)
{
	int i;

	for (i = 0; i < RECENT - 1 && a[i] != x; i++)
		;
	memmove(a + 1, a, (size_t)i * sizeof *a);
	a[0] = x;
}

/* How list l reaches the destination in hand, cut once per destination. */
static struct reachc *reach_of(struct ctx *c, int l, const struct dinst *di)
{
	struct reachc *r = &c->rc[l];

	if (r->stamp != c->stamp) {
		r->stamp = c->stamp;
		r->link = reach(c, l, di->dst, di->dh, &r->lo, &r->hi);
		r->pick = -1;
	}
	return r;
}

/* The holder of atom a for destination di: the cheapest link class; among
 * those, the holder di took from that list before, else one it took from
 * recently (for another list), else the least loaded. */
static struct choice choose(struct ctx *c, const struct dinst *di, const struct atom *a)
{
	struct choice ch = { -1, false, -1, -1, -1, TG_STORE, -1, -1 };
	double best_load = HUGE_VAL;
	int best_r = -1, best_p = -1, holders = 0, n = 0, e = a->ent[0] >= 0 ? a->ent[0] : a->ent[1];

	/* one list holds it, on one GPU that is up: nothing to choose */
	if (!c->literal && e >= 0 && (a->ent[0] < 0 || a->ent[1] < 0) && c->ent[e].nref == 1) {
		struct reachc *rc = reach_of(c, c->ref[c->ent[e].ref0].list, di);

		if (rc->hi - rc->lo == 1) {
			ch.link = rc->link;
			best_r = c->ent[e].ref0;
			best_p = rc->lo;
			goto found;
		}
	}
	/* the references of the nearest link class, in order */
	for (int s = 0; s < NSLOTS; s++) {
		const struct src_ent *en = a->ent[s] >= 0 ? &c->ent[a->ent[s]] : NULL;

		for (int r = en ? en->ref0 : 0; en && r < en->ref0 + en->nref; r++) {
			struct reachc *rc = reach_of(c, c->ref[r].list, di);

			if (rc->link < ch.link) {
				ch.link = rc->link;
				holders = n = 0;
			}
			if (rc->link != ch.link)
				continue;
			c->cand[n++] = r;
			holders += rc->hi - rc->lo;
		}
	}
	if (ch.link == TG_STORE)
		return ch;
	best_r = c->cand[0];
	best_p = c->rc[c->ref[best_r].list].lo;
	if (holders == 1)
		goto found; /* the one nearest holder */
	for (int k = 0; k < n; k++)
		if (c->rc[c->ref[c->cand[k]].list].pick >= 0) {
			best_r = c->cand[k];
			best_p = c->rc[c->ref[best_r].list].pick;
			goto found;
		}
	for (int k = 0; k < n; k++) {
		int l = c->ref[c->cand[k]].list;
		const struct reachc *rc = &c->rc[l];
		bool sh = c->g->lists[l].u->host;

		for (int i = 0; i < RECENT && di->recent[i] >= 0; i++) {
			int src = di->recent[i] / 2, p;

			if ((di->recent[i] & 1) != sh)
				continue;
			p = lower_bound(c->upg[l], c->nup[l], src);
			if (p >= rc->lo && p < rc->hi && c->upg[l][p] == src) {
				best_r = c->cand[k];
				best_p = p;
				goto found;
			}
		}
	}
	for (int k = 0; k < n; k++) {
		int l = c->ref[c->cand[k]].list;
		const struct reachc *rc = &c->rc[l];
		bool sh = c->g->lists[l].u->host;

		for (int p = rc->lo; p < rc->hi; p++) {
			struct route rt = route_of(c, c->upg[l][p], sh, di->dst, di->dh, rc->link);

			if (c->load[rt.sport] < best_load) {
				best_load = c->load[rt.sport];
				best_r = c->cand[k];
				best_p = p;
			}
		}
	}
found:
	{
		int l = c->ref[best_r].list;

		c->rc[l].pick = best_p;
		ch = (struct choice){ c->upg[l][best_p], c->g->lists[l].u->host, l,
				      c->ref[best_r].piece, c->uppos[l][best_p], ch.link, -1, -1 };
	}
	return ch;
}

/* --- edges ------------------------------------------------------------------ */

static int sseg_of(const struct tgraph *g, int list, int pos, int piece)
{
	const struct tg_list *l = &g->lists[list];

	return l->seg0 + pos * l->nseg + l->seg_of[piece];
}

/* The segment an edge reads: a source segment, or for a relay the
 * destination segment it copies (lists of A and B never share an index). */
static int read_seg(const struct tg_edge *ed)
{
	return ed->rseg >= 0 ? ed->rseg : ed->sseg;
}

static unsigned open_hash(const struct ctx *c, int src, bool sh, int list, int sseg)
{
	uint64_t x = ((uint64_t)(unsigned)(src * 2 + sh) << 40) ^ ((uint64_t)(unsigned)list << 20) ^
		     (unsigned)sseg;

	return (unsigned)((x * 0x9E3779B97F4A7C15ull) >> 32) & (unsigned)c->omask;
}

/* Forget the open edges (a new destination segment begins). */
static void open_clear(struct ctx *c)
{
	for (int k = 0; k < c->nopen; k++)
		c->otab[c->oused[k]] = -1;
	c->nopen = 0;
	c->open0 = c->g->nedges;
}

/* The slot of the open edge from (src, sh, list, sseg), or the empty slot
 * where it goes; -1 when out of memory. */
static int open_slot(struct ctx *c, int src, bool sh, int list, int sseg)
{
	unsigned h;

	if (2 * (c->nopen + 1) > c->omask) {
		int *old = c->otab, n = c->omask + 1, nused = c->nopen;

		c->omask = n * 2 - 1;
		c->otab = malloc((size_t)(c->omask + 1) * sizeof *c->otab);
		if (!c->otab || grow(&c->oused, &c->ousedcap, c->omask + 1, sizeof *c->oused)) {
			free(old);
			return -1;
		}
		memset(c->otab, -1, (size_t)(c->omask + 1) * sizeof *c->otab);
		c->nopen = 0;
		for (int k = 0; k < nused; k++) {
			const struct tg_edge *ed = &c->g->edges[old[c->oused[k]]];
			int at = open_slot(c, ed->src, ed->src_host, ed->src_list, read_seg(ed));

			c->otab[at] = old[c->oused[k]];
			c->oused[c->nopen++] = at;
		}
		free(old);
	}
	for (h = open_hash(c, src, sh, list, sseg);; h = (h + 1) & (unsigned)c->omask) {
		const struct tg_edge *ed;

		if (c->otab[h] < 0)
			return (int)h;
		ed = &c->g->edges[c->otab[h]];
		if (ed->src == src && ed->src_host == sh && ed->src_list == list &&
		    read_seg(ed) == sseg)
			return (int)h;
	}
}

/* Add a region of piece i of destination list dl to the edges: a whole
 * one joins the open edge from the same source segment if that began
 * fewer than 64 pieces before, else starts one. */
static int add_edge(struct ctx *c, const struct dinst *di, int dl, int dseg, int i,
		    const struct choice *ch, const struct box *region, bool whole, int64_t bytes)
{
	struct tgraph *g = c->g;
	const struct tg_list *tl = &g->lists[dl];
	int sseg = ch->src >= 0 && ch->rseg < 0 ? sseg_of(g, ch->list, ch->pos, ch->piece) : -1;
	int slot = -1;
	struct route rt = route_of(c, ch->src, ch->sh, di->dst, di->dh, ch->link);
	struct tg_edge *ed;

	c->load[rt.sport] += bytes / rt.bw;
	if (rt.dport != rt.sport)
		c->load[rt.dport] += bytes / rt.bw;
	/* the open edge is most often the last one made */
	ed = g->nedges > 0 ? &g->edges[g->nedges - 1] : NULL;
	if (!c->literal && whole && g->nedges > c->open0 && ed->whole && ed->src == ch->src &&
	    ed->src_host == ch->sh && ed->src_list == ch->list &&
	    read_seg(ed) == (ch->rseg >= 0 ? ch->rseg : sseg) && i - ed->first < 64 &&
	    (ch->rseg < 0 || c->rrun[i] == c->rrun[ed->first])) {
		ed->count = i - ed->first + 1;
		ed->mask |= (uint64_t)1 << (i - ed->first);
		ed->bytes += bytes;
		return 0;
	}
	if (whole) {
		if ((slot = open_slot(c, ch->src, ch->sh, ch->list, ch->rseg >= 0 ? ch->rseg : sseg)) < 0)
			return -1;
		if (c->otab[slot] >= 0 && i - g->edges[c->otab[slot]].first < 64 &&
		    (ch->rseg < 0 || c->rrun[i] == c->rrun[g->edges[c->otab[slot]].first])) {
			ed = &g->edges[c->otab[slot]];
			ed->count = i - ed->first + 1;
			ed->mask |= (uint64_t)1 << (i - ed->first);
			ed->bytes += bytes;
			return 0;
		}
	}
	if (grow(&g->edges, &c->ecap, g->nedges + 1, sizeof *g->edges))
		return -1;
	ed = &g->edges[g->nedges];
	*ed = (struct tg_edge){
		.model = tl->u->model, .kind = tl->l->kind, .src = ch->src, .dst = di->dst,
		.src_host = ch->sh, .dst_host = di->dh, .src_list = ch->list, .dst_list = dl,
		.first = i, .count = 1, .mask = 1, .whole = whole, .box = *region, .bytes = bytes,
		.link = ch->link, .sseg = sseg, .dseg = dseg, .rseg = ch->rseg,
	};
	if (whole) {
		if (c->otab[slot] < 0)
			c->oused[c->nopen++] = slot;
		c->otab[slot] = g->nedges;
	}
	g->nedges++;
	return 0;
}

static bool pieces_alike(const struct piece *a, const struct piece *b)
{
	return a->tensor == b->tensor && box_eq(&a->box, &b->box) &&
	       a->local_off == b->local_off && a->local_len == b->local_len && a->copy == b->copy;
}

/* Whether two lists hold the same pieces, laid out alike. */
static bool same_pieces(const struct emu_list *a, const struct emu_list *b)
{
	if (a->npieces != b->npieces)
		return false;
	for (size_t i = 0; a->pieces != b->pieces && i < a->npieces; i++)
		if (!pieces_alike(&a->pieces[i], &b->pieces[i]))
			return false;
	return true;
}

/* The reference of the A list that keeps piece i of list dl in place for
 * destination di, or -1: A holds the same box, with the same reserved
 * length, in the same model-stage and memory, on the same GPU, the *k-th
 * of the list's up holders. */
static int keeper(const struct ctx *c, const struct dinst *di, int dl, int i,
		  const struct atom *at, int nat, int *k)
{
	const struct tgraph *g = c->g;
	const struct tg_list *tl = &g->lists[dl];
	const struct piece *p = &tl->l->pieces[i];
	int s = tl->u->item == ITEM_GEN, en;

	/* an entry of its own tiling that is exactly the piece holds every atom */
	if (nat < 1 || (en = at[0].ent[s]) < 0 || !box_eq(&c->ent[en].box, &p->box))
		return -1;
	for (int r = c->ent[en].ref0; r < c->ent[en].ref0 + c->ent[en].nref; r++) {
		int l = c->ref[r].list;
		const struct tg_list *sl = &g->lists[l];
		const struct piece *q = &sl->l->pieces[c->ref[r].piece];

		*k = lower_bound(c->upg[l], c->nup[l], di->dst);
		if (sl->u->item == tl->u->item && sl->u->host == di->dh &&
		    q->local_len == p->local_len && *k < c->nup[l] && c->upg[l][*k] == di->dst)
			return r;
	}
	return -1;
}

/* Mark piece i of list dl kept in place by destination j, from piece q of
 * A list l on its k-th up holder. */
static void mark_kept(struct ctx *c, int dl, int j, int i, int l, int k, int q)
{
	struct tgraph *g = c->g;
	const struct tg_list *tl = &g->lists[dl], *sl = &g->lists[l];

	g->dseg[tl->seg0 + j * tl->nseg + tl->seg_of[i]].kept +=
		tl->l->pieces[i].local_len * tl->u->elem_bytes[tl->l->kind];
	g->sseg[sseg_of(g, l, c->uppos[l][k], q)].kept +=
		sl->l->pieces[q].local_len * sl->u->elem_bytes[sl->l->kind];
}

/* Whether destination j of list dl keeps piece i in place (keeper). */
static bool keep(struct ctx *c, const struct dinst *di, int dl, int j, int i,
		 const struct atom *at, int nat)
{
	int k, r;

	/* nothing of the same model-stage on the GPU: nothing kept there */
	if (!c->literal && !c->held[c->g->lists[dl].u->item * c->g->ngpus + di->dst])
		return false;
	if ((r = keeper(c, di, dl, i, at, nat, &k)) < 0)
		return false;
	mark_kept(c, dl, j, i, c->ref[r].list, k, c->ref[r].piece);
	return true;
}

/* Whether destination j of list dl keeps all of it in place: the A list
 * that keeps its first piece holds the same pieces (the layout has not
 * changed), and so keeps every one, as keep would find piece by piece. */
static bool keep_all(struct ctx *c, const struct dinst *di, int dl, int j)
{
	const struct tg_list *tl = &c->g->lists[dl];
	int i = 0, k, r, l;

	while (i < (int)tl->l->npieces && c->aoff[i + 1] == c->aoff[i])
		i++;
	if (i == (int)tl->l->npieces ||
	    (r = keeper(c, di, dl, i, c->lat + c->aoff[i], c->aoff[i + 1] - c->aoff[i], &k)) < 0 ||
	    c->ref[r].piece != i)
		return false;
	l = c->ref[r].list;
	if (c->same_for[l] != dl) {
		c->same_for[l] = dl;
		c->same[l] = same_pieces(c->g->lists[l].l, tl->l);
	}
	if (!c->same[l])
		return false;
	for (; i < (int)tl->l->npieces; i++)
		if (c->aoff[i + 1] > c->aoff[i])
			mark_kept(c, dl, j, i, l, k, i);
	return true;
}

/* The holder of all of piece p (its atoms at) from an entry of one tiling
 * that holds all of it; false when no entry does or none is up. */
static bool whole_choice(struct ctx *c, const struct dinst *di, const struct piece *p,
			 const struct atom *at, struct choice *w)
{
	for (int s = 0; s < NSLOTS; s++) {
		struct atom all = { .box = p->box };

		if (at[0].ent[s] < 0 || !box_contains(&c->ent[at[0].ent[s]].box, &p->box))
			continue;
		for (int k = 0; k < NSLOTS; k++)
			all.ent[k] = k == s ? at[0].ent[s] : -1;
		*w = choose(c, di, &all);
		return w->src >= 0;
	}
	return false;
}

/* Take every atom of piece p from one holder of all of it when one is no
 * further than the nearest holder of any atom: one edge instead of an
 * edge an atom, where atoms of another tiling would each have gone to
 * whichever holder was least loaded. */
static void whole_holder(struct ctx *c, const struct dinst *di, const struct piece *p,
			 const struct atom *at, struct choice *ch, int nat)
{
	enum tg_link nearest = TG_STORE;
	struct choice w;

	for (int a = 0; a < nat; a++)
		nearest = ch[a].link < nearest ? ch[a].link : nearest;
	if (!whole_choice(c, di, p, at, &w) || w.link > nearest)
		return;
	for (int a = 0; a < nat; a++) {
		ch[a] = w;
		ch[a].atom = a;
	}
}

/* The relay trees of destination list tl (tgraph.h), its atoms cut
 * (c->lat, c->aoff): its holders by node, its runs of pieces, how many
 * atoms of each piece A holds on each of the list's nodes, and how many
 * GPUs that are up hold the least held atom of each piece in A. */
static int relay_prepare(struct ctx *c, const struct tg_list *tl)
{
	const struct emu_list *l = tl->l;
	int n = l->ngpus, np = (int)l->npieces, nodes = 0;
	int64_t bytes = 0;

	if (grow(&c->rbuf, &c->rbufcap, 4 * n + 1, sizeof *c->rbuf))
		return -1;
	c->rnode = c->rbuf;
	c->rlead = c->rbuf + n;
	c->rstamp = c->rbuf + 2 * n + 1;
	c->rwhole = c->rbuf + 3 * n + 1;
	for (int j = 0; j < n; j++) {
		if (j == 0 || l->gpus[j] / c->gpn != l->gpus[j - 1] / c->gpn) {
			c->rlead[nodes] = j;
			c->rmap[l->gpus[j] / c->gpn] = nodes;
			c->rwhole[nodes] = -1;
			c->rstamp[nodes++] = -1;
		}
		c->rnode[j] = nodes - 1;
	}
	c->rnodes = nodes;
	c->rlead[nodes] = n;
	if (grow(&c->ron, &c->roncap, np * nodes, sizeof *c->ron) ||
	    grow(&c->rheld, &c->rheldcap, np, sizeof *c->rheld) ||
	    grow(&c->rrun, &c->rruncap, np, sizeof *c->rrun))
		return -1;
	/* Runs of pieces that one relay edge can carry share a tree; the
	 * runs' trees start from node after node, so that no one node
	 * gathers all the pieces A has cut.  An edge never carries pieces of
	 * two trees: it would wait on both, and two such edges can wait on
	 * each other. */
	for (int i = 0, run = 0; i < np; i++) {
		int64_t b = box_volume(&l->pieces[i].box) * tl->u->elem_bytes[l->kind];

		if (i > 0 && (bytes + b > c->relay_max || tl->seg_of[i] != tl->seg_of[i - 1])) {
			run++;
			bytes = 0;
		}
		bytes += b;
		c->rrun[i] = run;
	}
	memset(c->ron, 0, (size_t)np * (size_t)nodes * sizeof *c->ron);
	for (int i = 0; i < np; i++) {
		int nat = c->aoff[i + 1] - c->aoff[i], w = -1, wheld = 0, wt = ++c->rtick;
		const struct atom *at = &c->lat[c->aoff[i]];

		/* an entry holding all of the piece holds every atom on its
		 * nodes: counted once, not once an atom */
		c->rheld[i] = INT_MAX;
		for (int s = 0; s < NSLOTS && nat > 0 && w < 0; s++)
			if (at[0].ent[s] >= 0 &&
			    box_contains(&c->ent[at[0].ent[s]].box, &l->pieces[i].box))
				w = at[0].ent[s];
		if (w >= 0)
			for (int r = c->ent[w].ref0; r < c->ent[w].ref0 + c->ent[w].nref; r++) {
				int sl = c->ref[r].list;

				wheld += c->nup[sl];
				for (int p = 0; p < c->nupnode[sl]; p++) {
					int k = c->rmap[c->upnode[sl][p]];

					if (k >= 0 && c->rwhole[k] != wt) {
						c->rwhole[k] = wt;
						c->ron[i * nodes + k] = nat;
					}
				}
			}
		for (int a = 0; a < nat; a++) {
			int held = wheld;

			c->rtick++;
			for (int s = 0; s < NSLOTS; s++) {
				const struct src_ent *en;

				if (at[a].ent[s] < 0 || at[a].ent[s] == w)
					continue;
				en = &c->ent[at[a].ent[s]];
				for (int r = en->ref0; r < en->ref0 + en->nref; r++) {
					int sl = c->ref[r].list;

					held += c->nup[sl];
					for (int p = 0; p < c->nupnode[sl]; p++) {
						int k = c->rmap[c->upnode[sl][p]];

						if (k >= 0 && c->rwhole[k] != wt &&
						    c->rstamp[k] != c->rtick) {
							c->rstamp[k] = c->rtick;
							c->ron[i * nodes + k]++;
						}
					}
				}
			}
			c->rheld[i] = held < c->rheld[i] ? held : c->rheld[i];
		}
	}
	for (int j = 0; j < n; j++)
		c->rmap[l->gpus[j] / c->gpn] = -1;
	return 0;
}

/* Holder k of node d in the order of run ρ's tree there: it starts from
 * the node's (ρ mod size)-th holder, so that each run enters a node
 * through another GPU and its network port. */
static int relay_holder(const struct ctx *c, int d, int run, int k)
{
	int first = c->rlead[d], size = c->rlead[d + 1] - first;

	return first + (k + run) % size;
}

/* The holder that holder j of the list in hand takes piece i from, or -1
 * when it takes the piece from A: within the node when A does not hold
 * all of it there; across nodes when, besides, some part of it is on
 * fewer GPUs than the list has nodes (else A's holders fan out evenly). */
static int relay_parent(const struct ctx *c, int j, int i, int nat)
{
	int n = c->rnodes, run = c->rrun[i], root = run % n, d = c->rnode[j];
	int size = c->rlead[d + 1] - c->rlead[d];
	int m = (j - c->rlead[d] - run % size + size) % size, k = (d - root + n) % n, p, ps;

	if (c->ron[i * n + d] == nat)
		return -1;
	if (m > 0) /* a binary tree from the GPU the run enters the node by */
		return relay_holder(c, d, run, (m - 1) / 2);
	if (k == 0 || c->rheld[i] >= n)
		return -1;
	/* node (k - 1) / 2 of the run's tree: the two holders the run reaches
	 * first there after the one it enters by, one for each child node, so
	 * that a run crosses a node in one NVLink hop */
	p = ((k - 1) / 2 + root) % n;
	ps = c->rlead[p + 1] - c->rlead[p];
	return relay_holder(c, p, run, ps > 2 ? 1 + (k - 1) % 2 : ps - 1);
}

/* The one atom of piece p, without a search, when in every tiling s that
 * holds its tensor p lies inside the piece of the same tensor that A list
 * hint[2 s] holds (the boxes of one tiling meet only if equal, so no
 * other entry meets p); false when not.  Pieces in a row most often lie
 * inside pieces of the same lists, in a row too: hint[2 s + 1] is the
 * piece the last one lay in. */
static bool atom_by_hint(struct ctx *c, int bucket0, const struct piece *p, int *hint,
			 struct atom *at)
{
	for (int s = 0; s < NSLOTS; s++) {
		const struct tg_list *sl;
		const struct piece *q;

		at->ent[s] = -1;
		if (c->bk[bucket0 + s].nent == 0)
			continue;
		if (hint[2 * s] < 0)
			return false;
		sl = &c->g->lists[hint[2 * s]];
		/* the next piece of the hint first: both lists go in tensor order */
		q = hint[2 * s + 1] + 1 < (int)sl->l->npieces ? &sl->l->pieces[hint[2 * s + 1] + 1]
							      : NULL;
		if (!q || q->tensor != p->tensor)
			q = tgraph_find_piece(sl, p->tensor);
		if (bucket_of(c, sl->u, sl->l->kind, p->tensor) != bucket0 + s || !q ||
		    !box_contains(&q->box, &p->box) ||
		    (at->ent[s] = c->entof[c->entof0[hint[2 * s]] + (int)(q - sl->l->pieces)]) < 0)
			return false;
		hint[2 * s + 1] = (int)(q - sl->l->pieces);
	}
	at->box = p->box;
	return true;
}

/* Every holder of destination list dl: keep, or take each atom of each
 * piece from its holder.  A list's atoms are cut once for all its
 * holders. */
static int list_edges(struct ctx *c, int dl, struct dinst *di)
{
	struct tgraph *g = c->g;
	const struct tg_list *tl = &g->lists[dl];
	const struct emu_list *l = tl->l;
	int eb = tl->u->elem_bytes[l->kind], nlat = 0, hint[2 * NSLOTS] = { -1, -1, -1, -1 };
	struct choice *ch = NULL;
	int chcap = 0;
	bool relays = l->ngpus > 1 && !tl->u->host;

	if (grow(&c->aoff, &c->aoffcap, (int)l->npieces + 1, sizeof *c->aoff))
		return -1;
	for (size_t i = 0; i < l->npieces; i++) {
		const struct piece *p = &l->pieces[i];
		int nat = 0, b0 = bucket_of(c, tl->u, l->kind, p->tensor) / NSLOTS * NSLOTS;

		c->aoff[i] = nlat;
		if (box_volume(&p->box) == 0)
			continue;
		if (grow(&c->lat, &c->latcap, nlat + 1, sizeof *c->lat))
			return -1;
		if (!c->literal && atom_by_hint(c, b0, p, hint, &c->lat[nlat])) {
			nlat++;
			continue;
		}
		if ((nat = atoms_of(c, b0, &p->box)) < 0 ||
		    grow(&c->lat, &c->latcap, nlat + nat, sizeof *c->lat))
			return -1;
		memcpy(c->lat + nlat, c->at, (size_t)nat * sizeof *c->lat);
		for (int s = 0; s < NSLOTS && nat > 0; s++)
			if (c->at[0].ent[s] >= 0) {
				const struct src_ref *r = &c->ref[c->ent[c->at[0].ent[s]].ref0];

				hint[2 * s] = r->list;
				hint[2 * s + 1] = r->piece;
			}
		nlat += nat;
	}
	c->aoff[l->npieces] = nlat;
	if (relays && relay_prepare(c, tl))
		return -1;
	for (int j = 0; j < l->ngpus; j++) {
		int cur = -1, par;
		struct choice w;

		di->dst = l->gpus[j];
		di->dh = tl->u->host;
		if (!c->literal && keep_all(c, di, dl, j))
			continue;
		c->stamp++;
		for (int k = 0; k < RECENT; k++)
			di->recent[k] = -1;
		for (size_t i = 0; i < l->npieces; i++) {
			const struct piece *p = &l->pieces[i];
			const struct atom *at = c->lat + c->aoff[i];
			int nat = c->aoff[i + 1] - c->aoff[i];
			int dseg = tl->seg0 + j * tl->nseg + tl->seg_of[i];

			if (nat == 0)
				continue;
			if (dseg != cur) {
				open_clear(c);
				cur = dseg;
			}
			if (keep(c, di, dl, j, (int)i, at, nat))
				continue;
			if (relays && (par = relay_parent(c, j, (int)i, nat)) >= 0) {
				struct choice rc = {
					l->gpus[par], false, dl, (int)i, par,
					c->rnode[par] == c->rnode[j] ? TG_INTRA : TG_INTER, -1,
					tl->seg0 + par * tl->nseg + tl->seg_of[i],
				};

				if (add_edge(c, di, dl, dseg, (int)i, &rc, &p->box, true,
					     box_volume(&p->box) * eb))
					goto oom;
				continue;
			}
			/* No atom comes from nearer than a holder of the whole
			 * piece on this GPU, or than any when A holds nothing of
			 * the piece on this node: whole_holder's answer, without
			 * choosing a holder for every atom first. */
			if (!c->literal && nat > 1 && whole_choice(c, di, p, at, &w) &&
			    (w.link == TG_LOCAL ||
			     (relays && c->ron[i * c->rnodes + c->rnode[j]] == 0))) {
				remember(di->recent, w.src * 2 + w.sh);
				if (add_edge(c, di, dl, dseg, (int)i, &w, &p->box, true,
					     box_volume(&p->box) * eb))
					goto oom;
				continue;
			}
			if (grow(&ch, &chcap, nat, sizeof *ch))
				goto oom;
			for (int a = 0; a < nat; a++) {
				ch[a] = choose(c, di, &at[a]);
				ch[a].atom = a;
				if (ch[a].src >= 0)
					remember(di->recent, ch[a].src * 2 + ch[a].sh);
			}
			if (nat == 1 && !c->literal) {
				/* one atom is the whole piece, from one holder */
				if (add_edge(c, di, dl, dseg, (int)i, &ch[0], &p->box, true,
					     box_volume(&p->box) * eb))
					goto oom;
				continue;
			}
			if (nat > 1)
				whole_holder(c, di, p, at, ch, nat);
			/* Group the atoms by holder; a holder that gives all it
			 * shares with the piece gives it as a whole. */
			if (nat > 1 && !choices_sorted(ch, nat))
				qsort(ch, (size_t)nat, sizeof *ch, cmp_choice);
			for (int a = 0, b; a < nat; a = b) {
				int64_t vol = 0;
				struct box x = p->box;

				for (b = a; b < nat && same_holder(&ch[a], &ch[b]); b++)
					vol += box_volume(&at[ch[b].atom].box);
				if (ch[a].src >= 0)
					box_intersect(&p->box,
						      &g->lists[ch[a].list].l->pieces[ch[a].piece].box, &x);
				if (vol == box_volume(&x)) {
					if (add_edge(c, di, dl, dseg, (int)i, &ch[a], &x, true, vol * eb))
						goto oom;
					continue;
				}
				for (int k = a; k < b; k++)
					if (add_edge(c, di, dl, dseg, (int)i, &ch[k], &at[ch[k].atom].box,
						     false, box_volume(&at[ch[k].atom].box) * eb))
						goto oom;
			}
		}
	}
	open_clear(c);
	free(ch);
	return 0;
oom:
	free(ch);
	return -1;
}

/* --- twins ------------------------------------------------------------------- */

/* Many lists are laid out alike: Adam's m and v have the master weights'
 * pieces on the same GPUs, with FSDP the weights too (in half the bytes),
 * and two frozen models of one shape (reference and reward) the same
 * pieces.  When two groups of lists (an EMU's lists of one kind) are
 * alike in A and in B, the later group's edges are the earlier's with the
 * model, kind, lists and bytes changed: its entries of the index have the
 * same holders, so every choice is the same but for the holders' loads,
 * which the earlier group's choices spread already.  The index and the
 * edges are then built for the one group.  The actor's weights are never
 * a twin: the engines share their tiling. */

/* Lists alike: the same pieces on the same GPUs in the same memory, cut
 * into the same segments; in other element bytes only when nothing relays
 * them (relay runs go by bytes). */
static bool lists_alike(const struct tg_list *x, const struct tg_list *y)
{
	const struct emu_list *a = x->l, *b = y->l;

	if (a->ngpus != b->ngpus || x->u->host != y->u->host || x->nseg != y->nseg ||
	    memcmp(a->gpus, b->gpus, (size_t)a->ngpus * sizeof *a->gpus) != 0 ||
	    memcmp(x->seg_first, y->seg_first, (size_t)(x->nseg + 1) * sizeof *x->seg_first) != 0)
		return false;
	if (x->u->elem_bytes[a->kind] != y->u->elem_bytes[b->kind] && a->ngpus > 1)
		return false;
	return same_pieces(a, b);
}

/* The groups of one side: the first list of each EMU's kind and their
 * count. */
struct groups {
	int first[MAX_ITEMS][NKINDS], n[MAX_ITEMS][NKINDS];
};

static void find_groups(const struct tgraph *g, int from, int to, const struct emu_set *s,
			struct groups *gr)
{
	memset(gr->n, 0, sizeof gr->n);
	for (int l = from; l < to; l++) {
		int i = (int)(g->lists[l].u - s->u), k = (int)g->lists[l].l->kind;

		if (gr->n[i][k]++ == 0)
			gr->first[i][k] = l;
	}
}

static bool groups_alike(const struct tgraph *g, const struct groups *gr, int i, int k, int i2,
			 int k2)
{
	int n = gr->n[i][k];

	if (n != gr->n[i2][k2])
		return false;
	for (int x = 0; x < n; x++)
		if (!lists_alike(&g->lists[gr->first[i][k] + x], &g->lists[gr->first[i2][k2] + x]))
			return false;
	return true;
}

/* Whether the engines share the tiling of EMU i's kind k. */
static bool engine_tiled(const struct emu_set *s, int i, int k)
{
	const struct emu *gen = &s->u[s->n - 1];

	return s->u[i].item == ITEM_GEN || (k == KIND_WEIGHT && s->u[i].model == gen->model);
}

/* Which groups of B copy an earlier group's edges, and which lists of A
 * serve them. */
static int find_twins(struct ctx *c)
{
	struct tgraph *g = c->g;
	struct groups ga, gb;

	c->twin = malloc((size_t)(g->nlists + 1) * sizeof *c->twin);
	c->ashift = calloc((size_t)(g->nlists + 1), sizeof *c->ashift);
	c->e0 = calloc((size_t)(g->nlists - g->na + 1), sizeof *c->e0);
	if (!c->twin || !c->ashift || !c->e0)
		return -1;
	memset(c->twin, -1, (size_t)(g->nlists + 1) * sizeof *c->twin);
	if (c->literal || g->a.n != g->b.n || g->b.n < 1)
		return 0;
	find_groups(g, 0, g->na, &g->a, &ga);
	find_groups(g, g->na, g->nlists, &g->b, &gb);
	for (int i = 0; i < g->b.n; i++)
		for (int k = 0; k < NKINDS; k++) {
			if (gb.n[i][k] == 0 || engine_tiled(&g->b, i, k))
				continue;
			for (int t = 0; t <= i * NKINDS + k - 1; t++) {
				int i2 = t / NKINDS, k2 = t % NKINDS;

				if (gb.n[i2][k2] == 0 || engine_tiled(&g->b, i2, k2) ||
				    c->twin[gb.first[i2][k2]] >= 0 ||
				    !groups_alike(g, &gb, i, k, i2, k2) ||
				    ga.n[i][k] != ga.n[i2][k2] ||
				    (ga.n[i][k] && !groups_alike(g, &ga, i, k, i2, k2)))
					continue;
				for (int x = 0; x < gb.n[i][k]; x++) {
					c->twin[gb.first[i][k] + x] = gb.first[i2][k2] + x;
					c->ashift[gb.first[i][k] + x] =
						ga.n[i][k] ? ga.first[i][k] - ga.first[i2][k2] : 0;
				}
				for (int x = 0; x < ga.n[i][k]; x++)
					c->twin[ga.first[i][k] + x] = ga.first[i2][k2] + x;
				break;
			}
		}
	return 0;
}

/* Bytes of list l's elements per byte of list t's. */
static double byte_ratio(const struct tgraph *g, int l, int t)
{
	const struct tg_list *x = &g->lists[l], *y = &g->lists[t];

	return (double)x->u->elem_bytes[x->l->kind] / y->u->elem_bytes[y->l->kind];
}

/* The edges of list dl: its twin's, with its model, kind, lists and
 * bytes. */
static int copy_edges(struct ctx *c, int dl)
{
	struct tgraph *g = c->g;
	int from = c->twin[dl], e0 = c->e0[from - g->na], e1 = c->e0[from - g->na + 1];
	const struct tg_list *tl = &g->lists[dl], *fl = &g->lists[from];
	int dshift = tl->seg0 - fl->seg0;
	double ratio = byte_ratio(g, dl, from);

	if (grow(&g->edges, &c->ecap, g->nedges + (e1 - e0), sizeof *g->edges))
		return -1;
	for (int x = e0; x < e1; x++) {
		struct tg_edge *ed = &g->edges[g->nedges++];
		struct route rt;

		*ed = g->edges[x];
		ed->model = tl->u->model;
		ed->kind = tl->l->kind;
		ed->dst_list = dl;
		ed->dseg += dshift;
		ed->bytes = (int64_t)(ed->bytes * ratio);
		if (ed->rseg >= 0) {
			ed->src_list += dl - from;
			ed->rseg += dshift;
		} else if (ed->src_list >= 0) {
			int sl = ed->src_list + c->ashift[dl];

			ed->sseg += g->lists[sl].seg0 - g->lists[ed->src_list].seg0;
			ed->src_list = sl;
		}
		rt = route_of(c, ed->src, ed->src_host, ed->dst, ed->dst_host, ed->link);
		c->load[rt.sport] += ed->bytes / rt.bw;
		if (rt.dport != rt.sport)
			c->load[rt.dport] += ed->bytes / rt.bw;
	}
	for (int k = 0; k < tl->nseg * tl->l->ngpus; k++)
		g->dseg[tl->seg0 + k].kept = (int64_t)(g->dseg[fl->seg0 + k].kept * ratio);
	return 0;
}

/* A's segments of a copied group keep what its twin's keep. */
static void copy_kept(struct tgraph *g, const int *twin)
{
	for (int l = 0; l < g->na; l++) {
		const struct tg_list *tl = &g->lists[l];
		double ratio;

		if (twin[l] < 0)
			continue;
		ratio = byte_ratio(g, l, twin[l]);
		for (int k = 0; k < tl->nseg * tl->l->ngpus; k++)
			g->sseg[tl->seg0 + k].kept =
				(int64_t)(g->sseg[g->lists[twin[l]].seg0 + k].kept * ratio);
	}
}

/* --- lists and segments ------------------------------------------------------- */

static int add_lists(struct tgraph *g, const struct emu_set *s, int64_t seg_max, int *nseg)
{
	for (int i = 0; i < s->n; i++)
		for (int k = 0; k < s->u[i].nlists; k++) {
			struct tg_list *tl = &g->lists[g->nlists++];
			const struct emu_list *l = &s->u[i].lists[k];
			int eb = s->u[i].elem_bytes[l->kind];
			int64_t at = 0;

			tl->u = &s->u[i];
			tl->l = l;
			tl->seg_first = malloc((l->npieces + 1) * sizeof *tl->seg_first);
			tl->seg_of = malloc((l->npieces + 1) * sizeof *tl->seg_of);
			if (!tl->seg_first || !tl->seg_of)
				return -1;
			for (size_t p = 0; p < l->npieces; p++) {
				int64_t b = l->pieces[p].local_len * eb;

				if (tl->nseg == 0 || (at > 0 && at + b > seg_max)) {
					tl->seg_first[tl->nseg++] = (int)p;
					at = 0;
				}
				at += b;
				tl->seg_of[p] = tl->nseg - 1;
			}
			tl->seg_first[tl->nseg] = (int)l->npieces;
			tl->seg0 = *nseg;
			*nseg += tl->nseg * l->ngpus;
		}
	return 0;
}

static void fill_segs(struct tgraph *g, int from, int to, struct tg_seg *seg)
{
	for (int li = from; li < to; li++) {
		const struct tg_list *tl = &g->lists[li];
		int eb = tl->u->elem_bytes[tl->l->kind];

		for (int pos = 0; pos < tl->l->ngpus; pos++)
			for (int s = 0; s < tl->nseg; s++) {
				struct tg_seg *sg = &seg[tl->seg0 + pos * tl->nseg + s];

				sg->gpu = tl->l->gpus[pos];
				sg->host = tl->u->host;
				sg->list = li;
				sg->pos = pos;
				sg->first = tl->seg_first[s];
				sg->count = tl->seg_first[s + 1] - tl->seg_first[s];
				sg->bytes = 0;
				for (int p = sg->first; p < sg->first + sg->count; p++)
					sg->bytes += tl->l->pieces[p].local_len * eb;
			}
	}
}

/* --- the schedule -------------------------------------------------------------- */

struct pair {
	int sport, dport;
	double bw;
	int head, tail;            /* ready edges, in order */
	int64_t ready;
	bool active;
	int at[2];                 /* its place among sport's and dport's active pairs */
};

/* A link's active pairs; a round looks at no more than PORT_LOOK of
 * them, from where it left off, so that dense graphs stay fast. */
#define PORT_LOOK 32
struct port {
	int *pairs, n, cap;
	int cursor;
	int live;                  /* its place among the ports with active pairs, -1 none */
};

struct ework {
	struct route rt;
	int64_t left;
	int next;                  /* next in its pair's queue */
	int deps;                  /* a relay: edges into its pieces on src not yet done */
	bool ready, done;
};

struct portload {
	double load;
	int port;
};

struct sched {
	struct ctx *c;
	struct tgraph *g;
	int nports;
	struct ework *ew;
	int ewcap;
	struct pair *pairs;
	int npairs, pcap;
	int *htab, hmask;          /* (sport, dport) → pair */
	struct port *port;
	int *busy;                 /* per port: the last round that used it… */
	double *spent;             /* …and the seconds it was busy in that round */
	int *live, nlive;          /* ports with active pairs */
	struct portload *order;    /* and as many more, to sort them */
	int64_t *used;
	bool *alloc, *freed, *staged, *stage_done;
	int *spend;                /* edges left out of each source segment */
	int *din0, *din, *sout0, *sout; /* edges by segment */
	int ne0, *after0, *after;  /* relays by the edges they wait on, for the first ne0 */
	int *gd0, *gd, *gs0, *gs;  /* device segments by GPU */
	bool *touch;
	int *touched, ntouched;
	int *done, ndone_round, dcap;
	int ndone;
	int scap, rcap, mcap, stcap;
};

static int add_step(struct sched *s, enum tg_step_kind k, int index)
{
	struct tgraph *g = s->g;

	if (grow(&g->steps, &s->scap, g->nsteps + 1, sizeof *g->steps))
		return -1;
	g->steps[g->nsteps++] = (struct tg_step){ k, index };
	return 0;
}

static void touch(struct sched *s, int gpu)
{
	if (!s->touch[gpu]) {
		s->touch[gpu] = true;
		s->touched[s->ntouched++] = gpu;
	}
}

static int pair_of(struct sched *s, const struct route *rt)
{
	int64_t key = (int64_t)rt->sport * s->nports + rt->dport;
	int h = (int)(((uint64_t)key * 0x9E3779B97F4A7C15ull) >> 33) & s->hmask;
	struct pair *q;

	while (s->htab[h] >= 0) {
		q = &s->pairs[s->htab[h]];
		if (q->sport == rt->sport && q->dport == rt->dport)
			return s->htab[h];
		h = (h + 1) & s->hmask;
	}
	if (s->npairs * 2 >= s->hmask) /* the table is sized for every edge */
		return -1;
	if (grow(&s->pairs, &s->pcap, s->npairs + 1, sizeof *s->pairs))
		return -1;
	q = &s->pairs[s->npairs];
	*q = (struct pair){ rt->sport, rt->dport, rt->bw, -1, -1, 0, false, { -1, -1 } };
	s->htab[h] = s->npairs;
	return s->npairs++;
}

/* Pair q joins (on) or leaves its links' active pairs. */
static int port_set(struct sched *s, int q, bool on)
{
	struct pair *x = &s->pairs[q];

	for (int k = 0; k < 1 + (x->dport != x->sport); k++) {
		int p = k ? x->dport : x->sport;
		struct port *pt = &s->port[p];

		if (on) {
			if (grow(&pt->pairs, &pt->cap, pt->n + 1, sizeof *pt->pairs))
				return -1;
			x->at[k] = pt->n;
			pt->pairs[pt->n++] = q;
			if (pt->n == 1) {
				pt->live = s->nlive;
				s->live[s->nlive++] = p;
			}
			continue;
		}
		{
			int last = pt->pairs[--pt->n], i = x->at[k];
			struct pair *y = &s->pairs[last];

			pt->pairs[i] = last;
			y->at[y->sport == p ? 0 : 1] = i;
			if (pt->n == 0) {
				int moved = s->live[--s->nlive];

				s->live[pt->live] = moved;
				s->port[moved].live = pt->live;
				pt->live = -1;
			}
		}
	}
	return 0;
}

/* A source is there: on its GPU, in the store, or staged and arrived in
 * host memory. */
static bool src_ready(const struct sched *s, int e)
{
	const struct tg_edge *ed = &s->g->edges[e];

	return s->ew[e].deps == 0 &&
	       (ed->sseg < 0 || ed->staging || !s->staged[ed->sseg] || s->stage_done[ed->sseg]);
}

static int make_ready(struct sched *s, int e)
{
	struct ework *w = &s->ew[e];
	struct pair *p;
	int q;

	if (w->ready || w->done)
		return 0;
	if ((q = pair_of(s, &w->rt)) < 0)
		return -1;
	p = &s->pairs[q];
	w->ready = true;
	w->next = -1;
	if (p->tail >= 0)
		s->ew[p->tail].next = e;
	else
		p->head = e;
	p->tail = e;
	p->ready += w->left;
	if (!p->active) {
		p->active = true;
		return port_set(s, q, true);
	}
	return 0;
}

/* Allocate on gpu what fits, first fit in list order. */
static int alloc_pass(struct sched *s, int gpu)
{
	struct tgraph *g = s->g;

	for (int k = s->gd0[gpu]; k < s->gd0[gpu + 1]; k++) {
		int d = s->gd[k];

		if (s->alloc[d] || s->used[gpu] + g->dseg[d].bytes > g->capacity)
			continue;
		s->alloc[d] = true;
		s->used[gpu] += g->dseg[d].bytes;
		if (s->used[gpu] > g->peak[gpu])
			g->peak[gpu] = s->used[gpu];
		if (add_step(s, TG_ALLOC, d))
			return -1;
		for (int i = s->din0[d]; i < s->din0[d + 1]; i++)
			if (src_ready(s, s->din[i]) && make_ready(s, s->din[i]))
				return -1;
	}
	return 0;
}

static int free_seg(struct sched *s, int sg)
{
	struct tg_seg *x = &s->g->sseg[sg];

	s->freed[sg] = true;
	if (x->host || x->bytes == 0 || !s->c->v->cl->up[x->gpu])
		return 0;
	s->used[x->gpu] -= x->bytes;
	touch(s, x->gpu);
	return add_step(s, TG_FREE, sg);
}

static void set_route(struct sched *s, int e, double sign)
{
	const struct tg_edge *ed = &s->g->edges[e];
	struct ework *w = &s->ew[e];
	double *load = s->c->load;

	w->rt = route_of(s->c, ed->src, ed->src_host, ed->dst, ed->dst_host, ed->link);
	load[w->rt.sport] += sign * w->left / w->rt.bw;
	if (w->rt.dport != w->rt.sport)
		load[w->rt.dport] += sign * w->left / w->rt.bw;
}

/* Move source segment sg of gpu to host memory: an edge of its own, after
 * which the segment is freed and its edges leave from host memory. */
static int stage_seg(struct sched *s, int gpu, int sg)
{
	struct tgraph *g = s->g;
	const struct tg_seg *x = &g->sseg[sg];
	const struct tg_list *tl = &g->lists[x->list];
	int e = g->nedges;

	if (grow(&g->edges, &s->c->ecap, e + 1, sizeof *g->edges) ||
	    grow(&s->ew, &s->ewcap, e + 1, sizeof *s->ew) ||
	    grow(&g->stages, &s->stcap, g->nstages + 1, sizeof *g->stages))
		return -1;
	g->edges[e] = (struct tg_edge){
		.model = tl->u->model, .kind = tl->l->kind, .src = gpu, .dst = gpu,
		.dst_host = true, .src_list = x->list, .dst_list = -1, .first = x->first,
		.count = x->count, .whole = true, .bytes = x->bytes, .link = TG_HOST,
		.sseg = sg, .dseg = -1, .rseg = -1, .staging = true,
	};
	g->nedges++;
	s->ew[e] = (struct ework){ .left = x->bytes, .next = -1 };
	set_route(s, e, 1);
	g->stages[g->nstages++] = (struct tg_stage){ sg, e, -1 };
	s->staged[sg] = true;
	for (int i = s->sout0[sg]; i < s->sout0[sg + 1]; i++) {
		int f = s->sout[i];
		struct tg_edge *ed = &g->edges[f];

		if (s->ew[f].done)
			continue;
		set_route(s, f, -1);
		ed->staged = ed->src_host = true;
		if (ed->dst / s->c->gpn != gpu / s->c->gpn)
			ed->link = TG_INTER;
		else
			ed->link = ed->dst_host ? TG_LOCAL : TG_HOST;
		set_route(s, f, 1);
	}
	return make_ready(s, e);
}

/* Nothing can move: every GPU that waits to allocate is full of sources
 * waiting on other such GPUs.  Stage sources of each until its smallest
 * waiting segment fits.  Returns the segments staged. */
static int stage(struct sched *s)
{
	struct tgraph *g = s->g;
	int staged = 0;

	for (int gpu = 0; gpu < g->ngpus; gpu++) {
		int64_t need = -1, room = (int64_t)g->capacity - s->used[gpu];

		for (int k = s->gd0[gpu]; k < s->gd0[gpu + 1]; k++)
			if (!s->alloc[s->gd[k]] && (need < 0 || g->dseg[s->gd[k]].bytes < need))
				need = g->dseg[s->gd[k]].bytes;
		while (need > room) {
			int best = -1;

			for (int k = s->gs0[gpu]; k < s->gs0[gpu + 1]; k++) {
				int sg = s->gs[k];

				if (!s->freed[sg] && !s->staged[sg] && s->spend[sg] > 0 &&
				    g->sseg[sg].bytes > 0 &&
				    (best < 0 || g->sseg[sg].bytes > g->sseg[best].bytes))
					best = sg;
			}
			if (best < 0)
				break;
			if (stage_seg(s, gpu, best))
				return -1;
			room += g->sseg[best].bytes;
			staged++;
		}
	}
	return staged;
}

static bool busier(const struct portload *a, const struct portload *b)
{
	return a->load != b->load ? a->load > b->load : a->port < b->port;
}

/* Sort o[0, n), the busiest first, by merging runs through tmp: a round
 * sorts thousands of links, which qsort's calls through a pointer make
 * a good part of the schedule's time. */
static void sort_ports(struct portload *o, struct portload *tmp, int n)
{
	struct portload *from = o, *to = tmp, *t;

	for (int w = 1; w < n; w *= 2) {
		for (int lo = 0; lo < n; lo += 2 * w) {
			int mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
			int i = lo, j = mid, k = lo;

			while (i < mid && j < hi)
				to[k++] = busier(&from[j], &from[i]) ? from[j++] : from[i++];
			while (i < mid)
				to[k++] = from[i++];
			while (j < hi)
				to[k++] = from[j++];
		}
		t = from;
		from = to;
		to = t;
	}
	if (from != o)
		memcpy(o, from, (size_t)n * sizeof *o);
}

/* Move up to quota bytes over pair q; completed edges go to s->done.
 * Returns the bytes moved, -1 when out of memory. */
static int64_t transfer(struct sched *s, int q, int64_t quota)
{
	struct tgraph *g = s->g;
	struct pair *p = &s->pairs[q];
	double *load = s->c->load;
	int64_t moved = 0;
	struct tg_round *rd = &g->rounds[g->nrounds];

	while (quota > 0 && p->head >= 0) {
		int e = p->head;
		struct ework *w = &s->ew[e];
		int64_t take = w->left < quota ? w->left : quota;

		if (grow(&g->moves, &s->mcap, g->nmoves + 1, sizeof *g->moves))
			return -1;
		g->moves[g->nmoves++] = (struct tg_move){ e, g->edges[e].bytes - w->left, take };
		w->left -= take;
		quota -= take;
		moved += take;
		if (w->left == 0) {
			p->head = w->next;
			if (p->head < 0)
				p->tail = -1;
			if (grow(&s->done, &s->dcap, s->ndone_round + 1, sizeof *s->done))
				return -1;
			s->done[s->ndone_round++] = e;
		}
	}
	p->ready -= moved;
	load[p->sport] -= moved / p->bw;
	if (p->dport != p->sport)
		load[p->dport] -= moved / p->bw;
	if (p->ready == 0) {
		p->active = false;
		port_set(s, q, false);
	}
	rd->transfers++;
	rd->bytes += moved;
	return moved;
}

/* After a round: staged segments arrive in host memory and are freed;
 * sources whose last edge is done are freed; what now fits is allocated. */
static int settle(struct sched *s)
{
	struct tgraph *g = s->g;

	for (int i = 0; i < s->ndone_round; i++) {
		int e = s->done[i], sg = g->edges[e].sseg;

		s->ew[e].done = true;
		s->ndone++;
		if (g->edges[e].staging) {
			for (int k = 0; k < g->nstages; k++)
				if (g->stages[k].edge == e)
					g->stages[k].round = g->nrounds - 1;
			s->stage_done[sg] = true;
			g->rounds[g->nrounds - 1].staging = true;
			if (free_seg(s, sg))
				return -1;
			for (int k = s->sout0[sg]; k < s->sout0[sg + 1]; k++) {
				int f = s->sout[k], d = g->edges[f].dseg;

				if ((d < 0 || s->alloc[d]) && make_ready(s, f))
					return -1;
			}
		} else if (sg >= 0 && --s->spend[sg] == 0 && !s->staged[sg] && free_seg(s, sg)) {
			return -1;
		}
		if (e >= s->ne0)
			continue; /* a staging edge: no relay waits on it */
		for (int k = s->after0[e]; k < s->after0[e + 1]; k++) {
			int r = s->after[k];

			if (--s->ew[r].deps == 0 && s->alloc[g->edges[r].dseg] && make_ready(s, r))
				return -1;
		}
	}
	s->ndone_round = 0;
	for (int i = 0; i < s->ntouched; i++) {
		s->touch[s->touched[i]] = false;
		if (alloc_pass(s, s->touched[i]))
			return -1;
	}
	s->ntouched = 0;
	return 0;
}

/* Relays that wait on edge e: a link serves such edges first, since
 * every relay is a transfer some other link cannot start before. */
static int relays_waiting(const struct sched *s, int e)
{
	return e >= 0 && e < s->ne0 ? s->after0[e + 1] - s->after0[e] : 0;
}

/* The seconds port p may still be busy in round r. */
static double room(const struct sched *s, int p, int r)
{
	return s->busy[p] == r ? s->g->quantum_s - s->spent[p] : s->g->quantum_s;
}

static void spend(struct sched *s, int p, int r, double t)
{
	if (s->busy[p] != r) {
		s->busy[p] = r;
		s->spent[p] = 0;
	}
	s->spent[p] += t;
}

/* One round of one quantum: every link with ready work, the most loaded
 * first, takes the ready pairs whose other end has time left, those whose
 * next edge relays wait on first, then the most loaded, until its quantum
 * is spent. */
static int round_once(struct sched *s)
{
	struct tgraph *g = s->g;
	double *load = s->c->load, longest = 0, full = g->quantum_s * 1e-6;
	int r = g->nrounds, np = s->nlive;

	if (grow(&g->rounds, &s->rcap, r + 1, sizeof *g->rounds))
		return -1;
	g->rounds[r] = (struct tg_round){ 0, 0, 0, g->nmoves, 0, false };
	for (int i = 0; i < np; i++)
		s->order[i] = (struct portload){ load[s->live[i]], s->live[i] };
	sort_ports(s->order, s->order + s->nports, np);
	for (int i = 0; i < np; i++) {
		int p = s->order[i].port;
		struct port *pt = &s->port[p];

		while (pt->n > 0 && room(s, p, r) > full) {
			int best = -1, look = pt->n < PORT_LOOK ? pt->n : PORT_LOOK;
			int start = pt->cursor % pt->n, other, best_waits = -1;
			double best_load = -1, t;
			int64_t moved;

			for (int k = 0; k < look; k++) {
				int q = pt->pairs[(start + k) % pt->n];
				const struct pair *x = &s->pairs[q];
				int o = x->sport == p ? x->dport : x->sport;
				double ol = o == p ? 0 : load[o];
				int waits = relays_waiting(s, x->head);

				if ((o != p && room(s, o, r) <= full) || waits < best_waits ||
				    (waits == best_waits && ol <= best_load))
					continue;
				best = q;
				best_waits = waits;
				best_load = ol;
			}
			pt->cursor = start + look;
			if (best < 0)
				break;
			other = s->pairs[best].sport == p ? s->pairs[best].dport : s->pairs[best].sport;
			t = fmin(room(s, p, r), room(s, other, r));
			moved = transfer(s, best, (int64_t)fmax(1, t * s->pairs[best].bw));
			if (moved < 0)
				return -1;
			t = (double)moved / s->pairs[best].bw;
			spend(s, p, r, t);
			if (other != p)
				spend(s, other, r, t);
			longest = fmax(longest, fmax(s->spent[p], s->spent[other]));
		}
	}
	g->rounds[r].seconds = longest + s->c->v->k->allreduce_lat_s;
	g->rounds[r].nmoves = g->nmoves - g->rounds[r].move0;
	g->nrounds++;
	if (add_step(s, TG_ROUND, r))
		return -1;
	return settle(s);
}

/* Edges by segment and segments by GPU, as index arrays. */
static int *csr(int n, const int *key, int nkeys, int **first)
{
	int *idx = malloc((size_t)(n ? n : 1) * sizeof *idx), *at;

	*first = calloc((size_t)nkeys + 2, sizeof **first);
	at = malloc((size_t)(nkeys + 1) * sizeof *at);
	if (!idx || !*first || !at) {
		free(idx);
		free(at);
		return NULL;
	}
	for (int i = 0; i < n; i++)
		if (key[i] >= 0)
			(*first)[key[i] + 1]++;
	for (int k = 0; k < nkeys; k++)
		(*first)[k + 1] += (*first)[k];
	memcpy(at, *first, (size_t)(nkeys + 1) * sizeof *at);
	for (int i = 0; i < n; i++)
		if (key[i] >= 0)
			idx[at[key[i]]++] = i;
	free(at);
	return idx;
}

static void sched_free(struct sched *s)
{
	free(s->ew);
	free(s->pairs);
	free(s->htab);
	for (int p = 0; s->port && p < s->nports; p++)
		free(s->port[p].pairs);
	free(s->port);
	free(s->busy);
	free(s->spent);
	free(s->live);
	free(s->order);
	free(s->used);
	free(s->alloc);
	free(s->freed);
	free(s->staged);
	free(s->stage_done);
	free(s->spend);
	free(s->din0);
	free(s->din);
	free(s->sout0);
	free(s->sout);
	free(s->after0);
	free(s->after);
	free(s->gd0);
	free(s->gd);
	free(s->gs0);
	free(s->gs);
	free(s->touch);
	free(s->touched);
	free(s->done);
}

/* The pieces of a destination list an edge writes, from its first. */
static uint64_t piece_mask(const struct tg_edge *ed)
{
	return ed->whole ? ed->mask : 1;
}

static bool pieces_meet(const struct tg_edge *a, const struct tg_edge *b)
{
	int d = b->first - a->first;

	if (d >= 64 || d <= -64)
		return false;
	return d >= 0 ? (piece_mask(a) >> d & piece_mask(b)) != 0
		      : (piece_mask(b) >> -d & piece_mask(a)) != 0;
}

/* Each relay waits on the edges that bring its pieces to its source. */
static int relay_deps(struct sched *s)
{
	const struct tgraph *g = s->g;
	int n = 0, cap = 0, *from = NULL, *to = NULL, *idx;

	for (int r = 0; r < s->ne0; r++) {
		const struct tg_edge *ed = &g->edges[r];

		if (ed->rseg < 0)
			continue;
		for (int k = s->din0[ed->rseg]; k < s->din0[ed->rseg + 1]; k++) {
			int f = s->din[k];

			if (!pieces_meet(&g->edges[f], ed))
				continue;
			if (n == cap) {
				int *nf, *nt;

				cap = cap ? 2 * cap : 1024;
				nf = realloc(from, (size_t)cap * sizeof *from);
				nt = nf ? realloc(to, (size_t)cap * sizeof *to) : NULL;
				from = nf ? nf : from;
				if (!nf || !nt) {
					free(from);
					free(to);
					return -1;
				}
				to = nt;
			}
			from[n] = f;
			to[n++] = r;
			s->ew[r].deps++;
		}
	}
	idx = csr(n, from, s->ne0, &s->after0);
	s->after = idx ? malloc((size_t)(n ? n : 1) * sizeof *s->after) : NULL;
	for (int k = 0; s->after && k < n; k++)
		s->after[k] = to[idx[k]];
	free(idx);
	free(from);
	free(to);
	return s->after ? 0 : -1;
}

static int sched_init(struct sched *s, struct ctx *c)
{
	struct tgraph *g = c->g;
	int ne = g->nedges, hsize = 1, *key;

	memset(s, 0, sizeof *s);
	s->c = c;
	s->g = g;
	s->nports = g->ngpus * NPORTS;
	while (hsize < 4 * (ne + g->nsseg) + 16)
		hsize *= 2;
	s->hmask = hsize - 1;
	s->ewcap = ne ? ne : 1;
	s->ew = calloc((size_t)s->ewcap, sizeof *s->ew);
	s->htab = malloc((size_t)hsize * sizeof *s->htab);
	s->port = calloc((size_t)s->nports, sizeof *s->port);
	s->busy = malloc((size_t)s->nports * sizeof *s->busy);
	s->spent = calloc((size_t)s->nports, sizeof *s->spent);
	s->live = malloc((size_t)s->nports * sizeof *s->live);
	s->order = malloc((size_t)s->nports * 2 * sizeof *s->order);
	s->used = calloc((size_t)g->ngpus, sizeof *s->used);
	s->alloc = calloc((size_t)g->ndseg + 1, sizeof *s->alloc);
	s->freed = calloc((size_t)g->nsseg + 1, sizeof *s->freed);
	s->staged = calloc((size_t)g->nsseg + 1, sizeof *s->staged);
	s->stage_done = calloc((size_t)g->nsseg + 1, sizeof *s->stage_done);
	s->spend = calloc((size_t)g->nsseg + 1, sizeof *s->spend);
	s->touch = calloc((size_t)g->ngpus, sizeof *s->touch);
	s->touched = malloc((size_t)g->ngpus * sizeof *s->touched);
	key = malloc((size_t)(ne + g->nsseg + g->ndseg + 1) * sizeof *key);
	if (!s->ew || !s->htab || !s->port || !s->busy || !s->spent || !s->live || !s->order ||
	    !s->used ||
	    !s->alloc || !s->freed || !s->staged || !s->stage_done || !s->spend || !s->touch ||
	    !s->touched || !key) {
		free(key);
		return -1;
	}
	memset(s->htab, -1, (size_t)hsize * sizeof *s->htab);
	memset(s->busy, -1, (size_t)s->nports * sizeof *s->busy);
	for (int p = 0; p < s->nports; p++)
		s->port[p].live = -1;
	for (int e = 0; e < ne; e++)
		key[e] = g->edges[e].dseg;
	s->din = csr(ne, key, g->ndseg, &s->din0);
	for (int e = 0; e < ne; e++) {
		key[e] = g->edges[e].sseg;
		if (key[e] >= 0)
			s->spend[key[e]]++;
	}
	s->sout = csr(ne, key, g->nsseg, &s->sout0);
	for (int d = 0; d < g->ndseg; d++)
		key[d] = g->dseg[d].host ? -1 : g->dseg[d].gpu;
	s->gd = csr(g->ndseg, key, g->ngpus, &s->gd0);
	for (int k = 0; k < g->nsseg; k++)
		key[k] = g->sseg[k].host || !c->v->cl->up[g->sseg[k].gpu] ? -1 : g->sseg[k].gpu;
	s->gs = csr(g->nsseg, key, g->ngpus, &s->gs0);
	free(key);
	if (!s->din || !s->sout || !s->gd || !s->gs)
		return -1;
	for (int e = 0; e < ne; e++) {
		s->ew[e].left = g->edges[e].bytes;
		s->ew[e].next = -1;
		set_route(s, e, 0);
	}
	s->ne0 = ne;
	return relay_deps(s);
}

static int schedule(struct ctx *c, struct err *e)
{
	struct tgraph *g = c->g;
	struct sched s;
	double lb0 = 0, lat = c->v->k->allreduce_lat_s;
	int rc = NR_OK;

	if (sched_init(&s, c))
		goto oom;
	for (int p = 0; p < s.nports; p++)
		lb0 = fmax(lb0, c->load[p]);
	g->quantum_s = fmax(lb0 / ROUNDS_TARGET, QUANTUM_LAT * lat);
	if (g->quantum_s <= 0)
		g->quantum_s = 1e-3;
	for (int gpu = 0; gpu < g->ngpus; gpu++)
		g->peak[gpu] = s.used[gpu] = g->before[gpu];
	for (int d = 0; d < g->ndseg; d++)
		if (g->dseg[d].host) {
			s.alloc[d] = true;
			for (int i = s.din0[d]; i < s.din0[d + 1]; i++)
				if (make_ready(&s, s.din[i]))
					goto oom;
		}
	for (int k = 0; k < g->nsseg; k++)
		if (s.spend[k] == 0 && free_seg(&s, k))
			goto oom;
	s.ntouched = 0;
	memset(s.touch, 0, (size_t)g->ngpus * sizeof *s.touch);
	for (int gpu = 0; gpu < g->ngpus; gpu++)
		if (alloc_pass(&s, gpu))
			goto oom;
	for (;;) {
		int n;

		if (s.nlive > 0) {
			if (round_once(&s))
				goto oom;
			continue;
		}
		if (s.ndone == g->nedges) {
			bool all = true;

			for (int d = 0; d < g->ndseg && all; d++)
				all = s.alloc[d];
			if (all)
				break;
		}
		if ((n = stage(&s)) < 0)
			goto oom;
		if (n == 0) {
			rc = err_set(e, NR_EIO, "transition schedule: no transfer can start and "
				     "nothing can be staged (a bug)");
			goto out;
		}
	}
	/* The lower bound and the link totals, over the routes the bytes took. */
	memset(c->load, 0, (size_t)s.nports * sizeof *c->load);
	for (int i = 0; i < g->nedges; i++) {
		const struct tg_edge *ed = &g->edges[i];
		const struct route *rt = &s.ew[i].rt;

		c->load[rt->sport] += ed->bytes / rt->bw;
		if (rt->dport != rt->sport)
			c->load[rt->dport] += ed->bytes / rt->bw;
		g->link_edges[ed->link]++;
		g->link_bytes[ed->link] += ed->bytes;
		g->link_seconds[ed->link] += ed->bytes / rt->bw;
	}
	for (int p = 0; p < s.nports; p++)
		g->lower_bound_s = fmax(g->lower_bound_s, c->load[p]);
	for (int r = 0; r < g->nrounds; r++)
		g->predicted_s += g->rounds[r].seconds;
	goto out;
oom:
	rc = err_set(e, NR_EIO, "out of memory");
out:
	sched_free(&s);
	return rc;
}

/* --- building it all ----------------------------------------------------------- */

static void ctx_free(struct ctx *c, int na)
{
	for (int l = 0; l < na && c->upg; l++) {
		free(c->upg[l]);
		free(c->uppos[l]);
		free(c->upnode ? c->upnode[l] : NULL);
	}
	free(c->upg);
	free(c->uppos);
	free(c->upnode);
	free(c->nupnode);
	free(c->nup);
	free(c->rc);
	free(c->cand);
	free(c->held);
	free(c->bk);
	free(c->ent);
	free(c->ref);
	free(c->entof);
	free(c->entof0);
	free(c->same_for);
	free(c->same);
	free(c->load);
	free(c->at);
	free(c->rem);
	free(c->rem2);
	free(c->lat);
	free(c->aoff);
	free(c->otab);
	free(c->oused);
	free(c->rbuf);
	free(c->ron);
	free(c->rheld);
	free(c->rrun);
	free(c->rmap);
	free(c->twin);
	free(c->ashift);
	free(c->e0);
}

void tgraph_free(struct tgraph *g)
{
	for (int l = 0; l < g->nlists; l++) {
		free(g->lists[l].seg_first);
		free(g->lists[l].seg_of);
	}
	free(g->lists);
	free(g->before);
	free(g->after);
	free(g->peak);
	free(g->sseg);
	free(g->dseg);
	free(g->edges);
	free(g->steps);
	free(g->rounds);
	free(g->moves);
	free(g->stages);
	emu_free(&g->a);
	emu_free(&g->b);
	memset(g, 0, sizeof *g);
}

/* Every GPU of b is up; what a and b keep on each GPU fits it. */
static int check_memory(const struct env *v, struct tgraph *g, struct err *e)
{
	const struct cluster *cl = v->cl;

	for (int i = 0; i < g->b.n; i++)
		for (int r = 0; r < g->b.u[i].nranks; r++)
			if (!cl->up[g->b.u[i].rank_gpu[r]])
				return err_set(e, NR_EINFEASIBLE, "the new plan puts %s '%s' on GPU %d, "
					       "which is down", g->b.u[i].item == ITEM_GEN ?
					       "the generation engines of" : "model",
					       v->job->models[g->b.u[i].model].name,
					       g->b.u[i].rank_gpu[r]);
	for (int k = 0; k < g->nsseg; k++)
		if (!g->sseg[k].host && cl->up[g->sseg[k].gpu])
			g->before[g->sseg[k].gpu] += g->sseg[k].bytes;
	for (int k = 0; k < g->ndseg; k++)
		if (!g->dseg[k].host)
			g->after[g->dseg[k].gpu] += g->dseg[k].bytes;
	for (int gpu = 0; gpu < g->ngpus; gpu++) {
		const char *which = g->before[gpu] > g->capacity ? "current" : "new";
		int64_t b = g->before[gpu] > g->capacity ? g->before[gpu] : g->after[gpu];

		if (b > g->capacity)
			return err_set(e, NR_EINFEASIBLE, "the %s plan keeps %.2f GiB of state on "
				       "GPU %d, which holds %.2f GiB", which, b / GIB, gpu,
				       g->capacity / GIB);
	}
	for (int gpu = 0; gpu < g->ngpus; gpu++) {
		bool held = false;

		for (int i = 0; i < g->a.n && !held && !cl->up[gpu]; i++)
			for (int r = 0; r < g->a.u[i].nranks && !held; r++)
				held = g->a.u[i].rank_gpu[r] == gpu;
		g->gpus_lost += held;
	}
	return NR_OK;
}

static int up_holders(struct ctx *c)
{
	struct tgraph *g = c->g;

	c->upg = calloc((size_t)g->na + 1, sizeof *c->upg);
	c->uppos = calloc((size_t)g->na + 1, sizeof *c->uppos);
	c->nup = calloc((size_t)g->na + 1, sizeof *c->nup);
	c->rc = calloc((size_t)g->na + 1, sizeof *c->rc);
	c->upnode = calloc((size_t)g->na + 1, sizeof *c->upnode);
	c->nupnode = calloc((size_t)g->na + 1, sizeof *c->nupnode);
	c->same_for = malloc((size_t)(g->na + 1) * sizeof *c->same_for);
	c->same = calloc((size_t)g->na + 1, sizeof *c->same);
	c->cand = malloc((size_t)(g->na + 1) * sizeof *c->cand);
	c->held = calloc((size_t)MAX_ITEMS * (size_t)g->ngpus, sizeof *c->held);
	if (!c->upg || !c->uppos || !c->nup || !c->rc || !c->upnode || !c->nupnode ||
	    !c->same_for || !c->same || !c->cand || !c->held)
		return -1;
	for (int i = 0; i < g->a.n; i++)
		for (int r = 0; r < g->a.u[i].nranks; r++)
			if (c->v->cl->up[g->a.u[i].rank_gpu[r]])
				c->held[g->a.u[i].item * g->ngpus + g->a.u[i].rank_gpu[r]] = true;
	memset(c->same_for, -1, (size_t)(g->na + 1) * sizeof *c->same_for);
	for (int l = 0; l < g->na; l++) {
		const struct emu_list *el = g->lists[l].l;

		c->upg[l] = malloc((size_t)el->ngpus * sizeof **c->upg);
		c->uppos[l] = malloc((size_t)el->ngpus * sizeof **c->uppos);
		c->upnode[l] = malloc((size_t)el->ngpus * sizeof **c->upnode);
		if (!c->upg[l] || !c->uppos[l] || !c->upnode[l])
			return -1;
		for (int p = 0; p < el->ngpus; p++)
			if (c->v->cl->up[el->gpus[p]]) {
				int node = el->gpus[p] / c->gpn, *n = &c->nupnode[l];

				c->upg[l][c->nup[l]] = el->gpus[p];
				c->uppos[l][c->nup[l]++] = p;
				if (*n == 0 || c->upnode[l][*n - 1] != node)
					c->upnode[l][(*n)++] = node;
			}
	}
	return 0;
}

static int build(struct ctx *c, const struct env *v, struct err *e)
{
	struct tgraph *g = c->g;
	int nl = 0, nkeys = 0, rc;
	int64_t seg_max;
	struct dinst di;

	c->v = v;
	c->gpn = v->cl->gpus_per_node;
	c->nmodels = v->job->nmodels;
	for (int d = 0; d < c->nmodels; d++) {
		c->ntens[d] = g->a.u[d].lo.ntensors;
		c->key0[d] = nkeys;
		nkeys += NKINDS * c->ntens[d];
	}
	c->nbuckets = nkeys * NSLOTS;
	for (int k = 0; k < TG_NLINKS; k++)
		c->bw[k] = tgraph_link_bw(v, (enum tg_link)k);
	for (int i = 0; i < g->a.n; i++)
		nl += g->a.u[i].nlists;
	for (int i = 0; i < g->b.n; i++)
		nl += g->b.u[i].nlists;
	g->ngpus = cluster_gpus(v->cl);
	g->capacity = cluster_gpu_bytes(v->cl);
	seg_max = (int64_t)(g->capacity / SEG_DIV);
	c->relay_max = (int64_t)(g->capacity / RELAY_DIV);
	g->lists = calloc((size_t)nl, sizeof *g->lists);
	g->before = calloc((size_t)g->ngpus, sizeof *g->before);
	g->after = calloc((size_t)g->ngpus, sizeof *g->after);
	g->peak = calloc((size_t)g->ngpus, sizeof *g->peak);
	c->load = calloc((size_t)g->ngpus * NPORTS, sizeof *c->load);
	c->rmap = malloc((size_t)(g->ngpus / c->gpn + 1) * sizeof *c->rmap);
	if (c->rmap)
		memset(c->rmap, -1, (size_t)(g->ngpus / c->gpn + 1) * sizeof *c->rmap);
	if (!g->lists || !g->before || !g->after || !g->peak || !c->load || !c->rmap ||
	    add_lists(g, &g->a, seg_max, &g->nsseg))
		return err_set(e, NR_EIO, "out of memory");
	g->na = g->nlists;
	if (add_lists(g, &g->b, seg_max, &g->ndseg))
		return err_set(e, NR_EIO, "out of memory");
	g->sseg = calloc((size_t)g->nsseg + 1, sizeof *g->sseg);
	g->dseg = calloc((size_t)g->ndseg + 1, sizeof *g->dseg);
	if (!g->sseg || !g->dseg || up_holders(c))
		return err_set(e, NR_EIO, "out of memory");
	fill_segs(g, 0, g->na, g->sseg);
	fill_segs(g, g->na, g->nlists, g->dseg);
	if (find_twins(c))
		return err_set(e, NR_EIO, "out of memory");
	if ((rc = check_memory(v, g, e)) || (rc = build_index(c, e)))
		return rc;
	c->omask = 63;
	c->otab = malloc(64 * sizeof *c->otab);
	if (!c->otab || grow(&c->oused, &c->ousedcap, 64, sizeof *c->oused))
		return err_set(e, NR_EIO, "out of memory");
	memset(c->otab, -1, 64 * sizeof *c->otab);
	for (int l = g->na; l < g->nlists; l++) {
		c->e0[l - g->na] = g->nedges;
		if (c->twin[l] >= 0 ? copy_edges(c, l) : list_edges(c, l, &di))
			return err_set(e, NR_EIO, "out of memory");
	}
	c->e0[g->nlists - g->na] = g->nedges;
	copy_kept(g, c->twin);
	for (int k = 0; k < g->nsseg; k++)
		g->sseg[k].bytes -= g->sseg[k].kept;
	for (int k = 0; k < g->ndseg; k++) {
		g->dseg[k].bytes -= g->dseg[k].kept;
		g->kept_bytes += g->dseg[k].kept;
	}
	return schedule(c, e);
}

static int build_graph(const struct env *v, const struct plan *a, const struct plan *b,
		       bool literal, struct tgraph *g, struct err *e)
{
	struct ctx c = { 0 };
	int rc;

	memset(g, 0, sizeof *g);
	c.g = g;
	c.literal = literal;
	if ((rc = emu_build(v, a, &g->a, e)))
		return err_prefix(e, "the current plan");
	if ((rc = emu_build(v, b, &g->b, e))) {
		tgraph_free(g);
		return err_prefix(e, "the new plan");
	}
	rc = build(&c, v, e);
	ctx_free(&c, g->na);
	if (rc)
		tgraph_free(g);
	return rc;
}

int tgraph_build(const struct env *v, const struct plan *a, const struct plan *b,
		 struct tgraph *g, struct err *e)
{
	return build_graph(v, a, b, false, g, e);
}

int tgraph_build_literal(const struct env *v, const struct plan *a, const struct plan *b,
			 struct tgraph *g, struct err *e)
{
	return build_graph(v, a, b, true, g, e);
}

int tgraph_transition_seconds(const struct env *v, const struct plan *a, const struct plan *b,
			      double *seconds, struct err *e)
{
	struct tgraph g;
	int rc = tgraph_build(v, a, b, &g, e);

	if (rc)
		return rc;
	*seconds = g.predicted_s;
	tgraph_free(&g);
	return NR_OK;
}
