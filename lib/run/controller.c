/* The controller (see controller.h). */
#include "run/controller.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/mem.h"

const char *const ctl_act_names[] = { "keep", "start", "switch", "pause", NULL };

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void ctl_init(struct controller *c, enum plan_layout policy, double min_gain, const struct coef *k)
{
	memset(c, 0, sizeof *c);
	c->policy = policy;
	c->min_gain = min_gain;
	c->refit_tol = 0.01;
	c->price_graph = true;
	c->k = *k;
	memo_init(&c->memo, CTL_MEMO, 0, sizeof(struct ctl_memo));
	charge_init(&c->charge, true);
}

void ctl_free(struct controller *c)
{
	memo_free(&c->memo);
	charge_free(&c->charge);
}

/* --- the space of each policy -------------------------------------------- */

/* The fixed baseline keeps the pools, each model's TP and PP and the
 * engines' TP of the first plan; DP follows the GPUs.  Micro-batch,
 * recompute, sharding and offload stay free, as anyone running a fixed
 * layout retunes them when responses grow. */
static int policy_space(const struct controller *c, const struct env *v, struct space *sp,
			struct err *e)
{
	struct space free_sp;
	int rc;

	search_space_init(sp);
	sp->max_staleness = c->max_staleness;
	if (c->policy != LAYOUT_FIXED)
		return layout_space(v, c->policy, NULL, sp, e);
	if ((rc = layout_space(v, LAYOUT_FIXED, &c->ref, sp, e)))
		return rc;
	search_space_init(&free_sp);
	for (int m = 0; m < MAX_MODELS; m++) {
		struct pin p = free_sp.home[m];
		p.tp = sp->home[m].tp;
		p.pp = sp->home[m].pp;
		sp->home[m] = p;
	}
	return NR_OK;
}

static int search_in(struct controller *c, const struct env *v, const struct space *sp,
		     const struct plan *cur, struct plan *best, struct err *e)
{
	struct search_stats st;
	int rc;

	snprintf(best->layout, sizeof best->layout, "%s", layout_names[c->policy]);
	rc = plan_search(v, sp, false, cur, best, &st, e);
	c->st.searches++;
	c->st.search_s += st.seconds;
	return rc;
}

/* The best plan for w: on the cluster as it is and, when some GPUs run
 * slow, also without them; whichever is faster once the slow GPUs pace
 * their pools. */
static int search_now(struct controller *c, const struct cond *w, struct plan *best,
		      struct plan *alt, struct err *e)
{
	struct env v = { &w->job, &w->cl, &c->k };
	const struct plan *cur = c->running ? &c->cur : NULL;
	struct space sp;
	struct err eb;
	int rc, rb;

	rc = policy_space(c, &v, &sp, e);
	if (rc == NR_OK)
		rc = search_in(c, &v, &sp, cur, best, e);
	if (rc != NR_OK && rc != NR_EINFEASIBLE)
		return rc;
	if (w->nslow) {
		struct cluster *view = malloc(sizeof *view);
		struct env vb = { &w->job, view, &c->k };
		if (!view)
			return err_oom(e);
		*view = w->cl;
		for (int g = 0; g < cluster_gpus(view); g++)
			if (w->slow[g] > 1)
				view->up[g] = false;
		rb = NR_EINFEASIBLE;
		if (cluster_gpus_up(view) > 0 && (rb = policy_space(c, &vb, &sp, &eb)) == NR_OK)
			rb = search_in(c, &vb, &sp, cur, alt, &eb);
		free(view);
		if (rb != NR_OK && rb != NR_EINFEASIBLE)
			return err_set(e, rb, "%s", eb.msg);
		if (rb == NR_OK && (rc != NR_OK || cond_step_time(w, &c->k, alt, NULL) <
						       cond_step_time(w, &c->k, best, NULL))) {
			memcpy(best, alt, sizeof *best);
			plan_evaluate(&v, best);
			rc = NR_OK;
		}
	}
	return rc;
}

int ctl_best(struct controller *c, const struct cond *w, struct plan *best, struct err *e)
{
	return search_now(c, w, best, &c->scratch[1], e);
}

