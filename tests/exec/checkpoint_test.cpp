// Checkpoint files: bit-exact round trip, the byte layout of checkpoint.hpp (magic, header
// length, alignment, FNV-1a 64 checked against its published test vectors), atomic writes that
// leave no temporary file, and refusal of truncated, corrupted, foreign or malformed files with
// messages naming the file.
#include "exec/checkpoint.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "tests/no_temporaries.hpp"

namespace traintwin {
namespace {

using traintwin::testing::no_temporaries;


namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

std::vector<unsigned char> slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void spit(const fs::path& path, const std::vector<unsigned char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

uint64_t load_u64(const unsigned char* p) {
  uint64_t v = 0;
  for (int k = 7; k >= 0; --k) v = (v << 8) | p[k];  // little-endian
  return v;
}

void store_u64(std::vector<unsigned char>& out, uint64_t v) {
  for (int k = 0; k < 8; ++k) out.push_back(static_cast<unsigned char>((v >> (8 * k)) & 0xff));
}

/// FNV-1a 64 written out from its definition (offset basis, xor then multiply by the prime).
uint64_t reference_fnv(const unsigned char* p, size_t n) {
  uint64_t h = 14695981039346656037ULL;
  for (size_t k = 0; k < n; ++k) {
    h ^= p[k];
    h *= 1099511628211ULL;
  }
  return h;
}

/// A file in the documented layout from a header and data bytes, with a correct checksum.
std::vector<unsigned char> build_file(const std::string& magic, const nlohmann::json& header,
                                      const std::vector<unsigned char>& data) {
  const std::string text = header.dump();
  std::vector<unsigned char> out(magic.begin(), magic.end());
  store_u64(out, text.size());
  out.insert(out.end(), text.begin(), text.end());
  out.insert(out.end(), data.begin(), data.end());
  store_u64(out, reference_fnv(out.data(), out.size()));
  return out;
}

float bits_to_float(uint32_t bits) { return std::bit_cast<float>(bits); }

RankCheckpoint sample_checkpoint() {
  RankCheckpoint c;
  c.signature = {{"num_layers", "2"}, {"hidden_size", "64"}, {"tp", "2"}, {"rank", "3"}};
  c.iteration = 10;
  c.consumed_train_samples = 640;
  c.seed = 0xfedcba9876543210ULL;  // above 2^63
  c.tensors.push_back({"wte", {4, 3}, {}});
  for (int k = 0; k < 12; ++k) c.tensors.back().data.push_back(0.1f * static_cast<float>(k) - 0.5f);
  // Values whose bits must survive: -0, a denormal, infinities, a NaN with a payload, the
  // largest float.
  c.tensors.push_back({"special",
                       {6},
                       {-0.0f, bits_to_float(0x00000001u), std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity(), bits_to_float(0x7fc12345u),
                        std::numeric_limits<float>::max()}});
  c.tensors.push_back({"scalar", {}, {3.25f}});
  c.tensors.push_back({"empty", {0, 5}, {}});
  c.tensors.push_back({"adam.m.wte", {2, 1, 2}, {1e-30f, -2.5f, 7.0f, 1e30f}});
  return c;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("traintwin-ckpt-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  /// Expects read_rank_checkpoint(dir_, 10, 3) to throw DataError naming the file and `what`.
  void expect_refused(const std::string& what) {
    const std::string file = rank_checkpoint_path(dir_, 10, 3).string();
    try {
      read_rank_checkpoint(dir_, 10, 3);
      ADD_FAILURE() << "read a bad file; expected \"" << what << "\"";
    } catch (const DataError& e) {
      EXPECT_THAT(e.what(), AllOf(HasSubstr(file), HasSubstr(what)));
    }
  }

  fs::path dir_;
};

// A FIFO or a device planted as the tracker or a rank file is refused before any read (a FIFO
// used to block forever, /dev/zero to fill memory); an oversized tracker too.
TEST_F(CheckpointTest, NonRegularFilesAreRefusedBeforeReading) {
  fs::create_directories(rank_checkpoint_path(dir_, 10, 3).parent_path());
  ASSERT_EQ(::mkfifo(latest_iteration_path(dir_).c_str(), 0600), 0);
  try {
    read_latest_iteration(dir_);
    ADD_FAILURE() << "read a FIFO";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("is not a regular file"));
  }
  fs::create_symlink("/dev/zero", rank_checkpoint_path(dir_, 10, 3));
  expect_refused("is not a regular file");
  fs::remove(latest_iteration_path(dir_));
  { std::ofstream(latest_iteration_path(dir_)) << std::string(5000, '1'); }
  try {
    read_latest_iteration(dir_);
    ADD_FAILURE() << "read a 5000-byte tracker";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("more than the 4096"));
  }
}

TEST(CheckpointFnvTest, PublishedTestVectors) {
  // From the FNV reference test suite (isthe.com/chongo/tech/comp/fnv): FNV-1a 64.
  EXPECT_EQ(fnv1a64("", 0), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a64("a", 1), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(fnv1a64("foobar", 6), 0x85944171f73967e8ULL);
  // Chained calls equal one call.
  EXPECT_EQ(fnv1a64("bar", 3, fnv1a64("foo", 3)), fnv1a64("foobar", 6));
}

TEST_F(CheckpointTest, PathsFollowMegatron) {
  EXPECT_EQ(checkpoint_iteration_dir("ck", 10), fs::path("ck/iter_0000010"));
  EXPECT_EQ(rank_checkpoint_path("ck", 10, 3), fs::path("ck/iter_0000010/rank_00003.ttckpt"));
  EXPECT_EQ(latest_iteration_path("ck"), fs::path("ck/latest_checkpointed_iteration.txt"));
  EXPECT_THROW(checkpoint_iteration_dir("ck", -1), InvalidArgument);
  EXPECT_THROW(rank_checkpoint_path("ck", 1, -1), InvalidArgument);
}

TEST_F(CheckpointTest, RoundTripIsBitExact) {
  const RankCheckpoint c = sample_checkpoint();
  write_rank_checkpoint(dir_, 10, 3, c);
  const RankCheckpoint r = read_rank_checkpoint(dir_, 10, 3);
  EXPECT_EQ(r.signature, c.signature);
  EXPECT_EQ(r.iteration, 10);
  EXPECT_EQ(r.consumed_train_samples, 640);
  EXPECT_EQ(r.seed, 0xfedcba9876543210ULL);
  ASSERT_EQ(r.tensors.size(), c.tensors.size());
  for (size_t k = 0; k < c.tensors.size(); ++k) {
    EXPECT_EQ(r.tensors[k].name, c.tensors[k].name);
    EXPECT_EQ(r.tensors[k].shape, c.tensors[k].shape);
    ASSERT_EQ(r.tensors[k].data.size(), c.tensors[k].data.size()) << c.tensors[k].name;
    // Bit patterns (NaN payloads, signed zeros); an empty tensor has no data pointer to memcmp.
    EXPECT_TRUE(std::equal(r.tensors[k].data.begin(), r.tensors[k].data.end(),
                           c.tensors[k].data.begin(), [](float a, float b) {
                             return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
                           }))
        << c.tensors[k].name;
  }
  EXPECT_TRUE(std::signbit(r.tensors[1].data[0]));
  EXPECT_EQ(std::bit_cast<uint32_t>(r.tensors[1].data[4]), 0x7fc12345u);
}

TEST_F(CheckpointTest, ByteLayoutMatchesTheHeaderComment) {
  const RankCheckpoint c = sample_checkpoint();
  write_rank_checkpoint(dir_, 10, 3, c);
  const auto bytes = slurp(dir_ / "iter_0000010" / "rank_00003.ttckpt");
  ASSERT_GE(bytes.size(), 24u);
  EXPECT_EQ(std::string(bytes.begin(), bytes.begin() + 8), "TTCKPT01");
  const uint64_t h = load_u64(&bytes[8]);
  EXPECT_EQ((16 + h) % 8, 0u);  // data aligned to 8
  const int64_t values = 12 + 6 + 1 + 0 + 4;
  EXPECT_EQ(bytes.size(), 16 + h + 4 * values + 8);
  const auto header =
      nlohmann::json::parse(bytes.begin() + 16, bytes.begin() + 16 + static_cast<ptrdiff_t>(h));
  EXPECT_EQ(header.at("format_version"), 1);
  EXPECT_EQ(header.at("data_bytes"), 4 * values);
  EXPECT_EQ(header.at("tensors").size(), 5u);
  EXPECT_EQ(header.at("tensors")[1].at("offset_bytes"), 48);  // after wte's 12 floats
  EXPECT_EQ(header.at("tensors")[1].at("count"), 6);
  // wte[0] = -0.5f sits right after the header.
  float first = 0;
  std::memcpy(&first, &bytes[16 + h], 4);
  EXPECT_EQ(first, -0.5f);
  EXPECT_EQ(load_u64(&bytes[bytes.size() - 8]), reference_fnv(bytes.data(), bytes.size() - 8));
}

TEST_F(CheckpointTest, NoTemporaryFileLeftAndOverwriteWorks) {
  RankCheckpoint c = sample_checkpoint();
  write_rank_checkpoint(dir_, 10, 3, c);
  c.tensors[0].data[0] = 42.0f;
  write_rank_checkpoint(dir_, 10, 3, c);  // overwrite in place
  write_latest_iteration(dir_, 10);
  std::vector<std::string> names;
  for (const auto& entry : fs::recursive_directory_iterator(dir_)) {
    names.push_back(fs::relative(entry.path(), dir_).string());
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"iter_0000010", "iter_0000010/rank_00003.ttckpt",
                                             "latest_checkpointed_iteration.txt"}));
  EXPECT_EQ(read_rank_checkpoint(dir_, 10, 3).tensors[0].data[0], 42.0f);
}

TEST_F(CheckpointTest, WriterRefusesInconsistentState) {
  RankCheckpoint c = sample_checkpoint();
  EXPECT_THROW(write_rank_checkpoint(dir_, 11, 3, c), InvalidArgument);  // iteration 10 inside
  c.tensors[0].shape = {4, 4};
  EXPECT_THROW(write_rank_checkpoint(dir_, 10, 3, c), InvalidArgument);
  c = sample_checkpoint();
  c.tensors[2].name = "wte";
  EXPECT_THROW(write_rank_checkpoint(dir_, 10, 3, c), InvalidArgument);
  c = sample_checkpoint();
  c.tensors[3].shape = {-1, 0};
  EXPECT_THROW(write_rank_checkpoint(dir_, 10, 3, c), InvalidArgument);
  EXPECT_FALSE(fs::exists(rank_checkpoint_path(dir_, 10, 3)));
  EXPECT_TRUE(no_temporaries(rank_checkpoint_path(dir_, 10, 3).parent_path()));
}

TEST_F(CheckpointTest, TruncatedFilesAreRefused) {
  write_rank_checkpoint(dir_, 10, 3, sample_checkpoint());
  const fs::path file = rank_checkpoint_path(dir_, 10, 3);
  const auto bytes = slurp(file);
  for (const size_t keep : {bytes.size() - 1, bytes.size() - 8, bytes.size() / 2, size_t{20}}) {
    spit(file,
         std::vector<unsigned char>(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(keep)));
    expect_refused("truncated");
  }
  spit(file, std::vector<unsigned char>(bytes.begin(), bytes.begin() + 4));
  expect_refused("bad magic");
  // Longer than described.
  auto longer = bytes;
  longer.push_back(0);
  spit(file, longer);
  expect_refused("1 bytes more than the header describes");
}

TEST_F(CheckpointTest, EveryFlippedByteIsRefused) {
  write_rank_checkpoint(dir_, 10, 3, sample_checkpoint());
  const fs::path file = rank_checkpoint_path(dir_, 10, 3);
  const auto bytes = slurp(file);
  const uint64_t h = load_u64(&bytes[8]);
  for (size_t k = 0; k < bytes.size(); ++k) {
    auto bad = bytes;
    bad[k] ^= 0x20;
    spit(file, bad);
    EXPECT_THROW(read_rank_checkpoint(dir_, 10, 3), DataError) << "byte " << k;
  }
  // A flip in the data or in the checksum itself is a checksum mismatch.
  for (const size_t k : {static_cast<size_t>(16 + h + 5), bytes.size() - 3}) {
    auto bad = bytes;
    bad[k] ^= 0x01;
    spit(file, bad);
    expect_refused("checksum mismatch");
  }
}

TEST_F(CheckpointTest, MissingBadMagicUnknownVersionDuplicateNames) {
  expect_refused("missing");
  fs::create_directories(checkpoint_iteration_dir(dir_, 10));
  const fs::path file = rank_checkpoint_path(dir_, 10, 3);
  const std::vector<unsigned char> four_floats(16, 0);
  nlohmann::json header = {{"format_version", 1},
                           {"signature", nlohmann::json::object()},
                           {"iteration", 10},
                           {"consumed_train_samples", 0},
                           {"seed", 1},
                           {"data_bytes", 16},
                           {"tensors",
                            {{{"name", "a"}, {"shape", {2}}, {"offset_bytes", 0}, {"count", 2}},
                             {{"name", "b"}, {"shape", {2}}, {"offset_bytes", 8}, {"count", 2}}}}};
  spit(file, build_file("TTCKPT01", header, four_floats));
  EXPECT_EQ(read_rank_checkpoint(dir_, 10, 3).tensors.size(), 2u);  // the helper is right

  spit(file, build_file("NOTCKPT1", header, four_floats));
  expect_refused("bad magic");
  spit(file, build_file("TTCKPT02", header, four_floats));
  expect_refused("unknown format version \"02\"");

  header["format_version"] = 2;
  spit(file, build_file("TTCKPT01", header, four_floats));
  expect_refused("unknown format version 2");
  header["format_version"] = 1;

  header["tensors"][1]["name"] = "a";
  spit(file, build_file("TTCKPT01", header, four_floats));
  expect_refused("duplicate tensor name \"a\"");
  header["tensors"][1]["name"] = "b";

  header["tensors"][1]["offset_bytes"] = 4;  // overlaps a
  spit(file, build_file("TTCKPT01", header, four_floats));
  expect_refused("does not follow the previous tensor");
  header["tensors"][1]["offset_bytes"] = 8;

  header.erase("seed");
  spit(file, build_file("TTCKPT01", header, four_floats));
  expect_refused("malformed header");
  header["seed"] = 1;

  // A file of iteration 10 copied to iteration 11's place.
  write_rank_checkpoint(dir_, 10, 3, sample_checkpoint());
  fs::create_directories(checkpoint_iteration_dir(dir_, 11));
  fs::copy_file(file, rank_checkpoint_path(dir_, 11, 3));
  EXPECT_THROW(read_rank_checkpoint(dir_, 11, 3), DataError);
}

TEST_F(CheckpointTest, SignatureMismatchListsEveryKey) {
  RankCheckpoint c = sample_checkpoint();
  c.signature["only_in_checkpoint"] = "x";
  std::map<std::string, std::string> run = c.signature;
  run.erase("only_in_checkpoint");
  EXPECT_THROW(check_signature(c, run, "ck/iter_0000010/rank_00003.ttckpt"), DataError);
  run["only_in_run"] = "y";
  run["tp"] = "4";
  run["hidden_size"] = "128";
  try {
    check_signature(c, run, "ck/iter_0000010/rank_00003.ttckpt");
    ADD_FAILURE() << "signatures differ";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("ck/iter_0000010/rank_00003.ttckpt"),
                                HasSubstr("4 signature keys differ"),
                                HasSubstr("tp: checkpoint 2, this run 4"),
                                HasSubstr("hidden_size: checkpoint 64, this run 128"),
                                HasSubstr("only_in_checkpoint: checkpoint x, this run (absent)"),
                                HasSubstr("only_in_run: checkpoint (absent), this run y"),
                                Not(HasSubstr("num_layers")), Not(HasSubstr("rank:"))));
  }
  EXPECT_NO_THROW(check_signature(c, c.signature, "same"));
}

