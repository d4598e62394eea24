/* Hindsight: fixed-best and the oracle (see oracle.h). */
#include "run/oracle.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "run/run.h"
#include "run/sim.h"

static long seg_len(const struct hindsight *h, int i)
{
	return (i + 1 < h->nseg ? h->from[i + 1] : h->steps) - h->from[i];
}

static struct env env_of(const struct hindsight *h, int i)
{
	return (struct env){ &h->cond[i].job, &h->cond[i].cl, &h->k };
}

/* Whether two plans have the same pools, GPUs and configurations: the
 * bytes of the plan's shape as the search wrote them (two copies of one
 * plan always agree; a twin that differs only in padding is a candidate
 * more, which costs time, not correctness). */
static bool same_shape(const struct plan *a, const struct plan *b, int n)
{
	if (a->npools != b->npools || a->staleness != b->staleness ||
	    memcmp(a->home, b->home, sizeof a->home) ||
	    memcmp(&a->gen, &b->gen, sizeof a->gen) ||
	    memcmp(a->gpu_pool, b->gpu_pool, (size_t)n * sizeof a->gpu_pool[0]))
		return false;
	for (int i = 0; i < a->npools; i++)
		if (a->pools[i].items != b->pools[i].items || a->pools[i].ngpus != b->pools[i].ngpus)
			return false;
	return true;
}

/* Plan p's step time under segment i's conditions; INFINITY when it does
 * not fit or uses a GPU that is down.  scratch takes the evaluation. */
static double time_in(const struct hindsight *h, int i, const struct plan *p,
		      struct plan *scratch)
{
	struct env v = env_of(h, i);

	memcpy(scratch, p, sizeof *scratch);
	plan_evaluate(&v, scratch);
	if (!scratch->feasible || cond_plan_on_down(&h->cond[i], scratch))
		return INFINITY;
	return cond_step_time(&h->cond[i], &h->k, scratch, NULL);
}

static int segments(struct hindsight *h, const struct events *ev, struct err *e)
{
	size_t next = 0;
	int cap = 1;

	for (size_t i = 0; ev && i < ev->n; i++)
		cap += i == 0 || ev->v[i].step != ev->v[i - 1].step;
	h->from = malloc((size_t)cap * sizeof *h->from);
	h->cond = malloc((size_t)cap * sizeof *h->cond);
	if (!h->from || !h->cond)
		return err_oom(e);
	cond_init(&h->cond[0], h->job, h->cl);
	h->from[0] = 0;
	h->nseg = 1;
	while (ev && next < ev->n) {
		long step = ev->v[next].step;
		int i = h->nseg - 1;
		if (step > h->from[i]) {
			h->cond[i + 1] = h->cond[i];
			h->from[++i] = step;
			h->nseg++;
		}
		while (next < ev->n && ev->v[next].step == step)
			cond_apply(&h->cond[i], &ev->v[next++]);
	}
	return NR_OK;
}

