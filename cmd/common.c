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

int usage_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", progname);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry '%s --help' for more information.\n", progname);
	return NR_EINPUT;
}

int print_version(void)
{
	printf("%s %s\n", progname, NEREUS_VERSION);
	return NR_OK;
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
