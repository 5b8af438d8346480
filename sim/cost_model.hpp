// Cost model: how long a kernel (identified by its KernelKey) takes on a device, and where that
// number came from. The simulator asks it once per distinct kernel of a Program.
#pragma once

#include <memory>
#include <string>

#include "core/program.hpp"
#include "topologies/topology.hpp"

namespace traintwin {

class CostDatabase;  // traces/cost_db.hpp

/// Where a kernel's duration came from.
enum class CostSource {
  kMeasured,  ///< the cost database of this very device (exact key or interpolated on shapes)
  kScaled,    ///< another device's measurement scaled by the ratio of peaks in the kernel's regime
  kRoofline,  ///< max(FLOPs / (peak x efficiency), bytes / (HBM bandwidth x efficiency)) + launch
};
/// "measured" | "scaled" | "roofline".
const char* to_string(CostSource s);

/// A kernel's duration on one device.
struct KernelCost {
  double seconds = 0;
  CostSource source = CostSource::kRoofline;
};

/// duration(KernelKey, device) -> seconds + source.
class CostModel {
 public:
  virtual ~CostModel() = default;
  /// Duration of `kernel` (key, FLOPs, bytes as the Program states them) on `gpu`.
  /// Throws Error when the model cannot cost it (e.g. a database without the kernel and no
  /// fallback).
  virtual KernelCost duration(const Kernel& kernel, const GpuSpec& gpu) const = 0;
};

/// Roofline efficiencies per kernel class: the fraction of the peak a kernel of that class
/// reaches, plus a fixed launch overhead per kernel.
struct RooflineEfficiency {
  double gemm = 0.75;          ///< of dense peak FLOP/s for gemm_* kernels
  double attention = 0.55;     ///< of dense peak for attention_* / flash_attention_* kernels
  double memory = 0.80;        ///< of HBM bandwidth for memory-bound kernels
  double launch_overhead_s = 4e-6;
};

/// Roofline cost model with per-class efficiencies (no database).
std::unique_ptr<CostModel> make_roofline_cost_model(const RooflineEfficiency& eff = {});

/// Measured database first (exact key, then interpolation on shapes among same name/dtype/tp),
/// then, if the database is of another device, scaling; then the roofline `fallback`.
std::unique_ptr<CostModel> make_database_cost_model(std::shared_ptr<const CostDatabase> db,
                                                    const GpuSpec& db_device,
                                                    std::unique_ptr<CostModel> fallback);

}  // namespace traintwin
