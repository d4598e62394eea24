/* The baseline layouts: each plan has the shape its system runs (pools,
 * sharding, rollout TP), and a pin narrows a layout without lifting its
 * limits. */
#include <string.h>

#include "plan/baseline.h"
#include "unit.h"

static struct job job;
static struct cluster cl;
static struct coef k;
static struct env v = { &job, &cl, &k };

static void setup(const char *jobfile, const char *clusterfile)
{
	struct err e;

	cost_coef_defaults(&k);
	if (job_load(&job, jobfile, &e) || cluster_load(&cl, clusterfile, &e)) {
		printf("# %s\n", e.msg);
		unit_failed = 1;
	}
}

/* The best plan of layout l; false when none fits. */
static bool baseline(enum plan_layout l, const char *const pins[], struct plan *p)
{
	struct space sp;
	struct search_stats st;
	struct err e;

	search_space_init(&sp);
	CHECK(layout_space(&v, l, NULL, &sp, &e) == NR_OK);
	for (int i = 0; pins && pins[i]; i++)
		CHECK(layout_pin(&job, l, pins[i], &sp, &e) == NR_OK);
	return plan_search(&v, &sp, false, NULL, p, &st, &e) == NR_OK;
}

static int model(const char *name)
{
	return (int)(job_model(&job, name) - job.models);
}

static void test_verl(void)
{
	static struct plan p, tuned, mega;

	setup("examples/jobs/ppo-llama3-8b.json", "examples/clusters/h100-8x8.json");
	CHECK(baseline(LAYOUT_VERL, NULL, &p));
	CHECK(p.npools == 1 && p.pools[0].ngpus == 64);
	for (int m = 0; m < job.nmodels; m++)
		CHECK(p.home[m].tp == 1 && p.home[m].pp == 1 && p.home[m].zero == ZERO_3);
	CHECK(p.gen.tp == 2);
	/* tuned: the fastest rollout TP of 1, 2, 4, 8, so no slower */
	CHECK(baseline(LAYOUT_VERL_TUNED, NULL, &tuned));
	CHECK(tuned.gen.tp == 1 || tuned.gen.tp == 2 || tuned.gen.tp == 4 || tuned.gen.tp == 8);
	CHECK(tuned.step_time <= p.step_time * (1 + 1e-9));
	for (int t = 1; t <= 8; t *= 2) {
		static struct plan q;
		char pin[64];
		snprintf(pin, sizeof pin, "actor@generation=tp%d", t);
		if (baseline(LAYOUT_VERL_TUNED, (const char *const[]){ pin, NULL }, &q))
			CHECK(tuned.step_time <= q.step_time * (1 + 1e-9));
	}
	/* Megatron: one pool, no FSDP, TP and PP chosen */
	CHECK(baseline(LAYOUT_VERL_MEGATRON, NULL, &mega));
	CHECK(mega.npools == 1 && mega.gen.tp == 2);
	for (int m = 0; m < job.nmodels; m++)
		CHECK(mega.home[m].zero != ZERO_3);
}

static void test_openrlhf(void)
{
	static struct plan p, h;
	int actor, ref, critic, reward;

	setup("examples/jobs/ppo-llama3-8b.json", "examples/clusters/h100-8x8.json");
	actor = model("actor");
	ref = model("reference");
	critic = model("critic");
	reward = model("reward");
	CHECK(baseline(LAYOUT_OPENRLHF, NULL, &p));
	/* the engines on half the GPUs, actor with reference, critic with reward */
	CHECK(p.npools == 3);
	CHECK(p.pools[0].items == 1u && p.pools[0].ngpus == 32);
	CHECK(p.pools[1].items == (1u << (1 + actor) | 1u << (1 + ref)) && p.pools[1].ngpus == 16);
	CHECK(p.pools[2].items == (1u << (1 + critic) | 1u << (1 + reward)) &&
	      p.pools[2].ngpus == 16);
	for (int m = 0; m < job.nmodels; m++) {
		CHECK(p.home[m].tp == 1 && p.home[m].pp == 1 && p.home[m].zero == ZERO_3);
		CHECK(!model_trainable(&job.models[m]) || p.home[m].rc == RC_FULL);
		CHECK(p.home[m].offload == model_trainable(&job.models[m]));
	}
	CHECK(p.gen.tp == 2);
	CHECK(baseline(LAYOUT_OPENRLHF_HYBRID, NULL, &h));
	CHECK(h.npools == 1);
	for (int m = 0; m < job.nmodels; m++)
		CHECK(h.home[m].offload && h.home[m].zero == ZERO_3 &&
		      (!model_trainable(&job.models[m]) || h.home[m].rc == RC_FULL));
}

