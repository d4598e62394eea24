/* The memory model, term by term, against hand-computed bytes for
 * Llama-3-8B, Llama-3-70B and Qwen2.5-7B (formulas: nereus-plan(1),
 * MEMORY MODEL).
 *
 * The job (filled by hand): 128 prompts × 4 samples = 512 sequences per
 * step, prompt 1024 tokens, response mean 2048 / p90 3584 / max 4096, one
 * PPO epoch of 4 mini-batches.  Memory holds s = 1024 + 4096 = 5120 tokens.
 * Coefficients are the defaults: act_factor 1, frag 0.10, workspace 3 GiB.
 *
 * Llama-3-8B:  L 32, h 4096, a 32, kv 8, F 14336, V 128256, head_dim 128;
 *              one layer = 218,112,000 parameters (see test_job.c).
 * Llama-3-70B: L 80, h 8192, a 64, kv 8, F 28672, V 128256, head_dim 128;
 *              one layer = 855,654,400 parameters.
 * GiB = 1,073,741,824; workspace 3 GiB = 3,221,225,472 bytes. */
#include "doc/cluster.h"
#include "plan/memory.h"
#include "unit.h"

#include <string.h>

#define WS 3221225472.0 /* 3 GiB */

static struct job job;
static struct coef k;
static const struct arch L8 = { .layers = 32, .hidden = 4096, .heads = 32, .kv_heads = 8,
				.ffn = 14336, .vocab = 128256, .dtype_bytes = 2, .dtype = "bf16" };
static const struct arch L70 = { .layers = 80, .hidden = 8192, .heads = 64, .kv_heads = 8,
				 .ffn = 28672, .vocab = 128256, .dtype_bytes = 2,
				 .dtype = "bf16" };
static const struct arch Q7 = { .layers = 28, .hidden = 3584, .heads = 28, .kv_heads = 4,
				.ffn = 18944, .vocab = 152064, .dtype_bytes = 2, .dtype = "bf16" };

static void setup(void)
{
	memset(&job, 0, sizeof job);
	strcpy(job.name, "hand");
	strcpy(job.algorithm, "ppo");
	job.prompts_per_step = 128;
	job.samples_per_prompt = 4;
	job.prompt_len = 1024;
	job.response.mean = 2048;
	job.response.p90 = 3584;
	job.response.max = 4096;
	job.ppo_epochs = 1;
	job.mini_batches = 4;
	cost_coef_defaults(&k);
}

static struct pconf pc(int tp, int pp, int dp, int mb, enum recompute rc, enum zero_stage zero)
{
	struct pconf c = { .tp = tp, .pp = pp, .dp = dp, .mb = mb, .rc = rc, .zero = zero };

	return c;
}

static double sum_terms(const struct mem *m)
{
	return m->weights + m->grads + m->master + m->adam + m->act + m->logits + m->kv +
	       m->workspace + m->frag;
}

/* s = prompt + longest response; micro-batches per mini-batch per replica
 * = ceil(ceil(512 / 4 / dp) / mb). */
static void test_job_helpers(void)
{
	setup();
	CHECK(job_max_seq(&job) == 5120.0);
	/* 512 / 4 = 128 per mini-batch: dp 4 → 32 each; mb 1 → 32 */
	CHECK(job_microbatches(&job, 4, 1) == 32);
	/* dp 2 → 64; mb 1 → 64 */
	CHECK(job_microbatches(&job, 2, 1) == 64);
	/* dp 3 → ceil(128/3) = 43; mb 2 → ceil(43/2) = 22 */
	CHECK(job_microbatches(&job, 3, 2) == 22);
	/* dp 256 → ceil(128/256) = 1; mb 4 → 1 */
	CHECK(job_microbatches(&job, 256, 4) == 1);
}

/* Vocabulary padded to a multiple of 128·tp (Megatron):
 *   tp 1: unit 128,  128256/128  = 1002    → 128,256
 *   tp 2: unit 256,  128256/256  = 501     → 128,256
 *   tp 4: unit 512,  128256/512  = 250.5   → 251 · 512  = 128,512
 *   tp 8: unit 1024, 128256/1024 = 125.25  → 126 · 1024 = 129,024
 * seen through the output layer's rows in mem_stage_params (pp 2, last
 * stage, which holds 16 layers + final norm + padded output layer):
 *   (16 · 218,112,000 + 4096 + Vp · 4096) / tp */
static void test_vocab_padding(void)
{
	static const double vp[] = { 128256, 128256, 128512, 129024 };
	static const int tps[] = { 1, 2, 4, 8 };

	for (int i = 0; i < 4; i++) {
		double want = (16 * 218112000.0 + 4096 + vp[i] * 4096) / tps[i];
		CHECK(mem_stage_params(&L8, tps[i], 2) == want);
	}
	/* tp 8 on its own: (3,489,792,000 + 4096 + 528,482,304) / 8
	 *                = 4,018,278,400 / 8 = 502,284,800 */
	CHECK(mem_stage_params(&L8, 8, 2) == 502284800.0);
	/* logits carry the padding too: 8B inference, tp 4, mb 1, s 5120,
	 * 10 bytes an element (forward): 5120 · 128512 / 4 · 10 = 1,644,953,600 */
	{
		struct pconf c = pc(4, 1, 1, 1, RC_SELECTIVE, ZERO_0);
		struct mem m;
		setup();
		mem_infer(&job, &L8, &c, &k, &m);
		CHECK(m.logits == 1644953600.0);
	}
}

/* Parameters per GPU of the worst stage.
 *   8B pp 1, tp 2: (2 · 525,336,576 + 6,979,584,000 + 4096) / 2
 *                = 8,030,261,248 / 2 = 4,015,130,624
 *   8B pp 2, tp 2: first (525,336,576 + 3,489,792,000) / 2 = 2,007,564,288
 *                  last  (3,489,792,000 + 4096 + 525,336,576) / 2
 *                      = 2,007,566,336  ← the larger
 *   70B pp 1, tp 8: Vp = 129,024, embedding 129,024 · 8192 = 1,056,964,608;
 *                  (2 · 1,056,964,608 + 68,452,352,000 + 8192) / 8
 *                = 70,566,289,408 / 8 = 8,820,786,176
 *   tied 8B pp 2: the last stage keeps its own copy of the embedding, so
 *   the figure is the same as untied; pp 1 tied holds it once:
 *                (525,336,576 + 6,979,584,000 + 4096) / 2 = 3,752,462,336 */
