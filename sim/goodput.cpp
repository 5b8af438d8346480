// Goodput of a whole run under failures and checkpoints; see goodput.hpp for the model.
#include "sim/goodput.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>
#include <queue>
#include <string>
#include <utility>

#include "core/error.hpp"
#include "core/params.hpp"

namespace traintwin {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kSecondsPerDay = 86400.0;
constexpr const char* kKey = "cluster.reliability";

void require_positive(double v, const char* what, const char* who) {
  if (!(std::isfinite(v) && v > 0)) {
    throw InvalidArgument(fmt::format("{}: {} must be a finite number > 0 (got {})", who, what, v));
  }
}

void require_non_negative(double v, const char* what, const char* who) {
  if (!(std::isfinite(v) && v >= 0)) {
    throw InvalidArgument(
        fmt::format("{}: {} must be a finite number >= 0 (got {})", who, what, v));
  }
}

/// A reliability key out of range: "cluster.reliability.KEY: must be ... (got V)".
[[noreturn]] void bad_key(const std::string& key, const char* rule, double got) {
  throw ConfigError(fmt::format("{}.{}: must be {} (got {})", kKey, key, rule, got));
}

void check_key(const std::string& key, double v, bool zero_allowed) {
  if (!std::isfinite(v) || v < 0 || (!zero_allowed && v == 0)) {
    bad_key(key, zero_allowed ? "a finite number >= 0" : "a finite number > 0", v);
  }
}

/// splitmix64 (Steele, Lea and Flood 2014): a small, portable, seedable generator, so that a seed
/// gives the same run with any standard library.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  /// Uniform in [0, 1).
  double uniform() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return static_cast<double>(z >> 11) * 0x1.0p-53;
  }
  /// Weibull of this mean and shape k (inverse CDF: scale (-ln(1 - u))^(1/k), scale = mean /
  /// Gamma(1 + 1/k)); k = 1 is the exponential.
  double weibull(double mean, double shape) {
    const double scale = mean / std::tgamma(1.0 + 1.0 / shape);
    return scale * std::pow(-std::log1p(-uniform()), 1.0 / shape);
  }
  /// Exponential of this mean.
  double exponential(double mean) { return -mean * std::log1p(-uniform()); }
  /// Poisson of this mean (>= 0): unit-rate exponential arrivals counted up to `mean`, so any
  /// mean works without underflow (O(mean) draws).
  int64_t poisson(double mean) {
    int64_t n = 0;
    for (double t = exponential(1.0); t <= mean; t += exponential(1.0)) ++n;
    return n;
  }

 private:
  uint64_t state_;
};

/// Linear interpolation between order statistics (numpy's default percentile).
double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

Percentiles percentiles(const std::vector<double>& v) {
  return Percentiles{percentile(v, 0.1), percentile(v, 0.5), percentile(v, 0.9)};
}

/// The degraded episodes of one run (goodput.hpp's model): per kind, a Poisson process of
/// arrivals on the wall clock with exponential durations, started stationary (the episodes under
/// way at t = 0: Poisson of mean rate x duration, each with an exponential residual, by
/// memorylessness). Its own random stream, so that the failures of a seed do not move.
class Degradation {
 public:
  Degradation(const GoodputJob& job, uint64_t seed) : rng_(seed ^ 0xD1B54A32D192ED03ULL) {
    for (const DegradedKind kind : kDegradedKinds) {
      const DegradationSpec& e = episodes(job.reliability, kind);
      if (!(e.rate_per_1000_node_days > 0)) continue;
      Kind k;
      k.rate_per_s = e.rate_per_1000_node_days / 1000.0 / kSecondsPerDay *
                     static_cast<double>(job.nodes);
      k.duration_s = e.duration_s;
      const double t_k = job.degraded_iteration_s[static_cast<size_t>(kind)];
      k.speed = std::min(1.0, job.iteration_s / t_k);  // a degraded state is never faster
      k.links = kind != DegradedKind::kStraggler;
      for (int64_t n = rng_.poisson(k.rate_per_s * k.duration_s); n > 0; --n) {
        k.ends.push(rng_.exponential(k.duration_s));
      }
      k.next_arrival = rng_.exponential(1.0 / k.rate_per_s);
      kinds_.push_back(std::move(k));
    }
  }

