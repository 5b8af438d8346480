// The GPUs of the shipped topologies (H100 and A100), for the fuzz targets that cost kernels.
#pragma once

#include <filesystem>
#include <string>

#include "topologies/topology.hpp"

namespace traintwin::fuzz {

/// The GPU of topologies/<file> in the source tree.
inline GpuSpec shipped_gpu(const std::string& file) {
  return load_topology(std::filesystem::path(TRAINTWIN_SOURCE_DIR) / "topologies" / file).gpu;
}

/// H100 (the GPU the fuzzed databases and timelines were measured on), read once.
inline const GpuSpec& h100() {
  static const GpuSpec gpu = shipped_gpu("dgx-h100-superpod.yaml");
  return gpu;
}

/// A100 (a target the H100 measurements are scaled to), read once.
inline const GpuSpec& a100() {
  static const GpuSpec gpu = shipped_gpu("dgx-a100-superpod.yaml");
  return gpu;
}

}  // namespace traintwin::fuzz
