// Weighted max-min sharing of link bandwidth among flows, as SimGrid's CM02 network model solves
// it: the closed form that sim/flow_network.hpp uses for a group of flows whose links carry no
// other flow. The replay's flows reach it through FlowNetwork; nothing else calls it.
//
// The rule (SimGrid 3.32 kernel/lmm/maxmin.cpp with network_cm02.cpp's variables): a flow whose
// latency is paid is a variable of sharing penalty w = its route latency, consumption 1 on every
// link of its route and bound b = its route's slowest link; a flow still paying its latency takes
// no bandwidth. Progressive filling, weighted (Bertsekas & Gallager, Data Networks, 2nd ed.,
// sec. 6.5.2): every unfixed flow i crossing link l would run at s_l / w_i, with s_l = (capacity
// of l left) / sum over l's unfixed flows of 1 / w_j; the least s over the links (or a flow's
// own b_i x w_i when that is smaller) fixes the flows it limits, their rates leave their links'
// capacities, and the filling goes on until every flow is fixed.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace traintwin {

/// One flow of a max-min problem: the links it crosses (indices into the capacities), its
/// sharing penalty (> 0; a rate goes as 1 / penalty on a shared bottleneck) and its own rate
/// bound in bytes/s (> 0).
struct MaxMinFlow {
  std::span<const uint32_t> links;
  double penalty = 1;
  double bound_Bps = 0;
};

/// Working storage of weighted_max_min, kept between calls so that a solve allocates nothing.
struct MaxMinScratch {
  std::vector<double> left_Bps;  // per link: capacity not yet given to fixed flows
  std::vector<double> weight;    // per link: sum of 1 / penalty of its unfixed flows
  std::vector<uint32_t> users;   // per link: its unfixed flows
  std::vector<uint8_t> fixed;    // per flow
};

/// Rates (bytes/s) of `flows` sharing links of `capacity_Bps` (bytes/s, > 0) by weighted max-min
/// (see the file comment), written to `rate_Bps` (one per flow). A flow with no links runs at
/// its bound. Throws InvalidArgument when rate_Bps is not one per flow, a link index is out of
/// range, or a penalty, bound or capacity is not > 0.
void weighted_max_min(std::span<const MaxMinFlow> flows, std::span<const double> capacity_Bps,
                      std::span<double> rate_Bps, MaxMinScratch& scratch);

}  // namespace traintwin
