/* The global transition graph, checked by walking its schedule.  For plan
 * pairs the search makes on small clusters (other layouts, other pools,
 * GPUs lost, memory so tight it only just holds either plan): no GPU ever
 * holds more than its capacity, transfers only read sources still there
 * and write destinations already allocated, and every piece the new plan
 * keeps is covered exactly once, by edges or in place.  Identical plans
 * move nothing; two models swapping full GPUs are a cycle broken by
 * staging; the predicted time is never below the lower bound. */
#include "plan/search.h"
#include "state/tgraph.h"
#include "unit.h"
#include "unitplan.h"

#include <stdlib.h>
#include <string.h>

static struct job job;
static struct cluster cl;
static struct coef k;
static const struct env v = { &job, &cl, &k };

static void setup(const char *jobfile, int nodes)
{
	load_env(&job, &cl, &k, jobfile, "examples/clusters/h100-8x8.json", nodes);
}

/* The best plan with one pin (or none). */
static bool search(const char *pin, enum shape shape, struct plan *p)
{
	return search_pinned(&v, pin, shape, p);
}

/* Bytes the EMUs of s keep in GPU memory on each GPU that is up. */
static void resident(const struct emu_set *s, int64_t *bytes)
{
	memset(bytes, 0, (size_t)cluster_gpus(&cl) * sizeof *bytes);
	for (int i = 0; i < s->n; i++)
		for (int r = 0; r < s->u[i].nranks; r++)
			if (!s->u[i].host && cl.up[s->u[i].rank_gpu[r]])
				bytes[s->u[i].rank_gpu[r]] += emu_rank_bytes(&s->u[i], r);
}

/* Whether edges a and b write a piece in common. */
static bool share_piece(const struct tg_edge *a, const struct tg_edge *b)
{
	for (int i = 0; i < a->count; i++)
		for (int j = 0; j < b->count; j++)
			if (a->first + i == b->first + j && (!a->whole || (a->mask >> i & 1)) &&
			    (!b->whole || (b->mask >> j & 1)))
				return true;
	return false;
}

/* (6) A relay starts only after every edge bringing its pieces to its
 * source is done; (7) no GPU's network port is busy longer than a
 * round's quantum. */
static void check_round(const struct tgraph *g, const struct tg_round *r, const int64_t *moved,
			const int *in0, const int *in)
{
	double *busy = calloc((size_t)g->ngpus * 2, sizeof *busy);
	bool bad = false;

	for (int m = r->move0; m < r->move0 + r->nmoves; m++) {
		const struct tg_move *mv = &g->moves[m];
		const struct tg_edge *ed = &g->edges[mv->edge];

		if (ed->rseg >= 0 && mv->off == 0)
			for (int k = in0[ed->rseg]; k < in0[ed->rseg + 1]; k++)
				bad |= share_piece(&g->edges[in[k]], ed) &&
				       moved[in[k]] != g->edges[in[k]].bytes;
		if (ed->link == TG_INTRA || ed->link == TG_INTER) {
			busy[2 * ed->src] += mv->bytes / tgraph_link_bw(&v, ed->link);
			busy[2 * ed->dst + 1] += mv->bytes / tgraph_link_bw(&v, ed->link);
		}
	}
	for (int p = 0; p < 2 * g->ngpus; p++)
		bad |= busy[p] > g->quantum_s * (1 + 1e-9) + 1e-12;
	CHECK(!bad);
	free(busy);
}

/* (1) Walk the steps: memory never above capacity, transfers read what is
 * there and write what is allocated, every edge moved once, in order. */
