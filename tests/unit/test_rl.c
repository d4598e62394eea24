/* The RL algorithms (lib/engine/rl.h): GAE, whitening, GRPO groups, the
 * clipping regions of the policy and value losses, the dual clip and the
 * KL estimators on cases worked by hand; every gradient against central
 * finite differences; token-mean that adds up over a mini-batch's parts. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/rl.h"
#include "unit.h"

static struct rl_config ppo(void)
{
	struct rl_config c;

	rlconf_defaults(&c, RL_PPO);
	return c;
}

/* One response of three tokens (worked by hand), then one of one token. */
static void gae_by_hand(void)
{
	const size_t off[] = { 0, 3, 4 };
	const float r[] = { 0, 0, 1, 2 }, v[] = { 0.5f, 0.6f, 0.7f, 0.5f };
	float adv[4], ret[4];

	/* γ 0.9, λ 0.8: δ2 = 1 − 0.7 = 0.3 = A2;
	 * δ1 = 0.9·0.7 − 0.6 = 0.03, A1 = 0.03 + 0.72·0.3 = 0.246;
	 * δ0 = 0.9·0.6 − 0.5 = 0.04, A0 = 0.04 + 0.72·0.246 = 0.21712;
	 * R = A + V.  The next response starts afresh: A = 2 − 0.5. */
	rl_gae(2, off, r, v, 0.9, 0.8, adv, ret);
	CHECK_NEAR(adv[2], 0.3, 1e-6);
	CHECK_NEAR(adv[1], 0.246, 1e-6);
	CHECK_NEAR(adv[0], 0.21712, 1e-6);
	CHECK_NEAR(ret[0], 0.71712, 1e-6);
	CHECK_NEAR(ret[1], 0.846, 1e-6);
	CHECK_NEAR(ret[2], 1.0, 1e-6);
	CHECK_NEAR(adv[3], 1.5, 1e-6);
	CHECK_NEAR(ret[3], 2.0, 1e-6);

	/* γ = λ = 1 (verl's default): every advantage is the score minus V. */
	rl_gae(1, off, r, v, 1, 1, adv, ret);
	CHECK_NEAR(adv[0], 0.5, 1e-6);
	CHECK_NEAR(adv[1], 0.4, 1e-6);
	CHECK_NEAR(adv[2], 0.3, 1e-6);
	CHECK_NEAR(ret[0], 1.0, 1e-6);
}

static void shaped_rewards(void)
{
	struct rl_config c = ppo();
	const size_t off[] = { 0, 2, 2, 3 };
	const float lp[] = { -1, -2, -0.5f }, ref[] = { -1.5f, -1, -0.5f };
	const float score[] = { 3, 7, -1 };
	float r[3];
	double sum;

	/* k1 = 0.5, −1, 0; β = 0.1.  The empty response drops its score. */
	c.kl_coef = 0.1;
	sum = rl_shape_rewards(&c, 3, off, lp, ref, score, r);
	CHECK_NEAR(sum, -0.5, 1e-12);
	CHECK_NEAR(r[0], -0.05, 1e-6);
	CHECK_NEAR(r[1], 0.1 + 3, 1e-6);
	CHECK_NEAR(r[2], -1, 1e-6);

	c.use_kl_in_reward = false;
	CHECK(rl_shape_rewards(&c, 3, off, lp, ref, score, r) == 0);
	CHECK(r[0] == 0 && r[1] == 3 && r[2] == -1);
}

static void whitening(void)
{
	float x[] = { 1, 2, 3, 4 }, y[4];
	double mean, var;

	/* mean 2.5; unbiased variance (2.25 + 0.25 + 0.25 + 2.25) / 3 = 5/3 */
	memcpy(y, x, sizeof x);
	rl_whiten(4, x);
	CHECK_NEAR(x[0], -1.5 / sqrt(5.0 / 3 + 1e-8), 1e-6);
	CHECK_NEAR(x[3], 1.5 / sqrt(5.0 / 3 + 1e-8), 1e-6);
	CHECK(fabs(rl_sum(4, x)) < 1e-6);
	CHECK_NEAR(rl_sum_sq_dev(4, x, 0) / 3, 1, 1e-6);

	/* The split form over two "ranks" gives the same. */
	mean = (rl_sum(2, y) + rl_sum(2, y + 2)) / 4;
	var = (rl_sum_sq_dev(2, y, mean) + rl_sum_sq_dev(2, y + 2, mean)) / 3;
	rl_whiten_apply(2, y, mean, var);
	rl_whiten_apply(2, y + 2, mean, var);
	for (int i = 0; i < 4; i++)
		CHECK(y[i] == x[i]);

	/* One token: no variance, so it becomes 0. */
	y[0] = 5;
	rl_whiten(1, y);
	CHECK(y[0] == 0);
}

