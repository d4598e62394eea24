/* The transition graph's source index (tgraph.c): every distinct box A
 * holds, by (model, kind, tensor) and by tiling (the home layout, or the
 * engines), with the piece lists that hold it; the atoms each piece of B
 * is cut into by the source boxes it meets; and the holder each atom
 * comes from, the cheapest that is up. */
#include "state/tgraph_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* --- the source index ------------------------------------------------------ */

struct raw {
	int bucket, list, piece;
	int64_t key;               /* offset along the bucket's dim */
	const struct box *box;
};

/* The engines hold the actor's weights in the actor's dtype (emu.h), so
 * their pieces and the actor's are one tensor's two tilings. */
int tg_bucket_of(const struct ctx *c, const struct emu *u, enum state_kind k, int tensor)
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

int tg_build_index(struct ctx *c, struct err *e)
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
		return err_oom(e);
	memset(c->entof, -1, (size_t)(n ? n : 1) * sizeof *c->entof);
	raw = malloc((size_t)(n ? n : 1) * sizeof *raw);
	c->ent = malloc((size_t)(n ? n : 1) * sizeof *c->ent);
	c->ref = malloc((size_t)(n ? n : 1) * sizeof *c->ref);
	c->bk = calloc((size_t)c->nbuckets, sizeof *c->bk);
	count = calloc((size_t)c->nbuckets + 1, sizeof *count);
	if (!raw || !c->ent || !c->ref || !c->bk || !count) {
		free(raw);
		free(count);
		return err_oom(e);
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
			raw[n++] = (struct raw){ tg_bucket_of(c, tl->u, tl->l->kind, p->tensor), l,
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
			return err_oom(e);
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

		if (tg_grow(out, cap, *n + 2, sizeof **out))
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
int tg_atoms_of(struct ctx *c, int bucket0, const struct box *D)
{
	int nat = 1;

	if (tg_grow(&c->at, &c->atcap, 1, sizeof *c->at))
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
		if (tg_grow(&c->rem, &c->remcap, nat, sizeof *c->rem))
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
					if (tg_grow(&c->at, &c->atcap, ncov + 1, sizeof *c->at))
						return -1;
					c->at[ncov] = c->rem[k];
					c->at[ncov++].ent[s] = b->ent0 + i;
					continue;
				}
				if (!box_intersect(&c->rem[k].box, &en->box, &x)) {
					if (tg_grow(&c->rem2, &c->rem2cap, n2 + 1, sizeof *c->rem2))
						return -1;
					c->rem2[n2++] = c->rem[k];
					continue;
				}
				if (tg_grow(&c->at, &c->atcap, ncov + 1, sizeof *c->at))
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
		if (tg_grow(&c->at, &c->atcap, ncov + nrem, sizeof *c->at))
			return -1;
		if (nrem > 0) /* c->rem may be the spare that was never allocated */
			memcpy(c->at + ncov, c->rem, (size_t)nrem * sizeof *c->at);
		nat = ncov + nrem;
	}
	return nat;
}

/* --- choosing holders ------------------------------------------------------ */

struct route tg_route_of(const struct ctx *c, int src, bool sh, int dst, bool dh,
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

	*lo = tg_lower_bound(up, n, node * c->gpn);
	*hi = tg_lower_bound(up, n, (node + 1) * c->gpn);
	if (*lo == *hi) {
		*lo = 0;
		*hi = n;
		return TG_INTER;
	}
	if (sh && dh)
		return TG_LOCAL; /* one node's host memory */
	k = tg_lower_bound(up, n, dst);
	if (k < n && up[k] == dst) {
		*lo = k;
		*hi = k + 1;
		return sh == dh ? TG_LOCAL : TG_HOST;
	}
	return sh || dh ? TG_HOST : TG_INTRA;
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
struct choice tg_choose(struct ctx *c, const struct dinst *di, const struct atom *a)
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
			p = tg_lower_bound(c->upg[l], c->nup[l], src);
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
			struct route rt = tg_route_of(c, c->upg[l][p], sh, di->dst, di->dh,
						       rc->link);

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
