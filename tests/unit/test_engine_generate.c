/* Generation: decoding with the KV cache gives the log-probs a full
 * forward over prompt and response gives, and the tokens a cacheless
 * greedy loop picks; sequences that stop leave the batch without changing
 * the others; seeded sampling repeats and does not depend on the batch
 * around a sequence or on how prompts are grouped for prefill; top-k 1 is
 * greedy; the sampler's truncations keep the documented mass, and rows
 * past the tokenizer's ids are never drawn; bad prompts are refused. */
#include "engine/generate.h"
#include "unit.h"
#include "unitengine.h"

enum { MAXNEW = 12, CTX = 32 };

static const int prompt_lens[] = { 3, 9, 1, 5 };

struct gen {
	int tokens[8 * MAXNEW];
	float logprobs[8 * MAXNEW];
	int len[8];
};

static struct gen_params params(float temp, float top_p, int top_k)
{
	struct gen_params p = {
		.temperature = temp, .top_p = top_p, .top_k = top_k, .max_new = MAXNEW,
		.seed = 42, .step = 3,
	};

	return p;
}

static int run_gen(struct tiny *t, const struct tbatch *pr, const uint64_t *ids,
		   const struct gen_params *p, int max_prompt_tokens, struct gen *out)
{
	struct generator g;
	struct err e = { 0 };
	struct gen_request r = { pr->B, pr->tokens, pr->start, ids };
	int rc = generator_init(&g, &t->m, 8, CTX, max_prompt_tokens, &e);

	memset(out, 0, sizeof *out);
	if (rc == NR_OK)
		rc = generator_run(&g, &r, p,
			      &(struct gen_result){ out->tokens, out->logprobs, out->len }, &e);
	if (rc)
		printf("# generate: %s\n", e.msg);
	generator_free(&g);
	return rc;
}

static bool memchr_int(const int *x, int n, int v)
{
	for (int i = 0; i < n; i++)
		if (x[i] == v)
			return true;
	return false;
}

static struct arch gen_arch(void)
{
	return tiny_arch(2, 16, 4, 2, 24, 37, false, true, false);
}

/* The forward's log-probs of each generated token, at the sampling
 * temperature, equal generation's. */
static void check_against_forward(struct tiny *t, const struct tbatch *pr, const struct gen *g,
				  float temp)
{
	struct tbatch full = { .B = pr->B };
	int targets[512];
	float logp[512];
	struct model_acts acts;
	struct err e = { 0 };

	full.start[0] = 0;
	for (int b = 0; b < pr->B; b++) {
		int n = pr->start[b + 1] - pr->start[b], at = full.start[b];

		memcpy(full.tokens + at, pr->tokens + pr->start[b], n * sizeof(int));
		memcpy(full.tokens + at + n, g->tokens + b * MAXNEW, g->len[b] * sizeof(int));
		full.start[b + 1] = at + n + g->len[b];
		/* position i predicts generated token i - n + 1 */
		for (int i = 0; i < n + g->len[b]; i++) {
			int j = i - n + 1;

			targets[at + i] = j >= 0 && j < g->len[b] ? g->tokens[b * MAXNEW + j] : -1;
		}
	}
	full.T = full.start[pr->B];
	struct batch b = { full.B, full.T, full.tokens, full.start, targets, temp };

	CHECK(model_acts_init(&acts, &t->m, full.T, CTX, false, &e) == NR_OK);
	CHECK(model_forward(&t->m, &acts, &b, NULL, &(struct model_out){ logp, NULL, NULL }, &e) ==
	      NR_OK);
	for (int s = 0; s < pr->B; s++) {
		int n = pr->start[s + 1] - pr->start[s];

		for (int j = 0; j < g->len[s]; j++) {
			float want = logp[full.start[s] + n - 1 + j];
			float got = g->logprobs[s * MAXNEW + j];

			if (!(fabsf(want - got) < 2e-5))
				printf("#   sequence %d token %d: forward %.7g, generation %.7g\n", s,
				       j, want, got);
			CHECK(fabsf(want - got) < 2e-5);
		}
	}
	model_acts_free(&acts);
}

