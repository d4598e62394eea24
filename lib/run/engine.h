/* The engine a run drives: what executes the steps.  The runtime (run.h)
 * and the controller never look inside it, so the simulation engine of
 * sim.h and a real engine that trains on GPUs plug in the same way. */
#ifndef NEREUS_ENGINE_H
#define NEREUS_ENGINE_H

#include "run/cond.h"
#include "doc/steprec.h"

struct engine {
	const char *name;   /* "sim", ...: the records' "engine" */
	void *self;
	/* The engine continues from state it saved itself (a real engine):
	 * resuming, the run takes the steps already recorded as they are
	 * instead of running them again, and starts the engine from the plan
	 * they end with.  Otherwise (the simulator) it replays them and checks
	 * that they come out the same. */
	bool resumes;
	/* The conditions at the boundary before step: take in what happened
	 * since the last call; returns the COND_* bits that changed and points
	 * *now at the conditions. */
	unsigned (*observe)(void *self, long step, const struct cond **now);
	/* Move the job from plan from (NULL: its state is not on GPUs yet) to
	 * plan to; predicted_s is the transition's predicted time; *took_s
	 * gets the seconds it took. */
	int (*transition)(void *self, const struct plan *from, const struct plan *to,
			  double predicted_s, double *took_s, struct err *e);
	/* Run step with plan p (NULL: paused, nothing runs) and describe it in
	 * r: status, batch, each model-stage's time and peak, the step time. */
	int (*step)(void *self, long step, const struct plan *p, struct step_record *r,
		    struct err *e);
	/* An engine over several processes (NULL: one): n bytes of buf as its
	 * first process holds them, on every process, so that what each reads
	 * for itself (a plan file) is the same everywhere.  Nonzero when the
	 * processes cannot be reached. */
	int (*agree)(void *self, void *buf, size_t n);
};

#endif
