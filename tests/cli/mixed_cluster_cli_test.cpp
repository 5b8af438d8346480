// `traintwin simulate` on a mixed cluster (a topology with node_groups) and with Megatron-Core's
// custom pipeline layout: the kinds named in the output and summary.json, a layout's layers per
// stage, and the errors of each.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/cli/run_cli.hpp"

namespace traintwin {
namespace {

using ::testing::HasSubstr;
using testing::run_cli;

namespace fs = std::filesystem;

const std::string kSource = TRAINTWIN_SOURCE_DIR;
const std::string kTiny = kSource + "/scenarios/gpt-tiny-brown.yaml";

/// A temporary folder holding a DGX H100 topology whose node 0 holds H200s.
class MixedCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("traintwin-mixed-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    std::ifstream in(kSource + "/topologies/dgx-h100-superpod.yaml");
    std::ofstream out(topology());
    out << in.rdbuf() << "\nnode_groups:\n  - name: h200\n    nodes: 1\n    node_template: "
        << kSource << "/topologies/dgx-h200-superpod.yaml\n";
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string topology() const { return (dir_ / "dgx-h100-superpod.yaml").string(); }

  /// The tiny GPT (TP 2 x PP 2) on 16 GPUs of the mixed cluster: DP 4, stage 0 (ranks 0-7) on
  /// the H200 node, stage 1 on the H100 node.
  std::string tiny16(const std::string& more = "") const {
    return "simulate " + kTiny + " --set cluster.topology=" + topology() +
           " --set cluster.num_gpus=16 --quiet --out " + (dir_ / "out").string() + " " + more;
  }

  fs::path dir_;
};

TEST_F(MixedCluster, SimulateNamesBothKindsAndTimesEachStageOnItsGpu) {
  const auto r = run_cli(tiny16());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("on 8 x H200-SXM-141GB + 8 x H100-SXM-80GB ("));
  // Each stage's memory against its own GPUs: stage 0 on the H200s, stage 1 on the H100s.
  EXPECT_THAT(r.output, ::testing::ContainsRegex("stage 0: peak [0-9.]+ GiB of 140.40 GiB, "
                                                 "stage 1: peak [0-9.]+ GiB of 79.65 GiB"));
  const auto mem = run_cli("memory " + kTiny + " --set cluster.topology=" + topology() +
                           " --set cluster.num_gpus=16");
  ASSERT_EQ(mem.status, 0) << mem.output;
  EXPECT_THAT(mem.output, HasSubstr("each stage on its own GPUs"));
  EXPECT_THAT(mem.output, HasSubstr(" 140.40 GiB  yes\n"));  // stage 0, on the H200s
  EXPECT_THAT(mem.output, HasSubstr("  79.65 GiB  yes\n"));  // stage 1, on the H100s
  std::ifstream in(dir_ / "out" / "summary.json");
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j.at("gpu"), "8 x H200-SXM-141GB + 8 x H100-SXM-80GB");
  EXPECT_DOUBLE_EQ(j.at("gpu_memory_bytes").get<double>(), 81559.0 * 1024 * 1024);  // the H100
  // The same job on H100s only is slower: stage 0's H200s have the faster HBM.
  const auto h100 = run_cli("simulate " + kTiny + " --set cluster.num_gpus=16 --quiet --out " +
                            (dir_ / "h100").string());
  ASSERT_EQ(h100.status, 0) << h100.output;
  std::ifstream in2(dir_ / "h100" / "summary.json");
  const auto k = nlohmann::json::parse(in2);
  EXPECT_LT(j.at("iteration_time_s").get<double>(), k.at("iteration_time_s").get<double>());
}

TEST_F(MixedCluster, ACustomLayoutSetsTheLayersOfEachStage) {
  const auto layout = run_cli(tiny16("--pipeline-model-parallel-layout 'Et*3|tL'"));
  ASSERT_EQ(layout.status, 0) << layout.output;
  std::ifstream in(dir_ / "out" / "summary.json");
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j.at("layout").at("pipeline_model_parallel_layout"), "Et*3|tL");
  EXPECT_EQ(j.at("layout").at("layers_per_model_chunk"), nlohmann::json::parse("[[3], [1]]"));
  const auto bad = run_cli(tiny16("--pipeline-model-parallel-layout 'Et*3|t*2L'"));
  EXPECT_NE(bad.status, 0);
  EXPECT_THAT(bad.output, HasSubstr("parallelism.pipeline_model_parallel_layout"));
  EXPECT_THAT(bad.output, HasSubstr("places 5 transformer layers, but model.num_layers = 4"));
}

