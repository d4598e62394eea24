/* The targets (engines.h): their rules, once, for both the search's space
 * (a predicate) and a plan's check (every reason, in words), and a plan
 * as their settings. */
#include "plan/engines.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/text.h"

const char *const engines_names[NTARGETS + 1] = { "any", "verl-fsdp", "verl-megatron", "openrlhf",
						 "builtin", NULL };

/* Add a reason to r (when there is one, and once); false, so a rule can
 * say `ok = why(...)`. */
__attribute__((format(printf, 2, 3)))
static bool why(struct target_reasons *r, const char *fmt, ...)
{
	char line[sizeof r->line[0]];
	va_list ap;

	if (!r || r->n == TARGET_MAX_REASONS)
		return false;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	for (int i = 0; i < r->n; i++)
		if (!strcmp(r->line[i], line))
			return false;
	memcpy(r->line[r->n++], line, sizeof line);
	return false;
}

static bool is_verl(enum target t)
{
	return t == TARGET_VERL_FSDP || t == TARGET_VERL_MEGATRON;
}

/* --- the rules --------------------------------------------------------- */

/* The mini-batch rules of a trained model: its sequences split over the
 * data-parallel ranks, none left with zero, each rank's share a whole
 * number of micro-batches (verl's workers divide ppo_mini_batch_size × n
 * by the DP size and assert it stays above zero and divisible by the
 * micro-batch; DeepSpeed's train_batch_size is micro × accumulation ×
 * world). */
static bool batch_rules(const struct job *j, enum target t, const char *name,
			const struct pconf *c, struct target_reasons *r)
{
	long seqs = job_sequences(j), mb = j->mini_batches, mini;

	if (is_verl(t)) {
		if (j->prompts_per_step % mb)
			return why(r, "%ld prompts do not split into %ld mini-batches of whole prompts "
				   "(verl's ppo_mini_batch_size counts prompts)", j->prompts_per_step, mb);
	} else if (t == TARGET_OPENRLHF) {
		if (seqs % mb)
			return why(r, "%ld sequences do not split into %ld mini-batches "
				   "(--train.batch_size counts sequences)", seqs, mb);
	} else {
		/* the built-in engine splits a mini-batch as evenly as it goes */
		return true;
	}
	mini = seqs / mb;
	if (mini < c->dp)
		return why(r, "%s: a mini-batch of %ld sequences over %d data-parallel ranks leaves "
			   "some with none", name, mini, c->dp);
	if (mini % c->dp)
		return why(r, "%s: a mini-batch of %ld sequences does not split evenly over %d "
			   "data-parallel ranks", name, mini, c->dp);
	if (mini / c->dp % c->mb)
		return why(r, "%s: %ld sequences per data-parallel rank are not a whole number of "
			   "micro-batches of %d", name, mini / c->dp, c->mb);
	return true;
}

/* What target t runs of one model's configuration by itself. */
static bool conf_rules(const struct job *j, enum target t, int m, const struct pconf *c,
		       struct target_reasons *r)
{
	const struct model *md = &j->models[m];
	const char *name = md->name;
	bool train = model_trainable(md), ok = true;
	/* on one DP rank there is nothing to shard: every stage is the same */
	bool sharded = c->dp > 1;

