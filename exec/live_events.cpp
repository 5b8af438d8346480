// Live-run timeline events; see live_events.hpp.
#include "exec/live_events.hpp"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.hpp"
#include "traces/op_event.hpp"

namespace traintwin::exec {

TimelineEvent live_event(const Program& prog, int64_t rank, int64_t world_size, const OpSpan& span,
                         int64_t iteration) {
  const Op& op = prog.ranks.at(rank).ops[span.op];
  TimelineEvent e = op_event(prog, op, rank, op.peer, world_size, span.start_s, span.end_s);
  e.name = "it " + std::to_string(iteration) + " " + e.name;
  e.args["iteration"] = std::to_string(iteration);
  if (e.flow_id >= 0) e.flow_id = e.flow_id * 100003 + iteration;  // unique across iterations
  if (!span.kernel_s.empty()) {
    nlohmann::json kernels = nlohmann::json::array();
    for (size_t i = 0; i < span.kernel_s.size() && i < op.kernels.size(); ++i) {
      const Kernel& k = prog.kernels[op.kernels[i]];
      kernels.push_back({{"name", k.key.name},
                         {"shape", k.key.shape},
                         {"dtype", to_string(k.key.dtype)},
                         {"tp", k.key.tp},
                         {"flops", k.flops},
                         {"bytes", k.bytes},
                         // A reading below the clock's resolution (a CUDA event pair reads
                         // 0) as 1 ns, every cost-database row's floor: a duration is > 0.
                         {"us", std::max(span.kernel_s[i] * 1e6, 1e-3)}});
    }
    e.args["kernels"] = kernels.dump();
  }
  return e;
}

std::vector<double> live_op_seconds(const Program& prog, int64_t rank,
                                    const std::vector<OpSpan>& spans) {
  const RankProgram& rp = prog.ranks.at(rank);
  std::vector<double> seconds(rp.ops.size(), 0.0);
  for (const OpSpan& span : spans) {
    if (span.op >= seconds.size()) {
      throw InvalidArgument("live_op_seconds: a span of op " + std::to_string(span.op) +
                            ", but rank " + std::to_string(rank) + " has " +
                            std::to_string(seconds.size()) + " ops");
    }
    seconds[span.op] = span.end_s - span.start_s;
  }
  return seconds;
}

}  // namespace traintwin::exec
