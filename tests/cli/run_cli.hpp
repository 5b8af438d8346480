// Runs the traintwin binary for the command-line tests.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <memory>
#include <string>

namespace traintwin::testing {

/// Exit status and output (stdout and stderr together) of one command.
struct CliResult {
  int status;
  std::string output;
};

/// Runs `command` through the shell; its exit status (128 + N when killed by signal N, as the
/// shell reports it) and its output.
inline CliResult run_shell(const std::string& command) {
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
  return run_shell((cwd.empty() ? "" : "cd '" + cwd + "' && ") + std::string(TRAINTWIN_BINARY) +
                   " " + args);
}

/// run_cli() killed after `seconds` (status 124, as timeout(1)): a hang fails the test instead
/// of stalling the suite.
inline CliResult run_cli_limited(const std::string& args, int seconds) {
  return run_shell("timeout " + std::to_string(seconds) + " " + std::string(TRAINTWIN_BINARY) +
                   " " + args);
}

}  // namespace traintwin::testing
