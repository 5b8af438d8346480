// Tests of sim/cost_model: the roofline model and the measured-database model (exact hit,
// interpolation on shapes, cross-device scaling, fallback), with numbers worked by hand.
// Device peaks as in shared/validation/calibration.yaml: H100-SXM 989 TFLOP/s bf16, 3350 GB/s;
// A100-SXM 312 TFLOP/s bf16, 2039 GB/s.
#include "sim/cost_model.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "core/error.hpp"
#include "traces/cost_db.hpp"

namespace traintwin {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr double kUs = 1e-6;
// Relative tolerance for values worked by hand to ~10 significant digits.
constexpr double kRel = 1e-9;

GpuSpec h100() {
  GpuSpec g;
  g.name = "H100-SXM-80GB";
  g.memory_bytes = 81559.0 * 1024 * 1024;
  g.hbm_bandwidth_Bps = 3350e9;
  g.peak.fp32_FLOPs = 67e12;
  g.peak.tf32_FLOPs = 494.5e12;
  g.peak.fp16_FLOPs = 989e12;
  g.peak.bf16_FLOPs = 989e12;
  return g;
}

GpuSpec a100() {
  GpuSpec g;
  g.name = "A100-SXM-80GB";
  g.memory_bytes = 81920.0 * 1024 * 1024;
  g.hbm_bandwidth_Bps = 2039e9;
  g.peak.fp32_FLOPs = 19.5e12;
  g.peak.tf32_FLOPs = 156e12;
  g.peak.fp16_FLOPs = 312e12;
  g.peak.bf16_FLOPs = 312e12;
  return g;
}

/// gemm_* kernel as the catalogue (core/program.cpp) builds it: 2mnk FLOPs,
/// (mk + kn + mn) x 2 bytes in bf16.
Kernel gemm(const char* name, int64_t m, int64_t n, int64_t k, int64_t tp = 1,
            Precision dtype = Precision::kBf16) {
  const double fm = static_cast<double>(m), fn = static_cast<double>(n),
               fk = static_cast<double>(k);
  return Kernel{KernelKey{name, {m, n, k}, dtype, tp}, 2 * fm * fn * fk,
                (fm * fk + fk * fn + fm * fn) * 2};
}

/// layernorm_fwd {tokens, h} in bf16: 8 FLOPs and 2 x 2 bytes per element.
Kernel layernorm_fwd(int64_t tokens, int64_t h) {
  const double n = static_cast<double>(tokens * h);
  return Kernel{KernelKey{"layernorm_fwd", {tokens, h}, Precision::kBf16, 1}, 8 * n, 4 * n};
}

/// A database entry with `median_us` (p10 = p90 = median) and the kernel's work.
KernelMeasurement measured(const Kernel& k, double median_us) {
  return KernelMeasurement{k.key, median_us, median_us, median_us, 20, k.flops, k.bytes};
}

std::shared_ptr<CostDatabase> empty_db() {
  return std::make_shared<CostDatabase>(
      CostDbDevice{"NVIDIA H100 80GB HBM3", 132, 1980, 85520809984, "9.0"},
      CostDbVersions{"550.54.15", "12.4", "12.4.5", "2.21.5", "0.1.0"});
}

void expect_rel(double actual, double expected) {
  EXPECT_NEAR(actual, expected, std::fabs(expected) * kRel) << "expected " << expected;
}

// ---- names and classes ---------------------------------------------------------------------

TEST(CostSourceNames, ToString) {
  EXPECT_STREQ(to_string(CostSource::kMeasured), "measured");
  EXPECT_STREQ(to_string(CostSource::kScaled), "scaled");
  EXPECT_STREQ(to_string(CostSource::kRoofline), "roofline");
}

TEST(CostKernelClass, ByNamePrefix) {
  EXPECT_EQ(kernel_class("gemm_fwd"), KernelClass::kGemm);
  EXPECT_EQ(kernel_class("gemm_dgrad"), KernelClass::kGemm);
  EXPECT_EQ(kernel_class("gemm_wgrad"), KernelClass::kGemm);
  EXPECT_EQ(kernel_class("grouped_gemm_fwd"), KernelClass::kGemm);  // MoE experts
  EXPECT_EQ(kernel_class("grouped_gemm_wgrad"), KernelClass::kGemm);
  EXPECT_EQ(kernel_class("moe_permute_fwd"), KernelClass::kMemory);
  EXPECT_EQ(kernel_class("attention_fwd"), KernelClass::kAttention);
  EXPECT_EQ(kernel_class("flash_attention_bwd"), KernelClass::kAttention);
  EXPECT_EQ(kernel_class("fused_attention_fwd"), KernelClass::kAttention);
  for (const char* n : {"layernorm_fwd", "dropout_add_bwd", "gelu_fwd", "embedding_bwd",
                        "cross_entropy_max", "grad_norm", "adamw_step", "softmax_fwd", "gemm"}) {
    EXPECT_EQ(kernel_class(n), KernelClass::kMemory) << n;
  }
  EXPECT_STREQ(to_string(KernelClass::kAttention), "attention");
}

// ---- roofline ------------------------------------------------------------------------------

// 4096^3 bf16 GEMM on H100: 2 x 4096^3 = 137,438,953,472 FLOPs / (989e12 x 0.75) = 185.2901 us
// (bytes: 3 x 4096^2 x 2 = 100,663,296 / (3350e9 x 0.8) = 37.56 us, below) + 4 us launch.
// Blackwell is told by name, and gets its own fitted set (sim/cost_model.cpp): every GPU before
// it shares the set fitted on calibration.yaml.
TEST(CostRoofline, BlackwellHasItsOwnEfficiencies) {
  const auto named = [](const char* n) {
    GpuSpec g;
    g.name = n;
    return g;
  };
  EXPECT_TRUE(is_blackwell(named("GB200-186GB")));
  EXPECT_TRUE(is_blackwell(named("B200-SXM-180GB")));
  EXPECT_FALSE(is_blackwell(named("H100-SXM-80GB")));
  EXPECT_FALSE(is_blackwell(named("A100-SXM-80GB")));
  EXPECT_FALSE(is_blackwell(named("GB")));
  EXPECT_FALSE(is_blackwell(named("BigGPU")));
  const RooflineEfficiency hopper = default_roofline_efficiency(named("H100-SXM-80GB"));
  const RooflineEfficiency blackwell = default_roofline_efficiency(named("GB200-186GB"));
  EXPECT_DOUBLE_EQ(hopper.gemm, default_roofline_efficiency(named("A100-SXM-80GB")).gemm);
  EXPECT_LT(blackwell.gemm, hopper.gemm);
  EXPECT_LT(blackwell.memory, hopper.memory);
}

TEST(CostRoofline, GemmIsComputeBound) {
  const auto model = make_roofline_cost_model();
  const KernelCost c = model->duration(gemm("gemm_fwd", 4096, 4096, 4096), h100());
  EXPECT_EQ(c.source, CostSource::kRoofline);
  expect_rel(c.seconds, 137438953472.0 / (989e12 * 0.75) + 4e-6);
  expect_rel(c.seconds, 189.29012938591168 * kUs);
}

// Attention runs at 0.55 of peak: attention_fwd {b 1, heads 16, s 2048, head_dim 128} has
// 4 x 16 x 2048^2 x 128 = 34,359,738,368 FLOPs -> / (989e12 x 0.55) = 63.1656 us + 4 us.
TEST(CostRoofline, AttentionUsesItsEfficiency) {
  const auto model = make_roofline_cost_model();
  const Kernel k{KernelKey{"flash_attention_fwd", {1, 16, 2048, 128}, Precision::kBf16, 1},
                 34359738368.0, 4.0 * 16 * 2048 * 128 * 2};
  expect_rel(model->duration(k, h100()).seconds, 34359738368.0 / (989e12 * 0.55) + 4e-6);
}

// layernorm_fwd {8192, 4096}: n = 33,554,432; bytes 4n = 134,217,728 / (3350e9 x 0.8)
// = 50.0812 us; FLOPs 8n = 268,435,456 / (67e12 fp32 x 0.5) = 8.013 us (below) -> 54.0812 us.
TEST(CostRoofline, ElementwiseKernelIsMemoryBound) {
  const auto model = make_roofline_cost_model();
  const KernelCost c = model->duration(layernorm_fwd(8192, 4096), h100());
  expect_rel(c.seconds, 50.081241791044775 * kUs + 4e-6);
}

// The regime switches at the ridge point (989e12 x 0.75) / (3350e9 x 0.8) = 276.77 FLOP/byte:
// below it the duration is the memory time, above it the compute time.
TEST(CostRoofline, RegimeSwitchAtTheRidgePoint) {
  const auto model = make_roofline_cost_model();
  const double bytes = 1e9;
  const double memory_s = bytes / (3350e9 * 0.8);  // 373.134 us
  const double ridge = 989e12 * 0.75 / (3350e9 * 0.8);
  EXPECT_NEAR(ridge, 276.7723880597015, 1e-9);
  auto at = [&](double intensity) {
    const Kernel k{KernelKey{"gemm_fwd", {1, 1, 1}, Precision::kBf16, 1}, intensity * bytes, bytes};
    return model->duration(k, h100()).seconds - 4e-6;
  };
  expect_rel(at(0.5 * ridge), memory_s);
  expect_rel(at(0.999 * ridge), memory_s);
  expect_rel(at(ridge), memory_s);
  expect_rel(at(1.001 * ridge), 1.001 * memory_s);
  expect_rel(at(2 * ridge), 2 * memory_s);
}

// An unknown name is costed generically: its FLOPs on CUDA cores (fp32 peak x 0.5), its bytes
// on HBM. 1e12 FLOPs / (67e12 x 0.5) = 29,850.75 us; 1 MB / 2680 GB/s = 0.37 us.
TEST(CostRoofline, UnknownNameCostedByFlopsAndBytes) {
  const auto model = make_roofline_cost_model();
  const Kernel k{KernelKey{"softmax_fwd", {4096, 4096}, Precision::kBf16, 1}, 1e12, 1e6};
  expect_rel(model->duration(k, h100()).seconds, 1e12 / (67e12 * 0.5) + 4e-6);
}

TEST(CostRoofline, EfficienciesAreParameters) {
  RooflineEfficiency eff;
  eff.gemm = 0.5;
  eff.launch_overhead_s = 0;
  const auto model = make_roofline_cost_model(eff);
  // 2 x 4096^3 / (312e12 x 0.5) = 881.0189 us on A100.
  expect_rel(model->duration(gemm("gemm_fwd", 4096, 4096, 4096), a100()).seconds,
             137438953472.0 / 156e12);
}

TEST(CostRoofline, RejectsBadEfficienciesAndMissingPeaks) {
  RooflineEfficiency eff;
  eff.memory = 0;
  EXPECT_THROW(make_roofline_cost_model(eff), InvalidArgument);
  eff = {};
  eff.gemm = 1.5;
  EXPECT_THROW(make_roofline_cost_model(eff), InvalidArgument);
  eff = {};
  eff.launch_overhead_s = -1e-6;
  EXPECT_THROW(make_roofline_cost_model(eff), InvalidArgument);

  GpuSpec no_bf16 = h100();
  no_bf16.peak.bf16_FLOPs = 0;
  const auto model = make_roofline_cost_model();
  try {
    model->duration(gemm("gemm_fwd", 64, 64, 64), no_bf16);
    ADD_FAILURE() << "expected a CostModelError";
  } catch (const CostModelError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("gemm_fwd[64,64,64] bf16 tp1"), HasSubstr("H100"),
                                HasSubstr("bf16 peak")));
  }
  Kernel negative = gemm("gemm_fwd", 64, 64, 64);
  negative.bytes = -1;
  EXPECT_THROW(model->duration(negative, h100()), InvalidArgument);
}

