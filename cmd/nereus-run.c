/* nereus-run: run a job step by step on an engine (the simulator, for now),
 * changing plans as the controller decides or as a plan file another
 * process replaces says; and `compare`, the policies side by side on one
 * trace.  Options → library calls → step records and a summary. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "common/json.h"
#include "run/oracle.h"
#include "run/run.h"
#include "run/sim.h"

const char *progname = "nereus-run";

static const char usage[] =
	"usage: nereus-run [--engine sim] --job FILE --cluster FILE [--events FILE]\n"
	"                  --steps N [--seed S] [--noise F] [--every K] [--min-gain F]\n"
	"                  [--policy P] [--plan FILE] [--cost FILE]\n"
	"                  [--records FILE] [--resume] [--until STEP] [--summary FILE]\n"
	"                  [--svg FILE] [--now DIR] [--pace SECONDS] [--charge graph|bound]\n"
	"                  [--quiet]\n"
	"       nereus-run compare --job FILE --cluster FILE [--events FILE]\n"
	"                  --steps N [--seed S] [--noise F] [--every K] [--min-gain F]\n"
	"                  [--cost FILE] [--charge graph|bound] [--out-dir DIR]\n"
	"\n"
	"  --engine sim        the simulation engine (the only one in this build)\n"
	"  --job FILE          the job document\n"
	"  --cluster FILE      the cluster document at the start of the run\n"
	"  --events FILE       the event trace (JSON Lines, nereus-events(5))\n"
	"  --steps N           the run's length in steps\n"
	"  --seed S            seed of the stage-time noise (default 1)\n"
	"  --noise F           log-normal spread of stage times, about their relative\n"
	"                      standard deviation (default 0)\n"
	"  --every K           the controller also runs every K steps (default 10; 0: only\n"
	"                      when conditions change)\n"
	"  --min-gain F        fraction of step time a switch must save (default 0.01)\n"
	"  --policy P          the plans the controller may choose: adaptive (default),\n"
	"                      verl, verl-tuned, verl-megatron, openrlhf,\n"
	"                      openrlhf-hybrid, fixed\n"
	"  --plan FILE         follow the plan in FILE instead of the controller; switch\n"
	"                      when another process renames a new plan over it\n"
	"  --cost FILE         the cost model's coefficients (default: built-in priors)\n"
	"  --records FILE      write step records to FILE, replacing it (appending with\n"
	"                      --resume; default: standard output)\n"
	"  --resume            continue the run whose records are in --records FILE\n"
	"  --until STEP        stop before STEP (resume later with --resume)\n"
	"  --summary FILE      write the summary document to FILE\n"
	"  --svg FILE          draw step latency over the run\n"
	"  --now DIR           keep DIR/cluster.json, DIR/job.json and DIR/remaining-steps\n"
	"                      as they are at each step, for an outside controller\n"
	"  --pace SECONDS      wait this long after each step (for outside controllers)\n"
	"  --charge HOW        price transitions with the transition graph (graph, the\n"
	"                      default) or with its lower bound only (bound)\n"
	"  --out-dir DIR       compare: write each row's records and summary there\n"
	"  -q, --quiet         no decisions and no summary on standard error\n"
	"  -h, --help          show this help\n"
	"  -V, --version       show the version\n"
	"\n"
	"Exit status: 0 the run finished or stopped at --until, 2 bad usage or input,\n"
	"4 runtime or I/O failure; interrupted, it dies of the signal after the summary.\n";

enum { OPT_ENGINE = 256, OPT_JOB, OPT_CLUSTER, OPT_EVENTS, OPT_STEPS, OPT_SEED, OPT_NOISE,
       OPT_EVERY, OPT_MINGAIN, OPT_POLICY, OPT_PLAN, OPT_COST, OPT_RECORDS, OPT_RESUME,
       OPT_UNTIL, OPT_SUMMARY, OPT_SVG, OPT_NOW, OPT_PACE, OPT_OUTDIR, OPT_CHARGE };

static const struct option options[] = {
	{ "engine", required_argument, NULL, OPT_ENGINE },
	{ "job", required_argument, NULL, OPT_JOB },
	{ "cluster", required_argument, NULL, OPT_CLUSTER },
	{ "events", required_argument, NULL, OPT_EVENTS },
	{ "steps", required_argument, NULL, OPT_STEPS },
	{ "seed", required_argument, NULL, OPT_SEED },
	{ "noise", required_argument, NULL, OPT_NOISE },
	{ "every", required_argument, NULL, OPT_EVERY },
	{ "min-gain", required_argument, NULL, OPT_MINGAIN },
	{ "policy", required_argument, NULL, OPT_POLICY },
	{ "plan", required_argument, NULL, OPT_PLAN },
	{ "cost", required_argument, NULL, OPT_COST },
	{ "records", required_argument, NULL, OPT_RECORDS },
	{ "resume", no_argument, NULL, OPT_RESUME },
	{ "until", required_argument, NULL, OPT_UNTIL },
	{ "summary", required_argument, NULL, OPT_SUMMARY },
	{ "svg", required_argument, NULL, OPT_SVG },
	{ "now", required_argument, NULL, OPT_NOW },
	{ "pace", required_argument, NULL, OPT_PACE },
	{ "out-dir", required_argument, NULL, OPT_OUTDIR },
	{ "charge", required_argument, NULL, OPT_CHARGE },
	{ "quiet", no_argument, NULL, 'q' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

struct args {
	bool compare;
	const char *job, *cluster, *events, *plan, *cost, *records, *summary, *svg, *now;
	const char *out_dir;
	long steps, seed, every, until;
	double noise, min_gain, pace;
	int policy;
	bool resume, quiet, bound;
};

static int parse(int argc, char **argv, struct args *a)
{
	static const char *const charges[] = { "graph", "bound", NULL };
	int c, rc, k;

	memset(a, 0, sizeof *a);
	a->steps = -1;
	a->seed = 1;
	a->every = 10;
	a->min_gain = 0.01;
	if (argc > 1 && strcmp(argv[1], "compare") == 0) {
		a->compare = true;
		set_subcommand("compare");
		argv++;
		argc--;
	}
	while ((c = getopt_long(argc, argv, ":qhV", options, NULL)) != -1) {
		switch (c) {
		case OPT_ENGINE:
			if (strcmp(optarg, "sim") != 0)
				return usage_error("unknown engine '%s' (this build has: sim)", optarg);
			break;
		case OPT_JOB: a->job = optarg; break;
		case OPT_CLUSTER: a->cluster = optarg; break;
		case OPT_EVENTS: a->events = optarg; break;
		case OPT_PLAN: a->plan = optarg; break;
		case OPT_COST: a->cost = optarg; break;
		case OPT_RECORDS: a->records = optarg; break;
		case OPT_SUMMARY: a->summary = optarg; break;
		case OPT_SVG: a->svg = optarg; break;
		case OPT_NOW: a->now = optarg; break;
		case OPT_OUTDIR: a->out_dir = optarg; break;
		case OPT_RESUME: a->resume = true; break;
		case OPT_CHARGE:
			if ((rc = parse_choice("charge", optarg, charges, &k)))
				return rc;
			a->bound = k == 1;
			break;
		case 'q': a->quiet = true; break;
		case OPT_STEPS:
			if ((rc = parse_long("--steps", optarg, 1, 100000000, &a->steps)))
				return rc;
			break;
		case OPT_SEED:
			if ((rc = parse_long("--seed", optarg, 0, 1L << 62, &a->seed)))
				return rc;
			break;
		case OPT_EVERY:
			if ((rc = parse_long("--every", optarg, 0, 100000000, &a->every)))
				return rc;
			break;
		case OPT_UNTIL:
			if ((rc = parse_long("--until", optarg, 1, 100000000, &a->until)))
				return rc;
			break;
		case OPT_NOISE:
			if ((rc = parse_double("--noise", optarg, 0, &a->noise)))
				return rc;
			break;
		case OPT_MINGAIN:
			if ((rc = parse_double("--min-gain", optarg, 0, &a->min_gain)))
				return rc;
			break;
		case OPT_PACE:
			if ((rc = parse_double("--pace", optarg, 0, &a->pace)))
				return rc;
			break;
		case OPT_POLICY:
			if ((rc = parse_choice("policy", optarg, layout_names, &a->policy)))
				return rc;
			break;
		case 'h':
			fputs(usage, stdout);
			return -1;
		case 'V':
			print_version();
			return -1;
		default:
			return option_error(c, argv, options);
		}
	}
	if (optind < argc)
		return usage_error("unexpected argument '%s'", argv[optind]);
	if (!a->job || !a->cluster || a->steps < 0)
		return usage_error("--job, --cluster and --steps are required");
	if (a->noise > 1)
		return usage_error("option '--noise' expects a number from 0 to 1, got '%g'",
				   a->noise);
	if (a->compare && (a->plan || a->records || a->resume || a->until || a->summary ||
			   a->svg || a->now || a->pace > 0 || a->policy))
		return usage_error("compare runs every policy itself: it takes no --plan, "
				   "--policy, --records, --resume, --until, --summary, --svg, "
				   "--now or --pace");
	if (!a->compare && a->out_dir)
		return usage_error("--out-dir is for 'nereus-run compare'");
	if (a->resume && (!a->records || strcmp(a->records, "-") == 0))
		return usage_error("--resume continues the records in --records FILE");
	if (a->plan && a->policy)
		return usage_error("--plan follows a file: there is no --policy to choose");
	if ((!strcmp(a->job, "-") + !strcmp(a->cluster, "-") +
	     (a->events && !strcmp(a->events, "-")) + (a->cost && !strcmp(a->cost, "-")) +
	     (a->plan && !strcmp(a->plan, "-"))) > 1)
		return usage_error("only one input can be standard input");
	if (a->plan && !strcmp(a->plan, "-"))
		return usage_error("--plan follows a file that another process replaces: it "
				   "cannot be standard input");
	return NR_OK;
}

/* --- the inputs ------------------------------------------------------------- */

