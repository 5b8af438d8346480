// RankLowering: CPU offload as host ops on the offload stream (OpKind::kHost, Stream::kOffload):
// the activation offload around each offloaded layer's forward and backward
// (training.cpu_offloading) and the offloaded share of the optimizer step
// (training.optimizer_cpu_offload); see core/rank_lowering.hpp. The engines time the host ops
// from the topology's gpu.host_link (sim/timed_program.hpp host_op_s).
#include <cmath>
#include <cstdint>

#include "core/memory.hpp"
#include "core/rank_lowering.hpp"

namespace traintwin::lowering {

uint32_t RankLowering::host_op(HostOp h, int64_t bytes, const char* what) {
  close_compute();
  const uint32_t id = new_op(OpKind::kHost, Stream::kOffload, what);
  out_.ops[id].host = h;
  out_.ops[id].bytes = bytes;
  out_.ops[id].role = role_;
  add_dep(id, last_compute_);
  auto& last = last_on_stream_[static_cast<size_t>(Stream::kOffload)];
  add_dep(id, last);
  last = id;
  return id;
}

void RankLowering::offload_before_forward(int64_t layer) {
  const int64_t earlier = layer - offload_window();
  if (earlier >= 0 && offloads_layer(earlier)) wait(offload_d2h_[static_cast<size_t>(earlier)]);
}

void RankLowering::offload_after_forward(int64_t layer) {
  if (!offloads_layer(layer)) return;
  if (offload_d2h_.empty()) {
    offload_d2h_.assign(static_cast<size_t>(sc_.training.cpu_offloading_num_layers), kNoOp);
    offload_h2d_.assign(offload_d2h_.size(), kNoOp);
  }
  const Role before = role_;
  role(Role::kActivationOffload);
  const auto bytes =
      static_cast<int64_t>(std::llround(offloaded_layer_activation_bytes(sc_, layer)));
  offload_d2h_[static_cast<size_t>(layer)] =
      host_op(HostOp::kCopyD2H, bytes, "offload activations");
  role(before);
}

void RankLowering::reload_before_backward(int64_t layer) {
  if (offloads_layer(layer)) wait(offload_h2d_[static_cast<size_t>(layer)]);
}

void RankLowering::reload_after_backward(int64_t layer) {
  const int64_t earlier = layer - offload_window();
  if (earlier < 0 || !offloads_layer(earlier)) return;
  const Role before = role_;
  role(Role::kActivationOffload);
  const auto bytes =
      static_cast<int64_t>(std::llround(offloaded_layer_activation_bytes(sc_, earlier)));
  const uint32_t id = host_op(HostOp::kCopyH2D, bytes, "reload activations");
  out_.ops[id].layer = static_cast<int32_t>(earlier);
  offload_h2d_[static_cast<size_t>(earlier)] = id;
  role(before);
}

int64_t RankLowering::offload_optimizer(int64_t local) {
  if (!sc_.training.optimizer_cpu_offload) return local;
  const auto n = static_cast<int64_t>(
      std::llround(sc_.training.optimizer_offload_fraction * static_cast<double>(local)));
  if (n == 0) return local;
  const Role before = role_;
  role(Role::kOffloadedOptimizer);
  // fp32 gradients to the pinned host copy the CPU optimizer steps from (4 bytes each whatever
  // the gradient dtype: the copy is fp32); fp32 parameter, gradient and moments read, parameter
  // and moments written by torch.optim.AdamW (28 bytes); the updated parameters back in the
  // parameter dtype (copy_ casts on the host before the transfer).
  host_op(HostOp::kCopyD2H, 4 * n, "offload optimizer grads");
  host_op(HostOp::kCpuAdamW, 28 * n, "cpu optimizer step");
  optimizer_h2d_ = host_op(HostOp::kCopyH2D, n * d_.dsize, "reload optimizer params");
  role(before);
  return local - n;
}

}  // namespace traintwin::lowering
