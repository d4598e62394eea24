/* Growing arrays: the one doubling realloc every module's lists share. */
#ifndef NEREUS_MEM_H
#define NEREUS_MEM_H

#include <stddef.h>

/* Make room for need elements of size bytes in the array *pp (a pointer to
 * the array pointer) of *cap elements, doubling from 16.  Never shrinks.
 * Returns 0, or -1 with *pp and *cap as they were when memory runs out or
 * need * size would not fit a size_t. */
int mem_grow(void *pp, size_t *cap, size_t need, size_t size);

#endif
