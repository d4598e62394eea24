/* The Megatron-Core layout: global tensors of a Llama decoder and the
 * pieces each (tp, pp, dp) rank holds.  The mapping is explained in
 * layout.h. */
#include "state/layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const state_kind_names[NKINDS + 1] = {
	"weight", "master", "adam_m", "adam_v", NULL
};

static const char *const layer_suffix[LT_COUNT] = {
	[LT_INPUT_NORM] = "input_layernorm.weight",
	[LT_QKV] = "self_attention.linear_qkv.weight",
	[LT_QKV_BIAS] = "self_attention.linear_qkv.bias",
	[LT_Q_NORM] = "self_attention.q_layernorm.weight",
	[LT_K_NORM] = "self_attention.k_layernorm.weight",
	[LT_PROJ] = "self_attention.linear_proj.weight",
	[LT_PRE_MLP_NORM] = "pre_mlp_layernorm.weight",
	[LT_FC1] = "mlp.linear_fc1.weight",
	[LT_FC2] = "mlp.linear_fc2.weight",
};

static bool has_tensor(const struct arch *a, enum layer_tensor k)
{
	if (k == LT_QKV_BIAS)
		return a->attn_bias;
	if (k == LT_Q_NORM || k == LT_K_NORM)
		return a->qk_norm;
	return true;
}

int layout_layer_tensors(const struct arch *a)
{
	return LT_COUNT - !a->attn_bias - 2 * !a->qk_norm;
}

int layout_tensor_index(const struct arch *a, int layer, enum layer_tensor k)
{
	int slot = 0;

	if (!has_tensor(a, k))
		return -1;
	for (int j = 0; j < (int)k; j++)
		slot += has_tensor(a, (enum layer_tensor)j);
	return 1 + layout_layer_tensors(a) * layer + slot;
}

int layout_final_norm_index(const struct arch *a)
{
	return 1 + layout_layer_tensors(a) * a->layers;
}

int layout_output_index(const struct arch *a)
{
	return a->tied && !a->score_head ? -1 : 2 + layout_layer_tensors(a) * a->layers;
}

int layout_kind_bytes(const struct arch *a, enum state_kind kind)
{
	return kind == KIND_WEIGHT ? a->dtype_bytes : 4;
}

static int check_arch(const struct arch *a, struct err *e)
{
	if (a->layers < 1 || a->hidden < 1 || a->heads < 1 || a->kv_heads < 1 ||
	    a->ffn < 1 || a->vocab < 1)
		return err_set(e, NR_EINPUT, "arch: layers %d, hidden %d, heads %d, kv_heads %d, "
			       "ffn %d and vocab %d must all be positive", a->layers, a->hidden,
			       a->heads, a->kv_heads, a->ffn, a->vocab);
	if (a->heads % a->kv_heads)
		return err_set(e, NR_EINPUT, "arch: heads %d not divisible by kv_heads %d",
			       a->heads, a->kv_heads);
	if (!a->head_dim && a->hidden % a->heads)
		return err_set(e, NR_EINPUT, "arch: hidden %d not divisible by heads %d",
			       a->hidden, a->heads);
	return NR_OK;
}

static void set_tensor(struct gtensor *t, int layer, const char *name, int ndim,
		       const int64_t *shape)
{
	if (layer >= 0)
		snprintf(t->name, sizeof t->name, "decoder.layers.%d.%s", layer, name);
	else
		snprintf(t->name, sizeof t->name, "%s", name);
	t->layer = layer;
	t->ndim = ndim;
	memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
}

