/* The targets (engines.h): a plan as their settings. */
#include "plan/engines.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/text.h"

const char *const target_names[NTARGETS + 1] = { "any", "verl-fsdp", "verl-megatron", "openrlhf",
						 "builtin", NULL };

static int model_of_role(const struct job *j, enum role role)
{
	for (int m = 0; m < j->nmodels; m++)
		if (j->models[m].role == role)
			return m;
	return -1;
}

static int pool_of(const struct plan *p, int item)
{
	for (int i = 0; i < p->npools; i++)
		if (p->pools[i].items >> item & 1u)
			return i;
	return -1;
}

enum target target_verl_workers(const struct job *j, const struct plan *p)
{
	bool whole = true;

	for (int m = 0; m < j->nmodels; m++) {
		if (p->home[m].dp > 1 && p->home[m].zero == ZERO_3)
			return TARGET_VERL_FSDP;
		whole &= pconf_gpus(&p->home[m]) == 1;
	}
	return whole ? TARGET_VERL_FSDP : TARGET_VERL_MEGATRON;
}

/* --- settings ----------------------------------------------------------- */

static void nodes_of(const struct cluster *cl, int gpus, int *nodes, int *per)
{
	*nodes = gpus >= cl->gpus_per_node ? gpus / cl->gpus_per_node : 1;
	*per = gpus >= cl->gpus_per_node ? cl->gpus_per_node : gpus;
}

static const char *yes(bool b)
{
	return b ? "true" : "false";
}

/* The engines' share of a GPU's memory (vLLM's gpu_memory_utilization):
 * what the plan leaves them next to what their pool keeps resident, that
 * is their weights, workspace and KV room, rounded down. */
static double gpu_share(const struct env *v, const struct plan *p)
{
	int gi = pool_of(p, ITEM_GEN);
	double room = cluster_gpu_bytes(v->cl) - (gi >= 0 ? p->resident[gi] : 0);

	return floor(room / (v->cl->gpu.mem_gib * GIB) * 100) / 100;
}

/* verl's keys of one Megatron model under prefix (its megatron block). */
static void verl_megatron(struct sbuf *b, const char *prefix, const struct pconf *c, bool train,
			  bool parallel)
{
	if (parallel) {
		sb_printf(b, "%s.megatron.tensor_model_parallel_size=%d\n", prefix, c->tp);
		sb_printf(b, "%s.megatron.pipeline_model_parallel_size=%d\n", prefix, c->pp);
	}
	sb_printf(b, "%s.megatron.param_offload=%s\n", prefix, yes(c->offload));
	if (!train)
		return;
	sb_printf(b, "%s.megatron.use_distributed_optimizer=%s\n", prefix,
		  yes(c->dp > 1 && c->zero >= ZERO_1));
	sb_printf(b, "%s.megatron.grad_offload=%s\n", prefix, yes(c->offload));
	sb_printf(b, "%s.megatron.optimizer_offload=%s\n", prefix, yes(c->offload));
	if (c->rc == RC_NONE)
		return;
	sb_printf(b, "%s.megatron.override_transformer_config.recompute_granularity=%s\n", prefix,
		  recompute_names[c->rc]);
	if (c->rc == RC_FULL) {
		sb_printf(b, "%s.megatron.override_transformer_config.recompute_method=uniform\n",
			  prefix);
		sb_printf(b, "%s.megatron.override_transformer_config.recompute_num_layers=1\n",
			  prefix);
	}
}