static void grpo_groups(void)
{
	/* Three prompts, three samples each; responses of 1 or 2 tokens. */
	const size_t off[] = { 0, 1, 3, 4, 5, 6, 8, 9, 10, 11 };
	const float s[] = { 1, 0, 0, 1, 1, 1, 0.5f, 0.25f, 0 };
	float a[11];
	struct err e;

	/* Group 1: mean 1/3, std sqrt(((2/3)² + 2 (1/3)²) / 2) = sqrt(1/3). */
	CHECK(rl_grpo_advantages(9, off, 3, s, true, a, &e) == NR_OK);
	CHECK_NEAR(a[0], (2.0 / 3) / (sqrt(1.0 / 3) + 1e-6), 1e-6);
	CHECK_NEAR(a[1], (-1.0 / 3) / (sqrt(1.0 / 3) + 1e-6), 1e-6);
	CHECK(a[1] == a[2] && a[2] == a[3]);
	/* Group 2 has no spread: no advantage, not a division by zero. */
	CHECK(a[4] == 0 && a[5] == 0 && a[6] == 0 && a[7] == 0);
	/* Group 3: mean 0.25, std 0.25. */
	CHECK_NEAR(a[8], 0.25 / (0.25 + 1e-6), 1e-6);
	CHECK(a[9] == 0);
	CHECK_NEAR(a[10], -0.25 / (0.25 + 1e-6), 1e-6);

	/* Dr. GRPO: the mean only. */
	CHECK(rl_grpo_advantages(9, off, 3, s, false, a, &e) == NR_OK);
	CHECK_NEAR(a[0], 2.0 / 3, 1e-6);
	CHECK_NEAR(a[8], 0.25, 1e-6);

	/* Groups of one: mean 0, std 1 (verl). */
	CHECK(rl_grpo_advantages(9, off, 1, s, true, a, &e) == NR_OK);
	CHECK_NEAR(a[0], 1 / (1 + 1e-6), 1e-6);
	CHECK_NEAR(a[8], 0.5 / (1 + 1e-6), 1e-6);

	CHECK(rl_grpo_advantages(9, off, 2, s, true, a, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "groups of 2") != NULL);
	CHECK(rl_grpo_advantages(9, off, 0, s, true, a, &e) == NR_EINPUT);
}

/* GRPO with the KL in the reward, as verl: the token rewards' sum per
 * response is its score in the groups.  Two groups of two. */
