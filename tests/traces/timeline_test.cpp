// Chrome Trace Event Format export/import of a Timeline: round trip, metadata, flows,
// determinism, JSON validity, and the errors of the strict reader and of the writer.
#include "traces/timeline.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace traintwin {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

TimelineEvent Event(int64_t rank, std::string stream, std::string name, std::string category,
                    double start_s, double end_s) {
  TimelineEvent e;
  e.rank = rank;
  e.stream = std::move(stream);
  e.name = std::move(name);
  e.category = std::move(category);
  e.start_s = start_s;
  e.end_s = end_s;
  return e;
}

/// Two pipeline stages, a custom stream seen before a fixed one, a send -> recv flow, args,
/// times that are not exact in binary, and a zero-length event.
Timeline Sample() {
  Timeline t;
  t.name = "gpt-small pp2 \"sample\"";
  t.events.push_back(Event(0, "compute", "fwd mb0 L0", "forward", 0.0, 1.5e-6));
  t.events.push_back(Event(0, "ep-comm", "a2a mb0", "comm", 1.5e-6, 2.7e-6));
  TimelineEvent send = Event(0, "pp-comm", "send mb0", "comm", 0.123456789012, 0.2);
  send.flow_id = 7;
  send.flow_start = true;
  send.args = {{"bytes", "50331648"}, {"peer", "1"}};
  t.events.push_back(send);
  TimelineEvent recv = Event(1, "pp-comm", "recv mb0", "comm", 0.15, 0.2000000001);
  recv.flow_id = 7;
  recv.args = {{"bytes", "50331648"}, {"peer", "0"}};
  t.events.push_back(recv);
  t.events.push_back(Event(1, "compute", "fwd mb0 L1", "forward", 0.2000000001, 3600.000000001));
  t.events.push_back(Event(1, "tp-comm", "all-reduce", "comm", 1.0, 1.0));
  TimelineEvent grad = Event(1, "dp-comm", "reduce-scatter", "comm", 2.0, 2.5);
  grad.args = {{"algorithm", "ring"}, {"unicode", "\u00b5s"}};
  t.events.push_back(grad);
  t.events.push_back(Event(0, "host", "optimizer step", "optimizer", 4.0, 4.25));
  // A flow whose send is not in the timeline (cut out of a longer run).
  TimelineEvent lone = Event(0, "pp-comm", "recv mb9", "comm", 5.0, 5.5);
  lone.flow_id = 3;
  t.events.push_back(lone);
  return t;
}

std::string Write(const Timeline& t) {
  std::ostringstream out;
  write_chrome_trace(t, out);
  return out.str();
}

Timeline Read(const std::string& text, const std::string& origin = "trace.json") {
  std::istringstream in(text);
  return read_chrome_trace(in, origin);
}

/// read_chrome_trace(text) throws Error whose message contains every needle.
void ExpectReadError(const std::string& text, const std::vector<std::string>& needles) {
  SCOPED_TRACE(text);
  try {
    Read(text, "bad.json");
    ADD_FAILURE() << "expected Error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("bad.json")) << e.what();
    for (const std::string& needle : needles) EXPECT_THAT(e.what(), HasSubstr(needle));
  }
}

void ExpectWriteError(const Timeline& t, const std::string& needle) {
  std::ostringstream out;
  try {
    write_chrome_trace(t, out);
    ADD_FAILURE() << "expected InvalidArgument mentioning " << needle;
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr(needle));
  }
}

/// A trace with metadata for pid 0 tid 0 and the given events spliced in.
std::string TraceWith(const std::string& events) {
  return R"({"traceEvents": [
    {"name": "thread_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "compute"}},
    )" + events +
         "]}";
}

