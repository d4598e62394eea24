/* The Llama / Qwen2 / Qwen3 decoder of model.h: one pipeline stage of one
 * tensor-parallel rank, forward and backward over a packed batch, and the
 * prefill and decode steps generation runs on a KV cache.
 *
 * B sequences, T tokens of a packed batch, H hidden, A query heads, G KV
 * heads, D head dim, Q = A/G query heads per group, F SwiGLU
 * intermediate size, V vocabulary, L layers.  Under tensor parallelism of
 * size tp: Gl = G/tp, Al = A/tp, Fl = F/tp, Vp = ceil(V/(128 tp))·128 tp
 * (Megatron's padded vocabulary), Vl = Vp/tp.  Rq = (Al + 2 Gl) D, the
 * rows of this rank's linear_qkv. */
#include "engine/model.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* --- configuration ------------------------------------------------------------------------ */

int model_config_init(struct model_config *c, const struct layout *lo, int tp_rank,
		      int pp_rank, struct err *e)
{
	const struct arch *a = &lo->arch;

	memset(c, 0, sizeof *c);
	if (tp_rank < 0 || tp_rank >= lo->tp || pp_rank < 0 || pp_rank >= lo->pp)
		return err_set(e, NR_EINPUT, "rank (tp %d, pp %d) is outside tp %d, pp %d", tp_rank,
			       pp_rank, lo->tp, lo->pp);
	if (arch_head_dim(a) % 2)
		return err_set(e, NR_EINPUT, "arch: head dim %d is odd; rotary embedding needs "
			       "it even", arch_head_dim(a));
	c->layers = a->layers;
	c->hidden = a->hidden;
	c->heads = a->heads;
	c->kv_heads = a->kv_heads;
	c->head_dim = arch_head_dim(a);
	c->ffn = a->ffn;
	c->vocab = a->vocab;
	c->vocab_padded = (int)lo->vocab_padded;
	c->score_head = a->score_head;
	c->tied = a->tied && !a->score_head;
	c->attn_bias = a->attn_bias;
	c->qk_norm = a->qk_norm;
	c->norm_eps = a->norm_eps > 0 ? (float)a->norm_eps : 1e-5f;
	c->rope_theta = a->rope_theta > 0 ? a->rope_theta : 10000.0;
	c->rope_llama3 = a->rope_scaling.on;
	c->rope_factor = a->rope_scaling.factor;
	c->rope_low_freq = a->rope_scaling.low_freq_factor;
	c->rope_high_freq = a->rope_scaling.high_freq_factor;
	c->rope_orig_max_pos = (double)a->rope_scaling.original_max_pos;
	c->tp = lo->tp;
	c->tp_rank = tp_rank;
	c->pp = lo->pp;
	c->pp_rank = pp_rank;
	c->first = lo->first[pp_rank];
	c->last = lo->first[pp_rank + 1];
	c->has_embed = pp_rank == 0;
	c->has_head = pp_rank == lo->pp - 1;
	c->Gl = a->kv_heads / lo->tp;
	c->Al = a->heads / lo->tp;
	c->Fl = a->ffn / lo->tp;
	c->Vl = c->vocab_padded / lo->tp;
	c->v0 = tp_rank * c->Vl;
	return NR_OK;
}

/* inv_freq[i] = θ^(-2i/D), then Llama 3's rope_scaling: with wavelength
 * λ = 2π / inv_freq, λ < L/h keeps it, λ > L/l divides it by the factor,
 * and between the two it is interpolated by (L/λ - l) / (h - l). */
static void rope_freqs(double *inv, const struct model_config *c)
{
	int half = c->head_dim / 2;

	for (int i = 0; i < half; i++) {
		double f = pow(c->rope_theta, -2.0 * i / c->head_dim);

		if (c->rope_llama3) {
			double lam = 2 * M_PI / f, L = c->rope_orig_max_pos;
			double lo = c->rope_low_freq, hi = c->rope_high_freq;

			if (lam > L / lo) {
				f /= c->rope_factor;
			} else if (lam >= L / hi) {
				double s = (L / lam - lo) / (hi - lo);

				f = (1 - s) * f / c->rope_factor + s * f;
			}
		}
		inv[i] = f;
	}
}

static int stage_layers(const struct model_config *c)
{
	return c->last - c->first;
}

static struct heads local_heads(const struct model_config *c)
{
	return (struct heads){ .groups = c->Gl, .q = c->heads / c->kv_heads, .d = c->head_dim };
}

static int qkv_rows(const struct model_config *c)
{
	return (c->Al + 2 * c->Gl) * c->head_dim;
}

