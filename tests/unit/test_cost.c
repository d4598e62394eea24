/* The cost model, term by term, against hand computation for Llama-3-8B on
 * an H100 cluster filled by hand.
 *
 * Cluster: 2 nodes × 8 H100-SXM: 989 TFLOP/s bf16, 3350 GB/s HBM; links
 * per GPU 450 GB/s inside a node, 48 GB/s between nodes, 50 GB/s to host.
 * Default coefficients: train_eff 0.45, infer_eff 0.50, prefill_eff 0.55,
 * decode_eff 0.60, link efficiencies 0.8 (intra, inter) and 0.7 (host),
 * all-reduce latency 10 µs, 2 ms per micro-batch, 5 ms per decode step,
 * 0.5 s per model-stage, frag 0.10.  Effective bandwidths, bytes/s:
 *   intra 450e9 · 0.8 = 360e9;  inter 48e9 · 0.8 = 38.4e9;
 *   host 50e9 · 0.7 = 35e9;     HBM in decode 3350e9 · 0.6 = 2.01e12.
 *
 * Job (by hand): 128 prompts × 4 samples = 512 sequences; prompt 1024;
 * response mean 2048, p90 3584, max 4096; 1 PPO epoch, 4 mini-batches.
 * Compute uses the mean sequence s = 1024 + 2048 = 3072; the step has
 * 512 · 3072 = 1,572,864 tokens.
 *
 * Llama-3-8B: N = 8,030,261,248 parameters, L 32, h 4096, kv bytes/token
 * 131,072.  Forward FLOPs per token, as cost.c defines them (2N plus causal
 * attention over a sequence of length s, i.e. each token attends s/2
 * positions on average: QKᵀ and AV each 2·h·s/2 per layer):
 *   fwd(s) = 2N + 2·L·h·s;  fwd(3072) = 16,060,522,496 + 805,306,368
 *                                     = 16,865,828,864.
 * Training = 3 forwards (6N + 3 × attention); full recompute 4 (× 4/3). */
#include "plan/cost.h"
#include "plan/memory.h"
#include "unit.h"

#include <string.h>

#define N8 8030261248.0
#define PEAK 989e12
#define INTRA 360e9
#define INTER 38.4e9
#define HOST 35e9
#define HBM 2.01e12
#define REL 1e-9

static struct job job;
static struct cluster cl;
static struct coef k;
static struct env env = { &job, &cl, &k };
static const struct arch L8 = { .layers = 32, .hidden = 4096, .heads = 32, .kv_heads = 8,
				.ffn = 14336, .vocab = 128256, .dtype_bytes = 2, .dtype = "bf16" };

static double fwd8(double s)
{
	return 2 * N8 + 2.0 * 32 * 4096 * s;
}

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

	memset(&cl, 0, sizeof cl);
	strcpy(cl.name, "hand");
	cl.nodes = 2;
	cl.gpus_per_node = 8;
	strcpy(cl.gpu.model, "H100-SXM");
	cl.gpu.mem_gib = 80;
	cl.gpu.tflops = 989;
	cl.gpu.hbm_gbps = 3350;
	cl.intra_gbps = 450;
	cl.inter_gbps = 48;
	cl.host_gbps = 50;
	cl.host_mem_gib = 1024;
	cl.headroom = 0.05;
	for (int i = 0; i < 16; i++)
		cl.up[i] = true;

	cost_coef_defaults(&k);
}

static struct pconf pc(int tp, int pp, int dp, int mb, enum recompute rc, enum zero_stage zero)
{
	struct pconf c = { .tp = tp, .pp = pp, .dp = dp, .mb = mb, .rc = rc, .zero = zero };

	return c;
}

static double sum_terms(const struct stime *t)
{
	return t->compute + t->comm + t->bubble + t->overhead + t->move;
}

/* A group of span consecutive GPUs uses the intra-node link when it fits in
 * one node (8 GPUs), else the inter-node one. */
static void test_link_choice(void)
{
	setup();
	CHECK_NEAR(cost_link_bw(&env, 1), INTRA, REL);
	CHECK_NEAR(cost_link_bw(&env, 2), INTRA, REL);
	CHECK_NEAR(cost_link_bw(&env, 8), INTRA, REL);
	CHECK_NEAR(cost_link_bw(&env, 9), INTER, REL);
	CHECK_NEAR(cost_link_bw(&env, 16), INTER, REL);
	CHECK_NEAR(cost_host_bw(&env), HOST, REL);
	/* the coefficients scale them */
	k.intra_eff = 0.5;
	k.inter_eff = 0.25;
	CHECK_NEAR(cost_link_bw(&env, 8), 225e9, REL);
	CHECK_NEAR(cost_link_bw(&env, 9), 12e9, REL);
}

/* Training compute = epochs · tokens · 3 · fwd(s) / (GPUs · peak · eff).
 * 8B, tp 2 pp 2 dp 4 = 16 GPUs, selective:
 *   1 · 1,572,864 · 3 · 16,865,828,864 / (16 · 989e12 · 0.45)
 *   = 7.958…e16 / 7.1208e15 = 11.1761270 s
 * Per token that is 6N + 6·L·h·s: 6 · 8,030,261,248 = 48,181,567,488 plus
 * attention 6 · 32 · 4096 · 3072 = 2,415,919,104. */
static void test_train_compute(void)
{
	struct pconf c = pc(2, 2, 4, 1, RC_SELECTIVE, ZERO_0);
	struct stime t;
	double want = 1.0 * 1572864 * 3 * fwd8(3072) / (16 * PEAK * 0.45);

	setup();
	cost_train(&env, &L8, &c, &t);
	CHECK_NEAR(t.compute, want, REL);
	CHECK_NEAR(t.compute, 11.176127001, 1e-8);
	CHECK_NEAR(3 * fwd8(3072), 6 * N8 + 6.0 * 32 * 4096 * 3072, 1e-15);
	/* the layout does not change the FLOPs per GPU, only their count:
	 * 8 GPUs take twice as long as 16 */
	c = pc(2, 1, 4, 1, RC_SELECTIVE, ZERO_0);
	cost_train(&env, &L8, &c, &t);
	CHECK_NEAR(t.compute, 2 * want, REL);
	/* epochs multiply it */
	job.ppo_epochs = 3;
	c = pc(2, 2, 4, 1, RC_SELECTIVE, ZERO_0);
	cost_train(&env, &L8, &c, &t);
	CHECK_NEAR(t.compute, 3 * want, REL);
	/* train_eff divides it */
	job.ppo_epochs = 1;
	k.train_eff = 0.9;
	cost_train(&env, &L8, &c, &t);
	CHECK_NEAR(t.compute, want / 2, REL);
}

