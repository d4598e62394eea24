/* The plan search's pool fronts: the combinations of a pool's models at
 * one size kept by rules 2 and 3, the engines' times, and the lower
 * bounds of rule 4 (see search.c). */

#include "plan/search_impl.h"

#include <math.h>
#include <string.h>

/* --- pool fronts ----------------------------------------------------------- */

static int ncands(const struct search *s, const struct clist *l)
{
	return s->limit && s->limit < l->n ? s->limit : l->n;
}

static bool entry_beats(const double *a, const double *b)
{
	return a[0] <= b[0] && a[1] <= b[1] && a[2] <= b[2];
}

/* Whether an entry of f ties or beats stage times v. */
static bool front_beats(const struct front *f, const double *v)
{
	for (int i = 0; i < f->n; i++)
		if (entry_beats(f->v[i].v, v))
			return true;
	return false;
}

/* The inference and training times of f's entries whose generation
 * takes at most g (at most 64 of them: more only make fewer checks cheap),
 * into beat; returns how many. */
static int front_under(const struct front *f, double g, double beat[2][64])
{
	int n = 0;

	for (int i = 0; i < f->n && n < 64; i++)
		if (f->v[i].v[STAGE_GEN] <= g) {
			beat[0][n] = f->v[i].v[STAGE_INF];
			beat[1][n++] = f->v[i].v[STAGE_TRAIN];
		}
	return n;
}

/* Whether one of n pairs ties or beats (ti, tt). */
static bool pair_beaten(double beat[2][64], int n, double ti, double tt)
{
	for (int i = 0; i < n; i++)
		if (beat[0][i] <= ti && beat[1][i] <= tt)
			return true;
	return false;
}

/* Add e by rule 3: unless an entry ties or beats it, and dropping the
 * entries it beats. */
static int front_add(struct front *f, const struct entry *e)
{
	if (front_beats(f, e->v))
		return 0;
	for (int i = 0; i < f->n;)
		if (entry_beats(e->v, f->v[i].v))
			f->v[i] = f->v[--f->n];
		else
			i++;
	if (grow((void **)&f->v, &f->cap, f->n, sizeof *f->v) < 0)
		return -1;
	f->v[f->n++] = *e;
	return 0;
}

static int parts_add(struct parts *l, const struct part *q)
{
	if (grow((void **)&l->v, &l->cap, l->n, sizeof *l->v) < 0)
		return -1;
	l->v[l->n++] = *q;
	return 0;
}

/* Put l's combinations in the order of the sum of their times, then
 * resident bytes, then place in l, through the spare list tmp. */
static int order_parts(struct search *s, struct parts *l, struct parts *tmp)
{
	struct key *k;

	if (se_reserve_keys(s, l->n) < 0 || reserve((void **)&tmp->v, &tmp->cap, l->n, sizeof *tmp->v) < 0)
		return -1;
	k = s->keys;
	for (int i = 0; i < l->n; i++) {
		const struct part *p = &l->v[i];
		k[i] = (struct key){ p->ti + p->tt, p->res, i };
	}
	se_sort_keys(k, l->n, s->tmpkeys);
	for (int i = 0; i < l->n; i++)
		tmp->v[i] = l->v[k[i].i];
	tmp->n = l->n;
	struct parts t = *l;
	*l = *tmp;
	*tmp = t;
	return 0;
}

/* Rule 2: keep the combinations no other ties or beats on every axis, in
 * the order of resident bytes, need, then place in l.  In that order a
 * combination can only be beaten by one before it, or by one that ties on
 * both and comes after it: keeping it then only keeps more.  They are
 * taken in l's order into the list of those kept so far, held in that
 * order: a newcomer goes when one before its place beats it (the lean ones
 * next to it, which beat it most often, are looked at first), else takes
 * its place, and those after it that it beats go. */
