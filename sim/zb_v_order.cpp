// ZB-V's cost-aware order for the engines (sim/zb_v_order.hpp); the costs' probe,
// zb_v_profiled_costs, is the estimator's (sim/analytical.cpp).
#include "sim/zb_v_order.hpp"

namespace traintwin {

PipelineOrder zb_v_order(const Scenario& s, const ZbVPassCosts& c) {
  const int64_t p = s.parallel.pipeline_model_parallel_size;
  const ZbVPassMemory memory = zb_v_megatron_memory(p, s.model.hidden_size,
                                                    s.model.num_attention_heads,
                                                    s.model.seq_length);
  return PipelineOrder{zb_v_cost_aware_schedule(p, s.num_micro_batches(), c, memory).ranks};
}

Program build_replay_program(const Scenario& s, const TopologySpec& topo, const CostModel& costs,
                             const FabricEfficiency& eff, const std::vector<int64_t>& ranks) {
  if (s.parallel.pipeline_schedule != PipelineScheduleKind::kZbV) return build_program(s, ranks);
  return build_program(s, zb_v_order(s, zb_v_profiled_costs(s, topo, costs, eff)), ranks);
}

}  // namespace traintwin
