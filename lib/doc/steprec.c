/* Step records (nereus-steps(5)): parsing one line, checking it against the
 * job, writing it back.  One check serves both directions, so what a writer
 * may produce and what a reader accepts cannot drift apart.  Most good
 * lines take the fast path of steprec_fast.c. */
#include "doc/steprec_impl.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/json.h"

const char *const steprec_status_names[NSTEP_STATUS + 1] = { "ok", "oom", "paused", NULL };

/* --- checking ------------------------------------------------------------- */

/* Fail at field key of model_stages[i], or at key itself when i < 0:
 * located through d when there is one, else by its path.  The path is
 * made here, only for a message: a good record needs none. */
static int bad(const struct jdoc *d, int i, const char *key, struct err *e, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static int bad(const struct jdoc *d, int i, const char *key, struct err *e, const char *fmt, ...)
{
	char msg[768], path[128];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (i >= 0) {
		char entry[64];
		jdoc_path_idx(entry, sizeof entry, "model_stages", (size_t)i);
		jdoc_path(path, sizeof path, entry, key);
	} else {
		snprintf(path, sizeof path, "%s", key);
	}
	if (d)
		return jdoc_fail(d, path, e, "%s", msg);
	if (*path)
		return err_set(e, NR_EINPUT, "%s: %s", path, msg);
	return err_set(e, NR_EINPUT, "%s", msg);
}

static bool positive(double x)
{
	return isfinite(x) && x > 0;
}

/* The time in field key of model_stages[i] (of the step when i < 0). */
static int check_time(const struct jdoc *d, int i, const char *key, double t, bool required,
		      struct err *e)
{
	if (isnan(t) && !required)
		return NR_OK;
	if (isnan(t))
		return bad(d, i, key, e, "a step with status \"ok\" needs a measured time");
	if (!positive(t))
		return bad(d, i, key, e, "expected a positive number of seconds, got %g", t);
	return NR_OK;
}

/* The index of the entry for model m in stage s, or -1. */
static int entry_of(const struct step_record *r, const struct job *job, int m, enum stage s)
{
	for (int i = 0; i < r->nms; i++)
		if (r->ms[i].stage == s && strcmp(r->ms[i].model, job->models[m].name) == 0)
			return i;
	return -1;
}

/* Whether a step with status ok ran model-stage ms of model md: all but
 * the critic's training in a warm-up step, where only the actor learns. */
/* Whether nereus-run wrote the record: its engines measure what other
 * engines may not log, so their records must have it. */
static bool native(const struct step_record *r)
{
	return strcmp(r->engine, "sim") == 0 || strcmp(r->engine, "builtin") == 0;
}

/* Whether model-stage ms ran in step r: not the critic's training in a
 * warm-up step, nor one step ahead, the actor's inference (its old
 * log-probs are the sampler's). */
static bool ran(const struct step_record *r, const struct model *md, const struct ms_record *ms)
{
	if (r->staleness == 1 && md->role == ROLE_ACTOR && ms->stage == STAGE_INF)
		return false;
	return !(r->rl.known && r->rl.sft && md->role == ROLE_CRITIC && ms->stage == STAGE_TRAIN);
}

static int check_entry(const struct jdoc *d, const struct step_record *r, int i,
		       const struct job *job, struct err *e)
{
	const struct ms_record *ms = &r->ms[i];
	const struct model *md = job_model(job, ms->model);
	const struct pconf *c = &ms->conf;
	int rc;

	if (!md)
		return bad(d, i, "model", e, "job '%s' has no model '%s'", job->name, ms->model);
	if (!md->stages[ms->stage])
		return bad(d, i, "stage", e, "model '%s' does not run in the %s stage in job '%s'",
			   ms->model, job_stage_names[ms->stage], job->name);
	for (int k = 0; k < i; k++)
		if (r->ms[k].stage == ms->stage && strcmp(r->ms[k].model, ms->model) == 0)
			return bad(d, i, "model", e, "%s@%s appears twice (also model_stages[%d])",
				   ms->model, job_stage_names[ms->stage], k);
	if (c->tp < 1 || c->pp < 1 || c->dp < 1 || c->mb < 1)
		return bad(d, i, "tp", e, "tp, pp, dp and micro_batch must be positive");
	if (ms->stage == STAGE_GEN && c->pp != 1)
		return bad(d, i, "pp", e, "generation engines have no pipeline stages");
	if ((long)c->tp * c->pp * c->dp != ms->gpus)
		return bad(d, i, "gpus", e, "tp·pp·dp = %ld, but gpus = %d",
			   (long)c->tp * c->pp * c->dp, ms->gpus);
	if (ms->gpus > r->gpus_up)
		return bad(d, i, "gpus", e, "uses %d GPUs, but only %d are up", ms->gpus,
			   r->gpus_up);
	if ((rc = check_time(d, i, "time_s", ms->time_s, r->status == STEP_OK && ran(r, md, ms),
			     e)))
		return rc;
	if (!isnan(ms->move_s) && ms->stage != STAGE_GEN)
		return bad(d, i, "move_s", e, "only generation entries have a move_s");
	if (!isnan(ms->move_s) && !(isfinite(ms->move_s) && ms->move_s >= 0))
		return bad(d, i, "move_s", e, "expected a non-negative number of seconds, got %g",
			   ms->move_s);
	if (!isnan(ms->predicted_move_s) && ms->stage != STAGE_GEN)
		return bad(d, i, "predicted_move_s", e, "only generation entries have a "
			   "predicted_move_s");
	if (!isnan(ms->predicted_move_s) &&
	    !(isfinite(ms->predicted_move_s) && ms->predicted_move_s >= 0))
		return bad(d, i, "predicted_move_s", e, "expected a non-negative number of seconds, "
			   "got %g", ms->predicted_move_s);
	if (!isnan(ms->predicted_s) && !positive(ms->predicted_s))
		return bad(d, i, "predicted_s", e, "expected a positive number of seconds, got %g",
			   ms->predicted_s);
	if (!isnan(ms->peak_gib) && !positive(ms->peak_gib))
		return bad(d, i, "peak_gib", e, "expected a positive number of GiB, got %g",
			   ms->peak_gib);
	if (ms->stage != STAGE_GEN && !isnan(ms->concurrency))
		return bad(d, i, "concurrency", e, "only generation entries have a concurrency");
	if (ms->stage == STAGE_GEN && r->status == STEP_OK && isnan(ms->concurrency) &&
	    native(r))
		return bad(d, i, "concurrency", e, "a generation entry of a step with status \"ok\" "
			   "that engine '%s' ran needs its concurrency", r->engine);
	if (ms->stage == STAGE_GEN && !isnan(ms->concurrency) &&
	    !(isfinite(ms->concurrency) && ms->concurrency >= 1))
		return bad(d, i, "concurrency", e, "expected a number of at least 1, got %g",
			   ms->concurrency);
	return NR_OK;
}

/* A model's stages run in its one home layout, on one pool. */
static int check_home(const struct jdoc *d, const struct step_record *r, int i, int k,
		      struct err *e)
{
	const struct pconf *a = &r->ms[i].conf, *b = &r->ms[k].conf;

	if (a->tp != b->tp || a->pp != b->pp || a->dp != b->dp || a->mb != b->mb ||
	    a->offload != b->offload || (a->zero == ZERO_3) != (b->zero == ZERO_3))
		return bad(d, k, "tp", e, "%s runs its stages in one layout, but model_stages[%d] "
			   "(tp=%d pp=%d dp=%d micro_batch=%d) and model_stages[%d] (tp=%d pp=%d "
			   "dp=%d micro_batch=%d) differ", r->ms[i].model, i, a->tp, a->pp, a->dp,
			   a->mb, k, b->tp, b->pp, b->dp, b->mb);
	if (r->ms[i].pool != r->ms[k].pool)
		return bad(d, k, "pool", e, "%s runs its stages on one pool, but model_stages[%d] "
			   "is on pool %d and model_stages[%d] on pool %d", r->ms[i].model, i,
			   r->ms[i].pool, k, r->ms[k].pool);
	return NR_OK;
}

static int check_record(const struct jdoc *d, const struct step_record *r,
			const struct job *job, const struct cluster *cl, struct err *e)
{
	const struct response_len *rl = &r->response;
	int rc, gpus_in_pools = 0, actor = job_actor(job), gen = -1, home = -1;

	if (r->step < 0)
		return bad(d, -1, "step", e, "expected a non-negative integer, got %ld", r->step);
	if (r->gpus_up < 1)
		return bad(d, -1, "gpus_up", e, "expected a positive integer, got %d", r->gpus_up);
	if (cl && r->gpus_up > cluster_gpus(cl))
		return bad(d, -1, "gpus_up", e, "%d GPUs up, but cluster '%s' has %d", r->gpus_up,
			   cl->name, cluster_gpus(cl));
	if ((rc = check_time(d, -1, "step_time_s", r->step_time_s, r->status == STEP_OK, e)))
		return rc;
	if (!isnan(r->predicted_step_s) && !positive(r->predicted_step_s))
		return bad(d, -1, "predicted_step_s", e, "expected a positive number of seconds, "
			   "got %g", r->predicted_step_s);
	if (!(isfinite(r->transition_s) && r->transition_s >= 0))
		return bad(d, -1, "transition_s", e, "expected a non-negative number of seconds, "
			   "got %g", r->transition_s);
	if (r->sw.known && r->transition_s == 0)
		return bad(d, -1, "switch", e, "a step with no transition (transition_s 0) had no "
			   "switch");
	if (r->sw.known && !(isfinite(r->sw.move_s) && r->sw.move_s >= 0))
		return bad(d, -1, "switch.move_s", e, "expected a non-negative number of seconds, "
			   "got %g", r->sw.move_s);
	if (r->sw.known && !(isfinite(r->sw.store_gib) && r->sw.store_gib >= 0))
		return bad(d, -1, "switch.store_gib", e, "expected a non-negative number of GiB, "
			   "got %g", r->sw.store_gib);
	if (r->status == STEP_PAUSED) {
		if (r->nms)
			return bad(d, -1, "model_stages", e, "a paused step runs no model-stage");
		return NR_OK;
	}
	if (r->sequences < 1)
		return bad(d, -1, "sequences", e, "expected a positive integer, got %ld",
			   r->sequences);
	if (r->prompt_len < 1)
		return bad(d, -1, "prompt_len", e, "expected a positive integer, got %ld",
			   r->prompt_len);
	if (!positive(rl->mean) || rl->mean > rl->max)
		return bad(d, -1, "response_len.mean", e, "expected a positive number up to max "
			   "(%ld), got %g", rl->max, rl->mean);
	if (isnan(rl->p90) && native(r))
		return bad(d, -1, "response_len.p90", e, "a record engine '%s' wrote needs its "
			   "p90", r->engine);
	if (!isnan(rl->p90) && (!positive(rl->p90) || rl->p90 > rl->max))
		return bad(d, -1, "response_len.p90", e, "expected a positive number up to max "
			   "(%ld), got %g", rl->max, rl->p90);
	for (int i = 0; i < r->nms; i++)
		if ((rc = check_entry(d, r, i, job, e)))
			return rc;
	for (int m = 0; m < job->nmodels; m++) {
		int first = -1;
		for (int s = 0; s < NSTAGES; s++) {
			int i;
			if (!job->models[m].stages[s])
				continue;
			if ((i = entry_of(r, job, m, (enum stage)s)) < 0)
				return bad(d, -1, "model_stages", e, "no entry for %s@%s, which job '%s' "
					   "runs", job->models[m].name, job_stage_names[s], job->name);
			if (s == STAGE_GEN) {
				gen = i;
				continue;
			}
			if (first >= 0 && (rc = check_home(d, r, first, i, e)))
				return rc;
			if (first < 0)
				first = i;
		}
		if (m == actor)
			home = first;
	}
	/* the model-stages of one pool take turns on the same GPUs */
	for (int i = 0; i < r->nms; i++) {
		int k;
		for (k = 0; k < i && r->ms[k].pool != r->ms[i].pool; k++)
			;
		if (k == i) {
			gpus_in_pools += r->ms[i].gpus;
		} else if (r->ms[k].gpus != r->ms[i].gpus) {
			return bad(d, i, "gpus", e, "pool %d has %d GPUs (model_stages[%d]), not %d",
				   r->ms[i].pool, r->ms[k].gpus, k, r->ms[i].gpus);
		}
	}
	if (gpus_in_pools > r->gpus_up)
		return bad(d, -1, "model_stages", e, "the pools hold %d GPUs, but only %d are up",
			   gpus_in_pools, r->gpus_up);
	if (gen >= 0 && home >= 0 && r->ms[gen].same_pool != (r->ms[gen].pool == r->ms[home].pool))
		return bad(d, gen, "same_pool", e, "is %s, but generation runs on pool %d and the "
			   "actor's training on pool %d", r->ms[gen].same_pool ? "true" : "false",
			   r->ms[gen].pool, r->ms[home].pool);
	return NR_OK;
}

int steprec_check(const struct step_record *r, const struct job *job,
		  const struct cluster *cl, struct err *e)
{
	return check_record(NULL, r, job, cl, e);
}

/* --- parsing -------------------------------------------------------------- */

const char *const sr_record_keys[NRECORD_KEYS + 1] = {
	"nereus", "kind", "step", "engine", "gpus_up", "status", "sequences", "prompt_len",
	"response_len", "step_time_s", "predicted_step_s", "transition_s", "switch", "model_stages",
	"rl", "staleness", NULL
};

const char *const sr_rl_keys[NRL_NUMS + 2] = {
	"phase", "reward_mean", "response_len_mean", "kl", "policy_loss", "value_loss",
	"entropy", "clip_frac", "grad_norm", "lr", "sft_loss", NULL
};
const char *const sr_rl_phases[] = { "rl", "sft", NULL };

double *sr_rl_num(struct step_rl *rl, int i)
{
	double *v[NRL_NUMS] = { &rl->reward_mean, &rl->response_len_mean, &rl->kl,
				&rl->policy_loss, &rl->value_loss, &rl->entropy, &rl->clip_frac,
				&rl->grad_norm, &rl->lr, &rl->sft_loss };

	return v[i];
}

static double rl_value(const struct step_rl *rl, int i)
{
	const double v[NRL_NUMS] = { rl->reward_mean, rl->response_len_mean, rl->kl,
				     rl->policy_loss, rl->value_loss, rl->entropy, rl->clip_frac,
				     rl->grad_norm, rl->lr, rl->sft_loss };

	return v[i];
}

const char *const sr_response_keys[NRESPONSE_KEYS + 1] = { "mean", "p90", "max", NULL };

const char *const sr_switch_keys[NSWITCH_KEYS + 1] = {
	"move_s", "store_gib", "new_communicator", "groups", "new_engines", NULL
};

const char *const sr_entry_keys[NENTRY_KEYS] = {
	"model", "stage", "pool", "gpus", "tp", "pp", "dp", "micro_batch", "recompute", "zero",
	"fsdp", "offload", "same_pool", "time_s", "move_s", "predicted_s", "peak_gib", "concurrency",
	"predicted_move_s"
};
#define ENTRY_ALL (1u << E_MODEL | 1u << E_STAGE | 1u << E_POOL | 1u << E_GPUS | 1u << E_TP | \
		   1u << E_DP | 1u << E_TIME_S | 1u << E_PREDICTED_S | 1u << E_PEAK_GIB)