int hindsight_init(struct hindsight *h, const struct job *job, const struct cluster *cl,
		   const struct coef *k, const struct events *ev, long steps, struct err *e)
{
	struct controller *c = malloc(sizeof *c);
	struct plan *p = malloc(sizeof *p);
	int rc, n = cluster_gpus(cl);

	memset(h, 0, sizeof *h);
	h->job = job;
	h->cl = cl;
	h->k = *k;
	h->steps = steps;
	if (!c || !p) {
		free(c);
		free(p);
		return err_oom(e);
	}
	ctl_init(c, LAYOUT_ADAPTIVE, 0, k);
	if ((rc = segments(h, ev, e)))
		goto out;
	h->cand = malloc((size_t)h->nseg * sizeof *h->cand);
	if (!h->cand) {
		rc = err_oom(e);
		goto out;
	}
	for (int i = 0; i < h->nseg; i++) {
		struct err se;
		bool seen = false;
		snprintf(p->layout, sizeof p->layout, "oracle");
		rc = ctl_best(c, &h->cond[i], p, &se);
		if (rc == NR_EINFEASIBLE) {
			rc = NR_OK;
			continue;
		}
		if (rc) {
			err_set(e, rc, "%s", se.msg);
			goto out;
		}
		for (int q = 0; q < h->ncand && !seen; q++)
			seen = same_shape(&h->cand[q], p, n);
		if (!seen)
			memcpy(&h->cand[h->ncand++], p, sizeof *p);
	}
	h->searches = c->st.searches;
	h->nbest = h->ncand;
	h->t = malloc((size_t)h->nseg * (size_t)(h->ncand + 1) * sizeof *h->t);
	if (!h->t) {
		rc = err_oom(e);
		goto out;
	}
	for (int i = 0; i < h->nseg; i++)
		for (int q = 0; q < h->ncand; q++)
			h->t[i * h->ncand + q] = time_in(h, i, &h->cand[q], p);
out:
	ctl_free(c);
	free(c);
	free(p);
	if (rc)
		hindsight_free(h);
	return rc;
}

void hindsight_free(struct hindsight *h)
{
	free(h->from);
	free(h->cond);
	free(h->cand);
	free(h->t);
	memset(h, 0, sizeof *h);
}

/* --- fixed-best ------------------------------------------------------------------ */

int hindsight_fixed_best(struct hindsight *h, struct plan *ref, double *total_s,
			 struct err *e)
{
	struct controller *c = malloc(sizeof *c);
	struct plan *p = malloc(sizeof *p);
	double best = INFINITY;
	int pick = -1, rc = NR_OK;

	if (!c || !p) {
		free(c);
		free(p);
		return err_oom(e);
	}
	for (int q = 0; q < h->ncand && rc == NR_OK; q++) {
		double total = 0, last = 0;
		ctl_init(c, LAYOUT_FIXED, 0, &h->k);
		memcpy(&c->ref, &h->cand[q], sizeof c->ref);
		c->have_ref = true;
		/* each segment at the best plan of the candidate's TP/PP; a run
		 * already longer than the best one found is left */
		for (int i = 0; i < h->nseg && total < best; i++) {
			struct err se;
			int r = ctl_best(c, &h->cond[i], p, &se);
			double t = r == NR_OK ? time_in(h, i, p, p) : INFINITY;
			if (r != NR_OK && r != NR_EINFEASIBLE) {
				rc = err_set(e, r, "%s", se.msg);
				break;
			}
			last = isfinite(t) ? t : last;
			total += (double)seg_len(h, i) * (isfinite(t) ? t : last);
		}
		h->searches += c->st.searches;
		ctl_free(c);
		if (rc == NR_OK && total < best) {
			best = total;
			pick = q;
		}
	}
	free(c);
	free(p);
	if (rc)
		return rc;
	if (pick < 0)
		return err_set(e, NR_EINFEASIBLE, "no plan fits any stretch of the run");
	memcpy(ref, &h->cand[pick], sizeof *ref);
	*total_s = best;
	return NR_OK;
}

/* --- the oracle ------------------------------------------------------------------- */

struct dp {
	double *v;       /* v[i * K + q]: the shortest run to the end of segment i, q running
			  * (held, when segment i runs nothing) */
	int *back;       /* the state before, in segment i - 1 */
	double *last;    /* the step time of the last step that ran, for paused segments */
	bool *paused;    /* segment i runs nothing: no candidate fits */
	bool *ran;       /* some segment up to i ran a plan */
	double *rest;    /* rest[i]: the least the segments from i on can take */
	double upper;    /* the run of the best candidate kept throughout */
};

/* What the candidates alone say: a segment takes at least its fastest
 * candidate's steps (a paused one, at least nothing), and a candidate
 * that runs in every segment and is kept is one schedule, so the oracle's
 * is no longer. */
