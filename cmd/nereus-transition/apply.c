/* nereus-transition apply: a state store resharded to the home layouts of
 * a plan. */
#include <string.h>

#include "transition.h"

static const char apply_usage[] =
	"usage: nereus-transition apply --state DIR --to FILE --job FILE\n"
	"                               --cluster FILE -o DST\n"
	"\n"
	"  --state DIR            the state store to reshard (a directory, .tar or .tar.zst)\n"
	"  --to FILE              the plan whose home layouts the store takes\n"
	"  --job FILE             the job document the plan was made for\n"
	"  --cluster FILE         the cluster document the plan was made for\n"
	"  -o, --output DST       the new store (a directory, .tar or .tar.zst); must not exist\n"
	"  -h, --help             show this help\n"
	"  -V, --version          show the version\n"
	"\n"
	"Exit status: 0 store written, 2 bad usage or input, 4 runtime or I/O failure\n"
	"or interrupted (nothing written).\n";

static const struct option apply_options[] = {
	{ "state", required_argument, NULL, OPT_STATE },
	{ "to", required_argument, NULL, OPT_TO },
	{ "job", required_argument, NULL, OPT_JOB },
	{ "cluster", required_argument, NULL, OPT_CLUSTER },
	{ "output", required_argument, NULL, 'o' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

struct apply_args {
	const char *state, *to, *job, *cluster, *dst;
};

/* OPTIONS_DONE: help or version shown; else an exit status. */
static int apply_parse(int argc, char **argv, struct apply_args *a)
{
	int c, rc;

	memset(a, 0, sizeof *a);
	while ((c = getopt_long(argc, argv, ":o:hV", apply_options, NULL)) != -1) {
		switch (c) {
		case OPT_STATE: a->state = optarg; break;
		case OPT_TO: a->to = optarg; break;
		case OPT_JOB: a->job = optarg; break;
		case OPT_CLUSTER: a->cluster = optarg; break;
		case 'o': a->dst = optarg; break;
		default: return option_tail(c, argc, argv, apply_options, apply_usage);
		}
	}
	if ((rc = option_tail(-1, argc, argv, apply_options, apply_usage)))
		return rc;
	if (!a->state || !a->to || !a->job || !a->cluster || !a->dst)
		return usage_error("apply needs --state, --to, --job, --cluster and -o");
	if (is_stdin(a->to) + is_stdin(a->job) + is_stdin(a->cluster) > 1)
		return usage_error("only one input can be standard input");
	return NR_OK;
}

static int apply_run(const struct apply_args *a)
{
	static struct job job;
	static struct cluster cl;
	static struct plan to;
	struct store_layout lo[MAX_MODELS];
	struct store_opts o;
	struct progress p;
	struct err e = { 0 };
	int rc, n;

	if ((rc = plan_layouts(a->job, a->cluster, a->to, &job, &cl, &to, lo, &e)) ||
	    (rc = held_layouts(a->state, lo, job.nmodels, &n, &e)))
		return report(&e);
	store_begin(&o, &p);
	rc = store_apply(a->state, lo, n, a->dst, &o, &e);
	return store_end(&p, rc, &e);
}

int cmd_apply(int argc, char **argv)
{
	struct apply_args a;
	int rc = apply_parse(argc, argv, &a);

	if (rc == OPTIONS_DONE)
		return NR_OK;
	return rc ? rc : apply_run(&a);
}
