/* The switch decision.
 *
 * A switch pays when the step time it saves, over the steps left, exceeds
 * what the transition costs.  A current plan that no longer fits forces a
 * switch. */
#ifndef NEREUS_DECIDE_H
#define NEREUS_DECIDE_H

#include "plan/search.h"

struct decision {
	bool do_switch;
	bool forced;            /* the current plan no longer fits */
	double current_step_s;  /* current plan's predicted step time now */
	double next_step_s;
	double gain_s;          /* per step */
	double transition_s;
	bool graph;             /* transition_s is the transition graph's prediction */
	double move_bytes;
	double break_even_steps;
	long remaining_steps;   /* < 0: not given (the run goes on) */
	double min_gain;        /* relative gain below which a switch is noise */
	char reason[640];
};

/* Decide whether to switch from cur to next.  min_gain is the hysteresis:
 * the fraction of the current step time a switch must save. */
void plan_decide(const struct env *v, const struct plan *cur, const struct plan *next,
		 long remaining_steps, double min_gain, struct decision *d);
/* The same with the transition's predicted seconds from its graph (which
 * lives downstream, in state/tgraph.h); a negative value falls back to the
 * bytes-over-bandwidth lower bound. */
void plan_decide_with(const struct env *v, const struct plan *cur, const struct plan *next,
		      long remaining_steps, double min_gain, double transition_s,
		      struct decision *d);
json_t *decision_to_json(const struct decision *d);

#endif