static int keep_pareto(struct search *s, struct parts *l, struct parts *tmp)
{
	struct axes *kept;
	int n = 0, cap = s->nkept;

	if (reserve((void **)&s->kept, &cap, l->n, sizeof *s->kept) < 0 ||
	    reserve((void **)&tmp->v, &tmp->cap, l->n, sizeof *tmp->v) < 0)
		return -1;
	s->nkept = cap;
	kept = s->kept;
	for (int i = 0; i < l->n; i++) {
		const struct part *q = &l->v[i];
		int lo = 0, hi = n, k;
		/* after every kept one that ties on both: those came first */
		while (lo < hi) {
			int mid = (lo + hi) / 2;
			if (q->res != kept[mid].res ? q->res < kept[mid].res : q->trans < kept[mid].trans)
				hi = mid;
			else
				lo = mid + 1;
		}
		/* those before have no more resident bytes */
		for (k = lo - 1; k >= 0; k--)
			if (kept[k].trans <= q->trans && kept[k].ti <= q->ti && kept[k].tt <= q->tt)
				break;
		if (k >= 0)
			continue;
		/* those after, no fewer */
		for (k = lo; k < n; k++)
			if (q->trans <= kept[k].trans && q->ti <= kept[k].ti && q->tt <= kept[k].tt)
				break;
		for (int j = k; j < n; j++)
			if (!(q->trans <= kept[j].trans && q->ti <= kept[j].ti && q->tt <= kept[j].tt))
				kept[k++] = kept[j];
		memmove(kept + lo + 1, kept + lo, sizeof *kept * (size_t)(k - lo));
		kept[lo] = (struct axes){ q->res, q->trans, q->ti, q->tt, i };
		n = k + 1;
	}
	for (int k = 0; k < n; k++)
		tmp->v[k] = l->v[kept[k].i];
	tmp->n = n;
	struct parts t = *l;
	*l = *tmp;
	*tmp = t;
	return 0;
}

/* The engines at TP 2^i on a pool of size zi next to res resident bytes,
 * the actor's among them at home (its home layout) or not (NULL),
 * without moving the actor in: the seconds, HUGE_VAL when they do not fit
 * (the built-in engine, which holds whole sequences, may not fit where one
 * sequence does). */
double se_gen_alone(struct search *s, int zi, int i, double res, const struct pconf *home)
{
	struct pconf g, away = { 1, 1, 1, 1, RC_SELECTIVE, ZERO_0, false };
	struct stime st;
	struct mem m;
	double peak;

	if (!se_gen_conf(s, i, s->sizes[zi], &g) ||
	    !plan_gen_cost(s->v, &g, res, home ? home : &away, home != NULL, &st, &m, &peak) ||
	    peak > s->cap)
		return HUGE_VAL;
	return st.total - st.move;
}

/* se_gen_alone with the actor at home in the engines' own layout, where
 * they need the least: generating from its weights on the built-in
 * engine (plan_gen_aliases), which no other home layout beats. */
static double gen_least(struct search *s, int zi, int i, double res)
{
	struct pconf g;

	if (!se_gen_conf(s, i, s->sizes[zi], &g))
		return HUGE_VAL;
	return se_gen_alone(s, zi, i, res, &g);
}

/* The engines' time without the move, sampled (when first asked for) at
 * GRID + 1 resident amounts from 0 to a GPU's bytes: as it never falls when
 * residents grow, the sample at or below a resident amount bounds it from
 * below.  The samples take the actor as at home in the engines' layout,
 * where they need the least (gen_least). */
static void gtab_fill(struct search *s, int zi, struct gtab *t)
{
	t->done = true;
	t->ntp = 0;
	for (int i = 0; i < MAX_TPS; i++) {
		struct pconf g, away = { 1, 1, 1, 1, RC_SELECTIVE, ZERO_0, false };
		if (!se_gen_conf(s, i, s->sizes[zi], &g))
			continue;
		t->tp[t->ntp++] = i;
		t->far[i] = cost_move(s->v, &s->v->job->models[s->actor].arch, &away, &g, false);
		for (int j = 0; j <= GRID; j++)
			t->g[i][j] = -1;
	}
}

struct gtab *se_gtab(struct search *s, int zi)
{
	struct gtab *t = &s->gtabs[zi];

	if (!t->done)
		gtab_fill(s, zi, t);
	return t;
}

/* The least the engines of a pool of size zi can take next to res
 * resident bytes, moving the actor in at mv (NULL: from another pool;
 * zero: no lower). */
static double gen_lb(struct search *s, int zi, double res, const double *mv)
{
	struct gtab *t = se_gtab(s, zi);
	double x = res * s->grid_per_byte, best = HUGE_VAL;
	int j = x < 0 ? 0 : x > GRID ? GRID : (int)x;

	for (int k = 0; k < t->ntp; k++) {
		int i = t->tp[k];
		double g;
		if (t->g[i][j] < 0)
			t->g[i][j] = gen_least(s, zi, i, s->cap * j / GRID);
		g = t->g[i][j] + (mv ? mv[i] : t->far[i]);
		best = MIN(best, g);
	}
	return best;
}

