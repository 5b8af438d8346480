// The HTML report: Vega-Lite spec generation (pure functions), write_report's files and errors,
// `traintwin report DIR`, and the page rendered in headless Chromium (skipped, saying why, when
// /usr/bin/chromium or npm is missing).
#include "viz/report.hpp"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <string>

#include "core/error.hpp"
#include "sim/summary_document.hpp"
#include "sim/sweep_record.hpp"
#include "tests/cli/run_cli.hpp"

namespace traintwin {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

const fs::path kSource = TRAINTWIN_SOURCE_DIR;

/// A fresh, empty folder for one test (kept afterwards, for a look at what it wrote).
fs::path fresh_dir(const std::string& name) {
  const fs::path dir =
      fs::path(::testing::TempDir()) / ("traintwin_report_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

/// A vega folder with stand-in scripts (no npm needed): vega-embed resolves, nothing draws.
fs::path fake_vega_dir() {
  const fs::path dir = fresh_dir("fake_vega");
  write_text(dir / "vega.min.js", "window.vega = {Warn: 2}; /* '</script>' in a string */");
  write_text(dir / "vega-lite.min.js", "window.vegaLite = {};");
  write_text(dir / "vega-embed.min.js",
             "window.vegaEmbed = function () { return Promise.resolve({}); };");
  return dir;
}

/// A summary.json (schema version 2, every key its writer writes): PP 2, TP 2, DP 2 (8 GPUs).
ojson small_summary() {
  return ojson::parse(R"({
    "schema_version": 2,
    "scenario": "unit", "num_gpus": 8, "gpu": "H100",
    "layout": {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2,
               "virtual_pipeline_model_parallel_size": 1, "context_parallel_size": 1,
               "data_parallel_size": 2, "sequence_parallel": false, "micro_batch_size": 1,
               "global_batch_size": 8, "num_micro_batches": 4, "recompute_granularity": "none",
               "rank_order": "tp-cp-dp-pp",
               "decoder_first_pipeline_num_layers": null, "decoder_last_pipeline_num_layers": null,
               "account_for_embedding_in_pipeline_split": false,
               "account_for_loss_in_pipeline_split": false,
               "layers_per_model_chunk": [[2], [2]]},
    "iteration_time_s": 0.5, "tokens_per_s": 12345.6, "tokens_per_s_per_gpu": 1543.2,
    "model_tflops_per_gpu": 321.0, "mfu": 0.4213, "hfu": 0.4567, "mfu_formula": "MFU = ...",
    "pipeline_bubble_fraction": 0.125,
    "exposed_comm_s": {"tp": 0.01, "cp": 0.004, "ep": 0.006, "pp": 0.02, "dp": 0.03},
    "sync_wait_s": 0.005,
    "compute_s": 0.4, "optimizer_s": 0.005,
    "peak_memory_bytes": 42949672960, "fits_in_memory": true, "gpu_memory_bytes": 85899345920,
    "memory_per_stage": [
      {"pp_rank": 0, "layers": 2, "parameters": 1000, "in_flight": 2, "in_flight_layers": 4,
       "weights_bytes": 1073741824, "fp8_weight_copies_bytes": 0, "gradients_bytes": 2147483648,
       "optimizer_bytes": 3221225472, "activations_bytes": 4294967296,
       "embedding_and_logits_bytes": 536870912, "expert_parameters": 0,
       "moe_dispatch_buffers_bytes": 0, "total_bytes": 11274289152},
      {"pp_rank": 1, "layers": 2, "parameters": 1000, "in_flight": 1, "in_flight_layers": 2,
       "weights_bytes": 1073741824, "fp8_weight_copies_bytes": 0, "gradients_bytes": 2147483648,
       "optimizer_bytes": 3221225472, "activations_bytes": 2147483648,
       "embedding_and_logits_bytes": 1073741824, "expert_parameters": 0,
       "moe_dispatch_buffers_bytes": 0, "total_bytes": 9663676416}],
    "cost_sources": {"measured": 0.25, "roofline": 0.75},
    "busiest_links": [{"name": "leaf0-spine1", "tier": "spine", "bytes": 1e9,
                       "utilization": 0.5},
                      {"name": "node0-nic0", "tier": "rail", "bytes": 5e8,
                       "utilization": 0.25}],
    "link_tiers": [], "hot_links": [], "link_series": [],
    "critical_rank": {"rank": 4, "compute_s": 0.4, "optimizer_s": 0.005, "exposed_tp_s": 0.01, "exposed_cp_s": 0.0, "exposed_ep_s": 0.0,
                      "exposed_pp_s": 0.02, "exposed_dp_s": 0.03, "bubble_s": 0.035,
       "sync_wait_s": 0.005},
    "per_stage": [
      {"rank": 0, "compute_s": 0.4, "optimizer_s": 0.005, "exposed_tp_s": 0.01, "exposed_cp_s": 0.0, "exposed_ep_s": 0.0,
       "exposed_pp_s": 0.02, "exposed_dp_s": 0.03, "bubble_s": 0.035,
       "sync_wait_s": 0.005},
      {"rank": 4, "compute_s": 0.4, "optimizer_s": 0.005, "exposed_tp_s": 0.01, "exposed_cp_s": 0.0, "exposed_ep_s": 0.0,
       "exposed_pp_s": 0.02, "exposed_dp_s": 0.03, "bubble_s": 0.035,
       "sync_wait_s": 0.005}],
    "late_peers": [{"rank": 3, "group": "dp", "wait_s": 0.005, "waits": 2,
                    "op": "grad-sync dp all_reduce grads", "largest_wait_s": 0.003}],
    "collective_algorithms": {"ring": 12}, "reductions": [], "replayed_ranks": 8,
    "events": 100, "ops": 80, "flows": 20, "solver_flows": 10, "max_solver_flows": 4
  })");
}

/// `j` read as summary.json (read_summary_json), the typed document the charts take.
SummaryDocument typed(const ojson& j) { return read_summary_json(j, "summary.json"); }

ReportLayout small_layout() { return report_layout(typed(small_summary()).layout); }

TimelineEvent op(int64_t rank, const std::string& stream, const std::string& name,
                 const std::string& category, double start_s, double end_s) {
  TimelineEvent e;
  e.rank = rank;
  e.stream = stream;
  e.name = name;
  e.category = category;
  e.start_s = start_s;
  e.end_s = end_s;
  return e;
}

/// Ranks 0, 1 (stage 0, TP ranks 0 and 1) and 4 (stage 1): `per_block` ops for each of
/// `micro_batches` forward and backward blocks on the compute stream, plus one TP all-reduce
/// per block on tp-comm.
Timeline synthetic_timeline(int micro_batches, int per_block) {
  Timeline t;
  t.name = "unit";
  for (int64_t rank : {0, 1, 4}) {
    double now = rank == 4 ? 0.001 : 0.0;
    for (const char* phase : {"fwd", "bwd"}) {
      for (int mb = 0; mb < micro_batches; ++mb) {
        for (int l = 0; l < per_block; ++l) {
          TimelineEvent c = op(rank, "compute", fmt::format("{} mb{} L{} mlp", phase, mb, l),
                               phase[0] == 'f' ? "forward" : "backward", now, now + 1e-3);
          c.args = {{"phase", phase}, {"micro_batch", std::to_string(mb)}};
          t.events.push_back(c);
          now += 1e-3;
        }
        TimelineEvent ar = op(rank, "tp-comm", fmt::format("{} mb{} tp all-reduce", phase, mb),
                              "comm", now - 1e-3, now);
        ar.args["bytes"] = "1048576";
        ar.args["algorithm"] = "ring";
        ar.args["phase"] = phase;
        ar.args["micro_batch"] = std::to_string(mb);
        t.events.push_back(ar);
      }
    }
  }
  return t;
}

/// Data rows of every stage of a Gantt spec.
size_t gantt_rows(const json& spec) {
  size_t n = 0;
  for (const json& stage : spec.at("vconcat")) n += stage.at("data").at("values").size();
  return n;
}

// ----- spec generation --------------------------------------------------------------------------

TEST(ReportSpec, GanttHasOneDataRowPerOpOfTheTracedRanksAndOneChartPerStage) {
  const Timeline t = synthetic_timeline(4, 3);  // 3 ranks x 2 phases x 4 mbs x (3 + 1) = 96
  const GanttChart g = gantt_chart(t, small_layout(), "timeline.json");
  EXPECT_EQ(g.ops, 96u);
  EXPECT_EQ(g.bars, 96u);
  EXPECT_FALSE(g.compute_only);
  EXPECT_FALSE(g.merged);
  EXPECT_EQ(gantt_rows(g.spec), 96u);
  ASSERT_EQ(g.spec["vconcat"].size(), 2u);  // stage 0 (ranks 0, 1), stage 1 (rank 4)
  EXPECT_EQ(g.spec["vconcat"][0]["data"]["values"].size(), 64u);
  EXPECT_EQ(g.spec["vconcat"][1]["layer"][0]["name"], "gantt_bars_stage1");
  std::set<std::string> lanes;
  for (const json& row : g.spec["vconcat"][0]["data"]["values"]) lanes.insert(row["lane"]);
  EXPECT_EQ(lanes, (std::set<std::string>{"rank 0 compute", "rank 0 tp-comm", "rank 1 compute",
                                          "rank 1 tp-comm"}));
  const json& first = g.spec["vconcat"][0]["data"]["values"][0];
  EXPECT_EQ(first["micro_batch"], 0);
  EXPECT_EQ(first["category"], "forward");
  EXPECT_DOUBLE_EQ(first["start_ms"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(first["end_ms"].get<double>(), 1.0);
}

// The micro-batch and phase come from the events' data (op_event's args), never from the label:
// a label without "mb" still gets its micro-batch, and a label with a misleading "mb" does not.
TEST(ReportSpec, GanttReadsMicroBatchFromArgsNotFromTheLabel) {
  Timeline t;
  TimelineEvent a = op(0, "compute", "attention core", "forward", 0, 1e-3);
  a.args = {{"phase", "fwd"}, {"micro_batch", "5"}};
  TimelineEvent b = op(0, "compute", "optimizer mb7 step", "optimizer", 1e-3, 2e-3);
  b.args = {{"phase", "optimizer"}};
  t.events = {a, b};
  const GanttChart g = gantt_chart(t, small_layout(), "timeline.json");
  const json& rows = g.spec["vconcat"][0]["data"]["values"];
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["micro_batch"], 5);
  EXPECT_TRUE(rows[1]["micro_batch"].is_null());
}

TEST(ReportSpec, GanttLabelsMicroBatchesAndPutsCommDetailsInTooltips) {
  const GanttChart g = gantt_chart(synthetic_timeline(2, 2), small_layout(), "timeline.json");
  for (const json& stage : g.spec["vconcat"]) {
    for (const json& row : stage["data"]["values"]) {
      if (row["stream"] == "compute") {
        // Each op is 1 ms of a ~17 ms iteration: wide enough for its micro-batch number.
        EXPECT_EQ(row["label"], std::to_string(row["micro_batch"].get<int>())) << row.dump();
        EXPECT_EQ(row["comm"], "");
      } else {
        EXPECT_EQ(row["label"], "");
        EXPECT_EQ(row["comm"], "1048576 bytes, ring");
      }
    }
  }
  // The colour scale fixes the categories' order and colours.
  const json& color = g.spec["vconcat"][0]["layer"][0]["encoding"]["color"];
  EXPECT_EQ(color["scale"]["domain"],
            json({"forward", "backward", "wgrad", "recompute", "comm", "optimizer", "other"}));
}

TEST(ReportSpec, LargeGanttKeepsTheComputeStreamOfTpRankZeroOfEachStage) {
  const Timeline t = synthetic_timeline(4, 3);  // 96 ops; ranks 0 and 4 have TP rank 0
  GanttOptions opt;
  opt.max_bars = 60;
  const GanttChart g = gantt_chart(t, small_layout(), "timeline.json", opt);
  EXPECT_TRUE(g.compute_only);
  EXPECT_FALSE(g.merged);
  EXPECT_EQ(g.kept_ops, 48u);  // ranks 0 and 4, compute: 2 phases x 4 mbs x 3 layers each
  EXPECT_EQ(gantt_rows(g.spec), 48u);
  for (const json& stage : g.spec["vconcat"]) {
    for (const json& row : stage["data"]["values"]) {
      EXPECT_EQ(row["stream"], "compute");
      EXPECT_NE(row["rank"], 1);
    }
  }
}

TEST(ReportSpec, VeryLargeGanttMergesMicroBatchBlocks) {
  const Timeline t = synthetic_timeline(4, 3);
  GanttOptions opt;
  opt.max_bars = 20;
  const GanttChart g = gantt_chart(t, small_layout(), "timeline.json", opt);
  EXPECT_TRUE(g.compute_only);
  EXPECT_TRUE(g.merged);
  EXPECT_EQ(g.kept_ops, 48u);
  EXPECT_EQ(g.bars, 16u);  // 2 ranks x 2 phases x 4 micro-batches
  EXPECT_EQ(gantt_rows(g.spec), 16u);
  const json& block = g.spec["vconcat"][0]["data"]["values"][1];
  EXPECT_EQ(block["name"], "fwd mb1 (3 ops)");
  EXPECT_DOUBLE_EQ(block["duration_ms"].get<double>(), 3.0);
}

TEST(ReportSpec, GanttRejectsARankOutsideTheLayoutNamingTheFile) {
  Timeline t = synthetic_timeline(1, 1);
  t.events.push_back(op(8, "compute", "fwd mb0 L0 mlp", "forward", 0, 1));
  try {
    gantt_chart(t, small_layout(), "run/timeline.json");
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("run/timeline.json: rank 8 is outside the layout's 8 ranks"));
  }
}

TEST(ReportSpec, SummaryTableHasTheHeadlineNumbers) {
  const std::string html = summary_table_html(typed(small_summary()));
  for (const char* text :
       {"unit", "8 x H100", "TP 2 x CP 1 x PP 2 x DP 2", "500.000 ms", "12346", "1543.2", "42.1 %",
        "45.7 %", "12.5 %", "10.000 ms / 4.000 ms / 6.000 ms / 20.000 ms / 30.000 ms",
        "40.00 GiB / 80.00 GiB (fits)", "measured 25.0 %, roofline 75.0 %", "2 / 2 (even split)",
        "sync wait (late peers, critical rank)", "rank 3 (dp) 5.000 ms"}) {
    EXPECT_THAT(html, HasSubstr(text));
  }
}

// A mixture of experts shows its expert layout beside the dense one (issue 31: EP was invisible).
TEST(ReportSpec, SummaryTableShowsTheExpertLayoutOfAnMoe) {
  ojson summary = small_summary();
  summary["layout"]["expert_model_parallel_size"] = 4;
  summary["layout"]["expert_tensor_parallel_size"] = 1;
  summary["layout"]["expert_data_parallel_size"] = 1;
  const std::string html = summary_table_html(typed(summary));
  EXPECT_THAT(html, HasSubstr("TP 2 x CP 1 x PP 2 x DP 2 (experts: EP 4 x ETP 1 x expert DP 1)"));
  EXPECT_THAT(summary_table_html(typed(small_summary())), Not(HasSubstr("experts:")));
}

// The summary is read once, typed (read_summary_json); a missing or mistyped field stops the
// report there, naming the file and the key.
TEST(ReportSpec, ReadingTheSummaryNamesTheFileAndKeyOfAMissingField) {
  ojson s = small_summary();
  s.erase("mfu");
  EXPECT_THAT(
      [&] { read_summary_json(s, "out/summary.json"); },
      ::testing::ThrowsMessage<Error>(::testing::StrEq("out/summary.json: missing key 'mfu'")));
  s = small_summary();
  s["exposed_comm_s"]["pp"] = "fast";
  EXPECT_THAT([&] { read_summary_json(s, "out/summary.json"); },
              ::testing::ThrowsMessage<Error>(HasSubstr("'exposed_comm_s.pp' must be a number")));
}

TEST(ReportSpec, TimeBreakdownHasNinePartsForTheCriticalRankAndEachStage) {
  const json spec = time_breakdown_spec(typed(small_summary()));
  const json& values = spec["data"]["values"];
  ASSERT_EQ(values.size(), 27u);
  EXPECT_EQ(values[0]["row"], "critical path (rank 4)");
  EXPECT_EQ(values[0]["part"], "compute");
  EXPECT_DOUBLE_EQ(values[0]["ms"].get<double>(), 400.0);
  EXPECT_EQ(values[2]["part"], "exposed CP comm");
  EXPECT_EQ(values[3]["part"], "exposed EP comm");
  EXPECT_EQ(values[6]["part"], "pipeline bubble");
  EXPECT_DOUBLE_EQ(values[6]["ms"].get<double>(), 35.0);
  EXPECT_EQ(values[7]["part"], "sync wait (late peer)");
  EXPECT_DOUBLE_EQ(values[7]["ms"].get<double>(), 5.0);
  EXPECT_EQ(values[26]["row"], "stage 1 (rank 4)");
  EXPECT_EQ(values[26]["part"], "optimizer");
  // One colour per part: with fewer colours than parts Vega repeats them, and the bubble read
  // as compute, the sync wait as TP communication (seen in a headless screenshot).
  const json& scale = spec["encoding"]["color"]["scale"];
  ASSERT_EQ(scale["domain"].size(), 9u);
  ASSERT_EQ(scale["range"].size(), scale["domain"].size());
  const std::set<std::string> colours(scale["range"].begin(), scale["range"].end());
  EXPECT_EQ(colours.size(), 9u);
}

TEST(ReportSpec, MemoryStacksFivePartsPerStageUnderTheCapacityRule) {
  const json spec = memory_spec(typed(small_summary()));
  ASSERT_EQ(spec["data"]["values"].size(), 10u);
  EXPECT_EQ(spec["data"]["values"][3]["part"], "activations");
  EXPECT_DOUBLE_EQ(spec["data"]["values"][3]["GiB"].get<double>(), 4.0);
  EXPECT_DOUBLE_EQ(spec["data"]["values"][0]["total_GiB"].get<double>(), 10.5);
  const json& rule = spec["layer"][1];
  EXPECT_EQ(rule["mark"]["type"], "rule");
  EXPECT_DOUBLE_EQ(rule["data"]["values"][0]["GiB"].get<double>(), 80.0);
  EXPECT_EQ(spec["layer"][2]["data"]["values"][0]["label"], "GPU memory 80.0 GiB");
}

// An uneven pipeline split (summary.json's layout.layers_per_model_chunk and memory_per_stage
// layers, as `simulate --out` writes them): the summary table states it, the memory bars and the
// Gantt charts name each stage's layers.
TEST(ReportSpec, UnevenPipelineSplitIsShownPerStage) {
  ojson summary = small_summary();
  summary["layout"]["virtual_pipeline_model_parallel_size"] = 2;
  summary["layout"]["account_for_embedding_in_pipeline_split"] = true;
  summary["layout"]["account_for_loss_in_pipeline_split"] = true;
  summary["layout"]["layers_per_model_chunk"] =
      ojson::array({ojson::array({1, 2}), ojson::array({2, 1})});
  summary["memory_per_stage"][0]["layers"] = 3;
  summary["memory_per_stage"][1]["layers"] = 3;
  EXPECT_THAT(summary_table_html(typed(summary)),
              HasSubstr("transformer layers per stage (model chunks joined by +): 1+2 / 2+1 "
                        "(embedding counted as a layer, loss counted as a layer)"));
  const json memory = memory_spec(typed(summary));
  EXPECT_EQ(memory["data"]["values"][0]["stage"], "stage 0 (3 layers)");
  const ReportLayout layout = report_layout(typed(summary).layout);
  EXPECT_EQ(layout.layers_per_stage, (std::vector<int64_t>{3, 3}));
  const GanttChart g = gantt_chart(synthetic_timeline(2, 2), layout, "timeline.json");
  EXPECT_EQ(g.spec["vconcat"][0]["title"]["text"], "pipeline stage 0 (3 layers)");
  // The even split of the small summary.
  EXPECT_EQ(memory_spec(typed(small_summary()))["data"]["values"][0]["stage"],
            "stage 0 (2 layers)");
  summary["layout"]["layers_per_model_chunk"] = ojson::array({ojson::array({1, "x"})});
  EXPECT_THAT([&] { typed(summary); },
              ::testing::ThrowsMessage<Error>(HasSubstr(
                  "summary.json: 'layout.layers_per_model_chunk[0][1]' must be an integer")));
}

TEST(ReportSpec, LinksChartListsEveryBusiestLinkAndIsLeftOutWithoutLinks) {
  const auto spec = links_spec(typed(small_summary()));
  ASSERT_TRUE(spec.has_value());
  ASSERT_EQ((*spec)["data"]["values"].size(), 2u);
  EXPECT_EQ((*spec)["data"]["values"][0]["link"], "leaf0-spine1");
  EXPECT_DOUBLE_EQ((*spec)["data"]["values"][0]["GB"].get<double>(), 1.0);
  ojson s = small_summary();
  s["busiest_links"] = ojson::array();
  EXPECT_FALSE(links_spec(typed(s)).has_value());
}

/// One sweep.json row (every key sweep_record_json writes).
ojson sweep_row(const std::string& status, int64_t rank, int tp, int pp, int mbs, int vpp,
                double tokens_per_s_per_gpu, double excess_bytes = 0) {
  static int64_t index = 0;
  ojson row = {{"rank", rank > 0 ? ojson(rank) : ojson(nullptr)},
               {"status", status},
               {"index", index++},
               {"configuration",
                {{"num_gpus", 8},
                 {"tensor_model_parallel_size", tp},
                 {"context_parallel_size", 1},
                 {"pipeline_model_parallel_size", pp},
                 {"virtual_pipeline_model_parallel_size", vpp},
                 {"data_parallel_size", 8 / tp / pp},
                 {"micro_batch_size", mbs},
                 {"global_batch_size", 64},
                 {"recompute_granularity", "none"},
                 {"sequence_parallel", false},
                 {"use_distributed_optimizer", true},
                 {"fp8_format", "none"},
                 {"expert_model_parallel_size", 1},
                 {"expert_tensor_parallel_size", tp},
                 {"gpus_per_replica", tp * pp},
                 {"pipeline_schedule", "1f1b"}}},
               {"memory",
                {{"peak_bytes", 1e10},
                 {"capacity_bytes", 8e10},
                 {"excess_bytes", excess_bytes},
                 {"fits", excess_bytes <= 0},
                 {"reserve_bytes", 5e9},
                 {"at_risk", false}}},
               {"adjustments", ojson::array()},
               {"reason", status == "invalid" || status == "error" ? ojson("why") : ojson(nullptr)},
               {"metrics", nullptr}};
  if (status == "ranked") {
    row["metrics"] = {
        {"iteration_time_s", 1.5},
        {"tokens_per_s", tokens_per_s_per_gpu * 8},
        {"tokens_per_s_per_gpu", tokens_per_s_per_gpu},
        {"model_tflops_per_gpu", 100.0},
        {"mfu", 0.4},
        {"hfu", 0.4},
        {"mfu_formula", "MFU = ..."},
        {"pipeline_bubble_fraction", 0.1},
        {"exposed_comm_s", {{"tp", 0.0}, {"cp", 0.0}, {"ep", 0.0}, {"pp", 0.0}, {"dp", 0.0}}},
        {"sync_wait_s", 0.0},
        {"compute_s", 1.0},
        {"optimizer_s", 0.1},
        {"peak_memory_bytes", 1e10},
        {"fits_in_memory", true},
        {"cost_sources", ojson::object()},
        {"mode", "analytical"}};
  }
  return row;
}

/// sweep.json (schema version 1) of `rows`.
ojson sweep_file(const ojson& rows) {
  return {{"schema_version", kSweepSchemaVersion}, {"rows", rows}};
}

ojson small_sweep() {
  return sweep_file(ojson::array(
      {sweep_row("ranked", 2, 1, 1, 1, 1, 900), sweep_row("ranked", 1, 1, 2, 1, 1, 1000),
       sweep_row("oom", 0, 1, 2, 4, 1, 0, 3 * 1073741824.0),
       sweep_row("oom", 0, 1, 2, 4, 2, 0, 2 * 1073741824.0),  // same cell
       sweep_row("ranked", 3, 2, 2, 4, 2, 800),
       sweep_row("oom", 0, 2, 2, 4, 1, 0, 1e9),  // cell has a ranked row
       sweep_row("invalid", 0, 4, 4, 1, 1, 0), sweep_row("error", 0, 2, 1, 1, 1, 0)}));
}

/// `j` read as sweep.json (read_sweep_json), the typed rows the charts take.
std::vector<SweepRecord> records(const ojson& j) { return read_sweep_json(j, "sweep.json"); }

TEST(ReportSpec, SweepHeatmapMarksCellsWhereEveryConfigurationIsOom) {
  const auto spec = sweep_heatmap_spec(records(small_sweep()));
  ASSERT_TRUE(spec.has_value());
  std::map<std::tuple<int, int, int>, json> cells;
  for (const json& v : (*spec)["data"]["values"]) {
    cells[{v["tp"].get<int>(), v["PP"].get<int>(), v["micro_batch_size"].get<int>()}] = v;
  }
  ASSERT_EQ(cells.size(), 4u);  // invalid and error rows are left out
  const json& oom = cells.at({1, 2, 4});
  EXPECT_EQ(oom["status"], "oom");
  EXPECT_EQ(oom["label"], "OOM");
  EXPECT_EQ(oom["oom_configurations"], 2);
  EXPECT_EQ(oom["detail"], "every configuration OOM; smallest excess 2.00 GiB");
  EXPECT_FALSE(oom.contains("tokens_per_s_per_gpu"));
  const json& mixed = cells.at({2, 2, 4});  // one OOM, one ranked: the ranked one is shown
  EXPECT_EQ(mixed["status"], "ranked");
  EXPECT_DOUBLE_EQ(mixed["tokens_per_s_per_gpu"].get<double>(), 800);
  EXPECT_EQ(mixed["detail"], "best: rank 3, VPP 2, recompute none, SP off, dist-opt on, DP 2");
  EXPECT_EQ(cells.at({1, 2, 1})["label"], "1000");
  // Layers: ranked cells, OOM cells, labels; faceted per TP size.
  EXPECT_EQ((*spec)["spec"]["layer"][0]["name"], "heat_cells");
  EXPECT_EQ((*spec)["spec"]["layer"][1]["name"], "oom_cells");
  EXPECT_EQ((*spec)["spec"]["layer"][1]["transform"][0]["filter"], "datum.status == 'oom'");
  EXPECT_EQ((*spec)["facet"]["column"]["field"], "TP");
}

TEST(ReportSpec, SweepHeatmapIsLeftOutWhenNothingRanksOrOoms) {
  EXPECT_FALSE(sweep_heatmap_spec(
                   records(sweep_file(ojson::array({sweep_row("invalid", 0, 4, 4, 1, 1, 0)}))))
                   .has_value());
}

/// A scaling study: `row` at `gpus` GPUs, DP and throughput following (tokens/s/GPU kept).
ojson at_gpus(ojson row, int64_t gpus) {
  ojson& c = row["configuration"];
  c["num_gpus"] = gpus;
  c["data_parallel_size"] = gpus / c["tensor_model_parallel_size"].get<int64_t>() /
                            c["pipeline_model_parallel_size"].get<int64_t>();
  if (row["metrics"].is_object()) {
    row["metrics"]["tokens_per_s"] = row["metrics"]["tokens_per_s_per_gpu"].get<double>() * gpus;
  }
  return row;
}

// At 8 GPUs (TP 1 PP 2) and at 16 (TP 2 PP 1) a different layout is best: both layouts get a
// line with every GPU count where they ranked; TP 1 PP 4 (never best) none. The table has one
// row per GPU count with the days for 10^12 tokens worked by hand.
TEST(ReportSpec, ScalingChartsFollowTheLayoutsThatAreBestSomewhere) {
  const auto rows =
      records(sweep_file(ojson::array({at_gpus(sweep_row("ranked", 2, 2, 1, 1, 1, 1000), 8),
                                       at_gpus(sweep_row("ranked", 1, 1, 2, 1, 1, 1100), 8),
                                       at_gpus(sweep_row("ranked", 3, 2, 1, 1, 1, 950), 16),
                                       at_gpus(sweep_row("ranked", 4, 1, 4, 1, 1, 900), 16),
                                       at_gpus(sweep_row("oom", 0, 1, 1, 1, 1, 0, 1e9), 32)})));
  const auto spec = sweep_scaling_spec(rows);
  ASSERT_TRUE(spec.has_value());
  std::map<std::string, std::set<int64_t>> gpus_of;  // layout -> GPU counts drawn
  for (const json& v : (*spec)["data"]["values"]) {
    gpus_of[v["layout"].get<std::string>().substr(0, 14)].insert(v["GPUs"].get<int64_t>());
  }
  ASSERT_EQ(gpus_of.size(), 2u);
  EXPECT_EQ(gpus_of.at("TP 1 CP 1 PP 2"), (std::set<int64_t>{8}));
  EXPECT_EQ(gpus_of.at("TP 2 CP 1 PP 1"), (std::set<int64_t>{8, 16}));
  EXPECT_EQ((*spec)["data"]["values"].size(), 9u);  // 3 rows x 3 metrics
  EXPECT_EQ((*spec)["spec"]["layer"][0]["name"], "scaling_lines");
  EXPECT_EQ((*spec)["facet"]["column"]["field"], "metric");
  const std::string html = scaling_table_html(rows);
  // 8 GPUs: 1100 x 8 tokens/s; 10^12 / 8800 / 86400 = 1315.2 days, x 24 x 8 = 252,525 GPU-hours.
  EXPECT_THAT(html, HasSubstr("<td>8</td><td>64</td>"));
  EXPECT_THAT(
      html, HasSubstr("<td>8800</td><td>1100.0</td><td>40.0 %</td><td>1315.2</td><td>252525</td>"));
  EXPECT_THAT(html, HasSubstr("<td>16</td>"));
  EXPECT_THAT(html, Not(HasSubstr("<td>32</td>")));
  // One GPU count: no scaling section.
  EXPECT_FALSE(sweep_scaling_spec(records(small_sweep())).has_value());
  bool scaling_section = false;
  for (const ReportSection& s : sweep_sections(rows)) scaling_section |= s.id == "scaling";
  EXPECT_TRUE(scaling_section);
}

TEST(ReportSpec, SweepTableListsRankedRowsInRankOrderAndCountsTheRest) {
  const std::string html = sweep_table_html(records(small_sweep()));
  EXPECT_THAT(html, HasSubstr("3 ranked configuration(s), 1 error, 1 invalid, 3 oom."));
  const auto first = html.find("<td>1</td>");
  const auto second = html.find("<td>2</td><td>1</td>");
  ASSERT_NE(first, std::string::npos);
  ASSERT_NE(second, std::string::npos);
  EXPECT_LT(first, second);
  EXPECT_THAT(html, HasSubstr("1000.0"));
  EXPECT_THAT(html, HasSubstr("40.0 %"));
  EXPECT_THAT(sweep_table_html(records(small_sweep()), 1),
              HasSubstr("3 ranked configuration(s) (the first 1 shown)"));
}

// The table shows the columns of what the sweep varied, as the terminal table does: with one
// schedule, one sharding and no searched split there are no such columns and every row says
// whether it fits; a row at risk says so; a searched split (--pipeline-split) adds the layout,
// "the scenario's" for a row that kept the scenario's own; differing sharding adds ZeRO labels.
TEST(ReportSpec, SweepTableShowsTheVariedColumnsTheLayoutAndTheMemoryVerdict) {
  ojson plain = small_sweep();
  std::string html = sweep_table_html(records(plain));
  EXPECT_THAT(html, Not(HasSubstr("<th>schedule</th>")));
  EXPECT_THAT(html, Not(HasSubstr("<th>ZeRO</th>")));
  EXPECT_THAT(html, Not(HasSubstr("<th>pipeline layout</th>")));
  EXPECT_THAT(html, HasSubstr("<th>memory</th>"));
  EXPECT_THAT(html, Not(HasSubstr("at risk")));
  ojson rows = small_sweep();
  rows["rows"][0]["memory"]["at_risk"] = true;
  rows["rows"][0]["configuration"]["pipeline_model_parallel_layout"] = "Et|tL";
  rows["rows"][1]["configuration"]["use_megatron_fsdp"] = true;
  rows["rows"][1]["configuration"]["data_parallel_sharding_strategy"] = "optim_grads_params";
  rows["rows"][1]["configuration"]["zero_stage"] = 3;
  rows["rows"][1]["configuration"]["num_distributed_optimizer_instances"] = 2;
  html = sweep_table_html(records(rows));
  EXPECT_THAT(html, HasSubstr("<th>pipeline layout</th>"));
  EXPECT_THAT(html, HasSubstr("<td>Et|tL</td>"));
  EXPECT_THAT(html, HasSubstr("<td>the scenario"));
  EXPECT_THAT(html, HasSubstr("<td>at risk</td>"));
  EXPECT_THAT(html, HasSubstr("<th>ZeRO</th>"));
  EXPECT_THAT(html, HasSubstr("<td>ZeRO-3/2</td>"));
  EXPECT_THAT(html, Not(HasSubstr("<th>GPUs</th>")));
}

// A ranked row without metrics, an unknown status: the reader names the file and the row.
TEST(ReportSpec, ReadingTheSweepNamesTheFileAndRow) {
  ojson sweep = small_sweep();
  sweep["rows"][1]["metrics"] = nullptr;
  EXPECT_THAT([&] { records(sweep); },
              ::testing::ThrowsMessage<Error>(HasSubstr(
                  "sweep.json: 'rows[1].metrics' is null, but a ranked row has metrics")));
  sweep = small_sweep();
  sweep["rows"][2]["status"] = "fast";
  EXPECT_THAT(
      [&] { records(sweep); },
      ::testing::ThrowsMessage<Error>(HasSubstr(
          "sweep.json: 'rows[2].status' is \"fast\"; allowed: ranked, oom, error, invalid")));
}

// ----- the page and write_report ----------------------------------------------------------------

TEST(ReportPage, InlinesTheVegaScriptsAndEscapesScriptEndTags) {
  Timeline t = synthetic_timeline(1, 1);
  t.events[0].name = "fwd mb0 </script><b>x";
  const auto sections = simulation_sections(typed(small_summary()), t, "timeline.json");
  const std::string html = render_report_html("unit </title>", sections, fake_vega_dir());
  EXPECT_THAT(html, HasSubstr("window.vegaEmbed = function"));
  EXPECT_THAT(html, HasSubstr("<\\/script>' in a string"));
  EXPECT_THAT(html, HasSubstr("fwd mb0 <\\/script><b>x"));
  EXPECT_THAT(html, HasSubstr("<title>unit &lt;/title&gt;</title>"));
  // Exactly the script elements the page opens: 1 collector + 3 libraries + specs + embedding.
  size_t opened = 0;
  for (auto pos = html.find("<script"); pos != std::string::npos;
       pos = html.find("<script", pos + 1)) {
    ++opened;
  }
  EXPECT_EQ(opened, 6u);
  for (const char* id : {"chart-breakdown", "chart-gantt", "chart-memory", "chart-links"}) {
    EXPECT_THAT(html, HasSubstr(fmt::format("<div class=\"chart\" id=\"{}\">", id)));
  }
  EXPECT_THAT(html, HasSubstr("<table class=\"summary\">"));
}

TEST(ReportPage, WriteReportCombinesSimulationAndSweep) {
  const fs::path dir = fresh_dir("combined");
  write_text(dir / "summary.json", small_summary().dump());
  std::ostringstream trace;
  write_chrome_trace(synthetic_timeline(2, 2), trace);
  write_text(dir / "timeline.json", trace.str());
  write_text(dir / "sweep.json", small_sweep().dump());
  const fs::path out = write_report(dir, fake_vega_dir());
  EXPECT_EQ(out, dir / "report.html");
  const std::string html = slurp(out);
  for (const char* id : {"chart-breakdown", "chart-gantt", "chart-memory", "chart-links",
                         "chart-heatmap", "section-ranked", "section-summary"}) {
    EXPECT_THAT(html, HasSubstr(fmt::format("id=\"{}\"", id)));
  }
  EXPECT_THAT(html, HasSubstr("<title>traintwin report: unit</title>"));
  for (const auto& e : fs::directory_iterator(dir)) {
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  }
}

TEST(ReportPage, WriteReportErrorsNameTheFile) {
  const fs::path vega = fake_vega_dir();
  const fs::path empty = fresh_dir("empty");
  EXPECT_THAT([&] { write_report(empty, vega); },
              ::testing::ThrowsMessage<Error>(HasSubstr(empty.string() + ": holds neither")));
  write_text(empty / "goodput.json", "{}");
  EXPECT_THAT([&] { write_report(empty, vega); },
              ::testing::ThrowsMessage<Error>(
                  HasSubstr("`traintwin goodput --out` writes its report.html itself")));
  fs::remove(empty / "goodput.json");
  EXPECT_THAT([&] { write_report(empty / "nope", vega); },
              ::testing::ThrowsMessage<Error>(HasSubstr("nope: not a directory")));
  const fs::path bad = fresh_dir("bad");
  write_text(bad / "summary.json", "{\"scenario\": ");
  EXPECT_THAT([&] { write_report(bad, vega); },
              ::testing::ThrowsMessage<Error>(
                  HasSubstr((bad / "summary.json").string() + ": malformed JSON")));
  const fs::path ok = fresh_dir("no_vega");
  write_text(ok / "sweep.json", small_sweep().dump());
  EXPECT_THAT(
      [&] { write_report(ok, empty); },
      ::testing::ThrowsMessage<Error>(HasSubstr((empty / "vega.min.js").string() + ": not found")));
  EXPECT_THAT([&] { write_report(ok, empty); },
              ::testing::ThrowsMessage<Error>(HasSubstr("scripts/fetch_vega.sh")));
}

// A summary.json or sweep.json of another schema version (a newer traintwin's, or one from
// before versions) is refused before anything is drawn, naming the file and the version read.
TEST(ReportPage, WriteReportRefusesAnUnknownSchemaVersionNamingTheFile) {
  const fs::path vega = fake_vega_dir();
  const fs::path dir = fresh_dir("newer");
  ojson summary = small_summary();
  summary["schema_version"] = 99;
  write_text(dir / "summary.json", summary.dump());
  EXPECT_THAT([&] { write_report(dir, vega); },
              ::testing::ThrowsMessage<Error>(
                  AllOf(HasSubstr((dir / "summary.json").string() +
                                  ": schema_version 99 is not one this traintwin reads"),
                        HasSubstr("it reads schema_version " +
                                  std::to_string(kSummarySchemaVersion) + " only"))));
  EXPECT_FALSE(fs::exists(dir / "report.html"));
  const fs::path old = fresh_dir("unversioned_sweep");
  write_text(old / "sweep.json", small_sweep()["rows"].dump());  // a bare array: no version
  EXPECT_THAT([&] { write_report(old, vega); },
              ::testing::ThrowsMessage<Error>(
                  AllOf(HasSubstr((old / "sweep.json").string() + ": must be a JSON object"),
                        HasSubstr("schema_version " + std::to_string(kSweepSchemaVersion)))));
}

TEST(ReportCli, RebuildsReportHtmlAndSaysHowToFetchVega) {
  const fs::path dir = fresh_dir("cli");
  write_text(dir / "sweep.json", small_sweep().dump());
  const auto ok =
      testing::run_cli("report " + dir.string() + " --vega-dir " + fake_vega_dir().string());
  EXPECT_EQ(ok.status, 0) << ok.output;
  EXPECT_THAT(ok.output, HasSubstr("wrote " + (dir / "report.html").string()));
  EXPECT_TRUE(fs::exists(dir / "report.html"));
  // No Vega anywhere: TRAINTWIN_VEGA_DIR points at an empty folder and the binary runs from a
  // copy outside the source tree, from a folder without data/vega.
  const fs::path lonely = fresh_dir("lonely");
  fs::create_directories(lonely / "bin");
  fs::copy_file(TRAINTWIN_BINARY, lonely / "bin" / "traintwin");
  const std::string cmd = "cd " + lonely.string() + " && TRAINTWIN_VEGA_DIR=" + lonely.string() +
                          " " + (lonely / "bin" / "traintwin").string() + " report " +
                          dir.string() + " 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe.get())) > 0) out.append(buf, n);
  const int status = pclose(pipe.release());
  EXPECT_EQ(WEXITSTATUS(status), 2) << out;
  EXPECT_THAT(out, HasSubstr("run scripts/fetch_vega.sh"));
  EXPECT_THAT(out, HasSubstr("TRAINTWIN_VEGA_DIR"));
  const auto missing = testing::run_cli("report " + (dir / "nope").string() + " --vega-dir " +
                                        fake_vega_dir().string());
  EXPECT_EQ(missing.status, 2);
  EXPECT_THAT(missing.output, HasSubstr("nope: not a directory"));
}

// ----- headless Chromium ------------------------------------------------------------------------

const char* const kChromium = "/usr/bin/chromium";

/// Runs `command` through the shell; its exit status and output.
testing::CliResult shell(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen((command + " 2>&1").c_str(), "r"), pclose);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe.get())) > 0) out.append(buf, n);
  const int status = pclose(pipe.release());
  return {WEXITSTATUS(status), out};
}

