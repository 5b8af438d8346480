#include "traces/op_event.hpp"

#include <string>

namespace traintwin {

TimelineEvent op_event(const Program& prog, const Op& op, int64_t rank, int64_t peer,
                       int64_t world_size, double start_s, double end_s) {
  TimelineEvent e;
  e.rank = rank;
  e.stream = to_string(op.stream);
  e.name = prog.label(op);
  e.start_s = start_s;
  e.end_s = end_s;
  switch (op.phase) {
    case Phase::kForward: e.category = "forward"; break;
    case Phase::kBackward: e.category = "backward"; break;
    case Phase::kWeightGrad: e.category = "wgrad"; break;
    case Phase::kRecompute: e.category = "recompute"; break;
    case Phase::kOptimizer: e.category = "optimizer"; break;
    default: e.category = "comm"; break;
  }
  // What the report and trace readers group by: data, not the label's text.
  e.args["phase"] = to_string(op.phase);
  if (op.micro_batch >= 0) e.args["micro_batch"] = std::to_string(op.micro_batch);
  if (op.model_chunk >= 0) e.args["model_chunk"] = std::to_string(op.model_chunk);
  if (op.kind != OpKind::kCompute) {
    e.category = "comm";
    e.args["bytes"] = std::to_string(op.bytes);
  }
  if (op.kind == OpKind::kHost) e.args["host"] = to_string(op.host);
  if (op.kind == OpKind::kCollective) {
    e.args["collective"] = to_string(op.collective);
    e.args["group"] = to_string(op.group);
  }
  if (op.kind == OpKind::kSend || op.kind == OpKind::kRecv) {
    const int64_t src = op.kind == OpKind::kSend ? rank : peer;
    const int64_t dst = op.kind == OpKind::kSend ? peer : rank;
    e.args["peer"] = std::to_string(peer);
    e.flow_id = (src * (world_size + 1) + dst) * 4096 * 64 + op.tag;
    e.flow_start = op.kind == OpKind::kSend;
  }
  return e;
}

}  // namespace traintwin
