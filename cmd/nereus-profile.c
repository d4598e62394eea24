/* nereus-profile: measure the machine (bench), and calibrate the cost
 * model to a running job's step records (fit).  Options → library calls →
 * a cost document. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"
#include "common/json.h"
#include "doc/cluster.h"
#include "doc/job.h"
#include "mpi/mpibench.h"
#include "profile/fit.h"
#include "profile/fitread.h"
#include "profile/hwbench.h"
#ifdef NEREUS_CUDA
#include "cuda/cudalib.h"
#endif

extern char **environ;

const char *progname = "nereus-profile";

static const char usage_text[] =
	"usage: nereus-profile bench [-o FILE] [--runs N] [--quick] [--ranks N] [--no-gpu] [--cluster-out FILE]\n"
	"       nereus-profile fit --job FILE --cluster FILE [--prior FILE] [--half-life N]\n"
	"                          [--holdout F] [--skip-bad] [-o FILE] TRACE\n"
	"       nereus-profile --help | --version\n"
	"\n"
	"bench: measure this machine and write the hardware section of a cost document.\n"
	"\n"
	"  -o, --output FILE  write the document to FILE (default: standard output)\n"
	"  --runs N           timed runs per figure (default 10; 3 with --quick)\n"
	"  --quick            smaller sizes and 3 runs: a few seconds in all\n"
	"  --ranks N          also measure MPI between N local ranks (runs mpirun)\n"
	"  --no-gpu           leave out the GPU figures\n"
	"  --cluster-out FILE also write the cluster document of this host's CPU\n"
	"                     ranks (--ranks of them, 1 by default) to FILE\n"
	"\n"
	"fit: fit the cost model's coefficients to the step records in TRACE (- for\n"
	"standard input) and write them as a cost document.\n"
	"\n"
	"  --job FILE         the job the records are of\n"
	"  --cluster FILE     the cluster they ran on\n"
	"  --prior FILE       start from this cost document's coefficients\n"
	"  --half-life N      weigh a record 0.5^(age in steps / N), the prior too\n"
	"  --holdout F        keep the fraction F of the steps out of the fit, to\n"
	"                     measure its error on them (default 0)\n"
	"  --skip-bad         skip bad lines instead of stopping at the first: lines\n"
	"                     that are not records, repeat a step or go back in step\n"
	"                     order, or exceed the GPU's memory or the job's prompt\n"
	"  -o, --output FILE  write the document to FILE (default: standard output)\n"
	"\n"
	"  -h, --help         show this help and exit\n"
	"  -V, --version      show the version and exit\n"
	"\n"
	"Exit status: 0 document written, 2 bad usage or input, 4 runtime or I/O\n"
	"failure (nothing written).\n";

static int help(void)
{
	fputs(usage_text, stdout);
	return close_stdout(NR_OK);
}

/* --- bench ---------------------------------------------------------------- */

struct bench_args {
	const char *out, *cluster_out;
	long runs;
	bool quick;
	long ranks;
	bool no_gpu;
};

enum { OPT_RUNS = 256, OPT_QUICK, OPT_RANKS, OPT_NO_GPU, OPT_CLUSTER_OUT, OPT_JOB,
       OPT_CLUSTER, OPT_PRIOR, OPT_HALF_LIFE, OPT_HOLDOUT, OPT_SKIP_BAD };

