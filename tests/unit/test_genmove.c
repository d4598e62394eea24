/* The per-step move of the actor's weights into its generation engines:
 * the transition graph restricted to the actor's weights (home layout of
 * a plan → the engines of the same plan), walked by the executor over a
 * transport that delivers in memory.  For a TP2 → TP1, a TP1 → TP2 and a
 * PP2 → TP1 move: only the actor's home weights are read, only the
 * engines' weights written; the edges carry exactly the engines' weight
 * bytes (every replica a full copy, its norms on every TP rank), none from
 * the store; and every element the engines get is the one the training
 * layout held, bit for bit.  And the cost model's count of the move
 * (cost_move_parts, which lib/plan makes from the two layouts' shard
 * boundaries alone) is the graph's: as many pieces, as many bytes. */
#include "state/exec.h"
#include "unit.h"
#include "unitplan.h"

#include <stdlib.h>
#include <string.h>

static struct job job;
static struct cluster cl;
static struct coef k;
static const struct env v = { &job, &cl, &k };

/* The bytes of element idx of tensor t in any layout: a hash of both, so
 * that an element put in the wrong place, or in the wrong tensor, shows. */
static uint8_t elem_byte(int t, int64_t idx, int b)
{
	uint64_t x = ((uint64_t)t << 40 ^ (uint64_t)idx) * 0x9e3779b97f4a7c15ull;

	x ^= x >> 29;
	return (uint8_t)(x >> (8 * b));
}

/* Row-major index in the whole tensor of the n-th element of box bx. */
static int64_t global_index(const struct gtensor *gt, const struct box *bx, int64_t n)
{
	int64_t idx = 0, co[BOX_MAXDIM];

	for (int d = bx->ndim - 1; d >= 0; d--) {
		co[d] = bx->off[d] + n % bx->ext[d];
		n /= bx->ext[d];
	}
	for (int d = 0; d < bx->ndim; d++)
		idx = idx * gt->shape[d] + co[d];
	return idx;
}

struct probe {
	int actor;
	struct gtensor *tensors;
	int64_t read_bytes, taken_bytes;
	long pieces_taken, wrong_source, wrong_sink, wrong_elems;
};

static int fill(void *ctx, const struct exec_piece *p, void *dst, struct err *e)
{
	struct probe *pr = ctx;
	int64_t n = box_volume(&p->pc->box);
	uint8_t *o = dst;

	(void)e;
	if (p->u->item != 1 + pr->actor || p->kind != KIND_WEIGHT)
		pr->wrong_source++;
	for (int64_t i = 0; i < n; i++)
		for (int b = 0; b < p->elem_bytes; b++)
			o[i * p->elem_bytes + b] = elem_byte(p->pc->tensor,
				global_index(&pr->tensors[p->pc->tensor], &p->pc->box, i), b);
	pr->read_bytes += n * p->elem_bytes;
	return NR_OK;
}

static int take(void *ctx, const struct exec_piece *p, const void *data, struct err *e)
{
	struct probe *pr = ctx;
	int64_t n = box_volume(&p->pc->box);
	const uint8_t *in = data;

	(void)e;
	if (p->u->item != ITEM_GEN || p->kind != KIND_WEIGHT || p->u->model != pr->actor)
		pr->wrong_sink++;
	for (int64_t i = 0; i < n; i++)
		for (int b = 0; b < p->elem_bytes; b++)
			if (in[i * p->elem_bytes + b] != elem_byte(p->pc->tensor,
					global_index(&pr->tensors[p->pc->tensor], &p->pc->box, i), b)) {
				pr->wrong_elems++;
				break;
			}
	pr->taken_bytes += n * p->elem_bytes;
	pr->pieces_taken += n > 0;
	return NR_OK;
}

/* Every message of a round delivered by a copy: one process plays every
 * rank. */
static int round_mem(void *ctx, const struct exec_msg *m, int n, struct err *e)
{
	(void)ctx;
	(void)e;
	for (int i = 0; i < n; i++)
		memcpy(m[i].recv, m[i].send, m[i].bytes);
	return NR_OK;
}

/* The bytes a replica of tp ranks holds of the actor's weights, from its
 * architecture: every tensor once, the norms (1-D, whole on every TP rank
 * as Megatron keeps them) tp times. */
static int64_t replica_bytes(const struct gtensor *t, int nt, int eb, int tp)
{
	int64_t sum = 0;

	for (int i = 0; i < nt; i++) {
		int64_t vol = 1;

		for (int d = 0; d < t[i].ndim; d++)
			vol *= t[i].shape[d];
		sum += vol * eb * (t[i].ndim == 1 ? tp : 1);
	}
	return sum;
}

