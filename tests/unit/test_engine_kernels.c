/* The CPU op table against the math: each forward against a double-
 * precision reference written here from the formulas, and each backward
 * against central differences of that reference (in double, so the
 * differences are exact to ~1e-9 and the fp32 backward is what is
 * measured).  Shapes are small but cross the attention tile, hold GQA
 * groups, padded vocabulary columns and rows another rank owns. */
#include "engine/kernels.h"
#include "engine/rng.h"
#include "unit.h"

#include <stdlib.h>
#include <string.h>

static const struct kernels *K;

/* Deterministic test data: normal values times scale. */
static void fill(float *x, size_t n, float scale, uint64_t seq)
{
	for (size_t i = 0; i < n; i++)
		x[i] = scale * (float)rng_normal(7, 99, 0, seq, i);
}

static double *to_double(const float *x, size_t n)
{
	double *d = malloc(n * sizeof *d);

	for (size_t i = 0; i < n; i++)
		d[i] = x[i];
	return d;
}

/* Largest |a - b| over the largest |b| (or 1e-30). */
static double rel_err(const float *a, const double *b, size_t n)
{
	double num = 0, den = 1e-30;

	for (size_t i = 0; i < n; i++) {
		num = fmax(num, fabs(a[i] - b[i]));
		den = fmax(den, fabs(b[i]));
	}
	return num / den;
}

/* A scalar loss of the double reference, as a function of one input
 * buffer; central differences of it give the reference gradient. */
typedef double (*loss_fn)(void *ctx, const double *x);

/* The largest difference between the fp32 gradient and f's central
 * differences at elements 0, stride, 2 stride, ... of x, over the
 * largest of those differences' size. */
static double grad_err(const float *grad, double *x, size_t n, size_t stride, loss_fn f,
		       void *ctx)
{
	const double h = 1e-6;
	double num = 0, den = 1e-30;

	for (size_t i = 0; i < n; i += stride) {
		double x0 = x[i], lp, lm, g;

		x[i] = x0 + h;
		lp = f(ctx, x);
		x[i] = x0 - h;
		lm = f(ctx, x);
		x[i] = x0;
		g = (lp - lm) / (2 * h);
		num = fmax(num, fabs(grad[i] - g));
		den = fmax(den, fabs(g));
	}
	return num / den;
}

/* --- matmul ------------------------------------------------------------------------------ */

static void test_matmul_transposes(void)
{
	int m = 5, n = 7, k = 9;
	float a[63], b[63], c[35], c0[35];
	double want[35];

	fill(a, 63, 1, 1);
	fill(b, 63, 1, 2);
	fill(c0, 35, 1, 3);
	for (int ta = 0; ta < 2; ta++)
		for (int tb = 0; tb < 2; tb++) {
			memcpy(c, c0, sizeof c);
			K->matmul(c, a, b, m, n, k, ta, tb, 0.5f, 2.0f);
			for (int i = 0; i < m; i++)
				for (int j = 0; j < n; j++) {
					double s = 0;

					for (int l = 0; l < k; l++)
						s += (double)(ta ? a[l * m + i] : a[i * k + l]) *
						     (tb ? b[j * k + l] : b[l * n + j]);
					want[i * n + j] = 0.5 * s + 2.0 * c0[i * n + j];
				}
			CHECK(rel_err(c, want, 35) < 1e-6);
		}
}

/* --- RMSNorm -------------------------------------------------------------------------------- */

struct norm_ctx {
	int T, H;
	double eps;
	const double *x, *w, *wy; /* wy: the loss weights of y */
	int wrt;                  /* 0: x, 1: w */
};

static double norm_loss(void *p, const double *v)
{
	struct norm_ctx *c = p;
	const double *x = c->wrt == 0 ? v : c->x, *w = c->wrt == 1 ? v : c->w;
	double L = 0;

	for (int t = 0; t < c->T; t++) {
		double ss = 0;

		for (int i = 0; i < c->H; i++)
			ss += x[t * c->H + i] * x[t * c->H + i];
		ss = 1 / sqrt(ss / c->H + c->eps);
		for (int i = 0; i < c->H; i++)
			L += c->wy[t * c->H + i] * x[t * c->H + i] * ss * w[i];
	}
	return L;
}

