/* The conditions a step runs under: the cluster as it is (GPUs up, memory
 * headroom), the job as it is (its response-length distribution now), and
 * GPUs that run slow.  Events change them; the engine runs under them and
 * the controller plans for them. */
#ifndef NEREUS_COND_H
#define NEREUS_COND_H

#include "plan/plan.h"
#include "run/events.h"

/* What an event changed, so the controller knows it must look again. */
enum { COND_GPUS = 1, COND_RESPONSE = 2, COND_HEADROOM = 4, COND_STRAGGLER = 8 };

struct cond {
	struct cluster cl;
	struct job job;
	float slow[MAX_GPUS];   /* ≥ 1: how much slower than its datasheet a GPU runs */
	int nslow;              /* GPUs with slow > 1 */
};

void cond_init(struct cond *c, const struct job *job, const struct cluster *cl);
/* Apply one event; returns the COND_* bit it touched. */
unsigned cond_apply(struct cond *c, const struct event *ev);
/* Bring c up to the boundary before step runs: apply, in order, each event
 * of ev from *next on whose step is at or before step, leaving *next at the
 * first one not applied, so that each event is applied once however the
 * steps are walked.  ev may be NULL (nothing happens).  Returns the COND_*
 * bits the events touched. */
unsigned cond_replay(struct cond *c, const struct events *ev, size_t *next, long step);

/* A pool runs at the pace of its slowest GPU: the factor each pool of p is
 * slowed by (1 when none of its GPUs is slow). */
void cond_pool_slowdown(const struct cond *c, const struct plan *p, double *factor);
/* p's step time under c: its evaluated model-stage times, each pool's
 * slowed by its factor and each multiplied by scale[i] (NULL: 1), stage by
 * stage the slowest pool, added up (one step ahead, overlapped as
 * cost_stale_step prices it), plus the fixed per-step cost.  p must have
 * been evaluated. */
double cond_step_time(const struct cond *c, const struct coef *k, const struct plan *p,
		      const double *scale);
/* Whether p places a pool on a GPU that is down. */
bool cond_plan_on_down(const struct cond *c, const struct plan *p);

#endif
