/* nereus-run init: a state store of the job's models, randomly
 * initialised from a seed, for the built-in engine to train. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "engine/trainer.h"
#include "subcommands.h"

static const char init_usage[] =
	"usage: nereus-run init --job FILE [--seed S] -o STORE\n"
	"\n"
	"  --job FILE          the job document: its models are made\n"
	"  --seed S            the seed of every weight drawn (default: the job's data.seed)\n"
	"  -o, --output STORE  the store to make (a directory, or a .tar or .tar.zst archive);\n"
	"                      it must not exist\n"
	"  -h, --help          show this help\n"
	"  -V, --version       show the version\n"
	"\n"
	"Exit status: 0 the store was made, 2 bad usage or input, 4 runtime or I/O failure.\n";

int cmd_init(int argc, char **argv)
{
	static const struct option options[] = {
		{ "job", required_argument, NULL, 'j' },
		{ "seed", required_argument, NULL, 's' },
		{ "output", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	static struct job job;
	const char *jobfile = NULL, *out = NULL;
	long seed = -1;
	struct err e = { 0 };
	int c, rc;

	set_subcommand("init");
	while ((c = getopt_long(argc, argv, ":o:hV", options, NULL)) != -1) {
		switch (c) {
		case 'j': jobfile = optarg; break;
		case 'o': out = optarg; break;
		case 's':
			if ((rc = parse_long("--seed", optarg, 0, 1L << 62, &seed)))
				return rc;
			break;
		default:
			rc = option_tail(c, argc, argv, options, init_usage);
			return rc == OPTIONS_DONE ? NR_OK : rc;
		}
	}
	if ((rc = option_tail(-1, argc, argv, options, init_usage)))
		return rc;
	if (!jobfile || !out)
		return usage_error("--job and -o are required");
	if ((rc = job_load(&job, jobfile, &e)) ||
	    (rc = trainer_init_store(&job, seed >= 0 ? (uint64_t)seed : job.data.seed, NULL, out,
				     &e)))
		return report(&e);
	return NR_OK;
}