int model_init(struct decoder *m, const struct layout *lo, int tp_rank, int pp_rank,
	       const struct kernels *k, const struct comm *tp, struct err *e)
{
	int rc, n;

	memset(m, 0, sizeof *m);
	rc = model_config_init(&m->c, lo, tp_rank, pp_rank, e);
	if (rc)
		return rc;
	if (tp->size != lo->tp || tp->rank != tp_rank)
		return err_set(e, NR_EINPUT, "tensor-parallel group of size %d, rank %d for "
			       "rank %d of tp %d", tp->size, tp->rank, tp_rank, lo->tp);
	m->k = k;
	m->tp = tp;
	n = stage_layers(&m->c);
	m->inv_freq = malloc((size_t)(m->c.head_dim / 2) * sizeof *m->inv_freq);
	m->lmem = calloc((size_t)(2 * n + 1), sizeof *m->lmem);
	if (!m->inv_freq || !m->lmem) {
		model_free(m);
		return err_oom(e);
	}
	rope_freqs(m->inv_freq, &m->c);
	m->w.layer = m->lmem;
	m->g.layer = m->lmem + n;
	return NR_OK;
}

void model_free(struct decoder *m)
{
	free(m->inv_freq);
	free(m->lmem);
	memset(m, 0, sizeof *m);
}

/* --- binding to the layout's buffers -------------------------------------------------------- */

static int bind_one(float **slot, float *base, const struct piece *p, int64_t want,
		    const struct layout *lo, struct err *e)
{
	if (p->local_len != want)
		return err_set(e, NR_EINPUT, "tensor '%s': %lld local elements, the model "
			       "needs %lld", lo->tensors[p->tensor].name,
			       (long long)p->local_len, (long long)want);
	*slot = base ? base + p->local_off : NULL;
	return NR_OK;
}

/* Point ps's tensors into base (NULL: leave them NULL). */
static int bind_params(struct model_params *ps, const struct decoder *m, const struct layout *lo,
		       const struct piece *p, size_t np, float *base, struct err *e)
{
	const struct model_config *c = &m->c;
	const struct arch *a = &lo->arch;
	int64_t H = c->hidden, Rq = qkv_rows(c), vrows = (int64_t)c->Vl * H;
	int fn = layout_final_norm_index(a), out = layout_output_index(a), rc = NR_OK;

	ps->embed = ps->final_norm = ps->head = NULL;
	for (size_t i = 0; i < np && rc == NR_OK; i++) {
		int t = p[i].tensor;
		int layer = lo->tensors[t].layer;

		if (t == 0 && c->has_embed && !ps->embed) {
			rc = bind_one(&ps->embed, base, &p[i], vrows, lo, e);
		} else if (t == 0 || t == out) {
			rc = bind_one(&ps->head, base, &p[i], c->score_head ? H : vrows, lo, e);
		} else if (t == fn) {
			rc = bind_one(&ps->final_norm, base, &p[i], H, lo, e);
		} else if (layer >= c->first && layer < c->last) {
			struct layer_params *l = &ps->layer[layer - c->first];
			struct { enum layer_tensor k; float **slot; int64_t n; } map[] = {
				{ LT_INPUT_NORM, &l->in_norm, H },
				{ LT_QKV, &l->qkv, Rq * H },
				{ LT_QKV_BIAS, &l->qkv_bias, Rq },
				{ LT_Q_NORM, &l->q_norm, c->head_dim },
				{ LT_K_NORM, &l->k_norm, c->head_dim },
				{ LT_PROJ, &l->proj, H * c->Al * c->head_dim },
				{ LT_PRE_MLP_NORM, &l->mlp_norm, H },
				{ LT_FC1, &l->fc1, 2 * (int64_t)c->Fl * H },
				{ LT_FC2, &l->fc2, H * c->Fl },
			};

			for (size_t j = 0; j < sizeof map / sizeof *map; j++)
				if (layout_tensor_index(a, layer, map[j].k) == t)
					rc = bind_one(map[j].slot, base, &p[i], map[j].n, lo, e);
		}
	}
	if (rc == NR_OK && c->tied && c->has_head && !ps->head)
		ps->head = ps->embed;
	return rc;
}

int model_bind(struct decoder *m, const struct layout *lo, float *weights, float *grads,
	       struct err *e)
{
	struct piece *p;
	size_t np;
	int rc = layout_pieces(lo, KIND_WEIGHT, m->c.tp_rank, m->c.pp_rank, 0, &p, &np, e);

	if (rc)
		return rc;
	rc = bind_params(&m->w, m, lo, p, np, weights, e);
	if (rc == NR_OK)
		rc = bind_params(&m->g, m, lo, p, np, grads, e);
	free(p);
	return rc;
}

/* --- activations ---------------------------------------------------------------------------- */

static int head_chunk(const struct model_config *c, int max_tokens)
{
	int tc = MODEL_HEAD_CHUNK_FLOATS / c->Vl;

	if (tc < 1)
		tc = 1;
	return tc < max_tokens ? tc : max_tokens;
}

/* Lay the activations out in mem (NULL: only count); returns the floats
 * used.  Each buffer starts on a 64-byte boundary. */
