#include "sim/sweep.hpp"

#include "sim/analytical.hpp"
#include "sim/summary_document.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/memory_reserve.hpp"
#include "core/scenario_enum_names.hpp"
#include "core/scenario_rules.hpp"

namespace traintwin {

int64_t SweepConfiguration::gpus_per_replica() const {
  const ParallelConfig& p = scenario.parallel;
  return p.tensor_model_parallel_size * p.context_parallel_size * p.pipeline_model_parallel_size;
}

// ----- enumeration ----------------------------------------------------------------------------

namespace {

/// The axis, or the base value alone when the axis is empty.
template <typename T>
std::vector<T> or_base(const std::vector<T>& axis, T base) {
  return axis.empty() ? std::vector<T>{base} : axis;
}

void check_axis(const char* name, const std::vector<int64_t>& axis) {
  std::set<int64_t> seen;
  for (int64_t v : axis) {
    if (v < 1) throw InvalidArgument(fmt::format("SweepAxes::{}: {} is < 1", name, v));
    if (!seen.insert(v).second) {
      throw InvalidArgument(fmt::format("SweepAxes::{}: {} is given twice", name, v));
    }
  }
}

template <typename T>
void check_unique(const char* name, const std::vector<T>& axis) {
  for (size_t i = 0; i < axis.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (axis[i] == axis[j]) {
        throw InvalidArgument(fmt::format("SweepAxes::{}: a value is given twice", name));
      }
    }
  }
}

/// One combination of the axes' values (etp 0: the base's expert TP setting). sp_swept and
/// vpp_swept: whether those two come from an axis (kept as given) or from the base (adapted to
/// the layout as Megatron-LM adapts them, adapt_inherited()).
struct Combination {
  int64_t num_gpus, tp, cp, pp, vpp, mbs;
  RecomputeGranularity recompute;
  bool sp, distributed_optimizer, fp8;
  int64_t ep, etp;
  PipelineScheduleKind schedule;
  DataParallelShardingStrategy sharding = DataParallelShardingStrategy::kNoShard;
  int64_t instances = 1;  // training.num_distributed_optimizer_instances
  int64_t global_batch_size_per_dp = 0;  // 0: the base's global batch
  bool sp_swept = false, vpp_swept = false;
  bool sharding_swept = false;  // sharding from the axis (else the base's, untouched)
  bool distributed_optimizer_swept = false;
  bool offload = false;         // training.optimizer_cpu_offload
  bool offload_swept = false;   // offload from the axis (else the base's, untouched)
  bool operator==(const Combination&) const = default;
};

/// The sharding strategy of `k` (when swept) applied to `s`: Megatron-FSDP on for optim,
/// optim_grads and optim_grads_params (with the distributed optimizer it needs, unless that axis
/// is swept: then the scenario rule decides), off for no_shard; below ZeRO-3 the base's
/// reshard_after_forward and fsdp_prefetch_depth back to their defaults; each change listed.
void apply_sharding(const Combination& k, Scenario& s, std::vector<std::string>& adjustments) {
  if (!k.sharding_swept) return;
  TrainingConfig& t = s.training;
  t.data_parallel_sharding_strategy = k.sharding;
  const bool fsdp = k.sharding != DataParallelShardingStrategy::kNoShard;
  if (fsdp != t.use_megatron_fsdp) {
    adjustments.push_back(
        fsdp ? "training.use_megatron_fsdp: false -> true (training.data_parallel_sharding_strategy "
               "optim, optim_grads and optim_grads_params are Megatron-FSDP's)"
             : "training.use_megatron_fsdp: true -> false (training.data_parallel_sharding_strategy "
               "no_shard: the plain data-parallel layout)");
    t.use_megatron_fsdp = fsdp;
  }
  if (fsdp && !t.use_distributed_optimizer && !k.distributed_optimizer_swept) {
    t.use_distributed_optimizer = true;
    adjustments.push_back(
        "training.use_distributed_optimizer: false -> true (needed by training.use_megatron_fsdp, "
        "as Megatron-LM)");
  }
  // The base's ZeRO-3 unit schedule has no parameters to gather below ZeRO-3.
  if (t.zero_stage() < 3) {
    if (!t.reshard_after_forward) {
      t.reshard_after_forward = true;
      adjustments.push_back(
          "training.reshard_after_forward: false -> true (needs "
          "training.data_parallel_sharding_strategy optim_grads_params)");
    }
    if (t.fsdp_prefetch_depth != 1) {
      adjustments.push_back(fmt::format(
          "training.fsdp_prefetch_depth: {} -> 1 (needs training.data_parallel_sharding_strategy "
          "optim_grads_params)",
          t.fsdp_prefetch_depth));
      t.fsdp_prefetch_depth = 1;
    }
  }
}

/// The optimizer CPU offload of `k` (when swept) applied to `s`: on keeps the base's
/// optimizer_offload_fraction and turns the distributed optimizer on where its axis is not swept
/// (Megatron-LM's offload needs it); off resets the fraction to 1 (it needs the offload); each
/// change listed.
void apply_offload(const Combination& k, Scenario& s, std::vector<std::string>& adjustments) {
  if (!k.offload_swept) return;
  TrainingConfig& t = s.training;
  t.optimizer_cpu_offload = k.offload;
  if (!k.offload && t.optimizer_offload_fraction != 1.0) {
    adjustments.push_back(fmt::format(
        "training.optimizer_offload_fraction: {} -> 1 (needs training.optimizer_cpu_offload)",
        t.optimizer_offload_fraction));
    t.optimizer_offload_fraction = 1.0;
  }
  if (k.offload && !t.use_distributed_optimizer && !k.distributed_optimizer_swept) {
    t.use_distributed_optimizer = true;
    adjustments.push_back(
        "training.use_distributed_optimizer: false -> true (needed by "
        "training.optimizer_cpu_offload, as Megatron-LM)");
  }
}

/// What Megatron-LM does with switches a layout outgrows (megatron/training/arguments.py), for
/// the sequence parallelism and virtual pipeline size the base scenario gives and no axis sweeps:
/// SP is turned off at TP 1; the virtual pipeline size is re-derived from the base's layers per
/// virtual stage (--num-layers-per-virtual-pipeline-stage N: v = num_layers / (PP x N)), and is
/// 1 at PP 1 or where N does not divide num_layers / PP. Each change is listed in `adjustments`.
void adapt_inherited(const Scenario& base, const Combination& k, Scenario& s,
                     std::vector<std::string>& adjustments) {
  if (!k.sp_swept && s.parallel.sequence_parallel && k.tp == 1) {
    s.parallel.sequence_parallel = false;
    adjustments.push_back(
        "parallelism.sequence_parallel: true -> false (TP 1 has no activations to shard; "
        "Megatron-LM turns it off)");
  }
  const int64_t base_v = base.parallel.virtual_pipeline_model_parallel_size;
  const int64_t base_pp = base.parallel.pipeline_model_parallel_size;
  const int64_t layers = base.model.num_layers;
  if (k.vpp_swept || base_v <= 1 || k.pp == base_pp || layers % (base_pp * base_v) != 0) return;
  const int64_t per_vstage = layers / (base_pp * base_v);
  const int64_t v = k.pp > 1 && layers % (k.pp * per_vstage) == 0 ? layers / (k.pp * per_vstage)
                                                                   : 1;
  s.parallel.virtual_pipeline_model_parallel_size = v;
  adjustments.push_back(fmt::format(
      "parallelism.virtual_pipeline_model_parallel_size: {} -> {} ({})", base_v, v,
      k.pp == 1 ? "PP 1 has no pipeline to interleave"
                : v > 1 ? fmt::format("{} layers per virtual stage kept, as Megatron-LM's "
                                      "--num-layers-per-virtual-pipeline-stage derives it",
                                      per_vstage)
                        : fmt::format("{} layers per virtual stage do not divide {} layers / PP {}",
                                      per_vstage, layers, k.pp)));
}

/// Applies one combination to a copy of the base, derives DP, checks the rules and memory, into
/// `c` (default-constructed).
void make_configuration(const Scenario& base, int64_t index, const Combination& k,
                        double gpu_memory_bytes, const StageMemoryCapacity& stage_capacity,
                        double host_memory_bytes, SweepConfiguration& c) {
  const int64_t tp = k.tp, cp = k.cp, pp = k.pp, vpp = k.vpp, mbs = k.mbs;
  const RecomputeGranularity recompute = k.recompute;
  const bool sp = k.sp, distributed_optimizer = k.distributed_optimizer, fp8 = k.fp8;
  c.index = index;
  c.memory_capacity_bytes = gpu_memory_bytes;
  c.host_memory_capacity_bytes = host_memory_bytes;
  Scenario& s = c.scenario;
  s = base;
  s.cluster.num_gpus = k.num_gpus;
  s.parallel.tensor_model_parallel_size = tp;
  s.parallel.context_parallel_size = cp;
  s.parallel.pipeline_model_parallel_size = pp;
  s.parallel.virtual_pipeline_model_parallel_size = vpp;
  s.parallel.sequence_parallel = sp;
  s.training.micro_batch_size = mbs;
  s.training.recompute_granularity = recompute;
  s.parallel.pipeline_schedule = k.schedule;
  adapt_inherited(base, k, s, c.adjustments);
  // ZB-V places two model chunks per rank (its V, core/schedule.hpp), DualPipe two copies of
  // whole stages: a configuration that does not sweep the virtual pipeline size gets v = 2 when
  // the layers divide over 2 x PP (DualPipe: over PP; else the scenario rules refuse it, naming
  // the key).
  const int64_t chunk_stages = bidirectional(k.schedule) ? pp : 2 * pp;
  if (v_shaped(k.schedule) && !k.vpp_swept && pp > 1 &&
      s.parallel.virtual_pipeline_model_parallel_size != 2 &&
      s.model.num_layers % chunk_stages == 0) {
    c.adjustments.push_back(fmt::format(
        "parallelism.virtual_pipeline_model_parallel_size: {} -> 2 ({} holds two model chunks "
        "per pipeline rank)",
        s.parallel.virtual_pipeline_model_parallel_size, to_string(k.schedule)));
    s.parallel.virtual_pipeline_model_parallel_size = 2;
  }
  s.training.use_distributed_optimizer = distributed_optimizer;
  s.parallel.expert_model_parallel_size = k.ep;
  if (k.etp > 0) s.parallel.expert_tensor_parallel_size = k.etp;
  if (fp8) {
    s.training.fp8_format = base.training.fp8_format.value_or(Fp8Format::kHybrid);
  } else {
    s.training.fp8_format.reset();
    if (s.training.fp8_param_gather) {
      s.training.fp8_param_gather = false;
      c.adjustments.push_back(
          "training.fp8_param_gather: true -> false (needs training.fp8_format)");
    }
  }
  apply_sharding(k, s, c.adjustments);
  apply_offload(k, s, c.adjustments);
  s.training.num_distributed_optimizer_instances = k.instances;
  if (base.training.use_distributed_optimizer && !s.training.use_distributed_optimizer &&
      s.training.overlap_param_gather) {
    s.training.overlap_param_gather = false;
    c.adjustments.push_back(
        "training.overlap_param_gather: true -> false (needs training.use_distributed_optimizer)");
  }
  if (base.parallel.sequence_parallel && !s.parallel.sequence_parallel &&
      s.training.tp_comm_overlap) {
    s.training.tp_comm_overlap = false;
    c.adjustments.push_back(
        "training.tp_comm_overlap: true -> false (needs parallelism.sequence_parallel)");
  }
  const int64_t replica = tp * s.parallel.context_parallel_size * pp;
  if (s.cluster.num_gpus % replica != 0) {
    s.parallel.data_parallel_size = 0;
    c.invalid_reason = fmt::format(
        "cluster.num_gpus: {} is not divisible by tensor_model_parallel_size x "
        "context_parallel_size x pipeline_model_parallel_size = {} x {} x {} = {} "
        "(rule: num_gpus = TP x CP x PP x DP)",
        s.cluster.num_gpus, tp, s.parallel.context_parallel_size, pp, replica);
    return;
  }
  s.parallel.data_parallel_size = s.cluster.num_gpus / replica;
  if (k.global_batch_size_per_dp > 0) {
    s.training.global_batch_size = k.global_batch_size_per_dp * s.parallel.data_parallel_size;
  }
  check_configuration(c, gpu_memory_bytes, stage_capacity);
}

/// Rows per block of the parallel enumeration: thread t of T takes blocks t, t + T, ... (the
/// rows' costs vary along the grid; interleaved blocks even them out).
constexpr size_t kEnumerationBlock = 64;

/// make_configuration() of every combination into `out` (same size), on `threads` threads. The
/// exception of the first row (in enumeration order) that throws is rethrown, as a loop would.
void make_configurations(const Scenario& base, const std::vector<Combination>& combinations,
                         double gpu_memory_bytes, const StageMemoryCapacity& stage_capacity,
                         double host_memory_bytes, int threads,
                         std::vector<SweepConfiguration>& out) {
  const size_t n = combinations.size();
  const size_t blocks = (n + kEnumerationBlock - 1) / kEnumerationBlock;
  const size_t t_count = std::max<size_t>(1, std::min(static_cast<size_t>(threads), blocks));
  // Each thread's first failure: its row and exception. A thread stops there; every row before
  // the smallest failing row has been made, so that one is the loop's first failure.
  std::vector<size_t> failed_at(t_count, n);
  std::vector<std::exception_ptr> failure(t_count);
  auto work = [&](size_t t) {
    for (size_t b = t; b < blocks; b += t_count) {
      const size_t end = std::min(n, (b + 1) * kEnumerationBlock);
      for (size_t i = b * kEnumerationBlock; i < end; ++i) {
        try {
          make_configuration(base, static_cast<int64_t>(i), combinations[i], gpu_memory_bytes,
                             stage_capacity, host_memory_bytes, out[i]);
        } catch (...) {
          failed_at[t] = i;
          failure[t] = std::current_exception();
          return;
        }
      }
    }
  };
  std::vector<std::thread> helpers;
  try {
    for (size_t t = 1; t < t_count; ++t) helpers.emplace_back(work, t);
  } catch (...) {  // a thread that cannot start: the started ones end before the error leaves
    for (std::thread& h : helpers) h.join();
    throw;
  }
  work(0);
  for (std::thread& h : helpers) h.join();
  const size_t first =
      static_cast<size_t>(std::min_element(failed_at.begin(), failed_at.end()) - failed_at.begin());
  if (failure[first]) std::rethrow_exception(failure[first]);
}

}  // namespace