int layout_tensors(const struct arch *a, struct gtensor **out, int *n, struct err *e)
{
	int64_t h = a->hidden, nh = a->heads, ng = a->kv_heads, f = a->ffn, v = a->vocab;
	int64_t d, q;
	struct gtensor *t;
	int rc = check_arch(a, e), nt;

	if (rc)
		return rc;
	d = arch_head_dim(a);
	q = nh / ng;
	nt = 2 + layout_layer_tensors(a) * a->layers + (layout_output_index(a) >= 0);
	t = calloc((size_t)nt, sizeof *t);
	if (!t)
		return err_oom(e);
	set_tensor(&t[0], -1, "embedding.word_embeddings.weight", 2, (const int64_t[]){ v, h });
	for (int i = 0; i < a->layers; i++) {
		const int64_t shapes[LT_COUNT][3] = {
			[LT_INPUT_NORM] = { h }, [LT_QKV] = { ng, (q + 2) * d, h },
			[LT_QKV_BIAS] = { ng, (q + 2) * d }, [LT_Q_NORM] = { d },
			[LT_K_NORM] = { d }, [LT_PROJ] = { h, nh * d }, [LT_PRE_MLP_NORM] = { h },
			[LT_FC1] = { 2, f, h }, [LT_FC2] = { h, f },
		};
		static const int ndims[LT_COUNT] = {
			[LT_INPUT_NORM] = 1, [LT_QKV] = 3, [LT_QKV_BIAS] = 2, [LT_Q_NORM] = 1,
			[LT_K_NORM] = 1, [LT_PROJ] = 2, [LT_PRE_MLP_NORM] = 1, [LT_FC1] = 3,
			[LT_FC2] = 2,
		};

		for (int k = 0; k < LT_COUNT; k++) {
			int at = layout_tensor_index(a, i, (enum layer_tensor)k);

			if (at >= 0)
				set_tensor(&t[at], i, layer_suffix[k], ndims[k], shapes[k]);
		}
	}
	set_tensor(&t[layout_final_norm_index(a)], -1, "decoder.final_layernorm.weight", 1, &h);
	if (a->score_head)
		set_tensor(&t[layout_output_index(a)], -1, "score.weight", 2,
			   (const int64_t[]){ 1, h });
	else if (!a->tied)
		set_tensor(&t[layout_output_index(a)], -1, "output_layer.weight", 2,
			   (const int64_t[]){ v, h });
	*out = t;
	*n = nt;
	return NR_OK;
}

void layout_free(struct layout *lo)
{
	free(lo->first);
	free(lo->tensors);
	memset(lo, 0, sizeof *lo);
}

/* Fix first[] from the per-stage counts, or split evenly. */
static int set_stages(struct layout *lo, const int *stage_layers, struct err *e)
{
	int layers = lo->arch.layers;
	int64_t sum = 0;

	lo->first = malloc((size_t)(lo->pp + 1) * sizeof *lo->first);
	if (!lo->first)
		return err_oom(e);
	if (!stage_layers && layers % lo->pp)
		return err_set(e, NR_EINPUT, "layers %d do not split evenly into pp %d stages; "
			       "give per-stage layer counts", layers, lo->pp);
	for (int p = 0; p < lo->pp; p++) {
		int n = stage_layers ? stage_layers[p] : layers / lo->pp;

		if (n < 0)
			return err_set(e, NR_EINPUT, "stage %d: negative layer count %d", p, n);
		lo->first[p] = sum < layers ? (int)sum : layers;
		sum += n;
	}
	if (sum != layers)
		return err_set(e, NR_EINPUT, "per-stage layer counts sum to %lld, not layers %d",
			       (long long)sum, layers);
	lo->first[lo->pp] = layers;
	return NR_OK;
}

static int check_tp(const struct layout *lo, struct err *e)
{
	const struct arch *a = &lo->arch;
	const struct gtensor *qkv = &lo->tensors[layout_tensor_index(a, 0, LT_QKV)];
	const struct gtensor *fc1 = &lo->tensors[layout_tensor_index(a, 0, LT_FC1)];

	/* linear_proj's nh·d columns split whenever the groups do. */
	if (a->kv_heads % lo->tp)
		return err_set(e, NR_EINPUT, "tensor '%s' [%lld, %lld, %lld]: dim 0 (%d KV groups) "
			       "is not divisible by tp %d", qkv->name, (long long)qkv->shape[0],
			       (long long)qkv->shape[1], (long long)qkv->shape[2], a->kv_heads, lo->tp);
	if (a->ffn % lo->tp)
		return err_set(e, NR_EINPUT, "tensor '%s' [%lld, %lld, %lld]: dim 1 (ffn %d) "
			       "is not divisible by tp %d", fc1->name, (long long)fc1->shape[0],
			       (long long)fc1->shape[1], (long long)fc1->shape[2], a->ffn, lo->tp);
	return NR_OK;
}

