// exec/cpu/host_device.hpp: the one rule of GEMM threads per rank (train, profile and
// validate --live): a --threads request first, then OPENBLAS_NUM_THREADS, then the host's cores
// shared among its ranks; and what OpenBLAS then reports is what a database records.
#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "core/error.hpp"
#include "exec/cpu/host_device.hpp"
#include "exec/cpu/matmul.hpp"

namespace traintwin::exec::cpu {
namespace {

/// Sets OPENBLAS_NUM_THREADS (or unsets it: nullopt) for the scope, restoring it after.
class ScopedThreadsVariable {
 public:
  explicit ScopedThreadsVariable(const std::optional<std::string>& value) {
    if (const char* old = std::getenv(kName)) old_ = old;
    if (value) {
      setenv(kName, value->c_str(), 1);
    } else {
      unsetenv(kName);
    }
  }
  ~ScopedThreadsVariable() {
    if (old_) {
      setenv(kName, old_->c_str(), 1);
    } else {
      unsetenv(kName);
    }
  }

 private:
  static constexpr const char* kName = "OPENBLAS_NUM_THREADS";
  std::optional<std::string> old_;
};

TEST(GemmThreadsTest, RequestThenEnvironmentThenSharedCores) {
  {
    const ScopedThreadsVariable unset(std::nullopt);
    EXPECT_EQ(gemm_threads_for(1), host_cores());
    EXPECT_EQ(gemm_threads_for(2), std::max(1, host_cores() / 2));
    EXPECT_EQ(gemm_threads_for(4 * host_cores()), 1);  // at least one each
    EXPECT_EQ(gemm_threads_for(1, 3), 3);
  }
  {
    const ScopedThreadsVariable one(std::string("1"));
    EXPECT_EQ(gemm_threads_for(1), 1);  // honoured as train and OpenBLAS honour it
    EXPECT_EQ(gemm_threads_for(2), 1);
    EXPECT_EQ(gemm_threads_for(1, 2), 2);  // the flag wins
  }
}

TEST(GemmThreadsTest, RefusesBadCountsNamingTheVariable) {
  for (const char* bad : {"0", "-2", "two", "2x"}) {
    const ScopedThreadsVariable v(std::string{bad});
    try {
      (void)gemm_threads_for(1);
      ADD_FAILURE() << bad << " accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("OPENBLAS_NUM_THREADS=") + bad),
                std::string::npos)
          << e.what();
    }
  }
  const ScopedThreadsVariable unset(std::nullopt);
  EXPECT_THROW((void)gemm_threads_for(0), InvalidArgument);
  EXPECT_THROW((void)gemm_threads_for(1, -1), InvalidArgument);
}

TEST(GemmThreadsTest, UseReturnsWhatOpenBlasReports) {
  const int before = gemm_threads();
  const ScopedThreadsVariable unset(std::nullopt);
  EXPECT_EQ(use_gemm_threads(1, 1), 1);
  EXPECT_EQ(gemm_threads(), 1);
  set_gemm_threads(before);
}

// Device ids of traces/db/<id>.json: the name in lower case, runs of other characters as one '-'.
TEST(HostDevice, DeviceIdsSlugTheName) {
  EXPECT_EQ(device_slug("cuda", "NVIDIA H100 80GB HBM3"), "cuda-nvidia-h100-80gb-hbm3");
  EXPECT_EQ(device_slug("cpu", "  AMD EPYC 7B13 (64-Core)"), "cpu-amd-epyc-7b13-64-core");
  CostDbDevice d;
  d.name = "Intel(R) Xeon(R) CPU @ 2.20GHz";
  d.threads = 2;
  EXPECT_EQ(device_id(d), "cpu-intel-r-xeon-r-cpu-2-20ghz-2t");
  d.threads.reset();
  EXPECT_THROW(device_id(d), InvalidArgument);
}

}  // namespace
}  // namespace traintwin::exec::cpu
