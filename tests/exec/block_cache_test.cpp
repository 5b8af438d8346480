// HostBlockCache (exec/cpu/block_cache.hpp): a freed large block comes back for the same size,
// zeroed; small blocks and other sizes are not served from the cache; the cache never holds more
// than the peak of bytes in use.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>

#include "exec/cpu/block_cache.hpp"

namespace traintwin::exec::cpu {
namespace {

constexpr size_t kBig = HostBlockCache::kMinCachedBytes * 4;

bool all_zero(const void* p, size_t bytes) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < bytes; ++i) {
    if (b[i] != 0) return false;
  }
  return true;
}

TEST(HostBlockCacheTest, ReusesAFreedBlockOfTheSameSizeZeroed) {
  HostBlockCache cache;
  void* a = cache.allocate_zeroed(kBig);
  ASSERT_TRUE(all_zero(a, kBig));
  std::memset(a, 0xAB, kBig);
  cache.deallocate(a, kBig);
  EXPECT_EQ(cache.cached_bytes(), kBig);
  void* b = cache.allocate_zeroed(kBig);
  EXPECT_EQ(b, a);
  EXPECT_TRUE(all_zero(b, kBig));
  EXPECT_EQ(cache.cached_bytes(), 0u);
  // Another size is a fresh block; the cached one stays for its own size.
  cache.deallocate(b, kBig);
  void* c = cache.allocate_zeroed(kBig + 64);
  EXPECT_NE(c, a);
  EXPECT_EQ(cache.cached_bytes(), kBig);
  cache.deallocate(c, kBig + 64);
}

TEST(HostBlockCacheTest, SmallBlocksAreNotCached) {
  HostBlockCache cache;
  void* a = cache.allocate_zeroed(1024);
  ASSERT_NE(a, nullptr);
  cache.deallocate(a, 1024);
  EXPECT_EQ(cache.cached_bytes(), 0u);
  EXPECT_EQ(cache.allocate_zeroed(0), nullptr);
  cache.deallocate(nullptr, 0);
}

TEST(HostBlockCacheTest, HoldsAtMostThePeakInUse) {
  HostBlockCache cache;
  void* a = cache.allocate_zeroed(kBig);  // peak kBig
  cache.deallocate(a, kBig);
  void* b = cache.allocate_zeroed(kBig + 64);  // peak kBig + 64 (a's block stays cached)
  void* c = cache.allocate_zeroed(kBig);       // a's block
  EXPECT_EQ(c, a);
  cache.deallocate(b, kBig + 64);
  cache.deallocate(c, kBig);
  EXPECT_LE(cache.cached_bytes(), 2 * kBig + 64);
  // One-off shapes: a block that would take the cache past the peak in use is freed.
  HostBlockCache one_off;
  void* x = one_off.allocate_zeroed(kBig);
  void* y = one_off.allocate_zeroed(kBig);
  one_off.deallocate(x, kBig);                  // cached: kBig
  void* z = one_off.allocate_zeroed(kBig * 2);  // in use 3 kBig (the peak)
  one_off.deallocate(y, kBig);                  // cached: 2 kBig
  one_off.deallocate(z, kBig * 2);              // 4 kBig > 3 kBig: freed
  EXPECT_EQ(one_off.cached_bytes(), 2 * kBig);
  void* w = one_off.allocate_zeroed(kBig * 3);  // no block of that size: fresh
  one_off.deallocate(w, kBig * 3);              // 5 kBig > 3 kBig: freed
  EXPECT_EQ(one_off.cached_bytes(), 2 * kBig);
}

TEST(HostBlockCacheTest, ReleaseCachedFreesTheCacheAndKeepsThePeak) {
  HostBlockCache cache;
  void* a = cache.allocate_zeroed(kBig);
  void* b = cache.allocate_zeroed(kBig * 2);  // peak 3 kBig
  cache.deallocate(a, kBig);
  EXPECT_EQ(cache.cached_bytes(), kBig);
  cache.release_cached();
  EXPECT_EQ(cache.cached_bytes(), 0u);
  // The peak stays 3 kBig: a freed block of up to that fits again, and is handed back.
  cache.deallocate(b, kBig * 2);
  EXPECT_EQ(cache.cached_bytes(), 2 * kBig);
  void* c = cache.allocate_zeroed(kBig * 2);
  EXPECT_EQ(c, b);
  cache.deallocate(c, kBig * 2);
}

}  // namespace
}  // namespace traintwin::exec::cpu
