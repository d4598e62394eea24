/* The global transition graph and its memory-ordered schedule (tgraph.h):
 * building it all, and the small helpers every part uses.
 *
 * Building it has three parts, each in a file of its own: the source
 * index (tgraph_index.c), the edges (tgraph_edges.c) and the schedule
 * (tgraph_sched.c), which share tgraph_impl.h.  Here the lists are added,
 * the holders that are up found, memory checked, and the parts run in
 * turn.
 *
 * At a thousand GPUs that is millions of (destination, piece) pairs, so
 * the common cases go without a search: a piece inside a piece of the list
 * the last one lay in, a holder with nothing to choose between, a list
 * kept whole, a region joining the edge made last. */
#include "state/tgraph_impl.h"

#include "common/mem.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

const char *const tg_link_names[TG_NLINKS + 1] = { "local", "intra", "host", "inter", "store",
						   NULL };

const struct tg_select tg_select_all = { UINT32_MAX, UINT32_MAX, UINT32_MAX };

struct tg_select tg_select_gen_weights(const struct job *job)
{
	return (struct tg_select){ .a_items = 1u << (1 + job_actor(job)),
				   .b_items = 1u << ITEM_GEN,
				   .kinds = 1u << KIND_WEIGHT };
}

#define SEG_DIV 64         /* a segment holds at most capacity / SEG_DIV bytes */
#define RELAY_DIV 256      /* a run of pieces sharing relay trees: capacity / RELAY_DIV bytes */

/* --- small helpers -------------------------------------------------------- */

int tg_grow(void *pp, int *cap, int need, size_t size)
{
	size_t n = (size_t)*cap;

	if (need < 0 || mem_grow(pp, &n, (size_t)need, size) || n > INT_MAX)
		return -1;
	*cap = (int)n;
	return 0;
}

/* First index in sorted a[0, n) with a[i] >= x. */
int tg_lower_bound(const int *a, int n, int x)
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
		return cost_link_bw(v, 1);
	case TG_INTER:
		return cost_link_bw(v, v->cl->gpus_per_node + 1);
	default:
		return cost_host_bw(v);
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
		for (int r = 0; r < g->b.u[i].nranks && (g->sel.b_items >> g->b.u[i].item & 1); r++)
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
			for (int r = 0; r < g->a.u[i].nranks && !held &&
				     (g->sel.a_items >> g->a.u[i].item & 1); r++)
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
	    tg_add_lists(g, &g->a, g->sel.a_items, seg_max, &g->nsseg))
		return err_oom(e);
	g->na = g->nlists;
	if (tg_add_lists(g, &g->b, g->sel.b_items, seg_max, &g->ndseg))
		return err_oom(e);
	g->sseg = calloc((size_t)g->nsseg + 1, sizeof *g->sseg);
	g->dseg = calloc((size_t)g->ndseg + 1, sizeof *g->dseg);
	if (!g->sseg || !g->dseg || up_holders(c))
		return err_oom(e);
	tg_fill_segs(g, 0, g->na, g->sseg);
	tg_fill_segs(g, g->na, g->nlists, g->dseg);
	if (tg_find_twins(c))
		return err_oom(e);
	if ((rc = check_memory(v, g, e)) || (rc = tg_build_index(c, e)))
		return rc;
	c->omask = 63;
	c->otab = malloc(64 * sizeof *c->otab);
	if (!c->otab || tg_grow(&c->oused, &c->ousedcap, 64, sizeof *c->oused))
		return err_oom(e);
	memset(c->otab, -1, 64 * sizeof *c->otab);
	for (int l = g->na; l < g->nlists; l++) {
		c->e0[l - g->na] = g->nedges;
		if (c->twin[l] >= 0 ? tg_copy_edges(c, l) : tg_list_edges(c, l, &di))
			return err_oom(e);
	}
	c->e0[g->nlists - g->na] = g->nedges;
	tg_copy_kept(g, c->twin);
	for (int k = 0; k < g->nsseg; k++)
		g->sseg[k].bytes -= g->sseg[k].kept;
	for (int k = 0; k < g->ndseg; k++) {
		g->dseg[k].bytes -= g->dseg[k].kept;
		g->kept_bytes += g->dseg[k].kept;
	}
	return tg_schedule(c, e);
}

static int build_graph(const struct env *v, const struct plan *a, const struct plan *b,
		       const struct tg_select *sel, bool literal, struct tgraph *g, struct err *e)
{
	struct ctx c = { 0 };
	int rc;

	memset(g, 0, sizeof *g);
	g->sel = *sel;
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
	return build_graph(v, a, b, &tg_select_all, false, g, e);
}

int tgraph_build_select(const struct env *v, const struct plan *a, const struct plan *b,
			const struct tg_select *sel, struct tgraph *g, struct err *e)
{
	return build_graph(v, a, b, sel, false, g, e);
}

int tgraph_build_literal(const struct env *v, const struct plan *a, const struct plan *b,
			 struct tgraph *g, struct err *e)
{
	return build_graph(v, a, b, &tg_select_all, true, g, e);
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
