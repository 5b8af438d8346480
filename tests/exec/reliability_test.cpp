// Regression tests of issue 14 for the executor's readers and writers: JSON numbers out of range
// in a checkpoint header, empty tensors and empty datasets (no memcpy of null), a dataset file
// truncated while it is mapped, planted symlinks at the writers' temporary names, and the
// launcher environment (mpirun, srun).
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include "core/error.hpp"
#include "exec/checkpoint.hpp"
#include "exec/indexed_dataset.hpp"
#include "exec/launch_env.hpp"
#include "exec/local_topology.hpp"
#include "tests/no_temporaries.hpp"
#include "topologies/topology.hpp"

namespace traintwin {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

class ReliabilityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("traintwin-reliability-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
};

/// A checkpoint file of the given header text: magic, length, header padded to 8, no data, and
/// the FNV-1a 64 of it all (so only the header is wrong).
void write_checkpoint_with_header(const fs::path& file, std::string header) {
  header.append((8 - (16 + header.size()) % 8) % 8, ' ');
  std::string bytes = "TTCKPT01";
  const uint64_t n = header.size();
  bytes.append(reinterpret_cast<const char*>(&n), 8);
  bytes += header;
  const uint64_t sum = fnv1a64(bytes.data(), bytes.size());
  bytes.append(reinterpret_cast<const char*>(&sum), 8);
  fs::create_directories(file.parent_path());
  std::ofstream(file, std::ios::binary) << bytes;
}

// Defect 1: {"data_bytes":1e999} made nlohmann throw out_of_range, which nothing caught (abort).
TEST_F(ReliabilityTest, CheckpointHeaderNumberOutOfRangeIsADataError) {
  const fs::path file = rank_checkpoint_path(dir_, 1, 0);
  for (const std::string header :
       {R"({"data_bytes":1e999})", R"({"format_version":1,"data_bytes":1e300})",
        R"({"format_version":1e999})", R"({"format_version":1,"data_bytes":-1})"}) {
    SCOPED_TRACE(header);
    write_checkpoint_with_header(file, header);
    try {
      read_rank_checkpoint(dir_, 1, 0);
      FAIL() << "accepted";
    } catch (const DataError& e) {
      EXPECT_THAT(e.what(), HasSubstr(file.string()));
    }
  }
}

// Defect 9: a tensor of zero elements (and a checkpoint of none) round-trips without
// memcpy(null, ..., 0) (UBSan: null pointer passed as argument declared nonnull).
TEST_F(ReliabilityTest, EmptyTensorRoundTrips) {
  RankCheckpoint ck;
  ck.iteration = 4;
  ck.seed = 1;
  ck.tensors.push_back({"empty", {0, 8}, {}});
  ck.tensors.push_back({"one", {1}, {2.5f}});
  write_rank_checkpoint(dir_, 4, 0, ck);
  const RankCheckpoint back = read_rank_checkpoint(dir_, 4, 0);
  ASSERT_EQ(back.tensors.size(), 2u);
  EXPECT_TRUE(back.tensors[0].data.empty());
  EXPECT_EQ(back.tensors[0].shape, (std::vector<int64_t>{0, 8}));
  EXPECT_EQ(back.tensors[1].data, std::vector<float>{2.5f});
  EXPECT_TRUE(testing::no_temporaries(dir_ / "iter_0000004"));
}

// Defect 9: the dataset an empty corpus produces (no sequences) opens without memcpy(null).
TEST_F(ReliabilityTest, DatasetOfAnEmptyCorpusOpens) {
  const std::string prefix = (dir_ / "empty").string();
  {
    IndexedDatasetWriter w(prefix, 1000);
    w.add_document({});
    w.finalize();
  }
  const IndexedDataset ds = IndexedDataset::open(prefix);
  EXPECT_EQ(ds.size(), 0);
  EXPECT_EQ(ds.num_documents(), 1);
  EXPECT_EQ(ds.num_tokens(), 0);
}

// Defect 10: a .bin truncated while mapped made the next read die of SIGBUS without a word; it
// is a DataError naming the file and saying it shrank.
TEST_F(ReliabilityTest, DatasetTruncatedWhileMappedIsADataErrorNamingTheFile) {
  const std::string prefix = (dir_ / "ds").string();
  {
    IndexedDatasetWriter w(prefix, 1000);
    for (int d = 0; d < 4; ++d) w.add_document(std::vector<int32_t>(8192, d + 1));  // 4 x 16 KiB
    w.finalize();
  }
  const IndexedDataset ds = IndexedDataset::open(prefix);
  std::vector<int32_t> out(8192);
  ds.read(0, 0, out);
  EXPECT_EQ(out[0], 1);
  fs::resize_file(indexed_dataset_bin_path(prefix), 0);  // as a concurrent rewrite would
  try {
    ds.read(3, 0, out);
    FAIL() << "read a truncated mapping";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr(indexed_dataset_bin_path(prefix)), HasSubstr("shrank"),
                                HasSubstr("65536 bytes when opened, now 0 bytes")));
  }
  // The process is fine afterwards: a later fault is reported again, not fatal.
  EXPECT_THROW(ds.read_stream(100, out), DataError);
}

