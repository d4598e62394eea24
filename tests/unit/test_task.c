/* Tasks (lib/engine/task.h): the prompts-file reader and each bad line it
 * reports at its line, the reward rules, the warm-up target, and the
 * shipped built-in tasks. */
#include <stdlib.h>
#include <string.h>

#include "engine/task.h"
#include "unit.h"
#include "unitfs.h"

static char root[PATH_MAX];

static struct tokenizer tok; /* the built-in byte vocabulary */

static const struct prompt_limits lim = { .vocab = 258, .max_len = 8, .need_answer = true };

/* Write text to root/name and load it; returns the status. */
static int load(const char *text, struct prompts *p, const struct prompt_limits *l,
		struct err *e)
{
	char file[PATH_MAX + 32];
	FILE *f;

	snprintf(file, sizeof file, "%s/p.jsonl", root);
	f = fopen(file, "w");
	fputs(text, f);
	fclose(f);
	return prompts_load(p, file, l, &tok, e);
}

static void reads_both_forms(void)
{
	struct prompts p;
	struct err e;

	CHECK(load("{\"text\": \"3+4=\", \"answer\": \"7\"}\n"
		   "\n"
		   "  {\"tokens\": [256, 50, 43, 50, 61], \"answer\": 4}\r\n"
		   "{\"tokens\": [1]}", &p, &(struct prompt_limits){ 258, 8, false }, &e) == NR_OK);
	CHECK(p.n == 3);
	/* text after the tokenizer's BOS; tokens as given */
	CHECK(p.v[0].ntokens == 5 && p.v[0].tokens[0] == 256 && p.v[0].tokens[1] == '3' &&
	      p.v[0].tokens[4] == '=');
	CHECK(!strcmp(p.v[0].text, "3+4=") && !strcmp(p.v[0].answer, "7") && p.v[0].line == 1);
	CHECK(p.v[1].ntokens == 5 && p.v[1].tokens[0] == 256 && !p.v[1].text);
	CHECK(!strcmp(p.v[1].answer, "4") && p.v[1].line == 3);
	CHECK(p.v[2].answer == NULL && p.v[2].line == 4);
	prompts_free(&p);
}

/* Each bad line fails with FILE:LINE and what was wrong. */
static void bad_lines(void)
{
	static const struct { const char *text, *msg; } cases[] = {
		{ "{\"text\": \"1\", \"answer\": \"1\"}\n{\"text\": \"2\",}\n", ":2:" },
		{ "[1, 2]\n", ":1: expected a JSON object" },
		{ "{\"text\": \"1\", \"answer\": \"1\", \"hint\": 2}\n", ":1: unknown key \"hint\"" },
		{ "{\"text\": \"1\", \"tokens\": [1], \"answer\": \"1\"}\n", "exactly one of" },
		{ "{\"answer\": \"1\"}\n", "exactly one of" },
		{ "\n{\"tokens\": [1, 258], \"answer\": \"1\"}\n",
		  ":2: \"tokens\"[1]: token id 258 lies outside the vocabulary of 258" },
		{ "{\"tokens\": [-1], \"answer\": \"1\"}\n", "token id -1" },
		{ "{\"tokens\": [1.5], \"answer\": \"1\"}\n", "\"tokens\"[0]: expected a token id" },
		{ "{\"tokens\": \"12\", \"answer\": \"1\"}\n", "\"tokens\": expected an array" },
		{ "{\"text\": \"12345678\", \"answer\": \"1\"}\n",
		  ":1: the prompt has 9 tokens, more than the 8" },
		{ "{\"tokens\": [], \"answer\": \"1\"}\n", ":1: the prompt is empty" },
		{ "{\"text\": \"1\"}\n", ":1: no \"answer\"" },
		{ "{\"text\": \"1\", \"answer\": [1]}\n", "\"answer\": expected a string or an integer" },
		{ "{\"text\": 5, \"answer\": \"1\"}\n", "\"text\": expected a string" },
		{ "\n  \n", "p.jsonl: no prompts" },
	};

	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		struct prompts p;
		struct err e;

		if (load(cases[i].text, &p, &lim, &e) != NR_EINPUT || !strstr(e.msg, cases[i].msg) ||
		    !strstr(e.msg, "p.jsonl")) {
			printf("#   case %zu: got '%s', want '%s'\n", i, e.msg, cases[i].msg);
			unit_failed = 1;
		}
	}
}

static void text_needs_a_tokenizer(void)
{
	char file[PATH_MAX + 32];
	struct prompts p;
	struct err e;

	CHECK(load("{\"tokens\": [1], \"answer\": \"1\"}\n", &p, &lim, &e) == NR_OK);
	prompts_free(&p);
	snprintf(file, sizeof file, "%s/p.jsonl", root);
	CHECK(prompts_load(&p, file, &lim, NULL, &e) == NR_OK);
	prompts_free(&p);
	CHECK(load("{\"text\": \"1\", \"answer\": \"1\"}\n", &p, &lim, &e) == NR_OK);
	prompts_free(&p);
	CHECK(prompts_load(&p, file, &lim, NULL, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, ":1: a \"text\" prompt needs a tokenizer") != NULL);
	CHECK(prompts_load(&p, "no-such-file.jsonl", &lim, &tok, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "cannot open 'no-such-file.jsonl'") != NULL);
}

