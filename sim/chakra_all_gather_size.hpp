// What a Chakra ET all-gather's comm_size counts (issue 30). Chakra's schema (et_def.proto) does
// not say, and its readers differ on the one collective where input and output buffers differ in
// size: ASTRA-sim reads comm_size as each rank's input (72dd7f8's Ring.cc: msg_size = data_size,
// final_data_size = data_size x n), and so does Chakra's PyTorch converter in spirit (comm_size =
// the sum of the collective's input tensors, src/converter/pytorch_node.py); SimAI's workloads
// and nccl-tests' "size" column count the gathered output (SimAI#74). Every other collective
// reads the same in both: comm_size is each rank's input buffer, which is also nccl-tests' size
// (the whole vector of an all-reduce, reduce-scatter's input, all-to-all's send buffer). Program
// ops hold the nccl-tests size (core/program.hpp Op::bytes). The export
// (sim/chakra_export.hpp) writes the convention it used in the GlobalMetadata attribute
// kChakraAllGatherSizeAttr, the import (sim/chakra_import.hpp) reads it back.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace traintwin {

/// How an ALL_GATHER node's comm_size counts bytes.
enum class ChakraAllGatherSize {
  kInput,   ///< each rank's input: the gathered output / group size (ASTRA-sim's reading)
  kOutput,  ///< the gathered output (nccl-tests' size, SimAI's workloads)
};

/// The GlobalMetadata string attribute naming the convention of a trace's all-gathers: "input" or
/// "output" (to_string()). Absent in traces from other tools and in traintwin's before it.
inline constexpr const char* kChakraAllGatherSizeAttr = "traintwin.all_gather_comm_size";

/// "input" | "output".
std::string_view to_string(ChakraAllGatherSize c);

/// The convention named `text` ("input" or "output"); nullopt for anything else.
std::optional<ChakraAllGatherSize> parse_chakra_all_gather_size(std::string_view text);

/// An all-gather's comm_size under convention `c` for a Program op of `bytes` (the gathered
/// output) over `group_size` ranks. Throws InvalidArgument when group_size < 1, or, for kInput,
/// when `bytes` is not a multiple of group_size (every rank contributes an equal piece).
int64_t chakra_all_gather_comm_size(ChakraAllGatherSize c, int64_t bytes, int64_t group_size);

/// The Program op bytes (the gathered output) of an all-gather whose comm_size is `comm_size`
/// under convention `c` over `group_size` ranks: comm_size x group_size for kInput. Throws
/// InvalidArgument when group_size < 1 or the product overflows int64.
int64_t program_all_gather_bytes(ChakraAllGatherSize c, int64_t comm_size, int64_t group_size);

}  // namespace traintwin
