/* engine_probe: the engine on a store, for the PyTorch comparison
 * (tests/torch/compare_engine.py).
 *
 *     engine_probe STORE REQUEST.json
 *
 * STORE holds one model (nereus-transition import of a Hugging Face
 * checkpoint, in any layout); the probe loads its weights into one rank's
 * buffer with store_reader_load.  REQUEST.json:
 *     {"sequences": [[ids]...], "temperature": T,
 *      "logp_weights": [[w per position]...], "entropy_weights": [[...]],
 *      "value_weights": [[...]], "prompts": [[ids]...], "max_new": N,
 *      "head_chunk": tokens per LM-head chunk (optional)}
 * Prints one JSON object: per sequence "logprobs" (log p of each next
 * token at temperature T), "entropy" and "values" (score head); "grads",
 * by Hugging Face tensor name, of sum w·logp + sum u·entropy (or sum c·value);
 * for each prompt the greedy continuation, "greedy", and its log-probs. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/generate.h"
#include "engine/model.h"
#include "hf_json.h"
#include "state/store.h"

static void die(const char *what, const struct err *e)
{
	fprintf(stderr, "engine_probe: %s: %s\n", what, e ? e->msg : "failed");
	exit(1);
}

static int jint(json_t *o, const char *k, int dflt)
{
	json_t *v = json_object_get(o, k);

	return v ? (int)json_integer_value(v) : dflt;
}

static double jnum(json_t *o, const char *k, double dflt)
{
	json_t *v = json_object_get(o, k);

	return v ? json_number_value(v) : dflt;
}

struct probe {
	struct arch a;
	struct layout lo;
	struct piece *p;
	size_t np;
	float *w, *g;
	struct decoder m;
};

static void load(struct probe *pr, const char *store)
{
	struct store_reader *r;
	struct err e = { 0 };
	size_t n;

	if (store_reader_open(&r, store, &e))
		die(store, &e);
	pr->a = store_reader_manifest(r)->models[0].lo.arch;
	if (layout_init(&pr->lo, &pr->a, 1, 1, 1, false, NULL, &e) ||
	    layout_pieces(&pr->lo, KIND_WEIGHT, 0, 0, 0, &pr->p, &pr->np, &e))
		die("layout", &e);
	n = (size_t)(pr->p[pr->np - 1].local_off + pr->p[pr->np - 1].local_len);
	pr->w = calloc(n, sizeof *pr->w);
	pr->g = calloc(n, sizeof *pr->g);
	if (store_reader_load(r, 0, KIND_WEIGHT, &pr->lo, 0, 0, 0, pr->w, &e))
		die(store, &e);
	store_reader_close(r);
	if (model_init(&pr->m, &pr->lo, 0, 0, kernels_cpu(), comm_self(), &e) ||
	    model_bind(&pr->m, &pr->lo, pr->w, pr->g, &e))
		die("model", &e);
}

/* Sequences (arrays of ids) packed into tokens and start; returns the
 * tokens. */
static int pack(json_t *seqs, int *tokens, int *start)
{
	size_t i, j;
	json_t *s, *v;
	int t = 0;

	start[0] = 0;
	json_array_foreach(seqs, i, s) {
		json_array_foreach(s, j, v)
			tokens[t++] = (int)json_integer_value(v);
		start[i + 1] = t;
	}
	return t;
}

/* Per-position numbers, packed as pack packs the sequences. */
static void unpack_nums(json_t *seqs, float *out)
{
	size_t i, j;
	json_t *s, *v;
	int t = 0;

	json_array_foreach(seqs, i, s)
		json_array_foreach(s, j, v)
			out[t++] = (float)json_number_value(v);
}

/* Per sequence arrays of x over [start[b] + from, start[b+1] - cut). */
static json_t *per_seq(const float *x, const int *start, int B, int from, int cut)
{
	json_t *out = json_array();

	for (int b = 0; b < B; b++) {
		json_t *row = json_array();

		for (int t = start[b] + from; t < start[b + 1] - cut; t++)
			json_array_append_new(row, json_real(x[t]));
		json_array_append_new(out, row);
	}
	return out;
}

