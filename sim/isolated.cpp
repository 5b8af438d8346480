#include "sim/isolated.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
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

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

ProgressClock::ProgressClock(int64_t total, const ProgressCallback& cb)
    : total_(total), cb_(cb), start_s_(now_s()) {}

void ProgressClock::report(int64_t done) const {
  if (!cb_) return;
  JobProgress p;
  p.done = done;
  p.total = total_;
  p.elapsed_s = now_s() - start_s_;
  if (done > 0 && p.elapsed_s > 0) {
    p.rate_per_s = static_cast<double>(done) / p.elapsed_s;
    p.eta_s = static_cast<double>(total_ - done) / p.rate_per_s;
  }
  cb_(p);
}

namespace {

/// A running child: its pid, the read end of its pipe, the job index, what it wrote so far.
struct Child {
  pid_t pid = -1;
  int fd = -1;
  size_t job = 0;
  std::string got;
};

int wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

/// Kills and reaps the children still running when the runner leaves early (an exception).
struct ChildReaper {
  std::vector<Child>* running;
  ~ChildReaper() {
    for (Child& c : *running) {
      if (c.fd >= 0) ::close(c.fd);
      if (c.pid <= 0) continue;
      ::kill(c.pid, SIGKILL);
      wait_for(c.pid);
    }
  }
};

/// The outcome of a finished child from what it wrote and its wait status.
IsolatedOutcome outcome_of(const std::string& got, int status) {
  IsolatedOutcome o;
  if (!got.empty() && got[0] == 'E') {
    o.error = got.substr(1);
    return o;
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    o.error = fmt::format("the worker process died of signal {} ({})", sig, ::strsignal(sig));
    return o;
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || got.empty() || got[0] != 'O') {
    o.error = fmt::format("the worker process exited with status {} without a result",
                          WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return o;
  }
  o.ok = true;
  o.output = got.substr(1);
  return o;
}

/// Forks a child running `work`; it writes "O" + result or "E" + message to its pipe and exits.
Child start_child(const std::function<std::string()>& work, size_t job,
                  const std::vector<Child>& running) {
  std::fflush(nullptr);  // the child must not write out the parent's buffered output again
  int fds[2];
  if (::pipe(fds) != 0) throw Error(std::string("worker pool: pipe: ") + std::strerror(errno));
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    throw Error(std::string("worker pool: fork: ") + std::strerror(err));
  }
  if (pid == 0) {
    ::close(fds[0]);
    for (const Child& c : running) ::close(c.fd);  // the siblings' pipes are not ours
    int status = 0;
    std::string out;
    try {
      out = "O";
      out += work();
    } catch (const std::exception& e) {
      out = "E";
      out += e.what();
      status = 3;
    } catch (...) {
      out = "Ean exception that is not a std::exception";
      status = 3;
    }
    write_fully(fds[1], out);
    ::close(fds[1]);
    ::_exit(status);
  }
  ::close(fds[1]);
  Child c;
  c.pid = pid;
  c.fd = fds[0];
  c.job = job;
  return c;
}

}  // namespace

std::vector<IsolatedOutcome> run_isolated_concurrently(
    const std::vector<std::function<std::string()>>& work, int jobs,
    const ProgressCallback& progress) {
  return run_isolated_concurrently(work, jobs, progress, {});
}

std::vector<IsolatedOutcome> run_isolated_concurrently(
    const std::vector<std::function<std::string()>>& work, int jobs,
    const ProgressCallback& progress, const CancelCallback& cancel) {
  if (jobs < 1) {
    throw InvalidArgument(
        fmt::format("run_isolated_concurrently: jobs must be >= 1, got {}", jobs));
  }
  std::vector<IsolatedOutcome> results(work.size());
  std::vector<Child> running;
  ChildReaper reaper{&running};
  const ProgressClock clock(static_cast<int64_t>(work.size()), progress);
  clock.report(0);
  size_t next = 0;
  int64_t done = 0;
  std::vector<pollfd> fds;
  std::vector<bool> skipped(work.size(), false);  // cancelled before they started
  char buf[65536];
  while (next < work.size() || !running.empty()) {
    while (next < work.size() && running.size() < static_cast<size_t>(jobs)) {
      if (skipped[next]) {
        ++next;
        continue;
      }
      running.push_back(start_child(work[next], next, running));
      ++next;
    }
    if (running.empty()) break;
    fds.clear();
    for (const Child& c : running) fds.push_back({c.fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      throw Error(std::string("worker pool: poll: ") + std::strerror(errno));
    }
    std::vector<size_t> finished;  // positions in `running`, ascending
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Child& c = running[i];
      const ssize_t n = ::read(c.fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n > 0) {
        c.got.append(buf, static_cast<size_t>(n));
        continue;
      }
      // EOF (or a read error): the child has closed its end and is exiting.
      ::close(c.fd);
      c.fd = -1;
      results[c.job] = outcome_of(c.got, wait_for(c.pid));
      c.pid = -1;
      finished.push_back(i);
    }
    for (auto it = finished.rbegin(); it != finished.rend(); ++it) {
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(*it));
    }
    for (size_t k = 0; k < finished.size(); ++k) clock.report(++done);
    if (cancel && !finished.empty()) {
      for (size_t job : cancel(results)) {
        if (job >= work.size() || results[job].ok || !results[job].error.empty()) continue;
        results[job].error = "cancelled";
        if (job >= next) {
          skipped[job] = true;
          continue;
        }
        for (auto it = running.begin(); it != running.end(); ++it) {
          if (it->job != job) continue;
          ::close(it->fd);
          ::kill(it->pid, SIGKILL);
          wait_for(it->pid);
          running.erase(it);
          break;
        }
      }
    }
  }
  return results;
}


std::string run_isolated(const std::function<std::string()>& work) {
  const std::vector<IsolatedOutcome> out = run_isolated_concurrently({work}, 1);
  if (!out[0].ok) throw Error(out[0].error);
  return out[0].output;
}

}  // namespace traintwin
