// The Backend seam (exec/backend.hpp) on the CPU backend: device buffers (zeroed, moved, freed),
// 2-D copies and fills with their bounds checks, and Megatron's fused bias_dropout_add against
// the unfused sequence the executor ran before the seam (bias add, dropout, residual add), bit for
// bit, forward and backward, with and without dropout.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.hpp"
#include "exec/cpu/cpu_backend.hpp"
#include "exec/cpu/dropout.hpp"

namespace traintwin::exec {
namespace {

using ::testing::HasSubstr;

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

bool same_bits(const std::vector<float>& a, const Tensor& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(CpuBackend, BuffersAreZeroedMovedAndFreed) {
  cpu::CpuBackend be;
  Tensor a(be, 1000);
  ASSERT_EQ(a.size(), 1000u);
  for (float x : a.span()) ASSERT_EQ(x, 0.0f);
  a.data()[7] = 3.0f;
  Tensor b = std::move(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(b.data()[7], 3.0f);
  b.reset();
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(b.data(), nullptr);
  Tensor none(be, 0);
  EXPECT_TRUE(none.empty());
}

// The timeline's marks (Backend::mark's default: the host clock after the kernels): indices from
// 0 per set, times from mark 0, non-decreasing and covering the work between them.
TEST(CpuBackend, MarksTimeTheWorkBetweenThem) {
  cpu::CpuBackend be;
  EXPECT_EQ(be.mark(), 0u);
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(5)) {
  }
  EXPECT_EQ(be.mark(), 1u);
  EXPECT_EQ(be.mark(), 2u);
  const std::vector<double> t = be.mark_times_s();
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0], 0.0);
  EXPECT_GE(t[1], 0.005);
  EXPECT_GE(t[2], t[1]);
  be.clear_marks();
  EXPECT_EQ(be.mark(), 0u);
  EXPECT_EQ(be.mark_times_s(), std::vector<double>{0.0});
}

TEST(CpuBackend, Copy2dMovesRowsBetweenPitches) {
  cpu::CpuBackend be;
  // src: 3 rows of pitch 5; copy 2 elements of each into dst rows of pitch 4.
  std::vector<float> src(15);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
  Tensor dst(be, 12);
  be.copy_2d(dst.span().subspan(1), 4, CFSpan(src).subspan(2), 5, 2, 3);
  const std::vector<float> want{0, 2, 3, 0, 0, 7, 8, 0, 0, 12, 13, 0};
  EXPECT_TRUE(same_bits(want, dst));
  be.fill_2d(dst.span().subspan(3), 4, 1, 3, -1.0f);
  EXPECT_EQ(dst.data()[3], -1.0f);
  EXPECT_EQ(dst.data()[7], -1.0f);
  EXPECT_EQ(dst.data()[11], -1.0f);
}

TEST(CpuBackend, Copy2dRefusesRowsOutsideTheSpan) {
  cpu::CpuBackend be;
  Tensor dst(be, 10);
  std::vector<float> src(10);
  try {
    be.copy_2d(dst, 4, src, 4, 4, 3);  // rows end at 2 x 4 + 4 = 12 > 10
    FAIL() << "no error";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("copy_2d dst"));
    EXPECT_THAT(e.what(), HasSubstr("leave a span of 10 elements"));
  }
  EXPECT_THROW(be.copy(Tensor(be, 3), CFSpan(src)), InvalidArgument);
}

class BiasDropoutAdd : public ::testing::TestWithParam<double> {};

// B 2, T_local 3 of T_total 6 at offset 3, C 5.
constexpr cpu::HiddenBlock kBlock{2, 3, 5, 4, 3, 6};
constexpr size_t kN = 2 * 3 * 5;

TEST_P(BiasDropoutAdd, ForwardEqualsTheUnfusedSequenceBitForBit) {
  cpu::CpuBackend be;
  const cpu::DropoutParams params{GetParam(), 1234, 77};
  const auto x = random_floats(kN, 1), bias = random_floats(5, 2), residual = random_floats(kN, 3);
  // Unfused: y = x + bias; out = dropout(y); out += residual.
  std::vector<float> y = x;
  for (size_t i = 0; i < kN; ++i) y[i] += bias[i % 5];
  std::vector<float> want(kN);
  cpu::dropout_forward<float>(want, y, params, kBlock);
  for (size_t i = 0; i < kN; ++i) want[i] += residual[i];
  Tensor out(be, kN);
  be.bias_dropout_add_forward(out, x, bias, residual, params, kBlock);
  EXPECT_TRUE(same_bits(want, out));
  if (GetParam() > 0) {
    int dropped = 0;
    for (size_t i = 0; i < kN; ++i) dropped += out.data()[i] == residual[i];
    EXPECT_GT(dropped, 0) << "p = " << GetParam() << " dropped nothing";
  }
}

TEST_P(BiasDropoutAdd, BackwardEqualsTheUnfusedSequenceBitForBit) {
  cpu::CpuBackend be;
  const cpu::DropoutParams params{GetParam(), 1234, 77};
  const auto dout = random_floats(kN, 4);
  // Unfused: d_branch = dropout_backward(dout); dbias += row sums; d_residual = dout.
  std::vector<float> d_branch(kN, 0.0f), dbias_want(5, 0.5f);
  cpu::dropout_backward<float>(d_branch, dout, params, kBlock);
  for (size_t i = 0; i < kN; ++i) dbias_want[i % 5] += d_branch[i];
  Tensor dinp(be, kN), dresidual(be, kN), dbias(be, 5);
  be.fill_2d(dbias, 5, 5, 1, 0.5f);
  be.bias_dropout_add_backward(dinp, dbias, dresidual, dout, params, kBlock);
  EXPECT_TRUE(same_bits(d_branch, dinp));
  EXPECT_TRUE(same_bits(dbias_want, dbias));
  EXPECT_TRUE(same_bits(dout, dresidual));
}

INSTANTIATE_TEST_SUITE_P(Probabilities, BiasDropoutAdd, ::testing::Values(0.0, 0.1, 0.5));

TEST(CpuBackend, BiasDropoutAddRefusesABiasOfTheWrongWidth) {
  cpu::CpuBackend be;
  Tensor out(be, kN), x(be, kN), bias(be, 4);
  EXPECT_THROW(be.bias_dropout_add_forward(out, x, bias, {}, {0.1, 1, 2}, kBlock),
               InvalidArgument);
}

}  // namespace
}  // namespace traintwin::exec
