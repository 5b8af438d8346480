#include "exec/cuda/nccl_communicator.hpp"

#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "exec/cuda/cuda_check.hpp"
#include "exec/mpi_groups.hpp"

namespace traintwin::exec::cuda {
namespace nccl_checks {

void check_pieces(const char* op, GroupKind group, size_t members, const char* whole_name,
                  size_t whole, const char* piece_name, size_t piece) {
  if (whole != members * piece) {
    throw InvalidArgument(std::string("NCCL communicator: ") + op + " on group " +
                          to_string(group) + ": " + whole_name + " has " + std::to_string(whole) +
                          " elements, expected group size " + std::to_string(members) + " x " +
                          piece_name + " " + std::to_string(piece) + " = " +
                          std::to_string(members * piece));
  }
}

void check_peer(const char* op, int64_t rank, int64_t world_size, int64_t peer, int64_t tag) {
  if (peer < 0 || peer >= world_size) {
    throw InvalidArgument(std::string("NCCL communicator: ") + op + ": peer rank " +
                          std::to_string(peer) + " is outside the world [0, " +
                          std::to_string(world_size) + ")");
  }
  if (peer == rank) {
    throw InvalidArgument(std::string("NCCL communicator: ") + op + ": peer rank " +
                          std::to_string(peer) +
                          " is this rank; transfers to self are not supported (NCCL pairs them "
                          "only inside one group call)");
  }
  if (tag < 0) {
    throw InvalidArgument(std::string("NCCL communicator: ") + op + " with rank " +
                          std::to_string(peer) + ": tag " + std::to_string(tag) +
                          " is negative (the Program's tags are >= 0)");
  }
}

void check_not_null(const char* op, GroupKind group, const void* ptr, size_t count) {
  if (ptr == nullptr && count > 0) {
    throw InvalidArgument(std::string("NCCL communicator: ") + op + " on group " +
                          to_string(group) + ": null buffer of " + std::to_string(count) +
                          " elements");
  }
}

std::string error_text(const std::string& what, ncclResult_t code, const std::string& last_error) {
  std::string s = "NCCL communicator: " + what + " failed: " + ncclGetErrorString(code);
  if (!last_error.empty()) s += " (" + last_error + ")";
  return s;
}

}  // namespace nccl_checks

namespace {

/// Throws CommError for code != ncclSuccess, with ncclGetLastError(comm)'s text.
void check_nccl(ncclResult_t code, const std::string& what, ncclComm_t comm) {
  if (code == ncclSuccess) return;
  const char* last = ncclGetLastError(comm);
  throw CommError(nccl_checks::error_text(what, code, last ? last : ""));
}

constexpr const char* kWho = "NCCL communicator";

void check_mpi(int code, const std::string& what) { exec::check_mpi(code, kWho, what); }

ncclRedOp_t to_nccl(ReduceOp op) { return op == ReduceOp::kMax ? ncclMax : ncclSum; }
const char* to_text(ReduceOp op) { return op == ReduceOp::kMax ? "max" : "sum"; }

/// Frees an MPI communicator unless it is MPI_COMM_NULL (errors dropped).
void free_comm(MPI_Comm& c) noexcept {
  if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
}

/// The bootstrap message of one group: the unique id, or ok = 0 when ncclGetUniqueId failed on
/// the first member (so that the others throw too instead of waiting in ncclCommInitRank).
struct Bootstrap {
  int32_t ok = 0;
  int32_t code = 0;
  ncclUniqueId id{};
};

/// ncclCommInitRank over the MPI communicator `group` (this rank at `position` of `size`).
ncclComm_t init_over_mpi(MPI_Comm group, int size, int position, const std::string& name) {
  Bootstrap b;
  if (position == 0) {
    const ncclResult_t code = ncclGetUniqueId(&b.id);
    b.ok = code == ncclSuccess ? 1 : 0;
    b.code = static_cast<int32_t>(code);
  }
  check_mpi(MPI_Bcast(&b, static_cast<int>(sizeof(b)), MPI_BYTE, 0, group),
            "MPI_Bcast of the NCCL unique id of group " + name);
  if (!b.ok) {
    check_nccl(static_cast<ncclResult_t>(b.code),
               "ncclGetUniqueId (on the first member) for group " + name, nullptr);
  }
  ncclComm_t comm = nullptr;
  check_nccl(ncclCommInitRank(&comm, size, b.id, position),
             "ncclCommInitRank(" + std::to_string(size) + " ranks, position " +
                 std::to_string(position) + ") for group " + name,
             nullptr);
  return comm;
}

/// An NCCL operation in flight: the event recorded after it on its stream. wait() makes the
/// compute stream (of the operation's start) wait for it; the host is not blocked.
class NcclRequest final : public Request {
 public:
  NcclRequest(cudaEvent_t done, cudaStream_t compute, int device, std::string what)
      : done_(done), compute_(compute), device_(device), what_(std::move(what)) {}
  ~NcclRequest() override {
    if (done_ == nullptr) return;
    // Waiting here (stream order only) keeps "destroying a Request waits for it"; no throw.
    if (cudaSetDevice(device_) == cudaSuccess) (void)cudaStreamWaitEvent(compute_, done_, 0);
    (void)cudaEventDestroy(done_);
    (void)cudaGetLastError();
  }

