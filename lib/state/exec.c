/* The transition executor (exec.h): the transition graph's schedule walked
 * by processes that hold their pieces in host memory, over any transport.
 *
 * Every piece a rank holds is a buffer of its own (local_len elements,
 * padding tail zeroed), so that allocating and freeing segments is exactly
 * what the schedule says.  An edge between two ranks is packed by its
 * sender into one contiguous buffer in the edge's order (each destination
 * piece's region, ascending), sent in the byte ranges its moves give, and
 * unpacked by its receiver once its last byte has come. */
#include "state/exec.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/err.h"
#include "plan/cost.h"
#include "state/tgraph.h"

/* What one holder of one list (a GPU of its GPUs) holds here. */
struct hold {
	void **p;                  /* per piece: its buffer, NULL while not allocated */
	void **host;               /* per piece: its copy staged to host memory (A lists) */
	bool *kept;                /* per piece: B keeps it in place (A lists) */
};

struct edge_io {
	char *send, *recv;
	int64_t sent, got;         /* bytes of its moves seen so far */
	bool done;                 /* a local or store edge, already carried out */
};

struct walk {
	const struct env *v;
	struct tgraph g;
	const struct exec_xport *x;
	int *rank_of;              /* GPU → rank, -1 none */
	int *hold0;                /* list → index of its first holder in h */
	struct hold *h;
	struct edge_io *io;
	const struct exec_source *src;
	const struct exec_sink *sink;
};

static bool mine_gpu(const struct walk *w, int gpu)
{
	return gpu >= 0 && w->rank_of[gpu] >= 0 && w->x->mine[w->rank_of[gpu]];
}

static int list_pos(const struct emu_list *l, int gpu)
{
	for (int j = 0; j < l->ngpus; j++)
		if (l->gpus[j] == gpu)
			return j;
	return -1;
}

static struct hold *hold_of(struct walk *w, int list, int gpu)
{
	int pos = list_pos(w->g.lists[list].l, gpu);

	return pos < 0 ? NULL : &w->h[w->hold0[list] + pos];
}

static int eb_of(const struct walk *w, int list)
{
	const struct tg_list *t = &w->g.lists[list];

	return t->u->elem_bytes[t->l->kind];
}

static size_t piece_bytes(const struct walk *w, int list, int i)
{
	return (size_t)w->g.lists[list].l->pieces[i].local_len * (size_t)eb_of(w, list);
}

/* Piece i that the j-th holder of list keeps, as sources and sinks see
 * it. */
static struct exec_piece held_piece(const struct walk *w, int list, int j, size_t i)
{
	const struct tg_list *t = &w->g.lists[list];
	const struct emu_set *es = list < w->g.na ? &w->g.a : &w->g.b;
	int gpu = t->l->gpus[j];

	return (struct exec_piece){
		.u = t->u, .emu = (int)(t->u - es->u), .name = w->v->job->models[t->u->model].name,
		.kind = t->l->kind, .gpu = gpu,
		.rank = w->rank_of[gpu], .tp = t->l->tp, .pp = t->l->pp, .dp = t->l->dps[j],
		.pc = &t->l->pieces[i], .elem_bytes = eb_of(w, list),
	};
}

/* Rank r plays GPU r; GPUs beyond the ranks must hold nothing. */
static int map_gpus_to_ranks(struct walk *w, struct err *e)
{
	int n = w->g.ngpus;

	if (!(w->rank_of = malloc(((size_t)n + 1) * sizeof *w->rank_of)))
		return err_oom(e);
	for (int gpu = 0; gpu < n; gpu++)
		w->rank_of[gpu] = gpu < w->x->nranks ? gpu : -1;
	for (int l = 0; l < w->g.nlists; l++)
		for (int j = 0; j < w->g.lists[l].l->ngpus; j++)
			if (w->g.lists[l].l->gpus[j] >= w->x->nranks)
				return err_set(e, NR_EINPUT, "live: plan %s keeps state on GPU %d, but %d "
					       "ranks run: start one rank per GPU of the cluster",
					       l < w->g.na ? "A" : "B", w->g.lists[l].l->gpus[j],
					       w->x->nranks);
	return NR_OK;
}

/* Map ranks to GPUs: every GPU of the cluster, or only those holding
 * state in a or b. */
