// libFuzzer target: the report's readers of summary.json and sweep.json (what `traintwin report
// DIR` reads), as sections and as the rendered page (without the Vega scripts).
#include <nlohmann/json.hpp>

#include "viz/report.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace traintwin;
  if (size < 1) return 0;
  const bool sweep = (data[0] & 1) != 0;
  const std::string text = fuzz::as_text(data + 1, size - 1);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception&) {
    return 0;  // the report reader turns these into an Error (tested in tests/viz)
  }
  return fuzz::expect_error_or_success([&] {
    const auto sections = sweep ? sweep_sections(j, "sweep.json")
                                : simulation_sections(j, "summary.json", std::nullopt, "", {});
    (void)sections;
  });
}
