// Tests of traces/cost_db: the cost database file format (traces/db/README.md): strict reading,
// deterministic writing, exact lookup and the nearest-shape query.
#include "traces/cost_db.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace traintwin {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

/// The sample of traces/db/README.md, exactly as the writer lays it out.
const char* const kSample = R"({
  "format": "traintwin-costdb",
  "version": 1,
  "device": {"name":"NVIDIA H100 80GB HBM3","sm_count":132,"clock_mhz":1980,"memory_bytes":85520809984,"compute_capability":"9.0"},
  "versions": {"driver":"550.54.15","cuda":"12.4","cublas":"12.4.5","nccl":"2.21.5","traintwin":"0.1.0"},
  "kernels": [
    {"name":"gemm_fwd","shape":[2048,4608,12288],"dtype":"bf16","tp":8,"median_us":331.4,"p10_us":329.8,"p90_us":335.2,"samples":50,"flops":231928233984,"bytes":182452224},
    {"name":"layernorm_fwd","shape":[2048,12288],"dtype":"bf16","tp":8,"median_us":38.9,"p10_us":38.5,"p90_us":39.6,"samples":50,"flops":201326592,"bytes":100663296}
  ],
  "collectives": [
    {"op":"all_reduce","bytes":134217728,"ranks":8,"nodes":1,"algorithm":"NVLS","time_us":586.43,"algbw_GBps":228.87,"busbw_GBps":400.53}
  ]
}
)";

const char* const kHeader = R"({
  "format": "traintwin-costdb",
  "version": 1,
  "device": {"name":"NVIDIA H100 80GB HBM3","sm_count":132,"clock_mhz":1980,"memory_bytes":85520809984},
  "versions": {"driver":"550.54.15","cuda":"12.4","cublas":"12.4.5","nccl":"2.21.5","traintwin":"0.1.0"},
)";

const char* const kGoodRow =
    R"({"name":"gemm_fwd","shape":[1024,1024,1024],"dtype":"bf16","tp":1,"median_us":10,)"
    R"("p10_us":9,"p90_us":11,"samples":5,"flops":2147483648,"bytes":6291456})";

/// A file whose kernels are a good row, then `row`.
std::string with_second_row(const std::string& row) {
  return std::string(kHeader) + "  \"kernels\": [\n    " + kGoodRow + ",\n    " + row +
         "\n  ]\n}\n";
}

