/* The RL algorithms of PPO and GRPO, as verl's core_algos and OpenRLHF
 * compute them, as pure functions over per-token arrays: KL estimators,
 * reward shaping, GAE, advantage whitening, GRPO group advantages, and the
 * policy, value, KL and entropy losses with their gradients with respect
 * to the per-token inputs (log-probs, values, entropies).  No model code:
 * the model turns those per-token gradients into parameter gradients.
 *
 * Response arrays.  A batch's B responses are packed back to back: every
 * per-token array here has N = off[B] entries, and response b is entries
 * off[b] … off[b+1] − 1 (off[0] = 0).  Entry off[b] + j stands for the
 * j-th generated token y_j of response b (the EOS, when generation stopped
 * on it, is the last response token and is trained like the others):
 *   logp      log π(y_j | prompt, y_<j) under the model being trained,
 *   old_logp  the same under the actor that generated (at rollout),
 *   ref_logp  the same under the frozen reference,
 *   value     the critic's value of the state before y_j,
 *   entropy   the entropy of the distribution y_j was drawn from.
 * All of these are read at the position that predicts y_j, one before
 * y_j's own: in the model's packed batch (sequence b = its P_b prompt
 * tokens then its response, starting at start[b]) that is position
 * start[b] + P_b + j − 1.  rl_gather and rl_scatter move per-token values
 * between the model's per-position arrays and response arrays.  Prompt
 * tokens have no entry: no loss, no advantage.  There is no padding, so
 * every entry is a valid token.
 *
 * Token-mean.  Each loss is Σ over the response tokens it is given of the
 * per-token loss, divided by denom, the number of response tokens in the
 * whole mini-batch (over all its micro-batches and all data-parallel
 * ranks).  So the losses and gradients of a mini-batch's parts add up to
 * exactly the mini-batch's token-mean, whatever the split.  (verl averages
 * per micro-batch and then over micro-batches, which equals this when the
 * micro-batches hold equally many tokens.)  Gradients are those of that
 * token-mean, so they already carry 1/denom, and are ADDED to the arrays
 * given (the caller zeroes them once, and the policy and KL losses add
 * into the same d/dlogp); any gradient array may be NULL.  denom > 0.
 * Per-token math runs in double.
 *
 * A step in these calls, as verl makes it:
 *   PPO   after rollout: rl_shape_rewards(old_logp, ref_logp, scores),
 *         rl_gae(rewards, the critic's values at rollout) → adv, ret,
 *         rl_whiten(adv) over the whole batch; then per mini-batch the
 *         actor's rl_policy_loss(logp, old_logp, adv) (+ rl_kl_loss when
 *         use_kl_loss, + rl_entropy_bonus) and the critic's
 *         rl_value_loss(value, value at rollout, ret).
 *   GRPO  after rollout: rl_grpo_advantages(scores) → adv (no critic, no
 *         whitening), the scores rl_response_sums of rl_shape_rewards'
 *         rewards when use_kl_in_reward; per mini-batch rl_policy_loss +
 *         rl_kl_loss (+ rl_entropy_bonus). */
#ifndef NEREUS_RL_H
#define NEREUS_RL_H

#include <stdbool.h>
#include <stddef.h>

#include "common/err.h"
#include "doc/rlconf.h"
#include "engine/optim.h"


#define RL_GRPO_EPS 1e-6     /* verl's epsilon in (s − mean) / (std + eps) */
#define RL_WHITEN_EPS 1e-8   /* verl's masked_whiten: (x − mean) / sqrt(var + eps) */
#define RL_LOGRATIO_CLAMP 20 /* verl clamps log-ratios to ±20 before exp */
#define RL_K3_CLAMP 10       /* and k3 to ±10 */


/* Per-token statistics for a step record, each a token-mean over the
 * mini-batch accumulated like the loss (Σ over the tokens given / denom),
 * so the parts of a mini-batch add up.  Each loss function adds only its
 * own fields. */
struct rl_stats {
	double pg_loss;           /* the clipped policy loss */
	double pg_clipfrac;       /* share of tokens where the clipped surrogate
				   * was the larger (verl pg_clipfrac) */
	double pg_clipfrac_lower; /* share held at −c·A by the dual clip */
	double ppo_kl;            /* mean old − new log-prob (verl ppo_kl) */
	double kl_loss;           /* mean KL estimate, before its coefficient */
	double entropy;           /* mean entropy */
	double vf_loss;           /* the clipped value loss */
	double vf_clipfrac;       /* share where the clipped value loss was larger */
};
void rl_stats_add(struct rl_stats *to, const struct rl_stats *from);

/* KL estimators of one token, and d/dlogp.  k1 = ℓ − ℓʳ.  k3 ("low_var_kl")
 * = e^x − x − 1 with x = ℓʳ − ℓ clamped to ±20, then k3 clamped to ±10
 * (verl); its derivative is 0 where a clamp holds. */
double rl_kl_token(enum rl_kl k, double logp, double ref_logp);
double rl_kl_token_grad(enum rl_kl k, double logp, double ref_logp);
/* out[i] = rl_kl_token over n tokens; returns their sum. */
double rl_kl(enum rl_kl k, size_t n, const float *logp, const float *ref_logp, float *out);

