// Smoke tests of the traintwin command line: every shipped scenario through every subcommand
// that exists, and the errors a user sees for bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "run_cli.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

using Result = traintwin::testing::CliResult;
Result run(const std::string& args) { return traintwin::testing::run_cli(args); }

std::vector<fs::path> shipped(const char* folder) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(fs::path(TRAINTWIN_SOURCE_DIR) / folder)) {
    if (e.path().extension() == ".yaml") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

TEST(Cli, EveryShippedScenarioSummaryProgramAndMemory) {
  const auto scenarios = shipped("scenarios");
  ASSERT_GE(scenarios.size(), 5u);
  for (const auto& f : scenarios) {
    SCOPED_TRACE(f.string());
    Result s = run("summary " + f.string());
    EXPECT_EQ(s.status, 0) << s.output;
    EXPECT_THAT(s.output, AllOf(HasSubstr("Program"), HasSubstr("memory per GPU")));
    Result p = run("program " + f.string() + " --rank 0 --summary");
    EXPECT_EQ(p.status, 0) << p.output;
    EXPECT_THAT(p.output, AllOf(HasSubstr("rank 0 "), HasSubstr("schedule: F0.0")));
    Result m = run("memory " + f.string());
    EXPECT_EQ(m.status, 0) << m.output;
    EXPECT_THAT(m.output, HasSubstr("stage"));
  }
}

TEST(Cli, EveryShippedTopologyDescribes) {
  for (const auto& f : shipped("topologies")) {
    // 8 GPUs per node (DGX), 1 for the single-GPU device topology, 64 used of a GB200 NVL72
    // rack, 2 in Sailor's 2-GPU files: nodes = GPUs / that.
    std::ifstream in(f);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::smatch m;
    ASSERT_TRUE(std::regex_search(text, m, std::regex(R"(\n  gpus_per_node:\s*(\d+))"))) << f;
    int per_node = std::stoi(m[1].str());
    // A GB200 NVL72 rack: nodes of the GPUs a job uses per NVLink domain (64 of 72).
    if (std::regex_search(text, m, std::regex(R"(\n  gpus_used_per_node:\s*(\d+))"))) {
      per_node = std::stoi(m[1].str());
    }
    // 1,024 GPUs, or as many as a small cluster's fabric holds (Sailor's: 256 or fewer), as
    // the description without --num-gpus says ("size  up to ... = N GPUs").
    Result size = run("topology " + f.string());
    ASSERT_EQ(size.status, 0) << size.output;
    ASSERT_TRUE(std::regex_search(size.output, m, std::regex(R"(size +up to .* = (\d+) GPUs)")))
        << size.output;
    const int num_gpus = std::min(1024, std::stoi(m[1].str()) / per_node * per_node);
    Result r = run("topology " + f.string() + " --num-gpus " + std::to_string(num_gpus));
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_THAT(r.output, HasSubstr(std::to_string(num_gpus) + " GPUs = " +
                                    std::to_string(num_gpus / per_node) + " nodes"))
        << f;
  }
}

const std::string kDefault = std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/gpt3-175b-h100-1024.yaml";

TEST(Cli, ProgramListsOpsWithDependencies) {
  Result r = run("program " + kDefault + " --rank 1023");
  ASSERT_EQ(r.status, 0) << r.output;
  // Rank 1023 = tp 7, dp 7, pp 15: the last stage, with the LM head and cross-entropy.
  EXPECT_THAT(r.output, AllOf(HasSubstr("rank 1023 (tp 7, cp 0, dp 7, pp 15)"),
                              HasSubstr("fwd mb0 L90 layernorm"), HasSubstr("cross entropy"),
                              HasSubstr("recv activation"), HasSubstr("dp reduce_scatter grads"),
                              HasSubstr("optimizer step")));
}

TEST(Cli, MegatronFlagsOverrideTheFile) {
  Result r = run("memory " + kDefault +
                 " --tensor-model-parallel-size 4 --set parallelism.data_parallel_size=null "
                 "--recompute-granularity full --micro-batch-size 2");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("recompute full"));
  // TP 4 with a given data_parallel_size 8 no longer multiplies to 1024 GPUs: named error.
  Result bad = run("memory " + kDefault +
                   " --tensor-model-parallel-size 4 --set parallelism.data_parallel_size=8");
  EXPECT_EQ(bad.status, 2);
  EXPECT_THAT(bad.output, AllOf(HasSubstr("parallelism.data_parallel_size"), HasSubstr("16")));
  Result twice = run("memory " + kDefault + " --micro-batch-size 2 --set training.micro_batch_size=4");
  EXPECT_EQ(twice.status, 2);
  EXPECT_THAT(twice.output, HasSubstr("given twice"));
}

