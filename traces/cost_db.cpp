// The measured cost database: strict JSON reader, deterministic writer, lookups.
#include "traces/cost_db.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "core/input_file.hpp"
#include "core/posix_file.hpp"

namespace traintwin {
namespace {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;

constexpr const char* kFormat = "traintwin-costdb";
constexpr int64_t kVersion = 1;

const char* const kCollectiveOps[] = {"all_reduce", "all_gather", "reduce_scatter",
                                      "broadcast",  "all_to_all", "send_recv"};

// ---- ordering ------------------------------------------------------------------------------

/// (name, dtype name, tp, shape): the order of kernel rows in a file.
bool kernel_less(const KernelKey& a, const KernelKey& b) {
  if (const int c = a.name.compare(b.name); c != 0) return c < 0;
  if (const int c = std::string_view(to_string(a.dtype)).compare(to_string(b.dtype)); c != 0) {
    return c < 0;
  }
  return std::tie(a.tp, a.shape) < std::tie(b.tp, b.shape);
}

auto collective_order(const CollectiveMeasurement& c) {
  return std::tie(c.op, c.ranks, c.nodes, c.algorithm, c.bytes);
}

// ---- validation shared by the reader and add() ----------------------------------------------

/// Where a value sits, for messages: "<origin>: <where>.<key>".
struct Place {
  std::string origin;
  std::string where;  // "" at the top level, "kernels[3]", "device", ...

