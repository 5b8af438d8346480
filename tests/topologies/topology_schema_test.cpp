// Tests of topologies/topology_schema: the generated key reference in topologies/README.md is
// current, every key of the schema is given by a shipped topology file, each example value parses
// as its type, and the loader's allowed keys are the schema's.
#include "topologies/topology_schema.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <set>
#include <string>

#include "core/input_file.hpp"
#include "core/error.hpp"
#include "core/units.hpp"
#include "tests/config_error_of.hpp"
#include "topologies/topology.hpp"

namespace traintwin {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;
using topology_schema::KeySpec;
using topology_schema::ValueType;

const fs::path kTopologies = fs::path(TRAINTWIN_SOURCE_DIR) / "topologies";

/// The whole file (core/input_file.hpp's reader: a missing or oversized file throws).
std::string read_text(const fs::path& path) {
  return read_input_file(path, "test file", kMaxConfigFileBytes);
}

std::string path_of(const KeySpec& k) {
  return k.section.empty() ? std::string(k.key) : std::string(k.section) + "." + std::string(k.key);
}

/// Every dotted key path a YAML mapping gives, nested mappings and the items of lists of
/// mappings (node_groups) included.
void collect(const YAML::Node& n, const std::string& prefix, std::set<std::string>& out) {
  for (auto it = n.begin(); it != n.end(); ++it) {
    const std::string path = prefix.empty() ? it->first.Scalar() : prefix + "." + it->first.Scalar();
    out.insert(path);
    if (it->second.IsMap()) collect(it->second, path, out);
    if (it->second.IsSequence()) {
      for (const YAML::Node& item : it->second) {
        if (item.IsMap()) collect(item, path, out);
      }
    }
  }
}

TEST(TopologySchema, ReadmeKeyReferenceIsCurrent) {
  const fs::path readme = kTopologies / "README.md";
  const std::string text = read_text(readme);
  ASSERT_FALSE(text.empty()) << readme;
  EXPECT_EQ(with_topology_key_reference(text), text)
      << "topologies/README.md's key reference is stale; regenerate it with "
         "build/traintwin keys --topology --readme topologies/README.md";
}

// The schema lists no key that no shipped file gives, and its examples are valid values.
TEST(TopologySchema, EveryKeyIsGivenByAShippedFileAndItsExampleParses) {
  std::set<std::string> given;
  for (const auto& entry : fs::directory_iterator(kTopologies)) {
    if (entry.path().extension() != ".yaml") continue;
    collect(YAML::LoadFile(entry.path().string()), "", given);
  }
  for (const KeySpec& k : topology_schema::keys()) {
    const std::string path = path_of(k);
    EXPECT_EQ(given.count(path), 1u) << path << " is in the schema but in no shipped file";
    const std::string ex(k.example);
    switch (k.type) {
      case ValueType::kBytes: EXPECT_GT(parse_bytes(ex, path), 0) << path; break;
      case ValueType::kBandwidth: EXPECT_GT(parse_bandwidth_Bps(ex, path), 0) << path; break;
      case ValueType::kTime: EXPECT_GT(parse_time_s(ex, path), 0) << path; break;
      case ValueType::kFlopRate: EXPECT_GT(parse_flop_rate_FLOPs(ex, path), 0) << path; break;
      case ValueType::kInteger: EXPECT_GE(std::stoll(ex), k.min) << path; break;
      case ValueType::kBoolean: EXPECT_TRUE(ex == "true" || ex == "false") << path; break;
      case ValueType::kText: EXPECT_FALSE(ex.empty()) << path; break;
      default: break;
    }
  }
  // Every key a shipped file gives is in the schema (the loader would refuse it otherwise).
  for (const std::string& path : given) {
    const auto dot = path.rfind('.');
    const std::string section = dot == std::string::npos ? "" : path.substr(0, dot);
    const std::string key = dot == std::string::npos ? path : path.substr(dot + 1);
    EXPECT_NO_THROW(topology_schema::key(section, key)) << path;
  }
}

// The loader allows, in each mapping, exactly the schema's keys of that section, in its order.
TEST(TopologySchema, TheLoaderAllowsTheSchemasKeys) {
  const std::string yaml = read_text(kTopologies / "dgx-h100-superpod.yaml");
  for (const std::string section : {"", "gpu", "gpu.peak_flops", "node", "nic", "fabric"}) {
    std::string allowed;
    for (const KeySpec& k : topology_schema::keys_of(section)) {
      if (!allowed.empty()) allowed += ", ";
      allowed += std::string(k.key) + (k.required ? "" : " (optional)");
    }
    // An unknown key appended to the section's mapping.
    std::string text = yaml;
    if (section.empty()) {
      text += "zz_unknown: 1\n";
    } else {
      // After the line that opens the section's mapping, at its children's indentation.
      const bool nested = section == "gpu.peak_flops";
      const std::string opener = nested ? "\n  peak_flops:" : "\n" + section + ":";
      const size_t at = text.find(opener);
      ASSERT_NE(at, std::string::npos) << section;
      const size_t eol = text.find('\n', at + 1);
      text.insert(eol + 1, std::string(nested ? 4 : 2, ' ') + "zz_unknown: 1\n");
    }
    const std::string msg = testing::config_error_of([&] { parse_topology(text, "t.yaml"); });
    EXPECT_THAT(msg, HasSubstr("zz_unknown: unknown key")) << section;
    EXPECT_THAT(msg, HasSubstr("(allowed: " + allowed + ")")) << section;
  }
}

TEST(TopologySchema, ReferenceHasOneRowPerKey) {
  const std::string ref = topology_key_reference();
  size_t rows = 0;
  for (size_t at = ref.find("\n| `"); at != std::string::npos; at = ref.find("\n| `", at + 1)) {
    ++rows;
  }
  EXPECT_EQ(rows, topology_schema::keys().size());
  EXPECT_THAT(ref, HasSubstr("`gpu.peak_flops`\n\n| key | type | required |"));
  EXPECT_THAT(ref, HasSubstr("| `memory` | size | yes |  | `81559MiB` |"));
  EXPECT_THAT(ref, HasSubstr("| `gpus_per_tray` | integer | no | >= 1 | `4` |"));
  EXPECT_THROW(topology_schema::key("nic", "nvls"), InvalidArgument);
}

}  // namespace
}  // namespace traintwin
