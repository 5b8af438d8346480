// The Trainer in one process: checkpoints resume bit-identically; truncated checkpoints, those of
// another model and scenarios the CPU backend cannot run are refused with clear errors.
#include "exec/trainer.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "core/scenario.hpp"
#include "exec/checkpoint.hpp"
#include "exec/local_communicator.hpp"
#include "tests/tiny_training.hpp"

namespace traintwin::exec {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("traintwin-trainer-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    prefix_ = testing::write_synthetic_dataset(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  Scenario scenario(const std::vector<Override>& overrides = {}) const {
    return load_scenario(testing::write_tiny_scenario(dir_, prefix_), overrides);
  }

  /// Losses of iterations first..train_iters (exact doubles).
  static std::vector<double> run(const Scenario& s, TrainerOptions opts = {}) {
    LocalCommunicator comm(RankLayout(1, 1, 1, 1, s.parallel.rank_order));
    Trainer t(s, comm, std::move(opts));
    std::vector<double> losses;
    TrainerCallbacks cb;
    cb.on_iteration = [&](const IterationLog& l) { losses.push_back(l.lm_loss); };
    t.train(cb);
    return losses;
  }

  fs::path dir_;
  std::string prefix_;
};

// Train 10 steps and save, resume and train 10 more: the losses of steps 11..20 are bitwise those
// of 20 steps straight (parameters, AdamW moments, the data position and the dropout masks all
// come back).
TEST_F(TrainerTest, ResumeFromCheckpointIsBitIdentical) {
  const std::vector<double> straight = run(scenario());
  ASSERT_EQ(straight.size(), 20u);
  TrainerOptions save;
  save.save = dir_ / "ckpt";
  const std::vector<double> first = run(scenario({{"training.train_iters", "10"},
                                                  {"training.lr_decay_iters", "20"}}),
                                        save);
  ASSERT_EQ(first.size(), 10u);
  EXPECT_EQ(read_latest_iteration(dir_ / "ckpt"), 10);
  TrainerOptions load;
  load.load = dir_ / "ckpt";
  const std::vector<double> rest = run(scenario(), load);
  ASSERT_EQ(rest.size(), 10u);
  for (size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(first[i], straight[i]) << "step " << i + 1;
    EXPECT_EQ(rest[i], straight[10 + i]) << "step " << 11 + i;
  }
}

// Megatron's `--save D --load D` from the first run on: D without a checkpoint (absent, or
// empty) starts from scratch and says so; the run then saves into D and a second run resumes.
TEST_F(TrainerTest, LoadFromAFolderWithoutACheckpointStartsFromScratch) {
  const std::vector<double> straight = run(scenario({{"training.train_iters", "4"},
                                                     {"training.lr_decay_iters", "20"}}));
  TrainerOptions both;
  both.save = dir_ / "ckpt";
  both.load = dir_ / "ckpt";
  const Scenario first4 =
      scenario({{"training.train_iters", "4"}, {"training.lr_decay_iters", "20"}});
  {
    LocalCommunicator comm(RankLayout(1, 1, 1, 1, first4.parallel.rank_order));
    Trainer t(first4, comm, both);
    EXPECT_TRUE(t.load_found_no_checkpoint());
    EXPECT_EQ(t.first_iteration(), 1);
  }
  EXPECT_EQ(run(first4, both), straight);
  EXPECT_EQ(read_latest_iteration(dir_ / "ckpt"), 4);
  LocalCommunicator comm(RankLayout(1, 1, 1, 1, first4.parallel.rank_order));
  Trainer again(scenario({{"training.train_iters", "6"}, {"training.lr_decay_iters", "20"}}), comm,
                both);
  EXPECT_FALSE(again.load_found_no_checkpoint());
  EXPECT_EQ(again.first_iteration(), 5);
}

// A dataset that was never made is named with the way to make it, before the model is built.
TEST_F(TrainerTest, AMissingDatasetNamesTheKeyAndHowToMakeIt) {
  const Scenario s = scenario({{"data.data_path", (dir_ / "never-made").string()}});
  LocalCommunicator comm(RankLayout(1, 1, 1, 1, s.parallel.rank_order));
  try {
    Trainer t(s, comm, {});
    FAIL() << "a missing dataset was accepted";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("data.data_path: no dataset at " +
                                    (dir_ / "never-made").string()));
    EXPECT_THAT(e.what(), HasSubstr("traintwin preprocess"));
  }
}

