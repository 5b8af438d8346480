// An explicit pipeline order: each pipeline rank's schedule steps given by the caller in place of
// build_schedule's closed forms (core/schedule.hpp), for the Program lowering. ZB-V's cost-aware
// order (core/zb_v_cost_aware.hpp) is built from the engines' step costs, which core cannot
// time, so the engines make it (sim/zb_v_order.hpp) and lower their Program with it here; the
// estimator's pipeline plan takes the same order (sim/analytical_plan.hpp).
#pragma once

#include <cstdint>
#include <vector>

#include "core/program.hpp"
#include "core/schedule.hpp"

namespace traintwin {

/// ranks[r]: pipeline rank r's steps, in the order it runs them (ScheduleStep's chunks and
/// virtual stages as build_schedule's for the scenario's kind).
struct PipelineOrder {
  std::vector<std::vector<ScheduleStep>> ranks;
};

/// Checks that `order` is a valid order of `s`'s pipeline schedule: one list per pipeline rank
/// (pipeline_model_parallel_size), and on each rank every (micro-batch 0..m-1, chunk 0..v-1) has
/// exactly one forward, then one backward, then (a kind that splits_backward()) one W, in that
/// order, and nothing else. Throws InvalidArgument naming the rank and step that break it.
void check_pipeline_order(const Scenario& s, const PipelineOrder& order);

/// build_program (core/program.hpp) with each rank's schedule taken from
/// order.ranks[its pipeline rank] instead of build_schedule. Throws what check_pipeline_order
/// and build_program throw.
Program build_program(const Scenario& s, const PipelineOrder& order,
                      const std::vector<int64_t>& ranks = {}, StepScope scope = StepScope::kAll);

}  // namespace traintwin