// Defect 11: a symlink planted at the old fixed temporary name (x.bin.tmp -> victim) made the
// writer overwrite the victim. Temporaries are now created exclusively under fresh names.
TEST_F(ReliabilityTest, PlantedSymlinksAtTemporaryNamesAreNotFollowed) {
  const fs::path victim = dir_ / "victim";
  std::ofstream(victim) << "precious";
  const std::string prefix = (dir_ / "out").string();
  for (const std::string name : {prefix + ".bin.tmp", prefix + ".idx.tmp"}) {
    fs::create_symlink(victim, name);
  }
  fs::create_directories(rank_checkpoint_path(dir_ / "ckpt", 1, 0).parent_path());
  fs::create_symlink(victim, rank_checkpoint_path(dir_ / "ckpt", 1, 0).string() + ".tmp");
  {
    IndexedDatasetWriter w(prefix, 1000);
    w.add_document({1, 2, 3});
    w.finalize();
  }
  RankCheckpoint ck;
  ck.iteration = 1;
  ck.tensors.push_back({"w", {2}, {1.0f, 2.0f}});
  write_rank_checkpoint(dir_ / "ckpt", 1, 0, ck);
  std::ifstream in(victim);
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "precious");
  EXPECT_EQ(IndexedDataset::open(prefix).num_tokens(), 3);
  EXPECT_EQ(read_rank_checkpoint(dir_ / "ckpt", 1, 0).tensors.size(), 1u);
}

// The commands that run mpirun themselves refuse to run under a launcher, naming the flag, the
// launcher and the command to run instead.
TEST(LaunchEnvironment, CommandsThatLaunchMpirunRefuseALauncher) {
  exec::LaunchEnvironment env;
  EXPECT_NO_THROW(exec::require_no_launcher(env, "--live", "the live twin", "traintwin x"));
  env.launcher = "srun";
  try {
    exec::require_no_launcher(env, "--live", "the live twin", "traintwin goodput --live S");
    ADD_FAILURE() << "no error under srun";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "--live: the live twin launches mpirun itself, but this process was started by "
                 "srun; run `traintwin goodput --live S` without mpirun/srun");
  }
}

// srun and mpirun are read the same way: rank, world size, ranks on this node.
TEST(LaunchEnvironment, ReadsOpenMpiSlurmAndPmi) {
  auto from = [](std::map<std::string, std::string> vars) {
    return exec::read_launch_environment([vars](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    });
  };
  const exec::LaunchEnvironment none = from({});
  EXPECT_EQ(none.launcher, "none");
  EXPECT_FALSE(none.distributed());

  const exec::LaunchEnvironment ompi =
      from({{"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_RANK", "5"},
            {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
            {"SLURM_NTASKS", "16"}, {"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "0"}});
  EXPECT_EQ(ompi.launcher, "mpirun");  // mpirun inside an allocation: Open MPI's view wins
  EXPECT_EQ(ompi.rank, 5);
  EXPECT_EQ(ompi.world_size, 8);
  EXPECT_EQ(ompi.local_size, 4);
  EXPECT_TRUE(ompi.distributed());

  // srun -N 3 -n 11: 4 tasks on nodes 0 and 1, 3 on node 2; this is task 9 (node 2, local 1).
  const exec::LaunchEnvironment srun =
      from({{"SLURM_NTASKS", "11"}, {"SLURM_PROCID", "9"}, {"SLURM_STEP_ID", "0"},
            {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "2"}, {"SLURM_TASKS_PER_NODE", "4(x2),3"}});
  EXPECT_EQ(srun.launcher, "srun");
  EXPECT_EQ(srun.rank, 9);
  EXPECT_EQ(srun.world_size, 11);
  EXPECT_EQ(srun.local_rank, 1);
  EXPECT_EQ(srun.local_size, 3);

  // A batch script's own shell (no job step) is one process.
  EXPECT_FALSE(from({{"SLURM_NTASKS", "11"}, {"SLURM_PROCID", "0"}}).distributed());

  const exec::LaunchEnvironment pmi = from({{"PMI_SIZE", "2"}, {"PMI_RANK", "1"}});
  EXPECT_EQ(pmi.launcher, "pmi");
  EXPECT_EQ(pmi.rank, 1);

  EXPECT_THROW(from({{"OMPI_COMM_WORLD_SIZE", "two"}}), ConfigError);
  EXPECT_THROW(from({{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "2"}}), ConfigError);
  try {
    from({{"SLURM_NTASKS", "4"}, {"SLURM_PROCID", "0"}, {"SLURM_STEP_ID", "0"},
          {"SLURM_TASKS_PER_NODE", "4(y2)"}});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("SLURM_TASKS_PER_NODE"));
  }
}

// profile --topology-out writes atomically: a link planted at the path is replaced by the new
// file, and what it pointed to is left alone (it followed the link before).
TEST(Reliability, TopologyOutReplacesAPlantedLinkAndLeavesItsTargetAlone) {
  const fs::path dir = fs::temp_directory_path() / ("traintwin-topo-link-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path victim = dir / "victim.txt", link = dir / "local.yaml";
  { std::ofstream(victim) << "keep me\n"; }
  fs::create_symlink(victim, link);
  exec::LocalTopology t;
  t.name = "local-test";
  t.device = "cpu-test-1t";
  t.ranks_per_node = 2;
  t.peak_FLOPs = 2e10;
  t.memory_Bps = 1e10;
  t.memory_bytes = 8.0 * (1 << 30);
  t.link_Bps = 5e9;
  t.link_latency_s = 2e-6;
  t.link_source = "assumed";
  exec::write_topology(link, t);
  EXPECT_FALSE(fs::is_symlink(link));
  std::ifstream in(victim);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "keep me\n");
  EXPECT_EQ(load_topology(link).gpu.name, "cpu-test-1t");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace traintwin
