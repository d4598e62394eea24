/* What a switch between two plans costs the run (plan/decide.h's
 * switch_cost): moving the state, priced by the predicted time of the
 * global transition graph's schedule (state/tgraph.h) or, when the graph
 * cannot be built for the pair, by plan_move's lower bound; what the store
 * reads add at the store's shared bandwidth; communicators and engines.
 *
 * Building the graph takes a fraction of a second at a thousand GPUs (more
 * when memory is tight); the bound takes microseconds, for runs where the
 * controller's own time matters more than the price's accuracy.  A struct
 * charge remembers the prices it made, keyed on everything the graph
 * depends on (both plans' pools, configurations and GPUs, the GPUs up, the
 * headroom, the coefficients), so a switch weighed again at a later
 * boundary costs a lookup.  It remembers many: compare's oracle weighs
 * the same few pairs of plans in every stretch of a trace where the GPUs
 * are the same, thousands of times in all; beyond CHARGE_MEMO prices or
 * CHARGE_MEMO_BYTES of keys the least recently used goes.
 *
 * The controller prices its switches with it, a run that follows a plan
 * file too, and so does compare's oracle. */
#ifndef NEREUS_CHARGE_H
#define NEREUS_CHARGE_H

#include <stdbool.h>
#include <stddef.h>

#include "plan/decide.h"
#include "run/memo.h"

#define CHARGE_MEMO 4096
#define CHARGE_MEMO_BYTES ((size_t)64 << 20)

struct charge {
	bool graph;          /* price with the transition graph, else the bound */
	struct memo memo;    /* of struct switch_cost */
	long priced;         /* prices asked for */
	long built;          /* of them, graphs built (the rest remembered or bound) */
	long by_bound;       /* of them, by the lower bound */
	double seconds;      /* spent pricing */
	double cpu_seconds;  /* of processor time (the machine may be shared) */
};

void charge_init(struct charge *ch, bool graph);
void charge_free(struct charge *ch);

/* The cost of switching from a to b under v, remembered.  NR_OK, or NR_EIO
 * when out of memory. */
int charge_price(struct charge *ch, const struct env *v, const struct plan *a,
		 const struct plan *b, struct switch_cost *c, struct err *e);

/* The same, once, without remembering. */
void charge_transition(const struct env *v, const struct plan *a, const struct plan *b,
		       bool graph, struct switch_cost *c);
/* The transition graph's price alone: NR_OK, or tgraph_build's error when
 * the graph cannot be built for the pair (c is then not set). */
int charge_graph(const struct env *v, const struct plan *a, const struct plan *b,
		 struct switch_cost *c, struct err *e);
/* Whether to switch from cur to next, the switch priced by the graph from
 * where cur put the state (plan_decide_with); charge_graph's errors. */
int charge_decide(const struct env *v, const struct plan *cur, const struct plan *next,
		  long remaining_steps, double min_gain, struct decision *d, struct err *e);

#endif
