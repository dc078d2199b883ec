/* Counter-based random numbers: every value is a pure function of (seed,
 * stream, index), so results do not depend on which rank or thread asks, or
 * in which order. splitmix64 (Steele, Lea & Flood 2014) as the mixer. */
#ifndef TR_RNG_H
#define TR_RNG_H

#include <math.h>
#include <stdint.h>

static inline uint64_t tr_mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static inline uint64_t tr_hash3(uint64_t seed, uint64_t stream, uint64_t index) {
    return tr_mix64(tr_mix64(tr_mix64(seed) ^ stream) ^ index);
}

/* Uniform in (0, 1): 53 random bits, never 0. */
static inline double tr_unit_uniform(uint64_t h) { return ((double)(h >> 11) + 0.5) / 9007199254740992.0; }

/* Standard normal by Box-Muller from two hashes of the counter. */
static inline double tr_normal(uint64_t seed, uint64_t stream, uint64_t index) {
    double u1 = tr_unit_uniform(tr_hash3(seed, stream, 2 * index));
    double u2 = tr_unit_uniform(tr_hash3(seed, stream, 2 * index + 1));
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

#endif
