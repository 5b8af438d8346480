// Reading the files a user names (scenarios, topologies, cost databases, report inputs,
// tokenizer files) with the checks every reader needs: a regular file, not a folder, a device
// (/dev/zero) or a FIFO, and not larger than a bound, so that no input can exhaust memory.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace traintwin {

/// Largest scenario or topology YAML file: 4 MiB (the shipped ones are a few KiB).
inline constexpr uint64_t kMaxConfigFileBytes = uint64_t{4} << 20;
/// Largest JSON input (cost database, summary.json, sweep.json, timeline.json) and tokenizer
/// file: 1 GiB.
inline constexpr uint64_t kMaxDataFileBytes = uint64_t{1} << 30;

/// The whole content of `file`, described in messages as `what` ("scenario file"). Throws
/// ConfigError "<file>: cannot open <what>: <reason>" when it cannot be opened (missing,
/// permissions, "Too many levels of symbolic links" for a symlink loop), "<file>: is a folder,
/// not a <what>", "<file>: is not a regular file (...)" for devices, FIFOs and sockets, and
/// "<file>: N bytes, more than the M bytes a <what> may have" beyond `max_bytes`.
std::string read_input_file(const std::filesystem::path& file, std::string_view what,
                            uint64_t max_bytes);

/// For readers that stream a file of any size (a live timeline): checks that `file` opens and is
/// a regular file, with read_input_file's messages, and returns its size in bytes.
uint64_t check_input_file(const std::filesystem::path& file, std::string_view what);

}  // namespace traintwin
