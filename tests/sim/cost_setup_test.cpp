// Which cost model the simulator picks: a measured database when there is one, the calibrated
// roofline otherwise.
#include <gtest/gtest.h>

#include <filesystem>

#include "sim/cost_model.hpp"
#include "traces/cost_db.hpp"

namespace traintwin {
namespace {

namespace fs = std::filesystem;

TEST(SimulationCostModel, MeasuredDatabaseFirstThenCalibratedRoofline) {
  const TopologySpec t = load_topology(std::string(TRAINTWIN_SOURCE_DIR) + "/topologies/dgx-h100-superpod.yaml");
  const Kernel gemm{KernelKey{"gemm_fwd", {4096, 4096, 4096}, Precision::kBf16, 1}, 2.0 * 4096 * 4096 * 4096,
                    3.0 * 4096 * 4096 * 2};
  const fs::path dir = fs::temp_directory_path() / "traintwin-cost-setup";
  fs::remove_all(dir);
  fs::create_directories(dir);
  // No database: the calibrated roofline, 2 x 4096^3 / (989e12 x 0.68) + 4 us.
  const auto roofline = make_simulation_cost_model(t.gpu, dir);
  const KernelCost r = roofline->duration(gemm, t.gpu);
  EXPECT_EQ(r.source, CostSource::kRoofline);
  EXPECT_NEAR(r.seconds, 2.0 * 4096 * 4096 * 4096 / (989e12 * 0.68) + 4e-6, 1e-9);
  // traces/db/<gpu name>.json present: its median, source measured.
  CostDatabase db(CostDbDevice{"NVIDIA H100 80GB HBM3", 132, 1980, 85520809984, "9.0"},
                  CostDbVersions{"550", "13.0", "13.0", "2.27", "0.1.0"});
  db.add(KernelMeasurement{gemm.key, 250.0, 248.0, 255.0, 50, gemm.flops, gemm.bytes});
  db.save(dir / (t.gpu.name + ".json"));
  const auto measured = make_simulation_cost_model(t.gpu, dir);
  const KernelCost m = measured->duration(gemm, t.gpu);
  EXPECT_EQ(m.source, CostSource::kMeasured);
  EXPECT_DOUBLE_EQ(m.seconds, 250e-6);
  // A kernel the database lacks falls back to the roofline.
  const Kernel ln{KernelKey{"layernorm_fwd", {8192, 4096}, Precision::kBf16, 1}, 8.0 * 8192 * 4096, 2.0 * 8192 * 4096 * 2};
  EXPECT_EQ(measured->duration(ln, t.gpu).source, CostSource::kRoofline);
}

}  // namespace
}  // namespace traintwin
