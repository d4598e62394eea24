/* Hindsight (run/oracle.h): the oracle's schedule is the shortest sequence
 * of candidates, checked against every sequence; fixed-best is the best
 * candidate kept for the whole run; a run that follows the schedule runs
 * it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run/oracle.h"
#include "run/run.h"
#include "run/sim.h"
#include "unit.h"

static struct job job;
static struct cluster cl;
static struct coef k;
static struct events ev;

static void setup(void)
{
	const char *text =
		"{\"nereus\": 1, \"kind\": \"down\", \"step\": 4, \"nodes\": [1]}\n"
		"{\"nereus\": 1, \"kind\": \"response\", \"step\": 6, \"mean\": 2000, \"p90\": 4000, "
		"\"max\": 8192}\n"
		"{\"nereus\": 1, \"kind\": \"up\", \"step\": 8, \"nodes\": [1]}\n";
	const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : P_tmpdir;
	char path[512];
	struct err e;
	int fd;

	events_free(&ev);
	coef_defaults(&k);
	if (job_load(&job, "examples/jobs/ppo-llama3-8b.json", &e) ||
	    cluster_load(&cl, "examples/clusters/h100-8x8.json", &e)) {
		printf("# %s\n", e.msg);
		unit_failed = 1;
		return;
	}
	cl.nodes = 2;
	snprintf(path, sizeof path, "%s/nereus-test-XXXXXX", dir);
	fd = mkstemp(path);
	CHECK(fd >= 0 && write(fd, text, strlen(text)) == (ssize_t)strlen(text));
	close(fd);
	CHECK(events_load(&ev, path, &cl, 12, &e) == NR_OK);
	unlink(path);
}

static long seg_len(const struct hindsight *h, int i)
{
	return (i + 1 < h->nseg ? h->from[i + 1] : h->steps) - h->from[i];
}

/* The run of one sequence of candidates, priced as the oracle prices it. */
static double sequence_s(struct hindsight *h, struct charge *ch, const int *seq)
{
	double total = 0;
	struct err e;

	for (int i = 0; i < h->nseg; i++) {
		double t = h->t[i * h->ncand + seq[i]];
		if (!isfinite(t))
			return INFINITY;
		total += (double)seg_len(h, i) * t;
		if (i > 0 && seq[i] != seq[i - 1]) {
			struct env v = { &h->cond[i].job, &h->cond[i].cl, &h->k };
			struct switch_cost sc;
			CHECK(charge_price(ch, &v, &h->cand[seq[i - 1]], &h->cand[seq[i]], &sc, &e) ==
			      NR_OK);
			total += sc.total_s;
		}
	}
	return total;
}

static void test_oracle_is_the_shortest_sequence(void)
{
	static struct hindsight h;
	struct ctl_script script;
	const struct plan **plans = NULL;
	struct charge ch;
	struct err e;
	double total = 0, best = INFINITY;
	int seq[16] = { 0 };
	long count = 0;

	setup();
	CHECK(hindsight_init(&h, &job, &cl, &k, &ev, 12, &e) == NR_OK);
	CHECK(h.nseg == 4 && h.from[1] == 4 && h.from[2] == 6 && h.from[3] == 8);
	CHECK(h.ncand >= 2 && h.ncand <= h.nseg);
	charge_init(&ch, false);
	CHECK(hindsight_oracle(&h, &ch, &script, &plans, &total, &e) == NR_OK);
	/* every sequence, as digits of base ncand */
	for (;;) {
		double s = sequence_s(&h, &ch, seq);
		int i = 0;
		count++;
		if (s < best)
			best = s;
		while (i < h.nseg && ++seq[i] == h.ncand)
			seq[i++] = 0;
		if (i == h.nseg)
			break;
	}
	CHECK(count == (long)pow(h.ncand, h.nseg));
	CHECK_NEAR(total, best, 1e-12);
	/* and the schedule is one of them, that long */
	{
		int chosen[16];
		for (int i = 0; i < h.nseg; i++)
			chosen[i] = (int)(script.plans[i] - h.cand);
		CHECK_NEAR(sequence_s(&h, &ch, chosen), total, 1e-12);
	}
	CHECK(script.n == h.nseg && script.steps == 12 && script.from == h.from);
	charge_free(&ch);
	free(plans);
	hindsight_free(&h);
}

static void test_fixed_best_is_the_best_candidate(void)
{
	static struct hindsight h;
	static struct plan ref;
	struct err e;
	double total;

	setup();
	CHECK(hindsight_init(&h, &job, &cl, &k, &ev, 12, &e) == NR_OK);
	CHECK(hindsight_fixed_best(&h, &ref, &total, &e) == NR_OK);
	/* each candidate kept as it is is one way to keep its TP/PP */
	for (int q = 0; q < h.ncand; q++) {
		double kept = 0;
		bool runs = true;
		for (int i = 0; i < h.nseg; i++) {
			runs &= isfinite(h.t[i * h.ncand + q]);
			kept += (double)seg_len(&h, i) * h.t[i * h.ncand + q];
		}
		if (runs)
			CHECK(total <= kept * (1 + 1e-12));
	}
	hindsight_free(&h);
}

static int discard(void *arg, const struct step_record *r, struct err *e)
{
	(void)arg;
	(void)r;
	(void)e;
	return NR_OK;
}

/* A run that follows the schedule switches where it changes, and takes
 * what the oracle predicted (no noise, no refit). */
static void test_run_follows_the_schedule(void)
{
	static struct hindsight h;
	static struct sim sim;
	static struct controller ctl;
	static struct run run;
	struct ctl_script script;
	const struct plan **plans = NULL;
	struct engine eng;
	struct run_summary s;
	struct charge ch;
	struct err e;
	double total;
	long changes = 0;

	setup();
	CHECK(hindsight_init(&h, &job, &cl, &k, &ev, 12, &e) == NR_OK);
	charge_init(&ch, true);
	CHECK(hindsight_oracle(&h, &ch, &script, &plans, &total, &e) == NR_OK);
	charge_free(&ch);
	for (int i = 1; i < script.n; i++)
		changes += script.plans[i] != script.plans[i - 1];
	sim_init(&sim, &job, &cl, &k, &ev, 1, 0);
	eng = sim_engine(&sim);
	ctl_init(&ctl, LAYOUT_ADAPTIVE, 0.01, &k);
	ctl.script = &script;
	ctl.label = "oracle";
	run_init(&run);
	run.eng = &eng;
	run.ctl = &ctl;
	run.steps = 12;
	run.every = 1;
	run.emit = discard;
	CHECK(run_go(&run, &e) == NR_OK);
	run_summarize(&run, &s);
	CHECK(ctl.st.switches == changes);
	CHECK_NEAR(s.total_s, total, 1e-9);
	CHECK(strcmp(ctl_name(&ctl), "oracle") == 0);
	ctl_free(&ctl);
	run_free(&run);
	free(plans);
	hindsight_free(&h);
}

int main(void)
{
	RUN(test_oracle_is_the_shortest_sequence);
	RUN(test_fixed_best_is_the_best_candidate);
	RUN(test_run_follows_the_schedule);
	events_free(&ev);
	return UNIT_END();
}