TEST(Cli, BadInputIsAClearError) {
  Result unknown = run("summary " + kDefault + " --set model.hidden_sise=1");
  EXPECT_EQ(unknown.status, 2);
  EXPECT_THAT(unknown.output, AllOf(HasSubstr("model.hidden_sise"), HasSubstr("hidden_size")));
  Result heads = run("summary " + kDefault + " --tensor-model-parallel-size 7");
  EXPECT_EQ(heads.status, 2);
  EXPECT_THAT(heads.output, HasSubstr("tensor_model_parallel_size"));
  // CP 3 cannot split the sequence into 2 x CP chunks; FP8 on an A100 has no FP8 tensor cores.
  Result cp = run("program " + kDefault +
                  " --context-parallel-size 3 --set parallelism.data_parallel_size=null"
                  " --num-gpus 384");
  EXPECT_EQ(cp.status, 2);
  EXPECT_THAT(cp.output, HasSubstr("divisible by 2 x context_parallel_size = 6"));
  const std::string a100 = std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/gpt-22b-a100-8.yaml";
  Result fp8 = run("simulate " + a100 + " --fp8-format hybrid");
  EXPECT_NE(fp8.status, 0);
  EXPECT_THAT(fp8.output, HasSubstr("A100-SXM-80GB has no FP8 tensor cores"));
  // One rule, every command: summary and memory refuse it too (they printed "0 FLOP/s" and a
  // memory table before).
  for (const char* command : {"summary ", "memory "}) {
    Result r = run(command + a100 + " --fp8-format hybrid");
    EXPECT_NE(r.status, 0) << command;
    EXPECT_THAT(r.output, HasSubstr("A100-SXM-80GB has no FP8 tensor cores")) << command;
  }
  Result rank = run("program " + kDefault + " --rank 1024");
  EXPECT_EQ(rank.status, 2);
  EXPECT_THAT(rank.output, HasSubstr("outside [0, 1024)"));
}

// The issue's user story: 126 layers on PP 8 x VP 8 is refused with the way out named, and
// Megatron's two account flags make it NVIDIA's Llama 3.1 405B split.
TEST(Cli, UnevenPipelineStagesFromMegatronFlags) {
  const std::string layout = " --set model.num_layers=126 --pipeline-model-parallel-size 8 "
                             "--virtual-pipeline-model-parallel-size 8 "
                             "--set parallelism.data_parallel_size=null";
  Result refused = run("summary " + kDefault + layout);
  EXPECT_EQ(refused.status, 2);
  EXPECT_THAT(refused.output,
              AllOf(HasSubstr("model.num_layers: 126 is not divisible by"),
                    HasSubstr("account_for_embedding/loss_in_pipeline_split")));
  const std::string flags =
      " --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split";
  Result r = run("summary " + kDefault + layout + flags);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output,
              AllOf(HasSubstr("transformer layers per stage 15/16/16/16/16/16/16/15 (uneven: "
                              "embedding counted as a layer, loss counted as a layer)"),
                    HasSubstr("stage  0: model chunks of 1+2+2+2+2+2+2+2 layers"),
                    HasSubstr("stage  7: model chunks of 2+2+2+2+2+2+2+1 layers")));
  Result first = run("memory " + kDefault +
                     " --set model.num_layers=98 --pipeline-model-parallel-size 8 "
                     "--set parallelism.data_parallel_size=null "
                     "--decoder-first-pipeline-num-layers 8 --decoder-last-pipeline-num-layers 6");
  ASSERT_EQ(first.status, 0) << first.output;
  EXPECT_THAT(first.output, AllOf(HasSubstr("\n    0      8 "), HasSubstr("\n    1     14 "),
                                  HasSubstr("\n    7      6 ")));
}

// A 175B model on TP 1 / PP 1 cannot fit: memory says so, naming the stage and the excess.
TEST(Cli, MemorySaysWhatDoesNotFit) {
  Result r = run("memory " + kDefault +
                 " --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 "
                 "--set parallelism.sequence_parallel=false --set parallelism.data_parallel_size=null "
                 "--global-batch-size 2048");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("OOM"), HasSubstr("does NOT fit: stage 0")));
}

