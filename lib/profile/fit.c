/* Fitting the cost model's coefficients to step records (see fit.h for the
 * method).  Notation: θ are the time coefficients as the model is linear
 * in them, θ_j = 1/eff for the seven efficiencies and the seconds
 * themselves for the fixed costs; the solver works in φ_j = θ_j / s_j,
 * s_j being the default's θ, so every unknown is of order one. */
#include "profile/fit_impl.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/json.h"

/* --- fitting ---------------------------------------------------------------- */

bool fit_held_out(long step, double holdout)
{
	uint64_t z = (uint64_t)step + 0x9E3779B97F4A7C15ull;

	if (holdout <= 0)
		return false;
	/* splitmix64's finalizer */
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	z ^= z >> 31;
	return (double)(z >> 11) / 9007199254740992.0 < holdout;
}

/* The prior's standard error of coefficient j in θ units. */
static double prior_se_theta(const struct fit *f, int j)
{
	const struct fit_prior *pr = &f->prior;
	double v = cost_coef_get(&pr->k, j), se = pr->se[j], th = ft_theta_of(&pr->k, j);

	if (isnan(se) || !(se > 0))
		return (j >= NEFF && j <= C_STEP ? FIT_PRIOR_RSE_FIXED : FIT_PRIOR_RSE) *
		       ft_rse_base(j, th, ft_unit_of(f->cl, j));
	return j < NEFF ? se / (v * v) : se;
}

/* What exercises each coefficient, said when none does. */
const char *const ft_unused_why[COEF_FIELDS] = {
	"no record's time depends on it (no training entry, or all training compute "
	"hidden behind FSDP communication)",
	"no record's time depends on it (no inference entry, no compute-bound decoding)",
	"no record's time depends on it (no generation entry)",
	"no record's time depends on it (no memory-bound decoding)",
	"no record's time depends on it (no TP, PP or DP group within a node)",
	"no record's time depends on it (no group spanning nodes, no weights moved "
	"between pools)",
	"no record's time depends on it (no model offloaded to host memory)",
	"no record's time depends on it (no tensor parallelism)",
	"no record's time depends on it (no training or inference entry)",
	"no record's time depends on it (no generation entry)",
	"no record's time depends on it (no model-stage time)",
	"no record has a step time",
	"no record measured the peak memory of a stage that keeps activations",
	"no record measured a peak memory",
	"no record measured the peak memory of a stage with activations, logits or a KV cache",
	"no record's switch created the job's communicator anew",
	"no record's switch created a communicator",
	"no record's switch re-created the generation engines",
	"no record's switch read from the state store for longer than it moved state",
	"no record's generation entry measured a move of the actor's weights into the engines "
	"(move_s) that moved a piece",
};

/* The time coefficients only generation's times exercise (prefill_eff,
 * decode_eff, decode_step_s). */
#define GEN_ONLY (1u << 2 | 1u << 3 | 1u << 9)

/* Why coefficient j, which no fitted time or peak depends on, is not
 * fitted: for those only generation exercises, when records left their
 * generation out, that. */
static void unused_why(const struct fit *f, int j, char *why, size_t size)
{
	long n = f->no_p90 > f->no_conc ? f->no_p90 : f->no_conc;

	if (!(GEN_ONLY >> j & 1) || n == 0) {
		snprintf(why, size, "%s", ft_unused_why[j]);
		return;
	}
	snprintf(why, size, "no generation time was fitted: %ld record%s no %s%s%s, without "
		 "which the model cannot price decoding", n, n == 1 ? " has" : "s have",
		 f->no_p90 ? "p90 of the response lengths" : "",
		 f->no_p90 && f->no_conc ? " and no " : "",
		 f->no_conc ? "concurrency of the engines" : "");
}

/* Set coefficient j of out: its value and standard error, and when not
 * fitted, why. */
void ft_set_coef(struct fit_result *out, int j, double value, double se, bool fitted,
		 const char *why)
{
	out->c[j].value = value;
	out->c[j].se = se;
	out->c[j].fitted = fitted;
	out->c[j].data = out->c[j].data_se = NAN;
	snprintf(out->c[j].why, sizeof out->c[j].why, "%.199s", fitted ? "" : why);
	*cost_coef_field(&out->k, j) = value;
}

