/* libFuzzer target: the safetensors header reader on arbitrary bytes.
 *
 * Beyond not crashing, a file the reader accepts must satisfy the rules it
 * claims to enforce (tensors tile the data buffer from 0 to the end of the
 * file), and writing its header back with st_header_build must give a file
 * the reader parses to the same tensors at the same offsets. */
#include "state/safetensors.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_rewrite(const struct st_file *f, const uint8_t *data)
{
	struct st_desc *d = calloc(f->ntensors + 1, sizeof *d);
	struct st_file g;
	struct err e = { 0 };
	uint64_t data_len;
	size_t hlen;
	char *hdr, *file;

	for (size_t i = 0; i < f->ntensors; i++) {
		d[i].name = f->tensors[i].name;
		d[i].dtype = f->tensors[i].dtype;
		d[i].ndim = f->tensors[i].ndim;
		d[i].shape = f->tensors[i].shape;
	}
	if (st_header_build(d, f->ntensors, f->meta, f->nmeta, &hdr, &hlen, &data_len, &e))
		abort();
	if (data_len != f->data_len)
		abort();
	file = malloc(hlen + data_len + 1);
	memcpy(file, hdr, hlen);
	memcpy(file + hlen, data + f->data_start, (size_t)data_len);
	if (st_read_buf(&g, "rewritten", file, hlen + (size_t)data_len, &e))
		abort();
	if (g.ntensors != f->ntensors || g.nmeta != f->nmeta || (g.header_len & 7))
		abort();
	for (size_t i = 0; i < g.ntensors; i++) {
		const struct st_tensor *a = &f->tensors[i], *b = &g.tensors[i];

		if (strcmp(a->name, b->name) || a->dtype != b->dtype || a->ndim != b->ndim ||
		    a->begin != b->begin || a->end != b->end ||
		    (a->ndim && memcmp(a->shape, b->shape, (size_t)a->ndim * sizeof *a->shape)))
			abort();
	}
	for (size_t i = 0; i < g.nmeta; i++)
		if (strcmp(f->meta[i].key, g.meta[i].key) || strcmp(f->meta[i].value, g.meta[i].value))
			abort();
	st_file_free(&g);
	free(file);
	free(hdr);
	free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct st_file f;
	struct err e = { 0 };
	uint64_t at = 0;

	if (st_read_buf(&f, "fuzz", data, size, &e) != NR_OK) {
		if (e.code != NR_EINPUT || e.msg[0] == '\0')
			abort();
		return 0;
	}
	for (size_t i = 0; i < f.ntensors; i++) {
		if (f.tensors[i].begin != at || f.tensors[i].end < f.tensors[i].begin)
			abort();
		at = f.tensors[i].end;
	}
	if (f.data_start != 8 + f.header_len || f.data_start + at != size || at != f.data_len)
		abort();
	check_rewrite(&f, data);
	st_file_free(&f);
	return 0;
}
