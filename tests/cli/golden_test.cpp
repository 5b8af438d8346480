// Golden outputs (SimGrid's .tesh habit): what `traintwin program` lowers for the first and last
// rank and what `traintwin simulate` prints and writes (summary.json) for two tiny scenarios,
// checked in under tests/golden/ and compared line by line here, so that a change to the Program
// or to the simulation shows as a diff a reviewer reads. tests/golden/update.sh rewrites them
// after an intended change.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli/run_cli.hpp"

namespace traintwin {
namespace {

namespace fs = std::filesystem;

const fs::path kSource = TRAINTWIN_SOURCE_DIR;

std::string read(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

/// Lines of `text` without the ones that vary between runs (wall time, temporary paths), as
/// tests/golden/update.sh drops them.
std::string stable(const std::string& text) {
  std::string out;
  for (const std::string& l : lines(text)) {
    if (l.rfind("simulated in", 0) == 0 || l.rfind("wall time by phase", 0) == 0 ||
        l.rfind("wrote ", 0) == 0) {
      continue;
    }
    out += l + "\n";
  }
  return out;
}

/// Compares `got` with the golden file, reporting the first differing lines (at most 5).
void expect_golden(const std::string& got, const std::string& golden_name) {
  const fs::path golden = kSource / "tests" / "golden" / golden_name;
  ASSERT_TRUE(fs::exists(golden)) << golden << " is missing: run tests/golden/update.sh";
  const std::vector<std::string> want = lines(read(golden)), have = lines(got);
  int shown = 0;
  for (size_t i = 0; i < std::max(want.size(), have.size()) && shown < 5; ++i) {
    const std::string w = i < want.size() ? want[i] : "<end of file>";
    const std::string h = i < have.size() ? have[i] : "<end of output>";
    if (w != h) {
      ADD_FAILURE() << golden_name << " line " << i + 1 << "\n  golden: " << w << "\n  now:    " << h;
      ++shown;
    }
  }
  if (shown > 0) {
    ADD_FAILURE() << golden_name << " differs; if the change is intended, run tests/golden/update.sh "
                  << "and review git diff tests/golden";
  }
}

class Golden : public ::testing::TestWithParam<std::pair<const char*, int>> {};

TEST_P(Golden, ProgramAndSimulationMatchTheCheckedInOutputs) {
  const std::string name = GetParam().first;
  const int last = GetParam().second;
  const std::string scenario = (kSource / "scenarios" / (name + ".yaml")).string();
  for (int rank : {0, last}) {
    const testing::CliResult p = testing::run_cli("program " + scenario + " --rank " + std::to_string(rank));
    ASSERT_EQ(p.status, 0) << p.output;
    expect_golden(p.output, name + ".program-rank" + std::to_string(rank) + ".txt");
  }
  const fs::path out = fs::temp_directory_path() / ("traintwin-golden-" + name + "-" + std::to_string(getpid()));
  fs::remove_all(out);
  const testing::CliResult s = testing::run_cli("simulate " + scenario + " --out " + out.string());
  ASSERT_EQ(s.status, 0) << s.output;
  expect_golden(stable(s.output), name + ".simulate.txt");
  expect_golden(read(out / "summary.json"), name + ".summary.json");
  fs::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(TinyScenarios, Golden,
                         ::testing::Values(std::pair{"gpt-tiny-brown", 7},
                                           std::pair{"moe-tiny-brown", 7}),
                         [](const auto& info) {
                           std::string n = info.param.first;
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

}  // namespace
}  // namespace traintwin
