// The `runs` format of ../shared/validation/published-runs-2026.yaml turned into validation
// cases (see load_published_runs in sim/validation.hpp). Unlike calibration.yaml's `cases`, a run
// names its hardware as `system: {gpu, num_gpus}`, may inherit its model and layout from an
// earlier run (`same_as`), names its data-parallel sharding in `parallelism` (as torchtitan's
// [parallelism] section does; see move_sharding), and the file also holds rows that are not one
// training run of one GPU type (memory figures, collective bandwidths, heterogeneous plans): those
// are listed as not supported, with the reason, and never simulated. Rows measuring bus bandwidth
// (`measured: {busbw_GBps: ...}`, the mCCS multi-tenant all-reduce) are left to
// sim/collective_validation.hpp.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <map>
#include <set>

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
  if (run["plan"]) return "stages on different GPU types (plan)";
  if (!run["system"] || !model) {
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

}  // namespace

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
    vc.unsupported = unsupported_reason(run, full["model"], measured);
    if (system && system["gpu"]) vc.gpu = system["gpu"].as<std::string>();
    if (vc.unsupported.empty()) {
      const std::string topology = topology_file_for_gpu(vc.gpu);
      if (topology.empty()) vc.unsupported = "no topology for GPU " + vc.gpu;
      if (vc.unsupported.empty()) {
        // The row's GPU must be the topology's: its exact name, or the bare family ("GB200").
        const TopologySpec topo = load_topology(topologies_dir / topology);
        if (vc.gpu != topo.gpu.name && topo.gpu.name.rfind(vc.gpu + "-", 0) != 0) {
          vc.unsupported = fmt::format("GPU {} is not {}'s {}", vc.gpu, topology, topo.gpu.name);
        }
      }
      if (vc.unsupported.empty()) {
        YAML::Node scenario;
        scenario["name"] = vc.id;
        scenario["model"] = full["model"];
        // Copies: the sections below are edited, and later runs may inherit the originals.
        YAML::Node parallelism = full["parallelism"] ? YAML::Clone(full["parallelism"])
                                                     : YAML::Node(YAML::NodeType::Map);
        YAML::Node training =
            full["training"] ? YAML::Clone(full["training"]) : YAML::Node(YAML::NodeType::Map);
        move_sharding(file + " run " + vc.id, parallelism, training);
        apply_source_defaults(vc.source, full["model"], parallelism, training, "");
        scenario["parallelism"] = parallelism;
        scenario["training"] = training;
        scenario["cluster"]["topology"] =
            std::filesystem::absolute(topologies_dir / topology).string();
        scenario["cluster"]["num_gpus"] = system["num_gpus"];
        YAML::Emitter em;
        em << scenario;
        try {
          vc.scenario = parse_scenario(em.c_str(), file + " run " + vc.id, topologies_dir);
        } catch (const ConfigError& e) {
          vc.unsupported = e.what();
        }
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
