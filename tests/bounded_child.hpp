// Runs a piece of code that may hang or exhaust memory (a regression of an input that made a
// library loop) in a forked child with a time and memory bound, so that a regression fails the
// test instead of stalling the suite or the machine.
#pragma once

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <string>

namespace traintwin::testing {

/// How a bounded child ended: `ok` when it returned, its text (at most 64 KiB) and otherwise what
/// stopped it ("killed by signal 14 (timeout)", "exit 134").
struct BoundedResult {
  bool ok = false;
  std::string text;
  std::string failure;
};

/// Runs `fn` in a forked child that may run `seconds` (SIGALRM) and allocate `extra_bytes` more
/// than it holds at the fork (RLIMIT_DATA over /proc/self/status VmData: relative, so that it
/// also holds under AddressSanitizer, whose shadow memory counts as data). `fn`'s string is
/// passed back to the parent.
inline BoundedResult run_bounded(const std::function<std::string()>& fn, unsigned seconds,
                                 unsigned long long extra_bytes) {
  int fds[2];
  if (::pipe(fds) != 0) return {false, "", "pipe failed"};
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return {false, "", "fork failed"};
  if (pid == 0) {
    ::close(fds[0]);
    unsigned long long data_kb = 0;
    std::ifstream status("/proc/self/status");
    for (std::string key; status >> key;) {
      if (key == "VmData:") {
        status >> data_kb;
        break;
      }
    }
    const rlimit limit{data_kb * 1024 + extra_bytes, data_kb * 1024 + extra_bytes};
    ::setrlimit(RLIMIT_DATA, &limit);
    ::alarm(seconds);
    std::string text;
    try {
      text = fn();
    } catch (...) {
      ::_exit(3);
    }
    if (text.size() > 65536) text.resize(65536);
    ssize_t w = ::write(fds[1], text.data(), text.size());
    ::_exit(w == static_cast<ssize_t>(text.size()) ? 0 : 4);
  }
  ::close(fds[1]);
  BoundedResult r;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) r.text.append(buf, n);
  ::close(fds[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
    r.ok = true;
  } else if (WIFSIGNALED(st)) {
    r.failure = "killed by signal " + std::to_string(WTERMSIG(st)) +
                (WTERMSIG(st) == SIGALRM ? " (timeout)" : "");
  } else {
    r.failure = "exit " + std::to_string(WEXITSTATUS(st)) +
                (WEXITSTATUS(st) == 3 ? " (an exception escaped)" : "");
  }
  return r;
}

}  // namespace traintwin::testing
