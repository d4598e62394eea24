/* What the cost model fit's source files share and fit.h does not show:
 * the fit's records and rows, what evaluating the model carries, the
 * solver's unknowns, and the functions one part calls in another.
 * Private to lib/profile/fit*.c. */
#ifndef NEREUS_FIT_IMPL_H
#define NEREUS_FIT_IMPL_H

#include <stdbool.h>

#include "plan/plan.h"
#include "profile/fit.h"

#define NT 11          /* time coefficients: coef fields 0 .. NT-1 */
#define NEFF 7         /* of them, efficiencies (θ = 1/eff) */
#define C_STEP 11      /* step_s */
#define C_ACT 12       /* act_factor, workspace_gib, frag: the memory fit */
#define C_FRAG 14
#define NMEM 3
#define C_SWITCH 15    /* comm_init_s, comm_group_s, engine_init_s, store_gbps */
#define NSWITCH 4
#define C_MOVE 19      /* move_piece_s */
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
	bool gen_left;    /* its generation time is not fitted: see fit_add */
};

/* One switch a record measured (its transition_s) and what it involved
 * (its "switch" object): seconds = known + x·θ, θ the switch coefficients
 * with 1/store_gbps (seconds per GB) for store_gbps. */
struct srow {
	long step;
	double y;                /* seconds measured */
	double known;            /* moving state, when the store did not bound it */
	double x[NSWITCH];       /* new communicator (0/1), groups, new engines, GB read */
};

/* One move of the actor's weights into the engines a record measured
 * (its generation entry's move_s), with the layouts it moved between. */
struct mvrow {
	long step;
	double y;                /* seconds measured */
	struct pconf home, gen;
	bool same_pool;
};

/* One measured model-stage: what the model needs to predict it.  What the
 * solves read on every pass lives apart, in struct trow and struct mrow and
 * the measurements, so that a pass streams through only that. */
struct frow {
	long rec;
	signed char model, stage;
	short pool;
	bool same_pool;
	/* generation: the record measured its move into the engines (move_s),
	 * which the time is taken without, to be fitted apart (fit_move.c) */
	bool no_move;
	struct pconf conf, home; /* home: generation, the actor's training layout */
	double conc;             /* generation: concurrency observed */
	double resident;         /* bytes other state keeps on its GPUs (generation) */
};

/* A row's time as the time fit sees it. */
struct trow {
	double x0, x[NT];        /* seconds = x0 + x·θ on the current piece */
	unsigned nz;             /* the coefficients whose x is not 0 */
};

/* A row's peak as the memory fit sees it. */
struct mrow {
	double mc, mx, md;       /* bytes = mc + (a·mx + md)·(1+f) + w·GiB near the current k */
};

struct fit {
	struct job job;
	const struct cluster *cl;
	struct fit_prior prior;
	struct coef k;           /* current coefficients */
	struct frec *recs;
	struct frow *rows;
	double *y;               /* parallel to rows: seconds measured */
	double *peak;            /* bytes measured; NAN when not */
	struct trow *tr;         /* made by fit_run, so that its threads first touch them */
	struct mrow *mr;
	long nrecs, nrows, caprecs, caprows, capy, cappeak;
	long other;              /* records with status oom or paused */
	/* records whose generation could not be priced: without a p90 of the
	 * response lengths, without the engines' concurrency */
	long no_p90, no_conc;
	long before_prior;       /* records at or before the prior's last step, skipped */
	struct srow *sw;         /* switches */
	long nsw, capsw;
	struct mvrow *mv;        /* moves into the engines */
	long nmv, capmv;
	double *scratch;         /* absolute residuals, for medians */
	double *rw;              /* each row's weight in the fit: its record's, 0 held out */
};

/* What evaluating the model needs, one per thread: the job with the batch
 * of the record at hand; and the coefficients of the pass with the probes
 * row_basis makes around them, the same for every row. */
struct ectx {
	struct job job;
	const struct cluster *cl;
	const struct coef *k;
	double th[NT];           /* k as θ */
	double step[NT];         /* a probe's step in each θ */
	double field[NT];        /* each coefficient's value in struct coef after its step */
	double check[NT];        /* how far parts_basis's last probe moves each θ */
	struct coef kcheck[2];   /* k moved so: every coefficient, and all but host_eff */
	/* each model's shape (mem_shape_for) at the layout it was last costed
	 * in: records in a row mostly share their plan */
	struct mem_shape shape[MAX_MODELS];
	struct pconf shaped[MAX_MODELS];
	bool have_shape[MAX_MODELS];
};

/* The rows a pass reads: every row of the fit, or a sample of those it
 * fits, copied together so that a pass over the sample streams through its
 * rows instead of hopping across all of them. */
struct rowset {
	const struct trow *tr;   /* NULL in a sample of peaks */
	const double *y;
	const struct mrow *mr;   /* NULL in a sample of times */
	const double *peak;
	const double *rw;
	long n;
	bool sample;
};

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
	/* the largest step of the last gfit_run, in tenths of the unknown's
	 * standard error (or parts in 10⁹ of its value, when more; HUGE_VAL
	 * when it dropped one back to its prior); and whether it stopped after
	 * one step on every row, before a step was negligible */
	double moved;
	bool cut;
	/* a parameter held at its prior moves those it correlates with: what
	 * its prior's uncertainty adds to their variance, and the partner each
	 * absorbed (1 + its index; 0 none) */
	double extra[MAXP];
	int absorbs[MAXP];
};

