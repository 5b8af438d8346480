// Megatron indexed dataset (.bin/.idx): writer -> reader round trips in both dtypes, files built
// byte by byte to the layout Megatron-LM's _IndexWriter writes (offsets in
// exec/indexed_dataset.hpp), and truncated or corrupt files refused with messages naming the file.
#include "exec/indexed_dataset.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "tests/no_temporaries.hpp"

namespace traintwin {
namespace {

using traintwin::testing::no_temporaries;


namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

class IndexedDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("traintwin-idx-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string prefix(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

std::vector<unsigned char> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void spit(const std::string& path, const std::vector<unsigned char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

/// Little-endian byte builder with explicit offsets, as Megatron's struct.pack("<...") and
/// numpy tobytes() lay the index out.
class Bytes {
 public:
  void raw(const void* p, size_t n) {
    const auto* c = static_cast<const unsigned char*>(p);
    data_.insert(data_.end(), c, c + n);
  }
  template <typename T>
  void put(T v) {
    unsigned char b[sizeof(T)];
    for (size_t k = 0; k < sizeof(T); ++k) {
      b[k] = static_cast<unsigned char>((static_cast<uint64_t>(v) >> (8 * k)) & 0xff);
    }
    raw(b, sizeof(T));
  }
  size_t size() const { return data_.size(); }
  const std::vector<unsigned char>& data() const { return data_; }

 private:
  std::vector<unsigned char> data_;
};

/// A Megatron .idx built field by field (magic at 0, version at 9, code at 17, counts at 18 and
/// 26, arrays from 34). `document_indices` includes the leading 0.
std::vector<unsigned char> megatron_idx(uint8_t code, const std::vector<int32_t>& lengths,
                                        const std::vector<int64_t>& document_indices,
                                        const std::vector<int8_t>* modes = nullptr) {
  const size_t item = code == 8 ? 2 : code == 4 ? 4 : code == 1 ? 1 : code == 5 ? 8 : 2;
  Bytes b;
  b.raw("MMIDIDX\0\0", 9);
  EXPECT_EQ(b.size(), 9u);
  b.put<uint64_t>(1);
  EXPECT_EQ(b.size(), 17u);
  b.put<uint8_t>(code);
  EXPECT_EQ(b.size(), 18u);
  b.put<uint64_t>(lengths.size());
  b.put<uint64_t>(document_indices.size());
  EXPECT_EQ(b.size(), 34u);
  for (int32_t l : lengths) b.put<int32_t>(l);
  int64_t ptr = 0;
  for (int32_t l : lengths) {
    b.put<int64_t>(ptr);
    ptr += l * static_cast<int64_t>(item);
  }
  for (int64_t d : document_indices) b.put<int64_t>(d);
  if (modes != nullptr) {
    for (int8_t m : *modes) b.put<int8_t>(m);
  }
  return b.data();
}

/// Tokens back to back in uint16 (code 8) or int32 (code 4).
std::vector<unsigned char> megatron_bin(uint8_t code, const std::vector<int32_t>& tokens) {
  Bytes b;
  for (int32_t t : tokens) {
    if (code == 8) {
      b.put<uint16_t>(static_cast<uint16_t>(t));
    } else {
      b.put<int32_t>(t);
    }
  }
  return b.data();
}

template <typename F>
void ExpectError(F f, const std::vector<std::string>& needles) {
  try {
    f();
    FAIL() << "expected an Error mentioning " << needles.front();
  } catch (const Error& e) {
    for (const auto& n : needles) EXPECT_THAT(e.what(), HasSubstr(n));
  }
}

std::vector<std::vector<int32_t>> sample_docs(int32_t vocab) {
  return {{1, 2, 3}, {vocab - 1, 0}, {}, {42}, {7, 8, 9, 10, 11, vocab - 2}};
}

void round_trip(const std::string& pre, int64_t vocab, TokenDType want, size_t item) {
  const auto docs = sample_docs(static_cast<int32_t>(vocab));
  {
    IndexedDatasetWriter w(pre, vocab);
    EXPECT_EQ(w.dtype(), want);
    for (const auto& d : docs) w.add_document(d);
    EXPECT_EQ(w.num_documents(), 5);
    EXPECT_EQ(w.num_sequences(), 4);
    EXPECT_EQ(w.num_tokens(), 12);
    w.finalize();
  }
  EXPECT_TRUE(no_temporaries(fs::path(pre).parent_path()));
  EXPECT_EQ(fs::file_size(pre + ".bin"), 12 * item);
  EXPECT_EQ(fs::file_size(pre + ".idx"), 34u + 12 * 4 + 8 * 6);

  const IndexedDataset ds = IndexedDataset::open(pre);
  EXPECT_EQ(ds.dtype(), want);
  EXPECT_EQ(ds.size(), 4);
  EXPECT_EQ(ds.num_documents(), 5);
  EXPECT_EQ(ds.num_tokens(), 12);
  EXPECT_FALSE(ds.has_sequence_modes());
  EXPECT_THAT(ds.sequence_lengths(), ElementsAre(3, 2, 1, 6));
  EXPECT_THAT(ds.sequence_pointers(), ElementsAre(0, 3 * item, 5 * item, 6 * item));
  EXPECT_THAT(ds.document_indices(), ElementsAre(0, 1, 2, 2, 3, 4));
  EXPECT_EQ(ds.document_sequences(2), std::make_pair(int64_t{2}, int64_t{2}));  // empty doc
  EXPECT_EQ(ds.document_sequences(4), std::make_pair(int64_t{3}, int64_t{4}));
  EXPECT_THAT(ds.sequence(0), ElementsAreArray(docs[0]));
  EXPECT_THAT(ds.sequence(1), ElementsAreArray(docs[1]));
  EXPECT_THAT(ds.sequence(2), ElementsAreArray(docs[3]));
  EXPECT_THAT(ds.sequence(3), ElementsAreArray(docs[4]));

  std::vector<int32_t> part(3);
  ds.read(3, 2, part);
  EXPECT_THAT(part, ElementsAre(9, 10, 11));
  std::vector<int32_t> window(5);
  ds.read_stream(1, window);  // crosses documents 0 -> 1 -> 3
  EXPECT_THAT(window, ElementsAre(2, 3, static_cast<int32_t>(vocab - 1), 0, 42));
  std::vector<int32_t> all(12);
  ds.read_stream(0, all);
  EXPECT_EQ(all.back(), vocab - 2);
}

TEST_F(IndexedDatasetTest, DtypeFollowsMegatronOptimalDtype) {
  EXPECT_EQ(optimal_token_dtype(1), TokenDType::kUInt16);
  EXPECT_EQ(optimal_token_dtype(50257), TokenDType::kUInt16);
  EXPECT_EQ(optimal_token_dtype(65499), TokenDType::kUInt16);
  EXPECT_EQ(optimal_token_dtype(65500), TokenDType::kInt32);
  EXPECT_EQ(optimal_token_dtype(128256), TokenDType::kInt32);
  EXPECT_THROW(optimal_token_dtype(0), InvalidArgument);
  EXPECT_EQ(static_cast<int>(TokenDType::kUInt16), 8);
  EXPECT_EQ(static_cast<int>(TokenDType::kInt32), 4);
  EXPECT_EQ(token_dtype_size(TokenDType::kUInt16), 2u);
  EXPECT_EQ(token_dtype_size(TokenDType::kInt64), 8u);
  EXPECT_STREQ(token_dtype_name(TokenDType::kFloat64), "float64");
}

TEST_F(IndexedDatasetTest, RoundTripUInt16) {
  round_trip(prefix("gpt2"), 50257, TokenDType::kUInt16, 2);
}

TEST_F(IndexedDatasetTest, RoundTripInt32) {
  round_trip(prefix("big"), 100000, TokenDType::kInt32, 4);
}

TEST_F(IndexedDatasetTest, WriterBytesEqualMegatronLayout) {
  const std::string pre = prefix("w");
  IndexedDatasetWriter w(pre, 50257);
  w.add_document({15496, 995});
  w.add_document({50256});
  w.finalize();
  EXPECT_EQ(slurp(pre + ".idx"), megatron_idx(8, {2, 1}, {0, 1, 2}));
  EXPECT_EQ(slurp(pre + ".bin"), megatron_bin(8, {15496, 995, 50256}));
}

TEST_F(IndexedDatasetTest, EmptyDatasetRoundTrips) {
  const std::string pre = prefix("empty");
  IndexedDatasetWriter w(pre, 10);
  w.finalize();
  const IndexedDataset ds = IndexedDataset::open(pre);
  EXPECT_EQ(ds.size(), 0);
  EXPECT_EQ(ds.num_documents(), 0);
  EXPECT_EQ(ds.num_tokens(), 0);
}

// A dataset as preprocess_data.py --split-sentences writes it: several sequences per document.
TEST_F(IndexedDatasetTest, MegatronMadeFileReadsBack) {
  const std::string pre = prefix("megatron_text_document");
  const std::vector<int32_t> tokens = {10, 11, 12, 20, 21, 30, 31, 32, 33, 40};
  spit(pre + ".idx", megatron_idx(8, {3, 2, 4, 1}, {0, 2, 3, 4}));
  spit(pre + ".bin", megatron_bin(8, tokens));
  const IndexedDataset ds = IndexedDataset::open(pre);
  EXPECT_EQ(ds.dtype(), TokenDType::kUInt16);
  EXPECT_EQ(ds.size(), 4);
  EXPECT_EQ(ds.num_documents(), 3);
  EXPECT_EQ(ds.document_sequences(0), std::make_pair(int64_t{0}, int64_t{2}));
  EXPECT_THAT(ds.sequence(0), ElementsAre(10, 11, 12));
  EXPECT_THAT(ds.sequence(1), ElementsAre(20, 21));
  EXPECT_THAT(ds.sequence(2), ElementsAre(30, 31, 32, 33));
  EXPECT_THAT(ds.sequence(3), ElementsAre(40));
  std::vector<int32_t> all(10);
  ds.read_stream(0, all);
  EXPECT_EQ(all, tokens);
}

TEST_F(IndexedDatasetTest, MegatronInt32FileReadsBack) {
  const std::string pre = prefix("llama3");
  spit(pre + ".idx", megatron_idx(4, {2, 2}, {0, 1, 2}));
  spit(pre + ".bin", megatron_bin(4, {128000, 5, 128255, 0}));
  const IndexedDataset ds = IndexedDataset::open(pre);
  EXPECT_EQ(ds.dtype(), TokenDType::kInt32);
  EXPECT_THAT(ds.sequence(0), ElementsAre(128000, 5));
  EXPECT_THAT(ds.sequence(1), ElementsAre(128255, 0));
}

TEST_F(IndexedDatasetTest, MultimodalModesArrayRecognised) {
  const std::string pre = prefix("mm");
  const std::vector<int8_t> modes = {0, 1};
  spit(pre + ".idx", megatron_idx(8, {1, 2}, {0, 2}, &modes));
  spit(pre + ".bin", megatron_bin(8, {1, 2, 3}));
  const IndexedDataset ds = IndexedDataset::open(pre);
  EXPECT_TRUE(ds.has_sequence_modes());
  EXPECT_THAT(ds.sequence_modes(), ElementsAre(0, 1));
  EXPECT_THAT(ds.sequence(1), ElementsAre(2, 3));
}

TEST_F(IndexedDatasetTest, OutOfRangeAccessIsInvalidArgument) {
  const std::string pre = prefix("r");
  IndexedDatasetWriter w(pre, 100);
  w.add_document({1, 2, 3});
  w.finalize();
  const IndexedDataset ds = IndexedDataset::open(pre);
  EXPECT_THROW(ds.sequence(1), InvalidArgument);
  EXPECT_THROW(ds.sequence(-1), InvalidArgument);
  EXPECT_THROW(ds.document_sequences(1), InvalidArgument);
  std::vector<int32_t> two(2);
  EXPECT_THROW(ds.read(0, 2, two), InvalidArgument);
  std::vector<int32_t> four(4);
  EXPECT_THROW(ds.read_stream(0, four), InvalidArgument);
}

TEST_F(IndexedDatasetTest, WriterRejectsTokensOutsideVocabAndLeavesNothing) {
  const std::string pre = prefix("bad");
  {
    IndexedDatasetWriter w(pre, 100);
    w.add_document({1, 2});
    try {
      w.add_document({5, 100});
      FAIL() << "expected InvalidArgument";
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr("document 1, token 1 is 100"));
    }
    EXPECT_THROW(w.add_document({-1}), InvalidArgument);
  }  // destroyed without finalize
  EXPECT_TRUE(fs::is_empty(dir_));
  EXPECT_THROW(IndexedDatasetWriter(pre, 0), InvalidArgument);
}

TEST_F(IndexedDatasetTest, UnfinishedWriterDoesNotClobberExistingDataset) {
  const std::string pre = prefix("keep");
  {
    IndexedDatasetWriter w(pre, 100);
    w.add_document({1, 2, 3});
    w.finalize();
    EXPECT_THROW(w.finalize(), Error);
    EXPECT_THROW(w.add_document({1}), Error);
  }
  const auto idx = slurp(pre + ".idx");
  {
    IndexedDatasetWriter w(pre, 100000);
    w.add_document({4});
  }
  EXPECT_EQ(slurp(pre + ".idx"), idx);
  EXPECT_THAT(IndexedDataset::open(pre).sequence(0), ElementsAre(1, 2, 3));
}

TEST_F(IndexedDatasetTest, MissingFilesNamed) {
  const std::string pre = prefix("none");
  ExpectError([&] { IndexedDataset::open(pre); }, {pre + ".idx", "cannot open"});
  spit(pre + ".idx", megatron_idx(8, {1}, {0, 1}));
  ExpectError([&] { IndexedDataset::open(pre); }, {pre + ".bin", "cannot open"});
}

// Each corruption of a good uint16 dataset (2 sequences: 3 + 2 tokens, 2 documents).
TEST_F(IndexedDatasetTest, CorruptIndexRejectedWithFileAndReason) {
  const std::string pre = prefix("c");
  const auto good_idx = megatron_idx(8, {3, 2}, {0, 1, 2});
  const auto good_bin = megatron_bin(8, {1, 2, 3, 4, 5});
  const std::string idx_path = pre + ".idx";
  const std::string bin_path = pre + ".bin";
  auto expect = [&](std::vector<unsigned char> idx, std::vector<unsigned char> bin,
                    const std::vector<std::string>& needles) {
    spit(idx_path, idx);
    spit(bin_path, bin);
    ExpectError([&] { IndexedDataset::open(pre); }, needles);
  };
  spit(idx_path, good_idx);
  spit(bin_path, good_bin);
  ASSERT_NO_THROW(IndexedDataset::open(pre));

  auto with = [&](size_t offset, std::vector<unsigned char> bytes) {
    auto idx = good_idx;
    std::memcpy(&idx[offset], bytes.data(), bytes.size());
    return idx;
  };
  auto head = [&](size_t n) {
    return std::vector<unsigned char>(good_idx.begin(), good_idx.begin() + n);
  };

  expect({}, good_bin, {idx_path, "truncated", "header needs 34 bytes, the file has 0"});
  expect(head(20), good_bin, {idx_path, "truncated"});
  expect(with(0, {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 1}), good_bin, {idx_path, "bad magic"});
  expect(with(0, {'T', 'N', 'T'}), good_bin, {idx_path, "bad magic"});
  expect(with(9, {2}), good_bin, {idx_path, "unsupported version 2"});
  expect(with(17, {0}), good_bin, {idx_path, "unknown dtype code 0"});
  expect(with(17, {9}), good_bin, {idx_path, "unknown dtype code 9"});
  expect(with(17, {6}), good_bin, {idx_path, "dtype code 6 is floating point"});
  expect(with(17, {7}), good_bin, {idx_path, "dtype code 7 is floating point"});
  expect(head(good_idx.size() - 1), good_bin, {idx_path, "truncated", "2 sequences"});
  expect(with(18, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}), good_bin,
         {idx_path, "truncated"});
  auto longer = good_idx;
  longer.insert(longer.end(), {0, 0, 0});
  expect(longer, good_bin, {idx_path, "3 unexpected trailing bytes"});
  expect(megatron_idx(8, {3, 2}, {1, 1, 2}), good_bin, {idx_path, "must start at 0"});
  expect(megatron_idx(8, {3, 2}, {0, 2, 1}), good_bin, {idx_path, "smaller than the one before"});
  expect(megatron_idx(8, {3, 2}, {0, 1}), good_bin, {idx_path, "not the sequence count 2"});
  // Sequence lengths at 34, pointers at 34 + 4*2 = 42, document indices at 58.
  expect(with(38, {0xfe, 0xff, 0xff, 0xff}), good_bin, {idx_path, "negative length -2"});
  expect(with(50, {0x40}), good_bin, {bin_path, "sequence 1 at byte 64", "lies outside"});
  expect(with(50, {4}), good_bin, {idx_path, "starts at byte 4", "byte 6"});
  expect(good_idx, megatron_bin(8, {1, 2, 3, 4}), {bin_path, "lies outside", "(8 bytes)"});
  expect(good_idx, megatron_bin(8, {1, 2, 3, 4, 5, 6}),
         {bin_path, "has 12 bytes", "describes 10", "do not belong together"});
}

TEST_F(IndexedDatasetTest, InvalidStoredTokenIdsNamed) {
  const std::string pre = prefix("neg");
  spit(pre + ".idx", megatron_idx(4, {2}, {0, 1}));
  spit(pre + ".bin", megatron_bin(4, {3, -7}));
  const IndexedDataset ds = IndexedDataset::open(pre);
  ExpectError([&] { ds.sequence(0); }, {pre + ".bin", "token 1 is -7"});
}

TEST_F(IndexedDatasetTest, MovedDatasetKeepsItsMapping) {
  const std::string pre = prefix("mv");
  IndexedDatasetWriter w(pre, 100);
  w.add_document({9, 8});
  w.finalize();
  IndexedDataset a = IndexedDataset::open(pre);
  IndexedDataset b = std::move(a);
  EXPECT_THAT(b.sequence(0), ElementsAre(9, 8));
  a = IndexedDataset::open(pre);
  b = std::move(a);
  EXPECT_THAT(b.sequence(0), ElementsAre(9, 8));
}

}  // namespace
}  // namespace traintwin