/* Full recompute adds a forward: × 4/3, whatever the layout. */
static void test_train_full_recompute(void)
{
	struct pconf c;
	struct stime sel, full;

	setup();
	for (int tp = 1; tp <= 8; tp *= 2) {
		c = pc(tp, 2, 1, 1, RC_SELECTIVE, ZERO_0);
		cost_train(&env, &L8, &c, &sel);
		c.rc = RC_NONE;
		cost_train(&env, &L8, &c, &full);
		CHECK_NEAR(full.compute, sel.compute, REL); /* none = selective in FLOPs */
		c.rc = RC_FULL;
		cost_train(&env, &L8, &c, &full);
		CHECK_NEAR(full.compute / sel.compute, 4.0 / 3.0, REL);
		CHECK_NEAR(full.bubble / sel.bubble, 4.0 / 3.0, REL);
	}
	/* full: 1,572,864 · 4 · 16,865,828,864 / (2 · 989e12 · 0.45) */
	c = pc(2, 1, 1, 1, RC_FULL, ZERO_0);
	cost_train(&env, &L8, &c, &full);
	CHECK_NEAR(full.compute, 1572864.0 * 4 * fwd8(3072) / (2 * PEAK * 0.45), REL);
}

/* Pipeline bubble (p − 1)/m of the compute, m micro-batches per mini-batch
 * per replica: tp 2 pp 2 dp 4 mb 1 → m = 128/4 = 32, bubble = compute/32
 * = 0.349253969 s; pp 4 dp 2 mb 2 → m = ceil(64/2) = 32, 3/32. */
static void test_train_bubble(void)
{
	struct pconf c = pc(2, 2, 4, 1, RC_SELECTIVE, ZERO_0);
	struct stime t;

	setup();
	cost_train(&env, &L8, &c, &t);
	CHECK_NEAR(t.bubble, t.compute / 32, REL);
	CHECK_NEAR(t.bubble, 0.349253970, 1e-8);
	c = pc(2, 4, 2, 2, RC_SELECTIVE, ZERO_0);
	cost_train(&env, &L8, &c, &t);
	CHECK_NEAR(t.bubble, t.compute * 3 / 32, REL);
	c = pc(8, 1, 2, 1, RC_SELECTIVE, ZERO_0);
	cost_train(&env, &L8, &c, &t);
	CHECK(t.bubble == 0);
}

/* DP gradient all-reduce: ring, 2(n−1)/n of the fp32 gradient bytes over
 * the link the DP group's span uses, once per optimizer step (epochs ·
 * mini-batches = 4).  tp 1 pp 1: no TP or PP traffic, so comm is DP alone.
 * Gradient bytes 4 · 8,030,261,248 = 32,121,044,992.
 *   n 2:  4 · 32,121,044,992 · 1     / 360e9  = 0.356900500 s
 *   n 4:  4 · 32,121,044,992 · 1.5   / 360e9  = 0.535350750 s
 *   n 8:  4 · 32,121,044,992 · 1.75  / 360e9  = 0.624575875 s
 *   n 16: 4 · 32,121,044,992 · 1.875 / 38.4e9 = 6.273641602 s (inter-node)
 *   n 1:  0 */
static void test_train_dp_ring(void)
{
	static const int ns[] = { 1, 2, 4, 8, 16 };
	static const double want[] = { 0, 0.356900500, 0.535350750, 0.624575875,
				       6.273641602 };
	struct stime t;

	setup();
	for (int i = 0; i < 5; i++) {
		int n = ns[i];
		struct pconf c = pc(1, 1, n, 1, RC_SELECTIVE, ZERO_0);
		double bw = n <= 8 ? INTRA : INTER;
		cost_train(&env, &L8, &c, &t);
		CHECK_NEAR(t.comm, 4 * 4 * N8 * 2.0 * (n - 1) / n / bw, REL);
		CHECK_NEAR(t.comm, want[i], 1e-8);
	}
}

/* With the optimizer sharded: reduce-scatter the fp32 gradients and
 * all-gather the bf16 weights, (n−1)/n · (4 + 2) bytes per parameter.
 *   n 4: 4 steps · 8,030,261,248 · 6 · 3/4 / 360e9 = 0.401513062 s */
static void test_train_dp_zero(void)
{
	struct pconf c = pc(1, 1, 4, 1, RC_SELECTIVE, ZERO_1);
	struct stime t;

	setup();
	cost_train(&env, &L8, &c, &t);
	CHECK_NEAR(t.comm, 4 * N8 * 6 * 0.75 / INTRA, REL);
	CHECK_NEAR(t.comm, 0.401513062, 1e-8);
}

/* ZeRO-2 also shards the gradients, so a micro-batch's gradients cannot
 * wait for the next in a full buffer: they are reduce-scattered every
 * micro-batch, during the backward pass, and the weights all-gathered once
 * per optimizer step.  tp 1 pp 1 dp 4 mb 1: m = 128 / 4 = 32 micro-batches
 * a mini-batch, 128 in the step.
 *   all-gather: 4 steps · 2 · 8,030,261,248 · 3/4 / 360e9 = 0.133837687 s
 *   reduce-scatter: 128 · 4 · 8,030,261,248 · 3/4 / 360e9 = 8.565611998 s,
 *   hidden behind 1,572,864 · 3 · 16,865,828,864 / (4 · 989e12 · 0.45)
 *   = 44.704508 s of compute. */