static size_t carve(struct model_acts *a, const struct model_config *c, int T, int max_len,
		    bool training, float *mem)
{
	size_t off = 0, t = (size_t)T, H = (size_t)c->hidden, Rq = (size_t)qkv_rows(c);
	size_t AD = (size_t)c->Al * c->head_dim, Fl = (size_t)c->Fl;
	int nset = training ? stage_layers(c) : (stage_layers(c) > 0);
	struct layer_acts dummy;

#define TAKE(p, n) do { (p) = mem ? (void *)(mem + off) : NULL; \
			off = (off + (size_t)(n) + 15) & ~(size_t)15; } while (0)
	TAKE(a->x_out, t * H);
	for (int l = 0; l < nset; l++) {
		struct layer_acts *la = mem ? &a->layer[l] : &dummy;

		if (training) {
			TAKE(la->x, t * H);
			TAKE(la->xm, t * H);
		} else {
			la->x = la->xm = a->x_out;
		}
		TAKE(la->rstd1, t);
		TAKE(la->h1, t * H);
		TAKE(la->qkv, t * Rq);
		la->qkx = la->qkv;
		la->qkrstd = NULL;
		if (c->qk_norm) {
			if (training)
				TAKE(la->qkx, t * Rq);
			TAKE(la->qkrstd, t * (size_t)(c->Al + c->Gl));
		}
		TAKE(la->att, t * AD);
		TAKE(la->lse, t * c->Al);
		TAKE(la->rstd2, t);
		TAKE(la->h2, t * H);
		TAKE(la->gu, 2 * t * Fl);
		TAKE(la->act, t * Fl);
	}
	TAKE(a->cs, t * c->head_dim);
	TAKE(a->tmp, t * H);
	TAKE(a->pos, t);
	TAKE(a->targets, t);
	TAKE(a->slot, t);
	TAKE(a->klen, t);
	TAKE(a->scratch, kernels_attn_scratch_floats(max_len, c->heads / c->kv_heads));
	if (c->has_head) {
		TAKE(a->rstdf, t);
		TAKE(a->hf, t * H);
		TAKE(a->lse, t);
		TAKE(a->ent, t);
		TAKE(a->sums, 3 * t);
		TAKE(a->logits, c->score_head ? 0 : (size_t)head_chunk(c, T) * c->Vl);
	}
	if (training) {
		TAKE(a->dres, t * H);
		TAKE(a->dh, t * H);
		TAKE(a->dqkv, t * Rq);
		TAKE(a->datt, t * AD);
		TAKE(a->dgu, 2 * t * Fl);
		TAKE(a->dact, t * Fl);
		TAKE(a->dqkn, c->qk_norm ? 2 * (size_t)stage_layers(c) * c->head_dim : 0);
	}
#undef TAKE
	return off;
}

size_t model_acts_floats(const struct model_config *c, int max_tokens, int max_len,
			 bool training)
{
	struct model_acts a;

	return carve(&a, c, max_tokens, max_len, training, NULL);
}

int model_acts_init(struct model_acts *a, const struct decoder *m, int max_tokens, int max_len,
		    bool training, struct err *e)
{
	const struct model_config *c = &m->c;
	int nset = training ? stage_layers(c) : 1;

	memset(a, 0, sizeof *a);
	if (max_tokens < 1 || max_len < 1)
		return err_set(e, NR_EINPUT, "activations for %d tokens of sequences up to %d: "
			       "both must be positive", max_tokens, max_len);
	a->max_tokens = max_tokens;
	a->max_len = max_len;
	a->training = training;
	a->head_chunk = head_chunk(c, max_tokens);
	a->floats = model_acts_floats(c, max_tokens, max_len, training);
	a->layer = calloc((size_t)nset + 1, sizeof *a->layer);
	if (a->layer)
		a->mem = aligned_alloc(64, a->floats * sizeof *a->mem);
	if (!a->layer || !a->mem) {
		model_acts_free(a);
		return err_oom(e);
	}
	carve(a, c, max_tokens, max_len, training, a->mem);
	return NR_OK;
}

void model_acts_free(struct model_acts *a)
{
	free(a->mem);
	free(a->layer);
	memset(a, 0, sizeof *a);
}

const float *model_acts_output(const struct model_acts *a)
{
	return a->x_out;
}

const float *model_acts_dinput(const struct model_acts *a)
{
	return a->dres;
}

/* --- forward ------------------------------------------------------------------------------- */

/* The residual stream entering layer l (the stage's output after the
 * last). */
static float *layer_input(const struct decoder *m, struct model_acts *a, int l)
{
	int i = l - m->c.first;

	if (l >= m->c.last)
		return a->x_out;
	return a->training ? a->layer[i].x : a->x_out;
}

static struct layer_acts *acts_of(const struct decoder *m, struct model_acts *a, int l)
{
	return &a->layer[a->training ? l - m->c.first : 0];
}

/* How a layer's attention runs: over the packed batch (and, given a
 * cache, storing keys and values at each row's slot and position), or
 * one query per row against the cache. */
struct attn_mode {
	struct kv_cache *kv;    /* NULL: no cache */
	bool decode;
	const int *slot;        /* [T] each row's cache slot */
};

