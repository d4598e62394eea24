/* The engines' copy of the actor's weights kept resident between
 * generations or freed after each (nereus-plan(5), generation.resident):
 * kept, its bytes are part of its pool's resident bytes and so of every
 * stage's peak there; freed, of generation's alone.  Staleness 1 keeps it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan.h"
#include "unit.h"
#include "unitfs.h"

static struct job job;
static struct cluster cl;
static struct coef k;
static struct env v = { &job, &cl, &k };

/* Llama-3-8B's 8,030,261,248 parameters, its vocabulary of 128,256 a
 * multiple of 128·2 (no padding at TP 2): each of two engine TP ranks
 * holds half of them, 2 bytes each in bf16. */
#define COPY_TP2 8030261248.0

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

/* verl's shape when shared: the engines on the pool of the actor and the
 * reference; else on 32 GPUs of their own, the four models on two pools
 * of 16. */
static void make_plan(struct plan *p, bool shared, enum gen_copy copy, int staleness)
{
	int n = shared ? 32 : 16;

	memset(p, 0, sizeof *p);
	p->staleness = staleness;
	p->gen_copy = copy;
	if (shared) {
		p->npools = 2;
		p->pools[0] = (struct pool){ 1u | bit("actor") | bit("reference"), 32 };
		p->pools[1] = (struct pool){ bit("critic") | bit("reward"), 32 };
	} else {
		p->npools = 3;
		p->pools[0] = (struct pool){ 1u, 32 };
		p->pools[1] = (struct pool){ bit("actor") | bit("reference"), 16 };
		p->pools[2] = (struct pool){ bit("critic") | bit("reward"), 16 };
	}
	conf(p, "actor", (struct pconf){ 1, 1, n, 4, RC_FULL, ZERO_3, true });
	conf(p, "critic", (struct pconf){ 1, 1, n, 4, RC_FULL, ZERO_3, true });
	conf(p, "reference", (struct pconf){ 1, 1, n, 8, RC_SELECTIVE, ZERO_3, false });
	conf(p, "reward", (struct pconf){ 1, 1, n, 8, RC_SELECTIVE, ZERO_3, false });
	p->gen = (struct pconf){ 2, 1, 16, 1, RC_NONE, ZERO_0, false };
	CHECK(plan_place(&cl, p));
	plan_evaluate(&v, p);
}

static const struct ms_plan *find(const struct plan *p, const char *model, enum stage s)
{
	for (int i = 0; i < p->nms; i++)
		if (p->ms[i].stage == s && strcmp(job.models[p->ms[i].model].name, model) == 0)
			return &p->ms[i];
	return NULL;
}

/* Kept, the copy's bytes join the engines' pool's resident bytes and
 * every model-stage's peak there; generation's peak, which held the copy
 * either way, and the other pool's do not move. */
static void test_kept_adds_the_copy(void)
{
	static struct plan kept, freed;
	static const char *const names[] = { "actor", "reference", "critic", "reward" };

	make_plan(&kept, true, GEN_COPY_RESIDENT, 0);
	make_plan(&freed, true, GEN_COPY_FREED, 0);
	CHECK(kept.feasible && freed.feasible);
	CHECK(plan_gen_resident(&kept) && !plan_gen_resident(&freed));
	printf("# resident %.3f GiB kept, %.3f GiB freed\n", kept.resident[0] / GIB,
	       freed.resident[0] / GIB);
	CHECK(kept.gen_kept == COPY_TP2);
	CHECK(freed.gen_kept == 0);
	CHECK(kept.resident[0] - freed.resident[0] == COPY_TP2);
	CHECK(kept.resident[1] == freed.resident[1]);
	CHECK(find(&kept, "actor", STAGE_GEN)->mem.weights == COPY_TP2);
	CHECK(find(&kept, "actor", STAGE_GEN)->peak == find(&freed, "actor", STAGE_GEN)->peak);
	for (size_t i = 0; i < sizeof names / sizeof *names; i++)
		for (int s = STAGE_INF; s < NSTAGES; s++) {
			const struct ms_plan *a = find(&kept, names[i], (enum stage)s);
			const struct ms_plan *b = find(&freed, names[i], (enum stage)s);
			if (!a)
				continue;
			CHECK(b != NULL);
			CHECK(a->peak - b->peak == (a->pool == 0 ? COPY_TP2 : 0));
		}
	CHECK(kept.pool_peak[0] >= freed.pool_peak[0]);
	CHECK(kept.step_time == freed.step_time);
}

