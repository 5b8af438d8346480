// libFuzzer target: a measured cost database as its users read it, beyond the parser
// (cost_db_fuzz): `simulate --cost-db FILE` (make_simulation_cost_model: every kernel costed by
// exact hit, by interpolation on shapes at other sizes, scaled to another GPU, or by the roofline
// fallback), the leave-one-out check of `validate`, and `profile`'s reopening of a database to
// update it (exec/profile: open_database_for, merge_measurements), and its collective rows as
// the simulator times collectives inside a node with them (sim/measured_collectives: each row's
// op and group size at its size, half and 4x it). Every duration must be finite and >= 0.
#include <cmath>

#include "exec/profile.hpp"
#include "sim/cost_model.hpp"
#include "tests/fuzz/fuzz_gpus.hpp"
#include "tests/fuzz/fuzz_support.hpp"
#include "traces/cost_db.hpp"

namespace {

void require_sane(const traintwin::KernelCost& c) {
  traintwin::fuzz::require(std::isfinite(c.seconds) && c.seconds >= 0,
                           "a kernel's duration is finite and >= 0");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace traintwin;
  const auto file = fuzz::scratch_dir() / "h100.json";
  fuzz::write_bytes(file, data, size);
  const GpuSpec& h100 = fuzz::h100();
  const GpuSpec& a100 = fuzz::a100();
  return fuzz::expect_error_or_success([&] {
    const CostDatabase db = CostDatabase::load(file);
    const auto same = make_simulation_cost_model(h100, fuzz::scratch_dir(), file, &h100);
    const auto scaled = make_simulation_cost_model(a100, fuzz::scratch_dir(), file, &h100);
    for (const KernelMeasurement& m : db.kernels()) {
      // The row itself, and the same family at 1/3 and 3x the work (interpolation or
      // extrapolation between the measured shapes).
      for (double f : {1.0, 1.0 / 3, 3.0}) {
        Kernel k{m.key, m.flops * f, m.bytes * f};
        for (int64_t& d : k.key.shape) d = f > 1 ? d * 3 : (f < 1 ? d / 3 + 1 : d);
        for (const CostModel* model : {same.get(), scaled.get()}) {
          try {
            require_sane(model->duration(k, model == same.get() ? h100 : a100));
          } catch (const CostModelError&) {
            // a kernel this GPU cannot cost (no peak for its dtype): a clear error
          }
        }
      }
    }
    for (const LeaveOneOutRow& r : leave_one_out(db, h100)) {
      fuzz::require(!r.predicted_us || (std::isfinite(*r.predicted_us) && *r.predicted_us >= 0),
                    "a leave-one-out prediction is finite and >= 0");
    }
    if (const auto measured = make_simulation_measured_collectives(h100, fuzz::scratch_dir(), file)) {
      for (const CollectiveMeasurement& c : db.collectives()) {
        for (CollectiveKind kind : {CollectiveKind::kAllReduce, CollectiveKind::kAllGather,
                                    CollectiveKind::kReduceScatter, CollectiveKind::kBroadcast,
                                    CollectiveKind::kAllToAll, CollectiveKind::kRingExchange}) {
          if (c.op != to_string(kind) && !(c.op == "send_recv" && kind == CollectiveKind::kRingExchange)) {
            continue;
          }
          for (int64_t bytes : {c.bytes, c.bytes / 2, c.bytes > (int64_t{1} << 50) ? c.bytes : c.bytes * 4}) {
            const auto t = measured->time_s(kind, c.ranks, bytes);
            fuzz::require(!t || (std::isfinite(*t) && *t >= 0),
                          "a measured collective's time is finite and >= 0");
          }
        }
      }
    }
    CostDatabase reopened = exec::open_database_for(file, db.device(), db.versions());
    exec::merge_measurements(reopened, db.kernels());
    exec::merge_measurements(reopened, db.collectives());
    fuzz::require(reopened.kernels().size() == db.kernels().size() &&
                      reopened.collectives().size() == db.collectives().size(),
                  "merging a database into itself replaces every row");
  });
}