std::string host_memory_reason(const SweepConfiguration& c) {
  if (!(c.host_excess_memory_bytes > 0)) return "";
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  return fmt::format(
      "host memory: {:.1f} GiB per GPU of CPU offload (training.optimizer_cpu_offload, "
      "cpu_offloading) exceed the topology's gpu.host_link.host_memory of {:.1f} GiB by {:.1f} GiB",
      c.host_memory_bytes / kGiB, c.host_memory_capacity_bytes / kGiB,
      c.host_excess_memory_bytes / kGiB);
}

StageMemoryCapacity stage_memory_capacity(const TopologySpec& topo,
                                          const std::vector<int64_t>& gpu_counts) {
  if (topo.node_groups.empty()) return {};
  auto jobs = std::make_shared<std::map<int64_t, JobGpus>>();
  for (const int64_t n : gpu_counts) {
    if (jobs->count(n) == 0) jobs->emplace(n, job_gpus(topo, n));
  }
  return [jobs](const Scenario& s) {
    const auto it = jobs->find(s.cluster.num_gpus);
    if (it == jobs->end()) {
      throw InvalidArgument(fmt::format("stage_memory_capacity: no GPUs made for {} GPUs",
                                        s.cluster.num_gpus));
    }
    return gpu_memory_per_stage_bytes(s, it->second);
  };
}

