// Validation against published runs: ../shared/validation/calibration.yaml's cases turned into
// scenarios, simulated, and compared with what the papers measured.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/scenario.hpp"
#include "sim/cost_model.hpp"
#include "sim/summary.hpp"

namespace traintwin {

/// One measured number of a published run, with the scenario that reproduces it.
struct ValidationCase {
  std::string id;        ///< case id, plus "/<variant>" where a case has several measurements
  std::string source;    ///< e.g. "narayanan2021 Table 1"
  std::string gpu;       ///< calibration.yaml cluster.gpu, e.g. "A100-SXM-80GB"
  Scenario scenario;
  /// What was measured, as an iteration time in seconds. Narayanan et al.'s TFLOP/s per GPU is
  /// turned into a time with their eq. 3: T = F / (TFLOP/s x GPUs).
  double measured_iteration_time_s = 0;
  std::string measured_as;  ///< "tflops_per_gpu 148" / "iteration_time_s 8.309" ...
  /// Non-empty when the case uses a feature traintwin does not build yet (e.g. "mixture of
  /// experts"): `scenario` is then empty and the case is reported, not simulated.
  std::string unsupported;
};

/// Reads calibration.yaml's (or calibration-modern.yaml's) `cases` and builds one ValidationCase
/// per measurement: A100 cases on `topologies_dir`/dgx-a100-superpod.yaml, H100 on
/// dgx-h100-superpod.yaml. Settings the sources leave implicit are those of the Megatron-LM /
/// NeMo of the source (documented per source in validation.cpp). Measurements: an iteration
/// time; Narayanan et al.'s tflops_per_gpu (turned into a time with their eq. 3); NeMo's
/// model_tflops_per_gpu (turned into a time with model_flops_per_iteration(), NeMo's formula).
/// Mixture-of-experts cases (num_moe_experts, moe_*, expert_model_parallel_size) are read like
/// any other (the scenario keys of core/scenario.hpp). Unknown keys or GPUs, or a case without a
/// measurement, are ConfigError naming the case and key.
std::vector<ValidationCase> load_validation_cases(const std::filesystem::path& calibration_file,
                                                  const std::filesystem::path& topologies_dir);

/// Simulates one supported case (replay, no timeline) with the roofline at `efficiency_of(the
/// case's GPU)` (e.g. default_roofline_efficiency) for the kernels the measured database of the case's GPU lacks (`topologies_dir`/../traces/db/<gpu>.json
/// when it exists, database_dir_beside()) and summarizes it. Throws ConfigError for an
/// unsupported case, and what loading the topology or database and simulating throw.
SimulationSummary simulate_validation_case(
    const ValidationCase& c, const std::function<RooflineEfficiency(const GpuSpec&)>& efficiency_of,
    const std::filesystem::path& topologies_dir);

}  // namespace traintwin
