/* safetensors: writer → reader round trips, byte-exact agreement with the
 * reference writer's output, and one case per rejection rule, each file
 * built byte by byte in memory. */
#include "state/safetensors.h"
#include "unit.h"

#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A file: the 8-byte little-endian length n, the header text, then data
 * bytes (value i & 0xff at data byte i). */
static size_t mkfile(unsigned char *out, uint64_t n, const char *hdr, size_t data)
{
	size_t h = strlen(hdr);

	for (int i = 0; i < 8; i++)
		out[i] = (unsigned char)(n >> (8 * i));
	memcpy(out + 8, hdr, h);
	for (size_t i = 0; i < data; i++)
		out[8 + h + i] = (unsigned char)i;
	return 8 + h + data;
}

/* Parse header hdr (its own length as N) followed by data bytes. */
static int parse(const char *hdr, size_t data, struct st_file *f, struct err *e)
{
	static unsigned char buf[4096];
	size_t len = mkfile(buf, strlen(hdr), hdr, data);

	return st_read_buf(f, "t.safetensors", buf, len, e);
}

/* The header must be rejected with NR_EINPUT and a message holding want. */
static bool rejects(const char *hdr, size_t data, const char *want)
{
	struct st_file f;
	struct err e = { 0 };
	int rc = parse(hdr, data, &f, &e);

	if (rc != NR_EINPUT || !strstr(e.msg, want)) {
		printf("#   rc %d, message: %s\n#   wanted: %s\n", rc, e.msg, want);
		return false;
	}
	return f.ntensors == 0 && f.arena == NULL;
}

static bool accepts(const char *hdr, size_t data, struct st_file *f)
{
	struct err e = { 0 };
	int rc = parse(hdr, data, f, &e);

	if (rc != NR_OK)
		printf("#   rc %d: %s\n", rc, e.msg);
	return rc == NR_OK;
}

static void test_dtype_table(void)
{
	CHECK(st_dtype_bits(ST_BF16) == 16);
	CHECK(st_dtype_bits(ST_F4) == 4);
	CHECK(st_dtype_bits(ST_F6_E3M2) == 6);
	CHECK(st_dtype_bits(ST_C64) == 64);
	CHECK(st_dtype_bits(ST_BOOL) == 8);
	for (int t = 0; t < ST_NDTYPES; t++)
		CHECK(st_dtype_parse(st_dtype_name((enum st_dtype)t)) == t);
	CHECK(st_dtype_parse("bf16") == -1);
	CHECK(st_dtype_parse("F128") == -1);
}

/* --- the writer ------------------------------------------------------------ */

/* Value of byte off of tensor i written through the callback. */
static unsigned char fill_byte(size_t i, uint64_t off)
{
	return (unsigned char)(off * 7 + i * 13 + 1);
}

static int fill(void *ctx, size_t i, uint64_t off, void *buf, size_t len, struct err *e)
{
	unsigned char *p = buf;

	(void)ctx;
	(void)e;
	for (size_t k = 0; k < len; k++)
		p[k] = fill_byte(i, off + k);
	return NR_OK;
}

static int fill_fails(void *ctx, size_t i, uint64_t off, void *buf, size_t len,
		      struct err *e)
{
	(void)ctx;
	(void)i;
	(void)buf;
	(void)len;
	return err_set(e, NR_EIO, "source went away at byte %llu", (unsigned long long)off);
}

static char *tmpdir(void)
{
	static char dir[512];
	const char *base = getenv("TMPDIR");

	snprintf(dir, sizeof dir, "%s/nereus-st-XXXXXX", base && *base ? base : "/tmp");
	return mkdtemp(dir);
}

