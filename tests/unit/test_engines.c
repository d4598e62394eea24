/* Plans as the settings of verl and OpenRLHF, the rules those engines
 * check, and --space searches that keep them.  The expected settings are
 * the engines' own names (verl b178a3cd5's ppo_trainer and
 * ppo_megatron_trainer configs, OpenRLHF 3c3be623's train_ppo_ray flags)
 * with values worked out by hand from the plan and the job. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/engines.h"
#include "plan/search.h"
#include "unit.h"

static struct job job;
static struct cluster cl;
static struct coef k;
static struct env v = { &job, &cl, &k };

static void setup(const char *jobfile, const char *clusterfile)
{
	struct err e;

	cost_coef_defaults(&k);
	if (job_load(&job, jobfile, &e) || cluster_load(&cl, clusterfile, &e)) {
		printf("# %s\n", e.msg);
		unit_failed = 1;
	}
}

static int model(const char *name)
{
	return (int)(job_model(&job, name) - job.models);
}

static unsigned bit(const char *name)
{
	return 1u << (1 + model(name));
}

/* Whether text has line as one of its lines. */
static bool has_line(const char *text, const char *line)
{
	size_t n = strlen(line);

	for (const char *at = text; at && (at = strstr(at, line)); at++)
		if ((at == text || at[-1] == '\n') && at[n] == '\n')
			return true;
	return false;
}

static bool has_reason(const struct target_reasons *r, const char *part)
{
	for (int i = 0; i < r->n; i++)
		if (strstr(r->line[i], part))
			return true;
	return false;
}

static void conf(struct plan *p, const char *name, struct pconf c)
{
	p->home[model(name)] = c;
}

/* verl's FSDP layout on 64 H100s: everything on one pool, ZeRO-3 over the
 * 64 GPUs, rollout TP 2 (verl's default) in 32 engines. */
static void verl_fsdp_plan(struct plan *p)
{
	memset(p, 0, sizeof *p);
	p->npools = 1;
	p->pools[0] = (struct pool){ (1u << (1 + job.nmodels)) - 1, 64 };
	conf(p, "actor", (struct pconf){ 1, 1, 64, 2, RC_FULL, ZERO_3, false });
	conf(p, "critic", (struct pconf){ 1, 1, 64, 2, RC_NONE, ZERO_3, true });
	conf(p, "reference", (struct pconf){ 1, 1, 64, 8, RC_SELECTIVE, ZERO_3, true });
	conf(p, "reward", (struct pconf){ 1, 1, 64, 4, RC_SELECTIVE, ZERO_3, false });
	p->gen = (struct pconf){ 2, 1, 32, 1, RC_NONE, ZERO_0, false };
	CHECK(plan_place(&cl, p));
	plan_evaluate(&v, p);
}