/// The CostDatabaseError message of parsing `text` as "h100.json" ("" + failure if none).
std::string parse_error(const std::string& text) {
  try {
    CostDatabase::parse(text, "h100.json");
  } catch (const CostDatabaseError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a CostDatabaseError for:\n" << text;
  return "";
}

/// kGoodRow as the second row, with `from` replaced by `to`.
std::string second_row_error(const std::string& from, const std::string& to) {
  std::string row = kGoodRow;
  const size_t at = row.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  row.replace(at, from.size(), to);
  return parse_error(with_second_row(row));
}

KernelMeasurement gemm_row(int64_t m, int64_t n, int64_t k, double median_us, int64_t tp = 1,
                           Precision dtype = Precision::kBf16, const char* name = "gemm_fwd") {
  const double f = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  KernelMeasurement r;
  r.key = KernelKey{name, {m, n, k}, dtype, tp};
  r.median_us = median_us;
  r.p10_us = median_us * 0.98;
  r.p90_us = median_us * 1.03;
  r.samples = 20;
  r.flops = f;
  r.bytes = static_cast<double>((m * k + k * n + m * n) * 2);
  return r;
}

CostDatabase small_db() {
  return CostDatabase(CostDbDevice{"NVIDIA A100-SXM4-80GB", 108, 1410, 85899345920, "8.0"},
                      CostDbVersions{"535.104.05", "12.2", "12.2.5", "2.18.5", "0.1.0"});
}

// ---- reading -------------------------------------------------------------------------------

TEST(CostDbRead, ReadmeSample) {
  const CostDatabase db = CostDatabase::parse(kSample, "sample");
  EXPECT_EQ(db.device().name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(db.device().sm_count, 132);
  EXPECT_EQ(db.device().clock_mhz, 1980);
  EXPECT_EQ(db.device().memory_bytes, 85520809984);
  EXPECT_EQ(db.device().compute_capability, "9.0");
  EXPECT_EQ(db.versions().nccl, "2.21.5");
  ASSERT_EQ(db.kernels().size(), 2u);
  const KernelMeasurement& g = db.kernels()[0];
  EXPECT_EQ(g.key, (KernelKey{"gemm_fwd", {2048, 4608, 12288}, Precision::kBf16, 8}));
  EXPECT_EQ(g.median_us, 331.4);
  EXPECT_EQ(g.p10_us, 329.8);
  EXPECT_EQ(g.p90_us, 335.2);
  EXPECT_EQ(g.samples, 50);
  // 2 x 2048 x 4608 x 12288 FLOPs; (2048 x 12288 + 12288 x 4608 + 2048 x 4608) x 2 bytes.
  EXPECT_EQ(g.flops, 231928233984.0);
  EXPECT_EQ(g.bytes, 182452224.0);
  ASSERT_EQ(db.collectives().size(), 1u);
  const CollectiveMeasurement& c = db.collectives()[0];
  EXPECT_EQ(c.op, "all_reduce");
  EXPECT_EQ(c.bytes, 134217728);
  EXPECT_EQ(c.ranks, 8);
  EXPECT_EQ(c.nodes, 1);
  EXPECT_EQ(c.algorithm, "NVLS");
  EXPECT_EQ(c.busbw_GBps, 400.53);
  // The sample is in the writer's layout: reading and writing it gives it back byte for byte.
  EXPECT_EQ(db.to_json(), kSample);
}

TEST(CostDbRead, CollectivesAndOptionalKeysMayBeLeftOut) {
  const CostDatabase db = CostDatabase::parse(
      with_second_row(
          R"({"name":"gemm_fwd","shape":[8,8,8],"dtype":"fp16","tp":2,"median_us":3.5,"p10_us":3.5,)"
          R"("p90_us":3.5,"samples":1,"flops":1024,"bytes":384})"),
      "x.json");
  EXPECT_FALSE(db.device().compute_capability.has_value());
  EXPECT_TRUE(db.collectives().empty());
  EXPECT_EQ(db.kernels().size(), 2u);
}

TEST(CostDbRead, NotJson) {
  EXPECT_THAT(parse_error("{\"format\": \"traintwin-costdb\", "),
              AllOf(HasSubstr("h100.json"), HasSubstr("not valid JSON")));
  EXPECT_THAT(parse_error("[1, 2]"),
              AllOf(HasSubstr("h100.json"), HasSubstr("expected an object")));
}

TEST(CostDbRead, UnknownKeyNamesEntryAndKey) {
  EXPECT_THAT(second_row_error("\"median_us\"", "\"medain_us\""),
              AllOf(HasSubstr("h100.json: kernels[1]: unknown key \"medain_us\""),
                    HasSubstr("allowed: bytes, dtype, flops, mean_us, median_us")));
  EXPECT_THAT(parse_error(std::string(kSample).replace(std::string(kSample).find("\"cuda\""), 6,
                                                       "\"cufft\"")),
              HasSubstr("h100.json: versions: unknown key \"cufft\""));
  std::string top = kSample;
  top.insert(top.find("\"version\""), "\"comment\": \"x\",\n  ");
  EXPECT_THAT(parse_error(top), HasSubstr("h100.json: unknown key \"comment\""));
}

TEST(CostDbRead, MissingKeyNamesEntryAndKey) {
  EXPECT_THAT(second_row_error("\"median_us\":10,", ""),
              HasSubstr("h100.json: kernels[1]: missing key \"median_us\""));
  std::string no_sm = kSample;
  no_sm.erase(no_sm.find("\"sm_count\":132,"), std::string("\"sm_count\":132,").size());
  EXPECT_THAT(parse_error(no_sm), HasSubstr("h100.json: device: missing key \"sm_count\""));
}

TEST(CostDbRead, NegativeOrZeroTimes) {
  EXPECT_THAT(second_row_error("\"median_us\":10", "\"median_us\":-1"),
              HasSubstr("h100.json: kernels[1].median_us: must be > 0 (got -1)"));
  EXPECT_THAT(second_row_error("\"p10_us\":9", "\"p10_us\":0"),
              HasSubstr("h100.json: kernels[1].p10_us: must be > 0 (got 0)"));
  EXPECT_THAT(second_row_error("\"flops\":2147483648", "\"flops\":-2"),
              HasSubstr("kernels[1].flops: must be >= 0"));
  // A subnormal duration (issue 31: 5e-324 us gave a 0 s iteration): at least 1 ns.
  EXPECT_THAT(second_row_error("\"p10_us\":9", "\"p10_us\":5e-324"),
              HasSubstr("kernels[1].p10_us: must be at least 0.001 us (1 ns; no kernel or "
                        "transfer is shorter), got 5e-324"));
}

TEST(CostDbRead, TheOptionalMeanMustBePositive) {
  EXPECT_THAT(second_row_error("\"median_us\":10", "\"median_us\":10,\"mean_us\":0"),
              HasSubstr("h100.json: kernels[1].mean_us: must be > 0 (got 0)"));
  EXPECT_THAT(second_row_error("\"median_us\":10", "\"median_us\":10,\"mean_us\":\"x\""),
              HasSubstr("kernels[1].mean_us"));
}

TEST(CostDbRead, PercentilesMustBeOrdered) {
  EXPECT_THAT(second_row_error("\"p10_us\":9", "\"p10_us\":12.5"),
              HasSubstr("kernels[1].p10_us: 12.5 > median_us 10 (need p10_us <= median_us <= "
                        "p90_us)"));
  EXPECT_THAT(second_row_error("\"p90_us\":11", "\"p90_us\":9.5"),
              HasSubstr("kernels[1].p90_us: 9.5 < median_us 10"));
}

TEST(CostDbRead, WrongTypes) {
  EXPECT_THAT(second_row_error("\"median_us\":10", "\"median_us\":\"10\""),
              HasSubstr("kernels[1].median_us: expected a number, got string"));
  EXPECT_THAT(second_row_error("\"tp\":1", "\"tp\":1.5"),
              HasSubstr("kernels[1].tp: expected an integer, got a fractional number"));
  EXPECT_THAT(second_row_error("[1024,1024,1024]", "[1024,\"1024\",1024]"),
              HasSubstr("kernels[1].shape[1]: expected an integer, got string"));
  EXPECT_THAT(second_row_error("[1024,1024,1024]", "\"1024x1024x1024\""),
              HasSubstr("kernels[1].shape: expected an array of integers, got string"));
  EXPECT_THAT(second_row_error("\"samples\":5", "\"samples\":true"),
              HasSubstr("kernels[1].samples: expected an integer, got boolean"));
  EXPECT_THAT(second_row_error("\"name\":\"gemm_fwd\"", "\"name\":null"),
              HasSubstr("kernels[1].name: expected a string, got null"));
  EXPECT_THAT(parse_error(with_second_row("[]")),
              HasSubstr("kernels[1]: expected an object, got array"));
}

TEST(CostDbRead, ValueRules) {
  EXPECT_THAT(second_row_error("\"bf16\"", "\"int8\""),
              HasSubstr("kernels[1].dtype: unknown dtype \"int8\" (allowed: fp32, fp16, bf16, fp8, tf32, fp32-bf16)"));
  EXPECT_THAT(second_row_error("\"tp\":1", "\"tp\":0"), HasSubstr("kernels[1].tp: must be >= 1"));
  EXPECT_THAT(second_row_error("[1024,1024,1024]", "[1024,0,1024]"),
              HasSubstr("kernels[1].shape[1]: must be >= 1 (got 0)"));
  EXPECT_THAT(second_row_error("[1024,1024,1024]", "[]"),
              HasSubstr("kernels[1].shape: must have at least one dimension"));
  EXPECT_THAT(second_row_error("\"samples\":5", "\"samples\":0"),
              HasSubstr("kernels[1].samples: must be >= 1"));
}

TEST(CostDbRead, FormatVersionAndDuplicates) {
  std::string other = kSample;
  other.replace(other.find("traintwin-costdb"), 16, "nccl-tests");
  EXPECT_THAT(parse_error(other),
              HasSubstr("h100.json: format: expected \"traintwin-costdb\", got \"nccl-tests\""));
  std::string v2 = kSample;
  v2.replace(v2.find("\"version\": 1"), 12, "\"version\": 2");
  EXPECT_THAT(parse_error(v2), HasSubstr("version: unsupported version 2 (supported: 1)"));

  EXPECT_THAT(parse_error(with_second_row(kGoodRow)),
              HasSubstr("kernels[1]: duplicate kernel gemm_fwd[1024,1024,1024] bf16 tp1 (also "
                        "kernels[0])"));
  EXPECT_THAT(second_row_error("\"samples\":5", "\"samples\":5,\"samples\":6"),
              HasSubstr("h100.json: duplicate key \"samples\""));

  std::string dup_coll = kSample;
  const std::string row =
      R"({"op":"all_reduce","bytes":134217728,"ranks":8,"nodes":1,"algorithm":"NVLS",)"
      R"("time_us":586.43,"algbw_GBps":228.87,"busbw_GBps":400.53})";
  dup_coll.insert(dup_coll.find(row) + row.size(), ",\n    " + row);
  EXPECT_THAT(parse_error(dup_coll), HasSubstr("collectives[1]: duplicate of collectives[0]"));
}

TEST(CostDbRead, CollectiveRules) {
  std::string bad_op = kSample;
  bad_op.replace(bad_op.find("\"op\":\"all_reduce\""), 17, "\"op\":\"allreduce\"");
  EXPECT_THAT(parse_error(bad_op),
              HasSubstr("collectives[0].op: unknown collective \"allreduce\" (allowed: "
                        "all_reduce, all_gather"));
  std::string one_rank = kSample;
  one_rank.replace(one_rank.find("\"ranks\":8"), 9, "\"ranks\":1");
  EXPECT_THAT(parse_error(one_rank), HasSubstr("collectives[0].ranks: must be >= 2"));
  std::string extra = kSample;
  extra.replace(extra.find("\"algorithm\""), 11, "\"algo\"");
  EXPECT_THAT(parse_error(extra), HasSubstr("collectives[0]: unknown key \"algo\""));
}

TEST(CostDbRead, LoadNamesTheFile) {
  const std::filesystem::path missing =
      std::filesystem::temp_directory_path() / "traintwin-no-such-costdb.json";
  try {
    CostDatabase::load(missing);
    ADD_FAILURE() << "expected a CostDatabaseError";
  } catch (const CostDatabaseError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr(missing.string()), HasSubstr("cannot open")));
  }
}