static void test_train_dp_zero2(void)
{
	struct pconf c = pc(1, 1, 4, 1, RC_SELECTIVE, ZERO_2);
	struct stime t;

	setup();
	cost_train(&env, &L8, &c, &t);
	CHECK_NEAR(t.comm, 4 * 2 * N8 * 0.75 / INTRA, REL);
	CHECK_NEAR(t.comm, 0.133837687, 1e-8);
}

/* ZeRO-3 gathers the weights for each micro-batch's forward and backward
 * and reduce-scatters its gradients, (2 + 2 + 4) bytes a parameter, and
 * shows only what compute does not hide.  tp 1 pp 1 dp 16 (both nodes:
 * 38.4e9): m = 128 / 16 = 8, 32 micro-batches in the step:
 *   32 · 8 · 8,030,261,248 · 15/16 / 38.4e9 = 50.189132800 s
 *   compute 1,572,864 · 3 · 16,865,828,864 / (16 · 989e12 · 0.45)
 *   = 11.176127001 s: 39.013005799 s shows. */
static void test_train_dp_zero3(void)
{
	struct pconf c = pc(1, 1, 16, 1, RC_SELECTIVE, ZERO_3);
	struct stime t;
	double compute = 1572864.0 * 3 * fwd8(3072) / (16 * PEAK * 0.45);

	setup();
	cost_train(&env, &L8, &c, &t);
	CHECK_NEAR(t.compute, compute, REL);
	CHECK_NEAR(t.comm, 32 * 8 * N8 * 15 / 16 / INTER - compute, REL);
	CHECK_NEAR(t.comm, 39.013005799, 1e-8);
}

/* TP: 4 all-reduces per layer (2 forward, 2 backward) of the replica's
 * tokens · h bf16 elements, ring 2(t−1)/t, plus a latency per all-reduce
 * per micro-batch.  tp 2 pp 1 dp 1 mb 1 (DP and PP silent):
 *   bytes 1,572,864 · 4096 · 2 · 4 · 32 = 1,649,267,441,664; ring(2) = 1
 *   → / 360e9 = 4.581298449 s
 *   micro-batches 1 epoch · 4 mini-batches · 128 = 512;
 *   latency 512 · 4 · 32 · 10e-6 = 0.65536 s
 * Full recompute re-runs the forward's 2 all-reduces: 6 per layer, × 1.5. */
static void test_train_tp_comm(void)
{
	struct pconf c = pc(2, 1, 1, 1, RC_SELECTIVE, ZERO_0);
	struct stime t;
	double bytes = 1572864.0 * 4096 * 2 * 4 * 32;

	setup();
	cost_train(&env, &L8, &c, &t);
	CHECK_NEAR(t.comm, bytes / INTRA + 512 * 4 * 32 * 10e-6, REL);
	CHECK_NEAR(t.comm, 4.581298449 + 0.65536, 1e-8);
	c.rc = RC_FULL;
	cost_train(&env, &L8, &c, &t);
	CHECK_NEAR(t.comm, 1.5 * (bytes / INTRA + 512 * 4 * 32 * 10e-6), REL);
	/* tp 4: ring 2 · 3/4 = 1.5 */
	c = pc(4, 1, 1, 1, RC_SELECTIVE, ZERO_0);
	cost_train(&env, &L8, &c, &t);
	CHECK_NEAR(t.comm, 1.5 * bytes / INTRA + 512 * 4 * 32 * 10e-6, REL);
	/* tp 1: none */
	c = pc(1, 1, 1, 1, RC_SELECTIVE, ZERO_0);
	cost_train(&env, &L8, &c, &t);
	CHECK(t.comm == 0);
	/* an fp32 model's activations are 4 bytes: twice the bytes, the same
	 * latency */
	{
		struct arch f32 = L8;
		f32.dtype_bytes = 4;
		c = pc(2, 1, 1, 1, RC_SELECTIVE, ZERO_0);
		cost_train(&env, &f32, &c, &t);
		CHECK_NEAR(t.comm, 2 * bytes / INTRA + 512 * 4 * 32 * 10e-6, REL);
	}
}

/* PP: each GPU sends its replica's activations forward and their
 * gradients back, tokens · h · 2 bytes each way, over the link the whole
 * model-stage spans.  tp 1 pp 2 dp 1 (2 GPUs, one node):
 *   1,572,864 · 4096 · 2 · 2 / 360e9 = 0.071582788 s
 * tp 4 pp 4 dp 1 = 16 GPUs spans both nodes: PP over the inter-node link,
 * with TP traffic on top (checked as the sum). */
static void test_train_pp_comm(void)
{
	struct pconf c = pc(1, 2, 1, 1, RC_SELECTIVE, ZERO_0);
	struct stime t;

	setup();
	cost_train(&env, &L8, &c, &t);
	CHECK_NEAR(t.comm, 1572864.0 * 4096 * 2 * 2 / INTRA, REL);
	CHECK_NEAR(t.comm, 0.071582788, 1e-8);
	/* tp 4 pp 4: 8 layers per stage, 512 micro-batches;
	 * TP 1,572,864 · 4096 · 2 · 4 · 8 · 1.5 / 360e9 + 512 · 4 · 8 · 1e-5
	 * PP 1,572,864 · 4096 · 2 · 2 / 38.4e9 */
	c = pc(4, 4, 1, 1, RC_SELECTIVE, ZERO_0);
	cost_train(&env, &L8, &c, &t);
	CHECK_NEAR(t.comm, 1572864.0 * 4096 * 2 * 4 * 8 * 1.5 / INTRA + 512 * 4 * 8 * 1e-5 +
		   1572864.0 * 4096 * 2 * 2 / INTER, REL);
}

