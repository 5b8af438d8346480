// Profile mode of the executor (exec/profile.hpp): the kernels of a scenario, each timed over
// rotating input sets (exec/profile_calls.hpp makes them), and the collectives timed nccl-tests
// style; the rows go on to traces/cost_db.hpp.
#include "exec/profile.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <unordered_map>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/rank_layout.hpp"
#include "exec/counter_rng.hpp"
#include "exec/linear.hpp"
#include "exec/profile_calls.hpp"
#include "exec/profile_inputs.hpp"
#include "traces/timeline_costs.hpp"

namespace traintwin::exec {

void check_runs_dtype(const Backend& be, const Scenario& s, const KernelKey& key) {
  const Precision p = key.dtype;
  if (p == Precision::kFp32 || p == Precision::kTf32 || p == Precision::kFp32Bf16) return;
  const bool gemm = is_gemm(key.name);
  const bool per_tensor = s.training.fp8_recipe == Fp8Recipe::kDelayed ||
                          s.training.fp8_recipe == Fp8Recipe::kTensorwise;
  if (gemm && p == Precision::kBf16 && be.has_bf16_arithmetic()) return;
  // Under bf16 training the executor runs every other kernel as train does on a backend with
  // bf16 arithmetic: fp32 storage between kernels (exec/linear.hpp), the attention core's
  // products in bf16 (set_matmul_arithmetic). Timing it is timing that op of a bf16 iteration.
  if (!gemm && p == Precision::kBf16 && be.has_bf16_arithmetic()) return;
  if (gemm && p == Precision::kFp8 && be.has_fp8_arithmetic() && per_tensor) return;
  std::string why;
  if (gemm && p == Precision::kBf16) {
    why = "the " + be.name() + " backend emulates bf16 (fp32 GEMMs of rounded operands), so its "
          "time is not a bf16 cost; profile bf16 GEMMs with --backend cuda";
  } else if (gemm && p == Precision::kFp8 && !per_tensor) {
    why = std::string("training.fp8_recipe ") + to_string(s.training.fp8_recipe) +
          " scales blocks, not tensors; the executor's FP8 GEMMs are per-tensor scaled (recipes "
          "delayed, tensorwise)";
  } else if (gemm && p == Precision::kFp8) {
    why = "the " + be.name() + " backend has no FP8 tensor cores (it would emulate them); "
          "profile FP8 GEMMs with --backend cuda on compute capability 8.9 or later";
  } else {
    why = "the executor runs " + std::string(to_string(p)) +
          " kernels only as GEMMs so far (gemm_* and grouped_gemm_* in bf16 and fp8; --backend "
          "cuda); select those with --kernels, e.g. --kernels "
          "'^(grouped_)?gemm_(fwd|dgrad|wgrad)\\[.*\\] (bf16|fp8) '";
  }
  throw UnsupportedError("profile: kernel " + key.to_string() + ": " + why);
}

int64_t largest_collective_bytes(const Scenario& s) {
  const std::vector<int64_t> ranks = layout_of(s).first_rank_of_each_stage();
  const Program prog = build_program(s, ranks);
  int64_t largest = 0;
  for (int64_t r : ranks) {
    for (const Op& op : prog.ranks.at(r).ops) {
      if (op.kind == OpKind::kCollective) largest = std::max(largest, op.bytes);
    }
  }
  return largest;
}

std::vector<ProfileTarget> profile_targets(const Scenario& s) {
  const std::vector<int64_t> ranks = layout_of(s).first_rank_of_each_stage();
  const Program prog = build_program(s, ranks);
  std::vector<ProfileTarget> out;
  std::unordered_map<KernelKey, size_t, KernelKeyHash> index;
  for (int64_t pp = 0; pp < s.parallel.pipeline_model_parallel_size; ++pp) {
    for (const Op& op : prog.ranks.at(ranks[static_cast<size_t>(pp)]).ops) {
      for (size_t i = 0; i < op.kernels.size(); ++i) {
        const Kernel& k = prog.kernels[op.kernels[i]];
        const auto [it, fresh] = index.emplace(k.key, out.size());
        if (fresh) out.push_back({k, op.kernel_roles[i], {}});
        std::vector<int64_t>& stages = out[it->second].stages;
        if (stages.empty() || stages.back() != pp) stages.push_back(pp);
      }
    }
  }
  return out;
}

int64_t rotation_bytes(const Scenario& s, const ProfileTarget& target, int64_t llc_bytes) {
  double held = 0;
  for (int64_t pp : target.stages) held = std::max(held, stage_memory(s, pp).total_bytes());
  if (target.stages.empty()) {
    for (const StageMemory& m : memory_per_stage(s)) held = std::max(held, m.total_bytes());
  }
  return static_cast<int64_t>(std::min(2.0 * static_cast<double>(llc_bytes), held));
}

KernelMeasurement profile_kernel(Backend& backend, const Scenario& s, const ProfileTarget& target,
                                 const ProfileOptions& options) {
  if (options.warmup < 0 || options.repeats < 1 || options.rotate_bytes < 0) {
    throw InvalidArgument("profile: --warmup must be >= 0 and --repeats >= 1 (got " +
                          std::to_string(options.warmup) + ", " + std::to_string(options.repeats) +
                          ")");
  }
  if (!(options.min_time_s >= 0) || !std::isfinite(options.min_time_s)) {
    throw InvalidArgument("profile: --min-time must be a finite number of seconds >= 0 (got " +
                          std::to_string(options.min_time_s) + ")");
  }
  const int64_t rotate = options.rotate_bytes > 0
                             ? options.rotate_bytes
                             : rotation_bytes(s, target, backend.cache_bytes());
  // The cache holds the blocks of the kernels timed before; full of their shapes, it would free
  // this kernel's outputs instead of handing them back, and every timed run would pay their
  // page faults (38 ms of a 4 ms cross-entropy backward), which a live run never does.
  backend.empty_cache();
  // The arithmetic train uses for this scenario's matrix products (the kernel key's dtype says
  // it: tf32 or bf16 for fp32 training under float32_matmul_precision high or medium; bf16
  // attention products under bf16 training).
  set_matmul_arithmetic(backend, s.training);
  ProfileInputs in(backend, options.seed);
  std::vector<KernelCall> sets;
  int64_t bytes = 0;
  // At least two sets, so consecutive runs never share inputs; at most 4096.
  while ((bytes <= rotate || sets.size() < 2) && sets.size() < 4096) {
    sets.push_back(make_kernel_call(backend, s, target, in, options.bf16_activations));
    bytes += sets.back().bytes();
  }
  size_t next = 0;
  auto run_once = [&] {
    KernelCall& c = sets[next];
    next = (next + 1) % sets.size();
    for (size_t i : c.fresh) {  // freed first, so the backend's block cache hands it back
      const auto n = static_cast<int64_t>(c.t[i].size());
      c.t[i].reset();
      c.t[i] = Tensor(backend, n);
    }
    for (size_t i : c.fresh_h) {
      const auto n = static_cast<int64_t>(c.h[i].size());
      c.h[i].reset();
      c.h[i] = Bf16Tensor(backend, n);
    }
    c.run(c);
  };
  auto timed_run = [&] { return backend.time_us(run_once); };
  for (int i = 0; i < options.warmup; ++i) timed_run();
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(options.repeats));
  double timed_us = 0;
  for (int i = 0; i < ProfileOptions::kMaxRepeats &&
                  (i < options.repeats || timed_us < options.min_time_s * 1e6);
       ++i) {
    samples.push_back(timed_run());
    timed_us += samples.back();
  }
  return measurement_from_samples(target.kernel, std::move(samples));
}

