/* Calibrating the cost model to the running job: fit the coefficients of
 * struct coef to step records (nereus-steps(5)) by robust least squares
 * with bounds.  nereus-profile(1) describes the method; in short:
 *
 * - Each model-stage time the records measured is predicted by the cost
 *   model itself (cost_train, cost_infer, plan_gen_cost, with the record's batch
 *   and the concurrency it observed).  Those times are linear in the
 *   inverse efficiencies and the fixed seconds, piece by piece (decode is
 *   the slower of memory and compute): the fit takes the model's gradient
 *   on the current piece, solves, and re-checks every prediction against
 *   the model until no record changes piece, or solving again moves no
 *   coefficient by a tenth of its standard error.
 * - Residuals are log(measured / predicted); their Cauchy loss, at a scale
 *   of 1.4826 times the median absolute residual, keeps a stalled step
 *   from moving the fit.  Plain least squares first, then reweighted
 *   (Cauchy weights), then Newton steps; a large fit solves on a sample of
 *   the rows first and finishes on all of them.  A solve after a re-check
 *   starts from the last one's coefficients and robust scale.
 * - step_s comes from each step's time less its stages' times; act_factor,
 *   workspace_gib and frag from the peak memory the records measured; the
 *   switch coefficients (comm_init_s, comm_group_s, engine_init_s,
 *   store_gbps) from the transition_s of the records whose "switch" says
 *   what their switch involved.
 * - A coefficient no record exercises, or one the records determine only
 *   loosely (standard error above FIT_MAX_RSE of its size), is not fitted:
 *   it keeps its prior value and the result says why.  Those it is
 *   correlated with carry its prior's uncertainty in their standard
 *   errors, and the one it could not be told from says it absorbs it.
 * - The prior enters as one pseudo-observation per coefficient, weighted by
 *   its standard error (from the previous fit, else FIT_PRIOR_RSE of its
 *   value, FIT_PRIOR_RSE_FIXED for the fixed costs: a default latency or
 *   overhead is a guess to within an order of magnitude, and a tighter one
 *   pulled a few hundred records' estimate toward it); with a half-life,
 *   records and prior alike are weighted by 0.5^(age in steps /
 *   half-life).  Records at or before the newest step the prior saw are
 *   skipped: the prior holds them already.
 * - Each fitted coefficient also gets the records' own estimate, solved
 *   again from the result without the prior, so that a prior that pulls
 *   the fit shows: the two apart by more than FIT_CONFLICT standard errors
 *   of their difference is a prior the records contradict.
 *
 * Records are added one by one (fit_add) and kept as compact rows, so the
 * step records themselves need not stay in memory; fit_run evaluates the
 * model over the rows on every core and solves. */
#ifndef NEREUS_FIT_H
#define NEREUS_FIT_H

#include <jansson.h>
#include <stdbool.h>

#include "common/err.h"
#include "doc/cluster.h"
#include "doc/costdoc.h"
#include "doc/job.h"
#include "doc/steprec.h"

#define FIT_MAX_RSE 0.25   /* relative standard error above which a coefficient is not fitted */
#define FIT_PRIOR_RSE 0.50 /* a prior's relative standard error when it has none */
#define FIT_PRIOR_RSE_FIXED 10.0 /* the same for the fixed costs (allreduce_lat_s .. step_s) */
#define FIT_CONFLICT 3.0   /* records and prior further apart than this, in standard errors */

/* What is known before the records: values, and how sure they are. */
struct fit_prior {
	struct coef k;
	double se[COEF_FIELDS]; /* standard errors in the coefficients' units; NAN unknown */
	long last_step;         /* the newest step the prior saw; -1 unknown */
};

struct fit_opts {
	double half_life; /* steps; 0: no forgetting */
	double holdout;   /* fraction of steps held out of the fit, [0, 1) */
};

