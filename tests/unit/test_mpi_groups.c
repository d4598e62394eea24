/* A rank's roles in a plan (lib/mpi/groups.h), without MPI: every world
 * rank's layouts agree with the EMUs (same GPUs in the same order, the
 * same TP, PP and DP coordinates); each group is listed alike by all its
 * members, in the order of the coordinate it spans, and the groups of a
 * kind cover the pool once (the embedding group: the first and last
 * stages); the layouts worked out by hand come out as worked out; a plan
 * for more ranks than run is refused alike on every rank. */
#include "mpi/groups.h"
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

/* Every world rank's roles, or NULL. */
static struct rank_roles *all_roles(const struct plan *p, int world)
{
	struct rank_roles *rr = calloc((size_t)world, sizeof *rr);
	struct err e = { 0 };

	for (int w = 0; w < world; w++)
		CHECK(rank_roles_build(&v, p, w, world, &rr[w], &e) == NR_OK);
	return rr;
}

static void free_roles(struct rank_roles *rr, int world)
{
	for (int w = 0; w < world; w++)
		rank_roles_free(&rr[w]);
	free(rr);
}

static void check_against_emu(const struct plan *p, const struct rank_roles *rr, int world)
{
	struct emu_set s;
	struct err e = { 0 };

	CHECK(emu_build(&v, p, &s, &e) == NR_OK);
	for (int w = 0; w < world; w++) {
		CHECK(rr[w].n == s.n);
		for (int i = 0; i < rr[w].n && i < s.n; i++) {
			const struct rank_role *ro = &rr[w].r[i];
			const struct emu *u = &s.u[i];
			int at = -1;

			CHECK(ro->item == u->item && ro->model == u->model);
			CHECK(ro->nranks == u->nranks);
			CHECK(ro->conf.tp == u->conf.tp && ro->conf.pp == u->conf.pp &&
			      ro->conf.dp == u->conf.dp && ro->conf.zero == u->conf.zero);
			for (int r = 0; r < u->nranks; r++) {
				CHECK(ro->world[r] == u->rank_gpu[r]);
				if (u->rank_gpu[r] == w)
					at = r;
			}
			CHECK(ro->member == (at >= 0));
			CHECK(ro->rank == at);
			if (at >= 0) {
				int t, pp, d;

				emu_rank_coords(u, at, &t, &pp, &d);
				CHECK(ro->tp_rank == t && ro->pp_rank == pp && ro->dp_rank == d);
			} else {
				CHECK(ro->tp_rank == -1 && ro->pp_rank == -1 && ro->dp_rank == -1);
				for (int g = 0; g < NGROUPS; g++)
					CHECK(ro->nmembers[g] == 0 && ro->group_rank[g] == -1);
			}
		}
	}
	emu_free(&s);
}

/* The coordinate group kind g spans, of a role. */
static int spanned(const struct rank_role *ro, enum group_kind g)
{
	switch (g) {
	case GROUP_TP: return ro->tp_rank;
	case GROUP_PP: return ro->pp_rank;
	case GROUP_DP: return ro->dp_rank;
	default: return ro->rank;
	}
}

static void check_groups(const struct rank_roles *rr, int world)
{
	for (int i = 0; i < rr[0].n; i++)
		for (int g = 0; g < NGROUPS; g++) {
			const struct rank_role *r0 = &rr[0].r[i];
			int want = g == GROUP_POOL ? r0->nranks : g == GROUP_TP ? r0->conf.tp :
				   g == GROUP_PP ? r0->conf.pp : g == GROUP_DP ? r0->conf.dp :
				   r0->conf.pp > 1 ? 2 : 1;

			for (int w = 0; w < world; w++) {
				const struct rank_role *ro = &rr[w].r[i];
				bool end = ro->pp_rank == 0 || ro->pp_rank == ro->conf.pp - 1;

				if (!ro->member)
					continue;
				if (g == GROUP_EMBED && !end) {
					CHECK(ro->nmembers[g] == 0 && ro->group_rank[g] == -1);
					continue;
				}
				CHECK(ro->nmembers[g] == want);
				CHECK(ro->group_rank[g] >= 0 && ro->members[g][ro->group_rank[g]] == w);
				for (int q = 0; q < ro->nmembers[g]; q++) {
					int m = ro->members[g][q];
					const struct rank_role *mo = &rr[m].r[i];

					/* every member lists the group alike */
					CHECK(mo->member && mo->nmembers[g] == ro->nmembers[g]);
					CHECK(!memcmp(mo->members[g], ro->members[g],
						      (size_t)ro->nmembers[g] * sizeof(int)));
					CHECK(mo->group_rank[g] == q);
					/* ordered by the coordinate it spans; the others its own */
					if (g == GROUP_EMBED) {
						CHECK(mo->pp_rank == (q == 0 ? 0 : ro->conf.pp - 1));
						CHECK(mo->tp_rank == ro->tp_rank && mo->dp_rank == ro->dp_rank);
						continue;
					}
					CHECK(spanned(mo, (enum group_kind)g) == q);
					CHECK(g == GROUP_POOL || g == GROUP_TP || mo->tp_rank == ro->tp_rank);
					CHECK(g == GROUP_POOL || g == GROUP_PP || mo->pp_rank == ro->pp_rank);
					CHECK(g == GROUP_POOL || g == GROUP_DP || mo->dp_rank == ro->dp_rank);
				}
			}
		}
}

