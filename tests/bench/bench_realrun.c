/* make bench: a real run of the built-in engine against the models that
 * plan it.  One fixed GRPO job (tests/bench/realrun-job.json: an actor and
 * a reference of 4 layers, hidden 128, on the repeat task, 16 prompts x 8
 * samples a step)
 * runs STEPS steps on a one-GPU cluster document for this process
 * (tests/bench/realrun-cluster.json), under the plan the controller
 * chooses at its start (no refit: one plan throughout); then
 *
 *   peak memory: each model-stage's peak as the records measured it
 *     (what the process held at the stage's height), against what
 *     nereus-plan's memory model predicts for it in that plan (no
 *     recompute: the engine keeps every activation) on the built-in
 *     engine (plan/memory.h); goal: within 10%.  The process's RSS
 *     growth over the run is printed beside: what the kernel saw it
 *     touch, the engine's buffers and everything else (the batch's
 *     arrays, OpenBLAS's own buffers, the allocator's slack);
 *   step time: with the device's compute rate and bandwidth in the
 *     cluster document measured on this machine, after the run so that
 *     their buffers stay out of its RSS (device_rates: the best of a few
 *     samples of the process's CPU time, as bench_engine takes them, so
 *     that other work on the machine does not lower them; the cost model's
 *     efficiencies are fractions of these peaks), the cost model fitted
 *     (nereus-profile fit's library) on
 *     the first FIT_STEPS steps, its first WARM left out as nereus-run
 *     leaves them to a warm-up, predicts each later step's time from that
 *     step's batch: the mean absolute relative error over those steps;
 *     goal <= 10%.  The times are wall-clock; the share of the CPU the
 *     run had is printed, since other work on the machine slows steps
 *     that the model cannot know about.
 *
 * The engine and the measurements use NEREUS_BENCH_THREADS OpenBLAS
 * threads, 1 when unset, as bench_engine does: with more, threads that
 * wait on each other spin, so other work on the machine stretches steps
 * unevenly.
 *
 * `bench_realrun N` runs N steps instead (for a quick look); with
 * NEREUS_BENCH_RECORDS set, the run's step records go to that file too
 * (nereus-steps(5)), to study the model's residuals offline. */
#include <cblas.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine/builtin.h"
#include "profile/fit.h"
#include "run/run.h"

#define JOB "tests/bench/realrun-job.json"
#define CLUSTER "tests/bench/realrun-cluster.json"
#define MIB (1024.0 * 1024.0)

enum { STEPS = 60, FIT_STEPS = 30, WARM = 2 };
#define HOLDOUT 0.3

static struct job job;
static struct cluster cl;
static struct coef k;
static struct builtin bi;
static struct controller ctl;
static struct run run;
static struct step_record recs[STEPS];
static double at_wall[STEPS + 1], at_cpu[STEPS + 1]; /* clocks at the start and each record */
static long nrecs;

static void fail(const char *what, const struct err *e)
{
	printf("bench_realrun: %s: %s\n", what, e->msg);
	exit(1);
}