/// data/vega of the source tree, fetched by scripts/fetch_vega.sh when missing; "" with
/// `why` set when it cannot be had (no npm, registry unreachable).
fs::path vega_dir_or_why(std::string& why) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  const fs::path dir = kSource / "data" / "vega";
  auto complete = [&] {
    for (const char* f : kVegaFiles) {
      if (!fs::is_regular_file(dir / f)) return false;
    }
    return true;
  };
  if (complete()) return dir;
  if (shell("command -v npm").status != 0) {
    why = "npm is not installed, so scripts/fetch_vega.sh cannot fetch Vega into " + dir.string() +
          " (apt-get install npm)";
    return {};
  }
  const auto fetched = shell((kSource / "scripts" / "fetch_vega.sh").string());
  if (fetched.status != 0 || !complete()) {
    why = "scripts/fetch_vega.sh could not fetch Vega from the npm registry: " + fetched.output;
    return {};
  }
  return dir;
}

/// The page after headless Chromium ran its scripts (--dump-dom).
std::string dump_dom(const fs::path& html, const fs::path& work) {
  const fs::path profile = work / "chromium-profile";
  fs::create_directories(profile);
  const auto r = shell(fmt::format(
      "{} --headless --no-sandbox --disable-gpu --disable-background-networking "
      "--disable-component-update --disable-sync --no-first-run --user-data-dir={} "
      "--virtual-time-budget=10000 --dump-dom file://{} 2>{}",
      kChromium, profile.string(), fs::absolute(html).string(), (work / "chromium.log").string()));
  EXPECT_EQ(r.status, 0) << slurp(work / "chromium.log");
  return r.output;
}

