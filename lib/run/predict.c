/* Predictions and their error (see predict.h). */
#include "run/predict.h"

#include <math.h>
#include <string.h>

/* The plan as the record ran it: each model's home configuration from its
 * training entry (or its one entry, for a model that does not train). */
static void as_recorded(const struct job *j, const struct step_record *rec, struct plan *p)
{
	for (int i = 0; i < rec->nms; i++) {
		const struct ms_record *ms = &rec->ms[i];
		const struct model *md = job_model(j, ms->model);
		if (md && ms->stage != STAGE_GEN && (ms->stage == STAGE_TRAIN || !model_trainable(md)))
			p->home[md - j->models] = ms->conf;
	}
}

void predict_step(const struct cond *c, const struct coef *k, const struct plan *p,
		  struct step_record *rec, struct plan *scratch)
{
	struct job j = c->job;
	const struct env v = { &j, &c->cl, k };
	double factor[MAX_ITEMS];

	rec->predicted_step_s = NAN;
	for (int i = 0; i < rec->nms; i++)
		rec->ms[i].predicted_s = rec->ms[i].predicted_move_s = NAN;
	if (rec->status != STEP_OK)
		return;
	/* the batch the record ran; sequences other than the job's, as the
	 * fit takes them (profile/fit.h), prompts of one sample each (the
	 * job's own keep its prompts, which the built-in engine's prefill
	 * memory, and so its concurrency, depends on) */
	if (rec->sequences != job_sequences(&j)) {
		j.prompts_per_step = rec->sequences;
		j.samples_per_prompt = 1;
	}
	j.prompt_len = rec->prompt_len;
	j.response = rec->response;
	memcpy(scratch, p, sizeof *scratch);
	as_recorded(&j, rec, scratch);
	plan_evaluate(&v, scratch);
	if (!scratch->feasible)
		return;
	cond_pool_slowdown(c, scratch, factor);
	for (int i = 0; i < rec->nms; i++) {
		struct ms_record *ms = &rec->ms[i];
		const struct model *md = job_model(&j, ms->model);
		for (int q = 0; md && q < scratch->nms; q++) {
			const struct ms_plan *mp = &scratch->ms[q];
			if (mp->model == md - j.models && mp->stage == ms->stage) {
				ms->predicted_s = mp->time.total * factor[mp->pool];
				/* the move is of the engines' pool and the actor's:
				 * a slow GPU's factor is its compute's */
				if (ms->stage == STAGE_GEN)
					ms->predicted_move_s = mp->time.move;
			}
		}
	}
	rec->predicted_step_s = cond_step_time(c, k, scratch, NULL);
}

long predict_mape_last_from(long n)
{
	return n - (n + 3) / 4;
}

void predict_mape_of(const double *pred, const double *meas, long n, struct mape *out)
{
	long from = predict_mape_last_from(n);
	double sum = 0, sum_last = 0;

	memset(out, 0, sizeof *out);
	for (long i = 0; i < n; i++) {
		double err;
		if (!isfinite(pred[i]) || !isfinite(meas[i]) || !(meas[i] > 0))
			continue;
		err = fabs(pred[i] / meas[i] - 1);
		sum += err;
		out->n++;
		if (i >= from) {
			sum_last += err;
			out->nlast++;
		}
	}
	out->run = out->n ? sum / (double)out->n : NAN;
	out->last = out->nlast ? sum_last / (double)out->nlast : NAN;
}
