// Pipeline schedules as pure functions: the ordered forward/backward passes one pipeline rank
// runs in one iteration. No runtime, no communication: the Program lowering adds those.
//
// Sources: GPipe (Huang et al. 2019); 1F1B = PipeDream-Flush (Narayanan et al. 2021), with
// Megatron-LM's warm-up of (p - rank - 1) forwards; interleaved 1F1B as in Megatron-LM
// (megatron/core/pipeline_parallel/schedules.py, forward_backward_pipelining_with_interleaving,
// with the default microbatch_group_size_per_vp_stage = p); ZB-H1 and ZB-H2 as the handcrafted
// schedules of Qi et al., "Zero Bubble (Almost) Pipeline Parallelism", ICLR 2024, sec. 3.1,
// Figure 3 and Table 2; ZB-V as the V-shaped schedule of the same paper's arXiv version
// (arXiv:2401.10241 v2, sec. 6, "memory efficient zero bubble schedule"); DualPipe and DualPipeV
// in the op order of deepseek-ai/DualPipe (dualpipe.py, dualpipev.py).
//
// Notation: p = pp_size, r = pp_rank, m = num_micro_batches, v = num_model_chunks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/scenario.hpp"

namespace traintwin {

/// Forward or backward pass of one (micro-batch, model chunk). Under a schedule that splits the
/// backward (splits_backward()), kBackward is the input gradient alone (B: dgrad GEMMs,
/// attention backward, norms, the TP collectives on the activation path) and kWeightGrad the
/// weight gradient (W: the wgrad GEMMs); under the others kBackward is the whole backward (B with
/// W right after it) and no step is kWeightGrad.
enum class Pass { kForward, kBackward, kWeightGrad };

/// One step of a schedule: pass `pass` of micro-batch `micro_batch` (0..m-1) through model chunk
/// `model_chunk` (0..v-1) of this pipeline rank. Chunk c of rank r is virtual stage c*p + r
/// (ZB-V: r for chunk 0, 2p - 1 - r for chunk 1; virtual_stage_of()); a micro-batch's forward
/// runs through virtual stages 0..p*v-1 in order, its backward in reverse.
struct ScheduleStep {
  Pass pass;
  int64_t micro_batch;
  int64_t model_chunk;
  bool operator==(const ScheduleStep&) const = default;
};

/// Which of the three phases of 1F1B a step belongs to (GPipe: all forwards are warm-up,
/// all backwards cool-down).
enum class SchedulePhase { kWarmup, kSteady, kCooldown };

/// GPipe: all m forwards (micro-batches 0..m-1), then all m backwards in reverse micro-batch
/// order (m-1..0, as autograd runs them); one model chunk.
/// Throws InvalidArgument unless pp_size >= 1, 0 <= pp_rank < pp_size, m >= 1.
std::vector<ScheduleStep> gpipe_schedule(int64_t pp_size, int64_t pp_rank,
                                         int64_t num_micro_batches);

/// 1F1B (PipeDream-Flush): min(p - rank - 1, m) warm-up forwards, then for each remaining
/// micro-batch one forward followed by one backward, then the remaining backwards. Backwards run
/// in micro-batch order 0..m-1. Same argument checks as GPipe.
std::vector<ScheduleStep> one_f_one_b_schedule(int64_t pp_size, int64_t pp_rank,
                                               int64_t num_micro_batches);

/// Megatron's interleaved 1F1B with v = num_model_chunks > 1 over m*v virtual micro-batches:
/// min((p - rank - 1) * 2 + (v - 1) * p, m * v) warm-up forwards, steady 1F1B (forward of
/// virtual micro-batch k + warm-up, then backward of k), cool-down backwards. Virtual micro-batch
/// k maps to model chunk (k mod (p*v)) / p (backward: v - 1 - that) and micro-batch
/// (k / (p*v)) * p + k mod p.
///
/// Follows current Megatron, which since late 2024 has no special case for m == p (older
/// releases forced all m*v forwards into the warm-up when m == p); with m == p the formula above
/// already gives every rank with 2 * rank <= p - 2 an all-forward warm-up.
/// Throws InvalidArgument unless pp_size >= 1, 0 <= pp_rank < pp_size, m >= 1, v >= 2 and
/// m % p == 0 (Megatron's rule for its default micro-batch group size of p).
std::vector<ScheduleStep> interleaved_1f1b_schedule(int64_t pp_size, int64_t pp_rank,
                                                    int64_t num_micro_batches,
                                                    int64_t num_model_chunks);

/// ZB-H1 (Qi et al., ICLR 2024, sec. 3.1 and Figure 3 top): the forwards and input-gradient
/// backwards (B) of 1F1B — n = min(p - rank, m) forwards, then B_j followed by F_{n+j} — with
/// each weight gradient W_j delayed by d = rank B steps: W_{j-d} runs right after B_j, the last
/// min(d, m) W's after the last B. Rank r holds min(p, m) activation sets at its peak (an
/// activation set lives from F_j to W_j), 1F1B's first-stage peak; with T_F, T_B, T_W per
/// stage and no communication its bubble is (p-1)(T_F + T_B - T_W) (Table 2; valid when
/// T_W <= T_F, checked by tests/core/zero_bubble_test.cpp). Throws as GPipe (any m >= 1 is
/// well defined; the scenario rules ask m >= p).
std::vector<ScheduleStep> zb_h1_schedule(int64_t pp_size, int64_t pp_rank,
                                         int64_t num_micro_batches);

/// ZB-H2 (Qi et al., ICLR 2024, sec. 3.1 and Figure 3 bottom): as ZB-H1 with n = min(2p - 1 -
/// 2 rank, m) forwards before the first B (the extra forwards fill the warm-up bubble) and W
/// delayed by d = 2 rank B steps (the W's reordered to the tail), so that every rank holds up to
/// 2p - 1 activation sets and, measured from each stage's first op (the paper bypasses the
/// optimizer's synchronization, sec. 4), the bubble is (p-1)(T_F + T_B - 2 T_W) (Table 2):
/// none when T_F + T_B = 2 T_W. Throws as GPipe.
std::vector<ScheduleStep> zb_h2_schedule(int64_t pp_size, int64_t pp_rank,
                                         int64_t num_micro_batches);

/// ZB-V (Qi et al., arXiv:2401.10241 v2, sec. 6 and its V-schedule figure): 2p model chunks (virtual
/// stages) of which rank r holds two, chunk 0 = stage r and chunk 1 = stage 2p - 1 - r, so a
/// micro-batch's forward runs down the ranks through the chunks 0 and back up through the chunks
/// 1 (the loss on rank 0), its backward the other way. Rank r's order:
///   warm-up: 2p - 1 - 2r forwards of chunk 0, then r pairs (F chunk 1, F chunk 0), then one
///     F chunk 1: 2p forwards, 2p - 1 - r of chunk 0 and r + 1 of chunk 1;
///   the backwards (B) in the order: chunk 1 of micro-batches 0..p-r-1, then alternately chunk 0
///     of 0, 1, ... and chunk 1 of p-r, p-r+1, ...;
///   the remaining forwards in the order: chunk 1 of the next p-1-r micro-batches, then
///     alternately chunk 0 and chunk 1;
///   steady: each B followed by its W, then the next forward — once the chunk-0 forwards are all
///     placed, only after a chunk-0 B (a chunk-1 B's W is followed directly by the next B);
///   cool-down (no forward left): the remaining B's with each W delayed by d = 2r + 1 B steps
///     (after the k-th B the W of the (k-d)-th), then the W's still owed.
/// This closed form is this module's; with T_F = T_B = T_W and no communication it is the order
/// the authors' V scheduler (sail-sg/zero-bubble-pipeline-parallelism, scheduler/zbv.py) emits,
/// checked for p = 2..16 and 2p <= m <= 5p when it was written, and every rank runs from its first
/// op to its last without a gap (the paper's zero bubble for ZB-V) while holding at most 2p
/// chunk activation sets (p M_B, 1F1B's peak: each chunk is half a stage). The authors' runtime
/// builds its order from the profiled T_F, T_B, T_W and T_comm instead (zbv.py's greedy W and
/// warm-up placement, the default --zero-bubble-v-schedule-mem-setup zb; in traintwin
/// zb_v_cost_aware_schedule, core/zb_v_cost_aware.hpp), so with unequal costs and communication
/// the two differ: on the arXiv version's Table 8 costs this order idles 0.2-1.0e-3 less than the
/// cost-aware one on 24 and 32 stages and 1.0-2.3e-3 more on 16
/// (tests/core/zero_bubble_table9_test.cpp). build_schedule and the executor run this order for
/// zb-v; simulate and estimate run the cost-aware one (sim/zb_v_order.hpp).
/// Throws InvalidArgument as GPipe, and unless m >= 2p (the warm-up's 2p forwards).
std::vector<ScheduleStep> zb_v_schedule(int64_t pp_size, int64_t pp_rank,
                                        int64_t num_micro_batches);

/// DualPipeV (deepseek-ai/DualPipe, dualpipev.py, DualPipeV.step; DeepSeek-V3 Technical Report
/// sec. 3.2.1 for DualPipe, of which DualPipeV is the "cut-in-half" V of Sea AI Lab): 2p stages
/// in ZB-V's V placement (chunk 0 = stage r, chunk 1 = stage 2p - 1 - r, the loss on rank 0).
/// Rank r runs, each chunk's forwards and backwards in micro-batch order and the deferred W's
/// first in, first out:
///   1. 2(p - r - 1) forwards of chunk 0;
///   2. r + 1 times: F chunk 0, F chunk 1;
///   3. p - r - 1 times: B chunk 1 (W deferred), one deferred W, F chunk 1;
///   4. m - 2p + r + 1 times: F&B (F chunk 0 with B chunk 1), F&B (F chunk 1 with B chunk 0);
///   5. p - r - 1 times: B chunk 1, F&B (F chunk 1 with B chunk 0);
///   6. r + 1 times: B chunk 1, B chunk 0, deferring their W's from the middle iteration on
///      (from B chunk 1 of iteration floor((r + 1)/2) when r is odd, from B chunk 0 of it when even);
///   7. p - r - 1 times: one deferred W, B chunk 0 (W deferred);
///   8. r + 1 deferred W's.
/// An F&B step is written as its forward followed by its whole backward (B then W: dualpipev.py
/// runs F&B's backward without deferring W); what the overlap hides is the F&B's communication
/// behind the other half's compute, which the engines' separate streams give. A backward whose
/// W is not deferred is B followed at once by its W. With T_F = T_B = T_W, no communication and
/// F&B as its two passes one after the other, rank r idles p - 1 - r units between its first
/// and last op (tests/core/dualpipev_test.cpp) and holds at most 2p + 1 chunk activation sets
/// (the DualPipe README's PP + 1 with PP = 2p stages). Throws as GPipe, and unless m >= 2p.
std::vector<ScheduleStep> dualpipev_schedule(int64_t pp_size, int64_t pp_rank,
                                             int64_t num_micro_batches);

/// DualPipe (DeepSeek-V3 Technical Report sec. 3.2.1, Figure 5 and Table 2; deepseek-ai/DualPipe
/// dualpipe.py, DualPipe.step): p ranks (p even) and p model stages, the m micro-batches in two
/// halves fed from both ends: micro-batches 0..m/2-1 in the forward direction (stage s on rank s,
/// the loss on rank p - 1), m/2..m-1 in the reverse direction (stage s on rank p - 1 - s, the loss
/// on rank 0). Rank r holds two parameter copies as its model chunks: chunk 0 = stage r of the
/// forward direction (virtual stage r), chunk 1 = stage p - 1 - r of the reverse direction
/// (virtual stage 2p - 1 - r; virtual stages p..2p-1 are the reverse direction's stages 0..p-1,
/// bidirectional()), so a step's chunk is its micro-batch's direction.
/// Rank r runs DualPipeV's order (dualpipev_schedule) for p/2 ranks, rank h = min(r, p - 1 - r)
/// and m/2 micro-batches per chunk: dualpipe.py's steps 1-8 are dualpipev.py's with
/// num_half_ranks and half_rank in place of num_ranks and rank. A phase is a direction as
/// dualpipe.py maps it (phase XOR [r >= p/2]: on the second half of the ranks phase 0 is the
/// reverse direction), and a phase's k-th micro-batch is micro-batch k of the forward direction
/// or m/2 + k of the reverse one. F&B pairs, the deferred W's (first in, first out) and the W
/// right after a backward that does not defer it are written as in dualpipev_schedule.
/// With T_F = T_B = T_W and no communication its timing is DualPipeV's on p/2 ranks (ranks r and
/// p - 1 - r both rank h's: the two directions mirror each other), so rank r idles p/2 - 1 - h
/// units between its first and last op (tests/core/dualpipe_test.cpp) and holds at most p + 1
/// chunk activation sets (the DualPipe README's PP + 1; each chunk a whole stage).
/// Throws InvalidArgument as GPipe, and unless p is even and m is even and >= 2p (dualpipe.py's
/// asserts: num_ranks % 2 == 0, num_chunks % 2 == 0 and num_chunks >= num_ranks * 2).
std::vector<ScheduleStep> dualpipe_schedule(int64_t pp_size, int64_t pp_rank,
                                            int64_t num_micro_batches);

/// Whether `kind` places two model chunks per rank in a V (chunk 0 = virtual stage r, chunk 1 =
/// virtual stage 2p - 1 - r): ZB-V and DualPipeV, and DualPipe, whose virtual stages p..2p-1
/// are the reverse direction's copies of stages 0..p-1 (bidirectional()).
bool v_shaped(PipelineScheduleKind kind);

/// Whether `kind` feeds micro-batches from both ends of the pipeline (DualPipe): its 2p virtual
/// stages are two pipelines of p stages each, the forward direction's 0..p-1 (virtual stage s on
/// rank s) and the reverse direction's p..2p-1 (virtual stage p + s is stage s, on rank p - 1 - s);
/// a micro-batch runs through one of them, so virtual stages p - 1 and 2p - 1 compute the loss
/// and 0 and p take the embedding.
bool bidirectional(PipelineScheduleKind kind);

/// Whether pipeline rank `pp_rank` of `pp_size` runs its two model chunks in the other order:
/// chunk 1 (its reverse-direction copy) is the chunk of its first forward, and chunk 1's last
/// backward (W) comes after chunk 0's, so the DP buckets and parameter gathers those steps
/// trigger come in the other order too. True on DualPipe's second half of the ranks (r >= p/2),
/// where dualpipe.py's phase 0 is the reverse direction (is_in_second_half); false everywhere
/// else (every rank of every other kind starts with chunk 0 and ends with chunk 0's backward).
/// No argument checks.
bool runs_chunks_reversed(PipelineScheduleKind kind, int64_t pp_size, int64_t pp_rank);

/// Whether the schedules of `kind` place the weight gradients as their own steps
/// (Pass::kWeightGrad): ZB-H1, ZB-H2, ZB-V, DualPipe and DualPipeV.
bool splits_backward(PipelineScheduleKind kind);

/// The number of model chunks per rank a kind needs, or 0 when it takes any (1F1B: 1 or
/// interleaved): 1 for GPipe, ZB-H1 and ZB-H2, 2 for ZB-V, DualPipe and DualPipeV.
int64_t required_model_chunks(PipelineScheduleKind kind);

/// The virtual stage (0..p*v-1) of model chunk `model_chunk` of pipeline rank `pp_rank`:
/// chunk * p + rank (Megatron's interleaved placement), but for the v_shaped() kinds (ZB-V,
/// DualPipe, DualPipeV) the V placement: rank for chunk 0, 2p - 1 - rank for chunk 1. No argument
/// checks (callers pass valid ranks and chunks).
int64_t virtual_stage_of(PipelineScheduleKind kind, int64_t pp_size, int64_t pp_rank,
                         int64_t model_chunk);

/// Whether virtual stage `vstage` (of p x num_model_chunks) runs the embedding: the first
/// virtual stage 0, and under a bidirectional() kind (DualPipe) also p, the reverse direction's
/// first stage (on rank p - 1). No argument checks.
bool takes_embedding(PipelineScheduleKind kind, int64_t pp_size, int64_t num_model_chunks,
                     int64_t vstage);

/// Whether virtual stage `vstage` (of p x num_model_chunks) runs the final norm, the LM head and
/// the loss: the last virtual stage p v - 1, and under a bidirectional() kind (DualPipe) also
/// p - 1, the forward direction's last stage (on rank p - 1). No argument checks.
bool computes_loss(PipelineScheduleKind kind, int64_t pp_size, int64_t num_model_chunks,
                   int64_t vstage);

/// The pipeline rank that holds virtual stage `vstage` (virtual_stage_of's inverse, rank part):
/// vstage mod p; for the v_shaped() kinds vstage for vstage < p, else 2p - 1 - vstage.
int64_t rank_of_virtual_stage(PipelineScheduleKind kind, int64_t pp_size, int64_t vstage);

/// Dispatch: GPipe (needs v == 1), 1F1B (v == 1) or interleaved 1F1B (kind 1F1B with v > 1),
/// ZB-H1, ZB-H2 (v == 1), ZB-V, DualPipe and DualPipeV (v == 2).
/// Throws InvalidArgument for GPipe, ZB-H1 or ZB-H2 with v != 1, ZB-V, DualPipe or DualPipeV with
/// v != 2, for v < 1,
/// and whatever the chosen schedule throws.
std::vector<ScheduleStep> build_schedule(PipelineScheduleKind kind, int64_t pp_size,
                                         int64_t pp_rank, int64_t num_micro_batches,
                                         int64_t num_model_chunks);

/// Number of warm-up forwards the schedule of this rank runs before its first backward
/// (GPipe: m; 1F1B: min(p - rank - 1, m); interleaved: see interleaved_1f1b_schedule; ZB-H1 and
/// ZB-H2: min(n - 1, m) with n their forwards before the first B, as 1F1B counts them; ZB-V and
/// DualPipeV: 2p - 1, their 2p warm-up forwards counted the same way; DualPipe: p - 1, its p).
/// Same argument checks as build_schedule.
int64_t num_warmup_steps(PipelineScheduleKind kind, int64_t pp_size, int64_t pp_rank,
                         int64_t num_micro_batches, int64_t num_model_chunks);

/// Largest number of (micro-batch, chunk) forwards whose backward has not yet run, over the
/// schedule: the activation sets a rank holds at its peak. In a schedule with kWeightGrad steps
/// a set is held until its W (the weight gradient reads the layer inputs the forward saved),
/// else until its backward. Throws InvalidArgument when a backward (or W) precedes its forward
/// (more of them than forwards so far).
int64_t max_in_flight(const std::vector<ScheduleStep>& schedule);

/// The same peak weighted by the chunks' sizes: the largest sum, over the (micro-batch, chunk)
/// forwards whose backward has not yet run, of `weight_of_chunk[chunk]` (e.g. the chunk's
/// transformer layers, which differ between chunks under an uneven pipeline split). With all
/// weights 1 it is max_in_flight(). Throws InvalidArgument as max_in_flight, and for a chunk
/// outside weight_of_chunk or a negative weight.
int64_t max_in_flight_weighted(const std::vector<ScheduleStep>& schedule,
                               const std::vector<int64_t>& weight_of_chunk);

/// max_in_flight_weighted(build_schedule(kind, pp_size, pp_rank, num_micro_batches,
/// num_model_chunks), weight_of_chunk) without building the schedule, in O(p v^2) steps whatever
/// the number of micro-batches (the memory model asks it for every stage of every configuration
/// of a sweep). Why it is exact: the warm-up's forwards only add (its peak is at its end); in the
/// steady phase the peak is after a forward, when the virtual forwards 0..W+i and backwards
/// 0..i-1 have run (W warm-up forwards), and how many of those fall in each chunk changes by
/// exactly p when both indices grow by p x v (Megatron's groups of p micro-batches per chunk), so
/// p x v consecutive steady steps hold every value; the cool-down only subtracts. The
/// zero-bubble kinds (one chunk) build their schedule and take max_in_flight_weighted (O(m)).
/// Throws as build_schedule and as max_in_flight_weighted (a weight for each chunk, none
/// negative).
int64_t peak_in_flight_weighted(PipelineScheduleKind kind, int64_t pp_size, int64_t pp_rank,
                                int64_t num_micro_batches, int64_t num_model_chunks,
                                const std::vector<int64_t>& weight_of_chunk);

/// Megatron's bound on max_in_flight for this rank: GPipe m; 1F1B min(p - rank, m);
/// interleaved min((p - rank - 1) * 2 + (v - 1) * p + 1, m * v); ZB-H1 min(p, m) and ZB-H2
/// min(2p - 1, m) (Qi et al. Table 2: p M_B and (2p - 1) M_B); ZB-V 2p chunk activation sets
/// (p M_B, each chunk half a stage; arXiv:2401.10241 v2 sec. 6); DualPipeV 2p + 1 chunk sets on
/// every rank (the DualPipe README's PP + 1 activations per device, PP = 2p stages); DualPipe
/// p + 1 (its PP + 1 with PP = p, each chunk a whole stage). The
/// schedules above reach it exactly. Same argument checks as build_schedule.
int64_t in_flight_bound(PipelineScheduleKind kind, int64_t pp_size, int64_t pp_rank,
                        int64_t num_micro_batches, int64_t num_model_chunks);

/// Ideal pipeline bubble fraction, (time a stage idles) / (iteration time), with equal forward
/// and backward costs and no communication (Narayanan et al. SC'21, sec. 2.2):
/// (p-1)/(m+p-1) for GPipe and 1F1B, (p-1)/(v*m+p-1) for interleaved 1F1B (v = model chunks).
/// Zero-bubble kinds with T_F = T_B = T_W (Qi et al. Table 2): ZB-H1 (p-1)/(3m+p-1) (a bubble
/// of (p-1) T_F over 3m T_F of work), ZB-H2 and ZB-V 0 (measured from each stage's start, as the
/// paper); DualPipeV (p-1)/(6m + p - 1): the first rank's idle time over its span when each pass
/// of a chunk takes one unit and an F&B is its forward and its backward one after the other
/// (tests/core/dualpipev_test.cpp's event model; the DualPipe README's (PP/2 - 1)(F&B + B - 3W)
/// is 2(p - 1) there: it counts the F&B as one overlapped step that waits for both its inputs);
/// DualPipe (p/2 - 1)/(3m + p/2 - 1), DualPipeV's on p/2 ranks with m/2 micro-batches per chunk
/// (dualpipe_schedule).
/// Throws InvalidArgument for sizes < 1.
double ideal_bubble_fraction(PipelineScheduleKind kind, int64_t pp_size, int64_t num_micro_batches,
                             int64_t num_model_chunks);

/// "F3.1" style text of a step: 'F', 'B' or 'W', micro-batch, '.', model chunk (always printed,
/// also for a single chunk: "B0.0"). For messages and printing.
std::string to_string(const ScheduleStep& s);

// ---- transfers between virtual stages ------------------------------------------------------
// The one rule of the pipeline's point-to-point traffic, which the Program lowering
// (core/rank_lowering.cpp), the analytical estimator (sim/analytical.cpp) and the executor
// (exec/executor.cpp) all read here: a forward's output goes from virtual stage vs to vs + 1, a
// backward's input gradient from vs to vs - 1, and each transfer is named by one tag.

/// One activation (forward) or activation-gradient (backward) transfer of a micro-batch, named by
/// the virtual stage that sends it. The receiver is sender_vstage + 1 (forward) or - 1 (backward).
struct PipelineTransfer {
  int64_t micro_batch = 0;
  int64_t sender_vstage = 0;
  Pass pass = Pass::kForward;
  int64_t receiver_vstage() const {
    return sender_vstage + (pass == Pass::kForward ? 1 : -1);
  }
  bool operator==(const PipelineTransfer&) const = default;
};

/// The tag of a transfer among `vstages` = p x v virtual stages:
///   (micro_batch x vstages + sender_vstage) x 2 + (0 forward | 1 backward),
/// unique per (micro-batch, sender, pass), so a send and its recv match by tag (MPI). Throws
/// InvalidArgument for vstages < 1, a sender outside [0, vstages) or a negative micro-batch.
int64_t pipeline_tag(const PipelineTransfer& t, int64_t vstages);

/// The transfer a tag names (pipeline_tag's inverse). Throws InvalidArgument for a negative tag
/// or vstages < 1.
PipelineTransfer read_pipeline_tag(int64_t tag, int64_t vstages);

/// The transfer that brings `step` of virtual stage `vstage` (of `vstages`) its input: from
/// vstage - 1 for a forward, from vstage + 1 for a backward; none for the first stage's forward
/// and the last stage's backward (the loss is computed there), and none for a W step (it reads
/// what its B left on the rank).
std::optional<PipelineTransfer> step_input(const ScheduleStep& step, int64_t vstage,
                                           int64_t vstages);

/// The transfer that carries `step`'s output onward: to vstage + 1 after a forward, to
/// vstage - 1 after a backward; none for the last stage's forward and the first stage's
/// backward, and none for a W step.
std::optional<PipelineTransfer> step_output(const ScheduleStep& step, int64_t vstage,
                                            int64_t vstages);

/// The transfers of pipeline rank `pp_rank`'s `step` that cross ranks, as the lowering and the
/// estimator issue them: step_input / step_output of the step's chunk as a virtual stage
/// (virtual_stage_of; p x model_chunks stages), none where the other stage is on the same rank
/// (ZB-V's stages p - 1 and p, both on rank p - 1). Under a bidirectional() kind each direction
/// is a pipeline of its own: step_input / step_output within virtual stages 0..p-1 or p..2p-1
/// (virtual stage p's forward has no input, p - 1's forward no output: DualPipe's middle ranks
/// p/2 - 1 and p/2 exchange the forward direction's activations across ranks, where DualPipeV
/// keeps them on one). Same argument rules as those.
std::optional<PipelineTransfer> rank_step_input(PipelineScheduleKind kind, int64_t pp_size,
                                                int64_t pp_rank, int64_t model_chunks,
                                                const ScheduleStep& step);
std::optional<PipelineTransfer> rank_step_output(PipelineScheduleKind kind, int64_t pp_size,
                                                 int64_t pp_rank, int64_t model_chunks,
                                                 const ScheduleStep& step);

}  // namespace traintwin
