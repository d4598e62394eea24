/* The job's RL settings (rlconf.h): defaults, ranges and their loader. */
#include "doc/rlconf.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

const char *const rlconf_reward_names[] = { "exact_match", "char_match", "model", NULL };

const char *const rlconf_lr_style_names[] = { "constant", "cosine", NULL };

void rlconf_optim_defaults(struct optim_config *c, double lr)
{
	memset(c, 0, sizeof *c);
	c->adamw.lr = lr;
	c->adamw.beta1 = 0.9;
	c->adamw.beta2 = 0.999;
	c->adamw.eps = 1e-8;
	c->adamw.weight_decay = 0.01;
	c->sched.style = LR_CONSTANT;
	c->grad_clip = 1.0;
}

int rlconf_optim_check(const struct optim_config *c, struct err *e)
{
	const struct adamw_config *a = &c->adamw;
	const struct lr_schedule *s = &c->sched;

	if (!(a->lr > 0) || !isfinite(a->lr))
		return err_set(e, NR_EINPUT, "\"lr\" must be a positive number, not %g", a->lr);
	if (!(a->beta1 >= 0 && a->beta1 < 1) || !(a->beta2 >= 0 && a->beta2 < 1))
		return err_set(e, NR_EINPUT, "\"betas\" must lie in [0, 1), not (%g, %g)",
			       a->beta1, a->beta2);
	if (!(a->eps > 0))
		return err_set(e, NR_EINPUT, "\"eps\" must be positive, not %g", a->eps);
	if (!(a->weight_decay >= 0))
		return err_set(e, NR_EINPUT, "\"weight_decay\" must not be negative, not %g",
			       a->weight_decay);
	if ((unsigned)s->style > LR_COSINE)
		return err_set(e, NR_EINPUT, "\"warmup_style\" %d is not a schedule", (int)s->style);
	if (s->warmup_steps < 0 || s->total_steps < 0)
		return err_set(e, NR_EINPUT, "\"lr_warmup_steps\" and \"total_steps\" must not be "
			       "negative");
	if (!(s->min_lr_ratio >= 0 && s->min_lr_ratio <= 1))
		return err_set(e, NR_EINPUT, "\"min_lr_ratio\" must lie in [0, 1], not %g",
			       s->min_lr_ratio);
	if (!(c->grad_clip >= 0))
		return err_set(e, NR_EINPUT, "\"grad_clip\" must not be negative, not %g",
			       c->grad_clip);
	return NR_OK;
}

const char *const rlconf_algorithm_names[] = { "ppo", "grpo", NULL };
const char *const rlconf_kl_names[] = { "k1", "low_var_kl", NULL };

int rlconf_kl_parse(const char *name, enum rl_kl *out)
{
	if (!strcmp(name, "kl") || !strcmp(name, "k1"))
		*out = RL_KL_K1;
	else if (!strcmp(name, "low_var_kl") || !strcmp(name, "k3"))
		*out = RL_KL_K3;
	else
		return NR_EINPUT;
	return NR_OK;
}

void rlconf_defaults(struct rl_config *c, enum rl_algorithm a)
{
	memset(c, 0, sizeof *c);
	c->algorithm = a;
	c->gamma = 1.0;
	c->lam = 1.0;
	c->norm_adv_by_std_in_grpo = true;
	c->use_kl_in_reward = a == RL_PPO;
	c->kl_penalty = RL_KL_K1;
	c->kl_coef = 0.001;
	c->use_kl_loss = a == RL_GRPO;
	c->kl_loss_type = RL_KL_K3;
	c->kl_loss_coef = 0.001;
	c->clip_ratio_low = 0.2;
	c->clip_ratio_high = 0.2;
	c->clip_ratio_c = 3.0;
	c->cliprange_value = 0.5;
	c->entropy_coeff = 0;
	rlconf_optim_defaults(&c->actor_optim, 1e-6);
	rlconf_optim_defaults(&c->critic_optim, 1e-5);
	c->sft_optim = c->actor_optim;
	c->temperature = 1.0;
	c->top_p = 1.0;
	c->top_k = -1;
}

/* NR_EINPUT unless lo <= v <= hi (both ends inclusive). */
static int in_range(const char *key, double v, double lo, double hi, struct err *e)
{
	if (v >= lo && v <= hi)
		return NR_OK;
	if (isinf(hi))
		return err_set(e, NR_EINPUT, "\"%s\" must be at least %g, not %g", key, lo, v);
	return err_set(e, NR_EINPUT, "\"%s\" must lie in [%g, %g], not %g", key, lo, hi, v);
}