static int map_ranks(struct walk *w, struct err *e)
{
	int n = w->g.ngpus, used = 0, want = w->x->nranks;
	bool *holds;

	if (w->x->gpu_is_rank)
		return map_gpus_to_ranks(w, e);
	holds = calloc((size_t)n + 1, sizeof *holds);
	w->rank_of = malloc(((size_t)n + 1) * sizeof *w->rank_of);
	if (!holds || !w->rank_of) {
		free(holds);
		return err_oom(e);
	}
	for (int l = 0; l < w->g.nlists; l++)
		for (int j = 0; j < w->g.lists[l].l->ngpus; j++)
			holds[w->g.lists[l].l->gpus[j]] = true;
	for (int gpu = 0; gpu < n; gpu++)
		used += holds[gpu];
	if (want != n && want != used) {
		free(holds);
		return err_set(e, NR_EINPUT,
			       "live: %d ranks, but the cluster has %d GPUs and the plans use %d: "
			       "run one rank per GPU", want, n, used);
	}
	for (int gpu = 0, r = 0; gpu < n; gpu++) {
		w->rank_of[gpu] = -1;
		if (want == n || holds[gpu])
			w->rank_of[gpu] = r++;
	}
	free(holds);
	return NR_OK;
}

/* The holders' tables, for the GPUs played here. */
static int make_holds(struct walk *w, struct err *e)
{
	int nh = 0;

	if (!(w->hold0 = malloc(((size_t)w->g.nlists + 1) * sizeof *w->hold0)))
		return err_oom(e);
	for (int l = 0; l < w->g.nlists; l++) {
		w->hold0[l] = nh;
		nh += w->g.lists[l].l->ngpus;
	}
	if (!(w->h = calloc((size_t)nh + 1, sizeof *w->h)) ||
	    !(w->io = calloc((size_t)w->g.nedges + 1, sizeof *w->io)))
		return err_oom(e);
	for (int l = 0; l < w->g.nlists; l++) {
		const struct emu_list *el = w->g.lists[l].l;
		size_t n = el->npieces + 1;

		for (int j = 0; j < el->ngpus; j++) {
			struct hold *h = &w->h[w->hold0[l] + j];

			if (!mine_gpu(w, el->gpus[j]))
				continue;
			if (!(h->p = calloc(n, sizeof *h->p)))
				return err_oom(e);
			if (l < w->g.na && (!(h->host = calloc(n, sizeof *h->host)) ||
					    !(h->kept = calloc(n, sizeof *h->kept))))
				return err_oom(e);
		}
	}
	return NR_OK;
}

static void free_holds(struct walk *w)
{
	if (!w->h)
		return;
	for (int l = 0; l < w->g.nlists; l++) {
		const struct emu_list *el = w->g.lists[l].l;

		for (int j = 0; j < el->ngpus; j++) {
			struct hold *h = &w->h[w->hold0[l] + j];

			for (size_t i = 0; h->p && i < el->npieces; i++) {
				if (!(h->kept && h->kept[i]))
					free(h->p[i]);
				if (h->host)
					free(h->host[i]);
			}
			free(h->p);
			free(h->host);
			free(h->kept);
		}
	}
	free(w->h);
	w->h = NULL;
}

/* Plan A's pieces on the GPUs played here, from the source. */
static int load_a(struct walk *w, struct err *e)
{
	for (int l = 0; l < w->g.na; l++) {
		const struct tg_list *t = &w->g.lists[l];

		for (int j = 0; j < t->l->ngpus; j++) {
			struct hold *h = &w->h[w->hold0[l] + j];

			for (size_t i = 0; h->p && i < t->l->npieces; i++) {
				struct exec_piece lp = held_piece(w, l, j, i);

				if (!(h->p[i] = calloc(1, piece_bytes(w, l, (int)i) + 1)))
					return err_oom(e);
				if (w->src->fill(w->src->ctx, &lp, h->p[i], e))
					return e->code;
			}
		}
	}
	return NR_OK;
}

/* B's pieces that no edge fills are kept in place: they share the buffer
 * of A's identical piece on the same GPU, which is then never freed as
 * A's. */
