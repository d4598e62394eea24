/* The decoder's gradient and its splits: on tiny configurations (GQA,
 * q/k/v biases, tied and untied LM heads, a scalar score head, an odd
 * vocabulary, Qwen3's per-head q/k norms with heads wider than hidden /
 * heads) the backward's gradient of every parameter tensor agrees
 * with central differences of the forward's loss along a random
 * direction; two pipeline stages give the whole model's outputs and
 * gradients bit for bit; two tensor-parallel ranks on two threads, with a
 * barrier-based all-reduce, give the one-rank results; bad batches are
 * refused by name; the activations take what model_acts_floats says. */
#include "unit.h"
#include "unitengine.h"


/* loss = sum_t a_t log p_t + b_t H_t + c_t v_t, summed in double */
struct loss_w {
	float a[512], b[512], c[512];
};

static void loss_weights(struct loss_w *lw, int T)
{
	for (int t = 0; t < T; t++) {
		lw->a[t] = (float)rng_normal(3, 50, 0, 0, (uint64_t)t);
		lw->b[t] = (float)rng_normal(3, 50, 0, 1, (uint64_t)t);
		lw->c[t] = (float)rng_normal(3, 50, 0, 2, (uint64_t)t);
	}
}

static double run_loss(struct tiny *t, struct model_acts *a, const struct batch *b,
		       const struct loss_w *lw)
{
	float logp[512], ent[512], val[512];
	struct model_out out = { logp, ent, val };
	struct err e = { 0 };
	double L = 0;

	CHECK(model_forward(&t->m, a, b, NULL, &out, &e) == NR_OK);
	for (int i = 0; i < b->T; i++)
		L += t->m.c.score_head ? (double)lw->c[i] * val[i]
				       : (double)lw->a[i] * logp[i] + (double)lw->b[i] * ent[i];
	return L;
}

/* For each piece: the gradient along a random direction u against the
 * Richardson-extrapolated central difference of the loss along u (the
 * h² terms cancel, so steps can be large enough to rise above fp32's
 * rounding). */
static void check_gradient_step(struct arch a, float temperature, int head_chunk, double step)
{
	static const int lens[] = { 5, 1, 9, 4 };
	struct tiny t;
	struct tbatch tb;
	struct model_acts acts;
	struct loss_w lw;
	struct err e = { 0 };

	if (tiny_init(&t, &a, 1, 1, 0, 0, comm_self(), 0.3f)) {
		CHECK(0);
		return;
	}
	tbatch_make(&tb, lens, 4, a.vocab, 11);
	struct batch b = { .B = tb.B, .T = tb.T, .tokens = tb.tokens, .start = tb.start,
			   .temperature = temperature };

	loss_weights(&lw, tb.T);
	CHECK(model_acts_init(&acts, &t.m, 32, 16, true, &e) == NR_OK);
	if (head_chunk)
		acts.head_chunk = head_chunk;
	run_loss(&t, &acts, &b, &lw);
	CHECK(model_backward(&t.m, &acts, &b,
			     &(struct model_dout){ lw.a, lw.b, lw.c }, NULL, &e) == NR_OK);
	for (size_t i = 0; i < t.np; i++) {
		const struct piece *p = &t.p[i];
		int64_t vol = box_volume(&p->box);
		float *w = t.w + p->local_off, *g = t.g + p->local_off;
		float *w0 = malloc(vol * sizeof *w0);
		double an = 0, d[2];

		double *u = malloc(vol * sizeof *u), norm = 0;

		/* a direction of unit length, steps of step and twice it along it */
		for (int64_t j = 0; j < vol; j++) {
			u[j] = rng_normal(5, 60, 0, i, j);
			norm += u[j] * u[j];
		}
		for (int64_t j = 0; j < vol; j++)
			u[j] /= sqrt(norm);
		memcpy(w0, w, vol * sizeof *w0);
		for (int k = 0; k < 2; k++) {
			double h = k ? 2 * step : step, lp, lm;

			for (int64_t j = 0; j < vol; j++)
				w[j] = w0[j] + (float)(h * u[j]);
			lp = run_loss(&t, &acts, &b, &lw);
			for (int64_t j = 0; j < vol; j++)
				w[j] = w0[j] - (float)(h * u[j]);
			lm = run_loss(&t, &acts, &b, &lw);
			d[k] = (lp - lm) / (2 * h);
		}
		memcpy(w, w0, vol * sizeof *w0);
		for (int64_t j = 0; j < vol; j++)
			an += g[j] * u[j];
		free(u);
		double fd = (4 * d[0] - d[1]) / 3;

		/* fp32 forwards leave ~1e-4 of noise in the differences */
		if (!(fabs(an - fd) <= 1e-3 * fabs(fd) + 3e-4))
			printf("#   tensor '%s': backward %.7g, differences %.7g\n",
			       t.lo.tensors[p->tensor].name, an, fd);
		CHECK(fabs(an - fd) <= 1e-3 * fabs(fd) + 3e-4);
		free(w0);
	}
	model_acts_free(&acts);
	tiny_free(&t);
}

