// The Chakra ET file format (sim/chakra_et_file.hpp). Next in the flow: sim/chakra_import.cpp.
#include "sim/chakra_et_file.hpp"

#include <fmt/format.h>
#include <google/protobuf/io/coded_stream.h>

#include <algorithm>
#include <climits>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "core/error.hpp"
#include "core/input_file.hpp"
#include "sim/chakra_import.hpp"

namespace traintwin::chakra {

namespace fs = std::filesystem;
namespace pb = ChakraProtoMsg;

namespace {

/// Each collective Chakra and traintwin both have, once: comm_type() and collective_of() read it
/// in opposite directions.
constexpr std::pair<CollectiveKind, pb::CollectiveCommType> kCollectives[] = {
    {CollectiveKind::kAllReduce, pb::ALL_REDUCE},
    {CollectiveKind::kAllGather, pb::ALL_GATHER},
    {CollectiveKind::kReduceScatter, pb::REDUCE_SCATTER},
    {CollectiveKind::kBroadcast, pb::BROADCAST},
    {CollectiveKind::kAllToAll, pb::ALL_TO_ALL},
};

/// Largest ET file read: 4 GiB (read whole, one rank at a time).
constexpr size_t kMaxEtFileBytes = size_t{4} << 30;

}  // namespace

pb::CollectiveCommType comm_type(CollectiveKind k) {
  for (const auto& [kind, type] : kCollectives) {
    if (kind == k) return type;
  }
  // The ring exchange: sends and recvs, not a collective.
  throw InvalidArgument(fmt::format("chakra: no Chakra collective for {}", to_string(k)));
}

std::optional<CollectiveKind> collective_of(int64_t type) {
  for (const auto& [kind, t] : kCollectives) {
    if (static_cast<int64_t>(t) == type) return kind;
  }
  return std::nullopt;
}

std::string replayed_comm_types() {
  std::string out;
  for (const auto& [kind, type] : kCollectives) {
    out += (out.empty() ? "" : ", ") + pb::CollectiveCommType_Name(type);
  }
  return out;
}

std::string node_ref(const pb::Node& n) { return fmt::format("node {} ({})", n.id(), n.name()); }

void refuse(const fs::path& file, const pb::Node& n, const std::string& what) {
  throw ChakraTraceError(fmt::format("{}: {}: {}", file.string(), node_ref(n), what));
}

const pb::AttributeProto* find_attr(const pb::Node& n, const std::string& name) {
  for (const pb::AttributeProto& a : n.attr()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

std::optional<int64_t> int_attr(const fs::path& file, const pb::Node& n, const std::string& name) {
  const pb::AttributeProto* a = find_attr(n, name);
  if (!a) return std::nullopt;
  switch (a->value_case()) {
    case pb::AttributeProto::kInt32Val:
      return a->int32_val();
    case pb::AttributeProto::kInt64Val:
      return a->int64_val();
    case pb::AttributeProto::kUint64Val:
      if (a->uint64_val() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        refuse(file, n, fmt::format("attribute {} = {} is too large", name, a->uint64_val()));
      }
      return static_cast<int64_t>(a->uint64_val());
    default:
      refuse(file, n, fmt::format("attribute {} is not an integer (int32, int64 or uint64)", name));
  }
}

int64_t required_int_attr(const fs::path& file, const pb::Node& n, const std::string& name) {
  const std::optional<int64_t> v = int_attr(file, n, name);
  if (!v) refuse(file, n, fmt::format("{} has no attribute {}", pb::NodeType_Name(n.type()), name));
  return *v;
}

std::optional<std::string> string_attr(const fs::path& file, const pb::Node& n,
                                       const std::string& name) {
  const pb::AttributeProto* a = find_attr(n, name);
  if (!a) return std::nullopt;
  if (a->value_case() != pb::AttributeProto::kStringVal) {
    refuse(file, n, fmt::format("attribute {} is not a string", name));
  }
  return a->string_val();
}


EtFile read_et_file(const fs::path& file) {
  const std::string data = read_input_file(file, "Chakra ET file", kMaxEtFileBytes);
  EtFile et;
  size_t pos = 0;
  bool first = true;
  while (pos < data.size()) {
    const size_t left = data.size() - pos;
    google::protobuf::io::CodedInputStream coded(
        reinterpret_cast<const uint8_t*>(data.data() + pos),
        static_cast<int>(std::min<size_t>(left, INT_MAX)));
    uint32_t size = 0;
    if (!coded.ReadVarint32(&size)) {
      throw ChakraTraceError(fmt::format(
          "{}: truncated at byte {}: no message length (a Chakra ET file is length-delimited "
          "messages)",
          file.string(), pos));
    }
    const auto header = static_cast<size_t>(coded.CurrentPosition());
    if (size > left - header) {
      throw ChakraTraceError(
          fmt::format("{}: truncated: the message at byte {} has {} bytes, the "
                      "file only {} more",
                      file.string(), pos, size, left - header));
    }
    const char* body = data.data() + pos + header;
    if (first) {
      if (!et.meta.ParseFromArray(body, static_cast<int>(size))) {
        throw ChakraTraceError(fmt::format(
            "{}: the first message is not a Chakra GlobalMetadata (et_def.proto)", file.string()));
      }
      first = false;
    } else {
      pb::Node& n = et.nodes.emplace_back();
      if (!n.ParseFromArray(body, static_cast<int>(size))) {
        throw ChakraTraceError(fmt::format(
            "{}: the message at byte {} is not a Chakra Node (et_def.proto)", file.string(), pos));
      }
    }
    pos += header + size;
  }
  if (first) throw ChakraTraceError(fmt::format("{}: empty (no GlobalMetadata)", file.string()));
  return et;
}

std::pair<std::string, std::vector<fs::path>> find_files(const fs::path& where) {
  fs::path dir = where;
  std::string wanted;
  if (!fs::is_directory(where)) {
    dir = where.parent_path().empty() ? fs::path(".") : where.parent_path();
    wanted = where.filename().string();
    if (!fs::is_directory(dir)) {
      throw ChakraTraceError(fmt::format(
          "{}: no such folder (a Chakra trace is a folder of <name>.<rank>.et files, or the prefix "
          "<folder>/<name>)",
          where.string()));
    }
  }
  static const std::regex et_name(R"((.+)\.(\d+)\.et)");
  std::map<std::string, std::map<int64_t, fs::path>> by_name;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string file = e.path().filename().string();
    std::smatch m;
    if (!std::regex_match(file, m, et_name)) continue;
    if (!wanted.empty() && m[1].str() != wanted) continue;
    if (m[2].str().size() > 9) continue;  // no rank
    by_name[m[1].str()][std::stoll(m[2].str())] = e.path();
  }
  if (by_name.empty()) {
    throw ChakraTraceError(fmt::format("{}: no Chakra ET files (<name>.<rank>.et{})",
                                       where.string(), wanted.empty() ? "" : ", name " + wanted));
  }
  if (by_name.size() > 1) {
    std::string names;
    for (const auto& [n, _] : by_name) names += (names.empty() ? "" : ", ") + n;
    throw ChakraTraceError(fmt::format("{}: ET files of several traces ({}): name one as {}/<name>",
                                       where.string(), names, dir.string()));
  }
  auto& [name, ranks] = *by_name.begin();
  std::vector<fs::path> files;
  for (int64_t r = 0; r < static_cast<int64_t>(ranks.size()); ++r) {
    auto it = ranks.find(r);
    if (it == ranks.end()) {
      throw ChakraTraceError(
          fmt::format("{}: rank {} is missing ({} not found; ranks go from 0 to "
                      "the number of files - 1)",
                      where.string(), r, (dir / fmt::format("{}.{}.et", name, r)).string()));
    }
    files.push_back(it->second);
  }
  return {name, files};
}

std::map<std::string, std::vector<int64_t>> read_comm_groups(const fs::path& file, int64_t world) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_input_file(file, "Chakra comm groups JSON", kMaxDataFileBytes));
  } catch (const nlohmann::json::exception& e) {
    throw ChakraTraceError(fmt::format("{}: not JSON: {}", file.string(), e.what()));
  }
  if (!j.is_object()) {
    throw ChakraTraceError(
        fmt::format("{}: not a JSON object {{\"<pg_name>\": [ranks...], ...}}", file.string()));
  }
  std::map<std::string, std::vector<int64_t>> groups;
  for (const auto& [pg, members] : j.items()) {
    std::vector<int64_t> m;
    if (members.is_array()) {
      for (const nlohmann::json& r : members) {
        if (!r.is_number_integer() || r.get<int64_t>() < 0 || r.get<int64_t>() >= world) {
          m.clear();
          break;
        }
        m.push_back(r.get<int64_t>());
      }
    }
    std::sort(m.begin(), m.end());
    if (m.empty() || std::adjacent_find(m.begin(), m.end()) != m.end()) {
      throw ChakraTraceError(fmt::format("{}: key \"{}\": not a list of distinct ranks in [0, {})",
                                         file.string(), pg, world));
    }
    groups.emplace(pg, std::move(m));
  }
  return groups;
}

}  // namespace traintwin::chakra