TEST(TimelineTest, RoundTripKeepsEveryEvent) {
  const Timeline t = Sample();
  const Timeline back = Read(Write(t));
  EXPECT_EQ(back.name, t.name);
  ASSERT_EQ(back.events.size(), t.events.size());
  for (size_t i = 0; i < t.events.size(); ++i) {
    SCOPED_TRACE(i);
    const TimelineEvent& a = t.events[i];
    const TimelineEvent& b = back.events[i];
    EXPECT_EQ(b.rank, a.rank);
    EXPECT_EQ(b.stream, a.stream);
    EXPECT_EQ(b.name, a.name);
    EXPECT_EQ(b.category, a.category);
    EXPECT_NEAR(b.start_s, a.start_s, 1e-9);
    EXPECT_NEAR(b.end_s, a.end_s, 1e-9);
    EXPECT_EQ(b.flow_id, a.flow_id);
    EXPECT_EQ(b.flow_start, a.flow_start);
    EXPECT_EQ(b.args, a.args);
  }
}

TEST(TimelineTest, KeepsSubMicrosecondPrecision) {
  Timeline t;
  t.events.push_back(Event(0, "compute", "tiny", "forward", 1.5e-6, 1.5e-6 + 2.5e-9));
  const Json doc = Json::parse(Write(t));
  const Json& x = doc["traceEvents"].back();
  EXPECT_EQ(x["ts"].get<double>(), 1.5);
  EXPECT_EQ(x["dur"].get<double>(), 0.0025);
  const Timeline back = Read(Write(t));
  EXPECT_NEAR(back.events[0].end_s - back.events[0].start_s, 2.5e-9, 1e-15);
}

TEST(TimelineTest, OutputIsValidJsonInTheTraceEventFormat) {
  const std::string text = Write(Sample());
  Json doc;
  ASSERT_NO_THROW(doc = Json::parse(text));
  ASSERT_TRUE(doc.is_object());
  EXPECT_EQ(doc["displayTimeUnit"], "ms");
  EXPECT_EQ(doc["otherData"]["name"], Sample().name);
  ASSERT_TRUE(doc["traceEvents"].is_array());
  size_t complete = 0;
  for (const Json& ev : doc["traceEvents"]) {
    ASSERT_TRUE(ev.contains("ph"));
    ASSERT_TRUE(ev["pid"].is_number_integer());
    ASSERT_TRUE(ev["tid"].is_number_integer());
    if (ev["ph"] != "X") continue;
    ++complete;
    EXPECT_TRUE(ev["ts"].is_number_float()) << ev;
    EXPECT_TRUE(ev["dur"].is_number_float()) << ev;
    EXPECT_TRUE(ev["name"].is_string());
    EXPECT_TRUE(ev["cat"].is_string());
    EXPECT_TRUE(ev["args"].is_object());
  }
  EXPECT_EQ(complete, Sample().events.size());
  // Microseconds: the send starts at 0.123456789012 s.
  bool found = false;
  for (const Json& ev : doc["traceEvents"]) {
    if (ev["ph"] == "X" && ev["name"] == "send mb0") {
      found = true;
      EXPECT_DOUBLE_EQ(ev["ts"].get<double>(), 123456.789012);
      EXPECT_EQ(ev["args"]["bytes"], "50331648");
    }
  }
  EXPECT_TRUE(found);
}

