/* The Megatron layout: for many (tp, pp, dp) the owned pieces of all ranks
 * tile every global tensor exactly once, rank buffers are laid out without
 * gaps, each piece maps to Megatron's rank-local tensor as the reference
 * says (fused QKV by KV group, fc1 as [gate_r; up_r], padded vocabulary),
 * bad splits are refused by name, and a TP/PP/DP change carried out with
 * box_intersect + box_copy alone reproduces every tensor bit for bit. */
#include "state/layout.h"
#include "unit.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static struct arch arch_of(int layers, int hidden, int heads, int kv, int ffn, int vocab,
			   bool tied)
{
	struct arch a = {
		.layers = layers, .hidden = hidden, .heads = heads, .kv_heads = kv,
		.ffn = ffn, .vocab = vocab, .tied = tied, .dtype_bytes = 2, .dtype = "bf16",
	};

	return a;
}

/* Llama-3-8B's proportions, shrunk: GQA with 4 query heads per group. */
static struct arch llama_small(void)
{
	return arch_of(4, 64, 8, 2, 176, 1000, false);
}

/* Qwen3's proportions, shrunk: heads of 16 where hidden / heads is 8,
 * per-head q/k norms, no biases, tied embeddings. */
static struct arch qwen3_small(void)
{
	struct arch q = arch_of(4, 64, 8, 2, 176, 1000, true);

	q.head_dim = 16;
	q.qk_norm = true;
	return q;
}

struct rank {
	int tp, pp, dp;
	struct piece *p;
	size_t n;
};

struct cfg {
	struct arch a;
	int tp, pp, dp;
	bool dist_opt;
	const int *stages;
};

/* All ranks of a layout for one kind, tp fastest. */
static struct rank *collect(const struct layout *lo, enum state_kind kind, int *nr)
{
	int n = lo->tp * lo->pp * lo->dp, i = 0;
	struct rank *r = calloc((size_t)n, sizeof *r);
	struct err e = { 0 };

	for (int d = 0; d < lo->dp; d++)
		for (int p = 0; p < lo->pp; p++)
			for (int t = 0; t < lo->tp; t++, i++) {
				r[i].tp = t;
				r[i].pp = p;
				r[i].dp = d;
				CHECK(layout_pieces(lo, kind, t, p, d, &r[i].p, &r[i].n, &e) == NR_OK);
			}
	*nr = n;
	return r;
}

static void release(struct rank *r, int n)
{
	for (int i = 0; i < n; i++)
		free(r[i].p);
	free(r);
}

static struct box whole_box(const struct gtensor *t)
{
	struct box b = { .ndim = t->ndim };

	for (int d = 0; d < t->ndim; d++)
		b.ext[d] = t->shape[d];
	return b;
}

static const struct piece *find(const struct rank *r, int tensor)
{
	for (size_t i = 0; i < r->n; i++)
		if (r->p[i].tensor == tensor)
			return &r->p[i];
	return NULL;
}

/* Every rank's buffer: pieces back to back from 0, in bounds. */
static void check_buffers(const struct layout *lo, const struct rank *r, int nr)
{
	for (int i = 0; i < nr; i++) {
		int64_t at = 0;

		for (size_t k = 0; k < r[i].n; k++) {
			const struct piece *p = &r[i].p[k];
			struct box w;

			CHECK(p->tensor >= 0 && p->tensor < lo->ntensors);
			if (p->tensor < 0 || p->tensor >= lo->ntensors)
				continue;
			w = whole_box(&lo->tensors[p->tensor]);
			CHECK(p->local_off == at);
			CHECK(p->local_len >= box_volume(&p->box) && p->local_len > 0);
			CHECK(p->box.ndim == w.ndim && box_contains(&w, &p->box));
			at += p->local_len;
		}
	}
}

/* Over all ranks, the pieces that are not copies tile each tensor once. */
static void check_tiling(const struct layout *lo, const struct rank *r, int nr)
{
	const struct piece **own = malloc((size_t)nr * sizeof *own);

	for (int t = 0; t < lo->ntensors; t++) {
		struct box w = whole_box(&lo->tensors[t]);
		int64_t vol = 0;
		int n = 0;

		/* A rank holds at most one piece of a tensor. */
		for (int i = 0; i < nr; i++)
			for (size_t k = 0; k < r[i].n; k++)
				if (r[i].p[k].tensor == t && !r[i].p[k].copy) {
					CHECK(n < nr);
					if (n < nr)
						own[n++] = &r[i].p[k];
					vol += box_volume(&r[i].p[k].box);
				}
		CHECK(vol == box_volume(&w));
		for (int i = 0; i < n; i++)
			for (int j = i + 1; j < n; j++)
				CHECK(!box_intersect(&own[i]->box, &own[j]->box, NULL));
	}
	free(own);
}