static void rules(void)
{
	const int32_t resp[] = { 'x', 'y', 257, 'z' };
	struct prompt p = { .answer = (char *)"  42\n", .line = 3 };
	struct stops eos = { 1, { 257 } }, two = { 2, { 257, 'y' } };
	double s;
	struct err e;

	CHECK(task_response_len(resp, 4, &eos) == 2);
	CHECK(task_response_len(resp, 2, &eos) == 2);
	CHECK(task_response_len(resp + 2, 2, &eos) == 0);
	CHECK(task_response_len(resp, 4, &two) == 1);

	CHECK(task_exact_match("7", "7", 1) == 1);
	CHECK(task_exact_match(" 7", "7 \n", 3) == 1);
	CHECK(task_exact_match("7", "77", 2) == 0);
	CHECK(task_exact_match("7", "", 0) == 0);
	CHECK(task_exact_match("", "  ", 2) == 1);

	/* 3 of 4 places right; a short response, a long one, an empty one */
	CHECK(task_char_match("cccc", "ccxc", 4) == 0.75);
	CHECK(task_char_match("cccccccc", "cc", 2) == 0.25);
	CHECK(task_char_match("cc", "cccc", 4) == 0.5);
	CHECK(task_char_match("cc", "", 0) == 0);
	CHECK(task_char_match("", "", 0) == 1);
	CHECK(task_char_match("ab", "ba", 2) == 0);

	CHECK(task_score(TASK_EXACT_MATCH, &p, "42", 2, &s, &e) == NR_OK && s == 1);
	CHECK(task_score(TASK_CHAR_MATCH, &p, "43", 2, &s, &e) == NR_OK && s == 0.5);
	CHECK(task_score(TASK_REWARD_MODEL, &p, "42", 2, &s, &e) == NR_EINPUT);
	p.answer = NULL;
	CHECK(task_score(TASK_EXACT_MATCH, &p, "42", 2, &s, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "line 3") != NULL);
}

/* A tokenizer without BOS (as Qwen2's) encodes text as it is; one whose
 * ids run past the model's vocabulary is refused at the line. */
static void tokenizer_conventions(void)
{
	char file[PATH_MAX + 32];
	struct tokenizer t = tok;
	struct prompts p;
	struct err e;

	t.bos = -1;
	CHECK(load("{\"text\": \"3+4=\", \"answer\": \"7\"}\n", &p, &lim, &e) == NR_OK);
	prompts_free(&p);
	snprintf(file, sizeof file, "%s/p.jsonl", root);
	CHECK(prompts_load(&p, file, &lim, &t, &e) == NR_OK);
	CHECK(p.v[0].ntokens == 4 && p.v[0].tokens[0] == '3');
	prompts_free(&p);
	CHECK(load("{\"text\": \"3+4=\", \"answer\": \"7\"}\n", &p,
		   &(struct prompt_limits){ 200, 8, true }, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, ":1: \"text\" encodes to token id 256, outside the model's "
		     "vocabulary of 200 ids") != NULL);
}

static void warmup_target(void)
{
	struct prompt p = { .answer = (char *)"12", .line = 1 };
	struct tokenizer t = tok;
	int32_t *ids;
	size_t n;
	struct err e;

	CHECK(task_target(&p, &tok, &ids, &n, &e) == NR_OK);
	CHECK(n == 3 && ids[0] == '1' && ids[1] == '2' && ids[2] == 257);
	free(ids);
	t.eos = -1;
	CHECK(task_target(&p, &t, &ids, &n, &e) == NR_EINPUT && !ids);
	p.answer = NULL;
	CHECK(task_target(&p, &tok, &ids, &n, &e) == NR_EINPUT && !ids);
}

/* The shipped tasks read cleanly and their answers are right. */
static void shipped_tasks(void)
{
	const struct prompt_limits l = { .vocab = 258, .max_len = 16, .need_answer = true };
	struct prompts p;
	struct err e;
	int seen[10][10] = { { 0 } };

	CHECK(prompts_load(&p, "examples/tasks/add.jsonl", &l, &tok, &e) == NR_OK);
	CHECK(p.n == 100);
	for (size_t i = 0; i < p.n; i++) {
		const char *t = p.v[i].text;
		int a = t[0] - '0', b = t[2] - '0';
		char sum[16];

		CHECK(strlen(t) == 4 && t[1] == '+' && t[3] == '=' && a >= 0 && a <= 9 &&
		      b >= 0 && b <= 9);
		snprintf(sum, sizeof sum, "%d", a + b);
		CHECK(!strcmp(p.v[i].answer, sum));
		if (a >= 0 && a <= 9 && b >= 0 && b <= 9)
			seen[a][b]++;
	}
	for (int a = 0; a < 10; a++)
		for (int b = 0; b < 10; b++)
			CHECK(seen[a][b] == 1);
	prompts_free(&p);

	CHECK(prompts_load(&p, "examples/tasks/repeat.jsonl", &l, &tok, &e) == NR_OK);
	CHECK(p.n == 4);
	for (size_t i = 0; i < p.n; i++) {
		CHECK(strlen(p.v[i].answer) == 8);
		CHECK(strlen(p.v[i].text) == 3 && !strncmp(p.v[i].text, "8*", 2));
		for (int k = 0; k < 8; k++)
			CHECK(p.v[i].answer[k] == p.v[i].text[2]);
	}
	prompts_free(&p);
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");
	struct err e;

	snprintf(root, sizeof root, "%s/nereus-task-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(root)) {
		perror(root);
		return 1;
	}
	if (tok_bytes(&tok, &e)) {
		printf("# %s\n", e.msg);
		return 1;
	}
	RUN(reads_both_forms);
	RUN(bad_lines);
	RUN(text_needs_a_tokenizer);
	RUN(rules);
	RUN(tokenizer_conventions);
	RUN(warmup_target);
	RUN(shipped_tasks);
	tok_free(&tok);
	rmtree(root);
	return UNIT_END();
}
