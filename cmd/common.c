/* Shared front end for the nereus-* tools. */
#include "common.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void warnx_(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", progname);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int report(const struct err *e)
{
	fprintf(stderr, "%s: %s\n", progname, e->msg);
	return e->code ? e->code : NR_EIO;
}

/* The front end's one piece of state: set once, by main, before options
 * are parsed. */
static const char *subcommand;

void set_subcommand(const char *name)
{
	subcommand = name;
}

int usage_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", progname);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry '%s%s%s --help' for more information.\n", progname,
		subcommand ? " " : "", subcommand ? subcommand : "");
	return NR_EINPUT;
}

int option_error(int c, char *const argv[], const struct option *longopts)
{
	const char *word = argv[optind - 1], *eq;
	char matches[256];
	size_t len, n = 0;
	int k = 0;

	/* getopt has passed the word of a long option or of a short one that
	 * ends it; a short one inside a group is told by optopt alone */
	if (strncmp(word, "--", 2) != 0 || (optopt && c == '?' && !strchr(word, '=')))
		return usage_error(c == ':' ? "option '-%c' needs a value" : "unknown option '-%c'",
				   optopt);
	if (c == ':')
		return usage_error("option '%s' needs a value", word);
	eq = strchr(word, '=');
	len = eq ? (size_t)(eq - word) : strlen(word);
	if (optopt)
		return usage_error("option '%.*s' takes no value", (int)len, word);
	matches[0] = '\0';
	for (const struct option *o = longopts; o->name; o++)
		if (strncmp(o->name, word + 2, len - 2) == 0 && n < sizeof matches) {
			n += (size_t)snprintf(matches + n, sizeof matches - n, "%s--%s",
					      k++ ? ", " : "", o->name);
		}
	if (k > 1)
		return usage_error("option '%.*s' is ambiguous (%s)", (int)len, word, matches);
	return usage_error("unknown option '%.*s'", (int)len, word);
}

int print_version(void)
{
	printf("%s %s\n", progname, NEREUS_VERSION);
	return NR_OK;
}

int option_tail(int c, int argc, char *const argv[], const struct option *longopts,
		const char *usage)
{
	switch (c) {
	case -1:
		if (optind < argc)
			return usage_error("unexpected argument '%s'", argv[optind]);
		return NR_OK;
	case 'h':
		fputs(usage, stdout);
		return OPTIONS_DONE;
	case 'V':
		print_version();
		return OPTIONS_DONE;
	default:
		return option_error(c, argv, longopts);
	}
}

int close_stdout(int rc)
{
	if (fflush(stdout) != 0 || ferror(stdout) || fclose(stdout) != 0) {
		if (rc == NR_OK || rc == NR_NO) {
			warnx_("cannot write standard output: %s", strerror(errno));
			return NR_EIO;
		}
	}
	return rc;
}

bool show_progress(void)
{
	return isatty(STDERR_FILENO);
}

int parse_choice(const char *what, const char *arg, const char *const names[], int *out)
{
	char expected[256];
	size_t n = 0;
	int k;

	for (k = 0; names[k]; k++)
		if (strcmp(arg, names[k]) == 0) {
			*out = k;
			return NR_OK;
		}
	expected[0] = '\0';
	for (int i = 0; i < k && n < sizeof expected; i++)
		n += (size_t)snprintf(expected + n, sizeof expected - n, "%s%s",
				      i == 0 ? "" : i + 1 == k ? " or " : ", ", names[i]);
	return usage_error("unknown %s '%s' (expected %s)", what, arg, expected);
}

int parse_long(const char *opt, const char *arg, long min, long max, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(arg, &end, 10);
	if (errno || end == arg || *end || v < min || v > max)
		return usage_error("option '%s' expects an integer from %ld to %ld, got '%s'",
				   opt, min, max, arg);
	*out = v;
	return NR_OK;
}

int parse_double(const char *opt, const char *arg, double min, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(arg, &end);
	if (errno || end == arg || *end || !isfinite(v) || v < min)
		return usage_error("option '%s' expects a number of at least %g, got '%s'",
				   opt, min, arg);
	*out = v;
	return NR_OK;
}
