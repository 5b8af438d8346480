// libFuzzer target: the Chrome/Perfetto trace reader (timeline.json of `simulate --out`, the
// report's input), and the writer's output read back.
#include <sstream>

#include "traces/timeline.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace traintwin;
  const std::string text = fuzz::as_text(data, size);
  return fuzz::expect_error_or_success([&] {
    std::istringstream in(text);
    const Timeline t = read_chrome_trace(in, "fuzz.json");
    std::ostringstream out;
    write_chrome_trace(t, out);
    std::istringstream again(out.str());
    const Timeline u = read_chrome_trace(again, "rewritten.json");
    fuzz::require(u.events.size() == t.events.size(), "a written trace reads back whole");
  });
}
