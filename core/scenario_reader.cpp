// Reading a scenario file (yaml-cpp): parse_scenario and load_scenario (core/scenario.hpp).
// The keys, their types, defaults and members are core/scenario_schema.hpp's table; the
// architecture presets the reader applies first are core/scenario.cpp's; the cross-key rules it
// calls last are core/scenario_rules.cpp's.
//
// The pipeline is: parse the YAML text -> check the file's structure (mappings, unknown and
// duplicate keys, with file:line) -> apply the overrides on the YAML tree (both
// core/scenario_tree.hpp's, with its typed getters) -> extract every key with its type and
// defaults (this file) -> derive DP and v -> validate the cross-key rules. Every failure is a
// ConfigError "<where>: <key path>: <problem>", where <where> is "file:line" for a key read from
// the file, "--set" for a key given as an override, and the file alone for a key that is absent
// (a missing required key, a derived value). The key reference in scenarios/README.md is
// generated from the schema (core/scenario_reference.hpp).
// Next in the flow: core/scenario_rules.cpp (the cross-key rules), then core/schedule.hpp and
// core/program.hpp (the Program of a Scenario).
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string_view>
#include <type_traits>
#include <variant>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/pipeline_split.hpp"
#include "core/rank_layout.hpp"
#include "core/scenario.hpp"
#include "core/scenario_enum_names.hpp"
#include "core/scenario_rules.hpp"
#include "core/scenario_schema.hpp"
#include "core/scenario_tree.hpp"
#include "core/text.hpp"
#include "core/yaml_document.hpp"

namespace traintwin {

namespace {

namespace fs = std::filesystem;
using namespace scenario_schema;
using scenario_rules::check_moe;
using scenario_rules::check_rules;
using scenario_rules::Locator;
using scenario_rules::rule_error;
using scenario_reader::describe;
using scenario_reader::is_string_typed;
using scenario_reader::parse_integer_text;
using scenario_reader::path_of;

/// Reads one scenario: structure checks and overrides (the tree's), then typed extraction.
class Reader : public scenario_reader::ScenarioTree {
 public:
  using ScenarioTree::ScenarioTree;