/* The rule: freed where the engines share their pool with a model, kept
 * where they have it to themselves, and kept one step ahead whatever
 * the plan says. */
static void test_rule(void)
{
	static struct plan p, q;

	make_plan(&p, true, GEN_COPY_RULE, 0);
	CHECK(!plan_gen_resident(&p));
	CHECK(p.gen_kept == 0);
	make_plan(&p, false, GEN_COPY_RULE, 0);
	CHECK(plan_gen_resident(&p));
	CHECK(p.gen_kept == COPY_TP2 && p.resident[0] == COPY_TP2);
	make_plan(&q, false, GEN_COPY_FREED, 0);
	CHECK(q.resident[0] == 0);
	/* alone on their pool, the copy raises no peak */
	CHECK(p.pool_peak[0] == q.pool_peak[0]);
	make_plan(&p, false, GEN_COPY_FREED, 1);
	CHECK(p.feasible);
	CHECK(plan_gen_resident(&p));
	CHECK(p.gen_kept == COPY_TP2 && p.resident[0] == COPY_TP2);
}

static char dir[4096];

static int load_doc(json_t *doc, struct plan *p, struct err *e)
{
	char file[4200];

	snprintf(file, sizeof file, "%s/plan.json", dir);
	CHECK(json_dump_file(doc, file, 0) == 0);
	return plan_load(&v, p, file, e);
}

/* The document says it when the engines hold a copy, reads back what it
 * said, takes the rule without the key, and refuses a freed copy one
 * step ahead, naming the field. */
static void test_document(void)
{
	static struct plan p, q;
	json_t *doc, *g;
	struct err e;

	make_plan(&p, true, GEN_COPY_RULE, 0);
	doc = plan_to_json(&v, &p);
	g = json_object_get(doc, "generation");
	CHECK(json_is_false(json_object_get(g, "resident")));
	json_object_set_new(g, "resident", json_true());
	CHECK(load_doc(doc, &q, &e) == NR_OK);
	CHECK(q.gen_copy == GEN_COPY_RESIDENT && q.gen_kept == COPY_TP2);
	json_object_del(g, "resident");
	CHECK(load_doc(doc, &q, &e) == NR_OK);
	CHECK(q.gen_copy == GEN_COPY_RULE && q.gen_kept == 0);
	json_object_set_new(g, "resident", json_false());
	json_object_set_new(doc, "staleness", json_integer(1));
	CHECK(load_doc(doc, &q, &e) == NR_EINPUT);
	printf("# %s\n", e.msg);
	CHECK(strstr(e.msg, "generation.resident") != NULL);
	CHECK(strstr(e.msg, "staleness 1") != NULL);
	json_object_set_new(g, "resident", json_string("no"));
	json_object_set_new(doc, "staleness", json_integer(0));
	CHECK(load_doc(doc, &q, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "generation.resident") != NULL);
	json_decref(doc);
}

/* The built-in engine generating from the actor's own weights, its home
 * layout (plan_gen_aliases), holds no copy: nothing to keep, nothing
 * written. */
static void test_no_copy(void)
{
	static struct plan p;
	json_t *doc;

	cl.engine = CLUSTER_ENGINE_BUILTIN;
	make_plan(&p, true, GEN_COPY_RESIDENT, 0);
	conf(&p, "actor", p.gen);
	plan_evaluate(&v, &p);
	CHECK(p.gen_kept == 0);
	doc = plan_to_json(&v, &p);
	CHECK(json_object_get(json_object_get(doc, "generation"), "resident") == NULL);
	json_decref(doc);
	cl.engine = CLUSTER_ENGINE_MEGATRON;
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(dir, sizeof dir, "%s/nereus-genres-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		perror(dir);
		return 1;
	}
	setup();
	RUN(test_kept_adds_the_copy);
	RUN(test_rule);
	RUN(test_document);
	RUN(test_no_copy);
	rmtree(dir);
	return UNIT_END();
}
