// A caching allocator for the CPU backend's device buffers, as PyTorch's CUDA caching allocator:
// freed blocks are kept and handed out again for the same size. The executor allocates the same
// activation and gradient shapes on every micro-batch; a block from the cache costs a memset,
// where a fresh large block costs the kernel's page faults and page zeroing on first touch (glibc
// maps blocks above 32 MiB with mmap and unmaps them on free): 15 % of a tiny-GPT training step's
// time before this cache (perf, bench/cpu_speed_vs_pytorch.sh).
#pragma once

#include <cstddef>
#include <map>
#include <mutex>

namespace traintwin::exec::cpu {

/// Zeroed host blocks, reused by exact size. Blocks smaller than kMinCachedBytes go straight to
/// calloc/free. The cache keeps at most as many bytes as were in use at the peak so far (a
/// steady training loop reuses every block; a one-off shape cannot pin more than that).
/// Thread-safe. Destroying it frees the cached blocks (every block must be returned first).
class HostBlockCache {
 public:
  static constexpr size_t kMinCachedBytes = size_t{256} << 10;

  HostBlockCache() = default;
  HostBlockCache(const HostBlockCache&) = delete;
  HostBlockCache& operator=(const HostBlockCache&) = delete;
  ~HostBlockCache();

  /// `bytes` zero bytes, aligned as malloc aligns (nullptr for 0). Throws Error when the host
  /// has no memory left, naming the size.
  void* allocate_zeroed(size_t bytes);
  /// Returns a block from allocate_zeroed of the same `bytes`.
  void deallocate(void* ptr, size_t bytes) noexcept;
  /// Bytes held in the cache now (blocks not in use).
  size_t cached_bytes() const;
  /// Frees every cached block (blocks in use stay valid; the peak in use is kept).
  void release_cached() noexcept;

 private:
  mutable std::mutex mutex_;
  std::multimap<size_t, void*> free_;  // size -> block
  size_t in_use_bytes_ = 0;            // cached-size blocks handed out
  size_t peak_in_use_bytes_ = 0;
  size_t cached_bytes_ = 0;
};

}  // namespace traintwin::exec::cpu
