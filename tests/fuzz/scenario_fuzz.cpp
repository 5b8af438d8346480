// libFuzzer target: the scenario reader (YAML text -> validated Scenario), with and without an
// override, as `traintwin summary FILE --set KEY=VALUE` reads it.
#include "core/scenario.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace traintwin;
  const std::string text = fuzz::as_text(data, size);
  return fuzz::expect_error_or_success([&] {
    parse_scenario(text, "fuzz.yaml", fuzz::scratch_dir());
    // The same text as an override value of a key that takes any type.
    parse_scenario(text, "fuzz.yaml", fuzz::scratch_dir(), {Override{"training.seed", text}});
  });
}