  /// Reads every key with its type and default, derives DP and v, and resolves the topology.
  /// The keys with a member in the schema are read by read_section(); this function adds the
  /// defaults that depend on other keys and the keys the schema leaves to the reader.
  Scenario extract(const fs::path& base_dir) {
    Scenario s;
    read_section("", s, base_dir);

    ModelSpec& m = s.model;
    require_section("model");
    read_key(key("model.architecture"), s, base_dir);
    apply_architecture_preset(
        s);  // the file's layer keys and training.attention_backend win over it
    read_section("model", s, base_dir);
    if (!given("model", "num_query_groups")) m.num_query_groups = m.num_attention_heads;
    // Saturating: a hidden_size past its bound is refused by name (scenario_rules), not turned
    // into a wrapped ffn_hidden_size of 0 (4 x 2^62).
    if (!given("model", "ffn_hidden_size")) m.ffn_hidden_size = mul(4, m.hidden_size);
    if (given("model", "rotary_base") && m.position_embedding_type != PositionEmbedding::kRope) {
      fail(path_of("model", "rotary_base"),
           "applies only to position_embedding_type: rope (this model uses learned_absolute "
           "positions, which have no rotary base)");
    }
    m.moe_layer_pattern = get_moe_layer_pattern(m.num_layers);
    if (const YAML::Node cf = value("model", "moe_expert_capacity_factor"); cf && !cf.IsNull()) {
      m.moe_expert_capacity_factor = get_number("model", "moe_expert_capacity_factor", kPositive);
    }

    ParallelConfig& p = s.parallel;
    read_section("parallelism", s, base_dir);
    const std::optional<int64_t> given_v = get_int("parallelism", std::string(kVirtualSize), false);
    const std::optional<int64_t> layers_per_stage =
        get_int("parallelism", std::string(kLayersPerVirtualStage), false);
    const std::optional<int64_t> given_dp = get_int("parallelism", "data_parallel_size", false);

    TrainingConfig& t = s.training;
    require_section("training");
    read_section("training", s, base_dir);
    if (given("training", "fp8_recipe") && !t.fp8_format) {
      fail("training.fp8_recipe",
           fmt::format("{} needs training.fp8_format (allowed: {}); without it no GEMM runs in "
                       "FP8",
                       to_string(t.fp8_recipe), join(key("training.fp8_format").values)));
    }
    // Megatron-LM: lr_decay_iters defaults to train_iters.
    if (!t.lr_decay_iters) t.lr_decay_iters = t.train_iters;

    ClusterConfig& c = s.cluster;
    require_section("cluster");
    read_section("cluster", s, base_dir);
    const std::string algo =
        get_enum_text("cluster", "collective_algorithm", key("cluster.collective_algorithm").values)
            .value_or("auto");
    c.collective_algorithm = algo == "auto" ? "" : algo;
    c.what_if = extract_what_if();
    c.reliability = extract_reliability();

    read_section("data", s, base_dir);  // an optional section of optional keys

    // v: given directly, or as layers per virtual stage (Megatron-LM:
    // v = (num_layers / PP) / num_layers_per_virtual_pipeline_stage, the embedding and loss
    // counted as layers when accounted for in the split).
    const int64_t pp = p.pipeline_model_parallel_size;
    if (layers_per_stage) {
      const std::string key = fmt::format("parallelism.{}", kLayersPerVirtualStage);
      if (p.decoder_first_pipeline_num_layers || p.decoder_last_pipeline_num_layers) {
        fail(key,
             fmt::format("cannot be used with parallelism.{} (at {}); give the model chunks "
                         "per pipeline rank as parallelism.{} (rule: as Megatron-LM, which "
                         "asks for --num-virtual-stages-per-pipeline-rank with uneven "
                         "first/last stages)",
                         p.decoder_first_pipeline_num_layers ? "decoder_first_pipeline_num_layers"
                                                             : "decoder_last_pipeline_num_layers",
                         locate(p.decoder_first_pipeline_num_layers
                                    ? "parallelism.decoder_first_pipeline_num_layers"
                                    : "parallelism.decoder_last_pipeline_num_layers"),
                         kVirtualSize));
      }
      const int64_t accounted = (p.account_for_embedding_in_pipeline_split ? 1 : 0) +
                                (p.account_for_loss_in_pipeline_split ? 1 : 0);
      const int64_t counted = m.num_layers + accounted;
      const std::string counted_text =
          accounted == 0 ? fmt::format("model.num_layers = {}", m.num_layers)
                         : fmt::format(
                               "model.num_layers + {} (embedding/loss accounted in the "
                               "split) = {}",
                               accounted, counted);
      const int64_t per_pp_n = mul(pp, *layers_per_stage);
      if (counted % per_pp_n != 0) {
        fail(key,
             fmt::format("{}: {} is not divisible by "
                         "pipeline_model_parallel_size x num_layers_per_virtual_pipeline_stage = "
                         "{} x {} = {} (rule: v = num_layers / (PP x N) model chunks per "
                         "pipeline rank)",
                         *layers_per_stage, counted_text, pp, *layers_per_stage, per_pp_n));
      }
      p.virtual_pipeline_model_parallel_size = counted / per_pp_n;
    } else {
      p.virtual_pipeline_model_parallel_size = given_v.value_or(1);
    }

    // DP: derived from the world size, or checked when given.
    const int64_t tp = p.tensor_model_parallel_size;
    const int64_t cp = p.context_parallel_size;
    const int64_t model_parallel = mul(mul(tp, cp), pp);
    const bool divisible = c.num_gpus % model_parallel == 0;
    if (given_dp) {
      if (mul(model_parallel, *given_dp) != c.num_gpus) {
        const std::string derived =
            divisible ? fmt::format(" = {}", c.num_gpus / model_parallel) : " (not an integer)";
        const std::string fix =
            divisible ? fmt::format("set it to {}", c.num_gpus / model_parallel) : "fix it";
        fail("parallelism.data_parallel_size",
             fmt::format("{} disagrees with cluster.num_gpus / (tensor_model_parallel_size x "
                         "context_parallel_size x pipeline_model_parallel_size) = "
                         "{} / ({} x {} x {}){} (rule: num_gpus = TP x CP x PP x DP); {} or "
                         "remove it from the file (it is derived when not given); when "
                         "TP/CP/PP or num_gpus come from --set, also "
                         "--set parallelism.data_parallel_size=N (or =null to derive it)",
                         *given_dp, c.num_gpus, tp, cp, pp, derived, fix));
      }
      p.data_parallel_size = *given_dp;
    } else {
      if (!divisible) {
        fail("cluster.num_gpus",
             fmt::format("{} is not divisible by tensor_model_parallel_size x "
                         "context_parallel_size x pipeline_model_parallel_size = {} x {} x {} = {} "
                         "(rule: data_parallel_size = num_gpus / (TP x CP x PP))",
                         c.num_gpus, tp, cp, pp, model_parallel));
      }
      p.data_parallel_size = c.num_gpus / model_parallel;
    }
    return s;
  }