std::vector<CollectiveTiming> profile_collectives(Communicator& comm,
                                                  const std::vector<int64_t>& sizes, int warmup,
                                                  int repeats) {
  const int64_t n = comm.world_size(), me = comm.rank();
  if (n < 2) throw InvalidArgument("profile --collectives: needs >= 2 ranks (mpirun -np N)");
  if (warmup < 0 || repeats < 1) {
    throw InvalidArgument("profile --collectives: --warmup must be >= 0 and --repeats >= 1");
  }
  auto barrier = [&comm] {
    double x = 0;
    comm.all_reduce(GroupKind::kWorld, std::span<double>(&x, 1), ReduceOp::kSum)->wait();
  };
  std::vector<CollectiveTiming> rows;
  for (const char* op : {"all_reduce", "all_gather", "reduce_scatter", "send_recv"}) {
    const std::string name = op;
    for (int64_t bytes : sizes) {
      if (bytes < 4 * n || bytes % (4 * n) != 0) {
        throw InvalidArgument("profile --collectives: " + std::to_string(bytes) +
                              " bytes is not a multiple of 4 x " + std::to_string(n) + " ranks");
      }
      const int64_t count = bytes / 4, piece = count / n;
      std::vector<float> a(static_cast<size_t>(count)), b(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) {
        a[static_cast<size_t>(i)] = static_cast<float>(
            counter_uniform(7, static_cast<uint64_t>(me), static_cast<uint64_t>(i)));
      }
      auto run = [&] {
        if (name == "all_reduce") {
          comm.all_reduce(GroupKind::kWorld, std::span<float>(a), ReduceOp::kSum)->wait();
        } else if (name == "all_gather") {
          comm.all_gather(GroupKind::kWorld,
                          std::span<const float>(a.data(), static_cast<size_t>(piece)),
                          std::span<float>(b.data(), static_cast<size_t>(piece * n)))
              ->wait();
        } else if (name == "reduce_scatter") {
          comm.reduce_scatter(GroupKind::kWorld,
                              std::span<const float>(a.data(), static_cast<size_t>(piece * n)),
                              std::span<float>(b.data(), static_cast<size_t>(piece)),
                              ReduceOp::kSum)
              ->wait();
        } else {
          RequestPtr r = comm.recv((me + n - 1) % n, 0, std::span<float>(b));
          RequestPtr s = comm.send((me + 1) % n, 0, std::span<const float>(a));
          s->wait();
          r->wait();
        }
      };
      for (int i = 0; i < warmup; ++i) run();
      barrier();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < repeats; ++i) run();
      double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
          repeats;
      comm.all_reduce(GroupKind::kWorld, std::span<double>(&us, 1), ReduceOp::kMax)->wait();
      rows.push_back({name, bytes, count, n, us});
    }
  }
  return rows;
}

