/* A store's model and tokenizer, and prompts through the model in
 * batches of BATCHES_PROMPTS, packed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"
#include "engine/batches.h"

#define BATCH BATCHES_PROMPTS

int batches_model(const struct manifest *m, const char *name, const char *store, bool score,
		  int *index, struct model *md, struct err *e)
{
	for (int i = 0; i < m->nmodels; i++)
		if ((name && strcmp(m->models[i].lo.name, name) == 0) ||
		    (!name && (m->nmodels == 1 || strcmp(m->models[i].lo.name, "actor") == 0))) {
			*index = i;
			*md = (struct model){ .arch = m->models[i].lo.arch };
			snprintf(md->name, sizeof md->name, "%s", m->models[i].lo.name);
			if (!score && md->arch.score_head)
				return err_set(e, NR_EINPUT, "model '%s' has a score head, not a "
					       "language model's: it scores (nereus-run score), it "
					       "does not generate", md->name);
			return NR_OK;
		}
	return err_set(e, NR_EINPUT, name ? "store '%s' has no model '%s'" :
			       "store '%s' has several models and none is called actor: name one "
			       "with --model", store, name);
}

long batches_positions(const struct model *md)
{
	return md->arch.max_pos ? md->arch.max_pos : 1L << 20;
}

struct prompt_limits batches_limits(const struct model *md, bool score)
{
	long ctx = batches_positions(md);

	return (struct prompt_limits){ md->arch.vocab, (size_t)(score ? ctx : ctx - 1), false };
}

int batches_tokenizer(struct store_reader *r, const char *file, struct tokenizer *tok,
		      struct stops *stops, bool *have, struct err *e)
{
	const json_t *run = store_reader_manifest(r)->run;
	const char *kind = json_string_value(json_object_get(run, "tokenizer"));
	int rc = NR_OK;

	*have = file || (kind && strcmp(kind, "bytes") == 0);
	if (file)
		rc = tok_load(tok, file, e);
	else if (*have)
		rc = tok_bytes(tok, e);
	if (rc == NR_OK && *have)
		stops_init(stops, tok);
	if (rc == NR_OK && file) {
		char dir[4096];

		stops_dir_of(file, dir, sizeof dir);
		rc = stops_add_checkpoint(stops, tok, dir, e);
	}
	return rc;
}

int batches_text(const struct tokenizer *tok, const struct stops *s, const int *tokens,
		 int len, char **text, size_t *n, struct err *e)
{
	size_t upto = task_response_len(tokens, (size_t)len, s), blen;
	char *raw;
	int rc = tok_decode(tok, tokens, upto, &raw, &blen, e);

	if (rc)
		return rc;
	*text = utf8_replace(raw, blen, n);
	free(raw);
	return *text ? NR_OK : err_oom(e);
}

/* The longest prompt and the tokens of all. */
static void measure(const struct prompts *ps, size_t *longest, size_t *total)
{
	*longest = *total = 0;
	for (size_t i = 0; i < ps->n; i++) {
		*longest = ps->v[i].ntokens > *longest ? ps->v[i].ntokens : *longest;
		*total += ps->v[i].ntokens;
	}
}

/* Prompts [p0, p1) packed. */
static void pack(const struct prompts *ps, size_t p0, size_t p1, int *tokens, int *start)
{
	int at = 0;

	start[0] = 0;
	for (size_t i = p0; i < p1; i++) {
		for (size_t k = 0; k < ps->v[i].ntokens; k++)
			tokens[at++] = ps->v[i].tokens[k];
		start[i - p0 + 1] = at;
	}
}