/* Copy each row's rotated key and value into its cache slot. */
static void kv_store(const struct decoder *m, const struct kv_cache *kv, int l, const float *qkv,
		     const int *slot, const int *pos, int T)
{
	const struct model_config *c = &m->c;
	int Q = c->heads / c->kv_heads, D = c->head_dim, rs = qkv_rows(c), cs = c->Gl * D;
	size_t layer = (size_t)(l - c->first) * kv->slots * kv->slot_stride;

	for (int t = 0; t < T; t++) {
		size_t at = layer + (size_t)slot[t] * kv->slot_stride + (size_t)pos[t] * cs;

		for (int g = 0; g < c->Gl; g++) {
			const float *k = qkv + (size_t)t * rs + (size_t)(g * (Q + 2) + Q) * D;

			memcpy(kv->k + at + (size_t)g * D, k, (size_t)D * sizeof *k);
			memcpy(kv->v + at + (size_t)g * D, k + D, (size_t)D * sizeof *k);
		}
	}
}

static int layer_forward(struct decoder *m, struct model_acts *a, int l, const struct batch *b,
			 const struct attn_mode *mode, struct err *e)
{
	const struct model_config *c = &m->c;
	const struct kernels *k = m->k;
	const struct layer_params *w = &m->w.layer[l - c->first];
	struct layer_acts *la = acts_of(m, a, l);
	struct heads hd = local_heads(c);
	int T = b->T, H = c->hidden, Rq = qkv_rows(c), AD = c->Al * c->head_dim, Fl = c->Fl;
	/* not training, x, xm and xn are all the stage's output buffer */
	float *x = layer_input(m, a, l), *xm = la->xm, *xn = layer_input(m, a, l + 1);
	int rc;

	/* attention block: xm = x + proj(attn(rope(qknorm(qkv(norm(x)))))) */
	k->rmsnorm_forward(la->h1, la->rstd1, x, w->in_norm, T, H, c->norm_eps);
	k->matmul(la->qkx, la->h1, w->qkv, T, Rq, H, false, true, 1.0f, 0.0f);
	if (w->qkv_bias)
		k->bias_forward(la->qkx, w->qkv_bias, T, Rq);
	if (w->q_norm)
		k->qknorm_forward(la->qkv, la->qkrstd, la->qkx, w->q_norm, w->k_norm, T, &hd,
				  c->norm_eps);
	k->rope_forward(la->qkv, a->cs, T, &hd);
	if (mode->kv)
		kv_store(m, mode->kv, l, la->qkv, mode->slot, a->pos, T);
	if (mode->decode) {
		size_t layer = (size_t)(l - c->first) * mode->kv->slots * mode->kv->slot_stride;

		k->attention_decode(la->att, la->qkv, mode->kv->k + layer, mode->kv->v + layer,
				    mode->kv->slot_stride, mode->slot, a->klen, T, &hd,
				    a->scratch);
	} else {
		k->attention_forward(la->att, la->lse, la->qkv, b->start, b->B, &hd, a->scratch);
	}
	k->matmul(a->tmp, la->att, w->proj, T, H, AD, false, true, 1.0f, 0.0f);
	rc = m->tp->allreduce_sum(m->tp->ctx, a->tmp, (size_t)T * H, e);
	if (rc)
		return rc;
	k->add(xm, x, a->tmp, (size_t)T * H);

	/* MLP block: xn = xm + fc2(silu(gate) · up), [gate; up] = fc1(norm(xm)) */
	k->rmsnorm_forward(la->h2, la->rstd2, xm, w->mlp_norm, T, H, c->norm_eps);
	k->matmul(la->gu, la->h2, w->fc1, T, 2 * Fl, H, false, true, 1.0f, 0.0f);
	k->swiglu_forward(la->act, la->gu, T, Fl);
	k->matmul(a->tmp, la->act, w->fc2, T, H, Fl, false, true, 1.0f, 0.0f);
	rc = m->tp->allreduce_sum(m->tp->ctx, a->tmp, (size_t)T * H, e);
	if (rc)
		return rc;
	k->add(xn, xm, a->tmp, (size_t)T * H);
	return NR_OK;
}

static float inv_temperature(const struct batch *b)
{
	return b->temperature > 0 ? 1.0f / b->temperature : 1.0f;
}

/* Log-probs and entropies of the LM head, chunk by chunk of Tc tokens:
 * z = hf headᵀ / τ, then the vocabulary-parallel softmax statistics. */