  bool any() const { return !kinds_.empty(); }

  /// Takes every arrival and end up to `t`; returns the arrivals taken.
  int64_t advance(double t) {
    int64_t arrivals = 0;
    for (Kind& k : kinds_) {
      for (;;) {
        const double end = k.ends.empty() ? kInf : k.ends.top();
        if (k.next_arrival <= t && k.next_arrival < end) {
          k.ends.push(k.next_arrival + rng_.exponential(k.duration_s));
          k.next_arrival += rng_.exponential(1.0 / k.rate_per_s);
          ++arrivals;
        } else if (end <= t) {
          k.ends.pop();
        } else {
          break;
        }
      }
    }
    return arrivals;
  }

  /// The next arrival or end after the last advance().
  double next_change() const {
    double t = kInf;
    for (const Kind& k : kinds_) {
      t = std::min(t, k.next_arrival);
      if (!k.ends.empty()) t = std::min(t, k.ends.top());
    }
    return t;
  }

  /// Progress per wall second now (1: healthy; else the slowest kind under way's) and whether
  /// that kind is a link kind (its badput "degraded links", else "straggler slowdown").
  std::pair<double, bool> speed() const {
    double speed = 1.0;
    bool links = false;
    for (const Kind& k : kinds_) {
      if (!k.ends.empty() && k.speed < speed) {
        speed = k.speed;
        links = k.links;
      }
    }
    return {speed, links};
  }

 private:
  struct Kind {
    double rate_per_s = 0, duration_s = 0, speed = 1, next_arrival = kInf;
    bool links = false;
    std::priority_queue<double, std::vector<double>, std::greater<>> ends;  // of episodes under way
  };
  Rng rng_;
  std::vector<Kind> kinds_;
};

/// One run's state and its event loop. kRecord: the run's events go to `events` (GoodputEvent;
/// trace_goodput_run()); the Monte Carlo's runs are compiled without it and pay nothing.
template <bool kRecord>
class RunSimulation {
 public:
  RunSimulation(const GoodputJob& job, const GoodputCosts& costs, double interval_s,
                const GoodputHorizon& horizon, uint64_t seed,
                std::vector<GoodputEvent>* events = nullptr)
      : job_(job),
        c_(costs),
        interval_s_(interval_s),
        rng_(seed),
        wall_end_(horizon.wall_s > 0 ? horizon.wall_s : kInf),
        work_s_(horizon.wall_s > 0 ? kInf : horizon.work_s),
        spares_free_(job.reliability.spare_nodes),
        repair_s_(job.reliability.node_repair_hours * 3600.0),
        degradation_(job, seed),
        events_(events) {
    for (const auto& [name, f] : job.reliability.failures) {
      classes_.push_back({1000.0 * kSecondsPerDay / f.rate_per_1000_node_days, f.weibull_shape});
    }
    versions_.assign(static_cast<size_t>(job.nodes), 0);
    for (int64_t slot = 0; slot < job.nodes; ++slot) draw_slot(slot);
    draw_planned(0);
  }

