// ZB-V's cost-aware order: the authors' greedy V scheduler (see core/zb_v_cost_aware.hpp for the
// rules and sources), written from scratch after reading sail-sg/zero-bubble-pipeline-parallelism
// megatron/core/pipeline_parallel/zerobubble/scheduler/zbv.py (commit 39f2c186). The result goes
// to the Program lowering as each rank's ScheduleStep list, as build_schedule's does.
#include "core/zb_v_cost_aware.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <deque>
#include <optional>

#include "core/error.hpp"

namespace traintwin {
namespace {

// Pass kinds as the scheduler counts them: F, B, W, each for its two "lanes" 0 and 1. Lane 0 of
// F is model chunk 0 (down the ranks), lane 1 model chunk 1 (back up); the backward lanes run
// the other way round: B lane 0 is model chunk 1's backward (rank 0 up to p - 1), B lane 1 model
// chunk 0's (back down). W lane c is B lane c's weight gradient.
enum Cat { kF = 0, kB = 1, kW = 2 };

int64_t model_chunk_of(int cat, int lane) { return cat == kF ? lane : 1 - lane; }

// One run of the greedy placement (zbv.py's try_v_schedule): all ranks together, each pass at
// its earliest start after its rank's previous pass and its input (+ comm across ranks).
class VGreedy {
 public:
  VGreedy(int64_t p, int64_t m, const ZbVPassCosts& c, const ZbVPassMemory& mem)
      : p_(p), m_(m), cost_{c.f, c.b, c.w}, comm_(c.comm), mem_{mem.f, mem.b, mem.w},
        limit_(mem.limit) {}

  struct Run {
    std::vector<std::vector<std::array<int64_t, 3>>> order;  // per rank: (cat, lane, micro-batch)
    std::vector<double> bubble;                                // per rank
    double max_bubble = 0;
  };

  // One variant, then repeated with each run's bubbles as the ranks' allowances while that
  // lowers the largest bubble (try_v_schedule's recursion).
  Run best_of_variant(bool fill_f, bool fill_b) const {
    Run best = run(fill_f, fill_b, std::nullopt);
    for (;;) {
      Run next = run(fill_f, fill_b, best.bubble);
      if (!(next.max_bubble < best.max_bubble)) return best;
      best = std::move(next);
    }
  }

 private:
  // The state of one run.
  struct State {
    std::vector<std::array<int64_t, 6>> count;  // per rank: passes placed, per cat * 2 + lane
    std::vector<double> end;                    // per id(): end time, -1 while not placed
    std::vector<double> cur, mem, bubble;       // per rank: time, memory, idle so far
    std::vector<std::deque<int>> pending_w;     // per rank: lanes of the B's whose W is owed
    std::vector<std::vector<std::array<int64_t, 3>>> order;
    std::vector<double> allowance;              // per rank: the previous run's bubble, or -1
    double max_allowance = -1;
  };

  size_t id(int cat, int lane, int64_t rank, int64_t mb) const {
    return static_cast<size_t>(((cat * 2 + lane) * p_ + rank) * m_ + mb);
  }

  // The largest bubble so far, or what rank `r` may idle given the previous run's allowances.
  static double max_bubble(const State& s, std::optional<int64_t> r) {
    double b = 0;
    for (double x : s.bubble) b = std::max(b, x);
    if (r) b = std::max(b, s.max_allowance - s.allowance[static_cast<size_t>(*r)]);
    return b;
  }

