/* The simulator and the controller: event traces are read strictly; a
 * step's time is the cost model's; no step runs a plan that does not fit;
 * the job pauses when nothing fits and starts again when GPUs return;
 * switches under min_gain are not made; losing a GPU forces a switch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run/run.h"
#include "run/sim.h"
#include "unit.h"

static struct job job;
static struct cluster cl;
static struct coef k;
static struct sim sim;
static struct controller ctl;
static struct run run;

static void setup(const char *jobfile, int nodes)
{
	struct err e;

	cost_coef_defaults(&k);
	if (job_load(&job, jobfile, &e) ||
	    cluster_load(&cl, "examples/clusters/h100-8x8.json", &e)) {
		printf("# %s\n", e.msg);
		unit_failed = 1;
	}
	cl.nodes = nodes;
}

/* Write text to a temporary file; its name goes in path. */
static void temp_file(const char *text, char *path, size_t n)
{
	const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : P_tmpdir;
	int fd;

	snprintf(path, n, "%s/nereus-test-XXXXXX", dir);
	fd = mkstemp(path);
	if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) {
		unit_failed = 1;
		return;
	}
	close(fd);
}

static int load_events(const char *text, long steps, struct events *ev, struct err *e)
{
	char path[512];
	int rc;

	temp_file(text, path, sizeof path);
	rc = events_load(ev, path, &cl, steps, e);
	unlink(path);
	return rc;
}

static void events_read(void)
{
	struct events ev;
	struct err e;

	setup("examples/jobs/ppo-llama3-8b.json", 2);
	CHECK(load_events("{\"nereus\": 1, \"kind\": \"down\", \"step\": 0, \"nodes\": [1], "
			  "\"gpus\": [2], \"note\": \"a node and a GPU\"}\n\n"
			  "{\"nereus\": 1, \"kind\": \"response\", \"step\": 4, \"mean\": 900, "
			  "\"p90\": 1800, \"max\": 4096}\n"
			  "{\"nereus\": 1, \"kind\": \"headroom\", \"step\": 4, \"headroom\": 0.2}\n"
			  "{\"nereus\": 1, \"kind\": \"straggler\", \"step\": 7, \"gpus\": [3], "
			  "\"factor\": 1.5}\n"
			  "{\"nereus\": 1, \"kind\": \"up\", \"step\": 9, \"nodes\": [1]}\n",
			  10, &ev, &e) == NR_OK);
	CHECK(ev.n == 5);
	if (ev.n != 5)
		return;
	CHECK(ev.v[0].kind == EV_DOWN && ev.v[0].ngpus == 9 && ev.v[0].gpus[0] == 8 &&
	      ev.v[0].gpus[8] == 2);
	CHECK(ev.v[1].kind == EV_RESPONSE && ev.v[1].resp.max == 4096 && ev.v[1].line == 3);
	CHECK(ev.v[2].kind == EV_HEADROOM && ev.v[2].headroom == 0.2);
	CHECK(ev.v[3].kind == EV_STRAGGLER && ev.v[3].factor == 1.5 && ev.v[3].gpus[0] == 3);
	CHECK(ev.v[4].kind == EV_UP && ev.v[4].step == 9);
	CHECK(ev.past == 0);
	events_free(&ev);
}

/* A bad trace is refused with the line (and column) of the fault. */
static void bad(const char *text, const char *where, const char *what)
{
	struct events ev;
	struct err e = { 0 };

	CHECK(load_events(text, 10, &ev, &e) == NR_EINPUT);
	if (!strstr(e.msg, where) || !strstr(e.msg, what)) {
		printf("#   got: %s\n#   expected '%s' and '%s'\n", e.msg, where, what);
		unit_failed = 1;
	}
}

