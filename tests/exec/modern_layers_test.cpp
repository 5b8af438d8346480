// CPU layers of Llama-style models (exec/cpu/): RMSNorm, SwiGLU, squared ReLU, RoPE and
// grouped-query attention. Every backward against central finite differences in float64,
// forward values on hand-worked cases, the properties that define each layer (RoPE is a rotation
// that makes q.k depend on the relative position only; GQA with as many groups as heads is
// multi-head attention and with one group is multi-query attention), and InvalidArgument for
// bad sizes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "core/error.hpp"
#include "exec/cpu/attention.hpp"
#include "exec/cpu/gqa_attention.hpp"
#include "exec/cpu/rmsnorm.hpp"
#include "exec/cpu/rope.hpp"
#include "exec/cpu/squared_relu.hpp"
#include "exec/cpu/swiglu.hpp"
#include "tests/exec/gradient_check.hpp"

namespace traintwin::exec::cpu {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kB = 2, kT = 5, kC = 8;

TEST(ModernLayerTest, RmsNormByHandAndGradient) {
  // One row [3, 4]: mean of squares 12.5, rrms = 1/sqrt(12.5 + 1e-5); weight [1, 2].
  const Vec x = {3, 4}, w = {1, 2};
  Vec out(2), rrms(1);
  rmsnorm_forward<double>(out, rrms, x, w, 1, 1, 2);
  const double r = 1 / std::sqrt(12.5 + 1e-5);
  EXPECT_NEAR(out[0], 3 * r, 1e-15);
  EXPECT_NEAR(out[1], 8 * r, 1e-15);

  Vec inp = random_vec(kB * kT * kC, 101, 2.0);
  Vec weight = random_vec(kC, 102);
  const Vec dout = random_vec(kB * kT * kC, 103);
  Vec y(dout.size()), rr(kB * kT);
  auto loss = [&] {
    rmsnorm_forward<double>(y, rr, inp, weight, kB, kT, kC);
    return dot(y, dout);
  };
  loss();
  Vec dinp(inp.size()), dweight(weight.size());
  rmsnorm_backward<double>(dinp, dweight, dout, inp, weight, rr, kB, kT, kC);
  expect_gradient(inp, dinp, loss, "dinp");
  expect_gradient(weight, dweight, loss, "dweight");
  EXPECT_THROW(rmsnorm_forward<double>(y, rr, inp, weight, kB, kT, kC + 1), InvalidArgument);
  EXPECT_THROW(rmsnorm_forward<double>(y, rr, inp, weight, 0, kT, kC), InvalidArgument);
}

TEST(ModernLayerTest, SwigluByHandAndGradient) {
  // gate 1, up 2: silu(1) x 2 = 2 / (1 + e^-1); gate 0 gives 0 whatever up.
  const Vec inp1 = {1, 0, 2, 5};  // one row, F = 2: gate [1, 0], up [2, 5]
  Vec out1(2);
  swiglu_forward<double>(out1, inp1, 1, 2);
  EXPECT_NEAR(out1[0], 2.0 / (1 + std::exp(-1.0)), 1e-15);
  EXPECT_EQ(out1[1], 0.0);

  const int64_t rows = kB * kT, f = 6;
  Vec inp = random_vec(rows * 2 * f, 111, 3.0);
  const Vec dout = random_vec(rows * f, 112);
  Vec out(dout.size());
  auto loss = [&] {
    swiglu_forward<double>(out, inp, rows, f);
    return dot(out, dout);
  };
  Vec dinp(inp.size());
  swiglu_backward<double>(dinp, dout, inp, rows, f);
  expect_gradient(inp, dinp, loss, "dinp (gate, up)");
  EXPECT_THROW(swiglu_forward<double>(out, inp, rows, f + 1), InvalidArgument);
}

TEST(ModernLayerTest, SquaredReluByHandAndGradient) {
  const Vec x = {-2, 0.5, 3};
  Vec y(3);
  squared_relu_forward<double>(y, x);
  EXPECT_EQ(y, (Vec{0, 0.25, 9}));
  // Away from the kink at 0 (where the derivative is continuous anyway: 2 max(x, 0)).
  Vec inp = random_vec(kB * kT * kC, 121, 3.0);
  const Vec dout = random_vec(inp.size(), 122);
  Vec out(inp.size());
  auto loss = [&] {
    squared_relu_forward<double>(out, inp);
    return dot(out, dout);
  };
  Vec dinp(inp.size());
  squared_relu_backward<double>(dinp, inp, dout);
  expect_gradient(inp, dinp, loss, "dinp");
  Vec short_out(2);
  EXPECT_THROW(squared_relu_forward<double>(short_out, x), InvalidArgument);
}

std::vector<int64_t> iota_positions(int64_t n, int64_t first = 0) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), first);
  return p;
}

