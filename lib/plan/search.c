/* The global plan search (see search.h for the space).
 *
 * Why the fast search is exact.  A plan's step time is step_s plus, for
 * each stage, the longest of its pools' times in that stage, and a pool's
 * time in a stage is the sum of its items' times there.  A pool fits when
 * its resident bytes R (summed over its models) plus the largest need T of
 * one of its model-stages on top of them fit a GPU, and its engines, if it
 * has them, find room next to R for one sequence at its longest (the
 * built-in engine, for all it holds).  The engines take G(R, tp) + mv(tp):
 * G does not decrease as R grows (less room for the KV cache, never fewer
 * decode steps, none cheaper: cost_gen), and mv moves the actor's weights
 * in, which depends on the actor's home layout when both share the pool.
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
 *   3. an entry of a pool's front (its three stage times at one size) that
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
 * test_search_diff checks that both agree on random jobs and clusters. */
#include "plan/search.h"

#include "common/mem.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SIZES 128
#define MAX_TPS 8 /* engine TPs 1, 2, …, 128 */
#define GRID 64   /* resident amounts the engines' time is sampled at */
#define EPS 1e-9
#define FIRST_PASS 2 /* configurations per model and size in the first pass */
#define FASTEST_PICKS 8 /* fastest(): picks of the fastest left before a sweep */
/* fmin and fmax are calls where NaN must be honoured; none arises here */
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

struct cand {
	struct pconf c;
	double t_inf, t_train, res, trans;
	double mv[MAX_TPS]; /* the actor: moving its weights into engines of TP 2^i here */
};

struct clist {
	bool done;
	int n, cap;
	struct cand *v;         /* by the sum of the two times, fastest first */
	double min_res, min_trans, min_ti, min_tt;
};

/* One configuration of a model on a pool size, before it is costed: kept
 * on the GPUs, and whether the pins allow it and its offloaded twin. */
struct trial {
	struct pconf c;
	bool kept, gone;
};

/* A combination of a pool's choices and its time in each stage. */
struct entry {
	double v[NSTAGES];
	uint16_t pick[MAX_MODELS]; /* each model's index in its candidate list */
	int gen_tp;
};

struct front {
	bool done;
	int n, cap;
	struct entry *v;
};

/* The engines of one pool size: their time without moving the actor in, at
 * each TP and resident amount of the grid, and the move from elsewhere. */
struct gtab {
	bool done;
	int ntp, tp[MAX_TPS];  /* the TPs the space has here (log2) */
	double g[MAX_TPS][GRID + 1]; /* -1 until asked for */
	double far[MAX_TPS];
};

/* A configuration or combination kept so far by rule 1 or 2: its axes,
 * and its place in the list taken from. */
struct axes {
	double res, trans, ti, tt;
	int i;
};

struct search {
	const struct env *v;
	const struct space *sp;
	bool exhaustive;
	int limit;             /* use only this many configurations of each list; 0 all */
	int nitems, nsizes, actor;
	int sizes[MAX_SIZES];
	double cap;
	double grid_per_byte;  /* GRID / cap */
	struct clist *cands;   /* [model][size] */
	struct clist all;      /* every configuration of one, before rule 1 */
	struct trial *trials;  /* the configurations of one, before costing */
	int ntrials;
	double (*ttimes)[2];   /* their times kept on the GPUs */
	int nttimes;
	double (*fastest)[2];  /* [model][size]: fastest() */
	bool *fastest_done;
	struct key *keys, *tmpkeys; /* orders, and room to sort them */
	int nkeys;
	struct axes *kept;     /* keep_pareto's list */
	int nkept;
	struct front *fronts;  /* [item set][size] */
	struct gtab *gtabs;    /* [size] */
	int twin[MAX_MODELS];  /* first model with the same candidates */
	double glb[NSTAGES];   /* per-stage lower bound of any plan */
	bool glb_done;
	double (*size_lb)[NSTAGES]; /* [item set][size]: stage-time lower bounds */
	bool *size_lb_done;
	double (*upto_lb)[NSTAGES]; /* [item set][size]: the least over sizes up to it */
	bool *upto_done;
	double (*floor)[2];    /* [model][size]: its inference and training floors */
	double (*floor_upto)[NSTAGES]; /* [item set][size]: floors' least up to it */
	bool floor_done[1 << MAX_ITEMS];
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
	for (int m = 0; m < MAX_MODELS; m++)
		sp->home[m].rc = sp->home[m].offload = -1;
	sp->gen.rc = sp->gen.offload = -1;
}