static void walk(const struct tgraph *g)
{
	int n = g->ngpus;
	int64_t *used = calloc((size_t)n, sizeof *used), *after = calloc((size_t)n, sizeof *after);
	int64_t *moved = calloc((size_t)g->nedges + 1, sizeof *moved);
	bool *alloc = calloc((size_t)g->ndseg + 1, 1), *freed = calloc((size_t)g->nsseg + 1, 1);
	bool *staged = calloc((size_t)g->nsseg + 1, 1);
	bool over = false, bad_move = false;
	int *in0 = calloc((size_t)g->ndseg + 2, sizeof *in0), *in = malloc(((size_t)g->nedges + 1) * sizeof *in);

	/* edges by the destination segment they write */
	for (int e = 0; e < g->nedges; e++)
		if (g->edges[e].dseg >= 0)
			in0[g->edges[e].dseg + 2]++;
	for (int d = 0; d <= g->ndseg; d++)
		in0[d + 1] += in0[d];
	for (int e = 0; e < g->nedges; e++)
		if (g->edges[e].dseg >= 0)
			in[in0[g->edges[e].dseg + 1]++] = e;

	resident(&g->a, used);
	resident(&g->b, after);
	for (int gpu = 0; gpu < n; gpu++) {
		CHECK(used[gpu] == g->before[gpu] && after[gpu] == g->after[gpu]);
		CHECK(used[gpu] <= g->capacity);
	}
	for (int s = 0; s < g->nsteps; s++) {
		const struct tg_step *st = &g->steps[s];

		if (st->kind == TG_ALLOC) {
			const struct tg_seg *d = &g->dseg[st->index];

			CHECK(!alloc[st->index] && !d->host);
			alloc[st->index] = true;
			used[d->gpu] += d->bytes;
			over |= used[d->gpu] > g->capacity;
		} else if (st->kind == TG_FREE) {
			const struct tg_seg *x = &g->sseg[st->index];

			CHECK(!freed[st->index] && !x->host);
			freed[st->index] = true;
			used[x->gpu] -= x->bytes;
			/* after its last edge, or once staged */
			for (int e = 0; e < g->nedges; e++)
				if (g->edges[e].sseg == st->index)
					CHECK(moved[e] == g->edges[e].bytes || g->edges[e].staged);
		} else {
			const struct tg_round *r = &g->rounds[st->index];

			check_round(g, r, moved, in0, in);
			for (int m = r->move0; m < r->move0 + r->nmoves; m++) {
				const struct tg_move *mv = &g->moves[m];
				const struct tg_edge *ed = &g->edges[mv->edge];

				bad_move |= mv->off != moved[mv->edge];
				moved[mv->edge] += mv->bytes;
				bad_move |= ed->dseg >= 0 && !g->dseg[ed->dseg].host && !alloc[ed->dseg];
				if (ed->sseg >= 0 && !ed->staging)
					bad_move |= ed->staged ? !staged[ed->sseg] : freed[ed->sseg];
				bad_move |= ed->staging && freed[ed->sseg];
			}
			for (int m = r->move0; m < r->move0 + r->nmoves; m++) {
				const struct tg_edge *ed = &g->edges[g->moves[m].edge];

				if (ed->staging && moved[g->moves[m].edge] == ed->bytes)
					staged[ed->sseg] = true;
			}
		}
	}
	CHECK(!over);
	CHECK(!bad_move);
	for (int e = 0; e < g->nedges; e++)
		CHECK(moved[e] == g->edges[e].bytes);
	for (int d = 0; d < g->ndseg; d++)
		CHECK(alloc[d] || g->dseg[d].host);
	for (int gpu = 0; gpu < n; gpu++) {
		CHECK(used[gpu] == g->after[gpu]);
		CHECK(g->peak[gpu] <= g->capacity);
	}
	free(used);
	free(after);
	free(moved);
	free(alloc);
	free(freed);
	free(staged);
	free(in0);
	free(in);
}

struct region {
	int64_t slot;              /* destination list, holder and piece */
	struct box box;
};

static int cmp_region(const void *pa, const void *pb)
{
	const struct region *a = pa, *b = pb;

	return (a->slot > b->slot) - (a->slot < b->slot);
}

/* Whether A keeps piece p of destination list dl in place on gpu. */
static bool kept(const struct tgraph *g, int dl, int gpu, const struct piece *p)
{
	const struct tg_list *tl = &g->lists[dl];

	if (!cl.up[gpu])
		return false;
	for (int l = 0; l < g->na; l++) {
		const struct tg_list *sl = &g->lists[l];
		const struct piece *q;
		bool holds = false;

		if (sl->u->item != tl->u->item || sl->l->kind != tl->l->kind ||
		    sl->u->host != tl->u->host)
			continue;
		for (int i = 0; i < sl->l->ngpus; i++)
			holds |= sl->l->gpus[i] == gpu;
		q = holds ? tgraph_find_piece(sl, p->tensor) : NULL;
		if (q && q->local_len == p->local_len && q->box.ndim == p->box.ndim &&
		    box_contains(&q->box, &p->box) && box_contains(&p->box, &q->box))
			return true;
	}
	return false;
}

/* (2) Every piece of every holder of B is covered exactly once: in place,
 * or by regions of edges from holders that have them. */
