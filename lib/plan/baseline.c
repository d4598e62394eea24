/* The baseline layouts (see baseline.h): each is a set of pins and pools
 * over the search's space. */
#include "plan/baseline.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const layout_names[NLAYOUTS + 1] = { "adaptive", "verl", "verl-tuned",
						 "verl-megatron", "openrlhf", "openrlhf-hybrid",
						 "fixed", NULL };

/* The largest TP ≤ want that a node holds and that divides the heads. */
static int fit_tp(const struct arch *a, int gpn, int want)
{
	int t = want;

	while (t > 1 && (t > gpn || a->kv_heads % t || a->heads % t))
		t /= 2;
	return t;
}

/* OpenRLHF's scripts size their vLLM engines by the model: one GPU for
 * small models, two around 7–8B, up to a node for 70B. */
static int rollout_tp_by_size(const struct arch *a, int gpn)
{
	double p = arch_params(a);

	return fit_tp(a, gpn, p < 3e9 ? 1 : p < 14e9 ? 2 : p < 40e9 ? 4 : 8);
}

/* How a layout shards a model's state over DP.  The one place that says
 * what FSDP / ZeRO-3 and ZeRO-less are in pin terms. */
enum sharding { SHARD_FREE, SHARD_FULL, SHARD_OPTIMIZER_FREE };

static void shard(struct pin *p, const struct model *md, enum sharding s)
{
	(void)md;
	switch (s) {
	case SHARD_FULL:
		/* FSDP, ZeRO-3: weights, gradients and optimizer over DP */
		p->zero = 1u << ZERO_3;
		break;
	case SHARD_OPTIMIZER_FREE:
		/* Megatron: no FSDP; its distributed optimizer (optimizer state,
		 * and gradients reduce-scattered) is a choice */
		p->zero = 1u << ZERO_0 | 1u << ZERO_1 | 1u << ZERO_2;
		break;
	default:
		break;
	}
}

static void one_pool(const struct job *j, struct space *sp)
{
	sp->npools = 1;
	sp->pool_items[0] = (1u << (1 + j->nmodels)) - 1;
}

static void layout_verl(const struct env *v, struct space *sp, bool megatron)
{
	const struct job *j = v->job;

	one_pool(j, sp);
	for (int m = 0; m < j->nmodels; m++) {
		if (megatron) {
			shard(&sp->home[m], &j->models[m], SHARD_OPTIMIZER_FREE);
		} else {
			sp->home[m].tp = sp->home[m].pp = 1;
			shard(&sp->home[m], &j->models[m], SHARD_FULL);
		}
	}
	/* actor_rollout_ref.rollout.tensor_model_parallel_size: 2 */
	sp->gen.tp = fit_tp(&j->models[job_actor(j)].arch, v->cl->gpus_per_node, 2);
}

/* verl with the rollout TP that gives the fastest plan of 1, 2, 4 and 8:
 * on nodes of up to 8 GPUs that is the search's own choice. */
static int layout_verl_tuned(const struct env *v, struct space *sp, struct err *e)
{
	static const int tps[] = { 1, 2, 4, 8 };
	const struct arch *a = &v->job->models[job_actor(v->job)].arch;
	struct plan *p;
	struct space trial;
	struct search_stats st;
	struct err le;
	double best = 0;
	int pick = 0;

	layout_verl(v, sp, false);
	sp->gen.tp = 0;
	if (v->cl->gpus_per_node <= 8)
		return NR_OK;
	if (!(p = malloc(sizeof *p)))
		return err_oom(e);
	for (size_t i = 0; i < sizeof tps / sizeof tps[0]; i++) {
		if (fit_tp(a, v->cl->gpus_per_node, tps[i]) != tps[i])
			continue;
		trial = *sp;
		trial.gen.tp = tps[i];
		if (plan_search(v, &trial, false, NULL, p, &st, &le) == NR_OK &&
		    (!pick || p->step_time < best)) {
			best = p->step_time;
			pick = tps[i];
		}
	}
	free(p);
	sp->gen.tp = pick ? pick : fit_tp(a, v->cl->gpus_per_node, 2);
	return NR_OK;
}

/* Largest size ≤ want a pool may take: whole nodes, or a power of two
 * inside one. */
static int round_size(int want, int gpn)
{
	int z = 1;

	if (want >= gpn)
		return want / gpn * gpn;
	while (z * 2 <= want)
		z *= 2;
	return z;
}

static bool with_actor(enum role r)
{
	return r == ROLE_ACTOR || r == ROLE_REFERENCE;
}