/* Solve on the sample of a large fit first (when it has one), then on
 * every row from there; drop what the records cannot determine, and solve
 * again.  From the sample, one Newton step on every row lands within a
 * small part of a standard error (Newton converges fast once that near):
 * the re-check of the pieces that follows, and the solve after it, take
 * the place of a pass that would only confirm it.  warm: q is at the
 * solution of rows that have since changed little (a re-check moved a few
 * to another piece): Newton steps on every row from there, at its robust
 * scale, until they are negligible. */
static void gfit_run(struct fit *f, struct gfit *q, bool mem, const struct rowset *sample,
		     bool warm, int n, int first, char why[][200])
{
	const struct rowset all = { f->tr, f->y, f->mr, f->peak, f->rw, f->nrows, false };

	q->moved = 0;
	for (;;) {
		if (sample->n && !warm)
			ft_gfit_solve(f, q, mem, sample, false, false);
		ft_gfit_solve(f, q, mem, &all, warm || sample->n > 0, !warm && sample->n > 0);
		if (!ft_gfit_drop(q, n, first, why))
			break;
		q->moved = HUGE_VAL; /* one went back to its prior: the rest move with it */
	}
}

/* One of the two fits: the time coefficients (0 .. NT-1) or the memory
 * margins (C_ACT ..), with what bounds and anchors them. */
struct part {
	bool mem;
	int n, first;
	double th[NT], unit[NT], lo[NT], hi[NT], prior[NT], lambda[NT];
	char why[NT][200];
	long rows;               /* measurements it fits */
	bool solved;             /* q is at a solution, of the rows as they were */
	struct gfit q;
	struct rowset sample;    /* one in rows / SAMPLE + 1 of them; none when that is 1 */
	struct trow *str;        /* the sample's rows, measurements and weights */
	struct mrow *smr;
	double *smeas, *srw;
	long cap_rows, cap_meas, cap_rw;
};

/* Whether row i is one the part fits. */
static bool part_has(const struct fit *f, const struct part *pt, long i)
{
	return f->rw[i] != 0 && !(pt->mem && isnan(f->peak[i]));
}

static void part_init(struct fit *f, struct part *pt, bool mem, double decay,
		      struct fit_result *out)
{
	bool used[NT] = { false };
	unsigned times = 0;      /* the time coefficients some row's time depends on */

	memset(pt, 0, sizeof *pt);
	pt->mem = mem;
	pt->n = mem ? NMEM : NT;
	pt->first = mem ? C_ACT : 0;
	pt->q = (struct gfit){ .th = pt->th, .unit = pt->unit, .lo = pt->lo, .hi = pt->hi,
			       .prior = pt->prior, .lambda = pt->lambda };
	for (long i = 0; i < f->nrows; i++) {
		const struct mrow *mw = &f->mr[i];
		if (!part_has(f, pt, i))
			continue;
		pt->rows++;
		times |= mem ? 0 : f->tr[i].nz;
		if (mem) {
			used[0] |= mw->mx > 0;
			used[1] = true;
			used[2] |= mw->mx > 0 || mw->md > 0;
		}
	}
	for (int j = 0; !mem && j < NT; j++)
		used[j] = times >> j & 1;
	for (int j = 0; j < pt->n; j++) {
		int c = pt->first + j;
		double se = prior_se_theta(f, c);
		pt->th[j] = pt->prior[j] = mem ? cost_coef_get(&f->prior.k, c) : ft_theta_of(&f->prior.k, c);
		pt->unit[j] = ft_unit_of(f->cl, c);
		ft_bounds_of(c, &pt->lo[j], &pt->hi[j]);
		pt->lambda[j] = decay * (pt->unit[j] / se) * (pt->unit[j] / se);
		if (used[j])
			pt->q.idx[pt->q.p++] = j;
		else if (mem && f->cl->engine == CLUSTER_ENGINE_BUILTIN)
			snprintf(pt->why[j], sizeof pt->why[j], "%s",
				 "the built-in engine's memory model takes no coefficients");
		else
			unused_why(f, c, pt->why[j], sizeof pt->why[j]);
	}
	if (mem)
		out->peak_rows = pt->rows;
}

