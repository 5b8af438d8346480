// Fault injection for live training (`traintwin train --fault-inject SPEC`): a rank of the job
// kills (SIGKILL) or stops (SIGSTOP) itself inside the training loop, so that the resilience of
// the job (the MPI watchdog, the elastic agent of exec/elastic_agent.hpp, checkpoint resume) is
// exercised by real failures, as the failures that `traintwin goodput` models (sim/goodput.hpp).
//
// Flow: the command parses the spec (parse_fault_spec), builds a FaultInjector for its rank after
// the Trainer exists, asks it at the end of every iteration (at_iteration_end) whether to fail
// now, prints the injector's description and then calls inject_fault(). The elastic agent passes
// a chosen fault only to the launch it names and a random one to every launch with that launch's
// number (so that each launch draws its own failure time; fault_spec_for_attempt).
//
// Spec: comma-separated key=value pairs.
//   chosen fault:  rank=R,iteration=I[,kind=kill|stop][,attempt=A]
//   random faults: rate_per_hour=X[,seed=S][,rank=R][,kind=kill|stop][,attempt=A]
// A chosen fault fires on rank R at the end of iteration I's step, before the checkpoint of
// iteration I is written (so that iteration's work is lost with the rank). Random faults: job
// failures as a Poisson process of X per hour of training time; the time of the first one in
// this launch and its rank (R, or uniform over the ranks) are drawn from (S, A); it fires at the
// end of the first iteration that ends past it. `attempt` is the launch of the elastic agent
// (0 = the first) the fault is meant for; a plain `mpirun ... train` is that launch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace traintwin::exec {

/// What the failing rank does to itself.
enum class FaultKind {
  kKill,  ///< raise(SIGKILL): the process dies at once (a GPU/host fault, an OOM kill)
  kStop,  ///< raise(SIGSTOP): the process hangs (the other ranks' watchdog must fire)
};

/// "kill" | "stop".
const char* to_string(FaultKind kind);

/// A parsed --fault-inject spec (see the file comment).
struct FaultSpec {
  std::optional<int64_t> rank;       ///< the failing rank (random faults: nullopt = drawn)
  std::optional<int64_t> iteration;  ///< chosen fault: the iteration (1-based) it fires at
  FaultKind kind = FaultKind::kKill;
  int64_t attempt = 0;                  ///< the launch it is meant for (0 = the first)
  std::optional<double> rate_per_hour;  ///< random faults: job failures per hour (> 0)
  uint64_t seed = 1;                    ///< random faults: the seed of the draws

  bool random() const { return rate_per_hour.has_value(); }
};

/// The keys a spec may hold, for messages: "rank, iteration, kind, attempt, rate_per_hour, seed".
const char* fault_spec_keys();

/// Parses `text` (see the file comment). Throws ConfigError naming --fault-inject, the bad key or
/// value, and the allowed keys and values: an unknown or repeated key, a value that is not a
/// whole number >= 0 (rank, attempt, seed) or >= 1 (iteration), a rate that is not > 0, a kind
/// other than kill or stop, both iteration and rate_per_hour, neither, or a chosen fault without
/// rank.
FaultSpec parse_fault_spec(const std::string& text);

/// The spec as parse_fault_spec reads it back (keys in a fixed order; the rate in shortest
/// round-trip form).
std::string to_string(const FaultSpec& spec);

/// The spec the elastic agent passes to launch `attempt` (0-based): a chosen fault only to the
/// launch it names (nullopt for the others), a random one to every launch with attempt =
/// `attempt`.
std::optional<FaultSpec> fault_spec_for_attempt(const FaultSpec& spec, int64_t attempt);

/// The fault of one rank of one launch: when it fires.
class FaultInjector {
 public:
  /// `rank` of `world_size` ranks, training up to iteration `train_iters`. Throws ConfigError
  /// naming --fault-inject when the spec's rank is not below world_size or its iteration is past
  /// train_iters (the fault would never fire).
  FaultInjector(const FaultSpec& spec, int64_t rank, int64_t world_size, int64_t train_iters);

  /// Called by the training loop at the end of iteration `iteration`'s step, `elapsed_s` seconds
  /// of training (since the launch's first iteration began) having passed. Returns the fault to
  /// inject now on this rank, at most once.
  std::optional<FaultKind> at_iteration_end(int64_t iteration, double elapsed_s);

  /// The failing rank of this launch (drawn for random faults).
  int64_t failing_rank() const { return failing_rank_; }
  /// Random faults: the drawn training time of the failure, seconds (nullopt for a chosen one).
  std::optional<double> failure_time_s() const { return failure_time_s_; }

  /// The line a rank prints just before it fails, read back by the elastic agent:
  /// "fault injection: rank 1 kill (SIGKILL) at iteration 3 of attempt 0".
  std::string describe(int64_t iteration) const;

 private:
  FaultSpec spec_;
  int64_t rank_;
  int64_t failing_rank_;
  std::optional<double> failure_time_s_;
  bool fired_ = false;
};

/// Makes this process fail as `kind` says (raise(SIGKILL) or raise(SIGSTOP)). After a stop, it
/// returns once the process is continued (SIGCONT).
void inject_fault(FaultKind kind);

}  // namespace traintwin::exec