// ---- database: exact hit, interpolation, extrapolation ---------------------------------------

/// H100 database with two GEMMs of the same family at known achieved rates:
///   [1024, 4096, 4096]: 34,359,738,368 FLOPs at 400 TFLOP/s -> 85.89934592 us;
///   [4096, 4096, 4096]: 137,438,953,472 FLOPs at 600 TFLOP/s -> 229.0649224533 us;
/// and two layernorms at known bandwidths:
///   {4096, 4096}: 67,108,864 bytes at 2.0 TB/s -> 33.554432 us;
///   {16384, 4096}: 268,435,456 bytes at 3.0 TB/s -> 89.4784853333 us.
std::shared_ptr<CostDatabase> gemm_db() {
  auto db = empty_db();
  db->add(measured(gemm("gemm_fwd", 1024, 4096, 4096), 85.89934592));
  db->add(measured(gemm("gemm_fwd", 4096, 4096, 4096), 137438953472.0 / 600e12 / kUs));
  db->add(measured(layernorm_fwd(4096, 4096), 33.554432));
  db->add(measured(layernorm_fwd(16384, 4096), 268435456.0 / 3e12 / kUs));
  return db;
}

std::unique_ptr<CostModel> h100_db_model(std::shared_ptr<CostDatabase> db,
                                         const DatabaseCostOptions& options = {}) {
  return make_database_cost_model(std::move(db), h100(), make_roofline_cost_model(), options);
}

