/* Live resharding (live.h): the transition schedule walked by ranks that
 * hold their pieces in host memory, stores as its source and sink, and
 * its MPI transport.
 *
 * Every piece a rank holds is a buffer of its own (local_len elements,
 * padding tail zeroed), so that allocating and freeing segments is exactly
 * what the schedule says.  An edge between two ranks is packed by its
 * sender into one contiguous buffer in the edge's order (each destination
 * piece's region, ascending), sent in the byte ranges its moves give, and
 * unpacked by its receiver once its last byte has come. */
#include "mpi/live.h"

#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <xxhash.h>

#include "common/err.h"
#include "mpi/mpi_impl.h"
#include "plan/cost.h"
#include "plan/plan.h"
#include "state/safetensors.h"
#include "state/store.h"
#include "state/tgraph.h"

/* --- pieces read from a store ------------------------------------------------- */

struct live_store {
	struct store_reader *r;
	const struct env *v;
	int jmodel[MAX_MODELS];    /* job model → manifest model, -1 none */
	void *tmp;                 /* verifying: a piece's elements from the store */
	size_t tmpcap;
};

static const char *tensor_name(const struct live_store *s, int model, int tensor)
{
	const struct layout *lo = &store_reader_manifest(s->r)->models[model].layout;

	return tensor >= 0 && tensor < lo->ntensors ? lo->tensors[tensor].name : "?";
}

/* Fill region of dst (a buffer holding dbox of job model jm's tensor, kind)
 * from the store.  NR_EINPUT when the store lacks the model or kind, or
 * keeps it in elements of another size: the ranks hold each kind in one
 * buffer of one element size, so a tensor a checkpoint keeps in another
 * dtype than the model's (fp32 norms beside bf16 weights) cannot move
 * live; store_apply reshards it. */
static int src_fill(struct live_store *s, int jm, enum state_kind kind, int tensor,
		    const struct box *region, void *dst, const struct box *dbox, int eb,
		    struct err *e)
{
	const struct manifest *m = store_reader_manifest(s->r);
	const char *name = store_reader_name(s->r);
	int mi = s->jmodel[jm];
	const size_t *ord;
	size_t n;
	int64_t got = 0;

	if (mi < 0)
		return err_set(e, NR_EINPUT, "%s: the store has no model %s", name,
			       s->v->job->models[jm].name);
	if (layout_kind_bytes(&m->models[mi].lo.arch, kind) != eb)
		return err_set(e, NR_EINPUT, "%s: model %s keeps %s in %d-byte elements, the plan in %d",
			       name, m->models[mi].lo.name, state_kind_names[kind],
			       layout_kind_bytes(&m->models[mi].lo.arch, kind), eb);
	if (st_dtype_bits((enum st_dtype)mmodel_dtype(&m->models[mi], kind, tensor)) != 8 * eb)
		return err_set(e, NR_EINPUT, "%s: model %s keeps tensor %s in %s beside %s weights; "
			       "live resharding moves one dtype per model: reshard this store with "
			       "nereus-transition apply", name, m->models[mi].lo.name,
			       tensor_name(s, mi, tensor),
			       st_dtype_name((enum st_dtype)mmodel_dtype(&m->models[mi], kind, tensor)),
			       m->models[mi].lo.arch.dtype);
	ord = store_reader_pieces(s->r, mi, kind, tensor, &n);
	for (size_t i = 0; i < n; i++) {
		const struct mpiece *p = &m->pieces[ord[i]];
		const void *data;
		struct box x;

		if (!box_intersect(&p->box, region, &x))
			continue;
		if (store_reader_piece(s->r, ord[i], &data, e))
			return e->code;
		box_copy(dst, dbox, data, &p->box, &x, (size_t)eb);
		got += box_volume(&x);
	}
	if (got != box_volume(region))
		return err_set(e, NR_EINPUT, "%s: tensor %s (%s) of model %s is not all there",
			       name, tensor_name(s, mi, tensor), state_kind_names[kind],
			       m->models[mi].lo.name);
	return NR_OK;
}

/* The store as a source: a piece of A is its box's elements. */
static int store_fill(void *ctx, const struct live_piece *p, void *dst, struct err *e)
{
	if (box_volume(&p->pc->box) == 0)
		return NR_OK;
	return src_fill(ctx, p->u->model, p->kind, p->pc->tensor, &p->pc->box, dst, &p->pc->box,
			p->elem_bytes, e);
}

