/* Box intersection invariants and box_copy between random tilings. */
#include "state/box.h"
#include "unit.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* splitmix64: a fixed seed makes every run check the same cases. */
static uint64_t rng_state;

static uint64_t rng(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static int64_t rng_below(int64_t n)
{
	return (int64_t)(rng() % (uint64_t)n);
}

static struct box box2(int64_t r, int64_t c, int64_t nr, int64_t nc)
{
	struct box b = { .ndim = 2, .off = { r, c }, .ext = { nr, nc } };

	return b;
}

static bool point_in(const struct box *b, const int64_t *x)
{
	for (int d = 0; d < b->ndim; d++)
		if (x[d] < b->off[d] || x[d] >= b->off[d] + b->ext[d])
			return false;
	return true;
}

static void test_volume(void)
{
	struct box s = { .ndim = 0 };
	struct box b = { .ndim = 3, .off = { 1, 2, 3 }, .ext = { 2, 3, 4 } };
	struct box z = box2(0, 0, 5, 0);

	CHECK(box_volume(&s) == 1);
	CHECK(box_volume(&b) == 24);
	CHECK(box_volume(&z) == 0);
}

static void test_intersect_example(void)
{
	struct box a = box2(0, 0, 4, 6), b = box2(2, 3, 5, 5), r;

	CHECK(box_intersect(&a, &b, &r));
	CHECK(r.ndim == 2 && r.off[0] == 2 && r.off[1] == 3 && r.ext[0] == 2 && r.ext[1] == 3);
	CHECK(box_intersect(&a, &b, NULL));
}

static void test_intersect_touching_and_disjoint(void)
{
	struct box a = box2(0, 0, 4, 4);
	struct box right = box2(0, 4, 4, 4), below = box2(4, 0, 4, 4);
	struct box corner = box2(4, 4, 1, 1), far = box2(10, 10, 2, 2);
	struct box r = box2(7, 7, 7, 7);
	struct box before = r;

	CHECK(!box_intersect(&a, &right, &r));
	CHECK(!box_intersect(&right, &a, &r));
	CHECK(!box_intersect(&a, &below, &r));
	CHECK(!box_intersect(&a, &corner, &r));
	CHECK(!box_intersect(&a, &far, &r));
	/* A miss leaves *out alone. */
	CHECK(box_eq(&r, &before));
}

static void test_intersect_empty_and_mismatched(void)
{
	struct box a = box2(0, 0, 4, 4), empty = box2(1, 1, 0, 2);
	struct box line = { .ndim = 1, .off = { 0 }, .ext = { 4 } };
	struct box s0 = { .ndim = 0 }, s1 = { .ndim = 0 };

	CHECK(!box_intersect(&a, &empty, NULL));
	CHECK(!box_intersect(&empty, &a, NULL));
	CHECK(!box_intersect(&a, &line, NULL));
	CHECK(box_intersect(&s0, &s1, NULL));
}

static void test_contains(void)
{
	struct box a = box2(0, 0, 4, 4);
	struct box in = box2(1, 1, 3, 3), out = box2(1, 1, 4, 3);

	CHECK(box_contains(&a, &a));
	CHECK(box_contains(&a, &in));
	CHECK(!box_contains(&a, &out));
	CHECK(!box_contains(&in, &a));
}

/* Equal boxes are the same rank, offsets and extents; a box of one rank
 * never equals one of another, even where their used extents agree. */
static void test_eq(void)
{
	struct box a = box2(1, 2, 3, 4), line = { .ndim = 1, .off = { 1 }, .ext = { 3 } };

	CHECK(box_eq(&a, &a));
	CHECK(!box_eq(&a, &(struct box){ .ndim = 2, .off = { 1, 3 }, .ext = { 3, 4 } }));
	CHECK(!box_eq(&a, &(struct box){ .ndim = 2, .off = { 1, 2 }, .ext = { 3, 5 } }));
	CHECK(!box_eq(&a, &line));
	CHECK(box_eq(&line, &(struct box){ .ndim = 1, .off = { 1, 9 }, .ext = { 3, 9 } }));
}

static struct box random_box(int nd, int64_t space)
{
	struct box b = { .ndim = nd };

	for (int d = 0; d < nd; d++) {
		b.off[d] = rng_below(space);
		b.ext[d] = rng_below(space - b.off[d] + 1);
	}
	return b;
}

/* Random pairs in a small space: the intersection is commutative, lies in
 * both boxes, and holds exactly the points in both (counted one by one). */
static void test_intersect_random(void)
{
	rng_state = 1;
	for (int it = 0; it < 2000; it++) {
		int nd = 1 + (int)rng_below(3);
		const int64_t space = 6;
		struct box a = random_box(nd, space), b = random_box(nd, space), ab, ba;
		bool hit = box_intersect(&a, &b, &ab);
		int64_t both = 0, x[BOX_MAXDIM] = { 0 };

		CHECK(hit == box_intersect(&b, &a, &ba));
		if (hit) {
			CHECK(box_eq(&ab, &ba));
			CHECK(box_contains(&a, &ab) && box_contains(&b, &ab));
			CHECK(box_volume(&ab) > 0);
		}
		for (;;) {
			int d;

			both += point_in(&a, x) && point_in(&b, x);
			for (d = nd - 1; d >= 0; d--) {
				if (++x[d] < space)
					break;
				x[d] = 0;
			}
			if (d < 0)
				break;
		}
		CHECK(both == (hit ? box_volume(&ab) : 0));
	}
}

static void test_copy_example(void)
{
	/* src holds rows 0..3, cols 0..3 of a 4x4 tensor with value 10r+c;
	 * dst holds rows 1..2, cols 2..4; region rows 1..2, cols 2..3. */
	int32_t src[16], dst[6];
	struct box sb = box2(0, 0, 4, 4), db = box2(1, 2, 2, 3), region;

	for (int i = 0; i < 16; i++)
		src[i] = 10 * (i / 4) + i % 4;
	for (int i = 0; i < 6; i++)
		dst[i] = -1;
	CHECK(box_intersect(&sb, &db, &region));
	box_copy(dst, &db, src, &sb, &region, sizeof src[0]);
	CHECK(dst[0] == 12 && dst[1] == 13 && dst[2] == -1);
	CHECK(dst[3] == 22 && dst[4] == 23 && dst[5] == -1);
}

static void test_copy_scalar(void)
{
	struct box s = { .ndim = 0 };
	double a = 3.5, b = 0;

	box_copy(&b, &s, &a, &s, &s, sizeof a);
	CHECK(b == 3.5);
}

/* --- property: random tiling to random tiling ---------------------------- */

#define MAX_TILES 64

struct tiling {
	int n;
	struct box tile[MAX_TILES];
	unsigned char *buf[MAX_TILES];
};

/* Guillotine cuts: split b in a random dimension at a random point, and
 * recurse on both halves, so tilings are not just grids. */
static void tile(struct tiling *t, struct box b, int depth)
{
	int d = (int)rng_below(b.ndim);

	if (depth == 0 || b.ext[d] < 2 || t->n + 2 > MAX_TILES || rng_below(4) == 0) {
		t->tile[t->n++] = b;
		return;
	}
	struct box lo = b, hi = b;
	int64_t cut = 1 + rng_below(b.ext[d] - 1);

	lo.ext[d] = cut;
	hi.off[d] += cut;
	hi.ext[d] -= cut;
	tile(t, lo, depth - 1);
	tile(t, hi, depth - 1);
}

/* Row-major index of global point x inside box b. */
static int64_t local_index(const struct box *b, const int64_t *x)
{
	int64_t i = 0;

	for (int d = 0; d < b->ndim; d++)
		i = i * b->ext[d] + (x[d] - b->off[d]);
	return i;
}

/* Visit every point of the global tensor in row-major order, moving one
 * element between the global buffer and the tile that holds it: the
 * reference gather/scatter, written without box_copy. */
static void move_all(struct tiling *t, const struct box *whole, unsigned char *global,
		     size_t es, bool to_tiles)
{
	int64_t x[BOX_MAXDIM] = { 0 }, g = 0;

	for (;;) {
		int k, d;

		for (k = 0; k < t->n; k++)
			if (point_in(&t->tile[k], x))
				break;
		unsigned char *p = t->buf[k] + (size_t)local_index(&t->tile[k], x) * es;
		if (to_tiles)
			memcpy(p, global + (size_t)g * es, es);
		else
			memcpy(global + (size_t)g * es, p, es);
		g++;
		for (d = whole->ndim - 1; d >= 0; d--) {
			if (++x[d] < whole->ext[d])
				break;
			x[d] = 0;
		}
		if (d < 0)
			return;
	}
}

static void tiling_alloc(struct tiling *t, size_t es)
{
	for (int k = 0; k < t->n; k++) {
		size_t bytes = (size_t)box_volume(&t->tile[k]) * es;

		t->buf[k] = malloc(bytes ? bytes : 1);
		memset(t->buf[k], 0xa5, bytes);
	}
}

static void tiling_free(struct tiling *t)
{
	for (int k = 0; k < t->n; k++)
		free(t->buf[k]);
}

static void test_copy_random_tilings(void)
{
	static const size_t sizes[] = { 1, 2, 4, 8, 3 };

	rng_state = 42;
	for (int it = 0; it < 300; it++) {
		struct box whole = { .ndim = 1 + (int)rng_below(BOX_MAXDIM) };
		struct tiling a = { 0 }, b = { 0 };
		size_t es = sizes[rng_below(5)], n;
		int64_t vol, covered = 0;
		unsigned char *global, *back;

		for (int d = 0; d < whole.ndim; d++)
			whole.ext[d] = 1 + rng_below(whole.ndim > 2 ? 5 : 12);
		vol = box_volume(&whole);
		n = (size_t)vol * es;
		global = malloc(n);
		back = malloc(n);
		for (size_t i = 0; i < n; i++)
			global[i] = (unsigned char)rng();
		memset(back, 0, n);
		tile(&a, whole, 6);
		tile(&b, whole, 6);
		tiling_alloc(&a, es);
		tiling_alloc(&b, es);
		move_all(&a, &whole, global, es, true);

		for (int j = 0; j < b.n; j++)
			for (int i = 0; i < a.n; i++) {
				struct box r;

				if (!box_intersect(&b.tile[j], &a.tile[i], &r))
					continue;
				covered += box_volume(&r);
				box_copy(b.buf[j], &b.tile[j], a.buf[i], &a.tile[i], &r, es);
			}
		CHECK(covered == vol);
		move_all(&b, &whole, back, es, false);
		CHECK(memcmp(global, back, n) == 0);
		tiling_free(&a);
		tiling_free(&b);
		free(global);
		free(back);
	}
}

int main(void)
{
	RUN(test_volume);
	RUN(test_intersect_example);
	RUN(test_intersect_touching_and_disjoint);
	RUN(test_intersect_empty_and_mismatched);
	RUN(test_contains);
	RUN(test_eq);
	RUN(test_intersect_random);
	RUN(test_copy_example);
	RUN(test_copy_scalar);
	RUN(test_copy_random_tilings);
	return UNIT_END();
}