TEST(TimelineTest, MetadataForEveryRankAndStreamComesFirstAndSorted) {
  const Timeline t = Sample();
  const Json doc = Json::parse(Write(t));
  std::map<int64_t, std::string> process_names;
  std::map<int64_t, int64_t> process_sort;
  std::map<std::pair<int64_t, int64_t>, std::string> thread_names;
  std::vector<std::pair<int64_t, int64_t>> order;
  bool seen_non_metadata = false;
  for (const Json& ev : doc["traceEvents"]) {
    if (ev["ph"] != "M") {
      seen_non_metadata = true;
      continue;
    }
    EXPECT_FALSE(seen_non_metadata) << "metadata after events: " << ev;
    const int64_t pid = ev["pid"];
    const int64_t tid = ev["tid"];
    order.emplace_back(pid, tid);
    if (ev["name"] == "process_name") process_names[pid] = ev["args"]["name"];
    if (ev["name"] == "process_sort_index") process_sort[pid] = ev["args"]["sort_index"];
    if (ev["name"] == "thread_name") thread_names[{pid, tid}] = ev["args"]["name"];
  }
  EXPECT_TRUE(std::is_sorted(order.begin(), order.end()));
  EXPECT_EQ(process_names, (std::map<int64_t, std::string>{{0, "rank 0"}, {1, "rank 1"}}));
  EXPECT_EQ(process_sort, (std::map<int64_t, int64_t>{{0, 0}, {1, 1}}));
  // Fixed tids, then the others in first-seen order: ep-comm 5, host 6.
  const std::map<std::pair<int64_t, int64_t>, std::string> want = {
      {{0, 0}, "compute"}, {{0, 3}, "pp-comm"}, {{0, 5}, "ep-comm"}, {{0, 6}, "host"},
      {{1, 0}, "compute"}, {{1, 1}, "tp-comm"}, {{1, 3}, "pp-comm"}, {{1, 4}, "dp-comm"}};
  EXPECT_EQ(thread_names, want);
  // Every X event lies on a named thread, the one of its stream.
  for (const Json& ev : doc["traceEvents"]) {
    if (ev["ph"] != "X") continue;
    const std::pair<int64_t, int64_t> key{ev["pid"], ev["tid"]};
    EXPECT_TRUE(thread_names.contains(key)) << ev;
  }
}

TEST(TimelineTest, CpCommHasThreadIdTwo) {
  Timeline t;
  t.events.push_back(Event(3, "cp-comm", "ring attn", "comm", 0, 1e-3));
  const Json doc = Json::parse(Write(t));
  for (const Json& ev : doc["traceEvents"]) {
    EXPECT_EQ(ev["pid"], 3);
    EXPECT_EQ(ev["tid"], ev["name"] == "process_name" || ev["name"] == "process_sort_index" ? 0 : 2)
        << ev;
  }
}

TEST(TimelineTest, FlowPairHasMatchingIdsAndBindsInsideItsSlices) {
  const Json doc = Json::parse(Write(Sample()));
  const Json& events = doc["traceEvents"];
  std::vector<Json> starts;
  std::vector<Json> ends;
  for (size_t i = 0; i < events.size(); ++i) {
    const Json& ev = events[i];
    if (ev["ph"] != "s" && ev["ph"] != "f") continue;
    // Right after its slice, on the same track, strictly inside it.
    ASSERT_GT(i, 0u);
    const Json& slice = events[i - 1];
    EXPECT_EQ(slice["ph"], "X");
    EXPECT_EQ(ev["pid"], slice["pid"]);
    EXPECT_EQ(ev["tid"], slice["tid"]);
    EXPECT_GE(ev["ts"].get<double>(), slice["ts"].get<double>());
    EXPECT_LE(ev["ts"].get<double>(), slice["ts"].get<double>() + slice["dur"].get<double>());
    EXPECT_EQ(ev["name"], "flow");
    EXPECT_EQ(ev["cat"], "flow");
    (ev["ph"] == "s" ? starts : ends).push_back(ev);
    if (ev["ph"] == "s") {
      EXPECT_EQ(slice["name"], "send mb0");
      EXPECT_FALSE(ev.contains("bp"));
    } else {
      EXPECT_EQ(ev["bp"], "e");
    }
  }
  ASSERT_EQ(starts.size(), 1u);
  ASSERT_EQ(ends.size(), 2u);
  EXPECT_EQ(starts[0]["id"], 7);
  EXPECT_EQ(starts[0]["pid"], 0);
  EXPECT_EQ(starts[0]["tid"], 3);
  EXPECT_EQ(ends[0]["id"], 7);
  EXPECT_EQ(ends[0]["pid"], 1);
  EXPECT_EQ(ends[0]["tid"], 3);
  EXPECT_EQ(ends[1]["id"], 3);
}

TEST(TimelineTest, OutputIsDeterministicAndKeepsEventOrder) {
  const std::string a = Write(Sample());
  const std::string b = Write(Sample());
  EXPECT_EQ(a, b);
  const Json doc = Json::parse(a);
  std::vector<std::string> names;
  for (const Json& ev : doc["traceEvents"]) {
    if (ev["ph"] == "X") names.push_back(ev["name"]);
  }
  std::vector<std::string> want;
  for (const TimelineEvent& e : Sample().events) want.push_back(e.name);
  EXPECT_EQ(names, want);
  // Writing what was read back gives the same bytes again.
  EXPECT_EQ(Write(Read(a)), a);
}

