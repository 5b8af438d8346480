// libFuzzer target: `simulate --costs-from-timeline LIVE.json`, the path from a recorded live
// timeline to a cost model: the trace reader, the kernel durations of its "kernels" args
// (traces/timeline_costs), and the cost model built on them (sim/cost_model), asked for every
// recorded kernel on the recording GPU and on another one. Every duration must be finite and
// >= 0.
#include <cmath>
#include <sstream>

#include "sim/cost_model.hpp"
#include "tests/fuzz/fuzz_gpus.hpp"
#include "tests/fuzz/fuzz_support.hpp"
#include "traces/timeline.hpp"
#include "traces/timeline_costs.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace traintwin;
  const std::string text = fuzz::as_text(data, size);
  const GpuSpec& h100 = fuzz::h100();
  const GpuSpec& a100 = fuzz::a100();
  return fuzz::expect_error_or_success([&] {
    std::istringstream in(text);
    const Timeline live = read_chrome_trace(in, "live.json");
    const auto rows = kernel_rows_from_timeline(live);
    for (const GpuSpec* target : {&h100, &a100}) {
      const auto model = make_timeline_cost_model(live, h100, *target);
      for (const KernelMeasurement& m : rows) {
        try {
          const KernelCost c = model->duration(Kernel{m.key, m.flops, m.bytes}, *target);
          fuzz::require(std::isfinite(c.seconds) && c.seconds >= 0,
                        "a kernel's duration is finite and >= 0");
        } catch (const CostModelError&) {
          // a kernel this GPU cannot cost: a clear error
        }
      }
    }
  });
}
