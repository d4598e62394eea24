/* The memory model of the built-in engine (plan/memory.h) against what the
 * engine allocates: its activations (engine/model.h) and its generator's
 * buffers for several shapes, and a whole PPO step, where every
 * model-stage's measured peak is the planner's prediction for it. */
#include <stdlib.h>
#include <string.h>

#include "engine/generate.h"
#include "engine/trainer.h"
#include "plan/plan.h"
#include "unit.h"
#include "unitfs.h"

static char root[PATH_MAX];

static struct arch small_arch(int heads, int kv, bool tied, bool bias, bool score)
{
	return (struct arch){ .layers = 3, .hidden = 48, .heads = heads, .kv_heads = kv,
			      .ffn = 100, .vocab = 300, .tied = tied, .attn_bias = bias,
			      .score_head = score, .dtype_bytes = 4, .dtype = "fp32",
			      .rope_theta = 10000, .norm_eps = 1e-5 };
}

/* Qwen3's: heads of 16 where hidden / heads is 12, per-head q/k norms. */
static struct arch qwen3_arch(bool tied, bool score)
{
	struct arch a = small_arch(4, 2, tied, false, score);

	a.head_dim = 16;
	a.qk_norm = true;
	return a;
}

/* Floats the engine may pad: each buffer starts on 64 bytes. */
static double padding(const struct arch *a)
{
	return 16.0 * (14 * a->layers + 33);
}

static void head_chunk_is_the_engines(void)
{
	CHECK(BUILTIN_HEAD_CHUNK_FLOATS == MODEL_HEAD_CHUNK_FLOATS);
}

/* mem_builtin_acts is model_acts_floats, training and not, over shapes. */
static void activations_are_the_engines(void)
{
	const struct arch archs[] = { small_arch(4, 2, false, false, false),
				      small_arch(6, 6, true, true, false),
				      small_arch(4, 1, false, true, true),
				      qwen3_arch(true, false), qwen3_arch(false, true) };
	const int tokens[] = { 1, 37, 300 }, lens[] = { 5, 64 };

	for (size_t i = 0; i < sizeof archs / sizeof *archs; i++) {
		struct layout lo;
		struct model_config c;
		struct err e;

		CHECK(layout_init(&lo, &archs[i], 1, 1, 1, false, NULL, &e) == NR_OK);
		CHECK(model_config_init(&c, &lo, 0, 0, &e) == NR_OK);
		for (int tr = 0; tr < 2; tr++)
			for (size_t t = 0; t < 3; t++)
				for (size_t n = 0; n < 2; n++) {
					double head;
					double want = (double)model_acts_floats(&c, tokens[t], lens[n],
										tr);
					double got = mem_builtin_acts(&archs[i], tokens[t], lens[n], 1,
								      1, tr, &head);

					CHECK(got <= want && want - got <= padding(&archs[i]));
					CHECK(archs[i].score_head ? head == 0 : head > 0);
				}
		layout_free(&lo);
	}
}

/* What a generator holds is mem_builtin_gen's activations, logits and KV
 * cache, to the padding, on each of dp replicas: a replica generates its
 * share of the sequences, prefilling its share of the 12 prompts of 6
 * tokens (more than the 26 of the longest sequence) at once. */
static void generation_holds(struct arch a, int dp)
{
	struct job job = { .nmodels = 1, .prompts_per_step = 12, .samples_per_prompt = 4,
			   .prompt_len = 6, .response = { 10, 14, 20 }, .mini_batches = 1 };
	struct layout lo;
	struct decoder m;
	struct generator g;
	struct mem mm;
	struct err e;
	int seqs = 48 / dp, prompts = 12 / dp, len = 26;
	double got;

	CHECK(layout_init(&lo, &a, 1, 1, 1, false, NULL, &e) == NR_OK);
	CHECK(model_init(&m, &lo, 0, 0, kernels_cpu(), comm_self(), &e) == NR_OK);
	CHECK(generator_init(&g, &m, seqs, len, prompts * 6, &e) == NR_OK);
	mem_builtin_gen(&job, &a, dp, true, &mm);
	got = (double)generator_bytes(&g);
	CHECK(mm.weights == 0 && mm.total == mm.act + mm.logits + mm.kv);
	CHECK(got >= mm.total && got - mm.total <= 4 * padding(&a));
	mem_builtin_gen(&job, &a, dp, false, &mm);
	CHECK(mm.weights == 4 * mem_stage_params(&a, 1, 1));
	generator_free(&g);
	model_free(&m);
	layout_free(&lo);
}

static void generation_is_the_engines(void)
{
	for (int dp = 1; dp <= 2; dp++) {
		generation_holds(small_arch(4, 2, false, false, false), dp);
		generation_holds(qwen3_arch(false, false), dp);
	}
}

/* A PPO job with an actor, a critic and a reference on the repeat task;
 * data names the prompts file. */
static int write_job(const char *file, const char *prompts)
{
	FILE *f = fopen(file, "w");
	const char *arch = "{\"layers\": 2, \"hidden\": 32, \"heads\": 4, \"kv_heads\": 2, "
			   "\"ffn\": 64, \"vocab\": 258, \"tied_embeddings\": false, "
			   "\"dtype\": \"bf16\"}";

	if (!f)
		return -1;
	fprintf(f, "{\"nereus\": 1, \"kind\": \"job\", \"name\": \"m\", \"algorithm\": \"ppo\",\n"
		"\"models\": {\"actor\": {\"arch\": %s, \"stages\": [\"generation\", "
		"\"inference\", \"training\"]},\n\"critic\": {\"arch\": %s, \"stages\": "
		"[\"inference\", \"training\"]},\n\"reference\": {\"arch\": %s, \"stages\": "
		"[\"inference\"]}},\n\"batch\": {\"prompts_per_step\": 4, \"samples_per_prompt\": 3, "
		"\"prompt_len\": 8, \"response_len\": {\"mean\": 6, \"p90\": 9, \"max\": 9}},\n"
		"\"ppo\": {\"epochs\": 1, \"mini_batches\": 2},\n"
		"\"data\": {\"prompts\": \"%s\", \"reward\": \"char_match\"}}\n",
		arch, arch, arch, prompts);
	return fclose(f);
}

