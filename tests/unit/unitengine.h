/* Helpers for the engine's unit tests: a small decoder on one rank of a
 * layout, its weights drawn from the counter-based generator by global
 * tensor and element (so every TP or PP split of one model holds the same
 * values), its tensors gathered back into global order, and a two-rank
 * group for threads. */
#ifndef NEREUS_UNITENGINE_H
#define NEREUS_UNITENGINE_H

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/model.h"
#include "engine/rng.h"

struct tiny {
	struct layout lo;
	struct decoder m;
	struct piece *p;
	size_t np;
	size_t n;          /* floats in the rank's buffer */
	float *w, *g;      /* weights and gradients */
};

static inline struct arch tiny_arch(int layers, int hidden, int heads, int kv, int ffn, int vocab,
			     bool tied, bool bias, bool score)
{
	struct arch a = {
		.layers = layers, .hidden = hidden, .heads = heads, .kv_heads = kv, .ffn = ffn,
		.vocab = vocab, .tied = tied, .dtype_bytes = 4, .dtype = "fp32",
		.attn_bias = bias, .score_head = score, .rope_theta = 10000, .norm_eps = 1e-5,
	};

	return a;
}

/* Call fn(ctx, global element index, local element index) for each element
 * of piece p's box, in the buffer's (row-major) order. */
static inline void piece_walk(const struct piece *p, const struct gtensor *t,
		       void (*fn)(void *ctx, int64_t gi, int64_t li), void *ctx)
{
	int64_t idx[BOX_MAXDIM] = { 0 }, vol = box_volume(&p->box);

	for (int64_t li = 0; li < vol; li++) {
		int64_t gi = 0;

		for (int d = 0; d < t->ndim; d++)
			gi = gi * t->shape[d] + p->box.off[d] + idx[d];
		fn(ctx, gi, li);
		for (int d = t->ndim - 1; d >= 0; d--) {
			if (++idx[d] < p->box.ext[d])
				break;
			idx[d] = 0;
		}
	}
}

struct fill_ctx {
	float *dst;
	int tensor;
	bool norm;
	float scale;
	uint64_t seed;
};

static inline void fill_one(void *c_, int64_t gi, int64_t li)
{
	struct fill_ctx *c = c_;
	double v = rng_normal(c->seed, RNG_INIT, 0, (uint64_t)c->tensor, (uint64_t)gi);

	c->dst[li] = c->norm ? 1.0f + 0.1f * (float)v : c->scale * (float)v;
}

/* Global tensor values: norms 1 + 0.1 N(0, 1), the embedding N(0, 1), the
 * rest scale N(0, 1); padding rows zero. */
static inline void tiny_fill(struct tiny *t, float scale, uint64_t seed)
{
	memset(t->w, 0, t->n * sizeof *t->w);
	for (size_t i = 0; i < t->np; i++) {
		const struct gtensor *gt = &t->lo.tensors[t->p[i].tensor];
		struct fill_ctx c = {
			.dst = t->w + t->p[i].local_off, .tensor = t->p[i].tensor,
			.norm = gt->ndim == 1, .scale = t->p[i].tensor == 0 ? 1.0f : scale,
			.seed = seed,
		};

		piece_walk(&t->p[i], gt, fill_one, &c);
	}
}

static inline int tiny_init(struct tiny *t, const struct arch *a, int tp, int pp, int tp_rank,
		     int pp_rank, const struct comm *c, float scale)
{
	struct err e = { 0 };
	int rc;

	memset(t, 0, sizeof *t);
	rc = layout_init(&t->lo, a, tp, pp, 1, false, NULL, &e);
	if (rc == NR_OK)
		rc = layout_pieces(&t->lo, KIND_WEIGHT, tp_rank, pp_rank, 0, &t->p, &t->np, &e);
	if (rc == NR_OK)
		rc = model_init(&t->m, &t->lo, tp_rank, pp_rank, kernels_cpu(), c, &e);
	if (rc) {
		printf("# tiny_init: %s\n", e.msg);
		return rc;
	}
	t->n = (size_t)(t->p[t->np - 1].local_off + t->p[t->np - 1].local_len);
	t->w = calloc(t->n, sizeof *t->w);
	t->g = calloc(t->n, sizeof *t->g);
	tiny_fill(t, scale, 1);
	rc = model_bind(&t->m, &t->lo, t->w, t->g, &e);
	if (rc)
		printf("# model_bind: %s\n", e.msg);
	return rc;
}