static int store_fill_region(void *ctx, int model, enum state_kind kind, int tensor,
			     const struct box *region, void *dst, const struct box *dbox, int eb,
			     struct err *e)
{
	return src_fill(ctx, model, kind, tensor, region, dst, dbox, eb, e);
}

/* The store as a sink: a piece of B checked by its checksum when the
 * store holds exactly that box, else against the elements the store
 * holds for it. */
static int store_take(void *ctx, const struct live_piece *p, const void *data, struct err *e)
{
	struct live_store *s = ctx;
	const struct manifest *m = store_reader_manifest(s->r);
	size_t len = (size_t)box_volume(&p->pc->box) * (size_t)p->elem_bytes, n;
	int mi = s->jmodel[p->u->model];
	bool ok = false, exact = false;
	const size_t *ord;

	if (len == 0)
		return NR_OK;
	if (mi < 0)
		return err_set(e, NR_EINPUT, "%s: the store has no model %s", store_reader_name(s->r),
			       s->v->job->models[p->u->model].name);
	ord = store_reader_pieces(s->r, mi, p->kind, p->pc->tensor, &n);
	for (size_t k = 0; k < n; k++) {
		const struct mpiece *q = &m->pieces[ord[k]];

		if (box_eq(&q->box, &p->pc->box)) {
			exact = true;
			ok = XXH3_64bits(data, len) == q->xxh3;
			break;
		}
	}
	if (!exact) {
		if (len > s->tmpcap) {
			free(s->tmp);
			s->tmpcap = 0;
			if (!(s->tmp = malloc(len)))
				return err_set(e, NR_EIO, "out of memory");
			s->tmpcap = len;
		}
		if (src_fill(s, p->u->model, p->kind, p->pc->tensor, &p->pc->box, s->tmp, &p->pc->box,
			     p->elem_bytes, e))
			return e->code;
		ok = !memcmp(s->tmp, data, len);
	}
	if (!ok)
		return err_set(e, NR_EIO, "live: rank %d: tensor %s (%s) of model %s does not match "
			       "its checksum in %s", p->rank, tensor_name(s, mi, p->pc->tensor),
			       state_kind_names[p->kind], m->models[mi].lo.name,
			       store_reader_name(s->r));
	return NR_OK;
}

int live_store_open(struct live_store **s, const struct env *v, const char *path,
		    struct err *e)
{
	const struct manifest *m;
	int rc;

	if (!(*s = calloc(1, sizeof **s)))
		return err_set(e, NR_EIO, "out of memory");
	if ((rc = store_reader_open(&(*s)->r, path, e))) {
		free(*s);
		*s = NULL;
		return rc;
	}
	(*s)->v = v;
	m = store_reader_manifest((*s)->r);
	for (int j = 0; j < v->job->nmodels; j++) {
		(*s)->jmodel[j] = -1;
		for (int k = 0; k < m->nmodels; k++)
			if (!strcmp(m->models[k].lo.name, v->job->models[j].name))
				(*s)->jmodel[j] = k;
	}
	return NR_OK;
}

void live_store_close(struct live_store *s)
{
	if (!s)
		return;
	store_reader_close(s->r);
	free(s->tmp);
	free(s);
}

struct live_source live_store_source(struct live_store *s)
{
	return (struct live_source){ .fill = store_fill, .fill_region = store_fill_region, .ctx = s };
}

struct live_sink live_store_verifier(struct live_store *s)
{
	return (struct live_sink){ .take = store_take, .ctx = s };
}

/* --- the walker ------------------------------------------------------------------- */

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
	const struct live_xport *x;
	int *rank_of;              /* GPU → rank, -1 none */
	int *hold0;                /* list → index of its first holder in h */
	struct hold *h;
	struct edge_io *io;
	const struct live_source *src;
	const struct live_sink *sink;
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

static int oom(struct err *e)
{
	return err_set(e, NR_EIO, "out of memory");
}

/* Piece i that the j-th holder of list keeps, as sources and sinks see
 * it. */
static struct live_piece held_piece(const struct walk *w, int list, int j, size_t i)
{
	const struct tg_list *t = &w->g.lists[list];
	const struct emu_set *es = list < w->g.na ? &w->g.a : &w->g.b;
	int gpu = t->l->gpus[j];

