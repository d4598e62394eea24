/* The memory model: bytes per GPU for one model-stage under a parallel
 * configuration, term by term, so each term can be checked and shown.
 *
 * Notation (Korthikanti et al. 2022): s sequence length, b micro-batch,
 * h hidden, a heads, t TP, p PP, L layers.  The worst pipeline stage is
 * reported (the first holds the embedding and the most in-flight
 * micro-batches, the last the output layer and logits). */
#ifndef NEREUS_MEMORY_H
#define NEREUS_MEMORY_H

#include "doc/costdoc.h"
#include "doc/job.h"
#include "plan/pconf.h"

struct mem {
	double weights;    /* bf16 weights in this layout */
	double grads;      /* fp32 gradients (training) */
	double master;     /* fp32 master weights (training) */
	double adam;       /* Adam m and v, fp32 (training) */
	double act;        /* activations kept for backward, or one layer's forward */
	double logits;     /* fp32 logits (and their gradient when training) */
	double kv;         /* generation KV cache */
	double workspace;  /* calibrated fixed workspace */
	double frag;       /* fragmentation margin on the dynamic terms */
	double total;
};

/* Parameters held by one GPU of the worst pipeline stage. */
double mem_stage_params(const struct arch *a, int tp, int pp);
/* Activation bytes of one layer for one micro-batch (before act_factor). */
double mem_layer_act(const struct arch *a, double s, double b, int tp, enum recompute rc);

/* Training: weights, grads, optimizer, activations of min(m, p) in-flight
 * micro-batches, logits.  m = micro-batches per mini-batch per replica. */
void mem_train(const struct job *job, const struct arch *a, const struct pconf *c,
	       const struct coef *k, struct mem *out);
/* Forward only: weights, one layer's activations, logits. */
void mem_infer(const struct job *job, const struct arch *a, const struct pconf *c,
	       const struct coef *k, struct mem *out);
/* Generation with no KV cache yet: weights and workspace.  The KV pool is
 * whatever the GPU has left; see cost_gen for how it paces decoding. */
void mem_gen_base(const struct arch *a, const struct pconf *c, const struct coef *k,
		  struct mem *out);
/* KV bytes per sequence per GPU when holding ctx tokens. */
double mem_kv_per_seq(const struct arch *a, int tp, double ctx);

/* State a model keeps on each GPU of its home layout between its stages:
 * trainable models keep bf16 weights, fp32 master and Adam (sharded over DP
 * when zero, all of it when fsdp); frozen ones their bf16 weights (sharded
 * when fsdp).  0 when offloaded. */
double mem_resident(const struct arch *a, const struct pconf *home, bool trainable);

/* The sequence length memory must hold: prompt plus the longest response. */
double job_max_seq(const struct job *job);
/* Micro-batches per mini-batch per DP replica. */
long job_microbatches(const struct job *job, int dp, int mb);

#endif