TEST(CostDatabaseModel, ExactHitReturnsTheMedian) {
  auto db = empty_db();
  const Kernel k = gemm("gemm_dgrad", 8192, 4608, 12288, 8);
  db->add(KernelMeasurement{k.key, 1234.5, 1200.0, 1300.0, 50, k.flops, k.bytes});
  const auto model = h100_db_model(db);
  const KernelCost c = model->duration(k, h100());
  EXPECT_EQ(c.source, CostSource::kMeasured);
  EXPECT_DOUBLE_EQ(c.seconds, 1234.5e-6);
}

// A row with the mean of its runs charges the mean (the expected duration a sum of runs adds
// up to), also through an achieved rate: [2048, 4608, 12288] has half the FLOPs of the row, so
// it takes 1500 / 2 us at the row's mean rate, not 1234.5 / 2 at its median's.
TEST(CostDatabaseModel, ARowWithItsMeanChargesTheMean) {
  auto db = empty_db();
  const Kernel k = gemm("gemm_dgrad", 8192, 4608, 12288, 8);
  KernelMeasurement row{k.key, 1234.5, 1200.0, 1300.0, 50, k.flops, k.bytes};
  row.mean_us = 1500.0;
  db->add(row);
  const auto model = h100_db_model(db);
  EXPECT_DOUBLE_EQ(model->duration(k, h100()).seconds, 1500e-6);
  const KernelCost half = model->duration(gemm("gemm_dgrad", 4096, 4608, 12288, 8), h100());
  EXPECT_EQ(half.source, CostSource::kMeasured);
  expect_rel(half.seconds, 750e-6);
}