/* All the terms of one training layout together: 8B tp 2 pp 2 dp 4 mb 1,
 * selective, no sharding (m = 32, 16 layers per stage, 4 optimizer steps).
 *   TP: 393,216 tokens/replica · 4096 · 2 · 4 · 16 = 206,158,430,208 bytes
 *       / 360e9 = 0.572662306; latency 128 · 4 · 16 · 1e-5 = 0.08192
 *   DP: 4 · (4 · 2,007,566,336) · 1.5 / 360e9 = 0.133837756 (tp·dp = 8
 *       GPUs: intra-node)
 *   PP: 393,216 · 4096 · 2 · 2 / 38.4e9 = 0.16777216 (16 GPUs: inter)
 *   comm = 0.956192222 s
 *   overhead = 4 steps · (32 + 2 − 1) · 2e-3 + 0.5 = 0.764 s
 *   total = 11.176127001 + 0.956192222 + 0.349253969 + 0.764 */
static void test_train_all_terms(void)
{
	struct pconf c = pc(2, 2, 4, 1, RC_SELECTIVE, ZERO_0);
	struct stime t;
	double tp = 393216.0 * 4096 * 2 * 4 * 16 / INTRA + 128 * 4 * 16 * 1e-5;
	double dp = 4 * (4 * 2007566336.0) * 1.5 / INTRA;
	double pp = 393216.0 * 4096 * 2 * 2 / INTER;

	setup();
	cost_train(&env, &L8, &c, &t);
	CHECK_NEAR(t.comm, tp + dp + pp, REL);
	CHECK_NEAR(t.comm, 0.956192222, 1e-8);
	CHECK_NEAR(t.overhead, 4 * 33 * 2e-3 + 0.5, REL);
	CHECK(t.move == 0);
	CHECK_NEAR(t.total, sum_terms(&t), 1e-12);
	CHECK_NEAR(t.total, 11.176127001 + 0.956192222 + 0.349253970 + 0.764, 1e-8);
}

/* DISCREPANCY (cost.c cost_train): the TP all-reduce latency counts the
 * epochs twice.  cost_train passes micro = epochs · mini_batches · m to
 * tp_comm, which returns bytes/bw + micro · calls · layers · latency, and
 * then multiplies the whole by epochs.  With 2 epochs, tp 2 pp 1 dp 1 mb 1:
 *   bytes: 2 · 1,572,864 · 4096 · 2 · 4 · 32 / 360e9 = 9.162596898 s
 *   latency: 2 epochs · 4 mini-batches · 128 micro-batches = 1024 all-
 *   reduce rounds · 4 · 32 · 10e-6 = 1.31072 s
 * cost.c gives 2 · 1.31072 = 2.62144 s of latency instead. */
static void test_train_tp_latency_epochs_DISCREPANCY(void)
{
	struct pconf c = pc(2, 1, 1, 1, RC_SELECTIVE, ZERO_0);
	struct stime t;

	setup();
	job.ppo_epochs = 2;
	cost_train(&env, &L8, &c, &t);
	CHECK_NEAR(t.comm, 2 * 1572864.0 * 4096 * 2 * 4 * 32 / INTRA + 1024 * 4 * 32 * 10e-6,
		   REL);
}

/* Inference: forward passes over the step's tokens.
 * 8B tp 2 pp 1 dp 8 mb 4 (16 GPUs): per replica 64 sequences → m = 16.
 *   compute 1,572,864 · 16,865,828,864 / (16 · 989e12 · 0.5) = 3.352838100 s
 *   TP 2 all-reduces per layer: 196,608 tokens · 4096 · 2 · 2 · 32 / 360e9
 *      = 0.286331153 + latency 16 · 2 · 32 · 1e-5 = 0.01024 → 0.296571153
 *   overhead 16 · 2e-3 + 0.5 = 0.532; no bubble */
static void test_infer_terms(void)
{
	struct pconf c = pc(2, 1, 8, 4, RC_NONE, ZERO_0);
	struct stime t;

	setup();
	cost_infer(&env, &L8, &c, &t);
	CHECK_NEAR(t.compute, 1572864.0 * fwd8(3072) / (16 * PEAK * 0.5), REL);
	CHECK_NEAR(t.compute, 3.352838100, 1e-8);
	CHECK_NEAR(t.comm, 196608.0 * 4096 * 2 * 2 * 32 / INTRA + 16 * 2 * 32 * 1e-5, REL);
	CHECK_NEAR(t.comm, 0.296571153, 1e-8);
	CHECK(t.bubble == 0);
	CHECK_NEAR(t.overhead, 0.532, REL);
	CHECK_NEAR(t.total, sum_terms(&t), 1e-12);
	/* pp 2 dp 4 mb 4: per replica 128 → m = 32, bubble compute/32; PP one
	 * direction: 393,216 · 4096 · 2 / 360e9 (16 GPUs → inter: 38.4e9) */
	c = pc(2, 2, 4, 4, RC_NONE, ZERO_0);
	cost_infer(&env, &L8, &c, &t);
	CHECK_NEAR(t.bubble, t.compute / 32, REL);
	CHECK_NEAR(t.comm, 393216.0 * 4096 * 2 * 2 * 16 / INTRA + 32 * 2 * 16 * 1e-5 +
		   393216.0 * 4096 * 2 / INTER, REL);
	CHECK_NEAR(t.overhead, (32 + 1) * 2e-3 + 0.5, REL);
	/* the training stage costs three of these forwards on the same GPUs */
	{
		struct stime tr;
		c = pc(2, 1, 8, 4, RC_SELECTIVE, ZERO_0);
		cost_infer(&env, &L8, &c, &t);
		cost_train(&env, &L8, &c, &tr);
		CHECK_NEAR(tr.compute / t.compute, 3 * 0.5 / 0.45, REL);
	}
}

