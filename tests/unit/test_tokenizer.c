/* The tokenizer on hand-worked cases: the pre-tokenisation patterns of
 * Llama 3, Qwen2 and GPT-2 piece by piece, merges by rank, added tokens,
 * decoding to exact bytes, the built-in byte vocabulary, and the messages
 * for tokenizer.json files it must refuse.  test_tokref checks the same
 * code against an independent reference on many random texts. */
#include "engine/tokenizer.h"
#include "unit.h"
#include "unitfs.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char LLAMA3[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
	" ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* --- pieces --------------------------------------------------------------- */

/* The pieces of s under pre, joined by '|'. */
static const char *pieces(enum tok_pre pre, const char *s)
{
	static char out[1024];
	struct tokenizer t = { .pre = pre };
	size_t n = strlen(s), o = 0;

	for (size_t i = 0, j; i < n; i = j) {
		j = tok_split(&t, s, n, i);
		if (i)
			out[o++] = '|';
		memcpy(out + o, s + i, j - i);
		o += j - i;
	}
	out[o] = '\0';
	return out;
}

#define PIECES(pre, s, want) do { \
	const char *got_ = pieces(pre, s); \
	if (strcmp(got_, want) != 0) \
		printf("#   pieces of \"%s\": \"%s\", expected \"%s\"\n", s, got_, want); \
	CHECK(strcmp(got_, want) == 0); \
} while (0)

/* The Llama 3 pattern, alternative by alternative (the first that matches
 * at a place wins, as long as it can be). */
static void test_llama3_pieces(void)
{
	enum tok_pre p = TOK_PRE_LLAMA3;

	PIECES(p, "Hello world", "Hello| world");
	/* a space before digits is a piece of its own; digits go by three;
	 * punctuation takes the newlines after it; two spaces before a word
	 * leave the second to it */
	PIECES(p, "I'm 12345 ok!!\n\n  x", "I|'m| |123|45| ok|!!\n\n| | x");
	/* contractions ignore case, and ſ is an s; " '" is punctuation first */
	PIECES(p, "it'S we'RE they'Ve 'ſx", "it|'S| we|'RE| they|'Ve| '|ſx");
	PIECES(p, "'ſx", "'ſ|x");
	PIECES(p, "1234567", "123|456|7");
	PIECES(p, "x²³", "x|²³"); /* superscripts are numbers (No) */
	PIECES(p, "a  b", "a| | b");
	PIECES(p, "a \n b", "a| \n| b"); /* up to the last newline of a run */
	PIECES(p, "a\t\tb", "a|\t|\tb");
	PIECES(p, "a   ", "a|   "); /* at the end, the whole run */
	PIECES(p, "\r\n\r\n", "\r\n\r\n");
	PIECES(p, "x\r\ny", "x|\r\n|y");
	PIECES(p, "a\u00a0b", "a|\u00a0b"); /* no-break space: white, not \r or \n */
	/* CJK letters; a full-width comma leads the word after it */
	PIECES(p, "你好，世界！", "你好|，世界|！");
	PIECES(p, "hi 😀😀!", "hi| 😀😀!");
	/* bytes that are not UTF-8 are neither letters nor numbers nor spaces */
	PIECES(p, "a\xff\xfe" "b", "a|\xff\xfe|b");
	PIECES(p, "\xe2\x82x", "\xe2\x82|x");
	PIECES(p, "\xc3x", "\xc3x");
}

static void test_qwen2_pieces(void)
{
	enum tok_pre p = TOK_PRE_QWEN2;

	PIECES(p, "1234567", "1|2|3|4|5|6|7");
	PIECES(p, "I'm 12345 ok!!\n\n  x", "I|'m| |1|2|3|4|5| ok|!!\n\n| | x");
	PIECES(p, "x²³", "x|²|³");
}

static void test_gpt2_pieces(void)
{
	enum tok_pre p = TOK_PRE_GPT2;

	PIECES(p, "Hello  world's 123", "Hello| | world|'s| 123");
	PIECES(p, "I'M", "I|'|M"); /* contractions are lower case only */
	PIECES(p, "a\n\nb", "a|\n|\n|b");
	PIECES(p, "x  \n", "x|  \n");
}

