// Runs the traintwin binary for the command-line tests.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdlib>
#include <cstdio>
#include <memory>
#include <string>

#include "tests/mpi_child_run.hpp"

namespace traintwin::testing {

/// Exit status and output (stdout and stderr together) of one command.
struct CliResult {
  int status;
  std::string output;
};

/// Runs the shell command `command` (stderr into the output); its exit status (128 + N when
/// killed by signal N, as the shell reports it) and its output.
inline CliResult run_cli_command(const std::string& command) {
  const std::string cmd = command + " 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe.get())) > 0) out.append(buf.data(), n);
  const int status = pclose(pipe.release());
  return {WEXITSTATUS(status), out};
}

/// Runs `traintwin <args>` (TRAINTWIN_BINARY) through the shell, in folder `cwd` when given.
inline CliResult run_cli(const std::string& args, const std::string& cwd = "") {
  return run_cli_command((cwd.empty() ? "" : "cd '" + cwd + "' && ") +
                         std::string(TRAINTWIN_BINARY) + " " + args);
}

/// run_cli() killed after `seconds` (status 124, as timeout(1)): a hang fails the test instead
/// of stalling the suite.
inline CliResult run_cli_limited(const std::string& args, int seconds) {
  return run_cli_command("timeout " + std::to_string(seconds) + " " +
                         std::string(TRAINTWIN_BINARY) + " " + args);
}

/// Runs `mpirun -np <ranks> traintwin <args>` (oversubscribed, as root allowed; LeakSanitizer
/// off in the children: kMpirunEnvironment).
inline CliResult run_mpi_cli(int ranks, const std::string& args) {
  return run_cli_command(kMpirunEnvironment + "mpirun --allow-run-as-root --oversubscribe -np " +
                         std::to_string(ranks) + " " + TRAINTWIN_BINARY + " " + args);
}

/// Whether mpirun is on the PATH.
inline bool have_mpirun() { return std::system("command -v mpirun > /dev/null 2>&1") == 0; }

}  // namespace traintwin::testing