/// Items of every mark group whose class is `mark-TYPE role-mark NAME...`: the `<ITEM` elements
/// between each group's start and its `</g>` (rect marks draw <path>, text marks <text>).
size_t count_marks(const std::string& dom, const std::string& type, const std::string& name_prefix,
                   const std::string& item) {
  size_t n = 0;
  const std::string start = "class=\"mark-" + type + " role-mark " + name_prefix;
  for (auto pos = dom.find(start); pos != std::string::npos; pos = dom.find(start, pos + 1)) {
    const auto end = dom.find("</g>", pos);
    for (auto p = dom.find("<" + item, pos); p != std::string::npos && p < end;
         p = dom.find("<" + item, p + 1)) {
      ++n;
    }
  }
  return n;
}

/// The problems the page's collector wrote into <ul id="report-errors">.
std::string page_problems(const std::string& dom) {
  const auto start = dom.find("<ul id=\"report-errors\"");
  if (start == std::string::npos) return "(no report-errors list in the page)";
  const auto end = dom.find("</ul>", start);
  const std::string list = dom.substr(start, end - start);
  return list.find("<li") == std::string::npos ? "" : list;
}

TEST(ReportBrowser, RendersEveryChartWithItsMarksAndNoErrors) {
  if (!fs::exists(kChromium)) {
    GTEST_SKIP() << kChromium << " is not installed (Debian: apt-get install chromium; "
                 << "scripts/setup.sh installs it): the headless rendering check is skipped";
  }
  std::string why;
  const fs::path vega = vega_dir_or_why(why);
  if (vega.empty()) GTEST_SKIP() << why;

  // A real simulation (PP 2) and a sweep with OOM cells, reported together.
  const fs::path dir = fresh_dir("browser");
  const auto sim =
      testing::run_cli("simulate " + (kSource / "scenarios/gpt-1.3b-h200-8.yaml").string() +
                       " --out " + dir.string());
  ASSERT_EQ(sim.status, 0) << sim.output;
  const fs::path sweep_dir = dir / "sweep";
  const auto sw =
      testing::run_cli("sweep " + (kSource / "scenarios/gpt-1.3b-h100-8.yaml").string() +
                       " --micro-batch-size 1,2,4,8,16 --tensor-model-parallel-size 1,2,4 "
                       "--pipeline-model-parallel-size 1,2,4 --mode analytical --out " +
                       sweep_dir.string());
  ASSERT_EQ(sw.status, 0) << sw.output;
  fs::copy_file(sweep_dir / "sweep.json", dir / "sweep.json");
  const auto rep = testing::run_cli("report " + dir.string() + " --vega-dir " + vega.string());
  ASSERT_EQ(rep.status, 0) << rep.output;

  // What the marks must number, from the inputs.
  const json summary = json::parse(slurp(dir / "summary.json"));
  std::ifstream trace(dir / "timeline.json");
  const Timeline timeline = read_chrome_trace(trace, "timeline.json");
  ASSERT_LE(timeline.events.size(), GanttOptions{}.max_bars) << "one bar per op expected";
  const auto sweep = read_sweep_json(ojson::parse(slurp(dir / "sweep.json")), "sweep.json");
  const json cells = sweep_heatmap_spec(sweep).value()["data"]["values"];
  size_t oom_cells = 0;
  for (const json& c : cells) oom_cells += c["status"] == "oom" ? 1 : 0;
  ASSERT_GT(oom_cells, 0u) << "the sweep grid should have OOM cells";
  const size_t stages = summary["per_stage"].size();

  const std::string dom = dump_dom(dir / "report.html", dir);
  write_text(dir / "dom.html", dom);
  EXPECT_EQ(page_problems(dom), "");
  EXPECT_THAT(dom, HasSubstr("data-report-status=\"rendered\""));
  for (const char* id : {"breakdown", "gantt", "memory", "links", "heatmap"}) {
    EXPECT_THAT(dom, ::testing::ContainsRegex(
                         fmt::format("id=\"chart-{}\"[^>]*data-rendered=\"true\"", id)));
  }
  EXPECT_EQ(count_marks(dom, "rect", "gantt_bars_stage", "path"), timeline.events.size());
  EXPECT_GT(count_marks(dom, "text", "gantt_labels_stage", "text"), 0u);
  EXPECT_EQ(count_marks(dom, "rect", "breakdown_marks", "path"), 9 * (1 + stages));
  EXPECT_EQ(count_marks(dom, "rect", "memory_bars_marks", "path"),
            5 * summary["memory_per_stage"].size());
  EXPECT_EQ(count_marks(dom, "rule", "memory_capacity_marks", "line"), 1u);
  EXPECT_EQ(count_marks(dom, "rect", "links_marks", "path"), summary["busiest_links"].size());
  EXPECT_EQ(count_marks(dom, "rect", "heat_cells_marks", "path"), cells.size() - oom_cells);
  EXPECT_EQ(count_marks(dom, "rect", "oom_cells_marks", "path"), oom_cells);
  EXPECT_EQ(count_marks(dom, "text", "heat_labels_marks", "text"), cells.size());
  EXPECT_THAT(dom, HasSubstr(">OOM</text>"));

  // A screenshot, for people to look at.
  const fs::path png = dir / "report.png";
  const auto shot = shell(fmt::format(
      "{} --headless --no-sandbox --disable-gpu --disable-background-networking "
      "--disable-component-update --disable-sync --no-first-run --user-data-dir={} "
      "--virtual-time-budget=10000 --hide-scrollbars --window-size=1300,2800 --screenshot={} "
      "file://{} 2>>{}",
      kChromium, (dir / "chromium-profile").string(), png.string(),
      fs::absolute(dir / "report.html").string(), (dir / "chromium.log").string()));
  EXPECT_EQ(shot.status, 0) << shot.output;
  ASSERT_TRUE(fs::exists(png));
  EXPECT_GT(fs::file_size(png), 10000u);
  fs::remove_all(dir / "chromium-profile");
  std::cout << "report screenshot: " << png.string() << "\n";
}