static void check_plan(const struct plan *p, int world)
{
	struct rank_roles *rr = all_roles(p, world);

	check_against_emu(p, rr, world);
	check_groups(rr, world);
	for (int w = 0; w < world; w++)
		CHECK(rr[w].r[rr[w].n - 1].conf.pp == 1);
	free_roles(rr, world);
}

static void test_searched_plans(void)
{
	static struct plan p;
	const char *const jobs[] = { "examples/jobs/ppo-llama3-8b.json",
				     "examples/jobs/grpo-qwen-1.5b.json" };

	for (size_t j = 0; j < sizeof jobs / sizeof jobs[0]; j++) {
		setup(jobs[j], "examples/clusters/h100-8x8.json", 2);
		for (int shape = ANY; shape <= POOL_EACH; shape++)
			if (search_shaped(&v, NULL, (enum shape)shape, &p))
				check_plan(&p, cluster_gpus(&cl));
	}
}

/* The group's world ranks equal the list given (n of them). */
static bool group_is(const struct rank_role *ro, enum group_kind g, const int *want, int n)
{
	return ro->nmembers[g] == n && !memcmp(ro->members[g], want, (size_t)n * sizeof *want);
}

static void test_by_hand(void)
{
	static struct plan p;
	const char *tp2dp2[] = { "actor@training=tp2,pp1,dp2,zero", NULL };
	const char *pp2dp2[] = { "actor@training=tp1,pp2,dp2,zero", NULL };
	const char *tp4[] = { "actor@training=tp4,pp1,dp1,nozero", NULL };
	struct rank_roles *rr;

	setup("examples/jobs/grpo-tiny.json", "examples/clusters/h100-1x4.json", 0);

	CHECK(search_shaped(&v, tp2dp2, ONE_POOL, &p));
	check_plan(&p, 4);
	rr = all_roles(&p, 4);
	CHECK(group_is(&rr[0].r[0], GROUP_TP, (int[]){ 0, 1 }, 2));
	CHECK(group_is(&rr[0].r[0], GROUP_DP, (int[]){ 0, 2 }, 2));
	CHECK(group_is(&rr[0].r[0], GROUP_PP, (int[]){ 0 }, 1));
	CHECK(group_is(&rr[0].r[0], GROUP_EMBED, (int[]){ 0 }, 1));
	CHECK(rr[3].r[0].tp_rank == 1 && rr[3].r[0].dp_rank == 1 && rr[3].r[0].pp_rank == 0);
	CHECK(group_is(&rr[3].r[0], GROUP_TP, (int[]){ 2, 3 }, 2));
	CHECK(group_is(&rr[3].r[0], GROUP_DP, (int[]){ 1, 3 }, 2));
	CHECK(group_is(&rr[3].r[0], GROUP_POOL, (int[]){ 0, 1, 2, 3 }, 4));
	free_roles(rr, 4);

	CHECK(search_shaped(&v, pp2dp2, ONE_POOL, &p));
	check_plan(&p, 4);
	rr = all_roles(&p, 4);
	CHECK(rr[1].r[0].tp_rank == 0 && rr[1].r[0].dp_rank == 1 && rr[1].r[0].pp_rank == 0);
	CHECK(group_is(&rr[1].r[0], GROUP_PP, (int[]){ 1, 3 }, 2));
	CHECK(group_is(&rr[1].r[0], GROUP_DP, (int[]){ 0, 1 }, 2));
	CHECK(group_is(&rr[1].r[0], GROUP_EMBED, (int[]){ 1, 3 }, 2));
	CHECK(rr[2].r[0].dp_rank == 0 && rr[2].r[0].pp_rank == 1);
	CHECK(group_is(&rr[2].r[0], GROUP_PP, (int[]){ 0, 2 }, 2));
	CHECK(group_is(&rr[2].r[0], GROUP_DP, (int[]){ 2, 3 }, 2));
	CHECK(group_is(&rr[2].r[0], GROUP_TP, (int[]){ 2 }, 1));
	CHECK(rr[2].r[0].group_rank[GROUP_PP] == 1 && rr[2].r[0].group_rank[GROUP_EMBED] == 1);
	free_roles(rr, 4);

	CHECK(search_shaped(&v, tp4, ONE_POOL, &p));
	check_plan(&p, 4);
	rr = all_roles(&p, 4);
	CHECK(group_is(&rr[2].r[0], GROUP_TP, (int[]){ 0, 1, 2, 3 }, 4));
	CHECK(rr[2].r[0].group_rank[GROUP_TP] == 2);
	CHECK(group_is(&rr[2].r[0], GROUP_DP, (int[]){ 2 }, 1));
	free_roles(rr, 4);
}

