/* Batched generation with a KV cache, and the sampler (generate.h). */
#include "engine/generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/rng.h"

int generator_init(struct generator *g, struct decoder *m, int max_seqs, int max_len,
		   int max_prompt_tokens, struct err *e)
{
	int rows = max_prompt_tokens > max_seqs ? max_prompt_tokens : max_seqs, rc;
	size_t vp = (size_t)m->c.vocab_padded, n = (size_t)max_seqs;

	/* any one prompt fits in a prefill group */
	if (rows < max_len)
		rows = max_len;
	memset(g, 0, sizeof *g);
	g->m = m;
	g->max_seqs = max_seqs;
	g->max_len = max_len;
	rc = model_acts_init(&g->acts, m, rows, max_len, false, e);
	if (rc == NR_OK)
		rc = model_kv_cache_init(&g->kv, m, max_seqs, max_len, e);
	if (rc) {
		generator_free(g);
		return rc;
	}
	g->logits = malloc(n * vp * sizeof *g->logits);
	g->tok = malloc((7 * n + 1) * sizeof *g->tok);
	g->cand = malloc(vp * sizeof *g->cand);
	if (!g->logits || !g->tok || !g->cand) {
		generator_free(g);
		return err_oom(e);
	}
	g->rowtok = g->tok + n;
	g->slot = g->tok + 2 * n;
	g->pos = g->tok + 3 * n;
	g->active = g->tok + 4 * n;
	g->plen = g->tok + 5 * n;
	g->start = g->tok + 6 * n;
	return NR_OK;
}

void generator_free(struct generator *g)
{
	model_acts_free(&g->acts);
	model_kv_cache_free(&g->kv);
	free(g->logits);
	free(g->tok);
	free(g->cand);
	memset(g, 0, sizeof *g);
}

int64_t generator_bytes(const struct generator *g)
{
	int64_t n = g->max_seqs, vp = g->m ? g->m->c.vocab_padded : 0;
	int64_t kv = 2 * (int64_t)g->kv.layers * g->kv.slots * (int64_t)g->kv.slot_stride;

	return (int64_t)sizeof(float) * ((int64_t)g->acts.floats + kv + n * vp) +
	       (int64_t)sizeof *g->cand * vp + (int64_t)sizeof(int) * (7 * n + 1);
}

/* --- sampling ------------------------------------------------------------------------------ */

/* Larger z first, then the lower id: a total order, so equal inputs
 * always sort alike. */
static int cand_cmp(const void *pa, const void *pb)
{
	const struct gen_cand *a = pa, *b = pb;

	if (a->z != b->z)
		return a->z > b->z ? -1 : 1;
	return (a->id > b->id) - (a->id < b->id);
}

/* Keep in cand[0 .. k) the k best of cand[0 .. n), sorted: a binary
 * min-heap of the best so far (its root the worst of them), then sorted. */
static void top_k(struct gen_cand *cand, int n, int k)
{
	for (int i = 0; i < n; i++) {
		struct gen_cand c = cand[i];
		int at;

		if (i < k) {
			at = i;
			while (at > 0 && cand_cmp(&c, &cand[(at - 1) / 2]) > 0) {
				cand[at] = cand[(at - 1) / 2];
				at = (at - 1) / 2;
			}
			cand[at] = c;
			continue;
		}
		if (cand_cmp(&c, &cand[0]) >= 0)
			continue;
		at = 0;
		for (;;) {
			int l = 2 * at + 1, r = l + 1, w = at;
			const struct gen_cand *wc = &c;

			if (l < k && cand_cmp(&cand[l], wc) > 0)
				w = l, wc = &cand[l];
			if (r < k && cand_cmp(&cand[r], wc) > 0)
				w = r;
			if (w == at)
				break;
			cand[at] = cand[w];
			at = w;
		}
		cand[at] = c;
	}
	qsort(cand, (size_t)k, sizeof *cand, cand_cmp);
}

static int argmax(const float *z, int V)
{
	int best = 0;

	for (int v = 1; v < V; v++)
		if (z[v] > z[best])
			best = v;
	return best;
}

