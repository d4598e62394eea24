/* nereus-run's options, those of the run and of compare: the usage, the
 * option table and their parse. */
#include <getopt.h>
#include <string.h>

#include "subcommands.h"

static const char usage[] =
	"usage: nereus-run [--engine sim] --job FILE --cluster FILE [--events FILE]\n"
	"                  --steps N [--seed S] [--noise F] [--every K] [--min-gain F]\n"
	"                  [--policy P] [--plan FILE] [--cost FILE] [--max-staleness N]\n"
	"                  [--records FILE] [--resume] [--until STEP] [--summary FILE]\n"
	"                  [--svg FILE] [--now DIR] [--pace SECONDS] [--charge graph|bound]\n"
	"                  [--refit K] [--log-every K] [--tensorboard DIR] [--quiet]\n"
	"       nereus-run --engine builtin --job FILE --cluster FILE --state STORE\n"
	"                  --steps N [--save DIR] [--save-every K] [--records FILE]\n"
	"                  [--resume [--adopt]] [the options above but --seed and --noise]\n"
	"       nereus-run init --job FILE [--seed S] -o STORE\n"
	"       nereus-run generate|score --state STORE --prompts FILE [...]\n"
	"       nereus-run compare [--engine builtin --state STORE] --job FILE\n"
	"                  --cluster FILE [--events FILE] --steps N [--seed S]\n"
	"                  [--noise F] [--every K] [--min-gain F] [--cost FILE]\n"
	"                  [--charge HOW] [--out-dir DIR]\n"
	"\n"
	"  --engine E          sim (the default): the simulator; builtin: train the job\n"
	"                      for real on this process\n"
	"  --job FILE          the job document\n"
	"  --cluster FILE      the cluster document at the start of the run\n"
	"  --events FILE       the event trace (JSON Lines, nereus-events(5))\n"
	"  --steps N           the run's length in steps\n"
	"  --seed S            seed of the stage-time noise (default 1; sim only)\n"
	"  --noise F           log-normal spread of stage times (default 0; sim only)\n"
	"  --every K           the controller also runs every K steps (default 10; 0: only\n"
	"                      when conditions change)\n"
	"  --min-gain F        fraction of step time a switch must save (default 0.01)\n"
	"  --max-staleness N   1: the controller may run plans one step ahead\n"
	"                      (staleness 1) where that is faster; 0 (default): not\n"
	"  --refit K           refit the cost model at steps K, 2K, ... and plan with it\n"
	"  --policy P          the plans the controller may choose: adaptive (default),\n"
	"                      verl, verl-tuned, verl-megatron, openrlhf,\n"
	"                      openrlhf-hybrid, fixed\n"
	"  --plan FILE         follow the plan in FILE, switching when it is replaced\n"
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
	"  --adopt             builtin, with --resume: take up another run's store\n"
	"  --until STEP        stop before STEP (resume later with --resume)\n"
	"  --summary FILE      write the summary document to FILE\n"
	"  --svg FILE          draw step latency over the run\n"
	"  --now DIR           keep DIR/cluster.json, DIR/job.json and DIR/remaining-steps\n"
	"                      as they are at each step, for an outside controller\n"
	"  --pace SECONDS      wait this long after each step (for outside controllers)\n"
	"  --charge HOW        price transitions with the transition graph (graph, the\n"
	"                      default) or with its lower bound only (bound)\n"
	"  --out-dir DIR       compare: write each row's records and summary there\n";

/* The help's end, apart: one string literal of it all would pass the 4095
 * bytes C11 promises. */
static const char usage_end[] =
	"  --log-every K       print a line on standard error every K steps: the step,\n"
	"                      its time, reward, KL, response length, GPUs up and plan\n"
	"  --tensorboard DIR   write TensorBoard event files in DIR: every rl figure,\n"
	"                      step and stage times measured and predicted, GPUs up\n"
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
       OPT_SAVE, OPT_SAVE_EVERY, OPT_ADOPT, OPT_LOG_EVERY, OPT_TENSORBOARD, OPT_REFIT,
       OPT_STALENESS };

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
	{ "max-staleness", required_argument, NULL, OPT_STALENESS },
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
	{ "log-every", required_argument, NULL, OPT_LOG_EVERY },
	{ "tensorboard", required_argument, NULL, OPT_TENSORBOARD },
	{ "refit", required_argument, NULL, OPT_REFIT },
	{ "quiet", no_argument, NULL, 'q' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

int parse_args(int argc, char **argv, bool compare, struct args *a)
{
	static const char *const charges[] = { "graph", "bound", NULL };
	static const char *const engines[] = { "sim", "builtin", NULL };
	int c, rc, k;

	memset(a, 0, sizeof *a);
	a->steps = -1;
	a->seed = 1;
	a->every = 10;
	a->min_gain = 0.01;
	a->compare = compare;
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
		case 'h':
			fputs(usage, stdout);
			fputs(usage_end, stdout);
			return OPTIONS_DONE;
		case OPT_TENSORBOARD: a->tensorboard = optarg; break;
		case OPT_LOG_EVERY:
			if ((rc = parse_long("--log-every", optarg, 1, 100000000, &a->log_every)))
				return rc;
			break;
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
		case OPT_REFIT:
			if ((rc = parse_long("--refit", optarg, 1, 100000000, &a->refit)))
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
		case OPT_STALENESS:
			if ((rc = parse_long("--max-staleness", optarg, 0, 1, &a->max_staleness)))
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
		default:
			return option_tail(c, argc, argv, options, usage);
		}
	}
	if ((rc = option_tail(-1, argc, argv, options, usage)))
		return rc;
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
	if (a->compare && a->log_every)
		return usage_error("--log-every follows one run: compare takes none");
	if (a->compare && a->tensorboard)
		return usage_error("--tensorboard follows one run: compare takes none");
	if (a->compare && a->save)
		return usage_error("compare trains every row from --state STORE and saves none: "
				   "it takes no --save");
	if (!a->compare && a->out_dir)
		return usage_error("--out-dir is for 'nereus-run compare'");
	if (a->engine == ENGINE_BUILTIN && !a->state)
		return usage_error("the built-in engine starts from a state store: give --state STORE "
				   "(nereus-run init makes one)");
	if (a->engine != ENGINE_BUILTIN && (a->state || a->save || a->save_every))
		return usage_error("--state, --save and --save-every are for --engine builtin");
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
	if (a->refit && (a->plan || a->compare))
		return usage_error("--refit refits the controller's cost model: not with --plan "
				   "or compare");
	if ((!strcmp(a->job, "-") + !strcmp(a->cluster, "-") +
	     (a->events && !strcmp(a->events, "-")) + (a->cost && !strcmp(a->cost, "-")) +
	     (a->plan && !strcmp(a->plan, "-"))) > 1)
		return usage_error("only one input can be standard input");
	if (a->plan && !strcmp(a->plan, "-"))
		return usage_error("--plan follows a file that another process replaces: it "
				   "cannot be standard input");
	return NR_OK;
}
