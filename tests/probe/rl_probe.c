/* A probe for tests/40-engine-rl.bats: reads one JSON case on standard
 * input (a batch of packed responses, the RL settings, optimizer inputs),
 * runs every function of lib/engine/rl.h and optim.h on it, and writes
 * what they return as JSON, for a PyTorch reference to compare. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/optim.h"
#include "engine/rl.h"

static void die(const char *what)
{
	fprintf(stderr, "rl_probe: %s\n", what);
	exit(2);
}

static json_t *need(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);

	if (!v)
		die(key);
	return v;
}

static double num(json_t *o, const char *key)
{
	return json_number_value(need(o, key));
}

/* A JSON array of numbers as floats; *n its length. */
static float *floats(json_t *o, const char *key, size_t *n)
{
	json_t *a = need(o, key);
	size_t len = json_array_size(a);
	float *x = calloc(len ? len : 1, sizeof *x);

	for (size_t i = 0; i < len; i++)
		x[i] = (float)json_number_value(json_array_get(a, i));
	if (n)
		*n = len;
	return x;
}

static json_t *array(const float *x, size_t n)
{
	json_t *a = json_array();

	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, json_real(x[i]));
	return a;
}

static json_t *stats(const struct rl_stats *s)
{
	return json_pack("{s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f}", "pg_loss", s->pg_loss,
			 "pg_clipfrac", s->pg_clipfrac, "pg_clipfrac_lower", s->pg_clipfrac_lower,
			 "ppo_kl", s->ppo_kl, "kl_loss", s->kl_loss, "entropy", s->entropy,
			 "vf_loss", s->vf_loss, "vf_clipfrac", s->vf_clipfrac);
}

static void config(json_t *j, struct rl_config *c)
{
	rlconf_defaults(c, RL_PPO);
	c->gamma = num(j, "gamma");
	c->lam = num(j, "lam");
	c->clip_ratio_low = num(j, "clip_ratio_low");
	c->clip_ratio_high = num(j, "clip_ratio_high");
	c->clip_ratio_c = num(j, "clip_ratio_c");
	c->cliprange_value = num(j, "cliprange_value");
	c->kl_coef = num(j, "kl_coef");
	c->kl_loss_coef = num(j, "kl_loss_coef");
	c->entropy_coeff = num(j, "entropy_coeff");
	if (rlconf_kl_parse(json_string_value(need(j, "kl_penalty")), &c->kl_penalty) ||
	    rlconf_kl_parse(json_string_value(need(j, "kl_loss_type")), &c->kl_loss_type))
		die("kl_penalty or kl_loss_type");
}

/* AdamW over "steps" gradients from "params", decaying where "decay". */
static json_t *adamw(json_t *j)
{
	struct optim_config c;
	json_t *steps = need(j, "grads"), *dec = need(j, "decay");
	size_t n, nspans = json_array_size(dec);
	float *w = floats(j, "params", &n), *m = calloc(n, sizeof *m), *v = calloc(n, sizeof *v);
	struct optim_span *s = calloc(nspans, sizeof *s);
	json_t *out;

	rlconf_optim_defaults(&c, num(j, "lr"));
	c.adamw.beta1 = json_number_value(json_array_get(need(j, "betas"), 0));
	c.adamw.beta2 = json_number_value(json_array_get(need(j, "betas"), 1));
	c.adamw.eps = num(j, "eps");
	c.adamw.weight_decay = num(j, "weight_decay");
	for (size_t i = 0; i < nspans; i++) {
		json_t *d = json_array_get(dec, i);

		s[i].off = (size_t)json_integer_value(json_array_get(d, 0));
		s[i].len = (size_t)json_integer_value(json_array_get(d, 1));
		s[i].decay = json_is_true(json_array_get(d, 2));
	}
	for (size_t t = 0; t < json_array_size(steps); t++) {
		float *g = calloc(n, sizeof *g);

		for (size_t i = 0; i < n; i++)
			g[i] = (float)json_number_value(json_array_get(json_array_get(steps, t), i));
		optim_adamw_step(&c.adamw, c.adamw.lr, (long)t + 1, s, nspans, w, m, v, g);
		free(g);
	}
	out = json_pack("{s:o}", "params", array(w, n));
	free(w);
	free(m);
	free(v);
	free(s);
	return out;
}

/* Clip "grads" (spans of "sizes") to "max_norm". */
static json_t *clip(json_t *j)
{
	json_t *sizes = need(j, "sizes");
	size_t n, ns = json_array_size(sizes), off = 0;
	float *g = floats(j, "grads", &n);
	struct optim_span *s = calloc(ns, sizeof *s);
	double norm, f;
	json_t *out;

	for (size_t i = 0; i < ns; i++) {
		s[i].off = off;
		s[i].len = (size_t)json_integer_value(json_array_get(sizes, i));
		off += s[i].len;
	}
	f = optim_clip_scale(optim_sumsq(s, ns, g), num(j, "max_norm"), &norm);
	optim_scale(s, ns, g, f);
	out = json_pack("{s:f,s:o}", "norm", norm, "grads", array(g, n));
	free(g);
	free(s);
	return out;
}

