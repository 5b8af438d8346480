#include "sim/validation.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "core/flops.hpp"
#include "core/input_file.hpp"
#include "core/params.hpp"
#include "sim/cost_model.hpp"
#include "tests/bounded_child.hpp"

namespace traintwin {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
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
  // Gradient accumulation fusion came to Megatron-LM in Feb 2022 (commit 83b1e42f30): off for
  // the SC'21 rows (Megatron of April 2021), Megatron's default (on) for every later source.
  for (const auto& c : cases) {
    EXPECT_EQ(c.scenario.training.gradient_accumulation_fusion,
              c.source.rfind("narayanan2021", 0) != 0)
        << c.id;
  }
  EXPECT_FALSE(n145.scenario.training.gradient_accumulation_fusion);
  EXPECT_TRUE(cases[5].scenario.training.gradient_accumulation_fusion);
}

// The repository's held-out MoE file (bench/published-moe-runs.yaml, NVIDIA's Grok-1 recipe):
// 20 step times, each a valid scenario; the layouts of the README tables (8 GPUs: the 2-layer
// proxy with EP 2, so DP 2 and 512 micro-batches; 512 GPUs: PP 8 x VP 8, CP 2, EP 8; the 25.05
// release with expert TP 1).
TEST(Validation, ReadsTheHeldOutMoeFile) {
  const auto cases =
      load_validation_cases(kSource / "bench" / "published-moe-runs.yaml", kSource / "topologies");
  ASSERT_EQ(cases.size(), 20u);
  for (const auto& c : cases) {
    EXPECT_TRUE(c.unsupported.empty()) << c.id << ": " << c.unsupported;
    EXPECT_GT(c.measured_iteration_time_s, 0) << c.id;
    EXPECT_EQ(c.scenario.model.num_moe_experts, 8) << c.id;
    EXPECT_EQ(c.scenario.cluster.topology.filename().string(), "dgx-h100-superpod.yaml") << c.id;
  }
  const auto& proxy = cases[0];
  EXPECT_EQ(proxy.id, "dgxc2502-grok1-bf16-8");
  EXPECT_EQ(proxy.scenario.model.num_layers, 2);
  EXPECT_EQ(proxy.scenario.parallel.data_parallel_size, 2);
  EXPECT_EQ(proxy.scenario.parallel.expert_tp(), 4);  // expert TP = TP when unset
  EXPECT_DOUBLE_EQ(proxy.measured_iteration_time_s, 24.00);
  const auto& full = cases[6];
  EXPECT_EQ(full.id, "dgxc2502-grok1-bf16-512");
  EXPECT_EQ(full.scenario.parallel.virtual_pipeline_model_parallel_size, 8);
  EXPECT_EQ(full.scenario.parallel.data_parallel_size, 8);  // 512 / (TP 4 x PP 8 x CP 2)
  EXPECT_TRUE(cases[15].scenario.training.fp8_format.has_value());
  EXPECT_EQ(cases[19].id, "dgxc2505-grok1-fp8-512");
  EXPECT_EQ(cases[19].scenario.parallel.expert_tp(), 1);
}

