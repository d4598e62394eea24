/* safetensors: header parsing and validation, and the writer.
 * The rules are listed in safetensors.h; each check below cites the one it
 * enforces by what its message says. */
#include "state/safetensors.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/out.h"

static const struct {
	const char *name;
	int bits;
} dtypes[ST_NDTYPES] = {
	[ST_BOOL] = { "BOOL", 8 },       [ST_F4] = { "F4", 4 },
	[ST_F6_E2M3] = { "F6_E2M3", 6 }, [ST_F6_E3M2] = { "F6_E3M2", 6 },
	[ST_U8] = { "U8", 8 },           [ST_I8] = { "I8", 8 },
	[ST_F8_E5M2] = { "F8_E5M2", 8 }, [ST_F8_E4M3] = { "F8_E4M3", 8 },
	[ST_F8_E8M0] = { "F8_E8M0", 8 }, [ST_I16] = { "I16", 16 },
	[ST_U16] = { "U16", 16 },        [ST_F16] = { "F16", 16 },
	[ST_BF16] = { "BF16", 16 },      [ST_I32] = { "I32", 32 },
	[ST_U32] = { "U32", 32 },        [ST_F32] = { "F32", 32 },
	[ST_C64] = { "C64", 64 },        [ST_F64] = { "F64", 64 },
	[ST_I64] = { "I64", 64 },        [ST_U64] = { "U64", 64 },
};

static const char META_KEY[] = "__metadata__";

const char *st_dtype_name(enum st_dtype t)
{
	return dtypes[t].name;
}

int st_dtype_bits(enum st_dtype t)
{
	return dtypes[t].bits;
}

int st_dtype_parse(const char *name)
{
	for (int t = 0; t < ST_NDTYPES; t++)
		if (strcmp(dtypes[t].name, name) == 0)
			return t;
	return -1;
}

uint64_t st_numel(const struct st_tensor *t)
{
	uint64_t n = 1;

	for (int d = 0; d < t->ndim; d++)
		n *= t->shape[d];
	return n;
}

const struct st_tensor *st_find(const struct st_file *f, const char *name)
{
	for (size_t i = 0; i < f->ntensors; i++)
		if (strcmp(f->tensors[i].name, name) == 0)
			return &f->tensors[i];
	return NULL;
}

void st_file_free(struct st_file *f)
{
	free(f->arena);
	memset(f, 0, sizeof *f);
}

/* Bytes of numel elements of dtype t.  Returns false on overflow, or when a
 * sub-byte dtype does not fill a whole number of bytes (*whole false). */
static bool tensor_bytes(enum st_dtype t, const uint64_t *shape, int ndim,
			 uint64_t *bytes, bool *whole)
{
	uint64_t n = 1, bits = (uint64_t)dtypes[t].bits;

	*whole = true;
	for (int d = 0; d < ndim; d++)
		if (__builtin_mul_overflow(n, shape[d], &n))
			return false;
	if (bits % 8 == 0)
		return !__builtin_mul_overflow(n, bits / 8, bytes);
	if (__builtin_mul_overflow(n, bits, &n))
		return false;
	*whole = n % 8 == 0;
	*bytes = n / 8;
	return *whole;
}

/* "[8, 8]", shortened to end in "...]" when it does not fit in n > 4 bytes. */
static void fmt_shape(char *out, size_t n, const uint64_t *shape, int ndim)
{
	size_t k = (size_t)snprintf(out, n, "[");

	for (int d = 0; d < ndim && k < n; d++)
		k += (size_t)snprintf(out + k, n - k, "%s%" PRIu64, d ? ", " : "", shape[d]);
	if (k < n)
		k += (size_t)snprintf(out + k, n - k, "]");
	if (k >= n)
		memcpy(out + n - 5, "...]", 5);
}

/* --- reading ---------------------------------------------------------------- */

/* Offset of the first byte that does not start a valid UTF-8 sequence
 * (overlong forms, surrogates and code points above U+10FFFF included), or
 * n when all of s is valid. */
