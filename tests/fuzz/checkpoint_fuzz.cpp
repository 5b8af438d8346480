// libFuzzer target: the rank checkpoint reader (`train --load`): magic, header length, JSON
// header, tensor table, checksum; and the latest-iteration tracker file.
#include "exec/checkpoint.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace traintwin;
  const std::filesystem::path dir = fuzz::scratch_dir() / "ckpt";
  const std::filesystem::path file = rank_checkpoint_path(dir, 1, 0);
  std::filesystem::create_directories(file.parent_path());
  fuzz::write_bytes(file, data, size);
  fuzz::write_bytes(latest_iteration_path(dir), data, size < 24 ? size : 24);
  fuzz::expect_error_or_success([&] { read_latest_iteration(dir); });
  return fuzz::expect_error_or_success([&] {
    const RankCheckpoint ck = read_rank_checkpoint(dir, 1, 0);
    // What was accepted writes back and reads back equal.
    write_rank_checkpoint(dir, 1, 1, ck);
    const RankCheckpoint again = read_rank_checkpoint(dir, 1, 1);
    fuzz::require(again.tensors.size() == ck.tensors.size() && again.seed == ck.seed &&
                      again.signature == ck.signature,
                  "an accepted checkpoint writes and reads back equal");
  });
}