int batches_generate(struct lm *m, const struct prompts *ps, const struct gen_params *p,
		     long ctx, batches_generated done, void *arg, struct err *e)
{
	size_t longest, total, max_new = (size_t)p->max_new;
	int *tokens, *start, *out, *len, rc = NR_OK;
	float *lp;
	uint64_t *ids = malloc(BATCH * sizeof *ids);
	struct generator g;

	measure(ps, &longest, &total);
	tokens = malloc((total + 1) * sizeof *tokens);
	start = malloc((BATCH + 1) * sizeof *start);
	out = malloc((size_t)BATCH * max_new * sizeof *out);
	lp = malloc((size_t)BATCH * max_new * sizeof *lp);
	len = malloc(BATCH * sizeof *len);
	if (!tokens || !start || !out || !lp || !len || !ids)
		rc = err_oom(e);
	if (rc == NR_OK)
		rc = generator_init(&g, &m->dec, BATCH,
				    (int)(longest + max_new < (size_t)ctx ? longest + max_new :
									  (size_t)ctx),
				    (int)(longest * BATCH), e);
	for (size_t p0 = 0; p0 < ps->n && rc == NR_OK; p0 += BATCH) {
		size_t p1 = p0 + BATCH < ps->n ? p0 + BATCH : ps->n;

		pack(ps, p0, p1, tokens, start);
		for (size_t i = p0; i < p1; i++)
			ids[i - p0] = i; /* a prompt samples the same whatever its batch */
		rc = generator_run(&g, &(struct gen_request){ (int)(p1 - p0), tokens, start, ids }, p,
			      &(struct gen_result){ out, lp, len }, e);
		if (rc == NR_EIO)
			err_prefix(e, "%s:%ld", ps->file, ps->v[p0 + (size_t)g.bad_seq].line);
		for (size_t b = 0; b < p1 - p0 && rc == NR_OK; b++)
			rc = done(arg, p0 + b, out + b * max_new, lp + b * max_new, len[b], e);
	}
	if (tokens && start && out && lp && len && ids)
		generator_free(&g);
	free(tokens);
	free(start);
	free(out);
	free(lp);
	free(len);
	free(ids);
	return rc;
}

int batches_score(struct lm *m, const struct prompts *ps, batches_scored done, void *arg,
		  struct err *e)
{
	bool values = m->st.lo.arch.score_head;
	size_t longest, total;
	int *tokens, *start, rc = NR_OK;
	float *out;

	measure(ps, &longest, &total);
	tokens = malloc((total + 1) * sizeof *tokens);
	start = malloc((BATCH + 1) * sizeof *start);
	out = malloc((longest * BATCH + 1) * sizeof *out);
	if (!tokens || !start || !out)
		rc = err_oom(e);
	for (size_t p0 = 0; p0 < ps->n && rc == NR_OK; p0 += BATCH) {
		size_t p1 = p0 + BATCH < ps->n ? p0 + BATCH : ps->n;
		struct batch b = { (int)(p1 - p0), 0, tokens, start, NULL, 1 };

		pack(ps, p0, p1, tokens, start);
		b.T = start[b.B];
		rc = lm_acts(m, b.T, (int)longest, false, e);
		if (rc == NR_OK)
			rc = model_forward(&m->dec, &m->acts, &b, NULL,
					   &(struct model_out){ values ? NULL : out, NULL,
								values ? out : NULL }, e);
		for (int s = 0; s < b.B && rc == NR_OK; s++) {
			/* log p(t_{i+1} | t_0..t_i): one fewer than the tokens */
			int n = start[s + 1] - start[s] - !values;

			for (int i = 0; i < n && rc == NR_OK; i++) {
				float v = out[start[s] + i];

				if (!isfinite(v))
					rc = err_set(e, NR_EIO, "%s:%ld: %s %d is %g, not finite: the "
						     "model's weights or activations hold a NaN or "
						     "an infinity", ps->file, ps->v[p0 + (size_t)s].line,
						     values ? "value" : "log-prob", i, (double)v);
			}
			if (rc == NR_OK)
				rc = done(arg, p0 + (size_t)s, out + start[s], n, e);
		}
	}
	free(tokens);
	free(start);
	free(out);
	return rc;
}
