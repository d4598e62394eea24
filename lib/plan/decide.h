/* The switch decision, and what a switch costs.
 *
 * A switch pays when the step time it saves, over the steps left, exceeds
 * what the transition costs: moving the state between GPUs (the transition
 * graph's schedule, or plan_move's bound), reading what no GPU holds any
 * more from the state store at the store's shared bandwidth, creating the
 * communicators of the new groups (the job's own communicator anew when its
 * GPUs changed, split from it otherwise), and re-creating the generation
 * engines when their TP changes or they start on GPUs that ran none.  The
 * coefficients are the cost document's (nereus-cost(5), SWITCHES).
 * Hysteresis (min_gain) keeps small gains from churning; payback before the
 * run ends is what lets a switch through.  A current plan that no longer
 * fits forces a switch. */
#ifndef NEREUS_DECIDE_H
#define NEREUS_DECIDE_H

#include "plan/search.h"

struct switch_cost {
	double move_s;       /* moving state: the graph's schedule, or plan_move's bound */
	bool graph;          /* move_s is the transition graph's */
	double move_bytes;   /* plan_move's bytes that must arrive */
	double store_bytes;  /* of what moves, read from the state store (graph only) */
	double store_s;      /* what reading them at store_gbps adds beyond move_s */
	bool world;          /* the job's GPUs changed: its communicator is created anew */
	int groups;          /* communicators the busiest GPU creates */
	double comm_s;
	bool engines;        /* the generation engines are created anew */
	double engine_s;
	double total_s;
};

/* Price a switch from a to b: move_s and store_bytes from the transition
 * graph, or move_s < 0 for plan_move's bound (no store reads known). */
void plan_switch_cost(const struct env *v, const struct plan *a, const struct plan *b,
		 double move_s, double store_bytes, struct switch_cost *c);
/* The part of switch_cost that depends on the plans' shapes alone: the
 * communicators and engines b needs that a does not have, into c (whose
 * move_s and store_s stay; total_s is made again).  A lower bound of a
 * switch's cost, for searches that price few of many. */
void plan_switch_fixed(const struct env *v, const struct plan *a, const struct plan *b,
		  struct switch_cost *c);
/* Add c's seconds, bytes and groups to sum's (a run's transitions). */
void plan_switch_cost_add(struct switch_cost *sum, const struct switch_cost *c);
json_t *plan_switch_cost_to_json(const struct switch_cost *c);

struct decision {
	bool do_switch;
	bool forced;            /* the current plan no longer fits */
	double current_step_s;  /* current plan's predicted step time now */
	double next_step_s;
	double gain_s;          /* per step */
	double transition_s;    /* cost.total_s */
	struct switch_cost cost;
	double break_even_steps;
	long remaining_steps;   /* < 0: not given (the run goes on) */
	double min_gain;        /* relative gain below which a switch is noise */
	char reason[640];
};

/* Decide whether to switch from cur to next, the switch priced with
 * plan_move's bound.  min_gain is the hysteresis: the fraction of the
 * current step time a switch must save. */
void plan_decide(const struct env *v, const struct plan *cur, const struct plan *next,
		 long remaining_steps, double min_gain, struct decision *d);
/* The same at a price already made (switch_cost with the graph's figures,
 * which live downstream, in state/tgraph.h). */
void plan_decide_with(const struct env *v, const struct plan *cur, const struct plan *next,
		      long remaining_steps, double min_gain, const struct switch_cost *price,
		      struct decision *d);
json_t *plan_decision_to_json(const struct decision *d);

#endif
