/* The optimizer (lib/engine/optim.h): AdamW against its update written out
 * by hand, the schedule's values at chosen steps, norm clipping, and which
 * pieces of a layout decay. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/optim.h"
#include "unit.h"

/* Two AdamW steps on one decaying and one non-decaying element:
 * lr 0.1, betas (0.9, 0.999), eps 1e-8, weight decay 0.01, g = 0.5 then
 * −0.5, both starting at w = 1.
 * Step 1: w·(1 − 0.001) = 0.999; m = 0.05, v = 0.00025; m̂ = 0.5,
 *   sqrt(v̂) = sqrt(0.00025 / 0.001) = 0.5; w = 0.999 − 0.1·0.5/0.5 = 0.899.
 * Step 2: w = 0.899·0.999 = 0.898101; m = 0.045 − 0.05 = −0.005;
 *   v = 0.00024975 + 0.00025 = 0.00049975; bias corrections 0.19 and
 *   0.001999, so sqrt(v̂) = 0.5 again and the step is
 *   0.1/0.19 · 0.005/0.5 = 0.00526315789: w = 0.90336415789.
 * Without decay: 1 − 0.1 = 0.9, then 0.90526315789. */
static void adamw_by_hand(void)
{
	struct optim_config c;
	struct optim_span s[] = { { 0, 1, true, false }, { 1, 1, false, false } };
	float w[2] = { 1, 1 }, m[2] = { 0 }, v[2] = { 0 }, g[2] = { 0.5f, 0.5f };

	rlconf_optim_defaults(&c, 0.1);
	optim_adamw_step(&c.adamw, 0.1, 1, s, 2, w, m, v, g);
	CHECK_NEAR(w[0], 0.899, 1e-6);
	CHECK_NEAR(w[1], 0.9, 1e-6);
	CHECK_NEAR(m[0], 0.05, 1e-6);
	CHECK_NEAR(v[0], 0.00025, 1e-6);
	g[0] = g[1] = -0.5f;
	optim_adamw_step(&c.adamw, 0.1, 2, s, 2, w, m, v, g);
	CHECK_NEAR(w[0], 0.90336415789, 1e-6);
	CHECK_NEAR(w[1], 0.90526315789, 1e-6);
	CHECK_NEAR(m[0], -0.005, 1e-5);
	CHECK_NEAR(v[0], 0.00049975, 1e-6);
}

static void schedule(void)
{
	struct optim_config c;
	struct err e;

	rlconf_optim_defaults(&c, 1e-3);
	CHECK(rlconf_optim_check(&c, &e) == NR_OK);
	CHECK(optim_lr_at(&c, 0) == 1e-3 && optim_lr_at(&c, 1000) == 1e-3);

	/* Warm-up over 4 steps: 1/4, 2/4, 3/4, then the peak. */
	c.sched.warmup_steps = 4;
	CHECK_NEAR(optim_lr_at(&c, 0), 2.5e-4, 1e-12);
	CHECK_NEAR(optim_lr_at(&c, 2), 7.5e-4, 1e-12);
	CHECK_NEAR(optim_lr_at(&c, 3), 1e-3, 1e-12);
	CHECK_NEAR(optim_lr_at(&c, 50), 1e-3, 1e-12);

	/* Cosine after 2 warm-up steps to 10% at step 12: at step 7 halfway,
	 * 0.1 + 0.9·0.5; at step 4, p = 0.2: 0.1 + 0.9·(1 + cos 0.2π)/2. */
	c.sched.style = LR_COSINE;
	c.sched.warmup_steps = 2;
	c.sched.total_steps = 12;
	c.sched.min_lr_ratio = 0.1;
	CHECK_NEAR(optim_lr_at(&c, 0), 5e-4, 1e-12);
	CHECK_NEAR(optim_lr_at(&c, 2), 1e-3, 1e-12);
	CHECK_NEAR(optim_lr_at(&c, 4), 1e-3 * (0.1 + 0.9 * (1 + 0.80901699437) / 2), 1e-9);
	CHECK_NEAR(optim_lr_at(&c, 7), 0.55e-3, 1e-12);
	CHECK_NEAR(optim_lr_at(&c, 12), 1e-4, 1e-12);
	CHECK_NEAR(optim_lr_at(&c, 40), 1e-4, 1e-12);

	c.sched.min_lr_ratio = 1.5;
	CHECK(rlconf_optim_check(&c, &e) == NR_EINPUT && strstr(e.msg, "min_lr_ratio"));
}

