// Cost model: how long a kernel (identified by its KernelKey) takes on a device, and where that
// number came from. The simulator asks it once per distinct kernel of a Program.
//
// Two models:
//  - the roofline (Williams, Waterman, Patterson, "Roofline", CACM 2009) with per-class
//    efficiencies: duration_s = max(FLOPs / (peak_FLOPs x eff), bytes / (hbm_Bps x eff_memory))
//    + launch_overhead_s. Classes by kernel name (kernel_class()): gemm_* and grouped_gemm_* (the
//    MoE experts' grouped GEMMs) run on tensor cores at
//    `gemm` x peak(dtype); attention_*, flash_attention_* and fused_attention_* at
//    `attention` x peak(dtype);
//    every other kernel (layernorm, dropout, GELU, embedding, cross-entropy, grad norm, AdamW
//    and any name not listed) is an elementwise/reduction kernel on CUDA cores, bounded by HBM
//    at `memory` x bandwidth and by `vector` x the non-tensor FP32 peak for its FLOPs (which in
//    practice never binds: intensity ~1-4 FLOP/byte against a ridge of ~20).
//  - the database model: measured costs of traces/db/<device>.json (CostDatabase), then the
//    roofline fallback; see make_database_cost_model() for the rules.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <vector>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "core/kernel_catalogue.hpp"
#include "core/program.hpp"
#include "sim/measured_collectives.hpp"
#include "traces/cost_db.hpp"
#include "traces/timeline.hpp"
#include "topologies/topology.hpp"