// The second held-out MoE file (bench/published-moe-runs-2025.yaml, Megatron-Bridge's Qwen3
// recipes of the 25.09 NeMo container), measured in tokens/s per GPU. Worked by hand: Qwen3-30B-A3B,
// 10494 tokens/s/GPU on 16 GPUs at global batch 512 x 4,096 tokens -> T = 2,097,152 / (10494 x 16)
// = 12.4902 s; DP = 16 / (TP 1 x PP 2) = 8, 512 / (2 x 8) = 32 micro-batches, EP 8 x ETP 1 over
// the 8 ranks of a stage (expert DP 1). Qwen3-235B-A22B, 1204 tokens/s/GPU on 256 GPUs at
// 2048 x 4,096 tokens -> T = 8,388,608 / (1204 x 256) = 27.2160 s; DP = 256 / (TP 2 x PP 8) = 16,
// EP 32 = TP x DP (parallel folding), 94 layers + embedding + loss = 96 = PP 8 x VP 4 x 3.
TEST(Validation, ReadsTheHeldOutQwen3MoeFile) {
  const auto cases = load_validation_cases(kSource / "bench" / "published-moe-runs-2025.yaml",
                                           kSource / "topologies");
  ASSERT_EQ(cases.size(), 2u);
  for (const auto& c : cases) {
    EXPECT_TRUE(c.unsupported.empty()) << c.id << ": " << c.unsupported;
    EXPECT_EQ(c.scenario.model.num_moe_experts, 128) << c.id;
    EXPECT_EQ(c.scenario.model.moe_router_topk, 8) << c.id;
    EXPECT_EQ(c.scenario.parallel.expert_tp(), 1) << c.id;
    EXPECT_TRUE(c.scenario.training.fp8()) << c.id;
    EXPECT_EQ(c.scenario.training.fp8_recipe, Fp8Recipe::kTensorwise) << c.id;
    EXPECT_EQ(c.scenario.cluster.topology.filename().string(), "dgx-h100-superpod.yaml") << c.id;
    EXPECT_THAT(c.measured_as, HasSubstr("tokens_per_sec_per_gpu")) << c.id;
    EXPECT_TRUE(c.scenario.model.moe_permute_fusion) << c.id;  // Qwen3MoEModelProvider
  }
  const auto& small = cases[0];
  EXPECT_EQ(small.id, "mbridge2509-qwen3-30b-a3b-fp8cs-16");
  EXPECT_NEAR(small.measured_iteration_time_s, 2097152.0 / (10494.0 * 16), 1e-12);
  EXPECT_NEAR(small.measured_iteration_time_s, 12.4902, 1e-4);
  EXPECT_EQ(small.scenario.parallel.data_parallel_size, 8);
  EXPECT_EQ(small.scenario.num_micro_batches(), 32);
  EXPECT_EQ(small.scenario.parallel.expert_data_parallel_size(), 1);
  EXPECT_EQ(small.scenario.model.kv_channels, 128);
  const auto& large = cases[1];
  EXPECT_EQ(large.id, "mbridge2509-qwen3-235b-a22b-fp8cs-256");
  EXPECT_NEAR(large.measured_iteration_time_s, 27.2160, 1e-4);
  EXPECT_EQ(large.scenario.parallel.data_parallel_size, 16);
  EXPECT_EQ(large.scenario.parallel.expert_model_parallel_size, 32);
  EXPECT_EQ(large.scenario.parallel.virtual_pipeline_model_parallel_size, 4);
  EXPECT_TRUE(large.scenario.parallel.account_for_embedding_in_pipeline_split);
  EXPECT_TRUE(large.scenario.parallel.account_for_loss_in_pipeline_split);
  EXPECT_TRUE(large.scenario.training.tp_comm_overlap);
}

// tokens_per_sec_per_gpu needs no FLOP formula: T = global batch x seq_length / (x x GPUs), here
// 8 x 32 / (4 x 8) = 8 s; zero or a negative value is an error naming the case and key.
TEST(Validation, TokensPerSecondPerGpuIsAStepTime) {
  const fs::path dir = fs::temp_directory_path() / ("traintwin-validation-tokens-" + std::to_string(getpid()));
  fs::create_directories(dir);
  auto write = [&](const std::string& measured) {
    std::ofstream(dir / "t.yaml")
        << "cases:\n  - id: x\n    source: Megatron-Bridge performance summary\n"
           "    model: {num_layers: 2, hidden_size: 64, num_attention_heads: 4, seq_length: 32, vocab_size: 128}\n"
           "    parallelism: {tensor_model_parallel_size: 1, pipeline_model_parallel_size: 1}\n"
           "    training: {micro_batch_size: 1, global_batch_size: 8, precision: bf16}\n"
           "    cluster: {gpu: H100-SXM-80GB, num_gpus: 8}\n"
           "    measured: {" << measured << "}\n";
    return dir / "t.yaml";
  };
  const auto cases = load_validation_cases(write("tokens_per_sec_per_gpu: 4"), kSource / "topologies");
  ASSERT_EQ(cases.size(), 1u);
  EXPECT_DOUBLE_EQ(cases[0].measured_iteration_time_s, 8.0);
  EXPECT_EQ(cases[0].measured_as, "tokens_per_sec_per_gpu 4");
  for (const char* bad : {"tokens_per_sec_per_gpu: 0", "tokens_per_sec_per_gpu: -3"}) {
    try {
      load_validation_cases(write(bad), kSource / "topologies");
      ADD_FAILURE() << bad;
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), HasSubstr("x.measured.tokens_per_sec_per_gpu: must be > 0")) << bad;
    }
  }
  fs::remove_all(dir);
}

