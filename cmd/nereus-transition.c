/* nereus-transition: the global transition graph between two plans, and
 * its memory-ordered schedule; and the switch carried out on real state:
 * state stores resharded (apply), made from and written back to Hugging
 * Face checkpoints (import, export), or state held by MPI ranks (live).
 *
 * The first argument may name a subcommand; each is a row of the table at
 * the end of this file, with its own options and usage.  Without one, the
 * tool builds the graph (graph mode). */
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"
#include "common/json.h"
#include "doc/cluster.h"
#include "doc/costdoc.h"
#include "doc/job.h"
#include "mpi/live.h"
#ifdef NEREUS_NCCL
#include "cuda/cudalib.h"
#endif
#include "state/store.h"
#include "state/tgraph.h"

const char *progname = "nereus-transition";

/* --- graph mode ------------------------------------------------------------- */

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
		case 'h':
			fputs(graph_usage, stdout);
			return -1;
		case 'V':
			print_version();
			return -1;
		default:
			return option_error(c, argv, graph_options);
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
	    (a->svg && (rc = out_check(a->svg, &e))) || (rc = out_check(a->out, &e)) ||
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

/* --- state stores: apply, import, export ------------------------------------- */

/* Set by SIGINT or SIGTERM; the store functions poll it, remove their
 * temporary and return NR_EIO, so an interrupted run leaves no output. */
static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig)
{
	(void)sig;
	interrupted = 1;
}

/* Percent of piece bytes written, redrawn when it changes. */
struct progress {
	int shown;              /* last percent drawn, -1 before the first */
};

static void draw_progress(void *ctx, uint64_t done, uint64_t total)
{
	struct progress *p = ctx;
	int pct = total ? (int)(done * 100 / total) : 100;

	if (pct == p->shown)
		return;
	p->shown = pct;
	fprintf(stderr, "\r%s: %3d%% of %.1f MiB", progname, pct, (double)total / (1 << 20));
	fflush(stderr);
}

static void tell(void *ctx, const char *msg)
{
	(void)ctx;
	warnx_("%s", msg);
}

/* Options for a store call: the interrupt flag (its handler installed
 * here), notices on standard error and a progress bar when stderr is a
 * terminal. */
static void store_begin(struct store_opts *o, struct progress *p)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_interrupt;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	p->shown = -1;
	memset(o, 0, sizeof *o);
	o->cancel = &interrupted;
	o->notice = tell;
	if (show_progress()) {
		o->progress = draw_progress;
		o->progress_ctx = p;
	}
}

static int store_end(const struct progress *p, int rc, const struct err *e)
{
	if (p->shown >= 0)
		fputc('\n', stderr);
	return rc ? report(e) : NR_OK;
}

/* The layout plan p gives model m of job: its home configuration, the
 * job's architecture, trainable when the model trains. */
static void plan_layout_of(const struct job *job, const struct plan *p, int m,
			   struct store_layout *lo)
{
	const struct pconf *c = &p->home[m];

	memset(lo, 0, sizeof *lo);
	snprintf(lo->name, sizeof lo->name, "%s", job->models[m].name);
	lo->arch = job->models[m].arch;
	lo->tp = c->tp;
	lo->pp = c->pp;
	lo->dp = c->dp;
	lo->zero = c->zero >= ZERO_1;
	lo->trainable = job->models[m].stages[STAGE_TRAIN];
}

/* Load the job, the cluster and the plan into the static documents of the
 * caller; the plan's home layouts become to[0..job->nmodels). */
static int plan_layouts(const char *jobf, const char *clf, const char *planf, struct job *job,
			struct cluster *cl, struct plan *p, struct store_layout *to, struct err *e)
{
	struct coef k;
	struct env v = { job, cl, &k };
	int rc;

	coef_defaults(&k);
	if ((rc = job_load(job, jobf, e)) || (rc = cluster_load(cl, clf, e)) ||
	    (rc = plan_load(&v, p, planf, e)))
		return rc;
	for (int m = 0; m < job->nmodels; m++)
		plan_layout_of(job, p, m, &to[m]);
	return NR_OK;
}

/* Keep of lo[0..nlo) the models the store src holds, into *n: a store may
 * hold some of a job's models only (the actor, imported alone). */
static int held_layouts(const char *src, struct store_layout *lo, int nlo, int *n,
			struct err *e)
{
	struct store_layout held[MAX_MODELS];
	int nheld, rc;

