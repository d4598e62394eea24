/* nereus-run generate and score: one model of a state store on its own,
 * sampling continuations of prompts, or taking the log-probabilities (a
 * scalar head's values) of given sequences.  JSON Lines in, JSON Lines
 * out, one line per prompt. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/out.h"
#include "engine/generate.h"
#include "engine/lm.h"
#include "engine/task.h"
#include "subcommands.h"

#define BATCH 64 /* prompts run together */

static const char generate_usage[] =
	"usage: nereus-run generate --state STORE [--model NAME] --prompts FILE [--max-new N]\n"
	"                  [--temperature T] [--top-p P] [--top-k K] [--seed S]\n"
	"                  [--tokenizer FILE] [-o FILE]\n"
	"       nereus-run score --state STORE [--model NAME] --prompts FILE [--tokenizer FILE]\n"
	"                  [-o FILE]\n"
	"\n"
	"  --state STORE       the state store (a directory)\n"
	"  --model NAME        its model to run (default: its only one, or its actor)\n"
	"  --prompts FILE      JSON Lines: {\"tokens\": [ids]}, {\"text\": \"...\"} or\n"
	"                      {\"messages\": [{\"role\": ..., \"content\": ...}]} each\n"
	"  --max-new N         generate: tokens generated per prompt at most (default 64)\n"
	"  --temperature T     generate: 0 is greedy (default 1)\n"
	"  --top-p P           generate: nucleus sampling (default 1, off)\n"
	"  --top-k K           generate: the K most likely tokens only (default 0, off)\n"
	"  --seed S            generate: the sampling's seed (default 1)\n"
	"  --tokenizer FILE    a tokenizer.json for text, its folder's generation_config.json\n"
	"                      and tokenizer_config.json for stop tokens and the chat\n"
	"                      template (default: the byte vocabulary of a store\n"
	"                      nereus-run init made)\n"
	"  -o, --output FILE   write the lines to FILE (default: standard output)\n"
	"  -h, --help          show this help\n"
	"  -V, --version       show the version\n"
	"\n"
	"Exit status: 0 every prompt ran, 2 bad usage or input, 4 runtime or I/O failure.\n";

struct gargs {
	bool score;
	const char *state, *model, *prompts, *tokenizer, *out;
	long max_new, top_k, seed;
	double temperature, top_p;
};