static const struct option bench_options[] = {
	{ "output", required_argument, NULL, 'o' },
	{ "runs", required_argument, NULL, OPT_RUNS },
	{ "quick", no_argument, NULL, OPT_QUICK },
	{ "ranks", required_argument, NULL, OPT_RANKS },
	{ "no-gpu", no_argument, NULL, OPT_NO_GPU },
	{ "cluster-out", required_argument, NULL, OPT_CLUSTER_OUT },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

/* Parse bench's options; returns NR_OK, NR_EINPUT, or -1 when --help or
 * --version was answered with status *done. */
static int parse_bench(int argc, char **argv, struct bench_args *a, int *done)
{
	int c, rc;

	*a = (struct bench_args){ .out = "-", .runs = 0, .ranks = 1 };
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":hVo:", bench_options, NULL)) != -1) {
		switch (c) {
		case 'o':
			a->out = optarg;
			break;
		case OPT_RUNS:
			if ((rc = parse_long("--runs", optarg, 1, 1000, &a->runs)) != NR_OK)
				return rc;
			break;
		case OPT_QUICK:
			a->quick = true;
			break;
		case OPT_RANKS:
			if ((rc = parse_long("--ranks", optarg, 1, 4096, &a->ranks)) != NR_OK)
				return rc;
			break;
		case OPT_NO_GPU:
			a->no_gpu = true;
			break;
		case OPT_CLUSTER_OUT:
			a->cluster_out = optarg;
			break;
		case 'h':
			*done = help();
			return -1;
		case 'V':
			*done = close_stdout(print_version());
			return -1;
		default:
			return option_error(c, argv, bench_options);
		}
	}
	if (optind < argc)
		return usage_error("unexpected argument '%s'", argv[optind]);
	if (!*a->out)
		return usage_error("option '-o' needs a file name");
	if (a->cluster_out && !*a->cluster_out)
		return usage_error("option '--cluster-out' needs a file name");
	if (a->cluster_out && strcmp(a->cluster_out, "-") == 0 && strcmp(a->out, "-") == 0)
		return usage_error("only one output can be standard output: give -o FILE or "
				   "--cluster-out FILE");
	if (a->cluster_out && a->ranks > HW_CLUSTER_MAX_RANKS)
		return usage_error("option '--cluster-out' describes at most %d ranks, one node's "
				   "GPUs in a cluster document; got --ranks %ld", HW_CLUSTER_MAX_RANKS,
				   a->ranks);
	if (a->runs == 0)
		a->runs = a->quick ? 3 : 10;
	return NR_OK;
}

/* Run this very command again as N ranks under mpirun; its rank 0 writes
 * the document.  Returns the exit status to use. */
static int respawn(long ranks, int argc, char **argv)
{
	char self[PATH_MAX], np[32];
	char **args = calloc((size_t)argc + 10, sizeof *args);
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	pid_t pid;
	int k = 0, st, rc;

	if (!args) {
		warnx_("out of memory");
		return NR_EIO;
	}
	if (n <= 0) {
		warnx_("cannot find this program's own path: %s", strerror(errno));
		free(args);
		return NR_EIO;
	}
	self[n] = '\0';
	snprintf(np, sizeof np, "%ld", ranks);
	args[k++] = (char *)"mpirun";
	args[k++] = (char *)"--allow-run-as-root";
	args[k++] = (char *)"--oversubscribe";
	args[k++] = (char *)"--bind-to"; /* rank 0's BLAS threads may use every core */
	args[k++] = (char *)"none";
	args[k++] = (char *)"-np";
	args[k++] = np;
	args[k++] = self;
	for (int i = 0; i < argc; i++)
		args[k++] = argv[i];
	args[k] = NULL;
	fflush(NULL);
	/* mpirun gives the ranks pipes, not this terminal: say whether to show
	 * progress (private to this program; see want_progress) */
	if (show_progress())
		setenv("NEREUS_PROFILE_PROGRESS", "1", 1);
	rc = posix_spawnp(&pid, "mpirun", NULL, NULL, args, environ);
	free(args);
	if (rc != 0) {
		if (rc == ENOENT)
			warnx_("cannot run 'mpirun': not found on PATH (install Open MPI, "
			       "or leave out --ranks)");
		else
			warnx_("cannot run 'mpirun': %s", strerror(rc));
		return NR_EIO;
	}
	while (waitpid(pid, &st, 0) < 0) {
		if (errno != EINTR) {
			warnx_("waiting for 'mpirun': %s", strerror(errno));
			return NR_EIO;
		}
	}
	if (WIFEXITED(st)) {
		rc = WEXITSTATUS(st);
		if (rc == NR_OK || rc == NR_EINPUT || rc == NR_EIO)
			return rc;
		warnx_("'mpirun' failed with exit status %d", rc);
		return NR_EIO;
	}
	warnx_("'mpirun' was killed by signal %d", WIFSIGNALED(st) ? WTERMSIG(st) : 0);
	return NR_EIO;
}