int layout_init(struct layout *lo, const struct arch *a, int tp, int pp, int dp,
		bool dist_opt, const int *stage_layers, struct err *e)
{
	int64_t align;
	int rc;

	memset(lo, 0, sizeof *lo);
	if (tp < 1 || pp < 1 || dp < 1)
		return err_set(e, NR_EINPUT, "tp %d, pp %d and dp %d must all be at least 1",
			       tp, pp, dp);
	rc = layout_tensors(a, &lo->tensors, &lo->ntensors, e);
	if (rc)
		return rc;
	lo->arch = *a;
	lo->tp = tp;
	lo->pp = pp;
	lo->dp = dp;
	lo->dist_opt = dist_opt;
	align = (int64_t)LAYOUT_VOCAB_ALIGN * tp;
	lo->vocab_padded = (a->vocab + align - 1) / align * align;
	rc = check_tp(lo, e);
	if (rc == NR_OK)
		rc = set_stages(lo, stage_layers, e);
	if (rc)
		layout_free(lo);
	return rc;
}

/* The pieces of one rank, as they are appended. */
struct rank_pieces {
	struct piece *p;
	size_t n;
	int64_t off;
	bool sharded;              /* this kind is split across DP */
	int dp, dp_rank;
};

/* Cut b to dp block dp_rank, block k holding [k E/dp, (k+1) E/dp) of one
 * dimension: the largest that TP does not split (tp_dim, -1 when TP splits
 * none), the first of the largest, so that it is the same whatever the TP
 * and DP sizes and the blocks of two layouts nest, and ranks next to each
 * other, TP ranks first, hold blocks next to each other; when b has fewer
 * than dp elements there, its first dimension with at least dp (its
 * largest when none has).  Only the last block keeps the padding tail. */
static void dp_block(struct box *b, int64_t *tail, int dp, int dp_rank, int tp_dim)
{
	int s = -1;
	int64_t ext, lo, hi;

	for (int k = 0; k < b->ndim; k++)
		if (k != tp_dim && (s < 0 || b->ext[k] > b->ext[s]))
			s = k;
	if (s < 0 || b->ext[s] < dp) {
		s = 0;
		while (s < b->ndim && b->ext[s] < dp)
			s++;
		if (s == b->ndim) {
			s = 0;
			for (int k = 1; k < b->ndim; k++)
				if (b->ext[k] > b->ext[s])
					s = k;
		}
	}
	ext = b->ext[s];
	lo = ext * dp_rank / dp;
	hi = ext * (dp_rank + 1) / dp;
	b->off[s] += lo;
	b->ext[s] = hi - lo;
	if (dp_rank != dp - 1)
		*tail = 0;
}

/* Append the rank's part of tensor: box of the TP rank (split along
 * tp_dim, -1 for none), then tail padding elements. */
static void add(struct rank_pieces *rp, int tensor, struct box box, int tp_dim, int64_t tail,
		bool copy)
{
	struct piece *p;
	int64_t len;

	if (rp->sharded)
		dp_block(&box, &tail, rp->dp, rp->dp_rank, tp_dim);
	else
		copy = copy || rp->dp_rank > 0;
	len = box_volume(&box) + tail;
	if (len == 0)
		return;
	p = &rp->p[rp->n++];
	p->tensor = tensor;
	p->box = box;
	p->local_off = rp->off;
	p->local_len = len;
	p->copy = copy;
	rp->off += len;
}

static struct box whole(const struct gtensor *t)
{
	struct box b = { .ndim = t->ndim };

	for (int d = 0; d < t->ndim; d++)
		b.ext[d] = t->shape[d];
	return b;
}