static int head_forward(struct decoder *m, struct model_acts *a, const struct batch *b,
			const struct model_out *out, struct err *e)
{
	const struct model_config *c = &m->c;
	const struct kernels *k = m->k;
	int T = b->T, H = c->hidden, Vl = c->Vl, n = c->vocab - c->v0, tc = a->head_chunk, rc;

	if (n > Vl)
		n = Vl;
	if (n < 0)
		n = 0;
	for (int t0 = 0; t0 < T; t0 += tc) {
		int nt = T - t0 < tc ? T - t0 : tc;
		float *mx = a->lse + t0, *s = a->sums + 3 * t0;

		k->matmul(a->logits, a->hf + (size_t)t0 * H, m->w.head, nt, Vl, H, false, true,
			  inv_temperature(b), 0.0f);
		k->logits_max(mx, a->logits, nt, n, Vl);
		rc = m->tp->allreduce_max(m->tp->ctx, mx, (size_t)nt, e);
		if (rc)
			return rc;
		k->logits_sums(s, a->logits, mx, a->targets + t0, nt, n, Vl, c->v0);
		rc = m->tp->allreduce_sum(m->tp->ctx, s, 3 * (size_t)nt, e);
		if (rc)
			return rc;
		a->logits_at = t0;
		for (int t = 0; t < nt; t++) {
			float lse = mx[t] + logf(s[3 * t]);

			a->lse[t0 + t] = lse;
			a->ent[t0 + t] = lse - s[3 * t + 1] / s[3 * t];
			if (out->logp && a->targets[t0 + t] >= 0)
				out->logp[t0 + t] = s[3 * t + 2] - lse;
			else if (out->logp)
				out->logp[t0 + t] = 0.0f;
		}
	}
	if (out->entropy)
		memcpy(out->entropy, a->ent, (size_t)T * sizeof *a->ent);
	return NR_OK;
}

/* Check b against the activations and the vocabulary; fill positions and
 * targets. */
static int batch_setup(const struct decoder *m, struct model_acts *a, const struct batch *b,
		       struct err *e)
{
	int V = m->c.vocab;

	if (b->B < 0 || b->start[0] != 0 || b->start[b->B] != b->T)
		return err_set(e, NR_EINPUT, "batch: %d sequences whose offsets run from %d to %d, "
			       "not 0 to %d tokens", b->B, b->start[0], b->start[b->B], b->T);
	if (b->T > a->max_tokens)
		return err_set(e, NR_EINPUT, "batch of %d tokens; the activations hold %d", b->T,
			       a->max_tokens);
	for (int s = 0; s < b->B; s++) {
		int n = b->start[s + 1] - b->start[s];

		if (n < 0 || n > a->max_len)
			return err_set(e, NR_EINPUT, "batch: sequence %d has %d tokens; at most %d "
				       "fit", s, n, a->max_len);
		for (int t = b->start[s]; t < b->start[s + 1]; t++)
			if (b->tokens[t] < 0 || b->tokens[t] >= V)
				return err_set(e, NR_EINPUT, "batch: token %d at position %d of "
					       "sequence %d is outside the vocabulary of %d",
					       b->tokens[t], t - b->start[s], s, V);
		for (int t = b->start[s]; t < b->start[s + 1]; t++) {
			int last = t + 1 == b->start[s + 1];
			int y = b->targets ? b->targets[t] : last ? -1 : b->tokens[t + 1];

			if (y < -1 || y >= V)
				return err_set(e, NR_EINPUT, "batch: target %d at position %d of "
					       "sequence %d is outside the vocabulary of %d", y,
					       t - b->start[s], s, V);
			a->pos[t] = t - b->start[s];
			a->targets[t] = y;
		}
	}
	a->T = b->T;
	a->logits_at = -1;
	return NR_OK;
}

/* Embed tokens into the stage's input (first stage), or take x_in. */
static int stage_input(struct decoder *m, struct model_acts *a, const int *tokens, int T,
		       const float *x_in, struct err *e)
{
	const struct model_config *c = &m->c;
	float *x = layer_input(m, a, c->first);

	if (!c->has_embed) {
		if (!x_in)
			return err_set(e, NR_EINPUT, "stage %d needs the previous stage's output",
				       c->pp_rank);
		memcpy(x, x_in, (size_t)T * c->hidden * sizeof *x);
		return NR_OK;
	}
	m->k->embedding_forward(x, tokens, m->w.embed, T, c->hidden, c->v0, c->Vl);
	return m->tp->allreduce_sum(m->tp->ctx, x, (size_t)T * c->hidden, e);
}

int model_forward(struct decoder *m, struct model_acts *a, const struct batch *b,
		  const float *x_in, const struct model_out *out, struct err *e)
{
	const struct model_config *c = &m->c;
	struct attn_mode mode = { 0 };
	int rc = batch_setup(m, a, b, e);

	if (rc == NR_OK)
		rc = stage_input(m, a, b->tokens, b->T, x_in, e);
	if (rc)
		return rc;
	m->k->rope_table(a->cs, a->pos, m->inv_freq, b->T, c->head_dim);
	for (int l = c->first; l < c->last && rc == NR_OK; l++)
		rc = layer_forward(m, a, l, b, &mode, e);
	if (rc || !c->has_head)
		return rc;
	m->k->rmsnorm_forward(a->hf, a->rstdf, a->x_out, m->w.final_norm, b->T, c->hidden,
			      c->norm_eps);
	if (c->score_head) {
		if (out->value)
			m->k->matmul(out->value, a->hf, m->w.head, b->T, 1, c->hidden, false, true,
				     1.0f, 0.0f);
		return NR_OK;
	}
	return head_forward(m, a, b, out, e);
}

