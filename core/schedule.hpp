// Pipeline schedules as pure functions: the ordered forward/backward passes one pipeline rank
// runs in one iteration. No runtime, no communication: the Program lowering adds those.
//
// Sources: GPipe (Huang et al. 2019); 1F1B = PipeDream-Flush (Narayanan et al. 2021), with
// Megatron-LM's warm-up of (p - rank - 1) forwards; interleaved 1F1B as in Megatron-LM
// (megatron/core/pipeline_parallel/schedules.py, forward_backward_pipelining_with_interleaving).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/scenario.hpp"

namespace traintwin {

/// Forward or backward pass of one (micro-batch, model chunk).
enum class Pass { kForward, kBackward };

/// One step of a schedule: pass `pass` of micro-batch `micro_batch` (0..m-1) through model chunk
/// `model_chunk` (0..v-1) of this pipeline rank. Chunk c of rank r is virtual stage c*p + r.
struct ScheduleStep {
  Pass pass;
  int64_t micro_batch;
  int64_t model_chunk;
  bool operator==(const ScheduleStep&) const = default;
};

/// Which of the three phases of 1F1B a step belongs to (GPipe: all forwards are warm-up,
/// all backwards cool-down).
enum class SchedulePhase { kWarmup, kSteady, kCooldown };

/// GPipe: all m forwards, then all m backwards (in reverse micro-batch order, as autograd runs
/// them). Throws InvalidArgument unless pp_size >= 1, 0 <= pp_rank < pp_size, m >= 1.
std::vector<ScheduleStep> gpipe_schedule(int64_t pp_size, int64_t pp_rank, int64_t num_micro_batches);

/// 1F1B (PipeDream-Flush): min(p - rank - 1, m) warm-up forwards, then alternating
/// one forward / one backward, then the remaining backwards. Same argument checks as GPipe.
std::vector<ScheduleStep> one_f_one_b_schedule(int64_t pp_size, int64_t pp_rank, int64_t num_micro_batches);

/// Megatron's interleaved 1F1B with v = num_model_chunks > 1: warm-up of
/// min((p - rank - 1) * 2 + (v - 1) * p, m * v) forwards, steady 1F1B, cool-down. Virtual
/// micro-batch k maps to model chunk (k mod (p*v)) / p (backward: v - 1 - that) and micro-batch
/// (k / (p*v)) * p + k mod p. Throws InvalidArgument unless m % p == 0 (Megatron's rule) and v >= 2.
std::vector<ScheduleStep> interleaved_1f1b_schedule(int64_t pp_size, int64_t pp_rank,
                                                    int64_t num_micro_batches, int64_t num_model_chunks);

/// Dispatch: GPipe (needs v == 1), 1F1B (v == 1) or interleaved 1F1B (v > 1).
std::vector<ScheduleStep> build_schedule(PipelineScheduleKind kind, int64_t pp_size, int64_t pp_rank,
                                         int64_t num_micro_batches, int64_t num_model_chunks);

/// Number of warm-up forwards the schedule of this rank runs before its first backward.
int64_t num_warmup_steps(PipelineScheduleKind kind, int64_t pp_size, int64_t pp_rank,
                         int64_t num_micro_batches, int64_t num_model_chunks);

/// Largest number of (micro-batch, chunk) forwards whose backward has not yet run, over the
/// schedule: the activation sets a rank holds at its peak.
int64_t max_in_flight(const std::vector<ScheduleStep>& schedule);

/// Megatron's bound on max_in_flight for this rank: GPipe m; 1F1B min(p - rank, m);
/// interleaved min((p - rank - 1) * 2 + (v - 1) * p + 1, m * v).
int64_t in_flight_bound(PipelineScheduleKind kind, int64_t pp_size, int64_t pp_rank,
                        int64_t num_micro_batches, int64_t num_model_chunks);

/// "F3.1" style text of a step (pass, micro-batch, chunk), for messages and printing.
std::string to_string(const ScheduleStep& s);

}  // namespace traintwin
