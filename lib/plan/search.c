/* The global plan search (see search.h for the space). */
#include "plan/search.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SIZES 128
#define EPS 1e-9

struct cand {
	struct pconf c;
	double t_inf, t_train, res, trans;
};

struct clist {
	bool done;
	int n, cap;
	struct cand *v;
};

struct entry {
	double v[NSTAGES];
	struct pconf home[MAX_MODELS];
	struct pconf gen;
};

struct front {
	bool done;
	int n, cap;
	struct entry *v;
	double min[NSTAGES]; /* per-stage minimum over entries */
};

struct search {
	const struct env *v;
	const struct space *sp;
	bool exhaustive;
	int nitems, nsizes, actor;
	int sizes[MAX_SIZES];
	double cap;
	struct clist *cands;   /* [model][size] */
	struct front *fronts;  /* [item set][size] */
	int twin[MAX_MODELS];  /* first model with the same candidates */
	double glb[NSTAGES];   /* per-stage lower bound of any plan */
	bool glb_done;
	double (*size_lb)[NSTAGES]; /* [item set][size]: stage-time lower bounds */
	bool *size_lb_done;
	double lb[1 << MAX_ITEMS][NSTAGES]; /* per item set, over every size */
	bool lb_done[1 << MAX_ITEMS];
	int node_free[4096];
	/* the walk */
	int npools;
	unsigned pools[MAX_ITEMS];
	int zi[MAX_ITEMS];
	const struct entry *pick[MAX_ITEMS];
	/* the best */
	bool found;
	double best;
	double best_move;
	struct plan *out, *scratch;
	const struct plan *current;
	struct search_stats *st;
	int err;
};

void space_init(struct space *sp)
{
	memset(sp, 0, sizeof *sp);
	for (int m = 0; m < MAX_MODELS; m++) {
		sp->home[m].rc = sp->home[m].zero = sp->home[m].offload = sp->home[m].fsdp = -1;
	}
	sp->gen.rc = sp->gen.zero = sp->gen.offload = sp->gen.fsdp = -1;
}

/* --- pins ------------------------------------------------------------------ */