  void put(State& s, int cat, int lane, int64_t r) const {
    const auto ri = static_cast<size_t>(r);
    const double no_wait = s.cur[ri] + cost_[cat];
    double t = no_wait;
    const int64_t k = s.count[ri][static_cast<size_t>(cat * 2 + lane)];
    const char* const names[] = {"forward", "B", "W"};
    if (k >= m_) {
      throw InvalidArgument(fmt::format(
          "zb_v_cost_aware_schedule: rank {} would run a {} of model chunk {} beyond the {} "
          "micro-batches (pp_size {})",
          r, names[cat], model_chunk_of(cat, lane), m_, p_));
    }
    if (s.mem[ri] + mem_[cat] > limit_) {
      throw InvalidArgument(fmt::format(
          "zb_v_cost_aware_schedule: rank {} cannot run the {} of micro-batch {}, model chunk {} "
          "within the activation memory limit {} (holds {}, the pass adds {})",
          r, names[cat], k, model_chunk_of(cat, lane), limit_, s.mem[ri], mem_[cat]));
    }
    if (cat != kW) {
      // Lane 0 comes from the rank before, lane 1 from the rank after (none at the V's turns).
      const int64_t from = lane == 0 ? r - 1 : r + 1;
      if (from >= 0 && from < p_) {
        const double in = s.end[id(cat, lane, from, k)];
        if (in < 0) {
          throw InvalidArgument(fmt::format(
              "zb_v_cost_aware_schedule: internal order error, rank {} {} {} before its input",
              r, names[cat], k));
        }
        t = std::max(t, in + comm_ + cost_[cat]);
      }
    }
    if (s.count[ri][0] > 0) s.bubble[ri] += t - no_wait;
    s.end[id(cat, lane, r, k)] = t;
    s.cur[ri] = t;
    s.mem[ri] += mem_[cat];
    s.order[ri].push_back({cat, lane, k});
    if (cat == kB) s.pending_w[ri].push_back(lane);
    ++s.count[ri][static_cast<size_t>(cat * 2 + lane)];
  }

  void put_w(State& s, int64_t r) const {
    auto& q = s.pending_w[static_cast<size_t>(r)];
    if (q.empty()) {
      throw InvalidArgument(fmt::format(
          "zb_v_cost_aware_schedule: rank {} must free activation memory (limit {}) but has no W "
          "pending",
          r, limit_));
    }
    const int lane = q.front();
    q.pop_front();
    put(s, kW, lane, r);
  }

  // Before rank r's next pass, whose input ends at `input_end` (-1: not there yet, or none):
  // run owed W's while one fits before the input arrives, and one more if the remaining wait
  // exceeds what the rank may still idle and `fill` says so.
  void fill_wait(State& s, int64_t r, std::optional<size_t> input, bool fill) const {
    const auto ri = static_cast<size_t>(r);
    while (!s.pending_w[ri].empty() && input &&
           s.end[*input] + comm_ >= s.cur[ri] + cost_[kW]) {
      put_w(s, r);
    }
    // Without an input the authors' code reads the last W's end (Python's end_time[-1]), which
    // is never placed at this point: -1.
    const double in = input ? s.end[*input] : s.end.back();
    if (!s.pending_w[ri].empty() &&
        in + comm_ - s.cur[ri] > max_bubble(s, r) - s.bubble[ri] && fill) {
      put_w(s, r);
    }
  }