// ---- writing -------------------------------------------------------------------------------

TEST(CostDbWrite, RoundTripIsEqualAndByteIdentical) {
  CostDatabase db = small_db();
  db.add(gemm_row(4096, 4096, 4096, 700.123456789012345));
  db.add(gemm_row(1024, 4096, 4096, 1.0 / 3.0, 8, Precision::kFp16, "gemm_wgrad"));
  db.add(KernelMeasurement{KernelKey{"adamw_step", {123456789}, Precision::kFp32, 1}, 812.25, 800,
                           830.5, 7, 16.0 * 123456789, 12345678901.5});
  KernelMeasurement with_mean{KernelKey{"gelu_fwd", {524288}, Precision::kFp32, 1}, 160.5, 150,
                              170, 20, 4194304, 4194304};
  with_mean.mean_us = 161.0 + 1.0 / 3.0;  // the mean may lie anywhere in the samples
  db.add(with_mean);
  db.add(CollectiveMeasurement{"all_gather", 1 << 20, 8, std::nullopt, std::nullopt, 25.1, 41.78,
                               36.56});
  db.add(CollectiveMeasurement{"all_gather", 1 << 20, 16, 2, "ring", 95.75, 10.95, 10.27});

  const std::string text = db.to_json();
  const CostDatabase back = CostDatabase::parse(text, "round-trip");
  EXPECT_EQ(back, db);
  EXPECT_EQ(back.to_json(), text);

  const std::filesystem::path file =
      std::filesystem::temp_directory_path() / "traintwin-cost-db-test.json";
  db.save(file);
  EXPECT_EQ(CostDatabase::load(file), db);
  std::filesystem::remove(file);
}