static void test_rmsnorm(void)
{
	enum { T = 3, H = 16 };
	float x[T * H], w[H], y[T * H], rstd[T], dy[T * H], dx[T * H], dw[H];
	double *xd, *wd, *dyd, yref[T * H];
	struct norm_ctx c = { .T = T, .H = H, .eps = 1e-5 };

	fill(x, T * H, 1, 10);
	fill(w, H, 0.3f, 11);
	for (int i = 0; i < H; i++)
		w[i] += 1;
	fill(dy, T * H, 1, 12);
	xd = to_double(x, T * H);
	wd = to_double(w, H);
	dyd = to_double(dy, T * H);
	K->rmsnorm_forward(y, rstd, x, w, T, H, 1e-5f);
	for (int t = 0; t < T; t++) {
		double ss = 0;

		for (int i = 0; i < H; i++)
			ss += xd[t * H + i] * xd[t * H + i];
		for (int i = 0; i < H; i++)
			yref[t * H + i] = xd[t * H + i] / sqrt(ss / H + 1e-5) * wd[i];
	}
	CHECK(rel_err(y, yref, T * H) < 1e-6);

	/* dx accumulates: start from 1 and subtract it after */
	for (int i = 0; i < T * H; i++)
		dx[i] = 1;
	memset(dw, 0, sizeof dw);
	K->rmsnorm_backward(dx, dw, dy, x, w, rstd, T, H);
	for (int i = 0; i < T * H; i++)
		dx[i] -= 1;
	c.x = xd;
	c.w = wd;
	c.wy = dyd;
	c.wrt = 0;
	CHECK(grad_err(dx, xd, T * H, 1, norm_loss, &c) < 1e-5);
	c.wrt = 1;
	CHECK(grad_err(dw, wd, H, 1, norm_loss, &c) < 1e-5);
	free(xd);
	free(wd);
	free(dyd);
}

/* Qwen3's per-head norms over a fused qkv of 2 groups of 2 query heads,
 * a key and a value head of 8: query heads normed with wq, key heads with
 * wk, value heads untouched. */
struct qkn_ctx {
	int T;
	struct heads h;
	const double *x, *wq, *wk, *wy;
	int wrt;                  /* 0: x, 1: wq, 2: wk */
};

static void qkn_ref(const struct qkn_ctx *c, const double *x, const double *wq,
		    const double *wk, double *y)
{
	int D = c->h.d, per = c->h.q + 2, n = c->T * c->h.groups * per;

	for (int r = 0; r < n; r++) {
		const double *xr = x + (size_t)r * D, *w = r % per < c->h.q ? wq : wk;
		double ss = 0;

		for (int i = 0; i < D; i++)
			ss += xr[i] * xr[i];
		for (int i = 0; i < D; i++)
			y[(size_t)r * D + i] = r % per == per - 1 ? xr[i] :
					       xr[i] / sqrt(ss / D + 1e-6) * w[i];
	}
}

static double qkn_loss(void *p, const double *v)
{
	struct qkn_ctx *c = p;
	double y[3 * 2 * 4 * 8], L = 0;

	qkn_ref(c, c->wrt == 0 ? v : c->x, c->wrt == 1 ? v : c->wq, c->wrt == 2 ? v : c->wk, y);
	for (size_t i = 0; i < sizeof y / sizeof *y; i++)
		L += c->wy[i] * y[i];
	return L;
}

static void test_qknorm(void)
{
	enum { T = 3, D = 8, N = T * 2 * 4 * D };
	struct qkn_ctx c = { .T = T, .h = { .groups = 2, .q = 2, .d = D } };
	float x[N], y[N], dq[N], wq[D], wk[D], rstd[T * 2 * 3], rstd2[T * 2 * 3];
	float dwq[D] = { 0 }, dwk[D] = { 0 };
	double *xd, *wqd, *wkd, *dyd, yref[N];

	fill(x, N, 1, 40);
	fill(wq, D, 0.3f, 41);
	fill(wk, D, 0.3f, 42);
	for (int i = 0; i < D; i++) {
		wq[i] += 1;
		wk[i] -= 1;
	}
	fill(dq, N, 1, 43);
	xd = to_double(x, N);
	wqd = to_double(wq, D);
	wkd = to_double(wk, D);
	dyd = to_double(dq, N);
	c.x = xd;
	c.wq = wqd;
	c.wk = wkd;
	c.wy = dyd;
	K->qknorm_forward(y, rstd, x, wq, wk, T, &c.h, 1e-6f);
	qkn_ref(&c, xd, wqd, wkd, yref);
	CHECK(rel_err(y, yref, N) < 1e-6);
	/* in place, as a forward that keeps no input runs it */
	memcpy(y, x, sizeof y);
	K->qknorm_forward(y, rstd2, y, wq, wk, T, &c.h, 1e-6f);
	CHECK(rel_err(y, yref, N) < 1e-6 && memcmp(rstd, rstd2, sizeof rstd) == 0);

	/* dq: the gradient of y in, that of x out; dwq and dwk accumulate */
	K->qknorm_backward(dq, dwq, dwk, x, wq, wk, rstd, T, &c.h);
	c.wrt = 0;
	CHECK(grad_err(dq, xd, N, 1, qkn_loss, &c) < 1e-5);
	c.wrt = 1;
	CHECK(grad_err(dwq, wqd, D, 1, qkn_loss, &c) < 1e-5);
	c.wrt = 2;
	CHECK(grad_err(dwk, wkd, D, 1, qkn_loss, &c) < 1e-5);
	free(xd);
	free(wqd);
	free(wkd);
	free(dyd);
}

