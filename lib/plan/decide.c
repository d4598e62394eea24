/* The switch decision (see decide.h). */
#include "plan/decide.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

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
