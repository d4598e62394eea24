/* The cost model fit's solve (fit.c): small dense linear algebra, the
 * robust scale, the records' weights, weighted Gauss-Newton solves in φ
 * with Cauchy weights and priors, and the passes over the records on
 * every core. */
#include "profile/fit_impl.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* --- small dense linear algebra ---------------------------------------------- */

/* Cholesky factor of the p×p matrix a (lower, in place); false when not
 * positive definite. */
static bool chol(int p, double *a)
{
	for (int j = 0; j < p; j++) {
		double d = a[j * p + j];
		for (int k = 0; k < j; k++)
			d -= a[j * p + k] * a[j * p + k];
		if (!(d > 0))
			return false;
		a[j * p + j] = sqrt(d);
		for (int i = j + 1; i < p; i++) {
			double s = a[i * p + j];
			for (int k = 0; k < j; k++)
				s -= a[i * p + k] * a[j * p + k];
			a[i * p + j] = s / a[j * p + j];
		}
	}
	return true;
}

static void chol_solve(int p, const double *l, double *x)
{
	for (int i = 0; i < p; i++) {
		for (int k = 0; k < i; k++)
			x[i] -= l[i * p + k] * x[k];
		x[i] /= l[i * p + i];
	}
	for (int i = p - 1; i >= 0; i--) {
		for (int k = i + 1; k < p; k++)
			x[i] -= l[k * p + i] * x[k];
		x[i] /= l[i * p + i];
	}
}

/* Solve n x = b for a symmetric positive semi-definite n, scaled to unit
 * diagonal and nudged by a tiny ridge so that a direction the data do not
 * see gets a huge variance instead of a failure.  inv (may be NULL): n⁻¹. */
void ft_sym_solve(int p, const double *n, const double *b, double *x, double *inv)
{
	double a[MAXP * MAXP] = { 0 }, d[MAXP];

	for (int i = 0; i < p; i++)
		d[i] = n[i * p + i] > 0 ? 1 / sqrt(n[i * p + i]) : 1;
	for (double ridge = 1e-12; ; ridge *= 100) {
		for (int i = 0; i < p; i++)
			for (int j = 0; j < p; j++)
				a[i * p + j] = n[i * p + j] * d[i] * d[j] + (i == j ? ridge : 0);
		if (chol(p, a) || ridge > 1)
			break;
	}
	if (b && x) {
		for (int i = 0; i < p; i++)
			x[i] = b[i] * d[i];
		chol_solve(p, a, x);
		for (int i = 0; i < p; i++)
			x[i] *= d[i];
	}
	for (int c = 0; inv && c < p; c++) {
		double col[MAXP] = { 0 };
		col[c] = 1;
		chol_solve(p, a, col);
		for (int i = 0; i < p; i++)
			inv[i * p + c] = col[i] * d[i] * d[c];
	}
}

/* Minimize ½ dᵀ n d − bᵀ d subject to lo ≤ d ≤ hi (lo ≤ 0 ≤ hi): a primal
 * active-set method, every iterate feasible. */
void ft_box_qp(int p, const double *n, const double *b, const double *lo,
	       const double *hi, double *d)
{
	bool fixed[MAXP] = { false };
	double x[MAXP] = { 0 };

	for (int it = 0; it < 10 * MAXP + 10; it++) {
		int fr[MAXP], nf = 0, block = -1, release = -1;
		double sub[MAXP * MAXP], rhs[MAXP], y[MAXP], alpha = 1, worst = 0;
		for (int i = 0; i < p; i++)
			if (!fixed[i])
				fr[nf++] = i;
		for (int a = 0; a < nf; a++) {
			rhs[a] = b[fr[a]];
			for (int i = 0; i < p; i++)
				if (fixed[i])
					rhs[a] -= n[fr[a] * p + i] * x[i];
			for (int c = 0; c < nf; c++)
				sub[a * nf + c] = n[fr[a] * p + fr[c]];
		}
		memcpy(y, x, sizeof y);
		if (nf) {
			double z[MAXP];
			ft_sym_solve(nf, sub, rhs, z, NULL);
			for (int a = 0; a < nf; a++)
				y[fr[a]] = z[a];
		}
		for (int a = 0; a < nf; a++) {
			int i = fr[a];
			double step = y[i] - x[i], lim;
			if (y[i] < lo[i] && step < 0) {
				lim = (lo[i] - x[i]) / step;
			} else if (y[i] > hi[i] && step > 0) {
				lim = (hi[i] - x[i]) / step;
			} else {
				continue;
			}
			if (lim < alpha) {
				alpha = lim;
				block = i;
			}
		}
		for (int i = 0; i < p; i++)
			x[i] += alpha * (y[i] - x[i]);
		if (block >= 0) {
			x[block] = y[block] < lo[block] ? lo[block] : hi[block];
			fixed[block] = true;
			continue;
		}
		/* at the optimum on this face: free a bound that holds the wrong way */
		for (int i = 0; i < p; i++) {
			double g = -b[i];
			if (!fixed[i])
				continue;
			for (int c = 0; c < p; c++)
				g += n[i * p + c] * x[c];
			g /= sqrt(fmax(n[i * p + i], 1e-300));
			if ((x[i] <= lo[i] && g < -worst) || (x[i] >= hi[i] && g > worst)) {
				worst = fabs(g);
				release = i;
			}
		}
		if (release < 0 || worst < 1e-12)
			break;
		fixed[release] = false;
	}
	memcpy(d, x, sizeof x[0] * (size_t)p);
}