static size_t utf8_invalid_at(const unsigned char *s, size_t n)
{
	size_t i = 0;

	while (i < n) {
		unsigned c = s[i], cp, min;
		size_t k;

		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf)
			k = 1, cp = c & 0x1f, min = 0x80;
		else if ((c & 0xf0) == 0xe0)
			k = 2, cp = c & 0x0f, min = 0x800;
		else if (c >= 0xf0 && c <= 0xf4)
			k = 3, cp = c & 0x07, min = 0x10000;
		else
			return i;
		if (n - i <= k)
			return i;
		for (size_t j = 1; j <= k; j++) {
			if ((s[i + j] & 0xc0) != 0x80)
				return i;
			cp = cp << 6 | (s[i + j] & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return i;
		i += k + 1;
	}
	return n;
}

/* The checks on the 8-byte prefix: the file holds it, and N fits. */
static int check_prefix(const char *name, const unsigned char *p, uint64_t size,
			uint64_t *n, struct err *e)
{
	uint64_t v = 0;

	if (size < 8)
		return err_set(e, NR_EINPUT,
			       "%s: file is %" PRIu64 " bytes, too short for the 8-byte header length",
			       name, size);
	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	if (v > ST_MAX_HEADER)
		return err_set(e, NR_EINPUT,
			       "%s: header length %" PRIu64 " at byte 0 exceeds the limit of %u bytes",
			       name, v, ST_MAX_HEADER);
	if (v > size - 8)
		return err_set(e, NR_EINPUT,
			       "%s: header length %" PRIu64 " at byte 0 runs past the end of the "
			       "file (%" PRIu64 " bytes)", name, v, size);
	*n = v;
	return NR_OK;
}

static bool is_count(json_t *v)
{
	return json_is_integer(v) && json_integer_value(v) >= 0;
}

/* Check one tensor entry's form (not yet its offsets). */
static int check_entry(const char *file, const char *tname, json_t *v, struct err *e)
{
	json_t *dt, *shape, *offs, *x;
	const char *key;
	size_t i;

	if (!json_is_object(v))
		return err_set(e, NR_EINPUT, "%s: tensor '%s': entry is not an object", file, tname);
	json_object_foreach(v, key, x)
		if (strcmp(key, "dtype") && strcmp(key, "shape") && strcmp(key, "data_offsets"))
			return err_set(e, NR_EINPUT, "%s: tensor '%s': unknown key '%s'",
				       file, tname, key);
	dt = json_object_get(v, "dtype");
	shape = json_object_get(v, "shape");
	offs = json_object_get(v, "data_offsets");
	if (!dt || !shape || !offs)
		return err_set(e, NR_EINPUT, "%s: tensor '%s': missing '%s'", file, tname,
			       !dt ? "dtype" : !shape ? "shape" : "data_offsets");
	if (!json_is_string(dt))
		return err_set(e, NR_EINPUT, "%s: tensor '%s': dtype is not a string", file, tname);
	if (st_dtype_parse(json_string_value(dt)) < 0)
		return err_set(e, NR_EINPUT, "%s: tensor '%s': unknown dtype '%s'", file, tname,
			       json_string_value(dt));
	if (!json_is_array(shape) || json_array_size(shape) > INT_MAX)
		return err_set(e, NR_EINPUT, "%s: tensor '%s': shape is not an array", file, tname);
	json_array_foreach(shape, i, x)
		if (!is_count(x))
			return err_set(e, NR_EINPUT,
				       "%s: tensor '%s': shape[%zu] is not a non-negative integer",
				       file, tname, i);
	if (!json_is_array(offs) || json_array_size(offs) != 2 ||
	    !is_count(json_array_get(offs, 0)) || !is_count(json_array_get(offs, 1)))
		return err_set(e, NR_EINPUT,
			       "%s: tensor '%s': data_offsets is not [begin, end] of non-negative integers",
			       file, tname);
	return NR_OK;
}

/* Check "__metadata__": null, or an object whose values are strings. */
static int check_meta(const char *file, json_t *v, struct err *e)
{
	const char *key;
	json_t *x;

	if (json_is_null(v))
		return NR_OK;
	if (!json_is_object(v))
		return err_set(e, NR_EINPUT, "%s: '%s' is not an object", file, META_KEY);
	json_object_foreach(v, key, x)
		if (!json_is_string(x))
			return err_set(e, NR_EINPUT, "%s: '%s' key '%s' is not a string",
				       file, META_KEY, key);
	return NR_OK;
}

static int by_offsets(const void *pa, const void *pb)
{
	const struct st_tensor *a = pa, *b = pb;

	if (a->begin != b->begin)
		return a->begin < b->begin ? -1 : 1;
	if (a->end != b->end)
		return a->end < b->end ? -1 : 1;
	return strcmp(a->name, b->name);
}

/* Copy the checked header into one allocation: the tensor and metadata
 * arrays, then the shapes, then the strings. */
static int build(struct st_file *f, json_t *root, struct err *e)
{
	size_t nt = 0, nm = 0, nshape = 0, nstr = 0, i;
	json_t *v, *meta = NULL, *x;
	const char *key, *mkey;
	uint64_t *shapes;
	char *str;

	json_object_foreach(root, key, v) {
		if (strcmp(key, META_KEY) == 0) {
			meta = json_is_object(v) ? v : NULL;
			continue;
		}
		nt++;
		nshape += json_array_size(json_object_get(v, "shape"));
		nstr += strlen(key) + 1;
	}
	if (meta)
		json_object_foreach(meta, mkey, x) {
			nm++;
			nstr += strlen(mkey) + strlen(json_string_value(x)) + 2;
		}
	f->arena = malloc(nt * sizeof *f->tensors + nm * sizeof *f->meta +
			  nshape * sizeof *shapes + nstr + 1);
	if (!f->arena)
		return err_oom(e);
	f->tensors = f->arena;
	f->meta = (struct st_meta *)(f->tensors + nt);
	shapes = (uint64_t *)(f->meta + nm);
	str = (char *)(shapes + nshape);

	json_object_foreach(root, key, v) {
		struct st_tensor *t;
		json_t *shape;

		if (strcmp(key, META_KEY) == 0)
			continue;
		t = &f->tensors[f->ntensors++];
		shape = json_object_get(v, "shape");
		t->name = strcpy(str, key);
		str += strlen(key) + 1;
		t->dtype = (enum st_dtype)st_dtype_parse(json_string_value(json_object_get(v, "dtype")));
		t->ndim = (int)json_array_size(shape);
		t->shape = shapes;
		json_array_foreach(shape, i, x)
			*shapes++ = (uint64_t)json_integer_value(x);
		x = json_object_get(v, "data_offsets");
		t->begin = (uint64_t)json_integer_value(json_array_get(x, 0));
		t->end = (uint64_t)json_integer_value(json_array_get(x, 1));
	}
	if (meta)
		json_object_foreach(meta, mkey, x) {
			struct st_meta *m = &f->meta[f->nmeta++];

			m->key = strcpy(str, mkey);
			str += strlen(mkey) + 1;
			m->value = strcpy(str, json_string_value(x));
			str += strlen(m->value) + 1;
		}
	return NR_OK;
}

/* Sorted by (begin, end), the tensors must tile the data buffer from 0
 * without gap or overlap, each exactly as long as its shape and dtype say,
 * and the last must end where the file ends. */
static int check_offsets(const struct st_file *f, const char *file, struct err *e)
{
	uint64_t at = 0;
	const char *prev = NULL;

	for (size_t i = 0; i < f->ntensors; i++) {
		const struct st_tensor *t = &f->tensors[i];
		uint64_t bytes, pos = f->data_start + t->begin;
		char shape[128];
		bool whole;

		fmt_shape(shape, sizeof shape, t->shape, t->ndim);
		if (t->begin > at)
			return err_set(e, NR_EINPUT,
				       "%s: tensor '%s' data_offsets [%" PRIu64 ", %" PRIu64 "] at byte "
				       "%" PRIu64 ": leaves a gap of %" PRIu64 " bytes after %s%s%s",
				       file, t->name, t->begin, t->end, pos, t->begin - at,
				       prev ? "'" : "the start of the data", prev ? prev : "",
				       prev ? "'" : "");
		if (t->begin < at)
			return err_set(e, NR_EINPUT,
				       "%s: tensor '%s' data_offsets [%" PRIu64 ", %" PRIu64 "] at byte "
				       "%" PRIu64 ": overlaps '%s' by %" PRIu64 " bytes",
				       file, t->name, t->begin, t->end, pos, prev, at - t->begin);
		if (t->end < t->begin)
			return err_set(e, NR_EINPUT,
				       "%s: tensor '%s' data_offsets [%" PRIu64 ", %" PRIu64 "] at byte "
				       "%" PRIu64 ": end is before begin",
				       file, t->name, t->begin, t->end, pos);
		if (!tensor_bytes(t->dtype, t->shape, t->ndim, &bytes, &whole))
			return err_set(e, NR_EINPUT,
				       whole ? "%s: tensor '%s' shape %s, %s: size overflows 64 bits"
					     : "%s: tensor '%s' shape %s, %s: not a whole number of bytes",
				       file, t->name, shape, dtypes[t->dtype].name);
		if (t->end - t->begin != bytes)
			return err_set(e, NR_EINPUT,
				       "%s: tensor '%s' data_offsets [%" PRIu64 ", %" PRIu64 "] at byte "
				       "%" PRIu64 ": expected %" PRIu64 " bytes (shape %s, %s), got %" PRIu64,
				       file, t->name, t->begin, t->end, pos, bytes, shape,
				       dtypes[t->dtype].name, t->end - t->begin);
		at = t->end;
		prev = t->name;
	}
	if (at > f->data_len)
		return err_set(e, NR_EINPUT,
			       "%s: tensor '%s' ends at byte %" PRIu64 ", past the end of the file "
			       "at byte %" PRIu64, file, prev, f->data_start + at,
			       f->data_start + f->data_len);
	if (at < f->data_len)
		return err_set(e, NR_EINPUT,
			       "%s: %" PRIu64 " bytes after the last tensor's data, from byte %" PRIu64
			       " to the end of the file", file, f->data_len - at, f->data_start + at);
	return NR_OK;
}

/* Parse the N header bytes hdr of a file of size bytes. */
static int parse_header(struct st_file *f, const char *file, const char *hdr, uint64_t n,
			uint64_t size, struct err *e)
{
	size_t bad = utf8_invalid_at((const unsigned char *)hdr, (size_t)n);
	json_error_t je;
	json_t *root, *v;
	const char *key;
	int rc;

	memset(f, 0, sizeof *f);
	if (bad < n)
		return err_set(e, NR_EINPUT, "%s: header is not valid UTF-8 at byte %zu", file,
			       8 + bad);
	root = json_loadb(hdr, (size_t)n, JSON_REJECT_DUPLICATES, &je);
	if (!root)
		return err_set(e, NR_EINPUT, "%s: header is not valid JSON at byte %d: %s", file,
			       8 + je.position, je.text);
	if (!json_is_object(root)) {
		json_decref(root);
		return err_set(e, NR_EINPUT, "%s: header is not a JSON object", file);
	}
	json_object_foreach(root, key, v) {
		rc = strcmp(key, META_KEY) == 0 ? check_meta(file, v, e)
						: check_entry(file, key, v, e);
		if (rc) {
			json_decref(root);
			return rc;
		}
	}
	f->header_len = n;
	f->data_start = 8 + n;
	f->data_len = size - 8 - n;
	rc = build(f, root, e);
	json_decref(root);
	if (rc == NR_OK) {
		qsort(f->tensors, f->ntensors, sizeof *f->tensors, by_offsets);
		rc = check_offsets(f, file, e);
	}
	if (rc)
		st_file_free(f);
	return rc;
}

int st_read_buf(struct st_file *f, const char *name, const void *buf, size_t len,
		struct err *e)
{
	uint64_t n;
	int rc;

	memset(f, 0, sizeof *f);
	rc = check_prefix(name, buf, len, &n, e);
	if (rc)
		return rc;
	return parse_header(f, name, (const char *)buf + 8, n, len, e);
}

/* Read exactly len bytes at off, or fail naming the file. */
static int pread_all(int fd, const char *name, void *buf, size_t len, off_t off,
		     struct err *e)
{
	char *p = buf;

	while (len > 0) {
		ssize_t r = pread(fd, p, len, off);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return err_set(e, NR_EIO, "%s: cannot read at byte %lld: %s", name,
				       (long long)off, r < 0 ? strerror(errno) : "unexpected end of file");
		p += r;
		off += r;
		len -= (size_t)r;
	}
	return NR_OK;
}

int st_read_fd(struct st_file *f, const char *name, int fd, struct err *e)
{
	unsigned char prefix[8];
	struct stat sb;
	uint64_t n, size;
	char *hdr;
	int rc;

	memset(f, 0, sizeof *f);
	if (fstat(fd, &sb) != 0)
		return err_set(e, NR_EIO, "%s: cannot stat: %s", name, strerror(errno));
	if (!S_ISREG(sb.st_mode))
		return err_set(e, NR_EINPUT, "%s: not a regular file", name);
	size = (uint64_t)sb.st_size;
	if (size >= 8 && (rc = pread_all(fd, name, prefix, 8, 0, e)))
		return rc;
	rc = check_prefix(name, prefix, size, &n, e);
	if (rc)
		return rc;
	hdr = malloc(n ? n : 1);
	if (!hdr)
		return err_oom(e);
	rc = pread_all(fd, name, hdr, (size_t)n, 8, e);
	if (rc == NR_OK)
		rc = parse_header(f, name, hdr, n, size, e);
	free(hdr);
	return rc;
}

/* --- writing ---------------------------------------------------------------- */

/* Check descriptor i and give its data size. */
static int desc_bytes(const struct st_desc *t, size_t i, uint64_t *bytes, struct err *e)
{
	const struct st_desc *d = &t[i];
	bool whole;

	if (!d->name)
		return err_set(e, NR_EINPUT, "tensor %zu has no name", i);
	if ((unsigned)d->dtype >= ST_NDTYPES)
		return err_set(e, NR_EINPUT, "tensor '%s': unknown dtype %d", d->name, (int)d->dtype);
	if (d->ndim < 0 || (d->ndim > 0 && !d->shape))
		return err_set(e, NR_EINPUT, "tensor '%s': no shape", d->name);
	for (int k = 0; k < d->ndim; k++)
		if (d->shape[k] > INT64_MAX)
			return err_set(e, NR_EINPUT, "tensor '%s': shape[%d] exceeds 2^63 - 1",
				       d->name, k);
	if (!tensor_bytes(d->dtype, d->shape, d->ndim, bytes, &whole)) {
		char shape[128];

		fmt_shape(shape, sizeof shape, d->shape, d->ndim);
		return err_set(e, NR_EINPUT, whole ? "tensor '%s' shape %s, %s: size overflows 64 bits"
						   : "tensor '%s' shape %s, %s: not a whole number of bytes",
			       d->name, shape, dtypes[d->dtype].name);
	}
	return NR_OK;
}

static int add_tensor(json_t *root, const struct st_desc *d, uint64_t begin, uint64_t end,
		      struct err *e)
{
	json_t *shape = json_array(), *ent;

	for (int k = 0; k < d->ndim; k++)
		json_array_append_new(shape, json_integer((json_int_t)d->shape[k]));
	ent = json_pack("{s:s, s:o, s:[I, I]}", "dtype", dtypes[d->dtype].name, "shape", shape,
			"data_offsets", (json_int_t)begin, (json_int_t)end);
	if (!ent)
		return err_oom(e);
	if (json_object_set_new(root, d->name, ent) != 0)
		return err_set(e, NR_EINPUT, "tensor name '%s' is not valid UTF-8", d->name);
	return NR_OK;
}

static int add_meta(json_t *root, const struct st_meta *meta, size_t nmeta, struct err *e)
{
	json_t *m = json_object();

	json_object_set_new(root, META_KEY, m);
	for (size_t i = 0; i < nmeta; i++) {
		json_t *v = json_string(meta[i].value);

		if (json_object_get(m, meta[i].key)) {
			json_decref(v);
			return err_set(e, NR_EINPUT, "'%s' key '%s' given twice", META_KEY, meta[i].key);
		}
		if (!v || json_object_set_new(m, meta[i].key, v) != 0)
			return err_set(e, NR_EINPUT, "'%s' key '%s' or its value is not valid UTF-8",
				       META_KEY, meta[i].key);
	}
	return NR_OK;
}

int st_header_build(const struct st_desc *t, size_t n, const struct st_meta *meta,
		    size_t nmeta, char **out, size_t *outlen, uint64_t *data_len,
		    struct err *e)
{
	json_t *root = json_object();
	uint64_t off = 0, len;
	char *s = NULL, *buf;
	int rc = NR_OK;
	size_t slen;

	if (!root)
		return err_oom(e);
	if (nmeta)
		rc = add_meta(root, meta, nmeta, e);
	for (size_t i = 0; i < n && rc == NR_OK; i++) {
		uint64_t bytes;

		rc = desc_bytes(t, i, &bytes, e);
		if (rc)
			break;
		if (strcmp(t[i].name, META_KEY) == 0 || json_object_get(root, t[i].name))
			rc = err_set(e, NR_EINPUT, "tensor name '%s' %s", t[i].name,
				     strcmp(t[i].name, META_KEY) ? "given twice" : "is reserved");
		else if (bytes > INT64_MAX - off)
			rc = err_set(e, NR_EINPUT, "tensor '%s': data exceed 2^63 - 1 bytes", t[i].name);
		else
			rc = add_tensor(root, &t[i], off, off + bytes, e);
		off += bytes;
	}
	if (rc == NR_OK && !(s = json_dumps(root, JSON_COMPACT)))
		rc = err_oom(e);
	json_decref(root);
	if (rc)
		return rc;
	slen = strlen(s);
	len = (slen + 7) / 8 * 8;
	if (len > ST_MAX_HEADER) {
		free(s);
		return err_set(e, NR_EINPUT, "header of %" PRIu64 " bytes exceeds the limit of %u",
			       len, ST_MAX_HEADER);
	}
	buf = malloc(8 + len);
	if (!buf) {
		free(s);
		return err_oom(e);
	}
	for (int i = 0; i < 8; i++)
		buf[i] = (char)(len >> (8 * i) & 0xff);
	memcpy(buf + 8, s, slen);
	memset(buf + 8 + slen, ' ', len - slen);
	free(s);
	*out = buf;
	*outlen = 8 + len;
	*data_len = off;
	return NR_OK;
}

static int write_all(int fd, const char *name, const void *buf, size_t len, struct err *e)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t w = write(fd, p, len);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return err_set(e, NR_EIO, "%s: cannot write: %s", name, strerror(errno));
		p += w;
		len -= (size_t)w;
	}
	return NR_OK;
}

