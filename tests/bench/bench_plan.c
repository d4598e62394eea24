/* make bench: nereus-plan's search time against its targets (median of
 * repeated runs; ratio to the exhaustive search where that finishes), the
 * tool's peak memory at 1024 GPUs, and the adaptive plan against the
 * baseline layouts on the shipped examples. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "plan/baseline.h"
#include "plan/decide.h"
#include "plan/search.h"

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static int setup(struct env *v, const char *job, const char *cluster)
{
	struct err e;

	coef_defaults((struct coef *)v->k);
	if (job_load((struct job *)v->job, job, &e) ||
	    cluster_load((struct cluster *)v->cl, cluster, &e)) {
		fprintf(stderr, "bench_plan: %s\n", e.msg);
		return -1;
	}
	return 0;
}

/* Median wall-clock and processor seconds of runs searches. */
static int time_search(const struct env *v, const struct space *sp, bool exhaustive,
		       int runs, struct plan *p, double *wall, double *cpu)
{
	double w[64], c[64];
	struct search_stats st;
	struct err e;

	for (int i = 0; i < runs; i++) {
		if (plan_search(v, sp, exhaustive, NULL, p, &st, &e) != NR_OK)
			return -1;
		w[i] = st.seconds;
		c[i] = st.cpu_seconds;
	}
	qsort(w, (size_t)runs, sizeof w[0], cmp);
	qsort(c, (size_t)runs, sizeof c[0], cmp);
	*wall = w[runs / 2];
	*cpu = c[runs / 2];
	return 0;
}

/* The target is on processor time: on a shared machine the wall clock
 * also counts other programs' turns. */
static void search_speed(struct env *v, const char *job, const char *cluster, int runs,
			 double target_ms)
{
	static struct plan p;
	struct space sp;
	double wall, cpu;

	if (setup(v, job, cluster))
		return;
	space_init(&sp);
	if (time_search(v, &sp, false, runs, &p, &wall, &cpu)) {
		printf("search %s on %s: no plan\n", job, cluster);
		return;
	}
	printf("search %-28s %-26s %5d GPUs: median %8.2f ms processor time (%.2f ms wall) "
	       "over %d runs; target %.0f ms: %.2fx, %s\n", strrchr(job, '/') + 1,
	       strrchr(cluster, '/') + 1, cluster_gpus_up(v->cl), cpu * 1e3, wall * 1e3, runs,
	       target_ms, cpu * 1e3 / target_ms, cpu * 1e3 <= target_ms ? "met" : "NOT met");
}

static void against_exhaustive(struct env *v, const char *job, int nodes,
			       const char *const pins[])
{
	static struct plan fast, full;
	struct space sp;
	struct err e;
	double tf, tx, w;

	if (setup(v, job, "examples/clusters/h100-8x8.json"))
		return;
	((struct cluster *)v->cl)->nodes = nodes;
	space_init(&sp);
	for (int i = 0; pins && pins[i]; i++)
		pin_parse(v->job, pins[i], &sp, &e);
	if (time_search(v, &sp, false, 5, &fast, &w, &tf) ||
	    time_search(v, &sp, true, 1, &full, &w, &tx)) {
		printf("exhaustive %s: no plan\n", job);
		return;
	}
	printf("exhaustive %-24s %3d GPUs%s: fast %.2f ms, exhaustive %.2f ms (%.0fx); "
	       "step %.3f s vs %.3f s (%s)\n", strrchr(job, '/') + 1, nodes * 8,
	       pins ? " (pinned)" : "", tf * 1e3, tx * 1e3, tx / tf, fast.step_time,
	       full.step_time, fast.step_time == full.step_time ? "same" : "DIFFERENT");
}

static void peak_rss(const char *build)
{
	char tool[4096];
	struct rusage ru;
	int status;
	pid_t pid;

	snprintf(tool, sizeof tool, "%s/nereus-plan", build);
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		if (!freopen("/dev/null", "w", stdout))
			_exit(127);
		execl(tool, tool, "--job", "examples/jobs/ppo-llama3-8b.json", "--cluster",
		      "examples/clusters/h100-128x8.json", (char *)NULL);
		_exit(127);
	}
	if (pid < 0 || wait4(pid, &status, 0, &ru) < 0 || !WIFEXITED(status) ||
	    WEXITSTATUS(status) != 0) {
		printf("peak memory: nereus-plan did not run\n");
		return;
	}
	printf("peak memory of nereus-plan, 8B PPO on 1024 GPUs: %.1f MiB (target 64 MiB: %s)\n",
	       ru.ru_maxrss / 1024.0, ru.ru_maxrss <= 64 * 1024 ? "met" : "NOT met");
}

static void baselines(struct env *v, const char *job, const char *cluster)
{
	static struct plan best, base;
	struct search_stats st;
	struct space sp;
	struct err e;

	if (setup(v, job, cluster))
		return;
	space_init(&sp);
	if (plan_search(v, &sp, false, NULL, &best, &st, &e)) {
		printf("layouts %-28s %-26s: %s\n", strrchr(job, '/') + 1,
		       strrchr(cluster, '/') + 1, e.msg);
		return;
	}
	printf("layouts %-28s %-26s adaptive %8.2f s/step", strrchr(job, '/') + 1,
	       strrchr(cluster, '/') + 1, best.step_time);
	for (int l = LAYOUT_VERL; l <= LAYOUT_OPENRLHF; l++) {
		space_init(&sp);
		if (layout_space(v, (enum plan_layout)l, NULL, &sp, &e) ||
		    plan_search(v, &sp, false, NULL, &base, &st, &e))
			printf("  %s: does not fit", layout_names[l]);
		else
			printf("  %s %.2f s (%.2fx)", layout_names[l], base.step_time,
			       base.step_time / best.step_time);
	}
	printf("\n");
}

int main(void)
{
	static struct job job;
	static struct cluster cl;
	static struct coef k;
	struct env v = { &job, &cl, &k };
	const char *build = getenv("NEREUS_BUILD") ? getenv("NEREUS_BUILD") : "build";
	const char *const pins[] = { "critic@training=tp2,pp1,mb1,selective,zero,nooffload",
				     "reference@inference=tp1,pp1,mb4,nooffload",
				     "reward@inference=tp1,pp1,mb4,nooffload", NULL };
	const char *const jobs[] = { "examples/jobs/ppo-llama3-8b.json",
				     "examples/jobs/ppo-llama3-70b-8b-critic.json",
				     "examples/jobs/grpo-qwen-1.5b.json", NULL };
	const char *const clusters[] = { "examples/clusters/h100-8x8.json",
					 "examples/clusters/a100-16x8.json",
					 "examples/clusters/h200-4x8.json",
					 "examples/clusters/h100-128x8.json", NULL };

	search_speed(&v, jobs[0], "examples/clusters/h100-8x8.json", 11, 5);
	search_speed(&v, jobs[0], "examples/clusters/h100-128x8.json", 5, 50);
	against_exhaustive(&v, jobs[2], 4, NULL);
	against_exhaustive(&v, jobs[0], 2, pins);
	peak_rss(build);
	for (int j = 0; jobs[j]; j++)
		for (int c = 0; clusters[c]; c++)
			baselines(&v, jobs[j], clusters[c]);
	return 0;
}
