/* Hindsight: what knowing a run's whole event trace allows, for
 * nereus-run compare to measure the controller against.
 *
 * The trace cuts the run into segments: the steps between two boundaries
 * where events change the conditions.  The best plan of the whole space
 * for each segment's conditions (as the controller searches it, with the
 * simulated cluster's own coefficients) gives the candidates.
 *
 * fixed-best: the pools and each model's TP and PP (and the engines' TP)
 * of one candidate, kept for the whole run, DP following the GPUs as the
 * fixed policy does; the candidate whose run is shortest in all (each
 * segment at the best such plan, a segment where none fits costing the
 * step time before it, as a paused step does).
 *
 * oracle: the sequence of candidates, one a segment, that makes the run
 * shortest with every switch priced as the run prices it (run/charge.h):
 * dynamic programming over the segments, each state the candidate running
 * (or none, paused, holding the one before).  A switch is priced only when
 * it could beat the best way found to the same state, its fixed costs and
 * the time before it being a lower bound, so few transition graphs are
 * built.  A run that follows the schedule (controller.h's ctl_script) is
 * the oracle row. */
#ifndef NEREUS_ORACLE_H
#define NEREUS_ORACLE_H

#include "run/controller.h"

struct hindsight {
	const struct job *job;
	const struct cluster *cl;
	struct coef k;
	long steps;
	int nseg;
	long *from;            /* first step of each segment */
	struct cond *cond;     /* each segment's conditions */
	int ncand;
	struct plan *cand;     /* the distinct best plans of the segments */
	double *t;             /* t[i * ncand + c]: candidate c's step time in segment i;
				* INFINITY when it does not run there */
	long searches;         /* plan searches made */
};

/* Cut the run into segments and find the candidates.  ev may be NULL. */
int hindsight_init(struct hindsight *h, const struct job *job, const struct cluster *cl,
		   const struct coef *k, const struct events *ev, long steps, struct err *e);
void hindsight_free(struct hindsight *h);

/* The fixed-best plan: a candidate, as the fixed policy's reference;
 * *total_s its predicted run.  NR_EINFEASIBLE when no candidate runs. */
int hindsight_fixed_best(struct hindsight *h, struct plan *ref, double *total_s,
			 struct err *e);

/* The oracle's schedule, priced with ch: script's from and plans point into
 * h and *plans (freed with free()); *total_s its predicted run. */
int hindsight_oracle(struct hindsight *h, struct charge *ch, struct ctl_script *script,
		     const struct plan ***plans, double *total_s, struct err *e);

#endif