static void grpo_kl_in_reward(void)
{
	struct rl_config c;
	const size_t off[] = { 0, 2, 3, 5, 6 };
	/* k1 = 0.2, 0.4 | 0 | 1, 1 | −0.5 */
	const float lp[] = { -1, -1, -2, -1, -1, -1.5f }, ref[] = { -1.2f, -1.4f, -2, -2, -2, -1 };
	const float s[] = { 1, 0, 1, 1 };
	float r[6], sums[4], a[6];
	struct err e;

	rlconf_defaults(&c, RL_GRPO);
	c.use_kl_in_reward = true;
	c.kl_penalty = RL_KL_K1;
	c.kl_coef = 0.5;
	/* scores less 0.5 Σ k1: 0.7, 0, 0, 1.25 */
	CHECK_NEAR(rl_shape_rewards(&c, 4, off, lp, ref, s, r), 2.1, 1e-6);
	rl_response_sums(4, off, r, sums);
	CHECK_NEAR(sums[0], 0.7, 1e-6);
	CHECK_NEAR(sums[1], 0, 1e-6);
	CHECK_NEAR(sums[2], 0, 1e-6);
	CHECK_NEAR(sums[3], 1.25, 1e-6);
	/* group 1: mean 0.35, std 0.35 √2; group 2: mean 0.625, std 0.625 √2
	 * (its scores alone were equal: no advantage) */
	CHECK(rl_grpo_advantages(4, off, 2, sums, true, a, &e) == NR_OK);
	CHECK_NEAR(a[0], 0.35 / (0.35 * sqrt(2) + 1e-6), 1e-6);
	CHECK(a[1] == a[0]);
	CHECK_NEAR(a[2], -0.35 / (0.35 * sqrt(2) + 1e-6), 1e-6);
	CHECK_NEAR(a[3], -0.625 / (0.625 * sqrt(2) + 1e-6), 1e-6);
	CHECK_NEAR(a[5], 0.625 / (0.625 * sqrt(2) + 1e-6), 1e-6);
	CHECK(rl_grpo_advantages(4, off, 2, sums, false, a, &e) == NR_OK);
	CHECK_NEAR(a[0], 0.35, 1e-6);
	CHECK_NEAR(a[5], 0.625, 1e-6);
}

/* Each clipping region of the policy loss, ε 0.2, c 3, on one token each. */
static void policy_clip_regions(void)
{
	struct rl_config c = ppo();
	const float rho[] = { 1.5f, 0.5f, 1.5f, 0.5f, 4, 1.1f };
	const float adv[] = { 1, 1, -1, -1, -1, 1 };
	/* loss by hand: A>0 ρ>1+ε clipped −1.2; A>0 ρ<1−ε unclipped −0.5;
	 * A<0 ρ>1+ε unclipped 1.5; A<0 ρ<1−ε clipped 0.8; A<0 ρ=4: max 4,
	 * held at −A c = 3 by the dual clip; inside −1.1. */
	const double want[] = { -1.2, -0.5, 1.5, 0.8, 3, -1.1 };
	const double grad[] = { 0, -0.5, 1.5, 0, 0, -1.1 };
	float lp[6], old[6] = { 0 }, g[6] = { 0 };
	struct rl_stats st = { 0 };
	double sum = 0, loss;

	for (int i = 0; i < 6; i++) {
		lp[i] = logf(rho[i]);
		sum += want[i];
	}
	loss = rl_policy_loss(&c, 6, lp, old, adv, 6, g, &st);
	CHECK_NEAR(loss, sum / 6, 1e-6);
	for (int i = 0; i < 6; i++) {
		float one = 0;

		CHECK_NEAR(rl_policy_loss(&c, 1, lp + i, old, adv + i, 1, &one, NULL), want[i], 1e-6);
		CHECK_NEAR(one, grad[i], 1e-6);
		CHECK_NEAR(g[i], grad[i] / 6, 1e-6);
	}
	CHECK_NEAR(st.pg_loss, sum / 6, 1e-6);
	CHECK_NEAR(st.pg_clipfrac, 2.0 / 6, 1e-12);
	CHECK_NEAR(st.pg_clipfrac_lower, 1.0 / 6, 1e-12);
	sum = 0;
	for (int i = 0; i < 6; i++)
		sum -= lp[i];
	CHECK_NEAR(st.ppo_kl, sum / 6, 1e-12);

	/* Clip-higher: ε_high 0.28 lets ρ = 1.25 through for A > 0. */
	c.clip_ratio_high = 0.28;
	lp[0] = logf(1.25f);
	g[0] = 0;
	CHECK_NEAR(rl_policy_loss(&c, 1, lp, old, adv, 1, g, NULL), -1.25, 1e-6);
	CHECK_NEAR(g[0], -1.25, 1e-6);

	/* A ratio past e^20 is clamped there and passes no gradient. */
	lp[0] = 25;
	g[0] = 0;
	CHECK_NEAR(rl_policy_loss(&c, 1, lp, old, adv + 2, 1, g, NULL), 3, 1e-9);
	CHECK(g[0] == 0);
}