  Run run(bool fill_f, bool fill_b, const std::optional<std::vector<double>>& allowance) const {
    const auto np = static_cast<size_t>(p_);
    State s;
    s.count.assign(np, {0, 0, 0, 0, 0, 0});
    s.end.assign(static_cast<size_t>(6 * p_ * m_), -1.0);
    s.cur.assign(np, 0.0);
    s.mem.assign(np, 0.0);
    s.bubble.assign(np, 0.0);
    s.pending_w.resize(np);
    s.order.resize(np);
    s.allowance = allowance ? *allowance : std::vector<double>(np, -1.0);
    s.max_allowance = *std::max_element(s.allowance.begin(), s.allowance.end());
    auto cnt = [&](int64_t r, int slot) { return s.count[static_cast<size_t>(r)][slot]; };

    // Warm-up: a chunk-0 forward everywhere; from the last rank up, extra chunk-0 forwards
    // while they fit before the rank's first chunk-1 forward can start, then that forward.
    for (int64_t r = 0; r < p_; ++r) put(s, kF, 0, r);
    for (int64_t r = p_ - 1; r >= 0; --r) {
      if (r < p_ - 1) {
        const double ready = s.end[id(kF, 1, r + 1, 0)] + comm_;
        while (s.mem[static_cast<size_t>(r)] + mem_[kF] * static_cast<double>(2 + 2 * r) <=
                   limit_ &&
               s.cur[static_cast<size_t>(r)] + cost_[kF] <= ready && cnt(r, 0) < m_) {
          for (int64_t j = 0; j <= r; ++j) put(s, kF, 0, j);
        }
      }
      put(s, kF, 1, r);
    }
    // Each rank after the first catches up with the forwards of the rank before it, and goes on
    // while it has run no more chunk-1 forwards than that rank, which has not run all of them.
    int lane = 0;
    for (int64_t r = 1; r < p_; ++r) {
      while (cnt(r, 0) + cnt(r, 1) < cnt(r - 1, 0) + cnt(r - 1, 1) ||
             (cnt(r, 1) <= cnt(r - 1, 1) && cnt(r - 1, 1) < m_)) {
        for (int64_t j = p_ - 1; j >= r; --j) {
          if (cnt(j, lane) < m_) put(s, kF, lane, j);
        }
        lane = 1 - lane;
      }
    }

    for (int64_t round = 0; round < 2 * m_; ++round) {
      for (int64_t r = 0; r < p_; ++r) {
        while (s.mem[static_cast<size_t>(r)] + mem_[kB] > limit_) put_w(s, r);
      }
      // Which B each rank runs next: model chunk 1's (lane 0) unless chunk 0's (lane 1) are
      // behind and the next one's input is there (or lane 0 is done); the lane-1 ranks are
      // placed first, from the last rank down, then the lane-0 ranks from the first.
      std::vector<int64_t> lane0, lane1;
      for (int64_t r = 0; r < p_; ++r) {
        if (cnt(r, 3) >= cnt(r, 2)) {
          lane0.push_back(r);
        } else if (r == p_ - 1 || s.end[id(kB, 1, r + 1, cnt(r, 3))] >= 0 || cnt(r, 2) >= m_) {
          lane1.push_back(r);
        } else {
          lane0.push_back(r);
        }
      }
      std::vector<std::pair<int64_t, int>> bs;
      for (auto it = lane1.rbegin(); it != lane1.rend(); ++it) bs.emplace_back(*it, 1);
      for (int64_t r : lane0) bs.emplace_back(r, 0);
      for (const auto& [r, l] : bs) {
        std::optional<size_t> input;
        if (l == 1 && r < p_ - 1) input = id(kB, 1, r + 1, cnt(r, 3));
        if (l == 0 && r > 0) input = id(kB, 0, r - 1, cnt(r, 2));
        fill_wait(s, r, input, l == 1 || fill_b);
        put(s, kB, l, r);
      }

      for (int64_t r = 0; r < p_; ++r) {
        if (cnt(r, 1) >= m_) continue;
        int item = -1;
        if (cnt(r, 1) >= cnt(r, 0)) {
          item = 0;
        } else if (r == p_ - 1 || s.end[id(kF, 1, r + 1, cnt(r, 1))] >= 0) {
          item = 1;
        } else if (cnt(r, 0) < m_ && (r == 0 || s.end[id(kF, 0, r - 1, cnt(r, 0))] >= 0)) {
          item = 0;
        }
        if (item < 0) continue;
        while (s.mem[static_cast<size_t>(r)] + mem_[kF] > limit_) put_w(s, r);
        std::optional<size_t> input;
        if (item == 0 && r > 0) input = id(kF, 0, r - 1, cnt(r, 0));
        if (item == 1 && r < p_ - 1) input = id(kF, 1, r + 1, cnt(r, 1));
        fill_wait(s, r, input, fill_f);
        put(s, kF, item, r);
      }
    }
    for (int64_t r = 0; r < p_; ++r) {
      while (!s.pending_w[static_cast<size_t>(r)].empty()) put_w(s, r);
    }
    Run out;
    out.max_bubble = max_bubble(s, std::nullopt);
    out.bubble = std::move(s.bubble);
    out.order = std::move(s.order);
    return out;
  }

