// NCCL backend of the Communicator (the GPU executor's): one NCCL communicator per GroupKind of
// the RankLayout, bootstrapped over MPI, each with its own CUDA stream, so that communication
// runs beside the compute stream and is ordered against it by CUDA events only.
// Plain C++ (compiled by the host compiler): includes <nccl.h>, <mpi.h>, <cuda_runtime_api.h>.
//
// Differences from the host backends (LocalCommunicator, MpiCommunicator):
//  - Buffers are DEVICE pointers (cudaMalloc'd on this rank's device, or managed/registered
//    memory): every std::span argument names device memory; a plain host pointer is refused.
//  - "Completed" is stream-ordered: an operation starts on its group's stream after the work
//    already enqueued on the compute stream, and Request::wait() makes the compute stream wait
//    for the operation (cudaStreamWaitEvent) without blocking the host. Work enqueued on the
//    compute stream after wait() sees the result; host code must call synchronize() (or
//    synchronize the compute stream) before reading a buffer through the host.
//  - Point-to-point transfers: NCCL has no tags; a send and a recv between the same two ranks
//    match in the order they are issued, so both ranks must issue their transfers to each other
//    in the same order (the Program does). Tags are still checked (>= 0) and named in errors.
//    Transfers to self are refused (InvalidArgument): NCCL pairs a self-transfer only inside one
//    group call, and the Program never sends to its own rank. The send and the recv of one
//    transfer must have the same length: NCCL does not check it (a mismatch hangs or corrupts).
//  - send() and recv() are each one NCCL group on the PP stream, so they run one after another:
//    two ranks that each send to the other before receiving wait for each other forever. Issue
//    the send/recv ops of one Program p2p batch together with send_recv_batch() (one
//    ncclGroupStart/End, as Megatron's batch_isend_irecv), or order single calls so that they
//    pair up (while one side sends, the other receives).
#pragma once

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/rank_layout.hpp"
#include "exec/communicator.hpp"
#include "exec/mpi_groups.hpp"

namespace traintwin::exec::cuda {

/// One transfer of a p2p batch (NcclCommunicator::send_recv_batch): a send of `count` floats from
/// `send_data` or a recv into `recv_data`, to/from global rank `peer`, with the Program's `tag`.
/// Built with P2pTransfer::send / P2pTransfer::recv.
struct P2pTransfer {
  bool is_send = true;
  int64_t peer = 0;
  int64_t tag = 0;
  const float* send_data = nullptr;  ///< device pointer (sends)
  float* recv_data = nullptr;        ///< device pointer (recvs)
  size_t count = 0;                  ///< floats

