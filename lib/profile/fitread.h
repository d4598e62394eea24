/* Reading a trace of step records (nereus-steps(5)) into a fit, line by
 * line, as nereus-profile fit does.  Each line is parsed and checked
 * against the job and cluster (steprec_parse, or the reader's own parse:
 * another engine's metrics made records); then against what the trace
 * can hold at all:
 *
 * - steps in order, each once: a step number at or below the one before
 *   it is refused, naming both lines (the earlier line with the same
 *   number, or the line of the higher step it follows);
 * - no peak above the GPU's memory by more than the cluster's headroom
 *   fraction (a measurement cannot exceed the device);
 * - no prompt longer than the job's prompt_len (the memory model sizes
 *   the plan for that length: the record is not of this job).
 *
 * A malformed line, or a record refused by these checks, stops the read
 * unless skip_bad, which skips and counts it; a record with values no step
 * can have (a time that is not positive, a plan the job does not run)
 * always stops it.  A trace with no record names the file. */
#ifndef NEREUS_FITREAD_H
#define NEREUS_FITREAD_H

#include <stdbool.h>
#include <stddef.h>

#include "profile/fit.h"


struct fit_read {
	bool skip_bad;
	/* told each line skipped (its message), may be NULL */
	void (*skipped)(void *arg, const char *msg);
	void *arg;
	/* reads a line into a record as steprec_parse does, with the job and
	 * cluster parse_arg holds (foreign_parse, another engine's metrics);
	 * NULL: the lines are step records.  Called on several threads at
	 * once. */
	int (*parse)(const void *parse_arg, const char *file, long line, const char *text,
		     size_t len, struct step_record *r, bool *malformed, struct err *e);
	const void *parse_arg;
	/* what was read */
	long lines, records, skipped_lines;
};

/* Read file (- for standard input) into f.  NR_OK; NR_EINPUT naming the
 * file, line and what was wrong; NR_EIO when it cannot be read. */
int fit_read_trace(struct fit *f, const char *file, const struct job *job,
		   const struct cluster *cl, struct fit_read *rd, struct err *e);

#endif
