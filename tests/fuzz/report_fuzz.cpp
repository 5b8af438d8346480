// libFuzzer target: the readers of summary.json and sweep.json (read_summary_json,
// read_sweep_json: what `traintwin report DIR` reads) and the report's sections built from what
// they return.
#include <nlohmann/json.hpp>

#include "viz/report.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace traintwin;
  if (size < 1) return 0;
  const bool sweep = (data[0] & 1) != 0;
  const std::string text = fuzz::as_text(data + 1, size - 1);
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception&) {
    return 0;  // the report reader turns these into an Error (tested in tests/viz)
  }
  return fuzz::expect_error_or_success([&] {
    const auto sections =
        sweep ? sweep_sections(read_sweep_json(j, "sweep.json"))
              : simulation_sections(read_summary_json(j, "summary.json"), std::nullopt, "", {});
    (void)sections;
  });
}
