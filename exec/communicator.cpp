// The rules every Communicator backend shares; see communicator.hpp.
#include "exec/communicator.hpp"

#include <string>

#include "core/error.hpp"

namespace traintwin::exec {

std::vector<int64_t> all_to_all_displacements(const char* who, GroupKind group, size_t members,
                                              const char* name, std::span<const int64_t> counts,
                                              size_t buffer_size) {
  const std::string where =
      std::string(who) + ": all_to_all_v on group " + to_string(group) + ": " + name;
  if (counts.size() != members) {
    throw InvalidArgument(where + " has " + std::to_string(counts.size()) +
                          " entries, expected one per member of the group (" +
                          std::to_string(members) + ")");
  }
  std::vector<int64_t> displacement(members, 0);
  int64_t sum = 0;
  for (size_t j = 0; j < members; ++j) {
    if (counts[j] < 0) {
      throw InvalidArgument(where + "[" + std::to_string(j) + "] is negative (" +
                            std::to_string(counts[j]) + ")");
    }
    displacement[j] = sum;
    sum += counts[j];
  }
  if (sum != static_cast<int64_t>(buffer_size)) {
    throw InvalidArgument(where + " sum to " + std::to_string(sum) +
                          " elements, but the buffer has " + std::to_string(buffer_size));
  }
  return displacement;
}

}  // namespace traintwin::exec
