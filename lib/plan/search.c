/* The global plan search (see search.h for the space): the walk over
 * pools, sizes and front entries, and the entry points.  Its parts have
 * files of their own: the space and pins (search_pins.c), the candidates
 * per model and size (search_cand.c) and the pool fronts with their lower
 * bounds (search_front.c), sharing search_impl.h.
 *
 * Why the fast search is exact.  A plan's step time is step_s plus, for
 * each stage, the longest of its pools' times in that stage, plus the
 * hand-offs between its pools (plan_handoffs: they depend on the partition
 * and on whether its GPUs fit in a node, not on any configuration, so the
 * bounds below leave them out and stay bounds), and a pool's time in a
 * stage is the sum of its items' times there.  A pool fits when
 * its resident bytes R (summed over its models) plus the largest need T of
 * one of its model-stages on top of them fit a GPU, and its engines, if it
 * has them, find room next to R for one sequence at its longest (the
 * built-in engine, for all it holds).  (The engines' copy of the actor's
 * weights joins R only on a pool of their own, plan_gen_resident, where
 * no stage but theirs runs and their peak holds it either way: R leaves
 * it out.)  The engines take G(R, tp) + mv(tp):
 * G does not decrease as R grows (less room for the KV cache, never fewer
 * decode steps, none cheaper: cost_gen), and mv moves the actor's weights
 * in, which depends on the actor's home layout when both share the pool.
 * (On the built-in engine G holds no copy of the weights where the engines
 * generate from the actor's own, plan_gen_aliases: there mv is zero, and
 * a home layout that ties it at that TP is the same one.)
 * So a pool's models enter a plan only through R, T, the two sums of their
 * inference and training times, and the actor's mv at each engine TP, and
 * no larger value on any of these axes ever makes a plan fit that did not,
 * or run faster.  The fast search drops:
 *   1. a configuration of a model at a pool size that another ties or beats
 *      on each axis (resident, need, inference time, training time, and for
 *      the actor the move into engines of each TP);
 *   2. a partial combination of a pool's models that another ties or beats
 *      on each axis (R, T, the time sums; the actor comes last, so its move
 *      is known when the engines are costed), or that cannot fit or beat the
 *      best plan even if every model still to come took its least resident
 *      bytes, need and times;
 *   3. an entry of a pool's se_front (its three stage times at one size) that
 *      another entry there ties or beats in every stage: the other pools'
 *      choices and the placement depend on the pool's size only;
 *   4. a branch whose lower bound exceeds the best plan found.  glb, per
 *      stage, is the least time a model (or the engines, with all memory to
 *      themselves and nothing to move) takes in any configuration of any
 *      size, which no plan undercuts; a plan holding a pool at (g, ti, tt)
 *      takes at least step_s + max(g, glb) + max(ti, glb) + max(tt, glb),
 *      and at least step_s + max(g, glb) + ti + tt; by the same bound, a
 *      configuration of a model (whose pool takes at least its times) goes
 *      before its memory is costed.  In the walk, a pool still to come
 *      takes at least its least time over the sizes the GPUs left can
 *      still give it (every other pool to come taking the smallest).  A
 *      model's least time at a size costs the memory of only those of its
 *      configurations faster than the fastest that fits (offloading only
 *      adds time: fastest); and a size whose floors (cost_train_floor,
 *      cost_infer_floor: the FLOPs on all its GPUs and the fixed overheads,
 *      every other term of the time model being at least zero) are no
 *      less than a least already found is not costed at all, as a branch
 *      whose floors alone exceed the best is not.
 * Every drop keeps a choice at least as good on every axis, so an optimum
 * survives.  Two exact shortcuts change nothing either: models alike in
 * everything (twins) sharing a pool are combined in one order only, and a
 * stage time below glb counts as glb (no plan's stage is shorter).  A first
 * pass over each model's two fastest configurations finds a good plan
 * early, whose time then bounds the exact pass; a seed over the same space
 * in the other order (fewest pools first, whose first plans are good)
 * bounds the first pass in turn, and as a bound drops only what cannot beat
 * it, the first pass finds what it would unbounded.  Among equals the first
 * found is kept (--current then breaks ties among the plans reached by the
 * fewest bytes moved), so how a rule is applied never changes what it
 * keeps or in which order: rule 1 drops neighbours (drop_neighbours) as
 * they are costed, which is what it would drop later, and a front's
 * entries are checked against the ones that can beat them, which are the
 * ones that would.  --exhaustive drops nothing but what does not fit:
 * every partition, size, configuration and engine TP is costed;
 * test_search_diff checks that both agree on random jobs and clusters.
 * A target (--space) narrows the space before all this: a configuration,
 * engine TP or partition its engine does not run is never made, so the
 * argument holds within what is left; settings its models share are fixed
 * for each of a few searches (engines_variant), and the fastest plan of
 * those exact searches is the fastest of their union. */
