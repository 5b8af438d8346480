// Cost-database rows from raw timings; see timeline_costs.hpp.
#include "traces/timeline_costs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.hpp"

namespace traintwin {
namespace {

double percentile(const std::vector<double>& sorted, double q) {
  // Nearest rank: the smallest value with at least q of the samples at or below it.
  const auto n = static_cast<double>(sorted.size());
  const auto idx = static_cast<size_t>(std::max(0.0, std::ceil(q * n) - 1.0));
  return sorted[std::min(idx, sorted.size() - 1)];
}

}  // namespace

KernelMeasurement measurement_from_samples(const Kernel& kernel, std::vector<double> samples_us) {
  if (samples_us.empty()) throw InvalidArgument("profile: no samples of " + kernel.key.to_string());
  std::sort(samples_us.begin(), samples_us.end());
  KernelMeasurement m;
  m.key = kernel.key;
  m.median_us = percentile(samples_us, 0.5);
  m.p10_us = percentile(samples_us, 0.1);
  m.p90_us = percentile(samples_us, 0.9);
  // A timer tick below the clock's resolution reads 0; a row needs times > 0.
  constexpr double kFloorUs = 1e-3;
  m.median_us = std::max(m.median_us, kFloorUs);
  m.p10_us = std::clamp(m.p10_us, kFloorUs, m.median_us);
  m.p90_us = std::max(m.p90_us, m.median_us);
  double sum = 0;
  for (double x : samples_us) sum += x;
  m.mean_us = std::max(sum / static_cast<double>(samples_us.size()), kFloorUs);
  m.samples = static_cast<int64_t>(samples_us.size());
  m.flops = kernel.flops;
  m.bytes = kernel.bytes;
  return m;
}

std::vector<KernelMeasurement> kernel_rows_from_timeline(const Timeline& t,
                                                         const std::string& origin) {
  const std::string& file = origin.empty() ? t.name : origin;
  struct Samples {
    Kernel kernel;
    std::vector<double> us;
  };
  std::map<std::string, Samples> by_key;
  for (size_t i = 0; i < t.events.size(); ++i) {
    const auto it = t.events[i].args.find("kernels");
    if (it == t.events[i].args.end()) continue;
    const std::string where = file + ": event " + std::to_string(i) + " (" + t.events[i].name +
                              "): args.kernels: ";
    try {
      for (const auto& j : nlohmann::json::parse(it->second)) {
        Kernel k;
        k.key.name = j.at("name").get<std::string>();
        k.key.shape = j.at("shape").get<std::vector<int64_t>>();
        const std::string dtype = j.at("dtype").get<std::string>();
        // Every kernel dtype a Program keys (the cuda backend's TF32 and bf16-arithmetic GEMMs
        // too, core/lowering_kernels.hpp).
        const std::optional<Precision> p = precision_from_string(dtype);
        if (!p) throw Error("unknown dtype \"" + dtype + "\" (allowed: " + precision_names() + ")");
        k.key.dtype = *p;
        k.key.tp = j.at("tp").get<int64_t>();
        k.flops = j.at("flops").get<double>();
        k.bytes = j.at("bytes").get<double>();
        Samples& s = by_key[k.key.to_string()];
        s.kernel = k;
        const double us = j.at("us").get<double>();
        if (!std::isfinite(us) || us <= 0) {
          throw Error(fmt::format("{}: us must be a duration > 0 (microseconds), got {}",
                                  k.key.to_string(), us));
        }
        s.us.push_back(us);
      }
    } catch (const nlohmann::json::exception& e) {
      throw Error(where + e.what());
    } catch (const Error& e) {
      throw Error(where + e.what());
    }
  }
  if (by_key.empty()) {
    throw Error(file + ": no event has kernel durations (args.kernels): not a live timeline "
                "written by traintwin train --timeline or validate --live --timeline");
  }
  std::vector<KernelMeasurement> rows;
  for (auto& [key, s] : by_key) rows.push_back(measurement_from_samples(s.kernel, std::move(s.us)));
  return rows;
}

}  // namespace traintwin
