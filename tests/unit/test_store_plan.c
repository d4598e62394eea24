/* The store layouts a plan gives a job's models: each model's name and
 * architecture from the job, TP, PP and DP from its home configuration,
 * ZeRO when that splits the optimizer state (ZeRO-1 and up), trainable
 * when the job trains the model. */
#include "plan/plan.h"
#include "state/store.h"
#include "unit.h"

#include <string.h>

static struct job job;
static struct plan plan;

static void test_layouts_of_plan(void)
{
	/* actor, critic, reference, reward: a home of each ZeRO stage */
	static const struct pconf home[] = {
		{ .tp = 2, .pp = 2, .dp = 2, .zero = ZERO_1 },
		{ .tp = 1, .pp = 4, .dp = 2, .zero = ZERO_3 },
		{ .tp = 4, .pp = 1, .dp = 1, .zero = ZERO_0 },
		{ .tp = 1, .pp = 1, .dp = 8, .zero = ZERO_2 },
	};
	static const bool zero[] = { true, true, false, true };
	static const bool trainable[] = { true, true, false, false };
	struct store_layout lo[MAX_MODELS + 1];
	struct err e = { 0 };

	CHECK(job_load(&job, "examples/jobs/ppo-llama3-8b.json", &e) == NR_OK);
	CHECK(job.nmodels == 4);
	memset(&plan, 0, sizeof plan);
	memcpy(plan.home, home, sizeof home);
	/* a sentinel after the job's models: nothing is written past them */
	memset(&lo[4], 0x5a, sizeof lo[4]);
	lo[4].name[0] = '\0';
	store_layouts_of_plan(&job, &plan, lo);
	for (int m = 0; m < 4 && m < job.nmodels; m++) {
		CHECK(strcmp(lo[m].name, job.models[m].name) == 0);
		CHECK(lo[m].arch.layers == 32 && lo[m].arch.hidden == 4096 &&
		      lo[m].arch.kv_heads == 8 && lo[m].arch.vocab == 128256);
		CHECK(lo[m].tp == home[m].tp && lo[m].pp == home[m].pp && lo[m].dp == home[m].dp);
		CHECK(lo[m].zero == zero[m]);
		CHECK(lo[m].trainable == trainable[m]);
	}
	CHECK(strcmp(lo[0].name, "actor") == 0 && strcmp(lo[3].name, "reward") == 0);
	CHECK(lo[4].name[0] == '\0' && lo[4].tp == 0x5a5a5a5a);
}

int main(void)
{
	RUN(test_layouts_of_plan);
	return UNIT_END();
}
