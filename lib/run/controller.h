/* The controller: the part of the runtime that decides which plan runs.
 *
 * Called at step boundaries (every K steps and whenever conditions
 * change), it refits the cost model through a hook, searches the best plan
 * of its policy's space for the conditions of now, and lets plan_decide
 * weigh the gain over the steps left against the transition.  Hysteresis
 * (min_gain) keeps it from flapping; a plan that stops fitting forces a
 * switch; when nothing fits the job pauses until something does.
 *
 * A policy is a restriction of the search space: adaptive searches it all;
 * verl, openrlhf and fixed are the baseline layouts of plan/decide.h, so
 * every policy is judged with the same cost model and the same rules.
 *
 * Searches are memoized on their inputs (GPUs up, slow GPUs, response
 * lengths, headroom, coefficients, the plan running): a boundary where
 * nothing changed costs a lookup, not a search.
 *
 * Transitions are weighed in two passes: plan_decide screens with
 * plan_move's lower bound and the switch's fixed costs (communicators,
 * engines), which is cheap; a switch that passes is priced with the
 * transition graph (charge.h) and must still pay back at that price.  The
 * graph is built only for switches about to happen, once for each pair of
 * plans and conditions. */
#ifndef NEREUS_CONTROLLER_H
#define NEREUS_CONTROLLER_H

#include "plan/baseline.h"
#include "plan/decide.h"
#include "run/charge.h"
#include "run/cond.h"
#include "run/memo.h"

enum ctl_act {
	CTL_KEEP,    /* the plan running stays (or the job stays paused) */
	CTL_START,   /* nothing was running: start the plan (after a pause, or the first) */
	CTL_SWITCH,  /* switch from the plan running to a better one */
	CTL_PAUSE,   /* nothing fits: stop until something does */
};
extern const char *const ctl_act_names[];

struct ctl_stats {
	long replans;      /* decisions taken */
	long searches;     /* plan searches run (the rest were memoized) */
	long switches;     /* CTL_SWITCH, forced ones included */
	long forced;       /* switches forced by a plan that stopped fitting */
	long pauses, starts;
	long charged;      /* transitions priced (switches, and starts after a pause) */
	long by_bound;     /* of which by plan_move's lower bound */
	long built;        /* transition graphs built for them (the rest were remembered) */
	long refits;       /* refits that moved a coefficient by more than refit_tol */
	double seconds;    /* wall-clock time spent deciding, searches included */
	double search_s;   /* of which searching */
	double refit_s;    /* refitting */
	double charge_s;   /* pricing transitions with the transition graph */
	struct switch_cost spent; /* the parts of the transitions made, summed */
};

/* Refit the cost model on what the job did lately: update *k, or leave it.
 * The caller owns the records the hook reads (arg). */
typedef int (*ctl_refit_fn)(void *arg, struct coef *k, struct err *e);

#define CTL_MEMO 4

/* A plan for each stretch of a run, known in advance (compare's oracle,
 * run/oracle.h): from step from[i] on, plans[i] runs; nothing when NULL.
 * The controller follows it, pricing each change as any switch. */
struct ctl_script {
	long steps;          /* the run's length: the step is steps - remaining */
	int n;
	const long *from;    /* rising, from[0] = 0 */
	const struct plan *const *plans;
};

/* A search remembered, under its inputs serialized. */
struct ctl_memo {
	int rc;              /* NR_OK or NR_EINFEASIBLE */
	char why[1024];      /* when infeasible */
	struct plan best;
};

struct controller {
	enum plan_layout policy;
	const char *label;   /* its name in summaries; NULL: the policy's */
	const struct ctl_script *script; /* follow this instead of searching */
	const struct plan *script_cur;   /* the script's plan running */
	double min_gain;     /* hysteresis: the fraction of step time a switch must save */
	int max_staleness;   /* 1: its searches may choose plans one step ahead */
	double refit_tol;    /* a refit moving no coefficient by more than this is ignored */
	bool price_graph;    /* price switches with the transition graph, else the bound */
	struct coef k;       /* the cost model it plans with */
	ctl_refit_fn refit;  /* NULL: plan with k as given */
	void *refit_arg;
	/* fixed: the plan whose pools and TP/PP stay (the first adaptive plan) */
	struct plan ref;
	bool have_ref;
	/* what runs, and where the job's state is */
	bool running;
	struct plan cur;
	struct plan prev;    /* after CTL_SWITCH: the plan that ran before */
	bool have_held;      /* paused after running: held is where the state was */
	struct plan held;
	long epoch;          /* bumped whenever cur changes */
	struct memo memo;    /* of struct ctl_memo, CTL_MEMO at most */
	struct charge charge; /* the switches priced, remembered */
	struct plan scratch[2];
	struct ctl_stats st;
};

struct ctl_out {
	enum ctl_act act;
	struct decision d;   /* CTL_SWITCH and CTL_KEEP with a plan running */
	double transition_s; /* predicted; charged to the run for START (after a pause) and SWITCH */
	struct switch_cost cost; /* its parts */
	char why[1100];      /* what was decided, in words */
};

/* Set up a controller; c is large (several plans): allocate it statically
 * or on the heap. */
void ctl_init(struct controller *c, enum plan_layout policy, double min_gain, const struct coef *k);
void ctl_free(struct controller *c);

/* The controller's name: its label, else its policy's. */
const char *ctl_name(const struct controller *c);

/* The best plan of c's policy for conditions w, searched as a decision
 * searches it (on the cluster as it is and, when GPUs run slow, also
 * without them), with c's coefficients; nothing of c's state changes but
 * its counts.  NR_OK, NR_EINFEASIBLE with the reason in e, or an error. */
int ctl_best(struct controller *c, const struct cond *w, struct plan *best, struct err *e);

/* Whether a plan of the policy fits the job under w (the fixed policy's
 * before it has its first plan: adaptive's), on the GPUs up or, all_up, on
 * every GPU of the cluster: NR_OK, NR_EINFEASIBLE with the shortfall in e
 * (plan_search's, the words nereus-plan uses), or an error. */
int ctl_fits(struct controller *c, const struct cond *w, bool all_up, struct err *e);

/* Decide at a boundary, under conditions w with remaining steps left.  On
 * CTL_START and CTL_SWITCH, c->cur is the plan to run next; on CTL_PAUSE
 * nothing runs.  Returns NR_OK, or NR_EIO (out of memory) / the refit
 * hook's error. */
int ctl_decide(struct controller *c, const struct cond *w, long remaining, struct ctl_out *out,
	       struct err *e);

#endif