/* Copy the part's sample out of the rows as they are now. */
static bool part_sample(const struct fit *f, struct part *pt)
{
	long stride = pt->rows / SAMPLE + 1, n = 0;

	for (long i = 0; stride > 1 && i < f->nrows; i++) {
		if (!ft_sampled(i, stride) || !part_has(f, pt, i))
			continue;
		if (!ft_grow((void **)&pt->srw, &pt->cap_rw, n + 1, sizeof *pt->srw) ||
		    !ft_grow((void **)&pt->smeas, &pt->cap_meas, n + 1, sizeof *pt->smeas) ||
		    (pt->mem ? !ft_grow((void **)&pt->smr, &pt->cap_rows, n + 1, sizeof *pt->smr) :
			       !ft_grow((void **)&pt->str, &pt->cap_rows, n + 1, sizeof *pt->str)))
			return false;
		pt->srw[n] = f->rw[i];
		if (pt->mem) {
			pt->smr[n] = f->mr[i];
			pt->smeas[n] = f->peak[i];
		} else {
			pt->str[n] = f->tr[i];
			pt->smeas[n] = f->y[i];
		}
		n++;
	}
	pt->sample = pt->mem ? (struct rowset){ NULL, NULL, pt->smr, pt->smeas, pt->srw, n, true } :
			       (struct rowset){ pt->str, pt->smeas, NULL, NULL, pt->srw, n, true };
	return true;
}

/* The first solve of a part starts from its prior; the next, after a
 * re-check, from where the last ended. */
static bool part_solve(struct fit *f, struct part *pt)
{
	if (!pt->solved && !part_sample(f, pt))
		return false;
	gfit_run(f, &pt->q, pt->mem, &pt->sample, pt->solved, pt->n, pt->first, pt->why);
	pt->solved = true;
	return true;
}

static void part_free(struct part *pt)
{
	free(pt->str);
	free(pt->smr);
	free(pt->smeas);
	free(pt->srw);
}

/* Set k's coefficients of this part to its current values. */
static void part_coef(const struct part *pt, struct coef *k)
{
	for (int j = 0; j < pt->n; j++) {
		if (pt->mem)
			*cost_coef_field(k, pt->first + j) = pt->th[j];
		else
			ft_set_theta(k, pt->first + j, pt->th[j]);
	}
}

/* The records' own estimate of the part's fitted unknowns, into th: Newton
 * steps from the fit's result with no prior, at its robust scale and on
 * the pieces it settled on; cov their covariance, with what the unknowns
 * held at their priors pass on (the records determine the free ones
 * alone: gfit_drop saw to that).  Returns the weighted solves it took. */
static int part_data_only(struct fit *f, const struct part *pt, double *th, double *cov)
{
	static const double no_prior[NT];
	const struct rowset all = { f->tr, f->y, f->mr, f->peak, f->rw, f->nrows, false };
	struct gfit d = pt->q;

	memcpy(th, pt->th, sizeof pt->th);
	d.th = th;
	d.lambda = no_prior;
	d.iters = 0;
	ft_gfit_solve(f, &d, pt->mem, &all, true, false);
	ft_gfit_cov(&d, pt->n, false, cov);
	for (int j = 0; j < pt->n; j++)
		cov[j * pt->n + j] += d.extra[j];
	return d.iters;
}

static void part_finish(struct fit *f, struct part *pt, double decay, struct fit_result *out)
{
	double cov[MAXP * MAXP], dth[NT], dcov[MAXP * MAXP];

	ft_gfit_cov(&pt->q, pt->n, true, cov);
	for (int j = 0; j < pt->n; j++) {
		int c = pt->first + j;
		double se = sqrt(cov[j * pt->n + j] + pt->q.extra[j]), pse = f->prior.se[c];
		double th = pt->th[j];
		if (isnan(se))
			ft_set_coef(out, c, cost_coef_get(&f->prior.k, c), isnan(pse) ? NAN : pse / sqrt(decay),
				 false, pt->why[j]);
		else if (c < NEFF)
			ft_set_coef(out, c, 1 / th, se / (th * th), true, "");
		else
			ft_set_coef(out, c, th, se, true, "");
		if (!isnan(se) && pt->q.absorbs[j])
			snprintf(out->c[c].absorbs, sizeof out->c[c].absorbs, "%s",
				 cost_coef_names[pt->first + pt->q.absorbs[j] - 1]);
	}
	out->iterations += part_data_only(f, pt, dth, dcov);
	for (int a = 0; a < pt->q.p; a++) {
		int j = pt->q.idx[a], c = pt->first + j;
		double se = sqrt(dcov[j * pt->n + j]);
		out->c[c].data = c < NEFF ? 1 / dth[j] : dth[j];
		out->c[c].data_se = c < NEFF ? se / (dth[j] * dth[j]) : se;
	}
	if (!pt->mem)
		out->scale = pt->q.scale;
	out->iterations += pt->q.iters;
}