int ctl_fits(struct controller *c, const struct cond *w, bool all_up, struct err *e)
{
	struct cluster *cl = malloc(sizeof *cl);
	struct plan *best = malloc(sizeof *best);
	struct env v = { &w->job, cl, &c->k };
	struct space sp;
	int rc;

	if (!cl || !best) {
		free(cl);
		free(best);
		return err_oom(e);
	}
	*cl = w->cl;
	for (int g = 0; all_up && g < cluster_gpus(cl); g++)
		cl->up[g] = true;
	/* the fixed policy keeps adaptive's first plan: until it has one, it
	 * fits where adaptive does */
	search_space_init(&sp);
	rc = c->policy == LAYOUT_FIXED && !c->have_ref ? NR_OK : policy_space(c, &v, &sp, e);
	if (rc == NR_OK)
		rc = search_in(c, &v, &sp, NULL, best, e);
	free(cl);
	free(best);
	return rc;
}

const char *ctl_name(const struct controller *c)
{
	return c->label ? c->label : layout_names[c->policy];
}

/* --- memoized searches ------------------------------------------------------ */

struct buf {
	unsigned char *p;
	size_t n, cap;
	bool oom;
};

static void put(struct buf *b, const void *x, size_t n)
{
	if (b->oom)
		return;
	if (mem_grow(&b->p, &b->cap, b->n + n, 1)) {
		b->oom = true;
		return;
	}
	memcpy(b->p + b->n, x, n);
	b->n += n;
}

/* Everything a search depends on, field by field (no struct padding). */
static bool memo_key(const struct controller *c, const struct cond *w, struct buf *b)
{
	int n = cluster_gpus(&w->cl);
	unsigned char running = c->running;

	put(b, &c->epoch, sizeof c->epoch);
	put(b, &running, 1);
	put(b, &n, sizeof n);
	for (int g = 0; g < n; g++) {
		unsigned char up = w->cl.up[g];
		put(b, &up, 1);
	}
	put(b, &w->nslow, sizeof w->nslow);
	if (w->nslow)
		put(b, w->slow, (size_t)n * sizeof w->slow[0]);
	put(b, &w->job.response.mean, sizeof(double));
	put(b, &w->job.response.p90, sizeof(double));
	put(b, &w->job.response.max, sizeof(long));
	put(b, &w->cl.headroom, sizeof(double));
	for (int i = 0; i < COEF_FIELDS; i++) {
		double x = cost_coef_get(&c->k, i);
		put(b, &x, sizeof x);
	}
	return !b->oom;
}

/* The best plan for w, from the memo when the inputs were seen before.
 * Returns NR_OK with *best pointing into the memo, NR_EINFEASIBLE with
 * the reason in why, or an error. */
static int best_now(struct controller *c, const struct cond *w, struct plan **best,
		    struct plan *alt, char *why, size_t nwhy, struct err *e)
{
	struct buf b = { 0 };
	struct ctl_memo *m;
	struct err se = { 0 };
	int i, rc;

	if (!memo_key(c, w, &b)) {
		free(b.p);
		return err_oom(e);
	}
	if ((m = memo_find(&c->memo, b.p, b.n))) {
		free(b.p);
		*best = &m->best;
		snprintf(why, nwhy, "%s", m->why);
		return m->rc;
	}
	if ((i = memo_claim(&c->memo, b.n)) < 0) {
		free(b.p);
		return err_oom(e);
	}
	m = memo_val(&c->memo, i);
	rc = search_now(c, w, &m->best, alt, &se);
	if (rc != NR_OK && rc != NR_EINFEASIBLE) {
		free(b.p);
		return err_set(e, rc, "%s", se.msg);
	}
	memo_keep(&c->memo, i, b.p, b.n);
	m->rc = rc;
	snprintf(m->why, sizeof m->why, "%s", rc ? se.msg : "");
	*best = &m->best;
	snprintf(why, nwhy, "%s", m->why);
	return rc;
}

/* --- deciding ------------------------------------------------------------------ */

static bool coef_moved(const struct coef *a, const struct coef *b, double tol)
{
	for (int i = 0; i < COEF_FIELDS; i++) {
		double x = cost_coef_get(a, i), y = cost_coef_get(b, i);
		if (fabs(x - y) > tol * fmax(fabs(x), fabs(y)))
			return true;
	}
	return false;
}

/* A GPU that went down lost what it held: move it to an empty pool, so
 * that a later transition counts its share as missing, without renumbering
 * the ranks of the GPUs that kept theirs. */
static void forget_lost(struct plan *held, const struct cond *w)
{
	int lost = held->npools;

	if (lost >= MAX_ITEMS)
		return;
	held->pools[lost].items = 0;
	held->pools[lost].ngpus = 0;
	for (int g = 0; g < cluster_gpus(&w->cl); g++)
		if (held->gpu_pool[g] >= 0 && !w->cl.up[g])
			held->gpu_pool[g] = lost;
}

