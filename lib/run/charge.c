/* Charging transitions (see charge.h). */
#include "run/charge.h"

#include "state/tgraph.h"

double charge_transition(const struct env *v, const struct plan *a, const struct plan *b,
			 bool graph, bool *bound)
{
	struct move mv;
	struct err e;
	double s;

	if (graph && tgraph_transition_seconds(v, a, b, &s, &e) == NR_OK) {
		if (bound)
			*bound = false;
		return s;
	}
	plan_move(v, a, b, &mv);
	if (bound)
		*bound = true;
	return mv.seconds;
}