// `goodput --out` writes its own page: every chart drawn without a problem, two badput bars of
// eight causes, a point per swept interval, and a timeline with bars and failure rules.
TEST(ReportBrowser, GoodputPageRendersEveryChart) {
  if (!fs::exists(kChromium)) GTEST_SKIP() << kChromium << " is not installed";
  std::string why;
  const fs::path vega = vega_dir_or_why(why);
  if (vega.empty()) GTEST_SKIP() << why;
  const fs::path dir = fresh_dir("goodput");
  const auto run = shell("TRAINTWIN_VEGA_DIR=" + vega.string() + " " + TRAINTWIN_BINARY +
                         " goodput " + (kSource / "scenarios/gpt3-175b-h100-1024.yaml").string() +
                         " --iteration-time 8 --runs 10 --days 10 --out " + (dir / "out").string());
  ASSERT_EQ(run.status, 0) << run.output;
  const json report = json::parse(slurp(dir / "out" / "goodput.json"));
  const std::string dom = dump_dom(dir / "out" / "report.html", dir);
  write_text(dir / "dom.html", dom);
  EXPECT_EQ(page_problems(dom), "");
  EXPECT_THAT(dom, HasSubstr("data-report-status=\"rendered\""));
  for (const char* id :
       {"goodput-interval", "goodput-badput", "goodput-progress", "goodput-timeline"}) {
    EXPECT_THAT(dom, ::testing::ContainsRegex(
                         fmt::format("id=\"chart-{}\"[^>]*data-rendered=\"true\"", id)));
  }
  EXPECT_EQ(count_marks(dom, "rect", "badput_bars", "path"), 2 * Badput::kCauses.size());
  EXPECT_EQ(count_marks(dom, "symbol", "best_interval", "path"), 1u);
  EXPECT_EQ(count_marks(dom, "rule", "interval_rules", "line"), 2u);
  EXPECT_EQ(count_marks(dom, "symbol", "failure_points", "path"),
            report["chosen_runs"][0]["failures"].get<size_t>());
  EXPECT_GT(count_marks(dom, "rect", "timeline_bars", "path"), 0u);
  fs::remove_all(dir / "chromium-profile");
}

