// The CPU backend's caching allocator; see block_cache.hpp.
#include "exec/cpu/block_cache.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.hpp"

namespace traintwin::exec::cpu {

HostBlockCache::~HostBlockCache() {
  for (auto& [bytes, ptr] : free_) std::free(ptr);
}

void* HostBlockCache::allocate_zeroed(size_t bytes) {
  if (bytes == 0) return nullptr;
  if (bytes >= kMinCachedBytes) {
    void* reused = nullptr;
    {
      std::lock_guard lock(mutex_);
      in_use_bytes_ += bytes;
      peak_in_use_bytes_ = std::max(peak_in_use_bytes_, in_use_bytes_);
      if (auto it = free_.find(bytes); it != free_.end()) {
        reused = it->second;
        free_.erase(it);
        cached_bytes_ -= bytes;
      }
    }
    if (reused != nullptr) return std::memset(reused, 0, bytes);
  }
  void* p = std::calloc(bytes, 1);
  if (p == nullptr) {
    if (bytes >= kMinCachedBytes) {
      std::lock_guard lock(mutex_);
      in_use_bytes_ -= bytes;
    }
    throw Error("cpu backend: cannot allocate " + std::to_string(bytes) + " bytes");
  }
  return p;
}

void HostBlockCache::deallocate(void* ptr, size_t bytes) noexcept {
  if (ptr == nullptr) return;
  if (bytes >= kMinCachedBytes) {
    std::lock_guard lock(mutex_);
    in_use_bytes_ -= bytes;
    if (cached_bytes_ + bytes <= peak_in_use_bytes_) {
      try {
        free_.emplace(bytes, ptr);
        cached_bytes_ += bytes;
        return;
      } catch (...) {  // no memory for the map node: free the block instead
      }
    }
  }
  std::free(ptr);
}

void HostBlockCache::release_cached() noexcept {
  std::lock_guard lock(mutex_);
  for (auto& [bytes, ptr] : free_) std::free(ptr);
  free_.clear();
  cached_bytes_ = 0;
}

size_t HostBlockCache::cached_bytes() const {
  std::lock_guard lock(mutex_);
  return cached_bytes_;
}

}  // namespace traintwin::exec::cpu