	switch (t) {
	case TARGET_VERL_FSDP:
		if (c->tp > 1 || c->pp > 1)
			ok = why(r, "%s runs at tp %d, pp %d%s; verl's FSDP workers have no tensor or "
				 "pipeline parallelism", name, c->tp, c->pp,
				 sharded && c->zero == ZERO_3 ? " with ZeRO-3" : "");
		if (sharded && c->zero != ZERO_3)
			ok = why(r, "%s runs at ZeRO-%d over %d ranks; verl's FSDP workers shard "
				 "weights, gradients and optimizer state (ZeRO-3)", name, c->zero, c->dp);
		if (train && c->rc == RC_SELECTIVE)
			ok = why(r, "%s recomputes selectively; verl's FSDP workers checkpoint whole "
				 "layers or nothing", name);
		break;
	case TARGET_VERL_MEGATRON:
		if (sharded && c->zero == ZERO_3)
			ok = why(r, "%s runs at ZeRO-3; verl's Megatron workers have no ZeRO-3 (the "
				 "distributed optimizer shards the optimizer state only)", name);
		if (sharded && c->zero == ZERO_2)
			ok = why(r, "%s runs at ZeRO-2; verl's Megatron workers shard the optimizer "
				 "state only (use_distributed_optimizer, ZeRO-1)", name);
		break;
	case TARGET_OPENRLHF:
		if (c->pp > 1)
			ok = why(r, "%s runs at pp %d; OpenRLHF's DeepSpeed models have no pipeline "
				 "parallelism", name, c->pp);
		if (train && c->rc == RC_SELECTIVE)
			ok = why(r, "%s recomputes selectively; OpenRLHF checkpoints whole layers or "
				 "nothing", name);
		break;
	default:
		break;
	}
	if (train && !batch_rules(j, t, name, c, r))
		ok = false;
	return ok;
}

static bool gen_rules(const struct job *j, enum target t, const struct pconf *g,
		      struct target_reasons *r)
{
	const struct arch *a = &j->models[job_actor(j)].arch;
	bool ok = true;

	if (t == TARGET_ANY || t == TARGET_BUILTIN)
		return true;
	/* vLLM splits the query heads over TP, and the key/value heads or
	 * replicates them */
	if (a->heads % g->tp)
		ok = why(r, "the rollout's tp %d does not divide the actor's %d attention heads, "
			 "which vLLM requires", g->tp, a->heads);
	if (a->kv_heads % g->tp && g->tp % a->kv_heads)
		ok = why(r, "the rollout's tp %d and the actor's %d key/value heads: vLLM needs one "
			 "to divide the other", g->tp, a->kv_heads);
	return ok;
}

/* "the rollout, actor and critic": items, for messages. */
static const char *item_names(const struct job *j, unsigned items, char *buf, size_t n)
{
	size_t k = 0;

	buf[0] = '\0';
	for (int i = 0; i <= j->nmodels && k < n; i++) {
		unsigned later = items >> (i + 1);
		if (!(items >> i & 1u))
			continue;
		k += (size_t)snprintf(buf + k, n - k, "%s%s", !k ? "" : later ? ", " : " and ",
				      i == ITEM_GEN ? "the rollout" : j->models[i - 1].name);
	}
	return buf;
}

static unsigned role_items(const struct job *j, enum role role)
{
	unsigned items = 0;

	for (int m = 0; m < j->nmodels; m++)
		if (j->models[m].role == role)
			items |= 1u << (1 + m);
	return items;
}

/* verl: one resource pool holds the actor, its rollout, the reference and
 * the critic; a reward model may have a pool of its own. */
static bool verl_pools(const struct job *j, const unsigned *pools, int n, struct target_reasons *r)
{
	unsigned all = (1u << (1 + j->nmodels)) - 1, actor = 1u << (1 + job_actor(j));
	bool ok = true;
	char names[256];

	for (int i = 0; i < n; i++) {
		unsigned apart = all & ~pools[i] & ~role_items(j, ROLE_REWARD);
		if (!(pools[i] & actor) || !apart)
			continue;
		ok = why(r, "%s %s on a pool apart from the actor; verl places every model but a "
			 "reward model with the actor and its rollout", item_names(j, apart, names,
			 sizeof names), apart & (apart - 1) ? "are" : "is");
	}
	for (int i = 0; i < n; i++)
		if (!(pools[i] & actor) && pools[i] & (pools[i] - 1))
			ok = why(r, "%s share a pool apart from the actor; verl gives only a reward "
				 "model a pool of its own", item_names(j, pools[i], names, sizeof names));
	return ok;
}

/* OpenRLHF: everything on one pool (--train.colocate_all), or the engines
 * alone and each model alone but for the actor with the reference
 * (--train.colocate_actor_ref) and the critic with the reward model
 * (--train.colocate_critic_reward). */
