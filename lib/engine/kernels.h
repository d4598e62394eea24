/* The engine's operations: the seam between the model's math (model.c,
 * generate.c) and the hardware that runs it.
 *
 * Notation: T tokens of a packed batch, H hidden, D head dim, and for this
 * rank's share of a layer: Gl KV groups, Q query heads per group, Al = Gl Q
 * query heads, Fl SwiGLU intermediate size, Vl vocabulary rows.  Every
 * matrix is row-major and contiguous unless a stride is named.  The fused
 * qkv activation [T, Gl (Q+2) D] holds, per token and group, the group's Q
 * query heads, then its key head, then its value head (Megatron's
 * linear_qkv order); the attention output [T, Al D] holds the query heads
 * in order g Q + j.
 *
 * An op table is a struct of function pointers; model.c calls nothing
 * else for arithmetic on activations, so a device backend is another
 * table whose pointers are device memory.  kernels_cpu() is the CPU one:
 * OpenBLAS's sgemm for the products, plain loops for the rest.
 *
 * Forward ops write their outputs; backward ops accumulate (+=) into
 * parameter gradients and, where the comment says so, into input
 * gradients, so a residual stream's gradient is summed in place.
 *
 * Besides these, model.c moves activations with memcpy and memset (a
 * stage's input, rows into the KV cache, a prompt's last row, logits
 * into their gathered row): a device table will need a copy op for them. */
#ifndef NEREUS_ENGINE_KERNELS_H
#define NEREUS_ENGINE_KERNELS_H

#include <stdbool.h>
#include <stddef.h>

/* Query rows per attention tile: the tile's scores, [ATTN_TILE, n] for a
 * sequence of n tokens, are the only O(n) scratch attention keeps. */
#define ATTN_TILE 64

/* This rank's heads of a layer. */
struct heads {
	int groups;  /* Gl: KV heads */
	int q;       /* Q: query heads per KV head */
	int d;       /* D: head dim (even) */
};

struct kernels {
	const char *name;

	/* c[m, n] = alpha · op(a) · op(b) + beta · c; op(a) is [m, k] (a is
	 * stored [k, m] when ta), op(b) is [k, n] (b is stored [n, k] when
	 * tb). */
	void (*matmul)(float *c, const float *a, const float *b, int m, int n, int k, bool ta,
		       bool tb, float alpha, float beta);
	/* y[i] = a[i] + b[i], i < n; y may be a or b. */
	void (*add)(float *y, const float *a, const float *b, size_t n);

	/* y[T, n] += bias[n] on every row; dbias[n] += sum over rows of dy. */
	void (*bias_forward)(float *y, const float *bias, int T, int n);
	void (*bias_backward)(float *dbias, const float *dy, int T, int n);

	/* y[T, H] = x · rstd · w with rstd[t] = 1 / sqrt(mean(x[t]²) + eps).
	 * Backward: dx += ∂/∂x, dw += ∂/∂w of sum(dy ⊙ y). */
	void (*rmsnorm_forward)(float *y, float *rstd, const float *x, const float *w, int T,
				int H, float eps);
	void (*rmsnorm_backward)(float *dx, float *dw, const float *dy, const float *x,
				 const float *w, const float *rstd, int T, int H);

	/* Qwen3's per-head RMSNorm of the fused qkv [T, Gl (Q+2) D]: y gets
	 * each query head of x normed with wq [D], each key head with wk [D]
	 * (rstd per head as rmsnorm_forward's), and each value head as it is;
	 * rstd[T, Gl (Q+1)] in the heads' order.  y may be x.  Backward
	 * turns dqkv, the gradient of y, into that of x in place (value heads
	 * pass through) and adds into dwq and dwk. */
	void (*qknorm_forward)(float *y, float *rstd, const float *x, const float *wq,
			       const float *wk, int T, const struct heads *h, float eps);
	void (*qknorm_backward)(float *dqkv, float *dwq, float *dwk, const float *x,
				const float *wq, const float *wk, const float *rstd, int T,
				const struct heads *h);

