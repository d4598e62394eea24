/* The optimizer: AdamW with decoupled weight decay, the gradient norm and
 * its clipping, and the learning-rate schedule.
 *
 * Everything works on flat fp32 buffers: a rank's master weights, Adam m
 * and v, and gradients, with one element offset per piece shared by all
 * four (ENGINE.md: the gradient buffer has the weight buffer's offsets,
 * and without a distributed optimizer the master's are the same).  Which
 * elements decay, and which count towards the gradient norm on this rank,
 * is a list of spans over those buffers, built once from the layout by
 * optim_spans().
 *
 * Weight decay follows OpenRLHF (its get_optimizer_grouped_parameters
 * leaves out names containing "bias" and "norm.weight") and Megatron-LM
 * (no decay for biases and 1-D tensors): the embedding, the attention and
 * MLP matrices, the output layer and the score head decay; RMSNorm weights
 * and q/k/v biases do not.  (verl's FSDP workers decay every parameter;
 * its Megatron workers do as Megatron does, which is the layout we share.)
 *
 * The gradient norm is split so that it sums across ranks: each rank adds
 * the squares of the gradient elements it owns (optim_sumsq over the spans
 * that are not copies), the ranks all-reduce that sum, and
 * optim_clip_scale turns the global sum into the norm and the clip factor,
 * as torch.nn.utils.clip_grad_norm_ does. */
#ifndef NEREUS_OPTIM_H
#define NEREUS_OPTIM_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "doc/rlconf.h"
#include "state/layout.h"


/* The learning rate of optimizer step `step` (0 for the first update).
 * Warm-up, as Megatron-LM counts it: step s < W uses lr · (s + 1) / W, so
 * the first update is not wasted at 0 and step W − 1 reaches the peak.
 * Cosine: with p = (s − W) / (total − W) clamped to [0, 1],
 * lr · (r + (1 − r) · (1 + cos(π p)) / 2), r = min_lr_ratio. */
double optim_lr_at(const struct optim_config *c, long step);

/* A range of elements of the four buffers. */
struct optim_span {
	size_t off, len;
	bool decay;  /* weight decay applies */
	bool copy;   /* another rank owns these elements: left out of the norm */
};

/* Whether a global tensor decays: not when it has one dimension or its
 * name ends in "bias" (see the top of this file). */
bool optim_decays(const struct gtensor *t);

/* The spans of rank (tp_rank, pp_rank, dp_rank)'s buffer of kind: one
 * per piece (layout_pieces), over the box's elements; the vocabulary
 * padding rows after them are left out, so they stay zero.  KIND_WEIGHT
 * for the gradient buffer; KIND_MASTER where a distributed optimizer
 * splits the master, m and v (and the caller brings the gradient shard
 * into the master's offsets).  A piece's copy flag is the layout's, so the
 * squared norms summed over every rank of the model-stage count each
 * element once.  *out is malloc'd (NULL when the rank holds nothing). */
int optim_spans(const struct layout *lo, enum state_kind kind, int tp_rank, int pp_rank,
		int dp_rank, struct optim_span **out, size_t *n, struct err *e);

/* Σ g² over the spans that are not copies, in double: this rank's share of
 * the squared global norm. */
double optim_sumsq(const struct optim_span *s, size_t n, const float *grad);

/* From the squared global norm (summed over ranks): *norm = its square
 * root; the factor to multiply the gradients by, min(1, max / (norm +
 * 1e-6)) as torch's clip_grad_norm_, or 1 when max_norm is 0.  A norm
 * that is not finite is returned as such with a factor of 0: the caller
 * must refuse the step (no NaN may reach the weights). */
double optim_clip_scale(double sumsq, double max_norm, double *norm);

/* g *= scale over the spans. */
void optim_scale(const struct optim_span *s, size_t n, float *grad, double scale);

/* One AdamW update over n elements, as torch.optim.AdamW (amsgrad off):
 * w -= lr·wd·w (when decay); m = β1 m + (1−β1) g; v = β2 v + (1−β2) g²;
 * w -= lr/(1−β1^t) · m / (sqrt(v)/sqrt(1−β2^t) + eps).  t counts updates
 * from 1 (the first update is t = 1). */
void optim_adamw_update(const struct adamw_config *c, double lr, long t, bool decay, size_t n,
		  float *w, float *m, float *v, const float *g);

/* optim_adamw_update over every span of the four buffers. */
void optim_adamw_step(const struct adamw_config *c, double lr, long t, const struct optim_span *s,
		size_t n, float *master, float *m, float *v, const float *grad);

#endif
