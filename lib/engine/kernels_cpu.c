/* The CPU op table of kernels.h: OpenBLAS's sgemm for every product
 * (attention included, tile by tile), plain loops for the rest.  Sums
 * that set a scale (RMSNorm's mean square, the softmax denominators) are
 * accumulated in double. */
#include "engine/kernels.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

static void matmul(float *c, const float *a, const float *b, int m, int n, int k, bool ta,
		   bool tb, float alpha, float beta)
{
	cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
		    m, n, k, alpha, a, ta ? m : k, b, tb ? k : n, beta, c, n);
}

static void add(float *y, const float *a, const float *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		y[i] = a[i] + b[i];
}

static void bias_forward(float *y, const float *bias, int T, int n)
{
	for (int t = 0; t < T; t++)
		for (int i = 0; i < n; i++)
			y[(size_t)t * n + i] += bias[i];
}

static void bias_backward(float *dbias, const float *dy, int T, int n)
{
	for (int t = 0; t < T; t++)
		for (int i = 0; i < n; i++)
			dbias[i] += dy[(size_t)t * n + i];
}

/* --- RMSNorm ---------------------------------------------------------------------------- */

static void rmsnorm_forward(float *y, float *rstd, const float *x, const float *w, int T, int H,
			    float eps)
{
	for (int t = 0; t < T; t++) {
		const float *xt = x + (size_t)t * H;
		float *yt = y + (size_t)t * H;
		double ss = 0;
		float r;

		for (int i = 0; i < H; i++)
			ss += (double)xt[i] * xt[i];
		r = (float)(1.0 / sqrt(ss / H + eps));
		rstd[t] = r;
		for (int i = 0; i < H; i++)
			yt[i] = xt[i] * r * w[i];
	}
}

/* y = x r w with r = (mean x² + eps)^(-1/2), so dr/dx_i = -r³ x_i / H and
 * dx_i = r w_i dy_i - (r³ / H) x_i sum_j w_j dy_j x_j. */
static void rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x,
			     const float *w, const float *rstd, int T, int H)
{
	for (int t = 0; t < T; t++) {
		const float *xt = x + (size_t)t * H, *dyt = dy + (size_t)t * H;
		float *dxt = dx + (size_t)t * H;
		float r = rstd[t], c;
		double dot = 0;

		for (int i = 0; i < H; i++) {
			dot += (double)w[i] * dyt[i] * xt[i];
			dw[i] += dyt[i] * xt[i] * r;
		}
		c = (float)(dot * r * r * r / H);
		for (int i = 0; i < H; i++)
			dxt[i] += r * w[i] * dyt[i] - c * xt[i];
	}
}

/* One row of n: y = x r w, r = (mean x² + eps)^(-1/2); y may be x. */
static float rms_row(float *y, const float *x, const float *w, int n, float eps)
{
	double ss = 0;
	float r;

	for (int i = 0; i < n; i++)
		ss += (double)x[i] * x[i];
	r = (float)(1.0 / sqrt(ss / n + eps));
	for (int i = 0; i < n; i++)
		y[i] = x[i] * r * w[i];
	return r;
}

/* rmsnorm_backward's gradient for one row, written over dy (dx = dy is
 * allowed as every dy is read before any dx is written). */
static void rms_row_backward(float *dx, float *dw, const float *dy, const float *x,
			     const float *w, float r, int n)
{
	double dot = 0;
	float c;

	for (int i = 0; i < n; i++) {
		dot += (double)w[i] * dy[i] * x[i];
		dw[i] += dy[i] * x[i] * r;
	}
	c = (float)(dot * r * r * r / n);
	for (int i = 0; i < n; i++)
		dx[i] = r * w[i] * dy[i] - c * x[i];
}