static void norm_clipping(void)
{
	struct optim_span s[] = { { 0, 2, true, false }, { 2, 1, false, true } };
	float g[3] = { 3, 4, 100 };
	double norm, f;

	/* The copy (owned by another rank) stays out of the norm: 3-4-5. */
	CHECK(optim_sumsq(s, 2, g) == 25);
	f = optim_clip_scale(25, 1.0, &norm);
	CHECK(norm == 5);
	CHECK_NEAR(f, 1 / (5 + 1e-6), 1e-12);
	optim_scale(s, 2, g, f);
	CHECK_NEAR(sqrt(optim_sumsq(s, 2, g)), 1, 1e-6);
	CHECK_NEAR(g[2], 100 / 5.0, 1e-6);

	CHECK(optim_clip_scale(25, 10, &norm) == 1);
	CHECK(optim_clip_scale(25, 0, &norm) == 1 && norm == 5);
	CHECK(optim_clip_scale(NAN, 1, &norm) == 0 && isnan(norm));
	CHECK(optim_clip_scale(INFINITY, 1, &norm) == 0 && isinf(norm));
}

static void decay_and_spans(void)
{
	struct arch a = { .layers = 2, .hidden = 8, .heads = 2, .kv_heads = 2, .ffn = 16,
			  .vocab = 10, .tied = false, .dtype_bytes = 4, .dtype = "fp32" };
	struct layout lo;
	struct optim_span *s;
	size_t n;
	struct err e;

	CHECK(layout_init(&lo, &a, 2, 1, 1, false, NULL, &e) == NR_OK);
	CHECK(optim_spans(&lo, KIND_WEIGHT, 0, 0, 0, &s, &n, &e) == NR_OK);
	/* embedding, 2 × 6 layer tensors, final norm, output layer */
	CHECK(n == 15);
	CHECK(s[0].off == 0 && s[0].len == 10 * 8 && s[0].decay && !s[0].copy);
	CHECK(!s[1].decay && s[1].len == 8);       /* input norm */
	CHECK(s[2].decay && s[2].len == 1 * 12 * 8); /* qkv: 1 group of (1 + 2)·4 rows */
	CHECK(!s[4].decay && s[5].decay);           /* pre-MLP norm, fc1 */
	CHECK(!s[13].decay && s[14].decay && s[14].len == 10 * 8);
	for (size_t i = 0; i < n; i++)
		CHECK(!s[i].copy);
	free(s);

	/* TP rank 1: its vocabulary rows are all padding, and the norms are
	 * copies of rank 0's. */
	CHECK(optim_spans(&lo, KIND_WEIGHT, 1, 0, 0, &s, &n, &e) == NR_OK);
	CHECK(n == 15 && s[0].len == 0);
	CHECK(s[1].copy && !s[2].copy && s[13].copy);
	free(s);

	for (int i = 0; i < lo.ntensors; i++)
		CHECK(optim_decays(&lo.tensors[i]) == (lo.tensors[i].ndim > 1));
	layout_free(&lo);

	/* Qwen2's q/k/v biases ([groups, rows], 2-D in the layout) do not
	 * decay; a critic's score head does, as the output layer would. */
	a.attn_bias = a.score_head = true;
	CHECK(layout_init(&lo, &a, 1, 1, 1, false, NULL, &e) == NR_OK);
	CHECK(optim_spans(&lo, KIND_WEIGHT, 0, 0, 0, &s, &n, &e) == NR_OK);
	CHECK(n == 1 + 2 * 7 + 2);
	CHECK(!s[3].decay && s[3].len == 2 * 12);            /* linear_qkv.bias */
	CHECK(!strcmp(lo.tensors[3].name, "decoder.layers.0.self_attention.linear_qkv.bias"));
	CHECK(s[n - 1].decay && s[n - 1].len == 8);          /* score.weight [1, 8] */
	free(s);
	layout_free(&lo);
}

int main(void)
{
	RUN(adamw_by_hand);
	RUN(schedule);
	RUN(norm_clipping);
	RUN(decay_and_spans);
	return UNIT_END();
}
