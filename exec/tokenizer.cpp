// GPT-2 byte-level BPE (see tokenizer.hpp): bytes_to_unicode, the hand-written pre-tokenizer,
// rank-ordered merges, and the Brown corpus tag stripper.
#include "exec/tokenizer.hpp"

#include <array>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "core/error.hpp"
#include "core/input_file.hpp"

namespace traintwin {
namespace {

// ---------------------------------------------------------------------------------------------
// Character classes (approximation documented in tokenizer.hpp).

enum class CharClass { kLetter, kNumber, kSpace, kOther };

struct Range {
  char32_t lo;
  char32_t hi;
};

// Unicode White_Space beyond ASCII.
constexpr Range kSpaceRanges[] = {{0x85, 0x85},     {0xA0, 0xA0},     {0x1680, 0x1680},
                                  {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F},
                                  {0x205F, 0x205F}, {0x3000, 0x3000}};

// Zero digits of the decimal digit (Nd) blocks; each block is zero..zero+9.
constexpr char32_t kDigitZeros[] = {
    0x0660,  0x06F0,  0x07C0,  0x0966,  0x09E6,  0x0A66,  0x0AE6,  0x0B66,  0x0BE6,
    0x0C66,  0x0CE6,  0x0D66,  0x0DE6,  0x0E50,  0x0ED0,  0x0F20,  0x1040,  0x1090,
    0x17E0,  0x1810,  0x1946,  0x19D0,  0x1A80,  0x1A90,  0x1B50,  0x1BB0,  0x1C40,
    0x1C50,  0xA620,  0xA8D0,  0xA900,  0xA9D0,  0xA9F0,  0xAA50,  0xABF0,  0xFF10,
    0x104A0, 0x11066, 0x110F0, 0x11136, 0x111D0, 0x112F0, 0x11450, 0x114D0, 0x11650,
    0x116C0, 0x11730, 0x118E0, 0x16A60, 0x16B50, 0x1E950};

// Other numbers (No, Nl) and the mathematical digits.
constexpr Range kNumberRanges[] = {
    {0xB2, 0xB3},       {0xB9, 0xB9},       {0xBC, 0xBE},       {0x09F4, 0x09F9},
    {0x0BF0, 0x0BF2},   {0x0F2A, 0x0F33},   {0x1369, 0x137C},   {0x16EE, 0x16F0},
    {0x17F0, 0x17F9},   {0x2070, 0x2070},   {0x2074, 0x2079},   {0x2080, 0x2089},
    {0x2150, 0x2182},   {0x2185, 0x2189},   {0x2460, 0x249B},   {0x24EA, 0x24FF},
    {0x2776, 0x2793},   {0x2CFD, 0x2CFD},   {0x3007, 0x3007},   {0x3021, 0x3029},
    {0x3038, 0x303A},   {0x3192, 0x3195},   {0x3220, 0x3229},   {0x3248, 0x324F},
    {0x3251, 0x325F},   {0x3280, 0x3289},   {0x32B1, 0x32BF},   {0x10107, 0x10133},
    {0x1D7CE, 0x1D7FF}, {0x1F100, 0x1F10C}};

// Punctuation, symbols, controls, format characters and combining-mark blocks (neither L nor N).
// Checked after kSpaceRanges and the numbers, so overlaps with them are harmless.
constexpr Range kOtherRanges[] = {
    {0x80, 0x9F},       {0xA1, 0xA9},       {0xAB, 0xB4},       {0xB6, 0xB9},
    {0xBB, 0xBF},       {0xD7, 0xD7},       {0xF7, 0xF7},       {0x02C2, 0x02C5},
    {0x02D2, 0x02DF},   {0x02E5, 0x02EB},   {0x02ED, 0x02ED},   {0x02EF, 0x036F},
    {0x037E, 0x037E},   {0x0387, 0x0387},   {0x055A, 0x055F},   {0x0589, 0x058A},
    {0x060C, 0x060C},   {0x061B, 0x061B},   {0x061F, 0x061F},   {0x066A, 0x066D},
    {0x06D4, 0x06D4},   {0x0964, 0x0965},   {0x1AB0, 0x1AFF},   {0x1DC0, 0x1DFF},
    {0x200B, 0x2070},   {0x207A, 0x207E},   {0x208A, 0x208E},   {0x20A0, 0x20FF},
    {0x2100, 0x2101},   {0x2103, 0x2106},   {0x2108, 0x2109},   {0x2114, 0x2114},
    {0x2116, 0x2118},   {0x211E, 0x2123},   {0x2125, 0x2125},   {0x2127, 0x2127},
    {0x2129, 0x2129},   {0x212E, 0x212E},   {0x213A, 0x213B},   {0x2140, 0x2144},
    {0x214A, 0x214D},   {0x214F, 0x214F},   {0x2190, 0x2BFF},   {0x2E00, 0x2E7F},
    {0x3001, 0x3004},   {0x3008, 0x3020},   {0x3030, 0x3030},   {0x303D, 0x303F},
    {0x30FB, 0x30FB},   {0xE000, 0xF8FF},   {0xFE00, 0xFE19},   {0xFE20, 0xFE6F},
    {0xFEFF, 0xFEFF},   {0xFF01, 0xFF0F},   {0xFF1A, 0xFF20},   {0xFF3B, 0xFF40},
    {0xFF5B, 0xFF65},   {0xFFE0, 0xFFEE},   {0xFFF9, 0xFFFD},   {0x1F000, 0x1FAFF},
    {0xE0000, 0xE01EF}};

template <size_t N>
bool in_ranges(char32_t cp, const Range (&ranges)[N]) {
  for (const Range& r : ranges) {
    if (cp >= r.lo && cp <= r.hi) return true;
  }
  return false;
}

CharClass classify(char32_t cp) {
  if (cp < 0x80) {
    if ((cp >= 'A' && cp <= 'Z') || (cp >= 'a' && cp <= 'z')) return CharClass::kLetter;
    if (cp >= '0' && cp <= '9') return CharClass::kNumber;
    if (cp == ' ' || (cp >= '\t' && cp <= '\r')) return CharClass::kSpace;
    return CharClass::kOther;
  }
  if (in_ranges(cp, kSpaceRanges)) return CharClass::kSpace;
  for (char32_t zero : kDigitZeros) {
    if (cp >= zero && cp <= zero + 9) return CharClass::kNumber;
  }
  if (in_ranges(cp, kNumberRanges)) return CharClass::kNumber;
  if (in_ranges(cp, kOtherRanges)) return CharClass::kOther;
  return CharClass::kLetter;
}

/// One code point of the input: its length in bytes and class. An invalid UTF-8 byte is a code
/// point of length 1 and class kOther.
struct CodePoint {
  size_t len;
  CharClass cls;
};

CodePoint code_point_at(std::string_view s, size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return {1, classify(b0)};
  size_t len = 0;
  char32_t cp = 0;
  char32_t min = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2, cp = b0 & 0x1Fu, min = 0x80;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3, cp = b0 & 0x0Fu, min = 0x800;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4, cp = b0 & 0x07u, min = 0x10000;
  } else {
    return {1, CharClass::kOther};
  }
  if (i + len > s.size()) return {1, CharClass::kOther};
  for (size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0u) != 0x80u) return {1, CharClass::kOther};
    cp = (cp << 6) | (b & 0x3Fu);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {1, CharClass::kOther};
  return {len, classify(cp)};
}

