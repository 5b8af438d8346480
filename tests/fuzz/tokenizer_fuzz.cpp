// libFuzzer target: the GPT-2 BPE tokenizer. A synthetic vocabulary of GPT-2's form (the 256
// byte symbols, 50000 merges of two byte symbols, <|endoftext|>) is written once; then
//   first byte even: encode(text) -> ids in range, and decode(ids) == text (byte-level BPE is
//                    lossless for any bytes);
//   first byte odd:  the rest is a vocab.bpe (merges) file loaded with the synthetic encoder.
#include "exec/tokenizer.hpp"
#include "tests/fuzz/fuzz_support.hpp"
#include "tests/synthetic_vocabulary.hpp"

namespace {

const std::filesystem::path& vocabulary_dir() {
  static const std::filesystem::path dir =
      traintwin::testing::write_synthetic_gpt2_vocabulary(traintwin::fuzz::scratch_dir() / "gpt2");
  return dir;
}

const traintwin::Tokenizer& tokenizer() {
  static const traintwin::Tokenizer tok = traintwin::Tokenizer::load_dir(vocabulary_dir());
  return tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace traintwin;
  if (size < 1) return 0;
  const std::string text = fuzz::as_text(data + 1, size - 1);
  if ((data[0] & 1) == 0) {
    const std::vector<int32_t> ids = tokenizer().encode(text);
    for (int32_t id : ids) fuzz::require(id >= 0 && id < tokenizer().vocab_size(), "id in range");
    fuzz::require(tokenizer().decode(ids) == text, "decode(encode(text)) == text");
    return 0;
  }
  const auto merges = fuzz::scratch_dir() / "merges.bpe";
  fuzz::write_bytes(merges, data + 1, size - 1);
  return fuzz::expect_error_or_success([&] {
    const Tokenizer t = Tokenizer::load(vocabulary_dir() / "encoder.json", merges);
    const std::vector<int32_t> ids = t.encode("The quick brown fox, 1234 \xff\xfe!");
    fuzz::require(t.decode(ids) == "The quick brown fox, 1234 \xff\xfe!", "round trip");
  });
}
