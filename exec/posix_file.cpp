#include "exec/posix_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace traintwin {

std::string errno_text() { return std::strerror(errno); }

void write_all(int fd, const void* data, size_t size, const std::string& path) {
  const auto* p = static_cast<const unsigned char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error("cannot write " + path + ": " + errno_text());
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void sync_and_close(int fd, const std::string& path) {
  if (::fsync(fd) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    throw Error("cannot sync " + path + ": " + why);
  }
  if (::close(fd) != 0) throw Error("cannot close " + path + ": " + errno_text());
}

void sync_directory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open folder " + dir.string() + " to sync it: " + errno_text());
  if (::fsync(fd) != 0) {
    const std::string why = errno_text();
    ::close(fd);
    throw Error("cannot sync folder " + dir.string() + ": " + why);
  }
  ::close(fd);
}

}  // namespace traintwin
