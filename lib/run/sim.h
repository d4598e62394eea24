/* The simulation engine: a cluster this machine cannot hold, modelled.
 *
 * A step's stage times are the cost model's (plan_evaluate of the plan
 * running, against the cluster and job as the events have made them, the
 * response lengths of that step included) times seeded noise, each pool
 * paced by its slowest GPU; memory is checked every step, and a plan that
 * does not fit fails the step as an out-of-memory error would.  The noise
 * of step s and model-stage i is a function of (seed, s, i) alone, so a
 * run replays exactly from any step. */
#ifndef NEREUS_SIM_H
#define NEREUS_SIM_H

#include <stdint.h>

#include "run/engine.h"

struct sim {
	struct cond c;            /* the conditions now */
	struct coef k;            /* the cost model the simulated cluster follows */
	const struct events *ev;
	size_t next_ev;           /* the first event not yet applied */
	uint64_t seed;
	double noise;             /* relative standard deviation of a stage's time */
	struct plan eval;         /* scratch: the plan running, evaluated now */
};

/* s is large (conditions and a plan): allocate it statically or on the
 * heap.  ev may be NULL (nothing happens). */
void sim_init(struct sim *s, const struct job *job, const struct cluster *cl,
	      const struct coef *k, const struct events *ev, uint64_t seed, double noise);
/* The engine interface over s. */
struct engine sim_engine(struct sim *s);

/* A step's time from its record: stage by stage, the slowest pool's sum of
 * its model-stages' times, plus the fixed per-step cost step_s; one step
 * ahead (r->staleness 1), generation overlaps the other two stages as
 * cost_stale_step prices it, move being the seconds of generation's time
 * that moved the actor's weights in. */
double sim_step_time(const struct step_record *r, double step_s, double move);

#endif
