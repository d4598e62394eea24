/* nereus-run: run a job step by step on an engine (the simulator, or the
 * built-in engine that trains it on this process), changing plans as the
 * controller decides or as a plan file another process replaces says; and
 * the subcommands: `compare`, the policies side by side on one trace, and
 * the built-in engine's `init`, `generate` and `score`.
 *
 * The first argument may name a subcommand; each is a row of the table
 * below, in cmd/nereus-run/ (git's builtin/ style).  Without one, the tool
 * runs (run.c, its options in args.c). */
#include <string.h>

#include "nereus-run/subcommands.h"

const char *progname = "nereus-run";

/* A row per subcommand: its name (argv[1]) and its main, which gets argv
 * from the subcommand's name on.  The row without a name is the run, which
 * gets the whole argv when argv[1] names no subcommand (an operand it
 * refuses as such). */
static const struct subcommand {
	const char *name;
	int (*main)(int argc, char **argv);
} subcommands[] = {
	{ "init", cmd_init },
	{ "generate", cmd_generate },
	{ "score", cmd_score },
	{ "compare", cmd_compare },
	{ NULL, cmd_run },
};

int main(int argc, char **argv)
{
	const struct subcommand *run = NULL;
	size_t n = sizeof subcommands / sizeof subcommands[0];
	int rc;

	opterr = 0; /* option_error says it, once */
	for (size_t i = 0; i < n && !run && argc > 1; i++)
		if (subcommands[i].name && strcmp(argv[1], subcommands[i].name) == 0)
			run = &subcommands[i];
	if (run) {
		set_subcommand(run->name);
		rc = run->main(argc - 1, argv + 1);
	} else {
		rc = cmd_run(argc, argv);
	}
	rc = close_stdout(rc);
	die_of_stop_signal();
	return rc;
}
