// The tests' check that a writer left nothing behind (core/posix_file.hpp's AtomicFile writes
// "<name>.tmp.XXXXXX" beside its target).
#pragma once

#include <filesystem>
#include <string>

namespace traintwin::testing {

/// True when `dir` holds no writer's temporary (a name containing ".tmp").
inline bool no_temporaries(const std::filesystem::path& dir) {
  if (!std::filesystem::is_directory(dir)) return true;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().filename().string().find(".tmp") != std::string::npos) return false;
  }
  return true;
}

}  // namespace traintwin::testing
