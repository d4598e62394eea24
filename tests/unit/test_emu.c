/* ElasticModelUnits: for plans the search makes on small clusters and for
 * pinned configurations, ranks map to their pool's GPUs in order (TP
 * fastest, then DP, then PP), each EMU holds the kinds its model-stage
 * keeps, the pieces that are not copies tile every global tensor exactly
 * once, and plans that do not match the job are refused by name. */
#include "plan/search.h"
#include "state/emu.h"
#include "unit.h"
#include "unitplan.h"

#include <stdlib.h>
#include <string.h>

static struct job job;
static struct cluster cl;
static struct coef k;
static const struct env v = { &job, &cl, &k };

static void setup(const char *jobfile, const char *clusterfile, int nodes)
{
	load_env(&job, &cl, &k, jobfile, clusterfile, nodes);
}

struct own {
	int tensor;
	struct box box;
};

static int cmp_own(const void *pa, const void *pb)
{
	const struct own *a = pa, *b = pb;

	if (a->tensor != b->tensor)
		return a->tensor - b->tensor;
	for (int d = 0; d < a->box.ndim; d++)
		if (a->box.off[d] != b->box.off[d])
			return a->box.off[d] < b->box.off[d] ? -1 : 1;
	return 0;
}

/* Over all ranks of u, the pieces of kind that are not copies tile every
 * global tensor exactly once; return their elements. */
static int64_t check_tiling(const struct emu *u, enum state_kind kind)
{
	struct own *o = NULL;
	size_t n = 0, cap = 0;
	int64_t total = 0;

	for (int r = 0; r < u->nranks; r++) {
		int t, p, d;
		const struct emu_list *l = &u->lists[u->rank_list[kind][r]];

		emu_rank_coords(u, r, &t, &p, &d);
		for (size_t i = 0; i < l->npieces; i++) {
			if (emu_piece_copy(l, &l->pieces[i], d) || box_volume(&l->pieces[i].box) == 0)
				continue;
			if (n == cap) {
				cap = cap ? 2 * cap : 256;
				o = realloc(o, cap * sizeof *o);
			}
			o[n++] = (struct own){ l->pieces[i].tensor, l->pieces[i].box };
		}
	}
	qsort(o, n, sizeof *o, cmp_own);
	for (int t = 0, i = 0; t < u->lo.ntensors; t++) {
		const struct gtensor *g = &u->lo.tensors[t];
		int64_t vol = 1, got = 0;
		int from = i;

		for (int d = 0; d < g->ndim; d++)
			vol *= g->shape[d];
		for (; i < (int)n && o[i].tensor == t; i++) {
			got += box_volume(&o[i].box);
			for (int j = from; j < i; j++)
				CHECK(!box_intersect(&o[i].box, &o[j].box, NULL));
		}
		CHECK(got == vol);
		total += got;
	}
	free(o);
	return total;
}

/* Ranks: the pool's GPUs in increasing order; each rank's list of each
 * kind has its TP, PP (and DP when split) coordinates. */
static void check_ranks(const struct plan *p, const struct emu *u)
{
	int pool = p->gpu_pool[u->rank_gpu[0]], r = 0;

	for (int g = 0; g < cluster_gpus(&cl); g++)
		if (p->gpu_pool[g] == pool) {
			CHECK(r < u->nranks && u->rank_gpu[r] == g);
			r++;
		}
	CHECK(r == u->nranks);
	for (r = 0; r < u->nranks; r++)
		for (int kind = 0; kind < NKINDS; kind++) {
			int t, pp, d;
			const struct emu_list *l;

			if (!u->rank_list[kind])
				continue;
			emu_rank_coords(u, r, &t, &pp, &d);
			CHECK(r == t + u->conf.tp * (d + u->conf.dp * pp));
			l = &u->lists[u->rank_list[kind][r]];
			CHECK(l->kind == (enum state_kind)kind && l->tp == t && l->pp == pp);
			CHECK(l->dp < 0 || l->dp == d);
		}
}