/* Generation, tp 2, 8 engines (dp 8): 64 sequences per engine, each of
 * prompt P = 1024 and a response r whose lengths memory.c describes by a
 * density uniform on [lo, 3584] (90%) and [3584, 4096] (10%) with the mean
 * 2048: lo = (2 · 2048 − 0.1 · 7680) / 0.9 − 3584 = 113.7777…, and
 *   E[r²] = 0.9 · (lo² + 3584 lo + 3584²) / 3 + 0.1 · (3584² + 3584 · 4096
 *           + 4096²) / 3 = 5,456,478.8148…
 * A sequence holds P + k tokens of KV at its k-th decode step, so over its
 * life Σ (P + k) = P r + r (r + 1)/2, in expectation
 *   1024 · 2048 + (5,456,478.8148 + 2048) / 2 = 4,826,415.407 token-steps;
 * the engine's 64 take area = 308,890,586.07.  A decoded token attends on
 * average ctx = 4,826,415.407 / 2048 = 2356.648 positions.
 * KV per token per GPU 131,072 / 2 = 65,536 bytes (bf16), 72,089.6 with
 * 10% fragmentation.
 * 20 GiB of room: the pool holds 21,474,836,480 / 72,089.6 = 297,890.9
 * tokens, more than area / 4096 = 75,412: the longest response paces
 * decoding, 4096 steps, 64 · 2048 / 4096 = 32 sequences decoding at once,
 * the engine's 64 held at once (297,890.9 / 2356.648 > 64).
 * Decode step reads weights/tp and the KV of the tokens in flight:
 *   2 · 4,015,130,624 + 32 · 65,536 · 2356.648 = 12,972,490,538.7 bytes
 *   / 2.01e12 = 6.453985386 ms  (memory-bound: the FLOPs take ~0.5 ms)
 * TP: 2 all-reduces per layer of 32 tokens · 4096 · 2 bytes, ring(2) = 1:
 *   2 · 32 · (1e-5 + 32 · 4096 · 2 / 360e9) = 0.686603378 ms per step
 *   → comm 4096 · 0.686603378e-3 = 2.812327435 s
 * overhead 4096 · 5e-3 + 0.5 = 20.98 s */
#define AREA 308890586.07407407
#define CTX 2356.6481481481483
#define PER_TOKEN 72089.6

static void test_gen_paced_by_longest(void)
{
	struct pconf c = pc(2, 1, 8, 1, RC_NONE, ZERO_0);
	struct stime t;
	double room = 20.0 * 1073741824;
	double step = (2 * 4015130624.0 + 32 * 65536.0 * CTX) / HBM;

	setup();
	CHECK(cost_gen(&env, &L8, &c, room, &t));
	CHECK(t.concurrency == 64);
	CHECK_NEAR(t.overhead, 4096 * 5e-3 + 0.5, REL); /* 4096 steps */
	CHECK_NEAR(t.comm, 4096 * 2 * 32 * (1e-5 + 32 * 4096 * 2 / INTRA), REL);
	CHECK_NEAR(t.comm, 2.812327435, 1e-8);
	CHECK_NEAR(step, 6.453985386e-3, 1e-8);
	/* decode is memory-bound: with twice the HBM bandwidth the compute term
	 * drops by exactly half the decode time, 4096 · step / 2 (the prefill
	 * term does not depend on HBM) */
	{
		struct stime fast;
		cl.gpu.hbm_gbps = 6700;
		CHECK(cost_gen(&env, &L8, &c, room, &fast));
		CHECK_NEAR(t.compute - fast.compute, 4096 * step / 2, 1e-9);
	}
	CHECK_NEAR(t.total, sum_terms(&t), 1e-12);
	/* a longer longest response paces more steps even with room to spare:
	 * max 8192 → 8192 steps, 16 decoding at once */
	cl.gpu.hbm_gbps = 3350;
	job.response.max = 8192;
	CHECK(cost_gen(&env, &L8, &c, 100 * room, &t));
	CHECK_NEAR(t.overhead, 8192 * 5e-3 + 0.5, REL);
	CHECK_NEAR(t.comm, 8192 * 2 * 32 * (1e-5 + 16 * 4096 * 2 / INTRA), REL);
}

/* A paged engine keeps its pool full, holding only what sequences have
 * written so far: with room 2,823,605,452.8 bytes the pool holds
 * 2,823,605,452.8 / 72,089.6 = 39,168 tokens, and the 64 sequences' area
 * takes 308,890,586.07 / 39,168 = 7886.2997 steps (> 4096), with
 * 64 · 2048 / 7886.2997 = 16.6202 sequences decoding at once, which is
 * also how many the pool holds at the mean context, 39,168 / 2356.648.
 * (Reserving every sequence's 90th percentile, 1024 + 3584 tokens, held 8
 * of them and took 16,384 steps.) */
static void test_gen_paged(void)
{
	struct pconf c = pc(2, 1, 8, 1, RC_NONE, ZERO_0);
	struct stime t, fast;
	double room = 39168 * PER_TOKEN, steps = AREA / 39168, active = 64 * 2048 / steps;
	double step = (2 * 4015130624.0 + active * 65536.0 * CTX) / HBM;

	setup();
	CHECK_NEAR(room, 2823605452.8, 1e-12);
	CHECK_NEAR(steps, 7886.2997, 1e-8);
	CHECK(cost_gen(&env, &L8, &c, room, &t));
	CHECK_NEAR(t.concurrency, 39168 / CTX, 1e-12);
	CHECK_NEAR(t.concurrency, active, 1e-12);
	CHECK_NEAR(t.overhead, steps * 5e-3 + 0.5, REL);
	CHECK_NEAR(t.comm, steps * 2 * 32 * (1e-5 + active * 4096 * 2 / INTRA), REL);
	cl.gpu.hbm_gbps = 6700;
	CHECK(cost_gen(&env, &L8, &c, room, &fast));
	CHECK_NEAR(t.compute - fast.compute, steps * step / 2, 1e-9);
	/* less room, never faster */
	cl.gpu.hbm_gbps = 3350;
	CHECK(cost_gen(&env, &L8, &c, room / 2, &fast));
	CHECK(fast.total > t.total);
}

/* The pool must hold one sequence at its longest, 1024 + 4096 tokens:
 * 5120 · 72,089.6 = 369,098,752 bytes; then it holds 5120 / 2356.648 =
 * 2.1726 sequences at the mean context. */
