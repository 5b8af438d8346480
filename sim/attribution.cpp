#include "sim/attribution.hpp"

#include <algorithm>

namespace traintwin {

namespace {

/// The breakdown kind of a collective of group `g`: TP, CP and the MoE dispatch/combine (EP,
/// ETP, ETP x EP) sit inside the layers; every other group (DP, expert-DP, embedding, grad norm)
/// belongs to the gradient/parameter synchronisation around the optimizer step.
WaitedFor::Kind collective_kind(GroupKind g) {
  switch (g) {
    case GroupKind::kTp: return WaitedFor::Kind::kTpCollective;
    case GroupKind::kCp: return WaitedFor::Kind::kCpCollective;
    case GroupKind::kEp:
    case GroupKind::kEtp:
    case GroupKind::kEtpEp: return WaitedFor::Kind::kEpCollective;
    default: return WaitedFor::Kind::kSyncCollective;
  }
}

}  // namespace

WaitedFor waited_for(const Op& op, double comm_s, double sync_wait_s) {
  switch (op.kind) {
    case OpKind::kCompute: return {WaitedFor::Kind::kCompute, 0, 0};
    case OpKind::kCollective:
      // Megatron-LM's pipeline scatter/gather: the TP all-gather of a received chunk
      // (Role::kPipeline, core/rank_lowering.cpp p2p_batch) is part of the p2p transfer.
      if (op.role == Role::kPipeline) {
        // A TP member late to the gather was late receiving its own chunk: bubble, not sync
        // wait (attribute_gap splits a transfer's gap into its comm_s and the bubble).
        return {WaitedFor::Kind::kTransfer, std::max(0.0, comm_s), 0};
      }
      return {collective_kind(op.group), 0, std::max(0.0, sync_wait_s)};
    case OpKind::kSend:
    case OpKind::kRecv: return {WaitedFor::Kind::kTransfer, std::max(0.0, comm_s), 0};
    case OpKind::kHost: return {WaitedFor::Kind::kHost, 0, 0};
  }
  return {};
}

double late_member_wait_s(double gap_start_s, double gap_end_s, double arrival_s,
                          double start_s) {
  return std::max(0.0, std::min(start_s, gap_end_s) - std::max(arrival_s, gap_start_s));
}

void attribute_gap(TimeBreakdown& b, double gap_s, const WaitedFor& w) {
  if (!(gap_s > 0)) return;
  double exposed = gap_s;
  if (w.sync_wait_s > 0) {
    const double sync = std::min(w.sync_wait_s, gap_s);
    b.sync_wait_s += sync;
    exposed = gap_s - sync;
  }
  switch (w.kind) {
    case WaitedFor::Kind::kTpCollective: b.exposed_tp_s += exposed; return;
    case WaitedFor::Kind::kCpCollective: b.exposed_cp_s += exposed; return;
    case WaitedFor::Kind::kEpCollective: b.exposed_ep_s += exposed; return;
    case WaitedFor::Kind::kSyncCollective: b.exposed_dp_s += exposed; return;
    case WaitedFor::Kind::kTransfer: {
      exposed = std::min(gap_s, w.comm_s);
      b.exposed_pp_s += exposed;
      b.bubble_s += gap_s - exposed;
      return;
    }
    case WaitedFor::Kind::kHost: b.exposed_offload_s += exposed; return;
    case WaitedFor::Kind::kNothing:
    case WaitedFor::Kind::kCompute: b.bubble_s += gap_s; return;
  }
}

}  // namespace traintwin
