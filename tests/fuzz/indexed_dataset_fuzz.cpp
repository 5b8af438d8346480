// libFuzzer target: the Megatron indexed dataset reader (.idx validated whole, .bin mapped) and
// every read of what it accepted. Input: 4 bytes (little-endian length L of the .idx), L bytes of
// .idx, the rest is the .bin.
#include <cstring>

#include "exec/indexed_dataset.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace traintwin;
  if (size < 4) return 0;
  uint32_t idx_size = 0;
  std::memcpy(&idx_size, data, 4);
  data += 4;
  size -= 4;
  if (idx_size > size) idx_size = static_cast<uint32_t>(size);
  const std::string prefix = (fuzz::scratch_dir() / "ds").string();
  fuzz::write_bytes(indexed_dataset_idx_path(prefix), data, idx_size);
  fuzz::write_bytes(indexed_dataset_bin_path(prefix), data + idx_size, size - idx_size);
  return fuzz::expect_error_or_success([&] {
    const IndexedDataset ds = IndexedDataset::open(prefix);
    for (int64_t d = 0; d < ds.num_documents(); ++d) ds.document_sequences(d);
    for (int64_t i = 0; i < ds.size(); ++i) ds.sequence(i);
    std::vector<int32_t> all(static_cast<size_t>(ds.num_tokens()));
    ds.read_stream(0, all);
  });
}