/* One real step: each model-stage's peak, as the trainer measured it, is
 * what plan_evaluate's model predicts for a one-GPU cluster running the
 * built-in engine, micro-batches of 5 (the mini-batch's 6 in two). */
static void a_step_peaks_as_planned(void)
{
	char file[PATH_MAX + 16], prompts[PATH_MAX];
	static struct job job;
	static struct trainer t;
	struct cluster cl = { .nodes = 1, .gpus_per_node = 1,
			      .gpu = { "cpu", 8, 0.1, 10 }, .engine = CLUSTER_ENGINE_BUILTIN };
	struct coef k;
	struct env v = { &job, &cl, &k };
	struct mcost mc[MAX_MODELS];
	struct trainer_stats st;
	int mb[MAX_MODELS] = { 5, 5, 5 };
	double resident = 0;
	struct err e;

	cost_coef_defaults(&k);
	cl.up[0] = true;
	snprintf(file, sizeof file, "%s/job.json", root);
	CHECK(realpath("examples/tasks/repeat.jsonl", prompts) != NULL);
	CHECK(write_job(file, prompts) == 0);
	if (job_load(&job, file, &e)) {
		printf("# %s\n", e.msg);
		CHECK(0);
		return;
	}
	CHECK(trainer_open_one(&t, &job, NULL, mb, &e) == NR_OK);
	/* between steps the process holds every model's state, no more */
	for (int m = 0; m < job.nmodels; m++) {
		struct pconf c = { .tp = 1, .pp = 1, .dp = 1, .mb = 5, .rc = RC_NONE };

		model_memory(&v, m, &c, &mc[m]);
		resident += mc[m].res;
	}
	CHECK_NEAR((double)trainer_bytes(&t), resident, 1e-9);
	CHECK(trainer_step(&t, 0, &st, &e) == NR_OK);
	CHECK(st.nms == 6);
	for (int i = 0; i < st.nms; i++) {
		double want;

		if (st.ms[i].stage == STAGE_GEN) {
			struct pconf gen = { .tp = 1, .dp = 1, .mb = 1 }, home = { .tp = 1, .pp = 1,
									  .dp = 1, .mb = 5 };
			struct stime tm;
			struct mem mm;

			CHECK(plan_gen_cost(&v, &gen, resident, &home, true, &tm, &mm, &want));
		} else {
			want = resident + mc[st.ms[i].model].need[st.ms[i].stage];
		}
		CHECK(st.ms[i].peak_bytes >= want && st.ms[i].peak_bytes - want <= 4 * 3 * padding(&job.models[0].arch));
	}
	trainer_close(&t);
}

/* An FSDP rank of DP 2 (engine/mstate.h) holds what the built-in model
 * counts: between stages its blocks of the weights, master and moments,
 * half the model's state; in a training stage beside them the weights
 * gathered whole and their gradients. */
static void fsdp_holds_as_planned(void)
{
	struct model md = { .name = "actor", .arch = small_arch(4, 2, false, false, false) };
	struct arch f = mem_builtin_arch(&md.arch);
	struct pconf c = { .tp = 1, .pp = 1, .dp = 2, .mb = 1, .rc = RC_NONE, .zero = ZERO_3 };
	double held = 0, resident = mem_resident(&f, &c, true);
	struct mem m;
	struct err e;

	mem_builtin_train(&(struct job){ .prompts_per_step = 1, .samples_per_prompt = 1,
					 .mini_batches = 1, .prompt_len = 4,
					 .response = { .max = 4 } }, &md.arch, &c, &m);
	for (int d = 0; d < 2; d++) {
		struct mstate s;
		double stage;

		CHECK(mstate_init(&s, &md, 0, 1, 1, 2, ZERO_3, true, 0, 0, d, &e) == NR_OK);
		CHECK(s.fsdp && s.len[KIND_WEIGHT] == s.len[KIND_MASTER]);
		/* the gradients live for a stage only */
		held += (double)mstate_bytes(&s) - 4.0 * (double)s.full_len;
		CHECK_NEAR((double)mstate_bytes(&s) - 4.0 * (double)s.full_len, resident,
			   4 * 2 * f.layers * LT_COUNT + 64);
		CHECK(mstate_full_begin(&s, &e) == NR_OK);
		stage = (double)mstate_bytes(&s);
		CHECK_NEAR(stage, m.weights + m.grads + m.master + m.adam,
			   4 * 2 * f.layers * LT_COUNT + 64);
		mstate_free(&s);
	}
	CHECK_NEAR(held, 2 * resident, 1e-9);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(root, sizeof root, "%s/nereus-membuiltin-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(root)) {
		perror(root);
		return 1;
	}
	RUN(head_chunk_is_the_engines);
	RUN(activations_are_the_engines);
	RUN(generation_is_the_engines);
	RUN(a_step_peaks_as_planned);
	RUN(fsdp_holds_as_planned);
	rmtree(root);
	return UNIT_END();
}
