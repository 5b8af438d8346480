// Numeric flag values out of range end as one readable error naming the flag and the range
// (issue 31: `--repeats 0` printed a 309-digit bound, `--min-time 1e300` never ended).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "tests/cli/run_cli.hpp"

namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using traintwin::testing::CliResult;
using traintwin::testing::run_cli_limited;

const std::string kTiny = std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/gpt-tiny-brown.yaml";

TEST(FlagValuesCli, OutOfRangeNumbersNameTheFlagAndARange) {
  const CliResult repeats = run_cli_limited("profile " + kTiny + " --repeats 0", 30);
  EXPECT_NE(repeats.status, 0);
  EXPECT_THAT(repeats.output,
              AllOf(HasSubstr("--repeats"), HasSubstr("must be a number > 0, got 0"),
                    Not(HasSubstr("17976931348623157"))));
  const CliResult min_time = run_cli_limited("profile " + kTiny + " --min-time 1e300", 30);
  EXPECT_NE(min_time.status, 0);
  EXPECT_THAT(min_time.output, HasSubstr("must be a number in [0, 600], got 1e300"));
  const CliResult runs = run_cli_limited("goodput " + kTiny + " --iteration-time 1 --runs -3", 30);
  EXPECT_NE(runs.status, 0);
  EXPECT_THAT(runs.output, AllOf(HasSubstr("--runs"), HasSubstr("must be a number > 0, got -3")));
  const CliResult word = run_cli_limited("goodput " + kTiny + " --days soon", 30);
  EXPECT_NE(word.status, 0);
  EXPECT_THAT(word.output, HasSubstr("must be a number > 0, got soon"));
}

}  // namespace
