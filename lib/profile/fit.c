/* Fitting the cost model's coefficients to step records (see fit.h for the
 * method).  Notation: θ are the time coefficients as the model is linear
 * in them, θ_j = 1/eff for the seven efficiencies and the seconds
 * themselves for the fixed costs; the solver works in φ_j = θ_j / s_j,
 * s_j being the default's θ, so every unknown is of order one. */
#include "profile/fit.h"

#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
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
#define C_SWITCH 15    /* comm_init_s, comm_group_s, engine_init_s, store_gbps */
#define NSWITCH 4
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

/* One switch a record measured (its transition_s) and what it involved
 * (its "switch" object): seconds = known + x·θ, θ the switch coefficients
 * with 1/store_gbps (seconds per GB) for store_gbps. */
struct srow {
	long step;
	double y;                /* seconds measured */
	double known;            /* moving state, when the store did not bound it */
	double x[NSWITCH];       /* new communicator (0/1), groups, new engines, GB read */
};

/* One measured model-stage: what the model needs to predict it.  What the
 * solves read on every pass lives apart, in struct trow and struct mrow and
 * the measurements, so that a pass streams through only that. */
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
	long before_prior;       /* records at or before the prior's last step, skipped */
	struct srow *sw;         /* switches */
	long nsw, capsw;
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

/* The default's θ for the cluster's engine: the solver's unit for θ_j. */
static double unit_of(const struct cluster *cl, int j)
{
	struct coef d;

	coef_defaults_for(&d, cl->engine);
	return theta_of(&d, j);
}

/* Bounds on θ, from the ranges nereus-cost(5) allows. */
static void bounds_of(int j, double *lo, double *hi)
{
	static const double max_fixed[COEF_FIELDS] = { [7] = 10, [8] = 10, [9] = 10, [10] = 3600,
						       [11] = 3600, [12] = 10, [13] = 1024,
						       [14] = 1, [15] = 3600, [16] = 600, [17] = 3600 };

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
	"no record's switch created the job's communicator anew",
	"no record's switch created a communicator",
	"no record's switch re-created the generation engines",
	"no record's switch read from the state store for longer than it moved state",
};

/* --- the model, one row at a time -------------------------------------------- */

/* Set c to evaluate around k: probes step each θ by 1e-5 of its size (at
 * least of its unit); parts_basis's last probe moves them all by about a
 * thousandth, each by a different share. */
static void ectx_at(struct ectx *c, const struct coef *k)
{
	/* the shares: no two alike (golden-ratio spaced), so that errors in a
	 * basis cannot cancel out */
	static const double spread[NT] = { 1.0000, 0.6180, 1.2361, 0.8541, 1.4721, 1.0902,
					    0.7082, 1.3262, 0.9443, 0.5623, 1.1803 };

	c->k = k;
	c->kcheck[0] = c->kcheck[1] = *k;
	for (int j = 0; j < NT; j++) {
		struct coef kp = *k;
		double size = fmax(theta_of(k, j), unit_of(c->cl, j));
		c->th[j] = theta_of(k, j);
		c->step[j] = 1e-5 * size;
		set_theta(&kp, j, c->th[j] + c->step[j]);
		c->field[j] = coef_get(&kp, j);
		c->check[j] = 1e-3 * size * spread[j];
		set_theta(&c->kcheck[0], j, c->th[j] + c->check[j]);
		if (j != 6)
			set_theta(&c->kcheck[1], j, c->th[j] + c->check[j]);
	}
}

static void use_batch(struct ectx *c, const struct frec *r)
{
	c->job.prompts_per_step = r->seqs;
	c->job.samples_per_prompt = 1;
	c->job.prompt_len = r->prompt;
	c->job.response = r->resp;
}

/* Generation as gen_cost computes it, with the concurrency the record
 * observed: gen_cost derives concurrency from the room left for the KV
 * cache, so give it a resident amount that leaves room for exactly that.
 * An engine that holds all its sequences at once needs a pool of one
 * longest sequence and no more, and gen_cost refuses a pool an ulp short
 * of it (predicting nothing): the room comes back as GPU bytes less the
 * resident and base, which loses its last bits, so ask for a part in 10⁹
 * more than the room, far below anything a time or peak shows. */
static void gen_eval(const struct ectx *c, const struct frow *w, const struct coef *k,
		     struct stime *t, struct mem *m, double *peak)
{
	const struct env v = { &c->job, c->cl, k };
	const struct arch *a = &c->job.models[w->model].arch;
	struct mem base;
	double fake;