TEST(CostDbWrite, SortedWhateverTheInsertionOrder) {
  std::vector<KernelMeasurement> rows = {
      gemm_row(4096, 4096, 4096, 700), gemm_row(1024, 4096, 4096, 90),
      gemm_row(1024, 4096, 4096, 95, 8), gemm_row(1024, 4096, 4096, 96, 1, Precision::kFp16),
      gemm_row(64, 64, 64, 5, 1, Precision::kBf16, "gemm_dgrad")};
  CostDatabase forward = small_db(), backward = small_db();
  for (const auto& r : rows) forward.add(r);
  for (auto it = rows.rbegin(); it != rows.rend(); ++it) backward.add(*it);
  EXPECT_EQ(forward.to_json(), backward.to_json());
  // (name, dtype, tp, shape): gemm_dgrad < gemm_fwd; bf16 < fp16; tp 1 < tp 8; m 1024 < 4096.
  std::vector<std::string> order;
  for (const auto& k : forward.kernels()) order.push_back(k.key.to_string());
  EXPECT_EQ(order, (std::vector<std::string>{
                       "gemm_dgrad[64,64,64] bf16 tp1", "gemm_fwd[1024,4096,4096] bf16 tp1",
                       "gemm_fwd[4096,4096,4096] bf16 tp1", "gemm_fwd[1024,4096,4096] bf16 tp8",
                       "gemm_fwd[1024,4096,4096] fp16 tp1"}));
  // Integral values are written as integers.
  EXPECT_THAT(forward.to_json(), HasSubstr("\"median_us\":700,"));
}