	if ((rc = store_layouts(src, held, MAX_MODELS, &nheld, e)))
		return rc;
	*n = 0;
	for (int m = 0; m < nlo; m++)
		for (int k = 0; k < nheld; k++)
			if (strcmp(lo[m].name, held[k].name) == 0) {
				lo[(*n)++] = lo[m];
				break;
			}
	if (!*n)
		return err_set(e, NR_EINPUT, "store '%s' holds none of the job's models", src);
	return NR_OK;
}

enum { OPT_STATE = 512, OPT_HF, OPT_MODEL, OPT_PLAN, OPT_MAXSHARD, OPT_VERIFY, OPT_NCCL };

/* apply ------------------------------------------------------------------------- */

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

static int apply_main(int argc, char **argv)
{
	static struct job job;
	static struct cluster cl;
	static struct plan to;
	struct store_layout lo[MAX_MODELS];
	const char *state = NULL, *tof = NULL, *jobf = NULL, *clf = NULL, *dst = NULL;
	struct store_opts o;
	struct progress p;
	struct err e = { 0 };
	int c, rc, n;

	while ((c = getopt_long(argc, argv, ":o:hV", apply_options, NULL)) != -1) {
		switch (c) {
		case OPT_STATE: state = optarg; break;
		case OPT_TO: tof = optarg; break;
		case OPT_JOB: jobf = optarg; break;
		case OPT_CLUSTER: clf = optarg; break;
		case 'o': dst = optarg; break;
		case 'h': fputs(apply_usage, stdout); return NR_OK;
		case 'V': return print_version();
		default: return option_error(c, argv, apply_options);
		}
	}
	if (optind < argc)
		return usage_error("unexpected argument '%s'", argv[optind]);
	if (!state || !tof || !jobf || !clf || !dst)
		return usage_error("apply needs --state, --to, --job, --cluster and -o");
	if (is_stdin(tof) + is_stdin(jobf) + is_stdin(clf) > 1)
		return usage_error("only one input can be standard input");
	if ((rc = plan_layouts(jobf, clf, tof, &job, &cl, &to, lo, &e)) ||
	    (rc = held_layouts(state, lo, job.nmodels, &n, &e)))
		return report(&e);
	store_begin(&o, &p);
	rc = store_apply(state, lo, n, dst, &o, &e);
	return store_end(&p, rc, &e);
}

/* import ------------------------------------------------------------------------ */

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

static int import_main(int argc, char **argv)
{
	static struct job job;
	static struct cluster cl;
	static struct plan plan;
	struct store_layout lo[MAX_MODELS];
	struct store_hf hf[MAX_MODELS];
	const char *names[MAX_MODELS];
	const char *model = NULL, *jobf = NULL, *planf = NULL, *clf = NULL, *dst = NULL;
	struct store_opts o;
	struct progress p;
	struct err e = { 0 };
	int c, rc, n = 0;

	while ((c = getopt_long(argc, argv, ":o:hV", import_options, NULL)) != -1) {
		switch (c) {
		case OPT_HF:
			if (n == MAX_MODELS)
				return usage_error("at most %d --hf checkpoints", MAX_MODELS);
			hf_arg(optarg, &names[n], &hf[n].dir);
			n++;
			break;
		case OPT_MODEL: model = optarg; break;
		case OPT_JOB: jobf = optarg; break;
		case OPT_PLAN: planf = optarg; break;
		case OPT_CLUSTER: clf = optarg; break;
		case 'o': dst = optarg; break;
		case 'h': fputs(import_usage, stdout); return NR_OK;
		case 'V': return print_version();
		default: return option_error(c, argv, import_options);
		}
	}
	if (optind < argc)
		return usage_error("unexpected argument '%s'", argv[optind]);
	if (!n || !dst)
		return usage_error("import needs --hf and -o");
	if (model && (n > 1 || names[0]))
		return usage_error("--model names the model of a single --hf DIR");
	if ((jobf || planf || clf) && !(jobf && planf && clf))
		return usage_error("--job, --plan and --cluster go together");
	if (n == 1 && !names[0])
		names[0] = model ? model : "actor";
	for (int i = 0; i < n; i++) {
		if (!names[i])
			return usage_error("with several --hf, each is NAME=DIR");
		for (int j = 0; j < i; j++)
			if (strcmp(names[i], names[j]) == 0)
				return usage_error("model '%s' imported twice", names[i]);
	}
	if (jobf) {
		if (is_stdin(jobf) + is_stdin(planf) + is_stdin(clf) > 1)
			return usage_error("only one input can be standard input");
		if ((rc = plan_layouts(jobf, clf, planf, &job, &cl, &plan, lo, &e)))
			return report(&e);
	}
	for (int i = 0; i < n; i++) {
		struct store_layout *l = &hf[i].layout;
		int m = 0;

		if (!jobf) {
			memset(l, 0, sizeof *l);
			snprintf(l->name, sizeof l->name, "%s", names[i]);
			l->tp = l->pp = l->dp = 1;
			continue;
		}
		while (m < job.nmodels && strcmp(job.models[m].name, names[i]))
			m++;
		if (m == job.nmodels) {
			warnx_("'%s': no model '%s' in the job", jobf, names[i]);
			return NR_EINPUT;
		}
		*l = lo[m];
	}
	store_begin(&o, &p);
	rc = store_import(hf, n, dst, &o, &e);
	return store_end(&p, rc, &e);
}

