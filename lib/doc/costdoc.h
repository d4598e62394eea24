/* The cost document's coefficients: the few numbers that turn the cost and
 * memory models' analytic terms into seconds and bytes, and what a switch
 * between plans costs besides the bytes it moves.  Defaults are priors
 * from published figures (nereus-cost(5) cites them); nereus-profile fit
 * writes calibrated ones. */
#ifndef NEREUS_COSTDOC_H
#define NEREUS_COSTDOC_H

#include <jansson.h>

#include "common/err.h"
#include "doc/cluster.h"

struct coef {
	double train_eff;      /* achieved fraction of peak FLOP/s, training */
	double infer_eff;      /* forward passes (inference stage, decode compute) */
	double prefill_eff;    /* generation prefill */
	double decode_eff;     /* achieved fraction of HBM bandwidth in decode */
	double intra_eff;      /* achieved fraction of intra-node link bandwidth */
	double inter_eff;      /* inter-node */
	double host_eff;       /* host link */
	double allreduce_lat_s; /* fixed latency of one small collective */
	double microbatch_s;   /* fixed cost of one micro-batch on one pipeline stage */
	double decode_step_s;  /* fixed cost of one decode step (sampling, launches) */
	double stage_s;        /* fixed cost of one model-stage per step */
	double step_s;         /* fixed cost of one step */
	double act_factor;     /* scales the Korthikanti activation terms for Llama */
	double workspace_gib;  /* per GPU: context, communicator buffers, workspace */
	double frag;           /* fragmentation: fraction added to dynamic memory */
	/* what a switch costs besides moving state (nereus-cost(5), SWITCHES) */
	double comm_init_s;    /* creating the job's communicator anew: its GPUs changed */
	double comm_group_s;   /* one communicator a GPU creates from it (TP, PP, DP group) */
	double engine_init_s;  /* re-creating the generation engines */
	double store_gbps;     /* the state store's bandwidth, shared by every reader */
	/* one piece of the actor's weights moved into the generation engines
	 * (nereus-cost(5), MOVE): a message or a copy, its set-up */
	double move_piece_s;
};

#define COEF_FIELDS 20

/* Names in document order, NULL-terminated, and the matching offsets. */
extern const char *const cost_coef_names[COEF_FIELDS + 1];
double *cost_coef_field(struct coef *c, int i);
double cost_coef_get(const struct coef *c, int i);

void cost_coef_defaults(struct coef *c);
/* The priors for a cluster's engine: cost_coef_defaults' for GPU frameworks;
 * for the built-in engine (one C process on CPU cores, nereus-cost(5)),
 * the efficiencies its passes reach against OpenBLAS's sgemm and memcpy,
 * fixed costs of a C process's function calls and allocations instead of
 * a GPU framework's launches and synchronisations, and no workspace or
 * fragmentation. */
void cost_coef_defaults_for(struct coef *c, enum cluster_engine engine);
/* Load the coefficients of a cost document; absent ones keep defaults. */
int cost_load(struct coef *c, const char *file, struct err *e);
/* {"train_eff": ..., ...} */
json_t *cost_coef_to_json(const struct coef *c);

#endif
