/* The engines users run a plan on, as targets: what each runs (the rules
 * it checks) and a plan as its settings.  This file owns that knowledge;
 * nereus-plan --format checks a plan against its rules and prints it as
 * its settings.
 *
 *   verl-fsdp      verl's ppo_trainer: FSDP workers (weights, gradients
 *                  and optimizer state sharded over every GPU, no TP, no
 *                  PP), the actor, its rollout and the reference on one
 *                  pool with the critic; the reward model there or alone
 *   verl-megatron  verl's ppo_megatron_trainer: TP and PP, no ZeRO-3 (the
 *                  distributed optimizer shards the optimizer state); the
 *                  models colocated with the actor run in its processes,
 *                  at its TP and PP
 *   openrlhf       OpenRLHF's train_ppo_ray: DeepSpeed without PP, one
 *                  ZeRO stage, Adam offload, checkpointing and training
 *                  micro-batch for the trained models; the engines alone
 *                  or everything on one pool; the actor beside the
 *                  reference and the critic beside the reward model
 *   builtin        nereus-run's built-in engine: no ZeRO-3
 *
 * Names and rules are read from verl at commit b178a3cd5 (2026-01-29) and
 * OpenRLHF at 3c3be623 (2026-08-13); nereus-plan(1) says which. */
#ifndef NEREUS_ENGINES_H
#define NEREUS_ENGINES_H

#include "plan/plan.h"

enum target { TARGET_ANY, TARGET_VERL_FSDP, TARGET_VERL_MEGATRON, TARGET_OPENRLHF,
	      TARGET_BUILTIN, NTARGETS };
extern const char *const target_names[NTARGETS + 1]; /* "any", "verl-fsdp", … */

#define TARGET_MAX_REASONS 24

struct target_reasons {
	int n;
	char line[TARGET_MAX_REASONS][240];
};

/* Every reason target t cannot run plan p, into r; true when it can. */
bool target_check(const struct env *v, const struct plan *p, enum target t,
		  struct target_reasons *r);
/* The verl workers a plan needs: FSDP when a model shards its weights over
 * DP (or every model runs on one GPU), else Megatron. */
enum target target_verl_workers(const struct job *j, const struct plan *p);
/* Plan p as target t's settings, one a line, a malloc'd string (NULL out
 * of memory): verl's Hydra overrides (t a verl target) or OpenRLHF's
 * flags.  p must pass target_check. */
char *target_settings(const struct env *v, const struct plan *p, enum target t);

#endif