static void test_cache_matches_forward(void)
{
	struct arch a = gen_arch();
	struct tiny t;
	struct tbatch pr;
	struct gen g;
	struct gen_params p = params(0.8f, 0.95f, 0);

	CHECK(tiny_init(&t, &a, 1, 1, 0, 0, comm_self(), 0.5f) == NR_OK);
	tbatch_make(&pr, prompt_lens, 4, a.vocab, 5);
	CHECK(run_gen(&t, &pr, NULL, &p, CTX, &g) == NR_OK);
	for (int b = 0; b < 4; b++)
		CHECK(g.len[b] == MAXNEW);
	check_against_forward(&t, &pr, &g, 0.8f);
	p = params(0, 1, 0);
	CHECK(run_gen(&t, &pr, NULL, &p, CTX, &g) == NR_OK);
	check_against_forward(&t, &pr, &g, 1.0f);
	tiny_free(&t);
}

/* Greedy with the cache against greedy that prefills the whole sequence
 * again for every token. */
static void test_greedy_without_cache(void)
{
	struct arch a = gen_arch();
	struct tiny t;
	struct tbatch pr;
	struct gen g;
	struct gen_params p = params(0, 1, 0);
	struct model_acts acts;
	struct kv_cache kv;
	struct err e = { 0 };
	float logits[256];

	CHECK(tiny_init(&t, &a, 1, 1, 0, 0, comm_self(), 0.5f) == NR_OK);
	tbatch_make(&pr, prompt_lens, 4, a.vocab, 6);
	CHECK(run_gen(&t, &pr, NULL, &p, CTX, &g) == NR_OK);
	CHECK(model_acts_init(&acts, &t.m, CTX, CTX, false, &e) == NR_OK);
	CHECK(model_kv_cache_init(&kv, &t.m, 1, CTX, &e) == NR_OK);
	for (int s = 0; s < 4; s++) {
		int seq[CTX], n = pr.start[s + 1] - pr.start[s];

		memcpy(seq, pr.tokens + pr.start[s], n * sizeof(int));
		for (int j = 0; j < MAXNEW; j++) {
			struct batch b = { 1, n, seq, (int[]){ 0, n }, NULL, 1.0f };
			int best = 0;

			CHECK(model_prefill(&t.m, &acts, &kv, &b, (int[]){ 0 }, logits, &e) ==
			      NR_OK);
			for (int v = 1; v < a.vocab; v++)
				if (logits[v] > logits[best])
					best = v;
			CHECK(best == g.tokens[s * MAXNEW + j]);
			seq[n++] = best;
		}
	}
	model_kv_cache_free(&kv);
	model_acts_free(&acts);
	tiny_free(&t);
}

/* Make sequence 0 stop early (its first token that repeats none before
 * it, from the second on, as EOS): the others keep their tokens up to
 * their own first EOS, and their log-probs. */
static void test_finished_leave_batch(void)
{
	struct arch a = gen_arch();
	struct tiny t;
	struct tbatch pr;
	struct gen all, cut;
	struct gen_params p = params(1.0f, 1, 0);

	CHECK(tiny_init(&t, &a, 1, 1, 0, 0, comm_self(), 0.5f) == NR_OK);
	tbatch_make(&pr, prompt_lens, 4, a.vocab, 7);
	CHECK(run_gen(&t, &pr, NULL, &p, CTX, &all) == NR_OK);
	int j0 = 1;

	while (j0 < MAXNEW - 1 && memchr_int(all.tokens, j0, all.tokens[j0]))
		j0++;
	p.neos = 1;
	p.eos[0] = all.tokens[j0];
	CHECK(run_gen(&t, &pr, NULL, &p, CTX, &cut) == NR_OK);
	CHECK(cut.len[0] == j0 + 1 && j0 + 1 < MAXNEW);
	for (int s = 1; s < 4; s++) {
		int stop = MAXNEW;

		for (int j = 0; j < MAXNEW; j++)
			if (all.tokens[s * MAXNEW + j] == p.eos[0]) {
				stop = j + 1;
				break;
			}
		CHECK(cut.len[s] == stop);
		for (int j = 0; j < stop; j++) {
			CHECK(cut.tokens[s * MAXNEW + j] == all.tokens[s * MAXNEW + j]);
			CHECK(fabsf(cut.logprobs[s * MAXNEW + j] - all.logprobs[s * MAXNEW + j]) <
			      1e-5);
		}
	}
	tiny_free(&t);
}