static void test_stage_params(void)
{
	struct arch t = L8;

	CHECK(mem_stage_params(&L8, 2, 1) == 4015130624.0);
	CHECK(mem_stage_params(&L8, 1, 1) == 8030261248.0); /* the whole model */
	CHECK(mem_stage_params(&L8, 2, 2) == 2007566336.0);
	CHECK(mem_stage_params(&L70, 8, 1) == 8820786176.0);
	t.tied = true;
	CHECK(mem_stage_params(&t, 2, 2) == 2007566336.0);
	CHECK(mem_stage_params(&t, 2, 1) == 3752462336.0);
	/* uneven: 32 layers on pp 3 → ceil = 11 layers on the worst stage:
	 * last = (11 · 218,112,000 + 4096 + 525,336,576) / 1 = 2,924,572,672 */
	CHECK(mem_stage_params(&L8, 1, 3) == 2924572672.0);
}

/* Qwen2's q, k and v biases add (a + 2g)·d parameters a layer: (28 + 8)
 * · 128 = 4608, 28 · 4608 = 129,024 for Qwen2.5-7B.  A critic's or
 * reward model's score head is [1, h] where an LM head is V·h: 8B pp 1
 * holds 525,336,576 − 4096 = 525,332,480 parameters fewer, and with pp 2
 * the first stage (embedding and 16 layers, 4,015,128,576) is the larger,
 * the last holding 3,489,792,000 + 4096 + 4096; its logits
 * are one value a token, 14 bytes training: 5120 · 14 = 71,680; FSDP's
 * largest pair is then the embedding and a layer, 2 · (525,336,576 +
 * 218,112,000) = 1,486,897,152 bytes. */
static void test_bias_and_score_head(void)
{
	struct arch q = Q7, critic = L8;
	struct pconf c = pc(1, 1, 8, 1, RC_SELECTIVE, ZERO_3);

	q.attn_bias = true;
	CHECK(mem_stage_params(&q, 1, 1) - mem_stage_params(&Q7, 1, 1) == 129024.0);
	critic.score_head = true;
	CHECK(mem_stage_params(&L8, 1, 1) - mem_stage_params(&critic, 1, 1) == 525332480.0);
	CHECK(mem_stage_params(&critic, 1, 2) == 3489792000.0 + 525336576);
	CHECK(mem_stage_params(&critic, 2, 2) == (3489792000.0 + 525336576) / 2);
	CHECK(mem_logits(&critic, 5120, 1, 2, true) == 71680.0);
	CHECK(mem_gathered(&critic, &c) == 1486897152.0);
}

/* A Llama layer keeps, per token and with sequence parallelism over t
 * ranks, 6h + 2gd + 3F elements of the model's dtype (memory.c says which
 * tensors), plus 4 bytes of log-sum-exp per query head without recompute;
 * full recompute keeps the layer's input, h.  Llama-3-8B: 6 · 4096 + 2 · 8
 * · 128 + 3 · 14336 = 24,576 + 2,048 + 43,008 = 69,632 elements, 139,264
 * bf16 bytes a token, which is 34 · h: Korthikanti's GPT figure, by the
 * coincidence of F = 3.5h and g·d = h/4 (GPT's 4h MLP with dropout and no
 * GQA also makes 34).  Qwen2.5-7B: 6 · 3584 + 2 · 4 · 128 + 3 · 18944 =
 * 21,504 + 1,024 + 56,832 = 79,360 elements, 158,720 bytes, 44.29 · h. */
static void test_layer_activations(void)
{
	struct arch f32 = L8;

	/* 8B, s 5120, b 1, t 2:
	 *   selective: 5120 · 139,264 / 2 = 356,515,840
	 *   none: + 4 · 32 · 5120 / 2 = 327,680 → 356,843,520
	 *   full: 2 · 5120 · 4096 / 2 = 20,971,520 */
	CHECK(mem_layer_act(&L8, 5120, 1, 2, RC_SELECTIVE) == 356515840.0);
	CHECK(mem_layer_act(&L8, 5120, 1, 2, RC_NONE) == 356843520.0);
	CHECK(mem_layer_act(&L8, 5120, 1, 2, RC_FULL) == 20971520.0);
	/* 70B: 6 · 8192 + 2 · 8 · 128 + 3 · 28672 = 137,216 elements; s 5120,
	 * b 1, t 8: selective 5120 · 274,432 / 8 = 175,636,480; none
	 * + 4 · 64 · 5120 / 8 = 163,840 → 175,800,320; full 2 · 5120 · 8192 / 8
	 * = 10,485,760 */
	CHECK(mem_layer_act(&L70, 5120, 1, 8, RC_SELECTIVE) == 175636480.0);
	CHECK(mem_layer_act(&L70, 5120, 1, 8, RC_NONE) == 175800320.0);
	CHECK(mem_layer_act(&L70, 5120, 1, 8, RC_FULL) == 10485760.0);
	/* Qwen2.5-7B, s 4096, b 1, t 1: 4096 · 158,720 = 650,117,120 */
	CHECK(mem_layer_act(&Q7, 4096, 1, 1, RC_SELECTIVE) == 650117120.0);
	CHECK_NEAR(mem_layer_act(&Q7, 4096, 1, 1, RC_SELECTIVE) / (4096.0 * 3584), 44.2857142857,
		   1e-10);
	/* t 1, s 2048, b 2, no recompute: 2 · 4096 · 139,264 + 4 · 32 · 4096
	 * = 570,425,344 + 524,288 = 570,949,632 */
	CHECK(mem_layer_act(&L8, 2048, 2, 1, RC_NONE) == 570949632.0);
	/* linear in b; an fp32 model keeps 4-byte activations (the
	 * log-sum-exp is fp32 either way) */
	CHECK(mem_layer_act(&L8, 5120, 4, 2, RC_SELECTIVE) ==
	      4 * mem_layer_act(&L8, 5120, 1, 2, RC_SELECTIVE));
	f32.dtype_bytes = 4;
	CHECK(mem_layer_act(&f32, 5120, 1, 2, RC_SELECTIVE) == 2 * 356515840.0);
	CHECK(mem_layer_act(&f32, 5120, 1, 2, RC_NONE) == 2 * 356515840.0 + 327680);
}