static int link_kept(struct walk *w, struct err *e)
{
	for (int dl = w->g.na; dl < w->g.nlists; dl++) {
		const struct tg_list *t = &w->g.lists[dl];

		for (int j = 0; j < t->l->ngpus; j++) {
			int gpu = t->l->gpus[j];
			struct hold *h = &w->h[w->hold0[dl] + j];
			bool *fed;

			if (!h->p)
				continue;
			if (!(fed = calloc(t->l->npieces + 1, sizeof *fed)))
				return err_oom(e);
			for (int k = 0; k < w->g.nedges; k++) {
				const struct tg_edge *ed = &w->g.edges[k];

				if (ed->dst_list != dl || ed->dst != gpu)
					continue;
				for (int b = 0; b < ed->count; b++)
					if (!ed->whole || (ed->mask >> b & 1))
						fed[ed->first + b] = true;
			}
			for (size_t i = 0; i < t->l->npieces; i++) {
				const struct piece *p = &t->l->pieces[i];
				bool found = false;

				if (fed[i] || box_volume(&p->box) == 0)
					continue;
				for (int al = 0; al < w->g.na && !found; al++) {
					const struct tg_list *s = &w->g.lists[al];
					struct hold *ah;

					if (s->u->item != t->u->item || s->u->host != t->u->host ||
					    s->l->kind != t->l->kind || !(ah = hold_of(w, al, gpu)))
						continue;
					for (size_t q = 0; q < s->l->npieces && !found; q++) {
						const struct piece *pq = &s->l->pieces[q];

						if (pq->tensor != p->tensor || pq->local_len != p->local_len ||
						    memcmp(&pq->box, &p->box, sizeof p->box))
							continue;
						h->p[i] = ah->p[q];
						ah->kept[q] = true;
						found = true;
					}
				}
				if (!found) {
					free(fed);
					return err_set(e, NR_EIO,
						       "live: GPU %d: no edge fills %s piece %zu and plan A "
						       "does not keep it", gpu, state_kind_names[t->l->kind], i);
				}
			}
			free(fed);
		}
	}
	return NR_OK;
}

static int step_alloc(struct walk *w, const struct tg_seg *sg, struct err *e)
{
	struct hold *h = &w->h[w->hold0[sg->list] + sg->pos];

	for (int i = sg->first; i < sg->first + sg->count; i++)
		if (!h->p[i] && !(h->p[i] = calloc(1, piece_bytes(w, sg->list, i) + 1)))
			return err_oom(e);
	return NR_OK;
}

/* Host memory is not the schedule's to manage: its destination segments
 * are there from the start. */
static int alloc_host(struct walk *w, struct err *e)
{
	for (int d = 0; d < w->g.ndseg; d++)
		if (w->g.dseg[d].host && mine_gpu(w, w->g.dseg[d].gpu) &&
		    step_alloc(w, &w->g.dseg[d], e))
			return e->code;
	return NR_OK;
}

static void step_free(struct walk *w, const struct tg_seg *sg)
{
	struct hold *h = &w->h[w->hold0[sg->list] + sg->pos];

	for (int i = sg->first; i < sg->first + sg->count; i++)
		if (!h->kept[i]) {
			free(h->p[i]);
			h->p[i] = NULL;
		}
}

/* The region of destination piece first + b that edge ed carries, and the
 * source piece it comes from (NULL for the store). */
static const struct piece *edge_part(const struct walk *w, const struct tg_edge *ed, int b,
				     const struct piece **dp, int *si, struct box *region)
{
	const struct piece *d = &w->g.lists[ed->dst_list].l->pieces[ed->first + b];
	const struct piece *s = NULL;

	*dp = d;
	*si = -1;
	if (ed->src_list >= 0) {
		const struct tg_list *sl = &w->g.lists[ed->src_list];

		s = tgraph_find_piece(sl, d->tensor);
		if (s)
			*si = (int)(s - sl->l->pieces);
	}
	if (!ed->whole)
		*region = ed->box;
	else if (!s)
		*region = d->box;
	else if (!box_intersect(&d->box, &s->box, region))
		region->ndim = -1;
	return s;
}

static bool part_on(const struct tg_edge *ed, int b)
{
	return !ed->whole || (ed->mask >> b & 1);
}

/* The source buffers of an edge on its sending GPU: staged copies when it
 * leaves from host memory. */
static void **src_bufs(struct walk *w, const struct tg_edge *ed)
{
	struct hold *h = hold_of(w, ed->src_list, ed->src);

	return ed->staged ? h->host : h->p;
}

/* Pack (send) or unpack (!send) an edge between buf and its pieces.
 * Returns the bytes it covers, or -1 when a piece is missing. */