#define ENTRY_LAYOUT (1u << E_PP | 1u << E_MICRO_BATCH | 1u << E_FSDP | 1u << E_OFFLOAD)
const unsigned sr_entry_has[NSTAGES] = {
	[STAGE_GEN] = ENTRY_ALL | 1u << E_SAME_POOL | 1u << E_MOVE_S | 1u << E_CONCURRENCY |
		      1u << E_PREDICTED_MOVE_S,
	[STAGE_INF] = ENTRY_ALL | ENTRY_LAYOUT,
	[STAGE_TRAIN] = ENTRY_ALL | ENTRY_LAYOUT | 1u << E_RECOMPUTE | 1u << E_ZERO,
};
#define ENTRY_REQUIRED (1u << E_MODEL | 1u << E_STAGE | 1u << E_POOL | 1u << E_GPUS | \
			1u << E_TP | 1u << E_DP | 1u << E_TIME_S)
const unsigned sr_entry_needs[NSTAGES] = {
	[STAGE_GEN] = ENTRY_REQUIRED | 1u << E_SAME_POOL,
	[STAGE_INF] = ENTRY_REQUIRED | 1u << E_PP | 1u << E_MICRO_BATCH,
	[STAGE_TRAIN] = ENTRY_REQUIRED | 1u << E_PP | 1u << E_MICRO_BATCH | 1u << E_RECOMPUTE |
			1u << E_ZERO,
};

