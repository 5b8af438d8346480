// Tests of core/units: quantities with explicit units, their errors and formatters.
#include "core/units.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "core/error.hpp"
#include "tests/config_error_of.hpp"

namespace traintwin {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

using testing::config_error_of;

TEST(ParseBandwidth, BytesPerSecondWithSiPrefixes) {
  EXPECT_DOUBLE_EQ(parse_bandwidth_Bps("450GBps", "k"), 450e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth_Bps("3350GBps", "k"), 3350e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth_Bps("25GB/s", "k"), 25e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth_Bps("100MBps", "k"), 100e6);
  EXPECT_DOUBLE_EQ(parse_bandwidth_Bps("2TBps", "k"), 2e12);
  EXPECT_DOUBLE_EQ(parse_bandwidth_Bps("4.8TB/s", "k"), 4.8e12);
  EXPECT_DOUBLE_EQ(parse_bandwidth_Bps("12kBps", "k"), 12e3);
  EXPECT_DOUBLE_EQ(parse_bandwidth_Bps("7Bps", "k"), 7.0);
}

TEST(ParseBandwidth, BitsPerSecondAreDividedByEight) {
  EXPECT_DOUBLE_EQ(parse_bandwidth_Bps("400Gbps", "k"), 50e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth_Bps("200Gb/s", "k"), 25e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth_Bps("800Mbps", "k"), 100e6);
  EXPECT_DOUBLE_EQ(parse_bandwidth_Bps("1.6Tbps", "k"), 200e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth_Bps("8bps", "k"), 1.0);
}

TEST(ParseBandwidth, SpacesExponentsAndFractions) {
  EXPECT_DOUBLE_EQ(parse_bandwidth_Bps("  450 GBps ", "k"), 450e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth_Bps("4.5e2GBps", "k"), 450e9);
  EXPECT_DOUBLE_EQ(parse_bandwidth_Bps(".5GBps", "k"), 0.5e9);
}

TEST(ParseBandwidth, ErrorsNameTheValueThePlaceAndTheAllowedUnits) {
  const std::string no_unit =
      config_error_of([] { parse_bandwidth_Bps("450", "topo.yaml:7: node.nvlink_bandwidth"); });
  EXPECT_THAT(no_unit, AllOf(HasSubstr("topo.yaml:7: node.nvlink_bandwidth: "),
                             HasSubstr("\"450\" has no unit"), HasSubstr("allowed: "),
                             HasSubstr("GBps"), HasSubstr("Gbps")));

  EXPECT_THAT(config_error_of([] { parse_bandwidth_Bps("450GBs", "x"); }),
              AllOf(HasSubstr("x: \"450GBs\" has an unknown unit \"GBs\""), HasSubstr("GBps")));
  // Case matters: gbps is not Gbps.
  EXPECT_THAT(config_error_of([] { parse_bandwidth_Bps("400gbps", "x"); }),
              HasSubstr("unknown unit \"gbps\""));
  // "KB" is ambiguous (10^3 or 2^10) and rejected.
  EXPECT_THAT(config_error_of([] { parse_bandwidth_Bps("1KBps", "x"); }),
              HasSubstr("unknown unit \"KBps\""));
}

TEST(ParseBandwidth, WrongDimensionIsNamed) {
  EXPECT_THAT(config_error_of([] { parse_bandwidth_Bps("80GB", "x"); }),
              AllOf(HasSubstr("\"80GB\" is a size in bytes, not a bandwidth"),
                    HasSubstr("allowed: bytes/s")));
  EXPECT_THAT(config_error_of([] { parse_bandwidth_Bps("1us", "x"); }),
              HasSubstr("\"1us\" is a time, not a bandwidth"));
  EXPECT_THAT(config_error_of([] { parse_bandwidth_Bps("989TFLOPs", "x"); }),
              HasSubstr("is a FLOP rate, not a bandwidth"));
}

TEST(ParseBandwidth, RejectsZeroNegativeAndNonNumbers) {
  EXPECT_THAT(config_error_of([] { parse_bandwidth_Bps("0GBps", "x"); }),
              HasSubstr("\"0GBps\" must be greater than zero"));
  EXPECT_THAT(config_error_of([] { parse_bandwidth_Bps("-1GBps", "x"); }),
              HasSubstr("\"-1GBps\" is negative"));
  EXPECT_THAT(config_error_of([] { parse_bandwidth_Bps("GBps", "x"); }),
              HasSubstr("\"GBps\" does not start with a number"));
  EXPECT_THAT(config_error_of([] { parse_bandwidth_Bps("infGBps", "x"); }),
              HasSubstr("does not start with a number"));
  EXPECT_THAT(config_error_of([] { parse_bandwidth_Bps("", "x"); }), HasSubstr("is empty"));
  EXPECT_THAT(config_error_of([] { parse_bandwidth_Bps("1e999GBps", "x"); }),
              HasSubstr("out of range"));
}

TEST(ParseTime, AllUnits) {
  EXPECT_DOUBLE_EQ(parse_time_s("1us", "k"), 1e-6);
  EXPECT_DOUBLE_EQ(parse_time_s("1\u00b5s", "k"), 1e-6);
  EXPECT_DOUBLE_EQ(parse_time_s("500ns", "k"), 500e-9);
  EXPECT_DOUBLE_EQ(parse_time_s("2ms", "k"), 2e-3);
  EXPECT_DOUBLE_EQ(parse_time_s("1s", "k"), 1.0);
  EXPECT_DOUBLE_EQ(parse_time_s("0ns", "k"), 0.0);  // a zero latency is allowed
  EXPECT_DOUBLE_EQ(parse_time_s("1.5 us", "k"), 1.5e-6);
}

TEST(ParseTime, Errors) {
  EXPECT_THAT(config_error_of([] { parse_time_s("130", "f.yaml:3: fabric.hop_latency"); }),
              AllOf(HasSubstr("f.yaml:3: fabric.hop_latency: \"130\" has no unit"),
                    HasSubstr("(allowed: s, ms, us"), HasSubstr("ns)")));
  EXPECT_THAT(config_error_of([] { parse_time_s("1min", "x"); }),
              HasSubstr("unknown unit \"min\""));
  EXPECT_THAT(config_error_of([] { parse_time_s("400Gbps", "x"); }),
              HasSubstr("is a bandwidth, not a time"));
  EXPECT_THAT(config_error_of([] { parse_time_s("-1us", "x"); }), HasSubstr("is negative"));
}

TEST(ParseBytes, DecimalAndBinaryPrefixes) {
  EXPECT_DOUBLE_EQ(parse_bytes("80GiB", "k"), 80.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(parse_bytes("80GB", "k"), 80e9);
  EXPECT_DOUBLE_EQ(parse_bytes("141GB", "k"), 141e9);
  EXPECT_DOUBLE_EQ(parse_bytes("81559MiB", "k"), 81559.0 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(parse_bytes("4KiB", "k"), 4096.0);
  EXPECT_DOUBLE_EQ(parse_bytes("3kB", "k"), 3000.0);
  EXPECT_DOUBLE_EQ(parse_bytes("1TiB", "k"), 1099511627776.0);
  EXPECT_DOUBLE_EQ(parse_bytes("2TB", "k"), 2e12);
  EXPECT_DOUBLE_EQ(parse_bytes("512B", "k"), 512.0);
  EXPECT_DOUBLE_EQ(parse_bytes("0B", "k"), 0.0);
}

TEST(ParseBytes, Errors) {
  EXPECT_THAT(
      config_error_of([] { parse_bytes("80", "gpu.memory"); }),
      AllOf(HasSubstr("gpu.memory: \"80\" has no unit"), HasSubstr("GiB"), HasSubstr("GB")));
  EXPECT_THAT(config_error_of([] { parse_bytes("80KB", "x"); }),
              AllOf(HasSubstr("unknown unit \"KB\""), HasSubstr("KiB")));
  EXPECT_THAT(config_error_of([] { parse_bytes("80Gb", "x"); }), HasSubstr("unknown unit \"Gb\""));
  EXPECT_THAT(config_error_of([] { parse_bytes("80GBps", "x"); }),
              HasSubstr("is a bandwidth, not a size in bytes"));
}

TEST(ParseFlopRate, Spellings) {
  EXPECT_DOUBLE_EQ(parse_flop_rate_FLOPs("989TFLOPs", "k"), 989e12);
  EXPECT_DOUBLE_EQ(parse_flop_rate_FLOPs("989TFLOP/s", "k"), 989e12);
  EXPECT_DOUBLE_EQ(parse_flop_rate_FLOPs("989 TFLOPS", "k"), 989e12);
  EXPECT_DOUBLE_EQ(parse_flop_rate_FLOPs("19.5TFLOPs", "k"), 19.5e12);
  EXPECT_DOUBLE_EQ(parse_flop_rate_FLOPs("1.979PFLOPs", "k"), 1.979e15);
  EXPECT_DOUBLE_EQ(parse_flop_rate_FLOPs("500GFLOPs", "k"), 500e9);
}

TEST(ParseFlopRate, Errors) {
  EXPECT_THAT(config_error_of([] { parse_flop_rate_FLOPs("989", "gpu.peak_flops.bf16"); }),
              AllOf(HasSubstr("gpu.peak_flops.bf16: \"989\" has no unit"), HasSubstr("TFLOPs")));
  EXPECT_THAT(config_error_of([] { parse_flop_rate_FLOPs("989TFLOP", "x"); }),
              HasSubstr("unknown unit \"TFLOP\""));
  EXPECT_THAT(config_error_of([] { parse_flop_rate_FLOPs("0TFLOPs", "x"); }),
              HasSubstr("must be greater than zero"));
}

TEST(ParseAny, EmptyWhereGivesNoPrefix) {
  EXPECT_THAT(config_error_of([] { parse_time_s("1", ""); }),
              ::testing::StartsWith("\"1\" has no unit"));
}

TEST(Format, Bandwidth) {
  EXPECT_EQ(format_bandwidth_Bps(450e9), "450 GB/s");
  EXPECT_EQ(format_bandwidth_Bps(3350e9), "3.35 TB/s");
  EXPECT_EQ(format_bandwidth_Bps(50e9), "50 GB/s");
  EXPECT_EQ(format_bandwidth_Bps(1.5), "1.5 B/s");
  EXPECT_EQ(format_line_rate_bps(50e9), "400 Gb/s");
  EXPECT_EQ(format_line_rate_bps(25e9), "200 Gb/s");
}

TEST(Format, TimeBytesFlops) {
  EXPECT_EQ(format_time_s(1e-6), "1 us");
  EXPECT_EQ(format_time_s(130e-9), "130 ns");
  EXPECT_EQ(format_time_s(2.5e-3), "2.5 ms");
  EXPECT_EQ(format_time_s(3.0), "3 s");
  EXPECT_EQ(format_time_s(0.0), "0 s");
  EXPECT_EQ(format_bytes(80.0 * 1024 * 1024 * 1024), "80.0 GiB");
  EXPECT_EQ(format_bytes(81559.0 * 1024 * 1024), "79.6 GiB");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_flop_rate_FLOPs(989e12), "989 TFLOP/s");
  EXPECT_EQ(format_flop_rate_FLOPs(19.5e12), "19.5 TFLOP/s");
}

TEST(Format, RoundTripsThroughTheParsers) {
  for (double v : {450e9, 3350e9, 25e9, 1.25e6}) {
    EXPECT_DOUBLE_EQ(parse_bandwidth_Bps(format_bandwidth_Bps(v), "rt"), v);
    EXPECT_DOUBLE_EQ(parse_bandwidth_Bps(format_line_rate_bps(v), "rt"), v);
  }
  for (double v : {1e-6, 130e-9, 2.5e-3, 3.0}) {
    EXPECT_DOUBLE_EQ(parse_time_s(format_time_s(v), "rt"), v);
  }
  for (double v : {989e12, 312e12, 67e12}) {
    EXPECT_DOUBLE_EQ(parse_flop_rate_FLOPs(format_flop_rate_FLOPs(v), "rt"), v);
  }
  EXPECT_DOUBLE_EQ(parse_bytes(format_bytes(80.0 * 1024 * 1024 * 1024), "rt"),
                   80.0 * 1024 * 1024 * 1024);
}

}  // namespace
}  // namespace traintwin