static void events_refused(void)
{
	const char *ok = "{\"nereus\": 1, \"kind\": \"up\", \"step\": 5, \"gpus\": [1]}\n";
	char text[1024];

	setup("examples/jobs/ppo-llama3-8b.json", 2);
	snprintf(text, sizeof text, "%s%s", ok,
		 "{\"nereus\": 1, \"kind\": \"down\", \"step\": 2, \"gpus\": [1]}\n");
	bad(text, ":2:", "events must be in step order");
	snprintf(text, sizeof text, "%s%s", ok, "{\"nereus\": 1, \"kind\": \"melt\", \"step\": 6}\n");
	bad(text, ":2:", "unknown event kind \"melt\"");
	bad("{\"nereus\": 1, \"kind\": \"down\", \"step\": 1, \"nodes\": [2]}\n", ":1:",
	    "nodes[0]: expected a node id from 0 to 1");
	snprintf(text, sizeof text, "%s%s", ok, "{\"nereus\": 1, \"kind\": \"up\", \"step\": 6,}\n");
	bad(text, ":2:", "");
	bad("{\"kind\": \"up\", \"step\": 6, \"gpus\": [1]}\n", ":1:", "\"nereus\"");
	bad("{\"nereus\": 1, \"kind\": \"up\", \"step\": 6, \"gpu\": [1]}\n", ":1:",
	    "unknown field");
	bad("{\"nereus\": 1, \"kind\": \"down\", \"step\": 6}\n", ":1:", "names GPUs");
	bad("{\"nereus\": 1, \"kind\": \"response\", \"step\": 6, \"mean\": 900, \"p90\": 800, "
	    "\"max\": 4096}\n", ":1:", "p90");
}

/* Events past the run (a short trial of a long trace) are checked, then
 * dropped and counted, from the line of the first. */
static void events_past_the_run(void)
{
	struct events ev;
	struct err e = { 0 };

	setup("examples/jobs/ppo-llama3-8b.json", 2);
	CHECK(load_events("{\"nereus\": 1, \"kind\": \"down\", \"step\": 3, \"gpus\": [1]}\n"
			  "{\"nereus\": 1, \"kind\": \"up\", \"step\": 10, \"gpus\": [1]}\n\n"
			  "{\"nereus\": 1, \"kind\": \"down\", \"step\": 12, \"nodes\": [0]}\n",
			  10, &ev, &e) == NR_OK);
	CHECK(ev.n == 1 && ev.v[0].step == 3);
	CHECK(ev.past == 2 && ev.past_line == 2);
	events_free(&ev);
	/* still checked: a node the cluster does not have */
	bad("{\"nereus\": 1, \"kind\": \"down\", \"step\": 12, \"nodes\": [2]}\n", ":1:",
	    "nodes[0]: expected a node id from 0 to 1");
}

/* Replaying events against the step counter applies each event once, at
 * the boundary before its step, in trace order, whether the steps are
 * walked one by one, observed twice, or jumped over. */
static void events_replayed_once(void)
{
	static struct cond walked, jumped, none;
	struct events ev;
	struct err e = { 0 };
	size_t next = 0, jnext = 0, nnext = 0;
	unsigned bits[10], all = 0;

	setup("examples/jobs/ppo-llama3-8b.json", 2);
	CHECK(load_events("{\"nereus\": 1, \"kind\": \"down\", \"step\": 2, \"gpus\": [1]}\n"
			  "{\"nereus\": 1, \"kind\": \"response\", \"step\": 2, \"mean\": 300, "
			  "\"p90\": 400, \"max\": 512}\n"
			  "{\"nereus\": 1, \"kind\": \"up\", \"step\": 5, \"gpus\": [1]}\n"
			  "{\"nereus\": 1, \"kind\": \"down\", \"step\": 5, \"gpus\": [3]}\n"
			  "{\"nereus\": 1, \"kind\": \"headroom\", \"step\": 7, \"headroom\": 0.2}\n",
			  10, &ev, &e) == NR_OK);
	cond_init(&walked, &job, &cl);
	cond_init(&jumped, &job, &cl);
	cond_init(&none, &job, &cl);
	for (long s = 0; s < 10; s++) {
		bits[s] = cond_replay(&walked, &ev, &next, s);
		all |= bits[s];
		/* observed again at the same step: nothing left to apply */
		CHECK(cond_replay(&walked, &ev, &next, s) == 0);
		if (s == 1)
			CHECK(next == 0 && walked.cl.up[1]);
		if (s == 4)
			CHECK(next == 2 && !walked.cl.up[1] && walked.cl.up[3] &&
			      walked.job.response.max == 512);
	}
	CHECK(bits[0] == 0 && bits[1] == 0 && bits[3] == 0 && bits[4] == 0 && bits[6] == 0);
	CHECK(bits[2] == (COND_GPUS | COND_RESPONSE));
	CHECK(bits[5] == COND_GPUS && walked.cl.up[1] && !walked.cl.up[3]);
	CHECK(bits[7] == COND_HEADROOM && walked.cl.headroom == 0.2);
	CHECK(next == ev.n);
	/* one jump to the last step lands where the walk did */
	CHECK(cond_replay(&jumped, &ev, &jnext, 9) == all && jnext == ev.n);
	CHECK(memcmp(jumped.cl.up, walked.cl.up, sizeof jumped.cl.up) == 0);
	CHECK(jumped.cl.headroom == walked.cl.headroom);
	CHECK(jumped.job.response.mean == walked.job.response.mean);
	/* no trace: nothing happens */
	CHECK(cond_replay(&none, NULL, &nnext, 9) == 0 && nnext == 0);
	CHECK(memcmp(none.cl.up, cl.up, sizeof none.cl.up) == 0);
	events_free(&ev);
}