static const char *shown(const char *name)
{
	return strcmp(name, "-") == 0 ? "<stdin>" : name;
}

/* The loader sees one line, so its messages say line 1: put the line's
 * number in the file there. */
static void relocate(struct err *e, const char *name, long line)
{
	const char *file = shown(name);
	size_t n = strlen(file), len = strlen(e->msg);
	char num[24];
	int k;

	if (strncmp(e->msg, file, n) != 0 || strncmp(e->msg + n, ":1:", 3) != 0)
		return;
	k = snprintf(num, sizeof num, ":%ld:", line);
	if (len + (size_t)k - 3 >= sizeof e->msg)
		len = sizeof e->msg - 1 - ((size_t)k - 3);
	memmove(e->msg + n + k, e->msg + n + 3, len - n - 3);
	memcpy(e->msg + n, num, (size_t)k);
	e->msg[len + (size_t)k - 3] = '\0';
}

/* JSON has no NaN or infinity, but some writers print them anyway: find
 * such a token outside strings and say which field holds it. */
static bool find_nan(const char *t, size_t len, size_t *at, char *key, size_t kn)
{
	static const char *const words[] = { "NaN", "nan", "-NaN", "-nan", "Infinity",
					     "-Infinity", "inf", "-inf", NULL };
	bool in_str = false;

	for (size_t i = 0; i < len; i++) {
		if (in_str) {
			if (t[i] == '\\')
				i++;
			else if (t[i] == '"')
				in_str = false;
			continue;
		}
		if (t[i] == '"') {
			in_str = true;
			continue;
		}
		for (int w = 0; words[w]; w++) {
			size_t n = strlen(words[w]), j, k = 0;
			if (i + n > len || strncmp(t + i, words[w], n) != 0)
				continue;
			*at = i;
			key[0] = '\0';
			/* back over ':' and the key's closing quote to the key */
			for (j = i; j > 0 && strchr(" \t:", t[j - 1]); j--)
				;
			if (j > 0 && t[j - 1] == '"') {
				size_t end = --j;
				while (j > 0 && t[j - 1] != '"')
					j--;
				while (j < end && k + 1 < kn)
					key[k++] = t[j++];
				key[k] = '\0';
			}
			return true;
		}
	}
	return false;
}

