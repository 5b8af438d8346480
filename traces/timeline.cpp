// Timeline export to and import from the Chrome Trace Event Format. See traces/timeline.hpp.
#include "traces/timeline.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <istream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <set>
#include <string_view>
#include <utility>

#include "core/error.hpp"

namespace traintwin {
namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

/// Streams with a fixed thread id (their index), so that every trace lays them out alike.
constexpr std::array<std::string_view, 6> kFixedStreams = {"compute", "tp-comm", "cp-comm",
                                                           "pp-comm", "dp-comm", "ep-comm"};

/// Name and category shared by the "s" and "f" halves of a flow (viewers pair them by
/// id, name and category).
constexpr std::string_view kFlowName = "flow";

/// Seconds to microseconds, rounded to the picosecond so that e.g. 1.5e-6 s prints as 1.5
/// rather than 1.4999999999999998 (an error of at most 0.5 ps).
double ToMicros(double seconds) { return std::round(seconds * 1e12) / 1e6; }

/// Dumps one event on a single line; invalid UTF-8 in names is replaced, never thrown.
std::string Dump(const OrderedJson& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

/// Rejects what the format cannot carry faithfully: event `i` (its index in the timeline, or
/// its write order) and the flow sides already used.
void CheckEvent(const TimelineEvent& e, size_t i, std::set<std::pair<int64_t, bool>>& flow_sides) {
  auto fail = [&](const std::string& what) {
    throw InvalidArgument(fmt::format("write_chrome_trace: event {} (\"{}\"): {}", i, e.name, what));
  };
  if (e.rank < 0) fail(fmt::format("negative rank {}", e.rank));
  if (!std::isfinite(e.start_s) || !std::isfinite(e.end_s)) {
    fail(fmt::format("non-finite time (start_s {}, end_s {})", e.start_s, e.end_s));
  }
  if (e.end_s < e.start_s) fail(fmt::format("end_s {} is before start_s {}", e.end_s, e.start_s));
  if (e.flow_id >= 0 && !flow_sides.emplace(e.flow_id, e.flow_start).second) {
    fail(fmt::format("flow id {} already used on the {} side", e.flow_id,
                     e.flow_start ? "send (flow_start)" : "recv"));
  }
}

OrderedJson Metadata(std::string_view name, int64_t pid, int64_t tid, OrderedJson args) {
  OrderedJson j;
  j["name"] = name;
  j["ph"] = "M";
  j["ts"] = 0;
  j["pid"] = pid;
  j["tid"] = tid;
  j["args"] = std::move(args);
  return j;
}

// ---- reading --------------------------------------------------------------------------------

/// Reads a trace one event at a time (read_chrome_trace hands each element of traceEvents over
/// as the parser finishes it, then drops it); owns the error context (origin, event index).
/// Slices are kept as TimelineEvents, thread names and flow events as small records; streams
/// and flows are resolved at the end (metadata and flows may come anywhere in the file).
class TraceReader {
 public:
  TraceReader(Timeline& t, const std::string& origin) : t_(t), origin_(origin) {}

  /// Event `i` of traceEvents.
  void Add(const Json& ev, size_t i) {
    const std::string ph = Phase(ev, i);
    if (ph == "M") {
      AddMetadata(ev, i);
    } else if (ph == "X") {
      AddSlice(ev, i);
    } else if (ph == "s" || ph == "f") {
      const Track track{Int(ev, i, "pid", ph), Int(ev, i, "tid", ph)};
      const double ts = Number(ev, i, "ts", ph);
      const int64_t id = Int(ev, i, "id", ph);
      if (id < 0) Fail(i, fmt::format("\"{}\" event has negative \"id\" {}", ph, id));
      flows_.push_back(Flow{i, track, ts, id, ph == "s"});
    } else {
      Fail(i, fmt::format("unsupported phase \"{}\" (expected X, M, s or f)", ph));
    }
  }

  /// Resolves every slice's stream and binds every flow to its slice.
  void Finish() {
    for (const auto& [track, slices] : slices_) {
      auto stream = streams_.find(track);
      for (const Slice& sl : slices) {
        if (stream == streams_.end()) {
          Fail(sl.file_index, fmt::format("no \"thread_name\" metadata for pid {} tid {}",
                                          track.first, track.second));
        }
        t_.events[sl.event_index].stream = stream->second;
      }
    }
    // Flows in file order, so that errors name the first bad one.
    for (const Flow& f : flows_) {
      const char* ph = f.start ? "s" : "f";
      const std::optional<size_t> bound = Bind(f.track, f.ts_us, f.file_index);
      if (!bound) {
        Fail(f.file_index, fmt::format("\"{}\" event (id {}) at ts {} us lies in no \"X\" slice of "
                                       "pid {} tid {}",
                                       ph, f.id, f.ts_us, f.track.first, f.track.second));
      }
      TimelineEvent& e = t_.events[*bound];
      if (e.flow_id >= 0) {
        Fail(f.file_index, fmt::format("\"{}\" event (id {}) binds to slice \"{}\", which already "
                                       "has flow id {}",
                                       ph, f.id, e.name, e.flow_id));
      }
      e.flow_id = f.id;
      e.flow_start = f.start;
    }
  }

 private:
  using Track = std::pair<int64_t, int64_t>;  ///< (pid, tid)

  /// One "X" slice as read: file index, index in Timeline::events, bounds in microseconds.
  struct Slice {
    size_t file_index;
    size_t event_index;
    double ts_us;
    double end_us;
  };
  /// One "s"/"f" flow event.
  struct Flow {
    size_t file_index;
    Track track;
    double ts_us;
    int64_t id;
    bool start;
  };

  [[noreturn]] void Fail(size_t i, const std::string& what) const {
    throw Error(fmt::format("{}: traceEvents[{}]: {}", origin_, i, what));
  }

  /// The phase of an event ("X", "M", ...), checking that the event is an object.
  std::string Phase(const Json& ev, size_t i) const {
    if (!ev.is_object()) Fail(i, "not a JSON object");
    auto it = ev.find("ph");
    if (it == ev.end() || !it->is_string()) Fail(i, "missing or non-string \"ph\"");
    return it->get<std::string>();
  }

  int64_t Int(const Json& ev, size_t i, const char* key, const std::string& ph) const {
    auto it = ev.find(key);
    if (it == ev.end()) Fail(i, fmt::format("\"{}\" event has no \"{}\"", ph, key));
    if (it->is_number_unsigned()) {
      auto v = it->get<uint64_t>();
      if (v <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return static_cast<int64_t>(v);
      }
    } else if (it->is_number_integer()) {
      return it->get<int64_t>();
    }
    Fail(i, fmt::format("\"{}\" event: \"{}\" is not a 64-bit integer: {}", ph, key,
                        it->dump(-1, ' ', false, Json::error_handler_t::replace)));
  }

  double Number(const Json& ev, size_t i, const char* key, const std::string& ph) const {
    auto it = ev.find(key);
    if (it == ev.end()) Fail(i, fmt::format("\"{}\" event has no \"{}\"", ph, key));
    if (!it->is_number()) {
      Fail(i, fmt::format("\"{}\" event: \"{}\" is not a number: {}", ph, key,
                          it->dump(-1, ' ', false, Json::error_handler_t::replace)));
    }
    const double v = it->get<double>();
    if (!std::isfinite(v)) Fail(i, fmt::format("\"{}\" event: \"{}\" is not finite", ph, key));
    return v;
  }

  std::string String(const Json& ev, size_t i, const char* key, const std::string& ph,
                     bool required) const {
    auto it = ev.find(key);
    if (it == ev.end()) {
      if (required) Fail(i, fmt::format("\"{}\" event has no \"{}\"", ph, key));
      return "";
    }
    if (!it->is_string()) Fail(i, fmt::format("\"{}\" event: \"{}\" is not a string", ph, key));
    return it->get<std::string>();
  }

  /// "thread_name" metadata: the stream name of a (pid, tid).
  void AddMetadata(const Json& ev, size_t i) {
    if (String(ev, i, "name", "M", true) != "thread_name") return;
    const Track track{Int(ev, i, "pid", "M"), Int(ev, i, "tid", "M")};
    auto args = ev.find("args");
    if (args == ev.end() || !args->is_object() || !args->contains("name") ||
        !(*args)["name"].is_string()) {
      Fail(i, "\"thread_name\" metadata has no string args.name");
    }
    const std::string stream = (*args)["name"].get<std::string>();
    auto [it, inserted] = streams_.emplace(track, stream);
    if (!inserted && it->second != stream) {
      Fail(i, fmt::format("pid {} tid {} named both \"{}\" and \"{}\"", track.first, track.second,
                          it->second, stream));
    }
  }

  /// An "X" event, in file order (its stream is resolved in Finish()).
  void AddSlice(const Json& ev, size_t i) {
    const std::string ph = "X";
    TimelineEvent e;
    const double ts = Number(ev, i, "ts", ph);
    const double dur = Number(ev, i, "dur", ph);
    if (dur < 0) Fail(i, fmt::format("\"X\" event has negative \"dur\" {}", dur));
    const Track track{Int(ev, i, "pid", ph), Int(ev, i, "tid", ph)};
    e.rank = track.first;
    e.name = String(ev, i, "name", ph, true);
    e.category = String(ev, i, "cat", ph, false);
    e.start_s = ts / 1e6;
    e.end_s = (ts + dur) / 1e6;
    auto args = ev.find("args");
    if (args != ev.end()) {
      if (!args->is_object()) Fail(i, "\"X\" event: \"args\" is not an object");
      for (const auto& [key, value] : args->items()) {
        e.args[key] = value.is_string()
                          ? value.get<std::string>()
                          : value.dump(-1, ' ', false, Json::error_handler_t::replace);
      }
    }
    slices_[track].push_back(Slice{i, t_.events.size(), ts, ts + dur});
    t_.events.push_back(std::move(e));
  }

  /// The slice on `track` containing `ts_us` for the flow event at file index `i`: the last
  /// such slice before it in the file, else the first after it.
  std::optional<size_t> Bind(const Track& track, double ts_us, size_t i) const {
    auto it = slices_.find(track);
    if (it == slices_.end()) return std::nullopt;
    const std::vector<Slice>& slices = it->second;  // in file order
    auto contains = [ts_us](const Slice& s) { return s.ts_us <= ts_us && ts_us <= s.end_us; };
    auto split = std::lower_bound(slices.begin(), slices.end(), i,
                                  [](const Slice& s, size_t f) { return s.file_index < f; });
    // Backwards from the flow event: for write_chrome_trace output the first slice matches.
    for (auto s = std::make_reverse_iterator(split); s != slices.rend(); ++s) {
      if (contains(*s)) return s->event_index;
    }
    for (auto s = split; s != slices.end(); ++s) {
      if (contains(*s)) return s->event_index;
    }
    return std::nullopt;
  }

  Timeline& t_;
  const std::string& origin_;
  std::map<Track, std::string> streams_;
  std::map<Track, std::vector<Slice>> slices_;
  std::vector<Flow> flows_;
};

}  // namespace

ChromeTraceWriter::ChromeTraceWriter(std::ostream& out, std::string name, std::string device)
    : out_(out), name_(std::move(name)), device_(std::move(device)) {
  for (size_t i = 0; i < kFixedStreams.size(); ++i) {
    tids_.emplace(std::string(kFixedStreams[i]), static_cast<int64_t>(i));
  }
  out_ << "{\"traceEvents\": [";
}

int64_t ChromeTraceWriter::tid(const std::string& stream) {
  auto [it, added] = tids_.emplace(stream, static_cast<int64_t>(tids_.size()));
  return it->second;
}

void ChromeTraceWriter::line(const std::string& text) {
  out_ << (lines_ == 0 ? "\n" : ",\n") << text;
  ++lines_;
}

void ChromeTraceWriter::write_metadata(int64_t rank, int64_t tid, const std::string& stream) {
  if (metadata_.count(rank) == 0) {
    line(Dump(Metadata("process_name", rank, 0, {{"name", fmt::format("rank {}", rank)}})));
    line(Dump(Metadata("process_sort_index", rank, 0, {{"sort_index", rank}})));
  }
  if (metadata_[rank].insert(tid).second) {
    line(Dump(Metadata("thread_name", rank, tid, {{"name", stream}})));
    line(Dump(Metadata("thread_sort_index", rank, tid, {{"sort_index", tid}})));
  }
}

void ChromeTraceWriter::write_tracks(const std::vector<TimelineEvent>& events) {
  std::map<int64_t, std::map<int64_t, std::string>> tracks;  // sorted: the metadata order
  for (const TimelineEvent& e : events) tracks[e.rank].emplace(tid(e.stream), e.stream);
  for (const auto& [rank, threads] : tracks) {
    for (const auto& [t, stream] : threads) write_metadata(rank, t, stream);
  }
}

void ChromeTraceWriter::write(const TimelineEvent& e) {
  CheckEvent(e, static_cast<size_t>(events_), flow_sides_);
  const int64_t t = tid(e.stream);
  auto seen = seen_.find(e.rank);
  if (seen == seen_.end() || seen->second.count(t) == 0) seen_[e.rank].emplace(t, e.stream);
  const double ts = ToMicros(e.start_s);
  const double dur = ToMicros(e.end_s - e.start_s);
  OrderedJson x;
  x["name"] = e.name;
  x["cat"] = e.category;
  x["ph"] = "X";
  x["ts"] = ts;
  x["dur"] = dur;
  x["pid"] = e.rank;
  x["tid"] = t;
  x["args"] = OrderedJson::object();
  for (const auto& [key, value] : e.args) x["args"][key] = value;
  line(Dump(x));
  ++events_;
  if (e.flow_id < 0) return;
  OrderedJson flow;
  flow["name"] = kFlowName;
  flow["cat"] = kFlowName;
  flow["ph"] = e.flow_start ? "s" : "f";
  flow["ts"] = ts + dur / 2;  // strictly inside the slice (see the header)
  flow["pid"] = e.rank;
  flow["tid"] = t;
  flow["id"] = e.flow_id;
  if (!e.flow_start) flow["bp"] = "e";
  line(Dump(flow));
}

void ChromeTraceWriter::finish() {
  if (finished_) return;
  finished_ = true;
  for (const auto& [rank, threads] : seen_) {
    for (const auto& [t, stream] : threads) write_metadata(rank, t, stream);
  }
  OrderedJson other;
  other["name"] = name_;
  if (!device_.empty()) other["device"] = device_;
  out_ << "\n],\n\"displayTimeUnit\": \"ms\",\n\"otherData\": " << Dump(other) << "}\n";
}

void write_chrome_trace(const Timeline& t, std::ostream& out) {
  // Every event checked before the first byte: a bad timeline writes nothing.
  std::set<std::pair<int64_t, bool>> flow_sides;
  for (size_t i = 0; i < t.events.size(); ++i) CheckEvent(t.events[i], i, flow_sides);
  ChromeTraceWriter w(out, t.name, t.device);
  w.write_tracks(t.events);
  for (const TimelineEvent& e : t.events) w.write(e);
  w.finish();
}

Timeline read_chrome_trace(std::istream& in, const std::string& origin) {
  // Streaming: each element of the top-level "traceEvents" array goes to the reader as soon as
  // the parser has it and is then dropped, so a trace of any size never sits whole in memory.
  Timeline t;
  TraceReader reader(t, origin);
  std::string key;        // the current key of the top-level object
  bool in_events = false;  // inside the top-level traceEvents array
  size_t index = 0;
  const Json::parser_callback_t cb = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth == 1 && event == Json::parse_event_t::key) {
      key = parsed.get<std::string>();
      return true;
    }
    if (depth == 1 && event == Json::parse_event_t::array_start) in_events = key == "traceEvents";
    if (depth == 1 && event == Json::parse_event_t::array_end) in_events = false;
    if (in_events && depth == 2 &&
        (event == Json::parse_event_t::object_end || event == Json::parse_event_t::value)) {
      reader.Add(parsed, index++);
      return false;  // handled: drop it
    }
    if (in_events && depth == 2 && event == Json::parse_event_t::array_end) {
      reader.Add(parsed, index++);  // an array element: not an object (Add says so)
      return false;
    }
    return true;
  };
  Json doc;
  try {
    doc = Json::parse(in, cb);
  } catch (const Json::exception& e) {  // parse_error, and out_of_range for numbers like 1e999
    throw Error(fmt::format("{}: malformed JSON: {}", origin, e.what()));
  }
  if (!doc.is_object()) throw Error(fmt::format("{}: top level is not a JSON object", origin));
  auto events = doc.find("traceEvents");
  if (events == doc.end()) throw Error(fmt::format("{}: no \"traceEvents\"", origin));
  if (!events->is_array()) throw Error(fmt::format("{}: \"traceEvents\" is not an array", origin));
  reader.Finish();
  auto other = doc.find("otherData");
  if (other != doc.end() && other->is_object()) {
    auto name = other->find("name");
    if (name != other->end() && name->is_string()) t.name = name->get<std::string>();
    auto device = other->find("device");
    if (device != other->end() && device->is_string()) t.device = device->get<std::string>();
  }
  return t;
}

}  // namespace traintwin
