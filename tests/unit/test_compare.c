/* nereus-run compare's experiment (run/compare.h): measured on an engine
 * that is the simulator itself, every row comes out as predicted, each on
 * an engine of its own; a row the cluster's engine does not run is
 * skipped with the planner's reason; throughput counts the tokens of the
 * steps that ran. */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "run/compare.h"
#include "run/sim.h"
#include "unit.h"

static struct job job;
static struct cluster cl;
static struct coef k;
static struct events ev;

static int load(const char *job_file, const char *cluster_file)
{
	struct err e;

	events_free(&ev);
	memset(&ev, 0, sizeof ev);
	if (job_load(&job, job_file, &e) || cluster_load(&cl, cluster_file, &e)) {
		printf("# %s\n", e.msg);
		unit_failed = 1;
		return -1;
	}
	cost_coef_defaults_for(&k, cl.engine);
	return 0;
}

/* A trace from text, for steps steps. */
static void trace(const char *text, long steps)
{
	const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : P_tmpdir;
	char path[512];
	struct err e;
	int fd;

	snprintf(path, sizeof path, "%s/nereus-test-XXXXXX", dir);
	fd = mkstemp(path);
	CHECK(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	close(fd);
	CHECK(events_load(&ev, path, &cl, steps, &e) == NR_OK);
	unlink(path);
}

static struct cmp_opts opts(long steps)
{
	return (struct cmp_opts){ &job, &cl, &k, &ev, steps, 10, 3, 0.05, 0.01, true, NULL, true,
				  true };
}

/* The measuring engine: the simulator over the same trace and seed. */
struct sim_rows {
	struct sim sim;
	int opened, closed;
};

static int open_sim(void *arg, struct engine *eng, struct err *e)
{
	struct sim_rows *x = arg;

	(void)e;
	CHECK(x->opened == x->closed);
	x->opened++;
	sim_init(&x->sim, &job, &cl, &k, &ev, 3, 0.05);
	*eng = sim_engine(&x->sim);
	return NR_OK;
}

static void close_sim(void *arg)
{
	((struct sim_rows *)arg)->closed++;
}

static void test_measured_on_the_simulator_is_the_prediction(void)
{
	static struct compare c;
	static struct sim_rows x;
	struct cmp_opts o = opts(12);
	struct cmp_engine ce = { &x, open_sim, close_sim };
	struct err e;

	if (load("examples/jobs/ppo-llama3-8b.json", "examples/clusters/h100-8x8.json"))
		return;
	cl.nodes = 2;
	trace("{\"nereus\": 1, \"kind\": \"down\", \"step\": 4, \"nodes\": [1]}\n"
	      "{\"nereus\": 1, \"kind\": \"response\", \"step\": 6, \"mean\": 2000, \"p90\": 4000, "
	      "\"max\": 8192}\n"
	      "{\"nereus\": 1, \"kind\": \"up\", \"step\": 8, \"nodes\": [1]}\n", 12);
	CHECK(compare_init(&c, &o, &e) == NR_OK);
	CHECK(compare_predict(&c, &e) == NR_OK);
	CHECK(compare_measure(&c, &ce, &e) == NR_OK);
	CHECK(x.opened == CMP_NROWS && x.closed == CMP_NROWS);
	for (int i = 0; i < CMP_NROWS; i++) {
		const struct cmp_result *p = &c.pred[i], *m = &c.meas[i];

		CHECK(p->ran && m->ran);
		CHECK(m->s.done == 12 && m->s.ok == p->s.ok && m->s.transitions == p->s.transitions);
		CHECK_NEAR(m->s.total_s, p->s.total_s, 1e-12);
		CHECK_NEAR(m->tokens_s, p->tokens_s, 1e-12);
		CHECK(!(compare_oracle_gap(m, &c.meas[CMP_ORACLE]) < -0.02));
	}
	CHECK_NEAR(compare_ratio(&c.meas[CMP_ADAPTIVE], &c.meas[CMP_ADAPTIVE]), 1, 1e-12);
	compare_free(&c);
}

static void test_rows_of_fsdp_run_on_the_builtin_engine(void)
{
	static struct compare c;
	struct cmp_opts o = opts(6);
	struct err e;
	static const int fsdp[] = { CMP_VERL, CMP_VERL_TUNED, CMP_OPENRLHF_HYBRID };

	if (load("examples/jobs/ppo-repeat-tiny.json", "examples/clusters/cpu-4.json"))
		return;
	o.noise = 0;
	CHECK(cl.engine == CLUSTER_ENGINE_BUILTIN);
	CHECK(compare_init(&c, &o, &e) == NR_OK);
	CHECK(compare_predict(&c, &e) == NR_OK);
	for (size_t i = 0; i < sizeof fsdp / sizeof fsdp[0]; i++) {
		const struct cmp_result *r = &c.pred[fsdp[i]];

		CHECK(r->ran && r->doc);
		CHECK(isfinite(compare_ratio(&c.pred[CMP_ADAPTIVE], r)));
	}
	/* OpenRLHF's three pools do not fit this job on 4 GPUs, FSDP or not:
	 * it pauses, and the oracle, which no row that ran nothing can lead,
	 * runs */
	CHECK(c.pred[CMP_OPENRLHF].ran && c.pred[CMP_OPENRLHF].s.ok == 0);
	CHECK(isnan(compare_oracle_gap(&c.pred[CMP_OPENRLHF], &c.pred[CMP_ORACLE])));
	CHECK(c.pred[CMP_ORACLE].s.ok == 6);
	CHECK(c.pred[CMP_ADAPTIVE].ran && c.pred[CMP_FIXED].ran && c.pred[CMP_FIXED_BEST].ran &&
	      c.pred[CMP_VERL_MEGATRON].ran && c.pred[CMP_ORACLE].ran);
	compare_free(&c);
}

/* Without events every step runs the job's batch: its sequences, each of
 * the prompt and the mean response. */
static void test_throughput_is_tokens_over_the_total(void)
{
	static struct compare c;
	struct cmp_opts o = opts(5);
	struct err e;

	if (load("examples/jobs/ppo-llama3-8b.json", "examples/clusters/h100-8x8.json"))
		return;
	o.noise = 0;
	CHECK(compare_init(&c, &o, &e) == NR_OK);
	CHECK(compare_predict(&c, &e) == NR_OK);
	for (int i = 0; i < CMP_NROWS; i++) {
		const struct cmp_result *r = &c.pred[i];
		double tokens = (double)r->s.ok * (double)job_sequences(&job) *
				((double)job.prompt_len + job.response.mean);

		CHECK(r->ran && r->s.ok == 5);
		CHECK_NEAR(r->tokens, tokens, 1e-12);
		CHECK_NEAR(r->tokens_s, tokens / r->s.total_s, 1e-12);
		CHECK_NEAR(compare_ratio(&c.pred[CMP_ADAPTIVE], r),
			   c.pred[CMP_ADAPTIVE].tokens_s / r->tokens_s, 1e-12);
	}
	compare_free(&c);
}

int main(void)
{
	RUN(test_measured_on_the_simulator_is_the_prediction);
	RUN(test_rows_of_fsdp_run_on_the_builtin_engine);
	RUN(test_throughput_is_tokens_over_the_total);
	events_free(&ev);
	return UNIT_END();
}
