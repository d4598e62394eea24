/* nereus-profile bench: this machine measured (lib/profile/hwdoc.h), as
 * one process or as ranks under mpirun (respawned so for --ranks), and the
 * cost document's hardware section written by rank 0. */
#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"
#include "mpi/mpibench.h"
#include "mpi/start.h"
#include "profile/hwdoc.h"
#ifdef NEREUS_CUDA
#include "cuda/cudalib.h"
#endif

#include "profile.h"

struct bench_args {
	const char *out, *cluster_out;
	long runs;
	bool quick;
	long ranks;
	bool no_gpu;
};

enum { OPT_RUNS = 256, OPT_QUICK, OPT_RANKS, OPT_NO_GPU, OPT_CLUSTER_OUT };

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

/* Parse bench's options; NR_OK, a usage error, or OPTIONS_DONE when -h or
 * -V was answered. */
static int parse_bench(int argc, char **argv, struct bench_args *a)
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
		default:
			return option_tail(c, argc, argv, bench_options, profile_usage);
		}
	}
	if ((rc = option_tail(-1, argc, argv, bench_options, profile_usage)))
		return rc;
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

static bool progress_shown;

/* Progress goes to a terminal only; ranks started by bench_respawn learn from
 * their parent whether it has one. */
static bool want_progress(void)
{
	const char *v = getenv("NEREUS_PROFILE_PROGRESS");

	return show_progress() || (mpi_launched() && v && strcmp(v, "1") == 0);
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

/* The GPU part of the document: measured, or why not. */
static int gpu_part(const struct bench_args *a, const struct hw_opts *o, json_t **gpu,
		    struct err *e)
{
	if (a->no_gpu) {
		*gpu = hw_gpu_absent("not measured (--no-gpu)");
	} else {
#ifdef NEREUS_CUDA
		struct cuda_lib cuda;
		struct hw_gpu *g;
		struct err le;
		char note[sizeof le.msg + 32];
		int rc;

		/* no CUDA runtime here is as no GPU: the document says so */
		if (cuda_lib_load(&cuda, &le) != NR_OK) {
			snprintf(note, sizeof note, "not measured: %s", le.msg);
			*gpu = hw_gpu_absent(note);
		} else {
			if (!(g = malloc(sizeof *g)))
				return err_oom(e);
			rc = cuda.gpub_run(o, g, e);
			if (rc == NR_OK)
				*gpu = hw_gpu_json(g);
			free(g);
			if (rc != NR_OK)
				return rc;
		}
#else
		(void)o;
		(void)e;
		*gpu = hw_gpu_absent("not measured: built without CUDA");
#endif
	}
	return NR_OK;
}

/* Measure on this process (rank 0) and write the document. */
static int measure_and_write(const struct bench_args *a, const struct hw_opts *o,
			     const struct hw_mpi *m, struct err *e)
{
	struct hw_cpu c;
	json_t *doc, *gpu = NULL, *cl = NULL;
	int rc, ranks = m->ranks > 1 ? m->ranks : (int)a->ranks; /* mpirun's, or --ranks */

	if ((rc = hw_measure_cpu(o, ranks, a->cluster_out != NULL, &c, e)) != NR_OK)
		return rc;
	if (a->cluster_out &&
	    (rc = hw_cluster_json(&c.host, ranks, &c.copy, &c.gemm_rank,
				  m->ranks > 1 ? &m->allreduce : NULL, &cl, e)) != NR_OK)
		return rc;
	if ((rc = gpu_part(a, o, &gpu, e)) != NR_OK) {
		json_decref(cl);
		return rc;
	}
	if (!(doc = hw_cost_json(&c, m, gpu))) {
		json_decref(cl);
		return err_oom(e);
	}
	progress_done();
	rc = jdoc_write(doc, a->out, JSON_INDENT(2) | JSON_REAL_PRECISION(6), e);
	if (rc == NR_OK && cl)
		rc = jdoc_write(cl, a->cluster_out, JSON_INDENT(2) | JSON_REAL_PRECISION(6), e);
	json_decref(doc);
	json_decref(cl);
	return rc;
}

int cmd_bench(int argc, char **argv)
{
	struct bench_args a;
	struct hw_opts o;
	struct hw_mpi *m;
	struct err e = { 0 };
	int rank = 0, size = 1, rc;
	bool mpi = mpi_launched();

	if ((rc = parse_bench(argc, argv, &a)) != NR_OK)
		return rc == OPTIONS_DONE ? close_stdout(NR_OK) : rc;
	if (!mpi && a.ranks >= 2) {
		if ((rc = out_check(a.out, &e)) != NR_OK ||
		    (a.cluster_out && (rc = out_check(a.cluster_out, &e)) != NR_OK))
			return report(&e);
		return close_stdout(bench_respawn(a.ranks, argc, argv));
	}
	if (mpi && (rc = mpi_begin(&argc, &argv, &rank, &size, &e)) != NR_OK)
		return report(&e);
	o = (struct hw_opts){ .runs = (int)a.runs, .warmup = 1, .quick = a.quick,
			      .progress = rank == 0 && want_progress() ? progress : NULL };
	m = calloc(1, sizeof *m);
	rc = m ? NR_OK : err_oom(&e);
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
		mpi_end();
	return close_stdout(rc);
}
