// `traintwin preprocess`: the built binary on tiny .jsonl and .txt corpora, the result read back
// with IndexedDataset and compared with Tokenizer::encode of each document (+ <|endoftext|> with
// --append-eod), and the errors (missing input, malformed JSON line, missing key, missing output
// directory, unsupported tokenizer) leaving no output behind.
//
// Needs the GPT-2 vocabulary in data/gpt2 (scripts/fetch_data.sh); skips with that message
// when it is missing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "exec/indexed_dataset.hpp"
#include "exec/tokenizer.hpp"
#include "run_cli.hpp"

namespace traintwin {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;

const fs::path kGpt2 = fs::path(TRAINTWIN_SOURCE_DIR) / "data" / "gpt2";

const Tokenizer* gpt2() {
  static const std::optional<Tokenizer> tok = []() -> std::optional<Tokenizer> {
    if (!fs::exists(kGpt2 / "encoder.json") || !fs::exists(kGpt2 / "vocab.bpe")) {
      return std::nullopt;
    }
    return Tokenizer::load_dir(kGpt2);
  }();
  return tok ? &*tok : nullptr;
}

#define REQUIRE_GPT2()           \
  const Tokenizer* tok = gpt2(); \
  if (tok == nullptr)            \
  GTEST_SKIP() << "data/gpt2/encoder.json and vocab.bpe missing: run scripts/fetch_data.sh"

class PreprocessCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("traintwin-prep-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path file(const std::string& name, const std::string& content) const {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }

  /// Runs preprocess with the GPT-2 files and `extra` arguments.
  static testing::CliResult run(const std::string& extra) {
    return testing::run_cli("preprocess --tokenizer-type GPT2BPETokenizer --vocab-file " +
                            (kGpt2 / "encoder.json").string() + " --merge-file " +
                            (kGpt2 / "vocab.bpe").string() + " " + extra);
  }

  /// Names in dir_ other than the inputs (.jsonl, .txt, .csv).
  std::vector<std::string> outputs() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) {
      const std::string ext = e.path().extension().string();
      if (ext != ".jsonl" && ext != ".txt" && ext != ".csv")
        names.push_back(e.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

  /// Expects the dataset at `prefix` to hold exactly `texts`, encoded, one document each.
  static void expect_documents(const Tokenizer& tok, const std::string& prefix,
                               const std::vector<std::string>& texts, bool eod) {
    const IndexedDataset ds = IndexedDataset::open(prefix);
    ASSERT_EQ(ds.num_documents(), static_cast<int64_t>(texts.size()));
    EXPECT_EQ(ds.dtype(), TokenDType::kUInt16);  // 50257 < 65500, as Megatron picks
    int64_t tokens = 0;
    for (size_t d = 0; d < texts.size(); ++d) {
      std::vector<int32_t> expected = tok.encode(texts[d]);
      if (eod && !expected.empty()) expected.push_back(Tokenizer::kEndOfText);
      const auto [first, last] = ds.document_sequences(static_cast<int64_t>(d));
      if (expected.empty()) {
        EXPECT_EQ(last, first) << "document " << d;
        continue;
      }
      ASSERT_EQ(last - first, 1) << "document " << d;
      EXPECT_EQ(ds.sequence(first), expected) << "document " << d;
      tokens += static_cast<int64_t>(expected.size());
    }
    EXPECT_EQ(ds.num_tokens(), tokens);
  }

  fs::path dir_;
};

TEST_F(PreprocessCliTest, JsonLinesWithAppendEod) {
  REQUIRE_GPT2();
  const std::vector<std::string> texts = {
      "Hello world! The quick brown fox jumps over the lazy dog.",
      "Caf\xc3\xa9 \xe2\x80\x9cquoted\xe2\x80\x9d text,\nwith a newline and\ttab.",
      "",  // an empty text: an empty document, no end-of-text
      "<|endoftext|> is ordinary text here; 12345 numbers."};
  std::string jsonl;
  for (const auto& t : texts) jsonl += nlohmann::json{{"id", 1}, {"text", t}}.dump() + "\n";
  jsonl += "\n";  // a trailing blank line is skipped
  const fs::path in = file("corpus.jsonl", jsonl);
  const std::string prefix = (dir_ / "out").string();
  const auto r = run("--input " + in.string() + " --output-prefix " + prefix +
                     " --append-eod --log-interval 2");
  ASSERT_EQ(r.status, 0) << r.output;
  expect_documents(*tok, prefix + "_text_document", texts, true);
  int64_t tokens = 0;
  for (const auto& t : texts) {
    const auto n = static_cast<int64_t>(tok->encode(t).size());
    tokens += n > 0 ? n + 1 : 0;
  }
  EXPECT_THAT(r.output,
              AllOf(HasSubstr("processed 2 documents"), HasSubstr("processed 4 documents"),
                    HasSubstr("done: 4 documents, " + std::to_string(tokens) + " tokens"),
                    HasSubstr("tokens/s")));
  EXPECT_EQ(outputs(),
            (std::vector<std::string>{"out_text_document.bin", "out_text_document.idx"}));
}

TEST_F(PreprocessCliTest, SeveralJsonKeysGiveOneDatasetEach) {
  REQUIRE_GPT2();
  const fs::path in = file("c.jsonl",
                           "{\"title\": \"First\", \"body\": \"One body.\"}\n"
                           "{\"body\": \"Two body.\", \"title\": \"Second title\"}\n");
  const std::string prefix = (dir_ / "kv").string();
  const auto r =
      run("--input " + in.string() + " --output-prefix " + prefix + " --json-keys title body");
  ASSERT_EQ(r.status, 0) << r.output;
  expect_documents(*tok, prefix + "_title_document", {"First", "Second title"}, false);
  expect_documents(*tok, prefix + "_body_document", {"One body.", "Two body."}, false);
}

TEST_F(PreprocessCliTest, TextFileDocumentsAreSeparatedByBlankLines) {
  REQUIRE_GPT2();
  const fs::path in = file("corpus.txt",
                           "\n"
                           "First document, line one.\n"
                           "Line two of the first.\n"
                           "\n"
                           "   \n"
                           "\n"
                           "Second document.\n"
                           "\n"
                           "Third, no trailing newline");
  const std::string prefix = (dir_ / "txt").string();
  const auto r = run("--input " + in.string() + " --output-prefix " + prefix);
  ASSERT_EQ(r.status, 0) << r.output;
  expect_documents(*tok, prefix + "_text_document",
                   {"First document, line one.\nLine two of the first.", "Second document.",
                    "Third, no trailing newline"},
                   false);
  EXPECT_THAT(r.output, HasSubstr("done: 3 documents"));
}

TEST_F(PreprocessCliTest, ErrorsNameTheProblemAndLeaveNoOutput) {
  REQUIRE_GPT2();
  const std::string prefix = (dir_ / "out").string();
  struct Case {
    std::string input;
    std::string extra;
    std::vector<std::string> needles;
  };
  const fs::path bad_json = file("bad.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"unterminated}\n");
  const fs::path no_key = file("nokey.jsonl", "{\"text\": \"a\"}\n\n{\"body\": \"b\"}\n");
  const fs::path not_string = file("num.jsonl", "{\"text\": 5}\n");
  const fs::path good = file("good.jsonl", "{\"text\": \"a\"}\n");
  const std::vector<Case> cases = {
      {(dir_ / "missing.jsonl").string(), "", {"missing.jsonl", "no such file"}},
      {bad_json.string(), "", {"bad.jsonl:2", "malformed JSON"}},
      {no_key.string(), "", {"nokey.jsonl:3", "no key \"text\""}},
      {not_string.string(), "", {"num.jsonl:1", "not a string"}},
      {good.string(), "--json-keys body", {"good.jsonl:1", "no key \"body\""}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.input);
    const auto r = run("--input " + c.input + " --output-prefix " + prefix + " " + c.extra);
    EXPECT_NE(r.status, 0) << r.output;
    for (const auto& n : c.needles) EXPECT_THAT(r.output, HasSubstr(n));
    EXPECT_TRUE(outputs().empty()) << r.output;
  }
  const auto no_dir =
      run("--input " + good.string() + " --output-prefix " + (dir_ / "nodir" / "out").string());
  EXPECT_NE(no_dir.status, 0);
  EXPECT_THAT(no_dir.output, AllOf(HasSubstr("output directory"), HasSubstr("nodir")));

  const auto bad_tok = testing::run_cli(
      "preprocess --tokenizer-type SentencePieceTokenizer --vocab-file x --merge-file y "
      "--input " +
      good.string() + " --output-prefix " + prefix);
  EXPECT_NE(bad_tok.status, 0);
  EXPECT_THAT(bad_tok.output,
              AllOf(HasSubstr("SentencePieceTokenizer"), HasSubstr("GPT2BPETokenizer")));

  const auto bad_ext = run("--input " + file("c.csv", "x").string() + " --output-prefix " + prefix);
  EXPECT_NE(bad_ext.status, 0);
  EXPECT_THAT(bad_ext.output, AllOf(HasSubstr("c.csv"), HasSubstr(".jsonl"), HasSubstr(".txt")));
  EXPECT_TRUE(outputs().empty());
}

}  // namespace
}  // namespace traintwin