#include "plan/search_impl.h"

#include <math.h>
#include <string.h>
#include <time.h>

/* --- the walk over pools, sizes and front entries --------------------------- */

static void build(struct search *s, struct plan *p)
{
	memset(p->pools, 0, sizeof p->pools);
	p->npools = s->npools;
	p->staleness = 0;
	for (int i = 0; i < s->npools; i++) {
		int zi = s->zi[i];
		p->pools[i].items = s->pools[i];
		p->pools[i].ngpus = s->sizes[zi];
		for (int m = 0; m < s->v->job->nmodels; m++)
			if (s->pools[i] & (1u << (1 + m)))
				p->home[m] = se_cands(s, m, zi)->v[s->pick[i]->pick[m]].c;
		if (s->pools[i] & 1u)
			se_gen_conf(s, s->pick[i]->gen_tp, s->sizes[zi], &p->gen);
	}
	plan_place(s->v->cl, p);
	plan_evaluate(s->v, p);
}

static void leaf(struct search *s, const double *mx)
{
	int size[MAX_ITEMS], span = 0;
	double obj = s->v->k->step_s;

	for (int i = 0; i < s->npools; i++) {
		size[i] = s->sizes[s->zi[i]];
		span += size[i];
	}
	obj += s->handoff[span > s->v->cl->gpus_per_node];
	for (int st = 0; st < NSTAGES; st++)
		obj += mx[st];
	s->st->leaves++;
	if (obj > s->best * (1 + EPS))
		return;
	if (!se_sizes_fit(s, size, s->npools))
		return;
	if (s->found && obj >= s->best * (1 - EPS)) {
		/* a tie: keep the plan that moves fewer bytes from the current one */
		struct move mv;
		if (!s->current)
			return;
		strcpy(s->scratch->layout, s->out->layout);
		build(s, s->scratch);
		plan_move(s->v, s->current, s->scratch, &mv);
		if (mv.total_bytes >= s->best_move)
			return;
		s->best_move = mv.total_bytes;
		memcpy(s->out, s->scratch, sizeof *s->out);
		return;
	}
	s->found = true;
	s->best = obj;
	build(s, s->out);
	if (s->current) {
		struct move mv;
		plan_move(s->v, s->current, s->out, &mv);
		s->best_move = mv.total_bytes;
	}
}

static void walk(struct search *s, int i, int left, const double *mx);

/* The exhaustive walk's pool: its models in se_front()'s order, the GPUs left
 * after it, and the stage times of the pools before it. */
struct stream {
	int i, zi, left, n, order[MAX_MODELS];
	bool gen_here, actor_here;
	const double *mx;
};

/* One of the pool's combinations, walked on from at once. */
static void stream_entry(struct search *s, const struct stream *w, const struct entry *e)
{
	double nm[NSTAGES];

	for (int st = 0; st < NSTAGES; st++)
		nm[st] = fmax(w->mx[st], e->v[st]);
	s->pick[w->i] = e;
	walk(s, w->i + 1, w->left, nm);
}

/* The combinations of the pool's models from the k-th on, after q, each
 * with every engine TP: the entries se_front() lists without pruning, in its
 * order (each model's candidates in turn, the last innermost), but walked
 * on from one at a time, so that the exhaustive search holds none of a
 * pool's combinations but the one it is at, however many there are. */
