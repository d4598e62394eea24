/* What a switch costs (plan/decide.h): the same plan costs nothing; new
 * groups on the same GPUs are split from the job's communicator, one per
 * kind on the busiest GPU; a lost or new GPU creates the job's
 * communicator anew; a new rollout TP re-creates the engines; store reads
 * go at the store's bandwidth; and the decision waits for payback. */
#include <string.h>

#include "plan/decide.h"
#include "run/charge.h"
#include "unitplan.h"

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
	cl.nodes = 2;
}

static const char *const tp2[] = { "actor@training=tp2,pp1", "critic@training=tp2,pp1",
				    "reference@inference=tp2,pp1", "reward@inference=tp2,pp1",
				    "actor@generation=tp2", NULL };
static const char *const tp4[] = { "actor@training=tp4,pp1", "critic@training=tp2,pp1",
				    "reference@inference=tp2,pp1", "reward@inference=tp2,pp1",
				    "actor@generation=tp2", NULL };
static const char *const gen4[] = { "actor@training=tp2,pp1", "critic@training=tp2,pp1",
				     "reference@inference=tp2,pp1", "reward@inference=tp2,pp1",
				     "actor@generation=tp4", NULL };

static void test_same_plan_costs_nothing(void)
{
	static struct plan a;
	struct switch_cost c;

	setup();
	CHECK(search_shaped(&v, tp2, ONE_POOL, &a));
	plan_switch_cost(&v, &a, &a, -1, 0, &c);
	CHECK(!c.world && c.groups == 0 && !c.engines);
	CHECK(c.move_s == 0 && c.total_s == 0);
}

/* The actor's TP changes on the same GPUs: its groups (TP, DP) are split
 * from the job's communicator, nothing else. */
static void test_new_groups_are_split(void)
{
	static struct plan a, b;
	struct switch_cost c;

	setup();
	CHECK(search_shaped(&v, tp2, ONE_POOL, &a));
	CHECK(search_shaped(&v, tp4, ONE_POOL, &b));
	plan_switch_cost(&v, &a, &b, -1, 0, &c);
	CHECK(!c.world && !c.engines);
	/* tp4·dp4 on 16 GPUs: a TP and a DP group on every GPU */
	CHECK(c.groups == 2);
	CHECK_NEAR(c.comm_s, 2 * k.comm_group_s, 1e-12);
	CHECK_NEAR(c.total_s, c.move_s + c.comm_s, 1e-12);
	/* the engines' TP changes: they are re-created */
	CHECK(search_shaped(&v, gen4, ONE_POOL, &b));
	plan_switch_cost(&v, &a, &b, -1, 0, &c);
	CHECK(c.engines && !c.world);
	CHECK(c.groups == 1); /* the engines' new TP group */
	CHECK_NEAR(c.engine_s, k.engine_init_s, 1e-12);
}

/* A lost GPU: the job's communicator anew, every group of the new plan
 * created from it. */
static void test_lost_gpu_rebuilds_the_communicator(void)
{
	static struct plan a, b;
	struct switch_cost c;

	setup();
	CHECK(search_shaped(&v, tp2, ONE_POOL, &a));
	cl.up[15] = false;
	CHECK(search_shaped(&v, NULL, ANY, &b));
	plan_evaluate(&v, &a);
	plan_switch_cost(&v, &a, &b, -1, 0, &c);
	CHECK(c.world);
	CHECK(c.groups >= 1);
	CHECK_NEAR(c.comm_s, k.comm_init_s + c.groups * k.comm_group_s, 1e-12);
}

/* Lost state comes from the store at its bandwidth, shared by all. */
static void test_store_reads_share_the_store(void)
{
	static struct plan a;
	struct switch_cost c;

	setup();
	CHECK(search_shaped(&v, tp2, ONE_POOL, &a));
	k.store_gbps = 20;
	plan_switch_cost(&v, &a, &a, 1.5, 100e9, &c);
	CHECK(c.graph);
	CHECK_NEAR(c.store_s, 100e9 / 20e9 - 1.5, 1e-12);
	CHECK_NEAR(c.total_s, 5.0, 1e-12);
	/* when moving takes longer anyway, the store adds nothing */
	plan_switch_cost(&v, &a, &a, 8, 100e9, &c);
	CHECK(c.store_s == 0 && c.total_s == 8);
}

/* The switch's fixed costs count: a gain that pays back only after the
 * run's end is not taken, whatever the bytes moved. */
