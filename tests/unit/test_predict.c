/* The prediction error a run reports (run/predict.h): the mean absolute
 * percentage error over the run and over its last quarter, worked out by
 * hand; and the predictions themselves, which for a record the cost model
 * made are the record's own times. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "run/predict.h"
#include "run/run.h"
#include "run/sim.h"
#include "unit.h"

/* |p/m - 1| by hand: 0.5, 0, 0.5, 1; the last quarter of 4 steps is step 3. */
static void mape_by_hand(void)
{
	const double pred[] = { 1, 2, 3, 4 }, meas[] = { 2, 2, 2, 2 };
	struct mape m;

	predict_mape_of(pred, meas, 4, &m);
	CHECK(m.n == 4 && m.nlast == 1);
	CHECK_NEAR(m.run, 0.5, 1e-15);
	CHECK_NEAR(m.last, 1.0, 1e-15);
}

/* Steps without a prediction or a measurement (paused, or before
 * predictions) count in neither mean, but still in the run's length. */
static void mape_skips_unknown(void)
{
	double pred[12], meas[12];
	struct mape m;

	for (int i = 0; i < 12; i++) {
		pred[i] = 1.1;
		meas[i] = 1.0;
	}
	pred[0] = NAN;   /* no prediction */
	meas[5] = NAN;   /* paused */
	pred[9] = 0.5;   /* in the last quarter, steps 9-11: |0.5 - 1| */
	meas[10] = NAN;
	predict_mape_of(pred, meas, 12, &m);
	CHECK(m.n == 9 && m.nlast == 2);
	CHECK_NEAR(m.run, (8 * 0.1 + 0.5) / 9, 1e-12);
	CHECK_NEAR(m.last, (0.5 + 0.1) / 2, 1e-12);
	CHECK(predict_mape_last_from(12) == 9 && predict_mape_last_from(1) == 0 && predict_mape_last_from(2) == 1 &&
	      predict_mape_last_from(5) == 3 && predict_mape_last_from(0) == 0);
}

static void mape_of_nothing(void)
{
	const double nan[] = { NAN };
	struct mape m;

	predict_mape_of(nan, nan, 0, &m);
	CHECK(m.n == 0 && m.nlast == 0 && isnan(m.run) && isnan(m.last));
	predict_mape_of(nan, nan, 1, &m);
	CHECK(m.n == 0 && isnan(m.run));
}

/* A record the cost model wrote for a plan is predicted as written; a
 * step that did not run has no prediction. */
static void predicts_the_model(void)
{
	struct job job;
	struct cluster cl;
	struct cond *c = malloc(sizeof *c);
	struct plan *p = calloc(1, sizeof *p), *scratch = malloc(sizeof *scratch);
	struct step_record r;
	struct coef k;
	struct err e;

	CHECK(job_load(&job, "examples/jobs/ppo-llama3-8b.json", &e) == NR_OK);
	CHECK(cluster_load(&cl, "examples/clusters/h100-8x8.json", &e) == NR_OK);
	cost_coef_defaults(&k);
	cond_init(c, &job, &cl);
	p->npools = 1;
	p->pools[0] = (struct pool){ (1u << (1 + job.nmodels)) - 1, 64 };
	for (int m = 0; m < job.nmodels; m++)
		p->home[m] = (struct pconf){ 2, 2, 16, 1, RC_SELECTIVE, ZERO_1, false };
	p->gen = (struct pconf){ 4, 1, 16, 1, RC_NONE, ZERO_0, false };
	CHECK(plan_place(&cl, p));
	plan_evaluate(&(struct env){ &job, &cl, &k }, p);
	CHECK(p->feasible);
	plan_to_record(&(struct env){ &job, &cl, &k }, p, 0, &r);
	predict_step(c, &k, p, &r, scratch);
	CHECK(r.nms == 7);
	CHECK_NEAR(r.predicted_step_s, r.step_time_s, 1e-12);
	for (int i = 0; i < r.nms; i++)
		CHECK_NEAR(r.ms[i].predicted_s, r.ms[i].time_s, 1e-12);
	r.status = STEP_PAUSED;
	predict_step(c, &k, p, &r, scratch);
	CHECK(isnan(r.predicted_step_s) && isnan(r.ms[0].predicted_s));
	free(c);
	free(p);
	free(scratch);
}

static struct step_record kept[8];
static long nkept;

static int keep(void *arg, const struct step_record *r, struct err *e)
{
	(void)arg;
	(void)e;
	if (nkept < 8)
		kept[nkept++] = *r;
	return NR_OK;
}

/* A machine five times slower than the cost model says, in every part of
 * every time (by hand: efficiencies a fifth, fixed seconds five times):
 * the steps before the first refit are predicted a fifth of what they
 * take; --refit 2 brings the model to the machine's level at step 2, and
 * from there on every prediction is what the step took. */
static void refit_finds_the_level(void)
{
	static struct sim sim;
	static struct controller ctl;
	static struct run r;
	struct job job;
	struct cluster cl;
	struct coef k, slow;
	struct engine eng;
	struct err e;

	CHECK(job_load(&job, "examples/jobs/ppo-llama3-8b.json", &e) == NR_OK);
	CHECK(cluster_load(&cl, "examples/clusters/h100-8x8.json", &e) == NR_OK);
	cost_coef_defaults(&k);
	slow = k;
	slow.train_eff /= 5;
	slow.infer_eff /= 5;
	slow.prefill_eff /= 5;
	slow.decode_eff /= 5;
	slow.intra_eff /= 5;
	slow.inter_eff /= 5;
	slow.host_eff /= 5;
	slow.allreduce_lat_s *= 5;
	slow.microbatch_s *= 5;
	slow.decode_step_s *= 5;
	slow.stage_s *= 5;
	slow.step_s *= 5;
	slow.move_piece_s *= 5;
	sim_init(&sim, &job, &cl, &slow, NULL, 1, 0);
	eng = sim_engine(&sim);
	ctl_init(&ctl, LAYOUT_ADAPTIVE, 0.01, &k);
	run_init(&r);
	r.eng = &eng;
	r.ctl = &ctl;
	run_refit_hook(&r);
	r.steps = 8;
	r.every = 0;
	r.refit = 2;
	r.emit = keep;
	CHECK(run_go(&r, &e) == NR_OK);
	CHECK(nkept == 8);
	for (long s = 0; s < nkept; s++) {
		const struct step_record *x = &kept[s];
		CHECK(x->status == STEP_OK);
		CHECK_NEAR(x->predicted_step_s, s < 2 ? x->step_time_s / 5 : x->step_time_s, 1e-6);
		for (int i = 0; i < x->nms; i++)
			CHECK_NEAR(x->ms[i].predicted_s, s < 2 ? x->ms[i].time_s / 5 : x->ms[i].time_s,
				   1e-6);
	}
	ctl_free(&ctl);
	run_free(&r);
}

int main(void)
{
	RUN(mape_by_hand);
	RUN(mape_skips_unknown);
	RUN(mape_of_nothing);
	RUN(predicts_the_model);
	RUN(refit_finds_the_level);
	return UNIT_END();
}
