/* A model's state on one rank (mstate.h): its buffers, made at random or
 * loaded from a store, and the weights rounded from the master. */
#include "engine/mstate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/rng.h"
#include "state/safetensors.h"

#define INIT_STD 0.02 /* Hugging Face's initializer_range, Megatron-LM's init_method_std */

/* Floats of rank (tp, pp, dp)'s buffer of kind, and its pieces. */
static int kind_len(const struct layout *lo, enum state_kind kind, int tp, int pp, int dp,
		    size_t *len, struct err *e)
{
	struct piece *p;
	size_t n;
	int rc = layout_pieces(lo, kind, tp, pp, dp, &p, &n, e);

	*len = 0;
	for (size_t k = 0; k < n && rc == NR_OK; k++)
		*len = (size_t)(p[k].local_off + p[k].local_len);
	free(p);
	return rc;
}

/* The kind whose pieces lay kind out in s's buffer: FSDP's weights are
 * cut into the master's blocks. */
static enum state_kind laid_as(const struct mstate *s, enum state_kind kind)
{
	return s->fsdp && kind == KIND_WEIGHT ? KIND_MASTER : kind;
}

int mstate_init(struct mstate *s, const struct model *m, int index, int tp, int pp, int dp,
		enum zero_stage zero, bool trainable, int tp_rank, int pp_rank, int dp_rank,
		struct err *e)
{
	int rc;

	memset(s, 0, sizeof *s);
	snprintf(s->name, sizeof s->name, "%s", m->name);
	s->index = index;
	s->tp_rank = tp_rank;
	s->pp_rank = pp_rank;
	s->dp_rank = dp_rank;
	s->trainable = trainable;
	s->zero = zero >= ZERO_1 && trainable;
	s->fsdp = zero == ZERO_3 && dp > 1;
	/* the layout's DP blocks as state/emu.h cuts them */
	rc = layout_init(&s->lo, &m->arch, tp, pp, dp, s->zero || zero == ZERO_3, NULL, e);
	if (rc)
		return err_prefix(e, "model '%s'", m->name);
	s->wdtype = malloc((size_t)s->lo.ntensors);
	if (!s->wdtype)
		return err_oom(e);
	memset(s->wdtype, m->arch.dtype_bytes == 4 ? ST_F32 :
			  strcmp(m->arch.dtype, "fp16") == 0 ? ST_F16 : ST_BF16,
	       (size_t)s->lo.ntensors);
	for (int k = 0; k < (trainable ? NKINDS : 1) && rc == NR_OK; k++) {
		rc = kind_len(&s->lo, laid_as(s, (enum state_kind)k), tp_rank, pp_rank, dp_rank,
			      &s->len[k], e);
		if (rc == NR_OK && !(s->buf[k] = calloc(s->len[k] + 1, sizeof(float))))
			rc = err_oom(e);
	}
	if (rc == NR_OK)
		rc = kind_len(&s->lo, KIND_WEIGHT, tp_rank, pp_rank, dp_rank, &s->full_len, e);
	if (rc == NR_OK && !s->fsdp)
		s->full = s->buf[KIND_WEIGHT];
	if (rc == NR_OK && trainable && !(s->grad = calloc(s->full_len + 1, sizeof(float))))
		rc = err_oom(e);
	if (rc)
		mstate_free(s);
	return rc;
}

void mstate_free(struct mstate *s)
{
	mstate_full_end(s);
	for (int k = 0; k < NKINDS; k++)
		free(s->buf[k]);
	free(s->grad);
	free(s->wdtype);
	layout_free(&s->lo);
	memset(s, 0, sizeof *s);
}

int64_t mstate_bytes(const struct mstate *s)
{
	size_t n = (s->grad ? s->full_len : 0) + (s->fsdp && s->full ? s->full_len : 0);

	for (int k = 0; k < NKINDS; k++)
		n += s->buf[k] ? s->len[k] : 0;
	return (int64_t)n * (int64_t)sizeof(float);
}

int mstate_weight_pieces(const struct mstate *s, struct piece **out, size_t *n, struct err *e)
{
	return layout_pieces(&s->lo, laid_as(s, KIND_WEIGHT), s->tp_rank, s->pp_rank, s->dp_rank,
			     out, n, e);
}

/* Each element of the pieces src laid out in sbuf that pieces dst hold
 * too, into dbuf laid out as dst. */
static void pieces_copy(const struct piece *dst, size_t nd, float *dbuf, const struct piece *src,
			size_t ns, const float *sbuf)
{
	for (size_t k = 0; k < nd; k++)
		for (size_t j = 0; j < ns; j++) {
			struct box x;

			if (src[j].tensor == dst[k].tensor &&
			    box_intersect(&src[j].box, &dst[k].box, &x))
				box_copy(dbuf + dst[k].local_off, &dst[k].box, sbuf + src[j].local_off,
					 &src[j].box, &x, sizeof *dbuf);
		}
}