#define FILL_CHUNK (1u << 20)

/* Stream tensor i's bytes through a bounded buffer filled by the caller. */
static int write_filled(int fd, const char *name, const struct st_desc *d, size_t i,
			uint64_t bytes, st_fill_fn fill, void *ctx, char *chunk, struct err *e)
{
	for (uint64_t off = 0; off < bytes;) {
		size_t len = bytes - off < FILL_CHUNK ? (size_t)(bytes - off) : FILL_CHUNK;
		int rc = fill(ctx, i, off, chunk, len, e);

		if (rc)
			return err_prefix(e, "%s: tensor '%s'", name, d->name);
		rc = write_all(fd, name, chunk, len, e);
		if (rc)
			return rc;
		off += len;
	}
	return NR_OK;
}

int st_write_fd(int fd, const char *name, const struct st_desc *t, size_t n,
		const struct st_meta *meta, size_t nmeta, st_fill_fn fill, void *ctx,
		struct err *e)
{
	char *hdr, *chunk = NULL;
	size_t hlen;
	uint64_t total;
	int rc = st_header_build(t, n, meta, nmeta, &hdr, &hlen, &total, e);

	if (rc)
		return err_prefix(e, "%s", name);
	rc = write_all(fd, name, hdr, hlen, e);
	free(hdr);
	for (size_t i = 0; i < n && rc == NR_OK; i++) {
		uint64_t bytes;

		desc_bytes(t, i, &bytes, e); /* checked by st_header_build */
		if (bytes == 0)
			continue;
		if (t[i].data)
			rc = write_all(fd, name, t[i].data, (size_t)bytes, e);
		else if (!fill)
			rc = err_set(e, NR_EINPUT, "%s: tensor '%s' has no data and no fill callback",
				     name, t[i].name);
		else if (!chunk && !(chunk = malloc(FILL_CHUNK)))
			rc = err_oom(e);
		else
			rc = write_filled(fd, name, &t[i], i, bytes, fill, ctx, chunk, e);
	}
	free(chunk);
	return rc;
}

