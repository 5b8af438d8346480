// Goodput of a whole training run: a seeded discrete-event (Monte Carlo) simulation of weeks of
// iterations under failures, checkpoints and restarts, and the closed forms it is checked
// against. Inputs: one iteration's time (from the replay or the estimator of one iteration,
// sim/session.hpp / sim/analytical.hpp), the checkpoint's bytes (core/memory.hpp's bytes per
// parameter) and the scenario's cluster.reliability (core/reliability.hpp). Next in the flow:
// cli/goodput_command.cpp prints what run_goodput() returns.
//
// The model of one run (every time in seconds):
//   - The job computes; every `interval_s` of progress it saves a checkpoint: a synchronous save
//     stalls for the write (checkpoint bytes over min(nodes x per-node write rate, file system
//     rate)); an asynchronous one stalls async_save_stall_s and becomes durable when its
//     background write ends.
//   - Each node slot carries one renewal process per failure class (Weibull inter-failure times
//     of mean 1 / rate, inverse-CDF sampling); a failure anywhere stops the job: the progress
//     since the last durable checkpoint is lost, the failed node is swapped for a spare (or the
//     job waits for a repaired node), and the job restarts: detection, re-queue, process start,
//     communicator initialisation, checkpoint load. A failure during a save or a restart
//     interrupts it and the restart begins again (as Daly 2006). The new node's clocks restart.
//   - Planned interruptions (a Poisson process on the wall clock, rate per node x nodes) save
//     synchronously, then restart without detection; they lose no progress. One that falls
//     while the job is already down is absorbed by that downtime.
//   - Degraded, not down (cluster.reliability's straggler, link_down, nic_down, link_flap): each
//     kind is a Poisson process of episodes on the wall clock (rate per node x nodes) with
//     exponential durations, started in its stationary state (the episodes under way at t = 0
//     are drawn too), from a random stream of its own so that the failures of a seed stay those
//     of the run without degradation. While the job computes with episodes under way, it
//     progresses at healthy / degraded iteration time of the slowest kind under way (a
//     synchronous step is as slow as its slowest part; two kinds at once do not compound), and
//     the rest of that wall time is badput of that kind: "straggler slowdown" or "degraded
//     links" (link down, NIC down, flapping). Episodes run on through saves and restarts
//     (a restart does not cure a slow GPU or a bad cable), where they cost nothing.
//   - Wall time = useful progress + lost progress + save stalls + detection + spare waits +
//     restart + restore + straggler slowdown + degraded links (each interrupted phase counts in
//     its own category): ETTR (effective training time ratio) = useful / wall.
// A run can also be recorded as its list of events (trace_goodput_run(): the report's timeline of
// one sampled run); the Monte Carlo's other runs record nothing.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/reliability.hpp"
#include "core/scenario.hpp"
#include "topologies/topology.hpp"