/* PASS_PREPARE: every row's basis and memory terms at k.  PASS_CHECK:
 * re-check each row's time and peak against the model at k; new bases
 * where the time's piece changed, new memory terms everywhere.  changed
 * counts the fitted rows whose time (0) or peak (1) was off its piece. */
enum pass { PASS_PREPARE, PASS_CHECK };

/* --- coefficients as θ and the model, one row at a time, records (fit_rows.c) */

/* Coefficient j as θ (1/eff for an efficiency), and setting it so. */
double ft_theta_of(const struct coef *k, int j);
void ft_set_theta(struct coef *k, int j, double th);
/* The default's θ for the cluster's engine: the solver's unit for θ_j. */
double ft_unit_of(const struct cluster *cl, int j);
/* Bounds on θ, from the ranges nereus-cost(5) allows. */
void ft_bounds_of(int j, double *lo, double *hi);
/* Set c to evaluate around k (probes included). */
void ft_ectx_at(struct ectx *c, const struct coef *k);
/* The lowest coefficient in set, or -1. */
int ft_lowest(unsigned set);
/* A row's gradient in θ at the pass's k, and what no coefficient scales;
 * t: the row's time at k in parts. */
void ft_row_basis(const struct ectx *c, const struct frow *w, struct trow *tw,
		  const struct stime *t);
/* A row's predicted seconds at θ. */
double ft_row_pred(const struct trow *w, const double *th);
/* Note which of the row's x are not 0, for the passes to skip the rest. */
void ft_row_nonzero(struct trow *w);
/* A row's predicted peak bytes at the memory coefficients m. */
double ft_mem_pred(const struct mrow *w, const double *m);
/* Recompute the memory terms and times (into t) of record ri's rows at k;
 * how many rows' previous memory terms disagreed with the model at k. */
long ft_rec_memory(struct ectx *c, struct fit *f, long ri, struct stime *t);
/* Make room in *p (*cap elements of size bytes) for need; false when out
 * of memory. */
bool ft_grow(void **p, long *cap, long need, size_t size);
/* Σ over stages of the slowest pool's summed times t of rows. */
double ft_stages_sum(const struct frow *rows, int n, const double *t);
/* What exercises each coefficient, said when none does (fit.c). */
extern const char *const ft_unused_why[COEF_FIELDS];

/* --- the solve (fit_solve.c) ------------------------------------------------- */

/* Solve n x = b for a symmetric positive semi-definite n; inv (may be
 * NULL): n⁻¹. */
void ft_sym_solve(int p, const double *n, const double *b, double *x, double *inv);
/* Minimize ½ dᵀ n d − bᵀ d subject to lo ≤ d ≤ hi (lo ≤ 0 ≤ hi). */
void ft_box_qp(int p, const double *n, const double *b, const double *lo,
	       const double *hi, double *d);
/* The k-th smallest of v[0..n), and the q-quantile (v is reordered). */
double ft_select_kth(double *v, long n, long k);
double ft_quantile(double *v, long n, double q);
/* The median-based scale of the absolute residuals absr[0..n). */
double ft_robust_scale(double *absr, long n);
/* A record's weight: 0.5^(its age in steps / the half-life). */
double ft_rec_weight(const struct frec *r, long last, double half_life);
/* Whether row i is in the sample of one row in stride. */
bool ft_sampled(long i, long stride);
/* Iteratively reweighted Gauss-Newton on the rows rs, times or peaks
 * (mem). */
void ft_gfit_solve(struct fit *f, struct gfit *q, bool mem, const struct rowset *rs,
		   bool robust, bool one_step);
/* The covariance of q's free unknowns, data only or with the prior. */
void ft_gfit_cov(const struct gfit *q, int n, bool with_prior, double *cov);
/* The size a standard error is measured against. */
double ft_rse_base(int j, double th, double unit);
/* Drop q's worst-determined free unknown back to its prior, when it must
 * go; true when one was, its reason in why[j]. */
bool ft_gfit_drop(struct gfit *q, int n, int first, char why[][200]);
/* Run a pass over all records on every core; changed gets the rows
 * changed, times and peaks. */
void ft_for_records(struct fit *f, enum pass pass, const struct coef *k, long changed[2]);

/* --- the switch coefficients (fit_switch.c) ---------------------------------- */

/* The prior's standard error of switch coefficient j, in θ units. */
double ft_switch_prior_se(const struct fit_prior *pr, int j);
/* Fit the switch coefficients into out, then the records' own estimate. */
void ft_switches(const struct fit *f, const struct fit_opts *o, long last,
		 double decay, double *absr, struct fit_result *out);

/* --- the move coefficient (fit_move.c) -------------------------------------- */

/* The prior's standard error of move_piece_s, in seconds. */
double ft_move_prior_se(const struct fit_prior *pr);
/* Fit move_piece_s into out from the moves, the rest of out->k fitted. */
void ft_move(const struct fit *f, const struct fit_opts *o, long last, double decay,
	     struct fit_result *out);

/* --- the cost document (fit.c) ----------------------------------------------- */

/* Set coefficient j of out: its value and standard error, and when not
 * fitted, why. */
void ft_set_coef(struct fit_result *out, int j, double value, double se, bool fitted,
		 const char *why);

#endif