static double log_sum_exp(const float *z, int V, float scale)
{
	float m = -INFINITY;
	double s = 0;

	for (int v = 0; v < V; v++)
		if (z[v] * scale > m)
			m = z[v] * scale;
	for (int v = 0; v < V; v++)
		s += exp((double)(z[v] * scale - m));
	return m + log(s);
}

int generator_sample(const float *logits, int V, const struct gen_params *p, double u,
	       struct gen_cand *cand, float *logprob)
{
	float it = p->temperature > 0 ? 1.0f / p->temperature : 1.0f;
	int n = p->vocab > 0 && p->vocab < V ? p->vocab : V, tok;
	/* the log-prob's normaliser is the whole vocabulary's, the draw's
	 * that of the ids it may return */
	double lse = log_sum_exp(logits, V, it), lse_n = n < V ? log_sum_exp(logits, n, it) : lse;
	double mass = 0, acc = 0;

	if (!isfinite(lse) || !isfinite(lse_n))
		return -1;
	if (p->temperature <= 0) {
		tok = argmax(logits, n);
		*logprob = (float)(logits[tok] - lse);
		return tok;
	}
	if (p->top_k <= 0 && !(p->top_p > 0 && p->top_p < 1)) {
		/* the whole distribution, in id order */
		tok = -1;
		for (int v = 0; v < n; v++) {
			double pv = exp((double)(logits[v] * it) - lse_n);

			acc += pv;
			if (pv > 0)
				tok = v;
			if (acc > u)
				break;
		}
		*logprob = (float)(logits[tok] * it - lse);
		return tok;
	}
	for (int v = 0; v < n; v++)
		cand[v] = (struct gen_cand){ .z = logits[v] * it, .id = v };
	if (p->top_k > 0 && p->top_k < n) {
		top_k(cand, n, p->top_k);
		n = p->top_k;
	} else {
		qsort(cand, (size_t)n, sizeof *cand, cand_cmp);
	}
	/* renormalise over the kept tokens; then keep the smallest prefix
	 * whose share reaches top_p */
	for (int i = 0; i < n; i++)
		mass += exp((double)cand[i].z - cand[0].z);
	if (p->top_p > 0 && p->top_p < 1) {
		double keep = 0;
		int i = 0;

		while (i < n) {
			keep += exp((double)cand[i].z - cand[0].z);
			i++;
			if (keep >= p->top_p * mass)
				break;
		}
		n = i;
		mass = keep;
	}
	tok = cand[n - 1].id;
	for (int i = 0; i < n; i++) {
		acc += exp((double)cand[i].z - cand[0].z);
		if (acc > u * mass) {
			tok = cand[i].id;
			break;
		}
	}
	*logprob = (float)(logits[tok] * it - lse);
	return tok;
}

/* --- the decoding loop ------------------------------------------------------------------- */

static bool is_eos(const struct gen_params *p, int tok)
{
	for (int i = 0; i < p->neos; i++)
		if (p->eos[i] == tok)
			return true;
	return false;
}

static int check_request(const struct generator *g, const struct gen_request *r,
			 const struct gen_params *p, struct err *e)
{
	int V = g->m->c.vocab;

	if (r->B > g->max_seqs)
		return err_set(e, NR_EINPUT, "%d prompts; the generator holds %d", r->B,
			       g->max_seqs);
	if (p->max_new < 1 || p->neos < 0 || p->neos > GEN_MAX_EOS)
		return err_set(e, NR_EINPUT, "max_new %d and %d stop tokens: need max_new >= 1 and "
			       "at most %d stop tokens", p->max_new, p->neos, GEN_MAX_EOS);
	for (int b = 0; b < r->B; b++) {
		int n = r->start[b + 1] - r->start[b];

		if (n < 1 || n >= g->max_len)
			return err_set(e, NR_EINPUT, "prompt %d has %d tokens; the context holds "
				       "%d, at least one of them generated", b, n, g->max_len);
		for (int t = r->start[b]; t < r->start[b + 1]; t++)
			if (r->tokens[t] < 0 || r->tokens[t] >= V)
				return err_set(e, NR_EINPUT, "prompt %d: token %d at position %d "
					       "is outside the vocabulary of %d", b,
					       r->tokens[t], t - r->start[b], V);
	}
	return NR_OK;
}