static void bounds(const struct hindsight *h, struct dp *d)
{
	const int K = h->ncand;

	d->rest[h->nseg] = 0;
	for (int i = h->nseg - 1; i >= 0; i--) {
		double least = INFINITY;
		for (int q = 0; q < K; q++)
			least = fmin(least, h->t[i * K + q]);
		d->rest[i] = d->rest[i + 1] + (isfinite(least) ? (double)seg_len(h, i) * least : 0);
	}
	d->upper = INFINITY;
	for (int q = 0; q < K; q++) {
		double kept = 0;
		for (int i = 0; i < h->nseg; i++)
			kept += (double)seg_len(h, i) * h->t[i * K + q];
		d->upper = fmin(d->upper, kept);
	}
}

/* Whether running p in segment i can be on the shortest schedule: not
 * when the least way into it and the least of the rest exceed a schedule
 * already known, so its switches need no pricing. */
static bool can_be_shortest(const struct hindsight *h, const struct dp *d, int i, int p,
			    double least_before)
{
	return least_before + (double)seg_len(h, i) * h->t[i * h->ncand + p] + d->rest[i + 1] <=
	       d->upper * (1 + 1e-12);
}

static int cmp_by_v(const void *a, const void *b, void *arg)
{
	const double *v = arg;
	double x = v[*(const int *)a], y = v[*(const int *)b];

	return (x > y) - (x < y);
}

/* The cheapest way into state p of segment i (which runs it), from the
 * states of segment i - 1: staying costs nothing, unless the segment
 * before was paused; each switch is priced, unless its fixed costs alone
 * already lose. */
static int enter(struct hindsight *h, struct dp *d, struct charge *ch, int i, int p,
		 const int *order, struct err *e)
{
	const int K = h->ncand;
	const double *prev = &d->v[(i - 1) * K];
	struct env v = env_of(h, i);
	double best = INFINITY;
	int from = -1, rc;

	if ((!d->paused[i - 1] || !d->ran[i - 1]) && isfinite(prev[p])) {
		/* staying, or the first plan to run: no switch */
		best = prev[p];
		from = p;
	}
	for (int k = 0; k < K; k++) {
		int q = order[k];
		struct switch_cost sc = { 0 };
		if (!isfinite(prev[q]) || prev[q] >= best)
			break;
		if (q == p && from == p)
			continue;
		plan_switch_fixed(&v, &h->cand[q], &h->cand[p], &sc);
		if (prev[q] + sc.total_s >= best)
			continue;
		if ((rc = charge_price(ch, &v, &h->cand[q], &h->cand[p], &sc, e)))
			return rc;
		if (prev[q] + sc.total_s < best) {
			best = prev[q] + sc.total_s;
			from = q;
		}
	}
	d->v[i * K + p] = best + (double)seg_len(h, i) * h->t[i * K + p];
	d->back[i * K + p] = from;
	d->last[i * K + p] = h->t[i * K + p];
	return NR_OK;
}

/* The oracle's schedule among schedules no longer than upper. */
static int oracle_within(struct hindsight *h, struct charge *ch, double upper,
			 struct ctl_script *script, const struct plan ***plans, double *total_s,
			 struct err *e)
{
	const int K = h->ncand, S = h->nseg;
	struct dp d = { malloc((size_t)(S * K + 1) * sizeof *d.v),
			malloc((size_t)(S * K + 1) * sizeof *d.back),
			malloc((size_t)(S * K + 1) * sizeof *d.last),
			calloc((size_t)S + 1, sizeof *d.paused),
			calloc((size_t)S + 1, sizeof *d.ran),
			malloc((size_t)(S + 1) * sizeof *d.rest), INFINITY };
	int *order = malloc((size_t)(K + 1) * sizeof *order), state = -1, rc = NR_OK;
	const struct plan **run = calloc((size_t)S + 1, sizeof *run);

