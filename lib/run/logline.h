/* The line nereus-run --log-every K prints on standard error for people
 * following a run, one every K steps, in the manner of verl's console
 * logger: "step:N - name:value - ...", the step as its record says it (its
 * status when it did not run, its time, reward, KL and response length,
 * the GPUs up) and the plan it ran, each model's layout.  This module owns
 * the line's format; nereus-run(1), OUTPUT, specifies it. */
#ifndef NEREUS_LOGLINE_H
#define NEREUS_LOGLINE_H

#include <stddef.h>

#include "doc/steprec.h"

/* Record r's line, without a newline, into buf of size bytes (cut short,
 * still terminated, when it does not fit). */
void logline_format(const struct step_record *r, char *buf, size_t size);

#endif
