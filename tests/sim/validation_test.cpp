#include "sim/validation.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "core/flops.hpp"

namespace traintwin {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const fs::path kSource = TRAINTWIN_SOURCE_DIR;
const fs::path kCalibration = kSource / ".." / "shared" / "validation" / "calibration.yaml";

// The shared calibration file: 8 cases, 10 measured iteration times (Korthikanti et al. give two
// per model), each turned into a valid scenario on the right topology.
TEST(Validation, ReadsEveryCaseOfTheSharedCalibrationFile) {
  if (!fs::exists(kCalibration)) GTEST_SKIP() << "no " << kCalibration << " beside the checkout";
  const auto cases = load_validation_cases(kCalibration, kSource / "topologies");
  ASSERT_EQ(cases.size(), 10u);
  for (const auto& c : cases) {
    EXPECT_GT(c.measured_iteration_time_s, 0) << c.id;
    EXPECT_EQ(c.scenario.cluster.topology.filename().string(),
              c.gpu.rfind("A100", 0) == 0 ? "dgx-a100-superpod.yaml" : "dgx-h100-superpod.yaml");
  }
  // Narayanan et al. 145.6B: 148 TFLOP/s per GPU on 1536 GPUs with eq. 3's
  // F = 96 B s l h^2 (1 + s/6h + V/16lh) = 5.6417e18 FLOPs -> T = F / (148e12 x 1536) = 24.82 s.
  const auto& n145 = cases[3];
  EXPECT_EQ(n145.id, "narayanan2021-145.6B");
  EXPECT_NEAR(n145.measured_iteration_time_s, 24.817, 0.01);
  EXPECT_EQ(n145.scenario.parallel.virtual_pipeline_model_parallel_size, 2);  // 80 / (8 x 5)
  EXPECT_EQ(n145.scenario.parallel.data_parallel_size, 24);
  EXPECT_FALSE(n145.scenario.training.use_distributed_optimizer);
  // Korthikanti et al.: the two variants differ in SP and recomputation only.
  EXPECT_EQ(cases[5].id, "korthikanti2022-22B/full_recompute");
  EXPECT_FALSE(cases[5].scenario.parallel.sequence_parallel);
  EXPECT_EQ(cases[5].scenario.training.recompute_granularity, RecomputeGranularity::kFull);
  EXPECT_EQ(cases[6].id, "korthikanti2022-22B/sequence_parallel_selective_recompute");
  EXPECT_TRUE(cases[6].scenario.parallel.sequence_parallel);
  EXPECT_EQ(cases[6].scenario.training.recompute_granularity, RecomputeGranularity::kSelective);
  EXPECT_DOUBLE_EQ(cases[6].measured_iteration_time_s, 1.10);
  // DGX Cloud H100: the recipe's overlaps and flash attention.
  const auto& dgxc = cases[9];
  EXPECT_EQ(dgxc.scenario.parallel.virtual_pipeline_model_parallel_size, 12);
  EXPECT_TRUE(dgxc.scenario.training.tp_comm_overlap);
  EXPECT_EQ(dgxc.scenario.training.attention_backend, AttentionBackend::kFlash);
  EXPECT_DOUBLE_EQ(dgxc.measured_iteration_time_s, 8.309);
}

TEST(Validation, BadFilesNameTheCaseAndKey) {
  const fs::path dir = fs::temp_directory_path() / "traintwin-validation-test";
  fs::create_directories(dir);
  auto write = [&](const std::string& text) {
    std::ofstream(dir / "c.yaml") << text;
    return dir / "c.yaml";
  };
  const std::string ok_case =
      "cases:\n  - id: x\n    source: narayanan2021 Table 1\n"
      "    model: {num_layers: 2, hidden_size: 64, num_attention_heads: 4, seq_length: 32, vocab_size: 128}\n"
      "    parallelism: {tensor_model_parallel_size: 1, pipeline_model_parallel_size: 1}\n"
      "    training: {micro_batch_size: 1, global_batch_size: 8, precision: fp16}\n";
  EXPECT_NO_THROW(load_validation_cases(write(ok_case + "    cluster: {gpu: A100-SXM-80GB, num_gpus: 8}\n"
                                                   "    measured: {tflops_per_gpu: 100}\n"),
                                        kSource / "topologies"));
  try {
    load_validation_cases(write(ok_case + "    cluster: {gpu: MI300X, num_gpus: 8}\n    measured: {tflops_per_gpu: 1}\n"),
                          kSource / "topologies");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("x.cluster.gpu: 'MI300X' has no topology"));
  }
  try {
    load_validation_cases(write(ok_case + "    cluster: {gpu: A100-SXM-80GB, num_gpus: 8}\n    measured: {speed: 1}\n"),
                          kSource / "topologies");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("x.measured.speed: unknown key"));
  }
}

}  // namespace
}  // namespace traintwin