static void cover(const struct tgraph *g)
{
	int64_t *base = calloc((size_t)g->nlists + 1, sizeof *base), nslots = 0;
	struct region *r = NULL;
	size_t n = 0, cap = 0;
	bool bad = false;

	for (int l = g->na; l < g->nlists; l++) {
		base[l] = nslots;
		nslots += (int64_t)g->lists[l].l->ngpus * (int64_t)g->lists[l].l->npieces;
	}
	for (int e = 0; e < g->nedges; e++) {
		const struct tg_edge *ed = &g->edges[e];
		const struct tg_list *dl, *sl = ed->src_list >= 0 ? &g->lists[ed->src_list] : NULL;
		int pos = 0, eb;
		int64_t bytes = 0;

		if (ed->staging)
			continue;
		dl = &g->lists[ed->dst_list];
		eb = dl->u->elem_bytes[dl->l->kind];
		while (pos < dl->l->ngpus && dl->l->gpus[pos] != ed->dst)
			pos++;
		CHECK(pos < dl->l->ngpus);
		bad |= ed->src >= 0 && !cl.up[ed->src];
		if (sl) {
			bool holds = false;

			for (int i = 0; i < sl->l->ngpus; i++)
				holds |= sl->l->gpus[i] == ed->src;
			bad |= !holds || sl->l->kind != dl->l->kind;
		}
		for (int i = 0; i < ed->count; i++) {
			const struct piece *p = &dl->l->pieces[ed->first + i];
			const struct piece *q = sl ? tgraph_find_piece(sl, p->tensor) : NULL;
			struct box x;

			if (ed->whole && !(ed->mask >> i & 1))
				continue;
			if (!ed->whole)
				x = ed->box;
			else if (!sl)
				x = p->box;
			else if (!q || !box_intersect(&p->box, &q->box, &x))
				continue; /* this source shares nothing with the piece */
			bad |= !box_contains(&p->box, &x) || (q && !box_contains(&q->box, &x));
			bad |= sl && !q;
			if (n == cap) {
				cap = cap ? 2 * cap : 1024;
				r = realloc(r, cap * sizeof *r);
			}
			r[n++] = (struct region){ base[ed->dst_list] + pos * (int64_t)dl->l->npieces +
						  ed->first + i, x };
			bytes += box_volume(&x) * eb;
		}
		bad |= bytes != ed->bytes;
	}
	CHECK(!bad);
	if (n)
		qsort(r, n, sizeof *r, cmp_region);
	for (int l = g->na, at = 0; l < g->nlists; l++) {
		const struct emu_list *el = g->lists[l].l;

		for (int pos = 0; pos < el->ngpus; pos++)
			for (size_t i = 0; i < el->npieces; i++) {
				int64_t slot = base[l] + pos * (int64_t)el->npieces + (int64_t)i, vol = 0;
				int from = at;
				bool in_place = kept(g, l, el->gpus[pos], &el->pieces[i]);

				for (; at < (int)n && r[at].slot == slot; at++) {
					vol += box_volume(&r[at].box);
					for (int j = from; j < at; j++)
						bad |= box_intersect(&r[at].box, &r[j].box, NULL);
				}
				bad |= in_place ? at > from : vol != box_volume(&el->pieces[i].box);
			}
	}
	CHECK(!bad);
	free(base);
	free(r);
}

/* Build from a to b and check everything; returns the graph for more. */
static bool check_pair(const struct plan *a, const struct plan *b, struct tgraph *g)
{
	struct err e = { 0 };
	int rc = tgraph_build(&v, a, b, g, &e);

	CHECK(rc == NR_OK);
	if (rc) {
		printf("#   %s\n", e.msg);
		return false;
	}
	walk(g);
	cover(g);
	CHECK(g->predicted_s >= g->lower_bound_s * (1 - 1e-12));
	CHECK((g->nedges == 0) == (g->predicted_s == 0));
	return true;
}

static void check_plans(const struct plan *a, const struct plan *b)
{
	struct tgraph g;

	if (check_pair(a, b, &g))
		tgraph_free(&g);
}

/* (3) */
static void test_identical_plans_move_nothing(void)
{
	static struct plan p;
	struct tgraph g;

	setup("examples/jobs/ppo-llama3-8b.json", 2);
	CHECK(search(NULL, ANY, &p));
	if (!check_pair(&p, &p, &g))
		return;
	CHECK(g.nedges == 0 && g.nrounds == 0 && g.nstages == 0);
	CHECK(g.predicted_s == 0 && g.lower_bound_s == 0);
	for (int gpu = 0; gpu < g.ngpus; gpu++)
		CHECK(g.before[gpu] == g.after[gpu] && g.peak[gpu] == g.before[gpu]);
	tgraph_free(&g);
}

