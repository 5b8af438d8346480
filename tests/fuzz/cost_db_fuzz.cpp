// libFuzzer target: the measured cost database reader (traces/db/<gpu>.json), and writing back
// what it accepted: the text it writes must read back to the same database.
#include "traces/cost_db.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace traintwin;
  const std::string text = fuzz::as_text(data, size);
  return fuzz::expect_error_or_success([&] {
    const CostDatabase db = CostDatabase::parse(text, "fuzz.json");
    const std::string again = db.to_json();
    fuzz::require(CostDatabase::parse(again, "rewritten.json").to_json() == again,
                  "a cost database written by to_json() reads back to the same text");
  });
}
