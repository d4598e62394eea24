/* nereus-run: run a job step by step on an engine (the simulator, or the
 * built-in engine that trains it on this process), changing plans as the
 * controller decides or as a plan file another process replaces says; and
 * the subcommands (cmd/nereus-run/): `compare`, the policies side by side
 * on one trace, and the built-in engine's `init`, `generate` and `score`.
 * Options → library calls → step records and a summary. */
#include <dirent.h>
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
#include "nereus-run/subcommands.h"
#include "common/json.h"
#include "mpi/groups.h"
#include "mpi/live.h"
#include "mpi/ranks.h"
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
	"       nereus-run --engine builtin --job FILE --cluster FILE --state STORE\n"
	"                  --steps N [--save DIR] [--save-every K] [--records FILE]\n"
	"                  [--resume [--adopt]] [the options above but --seed and --noise]\n"
	"       nereus-run init --job FILE [--seed S] -o STORE\n"
	"       nereus-run generate|score --state STORE --prompts FILE [...]\n"
	"       nereus-run compare --job FILE --cluster FILE [--events FILE]\n"
	"                  --steps N [--seed S] [--noise F] [--every K] [--min-gain F]\n"
	"                  [--cost FILE] [--charge graph|bound] [--out-dir DIR]\n"
	"\n"
	"  --engine E          sim (the default): the simulator; builtin: train the job\n"
	"                      for real on this process\n"
	"  --job FILE          the job document\n"
	"  --cluster FILE      the cluster document at the start of the run\n"
	"  --events FILE       the event trace (JSON Lines, nereus-events(5))\n"
	"  --steps N           the run's length in steps\n"
	"  --seed S            seed of the stage-time noise (default 1; sim only)\n"
	"  --noise F           log-normal spread of stage times, about their relative\n"
	"                      standard deviation (default 0; sim only)\n"
	"  --every K           the controller also runs every K steps (default 10; 0: only\n"
	"                      when conditions change)\n"
	"  --min-gain F        fraction of step time a switch must save (default 0.01)\n"
	"  --policy P          the plans the controller may choose: adaptive (default),\n"
	"                      verl, verl-tuned, verl-megatron, openrlhf,\n"
	"                      openrlhf-hybrid, fixed\n"
	"  --plan FILE         follow the plan in FILE instead of the controller; switch\n"
	"                      when another process renames a new plan over it\n"
	"  --cost FILE         the cost model's coefficients (default: built-in priors)\n"
	"  --state STORE       builtin: the state store the run starts from (nereus-run\n"
	"                      init makes one; with --resume, the one it saved)\n"
	"  --save DIR          builtin: save the state as DIR/step-NNNNNN (the step it\n"
	"                      continues at) when the run ends or stops\n"
	"  --save-every K      builtin: also after every K-th step\n"
	"  --records FILE      write step records to FILE, replacing it (appending with\n"
	"                      --resume; default: standard output)\n"
	"  --resume            continue the run whose records are in --records FILE\n"
	"                      (builtin: from the store --state, which --save wrote)\n"
	"  --adopt             builtin, with --resume: continue the records even from a\n"
	"                      store another run saved\n"
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
	"'nereus-run init --help' (and generate, score) say what the subcommands take.\n"
	"\n"
	"Exit status: 0 the run finished or stopped at --until, 2 bad usage or input,\n"
	"3 the job can never fit (nothing fits, and no later event can change that),\n"
	"4 runtime or I/O failure (builtin: a value that is not finite); interrupted,\n"
	"it dies of the signal after the summary.\n";

enum { OPT_ENGINE = 256, OPT_JOB, OPT_CLUSTER, OPT_EVENTS, OPT_STEPS, OPT_SEED, OPT_NOISE,
       OPT_EVERY, OPT_MINGAIN, OPT_POLICY, OPT_PLAN, OPT_COST, OPT_RECORDS, OPT_RESUME,
       OPT_UNTIL, OPT_SUMMARY, OPT_SVG, OPT_NOW, OPT_PACE, OPT_OUTDIR, OPT_CHARGE, OPT_STATE,
       OPT_SAVE, OPT_SAVE_EVERY, OPT_ADOPT };

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
	{ "adopt", no_argument, NULL, OPT_ADOPT },
	{ "until", required_argument, NULL, OPT_UNTIL },
	{ "summary", required_argument, NULL, OPT_SUMMARY },
	{ "svg", required_argument, NULL, OPT_SVG },
	{ "now", required_argument, NULL, OPT_NOW },
	{ "pace", required_argument, NULL, OPT_PACE },
	{ "out-dir", required_argument, NULL, OPT_OUTDIR },
	{ "charge", required_argument, NULL, OPT_CHARGE },
	{ "state", required_argument, NULL, OPT_STATE },
	{ "save", required_argument, NULL, OPT_SAVE },
	{ "save-every", required_argument, NULL, OPT_SAVE_EVERY },
	{ "quiet", no_argument, NULL, 'q' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};