static void check_plan(const struct plan *p)
{
	struct emu_set s;
	struct err e = { 0 };
	int rc = emu_build(&v, p, &s, &e);

	CHECK(rc == NR_OK);
	if (rc) {
		printf("#   %s\n", e.msg);
		return;
	}
	CHECK(s.n == job.nmodels + 1);
	for (int i = 0; i < s.n; i++) {
		const struct emu *u = &s.u[i];
		bool gen = i == job.nmodels, train = !gen && model_trainable(&job.models[i]);

		CHECK(u->item == (gen ? ITEM_GEN : 1 + i));
		CHECK(u->model == (gen ? job_actor(&job) : i));
		check_ranks(p, u);
		for (int kind = 0; kind < NKINDS; kind++) {
			bool held = kind == KIND_WEIGHT || train;

			CHECK((u->rank_list[kind] != NULL) == held);
			CHECK(u->elem_bytes[kind] == (!held ? 0 : kind ? 4 : gen ? 2 :
						      job.models[u->model].arch.dtype_bytes));
			/* the model's parameters, each once */
			if (held)
				CHECK_NEAR((double)check_tiling(u, (enum state_kind)kind),
					   arch_params(&job.models[u->model].arch), 1e-12);
		}
		CHECK(!gen || (u->conf.pp == 1 && u->conf.tp == p->gen.tp && u->conf.dp == p->gen.dp));
		CHECK(gen || (u->conf.tp == p->home[i].tp && u->conf.pp == p->home[i].pp &&
			      u->conf.dp == p->home[i].dp));
		for (int kind = 0; kind < NKINDS && !gen; kind++) {
			bool fsdp = p->home[i].zero == ZERO_3;
			bool split = u->conf.dp > 1 && (kind ? (train && p->home[i].zero) || fsdp :
								fsdp);

			if (u->rank_list[kind])
				CHECK((u->lists[u->rank_list[kind][0]].dp >= 0) == split);
		}
	}
	emu_free(&s);
}

static void test_searched_plans(void)
{
	static struct plan p;
	const char *const jobs[] = { "examples/jobs/grpo-qwen-1.5b.json",
				     "examples/jobs/ppo-llama3-8b.json",
				     "examples/jobs/ppo-llama3-70b-8b-critic.json" };
	const int nodes[] = { 1, 2, 4 };

	for (size_t j = 0; j < sizeof jobs / sizeof jobs[0]; j++)
		for (size_t n = 0; n < sizeof nodes / sizeof nodes[0]; n++) {
			setup(jobs[j], "examples/clusters/h100-8x8.json", nodes[n]);
			/* the 70B job fits on neither one node nor two */
			for (int shape = ANY; shape <= POOL_EACH; shape++)
				if (search_shaped(&v, NULL, (enum shape)shape, &p))
					check_plan(&p);
		}
}

static void test_pinned_plans(void)
{
	static struct plan p;
	const char *const pins[][3] = {
		{ "actor@training=tp2,pp2,dp4,zero", "reference@inference=tp1,pp2", NULL },
		{ "actor@training=tp4,pp1,nozero", "actor@generation=tp2", NULL },
		{ "actor@training=tp1,pp4,zero", "critic@training=tp2,pp2,nozero", NULL },
		{ "actor@training=tp8,pp1,zero", "actor@generation=tp4", NULL },
		{ "actor@training=tp2,pp1,fsdp", "reward@inference=tp1,pp1,fsdp", NULL },
	};

	setup("examples/jobs/ppo-llama3-8b.json", "examples/clusters/h100-8x8.json", 2);
	for (size_t i = 0; i < sizeof pins / sizeof pins[0]; i++) {
		CHECK(search_shaped(&v, pins[i], ANY, &p));
		check_plan(&p);
	}
}

/* A model whose TP does not divide its KV heads, or whose GPUs are not its
 * pool's, is refused with its name. */
static void test_refused(void)
{
	static struct plan p, bad;
	struct emu_set s;
	struct err e = { 0 };

	setup("examples/jobs/ppo-llama3-8b.json", "examples/clusters/h100-8x8.json", 1);
	CHECK(search_shaped(&v, NULL, ONE_POOL, &p));
	bad = p;
	bad.home[1].tp *= 2;
	CHECK(emu_build(&v, &bad, &s, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "critic") != NULL);
	bad = p;
	bad.home[0].tp = 3;
	bad.home[0].dp = 1;
	bad.home[0].pp = 8 / 3;
	CHECK(emu_build(&v, &bad, &s, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "actor") != NULL);
	bad = p;
	bad.home[0].tp = 16;
	bad.home[0].pp = 1;
	bad.home[0].dp = 1;
	bad.pools[0].ngpus = 16;
	CHECK(emu_build(&v, &bad, &s, &e) == NR_EINPUT);
}

int main(void)
{
	RUN(test_searched_plans);
	RUN(test_pinned_plans);
	RUN(test_refused);
	return UNIT_END();
}