  GoodputRun run() {
    while (!finished()) {
      // A planned interruption that fell while the job was down is absorbed by that downtime.
      while (planned_at_ < t_) draw_planned(planned_at_);
      if (degradation_.any()) out_.degraded_episodes += degradation_.advance(t_);
      const double t_fail = next_failure();
      const double t_commit = pending_ ? pending_->second : kInf;
      if (last_save_ >= work_s_) {  // the work is saved; only the final write is left
        const double t_next = std::min(t_commit, t_fail);
        out_.badput.checkpoint_save_s += t_next - t_;
        record(GoodputPhase::kCheckpointSave, t_, t_next);
        t_ = t_next;
        if (t_commit == t_next) {
          committed_ = pending_->first;
          pending_.reset();
        } else {
          fail_now();
          restart(true, 1);
        }
        continue;
      }
      const double due = std::min(last_save_ + interval_s_, work_s_);
      // Degraded: progress at `speed` per wall second (1 when healthy, exactly today's sums).
      const auto [speed, links] = degradation_.any() ? degradation_.speed()
                                                     : std::pair<double, bool>{1.0, false};
      const double t_save = t_ + (due - progress_) / speed;
      const double t_next =
          std::min({t_save, t_fail, planned_at_, t_commit, wall_end_, degradation_.next_change()});
      const double before = progress_;
      progress_ = t_next == t_save ? due : progress_ + (t_next - t_) * speed;  // exact at a save
      if (speed < 1.0) {
        (links ? out_.badput.degraded_links_s : out_.badput.straggler_s) +=
            (t_next - t_) - (progress_ - before);
      }
      record(speed < 1.0 ? (links ? GoodputPhase::kDegradedLinks : GoodputPhase::kStraggler)
                         : GoodputPhase::kCompute,
             t_, t_next);
      t_ = t_next;
      if (t_ >= wall_end_) break;
      if (t_commit == t_next) {
        committed_ = pending_->first;
        pending_.reset();
      } else if (t_fail == t_next) {
        fail_now();
        restart(true, 1);
      } else if (planned_at_ == t_next) {
        planned();
      } else if (t_save == t_next) {
        save();
      }  // else a degraded episode began or ended: taken at the top of the loop
    }
    out_.wall_s = t_;
    out_.useful_s = progress_;
    return out_;
  }

 private:
  struct Clock {
    double t;
    int64_t slot;
    uint64_t version;
    bool operator>(const Clock& o) const { return t > o.t; }
  };
  enum class Phase { kDone, kFailure, kWallEnd };

  bool finished() const { return t_ >= wall_end_ || committed_ >= work_s_; }

  /// Records [start, end] as `phase` (when recording, and when it lasts).
  void record(GoodputPhase phase, double start, double end) {
    if constexpr (kRecord) {
      if (end > start) events_->push_back(GoodputEvent{phase, start, end, progress_, false});
    }
  }

  /// Records an instant `phase` now (when recording).
  void record_instant(GoodputPhase phase) {
    if constexpr (kRecord) events_->push_back(GoodputEvent{phase, t_, t_, progress_, false});
  }

  /// Fresh clocks for a node slot (a new or replaced node): each class's next failure.
  void draw_slot(int64_t slot) {
    const uint64_t v = ++versions_[static_cast<size_t>(slot)];
    double first = kInf;
    for (const auto& [mean_s, shape] : classes_)
      first = std::min(first, t_ + rng_.weibull(mean_s, shape));
    // The slot's failure is the earliest of its classes' (the others are drawn again when the
    // node is replaced; a renewal of the surviving classes would change only Weibull shapes != 1).
    clocks_.push(Clock{first, slot, v});
  }

  /// The next planned interruption after `from` (a Poisson process on the wall clock).
  void draw_planned(double from) {
    const double rate = job_.reliability.planned_interruptions_per_1000_node_days / 1000.0 /
                        kSecondsPerDay * static_cast<double>(job_.nodes);
    planned_at_ = rate > 0 ? from + rng_.weibull(1.0 / rate, 1.0) : kInf;
  }

  double next_failure() {
    while (!clocks_.empty() &&
           clocks_.top().version != versions_[static_cast<size_t>(clocks_.top().slot)]) {
      clocks_.pop();
    }
    return clocks_.empty() ? kInf : clocks_.top().t;
  }

