// The `runs` format of ../shared/validation/published-runs-2026.yaml turned into validation
// cases (see load_published_runs in sim/validation.hpp). Unlike calibration.yaml's `cases`, a run
// names its hardware as `system: {gpu, num_gpus}`, may inherit its model and layout from an
// earlier run (`same_as`), names its data-parallel sharding in `parallelism` (as torchtitan's
// [parallelism] section does; see move_sharding), and the file also holds rows that are not one
// training run of one GPU type (memory figures, collective bandwidths): those are listed as not
// supported, with the reason, and never simulated. A `plan` row (Sailor's heterogeneous plans:
// pipeline stages on nodes of different GPU types) becomes a pipeline layout on a mixed-cluster
// topology whose nodes hold the plan's GPU types in rank order (read_plan, plan_topology). Rows
// measuring bus bandwidth (`measured: {busbw_GBps: ...}`, the mCCS multi-tenant all-reduce) are
// left to sim/collective_validation.hpp.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "sim/validation.hpp"
#include "topologies/topology.hpp"

namespace traintwin {
namespace {

std::string at(const std::string& file, const YAML::Node& n) {
  return fmt::format("{}:{}", file, n.Mark().line + 1);
}

/// Keys a run may carry (published-runs-2026.yaml's header and rows).
const std::set<std::string>& run_keys() {
  static const std::set<std::string> keys = {"id",
                                             "source",
                                             "same_as",
                                             "system",
                                             "model",
                                             "parallelism",
                                             "training",
                                             "measured",
                                             "also",
                                             "model_parameters",
                                             "data_parallel_size",
                                             "plan"};
  return keys;
}

/// Why a run cannot become a simulated case, or "" when it can (before the scenario is read).
std::string unsupported_reason(const YAML::Node& run, const YAML::Node& model,
                               const YAML::Node& measured) {
  if (!run["plan"] && (!run["system"] || !model)) {
    return "not a training run of one model on one GPU type (no system or model)";
  }
  if (!measured || !measured.IsMap()) return "no measurement";
  if (!measured["iteration_time_s"] && !measured["tokens_per_s_per_gpu"]) {
    std::string keys;
    for (const auto& kv : measured) keys += (keys.empty() ? "" : ", ") + kv.first.as<std::string>();
    return "measures " + keys + ", not an iteration time or tokens/s/GPU";
  }
  return "";
}

/// The run's section `key`, else the one of the run it is `same_as` (recursively resolved
/// earlier).
YAML::Node section(const YAML::Node& run, const YAML::Node* base, const char* key) {
  if (run[key]) return YAML::Clone(run[key]);
  if (base != nullptr && (*base)[key]) return YAML::Clone((*base)[key]);
  return YAML::Node();
}

/// A run's `parallelism.data_parallel_sharding_strategy` (the run format keeps the sharding with
/// the layout, as torchtitan's [parallelism] keeps data_parallel_shard_degree) moved to where a
/// traintwin scenario has it, `training`, with the switches Megatron-LM needs for it: a strategy
/// other than no_shard is Megatron-FSDP over the distributed optimizer (use_megatron_fsdp and
/// use_distributed_optimizer true unless the run says otherwise; a contradiction is then refused by
/// the scenario's own rules, naming the keys). Both sections naming it is an error.
void move_sharding(const std::string& where, YAML::Node& parallelism, YAML::Node& training) {
  const char* key = "data_parallel_sharding_strategy";
  if (!parallelism[key]) return;
  if (training[key]) {
    throw ConfigError(fmt::format("{}: {} is given in both parallelism and training (give it once)",
                                  where, key));
  }
  const YAML::Node strategy = parallelism[key];
  training[key] = strategy;
  parallelism.remove(key);
  if (strategy.IsScalar() && strategy.as<std::string>() != "no_shard") {
    if (!training["use_megatron_fsdp"]) training["use_megatron_fsdp"] = true;
    if (!training["use_distributed_optimizer"]) training["use_distributed_optimizer"] = true;
  }
}

/// The run's model (its own or that of its same_as run, already in `full`), else for a plan row
/// its source's (source_default_model); a null node when there is none.
YAML::Node model_of(const YAML::Node& full, const YAML::Node& run, const std::string& source) {
  // section() leaves a null node where neither run has the section.
  if (full["model"] && !full["model"].IsNull()) return full["model"];
  if (run["plan"]) return source_default_model(source);
  return YAML::Node(YAML::NodeType::Undefined);
}

/// Sailor's numbering of a plan's layers (Strati et al., SOSP 2025; artifact eth-easl/sailor,
/// sailor/Planner/llm_info.json and simulations/configs/training_config_opt_350.json,
/// "num_all_layers": 26 for 24 transformer layers): unit 0 is the embedding, units 1 .. l the
/// transformer layers, unit l + 1 the final norm, LM head and loss. "a-b" (or "a") -> {a, b}.
std::pair<int64_t, int64_t> plan_units(const std::string& where, const YAML::Node& n) {
  const std::string text = n.as<std::string>();
  int64_t first = 0, last = 0;
  char dash = 0;
  std::istringstream in(text);
  const bool range = static_cast<bool>(in >> first) && (in >> dash) && dash == '-' && (in >> last);
  if (!range) {
    std::istringstream one(text);
    if (!(one >> first) || !(one >> std::ws).eof()) {
      throw ConfigError(fmt::format("{}: layers: '{}' is not a range of Sailor layer numbers "
                                    "(allowed: \"a-b\" or \"a\", 0 = embedding)",
                                    where, text));
    }
    last = first;
  }
  if (first < 0 || last < first) {
    throw ConfigError(fmt::format("{}: layers: '{}' must be a-b with 0 <= a <= b", where, text));
  }
  return {first, last};
}

}  // namespace

PlanLayout read_plan(const YAML::Node& plan, const std::string& where, int64_t num_layers) {
  if (!plan.IsMap() || !plan["stages"] || !plan["stages"].IsSequence() ||
      plan["stages"].size() == 0) {
    throw ConfigError(where + ": plan: expected {stages: [...]} with at least one stage");
  }
  for (const auto& kv : plan) {
    if (kv.first.as<std::string>() != "stages") {
      throw ConfigError(fmt::format("{}: plan.{}: unknown key (allowed: stages)", where,
                                    kv.first.as<std::string>()));
    }
  }
  PlanLayout out;
  const auto read_node = [&](const std::string& at_stage, const YAML::Node& n) {
    for (const char* key : {"gpu", "gpus_per_node"}) {
      if (!n[key]) throw ConfigError(fmt::format("{}: {}: missing", at_stage, key));
    }
    const int64_t gpus = n["gpus_per_node"].as<int64_t>();
    if (gpus < 1) throw ConfigError(at_stage + ": gpus_per_node: must be >= 1");
    return std::pair{n["gpu"].as<std::string>(), gpus};
  };
  int64_t next_unit = 0;
  std::vector<std::vector<std::string>> stage_gpus;  // [stage][replica]
  std::set<int64_t> node_sizes;
  std::string layout;
  for (size_t s = 0; s < plan["stages"].size(); ++s) {
    const YAML::Node st = plan["stages"][s];
    const std::string at_stage = fmt::format("{}: plan.stages[{}]", where, s);
    for (const auto& kv : st) {
      const auto key = kv.first.as<std::string>();
      if (key != "gpu" && key != "gpus_per_node" && key != "layers" && key != "replicas") {
        throw ConfigError(fmt::format(
            "{}.{}: unknown key (allowed: gpu, gpus_per_node, layers, replicas)", at_stage, key));
      }
    }
    if (!st["layers"]) throw ConfigError(at_stage + ".layers: missing");
    std::vector<std::string> gpus;
    if (st["replicas"]) {
      if (st["gpu"] || st["gpus_per_node"]) {
        throw ConfigError(at_stage + ": give either gpu and gpus_per_node or replicas, not both");
      }
      for (size_t r = 0; r < st["replicas"].size(); ++r) {
        const auto [gpu, n] = read_node(fmt::format("{}.replicas[{}]", at_stage, r),
                                        st["replicas"][r]);
        gpus.push_back(gpu);
        node_sizes.insert(n);
      }
      if (gpus.empty()) throw ConfigError(at_stage + ".replicas: empty");
    } else {
      const auto [gpu, n] = read_node(at_stage, st);
      gpus.push_back(gpu);
      node_sizes.insert(n);
    }
    const auto [first, last] = plan_units(at_stage, st["layers"]);
    if (first != next_unit) {
      throw ConfigError(fmt::format("{}.layers: starts at {}, expected {} (the stages hold "
                                    "Sailor's layers 0 .. {} in order, each once)",
                                    at_stage, first, next_unit, num_layers + 1));
    }
    if (last > num_layers + 1) {
      throw ConfigError(fmt::format("{}.layers: {} is past the LM head, Sailor's layer {} "
                                    "({} transformer layers)",
                                    at_stage, last, num_layers + 1, num_layers));
    }
    next_unit = last + 1;
    const int64_t t = std::min(last, num_layers) - std::max<int64_t>(first, 1) + 1;
    StageLayers sl;
    sl.embedding = first == 0;
    sl.loss = last == num_layers + 1;
    sl.transformer_layers = std::max<int64_t>(t, 0);
    out.stages.push_back(sl);
    std::string part;
    if (sl.embedding) part += "E";
    if (sl.transformer_layers > 0) {
      part += fmt::format("{}t*{}", part.empty() ? "" : ",", sl.transformer_layers);
    }
    if (sl.loss) part += part.empty() ? "L" : ",L";
    layout += (layout.empty() ? "" : "|") + part;
    stage_gpus.push_back(std::move(gpus));
  }
  if (next_unit != num_layers + 2) {
    throw ConfigError(fmt::format("{}: plan: the stages end at Sailor layer {}, expected {} (the "
                                  "LM head of {} transformer layers)",
                                  where, next_unit - 1, num_layers + 1, num_layers));
  }
  std::set<size_t> replicas;
  for (const auto& g : stage_gpus) replicas.insert(g.size());
  if (replicas.size() > 1) {
    out.unsupported =
        "stages with different numbers of data-parallel replicas (Sailor's per-stage dp): a "
        "Megatron layout has one data-parallel size";
  }
  if (node_sizes.size() > 1) {
    out.unsupported = "stages on nodes of different sizes (a tensor-parallel size per stage): a "
                      "Megatron layout has one tensor-parallel size";
  }
  out.tensor_model_parallel_size = *node_sizes.begin();
  out.data_parallel_size = static_cast<int64_t>(stage_gpus.front().size());
  out.pipeline_model_parallel_layout = stage_gpus.size() > 1 ? layout : std::string();
  // Megatron's rank order (TP innermost, then DP, then PP): with TP = the node's GPUs, replica r of
  // stage s is node r + DP x s.
  for (const auto& g : stage_gpus) {
    for (const std::string& gpu : g) out.node_gpus.push_back(gpu);
  }
  return out;
}

std::string plan_topology(const PlanLayout& plan, const std::filesystem::path& topologies_dir) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(topologies_dir)) {
    if (entry.path().extension() == ".yaml") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    TopologySpec t;
    try {
      t = load_topology(file);
    } catch (const ConfigError&) {
      continue;  // not a topology this plan can use; `traintwin topology` reports its error
    }
    if (t.node.gpus_per_node != plan.tensor_model_parallel_size) continue;
    bool match = true;
    for (size_t i = 0; i < plan.node_gpus.size() && match; ++i) {
      match = gpu_of_node(t, static_cast<int64_t>(i)).name == plan.node_gpus[i];
    }
    if (match) return file.filename().string();
  }
  return "";
}