/* Qwen3-0.6B (h 1024, a 16 heads of d 128, so a·d = 2048 is not h; g 8,
 * F 3072, tied, per-head q/k norms).  A layer keeps 2h + 2ad + 2gd of
 * attention, ad + gd more for the q/k norms' inputs, and 2h + 3F of MLP:
 * 2048 + 4096 + 2048 + 3072 + 2048 + 9216 = 22,528 elements, 45,056 bf16
 * bytes a token; s 4096, b 1, t 1: 184,549,376.  Its parameters, the
 * vocabulary 151,936 already a multiple of 128: 596,049,920, 2 · 128 of
 * them a layer's q/k norms. */
static void test_head_dim_and_qk_norm(void)
{
	struct arch q3 = { .layers = 28, .hidden = 1024, .heads = 16, .kv_heads = 8,
			   .head_dim = 128, .ffn = 3072, .vocab = 151936, .tied = true,
			   .qk_norm = true, .dtype_bytes = 2, .dtype = "bf16" };
	struct arch plain = q3;

	CHECK(mem_layer_act(&q3, 4096, 1, 1, RC_SELECTIVE) == 184549376.0);
	CHECK(mem_stage_params(&q3, 1, 1) == 596049920.0);
	plain.qk_norm = false;
	CHECK(mem_stage_params(&q3, 1, 1) - mem_stage_params(&plain, 1, 1) == 28 * 256.0);
	CHECK(mem_layer_act(&q3, 4096, 1, 1, RC_SELECTIVE) -
	      mem_layer_act(&plain, 4096, 1, 1, RC_SELECTIVE) == 4096 * 3072 * 2.0);
}

/* FlashAttention keeps no s × s scores: without recompute a layer's
 * activations grow linearly with the sequence, not with its square. */
static void test_no_recompute_keeps_no_scores(void)
{
	for (double s = 512; s <= 65536; s *= 2)
		CHECK_NEAR(mem_layer_act(&L8, 2 * s, 1, 2, RC_NONE),
			   2 * mem_layer_act(&L8, s, 1, 2, RC_NONE), 1e-12);
	/* at 128K tokens the s² scores alone (2 · 32 · s² / t bytes) would be
	 * over a TiB; the model keeps 9 GB */
	CHECK(mem_layer_act(&L8, 131072, 1, 2, RC_NONE) < 10e9);
}

/* The logits of one micro-batch per element: the output layer's result in
 * the model's dtype, its fp32 upcast, the fp32 log-softmax and, training,
 * the fp32 gradient: 2 + 4 + 4 + 4 = 14 bytes (bf16), 10 forward only; an
 * fp32 model skips the upcast: 12 and 8.  Megatron-LM, FSDP and DeepSpeed
 * compute them for every token of the micro-batch at once (only the
 * built-in engine chunks them, test_memory_builtin.c).
 *   8B tp 2 (V_p / t = 64,128), s 512, b 1: 512 · 64,128 · 14 = 459,669,504
 *   s 5120: 5120 · 64,128 · 14 = 4,596,695,040; forward 3,283,353,600
 *   fp32: 5120 · 64,128 · 12 = 3,940,024,320; forward 2,626,682,880 */
static void test_logits(void)
{
	struct arch f32 = L8;

	CHECK(mem_logits(&L8, 512, 1, 2, true) == 459669504.0);
	CHECK(mem_logits(&L8, 5120, 1, 2, true) == 4596695040.0);
	CHECK(mem_logits(&L8, 5120, 1, 2, false) == 3283353600.0);
	CHECK(mem_logits(&L8, 256, 4, 2, true) == mem_logits(&L8, 1024, 1, 2, true));
	CHECK(mem_logits(&L8, 5120, 8, 2, true) == 8 * mem_logits(&L8, 5120, 1, 2, true));
	f32.dtype_bytes = 4;
	CHECK(mem_logits(&f32, 5120, 1, 2, true) == 3940024320.0);
	CHECK(mem_logits(&f32, 5120, 1, 2, false) == 2626682880.0);
}

/* The 8B actor's plan on 64 H100s (examples: ppo-llama3-8b on h100-8x8):
 * training tp 4, pp 1, dp 16, micro-batches of 8, ZeRO-3, selective
 * recompute; s = 1024 + 4096 = 5120.  V_p = 128,512 (a multiple of 128 · 4),
 * V_p / t = 32,128.
 *   logits: 5120 · 8 = 40,960 tokens · 32,128 · 14 = 18,423,480,320 bytes
 *     (17.16 GiB; chunked 1024 tokens at a time they were 460,587,008,
 *     0.43 GiB)
 *   FSDP's units: a layer 218,112,000 parameters, the embedding 128,512 ·
 *     4096 = 526,385,152, the final norm with the output layer 526,385,152
 *     + 4096 = 526,389,248, the largest; per TP rank 131,597,312; its
 *     unsharded bf16 gradient 263,194,624 bytes (0.245 GiB), beside the
 *     fp32 shards 4P/16, P = (2 · 526,385,152 + 32 · 218,112,000 + 4096) / 4
 *     = 2,008,089,600: 502,022,400.  Total grads 765,217,024.
 * With pp 2 (dp 8: m = ceil(ceil(128 / 8) / 8) = 2 micro-batches, both in
 * flight on the first stage) the first stage's largest unit is the
 * embedding, 526,385,152 / 4 = 131,596,288 per rank, 263,192,576 bytes,
 * the last's the output layer, 263,194,624; the first stage (16 layers'
 * activations twice, 2 · 16 · 5120 · 8 · 139,264 / 4 = 45,634,027,520
 * bytes, against the last's once and the logits) is reported, its fp32
 * shards 4 · (526,385,152 + 16 · 218,112,000) / 4 / 8 = 502,022,144.
 * Below ZeRO-3 no unit is held whole. */