static int column(const char *t, size_t at)
{
	int col = 1;

	for (size_t i = 0; i < at; i++)
		if (((unsigned char)t[i] & 0xC0) != 0x80)
			col++;
	return col;
}

/* A number, or null / absent (NAN) when allowed. */
static int get_opt_num(const struct jdoc *d, json_t *o, const char *path, const char *key,
		       bool required, double *out, struct err *e)
{
	json_t *v = json_object_get(o, key);
	char sub[160], got[64];

	*out = NAN;
	if (!v && required)
		return jdoc_fail(d, path, e, "missing required field \"%s\"", key);
	if (!v || json_is_null(v))
		return NR_OK;
	if (!json_is_number(v)) {
		jdoc_path(sub, sizeof sub, path, key);
		jdoc_describe(v, got, sizeof got);
		return jdoc_fail(d, sub, e, "expected a number or null, got %s", got);
	}
	*out = json_number_value(v);
	return NR_OK;
}

static int parse_entry(const struct jdoc *d, json_t *o, const char *path,
		       struct ms_record *ms, struct err *e)
{
	const char *keys[NENTRY_KEYS + 1];
	long pool, gpus, tp, pp = 1, dp, mb = 1;
	int stage, rcomp = RC_NONE, rc, nkeys = 0;
	bool gen, fsdp = false;
	long zero = ZERO_0;
	json_t *z = json_object_get(o, "zero");