  /// The earliest failure happens now: count it, lose the progress since the durable
  /// checkpoint, send the node to repair and give its slot a new node's clocks.
  void fail_now() {
    const int64_t slot = clocks_.top().slot;
    clocks_.pop();
    ++out_.failures;
    out_.badput.lost_progress_s += progress_ - committed_;
    if constexpr (kRecord) {
      // The compute since the durable checkpoint (saves end compute stretches exactly there).
      for (auto e = events_->rbegin(); e != events_->rend(); ++e) {
        if (e->phase == GoodputPhase::kFailure) break;
        if (!is_compute(e->phase)) continue;
        if (e->progress_s <= committed_) break;
        e->lost = true;
      }
    }
    progress_ = committed_;
    last_save_ = committed_;
    pending_.reset();
    record_instant(GoodputPhase::kFailure);
    repairs_.push(t_ + repair_s_);
    draw_slot(slot);
  }

  /// `d` seconds of a non-progress phase, charged to `bucket` and recorded as `kind`, unless a
  /// failure or the wall end comes first (charged up to it; a failure is then taken with
  /// fail_now()).
  Phase phase(double d, double& bucket, GoodputPhase kind) {
    const double start = t_;
    const double end = t_ + d;
    const double t_fail = next_failure();
    if (t_fail < end && t_fail < wall_end_) {
      bucket += t_fail - t_;
      t_ = t_fail;
      record(kind, start, t_);
      fail_now();
      return Phase::kFailure;
    }
    if (end >= wall_end_) {
      bucket += wall_end_ - t_;
      t_ = wall_end_;
      record(kind, start, t_);
      return Phase::kWallEnd;
    }
    bucket += d;
    t_ = end;
    record(kind, start, t_);
    return Phase::kDone;
  }

  /// Detection (after a failure), nodes for the failed ones (a free spare, else the next
  /// repaired node), re-queue and start, checkpoint load; a failure on the way starts it over.
  void restart(bool detect, int64_t needed) {
    Badput& b = out_.badput;
    for (;;) {
      Phase p = Phase::kDone;
      if (detect) p = phase(c_.detection_s, b.detection_s, GoodputPhase::kDetection);
      while (p == Phase::kDone && needed > 0) {
        while (!repairs_.empty() && repairs_.top() <= t_) {
          repairs_.pop();
          ++spares_free_;
        }
        if (spares_free_ > 0) {
          --spares_free_;
          --needed;
          continue;
        }
        const double back = repairs_.top();  // a failure sent a node to repair
        p = phase(back - t_, b.spare_wait_s, GoodputPhase::kSpareWait);
        if (p == Phase::kDone) {
          repairs_.pop();
          --needed;
        }
      }
      if (p == Phase::kDone) p = phase(c_.restart_s, b.restart_s, GoodputPhase::kRestart);
      if (p == Phase::kDone) p = phase(c_.restore_s, b.restore_s, GoodputPhase::kRestore);
      if (p != Phase::kFailure) return;
      detect = true;
      ++needed;
    }
  }

  /// A checkpoint: the stall (after the previous asynchronous write, which it waits for), then
  /// durable at once (synchronous) or when the background write ends.
  void save() {
    ++out_.checkpoints;
    double stall = c_.save_stall_s;
    if (pending_) stall += std::max(0.0, pending_->second - t_);
    const Phase p = phase(stall, out_.badput.checkpoint_save_s, GoodputPhase::kCheckpointSave);
    if (p == Phase::kFailure) {
      restart(true, 1);
      return;
    }
    if (p == Phase::kWallEnd) return;
    last_save_ = progress_;
    if (job_.reliability.async_save) {
      if (pending_) committed_ = pending_->first;  // it finished during the stall
      pending_ = std::make_pair(progress_, t_ + c_.save_write_s);
    } else {
      committed_ = progress_;
    }
  }

  /// A planned interruption: a synchronous save, then a restart without detection or new node.
  void planned() {
    ++out_.planned;
    record_instant(GoodputPhase::kPlannedInterruption);
    draw_planned(t_);
    ++out_.checkpoints;
    const Phase p =
        phase(c_.save_write_s, out_.badput.checkpoint_save_s, GoodputPhase::kCheckpointSave);
    if (p == Phase::kFailure) {
      restart(true, 1);
      return;
    }
    if (p == Phase::kWallEnd) return;
    committed_ = last_save_ = progress_;
    pending_.reset();
    restart(false, 0);
  }