TEST(CostDbWrite, AddValidatesAndRejectsDuplicates) {
  CostDatabase db = small_db();
  db.add(gemm_row(64, 64, 64, 5));
  EXPECT_THROW(db.add(gemm_row(64, 64, 64, 6)), CostDatabaseError);
  KernelMeasurement bad = gemm_row(128, 64, 64, 5);
  bad.p90_us = 1;
  try {
    db.add(bad);
    ADD_FAILURE() << "expected a CostDatabaseError";
  } catch (const CostDatabaseError& e) {
    EXPECT_THAT(e.what(), HasSubstr("gemm_fwd[128,64,64] bf16 tp1.p90_us"));
  }
  KernelMeasurement inf = gemm_row(256, 64, 64, 5);
  inf.median_us = inf.p90_us = INFINITY;
  EXPECT_THROW(db.add(inf), CostDatabaseError);
  EXPECT_THROW(db.add(CollectiveMeasurement{"all_reduce", 0, 8, {}, {}, 1, 1, 1}),
               CostDatabaseError);
  EXPECT_THROW(CostDatabase(CostDbDevice{"", 1, 1, 1, {}}, {}), CostDatabaseError);
  EXPECT_TRUE(db.erase(gemm_row(64, 64, 64, 5).key));
  EXPECT_FALSE(db.erase(gemm_row(64, 64, 64, 5).key));
  EXPECT_TRUE(db.kernels().empty());
}

// ---- lookups -------------------------------------------------------------------------------

TEST(CostDbLookup, ExactKeyOnly) {
  CostDatabase db = small_db();
  db.add(gemm_row(1024, 4096, 4096, 90));
  const KernelMeasurement* hit =
      db.find(KernelKey{"gemm_fwd", {1024, 4096, 4096}, Precision::kBf16, 1});
  ASSERT_NE(hit, nullptr);
  EXPECT_EQ(hit->median_us, 90);
  EXPECT_EQ(db.find(KernelKey{"gemm_fwd", {1024, 4096, 4096}, Precision::kBf16, 2}), nullptr);
  EXPECT_EQ(db.find(KernelKey{"gemm_fwd", {1024, 4096, 4096}, Precision::kFp16, 1}), nullptr);
  EXPECT_EQ(db.find(KernelKey{"gemm_fwd", {1024, 4096, 4095}, Precision::kBf16, 1}), nullptr);
  EXPECT_EQ(db.find(KernelKey{"gemm_dgrad", {1024, 4096, 4096}, Precision::kBf16, 1}), nullptr);
}