/* The pieces the graph moves (each a bit of an edge's mask: a box of one
 * piece of the engines' layout) and their bytes. */
static void graph_count(const struct tgraph *g, long *pieces, int64_t *bytes)
{
	*pieces = 0;
	*bytes = 0;
	for (int i = 0; i < g->nedges; i++)
		if (!g->edges[i].staging) {
			for (uint64_t m = g->edges[i].mask; m; m &= m - 1)
				++*pieces;
			*bytes += g->edges[i].bytes;
		}
}

/* The cost model counts what the graph of plan p moves. */
static void check_count(const struct plan *p, const struct tgraph *g)
{
	int actor = job_actor(&job), gen = -1, home = -1;
	struct move_parts m;
	int64_t bytes;
	long pieces;

	for (int i = 0; i < p->nms; i++)
		if (p->ms[i].model == actor && p->ms[i].stage == STAGE_GEN)
			gen = p->ms[i].pool;
		else if (p->ms[i].model == actor && p->ms[i].stage == STAGE_TRAIN)
			home = p->ms[i].pool;
	graph_count(g, &pieces, &bytes);
	cost_move_parts(&v, &job.models[actor].arch, &p->home[actor], &p->gen, gen == home, &m);
	printf("#   graph: %ld pieces, %lld bytes; cost model: %.0f pieces, %.0f bytes\n", pieces,
	       (long long)bytes, m.pieces, m.bytes);
	CHECK(m.pieces == (double)pieces);
	CHECK(m.bytes == (double)bytes);
	CHECK(m.crit_pieces > 0 && m.crit_pieces <= m.pieces);
}

/* The plan with the actor training as train and generating as gen on
 * one pool of the 4 GPUs (an H100 node), its weights moved into the engines. */
static void check_move(const char *train, const char *gen, int gen_tp, int gen_dp)
{
	const char *const pins[] = { train, gen, NULL };
	struct tg_select sel = tg_select_gen_weights(&job);
	struct probe pr = { .actor = job_actor(&job) };
	const struct arch *ar = &job.models[pr.actor].arch;
	int mine[4] = { 1, 1, 1, 1 }, nt = 0;
	struct exec_xport x = { .nranks = 4, .mine = mine, .gpu_is_rank = true,
				.round = round_mem };
	struct exec_source src = { .fill = fill, .ctx = &pr };
	struct exec_sink sink = { .take = take, .ctx = &pr };
	struct exec_stats st;
	struct tgraph g;
	struct plan p;
	struct err e = { 0 };
	int64_t want, edge_bytes = 0;
	int eb = layout_kind_bytes(ar, KIND_WEIGHT);

	printf("# %s → %s\n", train, gen);
	if (!search_shaped(&v, pins, ONE_POOL, &p)) {
		CHECK(!"a plan");
		return;
	}
	CHECK(layout_tensors(ar, &pr.tensors, &nt, &e) == NR_OK);
	want = (int64_t)gen_dp * replica_bytes(pr.tensors, nt, eb, gen_tp);

	CHECK(tgraph_build_select(&v, &p, &p, &sel, &g, &e) == NR_OK);
	for (int i = 0; i < g.nedges; i++) {
		const struct tg_edge *ed = &g.edges[i];

		CHECK(ed->model == pr.actor && ed->kind == KIND_WEIGHT && ed->src >= 0);
		if (!ed->staging)
			edge_bytes += ed->bytes;
	}
	for (int l = 0; l < g.nlists; l++)
		CHECK(g.lists[l].l->kind == KIND_WEIGHT &&
		      g.lists[l].u->item == (l < g.na ? 1 + pr.actor : ITEM_GEN));
	printf("#   %d edges, %lld bytes; the engines' weights %lld bytes\n", g.nedges,
	       (long long)edge_bytes, (long long)want);
	CHECK(edge_bytes == want);
	CHECK(g.kept_bytes == 0);
	check_count(&p, &g);
	tgraph_free(&g);

	CHECK(exec_walk_select(&v, &p, &p, &sel, &src, &sink, &x, &st, &e) == NR_OK);
	if (e.code)
		printf("#   %s\n", e.msg);
	CHECK(pr.wrong_source == 0 && pr.wrong_sink == 0);
	CHECK(pr.wrong_elems == 0);
	CHECK(pr.taken_bytes == want);
	CHECK(pr.pieces_taken > 0 && st.pieces_taken == pr.pieces_taken);
	CHECK(st.bytes_sent <= (uint64_t)want);
	free(pr.tensors);
}

static void test_tp2_to_tp1(void)
{
	check_move("actor@training=tp2,pp1,dp2", "actor@generation=tp1,dp4", 1, 4);
}