struct inputs {
	struct job job;
	struct cluster cl;
	struct coef k;
	struct events ev;
	json_t *job_doc, *cluster_doc; /* --now: the documents to republish */
};

static int load_inputs(const struct args *a, struct inputs *in, struct err *e)
{
	int rc;

	if ((rc = job_load(&in->job, a->job, e)) || (rc = cluster_load(&in->cl, a->cluster, e)))
		return rc;
	coef_defaults(&in->k);
	if (a->cost && (rc = cost_load(&in->k, a->cost, e)))
		return rc;
	if (a->events && (rc = events_load(&in->ev, a->events, &in->cl, a->steps, e)))
		return rc;
	if (in->ev.past)
		warnx_("%s: ignoring %zu event%s from line %ld on: %s at step %ld or later, and "
		       "the run has %ld steps", strcmp(a->events, "-") ? a->events : "<stdin>",
		       in->ev.past, in->ev.past == 1 ? "" : "s", in->ev.past_line,
		       in->ev.past == 1 ? "it is" : "they are", a->steps, a->steps);
	if (a->now) {
		struct jdoc d;
		if ((rc = jdoc_load(&d, a->job, "job", e)))
			return rc;
		in->job_doc = json_incref(d.root);
		jdoc_free(&d);
		if ((rc = jdoc_load(&d, a->cluster, "cluster", e)))
			return rc;
		in->cluster_doc = json_incref(d.root);
		jdoc_free(&d);
	}
	return NR_OK;
}

