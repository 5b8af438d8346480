// The optimizer side of a rank's shard; see distributed_optimizer.hpp.
#include "exec/distributed_optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace traintwin::exec {

ShardOptimizer::ShardOptimizer(ModelShard& shard, Backend& backend, const RankCoord& coord,
                               int64_t dp, bool distributed, const TrainingHyperparameters& hyper,
                               int64_t replica)
    : shard_(shard), backend_(backend), coord_(coord), dp_(std::max<int64_t>(dp, 1)),
      distributed_(distributed), replica_(replica), hyper_(hyper) {
  if (shard.scenario().model.is_moe()) {
    edp_ = std::max<int64_t>(shard.scenario().parallel.expert_data_parallel_size(), 1);
    edp_rank_ = shard.expert_coord().edp;
  }
}

std::pair<int64_t, int64_t> ShardOptimizer::owned(const ShardTensor& t, int64_t d) const {
  if (!distributed_) return {0, t.numel};
  const int64_t lo = std::min(t.numel, d * piece(t));
  return {lo, std::min(t.numel, lo + piece(t))};
}

double ShardOptimizer::local_sum_of_squares(bool over_world) {
  std::vector<CFSpan> pieces;
  for (const auto& c : shard_.chunks()) {
    if (c.mirror_copy) continue;  // DualPipe: each stage once, on the rank whose chunk 0 it is
    for (const auto& t : c.tensors) {
      if (t.shared_embedding) continue;
      const int64_t tp_rank = t.expert ? shard_.expert_coord().etp : coord_.tp;
      if (!t.tensor_parallel && tp_rank != 0) continue;
      if (over_world && !distributed_ && member(t) != 0) continue;
      if (distributed_ && !t.expert && replica_ != 0) continue;  // HSDP: the same pieces as replica 0
      const auto [lo, hi] = owned(t, member(t));
      pieces.emplace_back(c.grads.data() + t.offset + lo, static_cast<size_t>(hi - lo));
    }
  }
  return backend_.total_sum_of_squares(pieces);
}

double ShardOptimizer::checked_norm(double global_sum_of_squares, int64_t iteration) {
  const double norm = std::sqrt(global_sum_of_squares);
  if (!std::isfinite(norm)) {
    throw Error("iteration " + std::to_string(iteration) + ": the gradient norm is " +
                std::to_string(norm) + "; the step was not applied");
  }
  return norm;
}

template <typename F>
void ShardOptimizer::for_each_owned(F&& f) {
  for (auto& c : shard_.chunks()) {
    for (const auto& t : c.tensors) {
      const auto [lo, hi] = owned(t, member(t));  // the distributed optimizer's piece
      if (hi == lo) continue;
      auto slice = [&t, lo = lo, hi = hi](Tensor& b) {
        return FSpan(b.data() + t.offset + lo, static_cast<size_t>(hi - lo));
      };
      f(slice(c.params), slice(c.grads), slice(c.exp_avg), slice(c.exp_avg_sq), t);
    }
  }
}

void ShardOptimizer::zero_grad_buffer() {
  for (auto& c : shard_.chunks()) {
    const auto n = static_cast<int64_t>(c.grads.size());
    if (n > 0) backend_.fill_2d(FSpan(c.grads), n, n, 1, 0.0f);
  }
}

void ShardOptimizer::clip(double global_sum_of_squares, int64_t iteration) {
  const double norm = checked_norm(global_sum_of_squares, iteration);
  const double coef = hyper_.clip_grad > 0 ? cpu::clip_coefficient(norm, hyper_.clip_grad) : 1.0;
  for_each_owned([&](FSpan, FSpan grads, FSpan, FSpan, const ShardTensor&) {
    backend_.scale_in_place(grads, coef);
  });
}

ShardOptimizer::Step ShardOptimizer::step(double global_sum_of_squares, int64_t iteration) {
  Step r;
  r.grad_norm = checked_norm(global_sum_of_squares, iteration);
  r.learning_rate = learning_rate(hyper_.lr, iteration);
  for_each_owned([&](FSpan params, FSpan grads, FSpan exp_avg, FSpan exp_avg_sq,
                     const ShardTensor& t) {
    cpu::AdamWParams hp = hyper_.adam;
    if (!t.weight_decay) hp.weight_decay = 0;
    backend_.adamw_step(params, grads, exp_avg, exp_avg_sq, hp, r.learning_rate, iteration);
  });
  return r;
}

}  // namespace traintwin::exec