TEST(ModernLayerTest, RopeIsARelativeRotation) {
  const int64_t heads = 2, d = 8;
  // Position 0 is the identity; one head of D 2 at position 1 with base 1 rotates by 1 radian.
  const Vec x = {1, 0};
  Vec y(2);
  const std::vector<int64_t> one = {1};
  rope_forward<double>(y, x, one, 1, 1, 1, 2, 1.0);
  EXPECT_NEAR(y[0], std::cos(1.0), 1e-15);
  EXPECT_NEAR(y[1], std::sin(1.0), 1e-15);
  const std::vector<int64_t> zero = {0};
  rope_forward<double>(y, x, zero, 1, 1, 1, 2, 1.0);
  EXPECT_EQ(y, x);

  // q.k after RoPE depends on the positions' difference only, and norms are kept.
  const Vec q = random_vec(d, 131), k = random_vec(d, 132);
  auto rotated_dot = [&](int64_t m, int64_t n) {
    Vec qr(d), kr(d);
    const std::vector<int64_t> pm = {m}, pn = {n};
    rope_forward<double>(qr, q, pm, 1, 1, 1, d);
    rope_forward<double>(kr, k, pn, 1, 1, 1, d);
    EXPECT_NEAR(dot(qr, qr), dot(q, q), 1e-12);
    return dot(qr, kr);
  };
  EXPECT_NEAR(rotated_dot(7, 3), rotated_dot(104, 100), 1e-12);
  EXPECT_GT(std::abs(rotated_dot(7, 3) - rotated_dot(7, 5)), 1e-6);

  // Gradient, with the non-contiguous positions of a CP rank (chunks 1 and 6 of 8 chunks of 2).
  const std::vector<int64_t> pos = {2, 3, 12, 13, 14};
  Vec inp = random_vec(kB * kT * heads * d, 133);
  const Vec dout = random_vec(inp.size(), 134);
  Vec out(inp.size());
  auto loss = [&] {
    rope_forward<double>(out, inp, pos, kB, kT, heads, d);
    return dot(out, dout);
  };
  Vec dinp(inp.size());
  rope_backward<double>(dinp, dout, pos, kB, kT, heads, d);
  expect_gradient(inp, dinp, loss, "dinp");
  EXPECT_THROW(rope_forward<double>(out, inp, pos, kB, kT, heads * d, 1), InvalidArgument);
  EXPECT_THROW(rope_forward<double>(out, inp, iota_positions(kT + 1), kB, kT, heads, d),
               InvalidArgument);
}

TEST(ModernLayerTest, GqaAttentionGradient) {
  const int64_t heads = 4, groups = 2, d = 3;
  Vec inp = random_vec(kB * kT * (heads + 2 * groups) * d, 141, 1.5);
  const Vec dout = random_vec(kB * kT * heads * d, 142);
  Vec out(dout.size()), att(kB * heads * kT * kT);
  auto loss = [&] {
    gqa_attention_forward<double>(out, att, inp, kB, kT, heads, groups, d);
    return dot(out, dout);
  };
  loss();
  Vec dinp(inp.size());
  gqa_attention_backward<double>(dinp, dout, inp, att, kB, kT, heads, groups, d);
  expect_gradient(inp, dinp, loss, "dinp (q, k, v)");
  EXPECT_THAT(
      [&] {
        try {
          gqa_attention_forward<double>(out, att, inp, kB, kT, heads, 3, d);
        } catch (const InvalidArgument& e) {
          return std::string(e.what());
        }
        return std::string();
      }(),
      HasSubstr("query_groups 3 must divide heads 4"));
}