/* The step time the run charges is the plan's, stage by stage, and a slow
 * GPU paces its pool. */
static void step_time_is_the_models(void)
{
	static struct plan p;
	static struct cond c;
	struct env v = { &job, &cl, &k };
	struct space sp;
	struct search_stats st;
	struct step_record r;
	struct engine eng;
	const struct cond *now;
	struct err e;
	double t;

	setup("examples/jobs/ppo-llama3-8b.json", 2);
	search_space_init(&sp);
	CHECK(plan_search(&v, &sp, false, NULL, &p, &st, &e) == NR_OK);
	cond_init(&c, &job, &cl);
	CHECK_NEAR(cond_step_time(&c, &k, &p, NULL), p.step_time, 1e-12);
	sim_init(&sim, &job, &cl, &k, NULL, 1, 0);
	eng = sim_engine(&sim);
	eng.observe(eng.self, 0, &now);
	CHECK(eng.step(eng.self, 0, &p, &r, &e) == NR_OK);
	CHECK(r.status == STEP_OK);
	CHECK_NEAR(r.step_time_s, p.step_time, 1e-12);
	/* a GPU of pool 0 at half speed: pool 0's stages take twice as long */
	for (int g = 0; g < cluster_gpus(&cl); g++)
		if (p.gpu_pool[g] == 0) {
			sim.c.slow[g] = 2;
			sim.c.nslow = 1;
			break;
		}
	CHECK(eng.step(eng.self, 0, &p, &r, &e) == NR_OK);
	for (int i = 0; i < r.nms; i++)
		CHECK_NEAR(r.ms[i].time_s, p.ms[i].time.total * (r.ms[i].pool == 0 ? 2 : 1),
			   1e-12);
	t = r.step_time_s;
	CHECK(t > p.step_time);
	CHECK_NEAR(cond_step_time(&sim.c, &k, &p, NULL), t, 1e-12);
	/* noise: a function of (seed, step, stage) only */
	sim.c.nslow = 0;
	sim.c.slow[0] = sim.c.slow[1] = 1;
	for (int g = 0; g < cluster_gpus(&cl); g++)
		sim.c.slow[g] = 1;
	sim.noise = 0.1;
	{
		struct step_record a, b;
		double mean = 0;
		eng.step(eng.self, 7, &p, &a, &e);
		eng.step(eng.self, 8, &p, &b, &e);
		eng.step(eng.self, 7, &p, &r, &e);
		CHECK(a.step_time_s == r.step_time_s);
		CHECK(a.step_time_s != b.step_time_s);
		for (long s = 0; s < 400; s++) {
			eng.step(eng.self, s, &p, &r, &e);
			mean += r.ms[0].time_s / p.ms[0].time.total / 400;
		}
		CHECK_NEAR(mean, 1, 0.02);
	}
}