static int64_t edge_pack(struct walk *w, const struct tg_edge *ed, char *buf, bool send)
{
	int64_t off = 0;
	int eb;

	if (ed->staging) {
		struct hold *h = hold_of(w, ed->src_list, ed->src);

		for (int i = ed->first; i < ed->first + ed->count; i++) {
			size_t n = piece_bytes(w, ed->src_list, i);

			if (send) {
				if (!h->p[i])
					return -1;
				if (buf)
					memcpy(buf + off, h->p[i], n);
			} else if (buf) {
				memcpy(h->host[i], buf + off, n);
			}
			off += (int64_t)n;
		}
		return off;
	}
	eb = eb_of(w, ed->dst_list);
	for (int b = 0; b < ed->count; b++) {
		const struct piece *d, *s;
		struct box r;
		int si;

		if (!part_on(ed, b))
			continue;
		s = edge_part(w, ed, b, &d, &si, &r);
		if (r.ndim < 0 || !s)
			continue;
		if (buf && send) {
			void *sp = src_bufs(w, ed)[si];

			if (!sp)
				return -1;
			box_copy(buf + off, &r, sp, &s->box, &r, (size_t)eb);
		} else if (buf) {
			void *dpb = hold_of(w, ed->dst_list, ed->dst)->p[ed->first + b];

			if (!dpb)
				return -1;
			box_copy(dpb, &d->box, buf + off, &r, &r, (size_t)eb);
		}
		off += box_volume(&r) * eb;
	}
	return off;
}

/* Carry out an edge whose both ends are here, or that comes from the
 * store. */
static int edge_local(struct walk *w, const struct tg_edge *ed, struct err *e)
{
	int eb;

	if (ed->staging) {
		struct hold *h = hold_of(w, ed->src_list, ed->src);

		for (int i = ed->first; i < ed->first + ed->count; i++) {
			size_t n = piece_bytes(w, ed->src_list, i);

			if (!h->p[i] || !(h->host[i] = malloc(n + 1)))
				return err_set(e, NR_EIO, "live: GPU %d: cannot stage a segment", ed->src);
			memcpy(h->host[i], h->p[i], n);
		}
		return NR_OK;
	}
	eb = eb_of(w, ed->dst_list);
	for (int b = 0; b < ed->count; b++) {
		const struct piece *d, *s;
		struct box r;
		int si;
		void *dpb;

		if (!part_on(ed, b))
			continue;
		s = edge_part(w, ed, b, &d, &si, &r);
		dpb = hold_of(w, ed->dst_list, ed->dst)->p[ed->first + b];
		if (r.ndim < 0)
			continue;
		if (!dpb)
			return err_set(e, NR_EIO, "live: GPU %d: a piece is written before it is allocated",
				       ed->dst);
		if (ed->src < 0) {
			if (!w->src->fill_region)
				return err_set(e, NR_EIO, "live: GPU %d needs %s of model %s that no GPU "
					       "up holds and no store has", ed->dst,
					       state_kind_names[ed->kind], w->v->job->models[ed->model].name);
			if (w->src->fill_region(w->src->ctx, ed->model, ed->kind, d->tensor, &r, dpb,
						&d->box, eb, e))
				return e->code;
		} else {
			void *sp = s ? src_bufs(w, ed)[si] : NULL;

			if (!sp)
				return err_set(e, NR_EIO, "live: GPU %d: a piece is read after it is freed",
					       ed->src);
			box_copy(dpb, &d->box, sp, &s->box, &r, (size_t)eb);
		}
	}
	return NR_OK;
}

#define MSG_MAX ((int64_t)1 << 30) /* bytes per message, so MPI counts fit an int */

struct msgs {
	struct exec_msg *m;
	int n, cap;
};

static int msg_add(struct msgs *ms, struct exec_msg m)
{
	if (ms->n == ms->cap) {
		int cap = ms->cap ? 2 * ms->cap : 64;
		struct exec_msg *nm = realloc(ms->m, (size_t)cap * sizeof *nm);

		if (!nm)
			return -1;
		ms->m = nm;
		ms->cap = cap;
	}
	m.tag = ms->n;
	ms->m[ms->n++] = m;
	return 0;
}

