/* make bench: the tokenizer on a file the size of Qwen2's (150,000
 * vocabulary entries, about as many merges, 256 added tokens, about
 * 7 MB).  The file is made here: pseudo-words of random syllables, each
 * built by merges one byte at a time (as BPE training builds frequent
 * words), so that encoding text of those words merges as deeply as real
 * text does.  It prints the time to load the file against reading its
 * bytes and against jansson parsing them (the floor of any loader on the
 * project's JSON reader), and the encoding rate in tokens and bytes per
 * second against the pre-tokeniser's rate alone.  CPU seconds, best of 3:
 * the machine is shared. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/json.h"
#include "engine/tokenizer.h"

#define VOCAB 150000
#define TEXT_BYTES (4 << 20)

static const char PATTERN[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
	" ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static double cpu(void)
{
	struct timespec t;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t rng = 0x9E3779B97F4A7C15u;

static uint32_t next(uint32_t n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng % n);
}

/* GPT-2's byte map: bytes 33-126, 161-172, 174-255 are themselves, the
 * other 68 take 256, 257, ... in byte order. */
static void show(const char *s, size_t n, char *out)
{
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		unsigned b = (unsigned char)s[i], c = b;
		if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)) {
			c = 256;
			for (unsigned x = 0; x < b; x++)
				c += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174);
		}
		if (c < 0x80) {
			out[o++] = (char)c;
		} else {
			out[o++] = (char)(0xC0 | c >> 6);
			out[o++] = (char)(0x80 | (c & 0x3F));
		}
	}
	out[o] = '\0';
}

static const char *const syllables[] = {
	"ka", "to", "ri", "ne", "mo", "su", "la", "pe", "di", "gu", "ban", "tor", "lis",
	"men", "qu", "str", "ght", "th", "ing", "ed", "er", "on", "an", "ch", "sh", "oo",
};
#define NSYL (sizeof syllables / sizeof *syllables)

/* A pseudo-word of 1-5 syllables, maybe after a space or capitalised. */
static size_t word(char *w)
{
	size_t n = 0, k = 1 + next(5);

	if (next(4) != 0)
		w[n++] = ' ';
	for (size_t i = 0; i < k; i++) {
		const char *s = syllables[next(NSYL)];
		memcpy(w + n, s, strlen(s));
		n += strlen(s);
	}
	if (next(8) == 0)
		w[w[0] == ' '] -= 32;
	w[n] = '\0';
	return n;
}

/* The tokenizer.json, written to file; returns its size. */
static long make_file(const char *file)
{
	json_t *vocab = json_object(), *merges = json_array(), *added = json_array();
	char w[64], k[400], a[160], b[16];
	int id = 0;
	FILE *f;
	json_t *doc;
	long size;

	for (int i = 0; i < 256; i++) {
		char c = (char)i;
		show(&c, 1, k);
		json_object_set_new(vocab, k, json_integer(id++));
	}
	while (id < VOCAB) {
		size_t n = word(w);
		for (size_t j = 2; j <= n && id < VOCAB; j++) {
			show(w, j, k);
			if (json_object_get(vocab, k))
				continue;
			json_object_set_new(vocab, k, json_integer(id++));
			show(w, j - 1, a);
			show(w + j - 1, 1, b);
			snprintf(k, sizeof k, "%s %s", a, b);
			json_array_append_new(merges, json_string(k));
		}
	}
	for (int i = 0; i < 256; i++) {
		snprintf(k, sizeof k, "<|reserved_special_token_%d|>", i);
		json_array_append_new(added, json_pack("{sisssbsbsbsbsb}", "id", id++, "content", k,
						       "single_word", 0, "lstrip", 0, "rstrip", 0,
						       "normalized", 0, "special", 1));
	}
	doc = json_pack("{ss sn sn so s{ss} s{ss s[{ss s{ss} ss sb} {ss sb sb sb}]} sn "
			"s{ss sb sb sb} s{ss sn sn sn sn sb sb sb so so}}",
			"version", "1.0", "truncation", "padding", "added_tokens", added,
			"normalizer", "type", "NFC", "pre_tokenizer", "type", "Sequence",
			"pretokenizers", "type", "Split", "pattern", "Regex", PATTERN, "behavior",
			"Isolated", "invert", 0, "type", "ByteLevel", "add_prefix_space", 0,
			"trim_offsets", 0, "use_regex", 0, "post_processor", "decoder", "type",
			"ByteLevel", "add_prefix_space", 0, "trim_offsets", 0, "use_regex", 0,
			"model", "type", "BPE", "dropout", "unk_token", "continuing_subword_prefix",
			"end_of_word_suffix", "fuse_unk", 0, "byte_fallback", 0, "ignore_merges", 0,
			"vocab", vocab, "merges", merges);
	f = fopen(file, "w");
	if (!f || json_dumpf(doc, f, JSON_INDENT(2)) != 0 || fclose(f) != 0) {
		fprintf(stderr, "bench_tokenizer: cannot write '%s'\n", file);
		exit(4);
	}
	json_decref(doc);
	f = fopen(file, "r");
	fseek(f, 0, SEEK_END);
	size = ftell(f);
	fclose(f);
	return size;
}

