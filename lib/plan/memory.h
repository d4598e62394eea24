/* The memory model: bytes per GPU for one model-stage under a parallel
 * configuration, term by term, so each term can be checked and shown.
 * Every formula is in nereus-plan(1), MEMORY MODEL, with its source.
 *
 * Notation: s sequence length, b micro-batch, h hidden, a query heads, g
 * KV heads, d head dim, F ffn, V_p padded vocabulary, e the model's dtype
 * bytes, t TP, p PP, L layers.  The worst pipeline stage is reported (the
 * first holds the embedding and the most in-flight micro-batches, the last
 * the output layer and logits).
 *
 * The mem_ functions but the mem_builtin_ ones model the frameworks of a
 * cluster whose "engine" is "megatron": Megatron-LM, FSDP (verl's
 * default workers) or DeepSpeed (OpenRLHF) training, a paged engine
 * generating.  None of them chunks the output layer: a micro-batch's
 * logits are materialised whole.  The built-in engine, which does chunk
 * them, has its own terms below. */
#ifndef NEREUS_MEMORY_H
#define NEREUS_MEMORY_H

#include "doc/costdoc.h"
#include "doc/job.h"
#include "doc/pconf.h"

struct mem {
	double weights;    /* weights in the model's dtype (gathered FSDP units included) */
	double grads;      /* fp32 gradients (training), and under FSDP the unsharded
			    * gradient of the unit being reduced */
	double master;     /* fp32 master weights (training) */
	double adam;       /* Adam m and v, fp32 (training) */
	double act;        /* activations kept for backward, or one layer's forward */
	double logits;     /* the output layer's logits, upcast, log-softmax, gradient */
	double kv;         /* generation KV cache */
	double workspace;  /* calibrated fixed workspace */
	double frag;       /* fragmentation margin on the dynamic terms */
	double total;
};

/* Parameters held by one GPU of the worst pipeline stage. */
double mem_stage_params(const struct arch *a, int tp, int pp);
/* What a layout's TP and PP decide of a model's memory whatever else it
 * does (its dtype included): the parameters one TP rank holds on the
 * first and on the last pipeline stage, and the largest two neighbouring
 * units ZeRO-3 gathers there (see mem_gathered); and, once
 * mem_shape_batch has set a micro-batch size, the activations and logits
 * of such a micro-batch.  The functions below compute all that
 * themselves; their _at twins take it from a caller that weighs many
 * configurations of one layout. */
struct mem_shape {
	int tp, pp;
	double layers;        /* layers on the worst pipeline stage */
	double first, last;   /* parameters per TP rank, first and last stage */
	double stage;         /* the more of the two: mem_stage_params */
	double ufirst, ulast; /* parameters of the gathered units there */
	double gfirst, glast; /* and of the largest unit there (mem_unsharded_grad) */
	double params;        /* the whole model's: arch_params */
	int mb;               /* the micro-batch size of what follows; 0 none */
	double act[NRECOMPUTE]; /* mem_layer_act at the longest sequence */
	double logits[2];     /* mem_logits there, without and with gradients */
};
void mem_shape_of(const struct arch *a, int tp, int pp, struct mem_shape *out);
/* The shape c's own terms need: the gathered units only under ZeRO-3. */
void mem_shape_for(const struct arch *a, const struct pconf *c, struct mem_shape *out);
/* Set sh's micro-batch terms for micro-batches of mb sequences. */
void mem_shape_batch(const struct job *job, const struct arch *a, int mb, struct mem_shape *sh);
/* Activation bytes one layer keeps for backward for one micro-batch
 * (before act_factor): e·s·b·(6h + 2gd + 3F)/t with sequence parallelism,
 * plus FlashAttention's fp32 log-sum-exp without recompute; the layer's
 * input alone with full recompute. */
double mem_layer_act(const struct arch *a, double s, double b, int tp, enum recompute rc);
/* Logit bytes of one micro-batch of b sequences of s tokens, all s·b
 * tokens' at once. */
double mem_logits(const struct arch *a, double s, double b, int tp, bool grad);
/* Weights FSDP holds gathered on the worst stage: the largest two
 * neighbouring units (embedding, each layer, final norm with the output
 * layer), the one computing and the one prefetched. */
double mem_gathered(const struct arch *a, const struct pconf *c);
/* The gradient FSDP holds unsharded on the worst stage while it reduces
 * it: the largest unit's (a layer, or the embedding, or the final norm
 * with the output layer), in the model's dtype; 0 below ZeRO-3. */
double mem_unsharded_grad(const struct arch *a, const struct pconf *c);

/* Training: weights, grads, optimizer, activations of min(m, p) in-flight
 * micro-batches, logits.  m = micro-batches per mini-batch per replica. */
void mem_train(const struct job *job, const struct arch *a, const struct pconf *c,
	       const struct coef *k, struct mem *out);
/* Forward only: weights, one layer's activations, logits. */
void mem_infer(const struct job *job, const struct arch *a, const struct pconf *c,
	       const struct coef *k, struct mem *out);