static void stream(struct search *s, const struct stream *w, int k, const struct part *q)
{
	int m = k < w->n ? w->order[k] : -1;
	const struct clist *l = m >= 0 ? se_cands(s, m, w->zi) : NULL;

	for (int c = 0; c < (l ? l->n : 1) && !s->err; c++) {
		const struct cand *d = l ? &l->v[c] : NULL;
		struct part r = *q;
		struct entry e;
		if (d) {
			r.res += d->res;
			r.trans = MAX(r.trans, d->trans);
			r.ti += d->t_inf;
			r.tt += d->t_train;
			r.pick[m] = (uint16_t)c;
		}
		if (r.res + r.trans > s->cap)
			continue;
		if (k + 1 < w->n) {
			stream(s, w, k + 1, &r);
			continue;
		}
		memset(&e, 0, sizeof e);
		memcpy(e.pick, r.pick, sizeof e.pick);
		e.v[STAGE_INF] = r.ti;
		e.v[STAGE_TRAIN] = r.tt;
		e.gen_tp = -1;
		if (!w->gen_here) {
			stream_entry(s, w, &e);
			continue;
		}
		for (int t = 0; t < se_gtab(s, w->zi)->ntp; t++) {
			int tp = se_gtab(s, w->zi)->tp[t];
			double g = se_gen_alone(s, w->zi, tp, r.res, w->actor_here ? &d->c : NULL);
			if (g == HUGE_VAL)
				continue;
			e.v[STAGE_GEN] = g + (d && m == s->actor ? d->mv[tp] : se_gtab(s, w->zi)->far[tp]);
			e.gen_tp = tp;
			stream_entry(s, w, &e);
		}
	}
}

/* Pool i at size zi, every combination of it walked on from. */
static void stream_pool(struct search *s, int i, int zi, int left, const double *mx)
{
	unsigned items = s->pools[i];
	struct stream w = { i, zi, left, 0, { 0 }, items & 1u,
			    (items & (1u << (1 + s->actor))) != 0, mx };
	struct part zero;

	s->st->pool_fronts++;
	for (int m = 0; m < s->v->job->nmodels; m++)
		if (m != s->actor && (items & (1u << (1 + m))))
			w.order[w.n++] = m;
	if (w.actor_here)
		w.order[w.n++] = s->actor;
	memset(&zero, 0, sizeof zero);
	stream(s, &w, 0, &zero);
}

static void walk(struct search *s, int i, int left, const double *mx)
{
	if (i == s->npools) {
		leaf(s, mx);
		return;
	}
	if (!se_promising(s, i, -1, left, mx))
		return;
	for (int zi = s->nsizes - 1; zi >= 0; zi--) {
		int z = s->sizes[zi];
		struct front *f;
		if (z > left || (s->sp->npools && s->sp->pool_size[i] && s->sp->pool_size[i] != z))
			continue;
		if (!se_promising(s, i, zi, left, mx))
			continue;
		s->zi[i] = zi;
		if (s->exhaustive) {
			stream_pool(s, i, zi, left - z, mx);
			continue;
		}
		f = se_front(s, s->pools[i], zi);
		for (int k = 0; k < f->n; k++) {
			double nm[NSTAGES];
			for (int st = 0; st < NSTAGES; st++)
				nm[st] = fmax(mx[st], f->v[k].v[st]);
			s->pick[i] = &f->v[k];
			walk(s, i + 1, left - z, nm);
		}
	}
}

/* The hand-offs between the pools of the partition walked, a step
 * (plan_handoffs): on GPUs of one node, and across nodes.  They do not
 * depend on the pools' configurations, so every bound stays a bound. */
static void partition_handoffs(struct search *s)
{
	struct pool p[MAX_ITEMS];

	for (int i = 0; i < s->npools; i++)
		p[i] = (struct pool){ s->pools[i], 0 };
	for (int k = 0; k < 2; k++) {
		int span = k ? s->v->cl->gpus_per_node + 1 : 1;

		s->handoff[k] = 0;
		for (int st = 0; st < NSTAGES; st++)
			s->handoff[k] += plan_handoffs(s->v, p, s->npools, span, (enum stage)st);
	}
}

/* Partitions of the items into want pools, as restricted growth strings. */
static void partitions(struct search *s, int item, int *block, int nblocks, int want, int up)
{
	static const double zero[NSTAGES];

	if (nblocks > want || nblocks + (s->nitems - item) < want)
		return;
	if (item == s->nitems) {
		s->npools = nblocks;
		memset(s->pools, 0, sizeof s->pools);
		for (int i = 0; i < s->nitems; i++)
			s->pools[block[i]] |= 1u << i;
		if (!engines_places(s->v->job, s->sp->target, s->pools, nblocks) ||
		    (s->sp->gen_alone && s->pools[block[ITEM_GEN]] != 1u << ITEM_GEN))
			return;
		partition_handoffs(s);
		s->st->partitions++;
		walk(s, 0, up, zero);
		return;
	}
	for (int b = 0; b <= nblocks; b++) {
		block[item] = b;
		partitions(s, item + 1, block, b == nblocks ? nblocks + 1 : nblocks, want, up);
	}
}

