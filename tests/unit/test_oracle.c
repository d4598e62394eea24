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
	cost_coef_defaults(&k);
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

/* A trace from its text, through a file as events_load reads it. */
static int load_trace(const char *text, long steps, struct events *out)
{
	const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : P_tmpdir;
	char path[512];
	struct err e;
	int fd, rc;

	snprintf(path, sizeof path, "%s/nereus-test-XXXXXX", dir);
	fd = mkstemp(path);
	if (fd < 0)
		return -1;
	rc = write(fd, text, strlen(text)) == (ssize_t)strlen(text) ? NR_OK : -1;
	close(fd);
	if (!rc && (rc = events_load(out, path, &cl, steps, &e)))
		printf("# %s\n", e.msg);
	unlink(path);
	return rc;
}

/* Events at random steps: response lengths stepping up and down, nodes
 * going down and coming back (one always up). */
static int random_trace(unsigned *seed, int nodes, long steps, struct events *out)
{
	static const int means[] = { 300, 500, 800, 1000, 1500, 2000, 3000, 4000 };
	static char text[8192];
	bool down[8] = { false };
	size_t len = 0;
	int ndown = 0;

	text[0] = '\0';
	for (long step = 1; step < steps; step++) {
		int node = (int)(rand_r(seed) % (unsigned)nodes);
		if (rand_r(seed) % 4)
			continue;
		if (rand_r(seed) % 3 || nodes == 1) {
			int m = means[rand_r(seed) % 8];
			len += (size_t)snprintf(text + len, sizeof text - len,
						"{\"nereus\": 1, \"kind\": \"response\", \"step\": "
						"%ld, \"mean\": %d, \"p90\": %d, \"max\": 8192}\n",
						step, m, 2 * m);
		} else if (down[node] || ndown < nodes - 1) {
			len += (size_t)snprintf(text + len, sizeof text - len,
						"{\"nereus\": 1, \"kind\": \"%s\", \"step\": %ld, "
						"\"nodes\": [%d]}\n", down[node] ? "up" : "down",
						step, node);
			ndown += down[node] ? -1 : 1;
			down[node] = !down[node];
		}
	}
	return load_trace(text, steps, out);
}

/* One row of nereus-run compare: policy (with ref: fixed-best) on the
 * simulator, what it ran recorded in ran; its run's total. */
static double run_row(enum plan_layout policy, const struct plan *ref, const struct events *trace,
		      long steps, double noise, const struct ctl_script *script, struct ran *ran)
{
	static struct sim sim;
	static struct controller ctl;
	static struct run run;
	struct engine inner, eng;
	struct run_summary s;
	struct err e;

	sim_init(&sim, &job, &cl, &k, trace, 7, noise);
	inner = sim_engine(&sim);
	ran_init(ran, &inner, steps);
	eng = ran_engine(ran);
	ctl_init(&ctl, policy, 0.01, &k);
	ctl.price_graph = true;
	if (ref) {
		memcpy(&ctl.ref, ref, sizeof ctl.ref);
		ctl.have_ref = true;
	}
	ctl.script = script;
	run_init(&run);
	run.eng = &eng;
	run.ctl = &ctl;
	if (!script)
		run_refit_hook(&run);
	run.steps = steps;
	run.every = 10;
	run.emit = discard;
	CHECK(run_go(&run, &e) == NR_OK);
	run_summarize(&run, &s);
	ctl_free(&ctl);
	run_free(&run);
	return s.total_s;
}

/* On random traces, no row of nereus-run compare runs shorter than the
 * oracle's: its schedule is the shortest of the dynamic programme's (over
 * the segments' best plans and every plan a row ran) and each row's own. */
static void test_oracle_is_no_longer_than_any_row(void)
{
	static const enum plan_layout policies[] = {
		LAYOUT_ADAPTIVE, LAYOUT_FIXED, LAYOUT_FIXED, LAYOUT_VERL, LAYOUT_VERL_TUNED,
		LAYOUT_VERL_MEGATRON, LAYOUT_OPENRLHF, LAYOUT_OPENRLHF_HYBRID
	};
	enum { NPOL = sizeof policies / sizeof policies[0] };
	unsigned seed = 18;
	int beaten = 0;

	setup();
	/* ten traces: each replays every row, about seven seconds apiece in
	 * the sanitizer build that make check runs */
	for (int c = 0; c < 10; c++) {
		static struct hindsight h;
		static struct plan ref;
		static struct ran ran[NPOL + 1];
		const struct ctl_script *scripts[NPOL + 1];
		double known[NPOL + 1] = { INFINITY };
		struct replay rp = { &ev, 7, c % 2 ? 0.05 : 0, 10, true };
		const struct plan **plans = NULL;
		struct ctl_script dp;
		double row[NPOL], oracle, fixed_s;
		long steps = c ? 8 + rand_r(&seed) % 23 : 11;
		struct charge ch;
		struct err e;
		int pick;

		events_free(&ev);
		cl.nodes = c ? 2 << (rand_r(&seed) % 2) : 4;
		/* the first: one step up in the response lengths, where the oracle
		 * over the segments' best plans alone was longer than fixed */
		if ((c ? random_trace(&seed, cl.nodes, steps, &ev) :
			 load_trace("{\"nereus\": 1, \"kind\": \"response\", \"step\": 7, "
				    "\"mean\": 2000, \"p90\": 4000, \"max\": 8192}\n", steps, &ev)) ||
		    hindsight_init(&h, &job, &cl, &k, &ev, steps, &e) ||
		    hindsight_fixed_best(&h, &ref, &fixed_s, &e)) {
			CHECK(!"a trace and its hindsight");
			continue;
		}
		for (int i = 0; i < NPOL; i++) {
			row[i] = run_row(policies[i], i == 2 ? &ref : NULL, &ev, steps, rp.noise,
					 NULL, &ran[i]);
			CHECK(hindsight_add(&h, &ran[i], &e) == NR_OK);
		}
		charge_init(&ch, true);
		CHECK(hindsight_oracle(&h, &ch, &dp, &plans, &oracle, &e) == NR_OK);
		charge_free(&ch);
		scripts[0] = &dp;
		for (int i = 0; i < NPOL; i++) {
			known[i + 1] = row[i];
			CHECK(ran_script(&ran[i], &scripts[i + 1], &e) == NR_OK);
		}
		CHECK(hindsight_shortest(&h, &rp, scripts, known, NPOL + 1, &pick, &oracle, &e) ==
		      NR_OK);
		/* the oracle row follows the shortest, and takes what it said */
		CHECK_NEAR(run_row(LAYOUT_ADAPTIVE, NULL, &ev, steps, rp.noise, scripts[pick],
				   &ran[NPOL]), oracle, 1e-9 * oracle);
		for (int i = 0; i < NPOL; i++)
			if (row[i] < oracle * (1 - 1e-9)) {
				printf("# trace %d: row %d runs %.6f s, the oracle %.6f s\n", c, i,
				       row[i], oracle);
				beaten++;
			}
		for (int i = 0; i <= NPOL; i++)
			ran_free(&ran[i]);
		free(plans);
		hindsight_free(&h);
	}
	CHECK(beaten == 0);
	cl.nodes = 2;
}

int main(void)
{
	RUN(test_oracle_is_the_shortest_sequence);
	RUN(test_fixed_best_is_the_best_candidate);
	RUN(test_run_follows_the_schedule);
	RUN(test_oracle_is_no_longer_than_any_row);
	events_free(&ev);
	return UNIT_END();
}