	mem_gen_base(a, &w->conf, k, &base);
	fake = cluster_gpu_bytes(c->cl) - base.total -
	       mem_kv_room(&c->job, a, w->conf.tp, w->conc, k) * (1 + 1e-9);
	gen_cost(&v, &w->conf, fake, &w->home, w->same_pool, t, m, peak);
	*peak += w->resident - fake;
}

/* Whether c holds model m's shape at conf. */
static bool has_shape(const struct ectx *c, int m, const struct pconf *conf)
{
	const struct pconf *had = &c->shaped[m];

	return c->have_shape[m] && had->tp == conf->tp && had->pp == conf->pp &&
	       (had->zero == ZERO_3) == (conf->zero == ZERO_3);
}

/* A row's time at k from the cost functions alone, in its parts: without
 * what offloading adds (they do not look at offload), and for generation
 * without gen_cost's memory accounting.  Cheap, for probing; row_basis
 * checks it against row_time.  The model's shape is c's when c has it
 * (rec_memory left it there). */
static void fast_parts(const struct ectx *c, const struct frow *w, const struct coef *k,
		       struct stime *t)
{
	const struct env v = { &c->job, c->cl, k };
	const struct arch *a = &c->job.models[w->model].arch;
	const struct mem_shape *sh = has_shape(c, w->model, &w->conf) ? &c->shape[w->model] : NULL;

	if (w->stage == STAGE_GEN) {
		cost_gen(&v, a, &w->conf, mem_kv_room(&c->job, a, w->conf.tp, w->conc, k), t);
		t->move = cost_move(&v, a, &w->home, &w->conf, w->same_pool);
		t->total += t->move;
	} else if (w->stage == STAGE_TRAIN && sh) {
		cost_train_at(&v, a, sh, &w->conf, t);
	} else if (w->stage == STAGE_TRAIN) {
		cost_train(&v, a, &w->conf, t);
	} else if (sh) {
		cost_infer_at(&v, a, sh, &w->conf, t);
	} else {
		cost_infer(&v, a, &w->conf, t);
	}
}