/* Unsharded: DP ranks > 0 hold copies of DP rank 0's pieces, at the same
 * offsets. */
static void check_dp_replicas(const struct layout *lo, const struct rank *r)
{
	int per = lo->tp * lo->pp;

	for (int i = 0; i < per; i++)
		for (int d = 1; d < lo->dp; d++) {
			const struct rank *r0 = &r[i], *rd = &r[d * per + i];

			CHECK(rd->n == r0->n);
			for (size_t k = 0; k < r0->n && k < rd->n; k++) {
				CHECK(rd->p[k].copy && rd->p[k].tensor == r0->p[k].tensor);
				CHECK(box_eq(&rd->p[k].box, &r0->p[k].box));
				CHECK(rd->p[k].local_off == r0->p[k].local_off);
			}
		}
}

/* Sharded: the DP ranks' blocks of each TP piece are disjoint, lie in it,
 * give it back whole, and split its reserved length (padding included). */
static void check_dp_blocks(const struct layout *lo, const struct rank *r)
{
	int per = lo->tp * lo->pp;

	for (int i = 0; i < per; i++) {
		struct piece *w;
		size_t nw;
		struct err e = { 0 };

		CHECK(layout_pieces(lo, KIND_WEIGHT, r[i].tp, r[i].pp, 0, &w, &nw, &e) == NR_OK);
		for (size_t k = 0; k < nw; k++) {
			int64_t vol = 0, len = 0;

			for (int d = 0; d < lo->dp; d++) {
				const struct piece *p = find(&r[d * per + i], w[k].tensor);

				if (!p)
					continue;
				CHECK(box_contains(&w[k].box, &p->box) || box_volume(&p->box) == 0);
				CHECK(p->copy == w[k].copy);
				/* The padding tail follows the last block, as in the TP tensor. */
				CHECK(d == lo->dp - 1 || p->local_len == box_volume(&p->box));
				vol += box_volume(&p->box);
				len += p->local_len;
				for (int d2 = d + 1; d2 < lo->dp; d2++) {
					const struct piece *q = find(&r[d2 * per + i], w[k].tensor);

					CHECK(!q || !box_intersect(&p->box, &q->box, NULL));
				}
			}
			CHECK(vol == box_volume(&w[k].box));
			CHECK(len == w[k].local_len);
		}
		free(w);
	}
}

/* A norm is held whole by every TP rank (whole per DP rank too unless
 * sharded) and owned by TP rank 0; a tied embedding's copy on the last
 * stage matches the first stage's piece of the same TP and DP rank. */
static void check_copies(const struct layout *lo, const struct rank *r, int nr, bool sharded)
{
	for (int i = 0; i < nr; i++)
		for (size_t k = 0; k < r[i].n; k++) {
			const struct piece *p = &r[i].p[k];
			const struct gtensor *t = &lo->tensors[p->tensor];
			struct box w = whole_box(t);

			if (t->ndim == 1 && !sharded) {
				CHECK(box_eq(&p->box, &w));
				CHECK(p->copy == (r[i].tp > 0 || r[i].dp > 0));
			}
			if (t->ndim == 1 && sharded)
				CHECK(p->copy == (r[i].tp > 0));
			if (p->tensor == 0 && r[i].pp == lo->pp - 1 && lo->pp > 1) {
				const struct piece *first = find(&r[i - (lo->pp - 1) * lo->tp], 0);

				CHECK(lo->arch.tied && p->copy);
				CHECK(first && box_eq(&first->box, &p->box));
				CHECK(first && first->local_len == p->local_len);
			}
		}
}