static void test_8b_actor_default_plan(void)
{
	struct pconf c = pc(4, 1, 16, 8, RC_SELECTIVE, ZERO_3);
	struct mem m;

	setup();
	CHECK(mem_logits(&L8, 5120, 8, 4, true) == 18423480320.0);
	CHECK(mem_unsharded_grad(&L8, &c) == 263194624.0);
	mem_train(&job, &L8, &c, &k, &m);
	CHECK(m.logits == 18423480320.0);
	CHECK(m.grads == 502022400.0 + 263194624.0);
	c.pp = 2;
	c.dp = 8;
	CHECK(mem_unsharded_grad(&L8, &c) == 263194624.0);
	mem_train(&job, &L8, &c, &k, &m);
	CHECK(m.logits == 0);
	CHECK(m.grads == 502022144.0 + 263192576.0);
	c = pc(4, 1, 16, 8, RC_SELECTIVE, ZERO_2);
	CHECK(mem_unsharded_grad(&L8, &c) == 0);
	mem_train(&job, &L8, &c, &k, &m);
	CHECK(m.grads == 4 * 2008089600.0 / 16);
}

/* 8B, tp 2, pp 2, dp 4, mb 1, selective recompute, optimizer sharded.
 * m = 32 micro-batches, in flight on the first stage min(32, 2) = 2.
 * First stage (embedding + 16 layers), P = 2,007,564,288 per GPU:
 *   weights 2P = 4,015,128,576        grads 4P = 8,030,257,152
 *   master 4P/4 = 2,007,564,288       adam 8P/4 = 4,015,128,576
 *   act 356,515,840 · 16 layers · 2 = 11,408,506,880; logits 0 (not last)
 *   frag 0.1 · 11,408,506,880 = 1,140,850,688; workspace 3,221,225,472
 *   total 33,838,661,632
 * Last stage (16 layers + norm + output), P = 2,007,566,336:
 *   weights 4,015,132,672, grads 8,030,265,344, master 2,007,566,336,
 *   adam 4,015,132,672, act 356,515,840 · 16 · 1 = 5,704,253,440,
 *   logits 1024 · 128256/2 · 14 = 919,339,008,
 *   frag 0.1 · (5,704,253,440 + 919,339,008) = 662,359,244.8
 *   total 28,575,274,188.8 → the first stage is reported. */
static void test_train_8b_tp2_pp2_dp4_selective_zero(void)
{
	struct pconf c = pc(2, 2, 4, 1, RC_SELECTIVE, ZERO_1);
	struct mem m;

	setup();
	mem_train(&job, &L8, &c, &k, &m);
	CHECK(m.weights == 4015128576.0);
	CHECK(m.grads == 8030257152.0);
	CHECK(m.master == 2007564288.0);
	CHECK(m.adam == 4015128576.0);
	CHECK(m.act == 11408506880.0);
	CHECK(m.logits == 0);
	CHECK(m.kv == 0);
	CHECK_NEAR(m.frag, 1140850688.0, 1e-12);
	CHECK(m.workspace == WS);
	CHECK_NEAR(m.total, 33838661632.0, 1e-12);
	CHECK_NEAR(m.total, sum_terms(&m), 1e-12);
}

/* 70B, tp 8, pp 4, dp 2, mb 1, full recompute, optimizer not sharded.
 * m = ceil(128/2) = 64, in flight min(64, 4) = 4; 20 layers per stage.
 * First stage, P = (126·1024·8192 + 20 · 855,654,400) / 8
 *               = (1,056,964,608 + 17,113,088,000) / 8 = 2,271,256,576:
 *   weights 2P = 4,542,513,152; grads 4P = 9,085,026,304;
 *   master 4P = 9,085,026,304;  adam 8P = 18,170,052,608  (18 bytes/param)
 *   act: layer inputs 2 · 5120 · 8192 / 8 = 10,485,760 · 20 layers · 4
 *        = 838,860,800, plus one layer rebuilt whole (175,800,320)
 *        = 1,014,661,120
 *   frag 101,466,112; workspace 3,221,225,472; total 45,219,971,072
 * Last stage, P = 2,271,257,600 (norm + output instead of embedding):
 *   weights 4,542,515,200; grads and master 9,085,030,400 each;
 *   adam 18,170,060,800; act 10,485,760 · 20 + 175,800,320 = 385,515,520;
 *   logits 5120 · 129024/8 · 14 = 1,156,055,040;
 *   frag 0.1 · (385,515,520 + 1,156,055,040) = 154,157,056;
 *   total 45,799,589,888 → the last stage is reported. */
static void test_train_70b_tp8_pp4_dp2_full(void)
{
	struct pconf c = pc(8, 4, 2, 1, RC_FULL, ZERO_0);
	struct mem m;

	setup();
	mem_train(&job, &L70, &c, &k, &m);
	CHECK(m.weights == 4542515200.0);
	CHECK(m.grads == 9085030400.0);
	CHECK(m.master == 9085030400.0);
	CHECK(m.adam == 18170060800.0);
	CHECK(m.act == 385515520.0);
	CHECK(m.logits == 1156055040.0);
	CHECK_NEAR(m.frag, 154157056.0, 1e-12);
	CHECK(m.workspace == WS);
	CHECK_NEAR(m.total, 45799589888.0, 1e-12);
	CHECK_NEAR(m.total, sum_terms(&m), 1e-12);
}

/* 8B, tp 4, pp 1, dp 2, mb 2, no recompute, no sharding: the only stage
 * holds everything and the logits.
 *   P = (2 · 128,512 · 4096 + 6,979,584,000 + 4096) / 4 = 2,008,089,600
 *   weights 4,016,179,200; grads 8,032,358,400; master 8,032,358,400;
 *   adam 16,064,716,800
 *   m = ceil(ceil(128/2)/2) = 32; in flight min(32, 1) = 1
 *   act: 5120 · 2 · 139,264 / 4 + 4 · 32 · 5120 · 2 / 4 = 356,515,840
 *        + 327,680 = 356,843,520 per layer · 32 = 11,418,992,640
 *   logits 10,240 tokens · 128512/4 · 14 = 4,605,870,080
 *   frag 0.1 · (11,418,992,640 + 4,605,870,080) = 1,602,486,272
 *   total 56,994,187,264 */
