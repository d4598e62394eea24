/* Growing arrays (mem.h): doubling room, never less, and a need whose
 * bytes do not fit a size_t refused before anything is allocated. */
#include "common/mem.h"
#include "unit.h"

#include <stdint.h>
#include <stdlib.h>

static void test_growth(void)
{
	int *v = NULL;
	size_t cap = 0;

	CHECK(mem_grow(&v, &cap, 1, sizeof *v) == 0 && v && cap >= 1);
	for (int i = 0; i < 1000; i++) {
		CHECK(mem_grow(&v, &cap, (size_t)i + 1, sizeof *v) == 0 && cap >= (size_t)i + 1);
		v[i] = i;
	}
	CHECK(v[999] == 999 && v[0] == 0);
	/* doubling: the room is less than twice what was asked */
	CHECK(cap < 2000);
	free(v);
}

static void test_no_shrink(void)
{
	double *v = NULL;
	size_t cap = 0;
	double *was;

	CHECK(mem_grow(&v, &cap, 100, sizeof *v) == 0 && cap >= 100);
	was = v;
	size_t had = cap;
	CHECK(mem_grow(&v, &cap, 3, sizeof *v) == 0 && cap == had && v == was);
	CHECK(mem_grow(&v, &cap, 0, sizeof *v) == 0 && cap == had && v == was);
	free(v);
}

static void test_overflow(void)
{
	char *v = NULL;
	size_t cap = 0;

	CHECK(mem_grow(&v, &cap, SIZE_MAX / 8 + 1, 8) == -1 && !v && cap == 0);
	CHECK(mem_grow(&v, &cap, 4, 8) == 0 && v && cap >= 4);
	char *was = v;
	size_t had = cap;
	CHECK(mem_grow(&v, &cap, SIZE_MAX / 2, 4) == -1 && v == was && cap == had);
	free(v);
}

int main(void)
{
	RUN(test_growth);
	RUN(test_no_shrink);
	RUN(test_overflow);
	return UNIT_END();
}
