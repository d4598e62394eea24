/* make bench: nereus-run's results against the published ones, and the
 * simulator's speed.
 *
 * - mean step latency, adaptive against fixed TP/PP with DP scaling, on the
 *   shipped traces that follow the Helios record (published: -27.7%), and
 *   adaptive's whole run against the oracle's (run/oracle.h), the
 *   controller's score;
 * - a 1000-step 8B PPO run growing to 1024 GPUs: transitions and their
 *   share of the run (published: six, 0.079%);
 * - modeled throughput of adaptive against the verl-like and OpenRLHF-like
 *   layouts on every shipped cluster, over the traces' response-length
 *   history (published: 1.10-1.47x and 2.14-7.27x);
 * - 1000 steps at 1024 GPUs with the controller deciding every step
 *   (target: 2 s), adaptive and verl, and the controller's time per
 *   decision.
 *
 * Switches are priced with the transition graph, as nereus-run does by
 * default.  Each
 * measurement runs in a child held to a time limit and LIMIT_GIB of
 * memory; one that does not finish in them says so and is measured again
 * with switches priced by the lower bound. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "run/oracle.h"
#include "run/run.h"
#include "run/sim.h"

static struct job job;
static struct cluster cl;
static struct coef k;
static struct sim sim;
static struct controller ctl;
static struct run run;
static bool graph = true; /* price switches with the transition graph */

#define LIMIT_GIB 6

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int discard(void *arg, const struct step_record *r, struct err *e)
{
	(void)arg;
	(void)r;
	(void)e;
	return NR_OK;
}

static int load(const char *jobfile, const char *clusterfile)
{
	struct err e;

	cost_coef_defaults(&k);
	if (job_load(&job, jobfile, &e) || cluster_load(&cl, clusterfile, &e)) {
		printf("bench_run: %s\n", e.msg);
		return -1;
	}
	return 0;
}

/* Run steps under policy; the summary in *s and the wall time in *wall. */
static int simulate(const struct events *ev, long steps, enum plan_layout policy, long every,
		    struct run_summary *s, double *wall)
{
	static struct engine eng;
	struct err e;
	double t0 = now_s();
	int rc;

	sim_init(&sim, &job, &cl, &k, ev, 1, 0);
	eng = sim_engine(&sim);
	ctl_free(&ctl);
	ctl_init(&ctl, policy, 0.01, &k);
	ctl.price_graph = graph;
	run_free(&run);
	run_init(&run);
	run.eng = &eng;
	run.ctl = &ctl;
	run_refit_hook(&run);
	run.steps = steps;
	run.every = every;
	run.emit = discard;
	rc = run_go(&run, &e);
	if (wall)
		*wall = now_s() - t0;
	if (rc) {
		printf("bench_run: %s\n", e.msg);
		return -1;
	}
	run_summarize(&run, s);
	return 0;
}

/* The oracle's run over ev (run/oracle.h): the schedule, then a run
 * that follows it; *graphs the transition graphs its pricing built. */
static int simulate_oracle(const struct events *ev, long steps, struct run_summary *s,
			   long *graphs)
{
	static struct hindsight h;
	static struct engine eng;
	struct ctl_script script;
	const struct plan **plans = NULL;
	struct charge ch;
	struct err e;
	double total;
	int rc;

	charge_init(&ch, graph);
	rc = hindsight_init(&h, &job, &cl, &k, ev, steps, &e);
	if (!rc)
		rc = hindsight_oracle(&h, &ch, &script, &plans, &total, &e);
	*graphs = ch.built;
	charge_free(&ch);
	if (!rc) {
		sim_init(&sim, &job, &cl, &k, ev, 1, 0);
		eng = sim_engine(&sim);
		ctl_free(&ctl);
		ctl_init(&ctl, LAYOUT_ADAPTIVE, 0.01, &k);
		ctl.price_graph = graph;
		ctl.script = &script;
		run_free(&run);
		run_init(&run);
		run.eng = &eng;
		run.ctl = &ctl;
		run.steps = steps;
		run.every = 10;
		run.emit = discard;
		rc = run_go(&run, &e);
		if (!rc)
			run_summarize(&run, s);
		ctl.script = NULL;
	}
	free(plans);
	hindsight_free(&h);
	if (rc)
		printf("bench_run: %s\n", e.msg);
	return rc ? -1 : 0;
}

static const char *base(const char *path)
{
	const char *b = strrchr(path, '/');

	return b ? b + 1 : path;
}

