/* Fitting the cost model's coefficients to step records (see fit.h for the
 * method).  Notation: θ are the time coefficients as the model is linear
 * in them, θ_j = 1/eff for the seven efficiencies and the seconds
 * themselves for the fixed costs; the solver works in φ_j = θ_j / s_j,
 * s_j being the default's θ, so every unknown is of order one. */
#include "profile/fit.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/json.h"
#include "plan/plan.h"

#define NT 11          /* time coefficients: coef fields 0 .. NT-1 */
#define NEFF 7         /* of them, efficiencies (θ = 1/eff) */
#define C_STEP 11      /* step_s */
#define C_ACT 12       /* act_factor, workspace_gib, frag: the memory fit */
#define C_FRAG 14
#define NMEM 3
#define MAXP NT

#define CAUCHY 2.385        /* 95% efficiency at the normal */
#define OUTLIER 0.1         /* robust weight below which a time counts as an outlier */
#define MAX_PASSES 8        /* re-checks of the model's pieces */
#define MAX_ITER 60         /* weighted solves per pass */
#define MAX_THREADS 8       /* for evaluating the model over the records */
#define SAMPLE 40000        /* rows the first solves of a large fit look at */

/* One record's batch and where its rows are. */
struct frec {
	long step;
	long seqs, prompt;
	struct response_len resp;
	double step_obs;  /* step time less its stages' measured times; NAN if none */
	long row0;
	int nrows;
	bool held;
};

/* One measured model-stage: what the model needs to predict it.  What the
 * solves read on every pass lives apart, in struct trow and struct mrow, so
 * that a pass streams through only that. */
struct frow {
	long rec;
	signed char model, stage;
	short pool;
	bool same_pool;
	struct pconf conf, home; /* home: generation, the actor's training layout */
	double conc;             /* generation: concurrency observed */
	double resident;         /* bytes other state keeps on its GPUs (generation) */
};

/* A row's time as the time fit sees it. */
struct trow {
	double y;                /* seconds measured */
	double x0, x[NT];        /* seconds = x0 + x·θ on the current piece */
};

/* A row's peak as the memory fit sees it. */
struct mrow {
	double peak;             /* bytes measured; NAN when not */
	double mc, mx, md;       /* bytes = mc + (a·mx + md)·(1+f) + w·GiB near the current k */
};

struct fit {
	struct job job;
	const struct cluster *cl;
	struct fit_prior prior;
	struct coef k;           /* current coefficients */
	struct frec *recs;
	struct frow *rows;
	struct trow *tr;         /* parallel to rows */
	struct mrow *mr;
	long nrecs, nrows, caprecs, caprows, captr, capmr;
	long other;              /* records with status oom or paused */
	double *scratch;         /* absolute residuals, for medians */
	double *rw;              /* each row's weight in the fit: its record's, 0 held out */
};

/* What evaluating the model needs, one per thread: the job with the batch
 * of the record at hand. */
struct ectx {
	struct job job;
	const struct cluster *cl;
};

/* --- coefficients as θ ------------------------------------------------------- */

static double theta_of(const struct coef *k, int j)
{
	double v = coef_get(k, j);

	return j < NEFF ? 1 / v : v;
}

static void set_theta(struct coef *k, int j, double th)
{
	*coef_field(k, j) = j < NEFF ? 1 / th : th;
}

/* The default's θ: the solver's unit for θ_j. */
static double unit_of(int j)
{
	static double unit[COEF_FIELDS];

	if (unit[0] == 0) {
		struct coef d;
		coef_defaults(&d);
		for (int i = COEF_FIELDS - 1; i >= 0; i--)
			unit[i] = theta_of(&d, i);
	}
	return unit[j];
}

/* Bounds on θ, from the ranges nereus-cost(5) allows. */
static void bounds_of(int j, double *lo, double *hi)
{
	static const double max_fixed[COEF_FIELDS] = { [7] = 10, [8] = 10, [9] = 10, [10] = 3600,
						       [11] = 3600, [12] = 10, [13] = 1024,
						       [14] = 1 };

	if (j < NEFF) {
		*lo = 1;
		*hi = 1e4;
	} else {
		*lo = j == C_FRAG ? 1e-4 : 0;
		*hi = max_fixed[j];
	}
}

/* What exercises each coefficient, said when none does. */
static const char *const unused_why[COEF_FIELDS] = {
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
};

/* --- the model, one row at a time -------------------------------------------- */

static void use_batch(struct ectx *c, const struct frec *r)
{
	c->job.prompts_per_step = r->seqs;
	c->job.samples_per_prompt = 1;
	c->job.prompt_len = r->prompt;
	c->job.response = r->resp;
}

/* Generation as gen_cost computes it, with the concurrency the record
 * observed: gen_cost derives concurrency from the room left for the KV
 * cache, so give it a resident amount that leaves room for exactly that. */
static void gen_eval(const struct ectx *c, const struct frow *w, const struct coef *k,
		     struct stime *t, struct mem *m, double *peak)
{
	const struct env v = { &c->job, c->cl, k };
	const struct arch *a = &c->job.models[w->model].arch;
	struct mem base;
	double per_seq, fake;

	mem_gen_base(a, &w->conf, k, &base);
	per_seq = mem_kv_per_seq(a, w->conf.tp, c->job.prompt_len + c->job.response.p90) *
		  (1 + k->frag);
	fake = cluster_gpu_bytes(c->cl) - base.total - (floor(w->conc) + 0.5) * per_seq;
	gen_cost(&v, &w->conf, fake, &w->home, w->same_pool, t, m, peak);
	*peak += w->resident - fake;
}

