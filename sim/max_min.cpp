// Weighted max-min progressive filling (see max_min.hpp).
#include "sim/max_min.hpp"

#include <limits>

#include "core/error.hpp"

namespace traintwin {

void weighted_max_min(std::span<const MaxMinFlow> flows, std::span<const double> capacity_Bps,
                      std::span<double> rate_Bps, MaxMinScratch& scratch) {
  if (rate_Bps.size() != flows.size()) {
    throw InvalidArgument("weighted_max_min: " + std::to_string(rate_Bps.size()) + " rates for " +
                          std::to_string(flows.size()) + " flows");
  }
  const size_t nl = capacity_Bps.size();
  scratch.left_Bps.assign(capacity_Bps.begin(), capacity_Bps.end());
  scratch.weight.assign(nl, 0.0);
  scratch.users.assign(nl, 0);
  scratch.fixed.assign(flows.size(), 0);
  for (double c : capacity_Bps) {
    if (!(c > 0)) throw InvalidArgument("weighted_max_min: a link capacity is not > 0");
  }
  for (const MaxMinFlow& f : flows) {
    if (!(f.penalty > 0) || !(f.bound_Bps > 0)) {
      throw InvalidArgument("weighted_max_min: a flow's penalty or bound is not > 0");
    }
    for (uint32_t l : f.links) {
      if (l >= nl) throw InvalidArgument("weighted_max_min: link index out of range");
      scratch.weight[l] += 1.0 / f.penalty;
      ++scratch.users[l];
    }
  }
  size_t unfixed = flows.size();
  constexpr double kInf = std::numeric_limits<double>::infinity();
  while (unfixed > 0) {
    // The least fair share over the links that still have unfixed flows, and over the flows'
    // own bounds (bound x penalty is the share at which a flow reaches its bound).
    double share = kInf;
    for (size_t l = 0; l < nl; ++l) {
      if (scratch.users[l] > 0)
        share = std::min(share, std::max(0.0, scratch.left_Bps[l]) / scratch.weight[l]);
    }
    bool by_bound = false;
    for (size_t i = 0; i < flows.size(); ++i) {
      if (scratch.fixed[i]) continue;
      const double b = flows[i].bound_Bps * flows[i].penalty;
      if (b < share) {
        share = b;
        by_bound = true;
      }
    }
    // Fix the flows this share limits: those at their bound, or those crossing a link whose
    // share it is (relative 1e-12: links that saturate together are fixed together).
    const double tol = share * 1e-12;
    size_t fixed_now = 0;
    for (size_t i = 0; i < flows.size(); ++i) {
      if (scratch.fixed[i]) continue;
      const MaxMinFlow& f = flows[i];
      bool limited = false;
      if (by_bound) {
        limited = f.bound_Bps * f.penalty <= share + tol;
      } else {
        for (uint32_t l : f.links) {
          if (std::max(0.0, scratch.left_Bps[l]) / scratch.weight[l] <= share + tol) {
            limited = true;
            break;
          }
        }
        if (f.links.empty() && f.bound_Bps * f.penalty <= share + tol) limited = true;
      }
      if (!limited) continue;
      rate_Bps[i] = std::min(f.bound_Bps, share / f.penalty);
      scratch.fixed[i] = 1;
      ++fixed_now;
    }
    // Give the fixed flows' rates to their links (after the pass: every flow of a saturating
    // link must see the same share).
    for (size_t i = 0; i < flows.size(); ++i) {
      if (scratch.fixed[i] != 1) continue;
      scratch.fixed[i] = 2;
      for (uint32_t l : flows[i].links) {
        scratch.left_Bps[l] -= rate_Bps[i];
        scratch.weight[l] -= 1.0 / flows[i].penalty;
        if (--scratch.users[l] == 0) scratch.weight[l] = 0;
      }
    }
    if (fixed_now == 0) {
      throw InvalidArgument("weighted_max_min: no flow could be fixed (inconsistent input)");
    }
    unfixed -= fixed_now;
  }
}

}  // namespace traintwin
