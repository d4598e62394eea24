/* What a switch between two plans costs the run: the predicted time of the
 * global transition graph's schedule (state/tgraph.h), or, when the graph
 * cannot be built for the pair, plan_move's lower bound.
 *
 * Building the graph takes a fraction of a second at a thousand GPUs (more
 * when memory is tight); the bound takes microseconds, for runs where the
 * controller's own time matters more than the price's accuracy.
 *
 * The controller prices its switches with it, and so does a run that
 * follows a plan file. */
#ifndef NEREUS_CHARGE_H
#define NEREUS_CHARGE_H

#include <stdbool.h>

#include "plan/plan.h"

/* Seconds to switch from a to b under v: with graph, the transition
 * graph's, else (or when it cannot be built) the lower bound, and then
 * *bound (may be NULL) is set. */
double charge_transition(const struct env *v, const struct plan *a, const struct plan *b,
			 bool graph, bool *bound);

#endif
