/* nereus-transition live: the switch carried out on state held by MPI
 * ranks, one per GPU, or by one process driving the local GPUs over NCCL. */
#include <stdio.h>
#include <string.h>

#include "doc/costdoc.h"
#include "mpi/live.h"
#include "mpi/start.h"
#ifdef NEREUS_NCCL
#include "cuda/cudalib.h"
#endif
#include "transition.h"

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

struct live_args {
	const char *from, *to, *job, *cluster, *state, *verify;
	bool nccl;
};

/* OPTIONS_DONE: help or version shown; else an exit status. */
static int live_parse(int argc, char **argv, struct live_args *a)
{
	int c, rc;

	memset(a, 0, sizeof *a);
	while ((c = getopt_long(argc, argv, ":hV", live_options, NULL)) != -1) {
		switch (c) {
		case OPT_FROM: a->from = optarg; break;
		case OPT_TO: a->to = optarg; break;
		case OPT_JOB: a->job = optarg; break;
		case OPT_CLUSTER: a->cluster = optarg; break;
		case OPT_STATE: a->state = optarg; break;
		case OPT_VERIFY: a->verify = optarg; break;
		case OPT_NCCL: a->nccl = true; break;
		default: return option_tail(c, argc, argv, live_options, live_usage);
		}
	}
	if ((rc = option_tail(-1, argc, argv, live_options, live_usage)))
		return rc;
	if (!a->from || !a->to || !a->job || !a->cluster || !a->state)
		return usage_error("live needs --from, --to, --job, --cluster and --state");
	/* every rank reads the inputs: standard input reaches only one */
	if (is_stdin(a->from) || is_stdin(a->to) || is_stdin(a->job) || is_stdin(a->cluster))
		return usage_error("live reads its inputs on every rank: name files, not -");
#ifndef NEREUS_NCCL
	if (a->nccl)
		return usage_error("--nccl: this build has no NCCL (build where nvcc and NCCL "
				   "are found)");
#endif
	return NR_OK;
}

/* MPI's start takes the command line (argc, argv). */
static int live_run(const struct live_args *a, int *argc, char ***argv)
{
	static struct job job;
	static struct cluster cl;
	static struct plan from, to;
	struct coef k;
	struct env v = { &job, &cl, &k };
	struct exec_stats st = { 0 };
	struct err e = { 0 };
	int rc, rank = 0, size = 1;
#ifdef NEREUS_NCCL
	struct cuda_lib cuda;

	if (a->nccl && (rc = cuda_lib_load(&cuda, &e)))
		return report(&e);
#endif
	if (!a->nccl && (rc = mpi_begin(argc, argv, &rank, &size, &e))) {
		warnx_("cannot start MPI");
		return rc;
	}
	cost_coef_defaults(&k);
	if (!(rc = job_load(&job, a->job, &e)) && !(rc = cluster_load(&cl, a->cluster, &e)) &&
	    !(rc = plan_load(&v, &from, a->from, &e)) && !(rc = plan_load(&v, &to, a->to, &e))) {
#ifdef NEREUS_NCCL
		if (a->nccl)
			rc = cuda.live_reshard_nccl(&v, &from, &to, a->state, a->verify, &st, &e);
		else
#endif
			rc = live_reshard(&v, &from, &to, a->state, a->verify, &st, &e);
	}
	/* the inputs and the outcome are the same on every rank: one says so */
	if (rank == 0 && rc)
		report(&e);
	else if (rank == 0)
		printf("%d ranks, %d rounds, %.3f s, %.1f MiB sent, %ld pieces verified\n",
		       st.ranks, st.rounds, st.seconds, (double)st.bytes_sent / (1 << 20),
		       st.pieces_verified);
	if (!a->nccl)
		mpi_end();
	return rc;
}

int cmd_live(int argc, char **argv)
{
	struct live_args a;
	int rc = live_parse(argc, argv, &a);

	if (rc == OPTIONS_DONE)
		return NR_OK;
	return rc ? rc : live_run(&a, &argc, &argv);
}