static inline void tiny_free(struct tiny *t)
{
	model_free(&t->m);
	free(t->p);
	free(t->w);
	free(t->g);
	layout_free(&t->lo);
}

struct gather_ctx {
	float *dst;
	const float *src;
};

static inline void gather_one(void *c_, int64_t gi, int64_t li)
{
	struct gather_ctx *c = c_;

	c->dst[gi] = c->src[li];
}

/* Copy the rank's elements of global tensor k from buf into glob (the
 * global tensor, row-major); copies (another rank's elements) too. */
static inline void tiny_gather(const struct tiny *t, const float *buf, int k, float *glob)
{
	for (size_t i = 0; i < t->np; i++)
		if (t->p[i].tensor == k) {
			struct gather_ctx c = { glob, buf + t->p[i].local_off };

			piece_walk(&t->p[i], &t->lo.tensors[k], gather_one, &c);
		}
}

static inline int64_t gtensor_numel(const struct gtensor *t)
{
	int64_t n = 1;

	for (int d = 0; d < t->ndim; d++)
		n *= t->shape[d];
	return n;
}

/* A two-rank group over shared memory: each rank publishes its buffer,
 * every rank reduces rank 0's then rank 1's values in that order (so both
 * get the same bits), and the barriers keep buffers alive until read. */
struct pair {
	pthread_barrier_t bar;
	float *buf[2];
	float *tmp[2];
};

struct pair_rank {
	struct pair *pair;
	int rank;
};

static inline int pair_reduce(void *ctx, float *buf, size_t n, bool max)
{
	struct pair_rank *pr = ctx;
	struct pair *p = pr->pair;
	float *tmp = malloc(n * sizeof *tmp);

	p->buf[pr->rank] = buf;
	pthread_barrier_wait(&p->bar);
	for (size_t i = 0; i < n; i++)
		tmp[i] = max ? fmaxf(p->buf[0][i], p->buf[1][i]) : p->buf[0][i] + p->buf[1][i];
	pthread_barrier_wait(&p->bar);
	memcpy(buf, tmp, n * sizeof *tmp);
	free(tmp);
	return NR_OK;
}

static inline int pair_sum(void *ctx, float *buf, size_t n, struct err *e)
{
	(void)e;
	return pair_reduce(ctx, buf, n, false);
}

static inline int pair_max(void *ctx, float *buf, size_t n, struct err *e)
{
	(void)e;
	return pair_reduce(ctx, buf, n, true);
}

/* The comm of rank k of p. */
static inline struct comm pair_comm(struct pair_rank *pr)
{
	struct comm c = { .size = 2, .rank = pr->rank, .ctx = pr, .allreduce_sum = pair_sum,
			  .allreduce_max = pair_max };

	return c;
}

/* A packed batch of random tokens. */
struct tbatch {
	int B, T;
	int start[16];
	int tokens[512];
};

static inline void tbatch_make(struct tbatch *b, const int *lens, int B, int vocab, uint64_t seed)
{
	b->B = B;
	b->start[0] = 0;
	for (int i = 0; i < B; i++)
		b->start[i + 1] = b->start[i] + lens[i];
	b->T = b->start[B];
	for (int t = 0; t < b->T; t++)
		b->tokens[t] = (int)(rng_u64(seed, RNG_DATA, 0, 0, (uint64_t)t) % (uint64_t)vocab);
}

#endif
