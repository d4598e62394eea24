/* The switch decision and the baseline layouts (see decide.h). */
#include "plan/decide.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const char *const layout_names[NLAYOUTS + 1] = { "adaptive", "verl", "openrlhf", "fixed",
						 NULL };

void plan_decide(const struct env *v, const struct plan *cur, const struct plan *next,
		 long remaining_steps, double min_gain, struct decision *d)
{
	plan_decide_with(v, cur, next, remaining_steps, min_gain, -1, d);
}

void plan_decide_with(const struct env *v, const struct plan *cur, const struct plan *next,
		      long remaining_steps, double min_gain, double transition_s,
		      struct decision *d)
{
	struct move mv;

	memset(d, 0, sizeof *d);
	plan_move(v, cur, next, &mv);
	d->current_step_s = cur->step_time;
	d->next_step_s = next->step_time;
	d->graph = transition_s >= 0;
	d->transition_s = d->graph ? transition_s : mv.seconds;
	d->move_bytes = mv.total_bytes;
	d->remaining_steps = remaining_steps;
	d->min_gain = min_gain;
	if (!cur->feasible) {
		d->forced = d->do_switch = true;
		d->gain_s = NAN;
		d->break_even_steps = 0;
		snprintf(d->reason, sizeof d->reason, "the current plan no longer fits: %s",
			 cur->why);
		return;
	}
	d->gain_s = cur->step_time - next->step_time;
	if (d->gain_s <= min_gain * cur->step_time) {
		d->break_even_steps = INFINITY;
		if (d->gain_s > 0)
			snprintf(d->reason, sizeof d->reason, "the new plan saves %.3f s per "
				 "step, under the %.1f%% needed to switch", d->gain_s,
				 min_gain * 100);
		else
			snprintf(d->reason, sizeof d->reason, "the current plan is as fast or "
				 "faster (%.3f s per step)", cur->step_time);
		return;
	}
	d->break_even_steps = d->transition_s / d->gain_s;
	if (remaining_steps >= 0 && d->break_even_steps >= remaining_steps) {
		snprintf(d->reason, sizeof d->reason, "the switch takes %.1f s and pays back "
			 "after %.1f steps, but only %ld remain", d->transition_s,
			 d->break_even_steps, remaining_steps);
		return;
	}
	d->do_switch = true;
	snprintf(d->reason, sizeof d->reason, "saves %.3f s per step (%.1f%%); the %.1f s "
		 "switch pays back after %.1f steps", d->gain_s,
		 100 * d->gain_s / cur->step_time, d->transition_s, d->break_even_steps);
}

json_t *decision_to_json(const struct decision *d)
{
	json_t *o = json_object();

	json_object_set_new(o, "switch", json_boolean(d->do_switch));
	json_object_set_new(o, "forced", json_boolean(d->forced));
	json_object_set_new(o, "current_step_s", json_real(d->current_step_s));
	json_object_set_new(o, "next_step_s", json_real(d->next_step_s));
	json_object_set_new(o, "gain_per_step_s", isfinite(d->gain_s) ?
			    json_real(d->gain_s) : json_null());
	json_object_set_new(o, "transition_s", json_real(d->transition_s));
	json_object_set_new(o, "transition_source", json_string(d->graph ?
		"transition graph schedule" : "bytes over link bandwidth (lower bound)"));
	json_object_set_new(o, "move_gib", json_real(d->move_bytes / GIB));
	json_object_set_new(o, "break_even_steps", isfinite(d->break_even_steps) ?
			    json_real(d->break_even_steps) : json_null());
	json_object_set_new(o, "remaining_steps", d->remaining_steps >= 0 ?
			    json_integer(d->remaining_steps) : json_null());
	json_object_set_new(o, "min_gain", json_real(d->min_gain));
	json_object_set_new(o, "reason", json_string(d->reason));
	return o;
}

/* verl and OpenRLHF size their rollout engines' TP by model size in their
 * example configurations: 1 for small models, 2 around 7–8B, up to 8 for
 * 70B. */
static int rollout_tp(const struct arch *a, int gpn)
{
	double p = arch_params(a);
	int t = p < 3e9 ? 1 : p < 14e9 ? 2 : p < 40e9 ? 4 : 8;

	while (t > 1 && (t > gpn || a->kv_heads % t || a->heads % t))
		t /= 2;
	return t;
}

