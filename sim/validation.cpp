#include "sim/validation.hpp"

#include <yaml-cpp/yaml.h>

#include <set>

#include "core/error.hpp"
#include "core/flops.hpp"
#include "core/input_file.hpp"
#include "core/yaml_document.hpp"
#include "sim/replay.hpp"
#include "topologies/topology.hpp"
#include "traces/cost_db.hpp"

namespace traintwin {
namespace {

std::string where(const std::string& file, const YAML::Node& n) {
  return file + ":" + std::to_string(n.Mark().line + 1);
}

void check_keys(const std::string& file, const YAML::Node& n, const std::string& what,
                const std::set<std::string>& allowed) {
  if (!n.IsMap()) throw ConfigError(where(file, n) + ": " + what + ": expected a mapping");
  for (const auto& kv : n) {
    const auto key = kv.first.as<std::string>();
    if (!allowed.count(key)) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      throw ConfigError(where(file, kv.first) + ": " + what + "." + key + ": unknown key (allowed: " + list + ")");
    }
  }
}

/// Rows of Sailor's artifact (published-runs-2026.yaml: "eth-easl/sailor mit/...").
bool sailor_source(const std::string& source) { return source.rfind("eth-easl/sailor", 0) == 0; }
}  // namespace

void apply_source_defaults(const std::string& source, const YAML::Node& model,
                           YAML::Node& parallelism, YAML::Node& training,
                           const std::string& variant) {
  const bool dgxc_repo = source.rfind("NVIDIA/dgxc-benchmarking", 0) == 0;
  if (dgxc_repo) {
    // Megatron-Core refuses layers that do not split over PP x VPP stages; the recipe ran, so it
    // counted the embedding and the loss as layers (NeMo's llama31_405b recipe does: 126 + 2 =
    // 128 = 8 x 8 x 2, scenarios/llama3.1-405b-h100-1024.yaml).
    const auto get = [&](const char* k) {
      return parallelism[k] ? parallelism[k].as<int64_t>() : int64_t{1};
    };
    const int64_t stages =
        get("pipeline_model_parallel_size") * get("virtual_pipeline_model_parallel_size");
    if (stages > 1 && model["num_layers"] && model["num_layers"].as<int64_t>() % stages != 0) {
      parallelism["account_for_embedding_in_pipeline_split"] = true;
      parallelism["account_for_loss_in_pipeline_split"] = true;
    }
  }
  if (dgxc_repo && !parallelism["sequence_parallel"]) {
    // The repository's NeMo recipes (published-runs-2026.yaml) run sequence parallelism wherever
    // TP > 1, as every dgxc recipe of calibration-modern.yaml with TP > 1 states.
    const YAML::Node tp = parallelism["tensor_model_parallel_size"];
    parallelism["sequence_parallel"] = tp && tp.as<int64_t>() > 1;
  }
  if (source.rfind("narayanan2021", 0) == 0) {
    // SC'21 Megatron: no sequence parallelism, no distributed optimizer, data-parallel
    // all-reduce after the backward pass (not overlapped), unfused attention.
    training["use_distributed_optimizer"] = false;
    training["overlap_grad_reduce"] = false;
    // Its p2p splits each tensor over TP and all-gathers it after the receive (section 4.1).
    parallelism["scatter_gather_tensors_in_pipeline"] = true;
    // Megatron-LM of April 2021 (README figure at 50a4b5fa02) had no gradient accumulation
    // fusion, which came in commit 83b1e42f30 (2022-02-13): each weight gradient was written to
    // param.grad and added into main_grad by a backward hook (megatron/model/distributed.py
    // _make_param_hook), fp16 without --accumulate-allreduce-grads-in-fp32 (examples/sc21/
    // CONFIG.sh at 6985e58938). Korthikanti et al. 2022 ran after it and keep the default
    // (fused), which is an assumption: from 83b1e42f30 until 07916bf245 (2022-09-27, "Support
    // gradient accumulation fusion in fp16") arguments.py turned the fusion off for fp16 unless
    // --accumulate-allreduce-grads-in-fp32, and the paper states neither its precision's
    // accumulation nor the flag. A case that gives the key wins.
    if (!training["gradient_accumulation_fusion"]) training["gradient_accumulation_fusion"] = false;
  } else if (source.rfind("korthikanti2022", 0) == 0) {
    // Tables 3/5 compare full recomputation without SP against SP + selective recomputation.
    const bool sp = variant == "sequence_parallel_selective_recompute";
    parallelism["sequence_parallel"] = sp;
    training["recompute_granularity"] = sp ? "selective" : "full";
    training["use_distributed_optimizer"] = false;
    // Megatron-LM of 2022: --scatter-gather-tensors-in-pipeline on by default (without SP).
    parallelism["scatter_gather_tensors_in_pipeline"] = true;
  } else if (source.rfind("dgxc v", 0) == 0 || source.rfind("nemo_long_context", 0) == 0 ||
             dgxc_repo) {
    // NVIDIA's DGX Cloud recipes (NeMo 2 / Megatron-Core) and NeMo's long-context table:
    // distributed optimizer with overlapped gradient reduce and parameter gather, Transformer
    // Engine TP communication overlap wherever sequence parallelism runs; flash attention comes
    // with the llama / nemotron preset. Keys the case gives win.
    auto set_default = [&](const char* key, bool value) {
      if (!training[key]) training[key] = value;
    };
    set_default("use_distributed_optimizer", true);
    set_default("overlap_grad_reduce", true);
    set_default("overlap_param_gather", training["use_distributed_optimizer"].as<bool>());
    const bool sp = parallelism["sequence_parallel"] && parallelism["sequence_parallel"].as<bool>();
    set_default("tp_comm_overlap", sp);
    // The file's FP8 rows ran with FP8 parameters (NeMo fp8_params).
    if (training["fp8_format"]) set_default("fp8_param_gather", true);
    // Megatron's fused cross entropy: the NeMo-1 llama3.1 and nemotron configs of dgxc v25.02
    // set cross_entropy_loss_fusion: true, and NeMo 2's GPTConfig defaults to it (the long-context
    // table and the repository's later recipes); the NeMo-1 grok1_314b.yaml does not set it, so
    // its rows keep Megatron's default (off).
    set_default("cross_entropy_loss_fusion", source.find("grok1") == std::string::npos);
  } else if (source.rfind("pytorch/torchtitan", 0) == 0) {
    // torchtitan's Llama (torchtitan/models/llama/model.py): no dropout anywhere, and attention
    // by F.scaled_dot_product_attention with is_causal, which runs the flash kernel for bf16.
    training["hidden_dropout"] = 0.0;
    training["attention_dropout"] = 0.0;
    training["attention_backend"] = "flash";
    // Its loss (train.py loss_fn @877991a and @9dec370): F.cross_entropy on the logits cast to
    // fp32.
    if (!training["cross_entropy_loss"]) training["cross_entropy_loss"] = "torch";
    // The December 2024 benchmarks (benchmarks/llama3_h100_202412_torchtitan.md, torchtitan
    // @9dec370) ran train_configs/llama3_8b.toml's [activation_checkpoint] mode = 'selective',
    // selective_ac_option = 'op'. (docs/performance.md's A100 row is its "selective layer" run,
    // which is not this.)
    const bool op_sac_run = source.find("benchmarks/llama3_h100_202412") != std::string::npos;
    if (op_sac_run && !training["selective_ac_option"] && training["recompute_granularity"] &&
        training["recompute_granularity"].as<std::string>() == "selective") {
      training["selective_ac_option"] = "op";
    }
  } else if (sailor_source(source)) {
    // Sailor's training framework (artifact eth-easl/sailor @cf2c8e3): Megatron-DeepSpeed with the
    // DeepSpeed config of third_party/Megatron-DeepSpeed/ds_config.json and
    // ae_scripts/clariden_scripts/run_opt.slurm: no "fp16"/"bf16" section and no --fp16/--bf16,
    // so fp32 parameters, activations and GEMMs (PyTorch's default float32 matmul precision,
    // "highest"; sailor/Planner/llm_info.json counts 4 bytes per float); AdamW; "zero_optimization":
    // {} (ZeRO stage 0: no sharded optimizer); no activation recomputation flag. DeepSpeed's
    // PipelineEngine all-reduces the gradients after the last micro-batch's backward
    // (TrainSchedule's ReduceGrads), not overlapped, and with TP > 1 partitions each pipeline
    // tensor over the TP group and all-gathers it after the receive (pipe_partitioned,
    // deepspeed/pipe_engine.py), as Megatron's scatter/gather does. Keys the row gives win.
    auto set_default = [&](const char* key, const YAML::Node& value) {
      if (!training[key]) training[key] = value;
    };
    set_default("precision", YAML::Node("fp32"));
    set_default("float32_matmul_precision", YAML::Node("highest"));
    set_default("use_distributed_optimizer", YAML::Node(false));
    set_default("overlap_grad_reduce", YAML::Node(false));
    if (!parallelism["scatter_gather_tensors_in_pipeline"]) {
      parallelism["scatter_gather_tensors_in_pipeline"] = true;
    }
  } else if (source.rfind("dgxc_h100", 0) == 0) {
    // NVIDIA's NeMo/Megatron-Core recipe: distributed optimizer with overlapped grad reduce and
    // param gather, Transformer Engine TP communication overlap and flash attention.
    training["use_distributed_optimizer"] = true;
    training["overlap_grad_reduce"] = true;
    training["overlap_param_gather"] = true;
    training["tp_comm_overlap"] = true;
    training["attention_backend"] = "flash";
  }
}

