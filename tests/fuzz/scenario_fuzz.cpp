// libFuzzer target: the scenario reader (YAML text -> validated Scenario), with and without an
// override, as `traintwin summary FILE --set KEY=VALUE` reads it; then every scenario it accepts
// goes on to the models derived from it, as `summary`, `memory` and `simulate` use them: the
// rules again (validate_scenario), the FLOP counts, the memory model of every pipeline stage and,
// for a small scenario, the Program of its first and last rank. A size the reader accepts but a
// derived count overflows (UBSan), or a model that throws something other than a traintwin::Error
// on a scenario the rules passed, is a finding.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/flops.hpp"
#include "core/memory.hpp"
#include "core/program.hpp"
#include "core/scenario.hpp"
#include "tests/fuzz/fuzz_support.hpp"

namespace {

using namespace traintwin;

/// Small enough to lower in a fuzz iteration: a few layer passes per rank, a short CP ring and
/// few local experts (the Program grows with each).
bool small_enough_to_lower(const Scenario& s) {
  const int64_t per_step = s.training.micro_batch_size * s.parallel.data_parallel_size;
  const int64_t micro_batches = per_step > 0 ? s.training.global_batch_size / per_step : 0;
  const int64_t layers_per_stage = s.model.num_layers / s.parallel.pipeline_model_parallel_size;
  const int64_t local_experts =
      s.model.num_moe_experts / std::max<int64_t>(1, s.parallel.expert_model_parallel_size);
  return micro_batches * layers_per_stage <= 256 && s.parallel.context_parallel_size <= 8 &&
         local_experts <= 64 && s.parallel.tensor_model_parallel_size <= 64 &&
         s.model.seq_length <= (1 << 20);
}

/// What the commands derive from an accepted scenario.
void derive(const Scenario& s) {
  validate_scenario(s, "fuzz.yaml");
  (void)model_flops_per_iteration(s.model, s.training.global_batch_size);
  (void)memory_per_stage(s);
  if (small_enough_to_lower(s)) {
    const int64_t last = s.world_size() - 1;
    (void)build_program(s, last > 0 ? std::vector<int64_t>{0, last} : std::vector<int64_t>{0});
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = fuzz::as_text(data, size);
  return fuzz::expect_error_or_success([&] {
    derive(parse_scenario(text, "fuzz.yaml", fuzz::scratch_dir()));
    // The same text as an override value of a key that takes any type.
    derive(parse_scenario(text, "fuzz.yaml", fuzz::scratch_dir(), {Override{"training.seed", text}}));
  });
}