static bool progress_shown;

/* Progress goes to a terminal only; ranks started by respawn() learn from
 * their parent whether it has one. */
static bool want_progress(void)
{
	const char *v = getenv("NEREUS_PROFILE_PROGRESS");

	return show_progress() || (mpib_launched() && v && strcmp(v, "1") == 0);
}

static void progress(void *arg, const char *what)
{
	(void)arg;
	fprintf(stderr, "\r\033[K%s: measuring %s", progname, what);
	progress_shown = true;
}

static void progress_done(void)
{
	if (progress_shown)
		fputs("\r\033[K", stderr);
	progress_shown = false;
}

/* Set key to v in o; false (v released) when v is NULL or o cannot take it. */
static bool put(json_t *o, const char *key, json_t *v)
{
	return v && json_object_set_new(o, key, v) == 0;
}

static json_t *cpu_json(const struct hw_figure *copy, const struct hw_figure *gemm,
			const struct hw_series *gemm_sizes)
{
	json_t *o = json_object();

	if (o && put(o, "memcpy_bandwidth", hw_figure_json(copy)) &&
	    put(o, "gemm_fp32", hw_figure_json(gemm)) &&
	    put(o, "gemm_fp32_by_size", hw_series_json(gemm_sizes)))
		return o;
	json_decref(o);
	return NULL;
}

static json_t *mpi_json(const struct mpib_result *m)
{
	json_t *o = json_object();

	if (!o)
		return NULL;
	if (m->ranks < 2) {
		if (put(o, "ranks", json_integer(1)) &&
		    put(o, "note", json_string("not measured: run with --ranks N, N of at least 2")))
			return o;
	} else if (put(o, "ranks", json_integer(m->ranks)) &&
		   put(o, "library", json_string(m->library)) &&
		   put(o, "sendrecv_busbw", hw_series_json(&m->sendrecv)) &&
		   put(o, "allreduce_busbw", hw_series_json(&m->allreduce)) &&
		   put(o, "allgather_busbw", hw_series_json(&m->allgather)) &&
		   put(o, "communicator_create", hw_figure_json(&m->comm_dup)) &&
		   put(o, "communicator_split", hw_figure_json(&m->comm_split))) {
		return o;
	}
	json_decref(o);
	return NULL;
}

static json_t *gpu_absent(const char *why)
{
	json_t *o = json_object();

	if (o && put(o, "present", json_false()) && put(o, "note", json_string(why)))
		return o;
	json_decref(o);
	return NULL;
}

#ifdef NEREUS_CUDA
static json_t *nccl_json(const struct gpub_result *g)
{
	json_t *o = json_object();

	if (!o)
		return NULL;
	if (g->nccl_devices == 0) {
		if (put(o, "devices", json_integer(0)) && put(o, "note", json_string(g->nccl_note)))
			return o;
	} else if (put(o, "devices", json_integer(g->nccl_devices)) &&
		   put(o, "version", json_string(g->nccl_version)) &&
		   put(o, "allreduce_busbw", hw_series_json(&g->allreduce)) &&
		   put(o, "allgather_busbw", hw_series_json(&g->allgather)) &&
		   put(o, "reducescatter_busbw", hw_series_json(&g->reducescatter)) &&
		   put(o, "sendrecv_busbw", hw_series_json(&g->sendrecv)) &&
		   put(o, "communicator_create", hw_figure_json(&g->comm_init)) &&
		   (g->comm_split.runs == 0 ||
		    put(o, "communicator_split", hw_figure_json(&g->comm_split)))) {
		return o;
	}
	json_decref(o);
	return NULL;
}