static int parse(int argc, char **argv, bool score, struct gargs *a)
{
	static const struct option options[] = {
		{ "state", required_argument, NULL, 's' },
		{ "model", required_argument, NULL, 'm' },
		{ "prompts", required_argument, NULL, 'p' },
		{ "max-new", required_argument, NULL, 'n' },
		{ "temperature", required_argument, NULL, 't' },
		{ "top-p", required_argument, NULL, 'P' },
		{ "top-k", required_argument, NULL, 'k' },
		{ "seed", required_argument, NULL, 'S' },
		{ "tokenizer", required_argument, NULL, 'T' },
		{ "output", required_argument, NULL, 'o' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	int c, rc;

	*a = (struct gargs){ .score = score, .max_new = 64, .seed = 1, .temperature = 1,
			     .top_p = 1 };
	set_subcommand(score ? "score" : "generate");
	while ((c = getopt_long(argc, argv, ":o:hV", options, NULL)) != -1) {
		switch (c) {
		case 's': a->state = optarg; break;
		case 'm': a->model = optarg; break;
		case 'p': a->prompts = optarg; break;
		case 'T': a->tokenizer = optarg; break;
		case 'o': a->out = optarg; break;
		case 'n': rc = parse_long("--max-new", optarg, 1, 1 << 20, &a->max_new); break;
		case 'k': rc = parse_long("--top-k", optarg, 0, 1 << 30, &a->top_k); break;
		case 'S': rc = parse_long("--seed", optarg, 0, 1L << 62, &a->seed); break;
		case 't': rc = parse_double("--temperature", optarg, 0, &a->temperature); break;
		case 'P': rc = parse_double("--top-p", optarg, 0, &a->top_p); break;
		case 'h':
			fputs(generate_usage, stdout);
			return -1;
		case 'V':
			print_version();
			return -1;
		default:
			return option_error(c, argv, options);
		}
		if (c == 'n' || c == 'k' || c == 'S' || c == 't' || c == 'P')
			if (rc)
				return rc;
	}
	if (optind < argc)
		return usage_error("unexpected argument '%s'", argv[optind]);
	if (!a->state || !a->prompts)
		return usage_error("--state and --prompts are required");
	if (a->top_p <= 0 || a->top_p > 1)
		return usage_error("option '--top-p' expects a number above 0 and at most 1, got "
				   "'%g'", a->top_p);
	if (score && (a->max_new != 64 || a->top_k || a->seed != 1 || a->temperature != 1 ||
		      a->top_p != 1))
		return usage_error("score takes no sampling options");
	return NR_OK;
}

/* The store's model to run: the one named, the only one, or the actor
 * (the model nereus-run init made first). */
static int pick(struct store_reader *r, const struct gargs *a, int *mi, struct err *e)
{
	const struct manifest *m = store_reader_manifest(r);

	for (int i = 0; i < m->nmodels; i++)
		if ((a->model && strcmp(m->models[i].lo.name, a->model) == 0) ||
		    (!a->model && (m->nmodels == 1 || strcmp(m->models[i].lo.name, "actor") == 0))) {
			*mi = i;
			return NR_OK;
		}
	return err_set(e, NR_EINPUT, a->model ? "store '%s' has no model '%s'" :
			       "store '%s' has several models and none is called actor: name one "
			       "with --model", a->state, a->model);
}

/* The tokenizer: --tokenizer, or the byte vocabulary the store says its
 * models speak; *have false when neither.  Its stop tokens: its eos and
 * those its checkpoint folder's configuration names. */
static int tokenizer(struct store_reader *r, const struct gargs *a, struct tokenizer *tok,
		     struct stops *stops, bool *have, struct err *e)
{
	const json_t *run = store_reader_manifest(r)->run;
	const char *kind = json_string_value(json_object_get(run, "tokenizer"));
	int rc = NR_OK;

	*have = a->tokenizer || (kind && strcmp(kind, "bytes") == 0);
	if (a->tokenizer)
		rc = tok_load(tok, a->tokenizer, e);
	else if (*have)
		rc = tok_bytes(tok, e);
	if (rc == NR_OK && *have)
		stops_init(stops, tok);
	if (rc == NR_OK && a->tokenizer) {
		char dir[DATA_PATH_MAX];

		stops_dir_of(a->tokenizer, dir, sizeof dir);
		rc = stops_add_checkpoint(stops, tok, dir, e);
	}
	return rc;
}

/* bytes as a JSON string: invalid UTF-8 (a character a generation cut in
 * two) becomes U+FFFD, one for each maximal subpart of an ill-formed
 * sequence (the longest start of a well-formed character, or else one
 * byte), as Unicode recommends and Python's errors="replace" does. */
static json_t *text_json(const char *s, size_t n)
{
	char *buf = malloc(3 * n + 1);
	size_t k = 0;
	json_t *j;

	if (!buf)
		return NULL;
	for (size_t i = 0; i < n;) {
		unsigned char c = (unsigned char)s[i];
		size_t len = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 :
			     c >= 0xf0 && c <= 0xf4 ? 4 : 0, t = 1;

		/* continuation bytes lie in 80..BF, the second of some leads
		 * narrower: no overlong forms, surrogates or code points past
		 * U+10FFFF */
		while (t < len && i + t < n) {
			unsigned char d = (unsigned char)s[i + t];
			unsigned lo = t == 1 && c == 0xe0 ? 0xa0 : t == 1 && c == 0xf0 ? 0x90 : 0x80;
			unsigned hi = t == 1 && c == 0xed ? 0x9f : t == 1 && c == 0xf4 ? 0x8f : 0xbf;

			if (d < lo || d > hi)
				break;
			t++;
		}
		if (len > 0 && t == len) {
			memcpy(buf + k, s + i, len);
			k += len;
		} else {
			memcpy(buf + k, "\xef\xbf\xbd", 3);
			k += 3;
		}
		i += t;
	}
	j = json_stringn(buf, k);
	free(buf);
	return j;
}

static int put_line(FILE *f, const char *name, json_t *o, struct err *e)
{
	int rc = o && json_dumpf(o, f, JSON_COMPACT | JSON_REAL_PRECISION(9)) == 0 &&
			 fputc('\n', f) != EOF ? NR_OK :
		 err_set(e, NR_EIO, "cannot write '%s': %s", name, strerror(errno));

	json_decref(o);
	return rc;
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

/* ctx: the model's positions; a sequence stops at them, as at max_new. */
static int run_generate(struct lm *m, const struct prompts *ps, const struct gargs *a, long ctx,
			const struct tokenizer *tok, const struct stops *stops, bool have_tok,
			FILE *f, const char *name, struct err *e)
{
	struct gen_params gp = { .temperature = (float)a->temperature,
				 .top_p = a->top_p < 1 ? (float)a->top_p : 0, .top_k = (int)a->top_k,
				 .max_new = (int)a->max_new, .seed = (uint64_t)a->seed };
	size_t longest = 0, total = 0;
	int *tokens, *start, *out, *len, rc = NR_OK;
	float *lp;
	uint64_t *ids = malloc(BATCH * sizeof *ids);
	struct generator g;

	if (have_tok)
		gp.vocab = tok->n;
	if (have_tok)
		stops_to_gen(stops, &gp);
	for (size_t i = 0; i < ps->n; i++) {
		longest = ps->v[i].ntokens > longest ? ps->v[i].ntokens : longest;
		total += ps->v[i].ntokens;
	}
	tokens = malloc((total + 1) * sizeof *tokens);
	start = malloc((BATCH + 1) * sizeof *start);
	out = malloc((size_t)BATCH * (size_t)a->max_new * sizeof *out);
	lp = malloc((size_t)BATCH * (size_t)a->max_new * sizeof *lp);
	len = malloc(BATCH * sizeof *len);
	if (!tokens || !start || !out || !lp || !len || !ids)
		rc = err_set(e, NR_EIO, "out of memory");
	if (rc == NR_OK)
		rc = generator_init(&g, &m->dec, BATCH,
				    (int)(longest + (size_t)a->max_new < (size_t)ctx ?
					  longest + (size_t)a->max_new : (size_t)ctx),
				    (int)(longest * BATCH), e);
	for (size_t p0 = 0; p0 < ps->n && rc == NR_OK; p0 += BATCH) {
		size_t p1 = p0 + BATCH < ps->n ? p0 + BATCH : ps->n;

		pack(ps, p0, p1, tokens, start);
		for (size_t i = p0; i < p1; i++)
			ids[i - p0] = i; /* a prompt samples the same whatever its batch */
		rc = generate(&g, &(struct gen_request){ (int)(p1 - p0), tokens, start, ids }, &gp,
			      &(struct gen_result){ out, lp, len }, e);
		if (rc == NR_EIO)
			err_prefix(e, "%s:%ld", ps->file, ps->v[p0 + (size_t)g.bad_seq].line);
		for (size_t b = 0; b < p1 - p0 && rc == NR_OK; b++) {
			const int *o = out + b * (size_t)a->max_new;
			json_t *line = json_object(), *t = json_array(), *l = json_array();

			for (int j = 0; j < len[b]; j++) {
				json_array_append_new(t, json_integer(o[j]));
				json_array_append_new(l, json_real(lp[b * (size_t)a->max_new + (size_t)j]));
			}
			json_object_set_new(line, "tokens", t);
			json_object_set_new(line, "logprobs", l);
			if (have_tok) {
				size_t n = task_response_len(o, (size_t)len[b], stops), blen;
				char *text;

				if ((rc = tok_decode(tok, o, n, &text, &blen, e)))
					break;
				json_object_set_new(line, "text", text_json(text, blen));
				free(text);
			}
			rc = put_line(f, name, line, e);
		}
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

static int run_score(struct lm *m, const struct prompts *ps, FILE *f, const char *name,
		     struct err *e)
{
	bool values = m->st.lo.arch.score_head;
	size_t longest = 0, total = 0;
	int *tokens, *start, rc = NR_OK;
	float *out;

	for (size_t i = 0; i < ps->n; i++) {
		longest = ps->v[i].ntokens > longest ? ps->v[i].ntokens : longest;
		total += ps->v[i].ntokens;
	}
	tokens = malloc((total + 1) * sizeof *tokens);
	start = malloc((BATCH + 1) * sizeof *start);
	out = malloc((longest * BATCH + 1) * sizeof *out);
	if (!tokens || !start || !out)
		rc = err_set(e, NR_EIO, "out of memory");
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
			json_t *line = json_object(), *arr = json_array();
			/* log p(t_{i+1} | t_0..t_i): one fewer than the tokens */
			int n = start[s + 1] - start[s] - !values;

			for (int i = 0; i < n && rc == NR_OK; i++) {
				float v = out[start[s] + i];

				if (isfinite(v))
					json_array_append_new(arr, json_real(v));
				else
					rc = err_set(e, NR_EIO, "%s:%ld: %s %d is %g, not finite: the "
						     "model's weights or activations hold a NaN or "
						     "an infinity", ps->file, ps->v[p0 + (size_t)s].line,
						     values ? "value" : "log-prob", i, (double)v);
			}
			json_object_set_new(line, values ? "values" : "logprobs", arr);
			if (rc == NR_OK)
				rc = put_line(f, name, line, e);
			else
				json_decref(line);
		}
	}
	free(tokens);
	free(start);
	free(out);
	return rc;
}

static int generate_or_score(int argc, char **argv, bool score)
{
	struct gargs a;
	struct store_reader *r = NULL;
	struct tokenizer tok;
	struct stops stops;
	struct prompts ps = { 0 };
	struct lm m = { 0 };
	struct model md = { 0 };
	struct err e = { 0 };
	bool have_tok = false, opened = false;
	struct outfile of;
	FILE *f = stdout;
	const char *name;
	int rc = parse(argc, argv, score, &a), mi = 0;
	long ctx;

	if (rc < 0)
		return NR_OK;
	if (rc)
		return rc;
	name = a.out && strcmp(a.out, "-") ? a.out : "<stdout>";
	if ((rc = store_reader_open(&r, a.state, &e)) || (rc = pick(r, &a, &mi, &e)) ||
	    (rc = tokenizer(r, &a, &tok, &stops, &have_tok, &e)))
		goto out;
	md.arch = store_reader_manifest(r)->models[mi].lo.arch;
	snprintf(md.name, sizeof md.name, "%s", store_reader_manifest(r)->models[mi].lo.name);
	if (!score && md.arch.score_head) {
		rc = err_set(&e, NR_EINPUT, "model '%s' has a score head, not a language model's: "
			     "it scores (nereus-run score), it does not generate", md.name);
		goto out;
	}
	/* a prompt to continue leaves room for one token at least */
	ctx = md.arch.max_pos ? md.arch.max_pos : 1L << 20;
	if ((rc = prompts_load_chat(&ps, a.prompts,
				    &(struct prompt_limits){ md.arch.vocab,
							     (size_t)(score ? ctx : ctx - 1), false },
				    have_tok ? &tok : NULL, a.tokenizer, &e)))
		goto out;
	if ((rc = lm_open(&m, &md, 0, false, r, mi, 0, &e)))
		goto out;
	opened = true;
	/* -o FILE appears whole or not at all: a prompt that fails halfway
	 * leaves what was there */
	if (a.out && (rc = out_open_file(&of, a.out, &f, &e)))
		goto out;
	rc = score ? run_score(&m, &ps, f, name, &e) :
		     run_generate(&m, &ps, &a, ctx, &tok, &stops, have_tok, f, name, &e);
	if (a.out && rc == NR_OK)
		rc = out_commit_file(&of, f, &e);
	else if (a.out)
		out_abort_file(&of, f);
out:
	if (opened)
		lm_close(&m);
	prompts_free(&ps);
	if (have_tok)
		tok_free(&tok);
	store_reader_close(r);
	return rc ? report(&e) : NR_OK;
}

int cmd_generate(int argc, char **argv)
{
	return generate_or_score(argc, argv, false);
}

int cmd_score(int argc, char **argv)
{
	return generate_or_score(argc, argv, true);
}
