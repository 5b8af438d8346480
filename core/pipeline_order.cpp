// Explicit pipeline orders (core/pipeline_order.hpp): their check; the lowering with one is
// build_program's (core/program.cpp).
#include "core/pipeline_order.hpp"

#include <string>

#include "core/error.hpp"

namespace traintwin {

void check_pipeline_order(const Scenario& s, const PipelineOrder& order) {
  const int64_t p = s.parallel.pipeline_model_parallel_size;
  const int64_t v = s.parallel.virtual_pipeline_model_parallel_size;
  const int64_t m = s.num_micro_batches();
  const bool split = splits_backward(s.parallel.pipeline_schedule);
  if (static_cast<int64_t>(order.ranks.size()) != p) {
    throw InvalidArgument("pipeline order: " + std::to_string(order.ranks.size()) +
                          " ranks' orders for pipeline_model_parallel_size = " +
                          std::to_string(p));
  }
  for (int64_t r = 0; r < p; ++r) {
    // Per (micro-batch, chunk): the passes run so far (0 none, 1 F, 2 F B, 3 F B W).
    std::vector<int> done(static_cast<size_t>(m * v), 0);
    for (const ScheduleStep& st : order.ranks[static_cast<size_t>(r)]) {
      const int want = st.pass == Pass::kForward ? 0 : st.pass == Pass::kBackward ? 1 : 2;
      const bool in_range = st.micro_batch >= 0 && st.micro_batch < m && st.model_chunk >= 0 &&
                            st.model_chunk < v && (split || st.pass != Pass::kWeightGrad);
      if (!in_range || done[static_cast<size_t>(st.micro_batch * v + st.model_chunk)] != want) {
        throw InvalidArgument("pipeline order of rank " + std::to_string(r) + ": step " +
                              to_string(st) + " is outside " + std::to_string(m) +
                              " micro-batches x " + std::to_string(v) +
                              " chunks, repeated or before its predecessor pass");
      }
      ++done[static_cast<size_t>(st.micro_batch * v + st.model_chunk)];
    }
    for (int d : done) {
      if (d != (split ? 3 : 2)) {
        throw InvalidArgument("pipeline order of rank " + std::to_string(r) +
                              ": a (micro-batch, chunk) misses a pass");
      }
    }
  }
}

}  // namespace traintwin
