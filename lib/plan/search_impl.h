/* The plan search's private parts, shared by lib/plan/search*.c only: the
 * search's state, the candidate lists and fronts it keeps, and the
 * functions one part calls in another. */
#ifndef NEREUS_SEARCH_IMPL_H
#define NEREUS_SEARCH_IMPL_H

#include "common/mem.h"
#include "plan/search.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#define MAX_SIZES 128
#define MAX_TPS 8 /* engine TPs 1, 2, …, 128 */
#define GRID 64   /* resident amounts the engines' time is sampled at */
#define EPS 1e-9
#define FIRST_PASS 2 /* configurations per model and size in the first pass */
#define FASTEST_PICKS 8 /* se_fastest(): picks of the fastest left before a sweep */
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

/* A configuration's place in an order: by a first and a second number,
 * then by its index, so the order is the same on every machine. */
struct key {
	double first, second;
	int i;
};

/* A partial combination of home configurations for a pool's models. */
struct part {
	double res, trans, ti, tt;
	uint16_t pick[MAX_MODELS];
};

struct parts {
	int n, cap;
	struct part *v;
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
	double (*fastest)[2];  /* [model][size]: se_fastest() */
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
	double handoff[2];     /* the partition's hand-offs, a step: within a node, across */
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

/* Make room for n elements in a growing array of int capacity; past
 * 2^30 of them, which the doubling of an int would overflow, there is no
 * room. */
static inline int reserve(void **v, int *cap, int n, size_t elem)
{
	size_t c = (size_t)*cap;

	if (n > 1 << 30 || mem_grow(v, &c, (size_t)n, elem) < 0)
		return -1;
	*cap = (int)c;
	return 0;
}

/* Make room for one more. */
static inline int grow(void **v, int *cap, int n, size_t elem)
{
	return reserve(v, cap, n + 1, elem);
}

/* search_pins.c */
bool se_pin_ok(const struct pin *p, const struct pconf *c);
/* Whether model m may take c: its pins and the space's target allow it. */
bool se_allowed(const struct search *s, int m, const struct pconf *c);
void se_make_sizes(struct search *s);
bool se_sizes_fit(const struct search *s, const int *size, int k);

/* search_cand.c */
bool se_tp_ok(const struct search *s, const struct arch *a, int t, int z);
bool se_gen_conf(const struct search *s, int i, int z, struct pconf *g);
void se_sort_keys(struct key *v, int n, struct key *tmp);
int se_reserve_keys(struct search *s, int n);
const double *se_fastest(struct search *s, int m, int zi);
struct clist *se_cands(struct search *s, int m, int zi);

/* search_front.c */
double se_gen_alone(struct search *s, int zi, int i, double res, const struct pconf *home);
struct gtab *se_gtab(struct search *s, int zi);
bool se_bounded(struct search *s);
bool se_beyond(const struct search *s, double g, double ti, double tt, double sum);
struct front *se_front(struct search *s, unsigned items, int zi);
bool se_promising(struct search *s, int i, int zi, int left, const double *mx);

#endif
