// Speed of reading a cost database (Google Benchmark; CMake target `cost_db_bench`): a database
// of N kernel rows (one GEMM family, N shapes) or of N collective rows is written as
// CostDatabase::write() does, then parsed (CostDatabase::parse: every row checked, duplicates
// found, rows sorted) and made a cost model as `simulate --cost-db` does. Issue 31 measured 7 s
// for 50,000 rows and more than 120 s for 1,000,000 (a pairwise duplicate scan); the reading must
// grow as N log N at most: Google Benchmark's fitted complexity (the BigO line) says which.
//
//   build/cost_db_bench                                     # every size, with the fitted BigO
//   build/cost_db_bench --benchmark_filter=Kernels          # the kernel rows only
#include <benchmark/benchmark.h>

#include <memory>
#include <string>

#include "sim/cost_model.hpp"
#include "topologies/topology.hpp"
#include "traces/cost_db.hpp"

namespace traintwin {
namespace {

const CostDbDevice kDevice{"NVIDIA H100 80GB HBM3", 132, 1980, 85017493504, "9.0", "gpu",
                           std::nullopt};
const CostDbVersions kVersions{"n/a", "n/a", "n/a", "n/a", "0.1.0", std::nullopt};

/// A database of `kernels` GEMM rows and `collectives` all-reduce rows, as text. The rows are
/// made in the database's order (shapes ascending), so that add() appends each.
std::string database_text(int64_t kernels, int64_t collectives) {
  CostDatabase db(kDevice, kVersions);
  for (int64_t i = 0; i < kernels; ++i) {
    const int64_t m = 16 * (1 + i / 1024), k = 16 * (1 + i % 1024);
    KernelMeasurement row;
    row.key = KernelKey{"gemm_fwd", {m, k, 4096}, Precision::kBf16, 1};
    row.median_us = 10.0 + 1e-3 * static_cast<double>(i);
    row.p10_us = 9.0;
    row.p90_us = 1e6;
    row.samples = 10;
    row.flops = 2.0 * static_cast<double>(m * k) * 4096;
    row.bytes = 2.0 * static_cast<double>(m * k + k * 4096 + m * 4096);
    db.add(std::move(row));
  }
  for (int64_t i = 0; i < collectives; ++i) {
    CollectiveMeasurement c;
    c.op = "all_reduce";
    c.bytes = 8 * (i + 1);
    c.ranks = 8;
    c.nodes = 1;
    c.algorithm = "ring";
    c.time_us = 10.0 + static_cast<double>(i);
    c.algbw_GBps = static_cast<double>(c.bytes) / (c.time_us * 1e3);
    c.busbw_GBps = c.algbw_GBps * 1.75;
    db.add(std::move(c));
  }
  return db.to_json();
}

void BM_ParseKernelRows(benchmark::State& state) {
  const std::string text = database_text(state.range(0), 0);
  for (auto _ : state) {
    CostDatabase db = CostDatabase::parse(text, "bench.json");
    benchmark::DoNotOptimize(db.kernels().data());
  }
  state.SetComplexityN(state.range(0));
  state.counters["rows/s"] =
      benchmark::Counter(static_cast<double>(state.range(0)), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_ParseKernelRows)
    ->RangeMultiplier(4)
    ->Range(1 << 12, 1 << 18)
    ->Unit(benchmark::kMillisecond)
    ->Complexity();

void BM_ParseCollectiveRows(benchmark::State& state) {
  const std::string text = database_text(1, state.range(0));
  for (auto _ : state) {
    CostDatabase db = CostDatabase::parse(text, "bench.json");
    benchmark::DoNotOptimize(db.collectives().data());
  }
  state.SetComplexityN(state.range(0));
  state.counters["rows/s"] =
      benchmark::Counter(static_cast<double>(state.range(0)), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_ParseCollectiveRows)
    ->RangeMultiplier(4)
    ->Range(1 << 12, 1 << 18)
    ->Unit(benchmark::kMillisecond)
    ->Complexity();

/// Parsed, then made the cost model `simulate --cost-db` uses (database rows first, the
/// calibrated roofline behind them).
void BM_DatabaseCostModel(benchmark::State& state) {
  const std::string text = database_text(state.range(0), state.range(0) / 8);
  const TopologySpec topo =
      load_topology(std::string(TRAINTWIN_SOURCE_DIR) + "/topologies/dgx-h100-superpod.yaml");
  for (auto _ : state) {
    auto db = std::make_shared<const CostDatabase>(CostDatabase::parse(text, "bench.json"));
    auto model = make_database_cost_model(
        db, topo.gpu, make_roofline_cost_model(default_roofline_efficiency(topo.gpu)));
    benchmark::DoNotOptimize(model.get());
  }
  state.SetComplexityN(state.range(0));
}
BENCHMARK(BM_DatabaseCostModel)
    ->RangeMultiplier(4)
    ->Range(1 << 12, 1 << 18)
    ->Unit(benchmark::kMillisecond)
    ->Complexity();

}  // namespace
}  // namespace traintwin

BENCHMARK_MAIN();