static void check_cfg(const struct cfg *c)
{
	struct layout lo;
	struct err e = { 0 };
	int rc = layout_init(&lo, &c->a, c->tp, c->pp, c->dp, c->dist_opt, c->stages, &e);

	CHECK(rc == NR_OK);
	if (rc) {
		printf("#   tp %d pp %d dp %d: %s\n", c->tp, c->pp, c->dp, e.msg);
		return;
	}
	for (int kind = 0; kind < NKINDS; kind++) {
		int nr, bad = unit_failed;
		struct rank *r = collect(&lo, (enum state_kind)kind, &nr);

		bool sharded = c->dist_opt && kind != KIND_WEIGHT && c->dp > 1;

		unit_failed = 0;
		check_buffers(&lo, r, nr);
		check_tiling(&lo, r, nr);
		if (sharded)
			check_dp_blocks(&lo, r);
		else
			check_dp_replicas(&lo, r);
		check_copies(&lo, r, nr, sharded);
		if (unit_failed)
			printf("#   in tp %d pp %d dp %d%s, kind %s\n", c->tp, c->pp, c->dp,
			       c->dist_opt ? " (distributed optimizer)" : "", state_kind_names[kind]);
		unit_failed |= bad;
		release(r, nr);
	}
	layout_free(&lo);
}

static const int stages_121[] = { 1, 2, 1 }, stages_04[] = { 0, 4 }, stages_231[] = { 2, 3, 1 };

static void test_tiles_llama_small(void)
{
	const struct cfg cfgs[] = {
		{ llama_small(), 1, 1, 1, false, NULL },
		{ llama_small(), 2, 1, 1, false, NULL },
		{ llama_small(), 2, 2, 1, false, NULL },
		{ llama_small(), 2, 4, 3, true, NULL },
		{ llama_small(), 1, 4, 2, true, NULL },
		{ llama_small(), 2, 2, 2, false, NULL },
		{ llama_small(), 2, 3, 1, false, stages_121 },
		{ llama_small(), 2, 2, 4, true, stages_04 },
	};

	for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++)
		check_cfg(&cfgs[i]);
}

static void test_tiles_gqa_tied(void)
{
	struct arch a = arch_of(6, 96, 12, 4, 256, 5003, true);
	const struct cfg cfgs[] = {
		{ a, 4, 2, 1, false, NULL }, { a, 4, 3, 2, true, NULL }, { a, 2, 1, 3, true, NULL },
		{ a, 1, 2, 1, false, NULL }, { a, 4, 3, 1, false, stages_231 },
	};

	for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++)
		check_cfg(&cfgs[i]);
}

/* MHA with a vocabulary so small that TP ranks hold only padding, MQA,
 * more DP ranks than some tensors have elements in any dimension, and
 * Qwen2's biases, a critic's score head and Qwen3's head_dim and q/k
 * norms under TP, PP and DP. */
static void test_tiles_small_corners(void)
{
	struct arch mha = arch_of(2, 32, 4, 4, 64, 300, true);
	struct arch mqa = arch_of(2, 32, 4, 1, 64, 100, false);
	struct arch qwen = arch_of(4, 48, 12, 2, 64, 301, true), critic = qwen;
	const struct cfg *c;

	qwen.attn_bias = true;
	critic.tied = false;
	critic.score_head = true;
	{
		const struct cfg cfgs[] = {
			{ mha, 4, 2, 2, true, NULL }, { mha, 4, 1, 1, false, NULL },
			{ mha, 1, 1, 40, true, NULL }, { mqa, 1, 2, 5, true, NULL },
			{ qwen, 2, 2, 2, true, NULL }, { qwen, 2, 4, 1, false, NULL },
			{ critic, 2, 2, 3, true, NULL }, { critic, 1, 1, 2, false, NULL },
			{ qwen3_small(), 2, 2, 2, true, NULL },
			{ qwen3_small(), 2, 4, 1, false, NULL },
			{ qwen3_small(), 1, 2, 3, true, NULL },
		};

		for (c = cfgs; c < cfgs + sizeof cfgs / sizeof cfgs[0]; c++)
			check_cfg(c);
	}
}

