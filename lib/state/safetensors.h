/* safetensors: a strict header reader and a streaming writer.
 *
 * A file is a little-endian u64 header length N, N bytes of UTF-8 JSON, then
 * the data buffer (little-endian, row-major).  The header maps each tensor
 * name to {"dtype", "shape", "data_offsets": [begin, end]} with offsets
 * relative to the data buffer, plus an optional "__metadata__" object of
 * strings.  The reader only parses and checks the header: it returns where
 * each tensor's bytes are and never reads the data, so shards larger than
 * memory are fine.
 *
 * It rejects everything the reference implementation (huggingface/safetensors)
 * rejects: a file under 8 bytes; N over 100,000,000; a header running past
 * the end of the file; a header that is not UTF-8 or not a JSON object; an
 * unknown dtype; a shape whose element or byte count overflows 64 bits;
 * offsets that, sorted by (begin, end), do not start at 0 and follow each
 * other without gap or overlap; end - begin other than the size the shape and
 * dtype give; a sub-byte dtype whose tensor is not a whole number of bytes;
 * and a data buffer that ends before or after the last tensor.  Zero-size
 * tensors may share an offset; shape [] is one element.
 *
 * Stricter than the reference, because a Nereus state store must not carry
 * a header two readers could read differently: duplicate keys, keys other
 * than dtype/shape/data_offsets in a tensor entry, NUL characters in
 * strings, and shape or offset values above 2^63 - 1 are rejected.  An
 * "__metadata__" of null is read as no metadata, as the reference does.
 *
 * Messages name the file, the tensor and the byte offset in the file. */
#ifndef NEREUS_SAFETENSORS_H
#define NEREUS_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define ST_MAX_HEADER 100000000u /* the reference's limit on N */

/* In the reference's order. */
enum st_dtype {
	ST_BOOL, ST_F4, ST_F6_E2M3, ST_F6_E3M2, ST_U8, ST_I8, ST_F8_E5M2,
	ST_F8_E4M3, ST_F8_E8M0, ST_I16, ST_U16, ST_F16, ST_BF16, ST_I32, ST_U32,
	ST_F32, ST_C64, ST_F64, ST_I64, ST_U64,
	ST_NDTYPES
};

/* The name the header spells the dtype with ("BF16"). */
const char *st_dtype_name(enum st_dtype t);
/* Bits per element: 4 and 6 for the sub-byte floats, else 8 × bytes. */
int st_dtype_bits(enum st_dtype t);
/* The dtype named name, or -1. */
int st_dtype_parse(const char *name);

struct st_tensor {
	const char *name;
	enum st_dtype dtype;
	int ndim;
	const uint64_t *shape;   /* ndim entries */
	uint64_t begin, end;     /* data_offsets: bytes from the data buffer's start */
};

struct st_meta {
	const char *key, *value;
};

struct st_file {
	uint64_t header_len;     /* N */
	uint64_t data_start;     /* file offset of the data buffer: 8 + N */
	uint64_t data_len;       /* bytes in the data buffer */
	size_t ntensors;
	struct st_tensor *tensors; /* sorted by (begin, end), then name */
	size_t nmeta;
	struct st_meta *meta;    /* "__metadata__" in header order */
	void *arena;             /* names, shapes and metadata strings live here */
};

/* Parse the header of a whole file held in buf[0..len).  name is used in
 * messages.  NR_OK, or NR_EINPUT with f left empty. */
int st_read_buf(struct st_file *f, const char *name, const void *buf, size_t len,
		struct err *e);
/* The same reading only the header from fd (a regular file; its size is the
 * file's size).  NR_EIO on a read failure. */
int st_read_fd(struct st_file *f, const char *name, int fd, struct err *e);
void st_file_free(struct st_file *f);

/* The tensor called name, or NULL. */
const struct st_tensor *st_find(const struct st_file *f, const char *name);
/* Elements of a tensor (1 for shape []); a parsed header never overflows. */
uint64_t st_numel(const struct st_tensor *t);

/* --- writing --------------------------------------------------------------- */

/* One tensor to write.  Data go in the order of the descriptors; putting
 * wider dtypes first keeps every tensor aligned to its element size, as
 * the reference writer does. */
struct st_desc {
	const char *name;
	enum st_dtype dtype;
	int ndim;
	const uint64_t *shape;
	const void *data;        /* its bytes, or NULL to ask the fill callback */
};

/* Put len bytes of tensor i, starting at byte off of its data, into buf.
 * Returns NR_OK or an error class with e set. */
typedef int (*st_fill_fn)(void *ctx, size_t i, uint64_t off, void *buf, size_t len,
			  struct err *e);

/* Build the 8-byte length and the header (compact JSON, "__metadata__"
 * first, padded with spaces to a multiple of 8) into a malloc'd *out of
 * *outlen bytes; *data_len gets the data buffer's size.  NR_EINPUT for a
 * descriptor the format cannot hold (bad UTF-8 name, duplicate, overflow). */
int st_header_build(const struct st_desc *t, size_t n, const struct st_meta *meta,
		    size_t nmeta, char **out, size_t *outlen, uint64_t *data_len,
		    struct err *e);
/* Write a whole file to fd: header, then each tensor's data from desc.data
 * or from fill.  name is used in messages. */
int st_write_fd(int fd, const char *name, const struct st_desc *t, size_t n,
		const struct st_meta *meta, size_t nmeta, st_fill_fn fill, void *ctx,
		struct err *e);
/* The same to path, as out.h writes every output (a new or regular file
 * through a temporary beside it, synced and renamed). */
int st_write_file(const char *path, const struct st_desc *t, size_t n,
		  const struct st_meta *meta, size_t nmeta, st_fill_fn fill, void *ctx,
		  struct err *e);

/* --- element conversions (t one of ST_BF16, ST_F16, ST_F32) ---------------- */

/* n elements of dtype t at src as fp32 at dst: exact. */
void st_widen(float *dst, const void *src, size_t n, enum st_dtype t);
/* n fp32 elements at src as dtype t at dst, rounded to nearest even (a
 * NaN stays a NaN, overflow gives infinity). */
void st_narrow(void *dst, const float *src, size_t n, enum st_dtype t);
/* Each of n elements at x rounded to the nearest value of dtype t. */
void st_round(float *x, size_t n, enum st_dtype t);

#endif
