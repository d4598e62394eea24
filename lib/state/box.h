/* Boxes: the one resharding primitive.
 *
 * Every piece of distributed state is a box (per-dimension offset and
 * extent) of a named global tensor.  Whether a rank has what another needs,
 * and which elements move, is the intersection of two boxes; moving them is
 * a copy of that intersection between two row-major buffers, one innermost
 * run at a time.  This follows PyTorch distributed checkpoint's load planner:
 * two boxes overlap unless in some dimension one ends at or before the other
 * starts, and the overlap's length in each dimension is
 * min(ends) - max(offsets). */
#ifndef NEREUS_BOX_H
#define NEREUS_BOX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BOX_MAXDIM 4

/* Elements [off[d], off[d] + ext[d]) in every dimension d < ndim of a
 * global tensor.  ndim 0 is a scalar (one element). */
struct box {
	int ndim;
	int64_t off[BOX_MAXDIM];
	int64_t ext[BOX_MAXDIM];
};

/* Elements in b: the product of its extents (1 when ndim is 0). */
int64_t box_volume(const struct box *b);

/* Whether a and b share an element; if so and out is not NULL, *out is the
 * shared box.  A box with a zero extent overlaps nothing, and boxes of
 * different ndim (different tensors) never overlap. */
bool box_intersect(const struct box *a, const struct box *b, struct box *out);

/* Whether every element of inner lies in outer (same ndim required). */
bool box_contains(const struct box *outer, const struct box *inner);
/* Whether a and b are the same box (same rank, offsets and extents). */
bool box_eq(const struct box *a, const struct box *b);

/* Copy the elements of region from src, a row-major buffer holding the
 * elements of src_box of a global tensor, into dst, a row-major buffer
 * holding dst_box of the same tensor.  region must lie in both boxes (the
 * result of box_intersect does).  Dimensions that region, src_box and
 * dst_box all span in full are merged, so each memcpy moves the longest run
 * contiguous in both buffers. */
void box_copy(void *dst, const struct box *dst_box, const void *src,
	      const struct box *src_box, const struct box *region, size_t elem_size);

#endif
