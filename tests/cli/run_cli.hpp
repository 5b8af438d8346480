// Runs the traintwin binary for the command-line tests.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdlib>
#include <cstdio>
#include <memory>
#include <string>

namespace traintwin::testing {

/// Exit status and output (stdout and stderr together) of one command.
struct CliResult {
  int status;
  std::string output;
};

/// Runs the shell command `command` (stderr into the output).
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

/// Runs `traintwin <args>` (TRAINTWIN_BINARY) through the shell.
inline CliResult run_cli(const std::string& args) {
  return run_cli_command(std::string(TRAINTWIN_BINARY) + " " + args);
}

/// Runs `mpirun -np <ranks> traintwin <args>` (oversubscribed, as root allowed).
inline CliResult run_mpi_cli(int ranks, const std::string& args) {
  return run_cli_command("mpirun --allow-run-as-root --oversubscribe -np " + std::to_string(ranks) +
                         " " + TRAINTWIN_BINARY + " " + args);
}

/// Whether mpirun is on the PATH.
inline bool have_mpirun() { return std::system("command -v mpirun > /dev/null 2>&1") == 0; }

}  // namespace traintwin::testing