/* Prepare a round: local edges carried out, messages listed. */
static int round_prepare(struct walk *w, const struct tg_round *rd, struct msgs *ms,
			 uint64_t *sent, struct err *e)
{
	ms->n = 0;
	for (int k = rd->move0; k < rd->move0 + rd->nmoves; k++) {
		const struct tg_move *mv = &w->g.moves[k];
		const struct tg_edge *ed = &w->g.edges[mv->edge];
		struct edge_io *io = &w->io[mv->edge];
		int dgpu = ed->staging ? ed->src : ed->dst;
		bool ms_src = mine_gpu(w, ed->src), ms_dst = mine_gpu(w, dgpu);

		if (ed->src < 0 || ed->src == dgpu) {
			if (ms_dst && !io->done && edge_local(w, ed, e))
				return e->code;
			io->done = true;
			continue;
		}
		if (ms_src && !io->send) {
			int64_t n = edge_pack(w, ed, NULL, true);

			if (n != ed->bytes)
				return err_set(e, NR_EIO, "live: edge %d carries %lld bytes, its pieces %lld",
					       mv->edge, (long long)ed->bytes, (long long)n);
			if (!(io->send = malloc((size_t)n + 1)))
				return err_oom(e);
			if (edge_pack(w, ed, io->send, true) < 0)
				return err_set(e, NR_EIO, "live: GPU %d: a piece is read after it is freed",
					       ed->src);
		}
		if (ms_dst && !io->recv && !(io->recv = malloc((size_t)ed->bytes + 1)))
			return err_oom(e);
		for (int64_t o = mv->off; o < mv->off + mv->bytes; o += MSG_MAX) {
			int64_t n = mv->off + mv->bytes - o < MSG_MAX ? mv->off + mv->bytes - o : MSG_MAX;
			struct exec_msg m = {
				.src = w->rank_of[ed->src], .dst = w->rank_of[dgpu],
				.send = ms_src ? io->send + o : NULL, .recv = ms_dst ? io->recv + o : NULL,
				.bytes = (size_t)n,
			};

			if (msg_add(ms, m))
				return err_oom(e);
			if (ms_src)
				*sent += (uint64_t)n;
		}
	}
	return NR_OK;
}

/* After a round: unpack the edges whose last byte came. */
static int round_finish(struct walk *w, const struct tg_round *rd, struct err *e)
{
	for (int k = rd->move0; k < rd->move0 + rd->nmoves; k++) {
		const struct tg_move *mv = &w->g.moves[k];
		const struct tg_edge *ed = &w->g.edges[mv->edge];
		struct edge_io *io = &w->io[mv->edge];

		if (io->done)
			continue;
		if (io->send && (io->sent += mv->bytes) >= ed->bytes) {
			free(io->send);
			io->send = NULL;
		}
		if (io->recv && (io->got += mv->bytes) >= ed->bytes) {
			if (edge_pack(w, ed, io->recv, false) < 0)
				return err_set(e, NR_EIO, "live: GPU %d: a piece is written before it is "
					       "allocated", ed->staging ? ed->src : ed->dst);
			free(io->recv);
			io->recv = NULL;
			io->done = true;
		}
	}
	return NR_OK;
}

/* Agree on rc everywhere; a rank that did not fail itself takes the
 * message of one that did, so that any rank can report it. */
static int agree(const struct exec_xport *x, int rc, struct err *e)
{
	return x->agree ? x->agree(x->ctx, rc, e) : rc;
}

static int walk_steps(struct walk *w, uint64_t *sent, struct err *e)
{
	struct msgs ms = {0};
	int rc = NR_OK;

	/* a rank that fails in a step goes on to the next round, where every
	 * rank learns of it, so none is left waiting for its messages */
	for (int s = 0; s < w->g.nsteps; s++) {
		const struct tg_step *st = &w->g.steps[s];

		if (st->kind == TG_ALLOC) {
			if (!rc && mine_gpu(w, w->g.dseg[st->index].gpu))
				rc = step_alloc(w, &w->g.dseg[st->index], e);
		} else if (st->kind == TG_FREE) {
			if (!rc && mine_gpu(w, w->g.sseg[st->index].gpu))
				step_free(w, &w->g.sseg[st->index]);
		} else {
			const struct tg_round *rd = &w->g.rounds[st->index];

			if (!rc)
				rc = round_prepare(w, rd, &ms, sent, e);
			if ((rc = agree(w->x, rc, e)))
				break;
			rc = w->x->round(w->x->ctx, ms.m, ms.n, e);
			if (!rc)
				rc = round_finish(w, rd, e);
			if ((rc = agree(w->x, rc, e)))
				break;
		}
	}
	free(ms.m);
	return rc;
}

