/* The fast search against the exhaustive one on a few hundred random small
 * jobs and clusters (up to 16 GPUs, odd head counts, tight memory, slow
 * links, GPUs down, either engine), from a fixed seed: both find the same
 * predicted step time (or both find nothing), the plan found fits, and no
 * random pin, which only narrows the space, gives a faster plan than the
 * search without it.  And on such jobs the cost model's floors, by which
 * the search passes over pool sizes without costing them, are below every
 * configuration's times. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "plan/search.h"
#include "unit.h"

#define CASES 300
#define PINS 2
#define FLOOR_CASES 40

static struct job job;
static struct cluster cl;
static struct coef k;
static const struct env v = { &job, &cl, &k };
static uint64_t rng = 0x9e3779b97f4a7c15u;

/* splitmix64 */
static uint64_t next(void)
{
	uint64_t z = (rng += 0x9e3779b97f4a7c15u);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

static int pick(int n)
{
	return (int)(next() % (uint64_t)n);
}

static double between(double lo, double hi)
{
	return lo + (hi - lo) * (double)(next() >> 11) / 9007199254740992.0;
}

/* Up to 16 GPUs; with three models, whose combinations the exhaustive
 * search multiplies, up to 4. */
static void random_cluster(void)
{
	static const int shapes[][2] = { { 1, 2 }, { 1, 4 }, { 2, 2 }, { 1, 8 }, { 2, 4 },
					 { 4, 2 }, { 2, 8 }, { 4, 4 }, { 3, 4 } };
	int s = pick(job.nmodels > 2 ? 3 : sizeof shapes / sizeof shapes[0]);

	memset(&cl, 0, sizeof cl);
	strcpy(cl.name, "random");
	cl.nodes = shapes[s][0];
	cl.gpus_per_node = shapes[s][1];
	strcpy(cl.gpu.model, "random");
	cl.gpu.mem_gib = between(2, 16);
	cl.gpu.tflops = between(50, 400);
	cl.gpu.hbm_gbps = between(300, 3000);
	/* slow links, sometimes very */
	cl.intra_gbps = between(2, 100);
	cl.inter_gbps = between(0.5, 25);
	cl.host_gbps = between(1, 30);
	cl.host_mem_gib = 512;
	cl.headroom = between(0, 0.2);
	for (int g = 0; g < cl.nodes * cl.gpus_per_node; g++)
		cl.up[g] = pick(10) != 0;
	/* sometimes the built-in engine: no FSDP, fp32, whole sequences held */
	cl.engine = pick(5) ? CLUSTER_ENGINE_MEGATRON : CLUSTER_ENGINE_BUILTIN;
}

/* few: an odd head count and at most three layers */
static void random_arch(struct arch *a, bool few)
{
	static const int heads[] = { 1, 3, 5, 7, 9, 2, 6, 4 };
	static const int layers[] = { 1, 2, 3, 5, 7, 4 };

	memset(a, 0, sizeof *a);
	/* odd head counts mostly: TP 1 only */
	a->heads = heads[pick(pick(3) && !few ? 8 : 5)];
	a->kv_heads = a->heads % 2 ? (pick(2) ? 1 : a->heads) : a->heads / (1 + pick(2));
	a->hidden = a->heads * (128 << pick(3));
	a->layers = layers[pick(few ? 3 : 6)];
	a->ffn = a->hidden * (2 + pick(4));
	a->vocab = 1000 + pick(150000);
	a->tied = pick(2);
	a->dtype_bytes = pick(4) ? 2 : 4;
	strcpy(a->dtype, a->dtype_bytes == 4 ? "fp32" : "bf16");
}

/* An actor and up to two of a critic, a reference and a reward model, the
 * frozen ones sometimes alike (twins), on a small batch. */
static void random_job(void)
{
	int extra = pick(5) ? pick(2) + (pick(4) == 0) : 0;
	enum role roles[3];
	int nroles = 0;

	memset(&job, 0, sizeof job);
	strcpy(job.name, "random");
	strcpy(job.algorithm, "ppo");
	if (pick(2))
		roles[nroles++] = ROLE_CRITIC;
	roles[nroles++] = ROLE_REFERENCE;
	roles[nroles++] = ROLE_REWARD;
	job.nmodels = 1 + extra;
	strcpy(job.models[0].name, "actor");
	job.models[0].role = ROLE_ACTOR;
	random_arch(&job.models[0].arch, extra > 1);
	job.models[0].stages[STAGE_GEN] = job.models[0].stages[STAGE_INF] =
		job.models[0].stages[STAGE_TRAIN] = true;
	for (int m = 1; m < job.nmodels; m++) {
		struct model *md = &job.models[m];
		md->role = roles[m - 1];
		strcpy(md->name, job_role_names[md->role]);
		if (pick(2))
			md->arch = job.models[pick(m)].arch;
		else
			random_arch(&md->arch, extra > 1);
		md->stages[STAGE_INF] = true;
		md->stages[STAGE_TRAIN] = md->role == ROLE_CRITIC;
	}
	job.prompts_per_step = 1 + pick(8);
	job.samples_per_prompt = 1 + pick(4);
	job.prompt_len = 64 + pick(1000);
	job.response.max = 128 + pick(8000);
	job.response.p90 = between(0.3, 1) * (double)job.response.max;
	job.response.mean = between(0.2, 1) * job.response.p90;
	job.ppo_epochs = 1 + pick(2);
	job.mini_batches = 1 + pick(2);
	if (job.mini_batches > job_sequences(&job))
		job.mini_batches = 1;
}

static void random_coefficients(void)
{
	cost_coef_defaults(&k);
	k.workspace_gib = between(0.1, 1);
	k.frag = between(0, 0.2);
	k.act_factor = between(0.8, 1.5);
	k.step_s = between(0, 1);
}

/* A pin of one model-stage with one to three random settings. */
static void random_pin(char *out, size_t n)
{
	static const char *const words[] = { "tp1", "tp2", "tp4", "pp1", "pp2", "pp3", "mb1",
					     "mb2", "none", "selective", "full", "zero0",
					     "zero1", "zero2", "zero3", "zero", "nozero", "fsdp",
					     "nofsdp", "offload", "nooffload", "dp1", "dp2" };
	int m = pick(job.nmodels + 1), len;

	if (m == job.nmodels) {
		snprintf(out, n, "actor@generation=tp%d", 1 << pick(3));
		return;
	}
	len = snprintf(out, n, "%s@%s=%s", job.models[m].name,
		       job.models[m].stages[STAGE_TRAIN] ? "training" : "inference",
		       words[pick(sizeof words / sizeof words[0])]);
	for (int w = pick(3); w > 0; w--)
		len += snprintf(out + len, n - (size_t)len, ",%s",
				words[pick(sizeof words / sizeof words[0])]);
}

static void test_fast_equals_exhaustive_and_no_pin_beats_it(void)
{
	static struct plan fast, full, pinned;
	long agreed = 0, found = 0, pins = 0, narrowed = 0;

	for (int c = 0; c < CASES; c++) {
		struct search_stats st;
		struct space sp;
		struct err e;
		int rf, rx;

		random_job();
		random_cluster();
		random_coefficients();
		search_space_init(&sp);
		rf = plan_search(&v, &sp, false, NULL, &fast, &st, &e);
		rx = plan_search(&v, &sp, true, NULL, &full, &st, &e);
		CHECK(rf == rx);
		if (rf != rx || (rf && rf != NR_EINFEASIBLE)) {
			printf("#   case %d: fast %d, exhaustive %d: %s\n", c, rf, rx, e.msg);
			continue;
		}
		if (rf)
			continue;
		found++;
		CHECK_NEAR(fast.step_time, full.step_time, 1e-9);
		CHECK(fast.feasible && full.feasible);
		agreed += fabs(fast.step_time - full.step_time) <= 1e-9 * full.step_time;
		for (int i = 0; i < PINS; i++) {
			char text[200];
			random_pin(text, sizeof text);
			search_space_init(&sp);
			if (search_pin_parse(&job, text, &sp, &e) != NR_OK)
				continue;
			pins++;
			if (plan_search(&v, &sp, false, NULL, &pinned, &st, &e) != NR_OK)
				continue;
			narrowed++;
			CHECK(pinned.feasible);
			CHECK(pinned.step_time >= fast.step_time * (1 - 1e-9));
			if (pinned.step_time < fast.step_time * (1 - 1e-9))
				printf("#   case %d: --pin %s gives %.9g s, the search %.9g s\n", c,
				       text, pinned.step_time, fast.step_time);
		}
	}
	printf("#   %d cases: %ld with a plan, %ld agreed; %ld pins, %ld of them with a plan\n",
	       CASES, found, agreed, pins, narrowed);
	/* the cases exercise both outcomes */
	CHECK(found > CASES / 4 && found < CASES);
	CHECK(narrowed > 0);
}

/* Every configuration of every model on 1 to 16 GPUs, whatever its TP,
 * PP, micro-batch size, recompute, ZeRO stage and offload. */
static void test_floors_under_every_configuration(void)
{
	long checked = 0, over = 0;

	for (int c = 0; c < FLOOR_CASES; c++) {
		random_job();
		random_cluster();
		random_coefficients();
		for (int m = 0; m < job.nmodels; m++) {
			const struct model *md = &job.models[m];
			for (int z = 1; z <= 16; z++) {
				double fi = md->stages[STAGE_INF] ? cost_infer_floor(&v, &md->arch, z) : 0;
				double ft = model_trainable(md) ? cost_train_floor(&v, &md->arch, z) : 0;
				for (int t = 1; t <= z; t++)
				for (int p = 1; p <= md->arch.layers && t * p <= z; p++)
				for (int mb = 1; mb <= 8 && z % (t * p) == 0; mb *= 4)
				for (int rc = 0; rc < NRECOMPUTE; rc++)
				for (int zero = 0; zero < NZERO_STAGES; zero++)
				for (int off = 0; off < 2; off++) {
					struct pconf conf = { t, p, z / (t * p), mb, (enum recompute)rc,
							      (enum zero_stage)zero, off };
					struct mcost mc;
					model_cost(&v, m, &conf, &mc);
					checked++;
					if (mc.t[STAGE_INF] >= fi && mc.t[STAGE_TRAIN] >= ft)
						continue;
					if (!over++)
						printf("#   case %d: %s tp%d pp%d dp%d mb%d takes %.9g s "
						       "and %.9g s, floors %.9g s and %.9g s\n", c,
						       md->name, t, p, z / (t * p), mb, mc.t[STAGE_INF],
						       mc.t[STAGE_TRAIN], fi, ft);
				}
			}
		}
	}
	printf("#   %ld configurations, %ld under a floor\n", checked, over);
	CHECK(over == 0);
	CHECK(checked > 0);
}

int main(void)
{
	RUN(test_fast_equals_exhaustive_and_no_pin_beats_it);
	RUN(test_floors_under_every_configuration);
	return UNIT_END();
}
