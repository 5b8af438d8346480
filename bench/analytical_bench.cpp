// Speed figures of the analytical fast path (sim/analytical.hpp); build by hand, see
// bench/README.md. Usage: analytical_bench [SCENARIO [SECONDS [THREADS [base|sweep]]]]
// Prints the estimate of SCENARIO (default scenarios/gpt3-175b-h100-1024.yaml), then times
// estimates for SECONDS (default 3) on THREADS threads (default 2) and prints configurations
// per second: of SCENARIO alone (`base`, the default) or of a sweep over its layouts
// (`sweep`: micro-batch size, VPP, recomputation, PP).
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "core/scenario.hpp"
#include "sim/analytical.hpp"
#include "sim/cost_model.hpp"

using namespace traintwin;  // NOLINT(build/namespaces): a benchmark's main

int main(int argc, char** argv) {
  const std::string file = argc > 1 ? argv[1] : "scenarios/gpt3-175b-h100-1024.yaml";
  const double seconds = argc > 2 ? std::stod(argv[2]) : 3.0;
  const int threads = argc > 3 ? std::stoi(argv[3]) : 2;
  const bool sweep = argc > 4 && std::string(argv[4]) == "sweep";
  const Scenario base = load_scenario(file);
  const TopologySpec topo = load_topology(base.cluster.topology);
  const auto costs = make_roofline_cost_model(default_roofline_efficiency(topo.gpu));
  const IterationMetrics a = estimate(base, topo, *costs);
  std::printf("%s: iteration %.6f s (compute %.4f, tp %.4f, pp %.4f, dp %.4f, bubble %.4f), "
              "probe ops %lld\n", base.name.c_str(), a.iteration_time_s, a.critical.compute_s,
              a.critical.exposed_tp_s, a.critical.exposed_pp_s, a.critical.exposed_dp_s,
              a.critical.bubble_s, static_cast<long long>(a.ops));
  std::fflush(stdout);
  // The configurations: variants of the base layout on the same GPUs.
  std::vector<Scenario> configs = {base};
  const std::string pp_keys[] = {"8", "16"};
  for (const std::string& mb : {"1", "2"}) {
    if (!sweep) break;
    for (const std::string& vpp : {"1", "2", "3"}) {
      for (const std::string& rc : {"none", "selective", "full"}) {
        for (const std::string& pp : pp_keys) {
          try {
            configs.push_back(load_scenario(
                file, {{"training.micro_batch_size", mb},
                       {"parallelism.virtual_pipeline_model_parallel_size", vpp},
                       {"training.recompute_granularity", rc},
                       {"parallelism.pipeline_model_parallel_size", pp},
                       {"parallelism.data_parallel_size", "null"}}));
          } catch (const Error&) {
            // An impossible layout (layers not divisible, ...): not a configuration.
          }
        }
      }
    }
  }
  std::printf("%zu configurations\n", configs.size());
  std::atomic<long long> done{0};
  std::atomic<bool> stop{false};
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      size_t i = static_cast<size_t>(t);
      while (!stop.load(std::memory_order_relaxed)) {
        const IterationMetrics r = estimate(configs[i % configs.size()], topo, *costs);
        if (r.iteration_time_s <= 0) std::abort();
        ++i;
        done.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& th : pool) th.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%lld estimates in %.2f s on %d threads: %.0f configurations/s\n",
              static_cast<long long>(done.load()), wall, threads,
              static_cast<double>(done.load()) / wall);
  return 0;
}