static const double *set_lb(struct search *s, unsigned items);
static const double *size_lb(struct search *s, unsigned items, int zi);

/* Rule 4's bound, for a pool's choices while its front is built: no plan
 * with the pool at stage times (g, ti, tt) or more takes less than step_s
 * plus, per stage, the larger of the pool's time and the least any plan
 * takes there (glb); nor less than step_s + max(g, glb) + ti + tt, which
 * the least sum of a model's two times bounds more tightly.  Bounds only
 * tighten as the search goes, so a front built under an earlier bound
 * never misses what a later one would keep. */
bool se_bounded(struct search *s)
{
	if (s->exhaustive || s->best == HUGE_VAL)
		return false;
	if (!s->glb_done) {
		for (int st = 0; st < NSTAGES; st++)
			s->glb[st] = 0;
		s->glb[STAGE_GEN] = set_lb(s, 1u)[STAGE_GEN];
		for (int m = 0; m < s->v->job->nmodels; m++)
			for (int st = STAGE_INF; st < NSTAGES; st++)
				s->glb[st] = fmax(s->glb[st], set_lb(s, 1u << (1 + m))[st]);
		s->glb_done = true;
	}
	return true;
}

/* The least the engines of a pool take when its residents come to res or
 * more (0 without engines; the actor's move not counted when it is here,
 * as it may be nothing). */
static double pool_gen_lb(struct search *s, int zi, bool gen_here, bool actor_here, double res)
{
	static const double no_move[MAX_TPS];

	return gen_here ? gen_lb(s, zi, res, actor_here ? no_move : NULL) : 0;
}

bool se_beyond(const struct search *s, double g, double ti, double tt, double sum)
{
	double base = s->v->k->step_s + MAX(g, s->glb[STAGE_GEN]);
	double split = base + MAX(ti, s->glb[STAGE_INF]) + MAX(tt, s->glb[STAGE_TRAIN]);

	return MAX(split, base + sum) > s->best * (1 + EPS);
}

/* The least every model after the k-th of a pool still adds: resident
 * bytes, need, times, and the sum of its two times (rule 2's bound). */
struct rest {
	double res, trans, ti, tt, sum;
};

static void rests(struct search *s, int zi, const int *order, int n, struct rest *r)
{
	r[n] = (struct rest){ 0, 0, 0, 0, 0 };
	for (int k = n - 1; k >= 0; k--) {
		const struct clist *l = se_cands(s, order[k], zi);
		/* the list comes fastest first */
		double sum = l->n ? l->v[0].t_inf + l->v[0].t_train : HUGE_VAL;
		r[k].res = r[k + 1].res + l->min_res;
		r[k].trans = fmax(r[k + 1].trans, l->min_trans);
		r[k].ti = r[k + 1].ti + l->min_ti;
		r[k].tt = r[k + 1].tt + l->min_tt;
		r[k].sum = r[k + 1].sum + sum;
	}
}

/* The front of a pool of items at size zi, for the fast search (the
 * exhaustive one streams instead: stream_pool): its models combined one at
 * a time, the actor last so that its move into the engines is known when
 * the engines are costed. */
struct front *se_front(struct search *s, unsigned items, int zi)
{
	struct front *f = &s->fronts[items * (unsigned)s->nsizes + (unsigned)zi];
	struct parts cur = { 0 }, next = { 0 }, spare = { 0 };
	struct part zero;
	bool gen_here = items & 1u, actor_here = items & (1u << (1 + s->actor));
	bool bound;
	int order[MAX_MODELS], twin_at[MAX_MODELS], n = 0;
	struct rest rest[MAX_MODELS + 1];

