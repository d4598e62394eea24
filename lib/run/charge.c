/* Pricing switches (see charge.h). */
#include "run/charge.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/mem.h"
#include "state/tgraph.h"

int charge_graph(const struct env *v, const struct plan *a, const struct plan *b,
		 struct switch_cost *c, struct err *e)
{
	struct tgraph g;
	int rc = tgraph_build(v, a, b, &g, e);

	if (rc)
		return rc;
	plan_switch_cost(v, a, b, g.predicted_s, (double)g.link_bytes[TG_STORE], c);
	tgraph_free(&g);
	return NR_OK;
}

void charge_transition(const struct env *v, const struct plan *a, const struct plan *b,
		       bool graph, struct switch_cost *c)
{
	struct err e;

	if (graph && charge_graph(v, a, b, c, &e) == NR_OK)
		return;
	plan_switch_cost(v, a, b, -1, 0, c);
}

void charge_init(struct charge *ch, bool graph)
{
	memset(ch, 0, sizeof *ch);
	ch->graph = graph;
	memo_init(&ch->memo, CHARGE_MEMO, CHARGE_MEMO_BYTES, sizeof(struct switch_cost));
}

void charge_free(struct charge *ch)
{
	memo_free(&ch->memo);
}

struct key {
	unsigned char *p;
	size_t n, cap;
	bool oom;
};

static void put(struct key *k, const void *x, size_t n)
{
	if (k->oom)
		return;
	if (mem_grow(&k->p, &k->cap, k->n + n, 1)) {
		k->oom = true;
		return;
	}
	memcpy(k->p + k->n, x, n);
	k->n += n;
}

/* A plan as the transition graph sees it: its pools, its configurations
 * (copied whole, padding and all, from the plan, so the same plan always
 * gives the same bytes) and the pool of every GPU. */
static void put_plan(struct key *k, const struct plan *p, int n)
{
	put(k, &p->npools, sizeof p->npools);
	for (int i = 0; i < p->npools; i++) {
		put(k, &p->pools[i].items, sizeof p->pools[i].items);
		put(k, &p->pools[i].ngpus, sizeof p->pools[i].ngpus);
	}
	put(k, p->home, sizeof p->home);
	put(k, &p->gen, sizeof p->gen);
	put(k, p->gpu_pool, (size_t)n * sizeof p->gpu_pool[0]);
}

static bool make_key(const struct env *v, const struct plan *a, const struct plan *b,
		     bool graph, struct key *k)
{
	int n = cluster_gpus(v->cl);

	put(k, &n, sizeof n);
	put(k, &graph, sizeof graph);
	put_plan(k, a, n);
	put_plan(k, b, n);
	for (int g = 0; g < n; g++) {
		unsigned char up = v->cl->up[g];
		put(k, &up, 1);
	}
	put(k, &v->cl->headroom, sizeof v->cl->headroom);
	for (int i = 0; i < COEF_FIELDS; i++) {
		double x = cost_coef_get(v->k, i);
		put(k, &x, sizeof x);
	}
	return !k->oom;
}

static double clock_s(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int charge_price(struct charge *ch, const struct env *v, const struct plan *a,
		 const struct plan *b, struct switch_cost *c, struct err *e)
{
	struct key k = { 0 };
	const struct switch_cost *held;
	double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
	int slot;

	ch->priced++;
	if (!make_key(v, a, b, ch->graph, &k)) {
		free(k.p);
		return err_oom(e);
	}
	if ((held = memo_find(&ch->memo, k.p, k.n))) {
		free(k.p);
		*c = *held;
		ch->by_bound += !c->graph;
		ch->seconds += clock_s(CLOCK_MONOTONIC) - t0;
		ch->cpu_seconds += clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
		return NR_OK;
	}
	charge_transition(v, a, b, ch->graph, c);
	ch->built += c->graph;
	ch->by_bound += !c->graph;
	if ((slot = memo_claim(&ch->memo, k.n)) < 0) {
		free(k.p);
		return err_oom(e);
	}
	*(struct switch_cost *)memo_val(&ch->memo, slot) = *c;
	memo_keep(&ch->memo, slot, k.p, k.n);
	ch->seconds += clock_s(CLOCK_MONOTONIC) - t0;
	ch->cpu_seconds += clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
	return NR_OK;
}

int charge_decide(const struct env *v, const struct plan *cur, const struct plan *next,
		  long remaining_steps, double min_gain, struct decision *d, struct err *e)
{
	struct switch_cost sc;
	int rc;

	/* the state is where cur put it, whether or not cur fits now: the
	 * graph moves it from there (what was on GPUs now down comes from the
	 * store) */
	if ((rc = charge_graph(v, cur, next, &sc, e)))
		return rc;
	plan_decide_with(v, cur, next, remaining_steps, min_gain, &sc, d);
	return NR_OK;
}