static json_t *gpu_json(const struct gpub_result *g)
{
	json_t *o;

	if (g->devices == 0)
		return gpu_absent(g->note);
	o = json_object();
	if (o && put(o, "present", json_true()) && put(o, "devices", json_integer(g->devices)) &&
	    put(o, "name", json_string(g->name)) &&
	    put(o, "memory_bytes", json_integer((json_int_t)g->memory_bytes)) &&
	    put(o, "memcpy_bandwidth", hw_figure_json(&g->memcpy_d2d)) &&
	    put(o, "h2d_bandwidth", hw_figure_json(&g->h2d)) &&
	    put(o, "d2h_bandwidth", hw_figure_json(&g->d2h)) &&
	    put(o, "gemm_bf16", hw_figure_json(&g->gemm_bf16)) &&
	    put(o, "gemm_bf16_by_size", hw_series_json(&g->gemm_bf16_sizes)) &&
	    put(o, "nccl", nccl_json(g)))
		return o;
	json_decref(o);
	return NULL;
}
#endif

/* Measure on this process (rank 0) and write the document. */
static int measure_and_write(const struct bench_args *a, const struct hw_opts *o,
			     const struct mpib_result *m, struct err *e)
{
	struct hw_host host;
	struct hw_figure copy, gemm, gemm_rank;
	struct hw_series gemm_sizes, rank_sizes;
	struct hw_opts per_rank = *o;
	json_t *doc, *hw, *gpu = NULL, *cl = NULL;
	bool ok;
	int rc, ranks = m->ranks > 1 ? m->ranks : (int)a->ranks; /* mpirun's, or --ranks */

	hw_host_facts(&host);
	per_rank.threads = hw_rank_threads(&host, ranks);
	if ((rc = hw_bench_memcpy(o, &copy, e)) != NR_OK ||
	    (rc = hw_bench_sgemm(o, &gemm, &gemm_sizes, e)) != NR_OK)
		return rc;
	/* one rank's GEMM rate: on its share of the cpus when there are several */
	gemm_rank = gemm;
	if (a->cluster_out && ranks > 1 &&
	    (rc = hw_bench_sgemm(&per_rank, &gemm_rank, &rank_sizes, e)) != NR_OK)
		return rc;
	if (a->cluster_out &&
	    (rc = hw_cluster_json(&host, ranks, &copy, &gemm_rank,
				  m->ranks > 1 ? &m->allreduce : NULL, &cl, e)) != NR_OK)
		return rc;
	if (a->no_gpu) {
		gpu = gpu_absent("not measured (--no-gpu)");
	} else {
#ifdef NEREUS_CUDA
		struct cuda_lib cuda;
		struct gpub_result *g;
		struct err le;
		char note[sizeof le.msg + 32];

		/* no CUDA runtime here is as no GPU: the document says so */
		if (cuda_lib_load(&cuda, &le) != NR_OK) {
			snprintf(note, sizeof note, "not measured: %s", le.msg);
			gpu = gpu_absent(note);
		} else {
			if (!(g = malloc(sizeof *g)))
				return err_set(e, NR_EIO, "out of memory");
			rc = cuda.gpub_run(o, g, e);
			if (rc == NR_OK)
				gpu = gpu_json(g);
			free(g);
			if (rc != NR_OK)
				return rc;
		}
#else
		gpu = gpu_absent("not measured: built without CUDA");
#endif
	}
	hw = json_object();
	ok = hw && put(hw, "host", hw_host_json(&host)) &&
	     put(hw, "cpu", cpu_json(&copy, &gemm, &gemm_sizes)) && put(hw, "mpi", mpi_json(m));
	if (ok)
		ok = put(hw, "gpu", gpu); /* takes gpu, even when it fails */
	else
		json_decref(gpu);
	doc = json_object();
	ok = ok && doc && put(doc, "nereus", json_integer(NR_FORMAT)) &&
	     put(doc, "kind", json_string("cost")) && put(doc, "hardware", json_incref(hw));
	json_decref(hw);
	if (!ok) {
		json_decref(doc);
		json_decref(cl);
		return err_set(e, NR_EIO, "out of memory");
	}
	progress_done();
	rc = jdoc_write(doc, a->out, JSON_INDENT(2) | JSON_REAL_PRECISION(6), e);
	if (rc == NR_OK && cl)
		rc = jdoc_write(cl, a->cluster_out, JSON_INDENT(2) | JSON_REAL_PRECISION(6), e);
	json_decref(doc);
	json_decref(cl);
	return rc;
}