// [2048, 4096, 4096] lies halfway between the entries in ln(FLOPs): 500 TFLOP/s, so
// 68,719,476,736 / 500e12 = 137.438953472 us.
TEST(CostDatabaseModel, GemmInterpolatesAchievedRateInLogFlops) {
  const auto model = h100_db_model(gemm_db());
  const KernelCost c = model->duration(gemm("gemm_fwd", 2048, 4096, 4096), h100());
  EXPECT_EQ(c.source, CostSource::kMeasured);
  expect_rel(c.seconds, 137.438953472 * kUs);

  // [3072, 4096, 4096]: ln 3 / ln 4 = 0.792481 of the way -> 400 + 200 x 0.792481 TFLOP/s.
  const double rate = 400e12 + 200e12 * std::log(3.0) / std::log(4.0);
  expect_rel(model->duration(gemm("gemm_fwd", 3072, 4096, 4096), h100()).seconds,
             2.0 * 3072 * 4096 * 4096 / rate);
}

// A shape with exactly an entry's FLOPs (but not its key) gets that entry's rate, so the
// interpolation is exact at the entries: [4096, 1024, 4096] has the FLOPs of [1024, 4096, 4096]
// (400 TFLOP/s); [8192, 2048, 4096] those of [4096, 4096, 4096] (600 TFLOP/s).
TEST(CostDatabaseModel, InterpolationIsExactAtTheEntries) {
  const auto model = h100_db_model(gemm_db());
  expect_rel(model->duration(gemm("gemm_fwd", 4096, 1024, 4096), h100()).seconds,
             85.89934592 * kUs);
  expect_rel(model->duration(gemm("gemm_fwd", 8192, 2048, 4096), h100()).seconds,
             229.06492245333334 * kUs);
}

