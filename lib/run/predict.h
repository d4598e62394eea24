/* What the cost model predicted for each step, and how far off it was:
 * the predicted_s and predicted_step_s of step records (nereus-steps(5))
 * and the prediction error the run's summary reports (nereus-run(1)). */
#ifndef NEREUS_RUN_PREDICT_H
#define NEREUS_RUN_PREDICT_H

#include "doc/steprec.h"
#include "run/cond.h"

/* Fill rec's predicted_s and predicted_step_s with what the cost model k
 * gives for the step rec describes (status ok): plan p under conditions c
 * (its slow GPUs), with rec's batch (sequences, prompt and response
 * lengths) and each model's configuration as rec gives it (an engine may
 * run a plan's layout without its recomputation, and says so).  The
 * prediction stays NAN where the model finds the plan does not fit that
 * batch, and for entries the plan does not have.  scratch is working
 * space (a plan is large). */
void predict_step(const struct cond *c, const struct coef *k, const struct plan *p,
		  struct step_record *rec, struct plan *scratch);

/* The mean absolute percentage error of predictions against
 * measurements: over the whole run, and over its last quarter. */
struct mape {
	double run, last;   /* fractions (0.1 is 10%); NAN when no step counts */
	long n, nlast;      /* steps counted */
};

/* The MAPE of pred against meas over steps [0, n), mean |pred/meas - 1|,
 * counting the steps where both are finite and meas is positive; the last
 * quarter is the steps from n - n/4 (rounded up) on, so a run of 12 steps
 * has steps 9-11 in it. */
void predict_mape_of(const double *pred, const double *meas, long n, struct mape *out);

/* The first step of the last quarter of a run of n steps. */
long predict_mape_last_from(long n);

#endif
