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
 * shortest with every switch priced as the run prices it (run/charge.h),
 * the candidates of a segment being its best plan and every plan a row ran
 * in it (hindsight_add); of that schedule and each row's own, the shortest
 * as the oracle row runs it (hindsight_shortest), so that no row is
 * shorter.  The schedule is found by dynamic programming over the
 * segments, each state the candidate running (or none, paused, holding the
 * one before).  A switch is priced only when it could beat the best way
 * found to the same state, its fixed costs and the time before it being a
 * lower bound, and a state only when it could beat the best candidate kept
 * throughout, so few transition graphs are built.  A run that follows the
 * schedule (controller.h's ctl_script) is the oracle row. */
#ifndef NEREUS_ORACLE_H
#define NEREUS_ORACLE_H

#include <stdint.h>

#include "run/controller.h"
#include "run/engine.h"

struct hindsight {
	const struct job *job;
	const struct cluster *cl;
	struct coef k;
	long steps;
	int nseg;
	long *from;            /* first step of each segment */
	struct cond *cond;     /* each segment's conditions */
	int ncand, nbest;      /* candidates; the first nbest the segments' best */
	struct plan *cand;     /* the distinct best plans of the segments, then the rows' */
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

/* What a row ran, step by step: an engine that passes each step on to
 * another and keeps the plan it was given, as a script the oracle can
 * follow (a new entry where the plan's pools, GPUs or configurations
 * change, or it pauses or resumes). */
struct ran {
	struct engine inner;
	long steps;
	int ngpus;               /* the cluster's, for comparing plans */
	int n, cap;
	long *from;
	struct plan *plans;
	bool *paused;
	const struct plan **run; /* the script's plans, made by ran_script */
	struct ctl_script script;
};

void ran_init(struct ran *r, const struct engine *inner, long steps);
struct engine ran_engine(struct ran *r);
/* The script of what ran, valid while r lives and records nothing more. */
int ran_script(struct ran *r, const struct ctl_script **script, struct err *e);
void ran_free(struct ran *r);

/* Every plan r ran becomes a candidate too, so that the oracle's schedule
 * can run whatever a row ran in each segment. */
int hindsight_add(struct hindsight *h, const struct ran *r, struct err *e);

/* How the oracle row runs a script: on the simulator over the trace, its
 * noise seeded, the controller consulted every `every` steps, switches
 * priced with the transition graph or its bound. */
struct replay {
	const struct events *ev;
	uint64_t seed;
	double noise;
	long every;
	bool price_graph;
};

/* The shortest of n scripts as the oracle row runs them: *pick its index
 * (the first of equals), *total_s its run.  known[i] is the run of the row
 * that ran script i (INFINITY: none); a script whose row already ran no
 * shorter than the shortest so far is not run again, as its run would be
 * the row's.  With the oracle's schedule and every row's own among them,
 * the oracle row is no longer than any row. */
int hindsight_shortest(const struct hindsight *h, const struct replay *rp,
		       const struct ctl_script *const *scripts, const double *known, int n,
		       int *pick, double *total_s, struct err *e);

#endif