static void latency(const char *clusterfile, const char *trace)
{
	struct events ev;
	struct run_summary a, f, o;
	struct err e;
	long graphs;

	if (load("examples/jobs/ppo-llama3-8b.json", clusterfile))
		return;
	if (events_load(&ev, trace, &cl, 1000, &e)) {
		printf("bench_run: %s\n", e.msg);
		return;
	}
	if (!simulate(&ev, 1000, LAYOUT_ADAPTIVE, 10, &a, NULL) &&
	    !simulate(&ev, 1000, LAYOUT_FIXED, 10, &f, NULL))
		printf("latency %-24s 8B PPO, 1000 steps: adaptive %.2f s, fixed TP/PP with DP "
		       "scaling %.2f s (fixed paused %ld steps): %.1f%% lower (published 27.7%%)\n",
		       base(trace), a.mean_s, f.mean_s, f.paused, 100 * (1 - a.mean_s / f.mean_s));
	if (!simulate_oracle(&ev, 1000, &o, &graphs))
		printf("oracle  %-24s adaptive's run %.1f s, the oracle's %.1f s (%ld switches, "
		       "%ld transition graphs built to find them): adaptive %+.2f%% of the oracle, "
		       "the controller's score\n", base(trace), a.total_s, o.total_s,
		       o.transitions, graphs, 100 * (a.total_s / o.total_s - 1));
	events_free(&ev);
}

static void growth(void)
{
	struct events ev;
	struct run_summary s;
	struct err e;

	if (load("examples/jobs/ppo-llama3-8b.json", "examples/clusters/h100-128x8.json"))
		return;
	if (events_load(&ev, "examples/traces/grow-h100-128x8.jsonl", &cl, 1000, &e)) {
		printf("bench_run: %s\n", e.msg);
		return;
	}
	if (!simulate(&ev, 1000, LAYOUT_ADAPTIVE, 10, &s, NULL))
		printf("growth 8B PPO, 1000 steps, 64 -> %d GPUs: %ld transitions (%ld forced; "
		       "%ld priced by the transition graph, %ld by the lower bound), %.1f s, "
		       "%.4f%% of %.0f s (published: 6, 0.079%%)\n", s.gpus_max, s.transitions,
		       ctl.st.forced, ctl.st.charged - ctl.st.by_bound, ctl.st.by_bound,
		       s.transition_s, 100 * s.transition_share, s.total_s);
	events_free(&ev);
}

static void throughput(const char *const clusters[])
{
	struct events all, lengths;
	struct err e;
	double lo[2] = { HUGE_VAL, HUGE_VAL }, hi[2] = { 0, 0 };

	/* the response-length history the shipped traces share, on every cluster */
	if (load("examples/jobs/ppo-llama3-8b.json", "examples/clusters/h100-128x8.json") ||
	    events_load(&all, "examples/traces/grow-h100-128x8.jsonl", &cl, 1000, &e)) {
		printf("bench_run: cannot load the trace\n");
		return;
	}
	lengths = all;
	lengths.v = malloc(all.n * sizeof *lengths.v);
	lengths.n = 0;
	for (size_t i = 0; lengths.v && i < all.n; i++)
		if (all.v[i].kind == EV_RESPONSE)
			lengths.v[lengths.n++] = all.v[i];
	for (int c = 0; clusters[c]; c++) {
		struct run_summary a, b[2];
		if (load("examples/jobs/ppo-llama3-8b.json", clusters[c]) ||
		    simulate(&lengths, 1000, LAYOUT_ADAPTIVE, 10, &a, NULL))
			continue;
		printf("throughput %-24s %4d GPUs: adaptive %.3f seq/s", base(clusters[c]),
		       cluster_gpus_up(&cl), a.seq_per_s);
		for (int l = 0; l < 2; l++) {
			enum plan_layout lay = l ? LAYOUT_OPENRLHF : LAYOUT_VERL;
			if (simulate(&lengths, 1000, lay, 10, &b[l], NULL))
				continue;
			if (b[l].ok == 0) {
				printf(", %s never fits", layout_names[lay]);
				continue;
			}
			printf(", %s %.3f (%.2fx%s)", layout_names[lay], b[l].seq_per_s,
			       a.seq_per_s / b[l].seq_per_s, b[l].paused ? ", paused" : "");
			lo[l] = fmin(lo[l], a.seq_per_s / b[l].seq_per_s);
			hi[l] = fmax(hi[l], a.seq_per_s / b[l].seq_per_s);
		}
		printf("\n");
	}
	printf("throughput adaptive over verl-like %.2f-%.2fx (published 1.10-1.47x), over "
	       "OpenRLHF-like %.2f-%.2fx (published 2.14-7.27x); switches priced by the %s\n",
	       lo[0], hi[0], lo[1], hi[1], graph ? "transition graph" : "lower bound");
	free(lengths.v);
	events_free(&all);
}