static void test_tensor_list(void)
{
	struct arch a = llama_small(), t = a;
	struct gtensor *g;
	int n;
	struct err e = { 0 };

	CHECK(layout_tensors(&a, &g, &n, &e) == NR_OK);
	CHECK(n == 2 + 6 * 4 + 1);
	CHECK(strcmp(g[0].name, "embedding.word_embeddings.weight") == 0);
	CHECK(g[0].shape[0] == 1000 && g[0].shape[1] == 64);
	CHECK(strcmp(g[layout_tensor_index(&a, 3, LT_QKV)].name,
		     "decoder.layers.3.self_attention.linear_qkv.weight") == 0);
	CHECK(g[layout_tensor_index(&a, 3, LT_QKV)].layer == 3);
	/* 2 groups × (4 q + k + v) heads of 8 rows × 64: Megatron's
	 * (nh + 2 ng) d = 96 rows, reshaped by group. */
	CHECK(g[layout_tensor_index(&a, 0, LT_QKV)].shape[0] == 2);
	CHECK(g[layout_tensor_index(&a, 0, LT_QKV)].shape[1] == 48);
	CHECK(g[layout_tensor_index(&a, 0, LT_FC1)].shape[0] == 2);
	CHECK(g[layout_tensor_index(&a, 0, LT_FC1)].shape[1] == 176);
	CHECK(strcmp(g[layout_tensor_index(&a, 0, LT_FC2)].name,
		     "decoder.layers.0.mlp.linear_fc2.weight") == 0);
	CHECK(strcmp(g[layout_final_norm_index(&a)].name, "decoder.final_layernorm.weight") == 0);
	CHECK(strcmp(g[layout_output_index(&a)].name, "output_layer.weight") == 0);
	free(g);

	t.tied = true;
	CHECK(layout_tensors(&t, &g, &n, &e) == NR_OK);
	CHECK(n == 2 + 6 * 4 && layout_output_index(&t) == -1);
	free(g);

	/* Qwen2's q/k/v biases: a seventh tensor per layer, after the fused
	 * weight, shaped like it without the hidden dimension */
	t = a;
	t.attn_bias = true;
	CHECK(layout_tensors(&t, &g, &n, &e) == NR_OK);
	CHECK(n == 2 + 7 * 4 + 1 && layout_layer_tensors(&t) == 7);
	CHECK(layout_tensor_index(&t, 1, LT_QKV_BIAS) == 1 + 7 + 2);
	CHECK(layout_tensor_index(&a, 1, LT_QKV_BIAS) == -1);
	CHECK(layout_tensor_index(&t, 1, LT_PROJ) == layout_tensor_index(&t, 1, LT_QKV_BIAS) + 1);
	CHECK(strcmp(g[layout_tensor_index(&t, 1, LT_QKV_BIAS)].name,
		     "decoder.layers.1.self_attention.linear_qkv.bias") == 0);
	CHECK(g[layout_tensor_index(&t, 1, LT_QKV_BIAS)].ndim == 2);
	CHECK(g[layout_tensor_index(&t, 1, LT_QKV_BIAS)].shape[0] == 2);
	CHECK(g[layout_tensor_index(&t, 1, LT_QKV_BIAS)].shape[1] == 48);
	free(g);

	/* Qwen3: heads of head_dim 16, not hidden / heads = 8, and q/k norms
	 * [16] after the fused weight (and any bias) */
	t = qwen3_small();
	CHECK(layout_tensors(&t, &g, &n, &e) == NR_OK);
	CHECK(n == 2 + 8 * 4 && layout_layer_tensors(&t) == 8);
	CHECK(layout_tensor_index(&t, 1, LT_Q_NORM) == 1 + 8 + 2);
	CHECK(layout_tensor_index(&t, 1, LT_K_NORM) == 1 + 8 + 3);
	CHECK(layout_tensor_index(&t, 1, LT_PROJ) == 1 + 8 + 4);
	CHECK(layout_tensor_index(&a, 1, LT_Q_NORM) == -1);
	CHECK(strcmp(g[layout_tensor_index(&t, 1, LT_Q_NORM)].name,
		     "decoder.layers.1.self_attention.q_layernorm.weight") == 0);
	CHECK(strcmp(g[layout_tensor_index(&t, 1, LT_K_NORM)].name,
		     "decoder.layers.1.self_attention.k_layernorm.weight") == 0);
	CHECK(g[layout_tensor_index(&t, 1, LT_K_NORM)].ndim == 1);
	CHECK(g[layout_tensor_index(&t, 1, LT_K_NORM)].shape[0] == 16);
	/* 2 groups × (4 q + k + v) heads of 16 rows; linear_proj [64, 8 · 16] */
	CHECK(g[layout_tensor_index(&t, 0, LT_QKV)].shape[1] == 96);
	CHECK(g[layout_tensor_index(&t, 0, LT_PROJ)].shape[0] == 64);
	CHECK(g[layout_tensor_index(&t, 0, LT_PROJ)].shape[1] == 128);
	free(g);
	t.attn_bias = true;
	CHECK(layout_tensor_index(&t, 0, LT_Q_NORM) == layout_tensor_index(&t, 0, LT_QKV_BIAS) + 1);
	CHECK(layout_layer_tensors(&t) == 9);
	/* heads need not divide hidden once head_dim is given */
	t = arch_of(2, 60, 8, 2, 64, 100, false);
	CHECK(layout_tensors(&t, &g, &n, &e) == NR_EINPUT);
	t.head_dim = 16;
	CHECK(layout_tensors(&t, &g, &n, &e) == NR_OK);
	free(g);

	/* a critic's score head: [1, h] in the output layer's place */
	t = a;
	t.score_head = true;
	CHECK(layout_tensors(&t, &g, &n, &e) == NR_OK);
	CHECK(n == 2 + 6 * 4 + 1);
	CHECK(strcmp(g[layout_output_index(&t)].name, "score.weight") == 0);
	CHECK(g[layout_output_index(&t)].shape[0] == 1 && g[layout_output_index(&t)].shape[1] == 64);
	free(g);
}

