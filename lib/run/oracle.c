/* Hindsight: fixed-best and the oracle (see oracle.h). */
#include "run/oracle.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
	if (a->npools != b->npools || memcmp(a->home, b->home, sizeof a->home) ||
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
		return err_set(e, NR_EIO, "out of memory");
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
		return err_set(e, NR_EIO, "out of memory");
	}
	ctl_init(c, LAYOUT_ADAPTIVE, 0, k);
	if ((rc = segments(h, ev, e)))
		goto out;
	h->cand = malloc((size_t)h->nseg * sizeof *h->cand);
	if (!h->cand) {
		rc = err_set(e, NR_EIO, "out of memory");
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
	h->t = malloc((size_t)h->nseg * (size_t)(h->ncand + 1) * sizeof *h->t);
	if (!h->t) {
		rc = err_set(e, NR_EIO, "out of memory");
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
		return err_set(e, NR_EIO, "out of memory");
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
};

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
		switch_fixed(&v, &h->cand[q], &h->cand[p], &sc);
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

int hindsight_oracle(struct hindsight *h, struct charge *ch, struct ctl_script *script,
		     const struct plan ***plans, double *total_s, struct err *e)
{
	const int K = h->ncand, S = h->nseg;
	struct dp d = { malloc((size_t)(S * K + 1) * sizeof *d.v),
			malloc((size_t)(S * K + 1) * sizeof *d.back),
			malloc((size_t)(S * K + 1) * sizeof *d.last),
			calloc((size_t)S + 1, sizeof *d.paused),
			calloc((size_t)S + 1, sizeof *d.ran) };
	int *order = malloc((size_t)(K + 1) * sizeof *order), state = -1, rc = NR_OK;
	const struct plan **run = calloc((size_t)S + 1, sizeof *run);

	if (!d.v || !d.back || !d.last || !d.paused || !d.ran || !order || !run) {
		rc = err_set(e, NR_EIO, "out of memory");
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
			} else if (!isfinite(h->t[i * K + p])) {
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
	free(order);
	free(run);
	return rc;
}