/* --- backward ------------------------------------------------------------------------------ */

static int layer_backward(struct decoder *m, struct model_acts *a, int l, const struct batch *b,
			  struct err *e)
{
	const struct model_config *c = &m->c;
	const struct kernels *k = m->k;
	const struct layer_params *w = &m->w.layer[l - c->first];
	const struct layer_params *g = &m->g.layer[l - c->first];
	struct layer_acts *la = acts_of(m, a, l);
	struct heads hd = local_heads(c);
	int T = b->T, H = c->hidden, Rq = qkv_rows(c), AD = c->Al * c->head_dim, Fl = c->Fl;
	float *dres = a->dres;
	int rc;

	/* MLP block; dres is the gradient of the layer's output */
	k->matmul(a->dact, dres, w->fc2, T, Fl, H, false, false, 1.0f, 0.0f);
	k->matmul(g->fc2, dres, la->act, H, Fl, T, true, false, 1.0f, 1.0f);
	k->swiglu_backward(a->dgu, a->dact, la->gu, T, Fl);
	k->matmul(a->dh, a->dgu, w->fc1, T, H, 2 * Fl, false, false, 1.0f, 0.0f);
	rc = m->tp->allreduce_sum(m->tp->ctx, a->dh, (size_t)T * H, e);
	if (rc)
		return rc;
	k->matmul(g->fc1, a->dgu, la->h2, 2 * Fl, H, T, true, false, 1.0f, 1.0f);
	k->rmsnorm_backward(dres, g->mlp_norm, a->dh, la->xm, w->mlp_norm, la->rstd2, T, H);

	/* attention block; dres is now the gradient of xm */
	k->matmul(a->datt, dres, w->proj, T, AD, H, false, false, 1.0f, 0.0f);
	k->matmul(g->proj, dres, la->att, H, AD, T, true, false, 1.0f, 1.0f);
	k->attention_backward(a->dqkv, a->datt, la->att, la->lse, la->qkv, b->start, b->B, &hd,
			      a->scratch);
	k->rope_backward(a->dqkv, a->cs, T, &hd);
	if (w->q_norm) {
		float *dq = a->dqkn + (size_t)2 * (l - c->first) * c->head_dim;

		k->qknorm_backward(a->dqkv, dq, dq + c->head_dim, la->qkx, w->q_norm, w->k_norm,
				   la->qkrstd, T, &hd);
	}
	if (g->qkv_bias)
		k->bias_backward(g->qkv_bias, a->dqkv, T, Rq);
	k->matmul(a->dh, a->dqkv, w->qkv, T, H, Rq, false, false, 1.0f, 0.0f);
	rc = m->tp->allreduce_sum(m->tp->ctx, a->dh, (size_t)T * H, e);
	if (rc)
		return rc;
	k->matmul(g->qkv, a->dqkv, la->h1, Rq, H, T, true, false, 1.0f, 1.0f);
	k->rmsnorm_backward(dres, g->in_norm, a->dh, la->x, w->in_norm, la->rstd1, T, H);
	return NR_OK;
}

/* The LM head's gradient, chunk by chunk from the last, the logits
 * recomputed except the last chunk's, which the forward left in the
 * buffer: dz from the softmax statistics, dh = dz head / τ,
 * dhead += dzᵀ hf / τ. */
static void head_backward(struct decoder *m, struct model_acts *a, const struct batch *b,
			  const struct model_dout *d)
{
	const struct model_config *c = &m->c;
	const struct kernels *k = m->k;
	int T = b->T, H = c->hidden, Vl = c->Vl, n = c->vocab - c->v0, tc = a->head_chunk;
	float it = inv_temperature(b);

	if (n > Vl)
		n = Vl;
	if (n < 0)
		n = 0;
	for (int t0 = (T - 1) / tc * tc; t0 >= 0; t0 -= tc) {
		int nt = T - t0 < tc ? T - t0 : tc;
		const float *hf = a->hf + (size_t)t0 * H;

		if (a->logits_at != t0)
			k->matmul(a->logits, hf, m->w.head, nt, Vl, H, false, true, it, 0.0f);
		a->logits_at = -1;
		k->logits_backward(a->logits, a->lse + t0, a->ent + t0, a->targets + t0,
				   d->dlogp ? d->dlogp + t0 : NULL,
				   d->dentropy ? d->dentropy + t0 : NULL, nt, n, Vl, c->v0);
		k->matmul(a->dh + (size_t)t0 * H, a->logits, m->w.head, nt, H, Vl, false, false, it,
			  0.0f);
		k->matmul(m->g.head, a->logits, hf, Vl, H, nt, true, false, it, 1.0f);
	}
}

/* Each TP rank normed only its own heads with the q/k norms' whole
 * weights: their gradients are the sums over the ranks, added to the
 * bound ones once summed, so that earlier micro-batches' are not summed
 * again. */
