// Counter-based (stateless) random numbers for the trainer executor.
//
// A random number is a pure function of (seed, stream, index): no generator state is carried
// from one element to the next, so any element of any tensor draws the same number whatever the
// parallel layout (TP/SP/DP shard) that computes it, and shards need not skip ahead. The same
// idea as Philox in curand / torch (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
// SC 2011), built here on the splitmix64 finalizer (Steele, Lea, Flood, "Fast splittable
// pseudorandom number generators", OOPSLA 2014; constants of Vigna's reference splitmix64.c).
//
// The 64-bit hash and the uniforms are integer/IEEE arithmetic only, hence bit-identical on every
// platform. counter_normal() also calls std::log and std::cos, which are correctly rounded to
// within an ulp or so by common libms but not guaranteed bit-identical across libm versions.
#pragma once

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <numbers>

namespace traintwin::exec {

/// Weyl increment of splitmix64 (2^64 / golden ratio, odd).
inline constexpr uint64_t kSplitMix64Gamma = 0x9e3779b97f4a7c15ULL;

/// One splitmix64 output for state `x`: z = x + gamma, then the finalizer
///   z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9; z = (z ^ (z >> 27)) * 0x94d049bb133111eb;
///   return z ^ (z >> 31)
/// (Vigna's splitmix64.c next(), with the state increment folded in). A bijection of uint64_t.
/// splitmix64(0), splitmix64(gamma), splitmix64(2 gamma), ... is the reference sequence of a
/// splitmix64 generator seeded with 0.
constexpr uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + kSplitMix64Gamma;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// 64 random bits for element `index` of stream `stream` under `seed`:
///   counter_hash = splitmix64(splitmix64(splitmix64(seed) ^ stream) ^ index).
/// Each step is a bijection, so for a fixed (seed, stream) distinct indices give distinct hashes.
constexpr uint64_t counter_hash(uint64_t seed, uint64_t stream, uint64_t index) {
  return splitmix64(splitmix64(splitmix64(seed) ^ stream) ^ index);
}

/// Uniform double in [0, 1) from the top 53 bits of counter_hash: (hash >> 11) * 2^-53
/// (every value is a multiple of 2^-53; 0 is possible, 1 is not).
constexpr double counter_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return static_cast<double>(counter_hash(seed, stream, index) >> 11) * 0x1.0p-53;
}

/// Standard normal N(0, 1) for element `index` by Box-Muller (Box & Muller, Ann. Math. Stat.
/// 1958) on two uniforms derived from the one index:
///   h1 = counter_hash(seed, stream, index),  h2 = splitmix64(h1),
///   u1 = 1 - (h1 >> 11) 2^-53  in (0, 1],  u2 = (h2 >> 11) 2^-53  in [0, 1),
///   z = sqrt(-2 ln u1) cos(2 pi u2).
/// (The sine half of the pair is discarded so that one index gives one number.) |z| <= 8.6.
inline double counter_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  const uint64_t h1 = counter_hash(seed, stream, index);
  const uint64_t h2 = splitmix64(h1);
  const double u1 = 1.0 - static_cast<double>(h1 >> 11) * 0x1.0p-53;
  const double u2 = static_cast<double>(h2 >> 11) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

/// Mixes several integers (e.g. {iteration, layer, site}) into one stream id:
///   h = 0x6a09e667f3bcc909 (sqrt(2) fraction); for each part: h = splitmix64(h ^ part).
/// Order matters and the number of parts counts ({} , {0}, {0, 0} all differ).
constexpr uint64_t stream_id(std::initializer_list<uint64_t> parts) {
  uint64_t h = 0x6a09e667f3bcc909ULL;
  for (const uint64_t part : parts) h = splitmix64(h ^ part);
  return h;
}

}  // namespace traintwin::exec