	if (f->done)
		return f;
	f->done = true;
	s->st->pool_fronts++;
	bound = se_bounded(s);
	for (int m = 0; m < s->v->job->nmodels; m++)
		if (m != s->actor && (items & (1u << (1 + m))))
			order[n++] = m;
	if (actor_here)
		order[n++] = s->actor;
	/* twins in one pool: the same combinations in another order are the
	 * same combination, so their picks never decrease */
	for (int k = 0; k < n; k++) {
		twin_at[k] = -1;
		for (int j = 0; j < k; j++)
			if (s->twin[order[j]] == s->twin[order[k]])
				twin_at[k] = j;
	}
	rests(s, zi, order, n, rest);
	memset(&zero, 0, sizeof zero);
	if (parts_add(&cur, &zero) < 0)
		s->err = NR_EIO;
	/* all but the last model: partial combinations */
	for (int k = 0; k + 1 < n && !s->err; k++) {
		int m = order[k];
		const struct clist *l = se_cands(s, m, zi);
		next.n = 0;
		for (int i = 0; i < cur.n; i++) {
			int from = twin_at[k] >= 0 ? cur.v[i].pick[order[twin_at[k]]] : 0;
			double gfix = bound ? pool_gen_lb(s, zi, gen_here, actor_here,
							  cur.v[i].res + rest[k].res) : 0;
			for (int c = from; c < ncands(s, l); c++) {
				const struct cand *d = &l->v[c];
				struct part q = cur.v[i];
				q.res += d->res;
				q.trans = MAX(q.trans, d->trans);
				q.ti += d->t_inf;
				q.tt += d->t_train;
				/* the candidates come fastest first: none after this is faster */
				if (bound && se_beyond(s, gfix, 0, 0, q.ti + q.tt + rest[k + 1].sum))
					break;
				if (q.res + q.trans > s->cap)
					continue;
				/* what is still to come needs at least this much */
				q.trans = MAX(q.trans, rest[k + 1].trans);
				if (q.res + rest[k + 1].res + q.trans > s->cap)
					continue;
				if (bound && se_beyond(s, gfix, q.ti + rest[k + 1].ti, q.tt + rest[k + 1].tt,
						    q.ti + q.tt + rest[k + 1].sum))
					continue;
				q.pick[m] = (uint16_t)c;
				if (parts_add(&next, &q) < 0)
					s->err = NR_EIO;
			}
		}
		if (keep_pareto(s, &next, &spare) < 0)
			s->err = NR_EIO;
		struct parts t = cur;
		cur = next;
		next = t;
	}
	/* the last model (or none): entries, from the fastest combinations on,
	 * so that the front soon holds entries that beat most of the rest */
	if (order_parts(s, &cur, &spare) < 0)
		s->err = NR_EIO;
	for (int i = 0; i < cur.n && !s->err; i++) {
		int last = n ? order[n - 1] : -1, nbeat = 0;
		const struct clist *l = n ? se_cands(s, last, zi) : NULL;
		int from = n && twin_at[n - 1] >= 0 ? cur.v[i].pick[order[twin_at[n - 1]]] : 0;
		double gfix = pool_gen_lb(s, zi, gen_here, actor_here,
					  cur.v[i].res + (n ? l->min_res : 0));
		/* gfix bounds the engines' time as well, and costs nothing */
		double g0 = bound ? MAX(gfix, s->glb[STAGE_GEN]) : gfix;
		/* se_beyond(s, gfix, 0, 0, sum) for this combination, but for sum */
		double base = s->v->k->step_s + MAX(gfix, s->glb[STAGE_GEN]);
		double split = base + MAX(0, s->glb[STAGE_INF]) + MAX(0, s->glb[STAGE_TRAIN]);
		double over = s->best * (1 + EPS), sum0 = cur.v[i].ti + cur.v[i].tt;
		/* the inference and training times of the front's entries whose
		 * engines take no longer than g0: an entry at (g0, ti, tt) is
		 * beaten when one of them ties or beats (ti, tt) */
		double beat[2][64];
		double least[NSTAGES] = { g0, cur.v[i].ti + (n ? l->min_ti : 0),
					  cur.v[i].tt + (n ? l->min_tt : 0) };
		for (int st = STAGE_INF; bound && st < NSTAGES; st++)
			least[st] = MAX(least[st], s->glb[st]);
		/* the least any entry of this combination can be */
		if (front_beats(f, least))
			continue;
		nbeat = front_under(f, g0, beat);
		for (int c = from; c < (n ? ncands(s, l) : 1) && !s->err; c++) {
			const struct cand *d = n ? &l->v[c] : NULL;
			const double *mv = d && last == s->actor ? d->mv : NULL;
			double res = cur.v[i].res + (d ? d->res : 0);
			double trans = MAX(cur.v[i].trans, d ? d->trans : 0);
			double ti, tt;
			struct entry e;
			if (d && bound && MAX(split, base + (sum0 + d->t_inf + d->t_train)) > over)
				break;
			if (res + trans > s->cap)
				continue;
			ti = cur.v[i].ti + (d ? d->t_inf : 0);
			tt = cur.v[i].tt + (d ? d->t_train : 0);
			if (bound) {
				ti = MAX(ti, s->glb[STAGE_INF]);
				tt = MAX(tt, s->glb[STAGE_TRAIN]);
			}
			if (gen_here && pair_beaten(beat, nbeat, ti, tt))
				continue;
			memset(&e, 0, sizeof e);
			memcpy(e.pick, cur.v[i].pick, sizeof e.pick);
			if (d)
				e.pick[last] = (uint16_t)c;
			e.v[STAGE_INF] = ti;
			e.v[STAGE_TRAIN] = tt;
			e.gen_tp = -1;
			if (!gen_here) {
				if ((!bound || !se_beyond(s, 0, e.v[STAGE_INF], e.v[STAGE_TRAIN],
						       e.v[STAGE_INF] + e.v[STAGE_TRAIN])) &&
				    front_add(f, &e) < 0)
					s->err = NR_EIO;
				continue;
			}
			e.v[STAGE_GEN] = gen_lb(s, zi, res, mv);
			if (e.v[STAGE_GEN] == HUGE_VAL || front_beats(f, e.v) ||
			    (bound && se_beyond(s, e.v[STAGE_GEN], e.v[STAGE_INF], e.v[STAGE_TRAIN],
					     e.v[STAGE_INF] + e.v[STAGE_TRAIN])))
				continue;
			/* only the best engine TP: the TP changes nothing but this
			 * pool's generation time */
			for (int k = 0; k < se_gtab(s, zi)->ntp; k++) {
				int t = se_gtab(s, zi)->tp[k];
				double g = se_gen_alone(s, zi, t, res, actor_here ? &d->c : NULL);
				if (g == HUGE_VAL)
					continue;
				g += mv ? mv[t] : se_gtab(s, zi)->far[t];
				if (e.gen_tp >= 0 && g >= e.v[STAGE_GEN])
					continue;
				e.v[STAGE_GEN] = bound ? MAX(g, s->glb[STAGE_GEN]) : g;
				e.gen_tp = t;
			}
			if (e.gen_tp >= 0) {
				if (front_add(f, &e) < 0)
					s->err = NR_EIO;
				nbeat = front_under(f, g0, beat);
			}
		}
	}
	free(cur.v);
	free(next.v);
	free(spare.v);
	return f;
}