int pin_parse(const struct job *job, const char *text, struct space *sp, struct err *e)
{
	char name[128], *at, *eq, *tok, *save, buf[256];
	const struct model *md;
	struct pin pin = { 0, 0, 0, 0, -1, -1, -1, -1 };
	int stage = -1;

	if (strlen(text) >= sizeof buf)
		return err_set(e, NR_EINPUT, "pin '%.40s…' is too long", text);
	strcpy(buf, text);
	at = strchr(buf, '@');
	eq = strchr(buf, '=');
	if (!at || !eq || eq < at)
		return err_set(e, NR_EINPUT, "pin '%s': expected MODEL@STAGE=tpN,ppN,dpN", text);
	*at = *eq = '\0';
	snprintf(name, sizeof name, "%s", buf);
	md = job_model(job, name);
	if (!md)
		return err_set(e, NR_EINPUT, "pin '%s': the job has no model '%s'", text, name);
	for (int s = 0; s < NSTAGES; s++)
		if (strcmp(at + 1, stage_names[s]) == 0)
			stage = s;
	if (stage < 0 || !md->stages[stage])
		return err_set(e, NR_EINPUT, "pin '%s': '%s' does not take part in a stage "
			       "'%s'", text, name, at + 1);
	if (stage == STAGE_INF && model_trainable(md))
		return err_set(e, NR_EINPUT, "pin '%s': %s@inference runs in its training "
			       "layout; pin %s@training", text, name, name);
	for (tok = strtok_r(eq + 1, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		int *dst = NULL, val;
		char extra;
		if (sscanf(tok, "tp%d%c", &val, &extra) == 1)
			dst = &pin.tp;
		else if (sscanf(tok, "pp%d%c", &val, &extra) == 1)
			dst = &pin.pp;
		else if (sscanf(tok, "dp%d%c", &val, &extra) == 1)
			dst = &pin.dp;
		else if (sscanf(tok, "mb%d%c", &val, &extra) == 1)
			dst = &pin.mb;
		if (dst) {
			if (val < 1 || val > MAX_GPUS)
				return err_set(e, NR_EINPUT, "pin '%s': '%s' must be positive",
					       text, tok);
			*dst = val;
			continue;
		}
		if (strcmp(tok, "none") == 0 || strcmp(tok, "selective") == 0 ||
		    strcmp(tok, "full") == 0)
			pin.rc = tok[0] == 'n' ? RC_NONE : tok[0] == 's' ? RC_SELECTIVE : RC_FULL;
		else if (strcmp(tok, "zero") == 0 || strcmp(tok, "nozero") == 0)
			pin.zero = tok[0] == 'z';
		else if (strcmp(tok, "fsdp") == 0 || strcmp(tok, "nofsdp") == 0)
			pin.fsdp = tok[0] == 'f';
		else if (strcmp(tok, "offload") == 0 || strcmp(tok, "nooffload") == 0)
			pin.offload = tok[0] == 'o';
		else
			return err_set(e, NR_EINPUT, "pin '%s': unknown setting '%s' (expected "
				       "tpN, ppN, dpN, mbN, none, selective, full, zero, "
				       "nozero, fsdp, nofsdp, offload, nooffload)", text, tok);
	}
	if (stage == STAGE_GEN) {
		if (pin.pp > 1 || pin.mb || pin.rc >= 0 || pin.zero >= 0 || pin.offload >= 0 ||
		    pin.fsdp >= 0)
			return err_set(e, NR_EINPUT, "pin '%s': generation engines take only "
				       "tpN and dpN", text);
		sp->gen = pin;
	} else {
		sp->home[md - job->models] = pin;
	}
	return NR_OK;
}

static bool pin_ok(const struct pin *p, const struct pconf *c)
{
	return (!p->tp || p->tp == c->tp) && (!p->pp || p->pp == c->pp) &&
	       (!p->dp || p->dp == c->dp) && (!p->mb || p->mb == c->mb) &&
	       (p->rc < 0 || p->rc == (int)c->rc) && (p->zero < 0 || p->zero == c->zero) &&
	       (p->offload < 0 || p->offload == c->offload) &&
	       (p->fsdp < 0 || p->fsdp == c->fsdp);
}

/* --- sizes and placement ------------------------------------------------- */

static void make_sizes(struct search *s)
{
	const struct cluster *cl = s->v->cl;
	int gpn = cl->gpus_per_node, full = 0, most = 0, step;

	for (int n = 0; n < cl->nodes; n++) {
		int up = 0;
		for (int k = 0; k < gpn; k++)
			up += cl->up[n * gpn + k];
		s->node_free[n] = up;
		full += up == gpn;
		most = up > most ? up : most;
	}
	s->nsizes = 0;
	for (int z = 1; z < gpn && z <= most; z *= 2)
		s->sizes[s->nsizes++] = z;
	/* beyond 32 nodes, whole-node pools come in coarser steps (and powers
	 * of two) so the space stays small enough to search in milliseconds */
	step = full <= 32 ? 1 : (full + 31) / 32;
	for (int k = 1; k <= full && s->nsizes < MAX_SIZES; k++) {
		bool fixed = false;
		/* and every size a layout fixes */
		for (int i = 0; i < s->sp->npools; i++)
			fixed |= s->sp->pool_size[i] == k * gpn;
		if (k % step == 0 || (k & (k - 1)) == 0 || k == full || fixed)
			s->sizes[s->nsizes++] = k * gpn;
	}
}

/* The same first-fit rule as plan_place, on free counts only. */
static bool sizes_fit(const struct search *s, const int *size, int k)
{
	const struct cluster *cl = s->v->cl;
	int gpn = cl->gpus_per_node, freec[4096], order[MAX_ITEMS], node = 0;

	memcpy(freec, s->node_free, sizeof(int) * (size_t)cl->nodes);
	for (int i = 0; i < k; i++)
		order[i] = i;
	for (int i = 1; i < k; i++)
		for (int j = i; j > 0 && size[order[j]] > size[order[j - 1]]; j--) {
			int t = order[j];
			order[j] = order[j - 1];
			order[j - 1] = t;
		}
	for (int oi = 0; oi < k; oi++) {
		int want = size[order[oi]], n;
		if (want >= gpn) {
			for (int got = 0; got < want / gpn; got++) {
				while (node < cl->nodes && freec[node] != gpn)
					node++;
				if (node == cl->nodes)
					return false;
				freec[node++] = 0;
			}
			continue;
		}
		for (n = 0; n < cl->nodes && freec[n] < want; n++)
			;
		if (n == cl->nodes)
			return false;
		freec[n] -= want;
	}
	return true;
}

/* --- candidates per model and size --------------------------------------- */

static bool dominates(const struct cand *a, const struct cand *b)
{
	return a->t_inf <= b->t_inf && a->t_train <= b->t_train && a->res <= b->res &&
	       a->trans <= b->trans;
}

/* Make room for one more element in a growing array. */
static int grow(void **v, int *cap, int n, size_t elem)
{
	void *nv;
	int nc;

	if (n < *cap)
		return 0;
	nc = *cap ? *cap * 2 : 16;
	nv = realloc(*v, elem * (size_t)nc);
	if (!nv)
		return -1;
	*v = nv;
	*cap = nc;
	return 0;
}

static int cand_add(struct clist *l, const struct pconf *c, const struct mcost *mc)
{
	if (grow((void **)&l->v, &l->cap, l->n, sizeof *l->v) < 0)
		return -1;
	l->v[l->n++] = (struct cand){ *c, mc->t[STAGE_INF], mc->t[STAGE_TRAIN], mc->res,
				      mc->trans };
	return 0;
}

static double cand_time(const struct cand *c)
{
	return c->t_inf + c->t_train;
}

static double cand_mem(const struct cand *c)
{
	return c->res + c->trans;
}

static int by_time_then_mem(const void *x, const void *y)
{
	const struct cand *a = x, *b = y;

	if (cand_time(a) != cand_time(b))
		return cand_time(a) < cand_time(b) ? -1 : 1;
	if (cand_mem(a) != cand_mem(b))
		return cand_mem(a) < cand_mem(b) ? -1 : 1;
	return memcmp(&a->c, &b->c, sizeof a->c);
}

/* The space keeps, for each model and pool size, the configurations no other
 * beats alone on both its time and its memory (resident plus running): in
 * order of time, each kept one needs less memory than all before it. */
static void keep_frontier(struct clist *l)
{
	double least = HUGE_VAL;
	int n = 0;

	if (l->n == 0)
		return;
	qsort(l->v, (size_t)l->n, sizeof *l->v, by_time_then_mem);
	for (int i = 0; i < l->n; i++) {
		if (cand_mem(&l->v[i]) < least) {
			least = cand_mem(&l->v[i]);
			l->v[n++] = l->v[i];
		}
	}
	l->n = n;
}

/* The fast search also drops configurations another beats on every count
 * that matters in a pool (time per stage, resident and running bytes). */
static void keep_undominated(struct clist *l)
{
	int n = 0;

	for (int i = 0; i < l->n; i++) {
		bool beaten = false;
		for (int k = 0; k < l->n && !beaten; k++)
			beaten = k != i && dominates(&l->v[k], &l->v[i]) &&
				 (!dominates(&l->v[i], &l->v[k]) || k < i);
		if (!beaten)
			l->v[n++] = l->v[i];
	}
	l->n = n;
}

static bool tp_ok(const struct search *s, const struct arch *a, int t, int z)
{
	return t <= s->v->cl->gpus_per_node && a->heads % t == 0 && a->kv_heads % t == 0 &&
	       z % t == 0;
}

static struct clist *cands(struct search *s, int m, int zi)
{
	struct clist *l;

	m = s->twin[m];
	l = &s->cands[m * s->nsizes + zi];
	const struct model *md = &s->v->job->models[m];
	const struct arch *a = &md->arch;
	const struct pin *pin = &s->sp->home[m];
	bool train = model_trainable(md);
	int z = s->sizes[zi];
	long seqs = job_sequences(s->v->job);

	if (l->done)
		return l;
	l->done = true;
	for (int t = 1; t <= z; t *= 2) {
		if (!tp_ok(s, a, t, z))
			continue;
		for (int p = 1; p <= a->layers && t * p <= z; p++) {
			int dp;
			long per;
			if (a->layers % p || z % (t * p))
				continue;
			dp = z / (t * p);
			per = train ? (seqs / s->v->job->mini_batches + dp - 1) / dp :
				      (seqs + dp - 1) / dp;
			for (int mb = 1; mb <= 8; mb *= 2) {
				if (mb > 1 && mb > per)
					break;
				for (int rc = train ? 0 : RC_SELECTIVE; rc <= (train ? 2 : RC_SELECTIVE); rc++)
				for (int zero = 0; zero <= (train && dp > 1); zero++)
				for (int fsdp = 0; fsdp <= (dp > 1 && zero == train); fsdp++) {
					struct pconf kept = { t, p, dp, mb, (enum recompute)rc, zero,
							      false, fsdp };
					struct pconf gone = kept;
					struct mcost mk, mo;
					bool use_kept = pin_ok(pin, &kept), use_gone;
					gone.offload = true;
					use_gone = pin_ok(pin, &gone);
					if (!use_kept && !use_gone)
						continue;
					/* cost once; the offloaded twin follows from it */
					model_memory(s->v, m, &kept, &mk);
					mo = mk;
					model_offload(s->v, m, &gone, &mo);
					s->st->candidates += use_kept + use_gone;
					use_kept &= mk.res + mk.trans <= s->cap;
					use_gone &= mo.trans <= s->cap;
					if (!use_kept && !use_gone)
						continue;
					model_times(s->v, m, &kept, &mk);
					mo = mk;
					model_offload(s->v, m, &gone, &mo);
					if ((use_kept && cand_add(l, &kept, &mk) < 0) ||
					    (use_gone && cand_add(l, &gone, &mo) < 0))
						s->err = NR_EIO;
				}
			}
		}
	}
	keep_frontier(l);
	if (!s->exhaustive)
		keep_undominated(l);
	return l;
}

/* --- pool fronts ----------------------------------------------------------- */

static int front_add(struct front *f, const struct entry *e)
{
	for (int i = 0; i < f->n; i++) {
		const double *o = f->v[i].v;
		if (o[0] <= e->v[0] && o[1] <= e->v[1] && o[2] <= e->v[2])
			return 0;
	}
	for (int i = 0; i < f->n;) {
		const double *o = f->v[i].v;
		if (e->v[0] <= o[0] && e->v[1] <= o[1] && e->v[2] <= o[2])
			f->v[i] = f->v[--f->n];
		else
			i++;
	}
	if (grow((void **)&f->v, &f->cap, f->n, sizeof *f->v) < 0)
		return -1;
	f->v[f->n++] = *e;
	return 0;
}

/* A partial combination of home configurations for a pool's models. */
struct part {
	double res, trans, ti, tt;
	uint16_t pick[MAX_MODELS]; /* each model's index in its candidate list */
};

struct parts {
	int n, cap;
	struct part *v;
};

static bool part_dominates(const struct part *a, const struct part *b)
{
	return a->res <= b->res && a->trans <= b->trans && a->ti <= b->ti && a->tt <= b->tt;
}

/* Add q, keeping only combinations no other one beats on every count
 * (resident bytes, running bytes, inference and training time): the pool's
 * feasibility and times are monotone in each, so nothing optimal is lost. */
static int parts_add(struct parts *l, const struct part *q, bool prune)
{
	if (prune) {
		for (int i = 0; i < l->n; i++)
			if (part_dominates(&l->v[i], q))
				return 0;
		for (int i = 0; i < l->n;)
			if (part_dominates(q, &l->v[i]))
				l->v[i] = l->v[--l->n];
			else
				i++;
	}
	if (grow((void **)&l->v, &l->cap, l->n, sizeof *l->v) < 0)
		return -1;
	l->v[l->n++] = *q;
	return 0;
}

/* The fastest engines next to resident bytes; false when none fits. */
static bool best_gen(struct search *s, int zi, const struct part *p, bool actor_here,
		     struct entry *e)
{
	const struct arch *a = &s->v->job->models[s->actor].arch;
	int z = s->sizes[zi];
	bool any = false;
	struct pconf home = { 1, 1, 1, 1, RC_SELECTIVE, false, false, false };

	if (actor_here)
		home = cands(s, s->actor, zi)->v[p->pick[s->actor]].c;
	for (int t = 1; t <= z; t *= 2) {
		struct pconf g = { t, 1, z / t, 1, RC_NONE, false, false, false };
		struct stime st;
		struct mem m;
		double peak;
		if (!tp_ok(s, a, t, z) || !pin_ok(&s->sp->gen, &g))
			continue;
		if (!gen_cost(s->v, &g, p->res, &home, actor_here, &st, &m, &peak))
			continue;
		if (!any || st.total < e->v[STAGE_GEN]) {
			e->v[STAGE_GEN] = st.total;
			e->gen = g;
			any = true;
		}
	}
	return any;
}

static const double *set_lb(struct search *s, unsigned items);

/* The most a pool may spend in each stage and still be part of a plan
 * that beats the best found: the best less every other stage's least.
 * Bounds only tighten as the search goes, so a front built under an
 * earlier bound never misses what a later one would keep. */
static void stage_caps(struct search *s, double *cap)
{
	double sum = s->v->k->step_s;

	for (int st = 0; st < NSTAGES; st++)
		cap[st] = HUGE_VAL;
	if (s->exhaustive || !s->found)
		return;
	if (!s->glb_done) {
		for (int st = 0; st < NSTAGES; st++)
			s->glb[st] = 0;
		s->glb[STAGE_GEN] = set_lb(s, 1u)[STAGE_GEN];
		for (int m = 0; m < s->v->job->nmodels; m++)
			for (int st = STAGE_INF; st < NSTAGES; st++)
				s->glb[st] = fmax(s->glb[st], set_lb(s, 1u << (1 + m))[st]);
		s->glb_done = true;
	}
	for (int st = 0; st < NSTAGES; st++)
		sum += s->glb[st];
	for (int st = 0; st < NSTAGES; st++)
		cap[st] = s->best * (1 + EPS) - (sum - s->glb[st]);
}

static struct front *front(struct search *s, unsigned items, int zi)
{
	double cap[NSTAGES];
	struct front *f = &s->fronts[items * (unsigned)s->nsizes + (unsigned)zi];
	struct parts cur = { 0 }, next = { 0 };
	struct part zero = { 0 };
	bool actor_here = items & (1u << (1 + s->actor));

	if (f->done)
		return f;
	f->done = true;
	s->st->pool_fronts++;
	stage_caps(s, cap);
	if (parts_add(&cur, &zero, false) < 0)
		s->err = NR_EIO;
	for (int m = 0; m < s->v->job->nmodels && !s->err; m++) {
		const struct clist *l;
		if (!(items & (1u << (1 + m))))
			continue;
		l = cands(s, m, zi);
		next.n = 0;
		for (int i = 0; i < cur.n; i++) {
			for (int k = 0; k < l->n; k++) {
				const struct cand *c = &l->v[k];
				struct part q = cur.v[i];
				q.res += c->res;
				q.trans = fmax(q.trans, c->trans);
				if (q.res + q.trans > s->cap)
					continue;
				q.ti += c->t_inf;
				q.tt += c->t_train;
				if (q.ti > cap[STAGE_INF] || q.tt > cap[STAGE_TRAIN])
					continue;
				q.pick[m] = (uint16_t)k;
				if (parts_add(&next, &q, !s->exhaustive) < 0)
					s->err = NR_EIO;
			}
		}
		struct parts t = cur;
		cur = next;
		next = t;
	}
	for (int i = 0; i < cur.n && !s->err; i++) {
		struct entry e;
		memset(&e, 0, sizeof e);
		for (int m = 0; m < s->v->job->nmodels; m++)
			if (items & (1u << (1 + m)))
				e.home[m] = cands(s, m, zi)->v[cur.v[i].pick[m]].c;
		e.v[STAGE_INF] = cur.v[i].ti;
		e.v[STAGE_TRAIN] = cur.v[i].tt;
		if ((items & 1u) && !best_gen(s, zi, &cur.v[i], actor_here, &e))
			continue;
		if (e.v[STAGE_GEN] > cap[STAGE_GEN])
			continue;
		if (front_add(f, &e) < 0)
			s->err = NR_EIO;
	}
	free(cur.v);
	free(next.v);
	for (int st = 0; st < NSTAGES; st++) {
		f->min[st] = HUGE_VAL;
		for (int i = 0; i < f->n; i++)
			f->min[st] = fmin(f->min[st], f->v[i].v[st]);
	}
	return f;
}

/* Per-stage lower bound of an item set on a pool of one size: each model's
 * fastest configuration there, and the engines with all memory to
 * themselves and nothing to move.  Cheap: no combination is formed. */
static const double *size_lb(struct search *s, unsigned items, int zi)
{
	double *lb = s->size_lb[items * (unsigned)s->nsizes + (unsigned)zi];
	const struct arch *a = &s->v->job->models[s->actor].arch;
	int z = s->sizes[zi];

	if (s->size_lb_done[items * (unsigned)s->nsizes + (unsigned)zi])
		return lb;
	s->size_lb_done[items * (unsigned)s->nsizes + (unsigned)zi] = true;
	for (int st = 0; st < NSTAGES; st++)
		lb[st] = 0;
	for (int m = 0; m < s->v->job->nmodels; m++) {
		const struct clist *l;
		double ti = HUGE_VAL, tt = HUGE_VAL;
		if (!(items & (1u << (1 + m))))
			continue;
		l = cands(s, m, zi);
		for (int k = 0; k < l->n; k++) {
			ti = fmin(ti, l->v[k].t_inf);
			tt = fmin(tt, l->v[k].t_train);
		}
		lb[STAGE_INF] += ti;
		lb[STAGE_TRAIN] += tt;
	}
	if (items & 1u) {
		double tg = HUGE_VAL;
		for (int t = 1; t <= z; t *= 2) {
			struct pconf g = { t, 1, z / t, 1, RC_NONE, false, false, false };
			struct stime st;
			struct mem m;
			double peak;
			if (tp_ok(s, a, t, z) && pin_ok(&s->sp->gen, &g) &&
			    gen_cost(s->v, &g, 0, &g, true, &st, &m, &peak))
				tg = fmin(tg, st.total);
		}
		lb[STAGE_GEN] = tg;
	}
	return lb;
}

/* Per-stage lower bound of an item set over every size it may take. */
static const double *set_lb(struct search *s, unsigned items)
{
	if (!s->lb_done[items]) {
		for (int st = 0; st < NSTAGES; st++)
			s->lb[items][st] = HUGE_VAL;
		for (int zi = 0; zi < s->nsizes; zi++) {
			const double *l = size_lb(s, items, zi);
			for (int st = 0; st < NSTAGES; st++)
				s->lb[items][st] = fmin(s->lb[items][st], l[st]);
		}
		s->lb_done[items] = true;
	}
	return s->lb[items];
}

/* Whether the plans below this point of the walk could still beat the best:
 * pools before i as picked, pool i at size zi (or any size when zi < 0),
 * the rest at their best size. */
static bool promising(struct search *s, int i, int zi, const double *mx)
{
	double bound = s->v->k->step_s;

	if (s->exhaustive || !s->found)
		return true;
	for (int st = 0; st < NSTAGES; st++) {
		double m = mx[st];
		if (i < s->npools)
			m = fmax(m, zi >= 0 ? size_lb(s, s->pools[i], zi)[st] :
					      set_lb(s, s->pools[i])[st]);
		for (int j = i + 1; j < s->npools; j++)
			m = fmax(m, set_lb(s, s->pools[j])[st]);
		bound += m;
	}
	return bound <= s->best * (1 + EPS);
}

/* --- the walk over pools, sizes and front entries --------------------------- */

static void build(struct search *s, struct plan *p)
{
	memset(p->pools, 0, sizeof p->pools);
	p->npools = s->npools;
	for (int i = 0; i < s->npools; i++) {
		p->pools[i].items = s->pools[i];
		p->pools[i].ngpus = s->sizes[s->zi[i]];
		for (int m = 0; m < s->v->job->nmodels; m++)
			if (s->pools[i] & (1u << (1 + m)))
				p->home[m] = s->pick[i]->home[m];
		if (s->pools[i] & 1u)
			p->gen = s->pick[i]->gen;
	}
	plan_place(s->v->cl, p);
	plan_evaluate(s->v, p);
}

static void leaf(struct search *s, const double *mx)
{
	int size[MAX_ITEMS];
	double obj = s->v->k->step_s;

	for (int st = 0; st < NSTAGES; st++)
		obj += mx[st];
	s->st->leaves++;
	if (s->found && obj > s->best * (1 + EPS))
		return;
	for (int i = 0; i < s->npools; i++)
		size[i] = s->sizes[s->zi[i]];
	if (!sizes_fit(s, size, s->npools))
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

static void walk(struct search *s, int i, int left, const double *mx)
{
	if (i == s->npools) {
		leaf(s, mx);
		return;
	}
	if (!promising(s, i, -1, mx))
		return;
	for (int zi = s->nsizes - 1; zi >= 0; zi--) {
		int z = s->sizes[zi];
		struct front *f;
		if (z > left || (s->sp->npools && s->sp->pool_size[i] && s->sp->pool_size[i] != z))
			continue;
		if (!promising(s, i, zi, mx))
			continue;
		f = front(s, s->pools[i], zi);
		s->zi[i] = zi;
		for (int k = 0; k < f->n; k++) {
			double nm[NSTAGES];
			for (int st = 0; st < NSTAGES; st++)
				nm[st] = fmax(mx[st], f->v[k].v[st]);
			s->pick[i] = &f->v[k];
			walk(s, i + 1, left - z, nm);
		}
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
		s->st->partitions++;
		walk(s, 0, up, zero);
		return;
	}
	for (int b = 0; b <= nblocks; b++) {
		block[item] = b;
		partitions(s, item + 1, block, b == nblocks ? nblocks + 1 : nblocks, want, up);
	}
}

/* Why nothing fits, in words: the first model-stage that cannot fit even on
 * every GPU at its leanest, or the plain fact. */
static int explain(struct search *s, struct err *e)
{
	const struct job *j = s->v->job;
	const struct cluster *cl = s->v->cl;
	int top = s->nsizes - 1;

	for (int m = 0; m < j->nmodels; m++) {
		double need = HUGE_VAL;
		struct pconf best = { 0 };
		int stage = model_trainable(&j->models[m]) ? STAGE_TRAIN : STAGE_INF;
		const struct arch *a = &j->models[m].arch;
		int z = s->sizes[top];
		/* a DP pin fixes the pool size; otherwise the largest pool is leanest */
		if (s->sp->home[m].dp && s->sp->home[m].tp && s->sp->home[m].pp)
			z = s->sp->home[m].tp * s->sp->home[m].pp * s->sp->home[m].dp;
		for (int t = 1; t <= z; t *= 2)
			for (int p = 1; p <= a->layers && t * p <= z; p++) {
				const struct pin *pin = &s->sp->home[m];
				struct pconf c = { t, p, z / (t * p), pin->mb ? pin->mb : 1,
						   pin->rc >= 0 ? (enum recompute)pin->rc : RC_FULL,
						   pin->zero != 0, pin->offload == 1,
						   pin->fsdp == 1 };
				struct mcost mc;
				if (!tp_ok(s, a, t, z) || a->layers % p || z % (t * p) ||
				    !pin_ok(pin, &c))
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
				       stage_names[stage], need / GIB, best.tp, best.pp, best.dp,
				       s->cap / GIB);
		if (need == HUGE_VAL)
			return err_set(e, NR_EINFEASIBLE, "%s@%s has no configuration on %d GPUs "
				       "that meets its pins and divides its heads and layers",
				       j->models[m].name, stage_names[stage], z);
	}
	return err_set(e, NR_EINFEASIBLE, "no plan fits: each model fits alone, but not "
		       "together on %d GPUs of %.1f GiB (after %.0f%% headroom)",
		       cluster_gpus_up(cl), s->cap / GIB, cl->headroom * 100);
}

int plan_search(const struct env *v, const struct space *sp, bool exhaustive,
		const struct plan *current, struct plan *best, struct search_stats *st,
		struct err *e)
{
	struct search *s = calloc(1, sizeof *s);
	struct timespec t0, t1;
	int block[MAX_ITEMS], rc = NR_OK;

	memset(st, 0, sizeof *st);
	if (!s)
		return err_set(e, NR_EIO, "out of memory");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	s->v = v;
	s->sp = sp;
	s->exhaustive = exhaustive;
	s->nitems = 1 + v->job->nmodels;
	s->actor = job_actor(v->job);
	s->cap = cluster_gpu_bytes(v->cl);
	s->st = st;
	s->current = current;
	s->out = best;
	make_sizes(s);
	/* models alike in architecture, stages and pins share their candidates */
	for (int m = 0; m < v->job->nmodels; m++) {
		const struct model *a = &v->job->models[m];
		s->twin[m] = m;
		for (int k = 0; k < m && s->twin[m] == m; k++) {
			const struct model *b = &v->job->models[k];
			if (!memcmp(&a->arch, &b->arch, sizeof a->arch) &&
			    !memcmp(a->stages, b->stages, sizeof a->stages) &&
			    !memcmp(&sp->home[m], &sp->home[k], sizeof sp->home[m]))
				s->twin[m] = k;
		}
	}
	s->cands = calloc((size_t)v->job->nmodels * (size_t)s->nsizes, sizeof *s->cands);
	s->fronts = calloc(((size_t)1 << s->nitems) * (size_t)s->nsizes, sizeof *s->fronts);
	s->scratch = malloc(sizeof *s->scratch);
	s->size_lb = calloc(((size_t)1 << s->nitems) * (size_t)s->nsizes, sizeof *s->size_lb);
	s->size_lb_done = calloc(((size_t)1 << s->nitems) * (size_t)s->nsizes, 1);
	if (!s->cands || !s->fronts || !s->scratch || !s->size_lb || !s->size_lb_done) {
		rc = err_set(e, NR_EIO, "out of memory");
		goto out;
	}
	if (sp->npools) {
		s->npools = sp->npools;
		memcpy(s->pools, sp->pool_items, sizeof s->pools);
		st->partitions = 1;
		walk(s, 0, cluster_gpus_up(v->cl), (const double[NSTAGES]){ 0 });
	} else {
		/* most pools first: their fronts are cheap (one model each) and give
		 * a good bound before the crowded pools are costed */
		for (int want = s->nitems; want >= 1; want--)
			partitions(s, 0, block, 0, want, cluster_gpus_up(v->cl));
	}
	if (s->err)
		rc = err_set(e, NR_EIO, "out of memory");
	else if (!s->found)
		rc = explain(s, e);
out:
	for (int i = 0; s->cands && i < v->job->nmodels * s->nsizes; i++)
		free(s->cands[i].v);
	for (size_t i = 0; s->fronts && i < ((size_t)1 << s->nitems) * (size_t)s->nsizes; i++)
		free(s->fronts[i].v);
	free(s->cands);
	free(s->fronts);
	free(s->scratch);
	free(s->size_lb);
	free(s->size_lb_done);
	free(s);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	st->seconds = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
	return rc;
}
