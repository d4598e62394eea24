/* Other engines' metrics as step records (see foreign.h). */
#include "profile/foreign.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/json.h"

const char *const foreign_engine_names[NFOREIGN + 1] = { "verl", "openrlhf", NULL };

/* verl's timer of each role's model-stage; NULL where verl runs none */
static const char *const verl_timer[NROLES][NSTAGES] = {
	[ROLE_ACTOR] = { "timing_s/gen", "timing_s/old_log_prob", "timing_s/update_actor" },
	[ROLE_CRITIC] = { NULL, "timing_s/values", "timing_s/update_critic" },
	[ROLE_REFERENCE] = { NULL, "timing_s/ref", NULL },
	[ROLE_REWARD] = { NULL, "timing_s/reward", NULL },
};

int foreign_new(struct foreign *fg, enum foreign_engine engine, const struct env *v,
		const struct plan *p, struct err *e)
{
	const struct job *j = v->job;
	struct step_record *b = &fg->base;

	memset(fg, 0, sizeof *fg);
	fg->engine = engine;
	fg->job = j;
	fg->cl = v->cl;
	plan_to_record(v, p, 0, b);
	snprintf(b->engine, sizeof b->engine, "%s", foreign_engine_names[engine]);
	b->status = STEP_OK;
	b->response.p90 = NAN;
	b->step_time_s = NAN;
	for (int i = 0; i < b->nms; i++) {
		struct ms_record *ms = &b->ms[i];
		const struct model *md = job_model(j, ms->model);
		ms->time_s = ms->move_s = ms->peak_gib = ms->concurrency = NAN;
		ms->predicted_move_s = NAN;
		fg->pred[i] = p->ms[i].time.total;
		if (engine != FOREIGN_VERL)
			continue;
		snprintf(fg->what[i], sizeof fg->what[i], "%s@%s", ms->model,
			 job_stage_names[ms->stage]);
		if (!(fg->key[i] = verl_timer[md->role][ms->stage]))
			return err_set(e, NR_EINPUT, "verl times no %s@%s: job '%s' is not one verl "
				       "runs", ms->model, job_stage_names[ms->stage], j->name);
		for (int k = 0; k < i; k++)
			if (fg->key[k] == fg->key[i])
				return err_set(e, NR_EINPUT, "job '%s' has %s@%s and %s@%s, which verl "
					       "times as one (%s)", j->name, b->ms[k].model,
					       job_stage_names[b->ms[k].stage], ms->model,
					       job_stage_names[ms->stage], fg->key[i]);
	}
	return NR_OK;
}

/* Where a line is, and whether what is wrong with it is its shape. */
struct at {
	const char *file;
	long line;
	bool *malformed;
};

