/* Where the built-in engine's generation engines generate from the
 * actor's own weights (plan_gen_aliases): exactly where they are the
 * actor's home layout, in its pool with the same TP and DP, the actor
 * not pipelined.  The planner prices a copy everywhere else, in the
 * actor's pool too, and the engine's ranks hold one exactly there. */
#include <stdlib.h>
#include <string.h>

#include "engine/roles.h"
#include "plan/plan.h"
#include "unit.h"
#include "unitfs.h"

static struct job job;
static struct cluster cl;
static struct coef k;
static struct env v = { &job, &cl, &k };
static char dir[4096];

/* tests/45-run-ranks.bats's actor: 2 layers of hidden 32, 4 heads of 8
 * and 4 KV heads, ffn 64, its vocabulary of 258 padded to 384, untied,
 * all fp32 on the built-in engine: 2 embedding matrices of 384·32, per
 * layer Q, K, V and O of 32·32, gate, up and down of 32·64 and two
 * norms, and the final norm. */
#define COPY (4.0 * (2 * 384 * 32 + 2 * (4 * 32 * 32 + 3 * 32 * 64 + 2 * 32) + 32))

#define ARCH \
	"{ \"layers\": 2, \"hidden\": 32, \"heads\": 4, \"kv_heads\": 4, \"ffn\": 64,\n" \
	"  \"vocab\": 258, \"dtype\": \"fp32\", \"max_position_embeddings\": 32 }"

static const char job_doc[] =
	"{ \"nereus\": 1, \"kind\": \"job\", \"name\": \"alias\", \"algorithm\": \"grpo\",\n"
	"  \"models\": {\n"
	"    \"actor\": { \"arch\": " ARCH ",\n"
	"      \"stages\": [\"generation\", \"inference\", \"training\"] },\n"
	"    \"reference\": { \"arch\": " ARCH ",\n"
	"      \"stages\": [\"inference\"] } },\n"
	"  \"batch\": { \"prompts_per_step\": 4, \"samples_per_prompt\": 4, \"prompt_len\": 4,\n"
	"             \"response_len\": { \"max\": 10 } } }\n";

static const char cluster_doc[] =
	"{ \"nereus\": 1, \"kind\": \"cluster\", \"name\": \"cpu-2\", \"nodes\": 1,\n"
	"  \"gpus_per_node\": 2, \"engine\": \"builtin\",\n"
	"  \"gpu\": { \"model\": \"cpu\", \"memory_gib\": 8, \"tflops\": 0.1, \"hbm_gbps\": 10 },\n"
	"  \"links\": { \"intra_node_gbps\": 450 } }\n";

static int setup(void)
{
	char file[4200];
	struct err e;
	FILE *f;

	cost_coef_defaults(&k);
	snprintf(file, sizeof file, "%s/job.json", dir);
	if (!(f = fopen(file, "w")) || fputs(job_doc, f) < 0 || fclose(f))
		return 1;
	if (job_load(&job, file, &e)) {
		printf("# %s\n", e.msg);
		return 1;
	}
	snprintf(file, sizeof file, "%s/cluster.json", dir);
	if (!(f = fopen(file, "w")) || fputs(cluster_doc, f) < 0 || fclose(f))
		return 1;
	if (cluster_load(&cl, file, &e)) {
		printf("# %s\n", e.msg);
		return 1;
	}
	return 0;
}

/* Alias exactly when in one pool with the same TP and DP, the actor's pp
 * 1, whatever else the layouts say. */
static void test_predicate(void)
{
	int n = 0;

	for (int same = 0; same < 2; same++)
		for (int c = 0; c < 32; c++) {
			struct pconf h = { 1 + (c & 1), 1 + (c >> 1 & 1), 1 + (c >> 2 & 1), 4,
					   RC_NONE, ZERO_1, false };
			struct pconf g = { 1 + (c >> 3 & 1), 1, 1 + (c >> 4 & 1), 1, RC_NONE,
					   ZERO_0, false };
			bool want = same && h.tp == g.tp && h.dp == g.dp && h.pp == 1;

			CHECK(plan_gen_aliases(&h, &g, same) == want);
			n += want;
		}
	CHECK(n == 4);
}

static const struct ms_plan *gen_of(const struct plan *p)
{
	for (int i = 0; i < p->nms; i++)
		if (p->ms[i].stage == STAGE_GEN)
			return &p->ms[i];
	return NULL;
}

/* Every model and the engines on one pool of 2 GPUs (shared), or the
 * actor on GPU 0 and the rest on GPU 1; the reference at the actor's
 * layout. */
static void make_plan(struct plan *p, bool shared, struct pconf actor, int gen_tp)
{
	unsigned a = 1u << 1, r = 1u << 2;

	memset(p, 0, sizeof *p);
	if (shared) {
		p->npools = 1;
		p->pools[0] = (struct pool){ 1u | a | r, 2 };
	} else {
		p->npools = 2;
		p->pools[0] = (struct pool){ a, 1 };
		p->pools[1] = (struct pool){ 1u | r, 1 };
	}
	p->home[0] = actor;
	p->home[1] = actor;
	p->home[1].zero = ZERO_0;
	p->gen = (struct pconf){ gen_tp, 1, (shared ? 2 : 1) / gen_tp, 1, RC_NONE, ZERO_0, false };
	CHECK(plan_place(&cl, p));
	plan_evaluate(&v, p);
}