// `cluster --out` writes its own page: both charts drawn without a problem, one bar per
// iteration of each job (2 jobs x 10), and one facet of stacked areas per busiest shared link.
TEST(ReportBrowser, ClusterPageRendersEveryChart) {
  if (!fs::exists(kChromium)) GTEST_SKIP() << kChromium << " is not installed";
  std::string why;
  const fs::path vega = vega_dir_or_why(why);
  if (vega.empty()) GTEST_SKIP() << why;
  const fs::path dir = fresh_dir("cluster");
  const auto run = shell("TRAINTWIN_VEGA_DIR=" + vega.string() + " " + TRAINTWIN_BINARY +
                         " cluster " + (kSource / "placements/two-small-jobs.yaml").string() +
                         " --out " + (dir / "out").string());
  ASSERT_EQ(run.status, 0) << run.output;
  const json cluster = json::parse(slurp(dir / "out" / "cluster.json"));
  const std::string dom = dump_dom(dir / "out" / "report.html", dir);
  write_text(dir / "dom.html", dom);
  EXPECT_EQ(page_problems(dom), "");
  EXPECT_THAT(dom, HasSubstr("data-report-status=\"rendered\""));
  for (const char* id : {"cluster-iterations", "cluster-links"}) {
    EXPECT_THAT(dom, ::testing::ContainsRegex(
                         fmt::format("id=\"chart-{}\"[^>]*data-rendered=\"true\"", id)));
  }
  size_t iterations = 0;
  for (const json& j : cluster["jobs"]) iterations += j["iterations"].get<size_t>();
  EXPECT_EQ(iterations, 20u);
  EXPECT_EQ(count_marks(dom, "rect", "job_iterations", "path"), iterations);
  // One area per (link, job): the stacked shares of each shared link.
  EXPECT_EQ(count_marks(dom, "area", "link_utilization", "path"),
            cluster["shared_link_series"].size() * cluster["jobs"].size());
  fs::remove_all(dir / "chromium-profile");
}