static void test_verl_fsdp_settings(void)
{
	static struct plan p;
	struct target_reasons r;
	char want[96], *text;
	double share;

	setup("examples/jobs/ppo-llama3-8b.json", "examples/clusters/h100-8x8.json");
	verl_fsdp_plan(&p);
	CHECK(engines_verl_workers(&job, &p) == TARGET_VERL_FSDP);
	/* --space names the workers; otherwise the plan's weights decide */
	CHECK(engines_verl_for(TARGET_ANY, &job, &p) == TARGET_VERL_FSDP);
	CHECK(engines_verl_for(TARGET_OPENRLHF, &job, &p) == TARGET_VERL_FSDP);
	CHECK(engines_verl_for(TARGET_VERL_MEGATRON, &job, &p) == TARGET_VERL_MEGATRON);
	CHECK(engines_check(&v, &p, TARGET_VERL_FSDP, &r));
	text = engines_settings(&v, &p, TARGET_VERL_FSDP);
	CHECK(text != NULL);
	if (!text)
		return;
	/* 64 GPUs as 8 nodes of 8; 512 prompts a step, one sample each, in
	 * 4 mini-batches of 128 prompts */
	CHECK(has_line(text, "trainer.nnodes=8"));
	CHECK(has_line(text, "trainer.n_gpus_per_node=8"));
	CHECK(has_line(text, "data.train_batch_size=512"));
	CHECK(has_line(text, "data.max_prompt_length=1024"));
	CHECK(has_line(text, "data.max_response_length=4096"));
	CHECK(has_line(text, "actor_rollout_ref.rollout.n=1"));
	CHECK(has_line(text, "actor_rollout_ref.rollout.tensor_model_parallel_size=2"));
	CHECK(has_line(text, "actor_rollout_ref.actor.strategy=fsdp"));
	CHECK(has_line(text, "actor_rollout_ref.actor.ppo_mini_batch_size=128"));
	CHECK(has_line(text, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2"));
	CHECK(has_line(text, "actor_rollout_ref.actor.fsdp_config.param_offload=false"));
	CHECK(has_line(text, "actor_rollout_ref.actor.fsdp_config.optimizer_offload=false"));
	CHECK(has_line(text, "actor_rollout_ref.model.enable_gradient_checkpointing=true"));
	CHECK(has_line(text, "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8"));
	CHECK(has_line(text, "actor_rollout_ref.ref.fsdp_config.param_offload=true"));
	CHECK(has_line(text, "critic.ppo_mini_batch_size=128"));
	CHECK(has_line(text, "critic.ppo_micro_batch_size_per_gpu=2"));
	CHECK(has_line(text, "critic.model.fsdp_config.param_offload=true"));
	CHECK(has_line(text, "critic.model.fsdp_config.optimizer_offload=true"));
	CHECK(has_line(text, "critic.model.enable_gradient_checkpointing=false"));
	CHECK(has_line(text, "reward_model.enable=true"));
	CHECK(has_line(text, "reward_model.micro_batch_size_per_gpu=4"));
	CHECK(!strstr(text, "megatron") && !strstr(text, "reward_model.nnodes"));
	/* the engines take what the pool leaves them: 80 GiB less 5% headroom
	 * less what the models keep resident, as a share of 80 GiB */
	share = floor((80 * 0.95 * GIB - p.resident[0]) / (80 * GIB) * 100) / 100;
	snprintf(want, sizeof want, "actor_rollout_ref.rollout.gpu_memory_utilization=%.2f", share);
	CHECK(has_line(text, want));
	CHECK(share > 0.5 && share < 0.95);
	free(text);
}

static void test_verl_megatron_settings(void)
{
	static struct plan p;
	struct target_reasons r;
	char *text;

	setup("examples/jobs/ppo-llama3-8b.json", "examples/clusters/h100-8x8.json");
	p.npools = 1;
	p.pools[0] = (struct pool){ (1u << (1 + job.nmodels)) - 1, 64 };
	conf(&p, "actor", (struct pconf){ 4, 2, 8, 1, RC_SELECTIVE, ZERO_1, false });
	conf(&p, "critic", (struct pconf){ 4, 2, 8, 2, RC_FULL, ZERO_0, true });
	conf(&p, "reference", (struct pconf){ 4, 2, 8, 4, RC_SELECTIVE, ZERO_0, false });
	conf(&p, "reward", (struct pconf){ 4, 2, 8, 4, RC_SELECTIVE, ZERO_0, false });
	p.gen = (struct pconf){ 4, 1, 16, 1, RC_NONE, ZERO_0, false };
	CHECK(plan_place(&cl, &p));
	plan_evaluate(&v, &p);
	CHECK(engines_verl_workers(&job, &p) == TARGET_VERL_MEGATRON);
	CHECK(engines_check(&v, &p, TARGET_VERL_MEGATRON, &r));
	text = engines_settings(&v, &p, TARGET_VERL_MEGATRON);
	CHECK(text != NULL);
	if (!text)
		return;
	CHECK(has_line(text, "--config-name=ppo_megatron_trainer"));
	CHECK(has_line(text, "actor_rollout_ref.actor.strategy=megatron"));
	CHECK(has_line(text, "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=4"));
	CHECK(has_line(text, "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2"));
	CHECK(has_line(text, "actor_rollout_ref.actor.megatron.use_distributed_optimizer=true"));
	CHECK(has_line(text, "actor_rollout_ref.actor.megatron.override_transformer_config."
			     "recompute_granularity=selective"));
	CHECK(has_line(text, "actor_rollout_ref.rollout.tensor_model_parallel_size=4"));
	CHECK(has_line(text, "critic.strategy=megatron"));
	CHECK(has_line(text, "critic.megatron.use_distributed_optimizer=false"));
	CHECK(has_line(text, "critic.megatron.param_offload=true"));
	CHECK(has_line(text, "critic.megatron.optimizer_offload=true"));
	CHECK(has_line(text, "critic.megatron.override_transformer_config.recompute_granularity=full"));
	CHECK(has_line(text, "critic.megatron.override_transformer_config.recompute_method=uniform"));
	CHECK(has_line(text, "critic.ppo_micro_batch_size_per_gpu=2"));
	/* the reference runs in the actor's processes: no TP of its own */
	CHECK(!strstr(text, "ref.megatron.tensor_model_parallel_size"));
	CHECK(!strstr(text, "fsdp_config") && !strstr(text, "enable_gradient_checkpointing"));
	free(text);
}

/* OpenRLHF's train_ppo_llama_ray.sh topology: the engines on half the
 * GPUs, the actor with the reference and the critic with the reward model
 * on a quarter each; ZeRO-3, Adam offload, gradient checkpointing. */
static void openrlhf_plan(struct plan *p)
{
	memset(p, 0, sizeof *p);
	p->npools = 3;
	p->pools[0] = (struct pool){ 1u, 32 };
	p->pools[1] = (struct pool){ bit("actor") | bit("reference"), 16 };
	p->pools[2] = (struct pool){ bit("critic") | bit("reward"), 16 };
	conf(p, "actor", (struct pconf){ 1, 1, 16, 4, RC_FULL, ZERO_3, true });
	conf(p, "critic", (struct pconf){ 1, 1, 16, 4, RC_FULL, ZERO_3, true });
	conf(p, "reference", (struct pconf){ 1, 1, 16, 8, RC_SELECTIVE, ZERO_3, false });
	conf(p, "reward", (struct pconf){ 1, 1, 16, 8, RC_SELECTIVE, ZERO_3, false });
	p->gen = (struct pconf){ 2, 1, 16, 1, RC_NONE, ZERO_0, false };
	CHECK(plan_place(&cl, p));
	plan_evaluate(&v, p);
}

static void test_openrlhf_settings(void)
{
	static struct plan p;
	struct target_reasons r;
	char *text;

	setup("examples/jobs/ppo-llama3-8b.json", "examples/clusters/h100-8x8.json");
	openrlhf_plan(&p);
	CHECK(engines_check(&v, &p, TARGET_OPENRLHF, &r));
	for (int i = 0; i < r.n; i++)
		printf("# %s\n", r.line[i]);
	text = engines_settings(&v, &p, TARGET_OPENRLHF);
	CHECK(text != NULL);
	if (!text)
		return;
	CHECK(has_line(text, "--actor.num_nodes 2"));
	CHECK(has_line(text, "--actor.num_gpus_per_node 8"));
	CHECK(has_line(text, "--ref.num_nodes 2"));
	CHECK(has_line(text, "--critic.num_nodes 2"));
	CHECK(has_line(text, "--reward.num_gpus_per_node 8"));
	CHECK(has_line(text, "--vllm.num_engines 16"));
	CHECK(has_line(text, "--vllm.tensor_parallel_size 2"));
	CHECK(has_line(text, "--train.colocate_actor_ref"));
	CHECK(has_line(text, "--train.colocate_critic_reward"));
	CHECK(!strstr(text, "--train.colocate_all"));
	CHECK(has_line(text, "--ds.zero_stage 3"));
	CHECK(has_line(text, "--ds.adam_offload"));
	CHECK(has_line(text, "--actor.gradient_checkpointing_enable"));
	CHECK(has_line(text, "--train.micro_batch_size 4"));
	/* a mini-batch is 512 sequences over 4 optimizer steps */
	CHECK(has_line(text, "--train.batch_size 128"));
	CHECK(has_line(text, "--rollout.batch_size 512"));
	CHECK(has_line(text, "--rollout.n_samples_per_prompt 1"));
	CHECK(has_line(text, "--rollout.micro_batch_size 8"));
	/* nothing else resident on the engines' pool */
	CHECK(has_line(text, "--vllm.gpu_memory_utilization 0.95"));
	free(text);
}

/* Each rule an engine checks, and every reason at once. */
static void test_reasons(void)
{
	static struct plan p;
	struct target_reasons r;

	setup("examples/jobs/ppo-llama3-8b.json", "examples/clusters/h100-8x8.json");
	/* TP with ZeRO-3: no verl workers run it */
	verl_fsdp_plan(&p);
	p.home[model("actor")].tp = 2;
	p.home[model("actor")].dp = 32;
	CHECK(engines_verl_workers(&job, &p) == TARGET_VERL_FSDP);
	CHECK(!engines_check(&v, &p, TARGET_VERL_FSDP, &r));
	CHECK(r.n == 1 && has_reason(&r, "actor runs at tp 2, pp 1 with ZeRO-3; verl's FSDP"));
	/* and Megatron's workers no ZeRO-3 */
	CHECK(!engines_check(&v, &p, TARGET_VERL_MEGATRON, &r));
	CHECK(has_reason(&r, "critic runs at ZeRO-3; verl's Megatron workers have no ZeRO-3"));
	/* a rollout TP vLLM refuses */
	verl_fsdp_plan(&p);
	p.gen.tp = 3;
	CHECK(!engines_check(&v, &p, TARGET_VERL_FSDP, &r));
	CHECK(has_reason(&r, "the rollout's tp 3 does not divide the actor's 32 attention heads"));
	CHECK(has_reason(&r, "the rollout's tp 3 and the actor's 8 key/value heads"));
	/* micro-batches that do not fill a rank's share: 128 / 64 = 2 < 4 */
	verl_fsdp_plan(&p);
	p.home[model("critic")].mb = 4;
	CHECK(!engines_check(&v, &p, TARGET_VERL_FSDP, &r));
	CHECK(r.n == 1 && has_reason(&r, "critic: 2 sequences per data-parallel rank are not a "
				     "whole number of micro-batches of 4"));
	/* a mini-batch of 24 sequences over 64 ranks leaves some with none */
	job.prompts_per_step = 96;
	verl_fsdp_plan(&p);
	CHECK(!engines_check(&v, &p, TARGET_VERL_FSDP, &r));
	CHECK(r.n == 2 && has_reason(&r, "actor: a mini-batch of 24 sequences over 64 "
				     "data-parallel ranks leaves some with none"));
	/* and 90 prompts do not make 4 mini-batches */
	job.prompts_per_step = 90;
	CHECK(!engines_check(&v, &p, TARGET_VERL_FSDP, &r));
	CHECK(r.n == 1 && has_reason(&r, "90 prompts do not split into 4 mini-batches"));
	job.prompts_per_step = 512;
	/* OpenRLHF's pools under verl, and its shared flags */
	openrlhf_plan(&p);
	CHECK(!engines_check(&v, &p, TARGET_VERL_FSDP, &r));
	CHECK(has_reason(&r, "the rollout and critic are on a pool apart from the actor"));
	CHECK(has_reason(&r, "critic and reward share a pool apart from the actor"));
	p.home[model("critic")].mb = 2;
	p.home[model("reward")].offload = true;
	p.home[model("reference")].zero = ZERO_0;
	CHECK(!engines_check(&v, &p, TARGET_OPENRLHF, &r));
	CHECK(r.n == 2);
	CHECK(has_reason(&r, "actor and critic run micro-batches of 4 and 2; OpenRLHF has one "
			 "--train.micro_batch_size"));
	CHECK(has_reason(&r, "reference runs at ZeRO-0 beside trained models at ZeRO-3"));
	/* the engines beside the actor alone */
	openrlhf_plan(&p);
	p.npools = 2;
	p.pools[0].items |= bit("actor") | bit("reference");
	p.pools[1] = p.pools[2];
	CHECK(!engines_check(&v, &p, TARGET_OPENRLHF, &r));
	CHECK(has_reason(&r, "the rollout shares a pool with actor and reference; OpenRLHF"));
	/* Megatron: the models beside the actor run in its processes */
	verl_fsdp_plan(&p);
	for (int m = 0; m < job.nmodels; m++)
		p.home[m] = (struct pconf){ 2, 1, 32, 1, RC_FULL, ZERO_1, false };
	p.home[model("reference")] = (struct pconf){ 1, 1, 64, 1, RC_SELECTIVE, ZERO_0, false };
	CHECK(engines_verl_workers(&job, &p) == TARGET_VERL_MEGATRON);
	CHECK(!engines_check(&v, &p, TARGET_VERL_MEGATRON, &r));
	CHECK(r.n == 1 && has_reason(&r, "reference runs at tp 1, pp 1 beside the actor at tp 2"));
	/* the built-in engine runs FSDP too */
	verl_fsdp_plan(&p);
	CHECK(engines_check(&v, &p, TARGET_BUILTIN, &r));
}

/* What the space takes of one configuration; on one rank every ZeRO stage
 * is the same. */
static void test_runs_conf(void)
{
	struct target_shared sh = { -1, -1, -1, -1, -1, -1, -1 };
	int a;

	setup("examples/jobs/ppo-llama3-8b.json", "examples/clusters/h100-8x8.json");
	a = model("actor");
	CHECK(engines_runs_conf(&job, TARGET_VERL_FSDP, &sh, a,
			       &(struct pconf){ 1, 1, 32, 1, RC_FULL, ZERO_3, false }));
	CHECK(!engines_runs_conf(&job, TARGET_VERL_FSDP, &sh, a,
				&(struct pconf){ 1, 1, 32, 1, RC_FULL, ZERO_2, false }));
	CHECK(!engines_runs_conf(&job, TARGET_VERL_FSDP, &sh, a,
				&(struct pconf){ 1, 1, 32, 1, RC_SELECTIVE, ZERO_3, false }));
	CHECK(!engines_runs_conf(&job, TARGET_VERL_MEGATRON, &sh, a,
				&(struct pconf){ 2, 1, 8, 1, RC_FULL, ZERO_3, false }));
	CHECK(engines_runs_conf(&job, TARGET_VERL_MEGATRON, &sh, a,
			       &(struct pconf){ 8, 1, 1, 1, RC_FULL, ZERO_0, false }));
	CHECK(engines_runs_conf(&job, TARGET_BUILTIN, &sh, a,
			       &(struct pconf){ 1, 1, 8, 1, RC_FULL, ZERO_3, false }));
	/* 128 sequences of a mini-batch over 256 ranks */
	CHECK(!engines_runs_conf(&job, TARGET_OPENRLHF, &sh, a,
				&(struct pconf){ 1, 1, 256, 1, RC_FULL, ZERO_3, false }));
	CHECK(engines_runs_conf(&job, TARGET_ANY, &sh, a,
			       &(struct pconf){ 1, 1, 256, 1, RC_SELECTIVE, ZERO_3, false }));
	/* what a variant fixes for every model */
	sh.zero = ZERO_3;
	sh.infer_mb = 4;
	CHECK(engines_runs_conf(&job, TARGET_OPENRLHF, &sh, model("reference"),
			       &(struct pconf){ 1, 1, 8, 4, RC_SELECTIVE, ZERO_3, false }));
	CHECK(!engines_runs_conf(&job, TARGET_OPENRLHF, &sh, model("reference"),
				&(struct pconf){ 1, 1, 8, 4, RC_SELECTIVE, ZERO_0, false }));
	CHECK(!engines_runs_conf(&job, TARGET_OPENRLHF, &sh, model("reference"),
				&(struct pconf){ 1, 1, 8, 2, RC_SELECTIVE, ZERO_3, false }));
}

static bool search(enum target t, bool exhaustive, struct plan *p)
{
	struct space sp;
	struct search_stats st;
	struct err e;

	search_space_init(&sp);
	sp.target = t;
	strcpy(p->layout, engines_names[t]);
	return plan_search(&v, &sp, exhaustive, NULL, p, &st, &e) == NR_OK;
}

/* A --space search finds a plan its engine runs, with its rollout TP its
 * own choice, and the fast search agrees with the exhaustive one. */
static void test_space(void)
{
	static struct plan p, full;
	struct target_reasons r;

	setup("examples/jobs/ppo-llama3-8b.json", "examples/clusters/h100-8x8.json");
	for (int t = TARGET_VERL_FSDP; t < NTARGETS; t++) {
		CHECK(search((enum target)t, false, &p));
		CHECK(engines_check(&v, &p, (enum target)t, &r));
		for (int i = 0; i < r.n; i++)
			printf("# %s: %s\n", engines_names[t], r.line[i]);
	}
	/* 24 sequences a mini-batch: verl's FSDP workers train on a number
	 * of GPUs that divides 24, never 64 (the reward model may take the
	 * rest) */
	job.prompts_per_step = 96;
	CHECK(search(TARGET_VERL_FSDP, false, &p));
	CHECK(engines_check(&v, &p, TARGET_VERL_FSDP, &r));
	for (int i = 0; i < p.npools; i++)
		CHECK(!(p.pools[i].items & bit("actor")) || 24 % p.pools[i].ngpus == 0);
	job.prompts_per_step = 512;
	setup("examples/jobs/grpo-qwen-1.5b.json", "examples/clusters/h100-1x4.json");
	for (int t = TARGET_VERL_FSDP; t < NTARGETS; t++) {
		bool fast = search((enum target)t, false, &p);
		CHECK(fast == search((enum target)t, true, &full));
		CHECK(!fast || fabs(p.step_time - full.step_time) <= 1e-9 * full.step_time);
		CHECK(!fast || engines_check(&v, &p, (enum target)t, &r));
	}
}

int main(void)
{
	RUN(test_verl_fsdp_settings);
	RUN(test_verl_megatron_settings);
	RUN(test_openrlhf_settings);
	RUN(test_reasons);
	RUN(test_runs_conf);
	RUN(test_space);
	return UNIT_END();
}
