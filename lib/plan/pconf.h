/* A model-stage's parallel configuration, the unit both the memory and the
 * cost model take.  Ranks are ordered TP fastest, then DP, then PP, as
 * Megatron-Core orders them, so a TP group is consecutive GPUs. */
#ifndef NEREUS_PCONF_H
#define NEREUS_PCONF_H

#include <stdbool.h>

enum recompute { RC_NONE, RC_SELECTIVE, RC_FULL, NRECOMPUTE };
extern const char *const recompute_names[NRECOMPUTE + 1];

struct pconf {
	int tp, pp, dp;
	int mb;              /* micro-batch size, sequences (training, inference) */
	enum recompute rc;   /* activation recompute (training) */
	bool zero;           /* optimizer state sharded over DP (training) */
	bool offload;        /* state kept in host memory between the model's stages */
	bool fsdp;           /* weights and gradients sharded over DP too (FSDP,
			      * ZeRO-3): gathered a layer at a time */
};

static inline int pconf_gpus(const struct pconf *p)
{
	return p->tp * p->pp * p->dp;
}

#endif
