// The two readings of a Chakra all-gather's comm_size (sim/chakra_all_gather_size.hpp), and the
// conversions between them and a Program op's bytes. Used by sim/chakra_export.cpp and
// sim/chakra_import.cpp.
#include "sim/chakra_all_gather_size.hpp"

#include <fmt/format.h>

#include <limits>

#include "core/error.hpp"

namespace traintwin {

std::string_view to_string(ChakraAllGatherSize c) {
  return c == ChakraAllGatherSize::kInput ? "input" : "output";
}

std::optional<ChakraAllGatherSize> parse_chakra_all_gather_size(std::string_view text) {
  if (text == "input") return ChakraAllGatherSize::kInput;
  if (text == "output") return ChakraAllGatherSize::kOutput;
  return std::nullopt;
}

int64_t chakra_all_gather_comm_size(ChakraAllGatherSize c, int64_t bytes, int64_t group_size) {
  if (group_size < 1) {
    throw InvalidArgument(fmt::format("chakra all-gather: group size {} < 1", group_size));
  }
  if (c == ChakraAllGatherSize::kOutput) return bytes;
  if (bytes % group_size != 0) {
    throw InvalidArgument(fmt::format(
        "chakra all-gather: {} bytes over {} ranks is no whole piece per rank (comm_size "
        "convention input)",
        bytes, group_size));
  }
  return bytes / group_size;
}

int64_t program_all_gather_bytes(ChakraAllGatherSize c, int64_t comm_size, int64_t group_size) {
  if (group_size < 1) {
    throw InvalidArgument(fmt::format("chakra all-gather: group size {} < 1", group_size));
  }
  if (c == ChakraAllGatherSize::kOutput) return comm_size;
  if (comm_size > std::numeric_limits<int64_t>::max() / group_size) {
    throw InvalidArgument(fmt::format(
        "chakra all-gather: comm_size {} x {} ranks overflows int64", comm_size, group_size));
  }
  return comm_size * group_size;
}

}  // namespace traintwin
