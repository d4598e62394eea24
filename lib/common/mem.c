/* Growing arrays (mem.h). */
#include "common/mem.h"

#include <stdint.h>
#include <stdlib.h>

int mem_grow(void *pp, size_t *cap, size_t need, size_t size)
{
	void **p = pp;
	size_t most = size ? SIZE_MAX / size : SIZE_MAX;
	size_t n = *cap ? *cap : 16;
	void *q;

	if (need <= *cap)
		return 0;
	if (need > most)
		return -1;
	/* past half the most that fits, doubling would overflow: take need */
	while (n < need)
		n = n > most / 2 ? need : n * 2;
	q = realloc(*p, n * size);
	if (!q)
		return -1;
	*p = q;
	*cap = n;
	return 0;
}