/* --- a tokenizer.json to test with ----------------------------------------- */

/* GPT-2's map: bytes 33-126, 161-172, 174-255 are themselves, the other 68
 * take 256, 257, ... in byte order.  s's bytes so shown, in out. */
static const char *shown(const char *s, char out[64])
{
	size_t o = 0;

	for (size_t i = 0; s[i]; i++) {
		unsigned b = (unsigned char)s[i], c = b, k = 256;
		if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174)) {
			for (unsigned x = 0; x < b; x++)
				if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174))
					k++;
			c = k;
		}
		if (c < 0x80) {
			out[o++] = (char)c;
		} else {
			out[o++] = (char)(0xC0 | c >> 6);
			out[o++] = (char)(0x80 | (c & 0x3F));
		}
	}
	out[o] = '\0';
	return out;
}

struct spec {
	const char *pattern;  /* the Split regex; NULL: GPT-2's ByteLevel */
	bool nfc, ignore_merges;
	const char *merges[8][2]; /* raw bytes; token 256 + i is merge i's */
	const char *extra[4];  /* more vocabulary entries, after the merges */
	const char *added[6];  /* added tokens, after those */
};

/* The file of spec: ids 0-255 are the bytes (byte 0 is shown, not kept in
 * a C string: it is "\u0100", added by hand). */
static json_t *build(const struct spec *sp)
{
	json_t *vocab = json_object(), *merges = json_array(), *added = json_array(), *pre;
	char b[2] = { 0 }, x[64], y[64];
	int id = 256;

	json_object_set_new(vocab, "\xc4\x80", json_integer(0));
	for (int i = 1; i < 256; i++) {
		b[0] = (char)i;
		json_object_set_new(vocab, shown(b, x), json_integer(i));
	}
	for (int i = 0; i < 8 && sp->merges[i][0]; i++) {
		char both[64];
		snprintf(both, sizeof both, "%s%s", sp->merges[i][0], sp->merges[i][1]);
		json_object_set_new(vocab, shown(both, x), json_integer(id++));
		json_array_append_new(merges, json_pack("[ss]", shown(sp->merges[i][0], x),
							shown(sp->merges[i][1], y)));
	}
	for (int i = 0; i < 4 && sp->extra[i]; i++)
		json_object_set_new(vocab, shown(sp->extra[i], x), json_integer(id++));
	for (int i = 0; i < 6 && sp->added[i]; i++)
		json_array_append_new(added, json_pack("{sisssbsbsbsbsb}", "id", id++, "content",
						       sp->added[i], "single_word", 0, "lstrip", 0,
						       "rstrip", 0, "normalized", 0, "special", 1));
	if (sp->pattern)
		pre = json_pack("{ss s[{ss s{ss} ss sb} {ss sb sb sb}]}", "type", "Sequence",
				"pretokenizers", "type", "Split", "pattern", "Regex", sp->pattern,
				"behavior", "Isolated", "invert", 0, "type", "ByteLevel",
				"add_prefix_space", 0, "trim_offsets", 1, "use_regex", 0);
	else
		pre = json_pack("{ss sb sb sb}", "type", "ByteLevel", "add_prefix_space", 0,
				"trim_offsets", 1, "use_regex", 1);
	return json_pack("{ss sn so so so s{ss sb sb sb} s{ss sn sb so so}}", "version", "1.0",
			 "truncation", "added_tokens", added, "normalizer",
			 sp->nfc ? json_pack("{ss}", "type", "NFC") : json_null(),
			 "pre_tokenizer", pre, "decoder", "type", "ByteLevel", "add_prefix_space", 1,
			 "trim_offsets", 1, "use_regex", 1, "model", "type", "BPE", "dropout",
			 "ignore_merges", sp->ignore_merges, "vocab", vocab, "merges", merges);
}

/* Load doc as "t.json" (taking it); the status, message in e. */
static int load_doc(struct tokenizer *t, json_t *doc, struct err *e)
{
	char *s = json_dumps(doc, JSON_INDENT(1));
	int rc = tok_loadb(t, "t.json", s, strlen(s), e);

	free(s);
	json_decref(doc);
	return rc;
}

