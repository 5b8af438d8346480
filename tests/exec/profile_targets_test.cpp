// exec::profile_targets: every distinct KernelKey of a scenario's Program once, with the
// pipeline stages that run it (profile times a kernel under mpirun on those stages' ranks only).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <unistd.h>
#include <vector>

#include "core/program.hpp"
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

}  // namespace
}  // namespace traintwin::exec