// CPU offload in memory and simulate: Llama 3.1 70B on 64 H100 with TP 8 x DP 8 (PP 1) needs
// 83.1 GiB per GPU (no dropout masks: the scenario sets dropout 0, as Llama 3 trains); with 60 of
// its 80 layers' activations offloaded it fits, and the 15.7 GiB go to the host (256 GiB per GPU
// on a DGX H100); simulate shows the exposed offload time and the host memory; the A100 topology
// has no host link, so offload there is refused naming the key.
TEST(Cli, MemoryAndSimulateShowCpuOffload) {
  const std::string llama = std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/llama3.1-70b-h100-64.yaml";
  const std::string pp1 =
      " --tensor-model-parallel-size 8 --set parallelism.pipeline_model_parallel_size=1"
      " --set parallelism.virtual_pipeline_model_parallel_size=1"
      " --set parallelism.context_parallel_size=1";
  const std::string offload =
      " --set training.cpu_offloading=true --set training.cpu_offloading_num_layers=60";
  EXPECT_THAT(run("memory " + llama + pp1).output, HasSubstr("does NOT fit: stage 0"));
  const Result m = run("memory " + llama + pp1 + offload);
  ASSERT_EQ(m.status, 0) << m.output;
  EXPECT_THAT(m.output, AllOf(HasSubstr("activation CPU offload: the first 60 of 80 layers"),
                              HasSubstr("host memory per GPU (stage 0): optimizer 0.00 GiB, "
                                        "activations 15.72 GiB, total 15.72 GiB of 256.00 GiB"),
                              Not(HasSubstr("does NOT fit"))));
  const Result s = run("simulate " + llama + pp1 + offload +
                       " --set training.optimizer_cpu_offload=true --quiet");
  ASSERT_EQ(s.status, 0) << s.output;
  EXPECT_THAT(s.output, AllOf(HasSubstr("cpu offload        exposed"),
                              HasSubstr("optimizer 16.43 GiB, activations 15.72 GiB")));
  const std::string a100 = std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/gpt-22b-a100-8.yaml";
  const Result refused = run("simulate " + a100 +
                             " --set training.use_distributed_optimizer=true"
                             " --set training.optimizer_cpu_offload=true --quiet");
  EXPECT_NE(refused.status, 0);
  EXPECT_THAT(refused.output, HasSubstr("gives no gpu.host_link for A100-SXM-80GB"));
}

// collective --op all_to_all (MoE dispatch, NCCL's grouped send/recv: "p2p", Simple), nccl-tests'
// columns (root -1; the in-place run as long as the out-of-place one, #wrong N/A without data)
// and its closing "Avg bus bandwidth" line: the mean of the rows' busbw column.
TEST(Cli, CollectiveAllToAllAndTheAverageBusBandwidth) {
  const std::string topo = std::string(TRAINTWIN_SOURCE_DIR) + "/topologies/dgx-h100-superpod.yaml";
  const Result r = run("collective --topology " + topo +
                       " --num-gpus 16 --group all --op all_to_all -b 1M -e 2M");
  ASSERT_EQ(r.status, 0) << r.output;
  std::istringstream lines(r.output);
  std::string line;
  std::vector<double> busbw;
  double average = -1;
  while (std::getline(lines, line)) {
    if (line.rfind("# Avg bus bandwidth", 0) == 0) {
      average = std::stod(line.substr(line.find(':') + 1));
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    std::istringstream row(line);
    std::string size, count, type, redop, root, time, algbw, bus, wrong, time_in, algbw_in,
        bus_in, wrong_in, algorithm, protocol;
    row >> size >> count >> type >> redop >> root >> time >> algbw >> bus >> wrong >> time_in >>
        algbw_in >> bus_in >> wrong_in >> algorithm >> protocol;
    EXPECT_EQ(redop, "none");
    EXPECT_EQ(root, "-1");
    EXPECT_EQ(time_in, time);
    EXPECT_EQ(bus_in, bus);
    EXPECT_EQ(wrong, "N/A");
    EXPECT_EQ(algorithm, "p2p");
    EXPECT_EQ(protocol, "Simple");
    busbw.push_back(std::stod(bus));
  }
  ASSERT_EQ(busbw.size(), 2u);
  EXPECT_NEAR(average, (busbw[0] + busbw[1]) / 2, 1e-2);  // the rows print 2 decimals
}

// collective --tenants: mCCS setting 2 (placements/mccs-setting2-three-tenants.yaml). Green [1,5]
// and red [3,7] both go up to spine 1 and share its 50 Gbps cables (max-min: 3.125 GB/s each,
// busbw = algbw for 2 GPUs: 134217728 B / (4.2 us + 42.9497 ms) = 3.12 GB/s); blue's good ring
// keeps its 6.25 GB/s ports (6.25 x 32.212 / 32.225 ms = 6.25 GB/s after its 12.6 us latency).
// A ring naming a GPU twice is refused naming the file, tenant and key.
TEST(Cli, CollectiveTenantsShareTheSpineMaxMinFairly) {
  const std::string src = TRAINTWIN_SOURCE_DIR;
  const Result r = run("collective --tenants " + src + "/placements/mccs-setting2-three-tenants.yaml");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("blue             4    134217728    32224.9     4.17     6.25"));
  EXPECT_THAT(r.output, HasSubstr("green            2    134217728    42953.9     3.12     3.12  "
                                  "rail0-leaf0->rail0-spine1 (1 edge of its ring; shared with: "
                                  "green, red)"));
  const std::string bad = (std::filesystem::temp_directory_path() /
                           ("tenants-" + std::to_string(::getpid()) + ".yaml")).string();
  std::ofstream(bad) << "topology: " << src << "/placements/mccs-rtx3090-testbed.yaml\n"
                     << "num_gpus: 8\ntenants:\n  - {name: a, ring: [0, 2, 0], bytes: 1MiB}\n";
  const Result e = run("collective --tenants " + bad);
  EXPECT_NE(e.status, 0);
  EXPECT_THAT(e.output, HasSubstr("tenants[0] (a): ring: GPU 0 is given twice"));
  std::filesystem::remove(bad);
}