/* Megatron's rank-local tensors, row by row, against the pieces. */
static void check_megatron_rows(struct arch a, int tp)
{
	int64_t h = a.hidden, ng = a.kv_heads, d = arch_head_dim(&a), q = a.heads / a.kv_heads;
	int64_t f = a.ffn, grp = (q + 2) * d, rows = (a.heads + 2 * ng) * d / tp;
	int hf_q[128] = { 0 }, hf_k[32] = { 0 }, hf_v[32] = { 0 }, gate[176] = { 0 }, up[176] = { 0 };
	struct layout lo;
	struct err e = { 0 };

	CHECK(layout_init(&lo, &a, tp, 1, 1, false, NULL, &e) == NR_OK);
	for (int t = 0; t < tp; t++) {
		struct piece *p;
		size_t n;
		const struct piece *qkv = NULL, *fc1 = NULL, *emb = NULL, *proj = NULL, *fc2 = NULL;
		int norms = 0;

		CHECK(layout_pieces(&lo, KIND_WEIGHT, t, 0, 0, &p, &n, &e) == NR_OK);
		for (size_t k = 0; k < n; k++) {
			/* q/k norms [d] whole on every rank, owned by rank 0 */
			if (p[k].tensor == layout_tensor_index(&a, 0, LT_Q_NORM) ||
			    p[k].tensor == layout_tensor_index(&a, 0, LT_K_NORM)) {
				CHECK(p[k].local_len == d && p[k].box.ext[0] == d);
				CHECK(p[k].copy == (t > 0));
				norms++;
			}
			if (p[k].tensor == layout_tensor_index(&a, 0, LT_QKV))
				qkv = &p[k];
			if (p[k].tensor == layout_tensor_index(&a, 0, LT_FC1))
				fc1 = &p[k];
			if (p[k].tensor == layout_tensor_index(&a, 0, LT_PROJ))
				proj = &p[k];
			if (p[k].tensor == layout_tensor_index(&a, 0, LT_FC2))
				fc2 = &p[k];
			if (p[k].tensor == 0)
				emb = &p[k];
		}
		CHECK(qkv && fc1 && emb && proj && fc2);
		CHECK(norms == (a.qk_norm ? 2 : 0));
		if (!qkv || !fc1 || !emb || !proj || !fc2)
			break;
		/* The local tensors' sizes are Megatron's. */
		CHECK(qkv->local_len == rows * h);
		CHECK(fc1->local_len == 2 * f / tp * h);
		CHECK(proj->local_len == h * a.heads * d / tp &&
		      proj->box.off[1] == t * a.heads * d / tp);
		CHECK(fc2->local_len == h * f / tp && fc2->box.off[1] == t * f / tp);
		CHECK(emb->local_len == lo.vocab_padded / tp * h);

		/* linear_qkv local row j is fused row t·rows + j: group R / grp, row
		 * R % grp inside it; q rows of the group, then k, then v. */
		for (int64_t j = 0; j < rows; j++) {
			int64_t R = t * rows + j, g = R / grp, w = R % grp;

			CHECK(qkv->box.off[0] + j / qkv->box.ext[1] == g);
			CHECK(j % qkv->box.ext[1] == w);
			if (w < q * d)
				hf_q[g * q * d + w]++;
			else if (w < (q + 1) * d)
				hf_k[g * d + w - q * d]++;
			else
				hf_v[g * d + w - (q + 1) * d]++;
		}
		/* linear_fc1 local row j: gate row t F/tp + j, then up rows. */
		for (int64_t j = 0; j < 2 * f / tp; j++) {
			int64_t which = j / fc1->box.ext[1], row = fc1->box.off[1] + j % fc1->box.ext[1];

			CHECK(fc1->box.off[0] == 0 && fc1->box.ext[0] == 2);
			CHECK(which == (j < f / tp ? 0 : 1));
			CHECK(row == t * f / tp + (j < f / tp ? j : j - f / tp));
			(which ? up : gate)[row]++;
		}
		/* Embedding local row j: padded row t Vp/tp + j, real below V. */
		for (int64_t j = 0; j < lo.vocab_padded / tp; j++) {
			int64_t row = t * (lo.vocab_padded / tp) + j;

			CHECK((j < emb->box.ext[0]) == (row < a.vocab));
			if (j < emb->box.ext[0])
				CHECK(emb->box.off[0] + j == row);
		}
		free(p);
	}
	for (int i = 0; i < a.heads * d; i++)
		CHECK(hf_q[i] == 1);
	for (int i = 0; i < ng * d; i++)
		CHECK(hf_k[i] == 1 && hf_v[i] == 1);
	for (int i = 0; i < 176; i++)
		CHECK(gate[i] == 1 && up[i] == 1);
	layout_free(&lo);
}

