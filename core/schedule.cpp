// Pipeline schedules: GPipe, 1F1B (PipeDream-Flush), Megatron's interleaved 1F1B, the
// zero-bubble ZB-H1, ZB-H2 (Qi et al., ICLR 2024) and ZB-V (Qi et al., arXiv:2401.10241 v2,
// sec. 6), and DeepSeek's DualPipe and DualPipeV (deepseek-ai/DualPipe).
#include "core/schedule.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <deque>

#include "core/error.hpp"

namespace traintwin {
namespace {

// Throws InvalidArgument unless pp_size >= 1, 0 <= pp_rank < pp_size and m >= 1.
void check_pipeline_args(const char* fn, int64_t pp_size, int64_t pp_rank,
                         int64_t num_micro_batches) {
  if (pp_size < 1) {
    throw InvalidArgument(fmt::format("{}: pp_size must be >= 1, got {}", fn, pp_size));
  }
  if (pp_rank < 0 || pp_rank >= pp_size) {
    throw InvalidArgument(
        fmt::format("{}: pp_rank must be in [0, pp_size) = [0, {}), got {}", fn, pp_size, pp_rank));
  }
  if (num_micro_batches < 1) {
    throw InvalidArgument(
        fmt::format("{}: num_micro_batches must be >= 1, got {}", fn, num_micro_batches));
  }
}

// Adds the interleaved rules (v >= 2, m % p == 0) to check_pipeline_args.
void check_interleaved_args(const char* fn, int64_t pp_size, int64_t pp_rank,
                            int64_t num_micro_batches, int64_t num_model_chunks) {
  check_pipeline_args(fn, pp_size, pp_rank, num_micro_batches);
  if (num_model_chunks < 2) {
    throw InvalidArgument(
        fmt::format("{}: num_model_chunks (virtual pipeline size) must be >= 2 for the interleaved "
                    "schedule, got {}",
                    fn, num_model_chunks));
  }
  if (num_micro_batches % pp_size != 0) {
    throw InvalidArgument(fmt::format(
        "{}: num_micro_batches ({}) must be a multiple of pp_size ({}) for the interleaved "
        "schedule (Megatron's rule)",
        fn, num_micro_batches, pp_size));
  }
}

// Throws InvalidArgument unless v >= 1 and (GPipe => v == 1).
void check_kind_args(const char* fn, PipelineScheduleKind kind, int64_t num_model_chunks) {
  if (num_model_chunks < 1) {
    throw InvalidArgument(
        fmt::format("{}: num_model_chunks must be >= 1, got {}", fn, num_model_chunks));
  }
  const int64_t need = required_model_chunks(kind);
  if (need == 1 && num_model_chunks != 1) {
    throw InvalidArgument(fmt::format(
        "{}: the {} schedule supports only num_model_chunks == 1 (no virtual pipeline), "
        "got {}",
        fn, to_string(kind), num_model_chunks));
  }
  if (need == 2 && num_model_chunks != 2) {
    throw InvalidArgument(fmt::format(
        "{}: the {} schedule needs num_model_chunks == 2 ({}), got {}", fn, to_string(kind),
        bidirectional(kind) ? "its two parameter copies: chunk 0 = stage r of the forward "
                              "direction, chunk 1 = stage p - 1 - r of the reverse one"
                            : "the V placement: chunk 0 = stage r, chunk 1 = stage 2p - 1 - r",
        num_model_chunks));
  }
}

// Forwards before the first B (n) and the delay of each W in B steps (d) of the zero-bubble
// schedules on rank r (see zb_h1_schedule / zb_h2_schedule).
struct ZeroBubbleShape {
  int64_t forwards_first;
  int64_t w_delay;
};

ZeroBubbleShape zero_bubble_shape(PipelineScheduleKind kind, int64_t pp_size, int64_t pp_rank) {
  if (kind == PipelineScheduleKind::kZbH1) return {pp_size - pp_rank, pp_rank};
  return {2 * pp_size - 1 - 2 * pp_rank, 2 * pp_rank};
}

// The zero-bubble order: n forwards, then per micro-batch j: B_j, W_{j-d} (when j >= d),
// F_{n+j} (when n + j < m); then the W's still owed, in micro-batch order.
std::vector<ScheduleStep> zero_bubble_steps(PipelineScheduleKind kind, int64_t pp_size,
                                            int64_t pp_rank, int64_t m) {
  const auto [n0, d] = zero_bubble_shape(kind, pp_size, pp_rank);
  const int64_t n = std::min(n0, m);
  std::vector<ScheduleStep> steps;
  steps.reserve(static_cast<size_t>(3 * m));
  for (int64_t k = 0; k < n; ++k) steps.push_back(ScheduleStep{Pass::kForward, k, 0});
  for (int64_t j = 0; j < m; ++j) {
    steps.push_back(ScheduleStep{Pass::kBackward, j, 0});
    if (j >= d) steps.push_back(ScheduleStep{Pass::kWeightGrad, j - d, 0});
    if (n + j < m) steps.push_back(ScheduleStep{Pass::kForward, n + j, 0});
  }
  for (int64_t k = std::max<int64_t>(0, m - d); k < m; ++k) {
    steps.push_back(ScheduleStep{Pass::kWeightGrad, k, 0});
  }
  return steps;
}

// The ZB-V order of rank r (see zb_v_schedule in core/schedule.hpp for the rules): the forward
// and backward sequences, then warm-up, steady phase, cool-down. Needs m >= 2p.
std::vector<ScheduleStep> zb_v_steps(int64_t p, int64_t r, int64_t m) {
  std::vector<ScheduleStep> fwd;  // every forward, in order
  int64_t next[2] = {0, 0};       // next micro-batch of each chunk's forwards
  auto add_f = [&](int64_t c) {
    if (next[c] < m) fwd.push_back(ScheduleStep{Pass::kForward, next[c]++, c});
  };
  for (int64_t k = 0; k < 2 * p - 1 - 2 * r; ++k) add_f(0);
  for (int64_t k = 0; k < r; ++k) {
    add_f(1);
    add_f(0);
  }
  add_f(1);
  const size_t warmup = fwd.size();  // 2p
  for (int64_t k = 0; k < p - 1 - r; ++k) add_f(1);
  while (next[0] < m || next[1] < m) {
    add_f(0);
    add_f(1);
  }
  std::vector<ScheduleStep> bwd;  // every B, in order
  int64_t b0 = 0;
  int64_t b1 = std::min(p - r, m);
  for (int64_t k = 0; k < b1; ++k) bwd.push_back(ScheduleStep{Pass::kBackward, k, 1});
  while (b0 < m || b1 < m) {
    if (b0 < m) bwd.push_back(ScheduleStep{Pass::kBackward, b0++, 0});
    if (b1 < m) bwd.push_back(ScheduleStep{Pass::kBackward, b1++, 1});
  }
  // The last chunk-0 forward: after it, forwards follow chunk-0 B's only.
  size_t last_f0 = 0;
  for (size_t k = 0; k < fwd.size(); ++k) {
    if (fwd[k].model_chunk == 0) last_f0 = k;
  }
  auto w_of = [](const ScheduleStep& b) {
    return ScheduleStep{Pass::kWeightGrad, b.micro_batch, b.model_chunk};
  };
  std::vector<ScheduleStep> steps(fwd.begin(), fwd.begin() + static_cast<std::ptrdiff_t>(warmup));
  steps.reserve(static_cast<size_t>(6 * m));
  size_t f = warmup;
  size_t i = 0;
  while (f < fwd.size()) {
    const ScheduleStep& b = bwd[i++];
    steps.push_back(b);
    steps.push_back(w_of(b));
    if (f <= last_f0 || b.model_chunk == 0) steps.push_back(fwd[f++]);
  }
  const size_t d = static_cast<size_t>(2 * r + 1);
  const size_t cool = i;
  for (size_t k = cool; k < bwd.size(); ++k) {
    steps.push_back(bwd[k]);
    if (k - cool >= d) steps.push_back(w_of(bwd[k - d]));
  }
  for (size_t k = std::max(cool, bwd.size() >= d ? bwd.size() - d : size_t{0}); k < bwd.size();
       ++k) {
    steps.push_back(w_of(bwd[k]));
  }
  return steps;
}

int64_t one_f_one_b_warmup(int64_t pp_size, int64_t pp_rank, int64_t num_micro_batches) {
  return std::min(pp_size - pp_rank - 1, num_micro_batches);
}

int64_t interleaved_warmup(int64_t pp_size, int64_t pp_rank, int64_t num_micro_batches,
                           int64_t num_model_chunks) {
  const int64_t total = num_micro_batches * num_model_chunks;
  return std::min((pp_size - pp_rank - 1) * 2 + (num_model_chunks - 1) * pp_size, total);
}

// The step of virtual micro-batch k (0..m*v-1) in Megatron's interleaved order: groups of p
// micro-batches run through chunk 0, then chunk 1, ..., then the next group. Backwards visit the
// chunks in reverse. With v == 1 this is simply micro-batch k through chunk 0.
ScheduleStep virtual_step(Pass pass, int64_t k, int64_t pp_size, int64_t num_model_chunks) {
  const int64_t group_span = pp_size * num_model_chunks;
  const int64_t in_group = k % group_span;
  int64_t chunk = in_group / pp_size;
  if (pass == Pass::kBackward) chunk = num_model_chunks - 1 - chunk;
  const int64_t micro_batch = (k / group_span) * pp_size + k % pp_size;
  return ScheduleStep{pass, micro_batch, chunk};
}

// Warm-up forwards of virtual micro-batches 0..warmup-1, then (forward warmup + i, backward i)
// pairs, then the remaining backwards: the common shape of 1F1B and interleaved 1F1B.
std::vector<ScheduleStep> one_f_one_b_shape(int64_t pp_size, int64_t num_virtual, int64_t warmup,
                                            int64_t num_model_chunks) {
  std::vector<ScheduleStep> steps;
  steps.reserve(static_cast<size_t>(2 * num_virtual));
  for (int64_t k = 0; k < warmup; ++k) {
    steps.push_back(virtual_step(Pass::kForward, k, pp_size, num_model_chunks));
  }
  const int64_t steady = num_virtual - warmup;
  for (int64_t i = 0; i < steady; ++i) {
    steps.push_back(virtual_step(Pass::kForward, warmup + i, pp_size, num_model_chunks));
    steps.push_back(virtual_step(Pass::kBackward, i, pp_size, num_model_chunks));
  }
  for (int64_t k = steady; k < num_virtual; ++k) {
    steps.push_back(virtual_step(Pass::kBackward, k, pp_size, num_model_chunks));
  }
  return steps;
}

}  // namespace

std::vector<ScheduleStep> gpipe_schedule(int64_t pp_size, int64_t pp_rank,
                                         int64_t num_micro_batches) {
  check_pipeline_args("gpipe_schedule", pp_size, pp_rank, num_micro_batches);
  std::vector<ScheduleStep> steps;
  steps.reserve(static_cast<size_t>(2 * num_micro_batches));
  for (int64_t mb = 0; mb < num_micro_batches; ++mb) {
    steps.push_back(ScheduleStep{Pass::kForward, mb, 0});
  }
  for (int64_t mb = num_micro_batches - 1; mb >= 0; --mb) {
    steps.push_back(ScheduleStep{Pass::kBackward, mb, 0});
  }
  return steps;
}

std::vector<ScheduleStep> one_f_one_b_schedule(int64_t pp_size, int64_t pp_rank,
                                               int64_t num_micro_batches) {
  check_pipeline_args("one_f_one_b_schedule", pp_size, pp_rank, num_micro_batches);
  return one_f_one_b_shape(pp_size, num_micro_batches,
                           one_f_one_b_warmup(pp_size, pp_rank, num_micro_batches),
                           /*num_model_chunks=*/1);
}

std::vector<ScheduleStep> interleaved_1f1b_schedule(int64_t pp_size, int64_t pp_rank,
                                                    int64_t num_micro_batches,
                                                    int64_t num_model_chunks) {
  check_interleaved_args("interleaved_1f1b_schedule", pp_size, pp_rank, num_micro_batches,
                         num_model_chunks);
  return one_f_one_b_shape(
      pp_size, num_micro_batches * num_model_chunks,
      interleaved_warmup(pp_size, pp_rank, num_micro_batches, num_model_chunks), num_model_chunks);
}

std::vector<ScheduleStep> zb_h1_schedule(int64_t pp_size, int64_t pp_rank,
                                         int64_t num_micro_batches) {
  check_pipeline_args("zb_h1_schedule", pp_size, pp_rank, num_micro_batches);
  return zero_bubble_steps(PipelineScheduleKind::kZbH1, pp_size, pp_rank, num_micro_batches);
}

std::vector<ScheduleStep> zb_h2_schedule(int64_t pp_size, int64_t pp_rank,
                                         int64_t num_micro_batches) {
  check_pipeline_args("zb_h2_schedule", pp_size, pp_rank, num_micro_batches);
  return zero_bubble_steps(PipelineScheduleKind::kZbH2, pp_size, pp_rank, num_micro_batches);
}

std::vector<ScheduleStep> zb_v_schedule(int64_t pp_size, int64_t pp_rank,
                                        int64_t num_micro_batches) {
  check_pipeline_args("zb_v_schedule", pp_size, pp_rank, num_micro_batches);
  if (num_micro_batches < 2 * pp_size) {
    throw InvalidArgument(fmt::format(
        "zb_v_schedule: num_micro_batches ({}) must be >= 2 x pp_size = {} (ZB-V's warm-up runs "
        "2p forwards)",
        num_micro_batches, 2 * pp_size));
  }
  return zb_v_steps(pp_size, pp_rank, num_micro_batches);
}

namespace {

// DualPipeV's order of rank r of p with m micro-batches per chunk (see dualpipev_schedule in
// core/schedule.hpp for the eight steps); DualPipe's per half rank. Needs m >= 2p.
std::vector<ScheduleStep> dualpipev_steps(int64_t p, int64_t r, int64_t m) {
  std::vector<ScheduleStep> out;
  out.reserve(static_cast<size_t>(6 * m));
  int64_t forward[2] = {0, 0}, backward[2] = {0, 0};
  std::deque<ScheduleStep> deferred;  // W's of the backwards that deferred them, oldest first
  auto f = [&](int64_t c) { out.push_back({Pass::kForward, forward[c]++, c}); };
  auto b = [&](int64_t c, bool defer_w) {
    const int64_t mb = backward[c]++;
    out.push_back({Pass::kBackward, mb, c});
    if (defer_w) {
      deferred.push_back({Pass::kWeightGrad, mb, c});
    } else {
      out.push_back({Pass::kWeightGrad, mb, c});
    }
  };
  auto w = [&] {
    out.push_back(deferred.front());
    deferred.pop_front();
  };
  for (int64_t i = 0; i < 2 * (p - r - 1); ++i) f(0);  // 1
  for (int64_t i = 0; i < r + 1; ++i) {                 // 2
    f(0);
    f(1);
  }
  for (int64_t i = 0; i < p - r - 1; ++i) {  // 3
    b(1, true);
    w();
    f(1);
  }
  for (int64_t i = 0; i < m - 2 * p + r + 1; ++i) {  // 4: F&B(0, 1), F&B(1, 0)
    f(0);
    b(1, false);
    f(1);
    b(0, false);
  }
  for (int64_t i = 0; i < p - r - 1; ++i) {  // 5: B chunk 1, F&B(1, 0)
    b(1, false);
    f(1);
    b(0, false);
  }
  bool defer = false;  // 6
  for (int64_t i = 0; i < r + 1; ++i) {
    if (i == (r + 1) / 2 && r % 2 == 1) defer = true;
    b(1, defer);
    if (i == (r + 1) / 2 && r % 2 == 0) defer = true;
    b(0, defer);
  }
  for (int64_t i = 0; i < p - r - 1; ++i) {  // 7
    w();
    b(0, true);
  }
  for (int64_t i = 0; i < r + 1; ++i) w();  // 8
  return out;
}

}  // namespace

std::vector<ScheduleStep> dualpipev_schedule(int64_t pp_size, int64_t pp_rank,
                                             int64_t num_micro_batches) {
  check_pipeline_args("dualpipev_schedule", pp_size, pp_rank, num_micro_batches);
  if (num_micro_batches < 2 * pp_size) {
    throw InvalidArgument(fmt::format(
        "dualpipev_schedule: num_micro_batches ({}) must be >= 2 x pp_size = {} (DualPipeV's "
        "warm-up runs 2p forwards)",
        num_micro_batches, 2 * pp_size));
  }
  return dualpipev_steps(pp_size, pp_rank, num_micro_batches);
}

std::vector<ScheduleStep> dualpipe_schedule(int64_t pp_size, int64_t pp_rank,
                                            int64_t num_micro_batches) {
  check_pipeline_args("dualpipe_schedule", pp_size, pp_rank, num_micro_batches);
  const int64_t p = pp_size, r = pp_rank, m = num_micro_batches;
  if (p % 2 != 0) {
    throw InvalidArgument(fmt::format(
        "dualpipe_schedule: pp_size ({}) must be even (DualPipe pairs rank r with rank p - 1 - r; "
        "dualpipe.py asserts num_ranks % 2 == 0)",
        p));
  }
  if (m % 2 != 0 || m < 2 * p) {
    throw InvalidArgument(fmt::format(
        "dualpipe_schedule: num_micro_batches ({}) must be even and >= 2 x pp_size = {} (half of "
        "them enter from each end, and each direction's warm-up runs p forwards through the two "
        "copies; dualpipe.py asserts num_chunks % 2 == 0 and num_chunks >= num_ranks * 2)",
        m, 2 * p));
  }
  const int64_t half = m / 2;
  const int64_t second_half = runs_chunks_reversed(PipelineScheduleKind::kDualPipe, p, r) ? 1 : 0;
  std::vector<ScheduleStep> out = dualpipev_steps(p / 2, std::min(r, p - 1 - r), half);
  for (ScheduleStep& s : out) {
    const int64_t direction = s.model_chunk ^ second_half;  // dualpipe.py: phase ^= ...
    s.model_chunk = direction;
    s.micro_batch += direction * half;
  }
  return out;
}

bool v_shaped(PipelineScheduleKind kind) {
  return kind == PipelineScheduleKind::kZbV || kind == PipelineScheduleKind::kDualPipeV ||
         bidirectional(kind);
}

bool bidirectional(PipelineScheduleKind kind) { return kind == PipelineScheduleKind::kDualPipe; }

bool runs_chunks_reversed(PipelineScheduleKind kind, int64_t pp_size, int64_t pp_rank) {
  return bidirectional(kind) && 2 * pp_rank >= pp_size;  // dualpipe.py is_in_second_half
}

bool splits_backward(PipelineScheduleKind kind) {
  return kind == PipelineScheduleKind::kZbH1 || kind == PipelineScheduleKind::kZbH2 ||
         v_shaped(kind);
}

int64_t required_model_chunks(PipelineScheduleKind kind) {
  if (v_shaped(kind)) return 2;
  if (kind == PipelineScheduleKind::k1F1B) return 0;
  return 1;
}

int64_t virtual_stage_of(PipelineScheduleKind kind, int64_t pp_size, int64_t pp_rank,
                         int64_t model_chunk) {
  if (v_shaped(kind)) {
    return model_chunk == 0 ? pp_rank : 2 * pp_size - 1 - pp_rank;
  }
  return model_chunk * pp_size + pp_rank;
}

bool takes_embedding(PipelineScheduleKind kind, int64_t pp_size, int64_t num_model_chunks,
                     int64_t vstage) {
  (void)num_model_chunks;
  return vstage == 0 || (bidirectional(kind) && vstage == pp_size);
}

bool computes_loss(PipelineScheduleKind kind, int64_t pp_size, int64_t num_model_chunks,
                   int64_t vstage) {
  return vstage == pp_size * num_model_chunks - 1 ||
         (bidirectional(kind) && vstage == pp_size - 1);
}

int64_t rank_of_virtual_stage(PipelineScheduleKind kind, int64_t pp_size, int64_t vstage) {
  if (v_shaped(kind)) {
    return vstage < pp_size ? vstage : 2 * pp_size - 1 - vstage;
  }
  return vstage % pp_size;
}

std::vector<ScheduleStep> build_schedule(PipelineScheduleKind kind, int64_t pp_size,
                                         int64_t pp_rank, int64_t num_micro_batches,
                                         int64_t num_model_chunks) {
  check_kind_args("build_schedule", kind, num_model_chunks);
  if (kind == PipelineScheduleKind::kGPipe) {
    return gpipe_schedule(pp_size, pp_rank, num_micro_batches);
  }
  if (kind == PipelineScheduleKind::kZbH1) {
    return zb_h1_schedule(pp_size, pp_rank, num_micro_batches);
  }
  if (kind == PipelineScheduleKind::kZbH2) {
    return zb_h2_schedule(pp_size, pp_rank, num_micro_batches);
  }
  if (kind == PipelineScheduleKind::kZbV) {
    return zb_v_schedule(pp_size, pp_rank, num_micro_batches);
  }
  if (kind == PipelineScheduleKind::kDualPipeV) {
    return dualpipev_schedule(pp_size, pp_rank, num_micro_batches);
  }
  if (kind == PipelineScheduleKind::kDualPipe) {
    return dualpipe_schedule(pp_size, pp_rank, num_micro_batches);
  }
  if (num_model_chunks == 1) return one_f_one_b_schedule(pp_size, pp_rank, num_micro_batches);
  return interleaved_1f1b_schedule(pp_size, pp_rank, num_micro_batches, num_model_chunks);
}

int64_t num_warmup_steps(PipelineScheduleKind kind, int64_t pp_size, int64_t pp_rank,
                         int64_t num_micro_batches, int64_t num_model_chunks) {
  check_kind_args("num_warmup_steps", kind, num_model_chunks);
  if (kind == PipelineScheduleKind::kGPipe) {
    check_pipeline_args("num_warmup_steps", pp_size, pp_rank, num_micro_batches);
    return num_micro_batches;
  }
  if (bidirectional(kind)) {
    check_pipeline_args("num_warmup_steps", pp_size, pp_rank, num_micro_batches);
    return std::min(pp_size - 1, num_micro_batches);
  }
  if (v_shaped(kind)) {
    check_pipeline_args("num_warmup_steps", pp_size, pp_rank, num_micro_batches);
    return std::min(2 * pp_size - 1, num_micro_batches * 2);
  }
  if (splits_backward(kind)) {
    check_pipeline_args("num_warmup_steps", pp_size, pp_rank, num_micro_batches);
    return std::min(zero_bubble_shape(kind, pp_size, pp_rank).forwards_first - 1,
                    num_micro_batches);
  }
  if (num_model_chunks == 1) {
    check_pipeline_args("num_warmup_steps", pp_size, pp_rank, num_micro_batches);
    return one_f_one_b_warmup(pp_size, pp_rank, num_micro_batches);
  }
  check_interleaved_args("num_warmup_steps", pp_size, pp_rank, num_micro_batches, num_model_chunks);
  return interleaved_warmup(pp_size, pp_rank, num_micro_batches, num_model_chunks);
}

int64_t max_in_flight_weighted(const std::vector<ScheduleStep>& schedule,
                               const std::vector<int64_t>& weight_of_chunk) {
  for (int64_t w : weight_of_chunk) {
    if (w < 0) throw InvalidArgument(fmt::format("max_in_flight: negative chunk weight {}", w));
  }
  // With W steps an activation set is released by its W, else by its backward.
  const bool split = std::any_of(schedule.begin(), schedule.end(),
                                 [](const ScheduleStep& s) { return s.pass == Pass::kWeightGrad; });
  const Pass release = split ? Pass::kWeightGrad : Pass::kBackward;
  int64_t in_flight = 0;  // outstanding forwards
  int64_t weight = 0;     // their summed weights
  int64_t peak = 0;
  for (const ScheduleStep& s : schedule) {
    if (s.model_chunk < 0 || s.model_chunk >= static_cast<int64_t>(weight_of_chunk.size())) {
      throw InvalidArgument(fmt::format("max_in_flight: step {} names a model chunk outside the "
                                        "{} weighted ones",
                                        to_string(s), weight_of_chunk.size()));
    }
    const int64_t w = weight_of_chunk[static_cast<size_t>(s.model_chunk)];
    if (s.pass == Pass::kForward) {
      ++in_flight;
      peak = std::max(peak, weight += w);
    } else if (s.pass == release) {
      if (--in_flight < 0) {
        throw InvalidArgument(
            fmt::format("max_in_flight: {} {} runs before any forward is outstanding",
                        split ? "weight gradient" : "backward", to_string(s)));
      }
      weight -= w;
    }
  }
  return peak;
}

int64_t max_in_flight(const std::vector<ScheduleStep>& schedule) {
  int64_t chunks = 0;
  for (const ScheduleStep& s : schedule) chunks = std::max(chunks, s.model_chunk + 1);
  return max_in_flight_weighted(schedule, std::vector<int64_t>(static_cast<size_t>(chunks), 1));
}

int64_t peak_in_flight_weighted(PipelineScheduleKind kind, int64_t pp_size, int64_t pp_rank,
                                int64_t num_micro_batches, int64_t num_model_chunks,
                                const std::vector<int64_t>& weight_of_chunk) {
  if (splits_backward(kind)) {
    check_kind_args("max_in_flight", kind, num_model_chunks);
    return max_in_flight_weighted(
        build_schedule(kind, pp_size, pp_rank, num_micro_batches, num_model_chunks),
        weight_of_chunk);
  }
  const int64_t warmup =
      num_warmup_steps(kind, pp_size, pp_rank, num_micro_batches, num_model_chunks);
  const int64_t v = num_model_chunks;
  if (static_cast<int64_t>(weight_of_chunk.size()) < v) {
    throw InvalidArgument(fmt::format("max_in_flight: {} chunk weights for {} model chunks",
                                      weight_of_chunk.size(), v));
  }
  for (int64_t w : weight_of_chunk) {
    if (w < 0) throw InvalidArgument(fmt::format("max_in_flight: negative chunk weight {}", w));
  }
  const int64_t span = pp_size * v;  // virtual micro-batches of one group through every chunk
  // Virtual steps 0..n-1 whose chunk is c (virtual_step: chunk (k mod span) / p).
  auto count = [&](int64_t n, int64_t c) {
    return (n / span) * pp_size + std::clamp(n % span - c * pp_size, int64_t{0}, pp_size);
  };
  // The outstanding weight once forwards 0..a-1 and backwards 0..b-1 have run (a backward's
  // chunk is v - 1 - that of the forward with its index).
  auto weight = [&](int64_t a, int64_t b) {
    int64_t sum = 0;
    for (int64_t c = 0; c < v; ++c) {
      sum += weight_of_chunk[static_cast<size_t>(c)] * (count(a, c) - count(b, v - 1 - c));
    }
    return sum;
  };
  const int64_t total = num_micro_batches * v;
  int64_t peak = weight(warmup, 0);
  for (int64_t i = 0; i < std::min(total - warmup, span); ++i) {
    peak = std::max(peak, weight(warmup + i + 1, i));
  }
  return peak;
}

int64_t in_flight_bound(PipelineScheduleKind kind, int64_t pp_size, int64_t pp_rank,
                        int64_t num_micro_batches, int64_t num_model_chunks) {
  const int64_t warmup =
      num_warmup_steps(kind, pp_size, pp_rank, num_micro_batches, num_model_chunks);
  if (kind == PipelineScheduleKind::kZbV) return std::min(2 * pp_size, 2 * num_micro_batches);
  if (kind == PipelineScheduleKind::kDualPipeV) return 2 * pp_size + 1;
  if (kind == PipelineScheduleKind::kDualPipe) return pp_size + 1;
  if (splits_backward(kind)) {
    // n forwards before the first B plus the d W's each B runs ahead of (zero_bubble_steps).
    const ZeroBubbleShape z = zero_bubble_shape(kind, pp_size, pp_rank);
    return std::min(z.forwards_first + z.w_delay, num_micro_batches);
  }
  const int64_t total = num_micro_batches * num_model_chunks;
  // A steady phase (warm-up < total) runs one more forward before its first backward.
  return warmup < total ? warmup + 1 : total;
}

std::string to_string(const ScheduleStep& s) {
  const char pass = s.pass == Pass::kForward ? 'F' : (s.pass == Pass::kBackward ? 'B' : 'W');
  return fmt::format("{}{}.{}", pass, s.micro_batch, s.model_chunk);
}

double ideal_bubble_fraction(PipelineScheduleKind kind, int64_t pp_size, int64_t num_micro_batches,
                             int64_t num_model_chunks) {
  if (pp_size < 1 || num_micro_batches < 1 || num_model_chunks < 1) {
    throw InvalidArgument("ideal_bubble_fraction: pp_size, num_micro_batches and num_model_chunks "
                          "must be >= 1");
  }
  if (kind == PipelineScheduleKind::kZbH2 || kind == PipelineScheduleKind::kZbV) return 0.0;
  if (kind == PipelineScheduleKind::kDualPipeV) {
    return static_cast<double>(pp_size - 1) /
           static_cast<double>(6 * num_micro_batches + pp_size - 1);
  }
  if (kind == PipelineScheduleKind::kDualPipe) {  // DualPipeV's on p/2 ranks, m/2 per chunk
    const int64_t idle = std::max<int64_t>(pp_size / 2 - 1, 0);
    return static_cast<double>(idle) / static_cast<double>(3 * num_micro_batches + idle);
  }
  if (kind == PipelineScheduleKind::kZbH1) {
    return static_cast<double>(pp_size - 1) /
           static_cast<double>(3 * num_micro_batches + pp_size - 1);
  }
  const int64_t v = kind == PipelineScheduleKind::kGPipe ? 1 : num_model_chunks;
  return static_cast<double>(pp_size - 1) / static_cast<double>(v * num_micro_batches + pp_size - 1);
}

int64_t pipeline_tag(const PipelineTransfer& t, int64_t vstages) {
  if (vstages < 1 || t.sender_vstage < 0 || t.sender_vstage >= vstages || t.micro_batch < 0) {
    throw InvalidArgument(fmt::format(
        "pipeline tag: micro-batch {} from virtual stage {} of {} (need micro-batch >= 0 and "
        "0 <= stage < stages)",
        t.micro_batch, t.sender_vstage, vstages));
  }
  return (t.micro_batch * vstages + t.sender_vstage) * 2 + (t.pass == Pass::kForward ? 0 : 1);
}

PipelineTransfer read_pipeline_tag(int64_t tag, int64_t vstages) {
  if (tag < 0 || vstages < 1) {
    throw InvalidArgument(
        fmt::format("pipeline tag {} over {} virtual stages: need tag >= 0 and stages >= 1", tag,
                    vstages));
  }
  return PipelineTransfer{tag / 2 / vstages, (tag / 2) % vstages,
                          tag % 2 == 0 ? Pass::kForward : Pass::kBackward};
}

std::optional<PipelineTransfer> step_input(const ScheduleStep& step, int64_t vstage,
                                           int64_t vstages) {
  if (step.pass == Pass::kWeightGrad) return std::nullopt;
  if (step.pass == Pass::kForward) {
    if (vstage == 0) return std::nullopt;
    return PipelineTransfer{step.micro_batch, vstage - 1, step.pass};
  }
  if (vstage == vstages - 1) return std::nullopt;
  return PipelineTransfer{step.micro_batch, vstage + 1, step.pass};
}

std::optional<PipelineTransfer> step_output(const ScheduleStep& step, int64_t vstage,
                                            int64_t vstages) {
  if (step.pass == Pass::kWeightGrad) return std::nullopt;
  if (step.pass == Pass::kForward ? vstage == vstages - 1 : vstage == 0) return std::nullopt;
  return PipelineTransfer{step.micro_batch, vstage, step.pass};
}

namespace {

// step_input / step_output of `step` at virtual stage `vstage` of `vstages`; under a
// bidirectional() kind within the direction's own p stages (0..p-1 or p..2p-1), the transfer's
// sender renamed back to the whole range.
template <typename F>
std::optional<PipelineTransfer> directed(F&& of, PipelineScheduleKind kind, int64_t pp_size,
                                         const ScheduleStep& step, int64_t vstage,
                                         int64_t vstages) {
  if (!bidirectional(kind)) return of(step, vstage, vstages);
  const int64_t base = vstage < pp_size ? 0 : pp_size;
  auto t = of(step, vstage - base, pp_size);
  if (t) t->sender_vstage += base;
  return t;
}

}  // namespace

std::optional<PipelineTransfer> rank_step_input(PipelineScheduleKind kind, int64_t pp_size,
                                                int64_t pp_rank, int64_t model_chunks,
                                                const ScheduleStep& step) {
  const auto t = directed(step_input, kind, pp_size, step,
                          virtual_stage_of(kind, pp_size, pp_rank, step.model_chunk),
                          pp_size * model_chunks);
  if (t && rank_of_virtual_stage(kind, pp_size, t->sender_vstage) == pp_rank) return std::nullopt;
  return t;
}

std::optional<PipelineTransfer> rank_step_output(PipelineScheduleKind kind, int64_t pp_size,
                                                 int64_t pp_rank, int64_t model_chunks,
                                                 const ScheduleStep& step) {
  const auto t = directed(step_output, kind, pp_size, step,
                          virtual_stage_of(kind, pp_size, pp_rank, step.model_chunk),
                          pp_size * model_chunks);
  if (t && rank_of_virtual_stage(kind, pp_size, t->receiver_vstage()) == pp_rank) {
    return std::nullopt;
  }
  return t;
}

}  // namespace traintwin
