/* A small memo with least-recently-used eviction (memo.h). */
#include "run/memo.h"

#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

void memo_init(struct memo *m, int max, size_t max_bytes, size_t vsize)
{
	memset(m, 0, sizeof *m);
	m->max = max;
	m->max_bytes = max_bytes;
	m->vsize = vsize;
}

void memo_free(struct memo *m)
{
	for (int i = 0; i < m->n; i++)
		free(m->slot[i].key);
	free(m->slot);
	free(m->vals);
	memo_init(m, m->max, m->max_bytes, m->vsize);
}

void *memo_val(const struct memo *m, int i)
{
	return m->vals + (size_t)i * m->vsize;
}

void *memo_find(struct memo *m, const void *key, size_t len)
{
	uint64_t hash = XXH3_64bits(key, len);

	for (int i = 0; i < m->n; i++) {
		struct memo_slot *s = &m->slot[i];
		if (s->key && s->hash == hash && s->len == len && memcmp(s->key, key, len) == 0) {
			s->used = ++m->clock;
			return memo_val(m, i);
		}
	}
	return NULL;
}

/* The index of the least recently used slot (there is one). */
static int oldest(const struct memo *m)
{
	int old = 0;

	for (int i = 1; i < m->n; i++)
		if (m->slot[i].used < m->slot[old].used)
			old = i;
	return old;
}

static void drop(struct memo *m, int i)
{
	m->bytes -= m->slot[i].len;
	free(m->slot[i].key);
	m->slot[i].key = NULL;
	m->slot[i].len = 0;
}

/* Forget the least recently used until the keys fit the budget with room
 * for len bytes more; the last slot moves into each one forgotten. */
static void trim(struct memo *m, size_t len)
{
	while (m->max_bytes && m->n > 0 && m->bytes + len > m->max_bytes) {
		int old = oldest(m);
		drop(m, old);
		m->n--;
		m->slot[old] = m->slot[m->n];
		memcpy(memo_val(m, old), memo_val(m, m->n), m->vsize);
	}
}

/* Room for one more slot than are held: doubling from 16, never past max. */
static int room(struct memo *m)
{
	struct memo_slot *ns;
	unsigned char *nv;
	int cap;

	if (m->n < m->cap)
		return 0;
	cap = m->cap ? 2 * m->cap : 16;
	if (cap > m->max)
		cap = m->max;
	if (!(ns = realloc(m->slot, (size_t)cap * sizeof *ns)))
		return -1;
	m->slot = ns;
	if (!(nv = realloc(m->vals, (size_t)cap * m->vsize)))
		return -1;
	m->vals = nv;
	m->cap = cap;
	return 0;
}

int memo_claim(struct memo *m, size_t len)
{
	int i;

	trim(m, len);
	if (m->n < m->max) {
		if (room(m) < 0)
			return -1;
		i = m->n;
		memset(&m->slot[i], 0, sizeof m->slot[i]);
		memset(memo_val(m, i), 0, m->vsize);
		return i;
	}
	i = oldest(m);
	drop(m, i);
	return i;
}

void memo_keep(struct memo *m, int i, unsigned char *key, size_t len)
{
	struct memo_slot *s = &m->slot[i];

	s->key = key;
	s->len = len;
	s->hash = XXH3_64bits(key, len);
	s->used = ++m->clock;
	m->bytes += len;
	if (i == m->n)
		m->n++;
}
