/* libFuzzer target: the state store's manifest reader on arbitrary bytes.
 *
 * Beyond not crashing, a refusal must be a located NR_EINPUT, and a
 * manifest it accepts must keep what the reader promises: every piece is
 * a non-empty box inside its tensor, and writing the manifest back and
 * reading that again gives the same document. */
#include "state/store.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char *dump(const struct manifest *m)
{
	json_t *doc = manifest_to_json(m);
	char *s = doc ? json_dumps(doc, JSON_COMPACT) : NULL;

	json_decref(doc);
	if (!s)
		abort();
	return s;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct manifest m, again;
	struct err e = { 0 };
	char *a, *b;

	if (manifest_parse(&m, "fuzz", (const char *)data, size, &e) != NR_OK) {
		if (e.code != NR_EINPUT || strncmp(e.msg, "fuzz:", 5) != 0)
			abort();
		return 0;
	}
	for (size_t i = 0; i < m.npieces; i++) {
		const struct mpiece *p = &m.pieces[i];
		const struct gtensor *t = &m.models[p->model].layout.tensors[p->tensor];

		if (p->box.ndim != t->ndim || box_volume(&p->box) < 1)
			abort();
		for (int d = 0; d < t->ndim; d++)
			if (p->box.off[d] < 0 || p->box.off[d] + p->box.ext[d] > t->shape[d])
				abort();
	}
	a = dump(&m);
	if (manifest_parse(&again, "again", a, strlen(a), &e) != NR_OK)
		abort();
	b = dump(&again);
	if (strcmp(a, b) != 0)
		abort();
	free(a);
	free(b);
	manifest_free(&again);
	manifest_free(&m);
	return 0;
}