/* One pass over the space: the layout's pools, or every partition. */
static void pass(struct search *s, int *block, bool fewest)
{
	const struct cluster *cl = s->v->cl;

	if (s->sp->npools) {
		s->npools = s->sp->npools;
		memcpy(s->pools, s->sp->pool_items, sizeof s->pools);
		for (int i = 0; s->sp->gen_alone && i < s->npools; i++)
			if ((s->pools[i] & 1u << ITEM_GEN) && s->pools[i] != 1u << ITEM_GEN)
				return;
		partition_handoffs(s);
		s->st->partitions++;
		walk(s, 0, cluster_gpus_up(cl), (const double[NSTAGES]){ 0 });
		return;
	}
	for (int k = 0; k < s->nitems; k++)
		partitions(s, 0, block, 0, fewest ? k + 1 : s->nitems - k, cluster_gpus_up(cl));
}

static void forget_fronts(struct search *s)
{
	for (size_t i = 0; i < ((size_t)1 << s->nitems) * (size_t)s->nsizes; i++) {
		free(s->fronts[i].v);
		s->fronts[i] = (struct front){ 0 };
	}
}

/* The leanest ZeRO stage a pin allows a model with dp ranks. */
static enum zero_stage leanest_zero(const struct pin *pin, bool train, int dp)
{
	for (int z = dp > 1 ? ZERO_3 : ZERO_0; z > ZERO_0; z--)
		if ((!pin->zero || pin->zero & (1u << z)) && (train || z == ZERO_3))
			return (enum zero_stage)z;
	return ZERO_0;
}

/* Why nothing fits, in words: the first model-stage that cannot fit even on
 * every GPU at its leanest, or the plain fact. */
static int explain(struct search *s, struct err *e)
{
	const struct job *j = s->v->job;
	const struct cluster *cl = s->v->cl;
	int top = s->nsizes - 1;

	if (top < 0)
		return err_set(e, NR_EINFEASIBLE, "no plan fits: none of the cluster's %d GPUs "
			       "is up", cluster_gpus(cl));
	for (int m = 0; m < j->nmodels; m++) {
		double need = HUGE_VAL;
		struct pconf best = { 0 };
		bool train = model_trainable(&j->models[m]);
		int stage = train ? STAGE_TRAIN : STAGE_INF;
		const struct arch *a = &j->models[m].arch;
		int z = s->sizes[top];
		/* a DP pin fixes the pool size; otherwise the largest pool is leanest */
		if (s->sp->home[m].dp && s->sp->home[m].tp && s->sp->home[m].pp)
			z = s->sp->home[m].tp * s->sp->home[m].pp * s->sp->home[m].dp;
		for (int t = 1; t <= z; t *= 2)
			for (int p = 1; p <= a->layers && t * p <= z; p++) {
				const struct pin *pin = &s->sp->home[m];
				int dp = z / (t * p);
				struct pconf c = { t, p, dp, pin->mb ? pin->mb : 1,
						   pin->rc >= 0 ? (enum recompute)pin->rc : RC_FULL,
						   leanest_zero(pin, train, dp), pin->offload == 1 };
				struct mcost mc;
				if (!se_tp_ok(s, a, t, z) || a->layers % p || z % (t * p) ||
				    !se_pin_ok(pin, &c))
					continue;
				model_cost(s->v, m, &c, &mc);
				if (mc.res + mc.need[stage] < need) {
					need = mc.res + mc.need[stage];
					best = c;
				}
			}
		if (need > s->cap && need < HUGE_VAL)
			return err_set(e, NR_EINFEASIBLE, "%s@%s needs at least %.1f GiB per GPU "
				       "(tp=%d pp=%d dp=%d), GPUs have %.1f GiB", j->models[m].name,
				       job_stage_names[stage], need / GIB, best.tp, best.pp, best.dp,
				       s->cap / GIB);
		if (need == HUGE_VAL)
			return err_set(e, NR_EINFEASIBLE, "%s@%s has no configuration on %d GPUs "
				       "that meets its pins and divides its heads and layers",
				       j->models[m].name, job_stage_names[stage], z);
	}
	return err_set(e, NR_EINFEASIBLE, "no plan fits: each model fits alone, but not "
		       "together on %d GPUs of %.1f GiB (after %.0f%% headroom)",
		       cluster_gpus_up(cl), s->cap / GIB, cl->headroom * 100);
}

