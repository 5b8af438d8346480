// Communicator of a single process (world size 1): every group has one member, so collectives
// are local copies or no-ops and point-to-point transfers have no peer. Used by the CPU executor
// when it runs without MPI, and as the reference the MPI backend is tested against.
#pragma once

#include <cstdint>
#include <span>

#include "core/rank_layout.hpp"
#include "exec/backend.hpp"
#include "exec/communicator.hpp"

namespace traintwin::exec {

/// A Request that is already complete (wait() returns at once). Used by backends whose operation
/// finished when it was started.
class CompletedRequest final : public Request {
 public:
  void wait() override {}
};

/// The communicator of rank 0 in a world of one rank. Every Request it returns is already
/// complete. Errors (InvalidArgument): a layout whose world size is not 1; all_gather /
/// reduce_scatter whose input and output lengths differ (group size 1); any send or recv
/// (no peer exists).
class LocalCommunicator final : public Communicator {
 public:
  /// Throws InvalidArgument when layout.world_size() != 1, naming the sizes. The copies of
  /// all_gather, reduce_scatter, all_to_all_v and ring_exchange go through `backend` when given
  /// (device memory: Backend::copy, stream-ordered after the kernels that wrote the input), else
  /// they are host copies.
  explicit LocalCommunicator(const RankLayout& layout, Backend* backend = nullptr);

  int64_t rank() const override { return 0; }
  int64_t world_size() const override { return 1; }
  const RankLayout& layout() const override { return layout_; }

  /// No-op: the reduction over one member is its own data.
  RequestPtr all_reduce(GroupKind group, std::span<float> data, ReduceOp op) override;
  RequestPtr all_reduce(GroupKind group, std::span<double> data, ReduceOp op) override;
  /// Copies input to output (output.size() must equal input.size()).
  RequestPtr all_gather(GroupKind group, std::span<const float> input,
                        std::span<float> output) override;
  /// Copies input to output (input.size() must equal output.size()).
  RequestPtr reduce_scatter(GroupKind group, std::span<const float> input, std::span<float> output,
                            ReduceOp op) override;
  /// Copies input to output: one member, whose single count must equal both lengths.
  RequestPtr all_to_all_v(GroupKind group, std::span<const float> input,
                          std::span<const int64_t> send_counts, std::span<float> output,
                          std::span<const int64_t> recv_counts) override;
  /// Copies send to recv (the member's own successor and predecessor is itself).
  RequestPtr ring_exchange(GroupKind group, std::span<const float> send,
                           std::span<float> recv) override;
  /// Always InvalidArgument: a world of one rank has no peer.
  RequestPtr send(int64_t peer, int64_t tag, std::span<const float> data) override;
  RequestPtr recv(int64_t peer, int64_t tag, std::span<float> data) override;

 private:
  void copy(std::span<const float> from, std::span<float> to);

  RankLayout layout_;
  Backend* backend_ = nullptr;
};

}  // namespace traintwin::exec