/* With a pool per item, a rank of one pool holds nothing of the other's
 * layout: it is in none of its groups. */
static void test_pools_apart(void)
{
	static struct plan p;
	struct rank_roles *rr;
	int outside = 0;

	setup("examples/jobs/grpo-tiny.json", "examples/clusters/h100-1x4.json", 0);
	CHECK(search_shaped(&v, NULL, POOL_EACH, &p));
	check_plan(&p, 4);
	rr = all_roles(&p, 4);
	for (int w = 0; w < 4; w++) {
		CHECK(rr[w].r[0].member != rr[w].r[1].member);
		outside += !rr[w].r[0].member;
	}
	CHECK(outside > 0 && outside < 4);
	free_roles(rr, 4);
}

/* Middle stages of a deep pipeline are in no embedding group. */
static void test_middle_stages(void)
{
	static struct plan p;
	const char *pins[] = { "actor@training=tp2,pp4", NULL };
	struct rank_roles *rr;

	setup("examples/jobs/ppo-llama3-8b.json", "examples/clusters/h100-8x8.json", 2);
	CHECK(search_shaped(&v, pins, ANY, &p));
	CHECK(p.home[0].pp == 4);
	check_plan(&p, 16);
	rr = all_roles(&p, 16);
	for (int w = 0; w < 16; w++) {
		const struct rank_role *ro = &rr[w].r[0];

		if (ro->member)
			CHECK((ro->nmembers[GROUP_EMBED] == 2) ==
			      (ro->pp_rank == 0 || ro->pp_rank == 3));
	}
	free_roles(rr, 16);
}

/* A plan for 4 GPUs on 3 ranks: refused on each, with one message. */
static void test_too_few_ranks(void)
{
	static struct plan p;
	const char *tp4[] = { "actor@training=tp4,pp1,dp1,nozero", NULL };
	char first[sizeof ((struct err *)0)->msg] = "";

	setup("examples/jobs/grpo-tiny.json", "examples/clusters/h100-1x4.json", 0);
	CHECK(search_shaped(&v, tp4, ONE_POOL, &p));
	for (int w = 0; w < 3; w++) {
		struct rank_roles rr;
		struct err e = { 0 };

		CHECK(rank_roles_build(&v, &p, w, 3, &rr, &e) == NR_EINPUT);
		CHECK(strstr(e.msg, "on GPU 3, but 3 ranks run") != NULL);
		if (w == 0)
			snprintf(first, sizeof first, "%s", e.msg);
		CHECK(!strcmp(first, e.msg));
	}
}

int main(void)
{
	RUN(test_searched_plans);
	RUN(test_by_hand);
	RUN(test_pools_apart);
	RUN(test_middle_stages);
	RUN(test_too_few_ranks);
	return UNIT_END();
}