static void qknorm_forward(float *y, float *rstd, const float *x, const float *wq,
			   const float *wk, int T, const struct heads *h, float eps)
{
	int D = h->d, per = h->q + 2;
	size_t rs = (size_t)h->groups * per * D;

	for (int t = 0; t < T; t++)
		for (int g = 0; g < h->groups; g++)
			for (int j = 0; j < per; j++) {
				size_t at = t * rs + ((size_t)g * per + j) * D;

				if (j == per - 1) {
					if (y != x)
						memcpy(y + at, x + at, (size_t)D * sizeof *y);
					continue;
				}
				*rstd++ = rms_row(y + at, x + at, j < h->q ? wq : wk, D, eps);
			}
}

static void qknorm_backward(float *dqkv, float *dwq, float *dwk, const float *x,
			    const float *wq, const float *wk, const float *rstd, int T,
			    const struct heads *h)
{
	int D = h->d, per = h->q + 2;
	size_t rs = (size_t)h->groups * per * D;

	for (int t = 0; t < T; t++)
		for (int g = 0; g < h->groups; g++)
			for (int j = 0; j < per - 1; j++) {
				size_t at = t * rs + ((size_t)g * per + j) * D;
				bool q = j < h->q;

				rms_row_backward(dqkv + at, q ? dwq : dwk, dqkv + at, x + at,
						 q ? wq : wk, *rstd++, D);
			}
}

/* --- rotary embedding -------------------------------------------------------------------- */

static void rope_table(float *cs, const int *pos, const double *inv_freq, int T, int D)
{
	int half = D / 2;

	for (int t = 0; t < T; t++)
		for (int i = 0; i < half; i++) {
			double a = pos[t] * inv_freq[i];

			cs[(size_t)t * D + i] = (float)cos(a);
			cs[(size_t)t * D + half + i] = (float)sin(a);
		}
}

/* Rotate each query and key head of every row by the row's angles, sin
 * taken with sign sgn (-1: the inverse rotation, which is the transpose). */
static void rope_apply(float *qkv, const float *cs, int T, const struct heads *h, float sgn)
{
	int D = h->d, half = D / 2, per = h->q + 1, gs = (h->q + 2) * D;
	size_t rs = (size_t)h->groups * gs;

	for (int t = 0; t < T; t++) {
		const float *c = cs + (size_t)t * D, *s = c + half;

		for (int g = 0; g < h->groups; g++)
			for (int j = 0; j < per; j++) {
				float *x = qkv + t * rs + (size_t)g * gs + (size_t)j * D;

				for (int i = 0; i < half; i++) {
					float x1 = x[i], x2 = x[half + i], sn = sgn * s[i];

					x[i] = x1 * c[i] - x2 * sn;
					x[half + i] = x2 * c[i] + x1 * sn;
				}
			}
	}
}

static void rope_forward(float *qkv, const float *cs, int T, const struct heads *h)
{
	rope_apply(qkv, cs, T, h, 1.0f);
}

static void rope_backward(float *dqkv, const float *cs, int T, const struct heads *h)
{
	rope_apply(dqkv, cs, T, h, -1.0f);
}

/* --- attention ------------------------------------------------------------------------------ */

size_t kernels_attn_scratch_floats(int maxlen, int q)
{
	size_t tile = 2 * (size_t)ATTN_TILE * (size_t)maxlen, dec = (size_t)q * (size_t)maxlen;

	return tile > dec ? tile : dec;
}

/* Softmax of the first lim entries of row (scores already scaled), the
 * rest set to zero; returns the log-sum-exp. */
static float softmax_row(float *row, int lim, int width)
{
	float m = row[0];
	double sum = 0;
	float inv;

	for (int c = 1; c < lim; c++)
		if (row[c] > m)
			m = row[c];
	for (int c = 0; c < lim; c++) {
		row[c] = expf(row[c] - m);
		sum += row[c];
	}
	inv = (float)(1.0 / sum);
	for (int c = 0; c < lim; c++)
		row[c] *= inv;
	for (int c = lim; c < width; c++)
		row[c] = 0;
	return m + (float)log(sum);
}

