// Validation against published runs: ../shared/validation/calibration.yaml's cases turned into
// scenarios, simulated, and compared with what the papers measured.
#pragma once

#include <yaml-cpp/yaml.h>

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
  /// The MFU the source prints (a fraction), where it gives one; shown beside the prediction,
  /// never fitted on.
  std::optional<double> measured_mfu;
  /// The peak memory per GPU the source gives (GiB: torchtitan logs the allocator's maximum
  /// reserved memory, the largest over ranks), where it gives one; shown beside the memory
  /// model's peak (SimulationSummary::peak_memory_bytes), never fitted on.
  std::optional<double> measured_peak_memory_gib;
  /// Non-empty when the case uses a feature traintwin does not build yet (e.g. "mixture of
  /// experts"): `scenario` is then empty and the case is reported, not simulated.
  std::string unsupported;
};

/// Reads calibration.yaml's (or calibration-modern.yaml's) `cases` and builds one ValidationCase
/// per measurement, on the topology of its GPU (topology_file_for_gpu: A100, H100, H200, GB200
/// in `topologies_dir`). A file with `runs` instead of `cases` (published-runs-2026.yaml) is
/// read by load_published_runs(). Settings the sources leave implicit are those of the Megatron-LM
/// / NeMo of the source (documented per source in validation.cpp). Measurements: an iteration time;
/// Narayanan et al.'s tflops_per_gpu (turned into a time with their eq. 3); NeMo's
/// model_tflops_per_gpu (turned into a time with model_flops_per_iteration(), NeMo's formula);
/// Megatron-Bridge's tokens_per_sec_per_gpu (time = global batch x seq_length / (value x GPUs),
/// no FLOP formula; a value <= 0 is a ConfigError).
/// Mixture-of-experts cases (num_moe_experts, moe_*, expert_model_parallel_size) are read like
/// any other (the scenario keys of core/scenario.hpp). Unknown keys or GPUs, or a case without a
/// measurement, are ConfigError naming the case and key.
std::vector<ValidationCase> load_validation_cases(const std::filesystem::path& calibration_file,
                                                  const std::filesystem::path& topologies_dir);

/// The topology file (in the topologies folder) of a calibration GPU name, by prefix: A100* ->
/// dgx-a100-superpod.yaml, H100-96GB* -> grand-teton-h100-96gb.yaml (torchtitan's benchmark
/// hosts), other H100* -> dgx-h100-superpod.yaml, H200* -> dgx-h200-superpod.yaml,
/// GB200* -> gb200-nvl72-superpod.yaml; "" for any other GPU.
std::string topology_file_for_gpu(const std::string& gpu);

/// Settings a source leaves implicit, as the Megatron-LM / NeMo of that source ran them
/// (documented per source in validation.cpp); keys the case gives win where noted there.
/// `parallelism` and `training` are the case's sections, changed in place; `model` is read (the
/// layer count, for the pipeline split a recipe implies).
void apply_source_defaults(const std::string& source, const YAML::Node& model,
                           YAML::Node& parallelism, YAML::Node& training,
                           const std::string& variant);

/// The model a source trained where its rows give none: Sailor's heterogeneous plans
/// (source "eth-easl/sailor ...") trained OPT-350M as Megatron-DeepSpeed's GPT (see
/// validation.cpp); a null node for any other source.
YAML::Node source_default_model(const std::string& source);

/// One pipeline stage of a heterogeneous plan: which of the model's parts it holds.
struct StageLayers {
  bool embedding = false;          ///< the word and position embeddings (Sailor's layer 0)
  int64_t transformer_layers = 0;  ///< transformer layers (Sailor's layers 1 .. l)
  bool loss = false;               ///< final norm, LM head and loss (Sailor's layer l + 1)
};

/// A published-runs `plan` row (Sailor's plan_config: stages in pipeline order, each one node of
/// `gpus_per_node` GPUs of one type running TP = gpus_per_node, or `replicas` naming each
/// data-parallel replica's node) read as a Megatron layout.
struct PlanLayout {
  std::vector<StageLayers> stages;  ///< [PP]
  /// Megatron-Core's --pipeline-model-parallel-layout of the stages ("E,t*11|t*13,L"); "" for one
  /// stage (the whole model).
  std::string pipeline_model_parallel_layout;
  int64_t tensor_model_parallel_size = 1;  ///< the nodes' GPUs
  int64_t data_parallel_size = 1;          ///< replicas per stage
  /// The GPU type of each node in rank order (Megatron's: TP innermost, then DP, then PP), so
  /// replica r of stage s is node r + DP x s: [PP x DP].
  std::vector<std::string> node_gpus;
  /// Non-empty when the plan is not one Megatron layout (stages with different replica counts or
  /// node sizes), saying why.
  std::string unsupported;
};

/// Reads `plan` ({stages: [{gpu, gpus_per_node, layers: "a-b"} or {replicas: [{gpu,
/// gpus_per_node}, ...], layers}]}) for a model of `num_layers` transformer layers. Layers are
/// Sailor's numbers (0 = embedding, 1 .. num_layers the transformer layers, num_layers + 1 the
/// head and loss; sailor/Planner/llm_info.json) and must cover 0 .. num_layers + 1 in stage order,
/// each once. Throws ConfigError naming `where` and the key for a malformed plan; a plan Megatron
/// cannot express comes back with `unsupported` set.
PlanLayout read_plan(const YAML::Node& plan, const std::string& where, int64_t num_layers);

/// The first topology file (by name) in `topologies_dir` whose nodes have
/// plan.tensor_model_parallel_size GPUs and whose node i holds GPU type plan.node_gpus[i]
/// (gpu_of_node: node groups in order, then the file's own GPU) for every node of the plan; ""
/// when none does. Files that do not load are skipped.
std::string plan_topology(const PlanLayout& plan, const std::filesystem::path& topologies_dir);

/// The `runs` of ../shared/validation/published-runs-2026.yaml (`root`, read from `file`) as
/// validation cases: each run with `system: {gpu, num_gpus}`, `model`, `parallelism`,
/// `training` (sections inherited from the run named by `same_as` where the run omits them) and
/// a measured `iteration_time_s` or `tokens_per_s_per_gpu` (T = global batch x sequence length /
/// (tokens/s/GPU x GPUs)); `mfu` is kept as measured_mfu. A run with a `plan` instead of a system
/// (stages on different GPU types) takes its layout from read_plan() and its cluster from
/// plan_topology(), its model from source_default_model() where it gives none; `gpu` then names
/// its GPU types ("RTX-3090 + Titan-RTX"). Runs traintwin cannot simulate (no
/// system, plan or model, a GPU without a topology or other than the topology's, a key
/// the scenario reader refuses) become cases with `unsupported` saying why. Unknown run keys and
/// a `same_as` naming no earlier run are ConfigError naming the file, line and run
/// (sim/published_runs.cpp).
std::vector<ValidationCase> load_published_runs(const YAML::Node& root, const std::string& file,
                                                const std::filesystem::path& topologies_dir);

/// Simulates one supported case (replay, no timeline) with the roofline at `efficiency_of(the
/// case's GPU)` (e.g. default_roofline_efficiency) for the kernels the measured database of the case's GPU lacks (`topologies_dir`/../traces/db/<gpu>.json
/// when it exists, database_dir_beside()) and summarizes it. Throws ConfigError for an
/// unsupported case, and what loading the topology or database and simulating throw.
SimulationSummary simulate_validation_case(
    const ValidationCase& c, const std::function<RooflineEfficiency(const GpuSpec&)>& efficiency_of,
    const std::filesystem::path& topologies_dir);

}  // namespace traintwin
