// The elastic agent of live training (`traintwin train SCENARIO --max-restarts N --nproc R --save
// DIR`, run without mpirun): like torchrun's elastic agent, but restarting processes rather than
// resizing the job. It launches `mpirun -np R <traintwin> train SCENARIO ... --save DIR --load
// DIR`, reads the job's output line by line, waits for mpirun, and when the job fails (a rank
// died, the MPI watchdog fired, a non-zero exit) launches it again, up to N times; every launch
// resumes from the last checkpoint in DIR (exec/trainer.hpp's --load), bit-exact.
//
// Each launch (an "attempt") is accounted from the train command's own log lines, timed as they
// arrive (account_attempt): its restart time (process start, MPI initialisation, model build),
// checkpoint load and saves, productive iterations, the progress lost since its last checkpoint,
// and the detection time from the failure to the job's exit. The totals are the badput causes of
// `traintwin goodput` (sim/goodput.hpp: checkpoint_save, lost_progress, detection, restart,
// restore) measured instead of modelled, and their ratio the measured ETTR.
//
// Flow: cli/train_command.cpp parses the flags into ElasticAgentOptions, calls run_elastic_job()
// with callbacks that print, and prints the ElasticRunReport. This library prints nothing.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "exec/fault_injection.hpp"

namespace traintwin::exec {

/// What the agent runs.
struct ElasticAgentOptions {
  std::string launcher = "mpirun";         ///< found on PATH (posix_spawnp)
  std::vector<std::string> launcher_args;  ///< after `-np R`, before the program
  int64_t nproc = 0;                       ///< ranks per launch (mpirun -np), >= 1
  int64_t max_restarts = 0;                ///< launches after the first one, >= 0
  std::string program;                     ///< the traintwin executable
  /// The train command and its flags as the user gave them ("train", SCENARIO, ...), without the
  /// agent's own flags (--max-restarts, --nproc, --fault-inject, --load): the agent adds --load
  /// and the launch's --fault-inject.
  std::vector<std::string> train_args;
  std::filesystem::path save;        ///< the --save folder every launch saves to and resumes from
  std::filesystem::path first_load;  ///< --load of the first launch ("" = `save`)
  std::optional<FaultSpec> fault;    ///< passed per launch by fault_spec_for_attempt()
  /// A launch running longer than this is killed (with its process group) and counts as failed;
  /// 0 = no limit. Seconds.
  double attempt_timeout_s = 0;
};

/// One line of the job's output (stdout and stderr of every rank, as mpirun forwards them) and
/// when the agent read it, seconds since run_elastic_job() started.
struct TimedLine {
  double t_s = 0;
  std::string text;
};

/// One launch of the job, accounted. Times are seconds; start_s/end_s since the agent started.
/// productive + lost_progress + restart + restore + checkpoint_save + detection + other =
/// end_s - start_s.
struct AttemptReport {
  int64_t attempt = 0;     ///< 0 = the first launch
  double start_s = 0;      ///< the previous launch's end (the agent's start for the first)
  double end_s = 0;        ///< mpirun exited
  bool completed = false;  ///< mpirun exited 0
  /// "completed" or why it failed: "rank 1 exited on signal 9 (Killed): fault injection: ...",
  /// the first "traintwin: error: ..." line (the watchdog's distributed timeout), an exit status.
  std::string how_ended;
  int exit_status = 0;                 ///< mpirun's exit status, or 128 + signal
  std::optional<int64_t> failed_rank;  ///< the rank that died or was stopped, when known
  int64_t resumed_from = 0;            ///< the checkpoint's iteration it loaded (0 = from scratch)
  int64_t last_iteration = 0;          ///< the last iteration it logged
  int64_t last_checkpoint = 0;         ///< the last checkpoint it saved (or resumed_from)
  int64_t saves = 0;                   ///< checkpoints it saved
  int64_t kept_iterations = 0;         ///< iterations whose work counts as productive_s
  double productive_s = 0;     ///< iterations kept: up to its last checkpoint, or all if completed
  double lost_progress_s = 0;  ///< iterations after its last checkpoint, up to the failure
  double restart_s = 0;        ///< launch to training: process start, MPI init, model build
  double restore_s = 0;        ///< model build and checkpoint load when it resumed
  double checkpoint_save_s = 0;  ///< the saves' stalls (parameters synchronized and written)
  double detection_s = 0;        ///< failure to mpirun's exit (watchdog timeout, teardown)
  double other_s = 0;            ///< the rest: evaluation, logging, shutdown
};

/// The whole run.
struct ElasticRunReport {
  std::vector<AttemptReport> attempts;
  bool completed = false;  ///< the last launch completed
  /// SIGTERM, SIGINT or SIGHUP the agent received (0 = none): forwarded to the running launch's
  /// process group (killed 30 s later if still there), and no launch after it.
  int stopped_by_signal = 0;
  double wall_s = 0;       ///< the agent's run, seconds
  /// Sums over the attempts (seconds).
  double productive_s() const;
  double lost_progress_s() const;
  double restart_s() const;
  double restore_s() const;
  double checkpoint_save_s() const;
  double detection_s() const;
  double other_s() const;
  /// Restarts done (launches after the first).
  int64_t restarts() const { return attempts.empty() ? 0 : int64_t(attempts.size()) - 1; }
  /// Effective training time ratio: productive_s / wall_s (0 when wall_s is 0).
  double ettr() const;
};

/// Progress of the agent, for the command to print; any may be empty.
struct ElasticAgentCallbacks {
  std::function<void(const TimedLine&)> on_output;  ///< every line of the job, as it comes
  /// A launch starts: its number, the iteration it resumes from (latest checkpoint, 0 = none)
  /// and its command line.
  std::function<void(int64_t, int64_t, const std::vector<std::string>&)> on_attempt_start;
  std::function<void(const AttemptReport&)> on_attempt_end;
};

/// The command of launch `attempt` (0-based): launcher, -np nproc, launcher_args, program,
/// train_args, --load (first_load or save for the first launch, save after), --fault-inject of
/// fault_spec_for_attempt() when it applies. Pure.
std::vector<std::string> launch_command(const ElasticAgentOptions& o, int64_t attempt);

/// Accounts one launch from its output (see AttemptReport), read from the train command's lines:
/// "training ..." (training begins), "resumed from D at iteration N (... in X ms)", " iteration
/// I/ T | ... elapsed time per iteration (ms): X | ...", "saved checkpoint at iteration N to D
/// (X ms)", "fault injection: rank R ...", mpirun's "process rank R ... exited on signal S (..)"
/// and "traintwin: error: ...". `exit_status` is mpirun's (0 = completed). Pure.
AttemptReport account_attempt(int64_t attempt, double start_s, double end_s,
                              const std::vector<TimedLine>& lines, int exit_status);

/// Runs the job (see the file comment): launches until one completes or max_restarts restarts
/// are spent, returns every launch's account. While it runs, SIGTERM, SIGINT and SIGHUP are
/// caught and forwarded to the launch (as torchrun's agent does): the run then stops without a
/// restart (report.stopped_by_signal); the previous handlers are restored on return. Throws
/// ConfigError naming the flag for nproc < 1, max_restarts < 0, an empty save folder or one that
/// cannot be created or written; Error when the launcher cannot be started (e.g. mpirun not on
/// PATH). A job that fails for good is not an error here: the report says so (completed false).
ElasticRunReport run_elastic_job(const ElasticAgentOptions& o, const ElasticAgentCallbacks& cb);

}  // namespace traintwin::exec
