/* The RL settings of a job: its "rl" object (the algorithms' hyper-
 * parameters, verl's names and defaults, and the optimizers') and its
 * "data" object (what a real run reads: prompts, tokenizer, reward, seed).
 * Specified in nereus-job(5); the engine consumes them. */
#ifndef NEREUS_RLCONF_H
#define NEREUS_RLCONF_H

#include <stdbool.h>
#include <stdint.h>

#include "common/json.h"

enum rl_algorithm { RL_PPO, RL_GRPO };
extern const char *const rlconf_algorithm_names[]; /* "ppo", "grpo", NULL */

enum rl_kl { RL_KL_K1, RL_KL_K3 };
/* The names verl accepts for each: "kl" and "k1"; "low_var_kl" and "k3". */
int rlconf_kl_parse(const char *name, enum rl_kl *out);
extern const char *const rlconf_kl_names[]; /* "k1", "low_var_kl", NULL */

/* torch.optim.AdamW's hyper-parameters (verl's actor defaults in
 * rlconf_optim_defaults). */
struct adamw_config {
	double lr;           /* peak learning rate */
	double beta1, beta2; /* 0.9, 0.999 */
	double eps;          /* 1e-8, added to sqrt(v̂) */
	double weight_decay; /* decoupled: w -= lr · wd · w before the Adam step */
};

enum lr_style { LR_CONSTANT, LR_COSINE };
extern const char *const rlconf_lr_style_names[]; /* "constant", "cosine", NULL */

/* Linear warm-up over warmup_steps optimizer steps, then constant, or a
 * half cosine from the peak down to min_lr_ratio · peak at total_steps. */
struct lr_schedule {
	enum lr_style style;
	long warmup_steps;   /* 0: none */
	long total_steps;    /* optimizer steps of the whole run (cosine only) */
	double min_lr_ratio; /* cosine floor, a fraction of the peak */
};

struct optim_config {
	struct adamw_config adamw;
	struct lr_schedule sched;
	double grad_clip;    /* max global gradient norm; 0 turns clipping off */
};

/* verl's defaults: lr (1e-6 for the actor, 1e-5 for the critic), betas
 * (0.9, 0.999), eps 1e-8, weight decay 0.01, constant schedule without
 * warm-up, grad clip 1.0. */
void rlconf_optim_defaults(struct optim_config *c, double lr);
/* Ranges: lr > 0, betas in [0, 1), eps > 0, weight decay >= 0, warm-up and
 * total steps >= 0, min_lr_ratio in [0, 1], grad_clip >= 0.  NR_EINPUT
 * naming the field. */
int rlconf_optim_check(const struct optim_config *c, struct err *e);

/* The job's "rl" object.  Each comment gives its key (verl's name, with
 * the verl config path), the default (rlconf_defaults) and the range
 * (rlconf_check).  PPO's epochs and mini-batches are the job's "ppo"
 * object (struct job). */