int rlconf_check(const struct rl_config *c, struct err *e)
{
	int rc;

	if ((unsigned)c->algorithm > RL_GRPO)
		return err_set(e, NR_EINPUT, "\"algorithm\" %d is not ppo or grpo", (int)c->algorithm);
	if ((rc = in_range("gamma", c->gamma, 0, 1, e)) ||
	    (rc = in_range("lam", c->lam, 0, 1, e)) ||
	    (rc = in_range("kl_coef", c->kl_coef, 0, INFINITY, e)) ||
	    (rc = in_range("kl_loss_coef", c->kl_loss_coef, 0, INFINITY, e)) ||
	    (rc = in_range("clip_ratio_high", c->clip_ratio_high, 0, INFINITY, e)) ||
	    (rc = in_range("cliprange_value", c->cliprange_value, 0, INFINITY, e)) ||
	    (rc = in_range("entropy_coeff", c->entropy_coeff, 0, INFINITY, e)) ||
	    (rc = in_range("temperature", c->temperature, 0, INFINITY, e)))
		return rc;
	if (!(c->clip_ratio_low >= 0 && c->clip_ratio_low < 1))
		return err_set(e, NR_EINPUT, "\"clip_ratio_low\" must lie in [0, 1), not %g",
			       c->clip_ratio_low);
	if (!(c->clip_ratio_c > 1))
		return err_set(e, NR_EINPUT, "\"clip_ratio_c\" must be greater than 1 (the dual "
			       "clip's lower bound of the ratio), not %g", c->clip_ratio_c);
	if (!(c->top_p > 0 && c->top_p <= 1))
		return err_set(e, NR_EINPUT, "\"top_p\" must lie in (0, 1], not %g", c->top_p);
	if (c->top_k != -1 && c->top_k < 1)
		return err_set(e, NR_EINPUT, "\"top_k\" must be -1 (off) or at least 1, not %ld",
			       c->top_k);
	if ((unsigned)c->kl_penalty > RL_KL_K3 || (unsigned)c->kl_loss_type > RL_KL_K3)
		return err_set(e, NR_EINPUT, "\"kl_penalty\" and \"kl_loss_type\" must be k1 or "
			       "low_var_kl");
	if ((rc = rlconf_optim_check(&c->actor_optim, e)))
		return err_prefix(e, "actor_optim");
	if ((rc = rlconf_optim_check(&c->critic_optim, e)))
		return err_prefix(e, "critic_optim");
	if ((rc = rlconf_optim_check(&c->sft_optim, e)))
		return err_prefix(e, "sft_optim");
	return NR_OK;
}


/* An optimizer object: lr, betas, eps, weight_decay, lr_warmup_steps,
 * warmup_style, min_lr_ratio, grad_clip. */
static int optim_load(const struct jdoc *d, json_t *o, const char *path, struct optim_config *c,
		      struct err *e)
{
	static const char *const keys[] = { "lr", "betas", "eps", "weight_decay", "lr_warmup_steps",
					    "warmup_style", "min_lr_ratio", "grad_clip", NULL };
	json_t *betas;
	int style = (int)c->sched.style, rc;
	char p[512];

	if ((rc = jdoc_check_keys(d, o, path, keys, e)) ||
	    (rc = jget_num(d, o, path, "lr", false, 1e-12, 10, &c->adamw.lr, e)) ||
	    (rc = jget_arr(d, o, path, "betas", false, &betas, e)) ||
	    (rc = jget_num(d, o, path, "eps", false, 1e-30, 1, &c->adamw.eps, e)) ||
	    (rc = jget_num(d, o, path, "weight_decay", false, 0, 10, &c->adamw.weight_decay, e)) ||
	    (rc = jget_int(d, o, path, "lr_warmup_steps", false, 0, 1L << 40,
			   &c->sched.warmup_steps, e)) ||
	    (rc = jget_enum(d, o, path, "warmup_style", false, rlconf_lr_style_names, &style, e)) ||
	    (rc = jget_num(d, o, path, "min_lr_ratio", false, 0, 1, &c->sched.min_lr_ratio, e)) ||
	    (rc = jget_num(d, o, path, "grad_clip", false, 0, HUGE_VAL, &c->grad_clip, e)))
		return rc;
	c->sched.style = (enum lr_style)style;
	if (betas) {
		jdoc_path(p, sizeof p, path, "betas");
		if (json_array_size(betas) != 2 ||
		    !json_is_number(json_array_get(betas, 0)) ||
		    !json_is_number(json_array_get(betas, 1)))
			return jdoc_fail(d, p, e, "expected two numbers [beta1, beta2]");
		c->adamw.beta1 = json_number_value(json_array_get(betas, 0));
		c->adamw.beta2 = json_number_value(json_array_get(betas, 1));
		if (rlconf_optim_check(c, e))
			return jdoc_fail(d, p, e, "%s", e->msg);
	}
	return NR_OK;
}

