/* The cost model: seconds per model-stage per step from analytic terms
 * (FLOPs, bytes moved, collective volumes, pipeline bubbles, decode memory
 * traffic) times the calibrated coefficients of struct coef. */
#ifndef NEREUS_COST_H
#define NEREUS_COST_H

#include <stdbool.h>

#include "doc/cluster.h"
#include "doc/costdoc.h"
#include "doc/job.h"
#include "plan/memory.h"
#include "doc/pconf.h"

/* What every cost and memory question needs. */
struct env {
	const struct job *job;
	const struct cluster *cl;
	const struct coef *k;
};

struct stime {
	double compute;   /* FLOPs or, for decode, the memory-bound step time */
	double comm;      /* TP, DP and PP communication */
	double bubble;    /* pipeline bubble */
	double overhead;  /* fixed per-stage, per-micro-batch and per-decode-step costs */
	double move;      /* moving weights into this layout (actor generation) */
	double total;
	double concurrency; /* generation: sequences an engine's KV cache holds at once */
};

/* Effective per-GPU bandwidth in bytes/s of the links a group spanning
 * span consecutive GPUs uses (intra-node when it fits in a node). */
double cost_link_bw(const struct env *v, int span);
double cost_host_bw(const struct env *v);

/* The recompute choice as the time model tells them apart: selective
 * recompute redoes only what flash attention recomputes anyway, so it takes
 * the time no recompute takes; full recompute adds a forward pass.  Two
 * configurations alike but for recompute, alike here, take the same time
 * in every stage. */
enum recompute cost_rc(enum recompute rc);
/* Training: ppo_epochs passes over the step's tokens, with an optimizer
 * step (and DP gradient sync) per mini-batch. */
void cost_train(const struct env *v, const struct arch *a, const struct pconf *c,
		struct stime *t);
/* Forward passes over the step's tokens (log-probs, values, rewards). */
void cost_infer(const struct env *v, const struct arch *a, const struct pconf *c,
		struct stime *t);
/* The same, sh being mem_shape_of(a, c->tp, c->pp) or mem_shape_for(a, c). */
void cost_train_at(const struct env *v, const struct arch *a, const struct mem_shape *sh,
		   const struct pconf *c, struct stime *t);
void cost_infer_at(const struct env *v, const struct arch *a, const struct mem_shape *sh,
		   const struct pconf *c, struct stime *t);
/* Lower bounds of cost_train and cost_infer (offload moves included) for
 * every configuration of a on gpus GPUs: what a search can know of a pool
 * size without costing its configurations. */
double cost_train_floor(const struct env *v, const struct arch *a, int gpus);
double cost_infer_floor(const struct env *v, const struct arch *a, int gpus);
/* Generation: prefill plus decode steps, as many as a paged KV pool of
 * kv_bytes per GPU (mem_kv_fill) needs for the batch's length distribution,
 * and never fewer than the longest response.  Returns false when the pool
 * cannot hold one sequence at its longest. */
bool cost_gen(const struct env *v, const struct arch *a, const struct pconf *c,
	      double kv_bytes, struct stime *t);
/* The actor's weights moved from training layout train into engines laid
 * out as gen, as the transition graph moves them (nereus-cost(5), MOVE):
 * each GPU of the engines receives, for every weight tensor, one piece
 * from each training shard its own shard overlaps (a copy when its own
 * GPU holds that shard: same_gpus), each piece a message or a copy. */
struct move_parts {
	double pieces, bytes;  /* over every GPU of the engines */
	/* the GPU that takes longest: its pieces, and the seconds its bytes
	 * take over the links and, copied from its own shard, in memory */
	double crit_pieces, crit_s;
};
void cost_move_parts(const struct env *v, const struct arch *a, const struct pconf *train,
		     const struct pconf *gen, bool same_gpus, struct move_parts *out);
/* The move's seconds: the slowest GPU's pieces at move_piece_s each, and
 * its bytes. */
double cost_move(const struct env *v, const struct arch *a, const struct pconf *train,
		 const struct pconf *gen, bool same_gpus);
/* Seconds to hand bytes that one pool computed in a stage to the other
 * pools at the stage's end, over the links of a job spanning span GPUs:
 * one broadcast from the pool's first GPU (nereus-cost(5), HAND-OFFS). */
double cost_handoff(const struct env *v, double bytes, int span);
/* A step's stages with generation one step behind (staleness 1), on a
 * pool of its own: generation of the next step runs while this one's
 * inference and training do, so the step takes the longer of the two,
 * then the actor's move into generation, which waits for training. */
double cost_stale_step(double gen, double inf_train, double move);
/* Seconds to move bytes per GPU to host memory and back. */
double cost_offload(const struct env *v, double bytes);

#endif
