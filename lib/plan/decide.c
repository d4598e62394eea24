/* The switch decision and the price of a switch (see decide.h). */
#include "plan/decide.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- what a switch costs ---------------------------------------------------- */

/* Communicators a GPU keeps for one layout: one per kind of group that has
 * more than one GPU. */
static int kinds(const struct pconf *c)
{
	return (c->tp > 1) + (c->pp > 1) + (c->dp > 1);
}

static bool same_groups(const struct pconf *x, const struct pconf *y)
{
	return x->tp == y->tp && x->pp == y->pp && x->dp == y->dp;
}

static bool holds(const struct plan *p, int g, int item)
{
	return p->gpu_pool[g] >= 0 && (p->pools[p->gpu_pool[g]].items & (1u << item));
}

/* Whether item sits on the same GPUs in a and b. */
static bool same_gpus(const struct plan *a, const struct plan *b, int n, int item)
{
	for (int g = 0; g < n; g++)
		if (holds(a, g, item) != holds(b, g, item))
			return false;
	return true;
}

void plan_switch_fixed(const struct env *v, const struct plan *a, const struct plan *b,
		  struct switch_cost *c)
{
	const struct job *j = v->job;
	int n = cluster_gpus(v->cl);
	bool changed[MAX_ITEMS];

	/* NCCL cannot add a rank to a communicator nor keep one whose rank is
	 * gone: a new GPU, or a lost one, means the job's communicator anew */
	c->world = false;
	for (int g = 0; g < n && !c->world; g++)
		c->world = (b->gpu_pool[g] >= 0 && a->gpu_pool[g] < 0) ||
			   (a->gpu_pool[g] >= 0 && !v->cl->up[g]);
	changed[ITEM_GEN] = c->world || a->gen.tp != b->gen.tp || a->gen.dp != b->gen.dp ||
			    !same_gpus(a, b, n, ITEM_GEN);
	for (int m = 0; m < j->nmodels; m++)
		changed[1 + m] = c->world || !same_groups(&a->home[m], &b->home[m]) ||
				 !same_gpus(a, b, n, 1 + m);
	c->groups = 0;
	c->engines = a->gen.tp != b->gen.tp;
	for (int g = 0; g < n; g++) {
		int k = 0;
		if (b->gpu_pool[g] < 0)
			continue;
		for (int m = 0; m < j->nmodels; m++)
			k += holds(b, g, 1 + m) && changed[1 + m] ? kinds(&b->home[m]) : 0;
		if (holds(b, g, ITEM_GEN)) {
			k += changed[ITEM_GEN] && b->gen.tp > 1;
			c->engines |= !holds(a, g, ITEM_GEN);
		}
		c->groups = k > c->groups ? k : c->groups;
	}
	c->comm_s = (c->world ? v->k->comm_init_s : 0) + c->groups * v->k->comm_group_s;
	c->engine_s = c->engines ? v->k->engine_init_s : 0;
	c->total_s = c->move_s + c->store_s + c->comm_s + c->engine_s;
}

void plan_switch_cost(const struct env *v, const struct plan *a, const struct plan *b,
		 double move_s, double store_bytes, struct switch_cost *c)
{
	struct move mv;

	memset(c, 0, sizeof *c);
	plan_move(v, a, b, &mv);
	c->move_bytes = mv.total_bytes;
	c->graph = move_s >= 0;
	c->move_s = c->graph ? move_s : mv.seconds;
	c->store_bytes = c->graph ? store_bytes : 0;
	/* every reader shares the store: its bandwidth, not each GPU's host
	 * link, bounds how soon the last lost piece arrives */
	c->store_s = fmax(0, c->store_bytes / (v->k->store_gbps * 1e9) - c->move_s);
	plan_switch_fixed(v, a, b, c);
}

void plan_switch_cost_add(struct switch_cost *sum, const struct switch_cost *c)
{
	sum->move_s += c->move_s;
	sum->move_bytes += c->move_bytes;
	sum->store_bytes += c->store_bytes;
	sum->store_s += c->store_s;
	sum->groups += c->groups;
	sum->comm_s += c->comm_s;
	sum->engine_s += c->engine_s;
	sum->total_s += c->total_s;
}

