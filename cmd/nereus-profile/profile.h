/* What nereus-profile's subcommands share (git's builtin/ style: each in
 * a file of its own, with its options table, parse and run; the usage,
 * the table of them and main in cmd/nereus-profile.c). */
#ifndef NEREUS_PROFILE_CMD_H
#define NEREUS_PROFILE_CMD_H

#include "../common.h"

/* The whole tool's usage: every subcommand's -h prints it. */
extern const char profile_usage[];

/* Each subcommand's main; argv[0] is the subcommand. */
int cmd_bench(int argc, char **argv);
int cmd_fit(int argc, char **argv);

/* Run this very command again as N ranks under mpirun; its rank 0 writes
 * the document.  Returns the exit status to use (respawn.c). */
int bench_respawn(long ranks, int argc, char **argv);

#endif