void check_configuration(SweepConfiguration& c, double gpu_memory_bytes,
                         const StageMemoryCapacity& stage_capacity) {
  const Scenario& s = c.scenario;
  c.valid = false;
  c.invalid_reason.clear();
  c.peak_memory_bytes = 0;
  c.excess_memory_bytes = 0;
  c.memory_reserve_bytes = 0;
  c.memory_verdict = MemoryVerdict::kFits;
  c.memory_capacity_bytes = gpu_memory_bytes;
  c.host_memory_bytes = 0;
  c.host_excess_memory_bytes = 0;
  // The first broken rule as a value (validate_scenario's rule and message without its
  // "sweep: " prefix): most rows of a large grid break one, and an exception per row would cost
  // more than checking the rules.
  if (const std::optional<scenario_rules::RuleBreach> broken =
          scenario_rules::first_broken_rule(s)) {
    c.invalid_reason = broken->message();
    return;
  }
  try {
    const std::vector<StageMemory> stages = memory_per_stage(s);
    // Each stage against the memory of its own GPUs (a mixed cluster), else all against one.
    const std::vector<double> capacity =
        stage_capacity ? stage_capacity(s)
                       : std::vector<double>(
                             static_cast<size_t>(s.parallel.pipeline_model_parallel_size),
                             gpu_memory_bytes);
    double tightest = -std::numeric_limits<double>::infinity();
    for (const StageMemory& m : stages) {
      c.host_memory_bytes = std::max(c.host_memory_bytes, m.host_total_bytes());
      c.peak_memory_bytes = std::max(c.peak_memory_bytes, m.total_bytes());
      const double cap = capacity.at(static_cast<size_t>(m.pp_rank));
      if (m.total_bytes() - cap > tightest) {
        tightest = m.total_bytes() - cap;
        c.memory_capacity_bytes = cap;
      }
    }
    const LayoutMemoryFit fit = layout_memory_fit(s, stages, capacity);
    c.memory_reserve_bytes = fit.largest_reserve_bytes;
    c.memory_verdict = fit.verdict;
    c.excess_memory_bytes = std::max(0.0, tightest);
    // CPU offload: the host's memory too, where the topology declares it (the verdict of
    // `traintwin memory`, host_memory_verdict: out of memory above the capacity).
    if (c.host_memory_capacity_bytes > 0 && c.host_memory_bytes > 0 &&
        host_memory_verdict(c.host_memory_bytes, c.host_memory_capacity_bytes) ==
            MemoryVerdict::kOutOfMemory) {
      c.host_excess_memory_bytes = c.host_memory_bytes - c.host_memory_capacity_bytes;
    }
  } catch (const Error& e) {
    c.invalid_reason = std::string("memory model: ") + e.what();
    c.peak_memory_bytes = 0;
    c.excess_memory_bytes = 0;
    c.host_memory_bytes = 0;
    c.host_excess_memory_bytes = 0;
    return;
  }
  c.valid = true;
}