/* --- pins ------------------------------------------------------------------ */

#define ZERO_ALL ((1u << NZERO_STAGES) - 1)

/* The ZeRO stages a pin's words allow: zeroN; and as older plans spelled
 * them, zero (stage 1, or 3 beside fsdp), nozero (0), fsdp (3), nofsdp (not
 * 3).  0 when they contradict each other. */
static unsigned zero_words(unsigned exact, int zero, int fsdp)
{
	unsigned mask = exact ? exact : ZERO_ALL;

	if (fsdp == 1)
		mask &= 1u << ZERO_3;
	if (fsdp == 0)
		mask &= ~(1u << ZERO_3);
	if (zero == 1)
		mask &= fsdp == 1 ? 1u << ZERO_3 : 1u << ZERO_1;
	if (zero == 0)
		mask &= 1u << ZERO_0;
	return mask;
}

int search_pin_parse(const struct job *job, const char *text, struct space *sp, struct err *e)
{
	char name[128], *at, *eq, *tok, *save, buf[256];
	const struct model *md;
	struct pin pin = { 0, 0, 0, 0, -1, 0, -1 };
	int stage = -1, zero = -1, fsdp = -1;
	unsigned exact = 0;
	bool zero_given = false;

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
		if (sscanf(tok, "zero%d%c", &val, &extra) == 1 && tok[4] >= '0' && tok[4] <= '9') {
			if (val < ZERO_0 || val > ZERO_3)
				return err_set(e, NR_EINPUT, "pin '%s': '%s': ZeRO stages are "
					       "zero0 to zero3", text, tok);
			if (exact && exact != 1u << val)
				return err_set(e, NR_EINPUT, "pin '%s': two ZeRO stages", text);
			exact = 1u << val;
			zero_given = true;
			continue;
		}
		if (strcmp(tok, "none") == 0 || strcmp(tok, "selective") == 0 ||
		    strcmp(tok, "full") == 0)
			pin.rc = tok[0] == 'n' ? RC_NONE : tok[0] == 's' ? RC_SELECTIVE : RC_FULL;
		else if (strcmp(tok, "zero") == 0 || strcmp(tok, "nozero") == 0)
			zero = tok[0] == 'z';
		else if (strcmp(tok, "fsdp") == 0 || strcmp(tok, "nofsdp") == 0)
			fsdp = tok[0] == 'f';
		else if (strcmp(tok, "offload") == 0 || strcmp(tok, "nooffload") == 0)
			pin.offload = tok[0] == 'o';
		else
			return err_set(e, NR_EINPUT, "pin '%s': unknown setting '%s' (expected "
				       "tpN, ppN, dpN, mbN, none, selective, full, zero0 to zero3, "
				       "zero, nozero, fsdp, nofsdp, offload, nooffload)", text, tok);
		zero_given |= zero >= 0 || fsdp >= 0;
	}
	if (zero_given) {
		pin.zero = zero_words(exact, zero, fsdp);
		if (!pin.zero)
			return err_set(e, NR_EINPUT, "pin '%s': its ZeRO settings contradict each "
				       "other", text);
		if (!model_trainable(md) && stage != STAGE_GEN &&
		    !(pin.zero & (1u << ZERO_0 | 1u << ZERO_3)))
			return err_set(e, NR_EINPUT, "pin '%s': %s has no gradients or optimizer "
				       "state to shard (zero0 or zero3)", text, name);
	}
	if (stage == STAGE_GEN) {
		if (pin.pp > 1 || pin.mb || pin.rc >= 0 || zero_given || pin.offload >= 0)
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
	       (p->rc < 0 || p->rc == (int)c->rc) && (!p->zero || p->zero & (1u << c->zero)) &&
	       (p->offload < 0 || p->offload == c->offload);
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

/* Make room for n elements in a growing array of int capacity; past
 * 2^30 of them, which the doubling of an int would overflow, there is no
 * room. */
static int reserve(void **v, int *cap, int n, size_t elem)
{
	size_t c = (size_t)*cap;

	if (n > 1 << 30 || mem_grow(v, &c, (size_t)n, elem) < 0)
		return -1;
	*cap = (int)c;
	return 0;
}

/* Make room for one more. */
static int grow(void **v, int *cap, int n, size_t elem)
{
	return reserve(v, cap, n + 1, elem);
}

static bool tp_ok(const struct search *s, const struct arch *a, int t, int z)
{
	return t <= s->v->cl->gpus_per_node && a->heads % t == 0 && a->kv_heads % t == 0 &&
	       z % t == 0;
}

/* The engines' layout at TP 2^i on a pool of z GPUs, if the space has it. */
static bool gen_conf(const struct search *s, int i, int z, struct pconf *g)
{
	const struct arch *a = &s->v->job->models[s->actor].arch;
	int t = 1 << i;

	*g = (struct pconf){ t, 1, z / t, 1, RC_NONE, ZERO_0, false };
	return t <= z && tp_ok(s, a, t, z) && pin_ok(&s->sp->gen, g);
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

/* A configuration's place in an order: by a first and a second number,
 * then by its index, so the order is the same on every machine. */
struct key {
	double first, second;
	int i;
};

static bool key_before(const struct key *a, const struct key *b)
{
	if (a->first != b->first)
		return a->first < b->first;
	if (a->second != b->second)
		return a->second < b->second;
	return a->i < b->i;
}

/* Sort n keys (merge sort, stable; tmp holds n). */
static void sort_keys(struct key *v, int n, struct key *tmp)
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
static int reserve_keys(struct search *s, int n)
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
	    reserve_keys(s, all->n) < 0)
		return -1;
	s->nkept = cap;
	kept = s->kept;
	keys = s->keys;
	for (int i = 0; i < all->n; i++)
		keys[i] = (struct key){ all->v[i].res, all->v[i].trans, i };
	sort_keys(keys, all->n, s->tmpkeys);
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
	sort_keys(keys, n, s->tmpkeys);
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
		mv[i] = gen_conf(s, i, z, &g) ?
			cost_move(s->v, &s->v->job->models[s->actor].arch, c, &g, true) : 0;
	}
}

