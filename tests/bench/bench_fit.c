/* make bench: nereus-profile fit against known truth.  Records simulated
 * (lib/profile/simrec.h) with the coefficients of simrec_truth and 5%
 * log-normal noise: how far each fitted coefficient lands from the truth,
 * the prediction error on held-out steps, the same with stalled steps
 * mixed in, and the time to fit 100,000 records: in memory, and from a
 * trace file the way nereus-profile fit reads one, against reading the
 * file's bytes and nothing else.
 *
 * `bench_fit --trace FILE N` writes N such records as JSON Lines instead:
 * that is how examples/traces/steps-8b.jsonl was made. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/json.h"
#include "plan/plan.h"
#include "profile/fit.h"
#include "profile/fitread.h"
#include "profile/simrec.h"

#define JOB "examples/jobs/ppo-llama3-8b.json"
#define CLUSTER "examples/clusters/h100-8x8.json"

static struct job job;
static struct cluster cl;
static struct coef truth;

static double clock_s(clockid_t id)
{
	struct timespec t;

	clock_gettime(id, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double now(void)
{
	return clock_s(CLOCK_MONOTONIC);
}

static struct step_record *simulate(long n, double noise, double stall_rate, uint64_t seed)
{
	struct simrec_opts o = { .seed = seed, .noise = noise, .stall_rate = stall_rate,
				 .stall_factor = 10, .offload = true, .apart = true,
				 .switch_rate = 0.1 };
	const struct env v = { &job, &cl, &truth };
	struct step_record *r = malloc(sizeof *r * (size_t)n);
	struct simrec *s;
	struct err e;

	if (!r || simrec_new(&s, &v, &o, &e)) {
		fprintf(stderr, "bench_fit: out of memory\n");
		exit(4);
	}
	for (long i = 0; i < n; i++) {
		if (simrec_next(s, &r[i], &e)) {
			fprintf(stderr, "bench_fit: %s\n", e.msg);
			exit(4);
		}
	}
	simrec_free(s);
	return r;
}

/* Fit n records; returns the seconds it took (records already in memory),
 * and in *cpu the processor seconds of all its threads. */
static double fit(const struct step_record *r, long n, double holdout, struct fit_result *res,
		  double *cpu)
{
	struct fit_opts o = { .holdout = holdout };
	struct fit *f;
	struct err e;
	double c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID), t0 = now();

	if (fit_new(&f, &job, &cl, NULL, &e)) {
		fprintf(stderr, "bench_fit: %s\n", e.msg);
		exit(4);
	}
	for (long i = 0; i < n; i++)
		fit_add(f, &r[i], &e);
	if (fit_run(f, &o, res, &e)) {
		fprintf(stderr, "bench_fit: %s\n", e.msg);
		exit(4);
	}
	t0 = now() - t0;
	if (cpu)
		*cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
	fit_free(f);
	return t0;
}

