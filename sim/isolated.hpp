// Running work in child processes. SimGrid allows one engine per process, so every command that
// simulates more than one configuration (validate, sweep, simulate with a what-if base run)
// forks one child per simulation and reads its result back through a pipe. One worker pool
// (run_isolated_concurrently) does it for all of them; run_isolated is that pool with one job.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace traintwin {

/// How far a pool of jobs has got, for a progress bar.
struct JobProgress {
  int64_t done = 0;   ///< jobs finished (successfully or not)
  int64_t total = 0;  ///< jobs to run
  double elapsed_s = 0;
  double rate_per_s = 0;  ///< done / elapsed_s (0 before the first finishes)
  double eta_s = 0;       ///< (total - done) / rate_per_s (0 before the first finishes)
};
/// Called once with done = 0 before the first job starts, then after every finished job, in the
/// calling thread. It may throw: running children are then killed and reaped.
using ProgressCallback = std::function<void(const JobProgress&)>;

/// Reports progress to a callback: done = 0 at construction time's clock start, rates from it.
class ProgressClock {
 public:
  ProgressClock(int64_t total, const ProgressCallback& cb);
  /// Calls the callback (if any) with `done` jobs finished.
  void report(int64_t done) const;

 private:
  int64_t total_;
  const ProgressCallback& cb_;
  double start_s_;
};

/// The outcome of one job of run_isolated_concurrently().
struct IsolatedOutcome {
  bool ok = false;
  std::string output;  ///< what the job returned, when ok
  std::string error;   ///< the job's exception message, or its exit status / signal, when not ok
};

/// Runs every job in its own forked child, at most `jobs` at a time, reading each child's result
/// through a pipe while the others run (poll). Results are in the order of `work`. A job that
/// throws gives its message, one that crashes or exits early an error naming its signal or exit
/// status: an outcome with ok = false, never an exception here. Every child is reaped before this
/// returns or throws. Throws InvalidArgument for jobs < 1, Error when pipe() or fork() fails.
std::vector<IsolatedOutcome> run_isolated_concurrently(
    const std::vector<std::function<std::string()>>& work, int jobs,
    const ProgressCallback& progress = {});

/// Asked after each finished job with the outcomes so far (unfinished jobs: ok false, empty
/// error): the indices of unfinished jobs to give up.
using CancelCallback = std::function<std::vector<size_t>(const std::vector<IsolatedOutcome>&)>;

/// run_isolated_concurrently() that gives up the jobs `cancel` names after each finished job: a
/// running one is killed (SIGKILL) and reaped, a waiting one never starts; their outcome is
/// ok = false with error "cancelled". For speculative work (sim/multi_job.cpp starts the replay
/// of every job together beside their alone replays and drops it when those show it is not
/// needed).
std::vector<IsolatedOutcome> run_isolated_concurrently(
    const std::vector<std::function<std::string()>>& work, int jobs,
    const ProgressCallback& progress, const CancelCallback& cancel);

/// Runs `work` in a forked child (run_isolated_concurrently with one job) and returns the string
/// it produced. A child that throws has its message rethrown here as Error; a child that crashes
/// or exits early gives an Error naming its exit status or signal.
std::string run_isolated(const std::function<std::string()>& work);

/// Writes all of `s` to file descriptor `fd`, retrying on EINTR and short writes; stops
/// silently on an error (the reader sees a short message). For children reporting to a pipe.
void write_fully(int fd, const std::string& s);

}  // namespace traintwin
