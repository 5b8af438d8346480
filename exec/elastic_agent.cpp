// The elastic agent of live training; see elastic_agent.hpp.
#include "exec/elastic_agent.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <regex>

#include "core/error.hpp"
#include "exec/checkpoint.hpp"

extern char** environ;

namespace traintwin::exec {
namespace {

double sum_of(const std::vector<AttemptReport>& a, double AttemptReport::*field) {
  double s = 0;
  for (const AttemptReport& r : a) s += r.*field;
  return s;
}

/// The signal that asked the agent to stop (SIGTERM from `scancel` or `kill`, SIGINT from Ctrl-C,
/// SIGHUP), 0 while none came. Set by on_stop_signal, read by the launch loop.
volatile sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

/// Catches SIGTERM, SIGINT and SIGHUP for its lifetime (the launches run in process groups of
/// their own, which a terminal's Ctrl-C or a signal to the agent alone never reaches, so the
/// agent forwards them) and restores the previous handlers after.
class StopSignals {
 public:
  StopSignals() {
    g_stop_signal = 0;
    struct sigaction sa = {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: poll() returns at once with EINTR
    for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &sa, &previous_[i]);
  }
  ~StopSignals() {
    for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &previous_[i], nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  static constexpr std::array<int, 3> kSignals = {SIGTERM, SIGINT, SIGHUP};
  std::array<struct sigaction, 3> previous_ = {};
};

/// Seconds a launch may take to exit after a stop signal was forwarded to it before its process
/// group is killed (torch.distributed.elastic's PContext.close default).
constexpr double kStopGrace_s = 30.0;

/// Seconds since `t0`.
double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// Creates `dir` and checks that a file can be written there; ConfigError naming --save if not.
void check_writable(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    throw ConfigError(
        fmt::format("--save {}: cannot create the checkpoint folder ({}); the "
                    "elastic agent restarts from it",
                    dir.string(), ec.message()));
  }
  const std::filesystem::path probe = dir / ".traintwin-elastic-agent-probe";
  {
    std::ofstream f(probe);
    f << "probe\n";
    if (!f) {
      throw ConfigError(
          fmt::format("--save {}: the checkpoint folder is not writable; the "
                      "elastic agent restarts from it",
                      dir.string()));
    }
  }
  std::filesystem::remove(probe, ec);
}

/// The iteration of the latest checkpoint in `dir`, 0 when there is none.
int64_t latest_or_zero(const std::filesystem::path& dir) {
  if (dir.empty() || !std::filesystem::exists(latest_iteration_path(dir))) return 0;
  return read_latest_iteration(dir);
}

/// One launch: spawns `argv` with its output into a pipe, hands every line to `on_line` as it
/// comes, waits for the launcher. Returns its exit status (128 + signal when killed) and the
/// time the agent was done with it (exited, output drained, process group killed; seconds since
/// t0).
struct Finished {
  int status = 0;
  double end_s = 0;
  bool timed_out = false;
  int stopped_by = 0;  ///< the stop signal forwarded to the launch (0 = none)
};

Finished run_launch(const std::vector<std::string>& argv, std::chrono::steady_clock::time_point t0,
                    double timeout_s, const std::function<void(const TimedLine&)>& on_line) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw Error(fmt::format("elastic agent: pipe failed: {}", std::strerror(errno)));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
  posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // Its own process group: the launch and whatever it leaves behind (a stopped rank) can be
  // killed together.
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, args[0], &fa, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    throw Error(
        fmt::format("elastic agent: cannot start {} ({}); it launches every attempt of "
                    "the job (`{} -np N traintwin train ...`)",
                    argv[0], std::strerror(rc), argv[0]));
  }
  Finished f;
  bool reaped = false;
  double exited_at = 0;
  const double started = since(t0);
  std::string partial;
  const auto emit = [&](std::string text) {
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (on_line) on_line({since(t0), std::move(text)});
  };
  const auto reap = [&](int options) {
    int st = 0;
    if (::waitpid(pid, &st, options) == pid) {
      reaped = true;
      exited_at = since(t0);
      f.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
  };
  double forwarded_at = 0;
  for (;;) {
    // A stop signal: forwarded to the launch's process group (mpirun and the ranks it started),
    // once; the group is killed if it has not exited within the grace period.
    if (g_stop_signal != 0 && f.stopped_by == 0 && !reaped) {
      f.stopped_by = g_stop_signal;
      forwarded_at = since(t0);
      ::kill(-pid, f.stopped_by);
    }
    if (f.stopped_by != 0 && !reaped && since(t0) - forwarded_at > kStopGrace_s) {
      ::kill(-pid, SIGKILL);
      reap(0);
    }
    pollfd p{fds[0], POLLIN, 0};
    const int n = ::poll(&p, 1, 100);  // -1 with EINTR when a signal came: checked above
    if (n > 0) {
      char buf[4096];
      const ssize_t got = ::read(fds[0], buf, sizeof buf);
      if (got <= 0) break;  // EOF: every writer (the launcher and its ranks) is gone
      partial.append(buf, static_cast<size_t>(got));
      for (size_t nl; (nl = partial.find('\n')) != std::string::npos;) {
        emit(partial.substr(0, nl));
        partial.erase(0, nl + 1);
      }
    }
    if (!reaped) reap(WNOHANG);
    // The launcher is gone but something still holds the pipe (a rank it left stopped): stop
    // reading a moment later.
    if (reaped && since(t0) - exited_at > 2.0) break;
    if (!reaped && timeout_s > 0 && since(t0) - started > timeout_s) {
      ::kill(-pid, SIGKILL);
      f.timed_out = true;
      reap(0);
    }
  }
  if (!partial.empty()) emit(partial);
  if (!reaped) reap(0);
  ::kill(-pid, SIGKILL);  // leftovers of the launch's process group, if any (ESRCH otherwise)
  ::close(fds[0]);
  f.end_s = since(t0);  // the launch is over for the agent: exited, drained, cleaned up
  return f;
}

}  // namespace