static void test_gen_no_room(void)
{
	struct pconf c = pc(2, 1, 8, 1, RC_NONE, ZERO_0);
	struct stime t;

	setup();
	t.total = 123;
	CHECK(!cost_gen(&env, &L8, &c, 369098751.0, &t));
	CHECK(t.total == 0 && t.compute == 0 && t.concurrency == 0);
	CHECK(!cost_gen(&env, &L8, &c, 0, &t));
	CHECK(cost_gen(&env, &L8, &c, 369098752.0, &t));
	CHECK_NEAR(t.concurrency, 5120 / CTX, 1e-12);
}

/* Prefill of a P-token prompt is a causal forward over P tokens, fwd(P):
 * per engine 64 · 1024 · fwd(1024) / (2 · 989e12 · 0.55) = 0.983… s;
 * decode is memory-bound here: 4096 steps of the step above. */
static void test_gen_prefill(void)
{
	struct pconf c = pc(2, 1, 8, 1, RC_NONE, ZERO_0);
	struct stime t;
	double prefill = 64.0 * 1024 * fwd8(1024) / (2 * PEAK * 0.55);
	double decode = 4096 * (2 * 4015130624.0 + 32 * 65536.0 * CTX) / HBM;

	setup();
	CHECK(cost_gen(&env, &L8, &c, 20.0 * 1073741824, &t));
	CHECK_NEAR(t.compute, prefill + decode, REL);
}

/* A decoded token at context c attends all c positions: QKᵀ 2·h·c and AV
 * 2·h·c FLOPs per layer, so 2N + 4·L·h·c, fwd(2c) in cost.c's notation.
 * Checked where decode is compute-bound (HBM made very fast) by the
 * difference between two infer_eff values, which cancels the prefill:
 *   32 decoding at c 2356.648, per GPU (tp 2): 32 · (2N + 4 · 32 · 4096 ·
 *   2356.648) / 2 FLOPs per step; 4096 steps. */
static void test_gen_decode_flops(void)
{
	struct pconf c = pc(2, 1, 8, 1, RC_NONE, ZERO_0);
	struct stime a, b;
	double flops = 32 * (2 * N8 + 4.0 * 32 * 4096 * CTX) / 2;

	setup();
	cl.gpu.hbm_gbps = 1e9;
	CHECK(cost_gen(&env, &L8, &c, 20.0 * 1073741824, &a));
	k.infer_eff = 0.25;
	CHECK(cost_gen(&env, &L8, &c, 20.0 * 1073741824, &b));
	CHECK_NEAR(b.compute - a.compute, 4096 * flops / (PEAK * 0.25) -
		   4096 * flops / (PEAK * 0.5), REL);
}

/* The search bounds generation by its time at less resident memory: more
 * room for the KV cache never makes it slower, whatever the lengths. */
static void test_gen_monotone_in_room(void)
{
	static const double maxes[] = { 2048, 4096, 16384 };
	struct pconf c = pc(2, 1, 8, 1, RC_NONE, ZERO_0);

	setup();
	for (int i = 0; i < 3; i++) {
		double prev = HUGE_VAL;
		job.response.max = (long)maxes[i];
		job.response.p90 = maxes[i] * 0.8;
		job.response.mean = maxes[i] * 0.3;
		for (double room = 0.2e9; room < 80e9; room *= 1.1) {
			struct stime t;
			if (!cost_gen(&env, &L8, &c, room, &t))
				continue;
			CHECK(t.total <= prev);
			prev = t.total;
		}
	}
}

/* Moving the actor from its training layout to its generation layout.
 * Same GPUs, same TP and DP, pp 1: the engines generate from the training
 * layout's weights, and nothing moves, whatever the TP. */
static void test_move_same_layout(void)
{
	struct pconf tr = pc(2, 1, 4, 1, RC_SELECTIVE, ZERO_0), gen = pc(2, 1, 4, 1, RC_NONE, ZERO_0);
	struct move_parts m;

	setup();
	for (int t = 1; t <= 8; t *= 2) {
		tr.tp = gen.tp = t;
		tr.dp = gen.dp = 8 / t;
		cost_move_parts(&env, &L8, &tr, &gen, true, &m);
		CHECK(m.pieces == 0 && m.bytes == 0);
		CHECK(cost_move(&env, &L8, &tr, &gen, true) == 0);
	}
}

/* The move as pieces.  Llama 8B's elements: a layer 2 norms of 4096 and
 * 218,103,808 split by TP (qkv 8·768·4096, proj 4096², fc1 2·14336·4096,
 * fc2 14336·4096); the embedding and output layer 128,256 rows of 4096
 * each, padded per TP rank to a multiple of 128·tp rows: tp 2 gives rows
 * [0, 64128) and [64128, 128256), tp 4 ranks of 32,128 rows, rank 1 to
 * row 64,256.  An engine's GPU at tp 2 holds 32·(8192 + 109,051,904) +
 * 4096 + 2·64128·4096 = 4,015,263,744 elements, 8,030,527,488 bytes.
 *
 * Training tp 4 dp 2 → engines tp 2 dp 4 on the same 8 GPUs: each engine
 * TP rank's half of a split tensor overlaps two training quarters: 2
 * pieces, a norm 1, the vocabulary's rank 0 two training ranks and rank 1
 * three (rows [64128, 64256) from training rank 1).  320 + 1 + 4 = 325
 * pieces on engine TP rank 0, 327 on rank 1.  GPU 1 (engine rank 1,
 * training rank 1) copies its norms (32·8192 + 4096 = 266,240 elements)
 * and those 128 rows of both (1,048,576), 2,629,632 bytes in all, each
 * read and written at HBM · decode_eff, and receives the rest,
 * 8,027,897,856 bytes: the slowest GPU at 20 µs a piece (GPU 2, engine
 * rank 0, copies only the norms but has 2 pieces fewer).  In all,
 * 4·325 + 4·327 = 2608 pieces, 8 × 8,030,527,488 bytes. */