static void test_megatron_rows(void)
{
	check_megatron_rows(llama_small(), 1);
	check_megatron_rows(llama_small(), 2);
	check_megatron_rows(qwen3_small(), 1);
	check_megatron_rows(qwen3_small(), 2);
}

static void test_vocab_padding(void)
{
	struct arch a = arch_of(2, 32, 4, 4, 64, 300, false);
	struct layout lo;
	struct err e = { 0 };
	struct piece *p;
	size_t n;

	CHECK(layout_init(&lo, &a, 4, 1, 1, false, NULL, &e) == NR_OK);
	CHECK(lo.vocab_padded == 512);
	/* Rank 2 holds rows 256..299 and 84 padding rows; rank 3 only padding. */
	CHECK(layout_pieces(&lo, KIND_WEIGHT, 2, 0, 0, &p, &n, &e) == NR_OK);
	CHECK(n > 0 && p[0].tensor == 0 && p[0].box.off[0] == 256 && p[0].box.ext[0] == 44);
	CHECK(n > 0 && p[0].local_len == 128 * 32);
	free(p);
	CHECK(layout_pieces(&lo, KIND_WEIGHT, 3, 0, 0, &p, &n, &e) == NR_OK);
	CHECK(n > 0 && p[0].tensor == 0 && box_volume(&p[0].box) == 0 && p[0].local_len == 128 * 32);
	free(p);
	layout_free(&lo);
}

static void test_rejects(void)
{
	struct arch a = llama_small(), odd_ffn = arch_of(2, 32, 4, 4, 90, 100, false);
	struct arch bad = arch_of(2, 32, 6, 4, 64, 100, false);
	static const int short_stages[] = { 1, 1 }, neg[] = { 5, -1 };
	struct layout lo;
	struct err e = { 0 };
	struct piece *p;
	size_t n;

	CHECK(layout_init(&lo, &a, 4, 1, 1, false, NULL, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "tensor 'decoder.layers.0.self_attention.linear_qkv.weight' "
			    "[2, 48, 64]: dim 0 (2 KV groups) is not divisible by tp 4") != NULL);
	CHECK(lo.tensors == NULL && lo.first == NULL);
	CHECK(layout_init(&lo, &a, 3, 1, 1, false, NULL, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "linear_qkv.weight") && strstr(e.msg, "dim 0"));
	CHECK(layout_init(&lo, &odd_ffn, 4, 1, 1, false, NULL, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "tensor 'decoder.layers.0.mlp.linear_fc1.weight' [2, 90, 32]: "
			    "dim 1 (ffn 90) is not divisible by tp 4") != NULL);
	CHECK(layout_init(&lo, &a, 1, 3, 1, false, NULL, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "layers 4 do not split evenly into pp 3 stages") != NULL);
	CHECK(layout_init(&lo, &a, 1, 2, 1, false, short_stages, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "sum to 2, not layers 4") != NULL);
	CHECK(layout_init(&lo, &a, 1, 2, 1, false, neg, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "stage 1: negative layer count -1") != NULL);
	CHECK(layout_init(&lo, &bad, 1, 1, 1, false, NULL, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "heads 6 not divisible by kv_heads 4") != NULL);
	CHECK(layout_init(&lo, &a, 0, 1, 1, false, NULL, &e) == NR_EINPUT);

	CHECK(layout_init(&lo, &a, 2, 2, 1, false, NULL, &e) == NR_OK);
	CHECK(layout_pieces(&lo, KIND_WEIGHT, 2, 0, 0, &p, &n, &e) == NR_EINPUT);
	CHECK(p == NULL && n == 0);
	layout_free(&lo);
}