// ln-space distance: |ln(1024/4096)| = ln 4 = 1.386; [2048, 2048, 4096] vs [4096, 4096, 4096]:
// sqrt(2) ln 2 = 0.980; halving and doubling are equally near.
TEST(CostDbLookup, ShapeDistanceIsLogSpace) {
  EXPECT_NEAR(shape_distance({1024, 4096, 4096}, {4096, 4096, 4096}), std::log(4.0), 1e-12);
  EXPECT_NEAR(shape_distance({2048, 2048, 4096}, {4096, 4096, 4096}),
              std::sqrt(2.0) * std::log(2.0), 1e-12);
  EXPECT_DOUBLE_EQ(shape_distance({2048}, {4096}), shape_distance({8192}, {4096}));
  EXPECT_THROW(shape_distance({1, 2}, {1}), InvalidArgument);
  EXPECT_THROW(shape_distance({0}, {1}), InvalidArgument);
}

TEST(CostDbLookup, NearestShapesOfTheSameFamily) {
  CostDatabase db = small_db();
  db.add(gemm_row(1024, 4096, 4096, 90));      // distance ln 2 from [2048, 4096, 4096]
  db.add(gemm_row(8192, 4096, 4096, 1400));    // 2 ln 2
  db.add(gemm_row(2048, 4096, 8192, 350));     // ln 2
  db.add(gemm_row(2048, 4096, 4096, 180, 8));  // other tp
  db.add(gemm_row(2048, 4096, 4096, 180, 1, Precision::kFp16));                // other dtype
  db.add(gemm_row(2048, 4096, 4096, 180, 1, Precision::kBf16, "gemm_dgrad"));  // other name
  db.add(KernelMeasurement{KernelKey{"gemm_fwd", {2048, 4096}, Precision::kBf16, 1}, 1, 1, 1, 1, 1,
                           1});  // other number of dimensions
  const KernelKey key{"gemm_fwd", {2048, 4096, 4096}, Precision::kBf16, 1};
  std::vector<std::string> got;
  for (const KernelMeasurement* m : db.nearest_shapes(key)) got.push_back(m->key.to_string());
  // Ties (ln 2) in database order: [1024, ...] before [2048, 4096, 8192].
  EXPECT_EQ(got, (std::vector<std::string>{"gemm_fwd[1024,4096,4096] bf16 tp1",
                                           "gemm_fwd[2048,4096,8192] bf16 tp1",
                                           "gemm_fwd[8192,4096,4096] bf16 tp1"}));
  EXPECT_EQ(db.nearest_shapes(key, 1).size(), 1u);
  // The key itself, when present, comes first (distance 0).
  db.add(gemm_row(2048, 4096, 4096, 180));
  EXPECT_EQ(db.nearest_shapes(key, 1).at(0)->key, key);
  EXPECT_TRUE(db.nearest_shapes(KernelKey{"gelu_fwd", {10}, Precision::kBf16, 1}).empty());
}

}  // namespace
}  // namespace traintwin

