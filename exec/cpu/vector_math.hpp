// Branch-free float approximations of exp and the logistic sigmoid that compilers vectorize
// (plain multiply/add/compare/select and integer bit operations, no library calls), used by the
// fp32 paths of the CPU kernels' elementwise loops (GELU, cross-entropy). The float64 kernels
// keep the C library's std::exp/std::tanh: they are the references the tests compare with.
//
// TRAINTWIN_CPU_CLONES marks a hot loop for GCC's function multi-versioning: one copy each
// for x86-64-v4 (AVX-512), x86-64-v3 (AVX2) and the baseline, picked at load time (ifunc), so the
// binary runs on any x86-64 and uses the widest vectors the CPU has. Every copy does the same IEEE
// multiplies and adds per element in the same order (no FMA contraction: -std=c++20 sets
// -ffp-contract=off), so results do not depend on which copy runs.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

// GCC only: clang 14 (the fuzz sub-build) refuses target_clones on function templates.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_ADDRESS__) && !defined(TRAINTWIN_NO_CPU_CLONES)
#define TRAINTWIN_CPU_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TRAINTWIN_CPU_CLONES
#endif

namespace traintwin::exec::cpu {

/// e^x for float x, Cephes' expf scheme: x = n ln2 + r with |r| <= ln2/2 (ln2 split in two
/// constants so n ln2 is exact), e^r by Cephes' degree-7 minimax polynomial, 2^n put in the
/// exponent bits. Maximum relative error 3e-7 (about 2.5 ulp) over [-87, 88], bounded by
/// tests/exec/vector_math_test.cpp against float64 std::exp. Outside: x < -87 gives 0 (e^x <
/// 1.7e-38 there), x > 88 gives +inf (e^x > 1.6e38); NaN gives NaN.
inline float exp_approx(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;     // ln 2 rounded to 9 bits: n * kLn2Hi is exact
  constexpr float kLn2Lo = -2.12194440e-4f;  // ln 2 - kLn2Hi
  constexpr float kRound = 12582912.0f;      // 1.5 * 2^23: (v + kRound) - kRound rounds v
  constexpr float kMin = -87.0f;
  constexpr float kMax = 88.0f;
  const float clamped = x > kMax ? kMax : (x < kMin ? kMin : x);  // NaN passes through
  const float n = (clamped * kLog2e + kRound) - kRound;  // nearest integer to x / ln 2
  const float r = (clamped - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  // 2^n for n in [-126, 127] (a NaN x makes n garbage, but p is NaN then)
  const int32_t exponent_bits = (static_cast<int32_t>(n) + 127) << 23;
  const float y = p * std::bit_cast<float>(exponent_bits);
  return x < kMin ? 0.0f : (x > kMax ? std::numeric_limits<float>::infinity() : y);
}

/// The logistic sigmoid 1 / (1 + e^-x) with exp_approx: relative error below 6e-7 for every
/// float x (tests/exec/vector_math_test.cpp); 0 for x < -87, 1 for x > 87 (exactly as float
/// rounds), NaN for NaN.
inline float sigmoid_approx(float x) { return 1.0f / (1.0f + exp_approx(-x)); }

}  // namespace traintwin::exec::cpu
