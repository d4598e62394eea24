/* The engine's random numbers: a counter-based generator.
 *
 * Every draw is a pure function of (seed, purpose, step, seq, pos): the
 * run's seed, what the number is for, the training step, the global index
 * of the sequence (or of whatever the draw belongs to) and the position in
 * it.  No state is carried from one draw to the next, so a sequence
 * samples the same tokens whatever batch, data-parallel rank or resume
 * point it is drawn in, and saving "the generator" is saving the seed and
 * the step.  The hash is splitmix64's finaliser applied to each counter in
 * turn: the draws pass as independent uniform 64-bit words for sampling
 * and initialisation (not for cryptography). */
#ifndef NEREUS_ENGINE_RNG_H
#define NEREUS_ENGINE_RNG_H

#include <stdint.h>

/* What a draw is for; each purpose is its own stream. */
enum rng_purpose {
	RNG_INIT = 1,      /* weight initialisation: seq = tensor, pos = element */
	RNG_SAMPLE = 2,    /* token sampling: seq = global sequence, pos = token */
	RNG_SHUFFLE = 3,   /* mini-batch order */
	RNG_DATA = 4,      /* prompt order */
};

uint64_t rng_u64(uint64_t seed, uint64_t purpose, uint64_t step, uint64_t seq, uint64_t pos);
/* Uniform in [0, 1), 53 random bits. */
double rng_uniform(uint64_t seed, uint64_t purpose, uint64_t step, uint64_t seq, uint64_t pos);
/* Standard normal (Box–Muller on the draws at 2 pos and 2 pos + 1). */
double rng_normal(uint64_t seed, uint64_t purpose, uint64_t step, uint64_t seq, uint64_t pos);

#endif