TEST(ReportBrowser, ThePageReportsABrokenChart) {
  // The collector the rendering check relies on: a spec Vega-Lite rejects shows up in the page.
  if (!fs::exists(kChromium)) GTEST_SKIP() << kChromium << " is not installed";
  std::string why;
  const fs::path vega = vega_dir_or_why(why);
  if (vega.empty()) GTEST_SKIP() << why;
  const fs::path dir = fresh_dir("broken");
  ReportSection broken{"broken", "Broken", "", json{{"mark", "no-such-mark"}}, ""};
  write_text(dir / "report.html", render_report_html("broken", {broken}, vega));
  const std::string dom = dump_dom(dir / "report.html", dir);
  EXPECT_THAT(dom, HasSubstr("data-report-status=\"failed\""));
  EXPECT_THAT(page_problems(dom), HasSubstr("chart broken"));
  fs::remove_all(dir / "chromium-profile");
}

}  // namespace
}  // namespace traintwin

namespace traintwin {
namespace {

// Link traffic per tier, hot links and the busiest links over time, from summary.json's data.
TEST(ReportSpec, LinkTiersTableAndSeriesComeFromTheSummary) {
  ojson summary = small_summary();
  summary["link_tiers"] = ojson::array({{{"tier", "nic"},
                                         {"links", 16},
                                         {"bytes_total", 16e9},
                                         {"bytes_mean", 1e9},
                                         {"bytes_max", 3e9},
                                         {"utilization_mean", 0.05},
                                         {"utilization_p99", 0.15},
                                         {"utilization_max", 0.15}}});
  summary["hot_links"] = ojson::array({{{"name", "node3-nic2-up"},
                                        {"tier", "nic"},
                                        {"bytes", 3e9},
                                        {"utilization", 0.15},
                                        {"vs_tier_mean", 3.0}}});
  summary["link_series"] = ojson::array({{{"name", "node3-nic2-up"},
                                          {"tier", "nic"},
                                          {"bin_s", 0.01},
                                          {"utilization", {0.0, 0.5, 0.25}}}});
  const std::string html = link_tiers_html(typed(summary));
  EXPECT_THAT(html, HasSubstr("<td>nic</td><td>16</td><td>1.000</td><td>3.000</td><td>5.0 %</td>"
                              "<td>15.0 %</td><td>15.0 %</td>"));
  EXPECT_THAT(html, HasSubstr("node3-nic2-up (nic): 15.0 % busy, 3.0x its tier's mean"));
  const auto spec = link_series_spec(typed(summary));
  ASSERT_TRUE(spec.has_value());
  const json& values = (*spec)["data"]["values"];
  ASSERT_EQ(values.size(), 3u);
  EXPECT_DOUBLE_EQ(values[1]["time_ms"].get<double>(), 15.0);
  EXPECT_DOUBLE_EQ(values[1]["utilization"].get<double>(), 0.5);
  summary["link_series"][0]["utilization"][1] = "x";
  EXPECT_THAT([&] { typed(summary); },
              ::testing::ThrowsMessage<Error>(
                  HasSubstr("summary.json: 'link_series[0].utilization[1]' must be a number")));
  EXPECT_EQ(link_tiers_html(typed(small_summary())), "");
}

}  // namespace
}  // namespace traintwin