  int64_t p_, m_;
  std::array<double, 3> cost_;
  double comm_;
  std::array<double, 3> mem_;
  double limit_;
};

}  // namespace

ZbVPassMemory zb_v_megatron_memory(int64_t pp_size, int64_t hidden_size,
                                   int64_t num_attention_heads, int64_t seq_length) {
  if (pp_size < 1 || hidden_size < 1 || num_attention_heads < 1 || seq_length < 1) {
    throw InvalidArgument(fmt::format(
        "zb_v_megatron_memory: pp_size ({}), hidden_size ({}), num_attention_heads ({}) and "
        "seq_length ({}) must be >= 1",
        pp_size, hidden_size, num_attention_heads, seq_length));
  }
  const auto h = static_cast<double>(hidden_size);
  const double f = 34 * h + 5 * static_cast<double>(num_attention_heads * seq_length);
  const double w = -32 * h;
  return ZbVPassMemory{f, -f - w, w, f * static_cast<double>(2 * pp_size)};
}

ZbVCostAwareSchedule zb_v_cost_aware_schedule(int64_t pp_size, int64_t num_micro_batches,
                                              const ZbVPassCosts& costs,
                                              const ZbVPassMemory& memory) {
  if (pp_size < 1) {
    throw InvalidArgument(
        fmt::format("zb_v_cost_aware_schedule: pp_size must be >= 1, got {}", pp_size));
  }
  if (num_micro_batches < 2 * pp_size) {
    throw InvalidArgument(fmt::format(
        "zb_v_cost_aware_schedule: num_micro_batches ({}) must be >= 2 x pp_size = {} (ZB-V's "
        "warm-up runs 2p forwards)",
        num_micro_batches, 2 * pp_size));
  }
  if (!(costs.f > 0 && costs.b > 0 && costs.w > 0 && costs.comm >= 0)) {
    throw InvalidArgument(fmt::format(
        "zb_v_cost_aware_schedule: the pass costs must be > 0 and comm >= 0, got f {} b {} w {} "
        "comm {}",
        costs.f, costs.b, costs.w, costs.comm));
  }
  if (!(memory.f > 0 && memory.limit >= 2 * memory.f)) {
    throw InvalidArgument(fmt::format(
        "zb_v_cost_aware_schedule: memory.f must be > 0 and memory.limit >= 2 x memory.f (a "
        "rank's two chunks each hold one forward), got f {} limit {}",
        memory.f, memory.limit));
  }
  const VGreedy greedy(pp_size, num_micro_batches, costs, memory);
  std::optional<VGreedy::Run> best;
  for (const bool fill_b : {true, false}) {
    for (const bool fill_f : {true, false}) {
      VGreedy::Run r = greedy.best_of_variant(fill_f, fill_b);
      if (!best || r.max_bubble < best->max_bubble) best = std::move(r);
    }
  }
  ZbVCostAwareSchedule out;
  out.bubble = best->max_bubble;
  out.ranks.resize(static_cast<size_t>(pp_size));
  for (size_t r = 0; r < best->order.size(); ++r) {
    auto& steps = out.ranks[r];
    steps.reserve(best->order[r].size());
    for (const auto& [cat, lane, mb] : best->order[r]) {
      const Pass pass = cat == kF ? Pass::kForward : cat == kB ? Pass::kBackward : Pass::kWeightGrad;
      steps.push_back(ScheduleStep{pass, mb, model_chunk_of(static_cast<int>(cat),
                                                             static_cast<int>(lane))});
    }
  }
  return out;
}

}  // namespace traintwin
