// The kernel catalogue (core/kernel_catalogue.hpp): every kernel the Program emits for the shipped
// scenarios (and the CP, FP8 and recomputation variants of one) has a descriptor, and the cost
// model's class and validate --live's class of each agree — the disagreement it replaced put the
// MoE experts' grouped GEMMs under "elementwise" in validate --live but under GEMM in the cost
// model.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>

#include "core/kernel_catalogue.hpp"
#include "core/op_class.hpp"
#include "core/program.hpp"
#include "core/scenario.hpp"

namespace traintwin {
namespace {

namespace fs = std::filesystem;

/// The live class a cost class must go with ("optimizer" is a memory-bound kernel too).
bool classes_agree(const KernelDescriptor& d) {
  switch (d.cost_class) {
    case KernelClass::kGemm: return d.live_class == "GEMM";
    case KernelClass::kAttention: return d.live_class == "attention";
    case KernelClass::kMemory: return d.live_class == "elementwise" || d.live_class == "optimizer";
  }
  return false;
}

TEST(KernelCatalogue, ClassesAgreeAndNamesAreUniqueAndFound) {
  std::set<std::string_view> names;
  for (const KernelDescriptor& d : kernel_catalogue()) {
    EXPECT_TRUE(names.insert(d.name).second) << d.name;
    EXPECT_TRUE(classes_agree(d)) << d.name;
    EXPECT_FALSE(d.shape.empty()) << d.name;
    EXPECT_EQ(find_kernel(d.name), &d) << d.name;
  }
  EXPECT_EQ(find_kernel("no_such_kernel"), nullptr);
  EXPECT_EQ(find_kernel("gemm"), nullptr);  // a prefix is not a name
  const KernelDescriptor* g = find_kernel("grouped_gemm_wgrad");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->cost_class, KernelClass::kGemm);
  EXPECT_EQ(g->live_class, "GEMM");
  EXPECT_STREQ(to_string(KernelClass::kMemory), "memory");
}

TEST(KernelCatalogue, HoldsEveryKernelOfTheShippedScenarios) {
  const fs::path dir = fs::path(TRAINTWIN_SOURCE_DIR) / "scenarios";
  std::set<std::string> emitted;
  auto collect = [&](const Scenario& s) {
    const Program p = build_program(s, {0, s.world_size() - 1});
    for (const Kernel& k : p.kernels) {
      emitted.insert(k.key.name);
      EXPECT_NE(find_kernel(k.key.name), nullptr) << k.key.name << " of " << s.name;
    }
  };
  int scenarios = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.path().extension() != ".yaml") continue;
    SCOPED_TRACE(e.path().string());
    collect(load_scenario(e.path()));
    ++scenarios;
  }
  EXPECT_GE(scenarios, 20);
  // Variants the shipped files do not all cover: recomputation, CP with flash attention, FP8.
  const fs::path gpt = dir / "gpt3-175b-h100-1024.yaml";
  collect(load_scenario(gpt, {{"training.recompute_granularity", "full"}}));
  collect(load_scenario(dir / "llama3.1-8b-128k-h100-64.yaml"));
  collect(load_scenario(gpt, {{"training.fp8_format", "hybrid"}}));
  collect(load_scenario(gpt, {{"training.gradient_accumulation_fusion", "false"}}));
  for (const char* n : {"gemm_fwd", "grouped_gemm_fwd", "rmsnorm_fwd", "moe_permute_fwd",
                        "cp_attention_merge", "adamw_step", "fp8_cast_transpose",
                        "grad_accumulate"}) {
    EXPECT_TRUE(emitted.count(n)) << n << " was not emitted by any scenario: the test lost coverage";
  }
}

}  // namespace
}  // namespace traintwin
