// The analytical fast path: one training iteration's time in closed form, without event replay
// and without SimGrid, from the same Program and cost model as the replay (sim/replay.hpp), so
// that a sweep can rank thousands of configurations per second.
//
// The step-level model, estimate():
//      1. A *probe* Program is lowered with build_program() for the same scenario with the
//         fewest micro-batches the schedule allows (1, or PP with interleaving) and only the
//         representative ranks (TP = CP = DP = 0) of the distinct kinds of pipeline stage: the
//         first, the last, and one of each middle stage that differs from the others in its
//         layers per model chunk (an uneven split, core/pipeline_split.hpp) or in the node group
//         its ranks run in (a mixed cluster: each stage timed on its own GPU, NVLink and NICs)
//         or in the order its schedule runs its chunks (DualPipe's second half of the ranks:
//         runs_chunks_reversed, core/schedule.hpp); an even split on one kind of node has one
//         middle kind (DualPipe two). The ops of
//         one (pass, micro-batch, model chunk) are the same for every micro-batch, so the probe
//         holds every schedule step's content; of the steps it lowers only, per model chunk, the
//         first forward and the last backward (StepScope::kBoundary: with interleaving the
//         probe has PP micro-batches, and lowering all of them cost most of an estimate).
//      2. Each schedule step of the probe is run as a local dataflow (compute ops with their
//         cost-model durations, TP collectives with their closed forms, dependencies outside
//         the step ignored): its duration, its compute seconds and its exposed TP seconds. The
//         offsets of its ops are kept for the first forward (param all-gather waits) and the
//         last backward (DP bucket triggers) of every model chunk.
//      3. The real schedules (core/schedule.hpp, every stage, every micro-batch; ZB-V the
//         cost-aware order built from step 2's step times, sim/zb_v_order.hpp) run as a
//         step-level dataflow: Megatron's p2p batches as core/rank_lowering.cpp issues them (a batch
//         is posted when the previous step ends; the next step waits for all of its sends and
//         recvs; a transfer starts once both sides have posted it and lasts the closed-form
//         point-to-point time). Under a zero-bubble schedule (splits_backward()) a W step waits
//         for no batch and the F/B steps for the recvs only; the sends end the stage when they
//         end last. This is a list scheduling of O(stages x steps) events.
//         Under ZeRO-2/3 (Megatron-FSDP optim_grads, optim_grads_params) the DP stream is
//         followed as the FIFO queue it is: every step issues DP-stream ops (ZeRO-3's FSDP
//         parameter all-gathers, prefetched one unit ahead, and the gradient reduce-scatters
//         each backward triggers, counted in the step that triggers them), so a step's first
//         all-gather can wait behind the reduce-scatters of earlier steps. Each stage keeps when
//         its DP stream frees up; a step whose first DP-stream op would start earlier than that
//         is run again as a local dataflow from the stream's state (O(its ops)), the others as
//         timed in step 2. A step's first DP-stream op that waits for nothing in the step
//         (a forward's first gather) waits in the Program only for the previous compute op, the
//         recvs of the batches the step waits for and the stream, not for the step's sends or
//         pending TP collectives: it may start before the step. Past a step's saturation point (the stream so late that every op it
//         reaches waits for it) its run is the one kept there, shifted (O(1)). Only the last
//         micro-batch's backward issues HSDP's replica all-reduces.
//      4. The ops outside the steps (parameter all-gathers, DP gradient buckets, LayerNorm and
//         embedding gradient all-reduces, grad norm, optimizer step) run as an op-level
//         dataflow per stage, their dependencies on step ops resolved through the step
//         offsets of step 2; collectives spanning stages (embedding, grad norm) wait for all
//         their stages.
// (An op-level dataflow over the full Program of every stage would need no assumption about
// steps, but build_program() alone takes ~0.5 s for GPT-3 175B with 192 micro-batches.)
//
// Where it differs from the replay, and why:
//  - No link contention. Collectives and p2p transfers take their uncontended closed forms
//    (uncontended_time_s / uncontended_transfer_s, sim/collectives.hpp). The replay with
//    SimulationOptions::link_contention = false uses the very same rule and then agrees with the
//    estimate exactly (tests/sim/analytical_test.cpp); with contention it shares links max-min
//    between concurrent flows (DP buckets of several stages on one rail, p2p beside DP traffic)
//    and can only be slower (0-2.6 % on the shipped scenarios).
//  - Symmetry: the ranks of one stage are taken to run in lockstep (the replay shows it: they
//    run the same ops at the same times up to contention), so collectives inside one stage
//    (TP, DP) start when the representative arrives.
//  - It assumes that a step's duration does not depend on its
//    micro-batch (true of the lowering: only the first forward and the last backward of a
//    chunk differ, by their waits and triggers, which it keeps; under ZeRO-2/3 a step's
//    duration also depends on its DP stream's backlog, which it follows), and that a step's
//    compute chain shifts as a whole when its start is delayed by a parameter all-gather.
//  - ZeRO-3 with interleaving, GPT-3 175B (PP 8 x VPP 12, 128 GPUs) with the roofline costs:
//    the iteration time is the replay's, but the critical rank's waits split differently (the
//    replay has ~2 s of them in the bubble, the estimate in exposed DP; their sum agrees; with
//    the measured H100 costs every category agrees). Not yet explained.
// Compute durations come from the timing layer (sim/timed_program.hpp) and the breakdown from its
// attribution (sim/attribution.hpp), as in the replay: each idle gap of the compute stream goes
// to the dependency that ended last — TP collective, p2p transfer (the transfer's duration, the
// rest is bubble), DP/embedding/grad-norm collective, or bubble.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/program.hpp"
#include "core/scenario.hpp"
#include "sim/collectives.hpp"
#include "sim/cost_model.hpp"
#include "sim/iteration_metrics.hpp"
#include "sim/replay.hpp"
#include "topologies/topology.hpp"

