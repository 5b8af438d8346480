// Regression tests of issue 14 at the command line: every fault ends as "traintwin: error: ..."
// with exit status 2 (never an abort, a hang or a silent success), naming the file, flag or key;
// and every documented command line passes validation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli/run_cli.hpp"
#include "tests/synthetic_vocabulary.hpp"

namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using traintwin::testing::CliResult;

const std::string kSource = TRAINTWIN_SOURCE_DIR;
const std::string kTinyScenario = kSource + "/scenarios/gpt-1.3b-h100-8.yaml";
const std::string kTopology = kSource + "/topologies/dgx-h100-superpod.yaml";

/// `traintwin <args>` under a 60 s limit (a hang is a failure, not a stuck test).
CliResult run(const std::string& args) { return traintwin::testing::run_cli_limited(args, 60); }

class ReliabilityCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("traintwin-cli-reliability-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

void expect_clear_error(const CliResult& r, const std::vector<std::string>& parts) {
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("traintwin: error: "));
  for (const std::string& p : parts) EXPECT_THAT(r.output, HasSubstr(p));
}

// Defect 2: -b 0 looped forever, -b -8 / nan hung, abc / 1e400 aborted, 1e21 overflowed, a
// reversed range printed nothing and exited 0.
TEST_F(ReliabilityCli, CollectiveSizesAreCheckedLikeNcclTests) {
  const std::string base = "collective --topology " + kTopology + " --num-gpus 8 ";
  for (const auto& [flags, words] : std::vector<std::pair<std::string, std::string>>{
           {"-b 0", "zero bytes"},
           {"-b -8", "not a size"},
           {"-b nan", "not a size"},
           {"-b abc", "not a size"},
           {"-e 1e400", "unknown unit"},
           {"-e 1e21", "unknown unit"},
           {"-e 2000G", "larger than 1 TiB"},
           {"-b 8X", "unknown unit 'X'"},
           {"-b 8G -e 8", "larger than -e/--maxbytes"}}) {
    SCOPED_TRACE(flags);
    const auto t0 = std::chrono::steady_clock::now();
    expect_clear_error(run(base + flags), {words});
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  }
  const CliResult ok = run(base + "-b 1K -e 4K");
  EXPECT_EQ(ok.status, 0) << ok.output;
  EXPECT_THAT(ok.output, AllOf(HasSubstr(" 1024 "), HasSubstr(" 2048 "), HasSubstr(" 4096 ")));
}

// Defect 3: bad_alloc after a long wait; now refused at once, naming the key and the limit:
// sizes past their upper bounds (issue 31: 2^32 samples, 2^16 layers), and within them the
// work bound of 131072 layer passes per rank.
TEST_F(ReliabilityCli, WorkThatCannotBeSimulatedIsRefusedAtOnce) {
  for (const std::string cmd : {"summary", "memory", "simulate", "train"}) {
    SCOPED_TRACE(cmd);
    expect_clear_error(run(cmd + " " + kTinyScenario + " --global-batch-size 1000000000000000"),
                       {"training.global_batch_size", "must be at most 4294967296"});
    expect_clear_error(run(cmd + " " + kTinyScenario + " --global-batch-size 4294967296"),
                       {"training.global_batch_size", "131072"});
  }
  expect_clear_error(run("summary " + kTinyScenario + " --set model.num_layers=10000000"),
                     {"model.num_layers", "must be at most 65536"});
  expect_clear_error(run("summary " + kTinyScenario + " --set model.num_layers=65536 "
                         "--global-batch-size 512"),
                     {"model.num_layers", "131072"});
}

