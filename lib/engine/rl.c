/* PPO and GRPO over response arrays: advantages, losses and their
 * gradients.  The conventions (packing, token-mean, which positions) are
 * at the top of rl.h; the formulas are verl's, cited per function there. */
#include <math.h>
#include <string.h>

#include "engine/rl.h"

void rl_stats_add(struct rl_stats *to, const struct rl_stats *from)
{
	to->pg_loss += from->pg_loss;
	to->pg_clipfrac += from->pg_clipfrac;
	to->pg_clipfrac_lower += from->pg_clipfrac_lower;
	to->ppo_kl += from->ppo_kl;
	to->kl_loss += from->kl_loss;
	to->entropy += from->entropy;
	to->vf_loss += from->vf_loss;
	to->vf_clipfrac += from->vf_clipfrac;
}

/* clamp(x, lo, hi), and whether x was inside (where torch's clamp passes
 * the gradient: both ends included) when inside is not NULL. */
static double clamp(double x, double lo, double hi, bool *inside)
{
	if (inside)
		*inside = x >= lo && x <= hi;
	return x < lo ? lo : x > hi ? hi : x;
}

double rl_kl_token(enum rl_kl k, double logp, double ref_logp)
{
	double x;

	if (k == RL_KL_K1)
		return logp - ref_logp;
	x = clamp(ref_logp - logp, -RL_LOGRATIO_CLAMP, RL_LOGRATIO_CLAMP, NULL);
	return clamp(exp(x) - x - 1, -RL_K3_CLAMP, RL_K3_CLAMP, NULL);
}

double rl_kl_token_grad(enum rl_kl k, double logp, double ref_logp)
{
	bool in1, in2;
	double x;

	if (k == RL_KL_K1)
		return 1;
	x = clamp(ref_logp - logp, -RL_LOGRATIO_CLAMP, RL_LOGRATIO_CLAMP, &in1);
	clamp(exp(x) - x - 1, -RL_K3_CLAMP, RL_K3_CLAMP, &in2);
	/* d/dℓ (e^x − x − 1) with dx/dℓ = −1 */
	return in1 && in2 ? 1 - exp(x) : 0;
}

double rl_kl(enum rl_kl k, size_t n, const float *logp, const float *ref_logp, float *out)
{
	double sum = 0;

	for (size_t i = 0; i < n; i++) {
		double kl = rl_kl_token(k, logp[i], ref_logp[i]);

		out[i] = (float)kl;
		sum += kl;
	}
	return sum;
}

double rl_shape_rewards(const struct rl_config *c, size_t B, const size_t *off,
			const float *logp, const float *ref_logp, const float *scores,
			float *rewards)
{
	double sum = 0;

	for (size_t b = 0; b < B; b++) {
		for (size_t t = off[b]; t < off[b + 1]; t++) {
			double kl = 0;

			if (c->use_kl_in_reward) {
				kl = rl_kl_token(c->kl_penalty, logp[t], ref_logp[t]);
				sum += kl;
			}
			rewards[t] = (float)(-c->kl_coef * kl +
					     (t + 1 == off[b + 1] ? scores[b] : 0.0));
		}
	}
	return sum;
}

void rl_response_sums(size_t B, const size_t *off, const float *x, float *sums)
{
	for (size_t b = 0; b < B; b++)
		sums[b] = (float)rl_sum(off[b + 1] - off[b], x + off[b]);
}

void rl_gae(size_t B, const size_t *off, const float *rewards, const float *values,
	    double gamma, double lam, float *adv, float *ret)
{
	for (size_t b = 0; b < B; b++) {
		double next_value = 0, next_adv = 0;

		for (size_t t = off[b + 1]; t-- > off[b];) {
			double delta = rewards[t] + gamma * next_value - values[t];

			next_adv = delta + gamma * lam * next_adv;
			next_value = values[t];
			adv[t] = (float)next_adv;
			ret[t] = (float)(next_adv + values[t]);
		}
	}
}

double rl_sum(size_t n, const float *x)
{
	double s = 0;

	for (size_t i = 0; i < n; i++)
		s += x[i];
	return s;
}

double rl_sum_sq_dev(size_t n, const float *x, double mean)
{
	double s = 0;

	for (size_t i = 0; i < n; i++)
		s += (x[i] - mean) * (x[i] - mean);
	return s;
}

void rl_whiten_apply(size_t n, float *x, double mean, double var)
{
	double scale = 1 / sqrt(var + RL_WHITEN_EPS);

	for (size_t i = 0; i < n; i++)
		x[i] = (float)((x[i] - mean) * scale);
}

void rl_whiten(size_t n, float *x)
{
	double mean, var;

	if (n == 0)
		return;
	mean = rl_sum(n, x) / (double)n;
	var = n > 1 ? rl_sum_sq_dev(n, x, mean) / (double)(n - 1) : 0;
	rl_whiten_apply(n, x, mean, var);
}

