/* The counter-based generator: a pure function of its five counters,
 * each of which changes the draw, with uniform and normal draws of the
 * right moments. */
#include "engine/rng.h"
#include "unit.h"

static void test_pure_function(void)
{
	uint64_t a = rng_u64(1, RNG_SAMPLE, 2, 3, 4);

	CHECK(rng_u64(1, RNG_SAMPLE, 2, 3, 4) == a);
	CHECK(rng_u64(2, RNG_SAMPLE, 2, 3, 4) != a);
	CHECK(rng_u64(1, RNG_INIT, 2, 3, 4) != a);
	CHECK(rng_u64(1, RNG_SAMPLE, 3, 3, 4) != a);
	CHECK(rng_u64(1, RNG_SAMPLE, 2, 4, 4) != a);
	CHECK(rng_u64(1, RNG_SAMPLE, 2, 3, 5) != a);
	/* counters do not trade places */
	CHECK(rng_u64(1, RNG_SAMPLE, 3, 2, 4) != a);
}

static void test_moments(void)
{
	enum { N = 200000 };
	double s = 0, s2 = 0, n1 = 0, n2 = 0, n4 = 0, lo = 1, hi = 0;

	for (int i = 0; i < N; i++) {
		double u = rng_uniform(9, RNG_SAMPLE, 0, (uint64_t)i % 7, (uint64_t)i);
		double z = rng_normal(9, RNG_INIT, 0, 0, (uint64_t)i);

		CHECK(u >= 0 && u < 1);
		lo = u < lo ? u : lo;
		hi = u > hi ? u : hi;
		s += u;
		s2 += u * u;
		n1 += z;
		n2 += z * z;
		n4 += z * z * z * z;
	}
	/* bounds: several standard errors */
	CHECK(fabs(s / N - 0.5) < 0.005);
	CHECK(fabs(s2 / N - 1.0 / 3) < 0.005);
	CHECK(lo < 1e-4 && hi > 1 - 1e-4);
	CHECK(fabs(n1 / N) < 0.01);
	CHECK(fabs(n2 / N - 1) < 0.02);
	CHECK(fabs(n4 / N - 3) < 0.1);
}

int main(void)
{
	RUN(test_pure_function);
	RUN(test_moments);
	return UNIT_END();
}
