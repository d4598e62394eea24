/* Byte-level BPE: a tokenizer.json read into hash tables (the vocabulary
 * by its bytes, the merges by their pair of ids, the added tokens by their
 * text), the pre-tokenisation patterns as scanners over code points, the
 * merge loop over a heap, and decoding by concatenation.  tokenizer.h says
 * what is read and what is refused. */
#include "engine/tokenizer.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "common/json.h"
#include "common/utf8.h"
#include "engine/unicode.h"

enum { KIND_NONE, KIND_VOCAB, KIND_ADDED };

/* The patterns, as the files spell them (after JSON unescaping). */
static const char PAT_LLAMA3[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
	" ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char PAT_QWEN2[] =
	"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
	" ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char PAT_GPT2[] =
	"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* --- GPT-2's byte <-> character map ------------------------------------ */

#define NCHARS (256 + 68) /* the characters the map uses are below this */

struct bytemap {
	uint32_t chr[256];    /* the character standing for each byte */
	int16_t byte[NCHARS]; /* the byte each character stands for, or -1 */
};

/* Bytes 33-126, 161-172 and 174-255 stand for themselves; the other 68
 * take the characters 256, 257, ... in byte order. */
static void bytemap_init(struct bytemap *m)
{
	uint32_t next = 256;

	for (int c = 0; c < NCHARS; c++)
		m->byte[c] = -1;
	for (int b = 0; b < 256; b++) {
		bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
		m->chr[b] = self ? (uint32_t)b : next++;
		m->byte[m->chr[b]] = (int16_t)b;
	}
}

/* The bytes the byte-level string s[0..n) stands for, into out (room for
 * n bytes); their count, or -1 with *bad the character that stands for no
 * byte. */
static long unmap(const struct bytemap *m, const char *s, size_t n, char *out, uint32_t *bad)
{
	size_t i = 0, k;
	long o = 0;

	while (i < n) {
		uint32_t cp = uni_decode((const unsigned char *)s + i, n - i, &k);
		if (cp >= NCHARS || m->byte[cp] < 0) {
			*bad = cp;
			return -1;
		}
		out[o++] = (char)m->byte[cp];
		i += k;
	}
	return o;
}

/* --- hash tables -------------------------------------------------------- */

static size_t table_size(size_t count)
{
	size_t cap = 16;

	while (cap < 2 * count)
		cap *= 2;
	return cap;
}

static int index_init(struct tok_index *x, size_t count)
{
	size_t cap = table_size(count);

	x->slot = calloc(cap, sizeof *x->slot);
	x->mask = cap - 1;
	return x->slot ? 0 : -1;
}

static int32_t index_find(const struct tokenizer *t, const struct tok_index *x,
			  const void *p, size_t n)
{
	if (!x->slot)
		return -1;
	for (size_t i = XXH3_64bits(p, n) & x->mask; x->slot[i]; i = (i + 1) & x->mask) {
		int32_t id = (int32_t)x->slot[i] - 1;
		if (t->len[id] == n && memcmp(t->text + t->off[id], p, n) == 0)
			return id;
	}
	return -1;
}

/* Insert id, whose bytes are not in x yet. */
static void index_put(const struct tokenizer *t, struct tok_index *x, int32_t id)
{
	size_t i = XXH3_64bits(t->text + t->off[id], t->len[id]) & x->mask;

	while (x->slot[i])
		i = (i + 1) & x->mask;
	x->slot[i] = (uint32_t)id + 1;
}

static size_t pair_hash(uint64_t pair, size_t mask)
{
	uint64_t h = pair * 0x9E3779B97F4A7C15u;

	return (size_t)(h ^ h >> 29) & mask;
}

static const struct tok_merge *merge_find(const struct tokenizer *t, int32_t a, int32_t b)
{
	uint64_t pair = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;

	for (size_t i = pair_hash(pair, t->merge_mask); t->merge[i].pair != UINT64_MAX;
	     i = (i + 1) & t->merge_mask)
		if (t->merge[i].pair == pair)
			return &t->merge[i];
	return NULL;
}

/* --- the token table ---------------------------------------------------- */

/* Room for ids 0..n-1 and textcap bytes of token text. */
static int tokens_alloc(struct tokenizer *t, int32_t n, size_t textcap)
{
	t->n = n;
	t->off = calloc((size_t)n, sizeof *t->off);
	t->len = calloc((size_t)n, sizeof *t->len);
	t->kind = calloc((size_t)n, 1);
	t->text = malloc(textcap ? textcap : 1);
	return t->off && t->len && t->kind && t->text ? 0 : -1;
}

/* Token id gets the bytes p[0..n) at text[*used]. */
static void token_set(struct tokenizer *t, int32_t id, const void *p, size_t n, int kind,
		      size_t *used)
{
	memmove(t->text + *used, p, n); /* p may already be there */
	t->off[id] = (uint32_t)*used;
	t->len[id] = (uint32_t)n;
	t->kind[id] = (uint8_t)kind;
	*used += n;
}

/* Index added token id and note its first byte and length. */
static int added_put(struct tokenizer *t, int32_t id)
{
	uint32_t n = t->len[id], *lens;
	unsigned char b = (unsigned char)t->text[t->off[id]];
	size_t i;

	index_put(t, &t->added, id);
	t->added_first[b >> 3] |= (uint8_t)(1u << (b & 7));
	for (i = 0; i < t->nadded_lens && t->added_lens[i] > n; i++)
		;
	if (i < t->nadded_lens && t->added_lens[i] == n)
		return 0;
	lens = realloc(t->added_lens, (t->nadded_lens + 1) * sizeof *lens);
	if (!lens)
		return -1;
	memmove(lens + i + 1, lens + i, (t->nadded_lens - i) * sizeof *lens);
	lens[i] = n;
	t->added_lens = lens;
	t->nadded_lens++;
	return 0;
}

static int32_t added_id(const struct tokenizer *t, const char *s)
{
	return index_find(t, &t->added, s, strlen(s));
}

/* The base models' conventions (tokenizer.h). */
static void set_specials(struct tokenizer *t)
{
	t->bos = added_id(t, "<|begin_of_text|>");
	t->eos = added_id(t, "<|end_of_text|>");
	if (t->eos < 0)
		t->eos = added_id(t, "<|endoftext|>");
}

void tok_free(struct tokenizer *t)
{
	free(t->text);
	free(t->off);
	free(t->len);
	free(t->kind);
	free(t->vocab.slot);
	free(t->added.slot);
	free(t->added_lens);
	free(t->merge);
	memset(t, 0, sizeof *t);
}

int tok_bytes(struct tokenizer *t, struct err *e)
{
	static const char *const special[] = { "<|bos|>", "<|eos|>" };
	size_t used = 0;

	memset(t, 0, sizeof *t);
	if (tokens_alloc(t, 258, 256 + 14) || index_init(&t->vocab, 256) ||
	    index_init(&t->added, 2))
		goto oom;
	for (int b = 0; b < 256; b++) {
		unsigned char c = (unsigned char)b;
		token_set(t, b, &c, 1, KIND_VOCAB, &used);
		index_put(t, &t->vocab, b);
		t->byte_id[b] = b;
	}
	for (int i = 0; i < 2; i++) {
		token_set(t, 256 + i, special[i], strlen(special[i]), KIND_ADDED, &used);
		if (added_put(t, 256 + i))
			goto oom;
	}
	t->pre = TOK_PRE_NONE;
	t->bos = 256;
	t->eos = 257;
	return NR_OK;
oom:
	tok_free(t);
	return err_oom(e);
}

/* --- loading tokenizer.json --------------------------------------------- */

struct load {
	struct jdoc d;
	struct tokenizer *t;
	struct bytemap map;
	size_t used; /* bytes of t->text filled */
	struct err *e;
};

static int failf(struct load *l, const char *path, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int failf(struct load *l, const char *path, const char *fmt, ...)
{
	char msg[768];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return jdoc_fail(&l->d, path, l->e, "%s", msg);
}

static int oom(struct load *l)
{
	return err_set(l->e, NR_EIO, "out of memory reading '%s'", l->d.file);
}

/* The object at key of obj into *out, NULL when absent or null. */
static int get_part(struct load *l, json_t *obj, const char *path, const char *key,
		    json_t **out)
{
	json_t *v = json_object_get(obj, key);
	char sub[256];

	*out = NULL;
	if (!v || json_is_null(v))
		return NR_OK;
	jdoc_path(sub, sizeof sub, path, key);
	if (!json_is_object(v))
		return failf(l, sub, "expected an object");
	*out = v;
	return NR_OK;
}

static const char *type_of(json_t *obj)
{
	const char *s = json_string_value(json_object_get(obj, "type"));

	return s ? s : "";
}

static int read_normalizer(struct load *l, json_t *root)
{
	static const char *const keys[] = { "type", NULL };
	json_t *n;
	int rc = get_part(l, root, "", "normalizer", &n);

	if (rc || !n)
		return rc;
	if (strcmp(type_of(n), "NFC") != 0)
		return failf(l, json_object_get(n, "type") ? "normalizer.type" : "normalizer",
			     "normalizer \"%s\" is not supported (only NFC or none)", type_of(n));
	if ((rc = jdoc_check_keys(&l->d, n, "normalizer", keys, l->e)))
		return rc;
	l->t->nfc = true;
	return NR_OK;
}

/* A Split: the pattern's kind into *pre. */
static int read_split(struct load *l, json_t *s, const char *path, enum tok_pre *pre)
{
	static const char *const keys[] = { "type", "pattern", "behavior", "invert", NULL };
	static const char *const pkeys[] = { "Regex", NULL };
	static const char *const behaviors[] = { "Isolated", NULL };
	char sub[256], rpath[256];
	json_t *pat;
	const char *re;
	bool invert = false;
	int b, rc;

	if ((rc = jdoc_check_keys(&l->d, s, path, keys, l->e)) ||
	    (rc = jget_obj(&l->d, s, path, "pattern", true, &pat, l->e)) ||
	    (rc = jget_enum(&l->d, s, path, "behavior", true, behaviors, &b, l->e)) ||
	    (rc = jget_bool(&l->d, s, path, "invert", false, &invert, l->e)))
		return rc;
	jdoc_path(sub, sizeof sub, path, "pattern");
	if ((rc = jdoc_check_keys(&l->d, pat, sub, pkeys, l->e)))
		return rc;
	re = json_string_value(json_object_get(pat, "Regex"));
	jdoc_path(rpath, sizeof rpath, sub, "Regex");
	if (!re)
		return failf(l, rpath, "expected a regex string");
	if (invert)
		return failf(l, path, "an inverted Split is not supported");
	if (strcmp(re, PAT_LLAMA3) == 0)
		*pre = TOK_PRE_LLAMA3;
	else if (strcmp(re, PAT_QWEN2) == 0)
		*pre = TOK_PRE_QWEN2;
	else if (strcmp(re, PAT_GPT2) == 0)
		*pre = TOK_PRE_GPT2;
	else
		return failf(l, rpath, "unknown pattern \"%.200s\" (this reader knows the "
			     "patterns of Llama 3, Qwen2 and GPT-2)", re);
	return NR_OK;
}

/* A ByteLevel pre-tokeniser: whether it splits with GPT-2's regex. */
static int read_bytelevel(struct load *l, json_t *b, const char *path, bool *use_regex)
{
	static const char *const keys[] = { "type", "add_prefix_space", "trim_offsets",
					    "use_regex", NULL };
	bool prefix = true, trim = true;
	int rc;

	*use_regex = true; /* Hugging Face's defaults */
	if ((rc = jdoc_check_keys(&l->d, b, path, keys, l->e)) ||
	    (rc = jget_bool(&l->d, b, path, "add_prefix_space", false, &prefix, l->e)) ||
	    (rc = jget_bool(&l->d, b, path, "trim_offsets", false, &trim, l->e)) ||
	    (rc = jget_bool(&l->d, b, path, "use_regex", false, use_regex, l->e)))
		return rc;
	if (prefix) {
		char sub[256];
		jdoc_path(sub, sizeof sub, path, "add_prefix_space");
		return failf(l, json_object_get(b, "add_prefix_space") ? sub : path,
			     "add_prefix_space is not supported (expected false)");
	}
	return NR_OK;
}

/* A Split with a known pattern then ByteLevel without regex (Llama 3,
 * Qwen2), or ByteLevel with its regex alone (GPT-2), maybe in a Sequence. */
static int read_pre_tokenizer(struct load *l, json_t *root)
{
	json_t *p, *list = NULL;
	size_t n = 1;
	enum tok_pre split = TOK_PRE_NONE;
	bool have_split = false, have_bl = false, use_regex = false;
	char sub[256];
	int rc = get_part(l, root, "", "pre_tokenizer", &p);

	if (rc)
		return rc;
	if (!p)
		return failf(l, "", "no pre_tokenizer (expected Split and ByteLevel)");
	if (strcmp(type_of(p), "Sequence") == 0) {
		static const char *const keys[] = { "type", "pretokenizers", NULL };
		if ((rc = jdoc_check_keys(&l->d, p, "pre_tokenizer", keys, l->e)) ||
		    (rc = jget_arr(&l->d, p, "pre_tokenizer", "pretokenizers", true, &list, l->e)))
			return rc;
		n = json_array_size(list);
	}
	for (size_t i = 0; i < n; i++) {
		json_t *s = list ? json_array_get(list, i) : p;
		if (list)
			snprintf(sub, sizeof sub, "pre_tokenizer.pretokenizers[%zu]", i);
		else
			snprintf(sub, sizeof sub, "pre_tokenizer");
		if (!json_is_object(s))
			return failf(l, sub, "expected an object");
		if (strcmp(type_of(s), "Split") == 0 && !have_split && !have_bl) {
			if ((rc = read_split(l, s, sub, &split)))
				return rc;
			have_split = true;
		} else if (strcmp(type_of(s), "ByteLevel") == 0 && !have_bl) {
			if ((rc = read_bytelevel(l, s, sub, &use_regex)))
				return rc;
			have_bl = true;
		} else {
			return failf(l, sub, "pre-tokenizer \"%s\" is not supported here (expected "
				     "a Split with a known pattern, then ByteLevel)", type_of(s));
		}
	}
	if (!have_bl)
		return failf(l, "pre_tokenizer",
			     "no ByteLevel pre-tokenizer: not a byte-level BPE");
	if (have_split && use_regex)
		return failf(l, "pre_tokenizer", "ByteLevel with use_regex after a Split is not "
			     "supported (expected use_regex false)");
	l->t->pre = have_split ? split : use_regex ? TOK_PRE_GPT2 : TOK_PRE_NONE;
	return NR_OK;
}

static int read_decoder(struct load *l, json_t *root)
{
	json_t *d, *list;
	int rc = get_part(l, root, "", "decoder", &d);

	if (rc)
		return rc;
	if (d && strcmp(type_of(d), "Sequence") == 0) {
		list = json_object_get(d, "decoders");
		if (json_array_size(list) == 1 && json_is_object(json_array_get(list, 0)))
			d = json_array_get(list, 0);
	}
	if (!d || strcmp(type_of(d), "ByteLevel") != 0)
		return failf(l, d ? "decoder" : "", "expected a ByteLevel decoder");
	return NR_OK;
}

/* The model's options: only those that change nothing for a byte-level
 * vocabulary are accepted. */
static int read_model_options(struct load *l, json_t *m)
{
	static const char *const keys[] = { "type", "dropout", "unk_token",
					    "continuing_subword_prefix", "end_of_word_suffix",
					    "fuse_unk", "byte_fallback", "ignore_merges", "vocab",
					    "merges", NULL };
	static const char *const affixes[] = { "continuing_subword_prefix",
					       "end_of_word_suffix" };
	json_t *v;
	bool b;
	int rc;

	if ((rc = jdoc_check_keys(&l->d, m, "model", keys, l->e)))
		return rc;
	v = json_object_get(m, "type");
	if (v && (!json_is_string(v) || strcmp(json_string_value(v), "BPE") != 0))
		return failf(l, "model.type", "model \"%s\" is not supported (expected BPE)",
			     json_is_string(v) ? json_string_value(v) : "?");
	v = json_object_get(m, "dropout");
	if (v && !json_is_null(v) && !(json_is_number(v) && json_number_value(v) == 0))
		return failf(l, "model.dropout", "BPE dropout is not supported (expected null)");
	v = json_object_get(m, "unk_token");
	if (v && !json_is_null(v) && !json_is_string(v))
		return failf(l, "model.unk_token", "expected a string or null");
	for (int i = 0; i < 2; i++) {
		char sub[64];
		v = json_object_get(m, affixes[i]);
		jdoc_path(sub, sizeof sub, "model", affixes[i]);
		if (v && !json_is_null(v) && !(json_is_string(v) && !*json_string_value(v)))
			return failf(l, sub, "word affixes are not supported (expected null)");
	}
	if ((rc = jget_bool(&l->d, m, "model", "fuse_unk", false, &b, l->e)) ||
	    (rc = jget_bool(&l->d, m, "model", "byte_fallback", false, &b, l->e)))
		return rc;
	return jget_bool(&l->d, m, "model", "ignore_merges", false, &l->t->ignore_merges, l->e);
}

/* The largest id in vocab and added_tokens, and the bytes their text takes. */
static int count_ids(struct load *l, json_t *vocab, json_t *added, int32_t *n, size_t *bytes)
{
	const char *key;
	json_t *v;
	long max = -1;
	char sub[64];

	*bytes = 0;
	json_object_foreach(vocab, key, v) {
		if (!json_is_integer(v) || json_integer_value(v) < 0 ||
		    json_integer_value(v) > TOK_MAX_ID) {
			char path[512];
			jdoc_path(path, sizeof path, "model.vocab", key);
			return failf(l, path, "expected an id from 0 to %d", TOK_MAX_ID);
		}
		if (json_integer_value(v) > max)
			max = (long)json_integer_value(v);
		*bytes += strlen(key);
	}
	for (size_t i = 0; i < json_array_size(added); i++) {
		json_t *a = json_array_get(added, i), *c;
		long id = -1;
		int rc;
		snprintf(sub, sizeof sub, "added_tokens[%zu]", i);
		if (!json_is_object(a))
			return failf(l, sub, "expected an object");
		if ((rc = jget_int(&l->d, a, sub, "id", true, 0, TOK_MAX_ID, &id, l->e)))
			return rc;
		c = json_object_get(a, "content");
		if (!json_is_string(c) || json_string_length(c) == 0) {
			snprintf(sub, sizeof sub, "added_tokens[%zu]%s", i, c ? ".content" : "");
			return failf(l, sub, c ? "expected a non-empty string"
					       : "missing required field \"content\"");
		}
		if (id > max)
			max = id;
		*bytes += json_string_length(c);
	}
	if (max < 0)
		return failf(l, "model.vocab", "empty vocabulary");
	*n = (int32_t)max + 1;
	return NR_OK;
}

static int read_vocab(struct load *l, json_t *vocab)
{
	struct tokenizer *t = l->t;
	const char *key;
	json_t *v;
	char path[512];

	if (index_init(&t->vocab, json_object_size(vocab)))
		return oom(l);
	json_object_foreach(vocab, key, v) {
		int32_t id = (int32_t)json_integer_value(v);
		uint32_t bad = 0;
		long n = unmap(&l->map, key, strlen(key), t->text + l->used, &bad);

		if (n <= 0 || t->kind[id]) {
			jdoc_path(path, sizeof path, "model.vocab", key);
			if (n == 0)
				return failf(l, path, "empty token");
			if (n < 0)
				return failf(l, path, "not a byte-level token: U+%04X stands for "
					     "no byte", bad);
			return failf(l, path, "id %d is given to another token too", id);
		}
		token_set(t, id, t->text + l->used, (size_t)n, KIND_VOCAB, &l->used);
		index_put(t, &t->vocab, id);
	}
	for (int b = 0; b < 256; b++) {
		unsigned char c = (unsigned char)b, s[4];
		t->byte_id[b] = index_find(t, &t->vocab, &c, 1);
		if (t->byte_id[b] < 0)
			return failf(l, "model.vocab", "no token for byte 0x%02X (\"%.*s\"): not a "
				     "byte-level vocabulary", b,
				     (int)uni_encode(l->map.chr[b], s), (const char *)s);
	}
	return NR_OK;
}

/* merges[i]'s two parts, "A B" or ["A", "B"]. */
static int merge_parts(struct load *l, json_t *m, const char *path, const char **a,
		       size_t *na, const char **b, size_t *nb)
{
	if (json_is_string(m)) {
		const char *s = json_string_value(m), *sp = strchr(s, ' ');
		if (sp && sp > s && sp[1] && !strchr(sp + 1, ' ')) {
			*a = s;
			*na = (size_t)(sp - s);
			*b = sp + 1;
			*nb = strlen(sp + 1);
			return NR_OK;
		}
	} else if (json_is_array(m) && json_array_size(m) == 2 &&
		   json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
		*a = json_string_value(json_array_get(m, 0));
		*na = json_string_length(json_array_get(m, 0));
		*b = json_string_value(json_array_get(m, 1));
		*nb = json_string_length(json_array_get(m, 1));
		return NR_OK;
	}
	return failf(l, path, "expected \"A B\" or [\"A\", \"B\"] (two tokens)");
}

static int read_merges(struct load *l, json_t *merges)
{
	struct tokenizer *t = l->t;
	size_t n = json_array_size(merges), cap = table_size(n), room = 0;
	char *buf = NULL, path[64];
	int rc = NR_OK;

	t->merge = malloc(cap * sizeof *t->merge);
	if (!t->merge)
		return oom(l);
	for (size_t i = 0; i < cap; i++)
		t->merge[i].pair = UINT64_MAX;
	t->merge_mask = cap - 1;
	for (size_t i = 0; i < n; i++) {
		const char *a = NULL, *b = NULL;
		size_t na = 0, nb = 0;
		long ra, rb;
		int32_t ia, ib, ir;
		uint32_t bad = 0;
		uint64_t pair;
		size_t h;

		snprintf(path, sizeof path, "model.merges[%zu]", i);
		if ((rc = merge_parts(l, json_array_get(merges, i), path, &a, &na, &b, &nb)))
			goto out;
		if (na + nb > room) {
			char *nbuf = realloc(buf, room = 2 * (na + nb));
			if (!nbuf) {
				rc = oom(l);
				goto out;
			}
			buf = nbuf;
		}
		ra = unmap(&l->map, a, na, buf, &bad);
		rb = ra < 0 ? -1 : unmap(&l->map, b, nb, buf + ra, &bad);
		ia = ra < 0 ? -1 : index_find(t, &t->vocab, buf, (size_t)ra);
		ib = rb < 0 ? -1 : index_find(t, &t->vocab, buf + ra, (size_t)rb);
		ir = ia < 0 || ib < 0 ? -1 : index_find(t, &t->vocab, buf, (size_t)(ra + rb));
		if (ir < 0) {
			if (ia < 0 || ib < 0)
				rc = failf(l, path, "\"%.*s\" is not in the vocabulary",
					   ia < 0 ? (int)na : (int)nb, ia < 0 ? a : b);
			else
				rc = failf(l, path, "the merged \"%.*s%.*s\" is not in the "
					   "vocabulary", (int)na, a, (int)nb, b);
			goto out;
		}
		pair = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib;
		for (h = pair_hash(pair, t->merge_mask); t->merge[h].pair != UINT64_MAX;
		     h = (h + 1) & t->merge_mask) {
			if (t->merge[h].pair == pair) {
				rc = failf(l, path, "the same pair as model.merges[%d]",
					   t->merge[h].rank);
				goto out;
			}
		}
		t->merge[h] = (struct tok_merge){ pair, (int32_t)i, ir };
	}
	t->nmerges = n;
	free(buf);
	return NR_OK;
out:
	free(buf);
	return rc;
}

static int read_added(struct load *l, json_t *added)
{
	static const char *const keys[] = { "id", "content", "single_word", "lstrip", "rstrip",
					    "normalized", "special", NULL };
	static const char *const unsupported[] = { "single_word", "lstrip", "rstrip" };
	struct tokenizer *t = l->t;
	char sub[64];
	int rc;

	if (index_init(&t->added, json_array_size(added)))
		return oom(l);
	for (size_t i = 0; i < json_array_size(added); i++) {
		json_t *a = json_array_get(added, i), *c = json_object_get(a, "content");
		const char *s = json_string_value(c);
		size_t n = json_string_length(c);
		long id = (long)json_integer_value(json_object_get(a, "id"));
		int32_t other;
		bool flag;

		snprintf(sub, sizeof sub, "added_tokens[%zu]", i);
		if ((rc = jdoc_check_keys(&l->d, a, sub, keys, l->e)) ||
		    (rc = jget_bool(&l->d, a, sub, "normalized", false, &flag, l->e)) ||
		    (rc = jget_bool(&l->d, a, sub, "special", false, &flag, l->e)))
			return rc;
		for (int k = 0; k < 3; k++) {
			char path[96];
			flag = false;
			if ((rc = jget_bool(&l->d, a, sub, unsupported[k], false, &flag, l->e)))
				return rc;
			jdoc_path(path, sizeof path, sub, unsupported[k]);
			if (flag)
				return failf(l, path, "%s is not supported (expected false)",
					     unsupported[k]);
		}
		if ((other = index_find(t, &t->added, s, n)) >= 0)
			return failf(l, sub, "\"%s\" is already added as id %d", s, other);
		if (t->kind[id] == KIND_ADDED)
			return failf(l, sub, "id %ld is already an added token", id);
		if (t->kind[id] == KIND_VOCAB &&
		    (t->len[id] != n || memcmp(t->text + t->off[id], s, n) != 0))
			return failf(l, sub, "id %ld is another token of the vocabulary", id);
		if (t->kind[id] == KIND_VOCAB)
			t->kind[id] = KIND_ADDED;
		else
			token_set(t, (int32_t)id, s, n, KIND_ADDED, &l->used);
		if (added_put(t, (int32_t)id))
			return oom(l);
	}
	return NR_OK;
}

/* One reading of the file; with positions or not (see jdoc_loadb_foreign). */
static int read_json(struct tokenizer *t, const char *name, const char *buf, size_t len,
		     bool positions, struct err *e)
{
	static const char *const keys[] = { "version", "truncation", "padding", "added_tokens",
					    "normalizer", "pre_tokenizer", "post_processor",
					    "decoder", "model", NULL };
	struct load l = { .t = t, .e = e };
	json_t *model, *vocab, *merges, *added = NULL;
	size_t bytes = 0;
	int32_t n = 0;
	int rc;

	memset(t, 0, sizeof *t);
	bytemap_init(&l.map);
	if ((rc = jdoc_loadb_foreign(&l.d, name, buf, len, positions, e)))
		return rc;
	if ((rc = jdoc_check_keys(&l.d, l.d.root, "", keys, e)) ||
	    (rc = jget_obj(&l.d, l.d.root, "", "model", true, &model, e)) ||
	    (rc = read_model_options(&l, model)) ||
	    (rc = jget_obj(&l.d, model, "model", "vocab", true, &vocab, e)) ||
	    (rc = jget_arr(&l.d, model, "model", "merges", true, &merges, e)))
		goto out;
	if (json_is_null(json_object_get(l.d.root, "added_tokens")))
		added = NULL;
	else if ((rc = jget_arr(&l.d, l.d.root, "", "added_tokens", false, &added, e)))
		goto out;
	if ((rc = read_normalizer(&l, l.d.root)) || (rc = read_pre_tokenizer(&l, l.d.root)) ||
	    (rc = read_decoder(&l, l.d.root)) || (rc = count_ids(&l, vocab, added, &n, &bytes)))
		goto out;
	if (tokens_alloc(t, n, bytes)) {
		rc = oom(&l);
		goto out;
	}
	if ((rc = read_vocab(&l, vocab)) || (rc = read_merges(&l, merges)) ||
	    (rc = read_added(&l, added)))
		goto out;
	set_specials(t);
out:
	jdoc_free(&l.d);
	if (rc)
		tok_free(t);
	return rc;
}

/* Positions cost a third of the time on a Llama 3 size file and only serve
 * messages: read without them, and again with them to report a failure. */
int tok_loadb(struct tokenizer *t, const char *name, const char *buf, size_t len,
	      struct err *e)
{
	int rc = read_json(t, name, buf, len, false, e);

	return rc == NR_EINPUT ? read_json(t, name, buf, len, true, e) : rc;
}

int tok_load(struct tokenizer *t, const char *file, struct err *e)
{
	char *buf;
	size_t len;
	int rc = in_read_file(file, &buf, &len, e);

	if (rc) {
		memset(t, 0, sizeof *t);
		return rc;
	}
	rc = tok_loadb(t, file, buf, len, e);
	free(buf);
	return rc;
}

int32_t tok_id(const struct tokenizer *t, const char *s)
{
	int32_t id = added_id(t, s);

	return id >= 0 ? id : index_find(t, &t->vocab, s, strlen(s));
}

const char *tok_piece(const struct tokenizer *t, int32_t id, size_t *len)
{
	if (id < 0 || id >= t->n || t->kind[id] == KIND_NONE)
		return NULL;
	*len = t->len[id];
	return t->text + t->off[id];
}

/* --- pre-tokenisation ----------------------------------------------------- */

struct cur {
	const unsigned char *s;
	size_t n;
};

/* The code point at i, its class and (in *len) length. */
static enum uni_class at(const struct cur *c, size_t i, uint32_t *cp, size_t *len)
{
	*cp = uni_decode(c->s + i, c->n - i, len);
	return uni_class(*cp);
}

static size_t run_of(const struct cur *c, size_t i, enum uni_class k)
{
	uint32_t cp;
	size_t len;

	while (i < c->n && at(c, i, &cp, &len) == k)
		i += len;
	return i;
}

/* The end of the contraction 's 't 're 've 'm 'll 'd at i (an apostrophe),
 * or 0.  Case-insensitive as the regex module folds: ſ (U+017F) is an s. */
static size_t contraction(const struct cur *c, size_t i, bool fold)
{
	uint32_t a, b = 0;
	size_t la, lb = 0;

	if (i + 1 >= c->n)
		return 0;
	a = uni_decode(c->s + i + 1, c->n - i - 1, &la);
	if (i + 1 + la < c->n)
		b = uni_decode(c->s + i + 1 + la, c->n - i - 1 - la, &lb);
	if (fold) {
		a = a == 0x17F ? 's' : a >= 'A' && a <= 'Z' ? a + 32 : a;
		b = b >= 'A' && b <= 'Z' ? b + 32 : b;
	}
	switch (a) {
	case 's': case 't': case 'm': case 'd':
		return i + 1 + la;
	case 'r': case 'v':
		return b == 'e' ? i + 1 + la + lb : 0;
	case 'l':
		return b == 'l' ? i + 1 + la + lb : 0;
	}
	return 0;
}

/* The end of the white-space alternatives at i, which is white space:
 * \s*[\r\n]+ (Llama 3 and Qwen2 only), then \s+(?!\S), then \s+. */
static size_t space_end(const struct cur *c, size_t i, bool newlines)
{
	size_t j = i, last = i, nl = 0, len;
	uint32_t cp;

	while (j < c->n && at(c, j, &cp, &len) == UNI_WS) {
		last = j;
		j += len;
		if (cp == '\r' || cp == '\n')
			nl = j;
	}
	if (newlines && nl)
		return nl;
	if (j == c->n || last == i)
		return j;
	return last; /* leave the last space to the word after it */
}

/* The end of the piece that starts at i under the Llama 3 or Qwen2 pattern:
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?\p{L}+ | \p{N}{1,digits}
 *   | ' '?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
 * the first alternative that matches, each as long as it can be. */
static size_t end_llama(const struct cur *c, size_t i, int digits)
{
	uint32_t cp, cp2;
	size_t len, len2, j;
	enum uni_class k = at(c, i, &cp, &len);

	if (cp == '\'' && (j = contraction(c, i, true)))
		return j;
	if (k == UNI_L)
		return run_of(c, i, UNI_L);
	if (k != UNI_N && cp != '\r' && cp != '\n' && i + len < c->n &&
	    at(c, i + len, &cp2, &len2) == UNI_L)
		return run_of(c, i + len, UNI_L);
	if (k == UNI_N) {
		for (j = i; digits-- > 0 && j < c->n && at(c, j, &cp2, &len2) == UNI_N; j += len2)
			;
		return j;
	}
	j = cp == ' ' ? i + 1 : i;
	if (j < c->n && at(c, j, &cp2, &len2) == UNI_OTHER) {
		j = run_of(c, j, UNI_OTHER);
		while (j < c->n && (c->s[j] == '\r' || c->s[j] == '\n'))
			j++;
		return j;
	}
	return space_end(c, i, true);
}

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t end_gpt2(const struct cur *c, size_t i)
{
	uint32_t cp, cp2;
	size_t len, len2, j;

	at(c, i, &cp, &len);
	if (cp == '\'' && (j = contraction(c, i, false)))
		return j;
	j = cp == ' ' ? i + 1 : i;
	if (j < c->n) {
		enum uni_class k2 = at(c, j, &cp2, &len2);
		if (k2 != UNI_WS)
			return run_of(c, j, k2);
	}
	return space_end(c, i, false);
}

size_t tok_split(const struct tokenizer *t, const char *text, size_t len, size_t i)
{
	const struct cur c = { (const unsigned char *)text, len };

	switch (t->pre) {
	case TOK_PRE_LLAMA3: return end_llama(&c, i, 3);
	case TOK_PRE_QWEN2: return end_llama(&c, i, 1);
	case TOK_PRE_GPT2: return end_gpt2(&c, i);
	default: return len;
	}
}

/* --- encoding ----------------------------------------------------------- */

struct heap_ent {
	int32_t rank, pos;
};

struct enc {
	const struct tokenizer *t;
	int32_t *ids;
	size_t n, cap;
	/* one piece's symbols: token, previous and next live symbol (-1: none) */
	int32_t *sym, *prev, *next;
	struct heap_ent *heap;
	size_t nheap, room;
};

static int emit(struct enc *x, int32_t id)
{
	if (x->n == x->cap) {
		size_t cap = x->cap ? 2 * x->cap : 256;
		int32_t *ids = realloc(x->ids, cap * sizeof *ids);
		if (!ids)
			return -1;
		x->ids = ids;
		x->cap = cap;
	}
	x->ids[x->n++] = id;
	return 0;
}

static bool before(struct heap_ent a, struct heap_ent b)
{
	return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static void heap_push(struct enc *x, int32_t rank, int32_t pos)
{
	size_t i = x->nheap++;

	while (i > 0 && before((struct heap_ent){ rank, pos }, x->heap[(i - 1) / 2])) {
		x->heap[i] = x->heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	x->heap[i] = (struct heap_ent){ rank, pos };
}

static struct heap_ent heap_pop(struct enc *x)
{
	struct heap_ent top = x->heap[0], last = x->heap[--x->nheap];
	size_t i = 0;

	for (;;) {
		size_t k = 2 * i + 1;
		if (k >= x->nheap)
			break;
		if (k + 1 < x->nheap && before(x->heap[k + 1], x->heap[k]))
			k++;
		if (!before(x->heap[k], last))
			break;
		x->heap[i] = x->heap[k];
		i = k;
	}
	x->heap[i] = last;
	return top;
}

/* Queue the merge of the live symbols at pos and after it, if any. */
static void queue_pair(struct enc *x, int32_t pos)
{
	const struct tok_merge *m;

	if (pos < 0 || x->next[pos] < 0)
		return;
	m = merge_find(x->t, x->sym[pos], x->sym[x->next[pos]]);
	if (m)
		heap_push(x, m->rank, pos);
}

static int grow_scratch(struct enc *x, size_t n)
{
	size_t room = x->room ? x->room : 64;
	void *p;

	while (room < n)
		room *= 2;
	if (room == x->room)
		return 0;
	if (!(p = realloc(x->sym, room * sizeof *x->sym)))
		return -1;
	x->sym = p;
	if (!(p = realloc(x->prev, room * sizeof *x->prev)))
		return -1;
	x->prev = p;
	if (!(p = realloc(x->next, room * sizeof *x->next)))
		return -1;
	x->next = p;
	if (!(p = realloc(x->heap, 3 * room * sizeof *x->heap)))
		return -1;
	x->heap = p;
	x->room = room;
	return 0;
}

/* One piece: byte tokens, then the merges by rank.  The heap holds every
 * mergeable adjacent pair by (rank, position); an entry whose pair has
 * since changed no longer has its rank there and is skipped (ranks are
 * unique to pairs). */
static int bpe(struct enc *x, const unsigned char *p, size_t n)
{
	const struct tokenizer *t = x->t;
	int32_t i;

	if (n == 1 || t->nmerges == 0) {
		for (size_t k = 0; k < n; k++)
			if (emit(x, t->byte_id[p[k]]))
				return -1;
		return 0;
	}
	if (t->ignore_merges) {
		int32_t id = index_find(t, &t->vocab, p, n);
		if (id >= 0)
			return emit(x, id);
	}
	if (grow_scratch(x, n))
		return -1;
	for (size_t k = 0; k < n; k++) {
		x->sym[k] = t->byte_id[p[k]];
		x->prev[k] = (int32_t)k - 1;
		x->next[k] = k + 1 < n ? (int32_t)k + 1 : -1;
	}
	x->nheap = 0;
	for (i = 0; i + 1 < (int32_t)n; i++)
		queue_pair(x, i);
	while (x->nheap) {
		struct heap_ent h = heap_pop(x);
		const struct tok_merge *m;
		int32_t r;

		if (x->sym[h.pos] < 0 || (r = x->next[h.pos]) < 0)
			continue;
		m = merge_find(t, x->sym[h.pos], x->sym[r]);
		if (!m || m->rank != h.rank)
			continue;
		x->sym[h.pos] = m->id;
		x->sym[r] = -1;
		x->next[h.pos] = x->next[r];
		if (x->next[r] >= 0)
			x->prev[x->next[r]] = h.pos;
		queue_pair(x, x->prev[h.pos]);
		queue_pair(x, h.pos);
	}
	for (i = 0; i >= 0; i = x->next[i])
		if (emit(x, x->sym[i]))
			return -1;
	return 0;
}

/* A stretch of text between added tokens: normalise, cut, merge. */
static int stretch(struct enc *x, const unsigned char *s, size_t n)
{
	const struct tokenizer *t = x->t;
	unsigned char *norm = NULL;
	struct cur c = { s, n };
	int rc = 0;

	if (n == 0)
		return 0;
	if (t->nfc) {
		if (uni_nfc(s, n, &norm, &c.n))
			return -1;
		c.s = norm;
	}
	for (size_t i = 0, j; i < c.n && rc == 0; i = j) {
		j = tok_split(t, (const char *)c.s, c.n, i);
		rc = bpe(x, c.s + i, j - i);
	}
	free(norm);
	return rc;
}

/* The longest added token at s[i..n), its id and length, or -1. */
static int32_t added_at(const struct tokenizer *t, const unsigned char *s, size_t n, size_t i,
			size_t *len)
{
	if (!(t->added_first[s[i] >> 3] & (1u << (s[i] & 7))))
		return -1;
	for (size_t k = 0; k < t->nadded_lens; k++) {
		int32_t id;
		if (t->added_lens[k] > n - i)
			continue;
		id = index_find(t, &t->added, s + i, t->added_lens[k]);
		if (id >= 0) {
			*len = t->added_lens[k];
			return id;
		}
	}
	return -1;
}

int tok_encode(const struct tokenizer *t, const char *text, size_t len, int32_t **ids,
	       size_t *n, struct err *e)
{
	const unsigned char *s = (const unsigned char *)text;
	struct enc x = { .t = t };
	size_t from = 0, i = 0, mlen = 0;
	int rc = 0;

	while (i < len && rc == 0) {
		int32_t id = added_at(t, s, len, i, &mlen);
		if (id < 0) {
			i++;
			continue;
		}
		rc = stretch(&x, s + from, i - from) || emit(&x, id);
		from = i = i + mlen;
	}
	if (rc == 0)
		rc = stretch(&x, s + from, len - from);
	free(x.sym);
	free(x.prev);
	free(x.next);
	free(x.heap);
	if (rc == 0 && !x.ids) /* no text: still an array to free */
		rc = !(x.ids = malloc(sizeof *x.ids));
	if (rc) {
		free(x.ids);
		return err_set(e, NR_EIO, "out of memory encoding %zu bytes of text", len);
	}
	*ids = x.ids;
	*n = x.n;
	return NR_OK;
}

/* What an id that is no token decodes to: U+FFFD, as utf8_replace and
 * Python's errors="replace" show what is not UTF-8. */
static const char replacement[] = UTF8_REPLACEMENT;

int tok_decode(const struct tokenizer *t, const int32_t *ids, size_t n, char **text,
	       size_t *len, struct err *e)
{
	size_t total = 0, o = 0;
	char *out;

	for (size_t i = 0; i < n; i++) {
		size_t k;
		const char *p = tok_piece(t, ids[i], &k);

		total += p ? k : sizeof replacement - 1;
	}
	out = malloc(total + 1);
	if (!out)
		return err_set(e, NR_EIO, "out of memory decoding %zu tokens", n);
	for (size_t i = 0; i < n; i++) {
		size_t k;
		const char *p = tok_piece(t, ids[i], &k);

		if (!p) {
			p = replacement;
			k = sizeof replacement - 1;
		}
		memcpy(out + o, p, k);
		o += k;
	}
	out[o] = '\0';
	*text = out;
	*len = o;
	return NR_OK;
}
