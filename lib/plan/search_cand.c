/* The plan search's candidates: the configurations of each model at each
 * pool size, costed and kept by rule 1 (see search.c). */

#include "plan/search_impl.h"

#include <math.h>
#include <string.h>

/* --- candidates per model and size --------------------------------------- */

bool se_tp_ok(const struct search *s, const struct arch *a, int t, int z)
{
	return t <= s->v->cl->gpus_per_node && a->heads % t == 0 && a->kv_heads % t == 0 &&
	       z % t == 0;
}

/* The engines' layout at TP 2^i on a pool of z GPUs, if the space has it. */
bool se_gen_conf(const struct search *s, int i, int z, struct pconf *g)
{
	const struct arch *a = &s->v->job->models[s->actor].arch;
	int t = 1 << i;

	*g = (struct pconf){ t, 1, z / t, 1, RC_NONE, ZERO_0, false };
	return t <= z && se_tp_ok(s, a, t, z) && se_pin_ok(&s->sp->gen, g) &&
	       engines_runs_gen(s->v->job, s->sp->target, g);
}

/* Whether a's moves into the engines tie or beat b's at every TP. */
static bool moves_le(const struct cand *a, const struct cand *b)
{
	for (int i = 0; i < MAX_TPS; i++)
		if (a->mv[i] > b->mv[i])
			return false;
	return true;
}

static bool cand_dominates(const struct cand *a, const struct cand *b, bool mv)
{
	if (a->t_inf > b->t_inf || a->t_train > b->t_train || a->res > b->res ||
	    a->trans > b->trans)
		return false;
	for (int i = 0; mv && i < MAX_TPS; i++)
		if (a->mv[i] > b->mv[i])
			return false;
	return true;
}

static bool key_before(const struct key *a, const struct key *b)
{
	if (a->first != b->first)
		return a->first < b->first;
	if (a->second != b->second)
		return a->second < b->second;
	return a->i < b->i;
}

/* Sort n keys (merge sort, stable; tmp holds n). */
void se_sort_keys(struct key *v, int n, struct key *tmp)
{
	struct key *from = v, *to = tmp;

	for (int w = 1; w < n; w *= 2) {
		for (int lo = 0; lo < n; lo += 2 * w) {
			int mid = MIN(lo + w, n), hi = MIN(lo + 2 * w, n), i = lo, j = mid, k = lo;
			while (i < mid && j < hi)
				to[k++] = key_before(&from[j], &from[i]) ? from[j++] : from[i++];
			while (i < mid)
				to[k++] = from[i++];
			while (j < hi)
				to[k++] = from[j++];
		}
		struct key *t = from;
		from = to;
		to = t;
	}
	if (from != v)
		memcpy(v, from, sizeof *v * (size_t)n);
}

/* Room for n keys to sort. */
int se_reserve_keys(struct search *s, int n)
{
	int cap = s->nkeys;

	if (reserve((void **)&s->keys, &cap, n, sizeof *s->keys) < 0)
		return -1;
	cap = s->nkeys;
	if (reserve((void **)&s->tmpkeys, &cap, n, sizeof *s->tmpkeys) < 0)
		return -1;
	s->nkeys = cap;
	return 0;
}

/* Copy all's configurations into l, fastest first; the fast search only
 * those no other ties or beats on every axis (rule 1).  Taken in order of
 * resident bytes and need, a configuration can only be beaten by one
 * before it, or by one that ties on both: keeping it then keeps more.  Of
 * equals the leaner comes first, and is kept. */
static int keep_fastest(struct search *s, const struct clist *all, struct clist *l, bool prune,
			bool mv)
{
	/* the axes of those kept, in the order taken: all before a newcomer
	 * have no more resident bytes */
	struct axes *kept;
	struct key *keys;
	int n = 0, cap = s->nkept;

	if (reserve((void **)&s->kept, &cap, all->n, sizeof *s->kept) < 0 ||
	    se_reserve_keys(s, all->n) < 0)
		return -1;
	s->nkept = cap;
	kept = s->kept;
	keys = s->keys;
	for (int i = 0; i < all->n; i++)
		keys[i] = (struct key){ all->v[i].res, all->v[i].trans, i };
	se_sort_keys(keys, all->n, s->tmpkeys);
	for (int i = 0; i < all->n; i++) {
		const struct cand *c = &all->v[keys[i].i];
		int k = n - 1;
		for (; k >= 0 && prune; k--)
			if (kept[k].trans <= c->trans && kept[k].ti <= c->t_inf &&
			    kept[k].tt <= c->t_train && (!mv || moves_le(&all->v[kept[k].i], c)))
				break;
		if (prune && k >= 0)
			continue;
		kept[n++] = (struct axes){ c->res, c->trans, c->t_inf, c->t_train, keys[i].i };
	}
	for (int i = 0; i < n; i++)
		keys[i] = (struct key){ kept[i].ti + kept[i].tt, kept[i].res, i };
	se_sort_keys(keys, n, s->tmpkeys);
	l->v = malloc(sizeof *l->v * (size_t)(n ? n : 1));
	if (!l->v)
		return -1;
	for (int i = 0; i < n; i++)
		l->v[i] = all->v[kept[keys[i].i].i];
	l->n = l->cap = n;
	return 0;
}