	if (!d.v || !d.back || !d.last || !d.paused || !d.ran || !d.rest || !order || !run) {
		rc = err_oom(e);
		goto out;
	}
	if (K == 0) {
		rc = err_set(e, NR_EINFEASIBLE, "no plan fits any stretch of the run");
		goto out;
	}
	for (int i = 0; i < S; i++) {
		d.paused[i] = true;
		for (int q = 0; q < K; q++)
			d.paused[i] &= !isfinite(h->t[i * K + q]);
		d.ran[i] = !d.paused[i] || (i > 0 && d.ran[i - 1]);
	}
	bounds(h, &d);
	d.upper = fmin(d.upper, upper);
	for (int q = 0; q < K; q++) {
		bool runs = isfinite(h->t[q]);
		/* the first plan costs no switch; nothing ran before a pause */
		d.v[q] = d.paused[0] ? 0 : runs ? (double)seg_len(h, 0) * h->t[q] : INFINITY;
		d.back[q] = -1;
		d.last[q] = runs ? h->t[q] : 0;
	}
	for (int i = 1; i < S && rc == NR_OK; i++) {
		const double *prev = &d.v[(i - 1) * K];
		for (int q = 0; q < K; q++)
			order[q] = q;
		qsort_r(order, (size_t)K, sizeof *order, cmp_by_v, (void *)prev);
		for (int p = 0; p < K && rc == NR_OK; p++) {
			if (d.paused[i]) {
				/* held: a paused slot costs the last step that ran */
				d.v[i * K + p] = prev[p] + (double)seg_len(h, i) * d.last[(i - 1) * K + p];
				d.back[i * K + p] = p;
				d.last[i * K + p] = d.last[(i - 1) * K + p];
			} else if (!isfinite(h->t[i * K + p]) ||
				   !can_be_shortest(h, &d, i, p, prev[order[0]])) {
				d.v[i * K + p] = INFINITY;
				d.back[i * K + p] = -1;
			} else {
				rc = enter(h, &d, ch, i, p, order, e);
			}
		}
	}
	if (rc)
		goto out;
	for (int q = 0; q < K; q++)
		if (isfinite(d.v[(S - 1) * K + q]) &&
		    (state < 0 || d.v[(S - 1) * K + q] < d.v[(S - 1) * K + state]))
			state = q;
	if (state < 0) {
		rc = err_set(e, NR_EINFEASIBLE, "no sequence of plans runs the whole trace");
		goto out;
	}
	*total_s = d.v[(S - 1) * K + state];
	for (int i = S - 1; i >= 0; i--) {
		run[i] = d.paused[i] ? NULL : &h->cand[state];
		if (i > 0)
			state = d.back[i * K + state];
	}
	*script = (struct ctl_script){ h->steps, S, h->from, run };
	*plans = run;
	run = NULL;
out:
	free(d.v);
	free(d.back);
	free(d.last);
	free(d.paused);
	free(d.ran);
	free(d.rest);
	free(order);
	free(run);
	return rc;
}

static int discard(void *arg, const struct step_record *r, struct err *e)
{
	(void)arg;
	(void)r;
	(void)e;
	return NR_OK;
}

/* With the rows' plans among the candidates, the schedule over the
 * segments' best plans alone comes first: it is found with few switches
 * priced, and its length bounds the whole programme, whose states that
 * cannot beat it are then not priced (the prices it made are kept in ch). */
