// The process-wide allocator policy; see allocator_policy.hpp.
#include "core/allocator_policy.hpp"

#include <cstdlib>  // defines __GLIBC__ (features.h) where the C library is glibc

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace traintwin {

void retain_freed_memory() {
#if defined(__GLIBC__)
  ::mallopt(M_TRIM_THRESHOLD, 1 << 30);
  ::mallopt(M_MMAP_THRESHOLD, 1 << 30);
  ::mallopt(M_TOP_PAD, 64 << 20);
#endif
}

}  // namespace traintwin