/* --- robust scale ------------------------------------------------------------ */

/* The k-th smallest of v[0..n), by quickselect: v is reordered so that
 * nothing after it is smaller. */
double ft_select_kth(double *v, long n, long k)
{
	long lo = 0, hi = n - 1;

	while (lo < hi) {
		double piv = v[(lo + hi) / 2];
		long i = lo, j = hi;
		while (i <= j) {
			while (v[i] < piv)
				i++;
			while (v[j] > piv)
				j--;
			if (i <= j) {
				double t = v[i];
				v[i++] = v[j];
				v[j--] = t;
			}
		}
		if (k <= j)
			hi = j;
		else if (k >= i)
			lo = i;
		else
			break;
	}
	return v[k];
}

/* The q-quantile of v[0..n) (reordered as select_kth does). */
double ft_quantile(double *v, long n, double q)
{
	return n > 0 ? ft_select_kth(v, n, (long)(q * (double)(n - 1))) : NAN;
}

double ft_robust_scale(double *absr, long n)
{
	return fmax(1.4826 * ft_quantile(absr, n, 0.5), 1e-9);
}

/* --- weights and threads ----------------------------------------------------- */

/* A record's weight: 0.5^(its age in steps / the half-life). */
double ft_rec_weight(const struct frec *r, long last, double half_life)
{
	return half_life > 0 ? pow(0.5, (double)(last - r->step) / half_life) : 1;
}

/* Threads for the passes over the records: the cores, up to MAX_THREADS. */
static int threads(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : (int)n;
}

/* --- weighted Gauss-Newton solves ------------------------------------------------ */

/* One pass over the rows for one Gauss-Newton step on log residuals: the
 * normal equations in φ (the unknowns over their units) and the absolute
 * residuals, for the next robust scale.  Times (mem false) or peaks. */
struct gpass {
	const struct rowset *rs;
	double *scratch;      /* room for an absolute residual per row of rs */
	bool mem;
	const double *th;     /* θ of every time coefficient, or the memory m */
	const int *idx;       /* the free unknowns */
	const double *unit;
	int p;
	bool robust;
	double scale;         /* Cauchy weights at this scale */
	bool want_scale;      /* collect the absolute residuals for a new scale */
	bool newton;          /* also the curvature of the Cauchy loss, in h */
	long lo, hi;          /* rows of rs */
	double n[MAXP * MAXP], b[MAXP], h[MAXP * MAXP];
	double sse;           /* Σ weight · residual² */
	long used;            /* rows in the sums */
	long m;               /* absolute residuals written from scratch[lo] */
};

/* Whether row i is in the sample of one row in stride: hashed, so that
 * the sample mixes every kind of row whatever the records' layout. */
bool ft_sampled(long i, long stride)
{
	return ((uint64_t)i * 0x9E3779B97F4A7C15ull >> 32 & 0xFFFFFFFFu) < 0x100000000ull / stride;
}

/* fmax(x, lo) for lo > 0, inline: lo when x is not above it, NaN too. */
static double floor_at(double x, double lo)
{
	return x > lo ? x : lo;
}