/* export ------------------------------------------------------------------------ */

static const char export_usage[] =
	"usage: nereus-transition export --state DIR [--model NAME]\n"
	"                                [--max-shard BYTES] -o DIR\n"
	"\n"
	"  --state DIR            the state store (a directory, .tar or .tar.zst)\n"
	"  --model NAME           the model to export (default: the store's only one)\n"
	"  --max-shard BYTES      files of at most BYTES of tensor data (default: the\n"
	"                         files the model was imported from, else 5e9 bytes)\n"
	"  -o, --output DIR       the Hugging Face checkpoint directory; must not exist\n"
	"  -h, --help             show this help\n"
	"  -V, --version          show the version\n"
	"\n"
	"Exit status: 0 checkpoint written, 2 bad usage or input, 4 runtime or I/O\n"
	"failure or interrupted (nothing written).\n";

static const struct option export_options[] = {
	{ "state", required_argument, NULL, OPT_STATE },
	{ "model", required_argument, NULL, OPT_MODEL },
	{ "max-shard", required_argument, NULL, OPT_MAXSHARD },
	{ "output", required_argument, NULL, 'o' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

static int export_main(int argc, char **argv)
{
	const char *state = NULL, *model = NULL, *dst = NULL;
	long max_shard = 0;
	struct store_opts o;
	struct progress p;
	struct err e = { 0 };
	int c, rc;

	while ((c = getopt_long(argc, argv, ":o:hV", export_options, NULL)) != -1) {
		switch (c) {
		case OPT_STATE: state = optarg; break;
		case OPT_MODEL: model = optarg; break;
		case OPT_MAXSHARD:
			if ((rc = parse_long("--max-shard", optarg, 1, LONG_MAX, &max_shard)))
				return rc;
			break;
		case 'o': dst = optarg; break;
		case 'h': fputs(export_usage, stdout); return NR_OK;
		case 'V': return print_version();
		default: return option_error(c, argv, export_options);
		}
	}
	if (optind < argc)
		return usage_error("unexpected argument '%s'", argv[optind]);
	if (!state || !dst)
		return usage_error("export needs --state and -o");
	store_begin(&o, &p);
	rc = store_export(state, model, (uint64_t)max_shard, dst, &o, &e);
	return store_end(&p, rc, &e);
}

/* live -------------------------------------------------------------------------- */

static const char live_usage[] =
	"usage: mpirun -np N nereus-transition live --from FILE --to FILE\n"
	"                    --job FILE --cluster FILE --state DIR [--verify DIR]\n"
	"       nereus-transition live --nccl --from FILE --to FILE\n"
	"                    --job FILE --cluster FILE --state DIR [--verify DIR]\n"
	"\n"
	"  --from FILE            the plan running now\n"
	"  --to FILE              the plan to switch to\n"
	"  --job FILE             the job document both plans were made for\n"
	"  --cluster FILE         the cluster document; one rank per GPU\n"
	"  --state DIR            a store laid out as --from: what each rank starts with\n"
	"  --verify DIR           a store laid out as --to: check every piece held after\n"
	"  --nccl                 one process drives the local GPUs over NCCL instead\n"
	"                         of MPI ranks (builds with CUDA and NCCL only)\n"
	"  -h, --help             show this help\n"
	"  -V, --version          show the version\n"
	"\n"
	"Exit status: 0 resharded (and verified), 2 bad usage or input, 3 the new plan\n"
	"does not fit, 4 runtime or I/O failure (a checksum that does not match).\n";

static const struct option live_options[] = {
	{ "from", required_argument, NULL, OPT_FROM },
	{ "to", required_argument, NULL, OPT_TO },
	{ "job", required_argument, NULL, OPT_JOB },
	{ "cluster", required_argument, NULL, OPT_CLUSTER },
	{ "state", required_argument, NULL, OPT_STATE },
	{ "verify", required_argument, NULL, OPT_VERIFY },
	{ "nccl", no_argument, NULL, OPT_NCCL },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

static int live_main(int argc, char **argv)
{
	static struct job job;
	static struct cluster cl;
	static struct plan from, to;
	const char *fromf = NULL, *tof = NULL, *jobf = NULL, *clf = NULL, *state = NULL,
		   *verify = NULL;
	struct coef k;
	struct env v = { &job, &cl, &k };
	struct exec_stats st = { 0 };
	struct err e = { 0 };
	int c, rc, rank = 0, size = 1;
	bool nccl = false;
#ifdef NEREUS_NCCL
	struct cuda_lib cuda;
#endif

	while ((c = getopt_long(argc, argv, ":hV", live_options, NULL)) != -1) {
		switch (c) {
		case OPT_FROM: fromf = optarg; break;
		case OPT_TO: tof = optarg; break;
		case OPT_JOB: jobf = optarg; break;
		case OPT_CLUSTER: clf = optarg; break;
		case OPT_STATE: state = optarg; break;
		case OPT_VERIFY: verify = optarg; break;
		case OPT_NCCL: nccl = true; break;
		case 'h': fputs(live_usage, stdout); return NR_OK;
		case 'V': return print_version();
		default: return option_error(c, argv, live_options);
		}
	}
	if (optind < argc)
		return usage_error("unexpected argument '%s'", argv[optind]);
	if (!fromf || !tof || !jobf || !clf || !state)
		return usage_error("live needs --from, --to, --job, --cluster and --state");
	/* every rank reads the inputs: standard input reaches only one */
	if (is_stdin(fromf) || is_stdin(tof) || is_stdin(jobf) || is_stdin(clf))
		return usage_error("live reads its inputs on every rank: name files, not -");
#ifndef NEREUS_NCCL
	if (nccl)
		return usage_error("--nccl: this build has no NCCL (build where nvcc and NCCL "
				   "are found)");
#else
	if (nccl && (rc = cuda_lib_load(&cuda, &e)))
		return report(&e);
#endif
	if (!nccl && (rc = live_init(&argc, &argv, &rank, &size))) {
		warnx_("cannot start MPI");
		return rc;
	}
	coef_defaults(&k);
	if (!(rc = job_load(&job, jobf, &e)) && !(rc = cluster_load(&cl, clf, &e)) &&
	    !(rc = plan_load(&v, &from, fromf, &e)) && !(rc = plan_load(&v, &to, tof, &e))) {
#ifdef NEREUS_NCCL
		if (nccl)
			rc = cuda.live_reshard_nccl(&v, &from, &to, state, verify, &st, &e);
		else
#endif
			rc = live_reshard(&v, &from, &to, state, verify, &st, &e);
	}
	/* the inputs and the outcome are the same on every rank: one says so */
	if (rank == 0 && rc)
		report(&e);
	else if (rank == 0)
		printf("%d ranks, %d rounds, %.3f s, %.1f MiB sent, %ld pieces verified\n",
		       st.ranks, st.rounds, st.seconds, (double)st.bytes_sent / (1 << 20),
		       st.pieces_verified);
	if (!nccl)
		live_finalize();
	return rc;
}

/* --- subcommands --------------------------------------------------------------- */

/* A row per subcommand: its name (argv[1]) and its main, which gets argv
 * from the subcommand's name on.  The row without a name is graph mode,
 * run when argv[1] names no subcommand. */
static const struct subcommand {
	const char *name;
	int (*main)(int argc, char **argv);
} subcommands[] = {
	{ "apply", apply_main },
	{ "import", import_main },
	{ "export", export_main },
	{ "live", live_main },
	{ NULL, graph_main },
};

int main(int argc, char **argv)
{
	const struct subcommand *run = NULL;
	size_t n = sizeof subcommands / sizeof subcommands[0];

	opterr = 0; /* option_error says it, once */
	if (argc > 1 && argv[1][0] != '-') {
		for (size_t i = 0; i < n && !run; i++)
			if (subcommands[i].name && strcmp(argv[1], subcommands[i].name) == 0)
				run = &subcommands[i];
		if (!run)
			return usage_error("unknown subcommand '%s'", argv[1]);
		set_subcommand(run->name);
		return close_stdout(run->main(argc - 1, argv + 1));
	}
	for (size_t i = 0; i < n && !run; i++)
		if (!subcommands[i].name)
			run = &subcommands[i];
	return close_stdout(run->main(argc, argv));
}
