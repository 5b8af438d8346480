// `traintwin train SCENARIO [--backend cpu|cuda]`: live training with the executor, in one process
// or under mpirun/srun (one process per rank; CPU backend). Prints Megatron-LM-style log lines
// from rank 0. `--fault-inject SPEC` makes a rank kill or stop itself in the training loop
// (exec/fault_injection.hpp). Without mpirun, `--max-restarts N --nproc R --save DIR` runs the
// elastic agent instead (exec/elastic_agent.hpp): it launches mpirun itself, relaunches the job
// from the last checkpoint when it fails, and prints the measured goodput.
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "cli/backend_choice.hpp"
#include "cli/commands.hpp"
#include "cli/flag_checks.hpp"
#include "cli/scenario_options.hpp"
#include "cli/sweep_mpi.hpp"
#include "core/allocator_policy.hpp"
#include "core/error.hpp"
#include "core/flops.hpp"
#include "core/posix_file.hpp"
#include "exec/elastic_agent.hpp"
#include "exec/fault_injection.hpp"
#include "exec/launch_env.hpp"
#include "exec/cpu/host_device.hpp"
#include "exec/cpu/matmul.hpp"
#include "exec/local_communicator.hpp"
#include "exec/mpi_communicator.hpp"
#include "exec/linear.hpp"
#include "exec/live_events.hpp"
#include "exec/trainer.hpp"
#include "sim/chakra_export.hpp"
#include "traces/timeline.hpp"