static void *gpass_run(void *arg)
{
	struct gpass *g = arg;
	const struct rowset *rs = g->rs;
	const int p = g->p;
	const bool mem = g->mem, robust = g->robust, newton = g->newton;
	const double c2 = 1 / (CAUCHY * g->scale * CAUCHY * g->scale);
	/* sums and constants in locals: the compiler need not fear the stores
	 * alias them */
	double n[MAXP * MAXP] = { 0 }, b[MAXP] = { 0 }, h[MAXP * MAXP] = { 0 }, sse = 0;
	double th[MAXP], unit[MAXP];
	int idx[MAXP], at[MAXP];  /* the free unknowns, and where each is among them */
	unsigned unknowns = 0;
	long used = 0, m = 0;

	for (int a = 0; a < p; a++) {
		idx[a] = g->idx[a];
		unit[a] = g->unit[idx[a]];
		at[idx[a]] = a;
		unknowns |= 1u << idx[a];
	}
	memcpy(th, g->th, sizeof th[0] * (size_t)(mem ? NMEM : NT));
	for (long i = g->lo; i < g->hi; i++) {
		double pred, r, wt, ht, u2, inv, jac[NMEM], gr[MAXP];
		int nz[MAXP], k = 0;
		if (rs->rw[i] == 0)
			continue;
		/* gr: the row's gradient in φ, its nonzero entries only (nz says which) */
		if (mem) {
			const struct mrow *w = &rs->mr[i];
			if (isnan(rs->peak[i]))
				continue;
			pred = floor_at(ft_mem_pred(w, th), 1e-300); /* a step too far shows as a misfit */
			r = log(rs->peak[i] / pred);
			jac[0] = w->mx * (1 + th[2]);
			jac[1] = GIB;
			jac[2] = th[0] * w->mx + w->md;
			for (int a = 0; a < p; a++) {
				double v = jac[idx[a]] * unit[a] / pred;
				if (v != 0) {
					nz[k] = a;
					gr[k++] = v;
				}
			}
		} else {
			const struct trow *w = &rs->tr[i];
			pred = floor_at(ft_row_pred(w, th), 1e-300);
			r = log(rs->y[i] / pred);
			pred = 1 / pred;
			for (unsigned set = w->nz & unknowns; set; set &= set - 1) {
				int a = at[ft_lowest(set)];
				double v = w->x[idx[a]] * unit[a] * pred;
				if (v != 0) {
					nz[k] = a;
					gr[k++] = v;
				}
			}
		}
		if (g->want_scale)
			g->scratch[g->lo + m++] = fabs(r);
		/* the reweighting weight ψ(r)/r, and the curvature ψ'(r) where positive */
		u2 = robust ? r * r * c2 : 0;
		inv = 1 / (1 + u2);
		wt = rs->rw[i] * inv;
		ht = newton && u2 < 1 ? wt * (1 - u2) * inv : 0;
		sse += rs->rw[i] * r * r;
		used++;
		/* a row without curvature adds nothing to h */
		for (int a = 0; a < k && ht != 0; a++) {
			double ga = wt * gr[a], gh = ht * gr[a], *na = n + nz[a] * p, *ha = h + nz[a] * p;
			b[nz[a]] += ga * r;
			for (int c = 0; c <= a; c++) {
				na[nz[c]] += ga * gr[c];
				ha[nz[c]] += gh * gr[c];
			}
		}
		for (int a = 0; a < k && ht == 0; a++) {
			double ga = wt * gr[a], *na = n + nz[a] * p;
			b[nz[a]] += ga * r;
			for (int c = 0; c <= a; c++)
				na[nz[c]] += ga * gr[c];
		}
	}
	memcpy(g->n, n, sizeof n);
	memcpy(g->b, b, sizeof b);
	memcpy(g->h, h, sizeof h);
	g->sse = sse;
	g->used = used;
	g->m = m;
	return NULL;
}

#define ROW_PARTS 32     /* parts a pass cuts its rows into, whatever the cores */

/* A pass's parts, taken by the threads one at a time until none are left. */
struct gshare {
	struct gpass part[ROW_PARTS];
	atomic_int next;
};

static void *gpass_some(void *arg)
{
	struct gshare *s = arg;
	int c;

	while ((c = atomic_fetch_add(&s->next, 1)) < ROW_PARTS)
		gpass_run(&s->part[c]);
	return NULL;
}

/* Run one pass on every core; the sums come back in g.  Returns the
 * robust scale of the residuals (g's own when it does not want a new one).
 * The rows are cut into the same parts and their sums added in the same
 * order whatever the cores and whichever thread takes which part: the
 * result is the same on every machine. */