static int load(struct tokenizer *t, const struct spec *sp)
{
	struct err e;
	int rc = load_doc(t, build(sp), &e);

	if (rc)
		printf("#   %s\n", e.msg);
	return rc;
}

/* Encode s; the ids as text "a b c" for comparison. */
static const char *ids_of(const struct tokenizer *t, const char *s, size_t n)
{
	static char out[1024];
	int32_t *ids = NULL;
	size_t k = 0, o = 0;
	struct err e;

	out[0] = '\0';
	if (tok_encode(t, s, n, &ids, &k, &e))
		return "(failed)";
	for (size_t i = 0; i < k; i++)
		o += (size_t)snprintf(out + o, sizeof out - o, "%s%d", i ? " " : "", ids[i]);
	free(ids);
	return out;
}

#define IDS(t, s, want) do { \
	const char *got_ = ids_of(t, s, strlen(s)); \
	if (strcmp(got_, want) != 0) \
		printf("#   ids of \"%s\": %s, expected %s\n", s, got_, want); \
	CHECK(strcmp(got_, want) == 0); \
} while (0)

/* --- merges ------------------------------------------------------------------ */

static void test_merges_by_rank(void)
{
	struct spec ab = { LLAMA3, false, false, { { "a", "b" }, { "b", "c" } }, { NULL }, { NULL } };
	struct spec bc = { LLAMA3, false, false, { { "b", "c" }, { "a", "b" } }, { NULL }, { NULL } };
	struct tokenizer t;

	CHECK(load(&t, &ab) == NR_OK);
	IDS(&t, "abc", "256 99"); /* ab (rank 0) first, then no "ab c" */
	tok_free(&t);
	CHECK(load(&t, &bc) == NR_OK);
	IDS(&t, "abc", "97 256"); /* bc (rank 0) first */
	tok_free(&t);
}

/* Equal ranks: the leftmost first; a merge can make a pair of lower rank
 * than one still waiting. */
static void test_merges_leftmost(void)
{
	struct spec aa = { LLAMA3, false, false, { { "a", "a" }, { "aa", "aa" } }, { NULL },
			   { NULL } };
	struct spec chain = { LLAMA3, false, false,
			      { { "b", "c" }, { "a", "bc" }, { "a", "b" } }, { NULL }, { NULL } };
	struct tokenizer t;

	CHECK(load(&t, &aa) == NR_OK);
	IDS(&t, "aaa", "256 97");
	IDS(&t, "aaaa", "257");
	IDS(&t, "aaaaa", "257 97");
	tok_free(&t);
	CHECK(load(&t, &chain) == NR_OK);
	IDS(&t, "abc", "257");
	IDS(&t, "ab", "258");
	tok_free(&t);
}

/* Pieces are merged apart: "a" and "b" of "a b" are not one piece. */
static void test_merges_stay_in_pieces(void)
{
	struct spec sp = { LLAMA3, false, false, { { "a", " " }, { " ", "b" } }, { NULL }, { NULL } };
	struct tokenizer t;

	CHECK(load(&t, &sp) == NR_OK);
	IDS(&t, "a b", "97 257");
	tok_free(&t);
}

/* ignore_merges: a piece that is a whole vocabulary entry is that entry,
 * whatever the merges would make of it. */
static void test_ignore_merges(void)
{
	struct spec sp = { LLAMA3, false, true, { { "x", "y" } }, { "xyz" }, { NULL } };
	struct tokenizer t;

	CHECK(load(&t, &sp) == NR_OK);
	IDS(&t, "xyz", "257");
	IDS(&t, "xyzz", "256 122 122");
	tok_free(&t);
	sp.ignore_merges = false;
	CHECK(load(&t, &sp) == NR_OK);
	IDS(&t, "xyz", "256 122");
	tok_free(&t);
}

/* --- added tokens ------------------------------------------------------------ */