// Defect 5 and 7: devices, folders, symlink loops and multi-document files.
TEST_F(ReliabilityCli, InputFilesAreCheckedWithClearMessages) {
  expect_clear_error(run("summary /dev/zero"), {"/dev/zero", "not a regular file"});
  fs::create_symlink(dir_ / "b.yaml", dir_ / "a.yaml");
  fs::create_symlink(dir_ / "a.yaml", dir_ / "b.yaml");
  expect_clear_error(run("summary " + (dir_ / "a.yaml").string()),
                     {"a.yaml", "Too many levels of symbolic links"});
  expect_clear_error(run("topology " + dir_.string()), {"is a folder, not a topology file"});
  expect_clear_error(run("summary " + kTinyScenario + " --set cluster.topology=" + dir_.string()),
                     {"is a folder, not a topology file"});
  std::ifstream in(kTopology);
  std::stringstream text;
  text << in.rdbuf() << "---\nname: another\n";
  std::ofstream(dir_ / "two.yaml") << text.str();
  expect_clear_error(run("topology " + (dir_ / "two.yaml").string()), {"second YAML document"});
  // The live timeline of --costs-from-timeline is streamed (any size) but checked like every
  // input (CLI11 already refuses a missing file or a folder): a FIFO blocked it forever.
  const std::string sim = "simulate " + kTinyScenario + " --costs-from-timeline ";
  expect_clear_error(run(sim + "/dev/zero"), {"/dev/zero", "not a regular file", "live timeline"});
  ASSERT_EQ(::mkfifo((dir_ / "fifo.json").c_str(), 0600), 0);
  expect_clear_error(run(sim + (dir_ / "fifo.json").string()),
                     {"fifo.json", "not a regular file", "live timeline"});
  // validate's calibration file too (it read any size, and devices, with yaml-cpp's LoadFile).
  expect_clear_error(run("validate /dev/zero"), {"/dev/zero", "not a regular file"});
}

// Defect 4: --out at a file, under a file or at /proc aborted after the whole simulation.
TEST_F(ReliabilityCli, OutputFolderIsCheckedBeforeTheSimulation) {
  std::ofstream(dir_ / "file") << "x";
  for (const std::string out :
       {(dir_ / "file").string(), (dir_ / "file" / "sub").string(), std::string("/proc/tt")}) {
    SCOPED_TRACE(out);
    const auto t0 = std::chrono::steady_clock::now();
    expect_clear_error(run("simulate " + kTinyScenario + " --out " + out), {"--out " + out});
    expect_clear_error(run("sweep " + kTinyScenario +
                           " --tensor-model-parallel-size 1 --mode analytical --out " + out),
                       {"--out " + out});
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  }
}

// Defect 1: "ts": 1e999 in a timeline (and any JSON number out of range) aborted `report`.
TEST_F(ReliabilityCli, JsonNumbersOutOfRangeAreErrorsNamingTheFile) {
  const fs::path vega = dir_ / "vega", out = dir_ / "out";
  fs::create_directories(vega);
  fs::create_directories(out);
  for (const char* f : {"vega.min.js", "vega-lite.min.js", "vega-embed.min.js"}) {
    std::ofstream(vega / f) << "// stand-in\n";
  }
  const std::string report = "report " + out.string() + " --vega-dir " + vega.string();
  std::ofstream(out / "summary.json") << R"({"scenario": "x", "iteration_time_s": 1e999})";
  expect_clear_error(run(report), {"summary.json"});
  fs::remove(out / "summary.json");
  std::ofstream(out / "sweep.json") << R"({"rows": [{"tokens_per_s_per_gpu": -1e999}]})";
  expect_clear_error(run(report), {"sweep.json"});
}

// Defect 1: a .jsonl line {"text":"x","n":1e999} aborted `preprocess` and left a .bin.tmp.
TEST_F(ReliabilityCli, PreprocessOfAnOutOfRangeNumberLeavesNothingBehind) {
  const fs::path vocab = traintwin::testing::write_synthetic_gpt2_vocabulary(dir_ / "gpt2");
  std::ofstream(dir_ / "in.jsonl") << "{\"text\": \"hello\"}\n{\"text\":\"x\",\"n\":1e999}\n";
  const CliResult r = run("preprocess --input " + (dir_ / "in.jsonl").string() +
                          " --output-prefix " + (dir_ / "out").string() +
                          " --tokenizer-type GPT2BPETokenizer --vocab-file " +
                          (vocab / "encoder.json").string() + " --merge-file " +
                          (vocab / "vocab.bpe").string() + " --append-eod");
  expect_clear_error(r, {"in.jsonl:2"});
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_THAT(e.path().filename().string(), Not(HasSubstr("out_text_document")));
  }
}