static void value_clip(void)
{
	struct rl_config c = ppo();
	/* ε_v 0.5.  V 1 from V⁰ 0 toward R 2 is clipped to 0.5: ½·1.5² = 1.125,
	 * no gradient.  V 0.3 is inside: ½·1.7² and V − R.  V −1 from V⁰ 0
	 * with R 0: the clipped −0.5 is nearer R, so the unclipped ½·1 counts. */
	const float v[] = { 1, 0.3f, -1 }, old[] = { 0, 0, 0 }, ret[] = { 2, 2, 0 };
	const double want[] = { 1.125, 0.5 * 1.7 * 1.7, 0.5 };
	const double grad[] = { 0, -1.7, -1 };
	float g[3] = { 0 };
	struct rl_stats st = { 0 };

	CHECK_NEAR(rl_value_loss(&c, 3, v, old, ret, 3, g, &st), (want[0] + want[1] + want[2]) / 3,
		   1e-6);
	for (int i = 0; i < 3; i++)
		CHECK_NEAR(g[i], grad[i] / 3, 1e-6);
	CHECK_NEAR(st.vf_clipfrac, 1.0 / 3, 1e-12);
	CHECK_NEAR(st.vf_loss, (want[0] + want[1] + want[2]) / 3, 1e-6);
}

static void kl_estimators(void)
{
	struct rl_config c;
	const float lp[] = { 0, 0, 0, 0, 0 }, ref[] = { 1, -2, 3, -30, 0 };
	float g[5] = { 0 };
	struct rl_stats st = { 0 };
	double loss;

	CHECK_NEAR(rl_kl_token(RL_KL_K1, -1, -3), 2, 1e-12);
	CHECK(rl_kl_token_grad(RL_KL_K1, -1, -3) == 1);
	/* k3 = e^x − x − 1, x = ref − logp */
	CHECK_NEAR(rl_kl_token(RL_KL_K3, 0, 1), exp(1) - 2, 1e-12);
	CHECK_NEAR(rl_kl_token_grad(RL_KL_K3, 0, 1), 1 - exp(1), 1e-12);
	CHECK_NEAR(rl_kl_token(RL_KL_K3, 0, -2), exp(-2) + 1, 1e-12);
	/* e^3 − 4 = 16.1 is clamped to 10, and so is x = −30 (held at −20,
	 * e^−20 + 19): no gradient through either clamp */
	CHECK(rl_kl_token(RL_KL_K3, 0, 3) == 10);
	CHECK(rl_kl_token_grad(RL_KL_K3, 0, 3) == 0);
	CHECK(rl_kl_token(RL_KL_K3, 0, -30) == 10);
	CHECK(rl_kl_token_grad(RL_KL_K3, 0, -30) == 0);
	CHECK(rl_kl_token(RL_KL_K3, -0.7, -0.7) == 0);

	rlconf_defaults(&c, RL_GRPO);
	c.kl_loss_coef = 0.5;
	loss = rl_kl_loss(&c, 5, lp, ref, 10, g, &st);
	CHECK_NEAR(st.kl_loss, (exp(1) - 2 + exp(-2) + 1 + 10 + 10 + 0) / 10, 1e-6);
	CHECK_NEAR(loss, 0.5 * st.kl_loss, 1e-12);
	CHECK_NEAR(g[0], 0.5 * (1 - exp(1)) / 10, 1e-6);
	CHECK(g[2] == 0 && g[3] == 0 && g[4] == 0);
}

static void entropy_bonus(void)
{
	struct rl_config c = ppo();
	const float h[] = { 1, 2, 3 };
	float g[3] = { 0 };
	struct rl_stats st = { 0 };

	CHECK(rl_entropy_bonus(&c, 3, h, 4, g, &st) == 0);
	CHECK_NEAR(st.entropy, 6.0 / 4, 1e-12);
	c.entropy_coeff = 0.01;
	CHECK_NEAR(rl_entropy_bonus(&c, 3, h, 4, g, NULL), -0.01 * 6 / 4, 1e-12);
	CHECK_NEAR(g[1], -0.01 / 4, 1e-6);
}

/* Uniform in [lo, hi) from a small fixed generator. */
static double uni(unsigned *s, double lo, double hi)
{
	*s = *s * 1103515245u + 12345u;
	return lo + (hi - lo) * ((*s >> 8) & 0xffffff) / 16777216.0;
}

