/* The tokenizer against an independent reference: tests/unit/tokref.py
 * (run by /usr/bin/python3, with the regex module) learns a small BPE
 * vocabulary, writes it as tokenizer.json with the Llama 3, Qwen2 and
 * GPT-2 pre-tokenizers, and encodes fixed and random texts (specials,
 * contractions, digits, white space, CJK, emoji, combining marks, bytes
 * that are not UTF-8) from the definitions.  Every text must get the same
 * ids here, decode to the reference's bytes, and (without a normaliser)
 * decode back to itself. */
#include "engine/tokenizer.h"
#include "unit.h"
#include "unitfs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PYTHON "/usr/bin/python3"

static char dir[PATH_MAX];

static int unhex(const char *s, size_t n, char *out)
{
	for (size_t i = 0; i + 2 <= n; i += 2) {
		unsigned v;
		if (sscanf(s + i, "%2x", &v) != 1)
			return -1;
		out[i / 2] = (char)v;
	}
	return (int)(n / 2);
}

static void print_ids(const char *what, const int32_t *ids, size_t n)
{
	printf("#     %s:", what);
	for (size_t i = 0; i < n; i++)
		printf(" %d", ids[i]);
	printf("\n");
}

/* Every case of DIR/name.cases; round trip when the file has no normaliser. */
static void against_reference(const char *name, bool exact_round_trip)
{
	char file[PATH_MAX + 32], *line = NULL;
	size_t cap = 0, cases = 0, bad = 0;
	struct tokenizer t;
	struct err e;
	FILE *f;

	snprintf(file, sizeof file, "%s/%s.json", dir, name);
	if (tok_load(&t, file, &e)) {
		printf("#   %s\n", e.msg);
		CHECK(0);
		return;
	}
	snprintf(file, sizeof file, "%s/%s.cases", dir, name);
	f = fopen(file, "r");
	CHECK(f != NULL);
	while (f && getline(&line, &cap, f) > 0) {
		char *tab1 = strchr(line, '\t'), *tab2 = tab1 ? strchr(tab1 + 1, '\t') : NULL;
		size_t want_n = 0, got_n = 0, dec_n = 0, n;
		char *text, *want_dec, *dec = NULL, *p;
		int32_t *want, *got = NULL;
		int len, want_len;

		if (!tab1 || !tab2) {
			CHECK(0);
			break;
		}
		n = strlen(tab2 + 1) - 1;
		text = malloc((size_t)(tab1 - line) / 2 + 1);
		want_dec = malloc(n / 2 + 1);
		want = malloc(sizeof *want * ((size_t)(tab2 - tab1) + 1));
		len = unhex(line, (size_t)(tab1 - line), text);
		want_len = unhex(tab2 + 1, n, want_dec);
		for (p = tab1 + 1; p < tab2;) {
			char *end;
			long v = strtol(p, &end, 10);
			if (end == p)
				break;
			want[want_n++] = (int32_t)v;
			p = end;
		}
		cases++;
		if (tok_encode(&t, text, (size_t)len, &got, &got_n, &e) ||
		    tok_decode(&t, got, got_n, &dec, &dec_n, &e)) {
			printf("#   %s\n", e.msg);
			bad++;
		} else if (got_n != want_n || memcmp(got, want, got_n * sizeof *got) != 0 ||
			   dec_n != (size_t)want_len || memcmp(dec, want_dec, dec_n) != 0 ||
			   (exact_round_trip && (dec_n != (size_t)len || memcmp(dec, text, dec_n)))) {
			if (bad++ < 5) {
				printf("#   %s: text %.*s\n", name, (int)(tab1 - line), line);
				print_ids("want", want, want_n);
				print_ids("got ", got, got_n);
			}
		}
		free(got);
		free(dec);
		free(text);
		free(want_dec);
		free(want);
	}
	if (f)
		fclose(f);
	free(line);
	tok_free(&t);
	printf("#   %s: %zu cases, %zu differ\n", name, cases, bad);
	CHECK(cases > 1000);
	CHECK(bad == 0);
}

static void test_llama3(void)
{
	against_reference("llama3", true);
}

static void test_qwen2(void)
{
	against_reference("qwen2", false);
}

static void test_gpt2(void)
{
	against_reference("gpt2", true);
}

int main(void)
{
	const char *base = getenv("TMPDIR");
	char cmd[PATH_MAX + 128];

	snprintf(dir, sizeof dir, "%s/nereus-tokref-XXXXXX", base && *base ? base : "/tmp");
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(cmd, sizeof cmd, PYTHON " tests/unit/tokref.py '%s'", dir);
	if (system(cmd) != 0) {
		printf("not ok 1 - %s failed (it needs python3-regex)\n", cmd);
		rmtree(dir);
		return 1;
	}
	RUN(test_llama3);
	RUN(test_qwen2);
	RUN(test_gpt2);
	rmtree(dir);
	return UNIT_END();
}