static double clock_s(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int keep(void *arg, const struct step_record *r, struct err *e)
{
	(void)arg;
	(void)e;
	if (nrecs < STEPS) {
		recs[nrecs++] = *r;
		at_wall[nrecs] = clock_s(CLOCK_MONOTONIC);
		at_cpu[nrecs] = clock_s(CLOCK_PROCESS_CPUTIME_ID);
	}
	return NR_OK;
}

/* CPUs the process used on average over steps [a, b). */
static double cpus(long a, long b)
{
	return (at_cpu[b] - at_cpu[a]) / (at_wall[b] - at_wall[a]);
}

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

static void save_records(const char *file)
{
	FILE *f = fopen(file, "w");
	struct err e = { 0 };

	if (!f) {
		perror(file);
		exit(1);
	}
	for (long s = 0; s < nrecs; s++)
		if (steprec_fprint(f, &recs[s], &e))
			fail(file, &e);
	if (fclose(f)) {
		perror(file);
		exit(1);
	}
}

/* The device's peak: the best of a few samples, in CPU time, of
 * OpenBLAS's sgemm at orders 256, 512 and 1024 (FLOP/s; the smaller ones,
 * in cache, run fastest on some machines, and so do the engine's GEMMs),
 * and of a 64 MiB memcpy (bytes read and written per second). */
static void device_rates(double *flops, double *bytes)
{
	static const int order[] = { 256, 512, 1024 };
	size_t n = 1024, len = 64 << 20;
	float *a = malloc(n * n * sizeof *a), *b = malloc(n * n * sizeof *b);
	float *c = malloc(n * n * sizeof *c);
	char *x = malloc(len), *y = malloc(len);

	if (!a || !b || !c || !x || !y) {
		printf("bench_realrun: out of memory\n");
		exit(1);
	}
	for (size_t i = 0; i < n * n; i++) {
		a[i] = (float)(i % 97) / 97;
		b[i] = (float)(i % 89) / 89;
	}
	memset(x, 1, len);
	memset(y, 2, len);
	*flops = *bytes = 0;
	for (int r = 0; r < 6; r++) {
		for (size_t k = 0; k < sizeof order / sizeof *order; k++) {
			int m = order[k], reps = (int)(1e9 / (2.0 * m * m * m)) + 1;
			double t0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);

			for (int i = 0; i < reps; i++)
				cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, m, m, 1, a,
					    m, b, m, 0, c, m);
			if (r > 0) /* the first round warms up */
				*flops = fmax(*flops, 2.0 * m * m * m * reps /
						      (clock_s(CLOCK_PROCESS_CPUTIME_ID) - t0));
		}
		{
			double t0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);

			memcpy(r % 2 ? x : y, r % 2 ? y : x, len);
			if (r > 0)
				*bytes = fmax(*bytes, 2.0 * (double)len /
						      (clock_s(CLOCK_PROCESS_CPUTIME_ID) - t0));
		}
	}
	free(a);
	free(b);
	free(c);
	free(x);
	free(y);
}

/* A field of /proc/self/status in bytes ("VmRSS", "VmHWM"); 0 unknown. */
static double status_bytes(const char *field)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	double kib = 0;
	size_t n = strlen(field);

	while (f && fgets(line, sizeof line, f))
		if (strncmp(line, field, n) == 0 && line[n] == ':')
			kib = atof(line + n + 1);
	if (f)
		fclose(f);
	return kib * 1024;
}

/* The largest peak the records measured for model-stage (model, stage). */
static double measured_peak(int model, enum stage stage)
{
	double peak = 0;

	for (long s = 0; s < nrecs; s++)
		for (int j = 0; j < recs[s].nms; j++)
			if (strcmp(recs[s].ms[j].model, job.models[model].name) == 0 &&
			    recs[s].ms[j].stage == stage)
				peak = fmax(peak, recs[s].ms[j].peak_gib * GIB);
	return peak;
}

static void memory(double rss_growth)
{
	const struct env v = { &job, &bi.c.cl, &k };
	struct plan p = ctl.cur;
	double worst = 0, top = 0;

	for (int m = 0; m < job.nmodels; m++)
		p.home[m].rc = RC_NONE;
	plan_evaluate(&v, &p);
	printf("peak memory per model-stage, measured and predicted by nereus-plan's model:\n");
	for (int i = 0; i < p.nms; i++) {
		const struct ms_plan *ms = &p.ms[i];
		double meas = measured_peak(ms->model, ms->stage);

		char name[64];

		snprintf(name, sizeof name, "%s@%s", job.models[ms->model].name,
			 job_stage_names[ms->stage]);
		printf("  %-22s %8.2f MiB, predicted %8.2f MiB: %.3f\n", name, meas / MIB,
		       ms->peak / MIB, meas / ms->peak);
		worst = fmax(worst, fabs(meas / ms->peak - 1));
		top = fmax(top, meas);
	}
	printf("  worst |measured/predicted - 1| %.1f%% (goal <= 10%%: %s)\n", 100 * worst,
	       worst <= 0.10 ? "met" : "NOT met");
	printf("  process RSS growth over the run %.2f MiB, the largest peak %.2f MiB: %.3f\n",
	       rss_growth / MIB, top / MIB, rss_growth / top);
}