static void test_roundtrip(void)
{
	static const float w[6] = { 0, 1, 2, 3, 4, 5 };
	static const int64_t step = 1234;
	static const uint64_t s_w[] = { 2, 3 }, s_b[] = { 3, 5 }, s_z[] = { 0, 5 };
	static const uint64_t s_big[] = { (2u << 20) + 3 }; /* crosses fill chunks */
	const struct st_desc t[] = {
		{ "step", ST_I64, 0, NULL, &step },
		{ "layers.0.w", ST_F32, 2, s_w, w },
		{ "layers.0.b", ST_BF16, 2, s_b, NULL },   /* through fill */
		{ "empty", ST_U8, 2, s_z, NULL },
		{ "big", ST_U8, 1, s_big, NULL },
	};
	const struct st_meta meta[] = { { "format", "pt" }, { "nereus", "1" } };
	char path[600], *dir = tmpdir();
	struct st_file f, g;
	struct err e = { 0 };
	const struct st_tensor *x;
	unsigned char *buf;
	off_t size;
	int fd, rc;

	CHECK(dir != NULL);
	if (!dir)
		return;
	snprintf(path, sizeof path, "%s/model.safetensors", dir);
	rc = st_write_file(path, t, 5, meta, 2, fill, NULL, &e);
	CHECK(rc == NR_OK);
	if (rc) {
		printf("#   %s\n", e.msg);
		return;
	}
	fd = open(path, O_RDONLY);
	CHECK(fd >= 0);
	rc = st_read_fd(&f, path, fd, &e);
	CHECK(rc == NR_OK);
	if (rc) {
		printf("#   %s\n", e.msg);
		return;
	}
	CHECK(f.header_len % 8 == 0);
	CHECK(f.data_start == 8 + f.header_len);
	CHECK(f.data_len == 8 + 24 + 30 + s_big[0]);
	CHECK(f.ntensors == 5 && f.nmeta == 2);
	CHECK(strcmp(f.meta[0].key, "format") == 0 && strcmp(f.meta[0].value, "pt") == 0);
	CHECK(strcmp(f.meta[1].key, "nereus") == 0 && strcmp(f.meta[1].value, "1") == 0);
	/* Data in descriptor order, so sorted by offsets they stay in it. */
	CHECK(strcmp(f.tensors[0].name, "step") == 0 && f.tensors[0].ndim == 0);
	CHECK(st_numel(&f.tensors[0]) == 1);
	CHECK(strcmp(f.tensors[3].name, "empty") == 0 && f.tensors[3].begin == 62);
	CHECK(st_numel(&f.tensors[3]) == 0 && f.tensors[3].end == 62);
	x = st_find(&f, "layers.0.b");
	CHECK(x && x->dtype == ST_BF16 && x->ndim == 2 && x->shape[0] == 3 && x->shape[1] == 5);
	CHECK(x && x->begin == 32 && x->end == 62);
	CHECK(st_find(&f, "nope") == NULL);

	/* The data are where the header says. */
	size = lseek(fd, 0, SEEK_END);
	buf = malloc((size_t)size);
	CHECK(pread(fd, buf, (size_t)size, 0) == size);
	CHECK(memcmp(buf + 8, "{\"__metadata__\":{\"format\":\"pt\",\"nereus\":\"1\"},", 45) == 0);
	x = st_find(&f, "layers.0.w");
	CHECK(x && memcmp(buf + f.data_start + x->begin, w, sizeof w) == 0);
	x = st_find(&f, "step");
	CHECK(x && memcmp(buf + f.data_start + x->begin, &step, 8) == 0);
	x = st_find(&f, "layers.0.b");
	for (uint64_t k = 0; x && k < 30; k++)
		CHECK(buf[f.data_start + x->begin + k] == fill_byte(2, k));
	x = st_find(&f, "big");
	CHECK(x && x->begin == 62 && x->end == 62 + s_big[0]);
	for (uint64_t k = 0, bad = 0; x && k < s_big[0] && !bad; k++)
		CHECK(!(bad = buf[f.data_start + x->begin + k] != fill_byte(4, k)));

	/* The buffer reader agrees with the file reader. */
	CHECK(st_read_buf(&g, "model.safetensors", buf, (size_t)size, &e) == NR_OK);
	CHECK(g.ntensors == f.ntensors && g.data_start == f.data_start);
	for (size_t i = 0; i < g.ntensors && i < f.ntensors; i++)
		CHECK(strcmp(g.tensors[i].name, f.tensors[i].name) == 0 &&
		      g.tensors[i].begin == f.tensors[i].begin && g.tensors[i].end == f.tensors[i].end);
	st_file_free(&g);
	st_file_free(&f);
	free(buf);
	close(fd);
	unlink(path);
	rmdir(dir);
}