/* A pin narrows a layout; one that contradicts it is refused, naming both. */
static void test_pins_keep_the_layout(void)
{
	static struct plan p;
	struct space sp;
	struct err e;

	setup("examples/jobs/ppo-llama3-8b.json", "examples/clusters/h100-8x8.json");
	search_space_init(&sp);
	CHECK(layout_space(&v, LAYOUT_VERL, NULL, &sp, &e) == NR_OK);
	CHECK(layout_pin(&job, LAYOUT_VERL, "actor@training=tp4", &sp, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "the verl layout fixes actor@training's TP at 1, not 4") != NULL);
	CHECK(layout_pin(&job, LAYOUT_VERL, "actor@generation=tp4", &sp, &e) == NR_EINPUT);
	CHECK(layout_pin(&job, LAYOUT_VERL, "critic@training=nofsdp", &sp, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "at ZeRO stage 3, not 0 or 1 or 2") != NULL);
	/* what verl fixes anyway, and what it leaves free */
	CHECK(layout_pin(&job, LAYOUT_VERL, "actor@training=fsdp", &sp, &e) == NR_OK);
	CHECK(layout_pin(&job, LAYOUT_VERL, "actor@training=full", &sp, &e) == NR_OK);
	CHECK(sp.home[model("actor")].tp == 1 && sp.home[model("actor")].zero == 1u << ZERO_3);
	CHECK(sp.home[model("actor")].rc == RC_FULL);
	CHECK(baseline(LAYOUT_VERL, (const char *const[]){ "actor@training=fsdp", NULL }, &p));
	CHECK(p.home[model("actor")].tp == 1 && p.npools == 1);
	/* verl-tuned picks its rollout TP among 1, 2, 4, 8 */
	search_space_init(&sp);
	CHECK(layout_space(&v, LAYOUT_VERL_TUNED, NULL, &sp, &e) == NR_OK);
	CHECK(layout_pin(&job, LAYOUT_VERL_TUNED, "actor@generation=tp4", &sp, &e) == NR_OK);
	CHECK(sp.gen.tp == 4);
	CHECK(layout_pin(&job, LAYOUT_VERL_TUNED, "actor@generation=tp16", &sp, &e) == NR_EINPUT);
	/* OpenRLHF's Adam offload */
	search_space_init(&sp);
	CHECK(layout_space(&v, LAYOUT_OPENRLHF, NULL, &sp, &e) == NR_OK);
	CHECK(layout_pin(&job, LAYOUT_OPENRLHF, "actor@training=nooffload", &sp, &e) == NR_EINPUT);
	CHECK(layout_pin(&job, LAYOUT_OPENRLHF, "reference@inference=nooffload", &sp, &e) == NR_OK);
	/* adaptive: the pin as given */
	search_space_init(&sp);
	CHECK(layout_pin(&job, LAYOUT_ADAPTIVE, "actor@training=tp4", &sp, &e) == NR_OK);
	CHECK(sp.home[model("actor")].tp == 4);
}

int main(void)
{
	RUN(test_verl);
	RUN(test_openrlhf);
	RUN(test_pins_keep_the_layout);
	return UNIT_END();
}