struct fit_coef {
	double value;
	double se;        /* standard error; NAN when unknown */
	bool fitted;      /* false: the prior is kept, for the reason in why */
	char why[200];
	/* the coefficient the records could not tell this one from, held at
	 * its prior ("" none): this one's value takes up what that one's does,
	 * and se includes that one's prior uncertainty */
	char absorbs[32];
	/* the records' own estimate, without the prior, and its standard
	 * error (NAN when not fitted); the prior as the fit weighed it, and
	 * how many standard errors of their difference the two are apart */
	double data, data_se;
	double prior, prior_se;
	double apart;
};

struct fit_result {
	struct fit_coef c[COEF_FIELDS];
	struct coef k;          /* the values of c, as the models take them */
	long records, fit_records, held_records; /* with status ok */
	long not_ok;            /* records with status oom or paused: no times */
	long before_prior;      /* records at or before the prior's last step, skipped */
	long switches;          /* switches the switch coefficients were fitted to */
	long rows, fit_rows, held_rows;  /* model-stage times */
	long peak_rows;                  /* of them, with a measured peak */
	long first_step, last_step;
	long outliers;          /* fitted times the robust weights set aside */
	double scale;           /* robust scale of the log residuals (time) */
	double median, p90, max; /* |relative error| of fitted times */
	double mape_fit;        /* mean |relative error| of fitted times */
	double mape_holdout;    /* of held-out times; NAN without holdout */
	double mape_holdout_step; /* of held-out step times; NAN when none */
	double mape_peak;       /* of the peaks the memory fit used; NAN when none */
	int iterations;         /* weighted solves, time and memory together */
	int repieces;           /* passes that found records on another piece */
};

struct fit;

/* Start a fit for job and cluster from a prior (NULL: the defaults, each
 * with a relative standard error of FIT_PRIOR_RSE). */
int fit_new(struct fit **f, const struct job *job, const struct cluster *cl,
	    const struct fit_prior *prior, struct err *e);
/* Add a record checked against the job (steprec_parse or steprec_check).
 * Records with a status other than ok carry no times and are counted only;
 * a warm-up step's training entries and step time are not what the model
 * prices (its supervised update), and only its rollout is fitted; the
 * generation entry of a record without a p90 of its response lengths or
 * without the engines' concurrency cannot be priced and is not fitted (the
 * coefficients only generation determines then say why they keep their
 * priors). */
int fit_add(struct fit *f, const struct step_record *r, struct err *e);
/* Fit.  NR_EINPUT when there is nothing to fit. */
int fit_run(struct fit *f, const struct fit_opts *o, struct fit_result *out, struct err *e);
void fit_free(struct fit *f);

/* The prior held by a cost document: its coefficients (cost_load), and the
 * standard errors and newest step of its "fit" section when it has one. */
int fit_prior_load(struct fit_prior *p, const char *file, struct err *e);
void fit_prior_defaults(struct fit_prior *p);
/* The prior a fit leaves for the next one, as --prior reads it from the
 * document it writes: r's coefficients, their standard errors (NAN where
 * unknown: FIT_PRIOR_RSE of the value, FIT_PRIOR_RSE_FIXED for the fixed
 * costs) and its newest step, so a fit warm-started from it takes only
 * the records after that step. */
void fit_prior_of(struct fit_prior *p, const struct fit_result *r);

/* The "fit" section of a cost document (nereus-profile(1), OUTPUT). */
json_t *fit_to_json(const struct fit_result *r, const struct fit_opts *o);

/* The cost document of a fit of the records in trace (lines read, skipped
 * of them skipped): the fitted coefficients, the prior's hardware record
 * carried over when prior names a cost document, and the fit section. NULL
 * with e set when the prior cannot be read or memory runs out. */
json_t *fit_cost_document(const struct fit_result *r, const struct fit_opts *o,
			  const char *prior, const char *trace, long lines, long skipped,
			  struct err *e);

/* Whether a step is held out at fraction holdout: a hash of the step
 * number, so the split does not depend on the order of the records. */
bool fit_held_out(long step, double holdout);

#endif