/* Whether the engine's ranks lay p out with the engines on the actor's
 * weights: every rank's alias, which all must agree on. */
static bool engine_aliases(const struct plan *p)
{
	bool alias[2];

	for (int w = 0; w < 2; w++) {
		struct rank_roles rr;
		struct rank_state s;
		struct err e = { 0 };
		int gen = job.nmodels;

		CHECK(rank_roles_build(&v, p, w, 2, &rr, &e) == NR_OK);
		CHECK(rank_state_init(&s, &v, &rr, &e) == NR_OK);
		alias[w] = s.alias[gen] == rank_roles_index(&rr, 1);
		CHECK(alias[w] ? !s.held[gen] : s.alias[gen] == -1);
		rank_state_free(&s);
		rank_roles_free(&rr);
	}
	CHECK(alias[0] == alias[1]);
	return alias[0];
}

/* The planner's copy and move and the engine's layout, for the actor at
 * each home layout on 2 GPUs and the engines at TP 1 or 2: no copy and
 * no move where the layouts are one, a copy of every weight and a move
 * wherever they differ, in the actor's pool as out of it. */
static void test_copy_where_layouts_differ(void)
{
	static const struct {
		bool shared;
		struct pconf actor;
		int gen_tp;
		bool alias;
	} cases[] = {
		{ true, { 1, 1, 2, 4, RC_NONE, ZERO_1, false }, 1, true },
		{ true, { 2, 1, 1, 4, RC_NONE, ZERO_0, false }, 2, true },
		{ true, { 2, 1, 1, 4, RC_NONE, ZERO_0, false }, 1, false },
		{ true, { 1, 1, 2, 4, RC_NONE, ZERO_0, false }, 2, false },
		{ true, { 1, 2, 1, 4, RC_NONE, ZERO_0, false }, 1, false },
		{ true, { 1, 2, 1, 4, RC_NONE, ZERO_0, false }, 2, false },
		{ false, { 1, 1, 1, 4, RC_NONE, ZERO_0, false }, 1, false },
	};
	static struct plan p;

	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		const struct ms_plan *g;

		make_plan(&p, cases[i].shared, cases[i].actor, cases[i].gen_tp);
		CHECK(p.feasible);
		g = gen_of(&p);
		CHECK(g != NULL);
		printf("# actor tp%d pp%d dp%d, engines tp%d %s: copy %.0f bytes, move %.3g s\n",
		       cases[i].actor.tp, cases[i].actor.pp, cases[i].actor.dp, cases[i].gen_tp,
		       cases[i].shared ? "beside it" : "apart", g->mem.weights, g->time.move);
		CHECK(g->mem.weights == (cases[i].alias ? 0 : COPY));
		CHECK(cases[i].alias ? g->time.move == 0 : g->time.move > 0);
		CHECK(engine_aliases(&p) == cases[i].alias);
	}
}

/* In the actor's pool at another layout, generation's peak is the one
 * at the actor's own layout (the engines at TP 1, DP 2 both times) but
 * for the copy and what the actor keeps resident: over the pool's
 * resident bytes, exactly the copy more.  The copy is generation's alone
 * (freed after it, the rule where the engines share their pool), and the
 * document says so. */
static void test_copy_in_the_peak(void)
{
	static const struct pconf others[] = { { 2, 1, 1, 4, RC_NONE, ZERO_0, false },
					       { 1, 2, 1, 4, RC_NONE, ZERO_0, false } };
	static struct plan home, other;
	json_t *doc;

	make_plan(&home, true, (struct pconf){ 1, 1, 2, 4, RC_NONE, ZERO_0, false }, 1);
	doc = plan_to_json(&v, &home);
	CHECK(json_object_get(json_object_get(doc, "generation"), "resident") == NULL);
	json_decref(doc);
	for (size_t i = 0; i < sizeof others / sizeof *others; i++) {
		double over;

		make_plan(&other, true, others[i], 1);
		CHECK(!plan_gen_resident(&other) && other.gen_kept == 0);
		over = (gen_of(&other)->peak - other.resident[0]) -
		       (gen_of(&home)->peak - home.resident[0]);
		printf("# actor tp%d pp%d: generation peaks %.0f bytes over the pool's resident "
		       "bytes more than at the engines' layout\n",
		       others[i].tp, others[i].pp, over);
		CHECK(over == COPY);
		doc = plan_to_json(&v, &other);
		CHECK(json_is_false(json_object_get(json_object_get(doc, "generation"),
						    "resident")));
		json_decref(doc);
	}
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(dir, sizeof dir, "%s/nereus-genalias-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		perror(dir);
		return 1;
	}
	if (setup()) {
		rmtree(dir);
		return 1;
	}
	RUN(test_predicate);
	RUN(test_copy_where_layouts_differ);
	RUN(test_copy_in_the_peak);
	rmtree(dir);
	return UNIT_END();
}
