/* Process groups for the engine's collectives: the table the model calls
 * where Megatron-LM communicates (ENGINE.md), so tensor, pipeline and data
 * parallelism plug in under the math without changing it.
 *
 * A group has size ranks; this process is rank.  Every call is collective
 * over the group except send and recv, which pair two ranks of a pipeline
 * group.  comm_self() is the group of one process: every call returns at
 * once and leaves the buffer as it is. */
#ifndef NEREUS_ENGINE_COMM_H
#define NEREUS_ENGINE_COMM_H

#include <stddef.h>

#include "common/err.h"

struct comm {
	int size, rank;
	void *ctx;
	/* buf[i] becomes the sum (max) of buf[i] over the group's ranks, the
	 * same on every rank (a fixed reduction order, so reruns agree). */
	int (*allreduce_sum)(void *ctx, float *buf, size_t n, struct err *e);
	int (*allreduce_max)(void *ctx, float *buf, size_t n, struct err *e);
	/* point-to-point for pipeline stages, within the pipeline group */
	int (*send)(void *ctx, int to, const float *buf, size_t n, struct err *e);
	int (*recv)(void *ctx, int from, float *buf, size_t n, struct err *e);
	/* Agree on rc: NR_OK when it is NR_OK on every member, else every
	 * member takes the code and message of the lowest member that failed
	 * (into e) and returns the code. */
	int (*agree)(void *ctx, int rc, struct err *e);
	/* n bytes of buf as group rank root holds them, on every member. */
	int (*bcast)(void *ctx, int root, void *buf, size_t n, struct err *e);
};

/* The group of this process alone. */
const struct comm *comm_self(void);

#endif
