/* Pricing switches (see charge.h). */
#include "run/charge.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "state/tgraph.h"

void charge_transition(const struct env *v, const struct plan *a, const struct plan *b,
		       bool graph, struct switch_cost *c)
{
	struct tgraph g;
	struct err e;

	if (graph && tgraph_build(v, a, b, &g, &e) == NR_OK) {
		switch_cost(v, a, b, g.predicted_s, (double)g.link_bytes[TG_STORE], c);
		tgraph_free(&g);
		return;
	}
	switch_cost(v, a, b, -1, 0, c);
}

void charge_init(struct charge *ch, bool graph)
{
	memset(ch, 0, sizeof *ch);
	ch->graph = graph;
}

void charge_free(struct charge *ch)
{
	for (int i = 0; i < CHARGE_MEMO; i++)
		free(ch->slot[i].key);
	memset(ch->slot, 0, sizeof ch->slot);
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
	if (k->n + n > k->cap) {
		size_t cap = (k->n + n) * 2;
		unsigned char *np = realloc(k->p, cap);
		if (!np) {
			k->oom = true;
			return;
		}
		k->p = np;
		k->cap = cap;
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
		double x = coef_get(v->k, i);
		put(k, &x, sizeof x);
	}
	return !k->oom;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int charge_price(struct charge *ch, const struct env *v, const struct plan *a,
		 const struct plan *b, struct switch_cost *c, struct err *e)
{
	struct key k = { 0 };
	struct charge_slot *slot = &ch->slot[0];
	double t0 = now_s();

	ch->priced++;
	if (!make_key(v, a, b, ch->graph, &k)) {
		free(k.p);
		return err_set(e, NR_EIO, "out of memory");
	}
	for (int i = 0; i < CHARGE_MEMO; i++) {
		struct charge_slot *s = &ch->slot[i];
		if (s->key && s->len == k.n && memcmp(s->key, k.p, k.n) == 0) {
			free(k.p);
			s->used = ++ch->clock;
			*c = s->cost;
			ch->by_bound += !c->graph;
			ch->seconds += now_s() - t0;
			return NR_OK;
		}
		if (s->used < slot->used)
			slot = s;
	}
	charge_transition(v, a, b, ch->graph, c);
	ch->built += c->graph;
	ch->by_bound += !c->graph;
	free(slot->key);
	slot->key = k.p;
	slot->len = k.n;
	slot->cost = *c;
	slot->used = ++ch->clock;
	ch->seconds += now_s() - t0;
	return NR_OK;
}