static void check_gradient(struct arch a, float temperature, int head_chunk)
{
	check_gradient_step(a, temperature, head_chunk, 0.03);
}

static void test_grad_gqa_bias_untied(void)
{
	check_gradient(tiny_arch(2, 16, 4, 2, 24, 37, false, true, false), 0.7f, 0);
}

/* The LM head in chunks of 5 tokens, the logits recomputed in the
 * backward. */
static void test_grad_head_chunks(void)
{
	check_gradient(tiny_arch(1, 16, 4, 2, 24, 37, false, false, false), 0.7f, 5);
}

static void test_grad_tied(void)
{
	check_gradient(tiny_arch(2, 16, 4, 1, 20, 29, true, false, false), 1.0f, 0);
}

static void test_grad_score_head(void)
{
	check_gradient(tiny_arch(2, 16, 4, 2, 24, 37, false, true, true), 1.0f, 0);
}

/* Qwen3's shape: heads of 6 where hidden / heads is 4, q/k norms. */
static struct arch tiny_qwen3(bool tied, bool bias, bool score)
{
	struct arch a = tiny_arch(2, 16, 4, 2, 24, 37, tied, bias, score);

	a.head_dim = 6;
	a.qk_norm = true;
	return a;
}

/* The q/k norms' weights scale every score, so the loss curves along
 * them more than along the others: smaller steps keep the differences'
 * h⁴ terms below the tolerance. */
static void test_grad_qwen3(void)
{
	check_gradient_step(tiny_qwen3(false, false, false), 0.7f, 0, 0.015);
	check_gradient_step(tiny_qwen3(true, false, false), 1.0f, 3, 0.015);
	check_gradient_step(tiny_qwen3(false, true, true), 1.0f, 0, 0.015);
}

/* --- splits --------------------------------------------------------------------------------- */

struct result {
	float logp[512], ent[512], val[512];
	float **grad;      /* per global tensor, in global order */
	int ntensors;
};

static void result_alloc(struct result *r, const struct layout *lo)
{
	r->ntensors = lo->ntensors;
	r->grad = calloc((size_t)lo->ntensors, sizeof *r->grad);
	for (int k = 0; k < lo->ntensors; k++)
		r->grad[k] = calloc((size_t)gtensor_numel(&lo->tensors[k]), sizeof(float));
}

static void result_free(struct result *r)
{
	for (int k = 0; k < r->ntensors; k++)
		free(r->grad[k]);
	free(r->grad);
}

static const int split_lens[] = { 7, 3, 12 };

static void whole_model(const struct arch *a, struct result *r)
{
	struct tiny t;
	struct tbatch tb;
	struct model_acts acts;
	struct loss_w lw;
	struct err e = { 0 };

	CHECK(tiny_init(&t, a, 1, 1, 0, 0, comm_self(), 0.3f) == NR_OK);
	tbatch_make(&tb, split_lens, 3, a->vocab, 21);
	loss_weights(&lw, tb.T);
	struct batch b = { tb.B, tb.T, tb.tokens, tb.start, NULL, 0.9f };

	result_alloc(r, &t.lo);
	CHECK(model_acts_init(&acts, &t.m, tb.T, 16, true, &e) == NR_OK);
	CHECK(model_forward(&t.m, &acts, &b, NULL, &(struct model_out){ r->logp, r->ent, r->val },
			    &e) == NR_OK);
	CHECK(model_backward(&t.m, &acts, &b, &(struct model_dout){ lw.a, lw.b, lw.c }, NULL,
			     &e) == NR_OK);
	for (int k = 0; k < t.lo.ntensors; k++)
		tiny_gather(&t, t.g, k, r->grad[k]);
	model_acts_free(&acts);
	tiny_free(&t);
}

/* Stage 0 then stage 1 forward, stage 1 then stage 0 backward, the
 * hidden states and their gradient handed over as a schedule would. */