	memset(ms, 0, sizeof *ms);
	if (!json_is_object(o))
		return jdoc_fail(d, path, e, "expected an object (one model-stage)");
	if ((rc = jget_str(d, o, path, "model", true, ms->model, sizeof ms->model, e)) ||
	    (rc = jget_enum(d, o, path, "stage", true, job_stage_names, &stage, e)))
		return rc;
	for (int k = 0; k < NENTRY_KEYS; k++)
		if (sr_entry_has[stage] & 1u << k)
			keys[nkeys++] = sr_entry_keys[k];
	keys[nkeys] = NULL;
	if ((rc = jdoc_check_keys(d, o, path, keys, e)))
		return rc;
	gen = stage == STAGE_GEN;
	if ((rc = jget_int(d, o, path, "pool", true, 0, MAX_MODELS, &pool, e)) ||
	    (rc = jget_int(d, o, path, "gpus", true, 1, MAX_GPUS, &gpus, e)) ||
	    (rc = jget_int(d, o, path, "tp", true, 1, MAX_GPUS, &tp, e)) ||
	    (rc = jget_int(d, o, path, "pp", !gen, 1, 4096, &pp, e)) ||
	    (rc = jget_int(d, o, path, "dp", true, 1, MAX_GPUS, &dp, e)) ||
	    (rc = jget_int(d, o, path, "micro_batch", !gen, 1, 1 << 20, &mb, e)) ||
	    (rc = jget_enum(d, o, path, "recompute", stage == STAGE_TRAIN, pconf_recompute_names,
			    &rcomp, e)) ||
	    (rc = json_is_boolean(z) ? (zero = json_is_true(z), NR_OK) :
		  jget_int(d, o, path, "zero", stage == STAGE_TRAIN, ZERO_0, ZERO_3, &zero, e)) ||
	    (rc = jget_bool(d, o, path, "fsdp", false, &fsdp, e)) ||
	    (rc = jget_bool(d, o, path, "offload", false, &ms->conf.offload, e)) ||
	    (rc = jget_bool(d, o, path, "same_pool", gen, &ms->same_pool, e)) ||
	    (rc = get_opt_num(d, o, path, "time_s", true, &ms->time_s, e)) ||
	    (rc = get_opt_num(d, o, path, "move_s", false, &ms->move_s, e)) ||
	    (rc = get_opt_num(d, o, path, "predicted_s", false, &ms->predicted_s, e)) ||
	    (rc = get_opt_num(d, o, path, "peak_gib", false, &ms->peak_gib, e)) ||
	    (rc = get_opt_num(d, o, path, "concurrency", false, &ms->concurrency, e)) ||
	    (rc = get_opt_num(d, o, path, "predicted_move_s", false, &ms->predicted_move_s, e)))
		return rc;
	ms->stage = (enum stage)stage;
	ms->pool = (int)pool;
	ms->gpus = (int)gpus;
	ms->conf.tp = (int)tp;
	ms->conf.pp = (int)pp;
	ms->conf.dp = (int)dp;
	ms->conf.mb = (int)mb;
	ms->conf.rc = (enum recompute)rcomp;
	/* the stage; a record written before stages has true for 1 */
	ms->conf.zero = fsdp ? ZERO_3 : (enum zero_stage)zero;
	return NR_OK;
}