static double gpass(struct gpass *g)
{
	struct gshare s;
	pthread_t tid[MAX_THREADS];
	bool started[MAX_THREADS] = { false };
	long rows = g->rs->n, m = 0;
	int nt = rows < 20000 ? 1 : threads();
	struct gpass *part = s.part;

	for (int c = 0; c < ROW_PARTS; c++) {
		part[c] = *g;
		part[c].lo = rows * c / ROW_PARTS;
		part[c].hi = rows * (c + 1) / ROW_PARTS;
	}
	atomic_init(&s.next, 0);
	for (int t = 1; t < nt; t++)
		started[t] = pthread_create(&tid[t], NULL, gpass_some, &s) == 0;
	gpass_some(&s);
	for (int t = 1; t < nt; t++)
		if (started[t])
			pthread_join(tid[t], NULL);
	for (int c = 0; c < ROW_PARTS; c++) {
		if (c > 0) {
			for (int i = 0; i < MAXP * MAXP; i++) {
				part[0].n[i] += part[c].n[i];
				part[0].h[i] += part[c].h[i];
			}
			for (int i = 0; i < MAXP; i++)
				part[0].b[i] += part[c].b[i];
			part[0].sse += part[c].sse;
			part[0].used += part[c].used;
		}
		memmove(g->scratch + m, g->scratch + part[c].lo, sizeof *g->scratch * (size_t)part[c].m);
		m += part[c].m;
	}
	memcpy(g->n, part[0].n, sizeof g->n);
	memcpy(g->h, part[0].h, sizeof g->h);
	memcpy(g->b, part[0].b, sizeof g->b);
	g->sse = part[0].sse;
	g->used = part[0].used;
	g->m = m;
	for (int a = 0; a < g->p; a++)
		for (int c = 0; c < a; c++) {
			g->n[c * g->p + a] = g->n[a * g->p + c];
			g->h[c * g->p + a] = g->h[a * g->p + c];
		}
	return g->want_scale ? ft_robust_scale(g->scratch, m) : g->scale;
}

/* Iteratively reweighted Gauss-Newton: plain least squares first (unless
 * robust), so that the robust weights start from a fit every row has had
 * its say in, then Cauchy weights at the median-based scale of the
 * previous pass, until the step is negligible (or, one_step, after the
 * first robust step: the caller checks).  No step more than doubles an
 * unknown; a least-squares step that makes the fit worse is halved. */
void ft_gfit_solve(struct fit *f, struct gfit *q, bool mem, const struct rowset *rs,
		   bool robust, bool one_step)
{
	struct gpass g = { .rs = rs, .scratch = f->scratch, .mem = mem, .th = q->th,
			   .idx = q->idx, .unit = q->unit, .p = q->p, .robust = robust, .scale = 1 };
	double prev[MAXP], sse_prev = HUGE_VAL;
	int p = q->p, halved = 0, robust_its = 0;

	if (!p)
		return;
	if (robust)
		g.scale = q->scale;
	for (int it = 0; it < MAX_ITER; it++) {
		double n[MAXP * MAXP], b[MAXP], lo[MAXP], hi[MAXP], d[MAXP], big = 0, scale, cap = 0;
		double inv[MAXP * MAXP];
		/* over all rows, once the robust scale is settled, it hardly moves;
		 * then Newton steps, with the loss's own curvature, converge in
		 * fewer passes than reweighting does */
		g.want_scale = rs->sample || !g.robust || (!robust && robust_its++ < 3);
		g.newton = !g.want_scale;
		scale = gpass(&g);
		if (!g.robust && g.sse > sse_prev && halved < 30) {
			for (int a = 0; a < p; a++)
				q->th[q->idx[a]] = (q->th[q->idx[a]] + prev[a]) / 2;
			halved++;
			continue;
		}
		halved = 0;
		sse_prev = g.sse;
		for (int a = 0; a < p; a++)
			prev[a] = q->th[q->idx[a]];
		memcpy(n, g.newton ? g.h : g.n, sizeof n);
		memcpy(b, g.b, sizeof b);
		memcpy(q->ndata, g.n, sizeof n);
		q->rows = g.used;
		q->scale = g.robust ? g.scale : scale;
		for (int a = 0; a < p; a++) {
			int j = q->idx[a];
			double phi = q->th[j] / q->unit[j], lam = q->lambda[j] * q->scale * q->scale;
			n[a * p + a] += lam;
			b[a] += lam * (q->prior[j] / q->unit[j] - phi);
			lo[a] = q->lo[j] / q->unit[j] - phi;
			hi[a] = q->hi[j] / q->unit[j] - phi;
		}
		ft_box_qp(p, n, b, lo, hi, d);
		ft_sym_solve(p, n, NULL, NULL, inv);
		for (int a = 0; a < p; a++)
			cap = fmax(cap, fabs(d[a]) / fmax(1, fabs(q->th[q->idx[a]] / q->unit[q->idx[a]])));
		for (int a = 0; cap > 1 && a < p; a++)
			d[a] /= cap; /* the box stays kept: lo ≤ 0 ≤ hi */
		for (int a = 0; a < p; a++) {
			int j = q->idx[a];
			/* a step within a tenth of the unknown's standard error changes
			 * nothing the data can tell */
			double tol = fmax(0.1 * q->scale * sqrt(inv[a * p + a]),
					  1e-9 * fmax(1, fabs(q->th[j] / q->unit[j])));
			q->th[j] = fmin(q->hi[j], fmax(q->lo[j], q->th[j] + d[a] * q->unit[j]));
			big = fmax(big, fabs(d[a]) / tol);
		}
		q->iters++;
		q->moved = fmax(q->moved, big);
		q->cut = g.robust && big >= 1 && one_step;
		if (g.robust && (big < 1 || one_step))
			break;
		if (!g.robust && (big < 1e2 || it >= 10)) {
			g.robust = true;
			sse_prev = HUGE_VAL;
		}
		g.scale = scale;
	}
}