namespace {

/// SweepConfiguration::evaluates_as of every Megatron-FSDP optim row of the enumeration
/// (`combinations`, `out` in the same order): its no_shard twin is the combination with the
/// sharding axis' no_shard instead, `stride` places away per position of the `shardings` axis
/// (the axes nested inside it: HSDP instances, offload). Twins when both are valid and ZeRO-1
/// with the distributed optimizer (TrainingConfig::zero_stage(): the only way the lowering, the
/// memory model and the summary read the sharding), so that they evaluate alike.
void link_zero1_twins(const std::vector<Combination>& combinations,
                      const std::vector<DataParallelShardingStrategy>& shardings, size_t stride,
                      std::vector<SweepConfiguration>& out) {
  const auto at = [&](DataParallelShardingStrategy z) {
    return static_cast<int64_t>(std::find(shardings.begin(), shardings.end(), z) -
                                shardings.begin());
  };
  const int64_t optim = at(DataParallelShardingStrategy::kOptim);
  const int64_t no_shard = at(DataParallelShardingStrategy::kNoShard);
  const auto n = static_cast<int64_t>(shardings.size());
  if (optim == n || no_shard == n) return;
  const int64_t offset = (no_shard - optim) * static_cast<int64_t>(stride);
  auto zero1 = [](const SweepConfiguration& c) {
    return c.valid && c.scenario.training.use_distributed_optimizer &&
           c.scenario.training.zero_stage() == 1;
  };
  for (size_t j = 0; j < combinations.size(); ++j) {
    const Combination& k = combinations[j];
    if (!k.sharding_swept || k.sharding != DataParallelShardingStrategy::kOptim) continue;
    const int64_t i = static_cast<int64_t>(j) + offset;
    if (i < 0 || i >= static_cast<int64_t>(combinations.size())) continue;
    Combination twin = combinations[static_cast<size_t>(i)];
    twin.sharding = k.sharding;
    if (!(twin == k)) continue;  // (not the same combination but for the sharding)
    SweepConfiguration& a = out[static_cast<size_t>(i)];
    SweepConfiguration& b = out[j];
    if (!zero1(a) || !zero1(b) || a.fits() != b.fits()) continue;
    (i < static_cast<int64_t>(j) ? b : a).evaluates_as = std::min<int64_t>(i, static_cast<int64_t>(j));
  }
}

}  // namespace