/* The cost of a switch from a to b (charge.h). */
static int price(struct controller *c, const struct env *v, const struct plan *a,
		 const struct plan *b, struct switch_cost *sc, struct err *e)
{
	long built = c->charge.built;
	double t0 = c->charge.seconds;
	int rc;

	c->charge.graph = c->price_graph;
	if ((rc = charge_price(&c->charge, v, a, b, sc, e)))
		return rc;
	c->st.charge_s += c->charge.seconds - t0;
	c->st.built += c->charge.built - built;
	c->st.charged++;
	c->st.by_bound += !sc->graph;
	return NR_OK;
}

/* plan_decide weighed the switch with plan_move's lower bound; a switch it
 * lets through is priced and decided again at that price: it must still
 * pay back before the run ends. */
static int charge(struct controller *c, const struct env *v, const struct plan *cur,
		  const struct plan *next, long remaining, struct decision *d, struct err *e)
{
	struct switch_cost sc;
	int rc;

	if ((rc = price(c, v, cur, next, &sc, e)))
		return rc;
	plan_decide_with(v, cur, next, remaining, c->min_gain, &sc, d);
	return NR_OK;
}

/* The plan of the fixed baseline: the one adaptive picks first. */
static int fixed_ref(struct controller *c, const struct cond *w, struct err *e)
{
	struct env v = { &w->job, &w->cl, &c->k };
	struct search_stats st;
	struct space sp;
	int rc;

	search_space_init(&sp);
	rc = plan_search(&v, &sp, false, NULL, &c->ref, &st, e);
	c->st.searches++;
	c->st.search_s += st.seconds;
	if (rc == NR_OK)
		c->have_ref = true;
	return rc;
}

/* Nothing runs from now on: the plan running, if any, is held. */
static void pause_now(struct controller *c, const struct cond *w, struct ctl_out *out,
		      const char *why)
{
	if (c->running) {
		memcpy(&c->held, &c->cur, sizeof c->held);
		c->have_held = true;
		c->running = false;
		c->epoch++;
	} else if (c->st.pauses || c->st.starts) {
		if (c->have_held)
			forget_lost(&c->held, w);
		snprintf(out->why, sizeof out->why, "stay paused: %s", why);
		return;
	}
	if (c->have_held)
		forget_lost(&c->held, w);
	out->act = CTL_PAUSE;
	c->st.pauses++;
	snprintf(out->why, sizeof out->why, "pause: %s", why);
}

/* Follow the script: its plan for this step, switching when it changes. */
static int decide_scripted(struct controller *c, const struct cond *w, long remaining,
			   struct ctl_out *out, struct plan *scratch, struct err *e)
{
	const struct ctl_script *sc = c->script;
	struct env v = { &w->job, &w->cl, &c->k };
	long step = sc->steps - remaining;
	const struct plan *want;
	int i = 0, rc;

	while (i + 1 < sc->n && sc->from[i + 1] <= step)
		i++;
	want = sc->plans[i];
	if (!want) {
		pause_now(c, w, out, "nothing fits, as the schedule knew");
		return NR_OK;
	}
	if (c->running && want == c->script_cur)
		return NR_OK;
	memcpy(&scratch[1], want, sizeof scratch[1]);
	plan_evaluate(&v, &scratch[1]);
	scratch[1].step_time = cond_step_time(w, &c->k, &scratch[1], NULL);
	if (!c->running) {
		out->act = CTL_START;
		if (c->have_held) {
			if ((rc = price(c, &v, &c->held, &scratch[1], &out->cost, e)))
				return rc;
			out->transition_s = out->cost.total_s;
			plan_switch_cost_add(&c->st.spent, &out->cost);
		}
		c->have_held = false;
		c->st.starts++;
		snprintf(out->why, sizeof out->why, "start: %.3f s per step, as scheduled",
			 scratch[1].step_time);
	} else {
		memcpy(&scratch[0], &c->cur, sizeof scratch[0]);
		plan_evaluate(&v, &scratch[0]);
		if (scratch[0].feasible)
			scratch[0].step_time = cond_step_time(w, &c->k, &scratch[0], NULL);
		if ((rc = price(c, &v, &scratch[0], &scratch[1], &out->cost, e)))
			return rc;
		plan_decide_with(&v, &scratch[0], &scratch[1], remaining, 0, &out->cost, &out->d);
		out->d.do_switch = true;
		out->act = CTL_SWITCH;
		out->transition_s = out->cost.total_s;
		plan_switch_cost_add(&c->st.spent, &out->cost);
		memcpy(&c->prev, &c->cur, sizeof c->prev);
		c->st.switches++;
		snprintf(out->why, sizeof out->why, "switch, as scheduled: %.3f s per step, a "
			 "%.1f s switch", scratch[1].step_time, out->transition_s);
	}
	memcpy(&c->cur, &scratch[1], sizeof c->cur);
	c->script_cur = want;
	c->running = true;
	c->epoch++;
	return NR_OK;
}

