// `traintwin preprocess`: Megatron-LM's tools/preprocess_data.py for GPT-2 BPE. Reads a .jsonl
// file (one JSON object per line, the text under each --json-keys key) or a plain .txt file
// (documents separated by one or more blank lines), tokenizes every document and writes one
// Megatron indexed dataset per key: {output-prefix}_{key}_document.bin/.idx (level "document":
// no sentence splitting, one sequence per non-empty document).
//
// As preprocess_data.py: --append-eod appends <|endoftext|> (50256) to every document that has
// tokens (an empty text stays an empty document, which the dataset records with zero
// sequences); a progress line every --log-interval documents. Differences: one process (no
// --workers, --partitions), blank lines in a .jsonl file are skipped instead of failing, and a
// .txt input is accepted (its one key is "text"; a document's text is its lines joined by "\n").
//
// Outputs appear only when everything succeeded: IndexedDatasetWriter writes "<file>.tmp" and
// renames on finalize, removing its temporaries on an error.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "core/error.hpp"
#include "exec/indexed_dataset.hpp"
#include "exec/tokenizer.hpp"

namespace traintwin::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kTokenizerType = "GPT2BPETokenizer";

struct PreprocessOptions {
  std::string input;
  std::string output_prefix;
  std::vector<std::string> json_keys{"text"};
  std::string tokenizer_type;
  std::string vocab_file;
  std::string merge_file;
  bool append_eod = false;
  int64_t log_interval = 1000;
};

enum class InputFormat { kJsonLines, kText };

bool is_blank(const std::string& line) {
  return line.find_first_not_of(" \t\r\n\v\f") == std::string::npos;
}

/// One output dataset: the writer of {prefix}_{key}_document and its counts.
struct Output {
  std::string key;
  std::string prefix;
  std::unique_ptr<IndexedDatasetWriter> writer;
};

/// Tokenizes `text` like preprocess_data.py's Encoder.encode (no sentence splitting).
std::vector<int32_t> encode_document(const Tokenizer& tokenizer, const std::string& text,
                                     bool append_eod) {
  std::vector<int32_t> ids = tokenizer.encode(text);
  if (append_eod && !ids.empty()) ids.push_back(Tokenizer::kEndOfText);
  return ids;
}

class Progress {
 public:
  explicit Progress(int64_t interval) : interval_(interval) {}

  /// Counts one document of `tokens` tokens and `bytes` bytes of text; prints every interval.
  void add(int64_t tokens, size_t bytes) {
    ++documents_;
    tokens_ += tokens;
    bytes_ += static_cast<int64_t>(bytes);
    if (documents_ % interval_ == 0) {
      const double s = elapsed_s();
      fmt::print(
          "processed {} documents, {} tokens ({:.0f} docs/s, {:.0f} tokens/s, {:.2f} MB/s)\n",
          documents_, tokens_, static_cast<double>(documents_) / s,
          static_cast<double>(tokens_) / s, static_cast<double>(bytes_) / s / 1e6);
      std::fflush(stdout);
    }
  }
  double elapsed_s() const {
    const std::chrono::duration<double> d = std::chrono::steady_clock::now() - start_;
    return std::max(d.count(), 1e-9);
  }
  int64_t documents() const { return documents_; }
  int64_t tokens() const { return tokens_; }

 private:
  int64_t interval_;
  int64_t documents_ = 0;
  int64_t tokens_ = 0;
  int64_t bytes_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

void run_preprocess(const PreprocessOptions& o) {
  if (o.tokenizer_type != kTokenizerType) {
    throw ConfigError("--tokenizer-type \"" + o.tokenizer_type +
                      "\" is not supported; allowed values: " + kTokenizerType);
  }
  if (o.log_interval < 1) {
    throw ConfigError("--log-interval must be >= 1, got " + std::to_string(o.log_interval));
  }
  const fs::path input(o.input);
  if (!fs::is_regular_file(input)) {
    throw DataError("--input " + o.input + ": no such file");
  }
  const std::string ext = input.extension().string();
  InputFormat format;
  if (ext == ".jsonl" || ext == ".json") {
    format = InputFormat::kJsonLines;
  } else if (ext == ".txt") {
    format = InputFormat::kText;
  } else {
    throw ConfigError("--input " + o.input + ": unknown extension \"" + ext +
                      "\"; allowed: .jsonl or .json (one JSON object per line), .txt (documents "
                      "separated by blank lines)");
  }
  if (o.json_keys.empty()) throw ConfigError("--json-keys: give at least one key");
  if (format == InputFormat::kText && o.json_keys != std::vector<std::string>{"text"}) {
    throw ConfigError("--json-keys applies to .jsonl input; a .txt input has the one key \"text\"");
  }
  for (size_t i = 0; i < o.json_keys.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (o.json_keys[i] == o.json_keys[j]) {
        throw ConfigError("--json-keys: \"" + o.json_keys[i] + "\" is given twice");
      }
    }
  }
  const fs::path out_dir = fs::path(o.output_prefix).parent_path();
  if (!out_dir.empty() && !fs::is_directory(out_dir)) {
    throw ConfigError("--output-prefix " + o.output_prefix + ": output directory " +
                      out_dir.string() + " does not exist");
  }