static void test_train_8b_tp4_none_logits(void)
{
	struct pconf c = pc(4, 1, 2, 2, RC_NONE, ZERO_0);
	struct mem m;

	setup();
	mem_train(&job, &L8, &c, &k, &m);
	CHECK(m.weights == 4016179200.0);
	CHECK(m.grads == 8032358400.0);
	CHECK(m.master == 8032358400.0);
	CHECK(m.adam == 16064716800.0);
	CHECK(m.act == 11418992640.0);
	CHECK(m.logits == 4605870080.0);
	CHECK_NEAR(m.frag, 1602486272.0, 1e-12);
	CHECK_NEAR(m.total, 56994187264.0, 1e-12);
	CHECK_NEAR(m.total, sum_terms(&m), 1e-12);
}

/* Bytes per parameter: 2 + 4 + 4 + 8 = 18 without sharding; with d DP
 * ranks ZeRO-1 shards the optimizer, 6 + 12/d; ZeRO-2 the gradients too,
 * 2 + 16/d; ZeRO-3 everything, 18/d, plus the gathered units and the
 * unsharded gradient of one (pp 1, where every GPU holds
 * mem_stage_params). */
static void test_bytes_per_param(void)
{
	static const int dps[] = { 1, 2, 4, 8, 16 };
	const struct arch *as[] = { &L8, &L70 };

	setup();
	for (int i = 0; i < 2; i++) {
		for (int j = 0; j < 5; j++) {
			int d = dps[j];
			struct pconf c = pc(8, 1, d, 1, RC_FULL, ZERO_0);
			struct mem m;
			double p = mem_stage_params(as[i], 8, 1);
			mem_train(&job, as[i], &c, &k, &m);
			CHECK_NEAR((m.weights + m.grads + m.master + m.adam) / p, 18.0, 1e-12);
			c.zero = ZERO_1;
			mem_train(&job, as[i], &c, &k, &m);
			CHECK_NEAR((m.weights + m.grads + m.master + m.adam) / p, 6.0 + 12.0 / d,
				   1e-12);
			CHECK_NEAR((m.weights + m.grads) / p, 6.0, 1e-12);
			c.zero = ZERO_2;
			mem_train(&job, as[i], &c, &k, &m);
			CHECK_NEAR((m.weights + m.grads + m.master + m.adam) / p, 2.0 + 16.0 / d,
				   1e-12);
			c.zero = ZERO_3;
			mem_train(&job, as[i], &c, &k, &m);
			CHECK_NEAR((m.weights - mem_gathered(as[i], &c) + m.grads -
				    mem_unsharded_grad(as[i], &c) + m.master + m.adam) / p,
				   18.0 / d, 1e-12);
		}
	}
}

/* The job's dtype sizes the weights: an fp32 model's are 4 bytes, its
 * gradients, master copy and moments fp32 as a bf16 model's (the state
 * store keeps the master copy for every dtype): 4 + 4 + 4 + 8 = 20 bytes a
 * parameter.  8B tp 2 pp 1 dp 1: P = 4,015,130,624;
 *   weights 16,060,522,496; resident 16 · P = 64,242,089,984 (frozen:
 *   weights only).  The engines run it in fp32 too: 4-byte weights and
 *   KV cache. */
static void test_dtype_sizes_weights(void)
{
	struct arch f32 = L8;
	struct pconf c = pc(2, 1, 1, 1, RC_FULL, ZERO_0);
	const double p = 4015130624.0;
	struct mem m;

	setup();
	f32.dtype_bytes = 4;
	strcpy(f32.dtype, "fp32");
	mem_train(&job, &f32, &c, &k, &m);
	CHECK(m.weights == 16060522496.0);
	CHECK((m.weights + m.grads + m.master + m.adam) == 20 * p);
	CHECK(mem_resident(&f32, &c, true) == 64242089984.0);
	CHECK(mem_resident(&f32, &c, false) == 4 * p);
	mem_infer(&job, &f32, &c, &k, &m);
	CHECK(m.weights == 4 * p);
	mem_gen_base(&f32, &c, &k, &m);
	CHECK(m.weights == 4 * p);
	CHECK(mem_kv_per_token(&f32, 2) == 2 * mem_kv_per_token(&L8, 2));
}

/* ZeRO-2 shards the gradients as well as the optimizer, and keeps nothing
 * more between stages than ZeRO-1: 8B tp 1 pp 1 dp 8, P = 8,030,261,248:
 *   grads 4P / 8 = 4,015,130,624 (ZeRO-1: 32,121,044,992)
 *   master and Adam 12P / 8 = 12,045,391,872; weights 2P. */
static void test_zero2_shards_gradients(void)
{
	struct pconf c = pc(1, 1, 8, 1, RC_SELECTIVE, ZERO_1);
	struct mem one, two;

	setup();
	mem_train(&job, &L8, &c, &k, &one);
	c.zero = ZERO_2;
	mem_train(&job, &L8, &c, &k, &two);
	CHECK(one.grads == 32121044992.0);
	CHECK(two.grads == 4015130624.0);
	CHECK(two.master + two.adam == 12045391872.0);
	CHECK(two.weights == one.weights && two.weights == 16060522496.0);
	CHECK(two.act == one.act && two.logits == one.logits);
	CHECK(mem_resident(&L8, &c, true) == 2 * 8030261248.0 + 12045391872.0);
}

/* Sharding the optimizer divides master and Adam by dp and changes nothing
 * else. */
static void test_zero_divides_optimizer(void)
{
	struct pconf c = pc(2, 2, 4, 1, RC_SELECTIVE, ZERO_0);
	struct mem plain, zero;

	setup();
	mem_train(&job, &L8, &c, &k, &plain);
	c.zero = ZERO_1;
	mem_train(&job, &L8, &c, &k, &zero);
	CHECK_NEAR(zero.master, plain.master / 4, 1e-12);
	CHECK_NEAR(zero.adam, plain.adam / 4, 1e-12);
	CHECK(zero.weights == plain.weights && zero.grads == plain.grads);
	CHECK(zero.act == plain.act && zero.logits == plain.logits);
	/* saved: 12 bytes · P · (1 − 1/4) = 9 · 2,007,564,288 = 18,068,078,592 */
	CHECK_NEAR(plain.total - zero.total, 18068078592.0, 1e-12);
}

