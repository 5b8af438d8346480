// summary.json and sweep.json as typed documents: the writer and the reader agree (a simulated
// run's summary read back and written again gives the same text), and the readers refuse a
// file of another schema_version, or a missing or mistyped key, naming the file.
#include "sim/summary_document.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/memory_reserve.hpp"
#include "core/scenario.hpp"
#include "sim/cost_model.hpp"
#include "sim/isolated.hpp"
#include "sim/iteration_metrics.hpp"
#include "sim/replay.hpp"
#include "sim/sweep_record.hpp"
#include "sim_test_support.hpp"

namespace traintwin {
namespace {

using ::testing::AllOf;
using testing::h100;
using ::testing::HasSubstr;
using ojson = nlohmann::ordered_json;

/// GPT on 16 H100 (2 nodes): TP 4, PP 2, VPP 2, DP 2, SP, selective recomputation, with
/// what-if knobs, so that every optional part of summary.json is written.
Scenario what_if_cluster() {
  Scenario s;
  s.name = "round-trip";
  s.model = ModelSpec{"gpt", 8, 1024, 16, 4096, 1024, 51200};
  s.parallel.tensor_model_parallel_size = 4;
  s.parallel.pipeline_model_parallel_size = 2;
  s.parallel.virtual_pipeline_model_parallel_size = 2;
  s.parallel.data_parallel_size = 2;
  s.parallel.sequence_parallel = true;
  s.training.micro_batch_size = 1;
  s.training.global_batch_size = 8;
  s.training.recompute_granularity = RecomputeGranularity::kSelective;
  s.training.use_distributed_optimizer = true;
  s.cluster.num_gpus = 16;
  s.cluster.what_if.ib_bandwidth_scale = 2.0;
  s.cluster.what_if.straggler = Straggler{3, 1.25};
  return s;
}

/// summary.json's text of a replay of `s` (wall times included, and a base run), simulated in
/// a child process: SimGrid allows one engine per process.
std::string simulated_summary_text(const Scenario& s) {
  return run_isolated([&] {
    const TopologySpec t = h100();
    const auto costs = make_roofline_cost_model(default_roofline_efficiency(t.gpu));
    SimulationOptions opts;
    opts.record_timeline = false;
    BaseRunMetrics base;
    base.iteration_time_s = 1.5;
    base.tokens_per_s_per_gpu = 1000;
    base.mfu = 0.3;
    base.exposed_dp_s = 0.01;
    return summary_json(s, t, simulate(s, t, *costs, opts), /*include_wall_time=*/true, &base)
        .dump(2);
  });
}

// summary -> JSON -> summary -> JSON gives the same text: the reader reads every field the
// writer writes, in the writer's types (a lossless round trip of a simulated run).
TEST(SummaryDocument, SimulatedRunRoundTripsThroughItsJson) {
  const Scenario s = what_if_cluster();
  const std::string text = simulated_summary_text(s);
  const ojson file = ojson::parse(text);
  EXPECT_EQ(file.begin().key(), "schema_version");
  EXPECT_EQ(file["schema_version"], kSummarySchemaVersion);
  const SummaryDocument d = read_summary_json(file, "summary.json");

  ojson again;
  again["schema_version"] = kSummarySchemaVersion;
  const ojson fields = summary_document_json(d);
  for (const auto& [key, value] : fields.items()) again[key] = value;
  EXPECT_EQ(again.dump(2), text);

  // The typed fields hold the run.
  EXPECT_EQ(d.scenario, "round-trip");
  EXPECT_EQ(d.num_gpus, 16);
  EXPECT_EQ(d.layout.tensor_model_parallel_size, 4);
  EXPECT_EQ(d.layout.recompute_granularity, RecomputeGranularity::kSelective);
  EXPECT_EQ(d.layout.layers_per_model_chunk.size(), 2u);
  EXPECT_EQ(d.layout.layers_per_stage(), (std::vector<int64_t>{4, 4}));
  EXPECT_GT(d.summary.iteration_time_s, 0);
  EXPECT_DOUBLE_EQ(d.summary.iteration_time_s, file["iteration_time_s"].get<double>());
  EXPECT_EQ(d.summary.mfu_formula, file["mfu_formula"].get<std::string>());
  ASSERT_TRUE(d.what_if.has_value());
  EXPECT_EQ(d.what_if->straggler->rank, 3);
  ASSERT_TRUE(d.base.has_value());
  EXPECT_DOUBLE_EQ(d.base->exposed_comm_s(), 0.01);
  ASSERT_TRUE(d.delta_vs_base.has_value());
  EXPECT_EQ(d.per_stage.size(), 2u);
  EXPECT_EQ(d.memory_per_stage.size(), 2u);
  EXPECT_DOUBLE_EQ(d.memory_per_stage[1].total_bytes(),
                   file["memory_per_stage"][1]["total_bytes"].get<double>());
  EXPECT_FALSE(d.busiest_links.empty());
  EXPECT_TRUE(d.sim_wall_s.has_value());
  EXPECT_FALSE(d.wall_phases_s.empty());
  EXPECT_GT(d.events, 0);
}

/// The smallest summary.json the reader takes: every key the writer writes, no link.
ojson minimal_summary() {
  SummaryDocument d;
  d.scenario = "unit";
  d.num_gpus = 1;
  d.gpu = "H100";
  d.layout.rank_order = "tp-cp-dp-pp";
  d.layout.layers_per_model_chunk = {{2}};
  d.memory_per_stage.resize(1);
  d.per_stage.resize(1);
  ojson j;
  j["schema_version"] = kSummarySchemaVersion;
  const ojson fields = summary_document_json(d);
  for (const auto& [key, value] : fields.items()) j[key] = value;
  return j;
}

TEST(SummaryDocument, ReaderRefusesAnotherSchemaVersionNamingTheFile) {
  EXPECT_NO_THROW(read_summary_json(minimal_summary(), "run/summary.json"));
  ojson newer = minimal_summary();
  newer["schema_version"] = kSummarySchemaVersion + 1;
  EXPECT_THAT([&] { read_summary_json(newer, "run/summary.json"); },
              ::testing::ThrowsMessage<Error>(AllOf(
                  HasSubstr("run/summary.json: schema_version " +
                            std::to_string(kSummarySchemaVersion + 1) +
                            " is not one this traintwin reads"),
                  HasSubstr("it reads schema_version " + std::to_string(kSummarySchemaVersion) +
                            " only"),
                  HasSubstr("newer traintwin"))));
  ojson older = minimal_summary();
  older.erase("schema_version");
  EXPECT_THAT([&] { read_summary_json(older, "run/summary.json"); },
              ::testing::ThrowsMessage<Error>(
                  AllOf(HasSubstr("run/summary.json: no \"schema_version\""),
                        HasSubstr("reads schema_version " +
                                  std::to_string(kSummarySchemaVersion)),
                        HasSubstr("traintwin simulate"))));
  ojson text = minimal_summary();
  text["schema_version"] = "1";
  EXPECT_THAT([&] { read_summary_json(text, "run/summary.json"); },
              ::testing::ThrowsMessage<Error>(HasSubstr("\"schema_version\" must be an integer")));
  EXPECT_THAT(
      [&] { read_summary_json(ojson::array(), "run/summary.json"); },
      ::testing::ThrowsMessage<Error>(HasSubstr("run/summary.json: must be a JSON object")));
}

TEST(SummaryDocument, ReaderNamesTheFileAndKeyOfAMissingOrMistypedField) {
  ojson j = minimal_summary();
  j["layout"].erase("data_parallel_size");
  EXPECT_THAT([&] { read_summary_json(j, "out/summary.json"); },
              ::testing::ThrowsMessage<Error>(
                  HasSubstr("out/summary.json: missing key 'layout.data_parallel_size'")));
  j = minimal_summary();
  j["memory_per_stage"][0]["weights_bytes"] = "big";
  EXPECT_THAT(
      [&] { read_summary_json(j, "out/summary.json"); },
      ::testing::ThrowsMessage<Error>(HasSubstr(
          "out/summary.json: 'memory_per_stage[0].weights_bytes' must be a number, got \"big\"")));
  j = minimal_summary();
  j["layout"]["recompute_granularity"] = "most";
  EXPECT_THAT([&] { read_summary_json(j, "out/summary.json"); },
              ::testing::ThrowsMessage<Error>(HasSubstr(
                  "'layout.recompute_granularity' is \"most\"; allowed: none, selective, full")));
}

// CPU offload's exposed time (TimeBreakdown::exposed_offload_s, what `simulate` prints on its
// cpu offload line) is written beside the other waits: summary.json's exposed_offload_s, and
// each rank breakdown's (critical_rank, per_stage[]), read back as written; a document written
// before the field existed reads it as 0.
TEST(SummaryDocument, ExposedOffloadIsWrittenAndReadBack) {
  Scenario s = what_if_cluster();
  s.cluster.what_if = {};
  IterationMetrics r;
  r.iteration_time_s = 2.0;
  r.critical.rank = 4;
  r.critical.compute_s = 1.5;
  r.critical.exposed_offload_s = 0.125;
  const SimulationSummary m = summarize(s, h100(), r);
  EXPECT_EQ(m.exposed_offload_s, 0.125);
  const ojson fields = summary_fields_json(m);
  EXPECT_EQ(fields["exposed_offload_s"].get<double>(), 0.125);
  EXPECT_EQ(summary_fields_from_json(fields, JsonPlace{"summary.json", ""}).exposed_offload_s,
            0.125);
  const ojson b = breakdown_json(r.critical);
  EXPECT_EQ(b["exposed_offload_s"].get<double>(), 0.125);
  EXPECT_EQ(breakdown_from_json(b, JsonPlace{"summary.json", "critical_rank"}).exposed_offload_s,
            0.125);
  ojson old_fields = fields;
  old_fields.erase("exposed_offload_s");
  EXPECT_EQ(summary_fields_from_json(old_fields, JsonPlace{"summary.json", ""}).exposed_offload_s,
            0.0);
  ojson old_breakdown = b;
  old_breakdown.erase("exposed_offload_s");
  EXPECT_EQ(breakdown_from_json(old_breakdown, JsonPlace{"summary.json", "critical_rank"})
                .exposed_offload_s,
            0.0);
  ojson mistyped = fields;
  mistyped["exposed_offload_s"] = "long";
  EXPECT_THAT([&] { summary_fields_from_json(mistyped, JsonPlace{"out/summary.json", ""}); },
              ::testing::ThrowsMessage<Error>(HasSubstr("exposed_offload_s")));
}

// summary.json judges memory as `simulate` and `sweep` do: fits_in_memory compares each stage's
// peak with its GPU's memory alone, memory_verdict also leaves each stage's reserve
// (core/memory_reserve.hpp) and the 90 % line. On a GPU of peak / 0.95 bytes the peak fits but is
// above 90 % ("at risk"); on one of 0.9 x peak it does not fit ("OOM"); on one of 10 x peak it
// fits with the reserve, which holds at least the CUDA context's 0.5 GiB. Read back as written;
// a document from before the field has no verdict (not a guessed one).
TEST(SummaryDocument, MemoryVerdictCountsTheReserveAsSimulateDoes) {
  Scenario s = what_if_cluster();
  s.cluster.what_if = {};
  IterationMetrics r;
  r.iteration_time_s = 2.0;
  double peak = 0;
  for (const StageMemory& m : memory_per_stage(s)) peak = std::max(peak, m.total_bytes());
  ASSERT_GT(peak, 0);
  TopologySpec t = h100();
  t.gpu.memory_bytes = peak / 0.95;
  SimulationSummary m = summarize(s, t, r);
  EXPECT_TRUE(m.fits_in_memory);
  EXPECT_EQ(m.memory_verdict, "at risk");
  t.gpu.memory_bytes = 0.9 * peak;
  m = summarize(s, t, r);
  EXPECT_FALSE(m.fits_in_memory);
  EXPECT_EQ(m.memory_verdict, "OOM");
  t.gpu.memory_bytes = 10 * peak + 64.0 * (1 << 30);
  m = summarize(s, t, r);
  EXPECT_TRUE(m.fits_in_memory);
  EXPECT_EQ(m.memory_verdict, "fits");
  EXPECT_GE(m.memory_reserve_bytes, kCudaContextBytes);
  const ojson fields = summary_fields_json(m);
  const SimulationSummary back = summary_fields_from_json(fields, JsonPlace{"summary.json", ""});
  EXPECT_EQ(back.memory_verdict, "fits");
  EXPECT_EQ(back.memory_reserve_bytes, m.memory_reserve_bytes);
  ojson old_fields = fields;
  old_fields.erase("memory_verdict");
  old_fields.erase("memory_reserve_bytes");
  EXPECT_EQ(summary_fields_from_json(old_fields, JsonPlace{"summary.json", ""}).memory_verdict,
            "");
}

TEST(SweepRecord, ReaderRefusesAnotherSchemaVersionOrABareArrayNamingTheFile) {
  const ojson rows = ojson::array();
  EXPECT_TRUE(read_sweep_json(ojson{{"schema_version", kSweepSchemaVersion}, {"rows", rows}},
                              "out/sweep.json")
                  .empty());
  EXPECT_THAT(
      [&] {
        read_sweep_json(ojson{{"schema_version", 7}, {"rows", rows}}, "out/sweep.json");
      },
      ::testing::ThrowsMessage<Error>(
          AllOf(HasSubstr("out/sweep.json: schema_version 7 is not one this traintwin reads"),
                HasSubstr("reads schema_version " + std::to_string(kSweepSchemaVersion) +
                          " only"))));
  // A sweep.json from before schema versions: a bare array of rows.
  EXPECT_THAT(
      [&] { read_sweep_json(rows, "out/sweep.json"); },
      ::testing::ThrowsMessage<Error>(AllOf(HasSubstr("out/sweep.json: must be a JSON object"),
                                            HasSubstr("traintwin sweep --out"))));
}

}  // namespace
}  // namespace traintwin