/* Fit the times and the peaks; re-check every record against the model
 * at the result, and fit again the part whose records changed piece. */
static bool fit_model(struct fit *f, double decay, struct fit_result *out)
{
	struct part *pt = malloc(2 * sizeof *pt);
	long changed[2] = { 1, 1 };
	struct coef k = f->prior.k;
	bool ok = true;

	if (!pt)
		return false;
	part_init(f, &pt[0], false, decay, out);
	part_init(f, &pt[1], true, decay, out);
	for (int pass = 0; pass < MAX_PASSES; pass++) {
		bool settled = pass > 0;
		/* a part is solved again when rows changed piece, or when its
		 * last solve stopped short */
		for (int i = 0; ok && i < 2; i++) {
			if (!changed[i] && !pt[i].q.cut)
				continue;
			ok = part_solve(f, &pt[i]);
			settled &= pt[i].q.moved < 1;
		}
		if (!ok)
			break;
		part_coef(&pt[0], &k);
		part_coef(&pt[1], &k);
		/* solving again with the rows that changed piece moved no
		 * coefficient by a tenth of its standard error: the fit is where
		 * it was, and a row that would change piece now sits where its
		 * pieces meet, predicting the same on either */
		if (settled)
			break;
		ft_for_records(f, PASS_CHECK, &k, changed);
		out->repieces += changed[0] || changed[1];
	}
	if (ok) {
		part_finish(f, &pt[0], decay, out);
		part_finish(f, &pt[1], decay, out);
	}
	part_free(&pt[0]);
	part_free(&pt[1]);
	free(pt);
	return ok;
}

/* step_s and then the switch coefficients, on a thread of their own
 * beside fit_model: they share none of its state (scratch is their own,
 * they count their iterations apart, and they set only their own
 * coefficients in out). */
struct step_fit {
	const struct fit *f;
	const struct fit_opts *o;
	const double *wrec;
	double decay;
	long last;               /* the newest step of a record or a switch */
	double *scratch;         /* room for a residual per record and per switch */
	struct fit_result *out;  /* only c[C_STEP], c[C_SWITCH ..], their k and switches */
	int iterations;
};

/* A Cauchy-weighted location fit of the records' step times less their
 * stages', from th, the prior weighing prior_w (its decay; 0: no prior).
 * Returns θ; *scale its residuals' robust scale, *sw the sum of the
 * weights, *lam the prior's part of it. */
static double step_locate(struct step_fit *s, double th, double prior_w, double *scale,
			  double *sw, double *lam)
{
	const struct fit *f = s->f;
	double prior = cost_coef_get(&f->prior.k, C_STEP), pse = prior_se_theta(f, C_STEP), lo, hi;

	ft_bounds_of(C_STEP, &lo, &hi);
	for (int it = 0; it < MAX_ITER; it++) {
		double num, old = th;
		long m = 0;
		for (long i = 0; i < f->nrecs; i++)
			if (!f->recs[i].held && !isnan(f->recs[i].step_obs))
				s->scratch[m++] = fabs(f->recs[i].step_obs - th);
		*scale = it ? ft_robust_scale(s->scratch, m) :
			      fmax(ft_robust_scale(s->scratch, m), 1e-6);
		*lam = prior_w * *scale * *scale / (pse * pse);
		*sw = *lam;
		num = *lam * prior;
		for (long i = 0; i < f->nrecs; i++) {
			const struct frec *r = &f->recs[i];
			double res, u;
			if (r->held || isnan(r->step_obs))
				continue;
			res = (r->step_obs - th) / (CAUCHY * *scale);
			u = s->wrec[i] / (1 + res * res);
			*sw += u;
			num += u * r->step_obs;
		}
		th = fmin(hi, fmax(lo, num / *sw));
		s->iterations++;
		/* a step within a hundredth of the standard error changes nothing
		 * the data can tell */
		if (fabs(th - old) <= 0.01 * *scale / sqrt(*sw) && it >= 2)
			break;
	}
	return th;
}