enum which { POLICY, VALUE, KL3, KL1, ENTROPY };

/* The loss of case w as a function of the array x it differentiates. */
static double loss_of(enum which w, const struct rl_config *c, size_t n, const float *x,
		      const float *a, const float *b, float *g)
{
	switch (w) {
	case POLICY:
		return rl_policy_loss(c, n, x, a, b, 7, g, NULL);
	case VALUE:
		return rl_value_loss(c, n, x, a, b, 7, g, NULL);
	case KL1:
	case KL3:
		return rl_kl_loss(c, n, x, a, 7, g, NULL);
	default:
		return rl_entropy_bonus(c, n, x, 7, g, NULL);
	}
}

/* Whether a value-loss input lies within 0.01 of a kink: V at the clip
 * range's ends, or the clipped and unclipped terms nearly equal. */
static bool value_kink(double v, double old, double ret, double eps)
{
	double vc = v < old - eps ? old - eps : v > old + eps ? old + eps : v;

	return fabs(fabs(v - old) - eps) < 0.01 ||
	       (vc != v && fabs(fabs(v - ret) - fabs(vc - ret)) < 0.01);
}

/* Central differences of each input against the analytic gradient, on
 * random inputs kept clear of the kinks (none within h). */
static void finite_differences(void)
{
	struct rl_config c = ppo();
	unsigned seed = 7;
	enum { N = 40 };

	c.kl_loss_coef = 0.3;
	c.entropy_coeff = 0.05;
	c.clip_ratio_high = 0.28;
	for (int w = POLICY; w <= ENTROPY; w++) {
		float x[N], a[N], b[N], g[N] = { 0 };
		const double h = 1e-3;

		c.kl_loss_type = w == KL1 ? RL_KL_K1 : RL_KL_K3;
		for (int i = 0; i < N; i++) {
			double rho;

			x[i] = (float)uni(&seed, -3, 0);
			a[i] = (float)uni(&seed, -3, 0);
			b[i] = (float)uni(&seed, -2, 2);
			if (w == POLICY) {
				/* ratios spread over every region: kinks at 0.8,
				 * 1.28 and the dual clip's 3 */
				do
					rho = uni(&seed, 0.3, 4.5);
				while (fabs(rho - 0.8) < 0.02 || fabs(rho - 1.28) < 0.02 ||
				       fabs(rho - 3) < 0.05);
				x[i] = (float)(a[i] + log(rho));
			}
			while (w == VALUE && value_kink(x[i], a[i], b[i], c.cliprange_value))
				x[i] = (float)uni(&seed, -3, 0);
			while (w == KL3 && fabs(rl_kl_token(RL_KL_K3, x[i], a[i]) - 10) < 0.1)
				x[i] = (float)uni(&seed, -3, 0);
		}
		loss_of(w, &c, N, x, a, b, g);
		for (int i = 0; i < N; i++) {
			float xp[N], xm[N];
			double lp, lm, fd;

			memcpy(xp, x, sizeof x);
			memcpy(xm, x, sizeof x);
			xp[i] = (float)(x[i] + h);
			xm[i] = (float)(x[i] - h);
			lp = loss_of(w, &c, N, xp, a, b, NULL);
			lm = loss_of(w, &c, N, xm, a, b, NULL);
			fd = (lp - lm) / ((double)xp[i] - xm[i]);
			if (!(fabs(fd - g[i]) <= 1e-4 * fabs(fd) + 1e-7)) {
				printf("#   case %d token %d: finite difference %.9g, gradient %.9g\n",
				       w, i, fd, g[i]);
				unit_failed = 1;
			}
		}
	}
}

/* The token-mean of a mini-batch split into parts (micro-batches, ranks):
 * the parts' losses, gradients and statistics add up to the whole's. */
