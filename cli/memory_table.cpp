#include "cli/memory_table.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "cli/format.hpp"
#include "core/memory.hpp"
#include "core/memory_reserve.hpp"
#include "sim/summary.hpp"

namespace traintwin::cli {

std::string host_memory_lines(const Scenario& s, const TopologySpec& topo,
                              const std::vector<StageMemory>& stages) {
  const TrainingConfig& t = s.training;
  if (!t.optimizer_cpu_offload && !t.cpu_offloading) return "";
  std::string out;
  if (t.optimizer_cpu_offload) {
    out += fmt::format("optimizer CPU offload: {:.0f} % of the optimizer shard on the host "
                       "(fp32 main params, Adam moments, grad copy: 16 B per parameter), stepped "
                       "by the host CPU's AdamW\n",
                       100 * t.optimizer_offload_fraction);
  }
  if (t.cpu_offloading) {
    out += fmt::format("activation CPU offload: the first {} of {} layers' activations on the "
                       "host between their forward and backward\n",
                       t.cpu_offloading_num_layers, s.model.num_layers);
  }
  const StageMemory* most = nullptr;
  for (const StageMemory& m : stages) {
    if (!most || m.host_total_bytes() > most->host_total_bytes()) most = &m;
  }
  if (most == nullptr) return out;
  const GpuSpec& gpu = topo.gpu;
  const std::string sizes =
      fmt::format("host memory per GPU (stage {}): optimizer {}, activations {}, total {}",
                  most->pp_rank, gib(most->host_optimizer_bytes),
                  gib(most->host_activations_bytes), gib(most->host_total_bytes()));
  if (!gpu.host_link) {
    return out + sizes + " (the topology gives no gpu.host_link.host_memory to check it)\n";
  }
  const double cap = gpu.host_link->host_memory_bytes;
  const MemoryVerdict v = host_memory_verdict(most->host_total_bytes(), cap);
  out += fmt::format("{} of {} ({:.1f} %): {}\n", sizes, gib(cap),
                     100 * most->host_total_bytes() / cap,
                     v == MemoryVerdict::kFits ? "fits"
                     : v == MemoryVerdict::kAtRisk
                         ? fmt::format("at risk (above {:.0f} % of the host memory)",
                                       100 * kMemoryAtRiskShare)
                         : std::string("does NOT fit in host memory"));
  return out;
}

std::string memory_table(const Scenario& s, const TopologySpec& topo) {
  const auto stages = memory_per_stage(s);
  // A mixed cluster: every stage against its own ranks' GPUs (sim/summary.hpp), shown per stage.
  const JobGpus job = job_gpus(topo, s.cluster.num_gpus);
  const std::vector<double> capacity_of_stage = gpu_memory_per_stage_bytes(s, job);
  const auto capacity_of = [&](const StageMemory& m) {
    return capacity_of_stage[static_cast<size_t>(m.pp_rank)];
  };
  const std::string gpu_name =
      job.mixed() ? fmt::format("{}: each stage on its own GPUs", job.describe())
                  : topo.gpu.name + " " + gib(topo.gpu.memory_bytes);
  // The sharding as Megatron names it, with its ZeRO stage.
  const TrainingConfig& t = s.training;
  const std::string sharding =
      t.use_megatron_fsdp
          ? fmt::format("Megatron-FSDP {} (ZeRO-{})", to_string(t.data_parallel_sharding_strategy),
                        t.zero_stage())
          : (t.use_distributed_optimizer ? "distributed optimizer" : "optimizer");
  const std::string hsdp =
      t.num_distributed_optimizer_instances > 1
          ? fmt::format(", HSDP: sharded over {} ranks, {} replicas",
                        s.data_parallel_shard_size(), t.num_distributed_optimizer_instances)
          : "";
  // ZeRO-3: the FSDP units whose gathered weights the weights column holds (the most of any
  // stage), and why that many.
  int64_t gathered = 0;
  for (const StageMemory& m : stages) gathered = std::max(gathered, m.fsdp_gathered_units);
  const std::string units =
      t.zero_stage() >= 3
          ? fmt::format(", {} FSDP unit{} gathered ({})", gathered, gathered == 1 ? "" : "s",
                        t.reshard_after_forward
                            ? fmt::format("prefetch depth {}", t.fsdp_prefetch_depth)
                            : "no reshard after forward: every layer of the stage")
          : "";
  std::string out = fmt::format("memory per GPU ({}, {} precision, {}{}{}, recompute {}):\n",
                                gpu_name, to_string(t.precision), sharding, hsdp, units,
                                recompute_text(t));
  // in-flight: peak (micro-batch, model chunk) activation sets; x layers: the transformer-layer
  // activations they hold (each chunk's own layers under an uneven pipeline split).
  out += fmt::format(
      "{:>5} {:>6} {:>10} {:>11} {:>11} {:>11} {:>9} {:>8} {:>11} {:>11} {:>11} {:>11}{}  {}\n",
      "stage", "layers", "params", "weights", "grads", "optimizer", "in-flight", "x layers",
      "activations", "emb+logits", "total", "reserve",
      job.mixed() ? fmt::format(" {:>11}", "GPU memory") : "", "fits");
  // The worst stage: the largest share of its own GPU's memory.
  const StageMemory* worst = nullptr;
  for (const auto& m : stages) {
    const MemoryReserve reserve = memory_reserve(s, m);
    const MemoryVerdict verdict =
        memory_verdict(m.total_bytes(), capacity_of(m), reserve.total_bytes());
    out += fmt::format(
        "{:>5} {:>6} {:>10} {:>11} {:>11} {:>11} {:>9} {:>8} {:>11} {:>11} {:>11} {:>11}{}  {}\n",
        m.pp_rank, m.layers, si(static_cast<double>(m.parameters)),
        gib(m.weights_bytes + m.fp8_weight_copies_bytes), gib(m.gradients_bytes),
        gib(m.optimizer_bytes), m.in_flight, m.in_flight_layers, gib(m.activations_bytes),
        gib(m.embedding_and_logits_bytes), gib(m.total_bytes()), gib(reserve.total_bytes()),
        job.mixed() ? fmt::format(" {:>11}", gib(capacity_of(m))) : "",
        verdict == MemoryVerdict::kFits ? "yes" : to_string(verdict));
    if (!worst || m.total_bytes() / capacity_of(m) > worst->total_bytes() / capacity_of(*worst)) {
      worst = &m;
    }
  }
  if (s.training.fp8() && !stages.empty()) {
    out += fmt::format("weights include the FP8 copies and transposes of the layers' GEMM weights "
                       "({} on stage 0)\n",
                       gib(stages.front().fp8_weight_copies_bytes));
  }
  if (s.model.is_moe() && !stages.empty()) {
    out += fmt::format("MoE: {} routed-expert parameters on stage 0 (their optimizer state over "
                       "expert DP {}); total includes one MoE layer's dispatcher buffers ({})\n",
                       si(static_cast<double>(stages.front().expert_parameters)),
                       s.parallel.expert_data_parallel_size(),
                       gib(stages.front().moe_dispatch_buffers_bytes));
  }
  out += host_memory_lines(s, topo, stages);
  if (worst) {
    const double capacity = capacity_of(*worst);
    const MemoryReserve reserve = memory_reserve(s, *worst);
    const MemoryVerdict verdict =
        memory_verdict(worst->total_bytes(), capacity, reserve.total_bytes());
    out += fmt::format(
        "reserve of stage {}: {} = CUDA context {} + cuBLAS workspaces {} + NCCL buffers {} "
        "({} communicators) + allocator fragmentation {} (core/memory_reserve.hpp)\n",
        worst->pp_rank, gib(reserve.total_bytes()), gib(reserve.cuda_context_bytes),
        gib(reserve.cublas_workspace_bytes), gib(reserve.nccl_bytes), reserve.nccl_communicators,
        gib(reserve.fragmentation_bytes));
    if (verdict != MemoryVerdict::kOutOfMemory) {
      out += fmt::format("{}: {} stage {} uses {} of {} ({:.1f} %), {} with its reserve\n",
                         to_string(verdict), job.mixed() ? "fullest" : "largest",
                         worst->pp_rank, gib(worst->total_bytes()), gib(capacity),
                         100.0 * worst->total_bytes() / capacity,
                         gib(worst->total_bytes() + reserve.total_bytes()));
      if (verdict == MemoryVerdict::kAtRisk) {
        out += fmt::format(
            "warning: inside the reserve or above {:.0f} % of the GPU's memory: the CUDA "
            "context, NCCL buffers, cuBLAS workspaces and allocator fragmentation may not fit\n",
            100 * kMemoryAtRiskShare);
      }
    } else {
      out += fmt::format("does NOT fit: stage {} needs {} of {} ({} over)\n", worst->pp_rank,
                         gib(worst->total_bytes()), gib(capacity),
                         gib(worst->total_bytes() - capacity));
    }
  }
  return out;
}

}  // namespace traintwin::cli
