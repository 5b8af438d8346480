// bfloat16 rounding and the bf16 linear layer's CPU reference (exec/cpu/bf16.hpp), with values
// worked by hand: a bf16 keeps binary32's sign, 8 exponent bits and top 7 mantissa bits, so
// 1 + 2^-8 lies exactly halfway between the bf16 values 1 and 1 + 2^-7.
#include "exec/cpu/bf16.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/error.hpp"
#include "exec/cpu/cpu_backend.hpp"

namespace traintwin::exec::cpu {
namespace {

TEST(Bf16, RoundsToNearestTiesToEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(-2.5f), 0xc020);  // exact: -1.25 x 2^1
  // 1 + 2^-8: halfway between 0x3f80 (1) and 0x3f81 (1 + 2^-7): to the even one, 1.
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f), 0x3f80);
  // 1 + 3 x 2^-8: halfway between 0x3f81 and 0x3f82: to the even one, 0x3f82.
  EXPECT_EQ(float_to_bf16(1.0f + 0x3p-8f), 0x3f82);
  // Just above the halfway point: up.
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
  // Just below: down.
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f - 0x1p-20f), 0x3f80);
  EXPECT_FLOAT_EQ(bf16_to_float(0x4049), 3.140625f);  // pi to bf16
  EXPECT_EQ(float_to_bf16(3.14159265f), 0x4049);
}

TEST(Bf16, OverflowInfinityNaNAndSubnormals) {
  // The largest float rounds past the largest bf16 (0x7f7f = 3.3895e38) to infinity.
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
  // A NaN whose payload lies only in the low 16 bits must not become infinity.
  const float nan_low = std::bit_cast<float>(uint32_t{0x7f800001});
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(nan_low))));
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  // The smallest fp32 subnormal is below half of the smallest bf16 subnormal (2^-133): 0.
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(float_to_bf16(0x1p-133f), 0x0001);
}

TEST(Bf16, SpansRoundTripAndCheckSizes) {
  const std::vector<float> x{1.0f, 1.0f + 0x1p-8f, -2.5f, 1e-3f};
  std::vector<uint16_t> h(x.size());
  to_bf16(h, x);
  std::vector<float> back(x.size());
  from_bf16(back, h);
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], 1.0f);
  EXPECT_EQ(back[2], -2.5f);
  EXPECT_NEAR(back[3], 1e-3f, 1e-3f * 0x1p-8f);  // within half a bf16 ulp
  std::vector<uint16_t> short_h(2);
  EXPECT_THROW(to_bf16(short_h, x), InvalidArgument);
  EXPECT_THROW(from_bf16(back, short_h), InvalidArgument);
}

// out = bf16(inp W^T + bias), one rounding at the end: 1 x 1 + 1 x 2^-8 = 1 + 2^-8 in fp32,
// which rounds (ties to even) to 1; operands round first: 1 + 2^-8 as an input is 1.
TEST(Bf16, LinearLayerRoundsTheOperandsAndTheResultOnce) {
  auto h = [](std::vector<float> v) {
    std::vector<uint16_t> out(v.size());
    to_bf16(out, v);
    return out;
  };
  const std::vector<uint16_t> inp = h({1.0f, 1.0f, 1.0f + 0x1p-8f, 3.0f});  // [2 rows, C 2]
  const std::vector<uint16_t> w = h({1.0f, 0x1p-8f});                       // [OC 1, C 2]
  std::vector<uint16_t> out(2);
  matmul_forward_bf16(out, inp, w, {}, 1, 2, 2, 1);
  EXPECT_EQ(bf16_to_float(out[0]), 1.0f);            // 1 + 2^-8 -> 1
  EXPECT_EQ(bf16_to_float(out[1]), 1.0f + 0x1p-6f);  // 1 + 3 x 2^-8: a tie, to even 1 + 2^-6
  const std::vector<uint16_t> bias = h({0.5f});
  matmul_forward_bf16(out, inp, w, bias, 1, 2, 2, 1);
  EXPECT_EQ(bf16_to_float(out[0]), 1.5f);  // 1.5 + 2^-8: half an ulp above 1.5, a tie: 1.5

  // dgrad overwrites: dinp = bf16(dout W), whatever dinp held.
  std::vector<uint16_t> dinp = h({7.0f, 7.0f, 7.0f, 7.0f});
  const std::vector<uint16_t> dout = h({2.0f, -1.0f});  // [2 rows, OC 1]
  matmul_backward_data_bf16(dinp, dout, w, 1, 2, 2, 1);
  EXPECT_EQ(bf16_to_float(dinp[0]), 2.0f);
  EXPECT_EQ(bf16_to_float(dinp[1]), 0x1p-7f);
  EXPECT_EQ(bf16_to_float(dinp[2]), -1.0f);
  EXPECT_EQ(bf16_to_float(dinp[3]), -0x1p-8f);

  // wgrad accumulates in fp32, unrounded: 1 + 2 x 1 + (-1) x (1) = 2 and
  // 0.25 + 2 x 1 + (-1) x 3 = -0.75; dbias += 2 - 1.
  std::vector<float> dw{1.0f, 0.25f}, db{0x1p-12f};
  matmul_backward_weight_bf16(dw, db, dout, inp, 1, 2, 2, 1);
  EXPECT_EQ(dw[0], 2.0f);
  EXPECT_EQ(dw[1], -0.75f);
  EXPECT_EQ(db[0], 1.0f + 0x1p-12f);  // kept in fp32: a bf16 would have lost 2^-12
  EXPECT_THROW(matmul_forward_bf16(out, inp, w, {}, 1, 2, 2, 2), InvalidArgument);
}

// The cpu Backend exposes the reference, and says it only emulates bf16 arithmetic (so
// `profile` will not time it as a bf16 cost).
TEST(Bf16, CpuBackendEmulates) {
  CpuBackend be;
  EXPECT_FALSE(be.has_bf16_arithmetic());
  Tensor x(be, 2);
  be.upload(x, std::vector<float>{1.0f + 0x3p-8f, -2.5f});
  Bf16Tensor y(be, 2);
  be.convert_to_bf16(y, x);
  EXPECT_EQ(y.data()[0], 0x3f82);
  EXPECT_EQ(y.data()[1], 0xc020);
  Tensor z(be, 2);
  be.convert_from_bf16(z, y);
  EXPECT_EQ(z.data()[0], 1.0f + 0x1p-6f);
  // accumulate_from_bf16 adds the widened values in fp32: 0.25 + (1 + 2^-6), 2^-20 - 2.5 (an
  // addend bf16 could not hold stays).
  be.upload(z, std::vector<float>{0.25f, 0x1p-20f});
  be.accumulate_from_bf16(z, y);
  EXPECT_EQ(z.data()[0], 1.25f + 0x1p-6f);
  EXPECT_EQ(z.data()[1], 0x1p-20f - 2.5f);
  Tensor three(be, 3);
  EXPECT_THROW(be.accumulate_from_bf16(three, y), InvalidArgument);
}

}  // namespace
}  // namespace traintwin::exec::cpu