static int layout_openrlhf(const struct env *v, struct space *sp, struct err *e)
{
	const struct job *j = v->job;
	int gpn = v->cl->gpus_per_node, n = cluster_gpus_up(v->cl);
	/* train_ppo_llama_ray.sh: 2 engines × TP 2, actor and reference on 2
	 * GPUs (--colocate_actor_ref), critic and reward on 2
	 * (--colocate_critic_reward) */
	unsigned items[3] = { 1u, 0, 0 };
	double share[3] = { 2, 1, 1 }, sum = 0;

	for (int m = 0; m < j->nmodels; m++) {
		const struct model *md = &j->models[m];
		items[with_actor(md->role) ? 1 : 2] |= 1u << (1 + m);
		/* DeepSpeed without AutoTP (--ds.tensor_parallel_size 1), no PP */
		sp->home[m].tp = sp->home[m].pp = 1;
		shard(&sp->home[m], md, SHARD_FULL);      /* --zero_stage 3 */
		if (model_trainable(md)) {
			sp->home[m].rc = RC_FULL;         /* --gradient_checkpointing */
			sp->home[m].offload = 1;          /* --adam_offload */
		}
	}
	sp->npools = 0;
	for (int i = 0; i < 3; i++) {
		if (!items[i])
			continue;
		sp->pool_items[sp->npools] = items[i];
		sp->pool_size[sp->npools++] = (int)share[i];
		sum += share[i];
	}
	for (int i = 0; i < sp->npools; i++) {
		sp->pool_size[i] = round_size((int)(n * sp->pool_size[i] / sum), gpn);
		if (sp->pool_size[i] < 1)
			return err_set(e, NR_EINFEASIBLE, "the OpenRLHF layout needs a GPU for the "
				       "engines and one for each group of models: %d GPUs are up", n);
	}
	sp->gen.tp = rollout_tp_by_size(&j->models[job_actor(j)].arch, gpn);
	while (sp->gen.tp > sp->pool_size[0])
		sp->gen.tp /= 2;
	return NR_OK;
}

static void layout_openrlhf_hybrid(const struct env *v, struct space *sp)
{
	const struct job *j = v->job;

	/* train_ppo_llama_ray_hybrid_engine.sh: --colocate_all_models, vLLM
	 * and DeepSpeed asleep between their stages */
	one_pool(j, sp);
	for (int m = 0; m < j->nmodels; m++) {
		if (model_trainable(&j->models[m]))
			sp->home[m].rc = RC_FULL;
		sp->home[m].tp = sp->home[m].pp = 1;
		shard(&sp->home[m], &j->models[m], SHARD_FULL);
		sp->home[m].offload = 1;
	}
	sp->gen.tp = rollout_tp_by_size(&j->models[job_actor(j)].arch, v->cl->gpus_per_node);
}

static int layout_fixed(const struct env *v, const struct plan *cur, struct space *sp,
			struct err *e)
{
	const struct job *j = v->job;

	if (!cur)
		return err_set(e, NR_EINPUT, "--layout fixed keeps the TP/PP of a plan: give "
			       "it with --current");
	/* the same pools and TP/PP; only DP (the pool sizes) follows the GPUs */
	sp->npools = cur->npools;
	for (int i = 0; i < cur->npools; i++)
		sp->pool_items[i] = cur->pools[i].items;
	for (int m = 0; m < j->nmodels; m++) {
		sp->home[m].tp = cur->home[m].tp;
		sp->home[m].pp = cur->home[m].pp;
		sp->home[m].mb = cur->home[m].mb;
		sp->home[m].rc = (int)cur->home[m].rc;
		sp->home[m].zero = 1u << cur->home[m].zero;
		sp->home[m].offload = cur->home[m].offload;
	}
	sp->gen.tp = cur->gen.tp;
	return NR_OK;
}

int layout_space(const struct env *v, enum plan_layout l, const struct plan *current,
		 struct space *sp, struct err *e)
{
	switch (l) {
	case LAYOUT_VERL:
		layout_verl(v, sp, false);
		return NR_OK;
	case LAYOUT_VERL_TUNED:
		return layout_verl_tuned(v, sp, e);
	case LAYOUT_VERL_MEGATRON:
		layout_verl(v, sp, true);
		return NR_OK;
	case LAYOUT_OPENRLHF:
		return layout_openrlhf(v, sp, e);
	case LAYOUT_OPENRLHF_HYBRID:
		layout_openrlhf_hybrid(v, sp);
		return NR_OK;
	case LAYOUT_FIXED:
		return layout_fixed(v, current, sp, e);
	default:
		return NR_OK;
	}
}

/* --- pins under a layout --------------------------------------------------- */