namespace traintwin {

/// What estimate() reuses from one call to the next: a sweep estimates hundreds of layouts that
/// share their pipeline schedule (rows that differ only in recomputation, SP or the distributed
/// optimizer) or their collectives. It holds
///  - per (schedule kind, PP, number of micro-batches, VPP, and for ZB-V the pass costs and
///    memory model its cost-aware order is made from): every stage's schedule
///    (build_schedule) and Megatron's p2p batches around its steps (the 16 most recent);
///  - per collective (op, bytes, members, s.cluster.collective_algorithm, the what-if NVLink and
///    IB bandwidth factors): its uncontended time (plan_collective, uncontended_time_s);
///  - per p2p transfer (source and destination rank, bytes, the same factors): its uncontended
///    time (uncontended_transfer_s).
/// Each entry is a pure function of its key, so an estimate with a cache is bit-identical to one
/// without (tests/sim/analytical_probe_test.cpp). One cache serves one topology and one
/// FabricEfficiency (the objects estimate() is given, by address): estimate() throws
/// InvalidArgument when a cache is used with others. Safe to share between threads (a mutex).
class EstimateCache {
 public:
  EstimateCache();
  ~EstimateCache();
  EstimateCache(const EstimateCache&) = delete;
  EstimateCache& operator=(const EstimateCache&) = delete;

  struct Impl;  ///< defined in sim/analytical.cpp
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

/// Step-level estimate of one iteration (IterationMetrics::ops: the probe's ops) of `s` on `topo`
/// with `costs` (see the file comment); a job inside the first node group of a mixed cluster on
/// that group's GPU, NVLink domain and NICs; a job across node groups (job_on_one_node_kind()
/// false) with each pipeline stage on its own node group's GPU (the timing layer's JobGpus),
/// and each collective and p2p transfer at its nodes' rates, as the replay times them (the two
/// agree without contention: tests/sim/analytical_test.cpp). Collective algorithms as the replay chooses them
/// (s.cluster.collective_algorithm, else the tuner). Throws what build_program() throws
/// (UnsupportedError for CP > 1, ...), UnsupportedError for a straggler, a degraded link or a
/// pipeline stage whose ranks lie in two node groups (its ranks would not run in lockstep),
/// CostModelError
/// from the cost model, ConfigError for a forced algorithm a group cannot run, and Error when
/// the schedule cannot complete (a p2p or collective never matched).
/// `probe_steps`: the steps of the probe that are lowered; StepScope::kAll (every micro-batch of
/// the probe) gives the same result, slower — the reference the tests compare with.
/// `cache`: what an earlier call with the same `topo` and `eff` computed (EstimateCache); null:
/// nothing reused. The result does not depend on it.
IterationMetrics estimate(const Scenario& s, const TopologySpec& topo, const CostModel& costs,
                          const FabricEfficiency& eff = {},
                          StepScope probe_steps = StepScope::kBoundary,
                          EstimateCache* cache = nullptr);

}  // namespace traintwin