static int search_once(const struct env *v, const struct space *sp, bool exhaustive,
		       const struct plan *current, struct plan *best, struct search_stats *st,
		       struct err *e)
{
	struct search *s = calloc(1, sizeof *s);
	struct timespec t0, t1, c0, c1;
	int block[MAX_ITEMS], rc = NR_OK;

	memset(st, 0, sizeof *st);
	if (!s)
		return err_oom(e);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
	s->v = v;
	s->sp = sp;
	s->exhaustive = exhaustive;
	s->nitems = 1 + v->job->nmodels;
	s->actor = job_actor(v->job);
	s->cap = cluster_gpu_bytes(v->cl);
	s->grid_per_byte = GRID / s->cap;
	s->st = st;
	s->current = current;
	s->out = best;
	s->best = HUGE_VAL;
	se_make_sizes(s);
	/* models alike in architecture, stages and pins share their candidates */
	for (int m = 0; m < v->job->nmodels; m++) {
		const struct model *a = &v->job->models[m];
		s->twin[m] = m;
		for (int k = 0; k < m && s->twin[m] == m; k++) {
			const struct model *b = &v->job->models[k];
			if (!memcmp(&a->arch, &b->arch, sizeof a->arch) &&
			    !memcmp(a->stages, b->stages, sizeof a->stages) &&
			    !memcmp(&sp->home[m], &sp->home[k], sizeof sp->home[m]) &&
			    (sp->target == TARGET_ANY || a->role == b->role) &&
			    m != s->actor && k != s->actor)
				s->twin[m] = k;
		}
	}
	s->cands = calloc((size_t)v->job->nmodels * (size_t)s->nsizes, sizeof *s->cands);
	s->fronts = calloc(((size_t)1 << s->nitems) * (size_t)s->nsizes, sizeof *s->fronts);
	s->gtabs = calloc((size_t)s->nsizes, sizeof *s->gtabs);
	s->scratch = malloc(sizeof *s->scratch);
	s->size_lb = calloc(((size_t)1 << s->nitems) * (size_t)s->nsizes, sizeof *s->size_lb);
	s->size_lb_done = calloc(((size_t)1 << s->nitems) * (size_t)s->nsizes, 1);
	s->upto_lb = calloc(((size_t)1 << s->nitems) * (size_t)s->nsizes, sizeof *s->upto_lb);
	s->upto_done = calloc(((size_t)1 << s->nitems) * (size_t)s->nsizes, 1);
	s->floor = calloc((size_t)v->job->nmodels * (size_t)s->nsizes, sizeof *s->floor);
	s->fastest = calloc((size_t)v->job->nmodels * (size_t)s->nsizes, sizeof *s->fastest);
	s->fastest_done = calloc((size_t)v->job->nmodels * (size_t)s->nsizes, 1);
	s->floor_upto = calloc(((size_t)1 << s->nitems) * (size_t)s->nsizes, sizeof *s->floor_upto);
	if (!s->cands || !s->fronts || !s->gtabs || !s->scratch || !s->size_lb ||
	    !s->size_lb_done || !s->upto_lb || !s->upto_done || !s->floor || !s->floor_upto ||
	    !s->fastest || !s->fastest_done) {
		rc = err_oom(e);
		goto out;
	}
	for (int m = 0; m < v->job->nmodels; m++)
		for (int zi = 0; zi < s->nsizes; zi++) {
			const struct model *md = &v->job->models[m];
			double *f = s->floor[m * s->nsizes + zi];
			f[0] = md->stages[STAGE_INF] ? cost_infer_floor(v, &md->arch, s->sizes[zi]) : 0;
			f[1] = model_trainable(md) ? cost_train_floor(v, &md->arch, s->sizes[zi]) : 0;
		}
	if (!exhaustive) {
		/* a first pass over each model's few fastest configurations finds
		 * a plan close to the best cheaply, whose time then bounds the
		 * exact pass from its start.  The pass goes most pools first
		 * (their fronts are cheap); a seed, fewest pools first, finds
		 * its time sooner, to bound it.  Of the seed only that time is
		 * kept: among equals, the pass keeps the first it finds */
		s->limit = FIRST_PASS;
		if (!sp->npools) {
			pass(s, block, true);
			s->found = false;
		}
		pass(s, block, false);
		forget_fronts(s);
		s->limit = 0;
	}
	pass(s, block, false);
	if (s->err)
		rc = err_oom(e);
	else if (!s->found)
		rc = explain(s, e);
out:
	for (int i = 0; s->cands && i < v->job->nmodels * s->nsizes; i++)
		free(s->cands[i].v);
	for (size_t i = 0; s->fronts && i < ((size_t)1 << s->nitems) * (size_t)s->nsizes; i++)
		free(s->fronts[i].v);
	free(s->cands);
	free(s->all.v);
	free(s->keys);
	free(s->tmpkeys);
	free(s->kept);
	free(s->fronts);
	free(s->gtabs);
	free(s->scratch);
	free(s->size_lb);
	free(s->size_lb_done);
	free(s->upto_lb);
	free(s->upto_done);
	free(s->floor);
	free(s->floor_upto);
	free(s->fastest);
	free(s->fastest_done);
	free(s->trials);
	free(s->ttimes);
	free(s);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
	st->seconds = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
	st->cpu_seconds = (double)(c1.tv_sec - c0.tv_sec) + (c1.tv_nsec - c0.tv_nsec) * 1e-9;
	return rc;
}