static void test_added_tokens(void)
{
	struct spec sp = { LLAMA3, false, false, { { "<", "|" } }, { NULL },
			   { "<|begin_of_text|>", "<|eot_id|>", "<|x|>", "<|x|>y",
			     "<|end_of_text|>" } };
	struct tokenizer t;
	size_t n;

	CHECK(load(&t, &sp) == NR_OK);
	/* ids: 256 is "<|", then 257 <|begin_of_text|> ... 261 <|end_of_text|> */
	IDS(&t, "<|begin_of_text|>hi<|eot_id|>", "257 104 105 258");
	IDS(&t, "<|x|>yy", "260 121"); /* the longest at the leftmost place */
	IDS(&t, "a<|x|>b", "97 259 98");
	IDS(&t, "<|eot_id", "256 101 111 116 95 105 100"); /* a part is just text */
	IDS(&t, "<|x|><|x|>", "259 259");
	CHECK(t.bos == 257 && t.eos == 261);
	CHECK(tok_id(&t, "<|eot_id|>") == 258);
	CHECK(tok_id(&t, "<|") == 256);
	CHECK(tok_id(&t, "<|nope|>") == -1);
	CHECK(tok_piece(&t, 258, &n) && n == 10 &&
	      memcmp(tok_piece(&t, 258, &n), "<|eot_id|>", 10) == 0);
	tok_free(&t);
}

/* --- decoding -------------------------------------------------------------------- */

/* Bytes of a character split across tokens come out whole; bytes that are
 * not UTF-8 come out as they went in. */
static void test_decode_exact(void)
{
	struct spec sp = { LLAMA3, false, false, { { "\xc3", "\xa9" } }, { NULL }, { "<|x|>" } };
	const char text[] = "caf\xc3\xa9 \xff\xc3<|x|>\xa9";
	struct tokenizer t;
	int32_t *ids, split[] = { 0xC3, 0xA9 };
	char *out;
	size_t n, len;
	struct err e;

	CHECK(load(&t, &sp) == NR_OK);
	IDS(&t, "caf\xc3\xa9", "99 97 102 256");
	CHECK(tok_encode(&t, text, sizeof text - 1, &ids, &n, &e) == NR_OK);
	CHECK(tok_decode(&t, ids, n, &out, &len, &e) == NR_OK);
	CHECK(len == sizeof text - 1 && memcmp(out, text, len) == 0);
	free(ids);
	free(out);
	CHECK(tok_decode(&t, split, 2, &out, &len, &e) == NR_OK);
	CHECK(len == 2 && strcmp(out, "\xc3\xa9") == 0);
	free(out);
	tok_free(&t);
}

/* An id that is no token (past the ids, below 0, or one the file leaves
 * unused) decodes as U+FFFD, and the rest as they are. */
static void test_decode_bad_id(void)
{
	struct spec sp = { LLAMA3, false, false, { { NULL } }, { NULL }, { "<|x|>" } };
	json_t *doc = build(&sp);
	struct tokenizer t;
	int32_t ids[] = { 104, 300, 105, -1, 270, 301 };
	char *out;
	size_t len;
	struct err e;
	int rc;

	/* <|x|> at 300: ids 256 to 299 are unused */
	json_object_set_new(json_array_get(json_object_get(doc, "added_tokens"), 0), "id",
			    json_integer(300));
	CHECK(load_doc(&t, doc, &e) == NR_OK);
	CHECK(t.n == 301);
	rc = tok_decode(&t, ids, 6, &out, &len, &e);
	CHECK(rc == NR_OK);
	if (rc == NR_OK) {
		CHECK(len == 16 &&
		      strcmp(out, "h<|x|>i\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd") == 0);
		free(out);
	}
	tok_free(&t);
}

/* Qwen2's normaliser: a decomposed é encodes as the composed one. */
static void test_nfc(void)
{
	struct spec sp = { LLAMA3, true, false, { { "\xc3", "\xa9" } }, { NULL }, { NULL } };
	struct tokenizer t;

	CHECK(load(&t, &sp) == NR_OK);
	IDS(&t, "e\xcc\x81", "256");
	IDS(&t, "\xc3\xa9", "256");
	tok_free(&t);
}

/* --- the byte vocabulary ------------------------------------------------------------ */

