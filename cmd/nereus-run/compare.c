/* nereus-run compare: every policy on one trace, side by side, with
 * fixed-best and the oracle that knows the trace; adaptive's gap to the
 * oracle is the controller's score. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/json.h"
#include "subcommands.h"
#include "run/now.h"
#include "run/oracle.h"
#include "run/sim.h"

/* The rows: the policies, then fixed-best and the oracle, which know the
 * trace (run/oracle.h). */
enum row_kind { ROW_POLICY, ROW_FIXED_BEST, ROW_ORACLE };

static const struct row {
	const char *name;
	enum plan_layout policy;
	enum row_kind kind;
} rows[] = {
	{ "adaptive", LAYOUT_ADAPTIVE, ROW_POLICY },
	{ "fixed", LAYOUT_FIXED, ROW_POLICY },
	{ "fixed-best", LAYOUT_FIXED, ROW_FIXED_BEST },
	{ "verl", LAYOUT_VERL, ROW_POLICY },
	{ "verl-tuned", LAYOUT_VERL_TUNED, ROW_POLICY },
	{ "verl-megatron", LAYOUT_VERL_MEGATRON, ROW_POLICY },
	{ "openrlhf", LAYOUT_OPENRLHF, ROW_POLICY },
	{ "openrlhf-hybrid", LAYOUT_OPENRLHF_HYBRID, ROW_POLICY },
	{ "oracle", LAYOUT_ADAPTIVE, ROW_ORACLE },
};
#define NROWS (sizeof rows / sizeof rows[0])
enum { R_ADAPTIVE, R_FIXED, R_VERL = 3, R_OPENRLHF = 6, R_ORACLE = NROWS - 1 };

/* A number, or "-" where there is none (no step ran). */
static void cell(double x, int width, int prec, const char *unit)
{
	if (isfinite(x))
		printf(" %*.*f%s", width, prec, x, unit);
	else
		printf(" %*s", width + (int)strlen(unit), "-");
}

static double oracle_gap(const struct run_summary *s, const struct run_summary *oracle)
{
	return s->done && oracle->total_s > 0 ? s->total_s / oracle->total_s - 1 : NAN;
}

static void print_row(const char *name, const struct run_summary *s,
		      const struct run_summary *adaptive, const struct run_summary *oracle)
{
	printf("%-15s %6ld %6ld %4ld", name, s->ok, s->paused, s->oom);
	cell(s->mean_s, 10, 3, "");
	cell(s->p50_s, 10, 3, "");
	cell(s->p99_s, 10, 3, "");
	cell(s->total_s, 12, 1, "");
	printf(" %6ld", s->transitions);
	cell(100 * s->transition_share, 8, 4, "%");
	cell(s->ok ? s->seq_per_s : NAN, 10, 3, "");
	cell(s->ok && adaptive->ok ? adaptive->seq_per_s / s->seq_per_s : NAN, 7, 2, "x");
	cell(100 * oracle_gap(s, oracle), 7, 2, "%");
	putchar('\n');
}

/* What knowing the trace gives fixed-best and the oracle. */
struct hind {
	struct hindsight h;
	struct plan ref;           /* fixed-best's plan */
	struct ran ran[NROWS];     /* what each row ran */
	struct ctl_script script;  /* the oracle's dynamic programme */
	const struct plan **plans;
	const struct ctl_script *follow; /* the oracle row's: the shortest */
	double fixed_s, oracle_s;  /* predicted runs */
};

/* The oracle's schedule: the dynamic programme's over every plan a row
 * ran as well as the segments' best, or a row's own where that runs
 * shorter (a switch between segments cannot copy a row that switched
 * inside one, or paused where a plan fitted), so that the oracle row is no
 * longer than any. */