static bool openrlhf_pools(const struct job *j, const unsigned *pools, int n,
			   struct target_reasons *r)
{
	unsigned pair1 = role_items(j, ROLE_ACTOR) | role_items(j, ROLE_REFERENCE);
	unsigned pair2 = role_items(j, ROLE_CRITIC) | role_items(j, ROLE_REWARD);
	bool ok = true;
	char names[256];

	for (int i = 0; i < n; i++) {
		unsigned items = pools[i];
		if (!(items & (items - 1)))
			continue;
		if (items & 1u)
			ok = why(r, "the rollout shares a pool with %s; OpenRLHF colocates its vLLM "
				 "engines only with every model (--train.colocate_all)",
				 item_names(j, items & ~1u, names, sizeof names));
		else if ((items & ~pair1) && (items & ~pair2))
			ok = why(r, "%s share a pool; OpenRLHF colocates only the actor with the "
				 "reference and the critic with the reward model",
				 item_names(j, items, names, sizeof names));
	}
	return ok;
}

static bool pool_rules(const struct job *j, enum target t, const unsigned *pools, int n,
		       struct target_reasons *r)
{
	if (n == 1)
		return true;
	if (is_verl(t))
		return verl_pools(j, pools, n, r);
	if (t == TARGET_OPENRLHF)
		return openrlhf_pools(j, pools, n, r);
	return true;
}

/* Whether c keeps the settings sh fixes for all models. */
static bool shared_ok(const struct job *j, enum target t, const struct target_shared *sh, int m,
		      const struct pconf *c)
{
	const struct model *md = &j->models[m];
	bool moot = c->dp == 1;

	if (t == TARGET_VERL_MEGATRON)
		return (sh->tp < 0 || c->tp == sh->tp) && (sh->pp < 0 || c->pp == sh->pp);
	if (t != TARGET_OPENRLHF)
		return true;
	if (sh->tp >= 0 && c->tp != sh->tp)
		return false;
	if (!model_trainable(md))
		return (sh->zero < 0 || moot || (int)c->zero == (sh->zero == ZERO_3 ? ZERO_3 : ZERO_0)) &&
		       (sh->infer_mb < 0 || c->mb == sh->infer_mb);
	/* OpenRLHF asserts the step's sequences, in rollout micro-batches (the
	 * frozen models', else the actor's own), are no fewer than the
	 * actor's DP ranks */
	if (md->role == ROLE_ACTOR &&
	    job_sequences(j) / (sh->infer_mb > 0 ? sh->infer_mb : c->mb) < c->dp)
		return false;
	return (sh->zero < 0 || moot || (int)c->zero == sh->zero) &&
	       (sh->rc < 0 || (int)c->rc == sh->rc) &&
	       (sh->offload < 0 || (int)c->offload == sh->offload) &&
	       (sh->train_mb < 0 || c->mb == sh->train_mb);
}

bool engines_runs_conf(const struct job *j, enum target t, const struct target_shared *sh, int m,
		      const struct pconf *c)
{
	return t == TARGET_ANY || (conf_rules(j, t, m, c, NULL) && shared_ok(j, t, sh, m, c));
}

bool engines_runs_gen(const struct job *j, enum target t, const struct pconf *g)
{
	return gen_rules(j, t, g, NULL);
}

bool engines_places(const struct job *j, enum target t, const unsigned *pools, int npools)
{
	return pool_rules(j, t, pools, npools, NULL);
}

/* --- the shared settings, one search each ----------------------------- */

/* The Megatron TP and PP of the actor's processes, which every model
 * colocated with it runs in (the space gives them all to every model):
 * each TP a node holds that divides the heads, each PP that divides the
 * layers. */
static bool megatron_variant(const struct job *j, const struct cluster *cl, int i,
			     struct target_shared *sh)
{
	const struct arch *a = &j->models[job_actor(j)].arch;

