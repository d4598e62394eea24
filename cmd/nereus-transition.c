/* nereus-transition: the global transition graph between two plans, and
 * its memory-ordered schedule.
 *
 * The first argument may name a subcommand; each is a row of the table at
 * the end of this file, with its own options and usage.  Without one, the
 * tool builds the graph (graph mode). */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "common/json.h"
#include "doc/cluster.h"
#include "doc/costdoc.h"
#include "doc/job.h"
#include "state/tgraph.h"

const char *progname = "nereus-transition";

/* --- graph mode ------------------------------------------------------------- */

static const char graph_usage[] =
	"usage: nereus-transition --from FILE --to FILE --job FILE --cluster FILE\n"
	"                         [--cost FILE] [--format json|table] [--edges]\n"
	"                         [--svg FILE] [-o FILE]\n"
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

enum { OPT_FROM = 256, OPT_TO, OPT_JOB, OPT_CLUSTER, OPT_COST, OPT_FORMAT, OPT_EDGES,
       OPT_SVG };

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

static bool is_stdin(const char *f)
{
	return f && strcmp(f, "-") == 0;
}

/* < 0: done (help or version shown); else an exit status. */
static int graph_parse(int argc, char **argv, struct graph_args *a)
{
	int c;

	memset(a, 0, sizeof *a);
	a->out = "-";
	while ((c = getopt_long(argc, argv, "o:hV", graph_options, NULL)) != -1) {
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
			if (strcmp(optarg, "json") && strcmp(optarg, "table"))
				return usage_error("unknown format '%s' (expected json or table)",
						   optarg);
			a->table = strcmp(optarg, "table") == 0;
			break;
		case 'h':
			fputs(graph_usage, stdout);
			return -1;
		case 'V':
			print_version();
			return -1;
		default:
			return usage_error("unknown option");
		}
	}
	if (optind < argc)
		return usage_error("unexpected argument '%s'", argv[optind]);
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

	coef_defaults(&k);
	if ((rc = job_load(&job, a->job, &e)) || (rc = cluster_load(&cl, a->cluster, &e)) ||
	    (a->cost && (rc = cost_load(&k, a->cost, &e))) ||
	    (rc = plan_load(&v, &from, a->from, &e)) || (rc = plan_load(&v, &to, a->to, &e)) ||
	    (rc = tgraph_build(&v, &from, &to, &g, &e)))
		return report(&e);
	if (a->svg)
		rc = tgraph_svg(&v, &g, a->svg, &e);
	if (!rc && a->table) {
		char *text = tgraph_table(&v, &from, &to, &g);

		rc = text ? write_file_atomic(a->out, text, strlen(text), &e) :
			    err_set(&e, NR_EIO, "out of memory");
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

static int graph_main(int argc, char **argv)
{
	struct graph_args a;
	int rc = graph_parse(argc, argv, &a);

	if (rc < 0)
		return NR_OK;
	return rc ? rc : graph_run(&a);
}

/* --- subcommands --------------------------------------------------------------- */

/* A row per subcommand: its name (argv[1]) and its main, which gets argv
 * from the subcommand's name on.  The row without a name is graph mode,
 * run when argv[1] names no subcommand. */
static const struct subcommand {
	const char *name;
	int (*main)(int argc, char **argv);
} subcommands[] = {
	{ NULL, graph_main },
};

int main(int argc, char **argv)
{
	const struct subcommand *run = NULL;
	size_t n = sizeof subcommands / sizeof subcommands[0];

	if (argc > 1 && argv[1][0] != '-') {
		for (size_t i = 0; i < n && !run; i++)
			if (subcommands[i].name && strcmp(argv[1], subcommands[i].name) == 0)
				run = &subcommands[i];
		if (!run)
			return usage_error("unknown subcommand '%s'", argv[1]);
		return close_stdout(run->main(argc - 1, argv + 1));
	}
	for (size_t i = 0; i < n && !run; i++)
		if (!subcommands[i].name)
			run = &subcommands[i];
	return close_stdout(run->main(argc, argv));
}