/* Where one query head of one sequence lies: the offsets of its first
 * rows of q, k and v in qkv (row stride rs), of out (stride os) and of
 * lse (stride ls); n tokens. */
struct attn_head {
	size_t q, k, v, o, l;
	int n, rs, os, ls, d;
};

static struct attn_head head_at(const int *start, int b, int g, int j, const struct heads *h)
{
	int Q = h->q, D = h->d, rs = h->groups * (Q + 2) * D, nh = h->groups * Q;
	size_t row = (size_t)start[b] * rs + (size_t)g * (Q + 2) * D;
	struct attn_head a = {
		.q = row + (size_t)j * D, .k = row + (size_t)Q * D, .v = row + (size_t)(Q + 1) * D,
		.o = (size_t)start[b] * nh * D + (size_t)(g * Q + j) * D,
		.l = (size_t)start[b] * nh + (size_t)(g * Q + j),
		.n = start[b + 1] - start[b], .rs = rs, .os = nh * D, .ls = nh, .d = D,
	};

	return a;
}

/* ATTN_TILE queries at a time: the tile's scores against every key up to
 * its last query (S = Q Kᵀ / √D), the causal softmax row by row, then
 * out = P V. */
static void head_forward(const struct attn_head *a, float *out, float *lse, const float *qkv,
			 float *S)
{
	float scale = 1.0f / sqrtf((float)a->d);
	int rs = a->rs;

	for (int i0 = 0; i0 < a->n; i0 += ATTN_TILE) {
		int nb = a->n - i0 < ATTN_TILE ? a->n - i0 : ATTN_TILE, kl = i0 + nb;

		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nb, kl, a->d, scale,
			    qkv + a->q + (size_t)i0 * rs, rs, qkv + a->k, rs, 0.0f, S, kl);
		for (int r = 0; r < nb; r++)
			lse[a->l + (size_t)(i0 + r) * a->ls] =
				softmax_row(S + (size_t)r * kl, i0 + r + 1, kl);
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nb, a->d, kl, 1.0f, S, kl,
			    qkv + a->v, rs, 0.0f, out + a->o + (size_t)i0 * a->os, a->os);
	}
}

static void attention_forward(float *out, float *lse, const float *qkv, const int *start, int B,
			      const struct heads *h, float *scratch)
{
	for (int b = 0; b < B; b++)
		for (int g = 0; g < h->groups; g++)
			for (int j = 0; j < h->q; j++) {
				struct attn_head a = head_at(start, b, g, j, h);

				head_forward(&a, out, lse, qkv, scratch);
			}
}

/* With P the tile's probabilities (recomputed from lse), dP = dO Vᵀ,
 * dS = P ⊙ (dP - rowsum(dO ⊙ O)); then dQ = dS K / √D, dK = dSᵀ Q / √D and
 * dV = Pᵀ dO, summed over the tiles into dqkv. */
static void head_backward(const struct attn_head *a, float *dqkv, const float *dout,
			  const float *out, const float *lse, const float *qkv, float *P, float *dP)
{
	float scale = 1.0f / sqrtf((float)a->d);
	int rs = a->rs, os = a->os, D = a->d;

	for (int i0 = 0; i0 < a->n; i0 += ATTN_TILE) {
		int nb = a->n - i0 < ATTN_TILE ? a->n - i0 : ATTN_TILE, kl = i0 + nb;
		const float *dO = dout + a->o + (size_t)i0 * os, *O = out + a->o + (size_t)i0 * os;
		const float *qt = qkv + a->q + (size_t)i0 * rs;

		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nb, kl, D, scale, qt, rs,
			    qkv + a->k, rs, 0.0f, P, kl);
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nb, kl, D, 1.0f, dO, os,
			    qkv + a->v, rs, 0.0f, dP, kl);
		for (int r = 0; r < nb; r++) {
			float *p = P + (size_t)r * kl, *dp = dP + (size_t)r * kl;
			float l = lse[a->l + (size_t)(i0 + r) * a->ls], di = 0;
			int lim = i0 + r + 1;

			for (int c = 0; c < D; c++)
				di += dO[(size_t)r * os + c] * O[(size_t)r * os + c];
			for (int c = 0; c < lim; c++) {
				p[c] = expf(p[c] - l);
				dp[c] = p[c] * (dp[c] - di);
			}
			for (int c = lim; c < kl; c++)
				p[c] = dp[c] = 0;
		}
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nb, D, kl, scale, dP, kl,
			    qkv + a->k, rs, 1.0f, dqkv + a->q + (size_t)i0 * rs, rs);
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kl, D, nb, scale, dP, kl, qt,
			    rs, 1.0f, dqkv + a->k, rs);
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kl, D, nb, 1.0f, P, kl, dO, os,
			    1.0f, dqkv + a->v, rs);
	}
}