double ElasticRunReport::productive_s() const {
  return sum_of(attempts, &AttemptReport::productive_s);
}
double ElasticRunReport::lost_progress_s() const {
  return sum_of(attempts, &AttemptReport::lost_progress_s);
}
double ElasticRunReport::restart_s() const { return sum_of(attempts, &AttemptReport::restart_s); }
double ElasticRunReport::restore_s() const { return sum_of(attempts, &AttemptReport::restore_s); }
double ElasticRunReport::checkpoint_save_s() const {
  return sum_of(attempts, &AttemptReport::checkpoint_save_s);
}
double ElasticRunReport::detection_s() const {
  return sum_of(attempts, &AttemptReport::detection_s);
}
double ElasticRunReport::other_s() const { return sum_of(attempts, &AttemptReport::other_s); }
double ElasticRunReport::ettr() const { return wall_s > 0 ? productive_s() / wall_s : 0; }

std::vector<std::string> launch_command(const ElasticAgentOptions& o, int64_t attempt) {
  std::vector<std::string> cmd = {o.launcher, "-np", std::to_string(o.nproc)};
  cmd.insert(cmd.end(), o.launcher_args.begin(), o.launcher_args.end());
  cmd.push_back(o.program);
  cmd.insert(cmd.end(), o.train_args.begin(), o.train_args.end());
  const std::filesystem::path load = attempt == 0 && !o.first_load.empty() ? o.first_load : o.save;
  cmd.insert(cmd.end(), {"--load", load.string()});
  if (o.fault) {
    if (const std::optional<FaultSpec> f = fault_spec_for_attempt(*o.fault, attempt)) {
      cmd.insert(cmd.end(), {"--fault-inject", to_string(*f)});
    }
  }
  return cmd;
}

