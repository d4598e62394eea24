/* nereus-transition graph mode (no subcommand): the global transition
 * graph between two plans and its memory-ordered schedule, as a document,
 * a table or a picture. */
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "doc/costdoc.h"
#include "state/tgraph.h"
#include "transition.h"

static const char graph_usage[] =
	"usage: nereus-transition --from FILE --to FILE --job FILE --cluster FILE\n"
	"                         [--cost FILE] [--format json|table] [--edges]\n"
	"                         [--svg FILE] [-o FILE]\n"
	"       nereus-transition apply|import|export|live ... (see SUBCOMMAND --help)\n"
	"\n"
	"  --from FILE            the plan running now (- for standard input)\n"
	"  --to FILE              the plan to switch to\n"
	"  --job FILE             the job document\n"
	"  --cluster FILE         the cluster document, as it is now\n"
	"  --cost FILE            calibrated coefficients (default: built-in priors)\n"
	"  --format F             json (default) or table\n"
	"  --edges                list every edge in the document\n"
	"  --svg FILE             also draw the rounds as GPUs over time\n"
	"  -o, --output FILE      write the document to FILE instead of standard output\n"
	"  -h, --help             show this help\n"
	"  -V, --version          show the version\n"
	"\n"
	"Exit status: 0 transition written, 2 bad usage or input, 3 the new plan does\n"
	"not fit (a GPU that is down, or more state than a GPU holds), 4 runtime or\n"
	"I/O failure.\n";

static const struct option graph_options[] = {
	{ "from", required_argument, NULL, OPT_FROM },
	{ "to", required_argument, NULL, OPT_TO },
	{ "job", required_argument, NULL, OPT_JOB },
	{ "cluster", required_argument, NULL, OPT_CLUSTER },
	{ "cost", required_argument, NULL, OPT_COST },
	{ "format", required_argument, NULL, OPT_FORMAT },
	{ "edges", no_argument, NULL, OPT_EDGES },
	{ "svg", required_argument, NULL, OPT_SVG },
	{ "output", required_argument, NULL, 'o' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

struct graph_args {
	const char *from, *to, *job, *cluster, *cost, *svg, *out;
	bool table, edges;
};

/* OPTIONS_DONE: help or version shown; else an exit status. */
static int graph_parse(int argc, char **argv, struct graph_args *a)
{
	static const char *const formats[] = { "json", "table", NULL };
	int c, rc, k;

	memset(a, 0, sizeof *a);
	a->out = "-";
	while ((c = getopt_long(argc, argv, ":o:hV", graph_options, NULL)) != -1) {
		switch (c) {
		case OPT_FROM: a->from = optarg; break;
		case OPT_TO: a->to = optarg; break;
		case OPT_JOB: a->job = optarg; break;
		case OPT_CLUSTER: a->cluster = optarg; break;
		case OPT_COST: a->cost = optarg; break;
		case OPT_EDGES: a->edges = true; break;
		case OPT_SVG: a->svg = optarg; break;
		case 'o': a->out = optarg; break;
		case OPT_FORMAT:
			if ((rc = parse_choice("format", optarg, formats, &k)))
				return rc;
			a->table = k == 1;
			break;
		default: return option_tail(c, argc, argv, graph_options, graph_usage);
		}
	}
	if ((rc = option_tail(-1, argc, argv, graph_options, graph_usage)))
		return rc;
	if (!a->from || !a->to || !a->job || !a->cluster)
		return usage_error("--from, --to, --job and --cluster are required");
	if (is_stdin(a->from) + is_stdin(a->to) + is_stdin(a->job) + is_stdin(a->cluster) +
	    is_stdin(a->cost) > 1)
		return usage_error("only one input can be standard input");
	if (a->table && a->edges)
		return usage_error("--edges lists edges in the json format only");
	return NR_OK;
}

static int graph_run(const struct graph_args *a)
{
	static struct job job;
	static struct cluster cl;
	static struct plan from, to;
	struct coef k;
	struct env v = { &job, &cl, &k };
	struct tgraph g;
	struct err e = { 0 };
	int rc;

	cost_coef_defaults(&k);
	if ((rc = job_load(&job, a->job, &e)) || (rc = cluster_load(&cl, a->cluster, &e)) ||
	    (a->cost && (rc = cost_load(&k, a->cost, &e))) ||
	    (rc = plan_load(&v, &from, a->from, &e)) || (rc = plan_load(&v, &to, a->to, &e)) ||
	    (a->svg && (rc = out_check(a->svg, &e))) || (rc = out_check(a->out, &e)) ||
	    (rc = tgraph_build(&v, &from, &to, &g, &e)))
		return report(&e);
	if (a->svg)
		rc = tgraph_svg(&v, &g, a->svg, &e);
	if (!rc && a->table) {
		char *text = tgraph_table(&v, &from, &to, &g);

		rc = text ? out_write_file_atomic(a->out, text, strlen(text), &e) :
			    err_oom(&e);
		free(text);
	} else if (!rc) {
		json_t *doc = tgraph_to_json(&v, &from, &to, &g, a->edges);

		rc = jdoc_write(doc, a->out,
				JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10), &e);
		json_decref(doc);
	}
	tgraph_free(&g);
	return rc ? report(&e) : NR_OK;
}

int cmd_graph(int argc, char **argv)
{
	struct graph_args a;
	int rc = graph_parse(argc, argv, &a);

	if (rc == OPTIONS_DONE)
		return NR_OK;
	return rc ? rc : graph_run(&a);
}