/* The same, sh being mem_shape_of(a, c->tp, c->pp) or mem_shape_for(a, c). */
void mem_train_at(const struct job *job, const struct arch *a, const struct mem_shape *sh,
		  const struct pconf *c, const struct coef *k, struct mem *out);
void mem_infer_at(const struct job *job, const struct arch *a, const struct mem_shape *sh,
		  const struct pconf *c, const struct coef *k, struct mem *out);
/* Generation with no KV cache yet: weights and workspace.  The KV pool is
 * whatever the GPU has left; see cost_gen for how it paces decoding. */
void mem_gen_base(const struct arch *a, const struct pconf *c, const struct coef *k,
		  struct mem *out);
/* KV bytes per token per generation GPU (the engines run the actor in its
 * dtype, as the EMUs hold them), and per sequence of ctx tokens. */
double mem_kv_per_token(const struct arch *a, int tp);
double mem_kv_per_seq(const struct arch *a, int tp, double ctx);

/* A paged engine's KV cache (vLLM's PagedAttention): sequences are
 * admitted while the blocks they hold now fit, and the newest is preempted
 * when the running ones need a block that is not free, so the pool is kept
 * full with no room reserved for lengths not reached yet.  For one engine
 * decoding seqs sequences next to kv_room bytes per GPU: */
struct kv_fill {
	double pool;     /* tokens the pool holds */
	double area;     /* Σ over sequences and decode steps of the context held */
	double steps;    /* decode steps: area / pool, never below the longest response */
	double active;   /* sequences decoding at once, on average */
	double ctx;      /* mean context a decoded token attends to (and a
			  * running sequence holds) */
	double held;     /* sequences the pool holds at once at that context,
			  * at most seqs: the engine's concurrency */
	double bytes;    /* KV bytes per GPU in flight on average (area / steps tokens) */
};
/* false when the pool cannot hold one sequence at its longest. */
bool mem_kv_fill(const struct job *job, const struct arch *a, int tp, double seqs,
		 double kv_room, const struct coef *k, struct kv_fill *out);
/* A room (bytes per GPU, fragmentation included) at which an engine's
 * concurrency (kv_fill.held) is held: mem_kv_fill's inverse, as far as
 * anything depends on it. */
double mem_kv_room(const struct job *job, const struct arch *a, int tp, double held,
		   const struct coef *k);

/* The built-in engine (nereus-run --engine builtin; a cluster whose
 * "engine" is "builtin") allocates its own buffers and nothing else, so
 * its terms are those buffers' sizes, to their 64-byte alignment
 * (engine/model.h lays them out):
 * every model held and computed in fp32 whatever its dtype, no
 * workspace and no fragmentation, the activations of its forward and
 * backward as it keeps them, and generation from the actor's own weights
 * (no engine copy) into a KV cache of every sequence at its longest.
 * The engine computes its output layer BUILTIN_HEAD_CHUNK_FLOATS logits
 * at a time (MODEL_HEAD_CHUNK_FLOATS in engine/model.h). */
#define BUILTIN_HEAD_CHUNK_FLOATS (1 << 23)

/* The arch as the built-in engine holds it: fp32. */
struct arch mem_builtin_arch(const struct arch *a);
/* Floats of the built-in engine's activations for one micro-batch of
 * tokens tokens and sequences of up to max_len, on the worst stage (the
 * last, with the output layer) of a TP-tp, PP-pp layout; training keeps
 * every layer for the backward and its gradient buffers.  *head gets the
 * logits' share. */
double mem_builtin_acts(const struct arch *a, double tokens, double max_len, int tp, int pp,
			bool training, double *head);
/* Training and forward-only model-stages on the built-in engine. */
void mem_builtin_train(const struct job *job, const struct arch *a, const struct pconf *c,
		       struct mem *out);
void mem_builtin_infer(const struct job *job, const struct arch *a, const struct pconf *c,
		       struct mem *out);
/* Its generation on each of dp replicas (tp 1) of their share of the
 * job's prompts and sequences: in place, from the actor's resident
 * weights when in_place, else from a copy; prefill activations and the
 * sampler's scratch, each sequence's logits, and the KV cache of every
 * sequence at its longest. */
void mem_builtin_gen(const struct job *job, const struct arch *a, int dp, bool in_place,
		     struct mem *out);

/* State a model keeps on each GPU of its home layout between its stages:
 * trainable models keep their weights, fp32 master and Adam, frozen ones
 * their weights, each sharded over DP as the ZeRO stage says.  0 when
 * offloaded. */
double mem_resident(const struct arch *a, const struct pconf *home, bool trainable);
/* The same, sh as for mem_train_at. */
double mem_resident_at(const struct arch *a, const struct mem_shape *sh,
		       const struct pconf *home, bool trainable);

/* The sequence length memory must hold: prompt plus the longest response. */
double job_max_seq(const struct job *job);
/* Micro-batches per mini-batch per DP replica. */
long job_microbatches(const struct job *job, int dp, int mb);
/* E[r²] of the response lengths r: mean, p90 and max describe a density
 * uniform on [lo, p90] with 90% of the mass and on [p90, max] with 10%, lo
 * chosen to give the mean (clamped to [0, p90]). */
double job_response_sq(const struct job *job);

#endif
