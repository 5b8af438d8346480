// This host as a device of the CPU backend; see host_device.hpp.
#include "exec/cpu/host_device.hpp"

#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.hpp"
#include "exec/cpu/matmul.hpp"

namespace traintwin::exec::cpu {
namespace {

/// The value of the first line of `file` starting with `key` (after the ':'), trimmed; "" if none.
std::string proc_value(const char* file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string v = line.substr(colon + 1);
    v.erase(0, v.find_first_not_of(" \t"));
    v.erase(v.find_last_not_of(" \t\r\n") + 1);
    return v;
  }
  return {};
}

/// "32768K" / "1M" / "512" (sysfs cache size) in bytes; 0 when unreadable.
int64_t sysfs_size(const std::string& file) {
  std::ifstream in(file);
  int64_t n = 0;
  char unit = 0;
  if (!(in >> n)) return 0;
  in >> unit;
  if (unit == 'K') return n << 10;
  if (unit == 'M') return n << 20;
  return n;
}

}  // namespace

int host_cores() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

int threads_per_rank(int local_ranks) {
  if (local_ranks < 1) {
    throw InvalidArgument("ranks on this host must be >= 1, got " + std::to_string(local_ranks));
  }
  return std::max(1, host_cores() / local_ranks);
}

int gemm_threads_for(int local_ranks, int requested) {
  if (requested < 0) {
    throw InvalidArgument("GEMM threads must be >= 1, got " + std::to_string(requested));
  }
  const int shared = threads_per_rank(local_ranks);  // validates local_ranks
  if (requested > 0) return requested;
  if (const char* env = std::getenv("OPENBLAS_NUM_THREADS"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    errno = 0;
    const long n = std::strtol(env, &end, 10);
    if (errno != 0 || end == env || *end != '\0' || n < 1 || n > 1024) {
      throw InvalidArgument(std::string("OPENBLAS_NUM_THREADS=") + env +
                            ": expected a positive integer (GEMM threads per process, 1-1024)");
    }
    return static_cast<int>(n);
  }
  return shared;
}

int use_gemm_threads(int local_ranks, int requested) {
  set_gemm_threads(gemm_threads_for(local_ranks, requested));
  return gemm_threads();
}

int64_t last_level_cache_bytes() {
  for (const char* index : {"index3", "index2"}) {
    const int64_t b =
        sysfs_size(std::string("/sys/devices/system/cpu/cpu0/cache/") + index + "/size");
    if (b > 0) return b;
  }
  return int64_t{32} << 20;
}

int64_t host_memory_bytes() {
  const std::string mem = proc_value("/proc/meminfo", "MemTotal");  // "131891092 kB"
  if (!mem.empty()) {
    try {
      return std::stoll(mem) * 1024;
    } catch (const std::exception&) {
      // not a number: fall through to sysconf
    }
  }
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

CostDbDevice host_device(int threads) {
  if (threads < 1) throw InvalidArgument("threads must be >= 1, got " + std::to_string(threads));
  CostDbDevice d;
  d.name = proc_value("/proc/cpuinfo", "model name");
  if (d.name.empty()) d.name = "unknown CPU";
  d.sm_count = host_cores();
  const std::string mhz = proc_value("/proc/cpuinfo", "cpu MHz");
  d.clock_mhz = mhz.empty() ? 1.0 : std::max(1.0, std::stod(mhz));
  d.memory_bytes = std::max<int64_t>(1, host_memory_bytes());
  d.kind = "cpu";
  d.threads = threads;
  return d;
}

CostDbVersions host_versions() {
  CostDbVersions v{"n/a", "n/a", "n/a", "n/a", TRAINTWIN_VERSION, std::nullopt, std::nullopt};
  std::string blas = openblas_get_config();
  blas.erase(blas.find_last_not_of(" ") + 1);
  v.blas = blas;
  return v;
}

std::string device_slug(const std::string& prefix, const std::string& name) {
  std::string id = prefix + "-";
  bool dash = false;
  for (char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u)) {
      if (dash && id.back() != '-') id += '-';
      id += static_cast<char>(std::tolower(u));
      dash = false;
    } else {
      dash = true;
    }
  }
  return id;
}

std::string device_id(const CostDbDevice& device) {
  if (!device.threads) throw InvalidArgument("device " + device.name + " has no thread count");
  std::string id = device_slug("cpu", device.name);
  if (id.back() != '-') id += '-';
  return id + std::to_string(*device.threads) + "t";
}

}  // namespace traintwin::exec::cpu