/* Text of the same pseudo-words, with numbers, punctuation and lines. */
static char *make_text(size_t len)
{
	char *t = malloc(len + 64), w[64];
	size_t n = 0;

	while (t && n < len) {
		uint32_t r = next(20);
		size_t k;
		if (r == 0)
			k = (size_t)snprintf(w, sizeof w, " %u", next(100000));
		else if (r == 1)
			k = (size_t)snprintf(w, sizeof w, "%s", next(2) ? ".\n\n" : ", ");
		else
			k = word(w);
		memcpy(t + n, w, k);
		n += k;
	}
	return t;
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");
	char dir[512], file[600], *buf = NULL, *text;
	double best_read = 1e9, best_parse = 1e9, best_load = 1e9, best_enc = 1e9, best_pre = 1e9;
	size_t len = 0, ntok = 0, pieces = 0;
	struct tokenizer t;
	struct err e;
	long size;

	snprintf(dir, sizeof dir, "%s/nereus-bench-tok-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(dir)) {
		perror("bench_tokenizer: mkdtemp");
		return 4;
	}
	snprintf(file, sizeof file, "%s/tokenizer.json", dir);
	size = make_file(file);
	for (int round = 0; round < 3; round++) {
		json_error_t je;
		json_t *root;
		double t0 = cpu(), t1, t2, t3;

		if (in_read_file(file, &buf, &len, &e))
			break;
		t1 = cpu();
		root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
		json_decref(root);
		t2 = cpu();
		free(buf);
		if (tok_load(&t, file, &e)) {
			fprintf(stderr, "bench_tokenizer: %s\n", e.msg);
			return 4;
		}
		t3 = cpu();
		best_read = t1 - t0 < best_read ? t1 - t0 : best_read;
		best_parse = t2 - t1 < best_parse ? t2 - t1 : best_parse;
		best_load = t3 - t2 < best_load ? t3 - t2 : best_load;
		if (round < 2)
			tok_free(&t);
	}
	unlink(file);
	rmdir(dir);
	printf("tokenizer: load of a %.1f MB tokenizer.json (%d ids, %zu merges): %.0f ms; "
	       "reading its bytes %.1f ms, jansson parsing them %.0f ms: %.2f x the parse "
	       "(target 2 x: %s)\n", (double)size / 1e6, t.n, t.nmerges, best_load * 1e3,
	       best_read * 1e3, best_parse * 1e3, best_load / best_parse,
	       best_load <= 2 * best_parse ? "met" : "NOT met");
	text = make_text(TEXT_BYTES);
	if (!text) {
		fprintf(stderr, "bench_tokenizer: out of memory\n");
		return 4;
	}
	for (int round = 0; round < 3; round++) {
		int32_t *ids;
		double t0 = cpu(), t1, t2;

		pieces = 0;
		for (size_t i = 0; i < TEXT_BYTES; pieces++)
			i = tok_split(&t, text, TEXT_BYTES, i);
		t1 = cpu();
		if (tok_encode(&t, text, TEXT_BYTES, &ids, &ntok, &e)) {
			fprintf(stderr, "bench_tokenizer: %s\n", e.msg);
			return 4;
		}
		t2 = cpu();
		free(ids);
		best_pre = t1 - t0 < best_pre ? t1 - t0 : best_pre;
		best_enc = t2 - t1 < best_enc ? t2 - t1 : best_enc;
	}
	printf("tokenizer: encode %.1f MB of text (NFC, %zu pieces) into %zu tokens: %.2f M "
	       "tokens/s = %.1f MB/s; the pre-tokeniser alone %.1f MB/s: %.2f x its time "
	       "(target 1M tokens/s: %s)\n", TEXT_BYTES / 1e6, pieces, ntok,
	       (double)ntok / best_enc / 1e6, TEXT_BYTES / best_enc / 1e6,
	       TEXT_BYTES / best_pre / 1e6, best_enc / best_pre,
	       (double)ntok / best_enc >= 1e6 ? "met" : "NOT met");
	free(text);
	tok_free(&t);
	return 0;
}