  const GoodputJob& job_;
  const GoodputCosts& c_;
  double interval_s_;
  Rng rng_;
  double wall_end_, work_s_;
  std::vector<std::pair<double, double>>
      classes_;  // (mean time between failures of one node, shape)
  std::vector<uint64_t> versions_;
  std::priority_queue<Clock, std::vector<Clock>, std::greater<>> clocks_;
  std::priority_queue<double, std::vector<double>, std::greater<>> repairs_;
  int64_t spares_free_;
  double repair_s_;
  double planned_at_ = kInf;
  double t_ = 0, progress_ = 0, committed_ = 0, last_save_ = 0;
  std::optional<std::pair<double, double>> pending_;  // (progress it holds, write end)
  Degradation degradation_;
  std::vector<GoodputEvent>* events_;
  GoodputRun out_;
};

void check_horizon(const GoodputHorizon& h) {
  const bool wall = h.wall_s > 0, work = h.work_s > 0;
  if (wall == work || !std::isfinite(h.wall_s) || !std::isfinite(h.work_s) || h.wall_s < 0 ||
      h.work_s < 0) {
    throw InvalidArgument(fmt::format(
        "goodput: the horizon needs exactly one of wall_s and work_s > 0 (got {} and {})", h.wall_s,
        h.work_s));
  }
}

}  // namespace

double young_interval_s(double save_s, double mtbf_s) {
  require_positive(save_s, "the save time", "young_interval_s");
  require_positive(mtbf_s, "the MTBF", "young_interval_s");
  return std::sqrt(2.0 * save_s * mtbf_s);
}

double daly_interval_s(double save_s, double mtbf_s) {
  require_positive(save_s, "the save time", "daly_interval_s");
  require_positive(mtbf_s, "the MTBF", "daly_interval_s");
  if (save_s >= 2.0 * mtbf_s) return mtbf_s;
  const double x = save_s / (2.0 * mtbf_s);
  return std::sqrt(2.0 * save_s * mtbf_s) * (1.0 + std::sqrt(x) / 3.0 + x / 9.0) - save_s;
}

double daly_expected_wall_s(double work_s, double interval_s, double save_s, double restart_s,
                            double mtbf_s) {
  constexpr const char* kWho = "daly_expected_wall_s";
  require_positive(work_s, "the work", kWho);
  require_positive(interval_s, "the interval", kWho);
  require_positive(mtbf_s, "the MTBF", kWho);
  require_non_negative(save_s, "the save time", kWho);
  require_non_negative(restart_s, "the restart time", kWho);
  return mtbf_s * std::exp(restart_s / mtbf_s) * std::expm1((interval_s + save_s) / mtbf_s) *
         work_s / interval_s;
}

double kokolis_expected_ettr(int64_t nodes, double failures_per_node_day,
                             double checkpoint_interval_s, double restart_overhead_s,
                             double checkpoint_save_s) {
  constexpr const char* kWho = "kokolis_expected_ettr";
  if (nodes < 1) throw InvalidArgument(fmt::format("{}: nodes must be >= 1 (got {})", kWho, nodes));
  require_positive(failures_per_node_day, "the failures per node-day", kWho);
  require_positive(checkpoint_interval_s, "the checkpoint interval", kWho);
  require_non_negative(restart_overhead_s, "the restart overhead", kWho);
  require_non_negative(checkpoint_save_s, "the checkpoint save time", kWho);
  const double failures_per_s = static_cast<double>(nodes) * failures_per_node_day / kSecondsPerDay;
  const double lost = failures_per_s * (restart_overhead_s + checkpoint_interval_s / 2.0);
  return std::max(0.0, 1.0 - lost) / (1.0 + checkpoint_save_s / checkpoint_interval_s);
}