/* Hand every piece B keeps on the GPUs played here to the sink. */
static int hand_over(struct walk *w, uint64_t *taken, struct err *e)
{
	for (int l = w->g.na; l < w->g.nlists; l++) {
		const struct tg_list *t = &w->g.lists[l];

		for (int j = 0; j < t->l->ngpus; j++) {
			struct hold *h = &w->h[w->hold0[l] + j];

			for (size_t i = 0; h->p && i < t->l->npieces; i++) {
				struct exec_piece lp = held_piece(w, l, j, i);

				if (!h->p[i])
					return err_set(e, NR_EIO, "live: GPU %d: a piece of plan B was never "
						       "allocated", lp.gpu);
				if (w->sink->take(w->sink->ctx, &lp, h->p[i], e))
					return e->code;
				*taken += box_volume(&lp.pc->box) > 0;
				/* handed over: its memory goes as the sink's comes */
				free(h->p[i]);
				h->p[i] = NULL;
			}
		}
	}
	return NR_OK;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int exec_walk_select(const struct env *v, const struct plan *a, const struct plan *b,
		     const struct tg_select *sel, const struct exec_source *src,
		     const struct exec_sink *sink, const struct exec_xport *x,
		     struct exec_stats *st, struct err *e)
{
	struct walk w = {.v = v, .x = x, .src = src, .sink = sink};
	uint64_t c[2] = {0, 0}; /* bytes sent, pieces taken */
	double t00 = now_s(), t0 = 0, t = 0, total;
	int rc;

	memset(st, 0, sizeof *st);
	/* set up: everything that can fail alone, before any message */
	rc = tgraph_build_select(v, a, b, sel, &w.g, e);
	if (!rc)
		rc = map_ranks(&w, e);
	if (!rc)
		rc = make_holds(&w, e);
	if (!rc)
		rc = load_a(&w, e);
	if (!rc)
		rc = link_kept(&w, e);
	if (!rc)
		rc = alloc_host(&w, e);
	if ((rc = agree(x, rc, e)))
		goto out;
	t0 = now_s();
	rc = walk_steps(&w, &c[0], e);
	t = now_s() - t0;
	if ((rc = agree(x, rc, e)))
		goto out;
	if (sink)
		rc = hand_over(&w, &c[1], e);
	if ((rc = agree(x, rc, e)))
		goto out;
	total = now_s() - t00;
	if (x->sum)
		x->sum(x->ctx, c, 2);
	st->ranks = x->nranks;
	st->rounds = w.g.nrounds;
	st->seconds = x->max ? x->max(x->ctx, t) : t;
	st->total_seconds = x->max ? x->max(x->ctx, total) : total;
	st->predicted_s = w.g.predicted_s;
	st->lower_bound_s = w.g.lower_bound_s;
	st->bytes_sent = c[0];
	st->pieces_taken = (long)c[1];
out:
	if (w.io)
		for (int k = 0; k < w.g.nedges; k++) {
			free(w.io[k].send);
			free(w.io[k].recv);
		}
	free(w.io);
	free_holds(&w);
	free(w.hold0);
	free(w.rank_of);
	tgraph_free(&w.g);
	return rc;
}

int exec_walk(const struct env *v, const struct plan *a, const struct plan *b,
	      const struct exec_source *src, const struct exec_sink *sink,
	      const struct exec_xport *x, struct exec_stats *st, struct err *e)
{
	return exec_walk_select(v, a, b, &tg_select_all, src, sink, x, st, e);
}

int exec_run(const struct env *v, const struct plan *a, const struct plan *b,
	     const char *src_store, const char *verify_store, const struct exec_xport *x,
	     struct exec_stats *st, struct err *e)
{
	struct exec_store *from = NULL, *to = NULL;
	struct exec_source src;
	struct exec_sink sink;
	int rc;

	memset(st, 0, sizeof *st);
	rc = exec_store_open(&from, v, src_store, e);
	if (!rc && verify_store)
		rc = exec_store_open(&to, v, verify_store, e);
	if (!(rc = agree(x, rc, e))) {
		src = exec_store_source(from);
		sink = exec_store_verifier(to);
		rc = exec_walk(v, a, b, &src, to ? &sink : NULL, x, st, e);
		st->pieces_verified = to ? st->pieces_taken : 0;
	}
	exec_store_close(from);
	exec_store_close(to);
	return rc;
}