/* Prefill prompts [b0, b1) into slots b0 .. b1 - 1; their next-token
 * logits go to g->logits rows b0 .. b1 - 1. */
static int prefill(struct generator *g, const struct gen_request *r, int b0, int b1,
		   struct err *e)
{
	int t0 = r->start[b0];
	struct batch b = { .B = b1 - b0, .T = r->start[b1] - t0, .tokens = r->tokens + t0,
			   .start = g->start };

	for (int i = b0; i <= b1; i++)
		g->start[i - b0] = r->start[i] - t0;
	for (int i = b0; i < b1; i++)
		g->slot[i - b0] = i;
	return model_prefill(g->m, &g->acts, &g->kv, &b, g->slot,
			     g->logits + (size_t)b0 * g->m->c.vocab_padded, e);
}

/* Sample sequence b's next token from its logits row and record it; *more
 * says whether the sequence goes on. */
static int take(struct generator *g, const struct gen_request *r, const struct gen_params *p,
		const struct gen_result *out, int b, const float *logits, bool *more,
		struct err *e)
{
	uint64_t id = r->seq_id ? r->seq_id[b] : (uint64_t)b;
	int j = out->len[b];
	double u = rng_uniform(p->seed, RNG_SAMPLE, p->step, id, (uint64_t)j);
	float lp;
	int tok = generator_sample(logits, g->m->c.vocab, p, u, g->cand, &lp);

	if (tok < 0) {
		g->bad_seq = b;
		return err_set(e, NR_EIO, "sequence %d, token %d: the logits are not finite (the "
			       "model's weights or activations hold a NaN or an infinity)", b, j);
	}
	out->tokens[(size_t)b * p->max_new + j] = tok;
	out->logprobs[(size_t)b * p->max_new + j] = lp;
	out->len[b] = j + 1;
	g->tok[b] = tok;
	*more = !is_eos(p, tok) && j + 1 < p->max_new && g->plen[b] + j + 1 < g->max_len;
	return NR_OK;
}

int generator_run(struct generator *g, const struct gen_request *r, const struct gen_params *p,
	     const struct gen_result *out, struct err *e)
{
	size_t vp = (size_t)g->m->c.vocab_padded;
	int rc = check_request(g, r, p, e), n = 0;
	bool more;

	if (rc)
		return rc;
	for (int b0 = 0; b0 < r->B;) {
		int b1 = b0 + 1;

		while (b1 < r->B && r->start[b1 + 1] - r->start[b0] <= g->acts.max_tokens)
			b1++;
		rc = prefill(g, r, b0, b1, e);
		if (rc)
			return rc;
		b0 = b1;
	}
	for (int b = 0; b < r->B; b++) {
		g->plen[b] = r->start[b + 1] - r->start[b];
		out->len[b] = 0;
		if ((rc = take(g, r, p, out, b, g->logits + b * vp, &more, e)))
			return rc;
		if (more)
			g->active[n++] = b;
	}
	/* decode: row i of a step is sequence active[i], in its slot */
	while (n > 0) {
		int keep = 0;

		for (int i = 0; i < n; i++) {
			int b = g->active[i];

			g->rowtok[i] = g->tok[b];
			g->slot[i] = b;
			g->pos[i] = g->plen[b] + out->len[b] - 1;
		}
		rc = model_decode(g->m, &g->acts, &g->kv, n, g->rowtok, g->slot, g->pos, g->logits,
				  e);
		if (rc)
			return rc;
		for (int i = 0; i < n; i++) {
			if ((rc = take(g, r, p, out, g->active[i], g->logits + i * vp, &more, e)))
				return rc;
			if (more)
				g->active[keep++] = g->active[i];
		}
		n = keep;
	}
	return NR_OK;
}