YAML::Node source_default_model(const std::string& source) {
  if (!sailor_source(source)) return YAML::Node();
  // Sailor's OPT-350M (artifact eth-easl/sailor @cf2c8e3): Megatron-DeepSpeed's pretrain_gpt.py
  // with --num-layers 24 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048
  // (ae_scripts/clariden_scripts/run_opt.slurm, sailor/Worker/run_agent.sh) and the GPT-2 vocab
  // file (50257 tokens; llm_info.json's layer 0 holds (50304 + 2048) x 1024 parameters: the vocab
  // padded to 128 as Megatron pads it, plus 2048 learned positions), i.e. Megatron's GPT layers
  // (layernorm, GeLU MLP of 4h, biases, tied embeddings: the gpt preset).
  YAML::Node m;
  m["architecture"] = "gpt";
  m["num_layers"] = 24;
  m["hidden_size"] = 1024;
  m["num_attention_heads"] = 16;
  m["seq_length"] = 2048;
  m["vocab_size"] = 50257;
  return m;
}

std::string topology_file_for_gpu(const std::string& gpu) {
  if (gpu.rfind("A100", 0) == 0) return "dgx-a100-superpod.yaml";
  if (gpu.rfind("H100-96GB", 0) == 0) return "grand-teton-h100-96gb.yaml";
  if (gpu.rfind("H100", 0) == 0) return "dgx-h100-superpod.yaml";
  if (gpu.rfind("H200", 0) == 0) return "dgx-h200-superpod.yaml";
  // B200 in an NVL72 rack is the GB200's GPU; a DGX B200 (8 per node) has no file yet.
  if (gpu.rfind("GB200", 0) == 0) return "gb200-nvl72-superpod.yaml";
  return "";
}

