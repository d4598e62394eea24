/* The cost model fit's rows (fit.c): the coefficients as θ, the model
 * one row at a time (each measured model-stage's gradient in θ, its
 * memory terms), and the records fit_add takes apart into rows and
 * switches. */
#include "profile/fit_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* --- coefficients as θ ------------------------------------------------------- */

double ft_theta_of(const struct coef *k, int j)
{
	double v = cost_coef_get(k, j);

	return j < NEFF ? 1 / v : v;
}

void ft_set_theta(struct coef *k, int j, double th)
{
	*cost_coef_field(k, j) = j < NEFF ? 1 / th : th;
}

/* The default's θ for the cluster's engine: the solver's unit for θ_j. */
double ft_unit_of(const struct cluster *cl, int j)
{
	struct coef d;

	cost_coef_defaults_for(&d, cl->engine);
	return ft_theta_of(&d, j);
}

/* Bounds on θ, from the ranges nereus-cost(5) allows. */
void ft_bounds_of(int j, double *lo, double *hi)
{
	static const double max_fixed[COEF_FIELDS] = { [7] = 10, [8] = 10, [9] = 10, [10] = 3600,
						       [11] = 3600, [12] = 10, [13] = 1024,
						       [14] = 1, [15] = 3600, [16] = 600, [17] = 3600,
						       [19] = 10 };

	if (j < NEFF) {
		*lo = 1;
		*hi = 1e4;
	} else {
		*lo = j == C_FRAG ? 1e-4 : 0;
		*hi = max_fixed[j];
	}
}

/* --- the model, one row at a time -------------------------------------------- */

/* Set c to evaluate around k: probes step each θ by 1e-5 of its size (at
 * least of its unit); parts_basis's last probe moves them all by about a
 * thousandth, each by a different share. */
void ft_ectx_at(struct ectx *c, const struct coef *k)
{
	/* the shares: no two alike (golden-ratio spaced), so that errors in a
	 * basis cannot cancel out */
	static const double spread[NT] = { 1.0000, 0.6180, 1.2361, 0.8541, 1.4721, 1.0902,
					    0.7082, 1.3262, 0.9443, 0.5623, 1.1803 };

	c->k = k;
	c->kcheck[0] = c->kcheck[1] = *k;
	for (int j = 0; j < NT; j++) {
		struct coef kp = *k;
		double size = fmax(ft_theta_of(k, j), ft_unit_of(c->cl, j));
		c->th[j] = ft_theta_of(k, j);
		c->step[j] = 1e-5 * size;
		ft_set_theta(&kp, j, c->th[j] + c->step[j]);
		c->field[j] = cost_coef_get(&kp, j);
		c->check[j] = 1e-3 * size * spread[j];
		ft_set_theta(&c->kcheck[0], j, c->th[j] + c->check[j]);
		if (j != 6)
			ft_set_theta(&c->kcheck[1], j, c->th[j] + c->check[j]);
	}
}

static void use_batch(struct ectx *c, const struct frec *r)
{
	c->job.prompts_per_step = r->seqs;
	c->job.samples_per_prompt = 1;
	c->job.prompt_len = r->prompt;
	c->job.response = r->resp;
}

/* Generation as plan_gen_cost computes it, with the concurrency the record
 * observed: plan_gen_cost derives concurrency from the room left for the KV
 * cache, so give it a resident amount that leaves room for exactly that.
 * An engine that holds all its sequences at once needs a pool of one
 * longest sequence and no more, and plan_gen_cost refuses a pool an ulp short
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
	plan_gen_cost(&v, &w->conf, fake, &w->home, w->same_pool, t, m, peak);
	*peak += w->resident - fake;
	if (w->no_move) {
		t->total -= t->move;
		t->move = 0;
	}
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
 * without plan_gen_cost's memory accounting.  Cheap, for probing; row_basis
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
		t->move = w->no_move ? 0 : cost_move(&v, a, &w->home, &w->conf, w->same_pool);
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
		part[P_MOVE] = w->no_move ? 0 : link_of(w->same_pool ? w->home.tp * w->home.pp :
							 gpn + 1, gpn);
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
int ft_lowest(unsigned set)
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
			*cost_coef_field(&kp, j) = c->field[j];
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
void ft_row_basis(const struct ectx *c, const struct frow *w, struct trow *tw,
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
			*cost_coef_field(&kp, j) = c->field[j];
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

double ft_row_pred(const struct trow *w, const double *th)
{
	double p = w->x0;

	for (unsigned m = w->nz; m; m &= m - 1)
		p += w->x[ft_lowest(m)] * th[ft_lowest(m)];
	return p;
}

/* Note which of the row's x are not 0, for the passes to skip the rest. */
void ft_row_nonzero(struct trow *w)
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