static bool bounded(struct search *s);
static bool beyond(const struct search *s, double g, double ti, double tt, double sum);

/* The configurations of model m on a pool of size zi into s->trials, in
 * the order they are costed (TP, PP, micro-batch size, recompute, ZeRO
 * stage): each kept on the GPUs, and which of it and its offloaded twin
 * the pins allow.  Returns how many; -1 out of memory. */
static int trials(struct search *s, int m, int zi)
{
	const struct model *md = &s->v->job->models[m];
	const struct arch *a = &md->arch;
	const struct pin *pin = &s->sp->home[m];
	bool train = model_trainable(md);
	int z = s->sizes[zi], n = 0;
	long seqs = job_sequences(s->v->job);

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
			for (int mb = 1; mb <= 8 && (mb == 1 || mb <= per); mb *= 2)
			for (int rc = train ? 0 : RC_SELECTIVE; rc <= (train ? 2 : RC_SELECTIVE); rc++)
			for (int zero = ZERO_0; zero <= (dp > 1 ? ZERO_3 : ZERO_0); zero++) {
				struct trial tr = { { t, p, dp, mb, (enum recompute)rc,
						      (enum zero_stage)zero, false }, false, false };
				struct pconf gone = tr.c;
				if (!train && (zero == ZERO_1 || zero == ZERO_2))
					continue;
				/* the built-in engine keeps the weights whole across DP */
				if (zero == ZERO_3 && s->v->cl->engine == CLUSTER_ENGINE_BUILTIN)
					continue;
				gone.offload = true;
				tr.kept = pin_ok(pin, &tr.c);
				tr.gone = pin_ok(pin, &gone);
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
static const double *fastest(struct search *s, int m, int zi)
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
static struct clist *cands(struct search *s, int m, int zi)
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
	cut = bounded(s);
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
		if (cut && beyond(s, 0, tk->t[STAGE_INF], tk->t[STAGE_TRAIN],
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

/* A partial combination of home configurations for a pool's models. */
struct part {
	double res, trans, ti, tt;
	uint16_t pick[MAX_MODELS];
};

struct parts {
	int n, cap;
	struct part *v;
};

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

	if (reserve_keys(s, l->n) < 0 || reserve((void **)&tmp->v, &tmp->cap, l->n, sizeof *tmp->v) < 0)
		return -1;
	k = s->keys;
	for (int i = 0; i < l->n; i++) {
		const struct part *p = &l->v[i];
		k[i] = (struct key){ p->ti + p->tt, p->res, i };
	}
	sort_keys(k, l->n, s->tmpkeys);
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
 * the actor's among them or not (here), without moving the actor in: the
 * seconds, HUGE_VAL when they do not fit (the built-in engine, which
 * holds whole sequences, may not fit where one sequence does). */
static double gen_alone(struct search *s, int zi, int i, double res, bool here)
{
	struct pconf g, away = { 1, 1, 1, 1, RC_SELECTIVE, ZERO_0, false };
	struct stime st;
	struct mem m;
	double peak;

	if (!gen_conf(s, i, s->sizes[zi], &g) ||
	    !gen_cost(s->v, &g, res, &away, here, &st, &m, &peak) || peak > s->cap)
		return HUGE_VAL;
	return st.total - st.move;
}

/* The engines' time without the move, sampled (when first asked for) at
 * GRID + 1 resident amounts from 0 to a GPU's bytes: as it never falls when
 * residents grow, the sample at or below a resident amount bounds it from
 * below.  The samples take the actor as here, where the engines need the
 * least. */
static void gtab_fill(struct search *s, int zi, struct gtab *t)
{
	t->done = true;
	t->ntp = 0;
	for (int i = 0; i < MAX_TPS; i++) {
		struct pconf g, away = { 1, 1, 1, 1, RC_SELECTIVE, ZERO_0, false };
		if (!gen_conf(s, i, s->sizes[zi], &g))
			continue;
		t->tp[t->ntp++] = i;
		t->far[i] = cost_move(s->v, &s->v->job->models[s->actor].arch, &away, &g, false);
		for (int j = 0; j <= GRID; j++)
			t->g[i][j] = -1;
	}
}

static inline struct gtab *gtab(struct search *s, int zi)
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
	struct gtab *t = gtab(s, zi);
	double x = res * s->grid_per_byte, best = HUGE_VAL;
	int j = x < 0 ? 0 : x > GRID ? GRID : (int)x;

	for (int k = 0; k < t->ntp; k++) {
		int i = t->tp[k];
		double g;
		if (t->g[i][j] < 0)
			t->g[i][j] = gen_alone(s, zi, i, s->cap * j / GRID, true);
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
static bool bounded(struct search *s)
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

static bool beyond(const struct search *s, double g, double ti, double tt, double sum)
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
		const struct clist *l = cands(s, order[k], zi);
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
static struct front *front(struct search *s, unsigned items, int zi)
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
	bound = bounded(s);
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
		const struct clist *l = cands(s, m, zi);
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
				if (bound && beyond(s, gfix, 0, 0, q.ti + q.tt + rest[k + 1].sum))
					break;
				if (q.res + q.trans > s->cap)
					continue;
				/* what is still to come needs at least this much */
				q.trans = MAX(q.trans, rest[k + 1].trans);
				if (q.res + rest[k + 1].res + q.trans > s->cap)
					continue;
				if (bound && beyond(s, gfix, q.ti + rest[k + 1].ti, q.tt + rest[k + 1].tt,
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
		const struct clist *l = n ? cands(s, last, zi) : NULL;
		int from = n && twin_at[n - 1] >= 0 ? cur.v[i].pick[order[twin_at[n - 1]]] : 0;
		double gfix = pool_gen_lb(s, zi, gen_here, actor_here,
					  cur.v[i].res + (n ? l->min_res : 0));
		/* gfix bounds the engines' time as well, and costs nothing */
		double g0 = bound ? MAX(gfix, s->glb[STAGE_GEN]) : gfix;
		/* beyond(s, gfix, 0, 0, sum) for this combination, but for sum */
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
				if ((!bound || !beyond(s, 0, e.v[STAGE_INF], e.v[STAGE_TRAIN],
						       e.v[STAGE_INF] + e.v[STAGE_TRAIN])) &&
				    front_add(f, &e) < 0)
					s->err = NR_EIO;
				continue;
			}
			e.v[STAGE_GEN] = gen_lb(s, zi, res, mv);
			if (e.v[STAGE_GEN] == HUGE_VAL || front_beats(f, e.v) ||
			    (bound && beyond(s, e.v[STAGE_GEN], e.v[STAGE_INF], e.v[STAGE_TRAIN],
					     e.v[STAGE_INF] + e.v[STAGE_TRAIN])))
				continue;
			/* only the best engine TP: the TP changes nothing but this
			 * pool's generation time */
			for (int k = 0; k < gtab(s, zi)->ntp; k++) {
				int t = gtab(s, zi)->tp[k];
				double g = gen_alone(s, zi, t, res, actor_here);
				if (g == HUGE_VAL)
					continue;
				g += mv ? mv[t] : gtab(s, zi)->far[t];
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
		least = fastest(s, m, zi);
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
static bool promising(struct search *s, int i, int zi, int left, const double *mx)
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

/* --- the walk over pools, sizes and front entries --------------------------- */

static void build(struct search *s, struct plan *p)
{
	memset(p->pools, 0, sizeof p->pools);
	p->npools = s->npools;
	for (int i = 0; i < s->npools; i++) {
		int zi = s->zi[i];
		p->pools[i].items = s->pools[i];
		p->pools[i].ngpus = s->sizes[zi];
		for (int m = 0; m < s->v->job->nmodels; m++)
			if (s->pools[i] & (1u << (1 + m)))
				p->home[m] = cands(s, m, zi)->v[s->pick[i]->pick[m]].c;
		if (s->pools[i] & 1u)
			gen_conf(s, s->pick[i]->gen_tp, s->sizes[zi], &p->gen);
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
	if (obj > s->best * (1 + EPS))
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

static void walk(struct search *s, int i, int left, const double *mx);

/* The exhaustive walk's pool: its models in front()'s order, the GPUs left
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
 * with every engine TP: the entries front() lists without pruning, in its
 * order (each model's candidates in turn, the last innermost), but walked
 * on from one at a time, so that the exhaustive search holds none of a
 * pool's combinations but the one it is at, however many there are. */
static void stream(struct search *s, const struct stream *w, int k, const struct part *q)
{
	int m = k < w->n ? w->order[k] : -1;
	const struct clist *l = m >= 0 ? cands(s, m, w->zi) : NULL;

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
		for (int t = 0; t < gtab(s, w->zi)->ntp; t++) {
			int tp = gtab(s, w->zi)->tp[t];
			double g = gen_alone(s, w->zi, tp, r.res, w->actor_here);
			if (g == HUGE_VAL)
				continue;
			e.v[STAGE_GEN] = g + (d && m == s->actor ? d->mv[tp] : gtab(s, w->zi)->far[tp]);
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
	if (!promising(s, i, -1, left, mx))
		return;
	for (int zi = s->nsizes - 1; zi >= 0; zi--) {
		int z = s->sizes[zi];
		struct front *f;
		if (z > left || (s->sp->npools && s->sp->pool_size[i] && s->sp->pool_size[i] != z))
			continue;
		if (!promising(s, i, zi, left, mx))
			continue;
		s->zi[i] = zi;
		if (s->exhaustive) {
			stream_pool(s, i, zi, left - z, mx);
			continue;
		}
		f = front(s, s->pools[i], zi);
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

/* One pass over the space: the layout's pools, or every partition. */
static void pass(struct search *s, int *block, bool fewest)
{
	const struct cluster *cl = s->v->cl;

	if (s->sp->npools) {
		s->npools = s->sp->npools;
		memcpy(s->pools, s->sp->pool_items, sizeof s->pools);
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
	struct timespec t0, t1, c0, c1;
	int block[MAX_ITEMS], rc = NR_OK;

	memset(st, 0, sizeof *st);
	if (!s)
		return err_oom(e);
	for (int m = 0; m < v->job->nmodels; m++)
		if (v->cl->engine == CLUSTER_ENGINE_BUILTIN && sp->home[m].zero == 1u << ZERO_3) {
			free(s);
			return err_set(e, NR_EINPUT, "pin of model '%s': the built-in engine does not "
				       "run FSDP (zero 3): pin zero0, zero1 or zero2",
				       v->job->models[m].name);
		}
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
	make_sizes(s);
	/* models alike in architecture, stages and pins share their candidates */
	for (int m = 0; m < v->job->nmodels; m++) {
		const struct model *a = &v->job->models[m];
		s->twin[m] = m;
		for (int k = 0; k < m && s->twin[m] == m; k++) {
			const struct model *b = &v->job->models[k];
			if (!memcmp(&a->arch, &b->arch, sizeof a->arch) &&
			    !memcmp(a->stages, b->stages, sizeof a->stages) &&
			    !memcmp(&sp->home[m], &sp->home[k], sizeof sp->home[m]) &&
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