static int parse_switch(const struct jdoc *d, json_t *o, struct step_switch *sw,
			struct err *e)
{
	long groups;
	int rc;

	if ((rc = jdoc_check_keys(d, o, "switch", sr_switch_keys, e)) ||
	    (rc = jget_num(d, o, "switch", "move_s", true, -HUGE_VAL, HUGE_VAL, &sw->move_s, e)) ||
	    (rc = jget_num(d, o, "switch", "store_gib", true, -HUGE_VAL, HUGE_VAL, &sw->store_gib,
			   e)) ||
	    (rc = jget_bool(d, o, "switch", "new_communicator", true, &sw->communicator, e)) ||
	    (rc = jget_int(d, o, "switch", "groups", true, 0, 1 << 20, &groups, e)) ||
	    (rc = jget_bool(d, o, "switch", "new_engines", true, &sw->engines, e)))
		return rc;
	sw->groups = (int)groups;
	sw->known = true;
	return NR_OK;
}

static int parse_rl(const struct jdoc *d, json_t *o, struct step_rl *rl, struct err *e)
{
	int phase = 0, rc;

	if ((rc = jdoc_check_keys(d, o, "rl", sr_rl_keys, e)) ||
	    (rc = jget_enum(d, o, "rl", "phase", true, sr_rl_phases, &phase, e)))
		return rc;
	for (int i = 0; i < NRL_NUMS; i++)
		if ((rc = get_opt_num(d, o, "rl", sr_rl_keys[i + 1], false, sr_rl_num(rl, i), e)))
			return rc;
	rl->sft = phase == 1;
	rl->known = true;
	return NR_OK;
}

static int parse_fields(const struct jdoc *d, struct step_record *r, struct err *e)
{
	json_t *root = d->root, *resp = NULL, *stages = NULL, *sw = NULL, *rl = NULL, *o;
	long step, gpus_up, seqs = 0, prompt = 0, rmax = 0, staleness = 0;
	int status, rc;
	bool run;
	size_t i;

	if ((rc = jdoc_check_keys(d, root, "", sr_record_keys, e)) ||
	    (rc = jget_int(d, root, "", "step", true, 0, LONG_MAX, &step, e)) ||
	    (rc = jget_str(d, root, "", "engine", true, r->engine, sizeof r->engine, e)) ||
	    (rc = jget_int(d, root, "", "gpus_up", true, 1, MAX_GPUS, &gpus_up, e)) ||
	    (rc = jget_enum(d, root, "", "status", true, steprec_status_names, &status, e)))
		return rc;
	run = status != STEP_PAUSED;
	r->step = step;
	r->gpus_up = (int)gpus_up;
	r->status = (enum step_status)status;
	r->transition_s = 0;
	if ((rc = jget_int(d, root, "", "sequences", run, 1, LONG_MAX, &seqs, e)) ||
	    (rc = jget_int(d, root, "", "prompt_len", run, 1, LONG_MAX, &prompt, e)) ||
	    (rc = jget_obj(d, root, "", "response_len", run, &resp, e)) ||
	    (rc = get_opt_num(d, root, "", "step_time_s", run, &r->step_time_s, e)) ||
	    (rc = get_opt_num(d, root, "", "predicted_step_s", false, &r->predicted_step_s, e)) ||
	    (rc = jget_num(d, root, "", "transition_s", false, -HUGE_VAL, HUGE_VAL,
			   &r->transition_s, e)) ||
	    (rc = jget_obj(d, root, "", "switch", false, &sw, e)) ||
	    (sw && (rc = parse_switch(d, sw, &r->sw, e))) ||
	    (rc = jget_arr(d, root, "", "model_stages", run, &stages, e)) ||
	    (rc = jget_obj(d, root, "", "rl", false, &rl, e)) ||
	    (rc = jget_int(d, root, "", "staleness", false, 0, 1, &staleness, e)))
		return rc;
	r->staleness = (int)staleness;
	for (int k = 0; k < NRL_NUMS; k++)
		*sr_rl_num(&r->rl, k) = NAN;
	if (rl && (rc = parse_rl(d, rl, &r->rl, e)))
		return rc;
	r->sequences = seqs;
	r->prompt_len = prompt;
	r->response = (struct response_len){ NAN, NAN, 0 };
	if (resp && ((rc = jdoc_check_keys(d, resp, "response_len", sr_response_keys, e)) ||
		     (rc = jget_num(d, resp, "response_len", "mean", true, -HUGE_VAL, HUGE_VAL,
				    &r->response.mean, e)) ||
		     (rc = get_opt_num(d, resp, "response_len", "p90", false, &r->response.p90,
				       e)) ||
		     (rc = jget_int(d, resp, "response_len", "max", true, 1, LONG_MAX, &rmax, e))))
		return rc;
	r->response.max = rmax;
	if (stages && json_array_size(stages) > STEPREC_MAX_MS)
		return jdoc_fail(d, "model_stages", e, "expected at most %d model-stages, got %zu",
				 STEPREC_MAX_MS, json_array_size(stages));
	json_array_foreach(stages, i, o) {
		char path[64];
		jdoc_path_idx(path, sizeof path, "model_stages", i);
		if ((rc = parse_entry(d, o, path, &r->ms[i], e)))
			return rc;
		r->nms++;
	}
	return NR_OK;
}

