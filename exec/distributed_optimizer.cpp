// The optimizer side of a rank's shard; see distributed_optimizer.hpp.
#include "exec/distributed_optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.hpp"

namespace traintwin::exec {

ShardOptimizer::ShardOptimizer(ModelShard& shard, Backend& backend, const RankCoord& coord,
                               int64_t dp, bool distributed, const TrainingHyperparameters& hyper)
    : shard_(shard), backend_(backend), coord_(coord), dp_(std::max<int64_t>(dp, 1)),
      distributed_(distributed), hyper_(hyper) {
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
  double sum_sq = 0;
  for (const auto& c : shard_.chunks()) {
    for (const auto& t : c.tensors) {
      if (t.shared_embedding) continue;
      const int64_t tp_rank = t.expert ? shard_.expert_coord().etp : coord_.tp;
      if (!t.tensor_parallel && tp_rank != 0) continue;
      if (over_world && !distributed_ && member(t) != 0) continue;
      const auto [lo, hi] = owned(t, member(t));
      sum_sq += backend_.sum_of_squares(
          CFSpan(c.grads.data() + t.offset + lo, static_cast<size_t>(hi - lo)));
    }
  }
  return sum_sq;
}

ShardOptimizer::Step ShardOptimizer::step(double global_sum_of_squares, int64_t iteration) {
  Step r;
  r.grad_norm = std::sqrt(global_sum_of_squares);
  if (!std::isfinite(r.grad_norm)) {
    throw Error("iteration " + std::to_string(iteration) + ": the gradient norm is " +
                std::to_string(r.grad_norm) + "; the step was not applied");
  }
  const double coef =
      hyper_.clip_grad > 0 ? cpu::clip_coefficient(r.grad_norm, hyper_.clip_grad) : 1.0;
  r.learning_rate = learning_rate(hyper_.lr, iteration);
  for (auto& c : shard_.chunks()) {
    if (coef < 1.0) backend_.scale_in_place(FSpan(c.grads), coef);
    for (const auto& t : c.tensors) {
      const auto [lo, hi] = owned(t, member(t));  // the distributed optimizer's piece
      if (hi == lo) continue;
      auto slice = [&t, lo = lo, hi = hi](std::vector<float>& b) {
        return FSpan(b.data() + t.offset + lo, static_cast<size_t>(hi - lo));
      };
      cpu::AdamWParams hp = hyper_.adam;
      if (!t.weight_decay) hp.weight_decay = 0;
      backend_.adamw_step(slice(c.params), slice(c.grads), slice(c.exp_avg), slice(c.exp_avg_sq),
                          hp, r.learning_rate, iteration);
    }
  }
  return r;
}

}  // namespace traintwin::exec