static int foresee(const struct args *a, struct inputs *in, struct hind *hd,
		   const struct run_summary *s, struct err *e)
{
	const struct ctl_script *scripts[NROWS];
	double known[NROWS] = { INFINITY };
	struct replay rp = { &in->ev, (uint64_t)a->seed, a->noise, a->every, !a->bound };
	struct charge ch;
	int rc, n = 1, pick;

	for (size_t i = 0; i < NROWS; i++)
		if (i != R_ORACLE && (rc = hindsight_add(&hd->h, &hd->ran[i], e)))
			return rc;
	charge_init(&ch, !a->bound);
	rc = hindsight_oracle(&hd->h, &ch, &hd->script, &hd->plans, &hd->oracle_s, e);
	charge_free(&ch);
	if (rc)
		return rc;
	scripts[0] = &hd->script;
	for (size_t i = 0; i < NROWS; i++) {
		if (i == R_ORACLE)
			continue;
		known[n] = s[i].total_s;
		if ((rc = ran_script(&hd->ran[i], &scripts[n++], e)))
			return rc;
	}
	if ((rc = hindsight_shortest(&hd->h, &rp, scripts, known, n, &pick, &hd->oracle_s, e)))
		return rc;
	hd->follow = scripts[pick];
	return NR_OK;
}

/* Run one row: its records into out_dir (or nowhere), its summary into
 * *s, and its summary document kept in *doc. */
static int run_row(const struct args *a, struct inputs *in, const struct row *row,
		   struct hind *hd, struct run_summary *s, json_t **doc, struct err *e)
{
	static struct sim sim;
	static struct controller ctl;
	static struct run r;
	static struct engine eng, sim_eng;
	struct ran *ran = &hd->ran[row - rows];
	struct args quiet = *a;
	struct out o = { .a = &quiet, .in = in, .saved = -1 };
	struct outfile of;
	char path[4096];
	int rc;

	quiet.quiet = true;
	sim_init(&sim, &in->job, &in->cl, &in->k, &in->ev, (uint64_t)a->seed, a->noise);
	sim_eng = sim_engine(&sim);
	ran_free(ran);
	ran_init(ran, &sim_eng, a->steps);
	eng = ran_engine(ran);
	ctl_init(&ctl, row->policy, a->min_gain, &in->k);
	ctl.price_graph = !a->bound;
	ctl.label = row->name;
	if (row->kind == ROW_FIXED_BEST) {
		memcpy(&ctl.ref, &hd->ref, sizeof ctl.ref);
		ctl.have_ref = true;
	}
	run_init(&r);
	r.eng = &eng;
	r.ctl = &ctl;
	if (row->kind == ROW_ORACLE)
		ctl.script = hd->follow; /* it knows the truth: no refit */
	else
		run_refit_hook(&r);
	r.steps = a->steps;
	r.every = a->every;
	r.emit = emit;
	r.arg = &o;
	snprintf(path, sizeof path, "%s/%s.jsonl", a->out_dir ? a->out_dir : "", row->name);
	/* records only with --out-dir, each file whole or not at all (nothing
	 * follows them as they grow); without, emit writes nothing */
	o.name = path;
	if (!a->out_dir || (rc = out_open_file(&of, path, &o.f, e)) == NR_OK) {
		rc = run_go(&r, e);
		if (a->out_dir && rc == NR_OK)
			rc = out_commit_file(&of, o.f, e);
		else if (a->out_dir)
			out_abort_file(&of, o.f);
	}
	if (!rc) {
		run_summarize(&r, s);
		*doc = run_summary_json(&r, s);
	}
	ctl_free(&ctl);
	run_free(&r);
	return rc;
}

static int write_summary(const struct args *a, const struct row *row, json_t *doc,
			 const struct run_summary *s, const struct run_summary *oracle,
			 struct err *e)
{
	char name[64];
	double gap = oracle_gap(s, oracle);

	json_object_set_new(doc, "oracle", json_pack("{s:f,s:o}", "total_s", oracle->total_s,
						     "gap", isfinite(gap) ? json_real(gap) :
						     json_null()));
	snprintf(name, sizeof name, "%s-summary.json", row->name);
	return now_write_doc(doc, a->out_dir, name, e);
}

