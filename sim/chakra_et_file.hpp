// The Chakra ET file format, internal to sim/chakra_import.cpp and sim/chakra_export.cpp: the
// collective kinds as Chakra names them (both directions), finding a trace's files
// (DIR/<name>.<rank>.et), reading one (a GlobalMetadata message, then Node messages, each
// preceded by its length as a varint, as Chakra's feeder reads them), the comm groups JSON
// (DIR/<name>.comm_groups.json), and a node's attributes, every failure a ChakraTraceError naming
// the file (and the node). Next in the flow: sim/chakra_import.cpp turns the nodes into ops.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/program.hpp"
#include "traces/chakra/et_def.pb.h"

namespace traintwin::chakra {

/// The Chakra comm type of collective `k` (CollectiveCommType in et_def.proto). Throws
/// InvalidArgument for the ring exchange, which Chakra has no collective for (the export writes
/// it as sends and recvs).
ChakraProtoMsg::CollectiveCommType comm_type(CollectiveKind k);

/// The collective of Chakra comm type `type`; nullopt for one traintwin does not replay (REDUCE,
/// GATHER, SCATTER, REDUCE_SCATTER_BLOCK, BARRIER) or an unknown value.
std::optional<CollectiveKind> collective_of(int64_t type);

/// The comm types collective_of() reads, for messages: "ALL_REDUCE, ALL_GATHER, ...".
std::string replayed_comm_types();

/// "node 12 (fwd mb0 L1 mlp)" for messages.
std::string node_ref(const ChakraProtoMsg::Node& n);

/// Throws ChakraTraceError "<file>: node <id> (<name>): <what>".
[[noreturn]] void refuse(const std::filesystem::path& file, const ChakraProtoMsg::Node& n,
                         const std::string& what);

/// The attribute `name` of `n`, nullptr when absent.
const ChakraProtoMsg::AttributeProto* find_attr(const ChakraProtoMsg::Node& n,
                                                const std::string& name);

/// An integer attribute (int32, int64 or uint64 as Chakra's writers use them), nullopt when
/// absent; refuse() for another type or a uint64 above INT64_MAX.
std::optional<int64_t> int_attr(const std::filesystem::path& file, const ChakraProtoMsg::Node& n,
                                const std::string& name);

/// int_attr(), refusing the node when the attribute is absent.
int64_t required_int_attr(const std::filesystem::path& file, const ChakraProtoMsg::Node& n,
                          const std::string& name);

/// A string attribute, nullopt when absent; refuse() for another type.
std::optional<std::string> string_attr(const std::filesystem::path& file,
                                       const ChakraProtoMsg::Node& n, const std::string& name);

/// One ET file: its GlobalMetadata and nodes, in file order.
struct EtFile {
  ChakraProtoMsg::GlobalMetadata meta;
  std::vector<ChakraProtoMsg::Node> nodes;
};

/// Reads `file` (at most 4 GiB, whole) as Chakra's feeder does: length-delimited messages
/// (varint32 length, then the message), GlobalMetadata first. Throws ChakraTraceError for a
/// truncated or empty file or a message that does not parse.
EtFile read_et_file(const std::filesystem::path& file);

/// The ET files `where` names (a folder of one trace's <name>.<rank>.et files, or the prefix
/// <folder>/<name>): the trace's name and its files by rank (0 .. n - 1). Throws
/// ChakraTraceError for no files, files of several traces, or a missing rank.
std::pair<std::string, std::vector<std::filesystem::path>> find_files(
    const std::filesystem::path& where);

/// The comm groups JSON {"<pg_name>": [ranks...]}: pg_name -> members (ascending, unique, each
/// in [0, world)). Throws ChakraTraceError naming the file and key otherwise.
std::map<std::string, std::vector<int64_t>> read_comm_groups(const std::filesystem::path& file,
                                                              int64_t world);

}  // namespace traintwin::chakra
