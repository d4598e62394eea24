/* Box intersection, containment and the strided copy between two boxes. */
#include "state/box.h"

#include <string.h>

int64_t box_volume(const struct box *b)
{
	int64_t v = 1;

	for (int d = 0; d < b->ndim; d++)
		v *= b->ext[d];
	return v;
}

bool box_intersect(const struct box *a, const struct box *b, struct box *out)
{
	struct box r = { .ndim = a->ndim };

	if (a->ndim != b->ndim)
		return false;
	for (int d = 0; d < a->ndim; d++) {
		int64_t lo = a->off[d] > b->off[d] ? a->off[d] : b->off[d];
		int64_t ea = a->off[d] + a->ext[d], eb = b->off[d] + b->ext[d];
		int64_t hi = ea < eb ? ea : eb;

		/* One ends at or before the other starts. */
		if (hi <= lo)
			return false;
		r.off[d] = lo;
		r.ext[d] = hi - lo;
	}
	if (out)
		*out = r;
	return true;
}

bool box_contains(const struct box *outer, const struct box *inner)
{
	if (outer->ndim != inner->ndim)
		return false;
	for (int d = 0; d < outer->ndim; d++)
		if (inner->off[d] < outer->off[d] ||
		    inner->off[d] + inner->ext[d] > outer->off[d] + outer->ext[d])
			return false;
	return true;
}

/* Whether dimension d of region spans both boxes in full, so that stepping
 * the dimension above it continues the same contiguous run in both. */
static bool spans_both(const struct box *region, const struct box *a,
		       const struct box *b, int d)
{
	return region->ext[d] == a->ext[d] && region->ext[d] == b->ext[d];
}

void box_copy(void *dst, const struct box *dst_box, const void *src,
	      const struct box *src_box, const struct box *region, size_t elem_size)
{
	int nd = region->ndim, c, d;
	int64_t sstride[BOX_MAXDIM], dstride[BOX_MAXDIM], idx[BOX_MAXDIM] = { 0 };
	int64_t s = 1, t = 1, run;
	unsigned char *out = dst;
	const unsigned char *in = src;

	if (box_volume(region) == 0)
		return;
	if (nd == 0) {
		memcpy(out, in, elem_size);
		return;
	}
	for (d = nd - 1; d >= 0; d--) {
		sstride[d] = s;
		dstride[d] = t;
		s *= src_box->ext[d];
		t *= dst_box->ext[d];
	}
	/* The run covers dimensions c..nd-1; the odometer steps 0..c-1. */
	c = nd - 1;
	run = region->ext[c];
	while (c > 0 && spans_both(region, src_box, dst_box, c)) {
		c--;
		run *= region->ext[c];
	}
	for (;;) {
		int64_t so = 0, doff = 0;

		for (d = 0; d < nd; d++) {
			int64_t x = region->off[d] + (d < c ? idx[d] : 0);

			so += (x - src_box->off[d]) * sstride[d];
			doff += (x - dst_box->off[d]) * dstride[d];
		}
		memcpy(out + (size_t)doff * elem_size, in + (size_t)so * elem_size,
		       (size_t)run * elem_size);
		for (d = c - 1; d >= 0; d--) {
			if (++idx[d] < region->ext[d])
				break;
			idx[d] = 0;
		}
		if (d < 0)
			return;
	}
}

bool box_eq(const struct box *a, const struct box *b)
{
	if (a->ndim != b->ndim)
		return false;
	for (int d = 0; d < a->ndim; d++)
		if (a->off[d] != b->off[d] || a->ext[d] != b->ext[d])
			return false;
	return true;
}
