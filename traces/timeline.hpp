// Timeline: what ran where and when, from a simulation or a live run, and its export as a
// Chrome/Perfetto trace (JSON "Trace Event Format": one process per rank, one thread per stream).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace traintwin {

/// One op's execution span.
struct TimelineEvent {
  int64_t rank = 0;
  std::string stream;    ///< "compute", "tp-comm", "pp-comm", "dp-comm", ...
  std::string name;      ///< e.g. "fwd mb3 chunk1 L12 mlp"
  std::string category;  ///< "forward" | "backward" | "recompute" | "comm" | "optimizer" | ...
  double start_s = 0;
  double end_s = 0;
  /// A send and its recv share a flow id (>= 0) so the trace draws an arrow send -> recv;
  /// -1 when not part of a flow.
  int64_t flow_id = -1;
  bool flow_start = false;                  ///< true on the send side
  std::map<std::string, std::string> args;  ///< e.g. {"bytes": "50331648", "algorithm": "ring"}
};

/// A recorded or simulated run.
struct Timeline {
  std::string name;
  std::vector<TimelineEvent> events;
  /// The device a live run ran on, as a topology's gpu.name names it (e.g. "H100-SXM-80GB" or
  /// "cpu-amd-epyc-7b13-1t"): what its kernel durations were measured on. Empty for a
  /// simulation, and in a trace written before traintwin recorded it.
  std::string device;
};

/// Writes `t` as Chrome Trace Event Format JSON (loads in ui.perfetto.dev and chrome://tracing).
///
/// Layout: {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {"name": t.name}} (and
/// "device": t.device in otherData when it is not empty), one
/// trace event per line. Each rank is a process (pid = rank) with "process_name" "rank N" and
/// "process_sort_index" N; each stream is a thread whose tid is the same on every rank:
/// compute 0, tp-comm 1, cp-comm 2, pp-comm 3, dp-comm 4, ep-comm 5, then other streams from 6 in
/// first-seen order, with "thread_name" (the stream) and "thread_sort_index" (the tid). All
/// metadata comes first, sorted by pid then tid; then every event, in the given order, as a
/// complete event {"ph": "X", "ts", "dur"} in microseconds (doubles rounded to the picosecond),
/// with "name", "cat" (the category) and "args" (the args map, strings).
///
/// Flows: an event with flow_id >= 0 is followed by its flow event, "ph": "s" on the send side
/// and "ph": "f" with "bp": "e" on the recv side, both with "id" = flow_id and the same
/// name/cat ("flow"). Each flow event sits at the midpoint of its own slice, strictly inside it,
/// so every viewer binds it to that slice ("s" always binds to the enclosing slice, "f" does
/// with "bp": "e") whatever its rule for slice boundaries or for events sharing a timestamp;
/// viewers draw the arrow from the send slice to the recv slice. Either side may be absent
/// (e.g. a window cut out of a longer run).
///
/// Output is deterministic: the same timeline gives byte-identical output. Throws
/// InvalidArgument naming the event index on a negative rank, a non-finite time, end_s <
/// start_s, or a flow id used twice on the same side.
void write_chrome_trace(const Timeline& t, std::ostream& out);

/// Writes a Chrome trace one event at a time, without holding the events: the header when
/// constructed, each event (and its flow event) as write() is called, then at finish() the
/// metadata of every (rank, stream) seen that write_tracks() did not announce, and the footer.
/// Thread ids as write_chrome_trace (fixed streams, then others in first-seen order). write()
/// throws InvalidArgument as write_chrome_trace does, naming the event by its write order.
/// Without finish() the document is left unterminated.
class ChromeTraceWriter {
 public:
  /// `device`: Timeline::device (otherData "device" when not empty).
  ChromeTraceWriter(std::ostream& out, std::string name, std::string device = "");
  /// Writes now the metadata of every (rank, stream) of `events` (sorted by rank, then tid), so
  /// that it comes before the events (write_chrome_trace's layout).
  void write_tracks(const std::vector<TimelineEvent>& events);
  void write(const TimelineEvent& e);
  void finish();
  int64_t events() const { return events_; }

 private:
  int64_t tid(const std::string& stream);
  void line(const std::string& text);
  void write_metadata(int64_t rank, int64_t tid, const std::string& stream);

  std::ostream& out_;
  std::string name_;
  std::string device_;
  std::map<std::string, int64_t> tids_;
  std::map<int64_t, std::set<int64_t>> metadata_;             ///< rank -> tids announced
  std::map<int64_t, std::map<int64_t, std::string>> seen_;    ///< rank -> tid -> stream
  std::set<std::pair<int64_t, bool>> flow_sides_;
  int64_t lines_ = 0, events_ = 0;
  bool finished_ = false;
};

/// Reads a trace written by write_chrome_trace back (for replay and tests): every "X" event
/// becomes a TimelineEvent in file order, rank = pid, stream = the "thread_name" of its
/// (pid, tid), times in seconds; each "s"/"f" flow event is bound to the "X" slice on its
/// (pid, tid) that contains its ts (preferring the last one before it in the file) and sets that
/// event's flow_id and flow_start. Timeline::name and Timeline::device come from otherData's
/// "name" and "device" when present.
///
/// Strict: malformed JSON, no "traceEvents" array, an event that is not an object or has no
/// "ph", an "X" event without numeric ts/dur (dur >= 0), integer pid/tid or string name, a
/// (pid, tid) without "thread_name", a flow event without integer id >= 0 or enclosing slice,
/// two flows on one slice, or a phase other than X, M, s, f: each throws Error whose message
/// starts with `origin` and names the event as traceEvents[i].
Timeline read_chrome_trace(std::istream& in, const std::string& origin);

}  // namespace traintwin