/* --- bias ------------------------------------------------------------------------------------ */

static void test_bias(void)
{
	float y[12] = { 0 }, b[4] = { 1, 2, 3, 4 }, db[4] = { 0 }, dy[12];

	K->bias_forward(y, b, 3, 4);
	CHECK(y[0] == 1 && y[5] == 2 && y[11] == 4);
	for (int i = 0; i < 12; i++)
		dy[i] = (float)i;
	K->bias_backward(db, dy, 3, 4);
	CHECK(db[0] == 0 + 4 + 8 && db[3] == 3 + 7 + 11);
}

/* --- rotary embedding ------------------------------------------------------------------------ */

static void test_rope(void)
{
	struct heads h = { .groups = 2, .q = 2, .d = 8 };
	enum { T = 4, RS = 2 * 4 * 8 };
	int pos[T] = { 0, 1, 5, 1000 };
	double inv[4];
	float cs[T * 8], x[T * RS], y[T * RS], dy[T * RS], dx[T * RS];
	double dot1 = 0, dot2 = 0;

	for (int i = 0; i < 4; i++)
		inv[i] = pow(10000.0, -2.0 * i / 8);
	K->rope_table(cs, pos, inv, T, 8);
	fill(x, T * RS, 1, 20);
	memcpy(y, x, sizeof x);
	K->rope_forward(y, cs, T, &h);
	/* against the formula: x1 cos - x2 sin, x2 cos + x1 sin on q and k
	 * heads, v untouched */
	for (int t = 0; t < T; t++)
		for (int g = 0; g < 2; g++)
			for (int j = 0; j < 4; j++) {
				const float *a = x + t * RS + g * 32 + j * 8;
				const float *b = y + t * RS + g * 32 + j * 8;

				for (int i = 0; i < 4; i++) {
					double ang = pos[t] * inv[i], c = cos(ang), s = sin(ang);
					double w1 = j < 3 ? a[i] * c - a[4 + i] * s : a[i];
					double w2 = j < 3 ? a[4 + i] * c + a[i] * s : a[4 + i];

					CHECK(fabs(b[i] - w1) < 1e-5 && fabs(b[4 + i] - w2) < 1e-5);
				}
			}
	/* backward is the transpose: <R x, dy> = <x, Rᵀ dy> */
	fill(dy, T * RS, 1, 21);
	memcpy(dx, dy, sizeof dy);
	K->rope_backward(dx, cs, T, &h);
	for (int i = 0; i < T * RS; i++) {
		dot1 += (double)y[i] * dy[i];
		dot2 += (double)x[i] * dx[i];
	}
	CHECK_NEAR(dot1, dot2, 1e-5);
}

/* --- attention -------------------------------------------------------------------------------- */

struct attn_ctx {
	const int *start;
	int B;
	struct heads h;
	const double *qkv, *wo;   /* wo: the loss weights of out */
	double *out;              /* filled by the reference */
};

/* Reference causal GQA attention over packed sequences; returns
 * sum(wo ⊙ out). */