static void token_mean_adds_up(void)
{
	struct rl_config c = ppo();
	unsigned seed = 11;
	enum { N = 30 };
	float lp[N], old[N], adv[N], g[N] = { 0 }, gp[N] = { 0 };
	struct rl_stats whole = { 0 }, part = { 0 }, sum = { 0 };
	double l, lparts = 0;

	for (int i = 0; i < N; i++) {
		old[i] = (float)uni(&seed, -3, 0);
		lp[i] = (float)(old[i] + uni(&seed, -1.5, 1.5));
		adv[i] = (float)uni(&seed, -2, 2);
	}
	l = rl_policy_loss(&c, N, lp, old, adv, N, g, &whole);
	for (int k = 0; k < N; k += 7) {
		int n = N - k < 7 ? N - k : 7;

		memset(&part, 0, sizeof part);
		lparts += rl_policy_loss(&c, (size_t)n, lp + k, old + k, adv + k, N, gp + k, &part);
		rl_stats_add(&sum, &part);
	}
	CHECK_NEAR(lparts, l, 1e-12);
	CHECK(memcmp(g, gp, sizeof g) == 0);
	CHECK_NEAR(sum.pg_loss, whole.pg_loss, 1e-12);
	CHECK_NEAR(sum.pg_clipfrac, whole.pg_clipfrac, 1e-12);
	CHECK_NEAR(sum.ppo_kl, whole.ppo_kl, 1e-12);
	CHECK(whole.pg_clipfrac > 0 && whole.pg_clipfrac < 1);
}

static void gather_scatter(void)
{
	/* Two sequences packed: prompt 2 + response 3, prompt 1 + response 2. */
	const size_t start[] = { 0, 5 }, plen[] = { 2, 1 }, off[] = { 0, 3, 5 };
	const float pos[] = { 10, 11, 12, 13, 14, 20, 21, 22 };
	float resp[5], back[8] = { 0 };

	rl_gather(2, start, plen, off, pos, resp);
	/* response token j is predicted at position start + prompt_len + j − 1 */
	CHECK(resp[0] == 11 && resp[1] == 12 && resp[2] == 13);
	CHECK(resp[3] == 20 && resp[4] == 21);
	rl_scatter(2, start, plen, off, resp, back);
	CHECK(back[0] == 0 && back[1] == 11 && back[3] == 13 && back[4] == 0);
	CHECK(back[5] == 20 && back[6] == 21 && back[7] == 0);
}

static void config(void)
{
	struct rl_config c;
	struct err e;
	enum rl_kl k;

	rlconf_defaults(&c, RL_PPO);
	CHECK(rlconf_check(&c, &e) == NR_OK);
	CHECK(c.use_kl_in_reward && !c.use_kl_loss && c.kl_coef == 0.001);
	CHECK(c.actor_optim.adamw.lr == 1e-6 && c.critic_optim.adamw.lr == 1e-5);
	rlconf_defaults(&c, RL_GRPO);
	CHECK(!c.use_kl_in_reward && c.use_kl_loss && c.kl_loss_type == RL_KL_K3);
	CHECK(rlconf_check(&c, &e) == NR_OK);

	c.clip_ratio_c = 1;
	CHECK(rlconf_check(&c, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "\"clip_ratio_c\"") != NULL);
	rlconf_defaults(&c, RL_GRPO);
	c.gamma = 1.5;
	CHECK(rlconf_check(&c, &e) == NR_EINPUT && strstr(e.msg, "\"gamma\"") != NULL);
	rlconf_defaults(&c, RL_GRPO);
	c.critic_optim.adamw.lr = 0;
	CHECK(rlconf_check(&c, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "critic_optim: \"lr\"") != NULL);

	CHECK(rlconf_kl_parse("low_var_kl", &k) == NR_OK && k == RL_KL_K3);
	CHECK(rlconf_kl_parse("kl", &k) == NR_OK && k == RL_KL_K1);
	CHECK(rlconf_kl_parse("mse", &k) == NR_EINPUT);
}

int main(void)
{
	RUN(gae_by_hand);
	RUN(shaped_rewards);
	RUN(whitening);
	RUN(grpo_groups);
	RUN(grpo_kl_in_reward);
	RUN(policy_clip_regions);
	RUN(value_clip);
	RUN(kl_estimators);
	RUN(entropy_bonus);
	RUN(finite_differences);
	RUN(token_mean_adds_up);
	RUN(gather_scatter);
	RUN(config);
	return UNIT_END();
}
