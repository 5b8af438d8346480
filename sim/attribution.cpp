#include "sim/attribution.hpp"

#include <algorithm>

namespace traintwin {

WaitedFor waited_for(const Op& op, double transfer_s) {
  switch (op.kind) {
    case OpKind::kCompute: return {WaitedFor::Kind::kCompute, 0};
    case OpKind::kCollective:
      // TP, CP and the MoE dispatch/combine (EP, ETP, ETP x EP) sit inside the layers; every
      // other group (DP, expert-DP, embedding, grad norm) belongs to the gradient/parameter
      // synchronisation around the optimizer step.
      switch (op.group) {
        case GroupKind::kTp: return {WaitedFor::Kind::kTpCollective, 0};
        case GroupKind::kCp: return {WaitedFor::Kind::kCpCollective, 0};
        case GroupKind::kEp:
        case GroupKind::kEtp:
        case GroupKind::kEtpEp: return {WaitedFor::Kind::kEpCollective, 0};
        default: return {WaitedFor::Kind::kSyncCollective, 0};
      }
    case OpKind::kSend:
    case OpKind::kRecv: return {WaitedFor::Kind::kTransfer, std::max(0.0, transfer_s)};
  }
  return {};
}

void attribute_gap(TimeBreakdown& b, double gap_s, const WaitedFor& w) {
  if (!(gap_s > 0)) return;
  switch (w.kind) {
    case WaitedFor::Kind::kTpCollective: b.exposed_tp_s += gap_s; return;
    case WaitedFor::Kind::kCpCollective: b.exposed_cp_s += gap_s; return;
    case WaitedFor::Kind::kEpCollective: b.exposed_ep_s += gap_s; return;
    case WaitedFor::Kind::kSyncCollective: b.exposed_dp_s += gap_s; return;
    case WaitedFor::Kind::kTransfer: {
      const double exposed = std::min(gap_s, w.transfer_s);
      b.exposed_pp_s += exposed;
      b.bubble_s += gap_s - exposed;
      return;
    }
    case WaitedFor::Kind::kNothing:
    case WaitedFor::Kind::kCompute: b.bubble_s += gap_s; return;
  }
}

}  // namespace traintwin
