/* A file's prompts in batches (engine/batches.h): the model a store runs
 * is the one named, the only one or the actor, and only a language model
 * generates; a continuation's text ends at its stop; more prompts than a
 * batch holds come out in their order, each prompt's continuation and
 * scores the same as when it runs alone, and a callback's error ends the
 * run at once. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/batches.h"
#include "unit.h"
#include "unitengine.h"

#define NP (BATCHES_PROMPTS + 6) /* two batches, the second short */
#define MAX_NEW 4
#define CTX 64

struct got {
	size_t calls, stop_at;
	size_t order[NP];
	int tokens[NP][MAX_NEW], len[NP];
	float lp[NP][MAX_NEW];
	float v[NP][8];
	int n[NP];
};

static int on_generated(void *arg, size_t i, const int *t, const float *lp, int len,
			struct err *e)
{
	struct got *g = arg;

	if (g->calls == g->stop_at)
		return err_set(e, NR_EIO, "stop");
	g->order[g->calls++] = i;
	g->len[i] = len;
	memcpy(g->tokens[i], t, (size_t)len * sizeof *t);
	memcpy(g->lp[i], lp, (size_t)len * sizeof *lp);
	return NR_OK;
}

static int on_scored(void *arg, size_t i, const float *v, int n, struct err *e)
{
	struct got *g = arg;

	(void)e;
	g->order[g->calls++] = i;
	g->n[i] = n;
	memcpy(g->v[i], v, (size_t)n * sizeof *v);
	return NR_OK;
}

static struct prompts ps;
static struct prompt pv[NP];
static int32_t ptok[NP][6];

static void make_prompts(int vocab)
{
	ps.file = (char *)"p.jsonl";
	ps.v = pv;
	ps.n = NP;
	for (size_t i = 0; i < NP; i++) {
		pv[i].ntokens = 1 + i % 6;
		pv[i].tokens = ptok[i];
		pv[i].line = (long)i + 1;
		for (size_t k = 0; k < pv[i].ntokens; k++)
			ptok[i][k] = (int32_t)((i * 7 + k * 3) % (size_t)vocab);
	}
}

static bool open_lm(struct lm *m, bool score)
{
	struct model md = { .arch = tiny_arch(2, 16, 4, 2, 24, 37, false, true, score) };
	struct err e = { 0 };

	snprintf(md.name, sizeof md.name, "actor");
	return lm_open(m, &md, 0, false, NULL, 0, 7, &e) == NR_OK;
}

static void test_generate(void)
{
	static struct got all, one;
	struct gen_params p = { .temperature = 1, .max_new = MAX_NEW, .seed = 3 };
	struct lm m = { 0 };
	struct err e = { 0 };

	make_prompts(37);
	CHECK(open_lm(&m, false));
	all.stop_at = one.stop_at = (size_t)-1;
	CHECK(batches_generate(&m, &ps, &p, CTX, on_generated, &all, &e) == NR_OK);
	CHECK(all.calls == NP);
	for (size_t i = 0; i < NP; i++)
		CHECK(all.order[i] == i && all.len[i] == MAX_NEW);
	/* each prompt alone, as sequence i of the draws: the same tokens */
	for (size_t i = 0; i < NP; i++) {
		struct prompts alone = { ps.file, &pv[i], 1 };
		struct generator g;
		int out[MAX_NEW], len;
		float lp[MAX_NEW];
		uint64_t id = i;

		CHECK(generator_init(&g, &m.dec, 1, CTX, CTX, &e) == NR_OK);
		CHECK(generator_run(&g, &(struct gen_request){ 1, alone.v->tokens, (int[]){ 0,
				(int)pv[i].ntokens }, &id }, &p, &(struct gen_result){ out, lp, &len },
			       &e) == NR_OK);
		generator_free(&g);
		CHECK(len == all.len[i] && memcmp(out, all.tokens[i], sizeof out) == 0);
		for (int k = 0; k < len; k++)
			CHECK_NEAR(lp[k], all.lp[i][k], 1e-4);
	}
	/* an error of the callback ends it there */
	one.stop_at = 3;
	CHECK(batches_generate(&m, &ps, &p, CTX, on_generated, &one, &e) == NR_EIO);
	CHECK(one.calls == 3 && strcmp(e.msg, "stop") == 0);
	lm_close(&m);
}