TEST(TimelineTest, EmptyTimelineWritesAValidFile) {
  const Timeline empty;
  const std::string text = Write(empty);
  Json doc;
  ASSERT_NO_THROW(doc = Json::parse(text)) << text;
  EXPECT_TRUE(doc["traceEvents"].is_array());
  EXPECT_TRUE(doc["traceEvents"].empty());
  EXPECT_EQ(doc["displayTimeUnit"], "ms");
  EXPECT_EQ(doc["otherData"]["name"], "");
  const Timeline back = Read(text);
  EXPECT_TRUE(back.events.empty());
  EXPECT_EQ(back.name, "");
}

// A live run's device travels with its timeline (otherData.device), so that simulate
// --costs-from-timeline can refuse a timeline of another device (issue 31); a simulation's
// timeline has none and writes none.
TEST(TimelineTest, TheDeviceOfALiveRunRoundTrips) {
  Timeline t = Sample();
  t.device = "cpu-amd-epyc-7b13-1t";
  const std::string text = Write(t);
  EXPECT_EQ(Json::parse(text)["otherData"]["device"], "cpu-amd-epyc-7b13-1t");
  EXPECT_EQ(Read(text).device, "cpu-amd-epyc-7b13-1t");
  const std::string simulated = Write(Sample());
  EXPECT_FALSE(Json::parse(simulated)["otherData"].contains("device"));
  EXPECT_EQ(Read(simulated).device, "");
}

TEST(TimelineTest, ReadsAHandWrittenTraceWithFlowsBeforeTheirSlices) {
  // Metadata last, the flow events before the slices they bind to, integer times.
  const Timeline t = Read(R"({"traceEvents": [
    {"ph": "s", "name": "x", "cat": "y", "id": 4, "pid": 0, "tid": 9, "ts": 10},
    {"ph": "f", "bp": "e", "name": "x", "cat": "y", "id": 4, "pid": 2, "tid": 9, "ts": 30},
    {"ph": "X", "name": "send", "pid": 0, "tid": 9, "ts": 5, "dur": 10},
    {"ph": "X", "name": "recv", "cat": "comm", "pid": 2, "tid": 9, "ts": 25, "dur": 10,
     "args": {"bytes": 1024, "peer": "0"}},
    {"ph": "M", "name": "thread_name", "pid": 0, "tid": 9, "args": {"name": "pp-comm"}},
    {"ph": "M", "name": "thread_name", "pid": 2, "tid": 9, "args": {"name": "pp-comm"}}
  ]})",
                          "hand.json");
  ASSERT_EQ(t.events.size(), 2u);
  EXPECT_EQ(t.events[0].name, "send");
  EXPECT_EQ(t.events[0].category, "");
  EXPECT_EQ(t.events[0].stream, "pp-comm");
  EXPECT_DOUBLE_EQ(t.events[0].start_s, 5e-6);
  EXPECT_DOUBLE_EQ(t.events[0].end_s, 15e-6);
  EXPECT_EQ(t.events[0].flow_id, 4);
  EXPECT_TRUE(t.events[0].flow_start);
  EXPECT_EQ(t.events[1].rank, 2);
  EXPECT_EQ(t.events[1].flow_id, 4);
  EXPECT_FALSE(t.events[1].flow_start);
  EXPECT_EQ(t.events[1].args,
            (std::map<std::string, std::string>{{"bytes", "1024"}, {"peer", "0"}}));
}

