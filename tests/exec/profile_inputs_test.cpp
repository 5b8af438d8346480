// ProfileInputs (exec/profile_inputs.hpp): every buffer the profiler hands a kernel is resident
// when it is made (no first-touch page fault inside a timed run), holds the values asked for,
// and bad ranges are refused.
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/error.hpp"
#include "exec/cpu/cpu_backend.hpp"
#include "exec/profile_inputs.hpp"

namespace traintwin::exec {
namespace {

/// Pages of [p, p + bytes) that are not resident (mincore), over the whole pages inside it.
int64_t missing_pages(const void* p, size_t bytes) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) / page * page;
  if (end <= begin) return 0;
  std::vector<unsigned char> vec((end - begin) / page);
  EXPECT_EQ(mincore(reinterpret_cast<void*>(begin), end - begin, vec.data()), 0);
  int64_t missing = 0;
  for (unsigned char v : vec) missing += (v & 1) == 0 ? 1 : 0;
  return missing;
}

// 64 MiB: far above glibc's mmap threshold, so the backend's calloc maps fresh, untouched
// pages (the case that made every timed run of a rotated profile pay its outputs' page faults).
constexpr int64_t kBig = int64_t{16} << 20;

TEST(ProfileInputsTest, OutputBuffersAreResidentWhenMade) {
  cpu::CpuBackend be;
  ProfileInputs in(be, 1);
  const Tensor out = in.zeros(kBig);
  EXPECT_EQ(missing_pages(out.data(), out.size() * sizeof(float)), 0);
  for (size_t i = 0; i < out.size(); i += 4099) ASSERT_EQ(out.data()[i], 0.0f);
  // Control: a bare allocation of the same size is not resident yet, so the check above is
  // the profiler's doing, not the allocator's.
  const Tensor bare(be, kBig + 1024);
  EXPECT_GT(missing_pages(bare.data(), bare.size() * sizeof(float)), 0);
}

TEST(ProfileInputsTest, RandomInputsAreResidentInRangeAndFreshPerTensor) {
  cpu::CpuBackend be;
  ProfileInputs in(be, 3);
  const Tensor a = in.uniform(kBig, 0.5, 2.0);
  const Tensor b = in.uniform(kBig, 0.5, 2.0);
  EXPECT_EQ(missing_pages(a.data(), a.size() * sizeof(float)), 0);
  int64_t differ = 0;
  for (size_t i = 0; i < a.size(); i += 997) {
    ASSERT_GE(a.data()[i], 0.5f);
    ASSERT_LT(a.data()[i], 2.0f);
    differ += a.data()[i] != b.data()[i] ? 1 : 0;
  }
  EXPECT_GT(differ, 0);  // a new stream per tensor
  const DeviceBuffer<int32_t> ids = in.ids(10000, 7);
  for (int32_t id : ids.span()) {
    ASSERT_GE(id, 0);
    ASSERT_LT(id, 7);
  }
}

TEST(ProfileInputsTest, RefusesEmptyRanges) {
  cpu::CpuBackend be;
  ProfileInputs in(be, 1);
  EXPECT_THROW(in.uniform(4, 1.0, 1.0), InvalidArgument);
  EXPECT_THROW(in.ids(4, 0), InvalidArgument);
}

}  // namespace
}  // namespace traintwin::exec