static int cmd_bench(int argc, char **argv)
{
	struct bench_args a;
	struct hw_opts o;
	struct mpib_result *m;
	struct err e = { 0 };
	int done = 0, rank = 0, size = 1, rc;
	bool mpi = mpib_launched();

	if ((rc = parse_bench(argc, argv, &a, &done)) != NR_OK)
		return rc < 0 ? done : rc;
	if (!mpi && a.ranks >= 2) {
		if ((rc = out_check(a.out, &e)) != NR_OK ||
		    (a.cluster_out && (rc = out_check(a.cluster_out, &e)) != NR_OK))
			return report(&e);
		return close_stdout(respawn(a.ranks, argc, argv));
	}
	if (mpi && (rc = mpib_init(&argc, &argv, &rank, &size, &e)) != NR_OK)
		return report(&e);
	o = (struct hw_opts){ .runs = (int)a.runs, .warmup = 1, .quick = a.quick,
			      .progress = rank == 0 && want_progress() ? progress : NULL };
	m = calloc(1, sizeof *m);
	rc = m ? NR_OK : err_set(&e, NR_EIO, "out of memory");
	if (rank == 0 && rc == NR_OK)
		rc = out_check(a.out, &e);
	if (rank == 0 && rc == NR_OK && a.cluster_out)
		rc = out_check(a.cluster_out, &e);
	if (mpi)
		rc = mpib_agree(rc); /* one rank's failure stops them all */
	if (rc == NR_OK && size > 1)
		rc = mpib_run(&o, m, &e);
	if (rank == 0) {
		if (rc == NR_OK)
			rc = measure_and_write(&a, &o, m, &e);
		progress_done();
		if (rc != NR_OK)
			rc = report(&e);
		if (mpi)
			mpib_release(rc);
	} else {
		int r0 = mpib_hold(); /* every rank pairs rank 0's release */
		rc = rc != NR_OK ? rc : r0;
	}
	free(m);
	if (mpi)
		mpib_finalize();
	return close_stdout(rc);
}

/* --- fit ------------------------------------------------------------------ */

struct fit_args {
	const char *job, *cluster, *prior, *out, *trace;
	struct fit_opts o;
	bool skip_bad;
};

static const struct option fit_options[] = {
	{ "job", required_argument, NULL, OPT_JOB },
	{ "cluster", required_argument, NULL, OPT_CLUSTER },
	{ "prior", required_argument, NULL, OPT_PRIOR },
	{ "half-life", required_argument, NULL, OPT_HALF_LIFE },
	{ "holdout", required_argument, NULL, OPT_HOLDOUT },
	{ "skip-bad", no_argument, NULL, OPT_SKIP_BAD },
	{ "output", required_argument, NULL, 'o' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ NULL, 0, NULL, 0 },
};

