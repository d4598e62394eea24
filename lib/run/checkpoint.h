/* Where a run saves its state (--save DIR): a store per save, named for
 * the step the run continues at, DIR/step-NNNNNN, never overwritten. */
#ifndef NEREUS_RUN_CHECKPOINT_H
#define NEREUS_RUN_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"

/* DIR/step-NNNNNN, the store of the run continuing at step next. */
void checkpoint_path(char *buf, size_t size, const char *dir, long next);
/* Whether name is a store's, step-NNNNNN exactly as checkpoint_path
 * writes it; its step. */
bool checkpoint_step(const char *name, long *step);
/* The stores a run saving at each every-th step (0: none) and at end
 * writes after step from, up to end, must not be in dir yet (a store is
 * never overwritten): NR_EINPUT naming the first; a dir that is not there
 * yet is fine. */
int checkpoint_check_free(const char *dir, long from, long end, long every, struct err *e);

#endif
