/* TensorBoard event files, which nereus-run --tensorboard DIR writes as the
 * run goes, so that TensorBoard (or anything that reads its format) plots
 * the run beside verl's and OpenRLHF's.  This module owns that format, as
 * written here with no library: TFRecord framing (a little-endian uint64
 * length, its masked CRC-32C, the data, the data's masked CRC-32C) around
 * Event protobuf messages (wall_time, step, and a file_version first, then
 * a Summary of simple_value scalars a step), a small encoder of the
 * protobuf wire format; and which scalars a step gives (nereus-run(1),
 * OUTPUT, TensorBoard events). */
#ifndef NEREUS_TBLOG_H
#define NEREUS_TBLOG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/err.h"
#include "doc/steprec.h"
#include "plan/plan.h"

struct tblog {
	FILE *f;
	char *path; /* DIR/events.out.tfevents.TIME.HOST */
};

/* What a step's scalars take beside its record: the plan it ran, whose
 * times are the predicted ones (NULL, or infeasible: none), and the
 * transitions of the run so far, this step's included. */
struct tblog_step {
	const struct step_record *rec;
	const struct plan *plan;
	long transitions;
	double wall_time; /* seconds since the epoch */
};

/* Make DIR when missing and open a new event file in it named for
 * wall_time's second and this host, its first event the file version. */
int tblog_open(struct tblog *t, const char *dir, double wall_time, struct err *e);
/* One event of the step's scalars, flushed. */
int tblog_write(struct tblog *t, const struct tblog_step *s, struct err *e);
/* Close the file (NR_EIO when what was buffered cannot be written). */
int tblog_close(struct tblog *t, struct err *e);

/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of n bytes, and
 * the mask TFRecord applies to it. */
uint32_t tblog_crc32c(const void *data, size_t n);
uint32_t tblog_mask(uint32_t crc);

#endif