  std::string at(std::string_view key) const {
    return where.empty() ? std::string(key) : fmt::format("{}.{}", where, key);
  }
  [[noreturn]] void fail(std::string_view key, std::string_view problem) const {
    const std::string path = key.empty() ? where : at(key);
    if (path.empty()) throw CostDatabaseError(fmt::format("{}: {}", origin, problem));
    throw CostDatabaseError(fmt::format("{}: {}: {}", origin, path, problem));
  }
};

void check_positive(const Place& p, std::string_view key, double v) {
  if (!std::isfinite(v) || !(v > 0)) p.fail(key, fmt::format("must be > 0 (got {})", v));
}
/// A duration in microseconds: > 0 and at least 1 ns. No kernel or transfer is shorter (a GPU
/// clock tick is ~0.5 ns), and a value like 5e-324 us would make an iteration take 0 s.
constexpr double kShortestDurationUs = 1e-3;
void check_duration(const Place& p, std::string_view key, double v) {
  check_positive(p, key, v);
  if (v < kShortestDurationUs) {
    p.fail(key, fmt::format("must be at least {} us (1 ns; no kernel or transfer is shorter), "
                            "got {}", kShortestDurationUs, v));
  }
}
void check_non_negative(const Place& p, std::string_view key, double v) {
  if (!std::isfinite(v) || !(v >= 0)) p.fail(key, fmt::format("must be >= 0 (got {})", v));
}
void check_at_least(const Place& p, std::string_view key, int64_t v, int64_t min) {
  if (v < min) p.fail(key, fmt::format("must be >= {} (got {})", min, v));
}

void check_kernel(const KernelMeasurement& m, const Place& p) {
  if (m.key.name.empty()) p.fail("name", "must not be empty");
  if (m.key.shape.empty()) p.fail("shape", "must have at least one dimension");
  for (size_t i = 0; i < m.key.shape.size(); ++i) {
    check_at_least(p, fmt::format("shape[{}]", i), m.key.shape[i], 1);
  }
  check_at_least(p, "tp", m.key.tp, 1);
  check_duration(p, "median_us", m.median_us);
  check_duration(p, "p10_us", m.p10_us);
  check_duration(p, "p90_us", m.p90_us);
  if (m.p10_us > m.median_us) {
    p.fail("p10_us", fmt::format("{} > median_us {} (need p10_us <= median_us <= p90_us)", m.p10_us,
                                 m.median_us));
  }
  if (m.median_us > m.p90_us) {
    p.fail("p90_us", fmt::format("{} < median_us {} (need p10_us <= median_us <= p90_us)", m.p90_us,
                                 m.median_us));
  }
  if (m.mean_us) check_duration(p, "mean_us", *m.mean_us);
  check_at_least(p, "samples", m.samples, 1);
  check_non_negative(p, "flops", m.flops);
  check_non_negative(p, "bytes", m.bytes);
}

std::string allowed_ops() {
  std::string s;
  for (const char* op : kCollectiveOps) s += (s.empty() ? "" : ", ") + std::string(op);
  return s;
}

void check_collective(const CollectiveMeasurement& c, const Place& p) {
  if (std::find(std::begin(kCollectiveOps), std::end(kCollectiveOps), c.op) ==
      std::end(kCollectiveOps)) {
    p.fail("op", fmt::format("unknown collective \"{}\" (allowed: {})", c.op, allowed_ops()));
  }
  check_at_least(p, "bytes", c.bytes, 1);
  check_at_least(p, "ranks", c.ranks, 2);
  if (c.nodes) check_at_least(p, "nodes", *c.nodes, 1);
  if (c.algorithm && c.algorithm->empty()) p.fail("algorithm", "must not be empty");
  check_duration(p, "time_us", c.time_us);
  check_non_negative(p, "algbw_GBps", c.algbw_GBps);
  check_non_negative(p, "busbw_GBps", c.busbw_GBps);
}

void check_device(const CostDbDevice& d, const Place& p) {
  if (d.name.empty()) p.fail("name", "must not be empty");
  check_at_least(p, "sm_count", d.sm_count, 1);
  check_positive(p, "clock_mhz", d.clock_mhz);
  check_at_least(p, "memory_bytes", d.memory_bytes, 1);
  if (d.compute_capability && d.compute_capability->empty()) {
    p.fail("compute_capability", "must not be empty");
  }
  if (d.kind && *d.kind != "gpu" && *d.kind != "cpu") {
    p.fail("kind", fmt::format("unknown device kind \"{}\" (allowed: cpu, gpu)", *d.kind));
  }
  if (d.threads) check_at_least(p, "threads", *d.threads, 1);
}

// ---- reader ---------------------------------------------------------------------------------

std::string join(const std::vector<std::string_view>& keys) {
  std::string s;
  for (std::string_view k : keys) s += (s.empty() ? "" : ", ") + std::string(k);
  return s;
}

/// Checks that `v` is an object with every key of `required`, and no key outside
/// `required` + `optional`.
void check_object(const json& v, const Place& p, const std::vector<std::string_view>& required,
                  const std::vector<std::string_view>& optional = {}) {
  if (!v.is_object()) p.fail("", fmt::format("expected an object, got {}", v.type_name()));
  std::vector<std::string_view> allowed = required;
  allowed.insert(allowed.end(), optional.begin(), optional.end());
  std::sort(allowed.begin(), allowed.end());
  for (const auto& [key, value] : v.items()) {
    if (!std::binary_search(allowed.begin(), allowed.end(), std::string_view(key))) {
      p.fail("", fmt::format("unknown key \"{}\" (allowed: {})", key, join(allowed)));
    }
  }
  for (std::string_view key : required) {
    if (!v.contains(key)) p.fail("", fmt::format("missing key \"{}\"", key));
  }
}

std::string get_string(const json& obj, const Place& p, std::string_view key) {
  const json& v = obj.at(key);
  if (!v.is_string()) p.fail(key, fmt::format("expected a string, got {}", v.type_name()));
  return v.get<std::string>();
}

int64_t as_int(const json& v, const Place& p, std::string_view key) {
  if (!v.is_number_integer()) {
    p.fail(key, fmt::format("expected an integer, got {}",
                            v.is_number_float() ? "a fractional number" : v.type_name()));
  }
  if (v.is_number_unsigned() &&
      v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    p.fail(key, "integer out of range");
  }
  return v.get<int64_t>();
}

int64_t get_int(const json& obj, const Place& p, std::string_view key) {
  return as_int(obj.at(key), p, key);
}

double get_number(const json& obj, const Place& p, std::string_view key) {
  const json& v = obj.at(key);
  if (!v.is_number()) p.fail(key, fmt::format("expected a number, got {}", v.type_name()));
  return v.get<double>();
}

Precision get_dtype(const json& obj, const Place& p) {
  const std::string s = get_string(obj, p, "dtype");
  if (const std::optional<Precision> q = precision_from_string(s)) return *q;
  p.fail("dtype", fmt::format("unknown dtype \"{}\" (allowed: {})", s, precision_names()));
}

KernelMeasurement read_kernel(const json& v, const Place& p) {
  check_object(v, p,
               {"name", "shape", "dtype", "tp", "median_us", "p10_us", "p90_us", "samples", "flops",
                "bytes"},
               {"mean_us"});
  KernelMeasurement m;
  m.key.name = get_string(v, p, "name");
  const json& shape = v.at("shape");
  if (!shape.is_array()) {
    p.fail("shape", fmt::format("expected an array of integers, got {}", shape.type_name()));
  }
  for (size_t i = 0; i < shape.size(); ++i) {
    m.key.shape.push_back(as_int(shape[i], p, fmt::format("shape[{}]", i)));
  }
  m.key.dtype = get_dtype(v, p);
  m.key.tp = get_int(v, p, "tp");
  m.median_us = get_number(v, p, "median_us");
  m.p10_us = get_number(v, p, "p10_us");
  m.p90_us = get_number(v, p, "p90_us");
  if (v.contains("mean_us")) m.mean_us = get_number(v, p, "mean_us");
  m.samples = get_int(v, p, "samples");
  m.flops = get_number(v, p, "flops");
  m.bytes = get_number(v, p, "bytes");
  check_kernel(m, p);
  return m;
}

CollectiveMeasurement read_collective(const json& v, const Place& p) {
  check_object(v, p, {"op", "bytes", "ranks", "time_us", "algbw_GBps", "busbw_GBps"},
               {"nodes", "algorithm"});
  CollectiveMeasurement c;
  c.op = get_string(v, p, "op");
  c.bytes = get_int(v, p, "bytes");
  c.ranks = get_int(v, p, "ranks");
  if (v.contains("nodes")) c.nodes = get_int(v, p, "nodes");
  if (v.contains("algorithm")) c.algorithm = get_string(v, p, "algorithm");
  c.time_us = get_number(v, p, "time_us");
  c.algbw_GBps = get_number(v, p, "algbw_GBps");
  c.busbw_GBps = get_number(v, p, "busbw_GBps");
  check_collective(c, p);
  return c;
}

CostDbDevice read_device(const json& v, const Place& p) {
  check_object(v, p, {"name", "sm_count", "clock_mhz", "memory_bytes"},
               {"compute_capability", "kind", "threads"});
  CostDbDevice d;
  d.name = get_string(v, p, "name");
  d.sm_count = get_int(v, p, "sm_count");
  d.clock_mhz = get_number(v, p, "clock_mhz");
  d.memory_bytes = get_int(v, p, "memory_bytes");
  if (v.contains("compute_capability")) {
    d.compute_capability = get_string(v, p, "compute_capability");
  }
  if (v.contains("kind")) d.kind = get_string(v, p, "kind");
  if (v.contains("threads")) d.threads = get_int(v, p, "threads");
  check_device(d, p);
  return d;
}

CostDbVersions read_versions(const json& v, const Place& p) {
  check_object(v, p, {"driver", "cuda", "cublas", "nccl", "traintwin"}, {"blas", "cudnn"});
  CostDbVersions r{get_string(v, p, "driver"), get_string(v, p, "cuda"),
                   get_string(v, p, "cublas"), get_string(v, p, "nccl"),
                   get_string(v, p, "traintwin"), std::nullopt, std::nullopt};
  if (v.contains("blas")) r.blas = get_string(v, p, "blas");
  if (v.contains("cudnn")) r.cudnn = get_string(v, p, "cudnn");
  return r;
}

/// A SAX pass that finds a key twice in one JSON object (nlohmann::json keeps the last of
/// duplicate keys; a cost database must not have any): a stack of the open objects' keys, linear
/// in the text. (A parser callback did this before, but nlohmann's callback parser scans the
/// whole parent array after every element it ends, to remove discarded values: quadratic in
/// rows, 18 s for 200,000 kernel rows.)
class DuplicateKeyFinder : public nlohmann::json_sax<json> {
 public:
  explicit DuplicateKeyFinder(const std::string& origin) : origin_(origin) {}
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    open_.emplace_back();
    return true;
  }
  bool key(string_t& k) override {
    if (!open_.empty() && !open_.back().insert(k).second) {
      throw CostDatabaseError(fmt::format("{}: duplicate key \"{}\" in one JSON object", origin_, k));
    }
    return true;
  }
  bool end_object() override {
    if (!open_.empty()) open_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    throw CostDatabaseError(fmt::format("{}: not valid JSON: {}", origin_, e.what()));
  }