/* --- the outputs ------------------------------------------------------------- */

struct out {
	const struct args *a;
	struct inputs *in;
	FILE *f;
	const char *name;
	bool published;  /* --now: the documents were written once */
	long shown;
};

static int emit(void *arg, const struct step_record *r, struct err *e)
{
	struct out *o = arg;
	int rc;

	if (o->f && (rc = steprec_fprint(o->f, r, e)))
		return rc;
	if (o->f && fflush(o->f) != 0)
		return err_set(e, NR_EIO, "cannot write '%s': %s", o->name, strerror(errno));
	if (!o->a->quiet && show_progress() && (r->step + 1) * 100 / o->a->steps != o->shown) {
		o->shown = (r->step + 1) * 100 / o->a->steps;
		fprintf(stderr, "\r\033[K%s: step %ld of %ld", progname, r->step + 1, o->a->steps);
		if (r->step + 1 == o->a->steps)
			fputc('\n', stderr);
	}
	return NR_OK;
}

static void notice(void *arg, const char *msg)
{
	const struct out *o = arg;

	if (!o->a->quiet)
		fprintf(stderr, "%s%s: %s\n", o->shown && show_progress() ? "\r\033[K" : "",
			progname, msg);
}

/* DIR of --now and --out-dir must be a folder. */
static int check_dir(const char *dir, struct err *e)
{
	struct stat st;

	if (stat(dir, &st) != 0)
		return err_set(e, NR_EIO, "cannot write into '%s': %s", dir, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return err_set(e, NR_EINPUT, "cannot write into '%s': %s", dir, strerror(ENOTDIR));
	return NR_OK;
}

static int write_doc(json_t *doc, const char *dir, const char *name, struct err *e)
{
	char path[4096];

	snprintf(path, sizeof path, "%s/%s", dir, name);
	return jdoc_write(doc, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER |
			  JSON_REAL_PRECISION(10), e);
}

/* --now DIR: the cluster and job documents as they are now (the original
 * documents with "down", "memory_headroom" and "response_len" brought up
 * to date), and the steps left. */
static int publish(void *arg, long step, const struct cond *c, unsigned changed,
		   long remaining, struct err *e)
{
	struct out *o = arg;
	char path[4096], text[32];
	json_t *down, *nodes, *gpus;
	int gpn = c->cl.gpus_per_node, rc;

	(void)step;
	if (!changed && o->published)
		goto steps_left;
	o->published = true;
	down = json_object();
	nodes = json_array();
	gpus = json_array();
	for (int n = 0; n < c->cl.nodes; n++) {
		int up = 0;
		for (int k = 0; k < gpn; k++)
			up += c->cl.up[n * gpn + k];
		if (up == 0)
			json_array_append_new(nodes, json_integer(n));
		else
			for (int k = 0; k < gpn; k++)
				if (!c->cl.up[n * gpn + k])
					json_array_append_new(gpus, json_integer(n * gpn + k));
	}
	json_object_set_new(down, "nodes", nodes);
	json_object_set_new(down, "gpus", gpus);
	json_object_set_new(o->in->cluster_doc, "down", down);
	json_object_set_new(o->in->cluster_doc, "memory_headroom", json_real(c->cl.headroom));
	json_object_set_new(json_object_get(o->in->job_doc, "batch"), "response_len",
			json_pack("{s:f,s:f,s:I}", "mean", c->job.response.mean, "p90",
				  c->job.response.p90, "max", (json_int_t)c->job.response.max));
	if ((rc = write_doc(o->in->cluster_doc, o->a->now, "cluster.json", e)) ||
	    (rc = write_doc(o->in->job_doc, o->a->now, "job.json", e)))
		return rc;
steps_left:
	snprintf(path, sizeof path, "%s/remaining-steps", o->a->now);
	snprintf(text, sizeof text, "%ld\n", remaining);
	return write_file_atomic(path, text, strlen(text), e);
}

static void print_summary(const struct run *r, const struct run_summary *s)
{
	fprintf(stderr, "%s: %s %ld of %ld steps (%ld ok, %ld paused, %ld oom); step time mean "
		"%.3f s, p50 %.3f s, p99 %.3f s; total %.1f s; %ld transitions, %.1f s (%.4f%% "
		"of the total: moving state %.1f s, reading the store %.1f s, communicators "
		"%.1f s, engines %.1f s)", progname, s->complete ? "ran" : "stopped after",
		s->done, s->steps, s->ok, s->paused, s->oom, s->mean_s, s->p50_s, s->p99_s,
		s->total_s, s->transitions, s->transition_s, 100 * s->transition_share, s->move_s,
		s->store_s, s->comm_s, s->engine_s);
	if (r->ctl)
		fprintf(stderr, "; controller %ld decisions, %ld searches, %.3f s", r->ctl->st.replans,
			r->ctl->st.searches, r->ctl->st.seconds);
	fputc('\n', stderr);
}

/* --- one run ------------------------------------------------------------------- */

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
}