/* --- resharding with boxes only --------------------------------------------- */

static uint64_t rng_state;

static uint32_t rng32(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return (uint32_t)(z ^ (z >> 31));
}

static uint32_t **rank_buffers(const struct rank *r, int nr)
{
	uint32_t **buf = calloc((size_t)nr, sizeof *buf);

	for (int i = 0; i < nr; i++) {
		int64_t len = r[i].n ? r[i].p[r[i].n - 1].local_off + r[i].p[r[i].n - 1].local_len : 0;

		buf[i] = calloc((size_t)len + 1, sizeof **buf);
	}
	return buf;
}

static void free_buffers(uint32_t **buf, int nr)
{
	for (int i = 0; i < nr; i++)
		free(buf[i]);
	free(buf);
}

/* Fill layout A's ranks from the global tensors, move every piece of layout
 * B from A's owned pieces by intersection, and compare B with the globals. */
static void reshard(const struct arch *a, const struct cfg *ca, const struct cfg *cb,
		    enum state_kind kind)
{
	struct layout la, lb;
	struct err e = { 0 };
	uint32_t **global;
	struct gtensor *g;
	int ng, na, nb;

	CHECK(layout_init(&la, a, ca->tp, ca->pp, ca->dp, ca->dist_opt, ca->stages, &e) == NR_OK);
	CHECK(layout_init(&lb, a, cb->tp, cb->pp, cb->dp, cb->dist_opt, cb->stages, &e) == NR_OK);
	CHECK(layout_tensors(a, &g, &ng, &e) == NR_OK);
	global = calloc((size_t)ng, sizeof *global);
	for (int t = 0; t < ng; t++) {
		struct box w = whole_box(&g[t]);

		global[t] = malloc((size_t)box_volume(&w) * sizeof **global);
		for (int64_t i = 0; i < box_volume(&w); i++)
			global[t][i] = rng32();
	}
	struct rank *ra = collect(&la, kind, &na), *rb = collect(&lb, kind, &nb);
	uint32_t **ba = rank_buffers(ra, na), **bb = rank_buffers(rb, nb);

	for (int i = 0; i < na; i++)
		for (size_t k = 0; k < ra[i].n; k++) {
			const struct piece *p = &ra[i].p[k];
			struct box w = whole_box(&g[p->tensor]);

			box_copy(ba[i] + p->local_off, &p->box, global[p->tensor], &w, &p->box, 4);
		}
	for (int j = 0; j < nb; j++)
		for (size_t k = 0; k < rb[j].n; k++) {
			const struct piece *pb = &rb[j].p[k];
			int64_t got = 0;

			for (int i = 0; i < na; i++)
				for (size_t l = 0; l < ra[i].n; l++) {
					const struct piece *pa = &ra[i].p[l];
					struct box x;

					if (pa->tensor != pb->tensor || pa->copy ||
					    !box_intersect(&pa->box, &pb->box, &x))
						continue;
					box_copy(bb[j] + pb->local_off, &pb->box, ba[i] + pa->local_off,
						 &pa->box, &x, 4);
					got += box_volume(&x);
				}
			CHECK(got == box_volume(&pb->box));
		}
	for (int j = 0; j < nb; j++)
		for (size_t k = 0; k < rb[j].n; k++) {
			const struct piece *pb = &rb[j].p[k];
			struct box w = whole_box(&g[pb->tensor]);
			int64_t vol = box_volume(&pb->box);
			uint32_t *want = malloc((size_t)vol * 4 + 4);

			box_copy(want, &pb->box, global[pb->tensor], &w, &pb->box, 4);
			CHECK(memcmp(want, bb[j] + pb->local_off, (size_t)vol * 4) == 0);
			for (int64_t i = vol; i < pb->local_len; i++)
				CHECK(bb[j][pb->local_off + i] == 0);
			free(want);
		}
	free_buffers(ba, na);
	free_buffers(bb, nb);
	release(ra, na);
	release(rb, nb);
	for (int t = 0; t < ng; t++)
		free(global[t]);
	free(global);
	free(g);
	layout_free(&la);
	layout_free(&lb);
}