/* Token rewards for PPO (and GRPO with use_kl_in_reward): r = −kl_coef · KL(kl_penalty) per token when
 * use_kl_in_reward (else 0), plus scores[b] at response b's last token.
 * A response of no tokens drops its score.  Returns Σ KL over the tokens
 * (0 when the KL is not in the reward): divide by the batch's tokens for
 * the step record's "kl". */
double rl_shape_rewards(const struct rl_config *c, size_t B, const size_t *off,
			const float *logp, const float *ref_logp, const float *scores,
			float *rewards);

/* sums[b] = Σ x over response b's tokens.  GRPO with use_kl_in_reward
 * takes these of rl_shape_rewards' token rewards as its scores (verl's
 * compute_grpo_outcome_advantage sums token_level_rewards): a response's
 * score less kl_coef · its KL summed over its tokens. */
void rl_response_sums(size_t B, const size_t *off, const float *x, float *sums);

/* GAE per response: δ_t = r_t + γ V_{t+1} − V_t with V after the last
 * token 0; A_t = δ_t + γλ A_{t+1}; returns R_t = A_t + V_t.  Advantages
 * are not whitened here (rl_whiten, over the whole batch, does that). */
void rl_gae(size_t B, const size_t *off, const float *rewards, const float *values,
	    double gamma, double lam, float *adv, float *ret);

/* Whitening over all response tokens of the batch, verl's masked_whiten:
 * x ← (x − mean) / sqrt(var + 1e-8), var the unbiased (n − 1) variance
 * (0 when n < 2).  Split in three so that the batch may be spread over
 * ranks: Σx (all-reduce it and the count, mean = Σ / count), then
 * Σ(x − mean)² (all-reduce, var = Σ / (count − 1)), then the update. */
double rl_sum(size_t n, const float *x);
double rl_sum_sq_dev(size_t n, const float *x, double mean);
void rl_whiten_apply(size_t n, float *x, double mean, double var);
/* The three on one process. */
void rl_whiten(size_t n, float *x);

/* GRPO: the B responses come in groups of `group` consecutive ones (the
 * samples of one prompt; B a multiple of group).  Each response's
 * advantage is (s − mean) / (std + 1e-6) over its group's scores, std the
 * unbiased one, or s − mean without norm_by_std (Dr. GRPO); a group of one
 * has mean 0 and std 1 (verl).  A group whose scores are all equal gets 0.
 * Written to every token of the response in adv (verl uses the same as
 * returns).  NR_EINPUT when group is 0 or does not divide B. */
int rl_grpo_advantages(size_t B, const size_t *off, size_t group, const float *scores,
		       bool norm_by_std, float *adv, struct err *e);

/* Clipped policy loss (verl compute_policy_loss_vanilla), per token with
 * ρ = exp(clamp(ℓ − ℓ⁰, ±20)):
 *   L1 = −A ρ, L2 = −A clip(ρ, 1 − clip_ratio_low, 1 + clip_ratio_high),
 *   L = max(L1, L2), and for A < 0 the dual clip L = min(L, −A c).
 * dL/dℓ = −A ρ where L is L1 (unclipped), else 0.  Returns the token-mean
 * over denom (see the top); adds to dlogp; stats pg_loss, pg_clipfrac,
 * pg_clipfrac_lower, ppo_kl. */
double rl_policy_loss(const struct rl_config *c, size_t n, const float *logp,
		      const float *old_logp, const float *adv, double denom, float *dlogp,
		      struct rl_stats *st);

/* Clipped value loss (verl compute_value_loss), per token:
 * ½ max((V − R)², (clip(V, V⁰ − ε_v, V⁰ + ε_v) − R)²) with V the critic's
 * new value, V⁰ its value at rollout, R the return.  dL/dV = V − R where
 * the unclipped term is the larger, else 0.  Returns the token-mean; adds
 * to dvalue; stats vf_loss, vf_clipfrac. */
double rl_value_loss(const struct rl_config *c, size_t n, const float *value,
		     const float *old_value, const float *ret, double denom, float *dvalue,
		     struct rl_stats *st);

/* KL loss (GRPO; verl use_kl_loss): kl_loss_coef · KL(kl_loss_type)
 * per token.  Returns the token-mean with its coefficient; adds to dlogp;
 * stat kl_loss (without the coefficient). */
double rl_kl_loss(const struct rl_config *c, size_t n, const float *logp,
		  const float *ref_logp, double denom, float *dlogp, struct rl_stats *st);

/* Entropy bonus: −entropy_coeff · H per token (a loss, so minimising it
 * raises the entropy).  Returns the token-mean; adds −entropy_coeff / denom
 * to dentropy; stat entropy (the mean H, for the record even when the
 * coefficient is 0). */
double rl_entropy_bonus(const struct rl_config *c, size_t n, const float *entropy,
			double denom, float *dentropy, struct rl_stats *st);

/* Between the model's packed batch and response arrays (see the top):
 * sequence b starts at start[b] with prompt_len[b] prompt tokens (>= 1),
 * and its response has off[b+1] − off[b] tokens.  rl_gather copies
 * per_pos[start[b] + prompt_len[b] + j − 1] to resp[off[b] + j];
 * rl_scatter adds resp back there (per-position gradients). */
void rl_gather(size_t B, const size_t *start, const size_t *prompt_len, const size_t *off,
	       const float *per_pos, float *resp);
void rl_scatter(size_t B, const size_t *start, const size_t *prompt_len, const size_t *off,
		const float *resp, float *per_pos);

#endif