 private:
  const std::string& origin_;
  std::vector<std::unordered_set<std::string>> open_;
};

/// The document, refusing a key given twice in one object: the SAX pass above, then the parse.
json parse_rejecting_duplicate_keys(const std::string& text, const std::string& origin) {
  DuplicateKeyFinder finder(origin);
  json::sax_parse(text, &finder);
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw CostDatabaseError(fmt::format("{}: not valid JSON: {}", origin, e.what()));
  }
}

// ---- writer ---------------------------------------------------------------------------------

/// Integral values (up to 2^53, exact in a double) are written as integers, others in the
/// shortest form that reads back to the same double.
ordered_json number(double v) {
  if (std::isfinite(v) && v == std::trunc(v) && std::fabs(v) <= 9007199254740992.0) {
    return ordered_json(static_cast<int64_t>(v));
  }
  return ordered_json(v);
}

ordered_json kernel_json(const KernelMeasurement& m) {
  ordered_json o;
  o["name"] = m.key.name;
  o["shape"] = m.key.shape;
  o["dtype"] = to_string(m.key.dtype);
  o["tp"] = m.key.tp;
  o["median_us"] = number(m.median_us);
  o["p10_us"] = number(m.p10_us);
  o["p90_us"] = number(m.p90_us);
  if (m.mean_us) o["mean_us"] = number(*m.mean_us);
  o["samples"] = m.samples;
  o["flops"] = number(m.flops);
  o["bytes"] = number(m.bytes);
  return o;
}