static void test_payback_gates_the_switch(void)
{
	static struct plan a, b;
	struct decision d;

	setup();
	CHECK(search_shaped(&v, tp4, ONE_POOL, &a));
	CHECK(search_shaped(&v, NULL, ANY, &b));
	CHECK(b.step_time < a.step_time);
	plan_decide(&v, &a, &b, 1000000, 0, &d);
	CHECK(d.do_switch);
	CHECK(d.transition_s >= d.cost.comm_s + d.cost.engine_s);
	CHECK_NEAR(d.break_even_steps, d.transition_s / (a.step_time - b.step_time), 1e-12);
	plan_decide(&v, &a, &b, (long)d.break_even_steps, 0, &d);
	CHECK(!d.do_switch);
	CHECK(strstr(d.reason, "pays back after") != NULL);
	/* dearer communicators: longer payback */
	k.comm_group_s *= 10;
	{
		struct decision d2;
		plan_decide(&v, &a, &b, 1000000, 0, &d2);
		CHECK(d2.break_even_steps > d.break_even_steps);
	}
}

/* charge_decide decides at the graph's price, as plan_decide_with does
 * given charge_graph's. */
static void test_decide_at_the_graphs_price(void)
{
	static struct plan a, b;
	struct switch_cost sc;
	struct decision d1, d2;
	struct err e;

	setup();
	CHECK(search_shaped(&v, tp4, ONE_POOL, &a));
	CHECK(search_shaped(&v, NULL, ANY, &b));
	CHECK(charge_decide(&v, &a, &b, 1000000, 0.01, &d1, &e) == NR_OK);
	CHECK(charge_graph(&v, &a, &b, &sc, &e) == NR_OK);
	plan_decide_with(&v, &a, &b, 1000000, 0.01, &sc, &d2);
	CHECK(d1.do_switch == d2.do_switch && d1.transition_s == d2.transition_s);
	CHECK(d1.do_switch);
}

/* A price asked for again is remembered, not built again. */
static void test_prices_are_remembered(void)
{
	static struct plan a, b;
	struct switch_cost c1, c2;
	struct charge ch;
	struct err e;

	setup();
	CHECK(search_shaped(&v, tp2, ONE_POOL, &a));
	CHECK(search_shaped(&v, tp4, ONE_POOL, &b));
	charge_init(&ch, true);
	CHECK(charge_price(&ch, &v, &a, &b, &c1, &e) == NR_OK);
	CHECK(charge_price(&ch, &v, &a, &b, &c2, &e) == NR_OK);
	CHECK(ch.priced == 2 && ch.built == 1);
	CHECK(c1.graph && c1.total_s == c2.total_s);
	/* other conditions, another price */
	k.comm_group_s *= 2;
	CHECK(charge_price(&ch, &v, &a, &b, &c2, &e) == NR_OK);
	CHECK(ch.built == 2 && c2.total_s > c1.total_s);
	charge_free(&ch);
}

/* Many prices stay remembered: compare's oracle weighs the same pairs in
 * every stretch of a trace, between many others. */
static void test_many_prices_are_remembered(void)
{
	static struct plan a, b;
	struct switch_cost first, again;
	struct charge ch;
	struct err e;
	double group_s;

	setup();
	group_s = k.comm_group_s;
	CHECK(search_shaped(&v, tp2, ONE_POOL, &a));
	CHECK(search_shaped(&v, tp4, ONE_POOL, &b));
	charge_init(&ch, true);
	CHECK(charge_price(&ch, &v, &a, &b, &first, &e) == NR_OK);
	/* forty other conditions, each a price of its own */
	for (int i = 1; i <= 40; i++) {
		k.comm_group_s = group_s * (1 + i);
		CHECK(charge_price(&ch, &v, &a, &b, &again, &e) == NR_OK);
	}
	CHECK(ch.built == 41);
	k.comm_group_s = group_s;
	CHECK(charge_price(&ch, &v, &a, &b, &again, &e) == NR_OK);
	CHECK(ch.built == 41 && again.total_s == first.total_s);
	charge_free(&ch);
}

int main(void)
{
	RUN(test_same_plan_costs_nothing);
	RUN(test_new_groups_are_split);
	RUN(test_lost_gpu_rebuilds_the_communicator);
	RUN(test_store_reads_share_the_store);
	RUN(test_payback_gates_the_switch);
	RUN(test_decide_at_the_graphs_price);
	RUN(test_prices_are_remembered);
	RUN(test_many_prices_are_remembered);
	return UNIT_END();
}
