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
constexpr std::array<std::string_view, 5> kFixedStreams = {"compute", "tp-comm", "cp-comm",
                                                           "pp-comm", "dp-comm"};

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

/// Thread ids per stream name: the fixed streams first, the others in first-seen order.
std::map<std::string, int64_t> AssignThreadIds(const std::vector<TimelineEvent>& events) {
  std::map<std::string, int64_t> tids;
  for (size_t i = 0; i < kFixedStreams.size(); ++i) {
    tids.emplace(std::string(kFixedStreams[i]), static_cast<int64_t>(i));
  }
  auto next = static_cast<int64_t>(kFixedStreams.size());
  for (const TimelineEvent& e : events) {
    if (tids.emplace(e.stream, next).second) ++next;
  }
  return tids;
}

/// Rejects what the format cannot carry faithfully; `i` is the event's index in `t.events`.
void ValidateEvents(const Timeline& t) {
  std::set<std::pair<int64_t, bool>> flow_sides;
  for (size_t i = 0; i < t.events.size(); ++i) {
    const TimelineEvent& e = t.events[i];
    auto fail = [&](const std::string& what) {
      throw InvalidArgument(
          fmt::format("write_chrome_trace: event {} (\"{}\"): {}", i, e.name, what));
    };
    if (e.rank < 0) fail(fmt::format("negative rank {}", e.rank));
    if (!std::isfinite(e.start_s) || !std::isfinite(e.end_s)) {
      fail(fmt::format("non-finite time (start_s {}, end_s {})", e.start_s, e.end_s));
    }
    if (e.end_s < e.start_s) {
      fail(fmt::format("end_s {} is before start_s {}", e.end_s, e.start_s));
    }
    if (e.flow_id >= 0 && !flow_sides.emplace(e.flow_id, e.flow_start).second) {
      fail(fmt::format("flow id {} already used on the {} side", e.flow_id,
                       e.flow_start ? "send (flow_start)" : "recv"));
    }
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

/// Reads a trace; owns the error context (origin, event index).
class TraceReader {
 public:
  TraceReader(const Json& events, const std::string& origin) : events_(events), origin_(origin) {}

  /// Fills `t.events` from the trace events.
  void Read(Timeline& t) {
    ReadMetadata();
    ReadSlices(t);
    ReadFlows(t);
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

  [[noreturn]] void Fail(size_t i, const std::string& what) const {
    throw Error(fmt::format("{}: traceEvents[{}]: {}", origin_, i, what));
  }

  /// The phase of event `i` ("X", "M", ...), checking that the event is an object.
  std::string Phase(size_t i) const {
    const Json& ev = events_[i];
    if (!ev.is_object()) Fail(i, "not a JSON object");
    auto it = ev.find("ph");
    if (it == ev.end() || !it->is_string()) Fail(i, "missing or non-string \"ph\"");
    return it->get<std::string>();
  }

  int64_t Int(size_t i, const char* key, const std::string& ph) const {
    const Json& ev = events_[i];
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

  double Number(size_t i, const char* key, const std::string& ph) const {
    const Json& ev = events_[i];
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

  std::string String(size_t i, const char* key, const std::string& ph, bool required) const {
    const Json& ev = events_[i];
    auto it = ev.find(key);
    if (it == ev.end()) {
      if (required) Fail(i, fmt::format("\"{}\" event has no \"{}\"", ph, key));
      return "";
    }
    if (!it->is_string()) Fail(i, fmt::format("\"{}\" event: \"{}\" is not a string", ph, key));
    return it->get<std::string>();
  }

  /// Pass 1: the stream name of every (pid, tid) from "thread_name" metadata.
  void ReadMetadata() {
    for (size_t i = 0; i < events_.size(); ++i) {
      if (Phase(i) != "M" || String(i, "name", "M", true) != "thread_name") continue;
      const Track track{Int(i, "pid", "M"), Int(i, "tid", "M")};
      auto args = events_[i].find("args");
      if (args == events_[i].end() || !args->is_object() || !args->contains("name") ||
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
  }

  /// Pass 2: every "X" event, in file order; rejects unsupported phases.
  void ReadSlices(Timeline& t) {
    for (size_t i = 0; i < events_.size(); ++i) {
      const std::string ph = Phase(i);
      if (ph == "M" || ph == "s" || ph == "f") continue;
      if (ph != "X") {
        Fail(i, fmt::format("unsupported phase \"{}\" (expected X, M, s or f)", ph));
      }
      TimelineEvent e;
      const double ts = Number(i, "ts", ph);
      const double dur = Number(i, "dur", ph);
      if (dur < 0) Fail(i, fmt::format("\"X\" event has negative \"dur\" {}", dur));
      const Track track{Int(i, "pid", ph), Int(i, "tid", ph)};
      auto stream = streams_.find(track);
      if (stream == streams_.end()) {
        Fail(i, fmt::format("no \"thread_name\" metadata for pid {} tid {}", track.first,
                            track.second));
      }
      e.rank = track.first;
      e.stream = stream->second;
      e.name = String(i, "name", ph, true);
      e.category = String(i, "cat", ph, false);
      e.start_s = ts / 1e6;
      e.end_s = (ts + dur) / 1e6;
      auto args = events_[i].find("args");
      if (args != events_[i].end()) {
        if (!args->is_object()) Fail(i, "\"X\" event: \"args\" is not an object");
        for (const auto& [key, value] : args->items()) {
          e.args[key] = value.is_string()
                            ? value.get<std::string>()
                            : value.dump(-1, ' ', false, Json::error_handler_t::replace);
        }
      }
      slices_[track].push_back(Slice{i, t.events.size(), ts, ts + dur});
      t.events.push_back(std::move(e));
    }
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

  /// Pass 3: binds each "s"/"f" event to its slice.
  void ReadFlows(Timeline& t) {
    for (size_t i = 0; i < events_.size(); ++i) {
      const std::string ph = Phase(i);
      if (ph != "s" && ph != "f") continue;
      const Track track{Int(i, "pid", ph), Int(i, "tid", ph)};
      const double ts = Number(i, "ts", ph);
      const int64_t id = Int(i, "id", ph);
      if (id < 0) Fail(i, fmt::format("\"{}\" event has negative \"id\" {}", ph, id));
      const std::optional<size_t> bound = Bind(track, ts, i);
      if (!bound) {
        Fail(i, fmt::format("\"{}\" event (id {}) at ts {} us lies in no \"X\" slice of pid {} "
                            "tid {}",
                            ph, id, ts, track.first, track.second));
      }
      TimelineEvent& e = t.events[*bound];
      if (e.flow_id >= 0) {
        Fail(i, fmt::format("\"{}\" event (id {}) binds to slice \"{}\", which already has "
                            "flow id {}",
                            ph, id, e.name, e.flow_id));
      }
      e.flow_id = id;
      e.flow_start = ph == "s";
    }
  }

  const Json& events_;
  const std::string& origin_;
  std::map<Track, std::string> streams_;
  std::map<Track, std::vector<Slice>> slices_;
};

}  // namespace

void write_chrome_trace(const Timeline& t, std::ostream& out) {
  ValidateEvents(t);
  const std::map<std::string, int64_t> tids = AssignThreadIds(t.events);

  // rank -> stream tids present on that rank (sorted, hence the metadata order).
  std::map<int64_t, std::map<int64_t, std::string>> tracks;
  for (const TimelineEvent& e : t.events) tracks[e.rank].emplace(tids.at(e.stream), e.stream);

  std::vector<std::string> lines;
  for (const auto& [rank, threads] : tracks) {
    lines.push_back(
        Dump(Metadata("process_name", rank, 0, {{"name", fmt::format("rank {}", rank)}})));
    lines.push_back(Dump(Metadata("process_sort_index", rank, 0, {{"sort_index", rank}})));
    for (const auto& [tid, stream] : threads) {
      lines.push_back(Dump(Metadata("thread_name", rank, tid, {{"name", stream}})));
      lines.push_back(Dump(Metadata("thread_sort_index", rank, tid, {{"sort_index", tid}})));
    }
  }
  for (const TimelineEvent& e : t.events) {
    const double ts = ToMicros(e.start_s);
    const double dur = ToMicros(e.end_s - e.start_s);
    const int64_t tid = tids.at(e.stream);
    OrderedJson x;
    x["name"] = e.name;
    x["cat"] = e.category;
    x["ph"] = "X";
    x["ts"] = ts;
    x["dur"] = dur;
    x["pid"] = e.rank;
    x["tid"] = tid;
    x["args"] = OrderedJson::object();
    for (const auto& [key, value] : e.args) x["args"][key] = value;
    lines.push_back(Dump(x));
    if (e.flow_id < 0) continue;
    OrderedJson flow;
    flow["name"] = kFlowName;
    flow["cat"] = kFlowName;
    flow["ph"] = e.flow_start ? "s" : "f";
    flow["ts"] = ts + dur / 2;  // strictly inside the slice (see the header)
    flow["pid"] = e.rank;
    flow["tid"] = tid;
    flow["id"] = e.flow_id;
    if (!e.flow_start) flow["bp"] = "e";
    lines.push_back(Dump(flow));
  }

  out << "{\"traceEvents\": [";
  for (size_t i = 0; i < lines.size(); ++i) out << (i == 0 ? "\n" : ",\n") << lines[i];
  OrderedJson other;
  other["name"] = t.name;
  out << "\n],\n\"displayTimeUnit\": \"ms\",\n\"otherData\": " << Dump(other) << "}\n";
}

Timeline read_chrome_trace(std::istream& in, const std::string& origin) {
  Json doc;
  try {
    doc = Json::parse(in);
  } catch (const Json::exception& e) {  // parse_error, and out_of_range for numbers like 1e999
    throw Error(fmt::format("{}: malformed JSON: {}", origin, e.what()));
  }
  if (!doc.is_object()) throw Error(fmt::format("{}: top level is not a JSON object", origin));
  auto events = doc.find("traceEvents");
  if (events == doc.end()) throw Error(fmt::format("{}: no \"traceEvents\"", origin));
  if (!events->is_array()) throw Error(fmt::format("{}: \"traceEvents\" is not an array", origin));

  Timeline t;
  auto other = doc.find("otherData");
  if (other != doc.end() && other->is_object()) {
    auto name = other->find("name");
    if (name != other->end() && name->is_string()) t.name = name->get<std::string>();
  }
  TraceReader(*events, origin).Read(t);
  return t;
}

}  // namespace traintwin
