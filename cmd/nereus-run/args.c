/* nereus-run's options, those of the run and of compare: the option table
 * and their parse (the help text is usage.c's). */
#include <getopt.h>
#include <string.h>

#include "subcommands.h"

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
			fputs(run_usage, stdout);
			fputs(run_usage_end, stdout);
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
			return option_tail(c, argc, argv, options, run_usage);
		}
	}
	if ((rc = option_tail(-1, argc, argv, options, run_usage)))
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