ordered_json collective_json(const CollectiveMeasurement& c) {
  ordered_json o;
  o["op"] = c.op;
  o["bytes"] = c.bytes;
  o["ranks"] = c.ranks;
  if (c.nodes) o["nodes"] = *c.nodes;
  if (c.algorithm) o["algorithm"] = *c.algorithm;
  o["time_us"] = number(c.time_us);
  o["algbw_GBps"] = number(c.algbw_GBps);
  o["busbw_GBps"] = number(c.busbw_GBps);
  return o;
}

/// `name: [` then one compact row per line, then `]`.
template <typename T, typename F>
void write_rows(std::ostream& out, const char* name, const std::vector<T>& rows, F to_json) {
  out << "  \"" << name << "\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    out << (i ? ",\n    " : "\n    ") << to_json(rows[i]).dump();
  }
  out << (rows.empty() ? "]" : "\n  ]");
}

}  // namespace

// ---- CostDatabase -------------------------------------------------------------------------

bool CostDbDevice::same_device(const CostDbDevice& o) const {
  return name == o.name && kind.value_or("gpu") == o.kind.value_or("gpu") &&
         sm_count == o.sm_count && memory_bytes == o.memory_bytes && threads == o.threads;
}

CostDatabase::CostDatabase(CostDbDevice device, CostDbVersions versions)
    : device_(std::move(device)), versions_(std::move(versions)) {
  check_device(device_, Place{"CostDatabase", "device"});
}

CostDatabase CostDatabase::load(const std::filesystem::path& file) {
  std::string text;
  try {
    text = read_input_file(file, "cost database", kMaxDataFileBytes);
  } catch (const ConfigError& e) {
    throw CostDatabaseError(e.what());
  }
  return parse(text, file.string());
}