  void wait() override {
    if (done_ == nullptr) return;  // idempotent (also after a failure)
    cudaEvent_t done = std::exchange(done_, nullptr);
    cudaError_t status = cudaSetDevice(device_);
    if (status == cudaSuccess) status = cudaStreamWaitEvent(compute_, done, 0);
    (void)cudaEventDestroy(done);
    const std::string call = "cudaStreamWaitEvent(compute stream, end of " + what_ + ")";
    check_cuda(status, call.c_str(), __FILE__, __LINE__);
  }

 private:
  cudaEvent_t done_;
  cudaStream_t compute_;
  int device_;
  std::string what_;
};

/// A Request with nothing in flight (an empty p2p batch).
class CompletedRequest final : public Request {
 public:
  void wait() override {}
};

}  // namespace

NcclCommunicator::NcclCommunicator(const RankLayout& layout, MPI_Comm world, int device,
                                   cudaStream_t compute_stream)
    : layout_(layout), compute_stream_(compute_stream) {
  comms_.fill(nullptr);
  streams_.fill(nullptr);
  const auto [rank, size] =
      require_mpi_world(layout, world, kWho, "; MPI bootstraps NCCL");
  rank_ = rank;
  world_size_ = size;

  MPI_Comm world_dup = MPI_COMM_NULL;
  MPI_Comm node = MPI_COMM_NULL;
  std::array<MPI_Comm, kNumGroupKinds> mpi_groups{};
  mpi_groups.fill(MPI_COMM_NULL);
  try {
    check_mpi(MPI_Comm_dup(world, &world_dup), "MPI_Comm_dup(world)");
    check_mpi(MPI_Comm_set_errhandler(world_dup, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");

    // The device: given, or the node-local rank modulo the visible devices.
    int device_count = 0;
    TRAINTWIN_CUDA_CHECK(cudaGetDeviceCount(&device_count));
    if (device < 0) {
      check_mpi(MPI_Comm_split_type(world_dup, MPI_COMM_TYPE_SHARED, static_cast<int>(rank), MPI_INFO_NULL, &node),
                "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
      int local_rank = 0;
      check_mpi(MPI_Comm_rank(node, &local_rank), "MPI_Comm_rank(node)");
      device = device_count > 0 ? local_rank % device_count : 0;
    } else if (device >= device_count) {
      throw InvalidArgument("NCCL communicator: device " + std::to_string(device) +
                            " is outside [0, " + std::to_string(device_count) +
                            ") (the visible CUDA devices)");
    }
    device_ = device;
    TRAINTWIN_CUDA_CHECK(cudaSetDevice(device_));

    // One NCCL communicator per group kind, as MpiCommunicator splits its MPI communicators.
    for (size_t k = 0; k < kNumGroupKinds; ++k) {
      const auto kind = static_cast<GroupKind>(k);
      if (!unusable_group_reason(layout, kind).empty()) continue;  // on every rank alike
      member_count_[k] = layout.group(kind, rank_).size();
      mpi_groups[k] = split_group(world_dup, layout, kind, rank_, kWho);
      if (mpi_groups[k] == MPI_COMM_NULL) continue;
      comms_[k] = init_over_mpi(mpi_groups[k], static_cast<int>(member_count_[k]),
                                group_position(layout, kind, rank_), to_string(kind));
    }
    // The point-to-point communicator: the whole world again, rank = global rank.
    p2p_comm_ = init_over_mpi(world_dup, static_cast<int>(size), static_cast<int>(rank),
                              "world (point-to-point)");

    for (cudaStream_t& s : streams_) {
      TRAINTWIN_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    }
    TRAINTWIN_CUDA_CHECK(cudaEventCreateWithFlags(&compute_ready_, cudaEventDisableTiming));
  } catch (...) {
    for (MPI_Comm& c : mpi_groups) free_comm(c);
    free_comm(node);
    free_comm(world_dup);
    destroy();
    throw;
  }
  for (MPI_Comm& c : mpi_groups) free_comm(c);
  free_comm(node);
  free_comm(world_dup);
}

NcclCommunicator::~NcclCommunicator() { destroy(); }

void NcclCommunicator::destroy() noexcept {
  (void)cudaSetDevice(device_);
  for (ncclComm_t& c : comms_) {
    if (c != nullptr) (void)ncclCommDestroy(c);
    c = nullptr;
  }
  if (p2p_comm_ != nullptr) (void)ncclCommDestroy(p2p_comm_);
  p2p_comm_ = nullptr;
  for (cudaStream_t& s : streams_) {
    if (s != nullptr) {
      (void)cudaStreamSynchronize(s);
      (void)cudaStreamDestroy(s);
    }
    s = nullptr;
  }
  if (compute_ready_ != nullptr) (void)cudaEventDestroy(compute_ready_);
  compute_ready_ = nullptr;
  (void)cudaGetLastError();
}

ncclComm_t NcclCommunicator::comm(GroupKind group, const char* op) const {
  const ncclComm_t c = comms_[static_cast<size_t>(group)];
  if (c == nullptr) {
    const std::string reason = unusable_group_reason(layout_, group);
    if (!reason.empty()) {
      throw InvalidArgument(std::string("NCCL communicator: ") + op + " on group " +
                            to_string(group) + ": " + reason);
    }
    throw InvalidArgument(std::string("NCCL communicator: ") + op + " on group " +
                          to_string(group) + ": rank " + std::to_string(rank_) +
                          " is not a member of its " + to_string(group) + " group {" +
                          members_text(layout_.group(group, rank_)) +
                          "} (only the first and last pipeline stages hold the embedding)");
  }
  return c;
}

void NcclCommunicator::check_pointer(const char* op, GroupKind group, const void* ptr,
                                     size_t count) const {
  nccl_checks::check_not_null(op, group, ptr, count);
  if (count == 0) return;
  cudaPointerAttributes attr{};
  TRAINTWIN_CUDA_CHECK(cudaPointerGetAttributes(&attr, ptr));
  const std::string where =
      std::string("NCCL communicator: ") + op + " on group " + to_string(group) + ": buffer ";
  if (attr.type == cudaMemoryTypeUnregistered) {
    throw InvalidArgument(where +
                          "is host memory (not registered with CUDA); this backend takes "
                          "device pointers");
  }
  if (attr.type == cudaMemoryTypeDevice && attr.device != device_) {
    throw InvalidArgument(where + "lives on device " + std::to_string(attr.device) +
                          ", this rank's device is " + std::to_string(device_));
  }
}

void NcclCommunicator::order_after_compute(cudaStream_t stream) {
  TRAINTWIN_CUDA_CHECK(cudaSetDevice(device_));
  TRAINTWIN_CUDA_CHECK(cudaEventRecord(compute_ready_, compute_stream_));
  TRAINTWIN_CUDA_CHECK(cudaStreamWaitEvent(stream, compute_ready_, 0));
}

RequestPtr NcclCommunicator::finish(cudaStream_t stream, std::string what) {
  cudaEvent_t done = nullptr;
  TRAINTWIN_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  const cudaError_t status = cudaEventRecord(done, stream);
  if (status != cudaSuccess) {
    (void)cudaEventDestroy(done);
    TRAINTWIN_CUDA_CHECK(status);
  }
  return std::make_unique<NcclRequest>(done, compute_stream_, device_, std::move(what));
}

RequestPtr NcclCommunicator::all_reduce_impl(GroupKind group, void* data, size_t count,
                                             ncclDataType_t type, ReduceOp op,
                                             const char* type_name) {
  const std::string what = std::string("ncclAllReduce(") + to_text(op) + ", " + type_name + ", " +
                           std::to_string(count) + " elements) on group " + to_string(group);
  const ncclComm_t c = comm(group, "all_reduce");
  check_pointer("all_reduce", group, data, count);
  const cudaStream_t s = stream(group);
  order_after_compute(s);
  if (count > 0) check_nccl(ncclAllReduce(data, data, count, type, to_nccl(op), c, s), what, c);
  return finish(s, what);
}

RequestPtr NcclCommunicator::all_reduce(GroupKind group, std::span<float> data, ReduceOp op) {
  return all_reduce_impl(group, data.data(), data.size(), ncclFloat, op, "float");
}

RequestPtr NcclCommunicator::all_reduce(GroupKind group, std::span<double> data, ReduceOp op) {
  return all_reduce_impl(group, data.data(), data.size(), ncclDouble, op, "double");
}

RequestPtr NcclCommunicator::all_gather(GroupKind group, std::span<const float> input,
                                        std::span<float> output) {
  const std::string what = "ncclAllGather(" + std::to_string(input.size()) +
                           " floats per member) on group " + to_string(group);
  const ncclComm_t c = comm(group, "all_gather");
  nccl_checks::check_pieces("all_gather", group, members(group), "output", output.size(), "input",
                            input.size());
  check_pointer("all_gather", group, input.data(), input.size());
  check_pointer("all_gather", group, output.data(), output.size());
  const cudaStream_t s = stream(group);
  order_after_compute(s);
  if (!input.empty()) {
    check_nccl(ncclAllGather(input.data(), output.data(), input.size(), ncclFloat, c, s), what, c);
  }
  return finish(s, what);
}

RequestPtr NcclCommunicator::reduce_scatter(GroupKind group, std::span<const float> input,
                                            std::span<float> output, ReduceOp op) {
  const std::string what = std::string("ncclReduceScatter(") + to_text(op) + ", " +
                           std::to_string(output.size()) + " floats per member) on group " +
                           to_string(group);
  const ncclComm_t c = comm(group, "reduce_scatter");
  nccl_checks::check_pieces("reduce_scatter", group, members(group), "input", input.size(),
                            "output", output.size());
  check_pointer("reduce_scatter", group, input.data(), input.size());
  check_pointer("reduce_scatter", group, output.data(), output.size());
  const cudaStream_t s = stream(group);
  order_after_compute(s);
  if (!output.empty()) {
    check_nccl(
        ncclReduceScatter(input.data(), output.data(), output.size(), ncclFloat, to_nccl(op), c, s),
        what, c);
  }
  return finish(s, what);
}

RequestPtr NcclCommunicator::all_to_all_v(GroupKind group, std::span<const float> input,
                                          std::span<const int64_t> send_counts,
                                          std::span<float> output,
                                          std::span<const int64_t> recv_counts) {
  const std::string what = "all_to_all_v(ncclSend/ncclRecv, " + std::to_string(input.size()) +
                           " floats out, " + std::to_string(output.size()) + " in) on group " +
                           to_string(group);
  const ncclComm_t c = comm(group, "all_to_all_v");
  const size_t n = members(group);
  const std::vector<int64_t> sdispl =
      all_to_all_displacements(kWho, group, n, "send_counts", send_counts, input.size());
  const std::vector<int64_t> rdispl =
      all_to_all_displacements(kWho, group, n, "recv_counts", recv_counts, output.size());
  check_pointer("all_to_all_v", group, input.data(), input.size());
  check_pointer("all_to_all_v", group, output.data(), output.size());
  const cudaStream_t s = stream(group);
  order_after_compute(s);
  check_nccl(ncclGroupStart(), "ncclGroupStart for " + what, c);
  ncclResult_t first_error = ncclSuccess;
  for (size_t j = 0; j < n; ++j) {
    const int peer = static_cast<int>(j);  // the position in the group is the rank in c
    if (send_counts[j] > 0) {
      const ncclResult_t code =
          ncclSend(input.data() + sdispl[j], static_cast<size_t>(send_counts[j]), ncclFloat,
                   peer, c, s);
      if (code != ncclSuccess && first_error == ncclSuccess) first_error = code;
    }
    if (recv_counts[j] > 0) {
      const ncclResult_t code =
          ncclRecv(output.data() + rdispl[j], static_cast<size_t>(recv_counts[j]), ncclFloat,
                   peer, c, s);
      if (code != ncclSuccess && first_error == ncclSuccess) first_error = code;
    }
  }
  // ncclGroupEnd always, so that a failed call does not leave the group open.
  const ncclResult_t end = ncclGroupEnd();
  check_nccl(first_error, what, c);
  check_nccl(end, "ncclGroupEnd for " + what, c);
  return finish(s, what);
}

RequestPtr NcclCommunicator::ring_exchange(GroupKind group, std::span<const float> send,
                                          std::span<float> recv) {
  const std::string what = "ring exchange (ncclSend/ncclRecv of " + std::to_string(send.size()) +
                           " floats) on group " + to_string(group);
  const ncclComm_t c = comm(group, "ring_exchange");
  if (send.size() != recv.size()) {
    throw InvalidArgument("NCCL communicator: ring_exchange on group " +
                          std::string(to_string(group)) + ": send has " +
                          std::to_string(send.size()) + " elements, recv " +
                          std::to_string(recv.size()));
  }
  check_pointer("ring_exchange", group, send.data(), send.size());
  check_pointer("ring_exchange", group, recv.data(), recv.size());
  int me = 0;
  check_nccl(ncclCommUserRank(c, &me), "ncclCommUserRank for " + what, c);
  const int n = static_cast<int>(members(group));
  const cudaStream_t s = stream(group);
  order_after_compute(s);
  if (!send.empty()) {
    check_nccl(ncclGroupStart(), "ncclGroupStart for " + what, c);
    const ncclResult_t sent = ncclSend(send.data(), send.size(), ncclFloat, (me + 1) % n, c, s);
    const ncclResult_t received = ncclRecv(recv.data(), recv.size(), ncclFloat, (me + n - 1) % n, c, s);
    const ncclResult_t end = ncclGroupEnd();
    check_nccl(sent != ncclSuccess ? sent : received, what, c);
    check_nccl(end, "ncclGroupEnd for " + what, c);
  }
  return finish(s, what);
}

RequestPtr NcclCommunicator::send(int64_t peer, int64_t tag, std::span<const float> data) {
  const P2pTransfer t = P2pTransfer::send(peer, tag, data);
  return send_recv_batch(std::span<const P2pTransfer>(&t, 1));
}

RequestPtr NcclCommunicator::recv(int64_t peer, int64_t tag, std::span<float> data) {
  const P2pTransfer t = P2pTransfer::recv(peer, tag, data);
  return send_recv_batch(std::span<const P2pTransfer>(&t, 1));
}

RequestPtr NcclCommunicator::send_recv_batch(std::span<const P2pTransfer> transfers) {
  if (transfers.empty()) return std::make_unique<CompletedRequest>();
  std::string what =
      transfers.size() == 1 ? "" : "batch of " + std::to_string(transfers.size()) + " transfers: ";
  for (size_t i = 0; i < transfers.size(); ++i) {
    const P2pTransfer& t = transfers[i];
    const char* op = t.is_send ? "send" : "recv";
    nccl_checks::check_peer(op, rank_, world_size_, t.peer, t.tag);
    check_pointer(
        op, GroupKind::kPp,
        t.is_send ? static_cast<const void*>(t.send_data) : static_cast<const void*>(t.recv_data),
        t.count);
    what += std::string(i ? ", " : "") + (t.is_send ? "ncclSend(" : "ncclRecv(") +
            std::to_string(t.count) + (t.is_send ? " floats to rank " : " floats from rank ") +
            std::to_string(t.peer) + ", tag " + std::to_string(t.tag) + ")";
  }
  what += " on the point-to-point world communicator";
  const cudaStream_t s = stream(GroupKind::kPp);
  order_after_compute(s);
  check_nccl(ncclGroupStart(), "ncclGroupStart for " + what, p2p_comm_);
  ncclResult_t first_error = ncclSuccess;
  for (const P2pTransfer& t : transfers) {
    if (t.count == 0) continue;
    const ncclResult_t code =
        t.is_send
            ? ncclSend(t.send_data, t.count, ncclFloat, static_cast<int>(t.peer), p2p_comm_, s)
            : ncclRecv(t.recv_data, t.count, ncclFloat, static_cast<int>(t.peer), p2p_comm_, s);
    if (code != ncclSuccess && first_error == ncclSuccess) first_error = code;
  }
  // ncclGroupEnd always, so that a failed call does not leave the group open.
  const ncclResult_t end = ncclGroupEnd();
  check_nccl(first_error, what, p2p_comm_);
  check_nccl(end, "ncclGroupEnd for " + what, p2p_comm_);
  return finish(s, what);
}

void NcclCommunicator::synchronize() {
  TRAINTWIN_CUDA_CHECK(cudaSetDevice(device_));
  for (cudaStream_t s : streams_) TRAINTWIN_CUDA_CHECK(cudaStreamSynchronize(s));
  for (size_t k = 0; k <= kNumGroupKinds; ++k) {
    const ncclComm_t c = k < kNumGroupKinds ? comms_[k] : p2p_comm_;
    if (c == nullptr) continue;
    ncclResult_t async = ncclSuccess;
    const std::string name = k < kNumGroupKinds
                                 ? std::string("group ") + to_string(static_cast<GroupKind>(k))
                                 : std::string("the point-to-point world communicator");
    check_nccl(ncclCommGetAsyncError(c, &async), "ncclCommGetAsyncError on " + name, c);
    check_nccl(async, "an operation on " + name + " (asynchronous error)", c);
  }
}

}  // namespace traintwin::exec::cuda