static void check_pipeline_split(struct arch a)
{
	struct result whole, r;
	struct tiny s[2];
	struct model_acts acts[2];
	struct tbatch tb;
	struct loss_w lw;
	struct err e = { 0 };
	static const int stages[2] = { 1, 2 };

	whole_model(&a, &whole);
	tbatch_make(&tb, split_lens, 3, a.vocab, 21);
	loss_weights(&lw, tb.T);
	struct batch b = { tb.B, tb.T, tb.tokens, tb.start, NULL, 0.9f };

	for (int p = 0; p < 2; p++) {
		struct err e2 = { 0 };

		memset(&s[p], 0, sizeof s[p]);
		CHECK(layout_init(&s[p].lo, &a, 1, 2, 1, false, stages, &e2) == NR_OK);
		CHECK(layout_pieces(&s[p].lo, KIND_WEIGHT, 0, p, 0, &s[p].p, &s[p].np, &e2) ==
		      NR_OK);
		CHECK(model_init(&s[p].m, &s[p].lo, 0, p, kernels_cpu(), comm_self(), &e2) ==
		      NR_OK);
		s[p].n = (size_t)(s[p].p[s[p].np - 1].local_off + s[p].p[s[p].np - 1].local_len);
		s[p].w = calloc(s[p].n, sizeof(float));
		s[p].g = calloc(s[p].n, sizeof(float));
		tiny_fill(&s[p], 0.3f, 1);
		CHECK(model_bind(&s[p].m, &s[p].lo, s[p].w, s[p].g, &e2) == NR_OK);
		CHECK(model_acts_init(&acts[p], &s[p].m, tb.T, 16, true, &e2) == NR_OK);
	}
	CHECK(s[0].m.c.last == 1 && s[1].m.c.first == 1);
	result_alloc(&r, &s[0].lo);
	CHECK(model_forward(&s[0].m, &acts[0], &b, NULL, &(struct model_out){ 0 }, &e) == NR_OK);
	CHECK(model_forward(&s[1].m, &acts[1], &b, model_acts_output(&acts[0]),
			    &(struct model_out){ r.logp, r.ent, NULL }, &e) == NR_OK);
	CHECK(model_backward(&s[1].m, &acts[1], &b, &(struct model_dout){ lw.a, lw.b, NULL }, NULL,
			     &e) == NR_OK);
	CHECK(model_backward(&s[0].m, &acts[0], &b, NULL, model_acts_dinput(&acts[1]), &e) ==
	      NR_OK);
	CHECK(memcmp(r.logp, whole.logp, tb.T * sizeof(float)) == 0);
	CHECK(memcmp(r.ent, whole.ent, tb.T * sizeof(float)) == 0);
	for (int p = 0; p < 2; p++)
		for (int k = 0; k < s[p].lo.ntensors; k++)
			tiny_gather(&s[p], s[p].g, k, r.grad[k]);
	for (int k = 0; k < r.ntensors; k++)
		CHECK(memcmp(r.grad[k], whole.grad[k],
			     (size_t)gtensor_numel(&s[0].lo.tensors[k]) * sizeof(float)) == 0);
	for (int p = 0; p < 2; p++) {
		model_acts_free(&acts[p]);
		tiny_free(&s[p]);
	}
	result_free(&r);
	result_free(&whole);
}

static void test_pipeline_split(void)
{
	struct arch q = tiny_qwen3(false, false, false);

	check_pipeline_split(tiny_arch(3, 16, 4, 2, 24, 37, false, true, false));
	q.layers = 3;
	check_pipeline_split(q);
}

/* --- tensor parallelism on two threads ------------------------------------------------ */

struct tp_job {
	struct arch a;
	struct comm comm;
	struct pair_rank pr;
	struct tiny t;
	struct result *r;     /* this rank's outputs */
	struct result *grad;  /* both ranks' gradients */
	int rc;
};