std::string_view to_string(GoodputPhase phase) {
  switch (phase) {
    case GoodputPhase::kCompute:
      return "compute";
    case GoodputPhase::kStraggler:
      return "straggler";
    case GoodputPhase::kDegradedLinks:
      return "degraded_links";
    case GoodputPhase::kCheckpointSave:
      return "checkpoint_save";
    case GoodputPhase::kDetection:
      return "detection";
    case GoodputPhase::kSpareWait:
      return "spare_wait";
    case GoodputPhase::kRestart:
      return "restart";
    case GoodputPhase::kRestore:
      return "restore";
    case GoodputPhase::kFailure:
      return "failure";
    case GoodputPhase::kPlannedInterruption:
      return "planned_interruption";
  }
  return "unknown";
}

bool is_compute(GoodputPhase phase) {
  return phase == GoodputPhase::kCompute || phase == GoodputPhase::kStraggler ||
         phase == GoodputPhase::kDegradedLinks;
}

double checkpoint_bytes(const Scenario& s) {
  const bool fp32 = s.training.precision == Precision::kFp32;
  const double per_parameter = fp32 ? 4.0 + 8.0 : 2.0 + 4.0 + 8.0;
  return static_cast<double>(parameter_count(s.model)) * per_parameter;
}

GoodputJob goodput_job(const Scenario& s, const TopologySpec& topo, double iteration_s) {
  GoodputJob job;
  job.iteration_s = iteration_s;
  job.tokens_per_iteration =
      static_cast<double>(s.training.global_batch_size) * static_cast<double>(s.model.seq_length);
  job.gpus = s.cluster.num_gpus;
  const int64_t per_node = std::max<int64_t>(1, topo.node.gpus_per_node);
  job.nodes = (job.gpus + per_node - 1) / per_node;
  job.checkpoint_bytes = checkpoint_bytes(s);
  job.reliability = s.cluster.reliability ? *s.cluster.reliability : default_reliability();
  return job;
}