/* The same seed twice gives the same tokens; a sequence generated alone
 * (with its global index) or prefilled in small groups gets the tokens
 * it gets in the batch. */
static void test_seeded_sampling(void)
{
	struct arch a = gen_arch();
	struct tiny t;
	struct tbatch pr, one;
	struct gen g1, g2, g3, alone;
	struct gen_params p = params(1.0f, 0.9f, 20);
	uint64_t ids[4] = { 100, 101, 102, 103 };

	CHECK(tiny_init(&t, &a, 1, 1, 0, 0, comm_self(), 0.5f) == NR_OK);
	tbatch_make(&pr, prompt_lens, 4, a.vocab, 8);
	CHECK(run_gen(&t, &pr, ids, &p, CTX, &g1) == NR_OK);
	CHECK(run_gen(&t, &pr, ids, &p, CTX, &g2) == NR_OK);
	CHECK(memcmp(g1.tokens, g2.tokens, sizeof g1.tokens) == 0);
	CHECK(memcmp(g1.logprobs, g2.logprobs, sizeof g1.logprobs) == 0);
	CHECK(run_gen(&t, &pr, ids, &p, 9, &g3) == NR_OK);
	CHECK(memcmp(g1.tokens, g3.tokens, sizeof g1.tokens) == 0);
	/* sequence 2 alone */
	one.B = 1;
	one.start[0] = 0;
	one.start[1] = one.T = pr.start[3] - pr.start[2];
	memcpy(one.tokens, pr.tokens + pr.start[2], one.T * sizeof(int));
	CHECK(run_gen(&t, &one, ids + 2, &p, CTX, &alone) == NR_OK);
	CHECK(alone.len[0] == g1.len[2]);
	CHECK(memcmp(alone.tokens, g1.tokens + 2 * MAXNEW, MAXNEW * sizeof(int)) == 0);
	/* another step draws other tokens */
	p.step = 4;
	CHECK(run_gen(&t, &pr, ids, &p, CTX, &g2) == NR_OK);
	CHECK(memcmp(g1.tokens, g2.tokens, sizeof g1.tokens) != 0);
	tiny_free(&t);
}

static void test_top_k_one_is_greedy(void)
{
	struct arch a = gen_arch();
	struct tiny t;
	struct tbatch pr;
	struct gen greedy, k1;
	struct gen_params p0 = params(0, 1, 0), p1 = params(1.3f, 0.8f, 1);

	CHECK(tiny_init(&t, &a, 1, 1, 0, 0, comm_self(), 0.5f) == NR_OK);
	tbatch_make(&pr, prompt_lens, 4, a.vocab, 9);
	CHECK(run_gen(&t, &pr, NULL, &p0, CTX, &greedy) == NR_OK);
	CHECK(run_gen(&t, &pr, NULL, &p1, CTX, &k1) == NR_OK);
	CHECK(memcmp(greedy.tokens, k1.tokens, sizeof greedy.tokens) == 0);
	tiny_free(&t);
}

/* Two tensor-parallel ranks on threads generate what one rank does: the
 * vocabulary-parallel logits gathered, each rank's KV heads cached. */
struct tp_gen {
	struct pair_rank pr;
	struct gen_params p;
	struct gen out;
	int rc;
};