/// A DGX H100 topology in `dir` whose node 0 comes from `node_template` (a shipped topology).
std::string h100_with_first_node(const fs::path& dir, const std::string& node_template) {
  const fs::path file = dir / ("first-" + node_template);
  std::ofstream out(file);
  std::ifstream in(kSource + "/topologies/dgx-h100-superpod.yaml");
  out << in.rdbuf() << "\nnode_groups:\n  - {name: first, nodes: 1, node_template: " << kSource
      << "/topologies/" << node_template << "}\n";
  return file.string();
}

// A DGX A100 node beside a DGX H100 one: pipeline stage 0 on the A100 node (its GPU, NVLink 3
// and HDR NICs), stage 1 on the H100 node; both kinds named; slower than on H100s only, faster
// than on A100s only.
TEST_F(MixedCluster, AnA100NodeBesideAnH100NodeRunsEachStageOnItsKind) {
  const std::string topo = h100_with_first_node(dir_, "dgx-a100-superpod.yaml");
  const auto iteration_s = [&](const std::string& topology, const std::string& out) {
    const auto r = run_cli("simulate " + kTiny + " --set cluster.topology=" + topology +
                           " --set cluster.num_gpus=16 --quiet --out " + (dir_ / out).string());
    EXPECT_EQ(r.status, 0) << r.output;
    std::ifstream in(dir_ / out / "summary.json");
    const auto j = nlohmann::json::parse(in);
    return std::make_pair(r.output, j.at("iteration_time_s").get<double>());
  };
  const auto [output, mixed_s] = iteration_s(topo, "mixed");
  EXPECT_THAT(output, HasSubstr("on 8 x A100-SXM-80GB + 8 x H100-SXM-80GB ("));
  const double h100_s =
      iteration_s(kSource + "/topologies/dgx-h100-superpod.yaml", "h100").second;
  const double a100_s =
      iteration_s(kSource + "/topologies/dgx-a100-superpod.yaml", "a100").second;
  EXPECT_GT(mixed_s, h100_s);
  EXPECT_LT(mixed_s, a100_s);
}

TEST_F(MixedCluster, ANodeTemplateOfAnotherDomainShapeIsRefusedNamingTheKey) {
  const std::string topo = h100_with_first_node(dir_, "gb200-nvl72-superpod.yaml");
  const auto r = run_cli("simulate " + kTiny + " --set cluster.topology=" + topo +
                         " --set cluster.num_gpus=16 --quiet");
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.output, HasSubstr("first-gb200-nvl72-superpod.yaml:"));
  EXPECT_THAT(r.output, HasSubstr("node.gpus_per_node"));
  EXPECT_THAT(r.output, HasSubstr("is 72, this file's is 8"));
}

// sweep --pipeline-split auto on the mixed H100/A100 SuperPOD: GPT-3 175B (TP 8 x PP 16 x DP 8,
// 1,024 GPUs) has stages 0-7 on the DGX A100 nodes and 8-15 on the DGX H100 ones. The estimator
// costs each stage on its own GPU, so the ranking holds the even split (6 layers per stage) and
// the searched ones beside it; the A100 stages bound the even split, so a split that moves
// layers to the H100 stages ranks first. The header names both GPU kinds.
TEST(MixedSweep, SearchesThePipelineSplitOnTheMixedSuperPod) {
  const auto r = run_cli("sweep " + kSource + "/scenarios/gpt3-175b-h100-1024.yaml"
                         " --set cluster.topology=" + kSource +
                         "/topologies/mixed-h100-a100-superpod.yaml"
                         " --mode analytical --pipeline-split auto --jobs 1 --top 0");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("512 x A100-SXM-80GB + 512 x H100-SXM-80GB"));
  EXPECT_THAT(r.output, HasSubstr("layers per stage"));
  const std::string even = "6/6/6/6/6/6/6/6/6/6/6/6/6/6/6/6";
  std::istringstream lines(r.output);
  std::string line, first;
  bool even_ranked = false;
  while (std::getline(lines, line)) {
    if (line.rfind("   1 ", 0) == 0) first = line;
    if (line.size() > even.size() && line.compare(line.size() - even.size(), even.size(), even) == 0) {
      even_ranked = true;
    }
  }
  ASSERT_FALSE(first.empty()) << r.output;
  EXPECT_TRUE(even_ranked) << r.output;
  EXPECT_EQ(first.find(even), std::string::npos) << first;
}

}  // namespace
}  // namespace traintwin