struct rl_config {
	enum rl_algorithm algorithm; /* the job's "algorithm" */
	/* advantages */
	double gamma;            /* "gamma" (algorithm.gamma): 1.0, [0, 1] */
	double lam;              /* "lam" (algorithm.lam): 1.0, [0, 1] */
	bool norm_adv_by_std_in_grpo; /* "norm_adv_by_std_in_grpo": true; false
				       * is Dr. GRPO (no division by the std) */
	/* KL against the reference */
	bool use_kl_in_reward;   /* "use_kl_in_reward": PPO true, GRPO false */
	enum rl_kl kl_penalty;   /* "kl_penalty" (algorithm.kl_penalty): "kl" (k1) */
	double kl_coef;          /* "kl_coef" (algorithm.kl_ctrl.kl_coef, fixed
				  * controller): 0.001, >= 0 */
	bool use_kl_loss;        /* "use_kl_loss" (actor.use_kl_loss): PPO false,
				  * GRPO true */
	enum rl_kl kl_loss_type; /* "kl_loss_type": "low_var_kl" (k3) */
	double kl_loss_coef;     /* "kl_loss_coef": 0.001, >= 0 */
	/* losses */
	double clip_ratio_low;   /* "clip_ratio_low" (actor.clip_ratio_low): 0.2, [0, 1) */
	double clip_ratio_high;  /* "clip_ratio_high": 0.2, >= 0 */
	double clip_ratio_c;     /* "clip_ratio_c" (dual clip): 3.0, > 1 */
	double cliprange_value;  /* "cliprange_value" (critic.cliprange_value): 0.5, >= 0 */
	double entropy_coeff;    /* "entropy_coeff" (actor.entropy_coeff): 0, >= 0 */
	/* optimizers: "actor_optim" and "critic_optim" objects with "lr"
	 * (actor 1e-6, critic 1e-5), "betas" [0.9, 0.999], "eps" 1e-8,
	 * "weight_decay" 0.01, "lr_warmup_steps" 0, "warmup_style"
	 * "constant" or "cosine", "min_lr_ratio" 0.0, "grad_clip" 1.0;
	 * total_steps is set by the trainer to the run's optimizer steps */
	struct optim_config actor_optim, critic_optim;
	/* rollout (actor_rollout_ref.rollout) */
	double temperature;      /* "temperature": 1.0, >= 0 (0: greedy) */
	double top_p;            /* "top_p": 1.0, (0, 1] */
	long top_k;              /* "top_k": -1 (off), -1 or >= 1 */
	/* a supervised warm-up: the first sft_steps steps train the actor on
	 * the prompts' answers (cross-entropy) instead of RL, with sft_optim:
	 * an "sft_optim" object as actor_optim's, each field actor_optim's
	 * unless given (a warm-up commonly runs at a higher learning rate than
	 * the RL after it: at the warm-up's rate, Adam follows RL's noisy
	 * policy gradient away from the warm-up's model) */
	long sft_steps;          /* "sft_steps": 0, >= 0 */
	struct optim_config sft_optim;
};

/* verl's defaults for the algorithm (see each field). */
void rlconf_defaults(struct rl_config *c, enum rl_algorithm a);
/* NR_EINPUT naming the first field out of its range. */
int rlconf_check(const struct rl_config *c, struct err *e);

/* How responses are scored: a rule against each prompt's answer, or the
 * job's reward model. */
enum task_reward { TASK_EXACT_MATCH, TASK_CHAR_MATCH, TASK_REWARD_MODEL };
/* "exact_match", "char_match", "model", NULL: the "reward" values */
extern const char *const rlconf_reward_names[];

#define DATA_PATH_MAX 4096 /* a path the job names, at most */
#define DATA_MAX_STOPS 8    /* "stop_tokens", at most */
#define DATA_STOP_ID_MAX ((1 << 24) - 1) /* a tokenizer.json's ids are at most this */

/* A stop token the job names: an id, or (id -1) a token's text. */
struct data_stop {
	long id;
	char text[128];
};

/* The job's "data" object; paths are relative to the job file's folder
 * as given, and resolved against it here. */
struct data_config {
	char prompts[DATA_PATH_MAX];   /* "prompts": the prompts file, JSON Lines */
	char tokenizer[DATA_PATH_MAX]; /* "tokenizer": a tokenizer.json; "": the byte vocabulary */
	enum task_reward reward;  /* "reward": exact_match */
	uint64_t seed;            /* "seed": 1; every random draw of a run derives from it */
	int nstops;               /* "stop_tokens": more tokens that end a response */
	struct data_stop stops[DATA_MAX_STOPS];
};

/* Read the "rl" object o (NULL: all defaults) at path of d for algorithm
 * a, and the "data" object (NULL: none) resolving paths against job_file's
 * folder.  Errors name FILE:LINE:COL and the field. */
int rlconf_load(const struct jdoc *d, json_t *o, const char *path, enum rl_algorithm a,
		   struct rl_config *c, struct err *e);
int rlconf_data_load(const struct jdoc *d, json_t *o, const char *path, const char *job_file,
		     struct data_config *c, struct err *e);

#endif