/* Seconds of a row at k from the cost functions alone: without what
 * offloading adds (they do not look at offload), and for generation
 * without gen_cost's memory accounting.  Cheap, for probing; row_basis
 * checks it against row_time. */
static double fast_time(const struct ectx *c, const struct frow *w, const struct coef *k)
{
	const struct env v = { &c->job, c->cl, k };
	const struct arch *a = &c->job.models[w->model].arch;
	struct stime t;

	if (w->stage == STAGE_GEN) {
		double per_seq = mem_kv_per_seq(a, w->conf.tp, c->job.prompt_len +
						c->job.response.p90) * (1 + k->frag);
		cost_gen(&v, a, &w->conf, (floor(w->conc) + 0.5) * per_seq, &t);
		return t.total + cost_move(&v, a, &w->home, &w->conf, w->same_pool);
	}
	if (w->stage == STAGE_TRAIN)
		cost_train(&v, a, &w->conf, &t);
	else
		cost_infer(&v, a, &w->conf, &t);
	return t.total;
}

/* Seconds of one row at coefficients k, as plan_evaluate predicts them
 * (model_cost adds host transfers only when the layout offloads). */
static double row_time(const struct ectx *c, const struct frow *w, const struct coef *k)
{
	const struct env v = { &c->job, c->cl, k };
	struct stime t;
	struct mem m;
	double peak;

	if (w->stage == STAGE_GEN) {
		gen_eval(c, w, k, &t, &m, &peak);
		return t.total;
	}
	if (w->conf.offload) {
		struct mcost mc;
		model_cost(&v, w->model, &w->conf, &mc);
		return mc.t[w->stage];
	}
	return fast_time(c, w, k);
}

/* The coefficients a row most likely uses, to probe first: its stage's
 * efficiency and fixed costs, links when its groups span GPUs or nodes,
 * collective latency with TP, the host link when it offloads.  stage_s is
 * taken to count once, unprobed.  A guess only: the time the model
 * predicts must equal the sum of the probed terms (it is homogeneous in
 * θ), and a row where it does not is probed in full. */
static unsigned likely(const struct ectx *c, const struct frow *w)
{
	int gpn = c->cl->gpus_per_node, gpus = pconf_gpus(&w->conf);
	unsigned use = 0;
	bool inter = gpus > gpn;

	if (w->stage == STAGE_GEN) {
		use = 1u << 1 | 1u << 2 | 1u << 3 | 1u << 9 | 1u << 4;
		inter |= !w->same_pool || pconf_gpus(&w->home) > gpn;
	} else {
		use = 1u << (w->stage == STAGE_TRAIN ? 0 : 1) | 1u << 8;
		use |= gpus > 1 ? 1u << 4 : 0;
		use |= w->conf.offload ? 1u << 6 : 0;
	}
	use |= inter ? 1u << 5 : 0;
	use |= w->conf.tp > 1 ? 1u << 7 : 0;
	return use;
}

/* The model's gradient in θ at k (a forward difference on the piece k is
 * on), and what the model adds that no coefficient scales (x0).  f0 is the
 * row's time at k.  The first try probes through fast_time, an offloading
 * row's host transfers taken as the rest of f0 over host_eff; the second,
 * when the first does not add up to f0, probes row_time itself. */
static void row_basis(const struct ectx *c, const struct frow *w, struct trow *tw,
		      const struct coef *k, double f0)
{
	double sum;
	unsigned use = likely(c, w);

	for (int pass = 0; pass < 2; pass++) {
		bool fast = pass == 0, host = fast && w->stage != STAGE_GEN && w->conf.offload;
		double base = fast ? fast_time(c, w, k) : f0;
		sum = 0;
		for (int j = 0; j < NT; j++) {
			struct coef kp = *k;
			double th = theta_of(k, j), h;
			tw->x[j] = j == 10 && fast ? 1 : 0;
			if (host && j == 6)
				tw->x[j] = fmax(0, (f0 - base) / th);
			if (!(use & 1u << j) || (host && j == 6)) {
				sum += tw->x[j] * th;
				continue;
			}
			h = 1e-5 * fmax(th, unit_of(j));
			set_theta(&kp, j, th + h);
			tw->x[j] = fmax(0, ((fast ? fast_time(c, w, &kp) : row_time(c, w, &kp)) - base) / h);
			sum += tw->x[j] * th;
		}
		tw->x0 = f0 - sum;
		if (fabs(tw->x0) <= 1e-9 * f0)
			break;
		use = (1u << NT) - 1;
	}
	if (fabs(tw->x0) <= 1e-9 * f0)
		tw->x0 = 0;
}

static double row_pred(const struct trow *w, const double *th)
{
	double p = w->x0;

	for (int j = 0; j < NT; j++)
		p += w->x[j] * th[j];
	return p;
}

/* The memory terms of a row at k: peak = mc + act + frag + workspace, the
 * activations a·mx, the fragmentation f·(act + md). */
static void row_memory_terms(struct mrow *w, const struct mem *m, double peak,
			     const struct coef *k)
{
	double dyn = m->logits + m->kv;

	w->mx = k->act_factor > 0 ? m->act / k->act_factor : 0;
	w->md = dyn;
	w->mc = peak - m->act - dyn - m->frag - m->workspace;
}

static double mem_pred(const struct mrow *w, const double *m)
{
	return w->mc + (m[0] * w->mx + w->md) * (1 + m[2]) + m[1] * GIB;
}