static void test_move_pieces(void)
{
	struct pconf tr = pc(4, 1, 2, 1, RC_SELECTIVE, ZERO_0), gen = pc(2, 1, 4, 1, RC_NONE, ZERO_0);
	struct move_parts m;

	setup();
	k.move_piece_s = 20e-6;
	cost_move_parts(&env, &L8, &tr, &gen, true, &m);
	CHECK(m.pieces == 2608);
	CHECK(m.bytes == 8 * 8030527488.0);
	CHECK(m.crit_pieces == 327);
	CHECK_NEAR(m.crit_s, 8027897856.0 / INTRA + 2 * 2629632.0 / HBM, REL);
	CHECK_NEAR(cost_move(&env, &L8, &tr, &gen, true),
		   327 * 20e-6 + 8027897856.0 / INTRA + 2 * 2629632.0 / HBM, REL);
}

/* Training tp 2 pp 2 dp 2 → engines tp 2 dp 4: one piece a tensor, 195
 * on every GPU.  A first-stage GPU copies its embedding rows and layers
 * 0-15 (16·109,060,096 + 262,668,288 = 2,007,629,824 elements) and
 * receives layers 16-31, the final norm and its output rows
 * (2,007,633,920 elements), 4096 more than a last-stage GPU receives: the
 * slowest, its copies each read and written at HBM · decode_eff. */
static void test_move_stages(void)
{
	struct pconf tr = pc(2, 2, 2, 1, RC_SELECTIVE, ZERO_0), gen = pc(2, 1, 4, 1, RC_NONE, ZERO_0);
	struct move_parts m;

	setup();
	cost_move_parts(&env, &L8, &tr, &gen, true, &m);
	CHECK(m.pieces == 8 * 195);
	CHECK(m.crit_pieces == 195);
	CHECK_NEAR(m.crit_s, 2 * 2007633920.0 / INTRA + 2 * 2 * 2007629824.0 / HBM, REL);
}

/* Engines on other GPUs: every piece a message over the inter-node link;
 * training tp 2 → engines tp 2: 195 pieces a GPU, its 8,030,527,488
 * bytes / 38.4e9. */
static void test_move_elsewhere(void)
{
	struct pconf tr = pc(2, 1, 4, 1, RC_SELECTIVE, ZERO_0), gen = pc(2, 1, 4, 1, RC_NONE, ZERO_0);
	struct move_parts m;

	setup();
	k.move_piece_s = 1e-5;
	cost_move_parts(&env, &L8, &tr, &gen, false, &m);
	CHECK(m.pieces == 8 * 195);
	CHECK(m.crit_pieces == 195);
	CHECK_NEAR(cost_move(&env, &L8, &tr, &gen, false), 195e-5 + 8030527488.0 / INTER, REL);
}

/* Offloading to host memory and back: 2 · bytes / (50e9 · 0.7).
 * 10 GB: 2e10 / 35e9 = 0.571428571 s. */
static void test_offload(void)
{
	setup();
	CHECK_NEAR(cost_offload(&env, 10e9), 2e10 / HOST, REL);
	CHECK_NEAR(cost_offload(&env, 10e9), 0.571428571, 1e-8);
	CHECK(cost_offload(&env, 0) == 0);
}

/* More GPUs never make a stage slower in compute; more TP trades compute
 * for TP traffic. */
static void test_monotonic(void)
{
	struct stime a, b;
	struct pconf c;

	setup();
	c = pc(1, 1, 1, 1, RC_SELECTIVE, ZERO_0);
	cost_train(&env, &L8, &c, &a);
	c.dp = 8;
	cost_train(&env, &L8, &c, &b);
	CHECK_NEAR(b.compute, a.compute / 8, REL);
	CHECK(b.total < a.total);
	c = pc(1, 1, 8, 1, RC_NONE, ZERO_0);
	cost_infer(&env, &L8, &c, &a);
	c.dp = 16;
	cost_infer(&env, &L8, &c, &b);
	CHECK(b.compute < a.compute && b.total < a.total);
	/* generation: more room for KV never slows decoding */
	c = pc(2, 1, 8, 1, RC_NONE, ZERO_0);
	CHECK(cost_gen(&env, &L8, &c, 2.5 * 332188876.8, &a));
	CHECK(cost_gen(&env, &L8, &c, 40.5 * 332188876.8, &b));
	CHECK(b.total < a.total);
}

/* --- the built-in engine (nereus-cost(5)) ------------------------------------------- */

/* The bench's model, 4 layers of hidden 128, on one CPU of 30 GFLOP/s
 * sgemm and 12 GB/s memcpy; 16 prompts × 8 samples of 8 + 12 tokens
 * (p90 and max 16), 2 mini-batches; the built-in engine's priors: every
 * pass over the weights reads their fp32 bytes, 4 P, at 12e9 · 0.9 B/s. */
static const struct arch S4 = { .layers = 4, .hidden = 128, .heads = 4, .kv_heads = 2,
				.ffn = 352, .vocab = 258, .dtype_bytes = 2, .dtype = "bf16" };

static void setup_builtin(void)
{
	setup();
	job.prompts_per_step = 16;
	job.samples_per_prompt = 8;
	job.prompt_len = 8;
	job.response.mean = 12;
	job.response.p90 = 16;
	job.response.max = 16;
	job.mini_batches = 2;
	cl.nodes = 1;
	cl.gpus_per_node = 1;
	cl.gpu.mem_gib = 8;
	cl.gpu.tflops = 0.03;
	cl.gpu.hbm_gbps = 12;
	cl.engine = CLUSTER_ENGINE_BUILTIN;
	cost_coef_defaults_for(&k, CLUSTER_ENGINE_BUILTIN);
}

static double s4_pass(void)
{
	return 4 * mem_stage_params(&S4, 1, 1) / (12e9 * 0.9);
}

/* Each micro-batch's forward reads the weights once, and a training
 * micro-batch's backward twice more (a full recompute's forward once
 * more): halving the micro-batch from 8 sequences to 4 adds 16 forward
 * passes (128 sequences) and 16 training micro-batches (2 mini-batches
 * of 64) to the compute.  A GPU framework overlaps the reads: its compute
 * does not depend on the micro-batch. */