static void *tp_rank_main(void *arg)
{
	struct tp_job *j = arg;
	struct tbatch tb;
	struct model_acts acts;
	struct loss_w lw;
	struct err e = { 0 };

	j->rc = tiny_init(&j->t, &j->a, 2, 1, j->pr.rank, 0, &j->comm, 0.3f);
	tbatch_make(&tb, split_lens, 3, j->a.vocab, 21);
	loss_weights(&lw, tb.T);
	struct batch b = { tb.B, tb.T, tb.tokens, tb.start, NULL, 0.9f };

	if (j->rc == NR_OK)
		j->rc = model_acts_init(&acts, &j->t.m, tb.T, 16, true, &e);
	if (j->rc == NR_OK)
		j->rc = model_forward(&j->t.m, &acts, &b, NULL,
				      &(struct model_out){ j->r->logp, j->r->ent, j->r->val }, &e);
	if (j->rc == NR_OK)
		j->rc = model_backward(&j->t.m, &acts, &b, &(struct model_dout){ lw.a, lw.b, lw.c },
				       NULL, &e);
	/* rank 0 gathers its parts of every gradient, then rank 1 its own
	 * (and its copies, which hold the same values) */
	for (int r = 0; r < 2; r++) {
		if (r == j->pr.rank && j->rc == NR_OK)
			for (int k = 0; k < j->t.lo.ntensors; k++)
				tiny_gather(&j->t, j->t.g, k, j->grad->grad[k]);
		pthread_barrier_wait(&j->pr.pair->bar);
	}
	model_acts_free(&acts);
	tiny_free(&j->t);
	return NULL;
}

static bool close_rel(const float *x, const float *y, int64_t n, double tol)
{
	double num = 0, den = 1e-30;

	for (int64_t i = 0; i < n; i++) {
		num = fmax(num, fabs((double)x[i] - y[i]));
		den = fmax(den, fabs((double)y[i]));
	}
	if (num > tol * den)
		printf("#   largest difference %.3g of values up to %.3g\n", num, den);
	return num <= tol * den;
}

static void check_tp2(struct arch a)
{
	struct result whole, r[2];
	struct pair pair;
	struct tp_job job[2];
	pthread_t th[2];
	struct layout lo;
	struct err e = { 0 };
	int T = 7 + 3 + 12;

	whole_model(&a, &whole);
	CHECK(layout_init(&lo, &a, 2, 1, 1, false, NULL, &e) == NR_OK);
	pthread_barrier_init(&pair.bar, NULL, 2);
	for (int k = 0; k < 2; k++) {
		result_alloc(&r[k], &lo);
		job[k] = (struct tp_job){ .a = a, .pr = { &pair, k }, .r = &r[k], .grad = &r[0] };
		job[k].comm = pair_comm(&job[k].pr);
	}
	for (int k = 0; k < 2; k++)
		pthread_create(&th[k], NULL, tp_rank_main, &job[k]);
	for (int k = 0; k < 2; k++)
		pthread_join(th[k], NULL);
	CHECK(job[0].rc == NR_OK && job[1].rc == NR_OK);
	/* both ranks give the outputs */
	for (int k = 0; k < 2; k++) {
		if (a.score_head) {
			CHECK(close_rel(r[k].val, whole.val, T, 1e-5));
		} else {
			CHECK(close_rel(r[k].logp, whole.logp, T, 1e-5));
			CHECK(close_rel(r[k].ent, whole.ent, T, 1e-5));
		}
	}
	for (int k = 0; k < lo.ntensors; k++) {
		int64_t n = gtensor_numel(&lo.tensors[k]);

		if (!close_rel(r[0].grad[k], whole.grad[k], n, 1e-4))
			printf("#   tensor '%s'\n", lo.tensors[k].name);
		CHECK(close_rel(r[0].grad[k], whole.grad[k], n, 1e-4));
	}
	pthread_barrier_destroy(&pair.bar);
	result_free(&r[0]);
	result_free(&r[1]);
	result_free(&whole);
	layout_free(&lo);
}

static void test_tp2_lm(void)
{
	/* rank 1's vocabulary rows are all padding: V 37 < Vp / 2 */
	check_tp2(tiny_arch(2, 16, 4, 2, 24, 37, false, true, false));
	check_tp2(tiny_arch(2, 16, 4, 2, 24, 200, true, false, false));
}

static void test_tp2_score(void)
{
	check_tp2(tiny_arch(2, 16, 4, 2, 24, 37, false, true, true));
}

/* Each rank normalizes its own heads with the whole q/k norm weights, and
 * their gradients are summed like the other norms'. */
static void test_tp2_qwen3(void)
{
	check_tp2(tiny_qwen3(false, false, false));
	check_tp2(tiny_qwen3(false, true, true));
}

/* --- input checks and sizes ------------------------------------------------------------------- */

