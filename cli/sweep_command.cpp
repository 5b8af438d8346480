// `traintwin sweep SCENARIO --tensor-model-parallel-size 1,2,4,8 ...`: every combination of the
// listed values, simulated in parallel worker processes, ranked by tokens/s. This file holds the
// flags, their parsing into a SweepRequest and the printed report (ranked table, out-of-memory,
// failed and invalid configurations, scaling) with the --out files; the callback is parse -> run
// -> print. Next in the flow: cli/sweep_run.hpp runs the request (checks, enumeration,
// evaluation, MPI).
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/commands.hpp"
#include "cli/flag_checks.hpp"
#include "cli/scenario_options.hpp"
#include "cli/report_output.hpp"
#include "cli/sweep_run.hpp"
#include "cli/format.hpp"
#include "core/allocator_policy.hpp"
#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/pipeline_split.hpp"
#include "core/posix_file.hpp"
#include "core/text.hpp"
#include "sim/scaling_study.hpp"
#include "sim/sweep.hpp"
#include "sim/sweep_record.hpp"
#include "topologies/topology.hpp"

namespace traintwin::cli {
namespace {

struct SweepCommandOptions {
  std::string file;
  std::vector<std::string> set;
  std::optional<std::string> tp, cp, pp, mbs, vpp, recompute, sp, distributed_optimizer, fp8, ep,
      etp, num_gpus, schedule, sharding, instances, offload;
  int64_t global_batch_size_per_dp = 0;     // 0: the scenario's global batch, fixed
  std::optional<std::string> train_tokens;  // a token budget: days and GPU-hours per layout
  PipelineSplitFlags pipeline_split;  // kept for every layout
  std::optional<std::string> split_axis;  // --pipeline-split: auto or layouts
  int jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int top = 20;
  std::string out_dir;
  std::string cost_db;
  bool simulate_oom = false;
  std::string mode = "simulate";
};

const char* on_off(bool b) { return b ? "on" : "off"; }

/// "TP 2 PP 4 VPP 1 DP 8 mbs 1 recompute none SP off DO on": a configuration in one phrase (with
/// "schedule zb-h1" after it for a schedule other than 1F1B, "layers 6/6/18/18" under a searched
/// pipeline split).
std::string layout_phrase(const Scenario& s) {
  const std::string experts =
      s.model.is_moe() ? fmt::format(" EP {} ETP {}", s.parallel.expert_model_parallel_size,
                                     s.parallel.expert_tp())
                       : "";
  return fmt::format(
             "TP {} CP {} PP {} VPP {} DP {}{} mbs {} recompute {} SP {} dist-opt {} fp8 {}",
             s.parallel.tensor_model_parallel_size, s.parallel.context_parallel_size,
             s.parallel.pipeline_model_parallel_size,
             s.parallel.virtual_pipeline_model_parallel_size, s.parallel.data_parallel_size,
             experts, s.training.micro_batch_size, to_string(s.training.recompute_granularity),
             on_off(s.parallel.sequence_parallel), on_off(s.training.use_distributed_optimizer),
             on_off(s.training.fp8())) +
         (s.parallel.pipeline_schedule == PipelineScheduleKind::k1F1B
              ? ""
              : fmt::format(" schedule {}", to_string(s.parallel.pipeline_schedule))) +
         (s.training.use_megatron_fsdp
              ? fmt::format(" sharding {} (ZeRO-{})",
                            to_string(s.training.data_parallel_sharding_strategy),
                            s.training.zero_stage())
              : "") +
         (s.training.num_distributed_optimizer_instances > 1
              ? fmt::format(" HSDP {} replicas", s.training.num_distributed_optimizer_instances)
              : "") +
         (s.training.optimizer_cpu_offload
              ? fmt::format(" optimizer offload {:g}", s.training.optimizer_offload_fraction)
              : "") +
         (s.parallel.pipeline_model_parallel_layout.empty()
              ? ""
              : fmt::format(" layers {}", layers_per_stage_text(s)));
}

/// The sharding of `t` as sim/sweep_record.hpp zero_label() writes it ("ZeRO-3/2", "ZeRO-1+off").
std::string zero_phrase(const TrainingConfig& t) {
  SweepRecordConfiguration c;
  c.zero_stage = t.zero_stage();
  c.num_distributed_optimizer_instances = t.num_distributed_optimizer_instances;
  c.optimizer_cpu_offload = t.optimizer_cpu_offload;
  return zero_label(c);
}

/// The rule a message states, for grouping invalid configurations: "KEY (rule: ...)" when the
/// message has one, else the whole message.
std::string rule_of(const std::string& reason) {
  const auto colon = reason.find(": ");
  const auto rule = reason.find("(rule: ");
  if (colon == std::string::npos || rule == std::string::npos) return reason;
  return reason.substr(0, colon) + " " + reason.substr(rule);
}

/// The ranked table; `show_gpus` adds a GPUs column (a sweep over --num-gpus), `show_schedule`
/// a schedule column (a sweep over --pipeline-schedule), `show_zero` a ZeRO column (a sweep over
/// --data-parallel-sharding-strategy, --num-distributed-optimizer-instances or
/// --optimizer-cpu-offload: DDP, ZeRO-1 .. ZeRO-3, "/N" for N HSDP replicas, "+off" offloaded),
/// `show_split` a last column with the layers of each pipeline stage (a sweep over
/// --pipeline-split).
void print_ranked(const std::vector<SweepRow>& rows, int top, int64_t ranked, bool show_gpus,
                  bool show_schedule, bool show_zero, bool show_split) {
  fmt::print(
      "{:>4} {}{:>3} {:>3} {:>3} {:>3} {:>4} {:>3} {:>3} {:>4} {:<9} {:<3} {:<3} {:<3} {}{}{:>10} "
      "{:>11} {:>6} {:>11}  {}\n",
      "rank", show_gpus ? fmt::format("{:>6} ", "GPUs") : "", "TP", "CP", "PP", "VPP", "DP", "EP",
      "ETP", "mbs", "recompute", "SP", "DO", "FP8",
      show_schedule ? fmt::format("{:<8} ", "schedule") : "",
      show_zero ? fmt::format("{:<10} ", "ZeRO") : "", "iter (s)", "tok/s/GPU", "MFU %",
      "peak mem", show_split ? fmt::format("{:<10}  layers per stage", "memory") : "memory");
  int shown = 0;
  for (const SweepRow& r : rows) {
    if (r.status != SweepStatus::kRanked) continue;
    if (top > 0 && shown >= top) break;
    ++shown;
    const Scenario& s = r.config.scenario;
    const SimulationSummary& m = r.evaluation->summary;
    fmt::print(
        "{:>4} {}{:>3} {:>3} {:>3} {:>3} {:>4} {:>3} {:>3} {:>4} {:<9} {:<3} {:<3} {:<3} "
        "{}{}{:>10.4f} {:>11.1f} {:>6.1f} {:>11}  {}\n",
        r.rank, show_gpus ? fmt::format("{:>6} ", s.cluster.num_gpus) : "",
        s.parallel.tensor_model_parallel_size, s.parallel.context_parallel_size,
        s.parallel.pipeline_model_parallel_size, s.parallel.virtual_pipeline_model_parallel_size,
        s.parallel.data_parallel_size, s.parallel.expert_model_parallel_size,
        s.model.is_moe() ? std::to_string(s.parallel.expert_tp()) : "-",
        s.training.micro_batch_size, to_string(s.training.recompute_granularity),
        on_off(s.parallel.sequence_parallel), on_off(s.training.use_distributed_optimizer),
        on_off(s.training.fp8()),
        show_schedule ? fmt::format("{:<8} ", to_string(s.parallel.pipeline_schedule)) : "",
        show_zero ? fmt::format("{:<10} ", zero_phrase(s.training)) : "", m.iteration_time_s,
        m.tokens_per_s_per_gpu, 100 * m.mfu, gib(r.config.peak_memory_bytes),
        show_split ? fmt::format("{:<10}  {}", to_string(r.config.memory_verdict),
                                 layers_per_stage_text(s))
                   : std::string(to_string(r.config.memory_verdict)));
  }
  if (ranked > shown)
    fmt::print("... and {} more ranked configurations (--top 0 lists all)\n", ranked - shown);
}

/// A token count: a number with an optional K, M, B (or G) or T suffix (15T = 1.5e13). Throws
/// ConfigError naming --train-tokens.
double parse_tokens(const std::string& text) {
  double scale = 1;
  std::string number = text;
  if (!text.empty()) {
    switch (text.back()) {
      case 'K':
        scale = 1e3;
        break;
      case 'M':
        scale = 1e6;
        break;
      case 'B':
      case 'G':
        scale = 1e9;
        break;
      case 'T':
        scale = 1e12;
        break;
      default:
        break;
    }
    if (scale != 1) number.pop_back();
  }
  const std::optional<double> v = parse_number_text(number);
  if (v && *v > 0) return *v * scale;
  throw ConfigError(fmt::format(
      "--train-tokens: expected a token count > 0 with an optional K, M, B or T suffix (15T), "
      "got '{}'",
      text));
}

/// A scaling study: per GPU count, the best ranked layout (rows are ranked by tokens/s), its
/// global batch, iteration time, throughput and MFU, and with a token budget the days and
/// GPU-hours it takes at that throughput.
void print_scaling(const std::vector<SweepRow>& rows, const std::vector<int64_t>& gpus,
                   std::optional<double> tokens) {
  fmt::print("\nscaling: the best ranked layout per GPU count{}\n",
             tokens ? fmt::format(", {} tokens to train", si(*tokens)) : std::string());
  fmt::print("{:>6} {:>6} {:>10} {:>12} {:>10} {:>6}{}  {}\n", "GPUs", "batch", "iter (s)",
             "tokens/s", "tok/s/GPU", "MFU %",
             tokens ? fmt::format(" {:>8} {:>11}", "days", "GPU-hours") : "", "layout");
  for (const int64_t n : gpus) {
    const SweepRow* best = nullptr;
    for (const SweepRow& r : rows) {
      if (r.status == SweepStatus::kRanked && r.config.scenario.cluster.num_gpus == n) {
        best = &r;
        break;
      }
    }
    if (best == nullptr) {
      fmt::print("{:>6}  no layout both fits and simulates\n", n);
      continue;
    }
    const Scenario& s = best->config.scenario;
    const SimulationSummary& m = best->evaluation->summary;
    std::string budget;
    if (tokens) {
      const TrainingTime t = training_time(*tokens, m.tokens_per_s, n);
      budget = fmt::format(" {:>8.1f} {:>11}", t.days, si(t.gpu_hours));
    }
    fmt::print("{:>6} {:>6} {:>10.4f} {:>12} {:>10.1f} {:>6.1f}{}  {}\n", n,
               s.training.global_batch_size, m.iteration_time_s, si(m.tokens_per_s),
               m.tokens_per_s_per_gpu, 100 * m.mfu, budget, layout_phrase(s));
  }
}

void print_report(const Scenario& base, const TopologySpec& topo, const std::vector<SweepRow>& rows,
                  int top, const std::vector<int64_t>& gpus) {
  std::map<SweepStatus, int64_t> count;
  for (const SweepRow& r : rows) ++count[r.status];
  std::string gpu_counts = std::to_string(base.cluster.num_gpus);
  if (!gpus.empty()) {
    gpu_counts.clear();
    for (const int64_t n : gpus) gpu_counts += (gpu_counts.empty() ? "" : ",") + std::to_string(n);
  }
  fmt::print(
      "traintwin sweep: {} on {} x {} ({}): {} configurations: {} ranked, {} out of memory, "
      "{} failed, {} invalid\n",
      base.name, gpu_counts,
      // A mixed cluster: the GPUs of the base's job ("512 x A100-SXM-80GB + 512 x H100-SXM-80GB").
      topo.node_groups.empty() ? topo.gpu.name
                               : "(" + job_gpus(topo, base.cluster.num_gpus).describe() + ")",
      topo.name, rows.size(),
      count[SweepStatus::kRanked], count[SweepStatus::kOutOfMemory], count[SweepStatus::kError],
      count[SweepStatus::kInvalid]);
  if (count[SweepStatus::kRanked] > 0) {
    fmt::print(
        "ranked by tokens/s (ties: fewer GPUs per model replica, then enumeration order); "
        "DO = distributed optimizer\n");
    const bool schedules = std::any_of(rows.begin(), rows.end(), [&](const SweepRow& r) {
      return r.config.scenario.parallel.pipeline_schedule !=
             rows.front().config.scenario.parallel.pipeline_schedule;
    });
    const bool zero = std::any_of(rows.begin(), rows.end(), [&](const SweepRow& r) {
      return zero_phrase(r.config.scenario.training) !=
             zero_phrase(rows.front().config.scenario.training);
    });
    const bool splits = std::any_of(rows.begin(), rows.end(), [](const SweepRow& r) {
      return !r.config.scenario.parallel.pipeline_model_parallel_layout.empty();
    });
    print_ranked(rows, top, count[SweepStatus::kRanked], gpus.size() > 1, schedules, zero,
                 splits);
  } else {
    fmt::print("no configuration both fits the GPU's memory and simulates\n");
  }
  if (count[SweepStatus::kOutOfMemory] > 0) {
    fmt::print("\nout of memory ({}, closest to fitting first; {}):\n",
               count[SweepStatus::kOutOfMemory],
               topo.node_groups.empty()
                   ? gib(smallest_gpu_memory_bytes(topo)) + " per GPU"
                   : "each stage against its own GPUs' memory, the smallest " +
                         gib(smallest_gpu_memory_bytes(topo)));
    int shown = 0;
    for (const SweepRow& r : rows) {
      if (r.status != SweepStatus::kOutOfMemory) continue;
      if (top > 0 && shown >= top) {
        fmt::print("  ... and {} more\n", count[SweepStatus::kOutOfMemory] - shown);
        break;
      }
      ++shown;
      if (r.config.host_excess_memory_bytes > 0) {
        fmt::print("  {}: peak {}, {}\n", layout_phrase(r.config.scenario),
                   gib(r.config.peak_memory_bytes), host_memory_reason(r.config));
        continue;
      }
      fmt::print("  {}: peak {}, OOM by {}\n", layout_phrase(r.config.scenario),
                 gib(r.config.peak_memory_bytes), gib(r.config.excess_memory_bytes));
    }
  }
  if (count[SweepStatus::kError] > 0) {
    fmt::print("\nfailed ({}):\n", count[SweepStatus::kError]);
    int shown = 0;
    for (const SweepRow& r : rows) {
      if (r.status != SweepStatus::kError) continue;
      if (top > 0 && shown >= top) {
        fmt::print("  ... and {} more\n", count[SweepStatus::kError] - shown);
        break;
      }
      ++shown;
      fmt::print("  {}: {}\n", layout_phrase(r.config.scenario), r.error);
    }
  }
  // Switches of the base scenario an axis changed (sweep.json lists them per row).
  std::map<std::string, int64_t> adjusted;
  std::vector<std::string> adjusted_order;
  for (const SweepRow& r : rows) {
    for (const std::string& a : r.config.adjustments) {
      if (adjusted[a]++ == 0) adjusted_order.push_back(a);
    }
  }
  if (!adjusted_order.empty()) {
    fmt::print("\nadjusted (sweep.json lists each row's):\n");
    for (const std::string& a : adjusted_order) fmt::print("  {:>5} x {}\n", adjusted[a], a);
  }
  if (count[SweepStatus::kInvalid] > 0) {
    std::map<std::string, std::pair<int64_t, std::string>> rules;  // rule -> count, an example
    std::vector<std::string> order;
    for (const SweepRow& r : rows) {
      if (r.status != SweepStatus::kInvalid) continue;
      const std::string rule = rule_of(r.config.invalid_reason);
      auto [it, inserted] = rules.emplace(rule, std::make_pair(0, r.config.invalid_reason));
      if (inserted) order.push_back(rule);
      ++it->second.first;
    }
    std::stable_sort(order.begin(), order.end(), [&rules](const auto& a, const auto& b) {
      return rules[a].first > rules[b].first;
    });
    fmt::print("\ninvalid ({}), by rule:\n", count[SweepStatus::kInvalid]);
    for (const auto& rule : order) {
      fmt::print("  {:>5} x {}\n          e.g. {}\n", rules[rule].first, rule, rules[rule].second);
    }
  }
}

void write_outputs(const std::string& dir_name, const std::vector<SweepRow>& rows) {
  const std::filesystem::path dir(dir_name);
  prepare_output_directory(dir, "--out");
  AtomicFile json(dir / "sweep.json");
  json.write(sweep_json(rows).dump(2) + "\n");
  json.commit();
  AtomicFile csv(dir / "sweep.csv");
  csv.write(sweep_csv(rows));
  csv.commit();
  fmt::print("\nwrote {} and {} ({} rows)\n", (dir / "sweep.json").string(),
             (dir / "sweep.csv").string(), rows.size());
}

/// The request the flags make: --jobs and --top checked, the swept lists, the token budget
/// and the overrides parsed (ConfigError naming the flag otherwise).
SweepRequest parse_request(const SweepCommandOptions& o) {
  if (o.jobs < 1)
    throw ConfigError(fmt::format("--jobs: {} is not allowed (allowed: an integer >= 1)", o.jobs));
  if (o.top < 0)
    throw ConfigError(fmt::format("--top: {} is not allowed (allowed: an integer >= 0)", o.top));
  SweepRequest r;
  SweepAxes& axes = r.axes;
  if (o.tp) axes.tp = parse_sweep_integers("--tensor-model-parallel-size", *o.tp);
  if (o.cp) axes.cp = parse_sweep_integers("--context-parallel-size", *o.cp);
  if (o.pp) axes.pp = parse_sweep_integers("--pipeline-model-parallel-size", *o.pp);
  if (o.mbs) axes.mbs = parse_sweep_integers("--micro-batch-size", *o.mbs);
  if (o.vpp) axes.vpp = parse_sweep_integers("--virtual-pipeline-model-parallel-size", *o.vpp);
  if (o.recompute) axes.recompute = parse_sweep_recompute("--recompute-granularity", *o.recompute);
  if (o.sp) axes.sequence_parallel = parse_sweep_switch("--sequence-parallel", *o.sp);
  if (o.distributed_optimizer) {
    axes.distributed_optimizer =
        parse_sweep_switch("--use-distributed-optimizer", *o.distributed_optimizer);
  }
  if (o.fp8) axes.fp8 = parse_sweep_switch("--fp8", *o.fp8);
  if (o.ep) axes.ep = parse_sweep_integers("--expert-model-parallel-size", *o.ep);
  if (o.etp) axes.etp = parse_sweep_integers("--expert-tensor-parallel-size", *o.etp);
  if (o.num_gpus) axes.num_gpus = parse_sweep_integers("--num-gpus", *o.num_gpus);
  if (o.schedule) {
    axes.pipeline_schedule = parse_sweep_schedules("--pipeline-schedule", *o.schedule);
  }
  if (o.instances) {
    axes.num_distributed_optimizer_instances =
        parse_sweep_integers("--num-distributed-optimizer-instances", *o.instances);
  }
  if (o.offload) {
    axes.optimizer_cpu_offload = parse_sweep_switch("--optimizer-cpu-offload", *o.offload);
  }
  if (o.sharding) {
    axes.data_parallel_sharding_strategy =
        parse_sweep_sharding_strategies("--data-parallel-sharding-strategy", *o.sharding);
  }
  if (o.split_axis) r.pipeline_split = parse_pipeline_split_axis("--pipeline-split", *o.split_axis);
  axes.global_batch_size_per_dp = o.global_batch_size_per_dp;
  if (o.train_tokens) r.train_tokens = parse_tokens(*o.train_tokens);
  for (const auto& s : o.set) r.overrides.push_back(parse_override(s));
  o.pipeline_split.append_overrides(r.overrides);
  check_given_once(r.overrides);
  r.scenario_file = o.file;
  r.jobs = o.jobs;
  r.top = o.top;
  r.out_dir = o.out_dir;
  r.cost_db = o.cost_db;
  r.simulate_oom = o.simulate_oom;
  r.mode = o.mode;
  return r;
}

/// Throws when no configuration ranked and at least one failed to simulate (a simulator error,
/// not out of memory or invalid): the sweep then has no answer, and its exit status says so (2,
/// after the report and the --out files, which list every failure).
void refuse_all_failed(const std::vector<SweepRow>& rows) {
  int64_t ranked = 0, failed = 0;
  const SweepRow* first = nullptr;
  for (const SweepRow& r : rows) {
    ranked += r.status == SweepStatus::kRanked;
    if (r.status != SweepStatus::kError) continue;
    ++failed;
    if (first == nullptr) first = &r;
  }
  if (ranked > 0 || first == nullptr) return;
  throw Error(fmt::format(
      "sweep: no configuration ranked: {} of {} failed to simulate (listed above), e.g. {}: {}",
      failed, rows.size(), layout_phrase(first->config.scenario), first->error));
}

/// Prints the outcome (the report; with --num-gpus or --train-tokens the global batch and the
/// scaling table) and, with --out, writes sweep.json, sweep.csv and report.html.
void print_outcome(const SweepRequest& request, const SweepOutcome& outcome) {
  const Scenario& base = outcome.base;
  const SweepAxes& axes = request.axes;
  const std::vector<SweepRow>& rows = outcome.rows;
  print_report(base, outcome.topology, rows, request.top, axes.num_gpus);
  if (outcome.unsearched_splits > 0) {
    fmt::print("\n--pipeline-split auto: {} layout(s) kept their even split only: the analytical "
               "estimator cannot cost their stages (a stage with ranks in two node groups, or a "
               "layout it refuses); list layouts to try them\n",
               outcome.unsearched_splits);
  }
  if (!axes.num_gpus.empty() || request.train_tokens) {
    fmt::print("\nglobal batch: {}\n",
               axes.global_batch_size_per_dp > 0
                   ? fmt::format("{} per data-parallel replica (B = {} x DP)",
                                 axes.global_batch_size_per_dp, axes.global_batch_size_per_dp)
                   : fmt::format("{} in every configuration (the scenario's; "
                                 "--global-batch-size-per-dp N scales it with DP)",
                                 base.training.global_batch_size));
    print_scaling(rows, axes.num_gpus.empty() ? std::vector<int64_t>{base.cluster.num_gpus}
                                              : axes.num_gpus,
                  request.train_tokens);
  }
  if (!request.out_dir.empty()) {
    write_outputs(request.out_dir, rows);
    write_report_or_warn(request.out_dir, true);
  }
  refuse_all_failed(rows);
}

}  // namespace

void register_sweep_command(CLI::App& app) {
  auto o = std::make_shared<SweepCommandOptions>();
  auto* cmd = app.add_subcommand(
      "sweep", "Simulate every combination of parallel layouts and knobs; rank them by tokens/s");
  cmd->add_option("scenario", o->file, "Base scenario file (scenarios/*.yaml)")
      ->required();
  cmd->add_option("--set", o->set,
                  "Override a key of the base scenario: --set training.global_batch_size=512")
      ->type_name("KEY=VALUE");
  auto* g = cmd->add_option_group(
      "Swept values", "Comma-separated lists; an axis not given keeps the scenario's value");
  g->add_option("--tensor-model-parallel-size", o->tp, "TP sizes, e.g. 1,2,4,8")->type_name("LIST");
  g->add_option("--context-parallel-size", o->cp, "CP sizes, e.g. 1,2,4,8")->type_name("LIST");
  g->add_option("--pipeline-model-parallel-size", o->pp, "PP sizes, e.g. 1,2,4,8,16")
      ->type_name("LIST");
  g->add_option("--micro-batch-size", o->mbs, "Micro-batch sizes, e.g. 1,2,4")->type_name("LIST");
  g->add_option("--virtual-pipeline-model-parallel-size", o->vpp,
                "Model chunks per pipeline rank, e.g. 1,2,3")
      ->type_name("LIST");
  g->add_option("--recompute-granularity", o->recompute, "Of none,selective,full")
      ->type_name("LIST");
  g->add_option("--sequence-parallel", o->sp, "on,off")->type_name("LIST");
  g->add_option("--use-distributed-optimizer", o->distributed_optimizer, "on,off")
      ->type_name("LIST");
  g->add_option("--expert-model-parallel-size", o->ep, "EP sizes (MoE), e.g. 1,2,4,8")
      ->type_name("LIST");
  g->add_option("--num-gpus", o->num_gpus,
                "GPU counts, a scaling study (DP follows each), e.g. 128,256,512,1024")
      ->type_name("LIST");
  g->add_option("--expert-tensor-parallel-size", o->etp, "Expert TP sizes (MoE), e.g. 1,2,4")
      ->type_name("LIST");
  g->add_option("--pipeline-schedule", o->schedule,
                "Pipeline schedules, e.g. 1f1b,zb-h1,zb-h2,zb-v (of gpipe,1f1b,zb-h1,zb-h2,zb-v,"
                "dualpipe,dualpipev)")
      ->type_name("LIST");
  g->add_option("--data-parallel-sharding-strategy", o->sharding,
                "Megatron-FSDP sharding, e.g. no_shard,optim,optim_grads,optim_grads_params "
                "(ZeRO-1/2/3 turn training.use_megatron_fsdp on; no_shard: the plain layout)")
      ->type_name("LIST");
  g->add_option("--num-distributed-optimizer-instances", o->instances,
                "HSDP replica counts (1 = shard over all of DP x CP), e.g. 1,2,4")
      ->type_name("LIST");
  g->add_option("--optimizer-cpu-offload", o->offload,
                "on,off: optimizer state offloaded to host memory (training.optimizer_cpu_offload "
                "with the scenario's optimizer_offload_fraction; needs the topology's "
                "gpu.host_link)")
      ->type_name("LIST");
  g->add_option("--fp8", o->fp8,
                "on,off: FP8 GEMMs (the scenario's training.fp8_format, else hybrid)")
      ->type_name("LIST");
  g->add_option("--pipeline-split", o->split_axis,
                "Uneven pipeline splits beside each layout's even one: auto (layers moved from "
                "slower to faster stages, e.g. on a mixed cluster) or ';'-separated "
                "pipeline_model_parallel_layout strings, e.g. \"E,t*5|t*19,L\"")
      ->type_name("auto|LAYOUTS");
  auto* split = cmd->add_option_group(
      "Pipeline split", "Megatron-LM's uneven split flags, kept for every swept layout");
  o->pipeline_split.add_to(*split);
  cmd->add_option("--jobs", o->jobs, "Simulations at once (default: the number of cores)")
      ->capture_default_str();
  cmd->add_option("--top", o->top, "Ranked (and out-of-memory) configurations listed; 0 = all")
      ->capture_default_str();
  cmd->add_option("--out", o->out_dir,
                  "Write sweep.json and sweep.csv (one row per configuration) into DIR");
  cmd->add_option(
         "--cost-db", o->cost_db,
         "Measured cost database (default: traces/db/<gpu>.json beside topologies/, if any)");
  cmd->add_option("--mode", o->mode,
                  "simulate (SimGrid replay of each), analytical (closed form, fast), auto "
                  "(analytical ranking, the top K replayed)")
      ->check(CLI::IsMember({"simulate", "analytical", "auto"}))
      ->capture_default_str();
  cmd->add_option("--global-batch-size-per-dp", o->global_batch_size_per_dp,
                  "Global batch = N x DP in every configuration (weak scaling; default: the "
                  "scenario's global batch, fixed)")
      ->check(positive_number());
  cmd->add_option("--train-tokens", o->train_tokens,
                  "Token budget (15T, 2e12): days and GPU-hours to train it, per GPU count");
  cmd->add_flag(
      "--simulate-oom", o->simulate_oom,
      "Also simulate configurations that do not fit the GPU's memory (still listed as OOM)");
  cmd->callback([o] {
    retain_freed_memory();  // many evaluations in one process (core/allocator_policy.hpp)
    const SweepRequest request = parse_request(*o);
    const std::optional<SweepOutcome> outcome = run_sweep_request(request);
    if (!outcome) return;  // an MPI rank other than 0: rank 0 prints
    print_outcome(request, *outcome);
  });
}

}  // namespace traintwin::cli