TEST_F(CheckpointTest, LatestIterationRoundTrip) {
  EXPECT_THROW(read_latest_iteration(dir_), DataError);  // no checkpoint yet
  write_latest_iteration(dir_, 10);
  EXPECT_EQ(read_latest_iteration(dir_), 10);
  write_latest_iteration(dir_, 123456789012LL);
  EXPECT_EQ(read_latest_iteration(dir_), 123456789012LL);
  const auto text = slurp(latest_iteration_path(dir_));
  EXPECT_EQ(std::string(text.begin(), text.end()), "123456789012");  // as Megatron writes it
  EXPECT_TRUE(no_temporaries(dir_));
  // Megatron's own file may end in a newline; "release" (a converted checkpoint) is refused.
  spit(latest_iteration_path(dir_), {'7', '\n'});
  EXPECT_EQ(read_latest_iteration(dir_), 7);
  spit(latest_iteration_path(dir_), {'r', 'e', 'l', 'e', 'a', 's', 'e'});
  try {
    read_latest_iteration(dir_);
    ADD_FAILURE() << "accepted \"release\"";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(),
                AllOf(HasSubstr(latest_iteration_path(dir_).string()), HasSubstr("\"release\"")));
  }
  EXPECT_THROW(write_latest_iteration(dir_, -1), InvalidArgument);
}

}  // namespace
}  // namespace traintwin