/* The rank's DP blocks and the whole pieces of its weights. */
static int both_pieces(const struct mstate *s, struct piece **bp, size_t *nb, struct piece **wp,
		       size_t *nw, struct err *e)
{
	int rc = mstate_weight_pieces(s, bp, nb, e);

	*wp = NULL;
	if (rc == NR_OK)
		rc = layout_pieces(&s->lo, KIND_WEIGHT, s->tp_rank, s->pp_rank, s->dp_rank, wp, nw,
				   e);
	if (rc) {
		free(*bp);
		*bp = NULL;
	}
	return rc;
}

int mstate_full_begin(struct mstate *s, struct err *e)
{
	struct piece *bp, *wp;
	size_t nb, nw;
	int rc;

	if (!s->fsdp || s->full)
		return NR_OK;
	if ((rc = both_pieces(s, &bp, &nb, &wp, &nw, e)))
		return rc;
	if (!(s->full = calloc(s->full_len + 1, sizeof *s->full)))
		rc = err_oom(e);
	else
		pieces_copy(wp, nw, s->full, bp, nb, s->buf[KIND_WEIGHT]);
	free(bp);
	free(wp);
	return rc;
}

void mstate_full_end(struct mstate *s)
{
	if (!s->fsdp)
		return;
	free(s->full);
	s->full = NULL;
}

/* The rank's block of whole, a buffer with full's offsets, into dst laid
 * out as the weights buffer. */
static int block_of(const struct mstate *s, const float *whole, float *dst, struct err *e)
{
	struct piece *bp, *wp;
	size_t nb, nw;
	int rc = both_pieces(s, &bp, &nb, &wp, &nw, e);

	if (rc)
		return rc;
	pieces_copy(bp, nb, dst, wp, nw, whole);
	free(bp);
	free(wp);
	return NR_OK;
}

/* The element's global row-major index from its index inside box b of
 * tensor t. */
static int64_t global_index(const struct gtensor *t, const struct box *b, int64_t i)
{
	int64_t g = 0, stride = 1;

	for (int d = b->ndim - 1; d >= 0; d--) {
		g += (b->off[d] + i % b->ext[d]) * stride;
		i /= b->ext[d];
		stride *= t->shape[d];
	}
	return g;
}

/* What tensor t starts as: its standard deviation, or the constant it
 * holds (norms 1, biases 0) when *constant. */
static double init_std(const struct layout *lo, int t, bool *constant, double *value)
{
	const struct arch *a = &lo->arch;
	const struct gtensor *g = &lo->tensors[t];
	int layer = g->layer;

	*constant = false;
	if (layer >= 0 && (t == layout_tensor_index(a, layer, LT_INPUT_NORM) ||
			   t == layout_tensor_index(a, layer, LT_PRE_MLP_NORM) ||
			   t == layout_tensor_index(a, layer, LT_Q_NORM) ||
			   t == layout_tensor_index(a, layer, LT_K_NORM) ||
			   t == layout_tensor_index(a, layer, LT_QKV_BIAS))) {
		*constant = true;
		*value = t == layout_tensor_index(a, layer, LT_QKV_BIAS) ? 0 : 1;
		return 0;
	}
	if (t == layout_final_norm_index(a)) {
		*constant = true;
		*value = 1;
		return 0;
	}
	if (layer >= 0 && (t == layout_tensor_index(a, layer, LT_PROJ) ||
			   t == layout_tensor_index(a, layer, LT_FC2)))
		return INIT_STD / sqrt(2.0 * a->layers);
	return INIT_STD;
}

void mstate_random(struct mstate *s, uint64_t seed)
{
	struct piece *p;
	size_t n;
	struct err e;

	if (mstate_weight_pieces(s, &p, &n, &e))
		return;
	for (size_t k = 0; k < n; k++) {
		const struct gtensor *t = &s->lo.tensors[p[k].tensor];
		float *w = s->buf[KIND_WEIGHT] + p[k].local_off;
		int64_t vol = box_volume(&p[k].box);
		bool constant;
		double value = 0, std = init_std(&s->lo, p[k].tensor, &constant, &value);
		enum st_dtype dt = (enum st_dtype)s->wdtype[p[k].tensor];

		for (int64_t i = 0; i < vol; i++) {
			double x = constant ? value :
				   std * rng_normal(seed, RNG_INIT, (uint64_t)s->index,
						    (uint64_t)p[k].tensor,
						    (uint64_t)global_index(t, &p[k].box, i));

			w[i] = (float)x;
		}
		st_round(w, (size_t)vol, dt);
		memset(w + vol, 0, (size_t)(p[k].local_len - vol) * sizeof *w);
	}
	free(p);
	if (s->trainable) {
		/* the optimizer's kinds start as Adam does */
		memset(s->buf[KIND_ADAM_M], 0, s->len[KIND_ADAM_M] * sizeof(float));
		memset(s->buf[KIND_ADAM_V], 0, s->len[KIND_ADAM_V] * sizeof(float));
		if (!s->zero || s->fsdp)
			memcpy(s->buf[KIND_MASTER], s->buf[KIND_WEIGHT],
			       s->len[KIND_WEIGHT] * sizeof(float));
	}
}