static double fast_time(const struct ectx *c, const struct frow *w, const struct coef *k)
{
	struct stime t;

	fast_parts(c, w, k, &t);
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

/* The link efficiency a group of span consecutive GPUs depends on. */
static unsigned link_of(int span, int gpus_per_node)
{
	return span <= gpus_per_node ? 1u << 4 : 1u << 5;
}

/* The parts of a row's time (struct stime), in the order total() adds them. */
enum { P_COMPUTE, P_COMM, P_BUBBLE, P_OVERHEAD, P_MOVE, NPARTS };

static void parts_of(const struct stime *t, double part[NPARTS])
{
	part[P_COMPUTE] = t->compute;
	part[P_COMM] = t->comm;
	part[P_BUBBLE] = t->bubble;
	part[P_OVERHEAD] = t->overhead;
	part[P_MOVE] = t->move;
}

/* The coefficients each part of a row's time most likely scales: its
 * stage's efficiency the compute and the bubble (generation: prefill, and
 * decoding bound by memory or by compute), the links of the groups that
 * communicate (TP, PP, DP where it syncs or shards) and collective latency
 * with TP the communication, per-micro-batch or per-decode-step costs the
 * overhead (with stage_s, taken to count once and not listed), the host
 * link or the links generation receives the weights over the moves.  A
 * guess only, which row_basis checks. */
static void likely_parts(const struct ectx *c, const struct frow *w, unsigned part[NPARTS])
{
	const struct pconf *p = &w->conf;
	int gpn = c->cl->gpus_per_node;
	bool gen = w->stage == STAGE_GEN;

	memset(part, 0, sizeof part[0] * NPARTS);
	if (p->tp > 1)
		part[P_COMM] = link_of(p->tp, gpn) | 1u << 7;
	part[P_OVERHEAD] = 1u << (gen ? 9 : 8);
	if (gen) {
		part[P_COMPUTE] = 1u << 1 | 1u << 2 | 1u << 3;
		part[P_MOVE] = link_of(w->same_pool ? w->home.tp * w->home.pp : gpn + 1, gpn);
		return;
	}
	part[P_COMPUTE] = part[P_BUBBLE] = 1u << (w->stage == STAGE_TRAIN ? 0 : 1);
	/* the built-in engine also reads the weights once a pass (cost.c) */
	if (c->cl->engine == CLUSTER_ENGINE_BUILTIN) {
		part[P_COMPUTE] |= 1u << 3;
		part[P_BUBBLE] |= 1u << 3;
	}
	if (p->pp > 1)
		part[P_COMM] |= link_of(pconf_gpus(p), gpn);
	if (p->dp > 1 && (p->zero == ZERO_3 || w->stage == STAGE_TRAIN))
		part[P_COMM] |= link_of(p->tp * p->dp, gpn);
	if (p->offload)
		part[P_MOVE] = 1u << 6;
}

/* The coefficients a row most likely uses, those of likely_parts. */
static unsigned likely(const struct ectx *c, const struct frow *w)
{
	unsigned part[NPARTS], use = 0;

	likely_parts(c, w, part);
	for (int q = 0; q < NPARTS; q++)
		use |= part[q];
	return use;
}

/* The highest coefficient in set (of the first 16), or -1. */
static int highest(unsigned set)
{
	static const signed char top[16] = { -1, 0, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3 };
	int j = 0;

	if (set >> 8) {
		set >>= 8;
		j = 8;
	}
	if (set >> 4) {
		set >>= 4;
		j += 4;
	}
	return set ? j + top[set] : -1;
}

/* The lowest coefficient in set, or -1. */
static int lowest(unsigned set)
{
	return set ? __builtin_ctz(set) : -1;
}

/* row_basis's first try, fewest probes.  Each part of the time is linear
 * in the few coefficients likely_parts names: a probe moves one unknown
 * coefficient of each part that has two or more (never two of a part, so
 * that each part's change is its coefficient's), and the one left in a
 * part follows from the part's value at k.  Then a probe that moves every
 * coefficient at once, each by a different amount, must land where the
 * basis says.  t: the row's time at k in parts, as row_time has it (an
 * offloading row's host transfers as its moves).  false, tw undefined,
 * when the guess does not hold. */
static bool parts_basis(const struct ectx *c, const struct frow *w, struct trow *tw,
			const struct stime *t)
{
	unsigned sup[NPARTS], known[NPARTS] = { 0 };
	/* explained: what of each part the coefficients known in it make up */
	double base[NPARTS], explained[NPARTS] = { [P_OVERHEAD] = c->th[10] }, moved = 0, sum = 0;
	bool host = w->stage != STAGE_GEN && w->conf.offload;
	struct stime tp;

	likely_parts(c, w, sup);
	parts_of(t, base);
	for (int j = 0; j < NT; j++)
		tw->x[j] = j == 10;
	for (;;) {
		struct coef kp = *c->k;
		unsigned pert = 0;
		double part[NPARTS];
		for (int q = 0; q < NPARTS; q++) {
			unsigned todo = sup[q] & ~known[q];
			int j = highest(todo);
			bool clash = false;
			if (j < 0 || !(todo & ~(1u << j)))
				continue;
			for (int r = 0; r < NPARTS; r++)
				clash |= (sup[r] >> j & 1) && (sup[r] & pert);
			if (!clash)
				pert |= 1u << j;
		}
		if (!pert)
			break;
		for (int j = highest(pert); j >= 0; j = highest(pert & ((1u << j) - 1)))
			*coef_field(&kp, j) = c->field[j];
		fast_parts(c, w, &kp, &tp);
		parts_of(&tp, part);
		for (int q = 0; q < NPARTS; q++) {
			int j = highest(sup[q] & pert);
			double x;
			if (j < 0 || known[q] >> j & 1)
				continue;
			x = (part[q] - base[q]) / c->step[j];
			tw->x[j] += x;
			explained[q] += x * c->th[j];
			known[q] |= 1u << j;
			/* a GPU decodes at the pace of memory or of compute, not
			 * both; the built-in engine takes both */
			if (q == P_COMPUTE && j == 3 && x > 0 &&
			    c->cl->engine != CLUSTER_ENGINE_BUILTIN)
				known[q] |= 1u << 1;
		}
	}
	for (int q = 0; q < NPARTS; q++) {
		int j = highest(sup[q] & ~known[q]);
		if (j >= 0)
			tw->x[j] += (base[q] - explained[q]) / c->th[j];
	}
	for (int j = 0; j < NT; j++) {
		if (tw->x[j] * c->th[j] < -1e-9 * t->total)
			return false;
		tw->x[j] = tw->x[j] > 0 ? tw->x[j] : 0;
		sum += tw->x[j] * c->th[j];
		moved += host && j == 6 ? 0 : tw->x[j] * c->check[j];
	}
	if (!(fabs(t->total - sum) <= 1e-9 * t->total))
		return false;
	tw->x0 = 0;
	fast_parts(c, w, &c->kcheck[host], &tp);
	/* the host transfers are not in fast_parts */
	return fabs(tp.total - (t->total - (host ? t->move : 0) + moved)) <= 1e-9 * t->total;
}

/* The model's gradient in θ at the pass's k (a forward difference on the
 * piece k is on), and what the model adds that no coefficient scales
 * (x0).  t: the row's time at k in parts.  The first try is parts_basis;
 * the second probes each coefficient likely names through fast_time, an
 * offloading row's host transfers taken as the rest of its time over
 * host_eff; the third, when the second does not add up to the time,
 * probes every coefficient through row_time itself. */
static void row_basis(const struct ectx *c, const struct frow *w, struct trow *tw,
		      const struct stime *t)
{
	const double *th = c->th;
	double sum, f0 = t->total;
	unsigned use = likely(c, w);

	if (parts_basis(c, w, tw, t))
		return;
	for (int pass = 0; pass < 2; pass++) {
		bool fast = pass == 0, host = fast && w->stage != STAGE_GEN && w->conf.offload;
		/* row_time is fast_time for the rest: f0 is that already */
		double base = fast && (host || w->stage == STAGE_GEN) ? fast_time(c, w, c->k) : f0;
		sum = 0;
		/* from the last: decode_eff (3) is probed before infer_eff (1) */
		for (int j = NT - 1; j >= 0; j--) {
			struct coef kp = *c->k;
			tw->x[j] = j == 10 && fast ? 1 : 0;
			if (host && j == 6)
				tw->x[j] = fmax(0, (f0 - base) / th[j]);
			if (!(use & 1u << j) || (host && j == 6)) {
				sum += tw->x[j] * th[j];
				continue;
			}
			*coef_field(&kp, j) = c->field[j];
			tw->x[j] = fmax(0, ((fast ? fast_time(c, w, &kp) : row_time(c, w, &kp)) - base) /
					   c->step[j]);
			sum += tw->x[j] * th[j];
			/* decoding goes at the pace of memory or of compute, not both */
			if (fast && j == 3 && w->stage == STAGE_GEN && tw->x[j] > 0)
				use &= ~(1u << 1);
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

	for (unsigned m = w->nz; m; m &= m - 1)
		p += w->x[lowest(m)] * th[lowest(m)];
	return p;
}

/* Note which of the row's x are not 0, for the passes to skip the rest. */
static void row_nonzero(struct trow *w)
{
	w->nz = 0;
	for (int j = 0; j < NT; j++)
		w->nz |= w->x[j] != 0 ? 1u << j : 0;
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

/* Model m's shape at conf, from c when it has it. */
static const struct mem_shape *shape_at(struct ectx *c, int m, const struct pconf *conf)
{
	if (!has_shape(c, m, conf)) {
		mem_shape_for(&c->job.models[m].arch, conf, &c->shape[m]);
		c->shaped[m] = *conf;
		c->have_shape[m] = true;
	}
	return &c->shape[m];
}

/* Recompute the memory terms of every row of record ri at k, and each
 * row's time at k, in parts, into t; returns how many rows' previous
 * memory terms disagreed with the model at k. */
static long rec_memory(struct ectx *c, struct fit *f, long ri, struct stime *t)
{
	const struct coef *k = c->k;
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
		model_cost_at(&v, w->model, shape_at(c, w->model, &w->conf), &w->conf,
			      &mc[w->model]);
		have[w->model] = true;
		res[w->pool] += mc[w->model].res;
	}
	for (int i = 0; i < r->nrows; i++) {
		struct frow *w = &f->rows[r->row0 + i];
		struct mrow *mw = &f->mr[r->row0 + i];
		struct coef kk = *k;
		struct mem m;
		double peak, before = mem_pred(mw, mk);
		if (kk.act_factor < 1e-6)
			kk.act_factor = 1e-6; /* keep the activations' size visible */
		if (w->stage == STAGE_GEN) {
			w->resident = res[w->pool];
			gen_eval(c, w, &kk, &t[i], &m, &peak); /* act_factor does not change times */
		} else {
			t[i] = mc[w->model].st[w->stage];
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
		if (!isnan(f->peak[r->row0 + i]) && fabs(mem_pred(mw, mk) - before) > 1e-9 * fabs(before))
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

/* The k-th smallest of v[0..n), by quickselect: v is reordered so that
 * nothing after it is smaller. */
static double select_kth(double *v, long n, long k)
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
static double quantile(double *v, long n, double q)
{
	return n > 0 ? select_kth(v, n, (long)(q * (double)(n - 1))) : NAN;
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
static bool sampled(long i, long stride)
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
			pred = floor_at(mem_pred(w, th), 1e-300); /* a step too far shows as a misfit */
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
			pred = floor_at(row_pred(w, th), 1e-300);
			r = log(rs->y[i] / pred);
			pred = 1 / pred;
			for (unsigned set = w->nz & unknowns; set; set &= set - 1) {
				int a = at[lowest(set)];
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
	return g->want_scale ? robust_scale(g->scratch, m) : g->scale;
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

/* Iteratively reweighted Gauss-Newton: plain least squares first (unless
 * robust), so that the robust weights start from a fit every row has had
 * its say in, then Cauchy weights at the median-based scale of the
 * previous pass, until the step is negligible (or, one_step, after the
 * first robust step: the caller checks).  No step more than doubles an
 * unknown; a least-squares step that makes the fit worse is halved. */
static void gfit_solve(struct fit *f, struct gfit *q, bool mem, const struct rowset *rs,
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
static double rse_base(int j, double th, double unit)
{
	return j < NEFF ? th : fmax(fabs(th), unit);
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
		double rse = sqrt(cov[j * n + j]) / rse_base(first + j, q->th[j], q->unit[j]);
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

/* PASS_PREPARE: every row's basis and memory terms at k.  PASS_CHECK:
 * re-check each row's time and peak against the model at k; new bases
 * where the time's piece changed, new memory terms everywhere.  changed
 * counts the fitted rows whose time (0) or peak (1) was off its piece. */
enum pass { PASS_PREPARE, PASS_CHECK };

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
			long n = rec_memory(&ch->c, f, ri, t);
			ch->changed[1] += r->held ? 0 : n;
			for (int i = 0; i < r->nrows; i++) {
				struct trow *tw = &f->tr[r->row0 + i];
				if (ch->pass == PASS_CHECK) {
					if (fabs(t[i].total - row_pred(tw, ch->c.th)) <=
					    1e-7 * t[i].total)
						continue;
					ch->changed[0] += !r->held;
				}
				row_basis(&ch->c, &f->rows[r->row0 + i], tw, &t[i]);
				row_nonzero(tw);
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
static void for_records(struct fit *f, enum pass pass, const struct coef *k, long changed[2])
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
		ectx_at(&ch[t].c, k);
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

/* --- records ----------------------------------------------------------------- */

int fit_new(struct fit **out, const struct job *job, const struct cluster *cl,
	    const struct fit_prior *prior, struct err *e)
{
	struct fit *f = calloc(1, sizeof *f);

	if (!f)
		return err_set(e, NR_EIO, "out of memory");
	f->job = *job;
	f->cl = cl;
	if (prior) {
		f->prior = *prior;
	} else {
		fit_prior_defaults(&f->prior);
		coef_defaults_for(&f->prior.k, cl->engine);
	}
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
	free(f->y);
	free(f->peak);
	free(f->tr);
	free(f->mr);
	free(f->scratch);
	free(f->rw);
	free(f->sw);
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
	double pool_t[NSTAGES][MAX_ITEMS] = { { 0 } }, worst[NSTAGES] = { 0 }, total = 0;

	for (int i = 0; i < n; i++)
		pool_t[rows[i].stage][rows[i].pool] += t[i];
	for (int i = 0; i < n; i++)
		worst[rows[i].stage] = fmax(worst[rows[i].stage], pool_t[rows[i].stage][rows[i].pool]);
	for (int s = 0; s < NSTAGES; s++)
		total += worst[s];
	return total;
}

/* A switch the record measured, with what it involved. */
static int add_switch(struct fit *f, const struct step_record *r, struct err *e)
{
	const struct step_switch *sw = &r->sw;
	double gb = sw->store_gib * GIB / 1e9;
	/* the store bounds the state's arrival when reading it at the prior's
	 * bandwidth takes longer than moving it would */
	bool store = gb / f->prior.k.store_gbps > sw->move_s;

	if (!grow((void **)&f->sw, &f->capsw, f->nsw + 1, sizeof *f->sw))
		return err_set(e, NR_EIO, "out of memory");
	f->sw[f->nsw++] = (struct srow){ r->step, r->transition_s, store ? 0 : sw->move_s,
					 { sw->communicator, sw->groups, sw->engines,
					   store ? gb : 0 } };
	return NR_OK;
}

int fit_add(struct fit *f, const struct step_record *r, struct err *e)
{
	struct frec *rec;
	int actor = job_actor(&f->job), home = -1, train[MAX_MODELS], model[STEPREC_MAX_MS];
	double ys[STEPREC_MAX_MS];
	int rc;

	if (f->prior.last_step >= 0 && r->step <= f->prior.last_step) {
		f->before_prior++;
		return NR_OK;
	}
	if (r->transition_s > 0 && r->sw.known && (rc = add_switch(f, r, e)))
		return rc;
	if (r->status != STEP_OK) {
		f->other++;
		return NR_OK;
	}
	for (int i = 0; i < r->nms; i++) {
		const struct model *md = job_model(&f->job, r->ms[i].model);
		if (!md)
			return err_set(e, NR_EINPUT, "step %ld: job '%s' has no model '%s'", r->step,
				       f->job.name, r->ms[i].model);
		model[i] = (int)(md - f->job.models);
	}
	if (!grow((void **)&f->recs, &f->caprecs, f->nrecs + 1, sizeof *f->recs) ||
	    !grow((void **)&f->rows, &f->caprows, f->nrows + r->nms, sizeof *f->rows) ||
	    !grow((void **)&f->y, &f->capy, f->nrows + r->nms, sizeof *f->y) ||
	    !grow((void **)&f->peak, &f->cappeak, f->nrows + r->nms, sizeof *f->peak))
		return err_set(e, NR_EIO, "out of memory");
	rec = &f->recs[f->nrecs];
	*rec = (struct frec){ r->step, r->sequences, r->prompt_len, r->response, NAN, f->nrows,
			      0, false };
	/* a model's home layout is its training entry's: inference entries do
	 * not say how it recomputes or shards its optimizer */
	for (int m = 0; m < MAX_MODELS; m++)
		train[m] = -1;
	for (int i = 0; i < r->nms; i++) {
		if (r->ms[i].stage == STAGE_TRAIN)
			train[model[i]] = i;
		if (r->ms[i].stage != STAGE_GEN && model[i] == actor &&
		    (home < 0 || r->ms[i].stage == STAGE_TRAIN))
			home = i;
	}
	for (int i = 0; i < r->nms; i++) {
		const struct ms_record *ms = &r->ms[i];
		long row = f->nrows + rec->nrows;
		struct frow *w = &f->rows[row];
		/* a warm-up step trains on the prompts' answers, not on the
		 * rollout the cost model prices: its rollout is fitted, its
		 * update and so its step time are not */
		if (ms->stage == STAGE_TRAIN && r->rl.known && r->rl.sft)
			continue;
		*w = (struct frow){ .rec = f->nrecs, .model = (signed char)model[i],
				    .stage = (signed char)ms->stage, .pool = (short)ms->pool,
				    .same_pool = ms->same_pool, .conf = ms->conf,
				    .conc = ms->concurrency };
		f->y[row] = ms->time_s;
		/* the built-in engine's peaks are its buffers, which its memory
		 * model counts without coefficients: nothing to calibrate */
		f->peak[row] = f->cl->engine == CLUSTER_ENGINE_BUILTIN ? NAN : ms->peak_gib * GIB;
		if (ms->stage == STAGE_INF && train[w->model] >= 0)
			w->conf = r->ms[train[w->model]].conf;
		if (ms->stage == STAGE_GEN && home >= 0)
			w->home = r->ms[home].conf;
		ys[rec->nrows++] = ms->time_s;
	}
	if (isfinite(r->step_time_s) && rec->nrows == r->nms)
		rec->step_obs = r->step_time_s - stages_sum(&f->rows[f->nrows], r->nms, ys);
	f->nrows += rec->nrows;
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
static double prior_se_theta(const struct fit *f, int j)
{
	const struct fit_prior *pr = &f->prior;
	double v = coef_get(&pr->k, j), se = pr->se[j], th = theta_of(&pr->k, j);

	if (isnan(se) || !(se > 0))
		return (j >= NEFF && j <= C_STEP ? FIT_PRIOR_RSE_FIXED : FIT_PRIOR_RSE) *
		       rse_base(j, th, unit_of(f->cl, j));
	return j < NEFF ? se / (v * v) : se;
}

static void set_coef(struct fit_result *out, int j, double value, double se, bool fitted,
		     const char *why)
{
	out->c[j].value = value;
	out->c[j].se = se;
	out->c[j].fitted = fitted;
	out->c[j].data = out->c[j].data_se = NAN;
	snprintf(out->c[j].why, sizeof out->c[j].why, "%.199s", fitted ? "" : why);
	*coef_field(&out->k, j) = value;
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
			gfit_solve(f, q, mem, sample, false, false);
		gfit_solve(f, q, mem, &all, warm || sample->n > 0, !warm && sample->n > 0);
		if (!gfit_drop(q, n, first, why))
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
		pt->th[j] = pt->prior[j] = mem ? coef_get(&f->prior.k, c) : theta_of(&f->prior.k, c);
		pt->unit[j] = unit_of(f->cl, c);
		bounds_of(c, &pt->lo[j], &pt->hi[j]);
		pt->lambda[j] = decay * (pt->unit[j] / se) * (pt->unit[j] / se);
		if (used[j])
			pt->q.idx[pt->q.p++] = j;
		else
			snprintf(pt->why[j], sizeof pt->why[j], "%s",
				 mem && f->cl->engine == CLUSTER_ENGINE_BUILTIN ?
				 "the built-in engine's memory model takes no coefficients" :
				 unused_why[c]);
	}
	if (mem)
		out->peak_rows = pt->rows;
}

/* Copy the part's sample out of the rows as they are now. */
static bool part_sample(const struct fit *f, struct part *pt)
{
	long stride = pt->rows / SAMPLE + 1, n = 0;

	for (long i = 0; stride > 1 && i < f->nrows; i++) {
		if (!sampled(i, stride) || !part_has(f, pt, i))
			continue;
		if (!grow((void **)&pt->srw, &pt->cap_rw, n + 1, sizeof *pt->srw) ||
		    !grow((void **)&pt->smeas, &pt->cap_meas, n + 1, sizeof *pt->smeas) ||
		    (pt->mem ? !grow((void **)&pt->smr, &pt->cap_rows, n + 1, sizeof *pt->smr) :
			       !grow((void **)&pt->str, &pt->cap_rows, n + 1, sizeof *pt->str)))
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
			*coef_field(k, pt->first + j) = pt->th[j];
		else
			set_theta(k, pt->first + j, pt->th[j]);
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
	gfit_solve(f, &d, pt->mem, &all, true, false);
	gfit_cov(&d, pt->n, false, cov);
	for (int j = 0; j < pt->n; j++)
		cov[j * pt->n + j] += d.extra[j];
	return d.iters;
}

static void part_finish(struct fit *f, struct part *pt, double decay, struct fit_result *out)
{
	double cov[MAXP * MAXP], dth[NT], dcov[MAXP * MAXP];

	gfit_cov(&pt->q, pt->n, true, cov);
	for (int j = 0; j < pt->n; j++) {
		int c = pt->first + j;
		double se = sqrt(cov[j * pt->n + j] + pt->q.extra[j]), pse = f->prior.se[c];
		double th = pt->th[j];
		if (isnan(se))
			set_coef(out, c, coef_get(&f->prior.k, c), isnan(pse) ? NAN : pse / sqrt(decay),
				 false, pt->why[j]);
		else if (c < NEFF)
			set_coef(out, c, 1 / th, se / (th * th), true, "");
		else
			set_coef(out, c, th, se, true, "");
		if (!isnan(se) && pt->q.absorbs[j])
			snprintf(out->c[c].absorbs, sizeof out->c[c].absorbs, "%s",
				 coef_names[pt->first + pt->q.absorbs[j] - 1]);
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
		for_records(f, PASS_CHECK, &k, changed);
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
	double prior = coef_get(&f->prior.k, C_STEP), pse = prior_se_theta(f, C_STEP), lo, hi;

	bounds_of(C_STEP, &lo, &hi);
	for (int it = 0; it < MAX_ITER; it++) {
		double num, old = th;
		long m = 0;
		for (long i = 0; i < f->nrecs; i++)
			if (!f->recs[i].held && !isnan(f->recs[i].step_obs))
				s->scratch[m++] = fabs(f->recs[i].step_obs - th);
		*scale = it ? robust_scale(s->scratch, m) :
			      fmax(robust_scale(s->scratch, m), 1e-6);
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
	double decay = s->decay, prior = coef_get(&f->prior.k, C_STEP);
	struct fit_result *out = s->out;
	double th, scale, sw, lam, se, rse, dof = 1;
	long n = 0;

	for (long i = 0; i < f->nrecs; i++)
		n += !f->recs[i].held && !isnan(f->recs[i].step_obs);
	if (n == 0) {
		set_coef(out, C_STEP, prior, f->prior.se[C_STEP], false, unused_why[C_STEP]);
		return;
	}
	th = step_locate(s, prior, decay, &scale, &sw, &lam);
	if (n > 1)
		dof = sqrt((double)n / (double)(n - 1)); /* one degree of freedom used */
	se = dof * scale / sqrt(sw - lam > 0 ? sw - lam : 1e-300);
	rse = se / rse_base(C_STEP, th, unit_of(f->cl, C_STEP));
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
	set_coef(out, C_STEP, th, dof * scale / sqrt(sw), true, "");
	out->c[C_STEP].data = step_locate(s, th, 0, &scale, &sw, &lam);
	out->c[C_STEP].data_se = dof * scale / sqrt(sw);
}

/* --- the switch coefficients ------------------------------------------------ */

/* θ of switch coefficient j (of C_SWITCH + j): seconds, or for store_gbps
 * seconds per GB; its prior's standard error in those units. */
static double switch_theta(const struct coef *k, int j)
{
	double v = coef_get(k, C_SWITCH + j);

	return j == NSWITCH - 1 ? 1 / v : v;
}

static double switch_prior_se(const struct fit_prior *pr, int j)
{
	double v = coef_get(&pr->k, C_SWITCH + j), se = pr->se[C_SWITCH + j];

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
		q->scale = it ? fmax(robust_scale(absr, m), 1e-9) : 1e9;
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
			u = rec_weight(&(struct frec){ .step = w->step }, last, o->half_life) /
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
		box_qp(p, n, b, l, h, d);
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

	sym_solve(p, q->nd, NULL, NULL, cov);
	for (int a = 0; a < p; a++)
		se[a] = sqrt(cov[a * p + a] * dof) * q->scale * q->unit[q->idx[a]];
}

/* The switch coefficients: switch_solve with the prior; a coefficient the
 * switches do not exercise, or determine to worse than FIT_MAX_RSE, keeps
 * its prior.  Then the records' own estimate, solved again without the
 * prior. */
static void fit_switches(const struct fit *f, const struct fit_opts *o, long last,
			 double decay, double *absr, struct fit_result *out)
{
	struct swfit q = { .p = 0 }, d;
	double se[NSWITCH], dse[NSWITCH];
	bool use[NSWITCH] = { false };
	char why[NSWITCH][200];
	long rows = 0;

	for (int j = 0; j < NSWITCH; j++) {
		q.th[j] = q.prior[j] = q.unit[j] = switch_theta(&f->prior.k, j);
		q.lam[j] = decay * (q.unit[j] / switch_prior_se(&f->prior, j)) *
			   (q.unit[j] / switch_prior_se(&f->prior, j));
		snprintf(why[j], sizeof why[j], "%s", f->nsw ? unused_why[C_SWITCH + j] :
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
			set_coef(out, c, coef_get(&f->prior.k, c), isnan(pse) ? NAN : pse / sqrt(decay),
				 false, why[j]);
		} else if (j == NSWITCH - 1) {
			set_coef(out, c, 1 / th, se[a] / (th * th), true, "");
			out->c[c].data = 1 / dth;
			out->c[c].data_se = dse[a] / (dth * dth);
		} else {
			set_coef(out, c, th, se[a], true, "");
			out->c[c].data = dth;
			out->c[c].data_se = dse[a];
		}
	}
	out->switches = rows;
}

static void fit_side(struct step_fit *s)
{
	fit_step(s);
	fit_switches(s->f, s->o, s->last, s->decay, s->scratch, s->out);
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
		double v = coef_get(&f->prior.k, c), tp = inv ? 1 / v : v, td, sd;
		double sp = (c >= C_SWITCH ? switch_prior_se(&f->prior, c - C_SWITCH) :
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
		th[j] = theta_of(&out->k, j);
	for (long ri = 0; ri < f->nrecs; ri++) {
		const struct frec *r = &f->recs[ri];
		double pred[STEPREC_MAX_MS];
		for (int i = 0; i < r->nrows; i++) {
			long row = r->row0 + i;
			double q;
			pred[i] = row_pred(&f->tr[row], th);
			q = f->y[row] / pred[i];
			if (r->held) {
				sum_held += fabs(q - 1);
				continue;
			}
			sum_fit += fabs(q - 1);
			f->scratch[m++] = fabs(q - 1);
			out->outliers += q > hi || q < lo;
			if (!isnan(f->peak[row])) {
				sum_peak += fabs(f->peak[row] / mem_pred(&f->mr[row], mk) - 1);
				npeak++;
			}
		}
		if (r->held && !isnan(r->step_obs)) {
			double obs = r->step_obs, p = out->k.step_s + stages_sum(&f->rows[r->row0],
										 r->nrows, pred);
			obs += stages_sum(&f->rows[r->row0], r->nrows, &f->y[r->row0]);
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
	out->median = quantile(f->scratch, m, 0.5);
	/* selecting the median left every larger error after it */
	out->p90 = k90 > kmed ? select_kth(f->scratch + kmed + 1, m - kmed - 1, k90 - kmed - 1) :
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
		return err_set(e, NR_EIO, "out of memory");
	}
	/* every row's basis and memory terms at the prior */
	f->k = f->prior.k;
	for_records(f, PASS_PREPARE, &f->k, changed);
	for (long i = 0; i < f->nrecs; i++)
		wrec[i] = rec_weight(&f->recs[i], last, o->half_life);
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
	fit_compare(f, decay, out);
	free(wrec);
	free(step_scratch);
	if (!ok)
		return err_set(e, NR_EIO, "out of memory");
	fit_quality(f, out);
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
		json_object_set_new(c, "data", isnan(r->c[j].data) ? json_null() :
				    json_pack("{s:o,s:o}", "value", num(r->c[j].data), "se",
					      num(r->c[j].data_se)));
		if (!r->c[j].fitted)
			json_object_set_new(c, "why", json_string(r->c[j].why));
		if (*r->c[j].absorbs)
			json_object_set_new(c, "absorbs", json_string(r->c[j].absorbs));
		json_object_set_new(cs, coef_names[j], c);
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