static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void speed(const char *trace, enum plan_layout policy)
{
	struct events ev = { 0 };
	struct run_summary s;
	struct err e;
	double wall, cpu;

	if (load("examples/jobs/ppo-llama3-8b.json", "examples/clusters/h100-128x8.json"))
		return;
	if (trace && events_load(&ev, trace, &cl, 1000, &e)) {
		printf("bench_run: %s\n", e.msg);
		return;
	}
	cpu = cpu_s();
	if (!simulate(trace ? &ev : NULL, 1000, policy, 1, &s, &wall)) {
		cpu = cpu_s() - cpu;
		printf("speed %s, 1000 steps, 1024 GPUs, controller every step, %s, priced by the "
		       "%s: %.2f s, %.2f s of processor time (target 2 s: %s); %ld decisions, "
		       "%.2f ms each: %ld searches %.2f s, refits %.2f s, %ld switches priced "
		       "(%ld graphs built, the rest remembered or bound) %.2f s, %.2f s of processor "
		       "time\n", layout_names[policy], trace ? base(trace) : "no events",
		       graph ? "graph" : "bound", wall, cpu,
		       wall <= 2 ? "met" : cpu <= 2 ? "met in processor time, not in wall time"
						     : "NOT met",
		       ctl.st.replans, 1e3 * ctl.st.seconds / (double)ctl.st.replans,
		       ctl.st.searches, ctl.st.search_s, ctl.st.refit_s, ctl.st.charged,
		       ctl.st.built, ctl.st.charge_s, ctl.charge.cpu_seconds);
	}
	events_free(&ev);
}

/* Run measure in a child held to the limits; when it does not finish in
 * them, say so and measure again pricing by the lower bound. */
static void limited(const char *what, int limit_s, bool by_graph,
		    void (*measure)(const void *), const void *arg)
{
	for (int pass = by_graph ? 0 : 1; pass < 2; pass++) {
		int status;
		pid_t pid;
		fflush(stdout);
		pid = fork();
		if (pid == 0) {
			struct rlimit rl = { (rlim_t)LIMIT_GIB << 30, (rlim_t)LIMIT_GIB << 30 };
			setrlimit(RLIMIT_AS, &rl);
			alarm((unsigned)limit_s);
			graph = pass == 0;
			measure(arg);
			fflush(stdout);
			_exit(0);
		}
		if (pid < 0 || waitpid(pid, &status, 0) < 0)
			return;
		if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
			return;
		printf("%s, priced by the %s: did not finish in %d s and %d GiB (%s %d)%s\n", what,
		       pass ? "lower bound" : "transition graph", limit_s, LIMIT_GIB,
		       WIFSIGNALED(status) ? "signal" : "exit",
		       WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
		       pass ? "" : "; again with the lower bound:");
	}
}

static void latency_8x8(const void *arg)
{
	(void)arg;
	latency("examples/clusters/h100-8x8.json", "examples/traces/helios-h100-8x8.jsonl");
}

static void latency_128x8(const void *arg)
{
	(void)arg;
	latency("examples/clusters/h100-128x8.json", "examples/traces/helios-h100-128x8.jsonl");
}

static void growth_run(const void *arg)
{
	(void)arg;
	growth();
}

static void throughput_run(const void *arg)
{
	throughput(arg);
}

static void speed_run(const void *arg)
{
	speed(arg, LAYOUT_ADAPTIVE);
}

static void speed_verl(const void *arg)
{
	speed(arg, LAYOUT_VERL);
}

static bool wanted(int argc, char **argv, const char *part)
{
	if (argc < 2)
		return true;
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], part) == 0)
			return true;
	return false;
}

/* With no arguments every part; else the parts named: latency, growth,
 * throughput, speed. */
int main(int argc, char **argv)
{
	static const char *const clusters[] = { "examples/clusters/h100-8x8.json",
						"examples/clusters/h100-8x8-degraded.json",
						"examples/clusters/h200-4x8.json",
						"examples/clusters/a100-16x8.json",
						"examples/clusters/h100-128x8.json", NULL };
	static const char *const parts[] = { "latency", "growth", "throughput", "speed", NULL };

	for (int i = 1; i < argc; i++) {
		int p = 0;

		while (parts[p] && strcmp(argv[i], parts[p]) != 0)
			p++;
		if (!parts[p]) {
			fprintf(stderr, "usage: bench_run [latency] [growth] [throughput] [speed]\n");
			return 2;
		}
	}
	if (wanted(argc, argv, "latency")) {
		limited("latency on helios-h100-8x8", 120, true, latency_8x8, NULL);
		limited("latency on helios-h100-128x8", 180, true, latency_128x8, NULL);
	}
	if (wanted(argc, argv, "growth"))
		limited("growth to 1024 GPUs", 60, true, growth_run, NULL);
	if (wanted(argc, argv, "throughput"))
		limited("throughput", 120, true, throughput_run, clusters);
	if (wanted(argc, argv, "speed")) {
		limited("speed, no events", 60, true, speed_run, NULL);
		limited("speed on grow-h100-128x8", 60, true, speed_run,
			"examples/traces/grow-h100-128x8.jsonl");
		limited("speed of verl on grow-h100-128x8", 120, true, speed_verl,
			"examples/traces/grow-h100-128x8.jsonl");
		graph = false;
		speed("examples/traces/grow-h100-128x8.jsonl", LAYOUT_ADAPTIVE);
		speed("examples/traces/grow-h100-128x8.jsonl", LAYOUT_VERL);
	}
	ctl_free(&ctl);
	run_free(&run);
	return 0;
}