static int run_one(const struct args *a, struct inputs *in)
{
	static struct sim sim;
	static struct controller ctl;
	static struct run r;
	struct engine eng;
	struct records rs = { 0 };
	struct out o = { a, in, stdout, "<stdout>", false, 0 };
	struct run_summary s;
	struct sigaction sa;
	struct err e = { 0 };
	int rc;

	sim_init(&sim, &in->job, &in->cl, &in->k, &in->ev, (uint64_t)a->seed, a->noise);
	eng = sim_engine(&sim);
	run_init(&r);
	r.eng = &eng;
	r.steps = a->steps;
	r.until = a->until;
	r.every = a->every;
	r.pace_s = a->pace;
	r.k = in->k;
	r.price_graph = !a->bound;
	r.stop = &stop_signal;
	r.emit = emit;
	r.notice = notice;
	r.boundary = a->now ? publish : NULL;
	r.arg = &o;
	if (a->plan) {
		r.follow = a->plan;
	} else {
		ctl_init(&ctl, (enum plan_layout)a->policy, a->min_gain, &in->k);
		ctl.price_graph = !a->bound;
		r.ctl = &ctl;
		run_refit_hook(&r);
	}
	/* an output that cannot be written fails now, not after the run */
	if ((a->summary && (rc = out_check(a->summary, &e))) ||
	    (a->svg && (rc = out_check(a->svg, &e))) || (a->now && (rc = check_dir(a->now, &e))))
		goto out;
	if (a->resume) {
		if ((rc = records_load(&rs, a->records, &in->job, &e)) ||
		    (rc = run_resume(&r, &rs, a->records, &e)) ||
		    (truncate(a->records, (off_t)rs.bytes) != 0 &&
		     (rc = err_set(&e, NR_EIO, "cannot truncate '%s': %s", a->records,
				   strerror(errno)))))
			goto out;
	}
	if (a->records && strcmp(a->records, "-")) {
		o.name = a->records;
		if ((rc = out_open_stream(a->records, a->resume, &o.f, &e)))
			goto out;
	}
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	rc = run_go(&r, &e);
	if (o.f && o.f != stdout && fclose(o.f) != 0 && !rc)
		rc = err_set(&e, NR_EIO, "cannot write '%s': %s", a->records, strerror(errno));
	if (rc)
		goto out;
	run_summarize(&r, &s);
	if (a->summary) {
		json_t *doc = run_summary_json(&r, &s);
		rc = jdoc_write(doc, a->summary, JSON_INDENT(2) | JSON_PRESERVE_ORDER |
				JSON_REAL_PRECISION(10), &e);
		json_decref(doc);
		if (rc)
			goto out;
	}
	if (a->svg && (rc = run_svg(&r, in->job.name, a->svg, &e)))
		goto out;
	if (!a->quiet)
		print_summary(&r, &s);
out:
	records_free(&rs);
	ctl_free(&ctl);
	run_free(&r);
	if (rc)
		return report(&e);
	return NR_OK;
}