TEST(TimelineTest, MalformedInputsNameTheOriginAndTheEventIndex) {
  ExpectReadError("{\"traceEvents\": [", {"malformed JSON"});
  ExpectReadError("not json at all", {"malformed JSON"});
  ExpectReadError("[]", {"not a JSON object"});
  ExpectReadError(R"({"displayTimeUnit": "ms"})", {"no \"traceEvents\""});
  ExpectReadError(R"({"traceEvents": {}})", {"\"traceEvents\" is not an array"});
  ExpectReadError(TraceWith(R"({"ph": "X", "name": "a", "pid": 0, "tid": 0, "ts": 1, "dur": 1},
      {"ph": "X", "name": "b", "pid": 0, "tid": 0, "dur": 1})"),
                  {"traceEvents[2]", "\"ts\""});
  ExpectReadError(TraceWith(R"({"ph": "X", "name": "b", "pid": 0, "tid": 0, "ts": 1})"),
                  {"traceEvents[1]", "\"dur\""});
  ExpectReadError(TraceWith(R"({"ph": "X", "name": "b", "tid": 0, "ts": 1, "dur": 1})"),
                  {"traceEvents[1]", "\"pid\""});
  ExpectReadError(TraceWith(R"({"ph": "X", "name": "b", "pid": 0, "ts": 1, "dur": 1})"),
                  {"traceEvents[1]", "\"tid\""});
  ExpectReadError(TraceWith(R"({"ph": "X", "name": "b", "pid": 0, "tid": 0, "ts": "1", "dur": 1})"),
                  {"traceEvents[1]", "\"ts\" is not a number"});
  ExpectReadError(TraceWith(R"({"ph": "X", "name": "b", "pid": 0.5, "tid": 0, "ts": 1, "dur": 1})"),
                  {"traceEvents[1]", "\"pid\" is not a 64-bit integer"});
  ExpectReadError(TraceWith(R"({"ph": "X", "name": "b", "pid": 0, "tid": 0, "ts": 1, "dur": -1})"),
                  {"traceEvents[1]", "negative \"dur\""});
  ExpectReadError(TraceWith(R"({"ph": "X", "pid": 0, "tid": 0, "ts": 1, "dur": 1})"),
                  {"traceEvents[1]", "\"name\""});
  ExpectReadError(TraceWith(R"({"ph": "X", "name": "b", "pid": 0, "tid": 7, "ts": 1, "dur": 1})"),
                  {"traceEvents[1]", "no \"thread_name\" metadata for pid 0 tid 7"});
  ExpectReadError(TraceWith(R"(42)"), {"traceEvents[1]", "not a JSON object"});
  ExpectReadError(TraceWith(R"({"name": "b"})"), {"traceEvents[1]", "\"ph\""});
  ExpectReadError(TraceWith(R"({"ph": "B", "name": "b", "pid": 0, "tid": 0, "ts": 1})"),
                  {"traceEvents[1]", "unsupported phase \"B\""});
  ExpectReadError(TraceWith(R"({"ph": "X", "name": "b", "pid": 0, "tid": 0, "ts": 1, "dur": 1},
      {"ph": "s", "name": "flow", "cat": "flow", "pid": 0, "tid": 0, "ts": 5, "id": 1})"),
                  {"traceEvents[2]", "lies in no \"X\" slice"});
  ExpectReadError(TraceWith(R"({"ph": "X", "name": "b", "pid": 0, "tid": 0, "ts": 1, "dur": 1},
      {"ph": "f", "name": "flow", "cat": "flow", "pid": 0, "tid": 0, "ts": 1.5})"),
                  {"traceEvents[2]", "\"id\""});
  ExpectReadError(TraceWith(R"({"ph": "X", "name": "b", "pid": 0, "tid": 0, "ts": 1, "dur": 1},
      {"ph": "s", "name": "flow", "cat": "flow", "pid": 0, "tid": 0, "ts": 1.5, "id": 1},
      {"ph": "f", "name": "flow", "cat": "flow", "pid": 0, "tid": 0, "ts": 1.5, "id": 2})"),
                  {"traceEvents[3]", "already has flow id 1"});
  ExpectReadError(TraceWith(R"({"ph": "M", "name": "thread_name", "pid": 0, "tid": 0,
      "args": {"name": "tp-comm"}})"),
                  {"traceEvents[1]", "named both"});
  ExpectReadError(TraceWith(R"({"ph": "M", "name": "thread_name", "pid": 0, "tid": 1})"),
                  {"traceEvents[1]", "args.name"});
}