static int parse(int argc, char **argv, struct args *a)
{
	static const char *const charges[] = { "graph", "bound", NULL };
	static const char *const engines[] = { "sim", "builtin", NULL };
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
			if ((rc = parse_choice("engine", optarg, engines, &a->engine)))
				return rc;
			break;
		case OPT_STATE: a->state = optarg; break;
		case OPT_SAVE: a->save = optarg; break;
		case OPT_SAVE_EVERY:
			if ((rc = parse_long("--save-every", optarg, 1, 100000000, &a->save_every)))
				return rc;
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
		case OPT_ADOPT: a->adopt = true; break;
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
			a->seed_given = true;
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
	if (a->engine == ENGINE_BUILTIN && !a->state)
		return usage_error("the built-in engine starts from a state store: give --state STORE "
				   "(nereus-run init makes one)");
	if (a->engine != ENGINE_BUILTIN && (a->state || a->save || a->save_every))
		return usage_error("--state, --save and --save-every are for --engine builtin");
	if (a->compare && a->engine == ENGINE_BUILTIN)
		return usage_error("compare runs the simulator: it takes no --engine builtin");
	if (a->save_every && !a->save)
		return usage_error("--save-every saves into --save DIR");
	if (a->engine == ENGINE_BUILTIN && a->noise > 0)
		return usage_error("--noise is the simulator's: the built-in engine measures");
	if (a->engine == ENGINE_BUILTIN && a->seed_given)
		return usage_error("--seed is the simulator's: the built-in engine draws from the "
				   "job's \"data\": {\"seed\"}");
	if (a->resume && (!a->records || strcmp(a->records, "-") == 0))
		return usage_error("--resume continues the records in --records FILE");
	if (a->adopt && (!a->resume || a->engine != ENGINE_BUILTIN))
		return usage_error("--adopt resumes the built-in engine from a store: it goes with "
				   "--engine builtin and --resume");
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


int load_inputs(const struct args *a, struct inputs *in, struct err *e)
{
	int rc;

	if ((rc = job_load(&in->job, a->job, e)) || (rc = cluster_load(&in->cl, a->cluster, e)))
		return rc;
	if (a->engine == ENGINE_BUILTIN)
		in->cl.engine = CLUSTER_ENGINE_BUILTIN;
	coef_defaults_for(&in->k, in->cl.engine);
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


/* --save DIR: the store that continues at step next, DIR/step-NNNNNN. */
static int save(struct out *o, long next, struct err *e)
{
	char dst[4096];
	json_t *run_of;
	int rc;

	if (o->saved == next)
		return NR_OK;
	if (mkdir(o->a->save, 0777) != 0 && errno != EEXIST)
		return err_set(e, NR_EIO, "cannot create '%s': %s", o->a->save, strerror(errno));
	snprintf(dst, sizeof dst, "%s/step-%06ld", o->a->save, next);
	run_of = saves_run(o->sv);
	rc = run_of ? builtin_save(o->bi, next, run_of, dst, e) : err_set(e, NR_EIO, "out of memory");
	json_decref(run_of);
	if (rc)
		return rc;
	o->saved = next;
	return NR_OK;
}

/* --save DIR: the stores this run will write, from step `from` on, must
 * not be there already (a store is never overwritten), so that a run that
 * cannot save fails before it trains, not after. */
static int check_saves(const struct args *a, long from, struct err *e)
{
	long end = a->until && a->until < a->steps ? a->until : a->steps, k;
	DIR *d = opendir(a->save);
	struct dirent *de;
	char name[32], tail;
	int rc = NR_OK;

	if (!d)
		return errno == ENOENT ? NR_OK : err_set(e, errno == ENOTDIR ? NR_EINPUT : NR_EIO,
							  "cannot save into '%s': %s", a->save,
							  strerror(errno));
	while (rc == NR_OK && (de = readdir(d))) {
		if (sscanf(de->d_name, "step-%ld%c", &k, &tail) != 1 || k <= from || k > end ||
		    (k != end && (!a->save_every || k % a->save_every != 0)))
			continue;
		snprintf(name, sizeof name, "step-%06ld", k);
		if (strcmp(name, de->d_name) == 0)
			rc = err_set(e, NR_EINPUT, "'%s/%s' already exists, and this run would save "
				     "step %ld there; a store is never overwritten: remove it or "
				     "choose another --save DIR", a->save, name, k);
	}
	closedir(d);
	return rc;
}

/* --records FILE, as the first record is ready: replaced, or with --resume
 * cut back to the records the run continues from and appended to. */
static int open_records(struct out *o, struct err *e)
{
	const char *file = o->pending;

	o->pending = NULL;
	if (o->a->resume && truncate(file, (off_t)o->keep) != 0)
		return err_set(e, NR_EIO, "cannot truncate '%s': %s", file, strerror(errno));
	o->name = file;
	return out_open_stream(file, o->a->resume, &o->f, e);
}

int emit(void *arg, const struct step_record *r, struct err *e)
{
	struct out *o = arg;
	int rc;

	if (o->pending && (rc = open_records(o, e)))
		return rc;
	if (o->f && (rc = steprec_fprint(o->f, r, e)))
		return rc;
	if (o->f && fflush(o->f) != 0)
		return err_set(e, NR_EIO, "cannot write '%s': %s", o->name, strerror(errno));
	if (o->sv && (rc = saves_record(o->sv, r, e)))
		return rc;
	/* saved after its record is out: a store never runs ahead of them */
	if (o->bi && o->a->save_every && (r->step + 1) % o->a->save_every == 0 &&
	    (rc = save(o, r->step + 1, e)))
		return rc;
	if (!o->a->quiet && o->rank == 0 && show_progress() &&
	    (r->step + 1) * 100 / o->a->steps != o->shown) {
		o->shown = (r->step + 1) * 100 / o->a->steps;
		fprintf(stderr, "\r\033[K%s: step %ld of %ld", progname, r->step + 1, o->a->steps);
		if (r->step + 1 == o->a->steps)
			fputc('\n', stderr);
	}
	return NR_OK;
}

void notice(void *arg, const char *msg)
{
	const struct out *o = arg;

	if (!o->a->quiet && o->rank == 0)
		fprintf(stderr, "%s%s: %s\n", o->shown && show_progress() ? "\r\033[K" : "",
			progname, msg);
}

int check_dir(const char *dir, struct err *e)
{
	struct stat st;

	if (stat(dir, &st) != 0)
		return err_set(e, NR_EIO, "cannot write into '%s': %s", dir, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return err_set(e, NR_EINPUT, "cannot write into '%s': %s", dir, strerror(ENOTDIR));
	return NR_OK;
}

int write_doc(json_t *doc, const char *dir, const char *name, struct err *e)
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

/* An output that cannot be written fails now, not after the run. */
static int check_outputs(const struct args *a, struct err *e)
{
	int rc = NR_OK;

	if ((a->records && (rc = out_check_stream(a->records, e))) ||
	    (a->summary && (rc = out_check(a->summary, e))) ||
	    (a->svg && (rc = out_check(a->svg, e))) || (a->now && (rc = check_dir(a->now, e))) ||
	    (a->save && !a->resume && (rc = check_saves(a, 0, e))))
		return rc;
	return NR_OK;
}

/* --resume: the records so far, as the run continues from them. */
static int resume_records(const struct args *a, const struct inputs *in, struct saves *sv,
			  struct run *r, struct records *rs, struct err *e)
{
	int rc;

	/* the built-in engine's: those before the step the store continues at
	 * (those after it are run again) */
	if ((rc = records_load(rs, a->records, &in->job, e)) ||
	    (a->engine == ENGINE_BUILTIN && (rc = saves_resume(sv, a, rs, e))) ||
	    (a->save && (rc = check_saves(a, rs->n, e))))
		return rc;
	return run_resume(r, rs, a->records, e);
}

/* Started by mpirun (Open MPI's, or Slurm's srun with PMIx): the built-in
 * engine runs over the ranks. */
static bool under_mpi(void)
{
	return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK");
}

/* MPI for a run over ranks: the world and the engine's ranks over it. */
static int start_ranks(struct builtin *bi, struct comm *world, struct builtin_ranks *ranks,
		       int *rank, struct err *e)
{
	int argc = 0, size, rc;
	char **argv = NULL;

	if (live_init(&argc, &argv, rank, &size))
		return err_set(e, NR_EIO, "started by mpirun, but MPI does not start");
	if ((rc = mpi_world(world, e)))
		return rc;
	*ranks = mpi_builtin_ranks(world);
	builtin_use_ranks(bi, ranks);
	return NR_OK;
}

static int run_one(const struct args *a, struct inputs *in)
{
	static struct sim sim;
	static struct builtin bi;
	static struct controller ctl;
	static struct run r;
	struct engine eng;
	struct records rs = { 0 };
	struct out o = { .a = a, .in = in, .f = stdout, .name = "<stdout>", .saved = -1 };
	struct saves sv = { .lock = -1 };
	static struct comm world;
	static struct builtin_ranks ranks;
	bool mpi = a->engine == ENGINE_BUILTIN && under_mpi();
	struct run_summary s;
	struct sigaction sa;
	struct err e = { 0 }, never = { 0 };
	int rc;

	if (a->engine == ENGINE_BUILTIN) {
		builtin_init(&bi, &in->job, &in->cl, &in->k, &in->ev, a->state, a->steps);
		if (a->resume)
			builtin_resume(&bi);
		if (mpi && (rc = start_ranks(&bi, &world, &ranks, &o.rank, &e)))
			return report(&e);
		eng = builtin_engine(&bi);
		o.bi = &bi;
		o.sv = &sv;
		/* over ranks, rank 0 writes what the run writes */
		if (o.rank != 0)
			o.f = NULL;
	} else {
		sim_init(&sim, &in->job, &in->cl, &in->k, &in->ev, (uint64_t)a->seed, a->noise);
		eng = sim_engine(&sim);
	}
	run_init(&r);
	r.eng = &eng;
	r.steps = a->steps;
	r.until = a->until;
	r.every = a->every;
	r.pace_s = a->pace;
	r.k = in->k;
	r.price_graph = !a->bound;
	r.stop = &stop_signal;
	r.ev = &in->ev;
	r.emit = emit;
	r.notice = notice;
	r.boundary = a->now && o.rank == 0 ? publish : NULL;
	r.arg = &o;
	if (a->plan) {
		r.follow = a->plan;
	} else {
		ctl_init(&ctl, (enum plan_layout)a->policy, a->min_gain, &in->k);
		ctl.price_graph = !a->bound;
		r.ctl = &ctl;
		run_refit_hook(&r);
	}
	rc = o.sv && !a->resume ? saves_start(&sv, NULL, &e) : NR_OK;
	/* one run saves into DIR: before it is checked */
	if (rc == NR_OK && o.sv && a->save && o.rank == 0)
		rc = saves_lock(&sv, a->save, &e);
	if (rc == NR_OK)
		rc = o.rank == 0 ? check_outputs(a, &e) : NR_OK;
	/* every rank reads the records before rank 0 cuts them, at its first */
	if (rc == NR_OK && a->resume)
		rc = resume_records(a, in, &sv, &r, &rs, &e);
	if (mpi)
		rc = world.agree(world.ctx, rc, &e);
	if (rc)
		goto out;
	if (o.rank == 0 && a->records && strcmp(a->records, "-")) {
		o.f = NULL;
		o.pending = a->records;
		o.keep = rs.bytes;
	}
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	rc = run_go(&r, &e);
	/* nothing will fit again: a run with records ends as a stopped one
	 * does (store, summary, picture), then exits 3 */
	if (rc == NR_EINFEASIBLE && r.log.n > 0) {
		never = e;
		rc = NR_OK;
	}
	if (rc == NR_OK && a->save && r.started)
		rc = save(&o, r.next, &e);
	if (o.f && o.f != stdout && fclose(o.f) != 0 && !rc)
		rc = err_set(&e, NR_EIO, "cannot write '%s': %s", a->records, strerror(errno));
	if (rc || o.rank != 0)
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
	saves_unlock(&sv, o.saved >= 0);
	saves_free(&sv);
	records_free(&rs);
	ctl_free(&ctl);
	run_free(&r);
	if (o.bi)
		builtin_free(&bi);
	if (mpi) {
		mpi_world_free(&world);
		live_finalize();
	}
	if (rc)
		return report(&e);
	return never.code ? report(&never) : NR_OK;
}

int main(int argc, char **argv)
{
	static struct inputs in;
	struct args a;
	struct err e = { 0 };
	int rc;

	opterr = 0; /* option_error says it, once */
	if (argc > 1 && strcmp(argv[1], "init") == 0)
		return close_stdout(cmd_init(argc - 1, argv + 1));
	if (argc > 1 && strcmp(argv[1], "generate") == 0)
		return close_stdout(cmd_generate(argc - 1, argv + 1));
	if (argc > 1 && strcmp(argv[1], "score") == 0)
		return close_stdout(cmd_score(argc - 1, argv + 1));
	rc = parse(argc, argv, &a);

	if (rc < 0)
		return close_stdout(NR_OK);
	if (rc)
		return rc;
	if ((rc = load_inputs(&a, &in, &e)))
		return report(&e);
	rc = a.compare ? cmd_compare(&a, &in) : run_one(&a, &in);
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