static void test_builtin_pass(void)
{
	struct pconf c8 = pc(1, 1, 1, 8, RC_NONE, ZERO_0), c4 = pc(1, 1, 1, 4, RC_NONE, ZERO_0);
	struct stime a, b;

	setup_builtin();
	cost_infer(&env, &S4, &c8, &a);
	cost_infer(&env, &S4, &c4, &b);
	CHECK_NEAR(b.compute - a.compute, 16 * s4_pass(), 1e-9);
	cost_train(&env, &S4, &c8, &a);
	cost_train(&env, &S4, &c4, &b);
	CHECK_NEAR(b.compute - a.compute, 16 * 3 * s4_pass(), 1e-9);
	c8.rc = c4.rc = RC_FULL;
	cost_train(&env, &S4, &c8, &a);
	cost_train(&env, &S4, &c4, &b);
	CHECK_NEAR(b.compute - a.compute, 16 * 4 * s4_pass(), 1e-9);
	cl.engine = CLUSTER_ENGINE_MEGATRON;
	cost_train(&env, &S4, &c8, &a);
	cost_train(&env, &S4, &c4, &b);
	CHECK_NEAR(b.compute, a.compute, REL);
	c8.rc = RC_NONE;
	c4.rc = RC_NONE;
	cost_infer(&env, &S4, &c8, &a);
	cost_infer(&env, &S4, &c4, &b);
	CHECK_NEAR(b.compute, a.compute, REL);
}

/* The built-in engine holds and computes every model in fp32: its times do
 * not depend on the job's dtype. */
static void test_builtin_fp32(void)
{
	struct arch f = S4;
	struct pconf c = pc(1, 1, 1, 8, RC_NONE, ZERO_0);
	struct stime a, b;

	setup_builtin();
	f.dtype_bytes = 4;
	strcpy(f.dtype, "fp32");
	cost_infer(&env, &S4, &c, &a);
	cost_infer(&env, &f, &c, &b);
	CHECK_NEAR(a.total, b.total, REL);
	cost_train(&env, &S4, &c, &a);
	cost_train(&env, &f, &c, &b);
	CHECK_NEAR(a.total, b.total, REL);
	CHECK(cost_gen(&env, &S4, &c, 4.0 * 1073741824, &a));
	CHECK(cost_gen(&env, &f, &c, 4.0 * 1073741824, &b));
	CHECK_NEAR(a.total, b.total, REL);
}

/* A decode step of the built-in engine reads the weights and its KV cache
 * (fp32) and then computes: the two add.  Its 16 steps (the longest
 * response) of 96 sequences on average (128 · 12 / 16) then take exactly
 * 16 · (4 P + 96 · KV(ctx)) / (12e9 · decode_eff) plus 16 · 96 ·
 * fwd(2 ctx) / (30e9 · infer_eff), and equal steps of 64 more sequences
 * add equal times, the prefill's included.  A GPU's step takes the slower
 * of the two: compute-bound there, the memory's rate does not count. */
static void test_builtin_decode_adds(void)
{
	struct pconf c = pc(1, 1, 1, 1, RC_NONE, ZERO_0);
	struct stime t[3], u;
	struct arch f = S4;
	struct kv_fill kv;
	double room = 4.0 * 1073741824, bytes, flops;

	setup_builtin();
	f.dtype_bytes = 4;
	CHECK(mem_kv_fill(&job, &S4, 1, 128, room, &k, &kv));
	CHECK_NEAR(kv.steps, 16, REL);
	CHECK_NEAR(kv.active, 96, REL);
	bytes = 4 * mem_stage_params(&S4, 1, 1) + 96 * mem_kv_per_seq(&f, 1, kv.ctx);
	flops = 96 * (2 * arch_params(&S4) + 4.0 * 4 * 128 * kv.ctx);
	CHECK(cost_gen(&env, &S4, &c, room, &t[1]));
	k.decode_eff = 0.45;
	CHECK(cost_gen(&env, &S4, &c, room, &u));
	CHECK_NEAR(u.compute - t[1].compute, 16 * bytes / (12e9 * 0.9), 1e-9);
	k.decode_eff = 0.9;
	k.infer_eff = 0.375;
	CHECK(cost_gen(&env, &S4, &c, room, &u));
	CHECK_NEAR(u.compute - t[1].compute, 16 * flops / (30e9 * 0.75), 1e-9);
	k.infer_eff = 0.75;
	for (int i = 0; i < 3; i++) {
		job.prompts_per_step = 8 * (i + 1);
		CHECK(cost_gen(&env, &S4, &c, room, &t[i]));
	}
	CHECK_NEAR(t[2].compute - t[1].compute, t[1].compute - t[0].compute, 1e-9);
	job.prompts_per_step = 16;
	cl.engine = CLUSTER_ENGINE_MEGATRON;
	cost_coef_defaults(&k);
	CHECK(cost_gen(&env, &S4, &c, room, &t[0]));
	k.decode_eff = 0.3;
	CHECK(cost_gen(&env, &S4, &c, room, &u));
	CHECK_NEAR(u.compute, t[0].compute, REL);
}

int main(void)
{
	RUN(test_link_choice);
	RUN(test_train_compute);
	RUN(test_train_full_recompute);
	RUN(test_train_bubble);
	RUN(test_train_dp_ring);
	RUN(test_train_dp_zero);
	RUN(test_train_dp_zero2);
	RUN(test_train_dp_zero3);
	RUN(test_train_tp_comm);
	RUN(test_train_pp_comm);
	RUN(test_train_all_terms);
	RUN(test_train_tp_latency_epochs_DISCREPANCY);
	RUN(test_infer_terms);
	RUN(test_gen_paced_by_longest);
	RUN(test_gen_paged);
	RUN(test_gen_no_room);
	RUN(test_gen_prefill);
	RUN(test_gen_decode_flops);
	RUN(test_gen_monotone_in_room);
	RUN(test_move_same_layout);
	RUN(test_move_pieces);
	RUN(test_move_stages);
	RUN(test_move_elsewhere);
	RUN(test_offload);
	RUN(test_monotonic);
	RUN(test_builtin_pass);
	RUN(test_builtin_fp32);
	RUN(test_builtin_decode_adds);
	return UNIT_END();
}
