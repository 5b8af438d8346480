// The measured cost database (traces/db/<device>.json): per-kernel timings recorded by the
// executor's profile mode on one GPU model, looked up by the simulator's cost model under the
// same KernelKey the Program gives the kernel. Optional nccl-tests style collective rows ride
// along for calibrating the fabric model. The file format is documented in traces/db/README.md.
//
// Reading is strict: unknown keys, missing keys, values of the wrong type, times <= 0,
// p10_us > median_us or median_us > p90_us, duplicate kernel keys and JSON syntax errors raise
// CostDatabaseError "<file>: kernels[3].median_us: <problem>". Writing is deterministic: keys in
// the documented order, kernels sorted by (name, dtype, tp, shape), collectives by
// (op, ranks, nodes, algorithm, bytes), numbers in their shortest round-trip form, so that
// write -> read -> write is byte-identical and files diff cleanly.
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/program.hpp"

namespace traintwin {

/// A cost database file (or a measurement added to one) is malformed or breaks a rule. The
/// message names the file/origin, the entry index and the key.
class CostDatabaseError : public Error {
 public:
  using Error::Error;
};

/// The device the database was measured on: a GPU as the CUDA runtime reports it
/// (cudaDeviceProp), or a CPU (kind "cpu") as /proc/cpuinfo and /proc/meminfo report it, with
/// the threads each rank's kernels ran on.
struct CostDbDevice {
  std::string name;                               ///< e.g. "NVIDIA H100 80GB HBM3", CPU model name
  int64_t sm_count = 0;                           ///< multiProcessorCount; CPU: cores, >= 1
  double clock_mhz = 0;                           ///< SM (CPU) clock during the measurement, > 0
  int64_t memory_bytes = 0;                       ///< totalGlobalMem; CPU: MemTotal, >= 1
  std::optional<std::string> compute_capability;  ///< e.g. "9.0" (optional in the file)
  std::optional<std::string> kind;                ///< "gpu" (when absent) or "cpu" (optional)
  std::optional<int64_t> threads;                 ///< CPU: threads per rank (GEMM threads), >= 1
  bool operator==(const CostDbDevice&) const = default;
  /// Whether two device blocks describe the same device measured the same way: name, kind,
  /// sm_count, memory and threads (not the clock, which moves between reads).
  bool same_device(const CostDbDevice& o) const;
};

/// Software the measurements were taken with (free-form strings, "n/a" when absent).
struct CostDbVersions {
  std::string driver;     ///< e.g. "550.54.15"
  std::string cuda;       ///< e.g. "12.4"
  std::string cublas;     ///< e.g. "12.4.5"
  std::string nccl;       ///< e.g. "2.21.5"
  std::string traintwin;  ///< e.g. "0.1.0"
  std::optional<std::string> blas;  ///< CPU: BLAS library and version (optional)
  std::optional<std::string> cudnn;  ///< GPU: cuDNN at run time, e.g. "9.19.0" (optional)
  bool operator==(const CostDbVersions&) const = default;
};

/// One kernel's measured duration over `samples` timed runs, and its work as the Program states
/// it (FLOPs and bytes from the kernel factory in core/lowering_kernels.hpp), so that achieved
/// rates (FLOPs / expected_us(), bytes / expected_us()) can be interpolated between shapes.
struct KernelMeasurement {
  KernelKey key;
  double median_us = 0;  ///< > 0
  double p10_us = 0;     ///< > 0, <= median_us
  double p90_us = 0;     ///< >= median_us
  int64_t samples = 0;   ///< >= 1
  double flops = 0;      ///< FLOPs of one run, >= 0
  double bytes = 0;      ///< device-memory bytes of one run, >= 0
  /// > 0 when present: the mean of the timed runs (optional: rows written before it, or by other
  /// tools, carry percentiles only).
  std::optional<double> mean_us;
  bool operator==(const KernelMeasurement&) const = default;