static void score_and_grad(struct probe *pr, json_t *req, json_t *out)
{
	json_t *seqs = json_object_get(req, "sequences");
	int B = (int)json_array_size(seqs), maxlen = 0;
	int *tokens = malloc(65536 * sizeof *tokens), *start = malloc((B + 1) * sizeof *start);
	float *buf = calloc(6 * 65536, sizeof *buf);
	float *logp = buf, *ent = buf + 65536, *val = buf + 2 * 65536;
	float *wl = buf + 3 * 65536, *we = buf + 4 * 65536, *wv = buf + 5 * 65536;
	int T = pack(seqs, tokens, start);
	struct batch b = { B, T, tokens, start, NULL, (float)jnum(req, "temperature", 1) };
	struct model_acts acts;
	struct err e = { 0 };

	for (int s = 0; s < B; s++)
		if (start[s + 1] - start[s] > maxlen)
			maxlen = start[s + 1] - start[s];
	if (model_acts_init(&acts, &pr->m, T, maxlen, true, &e))
		die("activations", &e);
	if (jint(req, "head_chunk", 0) > 0)
		acts.head_chunk = jint(req, "head_chunk", 0);
	if (model_forward(&pr->m, &acts, &b, NULL, &(struct model_out){ logp, ent, val }, &e))
		die("forward", &e);
	if (pr->a.score_head) {
		json_object_set_new(out, "values", per_seq(val, start, B, 0, 0));
		unpack_nums(json_object_get(req, "value_weights"), wv);
	} else {
		json_object_set_new(out, "logprobs", per_seq(logp, start, B, 0, 1));
		json_object_set_new(out, "entropy", per_seq(ent, start, B, 0, 0));
		unpack_nums(json_object_get(req, "logp_weights"), wl);
		unpack_nums(json_object_get(req, "entropy_weights"), we);
	}
	if (model_backward(&pr->m, &acts, &b, &(struct model_dout){ wl, we, wv }, NULL, &e))
		die("backward", &e);
	json_object_set_new(out, "grads", hf_json(&pr->lo, pr->g));
	model_acts_free(&acts);
	free(tokens);
	free(start);
	free(buf);
}

static void greedy(struct probe *pr, json_t *req, json_t *out)
{
	json_t *prompts = json_object_get(req, "prompts");
	json_t *toks = json_array(), *lps = json_array();
	int B = (int)json_array_size(prompts), n = jint(req, "max_new", 8);
	int *tokens = malloc(65536 * sizeof *tokens), *start = malloc((B + 1) * sizeof *start);
	int *gen = malloc((size_t)B * n * sizeof *gen), *len = malloc(B * sizeof *len);
	float *lp = malloc((size_t)B * n * sizeof *lp);
	struct gen_params p = { .temperature = 0, .top_p = 1, .max_new = n };
	struct generator g;
	struct err e = { 0 };
	int T = pack(prompts, tokens, start);

	if (generator_init(&g, &pr->m, B, T + n, T, &e) ||
	    generator_run(&g, &(struct gen_request){ B, tokens, start, NULL }, &p,
		     &(struct gen_result){ gen, lp, len }, &e))
		die("generate", &e);
	for (int b = 0; b < B; b++) {
		json_t *t = json_array(), *l = json_array();

		for (int j = 0; j < len[b]; j++) {
			json_array_append_new(t, json_integer(gen[b * n + j]));
			json_array_append_new(l, json_real(lp[b * n + j]));
		}
		json_array_append_new(toks, t);
		json_array_append_new(lps, l);
	}
	json_object_set_new(out, "greedy", toks);
	json_object_set_new(out, "greedy_logprobs", lps);
	generator_free(&g);
	free(tokens);
	free(start);
	free(gen);
	free(len);
	free(lp);
}

int main(int argc, char **argv)
{
	struct probe pr = { 0 };
	json_error_t je;
	json_t *req, *out = json_object();

	if (argc != 3) {
		fprintf(stderr, "usage: engine_probe STORE REQUEST.json\n");
		return 2;
	}
	req = json_load_file(argv[2], 0, &je);
	if (!req) {
		fprintf(stderr, "engine_probe: %s:%d: %s\n", argv[2], je.line, je.text);
		return 1;
	}
	load(&pr, argv[1]);
	score_and_grad(&pr, req, out);
	if (!pr.a.score_head && json_array_size(json_object_get(req, "prompts")))
		greedy(&pr, req, out);
	json_dumpf(out, stdout, JSON_COMPACT | JSON_REAL_PRECISION(9));
	putchar('\n');
	json_decref(out);
	json_decref(req);
	model_free(&pr.m);
	free(pr.p);
	free(pr.w);
	free(pr.g);
	layout_free(&pr.lo);
	return 0;
}
