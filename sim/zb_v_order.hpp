// ZB-V's cost-aware order for the engines: pipeline_schedule zb-v runs the order the authors'
// V scheduler builds from profiled pass costs (zb_v_cost_aware_schedule, core/zb_v_cost_aware.hpp;
// sail-sg/zero-bubble-pipeline-parallelism builds it whenever its runtime runs ZB-V,
// --zero-bubble-v-schedule). traintwin's profile is the analytical estimator's probe
// (sim/analytical.hpp, step 2), so the replay (sim/replay.cpp simulate) and the estimator run the
// same order and agree without contention; build_replay_program lowers the replay's Program with
// it. Next: the Program lowering with that order
// (core/pipeline_order.hpp) and the estimator's pipeline plan (sim/analytical_plan.hpp).
#pragma once

#include <cstdint>
#include <vector>

#include "core/pipeline_order.hpp"
#include "core/scenario.hpp"
#include "core/zb_v_cost_aware.hpp"
#include "sim/collectives.hpp"
#include "sim/cost_model.hpp"
#include "topologies/topology.hpp"

namespace traintwin {

/// The pass costs the authors' runtime gives its V scheduler (megatron/core/pipeline_parallel/
/// zerobubble/runtime.py at commit 39f2c186, avg_then_mid: for each pass, each stage's average
/// time, then sorted(...)[p // 2], at least 1, in whole us), taken from the estimator's probe of
/// `s` on `topo` with `costs` and `eff` as estimate() sees them (one node kind's topology, the
/// scenario's what-if factors, StepScope::kBoundary): f, b, w each stage's F, B, W step
/// duration (its local dataflow: compute and exposed TP collectives) averaged over its two
/// chunks, truncated to whole us, then the upper median over the stages; comm the upper median
/// over r of the uncontended point-to-point time of one activation from stage r to r + 1
/// (uncontended_transfer_s, whole us; 0 with one stage). Stragglers, degraded links and ports
/// down are not seen (the probe times one symmetric rank per stage), nor is contention.
/// Throws InvalidArgument unless s's pipeline_schedule is zb-v, and what build_program and the
/// cost model throw (UnsupportedError for a stage whose ranks lie in two node groups).
ZbVPassCosts zb_v_profiled_costs(const Scenario& s, const TopologySpec& topo,
                                 const CostModel& costs, const FabricEfficiency& eff = {});

/// Every pipeline rank's ZB-V order for `s` with pass costs `c`: zb_v_cost_aware_schedule(p, m,
/// c, zb_v_megatron_memory(p, hidden_size, num_attention_heads, seq_length)), the authors'
/// default memory setup (2p forwards' activations at most). Throws what those throw.
PipelineOrder zb_v_order(const Scenario& s, const ZbVPassCosts& c);

/// The Program the replay runs for `s` on `topo` (simulate, a multi-job placement's jobs):
/// build_program(s, ranks), but for zb-v lowered with zb_v_order(s, zb_v_profiled_costs(s, topo,
/// costs, eff)). Throws what those throw.
Program build_replay_program(const Scenario& s, const TopologySpec& topo, const CostModel& costs,
                             const FabricEfficiency& eff, const std::vector<int64_t>& ranks);

}  // namespace traintwin