/// End of the pattern's match at `i` (< s.size()); see the pattern in tokenizer.hpp.
size_t match_end(std::string_view s, size_t i) {
  const size_t n = s.size();
  // 's|'t|'re|'ve|'m|'ll|'d
  if (s[i] == '\'' && i + 1 < n) {
    const char c1 = s[i + 1];
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return i + 2;
    if (i + 2 < n) {
      const std::string_view two = s.substr(i + 1, 2);
      if (two == "re" || two == "ve" || two == "ll") return i + 3;
    }
  }
  const CodePoint first = code_point_at(s, i);
  // ' ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+': an optional space, then a run of one class.
  size_t run = n;  // start of the run, n when these alternatives do not match
  CharClass cls = first.cls;
  if (s[i] == ' ' && i + 1 < n) {
    const CodePoint next = code_point_at(s, i + 1);
    if (next.cls != CharClass::kSpace) run = i + 1, cls = next.cls;
  } else if (first.cls != CharClass::kSpace) {
    run = i;
  }
  if (run < n) {
    size_t j = run;
    while (j < n) {
      const CodePoint cp = code_point_at(s, j);
      if (cp.cls != cls) break;
      j += cp.len;
    }
    return j;
  }
  // '\s+(?!\S)|\s+': a whitespace run; unless it ends the text, leave its last code point to
  // the next match (it becomes the optional space of a word) when that keeps one code point.
  size_t j = i;
  size_t last = i;
  while (j < n) {
    const CodePoint cp = code_point_at(s, j);
    if (cp.cls != CharClass::kSpace) break;
    last = j;
    j += cp.len;
  }
  if (j == n || last == i) return j;
  return last;
}

// ---------------------------------------------------------------------------------------------
// bytes_to_unicode (encoder.py): printable bytes map to themselves, the others to 256 + k.

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::array<std::string, 256> make_byte_symbols() {
  std::array<std::string, 256> symbols;
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    append_utf8(symbols[static_cast<size_t>(b)],
                printable ? static_cast<char32_t>(b) : next++);
  }
  return symbols;
}