/* (1, 2, 5) other layouts, other pools, both ways */
static void test_layout_changes(void)
{
	static struct plan a, b, c, d, e;

	setup("examples/jobs/ppo-llama3-8b.json", 2);
	CHECK(search(NULL, ANY, &a));
	CHECK(search("actor@training=tp4,pp2", ANY, &b));
	CHECK(search(NULL, ONE_POOL, &c));
	CHECK(search(NULL, POOL_EACH, &d));
	CHECK(search("critic@training=tp1,pp1,fsdp", ONE_POOL, &e));
	check_plans(&a, &b);
	check_plans(&e, &b);
	check_plans(&a, &e);
	check_plans(&b, &a);
	check_plans(&a, &c);
	check_plans(&c, &d);
	check_plans(&d, &a);
	setup("examples/jobs/grpo-qwen-1.5b.json", 1);
	CHECK(search(NULL, ANY, &a));
	CHECK(search("actor@training=tp2,pp2,zero", ANY, &b));
	CHECK(search("actor@training=tp1,pp4,nozero", POOL_EACH, &c));
	check_plans(&a, &b);
	check_plans(&b, &c);
	check_plans(&c, &a);
}

/* (1, 2) GPUs of the current plan went down: what only they held comes
 * from the state store. */
static void test_lost_gpus(void)
{
	static struct plan a, b;
	struct tgraph g;

	setup("examples/jobs/ppo-llama3-8b.json", 2);
	CHECK(search(NULL, ANY, &a));
	for (int gpu = 8; gpu < 16; gpu++)
		cl.up[gpu] = false;
	CHECK(search(NULL, ANY, &b));
	if (check_pair(&a, &b, &g)) {
		CHECK(g.gpus_lost == 8);
		CHECK(g.link_bytes[TG_STORE] > 0);
		for (int e = 0; e < g.nedges; e++)
			CHECK(g.edges[e].src < 8);
		tgraph_free(&g);
	}
	cl.up[3] = false;
	for (int gpu = 8; gpu < 16; gpu++)
		cl.up[gpu] = true;
	CHECK(search(NULL, ANY, &b));
	check_plans(&a, &b);
}

/* (1, 2) GPUs that hold exactly the larger of what either plan keeps. */
static void test_tight_memory(void)
{
	static struct plan a, b;
	const char *const pins[][2] = {
		{ "actor@training=tp2,pp2,zero", "actor@training=tp1,pp4,zero" },
		{ "actor@training=tp1,pp1,zero", "actor@training=tp2,pp1,nozero" },
		{ "actor@training=tp1,pp1,fsdp", "actor@training=tp2,pp2,nofsdp" },
	};

	for (size_t i = 0; i < sizeof pins / sizeof pins[0]; i++) {
		struct tgraph g;
		int64_t most = 0;

		setup("examples/jobs/grpo-qwen-1.5b.json", 1);
		CHECK(search(pins[i][0], ONE_POOL, &a));
		CHECK(search(pins[i][1], ONE_POOL, &b));
		if (!check_pair(&a, &b, &g))
			continue;
		for (int gpu = 0; gpu < g.ngpus; gpu++)
			most = g.before[gpu] > most ? g.before[gpu] : most;
		for (int gpu = 0; gpu < g.ngpus; gpu++)
			most = g.after[gpu] > most ? g.after[gpu] : most;
		tgraph_free(&g);
		cl.headroom = 0;
		cl.gpu.mem_gib = most / GIB;
		check_plans(&a, &b);
		check_plans(&b, &a);
	}
}

/* (4) Two frozen models of equal size swap full GPUs: neither can
 * allocate before the other frees, so one is staged through host memory. */