int st_write_file(const char *path, const struct st_desc *t, size_t n,
		  const struct st_meta *meta, size_t nmeta, st_fill_fn fill, void *ctx,
		  struct err *e)
{
	struct outfile o;
	int rc = out_open(&o, path, e);

	if (rc)
		return rc;
	rc = st_write_fd(o.fd, path, t, n, meta, nmeta, fill, ctx, e);
	if (rc) {
		out_abort(&o);
		return rc;
	}
	return out_commit(&o, e);
}

/* --- element conversions ------------------------------------------------------- */


static float from_half(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
	uint32_t bits;
	float f;

	if (exp == 0x1f) {
		bits = sign | 0x7f800000u | (man << 13);
	} else if (exp) {
		bits = sign | ((exp + 112) << 23) | (man << 13);
	} else {
		f = (float)man / 16777216.0f; /* subnormal: man · 2^-24 */
		return sign ? -f : f;
	}
	memcpy(&f, &bits, sizeof f);
	return f;
}

static uint16_t to_half(float f)
{
	uint32_t x, sign, man;
	int exp;

	memcpy(&x, &f, sizeof x);
	sign = (x >> 16) & 0x8000;
	exp = (int)((x >> 23) & 0xff) - 127 + 15;
	man = x & 0x7fffff;
	if (((x >> 23) & 0xff) == 0xff)
		return (uint16_t)(sign | 0x7c00 | (man ? 0x200 : 0));
	if (exp >= 0x1f)
		return (uint16_t)(sign | 0x7c00);
	if (exp <= 0) {
		/* subnormal or zero: round the shifted mantissa to nearest even */
		uint32_t m = man | 0x800000, shift = (uint32_t)(14 - exp), half, r;

		if (shift > 24)
			return (uint16_t)sign;
		half = 1u << (shift - 1);
		r = m >> shift;
		if ((m & ((1u << shift) - 1)) > half || ((m & ((1u << shift) - 1)) == half && (r & 1)))
			r++;
		return (uint16_t)(sign | r);
	}
	{
		uint32_t r = ((uint32_t)exp << 10) | (man >> 13), rest = man & 0x1fff;

		if (rest > 0x1000 || (rest == 0x1000 && (r & 1)))
			r++; /* may carry into the exponent, up to infinity: correct */
		return (uint16_t)(sign | r);
	}
}