// layernorm_fwd {8192, 4096}: 134,217,728 bytes, halfway in ln(bytes) -> 2.5 TB/s -> 53.6870912 us.
TEST(CostDatabaseModel, MemoryBoundInterpolatesAchievedBandwidth) {
  const auto model = h100_db_model(gemm_db());
  const KernelCost c = model->duration(layernorm_fwd(8192, 4096), h100());
  EXPECT_EQ(c.source, CostSource::kMeasured);
  expect_rel(c.seconds, 53.6870912 * kUs);
}

// Outside the measured range, the nearest entry's rate within max_extrapolation (4x work):
// [8192, 4096, 4096] = 2x the largest at 600 TFLOP/s -> 458.1298449 us; [256, 4096, 4096] =
// 1/4 of the smallest at 400 TFLOP/s -> 21.47483648 us; 8x is beyond, so roofline.
TEST(CostDatabaseModel, ExtrapolatesAtTheNearestRateWithinALimit) {
  const auto model = h100_db_model(gemm_db());
  KernelCost c = model->duration(gemm("gemm_fwd", 8192, 4096, 4096), h100());
  EXPECT_EQ(c.source, CostSource::kMeasured);
  expect_rel(c.seconds, 458.12984490666667 * kUs);
  c = model->duration(gemm("gemm_fwd", 256, 4096, 4096), h100());
  EXPECT_EQ(c.source, CostSource::kMeasured);
  expect_rel(c.seconds, 21.47483648 * kUs);

  const Kernel far = gemm("gemm_fwd", 32768, 4096, 4096);
  c = model->duration(far, h100());
  EXPECT_EQ(c.source, CostSource::kRoofline);
  expect_rel(c.seconds, far.flops / (989e12 * 0.75) + 4e-6);

  DatabaseCostOptions unbounded;
  unbounded.max_extrapolation = std::numeric_limits<double>::infinity();
  c = h100_db_model(gemm_db(), unbounded)->duration(far, h100());
  EXPECT_EQ(c.source, CostSource::kMeasured);
  expect_rel(c.seconds, far.flops / 600e12);

  DatabaseCostOptions none;
  none.max_extrapolation = 1;
  EXPECT_EQ(
      h100_db_model(gemm_db(), none)->duration(gemm("gemm_fwd", 8192, 4096, 4096), h100()).source,
      CostSource::kRoofline);
  none.max_extrapolation = 0.5;
  EXPECT_THROW(h100_db_model(gemm_db(), none), InvalidArgument);
}

// Only the same name, dtype and tp are evidence: another tp, dtype or GEMM variant falls back.
TEST(CostDatabaseModel, InterpolatesOnlyWithinTheFamily) {
  const auto model = h100_db_model(gemm_db());
  EXPECT_EQ(model->duration(gemm("gemm_fwd", 2048, 4096, 4096, 1, Precision::kFp16), h100()).source,
            CostSource::kRoofline);
  EXPECT_EQ(model->duration(gemm("gemm_wgrad", 2048, 4096, 4096), h100()).source,
            CostSource::kRoofline);
}

// A GEMM whose TP size has no family takes the nearest family of another TP size (the TP size
// in the key is the layout's, not the GEMM's: an MoE expert GEMM is keyed by ETP): the TP 8
// 2048 x 4096 x 4096 GEMM gets the TP 1 family's interpolated 137.44 us exactly; the TP 8 family,
// once it has a row within reach, is its own again; a memory-bound kernel never crosses (its
// bytes, and so its rate, depend on the layout).
TEST(CostDatabaseModel, GemmWithoutItsTpFamilyTakesTheNearestOtherTp) {
  auto db = gemm_db();
  const auto model = h100_db_model(db);
  const KernelCost c = model->duration(gemm("gemm_fwd", 2048, 4096, 4096, 8), h100());
  EXPECT_EQ(c.source, CostSource::kMeasured);
  expect_rel(c.seconds, 137.438953472 * kUs);
  Kernel ln = layernorm_fwd(8192, 4096);
  ln.key.tp = 8;
  EXPECT_EQ(model->duration(ln, h100()).source, CostSource::kRoofline);
  db->add(measured(gemm("gemm_fwd", 2048, 4096, 4096, 8), 200.0));
  const auto own = h100_db_model(db);
  expect_rel(own->duration(gemm("gemm_fwd", 2048, 4096, 8192, 8), h100()).seconds, 400.0 * kUs);
}