std::vector<ValidationCase> load_published_runs(const YAML::Node& root, const std::string& file,
                                                const std::filesystem::path& topologies_dir) {
  const YAML::Node runs = root["runs"];
  if (!runs.IsSequence()) throw ConfigError(file + ": runs: expected a list");
  std::map<std::string, YAML::Node> resolved;  // id -> run with same_as sections filled in
  std::vector<ValidationCase> out;
  for (const YAML::Node& run : runs) {
    if (!run.IsMap()) throw ConfigError(at(file, run) + ": runs[]: expected a mapping");
    for (const auto& kv : run) {
      const auto key = kv.first.as<std::string>();
      if (run_keys().count(key) == 0) {
        throw ConfigError(fmt::format("{}: runs[].{}: unknown key (allowed: {})",
                                      at(file, kv.first), key, fmt::join(run_keys(), ", ")));
      }
    }
    if (!run["id"]) throw ConfigError(at(file, run) + ": runs[].id: missing");
    // Bus-bandwidth rows (collective tenants) are read by load_collective_validation_cases()
    // (sim/collective_validation.hpp), not as training runs.
    if (run["measured"] && run["measured"].IsMap() && run["measured"]["busbw_GBps"]) continue;
    ValidationCase vc;
    vc.id = run["id"].as<std::string>();
    vc.source = run["source"] ? run["source"].as<std::string>() : std::string();
    const YAML::Node* base = nullptr;
    if (run["same_as"]) {
      const auto it = resolved.find(run["same_as"].as<std::string>());
      if (it == resolved.end()) {
        throw ConfigError(fmt::format("{}: {}.same_as: '{}' names no earlier run",
                                      at(file, run["same_as"]), vc.id,
                                      run["same_as"].as<std::string>()));
      }
      base = &it->second;
    }
    YAML::Node full = YAML::Clone(run);
    for (const char* key : {"model", "parallelism", "training"}) {
      const YAML::Node s = section(run, base, key);
      if (s) full[key] = s;
    }
    resolved[vc.id] = full;

    const YAML::Node system = run["system"];
    const YAML::Node measured = run["measured"];
    // A plan row's model is its source's where the row gives none (Sailor's OPT-350M).
    const YAML::Node model = model_of(full, run, vc.source);
    vc.unsupported = unsupported_reason(run, model, measured);
    if (system && system["gpu"]) vc.gpu = system["gpu"].as<std::string>();
    // Copies: the sections below are edited, and later runs may inherit the originals.
    YAML::Node parallelism = full["parallelism"] ? YAML::Clone(full["parallelism"])
                                                 : YAML::Node(YAML::NodeType::Map);
    YAML::Node training =
        full["training"] ? YAML::Clone(full["training"]) : YAML::Node(YAML::NodeType::Map);
    std::string topology;
    YAML::Node num_gpus = system ? system["num_gpus"] : YAML::Node();
    if (vc.unsupported.empty() && run["plan"]) {
      if (!model) {
        vc.unsupported = "a plan without a model (the row gives none, nor does its source)";
      } else {
        const PlanLayout plan = read_plan(run["plan"], at(file, run["plan"]) + ": " + vc.id,
                                          model["num_layers"].as<int64_t>());
        for (const std::string& g : plan.node_gpus) {
          if (vc.gpu.find(g) == std::string::npos) vc.gpu += (vc.gpu.empty() ? "" : " + ") + g;
        }
        vc.unsupported = plan.unsupported;
        if (vc.unsupported.empty()) {
          topology = plan_topology(plan, topologies_dir);
          if (topology.empty()) {
            vc.unsupported = fmt::format(
                "no topology in {} has nodes of {} GPUs holding {} from node 0 on",
                topologies_dir.filename().string(), plan.tensor_model_parallel_size,
                fmt::join(plan.node_gpus, ", "));
          }
        }
        for (const char* key : {"tensor_model_parallel_size", "pipeline_model_parallel_size",
                                "pipeline_model_parallel_layout"}) {
          if (parallelism[key]) {
            throw ConfigError(fmt::format("{}: {}: parallelism.{} is given by the plan", at(file, run),
                                          vc.id, key));
          }
        }
        parallelism["tensor_model_parallel_size"] = plan.tensor_model_parallel_size;
        parallelism["pipeline_model_parallel_size"] = static_cast<int64_t>(plan.stages.size());
        if (!plan.pipeline_model_parallel_layout.empty()) {
          parallelism["pipeline_model_parallel_layout"] = plan.pipeline_model_parallel_layout;
        }
        num_gpus = static_cast<int64_t>(plan.node_gpus.size()) * plan.tensor_model_parallel_size;
      }
    } else if (vc.unsupported.empty()) {
      topology = topology_file_for_gpu(vc.gpu);
      if (topology.empty()) vc.unsupported = "no topology for GPU " + vc.gpu;
      if (vc.unsupported.empty()) {
        // The row's GPU must be the topology's: its exact name, or the bare family ("GB200").
        const TopologySpec topo = load_topology(topologies_dir / topology);
        if (vc.gpu != topo.gpu.name && topo.gpu.name.rfind(vc.gpu + "-", 0) != 0) {
          vc.unsupported = fmt::format("GPU {} is not {}'s {}", vc.gpu, topology, topo.gpu.name);
        }
      }
    }
    if (vc.unsupported.empty()) {
      YAML::Node scenario;
      scenario["name"] = vc.id;
      scenario["model"] = model;
      move_sharding(file + " run " + vc.id, parallelism, training);
      apply_source_defaults(vc.source, model, parallelism, training, "");
      scenario["parallelism"] = parallelism;
      scenario["training"] = training;
      scenario["cluster"]["topology"] = std::filesystem::absolute(topologies_dir / topology).string();
      scenario["cluster"]["num_gpus"] = num_gpus;
      YAML::Emitter em;
      em << scenario;
      try {
        vc.scenario = parse_scenario(em.c_str(), file + " run " + vc.id, topologies_dir);
      } catch (const ConfigError& e) {
        vc.unsupported = e.what();
      }
    }
    if (vc.unsupported.empty()) {
      const YAML::Node t = measured["iteration_time_s"];
      if (t) {
        vc.measured_iteration_time_s = t.as<double>();
        vc.measured_as = "iteration_time_s " + t.as<std::string>();
      } else {
        const YAML::Node tps = measured["tokens_per_s_per_gpu"];
        const double tokens = static_cast<double>(vc.scenario.training.global_batch_size) *
                              static_cast<double>(vc.scenario.model.seq_length);
        vc.measured_iteration_time_s =
            tokens / (tps.as<double>() * static_cast<double>(vc.scenario.cluster.num_gpus));
        vc.measured_as = "tokens_per_s_per_gpu " + tps.as<std::string>();
      }
      if (measured["mfu"]) vc.measured_mfu = measured["mfu"].as<double>();
      if (measured["peak_memory_gib"]) {
        vc.measured_peak_memory_gib = measured["peak_memory_gib"].as<double>();
      }
    }
    out.push_back(std::move(vc));
  }
  return out;
}

}  // namespace traintwin
