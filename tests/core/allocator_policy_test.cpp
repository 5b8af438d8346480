// core/allocator_policy.hpp: after retain_freed_memory(), a large block comes from the heap (no
// mmap of its own) and stays there once freed, so allocating it again faults nothing in.
#include "core/allocator_policy.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace traintwin {
namespace {

#if defined(__GLIBC__)
TEST(AllocatorPolicy, LargeBlocksComeFromTheHeapAndStayThereWhenFreed) {
  retain_freed_memory();
  // Above glibc's largest dynamic mmap threshold (32 MiB), and above 256 MiB (a 256 MB
  // all-reduce's temporary buffer).
  constexpr size_t kBytes = size_t{300} << 20;
  const size_t mmapped_before = mallinfo2().hblkhd;
  void* p = std::malloc(kBytes);
  ASSERT_NE(p, nullptr);
  std::memset(p, 1, kBytes);
  // Not a block of its own mapping: glibc counts those in hblkhd.
  EXPECT_EQ(mallinfo2().hblkhd, mmapped_before);
  std::free(p);
  // Freed, it stays in the heap's free space (no trimming below 1 GiB).
  EXPECT_GE(mallinfo2().fordblks, kBytes);
}
#endif

}  // namespace
}  // namespace traintwin
