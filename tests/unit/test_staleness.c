/* Staleness 1 (nereus-plan(5), STALENESS): generation of the next step
 * overlaps this step's inference and training, so a step costs
 * max(generation, inference + training) plus the actor's move into the
 * engines, and only when the engines have a pool of their own. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "plan/search.h"
#include "unit.h"

static struct job job;
static struct cluster cl;
static struct coef k;
static struct env v = { &job, &cl, &k };

static void setup(void)
{
	struct err e;

	cost_coef_defaults(&k);
	if (job_load(&job, "examples/jobs/ppo-llama3-8b.json", &e) ||
	    cluster_load(&cl, "examples/clusters/h100-8x8.json", &e)) {
		printf("# %s\n", e.msg);
		unit_failed = 1;
	}
}

static unsigned bit(const char *name)
{
	return 1u << (1 + (int)(job_model(&job, name) - job.models));
}

static void conf(struct plan *p, const char *name, struct pconf c)
{
	p->home[job_model(&job, name) - job.models] = c;
}

/* The engines on 32 GPUs of their own, the four models on two pools of 16. */
static void disjoint_plan(struct plan *p, int staleness)
{
	memset(p, 0, sizeof *p);
	p->npools = 3;
	p->staleness = staleness;
	p->pools[0] = (struct pool){ 1u, 32 };
	p->pools[1] = (struct pool){ bit("actor") | bit("reference"), 16 };
	p->pools[2] = (struct pool){ bit("critic") | bit("reward"), 16 };
	conf(p, "actor", (struct pconf){ 1, 1, 16, 4, RC_FULL, ZERO_3, true });
	conf(p, "critic", (struct pconf){ 1, 1, 16, 4, RC_FULL, ZERO_3, true });
	conf(p, "reference", (struct pconf){ 1, 1, 16, 8, RC_SELECTIVE, ZERO_3, false });
	conf(p, "reward", (struct pconf){ 1, 1, 16, 8, RC_SELECTIVE, ZERO_3, false });
	p->gen = (struct pconf){ 2, 1, 16, 1, RC_NONE, ZERO_0, false };
	CHECK(plan_place(&cl, p));
	plan_evaluate(&v, p);
}

static double gen_move(const struct plan *p)
{
	for (int i = 0; i < p->nms; i++)
		if (p->ms[i].stage == STAGE_GEN)
			return p->ms[i].time.move;
	return NAN;
}

static void test_cost_formula(void)
{
	CHECK(cost_stale_step(5, 3, 1) == 6);
	CHECK(cost_stale_step(2, 3, 1) == 4);
	CHECK(cost_stale_step(0, 0, 0) == 0);
}

/* The same pools and configurations priced both ways: the synchronous step
 * is the stages' sum; one step ahead, the overlap of the two halves, the
 * move (inside generation's stage time) paid after both. */
static void test_overlap_priced(void)
{
	static struct plan sync, ahead;
	double gen, inf, train, move, want;

	disjoint_plan(&sync, 0);
	disjoint_plan(&ahead, 1);
	CHECK(sync.feasible && ahead.feasible);
	gen = sync.stage_time[STAGE_GEN];
	inf = sync.stage_time[STAGE_INF];
	train = sync.stage_time[STAGE_TRAIN];
	move = gen_move(&sync);
	CHECK(move > 0);
	CHECK(fabs(sync.step_time - (k.step_s + gen + inf + train)) <= 1e-9 * sync.step_time);
	want = k.step_s + fmax(gen - move, inf + train) + move;
	printf("# sync %.3f s, one step ahead %.3f s (gen %.3f, inf %.3f, train %.3f, move "
	       "%.3f)\n", sync.step_time, ahead.step_time, gen, inf, train, move);
	CHECK(fabs(ahead.step_time - want) <= 1e-9 * want);
	CHECK(ahead.step_time < sync.step_time);
	for (int s = 0; s < NSTAGES; s++)
		CHECK(ahead.stage_time[s] == sync.stage_time[s]);
}

/* verl's shape, everything on one pool: generation and training take turns
 * there, so staleness 1 cannot overlap them and the plan is refused. */