/* One setting of a pin: its name, where it is, and its free value. */
struct setting {
	const char *name;
	size_t off;
	int free;
};

static const struct setting settings[] = {
	{ "TP", offsetof(struct pin, tp), 0 },
	{ "PP", offsetof(struct pin, pp), 0 },
	{ "DP", offsetof(struct pin, dp), 0 },
	{ "micro-batch", offsetof(struct pin, mb), 0 },
	{ "recompute", offsetof(struct pin, rc), -1 },
	{ "ZeRO stage", offsetof(struct pin, zero), 0 },
	{ "offload", offsetof(struct pin, offload), -1 },
};
#define ZERO_SETTING 5 /* a set of stages, not one value */
#define NSETTINGS (sizeof settings / sizeof settings[0])

static int *field(struct pin *p, size_t i)
{
	return (int *)((char *)p + settings[i].off);
}

static bool pin_free(struct pin *p)
{
	for (size_t i = 0; i < NSETTINGS; i++)
		if (*field(p, i) != settings[i].free)
			return false;
	return true;
}

/* The value a setting has in words, for messages. */
static const char *in_words(size_t i, int v, char *buf, size_t n)
{
	if (i == ZERO_SETTING) {
		size_t k = 0;

		buf[0] = '\0';
		for (int z = 0; z < NZERO_STAGES && k < n; z++)
			if ((unsigned)v >> z & 1)
				k += (size_t)snprintf(buf + k, n - k, "%s%d", k ? " or " : "", z);
	} else if (settings[i].free == 0) {
		snprintf(buf, n, "%d", v);
	}
	else if (settings[i].off == offsetof(struct pin, rc))
		snprintf(buf, n, "%s", v >= 0 && v < NRECOMPUTE ? pconf_recompute_names[v] : "?");
	else
		snprintf(buf, n, "%s", v ? "on" : "off");
	return buf;
}

/* Merge want into have (the layout's); a setting both fix differently is
 * refused, except the rollout TP of verl-tuned, which picks among 1, 2, 4
 * and 8, and the ZeRO stages, which the pin may narrow to stages the
 * layout allows. */
static int merge(enum plan_layout l, bool gen, const char *text, const char *what,
		 struct pin *have, struct pin *want, struct err *e)
{
	for (size_t i = 0; i < NSETTINGS; i++) {
		int *h = field(have, i), *w = field(want, i);
		char a[32], b[32];
		if (*w == settings[i].free)
			continue;
		if (i == ZERO_SETTING && *h != 0) {
			if ((unsigned)*w & ~(unsigned)*h)
				return err_set(e, NR_EINPUT, "pin '%s': the %s layout runs %s at ZeRO "
					       "stage %s, not %s", text, layout_names[l], what,
					       in_words(i, *h, a, sizeof a), in_words(i, *w, b, sizeof b));
		} else if (l == LAYOUT_VERL_TUNED && gen && i == 0) {
			if (*w != 1 && *w != 2 && *w != 4 && *w != 8)
				return err_set(e, NR_EINPUT, "pin '%s': the verl-tuned layout runs "
					       "the rollout at TP 1, 2, 4 or 8, not %d", text, *w);
		} else if (*h != settings[i].free && *h != *w) {
			return err_set(e, NR_EINPUT, "pin '%s': the %s layout fixes %s's %s at %s, "
				       "not %s", text, layout_names[l], what, settings[i].name,
				       in_words(i, *h, a, sizeof a), in_words(i, *w, b, sizeof b));
		}
		*h = *w;
	}
	return NR_OK;
}

int layout_pin(const struct job *job, enum plan_layout l, const char *text, struct space *sp,
	       struct err *e)
{
	struct space want;
	char what[NAME_MAX_LEN + 16];
	int rc;

	if (l == LAYOUT_ADAPTIVE)
		return search_pin_parse(job, text, sp, e);
	search_space_init(&want);
	if ((rc = search_pin_parse(job, text, &want, e)))
		return rc;
	if (!pin_free(&want.gen)) {
		snprintf(what, sizeof what, "%s@generation", job->models[job_actor(job)].name);
		return merge(l, true, text, what, &sp->gen, &want.gen, e);
	}
	for (int m = 0; m < job->nmodels; m++) {
		if (pin_free(&want.home[m]))
			continue;
		snprintf(what, sizeof what, "%s@%s", job->models[m].name,
			 job_stage_names[model_trainable(&job->models[m]) ? STAGE_TRAIN : STAGE_INF]);
		return merge(l, false, text, what, &sp->home[m], &want.home[m], e);
	}
	return NR_OK;
}