// 2048^3: 17,179,869,184 FLOPs / 741.75e12 = 23.16 us > 25,165,824 bytes / 2680e9 = 9.39 us.
TEST(CostDatabaseModel, FallbackWhenMissing) {
  const Kernel k = gemm("gemm_fwd", 2048, 2048, 2048);
  const auto model = h100_db_model(empty_db());
  const KernelCost c = model->duration(k, h100());
  EXPECT_EQ(c.source, CostSource::kRoofline);
  expect_rel(c.seconds, k.flops / (989e12 * 0.75) + 4e-6);

  const auto strict = make_database_cost_model(empty_db(), h100(), nullptr);
  try {
    strict->duration(k, h100());
    ADD_FAILURE() << "expected a CostModelError";
  } catch (const CostModelError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("gemm_fwd[2048,2048,2048] bf16 tp1"),
                                HasSubstr("not in the cost database"), HasSubstr("H100")));
  }
  EXPECT_THROW(make_database_cost_model(nullptr, h100(), nullptr), InvalidArgument);
}

// ---- database: cross-device scaling --------------------------------------------------------

// 4096^3 GEMM: 137,438,953,472 FLOPs / 100,663,296 bytes = 1365.3 FLOP/byte > H100 ridge
// 989e12 / 3350e9 = 295.22: compute-bound, x 989 / 312 -> 229.0649 x 3.169872 = 726.1064 us.
TEST(CostDatabaseModel, ScalesComputeBoundByPeakRatio) {
  const auto model = h100_db_model(gemm_db());
  const KernelCost c = model->duration(gemm("gemm_fwd", 4096, 4096, 4096), a100());
  EXPECT_EQ(c.source, CostSource::kScaled);
  expect_rel(c.seconds, 229.06492245333334 * kUs * 989.0 / 312.0);
  expect_rel(c.seconds, 726.1064368793162 * kUs);
}

// layernorm_fwd {8192, 4096}: 2 FLOP/byte < 295.22: memory-bound, x 3350 / 2039;
// measured 60 us on H100 -> 98.5777 us on A100.
TEST(CostDatabaseModel, ScalesMemoryBoundByBandwidthRatio) {
  auto db = empty_db();
  db->add(measured(layernorm_fwd(8192, 4096), 60.0));
  const auto model = h100_db_model(db);
  const KernelCost c = model->duration(layernorm_fwd(8192, 4096), a100());
  EXPECT_EQ(c.source, CostSource::kScaled);
  expect_rel(c.seconds, 60.0 * kUs * 3350.0 / 2039.0);
  expect_rel(c.seconds, 98.57773418342325 * kUs);
}

// The regime is decided on the database device's ridge point (295.22 FLOP/byte), not the
// target's (312e12 / 2039e9 = 153.02): a kernel at 200 FLOP/byte is memory-bound on H100.
TEST(CostDatabaseModel, ScalingRegimeSwitchesAtTheDatabaseRidgePoint) {
  auto db = empty_db();
  const double bytes = 1e8;
  const double ridge = 989e12 / 3350e9;
  auto kernel_at = [&](const char* name, double intensity) {
    return Kernel{KernelKey{name, {1000}, Precision::kBf16, 1}, intensity * bytes, bytes};
  };
  db->add(measured(kernel_at("below", 0.99 * ridge), 100.0));
  db->add(measured(kernel_at("at200", 200.0), 100.0));
  db->add(measured(kernel_at("above", 1.01 * ridge), 100.0));
  const auto model = h100_db_model(db);
  expect_rel(model->duration(kernel_at("below", 0.99 * ridge), a100()).seconds,
             100e-6 * 3350.0 / 2039.0);
  expect_rel(model->duration(kernel_at("at200", 200.0), a100()).seconds, 100e-6 * 3350.0 / 2039.0);
  expect_rel(model->duration(kernel_at("above", 1.01 * ridge), a100()).seconds,
             100e-6 * 989.0 / 312.0);
}