std::vector<ValidationCase> load_validation_cases(const std::filesystem::path& calibration_file,
                                                  const std::filesystem::path& topologies_dir) {
  const std::string file = calibration_file.string();
  // A regular file of at most 4 MiB and one YAML document, like scenarios and topologies.
  const YAML::Node root = load_single_yaml_document(
      read_input_file(calibration_file, "calibration file", kMaxConfigFileBytes), file,
      "calibration file");
  if (!root["cases"] && root["runs"]) return load_published_runs(root, file, topologies_dir);
  if (!root["cases"] || !root["cases"].IsSequence()) {
    throw ConfigError(file + ": cases: missing or not a list");
  }
  std::vector<ValidationCase> out;
  for (const YAML::Node& c : root["cases"]) {
    check_keys(file, c, "cases[]", {"id", "source", "model", "parallelism", "training", "cluster", "measured"});
    for (const char* key : {"id", "source", "model", "parallelism", "training", "cluster", "measured"}) {
      if (!c[key]) throw ConfigError(where(file, c) + ": cases[]." + key + ": missing");
    }
    const auto id = c["id"].as<std::string>();
    const auto source = c["source"].as<std::string>();
    const YAML::Node cluster = c["cluster"];
    check_keys(file, cluster, id + ".cluster", {"gpu", "num_gpus"});
    const auto gpu = cluster["gpu"].as<std::string>();
    const std::string topology = topology_file_for_gpu(gpu);
    if (topology.empty()) {
      throw ConfigError(where(file, cluster) + ": " + id + ".cluster.gpu: '" + gpu +
                        "' has no topology (allowed: A100-*, H100-*, H200-*, GB200*)");
    }
    // The measurements: one case per measured iteration time.
    const YAML::Node measured = c["measured"];
    check_keys(file, measured, id + ".measured",
               {"tflops_per_gpu", "model_tflops_per_gpu", "tokens_per_sec_per_gpu",
                "iteration_time_s", "mfu_percent", "one_layer_ms"});
    std::vector<std::pair<std::string, YAML::Node>> variants;  // (variant, value)
    if (measured["iteration_time_s"]) {
      const YAML::Node t = measured["iteration_time_s"];
      if (t.IsMap()) {
        for (const auto& kv : t) variants.emplace_back(kv.first.as<std::string>(), kv.second);
      } else {
        variants.emplace_back("", t);
      }
    } else if (measured["tflops_per_gpu"]) {
      variants.emplace_back("", measured["tflops_per_gpu"]);
    } else if (measured["model_tflops_per_gpu"]) {
      variants.emplace_back("", measured["model_tflops_per_gpu"]);
    } else if (measured["tokens_per_sec_per_gpu"]) {
      variants.emplace_back("", measured["tokens_per_sec_per_gpu"]);
    } else {
      throw ConfigError(where(file, measured) + ": " + id +
                        ".measured: needs iteration_time_s, tflops_per_gpu, model_tflops_per_gpu "
                        "or tokens_per_sec_per_gpu");
    }
    for (const auto& [variant, value] : variants) {
      YAML::Node scenario;
      scenario["name"] = id + (variant.empty() ? "" : "/" + variant);
      scenario["model"] = YAML::Clone(c["model"]);
      YAML::Node parallelism = YAML::Clone(c["parallelism"]);
      YAML::Node training = YAML::Clone(c["training"]);
      apply_source_defaults(source, scenario["model"], parallelism, training, variant);
      scenario["parallelism"] = parallelism;
      scenario["training"] = training;
      scenario["cluster"]["topology"] = std::filesystem::absolute(topologies_dir / topology).string();
      scenario["cluster"]["num_gpus"] = cluster["num_gpus"];
      YAML::Emitter em;
      em << scenario;
      ValidationCase vc;
      vc.id = scenario["name"].as<std::string>();
      vc.source = source;
      vc.gpu = gpu;
      vc.scenario = parse_scenario(em.c_str(), file + " case " + vc.id, topologies_dir);
      const double x = value.as<double>();
      if (measured["iteration_time_s"]) {
        vc.measured_iteration_time_s = x;
        vc.measured_as = "iteration_time_s " + value.as<std::string>();
      } else if (measured["model_tflops_per_gpu"]) {
        // NeMo prints model TFLOP/s per GPU = F / (T x GPUs) with the same per-token formula as
        // model_flops_per_iteration() (no causal halving).
        const double f = model_flops_per_iteration(vc.scenario.model,
                                                   vc.scenario.training.global_batch_size);
        vc.measured_iteration_time_s = f / (x * 1e12 * static_cast<double>(vc.scenario.cluster.num_gpus));
        vc.measured_as = "model_tflops_per_gpu " + value.as<std::string>();
      } else if (measured["tokens_per_sec_per_gpu"]) {
        // Megatron-Bridge's performance summary: Tokens / sec / GPU = global batch x sequence
        // length / (step time x GPUs), so T = B s / (x GPUs); no FLOP formula involved.
        if (x <= 0) {
          throw ConfigError(where(file, value) + ": " + id +
                            ".measured.tokens_per_sec_per_gpu: must be > 0");
        }
        const double tokens = static_cast<double>(vc.scenario.training.global_batch_size) *
                              static_cast<double>(vc.scenario.model.seq_length);
        vc.measured_iteration_time_s = tokens / (x * static_cast<double>(vc.scenario.cluster.num_gpus));
        vc.measured_as = "tokens_per_sec_per_gpu " + value.as<std::string>();
      } else {
        // Narayanan et al.: throughput per GPU = F / (T x GPUs), F of eq. 3.
        const double f = narayanan_eq3_flops(vc.scenario.model, vc.scenario.training.global_batch_size);
        vc.measured_iteration_time_s = f / (x * 1e12 * static_cast<double>(vc.scenario.cluster.num_gpus));
        vc.measured_as = "tflops_per_gpu " + value.as<std::string>();
      }
      out.push_back(std::move(vc));
    }
  }
  return out;
}

}  // namespace traintwin

namespace traintwin {

SimulationSummary simulate_validation_case(
    const ValidationCase& c, const std::function<RooflineEfficiency(const GpuSpec&)>& efficiency_of,
    const std::filesystem::path& topologies_dir) {
  if (!c.unsupported.empty()) {
    throw ConfigError(c.id + ": not supported yet: " + c.unsupported);
  }
  const TopologySpec topo = load_topology(c.scenario.cluster.topology);
  const std::filesystem::path db_file =
      database_dir_beside(topologies_dir) / (topo.gpu.name + ".json");
  std::unique_ptr<CostModel> costs = make_roofline_cost_model(efficiency_of(topo.gpu));
  if (std::filesystem::exists(db_file)) {
    costs = make_database_cost_model(
        std::make_shared<const CostDatabase>(CostDatabase::load(db_file)), topo.gpu,
        std::move(costs));
  }
  SimulationOptions opts;
  opts.record_timeline = false;
  return summarize(c.scenario, topo, simulate(c.scenario, topo, *costs, opts));
}

}  // namespace traintwin