std::vector<SweepConfiguration> enumerate_configurations(const Scenario& base,
                                                         const SweepAxes& axes,
                                                         double gpu_memory_bytes, int threads,
                                                         const StageMemoryCapacity& stage_capacity,
                                                         double host_memory_bytes) {
  if (threads < 1) {
    throw InvalidArgument(
        fmt::format("enumerate_configurations: threads must be >= 1, got {}", threads));
  }
  if (!(gpu_memory_bytes > 0)) {
    throw InvalidArgument(fmt::format(
        "enumerate_configurations: gpu_memory_bytes must be > 0, got {}", gpu_memory_bytes));
  }
  if (!(host_memory_bytes >= 0)) {
    throw InvalidArgument(fmt::format(
        "enumerate_configurations: host_memory_bytes must be >= 0, got {}", host_memory_bytes));
  }
  check_axis("tp", axes.tp);
  check_axis("cp", axes.cp);
  check_axis("pp", axes.pp);
  check_axis("vpp", axes.vpp);
  check_axis("mbs", axes.mbs);
  check_unique("recompute", axes.recompute);
  check_unique("sequence_parallel", axes.sequence_parallel);
  check_unique("distributed_optimizer", axes.distributed_optimizer);
  check_unique("fp8", axes.fp8);
  check_unique("pipeline_schedule", axes.pipeline_schedule);
  check_unique("data_parallel_sharding_strategy", axes.data_parallel_sharding_strategy);
  check_axis("ep", axes.ep);
  check_axis("etp", axes.etp);
  check_axis("num_gpus", axes.num_gpus);
  check_axis("num_distributed_optimizer_instances", axes.num_distributed_optimizer_instances);
  check_unique("optimizer_cpu_offload", axes.optimizer_cpu_offload);
  if (axes.global_batch_size_per_dp < 0) {
    throw InvalidArgument(fmt::format("sweep: global_batch_size_per_dp must be >= 0, got {}",
                                      axes.global_batch_size_per_dp));
  }
  const auto gpus = or_base(axes.num_gpus, base.cluster.num_gpus);
  const auto tps = or_base(axes.tp, base.parallel.tensor_model_parallel_size);
  const auto cps = or_base(axes.cp, base.parallel.context_parallel_size);
  const auto pps = or_base(axes.pp, base.parallel.pipeline_model_parallel_size);
  const auto vpps = or_base(axes.vpp, base.parallel.virtual_pipeline_model_parallel_size);
  const auto mbss = or_base(axes.mbs, base.training.micro_batch_size);
  const auto recomputes = or_base(axes.recompute, base.training.recompute_granularity);
  const auto sps = or_base(axes.sequence_parallel, base.parallel.sequence_parallel);
  const auto dos = or_base(axes.distributed_optimizer, base.training.use_distributed_optimizer);
  const auto fp8s = or_base(axes.fp8, base.training.fp8());
  const auto eps = or_base(axes.ep, base.parallel.expert_model_parallel_size);
  const auto etps = or_base(axes.etp, base.parallel.expert_tensor_parallel_size.value_or(0));
  const auto schedules = or_base(axes.pipeline_schedule, base.parallel.pipeline_schedule);
  const auto shardings =
      or_base(axes.data_parallel_sharding_strategy, base.training.data_parallel_sharding_strategy);
  const auto instances = or_base(axes.num_distributed_optimizer_instances,
                                 base.training.num_distributed_optimizer_instances);
  const auto offloads = or_base(axes.optimizer_cpu_offload, base.training.optimizer_cpu_offload);
  // The grid's size before any combination is made (in double: 16 axes of many values may pass
  // int64's range), naming every axis of more than one value.
  const std::pair<const char*, size_t> sizes[] = {
      {"cluster.num_gpus", gpus.size()},
      {"parallelism.tensor_model_parallel_size", tps.size()},
      {"parallelism.context_parallel_size", cps.size()},
      {"parallelism.pipeline_model_parallel_size", pps.size()},
      {"parallelism.virtual_pipeline_model_parallel_size", vpps.size()},
      {"training.micro_batch_size", mbss.size()},
      {"training.recompute_granularity", recomputes.size()},
      {"parallelism.sequence_parallel", sps.size()},
      {"training.use_distributed_optimizer", dos.size()},
      {"training.fp8_format (on/off)", fp8s.size()},
      {"parallelism.expert_model_parallel_size", eps.size()},
      {"parallelism.expert_tensor_parallel_size", etps.size()},
      {"parallelism.pipeline_schedule", schedules.size()},
      {"training.data_parallel_sharding_strategy", shardings.size()},
      {"training.num_distributed_optimizer_instances", instances.size()},
      {"training.optimizer_cpu_offload", offloads.size()},
  };
  double grid = 1;
  std::string named;
  for (const auto& [name, n] : sizes) {
    grid *= static_cast<double>(n);
    if (n > 1) named += fmt::format("{}{} ({} values)", named.empty() ? "" : " x ", name, n);
  }
  if (grid > static_cast<double>(kMaxSweepConfigurations)) {
    throw InvalidArgument(fmt::format(
        "sweep: {} = {:.0f} configurations, more than the {} a sweep holds (each is a whole "
        "scenario in memory); sweep fewer values per axis, or split the grid into several sweeps",
        named, grid, kMaxSweepConfigurations));
  }
  std::vector<Combination> combinations;
  combinations.reserve(static_cast<size_t>(grid));
  for (int64_t n : gpus) {
    for (int64_t tp : tps) {
      for (int64_t cp : cps) {
        for (int64_t pp : pps) {
          for (int64_t vpp : vpps) {
            for (int64_t mbs : mbss) {
              for (RecomputeGranularity r : recomputes) {
                for (bool sp : sps) {
                  for (bool d : dos) {
                    for (bool f8 : fp8s) {
                      for (int64_t ep : eps) {
                        for (int64_t etp : etps) {
                          for (PipelineScheduleKind ps : schedules) {
                            for (DataParallelShardingStrategy z : shardings) {
                              for (int64_t inst : instances) {
                                for (bool off : offloads) {
                                  Combination k{n,  tp, cp, pp, vpp, mbs, r,
                                                sp, d,  f8, ep, etp, ps,  z, inst};
                                  k.global_batch_size_per_dp = axes.global_batch_size_per_dp;
                                  k.sp_swept = !axes.sequence_parallel.empty();
                                  k.vpp_swept = !axes.vpp.empty();
                                  k.sharding_swept = !axes.data_parallel_sharding_strategy.empty();
                                  k.distributed_optimizer_swept =
                                      !axes.distributed_optimizer.empty();
                                  k.offload = off;
                                  k.offload_swept = !axes.optimizer_cpu_offload.empty();
                                  combinations.push_back(k);
                                }
                              }
                            }
                          }
                        }
                      }
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  std::vector<SweepConfiguration> out(combinations.size());
  make_configurations(base, combinations, gpu_memory_bytes, stage_capacity, host_memory_bytes,
                      threads, out);
  link_zero1_twins(combinations, shardings, instances.size() * offloads.size(), out);
  return out;
}

// ----- evaluation and ranking -----------------------------------------------------------------

Evaluator make_simulation_evaluator(const TopologySpec& topo,
                                    std::shared_ptr<const CostModel> costs,
                                    SimulationOptions opts) {
  if (!costs) throw InvalidArgument("make_simulation_evaluator: costs is null");
  opts.record_timeline = false;
  return [topo, costs, opts](const Scenario& s) {
    const SimulationResult r = simulate(s, topo, *costs, opts);
    // The replay's whole summary as the row's metrics; the version is sweep.json's own.
    const SummaryDocument doc = summary_document(s, topo, r);
    return SweepEvaluation{"simulate", doc.summary, summary_document_json(doc)};
  };
}

void to_json(nlohmann::json& j, const SweepEvaluation& e) {
  // The detail as text: nlohmann::json would sort its keys, sweep.json keeps their order.
  j = nlohmann::json{{"mode", e.mode}, {"summary", e.summary}, {"detail", e.detail.dump()}};
}

void from_json(const nlohmann::json& j, SweepEvaluation& e) {
  j.at("mode").get_to(e.mode);
  j.at("summary").get_to(e.summary);
  e.detail = nlohmann::ordered_json::parse(j.at("detail").get<std::string>());
}

const char* to_string(SweepStatus s) {
  switch (s) {
    case SweepStatus::kRanked:
      return "ranked";
    case SweepStatus::kOutOfMemory:
      return "oom";
    case SweepStatus::kError:
      return "error";
    case SweepStatus::kInvalid:
      return "invalid";
  }
  return "?";
}

namespace {

/// Fills the row from an evaluation; false (with row.error) when its tokens_per_s cannot rank.
bool take_evaluation(SweepRow& row, SweepEvaluation e) {
  const double t = e.summary.tokens_per_s;
  if (!(t > 0) || !std::isfinite(t)) {
    row.error = fmt::format("the evaluation gave tokens_per_s = {} (allowed: a positive finite "
                            "number; iteration time {} s)", t, e.summary.iteration_time_s);
    return false;
  }
  row.tokens_per_s = t;
  row.evaluation = std::move(e);
  return true;
}

}  // namespace

std::vector<SweepRow> run_sweep(std::vector<SweepConfiguration> configurations,
                                const Evaluator& evaluate, const SweepOptions& options) {
  if (options.jobs < 1) {
    throw InvalidArgument(
        fmt::format("run_sweep: options.jobs must be >= 1, got {}", options.jobs));
  }
  std::vector<SweepRow> rows(configurations.size());
  std::vector<size_t> todo;  // rows to evaluate
  // Rows that take an earlier row's evaluation (SweepConfiguration::evaluates_as): (row, its).
  std::vector<std::pair<size_t, size_t>> twins;
  std::vector<uint8_t> queued(configurations.size(), 0);
  for (size_t i = 0; i < configurations.size(); ++i) {
    SweepRow& row = rows[i];
    row.config = std::move(configurations[i]);
    if (!row.config.valid) {
      row.status = SweepStatus::kInvalid;
    } else {
      row.status = row.config.fits() ? SweepStatus::kRanked : SweepStatus::kOutOfMemory;
      if (row.config.fits() || options.evaluate_out_of_memory) {
        // (evaluates_as indexes the enumeration: the twin sits there when the rows are as
        // enumerate_configurations made them.)
        const int64_t twin = row.config.evaluates_as;
        if (twin >= 0 && static_cast<size_t>(twin) < i && queued[static_cast<size_t>(twin)] &&
            rows[static_cast<size_t>(twin)].config.index == twin) {
          twins.emplace_back(i, static_cast<size_t>(twin));
        } else {
          todo.push_back(i);
          queued[i] = 1;
        }
      }
    }
  }
  // Evaluation failures: an error row, whatever the memory verdict (its excess is still kept).
  auto fail = [&rows](size_t i, std::string message) {
    rows[i].status = SweepStatus::kError;
    rows[i].error = std::move(message);
    rows[i].evaluation.reset();
  };
  if (options.isolate) {
    std::vector<std::function<std::string()>> work;
    work.reserve(todo.size());
    for (size_t i : todo) {
      const Scenario* s = &rows[i].config.scenario;
      work.push_back([s, &evaluate] { return nlohmann::json(evaluate(*s)).dump(); });
    }
    const auto outcomes = run_isolated_concurrently(work, options.jobs, options.progress);
    for (size_t k = 0; k < todo.size(); ++k) {
      const size_t i = todo[k];
      if (!outcomes[k].ok) {
        fail(i, outcomes[k].error);
        continue;
      }
      SweepEvaluation e;
      try {
        e = nlohmann::json::parse(outcomes[k].output).get<SweepEvaluation>();
      } catch (const std::exception& x) {
        fail(i, std::string("the worker's evaluation cannot be read back: ") + x.what());
        continue;
      }
      if (!take_evaluation(rows[i], std::move(e))) fail(i, rows[i].error);
    }
  } else if (options.jobs > 1 && todo.size() > 1) {
    // Shares of the configurations. Each share is a forked worker, which costs ~10 ms of CPU
    // (fork, copy-on-write faults of the heap it writes, its results through a pipe as CBOR: ~15
    // analytical estimates, bench/sweep_bench; a fresh worker also starts from the evaluator's
    // cache as the fork found it), so a share holds at least ~500 configurations: one share per
    // worker for a small sweep, up to 8 per worker on a large one for the progress bar. The
    // configurations are dealt in groups of those that share the analytical estimator's
    // pipeline plan (schedule, PP, VPP, micro-batches: sim/analytical_plan.hpp, ~0.5 M
    // instructions each on the sharding grid of bench/sweep_grid.hpp), so only one worker makes
    // each plan. The groups differ in cost by 20x (an estimate's step-level dataflow runs
    // PP x VPP x micro-batches steps per pass, bench/README.md), so they are dealt as the longest
    // processing time first rule deals jobs to machines (Graham 1969): heaviest group first, each
    // to the share with the least work so far, work counted as kFixedWork + PP x VPP x
    // micro-batches per configuration (kFixedWork: the lowering and the rest of one estimate,
    // ~0.4 ms, in units of one schedule step of one stage, ~0.2 us, measured on that grid). A
    // share runs its groups one after the other (each in enumeration order), so that the cache's
    // most recent plans (EstimateCache) hold the one in use.
    const size_t per_worker = std::clamp<size_t>(todo.size() / 500, 1, 8);
    const size_t shares = std::min(todo.size(), static_cast<size_t>(options.jobs) * per_worker);
    std::vector<std::vector<size_t>> share_of(shares);  // positions in todo, group by group
    {
      constexpr double kFixedWork = 2000;
      std::map<std::tuple<int, int64_t, int64_t, int64_t>, size_t> groups;
      std::vector<std::vector<size_t>> members;  // per group, positions in todo
      std::vector<double> work;                  // per group
      for (size_t x = 0; x < todo.size(); ++x) {
        const Scenario& sc = rows[todo[x]].config.scenario;
        const ParallelConfig& par = sc.parallel;
        const int64_t per_step = sc.training.micro_batch_size * par.data_parallel_size;
        const int64_t m = per_step > 0 ? sc.num_micro_batches() : 0;
        const auto key = std::make_tuple(static_cast<int>(par.pipeline_schedule),
                                         par.pipeline_model_parallel_size,
                                         par.virtual_pipeline_model_parallel_size, m);
        const size_t g = groups.try_emplace(key, groups.size()).first->second;
        if (g == members.size()) {
          members.emplace_back();
          work.push_back(0);
        }
        members[g].push_back(x);
        work[g] += kFixedWork + static_cast<double>(par.pipeline_model_parallel_size) *
                                    static_cast<double>(par.virtual_pipeline_model_parallel_size) *
                                    static_cast<double>(std::max<int64_t>(m, 0));
      }
      std::vector<size_t> heaviest_first(members.size());
      for (size_t g = 0; g < heaviest_first.size(); ++g) heaviest_first[g] = g;
      std::stable_sort(heaviest_first.begin(), heaviest_first.end(),
                       [&work](size_t a, size_t b) { return work[a] > work[b]; });
      std::vector<double> load(shares, 0.0);
      for (const size_t g : heaviest_first) {
        const size_t k = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
        load[k] += work[g];
        share_of[k].insert(share_of[k].end(), members[g].begin(), members[g].end());
      }
    }
    std::vector<std::function<std::string()>> work;
    for (size_t k = 0; k < shares; ++k) {
      work.push_back([&rows, &todo, &evaluate, &share_of, k] {
        nlohmann::json out = nlohmann::json::array();
        for (const size_t x : share_of[k]) {
          try {
            out.push_back({{"evaluation", evaluate(rows[todo[x]].config.scenario)}});
          } catch (const std::exception& e) {
            out.push_back({{"error", e.what()}});
          }
        }
        // CBOR, not text: the same values (doubles bit for bit), read back at a fraction of the
        // cost of parsing their decimal text, which the parent does alone.
        const std::vector<uint8_t> bytes = nlohmann::json::to_cbor(out);
        return std::string(bytes.begin(), bytes.end());
      });
    }
    // Progress in configurations: n / shares configurations per finished share (about: the
    // shares differ by their groups).
    ProgressCallback per_share;
    if (options.progress) {
      per_share = [&options, &todo, shares](const JobProgress& p) {
        JobProgress q = p;
        const double scale = static_cast<double>(todo.size()) / static_cast<double>(shares);
        q.total = static_cast<int64_t>(todo.size());
        q.done = std::min<int64_t>(q.total, static_cast<int64_t>(static_cast<double>(p.done) * scale));
        q.rate_per_s = p.rate_per_s * scale;
        options.progress(q);
      };
    }
    const auto outcomes = run_isolated_concurrently(work, options.jobs, per_share);
    for (size_t k = 0; k < shares; ++k) {
      nlohmann::json results;
      std::string failure;
      if (!outcomes[k].ok) {
        failure = outcomes[k].error;
      } else {
        try {
          results = nlohmann::json::from_cbor(outcomes[k].output);
        } catch (const std::exception& x) {
          failure = std::string("the worker's evaluations cannot be read back: ") + x.what();
        }
      }
      size_t n = 0;
      for (const size_t x : share_of[k]) {
        const size_t i = todo[x];
        const size_t at = n++;
        if (!failure.empty()) {
          fail(i, failure);
        } else if (results.at(at).contains("error")) {
          fail(i, results.at(at).at("error").get<std::string>());
        } else if (!take_evaluation(rows[i], results.at(at).at("evaluation").get<SweepEvaluation>())) {
          fail(i, rows[i].error);
        }
      }
    }
  } else {
    const ProgressClock clock(static_cast<int64_t>(todo.size()), options.progress);
    clock.report(0);
    int64_t done = 0;
    for (size_t i : todo) {
      try {
        if (!take_evaluation(rows[i], evaluate(rows[i].config.scenario))) fail(i, rows[i].error);
      } catch (const std::exception& e) {
        fail(i, e.what());
      }
      clock.report(++done);
    }
  }
  for (const auto& [i, twin] : twins) {
    const SweepRow& from = rows[twin];
    rows[i].status = from.status;
    rows[i].error = from.error;
    rows[i].tokens_per_s = from.tokens_per_s;
    rows[i].evaluation = from.evaluation;
  }
  return rank_rows(std::move(rows));
}

std::vector<SweepRow> rank_rows(std::vector<SweepRow> rows) {
  // Sorts positions, then moves each row into place (once, and once more per cycle of the
  // permutation): a SweepRow (its Scenario) is costly to move.
  auto group = [](SweepStatus s) {
    switch (s) {
      case SweepStatus::kRanked:
        return 0;
      case SweepStatus::kOutOfMemory:
        return 1;
      case SweepStatus::kError:
        return 2;
      case SweepStatus::kInvalid:
        return 3;
    }
    return 4;
  };
  // The fields the order reads, side by side (the rows are ~2 KB apart: a comparison of two of
  // them would miss the cache twice).
  struct Key {
    int group;
    double tokens_per_s;
    int64_t gpus_per_replica;
    double excess_memory_bytes;
    int64_t index;
  };
  std::vector<Key> keys(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const SweepRow& r = rows[i];
    keys[i] = {group(r.status), r.tokens_per_s,
               r.status == SweepStatus::kRanked ? r.config.gpus_per_replica() : 0,
               r.config.excess_memory_bytes, r.config.index};
  }
  std::vector<size_t> order(rows.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&keys](size_t ia, size_t ib) {
    const Key& a = keys[ia];
    const Key& b = keys[ib];
    if (a.group != b.group) return a.group < b.group;
    if (a.group == 0) {  // kRanked
      if (a.tokens_per_s != b.tokens_per_s) return a.tokens_per_s > b.tokens_per_s;
      if (a.gpus_per_replica != b.gpus_per_replica) return a.gpus_per_replica < b.gpus_per_replica;
    } else if (a.group == 1) {  // kOutOfMemory
      if (a.excess_memory_bytes != b.excess_memory_bytes) {
        return a.excess_memory_bytes < b.excess_memory_bytes;
      }
    }
    return a.index < b.index;
  });
  // The permutation applied in place, cycle by cycle (position i takes rows[order[i]]): no
  // second vector of rows to fault in.
  for (size_t start = 0; start < order.size(); ++start) {
    if (order[start] == start) continue;
    SweepRow held = std::move(rows[start]);
    size_t at = start;
    while (order[at] != start) {
      const size_t from = order[at];
      rows[at] = std::move(rows[from]);
      order[at] = at;
      at = from;
    }
    rows[at] = std::move(held);
    order[at] = at;
  }
  int64_t rank = 0;
  for (SweepRow& r : rows) r.rank = r.status == SweepStatus::kRanked ? ++rank : 0;
  return rows;
}

// ----- flag parsing ---------------------------------------------------------------------------

namespace {

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> items;
  size_t pos = 0;
  for (;;) {
    const size_t comma = text.find(',', pos);
    std::string item =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    const auto b = item.find_first_not_of(" \t");
    const auto e = item.find_last_not_of(" \t");
    items.push_back(b == std::string::npos ? "" : item.substr(b, e - b + 1));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return items;
}

void reject_duplicates(const std::string& flag, const std::vector<std::string>& items,
                       const std::string& allowed) {
  for (size_t i = 0; i < items.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (items[i] == items[j]) {
        throw ConfigError(fmt::format("{}: '{}' is given twice (allowed: {}, each at most once)",
                                      flag, items[i], allowed));
      }
    }
  }
}

}  // namespace

std::vector<int64_t> parse_sweep_integers(const std::string& flag, const std::string& text) {
  const std::string allowed = "a comma-separated list of integers >= 1, e.g. 1,2,4,8";
  std::vector<int64_t> out;
  for (const std::string& item : split_commas(text)) {
    int64_t v = 0;
    bool ok = !item.empty() && item.size() <= 18 &&
              std::all_of(item.begin(), item.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (ok) {
      v = std::stoll(item);
      ok = v >= 1;
    }
    if (!ok) throw ConfigError(fmt::format("{}: '{}' is not allowed ({})", flag, item, allowed));
    if (std::find(out.begin(), out.end(), v) != out.end()) {
      throw ConfigError(
          fmt::format("{}: {} is given twice ({}, each at most once)", flag, v, allowed));
    }
    out.push_back(v);
  }
  return out;
}

std::vector<RecomputeGranularity> parse_sweep_recompute(const std::string& flag,
                                                        const std::string& text) {
  const std::string allowed = "none, selective, full";
  const auto items = split_commas(text);
  reject_duplicates(flag, items, allowed);
  std::vector<RecomputeGranularity> out;
  for (const std::string& item : items) {
    if (item == "none") {
      out.push_back(RecomputeGranularity::kNone);
    } else if (item == "selective") {
      out.push_back(RecomputeGranularity::kSelective);
    } else if (item == "full") {
      out.push_back(RecomputeGranularity::kFull);
    } else {
      throw ConfigError(fmt::format("{}: '{}' is not allowed (allowed: {}, comma-separated)", flag,
                                    item, allowed));
    }
  }
  return out;
}

namespace {

/// A comma-separated list of an enum's names (EnumNames), no duplicates; ConfigError naming the
/// flag and the allowed names otherwise.
template <typename E>
std::vector<E> parse_sweep_enum(const std::string& flag, const std::string& text) {
  std::string allowed;
  for (std::string_view n : EnumNames<E>::table.names()) {
    allowed += (allowed.empty() ? "" : ", ") + std::string(n);
  }
  const auto items = split_commas(text);
  reject_duplicates(flag, items, allowed);
  std::vector<E> out;
  for (const std::string& item : items) {
    const auto kind = EnumNames<E>::table.parse(item);
    if (!kind) {
      throw ConfigError(fmt::format("{}: '{}' is not allowed (allowed: {}, comma-separated)", flag,
                                    item, allowed));
    }
    out.push_back(*kind);
  }
  return out;
}

}  // namespace

std::vector<PipelineScheduleKind> parse_sweep_schedules(const std::string& flag,
                                                        const std::string& text) {
  return parse_sweep_enum<PipelineScheduleKind>(flag, text);
}

std::vector<DataParallelShardingStrategy> parse_sweep_sharding_strategies(const std::string& flag,
                                                                          const std::string& text) {
  return parse_sweep_enum<DataParallelShardingStrategy>(flag, text);
}

std::vector<bool> parse_sweep_switch(const std::string& flag, const std::string& text) {
  const std::string allowed = "on, off";
  const auto items = split_commas(text);
  reject_duplicates(flag, items, allowed);
  std::vector<bool> out;
  for (const std::string& item : items) {
    if (item == "on") {
      out.push_back(true);
    } else if (item == "off") {
      out.push_back(false);
    } else {
      throw ConfigError(fmt::format("{}: '{}' is not allowed (allowed: {}, comma-separated)", flag,
                                    item, allowed));
    }
  }
  return out;
}

Evaluator make_analytical_evaluator(const TopologySpec& topo, std::shared_ptr<const CostModel> costs,
                                    FabricEfficiency fabric) {
  // What one estimate computes for the next (schedules, collective times): bound to this
  // evaluator's own topology and fabric efficiency, which it holds in `state`.
  struct State {
    TopologySpec topo;
    std::shared_ptr<const CostModel> costs;
    FabricEfficiency fabric;
    EstimateCache cache;
  };
  auto state = std::make_shared<State>();
  state->topo = topo;
  state->costs = std::move(costs);
  state->fabric = std::move(fabric);
  return [state](const Scenario& s) {
    const IterationMetrics a =
        estimate(s, state->topo, *state->costs, state->fabric, StepScope::kBoundary, &state->cache);
    return SweepEvaluation{"analytical", summarize(s, state->topo, a), nullptr};
  };
}

}  // namespace traintwin