TEST(TimelineTest, WriterRejectsWhatTheFormatCannotCarry) {
  Timeline t;
  t.events.push_back(Event(0, "compute", "ok", "forward", 0, 1));
  t.events.push_back(Event(0, "compute", "backwards", "forward", 2, 1));
  ExpectWriteError(t, "event 1 (\"backwards\"): end_s 1 is before start_s 2");

  t.events[1] = Event(0, "compute", "nan", "forward", std::nan(""), 1);
  ExpectWriteError(t, "event 1 (\"nan\"): non-finite time");
  t.events[1] = Event(0, "compute", "inf", "forward", 0, std::numeric_limits<double>::infinity());
  ExpectWriteError(t, "event 1 (\"inf\"): non-finite time");
  t.events[1] = Event(-1, "compute", "neg", "forward", 0, 1);
  ExpectWriteError(t, "event 1 (\"neg\"): negative rank -1");

  t.events[1] = Event(0, "pp-comm", "send a", "comm", 0, 1);
  t.events[1].flow_id = 5;
  t.events[1].flow_start = true;
  t.events.push_back(t.events[1]);
  t.events[2].name = "send b";
  ExpectWriteError(t, "event 2 (\"send b\"): flow id 5 already used on the send");
}

}  // namespace
}  // namespace traintwin

namespace traintwin {
namespace {

// The streaming writer (what `simulate --out` uses): events written one at a time, metadata at
// the end; the trace reads back to the same events as write_chrome_trace's.
TEST(TimelineTest, StreamingWriterReadsBackLikeTheWholeTimeline) {
  const Timeline t = Sample();
  std::ostringstream streamed;
  ChromeTraceWriter w(streamed, t.name);
  for (const TimelineEvent& e : t.events) w.write(e);
  w.finish();
  EXPECT_EQ(w.events(), static_cast<int64_t>(t.events.size()));
  std::istringstream a(streamed.str());
  std::istringstream b(Write(t));
  const Timeline x = read_chrome_trace(a, "streamed");
  const Timeline y = read_chrome_trace(b, "whole");
  EXPECT_EQ(x.name, t.name);
  ASSERT_EQ(x.events.size(), y.events.size());
  for (size_t i = 0; i < x.events.size(); ++i) {
    EXPECT_EQ(x.events[i].name, y.events[i].name);
    EXPECT_EQ(x.events[i].rank, y.events[i].rank);
    EXPECT_EQ(x.events[i].stream, y.events[i].stream);
    EXPECT_EQ(x.events[i].start_s, y.events[i].start_s);
    EXPECT_EQ(x.events[i].end_s, y.events[i].end_s);
    EXPECT_EQ(x.events[i].flow_id, y.events[i].flow_id);
    EXPECT_EQ(x.events[i].args, y.events[i].args);
  }
  // A bad event is refused with its write order, as write_chrome_trace names it.
  std::ostringstream sink;
  ChromeTraceWriter bad(sink, "bad");
  bad.write(t.events[0]);
  TimelineEvent back = t.events[0];
  back.end_s = -1;
  EXPECT_THROW(bad.write(back), InvalidArgument);
}

// Issue 14 defect 1: "ts": 1e999 made nlohmann throw out_of_range, which escaped the reader
// (only parse_error was caught) and aborted `traintwin report`.
TEST(TimelineReliability, NumberOutOfRangeIsAnErrorNamingTheFile) {
  for (const std::string text :
       {R"({"traceEvents": [{"ph": "X", "ts": 1e999, "dur": 1, "pid": 0, "tid": 0}]})",
        R"({"traceEvents": [{"ph": "X", "ts": 1, "dur": -1e999, "pid": 0, "tid": 0}]})"}) {
    std::istringstream in(text);
    try {
      read_chrome_trace(in, "out/timeline.json");
      FAIL() << "accepted " << text;
    } catch (const Error& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("out/timeline.json"));
    }
  }
}

}  // namespace
}  // namespace traintwin
