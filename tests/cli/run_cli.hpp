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

/// Runs `traintwin <args>` (TRAINTWIN_BINARY) through the shell.
inline CliResult run_cli(const std::string& args) {
  const std::string cmd = std::string(TRAINTWIN_BINARY) + " " + args + " 2>&1";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe.get())) > 0) out.append(buf.data(), n);
  const int status = pclose(pipe.release());
  return {WEXITSTATUS(status), out};
}

}  // namespace traintwin::testing
