/* nereus-transition: the global transition graph between two plans, and
 * its memory-ordered schedule; and the switch carried out on real state:
 * state stores resharded (apply), made from and written back to Hugging
 * Face checkpoints (import, export), or state held by MPI ranks (live).
 *
 * The first argument may name a subcommand; each is a row of the table
 * below, with its own options and usage in cmd/nereus-transition/NAME.c
 * (git's builtin/ style).  Without one, the tool builds the graph (graph
 * mode, graph.c). */
#include <string.h>

#include "nereus-transition/transition.h"

const char *progname = "nereus-transition";

/* A row per subcommand: its name (argv[1]) and its main, which gets argv
 * from the subcommand's name on.  The row without a name is graph mode,
 * run when argv[1] names no subcommand. */
static const struct subcommand {
	const char *name;
	int (*main)(int argc, char **argv);
} subcommands[] = {
	{ "apply", cmd_apply },
	{ "import", cmd_import },
	{ "export", cmd_export },
	{ "live", cmd_live },
	{ NULL, cmd_graph },
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
