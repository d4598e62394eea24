/* The transition graph's edges (tgraph.c): every GPU holding a list of B
 * takes each atom of each piece from its cheapest holder, or the whole
 * piece from another holder of the list (a relay); a group of lists laid
 * out like an earlier group copies its edges (twins). */
#include "state/tgraph_impl.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

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
		if (!c->otab || tg_grow(&c->oused, &c->ousedcap, c->omask + 1, sizeof *c->oused)) {
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
	struct route rt = tg_route_of(c, ch->src, ch->sh, di->dst, di->dh, ch->link);
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
	if (tg_grow(&g->edges, &c->ecap, g->nedges + 1, sizeof *g->edges))
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

		*k = tg_lower_bound(c->upg[l], c->nup[l], di->dst);
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
		*w = tg_choose(c, di, &all);
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

	if (tg_grow(&c->rbuf, &c->rbufcap, 4 * n + 1, sizeof *c->rbuf))
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
	if (tg_grow(&c->ron, &c->roncap, np * nodes, sizeof *c->ron) ||
	    tg_grow(&c->rheld, &c->rheldcap, np, sizeof *c->rheld) ||
	    tg_grow(&c->rrun, &c->rruncap, np, sizeof *c->rrun))
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
		if (tg_bucket_of(c, sl->u, sl->l->kind, p->tensor) != bucket0 + s || !q ||
		    !box_contains(&q->box, &p->box) ||
		    (at->ent[s] = c->entof[c->entof0[hint[2 * s]] + (int)(q - sl->l->pieces)]) < 0)
			return false;
		hint[2 * s + 1] = (int)(q - sl->l->pieces);
	}
	at->box = p->box;
	return true;
}

/* A piece's atoms go by holder: what one holder gives is one edge. */
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

/* Every holder of destination list dl: keep, or take each atom of each
 * piece from its holder.  A list's atoms are cut once for all its
 * holders. */
int tg_list_edges(struct ctx *c, int dl, struct dinst *di)
{
	struct tgraph *g = c->g;
	const struct tg_list *tl = &g->lists[dl];
	const struct emu_list *l = tl->l;
	int eb = tl->u->elem_bytes[l->kind], nlat = 0, hint[2 * NSLOTS] = { -1, -1, -1, -1 };
	struct choice *ch = NULL;
	int chcap = 0;
	bool relays = l->ngpus > 1 && !tl->u->host;

	if (tg_grow(&c->aoff, &c->aoffcap, (int)l->npieces + 1, sizeof *c->aoff))
		return -1;
	for (size_t i = 0; i < l->npieces; i++) {
		const struct piece *p = &l->pieces[i];
		int nat = 0, b0 = tg_bucket_of(c, tl->u, l->kind, p->tensor) / NSLOTS * NSLOTS;

		c->aoff[i] = nlat;
		if (box_volume(&p->box) == 0)
			continue;
		if (tg_grow(&c->lat, &c->latcap, nlat + 1, sizeof *c->lat))
			return -1;
		if (!c->literal && atom_by_hint(c, b0, p, hint, &c->lat[nlat])) {
			nlat++;
			continue;
		}
		if ((nat = tg_atoms_of(c, b0, &p->box)) < 0 ||
		    tg_grow(&c->lat, &c->latcap, nlat + nat, sizeof *c->lat))
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
			if (tg_grow(&ch, &chcap, nat, sizeof *ch))
				goto oom;
			for (int a = 0; a < nat; a++) {
				ch[a] = tg_choose(c, di, &at[a]);
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
int tg_find_twins(struct ctx *c)
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
int tg_copy_edges(struct ctx *c, int dl)
{
	struct tgraph *g = c->g;
	int from = c->twin[dl], e0 = c->e0[from - g->na], e1 = c->e0[from - g->na + 1];
	const struct tg_list *tl = &g->lists[dl], *fl = &g->lists[from];
	int dshift = tl->seg0 - fl->seg0;
	double ratio = byte_ratio(g, dl, from);

	if (tg_grow(&g->edges, &c->ecap, g->nedges + (e1 - e0), sizeof *g->edges))
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
		rt = tg_route_of(c, ed->src, ed->src_host, ed->dst, ed->dst_host, ed->link);
		c->load[rt.sport] += ed->bytes / rt.bw;
		if (rt.dport != rt.sport)
			c->load[rt.dport] += ed->bytes / rt.bw;
	}
	for (int k = 0; k < tl->nseg * tl->l->ngpus; k++)
		g->dseg[tl->seg0 + k].kept = (int64_t)(g->dseg[fl->seg0 + k].kept * ratio);
	return 0;
}

/* A's segments of a copied group keep what its twin's keep. */
void tg_copy_kept(struct tgraph *g, const int *twin)
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