// Defect 11: a planted out_text_document.bin.tmp -> victim made preprocess overwrite the victim.
TEST_F(ReliabilityCli, PreprocessNeverFollowsAPlantedTemporary) {
  const fs::path vocab = traintwin::testing::write_synthetic_gpt2_vocabulary(dir_ / "gpt2");
  std::ofstream(dir_ / "victim") << "precious";
  fs::create_symlink(dir_ / "victim", dir_ / "out_text_document.bin.tmp");
  std::ofstream(dir_ / "in.jsonl") << "{\"text\": \"hello world\"}\n";
  const CliResult r = run("preprocess --input " + (dir_ / "in.jsonl").string() +
                          " --output-prefix " + (dir_ / "out").string() +
                          " --tokenizer-type GPT2BPETokenizer --vocab-file " +
                          (vocab / "encoder.json").string() + " --merge-file " +
                          (vocab / "vocab.bpe").string());
  EXPECT_EQ(r.status, 0) << r.output;
  std::ifstream v(dir_ / "victim");
  std::string text;
  v >> text;
  EXPECT_EQ(text, "precious");
  EXPECT_GT(fs::file_size(dir_ / "out_text_document.bin"), 0u);
}

/// The documented command lines: ```sh blocks of the READMEs and the indented "#   " command
/// lines of the shipped scenarios, continuation lines joined, comments cut.
std::vector<std::string> documented_commands() {
  std::vector<std::string> out;
  auto add = [&out](std::string line) {
    line = std::regex_replace(line, std::regex(R"(\s+#.*$)"), "");
    const auto at = line.find("build/traintwin ");
    if (at != std::string::npos) out.push_back(line.substr(at + std::string("build/traintwin ").size()));
  };
  for (const std::string doc : {"README.md", "scenarios/README.md", "exec/README.md", "bench/README.md"}) {
    std::ifstream in(kSource + "/" + doc);
    std::string line, joined;
    bool block = false;
    while (std::getline(in, line)) {
      if (line.rfind("```", 0) == 0) {
        block = !block;
        continue;
      }
      if (!block) continue;
      joined += line;
      if (!joined.empty() && joined.back() == '\\') {
        joined.pop_back();
        continue;
      }
      add(joined);
      joined.clear();
    }
  }
  for (const auto& e : fs::directory_iterator(kSource + "/scenarios")) {
    if (e.path().extension() != ".yaml") continue;
    std::ifstream in(e.path());
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("#   ", 0) == 0) add(line.substr(4));
    }
  }
  return out;
}

// Defect 8: the one-process command in gpt-tiny-brown.yaml's comment failed validation. Every
// documented command is run; the long ones as a command that validates the same scenario and
// flags in a second: simulate as `summary`, train as `program --rank 0 --summary` (train checks
// no topology size: a 1-GPU layout trains on CPU).
TEST_F(ReliabilityCli, EveryDocumentedCommandPassesValidation) {
  const std::vector<std::string> commands = documented_commands();
  ASSERT_GE(commands.size(), 5u);
  bool one_process = false;
  for (std::string cmd : commands) {
    SCOPED_TRACE(cmd);
    one_process |= cmd.find("--set parallelism.sequence_parallel=false") != std::string::npos;
    // Lines with shell variables ($S, $(hostname)) depend on the text around them, and the
    // live measurement commands (profile, validate --live) need mpirun and minutes: listed, not run.
    if (cmd.find('$') != std::string::npos || cmd.rfind("profile", 0) == 0 ||
        cmd.rfind("validate --live", 0) == 0) {
      std::printf("not run (shell variables or a live measurement): %s\n", cmd.c_str());
      continue;
    }
    if (cmd.rfind("simulate ", 0) == 0) cmd = "summary " + cmd.substr(9);
    if (cmd.rfind("train ", 0) == 0) {
      // The executor's backend is train's own flag (a GPU run is validated like a CPU one).
      cmd = std::regex_replace(cmd, std::regex(" --backend [a-z]+"), "");
      cmd = "program " + cmd.substr(6) + " --rank 0 --summary";
    }
    const CliResult r = traintwin::testing::run_cli(cmd, kSource);
    EXPECT_EQ(r.status, 0) << r.output;
  }
  EXPECT_TRUE(one_process) << "the one-process gpt-tiny-brown command was not found";
}

}  // namespace