static void test_tp1_to_tp2(void)
{
	check_move("actor@training=tp1,pp1,dp4", "actor@generation=tp2,dp2", 2, 2);
}

static void test_pp2_to_tp1(void)
{
	check_move("actor@training=tp1,pp2,dp2", "actor@generation=tp1,dp4", 1, 4);
}

/* The count alone, for more pairs of layouts: TP coarser and finer than
 * the engines', pipeline stages, the vocabulary's padding leaving a TP
 * rank's piece empty (tp 4 pads 258 rows to 512), ZeRO-3 cutting every
 * training shard into DP blocks (the engines' layout its own too), and the engines on a pool of their own
 * (every piece a message). */
static void count_only(const char *train, const char *gen, enum shape shape)
{
	const char *const pins[] = { train, gen, NULL };
	struct tg_select sel = tg_select_gen_weights(&job);
	struct tgraph g;
	struct plan p;
	struct err e = { 0 };

	printf("# %s → %s%s\n", train, gen, shape == ONE_POOL ? "" : ", pools apart");
	if (!search_shaped(&v, pins, shape, &p)) {
		CHECK(!"a plan");
		return;
	}
	CHECK(tgraph_build_select(&v, &p, &p, &sel, &g, &e) == NR_OK);
	check_count(&p, &g);
	tgraph_free(&g);
}

static void test_count_pairs(void)
{
	count_only("actor@training=tp2,pp2,dp1", "actor@generation=tp1,dp4", ONE_POOL);
	count_only("actor@training=tp4,pp1,dp1", "actor@generation=tp2,dp2", ONE_POOL);
	count_only("actor@training=tp4,pp1,dp1", "actor@generation=tp1,dp4", ONE_POOL);
	count_only("actor@training=tp2,pp2,dp1", "actor@generation=tp4,dp1", ONE_POOL);
	count_only("actor@training=tp1,pp2,dp2", "actor@generation=tp2,dp2", ONE_POOL);
	count_only("actor@training=tp2,pp1,dp2,zero3", "actor@generation=tp1,dp4", ONE_POOL);
	count_only("actor@training=tp1,pp1,dp4,zero3", "actor@generation=tp2,dp2", ONE_POOL);
	/* FSDP laid out as the engines on their GPUs: still a move, each GPU
	 * taking the other blocks of every weight */
	count_only("actor@training=tp1,pp1,dp4,zero3", "actor@generation=tp1,dp4", ONE_POOL);
}

/* Pools apart need more GPUs than the node of the rest: on 8 nodes of 8,
 * placed on one node (engines on a node that holds nothing of a piece
 * take it whole from another engine there, which the model does not
 * count). */
static void test_count_pools_apart(void)
{
	load_env(&job, &cl, &k, "examples/jobs/ppo-repeat-tiny.json",
		 "examples/clusters/h100-8x8.json", 0);
	count_only("actor@training=tp2,pp1,dp2", "actor@generation=tp1,dp4", POOL_EACH);
	count_only("actor@training=tp4,pp1,dp1", "actor@generation=tp1,dp2", POOL_EACH);
	count_only("actor@training=tp1,pp2,dp2", "actor@generation=tp2,dp2", POOL_EACH);
}

/* Selecting everything is the whole switch, as before. */
static void test_select_all_is_whole(void)
{
	const char *const pins[] = { "actor@training=tp2,pp1,dp2", NULL };
	const char *const pins_b[] = { "actor@training=tp1,pp2,dp2", NULL };
	struct plan a, b;
	struct tgraph g1, g2;
	struct err e = { 0 };

	if (!search_shaped(&v, pins, ONE_POOL, &a) || !search_shaped(&v, pins_b, ONE_POOL, &b)) {
		CHECK(!"two plans");
		return;
	}
	CHECK(tgraph_build(&v, &a, &b, &g1, &e) == NR_OK);
	CHECK(tgraph_build_select(&v, &a, &b, &tg_select_all, &g2, &e) == NR_OK);
	CHECK(g1.nedges == g2.nedges && g1.nlists == g2.nlists && g1.nrounds == g2.nrounds);
	tgraph_free(&g1);
	tgraph_free(&g2);
}

int main(void)
{
	load_env(&job, &cl, &k, "examples/jobs/ppo-repeat-tiny.json",
		 "examples/clusters/h100-1x4.json", 0);
	RUN(test_tp2_to_tp1);
	RUN(test_tp1_to_tp2);
	RUN(test_pp2_to_tp1);
	RUN(test_count_pairs);
	RUN(test_select_all_is_whole);
	RUN(test_count_pools_apart);
	return UNIT_END();
}
