// exec::profile_targets: every distinct KernelKey of a scenario's Program once, with the
// pipeline stages that run it (profile times a kernel under mpirun on those stages' ranks only);
// exec::profile_kernel's sampling: --repeats runs at least, more until they add up to
// --min-time; the memory it rotates its inputs over.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <unistd.h>
#include <vector>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/program.hpp"
#include "exec/cpu/cpu_backend.hpp"
#include "core/scenario.hpp"
#include "exec/profile.hpp"
#include "tests/tiny_training.hpp"

namespace traintwin::exec {
namespace {

TEST(ProfileTargetsTest, EachKernelOnceWithTheStagesThatRunIt) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("traintwin-profile-targets-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const Scenario s = load_scenario(testing::write_tiny_scenario(dir, (dir / "none").string()),
                                   {{"parallelism.pipeline_model_parallel_size", "2"},
                                    {"parallelism.tensor_model_parallel_size", "2"},
                                    {"cluster.num_gpus", "4"}});
  std::filesystem::remove_all(dir);
  std::map<std::string, std::vector<int64_t>> stages;
  for (const ProfileTarget& t : profile_targets(s)) {
    EXPECT_TRUE(stages.emplace(t.kernel.key.to_string(), t.stages).second)
        << "twice: " << t.kernel.key.to_string();
  }
  auto of = [&](const std::string& name) {
    std::vector<std::vector<int64_t>> found;
    for (const auto& [key, st] : stages) {
      if (key.rfind(name + "[", 0) == 0) found.push_back(st);  // "name[shape] ..."
    }
    return found;
  };
  // The embedding runs on the first stage, the loss on the last; the layers (2 per stage, the
  // same shapes) on both.
  for (const auto& st : of("embedding_fwd")) EXPECT_EQ(st, (std::vector<int64_t>{0}));
  for (const auto& st : of("cross_entropy_bwd")) EXPECT_EQ(st, (std::vector<int64_t>{1}));
  for (const auto& st : of("layernorm_bwd")) EXPECT_EQ(st, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(of("embedding_fwd").size(), 1u);
  EXPECT_EQ(of("cross_entropy_bwd").size(), 1u);
  EXPECT_FALSE(of("layernorm_bwd").empty());
  for (const auto& [key, st] : stages) EXPECT_FALSE(st.empty()) << key;
}

Scenario tiny_scenario() {
  const auto dir =
      std::filesystem::temp_directory_path() / ("traintwin-profile-kernel-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  Scenario s = load_scenario(testing::write_tiny_scenario(dir, (dir / "none").string()));
  std::filesystem::remove_all(dir);
  return s;
}

// profile --collectives measures up to the largest collective of a scenario: worked by hand.
TEST(ProfileTargetsTest, LargestCollectiveIsTheGradientBucketUnderDpAndAnActivationUnderTp) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("traintwin-largest-coll-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string file = testing::write_tiny_scenario(dir, (dir / "none").string());
  const Scenario dp = load_scenario(file, {{"cluster.num_gpus", "2"}});
  const Scenario tp = load_scenario(
      file, {{"cluster.num_gpus", "2"}, {"parallelism.tensor_model_parallel_size", "2"}});
  const Scenario one = load_scenario(file);
  std::filesystem::remove_all(dir);
  // DP 2: the gradients of all 267,648 parameters in one fp32 bucket (fewer than Megatron's
  // 40M-parameter bucket size).
  EXPECT_EQ(largest_collective_bytes(dp), 267'648 * 4);
  // TP 2: the row-parallel outputs' all-reduce, micro-batch 2 x seq 32 x hidden 64 fp32.
  EXPECT_EQ(largest_collective_bytes(tp), 2 * 32 * 64 * 4);
  // One rank: the loss and grad-norm all-reduces over groups of one are still collectives of
  // the Program, but none moves more than a few doubles.
  EXPECT_LE(largest_collective_bytes(one), 64);
}

// The rotation covers what the rank holds (the memory model's total), capped at twice the LLC.
TEST(ProfileKernelTest, RotatesOverTheRanksMemoryCappedAtTwiceTheLastLevelCache) {
  const Scenario s = tiny_scenario();
  const ProfileTarget first = profile_targets(s).front();
  const double held = stage_memory(s, 0).total_bytes();
  ASSERT_GT(held, 1e6);  // a few MB: 267,648 parameters x 16 bytes, plus activations
  EXPECT_EQ(rotation_bytes(s, first, int64_t{1} << 30), static_cast<int64_t>(held));
  EXPECT_EQ(rotation_bytes(s, first, 1000), 2000);
}

TEST(ProfileKernelTest, RunsUntilTheRepeatsAndTheMinimumTimeAreReached) {
  const Scenario s = tiny_scenario();
  const std::vector<ProfileTarget> targets = profile_targets(s);
  const auto gelu = std::find_if(targets.begin(), targets.end(), [](const ProfileTarget& t) {
    return t.kernel.key.name == "gelu_fwd";
  });
  ASSERT_NE(gelu, targets.end());
  cpu::CpuBackend be;
  ProfileOptions o;
  o.warmup = 0;
  o.repeats = 4;
  o.min_time_s = 0;
  const KernelMeasurement exact = profile_kernel(be, s, *gelu, o);
  EXPECT_EQ(exact.samples, 4);
  ASSERT_TRUE(exact.mean_us.has_value());
  // A few-microsecond kernel: 200 ms of timed runs take far more than 4 of them (even on a
  // loaded machine, where one preempted run can take tens of ms), and the runs stop as soon as
  // their sum (samples x mean) reaches it.
  o.min_time_s = 0.2;
  const KernelMeasurement timed = profile_kernel(be, s, *gelu, o);
  EXPECT_GT(timed.samples, 4);
  EXPECT_GE(static_cast<double>(timed.samples) * *timed.mean_us, 0.2e6 * (1 - 1e-9));
  o.min_time_s = -1;
  EXPECT_THROW((void)profile_kernel(be, s, *gelu, o), InvalidArgument);
}

}  // namespace
}  // namespace traintwin::exec