	/* Rotary embedding, Hugging Face's "half" convention.  rope_table
	 * fills cs[T, D] with cos(pos[t] inv_freq[i]) at [t, i] and the sine
	 * at [t, D/2 + i], i < D/2.  rope_forward rotates, in place, each
	 * query and key head of qkv [T, Gl (Q+2) D]: with x1, x2 the halves of
	 * a head, x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin.
	 * rope_backward applies the transposed rotation to their gradients. */
	void (*rope_table)(float *cs, const int *pos, const double *inv_freq, int T, int D);
	void (*rope_forward)(float *qkv, const float *cs, int T, const struct heads *h);
	void (*rope_backward)(float *dqkv, const float *cs, int T, const struct heads *h);

	/* Causal attention within each of the B sequences packed as
	 * [start[b], start[b+1]) of qkv: out[T, Al D], and lse[T, Al], the
	 * log-sum-exp of each query's scaled scores (scale 1/sqrt(D)), which
	 * is all the backward keeps to recompute the probabilities tile by
	 * tile.  scratch: kernels_attn_scratch_floats(longest sequence, Q).
	 * Backward writes dqkv (not +=) from dout, out, lse and qkv. */
	void (*attention_forward)(float *out, float *lse, const float *qkv, const int *start,
				  int B, const struct heads *h, float *scratch);
	void (*attention_backward)(float *dqkv, const float *dout, const float *out,
				   const float *lse, const float *qkv, const int *start, int B,
				   const struct heads *h, float *scratch);
	/* One new query per row r < n against a KV cache: row r's query heads
	 * are in qkv [n, Gl (Q+2) D]; its keys and values are rows
	 * [0, len[r]) of the cache slot slot[r], where slot s row p starts at
	 * kc + s slot_stride + p Gl D (vc alike).  out[n, Al D]. */
	void (*attention_decode)(float *out, const float *qkv, const float *kc, const float *vc,
				 size_t slot_stride, const int *slot, const int *len, int n,
				 const struct heads *h, float *scratch);

	/* act[T, Fl] = silu(gate) ⊙ up, gu[T, 2 Fl] holding per row the Fl
	 * gate values, then the Fl up values.  Backward writes dgu. */
	void (*swiglu_forward)(float *act, const float *gu, int T, int Fl);
	void (*swiglu_backward)(float *dgu, const float *dact, const float *gu, int T, int Fl);

	/* Vocabulary-parallel embedding: this rank's rows are tokens
	 * [v0, v0 + Vl) of emb[Vl, H].  x[T, H] gets the token's row, or zeros
	 * when another rank holds it; backward: demb rows += dx. */
	void (*embedding_forward)(float *x, const int *tokens, const float *emb, int T, int H,
				  int v0, int Vl);
	void (*embedding_backward)(float *demb, const float *dx, const int *tokens, int T, int H,
				   int v0, int Vl);

	/* The LM head's softmax over logits z[T, ld] of which the first n
	 * columns are real vocabulary ids v0 .. v0 + n - 1 (the rest is
	 * padding, ignored).  logits_max: mx[t] = the row's max (-inf when
	 * n = 0).  logits_sums, given the group-wide max: s[3 t] = sum
	 * exp(z - mx), s[3 t + 1] = sum exp(z - mx) z, s[3 t + 2] = z at
	 * column target[t] - v0 when this rank holds it, else 0.  Summed over
	 * the vocabulary-parallel group these give lse = mx + log s0,
	 * log p(target) = z_target - lse and the entropy lse - s1 / s0.
	 * logits_backward overwrites z with the gradient of
	 * dlogp[t] log p(target[t]) + dent[t] entropy[t] with respect to z
	 * (target -1: no log-prob term; dlogp or dent NULL: zero). */
	void (*logits_max)(float *mx, const float *z, int T, int n, int ld);
	void (*logits_sums)(float *s, const float *z, const float *mx, const int *target, int T,
			    int n, int ld, int v0);
	void (*logits_backward)(float *z, const float *lse, const float *ent, const int *target,
				const float *dlogp, const float *dent, int T, int n, int ld,
				int v0);
};

/* Scratch floats the attention ops need for sequences of up to maxlen
 * tokens with q query heads per group. */
size_t kernels_attn_scratch_floats(int maxlen, int q);

/* The CPU table. */
const struct kernels *kernels_cpu(void);

#endif
