// The memory a GPU holds besides the model's tensors (core/memory_reserve.hpp).
#include "core/memory_reserve.hpp"

#include <algorithm>

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
    if (m.pp_rank == 0 || m.pp_rank == pp - 1) group(2);  // the embedding group
    group(tp * pp);  // model-parallel: the gradient-norm all-reduce
  }
  if (s.model.is_moe()) {
    all_to_all(p.expert_model_parallel_size);
    group(p.expert_data_parallel_size());
  }
  return r;
}

LayoutMemoryFit layout_memory_fit(const Scenario& s, const std::vector<StageMemory>& stages,
                                  double capacity_bytes) {
  LayoutMemoryFit fit;
  for (const StageMemory& m : stages) {
    const double reserve = memory_reserve(s, m).total_bytes();
    // kFits < kAtRisk < kOutOfMemory
    fit.verdict = std::max(fit.verdict, memory_verdict(m.total_bytes(), capacity_bytes, reserve));
    fit.largest_reserve_bytes = std::max(fit.largest_reserve_bytes, reserve);
  }
  return fit;
}

}  // namespace traintwin