/* FSDP / ZeRO-3 for every model: TP1, PP1, everything sharded over DP
 * (a pool of one GPU has nothing to shard over). */
static void fully_sharded(const struct job *j, struct space *sp)
{
	for (int m = 0; m < j->nmodels; m++) {
		sp->home[m].tp = sp->home[m].pp = 1;
		sp->home[m].zero = model_trainable(&j->models[m]) ?
			1u << ZERO_1 | 1u << ZERO_3 : 1u << ZERO_0 | 1u << ZERO_3;
	}
}

static int layout_verl(const struct env *v, struct space *sp)
{
	const struct job *j = v->job;
	int gpn = v->cl->gpus_per_node;

	/* everything colocated on every GPU; every model on FSDP (TP1, PP1,
	 * weights, gradients and optimizer sharded); recompute, micro-batch and
	 * offload left to the search */
	sp->npools = 1;
	sp->pool_items[0] = (1u << (1 + j->nmodels)) - 1;
	fully_sharded(j, sp);
	sp->gen.tp = rollout_tp(&j->models[job_actor(j)].arch, gpn);
	return NR_OK;
}

/* Largest size ≤ want a pool may take: whole nodes, or a power of two
 * inside one. */
static int round_size(int want, int gpn)
{
	int z = 1;

	if (want >= gpn)
		return want / gpn * gpn;
	while (z * 2 <= want)
		z *= 2;
	return z;
}

static int layout_openrlhf(const struct env *v, struct space *sp, struct err *e)
{
	const struct job *j = v->job;
	int gpn = v->cl->gpus_per_node, n = cluster_gpus_up(v->cl);
	double share[MAX_ITEMS], sum = 2; /* the vLLM engines weigh as the actor */

	/* a pool per model and one for the vLLM engines; models on DeepSpeed
	 * ZeRO-3 (TP1, PP1, everything sharded); pools sized actor = critic =
	 * engines = 2 × reference = 2 × reward, as its example scripts do */
	sp->npools = 1 + j->nmodels;
	share[0] = 2;
	for (int m = 0; m < j->nmodels; m++) {
		share[1 + m] = j->models[m].role == ROLE_ACTOR || j->models[m].role == ROLE_CRITIC ?
			       2 : 1;
		sum += share[1 + m];
	}
	for (int i = 0; i < sp->npools; i++) {
		sp->pool_items[i] = 1u << i;
		sp->pool_size[i] = round_size((int)(n * share[i] / sum), gpn);
		if (sp->pool_size[i] < 1)
			return err_set(e, NR_EINFEASIBLE, "the OpenRLHF layout needs a GPU per "
				       "model and one for the engines: %d GPUs are up", n);
	}
	fully_sharded(j, sp);
	sp->gen.tp = rollout_tp(&j->models[job_actor(j)].arch, gpn);
	while (sp->gen.tp > sp->pool_size[0])
		sp->gen.tp /= 2;
	return NR_OK;
}

static int layout_fixed(const struct env *v, const struct plan *cur, struct space *sp,
			struct err *e)
{
	const struct job *j = v->job;

	if (!cur)
		return err_set(e, NR_EINPUT, "--layout fixed keeps the TP/PP of a plan: give "
			       "it with --current");
	/* the same pools and TP/PP; only DP (the pool sizes) follows the GPUs */
	sp->npools = cur->npools;
	for (int i = 0; i < cur->npools; i++)
		sp->pool_items[i] = cur->pools[i].items;
	for (int m = 0; m < j->nmodels; m++) {
		sp->home[m].tp = cur->home[m].tp;
		sp->home[m].pp = cur->home[m].pp;
		sp->home[m].mb = cur->home[m].mb;
		sp->home[m].rc = (int)cur->home[m].rc;
		sp->home[m].zero = 1u << cur->home[m].zero;
		sp->home[m].offload = cur->home[m].offload;
	}
	sp->gen.tp = cur->gen.tp;
	return NR_OK;
}

int layout_space(const struct env *v, enum plan_layout l, const struct plan *current,
		 struct space *sp, struct err *e)
{
	switch (l) {
	case LAYOUT_VERL:
		return layout_verl(v, sp);
	case LAYOUT_OPENRLHF:
		return layout_openrlhf(v, sp, e);
	case LAYOUT_FIXED:
		return layout_fixed(v, current, sp, e);
	default:
		return NR_OK;
	}
}