static void test_score(bool values)
{
	static struct got all, one;
	struct lm m = { 0 };
	struct err e = { 0 };

	memset(&all, 0, sizeof all);
	make_prompts(37);
	CHECK(open_lm(&m, values));
	CHECK(batches_score(&m, &ps, on_scored, &all, &e) == NR_OK);
	CHECK(all.calls == NP);
	for (size_t i = 0; i < NP; i++) {
		struct prompts alone = { ps.file, &pv[i], 1 };

		CHECK(all.order[i] == i);
		/* log-probs of each token after the first; values of each */
		CHECK(all.n[i] == (int)pv[i].ntokens - !values);
		memset(&one, 0, sizeof one);
		CHECK(batches_score(&m, &alone, on_scored, &one, &e) == NR_OK);
		CHECK(one.calls == 1 && one.n[0] == all.n[i]);
		for (int k = 0; k < all.n[i]; k++) {
			CHECK_NEAR(one.v[0][k], all.v[i][k], 1e-4);
			CHECK(values || all.v[i][k] <= 0);
		}
	}
	lm_close(&m);
}

static void test_score_logprobs(void)
{
	test_score(false);
}

static void test_score_values(void)
{
	test_score(true);
}

/* The model to run: the one named, else the only one or the actor; a
 * model with a score head scores and never generates; a prompt to
 * continue leaves one position for the continuation. */
static void test_model(void)
{
	static struct manifest mf;
	struct model md;
	struct err e = { 0 };
	int i = -1;

	mf.nmodels = 2;
	snprintf(mf.models[0].lo.name, sizeof mf.models[0].lo.name, "critic");
	mf.models[0].lo.arch = tiny_arch(2, 16, 4, 2, 24, 37, false, true, true);
	snprintf(mf.models[1].lo.name, sizeof mf.models[1].lo.name, "actor");
	mf.models[1].lo.arch = tiny_arch(2, 16, 4, 2, 24, 37, false, true, false);
	mf.models[1].lo.arch.max_pos = 32;
	CHECK(batches_model(&mf, NULL, "s", false, &i, &md, &e) == NR_OK);
	CHECK(i == 1 && strcmp(md.name, "actor") == 0 && md.arch.max_pos == 32);
	CHECK(batches_positions(&md) == 32);
	CHECK(batches_limits(&md, false).max_len == 31 && batches_limits(&md, true).max_len == 32);
	CHECK(batches_limits(&md, false).vocab == 37);
	CHECK(batches_model(&mf, "critic", "s", true, &i, &md, &e) == NR_OK);
	CHECK(i == 0 && md.arch.score_head);
	/* no max_pos: 2^20 positions */
	CHECK(batches_positions(&md) == 1L << 20);
	CHECK(batches_model(&mf, "critic", "s", false, &i, &md, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "model 'critic' has a score head") != NULL);
	CHECK(batches_model(&mf, "ref", "s", false, &i, &md, &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "store 's' has no model 'ref'") == 0);
	snprintf(mf.models[1].lo.name, sizeof mf.models[1].lo.name, "policy");
	CHECK(batches_model(&mf, NULL, "s", true, &i, &md, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "none is called actor") != NULL);
	/* one model: that one, whatever its name */
	mf.nmodels = 1;
	CHECK(batches_model(&mf, NULL, "s", true, &i, &md, &e) == NR_OK && i == 0);
}

/* A continuation's text ends at its first stop token, and a character it
 * cuts in two shows as U+FFFD. */
static void test_text(void)
{
	struct tokenizer tok;
	struct stops st;
	struct err e = { 0 };
	char *t = NULL;
	size_t n = 0;

	CHECK(tok_bytes(&tok, &e) == NR_OK);
	stops_init(&st, &tok);
	CHECK(batches_text(&tok, &st, (int[]){ 'h', 'i', tok.eos, 'x' }, 4, &t, &n, &e) == NR_OK);
	CHECK(t && n == 2 && memcmp(t, "hi", 2) == 0);
	free(t);
	/* "é" is C3 A9: the continuation stops after C3 */
	CHECK(batches_text(&tok, &st, (int[]){ 'h', 0xC3 }, 2, &t, &n, &e) == NR_OK);
	CHECK(t && n == 4 && memcmp(t, "h\xEF\xBF\xBD", 4) == 0);
	free(t);
	CHECK(batches_text(&tok, &st, (int[]){ 0xC3, 0xA9 }, 2, &t, &n, &e) == NR_OK);
	CHECK(t && n == 2 && memcmp(t, "\xC3\xA9", 2) == 0);
	free(t);
	tok_free(&tok);
}

int main(void)
{
	RUN(test_model);
	RUN(test_text);
	RUN(test_generate);
	RUN(test_score_logprobs);
	RUN(test_score_values);
	return UNIT_END();
}
