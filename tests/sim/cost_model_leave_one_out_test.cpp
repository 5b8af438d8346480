// Leave-one-out on a measured database: every kernel row profiled on this machine (the CPU
// backend, kernels of the tiny GPT at hidden sizes 64 to 512) predicted from the others by the
// database model's interpolation rules, with the spread of the errors printed per class. The
// bound (median absolute error below 50 %, 90 % of the rows within a factor of 3) is loose:
// the rows are timed on a shared 2-core machine in a unit test's budget (7 runs each).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "core/scenario.hpp"
#include "exec/cpu/cpu_backend.hpp"
#include "exec/cpu/host_device.hpp"
#include "exec/cpu/matmul.hpp"
#include "exec/profile.hpp"
#include "sim/cost_model.hpp"
#include "traces/cost_db.hpp"

namespace traintwin {
namespace {

Scenario tiny(int64_t hidden) {
  const std::string yaml =
      "name: loo\n"
      "model: {num_layers: 2, hidden_size: " + std::to_string(hidden) +
      ", num_attention_heads: 4, seq_length: 64, vocab_size: 1000}\n"
      "training: {micro_batch_size: 2, global_batch_size: 2, precision: fp32}\n"
      "cluster: {topology: " TRAINTWIN_SOURCE_DIR "/topologies/dgx-h100-superpod.yaml, num_gpus: 1}\n";
  return parse_scenario(yaml, "loo.yaml", TRAINTWIN_SOURCE_DIR);
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1) + 0.5)];
}

TEST(CostDatabaseModel, LeaveOneOutOnAProfiledCpuDatabase) {
  exec::cpu::set_gemm_threads(1);
  exec::cpu::CpuBackend backend;
  CostDatabase db(exec::cpu::host_device(1), exec::cpu::host_versions());
  exec::ProfileOptions opts;
  opts.warmup = 2;
  opts.repeats = 7;
  opts.min_time_s = 0;  // the interpolation rules are under test, not the sampling
  opts.rotate_bytes = 8 << 20;
  for (int64_t h : {64, 128, 256, 512}) {
    const Scenario s = tiny(h);
    std::vector<KernelMeasurement> rows;
    for (const exec::ProfileTarget& t : exec::profile_targets(s)) {
      if (db.find(t.kernel.key) == nullptr) rows.push_back(exec::profile_kernel(backend, s, t, opts));
    }
    // Rows by their median: a mean of 7 samples carries any preemption of a loaded machine, and
    // the interpolation rules are under test, not the sampling.
    for (KernelMeasurement& r : rows) r.mean_us.reset();
    exec::merge_measurements(db, rows);
  }
  GpuSpec device;
  device.name = "cpu";
  device.hbm_bandwidth_Bps = 10e9;
  device.peak.fp32_FLOPs = device.peak.fp16_FLOPs = device.peak.bf16_FLOPs = 50e9;
  const auto loo = leave_one_out(db, device);
  ASSERT_EQ(loo.size(), db.kernels().size());
  std::map<std::string, std::vector<double>> errors;  // by class
  std::vector<double> all;
  for (const LeaveOneOutRow& r : loo) {
    if (!r.predicted_us) continue;
    const double err = (*r.predicted_us - r.row.expected_us()) / r.row.expected_us();
    errors[to_string(kernel_class(r.row.key.name))].push_back(err);
    all.push_back(std::abs(err));
  }
  std::printf("leave-one-out over %zu rows (%zu predicted):\n", loo.size(), all.size());
  for (const auto& [cls, e] : errors) {
    std::printf("  %-10s %3zu rows  error p10 %+6.1f %%  median %+6.1f %%  p90 %+6.1f %%\n",
                cls.c_str(), e.size(), 100 * quantile(e, 0.1), 100 * quantile(e, 0.5),
                100 * quantile(e, 0.9));
  }
  // Families of four hidden sizes: every row but the extremes' far neighbours is predicted.
  ASSERT_GE(all.size(), loo.size() / 2);
  EXPECT_LT(quantile(all, 0.5), 0.5);
  EXPECT_LT(quantile(all, 0.9), 2.0);
}

}  // namespace
}  // namespace traintwin