CostDatabase CostDatabase::parse(const std::string& json_text, const std::string& origin) {
  const json root = parse_rejecting_duplicate_keys(json_text, origin);
  const Place top{origin, ""};
  check_object(root, top, {"format", "version", "device", "versions", "kernels"}, {"collectives"});
  if (const std::string f = get_string(root, top, "format"); f != kFormat) {
    top.fail("format", fmt::format("expected \"{}\", got \"{}\"", kFormat, f));
  }
  if (const int64_t v = get_int(root, top, "version"); v != kVersion) {
    top.fail("version", fmt::format("unsupported version {} (supported: {})", v, kVersion));
  }
  CostDatabase db;
  db.device_ = read_device(root.at("device"), Place{origin, "device"});
  db.versions_ = read_versions(root.at("versions"), Place{origin, "versions"});

  const json& kernels = root.at("kernels");
  if (!kernels.is_array()) {
    top.fail("kernels", fmt::format("expected an array, got {}", kernels.type_name()));
  }
  std::unordered_map<KernelKey, size_t, KernelKeyHash> seen;
  for (size_t i = 0; i < kernels.size(); ++i) {
    const Place p{origin, fmt::format("kernels[{}]", i)};
    KernelMeasurement m = read_kernel(kernels[i], p);
    if (auto [it, inserted] = seen.try_emplace(m.key, i); !inserted) {
      p.fail("",
             fmt::format("duplicate kernel {} (also kernels[{}])", m.key.to_string(), it->second));
    }
    db.kernels_.push_back(std::move(m));
  }
  std::sort(db.kernels_.begin(), db.kernels_.end(),
            [](const KernelMeasurement& a, const KernelMeasurement& b) {
              return kernel_less(a.key, b.key);
            });

  if (root.contains("collectives")) {
    const json& colls = root.at("collectives");
    if (!colls.is_array()) {
      top.fail("collectives", fmt::format("expected an array, got {}", colls.type_name()));
    }
    for (size_t i = 0; i < colls.size(); ++i) {
      const Place p{origin, fmt::format("collectives[{}]", i)};
      db.collectives_.push_back(read_collective(colls[i], p));
    }
    // Duplicates found by sorting the rows' indices (n log n; a pairwise scan took minutes on a
    // million rows): equal neighbours name the later row and the earlier one.
    std::vector<size_t> order(db.collectives_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    const auto row = [&](size_t i) { return collective_order(db.collectives_[i]); };
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return row(a) < row(b); });
    for (size_t k = 1; k < order.size(); ++k) {
      if (row(order[k - 1]) == row(order[k])) {
        Place{origin, fmt::format("collectives[{}]", order[k])}.fail(
            "", fmt::format("duplicate of collectives[{}] (same op, ranks, nodes, algorithm and "
                            "bytes)",
                            order[k - 1]));
      }
    }
    std::sort(db.collectives_.begin(), db.collectives_.end(),
              [](const CollectiveMeasurement& a, const CollectiveMeasurement& b) {
                return collective_order(a) < collective_order(b);
              });
  }
  return db;
}

void CostDatabase::write(std::ostream& out) const {
  ordered_json device;
  device["name"] = device_.name;
  device["sm_count"] = device_.sm_count;
  device["clock_mhz"] = number(device_.clock_mhz);
  device["memory_bytes"] = device_.memory_bytes;
  if (device_.compute_capability) device["compute_capability"] = *device_.compute_capability;
  if (device_.kind) device["kind"] = *device_.kind;
  if (device_.threads) device["threads"] = *device_.threads;
  ordered_json versions;
  versions["driver"] = versions_.driver;
  versions["cuda"] = versions_.cuda;
  versions["cublas"] = versions_.cublas;
  versions["nccl"] = versions_.nccl;
  versions["traintwin"] = versions_.traintwin;
  if (versions_.blas) versions["blas"] = *versions_.blas;
  if (versions_.cudnn) versions["cudnn"] = *versions_.cudnn;

  out << "{\n";
  out << "  \"format\": " << ordered_json(kFormat).dump() << ",\n";
  out << "  \"version\": " << kVersion << ",\n";
  out << "  \"device\": " << device.dump() << ",\n";
  out << "  \"versions\": " << versions.dump() << ",\n";
  write_rows(out, "kernels", kernels_, kernel_json);
  if (!collectives_.empty()) {
    out << ",\n";
    write_rows(out, "collectives", collectives_, collective_json);
  }
  out << "\n}\n";
}

std::string CostDatabase::to_json() const {
  std::ostringstream out;
  write(out);
  return out.str();
}

void CostDatabase::save(const std::filesystem::path& file) const {
  try {
    AtomicFile out(file);
    write(out.stream());
    out.commit();
  } catch (const CostDatabaseError&) {
    throw;
  } catch (const Error& e) {
    throw CostDatabaseError(e.what());
  }
}