/* The step time the cost model at kf predicts for record r's batch under
 * plan p. */
static double predict(const struct plan *plan, const struct coef *kf, const struct step_record *r)
{
	static struct plan p;
	struct job j = job;
	const struct env v = { &j, &bi.c.cl, kf };

	j.prompts_per_step = r->sequences;
	j.samples_per_prompt = 1;
	j.prompt_len = r->prompt_len;
	j.response = r->response;
	p = *plan;
	for (int m = 0; m < job.nmodels; m++)
		p.home[m].rc = RC_NONE;
	plan_evaluate(&v, &p);
	return p.step_time;
}

/* The factor c that minimises the mean of |c pred[i] / meas[i] - 1|: the
 * median of meas / pred weighted by pred / meas. */
static double best_level(const double *pred, const double *meas, long n)
{
	double total = 0, acc = 0, r[STEPS], w[STEPS];

	for (long i = 0; i < n; i++) {
		r[i] = meas[i] / pred[i];
		w[i] = 1 / r[i];
		total += w[i];
	}
	for (long i = 1; i < n; i++) /* insertion sort: a few dozen steps */
		for (long j = i; j > 0 && r[j - 1] > r[j]; j--) {
			double x = r[j];

			r[j] = r[j - 1];
			r[j - 1] = x;
			x = w[j];
			w[j] = w[j - 1];
			w[j - 1] = x;
		}
	for (long i = 0; i < n; i++)
		if ((acc += w[i]) >= total / 2)
			return r[i];
	return 1;
}

/* What part of the held-out error is the machine's: how much slower or
 * faster the held-out steps ran than the fitted ones against what their
 * batches made the model expect, and the error left with the model's level
 * set on the held-out steps themselves (the steps' spread under the load
 * the run had, which no model of a step's batch sees). */
static void load_share(const struct fit_result *res)
{
	double pred[STEPS], meas[STEPS], in_m = 0, in_p = 0, out_m = 0, out_p = 0, c, sum = 0;
	long n = 0;

	for (long s = WARM; s < nrecs; s++) {
		double p = predict(&ctl.cur, &res->k, &recs[s]);

		if (s < FIT_STEPS) {
			in_m += recs[s].step_time_s;
			in_p += p;
			continue;
		}
		out_m += recs[s].step_time_s;
		out_p += p;
		pred[n] = p;
		meas[n++] = recs[s].step_time_s;
	}
	if (n == 0)
		return;
	in_m /= FIT_STEPS - WARM;
	in_p /= FIT_STEPS - WARM;
	out_m /= (double)n;
	out_p /= (double)n;
	c = best_level(pred, meas, n);
	for (long i = 0; i < n; i++)
		sum += fabs(c * pred[i] / meas[i] - 1);
	printf("  the held-out steps took %.3f times as long as the fitted ones, where their "
	       "batches make the model expect %.3f; with its level set on the held-out steps "
	       "themselves (x%.3f) the MAPE would be %.1f%%: their spread under this run's "
	       "load\n", out_m / in_m, out_p / in_p, c, 100 * sum / (double)n);
}