/* The weights from model store_model of r: with FSDP, read whole and the
 * rank's block kept. */
static int load_weights(struct mstate *s, struct store_reader *r, int store_model, struct err *e)
{
	float *whole;
	int rc;

	if (!s->fsdp)
		return store_reader_load(r, store_model, KIND_WEIGHT, &s->lo, s->tp_rank, s->pp_rank,
					 s->dp_rank, s->buf[KIND_WEIGHT], e);
	if (!(whole = calloc(s->full_len + 1, sizeof *whole)))
		return err_oom(e);
	rc = store_reader_load(r, store_model, KIND_WEIGHT, &s->lo, s->tp_rank, s->pp_rank,
			       s->dp_rank, whole, e);
	if (rc == NR_OK)
		rc = block_of(s, whole, s->buf[KIND_WEIGHT], e);
	free(whole);
	return rc;
}

int mstate_load(struct mstate *s, struct store_reader *r, int store_model, struct err *e)
{
	const struct manifest *m = store_reader_manifest(r);
	const struct mmodel *mm = &m->models[store_model];
	bool has_opt = mm->lo.trainable;
	int rc = load_weights(s, r, store_model, e);

	for (int t = 0; t < s->lo.ntensors; t++)
		s->wdtype[t] = (unsigned char)mmodel_dtype(mm, KIND_WEIGHT, t);
	if (rc || !s->trainable)
		return rc;
	for (int k = KIND_MASTER; k < NKINDS && rc == NR_OK && has_opt; k++)
		rc = store_reader_load(r, store_model, (enum state_kind)k, &s->lo, s->tp_rank,
				       s->pp_rank, s->dp_rank, s->buf[k], e);
	if (rc || has_opt)
		return rc;
	/* a store without optimizer state: Adam's start, master from the weights */
	memset(s->buf[KIND_ADAM_M], 0, s->len[KIND_ADAM_M] * sizeof(float));
	memset(s->buf[KIND_ADAM_V], 0, s->len[KIND_ADAM_V] * sizeof(float));
	/* FSDP's weights are laid out as the master */
	if (!s->zero || s->fsdp) {
		memcpy(s->buf[KIND_MASTER], s->buf[KIND_WEIGHT], s->len[KIND_WEIGHT] * sizeof(float));
		return NR_OK;
	}
	return store_reader_load(r, store_model, KIND_WEIGHT, &s->lo, s->tp_rank, s->pp_rank,
				 s->dp_rank, s->buf[KIND_MASTER], e) ? e->code :
	       err_set(e, NR_EINPUT, "model '%s': a distributed optimizer's master cannot come "
		       "from the weights", s->name);
}

void mstate_weights_from_master(struct mstate *s)
{
	struct piece *mp = NULL, *wp = NULL;
	size_t nm = 0, nw = 0;
	struct err e;

	if (!s->trainable ||
	    layout_pieces(&s->lo, KIND_MASTER, s->tp_rank, s->pp_rank, s->dp_rank, &mp, &nm, &e) ||
	    mstate_weight_pieces(s, &wp, &nw, &e)) {
		free(mp);
		return;
	}
	for (size_t k = 0; k < nm; k++) {
		const struct piece *src = &mp[k];

		for (size_t j = 0; j < nw; j++) {
			const struct piece *dst = &wp[j];
			float *w = s->buf[KIND_WEIGHT] + dst->local_off;
			enum st_dtype dt = (enum st_dtype)s->wdtype[dst->tensor];
			struct box x;

			if (dst->tensor != src->tensor || !box_intersect(&src->box, &dst->box, &x))
				continue;
			box_copy(w, &dst->box, s->buf[KIND_MASTER] + src->local_off, &src->box, &x,
				 sizeof(float));
			st_round(w, (size_t)box_volume(&dst->box), dt);
		}
	}
	free(mp);
	free(wp);
}

bool mstate_finite(const struct mstate *s)
{
	for (int k = 0; k < (s->trainable ? 2 : 1); k++)
		for (size_t i = 0; i < s->len[k]; i++)
			if (!isfinite(s->buf[k][i]))
				return false;
	return true;
}

const float *mstate_buffer(void *ctx, enum state_kind kind, int tp, int pp, int dp)
{
	const struct mstate *s = ctx;

	if (tp != s->tp_rank || pp != s->pp_rank || (dp != s->dp_rank && dp != 0))
		return NULL;
	return s->buf[kind];
}