static int decide(struct controller *c, const struct cond *w, long remaining,
		  struct ctl_out *out, struct plan *scratch, struct err *e)
{
	struct env v = { &w->job, &w->cl, &c->k };
	struct plan *best = NULL;
	char why[1024];
	int rc;

	if (c->script)
		return decide_scripted(c, w, remaining, out, scratch, e);
	if (c->refit) {
		struct coef k = c->k;
		double t0 = now_s();
		rc = c->refit(c->refit_arg, &k, e);
		c->st.refit_s += now_s() - t0;
		if (rc)
			return rc;
		if (coef_moved(&k, &c->k, c->refit_tol)) {
			c->k = k;
			c->st.refits++;
		}
	}
	if (c->policy == LAYOUT_FIXED && !c->have_ref) {
		rc = fixed_ref(c, w, e);
		if (rc == NR_EINFEASIBLE) {
			snprintf(why, sizeof why, "%s", e->msg);
			goto nothing_fits;
		}
		if (rc)
			return rc;
	}
	rc = best_now(c, w, &best, &scratch[0], why, sizeof why, e);
	if (rc == NR_EINFEASIBLE)
		goto nothing_fits;
	if (rc)
		return rc;
	if (!c->running) {
		out->act = CTL_START;
		if (c->have_held) {
			if ((rc = price(c, &v, &c->held, best, &out->cost, e)))
				return rc;
			out->transition_s = out->cost.total_s;
			plan_switch_cost_add(&c->st.spent, &out->cost);
		}
		memcpy(&c->cur, best, sizeof c->cur);
		c->running = true;
		c->have_held = false;
		c->epoch++;
		c->st.starts++;
		snprintf(out->why, sizeof out->why, "start: %.3f s per step on %d GPUs",
			 cond_step_time(w, &c->k, &c->cur, NULL), cluster_gpus_up(&w->cl));
		return NR_OK;
	}
	/* the plan running and the best, as they would run now */
	memcpy(&scratch[0], &c->cur, sizeof scratch[0]);
	plan_evaluate(&v, &scratch[0]);
	if (scratch[0].feasible)
		scratch[0].step_time = cond_step_time(w, &c->k, &scratch[0], NULL);
	memcpy(&scratch[1], best, sizeof scratch[1]);
	scratch[1].step_time = cond_step_time(w, &c->k, &scratch[1], NULL);
	plan_decide(&v, &scratch[0], &scratch[1], remaining, c->min_gain, &out->d);
	if (out->d.do_switch && (rc = charge(c, &v, &scratch[0], &scratch[1], remaining, &out->d,
					     e)))
		return rc;
	if (out->d.do_switch) {
		out->act = CTL_SWITCH;
		out->transition_s = out->d.transition_s;
		out->cost = out->d.cost;
		plan_switch_cost_add(&c->st.spent, &out->cost);
		memcpy(&c->prev, &c->cur, sizeof c->prev);
		memcpy(&c->cur, &scratch[1], sizeof c->cur);
		c->epoch++;
		c->st.switches++;
		c->st.forced += out->d.forced;
	}
	snprintf(out->why, sizeof out->why, "%s: %s", out->d.do_switch ? "switch" : "keep",
		 out->d.reason);
	return NR_OK;

nothing_fits:
	if (c->running) {
		memcpy(&scratch[0], &c->cur, sizeof scratch[0]);
		plan_evaluate(&v, &scratch[0]);
		if (scratch[0].feasible) {
			/* the search's space is narrower than what already runs */
			snprintf(out->why, sizeof out->why, "keep: no other plan fits (%s)", why);
			return NR_OK;
		}
	}
	{
		char what[1100];
		snprintf(what, sizeof what, "nothing fits: %s", why);
		pause_now(c, w, out, what);
	}
	return NR_OK;
}

int ctl_decide(struct controller *c, const struct cond *w, long remaining, struct ctl_out *out,
	       struct err *e)
{
	double t0 = now_s();
	int rc;

	memset(out, 0, sizeof *out);
	out->act = CTL_KEEP;
	c->st.replans++;
	rc = decide(c, w, remaining, out, c->scratch, e);
	c->st.seconds += now_s() - t0;
	return rc;
}