namespace traintwin {

/// Young's first-order optimal checkpoint interval sqrt(2 delta M) (Young 1974, "A first order
/// approximation to the optimum checkpoint interval", CACM 17(9)): delta the save time, M the
/// mean time between failures, both in seconds (> 0). Throws InvalidArgument otherwise.
double young_interval_s(double save_s, double mtbf_s);

/// Daly's higher-order optimum (Daly 2006, "A higher order estimate of the optimum checkpoint
/// interval for restart dumps", FGCS 22(3), eq. 37): for delta < 2M,
///   tau = sqrt(2 delta M) [1 + sqrt(delta / (2M)) / 3 + (delta / (2M)) / 9] - delta,
/// else tau = M. Seconds; throws InvalidArgument for delta or M <= 0.
double daly_interval_s(double save_s, double mtbf_s);

/// Daly's expected wall time to complete `work_s` of computation with checkpoints every
/// `interval_s` of it, save time delta, restart time R and exponential failures of mean M
/// (Daly 2006, sec. 3, the complete model): T_w = M e^(R/M) (e^((tau + delta)/M) - 1) work / tau.
/// Exact for that process when work / tau is whole. Throws InvalidArgument for a work, interval or
/// M <= 0, or a negative delta or R.
double daly_expected_wall_s(double work_s, double interval_s, double save_s, double restart_s,
                            double mtbf_s);

/// Kokolis et al.'s expected ETTR of a job (Kokolis, Kuchnik, Hoffman et al. 2025, "Revisiting
/// Reliability in Large-Scale Machine Learning Research Clusters", HPCA 2025 / arXiv 2410.21680,
/// sec. "Estimating ETTR"), in the form
///   E[ETTR] ~ (1 - N r_f (u0 + dt / 2)) / (1 + w / dt)
/// with N the job's nodes, r_f the failures per node-day (failures a Poisson process of rate
/// N r_f), u0 the restart overhead of one failure (detection, restart, checkpoint load: seconds),
/// dt the checkpoint interval (seconds of training between saves; a failure loses dt / 2 of it on
/// average) and w what one save stalls training (seconds). We could not read the paper's text for
/// this work: the form is derived from the assumptions the paper states (and matches a third
/// party's reading of it); see tests/sim/goodput_test.cpp. A first-order approximation: it holds
/// while failures are rare against the interval and the restart, N r_f (u0 + dt) << 1 (there it
/// agrees with Daly's complete model, daly_expected_wall_s(), to second order). Returns 0 where
/// N r_f (u0 + dt / 2) >= 1. Throws InvalidArgument for nodes < 1, a rate or an interval <= 0, or
/// a negative u0 or w.
double kokolis_expected_ettr(int64_t nodes, double failures_per_node_day,
                             double checkpoint_interval_s, double restart_overhead_s,
                             double checkpoint_save_s);

/// The job whose run is simulated.
struct GoodputJob {
  double iteration_s = 0;           ///< one iteration, > 0
  double tokens_per_iteration = 0;  ///< global batch x sequence length, >= 0
  int64_t nodes = 0;                ///< >= 1
  int64_t gpus = 0;                 ///< >= 1 (communicator initialisation grows with it)
  double checkpoint_bytes = 0;      ///< the whole checkpoint, >= 0
  ReliabilitySpec reliability;
  /// One iteration in each degraded state, indexed by DegradedKind (seconds; from replaying the
  /// state, sim/degraded_states.hpp): needed (> 0) for every kind whose rate is > 0. A value
  /// below iteration_s counts as iteration_s (a degraded state is never faster).
  std::array<double, kDegradedKinds.size()> degraded_iteration_s{};
};

/// Bytes of the scenario's checkpoint: every parameter once (Megatron's distributed checkpoint
/// writes each shard once), at the weights' bytes (2 for fp16, bf16 and FP8 runs, whose master
/// copy is 16-bit on the GPU; 4 for fp32) plus the optimizer state Adam keeps in fp32: main
/// parameters for 16-bit training (4) and the two moments (8) — 14 bytes per parameter in
/// mixed precision (Rajbhandari et al. 2020's 2 + K with K = 12), 12 in fp32.
double checkpoint_bytes(const Scenario& s);

/// The job of `s` on `topo` with one iteration of `iteration_s`: nodes = ceil(GPUs / the
/// topology's GPUs per node), tokens = global batch x sequence length, checkpoint_bytes(s), and
/// s.cluster.reliability (default_reliability() when absent).
GoodputJob goodput_job(const Scenario& s, const TopologySpec& topo, double iteration_s);

/// The costs derived from a job (seconds).
struct GoodputCosts {
  double save_write_s = 0;  ///< the checkpoint write at the storage's rate
  double save_stall_s = 0;  ///< what training stalls per save (the write, or the async stall)
  double restore_s = 0;     ///< the checkpoint load
  double restart_s = 0;     ///< re-queue + process start + communicator initialisation
  double detection_s = 0;
  double mtbf_s = 0;              ///< of the job, unexpected failures: 1 / (nodes x sum of rates)
  double planned_interval_s = 0;  ///< mean time between planned interruptions (inf if none)
};

/// The costs of `job`. Throws ConfigError naming the cluster.reliability key and its allowed
/// range for inputs out of range (rates <= 0, a Weibull shape <= 0, negative times, storage rates
/// <= 0, more spares than nodes, a repair time <= 0; a negative degraded-episode rate, a duration
/// <= 0, a straggler slowdown < 1, a flapping link's bandwidth factor outside (0, 1]) and
/// InvalidArgument for a job's own fields out of range (a degraded kind with a rate > 0 and no
/// iteration time > 0 among them).
GoodputCosts goodput_costs(const GoodputJob& job);

/// Where a run's wall time went (seconds; their sum plus useful progress is the wall time).
struct Badput {
  double checkpoint_save_s = 0;  ///< stalls of saves (planned interruptions' saves included)
  double lost_progress_s = 0;    ///< progress since the last durable checkpoint, lost at failures
  double detection_s = 0;
  double spare_wait_s = 0;  ///< no spare node: waiting for a repaired one
  double restart_s = 0;     ///< re-queue, process start, communicator initialisation
  double restore_s = 0;     ///< checkpoint loads
  double straggler_s = 0;   ///< computing slower because of a straggler (the time beyond healthy)
  double degraded_links_s = 0;  ///< computing slower on a link or NIC down or a flapping link
  double total() const {
    return checkpoint_save_s + lost_progress_s + detection_s + spare_wait_s + restart_s +
           restore_s + straggler_s + degraded_links_s;
  }
  /// The causes, in this order: checkpoint_save, lost_progress, detection, spare_wait, restart,
  /// restore, straggler_slowdown, degraded_links (the names `goodput --json` uses).
  static constexpr std::array<std::string_view, 8> kCauses = {
      "checkpoint_save", "lost_progress", "detection",          "spare_wait",
      "restart",         "restore",       "straggler_slowdown", "degraded_links"};
  std::array<double, 8> values() const {
    return {checkpoint_save_s, lost_progress_s, detection_s, spare_wait_s,
            restart_s,         restore_s,       straggler_s, degraded_links_s};
  }
};

/// One simulated run.
struct GoodputRun {
  double wall_s = 0;
  double useful_s =
      0;  ///< progress at the end (the last iterations count: a final save ends a run)
  int64_t failures = 0;           ///< unexpected interruptions
  int64_t planned = 0;            ///< planned interruptions that stopped the job
  int64_t checkpoints = 0;        ///< saves started
  int64_t degraded_episodes = 0;  ///< degraded episodes that began during the run (all kinds)
  Badput badput;
  double ettr() const { return wall_s > 0 ? useful_s / wall_s : 0.0; }
};

/// What a stretch of a recorded run's wall time was (trace_goodput_run()). The compute kinds
/// make progress (kStraggler and kDegradedLinks slower, at that state's iteration time); the
/// others are badput causes of Badput's; kFailure and kPlannedInterruption are instants.
enum class GoodputPhase {
  kCompute,
  kStraggler,      ///< computing with a straggler under way
  kDegradedLinks,  ///< computing with a link or NIC down or a flapping link
  kCheckpointSave,
  kDetection,
  kSpareWait,
  kRestart,
  kRestore,
  kFailure,             ///< an unexpected failure stopped the job (instant)
  kPlannedInterruption  ///< a planned interruption stopped the job (instant; a save follows)
};

/// "compute", "straggler", "degraded_links", "checkpoint_save", "detection", "spare_wait",
/// "restart", "restore", "failure", "planned_interruption".
std::string_view to_string(GoodputPhase phase);

/// Whether `phase` makes progress (kCompute, kStraggler, kDegradedLinks).
bool is_compute(GoodputPhase phase);

/// One event of a recorded run. Consecutive events tile the wall time: each starts where the
/// previous one ended, the first at 0, the last ends at the run's wall_s.
struct GoodputEvent {
  GoodputPhase phase = GoodputPhase::kCompute;
  double start_s = 0;  ///< wall clock
  double end_s = 0;    ///< == start_s for the instants
  /// Useful progress at end_s (seconds of healthy training; after a failure, the durable
  /// progress the job restarts from).
  double progress_s = 0;
  bool lost = false;  ///< a compute stretch whose progress a later failure threw away
};

/// How long a run lasts: a wall-clock budget (a run of D days), or until `work_s` of progress is
/// durable (Daly's setting; the wall time is then the result).
struct GoodputHorizon {
  double wall_s = 0;  ///< > 0: stop at this wall time
  double work_s = 0;  ///< > 0 (and wall_s 0): stop when this much progress is durable
};

/// One run with checkpoints every `interval_s` of progress (> 0), seeded: the same arguments
/// give the same run. Throws as goodput_costs(), and InvalidArgument for an interval <= 0 or a
/// horizon with neither (or both) limits set.
GoodputRun simulate_goodput_run(const GoodputJob& job, double interval_s,
                                const GoodputHorizon& horizon, uint64_t seed);

/// One run and its events (the report's timeline of a sampled run).
struct GoodputRunTrace {
  uint64_t seed = 0;
  double interval_s = 0;  ///< the checkpoint interval, in whole iterations
  GoodputRun run;         ///< the same as simulate_goodput_run()'s for these arguments
  std::vector<GoodputEvent> events;
};

/// simulate_goodput_run() with every event recorded: the run is the same (recording draws no
/// random number). Throws as simulate_goodput_run().
GoodputRunTrace trace_goodput_run(const GoodputJob& job, double interval_s,
                                  const GoodputHorizon& horizon, uint64_t seed);

/// p10 / p50 / p90 of a quantity over runs.
struct Percentiles {
  double p10 = 0, p50 = 0, p90 = 0;
};

/// `runs` runs at one interval (seeds seed, seed + 1, ...: common random numbers across
/// intervals) and their statistics.
struct GoodputAtInterval {
  double interval_s = 0;
  double mean_ettr = 0;
  Percentiles ettr;
  Percentiles useful_tokens;
  double mean_failures = 0;
  double mean_planned = 0;
  /// Mean share of the wall time per badput cause (Badput's order), and its percentiles.
  Badput mean_badput_share;
  std::array<Percentiles, Badput::kCauses.size()> badput_share;  ///< in Badput::kCauses' order
  std::vector<GoodputRun> runs;
};

/// Runs `runs` (>= 1) runs at `interval_s`. Throws as simulate_goodput_run().
GoodputAtInterval goodput_at_interval(const GoodputJob& job, double interval_s,
                                      const GoodputHorizon& horizon, int64_t runs, uint64_t seed);

/// Everything `traintwin goodput` reports.
struct GoodputReport {
  GoodputCosts costs;
  double young_s = 0;
  double daly_s = 0;
  GoodputAtInterval chosen;              ///< at the requested (or Daly's) interval
  std::vector<GoodputAtInterval> sweep;  ///< Daly's interval x 2^(k/2), k = -4..4 (no runs kept)
  double best_interval_s = 0;            ///< of the sweep, highest mean ETTR
  double best_mean_ettr = 0;
  /// kokolis_expected_ettr() at the chosen interval: N r_f from the job MTBF, u0 = detection +
  /// restart + restore, w = the save stall (unexpected failures only: no planned interruptions,
  /// spare waits or degraded states).
  double kokolis_ettr = 0;
};

/// The report for `job` over `horizon`: the chosen interval (`interval_s` > 0, or 0 for Daly's
/// with the save stall as delta), and the sweep around Daly's. Throws as simulate_goodput_run().
GoodputReport run_goodput(const GoodputJob& job, double interval_s, const GoodputHorizon& horizon,
                          int64_t runs, uint64_t seed);

}  // namespace traintwin