GoodputCosts goodput_costs(const GoodputJob& job) {
  constexpr const char* kWho = "goodput";
  require_positive(job.iteration_s, "the iteration time", kWho);
  require_non_negative(job.tokens_per_iteration, "the tokens per iteration", kWho);
  require_non_negative(job.checkpoint_bytes, "the checkpoint bytes", kWho);
  if (job.nodes < 1 || job.gpus < 1) {
    throw InvalidArgument(
        fmt::format("goodput: nodes and GPUs must be >= 1 (got {} and {})", job.nodes, job.gpus));
  }
  const ReliabilitySpec& r = job.reliability;
  if (r.failures.empty()) {
    throw ConfigError(
        fmt::format("{}.failure_rates: at least one component class is needed", kKey));
  }
  double rate_per_node_s = 0;
  for (const auto& [name, f] : r.failures) {
    check_key("failure_rates." + name, f.rate_per_1000_node_days, false);
    check_key("weibull_shapes." + name, f.weibull_shape, false);
    rate_per_node_s += f.rate_per_1000_node_days / 1000.0 / kSecondsPerDay;
  }
  check_key("planned_interruptions_per_1000_node_days", r.planned_interruptions_per_1000_node_days,
            true);
  check_key("detection_s", r.detection_s, true);
  check_key("requeue_s", r.requeue_s, true);
  check_key("process_start_s", r.process_start_s, true);
  check_key("communicator_init_s", r.communicator_init_s, true);
  check_key("communicator_init_s_per_1000_gpus", r.communicator_init_s_per_1000_gpus, true);
  check_key("storage_write_GBps_per_node", r.storage_write_GBps_per_node, false);
  check_key("storage_read_GBps_per_node", r.storage_read_GBps_per_node, false);
  check_key("filesystem_GBps", r.filesystem_GBps, false);
  check_key("async_save_stall_s", r.async_save_stall_s, true);
  check_key("node_repair_hours", r.node_repair_hours, false);
  for (const DegradedKind kind : kDegradedKinds) {
    const DegradationSpec& e = episodes(r, kind);
    const std::string name(to_string(kind));
    check_key(name + "_rate_per_1000_node_days", e.rate_per_1000_node_days, true);
    check_key(name + "_duration_s", e.duration_s, false);
    const double t_k = job.degraded_iteration_s[static_cast<size_t>(kind)];
    if (e.rate_per_1000_node_days > 0 && !(std::isfinite(t_k) && t_k > 0)) {
      throw InvalidArgument(fmt::format(
          "goodput: the iteration time of the {} state must be a finite number > 0 (got {}; "
          "sim/degraded_states.hpp replays it)",
          name, t_k));
    }
  }
  if (!(std::isfinite(r.straggler_slowdown) && r.straggler_slowdown >= 1)) {
    bad_key("straggler_slowdown", "a finite number >= 1", r.straggler_slowdown);
  }
  if (!(std::isfinite(r.link_flap_bandwidth_factor) && r.link_flap_bandwidth_factor > 0 &&
        r.link_flap_bandwidth_factor <= 1)) {
    bad_key("link_flap_bandwidth_factor", "in (0, 1]", r.link_flap_bandwidth_factor);
  }
  if (r.spare_nodes < 0 || r.spare_nodes > job.nodes) {
    throw ConfigError(fmt::format("{}.spare_nodes: must be in [0, {}] (the job's nodes; got {})",
                                  kKey, job.nodes, r.spare_nodes));
  }
  const auto nodes = static_cast<double>(job.nodes);
  GoodputCosts c;
  const double write_Bps = std::min(nodes * r.storage_write_GBps_per_node, r.filesystem_GBps) * 1e9;
  const double read_Bps = std::min(nodes * r.storage_read_GBps_per_node, r.filesystem_GBps) * 1e9;
  c.save_write_s = job.checkpoint_bytes / write_Bps;
  c.save_stall_s = r.async_save ? r.async_save_stall_s : c.save_write_s;
  c.restore_s = job.checkpoint_bytes / read_Bps;
  c.restart_s = r.requeue_s + r.process_start_s + r.communicator_init_s +
                r.communicator_init_s_per_1000_gpus * static_cast<double>(job.gpus) / 1000.0;
  c.detection_s = r.detection_s;
  c.mtbf_s = 1.0 / (nodes * rate_per_node_s);
  const double planned_rate =
      r.planned_interruptions_per_1000_node_days / 1000.0 / kSecondsPerDay * nodes;
  c.planned_interval_s = planned_rate > 0 ? 1.0 / planned_rate : kInf;
  return c;
}

namespace {

/// The checked interval in whole iterations (at least one): saves happen between iterations.
double whole_iterations_s(const GoodputJob& job, double interval_s,
                          const GoodputHorizon& horizon) {
  require_positive(interval_s, "the checkpoint interval", "goodput");
  check_horizon(horizon);
  return std::max(1.0, std::round(interval_s / job.iteration_s)) * job.iteration_s;
}

}  // namespace

GoodputRun simulate_goodput_run(const GoodputJob& job, double interval_s,
                                const GoodputHorizon& horizon, uint64_t seed) {
  const GoodputCosts costs = goodput_costs(job);
  return RunSimulation<false>(job, costs, whole_iterations_s(job, interval_s, horizon), horizon,
                              seed)
      .run();
}

GoodputRunTrace trace_goodput_run(const GoodputJob& job, double interval_s,
                                  const GoodputHorizon& horizon, uint64_t seed) {
  const GoodputCosts costs = goodput_costs(job);
  GoodputRunTrace out;
  out.seed = seed;
  out.interval_s = whole_iterations_s(job, interval_s, horizon);
  out.run = RunSimulation<true>(job, costs, out.interval_s, horizon, seed, &out.events).run();
  return out;
}

