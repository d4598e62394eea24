/* The cost model fit's move coefficient (fit.c): move_piece_s, from the
 * seconds each record's generation entry took to move the actor's weights
 * into the engines (move_s), apart from the model-stage times, which
 * include it. */
#include "profile/fit_impl.h"

#include <math.h>
#include <stdlib.h>

double ft_move_prior_se(const struct fit_prior *pr)
{
	double se = pr->se[C_MOVE];

	/* a fixed cost, known to an order of magnitude: as the others */
	return isnan(se) || !(se > 0) ? FIT_PRIOR_RSE_FIXED * pr->k.move_piece_s : se;
}

/* What one move says of move_piece_s, and its record's weight. */
struct est {
	double th, w;
};

static int by_th(const void *a, const void *b)
{
	double x = ((const struct est *)a)->th, y = ((const struct est *)b)->th;

	return (x > y) - (x < y);
}

/* The weighted median of e[0..n), reordered. */
static double weighted_median(struct est *e, long n)
{
	double total = 0, sum = 0;

	qsort(e, (size_t)n, sizeof *e, by_th);
	for (long i = 0; i < n; i++)
		total += e[i].w;
	for (long i = 0; i < n; i++)
		if ((sum += e[i].w) >= total / 2)
			return e[i].th;
	return e[n - 1].th;
}

/* Each fitted move's estimate at the coefficients k (move_piece_s = th):
 * the seconds its slowest GPU's pieces took, the rest of what the model
 * prices (its bytes) taken off, per piece.  How many. */
static long estimates(const struct fit *f, const struct fit_opts *o, long last,
		      const struct coef *k, struct est *e)
{
	const struct env v = { &f->job, f->cl, k };
	const struct arch *a = &f->job.models[job_actor(&f->job)].arch;
	long n = 0;

	for (long i = 0; i < f->nmv; i++) {
		const struct mvrow *w = &f->mv[i];
		struct move_parts m;
		if (fit_held_out(w->step, o->holdout))
			continue;
		cost_move_parts(&v, a, &w->home, &w->gen, w->same_pool, &m);
		if (!(m.crit_pieces > 0))
			continue;
		e[n++] = (struct est){ fmax(0, (w->y - m.crit_s) / m.crit_pieces),
				       ft_rec_weight(&(struct frec){ .step = w->step }, last,
						     o->half_life) };
	}
	return n;
}

/* move_piece_s at the rest of k, from th: the estimates are those of one
 * line through the origin per move, so their weighted median is the
 * robust fit; the slowest GPU can change with the coefficient, so it is
 * found again at each new one.  *n: the moves it rests on; *se: its
 * standard error. */
static double solve(const struct fit *f, const struct fit_opts *o, long last, struct coef k,
		    double th, struct est *e, long *n, double *se)
{
	for (int it = 0; it < MAX_PASSES; it++) {
		double was = th;
		k.move_piece_s = th;
		if ((*n = estimates(f, o, last, &k, e)) == 0)
			return th;
		th = weighted_median(e, *n);
		if (fabs(th - was) <= 1e-9 * fmax(th, was))
			break;
	}
	k.move_piece_s = th;
	*n = estimates(f, o, last, &k, e);
	for (long i = 0; i < *n; i++)
		e[i].th = fabs(e[i].th - th);
	/* the median's standard error from the median absolute deviation:
	 * 1.4826 MAD is a normal's σ, and the median's 1.2533 σ / √n */
	*se = 1.2533 * 1.4826 * weighted_median(e, *n) / sqrt((double)*n);
	return th;
}

/* The value: the moves' estimate at the fitted coefficients, weighed with
 * the prior as a normal pseudo-observation of its standard error (widened
 * by decay, as the other coefficients' are), so that a refit on a few
 * noisy moves does not throw a better-known value away; the records' own
 * estimate at their own coefficients, where they have them. */
void ft_move(const struct fit *f, const struct fit_opts *o, long last, double decay,
	     struct fit_result *out)
{
	struct coef own = out->k;
	struct est *e = malloc(sizeof *e * (size_t)(f->nmv + 1));
	double th = 0, se = 0, pse = ft_move_prior_se(&f->prior) / sqrt(decay);
	double pth = f->prior.k.move_piece_s;
	long n = 0;

	if (e)
		th = solve(f, o, last, out->k, f->prior.k.move_piece_s, e, &n, &se);
	if (n == 0) {
		const char *why = e ? ft_unused_why[C_MOVE] : "out of memory fitting it";
		free(e);
		ft_set_coef(out, C_MOVE, f->prior.k.move_piece_s, ft_move_prior_se(&f->prior), false,
			    why);
		return;
	}
	/* one move alone says nothing of its spread: as sure as its value */
	if (n == 1)
		se = th;
	if (se > 0 && pse > 0) {
		double wd = 1 / (se * se), wp = 1 / (pse * pse);
		th = (wd * th + wp * pth) / (wd + wp);
		se = 1 / sqrt(wd + wp);
	}
	ft_set_coef(out, C_MOVE, th, se, true, "");
	for (int j = 0; j < C_MOVE; j++)
		if (isfinite(out->c[j].data))
			*cost_coef_field(&own, j) = out->c[j].data;
	out->c[C_MOVE].data = solve(f, o, last, own, th, e, &n, &out->c[C_MOVE].data_se);
	free(e);
}