const std::array<std::string, 256>& byte_symbols() {
  static const std::array<std::string, 256> symbols = make_byte_symbols();
  return symbols;
}

std::string read_file(const std::filesystem::path& path) {
  try {
    return read_input_file(path, "tokenizer file", kMaxDataFileBytes);
  } catch (const ConfigError& e) {
    throw TokenizerError(e.what());
  }
}

std::string pair_key(const std::string& a, const std::string& b) {
  std::string key;
  key.reserve(a.size() + b.size() + 1);
  key += a;
  key += ' ';  // never inside a symbol: the space byte maps to U+0120
  key += b;
  return key;
}

constexpr size_t kMaxCacheEntries = size_t{1} << 20;

}  // namespace

struct Tokenizer::State {
  std::unordered_map<std::string, int32_t> encoder;     // symbol -> id
  std::vector<std::string> id_bytes;                    // id -> raw bytes
  std::unordered_map<std::string, int32_t> merge_rank;  // "a b" -> rank
  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache;  // pre-token -> ids

  /// BPE of one pre-token (its raw bytes), appended to `out`.
  void bpe(std::string_view piece, std::vector<int32_t>& out) const {
    const auto& symbols_of = byte_symbols();
    std::vector<std::string> word;
    word.reserve(piece.size());
    for (char c : piece) word.push_back(symbols_of[static_cast<unsigned char>(c)]);
    while (word.size() > 1) {
      int32_t best = INT32_MAX;
      size_t best_i = 0;
      for (size_t i = 0; i + 1 < word.size(); ++i) {
        auto it = merge_rank.find(pair_key(word[i], word[i + 1]));
        if (it != merge_rank.end() && it->second < best) best = it->second, best_i = i;
      }
      if (best == INT32_MAX) break;
      const std::string first = word[best_i];
      const std::string second = word[best_i + 1];
      std::vector<std::string> merged;
      merged.reserve(word.size());
      for (size_t i = 0; i < word.size();) {
        if (i + 1 < word.size() && word[i] == first && word[i + 1] == second) {
          merged.push_back(first + second);
          i += 2;
        } else {
          merged.push_back(std::move(word[i]));
          i += 1;
        }
      }
      word = std::move(merged);
    }
    for (const std::string& symbol : word) out.push_back(encoder.at(symbol));
  }
};

Tokenizer::Tokenizer(std::unique_ptr<State> state) : state_(std::move(state)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::filesystem::path& encoder_json,
                          const std::filesystem::path& vocab_bpe) {
  auto state = std::make_unique<State>();
  const std::string enc_name = encoder_json.string();
  const std::string bpe_name = vocab_bpe.string();

  // encoder.json: {"symbol": id, ...}
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(read_file(encoder_json));
  } catch (const nlohmann::json::exception& e) {
    throw TokenizerError(enc_name + ": not valid JSON: " + e.what());
  }
  if (!json.is_object()) {
    throw TokenizerError(enc_name + ": expected a JSON object mapping tokens to ids");
  }
  if (json.size() != static_cast<size_t>(kVocabSize)) {
    throw TokenizerError(enc_name + ": has " + std::to_string(json.size()) +
                         " tokens, the GPT-2 vocabulary has " + std::to_string(kVocabSize));
  }
  // Inverse of bytes_to_unicode, keyed by the symbol's UTF-8.
  std::unordered_map<std::string, char> byte_of;
  for (int b = 0; b < 256; ++b) byte_of[byte_symbols()[static_cast<size_t>(b)]] = static_cast<char>(b);
  state->id_bytes.assign(static_cast<size_t>(kVocabSize), std::string());
  std::vector<bool> seen(static_cast<size_t>(kVocabSize), false);
  state->encoder.reserve(json.size());
  for (const auto& [token, value] : json.items()) {
    if (!value.is_number_integer()) {
      throw TokenizerError(enc_name + ": token \"" + token + "\": id is not an integer");
    }
    const int64_t id = value.get<int64_t>();
    if (id < 0 || id >= kVocabSize) {
      throw TokenizerError(enc_name + ": token \"" + token + "\": id " + std::to_string(id) +
                           " is outside [0, " + std::to_string(kVocabSize) + ")");
    }
    if (seen[static_cast<size_t>(id)]) {
      throw TokenizerError(enc_name + ": id " + std::to_string(id) + " is used twice (again by \"" +
                           token + "\")");
    }
    seen[static_cast<size_t>(id)] = true;
    // Token text -> raw bytes: split into UTF-8 code points, each must be a byte symbol.
    std::string bytes;
    for (size_t i = 0; i < token.size();) {
      const auto b0 = static_cast<unsigned char>(token[i]);
      const size_t len = b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
      auto it = byte_of.find(token.substr(i, len));
      if (it == byte_of.end()) {
        throw TokenizerError(enc_name + ": token \"" + token +
                             "\" has a character outside GPT-2's byte alphabet");
      }
      bytes += it->second;
      i += len;
    }
    state->id_bytes[static_cast<size_t>(id)] = std::move(bytes);
    state->encoder.emplace(token, static_cast<int32_t>(id));
  }
  auto eot = state->encoder.find("<|endoftext|>");
  if (eot == state->encoder.end() || eot->second != kEndOfText) {
    throw TokenizerError(enc_name + ": \"<|endoftext|>\" must have id " +
                         std::to_string(kEndOfText));
  }
  for (const std::string& symbol : byte_symbols()) {
    if (!state->encoder.contains(symbol)) {
      throw TokenizerError(enc_name + ": the byte symbol \"" + symbol + "\" is missing");
    }
  }

  // vocab.bpe: "#version: 0.2", then "a b" per line, best rank first.
  const std::string bpe_text = read_file(vocab_bpe);
  std::istringstream lines(bpe_text);
  std::string line;
  int64_t line_no = 0;
  int32_t rank = 0;
  while (std::getline(lines, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line_no == 1) {
      if (line.rfind("#version", 0) != 0) {
        throw TokenizerError(bpe_name + ":1: expected the \"#version\" header of a GPT-2 vocab.bpe");
      }
      continue;
    }
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string::npos) {
      throw TokenizerError(bpe_name + ":" + std::to_string(line_no) +
                           ": expected two symbols separated by one space, got \"" + line + "\"");
    }
    const std::string a = line.substr(0, space);
    const std::string b = line.substr(space + 1);
    if (!state->encoder.contains(a + b)) {
      throw TokenizerError(bpe_name + ":" + std::to_string(line_no) + ": the merge result \"" +
                           a + b + "\" is not in " + enc_name);
    }
    if (!state->merge_rank.emplace(line, rank).second) {
      throw TokenizerError(bpe_name + ":" + std::to_string(line_no) + ": duplicate merge \"" +
                           line + "\"");
    }
    ++rank;
  }
  if (line_no == 0) throw TokenizerError(bpe_name + ": is empty");
  constexpr int32_t kMerges = kVocabSize - 257;
  if (rank != kMerges) {
    throw TokenizerError(bpe_name + ": has " + std::to_string(rank) +
                         " merges, the GPT-2 vocabulary has " + std::to_string(kMerges));
  }
  return Tokenizer(std::move(state));
}

