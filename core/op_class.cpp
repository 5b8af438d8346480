// Op classes; see op_class.hpp.
#include "core/op_class.hpp"

#include "core/error.hpp"
#include "core/kernel_catalogue.hpp"

namespace traintwin {

std::string op_class(const Program& prog, const Op& op, size_t kernel) {
  switch (op.kind) {
    case OpKind::kSend:
    case OpKind::kRecv: return "pp send/recv";
    case OpKind::kCollective:
      return std::string(to_string(op.group)) + " " + to_string(op.collective);
    case OpKind::kHost: return std::string("host ") + to_string(op.host);
    case OpKind::kCompute: break;
  }
  if (op.kernels.empty()) return "elementwise";
  const std::string& name = prog.kernels[op.kernels[std::min(kernel, op.kernels.size() - 1)]].key.name;
  const KernelDescriptor* d = find_kernel(name);
  return d != nullptr ? std::string(d->live_class) : "elementwise";
}

std::map<std::string, double> class_seconds(const Program& prog, const RankProgram& rp,
                                            const OpDurations& d, double iteration_s) {
  if (d.op_s.size() != rp.ops.size()) {
    throw InvalidArgument("class_seconds: " + std::to_string(d.op_s.size()) + " durations for " +
                          std::to_string(rp.ops.size()) + " ops of rank " +
                          std::to_string(rp.rank));
  }
  std::map<std::string, double> out;
  double compute = 0;
  for (const Op& op : rp.ops) {
    const double s = d.op_s[op.id];
    if (op.kind != OpKind::kCompute) {
      out[op_class(prog, op)] += s;
      continue;
    }
    compute += s;
    const std::vector<double>* k = op.id < d.kernel_s.size() ? &d.kernel_s[op.id] : nullptr;
    if (k != nullptr && k->size() == op.kernels.size() && !k->empty()) {
      for (size_t i = 0; i < k->size(); ++i) out[op_class(prog, op, i)] += (*k)[i];
    } else {
      out[op_class(prog, op)] += s;
    }
  }
  out["compute"] = compute;
  if (iteration_s > 0) out["pipeline bubble and waits"] = std::max(0.0, iteration_s - compute);
  return out;
}

}  // namespace traintwin
