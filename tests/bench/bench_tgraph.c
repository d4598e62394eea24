/* make bench: the global transition graph for four 8B models (8B PPO) on
 * 1024 H100 GPUs, between real plans: build time (median of repeated
 * builds, wall and processor) against the 1 s target, and predicted time
 * over the lower bound against the 1.15 target.  The third pair is the
 * all-gather case, where the reference model goes from sharded to
 * replicated on every GPU; the last the verl-like layout (FSDP in one
 * pool) growing from 512 GPUs to 1024, the growth trace's largest switch.
 * Each pair is built as well as the definition reads (literally, with no
 * shortcut), the measurement the fast paths are compared against. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "plan/baseline.h"
#include "state/tgraph.h"

#define RUNS 5

static double clock_s(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static int search(const struct env *v, enum plan_layout layout, const char *pin,
		  struct plan *p)
{
	struct space sp;
	struct search_stats st;
	struct err e;

	search_space_init(&sp);
	if (layout_space(v, layout, NULL, &sp, &e) || (pin && search_pin_parse(v->job, pin, &sp, &e)) ||
	    plan_search(v, &sp, false, NULL, p, &st, &e)) {
		printf("tgraph: no plan: %s\n", e.msg);
		return -1;
	}
	return 0;
}

/* Build the graph from a to b on v's cluster RUNS times, literally or
 * not: the median wall and processor seconds, the last graph in *g. */
static int build(const struct env *v, const struct plan *a, const struct plan *b, bool literal,
		 double *wall, double *cpu, struct tgraph *g)
{
	double t[RUNS], c[RUNS];
	struct err e;

	for (int i = 0; i < RUNS; i++) {
		double t0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);

		if ((literal ? tgraph_build_literal : tgraph_build)(v, a, b, g, &e)) {
			printf("tgraph: %s\n", e.msg);
			return -1;
		}
		t[i] = clock_s(CLOCK_MONOTONIC) - t0;
		c[i] = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
		if (i < RUNS - 1)
			tgraph_free(g);
	}
	qsort(t, RUNS, sizeof t[0], cmp);
	qsort(c, RUNS, sizeof c[0], cmp);
	*wall = t[RUNS / 2];
	*cpu = c[RUNS / 2];
	return 0;
}

/* Build the graph from a to b, and literally; print the numbers. */
static void measure(const char *what, const struct env *v, const struct plan *a,
		    const struct plan *b)
{
	struct tgraph g, l;
	double wall, cpu, lwall, lcpu;

	if (build(v, a, b, false, &wall, &cpu, &g))
		return;
	printf("tgraph %s:\n", what);
	printf("  build: median %.3f s, %.3f s of processor time, over %d runs (target 1 s: %s); "
	       "%d edges, %d rounds, %d staged segments\n", wall, cpu, RUNS,
	       wall <= 1 ? "met" : cpu <= 1 ? "met in processor time" : "NOT met", g.nedges,
	       g.nrounds, g.nstages);
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
	if (!build(v, a, b, true, &lwall, &lcpu, &l)) {
		printf("  literally: build median %.3f s, %.3f s of processor time (%.1fx the fast "
		       "paths'); predicted %.3f s (the fast paths' %.3f of it), %d edges\n", lwall,
		       lcpu, lcpu / cpu, l.predicted_s,
		       l.predicted_s > 0 ? g.predicted_s / l.predicted_s : 1.0, l.nedges);
		tgraph_free(&l);
	}
	tgraph_free(&g);
}

int main(void)
{
	static struct job job;
	static struct cluster full, down, half;
	static struct plan a, pinned, small, sharded, replicated, verl512, verl1024;
	struct coef k;
	struct env vf = { &job, &full, &k }, vd = { &job, &down, &k }, vh = { &job, &half, &k };
	struct err e;

	cost_coef_defaults(&k);
	if (job_load(&job, "examples/jobs/ppo-llama3-8b.json", &e) ||
	    cluster_load(&full, "examples/clusters/h100-128x8.json", &e)) {
		printf("tgraph: %s\n", e.msg);
		return 1;
	}
	down = half = full;
	for (int gpu = 120 * full.gpus_per_node; gpu < cluster_gpus(&full); gpu++)
		down.up[gpu] = false;
	for (int gpu = cluster_gpus(&full) / 2; gpu < cluster_gpus(&full); gpu++)
		half.up[gpu] = false;
	if (search(&vf, LAYOUT_ADAPTIVE, NULL, &a) ||
	    search(&vf, LAYOUT_ADAPTIVE, "actor@training=tp4,pp2", &pinned) ||
	    search(&vd, LAYOUT_ADAPTIVE, NULL, &small) ||
	    search(&vf, LAYOUT_ADAPTIVE, "reference@inference=tp1,pp1,fsdp", &sharded) ||
	    search(&vf, LAYOUT_ADAPTIVE, "reference@inference=tp1,pp1,nofsdp", &replicated) ||
	    search(&vh, LAYOUT_VERL, NULL, &verl512) || search(&vf, LAYOUT_VERL, NULL, &verl1024))
		return 1;
	measure("8B PPO, 1024 GPUs: adaptive -> actor pinned at tp4 pp2", &vf, &a, &pinned);
	measure("8B PPO: adaptive on 1024 GPUs -> adaptive with nodes 120-127 down", &vd, &a,
		&small);
	measure("8B PPO, 1024 GPUs: reference sharded (FSDP) -> replicated, a whole copy on each "
		"of its GPUs", &vf, &sharded, &replicated);
	measure("8B PPO, verl-like (FSDP, one pool): 512 GPUs -> 1024", &vf, &verl512, &verl1024);
	return 0;
}