	for (int tp = 1; tp <= cl->gpus_per_node; tp *= 2)
		for (int pp = 1; pp <= a->layers; pp++) {
			if (a->heads % tp || a->kv_heads % tp || a->layers % pp || i-- > 0)
				continue;
			sh->tp = tp;
			sh->pp = pp;
			return true;
		}
	return false;
}

/* OpenRLHF's one ZeRO stage, checkpointing, Adam offload and training
 * micro-batch (the micro-batch sizes the search weighs), and the
 * inference micro-batch when a frozen model takes it; no AutoTP. */
static bool openrlhf_variant(const struct job *j, int i, struct target_shared *sh)
{
	bool frozen = (role_items(j, ROLE_REFERENCE) | role_items(j, ROLE_REWARD)) != 0;

	sh->tp = 1;
	sh->zero = i % NZERO_STAGES;
	i /= NZERO_STAGES;
	sh->rc = i % 2 ? RC_FULL : RC_NONE;
	i /= 2;
	sh->offload = i % 2;
	i /= 2;
	sh->train_mb = 1 << i % 4;
	i /= 4;
	if (frozen) {
		sh->infer_mb = 1 << i % 4;
		i /= 4;
	}
	return i == 0;
}

bool engines_variant(const struct job *j, const struct cluster *cl, enum target t, int i,
		    struct target_shared *sh)
{
	*sh = (struct target_shared){ -1, -1, -1, -1, -1, -1, -1 };
	if (t == TARGET_VERL_MEGATRON)
		return megatron_variant(j, cl, i, sh);
	if (t == TARGET_OPENRLHF)
		return openrlhf_variant(j, i, sh);
	return i == 0;
}

/* --- a plan's check ---------------------------------------------------- */

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

/* The settings OpenRLHF has one of for several models. */
static void openrlhf_shared(const struct env *v, const struct plan *p, struct target_reasons *r)
{
	const struct job *j = v->job;
	int t0 = -1, f0 = -1, zero = -1, actor = job_actor(j);

	for (int m = 0; m < j->nmodels; m++) {
		const struct pconf *c = &p->home[m], *d;
		const char *name = j->models[m].name;
		if (c->tp != p->home[0].tp)
			why(r, "%s runs at tp %d, %s at tp %d; OpenRLHF runs every model at one "
			    "--ds.tensor_parallel_size", j->models[0].name, p->home[0].tp, name,
			    c->tp);
		if (!model_trainable(&j->models[m])) {
			if (f0 >= 0 && c->mb != p->home[f0].mb)
				why(r, "%s and %s run micro-batches of %d and %d; OpenRLHF has one "
				    "--rollout.micro_batch_size", j->models[f0].name, name,
				    p->home[f0].mb, c->mb);
			f0 = f0 < 0 ? m : f0;
			continue;
		}
		if (c->dp > 1)
			zero = zero < 0 ? (int)c->zero : zero;
		if (t0 < 0) {
			t0 = m;
			continue;
		}
		d = &p->home[t0];
		if (c->dp > 1 && d->dp > 1 && c->zero != d->zero)
			why(r, "%s runs at ZeRO-%d, %s at ZeRO-%d; OpenRLHF has one --ds.zero_stage",
			    j->models[t0].name, d->zero, name, c->zero);
		if ((c->rc == RC_NONE) != (d->rc == RC_NONE))
			why(r, "%s and %s differ in recompute; OpenRLHF has one "
			    "--actor.gradient_checkpointing_enable", j->models[t0].name, name);
		if (c->offload != d->offload)
			why(r, "%s and %s differ in offload; OpenRLHF has one --ds.adam_offload",
			    j->models[t0].name, name);
		if (c->mb != d->mb)
			why(r, "%s and %s run micro-batches of %d and %d; OpenRLHF has one "
			    "--train.micro_batch_size", j->models[t0].name, name, d->mb, c->mb);
	}
	for (int m = 0; m < j->nmodels && zero >= 0; m++) {
		const struct pconf *c = &p->home[m];
		int want = zero == ZERO_3 ? ZERO_3 : ZERO_0;
		if (!model_trainable(&j->models[m]) && c->dp > 1 && (int)c->zero != want)
			why(r, "%s runs at ZeRO-%d beside trained models at ZeRO-%d; OpenRLHF runs "
			    "a frozen model at ZeRO-3 only under --ds.zero_stage 3, else ZeRO-0",
			    j->models[m].name, c->zero, zero);
	}
	{
		int mb = f0 >= 0 ? p->home[f0].mb : p->home[actor].mb;
		if (job_sequences(j) / mb < p->home[actor].dp)
			why(r, "%ld sequences in rollout micro-batches of %d are fewer than the "
			    "actor's %d data-parallel ranks, which OpenRLHF asserts they are not",
			    job_sequences(j), mb, p->home[actor].dp);
	}
}

