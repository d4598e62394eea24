/* The cost model fit's switch coefficients (fit.c): the seconds a switch
 * between plans took, linear in comm_init_s, comm_group_s, engine_init_s
 * and 1/store_gbps, fitted apart from the step times with their prior. */
#include "profile/fit_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* --- the switch coefficients ------------------------------------------------ */

/* θ of switch coefficient j (of C_SWITCH + j): seconds, or for store_gbps
 * seconds per GB; its prior's standard error in those units. */
static double switch_theta(const struct coef *k, int j)
{
	double v = cost_coef_get(k, C_SWITCH + j);

	return j == NSWITCH - 1 ? 1 / v : v;
}

double ft_switch_prior_se(const struct fit_prior *pr, int j)
{
	double v = cost_coef_get(&pr->k, C_SWITCH + j), se = pr->se[C_SWITCH + j];

	if (isnan(se) || !(se > 0))
		return FIT_PRIOR_RSE * switch_theta(&pr->k, j);
	return j == NSWITCH - 1 ? se / (v * v) : se;
}

/* The switch coefficients' unknowns: their θ, the prior's and the units,
 * and the prior's weight (0: none). */
struct swfit {
	double th[NSWITCH], prior[NSWITCH], unit[NSWITCH], lam[NSWITCH];
	int idx[NSWITCH], p;     /* the free ones */
	double nd[NSWITCH * NSWITCH]; /* the records' own normal matrix, at the end */
	double scale;            /* robust scale of the log residuals, at the end */
};

/* Cauchy-weighted Gauss-Newton on log(measured / predicted) transition
 * times, each prediction the known seconds of moving state plus the
 * switch's parts, bounded and anchored by the prior as the time fit is:
 * plain least squares first, then reweighted at the robust scale. */
static void switch_solve(const struct fit *f, const struct fit_opts *o, long last,
			 double *absr, struct swfit *q)
{
	static const double lo[NSWITCH] = { 0, 0, 0, 1e-5 }, hi[NSWITCH] = { 3600, 600, 3600, 1e3 };
	const int p = q->p;
	const int *idx = q->idx;
	double *th = q->th;

	for (int it = 0; it < MAX_ITER; it++) {
		double n[NSWITCH * NSWITCH] = { 0 }, b[NSWITCH] = { 0 }, l[NSWITCH], h[NSWITCH];
		double d[NSWITCH], big = 0, c2;
		long m = 0;
		/* the scale of the residuals at this θ, then their Cauchy weights */
		for (long i = 0; i < f->nsw; i++) {
			const struct srow *w = &f->sw[i];
			double pred = w->known;
			if (fit_held_out(w->step, o->holdout))
				continue;
			for (int j = 0; j < NSWITCH; j++)
				pred += w->x[j] * th[j];
			absr[m++] = fabs(log(w->y / fmax(pred, 1e-300)));
		}
		q->scale = it ? fmax(ft_robust_scale(absr, m), 1e-9) : 1e9;
		c2 = 1 / (CAUCHY * q->scale * CAUCHY * q->scale);
		memset(q->nd, 0, sizeof q->nd);
		for (long i = 0; i < f->nsw; i++) {
			const struct srow *w = &f->sw[i];
			double pred = w->known, r, u, g[NSWITCH];
			if (fit_held_out(w->step, o->holdout))
				continue;
			for (int j = 0; j < NSWITCH; j++)
				pred += w->x[j] * th[j];
			pred = fmax(pred, 1e-300);
			r = log(w->y / pred);
			u = ft_rec_weight(&(struct frec){ .step = w->step }, last, o->half_life) /
			    (1 + r * r * c2);
			for (int a = 0; a < p; a++)
				g[a] = w->x[idx[a]] * q->unit[idx[a]] / pred;
			for (int a = 0; a < p; a++) {
				b[a] += u * g[a] * r;
				for (int c = 0; c < p; c++) {
					n[a * p + c] += u * g[a] * g[c];
					q->nd[a * p + c] += u * g[a] * g[c];
				}
			}
		}
		for (int a = 0; a < p; a++) {
			int j = idx[a];
			double ls = q->lam[j] * fmin(q->scale, 1) * fmin(q->scale, 1);
			n[a * p + a] += ls;
			b[a] += ls * (q->prior[j] - th[j]) / q->unit[j];
			l[a] = (lo[j] - th[j]) / q->unit[j];
			h[a] = (hi[j] - th[j]) / q->unit[j];
		}
		ft_box_qp(p, n, b, l, h, d);
		for (int a = 0; a < p; a++) {
			int j = idx[a];
			/* no step more than doubles an unknown */
			double step = fmax(-th[j] / q->unit[j] / 2,
					   fmin(d[a], fmax(1, th[j] / q->unit[j])));
			th[j] = fmin(hi[j], fmax(lo[j], th[j] + step * q->unit[j]));
			big = fmax(big, fabs(step) / fmax(1, th[j] / q->unit[j]));
		}
		if (it > 0 && big < 1e-10)
			break;
	}
}