/* Recompute the memory terms of every row of record ri at k, and each
 * row's time at k into t0; returns how many rows' previous memory terms
 * disagreed with the model at k. */
static long rec_memory(struct ectx *c, struct fit *f, long ri, const struct coef *k,
		       double *t0)
{
	struct frec *r = &f->recs[ri];
	const struct env v = { &c->job, c->cl, k };
	double res[MAX_ITEMS] = { 0 }, mk[NMEM] = { k->act_factor, k->workspace_gib, k->frag };
	struct mcost mc[MAX_MODELS];
	bool have[MAX_MODELS] = { false };
	long changed = 0;

	use_batch(c, r);
	for (int i = 0; i < r->nrows; i++) {
		struct frow *w = &f->rows[r->row0 + i];
		if (w->stage == STAGE_GEN || have[w->model])
			continue;
		model_cost(&v, w->model, &w->conf, &mc[w->model]);
		have[w->model] = true;
		res[w->pool] += mc[w->model].res;
	}
	for (int i = 0; i < r->nrows; i++) {
		struct frow *w = &f->rows[r->row0 + i];
		struct mrow *mw = &f->mr[r->row0 + i];
		struct coef kk = *k;
		struct mem m;
		struct stime t;
		double peak, before = mem_pred(mw, mk);
		if (kk.act_factor < 1e-6)
			kk.act_factor = 1e-6; /* keep the activations' size visible */
		if (w->stage == STAGE_GEN) {
			w->resident = res[w->pool];
			gen_eval(c, w, &kk, &t, &m, &peak);
			t0[i] = t.total; /* act_factor does not change times */
		} else {
			t0[i] = mc[w->model].t[w->stage];
			m = mc[w->model].mem[w->stage];
			peak = res[w->pool] + mc[w->model].need[w->stage];
			if (kk.act_factor != k->act_factor) {
				struct mcost m2;
				model_cost(&(struct env){ &c->job, c->cl, &kk }, w->model, &w->conf, &m2);
				m = m2.mem[w->stage];
				peak = res[w->pool] + m2.need[w->stage];
			}
		}
		row_memory_terms(mw, &m, peak, &kk);
		if (!isnan(mw->peak) && fabs(mem_pred(mw, mk) - before) > 1e-9 * fabs(before))
			changed++;
	}
	return changed;
}

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
static void sym_solve(int p, const double *n, const double *b, double *x, double *inv)
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
static void box_qp(int p, const double *n, const double *b, const double *lo,
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
			sym_solve(nf, sub, rhs, z, NULL);
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

/* The q-quantile of v[0..n) (reordered). */
static double quantile(double *v, long n, double q)
{
	long lo = 0, hi = n - 1, k = (long)(q * (double)(n - 1));

	if (n <= 0)
		return NAN;
	/* quickselect */
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

static double robust_scale(double *absr, long n)
{
	return fmax(1.4826 * quantile(absr, n, 0.5), 1e-9);
}

/* --- weights and threads ----------------------------------------------------- */

/* A record's weight: 0.5^(its age in steps / the half-life). */
static double rec_weight(const struct frec *r, long last, double half_life)
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
	struct fit *f;
	bool mem;
	const double *th;     /* θ of every time coefficient, or the memory m */
	const int *idx;       /* the free unknowns */
	const double *unit;
	int p;
	long stride;          /* every stride-th row (hashed) */
	bool robust;
	double scale;         /* Cauchy weights at this scale */
	bool want_scale;      /* collect the absolute residuals for a new scale */
	bool newton;          /* also the curvature of the Cauchy loss, in h */
	long lo, hi;          /* rows */
	double n[MAXP * MAXP], b[MAXP], h[MAXP * MAXP];
	double sse;           /* Σ weight · residual² */
	long used;            /* rows in the sums */
	long m;               /* absolute residuals written from scratch[lo] */
};

/* Whether row i is in the sample of one row in stride: hashed, so that
 * the sample mixes every kind of row whatever the records' layout. */
static bool sampled(long i, long stride)
{
	return stride == 1 ||
	       ((uint64_t)i * 0x9E3779B97F4A7C15ull >> 32 & 0xFFFFFFFFu) < 0x100000000ull / stride;
}

static void *gpass_run(void *arg)
{
	struct gpass *g = arg;
	const struct fit *f = g->f;
	const int p = g->p;
	const double c2 = 1 / (CAUCHY * g->scale * CAUCHY * g->scale);
	/* sums in locals: the compiler need not fear they alias the rows */
	double n[MAXP * MAXP] = { 0 }, b[MAXP] = { 0 }, h[MAXP * MAXP] = { 0 }, sse = 0;
	long used = 0, m = 0;

	for (long i = g->lo; i < g->hi; i++) {
		double pred, r, wt, ht, u2, jac[MAXP], gr[MAXP];
		int nz[MAXP], k = 0;
		if (!sampled(i, g->stride) || f->rw[i] == 0)
			continue;
		if (g->mem) {
			const struct mrow *w = &f->mr[i];
			if (isnan(w->peak))
				continue;
			pred = fmax(mem_pred(w, g->th), 1e-300); /* a step too far shows as a misfit */
			r = log(w->peak / pred);
			jac[0] = w->mx * (1 + g->th[2]);
			jac[1] = GIB;
			jac[2] = g->th[0] * w->mx + w->md;
			for (int a = 0; a < p; a++)
				gr[a] = jac[g->idx[a]] * g->unit[g->idx[a]] / pred;
		} else {
			const struct trow *w = &f->tr[i];
			pred = fmax(row_pred(w, g->th), 1e-300);
			r = log(w->y / pred);
			pred = 1 / pred;
			for (int a = 0; a < p; a++)
				gr[a] = w->x[g->idx[a]] * g->unit[g->idx[a]] * pred;
		}
		if (g->want_scale)
			f->scratch[g->lo + m++] = fabs(r);
		/* the reweighting weight ψ(r)/r, and the curvature ψ'(r) where positive */
		u2 = g->robust ? r * r * c2 : 0;
		wt = f->rw[i] / (1 + u2);
		ht = u2 < 1 ? wt * (1 - u2) / (1 + u2) : 0;
		sse += f->rw[i] * r * r;
		used++;
		for (int a = 0; a < p; a++)
			if (gr[a] != 0)
				nz[k++] = a;
		for (int a = 0; a < k; a++) {
			double ga = wt * gr[nz[a]];
			b[nz[a]] += ga * r;
			for (int c = 0; c <= a; c++)
				n[nz[a] * p + nz[c]] += ga * gr[nz[c]];
		}
		for (int a = 0; g->newton && a < k; a++) {
			double ga = ht * gr[nz[a]];
			for (int c = 0; c <= a; c++)
				h[nz[a] * p + nz[c]] += ga * gr[nz[c]];
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

/* Run one pass on every core; the sums come back in g.  Returns the
 * robust scale of the residuals (g's own when it does not want a new one). */
static double gpass(struct gpass *g)
{
	struct fit *f = g->f;
	struct gpass part[MAX_THREADS];
	pthread_t tid[MAX_THREADS];
	bool started[MAX_THREADS] = { false };
	int nt = f->nrows / g->stride < 20000 ? 1 : threads();
	long m = 0;

	for (int t = 0; t < nt; t++) {
		part[t] = *g;
		part[t].lo = f->nrows * t / nt;
		part[t].hi = f->nrows * (t + 1) / nt;
		if (t > 0)
			started[t] = pthread_create(&tid[t], NULL, gpass_run, &part[t]) == 0;
	}
	gpass_run(&part[0]);
	for (int t = 0; t < nt; t++) {
		if (t > 0 && started[t])
			pthread_join(tid[t], NULL);
		else if (t > 0)
			gpass_run(&part[t]);
		/* the same order of sums whatever the thread count would need a
		 * fixed split; the split depends only on the core count */
		if (t > 0) {
			for (int i = 0; i < MAXP * MAXP; i++) {
				part[0].n[i] += part[t].n[i];
				part[0].h[i] += part[t].h[i];
			}
			for (int i = 0; i < MAXP; i++)
				part[0].b[i] += part[t].b[i];
			part[0].sse += part[t].sse;
			part[0].used += part[t].used;
		}
		memmove(f->scratch + m, f->scratch + part[t].lo, sizeof *f->scratch * (size_t)part[t].m);
		m += part[t].m;
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
	return g->want_scale ? robust_scale(f->scratch, m) : g->scale;
}

/* The unknowns of a Gauss-Newton fit and what constrains them. */
struct gfit {
	int p;
	int idx[MAXP];           /* which of the problem's parameters are free */
	double *th;              /* every parameter (the free ones are updated) */
	const double *unit, *lo, *hi, *prior, *lambda; /* per parameter */
	double scale;
	long rows;               /* measurements in the last pass */
	double ndata[MAXP * MAXP]; /* data-only normal matrix of the last pass */
	int iters;
};

/* Iteratively reweighted Gauss-Newton: plain least squares first (unless
 * robust), so that the robust weights start from a fit every row has had
 * its say in, then Cauchy weights at the median-based scale of the
 * previous pass, until the step is negligible.  No step more than doubles
 * an unknown; a least-squares step that makes the fit worse is halved. */
static void gfit_solve(struct fit *f, struct gfit *q, bool mem, long stride, bool robust)
{
	struct gpass g = { .f = f, .mem = mem, .th = q->th, .idx = q->idx, .unit = q->unit,
			   .p = q->p, .stride = stride, .robust = robust, .scale = 1 };
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
		g.want_scale = stride > 1 || !g.robust || (!robust && robust_its++ < 3);
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
		box_qp(p, n, b, lo, hi, d);
		sym_solve(p, n, NULL, NULL, inv);
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
		if (g.robust && big < 1)
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
static void gfit_cov(const struct gfit *q, int n, bool with_prior, double *cov)
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
	sym_solve(p, a, NULL, NULL, inv);
	for (int r = 0; r < p; r++)
		for (int c = 0; c < p; c++)
			cov[q->idx[r] * n + q->idx[c]] = inv[r * p + c] * q->scale * q->scale *
							 dof * dof * q->unit[q->idx[r]] *
							 q->unit[q->idx[c]];
}

/* The size a standard error is measured against. */
static double rse_base(int j, double th)
{
	return j < NEFF ? th : fmax(fabs(th), unit_of(j));
}

/* Drop the worst-determined free unknown of q (coefficient first + j for
 * parameter j) when its standard error is more than FIT_MAX_RSE of its
 * size, or any when the measurements are too few for them all; it goes
 * back to its prior.  true when one was dropped, its reason in why[j]. */
static bool gfit_drop(struct gfit *q, int n, int first, char why[][200])
{
	double cov[MAXP * MAXP], worst = 0, corr = 0;
	int jw = -1, partner = -1, k = 0;
	bool few = q->rows <= q->p;
	struct gfit unit_scale = *q;

	/* too few measurements leave every error unbounded: rank them as if
	 * there were enough */
	if (few)
		unit_scale.rows = LONG_MAX / 2;
	gfit_cov(&unit_scale, n, false, cov);
	for (int a = 0; a < q->p; a++) {
		int j = q->idx[a];
		double rse = sqrt(cov[j * n + j]) / rse_base(first + j, q->th[j]);
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
			 partner >= 0 ? coef_names[first + partner] : "the other coefficients");
	else if (partner >= 0 && fabs(corr) > 0.9)
		snprintf(why[jw], sizeof why[jw], "the records determine it only to ±%.0f%% "
			 "(more than %.0f%%): they barely tell it apart from %s (correlation %.2f)",
			 100 * worst, 100 * FIT_MAX_RSE, coef_names[first + partner], corr);
	else
		snprintf(why[jw], sizeof why[jw], "the records determine it only to ±%.0f%% "
			 "(more than %.0f%%): its terms are too small a part of what was measured",
			 100 * worst, 100 * FIT_MAX_RSE);
	for (int a = 0; a < q->p; a++)
		if (q->idx[a] != jw)
			q->idx[k++] = q->idx[a];
	q->p = k;
	q->th[jw] = q->prior[jw];
	return true;
}

/* --- passes over the records, on every core ------------------------------------ */

/* PASS_PREPARE: every row's basis and memory terms at k.  PASS_CHECK:
 * re-check each row's time and peak against the model at k; new bases
 * where the time's piece changed, new memory terms everywhere.  changed
 * counts the fitted rows whose time (0) or peak (1) was off its piece. */
enum pass { PASS_PREPARE, PASS_CHECK };

struct chunk {
	struct fit *f;
	enum pass pass;
	const struct coef *k;
	long lo, hi, changed[2];
	struct ectx c;
};

static void *run_chunk(void *arg)
{
	struct chunk *ch = arg;
	struct fit *f = ch->f;
	double th[NT];

	for (int j = 0; j < NT; j++)
		th[j] = theta_of(ch->k, j);
	for (long ri = ch->lo; ri < ch->hi; ri++) {
		struct frec *r = &f->recs[ri];
		double t0[STEPREC_MAX_MS];
		long n = rec_memory(&ch->c, f, ri, ch->k, t0);
		ch->changed[1] += r->held ? 0 : n;
		for (int i = 0; i < r->nrows; i++) {
			struct trow *tw = &f->tr[r->row0 + i];
			if (ch->pass == PASS_CHECK) {
				if (fabs(t0[i] - row_pred(tw, th)) <= 1e-7 * t0[i])
					continue;
				ch->changed[0] += !r->held;
			}
			row_basis(&ch->c, &f->rows[r->row0 + i], tw, ch->k, t0[i]);
		}
	}
	return NULL;
}

/* Run a pass over all records, split among threads (each record is
 * independent, so the result does not depend on how many); changed gets
 * the rows changed, times and peaks. */
static void for_records(struct fit *f, enum pass pass, const struct coef *k, long changed[2])
{
	struct chunk ch[MAX_THREADS];
	pthread_t tid[MAX_THREADS];
	bool started[MAX_THREADS] = { false };
	int nt = threads();

	if (f->nrecs < 64 * nt)
		nt = 1;
	changed[0] = changed[1] = 0;
	for (int t = 0; t < nt; t++) {
		ch[t] = (struct chunk){ f, pass, k, f->nrecs * t / nt, f->nrecs * (t + 1) / nt,
					{ 0, 0 }, { f->job, f->cl } };
		if (t > 0)
			started[t] = pthread_create(&tid[t], NULL, run_chunk, &ch[t]) == 0;
	}
	run_chunk(&ch[0]);
	for (int t = 0; t < nt; t++) {
		if (t > 0 && started[t])
			pthread_join(tid[t], NULL);
		else if (t > 0)
			run_chunk(&ch[t]); /* no thread to be had: do it here */
		changed[0] += ch[t].changed[0];
		changed[1] += ch[t].changed[1];
	}
}

/* --- records ----------------------------------------------------------------- */

int fit_new(struct fit **out, const struct job *job, const struct cluster *cl,
	    const struct fit_prior *prior, struct err *e)
{
	struct fit *f = calloc(1, sizeof *f);

	if (!f)
		return err_set(e, NR_EIO, "out of memory");
	f->job = *job;
	f->cl = cl;
	if (prior)
		f->prior = *prior;
	else
		fit_prior_defaults(&f->prior);
	f->k = f->prior.k;
	*out = f;
	return NR_OK;
}

void fit_free(struct fit *f)
{
	if (!f)
		return;
	free(f->recs);
	free(f->rows);
	free(f->tr);
	free(f->mr);
	free(f->scratch);
	free(f->rw);
	free(f);
}

static bool grow(void **p, long *cap, long need, size_t size)
{
	void *np;
	long nc;

	if (need <= *cap)
		return true;
	nc = *cap ? *cap * 2 : 1024;
	while (nc < need)
		nc *= 2;
	np = realloc(*p, (size_t)nc * size);
	if (!np)
		return false;
	*p = np;
	*cap = nc;
	return true;
}

/* Σ over stages of the slowest pool's summed times: the step less its
 * fixed cost, as plan_evaluate composes it. */
static double stages_sum(const struct frow *rows, int n, const double *t)
{
	double total = 0;

	for (int s = 0; s < NSTAGES; s++) {
		double pool_t[MAX_ITEMS] = { 0 }, worst = 0;
		for (int i = 0; i < n; i++)
			if (rows[i].stage == s)
				pool_t[rows[i].pool] += t[i];
		for (int p = 0; p < MAX_ITEMS; p++)
			worst = fmax(worst, pool_t[p]);
		total += worst;
	}
	return total;
}

int fit_add(struct fit *f, const struct step_record *r, struct err *e)
{
	struct frec *rec;
	int actor = job_actor(&f->job), home = -1, train[MAX_MODELS];
	double ys[STEPREC_MAX_MS];

	if (r->status != STEP_OK) {
		f->other++;
		return NR_OK;
	}
	if (!grow((void **)&f->recs, &f->caprecs, f->nrecs + 1, sizeof *f->recs) ||
	    !grow((void **)&f->rows, &f->caprows, f->nrows + r->nms, sizeof *f->rows) ||
	    !grow((void **)&f->tr, &f->captr, f->nrows + r->nms, sizeof *f->tr) ||
	    !grow((void **)&f->mr, &f->capmr, f->nrows + r->nms, sizeof *f->mr))
		return err_set(e, NR_EIO, "out of memory");
	rec = &f->recs[f->nrecs];
	*rec = (struct frec){ r->step, r->sequences, r->prompt_len, r->response, NAN, f->nrows,
			      r->nms, false };
	/* a model's home layout is its training entry's: inference entries do
	 * not say how it recomputes or shards its optimizer */
	for (int m = 0; m < MAX_MODELS; m++)
		train[m] = -1;
	for (int i = 0; i < r->nms; i++) {
		const struct model *md = job_model(&f->job, r->ms[i].model);
		if (md && r->ms[i].stage == STAGE_TRAIN)
			train[md - f->job.models] = i;
		if (r->ms[i].stage != STAGE_GEN && md == &f->job.models[actor] &&
		    (home < 0 || r->ms[i].stage == STAGE_TRAIN))
			home = i;
	}
	for (int i = 0; i < r->nms; i++) {
		const struct ms_record *ms = &r->ms[i];
		const struct model *md = job_model(&f->job, ms->model);
		struct frow *w = &f->rows[f->nrows + i];
		if (!md)
			return err_set(e, NR_EINPUT, "step %ld: job '%s' has no model '%s'", r->step,
				       f->job.name, ms->model);
		*w = (struct frow){ .rec = f->nrecs, .model = (signed char)(md - f->job.models),
				    .stage = (signed char)ms->stage, .pool = (short)ms->pool,
				    .same_pool = ms->same_pool, .conf = ms->conf,
				    .conc = ms->concurrency };
		f->tr[f->nrows + i] = (struct trow){ .y = ms->time_s };
		f->mr[f->nrows + i] = (struct mrow){ .peak = ms->peak_gib * GIB };
		if (ms->stage == STAGE_INF && train[w->model] >= 0)
			w->conf = r->ms[train[w->model]].conf;
		if (ms->stage == STAGE_GEN && home >= 0)
			w->home = r->ms[home].conf;
		ys[i] = ms->time_s;
	}
	if (isfinite(r->step_time_s))
		rec->step_obs = r->step_time_s - stages_sum(&f->rows[f->nrows], r->nms, ys);
	f->nrows += r->nms;
	f->nrecs++;
	return NR_OK;
}

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
static double prior_se_theta(const struct fit_prior *pr, int j)
{
	double v = coef_get(&pr->k, j), se = pr->se[j], th = theta_of(&pr->k, j);

	if (isnan(se) || !(se > 0))
		return FIT_PRIOR_RSE * rse_base(j, th);
	return j < NEFF ? se / (v * v) : se;
}

static void set_coef(struct fit_result *out, int j, double value, double se, bool fitted,
		     const char *why)
{
	out->c[j].value = value;
	out->c[j].se = se;
	out->c[j].fitted = fitted;
	snprintf(out->c[j].why, sizeof out->c[j].why, "%.199s", fitted ? "" : why);
	*coef_field(&out->k, j) = value;
}

/* Solve on a sample of a large fit first, then on every row from there;
 * drop what the records cannot determine, and solve again. */
static void gfit_run(struct fit *f, struct gfit *q, bool mem, long rows, int n, int first,
		     char why[][200])
{
	do {
		long stride = rows / SAMPLE + 1;
		if (stride > 1)
			gfit_solve(f, q, mem, stride, false);
		gfit_solve(f, q, mem, 1, stride > 1);
	} while (gfit_drop(q, n, first, why));
}

/* One of the two fits: the time coefficients (0 .. NT-1) or the memory
 * margins (C_ACT ..), with what bounds and anchors them. */
struct part {
	bool mem;
	int n, first;
	double th[NT], unit[NT], lo[NT], hi[NT], prior[NT], lambda[NT];
	char why[NT][200];
	long rows;               /* measurements it fits */
	struct gfit q;
};

static void part_init(struct fit *f, struct part *pt, bool mem, double decay,
		      struct fit_result *out)
{
	bool used[NT] = { false };

	memset(pt, 0, sizeof *pt);
	pt->mem = mem;
	pt->n = mem ? NMEM : NT;
	pt->first = mem ? C_ACT : 0;
	pt->q = (struct gfit){ .th = pt->th, .unit = pt->unit, .lo = pt->lo, .hi = pt->hi,
			       .prior = pt->prior, .lambda = pt->lambda };
	for (long i = 0; i < f->nrows; i++) {
		const struct mrow *mw = &f->mr[i];
		if (f->rw[i] == 0 || (mem && isnan(mw->peak)))
			continue;
		pt->rows++;
		for (int j = 0; !mem && j < NT; j++)
			used[j] |= f->tr[i].x[j] > 0;
		if (mem) {
			used[0] |= mw->mx > 0;
			used[1] = true;
			used[2] |= mw->mx > 0 || mw->md > 0;
		}
	}
	for (int j = 0; j < pt->n; j++) {
		int c = pt->first + j;
		double se = prior_se_theta(&f->prior, c);
		pt->th[j] = pt->prior[j] = mem ? coef_get(&f->prior.k, c) : theta_of(&f->prior.k, c);
		pt->unit[j] = unit_of(c);
		bounds_of(c, &pt->lo[j], &pt->hi[j]);
		pt->lambda[j] = decay * (pt->unit[j] / se) * (pt->unit[j] / se);
		if (used[j])
			pt->q.idx[pt->q.p++] = j;
		else
			snprintf(pt->why[j], sizeof pt->why[j], "%s", unused_why[c]);
	}
	if (mem)
		out->peak_rows = pt->rows;
}

static void part_solve(struct fit *f, struct part *pt)
{
	gfit_run(f, &pt->q, pt->mem, pt->rows, pt->n, pt->first, pt->why);
}

/* Set k's coefficients of this part to its current values. */
static void part_coef(const struct part *pt, struct coef *k)
{
	for (int j = 0; j < pt->n; j++) {
		if (pt->mem)
			*coef_field(k, pt->first + j) = pt->th[j];
		else
			set_theta(k, pt->first + j, pt->th[j]);
	}
}

static void part_finish(struct fit *f, struct part *pt, double decay, struct fit_result *out)
{
	double cov[MAXP * MAXP];

	gfit_cov(&pt->q, pt->n, true, cov);
	for (int j = 0; j < pt->n; j++) {
		int c = pt->first + j;
		double se = sqrt(cov[j * pt->n + j]), pse = f->prior.se[c], th = pt->th[j];
		if (isnan(se))
			set_coef(out, c, coef_get(&f->prior.k, c), isnan(pse) ? NAN : pse / sqrt(decay),
				 false, pt->why[j]);
		else if (c < NEFF)
			set_coef(out, c, 1 / th, se / (th * th), true, "");
		else
			set_coef(out, c, th, se, true, "");
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

	if (!pt)
		return false;
	part_init(f, &pt[0], false, decay, out);
	part_init(f, &pt[1], true, decay, out);
	for (int pass = 0; pass < MAX_PASSES; pass++) {
		for (int i = 0; i < 2; i++)
			if (changed[i])
				part_solve(f, &pt[i]);
		part_coef(&pt[0], &k);
		part_coef(&pt[1], &k);
		for_records(f, PASS_CHECK, &k, changed);
		if (!changed[0] && !changed[1])
			break;
		out->repieces++;
	}
	part_finish(f, &pt[0], decay, out);
	part_finish(f, &pt[1], decay, out);
	free(pt);
	return true;
}

static void fit_step(struct fit *f, const double *wrec, double decay, struct fit_result *out)
{
	double th = coef_get(&f->prior.k, C_STEP), prior = th, scale = 1, sw = 0;
	double pse = prior_se_theta(&f->prior, C_STEP), lam, lo, hi, se, rse;
	long n = 0;

	bounds_of(C_STEP, &lo, &hi);
	for (long i = 0; i < f->nrecs; i++)
		n += !f->recs[i].held && !isnan(f->recs[i].step_obs);
	if (n == 0) {
		set_coef(out, C_STEP, prior, f->prior.se[C_STEP], false, unused_why[C_STEP]);
		return;
	}
	for (int it = 0; it < MAX_ITER; it++) {
		double num = 0, old = th;
		long m = 0;
		for (long i = 0; i < f->nrecs; i++)
			if (!f->recs[i].held && !isnan(f->recs[i].step_obs))
				f->scratch[m++] = fabs(f->recs[i].step_obs - th);
		scale = it ? robust_scale(f->scratch, m) : fmax(robust_scale(f->scratch, m), 1e-6);
		lam = decay * scale * scale / (pse * pse);
		sw = lam;
		num = lam * prior;
		for (long i = 0; i < f->nrecs; i++) {
			const struct frec *r = &f->recs[i];
			double res, u;
			if (r->held || isnan(r->step_obs))
				continue;
			res = (r->step_obs - th) / (CAUCHY * scale);
			u = wrec[i] / (1 + res * res);
			sw += u;
			num += u * r->step_obs;
		}
		th = fmin(hi, fmax(lo, num / sw));
		out->iterations++;
		if (fabs(th - old) <= 1e-12 * fmax(1, fabs(th)) && it >= 2)
			break;
	}
	if (n > 1)
		scale *= sqrt((double)n / (double)(n - 1)); /* one degree of freedom used */
	se = scale / sqrt(sw - lam > 0 ? sw - lam : 1e-300);
	rse = se / rse_base(C_STEP, th);
	if (n < 2 || !(rse <= FIT_MAX_RSE)) {
		char why[200];
		snprintf(why, sizeof why, n < 2 ? "only one record has a step time" :
			 "the records determine it only to ±%.0f%% (more than %.0f%%): the step "
			 "times barely exceed their stages'", 100 * rse, 100 * FIT_MAX_RSE);
		set_coef(out, C_STEP, prior,
			 isnan(f->prior.se[C_STEP]) ? NAN : f->prior.se[C_STEP] / sqrt(decay), false,
			 why);
		return;
	}
	set_coef(out, C_STEP, th, scale / sqrt(sw), true, "");
}

/* Quality: relative errors of fitted and held-out times, step times and
 * peaks, at the fitted coefficients. */
static void fit_quality(struct fit *f, struct fit_result *out)
{
	double th[NT], mk[NMEM] = { out->k.act_factor, out->k.workspace_gib, out->k.frag };
	double sum_fit = 0, sum_held = 0, sum_step = 0, sum_peak = 0;
	long m = 0, nstep = 0, npeak = 0;

	for (int j = 0; j < NT; j++)
		th[j] = theta_of(&out->k, j);
	for (long ri = 0; ri < f->nrecs; ri++) {
		const struct frec *r = &f->recs[ri];
		double pred[STEPREC_MAX_MS];
		for (int i = 0; i < r->nrows; i++) {
			const struct trow *w = &f->tr[r->row0 + i];
			const struct mrow *mw = &f->mr[r->row0 + i];
			double err;
			pred[i] = row_pred(w, th);
			err = fabs(w->y / pred[i] - 1);
			if (r->held) {
				sum_held += err;
				continue;
			}
			sum_fit += err;
			f->scratch[m++] = err;
			/* where the Cauchy weight falls below OUTLIER */
			out->outliers += fabs(log(w->y / pred[i])) >
					 CAUCHY * out->scale * sqrt(1 / OUTLIER - 1);
			if (!isnan(mw->peak)) {
				sum_peak += fabs(mw->peak / mem_pred(mw, mk) - 1);
				npeak++;
			}
		}
		if (r->held && !isnan(r->step_obs)) {
			double obs = r->step_obs, p = out->k.step_s + stages_sum(&f->rows[r->row0],
										 r->nrows, pred);
			double ys[STEPREC_MAX_MS];
			for (int i = 0; i < r->nrows; i++)
				ys[i] = f->tr[r->row0 + i].y;
			obs += stages_sum(&f->rows[r->row0], r->nrows, ys);
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
	out->median = quantile(f->scratch, m, 0.5);
	out->p90 = quantile(f->scratch, m, 0.9);
}

int fit_run(struct fit *f, const struct fit_opts *o, struct fit_result *out, struct err *e)
{
	double *wrec, decay = 1;
	long last = -1, first = -1, changed[2];

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
	out->fit_records = f->nrecs - out->held_records;
	out->rows = f->nrows;
	out->fit_rows = f->nrows - out->held_rows;
	out->first_step = first;
	out->last_step = last;
	if (out->fit_records == 0)
		return err_set(e, NR_EINPUT, f->nrecs ? "every step record with times is held out "
			       "(--holdout): nothing left to fit" : "no step record with status "
			       "\"ok\": nothing to fit");
	wrec = malloc(sizeof *wrec * (size_t)f->nrecs);
	free(f->scratch);
	free(f->rw);
	f->scratch = malloc(sizeof *f->scratch * (size_t)(f->nrows + f->nrecs + 1));
	f->rw = malloc(sizeof *f->rw * (size_t)(f->nrows + 1));
	if (!wrec || !f->scratch || !f->rw) {
		free(wrec);
		return err_set(e, NR_EIO, "out of memory");
	}
	/* every row's basis and memory terms at the prior */
	f->k = f->prior.k;
	for_records(f, PASS_PREPARE, &f->k, changed);
	for (long i = 0; i < f->nrecs; i++)
		wrec[i] = rec_weight(&f->recs[i], last, o->half_life);
	for (long i = 0; i < f->nrows; i++)
		f->rw[i] = f->recs[f->rows[i].rec].held ? 0 : wrec[f->rows[i].rec];
	if (o->half_life > 0 && f->prior.last_step >= 0 && last > f->prior.last_step)
		decay = pow(0.5, (double)(last - f->prior.last_step) / o->half_life);
	if (!fit_model(f, decay, out)) {
		free(wrec);
		return err_set(e, NR_EIO, "out of memory");
	}
	fit_step(f, wrec, decay, out);
	fit_quality(f, out);
	free(wrec);
	return NR_OK;
}

/* --- priors and the document ------------------------------------------------- */

void fit_prior_defaults(struct fit_prior *p)
{
	coef_defaults(&p->k);
	for (int j = 0; j < COEF_FIELDS; j++)
		p->se[j] = NAN;
	p->last_step = -1;
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
		json_t *c = json_object_get(cs, coef_names[j]), *se;
		char path[96];
		if (!json_is_object(c) || !(se = json_object_get(c, "se")) || json_is_null(se))
			continue;
		snprintf(path, sizeof path, "fit.coefficients.%s", coef_names[j]);
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
		if (!r->c[j].fitted)
			json_object_set_new(c, "why", json_string(r->c[j].why));
		json_object_set_new(cs, coef_names[j], c);
	}
	char method[200];

	snprintf(method, sizeof method, "Cauchy-weighted least squares on log(measured / "
		 "predicted), bounded; a coefficient determined to worse than %.0f%% keeps its "
		 "prior", 100 * FIT_MAX_RSE);
	json_object_set_new(fit, "method", json_string(method));
	json_object_set_new(fit, "records", json_integer(r->records));
	json_object_set_new(fit, "records_not_ok", json_integer(r->not_ok));
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