static void test_bad_batch(void)
{
	struct arch a = tiny_arch(1, 16, 4, 2, 24, 37, false, false, false);
	struct tiny t;
	struct model_acts acts;
	struct err e = { 0 };
	int tokens[4] = { 1, 2, 37, 4 }, start[3] = { 0, 2, 4 };
	struct batch b = { 2, 4, tokens, start, NULL, 1.0f };

	CHECK(tiny_init(&t, &a, 1, 1, 0, 0, comm_self(), 0.3f) == NR_OK);
	CHECK(model_acts_init(&acts, &t.m, 3, 2, true, &e) == NR_OK);
	CHECK(model_forward(&t.m, &acts, &b, NULL, &(struct model_out){ 0 }, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "4 tokens") != NULL);
	b.T = 2;
	b.B = 1;
	tokens[1] = 37;
	CHECK(model_forward(&t.m, &acts, &b, NULL, &(struct model_out){ 0 }, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "token 37 at position 1 of sequence 0") != NULL);
	tokens[1] = 2;
	start[1] = 3;
	b.T = 3;
	CHECK(model_forward(&t.m, &acts, &b, NULL, &(struct model_out){ 0 }, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "sequence 0 has 3 tokens") != NULL);
	model_acts_free(&acts);
	/* a backward needs a training forward of the same batch */
	CHECK(model_acts_init(&acts, &t.m, 4, 4, false, &e) == NR_OK);
	b = (struct batch){ 2, 4, (int[]){ 1, 2, 3, 4 }, (int[]){ 0, 2, 4 }, NULL, 1.0f };
	CHECK(model_forward(&t.m, &acts, &b, NULL, &(struct model_out){ 0 }, &e) == NR_OK);
	CHECK(model_backward(&t.m, &acts, &b, &(struct model_dout){ 0 }, NULL, &e) == NR_EINPUT);
	model_acts_free(&acts);
	tiny_free(&t);
}

/* The header's formula, written out, against the allocation (which pads
 * each buffer to 64 bytes). */
static void test_acts_formula(void)
{
	struct arch a = tiny_arch(4, 64, 8, 2, 96, 1000, false, true, false);
	struct tiny t;
	int T = 300, n = 120;

	CHECK(tiny_init(&t, &a, 1, 2, 0, 1, comm_self(), 0.3f) == NR_OK);
	const struct model_config *c = &t.m.c;
	double H = c->hidden, Rq = (c->Al + 2 * c->Gl) * c->head_dim, AD = c->Al * c->head_dim;
	double Al = c->Al, Fl = c->Fl, D = c->head_dim, Ls = c->last - c->first;
	int tc = MODEL_HEAD_CHUNK_FLOATS / c->Vl < T ? MODEL_HEAD_CHUNK_FLOATS / c->Vl : T;
	double layer = T * (4 * H + Rq + AD + Al + 3 * Fl + 2);
	double once = T * (5 * H + Rq + AD + 3 * Fl + D + 10) + (double)tc * c->Vl +
		      2.0 * ATTN_TILE * n;
	double want = Ls * layer + once;
	size_t got = model_acts_floats(c, T, n, true);

	CHECK(got >= want && got <= want + 16 * (11 * Ls + 20));
	tiny_free(&t);

	/* q/k norms keep the projection before them and their reciprocal RMS
	 * when training, only the RMS otherwise (they norm in place) */
	a.head_dim = 16;
	a.qk_norm = true;
	CHECK(tiny_init(&t, &a, 1, 2, 0, 1, comm_self(), 0.3f) == NR_OK);
	c = &t.m.c;
	Rq = (c->Al + 2 * c->Gl) * c->head_dim;
	AD = c->Al * c->head_dim;
	D = c->head_dim;
	layer = T * (4 * H + Rq + AD + Al + 3 * Fl + 2 + Rq + Al + c->Gl);
	once = T * (5 * H + Rq + AD + 3 * Fl + D + 10) + (double)tc * c->Vl + 2.0 * ATTN_TILE * n;
	want = Ls * (layer + 2 * D) + once;
	got = model_acts_floats(c, T, n, true);
	CHECK(got >= want && got <= want + 16 * (13 * Ls + 20));
	want = T * (2 * H + Rq + AD + Al + 3 * Fl + 2 + Al + c->Gl) +
	       T * (3 * H + D + 10) + (double)tc * c->Vl + 2.0 * ATTN_TILE * n;
	got = model_acts_floats(c, T, n, false);
	CHECK(got >= want && got <= want + 16 * 40);
	tiny_free(&t);
}

int main(void)
{
	RUN(test_grad_gqa_bias_untied);
	RUN(test_grad_head_chunks);
	RUN(test_grad_tied);
	RUN(test_grad_score_head);
	RUN(test_grad_qwen3);
	RUN(test_pipeline_split);
	RUN(test_tp2_lm);
	RUN(test_tp2_score);
	RUN(test_tp2_qwen3);
	RUN(test_bad_batch);
	RUN(test_acts_formula);
	return UNIT_END();
}
