/* The counter-based generator of rng.h. */
#include "engine/rng.h"

#include <math.h>

/* splitmix64's output function: a bijection of 64-bit words with full
 * avalanche. */
static uint64_t mix(uint64_t z)
{
	z += 0x9e3779b97f4a7c15u;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

uint64_t rng_u64(uint64_t seed, uint64_t purpose, uint64_t step, uint64_t seq, uint64_t pos)
{
	uint64_t h = mix(seed);

	h = mix(h ^ purpose);
	h = mix(h ^ step);
	h = mix(h ^ seq);
	return mix(h ^ pos);
}

double rng_uniform(uint64_t seed, uint64_t purpose, uint64_t step, uint64_t seq, uint64_t pos)
{
	return (double)(rng_u64(seed, purpose, step, seq, pos) >> 11) * 0x1.0p-53;
}

double rng_normal(uint64_t seed, uint64_t purpose, uint64_t step, uint64_t seq, uint64_t pos)
{
	double u1 = rng_uniform(seed, purpose, step, seq, 2 * pos);
	double u2 = rng_uniform(seed, purpose, step, seq, 2 * pos + 1);

	return sqrt(-2.0 * log1p(-u1)) * cos(2.0 * M_PI * u2);
}
