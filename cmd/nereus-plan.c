/* nereus-plan: choose the fastest memory-feasible global plan, and say
 * whether switching to it from the current plan pays. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "common/json.h"
#include "doc/cluster.h"
#include "doc/costdoc.h"
#include "doc/job.h"
#include "plan/baseline.h"
#include "plan/decide.h"
#include "plan/engines.h"
#include "plan/render.h"
#include "plan/search.h"
#include "run/charge.h"

const char *progname = "nereus-plan";

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

struct args {
	const char *job, *cluster, *cost, *current, *out, *svg;
	const char *pins[64];
	int npins;
	long remaining, max_staleness;
	double min_gain;
	int layout;
	enum target space;
	enum format { FORMAT_JSON, FORMAT_TABLE, FORMAT_VERL, FORMAT_OPENRLHF } format;
	bool exhaustive, stats;
};

static int parse(int argc, char **argv, struct args *a)
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

/* The engine --format prints a plan for: OpenRLHF, or the verl workers
 * --space names or else the plan needs; TARGET_ANY for a document. */
static enum target format_target(const struct args *a, const struct job *job,
				 const struct plan *p)
{
	if (a->format == FORMAT_OPENRLHF)
		return TARGET_OPENRLHF;
	if (a->format != FORMAT_VERL)
		return TARGET_ANY;
	if (a->space == TARGET_VERL_FSDP || a->space == TARGET_VERL_MEGATRON)
		return a->space;
	return engines_verl_workers(job, p);
}

/* NR_OK when engine t runs plan p; else exit 3 with every reason, one a
 * line on standard error. */
static int engine_runs(const struct env *v, const struct plan *p, enum target t)
{
	struct target_reasons r;

	if (engines_check(v, p, t, &r))
		return NR_OK;
	for (int i = 0; i < r.n; i++)
		fprintf(stderr, "%s: %s: %s\n", progname, engines_names[t], r.line[i]);
	return NR_EINFEASIBLE;
}

static int run(const struct args *a)
{
	static struct job job;
	static struct cluster cl;
	static struct plan cur, best;
	struct coef k;
	struct env v = { &job, &cl, &k };
	struct space sp;
	struct search_stats st;
	struct decision d;
	struct err e = { 0 };
	const struct plan *out;
	enum target t;
	json_t *doc;
	int rc;

	if ((rc = job_load(&job, a->job, &e)) || (rc = cluster_load(&cl, a->cluster, &e)))
		return report(&e);
	cost_coef_defaults_for(&k, cl.engine);
	if (a->cost && (rc = cost_load(&k, a->cost, &e)))
		return report(&e);
	if (a->current && (rc = plan_load(&v, &cur, a->current, &e)))
		return report(&e);
	/* both outputs or neither: one that cannot be written fails first */
	if ((a->svg && (rc = out_check(a->svg, &e))) || (rc = out_check(a->out, &e)))
		return report(&e);
	search_space_init(&sp);
	sp.target = a->space;
	if ((rc = layout_space(&v, (enum plan_layout)a->layout, a->current ? &cur : NULL, &sp, &e)))
		return report(&e);
	for (int i = 0; i < a->npins; i++)
		if ((rc = layout_pin(&job, (enum plan_layout)a->layout, a->pins[i], &sp, &e)))
			return report(&e);
	sp.max_staleness = (int)a->max_staleness;
	snprintf(best.layout, sizeof best.layout, "%s",
		 a->space != TARGET_ANY ? engines_names[a->space] :
		 a->npins && a->layout == LAYOUT_ADAPTIVE ? "pinned" : layout_names[a->layout]);
	rc = plan_search(&v, &sp, a->exhaustive, a->current ? &cur : NULL, &best, &st, &e);
	if (a->stats)
		fprintf(stderr, "%s: searched %ld partitions, %ld pool fronts, %ld "
			"configurations, %ld plans in %.3f ms (%.3f ms of processor time)\n",
			progname, st.partitions, st.pool_fronts, st.candidates, st.leaves,
			st.seconds * 1e3, st.cpu_seconds * 1e3);
	if (rc)
		return report(&e);
	out = &best;
	if (a->current) {
		struct switch_cost sc;
		/* the state is where the current plan put it, whether or not that
		 * plan fits now: the graph moves it from there (what was on GPUs
		 * now down comes from the store) */
		if ((rc = charge_graph(&v, &cur, &best, &sc, &e))) {
			err_prefix(&e, "pricing the switch from %s", a->current);
			return report(&e);
		}
		plan_decide_with(&v, &cur, &best, a->remaining, a->min_gain, &sc, &d);
		if (!d.do_switch)
			out = &cur;
	}
	t = format_target(a, &job, out);
	if (t != TARGET_ANY && (rc = engine_runs(&v, out, t)))
		return rc;
	if (a->svg && (rc = plan_svg(&v, out, a->svg, &e)))
		return report(&e);
	if (a->format != FORMAT_JSON) {
		char *text = a->format == FORMAT_TABLE ? plan_table(&v, out, a->current ? &d : NULL) :
			     engines_settings(&v, out, t);
		if (!text)
			return report(&(struct err){ NR_EIO, "out of memory" });
		rc = out_write_file_atomic(a->out, text, strlen(text), &e);
		free(text);
	} else {
		doc = plan_to_json(&v, out);
		if (a->current)
			json_object_set_new(doc, "decision", plan_decision_to_json(&d));
		rc = jdoc_write(doc, a->out,
				JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10), &e);
		json_decref(doc);
	}
	if (rc)
		return report(&e);
	if (a->current)
		fprintf(stderr, "%s: %s: %s\n", progname, d.do_switch ? "switch" : "keep", d.reason);
	return a->current && !d.do_switch ? NR_NO : NR_OK;
}

int main(int argc, char **argv)
{
	struct args a;
	int rc;

	opterr = 0; /* option_error says it, once */
	rc = parse(argc, argv, &a);
	if (rc == OPTIONS_DONE)
		return close_stdout(NR_OK);
	if (rc)
		return rc;
	return close_stdout(run(&a));
}