/* Pools as the engines size them: nodes × GPUs per node. */
static void pool_sizes(const struct env *v, const struct plan *p, enum target t,
		       struct target_reasons *r)
{
	int gpn = v->cl->gpus_per_node;
	char names[256];

	if (t != TARGET_OPENRLHF && !is_verl(t))
		return;
	for (int i = 0; i < p->npools; i++)
		if (p->pools[i].ngpus > gpn && p->pools[i].ngpus % gpn)
			why(r, "the pool of %s has %d GPUs, not whole nodes of %d; the engine "
			    "sizes its pools in nodes x GPUs per node",
			    item_names(v->job, p->pools[i].items, names, sizeof names),
			    p->pools[i].ngpus, gpn);
}

bool engines_check(const struct env *v, const struct plan *p, enum target t,
		  struct target_reasons *r)
{
	const struct job *j = v->job;
	unsigned pools[MAX_ITEMS];
	int actor = job_actor(j);

	r->n = 0;
	for (int role = ROLE_ACTOR; role < NROLES && t != TARGET_BUILTIN; role++) {
		unsigned items = role_items(j, (enum role)role);
		if (items & (items - 1))
			why(r, "the job has more than one %s; the engine runs one of each role",
			    job_role_names[role]);
	}
	for (int m = 0; m < j->nmodels; m++)
		conf_rules(j, t, m, &p->home[m], r);
	gen_rules(j, t, &p->gen, r);
	for (int i = 0; i < p->npools; i++)
		pools[i] = p->pools[i].items;
	pool_rules(j, t, pools, p->npools, r);
	pool_sizes(v, p, t, r);
	for (int m = 0; m < j->nmodels && t == TARGET_VERL_MEGATRON; m++) {
		const struct pconf *c = &p->home[m], *a = &p->home[actor];
		if (pool_of(p, 1 + m) == pool_of(p, 1 + actor) && (c->tp != a->tp || c->pp != a->pp))
			why(r, "%s runs at tp %d, pp %d beside the actor at tp %d, pp %d; verl's "
			    "colocated Megatron workers share one process, whose TP and PP the actor "
			    "sets", j->models[m].name, c->tp, c->pp, a->tp, a->pp);
	}
	if (t == TARGET_OPENRLHF)
		openrlhf_shared(v, p, r);
	return r->n == 0;
}

enum target engines_verl_workers(const struct job *j, const struct plan *p)
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
 * what the plan leaves them next to what their pool's models keep
 * resident (their own copy, kept or not, is theirs), that is their
 * weights, workspace and KV room, rounded down. */
static double gpu_share(const struct env *v, const struct plan *p)
{
	int gi = pool_of(p, ITEM_GEN);
	double room = cluster_gpu_bytes(v->cl) - (gi >= 0 ? p->resident[gi] - p->gen_kept : 0);

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
		  pconf_recompute_names[c->rc]);
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

char *engines_settings(const struct env *v, const struct plan *p, enum target t)
{
	if (t == TARGET_OPENRLHF)
		return openrlhf_settings(v, p);
	return verl_settings(v, p, t == TARGET_VERL_MEGATRON);
}

enum target engines_verl_for(enum target space, const struct job *j, const struct plan *p)
{
	if (space == TARGET_VERL_FSDP || space == TARGET_VERL_MEGATRON)
		return space;
	return engines_verl_workers(j, p);
}
