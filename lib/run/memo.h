/* A small memo: up to a fixed number of values of one size, each under a
 * key of bytes, the least recently used going first when the count or,
 * if one is set, a budget of key bytes would be passed.
 *
 * Finding is memo_find.  Remembering takes two calls, so that a value can
 * be made in its slot: memo_claim makes room and gives the slot (with no
 * key, so a failed making leaves nothing behind), memo_keep gives it the
 * key.  Slots are allocated as they are first claimed, 16 and doubling,
 * never more than max; a value stays where it is until its slot is claimed
 * again, a byte budget drops another, or the slots grow (with max at most
 * 16, they never do after the first claim). */
#ifndef NEREUS_MEMO_H
#define NEREUS_MEMO_H

#include <stddef.h>
#include <stdint.h>

struct memo_slot {
	unsigned char *key;  /* NULL: empty */
	size_t len;
	uint64_t hash;       /* of the key, looked at first */
	long used;
};

struct memo {
	int max;             /* slots at most */
	size_t max_bytes;    /* of the keys held; 0: no budget */
	size_t vsize;
	struct memo_slot *slot;
	unsigned char *vals; /* vsize bytes per slot */
	int n, cap;
	size_t bytes;
	long clock;
};

void memo_init(struct memo *m, int max, size_t max_bytes, size_t vsize);
void memo_free(struct memo *m);

/* The value under key, now the most recently used; NULL when none. */
void *memo_find(struct memo *m, const void *key, size_t len);
/* Room for a key of len bytes: a new slot while fewer than max are held,
 * else the least recently used one's, emptied; when a byte budget is set,
 * the least recently used go first until the keys fit it with len more.
 * The slot's index, or -1 when out of memory. */
int memo_claim(struct memo *m, size_t len);
/* Slot i, claimed, now holds key (taken over, from malloc) as the most
 * recently used. */
void memo_keep(struct memo *m, int i, unsigned char *key, size_t len);
void *memo_val(const struct memo *m, int i);

#endif