static void recovery(const char *title, long n, double stall_rate)
{
	struct step_record *r = simulate(n, 0.05, stall_rate, 1);
	struct fit_result *res = malloc(sizeof *res);
	double worst = 0;
	int kept = 0;

	fit(r, n, 0.2, res, NULL);
	printf("fit %s: %ld records, 5%% noise%s, 20%% of steps held out\n", title, n,
	       stall_rate > 0 ? ", stalled steps 10x slower" : "");
	for (int j = 0; j < COEF_FIELDS; j++) {
		double err = res->c[j].value / cost_coef_get(&truth, j) - 1;
		if (!res->c[j].fitted) {
			printf("  %-16s kept at its prior: %s\n", cost_coef_names[j], res->c[j].why);
			kept++;
			continue;
		}
		printf("  %-16s true %-10.4g fitted %-10.4g error %+6.2f%%  (standard error %.2f%%)\n",
		       cost_coef_names[j], cost_coef_get(&truth, j), res->c[j].value, 100 * err,
		       100 * res->c[j].se / res->c[j].value);
		worst = fmax(worst, fabs(err));
	}
	printf("  max |error| of the %d fitted coefficients: %.2f%% (target 3%%: %s)\n",
	       COEF_FIELDS - kept, 100 * worst, worst <= 0.03 ? "met" : "NOT met");
	printf("  MAPE on held-out model-stage times %.2f%%, step times %.2f%%; in the fit %.2f%% "
	       "(median %.2f%%); %ld outliers set aside%s\n", 100 * res->mape_holdout,
	       100 * res->mape_holdout_step, 100 * res->mape_fit, 100 * res->median, res->outliers,
	       stall_rate > 0 ? "" : res->mape_holdout <= 0.05 ? " (target 5%: met)" :
	       " (target 5%: NOT met)");
	free(res);
	free(r);
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median3(double t[3])
{
	qsort(t, 3, sizeof t[0], cmp);
	return t[1];
}

static void speed(const struct step_record *r, long n)
{
	struct fit_result *res = malloc(sizeof *res);
	double t[3], cpu[3], load[1] = { -1 }, median;

	for (int i = 0; i < 3; i++)
		t[i] = fit(r, n, 0, res, &cpu[i]);
	getloadavg(load, 1);
	median = median3(t);
	printf("fit %ld records (%ld model-stage times): median %.3f s over 3 runs on %ld CPUs, "
	       "%.3f s of CPU time; load average %.2f (target 1 s: %s)\n", n, res->rows, median,
	       sysconf(_SC_NPROCESSORS_ONLN), median3(cpu), load[0],
	       median <= 1 ? "met" : "NOT met");
	free(res);
}

/* Write n records to f as JSON Lines, the way nereus-run writes them. */
static int write_records(FILE *f, const char *file, const struct step_record *r, long n)
{
	struct err e;

	for (long i = 0; i < n; i++) {
		if (steprec_fprint(f, &r[i], &e)) {
			fprintf(stderr, "bench_fit: %s: %s\n", file, e.msg);
			fclose(f);
			return 4;
		}
	}
	if (fclose(f)) {
		fprintf(stderr, "bench_fit: %s: %s\n", file, strerror(errno));
		return 4;
	}
	return 0;
}

static int write_trace(const char *file, long n)
{
	struct step_record *r = simulate(n, 0.05, 0.02, 8);
	FILE *f = fopen(file, "w");
	int rc;

	if (!f) {
		perror(file);
		free(r);
		return 4;
	}
	rc = write_records(f, file, r, n);
	free(r);
	return rc;
}

/* Read a trace and fit it with the library calls nereus-profile fit makes
 * (fit_read_trace, then fit_run); returns the seconds in all, and in
 * *read_s those until the last record was added. */
static double fit_file(const char *file, long *records, double *read_s, double *cpu)
{
	double c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
	struct fit_result *res = malloc(sizeof *res);
	struct fit_read rd = { 0 };
	struct fit_opts o = { 0 };
	struct fit *f = NULL;
	struct err e;
	double t0 = now();

	if (!res || fit_new(&f, &job, &cl, NULL, &e) || fit_read_trace(f, file, &job, &cl, &rd, &e)) {
		fprintf(stderr, "bench_fit: %s\n", res ? e.msg : "out of memory");
		exit(4);
	}
	*read_s = now() - t0;
	if (fit_run(f, &o, res, &e)) {
		fprintf(stderr, "bench_fit: %s\n", e.msg);
		exit(4);
	}
	t0 = now() - t0;
	*cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
	*records = res->records;
	fit_free(f);
	free(res);
	return t0;
}

/* Seconds to read the file's bytes with read(2) and do nothing with them,
 * as cat > /dev/null does; *bytes gets how many. */
static double read_bytes(const char *file, double *bytes)
{
	char buf[1 << 16];
	int fd = open(file, O_RDONLY);
	double t0 = now();
	ssize_t n = 0;

	*bytes = 0;
	while (fd >= 0 && (n = read(fd, buf, sizeof buf)) > 0)
		*bytes += (double)n;
	if (fd < 0 || n < 0 || close(fd)) {
		perror(file);
		exit(4);
	}
	return now() - t0;
}

/* The records as a trace file (in $TMPDIR, else /tmp), read and fitted as
 * nereus-profile fit does, against only reading it. */
static void speed_from_file(const struct step_record *r, long n)
{
	const char *dir = getenv("TMPDIR");
	char file[4096];
	double t[3], part[3], raw[3], cpu[3], load[1] = { -1 }, bytes = 0, median, median_raw;
	long records = 0;
	int fd;
	FILE *f;

	snprintf(file, sizeof file, "%s/bench_fit.XXXXXX", dir && *dir ? dir : "/tmp");
	if ((fd = mkstemp(file)) < 0 || !(f = fdopen(fd, "w"))) {
		perror(file);
		exit(4);
	}
	if (write_records(f, file, r, n)) {
		unlink(file);
		exit(4);
	}
	for (int i = 0; i < 3; i++) {
		raw[i] = read_bytes(file, &bytes);
		t[i] = fit_file(file, &records, &part[i], &cpu[i]);
	}
	unlink(file);
	median = median3(t);
	median_raw = median3(raw);
	getloadavg(load, 1);
	printf("fit %ld records from a %.0f MB trace as nereus-profile fit reads it: median %.3f s "
	       "over 3 runs, %.3f s of CPU time, load average %.2f (target 1 s: %s); %.3f s to "
	       "read, parse and add them; reading the same bytes with read(2): %.3f s\n",
	       records, bytes / 1e6, median, median3(cpu), load[0],
	       median <= 1 ? "met" : "NOT met", median3(part), median_raw);
}

int main(int argc, char **argv)
{
	struct step_record *r;
	struct err e;

	simrec_truth(&truth);
	if (job_load(&job, JOB, &e) || cluster_load(&cl, CLUSTER, &e)) {
		fprintf(stderr, "bench_fit: %s\n", e.msg);
		return 4;
	}
	if (argc == 4 && strcmp(argv[1], "--trace") == 0)
		return write_trace(argv[2], atol(argv[3]));
	recovery("recovery", 20000, 0);
	recovery("robustness", 20000, 0.02);
	r = simulate(100000, 0.05, 0.01, 2);
	speed(r, 100000);
	speed_from_file(r, 100000);
	free(r);
	return 0;
}
