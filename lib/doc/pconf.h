/* A model-stage's parallel configuration, the unit both the memory and the
 * cost model take.  Ranks are ordered TP fastest, then DP, then PP, as
 * Megatron-Core orders them, so a TP group is consecutive GPUs. */
#ifndef NEREUS_PCONF_H
#define NEREUS_PCONF_H

#include <stdbool.h>

enum recompute { RC_NONE, RC_SELECTIVE, RC_FULL, NRECOMPUTE };
extern const char *const pconf_recompute_names[NRECOMPUTE + 1];

/* What data parallelism shards (Rajbhandari et al. 2020), each stage adding
 * to the one before: the optimizer state (fp32 master weights and Adam
 * moments), then the gradients, then the weights themselves (FSDP), which
 * are gathered a unit at a time while they compute.  A frozen model has
 * only weights: ZERO_0 or ZERO_3. */
enum zero_stage { ZERO_0, ZERO_1, ZERO_2, ZERO_3, NZERO_STAGES };
/* "zero0" … "zero3", as pins spell them */
extern const char *const pconf_zero_names[NZERO_STAGES + 1];

struct pconf {
	int tp, pp, dp;
	int mb;               /* micro-batch size, sequences (training, inference) */
	enum recompute rc;    /* activation recompute (training) */
	enum zero_stage zero; /* what DP shards (ZERO_3: FSDP) */
	bool offload;         /* state kept in host memory between the model's stages */
};

static inline int pconf_gpus(const struct pconf *p)
{
	return p->tp * p->pp * p->dp;
}

/* DP ranks each hold 1/dp of the optimizer state, of the gradients, of the
 * weights. */
static inline int pconf_optim_shards(const struct pconf *p)
{
	return p->zero >= ZERO_1 ? p->dp : 1;
}

static inline int pconf_grad_shards(const struct pconf *p)
{
	return p->zero >= ZERO_2 ? p->dp : 1;
}

static inline int pconf_weight_shards(const struct pconf *p)
{
	return p->zero == ZERO_3 ? p->dp : 1;
}

#endif
