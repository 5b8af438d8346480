// Running a simulation in a child process. SimGrid allows one engine per process, so every
// command that simulates more than one configuration (validate, sweep) forks one child per
// simulation and reads its summary back through a pipe.
#pragma once

#include <functional>
#include <string>

namespace traintwin {

/// Runs `work` in a forked child and returns the string it produced. A child that throws has its
/// message rethrown here as Error; a child that crashes or exits early gives an Error naming its
/// exit status or signal.
std::string run_isolated(const std::function<std::string()>& work);

/// Writes all of `s` to file descriptor `fd`, retrying on EINTR and short writes; stops
/// silently on an error (the reader sees a short message). For children reporting to a pipe.
void write_fully(int fd, const std::string& s);

}  // namespace traintwin
