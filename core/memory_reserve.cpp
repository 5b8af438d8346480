// The memory a GPU holds besides the model's tensors (core/memory_reserve.hpp).
#include "core/memory_reserve.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"
#include "core/schedule.hpp"

namespace traintwin {

MemoryReserve memory_reserve(const Scenario& s, const StageMemory& m) {
  const ParallelConfig& p = s.parallel;
  MemoryReserve r;
  r.cuda_context_bytes = kCudaContextBytes;
  r.cublas_workspace_bytes = kCublasWorkspaceBytesPerStream * kCublasWorkspaceStreams;
  r.fragmentation_bytes =
      kAllocatorFragmentationShare * (m.activations_bytes + m.embedding_and_logits_bytes);
  // A collective communicator of `members` ranks (none for one rank).
  auto group = [&r](int64_t members) {
    if (members < 2) return;
    r.nccl_communicators += 1;
    r.nccl_bytes += members == 2 ? kNcclTwoMemberCommunicatorBytes : kNcclCommunicatorBytes;
  };
  // An all-to-all over `members` ranks: the communicator and its per-peer connections.
  auto all_to_all = [&r](int64_t members) {
    if (members < 2) return;
    r.nccl_communicators += 1;
    r.nccl_bytes += kNcclCommunicatorBytes +
                    kNcclAllToAllBytesPerPeer *
                        static_cast<double>(std::min(members - 1, kNcclAllToAllMaxPeers));
  };
  const int64_t tp = p.tensor_model_parallel_size, cp = p.context_parallel_size,
                pp = p.pipeline_model_parallel_size, dp = p.data_parallel_size;
  group(tp);
  if (cp > 1) {
    switch (p.cp_comm_type) {
      case CpCommType::kA2a: all_to_all(cp); break;
      case CpCommType::kAllGather: group(cp); break;
      case CpCommType::kP2p: group(2); break;  // the ring: a send and a recv neighbour
    }
  }
  group(dp * cp);
  if (pp > 1) {
    group(2);  // send/recv to the previous and next stage
    if (bidirectional(p.pipeline_schedule)) {
      group(2);  // DualPipe: the mirror pair r, p - 1 - r (its gradients' all-reduce)
    } else if (m.pp_rank == 0 || m.pp_rank == pp - 1) {
      group(2);  // the embedding group
    }
    group(tp * pp);  // model-parallel: the gradient-norm all-reduce
  }
  if (s.model.is_moe()) {
    all_to_all(p.expert_model_parallel_size);
    group(p.expert_data_parallel_size());
  }
  return r;
}

namespace {
/// layout_memory_fit() with stage m on a GPU of capacity_of(m) bytes.
template <typename CapacityOf>
LayoutMemoryFit fit_stages(const Scenario& s, const std::vector<StageMemory>& stages,
                           CapacityOf&& capacity_of) {
  LayoutMemoryFit fit;
  for (const StageMemory& m : stages) {
    const double reserve = memory_reserve(s, m).total_bytes();
    // kFits < kAtRisk < kOutOfMemory
    fit.verdict = std::max(fit.verdict, memory_verdict(m.total_bytes(), capacity_of(m), reserve));
    fit.largest_reserve_bytes = std::max(fit.largest_reserve_bytes, reserve);
  }
  return fit;
}
}  // namespace

LayoutMemoryFit layout_memory_fit(const Scenario& s, const std::vector<StageMemory>& stages,
                                  double capacity_bytes) {
  return fit_stages(s, stages, [capacity_bytes](const StageMemory&) { return capacity_bytes; });
}

LayoutMemoryFit layout_memory_fit(const Scenario& s, const std::vector<StageMemory>& stages,
                                  const std::vector<double>& capacity_per_stage_bytes) {
  return fit_stages(s, stages, [&](const StageMemory& m) {
    if (m.pp_rank < 0 || static_cast<size_t>(m.pp_rank) >= capacity_per_stage_bytes.size()) {
      throw InvalidArgument("layout_memory_fit: stage " + std::to_string(m.pp_rank) +
                            " has no capacity (" +
                            std::to_string(capacity_per_stage_bytes.size()) + " given)");
    }
    return capacity_per_stage_bytes[static_cast<size_t>(m.pp_rank)];
  });
}

}  // namespace traintwin