static void test_byte_vocabulary(void)
{
	const char text[] = "hi \xff\x00<|eos|>";
	struct tokenizer t;
	int32_t *ids;
	char *out;
	size_t n, len;
	struct err e;

	CHECK(tok_bytes(&t, &e) == NR_OK);
	CHECK(t.n == 258 && t.bos == 256 && t.eos == 257);
	CHECK(tok_id(&t, "<|bos|>") == 256 && tok_id(&t, "<|eos|>") == 257);
	CHECK(tok_encode(&t, text, sizeof text - 1, &ids, &n, &e) == NR_OK);
	CHECK(n == 6 && ids[0] == 'h' && ids[2] == ' ' && ids[3] == 255 && ids[4] == 0 &&
	      ids[5] == 257);
	CHECK(tok_decode(&t, ids, n, &out, &len, &e) == NR_OK);
	CHECK(len == sizeof text - 1 && memcmp(out, text, len) == 0);
	free(ids);
	free(out);
	CHECK(tok_encode(&t, "", 0, &ids, &n, &e) == NR_OK && n == 0);
	free(ids);
	tok_free(&t);
}

/* --- files it refuses ------------------------------------------------------------------ */

static int loadb(const char *s, struct err *e)
{
	struct tokenizer t;
	int rc = tok_loadb(&t, "t.json", s, strlen(s), e);

	if (rc == NR_OK)
		tok_free(&t);
	return rc;
}

#define ENDS(msg, tail) (strlen(msg) >= strlen(tail) && \
			 strcmp((msg) + strlen(msg) - strlen(tail), tail) == 0)

/* Messages name the file, line and column (counted by hand). */
static void test_refused_located(void)
{
	struct err e;

	/* {"model": {"type": "WordPiece" -- the value at column 20 */
	CHECK(loadb("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}, \"merges\": []}}", &e) ==
	      NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:1:20: model.type: model \"WordPiece\" is not supported "
			    "(expected BPE)") == 0);
	/* line 2: ` "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\s+"}`
	 * the space is column 1, the key 2-16, ':' 17, '{' 19, "type" 20-25,
	 * "Split" 28-34, "pattern" 37-45, '{' 48, "Regex" 49-55, the value 58 */
	CHECK(loadb("{\"model\": {\"vocab\": {}, \"merges\": []},\n"
		    " \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\s+\"},"
		    " \"behavior\": \"Isolated\", \"invert\": false}}", &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:2:58: pre_tokenizer.pattern.Regex: unknown pattern \"\\s+\" "
			    "(this reader knows the patterns of Llama 3, Qwen2 and GPT-2)") == 0);
	CHECK(loadb("{\"model\": [1,,2]}", &e) == NR_EINPUT);
	CHECK(strncmp(e.msg, "t.json:1:", 9) == 0);
	CHECK(loadb("[]", &e) == NR_EINPUT);
	CHECK(strcmp(e.msg, "t.json:1:1: expected a JSON object") == 0);
}

/* Build the file of a good spec, break one thing, and expect message. */
static void refused(json_t *doc, const char *tail)
{
	struct tokenizer t;
	struct err e;
	int rc = load_doc(&t, doc, &e);

	if (rc != NR_EINPUT || !ENDS(e.msg, tail) || strncmp(e.msg, "t.json:", 7) != 0)
		printf("#   got \"%s\", expected \"...%s\"\n", rc ? e.msg : "(loaded)", tail);
	CHECK(rc == NR_EINPUT && ENDS(e.msg, tail) && strncmp(e.msg, "t.json:", 7) == 0);
	if (rc == NR_OK)
		tok_free(&t);
}