// Interpolated on the database device, then scaled: 137.438953472 us x 989 / 312.
TEST(CostDatabaseModel, InterpolatesThenScales) {
  const auto model = h100_db_model(gemm_db());
  const KernelCost c = model->duration(gemm("gemm_fwd", 2048, 4096, 4096), a100());
  EXPECT_EQ(c.source, CostSource::kScaled);
  expect_rel(c.seconds, 137.438953472 * kUs * 989.0 / 312.0);
}

// A what-if GPU with the H100's name but twice its HBM bandwidth is another device: a
// memory-bound kernel halves, a compute-bound one keeps its time (989 / 989), both "scaled".
TEST(CostDatabaseModel, WhatIfDeviceWithTheSameNameIsScaled) {
  GpuSpec fast_hbm = h100();
  fast_hbm.hbm_bandwidth_Bps *= 2;
  auto db = gemm_db();
  const auto model = h100_db_model(db);
  KernelCost c = model->duration(layernorm_fwd(4096, 4096), fast_hbm);
  EXPECT_EQ(c.source, CostSource::kScaled);
  expect_rel(c.seconds, 33.554432 * kUs / 2);
  c = model->duration(gemm("gemm_fwd", 4096, 4096, 4096), fast_hbm);
  EXPECT_EQ(c.source, CostSource::kScaled);
  expect_rel(c.seconds, 229.06492245333334 * kUs);
}

// A miss on another device goes to the roofline of the target GPU, not of the database's:
// 17,179,869,184 FLOPs / (312e12 x 0.75) = 73.42 us (bytes: 25,165,824 / 1631.2e9 = 15.43 us).
TEST(CostDatabaseModel, FallbackUsesTheTargetGpu) {
  const Kernel k = gemm("gemm_fwd", 2048, 2048, 2048);
  const KernelCost c = h100_db_model(empty_db())->duration(k, a100());
  EXPECT_EQ(c.source, CostSource::kRoofline);
  expect_rel(c.seconds, k.flops / (312e12 * 0.75) + 4e-6);
}

}  // namespace
// The optimizer's zero grad buffer and grad clip scale kernels go through the memory-bound
// roofline like every elementwise kernel. GPT h 64, 1 layer, 8 heads, ffn 256, s 32, V 1024,
// TP 2, bf16: TP rank 0 holds 60,128 parameters (tests/core/program_test.cpp
// ZeroGradBufferAndGradClipScale). zero_grad_buffer writes 60,128 x 4 = 240,512 bytes
// / (3350e9 x 0.8) = 89.743 ns + 4 us; grad_clip_scale reads and writes 8 x 60,128 = 481,024
// bytes -> 179.487 ns (its 60,128 FLOPs / (67e12 x 0.5) = 1.8 ns are below) + 4 us.
TEST(CostRoofline, ZeroGradBufferAndGradClipScaleAreMemoryBound) {
  Scenario s;
  s.name = "optimizer-kernels";
  s.model = ModelSpec{"gpt", 1, 64, 8, 256, 32, 1024};
  s.parallel.tensor_model_parallel_size = 2;
  s.training.micro_batch_size = 1;
  s.training.global_batch_size = 1;
  s.training.precision = Precision::kBf16;
  s.cluster.num_gpus = 2;
  const Program prog = build_program(s, {0});
  const auto model = make_roofline_cost_model();
  int found = 0;
  for (const Kernel& k : prog.kernels) {
    if (k.key.name == "zero_grad_buffer") {
      ++found;
      EXPECT_EQ(k.bytes, 240512.0);
      expect_rel(model->duration(k, h100()).seconds, 240512.0 / (3350e9 * 0.8) + 4e-6);
      expect_rel(model->duration(k, h100()).seconds, 4.089743283582089e-6);
    } else if (k.key.name == "grad_clip_scale") {
      ++found;
      EXPECT_EQ(k.bytes, 481024.0);
      expect_rel(model->duration(k, h100()).seconds, 481024.0 / (3350e9 * 0.8) + 4e-6);
      expect_rel(model->duration(k, h100()).seconds, 4.179486567164179e-6);
    }
  }
  EXPECT_EQ(found, 2);
}

}  // namespace traintwin