/* --- runs ------------------------------------------------------------------- */

static struct step_record recs[64];
static long nrecs;
static double cap_gib[64];

static int keep(void *arg, const struct step_record *r, struct err *e)
{
	(void)arg;
	(void)e;
	if (nrecs < 64) {
		cap_gib[nrecs] = cluster_gpu_bytes(&sim.c.cl) / GIB;
		recs[nrecs++] = *r;
	}
	return NR_OK;
}

static int go(const char *trace, long steps, enum plan_layout policy, double min_gain)
{
	static struct events ev;
	static struct engine eng;
	struct err e;
	int rc;

	events_free(&ev);
	if (trace && load_events(trace, steps, &ev, &e)) {
		printf("# %s\n", e.msg);
		unit_failed = 1;
	}
	sim_init(&sim, &job, &cl, &k, &ev, 1, 0);
	eng = sim_engine(&sim);
	ctl_free(&ctl);
	ctl_init(&ctl, policy, min_gain, &k);
	run_free(&run);
	run_init(&run);
	run.eng = &eng;
	run.ctl = &ctl;
	run_refit_hook(&run);
	run.steps = steps;
	run.every = 4;
	run.emit = keep;
	nrecs = 0;
	rc = run_go(&run, &e);
	if (rc)
		printf("# %s\n", e.msg);
	return rc;
}

static void no_step_runs_a_plan_that_does_not_fit(void)
{
	setup("examples/jobs/ppo-llama3-8b.json", 2);
	CHECK(go("{\"nereus\": 1, \"kind\": \"down\", \"step\": 3, \"gpus\": [5]}\n"
		 "{\"nereus\": 1, \"kind\": \"response\", \"step\": 5, \"mean\": 4000, \"p90\": 8000, "
		 "\"max\": 65536}\n"
		 "{\"nereus\": 1, \"kind\": \"headroom\", \"step\": 8, \"headroom\": 0.5}\n"
		 "{\"nereus\": 1, \"kind\": \"down\", \"step\": 11, \"nodes\": [1]}\n"
		 "{\"nereus\": 1, \"kind\": \"up\", \"step\": 14, \"nodes\": [1]}\n"
		 "{\"nereus\": 1, \"kind\": \"straggler\", \"step\": 16, \"gpus\": [0], "
		 "\"factor\": 3}\n", 20, LAYOUT_ADAPTIVE, 0.01) == NR_OK);
	CHECK(nrecs == 20);
	for (long i = 0; i < nrecs; i++) {
		CHECK(recs[i].step == i);
		/* 64K responses with 50% headroom do not fit on one node: paused */
		CHECK(recs[i].status == (i >= 11 && i < 14 ? STEP_PAUSED : STEP_OK));
		for (int m = 0; m < recs[i].nms; m++)
			CHECK(recs[i].ms[m].peak_gib <= cap_gib[i] * (1 + 1e-9));
	}
	CHECK(ctl.st.forced >= 2); /* GPU 5, then the headroom */
	CHECK(run.log.moved[3] && run.log.moved[8]);
}

static void pause_when_nothing_fits(void)
{
	setup("examples/jobs/ppo-llama3-8b.json", 1);
	CHECK(go("{\"nereus\": 1, \"kind\": \"down\", \"step\": 3, \"gpus\": [1, 2, 3, 4, 5, 6, 7]}\n"
		 "{\"nereus\": 1, \"kind\": \"up\", \"step\": 6, \"gpus\": [1, 2, 3, 4, 5, 6, 7]}\n",
		 9, LAYOUT_ADAPTIVE, 0.01) == NR_OK);
	CHECK(nrecs == 9);
	for (long i = 0; i < nrecs; i++)
		CHECK(recs[i].status == (i >= 3 && i < 6 ? STEP_PAUSED : STEP_OK));
	CHECK(recs[3].nms == 0 && recs[3].gpus_up == 1);
	CHECK(ctl.st.pauses == 1 && ctl.st.starts == 2);
	CHECK(run.log.moved[6] && recs[6].transition_s > 0); /* state comes back */
	CHECK(run.log.idle_s[4] == recs[2].step_time_s);
}