/* 1F1B keeps min(m, p) micro-batches in flight on the first stage. */
static void test_1f1b_inflight(void)
{
	const double layer = 175636480.0; /* 70B selective, s 5120, b 1, t 8 */
	struct pconf c;
	struct mem m;

	setup();
	/* dp 64: ceil(128/64) = 2 micro-batches < p = 4 → 2 in flight:
	 * 175,636,480 · 20 layers · 2 = 7,025,459,200 */
	c = pc(8, 4, 64, 1, RC_SELECTIVE, ZERO_1);
	CHECK(job_microbatches(&job, 64, 1) == 2);
	mem_train(&job, &L70, &c, &k, &m);
	CHECK(m.act == layer * 20 * 2);
	CHECK(m.act == 7025459200.0);
	/* dp 2: m = 64 ≥ 4 → 4 in flight: 14,050,918,400 */
	c.dp = 2;
	mem_train(&job, &L70, &c, &k, &m);
	CHECK(m.act == 14050918400.0);
	/* dp 32: m = 4 = p → 4 */
	c.dp = 32;
	mem_train(&job, &L70, &c, &k, &m);
	CHECK(m.act == 14050918400.0);
	/* act_factor scales the activation terms linearly */
	k.act_factor = 1.5;
	mem_train(&job, &L70, &c, &k, &m);
	CHECK(m.act == 1.5 * 14050918400.0);
}

/* When one micro-batch is in flight the last stage (same activations plus
 * the logits and the output layer) is the worse one and is reported.
 * 8B tp 2 pp 2, dp 128 → m = 1:
 *   act 356,515,840 · 16 = 5,704,253,440; logits 5120 · 64,128 · 14 =
 *   4,596,695,040;
 *   weights 2 · 2,007,566,336 = 4,015,132,672 */
static void test_last_stage_reported(void)
{
	struct pconf c = pc(2, 2, 128, 1, RC_SELECTIVE, ZERO_0);
	struct mem m;

	setup();
	CHECK(job_microbatches(&job, 128, 1) == 1);
	mem_train(&job, &L8, &c, &k, &m);
	CHECK(m.act == 5704253440.0);
	CHECK(m.logits == 4596695040.0);
	CHECK(m.weights == 4015132672.0);
}

/* Forward only: weights, one layer's (selective-sized) activations, logits
 * without a gradient.  8B tp 2 pp 1, mb 4:
 *   weights 2 · 4,015,130,624 = 8,030,261,248
 *   act 5120 · 4 · 139,264 / 2 = 1,426,063,360
 *   logits 5120 · 4 · 128256/2 · 10 = 13,133,414,400
 *   frag 0.1 · (1,426,063,360 + 13,133,414,400) = 1,455,947,776
 *   total 8,030,261,248 + 1,426,063,360 + 13,133,414,400 + 1,455,947,776
 *         + 3,221,225,472 = 27,266,912,256 */
static void test_infer_8b(void)
{
	struct pconf c = pc(2, 1, 4, 4, RC_NONE, ZERO_0);
	struct mem m;

	setup();
	mem_infer(&job, &L8, &c, &k, &m);
	CHECK(m.weights == 8030261248.0);
	CHECK(m.grads == 0 && m.master == 0 && m.adam == 0 && m.kv == 0);
	CHECK(m.act == 1426063360.0);
	CHECK(m.logits == 13133414400.0);
	CHECK_NEAR(m.frag, 1455947776.0, 1e-12);
	CHECK_NEAR(m.total, 27266912256.0, 1e-12);
	CHECK_NEAR(m.total, sum_terms(&m), 1e-12);
}

/* 70B inference tp 8 pp 4, mb 1: weights 2 · 2,271,257,600 (last stage) =
 * 4,542,515,200; act 175,636,480; logits 5120 · 129024/8 · 10 =
 * 825,753,600 */
static void test_infer_70b(void)
{
	struct pconf c = pc(8, 4, 1, 1, RC_NONE, ZERO_0);
	struct mem m;

	setup();
	mem_infer(&job, &L70, &c, &k, &m);
	CHECK(m.weights == 4542515200.0);
	CHECK(m.act == 175636480.0);
	CHECK(m.logits == 825753600.0);
	CHECK_NEAR(m.total, sum_terms(&m), 1e-12);
}

/* Generation before any KV: weights of the TP layout (generation does not
 * pipeline) and the workspace.  70B tp 8: 2 · 8,820,786,176 =
 * 17,641,572,352; + 3 GiB = 20,862,797,824.  PP in the config is ignored. */
static void test_gen_base(void)
{
	struct pconf c = pc(8, 4, 1, 1, RC_NONE, ZERO_0);
	struct mem m;

	setup();
	mem_gen_base(&L70, &c, &k, &m);
	CHECK(m.weights == 17641572352.0);
	CHECK(m.kv == 0 && m.act == 0 && m.logits == 0 && m.frag == 0);
	CHECK(m.total == 20862797824.0);
	/* 8B tp 1: 2 · 8,030,261,248 = 16,060,522,496 */
	c = pc(1, 1, 1, 1, RC_NONE, ZERO_0);
	mem_gen_base(&L8, &c, &k, &m);
	CHECK(m.weights == 16060522496.0);
}

/* KV per sequence per GPU: 2 · L · kv · head_dim · 2 bytes / min(tp, kv)
 * · ctx.  8B: 131,072 bytes/token.
 *   tp 1, 5120 tokens: 671,088,640
 *   tp 2: / 2 = 335,544,320
 *   tp 8: / 8 = 83,886,080
 *   tp 16 > 8 KV heads: heads are replicated, still / 8 = 83,886,080
 * 70B: 327,680 bytes/token; tp 8, ctx 4608 (1024 + 3584):
 *   327,680 / 8 · 4608 = 188,743,680 */
static void test_kv_per_seq(void)
{
	CHECK(mem_kv_per_seq(&L8, 1, 5120) == 671088640.0);
	CHECK(mem_kv_per_seq(&L8, 2, 5120) == 335544320.0);
	CHECK(mem_kv_per_seq(&L8, 8, 5120) == 83886080.0);
	CHECK(mem_kv_per_seq(&L8, 16, 5120) == 83886080.0);
	CHECK(mem_kv_per_seq(&L70, 8, 4608) == 188743680.0);
}

/* State kept between stages on the model's home layout: trainable models
 * keep 2 (bf16) + 12/d (fp32 master + Adam) bytes per parameter, frozen
 * ones 2; offloaded nothing. */
