// SimulationSession (sim/session.hpp): the scenario on its topology with the chosen costs, the
// what-if base run, and the default timeline ranks. Each simulation runs in a child process
// (run_isolated): SimGrid allows one engine per process.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.hpp"

#include "core/rank_layout.hpp"
#include "core/scenario.hpp"
#include "sim/isolated.hpp"
#include "sim/session.hpp"

namespace traintwin {
namespace {

namespace fs = std::filesystem;

const fs::path kTiny = fs::path(TRAINTWIN_SOURCE_DIR) / "scenarios" / "gpt-tiny-brown.yaml";

double iteration_s(const Scenario& s) {
  return std::stod(run_isolated([&] {
    const SimulationSession session(s, {}, SimulationOptions{});
    return fmt::format("{:.17g}", session.run().iteration_time_s);
  }));
}

// gpt-tiny-brown: TP 2 x PP 2 x DP 2, rank order tp-cp-ep-dp-pp: TP/DP rank 0 of stage 0 is rank 0,
// of stage 1 rank 2 x 2 = 4.
TEST(SimulationSession, TracesTheFirstRankOfEveryStage) {
  EXPECT_EQ(layout_of(load_scenario(kTiny)).first_rank_of_each_stage(),
            (std::vector<int64_t>{0, 4}));
}

TEST(SimulationSession, WithoutAWhatIfThereIsNoBaseRun) {
  const SimulationSession session(load_scenario(kTiny), {}, SimulationOptions{});
  EXPECT_FALSE(session.run_what_if_base().has_value());
  EXPECT_EQ(session.topology().name, "dgx-h100-superpod");
}

// The base of a what-if is the same scenario without cluster.what_if: its iteration time is the
// plain scenario's, and the GPUs made twice as fast shorten the what-if's.
TEST(SimulationSession, TheWhatIfBaseIsTheScenarioWithoutIt) {
  const Scenario plain = load_scenario(kTiny);
  const Scenario faster = load_scenario(kTiny, {{"cluster.what_if.gpu_speed_scale", "2"}});
  const SimulationSession session(faster, {}, SimulationOptions{});
  const auto base = session.run_what_if_base();
  ASSERT_TRUE(base.has_value());
  const double plain_s = iteration_s(plain);
  EXPECT_NEAR(base->iteration_time_s, plain_s, 1e-12 * plain_s);
  EXPECT_LT(iteration_s(faster), plain_s);
}

TEST(SimulationSession, ACostDatabaseThatIsNotThereIsAnError) {
  EXPECT_ANY_THROW(SimulationSession(load_scenario(kTiny), {.cost_db = "/nonexistent/db.json"},
                                     SimulationOptions{}));
}

// A database measured on a CPU, given for the scenario's H100 topology without the topology it
// was measured on, is refused naming the way out (its times would be charged as the H100's own);
// with that topology it is scaled, and a GPU database is taken as the scenario's GPU's.
TEST(SimulationSession, ACostDatabaseOfAnotherKindOfDeviceNeedsItsTopology) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("traintwin-session-{}", getpid());
  fs::create_directories(dir);
  auto write_db = [&](const char* name, const char* device) {
    const fs::path file = dir / name;
    std::ofstream(file) << "{\"format\": \"traintwin-costdb\", \"version\": 1, \"device\": " << device
                        << ", \"versions\": {\"driver\": \"n/a\", \"cuda\": \"n/a\", "
                           "\"cublas\": \"n/a\", \"nccl\": \"n/a\", \"traintwin\": \"0.1.0\"}, "
                           "\"kernels\": []}\n";
    return file;
  };
  const fs::path cpu = write_db(
      "cpu.json", "{\"name\": \"AMD EPYC 7B13\", \"sm_count\": 2, \"clock_mhz\": 2450, "
                  "\"memory_bytes\": 25000000000, \"kind\": \"cpu\", \"threads\": 1}");
  const fs::path gpu = write_db(
      "gpu.json", "{\"name\": \"NVIDIA H100 80GB HBM3\", \"sm_count\": 132, \"clock_mhz\": 1980, "
                  "\"memory_bytes\": 85017493504}");
  try {
    SimulationSession(load_scenario(kTiny), {.cost_db = cpu}, SimulationOptions{});
    ADD_FAILURE() << "a CPU database was taken as the H100's";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("measured on the CPU \"AMD EPYC 7B13\", but topology "
                                         "dgx-h100-superpod is a cluster of H100-SXM-80GB"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("give --cost-db-topology"), std::string::npos);
  }
  EXPECT_NO_THROW(SimulationSession(load_scenario(kTiny), {.cost_db = gpu}, SimulationOptions{}));
  const fs::path topo = fs::path(TRAINTWIN_SOURCE_DIR) / "topologies" / "dgx-a100-superpod.yaml";
  EXPECT_NO_THROW(SimulationSession(load_scenario(kTiny),
                                    {.cost_db = cpu, .cost_db_topology = topo},
                                    SimulationOptions{}));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace traintwin