/* The reference writer's own tests fix these bytes: compact JSON, metadata
 * first, spaces up to a multiple of 8. */
static void test_reference_bytes(void)
{
	static const uint64_t shape[] = { 1, 1, 2, 3 };
	static const float v[6] = { 0, 1, 2, 3, 4, 5 };
	const struct st_desc t = { "attn0", ST_F32, 4, shape, v };
	const struct st_meta m = { "framework", "pt" };
	const char *want = "{\"attn0\":{\"dtype\":\"F32\",\"shape\":[1,1,2,3],"
			   "\"data_offsets\":[0,24]}}       ";
	char *out;
	size_t len;
	uint64_t data;
	struct err e = { 0 };

	CHECK(st_header_build(&t, 1, NULL, 0, &out, &len, &data, &e) == NR_OK);
	CHECK(len == 80 && data == 24 && out[0] == 72 && out[1] == 0);
	CHECK(memcmp(out + 8, want, 72) == 0);
	free(out);

	CHECK(st_header_build(NULL, 0, NULL, 0, &out, &len, &data, &e) == NR_OK);
	CHECK(len == 16 && out[0] == 8 && memcmp(out + 8, "{}      ", 8) == 0 && data == 0);
	free(out);

	CHECK(st_header_build(NULL, 0, &m, 1, &out, &len, &data, &e) == NR_OK);
	CHECK(len == 48 && out[0] == 40);
	CHECK(memcmp(out + 8, "{\"__metadata__\":{\"framework\":\"pt\"}}     ", 40) == 0);
	free(out);
}

static void test_writer_rejects(void)
{
	static const uint64_t s3[] = { 3 }, s4[] = { 4 };
	static const unsigned char bytes[8];
	const struct st_desc dup[] = { { "a", ST_U8, 1, s3, bytes }, { "a", ST_U8, 1, s3, bytes } };
	const struct st_desc meta[] = { { "__metadata__", ST_U8, 1, s3, bytes } };
	const struct st_desc utf[] = { { "bad\xff", ST_U8, 1, s3, bytes } };
	const struct st_desc f4odd[] = { { "q", ST_F4, 1, s3, bytes } };
	const struct st_desc f4even[] = { { "q", ST_F4, 1, s4, bytes } };
	const struct st_desc nofill[] = { { "a", ST_U8, 1, s3, NULL } };
	char *out;
	size_t len;
	uint64_t data;
	struct err e = { 0 };
	int p[2], fd = pipe(p) == 0 ? p[1] : -1; /* takes the header; never the machine's devices */

	CHECK(st_header_build(dup, 2, NULL, 0, &out, &len, &data, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "'a' given twice") != NULL);
	CHECK(st_header_build(meta, 1, NULL, 0, &out, &len, &data, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "reserved") != NULL);
	CHECK(st_header_build(utf, 1, NULL, 0, &out, &len, &data, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "UTF-8") != NULL);
	CHECK(st_header_build(f4odd, 1, NULL, 0, &out, &len, &data, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "not a whole number of bytes") != NULL);
	CHECK(st_header_build(f4even, 1, NULL, 0, &out, &len, &data, &e) == NR_OK && data == 2);
	free(out);

	CHECK(st_write_fd(fd, "out.safetensors", nofill, 1, NULL, 0, NULL, NULL, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "out.safetensors: tensor 'a' has no data") != NULL);
	CHECK(st_write_fd(fd, "out.safetensors", nofill, 1, NULL, 0, fill_fails, NULL, &e) == NR_EIO);
	CHECK(strcmp(e.msg, "out.safetensors: tensor 'a': source went away at byte 0") == 0);
	close(fd);
	close(p[0]);
}

/* --- the reader: what it accepts ------------------------------------------- */