TEST_F(TrainerTest, TruncatedCheckpointIsRefused) {
  TrainerOptions save;
  save.save = dir_ / "ckpt";
  run(scenario({{"training.train_iters", "2"}, {"training.lr_decay_iters", "20"}}), save);
  const fs::path file = rank_checkpoint_path(dir_ / "ckpt", 2, 0);
  fs::resize_file(file, fs::file_size(file) / 2);
  TrainerOptions load;
  load.load = dir_ / "ckpt";
  LocalCommunicator comm(RankLayout(1, 1, 1, 1, "tp-cp-dp-pp"));
  try {
    Trainer t(scenario(), comm, load);
    FAIL() << "a truncated checkpoint loaded";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr(file.filename().string()));
  }
}

TEST_F(TrainerTest, CheckpointOfAnotherModelIsRefusedNamingTheKey) {
  TrainerOptions save;
  save.save = dir_ / "ckpt";
  run(scenario({{"training.train_iters", "1"}, {"training.lr_decay_iters", "20"}}), save);
  TrainerOptions load;
  load.load = dir_ / "ckpt";
  LocalCommunicator comm(RankLayout(1, 1, 1, 1, "tp-cp-dp-pp"));
  try {
    Trainer t(scenario({{"model.hidden_size", "128"}}), comm, load);
    FAIL() << "a checkpoint of another model loaded";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("model.hidden_size"));
  }
}

// Issue 14 defect 6: resuming with other data settings is refused naming the key (the seed, the
// dataset path and the split are in the signature and the saved seed is compared), and a
// train_iters that is not past the checkpoint is refused instead of training nothing.
TEST_F(TrainerTest, ResumeWithOtherDataSettingsIsRefusedNamingTheKey) {
  TrainerOptions save;
  save.save = dir_ / "ckpt";
  run(scenario({{"training.train_iters", "3"}, {"training.lr_decay_iters", "20"}}), save);
  TrainerOptions load;
  load.load = dir_ / "ckpt";
  const std::string other_data = testing::write_synthetic_dataset(dir_ / "other");
  const std::vector<std::pair<std::vector<Override>, std::string>> cases = {
      {{{"training.seed", "7"}}, "training.seed"},
      {{{"data.split", "80,20,0"}}, "data.split"},
      {{{"data.data_path", other_data}}, "data.data_path"},
  };
  for (const auto& [overrides, key] : cases) {
    SCOPED_TRACE(key);
    LocalCommunicator comm(RankLayout(1, 1, 1, 1, "tp-cp-dp-pp"));
    try {
      Trainer t(scenario(overrides), comm, load);
      FAIL() << "resumed with another " << key;
    } catch (const DataError& e) {
      EXPECT_THAT(e.what(), HasSubstr(key));
    }
  }
  for (const char* iters : {"2", "3"}) {
    SCOPED_TRACE(iters);
    LocalCommunicator comm(RankLayout(1, 1, 1, 1, "tp-cp-dp-pp"));
    try {
      Trainer t(scenario({{"training.train_iters", iters}, {"training.lr_decay_iters", "20"}}),
                comm, load);
      FAIL() << "resumed at iteration 3 with train_iters " << iters;
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), HasSubstr("training.train_iters is " + std::string(iters)));
      EXPECT_THAT(e.what(), HasSubstr("at iteration 3"));
    }
  }
}

// The signature's data path is absolute and normalized: the same files named another way load.
TEST_F(TrainerTest, ResumeAcceptsTheSameDataPathSpelledDifferently) {
  TrainerOptions save;
  save.save = dir_ / "ckpt";
  run(scenario({{"training.train_iters", "1"}, {"training.lr_decay_iters", "20"}}), save);
  TrainerOptions load;
  load.load = dir_ / "ckpt";
  const std::string spelled = (dir_ / "." / "sub" / ".." / "synthetic").string();
  fs::create_directories(dir_ / "sub");
  const std::vector<double> rest = run(
      scenario({{"data.data_path", spelled}, {"training.train_iters", "2"},
                {"training.lr_decay_iters", "20"}}),
      load);
  EXPECT_EQ(rest.size(), 1u);
}

