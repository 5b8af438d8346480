// Timeline: what ran where and when, from a simulation or a live run, and its export as a
// Chrome/Perfetto trace (JSON "Trace Event Format": one process per rank, one thread per stream).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

namespace traintwin {

/// One op's execution span.
struct TimelineEvent {
  int64_t rank = 0;
  std::string stream;     ///< "compute", "tp-comm", "pp-comm", "dp-comm", ...
  std::string name;       ///< e.g. "fwd mb3 chunk1 L12 mlp"
  std::string category;   ///< "forward" | "backward" | "recompute" | "comm" | "optimizer" | ...
  double start_s = 0;
  double end_s = 0;
  /// A send and its recv share a flow id (>= 0) so the trace draws an arrow send -> recv;
  /// -1 when not part of a flow.
  int64_t flow_id = -1;
  bool flow_start = false;  ///< true on the send side
  std::map<std::string, std::string> args;  ///< e.g. {"bytes": "50331648", "algorithm": "ring"}
};

/// A recorded or simulated run.
struct Timeline {
  std::string name;
  std::vector<TimelineEvent> events;
};

/// Writes `t` as Chrome Trace Event Format JSON (loads in ui.perfetto.dev and chrome://tracing):
/// "X" complete events in microseconds; process (rank) and thread (stream) name metadata; flow
/// events "s"/"f" for send -> recv. Output is deterministic (events in the given order).
void write_chrome_trace(const Timeline& t, std::ostream& out);

/// Reads a trace written by write_chrome_trace back (for replay and tests). Throws Error naming
/// the file/origin and the event index on malformed input.
Timeline read_chrome_trace(std::istream& in, const std::string& origin);

}  // namespace traintwin