// The repository's held-out dense file (bench/published-megatron-runs.yaml, issue 24 item 1): the
// rows of Narayanan et al. SC'21 Table 1 and Korthikanti et al. 2022 Tables 3/5 that
// calibration.yaml leaves out, 5 + 2 x 2 = 9 measured times. Worked by hand: Narayanan's 529.6B,
// 163 TFLOP/s per GPU on 2520 GPUs, eq. 3's F = 96 B s l h^2 (1 + s/6h + V/16lh) with B 2520,
// s 2048, l 105, h 20480, V 51200 = 2.22159e19 FLOPs -> T = F / (163e12 x 2520) = 54.085 s; its
// run script (examples/sc21/run_table_1.sh) gives TP 8, PP 35 and 1 layer per virtual stage, so
// v = 105 / 35 = 3 and DP = 2520 / 280 = 9.
TEST(Validation, ReadsTheHeldOutMegatronFile) {
  const auto cases = load_validation_cases(kSource / "bench" / "published-megatron-runs.yaml",
                                           kSource / "topologies");
  ASSERT_EQ(cases.size(), 9u);
  for (const auto& c : cases) {
    EXPECT_TRUE(c.unsupported.empty()) << c.id << ": " << c.unsupported;
    EXPECT_GT(c.measured_iteration_time_s, 0) << c.id;
    EXPECT_EQ(c.scenario.cluster.topology.filename().string(), "dgx-a100-superpod.yaml") << c.id;
    EXPECT_TRUE(c.scenario.parallel.scatter_gather_tensors_in_pipeline) << c.id;
    EXPECT_FALSE(c.scenario.training.use_distributed_optimizer) << c.id;
    // SC'21 (Megatron of April 2021): no gradient accumulation fusion; Korthikanti 2022: on.
    EXPECT_EQ(c.scenario.training.gradient_accumulation_fusion,
              c.id.rfind("korthikanti2022", 0) == 0)
        << c.id;
    // Never fitted on: none of these ids is among the roofline's calibration cases.
    const auto& fitted = roofline_calibration_case_ids();
    EXPECT_EQ(std::find(fitted.begin(), fitted.end(), c.id), fitted.end()) << c.id;
  }
  const auto& n530 = cases[4];
  EXPECT_EQ(n530.id, "narayanan2021-529.6B");
  EXPECT_NEAR(n530.measured_iteration_time_s, 54.085, 0.001);
  EXPECT_EQ(n530.scenario.parallel.virtual_pipeline_model_parallel_size, 3);
  EXPECT_EQ(n530.scenario.parallel.data_parallel_size, 9);
  EXPECT_EQ(n530.scenario.training.recompute_granularity, RecomputeGranularity::kFull);
  // Korthikanti et al. 1T: PP 64 at DP 1 (512 GPUs, global batch 512), Table 5's two times.
  EXPECT_EQ(cases[7].id, "korthikanti2022-1T/full_recompute");
  EXPECT_EQ(cases[7].scenario.parallel.pipeline_model_parallel_size, 64);
  EXPECT_EQ(cases[7].scenario.parallel.data_parallel_size, 1);
  EXPECT_FALSE(cases[7].scenario.parallel.sequence_parallel);
  EXPECT_DOUBLE_EQ(cases[7].measured_iteration_time_s, 94.42);
  EXPECT_EQ(cases[8].id, "korthikanti2022-1T/sequence_parallel_selective_recompute");
  EXPECT_TRUE(cases[8].scenario.parallel.sequence_parallel);
  EXPECT_EQ(cases[8].scenario.training.recompute_granularity, RecomputeGranularity::kSelective);
  EXPECT_DOUBLE_EQ(cases[8].measured_iteration_time_s, 71.49);
}

