/* The memory model, term by term, against hand-computed bytes for
 * Llama-3-8B and Llama-3-70B.
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
	coef_defaults(&k);
}

static struct pconf pc(int tp, int pp, int dp, int mb, enum recompute rc, bool zero)
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
	/* logits carry the padding too: 8B inference, tp 4, mb 1, s 5120:
	 * 5120 · 128512 / 4 · 4 bytes = 657,981,440 */
	{
		struct pconf c = pc(4, 1, 1, 1, RC_SELECTIVE, false);
		struct mem m;
		setup();
		mem_infer(&job, &L8, &c, &k, &m);
		CHECK(m.logits == 657981440.0);
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

/* Korthikanti et al. per layer, bytes, with sequence parallelism:
 *   none:      sbh (34/t + 5as/(ht))
 *   selective: 34 sbh / t
 *   full:      2 sbh */
static void test_layer_activations(void)
{
	/* 8B, s 5120, b 1, t 2: sbh = 5120 · 4096 = 20,971,520
	 *   selective: 34 · 20,971,520 / 2 = 356,515,840
	 *   none: 5as/(ht) = 5 · 32 · 5120 / (4096 · 2) = 100;
	 *         20,971,520 · (17 + 100) = 2,453,667,840
	 *   full: 2 · 20,971,520 = 41,943,040 */
	CHECK(mem_layer_act(&L8, 5120, 1, 2, RC_SELECTIVE) == 356515840.0);
	CHECK(mem_layer_act(&L8, 5120, 1, 2, RC_NONE) == 2453667840.0);
	CHECK(mem_layer_act(&L8, 5120, 1, 2, RC_FULL) == 41943040.0);
	/* 70B, s 5120, b 1, t 8: sbh = 5120 · 8192 = 41,943,040
	 *   selective: 34 · 41,943,040 / 8 = 178,257,920
	 *   none: 5 · 64 · 5120 / (8192 · 8) = 25; 34/8 = 4.25;
	 *         41,943,040 · 29.25 = 1,226,833,920
	 *   full: 83,886,080 */
	CHECK(mem_layer_act(&L70, 5120, 1, 8, RC_SELECTIVE) == 178257920.0);
	CHECK(mem_layer_act(&L70, 5120, 1, 8, RC_NONE) == 1226833920.0);
	CHECK(mem_layer_act(&L70, 5120, 1, 8, RC_FULL) == 83886080.0);
	/* t 1 gives the no-parallelism formula sbh (34 + 5as/h): 8B, s 2048,
	 * b 2: sbh = 2048 · 2 · 4096 = 16,777,216; 5 · 32 · 2048 / 4096 = 80;
	 * 16,777,216 · 114 = 1,912,602,624 */
	CHECK(mem_layer_act(&L8, 2048, 2, 1, RC_NONE) == 1912602624.0);
	/* linear in b; selective and full do not depend on a */
	CHECK(mem_layer_act(&L8, 5120, 4, 2, RC_SELECTIVE) ==
	      4 * mem_layer_act(&L8, 5120, 1, 2, RC_SELECTIVE));
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
 *   logits 5120 · 128256/2 · 4 · 2 = 2,626,682,880,
 *   frag 0.1 · (5,704,253,440 + 2,626,682,880) = 833,093,632
 *   total 30,453,352,448 → the first stage is reported. */
static void test_train_8b_tp2_pp2_dp4_selective_zero(void)
{
	struct pconf c = pc(2, 2, 4, 1, RC_SELECTIVE, true);
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
 *   act: layer inputs 2sbh = 83,886,080 · 20 layers · 4 = 6,710,886,400,
 *        plus one layer recomputed (selective-sized: 34sbh/t =
 *        178,257,920) = 6,889,144,320
 *   frag 688,914,432; workspace 3,221,225,472; total 51,681,902,592
 * Last stage, P = 2,271,257,600 (norm + output instead of embedding):
 *   act 83,886,080 · 20 + 178,257,920 = 1,855,979,520;
 *   logits 5120 · 129024/8 · 8 = 660,602,880; total 46,872,102,912. */
static void test_train_70b_tp8_pp4_dp2_full(void)
{
	struct pconf c = pc(8, 4, 2, 1, RC_FULL, false);
	struct mem m;

	setup();
	mem_train(&job, &L70, &c, &k, &m);
	CHECK(m.weights == 4542513152.0);
	CHECK(m.grads == 9085026304.0);
	CHECK(m.master == 9085026304.0);
	CHECK(m.adam == 18170052608.0);
	CHECK(m.act == 6889144320.0);
	CHECK(m.logits == 0);
	CHECK_NEAR(m.frag, 688914432.0, 1e-12);
	CHECK(m.workspace == WS);
	CHECK_NEAR(m.total, 51681902592.0, 1e-12);
	CHECK_NEAR(m.total, sum_terms(&m), 1e-12);
}

/* 8B, tp 4, pp 1, dp 2, mb 2, no recompute, no sharding: the only stage
 * holds everything and the logits.
 *   P = (2 · 128,512 · 4096 + 6,979,584,000 + 4096) / 4 = 2,008,089,600
 *   weights 4,016,179,200; grads 8,032,358,400; master 8,032,358,400;
 *   adam 16,064,716,800
 *   m = ceil(ceil(128/2)/2) = 32; in flight min(32, 1) = 1
 *   act: sbh = 5120 · 2 · 4096 = 41,943,040; 34/4 = 8.5;
 *        5 · 32 · 5120 / (4096 · 4) = 50 → 41,943,040 · 58.5
 *        = 2,453,667,840 per layer · 32 = 78,517,370,880
 *   logits 5120 · 2 · 128512/4 · 4 · 2 = 2,631,925,760
 *   frag 0.1 · (78,517,370,880 + 2,631,925,760) = 8,114,929,664
 *   total 128,631,064,576 */
static void test_train_8b_tp4_none_logits(void)
{
	struct pconf c = pc(4, 1, 2, 2, RC_NONE, false);
	struct mem m;

	setup();
	mem_train(&job, &L8, &c, &k, &m);
	CHECK(m.weights == 4016179200.0);
	CHECK(m.grads == 8032358400.0);
	CHECK(m.master == 8032358400.0);
	CHECK(m.adam == 16064716800.0);
	CHECK(m.act == 78517370880.0);
	CHECK(m.logits == 2631925760.0);
	CHECK_NEAR(m.frag, 8114929664.0, 1e-12);
	CHECK_NEAR(m.total, 128631064576.0, 1e-12);
	CHECK_NEAR(m.total, sum_terms(&m), 1e-12);
}

/* Bytes per parameter: 2 + 4 + 4 + 8 = 18 without sharding; 6 + 12/d with
 * the optimizer sharded over d DP ranks (pp 1, where every GPU holds
 * mem_stage_params). */
static void test_bytes_per_param(void)
{
	static const int dps[] = { 1, 2, 4, 8, 16 };
	const struct arch *as[] = { &L8, &L70 };

	setup();
	for (int i = 0; i < 2; i++) {
		for (int j = 0; j < 5; j++) {
			int d = dps[j];
			struct pconf c = pc(8, 1, d, 1, RC_FULL, false);
			struct mem m;
			double p = mem_stage_params(as[i], 8, 1);
			mem_train(&job, as[i], &c, &k, &m);
			CHECK_NEAR((m.weights + m.grads + m.master + m.adam) / p, 18.0, 1e-12);
			c.zero = true;
			mem_train(&job, as[i], &c, &k, &m);
			CHECK_NEAR((m.weights + m.grads + m.master + m.adam) / p, 6.0 + 12.0 / d,
				   1e-12);
			CHECK_NEAR((m.weights + m.grads) / p, 6.0, 1e-12);
		}
	}
}

/* Sharding the optimizer divides master and Adam by dp and changes nothing
 * else. */
static void test_zero_divides_optimizer(void)
{
	struct pconf c = pc(2, 2, 4, 1, RC_SELECTIVE, false);
	struct mem plain, zero;

	setup();
	mem_train(&job, &L8, &c, &k, &plain);
	c.zero = true;
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
	const double layer = 178257920.0; /* 70B selective, s 5120, b 1, t 8 */
	struct pconf c;
	struct mem m;

	setup();
	/* dp 64: ceil(128/64) = 2 micro-batches < p = 4 → 2 in flight:
	 * 178,257,920 · 20 layers · 2 = 7,130,316,800 */
	c = pc(8, 4, 64, 1, RC_SELECTIVE, true);
	CHECK(job_microbatches(&job, 64, 1) == 2);
	mem_train(&job, &L70, &c, &k, &m);
	CHECK(m.act == layer * 20 * 2);
	CHECK(m.act == 7130316800.0);
	/* dp 2: m = 64 ≥ 4 → 4 in flight: 14,260,633,600 */
	c.dp = 2;
	mem_train(&job, &L70, &c, &k, &m);
	CHECK(m.act == 14260633600.0);
	/* dp 32: m = 4 = p → 4 */
	c.dp = 32;
	mem_train(&job, &L70, &c, &k, &m);
	CHECK(m.act == 14260633600.0);
	/* act_factor scales the activation terms linearly */
	k.act_factor = 1.5;
	mem_train(&job, &L70, &c, &k, &m);
	CHECK(m.act == 1.5 * 14260633600.0);
}

/* When one micro-batch is in flight the last stage (same activations plus
 * the logits and the output layer) is the worse one and is reported.
 * 8B tp 2 pp 2, dp 128 → m = 1:
 *   act 356,515,840 · 16 = 5,704,253,440; logits 2,626,682,880;
 *   weights 2 · 2,007,566,336 = 4,015,132,672 */
static void test_last_stage_reported(void)
{
	struct pconf c = pc(2, 2, 128, 1, RC_SELECTIVE, false);
	struct mem m;

	setup();
	CHECK(job_microbatches(&job, 128, 1) == 1);
	mem_train(&job, &L8, &c, &k, &m);
	CHECK(m.act == 5704253440.0);
	CHECK(m.logits == 2626682880.0);
	CHECK(m.weights == 4015132672.0);
}

/* Forward only: weights, one layer's (selective-sized) activations, logits
 * without a gradient.  8B tp 2 pp 1, mb 4:
 *   weights 2 · 4,015,130,624 = 8,030,261,248
 *   act 34 · 5120 · 4 · 4096 / 2 = 1,426,063,360
 *   logits 5120 · 4 · 128256/2 · 4 = 5,253,365,760
 *   frag 0.1 · (1,426,063,360 + 5,253,365,760) = 667,942,912
 *   total 8,030,261,248 + 1,426,063,360 + 5,253,365,760 + 667,942,912
 *         + 3,221,225,472 = 18,598,858,752 */
static void test_infer_8b(void)
{
	struct pconf c = pc(2, 1, 4, 4, RC_NONE, false);
	struct mem m;

	setup();
	mem_infer(&job, &L8, &c, &k, &m);
	CHECK(m.weights == 8030261248.0);
	CHECK(m.grads == 0 && m.master == 0 && m.adam == 0 && m.kv == 0);
	CHECK(m.act == 1426063360.0);
	CHECK(m.logits == 5253365760.0);
	CHECK_NEAR(m.frag, 667942912.0, 1e-12);
	CHECK_NEAR(m.total, 18598858752.0, 1e-12);
	CHECK_NEAR(m.total, sum_terms(&m), 1e-12);
}

/* 70B inference tp 8 pp 4, mb 1: weights 2 · 2,271,257,600 (last stage) =
 * 4,542,515,200; act 178,257,920; logits 5120 · 129024/8 · 4 = 330,301,440 */
static void test_infer_70b(void)
{
	struct pconf c = pc(8, 4, 1, 1, RC_NONE, false);
	struct mem m;

	setup();
	mem_infer(&job, &L70, &c, &k, &m);
	CHECK(m.weights == 4542515200.0);
	CHECK(m.act == 178257920.0);
	CHECK(m.logits == 330301440.0);
	CHECK_NEAR(m.total, sum_terms(&m), 1e-12);
}

/* Generation before any KV: weights of the TP layout (generation does not
 * pipeline) and the workspace.  70B tp 8: 2 · 8,820,786,176 =
 * 17,641,572,352; + 3 GiB = 20,862,797,824.  PP in the config is ignored. */
static void test_gen_base(void)
{
	struct pconf c = pc(8, 4, 1, 1, RC_NONE, false);
	struct mem m;

	setup();
	mem_gen_base(&L70, &c, &k, &m);
	CHECK(m.weights == 17641572352.0);
	CHECK(m.kv == 0 && m.act == 0 && m.logits == 0 && m.frag == 0);
	CHECK(m.total == 20862797824.0);
	/* 8B tp 1: 2 · 8,030,261,248 = 16,060,522,496 */
	c = pc(1, 1, 1, 1, RC_NONE, false);
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
	struct pconf home = pc(2, 2, 4, 1, RC_SELECTIVE, false);
	const double p = 2007566336.0; /* 8B tp 2 pp 2, worst stage */

	/* 14 · 2,007,566,336 = 28,105,928,704 */
	CHECK(mem_resident(&L8, &home, true) == 28105928704.0);
	CHECK(mem_resident(&L8, &home, true) == 14 * p);
	/* zero over 4: (2 + 3) · p = 10,037,831,680 */
	home.zero = true;
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
		c = pc(tps[i], 2, 1, 1, RC_FULL, true);
		mem_train(&job, &L70, &c, &k, &m);
		if (i)
			CHECK(m.total < prev.total);
		prev = m;
	}
	for (int i = 0; i < 4; i++) {
		c = pc(tps[i], 1, 1, 1, RC_NONE, false);
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
	c = pc(8, 1, 2, 1, RC_FULL, false);
	mem_train(&job, &L70, &c, &k, &a);
	c.pp = 4;
	mem_train(&job, &L70, &c, &k, &b);
	CHECK(b.weights < a.weights && b.total < a.total);
	c = pc(8, 4, 2, 1, RC_FULL, true);
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
	c = pc(2, 2, 4, 1, RC_SELECTIVE, true);
	mem_train(&job, &L8, &c, &k, &a);
	CHECK(a.frag == 0 && a.workspace == 0);
	CHECK(a.total == a.weights + a.grads + a.master + a.adam + a.act + a.logits);
}

/* FSDP shards weights, gradients and optimizer over DP: 18/d bytes per
 * parameter, plus the two whole layers it holds gathered (the one computing
 * and the one prefetched): 2 · 2 bytes · 218,112,000 / tp.
 * Llama-3-8B layer: qkv 4096·(32+16)·128 = 25,165,824; proj 16,777,216;
 * mlp 3·4096·14336 = 176,160,768; norms 8,192: 218,112,000. */
static void test_fsdp_shards_everything(void)
{
	struct pconf c = pc(1, 1, 8, 1, RC_SELECTIVE, true);
	double p = mem_stage_params(&L8, 1, 1), gathered = 4.0 * 218112000.0;
	struct mem m;

	setup();
	c.fsdp = true;
	mem_train(&job, &L8, &c, &k, &m);
	CHECK_NEAR(m.weights, 2 * p / 8 + gathered, 1e-12);
	CHECK_NEAR(m.grads, 4 * p / 8, 1e-12);
	CHECK_NEAR(m.master + m.adam, 12 * p / 8, 1e-12);
	CHECK_NEAR(mem_resident(&L8, &c, true), 14 * p / 8, 1e-12);
	CHECK_NEAR(mem_resident(&L8, &c, false), 2 * p / 8, 1e-12);
	mem_infer(&job, &L8, &c, &k, &m);
	CHECK_NEAR(m.weights, 2 * p / 8 + gathered, 1e-12);
}

int main(void)
{
	RUN(test_job_helpers);
	RUN(test_vocab_padding);
	RUN(test_stage_params);
	RUN(test_layer_activations);
	RUN(test_train_8b_tp2_pp2_dp4_selective_zero);
	RUN(test_train_70b_tp8_pp4_dp2_full);
	RUN(test_train_8b_tp4_none_logits);
	RUN(test_bytes_per_param);
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
	return UNIT_END();
}