/* step_s: step_locate with the prior, then without it from there. */
static void fit_step(struct step_fit *s)
{
	const struct fit *f = s->f;
	double decay = s->decay, prior = cost_coef_get(&f->prior.k, C_STEP);
	struct fit_result *out = s->out;
	double th, scale, sw, lam, se, rse, dof = 1;
	long n = 0;

	for (long i = 0; i < f->nrecs; i++)
		n += !f->recs[i].held && !isnan(f->recs[i].step_obs);
	if (n == 0) {
		ft_set_coef(out, C_STEP, prior, f->prior.se[C_STEP], false, ft_unused_why[C_STEP]);
		return;
	}
	th = step_locate(s, prior, decay, &scale, &sw, &lam);
	if (n > 1)
		dof = sqrt((double)n / (double)(n - 1)); /* one degree of freedom used */
	se = dof * scale / sqrt(sw - lam > 0 ? sw - lam : 1e-300);
	rse = se / ft_rse_base(C_STEP, th, ft_unit_of(f->cl, C_STEP));
	if (n < 2 || !(rse <= FIT_MAX_RSE)) {
		char why[200];
		snprintf(why, sizeof why, n < 2 ? "only one record has a step time" :
			 "the records determine it only to ±%.0f%% (more than %.0f%%): the step "
			 "times barely exceed their stages'", 100 * rse, 100 * FIT_MAX_RSE);
		ft_set_coef(out, C_STEP, prior,
			 isnan(f->prior.se[C_STEP]) ? NAN : f->prior.se[C_STEP] / sqrt(decay), false,
			 why);
		return;
	}
	ft_set_coef(out, C_STEP, th, dof * scale / sqrt(sw), true, "");
	out->c[C_STEP].data = step_locate(s, th, 0, &scale, &sw, &lam);
	out->c[C_STEP].data_se = dof * scale / sqrt(sw);
}

static void fit_side(struct step_fit *s)
{
	fit_step(s);
	ft_switches(s->f, s->o, s->last, s->decay, s->scratch, s->out);
}

static void *fit_side_run(void *arg)
{
	fit_side(arg);
	return NULL;
}

/* Whether coefficient c's θ is its value's inverse (the efficiencies, and
 * store_gbps as seconds per GB). */
static bool inverse_theta(int c)
{
	return c < NEFF || c == C_SWITCH + NSWITCH - 1;
}

/* Each coefficient's prior as the fit weighed it, and how far the records'
 * own estimate is from it, in standard errors of their difference: both
 * in θ, where the prior is a normal pseudo-observation. */
static void fit_compare(const struct fit *f, double decay, struct fit_result *out)
{
	for (int c = 0; c < COEF_FIELDS; c++) {
		struct fit_coef *k = &out->c[c];
		bool inv = inverse_theta(c);
		double v = cost_coef_get(&f->prior.k, c), tp = inv ? 1 / v : v, td, sd;
		double sp = (c == C_MOVE ? ft_move_prior_se(&f->prior) :
			     c >= C_SWITCH ? ft_switch_prior_se(&f->prior, c - C_SWITCH) :
					     prior_se_theta(f, c)) / sqrt(decay);
		k->prior = v;
		k->prior_se = inv ? sp * v * v : sp;
		k->apart = NAN;
		if (isnan(k->data))
			continue;
		td = inv ? 1 / k->data : k->data;
		sd = inv ? k->data_se / (k->data * k->data) : k->data_se;
		k->apart = fabs(td - tp) / sqrt(sp * sp + sd * sd);
	}
}

/* Quality: relative errors of fitted and held-out times, step times and
 * peaks, at the fitted coefficients. */