static void attention_backward(float *dqkv, const float *dout, const float *out,
			       const float *lse, const float *qkv, const int *start, int B,
			       const struct heads *h, float *scratch)
{
	memset(dqkv, 0, (size_t)start[B] * h->groups * (h->q + 2) * h->d * sizeof *dqkv);
	for (int b = 0; b < B; b++)
		for (int g = 0; g < h->groups; g++)
			for (int j = 0; j < h->q; j++) {
				struct attn_head a = head_at(start, b, g, j, h);

				head_backward(&a, dqkv, dout, out, lse, qkv, scratch,
					      scratch + (size_t)ATTN_TILE * a.n);
			}
}

/* A group's Q query heads together against the slot's keys: S[Q, len] =
 * q Kᵀ / √D, softmax, out = S V. */
static void attention_decode(float *out, const float *qkv, const float *kc, const float *vc,
			     size_t slot_stride, const int *slot, const int *len, int n,
			     const struct heads *h, float *scratch)
{
	int G = h->groups, Q = h->q, D = h->d;
	int rs = G * (Q + 2) * D, os = G * Q * D, cs = G * D;
	float scale = 1.0f / sqrtf((float)D);

	for (int r = 0; r < n; r++) {
		int L = len[r];

		for (int g = 0; g < G; g++) {
			const float *q = qkv + (size_t)r * rs + (size_t)g * (Q + 2) * D;
			const float *K = kc + (size_t)slot[r] * slot_stride + (size_t)g * D;
			const float *V = vc + (size_t)slot[r] * slot_stride + (size_t)g * D;
			float *o = out + (size_t)r * os + (size_t)g * Q * D;

			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, Q, L, D, scale, q, D,
				    K, cs, 0.0f, scratch, L);
			for (int j = 0; j < Q; j++)
				softmax_row(scratch + (size_t)j * L, L, L);
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, Q, D, L, 1.0f,
				    scratch, L, V, cs, 0.0f, o, D);
		}
	}
}

/* --- SwiGLU ---------------------------------------------------------------------------------- */

