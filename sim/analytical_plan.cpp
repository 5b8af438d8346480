// The analytical estimator's pipeline plan (sim/analytical_plan.hpp): schedules and p2p batches.
#include "sim/analytical_plan.hpp"

#include <initializer_list>
#include <limits>
#include <optional>
#include <string>

#include "core/error.hpp"

namespace traintwin::analytical_plan {
namespace {

/// Builds the plan of stage `r` of `p` (`m` micro-batches, `v` model chunks, schedule `kind`).
class StagePlanner {
 public:
  StagePlanner(PipelineScheduleKind kind, int64_t p, int64_t v)
      : kind_(kind), p_(p), v_(v), async_sends_(splits_backward(kind)) {}

  StagePlan plan(int64_t r, int64_t m, const PipelineOrder* order) const {
    StagePlan st;
    st.schedule = order != nullptr ? order->ranks.at(static_cast<size_t>(r))
                                   : build_schedule(kind_, p_, r, m, v_);
    make_items(r, st);
    const auto v = static_cast<size_t>(v_);
    st.first_fwd_step.assign(v, -1);
    st.last_bwd_step.assign(v, -1);
    const Pass trigger = async_sends_ ? Pass::kWeightGrad : Pass::kBackward;
    for (size_t i = 0; i < st.schedule.size(); ++i) {
      const auto c = static_cast<size_t>(st.schedule[i].model_chunk);
      if (st.schedule[i].pass == Pass::kForward && st.first_fwd_step[c] < 0) {
        st.first_fwd_step[c] = static_cast<int64_t>(i);
      }
      if (st.schedule[i].pass == trigger) st.last_bwd_step[c] = static_cast<int64_t>(i);
    }
    for (Item& it : st.items) {
      if (it.step < 0) continue;
      const ScheduleStep& s = st.schedule[static_cast<size_t>(it.step)];
      const auto c = static_cast<size_t>(s.model_chunk);
      it.model_chunk = static_cast<uint16_t>(s.model_chunk);
      it.pass = static_cast<uint8_t>(s.pass);
      it.flags = static_cast<uint8_t>((st.first_fwd_step[c] == it.step ? Item::kFirstForward : 0) |
                                      (st.last_bwd_step[c] == it.step ? Item::kLastBackward : 0));
    }
    return st;
  }

 private:
  int64_t nvs() const { return p_ * v_; }
  /// A transfer of stage `r` (core/schedule.hpp's rule, the lowering's) as a P2PRef.
  P2PRef ref(const PipelineTransfer& t, bool send) const {
    const int64_t peer = send ? t.receiver_vstage() : t.sender_vstage;
    return P2PRef{static_cast<uint32_t>(pipeline_tag(t, nvs())),
                  static_cast<int32_t>(rank_of_virtual_stage(kind_, p_, peer)), send};
  }
  // The transfers that cross ranks, by core/schedule.hpp's one rule (the lowering's).
  std::optional<P2PRef> recv_input(int64_t r, const ScheduleStep& st) const {
    const auto t = rank_step_input(kind_, p_, r, v_, st);
    return t ? std::optional<P2PRef>(ref(*t, false)) : std::nullopt;
  }
  std::optional<P2PRef> send_output(int64_t r, const ScheduleStep& st) const {
    const auto t = rank_step_output(kind_, p_, r, v_, st);
    return t ? std::optional<P2PRef>(ref(*t, true)) : std::nullopt;
  }