/* The fastest plan of the variants engines_variant gives sp, synchronous. */
static int search_variants(const struct env *v, const struct space *sp, bool exhaustive,
			   const struct plan *current, struct plan *best,
			   struct search_stats *st, struct err *e)
{
	struct space one = *sp;
	struct search_stats each;
	struct plan *p = NULL;
	struct err later;
	bool found = false;
	int rc = NR_OK, i;

	memset(st, 0, sizeof *st);
	for (i = 0; engines_variant(v->job, v->cl, sp->target, i, &one.shared); i++) {
		if (i == 1 && !(p = malloc(sizeof *p)))
			return err_oom(e);
		if (p)
			memcpy(p->layout, best->layout, sizeof p->layout);
		/* the first variant's shortfall is the one said */
		rc = search_once(v, &one, exhaustive, current, p ? p : best, &each, p ? &later : e);
		st->partitions += each.partitions;
		st->pool_fronts += each.pool_fronts;
		st->candidates += each.candidates;
		st->leaves += each.leaves;
		st->seconds += each.seconds;
		st->cpu_seconds += each.cpu_seconds;
		if (rc == NR_EINFEASIBLE)
			continue;
		if (rc)
			break;
		if (p && (!found || p->step_time < best->step_time))
			memcpy(best, p, sizeof *best);
		found = true;
	}
	free(p);
	if (rc && rc != NR_EINFEASIBLE) {
		if (i > 0)
			*e = later;
		return rc;
	}
	return found ? NR_OK : NR_EINFEASIBLE;
}

static void add_stats(struct search_stats *to, const struct search_stats *st)
{
	to->partitions += st->partitions;
	to->pool_fronts += st->pool_fronts;
	to->candidates += st->candidates;
	to->leaves += st->leaves;
	to->seconds += st->seconds;
	to->cpu_seconds += st->cpu_seconds;
}

/* p one step ahead in place of best when that is feasible and faster. */
static void take_if_ahead_pays(const struct env *v, struct plan *p, struct plan *best)
{
	p->staleness = 1;
	plan_evaluate(v, p);
	if (p->feasible && p->step_time < best->step_time)
		memcpy(best, p, sizeof *best);
}

/* Staleness 1 pays where generation is the longer half of a step, and
 * needs the engines on a pool of their own: the synchronous search's plan
 * is priced one step ahead when its engines have one, and so is the
 * fastest synchronous plan of those whose engines do; the fastest of all
 * is kept.  (The walk's bounds add the stages up, so it cannot prune by
 * the overlap itself.) */
int plan_search(const struct env *v, const struct space *sp, bool exhaustive,
		const struct plan *current, struct plan *best, struct search_stats *st,
		struct err *e)
{
	struct space alone = *sp;
	struct search_stats more;
	struct plan *p;
	struct err scratch;
	int rc = search_variants(v, sp, exhaustive, current, best, st, e);

	if (rc || sp->max_staleness < 1)
		return rc;
	if (!(p = malloc(sizeof *p)))
		return err_oom(e);
	memcpy(p, best, sizeof *p);
	take_if_ahead_pays(v, p, best);
	alone.gen_alone = true;
	memcpy(p->layout, best->layout, sizeof p->layout);
	rc = search_variants(v, &alone, exhaustive, current, p, &more, &scratch);
	add_stats(st, &more);
	if (rc == NR_OK)
		take_if_ahead_pays(v, p, best);
	free(p);
	if (rc != NR_OK && rc != NR_EINFEASIBLE) {
		*e = scratch;
		return rc;
	}
	return NR_OK;
}
