// The linear layers in bf16 (exec/linear.hpp) on the cpu backend's exact emulation, with values
// worked by hand: 1 + 2^-9 rounds to the bf16 value 1 (bf16 keeps 7 mantissa bits), so in bf16
// 3 (1 + 2^-9) x 1 gives 3 where fp32 gives 3 + 3 x 2^-9; products of values bf16 holds exactly
// (small integers) are exact in both.
#include "exec/linear.hpp"

#include <gtest/gtest.h>

#include <vector>

#include "core/error.hpp"
#include "exec/cpu/cpu_backend.hpp"

namespace traintwin::exec {
namespace {

constexpr float kOffGrid = 1.0f + 0x1p-9f;  // not a bf16 value: rounds to 1

Tensor tensor(Backend& be, const std::vector<float>& v) {
  Tensor t(be, v.size());
  be.upload(t, v);
  return t;
}

std::vector<float> host(const Tensor& t) { return {t.data(), t.data() + t.size()}; }

// out [1, 1, 2] = inp [1, 1, 3] W^T + bias, W [2, 3].
TEST(LinearLayers, Bf16ForwardRoundsOperandsAndResult) {
  cpu::CpuBackend be;
  const Tensor x = tensor(be, {kOffGrid, 2.0f, -1.0f});
  const Tensor w = tensor(be, {1.0f, 0.0f, 0.0f, kOffGrid, 1.0f, 1.0f});
  const Tensor bias = tensor(be, {0.5f, kOffGrid});
  Tensor fp32(be, 2), bf16(be, 2);
  LinearLayers(be, Precision::kFp32).forward(fp32, x, w, bias, 1, 1, 3, 2);
  LinearLayers(be, Precision::kBf16).forward(bf16, x, w, bias, 1, 1, 3, 2);
  // fp32: 1 + 2^-9 + 0.5 and (1 + 2^-9)^2 + 2 - 1 + 1 + 2^-9.
  EXPECT_FLOAT_EQ(host(fp32)[0], 1.5f + 0x1p-9f);
  EXPECT_FLOAT_EQ(host(fp32)[1], kOffGrid * kOffGrid + 1.0f + kOffGrid);
  // bf16: every off-grid operand is 1: 1 + 0.5 and 1 + 2 - 1 + 1.
  EXPECT_EQ(host(bf16), (std::vector<float>{1.5f, 3.0f}));
}

TEST(LinearLayers, Bf16BackwardAccumulatesInFp32) {
  cpu::CpuBackend be;
  LinearLayers lin(be, Precision::kBf16);
  const Tensor dy = tensor(be, {kOffGrid, 2.0f});                       // [1, 1, 2]
  const Tensor w = tensor(be, {1.0f, 0.0f, 0.0f, kOffGrid, 1.0f, 1.0f});  // [2, 3]
  const Tensor x = tensor(be, {3.0f, kOffGrid, -1.0f});                 // [1, 1, 3]
  // dgrad onto 0.25: dinp = 0.25 + dy W = 0.25 + (1 + 2, 2, 2) in bf16.
  Tensor dx = tensor(be, {0.25f, 0.25f, 0.25f});
  lin.backward_data(dx, dy, w, 1, 1, 3, 2);
  EXPECT_EQ(host(dx), (std::vector<float>{3.25f, 2.25f, 2.25f}));
  // wgrad onto an fp32 gradient that bf16 could not hold: dW += dy^T x, db += dy.
  Tensor dw = tensor(be, std::vector<float>(6, kOffGrid));
  Tensor db = tensor(be, {kOffGrid, 0.0f});
  lin.backward_weight(dw, db, dy, x, 1, 1, 3, 2);
  EXPECT_EQ(host(dw), (std::vector<float>{kOffGrid + 3.0f, kOffGrid + 1.0f, kOffGrid - 1.0f,
                                          kOffGrid + 6.0f, kOffGrid + 2.0f, kOffGrid - 2.0f}));
  EXPECT_EQ(host(db), (std::vector<float>{kOffGrid + 1.0f, 2.0f}));
}

// The bf16 weight is a copy of the fp32 master weight, re-rounded once per iteration.
TEST(LinearLayers, Bf16WeightCopiesFollowTheMasterWeightsEachIteration) {
  cpu::CpuBackend be;
  LinearLayers lin(be, Precision::kBf16);
  const Tensor x = tensor(be, {1.0f});
  Tensor w = tensor(be, {2.0f});
  Tensor y(be, 1);
  lin.forward(y, x, w, {}, 1, 1, 1, 1);
  EXPECT_EQ(host(y)[0], 2.0f);
  be.upload(w, std::vector<float>{4.0f});
  lin.forward(y, x, w, {}, 1, 1, 1, 1);
  EXPECT_EQ(host(y)[0], 2.0f);  // same iteration: the copy made at its first use
  lin.begin_iteration();
  lin.forward(y, x, w, {}, 1, 1, 1, 1);
  EXPECT_EQ(host(y)[0], 4.0f);
}

/// A cpu backend that counts the elements it rounds to bf16.
class CountingBackend : public cpu::CpuBackend {
 public:
  void convert_to_bf16(BSpan dst, CFSpan src) override {
    rounded += static_cast<int64_t>(src.size());
    cpu::CpuBackend::convert_to_bf16(dst, src);
  }
  int64_t rounded = 0;
};

// A wgrad right after the dgrad of the same output gradient reuses its bf16 rounding (the same
// bits: the results equal those of a separate rounding); after any other call in between, or
// for another gradient, it rounds again.
TEST(LinearLayers, Bf16WgradReusesTheDgradsRoundedGradient) {
  CountingBackend be;
  LinearLayers lin(be, Precision::kBf16);
  const Tensor dy = tensor(be, {kOffGrid, 2.0f});                       // [1, 1, 2]
  const Tensor w = tensor(be, {1.0f, 0.0f, 0.0f, kOffGrid, 1.0f, 1.0f});  // [2, 3]
  const Tensor x = tensor(be, {3.0f, kOffGrid, -1.0f});                 // [1, 1, 3]
  Tensor dx = tensor(be, {0.0f, 0.0f, 0.0f});
  Tensor dw(be, 6), db(be, 2);
  lin.backward_data(dx, dy, w, 1, 1, 3, 2);
  EXPECT_EQ(be.rounded, 2 + 6);  // dy and the weight's copy
  lin.backward_weight(dw, db, dy, x, 1, 1, 3, 2);
  EXPECT_EQ(be.rounded, 2 + 6 + 3);  // x only
  EXPECT_EQ(host(dw), (std::vector<float>{3.0f, 1.0f, -1.0f, 6.0f, 2.0f, -2.0f}));
  EXPECT_EQ(host(db), (std::vector<float>{1.0f, 2.0f}));
  // Used once: a second wgrad of the same gradient rounds it again.
  lin.backward_weight(dw, db, dy, x, 1, 1, 3, 2);
  EXPECT_EQ(be.rounded, 2 + 6 + 3 + 2 + 3);
  // A forward between the dgrad and the wgrad drops it.
  lin.backward_data(dx, dy, w, 1, 1, 3, 2);
  Tensor y(be, 2);
  lin.forward(y, x, w, {}, 1, 1, 3, 2);
  const int64_t before = be.rounded;
  lin.backward_weight(dw, db, dy, x, 1, 1, 3, 2);
  EXPECT_EQ(be.rounded, before + 2 + 3);
  // Another gradient of the same size is rounded, not taken for the kept one.
  lin.backward_data(dx, dy, w, 1, 1, 3, 2);
  const Tensor other = tensor(be, {4.0f, 8.0f});
  Tensor dw2 = tensor(be, std::vector<float>(6, 0.0f));
  const int64_t kept = be.rounded;
  lin.backward_weight(dw2, {}, other, x, 1, 1, 3, 2);
  EXPECT_EQ(be.rounded, kept + 2 + 3);
  EXPECT_EQ(host(dw2), (std::vector<float>{12.0f, 4.0f, -4.0f, 24.0f, 8.0f, -8.0f}));
}

TEST(LinearLayers, RefusesOtherPrecisions) {
  cpu::CpuBackend be;
  for (const Precision p : {Precision::kFp16, Precision::kFp8, Precision::kTf32}) {
    EXPECT_THROW(LinearLayers(be, p), UnsupportedError) << to_string(p);
  }
  EXPECT_NE(precision_summary(Precision::kBf16, be).find("attention products in fp32"),
            std::string::npos);
  EXPECT_EQ(precision_summary(Precision::kFp32, be), "");
}

}  // namespace
}  // namespace traintwin::exec