double ft_mem_pred(const struct mrow *w, const double *m)
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
long ft_rec_memory(struct ectx *c, struct fit *f, long ri, struct stime *t)
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
		double peak, before = ft_mem_pred(mw, mk);
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
		if (!isnan(f->peak[r->row0 + i]) && fabs(ft_mem_pred(mw, mk) - before) > 1e-9 * fabs(before))
			changed++;
	}
	return changed;
}

/* --- records ----------------------------------------------------------------- */

int fit_new(struct fit **out, const struct job *job, const struct cluster *cl,
	    const struct fit_prior *prior, struct err *e)
{
	struct fit *f = calloc(1, sizeof *f);

	if (!f)
		return err_oom(e);
	f->job = *job;
	f->cl = cl;
	if (prior) {
		f->prior = *prior;
	} else {
		fit_prior_defaults(&f->prior);
		cost_coef_defaults_for(&f->prior.k, cl->engine);
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
	free(f->mv);
	free(f);
}

bool ft_grow(void **p, long *cap, long need, size_t size)
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
double ft_stages_sum(const struct frow *rows, int n, const double *t)
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

	if (!ft_grow((void **)&f->sw, &f->capsw, f->nsw + 1, sizeof *f->sw))
		return err_oom(e);
	f->sw[f->nsw++] = (struct srow){ r->step, r->transition_s, store ? 0 : sw->move_s,
					 { sw->communicator, sw->groups, sw->engines,
					   store ? gb : 0 } };
	return NR_OK;
}

/* A move of the actor's weights into the engines the record measured. */
static int add_move(struct fit *f, long step, const struct ms_record *gen,
		    const struct pconf *home, struct err *e)
{
	if (!ft_grow((void **)&f->mv, &f->capmv, f->nmv + 1, sizeof *f->mv))
		return err_oom(e);
	f->mv[f->nmv++] = (struct mvrow){ step, gen->move_s, *home, gen->conf, gen->same_pool };
	return NR_OK;
}

int fit_add(struct fit *f, const struct step_record *r, struct err *e)
{
	struct frec *rec;
	int actor = job_actor(&f->job), home = -1, train[MAX_MODELS], model[STEPREC_MAX_MS];
	/* every model-stage's pool, stage and time, for the step's fixed cost */
	struct frow all[STEPREC_MAX_MS];
	double ys[STEPREC_MAX_MS];
	bool sft = r->rl.known && r->rl.sft;
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
	if (!ft_grow((void **)&f->recs, &f->caprecs, f->nrecs + 1, sizeof *f->recs) ||
	    !ft_grow((void **)&f->rows, &f->caprows, f->nrows + r->nms, sizeof *f->rows) ||
	    !ft_grow((void **)&f->y, &f->capy, f->nrows + r->nms, sizeof *f->y) ||
	    !ft_grow((void **)&f->peak, &f->cappeak, f->nrows + r->nms, sizeof *f->peak))
		return err_oom(e);
	rec = &f->recs[f->nrecs];
	*rec = (struct frec){ r->step, r->sequences, r->prompt_len, r->response, NAN, f->nrows,
			      0, false, false };
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
		all[i] = (struct frow){ .stage = (signed char)ms->stage, .pool = (short)ms->pool };
		ys[i] = ms->time_s;
		if (ms->stage == STAGE_GEN && home >= 0 && isfinite(ms->move_s) &&
		    (rc = add_move(f, r->step, ms, &r->ms[home].conf, e)))
			return rc;
		/* a warm-up step trains on the prompts' answers, not on the
		 * rollout the cost model prices: its rollout is fitted, its
		 * update and so its step time are not */
		if (ms->stage == STAGE_TRAIN && sft)
			continue;
		/* decoding's pace follows the spread of the response lengths and
		 * how many sequences an engine holds at once: without them the
		 * model cannot price the generation this record measured */
		if (ms->stage == STAGE_GEN && (isnan(r->response.p90) || isnan(ms->concurrency))) {
			f->no_p90 += isnan(r->response.p90);
			f->no_conc += isnan(ms->concurrency);
			rec->gen_left = true;
			continue;
		}
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
		if (ms->stage == STAGE_GEN && home >= 0 && isfinite(ms->move_s)) {
			w->no_move = true;
			f->y[row] -= ms->move_s;
		}
		rec->nrows++;
	}
	if (isfinite(r->step_time_s) && !sft)
		rec->step_obs = r->step_time_s - ft_stages_sum(all, r->nms, ys);
	f->nrows += rec->nrows;
	f->nrecs++;
	return NR_OK;
}

