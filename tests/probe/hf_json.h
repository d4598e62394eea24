/* One rank's buffer of a model held whole (TP1·PP1) as JSON, tensor by
 * Hugging Face name, each row-major in Hugging Face's shape: what the
 * probes hand to the PyTorch references (tests/torch), which know the
 * models only by those names. */
#ifndef NEREUS_PROBE_HF_JSON_H
#define NEREUS_PROBE_HF_JSON_H

#include <jansson.h>
#include <stdlib.h>

#include "state/layout.h"
#include "state/store.h"

/* Append box b of global tensor t, whose data is whole, to arr in
 * row-major order. */
static void hf_json_walk(const struct gtensor *t, const struct box *b, const float *whole,
			 json_t *arr)
{
	int64_t idx[BOX_MAXDIM] = { 0 }, vol = box_volume(b);

	for (int64_t i = 0; i < vol; i++) {
		int64_t g = 0;

		for (int k = 0; k < t->ndim; k++)
			g = g * t->shape[k] + b->off[k] + idx[k];
		json_array_append_new(arr, json_real(whole[g]));
		for (int k = t->ndim - 1; k >= 0; k--) {
			if (++idx[k] < b->ext[k])
				break;
			idx[k] = 0;
		}
	}
}

/* buf: the weights (or gradients) of layout lo's rank 0, laid out as
 * its KIND_WEIGHT pieces; NULL when the pieces cannot be listed. */
static json_t *hf_json(const struct layout *lo, const float *buf)
{
	struct piece *p;
	size_t np;
	struct err e = { 0 };
	json_t *out;

	if (layout_pieces(lo, KIND_WEIGHT, 0, 0, 0, &p, &np, &e))
		return NULL;
	out = json_object();
	for (int id = 0; id < hf_ntensors(&lo->arch); id++) {
		char name[128];
		struct box b;
		uint64_t shape[BOX_MAXDIM];
		int k, ndim;
		const float *whole = NULL;
		json_t *arr = json_array();

		hf_tensor(&lo->arch, id, name, sizeof name, &k, &b, &ndim, shape);
		for (size_t i = 0; i < np; i++)
			if (p[i].tensor == k)
				whole = buf + p[i].local_off;
		hf_json_walk(&lo->tensors[k], &b, whole, arr);
		json_object_set_new(out, name, arr);
	}
	free(p);
	return out;
}

#endif