static void *tp_gen_main(void *arg)
{
	struct tp_gen *j = arg;
	struct arch a = gen_arch();
	struct comm c = pair_comm(&j->pr);
	struct tiny t;
	struct tbatch pr;

	j->rc = tiny_init(&t, &a, 2, 1, j->pr.rank, 0, &c, 0.5f);
	tbatch_make(&pr, prompt_lens, 4, a.vocab, 10);
	if (j->rc == NR_OK)
		j->rc = run_gen(&t, &pr, NULL, &j->p, 5, &j->out);
	tiny_free(&t);
	return NULL;
}

static void test_tp2_generation(void)
{
	struct arch a = gen_arch();
	struct tiny t;
	struct tbatch pr;
	struct pair pair;
	struct tp_gen job[2];
	pthread_t th[2];
	struct gen_params ps[2] = { params(0, 1, 0), params(1.0f, 0.9f, 0) };

	CHECK(tiny_init(&t, &a, 1, 1, 0, 0, comm_self(), 0.5f) == NR_OK);
	tbatch_make(&pr, prompt_lens, 4, a.vocab, 10);
	pthread_barrier_init(&pair.bar, NULL, 2);
	for (int i = 0; i < 2; i++) {
		struct gen one;

		CHECK(run_gen(&t, &pr, NULL, &ps[i], 5, &one) == NR_OK);
		for (int k = 0; k < 2; k++) {
			job[k] = (struct tp_gen){ .pr = { &pair, k }, .p = ps[i] };
			pthread_create(&th[k], NULL, tp_gen_main, &job[k]);
		}
		for (int k = 0; k < 2; k++)
			pthread_join(th[k], NULL);
		for (int k = 0; k < 2; k++) {
			CHECK(job[k].rc == NR_OK);
			CHECK(memcmp(job[k].out.tokens, one.tokens, sizeof one.tokens) == 0);
			CHECK(memcmp(job[k].out.len, one.len, sizeof one.len) == 0);
			for (int j = 0; j < 8 * MAXNEW; j++)
				CHECK(fabsf(job[k].out.logprobs[j] - one.logprobs[j]) < 1e-5);
		}
	}
	pthread_barrier_destroy(&pair.bar);
	tiny_free(&t);
}

/* --- the sampler ---------------------------------------------------------------------------- */

/* Draws on a grid of N uniform values: token counts match N times the
 * kept, renormalised probabilities within one. */
static void check_counts(const float *logits, int V, struct gen_params p, const double *want)
{
	enum { N = 20000 };
	int count[8] = { 0 };
	struct gen_cand cand[8];
	float it = p.temperature > 0 ? 1 / p.temperature : 1, lp;
	double lse = 0, m = -1e30;

	for (int v = 0; v < V; v++)
		m = fmax(m, logits[v] * it);
	for (int v = 0; v < V; v++)
		lse += exp(logits[v] * it - m);
	lse = m + log(lse);
	for (int i = 0; i < N; i++) {
		int tok = generator_sample(logits, V, &p, (i + 0.5) / N, cand, &lp);

		count[tok]++;
		CHECK(fabs(lp - (logits[tok] * it - lse)) < 1e-5);
	}
	for (int v = 0; v < V; v++) {
		if (!(fabs(count[v] - N * want[v]) <= 1))
			printf("#   token %d: %d draws, expected %.1f\n", v, count[v], N * want[v]);
		CHECK(fabs(count[v] - N * want[v]) <= 1);
	}
}

static void test_sampler_truncation(void)
{
	/* probabilities 0.1, 0.5, 0.15, 0.25 */
	float z[4] = { logf(0.1f), logf(0.5f), logf(0.15f), logf(0.25f) };

	check_counts(z, 4, params(1, 1, 0), (double[]){ 0.1, 0.5, 0.15, 0.25 });
	/* top-p 0.7: 0.5 then 0.25 reach it */
	check_counts(z, 4, params(1, 0.7f, 0), (double[]){ 0, 2.0 / 3, 0, 1.0 / 3 });
	/* top-k 3, renormalised */
	check_counts(z, 4, params(1, 1, 3), (double[]){ 0, 0.5 / 0.9, 0.15 / 0.9, 0.25 / 0.9 });
	/* top-k 3 then top-p 0.8 of what is left: 0.556 + 0.278 */
	check_counts(z, 4, params(1, 0.8f, 3), (double[]){ 0, 2.0 / 3, 0, 1.0 / 3 });
	/* temperature 2: probabilities as the square roots */
	double s = sqrt(0.1) + sqrt(0.5) + sqrt(0.15) + sqrt(0.25);

	check_counts(z, 4, params(2, 1, 0),
		     (double[]){ sqrt(0.1) / s, sqrt(0.5) / s, sqrt(0.15) / s, sqrt(0.25) / s });
}

