// The pipeline-split axis of a sweep (sim/sweep_split.hpp): the search's model, the layouts and
// the configurations they add. Next in the flow: run_sweep (sim/sweep.hpp) ranks them.
#include "sim/sweep_split.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <utility>

#include "core/error.hpp"
#include "core/pipeline_split.hpp"
#include "core/rank_layout.hpp"
#include "sim/analytical.hpp"

namespace traintwin {

PipelineSplitAxis parse_pipeline_split_axis(const std::string& flag, const std::string& text) {
  PipelineSplitAxis axis;
  if (text == "auto") {
    axis.automatic = true;
    return axis;
  }
  size_t start = 0;
  while (true) {
    const size_t end = text.find(';', start);
    std::string item = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (item.empty()) {
      throw ConfigError(fmt::format(
          "{}: '{}' has an empty item (allowed: auto, or a ';'-separated list of Megatron-Core "
          "pipeline layouts such as \"E,t*5|t*19,L\")",
          flag, text));
    }
    if (item == "auto") {
      throw ConfigError(fmt::format("{}: 'auto' is a value of its own, not an item of a list of "
                                    "layouts (got '{}')",
                                    flag, text));
    }
    if (std::find(axis.layouts.begin(), axis.layouts.end(), item) != axis.layouts.end()) {
      throw ConfigError(fmt::format("{}: layout \"{}\" is listed twice", flag, item));
    }
    axis.layouts.push_back(std::move(item));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return axis;
}

std::vector<int64_t> balanced_layers(const std::vector<StageCost>& stages, int64_t num_layers) {
  if (stages.empty()) throw InvalidArgument("balanced_layers: no stage");
  if (num_layers < 0) {
    throw InvalidArgument(fmt::format("balanced_layers: num_layers {} < 0", num_layers));
  }
  for (const StageCost& c : stages) {
    if (!(c.per_layer_s > 0)) {
      throw InvalidArgument(fmt::format("balanced_layers: per_layer_s {} <= 0", c.per_layer_s));
    }
  }
  // Water-filling: each layer to the stage whose time after taking it is smallest. The largest
  // stage time is then minimal (an exchange argument: moving any layer from the stage that ends
  // last to another cannot end before it).
  std::vector<int64_t> layers(stages.size(), 0);
  for (int64_t l = 0; l < num_layers; ++l) {
    size_t best = 0;
    double best_s = 0;
    for (size_t i = 0; i < stages.size(); ++i) {
      const double t =
          stages[i].fixed_s + static_cast<double>(layers[i] + 1) * stages[i].per_layer_s;
      if (i == 0 || t < best_s) {
        best = i;
        best_s = t;
      }
    }
    ++layers[best];
  }
  return layers;
}

namespace {

/// `x` (>= 0, summing to `total` up to rounding) as integers summing to `total`: floors, then
/// one more to the largest remainders (ties: the lower stage).
std::vector<int64_t> round_to_sum(const std::vector<double>& x, int64_t total) {
  std::vector<int64_t> out(x.size());
  std::vector<std::pair<double, size_t>> rest;
  int64_t sum = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = std::max(0.0, x[i]);
    out[i] = static_cast<int64_t>(std::floor(v + 1e-9));
    sum += out[i];
    rest.emplace_back(v - static_cast<double>(out[i]), i);
  }
  std::stable_sort(rest.begin(), rest.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t k = 0; sum < total; k = (k + 1) % rest.size()) {
    ++out[rest[k].second];
    ++sum;
  }
  // (Clamping at 0 can overshoot: take back from the largest stages.)
  while (sum > total) {
    auto it = std::max_element(out.begin(), out.end());
    --*it;
    --sum;
  }
  return out;
}

}  // namespace

std::vector<std::vector<int64_t>> split_family(const std::vector<int64_t>& even,
                                               const std::vector<int64_t>& balanced) {
  if (even.size() != balanced.size() || even.empty()) {
    throw InvalidArgument(fmt::format("split_family: {} even and {} balanced stages", even.size(),
                                      balanced.size()));
  }
  const int64_t total = std::accumulate(even.begin(), even.end(), int64_t{0});
  if (std::accumulate(balanced.begin(), balanced.end(), int64_t{0}) != total) {
    throw InvalidArgument("split_family: the even and balanced splits hold different layer counts");
  }
  std::vector<std::vector<int64_t>> out;
  std::set<std::vector<int64_t>> seen;
  constexpr int kSteps = 8;        // t in steps of 1/8
  constexpr int kLast = 3 * kSteps / 2;  // up to t = 3/2
  for (int k = 0; k <= kLast; ++k) {
    const double t = static_cast<double>(k) / kSteps;
    std::vector<double> x(even.size());
    for (size_t i = 0; i < even.size(); ++i) {
      x[i] = static_cast<double>(even[i]) +
             t * static_cast<double>(balanced[i] - even[i]);
    }
    std::vector<int64_t> split = round_to_sum(x, total);
    if (seen.insert(split).second) out.push_back(std::move(split));
  }
  return out;
}

std::string layout_of_layers(const std::vector<int64_t>& layers, int64_t v) {
  if (layers.empty() || v < 1) {
    throw InvalidArgument(
        fmt::format("layout_of_layers: {} stages, v {} (need >= 1 of each)", layers.size(), v));
  }
  const auto p = static_cast<int64_t>(layers.size());
  std::string out;
  for (int64_t c = 0; c < v; ++c) {
    for (int64_t r = 0; r < p; ++r) {
      const int64_t n = layers[static_cast<size_t>(r)];
      if (n < 0) throw InvalidArgument(fmt::format("layout_of_layers: stage {} holds {} layers", r, n));
      const int64_t in_chunk = n / v + (c < n % v ? 1 : 0);
      std::vector<std::string> items;
      if (c == 0 && r == 0) items.emplace_back("E");
      if (in_chunk > 0) items.push_back(fmt::format("t*{}", in_chunk));
      if (c == v - 1 && r == p - 1) items.emplace_back("L");
      if (!out.empty() || c > 0 || r > 0) out += '|';
      out += fmt::format("{}", fmt::join(items, ","));
    }
  }
  return out;
}

std::vector<int64_t> stage_layers(const Scenario& s) {
  std::vector<int64_t> out;
  for (int64_t r = 0; r < s.parallel.pipeline_model_parallel_size; ++r) {
    out.push_back(layers_on_stage(s, r));
  }
  return out;
}

StageCostFunction estimated_stage_costs(const TopologySpec& topo,
                                        std::shared_ptr<const CostModel> costs) {
  return [&topo, costs](const Scenario& s) -> std::vector<StageCost> {
    IterationMetrics m;
    try {
      m = estimate(s, topo, *costs);
    } catch (const Error&) {
      return {};
    }
    const int64_t p = s.parallel.pipeline_model_parallel_size;
    if (static_cast<int64_t>(m.per_stage.size()) != p) return {};
    const std::vector<int64_t> layers = stage_layers(s);
    // Node group of each stage: that of its first rank (TP = CP = DP = 0).
    const RankLayout layout = layout_of(s);
    std::vector<size_t> group(static_cast<size_t>(p));
    for (int64_t r = 0; r < p; ++r) {
      group[static_cast<size_t>(r)] =
          node_group_index(topo, place_rank(topo, layout.rank({0, 0, 0, r})).node);
    }
    std::vector<StageCost> out(static_cast<size_t>(p));
    for (int64_t r = 0; r < p; ++r) {
      const auto i = static_cast<size_t>(r);
      if (layers[i] < 1) return {};
      // A middle stage of the same node group, else the stage itself.
      size_t ref = i;
      for (int64_t q = 1; q + 1 < p; ++q) {
        const auto j = static_cast<size_t>(q);
        if (group[j] == group[i] && layers[j] > 0) {
          ref = j;
          break;
        }
      }
      out[i].per_layer_s = m.per_stage[ref].compute_s / static_cast<double>(layers[ref]);
      out[i].fixed_s = m.per_stage[i].compute_s - static_cast<double>(layers[i]) * out[i].per_layer_s;
      if (!(out[i].per_layer_s > 0)) return {};
    }
    return out;
  };
}

std::vector<SweepConfiguration> add_pipeline_splits(std::vector<SweepConfiguration> configurations,
                                                    const PipelineSplitAxis& axis,
                                                    const StageCostFunction& costs,
                                                    double gpu_memory_bytes,
                                                    const StageMemoryCapacity& stage_capacity,
                                                    int64_t* uncosted) {
  if (uncosted != nullptr) *uncosted = 0;
  if (axis.empty()) return configurations;
  const size_t n = configurations.size();
  int64_t next = 0;
  for (const SweepConfiguration& c : configurations) next = std::max(next, c.index + 1);
  for (size_t i = 0; i < n; ++i) {
    if (!configurations[i].valid) continue;
    const SweepConfiguration base = configurations[i];  // (push_back below moves the vector)
    const Scenario& s = base.scenario;
    const ParallelConfig& par = s.parallel;
    if (par.pipeline_model_parallel_size < 2) continue;
    if (uneven_pipeline_split(par)) {
      const char* key = !par.pipeline_model_parallel_layout.empty()
                            ? "parallelism.pipeline_model_parallel_layout"
                        : par.decoder_first_pipeline_num_layers
                            ? "parallelism.decoder_first_pipeline_num_layers"
                        : par.decoder_last_pipeline_num_layers
                            ? "parallelism.decoder_last_pipeline_num_layers"
                        : par.account_for_embedding_in_pipeline_split
                            ? "parallelism.account_for_embedding_in_pipeline_split"
                            : "parallelism.account_for_loss_in_pipeline_split";
      throw ConfigError(fmt::format(
          "--pipeline-split: the base scenario sets {} (an uneven split of its own); the "
          "searched layouts (pipeline_model_parallel_layout) cannot be combined with it: remove "
          "it to search the split",
          key));
    }
    std::vector<std::string> layouts = axis.layouts;
    if (axis.automatic) {
      const std::vector<StageCost> stage_costs = costs ? costs(s) : std::vector<StageCost>{};
      if (stage_costs.size() != static_cast<size_t>(par.pipeline_model_parallel_size)) {
        if (uncosted != nullptr) ++*uncosted;
        continue;
      }
      const std::vector<int64_t> even = stage_layers(s);
      const auto family = split_family(even, balanced_layers(stage_costs, s.model.num_layers));
      for (size_t k = 1; k < family.size(); ++k) {
        layouts.push_back(layout_of_layers(family[k], par.virtual_pipeline_model_parallel_size));
      }
    }
    for (const std::string& layout : layouts) {
      SweepConfiguration c = base;
      c.index = next++;
      c.evaluates_as = -1;  // (another split than its base's twin holds)
      c.scenario.parallel.pipeline_model_parallel_layout = layout;
      check_configuration(c, gpu_memory_bytes, stage_capacity);
      configurations.push_back(std::move(c));
    }
  }
  return configurations;
}

}  // namespace traintwin
