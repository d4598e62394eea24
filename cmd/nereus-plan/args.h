/* nereus-plan's options: what parse_args leaves for the main to run. */
#ifndef NEREUS_PLAN_ARGS_H
#define NEREUS_PLAN_ARGS_H

#include <stdbool.h>

#include "plan/engines.h"

struct args {
	const char *job, *cluster, *cost, *current, *out, *svg;
	const char *pins[64];
	int npins;
	long remaining, max_staleness;
	double min_gain;
	int layout;
	enum target space;
	enum format { FORMAT_JSON, FORMAT_TABLE, FORMAT_VERL, FORMAT_OPENRLHF } format;
	bool exhaustive, stats;
};

/* Parse nereus-plan's command line into a: NR_OK, a usage error (said), or
 * OPTIONS_DONE when -h or -V was answered. */
int parse_args(int argc, char **argv, struct args *a);

#endif