static void test_zero_size_share_offset(void)
{
	struct st_file f;

	CHECK(accepts("{\"z1\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0]},"
		      "\"z2\":{\"dtype\":\"F32\",\"shape\":[3,0],\"data_offsets\":[0,0]},"
		      "\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
		      "\"z3\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,4]}}", 4, &f));
	CHECK(f.ntensors == 4);
	CHECK(f.ntensors == 4 && strcmp(f.tensors[3].name, "z3") == 0);
	st_file_free(&f);
}

static void test_scalar_is_one_element(void)
{
	struct st_file f;

	CHECK(accepts("{\"s\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,8]}}", 8, &f));
	CHECK(f.ntensors == 1 && f.tensors[0].ndim == 0 && st_numel(&f.tensors[0]) == 1);
	st_file_free(&f);
	CHECK(rejects("{\"s\":{\"dtype\":\"F64\",\"shape\":[],\"data_offsets\":[0,0]}}", 0,
		      "expected 8 bytes (shape [], F64), got 0"));
}

static void test_header_order_is_free(void)
{
	struct st_file f;

	CHECK(accepts("  {\"b\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[4,8]},"
		      "\"a\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}}   ", 8, &f));
	CHECK(f.ntensors == 2 && strcmp(f.tensors[0].name, "a") == 0);
	st_file_free(&f);
}

static void test_metadata_null_or_strings(void)
{
	struct st_file f;

	CHECK(accepts("{\"__metadata__\":null}", 0, &f));
	CHECK(f.nmeta == 0 && f.ntensors == 0);
	st_file_free(&f);
	CHECK(accepts("{\"__metadata__\":{\"k\":\"v\\u00e9\"}}", 0, &f));
	CHECK(f.nmeta == 1 && strcmp(f.meta[0].value, "v\xc3\xa9") == 0);
	st_file_free(&f);
}

static void test_sub_byte_whole_bytes(void)
{
	struct st_file f;

	CHECK(accepts("{\"q\":{\"dtype\":\"F4\",\"shape\":[2,2],\"data_offsets\":[0,2]}}", 2, &f));
	st_file_free(&f);
	CHECK(accepts("{\"q\":{\"dtype\":\"F6_E2M3\",\"shape\":[4],\"data_offsets\":[0,3]}}", 3, &f));
	st_file_free(&f);
}

/* --- the reader: one case per rejection rule ------------------------------- */

static void test_reject_file_too_short(void)
{
	static const unsigned char b[5] = { 2, 0, 0, 0, 0 };
	struct st_file f;
	struct err e = { 0 };

	CHECK(st_read_buf(&f, "t.safetensors", b, sizeof b, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "t.safetensors: file is 5 bytes, too short") != NULL);
	CHECK(st_read_buf(&f, "t.safetensors", b, 0, &e) == NR_EINPUT);
}

static void test_reject_header_too_large(void)
{
	unsigned char b[32];
	size_t len = mkfile(b, 100000001, "{}", 0);
	struct st_file f;
	struct err e = { 0 };

	CHECK(st_read_buf(&f, "t.safetensors", b, len, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "header length 100000001 at byte 0 exceeds the limit") != NULL);
	/* The largest N is 8 + N past the end here, not too large. */
	len = mkfile(b, 100000000, "{}", 0);
	CHECK(st_read_buf(&f, "t.safetensors", b, len, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "runs past the end") != NULL);
	len = mkfile(b, UINT64_MAX, "{}", 0);
	CHECK(st_read_buf(&f, "t.safetensors", b, len, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "exceeds the limit") != NULL);
}

static void test_reject_header_past_end(void)
{
	unsigned char b[32];
	size_t len = mkfile(b, 11, "{}", 0);
	struct st_file f;
	struct err e = { 0 };

	CHECK(st_read_buf(&f, "t.safetensors", b, len, &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "header length 11 at byte 0 runs past the end of the file (10 bytes)"));
}

static void test_reject_invalid_utf8(void)
{
	CHECK(rejects("{\"a\xff\":1}", 0, "header is not valid UTF-8 at byte 11"));
	CHECK(rejects("{\"\xc0\xaf\":1}", 0, "not valid UTF-8 at byte 10"));      /* overlong */
	CHECK(rejects("{\"\xed\xa0\x80\":1}", 0, "not valid UTF-8 at byte 10"));  /* surrogate */
	CHECK(rejects("{\"\xf4\x90\x80\x80\":1}", 0, "not valid UTF-8"));        /* > U+10FFFF */
	CHECK(rejects("{\"\xe2\x82", 0, "not valid UTF-8 at byte 10"));          /* cut short */
}