static void fit_quality(struct fit *f, struct fit_result *out)
{
	double th[NT], mk[NMEM] = { out->k.act_factor, out->k.workspace_gib, out->k.frag };
	double sum_fit = 0, sum_held = 0, sum_step = 0, sum_peak = 0;
	/* where the Cauchy weight falls below OUTLIER: |log(y / pred)| above
	 * this, y / pred beyond its exponentials */
	double cut = CAUCHY * out->scale * sqrt(1 / OUTLIER - 1), hi = exp(cut), lo = exp(-cut);
	long m = 0, nstep = 0, npeak = 0, kmed, k90;

	for (int j = 0; j < NT; j++)
		th[j] = ft_theta_of(&out->k, j);
	for (long ri = 0; ri < f->nrecs; ri++) {
		const struct frec *r = &f->recs[ri];
		double pred[STEPREC_MAX_MS];
		for (int i = 0; i < r->nrows; i++) {
			long row = r->row0 + i;
			double q;
			pred[i] = ft_row_pred(&f->tr[row], th);
			q = f->y[row] / pred[i];
			if (r->held) {
				sum_held += fabs(q - 1);
				continue;
			}
			sum_fit += fabs(q - 1);
			f->scratch[m++] = fabs(q - 1);
			out->outliers += q > hi || q < lo;
			if (!isnan(f->peak[row])) {
				sum_peak += fabs(f->peak[row] / ft_mem_pred(&f->mr[row], mk) - 1);
				npeak++;
			}
		}
		/* a step whose generation was not fitted has no prediction */
		if (r->held && !isnan(r->step_obs) && !r->gen_left) {
			double obs = r->step_obs, p = out->k.step_s + ft_stages_sum(&f->rows[r->row0],
										 r->nrows, pred);
			obs += ft_stages_sum(&f->rows[r->row0], r->nrows, &f->y[r->row0]);
			sum_step += fabs(obs / p - 1);
			nstep++;
		}
	}
	out->mape_fit = m ? sum_fit / (double)m : NAN;
	out->mape_holdout = out->held_rows ? sum_held / (double)out->held_rows : NAN;
	out->mape_holdout_step = nstep ? sum_step / (double)nstep : NAN;
	out->mape_peak = npeak ? sum_peak / (double)npeak : NAN;
	out->max = 0;
	for (long i = 0; i < m; i++)
		out->max = fmax(out->max, f->scratch[i]);
	kmed = (long)(0.5 * (double)(m - 1));
	k90 = (long)(0.9 * (double)(m - 1));
	out->median = ft_quantile(f->scratch, m, 0.5);
	/* selecting the median left every larger error after it */
	out->p90 = k90 > kmed ? ft_select_kth(f->scratch + kmed + 1, m - kmed - 1, k90 - kmed - 1) :
				out->median;
}