// As many groups as heads is multi-head attention: the same output and gradients as
// attention.hpp's layer (its fused layout [q | k | v] is GQA's with G = NH).
TEST(ModernLayerTest, GqaWithAllGroupsIsMultiHeadAttention) {
  const int64_t heads = 2, d = kC / heads;
  const Vec inp = random_vec(kB * kT * 3 * kC, 151, 1.5);
  const Vec dout = random_vec(kB * kT * kC, 152);
  Vec out_mha(dout.size()), preatt(kB * heads * kT * kT), att_mha(preatt.size());
  attention_forward<double>(out_mha, preatt, att_mha, inp, kB, kT, kC, heads);
  Vec out_gqa(dout.size()), att_gqa(preatt.size());
  gqa_attention_forward<double>(out_gqa, att_gqa, inp, kB, kT, heads, heads, d);
  for (size_t i = 0; i < out_mha.size(); ++i) EXPECT_NEAR(out_gqa[i], out_mha[i], 1e-14) << i;
  Vec d_mha(inp.size()), d_gqa(inp.size());
  attention_backward<double>(d_mha, dout, inp, att_mha, kB, kT, kC, heads);
  gqa_attention_backward<double>(d_gqa, dout, inp, att_gqa, kB, kT, heads, heads, d);
  for (size_t i = 0; i < d_mha.size(); ++i) EXPECT_NEAR(d_gqa[i], d_mha[i], 1e-13) << i;
}

// One group is multi-query attention: every query head reads the one K/V head, so it equals
// multi-head attention on K and V copied to every head; the shared K/V gradient is the sum over
// the copies.
TEST(ModernLayerTest, GqaWithOneGroupIsMultiQueryAttention) {
  const int64_t heads = 3, d = 2, row = (heads + 2) * d, mha_row = 3 * heads * d;
  const Vec inp = random_vec(kB * kT * row, 161, 1.5);
  const Vec dout = random_vec(kB * kT * heads * d, 162);
  Vec expanded(kB * kT * mha_row);
  for (int64_t bt = 0; bt < kB * kT; ++bt) {
    const double* src = inp.data() + bt * row;
    double* dst = expanded.data() + bt * mha_row;
    for (int64_t i = 0; i < heads * d; ++i) dst[i] = src[i];  // q
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < d; ++i) {
        dst[heads * d + h * d + i] = src[heads * d + i];          // k
        dst[2 * heads * d + h * d + i] = src[(heads + 1) * d + i];  // v
      }
    }
  }
  Vec out_mha(dout.size()), preatt(kB * heads * kT * kT), att_mha(preatt.size());
  attention_forward<double>(out_mha, preatt, att_mha, expanded, kB, kT, heads * d, heads);
  Vec out_mqa(dout.size()), att_mqa(preatt.size());
  gqa_attention_forward<double>(out_mqa, att_mqa, inp, kB, kT, heads, 1, d);
  for (size_t i = 0; i < out_mha.size(); ++i) EXPECT_NEAR(out_mqa[i], out_mha[i], 1e-14) << i;
  Vec d_mha(expanded.size()), d_mqa(inp.size());
  attention_backward<double>(d_mha, dout, expanded, att_mha, kB, kT, heads * d, heads);
  gqa_attention_backward<double>(d_mqa, dout, inp, att_mqa, kB, kT, heads, 1, d);
  for (int64_t bt = 0; bt < kB * kT; ++bt) {
    for (int64_t i = 0; i < d; ++i) {
      double dk = 0, dv = 0;
      for (int64_t h = 0; h < heads; ++h) {
        dk += d_mha[static_cast<size_t>(bt * mha_row + heads * d + h * d + i)];
        dv += d_mha[static_cast<size_t>(bt * mha_row + 2 * heads * d + h * d + i)];
      }
      EXPECT_NEAR(d_mqa[static_cast<size_t>(bt * row + heads * d + i)], dk, 1e-13);
      EXPECT_NEAR(d_mqa[static_cast<size_t>(bt * row + (heads + 1) * d + i)], dv, 1e-13);
    }
  }
}

// The float instantiations agree with float64 to float precision.
TEST(ModernLayerTest, FloatMatchesDouble) {
  const Vec inp = random_vec(kB * kT * kC, 171), w = random_vec(kC, 172);
  Vec out(inp.size()), rr(kB * kT);
  rmsnorm_forward<double>(out, rr, inp, w, kB, kT, kC);
  std::vector<float> finp(inp.begin(), inp.end()), fw(w.begin(), w.end()), fout(inp.size()),
      frr(kB * kT);
  rmsnorm_forward<float>(fout, frr, finp, fw, kB, kT, kC);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(fout[i], out[i], 1e-5);
}

}  // namespace
}  // namespace traintwin::exec::cpu
