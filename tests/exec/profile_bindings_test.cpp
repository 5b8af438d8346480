// exec::profile_kernel times a kernel as `train` runs it (exec/profile_calls.cpp): under bf16
// training the linear layers' GEMMs with the executor's roundings of its fp32 activations and
// widenings of the results (exec/linear.hpp), or alone on bf16 operands with
// ProfileOptions::bf16_activations (Megatron's layout); flash and fused attention with the
// packing of the queries and K/V out of the QKV rows and, in the backward, the scatter of their
// gradients back (exec/gpt_model_attention.cpp); the attention products in the arithmetic the
// executor picks (exec::set_matmul_arithmetic). A cpu backend that claims bf16 arithmetic counts
// the elements each call converts or copies, so every count below is worked from the kernel's
// shape.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

#include "core/error.hpp"
#include "core/scenario.hpp"
#include "exec/cpu/cpu_backend.hpp"
#include "exec/linear.hpp"
#include "exec/profile.hpp"
#include "tests/tiny_training.hpp"

namespace traintwin::exec {
namespace {

/// The cpu backend (its bf16 GEMMs are an exact emulation) claiming bf16 arithmetic, so that
/// profile takes the bf16 bindings; counts the elements converted and copied.
class CountingBackend : public cpu::CpuBackend {
 public:
  bool has_bf16_arithmetic() const override { return true; }
  void set_float32_matmul_precision(Float32MatmulPrecision p) override { precision = p; }
  void convert_to_bf16(BSpan dst, CFSpan src) override {
    rounded += static_cast<int64_t>(src.size());
    cpu::CpuBackend::convert_to_bf16(dst, src);
  }
  void convert_from_bf16(FSpan dst, CBSpan src) override {
    widened += static_cast<int64_t>(src.size());
    cpu::CpuBackend::convert_from_bf16(dst, src);
  }
  void accumulate_from_bf16(FSpan dst, CBSpan src) override {
    widened += static_cast<int64_t>(src.size());
    cpu::CpuBackend::accumulate_from_bf16(dst, src);
  }
  void copy_2d(FSpan dst, int64_t dst_pitch, CFSpan src, int64_t src_pitch, int64_t width,
               int64_t height) override {
    copied += width * height;
    cpu::CpuBackend::copy_2d(dst, dst_pitch, src, src_pitch, width, height);
  }
  std::optional<Float32MatmulPrecision> precision;
  int64_t rounded = 0, widened = 0, copied = 0;
};

Scenario tiny(const std::vector<Override>& overrides) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("traintwin-profile-bindings-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const Scenario s =
      load_scenario(testing::write_tiny_scenario(dir, (dir / "none").string()), overrides);
  std::filesystem::remove_all(dir);
  return s;
}

ProfileTarget target(const Scenario& s, const std::string& name) {
  for (const ProfileTarget& t : profile_targets(s)) {
    if (t.kernel.key.name == name) return t;
  }
  ADD_FAILURE() << name << " is not a kernel of the scenario";
  return {};
}

/// `runs` timed runs over exactly two input sets (rotate_bytes 1: the fewest profile makes).
ProfileOptions exact_runs(int runs, bool bf16_activations) {
  ProfileOptions o;
  o.warmup = 0;
  o.repeats = runs;
  o.min_time_s = 0;
  o.rotate_bytes = 1;
  o.bf16_activations = bf16_activations;
  return o;
}

TEST(SetMatmulArithmetic, Bf16TrainingMultipliesTheAttentionInBf16WhereTheBackendCan) {
  Scenario s = tiny({{"training.precision", "bf16"}});
  CountingBackend claims;
  set_matmul_arithmetic(claims, s.training);
  EXPECT_EQ(claims.precision, Float32MatmulPrecision::kMedium);
  cpu::CpuBackend emulates;  // no bf16 arithmetic: fp32 products, nothing requested
  EXPECT_NO_THROW(set_matmul_arithmetic(emulates, s.training));
  // fp32 training: float32_matmul_precision as given, refused where the backend lacks it.
  s = tiny({{"training.float32_matmul_precision", "high"}});
  CountingBackend other;
  set_matmul_arithmetic(other, s.training);
  EXPECT_EQ(other.precision, Float32MatmulPrecision::kHigh);
  EXPECT_THROW(set_matmul_arithmetic(emulates, s.training), UnsupportedError);
}

// The forward rounds its [m, k] activation and widens its [m, n] result at every run; the
// weight's (and bias's) bf16 copy is made once per input set (once per iteration live), before the
// timing. dgrad rounds the [m, n] output gradient and adds its [m, k] result into fp32; wgrad
// rounds only the [m, k] activation (the gradient's rounding is its dgrad's).
TEST(ProfileBindings, Bf16LinearLayersPayTheExecutorsConversionsAtEveryRun) {
  const Scenario s = tiny({{"training.precision", "bf16"}});
  constexpr int kRuns = 5;
  for (const char* name : {"gemm_fwd", "gemm_dgrad", "gemm_wgrad"}) {
    SCOPED_TRACE(name);
    const ProfileTarget t = target(s, name);
    ASSERT_EQ(t.kernel.key.dtype, Precision::kBf16);
    const int64_t m = t.kernel.key.shape[0], n = t.kernel.key.shape[1], k = t.kernel.key.shape[2];
    const int64_t bias = t.role == Role::kQkv || t.role == Role::kFc1 ? n : 0;
    CountingBackend be;
    (void)profile_kernel(be, s, t, exact_runs(kRuns, false));
    const std::string v = name;
    if (v == "gemm_fwd") {
      EXPECT_EQ(be.rounded, 2 * (m * k + n * k + bias) + kRuns * m * k);
      EXPECT_EQ(be.widened, (2 + kRuns) * m * n);
    } else if (v == "gemm_dgrad") {
      EXPECT_EQ(be.rounded, 2 * (m * n + n * k) + kRuns * m * n);
      EXPECT_EQ(be.widened, (2 + kRuns) * m * k);
    } else {
      EXPECT_EQ(be.rounded, 2 * m * n + kRuns * m * k);
      EXPECT_EQ(be.widened, 0);
    }
    EXPECT_EQ(be.precision, Float32MatmulPrecision::kMedium);
  }
}

// With bf16_activations the GEMM alone: its operands (output, activation, weight and bias)
// are rounded once per input set, and no run converts anything.
TEST(ProfileBindings, Bf16ActivationsTimeTheGemmAlone) {
  const Scenario s = tiny({{"training.precision", "bf16"}});
  const ProfileTarget t = target(s, "gemm_fwd");
  const int64_t m = t.kernel.key.shape[0], n = t.kernel.key.shape[1], k = t.kernel.key.shape[2];
  const int64_t bias = t.role == Role::kQkv || t.role == Role::kFc1 ? n : 0;
  CountingBackend five, fifty;
  (void)profile_kernel(five, s, t, exact_runs(5, true));
  (void)profile_kernel(fifty, s, t, exact_runs(50, true));
  EXPECT_EQ(five.rounded, 2 * (m * n + m * k + n * k + bias));
  EXPECT_EQ(fifty.rounded, five.rounded);
  EXPECT_EQ(five.widened, 0);
  EXPECT_EQ(fifty.widened, 0);
}

// Flash attention (CP 1): every forward run packs the queries [rows, heads x hd] and K/V
// [rows, 2 x groups x hd] out of the QKV rows; every backward run packs them again and scatters
// dq and dK/dV back into the QKV rows' gradient: twice as many elements.
TEST(ProfileBindings, FlashAttentionPacksAndScattersAsTheModel) {
  const Scenario s = tiny({{"training.attention_backend", "flash"},
                           {"model.architecture", "llama"},
                           {"model.num_query_groups", "2"}});
  const int64_t rows = s.training.micro_batch_size * s.model.seq_length;
  const int64_t hd = s.model.hidden_size / s.model.num_attention_heads;
  const int64_t packed = rows * (s.model.num_attention_heads + 2 * 2) * hd;
  constexpr int kRuns = 3;
  CountingBackend fwd, bwd;
  (void)profile_kernel(fwd, s, target(s, "flash_attention_fwd"), exact_runs(kRuns, false));
  (void)profile_kernel(bwd, s, target(s, "flash_attention_bwd"), exact_runs(kRuns, false));
  EXPECT_EQ(fwd.copied, kRuns * packed);
  EXPECT_EQ(bwd.copied, 2 * kRuns * packed);
}

// Fused attention (CP 1) times the model's one Backend call on the QKV rows; on a backend without
// its own fused kernel (the CPU's default) that call packs and scatters as flash does, so the
// copies are flash's.
TEST(ProfileBindings, FusedAttentionTimesTheModelsOneCall) {
  const Scenario s = tiny({{"training.attention_backend", "fused"}});
  const int64_t rows = s.training.micro_batch_size * s.model.seq_length;
  const int64_t packed = rows * 3 * s.model.hidden_size;
  constexpr int kRuns = 3;
  CountingBackend fwd, bwd;
  (void)profile_kernel(fwd, s, target(s, "fused_attention_fwd"), exact_runs(kRuns, false));
  (void)profile_kernel(bwd, s, target(s, "fused_attention_bwd"), exact_runs(kRuns, false));
  EXPECT_EQ(fwd.copied, kRuns * packed);
  EXPECT_EQ(bwd.copied, 2 * kRuns * packed);
}

}  // namespace
}  // namespace traintwin::exec