 private:
  /// Reads the keys of `section` that have a member in the schema (in table order), each with
  /// its type, minimum or allowed values; an absent key keeps the member's value. In a dense
  /// model a key that needs experts is an error before its value is looked at.
  void read_section(std::string_view section, Scenario& s, const fs::path& base_dir) const {
    for (const KeySpec& k : scenario_keys()) {
      if (k.section != section) continue;
      if (k.needs_experts && !s.model.is_moe()) {
        require_experts(std::string(k.section), std::string(k.key));
      }
      read_key(k, s, base_dir);
    }
  }

  /// Reads one key into its member (nothing for a key without one); a required key that is
  /// absent fails.
  void read_key(const KeySpec& k, Scenario& s, const fs::path& base_dir) const {
    const std::string sec(k.section);
    const std::string name(k.key);
    std::visit(
        [&](const auto& bind) {
          using B = std::decay_t<decltype(bind)>;
          if constexpr (std::is_same_v<B, std::monostate>) {
            // read by extract()'s own code
          } else if constexpr (std::is_same_v<B, EnumField>) {
            if (auto text = get_enum_text(sec, name, k.values, k.required)) bind.set(s, *text);
          } else if constexpr (std::is_same_v<B, FieldRef<int64_t>>) {
            if (auto v = get_int(sec, name, k.required, k.min)) bind(s) = *v;
          } else if constexpr (std::is_same_v<B, FieldRef<std::optional<int64_t>>>) {
            if (auto v = get_int(sec, name, false, k.min)) bind(s) = v;
          } else if constexpr (std::is_same_v<B, FieldRef<double>>) {
            if (auto v = get_number(sec, name, k.range)) bind(s) = *v;
          } else if constexpr (std::is_same_v<B, FieldRef<std::optional<double>>>) {
            if (auto v = get_number(sec, name, k.range)) bind(s) = v;
          } else if constexpr (std::is_same_v<B, FieldRef<bool>>) {
            if (auto v = get_bool(sec, name)) bind(s) = *v;
          } else if constexpr (std::is_same_v<B, FieldRef<std::string>>) {
            const std::optional<std::string> v =
                k.type == ValueType::kEnum ? get_enum_text(sec, name, k.values, k.required)
                                           : get_string(sec, name, k.required);
            if (v) bind(s) = *v;
          } else if constexpr (std::is_same_v<B, FieldRef<fs::path>>) {
            if (auto text = get_string(sec, name, k.required)) {
              bind(s) = resolve(k.path(), *text, base_dir);
            }
          } else {
            static_assert(std::is_same_v<B, FieldRef<std::optional<fs::path>>>);
            if (auto v = get_path(sec, name, base_dir)) bind(s) = v;
          }
        },
        k.bind);
  }

  /// True when `sec.key` is in the file or an override (a null value included).
  bool given(const std::string& sec, const std::string& key) const {
    return static_cast<bool>(value(sec, key));
  }

  /// Fails when `sec.key` is given (not null) in a model without routed experts.
  void require_experts(const std::string& sec, const std::string& key) const {
    const YAML::Node node = value(sec, key);
    if (node && !node.IsNull()) {
      fail(path_of(sec, key),
           "needs model.num_moe_experts (rule: MoE settings apply to a model with routed "
           "experts; this model is dense)");
    }
  }

