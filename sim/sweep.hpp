// Parameter sweeps: every combination of a few parallel-layout and training knobs, checked
// against the scenario rules and the memory model, evaluated in parallel worker processes and
// ranked by throughput.
//
// The flow:
//   enumerate_configurations(base, axes, gpu memory)  -> one SweepConfiguration per combination,
//       valid (validate_scenario passes) or invalid (the rule's message), with its memory peak
//   run_sweep(configurations, evaluator, options)      -> one SweepRow per configuration, ranked
//   sweep_json / sweep_csv (sim/sweep_record.hpp, next) -> what `traintwin sweep --out` writes
//
// The evaluator is a plain function Scenario -> metrics JSON (the fields of `simulate --json`,
// at least "tokens_per_s"), so the SimGrid replay (make_simulation_evaluator, one forked process
// per configuration because SimGrid allows one engine per process) and an analytical fast path
// (cheap, in-process: SweepOptions::isolate = false) plug in the same way.
//
// Not done here: splitting a sweep over MPI ranks (`mpirun -np N traintwin sweep`); a sweep runs
// on one machine, with up to SweepOptions::jobs worker processes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/memory.hpp"
#include "core/scenario.hpp"
#include "sim/cost_model.hpp"
#include "sim/isolated.hpp"
#include "sim/replay.hpp"
#include "sim/summary.hpp"
#include "topologies/topology.hpp"

namespace traintwin {

/// The values to sweep. An empty axis keeps the base scenario's value.
struct SweepAxes {
  std::vector<int64_t> tp;   ///< parallelism.tensor_model_parallel_size
  std::vector<int64_t> cp;   ///< parallelism.context_parallel_size
  std::vector<int64_t> pp;   ///< parallelism.pipeline_model_parallel_size
  std::vector<int64_t> mbs;  ///< training.micro_batch_size
  std::vector<int64_t> vpp;  ///< parallelism.virtual_pipeline_model_parallel_size
  std::vector<RecomputeGranularity> recompute;  ///< training.recompute_granularity
  std::vector<bool> sequence_parallel;          ///< parallelism.sequence_parallel
  std::vector<bool> distributed_optimizer;      ///< training.use_distributed_optimizer
  /// FP8 GEMMs on or off: on keeps the base's training.fp8_format, or hybrid when the base has
  /// none (Megatron's recommended format; the base's fp8_recipe stays); off removes it.
  std::vector<bool> fp8;
  std::vector<int64_t> ep;   ///< parallelism.expert_model_parallel_size
  /// parallelism.expert_tensor_parallel_size (empty: the base's, which may be "= TP").
  std::vector<int64_t> etp;
  /// cluster.num_gpus: a scaling study (DP follows, as every configuration derives it).
  std::vector<int64_t> num_gpus;
  /// parallelism.pipeline_schedule, e.g. 1f1b, zb-h1, zb-h2 (a schedule a layout cannot run,
  /// such as a zero-bubble one with VPP > 1, makes that configuration invalid with its rule).
  std::vector<PipelineScheduleKind> pipeline_schedule;
  /// training.data_parallel_sharding_strategy (Megatron-FSDP's ZeRO stage: no_shard, optim,
  /// optim_grads, optim_grads_params). optim, optim_grads and optim_grads_params turn
  /// training.use_megatron_fsdp on, and use_distributed_optimizer with it where the
  /// distributed_optimizer axis is not swept (each change listed in adjustments); no_shard turns
  /// Megatron-FSDP off (the plain layout: the distributed optimizer or DDP as the other axes say).
  std::vector<DataParallelShardingStrategy> data_parallel_sharding_strategy;
  /// training.num_distributed_optimizer_instances: HSDP replica counts (1 = no HSDP); a count
  /// that does not divide a layout's DP x CP makes it invalid with the scenario rule.
  std::vector<int64_t> num_distributed_optimizer_instances;
  /// training.optimizer_cpu_offload on or off (the base's optimizer_offload_fraction kept when
  /// on, reset to 1 when off). On turns use_distributed_optimizer on where the
  /// distributed_optimizer axis is not swept (Megatron's offload needs it; listed in
  /// adjustments); with Megatron-FSDP the scenario rule makes the row invalid. The topology
  /// must give gpu.host_link (checked by the caller, cli/sweep_run.cpp).
  std::vector<bool> optimizer_cpu_offload;
  /// The global batch of each configuration: 0 keeps the base's (fixed); N > 0 makes it N x DP
  /// (a fixed batch per data-parallel replica, weak scaling).
  int64_t global_batch_size_per_dp = 0;
};

/// One combination of the axes applied to the base scenario.
struct SweepConfiguration {
  int64_t index = 0;  ///< position in the enumeration order (0-based)
  /// The base scenario with the combination applied and DP derived as num_gpus / (TP x CP x PP)
  /// (0 when that does not divide).
  Scenario scenario;
  bool valid = false;
  /// Why the combination is invalid: the rule's message (validate_scenario's, without its origin
  /// prefix, or the memory model's); "" when valid.
  std::string invalid_reason;
  /// Dependent switches of the base scenario turned off because an axis turned off what they
  /// need, e.g. "training.overlap_param_gather: true -> false (needs
  /// training.use_distributed_optimizer)". Empty for most configurations.
  std::vector<std::string> adjustments;
  double peak_memory_bytes = 0;  ///< max over pipeline stages of memory_per_stage(); 0 if invalid
  /// The GPU's memory; on a mixed cluster that of the tightest stage's GPUs (check_configuration).
  double memory_capacity_bytes = 0;
  /// The largest stage's reserve (core/memory_reserve.hpp) and the layout's verdict with it.
  double memory_reserve_bytes = 0;
  MemoryVerdict memory_verdict = MemoryVerdict::kFits;
  /// peak_memory_bytes - memory_capacity_bytes when it does not fit, else 0.
  double excess_memory_bytes = 0;
  /// CPU offload (training.optimizer_cpu_offload, cpu_offloading): the host memory one GPU's
  /// process takes, StageMemory::host_total_bytes() of the stage that puts the most on the host
  /// (0 without offload or when invalid).
  double host_memory_bytes = 0;
  /// The host memory per GPU it is checked against (the topology's gpu.host_link.host_memory);
  /// 0: none declared, not checked. An input of check_configuration(), set by the enumeration.
  double host_memory_capacity_bytes = 0;
  /// host_memory_bytes - host_memory_capacity_bytes when the host cannot hold it, else 0.
  double host_excess_memory_bytes = 0;
  /// The index of the configuration whose evaluation this one's is, or -1. Megatron-FSDP's
  /// optim with the distributed optimizer is ZeRO-1, which the distributed optimizer alone
  /// (no_shard) is too, and the Program, the memory model and the summary read the sharding only
  /// through TrainingConfig::zero_stage(): enumerate_configurations links a valid optim row to
  /// its valid no_shard twin (every other axis the same), the later one in the enumeration to the
  /// earlier, and run_sweep evaluates the earlier once and gives both its evaluation.
  int64_t evaluates_as = -1;