	return (struct live_piece){
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
		return oom(e);
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
		return oom(e);
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
		return oom(e);
	for (int l = 0; l < w->g.nlists; l++) {
		w->hold0[l] = nh;
		nh += w->g.lists[l].l->ngpus;
	}
	if (!(w->h = calloc((size_t)nh + 1, sizeof *w->h)) ||
	    !(w->io = calloc((size_t)w->g.nedges + 1, sizeof *w->io)))
		return oom(e);
	for (int l = 0; l < w->g.nlists; l++) {
		const struct emu_list *el = w->g.lists[l].l;
		size_t n = el->npieces + 1;

		for (int j = 0; j < el->ngpus; j++) {
			struct hold *h = &w->h[w->hold0[l] + j];

			if (!mine_gpu(w, el->gpus[j]))
				continue;
			if (!(h->p = calloc(n, sizeof *h->p)))
				return oom(e);
			if (l < w->g.na && (!(h->host = calloc(n, sizeof *h->host)) ||
					    !(h->kept = calloc(n, sizeof *h->kept))))
				return oom(e);
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
				struct live_piece lp = held_piece(w, l, j, i);

				if (!(h->p[i] = calloc(1, piece_bytes(w, l, (int)i) + 1)))
					return oom(e);
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
				return oom(e);
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
			return oom(e);
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
	struct live_msg *m;
	int n, cap;
};

static int msg_add(struct msgs *ms, struct live_msg m)
{
	if (ms->n == ms->cap) {
		int cap = ms->cap ? 2 * ms->cap : 64;
		struct live_msg *nm = realloc(ms->m, (size_t)cap * sizeof *nm);

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
				return oom(e);
			if (edge_pack(w, ed, io->send, true) < 0)
				return err_set(e, NR_EIO, "live: GPU %d: a piece is read after it is freed",
					       ed->src);
		}
		if (ms_dst && !io->recv && !(io->recv = malloc((size_t)ed->bytes + 1)))
			return oom(e);
		for (int64_t o = mv->off; o < mv->off + mv->bytes; o += MSG_MAX) {
			int64_t n = mv->off + mv->bytes - o < MSG_MAX ? mv->off + mv->bytes - o : MSG_MAX;
			struct live_msg m = {
				.src = w->rank_of[ed->src], .dst = w->rank_of[dgpu],
				.send = ms_src ? io->send + o : NULL, .recv = ms_dst ? io->recv + o : NULL,
				.bytes = (size_t)n,
			};

			if (msg_add(ms, m))
				return oom(e);
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
static int agree(const struct live_xport *x, int rc, struct err *e)
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
				struct live_piece lp = held_piece(w, l, j, i);

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

int live_walk(const struct env *v, const struct plan *a, const struct plan *b,
	      const struct live_source *src, const struct live_sink *sink,
	      const struct live_xport *x, struct live_stats *st, struct err *e)
{
	struct walk w = {.v = v, .x = x, .src = src, .sink = sink};
	uint64_t c[2] = {0, 0}; /* bytes sent, pieces taken */
	double t00 = now_s(), t0 = 0, t = 0, total;
	int rc;

	memset(st, 0, sizeof *st);
	/* set up: everything that can fail alone, before any message */
	rc = tgraph_build(v, a, b, &w.g, e);
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

int live_run(const struct env *v, const struct plan *a, const struct plan *b,
	     const char *src_store, const char *verify_store, const struct live_xport *x,
	     struct live_stats *st, struct err *e)
{
	struct live_store *from = NULL, *to = NULL;
	struct live_source src;
	struct live_sink sink;
	int rc;

	memset(st, 0, sizeof *st);
	rc = live_store_open(&from, v, src_store, e);
	if (!rc && verify_store)
		rc = live_store_open(&to, v, verify_store, e);
	if (!(rc = agree(x, rc, e))) {
		src = live_store_source(from);
		sink = live_store_verifier(to);
		rc = live_walk(v, a, b, &src, to ? &sink : NULL, x, st, e);
		st->pieces_verified = to ? st->pieces_taken : 0;
	}
	live_store_close(from);
	live_store_close(to);
	return rc;
}

/* --- MPI ------------------------------------------------------------------------- */

struct mpi_ctx {
	MPI_Comm comm;
	MPI_Request *req;
	int cap;
};

static int mpi_round(void *ctx, const struct live_msg *m, int n, struct err *e)
{
	struct mpi_ctx *c = ctx;
	int nr = 0, rc = MPI_SUCCESS;

	if (2 * n > c->cap) {
		MPI_Request *r = realloc(c->req, (size_t)(2 * n) * sizeof *r);

		if (!r)
			return oom(e);
		c->req = r;
		c->cap = 2 * n;
	}
	/* receives first, so that no send waits on a receive not yet posted */
	for (int i = 0; i < n && rc == MPI_SUCCESS; i++)
		if (m[i].recv)
			rc = MPI_Irecv(m[i].recv, (int)m[i].bytes, MPI_BYTE, m[i].src, m[i].tag % 32768,
				       c->comm, &c->req[nr++]);
	for (int i = 0; i < n && rc == MPI_SUCCESS; i++)
		if (m[i].send)
			rc = MPI_Isend(m[i].send, (int)m[i].bytes, MPI_BYTE, m[i].dst, m[i].tag % 32768,
				       c->comm, &c->req[nr++]);
	if (rc == MPI_SUCCESS)
		rc = MPI_Waitall(nr, c->req, MPI_STATUSES_IGNORE);
	if (rc != MPI_SUCCESS)
		return err_set(e, NR_EIO, "live: MPI transfer failed (error %d)", rc);
	return NR_OK;
}

static int mpi_agree(void *ctx, int rc, struct err *e)
{
	struct mpi_ctx *c = ctx;

	return mpi_agree_on(c->comm, rc, e);
}

static void mpi_sum(void *ctx, uint64_t *v, int n)
{
	struct mpi_ctx *c = ctx;

	MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_UINT64_T, MPI_SUM, c->comm);
}

static double mpi_max(void *ctx, double t)
{
	struct mpi_ctx *c = ctx;
	double out = t;

	MPI_Allreduce(&t, &out, 1, MPI_DOUBLE, MPI_MAX, c->comm);
	return out;
}

int live_init(int *argc, char ***argv, int *rank, int *size)
{
	if (MPI_Init(argc, argv) != MPI_SUCCESS)
		return NR_EIO;
	MPI_Comm_rank(MPI_COMM_WORLD, rank);
	MPI_Comm_size(MPI_COMM_WORLD, size);
	return NR_OK;
}

void live_finalize(void)
{
	MPI_Finalize();
}

/* The MPI transport over a duplicate of the world, one rank a process. */
struct mpi_xport {
	struct mpi_ctx c;
	struct live_xport x;
	int *mine;
};

static int xport_open(struct mpi_xport *m, bool gpu_is_rank, struct err *e)
{
	int me, size, rc = NR_OK;

	memset(m, 0, sizeof *m);
	if (MPI_Comm_dup(MPI_COMM_WORLD, &m->c.comm) != MPI_SUCCESS)
		return err_set(e, NR_EIO, "live: MPI is not running");
	MPI_Comm_rank(m->c.comm, &me);
	MPI_Comm_size(m->c.comm, &size);
	if (!(m->mine = calloc((size_t)size, sizeof *m->mine)))
		rc = oom(e);
	else
		m->mine[me] = 1;
	m->x = (struct live_xport){
		.nranks = size, .mine = m->mine, .gpu_is_rank = gpu_is_rank, .round = mpi_round,
		.agree = mpi_agree, .sum = mpi_sum, .max = mpi_max, .ctx = &m->c,
	};
	if ((rc = mpi_agree_on(m->c.comm, rc, e))) {
		free(m->mine);
		MPI_Comm_free(&m->c.comm);
	}
	return rc;
}

static void xport_close(struct mpi_xport *m)
{
	free(m->mine);
	free(m->c.req);
	MPI_Comm_free(&m->c.comm);
}

int live_reshard(const struct env *v, const struct plan *a, const struct plan *b,
		 const char *src_store, const char *verify_store, struct live_stats *st,
		 struct err *e)
{
	struct mpi_xport m;
	int rc;

	memset(st, 0, sizeof *st);
	if ((rc = xport_open(&m, false, e)))
		return rc;
	rc = live_run(v, a, b, src_store, verify_store, &m.x, st, e);
	xport_close(&m);
	return rc;
}

int live_walk_world(const struct env *v, const struct plan *a, const struct plan *b,
		    const struct live_source *src, const struct live_sink *sink,
		    struct live_stats *st, struct err *e)
{
	struct mpi_xport m;
	int rc;

	memset(st, 0, sizeof *st);
	if ((rc = xport_open(&m, true, e)))
		return rc;
	rc = live_walk(v, a, b, src, sink, &m.x, st, e);
	xport_close(&m);
	return rc;
}
