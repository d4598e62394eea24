/* make bench: nereus-plan's search time against its targets (median of
 * repeated runs; ratio to the exhaustive search where that finishes), the
 * tool's peak memory at 1024 GPUs and the exhaustive search's on one node,
 * and the adaptive plan against the baseline layouts on the shipped
 * examples. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
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

	cost_coef_defaults((struct coef *)v->k);
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
	search_space_init(&sp);
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
	search_space_init(&sp);
	for (int i = 0; pins && pins[i]; i++)
		search_pin_parse(v->job, pins[i], &sp, &e);
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

/* Run nereus-plan with args into out; its peak memory, wall-clock and
 * processor seconds into *kib, *wall and *cpu.  -1 when it did not run to
 * success. */
static int run_tool(const char *build, const char *const args[], const char *out, long *kib,
		    double *wall, double *cpu)
{
	char tool[4096];
	const char *argv[32];
	struct timespec t0, t1;
	struct rusage ru;
	int n = 0, status;
	pid_t pid;

	snprintf(tool, sizeof tool, "%s/nereus-plan", build);
	argv[n++] = tool;
	for (int i = 0; args[i] && n < 28; i++)
		argv[n++] = args[i];
	argv[n++] = "-o";
	argv[n++] = out;
	argv[n] = NULL;
	fflush(stdout);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pid = fork();
	if (pid == 0) {
		execv(tool, (char *const *)argv);
		_exit(127);
	}
	if (pid < 0 || wait4(pid, &status, 0, &ru) < 0 || !WIFEXITED(status) ||
	    WEXITSTATUS(status) != 0)
		return -1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	*kib = ru.ru_maxrss;
	*cpu = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
	*wall = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
	return 0;
}

/* Whether two files hold the same bytes. */
static bool same_file(const char *a, const char *b)
{
	FILE *f = fopen(a, "rb"), *g = fopen(b, "rb");
	bool same = f && g;

	while (same) {
		int x = getc(f);
		same = x == getc(g);
		if (x == EOF)
			break;
	}
	if (f)
		fclose(f);
	if (g)
		fclose(g);
	return same;
}

/* The exhaustive search where a front kept whole ran out of memory (24 GB
 * by 68 million plans): the 8B PPO job on one node of eight A100-40GB,
 * streamed in bounded memory (target 4 GiB), and the search's plan. */
static void exhaustive_memory(const char *build)
{
	static const char cluster[] =
		"{ \"nereus\": 1, \"kind\": \"cluster\", \"name\": \"a100-40gb-1x8\", \"nodes\": 1,"
		" \"gpus_per_node\": 8, \"gpu\": { \"model\": \"A100-40GB\", \"memory_gib\": 40,"
		" \"tflops\": 312, \"hbm_gbps\": 1555 } }\n";
	const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	char dir[4096], cl[4200], fast[4200], full[4200];
	long kf, kx;
	double wf, wx, cf, cx;
	FILE *f;

	snprintf(dir, sizeof dir, "%s/bench-plan-XXXXXX", tmp);
	if (!mkdtemp(dir)) {
		printf("exhaustive memory: no temporary directory\n");
		return;
	}
	snprintf(cl, sizeof cl, "%s/cluster.json", dir);
	snprintf(fast, sizeof fast, "%s/fast.json", dir);
	snprintf(full, sizeof full, "%s/full.json", dir);
	f = fopen(cl, "w");
	if (f) {
		fputs(cluster, f);
		fclose(f);
	}
	{
		const char *const a[] = { "--job", "examples/jobs/ppo-llama3-8b.json", "--cluster",
					  cl, NULL };
		const char *const x[] = { "--job", "examples/jobs/ppo-llama3-8b.json", "--cluster",
					  cl, "--exhaustive", NULL };
		if (!f || run_tool(build, a, fast, &kf, &wf, &cf) ||
		    run_tool(build, x, full, &kx, &wx, &cx))
			printf("exhaustive 8B PPO on 8 A100-40GB: nereus-plan did not run\n");
		else
			printf("exhaustive 8B PPO on 8 A100-40GB: %.1f s processor time (%.1f s wall), "
			       "peak %.1f MiB (target 4096 MiB: %s); the search's plan: %s\n", cx, wx,
			       kx / 1024.0,
			       kx <= 4096 * 1024 ? "met" : "NOT met",
			       same_file(fast, full) ? "same" : "DIFFERENT");
	}
	remove(cl);
	remove(fast);
	remove(full);
	rmdir(dir);
}

static void baselines(struct env *v, const char *job, const char *cluster)
{
	static struct plan best, base;
	struct search_stats st;
	struct space sp;
	struct err e;

	if (setup(v, job, cluster))
		return;
	search_space_init(&sp);
	if (plan_search(v, &sp, false, NULL, &best, &st, &e)) {
		printf("layouts %-28s %-26s: %s\n", strrchr(job, '/') + 1,
		       strrchr(cluster, '/') + 1, e.msg);
		return;
	}
	printf("layouts %-28s %-26s adaptive %8.2f s/step", strrchr(job, '/') + 1,
	       strrchr(cluster, '/') + 1, best.step_time);
	for (int l = LAYOUT_VERL; l <= LAYOUT_OPENRLHF; l++) {
		search_space_init(&sp);
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
	exhaustive_memory(build);
	for (int j = 0; jobs[j]; j++)
		for (int c = 0; clusters[c]; c++)
			baselines(&v, jobs[j], clusters[c]);
	return 0;
}