/* Parse fit's options as parse_bench does bench's. */
static int parse_fit(int argc, char **argv, struct fit_args *a, int *done)
{
	int c, rc;

	*a = (struct fit_args){ .out = "-" };
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":hVo:", fit_options, NULL)) != -1) {
		switch (c) {
		case OPT_JOB:
			a->job = optarg;
			break;
		case OPT_CLUSTER:
			a->cluster = optarg;
			break;
		case OPT_PRIOR:
			a->prior = optarg;
			break;
		case OPT_HALF_LIFE:
			if ((rc = parse_double("--half-life", optarg, 0, &a->o.half_life)) != NR_OK)
				return rc;
			if (a->o.half_life <= 0)
				return usage_error("option '--half-life' expects a positive number of "
						   "steps, got '%s'", optarg);
			break;
		case OPT_HOLDOUT:
			if ((rc = parse_double("--holdout", optarg, 0, &a->o.holdout)) != NR_OK)
				return rc;
			if (a->o.holdout >= 1)
				return usage_error("option '--holdout' expects a fraction from 0 to "
						   "below 1, got '%s'", optarg);
			break;
		case OPT_SKIP_BAD:
			a->skip_bad = true;
			break;
		case 'o':
			a->out = optarg;
			break;
		case 'h':
			*done = help();
			return -1;
		case 'V':
			*done = close_stdout(print_version());
			return -1;
		default:
			return option_error(c, argv, fit_options);
		}
	}
	if (!a->job)
		return usage_error("missing option '--job'");
	if (!a->cluster)
		return usage_error("missing option '--cluster'");
	if (optind == argc)
		return usage_error("missing the step records to fit (a file, or - for standard "
				   "input)");
	if (optind + 1 < argc)
		return usage_error("unexpected argument '%s'", argv[optind + 1]);
	a->trace = argv[optind];
	if (!*a->out)
		return usage_error("option '-o' needs a file name");
	if (a->prior && strcmp(a->prior, "-") == 0)
		return usage_error("option '--prior' needs a file: it is read twice");
	if ((strcmp(a->job, "-") == 0) + (strcmp(a->cluster, "-") == 0) +
	    (strcmp(a->trace, "-") == 0) > 1)
		return usage_error("only one input can be standard input");
	return NR_OK;
}

/* The first few lines skipped are said on standard error. */
static void skipped(void *arg, const char *msg)
{
	const struct fit_read *rd = arg;

	if (rd->skipped_lines <= 5)
		warnx_("skipping %s", msg);
}

/* The cost document: the prior's hardware record, if any, carried over. */
static json_t *fit_document(const struct fit_args *a, const struct fit_result *res,
			    long lines, long skipped, struct err *e)
{
	json_t *doc = json_object(), *fit = fit_to_json(res, &a->o), *hw = NULL;
	struct jdoc d;

	if (a->prior) {
		if (jdoc_load(&d, a->prior, "cost", e)) {
			json_decref(doc);
			json_decref(fit);
			return NULL;
		}
		hw = json_incref(json_object_get(d.root, "hardware"));
		jdoc_free(&d);
	}
	json_object_set_new(fit, "trace", json_string(strcmp(a->trace, "-") ? a->trace :
						       "<stdin>"));
	json_object_set_new(fit, "lines", json_integer(lines));
	json_object_set_new(fit, "skipped_lines", json_integer(skipped));
	json_object_set_new(fit, "prior", a->prior ? json_string(a->prior) : json_null());
	json_object_set_new(doc, "nereus", json_integer(NR_FORMAT));
	json_object_set_new(doc, "kind", json_string("cost"));
	json_object_set_new(doc, "coefficients", coef_to_json(&res->k));
	if (hw)
		json_object_set_new(doc, "hardware", hw);
	json_object_set_new(doc, "fit", fit);
	return doc;
}