static void test_shared_pool_refused(void)
{
	static struct plan p;

	memset(&p, 0, sizeof p);
	p.npools = 2;
	p.staleness = 1;
	p.pools[0] = (struct pool){ 1u | bit("actor") | bit("reference"), 32 };
	p.pools[1] = (struct pool){ bit("critic") | bit("reward"), 32 };
	conf(&p, "actor", (struct pconf){ 1, 1, 32, 4, RC_FULL, ZERO_3, true });
	conf(&p, "critic", (struct pconf){ 1, 1, 32, 4, RC_FULL, ZERO_3, true });
	conf(&p, "reference", (struct pconf){ 1, 1, 32, 8, RC_SELECTIVE, ZERO_3, false });
	conf(&p, "reward", (struct pconf){ 1, 1, 32, 8, RC_SELECTIVE, ZERO_3, false });
	p.gen = (struct pconf){ 2, 1, 16, 1, RC_NONE, ZERO_0, false };
	CHECK(plan_place(&cl, &p));
	plan_evaluate(&v, &p);
	printf("# %s\n", p.why);
	CHECK(!p.feasible);
	CHECK(strstr(p.why, "staleness 1") != NULL);
	CHECK(strstr(p.why, "'actor'") != NULL);
	p.staleness = 0;
	plan_evaluate(&v, &p);
	CHECK(p.feasible);
}

/* The plan document says staleness only when it is 1. */
static void test_document(void)
{
	static struct plan p;
	json_t *doc;

	disjoint_plan(&p, 1);
	doc = plan_to_json(&v, &p);
	CHECK(json_integer_value(json_object_get(doc, "staleness")) == 1);
	json_decref(doc);
	disjoint_plan(&p, 0);
	doc = plan_to_json(&v, &p);
	CHECK(json_object_get(doc, "staleness") == NULL);
	json_decref(doc);
}

/* A step record of a plan one step ahead says so, and may leave the
 * actor's inference unmeasured (its old log-probs are the sampler's);
 * a synchronous step's may not. */
static void record_reads_back(void)
{
	static struct plan p;
	static struct step_record r, back;
	struct err e;
	char *line;
	int actor_inf = -1;

	disjoint_plan(&p, 1);
	plan_to_record(&v, &p, 3, &r);
	CHECK(r.staleness == 1);
	for (int i = 0; i < r.nms; i++)
		if (strcmp(r.ms[i].model, "actor") == 0 && r.ms[i].stage == STAGE_INF)
			actor_inf = i;
	CHECK(actor_inf >= 0);
	if (actor_inf < 0)
		return;
	r.ms[actor_inf].time_s = NAN;
	line = steprec_line(&r);
	CHECK(line && strstr(line, "\"staleness\":1"));
	CHECK(steprec_parse("r", 1, line, strlen(line), &job, &cl, &back, NULL, &e) == NR_OK);
	CHECK(back.staleness == 1);
	CHECK(steprec_check(&r, &job, &cl, &e) == NR_OK);
	r.staleness = 0;
	CHECK(steprec_check(&r, &job, &cl, &e) != NR_OK);
	printf("# %s\n", e.msg);
	free(line);
}

/* The search keeps plans synchronous unless allowed one step ahead; then,
 * on a job whose generation is the longer half of a step, it chooses
 * staleness 1 on a pool of the engines' own, and says the time it takes. */
static void search_chooses_ahead(void)
{
	static struct plan sync, ahead, again;
	struct space sp;
	struct search_stats st;
	struct err e;
	int gi = -1;

	search_space_init(&sp);
	CHECK(plan_search(&v, &sp, false, NULL, &sync, &st, &e) == NR_OK);
	CHECK(sync.staleness == 0);
	sp.max_staleness = 1;
	CHECK(plan_search(&v, &sp, false, NULL, &ahead, &st, &e) == NR_OK);
	printf("# synchronous %.3f s a step, allowed one step ahead %.3f s (staleness %d)\n",
	       sync.step_time, ahead.step_time, ahead.staleness);
	CHECK(ahead.staleness == 1);
	CHECK(ahead.feasible);
	CHECK(ahead.step_time < sync.step_time);
	for (int i = 0; i < ahead.npools; i++)
		if (ahead.pools[i].items & 1u)
			gi = i;
	CHECK(gi >= 0 && ahead.pools[gi].items == 1u);
	memcpy(&again, &ahead, sizeof again);
	plan_evaluate(&v, &again);
	CHECK(again.step_time == ahead.step_time);
}

int main(void)
{
	setup();
	RUN(test_cost_formula);
	RUN(test_overlap_priced);
	RUN(test_shared_pool_refused);
	RUN(test_document);
	RUN(record_reads_back);
	RUN(search_chooses_ahead);
	return UNIT_END();
}