/* Rule 1 early, among the configurations of one layout and micro-batch
 * size (from first on), between neighbours: no recompute and selective
 * recompute, which the time model does not tell apart (cost_rc), and two
 * ZeRO stages in a row.  Of two where one ties or beats the other on
 * every axis, the other goes now, as keep_fastest would drop it: it drops
 * what another ties or beats and comes before in its order (resident
 * bytes, need, then place in all, which for neighbours here is the order
 * they were made in), and whatever beats what goes here stays to beat
 * what it would have beaten, so the list keeps the same. */
static void drop_neighbours(struct clist *all, int first, bool mv)
{
	int at[NRECOMPUTE][NZERO_STAGES][2], n = first;
	bool gone[NRECOMPUTE * NZERO_STAGES * 2] = { false };

	memset(at, -1, sizeof at);
	for (int i = first; i < all->n; i++)
		at[all->v[i].c.rc][all->v[i].c.zero][all->v[i].c.offload] = i;
	for (int i = first; i < all->n; i++) {
		const struct cand *c = &all->v[i];
		/* c's neighbours: selective recompute for none; the next ZeRO stage */
		int nb[2] = { c->c.rc == RC_NONE ? at[RC_SELECTIVE][c->c.zero][c->c.offload] : -1,
			      c->c.zero + 1 < NZERO_STAGES ?
			      at[c->c.rc][c->c.zero + 1][c->c.offload] : -1 };
		for (int k = 0; k < 2; k++) {
			const struct cand *d = &all->v[nb[k]];
			if (nb[k] < 0)
				continue;
			if (cand_dominates(d, c, mv) && (d->res != c->res || d->trans != c->trans))
				gone[i - first] = true;
			else if (cand_dominates(c, d, mv))
				gone[nb[k] - first] = true;
		}
	}
	for (int i = first; i < all->n; i++)
		if (!gone[i - first])
			all->v[n++] = all->v[i];
	all->n = n;
}

static int cand_add(struct clist *l, const struct pconf *c, const struct mcost *mc,
		    const double *mv)
{
	struct cand *d;

	if (grow((void **)&l->v, &l->cap, l->n, sizeof *l->v) < 0)
		return -1;
	d = &l->v[l->n++];
	d->c = *c;
	d->t_inf = mc->t[STAGE_INF];
	d->t_train = mc->t[STAGE_TRAIN];
	d->res = mc->res;
	d->trans = mc->trans;
	memcpy(d->mv, mv, sizeof d->mv);
	return 0;
}

/* The actor's moves into engines of each TP on its own pool of z GPUs from
 * layout c (they depend on its TP, PP, DP and whether it shards weights). */
static void moves(struct search *s, const struct pconf *c, int z, double *mv)
{
	for (int i = 0; i < MAX_TPS; i++) {
		struct pconf g;
		mv[i] = se_gen_conf(s, i, z, &g) ?
			cost_move(s->v, &s->v->job->models[s->actor].arch, c, &g, true) : 0;
	}
}


/* The configurations of model m on a pool of size zi into s->trials, in
 * the order they are costed (TP, PP, micro-batch size, recompute, ZeRO
 * stage): each kept on the GPUs, and which of it and its offloaded twin
 * the pins allow.  Returns how many; -1 out of memory. */
static int trials(struct search *s, int m, int zi)
{
	const struct model *md = &s->v->job->models[m];
	const struct arch *a = &md->arch;
	bool train = model_trainable(md);
	int z = s->sizes[zi], n = 0;
	long seqs = job_sequences(s->v->job);

	for (int t = 1; t <= z; t *= 2) {
		if (!se_tp_ok(s, a, t, z))
			continue;
		for (int p = 1; p <= a->layers && t * p <= z; p++) {
			int dp;
			long per;
			if (a->layers % p || z % (t * p))
				continue;
			dp = z / (t * p);
			per = train ? (seqs / s->v->job->mini_batches + dp - 1) / dp :
				      (seqs + dp - 1) / dp;
			for (int mb = 1; mb <= 8 && (mb == 1 || mb <= per); mb *= 2)
			for (int rc = train ? 0 : RC_SELECTIVE; rc <= (train ? 2 : RC_SELECTIVE); rc++)
			for (int zero = ZERO_0; zero <= (dp > 1 ? ZERO_3 : ZERO_0); zero++) {
				struct trial tr = { { t, p, dp, mb, (enum recompute)rc,
						      (enum zero_stage)zero, false }, false, false };
				struct pconf gone = tr.c;
				if (!train && (zero == ZERO_1 || zero == ZERO_2))
					continue;
				gone.offload = true;
				tr.kept = se_allowed(s, m, &tr.c);
				tr.gone = se_allowed(s, m, &gone);
				if (!tr.kept && !tr.gone)
					continue;
				if (grow((void **)&s->trials, &s->ntrials, n, sizeof *s->trials) < 0)
					return -1;
				s->trials[n++] = tr;
			}
		}
	}
	return n;
}