  /// model.moe_layer_freq as one 0/1 per layer: an integer f >= 1 makes layer i an MoE layer
  /// when i % f == 0 (Megatron-LM's rule), a list gives every layer; absent = {} (all MoE).
  std::vector<int> get_moe_layer_pattern(int64_t num_layers) const {
    const std::string key = "model.moe_layer_freq";
    const YAML::Node node = value("model", "moe_layer_freq");
    if (!node || node.IsNull()) return {};
    const std::string allowed = fmt::format(
        "an integer f >= 1 (layer i is an MoE layer when i % f == 0) or a list of "
        "model.num_layers = {} entries, 0 (dense) or 1 (MoE), e.g. [1, 0, 1, 0]",
        num_layers);
    std::vector<int> pattern;
    if (node.IsSequence()) {
      if (static_cast<int64_t>(node.size()) != num_layers) {
        fail(key, fmt::format("a list of {} entries; expected {}", node.size(), allowed));
      }
      for (size_t i = 0; i < node.size(); ++i) {
        const YAML::Node e = node[i];
        const std::optional<int64_t> bit =
            e.IsScalar() && !is_string_typed(e) ? parse_integer_text(e.Scalar()) : std::nullopt;
        if (!bit || (*bit != 0 && *bit != 1)) {
          fail(key, fmt::format("entry {} (layer {}) is {}; expected 0 (dense) or 1 (MoE)", i, i,
                                describe(e)));
        }
        pattern.push_back(static_cast<int>(*bit));
      }
      return pattern;
    }
    std::optional<int64_t> freq;
    if (node.IsScalar() && !is_string_typed(node)) freq = parse_integer_text(node.Scalar());
    if (!freq || *freq < 1) {
      fail(key, fmt::format("expected {}, got {} (Megatron's Python expressions such as "
                            "([1]*3+[0]*1)*2 are written as the list)",
                            allowed, describe(node)));
    }
    for (int64_t i = 0; i < num_layers; ++i) pattern.push_back(i % *freq == 0 ? 1 : 0);
    return pattern;
  }

  /// cluster.what_if (absent or empty: no knobs). A straggler or degraded link needs both of
  /// its keys.
  WhatIf extract_what_if() const {
    WhatIf w;
    const std::string sec(kWhatIf);
    const YAML::Node node = node_at(sec);
    if (!node || node.IsNull()) return w;
    if (!node.IsMap()) {
      fail(sec, fmt::format("expected a mapping of what-if keys, got {} (allowed: {})",
                            describe(node), join(keys_of(kWhatIf))));
    }
    w.ib_bandwidth_scale = get_scale(sec, "ib_bandwidth_scale");
    w.nvlink_bandwidth_scale = get_scale(sec, "nvlink_bandwidth_scale");
    w.gpu_speed_scale = get_scale(sec, "gpu_speed_scale");
    // Range (>= 1) and the MoE model it needs: check_moe().
    w.moe_load_imbalance =
        get_number(sec, "moe_load_imbalance", key(fmt::format("{}.moe_load_imbalance", sec)).range);
    const std::string straggler(kStraggler);
    if (const YAML::Node n = node_at(straggler); n && !n.IsNull()) {
      Straggler st;
      st.rank = get_int(straggler, "rank", true, 0).value();
      st.compute_scale = get_scale(straggler, "compute_scale", true).value();
      w.straggler = st;
    }
    const std::string degraded(kDegradedLink);
    if (const YAML::Node n = node_at(degraded); n && !n.IsNull()) {
      DegradedLink dl;
      dl.name = get_string(degraded, "name");
      dl.bandwidth_scale = get_scale(degraded, "bandwidth_scale", true).value();
      w.degraded_link = dl;
    }
    return w;
  }

