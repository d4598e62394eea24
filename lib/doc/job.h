/* The job document: the models of an RL post-training job (their
 * Llama-family architecture and the stages each takes part in) and the PPO
 * batch.  Specified in nereus-job(5). */
#ifndef NEREUS_JOB_H
#define NEREUS_JOB_H

#include <stdbool.h>
#include <stdint.h>

#include "common/err.h"
#include "doc/arch.h"
#include "doc/rlconf.h"

enum stage { STAGE_GEN, STAGE_INF, STAGE_TRAIN, NSTAGES };
enum role { ROLE_ACTOR, ROLE_CRITIC, ROLE_REFERENCE, ROLE_REWARD, NROLES };

#define MAX_MODELS 8
#define MAX_ITEMS (MAX_MODELS + 1) /* a plan's items: the generation engines, the models */
#define NAME_MAX_LEN 64

extern const char *const job_stage_names[NSTAGES + 1]; /* "generation", ... */
extern const char *const job_role_names[NROLES + 1];   /* "actor", ... */


struct model {
	char name[NAME_MAX_LEN];
	enum role role;
	struct arch arch;
	bool stages[NSTAGES]; /* which stages this model runs in */
};

struct response_len {
	double mean, p90;
	long max;
};

struct job {
	char name[NAME_MAX_LEN];
	char algorithm[8];       /* "ppo" or "grpo" */
	int nmodels;
	struct model models[MAX_MODELS];
	long prompts_per_step;
	long samples_per_prompt;
	long prompt_len;         /* tokens */
	struct response_len response;
	int ppo_epochs;
	int mini_batches;        /* optimizer steps per epoch */
	struct rl_config rl;     /* "rl": the algorithm's settings */
	struct data_config data; /* "data": what a real run reads */
};

/* Load a job document (FILE or "-"); relative paths (hf_config, the
 * data's files) resolve against the job file's directory. */
int job_load(struct job *job, const char *file, struct err *e);

/* The model in the job with that name, or NULL. */
const struct model *job_model(const struct job *job, const char *name);
/* Sequences per step: prompts × samples per prompt. */
long job_sequences(const struct job *job);
/* The actor's index (the first model when none is one). */
int job_actor(const struct job *job);
/* Whether the model trains (takes part in the training stage). */
bool model_trainable(const struct model *m);

#endif