AttemptReport account_attempt(int64_t attempt, double start_s, double end_s,
                              const std::vector<TimedLine>& lines, int exit_status) {
  // The train command's lines (cli/train_command.cpp) and mpirun's.
  static const std::regex ready(R"(^training .* rank\(s\))");
  static const std::regex resumed(
      R"(^resumed from .* at iteration (\d+)(?: \(.* in ([0-9.]+) ms\))?)");
  static const std::regex iteration(
      R"(^ iteration +(\d+)/ *\d+ \|.*elapsed time per iteration \(ms\): ([0-9.]+) \|)");
  static const std::regex saved(R"(^saved checkpoint at iteration (\d+) to .* \(([0-9.]+) ms\)$)");
  static const std::regex fault(R"(fault injection: rank (\d+) )");
  static const std::regex noticed(
      R"(process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+) \(([^)]*)\))");
  AttemptReport r;
  r.attempt = attempt;
  r.start_s = start_s;
  r.end_s = end_s;
  r.exit_status = exit_status;
  r.completed = exit_status == 0;
  std::optional<double> t_ready, t_fault;
  double load_s = 0;
  struct Step {
    double t_s;
    int64_t iteration;
    double work_s;
  };
  std::vector<Step> steps;
  std::vector<std::pair<double, int64_t>> saves;  // (time read, iteration)
  std::string fault_text, died_text, error_text;
  std::optional<int64_t> fault_rank, died_rank;
  double t_progress = start_s;  // the last line showing training progress
  for (const TimedLine& l : lines) {
    std::smatch m;
    if (std::regex_search(l.text, m, ready)) {
      if (!t_ready) t_ready = l.t_s;
      t_progress = std::max(t_progress, l.t_s);
    } else if (std::regex_search(l.text, m, resumed)) {
      r.resumed_from = std::stoll(m[1]);
      if (m[2].matched) load_s = std::stod(m[2]) / 1000.0;
    } else if (std::regex_search(l.text, m, iteration)) {
      const int64_t it = std::stoll(m[1]);
      const int64_t prev = steps.empty() ? r.resumed_from : steps.back().iteration;
      steps.push_back({l.t_s, it, std::stod(m[2]) / 1000.0 * static_cast<double>(it - prev)});
      r.last_iteration = it;
      t_progress = std::max(t_progress, l.t_s);
    } else if (std::regex_search(l.text, m, saved)) {
      saves.push_back({l.t_s, std::stoll(m[1])});
      r.checkpoint_save_s += std::stod(m[2]) / 1000.0;
      t_progress = std::max(t_progress, l.t_s);
    } else if (std::regex_search(l.text, m, fault)) {
      if (!t_fault) {
        t_fault = l.t_s;
        fault_rank = std::stoll(m[1]);
        fault_text = l.text.substr(static_cast<size_t>(m.position(0)));
      }
    } else if (std::regex_search(l.text, m, noticed)) {
      if (!died_rank) {
        died_rank = std::stoll(m[1]);
        died_text =
            fmt::format("rank {} exited on signal {} ({})", m[1].str(), m[2].str(), m[3].str());
      }
    } else if (error_text.empty() && l.text.rfind("traintwin: error: ", 0) == 0) {
      error_text = l.text;
    }
  }
  r.last_checkpoint = r.resumed_from;
  for (const auto& s : saves) r.last_checkpoint = std::max(r.last_checkpoint, s.second);
  r.saves = static_cast<int64_t>(saves.size());
  r.kept_iterations = (r.completed ? r.last_iteration : r.last_checkpoint) - r.resumed_from;
  r.restore_s = r.resumed_from > 0 ? load_s : 0;
  const double duration = end_s - start_s;
  if (r.completed) {
    r.how_ended = "completed";
    for (const Step& s : steps) r.productive_s += s.work_s;
    r.restart_s = t_ready ? *t_ready - start_s - r.restore_s : 0;
  } else {
    for (const Step& s : steps) {
      (s.iteration <= r.last_checkpoint ? r.productive_s : r.lost_progress_s) += s.work_s;
    }
    // The failure: the injected fault's line, else the last sign of progress.
    const double t_fail = t_fault ? std::max(*t_fault, t_progress) : t_progress;
    if (t_fault) r.lost_progress_s += std::max(0.0, *t_fault - t_progress);  // the partial step
    if (t_ready) {
      r.restart_s = *t_ready - start_s - r.restore_s;
    } else {
      r.restart_s = (t_fault ? *t_fault : t_progress) - start_s;  // died before training began
    }
    r.detection_s = std::max(0.0, end_s - t_fail);
    r.failed_rank = fault_rank ? fault_rank : died_rank;
    std::vector<std::string> why;
    if (!died_text.empty()) why.push_back(died_text);
    if (!fault_text.empty()) why.push_back(fault_text);
    if (!error_text.empty()) why.push_back(error_text);
    if (why.empty()) why.push_back(fmt::format("mpirun exited with status {}", exit_status));
    for (const std::string& w : why) r.how_ended += (r.how_ended.empty() ? "" : "; ") + w;
  }
  r.other_s = duration - r.productive_s - r.lost_progress_s - r.restart_s - r.restore_s -
              r.checkpoint_save_s - r.detection_s;
  return r;
}

