#include "sim/isolated.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/error.hpp"

namespace traintwin {

void write_fully(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

std::string run_isolated(const std::function<std::string()>& work) {
  std::fflush(nullptr);  // the child must not write out the parent's buffered output again
  int fds[2];
  if (::pipe(fds) != 0) throw Error(std::string("run_isolated: pipe: ") + std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(std::string("run_isolated: fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::close(fds[0]);
    int status = 0;
    std::string out;
    try {
      out = "O" + work();
    } catch (const std::exception& e) {
      out = std::string("E") + e.what();
      status = 3;
    }
    write_fully(fds[1], out);
    ::close(fds[1]);
    ::_exit(status);
  }
  ::close(fds[1]);
  std::string got;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!got.empty() && got[0] == 'E') throw Error(got.substr(1));
  if (WIFSIGNALED(status)) {
    throw Error("run_isolated: the simulation process died of signal " + std::to_string(WTERMSIG(status)));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || got.empty()) {
    throw Error("run_isolated: the simulation process exited with status " +
                std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1));
  }
  return got.substr(1);
}

}  // namespace traintwin