static void test_reject_invalid_json(void)
{
	CHECK(rejects("{\"a\":", 0, "header is not valid JSON at byte"));
	CHECK(rejects("{} x", 0, "not valid JSON"));
	CHECK(rejects("[1, 2]", 0, "header is not a JSON object"));
	CHECK(rejects("{\"a\":\"x\\u0000\"}", 0, "not valid JSON"));
	CHECK(rejects("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
		      "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2,
		      "duplicate object key"));
}

static void test_reject_bad_entry(void)
{
	CHECK(rejects("{\"a\":[]}", 0, "tensor 'a': entry is not an object"));
	CHECK(rejects("{\"a\":{\"dtype\":\"U8\",\"shape\":[1]}}", 0, "tensor 'a': missing 'data_offsets'"));
	CHECK(rejects("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":1}}", 1,
		      "tensor 'a': unknown key 'x'"));
	CHECK(rejects("{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}", 1,
		      "shape[0] is not a non-negative integer"));
	CHECK(rejects("{\"a\":{\"dtype\":\"U8\",\"shape\":[1, 2.0],\"data_offsets\":[0,2]}}", 2,
		      "shape[1] is not a non-negative integer"));
	CHECK(rejects("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", 1,
		      "data_offsets is not [begin, end]"));
	CHECK(rejects("{\"a\":{\"dtype\":8,\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
		      "dtype is not a string"));
	/* Past 2^63 - 1 jansson has no integer for it. */
	CHECK(rejects("{\"a\":{\"dtype\":\"U8\",\"shape\":[9223372036854775808,0],"
		      "\"data_offsets\":[0,0]}}", 0, "too big integer"));
}

static void test_reject_unknown_dtype(void)
{
	CHECK(rejects("{\"a\":{\"dtype\":\"F128\",\"shape\":[1],\"data_offsets\":[0,16]}}", 16,
		      "t.safetensors: tensor 'a': unknown dtype 'F128'"));
}

static void test_reject_shape_overflow(void)
{
	/* The element count overflows: 2^32 · 2^32. */
	CHECK(rejects("{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296],"
		      "\"data_offsets\":[0,0]}}", 0, "tensor 'a' shape [4294967296, 4294967296], "
		      "U8: size overflows 64 bits"));
	/* The element count fits, the byte count does not: 2^62 · 4. */
	CHECK(rejects("{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],"
		      "\"data_offsets\":[0,0]}}", 0, "size overflows 64 bits"));
	/* Overflow in a prefix fails even when a later 0 would make the count
	 * 0: the reference multiplies left to right and fails the same way. */
	CHECK(rejects("{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,0],"
		      "\"data_offsets\":[0,0]}}", 0, "overflows"));
}

static void test_reject_not_from_zero(void)
{
	CHECK(rejects("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}", 8,
		      "tensor 'a' data_offsets [4, 8] at byte 65: leaves a gap of 4 bytes after the "
		      "start of the data"));
}

static void test_reject_gap(void)
{
	CHECK(rejects("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
		      "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[6,10]}}", 10,
		      "tensor 'b' data_offsets [6, 10] at byte 120: leaves a gap of 2 bytes after 'a'"));
}

static void test_reject_overlap(void)
{
	CHECK(rejects("{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
		      "\"b\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[4,12]}}", 12,
		      "tensor 'b' data_offsets [4, 12] at byte 118: overlaps 'a' by 4 bytes"));
	/* A zero-size tensor may share an offset, but not sit inside another. */
	CHECK(rejects("{\"a\":{\"dtype\":\"U8\",\"shape\":[8],\"data_offsets\":[0,8]},"
		      "\"z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,4]}}", 8,
		      "tensor 'z' data_offsets [4, 4] at byte 117: overlaps 'a' by 4 bytes"));
}

