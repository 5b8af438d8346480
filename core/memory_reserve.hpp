// What a GPU's memory holds besides the model's tensors (core/memory.hpp counts those): the
// CUDA context, the cuBLAS workspaces, NCCL's communicator buffers and the caching allocator's
// fragmentation. Together they are the reserve a layout must leave free; a peak inside it is
// "at risk" rather than "fits" (memory_verdict()). Next in the flow: cli/memory_table.cpp prints
// it per stage, `simulate` and `sweep` take the verdict.
//
// Sources (published measurements, none fitted here):
//   CUDA context, kernel images, cuBLAS/cuDNN handles: 0.5 GiB (a one-GPU process with NCCL
//     initialised holds 484 MiB: NVIDIA/nccl pull request 2366; PyTorch's own context is
//     300-500 MiB on Hopper);
//   cuBLAS workspace: 32 MiB per stream on Hopper (PyTorch's and Transformer Engine's default
//     for sm90), two streams (compute and the overlapped communication's GEMMs);
//   NCCL: per communicator the rank joins, 544 MB for a two-member one and 688 MB for a larger
//     ring/tree one (4 x A100, NVLink: NVIDIA/nccl issue 964); an all-to-all connects its
//     channels to every peer, 0.47 GB per peer inside a node (8 x H100: 1.06 -> 4.34 GB after the
//     first all_to_all, NVIDIA/nccl issue 1685), and no more beyond 7 peers, since past a node
//     NCCL uses the network's fewer channels and memory stops growing (issue 986);
//   fragmentation of PyTorch's caching allocator: 10 % of the activation bytes (the transient,
//     variable-sized blocks); an assumption, not a measurement: with expandable segments (the
//     NeMo/Megatron recipes' setting) it is smaller, without them it can be larger.
// Communicators counted per rank from the layout, as Megatron-LM creates them and NCCL connects
// them on first use: TP, CP (a two-member ring exchange for p2p, an all-to-all for a2a, a CP
// group for all_gather), the
// DP x CP gradient group, the pipeline's send/recv (two neighbours), the embedding group on the
// first and last stage, the model-parallel group of the gradient-norm all-reduce, and for MoE the
// EP all-to-all and the expert-DP group; a group of one rank needs none.
#pragma once

#include <cstdint>
#include <vector>

#include "core/memory.hpp"
#include "core/scenario.hpp"

namespace traintwin {

/// CUDA context, kernel images and library handles per GPU, bytes.
inline constexpr double kCudaContextBytes = 0.5 * (1 << 30);
/// cuBLAS workspace per stream on Hopper, bytes, and the streams that hold one.
inline constexpr double kCublasWorkspaceBytesPerStream = 32.0 * (1 << 20);
inline constexpr int kCublasWorkspaceStreams = 2;
/// NCCL buffers of a communicator of two members / of more members (ring and tree), bytes.
inline constexpr double kNcclTwoMemberCommunicatorBytes = 544e6;
inline constexpr double kNcclCommunicatorBytes = 688e6;
/// NCCL buffers an all-to-all adds per peer, bytes, and the most peers that add them.
inline constexpr double kNcclAllToAllBytesPerPeer = 0.47e9;
inline constexpr int64_t kNcclAllToAllMaxPeers = 7;
/// The caching allocator's fragmentation as a share of the activation bytes.
inline constexpr double kAllocatorFragmentationShare = 0.10;

/// The reserve of one GPU of a pipeline stage, bytes.
struct MemoryReserve {
  double cuda_context_bytes = 0;
  double cublas_workspace_bytes = 0;
  int64_t nccl_communicators = 0;  ///< communicators the rank joins (all-to-all ones included)
  double nccl_bytes = 0;
  double fragmentation_bytes = 0;
  double total_bytes() const {
    return cuda_context_bytes + cublas_workspace_bytes + nccl_bytes + fragmentation_bytes;
  }
};

/// The reserve of a GPU of stage `m.pp_rank` of `s` (m: stage_memory(s, m.pp_rank)), as this
/// file's opening comment counts it.
MemoryReserve memory_reserve(const Scenario& s, const StageMemory& m);

/// How a layout fits a GPU: the worst verdict of its stages and the largest reserve.
struct LayoutMemoryFit {
  MemoryVerdict verdict = MemoryVerdict::kFits;
  double largest_reserve_bytes = 0;  ///< 0 for no stage
};

/// The fit of a layout on a GPU of `capacity_bytes`: each `stages[i]` of memory_per_stage(s)
/// judged with its own reserve (one memory_reserve() per stage). InvalidArgument as
/// memory_verdict().
LayoutMemoryFit layout_memory_fit(const Scenario& s, const std::vector<StageMemory>& stages,
                                  double capacity_bytes);

/// The same with each stage on GPUs of its own memory: stages[i] against
/// capacity_per_stage_bytes[stages[i].pp_rank] (a mixed cluster's stages, sim/summary.hpp
/// gpu_memory_per_stage_bytes). InvalidArgument as memory_verdict(), or for a pp_rank outside
/// capacity_per_stage_bytes.
LayoutMemoryFit layout_memory_fit(const Scenario& s, const std::vector<StageMemory>& stages,
                                  const std::vector<double>& capacity_per_stage_bytes);

}  // namespace traintwin