static void step_time(void)
{
	struct fit *f;
	struct fit_result *res = malloc(sizeof *res);
	struct err e = { 0 };
	double sum = 0;
	long n = 0;

	if (!res || fit_new(&f, &job, &bi.c.cl, NULL, &e))
		fail("fit", &e);
	for (long s = WARM; s < FIT_STEPS && s < nrecs; s++)
		if (fit_add(f, &recs[s], &e))
			fail("fit", &e);
	if (fit_run(f, &(struct fit_opts){ 0 }, res, &e))
		fail("fit", &e);
	printf("step time: the cost model fitted on steps %d-%d (in-sample MAPE of the "
	       "model-stage times %.1f%%; the process had %.2f CPUs) predicts steps %d-%ld (it "
	       "had %.2f):\n", WARM, FIT_STEPS - 1, 100 * res->mape_fit, cpus(WARM, FIT_STEPS),
	       FIT_STEPS, nrecs - 1, cpus(FIT_STEPS, nrecs));
	for (long s = FIT_STEPS; s < nrecs; s++) {
		double pred = predict(&ctl.cur, &res->k, &recs[s]);

		sum += fabs(pred / recs[s].step_time_s - 1);
		n++;
	}
	if (n) {
		printf("  held-out MAPE of the step time %.1f%% over %ld steps (goal <= 10%%: %s)\n",
		       100 * sum / (double)n, n, sum / (double)n <= 0.10 ? "met" : "NOT met");
		load_share(res);
	}
	fit_free(f);
	/* the same steps held out at random (nereus-profile fit --holdout), which a
	 * machine whose load changed during the run weighs less */
	if (fit_new(&f, &job, &bi.c.cl, NULL, &e))
		fail("fit", &e);
	for (long s = WARM; s < nrecs; s++)
		if (fit_add(f, &recs[s], &e))
			fail("fit", &e);
	if (fit_run(f, &(struct fit_opts){ .holdout = HOLDOUT }, res, &e) == NR_OK)
		printf("  beside it, %.0f%% of steps %d-%ld held out at random (nereus-profile fit "
		       "--holdout %g): MAPE of their step times %.1f%%\n", 100 * HOLDOUT, WARM,
		       nrecs - 1, HOLDOUT, 100 * res->mape_holdout_step);
	fit_free(f);
	free(res);
}

int main(int argc, char **argv)
{
	const char *tmp = getenv("TMPDIR"), *env = getenv("NEREUS_BENCH_THREADS");
	int threads = env && atoi(env) > 0 ? atoi(env) : 1;
	long steps;
	char dir[4096], store[4200];
	struct engine eng;
	struct err e = { 0 };
	double rss0, flops, bytes;

	openblas_set_num_threads(threads);
	cost_coef_defaults(&k);
	if (job_load(&job, JOB, &e) || cluster_load(&cl, CLUSTER, &e))
		fail("inputs", &e);

	snprintf(dir, sizeof dir, "%s/nereus-bench-realrun-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		perror(dir);
		return 1;
	}
	snprintf(store, sizeof store, "%s/store", dir);
	if (trainer_init_store(&job, 1, NULL, store, &e))
		fail("init", &e);
	steps = argc > 1 && atoi(argv[1]) > 0 && atoi(argv[1]) < STEPS ? atoi(argv[1]) : STEPS;
	rss0 = status_bytes("VmRSS");
	builtin_init(&bi, &job, &cl, &k, NULL, store, steps);
	eng = builtin_engine(&bi);
	ctl_init(&ctl, LAYOUT_ADAPTIVE, 0.01, &k);
	run_init(&run);
	run.eng = &eng;
	run.ctl = &ctl;
	run.steps = steps;
	run.emit = keep;
	at_wall[0] = clock_s(CLOCK_MONOTONIC);
	at_cpu[0] = clock_s(CLOCK_PROCESS_CPUTIME_ID);
	if (run_go(&run, &e))
		fail("run", &e);
	if (getenv("NEREUS_BENCH_RECORDS"))
		save_records(getenv("NEREUS_BENCH_RECORDS"));
	printf("bench_realrun: %ld steps of %s on %s, %d thread%s, in %.1f s, %.2f s a step; the "
	       "process used %.2f CPUs on average\n", nrecs, job.name, cl.name, threads,
	       threads > 1 ? "s" : "", at_wall[nrecs] - at_wall[0],
	       (at_wall[nrecs] - at_wall[0]) / (double)nrecs, cpus(0, nrecs));
	memory(status_bytes("VmHWM") - rss0);
	device_rates(&flops, &bytes);
	bi.c.cl.gpu.tflops = flops / 1e12;
	bi.c.cl.gpu.hbm_gbps = bytes / 1e9;
	printf("this machine's device: sgemm %.1f GFLOP/s, memcpy %.1f GB/s\n", flops / 1e9,
	       bytes / 1e9);
	if (nrecs > FIT_STEPS)
		step_time();
	builtin_free(&bi);
	ctl_free(&ctl);
	run_free(&run);
	nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	return 0;
}