Tokenizer Tokenizer::load_dir(const std::filesystem::path& dir) {
  return load(dir / "encoder.json", dir / "vocab.bpe");
}

std::vector<std::string_view> Tokenizer::pretokenize(std::string_view text) {
  std::vector<std::string_view> pieces;
  for (size_t i = 0; i < text.size();) {
    const size_t end = match_end(text, i);
    pieces.push_back(text.substr(i, end - i));
    i = end;
  }
  return pieces;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  for (std::string_view piece : pretokenize(text)) {
    {
      std::lock_guard<std::mutex> lock(state_->cache_mutex);
      auto it = state_->cache.find(std::string(piece));
      if (it != state_->cache.end()) {
        ids.insert(ids.end(), it->second.begin(), it->second.end());
        continue;
      }
    }
    std::vector<int32_t> piece_ids;
    state_->bpe(piece, piece_ids);
    ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
    std::lock_guard<std::mutex> lock(state_->cache_mutex);
    if (state_->cache.size() >= kMaxCacheEntries) state_->cache.clear();
    state_->cache.emplace(std::string(piece), std::move(piece_ids));
  }
  return ids;
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw TokenizerError("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                         std::to_string(vocab_size()) + ")");
  }
  return state_->id_bytes[static_cast<size_t>(id)];
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string text;
  for (int32_t id : ids) text += token_bytes(id);
  return text;
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(state_->id_bytes.size()); }

std::string strip_brown_tags(std::string_view tagged) {
  std::string out;
  out.reserve(tagged.size());
  auto is_blank = [](char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
  };
  size_t pos = 0;
  while (pos < tagged.size()) {
    size_t eol = tagged.find('\n', pos);
    if (eol == std::string_view::npos) eol = tagged.size();
    const std::string_view line = tagged.substr(pos, eol - pos);
    bool any = false;
    for (size_t i = 0; i < line.size();) {
      if (is_blank(line[i])) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < line.size() && !is_blank(line[j])) ++j;
      std::string_view token = line.substr(i, j - i);
      const size_t slash = token.rfind('/');
      if (slash != std::string_view::npos) token = token.substr(0, slash);
      if (any) out += ' ';
      out += token;
      any = true;
      i = j;
    }
    if (any) out += '\n';
    pos = eol + 1;
  }
  return out;
}

}  // namespace traintwin
