/* The experiment of nereus-run compare: one job, trace and seed under every
 * policy, side by side, with fixed-best and the oracle that know the trace
 * (run/oracle.h); adaptive's gap to the oracle is the controller's score.
 *
 * The simulator predicts every row (compare_predict).  An engine that runs the
 * job for real measures them too (compare_measure): each row on an engine made
 * for it alone, from the same store and seed, fixed-best keeping the plan
 * and the oracle following the schedule the prediction found.  A row whose
 * layout the cluster's engine does not run (its planner refuses the
 * layout's pins: NR_EINPUT) is skipped, the refusal kept as the reason;
 * adaptive, the rows' yardstick, is never skipped: its refusal is the
 * comparison's error. */
#ifndef NEREUS_RUN_COMPARE_H
#define NEREUS_RUN_COMPARE_H

#include <stdint.h>

#include "common/json.h"
#include "run/oracle.h"
#include "run/run.h"
#include "run/sim.h"

enum cmp_kind { CMP_KIND_POLICY, CMP_KIND_FIXED_BEST, CMP_KIND_ORACLE };

struct cmp_row {
	const char *name;
	enum plan_layout policy;
	enum cmp_kind kind;
};

/* The rows, in the order they print: the policies, then fixed-best and the
 * oracle, which know the trace.  The oracle runs last: it knows what every
 * row ran. */
enum { CMP_ADAPTIVE, CMP_FIXED, CMP_FIXED_BEST, CMP_VERL, CMP_VERL_TUNED, CMP_VERL_MEGATRON,
       CMP_OPENRLHF, CMP_OPENRLHF_HYBRID, CMP_ORACLE, CMP_NROWS };
extern const struct cmp_row compare_rows[CMP_NROWS];

/* How a row came out, as the simulator predicted it or as it was measured. */
struct cmp_result {
	bool ran;            /* false: skipped, for the reason in why */
	char why[1100];      /* the refusal, after how many steps when some ran */
	struct run_summary s;
	double tokens;       /* prompt and response tokens of the steps that ran */
	double tokens_s;     /* over the run's total time */
	json_t *doc;         /* its summary document (run_summary_json) */
};

struct cmp_opts {
	const struct job *job;
	const struct cluster *cl;
	const struct coef *k;
	const struct events *ev;  /* NULL: nothing happens */
	long steps, every;
	uint64_t seed;            /* the simulator's noise */
	double noise, min_gain;
	bool price_graph;
	const char *out_dir;      /* NULL: no records, no summaries */
	bool writes;              /* this process writes them (over ranks, rank 0) */
	bool measures;            /* the rows are measured too: only those write records */
};

/* The engine that measures a row: made for it by open, freed by close. */
struct cmp_engine {
	void *arg;
	int (*open)(void *arg, struct engine *eng, struct err *e);
	void (*close)(void *arg);
};

struct compare {
	struct cmp_opts o;
	struct hindsight h;
	struct plan ref;             /* fixed-best's plan */
	struct ran ran[CMP_NROWS];   /* what each row ran, predicted */
	struct ctl_script script;    /* the oracle's dynamic programme */
	const struct plan **plans;
	const struct ctl_script *follow; /* the oracle row's: the shortest */
	double fixed_s, oracle_s;    /* predicted runs */
	struct cmp_result pred[CMP_NROWS];
	struct cmp_result meas[CMP_NROWS];
	/* the row running */
	struct controller ctl;
	struct run run;
	struct sim sim;
};

/* Set up c (large: allocate it statically or on the heap) and find what
 * knowing the trace gives: the segments, their candidates, fixed-best's
 * plan. */
int compare_init(struct compare *c, const struct cmp_opts *o, struct err *e);
void compare_free(struct compare *c);

/* Every row on the simulator: c->pred, the records as out_dir/ROW.jsonl
 * unless the rows are measured. */
int compare_predict(struct compare *c, struct err *e);
/* After compare_predict, every row on an engine ce makes: c->meas, the records
 * as out_dir/ROW.jsonl. */
int compare_measure(struct compare *c, const struct cmp_engine *ce, struct err *e);
/* Each row that ran as out_dir/ROW-summary.json: its summary document with
 * the oracle's total and the row's gap to it, its tokens per second, and
 * when measured the prediction beside. */
int compare_write_summaries(struct compare *c, struct err *e);

/* The row's total over the oracle's, less one; NAN when either did not
 * run or did not finish. */
double compare_oracle_gap(const struct cmp_result *row, const struct cmp_result *oracle);
/* How much more throughput (tokens per second) adaptive has than the row:
 * adaptive's over the row's; NAN when either ran no step. */
double compare_ratio(const struct cmp_result *adaptive, const struct cmp_result *row);

#endif