  /// Valid and within the GPU's memory and, with CPU offload, the host's.
  bool fits() const {
    return valid && excess_memory_bytes <= 0 && host_excess_memory_bytes <= 0;
  }
  /// TP x CP x PP: the GPUs holding one model replica.
  int64_t gpus_per_replica() const;
};

/// Why a configuration with host_excess_memory_bytes > 0 does not fit, e.g. "host memory: 301.2
/// GiB per GPU of CPU offload (training.optimizer_cpu_offload, cpu_offloading) exceed the
/// topology's gpu.host_link.host_memory of 256.0 GiB by 45.2 GiB"; "" when the host holds it.
std::string host_memory_reason(const SweepConfiguration& c);

/// Per pipeline stage (0 .. PP - 1) of a configuration's scenario, the memory of the GPUs that
/// stage runs on, bytes: on a mixed cluster gpu_memory_per_stage_bytes() of its job
/// (sim/summary.hpp), so each stage is judged on its own GPU. An empty function: every stage on
/// the one gpu_memory_bytes.
using StageMemoryCapacity = std::function<std::vector<double>(const Scenario&)>;

/// The StageMemoryCapacity of a sweep on `topo` over the GPU counts `gpu_counts` (the base's and
/// the --num-gpus axis'): on a mixed cluster (node_groups) each stage against its own GPUs
/// (gpu_memory_per_stage_bytes of job_gpus(topo, n), made here once per count; a configuration
/// of another count throws InvalidArgument); an empty function on a cluster of one GPU type.
StageMemoryCapacity stage_memory_capacity(const TopologySpec& topo,
                                          const std::vector<int64_t>& gpu_counts);

/// Checks configuration `c` (its scenario made: axes applied, DP derived) as the enumeration
/// does: the first broken scenario rule makes it invalid with the rule's message; else the
/// memory model (memory_per_stage) gives its peak, and each stage is judged against its own
/// capacity (`stage_capacity`, else `gpu_memory_bytes` for all): memory_verdict from
/// layout_memory_fit (core/memory_reserve.hpp), excess_memory_bytes the largest stage peak
/// minus that stage's capacity (0 when every stage fits), memory_capacity_bytes the capacity of
/// that tightest stage. With CPU offload and c.host_memory_capacity_bytes > 0 the host memory
/// too: host_memory_bytes against it, host_excess_memory_bytes what does not fit (the layout
/// then does not fit either, as `traintwin memory` judges it: host_memory_verdict). A
/// memory-model error makes it invalid. Resets every verdict field first (but the host
/// capacity); used again by the pipeline-split search (sim/sweep_split.hpp) on the layouts it
/// adds.
void check_configuration(SweepConfiguration& c, double gpu_memory_bytes,
                         const StageMemoryCapacity& stage_capacity = {});

/// The most configurations one sweep enumerates: each is a whole scenario held in memory (a few
/// KB, and its row of results later), so a grid past this bound is refused before any is made
/// (300 x 300 x 300 values ran out of memory).
inline constexpr int64_t kMaxSweepConfigurations = int64_t{1} << 20;

/// Every combination of `axes` applied to `base`, in this order (the last axis varies fastest):
/// num_gpus, tp, cp, pp, vpp, mbs, recompute, sequence_parallel, distributed_optimizer, fp8, ep,
/// etp, pipeline_schedule, data_parallel_sharding_strategy, num_distributed_optimizer_instances,
/// optimizer_cpu_offload.
/// For each: DP is derived (num_gpus / (TP x CP x PP); a remainder makes it invalid, naming
/// cluster.num_gpus) and the global batch follows axes.global_batch_size_per_dp; a switch of
/// the base that needs one the axes turned off is turned off too and listed in `adjustments`
/// (overlap_param_gather needs use_distributed_optimizer; tp_comm_overlap needs
/// sequence_parallel); then validate_scenario() decides (a combination with SP on and TP 1 is
/// invalid, with its rule; so are EP not dividing the experts, ETP x EP not dividing TP x CP x
/// DP, EP > 1 on a dense model); the memory model (memory_per_stage) gives the peak of a valid one,
/// compared with `gpu_memory_bytes`, or per stage with `stage_capacity` where given
/// (check_configuration; a memory-model error makes it invalid). The combinations are
/// checked on `threads` threads (this one and threads - 1 more; each row is independent of the
/// others: the same result for any count). Throws InvalidArgument for an axis value < 1, a
/// duplicate value in an axis, a negative global_batch_size_per_dp, gpu_memory_bytes <= 0,
/// threads < 1, or a grid of more than kMaxSweepConfigurations combinations (naming each axis
/// of more than one value and its count). `host_memory_bytes`: the host memory per GPU CPU
/// offload is checked against (the topology's gpu.host_link.host_memory; 0: not checked).
std::vector<SweepConfiguration> enumerate_configurations(const Scenario& base,
                                                         const SweepAxes& axes,
                                                         double gpu_memory_bytes, int threads = 1,
                                                         const StageMemoryCapacity& stage_capacity = {},
                                                         double host_memory_bytes = 0);

/// How far a sweep has got (the worker pool's progress, sim/isolated.hpp).
using SweepProgress = JobProgress;

/// What an evaluator found for one configuration.
struct SweepEvaluation {
  std::string mode;           ///< "simulate" (the replay) or "analytical" (the estimator)
  SimulationSummary summary;  ///< summary.tokens_per_s ranks the configuration
  /// Everything else the engine knows, as sweep.json writes it: summary_document_json() of a
  /// replay (busiest links, per-stage breakdowns, ...); null when the summary is all there is.
  nlohmann::ordered_json detail;
};
/// A SweepEvaluation through a process boundary (worker process, MPI rank) and back.
void to_json(nlohmann::json& j, const SweepEvaluation& e);
void from_json(const nlohmann::json& j, SweepEvaluation& e);

/// Evaluates one configuration.
using Evaluator = std::function<SweepEvaluation(const Scenario&)>;

/// The SimGrid evaluator: simulate() with `opts` (record_timeline forced off) and `costs` on
/// `topo`, then summarize() and summary_document_json() as the detail; mode "simulate".
/// simulate() creates a SimGrid engine: call it once per process (SweepOptions::isolate = true).
Evaluator make_simulation_evaluator(const TopologySpec& topo,
                                    std::shared_ptr<const CostModel> costs,
                                    SimulationOptions opts = {});

/// The analytical evaluator (sim/analytical.hpp, no SimGrid, runs in-process): estimate(), then
/// summarize() of its iteration time and breakdowns (no link loads or cost sources), mode
/// "analytical", no detail. It owns an EstimateCache (shared by its copies; each worker process
/// has its own): consecutive configurations reuse their schedules and collective times, with the
/// same results as without.
Evaluator make_analytical_evaluator(const TopologySpec& topo, std::shared_ptr<const CostModel> costs,
                                    FabricEfficiency fabric = {});

struct SweepOptions {
  int jobs = 1;  ///< worker processes at once, >= 1
  /// Evaluate each configuration in its own forked child (needed by the SimGrid evaluator, one
  /// engine per process). false (an evaluator that can run many times in one process: the
  /// analytical one): with jobs = 1 in this process, one after the other; with jobs > 1 in
  /// `jobs` worker processes at once, each evaluating a share of the configurations in turn
  /// (the same worker pool, run_isolated_concurrently).
  bool isolate = true;
  /// Evaluate configurations that do not fit the GPU's memory too (default: only listed with
  /// their excess).
  bool evaluate_out_of_memory = false;
  ProgressCallback progress;  ///< optional
};

/// Where a configuration ended up.
enum class SweepStatus {
  kRanked,       ///< valid, fits, evaluated
  kOutOfMemory,  ///< valid, does not fit the GPU's memory
  kError,        ///< valid and fits, but its evaluation failed (message in SweepRow::error)
  kInvalid,      ///< breaks a scenario rule (SweepConfiguration::invalid_reason)
};
/// "ranked" | "oom" | "error" | "invalid".
const char* to_string(SweepStatus s);

/// One configuration's result.
struct SweepRow {
  SweepConfiguration config;
  SweepStatus status = SweepStatus::kInvalid;
  int64_t rank = 0;         ///< 1 = fastest among kRanked rows; 0 for every other status
  std::string error;        ///< kError: the evaluation's message
  double tokens_per_s = 0;  ///< evaluation->summary.tokens_per_s; 0 when not evaluated
  /// What the evaluator found; empty when not evaluated (invalid, out of memory unless
  /// evaluate_out_of_memory, error).
  std::optional<SweepEvaluation> evaluation;
};

/// Evaluates every valid configuration (and those out of memory when asked) with `evaluate`, up
/// to options.jobs at once, and returns every configuration as a row in rank_rows() order. An
/// evaluation that throws, crashes, or gives a tokens_per_s that is not a positive finite number
/// becomes a kError row.
/// Throws InvalidArgument for options.jobs < 1, Error when processes cannot be started.
/// `configurations` by value: a caller done with them moves them in, and each becomes its row's
/// without a copy (a sweep's configurations are whole scenarios, ~2 KB each).
std::vector<SweepRow> run_sweep(std::vector<SweepConfiguration> configurations,
                                const Evaluator& evaluate, const SweepOptions& options = {});

/// Sorts rows and numbers the ranked ones. The order, stable and total:
///   1. kRanked rows by tokens_per_s descending; ties: fewer GPUs per model replica
///      (TP x CP x PP) first, then the enumeration order (SweepConfiguration::index);
///      rank = 1, 2, ... in that order;
///   2. kOutOfMemory rows by excess_memory_bytes ascending (closest to fitting first; a row out
///      of host memory only has 0), then index;
///   3. kError rows, by index;
///   4. kInvalid rows, by index.
std::vector<SweepRow> rank_rows(std::vector<SweepRow> rows);

/// Parses a comma-separated list of integers >= 1 given to `flag` ("1,2,4,8"). Throws ConfigError
/// naming the flag and the allowed values for anything else (empty items, 0, "x", duplicates).
std::vector<int64_t> parse_sweep_integers(const std::string& flag, const std::string& text);
/// Parses "none,selective,full" (any subset, no duplicates); ConfigError naming the flag otherwise.
std::vector<RecomputeGranularity> parse_sweep_recompute(const std::string& flag,
                                                        const std::string& text);
/// Parses a comma-separated list of pipeline schedules by their names (gpipe, 1f1b, zb-h1,
/// zb-h2; no duplicates); ConfigError naming the flag and the allowed names otherwise.
std::vector<PipelineScheduleKind> parse_sweep_schedules(const std::string& flag,
                                                        const std::string& text);
/// Parses a comma-separated list of data-parallel sharding strategies by their names (no_shard,
/// optim, optim_grads, optim_grads_params; no duplicates); ConfigError naming the flag and the
/// allowed names otherwise.
std::vector<DataParallelShardingStrategy> parse_sweep_sharding_strategies(const std::string& flag,
                                                                          const std::string& text);
/// Parses "on,off" (either or both, no duplicates); ConfigError naming the flag otherwise.
std::vector<bool> parse_sweep_switch(const std::string& flag, const std::string& text);

}  // namespace traintwin
