// Shared by the libFuzzer targets (tests/fuzz/*_fuzz.cpp): the input as a string, a scratch
// folder per process, and the rule every target checks — a reader either returns or throws a
// traintwin::Error; any other exception, a crash or a sanitizer report is a finding.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.hpp"

namespace traintwin::fuzz {

inline std::string as_text(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

/// A folder of this process under $TMPDIR (or /tmp), created once and removed at exit.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    auto d = std::filesystem::path(tmp != nullptr ? tmp : "/tmp") /
             ("traintwin-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return d;
  }();
  return dir;
}

inline void write_bytes(const std::filesystem::path& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

/// Runs `read`; a traintwin::Error is the expected rejection of a bad input. Anything else that
/// escapes is reported and aborts (libFuzzer saves the input as a crash).
template <typename F>
int expect_error_or_success(F&& read) {
  try {
    read();
  } catch (const traintwin::Error&) {
    // a clear error: fine
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: an exception other than traintwin::Error escaped: %s\n", e.what());
    std::abort();
  }
  return 0;
}

/// Aborts with `what` when `ok` is false (a broken invariant, e.g. a round trip).
inline void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz: invariant broken: %s\n", what);
    std::abort();
  }
}

}  // namespace traintwin::fuzz
