/* The baseline layouts: what a user of verl or OpenRLHF runs, and a fixed
 * TP/PP layout, each a restriction of the plan search's space, so that
 * every comparison uses one plan format and one cost model.
 *
 *   verl             one pool with every model and the engines; every model
 *                    on FSDP (TP1, PP1, weights, gradients and optimizer
 *                    sharded); vLLM rollout at TP 2, its default
 *   verl-tuned       verl with the rollout TP the best of 1, 2, 4 and 8
 *   verl-megatron    verl on its Megatron backend: each model's TP and PP
 *                    free, no FSDP
 *   openrlhf         the topology of OpenRLHF's Ray PPO scripts: the actor
 *                    with the reference on one pool, the critic with the
 *                    reward model on another, the vLLM engines on a third
 *                    (half the GPUs, a quarter each for the others), every
 *                    model on ZeRO-3 with activation checkpointing, the
 *                    trained models' Adam offloaded to host memory
 *   openrlhf-hybrid  its hybrid engine: everything on one pool, ZeRO-3,
 *                    every model asleep in host memory between its stages
 *   fixed            a given plan's pools and TP/PP; DP follows the GPUs
 *
 * Recompute where a layout leaves it, micro-batch and offload where a
 * layout does not fix them, are left to the search: anyone running these
 * systems tunes those. */
#ifndef NEREUS_BASELINE_H
#define NEREUS_BASELINE_H

#include "plan/search.h"

enum plan_layout { LAYOUT_ADAPTIVE, LAYOUT_VERL, LAYOUT_VERL_TUNED, LAYOUT_VERL_MEGATRON,
		   LAYOUT_OPENRLHF, LAYOUT_OPENRLHF_HYBRID, LAYOUT_FIXED, NLAYOUTS };
extern const char *const layout_names[NLAYOUTS + 1];

/* Restrict sp to a baseline's layout.  LAYOUT_FIXED needs the current plan
 * (its partition and each model's TP/PP; DP scales to the GPUs up). */
int layout_space(const struct env *v, enum plan_layout l, const struct plan *current,
		 struct space *sp, struct err *e);

/* Apply a pin (search_pin_parse's text) to sp, the space of layout l: a setting
 * the layout leaves free is taken, one it fixes must agree with it, else
 * NR_EINPUT naming both; settings the pin leaves free keep the layout's.
 * Under LAYOUT_ADAPTIVE this is search_pin_parse. */
int layout_pin(const struct job *job, enum plan_layout l, const char *text, struct space *sp,
	       struct err *e);

#endif