/* Rows at and past p.vocab (a padded embedding's) are never drawn, though
 * they hold the largest logits: greedy, sampling, top-k and top-p pick
 * among the others, renormalised, and the log-prob stays that of the
 * model's whole distribution. */
static void test_sampler_mask(void)
{
	enum { N = 20000 };
	/* probabilities 0.04, 0.2, 0.06, 0.1 kept; 0.6 masked */
	float z[5] = { logf(0.04f), logf(0.2f), logf(0.06f), logf(0.1f), logf(0.6f) };
	struct gen_params ps[] = { params(0, 1, 0), params(1, 1, 0), params(1, 1, 2),
				   params(1, 0.5f, 0), params(0.5f, 0.9f, 4), params(1, 1, 1) };
	const double want[][4] = { { 0, 1, 0, 0 }, { 0.1, 0.5, 0.15, 0.25 },
				   { 0, 2.0 / 3, 0, 1.0 / 3 }, { 0, 1, 0, 0 },
				   /* squared, 0.0016 0.04 0.0036 0.01 of 0.0552: 0.04
				    * and 0.01 reach 0.9 */
				   { 0, 0.8, 0, 0.2 }, { 0, 1, 0, 0 } };
	struct gen_cand cand[5];
	float lp, none[5] = { -INFINITY, -INFINITY, -INFINITY, -INFINITY, 0 };

	for (size_t k = 0; k < sizeof ps / sizeof *ps; k++) {
		float it = ps[k].temperature > 0 ? 1 / ps[k].temperature : 1;
		double lse = 0;
		int count[5] = { 0 };

		ps[k].vocab = 4;
		for (int v = 0; v < 5; v++)
			lse += exp(z[v] * it);
		lse = log(lse);
		for (int i = 0; i < N; i++) {
			int tok = generator_sample(z, 5, &ps[k], (i + 0.5) / N, cand, &lp);

			CHECK(tok >= 0 && tok < 4);
			if (tok < 0 || tok >= 4)
				return;
			count[tok]++;
			CHECK(fabs(lp - (z[tok] * it - lse)) < 1e-5);
		}
		for (int v = 0; v < 4; v++) {
			if (!(fabs(count[v] - N * want[k][v]) <= 1))
				printf("#   case %zu token %d: %d draws, expected %.1f\n", k, v,
				       count[v], N * want[k][v]);
			CHECK(fabs(count[v] - N * want[k][v]) <= 1);
		}
	}
	/* nothing left to draw from */
	CHECK(generator_sample(none, 5, &ps[0], 0.5, cand, &lp) == -1);
	CHECK(generator_sample(none, 5, &ps[1], 0.5, cand, &lp) == -1);
}

static void test_bad_prompts(void)
{
	struct arch a = gen_arch();
	struct tiny t;
	struct generator g;
	struct gen out;
	struct err e = { 0 };
	struct gen_params p = params(1, 1, 0);
	int tokens[CTX + 1] = { 0 };
	struct gen_result res = { out.tokens, out.logprobs, out.len };

	CHECK(tiny_init(&t, &a, 1, 1, 0, 0, comm_self(), 0.5f) == NR_OK);
	CHECK(generator_init(&g, &t.m, 2, CTX, CTX, &e) == NR_OK);
	CHECK(generator_run(&g, &(struct gen_request){ 1, tokens, (int[]){ 0, CTX }, NULL }, &p, &res,
		       &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "prompt 0 has 32 tokens") != NULL);
	CHECK(generator_run(&g, &(struct gen_request){ 2, tokens, (int[]){ 0, 1, 1 }, NULL }, &p, &res,
		       &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "prompt 1 has 0 tokens") != NULL);
	tokens[2] = 37;
	CHECK(generator_run(&g, &(struct gen_request){ 1, tokens, (int[]){ 0, 4 }, NULL }, &p, &res,
		       &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "token 37 at position 2") != NULL);
	CHECK(generator_run(&g, &(struct gen_request){ 3, tokens, (int[]){ 0, 1, 2, 3 }, NULL }, &p,
		       &res, &e) == NR_EINPUT);
	generator_free(&g);
	tiny_free(&t);
}