/* Box d of a split into n equal blocks along dimension dim. */
static struct box block(const struct gtensor *t, int dim, int n, int d)
{
	struct box b = whole(t);

	b.ext[dim] /= n;
	b.off[dim] = b.ext[dim] * d;
	return b;
}

/* Rank r's rows of the padded vocabulary that lie below V, and the rest
 * of its Vp/t rows as padding. */
static void add_vocab(struct rank_pieces *rp, const struct layout *lo, int tensor, int r,
		      bool copy)
{
	const struct gtensor *t = &lo->tensors[tensor];
	int64_t rows = lo->vocab_padded / lo->tp, v = t->shape[0];
	int64_t lo_row = rows * r < v ? rows * r : v;
	int64_t hi_row = rows * (r + 1) < v ? rows * (r + 1) : v;
	struct box b = whole(t);

	b.off[0] = lo_row;
	b.ext[0] = hi_row - lo_row;
	add(rp, tensor, b, 0, (rows - b.ext[0]) * t->shape[1], copy);
}

int layout_pieces(const struct layout *lo, enum state_kind kind, int tp_rank, int pp_rank,
		  int dp_rank, struct piece **out, size_t *n, struct err *e)
{
	const struct arch *a = &lo->arch;
	const struct gtensor *t = lo->tensors;
	struct rank_pieces rp = { 0 };
	int r = tp_rank, tp = lo->tp;

	*out = NULL;
	*n = 0;
	if (tp_rank < 0 || tp_rank >= tp || pp_rank < 0 || pp_rank >= lo->pp || dp_rank < 0 ||
	    dp_rank >= lo->dp || (unsigned)kind >= NKINDS)
		return err_set(e, NR_EINPUT, "rank (tp %d, pp %d, dp %d) of kind %d is outside "
			       "tp %d, pp %d, dp %d", tp_rank, pp_rank, dp_rank, (int)kind, tp,
			       lo->pp, lo->dp);
	rp.sharded = lo->dist_opt && kind != KIND_WEIGHT && lo->dp > 1;
	rp.dp = lo->dp;
	rp.dp_rank = dp_rank;
	rp.p = malloc((size_t)(4 + layout_layer_tensors(a) *
			       (lo->first[pp_rank + 1] - lo->first[pp_rank])) * sizeof *rp.p);
	if (!rp.p)
		return err_oom(e);

	if (pp_rank == 0)
		add_vocab(&rp, lo, 0, r, false);
	for (int i = lo->first[pp_rank]; i < lo->first[pp_rank + 1]; i++) {
		/* norms whole on every TP rank; the rest split as layout.h says */
		static const int split_dim[LT_COUNT] = {
			[LT_INPUT_NORM] = -1, [LT_QKV] = 0, [LT_QKV_BIAS] = 0, [LT_Q_NORM] = -1,
			[LT_K_NORM] = -1, [LT_PROJ] = 1, [LT_PRE_MLP_NORM] = -1, [LT_FC1] = 1,
			[LT_FC2] = 1,
		};

		for (int k = 0; k < LT_COUNT; k++) {
			int at = layout_tensor_index(a, i, (enum layer_tensor)k);

			if (at < 0)
				continue;
			if (split_dim[k] < 0)
				add(&rp, at, whole(&t[at]), -1, 0, r > 0);
			else
				add(&rp, at, block(&t[at], split_dim[k], tp, r), split_dim[k], 0,
				    false);
		}
	}
	if (pp_rank == lo->pp - 1) {
		int fn = layout_final_norm_index(a), out = layout_output_index(a);

		add(&rp, fn, whole(&t[fn]), -1, 0, r > 0);
		if (a->score_head)
			add(&rp, out, whole(&t[out]), -1, 0, r > 0);
		else if (!a->tied)
			add_vocab(&rp, lo, out, r, false);
		else if (lo->pp > 1)
			add_vocab(&rp, lo, 0, r, true);
	}
	if (rp.n == 0) {
		free(rp.p);
		rp.p = NULL;
	}
	*out = rp.p;
	*n = rp.n;
	return NR_OK;
}
