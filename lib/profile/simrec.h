/* Simulated step records, for checking the fit against known truth: plans
 * drawn at random for a job on a cluster, evaluated by the cost and memory
 * models with known ("true") coefficients, each time and peak then
 * perturbed by log-normal noise, a few steps stalled.  The fit's unit
 * test, its benchmark and the example trace examples/traces/steps-8b.jsonl
 * all come from this one generator. */
#ifndef NEREUS_SIMREC_H
#define NEREUS_SIMREC_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "doc/costdoc.h"
#include "doc/steprec.h"

struct env;

struct simrec_opts {
	uint64_t seed;
	long first_step;
	double noise;        /* σ of log-normal noise on every time and peak: 0.05 is 5% */
	double stall_rate;   /* fraction of steps stalled */
	double stall_factor; /* a stalled step's times are this many times longer */
	int max_nodes;       /* nodes a plan may use; 0: every node */
	bool offload;        /* plans may keep a model in host memory between stages */
	bool fsdp;           /* plans may shard weights over DP (FSDP) */
	int max_tp;          /* largest TP; 0: a node's GPUs */
	bool apart;          /* generation engines may have GPUs of their own */
	double switch_rate;  /* fraction of steps with a switch before them */
};

struct simrec;

/* The coefficients the tests, the benchmark and the example trace simulate
 * with: every one of them away from its default, so a fit that keeps a
 * default shows. */
void simrec_truth(struct coef *k);

/* truth: the job, cluster and true coefficients (the job's batch is the
 * centre the steps' batches vary around). */
int simrec_new(struct simrec **s, const struct env *truth, const struct simrec_opts *o,
	       struct err *e);
/* The next step's record (status ok).  NR_EINFEASIBLE when no plan drawn
 * fits the cluster. */
int simrec_next(struct simrec *s, struct step_record *r, struct err *e);
void simrec_free(struct simrec *s);

#endif