static void test_resident(void)
{
	struct pconf home = pc(2, 2, 4, 1, RC_SELECTIVE, ZERO_0);
	const double p = 2007566336.0; /* 8B tp 2 pp 2, worst stage */

	/* 14 · 2,007,566,336 = 28,105,928,704 */
	CHECK(mem_resident(&L8, &home, true) == 28105928704.0);
	CHECK(mem_resident(&L8, &home, true) == 14 * p);
	/* zero over 4: (2 + 3) · p = 10,037,831,680 */
	home.zero = ZERO_1;
	CHECK(mem_resident(&L8, &home, true) == 10037831680.0);
	/* frozen: 2 · p = 4,015,132,672 */
	CHECK(mem_resident(&L8, &home, false) == 4015132672.0);
	home.offload = true;
	CHECK(mem_resident(&L8, &home, true) == 0);
	CHECK(mem_resident(&L8, &home, false) == 0);
}

/* More TP → less memory per GPU, for each term that depends on the layout
 * and for the total. */
static void test_more_tp_less_memory(void)
{
	static const int tps[] = { 1, 2, 4, 8 };
	struct mem prev = { 0 }, m;
	struct pconf c;

	setup();
	for (int r = 0; r < NRECOMPUTE; r++) {
		for (int i = 0; i < 4; i++) {
			c = pc(tps[i], 1, 1, 1, (enum recompute)r, false);
			mem_train(&job, &L8, &c, &k, &m);
			if (i) {
				CHECK(m.total < prev.total);
				CHECK(m.weights < prev.weights && m.adam < prev.adam);
				CHECK(m.logits < prev.logits);
				if (r != RC_FULL)
					CHECK(m.act < prev.act);
			}
			prev = m;
		}
	}
	for (int i = 0; i < 4; i++) {
		c = pc(tps[i], 2, 1, 1, RC_FULL, ZERO_1);
		mem_train(&job, &L70, &c, &k, &m);
		if (i)
			CHECK(m.total < prev.total);
		prev = m;
	}
	for (int i = 0; i < 4; i++) {
		c = pc(tps[i], 1, 1, 1, RC_NONE, ZERO_0);
		mem_infer(&job, &L70, &c, &k, &m);
		if (i)
			CHECK(m.total < prev.total);
		prev = m;
	}
}

/* More PP → fewer layers (and parameters) per GPU; more DP with sharding
 * → less optimizer state; recompute none > selective > full activations. */
static void test_other_monotonic(void)
{
	struct mem a, b;
	struct pconf c;

	setup();
	c = pc(8, 1, 2, 1, RC_FULL, ZERO_0);
	mem_train(&job, &L70, &c, &k, &a);
	c.pp = 4;
	mem_train(&job, &L70, &c, &k, &b);
	CHECK(b.weights < a.weights && b.total < a.total);
	c = pc(8, 4, 2, 1, RC_FULL, ZERO_1);
	mem_train(&job, &L70, &c, &k, &a);
	c.dp = 8;
	mem_train(&job, &L70, &c, &k, &b);
	CHECK(b.adam < a.adam && b.master < a.master && b.total < a.total);
	CHECK(mem_layer_act(&L8, 5120, 1, 2, RC_NONE) > mem_layer_act(&L8, 5120, 1, 2,
								       RC_SELECTIVE));
	CHECK(mem_layer_act(&L8, 5120, 1, 2, RC_SELECTIVE) > mem_layer_act(&L8, 5120, 1, 2,
									    RC_FULL));
	/* fragmentation is 10% of the dynamic terms, workspace a constant */
	k.frag = 0;
	k.workspace_gib = 0;
	c = pc(2, 2, 4, 1, RC_SELECTIVE, ZERO_1);
	mem_train(&job, &L8, &c, &k, &a);
	CHECK(a.frag == 0 && a.workspace == 0);
	CHECK(a.total == a.weights + a.grads + a.master + a.adam + a.act + a.logits);
}

/* ZeRO-3 (FSDP) shards weights, gradients and optimizer over DP: 18/d
 * bytes per parameter, plus the units it holds gathered, the one computing
 * and the one it prefetches.  The units are the embedding, each layer and
 * the final norm with the output layer, and for Llama-3-8B the embedding
 * and output layer (V·h = 525,336,576) are larger than a layer
 * (218,112,000): the largest neighbours are a layer and the output layer,
 *   2 bytes · (218,112,000 + 525,336,576 + 4096) = 1,486,905,344
 * (two layers would be 872,448,000).  With pp 2 the first stage's worst
 * pair is the embedding and a layer, 743,448,576 parameters, the last
 * stage's a layer and the output, 743,452,672. */
static void test_fsdp_shards_everything(void)
{
	struct pconf c = pc(1, 1, 8, 1, RC_SELECTIVE, ZERO_3);
	double p = mem_stage_params(&L8, 1, 1), gathered = 1486905344.0;
	struct mem m;

	setup();
	CHECK(mem_gathered(&L8, &c) == gathered);
	mem_train(&job, &L8, &c, &k, &m);
	CHECK_NEAR(m.weights, 2 * p / 8 + gathered, 1e-12);
	/* and the output layer's gradient unsharded, 2 · 525,340,672 */
	CHECK_NEAR(m.grads, 4 * p / 8 + 1050681344.0, 1e-12);
	CHECK_NEAR(m.master + m.adam, 12 * p / 8, 1e-12);
	CHECK_NEAR(mem_resident(&L8, &c, true), 14 * p / 8, 1e-12);
	CHECK_NEAR(mem_resident(&L8, &c, false), 2 * p / 8, 1e-12);
	mem_infer(&job, &L8, &c, &k, &m);
	CHECK_NEAR(m.weights, 2 * p / 8 + gathered, 1e-12);
	c.pp = 2;
	c.dp = 4;
	CHECK(mem_gathered(&L8, &c) == 2 * 743452672.0);
	/* tp 2 halves every unit (the vocabulary needs no more padding) */
	c = pc(2, 1, 4, 1, RC_SELECTIVE, ZERO_3);
	CHECK(mem_gathered(&L8, &c) == gathered / 2);
	/* nothing gathered below ZeRO-3 */
	c.zero = ZERO_2;
	CHECK(mem_gathered(&L8, &c) == 0);
}