/* A good line through the fast path; false leaves it to the loader. */
static bool parse_fast(const char *text, size_t len, const struct job *job,
		       const struct cluster *cl, struct step_record *r)
{
	struct err e;

	return sr_fast_record(text, len, r) && (!job || check_record(NULL, r, job, cl, &e) == NR_OK);
}

int steprec_parse(const char *name, long line, const char *text, size_t len,
		  const struct job *job, const struct cluster *cl, struct step_record *r,
		  bool *malformed, struct err *e)
{
	struct jdoc d;
	bool shape = true;
	int rc;

	memset(r, 0, sizeof *r);
	if (parse_fast(text, len, job, cl, r)) {
		if (malformed)
			*malformed = false;
		return NR_OK;
	}
	/* again with the index, for a message that names the column */
	memset(r, 0, sizeof *r);
	rc = jdoc_loadb(&d, name, text, len, "step", e);
	if (rc == NR_EINPUT) {
		size_t at;
		char key[64];
		if (find_nan(text, len, &at, key, sizeof key)) {
			shape = false;
			err_set(e, NR_EINPUT, "%s:1:%d: %s%s%snot a number (NaN or infinity): "
				"expected a positive finite number", shown(name), column(text, at),
				*key ? "\"" : "", key, *key ? "\": " : "");
		} else if ((at = (size_t)jdoc_line_cut(text, len))) {
			err_set(e, NR_EINPUT, "%s:1:%zu: expected one JSON object per line (JSON "
				"Lines), and this line ends inside one", shown(name), at);
		}
	} else if (rc == NR_OK) {
		rc = parse_fields(&d, r, e);
		if (rc == NR_OK && job) {
			shape = false;
			rc = check_record(&d, r, job, cl, e);
		}
		jdoc_free(&d);
	}
	if (rc != NR_OK)
		relocate(e, name, line);
	if (malformed)
		*malformed = rc != NR_OK && shape;
	return rc;
}

/* --- writing -------------------------------------------------------------- */

static json_t *num_or_null(double x)
{
	return isnan(x) ? json_null() : json_real(x);
}

static json_t *entry_json(const struct ms_record *ms)
{
	const struct pconf *c = &ms->conf;
	json_t *o = json_object();

	json_object_set_new(o, "model", json_string(ms->model));
	json_object_set_new(o, "stage", json_string(job_stage_names[ms->stage]));
	json_object_set_new(o, "pool", json_integer(ms->pool));
	json_object_set_new(o, "gpus", json_integer(ms->gpus));
	json_object_set_new(o, "tp", json_integer(c->tp));
	if (ms->stage != STAGE_GEN)
		json_object_set_new(o, "pp", json_integer(c->pp));
	json_object_set_new(o, "dp", json_integer(c->dp));
	if (ms->stage == STAGE_GEN) {
		json_object_set_new(o, "same_pool", json_boolean(ms->same_pool));
	} else {
		json_object_set_new(o, "micro_batch", json_integer(c->mb));
		if (ms->stage == STAGE_TRAIN) {
			json_object_set_new(o, "recompute", json_string(pconf_recompute_names[c->rc]));
			json_object_set_new(o, "zero", json_integer(c->zero));
		}
		json_object_set_new(o, "fsdp", json_boolean(c->zero == ZERO_3));
		json_object_set_new(o, "offload", json_boolean(c->offload));
	}
	json_object_set_new(o, "time_s", num_or_null(ms->time_s));
	if (!isnan(ms->move_s))
		json_object_set_new(o, "move_s", json_real(ms->move_s));
	if (!isnan(ms->predicted_s))
		json_object_set_new(o, "predicted_s", json_real(ms->predicted_s));
	json_object_set_new(o, "peak_gib", num_or_null(ms->peak_gib));
	if (ms->stage == STAGE_GEN)
		json_object_set_new(o, "concurrency", num_or_null(ms->concurrency));
	if (!isnan(ms->predicted_move_s))
		json_object_set_new(o, "predicted_move_s", json_real(ms->predicted_move_s));
	return o;
}

