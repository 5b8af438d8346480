// FP8 rounding and the FP8 GEMM's CPU reference (exec/cpu/fp8.hpp), with values worked by hand
// from the formats (Micikevicius et al. 2022): E4M3 = 2^(e-7) (1 + m/8), subnormals 2^-6 m/8,
// largest finite 448 (0x7e), NaN 0x7f; E5M2 = 2^(e-15) (1 + m/4), subnormals 2^-14 m/4, largest
// finite 57344 (0x7b), infinities 0x7c.
#include "exec/cpu/fp8.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "exec/cpu/bf16.hpp"
#include "exec/cpu/cpu_backend.hpp"

namespace traintwin::exec::cpu {
namespace {

constexpr Fp8Kind kE4 = Fp8Kind::kE4M3, kE5 = Fp8Kind::kE5M2;
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(Fp8, E4M3RoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(float_to_fp8(1.0f, kE4), 0x38);
  EXPECT_EQ(float_to_fp8(0.5f, kE4), 0x30);
  EXPECT_EQ(float_to_fp8(-2.0f, kE4), 0xc0);
  EXPECT_EQ(float_to_fp8(448.0f, kE4), 0x7e);
  // 1 + 1/16 lies halfway between 1 (0x38) and 1.125 (0x39): to the even one.
  EXPECT_EQ(float_to_fp8(1.0625f, kE4), 0x38);
  // 1 + 3/16: halfway between 1.125 (0x39) and 1.25 (0x3a): to the even one, 0x3a.
  EXPECT_EQ(float_to_fp8(1.1875f, kE4), 0x3a);
  // 464 = 14.5 quanta of 32 in [256, 512): a tie, to 14 (448); 470 rounds to 480 > 448 and
  // saturates, as do 1000 and infinity.
  EXPECT_EQ(float_to_fp8(464.0f, kE4), 0x7e);
  EXPECT_EQ(float_to_fp8(470.0f, kE4), 0x7e);
  EXPECT_EQ(float_to_fp8(1000.0f, kE4), 0x7e);
  EXPECT_EQ(float_to_fp8(kInf, kE4), 0x7e);
  EXPECT_EQ(float_to_fp8(-kInf, kE4), 0xfe);
  // Subnormals: 2^-9 is the smallest; 2^-10 is a tie between 0 and it (to 0); 3 x 2^-10 a tie
  // between 1 and 2 quanta (to 2).
  EXPECT_EQ(float_to_fp8(0x1p-9f, kE4), 0x01);
  EXPECT_EQ(float_to_fp8(0x1p-10f, kE4), 0x00);
  EXPECT_EQ(float_to_fp8(0x3p-10f, kE4), 0x02);
  EXPECT_EQ(float_to_fp8(std::nanf(""), kE4), 0x7f);
}

TEST(Fp8, E5M2RoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(float_to_fp8(1.0f, kE5), 0x3c);
  EXPECT_EQ(float_to_fp8(57344.0f, kE5), 0x7b);
  EXPECT_EQ(float_to_fp8(1e6f, kE5), 0x7b);
  EXPECT_EQ(float_to_fp8(-kInf, kE5), 0xfb);
  EXPECT_EQ(float_to_fp8(1.125f, kE5), 0x3c);  // halfway between 1 and 1.25: even
  EXPECT_EQ(float_to_fp8(1.375f, kE5), 0x3e);  // halfway between 1.25 and 1.5: even (1.5)
  EXPECT_EQ(float_to_fp8(0x1p-16f, kE5), 0x01);
}

TEST(Fp8, DecodesEveryPatternAndRoundTrips) {
  EXPECT_TRUE(std::isnan(fp8_to_float(0x7f, kE4)));
  EXPECT_TRUE(std::isnan(fp8_to_float(0xff, kE4)));
  EXPECT_EQ(fp8_to_float(0x7e, kE4), 448.0f);
  EXPECT_EQ(fp8_to_float(0x01, kE4), 0x1p-9f);
  EXPECT_EQ(fp8_to_float(0x7c, kE5), kInf);
  EXPECT_TRUE(std::isnan(fp8_to_float(0x7d, kE5)));
  EXPECT_EQ(fp8_to_float(0x01, kE5), 0x1p-16f);
  // Every finite pattern decodes to a value that encodes back to itself (negative zero aside).
  for (const Fp8Kind kind : {kE4, kE5}) {
    for (int v = 0; v < 256; ++v) {
      const float x = fp8_to_float(static_cast<uint8_t>(v), kind);
      if (!std::isfinite(x) || v == 0x80) continue;
      EXPECT_EQ(float_to_fp8(x, kind), v) << "pattern " << v;
    }
  }
}

// out = bf16(alpha a b^T): 2 x (1 x 2 + 0.5 x -1) = 3; the accumulate form adds in fp32.
TEST(Fp8, GemmScalesSumsInFp32AndRoundsOnce) {
  std::vector<uint8_t> a(2), b(2);
  to_fp8(a, std::vector<float>{1.0f, 0.5f}, kE4, 1.0f);
  to_fp8(b, std::vector<float>{1.0f, -0.5f}, kE5, 2.0f);  // the scale multiplies: {2, -1}
  std::vector<uint16_t> out(1);
  fp8_gemm_nt(out, a, kE4, b, kE5, 2.0f, 1, 1, 2);
  EXPECT_EQ(bf16_to_float(out[0]), 3.0f);
  std::vector<float> acc{0x1p-12f};
  fp8_gemm_nt_accumulate(acc, a, kE4, b, kE5, 2.0f, 1, 1, 2);
  EXPECT_EQ(acc[0], 3.0f + 0x1p-12f);
  EXPECT_THROW(fp8_gemm_nt(out, a, kE4, b, kE5, 1.0f, 1, 2, 2), InvalidArgument);
  EXPECT_THROW(to_fp8(a, std::vector<float>{1.0f}, kE4, 1.0f), InvalidArgument);
  CpuBackend be;
  EXPECT_FALSE(be.has_fp8_arithmetic());
}

}  // namespace
}  // namespace traintwin::exec::cpu