int fit_run(struct fit *f, const struct fit_opts *o, struct fit_result *out, struct err *e)
{
	double *wrec, *step_scratch, decay = 1;
	long last = -1, first = -1, last_sw, changed[2];
	struct step_fit step;
	pthread_t tid;
	bool ok, started;

	memset(out, 0, sizeof *out);
	out->k = f->prior.k;
	for (long i = 0; i < f->nrecs; i++) {
		struct frec *r = &f->recs[i];
		r->held = fit_held_out(r->step, o->holdout);
		last = i == 0 || r->step > last ? r->step : last;
		first = i == 0 || r->step < first ? r->step : first;
		out->held_records += r->held;
		out->held_rows += r->held ? r->nrows : 0;
	}
	out->records = f->nrecs;
	out->not_ok = f->other;
	out->before_prior = f->before_prior;
	out->fit_records = f->nrecs - out->held_records;
	out->rows = f->nrows;
	out->fit_rows = f->nrows - out->held_rows;
	out->first_step = first;
	out->last_step = last;
	if (f->nrecs == 0 && f->other == 0 && f->before_prior > 0)
		return err_set(e, NR_NO, "every record is at or before step %ld, the newest the "
			       "prior has seen: nothing new to fit", f->prior.last_step);
	if (out->fit_records == 0)
		return err_set(e, NR_EINPUT, f->nrecs ? "every step record with times is held out "
			       "(--holdout): nothing left to fit" : "no step record with status "
			       "\"ok\": nothing to fit");
	wrec = malloc(sizeof *wrec * (size_t)f->nrecs);
	step_scratch = malloc(sizeof *step_scratch * (size_t)(f->nrecs + f->nsw + 1));
	free(f->scratch);
	free(f->rw);
	free(f->tr);
	free(f->mr);
	f->scratch = malloc(sizeof *f->scratch * (size_t)(f->nrows + f->nrecs + f->nsw + 1));
	f->rw = malloc(sizeof *f->rw * (size_t)(f->nrows + 1));
	f->tr = calloc((size_t)f->nrows + 1, sizeof *f->tr);
	f->mr = calloc((size_t)f->nrows + 1, sizeof *f->mr);
	if (!wrec || !step_scratch || !f->scratch || !f->rw || !f->tr || !f->mr) {
		free(wrec);
		free(step_scratch);
		return err_oom(e);
	}
	/* every row's basis and memory terms at the prior */
	f->k = f->prior.k;
	ft_for_records(f, PASS_PREPARE, &f->k, changed);
	for (long i = 0; i < f->nrecs; i++)
		wrec[i] = ft_rec_weight(&f->recs[i], last, o->half_life);
	for (long i = 0; i < f->nrecs; i++)
		for (int j = 0; j < f->recs[i].nrows; j++)
			f->rw[f->recs[i].row0 + j] = f->recs[i].held ? 0 : wrec[i];
	if (o->half_life > 0 && f->prior.last_step >= 0 && last > f->prior.last_step)
		decay = pow(0.5, (double)(last - f->prior.last_step) / o->half_life);
	last_sw = last;
	for (long i = 0; i < f->nsw; i++)
		last_sw = f->sw[i].step > last_sw ? f->sw[i].step : last_sw;
	step = (struct step_fit){ f, o, wrec, decay, last_sw, step_scratch, out, 0 };
	started = pthread_create(&tid, NULL, fit_side_run, &step) == 0;
	ok = fit_model(f, decay, out);
	if (started)
		pthread_join(tid, NULL);
	else
		fit_side(&step); /* no thread to be had: do it here */
	out->iterations += step.iterations;
	ft_move(f, o, last, decay, out);
	fit_compare(f, decay, out);
	free(wrec);
	free(step_scratch);
	if (!ok)
		return err_oom(e);
	fit_quality(f, out);
	return NR_OK;
}

/* --- priors and the document ------------------------------------------------- */

void fit_prior_defaults(struct fit_prior *p)
{
	cost_coef_defaults(&p->k);
	for (int j = 0; j < COEF_FIELDS; j++)
		p->se[j] = NAN;
	p->last_step = -1;
}

void fit_prior_of(struct fit_prior *p, const struct fit_result *r)
{
	p->k = r->k;
	for (int j = 0; j < COEF_FIELDS; j++)
		p->se[j] = r->c[j].se;
	p->last_step = r->last_step;
}

int fit_prior_load(struct fit_prior *p, const char *file, struct err *e)
{
	struct jdoc d;
	json_t *fit, *cs;
	int rc;

	fit_prior_defaults(p);
	if ((rc = cost_load(&p->k, file, e)))
		return rc;
	/* cost_load accepted the document; its fit section is ours to read */
	if ((rc = jdoc_load(&d, file, "cost", e)))
		return rc;
	fit = json_object_get(d.root, "fit");
	if (fit && (rc = jget_int(&d, fit, "fit", "last_step", false, 0, LONG_MAX,
				  &p->last_step, e)))
		goto out;
	cs = fit ? json_object_get(fit, "coefficients") : NULL;
	for (int j = 0; json_is_object(cs) && j < COEF_FIELDS; j++) {
		json_t *c = json_object_get(cs, cost_coef_names[j]), *se;
		char path[96];
		if (!json_is_object(c) || !(se = json_object_get(c, "se")) || json_is_null(se))
			continue;
		snprintf(path, sizeof path, "fit.coefficients.%s", cost_coef_names[j]);
		if ((rc = jget_num(&d, c, path, "se", false, 0, HUGE_VAL, &p->se[j], e)))
			goto out;
	}
out:
	jdoc_free(&d);
	return rc;
}

