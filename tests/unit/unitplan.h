/* Plans for the unit tests that need real ones: the search, with pins, on
 * pools of a given shape. */
#ifndef NEREUS_UNITPLAN_H
#define NEREUS_UNITPLAN_H
#include <stdbool.h>
#include <stdio.h>

#include "plan/search.h"
#include "unit.h"

/* Pool shapes: any, everything on one pool (verl's), a pool per item
 * (OpenRLHF's). */
enum shape { ANY, ONE_POOL, POOL_EACH };

/* The best plan for v with pins (NULL-terminated, may be NULL) on pools
 * of that shape; false, saying why, when none fits. */
static inline bool search_shaped(const struct env *v, const char *const pins[],
				 enum shape shape, struct plan *p)
{
	struct space sp;
	struct search_stats st;
	struct err e = { 0 };
	int nmodels = v->job->nmodels, rc;

	search_space_init(&sp);
	if (shape == ONE_POOL) {
		sp.npools = 1;
		sp.pool_items[0] = (1u << (1 + nmodels)) - 1;
	} else if (shape == POOL_EACH) {
		sp.npools = 1 + nmodels;
		for (int i = 0; i < sp.npools; i++)
			sp.pool_items[i] = 1u << i;
	}
	for (int i = 0; pins && pins[i]; i++)
		CHECK(search_pin_parse(v->job, pins[i], &sp, &e) == NR_OK);
	rc = plan_search(v, &sp, false, NULL, p, &st, &e);
	if (rc)
		printf("#   no plan: %s\n", e.msg);
	return rc == NR_OK;
}

/* The same with one pin (or none: NULL). */
static inline bool search_pinned(const struct env *v, const char *pin, enum shape shape,
				 struct plan *p)
{
	const char *const pins[] = { pin, NULL };

	return search_shaped(v, pins, shape, p);
}

/* Load a job and a cluster, its node count replaced when nodes > 0, beside
 * the default coefficients: what the tests' setups share. */
static inline void load_env(struct job *job, struct cluster *cl, struct coef *k,
			    const char *jobfile, const char *clusterfile, int nodes)
{
	struct err e = { 0 };

	cost_coef_defaults(k);
	CHECK(job_load(job, jobfile, &e) == NR_OK);
	CHECK(cluster_load(cl, clusterfile, &e) == NR_OK);
	if (nodes > 0)
		cl->nodes = nodes;
}

#endif