  static P2pTransfer send(int64_t peer, int64_t tag, std::span<const float> data) {
    return {true, peer, tag, data.data(), nullptr, data.size()};
  }
  static P2pTransfer recv(int64_t peer, int64_t tag, std::span<float> data) {
    return {false, peer, tag, nullptr, data.data(), data.size()};
  }
};

/// The communicator of one MPI process driving one CUDA device.
///
/// Construction is collective over `world` (every process constructs it with the same layout,
/// in the same order as its other collective calls on `world`). It selects `device` (default -1:
/// the node-local rank, from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), modulo the number of
/// visible devices), splits a duplicate of `world` once per GroupKind as MpiCommunicator does
/// (color = layout.group_index, key = position in layout.group), and per group has the first
/// member call ncclGetUniqueId, MPI_Bcast the id over the group's sub-communicator and every
/// member call ncclCommInitRank with its position in the group; the MPI sub-communicators are
/// freed after. A ninth NCCL communicator over the whole world (rank = global rank) carries the
/// point-to-point transfers, on the PP group's stream, so that they never interleave with the
/// world collectives. A rank outside its embedding group (a middle pipeline stage) has no
/// kEmbedding communicator. Each group kind gets its own non-blocking CUDA stream
/// (cudaStreamNonBlocking) on the device.
///
/// Operations of zero elements issue no NCCL call (all members of a collective, and both ends of
/// a transfer, have the same length, so they all skip it) but still return an ordered Request.
/// Request::wait() throws CudaError when cudaStreamWaitEvent fails; NCCL's asynchronous errors
/// (a peer failing, a network error) surface in synchronize(). Requests must not outlive the
/// communicator's device context (they hold a CUDA event and the compute stream, not the comms).
///
/// Every operation: checks its arguments (InvalidArgument, before any CUDA or NCCL call), records
/// an event on the compute stream and makes the group's stream wait for it, issues the NCCL call
/// on the group's stream (one ncclGroupStart/End around a send or recv), records a completion
/// event there, and returns a Request whose wait() makes the compute stream current at the start
/// of the operation wait for that event. The compute stream is the one given to the constructor
/// or set_compute_stream() (default 0, the legacy default stream of the device).
///
/// The calling thread must be the one that constructed the communicator (MPI_THREAD_FUNNELED);
/// the device is made current (cudaSetDevice) at construction and by each operation.
///
/// Errors: InvalidArgument as MpiCommunicator (a layout whose world size differs from `world`'s,
/// a group this rank is not in, buffer lengths that do not match the group size, a peer outside
/// [0, world size), a negative tag) plus a transfer to this rank itself, a null buffer of nonzero
/// length, a host (unregistered) pointer or device memory of another device, and `device`
/// outside [0, device count). CommError for an NCCL failure (the message has the operation, the
/// group, ncclGetErrorString and ncclGetLastError's text) or an MPI failure during the bootstrap
/// (also when MPI is not initialized); CudaError for a failing CUDA runtime call (no device,
/// stream or event creation).
class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const RankLayout& layout, MPI_Comm world = MPI_COMM_WORLD, int device = -1,
                   cudaStream_t compute_stream = nullptr);
  /// ncclCommDestroy for each communicator (waiting for its operations in flight), then destroys
  /// the streams. Never throws (errors are dropped).
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int64_t rank() const override { return rank_; }
  int64_t world_size() const override { return world_size_; }
  const RankLayout& layout() const override { return layout_; }

  /// ncclAllReduce in place (ncclFloat / ncclDouble; ncclSum / ncclMax) on the group's stream.
  RequestPtr all_reduce(GroupKind group, std::span<float> data, ReduceOp op) override;
  RequestPtr all_reduce(GroupKind group, std::span<double> data, ReduceOp op) override;
  /// ncclAllGather: output = group size x input, in layout.group order.
  RequestPtr all_gather(GroupKind group, std::span<const float> input,
                        std::span<float> output) override;
  /// ncclReduceScatter: input = group size x output.
  RequestPtr reduce_scatter(GroupKind group, std::span<const float> input, std::span<float> output,
                            ReduceOp op) override;
  /// All-to-all with variable counts as NCCL runs it (nccl-tests alltoall, Megatron's
  /// all_to_all): one ncclSend and one ncclRecv per member of the group, its own piece included,
  /// in ONE ncclGroupStart/End on the group's communicator and stream (zero counts skipped).
  RequestPtr all_to_all_v(GroupKind group, std::span<const float> input,
                          std::span<const int64_t> send_counts, std::span<float> output,
                          std::span<const int64_t> recv_counts) override;
  /// ncclSend / ncclRecv on the PP stream, each in its own ncclGroupStart/End.
  /// ncclSend to the next member and ncclRecv from the previous one (group order) on the
  /// group's communicator, in one ncclGroupStart/End, on the group's stream.
  RequestPtr ring_exchange(GroupKind group, std::span<const float> send,
                           std::span<float> recv) override;
  RequestPtr send(int64_t peer, int64_t tag, std::span<const float> data) override;
  RequestPtr recv(int64_t peer, int64_t tag, std::span<float> data) override;

  /// The send/recv ops of one Program p2p batch (core/program.hpp: they progress together) in ONE
  /// ncclGroupStart/End on the PP stream, in the order given; one Request for all of them. The
  /// peers' batches must list their transfers with this rank in the same order. Every transfer
  /// is checked before any is issued (InvalidArgument as send/recv). An empty batch returns a
  /// completed Request.
  RequestPtr send_recv_batch(std::span<const P2pTransfer> transfers);

  /// The compute stream that later operations order against (see the class comment); it must
  /// belong to this communicator's device. Requests already returned keep their stream.
  void set_compute_stream(cudaStream_t stream) { compute_stream_ = stream; }
  cudaStream_t compute_stream() const { return compute_stream_; }
  /// The communication stream of `group` (kPp: also the point-to-point transfers).
  cudaStream_t stream(GroupKind group) const { return streams_[static_cast<size_t>(group)]; }
  /// The CUDA device of this rank.
  int device() const { return device_; }

  /// Blocks the host until every operation issued so far has completed (cudaStreamSynchronize on
  /// each communication stream), then checks each NCCL communicator's asynchronous error.
  /// Throws CudaError / CommError.
  void synchronize();

 private:
  /// The NCCL communicator of `group`; InvalidArgument when this rank is not in it.
  ncclComm_t comm(GroupKind group, const char* op) const;
  size_t members(GroupKind group) const { return member_count_[static_cast<size_t>(group)]; }
  void check_peer(const char* op, int64_t peer, int64_t tag) const;
  void check_pointer(const char* op, GroupKind group, const void* ptr, size_t count) const;
  /// Records an event on the compute stream and makes `stream` wait for it.
  void order_after_compute(cudaStream_t stream);
  /// Records the completion event on `stream` and wraps it in a Request.
  RequestPtr finish(cudaStream_t stream, std::string what);
  RequestPtr all_reduce_impl(GroupKind group, void* data, size_t count, ncclDataType_t type,
                             ReduceOp op, const char* type_name);
  void destroy() noexcept;

  RankLayout layout_;
  int64_t rank_ = 0;
  int64_t world_size_ = 0;
  int device_ = 0;
  cudaStream_t compute_stream_ = nullptr;
  std::array<ncclComm_t, kNumGroupKinds> comms_{};
  std::array<size_t, kNumGroupKinds> member_count_{};
  ncclComm_t p2p_comm_ = nullptr;
  std::array<cudaStream_t, kNumGroupKinds> streams_{};
  cudaEvent_t compute_ready_ = nullptr;  // reused: recorded on the compute stream per operation
};

// --- host-side checks and error texts (used by NcclCommunicator; no CUDA or NCCL call) --------

namespace nccl_checks {

/// InvalidArgument unless whole = members x piece: all_gather (whole "output", piece "input")
/// and reduce_scatter (whole "input", piece "output"), e.g. "NCCL communicator: all_gather on
/// group tp: output has 5 elements, expected group size 2 x input 3 = 6".
void check_pieces(const char* op, GroupKind group, size_t members, const char* whole_name,
                  size_t whole, const char* piece_name, size_t piece);

/// InvalidArgument for a peer outside [0, world_size), a peer equal to `rank` (self-transfer) or
/// a negative tag.
void check_peer(const char* op, int64_t rank, int64_t world_size, int64_t peer, int64_t tag);

/// InvalidArgument for a null pointer with count > 0.
void check_not_null(const char* op, GroupKind group, const void* ptr, size_t count);

/// "NCCL communicator: <what> failed: <ncclGetErrorString(code)>" plus
/// " (<last_error>)" when last_error is non-empty.
std::string error_text(const std::string& what, ncclResult_t code, const std::string& last_error);

}  // namespace nccl_checks

}  // namespace traintwin::exec::cuda
