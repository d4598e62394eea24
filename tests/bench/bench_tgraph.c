/* make bench: the global transition graph for four 8B models (8B PPO) on
 * 1024 H100 GPUs, between real plans: build time (median of repeated
 * builds) against the 1 s target, and predicted time over the lower bound
 * against the 1.15 target.  The last pair is the all-gather case, where
 * the reference model goes from sharded to replicated on every GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "plan/search.h"
#include "state/tgraph.h"

#define RUNS 5

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static int search(const struct env *v, const char *pin, struct plan *p)
{
	struct space sp;
	struct search_stats st;
	struct err e;

	space_init(&sp);
	if ((pin && pin_parse(v->job, pin, &sp, &e)) ||
	    plan_search(v, &sp, false, NULL, p, &st, &e)) {
		printf("tgraph: no plan: %s\n", e.msg);
		return -1;
	}
	return 0;
}

/* Build the graph from a to b on v's cluster RUNS times; print the numbers. */
static void measure(const char *what, const struct env *v, const struct plan *a,
		    const struct plan *b)
{
	double t[RUNS];
	struct tgraph g;
	struct err e;

	for (int i = 0; i < RUNS; i++) {
		double t0 = now();

		if (tgraph_build(v, a, b, &g, &e)) {
			printf("tgraph %s: %s\n", what, e.msg);
			return;
		}
		t[i] = now() - t0;
		if (i < RUNS - 1)
			tgraph_free(&g);
	}
	qsort(t, RUNS, sizeof t[0], cmp);
	printf("tgraph %s:\n", what);
	printf("  build: median %.3f s over %d runs (target 1 s: %s); %d edges, %d rounds, "
	       "%d staged segments\n", t[RUNS / 2], RUNS, t[RUNS / 2] <= 1 ? "met" : "NOT met",
	       g.nedges, g.nrounds, g.nstages);
	printf("  moves %.1f GiB (intra %.1f, inter %.1f, host %.1f, store %.1f, local %.1f), "
	       "keeps %.1f GiB in place\n",
	       (g.link_bytes[TG_INTRA] + g.link_bytes[TG_INTER] + g.link_bytes[TG_HOST] +
		g.link_bytes[TG_STORE] + g.link_bytes[TG_LOCAL]) / GIB,
	       g.link_bytes[TG_INTRA] / GIB, g.link_bytes[TG_INTER] / GIB,
	       g.link_bytes[TG_HOST] / GIB, g.link_bytes[TG_STORE] / GIB,
	       g.link_bytes[TG_LOCAL] / GIB, g.kept_bytes / GIB);
	printf("  predicted %.3f s, lower bound %.3f s: ratio %.3f (target 1.15: %s)\n",
	       g.predicted_s, g.lower_bound_s,
	       g.lower_bound_s > 0 ? g.predicted_s / g.lower_bound_s : 1.0,
	       g.predicted_s <= 1.15 * g.lower_bound_s ? "met" : "NOT met");
	tgraph_free(&g);
}

int main(void)
{
	static struct job job;
	static struct cluster full, down;
	static struct plan a, pinned, small, sharded, replicated;
	struct coef k;
	struct env vf = { &job, &full, &k }, vd = { &job, &down, &k };
	struct err e;

	coef_defaults(&k);
	if (job_load(&job, "examples/jobs/ppo-llama3-8b.json", &e) ||
	    cluster_load(&full, "examples/clusters/h100-128x8.json", &e)) {
		printf("tgraph: %s\n", e.msg);
		return 1;
	}
	down = full;
	for (int gpu = 120 * full.gpus_per_node; gpu < cluster_gpus(&full); gpu++)
		down.up[gpu] = false;
	if (search(&vf, NULL, &a) || search(&vf, "actor@training=tp4,pp2", &pinned) ||
	    search(&vd, NULL, &small) ||
	    search(&vf, "reference@inference=tp1,pp1,fsdp", &sharded) ||
	    search(&vf, "reference@inference=tp1,pp1,nofsdp", &replicated))
		return 1;
	measure("8B PPO, 1024 GPUs: adaptive -> actor pinned at tp4 pp2", &vf, &a, &pinned);
	measure("8B PPO: adaptive on 1024 GPUs -> adaptive with nodes 120-127 down", &vd, &a,
		&small);
	measure("8B PPO, 1024 GPUs: reference sharded (FSDP) -> replicated, a whole copy on each "
		"of its GPUs", &vf, &sharded, &replicated);
	return 0;
}