static double attn_ref(void *p, const double *qkv)
{
	struct attn_ctx *c = p;
	int G = c->h.groups, Q = c->h.q, D = c->h.d, rs = G * (Q + 2) * D, os = G * Q * D;
	double L = 0, sc[200];

	for (int b = 0; b < c->B; b++)
		for (int i = c->start[b]; i < c->start[b + 1]; i++)
			for (int a = 0; a < G * Q; a++) {
				int g = a / Q, j = a % Q;
				const double *q = qkv + i * rs + g * (Q + 2) * D + j * D;
				double m = -1e300, s = 0;

				for (int k = c->start[b]; k <= i; k++) {
					const double *kk = qkv + k * rs + g * (Q + 2) * D + Q * D;
					double d = 0;

					for (int l = 0; l < D; l++)
						d += q[l] * kk[l];
					sc[k - c->start[b]] = d / sqrt(D);
					m = fmax(m, sc[k - c->start[b]]);
				}
				for (int k = c->start[b]; k <= i; k++)
					s += exp(sc[k - c->start[b]] - m);
				for (int l = 0; l < D; l++) {
					double o = 0;

					for (int k = c->start[b]; k <= i; k++)
						o += exp(sc[k - c->start[b]] - m) / s *
						     qkv[k * rs + (g * (Q + 2) + Q + 1) * D + l];
					if (c->out)
						c->out[i * os + a * D + l] = o;
					L += c->wo[i * os + a * D + l] * o;
				}
			}
	return L;
}

static void test_attention(void)
{
	/* lengths 1, 70 (two tiles), 3, 130 (three tiles) */
	int start[5] = { 0, 1, 71, 74, 204 };
	enum { T = 204, G = 2, Q = 2, D = 8, RS = G * (Q + 2) * D, OS = G * Q * D };
	struct heads h = { G, Q, D };
	float *qkv = malloc(T * RS * sizeof *qkv), *out = malloc(T * OS * sizeof *out);
	float *lse = malloc(T * G * Q * sizeof *lse), *dout = malloc(T * OS * sizeof *dout);
	float *dqkv = malloc(T * RS * sizeof *dqkv);
	float *scratch = malloc(kernels_attn_scratch_floats(130, Q) * sizeof *scratch);
	double *ref = malloc(T * OS * sizeof *ref), *qd, *wd;
	struct attn_ctx c = { .start = start, .B = 4, .h = h };

	fill(qkv, T * RS, 1, 30);
	fill(dout, T * OS, 1, 31);
	qd = to_double(qkv, T * RS);
	wd = to_double(dout, T * OS);
	c.qkv = qd;
	c.wo = wd;
	c.out = ref;
	K->attention_forward(out, lse, qkv, start, 4, &h, scratch);
	attn_ref(&c, qd);
	CHECK(rel_err(out, ref, T * OS) < 1e-5);
	/* the first token attends to itself alone */
	CHECK(fabs(lse[0] - (qkv[0] * qkv[16] + qkv[1] * qkv[17] + qkv[2] * qkv[18] +
			     qkv[3] * qkv[19] + qkv[4] * qkv[20] + qkv[5] * qkv[21] +
			     qkv[6] * qkv[22] + qkv[7] * qkv[23]) / sqrt(8)) < 1e-5);

	K->attention_backward(dqkv, dout, out, lse, qkv, start, 4, &h, scratch);
	c.out = NULL;
	/* every 53rd input: each sequence, query, key and value head */
	CHECK(grad_err(dqkv, qd, T * RS, 53, attn_ref, &c) < 1e-4);
	free(qkv);
	free(out);
	free(lse);
	free(dout);
	free(dqkv);
	free(scratch);
	free(ref);
	free(qd);
	free(wd);
}

/* Decoding one query against a cache gives the packed forward's last
 * row, for queries at different lengths in different slots. */
static void test_attention_decode(void)
{
	enum { n = 40, G = 2, Q = 3, D = 4, RS = G * (Q + 2) * D, OS = G * Q * D, SLOTS = 3 };
	struct heads h = { G, Q, D };
	int start[2] = { 0, n }, slot[2] = { 2, 0 }, len[2] = { n, 17 };
	float qkv[n * RS], out[n * OS], lse[n * G * Q], dec[2 * OS], q[2 * RS];
	float kc[SLOTS * n * G * D], vc[SLOTS * n * G * D];
	float *scratch = malloc(kernels_attn_scratch_floats(n, Q) * sizeof *scratch);

	fill(qkv, n * RS, 1, 40);
	K->attention_forward(out, lse, qkv, start, 1, &h, scratch);
	memset(kc, 0, sizeof kc);
	memset(vc, 0, sizeof vc);
	for (int s = 0; s < 2; s++)
		for (int p = 0; p < len[s]; p++)
			for (int g = 0; g < G; g++)
				for (int l = 0; l < D; l++) {
					size_t at = ((size_t)slot[s] * n + p) * G * D + g * D + l;

					kc[at] = qkv[p * RS + g * (Q + 2) * D + Q * D + l];
					vc[at] = qkv[p * RS + g * (Q + 2) * D + (Q + 1) * D + l];
				}
	memcpy(q, qkv + (n - 1) * RS, sizeof(float) * RS);
	memcpy(q + RS, qkv + 16 * RS, sizeof(float) * RS);
	K->attention_decode(dec, q, kc, vc, (size_t)n * G * D, slot, len, 2, &h, scratch);
	for (int i = 0; i < OS; i++) {
		CHECK(fabs(dec[i] - out[(n - 1) * OS + i]) < 1e-5);
		CHECK(fabs(dec[OS + i] - out[16 * OS + i]) < 1e-5);
	}
	free(scratch);
}

