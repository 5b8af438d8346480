#include "exec/local_communicator.hpp"

#include <algorithm>
#include <string>

#include "core/error.hpp"

namespace traintwin::exec {
namespace {

std::string layout_text(const RankLayout& l) {
  return "tp=" + std::to_string(l.size(GroupKind::kTp)) +
         ", cp=" + std::to_string(l.size(GroupKind::kCp)) +
         ", dp=" + std::to_string(l.size(GroupKind::kDp)) +
         ", pp=" + std::to_string(l.size(GroupKind::kPp));
}

[[noreturn]] void no_peer(const char* op, int64_t peer, int64_t tag) {
  throw InvalidArgument(std::string("local communicator: ") + op + " to/from rank " +
                        std::to_string(peer) + " (tag " + std::to_string(tag) +
                        "): a world of one rank has no peer");
}

}  // namespace

LocalCommunicator::LocalCommunicator(const RankLayout& layout, Backend* backend)
    : layout_(layout), backend_(backend) {
  if (layout.world_size() != 1) {
    throw InvalidArgument("local communicator: the layout's world size is " +
                          std::to_string(layout.world_size()) + " (" + layout_text(layout) +
                          "), the local communicator has world size 1 (use MpiCommunicator)");
  }
}

RequestPtr LocalCommunicator::all_reduce(GroupKind, std::span<float>, ReduceOp) {
  return std::make_unique<CompletedRequest>();
}

RequestPtr LocalCommunicator::all_reduce(GroupKind, std::span<double>, ReduceOp) {
  return std::make_unique<CompletedRequest>();
}

RequestPtr LocalCommunicator::all_gather(GroupKind group, std::span<const float> input,
                                         std::span<float> output) {
  if (output.size() != input.size()) {
    throw InvalidArgument(
        std::string("local communicator: all_gather on group ") + to_string(group) +
        ": output has " + std::to_string(output.size()) +
        " elements, expected group size 1 x input = " + std::to_string(input.size()));
  }
  // Same length: the spans are either the same buffer (nothing to do) or, by the buffer
  // contract of the interface, disjoint.
  if (output.data() != input.data()) copy(input, output);
  return std::make_unique<CompletedRequest>();
}

RequestPtr LocalCommunicator::ring_exchange(GroupKind group, std::span<const float> send,
                                            std::span<float> recv) {
  if (send.size() != recv.size()) {
    throw InvalidArgument(std::string("local communicator: ring_exchange on group ") +
                          to_string(group) + ": send has " + std::to_string(send.size()) +
                          " elements, recv " + std::to_string(recv.size()));
  }
  copy(send, recv);
  return std::make_unique<CompletedRequest>();
}

RequestPtr LocalCommunicator::reduce_scatter(GroupKind group, std::span<const float> input,
                                             std::span<float> output, ReduceOp) {
  if (input.size() != output.size()) {
    throw InvalidArgument(
        std::string("local communicator: reduce_scatter on group ") + to_string(group) +
        ": input has " + std::to_string(input.size()) +
        " elements, expected group size 1 x output = " + std::to_string(output.size()));
  }
  if (output.data() != input.data()) copy(input, output);
  return std::make_unique<CompletedRequest>();
}

RequestPtr LocalCommunicator::all_to_all_v(GroupKind group, std::span<const float> input,
                                           std::span<const int64_t> send_counts,
                                           std::span<float> output,
                                           std::span<const int64_t> recv_counts) {
  all_to_all_displacements("local communicator", group, 1, "send_counts", send_counts,
                           input.size());
  all_to_all_displacements("local communicator", group, 1, "recv_counts", recv_counts,
                           output.size());
  if (output.size() != input.size()) {
    throw InvalidArgument(std::string("local communicator: all_to_all_v on group ") +
                          to_string(group) + ": sends " + std::to_string(input.size()) +
                          " elements to itself but receives " + std::to_string(output.size()));
  }
  if (output.data() != input.data()) copy(input, output);
  return std::make_unique<CompletedRequest>();
}

void LocalCommunicator::copy(std::span<const float> from, std::span<float> to) {
  if (from.empty()) return;
  if (backend_ != nullptr) {
    backend_->copy(to, from);
  } else {
    std::copy(from.begin(), from.end(), to.begin());
  }
}

RequestPtr LocalCommunicator::send(int64_t peer, int64_t tag, std::span<const float>) {
  no_peer("send", peer, tag);
}

RequestPtr LocalCommunicator::recv(int64_t peer, int64_t tag, std::span<float>) {
  no_peer("recv", peer, tag);
}

}  // namespace traintwin::exec
