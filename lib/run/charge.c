/* Pricing switches (see charge.h). */
#include "run/charge.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "state/tgraph.h"

int charge_graph(const struct env *v, const struct plan *a, const struct plan *b,
		 struct switch_cost *c, struct err *e)
{
	struct tgraph g;
	int rc = tgraph_build(v, a, b, &g, e);

	if (rc)
		return rc;
	switch_cost(v, a, b, g.predicted_s, (double)g.link_bytes[TG_STORE], c);
	tgraph_free(&g);
	return NR_OK;
}

void charge_transition(const struct env *v, const struct plan *a, const struct plan *b,
		       bool graph, struct switch_cost *c)
{
	struct err e;

	if (graph && charge_graph(v, a, b, c, &e) == NR_OK)
		return;
	switch_cost(v, a, b, -1, 0, c);
}

void charge_init(struct charge *ch, bool graph)
{
	memset(ch, 0, sizeof *ch);
	ch->graph = graph;
}

void charge_free(struct charge *ch)
{
	for (int i = 0; i < ch->n; i++)
		free(ch->slot[i].key);
	free(ch->slot);
	ch->slot = NULL;
	ch->n = ch->cap = 0;
	ch->bytes = 0;
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

static double clock_s(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The index of the least recently used price held (there is one). */
static int oldest(const struct charge *ch)
{
	int old = 0;

	for (int i = 1; i < ch->n; i++)
		if (ch->slot[i].used < ch->slot[old].used)
			old = i;
	return old;
}

/* The slot for a new price: a new one, or the least recently used when
 * CHARGE_MEMO prices are held; NULL when out of memory. */
static struct charge_slot *free_slot(struct charge *ch)
{
	struct charge_slot *slot;

	if (ch->n < CHARGE_MEMO) {
		if (ch->n == ch->cap) {
			int cap = ch->cap ? 2 * ch->cap : 16;
			struct charge_slot *ns = realloc(ch->slot, (size_t)cap * sizeof *ns);
			if (!ns)
				return NULL;
			ch->slot = ns;
			ch->cap = cap;
		}
		slot = &ch->slot[ch->n++];
		memset(slot, 0, sizeof *slot);
		return slot;
	}
	return &ch->slot[oldest(ch)];
}

/* Forget the least recently used prices until the keys fit in
 * CHARGE_MEMO_BYTES with room for one of len bytes more. */
static void trim(struct charge *ch, size_t len)
{
	while (ch->n > 0 && ch->bytes + len > CHARGE_MEMO_BYTES) {
		int old = oldest(ch);
		ch->bytes -= ch->slot[old].len;
		free(ch->slot[old].key);
		ch->slot[old] = ch->slot[--ch->n];
	}
}

int charge_price(struct charge *ch, const struct env *v, const struct plan *a,
		 const struct plan *b, struct switch_cost *c, struct err *e)
{
	struct key k = { 0 };
	struct charge_slot *slot;
	double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
	uint64_t hash;

	ch->priced++;
	if (!make_key(v, a, b, ch->graph, &k)) {
		free(k.p);
		return err_oom(e);
	}
	hash = XXH3_64bits(k.p, k.n);
	for (int i = 0; i < ch->n; i++) {
		struct charge_slot *s = &ch->slot[i];
		if (s->hash == hash && s->len == k.n && memcmp(s->key, k.p, k.n) == 0) {
			free(k.p);
			s->used = ++ch->clock;
			*c = s->cost;
			ch->by_bound += !c->graph;
			ch->seconds += clock_s(CLOCK_MONOTONIC) - t0;
			ch->cpu_seconds += clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
			return NR_OK;
		}
	}
	charge_transition(v, a, b, ch->graph, c);
	ch->built += c->graph;
	ch->by_bound += !c->graph;
	trim(ch, k.n);
	if (!(slot = free_slot(ch))) {
		free(k.p);
		return err_oom(e);
	}
	ch->bytes = ch->bytes - slot->len + k.n;
	free(slot->key);
	*slot = (struct charge_slot){ k.p, k.n, hash, *c, ++ch->clock };
	ch->seconds += clock_s(CLOCK_MONOTONIC) - t0;
	ch->cpu_seconds += clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
	return NR_OK;
}