// The repository's held-out weak-scaling file (bench/published-scaling-runs.yaml, issue 24 item
// 2): NVIDIA's dgxc-benchmarking v25.02 tables, GPT-3 175B (9 rows), Llama 3.1 70B (11) and
// Nemotron-4 340B (10), BF16 and FP8, none of them a calibration row. Worked by hand: the GPT-3
// FP8 run on 2,048 GPUs has DP = 2048 / (TP 4 x PP 8) = 64 and 4096 / 64 = 64 micro-batches per
// pipeline, the same 64 as its 128-GPU run (256 / DP 4): weak scaling; GPT2BPETokenizer's 50,257
// tokens pad to a multiple of 128 x TP 4 = 512, 99 x 512 = 50,688. Nemotron's BF16 runs have CP 2
// (configure.sh), so 128 GPUs are DP 128 / (8 x 8 x 2) = 1 with 32 / 1 = 32 micro-batches.
TEST(Validation, ReadsTheHeldOutScalingFile) {
  const auto cases = load_validation_cases(kSource / "bench" / "published-scaling-runs.yaml",
                                           kSource / "topologies");
  ASSERT_EQ(cases.size(), 30u);
  const auto& fitted = roofline_calibration_case_ids();
  for (const auto& c : cases) {
    EXPECT_TRUE(c.unsupported.empty()) << c.id << ": " << c.unsupported;
    EXPECT_GT(c.measured_iteration_time_s, 0) << c.id;
    EXPECT_EQ(c.scenario.cluster.topology.filename().string(), "dgx-h100-superpod.yaml") << c.id;
    EXPECT_EQ(std::find(fitted.begin(), fitted.end(), c.id), fitted.end()) << c.id;
    EXPECT_TRUE(c.scenario.training.use_distributed_optimizer) << c.id;
    EXPECT_TRUE(c.scenario.training.tp_comm_overlap) << c.id;
    // Every FP8 row ran with FP8 parameters (NeMo fp8_params), every BF16 row without FP8.
    const bool fp8 = c.id.find("-fp8-") != std::string::npos;
    EXPECT_EQ(c.scenario.training.fp8_format.has_value(), fp8) << c.id;
    EXPECT_EQ(c.scenario.training.fp8_param_gather, fp8) << c.id;
  }
  const auto& gpt = cases[8];
  EXPECT_EQ(gpt.id, "dgxc2502-gpt3-175b-fp8-2048");
  EXPECT_EQ(gpt.scenario.parallel.data_parallel_size, 64);
  EXPECT_EQ(gpt.scenario.num_micro_batches(), 64);
  EXPECT_EQ(cases[4].id, "dgxc2502-gpt3-175b-fp8-128");
  EXPECT_EQ(cases[4].scenario.num_micro_batches(), 64);
  EXPECT_EQ(gpt.scenario.parallel.virtual_pipeline_model_parallel_size, 6);
  EXPECT_EQ(padded_vocab_size(gpt.scenario.model.vocab_size, 4), 50688);
  EXPECT_EQ(gpt.scenario.training.attention_backend, AttentionBackend::kFlash);
  EXPECT_FALSE(gpt.scenario.training.cross_entropy_loss_fusion);
  EXPECT_DOUBLE_EQ(gpt.measured_iteration_time_s, 5.96);
  const auto& nemotron = cases[20];
  EXPECT_EQ(nemotron.id, "dgxc2502-nemotron4-340b-bf16-128");
  EXPECT_EQ(nemotron.scenario.parallel.context_parallel_size, 2);
  EXPECT_EQ(nemotron.scenario.parallel.data_parallel_size, 1);
  EXPECT_EQ(nemotron.scenario.num_micro_batches(), 32);
  EXPECT_EQ(nemotron.scenario.training.recompute_granularity, RecomputeGranularity::kSelective);
  EXPECT_EQ(cases[29].id, "dgxc2502-nemotron4-340b-fp8-2048");
  EXPECT_EQ(cases[29].scenario.parallel.data_parallel_size, 32);  // 2048 / (8 x 8), CP 1
  EXPECT_DOUBLE_EQ(cases[29].measured_iteration_time_s, 3.49);
}