/* The times of c with its state on the GPUs, into tm (only st and t). */
static void times_of(struct search *s, int m, const struct mem_shape *sh, const struct pconf *c,
		     struct mcost *tm)
{
	struct pconf tc = *c;

	tc.rc = cost_rc(c->rc);
	memset(tm->st, 0, sizeof tm->st);
	model_times_at(s->v, m, sh, &tc, tm);
}

/* A trial's costs kept on the GPUs (mk) and offloaded (mo), tm holding its
 * times and sh its shape; *kept and *gone say which of the two fit and the
 * pins allow. */
static void cost_trial(struct search *s, int m, const struct mem_shape *sh,
		       const struct trial *tr, const struct mcost *tm, struct mcost *mk,
		       struct mcost *mo, bool *kept, bool *gone)
{
	/* cost once; the offloaded twin follows from it */
	model_memory_at(s->v, m, sh, &tr->c, mk);
	s->st->candidates += tr->kept + tr->gone;
	*kept = tr->kept && mk->res + mk->trans <= s->cap;
	*gone = tr->gone && model_offload_trans(s->v, m, mk) <= s->cap;
	memcpy(mk->st, tm->st, sizeof mk->st);
	memcpy(mk->t, tm->t, sizeof mk->t);
	if (*gone) {
		*mo = *mk;
		model_offload(s->v, m, mo);
	}
}

/* The least inference and training times of model m's configurations that
 * fit a pool of size zi (HUGE_VAL when none does), as its candidate list
 * would have them (rule 1 never drops the fastest), costing the memory of
 * as few as it can: a configuration offloaded takes no less time than
 * kept, so one kept that takes no less than the least found so far cannot
 * lower it. */
const double *se_fastest(struct search *s, int m, int zi)
{
	const struct arch *a;
	struct mem_shape sh;
	double *least;
	int n;

	m = s->twin[m];
	least = s->fastest[m * s->nsizes + zi];
	if (s->fastest_done[m * s->nsizes + zi])
		return least;
	s->fastest_done[m * s->nsizes + zi] = true;
	a = &s->v->job->models[m].arch;
	least[0] = least[1] = HUGE_VAL;
	memset(&sh, 0, sizeof sh);
	n = trials(s, m, zi);
	if (n < 0 || reserve((void **)&s->ttimes, &s->nttimes, n, sizeof *s->ttimes) < 0) {
		s->err = NR_EIO;
		return least;
	}
	/* every trial's times, kept, computed once for those alike in all the
	 * time model reads (one layout and micro-batch size, next to each
	 * other) */
	for (int i = 0, from = 0; i < n; i++) {
		const struct pconf *c = &s->trials[i].c, *d = &s->trials[from].c;
		struct mcost tm;
		int k = from;
		if (c->tp != d->tp || c->pp != d->pp || c->mb != d->mb)
			from = k = i;
		while (k < i && (s->trials[k].c.zero != c->zero ||
				 cost_rc(s->trials[k].c.rc) != cost_rc(c->rc)))
			k++;
		if (k < i) {
			s->ttimes[i][0] = s->ttimes[k][0];
			s->ttimes[i][1] = s->ttimes[k][1];
			continue;
		}
		if (i == 0 || c->tp != s->trials[i - 1].c.tp || c->pp != s->trials[i - 1].c.pp)
			mem_shape_of(a, c->tp, c->pp, &sh);
		times_of(s, m, &sh, c, &tm);
		s->ttimes[i][0] = tm.t[STAGE_INF];
		s->ttimes[i][1] = tm.t[STAGE_TRAIN];
	}
	/* then, for each stage, the memory of the fastest not yet ruled out;
	 * when many of them do not fit, of every one left in turn, so as not
	 * to look for the fastest too often */
	for (int x = 0; x < 2; x++)
		for (int picks = 0, sweep = 0;; picks++) {
			int at = -1;
			struct mcost tm, mk, mo;
			bool kept, gone;
			for (int i = picks < FASTEST_PICKS ? 0 : sweep; i < n; i++)
				if (s->ttimes[i][x] < least[x] &&
				    (at < 0 || s->ttimes[i][x] < s->ttimes[at][x])) {
					at = i;
					if (picks >= FASTEST_PICKS)
						break;
				}
			if (at < 0)
				break;
			if (picks >= FASTEST_PICKS)
				sweep = at + 1;
			mem_shape_of(a, s->trials[at].c.tp, s->trials[at].c.pp, &sh);
			mem_shape_batch(s->v->job, a, s->trials[at].c.mb, &sh);
			times_of(s, m, &sh, &s->trials[at].c, &tm);
			cost_trial(s, m, &sh, &s->trials[at], &tm, &mk, &mo, &kept, &gone);
			for (int y = 0; y < 2; y++) {
				int st = y ? STAGE_TRAIN : STAGE_INF;
				if (kept)
					least[y] = MIN(least[y], mk.t[st]);
				if (gone)
					least[y] = MIN(least[y], mo.t[st]);
			}
			/* costed: out of the running */
			s->ttimes[at][0] = s->ttimes[at][1] = HUGE_VAL;
		}
	return least;
}

