/* nereus-transition import: Hugging Face checkpoints made into a state
 * store, in one rank each or in the home layouts of a plan. */
#include <stdio.h>
#include <string.h>

#include "transition.h"

static const char import_usage[] =
	"usage: nereus-transition import --hf [NAME=]DIR... [--model NAME]\n"
	"                                [--job FILE --plan FILE --cluster FILE]\n"
	"                                -o DST\n"
	"\n"
	"  --hf [NAME=]DIR        a Hugging Face checkpoint directory, and the job's model\n"
	"                         it holds (repeatable, one model each)\n"
	"  --model NAME           the model of a single --hf DIR (default: actor)\n"
	"  --job FILE             the job document: models, architectures, who trains\n"
	"  --plan FILE            the plan whose home layouts the store takes\n"
	"  --cluster FILE         the cluster document the plan was made for\n"
	"  -o, --output DST       the new store (a directory, .tar or .tar.zst); must not exist\n"
	"  -h, --help             show this help\n"
	"  -V, --version          show the version\n"
	"\n"
	"Without --job, --plan and --cluster: one rank (TP1, PP1, DP1) per model, the\n"
	"architecture from config.json, weights only.\n"
	"\n"
	"Exit status: 0 store written, 2 bad usage or input, 4 runtime or I/O failure\n"
	"or interrupted (nothing written).\n";

static const struct option import_options[] = {
	{ "hf", required_argument, NULL, OPT_HF },
	{ "model", required_argument, NULL, OPT_MODEL },
	{ "job", required_argument, NULL, OPT_JOB },
	{ "plan", required_argument, NULL, OPT_PLAN },
	{ "cluster", required_argument, NULL, OPT_CLUSTER },
	{ "output", required_argument, NULL, 'o' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

struct import_args {
	struct store_hf hf[MAX_MODELS]; /* the checkpoints' directories */
	const char *names[MAX_MODELS];  /* and the job's models they hold */
	int n;
	const char *model, *job, *plan, *cluster, *dst;
};

/* Split "NAME=DIR" when what precedes '=' is a model name; else the whole
 * argument is the directory. */
static void hf_arg(char *arg, const char **name, const char **dir)
{
	char *eq = strchr(arg, '=');

	*name = NULL;
	*dir = arg;
	if (!eq || eq == arg || strspn(arg, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
					"0123456789._-") != (size_t)(eq - arg))
		return;
	*eq = '\0';
	*name = arg;
	*dir = eq + 1;
}

/* The checks of the arguments against each other, after the loop. */
static int import_check(struct import_args *a)
{
	if (!a->n || !a->dst)
		return usage_error("import needs --hf and -o");
	if (a->model && (a->n > 1 || a->names[0]))
		return usage_error("--model names the model of a single --hf DIR");
	if ((a->job || a->plan || a->cluster) && !(a->job && a->plan && a->cluster))
		return usage_error("--job, --plan and --cluster go together");
	if (a->n == 1 && !a->names[0])
		a->names[0] = a->model ? a->model : "actor";
	for (int i = 0; i < a->n; i++) {
		if (!a->names[i])
			return usage_error("with several --hf, each is NAME=DIR");
		for (int j = 0; j < i; j++)
			if (strcmp(a->names[i], a->names[j]) == 0)
				return usage_error("model '%s' imported twice", a->names[i]);
	}
	if (a->job && is_stdin(a->job) + is_stdin(a->plan) + is_stdin(a->cluster) > 1)
		return usage_error("only one input can be standard input");
	return NR_OK;
}

/* OPTIONS_DONE: help or version shown; else an exit status. */
static int import_parse(int argc, char **argv, struct import_args *a)
{
	int c, rc;

	memset(a, 0, sizeof *a);
	while ((c = getopt_long(argc, argv, ":o:hV", import_options, NULL)) != -1) {
		switch (c) {
		case OPT_HF:
			if (a->n == MAX_MODELS)
				return usage_error("at most %d --hf checkpoints", MAX_MODELS);
			hf_arg(optarg, &a->names[a->n], &a->hf[a->n].dir);
			a->n++;
			break;
		case OPT_MODEL: a->model = optarg; break;
		case OPT_JOB: a->job = optarg; break;
		case OPT_PLAN: a->plan = optarg; break;
		case OPT_CLUSTER: a->cluster = optarg; break;
		case 'o': a->dst = optarg; break;
		default: return option_tail(c, argc, argv, import_options, import_usage);
		}
	}
	if ((rc = option_tail(-1, argc, argv, import_options, import_usage)))
		return rc;
	return import_check(a);
}

/* Each checkpoint's layout: one rank, or its model's home layout in the
 * plan. */
static int import_run(struct import_args *a)
{
	static struct job job;
	static struct cluster cl;
	static struct plan plan;
	struct store_layout lo[MAX_MODELS];
	struct store_opts o;
	struct progress p;
	struct err e = { 0 };
	int rc;

	if (a->job && (rc = plan_layouts(a->job, a->cluster, a->plan, &job, &cl, &plan, lo, &e)))
		return report(&e);
	for (int i = 0; i < a->n; i++) {
		struct store_layout *l = &a->hf[i].layout;
		int m = 0;

		if (!a->job) {
			memset(l, 0, sizeof *l);
			snprintf(l->name, sizeof l->name, "%s", a->names[i]);
			l->tp = l->pp = l->dp = 1;
			continue;
		}
		while (m < job.nmodels && strcmp(job.models[m].name, a->names[i]))
			m++;
		if (m == job.nmodels) {
			warnx_("'%s': no model '%s' in the job", a->job, a->names[i]);
			return NR_EINPUT;
		}
		*l = lo[m];
	}
	store_begin(&o, &p);
	rc = store_import(a->hf, a->n, a->dst, &o, &e);
	return store_end(&p, rc, &e);
}

int cmd_import(int argc, char **argv)
{
	struct import_args a;
	int rc = import_parse(argc, argv, &a);

	if (rc == OPTIONS_DONE)
		return NR_OK;
	return rc ? rc : import_run(&a);
}