  /// The duration the simulator charges per run: the mean when the row has it, else the median.
  /// An iteration is a sum of many kernel runs, and a sum's expectation is the sum of the means:
  /// the rare slow runs (interrupts, preemption on a shared host) that a median drops are paid by
  /// a live iteration (nccl-tests reports the mean time for the same reason).
  double expected_us() const { return mean_us.value_or(median_us); }
};

/// One collective measurement in nccl-tests columns (its README "Performance" definitions):
/// algbw_GBps = bytes / time; busbw_GBps = algbw x factor (all_reduce 2(n-1)/n; all_gather,
/// reduce_scatter (n-1)/n; broadcast, send_recv 1). Values are stored as measured, not checked
/// against each other (nccl-tests rounds them).
struct CollectiveMeasurement {
  std::string op;     ///< all_reduce | all_gather | reduce_scatter | broadcast | all_to_all |
                      ///< send_recv
  int64_t bytes = 0;  ///< nccl-tests "size", >= 1
  int64_t ranks = 0;  ///< GPUs taking part, >= 2
  std::optional<int64_t> nodes;          ///< nodes they span (optional in the file), >= 1
  std::optional<std::string> algorithm;  ///< e.g. "ring", "tree", "NVLS" (optional)
  double time_us = 0;                    ///< > 0
  double algbw_GBps = 0;                 ///< >= 0
  double busbw_GBps = 0;                 ///< >= 0
  bool operator==(const CollectiveMeasurement&) const = default;
};

/// The database of one device.
class CostDatabase {
 public:
  /// An empty database of `device`; throws CostDatabaseError when the device block breaks the
  /// file's rules.
  CostDatabase(CostDbDevice device, CostDbVersions versions);

  /// Reads and validates `file`. Throws CostDatabaseError naming the file (and entry, key).
  static CostDatabase load(const std::filesystem::path& file);
  /// Same from JSON text; `origin` names it in messages.
  static CostDatabase parse(const std::string& json_text, const std::string& origin);

  /// Writes the database as JSON (deterministic; see the file comment).
  void write(std::ostream& out) const;
  std::string to_json() const;
  /// Writes to `file`; throws CostDatabaseError when it cannot be written.
  void save(const std::filesystem::path& file) const;

  const CostDbDevice& device() const { return device_; }
  const CostDbVersions& versions() const { return versions_; }

  /// Adds a measurement; throws CostDatabaseError when its values break the file's rules or
  /// its key is already present.
  void add(KernelMeasurement m);
  void add(CollectiveMeasurement c);
  /// Removes the measurement of `key`; false when there was none.
  bool erase(const KernelKey& key);
  /// Removes the collective row with the same op, ranks, nodes, algorithm and bytes as `row`;
  /// false when there was none.
  bool erase(const CollectiveMeasurement& row);

  /// All kernel measurements, sorted by (name, dtype, tp, shape).
  const std::vector<KernelMeasurement>& kernels() const { return kernels_; }
  /// All collective rows, sorted by (op, ranks, nodes, algorithm, bytes).
  const std::vector<CollectiveMeasurement>& collectives() const { return collectives_; }

  /// The measurement of exactly `key`, or nullptr.
  const KernelMeasurement* find(const KernelKey& key) const;

  /// The measurements with the same name, dtype, tp and number of shape dimensions as `key`
  /// (`key` itself included when present), nearest shape first: by the Euclidean distance of
  /// the shapes in log space, sqrt(sum_i (ln a_i - ln b_i)^2), so that halving and doubling a
  /// dimension are equally near; ties in database order. At most `max_count` (0: all).
  /// Throws InvalidArgument when a dimension of `key` is < 1.
  std::vector<const KernelMeasurement*> nearest_shapes(const KernelKey& key,
                                                       size_t max_count = 0) const;

  bool operator==(const CostDatabase&) const = default;

 private:
  CostDatabase() = default;

  CostDbDevice device_;
  CostDbVersions versions_;
  std::vector<KernelMeasurement> kernels_;
  std::vector<CollectiveMeasurement> collectives_;
};

/// Log-space distance between two shapes of the same rank (see nearest_shapes); throws
/// InvalidArgument when the ranks differ or a dimension is < 1.
double shape_distance(const std::vector<int64_t>& a, const std::vector<int64_t>& b);

/// Where the measured databases of a repository's topologies live: traces/db beside the folder
/// `topologies_dir` (the repository's layout: topologies/ and traces/db/ side by side). The one
/// rule every command (simulate, sweep, profile, validate) reads databases by.
std::filesystem::path database_dir_beside(const std::filesystem::path& topologies_dir);

/// database_dir_beside() of the folder holding `topology_file`: <its folder>/../traces/db.
std::filesystem::path default_database_dir(const std::filesystem::path& topology_file);

}  // namespace traintwin