static int cmd_fit(int argc, char **argv)
{
	struct fit_args a;
	struct job *job = malloc(sizeof *job);
	struct cluster *cl = malloc(sizeof *cl);
	struct fit_prior prior;
	struct fit_result *res = malloc(sizeof *res);
	struct fit *f = NULL;
	struct err e = { 0 };
	json_t *doc = NULL;
	struct fit_read rd = { 0 };
	int done = 0, rc;

	if ((rc = parse_fit(argc, argv, &a, &done)) != NR_OK) {
		free(job);
		free(cl);
		free(res);
		return rc < 0 ? done : rc; /* --help and --version closed stdout */
	}
	if (!job || !cl || !res) {
		rc = err_set(&e, NR_EIO, "out of memory");
		goto fail;
	}
	fit_prior_defaults(&prior);
	if ((rc = job_load(job, a.job, &e)) || (rc = cluster_load(cl, a.cluster, &e)))
		goto fail;
	coef_defaults_for(&prior.k, cl->engine);
	if ((a.prior && (rc = fit_prior_load(&prior, a.prior, &e))) ||
	    (rc = out_check(a.out, &e)) || (rc = fit_new(&f, job, cl, &prior, &e)))
		goto fail;
	rd.skip_bad = a.skip_bad;
	rd.skipped = skipped;
	rd.arg = &rd;
	if ((rc = fit_read_trace(f, a.trace, job, cl, &rd, &e)))
		goto fail;
	if (rd.skipped_lines)
		warnx_("skipped %ld line%s of %ld in '%s'", rd.skipped_lines,
		       rd.skipped_lines == 1 ? "" : "s", rd.lines,
		       strcmp(a.trace, "-") ? a.trace : "<stdin>");
	if ((rc = fit_run(f, &a.o, res, &e)))
		goto fail;
	for (int j = 0; j < COEF_FIELDS; j++)
		if (!res->c[j].fitted)
			warnx_("keeping %s = %g from the prior: %s", coef_names[j], res->c[j].value,
			       res->c[j].why);
	for (int j = 0; j < COEF_FIELDS; j++)
		if (*res->c[j].absorbs)
			warnx_("%s = %g takes up the part of %s, kept at its prior: read them "
			       "together (its standard error includes that prior's)", coef_names[j],
			       res->c[j].value, res->c[j].absorbs);
	for (int j = 0; j < COEF_FIELDS; j++)
		if (res->c[j].apart > FIT_CONFLICT)
			warnx_("%s = %g is held by its prior %g (standard error %g), which the "
			       "records contradict: alone they give %g (standard error %g), %.1f "
			       "standard errors apart",
			       coef_names[j], res->c[j].value, res->c[j].prior, res->c[j].prior_se,
			       res->c[j].data, res->c[j].data_se, res->c[j].apart);
	if (!(doc = fit_document(&a, res, rd.lines, rd.skipped_lines, &e))) {
		rc = e.code ? e.code : err_set(&e, NR_EIO, "out of memory");
		goto fail;
	}
	rc = jdoc_write(doc, a.out, JSON_INDENT(2) | JSON_REAL_PRECISION(10), &e);
	if (rc)
		goto fail;
	goto out;
fail:
	rc = report(&e);
out:
	json_decref(doc);
	fit_free(f);
	free(job);
	free(cl);
	free(res);
	return close_stdout(rc);
}

/* --- dispatch ------------------------------------------------------------- */

static const struct subcommand {
	const char *name;
	int (*run)(int argc, char **argv); /* argv[0] is the subcommand */
} subcommands[] = {
	{ "bench", cmd_bench },
	{ "fit", cmd_fit },
	{ NULL, NULL },
};

int main(int argc, char **argv)
{
	if (argc < 2)
		return usage_error("missing subcommand");
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
		return help();
	if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0)
		return close_stdout(print_version());
	if (argv[1][0] == '-')
		return usage_error("unknown option '%s'", argv[1]);
	for (const struct subcommand *s = subcommands; s->name; s++)
		if (strcmp(argv[1], s->name) == 0) {
			set_subcommand(s->name);
			return s->run(argc - 1, argv + 1);
		}
	return usage_error("unknown subcommand '%s'", argv[1]);
}
