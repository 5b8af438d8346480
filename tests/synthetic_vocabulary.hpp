// A synthetic vocabulary of GPT-2's form for tests and fuzz targets that cannot rely on the
// npm-fetched GPT-2 files (data/gpt2, absent on a clean clone): the 256 byte symbols of GPT-2's
// bytes_to_unicode(), 50000 merges of two byte symbols (in byte order), and <|endoftext|> as
// id 50256 — exactly what Tokenizer::load checks.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <filesystem>
#include <fstream>
#include <string>

namespace traintwin::testing {

/// GPT-2's bytes_to_unicode() as UTF-8: printable Latin-1 bytes ('!'..'~', 0xA1..0xAC,
/// 0xAE..0xFF) stand for themselves, the others map to U+0100 + n in byte order.
inline std::array<std::string, 256> gpt2_byte_symbols() {
  std::array<std::string, 256> out;
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const int cp = printable ? b : 256 + n++;
    std::string s;
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    out[static_cast<size_t>(b)] = s;
  }
  return out;
}

/// Writes `dir`/encoder.json and `dir`/vocab.bpe of the synthetic vocabulary; returns `dir`.
inline std::filesystem::path write_synthetic_gpt2_vocabulary(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  const auto sym = gpt2_byte_symbols();
  nlohmann::json enc = nlohmann::json::object();
  std::ofstream bpe(dir / "vocab.bpe");
  bpe << "#version: 0.2\n";
  int id = 0;
  for (const auto& s : sym) enc[s] = id++;
  for (size_t a = 0; a < 256 && id < 50256; ++a) {
    for (size_t b = 0; b < 256 && id < 50256; ++b) {
      enc[sym[a] + sym[b]] = id++;
      bpe << sym[a] << ' ' << sym[b] << '\n';
    }
  }
  enc["<|endoftext|>"] = 50256;
  std::ofstream(dir / "encoder.json") << enc.dump();
  return dir;
}

}  // namespace traintwin::testing
