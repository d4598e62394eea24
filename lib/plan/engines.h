/* The engines users run a plan on, as targets: what each runs (the rules
 * it checks) and a plan as its settings.  This file owns that knowledge;
 * the search asks it what a target's space holds, nereus-plan --format
 * prints its settings.
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
extern const char *const engines_names[NTARGETS + 1]; /* "any", "verl-fsdp", … */

/* What every model of a target shares, fixed for one search of its space
 * (-1 free): the Megatron TP and PP of the actor's processes (the models
 * beside it run in them), and OpenRLHF's one ZeRO stage, checkpointing,
 * Adam offload, training and inference micro-batch, and AutoTP size. */
struct target_shared {
	int tp, pp;
	int zero, rc, offload, train_mb, infer_mb;
};

/* Whether target t runs model m in configuration c (its pool being c's
 * GPUs), with the shared settings sh: the search's space. */
bool engines_runs_conf(const struct job *j, enum target t, const struct target_shared *sh, int m,
		      const struct pconf *c);
/* Whether target t runs the generation engines in layout g. */
bool engines_runs_gen(const struct job *j, enum target t, const struct pconf *g);
/* Whether target t places pools of these items (bit 0 the engines, bit
 * 1 + m model m). */
bool engines_places(const struct job *j, enum target t, const unsigned *pools, int npools);
/* Variant i of target t's shared settings into sh: the searches whose
 * union is its space.  false past the last. */
bool engines_variant(const struct job *j, const struct cluster *cl, enum target t, int i,
		    struct target_shared *sh);

#define TARGET_MAX_REASONS 24

struct target_reasons {
	int n;
	char line[TARGET_MAX_REASONS][240];
};

/* Every reason target t cannot run plan p, into r; true when it can. */
bool engines_check(const struct env *v, const struct plan *p, enum target t,
		  struct target_reasons *r);
/* The verl workers a plan needs: FSDP when a model shards its weights over
 * DP (or every model runs on one GPU), else Megatron. */
enum target engines_verl_workers(const struct job *j, const struct plan *p);
/* The verl workers that print plan p: those space names when it names a
 * verl space, else engines_verl_workers'. */
enum target engines_verl_for(enum target space, const struct job *j, const struct plan *p);
/* Plan p as target t's settings, one a line, a malloc'd string (NULL out
 * of memory): verl's Hydra overrides (t a verl target) or OpenRLHF's
 * flags.  p must pass engines_check. */
char *engines_settings(const struct env *v, const struct plan *p, enum target t);

#endif
