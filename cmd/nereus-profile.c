/* nereus-profile: measure the machine (bench), and calibrate the cost
 * model to a running job's step records (fit).  Options → library calls →
 * a cost document.
 *
 * The first argument names a subcommand; each is a row of the table
 * below, with its options in cmd/nereus-profile/NAME.c (git's builtin/
 * style). */
#include <stdio.h>
#include <string.h>

#include "nereus-profile/profile.h"

const char *progname = "nereus-profile";

const char profile_usage[] =
	"usage: nereus-profile bench [-o FILE] [--runs N] [--quick] [--ranks N] [--no-gpu] [--cluster-out FILE]\n"
	"       nereus-profile fit --job FILE --cluster FILE [--prior FILE] [--half-life N]\n"
	"                          [--holdout F] [--skip-bad] [--from ENGINE --plan FILE]\n"
	"                          [-o FILE] TRACE\n"
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
	"standard input), or with --from to the metrics an engine logged, and write\n"
	"them as a cost document.\n"
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
	"  --from ENGINE      TRACE is the metrics verl or openrlhf logged, a step a\n"
	"                     line (verl's file logger; OpenRLHF's logged keys)\n"
	"  --plan FILE        with --from: the plan the run was configured from\n"
	"  -o, --output FILE  write the document to FILE (default: standard output)\n"
	"\n"
	"  -h, --help         show this help and exit\n"
	"  -V, --version      show the version and exit\n"
	"\n"
	"Exit status: 0 document written, 2 bad usage or input, 4 runtime or I/O\n"
	"failure (nothing written).\n";

static int help(void)
{
	fputs(profile_usage, stdout);
	return close_stdout(NR_OK);
}

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
