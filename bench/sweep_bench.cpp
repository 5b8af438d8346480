// Speed of the analytical sweep (Google Benchmark; CMake target `sweep_bench`): the 4,608-row
// grid of GPT-3 175B on 1024 H100 (scenarios/gpt3-175b-h100-1024.yaml), TP 1,2,4,8 x PP
// 1,2,4,8,16,32 x micro-batch 1,2,4,8 x VPP 1,2,3,4 x recompute none/selective/full x SP on/off x
// distributed optimizer on/off, as `traintwin sweep --mode analytical` runs it:
// enumerate_configurations() (scenario rules and memory model of every row, on `jobs` threads),
// then run_sweep() with the analytical evaluator on `jobs` workers.
//
//   build/sweep_bench                                   # every benchmark
//   build/sweep_bench --benchmark_filter=Grid/2         # the grid on 2 workers
//
// Counters: evaluated/s (ranked + out of memory rows — the configurations the sweep ranks or lists
// with their excess — per second of wall time: the figure, target >= 5,000 on 2 cores),
// rows/s (every row of the grid, rejected layouts included), and the counts of each. On a shared
// machine the wall time counts the other processes too: evaluated/cpu_s divides by the CPU time
// of this process and of its worker processes together (getrusage, children reaped by the pool),
// cpu_ms that CPU time per sweep and parent_cpu_ms this process's part (enumeration, forks,
// reading the workers' results back: what 2 workers cannot share). BM_Estimate times one
// estimate() of the base layout.
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <cstdio>
#include <memory>
#include <string>

#include "bench/sweep_grid.hpp"
#include "core/allocator_policy.hpp"
#include "core/scenario.hpp"
#include "sim/analytical.hpp"
#include "sim/cost_model.hpp"
#include "sim/sweep.hpp"

namespace traintwin {
namespace {

struct Fixture {
  Scenario base;
  TopologySpec topo;
  std::shared_ptr<const CostModel> costs;
  SweepAxes axes;

  Fixture() {
    base = load_scenario(std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/gpt3-175b-h100-1024.yaml");
    topo = load_topology(base.cluster.topology);
    costs = make_roofline_cost_model(default_roofline_efficiency(topo.gpu));
    axes = gpt3_175b_speed_grid();
  }
};

const Fixture& fixture() {
  static const Fixture f = [] {
    retain_freed_memory();  // as `traintwin sweep` runs
    return Fixture();
  }();
  return f;
}

/// CPU seconds of this process (`who` RUSAGE_SELF) or of its reaped children (RUSAGE_CHILDREN).
double cpu_s(int who) {
  rusage u{};
  ::getrusage(who, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  return s(u.ru_utime) + s(u.ru_stime);
}

void run_grid(benchmark::State& state, const SweepAxes& axes);

void BM_AnalyticalSweepGrid(benchmark::State& state) { run_grid(state, fixture().axes); }
BENCHMARK(BM_AnalyticalSweepGrid)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

/// The grid with the sharding axis (bench/sweep_grid.hpp): 4x the rows, ZeRO-3 estimated with its
/// DP-stream queue (sim/analytical.hpp).
void BM_AnalyticalSweepGridSharding(benchmark::State& state) {
  static const SweepAxes axes = gpt3_175b_sharding_grid();
  run_grid(state, axes);
}
BENCHMARK(BM_AnalyticalSweepGridSharding)
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

/// The grid with the pipeline-schedule axis (bench/sweep_grid.hpp): 5x the rows.
void BM_AnalyticalSweepGridSchedules(benchmark::State& state) {
  static const SweepAxes axes = gpt3_175b_schedule_grid();
  run_grid(state, axes);
}
BENCHMARK(BM_AnalyticalSweepGridSchedules)
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void run_grid(benchmark::State& state, const SweepAxes& axes) {
  const Fixture& f = fixture();
  SweepOptions options;
  options.isolate = false;
  options.jobs = static_cast<int>(state.range(0));
  const Evaluator eval = make_analytical_evaluator(f.topo, f.costs);
  int64_t rows = 0, evaluated = 0, ranked = 0, errors = 0;
  const double self0 = cpu_s(RUSAGE_SELF), children0 = cpu_s(RUSAGE_CHILDREN);
  for (auto _ : state) {
    auto configs = enumerate_configurations(f.base, axes, f.topo.gpu.memory_bytes, options.jobs);
    const auto out = run_sweep(std::move(configs), eval, options);
    rows = static_cast<int64_t>(out.size());
    evaluated = ranked = errors = 0;
    for (const SweepRow& r : out) {
      evaluated += r.status == SweepStatus::kRanked || r.status == SweepStatus::kOutOfMemory;
      ranked += r.status == SweepStatus::kRanked;
      errors += r.status == SweepStatus::kError;
    }
    benchmark::DoNotOptimize(out.data());
  }
  const double parent_s = cpu_s(RUSAGE_SELF) - self0;
  const double all_s = parent_s + cpu_s(RUSAGE_CHILDREN) - children0;
  const auto n = static_cast<double>(state.iterations());
  state.counters["cpu_ms"] = 1e3 * all_s / n;
  state.counters["parent_cpu_ms"] = 1e3 * parent_s / n;
  state.counters["evaluated/cpu_s"] = static_cast<double>(evaluated) * n / all_s;
  state.counters["rows"] = static_cast<double>(rows);
  state.counters["evaluated"] = static_cast<double>(evaluated);
  state.counters["ranked"] = static_cast<double>(ranked);
  state.counters["errors"] = static_cast<double>(errors);
  state.counters["rows/s"] = benchmark::Counter(static_cast<double>(rows) * n, benchmark::Counter::kIsRate);
  state.counters["evaluated/s"] =
      benchmark::Counter(static_cast<double>(evaluated) * n, benchmark::Counter::kIsRate);
}

void BM_EnumerateGrid(benchmark::State& state) {
  const Fixture& f = fixture();
  for (auto _ : state) {
    const auto configs = enumerate_configurations(f.base, f.axes, f.topo.gpu.memory_bytes);
    benchmark::DoNotOptimize(configs.data());
  }
}
BENCHMARK(BM_EnumerateGrid)->Unit(benchmark::kMillisecond);

void BM_Estimate(benchmark::State& state) {
  const Fixture& f = fixture();
  for (auto _ : state) {
    const IterationMetrics m = estimate(f.base, f.topo, *f.costs);
    benchmark::DoNotOptimize(m.iteration_time_s);
  }
}
BENCHMARK(BM_Estimate)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace traintwin

BENCHMARK_MAIN();
