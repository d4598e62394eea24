/* The benchmark helpers every figure of nereus-profile bench relies on:
 * the random fill that keeps copies honest and the median and spread. */
#include <stdint.h>
#include <string.h>

#include "profile/hwbench.h"
#include "unit.h"

/* Every length, word-aligned or not: no zero byte, nothing written past
 * the end, the same bytes for the same seed. */
static void test_fill_has_no_zero_byte_and_stays_in_bounds(void)
{
	unsigned char a[80], b[80];

	for (size_t len = 0; len <= 67; len++) {
		for (uint64_t seed = 0; seed < 64; seed++) {
			memset(a, 0, sizeof a);
			memset(b, 0, sizeof b);
			hw_fill_random(a + 1, len, seed);
			hw_fill_random(b + 1, len, seed);
			CHECK(a[0] == 0 && a[len + 1] == 0);
			CHECK(memcmp(a, b, sizeof a) == 0);
			for (size_t i = 1; i <= len; i++)
				CHECK(a[i] != 0);
		}
	}
}

/* The bytes look random: seeds differ, and a large fill uses every byte
 * value but zero about equally (zero's draws go to 0xA5). */
static void test_fill_is_spread(void)
{
	static unsigned char a[1 << 16], b[1 << 16];
	long count[256] = { 0 };
	long n = (long)sizeof a, expect = n / 256;

	hw_fill_random(a, sizeof a, 1);
	hw_fill_random(b, sizeof b, 2);
	CHECK(memcmp(a, b, sizeof a) != 0);
	for (long i = 0; i < n; i++)
		count[a[i]]++;
	CHECK(count[0] == 0);
	for (int c = 1; c < 256; c++)
		if (c != 0xA5)
			CHECK(count[c] > expect / 2 && count[c] < 2 * expect);
	CHECK(count[0xA5] > expect * 3 / 2 && count[0xA5] < 3 * expect);
}

static void test_stats_median_and_spread(void)
{
	double s[] = { 5, 1, 4, 2, 3 }, m, sp;

	hw_stats(s, 5, &m, &sp);
	CHECK(m == 3);
	/* p90 = 4.6, p10 = 1.4, interpolated between neighbours */
	CHECK_NEAR(sp, (4.6 - 1.4) / 3, 1e-12);
	hw_stats(s, 0, &m, &sp);
	CHECK(m == 0 && sp == 0);
}

int main(void)
{
	RUN(test_fill_has_no_zero_byte_and_stays_in_bounds);
	RUN(test_fill_is_spread);
	RUN(test_stats_median_and_spread);
	return UNIT_END();
}