void check_collective_sizes_fit_host(int64_t largest_bytes, int64_t ranks_on_host,
                                     int64_t host_memory_bytes) {
  if (ranks_on_host < 1) {
    throw InvalidArgument("profile --collectives: ranks on this host must be >= 1, got " +
                          std::to_string(ranks_on_host));
  }
  if (host_memory_bytes <= 0 || largest_bytes <= 0) return;
  constexpr int64_t k = kCollectiveProfileBuffersPerRank;
  // In double: 3 x 1 TiB x many ranks may pass int64's range.
  const double need = static_cast<double>(k) * static_cast<double>(largest_bytes) *
                      static_cast<double>(ranks_on_host);
  if (need <= static_cast<double>(host_memory_bytes)) return;
  const int64_t fits = host_memory_bytes / (k * ranks_on_host);
  int64_t fits_pow2 = 1;
  while (fits_pow2 * 2 <= fits) fits_pow2 *= 2;
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  throw InvalidArgument(fmt::format(
      "profile --collectives: -e/--maxbytes: sizes up to {} bytes need {} x {} bytes per rank "
      "(two buffers of the size and MPI's temporary) x {} rank(s) on this host = {:.0f} bytes "
      "({:.1f} GiB), more than this host's memory of {} bytes ({:.1f} GiB); give -e {} or "
      "less (the largest power of two that fits)",
      largest_bytes, k, largest_bytes, ranks_on_host, need, need / kGiB, host_memory_bytes,
      static_cast<double>(host_memory_bytes) / kGiB, fits_pow2));
}

void merge_measurements(CostDatabase& db, const std::vector<KernelMeasurement>& rows) {
  for (const KernelMeasurement& m : rows) {
    db.erase(m.key);
    db.add(m);
  }
}

void merge_measurements(CostDatabase& db, const std::vector<CollectiveMeasurement>& rows) {
  for (const CollectiveMeasurement& c : rows) {
    db.erase(c);
    db.add(c);
  }
}

CostDatabase open_database_for(const std::filesystem::path& file, const CostDbDevice& device,
                               const CostDbVersions& versions) {
  if (!std::filesystem::exists(file)) return CostDatabase(device, versions);
  CostDatabase db = CostDatabase::load(file);
  if (!db.device().same_device(device)) {
    auto describe = [](const CostDbDevice& d) {
      return "\"" + d.name + "\" (" + d.kind.value_or("gpu") + ", " + std::to_string(d.sm_count) +
             " cores/SMs" + (d.threads ? ", " + std::to_string(*d.threads) + " threads" : "") +
             ")";
    };
    throw CostDatabaseError(file.string() + ": measured on " + describe(db.device()) +
                            ", not on this device " + describe(device) +
                            "; refusing to merge (write to another --out file)");
  }
  return db;
}

}  // namespace traintwin::exec