/* --- compare ---------------------------------------------------------------------- */

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

/* What knowing the trace gives the last two rows. */
struct hind {
	struct hindsight h;
	struct plan ref;           /* fixed-best's plan */
	struct ctl_script script;  /* the oracle's */
	const struct plan **plans;
	double fixed_s, oracle_s;  /* predicted runs */
};

static int foresee(const struct args *a, struct inputs *in, struct hind *hd, struct err *e)
{
	struct charge ch;
	int rc;

	if ((rc = hindsight_init(&hd->h, &in->job, &in->cl, &in->k, &in->ev, a->steps, e)))
		return rc;
	if ((rc = hindsight_fixed_best(&hd->h, &hd->ref, &hd->fixed_s, e)))
		return rc;
	charge_init(&ch, !a->bound);
	rc = hindsight_oracle(&hd->h, &ch, &hd->script, &hd->plans, &hd->oracle_s, e);
	charge_free(&ch);
	return rc;
}

/* Run one row: its records into out_dir (or nowhere), its summary into
 * *s, and its summary document kept in *doc. */
static int run_row(const struct args *a, struct inputs *in, const struct row *row,
		   struct hind *hd, struct run_summary *s, json_t **doc, struct err *e)
{
	static struct sim sim;
	static struct controller ctl;
	static struct run r;
	static struct engine eng;
	struct args quiet = *a;
	struct out o = { &quiet, in, NULL, NULL, false, 0 };
	char path[4096];
	int rc;