/* --- SwiGLU ----------------------------------------------------------------------------------- */

struct glu_ctx {
	int T, F;
	const double *w;
};

static double glu_loss(void *p, const double *gu)
{
	struct glu_ctx *c = p;
	double L = 0;

	for (int t = 0; t < c->T; t++)
		for (int i = 0; i < c->F; i++) {
			double g = gu[t * 2 * c->F + i], u = gu[t * 2 * c->F + c->F + i];

			L += c->w[t * c->F + i] * g / (1 + exp(-g)) * u;
		}
	return L;
}

static void test_swiglu(void)
{
	enum { T = 3, F = 10 };
	float gu[T * 2 * F], act[T * F], dact[T * F], dgu[T * 2 * F];
	double *gd, *wd, ref[T * F];

	fill(gu, T * 2 * F, 2, 50);
	fill(dact, T * F, 1, 51);
	gd = to_double(gu, T * 2 * F);
	wd = to_double(dact, T * F);
	K->swiglu_forward(act, gu, T, F);
	for (int t = 0; t < T; t++)
		for (int i = 0; i < F; i++)
			ref[t * F + i] = gd[t * 2 * F + i] / (1 + exp(-gd[t * 2 * F + i])) *
					 gd[t * 2 * F + F + i];
	CHECK(rel_err(act, ref, T * F) < 1e-6);
	K->swiglu_backward(dgu, dact, gu, T, F);
	CHECK(grad_err(dgu, gd, T * 2 * F, 1, glu_loss, &(struct glu_ctx){ T, F, wd }) < 1e-5);
	free(gd);
	free(wd);
}

/* --- embedding ------------------------------------------------------------------------------- */

/* This rank holds ids [4, 10): other ids embed to zeros and get no
 * gradient; a repeated id sums its rows' gradients. */
static void test_embedding(void)
{
	enum { T = 5, H = 3, VL = 6, V0 = 4 };
	int tok[T] = { 4, 2, 9, 4, 10 };
	float emb[VL * H], x[T * H], dx[T * H], demb[VL * H] = { 0 };

	fill(emb, VL * H, 1, 60);
	fill(dx, T * H, 1, 61);
	K->embedding_forward(x, tok, emb, T, H, V0, VL);
	for (int i = 0; i < H; i++) {
		CHECK(x[i] == emb[i] && x[3 * H + i] == emb[i]);
		CHECK(x[2 * H + i] == emb[5 * H + i]);
		CHECK(x[H + i] == 0 && x[4 * H + i] == 0);
	}
	K->embedding_backward(demb, dx, tok, T, H, V0, VL);
	for (int i = 0; i < H; i++) {
		CHECK(demb[i] == dx[i] + dx[3 * H + i]);
		CHECK(demb[5 * H + i] == dx[2 * H + i]);
		CHECK(demb[H + i] == 0);
	}
}

/* --- the LM head's softmax ------------------------------------------------------------ */

struct lsm_ctx {
	int T, n, ld, v0;
	const int *target;
	const double *a, *b;   /* loss = sum a log p(target) + b entropy */
};

static double lsm_loss(void *p, const double *z)
{
	struct lsm_ctx *c = p;
	double L = 0;

	for (int t = 0; t < c->T; t++) {
		const double *row = z + t * c->ld;
		double m = -1e300, s = 0, ent = 0, lse;

		for (int k = 0; k < c->n; k++)
			m = fmax(m, row[k]);
		for (int k = 0; k < c->n; k++)
			s += exp(row[k] - m);
		lse = m + log(s);
		for (int k = 0; k < c->n; k++)
			ent -= exp(row[k] - lse) * (row[k] - lse);
		if (c->target[t] >= 0)
			L += c->a[t] * (row[c->target[t] - c->v0] - lse);
		L += c->b[t] * ent;
	}
	return L;
}