void CostDatabase::add(KernelMeasurement m) {
  check_kernel(m, Place{"CostDatabase::add", m.key.to_string()});
  auto it = std::lower_bound(
      kernels_.begin(), kernels_.end(), m.key,
      [](const KernelMeasurement& e, const KernelKey& k) { return kernel_less(e.key, k); });
  if (it != kernels_.end() && it->key == m.key) {
    throw CostDatabaseError(
        fmt::format("CostDatabase::add: duplicate kernel {}", m.key.to_string()));
  }
  kernels_.insert(it, std::move(m));
}

void CostDatabase::add(CollectiveMeasurement c) {
  check_collective(c, Place{"CostDatabase::add", "collective " + c.op});
  auto it = std::lower_bound(collectives_.begin(), collectives_.end(), c,
                             [](const CollectiveMeasurement& a, const CollectiveMeasurement& b) {
                               return collective_order(a) < collective_order(b);
                             });
  if (it != collectives_.end() && collective_order(*it) == collective_order(c)) {
    throw CostDatabaseError(
        fmt::format("CostDatabase::add: duplicate collective {} of {} bytes over {} ranks", c.op,
                    c.bytes, c.ranks));
  }
  collectives_.insert(it, std::move(c));
}

bool CostDatabase::erase(const KernelKey& key) {
  const KernelMeasurement* m = find(key);
  if (m == nullptr) return false;
  kernels_.erase(kernels_.begin() + (m - kernels_.data()));
  return true;
}

bool CostDatabase::erase(const CollectiveMeasurement& row) {
  auto it = std::find_if(collectives_.begin(), collectives_.end(),
                         [&](const CollectiveMeasurement& c) {
                           return collective_order(c) == collective_order(row);
                         });
  if (it == collectives_.end()) return false;
  collectives_.erase(it);
  return true;
}

const KernelMeasurement* CostDatabase::find(const KernelKey& key) const {
  auto it = std::lower_bound(
      kernels_.begin(), kernels_.end(), key,
      [](const KernelMeasurement& e, const KernelKey& k) { return kernel_less(e.key, k); });
  return it != kernels_.end() && it->key == key ? &*it : nullptr;
}

std::vector<const KernelMeasurement*> CostDatabase::nearest_shapes(const KernelKey& key,
                                                                   size_t max_count) const {
  // The family (same name, dtype, tp) is contiguous in the sorted vector and starts at the
  // smallest key of that prefix, the one with the empty shape.
  const KernelKey first{key.name, {}, key.dtype, key.tp};
  auto it = std::lower_bound(
      kernels_.begin(), kernels_.end(), first,
      [](const KernelMeasurement& e, const KernelKey& k) { return kernel_less(e.key, k); });
  std::vector<std::pair<double, const KernelMeasurement*>> found;
  for (; it != kernels_.end() && it->key.name == key.name && it->key.dtype == key.dtype &&
         it->key.tp == key.tp;
       ++it) {
    if (it->key.shape.size() != key.shape.size()) continue;
    found.emplace_back(shape_distance(it->key.shape, key.shape), &*it);
  }
  std::stable_sort(found.begin(), found.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  if (max_count != 0 && found.size() > max_count) found.resize(max_count);
  std::vector<const KernelMeasurement*> out;
  out.reserve(found.size());
  for (const auto& [distance, m] : found) out.push_back(m);
  return out;
}

double shape_distance(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  if (a.size() != b.size()) {
    throw InvalidArgument(
        fmt::format("shape_distance: shapes of {} and {} dimensions", a.size(), b.size()));
  }
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] < 1 || b[i] < 1) {
      throw InvalidArgument(
          fmt::format("shape_distance: dimension {} is < 1 ({} vs {})", i, a[i], b[i]));
    }
    const double d = std::log(static_cast<double>(a[i]) / static_cast<double>(b[i]));
    sum += d * d;
  }
  return std::sqrt(sum);
}

std::filesystem::path database_dir_beside(const std::filesystem::path& topologies_dir) {
  return std::filesystem::absolute(topologies_dir).parent_path() / "traces" / "db";
}

std::filesystem::path default_database_dir(const std::filesystem::path& topology_file) {
  return database_dir_beside(std::filesystem::absolute(topology_file).parent_path());
}

}  // namespace traintwin
