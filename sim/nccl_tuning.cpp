// NCCL's tuner latencies and protocol bandwidth shares (see nccl_tuning.hpp for the sources).
#include "sim/nccl_tuning.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "sim/collectives.hpp"

namespace traintwin {
namespace {

constexpr double kUs = 1e-6;

/// Index of a protocol in NCCL's {LL, LL128, Simple} rows.
int index(CollectiveProtocol p) {
  switch (p) {
    case CollectiveProtocol::kLL: return 0;
    case CollectiveProtocol::kLL128: return 1;
    case CollectiveProtocol::kSimple: return 2;
  }
  return 2;
}

// tuning.cc, ncclTunerConstantsDefaults (us).
constexpr double kRingBase[3] = {6.6, 14.0, 8.4};
constexpr double kTreeBase[3] = {6.8, 14.0, 8.4};
constexpr double kRingNvlink[3] = {0.6, 1.9, 3.4};
constexpr double kTreeNvlink[3] = {0.6, 1.25, 4.0};
constexpr double kRingNet[3] = {2.7, 4.0, 14.0};
constexpr double kTreeNet[3] = {5.0, 8.5, 14.0};
constexpr double kNvlsNvlinkSimple = 25.0;
/// getNetOverhead() on an Intel x86 host (DGX H100: Xeon), x3 for Simple.
constexpr double kNetOverhead[3] = {1.0, 1.0, 3.0};

int64_t floor_log2(int64_t n) {
  int64_t l = 0;
  while ((int64_t{1} << (l + 1)) <= n) ++l;
  return l;
}

void require_runnable(CollectiveAlgorithm algo, CollectiveProtocol proto) {
  if (algo == CollectiveAlgorithm::kP2p) {
    throw InvalidArgument("nccl tuning: all-to-all (p2p) runs as grouped send/recv, outside "
                          "NCCL's collective tuner");
  }
  if (algo == CollectiveAlgorithm::kNvls && proto != CollectiveProtocol::kSimple) {
    throw InvalidArgument(std::string("nccl tuning: NVLS runs the Simple protocol only, not ") +
                          to_string(proto));
  }
}

}  // namespace

const char* to_string(CollectiveProtocol p) {
  switch (p) {
    case CollectiveProtocol::kLL: return "LL";
    case CollectiveProtocol::kLL128: return "LL128";
    case CollectiveProtocol::kSimple: return "Simple";
  }
  return "?";
}

CollectiveProtocol parse_protocol(const std::string& text) {
  if (text == "LL") return CollectiveProtocol::kLL;
  if (text == "LL128") return CollectiveProtocol::kLL128;
  if (text == "Simple") return CollectiveProtocol::kSimple;
  throw ConfigError("collective protocol '" + text + "' unknown (allowed: LL, LL128, Simple)");
}

double nccl_latency_s(CollectiveKind kind, CollectiveAlgorithm algo, CollectiveProtocol proto,
                      const GroupSpan& span, double route_inter_s) {
  require_runnable(algo, proto);
  if (span.ranks <= 1) return 0.0;
  const int p = index(proto);
  const bool multi = span.nodes > 1;
  switch (algo) {
    case CollectiveAlgorithm::kNvls: return kNvlsNvlinkSimple * kUs;
    case CollectiveAlgorithm::kTree: {
      const double intra = kTreeNvlink[p];
      const double inter = kTreeNet[p] + route_inter_s / kUs;
      const double k = static_cast<double>(std::max<int64_t>(1, span.ranks_per_node));
      return (kTreeBase[p] +
              2.0 * ((k - 1.0) * intra +
                     static_cast<double>(floor_log2(std::max<int64_t>(1, span.nodes))) * inter)) *
             kUs;
    }
    case CollectiveAlgorithm::kRing: {
      const int64_t n = span.ranks;
      const int64_t steps = kind == CollectiveKind::kAllReduce ? 2 * (n - 1) : n - 1;
      const int64_t net_steps =
          !multi ? 0
                 : std::min(steps, kind == CollectiveKind::kAllReduce ? 2 * (span.nodes - 1)
                                                                      : span.nodes - 1);
      const double intra = multi ? std::max(kRingNvlink[p], kNetOverhead[p]) : kRingNvlink[p];
      const double net = (span.ranks_per_node <= 1 ? kTreeNet[p] : kRingNet[p]) + route_inter_s / kUs;
      return (kRingBase[p] + static_cast<double>(steps - net_steps) * intra +
              static_cast<double>(net_steps) * net) *
             kUs;
    }
    case CollectiveAlgorithm::kP2p: break;
  }
  return 0.0;
}

double nccl_protocol_bandwidth_share(CollectiveAlgorithm algo, CollectiveProtocol proto,
                                     const GroupSpan& span) {
  require_runnable(algo, proto);
  switch (proto) {
    case CollectiveProtocol::kSimple: return 1.0;
    case CollectiveProtocol::kLL: return algo == CollectiveAlgorithm::kTree ? 1.0 / 3.8 : 0.5;
    case CollectiveProtocol::kLL128:
      if (algo == CollectiveAlgorithm::kTree) return span.nodes <= 1 ? 7.0 / 9.0 : 120.0 / 128.0;
      return 0.92;
  }
  return 1.0;
}

}  // namespace traintwin