/* A context that fills up stops the sequence there. */
static void test_context_limit(void)
{
	struct arch a = gen_arch();
	struct tiny t;
	struct generator g;
	struct gen out;
	struct err e = { 0 };
	struct gen_params p = params(1, 1, 0);
	int tokens[30] = { 0 };

	CHECK(tiny_init(&t, &a, 1, 1, 0, 0, comm_self(), 0.5f) == NR_OK);
	CHECK(generator_init(&g, &t.m, 2, CTX, CTX, &e) == NR_OK);
	CHECK(generator_run(&g, &(struct gen_request){ 2, tokens, (int[]){ 0, 27, 30 }, NULL }, &p,
		       &(struct gen_result){ out.tokens, out.logprobs, out.len }, &e) == NR_OK);
	CHECK(out.len[0] == CTX - 27);
	CHECK(out.len[1] == MAXNEW);
	generator_free(&g);
	tiny_free(&t);
}

/* No distribution to draw from: the sampler says so, and generate fails
 * with NR_EIO naming where, instead of emitting a token. */
static void test_not_finite(void)
{
	struct arch a = gen_arch();
	struct tiny t;
	struct generator g;
	struct gen out;
	struct err e = { 0 };
	struct gen_params greedy = params(0, 1, 0), topk = params(1, 1, 2);
	struct gen_cand cand[4];
	float nan_z[4] = { 0, NAN, 1, 0 }, inf_z[4] = { 0, INFINITY, 1, 0 }, lp;
	float none[4] = { -INFINITY, -INFINITY, -INFINITY, -INFINITY };
	int tokens[4] = { 1, 2, 3, 4 };

	CHECK(generator_sample(nan_z, 4, &greedy, 0.5, cand, &lp) == -1);
	CHECK(generator_sample(nan_z, 4, &topk, 0.5, cand, &lp) == -1);
	CHECK(generator_sample(inf_z, 4, &greedy, 0.5, cand, &lp) == -1);
	CHECK(generator_sample(none, 4, &greedy, 0.5, cand, &lp) == -1);
	CHECK(tiny_init(&t, &a, 1, 1, 0, 0, comm_self(), 0.5f) == NR_OK);
	t.w[0] = NAN; /* an embedding entry: every position of a token 0 */
	tokens[2] = 0;
	CHECK(generator_init(&g, &t.m, 2, CTX, CTX, &e) == NR_OK);
	CHECK(generator_run(&g, &(struct gen_request){ 2, tokens, (int[]){ 0, 2, 4 }, NULL }, &greedy,
		       &(struct gen_result){ out.tokens, out.logprobs, out.len }, &e) == NR_EIO);
	CHECK(strstr(e.msg, "sequence 1, token 0: the logits are not finite") != NULL);
	generator_free(&g);
	tiny_free(&t);
}

int main(void)
{
	RUN(test_cache_matches_forward);
	RUN(test_greedy_without_cache);
	RUN(test_finished_leave_batch);
	RUN(test_seeded_sampling);
	RUN(test_top_k_one_is_greedy);
	RUN(test_tp2_generation);
	RUN(test_sampler_truncation);
	RUN(test_sampler_mask);
	RUN(test_bad_prompts);
	RUN(test_context_limit);
	RUN(test_not_finite);
	return UNIT_END();
}