namespace traintwin::cli {
namespace {

struct TrainOptions {
  ScenarioOptions scenario;
  std::string save, load, timeline;
  std::string timeline_format = "perfetto";  // --timeline-format perfetto | chakra
  std::string backend = "cpu";
  double distributed_timeout_minutes = exec::kDefaultDistributedTimeoutMinutes;
  std::string fault_inject;             // --fault-inject SPEC ("" = none)
  std::optional<int64_t> max_restarts;  // set: run the elastic agent
  std::optional<int64_t> nproc;         // the agent's mpirun -np
};

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

/// Averages of the iterations since the last log line (Megatron's training_log).
struct LogWindow {
  int64_t iterations = 0;
  double loss = 0, ms = 0, load_balancing = 0;
  void add(const exec::IterationLog& l) {
    ++iterations;
    loss += l.lm_loss;
    ms += l.elapsed_ms;
    load_balancing += l.load_balancing_loss.value_or(0.0);
  }
};

/// Megatron's training_log line; "throughput per GPU (TFLOP/s/GPU)" counts the model FLOPs of an
/// iteration (core/flops.hpp, model_flops_per_iteration: no recomputation) over the mean time.
void print_iteration(const exec::IterationLog& l, const LogWindow& w, const Scenario& s) {
  const int64_t global_batch = s.training.global_batch_size;
  const double ms = w.ms / static_cast<double>(w.iterations);
  const double tflops_per_gpu = model_flops_per_iteration(s.model, global_batch) / (ms / 1000.0) /
                                static_cast<double>(s.world_size()) / 1e12;
  fmt::print(
      " iteration {:>8}/{:>8} | consumed samples: {:>12} | elapsed time per iteration (ms): "
      "{:.1f} | throughput per GPU (TFLOP/s/GPU): {:.2f} | tokens per second: {:.1f} | "
      "learning rate: {:.6E} | global batch size: {:>5} | lm loss: {:.6E} |{} grad norm: {:.3f} |\n",
      l.iteration, l.train_iters, l.consumed_samples, ms, tflops_per_gpu,
      static_cast<double>(global_batch * s.model.seq_length) / (ms / 1000.0), l.learning_rate,
      global_batch, w.loss / static_cast<double>(w.iterations),
      // Megatron's MoE metric, after the LM loss.
      l.load_balancing_loss ? fmt::format(" load_balancing_loss: {:.6E} |",
                                          w.load_balancing / static_cast<double>(w.iterations))
                            : std::string(),
      l.grad_norm);
  std::fflush(stdout);
}

void print_validation(const exec::ValidationLog& v) {
  const std::string text = fmt::format(" validation loss at iteration {} | lm loss value: {:.6E} | "
                                       "lm loss PPL: {:.6E} | ",
                                       v.iteration, v.lm_loss, std::exp(std::min(20.0, v.lm_loss)));
  const std::string rule(text.size() + 1, '-');
  fmt::print("{}\n{}\n{}\n", rule, text, rule);
  std::fflush(stdout);
}

/// Every rank's `mine` on rank 0, by rank (under mpirun: MPI_Gatherv); empty on the other
/// ranks. Without mpirun, `mine` alone.
std::vector<std::string> gather_on_root(exec::Communicator& comm, bool mpi,
                                        const std::string& mine) {
  if (!mpi) return {mine};
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(static_cast<size_t>(comm.world_size()));
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::vector<int> displs(lens.size(), 0);
  for (size_t i = 1; i < lens.size(); ++i) displs[i] = displs[i - 1] + lens[i - 1];
  std::string buf(comm.rank() == 0 ? static_cast<size_t>(displs.back() + lens.back()) : 0, '\0');
  MPI_Gatherv(mine.data(), len, MPI_CHAR, buf.data(), lens.data(), displs.data(), MPI_CHAR, 0,
              MPI_COMM_WORLD);
  if (comm.rank() != 0) return {};
  std::vector<std::string> all;
  for (size_t r = 0; r < lens.size(); ++r) {
    all.push_back(buf.substr(static_cast<size_t>(displs[r]), static_cast<size_t>(lens[r])));
  }
  return all;
}

/// `--timeline-format chakra`: the last iteration's ops of every rank as Chakra ET
/// (sim/chakra_export.hpp, compute nodes at their measured times), written by rank 0 to
/// DIR/<name>.<rank>.et with DIR/<name>.comm_groups.json, so that `simulate --trace chakra DIR`
/// (and ASTRA-sim) replays the live run.
void write_chakra_timeline(const exec::Trainer& trainer, exec::Communicator& comm, bool mpi,
                           const std::string& dir, const std::string& name) {
  const Program& prog = trainer.program();
  const int64_t rank = comm.rank();
  const std::vector<double> seconds =
      exec::live_op_seconds(prog, rank, trainer.last_iteration_spans());
  std::ostringstream et;
  ChakraCommGroups groups;
  write_chakra_rank(
      prog, rank, rank, [&](uint32_t op) { return seconds[op]; }, et, groups);
  const std::vector<std::string> files = gather_on_root(comm, mpi, et.str());
  const std::vector<std::string> group_texts =
      gather_on_root(comm, mpi, nlohmann::json(groups).dump());
  if (files.empty()) return;
  ChakraCommGroups all_groups;
  for (const std::string& text : group_texts) {
    for (const auto& [id, members] : nlohmann::json::parse(text).get<ChakraCommGroups>()) {
      all_groups.emplace(id, members);
    }
  }
  std::filesystem::create_directories(dir);
  for (size_t r = 0; r < files.size(); ++r) {
    AtomicFile f(std::filesystem::path(dir) / fmt::format("{}.{}.et", name, r));
    f.write(files[r]);
    f.commit();
  }
  AtomicFile g(std::filesystem::path(dir) / fmt::format("{}.comm_groups.json", name));
  g.write(chakra_comm_groups_json(all_groups));
  g.commit();
}

/// Gathers every rank's events on rank 0 (each rank's trace serialized with the Chrome trace
/// writer and read back there) and writes them to `path`.
void write_timeline(const exec::Trainer& trainer, exec::Communicator& comm, bool mpi,
                    const std::string& path, const std::string& name, const std::string& device) {
  Timeline mine{name, trainer.timeline(), device};
  std::ostringstream text;
  write_chrome_trace(mine, text);
  Timeline all{name, {}, device};
  if (!mpi) {
    all = mine;
  } else {
    const std::vector<std::string> texts = gather_on_root(comm, mpi, text.str());
    if (texts.empty()) return;
    for (size_t r = 0; r < texts.size(); ++r) {
      std::istringstream in(texts[r]);
      Timeline t = read_chrome_trace(in, "timeline of rank " + std::to_string(r));
      all.events.insert(all.events.end(), t.events.begin(), t.events.end());
    }
  }
  AtomicFile out(path);
  write_chrome_trace(all, out.stream());
  out.commit();
}

/// Under mpirun every process would start as many OpenBLAS threads as the node has cores; the
/// node's cores are shared among its ranks instead (the launcher's count of ranks on this node:
/// mpirun or srun), unless OPENBLAS_NUM_THREADS says otherwise (exec::cpu::gemm_threads_for, the
/// rule profile and validate --live time kernels with). Returns the GEMM threads per rank.
int share_cores_among_local_ranks() {
  const int ranks = static_cast<int>(std::max<int64_t>(1, exec::read_launch_environment().local_size));
  return exec::cpu::use_gemm_threads(ranks);
}

/// The scenario as launched: under mpirun/srun the cluster is the job's world (cluster.num_gpus
/// = its size and DP derived, as Megatron-LM derives DP from the world size) unless the command
/// line sets cluster.num_gpus itself, which must then match. `env` null: one process, as given.
Scenario load_for_launch(const ScenarioOptions& so, const exec::MpiEnvironment* env) {
  std::vector<Override> overrides = so.overrides();
  const bool given = std::any_of(overrides.begin(), overrides.end(), [](const Override& x) {
    return x.key == "cluster.num_gpus" || x.key == "parallelism.data_parallel_size";
  });
  if (env != nullptr && !given) {
    overrides.insert(overrides.begin(),
                     {{"cluster.num_gpus", std::to_string(env->size())},
                      {"parallelism.data_parallel_size", "null"}});
  }
  return load_scenario(so.file, overrides);
}

/// `env` is null for a single-process run.
void run_train(const TrainOptions& o, const exec::MpiEnvironment* env) {
  const bool mpi = env != nullptr;
  const Scenario s = load_for_launch(o.scenario, env);
  std::unique_ptr<exec::Communicator> comm;
  const RankLayout layout = layout_of(s);
  const int gemm_threads = share_cores_among_local_ranks();
  if (mpi && o.backend != "cpu") {
    // The NCCL communicator (exec/cuda/nccl_communicator.hpp) is not wired to the executor yet:
    // the executor's grad-norm all-reduce is on host doubles and its p2p ops are single calls.
    throw UnsupportedError(fmt::format(
        "{}: --backend {} under mpirun/srun ({} processes): the executor runs the CUDA backend in "
        "one process (one GPU) only so far; use --backend cpu for several ranks",
        s.source.string(), o.backend, env->size()));
  }
  const std::unique_ptr<exec::Backend> backend =
      make_backend(o.backend, exec::read_launch_environment().local_rank);
  if (mpi) {
    if (env->size() != s.world_size()) {
      throw ConfigError(fmt::format(
          "{}: cluster.num_gpus = {} (TP {} x PP {} x DP {}) set on the command line, but mpirun "
          "started {} processes (leave cluster.num_gpus out: the job's size is taken)",
          s.source.string(), s.world_size(), s.parallel.tensor_model_parallel_size,
          s.parallel.pipeline_model_parallel_size, s.parallel.data_parallel_size, env->size()));
    }
    comm = std::make_unique<exec::MpiCommunicator>(layout, MPI_COMM_WORLD,
                                                   o.distributed_timeout_minutes);
  } else {
    if (s.world_size() != 1) {
      // The one-process layout: every size of the scenario set back to 1, and what needs TP > 1
      // (sequence parallelism) turned off.
      std::string one = "--set cluster.num_gpus=1";
      const auto set_one = [&one](int64_t size, const char* flag) {
        if (size > 1) one += fmt::format(" {} 1", flag);
      };
      set_one(s.parallel.tensor_model_parallel_size, "--tensor-model-parallel-size");
      set_one(s.parallel.pipeline_model_parallel_size, "--pipeline-model-parallel-size");
      set_one(s.parallel.context_parallel_size, "--context-parallel-size");
      set_one(s.parallel.expert_model_parallel_size, "--expert-model-parallel-size");
      if (s.parallel.sequence_parallel) one += " --set parallelism.sequence_parallel=false";
      throw ConfigError(fmt::format(
          "{}: cluster.num_gpus = {} (TP {} x CP {} x PP {} x DP {}{}); run it with mpirun -np {} "
          "traintwin train ..., or in one process with {}",
          s.source.string(), s.world_size(), s.parallel.tensor_model_parallel_size,
          s.parallel.context_parallel_size, s.parallel.pipeline_model_parallel_size,
          s.parallel.data_parallel_size,
          s.model.is_moe() ? fmt::format(", EP {}", s.parallel.expert_model_parallel_size) : "",
          s.world_size(), one));
    }
    comm = std::make_unique<exec::LocalCommunicator>(layout, backend.get());
  }
  const bool root = comm->rank() == 0;
  // The outputs' places checked before the model is built and trained, not after: every rank
  // writes its checkpoint files into --save, rank 0 the timeline.
  if (!o.save.empty()) prepare_output_directory(o.save, "--save");
  if (!o.timeline.empty() && root) {
    // Chakra ET: a folder of one file per rank; Perfetto: one file.
    if (o.timeline_format == "chakra") {
      prepare_output_directory(o.timeline, "--timeline");
    } else {
      prepare_output_file(o.timeline, "--timeline");
    }
  }
  exec::TrainerOptions topts;
  topts.save = o.save;
  topts.load = o.load;
  topts.record_timeline = !o.timeline.empty();
  topts.backend = backend.get();
  const Clock::time_point built = Clock::now();
  exec::Trainer trainer(s, *comm, topts);
  const double build_ms = ms_since(built);  // model built, data opened, checkpoint loaded
  std::optional<exec::FaultInjector> fault;
  if (!o.fault_inject.empty()) {
    fault.emplace(exec::parse_fault_spec(o.fault_inject), comm->rank(), comm->world_size(),
                  *s.training.train_iters);
  }
  if (root) {
    fmt::print("training {} on {} rank(s) (TP {}, PP {}, DP {}, {} model chunk(s)), iterations {}..{}, "
               "{} micro-batch(es) of {} x {} tokens per replica\n",
               s.name, s.world_size(), s.parallel.tensor_model_parallel_size,
               s.parallel.pipeline_model_parallel_size, s.parallel.data_parallel_size,
               s.parallel.virtual_pipeline_model_parallel_size, trainer.first_iteration(),
               *s.training.train_iters, s.num_micro_batches(), s.training.micro_batch_size,
               s.model.seq_length);
    if (const std::string dev = backend_device_description(*backend); !dev.empty()) {
      fmt::print("backend {}: {}\n", backend->name(), dev);
    }
    if (const std::string p = exec::precision_summary(s.training.precision, *backend); !p.empty()) {
      fmt::print("{}\n", p);
    }
    if (trainer.first_iteration() > 1) {
      fmt::print(
          "resumed from {} at iteration {} (model built and checkpoint loaded in {:.1f} ms)\n",
          o.load, trainer.first_iteration() - 1, build_ms);
    } else if (trainer.load_found_no_checkpoint()) {
      fmt::print("no checkpoint in {} (no latest_checkpointed_iteration.txt): starting from "
                 "scratch, as Megatron-LM does\n",
                 o.load);
    }
    std::fflush(stdout);
  }
  LogWindow window;
  exec::TrainerCallbacks cb;
  // A save's stall is timed from the end of the step (or of the evaluation before it) to the
  // checkpoint callback: the parameters synchronized and every rank's file written.
  Clock::time_point step_done = Clock::now();
  const Clock::time_point training = Clock::now();
  // Every log line is flushed at once (as Megatron's print_rank_0 with flush=True): under mpirun
  // or into a file, progress shows live, and a job that dies keeps its last lines.
  cb.on_iteration = [&](const exec::IterationLog& l) {
    window.add(l);
    if (l.iteration % s.training.log_interval == 0 || l.iteration == l.train_iters) {
      if (root) {
        print_iteration(l, window, s);
        std::fflush(stdout);
      }
      window = LogWindow();
    }
    if (fault) {
      const double elapsed_s = ms_since(training) / 1000.0;
      if (const std::optional<exec::FaultKind> kind =
              fault->at_iteration_end(l.iteration, elapsed_s)) {
        // The elastic agent reads this line to name the failed rank.
        fmt::print(stderr, "{}\n", fault->describe(l.iteration));
        std::fflush(stdout);
        std::fflush(stderr);
        exec::inject_fault(*kind);
      }
    }
    step_done = Clock::now();
  };
  cb.on_validation = [&](const exec::ValidationLog& v) {
    if (root) {
      print_validation(v);
      std::fflush(stdout);
    }
    step_done = Clock::now();
  };
  cb.on_checkpoint = [&](const exec::CheckpointLog& c) {
    if (root) {
      fmt::print("saved checkpoint at iteration {} to {} ({:.1f} ms)\n", c.iteration,
                 c.dir.string(), ms_since(step_done));
      std::fflush(stdout);
    }
  };
  trainer.train(cb);
  if (const auto peak = backend_peak_memory_bytes(*backend); peak && root) {
    fmt::print("{} backend: allocator peak {:.2f} GiB of device memory (high-water of the memory "
               "pool; `traintwin memory` models it)\n",
               backend->name(), static_cast<double>(*peak) / (1 << 30));
  }
  if (!o.timeline.empty() && o.timeline_format == "chakra") {
    write_chakra_timeline(trainer, *comm, mpi, o.timeline, s.name);
    if (root) {
      fmt::print("timeline of iteration {} written to {} as Chakra ET ({}.<rank>.et)\n",
                 *s.training.train_iters, o.timeline, s.name);
    }
  } else if (!o.timeline.empty()) {
    // The device as a topology names it, which simulate --costs-from-timeline checks.
    write_timeline(trainer, *comm, mpi, o.timeline, s.name,
                   backend_device_id(*backend, backend_cost_device(*backend, gemm_threads)));
    if (root) fmt::print("timeline written to {}\n", o.timeline);
  }
}

/// This process's command line after the program name (Linux: /proc/self/cmdline), for the
/// elastic agent to launch the same train command under mpirun.
std::vector<std::string> own_arguments() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  const std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t b = 0; b < all.size();) {
    const size_t e = all.find('\0', b);
    args.push_back(all.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  if (args.empty()) throw Error("elastic agent: cannot read this process's command line");
  args.erase(args.begin());
  return args;
}

/// `args` without the flags the agent sets per launch or keeps for itself (`--flag VALUE` and
/// `--flag=VALUE` forms).
std::vector<std::string> without_agent_flags(const std::vector<std::string>& args) {
  static const std::vector<std::string> flags = {"--max-restarts", "--nproc", "--fault-inject",
                                                 "--load"};
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    bool dropped = false;
    for (const std::string& f : flags) {
      if (a == f) {
        ++i;  // its value
        dropped = true;
      } else if (a.rfind(f + "=", 0) == 0) {
        dropped = true;
      }
    }
    if (!dropped) out.push_back(a);
  }
  return out;
}

std::string seconds(double s) { return fmt::format("{:.2f} s", s); }

void print_goodput_summary(const exec::ElasticRunReport& r) {
  const auto share = [&](double s) {
    return r.wall_s > 0 ? fmt::format("{:5.1f} %", 100.0 * s / r.wall_s) : std::string("-");
  };
  fmt::print("elastic agent: goodput of the run (measured)\n");
  fmt::print("  wall time          {:>10}\n", seconds(r.wall_s));
  fmt::print("  productive time    {:>10}  ETTR {}\n", seconds(r.productive_s()),
             share(r.productive_s()));
  fmt::print("  restarts           {:>10}\n", r.restarts());
  fmt::print("  badput by cause (as `traintwin goodput` names them):\n");
  const std::pair<const char*, double> causes[] = {{"lost_progress", r.lost_progress_s()},
                                                   {"detection", r.detection_s()},
                                                   {"restart", r.restart_s()},
                                                   {"restore", r.restore_s()},
                                                   {"checkpoint_save", r.checkpoint_save_s()},
                                                   {"other", r.other_s()}};
  for (const auto& [name, s] : causes) {
    fmt::print("    {:<16} {:>10}  {}{}\n", name, seconds(s), share(s),
               std::string(name) == "other" ? "  (evaluation, logging, shutdown)" : "");
  }
  std::fflush(stdout);
}

/// `traintwin train ... --max-restarts N --nproc R --save DIR` without mpirun.
void run_elastic(const TrainOptions& o) {
  // Any launcher, even with one process (mpirun -np 1).
  exec::require_no_launcher(exec::read_launch_environment(), "--max-restarts",
                            "the elastic agent",
                            "traintwin train SCENARIO --max-restarts N --nproc R --save DIR");
  if (o.save.empty()) {
    throw ConfigError(
        "--max-restarts needs --save DIR: every restart resumes from the last "
        "checkpoint saved there");
  }
  if (!o.nproc) {
    throw ConfigError(
        "--max-restarts needs --nproc R: the number of ranks the elastic agent "
        "launches with mpirun -np R");
  }
  exec::ElasticAgentOptions a;
  a.nproc = *o.nproc;
  a.max_restarts = *o.max_restarts;
  a.program = std::filesystem::read_symlink("/proc/self/exe").string();
  a.train_args = without_agent_flags(own_arguments());
  a.save = o.save;
  a.first_load = o.load;
  if (!o.fault_inject.empty()) a.fault = exec::parse_fault_spec(o.fault_inject);
  const int64_t launches = a.max_restarts + 1;
  exec::ElasticAgentCallbacks cb;
  cb.on_output = [](const exec::TimedLine& l) {
    fmt::print("{}\n", l.text);
    std::fflush(stdout);
  };
  cb.on_attempt_start = [&](int64_t attempt, int64_t from, const std::vector<std::string>& cmd) {
    std::string line;
    for (const std::string& c : cmd) line += (line.empty() ? "" : " ") + c;
    fmt::print("elastic agent: attempt {} of {}: {}\n  {}\n", attempt, launches,
               from > 0 ? fmt::format("resuming from the checkpoint at iteration {}", from)
                        : std::string("starting from scratch"),
               line);
    std::fflush(stdout);
  };
  cb.on_attempt_end = [&](const exec::AttemptReport& r) {
    fmt::print("elastic agent: attempt {} {} after {} (started at {} s): {}\n", r.attempt,
               r.completed ? "completed" : "failed", seconds(r.end_s - r.start_s),
               fmt::format("{:.2f}", r.start_s), r.how_ended);
    fmt::print(
        "  resumed from iteration {}, reached iteration {}, last checkpoint {}; time lost "
        "{} (progress since the checkpoint {}, detection {}, restart {}, checkpoint load "
        "{}, checkpoint saves {})\n",
        r.resumed_from, r.last_iteration, r.last_checkpoint,
        seconds(r.lost_progress_s + r.detection_s + r.restart_s + r.restore_s +
                r.checkpoint_save_s),
        seconds(r.lost_progress_s), seconds(r.detection_s), seconds(r.restart_s),
        seconds(r.restore_s), seconds(r.checkpoint_save_s));
    std::fflush(stdout);
  };
  const exec::ElasticRunReport report = exec::run_elastic_job(a, cb);
  print_goodput_summary(report);
  if (report.stopped_by_signal != 0) {
    throw Error(fmt::format(
        "stopped by signal {} ({}) after {} launch(es): forwarded to the job, not restarted; the "
        "same command resumes from the last checkpoint in {}",
        report.stopped_by_signal, ::strsignal(report.stopped_by_signal), report.attempts.size(),
        a.save.string()));
  }
  if (!report.completed) {
    const exec::AttemptReport& last = report.attempts.back();
    throw Error(
        fmt::format("the job failed on attempt {} (the last of 1 + --max-restarts {}){}: {}",
                    last.attempt, a.max_restarts,
                    last.failed_rank ? fmt::format(", rank {}", *last.failed_rank) : std::string(),
                    last.how_ended));
  }
}

}  // namespace