static int qknorm_grads(struct decoder *m, struct model_acts *a, struct err *e)
{
	const struct model_config *c = &m->c;
	size_t D = (size_t)c->head_dim;
	int rc = m->tp->allreduce_sum(m->tp->ctx, a->dqkn, 2 * D * stage_layers(c), e);

	for (int l = 0; l < stage_layers(c) && rc == NR_OK; l++) {
		const struct layer_params *g = &m->g.layer[l];

		m->k->add(g->q_norm, g->q_norm, a->dqkn + 2 * D * l, D);
		m->k->add(g->k_norm, g->k_norm, a->dqkn + 2 * D * l + D, D);
	}
	return rc;
}

int model_backward(struct decoder *m, struct model_acts *a, const struct batch *b,
		   const struct model_dout *d, const float *dx_out, struct err *e)
{
	const struct model_config *c = &m->c;
	const struct kernels *k = m->k;
	size_t TH = (size_t)b->T * c->hidden;
	int rc = NR_OK;

	if (!a->training || a->T != b->T)
		return err_set(e, NR_EINPUT, "backward of a batch of %d tokens without its "
			       "training forward", b->T);
	if ((c->has_head && !m->g.head) || (c->has_embed && !m->g.embed) ||
	    (stage_layers(c) > 0 && !m->g.layer[0].qkv))
		return err_set(e, NR_EINPUT, "backward of a model without gradient buffers");
	if (c->has_head) {
		if (c->score_head) {
			/* value = hf · w: dh = dvalue wᵀ, dw += dvalueᵀ hf */
			if (d->dvalue) {
				k->matmul(a->dh, d->dvalue, m->w.head, b->T, c->hidden, 1, false,
					  false, 1.0f, 0.0f);
				k->matmul(m->g.head, d->dvalue, a->hf, 1, c->hidden, b->T, true,
					  false, 1.0f, 1.0f);
			} else {
				memset(a->dh, 0, TH * sizeof *a->dh);
			}
		} else {
			head_backward(m, a, b, d);
			rc = m->tp->allreduce_sum(m->tp->ctx, a->dh, TH, e);
			if (rc)
				return rc;
		}
		memset(a->dres, 0, TH * sizeof *a->dres);
		k->rmsnorm_backward(a->dres, m->g.final_norm, a->dh, a->x_out, m->w.final_norm,
				    a->rstdf, b->T, c->hidden);
	} else {
		if (!dx_out)
			return err_set(e, NR_EINPUT, "stage %d needs the next stage's gradient",
				       c->pp_rank);
		memcpy(a->dres, dx_out, TH * sizeof *a->dres);
	}
	if (c->qk_norm)
		memset(a->dqkn, 0, (size_t)2 * stage_layers(c) * c->head_dim * sizeof *a->dqkn);
	for (int l = c->last - 1; l >= c->first && rc == NR_OK; l--)
		rc = layer_backward(m, a, l, b, e);
	if (rc == NR_OK && c->qk_norm)
		rc = qknorm_grads(m, a, e);
	if (rc == NR_OK && c->has_embed)
		k->embedding_backward(m->g.embed, a->dres, b->tokens, b->T, c->hidden, c->v0,
				      c->Vl);
	return rc;
}

/* --- generation steps ---------------------------------------------------------------------- */

int model_kv_cache_init(struct kv_cache *kv, const struct decoder *m, int slots, int max_len,
		  struct err *e)
{
	size_t n;

	memset(kv, 0, sizeof *kv);
	if (slots < 1 || max_len < 1)
		return err_set(e, NR_EINPUT, "KV cache of %d slots of %d tokens: both must be "
			       "positive", slots, max_len);
	kv->slots = slots;
	kv->max_len = max_len;
	kv->layers = stage_layers(&m->c);
	kv->slot_stride = (size_t)max_len * m->c.Gl * m->c.head_dim;
	n = (size_t)kv->layers * slots * kv->slot_stride;
	kv->k = malloc((n ? n : 1) * sizeof *kv->k);
	kv->v = malloc((n ? n : 1) * sizeof *kv->v);
	if (!kv->k || !kv->v) {
		model_kv_cache_free(kv);
		return err_oom(e);
	}
	return NR_OK;
}

void model_kv_cache_free(struct kv_cache *kv)
{
	free(kv->k);
	free(kv->v);
	memset(kv, 0, sizeof *kv);
}

/* Untempered logits [n, Vp] of the n rows of x (final-normed), gathered
 * over the vocabulary-parallel group; padding columns are -inf. */
static int head_logits(struct decoder *m, struct model_acts *a, const float *x, int n,
		       float *logits, struct err *e)
{
	const struct model_config *c = &m->c;
	int Vp = c->vocab_padded, Vl = c->Vl, tc = a->head_chunk, rc;

	a->logits_at = -1;
	if (c->tp > 1)
		memset(logits, 0, (size_t)n * Vp * sizeof *logits);
	for (int r0 = 0; r0 < n; r0 += tc) {
		int nr = n - r0 < tc ? n - r0 : tc;

		m->k->matmul(a->logits, x + (size_t)r0 * c->hidden, m->w.head, nr, Vl, c->hidden,
			     false, true, 1.0f, 0.0f);
		for (int r = 0; r < nr; r++)
			memcpy(logits + (size_t)(r0 + r) * Vp + c->v0, a->logits + (size_t)r * Vl,
			       (size_t)Vl * sizeof *logits);
	}
	rc = m->tp->allreduce_sum(m->tp->ctx, logits, (size_t)n * Vp, e);
	if (rc)
		return rc;
	for (int r = 0; r < n; r++)
		for (int v = c->vocab; v < Vp; v++)
			logits[(size_t)r * Vp + v] = -INFINITY;
	return NR_OK;
}