static int bad(const struct at *at, bool malformed, struct err *e, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int bad(const struct at *at, bool malformed, struct err *e, const char *fmt, ...)
{
	char msg[sizeof e->msg];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (at->malformed)
		*at->malformed = malformed;
	return err_set(e, NR_EINPUT, "%s:%ld: %s", at->file, at->line, msg);
}

/* Metric key of obj, shown as where + key: a number, NAN when absent and
 * not required; what (may be NULL) says what the engine times with it. */
static int metric_of(const struct at *at, json_t *obj, const char *where, const char *key,
		     const char *what, bool required, double *out, struct err *e)
{
	json_t *v = json_object_get(obj, key);
	char got[64];

	*out = NAN;
	if (!v && !required)
		return NR_OK;
	if (!v)
		return bad(at, true, e, "%s%s: missing%s%s", where, key, what ? ": the time of " : "",
			   what ? what : "");
	if (!json_is_number(v)) {
		jdoc_describe(v, got, sizeof got);
		return bad(at, true, e, "%s%s: expected a number, got %s", where, key, got);
	}
	*out = json_number_value(v);
	return NR_OK;
}

static int metric(const struct at *at, json_t *obj, const char *where, const char *key,
		  bool required, double *out, struct err *e)
{
	return metric_of(at, obj, where, key, NULL, required, out, e);
}

/* A timing: positive seconds (zero too when zero_ok: a time that may
 * not apply, as moving weights to no engines). */
static int seconds(const struct at *at, json_t *obj, const char *where, const char *key,
		   const char *what, bool required, bool zero_ok, double *out, struct err *e)
{
	int rc = metric_of(at, obj, where, key, what, required, out, e);

	if (rc || isnan(*out) || (isfinite(*out) && (*out > 0 || (zero_ok && *out == 0))))
		return rc;
	return bad(at, false, e, "%s%s: expected a positive number of seconds, got %g", where,
		   key, *out);
}

/* A step number, the line's key: a whole number, 0 or more. */
static int step_number(const struct at *at, json_t *obj, const char *key, long *out,
		       struct err *e)
{
	double s;
	int rc = metric(at, obj, "", key, true, &s, e);

	if (rc)
		return rc;
	if (!(s >= 0 && s <= (double)LONG_MAX && s == floor(s)))
		return bad(at, true, e, "%s: expected a whole step number, 0 or more, got %g", key,
			   s);
	*out = (long)s;
	return NR_OK;
}

/* The batch's lengths: prompt and response means (keys pkey, rkey) and
 * the longest response. */
static int lengths(const struct at *at, const char *where, const char *pkey, double prompt,
		   const char *rkey, double mean, long max, struct step_record *r,
		   struct err *e)
{
	if (!(isfinite(prompt) && prompt > 0))
		return bad(at, false, e, "%s%s: expected a positive number of tokens, got %g", where,
			   pkey, prompt);
	if (!(isfinite(mean) && mean > 0 && mean <= (double)max))
		return bad(at, false, e, "%s%s: expected a positive number of tokens up to the "
			   "longest response (%ld), got %g", where, rkey, max, mean);
	r->prompt_len = (long)ceil(prompt);
	r->response.mean = mean;
	r->response.max = max;
	return NR_OK;
}

static int verl_line(const struct foreign *fg, const struct at *at, json_t *root,
		     struct step_record *r, struct err *e)
{
	json_t *data = json_object_get(root, "data");
	double moved, prompt, mean, max;
	int rc;

	if ((rc = step_number(at, root, "step", &r->step, e)))
		return rc;
	if (!json_is_object(data))
		return bad(at, true, e, "data: %s: verl's file logger writes {\"step\": N, \"data\": "
			   "{METRIC: VALUE, ...}} a line", data ? "not an object" : "missing");
	for (int i = 0; i < r->nms; i++)
		if ((rc = seconds(at, data, "data.", fg->key[i], fg->what[i], true, false,
				  &r->ms[i].time_s, e)))
			return rc;
	if ((rc = seconds(at, data, "data.", "timing_s/update_weights", NULL, false, true, &moved,
			  e)) ||
	    (rc = seconds(at, data, "data.", "timing_s/step", "the step", true, false,
			  &r->step_time_s, e)) ||
	    (rc = metric(at, data, "data.", "prompt_length/mean", true, &prompt, e)) ||
	    (rc = metric(at, data, "data.", "response_length/mean", true, &mean, e)) ||
	    (rc = metric(at, data, "data.", "response_length/max", true, &max, e)))
		return rc;
	/* a generation entry's time includes moving the weights into it */
	for (int i = 0; i < r->nms && !isnan(moved); i++)
		if (r->ms[i].stage == STAGE_GEN)
			r->ms[i].time_s += moved;
	if (!(isfinite(max) && max >= 1 && max <= (double)LONG_MAX))
		return bad(at, false, e, "data.response_length/max: expected a positive number of "
			   "tokens, got %g", max);
	return lengths(at, "data.", "prompt_length/mean", prompt, "response_length/mean", mean,
		       (long)ceil(max), r, e);
}

/* Share t, a whole stage's time, among its model-stages in the
 * proportions the plan predicts, composed as a plan composes them: pools
 * at once, a pool's model-stages in turn. */
static void share(const struct foreign *fg, struct step_record *r, enum stage s, double t)
{
	double pool[MAX_ITEMS] = { 0 }, most = 0;

	for (int i = 0; i < r->nms; i++)
		if (r->ms[i].stage == s)
			pool[r->ms[i].pool] += fg->pred[i];
	for (int q = 0; q < MAX_ITEMS; q++)
		most = fmax(most, pool[q]);
	for (int i = 0; i < r->nms; i++)
		if (r->ms[i].stage == s)
			r->ms[i].time_s = t * fg->pred[i] / most;
}

static bool has_stage(const struct step_record *r, enum stage s)
{
	for (int i = 0; i < r->nms; i++)
		if (r->ms[i].stage == s)
			return true;
	return false;
}

/* OpenRLHF's key: bare, or as its wandb and TensorBoard loggers name it. */
static const char *okey(char *buf, size_t n, const char *prefix, const char *key)
{
	snprintf(buf, n, "%s%s", prefix, key);
	return buf;
}

static int openrlhf_line(const struct foreign *fg, const struct at *at, json_t *root,
			 struct step_record *r, struct err *e)
{
	static const char *const timer[NSTAGES] = { "timing/generation", "timing/make_experience",
						    "timing/ppo_train" };
	static const char *const stage_what[NSTAGES] = { "the generation stage",
							 "the inference stage",
							 "the training stage" };
	const char *pre = json_object_get(root, "train/global_step") ? "train/" : "";
	char k[64], rk[64], tk[64];
	double t, moved, seqs, mean, total;
	int rc;

	if ((rc = step_number(at, root, okey(k, sizeof k, pre, "global_step"), &r->step, e)))
		return rc;
	for (int s = 0; s < NSTAGES; s++) {
		if (!has_stage(r, (enum stage)s))
			continue;
		if ((rc = seconds(at, root, "", okey(k, sizeof k, pre, timer[s]), stage_what[s], true,
				  false, &t, e)))
			return rc;
		share(fg, r, (enum stage)s, t);
	}
	if ((rc = seconds(at, root, "", okey(k, sizeof k, pre, "timing/broadcast"), NULL, false,
			  true, &moved, e)) ||
	    (rc = seconds(at, root, "", okey(k, sizeof k, pre, "timing/step_total"), "the step",
			  true, false, &r->step_time_s, e)) ||
	    (rc = metric(at, root, "", okey(rk, sizeof rk, pre, "response_length"), true, &mean,
			 e)) ||
	    (rc = metric(at, root, "", okey(tk, sizeof tk, pre, "total_length"), true, &total, e)) ||
	    (rc = metric(at, root, "", okey(k, sizeof k, pre, "rollout/num_samples"), false, &seqs,
			 e)))
		return rc;
	/* a generation entry's time includes moving the weights into it */
	for (int i = 0; i < r->nms && !isnan(moved); i++)
		if (r->ms[i].stage == STAGE_GEN)
			r->ms[i].time_s += moved;
	if (!isnan(seqs) && !(seqs >= 1 && seqs <= (double)LONG_MAX && seqs == floor(seqs)))
		return bad(at, false, e, "%s: expected a whole number of sequences, 1 or more, got %g",
			   k, seqs);
	if (!isnan(seqs))
		r->sequences = (long)seqs;
	/* OpenRLHF logs no longest response: the job's, its bound, stands for it */
	return lengths(at, "", tk, total - mean, rk, mean, fg->job->response.max, r, e);
}

int foreign_parse(const void *arg, const char *file, long line, const char *text, size_t len,
		  struct step_record *r, bool *malformed, struct err *e)
{
	const struct foreign *fg = arg;
	struct at at = { strcmp(file, "-") ? file : "<stdin>", line, malformed };
	char msg[sizeof e->msg];
	json_error_t je;
	json_t *root;
	int rc;

	if (malformed)
		*malformed = false;
	*r = fg->base;
	if (!(root = json_loadb(text, len, 0, &je))) {
		if (malformed)
			*malformed = true;
		return err_set(e, NR_EINPUT, "%s:%ld:%d: %s", at.file, line, je.column, je.text);
	}
	if (!json_is_object(root))
		rc = bad(&at, true, e, "expected one JSON object a line: the metrics %s logged at "
			 "one step", foreign_engine_names[fg->engine]);
	else if (fg->engine == FOREIGN_VERL)
		rc = verl_line(fg, &at, root, r, e);
	else
		rc = openrlhf_line(fg, &at, root, r, e);
	json_decref(root);
	if (rc == NR_OK && steprec_check(r, fg->job, fg->cl, e)) {
		snprintf(msg, sizeof msg, "%s", e->msg);
		rc = bad(&at, false, e, "the step as a record of the plan: %s", msg);
	}
	return rc;
}