/* The engines' share of a pool's bounds: with all memory to themselves
 * and nothing to move. */
static double gen_alone_lb(struct search *s, unsigned items, int zi)
{
	static const double none[MAX_TPS];

	return items & 1u ? gen_lb(s, zi, 0, none) : 0;
}

/* Per-stage lower bound of an item set on a pool of one size: each model's
 * fastest configuration there, and the engines'. */
static const double *size_lb(struct search *s, unsigned items, int zi)
{
	double *lb = s->size_lb[items * (unsigned)s->nsizes + (unsigned)zi];

	if (s->size_lb_done[items * (unsigned)s->nsizes + (unsigned)zi])
		return lb;
	s->size_lb_done[items * (unsigned)s->nsizes + (unsigned)zi] = true;
	for (int st = 0; st < NSTAGES; st++)
		lb[st] = 0;
	for (int m = 0; m < s->v->job->nmodels; m++) {
		const double *least;
		if (!(items & (1u << (1 + m))))
			continue;
		least = se_fastest(s, m, zi);
		lb[STAGE_INF] += least[0];
		lb[STAGE_TRAIN] += least[1];
	}
	lb[STAGE_GEN] = gen_alone_lb(s, items, zi);
	return lb;
}

/* A weaker bound than size_lb that costs no configuration: each model's
 * floor (cost_infer_floor, cost_train_floor), and the engines'. */
static void size_floor(struct search *s, unsigned items, int zi, double *lb)
{
	for (int st = 0; st < NSTAGES; st++)
		lb[st] = 0;
	for (int m = 0; m < s->v->job->nmodels; m++)
		if (items & (1u << (1 + m))) {
			lb[STAGE_INF] += s->floor[m * s->nsizes + zi][0];
			lb[STAGE_TRAIN] += s->floor[m * s->nsizes + zi][1];
		}
	lb[STAGE_GEN] = gen_alone_lb(s, items, zi);
}

