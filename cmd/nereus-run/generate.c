/* nereus-run generate and score: one model of a state store on its own,
 * sampling continuations of prompts, or taking the log-probabilities (a
 * scalar head's values) of given sequences.  JSON Lines in, JSON Lines
 * out, one line per prompt. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/out.h"
#include "engine/batches.h"
#include "subcommands.h"

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
		default:
			return option_tail(c, argc, argv, options, generate_usage);
		}
		if (c == 'n' || c == 'k' || c == 'S' || c == 't' || c == 'P')
			if (rc)
				return rc;
	}
	if ((rc = option_tail(-1, argc, argv, options, generate_usage)))
		return rc;
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

/* Where the lines go, and what generate's need. */
struct sink {
	FILE *f;
	const char *name;
	bool values;                /* score: a score head's values */
	const struct tokenizer *tok; /* generate: the text too, when not NULL */
	const struct stops *stops;   /* generate: where a response ends (with tok) */
};

static int put_line(const struct sink *k, json_t *o, struct err *e)
{
	int rc = o && json_dumpf(o, k->f, JSON_COMPACT | JSON_REAL_PRECISION(9)) == 0 &&
			 fputc('\n', k->f) != EOF ? NR_OK :
		 err_set(e, NR_EIO, "cannot write '%s': %s", k->name, strerror(errno));

	json_decref(o);
	return rc;
}

static int put_generated(void *arg, size_t i, const int *o, const float *lp, int len,
			 struct err *e)
{
	const struct sink *k = arg;
	json_t *line = json_object(), *t = json_array(), *l = json_array();

	(void)i;
	for (int j = 0; j < len; j++) {
		json_array_append_new(t, json_integer(o[j]));
		json_array_append_new(l, json_real(lp[j]));
	}
	json_object_set_new(line, "tokens", t);
	json_object_set_new(line, "logprobs", l);
	if (k->tok) {
		size_t n;
		char *text;
		int rc = batches_text(k->tok, k->stops, o, len, &text, &n, e);

		if (rc) {
			json_decref(line);
			return rc;
		}
		json_object_set_new(line, "text", json_stringn(text, n));
		free(text);
	}
	return put_line(k, line, e);
}

static int put_scored(void *arg, size_t i, const float *v, int n, struct err *e)
{
	const struct sink *k = arg;
	json_t *line = json_object(), *arr = json_array();

	(void)i;
	for (int j = 0; j < n; j++)
		json_array_append_new(arr, json_real(v[j]));
	json_object_set_new(line, k->values ? "values" : "logprobs", arr);
	return put_line(k, line, e);
}

/* ctx: the model's positions; a sequence stops at them, as at max_new. */
static int run_generate(struct lm *m, const struct prompts *ps, const struct gargs *a, long ctx,
			struct sink *k, struct err *e)
{
	struct gen_params gp = { .temperature = (float)a->temperature,
				 .top_p = a->top_p < 1 ? (float)a->top_p : 0, .top_k = (int)a->top_k,
				 .max_new = (int)a->max_new, .seed = (uint64_t)a->seed };

	if (k->tok)
		gp.vocab = k->tok->n;
	if (k->tok)
		stops_to_gen(k->stops, &gp);
	return batches_generate(m, ps, &gp, ctx, put_generated, k, e);
}

static int generate_or_score(int argc, char **argv, bool score)
{
	struct gargs a;
	struct store_reader *r = NULL;
	struct tokenizer tok;
	struct stops stops;
	struct prompts ps = { 0 };
	struct lm m = { 0 };
	struct model md;
	struct err e = { 0 };
	bool have_tok = false, opened = false;
	struct outfile of;
	FILE *f = stdout;
	const char *name;
	struct prompt_limits lim;
	int rc = parse(argc, argv, score, &a), mi = 0;

	if (rc == OPTIONS_DONE)
		return NR_OK;
	if (rc)
		return rc;
	name = a.out && strcmp(a.out, "-") ? a.out : "<stdout>";
	if ((rc = store_reader_open(&r, a.state, &e)) ||
	    (rc = batches_model(store_reader_manifest(r), a.model, a.state, score, &mi, &md,
				&e)) ||
	    (rc = batches_tokenizer(r, a.tokenizer, &tok, &stops, &have_tok, &e)))
		goto out;
	lim = batches_limits(&md, score);
	if ((rc = prompts_load_chat(&ps, a.prompts, &lim, have_tok ? &tok : NULL, a.tokenizer,
				    &e)))
		goto out;
	if ((rc = lm_open(&m, &md, 0, false, r, mi, 0, &e)))
		goto out;
	opened = true;
	/* -o FILE appears whole or not at all: a prompt that fails halfway
	 * leaves what was there */
	if (a.out && (rc = out_open_file(&of, a.out, &f, &e)))
		goto out;
	rc = score ? batches_score(&m, &ps, put_scored,
				   &(struct sink){ f, name, m.st.lo.arch.score_head, NULL, NULL }, &e) :
		     run_generate(&m, &ps, &a, batches_positions(&md),
				  &(struct sink){ f, name, false, have_tok ? &tok : NULL, &stops },
				  &e);
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