static uint16_t to_bf16(float f)
{
	uint32_t x;

	memcpy(&x, &f, sizeof x);
	if ((x & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((x >> 16) | 0x40); /* a NaN stays a NaN */
	x += 0x7fff + ((x >> 16) & 1);       /* round to nearest even */
	return (uint16_t)(x >> 16);
}

void st_widen(float *dst, const void *src, size_t n, enum st_dtype t)
{
	const uint16_t *h = src;

	if (t == ST_F32) {
		memcpy(dst, src, n * sizeof *dst);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		if (t == ST_BF16) {
			uint32_t bits = (uint32_t)h[i] << 16;

			memcpy(&dst[i], &bits, sizeof dst[i]);
		} else {
			dst[i] = from_half(h[i]);
		}
	}
}

void st_narrow(void *dst, const float *src, size_t n, enum st_dtype t)
{
	uint16_t *h = dst;

	if (t == ST_F32) {
		memcpy(dst, src, n * sizeof *src);
		return;
	}
	for (size_t i = 0; i < n; i++)
		h[i] = t == ST_BF16 ? to_bf16(src[i]) : to_half(src[i]);
}

void st_round(float *x, size_t n, enum st_dtype t)
{
	uint16_t h;

	for (size_t i = 0; i < n && t != ST_F32; i++) {
		st_narrow(&h, &x[i], 1, t);
		st_widen(&x[i], &h, 1, t);
	}
}