	quiet.quiet = true;
	sim_init(&sim, &in->job, &in->cl, &in->k, &in->ev, (uint64_t)a->seed, a->noise);
	eng = sim_engine(&sim);
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
		ctl.script = &hd->script; /* it knows the truth: no refit */
	else
		run_refit_hook(&r);
	r.steps = a->steps;
	r.every = a->every;
	r.emit = emit;
	r.arg = &o;
	snprintf(path, sizeof path, "%s/%s.jsonl", a->out_dir ? a->out_dir : "", row->name);
	/* records only with --out-dir; without, emit writes nothing */
	o.name = path;
	if (!a->out_dir || (rc = out_open_stream(path, false, &o.f, e)) == NR_OK) {
		rc = run_go(&r, e);
		if (o.f && fclose(o.f) != 0 && !rc)
			rc = err_set(e, NR_EIO, "cannot write '%s': %s", o.name, strerror(errno));
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
	return write_doc(doc, a->out_dir, name, e);
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

static int compare(const struct args *a, struct inputs *in)
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
	if (a->out_dir && (rc = check_dir(a->out_dir, &e)))
		return report(&e);
	/* the oracle first: every row is measured against it */
	if ((rc = foresee(a, in, &hd, &e)) ||
	    (rc = run_row(a, in, &rows[R_ORACLE], &hd, &s[R_ORACLE], &doc[R_ORACLE], &e)))
		goto out;
	printf("%-15s %6s %6s %4s %10s %10s %10s %12s %6s %9s %10s %8s %8s\n", "policy", "ok",
	       "paused", "oom", "mean s", "p50 s", "p99 s", "total s", "moves", "move %",
	       "seq/s", "adaptive", "oracle");
	for (size_t i = 0; i < NROWS; i++) {
		if (i != R_ORACLE &&
		    (rc = run_row(a, in, &rows[i], &hd, &s[i], &doc[i], &e)))
			goto out;
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
	if (rc)
		return report(&e);
	return NR_OK;
}

int main(int argc, char **argv)
{
	static struct inputs in;
	struct args a;
	struct err e = { 0 };
	int rc;

	opterr = 0; /* option_error says it, once */
	rc = parse(argc, argv, &a);

	if (rc < 0)
		return close_stdout(NR_OK);
	if (rc)
		return rc;
	if ((rc = load_inputs(&a, &in, &e)))
		return report(&e);
	rc = a.compare ? compare(&a, &in) : run_one(&a, &in);
	events_free(&in.ev);
	json_decref(in.job_doc);
	json_decref(in.cluster_doc);
	rc = close_stdout(rc);
	if (stop_signal) {
		/* the records and summary are complete: die of the signal, as the
		 * shell expects of an interrupted command */
		signal(stop_signal, SIG_DFL);
		raise(stop_signal);
	}
	return rc;
}