/* The gain of going from 15 to 16 GPUs, and whether it is taken. */
static double gpu_back(double min_gain, long *switches)
{
	const char *trace = "{\"nereus\": 1, \"kind\": \"down\", \"step\": 0, \"gpus\": [15]}\n"
			    "{\"nereus\": 1, \"kind\": \"up\", \"step\": 2, \"gpus\": [15]}\n";

	/* steps enough for the switch (a new communicator) to pay back */
	CHECK(go(trace, 40, LAYOUT_ADAPTIVE, min_gain) == NR_OK);
	*switches = ctl.st.switches;
	return 1 - recs[3].step_time_s / recs[1].step_time_s;
}

static void hysteresis(void)
{
	long taken, kept;
	double gain;

	setup("examples/jobs/ppo-llama3-8b.json", 2);
	gain = gpu_back(0, &taken);
	CHECK(taken == 1 && gain > 0);
	gpu_back(gain * 1.01, &kept);
	CHECK(kept == 0);
	CHECK(!run.log.moved[2]);
	gpu_back(gain * 0.99, &taken);
	CHECK(taken == 1);
}

static void forced_switch_on_gpu_loss(void)
{
	static struct cond c;
	struct ctl_out out;
	struct err e;
	int g;

	setup("examples/jobs/ppo-llama3-8b.json", 2);
	cond_init(&c, &job, &cl);
	ctl_free(&ctl);
	ctl_init(&ctl, LAYOUT_ADAPTIVE, 0.5, &k);
	CHECK(ctl_decide(&ctl, &c, 100, &out, &e) == NR_OK && out.act == CTL_START);
	for (g = 0; g < cluster_gpus(&cl) && ctl.cur.gpu_pool[g] < 0; g++)
		;
	c.cl.up[g] = false;
	CHECK(ctl_decide(&ctl, &c, 100, &out, &e) == NR_OK);
	CHECK(out.act == CTL_SWITCH && out.d.forced && ctl.st.forced == 1);
	CHECK(ctl.cur.gpu_pool[g] < 0 && ctl.cur.feasible);
	/* nothing changed since: kept, and the second time without a search */
	CHECK(ctl_decide(&ctl, &c, 99, &out, &e) == NR_OK && out.act == CTL_KEEP);
	{
		long searches = ctl.st.searches;
		CHECK(ctl_decide(&ctl, &c, 98, &out, &e) == NR_OK && out.act == CTL_KEEP);
		CHECK(ctl.st.searches == searches);
	}
}

static void fixed_keeps_tp_pp(void)
{
	setup("examples/jobs/ppo-llama3-8b.json", 2);
	CHECK(go("{\"nereus\": 1, \"kind\": \"down\", \"step\": 2, \"nodes\": [1]}\n", 4,
		 LAYOUT_FIXED, 0.01) == NR_OK);
	CHECK(ctl.have_ref && ctl.st.switches == 1);
	for (int m = 0; m < job.nmodels; m++) {
		CHECK(ctl.cur.home[m].tp == ctl.ref.home[m].tp);
		CHECK(ctl.cur.home[m].pp == ctl.ref.home[m].pp);
	}
	CHECK(ctl.cur.gen.tp == ctl.ref.gen.tp);
	CHECK(recs[3].gpus_up == 8 && recs[3].status == STEP_OK);
}

int main(void)
{
	RUN(events_read);
	RUN(events_refused);
	RUN(events_past_the_run);
	RUN(events_replayed_once);
	RUN(step_time_is_the_models);
	RUN(no_step_runs_a_plan_that_does_not_fit);
	RUN(pause_when_nothing_fits);
	RUN(hysteresis);
	RUN(forced_switch_on_gpu_loss);
	RUN(fixed_keeps_tp_pp);
	ctl_free(&ctl);
	run_free(&run);
	return UNIT_END();
}