/* Model m's candidates on a pool of size zi, fastest first: with a bound,
 * only those that could be in a plan that beats the best (bounds only
 * tighten, so a list made under an earlier bound keeps all a later one
 * would), and their least resident bytes, need and times then the least
 * of those. */
struct clist *se_cands(struct search *s, int m, int zi)
{
	struct clist *l, *all;

	m = s->twin[m];
	l = &s->cands[m * s->nsizes + zi];
	const struct arch *a = &s->v->job->models[m].arch;
	bool actor = m == s->actor, cut;
	int z = s->sizes[zi], n, first = 0;
	double mv[2][MAX_TPS];
	struct mem_shape sh;
	/* the times of one layout and micro-batch size, by what the time model
	 * reads of a configuration */
	bool timed[NRECOMPUTE][NZERO_STAGES] = { { false } };
	struct mcost tm[NRECOMPUTE][NZERO_STAGES];

	if (l->done)
		return l;
	l->done = true;
	/* rule 4 for one configuration: it cannot beat the best in any plan
	 * when with every other stage at its least it would not */
	cut = se_bounded(s);
	all = &s->all;
	all->n = 0;
	n = trials(s, m, zi);
	if (n < 0)
		s->err = NR_EIO;
	for (int i = 0; i < n; i++) {
		const struct trial *tr = &s->trials[i];
		const struct pconf *c = &tr->c, *last = i ? &s->trials[i - 1].c : NULL;
		struct pconf gone = *c;
		struct mcost mk, mo, *tk = &tm[cost_rc(c->rc)][c->zero];
		bool kept, away;
		if (!last || c->tp != last->tp || c->pp != last->pp) {
			mem_shape_of(a, c->tp, c->pp, &sh);
			memset(mv, 0, sizeof mv);
			for (int w = 0; actor && w < 2; w++)
				moves(s, &(struct pconf){ c->tp, c->pp, c->dp, 1, RC_NONE,
							  w ? ZERO_3 : ZERO_0, false }, z, mv[w]);
		}
		if (!last || c->tp != last->tp || c->pp != last->pp || c->mb != last->mb) {
			if (!s->exhaustive)
				drop_neighbours(all, first, actor);
			first = all->n;
			mem_shape_batch(s->v->job, a, c->mb, &sh);
			memset(timed, 0, sizeof timed);
		}
		if (!timed[cost_rc(c->rc)][c->zero]) {
			times_of(s, m, &sh, c, tk);
			timed[cost_rc(c->rc)][c->zero] = true;
		}
		/* offloaded, it takes no less */
		if (cut && se_beyond(s, 0, tk->t[STAGE_INF], tk->t[STAGE_TRAIN],
				  tk->t[STAGE_INF] + tk->t[STAGE_TRAIN]))
			continue;
		cost_trial(s, m, &sh, tr, tk, &mk, &mo, &kept, &away);
		gone.offload = true;
		if ((kept && cand_add(all, c, &mk, mv[c->zero == ZERO_3]) < 0) ||
		    (away && cand_add(all, &gone, &mo, mv[c->zero == ZERO_3]) < 0))
			s->err = NR_EIO;
	}
	if (!s->exhaustive)
		drop_neighbours(all, first, actor);
	if (keep_fastest(s, all, l, !s->exhaustive, actor) < 0) {
		s->err = NR_EIO;
		return l;
	}
	l->min_res = l->min_trans = l->min_ti = l->min_tt = HUGE_VAL;
	for (int i = 0; i < l->n; i++) {
		l->min_res = MIN(l->min_res, l->v[i].res);
		l->min_trans = MIN(l->min_trans, l->v[i].trans);
		l->min_ti = MIN(l->min_ti, l->v[i].t_inf);
		l->min_tt = MIN(l->min_tt, l->v[i].t_train);
	}
	return l;
}