int main(void)
{
	json_error_t je;
	json_t *in = json_loadf(stdin, 0, &je), *out, *joff;
	struct rl_config c;
	struct rl_stats st;
	struct err e;
	size_t B, N, *off;
	float *lp, *old, *ref, *val, *oldv, *ent, *score, *k, *r, *adv, *ret, *wh, *g;
	double denom, loss, kl;

	if (!in)
		die(je.text);
	config(need(in, "config"), &c);
	joff = need(in, "off");
	B = json_array_size(joff) - 1;
	off = calloc(B + 1, sizeof *off);
	for (size_t b = 0; b <= B; b++)
		off[b] = (size_t)json_integer_value(json_array_get(joff, b));
	N = off[B];
	lp = floats(in, "logp", NULL);
	old = floats(in, "old_logp", NULL);
	ref = floats(in, "ref_logp", NULL);
	val = floats(in, "values", NULL);
	oldv = floats(in, "old_values", NULL);
	ent = floats(in, "entropy", NULL);
	score = floats(in, "scores", NULL);
	denom = num(in, "denom");
	k = calloc(N, sizeof *k);
	r = calloc(N, sizeof *r);
	adv = calloc(N, sizeof *adv);
	ret = calloc(N, sizeof *ret);
	wh = calloc(N, sizeof *wh);
	g = calloc(N, sizeof *g);
	out = json_object();

	rl_kl(RL_KL_K1, N, lp, ref, k);
	json_object_set_new(out, "k1", array(k, N));
	rl_kl(RL_KL_K3, N, lp, ref, k);
	json_object_set_new(out, "k3", array(k, N));

	kl = rl_shape_rewards(&c, B, off, lp, ref, score, r);
	json_object_set_new(out, "rewards", array(r, N));
	json_object_set_new(out, "reward_kl_sum", json_real(kl));
	rl_gae(B, off, r, oldv, c.gamma, c.lam, adv, ret);
	json_object_set_new(out, "advantages", array(adv, N));
	json_object_set_new(out, "returns", array(ret, N));
	memcpy(wh, adv, N * sizeof *wh);
	rl_whiten(N, wh);
	json_object_set_new(out, "whitened", array(wh, N));

	if (rl_grpo_advantages(B, off, (size_t)num(in, "group"), score, true, adv, &e))
		die(e.msg);
	json_object_set_new(out, "grpo", array(adv, N));
	rl_grpo_advantages(B, off, (size_t)num(in, "group"), score, false, adv, &e);
	json_object_set_new(out, "drgrpo", array(adv, N));

	/* The policy loss on the whitened GAE advantages. */
	memset(&st, 0, sizeof st);
	loss = rl_policy_loss(&c, N, lp, old, wh, denom, g, &st);
	json_object_set_new(out, "policy", json_pack("{s:f,s:o,s:o}", "loss", loss, "grad",
						     array(g, N), "stats", stats(&st)));
	memset(g, 0, N * sizeof *g);
	memset(&st, 0, sizeof st);
	loss = rl_value_loss(&c, N, val, oldv, ret, denom, g, &st);
	json_object_set_new(out, "value", json_pack("{s:f,s:o,s:o}", "loss", loss, "grad",
						    array(g, N), "stats", stats(&st)));
	memset(g, 0, N * sizeof *g);
	memset(&st, 0, sizeof st);
	loss = rl_kl_loss(&c, N, lp, ref, denom, g, &st);
	json_object_set_new(out, "kl_loss", json_pack("{s:f,s:o,s:o}", "loss", loss, "grad",
						      array(g, N), "stats", stats(&st)));
	memset(g, 0, N * sizeof *g);
	memset(&st, 0, sizeof st);
	loss = rl_entropy_bonus(&c, N, ent, denom, g, &st);
	json_object_set_new(out, "entropy", json_pack("{s:f,s:o,s:o}", "loss", loss, "grad",
						      array(g, N), "stats", stats(&st)));

	json_object_set_new(out, "adamw", adamw(need(in, "adamw")));
	json_object_set_new(out, "clip", clip(need(in, "clip")));
	json_dumpf(out, stdout, JSON_COMPACT | JSON_REAL_PRECISION(17));
	putchar('\n');
	json_decref(out);
	json_decref(in);
	free(off);
	free(lp);
	free(old);
	free(ref);
	free(val);
	free(oldv);
	free(ent);
	free(score);
	free(k);
	free(r);
	free(adv);
	free(ret);
	free(wh);
	free(g);
	return 0;
}
