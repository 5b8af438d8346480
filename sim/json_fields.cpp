#include "sim/json_fields.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"

namespace traintwin {

JsonPlace JsonPlace::key(const std::string& k) const {
  return {origin, path.empty() ? k : path + "." + k};
}

JsonPlace JsonPlace::index(size_t i) const { return {origin, fmt::format("{}[{}]", path, i)}; }

std::string JsonPlace::shown() const { return path.empty() ? "(top)" : path; }

namespace {

[[noreturn]] void wrong_type(const nlohmann::ordered_json& v, const JsonPlace& where,
                             const std::string& expected) {
  throw Error(
      fmt::format("{}: '{}' must be {}, got {}", where.origin, where.shown(), expected, v.dump()));
}

}  // namespace

const nlohmann::ordered_json& json_at(const nlohmann::ordered_json& j, const std::string& key,
                                      const JsonPlace& where) {
  if (!j.is_object()) {
    throw Error(fmt::format("{}: '{}' is not an object", where.origin, where.shown()));
  }
  const auto it = j.find(key);
  if (it == j.end()) {
    throw Error(fmt::format("{}: missing key '{}'", where.origin, where.key(key).path));
  }
  return *it;
}

double json_number(const nlohmann::ordered_json& j, const std::string& key,
                   const JsonPlace& where) {
  const nlohmann::ordered_json& v = json_at(j, key, where);
  if (!v.is_number()) wrong_type(v, where.key(key), "a number");
  return v.get<double>();
}

int64_t json_integer(const nlohmann::ordered_json& j, const std::string& key,
                     const JsonPlace& where) {
  const nlohmann::ordered_json& v = json_at(j, key, where);
  if (!v.is_number_integer()) wrong_type(v, where.key(key), "an integer");
  return v.get<int64_t>();
}

std::optional<int64_t> json_optional_integer(const nlohmann::ordered_json& j,
                                             const std::string& key, const JsonPlace& where) {
  if (json_at(j, key, where).is_null()) return std::nullopt;
  return json_integer(j, key, where);
}

bool json_bool(const nlohmann::ordered_json& j, const std::string& key, const JsonPlace& where) {
  const nlohmann::ordered_json& v = json_at(j, key, where);
  if (!v.is_boolean()) wrong_type(v, where.key(key), "true or false");
  return v.get<bool>();
}

std::string json_string(const nlohmann::ordered_json& j, const std::string& key,
                        const JsonPlace& where) {
  const nlohmann::ordered_json& v = json_at(j, key, where);
  if (!v.is_string()) wrong_type(v, where.key(key), "a string");
  return v.get<std::string>();
}

std::optional<std::string> json_optional_string(const nlohmann::ordered_json& j,
                                                const std::string& key, const JsonPlace& where) {
  if (json_at(j, key, where).is_null()) return std::nullopt;
  return json_string(j, key, where);
}

const nlohmann::ordered_json& json_array(const nlohmann::ordered_json& j, const std::string& key,
                                         const JsonPlace& where) {
  const nlohmann::ordered_json& v = json_at(j, key, where);
  if (!v.is_array()) wrong_type(v, where.key(key), "an array");
  return v;
}

const nlohmann::ordered_json& json_object(const nlohmann::ordered_json& j, const std::string& key,
                                          const JsonPlace& where) {
  const nlohmann::ordered_json& v = json_at(j, key, where);
  if (!v.is_object()) wrong_type(v, where.key(key), "an object");
  return v;
}

std::vector<double> json_numbers(const nlohmann::ordered_json& j, const std::string& key,
                                 const JsonPlace& where) {
  const nlohmann::ordered_json& a = json_array(j, key, where);
  std::vector<double> out;
  out.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].is_number()) wrong_type(a[i], where.key(key).index(i), "a number");
    out.push_back(a[i].get<double>());
  }
  return out;
}

std::vector<std::string> json_strings(const nlohmann::ordered_json& j, const std::string& key,
                                      const JsonPlace& where) {
  const nlohmann::ordered_json& a = json_array(j, key, where);
  std::vector<std::string> out;
  out.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].is_string()) wrong_type(a[i], where.key(key).index(i), "a string");
    out.push_back(a[i].get<std::string>());
  }
  return out;
}

void json_not_allowed(const JsonPlace& where, const std::string& text,
                      std::span<const std::string_view> allowed) {
  throw Error(fmt::format("{}: '{}' is \"{}\"; allowed: {}", where.origin, where.shown(), text,
                          fmt::join(allowed, ", ")));
}

void check_schema_version(const nlohmann::ordered_json& file, const std::string& origin,
                          int64_t reads, const std::string& how_to_rewrite) {
  if (!file.is_object()) {
    throw Error(
        fmt::format("{}: must be a JSON object with \"schema_version\": {}{} (this "
                    "traintwin reads schema_version {} only; {})",
                    origin, reads,
                    file.is_array() ? ", not an array (a traintwin older than schema versions "
                                      "wrote one)"
                                    : "",
                    reads, how_to_rewrite));
  }
  const auto it = file.find("schema_version");
  if (it == file.end()) {
    throw Error(
        fmt::format("{}: no \"schema_version\": written by a traintwin older than "
                    "schema versions; this traintwin reads schema_version {} only ({})",
                    origin, reads, how_to_rewrite));
  }
  if (!it->is_number_integer()) {
    throw Error(
        fmt::format("{}: \"schema_version\" must be an integer, got {} (this traintwin "
                    "reads schema_version {})",
                    origin, it->dump(), reads));
  }
  const auto found = it->get<int64_t>();
  if (found != reads) {
    throw Error(
        fmt::format("{}: schema_version {} is not one this traintwin reads (it reads "
                    "schema_version {} only{}; {})",
                    origin, found, reads,
                    found > reads ? ": the file is from a newer traintwin" : "", how_to_rewrite));
  }
}

}  // namespace traintwin
