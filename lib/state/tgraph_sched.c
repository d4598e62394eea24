/* The transition graph's schedule (tgraph.c): the lists cut into
 * segments, what is allocated and freed at once, and rounds of transfers
 * between allocations and frees, until every edge is done, relays after
 * what they pass on. */
#include "state/tgraph_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ROUNDS_TARGET 256  /* the quantum: the first lower bound / ROUNDS_TARGET… */
#define QUANTUM_LAT 100    /* …and at least this many round latencies */

/* --- lists and segments ------------------------------------------------------- */

int tg_add_lists(struct tgraph *g, const struct emu_set *s, uint32_t items, int64_t seg_max,
		 int *nseg)
{
	for (int i = 0; i < s->n; i++)
		for (int k = 0; k < s->u[i].nlists && (items >> s->u[i].item & 1); k++) {
			const struct emu_list *l = &s->u[i].lists[k];
			struct tg_list *tl;
			int eb = s->u[i].elem_bytes[l->kind];
			int64_t at = 0;

			if (!(g->sel.kinds >> l->kind & 1))
				continue;
			tl = &g->lists[g->nlists++];
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

void tg_fill_segs(struct tgraph *g, int from, int to, struct tg_seg *seg)
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

	if (tg_grow(&g->steps, &s->scap, g->nsteps + 1, sizeof *g->steps))
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
	if (tg_grow(&s->pairs, &s->pcap, s->npairs + 1, sizeof *s->pairs))
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
			if (tg_grow(&pt->pairs, &pt->cap, pt->n + 1, sizeof *pt->pairs))
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

	w->rt = tg_route_of(s->c, ed->src, ed->src_host, ed->dst, ed->dst_host, ed->link);
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

	if (tg_grow(&g->edges, &s->c->ecap, e + 1, sizeof *g->edges) ||
	    tg_grow(&s->ew, &s->ewcap, e + 1, sizeof *s->ew) ||
	    tg_grow(&g->stages, &s->stcap, g->nstages + 1, sizeof *g->stages))
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

		if (tg_grow(&g->moves, &s->mcap, g->nmoves + 1, sizeof *g->moves))
			return -1;
		g->moves[g->nmoves++] = (struct tg_move){ e, g->edges[e].bytes - w->left, take };
		w->left -= take;
		quota -= take;
		moved += take;
		if (w->left == 0) {
			p->head = w->next;
			if (p->head < 0)
				p->tail = -1;
			if (tg_grow(&s->done, &s->dcap, s->ndone_round + 1, sizeof *s->done))
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

	if (tg_grow(&g->rounds, &s->rcap, r + 1, sizeof *g->rounds))
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

int tg_schedule(struct ctx *c, struct err *e)
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
	rc = err_oom(e);
out:
	sched_free(&s);
	return rc;
}