/* With a small vocabulary the layers are the largest units: 8B layers with
 * a 1024-token vocabulary (embedding 4,194,304): two layers,
 * 2 · 2 · 218,112,000 = 872,448,000 bytes. */
static void test_fsdp_layers_largest(void)
{
	struct arch small = L8;
	struct pconf c = pc(1, 1, 8, 1, RC_SELECTIVE, ZERO_3);

	small.vocab = 1024;
	CHECK(mem_gathered(&small, &c) == 872448000.0);
}

/* The response lengths' second moment from mean, p90 and max: a density
 * uniform on [lo, p90] (90%) and [p90, max] (10%), lo matching the mean.
 *   mean 2048, p90 3584, max 4096: lo = (4096 − 768) / 0.9 − 3584
 *   = 113.7777…;  E[r²] = 0.9 · (lo² + 3584 lo + 3584²) / 3
 *   + 0.1 · (3584² + 3584 · 4096 + 4096²) / 3 = 3,979,734.281 + 1,476,744.533
 *   = 5,456,478.815
 *   all three 4096: every response 4096 long, 16,777,216
 *   mean 100 (below what the shape allows): lo clamps to 0,
 *   0.9 · 3584² / 3 + 1,476,744.533 = 5,330,261.333 */
static void test_response_sq(void)
{
	setup();
	CHECK_NEAR(job_response_sq(&job), 5456478.8148148148, 1e-12);
	job.response = (struct response_len){ 4096, 4096, 4096 };
	CHECK_NEAR(job_response_sq(&job), 16777216.0, 1e-12);
	job.response = (struct response_len){ 100, 3584, 4096 };
	CHECK_NEAR(job_response_sq(&job), 5330261.3333333333, 1e-12);
}

/* A paged engine's KV cache, 8B tp 2, 64 sequences (as test_cost.c):
 * KV per token per GPU 65,536 bytes, 72,089.6 with fragmentation 0.1.
 *   area: 64 · (1024 · 2048 + (5,456,478.815 + 2048) / 2)
 *         = 64 · 4,826,415.407 = 308,890,586.07 token-steps
 *   ctx = 4,826,415.407 / 2048 = 2356.648
 * Room 39,168 · 72,089.6 = 2,823,605,452.8 bytes: the pool holds 39,168
 * tokens; steps = 308,890,586.07 / 39,168 = 7886.2997 (more than the
 * longest response, 4096); 64 · 2048 / 7886.2997 = 16.6202 decoding at
 * once and held at once (39,168 / 2356.648); the pool full all along:
 * 39,168 · 65,536 = 2,566,914,048 bytes in flight.
 * Room for 20 GiB: 297,890.9 tokens; steps 4096 (the longest response);
 * all 64 held; in flight 308,890,586.07 / 4096 · 65,536 = 4,942,249,377.2.
 * The pool must hold one sequence at 1024 + 4096 tokens. */
static void test_kv_fill(void)
{
	struct kv_fill f;
	double per = 72089.6;

	setup();
	CHECK(mem_kv_per_token(&L8, 2) == 65536.0);
	CHECK(mem_kv_fill(&job, &L8, 2, 64, 39168 * per, &k, &f));
	CHECK_NEAR(f.pool, 39168, 1e-12);
	CHECK_NEAR(f.area, 308890586.07407407, 1e-12);
	CHECK_NEAR(f.ctx, 2356.6481481481, 1e-12);
	CHECK_NEAR(f.steps, 7886.2996853062, 1e-12);
	CHECK_NEAR(f.active, 16.620215466097, 1e-12);
	CHECK_NEAR(f.held, f.active, 1e-12);
	CHECK_NEAR(f.bytes, 2566914048.0, 1e-12);
	CHECK(mem_kv_fill(&job, &L8, 2, 64, 20.0 * 1073741824, &k, &f));
	CHECK(f.steps == 4096 && f.held == 64);
	CHECK_NEAR(f.active, 32, 1e-12);
	CHECK_NEAR(f.bytes, 4942249377.1851852, 1e-12);
	CHECK(!mem_kv_fill(&job, &L8, 2, 64, 5120 * per - 1, &k, &f));
	CHECK(mem_kv_fill(&job, &L8, 2, 64, 5120 * per, &k, &f));
	/* mem_kv_room gives back a room that holds what an engine held */
	for (double room = 5120 * per; room < 40e9; room *= 1.7) {
		struct kv_fill g;
		CHECK(mem_kv_fill(&job, &L8, 2, 64, room, &k, &f));
		CHECK(mem_kv_fill(&job, &L8, 2, 64, mem_kv_room(&job, &L8, 2, f.held, &k), &k, &g));
		CHECK_NEAR(g.steps, f.steps, 1e-9);
		CHECK_NEAR(g.held, f.held, 1e-9);
		CHECK_NEAR(g.bytes, f.bytes, 1e-9);
	}
}

int main(void)
{
	RUN(test_job_helpers);
	RUN(test_vocab_padding);
	RUN(test_stage_params);
	RUN(test_bias_and_score_head);
	RUN(test_layer_activations);
	RUN(test_head_dim_and_qk_norm);
	RUN(test_no_recompute_keeps_no_scores);
	RUN(test_logits);
	RUN(test_8b_actor_default_plan);
	RUN(test_train_8b_tp2_pp2_dp4_selective_zero);
	RUN(test_train_70b_tp8_pp4_dp2_full);
	RUN(test_train_8b_tp4_none_logits);
	RUN(test_bytes_per_param);
	RUN(test_dtype_sizes_weights);
	RUN(test_zero2_shards_gradients);
	RUN(test_zero_divides_optimizer);
	RUN(test_1f1b_inflight);
	RUN(test_last_stage_reported);
	RUN(test_infer_8b);
	RUN(test_infer_70b);
	RUN(test_gen_base);
	RUN(test_kv_per_seq);
	RUN(test_resident);
	RUN(test_more_tp_less_memory);
	RUN(test_other_monotonic);
	RUN(test_fsdp_shards_everything);
	RUN(test_fsdp_layers_largest);
	RUN(test_response_sq);
	RUN(test_kv_fill);
	return UNIT_END();
}