static char *verl_settings(const struct env *v, const struct plan *p, bool megatron)
{
	const struct job *j = v->job;
	struct sbuf b = { 0 };
	int actor = job_actor(j), nodes, per, mini = (int)(j->prompts_per_step / j->mini_batches);
	const struct pconf *a = &p->home[actor];
	const char *strategy = megatron ? "megatron" : "fsdp";

	nodes_of(v->cl, p->pools[pool_of(p, 1 + actor)].ngpus, &nodes, &per);
	if (megatron)
		sb_printf(&b, "--config-name=ppo_megatron_trainer\n");
	sb_printf(&b, "trainer.nnodes=%d\ntrainer.n_gpus_per_node=%d\n", nodes, per);
	sb_printf(&b, "data.train_batch_size=%ld\n", j->prompts_per_step);
	sb_printf(&b, "data.max_prompt_length=%ld\ndata.max_response_length=%ld\n", j->prompt_len,
		  j->response.max);
	sb_printf(&b, "actor_rollout_ref.rollout.n=%ld\n", j->samples_per_prompt);
	sb_printf(&b, "actor_rollout_ref.rollout.tensor_model_parallel_size=%d\n", p->gen.tp);
	sb_printf(&b, "actor_rollout_ref.rollout.gpu_memory_utilization=%.2f\n", gpu_share(v, p));
	sb_printf(&b, "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=%d\n", a->mb);
	sb_printf(&b, "actor_rollout_ref.actor.strategy=%s\n", strategy);
	sb_printf(&b, "actor_rollout_ref.actor.ppo_mini_batch_size=%d\n", mini);
	sb_printf(&b, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=%d\n", a->mb);
	sb_printf(&b, "actor_rollout_ref.actor.ppo_epochs=%d\n", j->ppo_epochs);
	if (megatron) {
		verl_megatron(&b, "actor_rollout_ref.actor", a, true, true);
	} else {
		sb_printf(&b, "actor_rollout_ref.actor.fsdp_config.param_offload=%s\n", yes(a->offload));
		sb_printf(&b, "actor_rollout_ref.actor.fsdp_config.optimizer_offload=%s\n",
			  yes(a->offload));
		sb_printf(&b, "actor_rollout_ref.model.enable_gradient_checkpointing=%s\n",
			  yes(a->rc == RC_FULL));
	}
	for (int m = 0; m < j->nmodels; m++) {
		const struct pconf *c = &p->home[m];
		int pool = pool_of(p, 1 + m);
		switch (j->models[m].role) {
		case ROLE_REFERENCE:
			sb_printf(&b, "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=%d\n",
				  c->mb);
			if (megatron)
				verl_megatron(&b, "actor_rollout_ref.ref", c, false, false);
			else
				sb_printf(&b, "actor_rollout_ref.ref.fsdp_config.param_offload=%s\n",
					  yes(c->offload));
			break;
		case ROLE_CRITIC:
			sb_printf(&b, "critic.strategy=%s\n", strategy);
			sb_printf(&b, "critic.ppo_mini_batch_size=%d\n", mini);
			sb_printf(&b, "critic.ppo_micro_batch_size_per_gpu=%d\n", c->mb);
			if (megatron) {
				verl_megatron(&b, "critic", c, true, true);
				break;
			}
			sb_printf(&b, "critic.model.fsdp_config.param_offload=%s\n", yes(c->offload));
			sb_printf(&b, "critic.model.fsdp_config.optimizer_offload=%s\n",
				  yes(c->offload));
			sb_printf(&b, "critic.model.enable_gradient_checkpointing=%s\n",
				  yes(c->rc == RC_FULL));
			break;
		case ROLE_REWARD:
			sb_printf(&b, "reward_model.enable=true\nreward_model.strategy=%s\n", strategy);
			sb_printf(&b, "reward_model.micro_batch_size_per_gpu=%d\n", c->mb);
			if (megatron)
				verl_megatron(&b, "reward_model", c, false, true);
			else
				sb_printf(&b, "reward_model.model.fsdp_config.param_offload=%s\n",
					  yes(c->offload));
			if (pool != pool_of(p, 1 + actor)) {
				nodes_of(v->cl, p->pools[pool].ngpus, &nodes, &per);
				sb_printf(&b, "reward_model.nnodes=%d\nreward_model.n_gpus_per_node=%d\n",
					  nodes, per);
			}
			break;
		default:
			break;
		}
	}
	return sb_take(&b);
}

static char *openrlhf_settings(const struct env *v, const struct plan *p)
{
	static const char *const flag[NROLES] = { "actor", "critic", "ref", "reward" };
	const struct job *j = v->job;
	struct sbuf b = { 0 };
	int actor = job_actor(j), critic = model_of_role(j, ROLE_CRITIC), ref = -1, reward = -1;
	int nodes, per, zero = ZERO_0, infer_mb = p->home[actor].mb;
	const struct pconf *a = &p->home[actor];

	for (int m = 0; m < j->nmodels; m++) {
		const struct model *md = &j->models[m];
		nodes_of(v->cl, p->pools[pool_of(p, 1 + m)].ngpus, &nodes, &per);
		sb_printf(&b, "--%s.num_nodes %d\n--%s.num_gpus_per_node %d\n", flag[md->role], nodes,
			  flag[md->role], per);
		if (model_trainable(md) && p->home[m].dp > 1)
			zero = p->home[m].zero;
		if (md->role == ROLE_REFERENCE)
			ref = m;
		if (md->role == ROLE_REWARD)
			reward = m;
		if (!model_trainable(md))
			infer_mb = p->home[m].mb;
	}
	/* with every model frozen or on one rank the stage is moot; ZeRO-3
	 * when a frozen model shards its weights */
	for (int m = 0; m < j->nmodels && zero == ZERO_0; m++)
		if (p->home[m].dp > 1 && p->home[m].zero == ZERO_3)
			zero = ZERO_3;
	sb_printf(&b, "--vllm.num_engines %d\n--vllm.tensor_parallel_size %d\n", p->gen.dp,
		  p->gen.tp);
	sb_printf(&b, "--vllm.gpu_memory_utilization %.2f\n", gpu_share(v, p));
	if (p->npools == 1) {
		/* the engines' memory is free while the models run, as the plan
		 * prices it */
		sb_printf(&b, "--train.colocate_all\n--vllm.enable_sleep\n");
	} else {
		if (ref >= 0 && pool_of(p, 1 + ref) == pool_of(p, 1 + actor))
			sb_printf(&b, "--train.colocate_actor_ref\n");
		if (reward >= 0 && critic >= 0 && pool_of(p, 1 + reward) == pool_of(p, 1 + critic))
			sb_printf(&b, "--train.colocate_critic_reward\n");
	}
	sb_printf(&b, "--ds.zero_stage %d\n", zero);
	if (a->tp > 1)
		sb_printf(&b, "--ds.tensor_parallel_size %d\n", a->tp);
	if (a->offload)
		sb_printf(&b, "--ds.adam_offload\n");
	if (ref >= 0 && p->home[ref].offload)
		sb_printf(&b, "--ref.offload\n");
	if (reward >= 0 && p->home[reward].offload)
		sb_printf(&b, "--reward.offload\n");
	if (a->rc == RC_FULL)
		sb_printf(&b, "--actor.gradient_checkpointing_enable\n");
	sb_printf(&b, "--train.micro_batch_size %d\n", a->mb);
	sb_printf(&b, "--train.batch_size %ld\n", job_sequences(j) / j->mini_batches);
	sb_printf(&b, "--train.max_epochs %d\n", j->ppo_epochs);
	sb_printf(&b, "--rollout.batch_size %ld\n", j->prompts_per_step);
	sb_printf(&b, "--rollout.n_samples_per_prompt %ld\n", j->samples_per_prompt);
	sb_printf(&b, "--rollout.micro_batch_size %d\n", infer_mb);
	sb_printf(&b, "--rollout.max_new_tokens %ld\n", j->response.max);
	sb_printf(&b, "--data.max_len %ld\n", j->prompt_len + j->response.max);
	return sb_take(&b);
}

char *target_settings(const struct env *v, const struct plan *p, enum target t)
{
	if (t == TARGET_OPENRLHF)
		return openrlhf_settings(v, p);
	return verl_settings(v, p, t == TARGET_VERL_MEGATRON);
}