int rl_grpo_advantages(size_t B, const size_t *off, size_t group, const float *scores,
		       bool norm_by_std, float *adv, struct err *e)
{
	if (group == 0 || B % group)
		return err_set(e, NR_EINPUT, "%zu responses do not split into groups of %zu",
			       B, group);
	for (size_t g = 0; g < B; g += group) {
		double mean = 0, var = 0, std = 1;

		if (group > 1) {
			for (size_t i = g; i < g + group; i++)
				mean += scores[i];
			mean /= (double)group;
			for (size_t i = g; i < g + group; i++)
				var += (scores[i] - mean) * (scores[i] - mean);
			std = sqrt(var / (double)(group - 1));
		}
		for (size_t i = g; i < g + group; i++) {
			double a = scores[i] - mean;

			if (norm_by_std)
				a /= std + RL_GRPO_EPS;
			for (size_t t = off[i]; t < off[i + 1]; t++)
				adv[t] = (float)a;
		}
	}
	return NR_OK;
}

double rl_policy_loss(const struct rl_config *c, size_t n, const float *logp,
		      const float *old_logp, const float *adv, double denom, float *dlogp,
		      struct rl_stats *st)
{
	double loss = 0, clipped = 0, lower = 0, kl = 0;

	for (size_t i = 0; i < n; i++) {
		bool in_ratio;
		double a = adv[i];
		double x = clamp((double)logp[i] - old_logp[i], -RL_LOGRATIO_CLAMP,
				 RL_LOGRATIO_CLAMP, &in_ratio);
		double rho = exp(x);
		double l1 = -a * rho;
		double l2 = -a * clamp(rho, 1 - c->clip_ratio_low, 1 + c->clip_ratio_high, NULL);
		double l = l1, g = -a * rho;

		/* L2 > L1 only where the clip holds ρ, so L2 is flat there. */
		if (l2 > l1) {
			l = l2;
			g = 0;
			clipped++;
		}
		if (a < 0 && l > -a * c->clip_ratio_c) {
			l = -a * c->clip_ratio_c;
			g = 0;
			lower++;
		}
		loss += l;
		kl -= x;
		if (dlogp)
			dlogp[i] += (float)((in_ratio ? g : 0) / denom);
	}
	if (st) {
		st->pg_loss += loss / denom;
		st->pg_clipfrac += clipped / denom;
		st->pg_clipfrac_lower += lower / denom;
		st->ppo_kl += kl / denom;
	}
	return loss / denom;
}

double rl_value_loss(const struct rl_config *c, size_t n, const float *value,
		     const float *old_value, const float *ret, double denom, float *dvalue,
		     struct rl_stats *st)
{
	double loss = 0, clipped = 0, eps = c->cliprange_value;

	for (size_t i = 0; i < n; i++) {
		double v = value[i], r = ret[i];
		double vc = clamp(v, (double)old_value[i] - eps, (double)old_value[i] + eps, NULL);
		double l1 = (v - r) * (v - r), l2 = (vc - r) * (vc - r);
		double l = l1, g = v - r;

		/* L2 > L1 only where the clip holds V, so L2 is flat there. */
		if (l2 > l1) {
			l = l2;
			g = 0;
			clipped++;
		}
		loss += 0.5 * l;
		if (dvalue)
			dvalue[i] += (float)(g / denom);
	}
	if (st) {
		st->vf_loss += loss / denom;
		st->vf_clipfrac += clipped / denom;
	}
	return loss / denom;
}

double rl_kl_loss(const struct rl_config *c, size_t n, const float *logp,
		  const float *ref_logp, double denom, float *dlogp, struct rl_stats *st)
{
	double sum = 0;

	for (size_t i = 0; i < n; i++) {
		sum += rl_kl_token(c->kl_loss_type, logp[i], ref_logp[i]);
		if (dlogp)
			dlogp[i] += (float)(c->kl_loss_coef *
					    rl_kl_token_grad(c->kl_loss_type, logp[i], ref_logp[i]) /
					    denom);
	}
	if (st)
		st->kl_loss += sum / denom;
	return c->kl_loss_coef * sum / denom;
}

double rl_entropy_bonus(const struct rl_config *c, size_t n, const float *entropy,
			double denom, float *dentropy, struct rl_stats *st)
{
	double sum = rl_sum(n, entropy);

	if (dentropy)
		for (size_t i = 0; i < n; i++)
			dentropy[i] += (float)(-c->entropy_coeff / denom);
	if (st)
		st->entropy += sum / denom;
	return -c->entropy_coeff * sum / denom;
}

void rl_gather(size_t B, const size_t *start, const size_t *prompt_len, const size_t *off,
	       const float *per_pos, float *resp)
{
	for (size_t b = 0; b < B; b++) {
		const float *src = per_pos + start[b] + prompt_len[b] - 1;

		memcpy(resp + off[b], src, (off[b + 1] - off[b]) * sizeof *resp);
	}
}

void rl_scatter(size_t B, const size_t *start, const size_t *prompt_len, const size_t *off,
		const float *resp, float *per_pos)
{
	for (size_t b = 0; b < B; b++) {
		float *dst = per_pos + start[b] + prompt_len[b] - 1;

		for (size_t j = 0; j < off[b + 1] - off[b]; j++)
			dst[j] += resp[off[b] + j];
	}
}