/* One rank holding the whole vocabulary (v0 0) with 3 padding columns:
 * the statistics give log-probs and entropies, and the backward is their
 * gradient (zero on the padding). */
static void test_logits(void)
{
	enum { T = 4, N = 13, LD = 16 };
	int target[T] = { 3, -1, 12, 0 };
	float z[T * LD], mx[T], s[3 * T], lse[T], ent[T], a[T], b[T];
	double *zd, *ad, *bd;
	struct lsm_ctx c = { .T = T, .n = N, .ld = LD, .v0 = 0, .target = target };

	fill(z, T * LD, 3, 70);
	for (int t = 0; t < T; t++)
		for (int k = N; k < LD; k++)
			z[t * LD + k] = 100; /* padding must not count */
	fill(a, T, 1, 71);
	fill(b, T, 1, 72);
	zd = to_double(z, T * LD);
	ad = to_double(a, T);
	bd = to_double(b, T);
	K->logits_max(mx, z, T, N, LD);
	K->logits_sums(s, z, mx, target, T, N, LD, 0);
	for (int t = 0; t < T; t++) {
		double m = -1e300, sum = 0, e = 0, l;

		for (int k = 0; k < N; k++)
			m = fmax(m, zd[t * LD + k]);
		CHECK(mx[t] == (float)m);
		for (int k = 0; k < N; k++)
			sum += exp(zd[t * LD + k] - m);
		l = m + log(sum);
		for (int k = 0; k < N; k++)
			e -= exp(zd[t * LD + k] - l) * (zd[t * LD + k] - l);
		lse[t] = mx[t] + logf(s[3 * t]);
		ent[t] = lse[t] - s[3 * t + 1] / s[3 * t];
		CHECK(fabs(lse[t] - l) < 1e-5);
		CHECK(fabs(ent[t] - e) < 1e-5);
		if (target[t] >= 0)
			CHECK(s[3 * t + 2] == z[t * LD + target[t]]);
		else
			CHECK(s[3 * t + 2] == 0);
	}
	K->logits_backward(z, lse, ent, target, a, b, T, N, LD, 0);
	c.a = ad;
	c.b = bd;
	CHECK(grad_err(z, zd, T * LD, 1, lsm_loss, &c) < 1e-5);
	for (int t = 0; t < T; t++)
		CHECK(z[t * LD + N] == 0);
	free(zd);
	free(ad);
	free(bd);
}

/* Split over two vocabulary ranks, the per-rank statistics sum (after
 * the max) to the whole vocabulary's. */
static void test_logits_vocab_parallel(void)
{
	enum { T = 3, V = 11, VL = 6 };
	int target[T] = { 2, 8, -1 };
	float z[T * 2 * VL], part[2][T * VL], mx[2][T], s[2][3 * T], whole[3 * T], wmx[T];

	fill(z, T * 2 * VL, 2, 80);
	for (int r = 0; r < 2; r++)
		for (int t = 0; t < T; t++)
			memcpy(part[r] + t * VL, z + t * 2 * VL + r * VL, VL * sizeof(float));
	K->logits_max(wmx, z, T, V, 2 * VL);
	K->logits_sums(whole, z, wmx, target, T, V, 2 * VL, 0);
	for (int r = 0; r < 2; r++)
		K->logits_max(mx[r], part[r], T, r ? V - VL : VL, VL);
	for (int t = 0; t < T; t++)
		CHECK(fmaxf(mx[0][t], mx[1][t]) == wmx[t]);
	for (int r = 0; r < 2; r++)
		K->logits_sums(s[r], part[r], wmx, target, T, r ? V - VL : VL, VL, r * VL);
	for (int i = 0; i < 3 * T; i++)
		CHECK_NEAR(s[0][i] + s[1][i], whole[i], 1e-6);
}

int main(void)
{
	K = kernels_cpu();
	RUN(test_matmul_transposes);
	RUN(test_rmsnorm);
	RUN(test_qknorm);
	RUN(test_bias);
	RUN(test_rope);
	RUN(test_attention);
	RUN(test_attention_decode);
	RUN(test_swiglu);
	RUN(test_embedding);
	RUN(test_logits);
	RUN(test_logits_vocab_parallel);
	return UNIT_END();
}