namespace traintwin {


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

/// The model cannot cost a kernel (a database without it and no fallback, a GPU without the
/// peak the kernel needs). The message names the kernel key and the device.
class CostModelError : public Error {
 public:
  using Error::Error;
};

/// duration(KernelKey, device) -> seconds + source.
class CostModel {
 public:
  virtual ~CostModel() = default;
  /// Duration of `kernel` (key, FLOPs, bytes as the Program states them) on `gpu`.
  /// Throws CostModelError when the model cannot cost it (e.g. a database without the kernel
  /// and no fallback).
  virtual KernelCost duration(const Kernel& kernel, const GpuSpec& gpu) const = 0;
};

/// The roofline class of a kernel name: its cost_class in the kernel catalogue
/// (core/kernel_catalogue.hpp: gemm_*, grouped_gemm_* -> kGemm; attention_*, flash_attention_*,
/// fused_attention_* -> kAttention; the rest -> kMemory); kMemory for a name the catalogue lacks.
KernelClass kernel_class(std::string_view kernel_name);

/// Roofline efficiencies per kernel class: the fraction of the peak a kernel of that class
/// reaches, plus a fixed launch overhead per kernel. Each efficiency is in (0, 1].
struct RooflineEfficiency {
  double gemm = 0.75;               ///< of dense peak FLOP/s for gemm_* kernels
  double attention = 0.55;          ///< of dense peak for the attention kernels (kAttention)
  double memory = 0.80;             ///< of HBM bandwidth, for every kernel's bytes
  double vector = 0.50;             ///< of non-tensor FP32 peak, for the FLOPs of kMemory kernels
  double launch_overhead_s = 4e-6;  ///< added once per kernel, >= 0
};

/// True for a Blackwell GPU, told by its name: "B" or "GB" followed by a digit (B200, GB200-186GB).
bool is_blackwell(const GpuSpec& gpu);

/// The calibrated efficiencies for a GPU: one set for Blackwell (is_blackwell(), fitted on the
/// GB200 runs of ../shared/validation/published-runs-2026.yaml), one for every GPU before it
/// (fitted on ../shared/validation/calibration.yaml), each with `traintwin validate` (the values,
/// commands and errors in cost_model.cpp).
RooflineEfficiency default_roofline_efficiency(const GpuSpec& gpu);

/// The ids of the published cases (ValidationCase::id, sim/validation.hpp) the efficiencies of
/// default_roofline_efficiency() were fitted on: the ten cases of
/// ../shared/validation/calibration.yaml (the set before Blackwell) and the five GB200 runs of
/// published-runs-2026.yaml (Blackwell's). A validation of these is in-sample; every other case
/// is held out (sim/calibration_refit.hpp gives their leave-one-out errors).
const std::vector<std::string>& roofline_calibration_case_ids();

/// Roofline cost model with per-class efficiencies (no database). Throws InvalidArgument for
/// an efficiency outside (0, 1] or a negative launch overhead. duration() throws
/// CostModelError when the GPU lacks the peak (or HBM bandwidth) a kernel with work needs.
std::unique_ptr<CostModel> make_roofline_cost_model(const RooflineEfficiency& eff = {});

/// Options of the database model.
struct DatabaseCostOptions {
  /// How far beyond the measured range of a kernel family (same name, dtype, tp) a cost may be
  /// extrapolated at the achieved rate of the nearest shape, as a ratio of work (FLOPs or
  /// bytes, >= 1): 4 lets a kernel 4x larger than the largest measured one (or 4x smaller than
  /// the smallest) take that entry's achieved rate; beyond, the family is no evidence and the
  /// kernel falls through to the roofline. 1 disables extrapolation, infinity always allows it.
  double max_extrapolation = 4.0;
};

/// Measured database first, then the roofline `fallback`. For `kernel` on `gpu`:
///  1. Exact hit: the database holds kernel.key -> its expected_us() (the mean of the timed
///     runs, the median for rows without one).
///  2. Interpolation on shapes among the same name, dtype, tp (CostDatabase::nearest_shapes).
///     Work w is FLOPs for kGemm/kAttention kernels and bytes for kMemory kernels; an entry's
///     achieved rate is r = w / expected_us(). lo = the nearest-shape entry with w_lo <= w, hi = the
///     nearest-shape entry with w_hi >= w. With both, r is interpolated linearly in ln(w):
///     r = r_lo + (r_hi - r_lo) (ln w - ln w_lo) / (ln w_hi - ln w_lo) (r_lo when
///     w_lo = w_hi), and duration = w / r: exact at the entries, and a GEMM between two
///     measured sizes gets the TFLOP/s in between. With one side only, the nearest entry's rate
///     (duration scaled by the work ratio) within options.max_extrapolation. Source kMeasured.
///     A GEMM (KernelClass::kGemm) whose own family reaches nothing takes the family of the same
///     name and dtype at another TP size whose nearest shape is nearest, by the same rules: the
///     TP size in a GEMM's key records its layout, not its arithmetic (an MoE expert GEMM is
///     keyed by ETP, and ETP 1's expert shapes would otherwise fall to the roofline while the
///     same GEMM dimensions were measured under TP 4).
///  3. When `gpu` is not `db_device` (other name, HBM bandwidth or peak of the kernel's dtype),
///     the result of 1-2 is scaled to `gpu` by the ratio of peaks in the kernel's regime on
///     the database device: compute-bound when FLOPs / bytes > db_device ridge point
///     (peak_FLOPs(dtype) / hbm_bandwidth_Bps): x db peak / gpu peak; otherwise memory-bound:
///     x db HBM / gpu HBM. The whole duration scales (launch overhead included). Source kScaled.
///  4. Else `fallback` on `gpu` (normally the roofline); without one, CostModelError.
/// `db_device` is the GpuSpec (topology file spec) of the GPU the database was measured on; the
/// database's own device block (CUDA's name, SM count) is descriptive only.
/// Throws InvalidArgument when db is null or db_device has no HBM bandwidth; duration() throws
/// CostModelError when scaling needs a peak that db_device or gpu lacks.
std::unique_ptr<CostModel> make_database_cost_model(std::shared_ptr<const CostDatabase> db,
                                                    const GpuSpec& db_device,
                                                    std::unique_ptr<CostModel> fallback,
                                                    const DatabaseCostOptions& options = {});

/// The database file the simulator uses for `target`: `db_file` when given, else
/// `db_dir`/<gpu name>.json when it exists, else empty (no database).
std::filesystem::path simulation_cost_db_file(const GpuSpec& target,
                                              const std::filesystem::path& db_dir,
                                              const std::filesystem::path& db_file = {});

/// The collective rows of that database (simulation_cost_db_file) for FabricEfficiency::measured;
/// null when there is no database or it has no collective rows. Only meaningful when the
/// database was measured on `target` itself (not scaled from another GPU). Throws
/// CostDatabaseError for a malformed database.
std::shared_ptr<const MeasuredCollectives> make_simulation_measured_collectives(
    const GpuSpec& target, const std::filesystem::path& db_dir,
    const std::filesystem::path& db_file = {});

/// A cost model that times each GPU with its own model (a mixed cluster's node groups):
/// `by_gpu` keyed by GpuSpec::name, every other GPU with `fallback`. Throws InvalidArgument for a
/// null model.
std::unique_ptr<CostModel> make_per_gpu_cost_model(
    std::map<std::string, std::unique_ptr<CostModel>> by_gpu, std::unique_ptr<CostModel> fallback);

/// The cost model for every GPU of `topo`: make_simulation_cost_model() of topo.gpu, and on a
/// mixed cluster (node_groups) each group's GPU with its own database in `db_dir` where one
/// exists (else the roofline calibrated for it) through make_per_gpu_cost_model(); with a
/// `db_file`, that database serves (scaled to) every GPU. Throws CostDatabaseError for a
/// malformed database.
std::unique_ptr<CostModel> make_cluster_cost_model(const TopologySpec& topo,
                                                   const std::filesystem::path& db_dir,
                                                   const std::filesystem::path& db_file = {},
                                                   const GpuSpec* db_gpu = nullptr);

/// The cost model the simulator uses for `target`: the measured database `db_file` when given
/// (measured on `db_gpu`, the target's GPU when not given), else traces/db/<gpu name>.json in
/// `db_dir` when that file exists, each with the calibrated roofline as fallback; else the
/// calibrated roofline alone. Throws CostDatabaseError for a malformed database.
std::unique_ptr<CostModel> make_simulation_cost_model(const GpuSpec& target,
                                                      const std::filesystem::path& db_dir,
                                                      const std::filesystem::path& db_file = {},
                                                      const GpuSpec* db_gpu = nullptr);

/// One row of a leave-one-out check of a measured database.
struct LeaveOneOutRow {
  KernelMeasurement row;                ///< the measured row left out
  std::optional<double> predicted_us;   ///< from the other rows; none when no row of its family
                                        ///< (name, dtype, tp) is within reach
};

/// Each kernel row of `db` predicted by make_database_cost_model() from the other rows (no
/// fallback, on the database's own device `device`): how well the interpolation rules predict
/// an unseen shape on this database. Rows in database order.
std::vector<LeaveOneOutRow> leave_one_out(const CostDatabase& db, const GpuSpec& device,
                                          const DatabaseCostOptions& options = {});

/// The cost model of a recorded live run (Lumos-style replay): a database of the kernel
/// durations in `live`'s "kernels" args (traces/timeline_costs.hpp; every rank and iteration,
/// median per KernelKey) measured on `recorded_on`, looked up and interpolated as
/// make_database_cost_model() does (scaled when the target GPU differs), with the calibrated
/// roofline of the target as fallback. Throws Error (naming `origin`, the timeline's file, or
/// live.name when empty) when the timeline has no kernel durations or a malformed one.
std::unique_ptr<CostModel> make_timeline_cost_model(const Timeline& live, const GpuSpec& recorded_on,
                                                    const GpuSpec& target,
                                                    const std::string& origin = "");

}  // namespace traintwin