namespace traintwin {
namespace {

// ---- CPU devices (traintwin profile on the CPU backend) ------------------------------------------

CostDatabase cpu_db(int64_t threads) {
  CostDbDevice d{"AMD EPYC 7B13", 2, 2450.5, 8589934592, std::nullopt, "cpu", threads};
  CostDbVersions v{"n/a", "n/a", "n/a", "n/a", "0.1.0", "OpenBLAS 0.3.21 NO_AFFINITY Zen"};
  return CostDatabase(d, v);
}

TEST(CostDbCpuDevice, KindThreadsAndBlasRoundTrip) {
  CostDatabase db = cpu_db(1);
  db.add(KernelMeasurement{KernelKey{"gelu_fwd", {16384}, Precision::kFp32, 1}, 27.5, 27, 29, 20,
                           131072, 131072});
  const std::string text = db.to_json();
  EXPECT_THAT(text, HasSubstr("\"kind\":\"cpu\",\"threads\":1"));
  EXPECT_THAT(text, HasSubstr("\"blas\":\"OpenBLAS 0.3.21 NO_AFFINITY Zen\""));
  const CostDatabase back = CostDatabase::parse(text, "cpu");
  EXPECT_EQ(back, db);
  EXPECT_EQ(back.to_json(), text);
}

// A GPU database records the cuDNN its fused attention ran on (optional: older files and builds
// without cuDNN have none), and reads it back.
TEST(CostDbVersions, CudnnRoundTripsAndIsOptional) {
  CostDbDevice d{"NVIDIA H200", 132, 1980, 150109880320, "9.0", "gpu", std::nullopt};
  CostDbVersions v{"580.159.04", "13.0", "13.1.0", "n/a", "0.1.0", std::nullopt, "9.19.0"};
  CostDatabase db(d, v);
  const std::string text = db.to_json();
  EXPECT_THAT(text, HasSubstr("\"cudnn\":\"9.19.0\""));
  const CostDatabase back = CostDatabase::parse(text, "h200");
  EXPECT_EQ(back.versions().cudnn, std::optional<std::string>("9.19.0"));
  EXPECT_EQ(back, db);
  v.cudnn.reset();
  const CostDatabase none(d, v);
  EXPECT_THAT(none.to_json(), Not(HasSubstr("cudnn")));
  EXPECT_FALSE(CostDatabase::parse(none.to_json(), "h200").versions().cudnn.has_value());
}

TEST(CostDbCpuDevice, SameDeviceIgnoresTheClockButNotTheThreads) {
  CostDbDevice a = cpu_db(1).device(), b = a;
  b.clock_mhz = 3000;
  EXPECT_TRUE(a.same_device(b));
  b.threads = 2;
  EXPECT_FALSE(a.same_device(b));
  EXPECT_FALSE(a.same_device(small_db().device()));
}

TEST(CostDbCpuDevice, UnknownKindAndZeroThreadsAreRefused) {
  std::string text = cpu_db(1).to_json();
  std::string bad_kind = text;
  bad_kind.replace(bad_kind.find("\"cpu\""), 5, "\"tpu\"");
  EXPECT_THAT([&] { CostDatabase::parse(bad_kind, "f.json"); },
              ::testing::ThrowsMessage<CostDatabaseError>(
                  HasSubstr("f.json: device.kind: unknown device kind \"tpu\" (allowed: cpu, gpu)")));
  std::string zero = text;
  zero.replace(zero.find("\"threads\":1"), 11, "\"threads\":0");
  EXPECT_THAT([&] { CostDatabase::parse(zero, "f.json"); },
              ::testing::ThrowsMessage<CostDatabaseError>(HasSubstr("device.threads: must be >= 1")));
}

TEST(CostDbWrite, EraseOfACollectiveRow) {
  CostDatabase db = small_db();
  const CollectiveMeasurement row{"send_recv", 1 << 20, 2, 1, "mpi", 100, 10.48, 10.48};
  db.add(row);
  CollectiveMeasurement again = row;
  again.time_us = 90;
  EXPECT_THROW(db.add(again), CostDatabaseError);
  EXPECT_TRUE(db.erase(row));
  EXPECT_FALSE(db.erase(row));
  db.add(again);
  ASSERT_EQ(db.collectives().size(), 1u);
  EXPECT_EQ(db.collectives()[0].time_us, 90);
}

// The one rule for where databases live: traces/db beside a repository's topologies/ folder.
TEST(CostDbLocation, TracesDbBesideTheTopologiesFolder) {
  namespace fs = std::filesystem;
  EXPECT_EQ(default_database_dir("/repo/topologies/dgx-h100-superpod.yaml"),
            fs::path("/repo/traces/db"));
  EXPECT_EQ(database_dir_beside("/repo/topologies"), fs::path("/repo/traces/db"));
  EXPECT_EQ(default_database_dir("/repo/scenarios/../topologies/x.yaml"),
            fs::path("/repo/scenarios/../traces/db"));  // lexical, as the commands resolve it
  EXPECT_EQ(default_database_dir("topologies/x.yaml"),
            fs::absolute("topologies").parent_path() / "traces" / "db");
}

}  // namespace
}  // namespace traintwin