static void test_reshard_bit_exact(void)
{
	struct arch a = arch_of(4, 64, 8, 4, 176, 1000, false), t = a;
	const struct cfg tp2pp2 = { a, 2, 2, 1, false, NULL };
	const struct cfg tp4dp2 = { a, 4, 1, 2, true, NULL };
	const struct cfg tp1pp4dp3 = { a, 1, 4, 3, true, NULL };
	const struct cfg tp2uneven = { a, 2, 3, 2, true, stages_121 };

	rng_state = 7;
	reshard(&a, &tp2pp2, &tp4dp2, KIND_WEIGHT);
	reshard(&a, &tp2pp2, &tp4dp2, KIND_MASTER);
	reshard(&a, &tp4dp2, &tp1pp4dp3, KIND_ADAM_V);
	reshard(&a, &tp1pp4dp3, &tp2uneven, KIND_ADAM_M);
	t.tied = true;
	reshard(&t, &tp2pp2, &tp4dp2, KIND_MASTER);
	reshard(&t, &tp4dp2, &tp2uneven, KIND_WEIGHT);
	t = qwen3_small();
	t.kv_heads = 4;
	reshard(&t, &tp2pp2, &tp4dp2, KIND_WEIGHT);
	reshard(&t, &tp4dp2, &tp1pp4dp3, KIND_ADAM_M);
}

/* Qwen2's proportions, shrunk: attention biases, 6 query heads per group. */
static struct arch qwen_small(void)
{
	struct arch q = arch_of(2, 48, 12, 2, 64, 301, true);

	q.attn_bias = true;
	return q;
}

/* The most blocks of a that one piece of b meets, over every tensor of the
 * optimizer's state split across DP.  Counted by brute force, from
 * box_intersect alone. */
static int most_met(const struct arch *a, const struct cfg *ca, const struct cfg *cb)
{
	struct layout la, lb;
	struct err e = { 0 };
	int na, nb, most = 0;

	CHECK(layout_init(&la, a, ca->tp, ca->pp, ca->dp, true, NULL, &e) == NR_OK);
	CHECK(layout_init(&lb, a, cb->tp, cb->pp, cb->dp, true, NULL, &e) == NR_OK);
	struct rank *ra = collect(&la, KIND_MASTER, &na), *rb = collect(&lb, KIND_MASTER, &nb);

	for (int j = 0; j < nb; j++)
		for (size_t k = 0; k < rb[j].n; k++) {
			int met = 0;

			for (int i = 0; i < na; i++) {
				const struct piece *pa = find(&ra[i], rb[j].p[k].tensor);

				met += pa && !pa->copy && box_intersect(&pa->box, &rb[j].p[k].box, NULL);
			}
			most = met > most ? met : most;
		}
	release(ra, na);
	release(rb, nb);
	layout_free(&la);
	layout_free(&lb);
	return most;
}

/* DP blocks are cut along a dimension of the tensor's own, whatever TP
 * and DP are: when either grows, each new block lies across at most two
 * old ones, where cutting along the first dimension with dp elements
 * made a block at DP 64 meet all 32 blocks at DP 32 of the fused QKV
 * weight (48 rows, 64 columns). */
static void test_dp_blocks_nest(void)
{
	struct arch a = llama_small(), q = qwen_small();
	const struct cfg pairs[][2] = {
		{ { a, 1, 1, 32, true, NULL }, { a, 1, 1, 64, true, NULL } },
		{ { a, 1, 1, 2, true, NULL }, { a, 1, 1, 48, true, NULL } },
		{ { a, 1, 1, 8, true, NULL }, { a, 2, 1, 8, true, NULL } },
		{ { a, 2, 1, 4, true, NULL }, { a, 1, 1, 8, true, NULL } },
		{ { a, 1, 2, 16, true, NULL }, { a, 2, 2, 32, true, NULL } },
		{ { q, 1, 1, 12, true, NULL }, { q, 2, 1, 24, true, NULL } },
	};

	for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
		int most = most_met(i < 5 ? &a : &q, &pairs[i][0], &pairs[i][1]);

		CHECK(most <= 2);
		if (most > 2)
			printf("#   tp %d dp %d -> tp %d dp %d: a block meets %d\n", pairs[i][0].tp,
			       pairs[i][0].dp, pairs[i][1].tp, pairs[i][1].dp, most);
	}
}

int main(void)
{
	RUN(test_tensor_list);
	RUN(test_tiles_llama_small);
	RUN(test_tiles_gqa_tied);
	RUN(test_tiles_small_corners);
	RUN(test_megatron_rows);
	RUN(test_vocab_padding);
	RUN(test_rejects);
	RUN(test_reshard_bit_exact);
	RUN(test_dp_blocks_nest);
	return UNIT_END();
}
