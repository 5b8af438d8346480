// The executor's communicator: collectives over the groups of a RankLayout (TP, CP, DP, PP,
// DP-CP, embedding, model-parallel, world) and point-to-point transfers between global ranks.
// Backends: LocalCommunicator (one process, world size 1), MpiCommunicator (Open MPI, one process
// per rank); the NCCL backend of the GPU executor implements the same interface.
//
// Semantics (the Program's, core/program.hpp):
//  - Every operation is non-blocking: it starts the transfer and returns a Request; the buffers
//    must stay alive and untouched (inputs unmodified, outputs unread) until Request::wait().
//  - The members of a group start the collectives of that group in the same order.
//  - Member order inside a group is layout.group(kind, rank) order: all_gather output and
//    reduce_scatter input are the concatenation of one piece per member in that order.
//  - A send and the recv on its peer with the same tag form one transfer.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/rank_layout.hpp"

namespace traintwin::exec {

/// Reduction of all_reduce / reduce_scatter.
enum class ReduceOp { kSum, kMax };

/// An operation in flight. Destroying a Request that was not waited for waits for it.
class Request {
 public:
  virtual ~Request() = default;
  /// Blocks until the operation has completed on this rank. Idempotent.
  /// Throws CommError when the backend reports a failure.
  virtual void wait() = 0;
};
using RequestPtr = std::unique_ptr<Request>;

/// Collectives and point-to-point transfers of one rank. Errors: InvalidArgument for a group
/// this rank is not a member of (e.g. kEmbedding on a middle pipeline stage), buffer lengths that
/// do not match (all_gather: output = group size x input; reduce_scatter: input = group size x
/// output), a peer outside the world; CommError for a backend failure.
class Communicator {
 public:
  virtual ~Communicator() = default;

  /// This process's global rank and the world size.
  virtual int64_t rank() const = 0;
  virtual int64_t world_size() const = 0;
  /// The layout whose groups the collectives use.
  virtual const RankLayout& layout() const = 0;

  /// In place over the members of `group` (the group of this rank).
  virtual RequestPtr all_reduce(GroupKind group, std::span<float> data, ReduceOp op) = 0;
  virtual RequestPtr all_reduce(GroupKind group, std::span<double> data, ReduceOp op) = 0;
  /// output[i * n .. (i+1) * n) = input of member i (n = input.size()).
  virtual RequestPtr all_gather(GroupKind group, std::span<const float> input,
                                std::span<float> output) = 0;
  /// output = reduction over members of their input[i * n .. (i+1) * n), i = this rank's position
  /// in the group (n = output.size()).
  virtual RequestPtr reduce_scatter(GroupKind group, std::span<const float> input,
                                    std::span<float> output, ReduceOp op) = 0;
  /// All-to-all with variable counts (MPI_Alltoallv; the token dispatch and combine of a
  /// mixture-of-experts layer, Megatron-Core's all_to_all with input/output splits). `input` is
  /// the concatenation, in member order, of send_counts[j] floats for member j; `output` receives,
  /// in member order, recv_counts[j] floats from member j (its own piece included: the piece for
  /// itself is copied). send_counts and recv_counts have one entry per member, >= 0, summing to
  /// input.size() / output.size(); recv_counts[j] must equal member j's send_counts[position of
  /// this rank] (the caller exchanges the counts first, e.g. an all_gather of tokens per expert).
  /// Errors: InvalidArgument for counts of the wrong length, negative counts, or sums that differ
  /// from the buffer lengths; a mismatch with the peers' counts is undefined (MPI truncation
  /// error, or a hang on NCCL).
  virtual RequestPtr all_to_all_v(GroupKind group, std::span<const float> input,
                                  std::span<const int64_t> send_counts, std::span<float> output,
                                  std::span<const int64_t> recv_counts) = 0;
  /// Ring exchange over the members of `group` (the Program's ring_exchange: ring attention's
  /// K/V and dK/dV pass under context parallelism): sends `send` to the next member in group
  /// order, cyclically, and receives the previous member's into `recv`. Every member passes the
  /// same length; `send` and `recv` must not overlap. A group of one copies send into recv.
  virtual RequestPtr ring_exchange(GroupKind group, std::span<const float> send,
                                   std::span<float> recv) = 0;
  /// Point-to-point to/from a global rank; the tag is the Program's (>= 0).
  virtual RequestPtr send(int64_t peer, int64_t tag, std::span<const float> data) = 0;
  virtual RequestPtr recv(int64_t peer, int64_t tag, std::span<float> data) = 0;
};

/// The displacements of an all_to_all_v buffer: displacement[j] = sum of counts[0..j). Every
/// backend checks its counts here (one rule): InvalidArgument "<who>: all_to_all_v on group
/// <group>: <name> ..." when counts has not `members` entries, a count is negative, or the counts
/// do not sum to `buffer_size` (naming the sum and the buffer length).
std::vector<int64_t> all_to_all_displacements(const char* who, GroupKind group, size_t members,
                                              const char* name, std::span<const int64_t> counts,
                                              size_t buffer_size);

}  // namespace traintwin::exec