  /// Megatron's p2p batches around the steps, as core/rank_lowering.cpp (lower_schedule) issues them.
  void make_items(int64_t r, StagePlan& stage) const {
    const std::vector<ScheduleStep>& steps = stage.schedule;
    std::vector<Item>& out = stage.items;
    std::vector<P2PRef>& refs = stage.refs;
    out.reserve(2 * steps.size() + 2);
    refs.reserve(2 * steps.size() + 2);
    auto batch = [&](std::initializer_list<std::optional<P2PRef>> xs) {
      Item it;
      it.begin = static_cast<uint32_t>(refs.size());
      for (const auto& x : xs) {
        if (x) refs.push_back(*x);
      }
      it.end = static_cast<uint32_t>(refs.size());
      if (it.end > it.begin) out.push_back(it);
    };
    auto step = [&](int64_t i) {  // (pass, chunk and flags: plan())
      Item it;
      it.step = static_cast<int32_t>(i);
      out.push_back(it);
    };
    const auto n = static_cast<int64_t>(steps.size());
    if (v_ == 1 || async_sends_) {  // as core/rank_lowering.cpp: also ZB-V's two chunks
      // W steps have no p2p; the batches pair each F or B step with the next F or B step.
      auto next_fb = [&](int64_t i) {
        while (i < n && steps[static_cast<size_t>(i)].pass == Pass::kWeightGrad) ++i;
        return i;
      };
      batch({recv_input(r, steps[0])});
      for (int64_t i = 0; i < n; ++i) {
        step(i);
        const auto& st = steps[static_cast<size_t>(i)];
        if (st.pass == Pass::kWeightGrad) continue;
        const int64_t next = next_fb(i + 1);
        if (next < n && steps[static_cast<size_t>(next)].pass != st.pass) {
          batch({send_output(r, st), recv_input(r, steps[static_cast<size_t>(next)])});
        } else {
          batch({send_output(r, st)});
          if (next < n) batch({recv_input(r, steps[static_cast<size_t>(next)])});
        }
      }
      return;
    }
    std::vector<int64_t> fwd, bwd;
    for (int64_t i = 0; i < n; ++i) {
      (steps[static_cast<size_t>(i)].pass == Pass::kForward ? fwd : bwd).push_back(i);
    }
    size_t warmup = 0;
    while (warmup < steps.size() && steps[warmup].pass == Pass::kForward) ++warmup;
    const size_t total = fwd.size();
    const size_t steady = total - warmup;
    auto S = [&](int64_t i) -> const ScheduleStep& { return steps[static_cast<size_t>(i)]; };
    auto recv_f = [&](size_t k) { return k < total ? recv_input(r, S(fwd[k])) : std::nullopt; };
    auto recv_b = [&](size_t k) { return k < total ? recv_input(r, S(bwd[k])) : std::nullopt; };
    batch({recv_f(0)});
    for (size_t k = 0; k < warmup; ++k) {
      step(fwd[k]);
      batch({send_output(r, S(fwd[k])), recv_f(k + 1),
             k + 1 == warmup && steady > 0 ? recv_b(0) : std::nullopt});
    }
    for (size_t j = 0; j < steady; ++j) {
      step(fwd[warmup + j]);
      step(bwd[j]);
      batch({send_output(r, S(fwd[warmup + j])), send_output(r, S(bwd[j])), recv_f(warmup + j + 1),
             recv_b(j + 1)});
    }
    if (steady == 0) batch({recv_b(0)});
    for (size_t k = steady; k < total; ++k) {
      step(bwd[k]);
      batch({send_output(r, S(bwd[k])), recv_b(k + 1)});
    }
  }

  PipelineScheduleKind kind_;
  int64_t p_, v_;
  bool async_sends_;  ///< splits_backward(kind_)
};

}  // namespace

PipelinePlan make_pipeline_plan(PipelineScheduleKind kind, int64_t p, int64_t m, int64_t v,
                                const PipelineOrder* order) {
  // The tags (pipeline_tag: < 2 x m x p x v) and a stage's steps (<= 3 x m x v) in 32 bits, the
  // peer stage and the model chunk in theirs.
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  if (p < 1 || v < 1 || m < 0 || v > std::numeric_limits<uint16_t>::max() || m > kMax / 6 / v ||
      m * v > kMax / 2 / p) {
    throw InvalidArgument("pipeline plan of the analytical estimate: " + std::to_string(m) +
                          " micro-batches over " + std::to_string(p) + " stages x " +
                          std::to_string(v) + " model chunks do not fit its 32-bit tags and "
                          "steps (need 2 x m x p x v and 3 x m x v below 2^31)");
  }
  if (order != nullptr && static_cast<int64_t>(order->ranks.size()) != p) {
    throw InvalidArgument("pipeline plan of the analytical estimate: an order of " +
                          std::to_string(order->ranks.size()) + " ranks for " +
                          std::to_string(p) + " stages");
  }
  const StagePlanner planner(kind, p, v);
  PipelinePlan plan;
  plan.stages.reserve(static_cast<size_t>(p));
  for (int64_t r = 0; r < p; ++r) plan.stages.push_back(planner.plan(r, m, order));
  return plan;
}

}  // namespace traintwin::analytical_plan
