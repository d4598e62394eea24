/* The memo (run/memo.h): a value found under its key and not under
 * another, the least recently used dropped first, whether the count or
 * the budget of key bytes is what is passed, and a claimed slot left
 * without a key holding nothing. */
#include "run/memo.h"
#include "unit.h"

#include <stdlib.h>
#include <string.h>

/* Remember value under the key text (len bytes of it); the slot's index. */
static int put(struct memo *m, const char *text, size_t len, int value)
{
	unsigned char *key = malloc(len);
	int i = memo_claim(m, len);

	if (!key || i < 0) {
		free(key);
		return -1;
	}
	memcpy(key, text, len);
	*(int *)memo_val(m, i) = value;
	memo_keep(m, i, key, len);
	return i;
}

/* The value under text, or -1. */
static int get(struct memo *m, const char *text)
{
	const int *v = memo_find(m, text, strlen(text));

	return v ? *v : -1;
}

static void test_hit_and_miss(void)
{
	struct memo m;

	memo_init(&m, 4, 0, sizeof(int));
	CHECK(get(&m, "a") == -1);
	CHECK(put(&m, "a", 1, 10) >= 0);
	CHECK(put(&m, "ab", 2, 20) >= 0);
	CHECK(get(&m, "a") == 10);
	CHECK(get(&m, "ab") == 20);
	CHECK(get(&m, "b") == -1);
	CHECK(memo_find(&m, "abc", 2) != NULL); /* the key is its bytes, not a string */
	CHECK(get(&m, "abc") == -1);
	memo_free(&m);
	CHECK(get(&m, "a") == -1);
	memo_free(&m);
}

/* At the count, the least recently used goes: finding one makes it the
 * most recent, so the one found least lately is the one replaced. */
static void test_lru_by_count(void)
{
	struct memo m;

	memo_init(&m, 3, 0, sizeof(int));
	put(&m, "a", 1, 1);
	put(&m, "b", 1, 2);
	put(&m, "c", 1, 3);
	CHECK(get(&m, "a") == 1); /* b is now the least recently used */
	put(&m, "d", 1, 4);
	CHECK(m.n == 3);
	CHECK(get(&m, "b") == -1);
	CHECK(get(&m, "c") == 3); /* a is now the least recently used */
	put(&m, "e", 1, 5);
	CHECK(get(&m, "a") == -1);
	CHECK(get(&m, "c") == 3);
	CHECK(get(&m, "d") == 4);
	CHECK(get(&m, "e") == 5);
	memo_free(&m);
}

/* Under a budget of key bytes, the least recently used go until the new
 * key fits, however many slots are left. */
static void test_lru_by_bytes(void)
{
	struct memo m;

	memo_init(&m, 100, 10, sizeof(int));
	put(&m, "aaaa", 4, 1);
	put(&m, "bbbb", 4, 2);
	CHECK(m.bytes == 8);
	CHECK(get(&m, "aaaa") == 1);   /* bbbb is the least recently used */
	put(&m, "cc", 2, 3);           /* 10 bytes: all fit */
	CHECK(m.n == 3 && m.bytes == 10);
	put(&m, "d", 1, 4);            /* 11: bbbb goes */
	CHECK(m.n == 3 && m.bytes == 7);
	CHECK(get(&m, "bbbb") == -1);
	CHECK(get(&m, "aaaa") == 1 && get(&m, "cc") == 3 && get(&m, "d") == 4);
	put(&m, "eeeeeeee", 8, 5);     /* 15: aaaa and cc go, the two oldest */
	CHECK(m.n == 2 && m.bytes == 9);
	CHECK(get(&m, "aaaa") == -1 && get(&m, "cc") == -1);
	CHECK(get(&m, "d") == 4 && get(&m, "eeeeeeee") == 5);
	memo_free(&m);
}

/* A slot claimed and never kept holds nothing, and is the one claimed
 * next: a failed making of a value takes no room and leaves no key. */
static void test_claim_unkept(void)
{
	struct memo m;
	int i, j;

	memo_init(&m, 2, 0, sizeof(int));
	put(&m, "a", 1, 1);
	i = memo_claim(&m, 1);
	CHECK(i == 1 && m.n == 1);
	j = memo_claim(&m, 1);
	CHECK(j == i);
	put(&m, "b", 1, 2);
	i = memo_claim(&m, 1); /* full: a, the least recently used, is emptied */
	CHECK(i == 0);
	CHECK(get(&m, "a") == -1 && get(&m, "b") == 2);
	CHECK(memo_claim(&m, 1) == i); /* still the least recently used */
	memo_free(&m);
}

int main(void)
{
	RUN(test_hit_and_miss);
	RUN(test_lru_by_count);
	RUN(test_lru_by_bytes);
	RUN(test_claim_unkept);
	return UNIT_END();
}