static json_t *num(double x)
{
	return isfinite(x) ? json_real(x) : json_null();
}

json_t *fit_to_json(const struct fit_result *r, const struct fit_opts *o)
{
	json_t *fit = json_object(), *cs = json_object();

	for (int j = 0; j < COEF_FIELDS; j++) {
		json_t *c = json_object();
		json_object_set_new(c, "value", json_real(r->c[j].value));
		json_object_set_new(c, "se", num(r->c[j].se));
		json_object_set_new(c, "fitted", json_boolean(r->c[j].fitted));
		json_object_set_new(c, "data", isnan(r->c[j].data) ? json_null() :
				    json_pack("{s:o,s:o}", "value", num(r->c[j].data), "se",
					      num(r->c[j].data_se)));
		if (!r->c[j].fitted)
			json_object_set_new(c, "why", json_string(r->c[j].why));
		if (*r->c[j].absorbs)
			json_object_set_new(c, "absorbs", json_string(r->c[j].absorbs));
		json_object_set_new(cs, cost_coef_names[j], c);
	}
	char method[200];

	snprintf(method, sizeof method, "Cauchy-weighted least squares on log(measured / "
		 "predicted), bounded; a coefficient determined to worse than %.0f%% keeps its "
		 "prior", 100 * FIT_MAX_RSE);
	json_object_set_new(fit, "method", json_string(method));
	json_object_set_new(fit, "records", json_integer(r->records));
	json_object_set_new(fit, "records_not_ok", json_integer(r->not_ok));
	json_object_set_new(fit, "records_before_prior", json_integer(r->before_prior));
	json_object_set_new(fit, "switches", json_integer(r->switches));
	json_object_set_new(fit, "fit_records", json_integer(r->fit_records));
	json_object_set_new(fit, "held_out_records", json_integer(r->held_records));
	json_object_set_new(fit, "first_step", json_integer(r->first_step));
	json_object_set_new(fit, "last_step", json_integer(r->last_step));
	json_object_set_new(fit, "half_life", o->half_life > 0 ? json_real(o->half_life) :
				  json_null());
	json_object_set_new(fit, "holdout", json_real(o->holdout));
	json_object_set_new(fit, "coefficients", cs);
	json_object_set_new(fit, "residuals", json_pack(
		"{s:I,s:o,s:o,s:o,s:o,s:I,s:I}", "times", (json_int_t)r->fit_rows,
		"median", num(r->median), "p90", num(r->p90), "max", num(r->max),
		"scale", num(r->scale), "outliers", (json_int_t)r->outliers,
		"peaks", (json_int_t)r->peak_rows));
	json_object_set_new(fit, "mape", json_pack(
		"{s:o,s:o,s:o,s:o}", "fit", num(r->mape_fit), "holdout", num(r->mape_holdout),
		"holdout_step", num(r->mape_holdout_step), "peak", num(r->mape_peak)));
	return fit;
}

json_t *fit_cost_document(const struct fit_result *r, const struct fit_opts *o,
			  const char *prior, const char *trace, long lines, long skipped,
			  struct err *e)
{
	json_t *doc, *fit, *hw = NULL;
	struct jdoc d;

	if (prior) {
		if (jdoc_load(&d, prior, "cost", e))
			return NULL;
		hw = json_incref(json_object_get(d.root, "hardware"));
		jdoc_free(&d);
	}
	doc = json_object();
	fit = fit_to_json(r, o);
	if (!doc || !fit) {
		json_decref(doc);
		json_decref(fit);
		json_decref(hw);
		err_oom(e);
		return NULL;
	}
	json_object_set_new(fit, "trace", json_string(trace));
	json_object_set_new(fit, "lines", json_integer(lines));
	json_object_set_new(fit, "skipped_lines", json_integer(skipped));
	json_object_set_new(fit, "prior", prior ? json_string(prior) : json_null());
	json_object_set_new(doc, "nereus", json_integer(NR_FORMAT));
	json_object_set_new(doc, "kind", json_string("cost"));
	json_object_set_new(doc, "coefficients", cost_coef_to_json(&r->k));
	if (hw)
		json_object_set_new(doc, "hardware", hw);
	json_object_set_new(doc, "fit", fit);
	return doc;
}
