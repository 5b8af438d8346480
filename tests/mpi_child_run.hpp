// Runs one GoogleTest suite of this very test executable on N MPI ranks (mpirun) and checks that
// every rank ran and passed all of it. The suite's tests do real work only in the children, which
// see the environment variable `child_env` set to 1.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

namespace traintwin::testing {

/// The environment prefix of every mpirun the tests start. LeakSanitizer is off inside the MPI
/// children of a TRAINTWIN_SANITIZE build (only there: the same code runs with it in one
/// process): Open MPI keeps its own allocations past MPI_Finalize (PMIx, hwloc, the component
/// framework), which LeakSanitizer reports as leaks of every child. detect_leaks=0 comes last:
/// of an option given twice the sanitizer takes the last, and scripts/sanitize.sh sets
/// detect_leaks=1 for the whole run.
inline const std::string kMpirunEnvironment =
    "ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 ";

inline void expect_suite_passes_on_ranks(const std::string& child_env, const std::string& suite,
                                         int ranks) {
  // The path of this executable, resolved here: mpirun would resolve /proc/self/exe to itself.
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string cmd = kMpirunEnvironment + child_env + "=1 timeout 300 mpirun --allow-run-as-root --oversubscribe -np " +
                          std::to_string(ranks) + " -x " + child_env + " " + self +
                          " --gtest_filter='" + suite + "*' --gtest_color=no --gtest_brief=1 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  ASSERT_TRUE(pipe) << cmd;
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe.get())) > 0) out.append(buf.data(), n);
  const int status = pclose(pipe.release());
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 0) << cmd << "\n" << out;
  EXPECT_EQ(out.find("[  FAILED  ]"), std::string::npos) << "a rank reported a failed test";
  // Every rank ran every test of the suite (none skipped): one "[  PASSED  ] N tests." each.
  int suite_tests = 0;
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  for (int i = 0; i < unit.total_test_suite_count(); ++i) {
    const ::testing::TestSuite& s = *unit.GetTestSuite(i);
    if (std::string(s.name()).rfind(suite, 0) == 0) suite_tests += s.total_test_count();
  }
  ASSERT_GT(suite_tests, 0) << "no test suite named " << suite << "*";
  const std::string summary = "[  PASSED  ] " + std::to_string(suite_tests) + " tests.";
  int summaries = 0;
  for (size_t pos = out.find(summary); pos != std::string::npos; pos = out.find(summary, pos + 1)) {
    ++summaries;
  }
  EXPECT_EQ(summaries, ranks) << "expected " << ranks << " lines \"" << summary << "\"\n" << out;
}

}  // namespace traintwin::testing