int hindsight_oracle(struct hindsight *h, struct charge *ch, struct ctl_script *script,
		     const struct plan ***plans, double *total_s, struct err *e)
{
	int K = h->ncand, rc;
	double *all = h->t, upper = INFINITY;
	const struct plan **best = NULL;
	struct ctl_script sc;

	if (h->nbest == K)
		return oracle_within(h, ch, INFINITY, script, plans, total_s, e);
	h->t = malloc((size_t)h->nseg * (size_t)(h->nbest + 1) * sizeof *h->t);
	if (!h->t) {
		h->t = all;
		return err_oom(e);
	}
	for (int i = 0; i < h->nseg; i++)
		for (int q = 0; q < h->nbest; q++)
			h->t[i * h->nbest + q] = all[i * K + q];
	h->ncand = h->nbest;
	rc = oracle_within(h, ch, INFINITY, &sc, &best, &upper, e);
	free(h->t);
	free(best);
	h->t = all;
	h->ncand = K;
	if (rc && rc != NR_EINFEASIBLE)
		return rc;
	return oracle_within(h, ch, rc ? INFINITY : upper, script, plans, total_s, e);
}

/* --- what the rows ran -------------------------------------------------------------- */

void ran_init(struct ran *r, const struct engine *inner, long steps)
{
	memset(r, 0, sizeof *r);
	r->inner = *inner;
	r->steps = steps;
}

void ran_free(struct ran *r)
{
	free(r->from);
	free(r->plans);
	free(r->paused);
	free(r->run);
	memset(r, 0, sizeof *r);
}

/* Keep p (NULL: paused) from step on, unless it is what ran before. */
static int ran_keep(struct ran *r, long step, const struct plan *p, int ngpus)
{
	if (r->n && (p ? !r->paused[r->n - 1] && same_shape(&r->plans[r->n - 1], p, ngpus) :
		     r->paused[r->n - 1]))
		return NR_OK;
	if (r->n == r->cap) {
		int cap = r->cap ? 2 * r->cap : 8;
		long *from = realloc(r->from, (size_t)cap * sizeof *from);
		struct plan *plans = from ? realloc(r->plans, (size_t)cap * sizeof *plans) : NULL;
		bool *paused = plans ? realloc(r->paused, (size_t)cap * sizeof *paused) : NULL;
		if (from)
			r->from = from;
		if (plans)
			r->plans = plans;
		if (!paused)
			return NR_EIO;
		r->paused = paused;
		r->cap = cap;
	}
	r->from[r->n] = step;
	r->paused[r->n] = !p;
	if (p)
		memcpy(&r->plans[r->n], p, sizeof *p);
	r->n++;
	return NR_OK;
}

static unsigned ran_observe(void *self, long step, const struct cond **now)
{
	struct ran *r = self;
	unsigned changed = r->inner.observe(r->inner.self, step, now);

	r->ngpus = cluster_gpus(&(*now)->cl);
	return changed;
}

static int ran_transition(void *self, const struct plan *from, const struct plan *to,
			  double predicted_s, double *took_s, struct err *e)
{
	struct ran *r = self;

	return r->inner.transition(r->inner.self, from, to, predicted_s, took_s, e);
}

static int ran_step(void *self, long step, const struct plan *p, struct step_record *rec,
		    struct err *e)
{
	struct ran *r = self;
	int rc;

	if ((rc = r->inner.step(r->inner.self, step, p, rec, e)))
		return rc;
	if (ran_keep(r, step, p, r->ngpus))
		return err_oom(e);
	return NR_OK;
}

struct engine ran_engine(struct ran *r)
{
	return (struct engine){ r->inner.name, r, r->inner.resumes, ran_observe, ran_transition,
				ran_step, NULL };
}

int ran_script(struct ran *r, const struct ctl_script **script, struct err *e)
{
	free(r->run);
	r->run = malloc((size_t)(r->n + 1) * sizeof *r->run);
	if (!r->run)
		return err_oom(e);
	for (int i = 0; i < r->n; i++)
		r->run[i] = r->paused[i] ? NULL : &r->plans[i];
	r->script = (struct ctl_script){ r->steps, r->n, r->from, r->run };
	*script = &r->script;
	return NR_OK;
}