static void test_cycle_is_staged(void)
{
	static struct plan a, b;
	struct emu_set s;
	struct tgraph g;
	struct err e = { 0 };
	int64_t w;

	setup("examples/jobs/ppo-llama3-8b.json", 1);
	job.nmodels = 3;                     /* actor, critic and reference */
	job.models[2].arch = job.models[1].arch; /* the critic's size, score head and all */
	job.models[0].arch.layers = 1;       /* a small actor, its engines beside it */
	for (int m = 0; m < 3; m++)
		job.models[m].stages[STAGE_TRAIN] = false;
	memset(&a, 0, sizeof a);
	a.npools = 3;
	a.pools[0] = (struct pool){ 3u, 1 }; /* the engines and the actor on GPU 2 */
	a.pools[1] = (struct pool){ 1u << 2, 1 }; /* the critic on GPU 0 */
	a.pools[2] = (struct pool){ 1u << 3, 1 }; /* the reference on GPU 1 */
	for (int m = 0; m < 3; m++)
		a.home[m] = (struct pconf){ .tp = 1, .pp = 1, .dp = 1, .mb = 1 };
	a.gen = a.home[0];
	for (int gpu = 0; gpu < MAX_GPUS; gpu++)
		a.gpu_pool[gpu] = -1;
	a.gpu_pool[0] = 1;
	a.gpu_pool[1] = 2;
	a.gpu_pool[2] = 0;
	b = a;                               /* the critic and the reference swap GPUs */
	b.gpu_pool[0] = 2;
	b.gpu_pool[1] = 1;
	CHECK(emu_build(&v, &a, &s, &e) == NR_OK);
	w = emu_rank_bytes(&s.u[1], 0);
	CHECK(w == emu_rank_bytes(&s.u[2], 0));
	emu_free(&s);
	cl.headroom = 0;
	cl.gpu.mem_gib = w / GIB;
	if (!check_pair(&a, &b, &g))
		return;
	CHECK(g.nstages > 0);
	CHECK(g.link_bytes[TG_HOST] > 0);
	for (int i = 0; i < g.nstages; i++) {
		CHECK(g.edges[g.stages[i].edge].staging);
		CHECK(g.stages[i].round >= 0 && g.stages[i].round < g.nrounds);
	}
	CHECK(g.before[2] == g.after[2] && g.peak[2] == g.before[2]); /* the engines stay */
	tgraph_free(&g);
}

/* (1, 2, 6) A model sharded across GPUs becomes replicated: every GPU
 * needs all of it, which holders pass on to others of their node and
 * across nodes rather than each gathering every shard, and each node
 * takes it in through more than one GPU's network port. */
static void test_replicas_relay(void)
{
	static struct plan a, b;
	struct tgraph g;
	int relays[TG_NLINKS] = { 0 }, entries = 0;
	bool across[32] = { false };
	int64_t most = 0, relayed = 0, direct = 0;

	setup("examples/jobs/ppo-llama3-8b.json", 4);
	CHECK(search("reference@inference=tp1,pp1,dp16,fsdp", ANY, &a));
	CHECK(search("reference@inference=tp1,pp1,dp16,nofsdp", ANY, &b));
	if (!check_pair(&a, &b, &g))
		return;
	for (int e = 0; e < g.nedges; e++) {
		const struct tg_edge *ed = &g.edges[e];

		if (ed->rseg >= 0) {
			relays[ed->link]++;
			CHECK(ed->src_list == ed->dst_list && ed->whole && ed->sseg < 0);
			CHECK((ed->link == TG_INTRA) == (ed->src / 8 == ed->dst / 8));
			CHECK(g.dseg[ed->rseg].gpu == ed->src);
		}
		if (ed->model != 2 || ed->src < 0 || ed->link == TG_LOCAL)
			continue;
		*(ed->rseg >= 0 ? &relayed : &direct) += ed->bytes;
		if (ed->link == TG_INTER && !across[ed->dst]) {
			across[ed->dst] = true;
			entries++;
		}
	}
	CHECK(relays[TG_INTRA] > 0 && relays[TG_INTER] > 0);
	CHECK(relays[TG_LOCAL] + relays[TG_HOST] + relays[TG_STORE] == 0);
	/* without relays every byte would come from the 16 shards */
	printf("#   %d relays within nodes, %d across; %.2f GiB relayed, %.2f GiB from the "
	       "shards; %d GPUs take it in across nodes\n", relays[TG_INTRA], relays[TG_INTER],
	       relayed / GIB, direct / GIB, entries);
	CHECK(relayed > 2 * direct);
	CHECK(entries > 4);
	tgraph_free(&g);
	/* and with GPUs that hold exactly the larger of the two plans, both ways */
	if (!check_pair(&a, &b, &g))
		return;
	for (int gpu = 0; gpu < g.ngpus; gpu++)
		most = g.before[gpu] > most ? g.before[gpu] : most;
	for (int gpu = 0; gpu < g.ngpus; gpu++)
		most = g.after[gpu] > most ? g.after[gpu] : most;
	tgraph_free(&g);
	cl.headroom = 0;
	cl.gpu.mem_gib = most / GIB;
	check_plans(&a, &b);
	check_plans(&b, &a);
}

int main(void)
{
	RUN(test_identical_plans_move_nothing);
	RUN(test_layout_changes);
	RUN(test_lost_gpus);
	RUN(test_tight_memory);
	RUN(test_cycle_is_staged);
	RUN(test_replicas_relay);
	return UNIT_END();
}