// The signature carries the layers of every virtual pipeline stage: a checkpoint of another
// split of the same model does not load, one split given by other keys does.
TEST_F(TrainerTest, CheckpointSignatureNamesThePipelineSplit) {
  const std::vector<Override> pp2 = {{"parallelism.pipeline_model_parallel_size", "2"},
                                     {"cluster.num_gpus", "2"}};
  std::vector<Override> uneven = pp2;
  uneven.push_back({"parallelism.decoder_first_pipeline_num_layers", "1"});
  const std::string key = "parallelism.layers_per_virtual_stage";
  EXPECT_EQ(checkpoint_signature(scenario(pp2), {}).at(key), "2,2");
  EXPECT_EQ(checkpoint_signature(scenario(uneven), {}).at(key), "1,3");
  // 4 layers + embedding + loss on PP 2 = 3 + 3 counted: 2 transformer layers each, as even.
  std::vector<Override> accounted = pp2;
  accounted.push_back({"parallelism.account_for_embedding_in_pipeline_split", "true"});
  accounted.push_back({"parallelism.account_for_loss_in_pipeline_split", "true"});
  EXPECT_EQ(checkpoint_signature(scenario(accounted), {}), checkpoint_signature(scenario(pp2), {}));
}

// An MoE model's signature adds the expert keys and the rank's expert coordinates (a checkpoint
// of another expert layout holds other experts); a dense model's has none of them.
TEST_F(TrainerTest, CheckpointSignatureOfAnMoeModelNamesTheExpertLayout) {
  Scenario dense = scenario({});
  EXPECT_EQ(checkpoint_signature(dense, {}).count("model.num_moe_experts"), 0u);
  Scenario moe = dense;
  moe.model.num_moe_experts = 4;
  moe.model.moe_layer_pattern = {1, 0, 1, 0};
  moe.parallel.expert_model_parallel_size = 2;
  moe.parallel.data_parallel_size = 2;  // EP 2 folded over DP 2: DP rank d is EP rank d
  moe.parallel.rank_order = "tp-cp-ep-dp-pp";
  RankCoord dp1;
  dp1.dp = 1;
  const auto sig = checkpoint_signature(moe, dp1);
  EXPECT_EQ(sig.at("model.num_moe_experts"), "4");
  EXPECT_EQ(sig.at("model.moe_layer_freq"), "1010");
  EXPECT_EQ(sig.at("parallelism.expert_model_parallel_size"), "2");
  EXPECT_EQ(sig.at("rank.ep"), "1");
  EXPECT_EQ(sig.at("rank.edp"), "0");
  EXPECT_EQ(checkpoint_signature(moe, {}).at("rank.ep"), "0");
}

TEST_F(TrainerTest, RequiresTheTrainingKeys) {
  LocalCommunicator comm(RankLayout(1, 1, 1, 1, "tp-cp-dp-pp"));
  try {
    Trainer t(scenario({{"training.lr", "null"}}), comm, {});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("training.lr"));
  }
}

// A model vocabulary smaller than the tokenizer's is refused before anything runs.
TEST_F(TrainerTest, TokenizerLargerThanTheModelVocabularyIsRefused) {
  const fs::path gpt2 = fs::path(TRAINTWIN_SOURCE_DIR) / "data" / "gpt2";
  if (!fs::exists(gpt2 / "encoder.json")) GTEST_SKIP() << "no " << gpt2 << " (scripts/fetch_data.sh)";
  LocalCommunicator comm(RankLayout(1, 1, 1, 1, "tp-cp-dp-pp"));
  try {
    Trainer t(scenario({{"data.vocab_file", (gpt2 / "encoder.json").string()},
                        {"data.merge_file", (gpt2 / "vocab.bpe").string()}}),
              comm, {});
    FAIL() << "a 1000-id model accepted the 50257-id GPT-2 tokenizer";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("vocabulary mismatch"));
  }
}

TEST_F(TrainerTest, BackendLimitsAreRefusedNotDowngraded) {
  LocalCommunicator comm(RankLayout(1, 1, 1, 1, "tp-cp-dp-pp"));
  // fp16 needs dynamic loss scaling, which the executor does not have: refused, never run in
  // fp32 or bf16 in its place.
  EXPECT_THROW(Trainer(scenario({{"training.precision", "fp16"}}), comm, {}), UnsupportedError);
}

}  // namespace
}  // namespace traintwin::exec
