// The progress line of a long replay (`simulate`), on stderr: shown only when stderr is a
// terminal and the replay has run for 2 s, redrawn in place from sim/replay.hpp's progress hook
// (ops started of all, simulated time reached, ops/s, ETA), cleared when the replay ends. The
// library reports; this prints.
#pragma once

#include <functional>
#include <memory>

#include "sim/replay.hpp"

namespace traintwin::cli {

/// One progress line for one replay. Not copyable; finish() (or the destructor) clears the line.
class ReplayProgressLine {
 public:
  /// Shown only when `enabled` (no --quiet) and stderr is a terminal.
  explicit ReplayProgressLine(bool enabled);
  ~ReplayProgressLine();
  ReplayProgressLine(const ReplayProgressLine&) = delete;
  ReplayProgressLine& operator=(const ReplayProgressLine&) = delete;

  /// The hook for SimulationOptions::progress; empty when the line is not shown.
  std::function<void(const ReplayProgress&)> callback();
  /// Clears the line if one was drawn. Idempotent.
  void finish();

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace traintwin::cli