// traintwin --version: the project's version and the backends this build has (the CPU always).
TEST(Cli, VersionNamesTheReleaseAndTheBackends) {
  const Result r = run("--version");
  EXPECT_EQ(r.status, 0);
  EXPECT_THAT(r.output, HasSubstr("traintwin 0.1.0 (backends: cpu"));
}

// collective --node N runs the TP group on node N: on the mixed H100/A100 file node 64 is the
// first DGX H100 (NVLink 4 at 450 GB/s and NVLS) and node 0 a DGX A100 (NVLink 3, 300 GB/s), so a
// 1 GiB all-reduce has more bus bandwidth on node 64; --node-group a100 is node 0. Bad values are
// refused naming the flag and the allowed range, or the allowed group names.
TEST(Cli, CollectivePicksTheNodeOfItsGroup) {
  const std::string topo =
      std::string(TRAINTWIN_SOURCE_DIR) + "/topologies/mixed-h100-a100-superpod.yaml";
  const std::string base = "collective --topology " + topo + " --num-gpus 520 -b 1G -e 1G";
  auto busbw = [](const std::string& out) {
    std::istringstream lines(out);
    std::string line;
    while (std::getline(lines, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream row(line);
      std::string size, count, type, redop, root, time, algbw, bus;
      row >> size >> count >> type >> redop >> root >> time >> algbw >> bus;
      return std::stod(bus);
    }
    return -1.0;
  };
  const Result h100 = run(base + " --node 64");
  ASSERT_EQ(h100.status, 0) << h100.output;
  EXPECT_THAT(h100.output, HasSubstr("tp group on node 64"));
  EXPECT_THAT(h100.output, HasSubstr("H100-SXM-80GB"));
  const Result a100 = run(base + " --node-group a100");
  ASSERT_EQ(a100.status, 0) << a100.output;
  EXPECT_THAT(a100.output, HasSubstr("tp group on node 0"));
  EXPECT_THAT(a100.output, HasSubstr("A100"));
  EXPECT_GT(busbw(h100.output), busbw(a100.output));

  const Result far = run("collective --topology " + topo + " --num-gpus 8 --node 64");
  EXPECT_NE(far.status, 0);
  EXPECT_THAT(far.output, HasSubstr("--node 64"));
  EXPECT_THAT(far.output, HasSubstr("--num-gpus 520 reaches node 64"));
  const Result negative = run(base + " --node=-1");
  EXPECT_NE(negative.status, 0);
  EXPECT_THAT(negative.output, HasSubstr("allowed: 0..64"));
  const Result dp = run(base + " --group dp --node 3");
  EXPECT_NE(dp.status, 0);
  EXPECT_THAT(dp.output, HasSubstr("only --group tp runs on one node"));
  const Result unknown = run(base + " --node-group h200");
  EXPECT_NE(unknown.status, 0);
  EXPECT_THAT(unknown.output, HasSubstr("--node-group 'h200'"));
  EXPECT_THAT(unknown.output, HasSubstr("node_groups a100"));
}

}  // namespace