static void test_reject_end_before_begin(void)
{
	CHECK(rejects("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
		      "\"c\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}}", 4,
		      "tensor 'c' data_offsets [4, 0] at byte 117: end is before begin"));
}

static void test_reject_size_mismatch(void)
{
	/* The example from the design notes, word for word. */
	CHECK(rejects("{\"layers.0.wq\":{\"dtype\":\"BF16\",\"shape\":[8,8],"
		      "\"data_offsets\":[0,100]}}", 100,
		      "t.safetensors: tensor 'layers.0.wq' data_offsets [0, 100] at byte 77: "
		      "expected 128 bytes (shape [8, 8], BF16), got 100"));
}

static void test_reject_sub_byte_fraction(void)
{
	CHECK(rejects("{\"q\":{\"dtype\":\"F4\",\"shape\":[3],\"data_offsets\":[0,2]}}", 2,
		      "tensor 'q' shape [3], F4: not a whole number of bytes"));
}

static void test_reject_data_short(void)
{
	CHECK(rejects("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 12,
		      "tensor 'a' ends at byte 79, past the end of the file at byte 75"));
}

static void test_reject_trailing_bytes(void)
{
	CHECK(rejects("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 11,
		      "3 bytes after the last tensor's data, from byte 70 to the end of the file"));
	CHECK(rejects("{}", 1, "1 bytes after the last tensor's data"));
}

static void test_reject_bad_metadata(void)
{
	CHECK(rejects("{\"__metadata__\":{\"k\":1}}", 0, "'__metadata__' key 'k' is not a string"));
	CHECK(rejects("{\"__metadata__\":[\"k\"]}", 0, "'__metadata__' is not an object"));
	CHECK(rejects("{\"__metadata__\":{\"k\":{\"x\":\"y\"}}}", 0, "is not a string"));
}

/* The file reader applies the same rules, to the file's size. */
static void test_fd_reader_rejects(void)
{
	static unsigned char b[256];
	const char *hdr = "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]}}";
	size_t len = mkfile(b, strlen(hdr), hdr, 3);
	FILE *tf = tmpfile();
	struct st_file f;
	struct err e = { 0 };
	int fd[2];

	CHECK(tf && fwrite(b, 1, len, tf) == len && fflush(tf) == 0);
	if (!tf)
		return;
	CHECK(st_read_fd(&f, "x.safetensors", fileno(tf), &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "x.safetensors: 1 bytes after the last tensor's data") != NULL);
	CHECK(ftruncate(fileno(tf), 5) == 0);
	CHECK(st_read_fd(&f, "x.safetensors", fileno(tf), &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "file is 5 bytes") != NULL);
	fclose(tf);
	CHECK(pipe(fd) == 0);
	CHECK(st_read_fd(&f, "p", fd[0], &e) == NR_EINPUT);
	CHECK(strstr(e.msg, "p: not a regular file") != NULL);
	close(fd[0]);
	close(fd[1]);
}

int main(void)
{
	RUN(test_dtype_table);
	RUN(test_roundtrip);
	RUN(test_reference_bytes);
	RUN(test_writer_rejects);
	RUN(test_zero_size_share_offset);
	RUN(test_scalar_is_one_element);
	RUN(test_header_order_is_free);
	RUN(test_metadata_null_or_strings);
	RUN(test_sub_byte_whole_bytes);
	RUN(test_reject_file_too_short);
	RUN(test_reject_header_too_large);
	RUN(test_reject_header_past_end);
	RUN(test_reject_invalid_utf8);
	RUN(test_reject_invalid_json);
	RUN(test_reject_bad_entry);
	RUN(test_reject_unknown_dtype);
	RUN(test_reject_shape_overflow);
	RUN(test_reject_not_from_zero);
	RUN(test_reject_gap);
	RUN(test_reject_overlap);
	RUN(test_reject_end_before_begin);
	RUN(test_reject_size_mismatch);
	RUN(test_reject_sub_byte_fraction);
	RUN(test_reject_data_short);
	RUN(test_reject_trailing_bytes);
	RUN(test_reject_bad_metadata);
	RUN(test_fd_reader_rejects);
	return UNIT_END();
}