static int kl_load(const struct jdoc *d, json_t *o, const char *path, const char *key,
		   enum rl_kl *out, struct err *e)
{
	char name[32] = "", p[512];

	if (jget_str(d, o, path, key, false, name, sizeof name, e))
		return e->code;
	jdoc_path(p, sizeof p, path, key);
	if (name[0] && rlconf_kl_parse(name, out))
		return jdoc_fail(d, p, e, "expected \"kl\" (k1) or \"low_var_kl\" (k3), got "
				 "\"%s\"", name);
	return NR_OK;
}

int rlconf_load(const struct jdoc *d, json_t *o, const char *path, enum rl_algorithm a,
		   struct rl_config *c, struct err *e)
{
	static const char *const keys[] = {
		"gamma", "lam", "norm_adv_by_std_in_grpo", "use_kl_in_reward", "kl_penalty",
		"kl_coef", "use_kl_loss", "kl_loss_type", "kl_loss_coef", "clip_ratio_low",
		"clip_ratio_high", "clip_ratio_c", "cliprange_value", "entropy_coeff",
		"actor_optim", "critic_optim", "temperature", "top_p", "top_k", "sft_steps",
		"sft_optim", NULL };
	json_t *ao, *co, *so;
	char p[512];
	int rc;

	rlconf_defaults(c, a);
	if (!o)
		return NR_OK;
	if ((rc = jdoc_check_keys(d, o, path, keys, e)) ||
	    (rc = jget_num(d, o, path, "gamma", false, 0, 1, &c->gamma, e)) ||
	    (rc = jget_num(d, o, path, "lam", false, 0, 1, &c->lam, e)) ||
	    (rc = jget_bool(d, o, path, "norm_adv_by_std_in_grpo", false,
			    &c->norm_adv_by_std_in_grpo, e)) ||
	    (rc = jget_bool(d, o, path, "use_kl_in_reward", false, &c->use_kl_in_reward, e)) ||
	    (rc = kl_load(d, o, path, "kl_penalty", &c->kl_penalty, e)) ||
	    (rc = jget_num(d, o, path, "kl_coef", false, 0, HUGE_VAL, &c->kl_coef, e)) ||
	    (rc = jget_bool(d, o, path, "use_kl_loss", false, &c->use_kl_loss, e)) ||
	    (rc = kl_load(d, o, path, "kl_loss_type", &c->kl_loss_type, e)) ||
	    (rc = jget_num(d, o, path, "kl_loss_coef", false, 0, HUGE_VAL, &c->kl_loss_coef, e)) ||
	    (rc = jget_num(d, o, path, "clip_ratio_low", false, 0, 0.999999, &c->clip_ratio_low,
			   e)) ||
	    (rc = jget_num(d, o, path, "clip_ratio_high", false, 0, HUGE_VAL, &c->clip_ratio_high,
			   e)) ||
	    (rc = jget_num(d, o, path, "clip_ratio_c", false, 1.000001, HUGE_VAL, &c->clip_ratio_c,
			   e)) ||
	    (rc = jget_num(d, o, path, "cliprange_value", false, 0, HUGE_VAL, &c->cliprange_value,
			   e)) ||
	    (rc = jget_num(d, o, path, "entropy_coeff", false, 0, HUGE_VAL, &c->entropy_coeff, e)) ||
	    (rc = jget_obj(d, o, path, "actor_optim", false, &ao, e)) ||
	    (rc = jget_obj(d, o, path, "critic_optim", false, &co, e)) ||
	    (rc = jget_obj(d, o, path, "sft_optim", false, &so, e)) ||
	    (rc = jget_num(d, o, path, "temperature", false, 0, 100, &c->temperature, e)) ||
	    (rc = jget_num(d, o, path, "top_p", false, 1e-9, 1, &c->top_p, e)) ||
	    (rc = jget_int(d, o, path, "top_k", false, -1, 1L << 30, &c->top_k, e)) ||
	    (rc = jget_int(d, o, path, "sft_steps", false, 0, 1L << 40, &c->sft_steps, e)))
		return rc;
	jdoc_path(p, sizeof p, path, "top_k");
	if (c->top_k == 0)
		return jdoc_fail(d, p, e, "expected -1 (off) or at least 1, got 0");
	jdoc_path(p, sizeof p, path, "actor_optim");
	if (ao && (rc = optim_load(d, ao, p, &c->actor_optim, e)))
		return rc;
	jdoc_path(p, sizeof p, path, "critic_optim");
	if (co && (rc = optim_load(d, co, p, &c->critic_optim, e)))
		return rc;
	/* the warm-up's optimizer is the actor's but for what it sets */
	c->sft_optim = c->actor_optim;
	jdoc_path(p, sizeof p, path, "sft_optim");
	if (so && (rc = optim_load(d, so, p, &c->sft_optim, e)))
		return rc;
	return NR_OK;
}

