// `traintwin goodput`: the whole run under failures, checkpoints and restarts (sim/goodput.hpp),
// on one iteration's time from the replay (sim/session.hpp) or the estimator (sim/analytical.hpp).
// With --out, goodput.json and report.html (viz/goodput_charts.hpp, cli/report_output.hpp).
#include <fmt/format.h>

#include <array>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli/commands.hpp"
#include "cli/flag_checks.hpp"
#include "cli/format.hpp"
#include "cli/goodput_live.hpp"
#include "cli/replay_progress.hpp"
#include "cli/report_output.hpp"
#include "cli/scenario_options.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "core/posix_file.hpp"
#include "sim/analytical.hpp"
#include "sim/degraded_states.hpp"
#include "sim/goodput.hpp"
#include "sim/session.hpp"

namespace traintwin::cli {
namespace {

struct GoodputOptions {
  ScenarioOptions scenario;
  double days = 30;
  std::string interval = "auto";
  int64_t runs = 100;
  uint64_t seed = 1;
  bool json = false;
  std::string engine = "replay";
  std::optional<double> iteration_time_s;
  std::string out_dir;  // goodput.json, with every run of the chosen interval
  bool live = false;
  GoodputLiveOptions live_options;
};

/// "auto" -> 0 (Daly's interval), else minutes > 0 in seconds. Throws ConfigError naming the flag.
double parse_interval_s(const std::string& text) {
  if (text == "auto") return 0;
  const std::optional<double> minutes = parse_number_text(text);
  if (minutes && *minutes > 0) return *minutes * 60.0;
  throw ConfigError(fmt::format(
      "--checkpoint-interval: expected auto or a number of minutes > 0, got '{}'", text));
}

std::string minutes(double s) { return fmt::format("{:.1f} min", s / 60.0); }
std::string pct(double x) { return fmt::format("{:.1f} %", 100.0 * x); }

/// The badput causes of `b` (seconds, or shares of the wall time), in Badput's order.
nlohmann::json badput_json(const Badput& b) {
  nlohmann::json j = nlohmann::json::object();
  const auto v = b.values();
  for (size_t c = 0; c < v.size(); ++c) j[std::string(Badput::kCauses[c])] = v[c];
  return j;
}

/// p10 / p50 / p90 of each cause's share of the wall time over the runs.
nlohmann::json badput_percentiles_json(const GoodputAtInterval& a) {
  nlohmann::json j = nlohmann::json::object();
  for (size_t c = 0; c < a.badput_share.size(); ++c) {
    const Percentiles& p = a.badput_share[c];
    j[std::string(Badput::kCauses[c])] = {{"p10", p.p10}, {"p50", p.p50}, {"p90", p.p90}};
  }
  return j;
}

nlohmann::json to_json(const GoodputAtInterval& a) {
  return {
      {"interval_s", a.interval_s},
      {"mean_ettr", a.mean_ettr},
      {"ettr", {{"p10", a.ettr.p10}, {"p50", a.ettr.p50}, {"p90", a.ettr.p90}}},
      {"useful_tokens",
       {{"p10", a.useful_tokens.p10}, {"p50", a.useful_tokens.p50}, {"p90", a.useful_tokens.p90}}},
      {"mean_failures", a.mean_failures},
      {"mean_planned", a.mean_planned},
      {"badput_share", badput_json(a.mean_badput_share)},
      {"badput_share_percentiles", badput_percentiles_json(a)}};
}

void print_report(const Scenario& s, const GoodputJob& job, const GoodputReport& r,
                  const GoodputOptions& o, const std::string& source) {
  const GoodputCosts& c = r.costs;
  const ReliabilitySpec& rel = job.reliability;
  fmt::print("goodput    {}: {} GPUs on {} nodes, {:.1f} days, {} runs (seed {})\n", s.name,
             job.gpus, job.nodes, o.days, o.runs, o.seed);
  fmt::print("iteration  {:.3f} s ({}), {} tokens\n", job.iteration_s, source,
             si(job.tokens_per_iteration));
  fmt::print("checkpoint {}B: save stall {:.1f} s ({}), load {:.1f} s\n", si(job.checkpoint_bytes),
             c.save_stall_s,
             rel.async_save ? fmt::format("asynchronous; write {:.1f} s", c.save_write_s)
                            : std::string("synchronous write"),
             c.restore_s);
  fmt::print("restart    detection {:.0f} s + re-queue, start and communicator {:.1f} s + load\n",
             c.detection_s, c.restart_s);
  std::string classes;
  double total = 0;
  for (const auto& [name, f] : rel.failures) {
    classes +=
        fmt::format("{}{} {:.3g}", classes.empty() ? "" : ", ", name, f.rate_per_1000_node_days);
    total += f.rate_per_1000_node_days;
  }
  fmt::print(
      "failures   {:.3g} per 1000 node-days ({}): job MTBF {:.2f} h; planned interruption "
      "every {}\n",
      total, classes, c.mtbf_s / 3600.0,
      std::isinf(c.planned_interval_s) ? std::string("never")
                                       : fmt::format("{:.1f} h", c.planned_interval_s / 3600.0));
  for (const DegradedKind kind : kDegradedKinds) {
    const DegradationSpec& e = episodes(rel, kind);
    if (!(e.rate_per_1000_node_days > 0)) continue;
    const double t = job.degraded_iteration_s[static_cast<size_t>(kind)];
    fmt::print("degraded   {}: {:.3g} per 1000 node-days, {:.0f} min mean; iteration {:.3f} s "
               "(x{:.3f}, replayed)\n",
               to_string(kind), e.rate_per_1000_node_days, e.duration_s / 60.0, t,
               t / job.iteration_s);
  }
  fmt::print(
      "interval   Young {}, Daly {} (delta = the save stall); "
      "simulated every {}\n\n",
      minutes(r.young_s), minutes(r.daly_s), minutes(r.chosen.interval_s));
  const GoodputAtInterval& a = r.chosen;
  fmt::print("ETTR       p10 {}  p50 {}  p90 {}  (mean {}); Kokolis et al. closed form {}\n",
             pct(a.ettr.p10), pct(a.ettr.p50), pct(a.ettr.p90), pct(a.mean_ettr),
             pct(r.kokolis_ettr));
  fmt::print("tokens     p50 {} useful (p10 {}, p90 {}): {}/s over the wall time\n",
             si(a.useful_tokens.p50), si(a.useful_tokens.p10), si(a.useful_tokens.p90),
             si(a.useful_tokens.p50 / (o.days * 86400.0)));
  fmt::print("interrupts {:.1f} failures and {:.1f} planned per run\n\n", a.mean_failures,
             a.mean_planned);
  const auto mean = a.mean_badput_share.values();
  static constexpr std::array<const char*, Badput::kCauses.size()> kLabels = {
      "checkpoint save", "lost progress", "detection",          "waiting for spares",
      "restart",         "restore",       "straggler slowdown", "degraded links"};
  fmt::print("badput (share of the wall time: mean, and p10 / p50 / p90 over the runs)\n");
  for (size_t i = 0; i < mean.size(); ++i) {
    const Percentiles& p = a.badput_share[i];
    fmt::print("  {:<19} {:>7}   {} / {} / {}\n", kLabels[i], pct(mean[i]), pct(p.p10),
               pct(p.p50), pct(p.p90));
  }
  fmt::print("\n");
  fmt::print("interval sweep (mean ETTR, same seeds)\n");
  for (const GoodputAtInterval& at : r.sweep) {
    fmt::print("  {:>10}  {}\n", minutes(at.interval_s), pct(at.mean_ettr));
  }
  fmt::print("best       {}: mean ETTR {}\n", minutes(r.best_interval_s), pct(r.best_mean_ettr));
}

/// One iteration's time and where it came from, and the degraded states' replays.
struct IterationTime {
  double seconds = 0;
  std::string source;  ///< "given", "analytical estimator" or "replay"
  TopologySpec topology;
  DegradedReplays degraded;      ///< of the kinds with a rate > 0 (sim/degraded_states.hpp)
  int64_t degraded_replays = 0;  ///< replays they took (distinct states)
};

/// --iteration-time, else the estimator (--engine analytical) or the replay of one iteration
/// (with a progress line on a terminal unless --json). The degraded states in use are replayed
/// first, each once in a child process (and the healthy state too when the healthy time is not
/// this replay's), so that this process's own SimGrid engine comes last.
IterationTime iteration_time(const GoodputOptions& o, const Scenario& s) {
  ReplayProgressLine progress(!o.json);
  SimulationOptions opts;
  opts.progress = progress.callback();
  const SimulationSession session(s, SessionCostSource{}, opts);
  IterationTime out;
  out.topology = session.topology();
  const ReliabilitySpec rel =
      s.cluster.reliability ? *s.cluster.reliability : default_reliability();
  const bool healthy_replayed = !o.iteration_time_s && o.engine == "replay";
  IterationTimeCache cache(isolated_state_replay(session.scenario(), session.topology(),
                                                 session.costs(), session.options()));
  out.degraded = replay_degraded_states(s, out.topology, rel, cache, !healthy_replayed);
  out.degraded_replays = cache.replays();
  if (o.iteration_time_s) {
    out.seconds = *o.iteration_time_s;
    out.source = "given";
  } else if (o.engine == "analytical") {
    out.seconds = estimate(s, session.topology(), session.costs()).iteration_time_s;
    out.source = "analytical estimator";
  } else {
    out.seconds = session.run().iteration_time_s;
    progress.finish();
    out.source = "replay";
  }
  return out;
}

/// The degraded kinds in use: rate, duration, state and iteration times.
nlohmann::json degraded_json(const GoodputJob& job, const IterationTime& it) {
  nlohmann::json kinds = nlohmann::json::array();
  for (const DegradedKind kind : kDegradedKinds) {
    const DegradationSpec& e = episodes(job.reliability, kind);
    if (!(e.rate_per_1000_node_days > 0)) continue;
    const auto i = static_cast<size_t>(kind);
    kinds.push_back({{"kind", std::string(to_string(kind))},
                     {"rate_per_1000_node_days", e.rate_per_1000_node_days},
                     {"duration_s", e.duration_s},
                     {"state", it.degraded.states[i]},
                     {"replayed_iteration_s", it.degraded.replayed_s[i]},
                     {"iteration_s", job.degraded_iteration_s[i]}});
  }
  return {{"kinds", kinds},
          {"replays", it.degraded_replays},
          {"healthy_replayed_iteration_s", it.degraded.healthy_s}};
}

/// The report as `goodput --json` prints it.
nlohmann::json report_json(const Scenario& s, const GoodputJob& job, const GoodputReport& r,
                           const GoodputOptions& o, const IterationTime& it) {
  const std::string& source = it.source;
  nlohmann::json sweep = nlohmann::json::array();
  for (const GoodputAtInterval& at : r.sweep) sweep.push_back(to_json(at));
  const GoodputCosts& c = r.costs;
  return {{"scenario", s.name},
          {"gpus", job.gpus},
          {"nodes", job.nodes},
          {"days", o.days},
          {"runs", o.runs},
          {"seed", o.seed},
          {"iteration_s", job.iteration_s},
          {"iteration_source", source},
          {"checkpoint_bytes", job.checkpoint_bytes},
          {"costs",
           {{"save_write_s", c.save_write_s},
            {"save_stall_s", c.save_stall_s},
            {"restore_s", c.restore_s},
            {"restart_s", c.restart_s},
            {"detection_s", c.detection_s},
            {"mtbf_s", c.mtbf_s}}},
          {"young_interval_s", r.young_s},
          {"daly_interval_s", r.daly_s},
          {"kokolis_ettr", r.kokolis_ettr},
          {"chosen", to_json(r.chosen)},
          {"sweep", sweep},
          {"best_interval_s", r.best_interval_s},
          {"best_mean_ettr", r.best_mean_ettr},
          {"degraded", degraded_json(job, it)}};
}

/// Writes DIR/goodput.json (whole or not at all): `report` with every run of the chosen interval
/// as "chosen_runs". Returns the file's path; throws Error when it cannot be written.
std::filesystem::path write_goodput_file(const std::filesystem::path& dir, nlohmann::json report,
                                         const std::vector<GoodputRun>& chosen_runs) {
  nlohmann::json runs = nlohmann::json::array();
  for (const GoodputRun& run : chosen_runs) {
    runs.push_back({{"wall_s", run.wall_s},
                    {"useful_s", run.useful_s},
                    {"ettr", run.ettr()},
                    {"failures", run.failures},
                    {"planned", run.planned},
                    {"checkpoints", run.checkpoints},
                    {"degraded_episodes", run.degraded_episodes},
                    {"badput_s", badput_json(run.badput)}});
  }
  report["chosen_runs"] = runs;
  const std::filesystem::path path = dir / "goodput.json";
  AtomicFile f(path);
  f.write(report.dump(2) + "\n");
  f.commit();
  return path;
}

}  // namespace

void register_goodput_command(CLI::App& app) {
  auto o = std::make_shared<GoodputOptions>();
  auto* cmd = app.add_subcommand(
      "goodput",
      "The whole run under failures, checkpoints and restarts (cluster.reliability): ETTR, useful "
      "tokens, badput by cause, Young's and Daly's checkpoint intervals and the best one found");
  add_scenario_options(*cmd, o->scenario);
  cmd->add_option("--days", o->days, "Wall-clock length of the run (days)")
      ->check(positive_number());
  cmd->add_option("--checkpoint-interval", o->interval,
                  "auto (Daly's optimum) or minutes of training between checkpoints");
  cmd->add_option("--runs", o->runs, "Simulated runs (Monte Carlo samples)")
      ->check(positive_number());
  cmd->add_option("--seed", o->seed, "Seed of the first run (run i uses seed + i)");
  cmd->add_flag("--json", o->json, "Print the report as JSON");
  cmd->add_option("--engine", o->engine,
                  "Where the iteration time comes from: replay (SimGrid, contention) or "
                  "analytical (the estimator, faster at 10K+ GPUs)")
      ->check(CLI::IsMember({"replay", "analytical"}));
  cmd->add_option("--out", o->out_dir,
                  "Write DIR/goodput.json (the report and every simulated run of the chosen "
                  "interval: wall, useful time, failures, badput by cause) and DIR/report.html "
                  "(ETTR against the interval, badput by cause, the run of --seed as a timeline)");
  cmd->add_option("--iteration-time", o->iteration_time_s,
                  "Iteration time in seconds (skips the simulation of one iteration)")
      ->check(positive_number());
  cmd->add_flag("--live", o->live,
                "Train the scenario here under the elastic agent with failures injected at "
                "--rate-per-hour, and print its measured ETTR and badput beside the model's for "
                "the same rate and the costs it measured");
  cmd->add_option("--rate-per-hour", o->live_options.rate_per_hour,
                  "With --live: failures injected per hour of training")
      ->check(positive_number());
  cmd->add_option("--nproc", o->live_options.nproc, "With --live: ranks per launch (mpirun -np)")
      ->check(positive_number());
  cmd->add_option("--save", o->live_options.save,
                  "With --live: checkpoint folder of the run (empty, or new)");
  cmd->add_option("--max-restarts", o->live_options.max_restarts,
                  "With --live: relaunches allowed (default 20)")
      ->check(CLI::NonNegativeNumber);
  cmd->callback([o, cmd] {
    // --live: the other flags of the live run; the model's own need the model's run.
    static const std::vector<std::string> kLiveOnly = {"--rate-per-hour", "--nproc", "--save",
                                                       "--max-restarts"};
    static const std::vector<std::string> kModelOnly = {"--days", "--checkpoint-interval",
                                                        "--engine", "--out", "--iteration-time"};
    for (const std::string& f : o->live ? kModelOnly : kLiveOnly) {
      if (cmd->count(f) > 0) {
        throw ConfigError(fmt::format(
            "{} {} --live (the {})", f, o->live ? "does not go with" : "needs",
            o->live ? "live run takes its length, interval and iteration time from the scenario "
                      "and measures them"
                    : "flags of the live twin"));
      }
    }
    if (o->live) {
      run_goodput_live(o->scenario, o->live_options, o->runs, o->seed, o->json);
      return;
    }
    const Scenario s = o->scenario.load();
    const double interval_s = parse_interval_s(o->interval);
    // The output folder is checked before the simulation, not after it.
    if (!o->out_dir.empty()) prepare_output_directory(o->out_dir, "--out");
    if (interval_s > o->days * 86400.0) {
      throw ConfigError(
          fmt::format("--checkpoint-interval: {} min is longer than the run ({} days)",
                      interval_s / 60.0, o->days));
    }
    const IterationTime it = iteration_time(*o, s);
    GoodputJob job = goodput_job(s, it.topology, it.seconds);
    apply_degraded_replays(job, it.degraded);
    const GoodputReport r =
        run_goodput(job, interval_s, GoodputHorizon{o->days * 86400.0, 0}, o->runs, o->seed);
    const nlohmann::json out = report_json(s, job, r, *o, it);
    if (o->json) {
      fmt::print("{}\n", out.dump(2));
    } else {
      print_report(s, job, r, *o, it.source);
    }
    if (!o->out_dir.empty()) {
      const std::filesystem::path path = write_goodput_file(o->out_dir, out, r.chosen.runs);
      if (!o->json) fmt::print("wrote {}\n", path.string());
      const GoodputHorizon horizon{o->days * 86400.0, 0};
      GoodputPageInput page{s.name, job, horizon, o->runs, o->seed, r,
                            trace_goodput_run(job, r.chosen.interval_s, horizon, o->seed)};
      write_goodput_report_or_warn(o->out_dir, !o->json, page);
    }
  });
}

}  // namespace traintwin::cli