static void swiglu_forward(float *act, const float *gu, int T, int Fl)
{
	for (int t = 0; t < T; t++) {
		const float *g = gu + (size_t)t * 2 * Fl, *u = g + Fl;
		float *a = act + (size_t)t * Fl;

		for (int i = 0; i < Fl; i++)
			a[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
	}
}

/* silu(g) = g σ(g), silu'(g) = σ(g) (1 + g (1 - σ(g))). */
static void swiglu_backward(float *dgu, const float *dact, const float *gu, int T, int Fl)
{
	for (int t = 0; t < T; t++) {
		const float *g = gu + (size_t)t * 2 * Fl, *u = g + Fl, *da = dact + (size_t)t * Fl;
		float *dg = dgu + (size_t)t * 2 * Fl, *du = dg + Fl;

		for (int i = 0; i < Fl; i++) {
			float s = 1.0f / (1.0f + expf(-g[i]));

			dg[i] = da[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
			du[i] = da[i] * g[i] * s;
		}
	}
}

/* --- embedding ------------------------------------------------------------------------------- */

static void embedding_forward(float *x, const int *tokens, const float *emb, int T, int H,
			      int v0, int Vl)
{
	for (int t = 0; t < T; t++) {
		int r = tokens[t] - v0;

		if (r >= 0 && r < Vl)
			memcpy(x + (size_t)t * H, emb + (size_t)r * H, (size_t)H * sizeof *x);
		else
			memset(x + (size_t)t * H, 0, (size_t)H * sizeof *x);
	}
}

static void embedding_backward(float *demb, const float *dx, const int *tokens, int T, int H,
			       int v0, int Vl)
{
	for (int t = 0; t < T; t++) {
		int r = tokens[t] - v0;

		if (r >= 0 && r < Vl)
			for (int i = 0; i < H; i++)
				demb[(size_t)r * H + i] += dx[(size_t)t * H + i];
	}
}

/* --- the LM head's softmax ------------------------------------------------------------------- */

static void logits_max(float *mx, const float *z, int T, int n, int ld)
{
	for (int t = 0; t < T; t++) {
		const float *row = z + (size_t)t * ld;
		float m = -INFINITY;

		for (int c = 0; c < n; c++)
			if (row[c] > m)
				m = row[c];
		mx[t] = m;
	}
}

static void logits_sums(float *s, const float *z, const float *mx, const int *target, int T,
			int n, int ld, int v0)
{
	for (int t = 0; t < T; t++) {
		const float *row = z + (size_t)t * ld;
		double s0 = 0, s1 = 0;
		int y = target[t] - v0;

		for (int c = 0; c < n; c++) {
			double e = expf(row[c] - mx[t]);

			s0 += e;
			s1 += e * row[c];
		}
		s[3 * t] = (float)s0;
		s[3 * t + 1] = (float)s1;
		s[3 * t + 2] = target[t] >= 0 && y >= 0 && y < n ? row[y] : 0.0f;
	}
}

/* With p = exp(z - lse): ∂ log p_y / ∂z_c = [c = y] - p_c and, the entropy
 * being -sum p log p, ∂H / ∂z_c = -p_c (log p_c + H). */
static void logits_backward(float *z, const float *lse, const float *ent, const int *target,
			    const float *dlogp, const float *dent, int T, int n, int ld, int v0)
{
	for (int t = 0; t < T; t++) {
		float *row = z + (size_t)t * ld;
		float dl = dlogp && target[t] >= 0 ? dlogp[t] : 0.0f, de = dent ? dent[t] : 0.0f;
		float l = lse[t], e = ent[t];
		int y = target[t] - v0;

		for (int c = 0; c < n; c++) {
			float lp = row[c] - l, p = expf(lp);

			row[c] = -dl * p - de * p * (lp + e);
		}
		if (target[t] >= 0 && y >= 0 && y < n)
			row[y] += dl;
		for (int c = n; c < ld; c++)
			row[c] = 0;
	}
}

static const struct kernels cpu = {
	.name = "cpu",
	.matmul = matmul,
	.add = add,
	.bias_forward = bias_forward,
	.bias_backward = bias_backward,
	.rmsnorm_forward = rmsnorm_forward,
	.rmsnorm_backward = rmsnorm_backward,
	.qknorm_forward = qknorm_forward,
	.qknorm_backward = qknorm_backward,
	.rope_table = rope_table,
	.rope_forward = rope_forward,
	.rope_backward = rope_backward,
	.attention_forward = attention_forward,
	.attention_backward = attention_backward,
	.attention_decode = attention_decode,
	.swiglu_forward = swiglu_forward,
	.swiglu_backward = swiglu_backward,
	.embedding_forward = embedding_forward,
	.embedding_backward = embedding_backward,
	.logits_max = logits_max,
	.logits_sums = logits_sums,
	.logits_backward = logits_backward,
};

const struct kernels *kernels_cpu(void)
{
	return &cpu;
}
