#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/format.hpp"
#include "cli/memory_table.hpp"
#include "cli/scenario_options.hpp"
#include "core/flops.hpp"
#include "core/params.hpp"
#include "core/pipeline_split.hpp"
#include "core/program.hpp"
#include "core/schedule.hpp"
#include "topologies/topology.hpp"

namespace traintwin::cli {
namespace {

/// The layers of each pipeline stage and, under an uneven split, of each model chunk.
void print_pipeline_split(const Scenario& s) {
  const ParallelConfig& p = s.parallel;
  std::vector<std::string> flags;
  if (p.decoder_first_pipeline_num_layers) {
    flags.push_back(fmt::format("decoder_first_pipeline_num_layers {}",
                                *p.decoder_first_pipeline_num_layers));
  }
  if (p.decoder_last_pipeline_num_layers) {
    flags.push_back(fmt::format("decoder_last_pipeline_num_layers {}",
                                *p.decoder_last_pipeline_num_layers));
  }
  if (p.account_for_embedding_in_pipeline_split) flags.emplace_back("embedding counted as a layer");
  if (p.account_for_loss_in_pipeline_split) flags.emplace_back("loss counted as a layer");
  fmt::print("pipeline   transformer layers per stage {} ({})\n", layers_per_stage_text(s),
             flags.empty() ? std::string("even split") : fmt::format("uneven: {}", fmt::join(flags, ", ")));
  if (!uneven_pipeline_split(p) || p.virtual_pipeline_model_parallel_size == 1) return;
  for (int64_t r = 0; r < p.pipeline_model_parallel_size; ++r) {
    std::vector<int64_t> chunks;
    for (int64_t c = 0; c < p.virtual_pipeline_model_parallel_size; ++c) {
      chunks.push_back(chunk_layers(s, r, c).num_layers);
    }
    fmt::print("  stage {:>2}: model chunks of {} layers\n", r, fmt::join(chunks, "+"));
  }
}

void print_summary(const Scenario& s) {
  const ModelSpec& m = s.model;
  const ParallelConfig& p = s.parallel;
  const TrainingConfig& t = s.training;
  const TopologySpec topo = load_scenario_topology(s);

  fmt::print("scenario   {} ({})\n", s.name, s.source.string());
  fmt::print("model      {}: {} layers, hidden {}, {} heads ({} query groups), ffn {}, seq {}, "
             "vocab {}: {} parameters\n",
             m.architecture, m.num_layers, m.hidden_size, m.num_attention_heads, m.query_groups(),
             m.ffn_hidden_size, m.seq_length, m.vocab_size,
             si(static_cast<double>(parameter_count(m))));
  if (m.is_moe()) {
    int64_t moe_layers = 0;
    for (int64_t l = 0; l < m.num_layers; ++l) moe_layers += m.is_moe_layer(l) ? 1 : 0;
    fmt::print("experts    {} MoE layer(s) of {}: {} routed experts of width {}, top-{}{}, {}; "
               "{} dispatcher, {} load balancing; {} parameters active per token of {}\n",
               moe_layers, m.num_layers, m.num_moe_experts, m.moe_expert_ffn(), m.moe_router_topk,
               m.moe_shared_expert_intermediate_size > 0
                   ? fmt::format(", shared expert of width {}",
                                 m.moe_shared_expert_intermediate_size)
                   : std::string(),
               m.moe_expert_capacity_factor
                   ? fmt::format("capacity factor {}{}", *m.moe_expert_capacity_factor,
                                 m.moe_pad_expert_input_to_capacity ? " (padded)" : "")
                   : std::string("dropless"),
               to_string(m.moe_token_dispatcher_type), to_string(m.moe_router_load_balancing_type),
               si(static_cast<double>(active_parameter_count(m))),
               si(static_cast<double>(parameter_count(m))));
  }
  fmt::print("layers     {}, {}, {} positions, {} embeddings and LM head, {}linear biases\n",
             to_string(m.normalization), to_string(m.activation),
             to_string(m.position_embedding_type),
             m.untie_embeddings_and_output_weights ? "untied" : "tied",
             m.add_bias_linear ? "" : "no ");
  const JobGpus job = job_gpus(topo, s.cluster.num_gpus);
  fmt::print("cluster    {} ({}), topology {}\n",
             job.mixed() ? job.describe() : fmt::format("{} x {}", s.cluster.num_gpus, topo.gpu.name),
             topo.name, s.cluster.topology.string());
  fmt::print("layout     TP {} x CP {} x PP {} x DP {} (order {}), {} model chunk(s) per stage, "
             "sequence parallel {}\n",
             p.tensor_model_parallel_size, p.context_parallel_size, p.pipeline_model_parallel_size,
             p.data_parallel_size, p.rank_order, p.virtual_pipeline_model_parallel_size,
             p.sequence_parallel ? "on" : "off");
  if (m.is_moe()) {
    fmt::print("experts    EP {} x expert TP {} x expert DP {} (parallel folding over the TP x CP "
               "x DP = {} ranks of a stage): {} local expert(s) per rank\n",
               p.expert_model_parallel_size, p.expert_tp(), p.expert_data_parallel_size(),
               p.tensor_model_parallel_size * p.context_parallel_size * p.data_parallel_size,
               m.num_moe_experts / p.expert_model_parallel_size);
  }
  print_pipeline_split(s);
  const int64_t mbs = s.num_micro_batches();
  const char* sched = p.pipeline_schedule == PipelineScheduleKind::kGPipe  ? "GPipe"
                      : p.pipeline_schedule == PipelineScheduleKind::kZbH1 ? "ZB-H1"
                      : p.pipeline_schedule == PipelineScheduleKind::kZbH2 ? "ZB-H2"
                      : p.pipeline_schedule == PipelineScheduleKind::kZbV  ? "ZB-V"
                      : p.pipeline_schedule == PipelineScheduleKind::kDualPipeV ? "DualPipeV"
                      : p.pipeline_schedule == PipelineScheduleKind::kDualPipe  ? "DualPipe"
                      : p.interleaved()                                    ? "interleaved 1F1B"
                                                                           : "1F1B";
  fmt::print("batch      global {}, micro {}: {} micro-batches per pipeline, schedule {}, "
             "ideal bubble {:.1f} %\n",
             t.global_batch_size, t.micro_batch_size, mbs, sched,
             100.0 * ideal_bubble_fraction(p.pipeline_schedule, p.pipeline_model_parallel_size, mbs,
                                           p.virtual_pipeline_model_parallel_size));
  const std::string hsdp = t.num_distributed_optimizer_instances > 1
                               ? fmt::format(", HSDP {} replicas of {} ranks",
                                             t.num_distributed_optimizer_instances,
                                             s.data_parallel_shard_size())
                               : std::string();
  fmt::print("training   {}{}, recompute {}, attention {}, distributed optimizer {}{}, overlap "
             "grad reduce {}, overlap param gather {}, TP comm overlap {}\n",
             to_string(t.precision),
             t.fp8() ? fmt::format(" + FP8 GEMMs ({} format, {} recipe)", to_string(*t.fp8_format),
                                   to_string(t.fp8_recipe))
                     : std::string(),
             recompute_text(t), to_string(t.attention_backend),
             t.use_distributed_optimizer ? "on" : "off",
             t.use_megatron_fsdp
                 ? fmt::format(", Megatron-FSDP {} (ZeRO-{})",
                               to_string(t.data_parallel_sharding_strategy), t.zero_stage()) +
                       (t.zero_stage() >= 3 && (!t.reshard_after_forward ||
                                                t.fsdp_prefetch_depth != 1)
                            ? fmt::format(" reshard after forward {}, prefetch depth {}",
                                          t.reshard_after_forward ? "on" : "off",
                                          t.fsdp_prefetch_depth)
                            : "") +
                       hsdp
                 : hsdp,
             t.overlap_grad_reduce ? "on" : "off",
             t.overlap_param_gather ? "on" : "off", t.tp_comm_overlap ? "on" : "off");
  const double model_flops = model_flops_per_iteration(m, t.global_batch_size);
  const double hw_flops = hardware_flops_per_iteration(m, t.global_batch_size, t.recompute_granularity,
                                                     t.selective_ac_option);
  fmt::print("FLOPs      model {} per iteration, hardware {} (with recomputation); {} model FLOPs "
             "per GPU\n           {}\n",
             si(model_flops), si(hw_flops), si(model_flops / static_cast<double>(s.cluster.num_gpus)),
             model_flops_formula(m));
  const double peak = job.mean_peak_FLOPs(gemm_precision(t));  // mixed: the job's mean
  fmt::print("peak       {} FLOP/s per GPU ({}): an iteration takes at least {:.3f} s at 100 % MFU\n",
             si(peak), to_string(gemm_precision(t)),
             model_flops / (peak * static_cast<double>(s.cluster.num_gpus)));

  // The Program of the first and the last pipeline stage (TP/DP rank 0).
  const RankLayout layout = layout_of(s);
  std::vector<int64_t> ranks = {0};
  RankCoord last{};
  last.pp = p.pipeline_model_parallel_size - 1;
  if (layout.rank(last) != 0) ranks.push_back(layout.rank(last));
  const Program prog = build_program(s, ranks);
  fmt::print("Program    one iteration per rank:\n");
  for (const auto& [r, rp] : prog.ranks) {
    const RankProgramStats st = program_stats(prog, rp);
    fmt::print("  rank {:>5} (pp stage {:>2}): {:>7} ops ({} compute, {} tp-comm, {} cp-comm, {} pp-comm, "
               "{} dp-comm, {} ep-comm), {} kernels, {} FLOP, TP {}B, CP {}B, PP {}B, DP {}B, EP {}B\n",
               r, rp.coord.pp, rp.ops.size(), st.ops[0], st.ops[1], st.ops[2], st.ops[3], st.ops[4],
               st.ops[5], st.kernels, si(st.flops), si(st.comm_bytes[1]), si(st.comm_bytes[2]),
               si(st.comm_bytes[3]), si(st.comm_bytes[4]), si(st.comm_bytes[5]));
  }
  fmt::print("  {} distinct kernels (KernelKeys) to cost\n", prog.kernels.size());
  fmt::print("{}", memory_table(s, topo));
}

}  // namespace

void register_summary_command(CLI::App& app) {
  auto opts = std::make_shared<ScenarioOptions>();
  auto* cmd = app.add_subcommand("summary", "Model, layout, FLOPs, Program and memory of a scenario");
  add_scenario_options(*cmd, *opts);
  cmd->callback([opts] { print_summary(opts->load()); });
}

}  // namespace traintwin::cli
