/* Staleness 1 in the built-in engine (nereus-plan(5), STALENESS): step k
 * generates with the actor as it was before step k-1's update, and PPO's
 * old log-probs are those of the weights that generated, recorded at
 * generation.  Sampling is a function of the weights, the step and the
 * job's seed, so each stale step's rollouts are checked against a trainer
 * that holds those weights now and generates synchronously. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/trainer.h"
#include "unit.h"

#define JOB "examples/jobs/ppo-repeat-tiny.json"

static struct job job;

static size_t max_new(void)
{
	return (size_t)job.response.max;
}

/* A trainer of the job from its seed's random weights. */
static void open_one(struct trainer *t, int staleness)
{
	int mb[MAX_MODELS] = { 0 };
	struct err e;

	if (trainer_open_one(t, &job, NULL, mb, &e)) {
		printf("# %s\n", e.msg);
		CHECK(0);
		exit(1);
	}
	trainer_set_staleness(t, staleness);
}

static void step(struct trainer *t, long s)
{
	struct trainer_stats st;
	struct err e;

	if (trainer_step(t, s, &st, &e)) {
		printf("# step %ld: %s\n", s, e.msg);
		CHECK(0);
	}
}

static void rollout(struct trainer *t, long s)
{
	struct trainer_stats st;
	struct err e;

	if (trainer_rollout(t, s, &st, &e)) {
		printf("# rollout %ld: %s\n", s, e.msg);
		CHECK(0);
	}
}

/* Whether a's and b's rollouts (every response's tokens) are the same. */
static bool same_rollouts(const struct trainer *a, const struct trainer *b)
{
	if (a->B != b->B || memcmp(a->gen_len, b->gen_len, (size_t)a->B * sizeof *a->gen_len))
		return false;
	for (int i = 0; i < a->B; i++)
		if (memcmp(a->gen_tok + (size_t)i * max_new(), b->gen_tok + (size_t)i * max_new(),
			   (size_t)a->gen_len[i] * sizeof *a->gen_tok))
			return false;
	return true;
}

/* The largest difference between a's old log-probs and b's. */
static double old_logp_gap(const struct trainer *a, const struct trainer *b)
{
	double gap = 0;

	for (size_t i = 0; i < a->off[a->B]; i++)
		gap = fmax(gap, fabs((double)a->old_logp[i] - b->old_logp[i]));
	return gap;
}

static void stale_rollouts_are_one_update_behind(void)
{
	static struct trainer stale, fresh, once;
	int unequal = 0;

	open_one(&stale, 1);
	step(&stale, 0);
	step(&stale, 1);
	/* step 1 generates with the weights step 0 had: the initial ones */
	open_one(&fresh, 0);
	rollout(&fresh, 1);
	CHECK(same_rollouts(&stale, &fresh));
	/* its old log-probs are the generating weights' (fresh's actor
	 * infers them with those weights), the sampler's exactly */
	printf("# step 1: old log-probs within %.2g of the generating weights'\n",
	       old_logp_gap(&stale, &fresh));
	CHECK(old_logp_gap(&stale, &fresh) <= 1e-4);
	for (int b = 0; b < stale.B; b++)
		for (int j = 0; j < stale.gen_len[b]; j++)
			unequal += stale.old_logp[stale.off[b] + (size_t)j] !=
				   stale.gen_lp[(size_t)b * max_new() + (size_t)j];
	CHECK(unequal == 0);
	/* step 2 generates with the weights after step 0's update */
	step(&stale, 2);
	open_one(&once, 1);
	step(&once, 0);
	trainer_set_staleness(&once, 0);
	rollout(&once, 2);
	CHECK(same_rollouts(&stale, &once));
	/* and not with the weights after step 1's, as a synchronous step does */
	step(&fresh, 1);
	rollout(&fresh, 2);
	CHECK(!same_rollouts(&stale, &fresh));
	trainer_close(&stale);
	trainer_close(&fresh);
	trainer_close(&once);
}

/* Synchronous, step 1 generates with the weights after step 0's update:
 * what makes the check above tell the two apart. */
static void sync_rollouts_are_current(void)
{
	static struct trainer sync, fresh;

	open_one(&sync, 0);
	step(&sync, 0);
	step(&sync, 1);
	open_one(&fresh, 0);
	rollout(&fresh, 1);
	CHECK(!same_rollouts(&sync, &fresh));
	trainer_close(&sync);
	trainer_close(&fresh);
}

int main(void)
{
	struct err e;

	if (job_load(&job, JOB, &e)) {
		printf("# %s\n", e.msg);
		return 1;
	}
	RUN(stale_rollouts_are_one_update_behind);
	RUN(sync_rollouts_are_current);
	return UNIT_END();
}
