/* nereus-plan's options: the help text, the table getopt reads, and their
 * checks, parsed into struct args. */
#include <getopt.h>
#include <string.h>

#include "../common.h"
#include "plan/baseline.h"

#include "args.h"

static const char usage[] =
	"usage: nereus-plan --job FILE --cluster FILE [--cost FILE] [--current FILE]\n"
	"                   [--remaining-steps N] [--min-gain F] [--pin MODEL@STAGE=CONF]...\n"
	"                   [--layout L] [--space S] [--exhaustive] [--max-staleness N]\n"
	"                   [--format json|table|verl|openrlhf] [--svg FILE] [--stats]\n"
	"                   [-o FILE]\n"
	"\n"
	"  --job FILE             the job document (- for standard input)\n"
	"  --cluster FILE         the cluster document, as it is now\n"
	"  --cost FILE            calibrated coefficients (default: built-in priors)\n"
	"  --current FILE         the plan running now: decide whether to switch\n"
	"  --remaining-steps N    steps left in the run (default: unbounded)\n"
	"  --min-gain F           fraction of step time a switch must save (0.01)\n"
	"  --pin MODEL@STAGE=CONF fix a model-stage's configuration, e.g.\n"
	"                         actor@training=tp4,pp2,dp2 (repeatable)\n"
	"  --layout L             adaptive (default), or a baseline: verl, verl-tuned,\n"
	"                         verl-megatron, openrlhf, openrlhf-hybrid,\n"
	"                         fixed (the current plan's TP/PP, DP scaled)\n"
	"  --space S              search only what an engine runs: verl-fsdp,\n"
	"                         verl-megatron, openrlhf, builtin\n"
	"  --exhaustive           enumerate the whole space (slow; for checking)\n"
	"  --max-staleness N      1: the plan may generate one step ahead (staleness 1)\n"
	"                         where that is faster; 0 (default): synchronous\n"
	"  --format F             json (default), table, or an engine's settings:\n"
	"                         verl (Hydra overrides), openrlhf (launch flags)\n"
	"  --svg FILE             also draw the plan as a GPU timeline\n"
	"  --stats                print search statistics on standard error\n"
	"  -o, --output FILE      write the plan to FILE instead of standard output\n"
	"  -h, --help             show this help\n"
	"  -V, --version          show the version\n"
	"\n"
	"Exit status: 0 plan written (with --current: switch), 1 keep the current plan,\n"
	"2 bad usage or input, 3 nothing fits (or the engine of --format cannot run the\n"
	"plan), 4 runtime or I/O failure.\n";

enum { OPT_JOB = 256, OPT_CLUSTER, OPT_COST, OPT_CURRENT, OPT_REMAINING, OPT_MINGAIN,
       OPT_PIN, OPT_LAYOUT, OPT_SPACE, OPT_EXHAUSTIVE, OPT_FORMAT, OPT_SVG, OPT_STATS,
       OPT_STALENESS };

static const struct option options[] = {
	{ "job", required_argument, NULL, OPT_JOB },
	{ "cluster", required_argument, NULL, OPT_CLUSTER },
	{ "cost", required_argument, NULL, OPT_COST },
	{ "current", required_argument, NULL, OPT_CURRENT },
	{ "remaining-steps", required_argument, NULL, OPT_REMAINING },
	{ "min-gain", required_argument, NULL, OPT_MINGAIN },
	{ "pin", required_argument, NULL, OPT_PIN },
	{ "layout", required_argument, NULL, OPT_LAYOUT },
	{ "space", required_argument, NULL, OPT_SPACE },
	{ "exhaustive", no_argument, NULL, OPT_EXHAUSTIVE },
	{ "max-staleness", required_argument, NULL, OPT_STALENESS },
	{ "format", required_argument, NULL, OPT_FORMAT },
	{ "svg", required_argument, NULL, OPT_SVG },
	{ "stats", no_argument, NULL, OPT_STATS },
	{ "output", required_argument, NULL, 'o' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};


int parse_args(int argc, char **argv, struct args *a)
{
	static const char *const formats[] = { "json", "table", "verl", "openrlhf", NULL };
	int c, rc, k;

	memset(a, 0, sizeof *a);
	a->out = "-";
	a->remaining = -1;
	a->min_gain = 0.01;
	while ((c = getopt_long(argc, argv, ":o:hV", options, NULL)) != -1) {
		switch (c) {
		case OPT_JOB: a->job = optarg; break;
		case OPT_CLUSTER: a->cluster = optarg; break;
		case OPT_COST: a->cost = optarg; break;
		case OPT_CURRENT: a->current = optarg; break;
		case OPT_SVG: a->svg = optarg; break;
		case 'o': a->out = optarg; break;
		case OPT_EXHAUSTIVE: a->exhaustive = true; break;
		case OPT_STATS: a->stats = true; break;
		case OPT_REMAINING:
			if ((rc = parse_long("--remaining-steps", optarg, 0, 1L << 40, &a->remaining)))
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
		case OPT_PIN:
			if (a->npins == 64)
				return usage_error("at most 64 --pin options");
			a->pins[a->npins++] = optarg;
			break;
		case OPT_LAYOUT:
			if ((rc = parse_choice("layout", optarg, layout_names, &a->layout)))
				return rc;
			break;
		case OPT_FORMAT:
			if ((rc = parse_choice("format", optarg, formats, &k)))
				return rc;
			a->format = (enum format)k;
			break;
		case OPT_SPACE:
			/* "any" is the default, not a choice */
			if ((rc = parse_choice("space", optarg, engines_names + 1, &k)))
				return rc;
			a->space = (enum target)(k + 1);
			break;
		default:
			return option_tail(c, argc, argv, options, usage);
		}
	}
	if ((rc = option_tail(-1, argc, argv, options, usage)))
		return rc;
	if (!a->job || !a->cluster)
		return usage_error("--job and --cluster are required");
	if (a->space != TARGET_ANY && a->layout != LAYOUT_ADAPTIVE)
		return usage_error("--space and --layout each choose the space: give one");
	if ((a->cost && a->current && !strcmp(a->cost, "-") && !strcmp(a->current, "-")) ||
	    (!strcmp(a->job, "-") + !strcmp(a->cluster, "-") + (a->cost && !strcmp(a->cost, "-")) +
	     (a->current && !strcmp(a->current, "-"))) > 1)
		return usage_error("only one input can be standard input");
	return NR_OK;
}
