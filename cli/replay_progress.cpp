// The progress line of a long replay; see cli/replay_progress.hpp.
#include "cli/replay_progress.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace traintwin::cli {
namespace {

/// Shown from this much wall time on: a replay that ends sooner prints nothing.
constexpr double kShowAfter_s = 2.0;

std::string count(double n) {
  if (n >= 1e9) return fmt::format("{:.2f} G", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.2f} M", n / 1e6);
  if (n >= 1e3) return fmt::format("{:.1f} k", n / 1e3);
  return fmt::format("{:.0f}", n);
}

}  // namespace

struct ReplayProgressLine::State {
  bool shown = false;
  bool drawn = false;
};

ReplayProgressLine::ReplayProgressLine(bool enabled) : state_(std::make_shared<State>()) {
  state_->shown = enabled && ::isatty(STDERR_FILENO) != 0;
}

ReplayProgressLine::~ReplayProgressLine() { finish(); }

std::function<void(const ReplayProgress&)> ReplayProgressLine::callback() {
  if (!state_->shown) return {};
  return [state = state_](const ReplayProgress& p) {
    if (p.elapsed_s < kShowAfter_s || p.ops_total <= 0) return;
    const double done = static_cast<double>(p.ops_started);
    const double total = static_cast<double>(p.ops_total);
    const double rate = p.elapsed_s > 0 ? done / p.elapsed_s : 0;
    const std::string eta =
        rate > 0 ? fmt::format(", ETA {:.0f} s", (total - done) / rate) : std::string();
    fmt::print(stderr, "\r\033[Kreplay: {:.1f} % of {} ops, simulated {:.3f} s, {} ops/s{}",
               100.0 * done / total, count(total), p.simulated_s, count(rate), eta);
    std::fflush(stderr);
    state->drawn = true;
  };
}

void ReplayProgressLine::finish() {
  if (!state_->drawn) return;
  fmt::print(stderr, "\r\033[K");
  std::fflush(stderr);
  state_->drawn = false;
}

}  // namespace traintwin::cli
