#include <fmt/format.h>

#include <memory>

#include "cli/commands.hpp"
#include "cli/format.hpp"
#include "cli/scenario_options.hpp"
#include "core/program.hpp"

namespace traintwin::cli {
namespace {

struct ProgramOptions {
  ScenarioOptions scenario;
  int64_t rank = 0;
  bool summary = false;
  bool kernels = false;
};

void print_program(const Program& prog, const RankProgram& rp, const ProgramOptions& o) {
  const RankProgramStats st = program_stats(prog, rp);
  fmt::print("rank {} (tp {}, cp {}, dp {}, pp {}) of {}: {} ops, {} kernels, {} FLOP\n", rp.rank,
             rp.coord.tp, rp.coord.cp, rp.coord.dp, rp.coord.pp, prog.scenario.name, rp.ops.size(),
             st.kernels, si(st.flops));
  for (Stream s : {Stream::kCompute, Stream::kTpComm, Stream::kCpComm, Stream::kPpComm,
                   Stream::kDpComm, Stream::kEpComm, Stream::kOffload}) {
    const auto i = static_cast<size_t>(s);
    if (st.ops[i] == 0) continue;
    if (s == Stream::kCompute) {
      fmt::print("  {:<8} {:>7} ops\n", to_string(s), st.ops[i]);
    } else {
      fmt::print("  {:<8} {:>7} ops {:>12}B\n", to_string(s), st.ops[i], si(st.comm_bytes[i]));
    }
  }
  std::string sched;
  for (const auto& step : rp.schedule) sched += (sched.empty() ? "" : " ") + to_string(step);
  fmt::print("schedule: {}\n", sched);
  if (o.summary) return;
  fmt::print("{:>6}  {:<8} {:<60} {:>10}  {}\n", "op", "stream", "what", "FLOP", "after");
  for (const Op& op : rp.ops) {
    std::string deps;
    for (uint32_t d : op.deps) deps += (deps.empty() ? "" : ",") + std::to_string(d);
    fmt::print("{:>6}  {:<8} {:<60} {:>10}  {}\n", op.id, to_string(op.stream), prog.label(op),
               op.kind == OpKind::kCompute ? si(prog.op_flops(op)) : "", deps);
    if (o.kernels) {
      for (uint32_t k : op.kernels) {
        const Kernel& kern = prog.kernels[k];
        fmt::print("{:>16}{:<58} {:>10}  {}B\n", "", kern.key.to_string(), si(kern.flops), si(kern.bytes));
      }
    }
  }
}

}  // namespace

void register_program_command(CLI::App& app) {
  auto o = std::make_shared<ProgramOptions>();
  auto* cmd = app.add_subcommand("program", "Print one rank's Program: its ops, streams and dependencies");
  add_scenario_options(*cmd, o->scenario);
  cmd->add_option("--rank", o->rank, "Global rank")->capture_default_str();
  cmd->add_flag("--summary", o->summary, "Only the totals and the schedule");
  cmd->add_flag("--kernels", o->kernels, "List each compute op's kernels (KernelKey, FLOPs, bytes)");
  cmd->callback([o] {
    const Program prog = build_program(o->scenario.load(), {o->rank});
    print_program(prog, prog.ranks.at(o->rank), *o);
  });
}

}  // namespace traintwin::cli