GoodputAtInterval goodput_at_interval(const GoodputJob& job, double interval_s,
                                      const GoodputHorizon& horizon, int64_t runs, uint64_t seed) {
  if (runs < 1) throw InvalidArgument(fmt::format("goodput: runs must be >= 1 (got {})", runs));
  const GoodputCosts costs = goodput_costs(job);  // checked once for every run
  GoodputAtInterval out;
  out.interval_s = whole_iterations_s(job, interval_s, horizon);
  std::vector<double> ettr, tokens;
  std::array<std::vector<double>, Badput::kCauses.size()> shares;
  for (int64_t i = 0; i < runs; ++i) {
    GoodputRun r =
        RunSimulation<false>(job, costs, out.interval_s, horizon, seed + static_cast<uint64_t>(i))
            .run();
    ettr.push_back(r.ettr());
    tokens.push_back(std::floor(r.useful_s / job.iteration_s) * job.tokens_per_iteration);
    out.mean_ettr += r.ettr() / static_cast<double>(runs);
    out.mean_failures += static_cast<double>(r.failures) / static_cast<double>(runs);
    out.mean_planned += static_cast<double>(r.planned) / static_cast<double>(runs);
    const Badput& b = r.badput;
    const double w = static_cast<double>(runs) * r.wall_s;
    out.mean_badput_share.checkpoint_save_s += b.checkpoint_save_s / w;
    out.mean_badput_share.lost_progress_s += b.lost_progress_s / w;
    out.mean_badput_share.detection_s += b.detection_s / w;
    out.mean_badput_share.spare_wait_s += b.spare_wait_s / w;
    out.mean_badput_share.restart_s += b.restart_s / w;
    out.mean_badput_share.restore_s += b.restore_s / w;
    out.mean_badput_share.straggler_s += b.straggler_s / w;
    out.mean_badput_share.degraded_links_s += b.degraded_links_s / w;
    const std::array<double, Badput::kCauses.size()> v = b.values();
    for (size_t c = 0; c < v.size(); ++c) shares[c].push_back(r.wall_s > 0 ? v[c] / r.wall_s : 0);
    out.runs.push_back(std::move(r));
  }
  out.ettr = percentiles(ettr);
  out.useful_tokens = percentiles(tokens);
  for (size_t c = 0; c < shares.size(); ++c) out.badput_share[c] = percentiles(shares[c]);
  return out;
}

GoodputReport run_goodput(const GoodputJob& job, double interval_s, const GoodputHorizon& horizon,
                          int64_t runs, uint64_t seed) {
  GoodputReport rep;
  rep.costs = goodput_costs(job);
  // delta is what a save costs the job, the stall (a zero stall, an instant asynchronous save,
  // asks for a save every iteration: a tiny delta, rounded up to one iteration below).
  const double delta = std::max(rep.costs.save_stall_s, 1e-6 * job.iteration_s);
  rep.young_s = young_interval_s(delta, rep.costs.mtbf_s);
  rep.daly_s = daly_interval_s(delta, rep.costs.mtbf_s);
  rep.chosen =
      goodput_at_interval(job, interval_s > 0 ? interval_s : rep.daly_s, horizon, runs, seed);
  for (int k = -4; k <= 4; ++k) {
    GoodputAtInterval at =
        goodput_at_interval(job, rep.daly_s * std::exp2(k / 2.0), horizon, runs, seed);
    at.runs.clear();
    if (at.mean_ettr > rep.best_mean_ettr) {
      rep.best_mean_ettr = at.mean_ettr;
      rep.best_interval_s = at.interval_s;
    }
    rep.sweep.push_back(std::move(at));
  }
  const double per_node_day = kSecondsPerDay / (rep.costs.mtbf_s * static_cast<double>(job.nodes));
  rep.kokolis_ettr = kokolis_expected_ettr(
      job.nodes, per_node_day, rep.chosen.interval_s,
      rep.costs.detection_s + rep.costs.restart_s + rep.costs.restore_s, rep.costs.save_stall_s);
  return rep;
}

}  // namespace traintwin