/* The covariance of the free unknowns, in the parameters' units: data
 * only, or with the prior's pseudo-observations; cov is n×n over all
 * parameters (NAN where not free).  The scale is widened for the degrees
 * of freedom the fit used up: infinite when it used them all. */
void ft_gfit_cov(const struct gfit *q, int n, bool with_prior, double *cov)
{
	double a[MAXP * MAXP], inv[MAXP * MAXP];
	int p = q->p;
	double dof = q->rows > p ? sqrt((double)q->rows / (double)(q->rows - p)) : HUGE_VAL;

	for (int i = 0; i < n * n; i++)
		cov[i] = NAN;
	if (!p)
		return;
	memcpy(a, q->ndata, sizeof a);
	for (int c = 0; with_prior && c < p; c++)
		a[c * p + c] += q->lambda[q->idx[c]] * q->scale * q->scale;
	ft_sym_solve(p, a, NULL, NULL, inv);
	for (int r = 0; r < p; r++)
		for (int c = 0; c < p; c++)
			cov[q->idx[r] * n + q->idx[c]] = inv[r * p + c] * q->scale * q->scale *
							 dof * dof * q->unit[q->idx[r]] *
							 q->unit[q->idx[c]];
}

/* The size a standard error is measured against. */
double ft_rse_base(int j, double th, double unit)
{
	return j < NEFF ? th : fmax(fabs(th), unit);
}

/* Drop the worst-determined free unknown of q (coefficient first + j for
 * parameter j) when its standard error is more than FIT_MAX_RSE of its
 * size, or any when the measurements are too few for them all; it goes
 * back to its prior.  true when one was dropped, its reason in why[j]. */