/* Ours beside the figures DESIGN.md cites, for context: the score is the
 * gap to the oracle. */
static void print_published(const struct run_summary *s)
{
	const struct run_summary *ad = &s[R_ADAPTIVE], *fx = &s[R_FIXED];

	printf("adaptive: %+.2f%% of the oracle's total (%.1f s against %.1f s): the "
	       "controller's score\n", 100 * oracle_gap(ad, &s[R_ORACLE]), ad->total_s,
	       s[R_ORACLE].total_s);
	printf("published, 8B PPO (DESIGN.md): mean step latency 27.7%% lower than fixed TP/PP; "
	       "6 switches in 1,000 steps to 1,024 GPUs, 0.079%% of the run; throughput "
	       "1.10-1.47x verl's, 2.14-7.27x OpenRLHF's\n");
	printf("this run: mean step latency %.1f%% lower than fixed TP/PP; %ld switches, %.3f%% "
	       "of the run; throughput %.2fx verl's, %.2fx OpenRLHF's\n",
	       100 * (1 - ad->mean_s / fx->mean_s), ad->transitions,
	       100 * ad->transition_share, ad->seq_per_s / s[R_VERL].seq_per_s,
	       ad->seq_per_s / s[R_OPENRLHF].seq_per_s);
}

int compare_policies(const struct args *a, struct inputs *in)
{
	static struct hind hd;
	struct run_summary s[NROWS];
	json_t *doc[NROWS] = { NULL };
	struct err e = { 0 };
	int rc;

	if (a->out_dir && mkdir(a->out_dir, 0777) != 0 && errno != EEXIST) {
		warnx_("cannot create '%s': %s", a->out_dir, strerror(errno));
		return NR_EIO;
	}
	if (a->out_dir && (rc = now_check_dir(a->out_dir, &e)))
		return report(&e);
	if ((rc = hindsight_init(&hd.h, &in->job, &in->cl, &in->k, &in->ev, a->steps, &e)) ||
	    (rc = hindsight_fixed_best(&hd.h, &hd.ref, &hd.fixed_s, &e)))
		goto out;
	/* the oracle last: it knows what every row ran */
	for (size_t i = 0; i < NROWS; i++)
		if (i != R_ORACLE && (rc = run_row(a, in, &rows[i], &hd, &s[i], &doc[i], &e)))
			goto out;
	if ((rc = foresee(a, in, &hd, s, &e)) ||
	    (rc = run_row(a, in, &rows[R_ORACLE], &hd, &s[R_ORACLE], &doc[R_ORACLE], &e)))
		goto out;
	printf("%-15s %6s %6s %4s %10s %10s %10s %12s %6s %9s %10s %8s %8s\n", "policy", "ok",
	       "paused", "oom", "mean s", "p50 s", "p99 s", "total s", "moves", "move %",
	       "seq/s", "adaptive", "oracle");
	for (size_t i = 0; i < NROWS; i++) {
		if (a->out_dir && (rc = write_summary(a, &rows[i], doc[i], &s[i], &s[R_ORACLE], &e)))
			goto out;
		print_row(rows[i].name, &s[i], &s[0], &s[R_ORACLE]);
		fflush(stdout);
	}
	for (size_t i = 1; i < NROWS; i++)
		if (s[i].paused)
			printf("%s: paused %ld of %ld steps: nothing of its layout fit; a paused "
			       "step costs as long as its last step that ran\n", rows[i].name,
			       s[i].paused, s[i].steps);
	print_published(s);
out:
	for (size_t i = 0; i < NROWS; i++)
		json_decref(doc[i]);
	free(hd.plans);
	hindsight_free(&hd.h);
	for (size_t i = 0; i < NROWS; i++)
		ran_free(&hd.ran[i]);
	if (rc)
		return report(&e);
	return NR_OK;
}