void register_train_command(CLI::App& app) {
  auto o = std::make_shared<TrainOptions>();
  auto* cmd = app.add_subcommand(
      "train", "Train the scenario's model for real (CPU: one process, or mpirun -np N: one per "
               "rank; CUDA: one process on one GPU)");
  add_scenario_options(*cmd, o->scenario);
  cmd->add_option("--save", o->save, "Checkpoint folder (Megatron --save): every save_interval and at the end");
  cmd->add_option("--load", o->load, "Resume from the latest checkpoint in this folder (Megatron --load)");
  cmd->add_option("--backend", o->backend,
                  "Executor backend: cpu (OpenBLAS) or cuda (one GPU, fp32; built with CUDA only)")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--timeline", o->timeline,
                  "Write every op of every rank as a Chrome/Perfetto trace (the simulator's "
                  "format), or with --timeline-format chakra the last iteration's ops into this "
                  "folder as Chakra ET files");
  cmd->add_option("--timeline-format", o->timeline_format,
                  "perfetto: one Chrome/Perfetto JSON file; chakra: a folder of Chakra ET files "
                  "<name>.<rank>.et (measured compute times) for `simulate --trace chakra`")
      ->capture_default_str()
      ->check(CLI::IsMember({"perfetto", "chakra"}));
  cmd->add_option("--distributed-timeout-minutes", o->distributed_timeout_minutes,
                  "Under mpirun/srun: a rank that waits longer than this on a collective or "
                  "send/recv aborts the job, naming the op, group and missing ranks (Megatron-LM)")
      ->capture_default_str()
      ->check(positive_number());
  cmd->add_option(
      "--fault-inject", o->fault_inject,
      fmt::format("Make a rank fail in the training loop: rank=R,iteration=I[,kind=kill|"
                  "stop][,attempt=A] or rate_per_hour=X[,seed=S][,rank=R][,kind=...]"
                  " (keys: {})",
                  exec::fault_spec_keys()));
  cmd->add_option("--max-restarts", o->max_restarts,
                  "Without mpirun: run the elastic agent (as torchrun's --max-restarts), which "
                  "launches mpirun -np --nproc itself and relaunches the job from the last "
                  "checkpoint in --save up to N times when it fails")
      ->check(non_negative_number());
  cmd->add_option("--nproc", o->nproc, "With --max-restarts: ranks per launch (mpirun -np)")
      ->check(positive_number());
  cmd->callback([o] {
    if (!o->fault_inject.empty()) exec::parse_fault_spec(o->fault_inject);  // refused up front
    if (o->max_restarts) return run_elastic(*o);
    if (o->nproc) {
      throw ConfigError(
          "--nproc goes with --max-restarts (the elastic agent's mpirun -np); "
          "under mpirun the job's size is mpirun's -np");
    }
    retain_freed_memory();  // the same blocks every iteration (core/allocator_policy.hpp)
    if (!launched_by_mpi()) return run_train(*o, nullptr);
    const exec::MpiEnvironment env;
    run_or_abort_all([&] { run_train(*o, &env); });
  });
}

}  // namespace traintwin::cli