static void test_refused(void)
{
	static const struct spec sp = { LLAMA3, false, false, { { "a", "b" } }, { NULL },
					{ "<|x|>" } };
	json_t *d;

	d = build(&sp);
	json_object_del(json_object_get(json_object_get(d, "model"), "vocab"), "A");
	refused(d, "model.vocab: no token for byte 0x41 (\"A\"): not a byte-level vocabulary");
	d = build(&sp);
	json_array_append_new(json_object_get(json_object_get(d, "model"), "merges"),
			      json_string("a zz"));
	refused(d, "model.merges[1]: \"zz\" is not in the vocabulary");
	d = build(&sp);
	json_array_append_new(json_object_get(json_object_get(d, "model"), "merges"),
			      json_string("b a"));
	refused(d, "model.merges[1]: the merged \"ba\" is not in the vocabulary");
	d = build(&sp);
	json_array_append_new(json_object_get(json_object_get(d, "model"), "merges"),
			      json_string("a b"));
	refused(d, "model.merges[1]: the same pair as model.merges[0]");
	d = build(&sp);
	json_array_append_new(json_object_get(json_object_get(d, "model"), "merges"),
			      json_string("ab"));
	refused(d, "model.merges[1]: expected \"A B\" or [\"A\", \"B\"] (two tokens)");
	d = build(&sp);
	json_object_set_new(json_object_get(json_object_get(d, "model"), "vocab"), "x\xe2\x82\xac",
			    json_integer(300));
	refused(d, "not a byte-level token: U+20AC stands for no byte");
	d = build(&sp);
	json_object_set_new(json_object_get(json_object_get(d, "model"), "vocab"), "zz",
			    json_integer(7));
	refused(d, "model.vocab.zz: id 7 is given to another token too");
	d = build(&sp);
	json_object_set_new(json_array_get(json_object_get(d, "added_tokens"), 0), "lstrip",
			    json_true());
	refused(d, "added_tokens[0].lstrip: lstrip is not supported (expected false)");
	d = build(&sp);
	json_object_set_new(json_array_get(json_object_get(d, "added_tokens"), 0), "id",
			    json_integer(97));
	refused(d, "added_tokens[0]: id 97 is another token of the vocabulary");
	d = build(&sp);
	json_object_set_new(d, "normalizer", json_pack("{ss}", "type", "NFKC"));
	refused(d, "normalizer.type: normalizer \"NFKC\" is not supported (only NFC or none)");
	d = build(&sp);
	json_object_set_new(d, "decoder", json_pack("{ss}", "type", "Metaspace"));
	refused(d, "decoder: expected a ByteLevel decoder");
	d = build(&sp);
	json_object_set_new(json_array_get(json_object_get(json_object_get(d, "pre_tokenizer"),
							   "pretokenizers"), 1),
			    "add_prefix_space", json_true());
	refused(d, "pre_tokenizer.pretokenizers[1].add_prefix_space: add_prefix_space is not "
		   "supported (expected false)");
	d = build(&sp);
	json_object_set_new(json_object_get(d, "model"), "dropout", json_real(0.1));
	refused(d, "model.dropout: BPE dropout is not supported (expected null)");
	d = build(&sp);
	json_object_set_new(d, "typo", json_null());
	refused(d, "typo: unknown field (expected one of: version, truncation, padding, "
		   "added_tokens, normalizer, pre_tokenizer, post_processor, decoder, model)");
}

static void test_load_file(void)
{
	static const struct spec sp = { LLAMA3, false, false, { { "a", "b" } }, { NULL }, { NULL } };
	char dir[PATH_MAX], file[PATH_MAX + 32];
	const char *base = getenv("TMPDIR");
	struct tokenizer t;
	struct err e;
	json_t *d = build(&sp);

	snprintf(dir, sizeof dir, "%s/nereus-tok-XXXXXX", base && *base ? base : "/tmp");
	CHECK(mkdtemp(dir) != NULL);
	snprintf(file, sizeof file, "%s/tokenizer.json", dir);
	CHECK(json_dump_file(d, file, 0) == 0);
	json_decref(d);
	CHECK(tok_load(&t, file, &e) == NR_OK);
	IDS(&t, "abc", "256 99");
	tok_free(&t);
	snprintf(file, sizeof file, "%s/missing.json", dir);
	CHECK(tok_load(&t, file, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "cannot open") && strstr(e.msg, "missing.json"));
	rmtree(dir);
}

int main(void)
{
	RUN(test_llama3_pieces);
	RUN(test_qwen2_pieces);
	RUN(test_gpt2_pieces);
	RUN(test_merges_by_rank);
	RUN(test_merges_leftmost);
	RUN(test_merges_stay_in_pieces);
	RUN(test_ignore_merges);
	RUN(test_added_tokens);
	RUN(test_decode_exact);
	RUN(test_decode_bad_id);
	RUN(test_nfc);
	RUN(test_byte_vocabulary);
	RUN(test_refused_located);
	RUN(test_refused);
	RUN(test_load_file);
	return UNIT_END();
}