/* A path of the job's, resolved against the job file's folder. */
static int job_path(const struct jdoc *d, json_t *o, const char *path, const char *key,
		    const char *job_file, char *out, size_t n, struct err *e)
{
	char given[DATA_PATH_MAX] = "", p[512];
	const char *slash = strrchr(job_file, '/');
	int rc = jget_str(d, o, path, key, false, given, sizeof given, e);

	if (rc || !given[0])
		return rc;
	jdoc_path(p, sizeof p, path, key);
	if (given[0] != '/' && slash && strcmp(job_file, "-") != 0) {
		if ((size_t)snprintf(out, n, "%.*s/%s", (int)(slash - job_file), job_file, given) >= n)
			return jdoc_fail(d, p, e, "path too long");
	} else {
		snprintf(out, n, "%s", given);
	}
	return NR_OK;
}

/* "stop_tokens": token ids or texts, at most DATA_MAX_STOPS. */
static int stop_tokens_load(const struct jdoc *d, json_t *arr, const char *path,
			    struct data_config *c, struct err *e)
{
	char p[256];

	jdoc_path(p, sizeof p, path, "stop_tokens");
	if (json_array_size(arr) > DATA_MAX_STOPS)
		return jdoc_fail(d, p, e, "%zu stop tokens: at most %d", json_array_size(arr),
				 DATA_MAX_STOPS);
	for (size_t i = 0; i < json_array_size(arr); i++) {
		json_t *v = json_array_get(arr, i);
		struct data_stop *s = &c->stops[c->nstops++];
		char pi[272];

		jdoc_path_idx(pi, sizeof pi, p, i);
		if (json_is_integer(v) && json_integer_value(v) >= 0 &&
		    json_integer_value(v) <= DATA_STOP_ID_MAX) {
			s->id = (long)json_integer_value(v);
		} else if (json_is_string(v) && json_string_length(v) > 0 &&
			   json_string_length(v) < sizeof s->text) {
			s->id = -1;
			memcpy(s->text, json_string_value(v), json_string_length(v) + 1);
		} else {
			return jdoc_fail(d, pi, e, "expected a token id (0 to %d) or a token's text "
					 "(1 to %zu bytes)", DATA_STOP_ID_MAX, sizeof s->text - 1);
		}
	}
	return NR_OK;
}

int rlconf_data_load(const struct jdoc *d, json_t *o, const char *path, const char *job_file,
		     struct data_config *c, struct err *e)
{
	static const char *const keys[] = { "prompts", "tokenizer", "reward", "seed",
					    "stop_tokens", NULL };
	json_t *stops = NULL;
	int reward = TASK_EXACT_MATCH, rc;
	long seed = 1;

	memset(c, 0, sizeof *c);
	c->seed = 1;
	if (!o)
		return NR_OK;
	if ((rc = jdoc_check_keys(d, o, path, keys, e)) ||
	    (rc = job_path(d, o, path, "prompts", job_file, c->prompts, sizeof c->prompts, e)) ||
	    (rc = job_path(d, o, path, "tokenizer", job_file, c->tokenizer, sizeof c->tokenizer,
			   e)) ||
	    (rc = jget_enum(d, o, path, "reward", false, rlconf_reward_names, &reward, e)) ||
	    (rc = jget_int(d, o, path, "seed", false, 0, LONG_MAX, &seed, e)) ||
	    (rc = jget_arr(d, o, path, "stop_tokens", false, &stops, e)) ||
	    (stops && (rc = stop_tokens_load(d, stops, path, c, e))))
		return rc;
	c->reward = (enum task_reward)reward;
	c->seed = (uint64_t)seed;
	return NR_OK;
}
