// POSIX file helpers of the executor's writers (indexed datasets, checkpoints): complete writes,
// durable closes and folder syncs, each throwing Error that names the path and the system's reason.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>

namespace traintwin {

/// strerror(errno).
std::string errno_text();

/// Writes all `size` bytes to `fd`, retrying on EINTR and short writes; throws Error
/// "cannot write <path>: <reason>".
void write_all(int fd, const void* data, size_t size, const std::string& path);

/// fsync + close of `fd` (closed in every case); throws Error naming `path`.
void sync_and_close(int fd, const std::string& path);

/// fsync of a folder, so that a rename or a new entry in it is durable; throws Error naming it.
void sync_directory(const std::filesystem::path& dir);

}  // namespace traintwin
