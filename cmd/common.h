/* The tools' shared front end, as bsdtar's lafe: program name, error
 * printing, usage errors, and closing standard output with a check, so the
 * four binaries behave alike. */
#ifndef NEREUS_CMD_COMMON_H
#define NEREUS_CMD_COMMON_H

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>

#include "common/err.h"

extern const char *progname;

/* Print "prog: message" to stderr. */
void warnx_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Print the library's error, prefixed with the program name; return its code. */
int report(const struct err *e);
/* A usage error: message, a hint to --help, exit status NR_EINPUT. */
int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The subcommand that runs (argv[1]), set by main: usage errors then point
 * to its help, "Try 'nereus-transition apply --help'". */
void set_subcommand(const char *name);
/* The usage error for what getopt_long returned as c, '?' or ':', when
 * opterr is 0 and the option string starts with ':' (so that getopt says
 * nothing itself): an unknown or ambiguous option, a value given to an
 * option that takes none, or a missing value; longopts is the table. */
int option_error(int c, char *const argv[], const struct option *longopts);
/* Print the version line and return 0. */
int print_version(void);
/* The end every option loop shares.  For what getopt_long returned as c
 * and the loop does not take itself: -h prints usage to standard output
 * and -V the version, both OPTIONS_DONE (the command is over, exit 0);
 * anything else is option_error's usage error.  With c = -1, after the
 * loop: NR_OK, or a usage error for the first operand left over.  So a
 * loop ends
 *     default: return option_tail(c, argc, argv, longopts, usage);
 * and is followed by
 *     if ((rc = option_tail(-1, argc, argv, longopts, usage))) return rc;
 * in a parse function whose caller exits 0 on OPTIONS_DONE. */
#define OPTIONS_DONE (-1)
int option_tail(int c, int argc, char *const argv[], const struct option *longopts,
		const char *usage);
/* Flush and close stdout; a failure (full disk, closed pipe) is NR_EIO. */
int close_stdout(int rc);
/* Whether progress output should be shown (stderr is a terminal). */
bool show_progress(void);

/* The index of arg among names (NULL-terminated); else a usage error,
 * "unknown WHAT 'ARG' (expected a, b or c)". */
int parse_choice(const char *what, const char *arg, const char *const names[], int *out);
/* Parse a positive int / non-negative double option value for OPT. */
int parse_long(const char *opt, const char *arg, long min, long max, long *out);
int parse_double(const char *opt, const char *arg, double min, double *out);

#endif