// The calibration file is read like scenarios and topologies (issue 14): a regular file of at
// most 4 MiB, one YAML document, and no ',' on which yaml-cpp 0.7's LoadAll would loop forever
// (it then allocates about 1 GB/s: the parse runs in a bounded child).
TEST(Validation, CalibrationFileIsBoundedLikeEveryYamlInput) {
  const fs::path dir = fs::temp_directory_path() / ("traintwin-validation-bounds-" + std::to_string(getpid()));
  fs::create_directories(dir);
  auto error_of = [&](const fs::path& file) {
    try {
      load_validation_cases(file, kSource / "topologies");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_THAT(error_of("/dev/zero"), AllOf(HasSubstr("/dev/zero"), HasSubstr("not a regular file")));
  EXPECT_THAT(error_of(dir), HasSubstr("is a folder, not a calibration file"));
  std::ofstream(dir / "big.yaml") << std::string(kMaxConfigFileBytes + 1, '#');
  EXPECT_THAT(error_of(dir / "big.yaml"),
              HasSubstr("bytes a calibration file may have"));
  std::ofstream(dir / "two.yaml") << "cases: []\n---\ncases: []\n";
  EXPECT_THAT(error_of(dir / "two.yaml"),
              AllOf(HasSubstr("two.yaml:2: a second YAML document"), HasSubstr("calibration file")));
  std::ofstream(dir / "comma.yaml") << "{\"cases\": []},\n";
  const auto r = testing::run_bounded([&] { return error_of(dir / "comma.yaml"); }, 20,
                                      uint64_t{1} << 30);
  ASSERT_TRUE(r.ok) << r.failure;
  EXPECT_THAT(r.text, AllOf(HasSubstr("comma.yaml:1:14: ','"), HasSubstr("cannot start a YAML node")));
  fs::remove_all(dir);
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

// calibration-modern.yaml's kinds of case: a DGX Cloud Llama row (the recipe's implicit overlaps,
// flash attention from the llama preset), a NeMo long-context row measured in model TFLOP/s per
// GPU (turned into a time with the model FLOPs: Llama 2 7B, s 8192, B 512, 8 GPUs, 730 TFLOP/s:
// F = 512 x 8192 x [12 x 32 x 4096^2 x (1 + 1 + 2) + 18 x 32 x 11008 x 4096 + 6 x 32000 x 4096]
// -> T = F / (730e12 x 8)), and a mixture-of-experts row (the Grok-1 proxy's kind), read as an MoE
// scenario.
TEST(Validation, ModernCasesDefaultsTflopsAndUnsupportedRows) {
  const fs::path dir = fs::temp_directory_path() / "traintwin-validation-modern-test";
  fs::create_directories(dir);
  const fs::path file = dir / "modern.yaml";
  std::ofstream(file)
      << "cases:\n"
         "  - id: llama\n    source: dgxc v25.02 llama3.1/README_70b.md\n"
         "    model: {architecture: llama, num_layers: 80, hidden_size: 8192, ffn_hidden_size: 28672,\n"
         "            num_attention_heads: 64, num_query_groups: 8, seq_length: 8192, vocab_size: 128256}\n"
         "    parallelism: {tensor_model_parallel_size: 4, pipeline_model_parallel_size: 4,\n"
         "                  context_parallel_size: 2, virtual_pipeline_model_parallel_size: 5,\n"
         "                  sequence_parallel: true}\n"
         "    training: {micro_batch_size: 1, global_batch_size: 128, precision: bf16,\n"
         "               use_distributed_optimizer: true}\n"
         "    cluster: {gpu: H100-SXM-80GB, num_gpus: 64}\n"
         "    measured: {iteration_time_s: 14.61, mfu_percent: 54.52}\n"
         "  - id: long\n    source: nemo_long_context (seq 8K row)\n"
         "    model: {architecture: llama, num_layers: 32, hidden_size: 4096, ffn_hidden_size: 11008,\n"
         "            num_attention_heads: 32, num_query_groups: 32, seq_length: 8192, vocab_size: 32000}\n"
         "    parallelism: {tensor_model_parallel_size: 1, pipeline_model_parallel_size: 2}\n"
         "    training: {micro_batch_size: 1, global_batch_size: 512, precision: bf16,\n"
         "               fp8_format: hybrid, fp8_recipe: delayed}\n"
         "    cluster: {gpu: H100-SXM-80GB, num_gpus: 8}\n"
         "    measured: {model_tflops_per_gpu: 730}\n"
         "  - id: moe\n    source: \"dgxc v25.02 grok1 (proxy: 2 layers)\"\n"
         "    model: {architecture: llama, num_layers: 2, hidden_size: 64, num_attention_heads: 4,\n"
         "            seq_length: 32, vocab_size: 128, num_moe_experts: 8, moe_router_topk: 2}\n"
         "    parallelism: {tensor_model_parallel_size: 1, expert_model_parallel_size: 2}\n"
         "    training: {micro_batch_size: 1, global_batch_size: 8, precision: bf16}\n"
         "    cluster: {gpu: H100-SXM-80GB, num_gpus: 8}\n"
         "    measured: {iteration_time_s: 24.0}\n";
  const auto cases = load_validation_cases(file, kSource / "topologies");
  ASSERT_EQ(cases.size(), 3u);
  const Scenario& llama = cases[0].scenario;
  EXPECT_TRUE(cases[0].unsupported.empty());
  EXPECT_EQ(llama.model.activation, Activation::kSwiglu);
  EXPECT_EQ(llama.training.attention_backend, AttentionBackend::kFlash);
  EXPECT_TRUE(llama.training.overlap_grad_reduce);
  EXPECT_TRUE(llama.training.overlap_param_gather);
  EXPECT_TRUE(llama.training.tp_comm_overlap);
  EXPECT_EQ(llama.parallel.data_parallel_size, 2);
  EXPECT_DOUBLE_EQ(cases[0].measured_iteration_time_s, 14.61);
  const double per_sample =
      8192.0 * (12.0 * 32 * 4096.0 * 4096 * 4 + 18.0 * 32 * 11008 * 4096 + 6.0 * 32000 * 4096);
  EXPECT_NEAR(cases[1].measured_iteration_time_s / (512 * per_sample / (730e12 * 8)), 1.0, 1e-12);
  EXPECT_TRUE(cases[1].scenario.training.fp8());
  EXPECT_TRUE(cases[1].scenario.training.fp8_param_gather);  // the file's FP8 rows
  EXPECT_FALSE(cases[1].scenario.training.tp_comm_overlap);  // no SP, nothing to overlap
  // The MoE row is read as an MoE scenario: 8 experts over EP 2, expert TP = TP 1, expert DP 4.
  EXPECT_EQ(cases[2].id, "moe");
  EXPECT_TRUE(cases[2].unsupported.empty());
  EXPECT_EQ(cases[2].scenario.model.num_moe_experts, 8);
  EXPECT_EQ(cases[2].scenario.parallel.expert_model_parallel_size, 2);
  EXPECT_EQ(cases[2].scenario.parallel.expert_data_parallel_size(), 4);
  EXPECT_DOUBLE_EQ(cases[2].measured_iteration_time_s, 24.0);
}

}  // namespace
}  // namespace traintwin
