// FP8 rounding and the FP8 GEMM's CPU reference; see fp8.hpp.
#include "exec/cpu/fp8.hpp"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "exec/cpu/bf16.hpp"
#include "exec/cpu/matmul.hpp"

namespace traintwin::exec::cpu {
namespace {

/// A format's layout: mantissa bits, exponent bias, largest finite value.
struct Format {
  int mantissa_bits;
  int bias;
  double max_finite;
};

Format format(Fp8Kind kind) {
  return kind == Fp8Kind::kE4M3 ? Format{3, 7, 448.0} : Format{2, 15, 57344.0};
}

std::vector<float> decode(std::span<const uint8_t> x, Fp8Kind kind) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = fp8_to_float(x[i], kind);
  return out;
}

void check_gemm(const char* who, size_t a, size_t b, size_t out, int64_t m, int64_t n, int64_t k) {
  if (m < 1 || n < 1 || k < 1 || a != static_cast<size_t>(m * k) ||
      b != static_cast<size_t>(n * k) || out != static_cast<size_t>(m * n)) {
    throw InvalidArgument(std::string("cpu ") + who + ": M " + std::to_string(m) + ", N " +
                          std::to_string(n) + ", K " + std::to_string(k) + " need a of M*K, b of " +
                          "N*K and out of M*N elements (got " + std::to_string(a) + ", " +
                          std::to_string(b) + ", " + std::to_string(out) + ")");
  }
}

/// out[M, N] = a[M, K] b[N, K]^T in fp32 (exec/cpu/matmul.hpp's forward: inp a, weight b).
std::vector<float> product(std::span<const uint8_t> a, Fp8Kind a_kind, std::span<const uint8_t> b,
                           Fp8Kind b_kind, int64_t m, int64_t n, int64_t k) {
  const std::vector<float> x = decode(a, a_kind), w = decode(b, b_kind);
  std::vector<float> y(static_cast<size_t>(m * n));
  matmul_forward<float>(y, x, w, {}, 1, m, k, n);
  return y;
}

}  // namespace

uint8_t float_to_fp8(float x, Fp8Kind kind) {
  const Format f = format(kind);
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return static_cast<uint8_t>(sign | 0x7f);
  double a = std::min(std::abs(static_cast<double>(x)), f.max_finite);
  const int emin = 1 - f.bias;  // exponent of the smallest normal
  int e = emin;
  if (a >= std::ldexp(1.0, emin)) e = std::ilogb(a);
  // Ties to even on the quantum of a's binade (the subnormals' below the smallest normal).
  const double quantum = std::ldexp(1.0, e - f.mantissa_bits);
  a = std::nearbyint(a / quantum) * quantum;
  a = std::min(a, f.max_finite);  // rounding up past the largest finite saturates
  if (a == 0) return sign;
  if (a < std::ldexp(1.0, emin)) {  // subnormal: exponent field 0
    return static_cast<uint8_t>(sign |
                                static_cast<int>(a / std::ldexp(1.0, emin - f.mantissa_bits)));
  }
  const int exp = std::ilogb(a);
  const auto mant =
      static_cast<int>(std::ldexp(a, -exp) * (1 << f.mantissa_bits)) - (1 << f.mantissa_bits);
  return static_cast<uint8_t>(sign | ((exp + f.bias) << f.mantissa_bits) | mant);
}

float fp8_to_float(uint8_t v, Fp8Kind kind) {
  const Format f = format(kind);
  const double sign = (v & 0x80) ? -1.0 : 1.0;
  const int bits = v & 0x7f;
  const int exp_field = bits >> f.mantissa_bits;
  const int mant = bits & ((1 << f.mantissa_bits) - 1);
  const int exp_all_ones = (1 << (7 - f.mantissa_bits)) - 1;
  if (kind == Fp8Kind::kE4M3 && bits == 0x7f) return std::numeric_limits<float>::quiet_NaN();
  if (kind == Fp8Kind::kE5M2 && exp_field == exp_all_ones) {
    return mant == 0 ? static_cast<float>(sign * std::numeric_limits<double>::infinity())
                     : std::numeric_limits<float>::quiet_NaN();
  }
  if (exp_field == 0) {
    return static_cast<float>(sign * std::ldexp(mant, 1 - f.bias - f.mantissa_bits));
  }
  return static_cast<float>(
      sign * std::ldexp((1 << f.mantissa_bits) + mant, exp_field - f.bias - f.mantissa_bits));
}

void to_fp8(std::span<uint8_t> dst, std::span<const float> src, Fp8Kind kind, float scale) {
  if (dst.size() != src.size()) {
    throw InvalidArgument("cpu to_fp8: dst has " + std::to_string(dst.size()) + " elements, src " +
                          std::to_string(src.size()));
  }
  for (size_t i = 0; i < src.size(); ++i) dst[i] = float_to_fp8(scale * src[i], kind);
}

void fp8_gemm_nt(std::span<uint16_t> out, std::span<const uint8_t> a, Fp8Kind a_kind,
                 std::span<const uint8_t> b, Fp8Kind b_kind, float alpha, int64_t m, int64_t n,
                 int64_t k) {
  check_gemm("fp8_gemm_nt", a.size(), b.size(), out.size(), m, n, k);
  const std::vector<float> y = product(a, a_kind, b, b_kind, m, n, k);
  for (size_t i = 0; i < y.size(); ++i) out[i] = float_to_bf16(alpha * y[i]);
}

void fp8_gemm_nt_accumulate(std::span<float> out, std::span<const uint8_t> a, Fp8Kind a_kind,
                            std::span<const uint8_t> b, Fp8Kind b_kind, float alpha, int64_t m,
                            int64_t n, int64_t k) {
  check_gemm("fp8_gemm_nt_accumulate", a.size(), b.size(), out.size(), m, n, k);
  const std::vector<float> y = product(a, a_kind, b, b_kind, m, n, k);
  for (size_t i = 0; i < y.size(); ++i) out[i] += alpha * y[i];
}

}  // namespace traintwin::exec::cpu