/* size_floor's least over the sizes up to the zi-th. */
static const double *floor_upto(struct search *s, unsigned items, int zi)
{
	double (*lb)[NSTAGES] = s->floor_upto + items * (unsigned)s->nsizes;

	if (!s->floor_done[items]) {
		for (int k = 0; k < s->nsizes; k++) {
			size_floor(s, items, k, lb[k]);
			for (int st = 0; k && st < NSTAGES; st++)
				lb[k][st] = MIN(lb[k - 1][st], lb[k][st]);
		}
		s->floor_done[items] = true;
	}
	return lb[zi];
}

/* size_lb's least over the sizes up to the zi-th.  A size whose floor is
 * no less in any stage than the least found so far cannot lower it, and
 * its configurations are not costed: from the largest size down, as the
 * floors grow when sizes shrink. */
static const double *upto_lb(struct search *s, unsigned items, int zi)
{
	size_t at = items * (size_t)s->nsizes + (size_t)zi;
	double *lb = s->upto_lb[at];

	if (s->upto_done[at])
		return lb;
	s->upto_done[at] = true;
	for (int st = 0; st < NSTAGES; st++)
		lb[st] = HUGE_VAL;
	for (int k = zi; k >= 0; k--) {
		double f[NSTAGES];
		bool lower = false;
		size_floor(s, items, k, f);
		for (int st = 0; st < NSTAGES; st++)
			lower |= f[st] < lb[st];
		if (!lower)
			continue;
		const double *l = size_lb(s, items, k);
		for (int st = 0; st < NSTAGES; st++)
			lb[st] = MIN(lb[st], l[st]);
	}
	return lb;
}

/* Per-stage lower bound of an item set over every size it may take. */
static const double *set_lb(struct search *s, unsigned items)
{
	return upto_lb(s, items, s->nsizes - 1);
}

/* The largest size index at most z GPUs; -1 when none is. */
static int size_at_most(const struct search *s, int z)
{
	int zi = s->nsizes - 1;

	while (zi >= 0 && s->sizes[zi] > z)
		zi--;
	return zi;
}

/* Whether a plan could beat the best with pools before i as picked (their
 * stage times mx), pool i at least at here, and each pool after it at
 * least at its bound over the sizes up to the theirs-th, by upto. */
static bool under_best(struct search *s, int i, int theirs, const double *mx,
		       const double *here,
		       const double *(*upto)(struct search *, unsigned, int))
{
	double bound = s->v->k->step_s;

	for (int st = 0; st < NSTAGES; st++) {
		double m = MAX(mx[st], here[st]);
		for (int j = i + 1; j < s->npools; j++)
			m = MAX(m, upto(s, s->pools[j], theirs)[st]);
		bound += m;
	}
	return bound <= s->best * (1 + EPS);
}

/* Rule 4: whether the plans below this point of the walk could still beat
 * the best: pools before i as picked, leaving left GPUs; pool i at size zi
 * (or any size when zi < 0); each pool after it at its best size among
 * those the GPUs still left can hold, every other pool taking the
 * smallest size.  No plan below takes sizes outside these, so none is
 * faster than the bound.  The floors first: when they already exceed the
 * best, no configuration need be costed. */
bool se_promising(struct search *s, int i, int zi, int left, const double *mx)
{
	int later = s->npools - i - 1, mine, theirs;
	double here[NSTAGES];

	if (s->exhaustive || s->best == HUGE_VAL)
		return true;
	mine = zi >= 0 ? zi : size_at_most(s, left - later * s->sizes[0]);
	if (mine < 0)
		return false;
	theirs = size_at_most(s, left - s->sizes[zi >= 0 ? zi : 0] - (later - 1) * s->sizes[0]);
	if (later > 0 && theirs < 0)
		return false;
	if (zi >= 0)
		size_floor(s, s->pools[i], zi, here);
	else
		memcpy(here, floor_upto(s, s->pools[i], mine), sizeof here);
	if (!under_best(s, i, theirs, mx, here, floor_upto))
		return false;
	memcpy(here, zi >= 0 ? size_lb(s, s->pools[i], zi) : upto_lb(s, s->pools[i], mine),
	       sizeof here);
	return under_best(s, i, theirs, mx, here, upto_lb);
}