bool ft_gfit_drop(struct gfit *q, int n, int first, char why[][200])
{
	double cov[MAXP * MAXP], worst = 0, corr = 0;
	int jw = -1, partner = -1, k = 0;
	bool few = q->rows <= q->p;
	struct gfit unit_scale = *q;

	/* too few measurements leave every error unbounded: rank them as if
	 * there were enough */
	if (few)
		unit_scale.rows = LONG_MAX / 2;
	ft_gfit_cov(&unit_scale, n, false, cov);
	for (int a = 0; a < q->p; a++) {
		int j = q->idx[a];
		double rse = sqrt(cov[j * n + j]) / ft_rse_base(first + j, q->th[j], q->unit[j]);
		if (isnan(rse))
			rse = HUGE_VAL;
		if (jw < 0 || rse > worst) {
			worst = rse;
			jw = j;
		}
	}
	if (jw < 0 || (!few && worst <= FIT_MAX_RSE))
		return false;
	for (int a = 0; a < q->p; a++) {
		int j = q->idx[a];
		double c;
		if (j == jw)
			continue;
		c = cov[jw * n + j] / sqrt(cov[jw * n + jw] * cov[j * n + j]);
		if (fabs(c) > fabs(corr)) {
			corr = c;
			partner = j;
		}
	}
	if (few)
		snprintf(why[jw], sizeof why[jw], "the records have too few measurements (%ld) for "
			 "the coefficients to fit (%d)", q->rows, q->p);
	else if (worst > 1e6)
		snprintf(why[jw], sizeof why[jw], "the records cannot tell it apart from %s",
			 partner >= 0 ? cost_coef_names[first + partner] : "the other coefficients");
	else if (partner >= 0 && fabs(corr) > 0.9)
		snprintf(why[jw], sizeof why[jw], "the records determine it only to ±%.0f%% "
			 "(more than %.0f%%): they barely tell it apart from %s (correlation %.2f)",
			 100 * worst, 100 * FIT_MAX_RSE, cost_coef_names[first + partner], corr);
	else
		snprintf(why[jw], sizeof why[jw], "the records determine it only to ±%.0f%% "
			 "(more than %.0f%%): its terms are too small a part of what was measured",
			 100 * worst, 100 * FIT_MAX_RSE);
	/* the others were fitted with jw free; held at its prior, jw's error
	 * passes to each in proportion to their covariance */
	for (int a = 0; a < q->p; a++) {
		int j = q->idx[a];
		double b = cov[j * n + jw] / cov[jw * n + jw];
		if (j == jw || !isfinite(b))
			continue;
		q->extra[j] += b * b * q->unit[jw] * q->unit[jw] / q->lambda[jw];
		if (j == partner && fabs(corr) > 0.9)
			q->absorbs[j] = 1 + jw;
	}
	for (int a = 0; a < q->p; a++)
		if (q->idx[a] != jw)
			q->idx[k++] = q->idx[a];
	q->p = k;
	q->th[jw] = q->prior[jw];
	return true;
}

/* --- passes over the records, on every core ------------------------------------ */

#define REC_CHUNK 64     /* records a thread takes at a time */

/* One thread's part of a pass: the next REC_CHUNK records no thread has
 * taken, until there are none. */
struct chunk {
	struct fit *f;
	enum pass pass;
	atomic_long *next;       /* the first record no thread has taken */
	long changed[2];
	struct ectx c;
};

static void *run_chunk(void *arg)
{
	struct chunk *ch = arg;
	struct fit *f = ch->f;
	long lo;

	while ((lo = atomic_fetch_add(ch->next, REC_CHUNK)) < f->nrecs) {
		long hi = lo + REC_CHUNK < f->nrecs ? lo + REC_CHUNK : f->nrecs;
		for (long ri = lo; ri < hi; ri++) {
			struct frec *r = &f->recs[ri];
			struct stime t[STEPREC_MAX_MS];
			long n = ft_rec_memory(&ch->c, f, ri, t);
			ch->changed[1] += r->held ? 0 : n;
			for (int i = 0; i < r->nrows; i++) {
				struct trow *tw = &f->tr[r->row0 + i];
				if (ch->pass == PASS_CHECK) {
					if (fabs(t[i].total - ft_row_pred(tw, ch->c.th)) <=
					    1e-7 * t[i].total)
						continue;
					ch->changed[0] += !r->held;
				}
				ft_row_basis(&ch->c, &f->rows[r->row0 + i], tw, &t[i]);
				ft_row_nonzero(tw);
			}
		}
	}
	return NULL;
}

/* Run a pass over all records on every core, the records shared out as
 * the threads go (each record is independent, so the result depends
 * neither on how many threads nor on which takes which); changed gets the
 * rows changed, times and peaks.  A thread that cannot be had leaves its
 * share to the others. */
void ft_for_records(struct fit *f, enum pass pass, const struct coef *k, long changed[2])
{
	struct chunk ch[MAX_THREADS];
	pthread_t tid[MAX_THREADS];
	bool started[MAX_THREADS] = { false };
	atomic_long next;
	int nt = threads();

	if (f->nrecs < 64 * nt)
		nt = 1;
	atomic_init(&next, 0);
	changed[0] = changed[1] = 0;
	for (int t = 0; t < nt; t++) {
		ch[t] = (struct chunk){ f, pass, &next, { 0, 0 }, { .job = f->job, .cl = f->cl } };
		ft_ectx_at(&ch[t].c, k);
		if (t > 0)
			started[t] = pthread_create(&tid[t], NULL, run_chunk, &ch[t]) == 0;
	}
	run_chunk(&ch[0]);
	for (int t = 0; t < nt; t++) {
		if (t > 0 && started[t])
			pthread_join(tid[t], NULL);
		changed[0] += ch[t].changed[0];
		changed[1] += ch[t].changed[1];
	}
}