int hindsight_add(struct hindsight *h, const struct ran *r, struct err *e)
{
	int n = cluster_gpus(h->cl), had = h->ncand, *at;
	struct plan *cand, *scratch;
	double *t;

	cand = realloc(h->cand, (size_t)(h->ncand + r->n + 1) * sizeof *cand);
	if (!cand)
		return err_oom(e);
	h->cand = cand;
	at = malloc((size_t)(r->n + 1) * sizeof *at);
	if (!at)
		return err_oom(e);
	for (int j = 0; j < r->n; j++) {
		at[j] = -1;
		for (int q = 0; q < h->ncand && at[j] < 0 && !r->paused[j]; q++)
			if (same_shape(&h->cand[q], &r->plans[j], n))
				at[j] = q;
		if (at[j] < 0 && !r->paused[j]) {
			memcpy(&h->cand[h->ncand], &r->plans[j], sizeof *cand);
			at[j] = h->ncand++;
		}
	}
	t = malloc((size_t)h->nseg * (size_t)(h->ncand + 1) * sizeof *t);
	scratch = malloc(sizeof *scratch);
	if (!t || !scratch) {
		free(at);
		free(t);
		free(scratch);
		return err_oom(e);
	}
	for (int i = 0; i < h->nseg; i++)
		for (int q = 0; q < h->ncand; q++)
			t[i * h->ncand + q] = q < had ? h->t[i * had + q] : INFINITY;
	/* a row's plan is a candidate in the segments where the row ran it */
	for (int j = 0; j < r->n; j++) {
		long end = j + 1 < r->n ? r->from[j + 1] : r->steps;
		for (int i = 0; i < h->nseg && at[j] >= 0; i++)
			if (h->from[i] < end && h->from[i] + seg_len(h, i) > r->from[j] &&
			    !isfinite(t[i * h->ncand + at[j]]))
				t[i * h->ncand + at[j]] = time_in(h, i, &h->cand[at[j]], scratch);
	}
	free(h->t);
	h->t = t;
	free(at);
	free(scratch);
	return NR_OK;
}

/* --- the shortest script ------------------------------------------------------------- */

/* The run of one script as the oracle row runs it. */
static int replay_total(const struct hindsight *h, const struct replay *rp,
			const struct ctl_script *script, double *total_s, struct err *e)
{
	struct sim *sim = malloc(sizeof *sim);
	struct controller *ctl = malloc(sizeof *ctl);
	struct run *run = malloc(sizeof *run);
	struct run_summary s;
	struct engine eng;
	int rc;

	if (!sim || !ctl || !run) {
		free(sim);
		free(ctl);
		free(run);
		return err_oom(e);
	}
	sim_init(sim, h->job, h->cl, &h->k, rp->ev, rp->seed, rp->noise);
	eng = sim_engine(sim);
	ctl_init(ctl, LAYOUT_ADAPTIVE, 0, &h->k);
	ctl->price_graph = rp->price_graph;
	ctl->script = script;
	run_init(run);
	run->eng = &eng;
	run->ctl = ctl;
	run->steps = h->steps;
	run->every = rp->every;
	run->emit = discard;
	rc = run_go(run, e);
	if (!rc) {
		run_summarize(run, &s);
		*total_s = s.total_s;
	}
	ctl_free(ctl);
	run_free(run);
	free(sim);
	free(ctl);
	free(run);
	return rc;
}

int hindsight_shortest(const struct hindsight *h, const struct replay *rp,
		       const struct ctl_script *const *scripts, const double *known, int n,
		       int *pick, double *total_s, struct err *e)
{
	*pick = -1;
	for (int i = 0; i < n; i++) {
		double t = INFINITY;
		int rc;
		if (*pick >= 0 && !(known[i] < *total_s))
			continue;
		if ((rc = replay_total(h, rp, scripts[i], &t, e)))
			return rc;
		if (*pick < 0 || t < *total_s) {
			*pick = i;
			*total_s = t;
		}
	}
	return *pick < 0 ? err_set(e, NR_EINFEASIBLE, "no schedule to follow") : NR_OK;
}