static int check_generation(const struct decoder *m, const struct model_acts *a,
			    const struct kv_cache *kv, struct err *e)
{
	if (m->c.pp != 1 || m->c.score_head)
		return err_set(e, NR_EINPUT, "generation needs the whole LM on one stage (pp %d%s)",
			       m->c.pp, m->c.score_head ? ", scalar head" : "");
	if (a->max_len < kv->max_len)
		return err_set(e, NR_EINPUT, "activations for sequences of %d tokens cannot attend "
			       "over a cache of %d", a->max_len, kv->max_len);
	return NR_OK;
}

int model_prefill(struct decoder *m, struct model_acts *a, struct kv_cache *kv,
		  const struct batch *b, const int *slot, float *logits, struct err *e)
{
	const struct model_config *c = &m->c;
	struct attn_mode mode = { .kv = kv, .decode = false, .slot = NULL };
	struct batch nb = *b;
	int rc = check_generation(m, a, kv, e);

	nb.targets = NULL;
	if (rc == NR_OK)
		rc = batch_setup(m, a, &nb, e);
	if (rc)
		return rc;
	for (int s = 0; s < b->B; s++) {
		int n = b->start[s + 1] - b->start[s];

		if (slot[s] < 0 || slot[s] >= kv->slots || n > kv->max_len)
			return err_set(e, NR_EINPUT, "prompt %d: %d tokens into slot %d of a cache "
				       "of %d slots of %d", s, n, slot[s], kv->slots, kv->max_len);
		for (int t = b->start[s]; t < b->start[s + 1]; t++)
			a->slot[t] = slot[s];
	}
	mode.slot = a->slot;
	rc = stage_input(m, a, b->tokens, b->T, NULL, e);
	if (rc)
		return rc;
	m->k->rope_table(a->cs, a->pos, m->inv_freq, b->T, c->head_dim);
	for (int l = c->first; l < c->last && rc == NR_OK; l++)
		rc = layer_forward(m, a, l, &nb, &mode, e);
	if (rc)
		return rc;
	/* each prompt's last row, normed, into tmp */
	for (int s = 0; s < b->B; s++)
		memcpy(a->tmp + (size_t)s * c->hidden,
		       a->x_out + (size_t)(b->start[s + 1] - 1) * c->hidden,
		       (size_t)c->hidden * sizeof *a->tmp);
	m->k->rmsnorm_forward(a->hf, a->rstdf, a->tmp, m->w.final_norm, b->B, c->hidden,
			      c->norm_eps);
	return head_logits(m, a, a->hf, b->B, logits, e);
}

int model_decode(struct decoder *m, struct model_acts *a, struct kv_cache *kv, int n,
		 const int *token, const int *slot, const int *pos, float *logits,
		 struct err *e)
{
	const struct model_config *c = &m->c;
	struct attn_mode mode = { .kv = kv, .decode = true, .slot = slot };
	struct batch b = { .B = n, .T = n, .tokens = token, .start = NULL };
	int rc = check_generation(m, a, kv, e);

	if (rc)
		return rc;
	if (n > a->max_tokens)
		return err_set(e, NR_EINPUT, "decode step of %d sequences; the activations hold %d",
			       n, a->max_tokens);
	for (int r = 0; r < n; r++) {
		if (token[r] < 0 || token[r] >= c->vocab)
			return err_set(e, NR_EINPUT, "decode: token %d is outside the vocabulary "
				       "of %d", token[r], c->vocab);
		if (slot[r] < 0 || slot[r] >= kv->slots || pos[r] < 0 || pos[r] >= kv->max_len)
			return err_set(e, NR_EINPUT, "decode: position %d of slot %d is outside a "
				       "cache of %d slots of %d", pos[r], slot[r], kv->slots,
				       kv->max_len);
		a->pos[r] = pos[r];
		a->klen[r] = pos[r] + 1;
	}
	a->T = n;
	rc = stage_input(m, a, token, n, NULL, e);
	if (rc)
		return rc;
	m->k->rope_table(a->cs, a->pos, m->inv_freq, n, c->head_dim);
	for (int l = c->first; l < c->last && rc == NR_OK; l++)
		rc = layer_forward(m, a, l, &b, &mode, e);
	if (rc)
		return rc;
	m->k->rmsnorm_forward(a->hf, a->rstdf, a->x_out, m->w.final_norm, n, c->hidden,
			      c->norm_eps);
	return head_logits(m, a, a->hf, n, logits, e);
}
