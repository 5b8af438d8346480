// Tests of the parameter sweep: enumeration against a brute-force validate_scenario loop (its
// reasons against the rules' messages, one thread against several), the memory verdict against the
// memory model, the ranking order, and the concurrent runner (input order, failures as error
// outcomes, no zombies). No SimGrid: evaluators here are fakes.
#include "sim/sweep.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <map>
#include <sstream>
#include <thread>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "sim/summary.hpp"
#include "sim/sweep_record.hpp"

namespace traintwin {
namespace {

using ::testing::HasSubstr;

/// A small GPT on 8 GPUs: 12 layers, h 256, 8 heads, s 128, B 16.
Scenario small_scenario(const std::string& extra_training = "") {
  const std::string yaml =
      "name: small\n"
      "model:\n  num_layers: 12\n  hidden_size: 256\n  num_attention_heads: 8\n"
      "  seq_length: 128\n  vocab_size: 1000\n"
      "training:\n  micro_batch_size: 1\n  global_batch_size: 16\n  precision: bf16\n" +
      extra_training + "cluster:\n  topology: none.yaml\n  num_gpus: 8\n";
  return parse_scenario(yaml, "small.yaml", ".");
}

/// No process left to reap: every child of this test process has been waited for.
void expect_no_children() {
  int status = 0;
  errno = 0;
  EXPECT_EQ(::waitpid(-1, &status, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST(Sweep, EnumerationEqualsBruteForceValidation) {
  const Scenario base = small_scenario();
  SweepAxes axes;
  axes.tp = {1, 2, 3, 4, 8};
  axes.pp = {1, 2, 3, 4};
  axes.vpp = {1, 2, 3};
  axes.mbs = {1, 2, 4};
  axes.recompute = {RecomputeGranularity::kNone, RecomputeGranularity::kSelective,
                    RecomputeGranularity::kFull};
  axes.sequence_parallel = {false, true};
  axes.distributed_optimizer = {false, true};
  const auto configs = enumerate_configurations(base, axes, 80e9);
  ASSERT_EQ(configs.size(), 5u * 4 * 3 * 3 * 3 * 2 * 2);

  // Brute force, in the documented order (the last axis varies fastest).
  size_t i = 0, valid = 0;
  for (int64_t tp : axes.tp) {
    for (int64_t pp : axes.pp) {
      for (int64_t vpp : axes.vpp) {
        for (int64_t mbs : axes.mbs) {
          for (RecomputeGranularity r : axes.recompute) {
            for (bool sp : axes.sequence_parallel) {
              for (bool d : axes.distributed_optimizer) {
                Scenario s = base;
                s.parallel.tensor_model_parallel_size = tp;
                s.parallel.pipeline_model_parallel_size = pp;
                s.parallel.virtual_pipeline_model_parallel_size = vpp;
                s.training.micro_batch_size = mbs;
                s.training.recompute_granularity = r;
                s.parallel.sequence_parallel = sp;
                s.training.use_distributed_optimizer = d;
                bool ok = 8 % (tp * pp) == 0;
                if (ok) {
                  s.parallel.data_parallel_size = 8 / (tp * pp);
                  try {
                    validate_scenario(s, "brute");
                  } catch (const ConfigError&) {
                    ok = false;
                  }
                }
                const SweepConfiguration& c = configs[i];
                SCOPED_TRACE(i);
                EXPECT_EQ(c.index, static_cast<int64_t>(i));
                EXPECT_EQ(c.valid, ok) << c.invalid_reason;
                EXPECT_EQ(c.invalid_reason.empty(), ok);
                EXPECT_EQ(c.scenario.parallel.tensor_model_parallel_size, tp);
                EXPECT_EQ(c.scenario.parallel.pipeline_model_parallel_size, pp);
                EXPECT_EQ(c.scenario.parallel.virtual_pipeline_model_parallel_size, vpp);
                EXPECT_EQ(c.scenario.training.micro_batch_size, mbs);
                EXPECT_EQ(c.scenario.training.recompute_granularity, r);
                EXPECT_EQ(c.scenario.parallel.sequence_parallel, sp);
                EXPECT_EQ(c.scenario.training.use_distributed_optimizer, d);
                if (ok) EXPECT_EQ(c.scenario.parallel.data_parallel_size, 8 / (tp * pp));
                if (sp && tp == 1 && 8 % pp == 0)
                  EXPECT_THAT(c.invalid_reason, HasSubstr("sequence_parallel"));
                if (8 % (tp * pp) != 0) {
                  EXPECT_THAT(c.invalid_reason, HasSubstr("cluster.num_gpus"));
                }
                valid += ok;
                ++i;
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(valid, 10u);
  EXPECT_LT(valid, configs.size());
}

// The rows' verdicts as values (first_broken_rule) carry validate_scenario's messages, and the
// enumeration on several threads gives the rows of one thread, field for field.
TEST(Sweep, EnumerationOnThreadsMatchesOneThreadAndTheRulesMessages) {
  const Scenario base = small_scenario();
  SweepAxes axes;
  axes.tp = {1, 2, 4, 8};
  axes.pp = {1, 2, 3, 4};
  axes.vpp = {1, 2, 3};
  axes.mbs = {1, 2, 4};
  axes.sequence_parallel = {false, true};
  axes.distributed_optimizer = {false, true};
  axes.data_parallel_sharding_strategy = {
      DataParallelShardingStrategy::kNoShard, DataParallelShardingStrategy::kOptim,
      DataParallelShardingStrategy::kOptimGradsParams};
  const auto one = enumerate_configurations(base, axes, 80e9, 1);
  const auto three = enumerate_configurations(base, axes, 80e9, 3);
  ASSERT_EQ(one.size(), 4u * 4 * 3 * 3 * 2 * 2 * 3);
  ASSERT_EQ(three.size(), one.size());
  size_t invalid = 0;
  for (size_t i = 0; i < one.size(); ++i) {
    SCOPED_TRACE(i);
    const SweepConfiguration& a = one[i];
    const SweepConfiguration& b = three[i];
    EXPECT_EQ(a.index, static_cast<int64_t>(i));
    EXPECT_EQ(b.index, a.index);
    EXPECT_EQ(b.valid, a.valid);
    EXPECT_EQ(b.invalid_reason, a.invalid_reason);
    EXPECT_EQ(b.adjustments, a.adjustments);
    EXPECT_EQ(b.peak_memory_bytes, a.peak_memory_bytes);
    EXPECT_EQ(b.memory_reserve_bytes, a.memory_reserve_bytes);
    EXPECT_EQ(b.memory_verdict, a.memory_verdict);
    EXPECT_EQ(b.excess_memory_bytes, a.excess_memory_bytes);
    EXPECT_EQ(b.scenario.parallel.tensor_model_parallel_size,
              a.scenario.parallel.tensor_model_parallel_size);
    EXPECT_EQ(b.scenario.training.data_parallel_sharding_strategy,
              a.scenario.training.data_parallel_sharding_strategy);
    if (a.valid || a.scenario.parallel.data_parallel_size == 0 ||
        a.invalid_reason.rfind("memory model: ", 0) == 0) {
      continue;
    }
    // A row the rules refuse: its reason is validate_scenario's message without the origin.
    ++invalid;
    try {
      validate_scenario(a.scenario, "origin");
      ADD_FAILURE() << "validate_scenario accepts an invalid row: " << a.invalid_reason;
    } catch (const ConfigError& e) {
      EXPECT_EQ("origin: " + a.invalid_reason, e.what());
    }
  }
  EXPECT_GT(invalid, 100u);
  EXPECT_THROW(enumerate_configurations(base, axes, 80e9, 0), InvalidArgument);
}

TEST(Sweep, EmptyAxesKeepTheScenarioValues) {
  Scenario base = small_scenario("  recompute_granularity: selective\n");
  const auto configs = enumerate_configurations(base, {}, 80e9);
  ASSERT_EQ(configs.size(), 1u);
  EXPECT_TRUE(configs[0].valid) << configs[0].invalid_reason;
  EXPECT_EQ(configs[0].scenario.training.recompute_granularity, RecomputeGranularity::kSelective);
  EXPECT_EQ(configs[0].scenario.parallel.data_parallel_size, 8);
}

// An uneven pipeline split of the base (core/pipeline_split.hpp) is kept in every combination and
// checked per layout: 10 layers + embedding + loss = 12 counted layers are valid exactly when PP
// divides 12 and v divides 12 / PP; the others are invalid naming the flag, and the valid ones'
// memory follows the split (stage 0 holds one layer less than stage 1).
TEST(Sweep, UnevenPipelineSplitOfTheBaseIsValidatedPerLayout) {
  Scenario base = small_scenario();
  base.model.num_layers = 10;
  base.parallel.account_for_embedding_in_pipeline_split = true;
  base.parallel.account_for_loss_in_pipeline_split = true;
  SweepAxes axes;
  axes.pp = {2, 4, 8};
  axes.vpp = {1, 2, 3};
  int valid = 0;
  for (const SweepConfiguration& c : enumerate_configurations(base, axes, 80e9)) {
    const int64_t pp = c.scenario.parallel.pipeline_model_parallel_size;
    const int64_t v = c.scenario.parallel.virtual_pipeline_model_parallel_size;
    EXPECT_TRUE(c.scenario.parallel.account_for_embedding_in_pipeline_split);
    // m = 16 / (1 x DP) micro-batches must be divisible by PP when interleaved: always here.
    const bool ok = 12 % pp == 0 && (12 / pp) % v == 0;
    EXPECT_EQ(c.valid, ok) << "pp " << pp << " v " << v << ": " << c.invalid_reason;
    if (!ok) {
      EXPECT_THAT(c.invalid_reason, HasSubstr("parallelism.account_for_embedding_in_pipeline_split"));
      continue;
    }
    ++valid;
    const std::vector<StageMemory> stages = memory_per_stage(c.scenario);
    EXPECT_EQ(stages[0].layers, 12 / pp - 1);
    EXPECT_EQ(stages[1].layers, pp == 2 ? 12 / pp - 1 : 12 / pp);
  }
  EXPECT_EQ(valid, 5);  // PP 2 with v 1, 2, 3; PP 4 with v 1, 3
}

TEST(Sweep, DependentSwitchesAreTurnedOffAndListed) {
  const Scenario base = small_scenario(
      "  use_distributed_optimizer: true\n  overlap_grad_reduce: true\n"
      "  overlap_param_gather: true\n");
  SweepAxes axes;
  axes.distributed_optimizer = {true, false};
  const auto configs = enumerate_configurations(base, axes, 80e9);
  ASSERT_EQ(configs.size(), 2u);
  EXPECT_TRUE(configs[0].valid);
  EXPECT_TRUE(configs[0].adjustments.empty());
  EXPECT_TRUE(configs[1].valid) << configs[1].invalid_reason;
  EXPECT_FALSE(configs[1].scenario.training.overlap_param_gather);
  ASSERT_EQ(configs[1].adjustments.size(), 1u);
  EXPECT_THAT(configs[1].adjustments[0], HasSubstr("training.overlap_param_gather"));
}

// What Megatron-LM does with switches a layout outgrows, for SP and the virtual pipeline size the
// base gives and no axis sweeps: SP off at TP 1; v re-derived from the base's layers per virtual
// stage (12 layers, PP 2 x v 3: 2 per virtual stage -> PP 3: v 2, PP 6: v 1, PP 1: v 1). Each
// change is listed; the layouts stay valid instead of "invalid" for an inherited switch.
TEST(Sweep, InheritedSequenceParallelAndVirtualPipelineFollowTheLayout) {
  Scenario base = small_scenario();
  base.parallel.tensor_model_parallel_size = 2;
  base.parallel.sequence_parallel = true;
  base.parallel.pipeline_model_parallel_size = 2;
  base.parallel.virtual_pipeline_model_parallel_size = 3;
  base.parallel.data_parallel_size = 2;
  base.training.global_batch_size = 48;
  validate_scenario(base, "base");
  SweepAxes axes;
  axes.tp = {1, 2};
  axes.pp = {1, 2, 3, 6};
  std::map<std::pair<int64_t, int64_t>, const SweepConfiguration*> by_layout;
  const auto configs = enumerate_configurations(base, axes, 80e9);
  for (const SweepConfiguration& c : configs) {
    by_layout[{c.scenario.parallel.tensor_model_parallel_size,
               c.scenario.parallel.pipeline_model_parallel_size}] = &c;
  }
  const std::map<int64_t, int64_t> v_of_pp = {{1, 1}, {2, 3}, {3, 2}, {6, 1}};
  for (const auto& [layout, c] : by_layout) {
    const auto [tp, pp] = layout;
    SCOPED_TRACE("TP " + std::to_string(tp) + " PP " + std::to_string(pp));
    EXPECT_EQ(c->scenario.parallel.sequence_parallel, tp > 1);
    EXPECT_EQ(c->scenario.parallel.virtual_pipeline_model_parallel_size, v_of_pp.at(pp));
    const size_t expected = (tp == 1 ? 1u : 0u) + (pp != 2 ? 1u : 0u);
    EXPECT_EQ(c->adjustments.size(), expected);
    if (tp == 1) {
      EXPECT_THAT(c->adjustments[0], HasSubstr("parallelism.sequence_parallel: true -> false"));
    }
    if (pp == 3) {
      EXPECT_THAT(c->adjustments.back(),
                  HasSubstr("parallelism.virtual_pipeline_model_parallel_size: 3 -> 2 (2 layers "
                            "per virtual stage kept"));
    }
  }
  // 8 GPUs: TP x PP must divide 8, so PP 3 and 6 are invalid for the cluster size only.
  for (const SweepConfiguration& c : configs) {
    const int64_t pp = c.scenario.parallel.pipeline_model_parallel_size;
    if (pp == 3 || pp == 6) {
      EXPECT_FALSE(c.valid);
      EXPECT_THAT(c.invalid_reason, HasSubstr("cluster.num_gpus: 8 is not divisible"));
    } else {
      EXPECT_TRUE(c.valid) << c.invalid_reason;
    }
  }
  // A swept axis is kept as given: sequence_parallel {true} at TP 1 stays and is invalid.
  axes.sequence_parallel = {true};
  axes.pp = {2};
  for (const SweepConfiguration& c : enumerate_configurations(base, axes, 80e9)) {
    if (c.scenario.parallel.tensor_model_parallel_size != 1) continue;
    EXPECT_TRUE(c.scenario.parallel.sequence_parallel);
    EXPECT_FALSE(c.valid);
    EXPECT_THAT(c.invalid_reason, HasSubstr("parallelism.sequence_parallel"));
  }
}

TEST(Sweep, BadAxesAreRejected) {
  const Scenario base = small_scenario();
  SweepAxes zero;
  zero.tp = {0};
  EXPECT_THROW(enumerate_configurations(base, zero, 80e9), InvalidArgument);
  SweepAxes twice;
  twice.pp = {2, 2};
  EXPECT_THROW(enumerate_configurations(base, twice, 80e9), InvalidArgument);
  EXPECT_THROW(enumerate_configurations(base, {}, 0), InvalidArgument);
}

// A scaling study: the GPU counts are the outermost axis, DP follows each (num_gpus / (TP x CP x
// PP)), the global batch stays the base's or is N x DP, a count the replica does not divide is
// invalid naming cluster.num_gpus, and every configuration carries its count.
TEST(Sweep, NumGpusAxisDerivesDataParallelismAndTheBatch) {
  const Scenario base = small_scenario();
  SweepAxes axes;
  axes.num_gpus = {8, 16, 12};
  axes.tp = {2, 4};
  const auto fixed = enumerate_configurations(base, axes, 80e9);
  ASSERT_EQ(fixed.size(), 6u);
  const int64_t want_gpus[] = {8, 8, 16, 16, 12, 12};
  const int64_t want_dp[] = {4, 2, 8, 4, 6, 3};
  for (size_t i = 0; i < fixed.size(); ++i) {
    const Scenario& s = fixed[i].scenario;
    EXPECT_EQ(s.cluster.num_gpus, want_gpus[i]) << i;
    EXPECT_EQ(s.parallel.data_parallel_size, want_dp[i]) << i;
    EXPECT_EQ(s.training.global_batch_size, 16) << i;  // fixed
    SweepRow row;
    row.config = fixed[i];
    EXPECT_EQ(sweep_row_json(row)["configuration"]["num_gpus"], want_gpus[i]);
  }
  // On 12 GPUs DP is 6 or 3, which the fixed global batch of 16 does not divide: invalid.
  EXPECT_FALSE(fixed[4].valid);
  EXPECT_FALSE(fixed[5].valid);
  EXPECT_THAT(fixed[4].invalid_reason, HasSubstr("global_batch_size"));

  axes.global_batch_size_per_dp = 4;
  const auto weak = enumerate_configurations(base, axes, 80e9);
  for (const SweepConfiguration& c : weak) {
    EXPECT_EQ(c.scenario.training.global_batch_size, 4 * c.scenario.parallel.data_parallel_size);
    EXPECT_TRUE(c.valid) << c.invalid_reason;
  }
  axes.num_gpus = {10};  // TP 4 does not divide 10
  const auto bad = enumerate_configurations(base, axes, 80e9);
  EXPECT_FALSE(bad[1].valid);
  EXPECT_THAT(bad[1].invalid_reason, HasSubstr("cluster.num_gpus: 10 is not divisible"));
  axes.global_batch_size_per_dp = -1;
  EXPECT_THROW(enumerate_configurations(base, axes, 80e9), InvalidArgument);
}

TEST(Sweep, OutOfMemoryMarkingEqualsTheMemoryModel) {
  const Scenario base = small_scenario();
  SweepAxes axes;
  axes.tp = {1, 2, 4};
  axes.pp = {1, 2, 4};
  axes.mbs = {1, 2, 4};
  axes.recompute = {RecomputeGranularity::kNone, RecomputeGranularity::kFull};
  // Capacity between the smallest and the largest peak so that both verdicts occur.
  const auto probe = enumerate_configurations(base, axes, 1e15);
  std::vector<double> peaks;
  for (const auto& c : probe) {
    if (c.valid) peaks.push_back(c.peak_memory_bytes);
  }
  ASSERT_GE(peaks.size(), 4u);
  std::sort(peaks.begin(), peaks.end());
  const double capacity = peaks[peaks.size() / 2];
  const auto configs = enumerate_configurations(base, axes, capacity);
  int fits = 0, oom = 0;
  for (const auto& c : configs) {
    SCOPED_TRACE(c.index);
    EXPECT_EQ(c.memory_capacity_bytes, capacity);
    if (!c.valid) {
      EXPECT_EQ(c.peak_memory_bytes, 0);
      EXPECT_FALSE(c.fits());
      continue;
    }
    double peak = 0;
    for (const StageMemory& m : memory_per_stage(c.scenario))
      peak = std::max(peak, m.total_bytes());
    EXPECT_DOUBLE_EQ(c.peak_memory_bytes, peak);
    EXPECT_DOUBLE_EQ(c.excess_memory_bytes, std::max(0.0, peak - capacity));
    EXPECT_EQ(c.fits(), peak <= capacity);
    (c.fits() ? fits : oom)++;
  }
  EXPECT_GT(fits, 0);
  EXPECT_GT(oom, 0);
}

/// A fake evaluator: tokens/s chosen per (TP, PP, mbs).
Evaluator fake_evaluator(std::map<std::tuple<int64_t, int64_t, int64_t>, double> tokens) {
  return [tokens](const Scenario& s) {
    const auto key =
        std::make_tuple(s.parallel.tensor_model_parallel_size,
                        s.parallel.pipeline_model_parallel_size, s.training.micro_batch_size);
    SweepEvaluation e;
    e.mode = "fake";
    e.summary.tokens_per_s = tokens.at(key);
    e.summary.iteration_time_s = 1.0 / tokens.at(key);
    return e;
  };
}

TEST(Sweep, RankingByTokensPerSecondWithStableTieOrder) {
  const Scenario base = small_scenario();
  SweepAxes axes;
  axes.tp = {1, 2};
  axes.pp = {1, 2};
  axes.mbs = {1, 2};
  const auto configs = enumerate_configurations(base, axes, 1e15);
  ASSERT_EQ(configs.size(), 8u);
  for (const auto& c : configs) ASSERT_TRUE(c.valid) << c.invalid_reason;
  // Indices: (tp, pp, mbs) = 0 (1,1,1) 1 (1,1,2) 2 (1,2,1) 3 (1,2,2) 4 (2,1,1) 5 (2,1,2)
  // 6 (2,2,1) 7 (2,2,2). Replica sizes: 1 1 2 2 2 2 4 4.
  const Evaluator eval = fake_evaluator({{{1, 1, 1}, 100},
                                         {{1, 1, 2}, 300},
                                         {{1, 2, 1}, 300},  // ties with 1: larger replica
                                         {{1, 2, 2}, 200},
                                         {{2, 1, 1}, 200},  // ties with 3, same replica: index
                                         {{2, 1, 2}, 500},
                                         {{2, 2, 1}, 200},  // ties with 3 and 4: larger replica
                                         {{2, 2, 2}, 50}});
  SweepOptions options;
  options.isolate = false;
  const auto rows = run_sweep(configs, eval, options);
  std::vector<int64_t> order;
  for (const auto& r : rows) {
    EXPECT_EQ(r.status, SweepStatus::kRanked);
    EXPECT_EQ(r.rank, static_cast<int64_t>(order.size()) + 1);
    order.push_back(r.config.index);
  }
  EXPECT_EQ(order, (std::vector<int64_t>{5, 1, 2, 3, 4, 6, 0, 7}));
  EXPECT_DOUBLE_EQ(rows[0].tokens_per_s, 500);
  EXPECT_DOUBLE_EQ(rows[0].evaluation->summary.iteration_time_s, 1.0 / 500);
  EXPECT_DOUBLE_EQ(sweep_row_json(rows[0])["metrics"]["iteration_time_s"].get<double>(), 1.0 / 500);

  // In-process evaluations shared out to 3 worker processes: same rows.
  options.jobs = 3;
  std::vector<int64_t> progress_done;
  options.progress = [&progress_done](const SweepProgress& p) { progress_done.push_back(p.done); };
  const auto shared = run_sweep(configs, eval, options);
  ASSERT_EQ(shared.size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(shared[i].config.index, order[i]);
    EXPECT_DOUBLE_EQ(shared[i].tokens_per_s, rows[i].tokens_per_s);
  }
  ASSERT_FALSE(progress_done.empty());
  EXPECT_EQ(progress_done.front(), 0);
  EXPECT_EQ(progress_done.back(), 8);
  options.progress = nullptr;
  expect_no_children();

  // The same through forked children: same order, the evaluations read back whole.
  options.isolate = true;
  options.jobs = 3;
  const auto forked = run_sweep(configs, eval, options);
  ASSERT_EQ(forked.size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(forked[i].config.index, order[i]);
    ASSERT_TRUE(forked[i].evaluation.has_value());
    EXPECT_EQ(forked[i].evaluation->mode, "fake");
    EXPECT_DOUBLE_EQ(forked[i].evaluation->summary.iteration_time_s,
                     rows[i].evaluation->summary.iteration_time_s);
  }
  expect_no_children();
}

// The CP and FP8 axes: CP sizes derive DP as num_gpus / (TP x CP x PP), a CP that does not
// split the sequence into 2 x CP chunks is invalid with its rule, and FP8 on keeps the base's
// format (hybrid when the base has none) while off removes it.
TEST(Sweep, ContextParallelAndFp8Axes) {
  const Scenario base =
      load_scenario(std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/llama3.1-8b-h100-8.yaml");
  SweepAxes axes;
  axes.cp = {1, 2, 8};
  axes.fp8 = {false, true};
  const auto configs = enumerate_configurations(base, axes, 80e9);
  ASSERT_EQ(configs.size(), 6u);
  for (const auto& c : configs) {
    const int64_t cp = c.scenario.parallel.context_parallel_size;
    EXPECT_EQ(c.scenario.parallel.data_parallel_size, 8 / cp);
    EXPECT_EQ(c.scenario.training.fp8(), c.index % 2 == 1);
    if (c.scenario.training.fp8()) {
      EXPECT_EQ(*c.scenario.training.fp8_format, Fp8Format::kHybrid);
    }
  }
  // CP 8 with DP 1: global batch 128 / (1 x 1) is fine; all valid.
  for (const auto& c : configs) EXPECT_TRUE(c.valid) << c.invalid_reason;
  Scenario odd = base;
  odd.model.seq_length = 8200;  // 8200 % 16 != 0
  axes.fp8 = {};
  const auto bad = enumerate_configurations(odd, axes, 80e9);
  EXPECT_TRUE(bad[0].valid) << bad[0].invalid_reason;
  EXPECT_FALSE(bad[2].valid);
  EXPECT_NE(bad[2].invalid_reason.find("2 x context_parallel_size = 16"), std::string::npos)
      << bad[2].invalid_reason;
}

TEST(Sweep, ExpertParallelAxes) {
  // Qwen3-30B-A3B on 16 GPUs: TP 4 x PP 2 x DP 2, 8 ranks per stage, 128 experts.
  const Scenario base =
      load_scenario(std::string(TRAINTWIN_SOURCE_DIR) + "/scenarios/qwen3-30b-a3b-h100-16.yaml");
  SweepAxes axes;
  axes.ep = {1, 2, 4, 8, 16};
  axes.etp = {1, 2};
  const auto configs = enumerate_configurations(base, axes, 80e9);
  ASSERT_EQ(configs.size(), 10u);
  for (const auto& c : configs) {
    const ParallelConfig& p = c.scenario.parallel;
    EXPECT_EQ(p.expert_model_parallel_size, axes.ep[static_cast<size_t>(c.index / 2)]);
    EXPECT_EQ(p.expert_tp(), axes.etp[static_cast<size_t>(c.index % 2)]);
    // Parallel folding: valid exactly when ETP x EP divides TP x CP x DP = 8.
    const bool folds = 8 % (p.expert_model_parallel_size * p.expert_tp()) == 0;
    EXPECT_EQ(c.valid, folds) << c.invalid_reason;
    if (!folds) {
      EXPECT_THAT(c.invalid_reason, HasSubstr("does not divide tensor_model_parallel_size x "
                                              "context_parallel_size x data_parallel_size"));
    } else {
      // The memory model sees the layout: fewer local experts, less expert memory.
      EXPECT_GT(c.peak_memory_bytes, 0);
    }
  }
  EXPECT_GT(configs[0].peak_memory_bytes, configs[4].peak_memory_bytes);  // EP 1 vs EP 4, ETP 1
  // A dense model: EP > 1 is skipped with its reason.
  SweepAxes dense_axes;
  dense_axes.ep = {1, 2};
  const auto dense = enumerate_configurations(small_scenario(), dense_axes, 80e9);
  EXPECT_TRUE(dense[0].valid) << dense[0].invalid_reason;
  EXPECT_FALSE(dense[1].valid);
  EXPECT_THAT(dense[1].invalid_reason,
              HasSubstr("parallelism.expert_model_parallel_size: needs model.num_moe_experts"));
}

// The pipeline schedule as an axis (the fastest-varying one): each configuration runs its
// schedule, the memory model follows it (ZB-H1 holds p activation sets on every stage, ZB-H2
// 2p - 1), and a zero-bubble schedule with VPP > 1 is invalid with its rule.
TEST(Sweep, PipelineScheduleAxis) {
  const Scenario base = load_scenario(std::string(TRAINTWIN_SOURCE_DIR) +
                                      "/scenarios/gpt3-175b-h100-1024.yaml");  // PP 16, v 1
  SweepAxes axes;
  axes.vpp = {1, 2};
  axes.pipeline_schedule = {PipelineScheduleKind::k1F1B, PipelineScheduleKind::kZbH1,
                            PipelineScheduleKind::kZbH2};
  const auto configs = enumerate_configurations(base, axes, 1e15);
  ASSERT_EQ(configs.size(), 6u);
  for (const auto& c : configs) {
    EXPECT_EQ(c.scenario.parallel.pipeline_schedule,
              axes.pipeline_schedule[static_cast<size_t>(c.index % 3)]);
  }
  EXPECT_TRUE(configs[0].valid && configs[1].valid && configs[2].valid && configs[3].valid);
  for (size_t i : {4u, 5u}) {
    EXPECT_FALSE(configs[i].valid);
    EXPECT_THAT(configs[i].invalid_reason,
                HasSubstr("needs parallelism.virtual_pipeline_model_parallel_size: 1, got 2"));
  }
  // Peak memory: stage 0 holds 16 activation sets under 1F1B and ZB-H1, 31 under ZB-H2.
  EXPECT_GT(configs[2].peak_memory_bytes, configs[1].peak_memory_bytes);
  EXPECT_GE(configs[1].peak_memory_bytes, configs[0].peak_memory_bytes);
  EXPECT_EQ(parse_sweep_schedules("--pipeline-schedule", "1f1b,zb-h1,zb-h2"),
            axes.pipeline_schedule);
  EXPECT_EQ(parse_sweep_schedules("--pipeline-schedule", "1f1b,dualpipe"),
            (std::vector<PipelineScheduleKind>{PipelineScheduleKind::k1F1B,
                                               PipelineScheduleKind::kDualPipe}));
  try {
    parse_sweep_schedules("--pipeline-schedule", "1f1b,dualpipe-v");
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("--pipeline-schedule: 'dualpipe-v' is not allowed (allowed: "
                                    "gpipe, 1f1b, zb-h1, zb-h2, zb-v, dualpipe, dualpipev, "
                                    "comma-separated)"));
  }
  EXPECT_THROW(parse_sweep_schedules("--pipeline-schedule", "zb-h1,zb-h1"), ConfigError);
}

// DualPipe on the schedule axis: a configuration that does not sweep VPP gets its two parameter
// copies (v = 2, each chunk a whole stage of 96 / 16 layers), is valid, and holds more memory
// than 1F1B (DeepSeek-V3 Table 2: 2x the parameters, PP + 1 activation sets).
TEST(Sweep, DualPipeOnTheScheduleAxis) {
  const Scenario base = load_scenario(std::string(TRAINTWIN_SOURCE_DIR) +
                                      "/scenarios/gpt3-175b-h100-1024.yaml");  // PP 16, m 192
  SweepAxes axes;
  axes.pipeline_schedule = {PipelineScheduleKind::k1F1B, PipelineScheduleKind::kDualPipe};
  const auto configs = enumerate_configurations(base, axes, 1e15);
  ASSERT_EQ(configs.size(), 2u);
  ASSERT_TRUE(configs[0].valid && configs[1].valid) << configs[1].invalid_reason;
  EXPECT_EQ(configs[1].scenario.parallel.virtual_pipeline_model_parallel_size, 2);
  bool adjusted = false;
  for (const std::string& a : configs[1].adjustments) {
    adjusted = adjusted || a.find("virtual_pipeline_model_parallel_size: 1 -> 2 (dualpipe") !=
                               std::string::npos;
  }
  EXPECT_TRUE(adjusted);
  EXPECT_GT(configs[1].peak_memory_bytes, configs[0].peak_memory_bytes);
}

TEST(Sweep, RowOrderGroupsOutOfMemoryErrorsAndInvalid) {
  const Scenario base = small_scenario();
  SweepAxes axes;
  axes.tp = {1, 3, 2};  // 3 is invalid (8 % 3)
  axes.mbs = {1, 2};
  auto configs = enumerate_configurations(base, axes, 1e15);
  ASSERT_EQ(configs.size(), 6u);
  // Make mbs 2 out of memory by hand: two OOM rows with different excesses.
  configs[1].excess_memory_bytes = 2e9;  // tp 1 mbs 2
  configs[5].excess_memory_bytes = 1e9;  // tp 2 mbs 2
  int calls = 0;
  const Evaluator eval = [&calls](const Scenario& s) {
    ++calls;
    if (s.parallel.tensor_model_parallel_size == 2) throw Error("evaluation failed on purpose");
    SweepEvaluation e;
    e.summary.tokens_per_s = 10.0;
    return e;
  };
  SweepOptions options;
  options.isolate = false;
  const auto rows = run_sweep(configs, eval, options);
  EXPECT_EQ(calls, 2);  // the OOM ones are not evaluated
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_EQ(rows[0].status, SweepStatus::kRanked);
  EXPECT_EQ(rows[0].config.index, 0);
  EXPECT_EQ(rows[1].status, SweepStatus::kOutOfMemory);
  EXPECT_EQ(rows[1].config.index, 5);  // 1 GB over comes first
  EXPECT_EQ(rows[2].status, SweepStatus::kOutOfMemory);
  EXPECT_EQ(rows[2].config.index, 1);
  EXPECT_FALSE(rows[2].evaluation.has_value());
  EXPECT_EQ(rows[3].status, SweepStatus::kError);
  EXPECT_EQ(rows[3].config.index, 4);
  EXPECT_THAT(rows[3].error, HasSubstr("on purpose"));
  EXPECT_EQ(rows[4].status, SweepStatus::kInvalid);
  EXPECT_EQ(rows[5].status, SweepStatus::kInvalid);
  EXPECT_EQ(rows[4].config.index, 2);
  EXPECT_EQ(rows[5].config.index, 3);
  for (size_t i = 1; i < rows.size(); ++i) EXPECT_EQ(rows[i].rank, 0);

  options.evaluate_out_of_memory = true;
  calls = 0;
  const auto with_oom = run_sweep(configs, eval, options);
  EXPECT_EQ(calls, 4);
  std::map<int64_t, const SweepRow*> by_index;
  for (const auto& r : with_oom) by_index[r.config.index] = &r;
  EXPECT_EQ(by_index[1]->status, SweepStatus::kOutOfMemory);
  EXPECT_DOUBLE_EQ(by_index[1]->tokens_per_s, 10.0);
  EXPECT_TRUE(by_index[1]->evaluation.has_value());
  EXPECT_EQ(by_index[5]->status, SweepStatus::kError);  // evaluated, and failed
  EXPECT_DOUBLE_EQ(by_index[5]->config.excess_memory_bytes, 1e9);
}

TEST(Sweep, AnEvaluationWithoutPositiveTokensPerSecondGivesAnErrorRow) {
  const auto configs = enumerate_configurations(small_scenario(), {}, 1e15);
  SweepOptions options;
  options.isolate = false;
  const auto rows = run_sweep(
      configs, [](const Scenario&) { return SweepEvaluation{}; }, options);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].status, SweepStatus::kError);
  EXPECT_THAT(rows[0].error, HasSubstr("tokens_per_s = 0"));

  // In a forked child, a crashing evaluation is an error row too.
  options.isolate = true;
  const auto crashed = run_sweep(
      configs, [](const Scenario&) -> nlohmann::ordered_json { std::abort(); }, options);
  ASSERT_EQ(crashed.size(), 1u);
  EXPECT_EQ(crashed[0].status, SweepStatus::kError);
  EXPECT_THAT(crashed[0].error, HasSubstr("signal"));
  expect_no_children();
}

TEST(Sweep, ConcurrentRunnerKeepsInputOrderAndTurnsFailuresIntoOutcomes) {
  std::vector<std::function<std::string()>> work;
  for (int i = 0; i < 8; ++i) {
    work.push_back([i] {
      // Later jobs finish first.
      std::this_thread::sleep_for(std::chrono::milliseconds(10 * (8 - i)));
      if (i == 2) throw Error("job 2 throws");
      if (i == 4) std::abort();
      if (i == 5) ::_exit(7);
      return "job " + std::to_string(i) + std::string(100000, 'x');  // larger than a pipe buffer
    });
  }
  std::vector<SweepProgress> seen;
  const auto out =
      run_isolated_concurrently(work, 3, [&seen](const SweepProgress& p) { seen.push_back(p); });
  ASSERT_EQ(out.size(), 8u);
  for (int i : {0, 1, 3, 6, 7}) {
    SCOPED_TRACE(i);
    EXPECT_TRUE(out[i].ok) << out[i].error;
    EXPECT_EQ(out[i].output.substr(0, 6), "job " + std::to_string(i) + "x");
    EXPECT_EQ(out[i].output.size(), 6u + 99999u);
  }
  EXPECT_FALSE(out[2].ok);
  EXPECT_EQ(out[2].error, "job 2 throws");
  EXPECT_FALSE(out[4].ok);
  EXPECT_THAT(out[4].error, HasSubstr("signal " + std::to_string(SIGABRT)));
  EXPECT_FALSE(out[5].ok);
  EXPECT_THAT(out[5].error, HasSubstr("status 7"));
  // Progress: once at 0, then after every job; done increases to total.
  ASSERT_EQ(seen.size(), 9u);
  for (size_t k = 0; k < seen.size(); ++k) {
    EXPECT_EQ(seen[k].done, static_cast<int64_t>(k));
    EXPECT_EQ(seen[k].total, 8);
  }
  EXPECT_GT(seen.back().rate_per_s, 0);
  EXPECT_EQ(seen.back().eta_s, 0);
  expect_no_children();
}

TEST(Sweep, ConcurrentRunnerRunsJobsAtOnce) {
  std::vector<std::function<std::string()>> work(4, [] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return std::string("done");
  });
  const auto t0 = std::chrono::steady_clock::now();
  const auto out = run_isolated_concurrently(work, 4);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const auto& o : out) EXPECT_EQ(o.output, "done");
  EXPECT_LT(s, 1.0);  // 4 x 0.3 s one after the other would take 1.2 s
  expect_no_children();
}

TEST(Sweep, AThrowingProgressCallbackLeavesNoZombies) {
  std::vector<std::function<std::string()>> work(6, [] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return std::string("ok");
  });
  int calls = 0;
  EXPECT_THROW(run_isolated_concurrently(work, 3,
                                         [&calls](const SweepProgress& p) {
                                           ++calls;
                                           if (p.done == 1) throw Error("stop");
                                         }),
               Error);
  EXPECT_EQ(calls, 2);
  expect_no_children();
  EXPECT_THROW(run_isolated_concurrently(work, 0), InvalidArgument);
}

// Speculative work (sim/multi_job.cpp): a job that would sleep for a minute is killed when a
// finished job says so, a waiting one never starts, and both read "cancelled".
TEST(Sweep, CancelledJobsAreKilledOrNeverStarted) {
  std::vector<std::function<std::string()>> work = {
      [] {
        std::this_thread::sleep_for(std::chrono::seconds(60));
        return std::string("slept");
      },
      [] { return std::string("quick"); }, [] { return std::string("never"); }};
  const auto t0 = std::chrono::steady_clock::now();
  const auto out = run_isolated_concurrently(
      work, 2, {}, [](const std::vector<IsolatedOutcome>& got) {
        return got[1].ok ? std::vector<size_t>{0, 2} : std::vector<size_t>{};
      });
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
  EXPECT_EQ(out[0].error, "cancelled");
  EXPECT_EQ(out[1].output, "quick");
  EXPECT_EQ(out[2].error, "cancelled");
  EXPECT_FALSE(out[0].ok || out[2].ok);
  expect_no_children();
}

// The optimizer offload axis on the small GPT over DP 8 (no distributed optimizer in the base):
// on turns the distributed optimizer on (listed) and moves the optimizer state to the host, so
// the GPU's peak falls by its 12/8 bytes per parameter (the whole shard offloaded, fraction 1)
// against the same ZeRO-1 layout; off keeps the base. With the distributed-optimizer axis swept
// off, the offloaded row breaks the scenario rule instead; crossed with Megatron-FSDP ZeRO-3
// the rule refuses it too. A base fraction of 0.5 is kept when on and reset (listed) when off.
// The records carry the switch and the fraction, and read them back.
TEST(Sweep, OptimizerCpuOffloadAxis) {
  const Scenario base = small_scenario();
  ASSERT_FALSE(base.training.use_distributed_optimizer);
  SweepAxes axes;
  axes.optimizer_cpu_offload = {false, true};
  axes.distributed_optimizer = {true};
  const auto zero1 = enumerate_configurations(base, axes, 1e15);
  ASSERT_EQ(zero1.size(), 2u);
  ASSERT_TRUE(zero1[0].valid && zero1[1].valid) << zero1[1].invalid_reason;
  EXPECT_TRUE(zero1[1].scenario.training.optimizer_cpu_offload);
  EXPECT_FALSE(zero1[0].scenario.training.optimizer_cpu_offload);
  const StageMemory on_gpu = memory_per_stage(zero1[0].scenario).front();
  const StageMemory offloaded = memory_per_stage(zero1[1].scenario).front();
  EXPECT_LT(offloaded.optimizer_bytes, on_gpu.optimizer_bytes);
  EXPECT_GT(offloaded.host_optimizer_bytes, 0);
  EXPECT_DOUBLE_EQ(zero1[0].peak_memory_bytes - zero1[1].peak_memory_bytes,
                   on_gpu.optimizer_bytes - offloaded.optimizer_bytes);

  axes.distributed_optimizer = {};
  const auto adjusted = enumerate_configurations(base, axes, 1e15);
  EXPECT_TRUE(adjusted[0].adjustments.empty());
  EXPECT_FALSE(adjusted[0].scenario.training.use_distributed_optimizer);
  ASSERT_TRUE(adjusted[1].valid) << adjusted[1].invalid_reason;
  ASSERT_EQ(adjusted[1].adjustments.size(), 1u);
  EXPECT_THAT(adjusted[1].adjustments[0],
              HasSubstr("training.use_distributed_optimizer: false -> true (needed by "
                        "training.optimizer_cpu_offload"));
  axes.distributed_optimizer = {false};
  const auto swept_off = enumerate_configurations(base, axes, 1e15);
  EXPECT_FALSE(swept_off[1].valid);
  EXPECT_THAT(swept_off[1].invalid_reason,
              HasSubstr("training.optimizer_cpu_offload: true needs "
                        "training.use_distributed_optimizer"));
  SweepAxes crossed;
  crossed.optimizer_cpu_offload = {true};
  crossed.data_parallel_sharding_strategy = {DataParallelShardingStrategy::kOptimGradsParams};
  const auto fsdp = enumerate_configurations(base, crossed, 1e15);
  EXPECT_FALSE(fsdp[0].valid);
  EXPECT_THAT(fsdp[0].invalid_reason,
              HasSubstr("training.optimizer_cpu_offload: true with training.use_megatron_fsdp"));

  Scenario half = base;
  half.training.use_distributed_optimizer = true;
  half.training.optimizer_cpu_offload = true;
  half.training.optimizer_offload_fraction = 0.5;
  SweepAxes both;
  both.optimizer_cpu_offload = {false, true};
  const auto h = enumerate_configurations(half, both, 1e15);
  ASSERT_TRUE(h[0].valid && h[1].valid) << h[0].invalid_reason;
  EXPECT_EQ(h[0].scenario.training.optimizer_offload_fraction, 1.0);
  ASSERT_EQ(h[0].adjustments.size(), 1u);
  EXPECT_THAT(h[0].adjustments[0], HasSubstr("training.optimizer_offload_fraction: 0.5 -> 1"));
  EXPECT_EQ(h[1].scenario.training.optimizer_offload_fraction, 0.5);
  EXPECT_TRUE(h[1].adjustments.empty());

  std::vector<SweepRow> rows;
  for (const auto& c : h) rows.push_back(SweepRow{c, SweepStatus::kOutOfMemory});
  const auto j = sweep_json(rows)["rows"];
  EXPECT_EQ(j[1]["configuration"]["optimizer_cpu_offload"], true);
  EXPECT_EQ(j[1]["configuration"]["optimizer_offload_fraction"], 0.5);
  EXPECT_EQ(j[0]["configuration"]["optimizer_cpu_offload"], false);
  const auto back = read_sweep_json(sweep_json(rows), "sweep.json");
  EXPECT_TRUE(back[1].configuration.optimizer_cpu_offload);
  EXPECT_EQ(back[1].configuration.optimizer_offload_fraction, 0.5);
  EXPECT_FALSE(back[0].configuration.optimizer_cpu_offload);
  axes.optimizer_cpu_offload = {true, true};
  EXPECT_THROW(enumerate_configurations(base, axes, 1e15), InvalidArgument);
}

// With CPU offload the sweep judges the host's memory too (the topology's
// gpu.host_link.host_memory, passed to the enumeration): the offloaded row's host bytes are the
// memory model's (16 bytes per offloaded parameter of the shard, the largest stage's); a host of
// twice that holds it, one of 0.9 x that does not: the row is out of memory (ranked after the
// fitting ones, not evaluated) with its host excess and a reason naming the key, in sweep.json
// too. Between the at-risk share and the capacity it still fits. Without a host capacity (0)
// nothing is checked; the row without offload has no host bytes.
TEST(Sweep, CpuOffloadIsJudgedOnHostMemory) {
  Scenario base = small_scenario();
  base.training.use_distributed_optimizer = true;
  SweepAxes axes;
  axes.optimizer_cpu_offload = {false, true};
  const auto unchecked = enumerate_configurations(base, axes, 1e15);
  ASSERT_TRUE(unchecked[0].valid && unchecked[1].valid) << unchecked[1].invalid_reason;
  EXPECT_EQ(unchecked[0].host_memory_bytes, 0);
  double host = 0;
  for (const StageMemory& m : memory_per_stage(unchecked[1].scenario)) {
    host = std::max(host, m.host_total_bytes());
  }
  ASSERT_GT(host, 0);
  EXPECT_EQ(unchecked[1].host_memory_bytes, host);
  EXPECT_EQ(unchecked[1].host_memory_capacity_bytes, 0);
  EXPECT_TRUE(unchecked[1].fits());

  const auto roomy = enumerate_configurations(base, axes, 1e15, 1, {}, 2 * host);
  EXPECT_TRUE(roomy[1].fits());
  EXPECT_EQ(roomy[1].host_excess_memory_bytes, 0);
  EXPECT_EQ(host_memory_reason(roomy[1]), "");
  const auto at_risk = enumerate_configurations(base, axes, 1e15, 1, {},
                                                host / (0.5 * (1 + kMemoryAtRiskShare)));
  EXPECT_TRUE(at_risk[1].fits());

  const auto tight = enumerate_configurations(base, axes, 1e15, 1, {}, 0.9 * host);
  EXPECT_TRUE(tight[0].fits()) << "no offload, no host bytes";
  ASSERT_TRUE(tight[1].valid);
  EXPECT_FALSE(tight[1].fits());
  EXPECT_DOUBLE_EQ(tight[1].host_excess_memory_bytes, 0.1 * host);
  EXPECT_EQ(tight[1].excess_memory_bytes, 0) << "the GPU holds it";
  EXPECT_THAT(host_memory_reason(tight[1]),
              ::testing::AllOf(HasSubstr("host memory:"), HasSubstr("gpu.host_link.host_memory")));
  SweepOptions options;
  options.isolate = false;
  int evaluated = 0;
  const Evaluator eval = [&evaluated](const Scenario&) {
    ++evaluated;
    SweepEvaluation e;
    e.mode = "test";
    e.summary.tokens_per_s = 1;
    e.summary.iteration_time_s = 1;
    return e;
  };
  const auto rows = run_sweep(tight, eval, options);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(evaluated, 1);
  EXPECT_EQ(rows[0].status, SweepStatus::kRanked);
  EXPECT_EQ(rows[1].status, SweepStatus::kOutOfMemory);
  EXPECT_TRUE(rows[1].config.scenario.training.optimizer_cpu_offload);
  const auto j = sweep_json(rows)["rows"];
  EXPECT_THAT(j[1]["reason"].get<std::string>(), HasSubstr("gpu.host_link.host_memory"));
  EXPECT_TRUE(j[0]["reason"].is_null());
  EXPECT_THROW(enumerate_configurations(base, axes, 1e15, 1, {}, -1), InvalidArgument);
}

// The sharding axis on the small GPT over DP 8 (no distributed optimizer in the base): optim,
// optim_grads and optim_grads_params turn Megatron-FSDP on and the distributed optimizer with
// it, each change listed; no_shard keeps the plain layout (here DDP). Each stage shards more, so
// the peak memory falls: (2 + 2 + K), 2 + 2 + K/8, 2 + (2 + K)/8 (+ a layer's gradients),
// (2 + 2 + K)/8 (+ two layers' weights). With the distributed-optimizer axis swept off, the
// FSDP rows break the scenario rule instead, naming it. sweep.csv carries the strategy.
TEST(Sweep, DataParallelShardingStrategyAxis) {
  const Scenario base = small_scenario();
  SweepAxes axes;
  axes.data_parallel_sharding_strategy =
      parse_sweep_sharding_strategies("--data-parallel-sharding-strategy",
                                      "no_shard,optim,optim_grads,optim_grads_params");
  const auto configs = enumerate_configurations(base, axes, 1e15);
  ASSERT_EQ(configs.size(), 4u);
  for (const auto& c : configs) {
    ASSERT_TRUE(c.valid) << c.invalid_reason;
    EXPECT_EQ(c.scenario.training.zero_stage(), c.index);
    EXPECT_EQ(c.scenario.training.use_megatron_fsdp, c.index > 0);
    EXPECT_EQ(c.scenario.training.use_distributed_optimizer, c.index > 0);
    if (c.index == 0) {
      EXPECT_TRUE(c.adjustments.empty());
    } else {
      ASSERT_EQ(c.adjustments.size(), 2u);
      EXPECT_THAT(c.adjustments[0], HasSubstr("training.use_megatron_fsdp: false -> true"));
      EXPECT_THAT(c.adjustments[1], HasSubstr("training.use_distributed_optimizer: false -> true"));
    }
  }
  for (size_t i = 1; i < 4; ++i) {
    EXPECT_LT(configs[i].peak_memory_bytes, configs[i - 1].peak_memory_bytes) << i;
  }
  axes.distributed_optimizer = {false};
  const auto swept_off = enumerate_configurations(base, axes, 1e15);
  EXPECT_TRUE(swept_off[0].valid);
  EXPECT_FALSE(swept_off[2].valid);
  EXPECT_THAT(swept_off[2].invalid_reason,
              HasSubstr("training.use_megatron_fsdp: true needs training.use_distributed_optimizer"));

  std::vector<SweepRow> rows;
  for (const auto& c : configs) rows.push_back(SweepRow{c, SweepStatus::kOutOfMemory});
  const auto j = sweep_json(rows)["rows"];
  EXPECT_EQ(j[3]["configuration"]["data_parallel_sharding_strategy"], "optim_grads_params");
  EXPECT_EQ(j[3]["configuration"]["zero_stage"], 3);
  EXPECT_EQ(j[0]["configuration"]["use_megatron_fsdp"], false);
  const std::string csv = sweep_csv(rows);
  EXPECT_THAT(csv, HasSubstr("configuration.data_parallel_sharding_strategy"));
  EXPECT_THAT(csv, HasSubstr(",optim_grads,2,1,"));  // strategy, zero_stage, instances
  const auto back = read_sweep_json(sweep_json(rows), "sweep.json");
  EXPECT_EQ(back[2].configuration.data_parallel_sharding_strategy,
            DataParallelShardingStrategy::kOptimGrads);
  // The HSDP axis on DP 8 with ZeRO-3: 2 instances shard over 4 ranks (more memory than over
  // 8), 3 do not divide DP x CP = 8 (the rule's message), and the records carry the count.
  SweepAxes hsdp;
  hsdp.data_parallel_sharding_strategy = {DataParallelShardingStrategy::kOptimGradsParams};
  hsdp.num_distributed_optimizer_instances = {1, 2, 3};
  const auto h = enumerate_configurations(base, hsdp, 1e15);
  ASSERT_EQ(h.size(), 3u);
  ASSERT_TRUE(h[0].valid && h[1].valid) << h[1].invalid_reason;
  EXPECT_EQ(h[1].scenario.data_parallel_shard_size(), 4);
  EXPECT_GT(h[1].peak_memory_bytes, h[0].peak_memory_bytes);
  EXPECT_FALSE(h[2].valid);
  EXPECT_THAT(h[2].invalid_reason,
              HasSubstr("training.num_distributed_optimizer_instances: 3 does not divide "
                        "data_parallel_size x context_parallel_size = 8 x 1 = 8"));
  EXPECT_EQ(sweep_json({SweepRow{h[1], SweepStatus::kOutOfMemory}})["rows"][0]["configuration"]
                      ["num_distributed_optimizer_instances"],
            2);
  hsdp.num_distributed_optimizer_instances = {2, 2};
  EXPECT_THROW(enumerate_configurations(base, hsdp, 1e15), InvalidArgument);
  // A ZeRO-3 base's unit schedule (no reshard, prefetch depth 2) is kept at ZeRO-3 and reset,
  // each change listed, below it.
  Scenario zero3 = base;
  zero3.training.use_distributed_optimizer = true;
  zero3.training.use_megatron_fsdp = true;
  zero3.training.data_parallel_sharding_strategy = DataParallelShardingStrategy::kOptimGradsParams;
  zero3.training.reshard_after_forward = false;
  zero3.training.fsdp_prefetch_depth = 2;
  SweepAxes stages;
  stages.data_parallel_sharding_strategy = {DataParallelShardingStrategy::kOptimGrads,
                                            DataParallelShardingStrategy::kOptimGradsParams};
  const auto z = enumerate_configurations(zero3, stages, 1e15);
  ASSERT_TRUE(z[0].valid && z[1].valid) << z[0].invalid_reason;
  EXPECT_TRUE(z[0].scenario.training.reshard_after_forward);
  EXPECT_EQ(z[0].scenario.training.fsdp_prefetch_depth, 1);
  EXPECT_THAT(z[0].adjustments,
              ::testing::ElementsAre(HasSubstr("training.reshard_after_forward: false -> true"),
                                     HasSubstr("training.fsdp_prefetch_depth: 2 -> 1")));
  EXPECT_FALSE(z[1].scenario.training.reshard_after_forward);
  EXPECT_EQ(z[1].scenario.training.fsdp_prefetch_depth, 2);
  EXPECT_TRUE(z[1].adjustments.empty());
  try {
    parse_sweep_sharding_strategies("--data-parallel-sharding-strategy", "optim,zero3");
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("--data-parallel-sharding-strategy: 'zero3' is not allowed "
                                    "(allowed: no_shard, optim, optim_grads, optim_grads_params"));
  }
}

// Megatron-FSDP's optim with the distributed optimizer is ZeRO-1, as the distributed optimizer
// alone (no_shard) is: the enumeration links such a row to its no_shard twin
// (SweepConfiguration::evaluates_as) and run_sweep evaluates the twin only, giving both rows its
// evaluation (in this process, on worker processes, forked). The fake evaluator tells the rows
// apart by use_megatron_fsdp, which nothing real reads but through zero_stage(): the optim row
// shows the no_shard row's figure. optim_grads (ZeRO-2) and the rows without the distributed
// optimizer have no twin; rows given out of enumeration order are each evaluated.
TEST(Sweep, ZeroOneTwinsAreEvaluatedOnce) {
  const Scenario base = small_scenario();
  SweepAxes axes;
  axes.distributed_optimizer = {true, false};
  axes.data_parallel_sharding_strategy = {DataParallelShardingStrategy::kNoShard,
                                          DataParallelShardingStrategy::kOptim,
                                          DataParallelShardingStrategy::kOptimGrads};
  const auto configs = enumerate_configurations(base, axes, 1e15);
  // Indices: (distributed optimizer, sharding) = 0 (on, no_shard) 1 (on, optim) 2 (on,
  // optim_grads) 3 (off, no_shard) 4 (off, optim: invalid) 5 (off, optim_grads: invalid).
  ASSERT_EQ(configs.size(), 6u);
  for (size_t i : {0, 1, 2, 3}) ASSERT_TRUE(configs[i].valid) << i << configs[i].invalid_reason;
  EXPECT_FALSE(configs[4].valid);
  EXPECT_EQ(configs[1].scenario.training.zero_stage(), 1);
  EXPECT_TRUE(configs[1].scenario.training.use_megatron_fsdp);
  EXPECT_EQ(configs[1].evaluates_as, 0);
  for (size_t i : {0, 2, 3, 4, 5}) EXPECT_EQ(configs[i].evaluates_as, -1) << i;

  int calls = 0;
  const Evaluator eval = [&calls](const Scenario& s) {
    ++calls;
    SweepEvaluation e;
    e.mode = "fake";
    e.summary.tokens_per_s =
        100.0 + 10.0 * s.training.zero_stage() + (s.training.use_megatron_fsdp ? 1.0 : 0.0);
    e.summary.iteration_time_s = 1.0 / e.summary.tokens_per_s;
    return e;
  };
  auto by_index = [](const std::vector<SweepRow>& rows) {
    std::map<int64_t, double> out;
    for (const SweepRow& r : rows) {
      if (r.status == SweepStatus::kRanked) out[r.config.index] = r.evaluation->summary.tokens_per_s;
    }
    return out;
  };
  const std::map<int64_t, double> expected{{0, 110}, {1, 110}, {2, 121}, {3, 100}};
  SweepOptions options;
  options.isolate = false;
  EXPECT_EQ(by_index(run_sweep(configs, eval, options)), expected);
  EXPECT_EQ(calls, 3);
  options.jobs = 2;
  EXPECT_EQ(by_index(run_sweep(configs, eval, options)), expected);
  options.isolate = true;
  EXPECT_EQ(by_index(run_sweep(configs, eval, options)), expected);
  expect_no_children();

  calls = 0;
  options = {};
  options.isolate = false;
  EXPECT_EQ(by_index(run_sweep({configs[1]}, eval, options)), (std::map<int64_t, double>{{1, 111}}));
  EXPECT_EQ(calls, 1);
}

TEST(Sweep, JsonAndCsvCarryEveryRowAndMetric) {
  const Scenario base = small_scenario();
  SweepAxes axes;
  axes.tp = {1, 3};
  const auto configs = enumerate_configurations(base, axes, 1e15);
  SweepOptions options;
  options.isolate = false;
  const auto rows = run_sweep(
      configs,
      [](const Scenario&) {
        SweepEvaluation e;
        e.summary.tokens_per_s = 5.0;
        e.detail = nlohmann::ordered_json{{"tokens_per_s", 5.0},
                                          {"exposed_comm_s", {{"tp", 0.5}}},
                                          {"scenario", "a, \"quoted\" name"},
                                          {"busiest_links", nlohmann::ordered_json::array({1, 2})}};
        return e;
      },
      options);
  const auto file = sweep_json(rows);
  EXPECT_EQ(file.begin().key(), "schema_version");
  EXPECT_EQ(file["schema_version"], kSweepSchemaVersion);
  const auto& j = file["rows"];
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["rank"], 1);
  EXPECT_EQ(j[0]["status"], "ranked");
  EXPECT_EQ(j[0]["configuration"]["tensor_model_parallel_size"], 1);
  EXPECT_EQ(j[0]["configuration"]["data_parallel_size"], 8);
  EXPECT_EQ(j[0]["metrics"]["exposed_comm_s"]["tp"], 0.5);
  EXPECT_TRUE(j[1]["rank"].is_null());
  EXPECT_EQ(j[1]["status"], "invalid");
  EXPECT_THAT(j[1]["reason"].get<std::string>(), HasSubstr("cluster.num_gpus"));

  const std::string csv = sweep_csv(rows);
  std::istringstream in(csv);
  std::string header, first, second, extra;
  std::getline(in, header);
  std::getline(in, first);
  std::getline(in, second);
  EXPECT_FALSE(std::getline(in, extra));
  EXPECT_THAT(header, HasSubstr("rank,status,index,configuration.num_gpus,"
                                "configuration.tensor_model_parallel_size"));
  EXPECT_THAT(header, HasSubstr("metrics.tokens_per_s,metrics.exposed_comm_s.tp,metrics.scenario,"
                                "metrics.busiest_links"));
  EXPECT_THAT(header, ::testing::Not(HasSubstr(",metrics,")));
  EXPECT_THAT(first, HasSubstr("\"a, \"\"quoted\"\" name\",\"[1,2]\""));
  // The invalid row has no quoted cell: one comma less than cells, as many as the header.
  EXPECT_EQ(std::count(second.begin(), second.end(), ','),
            std::count(header.begin(), header.end(), ','));
  EXPECT_THAT(second, ::testing::StartsWith(",invalid,1,8,3,"));
}

// sweep.json read back (read_sweep_json) and written again gives the same text: the typed
// record holds every field of a row, whichever mode evaluated it.
TEST(Sweep, JsonRoundTripsThroughTheTypedRecords) {
  const Scenario base = small_scenario();
  SweepAxes axes;
  axes.tp = {1, 2, 3};
  axes.mbs = {1, 2};
  const auto configs = enumerate_configurations(base, axes, 1e15);
  SweepOptions options;
  options.isolate = false;
  int calls = 0;
  const auto rows = run_sweep(
      configs,
      [&calls](const Scenario& s) {
        SweepEvaluation e;
        e.mode = "analytical";
        e.summary.iteration_time_s =
            1.0 + static_cast<double>(s.parallel.tensor_model_parallel_size);
        e.summary.tokens_per_s = 1000.0 / e.summary.iteration_time_s;
        e.summary.tokens_per_s_per_gpu = e.summary.tokens_per_s / 8;
        e.summary.mfu = 0.25;
        e.summary.mfu_formula = "MFU = ...";
        e.summary.exposed_tp_s = 0.125;
        e.summary.cost_sources = {{"roofline", 1.0}};
        if (++calls % 2 == 0) {  // every other one as a replay: the whole summary as detail
          e.mode = "simulate";
          e.detail = summary_fields_json(e.summary);
          e.detail["busiest_links"] = nlohmann::ordered_json::array();
        }
        return e;
      },
      options);
  ASSERT_GT(calls, 1);
  const std::string text = sweep_json(rows).dump(2);
  const auto records = read_sweep_json(nlohmann::ordered_json::parse(text), "sweep.json");
  ASSERT_EQ(records.size(), rows.size());
  nlohmann::ordered_json again;
  again["schema_version"] = kSweepSchemaVersion;
  again["rows"] = nlohmann::ordered_json::array();
  for (const SweepRecord& r : records) again["rows"].push_back(sweep_record_json(r));
  EXPECT_EQ(again.dump(2), text);
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(records[i].status, rows[i].status);
    EXPECT_EQ(records[i].rank, rows[i].rank);
    EXPECT_EQ(records[i].configuration.tensor_model_parallel_size,
              rows[i].config.scenario.parallel.tensor_model_parallel_size);
    EXPECT_EQ(records[i].metrics.has_value(), rows[i].evaluation.has_value());
    if (records[i].metrics) {
      EXPECT_DOUBLE_EQ(records[i].metrics->summary.tokens_per_s, rows[i].tokens_per_s);
    }
  }
}

TEST(Sweep, FlagListsAreParsedOrRejectedNamingTheFlag) {
  EXPECT_EQ(parse_sweep_integers("--tensor-model-parallel-size", "1,2, 4,8"),
            (std::vector<int64_t>{1, 2, 4, 8}));
  for (const char* bad : {"", "1,,2", "0", "2,x", "-1", "1.5", "2,2"}) {
    SCOPED_TRACE(bad);
    try {
      parse_sweep_integers("--micro-batch-size", bad);
      ADD_FAILURE() << "accepted";
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), HasSubstr("--micro-batch-size"));
      EXPECT_THAT(e.what(), HasSubstr("integers >= 1"));
    }
  }
  EXPECT_EQ(parse_sweep_recompute("--recompute-granularity", "full,none"),
            (std::vector<RecomputeGranularity>{RecomputeGranularity::kFull,
                                               RecomputeGranularity::kNone}));
  try {
    parse_sweep_recompute("--recompute-granularity", "none,some");
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("--recompute-granularity: 'some' is not allowed (allowed: none, "
                          "selective, full"));
  }
  EXPECT_EQ(parse_sweep_switch("--sequence-parallel", "on,off"), (std::vector<bool>{true, false}));
  EXPECT_THROW(parse_sweep_switch("--sequence-parallel", "true"), ConfigError);
  EXPECT_THROW(parse_sweep_switch("--sequence-parallel", "on,on"), ConfigError);
}

}  // namespace
}  // namespace traintwin