/* The switch coefficients' standard errors from the records alone, in θ
 * units, into se (of the free ones, in idx's order). */
static void switch_se(const struct swfit *q, long rows, double *se)
{
	double cov[NSWITCH * NSWITCH];
	int p = q->p;
	double dof = rows > p ? (double)rows / (double)(rows - p) : HUGE_VAL;

	ft_sym_solve(p, q->nd, NULL, NULL, cov);
	for (int a = 0; a < p; a++)
		se[a] = sqrt(cov[a * p + a] * dof) * q->scale * q->unit[q->idx[a]];
}

/* The switch coefficients: switch_solve with the prior; a coefficient the
 * switches do not exercise, or determine to worse than FIT_MAX_RSE, keeps
 * its prior.  Then the records' own estimate, solved again without the
 * prior. */
void ft_switches(const struct fit *f, const struct fit_opts *o, long last,
		 double decay, double *absr, struct fit_result *out)
{
	struct swfit q = { .p = 0 }, d;
	double se[NSWITCH], dse[NSWITCH];
	bool use[NSWITCH] = { false };
	char why[NSWITCH][200];
	long rows = 0;

	for (int j = 0; j < NSWITCH; j++) {
		q.th[j] = q.prior[j] = q.unit[j] = switch_theta(&f->prior.k, j);
		q.lam[j] = decay * (q.unit[j] / ft_switch_prior_se(&f->prior, j)) *
			   (q.unit[j] / ft_switch_prior_se(&f->prior, j));
		snprintf(why[j], sizeof why[j], "%s", f->nsw ? ft_unused_why[C_SWITCH + j] :
			 "no record has a switch with its parts (a \"switch\" object)");
	}
	for (long i = 0; i < f->nsw; i++) {
		if (fit_held_out(f->sw[i].step, o->holdout))
			continue;
		rows++;
		for (int j = 0; j < NSWITCH; j++)
			use[j] |= f->sw[i].x[j] > 0;
	}
	for (int j = 0; j < NSWITCH; j++)
		if (use[j])
			q.idx[q.p++] = j;
	while (q.p) {
		double worst = 0;
		int jw = -1, k = 0;
		switch_solve(f, o, last, absr, &q);
		/* the data's own covariance, to judge each coefficient */
		switch_se(&q, rows, se);
		for (int a = 0; a < q.p; a++) {
			double rse = se[a] / q.th[q.idx[a]];
			if (!(rse <= FIT_MAX_RSE) && (jw < 0 || !(rse <= worst))) {
				worst = rse;
				jw = a;
			}
		}
		if (jw < 0)
			break;
		if (rows <= q.p)
			snprintf(why[q.idx[jw]], sizeof why[q.idx[jw]], "the records have too few "
				 "switches (%ld) for the switch coefficients to fit (%d)", rows, q.p);
		else
			snprintf(why[q.idx[jw]], sizeof why[q.idx[jw]], "the records' switches "
				 "determine it only to ±%.0f%% (more than %.0f%%)", 100 * worst,
				 100 * FIT_MAX_RSE);
		q.th[q.idx[jw]] = q.prior[q.idx[jw]];
		for (int a = 0; a < q.p; a++)
			if (a != jw)
				q.idx[k++] = q.idx[a];
		q.p = k;
	}
	d = q;
	memset(d.lam, 0, sizeof d.lam);
	if (d.p) {
		switch_solve(f, o, last, absr, &d);
		switch_se(&d, rows, dse);
	}
	for (int j = 0; j < NSWITCH; j++) {
		int c = C_SWITCH + j, a = 0;
		double th = q.th[j], dth = d.th[j];
		while (a < q.p && q.idx[a] != j)
			a++;
		if (a == q.p) {
			double pse = f->prior.se[c];
			ft_set_coef(out, c, cost_coef_get(&f->prior.k, c), isnan(pse) ? NAN : pse / sqrt(decay),
				 false, why[j]);
		} else if (j == NSWITCH - 1) {
			ft_set_coef(out, c, 1 / th, se[a] / (th * th), true, "");
			out->c[c].data = 1 / dth;
			out->c[c].data_se = dse[a] / (dth * dth);
		} else {
			ft_set_coef(out, c, th, se[a], true, "");
			out->c[c].data = dth;
			out->c[c].data_se = dse[a];
		}
	}
	out->switches = rows;
}

