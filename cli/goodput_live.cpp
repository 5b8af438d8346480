// `traintwin goodput --live`; see goodput_live.hpp.
#include "cli/goodput_live.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "core/error.hpp"
#include "exec/checkpoint.hpp"
#include "exec/elastic_agent.hpp"
#include "exec/launch_env.hpp"
#include "exec/live_goodput.hpp"
#include "sim/goodput.hpp"

namespace traintwin::cli {
namespace {

std::string pct(double x) { return fmt::format("{:5.1f} %", 100.0 * x); }

/// The checks before anything runs (the flags, the scenario's checkpoints, the folder).
void check_live(const GoodputLiveOptions& o, const Scenario& s,
                const std::vector<Override>& scenario_overrides) {
  exec::require_no_launcher(
      exec::read_launch_environment(), "--live", "the live twin",
      "traintwin goodput --live SCENARIO --nproc R --rate-per-hour X --save DIR");
  if (!o.rate_per_hour) {
    throw ConfigError("--live needs --rate-per-hour X: the failures injected per hour of training");
  }
  if (!o.nproc)
    throw ConfigError("--live needs --nproc R: the ranks of each launch (mpirun -np R)");
  if (o.save.empty()) {
    throw ConfigError("--live needs --save DIR: every relaunch resumes from the checkpoints there");
  }
  if (!s.training.save_interval || *s.training.save_interval < 1) {
    throw ConfigError(fmt::format(
        "{}: training.save_interval: the live twin needs checkpoints to restart from; set it "
        "(e.g. --set training.save_interval=10), got {}",
        s.source.string(), s.training.save_interval.value_or(0)));
  }
  for (const Override& ov : scenario_overrides) {
    if (ov.key == "training.log_interval" && ov.value != "1") {
      throw ConfigError(fmt::format(
          "training.log_interval={}: --live accounts each launch's work from its iteration lines "
          "and logs every iteration (leave the key out, or give 1)",
          ov.value));
    }
  }
  if (std::filesystem::exists(latest_iteration_path(o.save))) {
    throw ConfigError(fmt::format(
        "--save {}: already holds a checkpoint (iteration {}); the live run starts from scratch: "
        "give an empty folder",
        o.save, read_latest_iteration(o.save)));
  }
}

/// Shares of the wall time, in the order of kRows.
constexpr std::array<const char*, 6> kRows = {"lost_progress", "detection",       "restart",
                                              "restore",       "checkpoint_save", "other"};

/// The model's view of the live run: `runs` simulated runs of the job of the measured costs at
/// `rate_per_hour`, until the live run's work is durable, checkpointing as the scenario does; the
/// first start and the rest it does not model (evaluation, logging, shutdown) are added to each
/// simulated run's wall time as measured.
struct ModelView {
  double rate_per_hour = 0;
  double mean_ettr = 0, p10 = 0, p90 = 0;
  double mean_failures = 0;
  std::array<double, kRows.size()> share{};  ///< mean share of the wall time, kRows' order
};

ModelView model_view(const exec::LiveCosts& c, double rate_per_hour, int64_t gpus, double tokens,
                     int64_t save_interval, int64_t runs, uint64_t seed) {
  const GoodputJob job = exec::live_goodput_job(c, rate_per_hour, gpus, tokens);
  const double work_s = static_cast<double>(c.iterations) * c.iteration_s;
  const double interval_s = static_cast<double>(save_interval) * c.iteration_s;
  const GoodputAtInterval at =
      goodput_at_interval(job, interval_s, GoodputHorizon{0, work_s}, runs, seed);
  const double extra_s = c.first_start_s + c.other_s;
  ModelView v;
  v.rate_per_hour = rate_per_hour;
  v.mean_failures = at.mean_failures;
  std::vector<double> ettrs;
  for (const GoodputRun& r : at.runs) {
    const double wall = r.wall_s + extra_s;
    ettrs.push_back(r.useful_s / wall);
    v.mean_ettr += ettrs.back();
    const Badput& b = r.badput;
    const std::array<double, kRows.size()> x = {
        b.lost_progress_s, b.detection_s,       b.restart_s + b.spare_wait_s,
        b.restore_s,       b.checkpoint_save_s, extra_s};
    for (size_t i = 0; i < x.size(); ++i) v.share[i] += x[i] / wall;
  }
  const auto n = static_cast<double>(ettrs.size());
  v.mean_ettr /= n;
  for (double& x : v.share) x /= n;
  std::sort(ettrs.begin(), ettrs.end());
  const auto q = [&](double f) {
    return ettrs[static_cast<size_t>(f * static_cast<double>(ettrs.size() - 1) + 0.5)];
  };
  v.p10 = q(0.1);
  v.p90 = q(0.9);
  return v;
}

nlohmann::json to_json(const ModelView& v) {
  nlohmann::json j = {{"rate_per_hour", v.rate_per_hour},
                      {"ettr", v.mean_ettr},
                      {"ettr_p10", v.p10},
                      {"ettr_p90", v.p90},
                      {"mean_failures", v.mean_failures}};
  for (size_t i = 0; i < kRows.size(); ++i) j["badput_share"][kRows[i]] = v.share[i];
  return j;
}

}  // namespace

void run_goodput_live(const ScenarioOptions& scenario, const GoodputLiveOptions& o, int64_t runs,
                      uint64_t seed, bool json) {
  const Scenario s = scenario.load();
  check_live(o, s, scenario.overrides());
  exec::ElasticAgentOptions a;
  a.nproc = *o.nproc;
  a.max_restarts = o.max_restarts;
  a.program = std::filesystem::read_symlink("/proc/self/exe").string();
  a.train_args = {"train", scenario.file};
  for (const Override& ov : scenario.overrides()) {
    a.train_args.insert(a.train_args.end(), {"--set", ov.key + "=" + ov.value});
  }
  // Every iteration logged: the agent accounts the work of a launch from its iteration lines
  // (exec/elastic_agent.hpp), and iterations between two lines would be nobody's time.
  if (s.training.log_interval != 1) {
    a.train_args.insert(a.train_args.end(), {"--set", "training.log_interval=1"});
  }
  a.train_args.insert(a.train_args.end(), {"--save", o.save});
  a.save = o.save;
  exec::FaultSpec fault;
  fault.rate_per_hour = *o.rate_per_hour;
  fault.seed = seed;
  a.fault = fault;
  exec::ElasticAgentCallbacks cb;
  if (!json) {
    cb.on_attempt_start = [](int64_t attempt, int64_t from, const std::vector<std::string>&) {
      fmt::print(
          "live       launch {}: {}\n", attempt,
          from > 0 ? fmt::format("resuming from iteration {}", from) : std::string("from scratch"));
      std::fflush(stdout);
    };
    cb.on_attempt_end = [](const exec::AttemptReport& r) {
      fmt::print("live       launch {} {} at {:.1f} s: {}\n", r.attempt,
                 r.completed ? "completed" : "failed", r.end_s, r.how_ended);
      std::fflush(stdout);
    };
  }
  const exec::ElasticRunReport report = exec::run_elastic_job(a, cb);
  if (report.stopped_by_signal != 0) {
    throw Error(fmt::format("goodput --live: stopped by signal {}; no comparison",
                            report.stopped_by_signal));
  }
  if (!report.completed) {
    throw Error(fmt::format(
        "goodput --live: the run did not complete in 1 + --max-restarts {} launches ({}); raise "
        "--max-restarts or lower --rate-per-hour",
        o.max_restarts, report.attempts.empty() ? "" : report.attempts.back().how_ended));
  }
  const exec::LiveCosts c = exec::measure_live_run(report);
  const double tokens =
      static_cast<double>(s.training.global_batch_size) * static_cast<double>(s.model.seq_length);
  const int64_t save_interval = *s.training.save_interval;  // check_live: >= 1
  const ModelView model =
      model_view(c, *o.rate_per_hour, *o.nproc, tokens, save_interval, runs, seed);
  // The same model at the rate the run drew (its failures over its training time): the costs'
  // share of the comparison, without the luck of a few Poisson draws.
  const double training_h =
      (report.productive_s() + report.lost_progress_s() + report.checkpoint_save_s()) / 3600.0;
  std::optional<ModelView> realized;
  if (c.failures > 0 && training_h > 0) {
    realized = model_view(c, static_cast<double>(c.failures) / training_h, *o.nproc, tokens,
                          save_interval, runs, seed);
  }
  const double w = report.wall_s;
  // The live restart excludes the first start (the model's wall has it as "other").
  const std::array<double, kRows.size()> live_share = {report.lost_progress_s() / w,
                                                       report.detection_s() / w,
                                                       (report.restart_s() - c.first_start_s) / w,
                                                       report.restore_s() / w,
                                                       report.checkpoint_save_s() / w,
                                                       (report.other_s() + c.first_start_s) / w};
  const double live_ettr = report.ettr();
  if (json) {
    nlohmann::json j = {{"scenario", s.name},
                        {"ranks", *o.nproc},
                        {"rate_per_hour", *o.rate_per_hour},
                        {"seed", seed},
                        {"runs", runs},
                        {"live",
                         {{"wall_s", w},
                          {"launches", report.attempts.size()},
                          {"failures", c.failures},
                          {"training_hours", training_h},
                          {"ettr", live_ettr}}},
                        {"measured_costs",
                         {{"iteration_s", c.iteration_s},
                          {"save_s", c.save_s},
                          {"restore_s", c.restore_s},
                          {"restart_s", c.restart_s},
                          {"detection_s", c.detection_s},
                          {"first_start_s", c.first_start_s},
                          {"other_s", c.other_s},
                          {"iterations", c.iterations}}},
                        {"model", to_json(model)},
                        {"ettr_difference_points", 100.0 * (model.mean_ettr - live_ettr)}};
    if (realized) {
      j["model_at_realized_rate"] = to_json(*realized);
      j["ettr_difference_points_at_realized_rate"] = 100.0 * (realized->mean_ettr - live_ettr);
    }
    for (size_t i = 0; i < kRows.size(); ++i) j["live"]["badput_share"][kRows[i]] = live_share[i];
    fmt::print("{}\n", j.dump(2));
    return;
  }
  fmt::print(
      "\ngoodput    {} live on {} ranks: failures injected at {:g} per hour of training "
      "(seed {})\n",
      s.name, *o.nproc, *o.rate_per_hour, seed);
  fmt::print(
      "measured   wall {:.1f} s, {} launches ({} failures), {} iterations kept at "
      "{:.3f} s\n",
      w, report.attempts.size(), c.failures, c.iterations, c.iteration_s);
  fmt::print(
      "costs      save {:.2f} s, load {:.2f} s, restart {:.2f} s, detection {:.2f} s "
      "(means); first start {:.2f} s, other {:.2f} s\n",
      c.save_s, c.restore_s, c.restart_s, c.detection_s, c.first_start_s, c.other_s);
  const auto ettr_line = [&](const char* what, const ModelView& v) {
    fmt::print(
        "  {:<28} {}   (p10 {}, p90 {} over {} runs; {:.1f} failures per run)   "
        "difference {:+.1f} points{}\n",
        fmt::format("model at {:.3g}/h {}", v.rate_per_hour, what), pct(v.mean_ettr), pct(v.p10),
        pct(v.p90), runs, v.mean_failures, 100.0 * (v.mean_ettr - live_ettr),
        live_ettr >= v.p10 && live_ettr <= v.p90 ? "; live inside p10-p90"
                                                 : "; live outside p10-p90");
  };
  fmt::print("ETTR\n  {:<28} {}   ({} failures in {:.2f} h of training)\n", "live", pct(live_ettr),
             c.failures, training_h);
  ettr_line("(injected)", model);
  if (realized) ettr_line("(as drawn)", *realized);
  fmt::print("badput     share of the wall time   live    model{}\n",
             realized ? "   model as drawn" : "");
  for (size_t i = 0; i < kRows.size(); ++i) {
    fmt::print("  {:<30} {}  {}{}\n", kRows[i], pct(live_share[i]), pct(model.share[i]),
               realized ? "   " + pct(realized->share[i]) : std::string());
  }
  fmt::print(
      "(model: sim/goodput.hpp at the live run's rate and measured costs, checkpointing "
      "every {} iterations until {} iterations are durable; the first start and 'other' "
      "are measured and added to its wall time)\n",
      save_interval, c.iterations);
}

}  // namespace traintwin::cli