  /// cluster.reliability (absent: nullopt, the defaults): default_reliability() with the given
  /// keys applied; a component's rate 0 removes it. Ranges checked here, with the key's place.
  std::optional<ReliabilitySpec> extract_reliability() const {
    const std::string sec(kReliability);
    const YAML::Node node = node_at(sec);
    if (!node || node.IsNull()) return std::nullopt;
    if (!node.IsMap()) {
      fail(sec, fmt::format("expected a mapping of reliability keys, got {} (allowed: {})",
                            describe(node), join(keys_of(sec))));
    }
    ReliabilitySpec r = default_reliability();
    // Each key's range is its schema entry's (core/scenario_schema.cpp).
    auto number = [&](const std::string& s, const std::string& key, double& field) {
      const Interval& range = scenario_schema::key(path_of(s, key)).range;
      const std::optional<double> v = get_number(s, key, range);
      if (!v) return;
      if (!range.contains(*v))
        fail(path_of(s, key), fmt::format("must be {} (got {})", range.text(), *v));
      field = *v;
    };
    for (const std::string map : {std::string(kFailureRates), std::string(kWeibullShapes)}) {
      const YAML::Node m = node_at(map);
      if (!m || m.IsNull()) continue;
      if (!m.IsMap()) {
        fail(map, fmt::format("expected a mapping of components, got {} (allowed: {})", describe(m),
                              join(kFailureComponents)));
      }
      const bool rates = map == kFailureRates;
      for (const std::string_view component : kFailureComponents) {
        const std::string key(component);
        if (!value(map, key)) continue;
        if (rates) {
          double rate = 0;
          number(map, key, rate);
          if (rate == 0) {
            r.failures.erase(key);
          } else {
            r.failures[key].rate_per_1000_node_days = rate;
          }
        } else {
          double shape = 1.0;
          number(map, key, shape);
          if (r.failures.count(key) == 0) {
            fail(path_of(map, key),
                 fmt::format("component {} has no failure rate (failure_rates: {})", key,
                             rates_text(r)));
          }
          r.failures[key].weibull_shape = shape;
        }
      }
    }
    if (r.failures.empty()) {
      fail(std::string(kFailureRates), "every failure rate is 0: at least one must be > 0");
    }
    number(sec, "planned_interruptions_per_1000_node_days",
           r.planned_interruptions_per_1000_node_days);
    number(sec, "detection_s", r.detection_s);
    number(sec, "requeue_s", r.requeue_s);
    number(sec, "process_start_s", r.process_start_s);
    number(sec, "communicator_init_s", r.communicator_init_s);
    number(sec, "communicator_init_s_per_1000_gpus", r.communicator_init_s_per_1000_gpus);
    number(sec, "storage_write_GBps_per_node", r.storage_write_GBps_per_node);
    number(sec, "storage_read_GBps_per_node", r.storage_read_GBps_per_node);
    number(sec, "filesystem_GBps", r.filesystem_GBps);
    r.async_save = get_bool(sec, "async_save").value_or(r.async_save);
    number(sec, "async_save_stall_s", r.async_save_stall_s);
    r.spare_nodes = get_int(sec, "spare_nodes", false, 0).value_or(r.spare_nodes);
    number(sec, "node_repair_hours", r.node_repair_hours);
    number(sec, "straggler_rate_per_1000_node_days", r.straggler.rate_per_1000_node_days);
    number(sec, "straggler_duration_s", r.straggler.duration_s);
    number(sec, "straggler_slowdown", r.straggler_slowdown);
    number(sec, "link_down_rate_per_1000_node_days", r.link_down.rate_per_1000_node_days);
    number(sec, "link_down_duration_s", r.link_down.duration_s);
    number(sec, "nic_down_rate_per_1000_node_days", r.nic_down.rate_per_1000_node_days);
    number(sec, "nic_down_duration_s", r.nic_down.duration_s);
    number(sec, "link_flap_rate_per_1000_node_days", r.link_flap.rate_per_1000_node_days);
    number(sec, "link_flap_duration_s", r.link_flap.duration_s);
    number(sec, "link_flap_bandwidth_factor", r.link_flap_bandwidth_factor);
    return r;
  }

  /// "gpu 1.66, hbm 0.65, ..." (per 1000 node-days).
  static std::string rates_text(const ReliabilitySpec& r) {
    std::string out;
    for (const auto& [name, f] : r.failures) {
      out += fmt::format("{}{} {:.4g}", out.empty() ? "" : ", ", name, f.rate_per_1000_node_days);
    }
    return out;
  }
};

}  // namespace

Scenario parse_scenario(const std::string& yaml_text, const std::string& origin,
                        const std::filesystem::path& base_dir,
                        const std::vector<Override>& overrides) {
  const std::string where = origin.empty() ? "<scenario>" : origin;
  const YAML::Node root = load_single_yaml_document(yaml_text, where, "scenario file");
  Reader reader(where, root);
  Scenario s;
  try {
    reader.check_file();
    reader.apply(overrides);
    s = reader.extract(base_dir);
  } catch (const YAML::Exception& e) {  // not expected: every access is checked first
    throw ConfigError(fmt::format("{}: {}", where, e.what()));
  }
  check_rules(s, [&reader](std::string_view key) { return reader.locate(key); });
  return s;
}

Scenario load_scenario(const std::filesystem::path& file, const std::vector<Override>& overrides) {
  const std::string text = read_input_file(file, "scenario file", kMaxConfigFileBytes);
  Scenario s = parse_scenario(text, file.string(), file.parent_path(), overrides);
  s.source = file;
  return s;
}

}  // namespace traintwin