  const Tokenizer tokenizer = Tokenizer::load(o.vocab_file, o.merge_file);
  fmt::print("tokenizer {}: {} ids ({}, {})\n", kTokenizerType, tokenizer.vocab_size(),
             o.vocab_file, o.merge_file);

  std::vector<Output> outputs;
  for (const std::string& key : o.json_keys) {
    Output out{key, o.output_prefix + "_" + key + "_document", nullptr};
    out.writer = std::make_unique<IndexedDatasetWriter>(out.prefix, tokenizer.vocab_size());
    outputs.push_back(std::move(out));
  }

  std::ifstream in(input, std::ios::binary);
  if (!in) throw DataError("--input " + o.input + ": cannot open");
  fmt::print("reading {} ({})\n", o.input,
             format == InputFormat::kJsonLines ? "JSON lines" : "text, blank-line separated");
  std::fflush(stdout);
  Progress progress(o.log_interval);
  std::string line;
  int64_t line_number = 0;

  if (format == InputFormat::kJsonLines) {
    while (std::getline(in, line)) {
      ++line_number;
      if (is_blank(line)) continue;
      const std::string where = o.input + ":" + std::to_string(line_number);
      nlohmann::json doc;
      try {
        doc = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {  // also out_of_range (e.g. 1e999)
        throw DataError(where + ": malformed JSON: " + e.what());
      }
      if (!doc.is_object()) {
        throw DataError(where + ": expected a JSON object, found a " + doc.type_name());
      }
      int64_t doc_tokens = 0;
      size_t doc_bytes = 0;
      for (Output& out : outputs) {
        const auto it = doc.find(out.key);
        if (it == doc.end()) {
          throw DataError(where + ": no key \"" + out.key + "\" (--json-keys)");
        }
        if (!it->is_string()) {
          throw DataError(where + ": key \"" + out.key + "\" holds a " + it->type_name() +
                          ", not a string");
        }
        const auto& text = it->get_ref<const std::string&>();
        const std::vector<int32_t> ids = encode_document(tokenizer, text, o.append_eod);
        out.writer->add_document(ids);
        doc_tokens += static_cast<int64_t>(ids.size());
        doc_bytes += text.size();
      }
      progress.add(doc_tokens, doc_bytes);
    }
  } else {
    std::string text;
    bool open_document = false;
    auto flush = [&] {
      if (!open_document) return;
      const std::vector<int32_t> ids = encode_document(tokenizer, text, o.append_eod);
      outputs.front().writer->add_document(ids);
      progress.add(static_cast<int64_t>(ids.size()), text.size());
      text.clear();
      open_document = false;
    };
    while (std::getline(in, line)) {
      ++line_number;
      if (is_blank(line)) {
        flush();
        continue;
      }
      if (open_document) text += '\n';
      text += line;
      open_document = true;
    }
    flush();
  }
  if (in.bad()) throw DataError("--input " + o.input + ": read error");

  for (Output& out : outputs) out.writer->finalize();
  const double s = progress.elapsed_s();
  for (const Output& out : outputs) {
    fmt::print("wrote {}.bin/.idx: {} documents, {} tokens ({})\n", out.prefix,
               out.writer->num_documents(), out.writer->num_tokens(),
               token_dtype_name(out.writer->dtype()));
  }
  fmt::print("done: {} documents, {} tokens in {:.2f} s ({:.0f} tokens/s)\n", progress.documents(),
             progress.tokens(), s, static_cast<double>(progress.tokens()) / s);
}

}  // namespace

void register_preprocess_command(CLI::App& app) {
  auto o = std::make_shared<PreprocessOptions>();
  auto* cmd = app.add_subcommand("preprocess",
                                 "Tokenize a .jsonl or .txt corpus into a Megatron indexed dataset "
                                 "(tools/preprocess_data.py)");
  cmd->add_option("--input", o->input,
                  ".jsonl (one JSON object per line) or .txt (documents separated by blank lines)")
      ->required();
  cmd->add_option("--output-prefix", o->output_prefix,
                  "Writes {prefix}_{key}_document.bin and .idx; the directory must exist")
      ->required();
  cmd->add_option("--json-keys", o->json_keys, "Keys of the texts in each JSON object")
      ->capture_default_str();
  cmd->add_option("--tokenizer-type", o->tokenizer_type, "Tokenizer; allowed: GPT2BPETokenizer")
      ->required();
  cmd->add_option("--vocab-file", o->vocab_file, "GPT-2 encoder.json (e.g. data/gpt2)")->required();
  cmd->add_option("--merge-file", o->merge_file, "GPT-2 vocab.bpe (e.g. data/gpt2)")->required();
  cmd->add_flag("--append-eod", o->append_eod,
                "Append <|endoftext|> (id 50256) to every non-empty document");
  cmd->add_option("--log-interval", o->log_interval, "Print progress every this many documents")
      ->capture_default_str();
  cmd->callback([o] { run_preprocess(*o); });
}

}  // namespace traintwin::cli