json_t *plan_switch_cost_to_json(const struct switch_cost *c)
{
	json_t *o = json_object();

	json_object_set_new(o, "move_s", json_real(c->move_s));
	json_object_set_new(o, "move_source", json_string(c->graph ?
		"transition graph schedule" : "bytes over link bandwidth (lower bound)"));
	json_object_set_new(o, "move_gib", json_real(c->move_bytes / GIB));
	json_object_set_new(o, "store_gib", json_real(c->store_bytes / GIB));
	json_object_set_new(o, "store_s", json_real(c->store_s));
	json_object_set_new(o, "communicator_new", json_boolean(c->world));
	json_object_set_new(o, "groups", json_integer(c->groups));
	json_object_set_new(o, "communicators_s", json_real(c->comm_s));
	json_object_set_new(o, "engines_new", json_boolean(c->engines));
	json_object_set_new(o, "engines_s", json_real(c->engine_s));
	return o;
}

/* --- the decision -------------------------------------------------------------- */

/* The parts of a switch's time, in words: "1.2 s moving state, 30.0 s
 * communicators". */
static void parts_in_words(const struct switch_cost *c, char *buf, size_t n)
{
	int k = snprintf(buf, n, "%.1f s moving state", c->move_s);

	if (c->store_s > 0 && k >= 0 && (size_t)k < n)
		k += snprintf(buf + k, n - (size_t)k, ", %.1f s more reading %.1f GiB from the "
			      "store", c->store_s, c->store_bytes / GIB);
	if (c->comm_s > 0 && k >= 0 && (size_t)k < n)
		k += snprintf(buf + k, n - (size_t)k, ", %.1f s creating communicators%s",
			      c->comm_s, c->world ? " (the job's anew)" : "");
	if (c->engine_s > 0 && k >= 0 && (size_t)k < n)
		snprintf(buf + k, n - (size_t)k, ", %.1f s re-creating the engines", c->engine_s);
}

void plan_decide(const struct env *v, const struct plan *cur, const struct plan *next,
		 long remaining_steps, double min_gain, struct decision *d)
{
	plan_decide_with(v, cur, next, remaining_steps, min_gain, NULL, d);
}

void plan_decide_with(const struct env *v, const struct plan *cur, const struct plan *next,
		      long remaining_steps, double min_gain, const struct switch_cost *price,
		      struct decision *d)
{
	char parts[320];

	memset(d, 0, sizeof *d);
	if (price)
		d->cost = *price;
	else
		plan_switch_cost(v, cur, next, -1, 0, &d->cost);
	d->current_step_s = cur->step_time;
	d->next_step_s = next->step_time;
	d->transition_s = d->cost.total_s;
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
	parts_in_words(&d->cost, parts, sizeof parts);
	if (remaining_steps >= 0 && d->break_even_steps >= remaining_steps) {
		snprintf(d->reason, sizeof d->reason, "the switch takes %.1f s (%s) and pays back "
			 "after %.1f steps, but only %ld remain", d->transition_s, parts,
			 d->break_even_steps, remaining_steps);
		return;
	}
	d->do_switch = true;
	snprintf(d->reason, sizeof d->reason, "saves %.3f s per step (%.1f%%); the %.1f s "
		 "switch (%s) pays back after %.1f steps", d->gain_s,
		 100 * d->gain_s / cur->step_time, d->transition_s, parts, d->break_even_steps);
}

json_t *plan_decision_to_json(const struct decision *d)
{
	json_t *o = json_object();

	json_object_set_new(o, "switch", json_boolean(d->do_switch));
	json_object_set_new(o, "forced", json_boolean(d->forced));
	json_object_set_new(o, "current_step_s", json_real(d->current_step_s));
	json_object_set_new(o, "next_step_s", json_real(d->next_step_s));
	json_object_set_new(o, "gain_per_step_s", isfinite(d->gain_s) ?
			    json_real(d->gain_s) : json_null());
	json_object_set_new(o, "transition_s", json_real(d->transition_s));
	json_object_set_new(o, "transition_source", json_string(d->cost.graph ?
		"transition graph schedule" : "bytes over link bandwidth (lower bound)"));
	json_object_set_new(o, "move_gib", json_real(d->cost.move_bytes / GIB));
	json_object_set_new(o, "transition", plan_switch_cost_to_json(&d->cost));
	json_object_set_new(o, "break_even_steps", isfinite(d->break_even_steps) ?
			    json_real(d->break_even_steps) : json_null());
	json_object_set_new(o, "remaining_steps", d->remaining_steps >= 0 ?
			    json_integer(d->remaining_steps) : json_null());
	json_object_set_new(o, "min_gain", json_real(d->min_gain));
	json_object_set_new(o, "reason", json_string(d->reason));
	return o;
}