json_t *steprec_to_json(const struct step_record *r)
{
	json_t *o = json_object(), *stages = json_array();
	bool run = r->status != STEP_PAUSED;

	if (!o || !stages) {
		json_decref(o);
		json_decref(stages);
		return NULL;
	}
	json_object_set_new(o, "nereus", json_integer(NR_FORMAT));
	json_object_set_new(o, "kind", json_string("step"));
	json_object_set_new(o, "step", json_integer(r->step));
	json_object_set_new(o, "engine", json_string(r->engine));
	json_object_set_new(o, "gpus_up", json_integer(r->gpus_up));
	json_object_set_new(o, "status", json_string(steprec_status_names[r->status]));
	if (run) {
		json_object_set_new(o, "sequences", json_integer(r->sequences));
		json_object_set_new(o, "prompt_len", json_integer(r->prompt_len));
		json_t *rl = json_pack("{s:f}", "mean", r->response.mean);
		if (!isnan(r->response.p90))
			json_object_set_new(rl, "p90", json_real(r->response.p90));
		json_object_set_new(rl, "max", json_integer((json_int_t)r->response.max));
		json_object_set_new(o, "response_len", rl);
	}
	json_object_set_new(o, "step_time_s", num_or_null(r->step_time_s));
	if (!isnan(r->predicted_step_s))
		json_object_set_new(o, "predicted_step_s", json_real(r->predicted_step_s));
	json_object_set_new(o, "transition_s", json_real(r->transition_s));
	if (r->sw.known)
		json_object_set_new(o, "switch", json_pack(
			"{s:f,s:f,s:b,s:i,s:b}", "move_s", r->sw.move_s, "store_gib",
			r->sw.store_gib, "new_communicator", r->sw.communicator, "groups",
			r->sw.groups, "new_engines", r->sw.engines));
	for (int i = 0; i < r->nms; i++)
		json_array_append_new(stages, entry_json(&r->ms[i]));
	if (run)
		json_object_set_new(o, "model_stages", stages);
	else
		json_decref(stages);
	if (r->rl.known) {
		json_t *rl = json_object();

		json_object_set_new(rl, "phase", json_string(sr_rl_phases[r->rl.sft]));
		for (int k = 0; k < NRL_NUMS; k++)
			json_object_set_new(rl, sr_rl_keys[k + 1], num_or_null(rl_value(&r->rl, k)));
		json_object_set_new(o, "rl", rl);
	}
	if (r->staleness)
		json_object_set_new(o, "staleness", json_integer(r->staleness));
	return o;
}

char *steprec_line(const struct step_record *r)
{
	json_t *o = steprec_to_json(r);
	char *line = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(10)) : NULL;

	json_decref(o);
	return line;
}

int steprec_fprint(FILE *f, const struct step_record *r, struct err *e)
{
	char *line = steprec_line(r);
	int bad_write;

	if (!line)
		return err_oom(e);
	bad_write = fputs(line, f) == EOF || fputc('\n', f) == EOF;
	free(line);
	if (bad_write)
		return err_set(e, NR_EIO, "cannot write a step record: %s", strerror(errno));
	return NR_OK;
}

double steprec_stages_s(const struct step_record *r)
{
	double total = 0;

	for (int s = 0; s < NSTAGES; s++) {
		double pool_t[MAX_ITEMS] = { 0 }, worst = 0;
		for (int i = 0; i < r->nms; i++)
			if (r->ms[i].stage == (enum stage)s && r->ms[i].pool >= 0 &&
			    r->ms[i].pool < MAX_ITEMS)
				pool_t[r->ms[i].pool] += r->ms[i].time_s;
		for (int p = 0; p < MAX_ITEMS; p++)
			worst = fmax(worst, pool_t[p]);
		total += worst;
	}
	for (int i = 0; i < r->nms; i++)
		if (isnan(r->ms[i].time_s))
			return NAN;
	return total;
}