ElasticRunReport run_elastic_job(const ElasticAgentOptions& o, const ElasticAgentCallbacks& cb) {
  if (o.nproc < 1) {
    throw ConfigError(
        fmt::format("--nproc: must be a whole number >= 1 (ranks of each launch), "
                    "got {}",
                    o.nproc));
  }
  if (o.max_restarts < 0) {
    throw ConfigError(
        fmt::format("--max-restarts: must be a whole number >= 0, got {}", o.max_restarts));
  }
  if (o.save.empty()) {
    throw ConfigError(
        "--max-restarts needs --save DIR: every restart resumes from the last "
        "checkpoint saved there");
  }
  check_writable(o.save);
  const StopSignals stop_signals;
  const auto t0 = std::chrono::steady_clock::now();
  ElasticRunReport report;
  double previous_end = 0;
  for (int64_t attempt = 0; attempt <= o.max_restarts; ++attempt) {
    if (g_stop_signal != 0) {  // came between two launches: no further launch
      report.stopped_by_signal = g_stop_signal;
      break;
    }
    const std::vector<std::string> cmd = launch_command(o, attempt);
    const std::filesystem::path load =
        attempt == 0 && !o.first_load.empty() ? o.first_load : o.save;
    if (cb.on_attempt_start) cb.on_attempt_start(attempt, latest_or_zero(load), cmd);
    std::vector<TimedLine> lines;
    const Finished f = run_launch(cmd, t0, o.attempt_timeout_s, [&](const TimedLine& l) {
      lines.push_back(l);
      if (cb.on_output) cb.on_output(l);
    });
    AttemptReport a = account_attempt(attempt, previous_end, f.end_s, lines, f.status);
    if (f.timed_out) {
      a.completed = false;
      a.how_ended = fmt::format("killed after the attempt time limit of {:.0f} s; {}",
                                o.attempt_timeout_s, a.how_ended);
    }
    if (f.stopped_by != 0) {
      a.completed = false;
      a.how_ended = fmt::format("stopped: the agent received signal {} ({}) and forwarded it to "
                                "the job; not restarted",
                                f.stopped_by, ::strsignal(f.stopped_by));
      report.stopped_by_signal = f.stopped_by;
    }
    previous_end = f.end_s;
    if (cb.on_attempt_end) cb.on_attempt_end(a);
    report.attempts.push_back(a);
    if (a.completed || f.stopped_by != 0) break;
  }
  report.completed = !report.attempts.empty() && report.attempts.back().completed;
  report.wall_s = previous_end;  // the launches partition the run (the report is built after)
  return report;
}

}  // namespace traintwin::exec
