// Fault injection for live training; see fault_injection.hpp.
#include "exec/fault_injection.hpp"

#include <fmt/format.h>
#include <signal.h>

#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "core/error.hpp"
#include "core/text.hpp"

namespace traintwin::exec {
namespace {

constexpr const char* kKeys = "rank, iteration, kind, attempt, rate_per_hour, seed";
constexpr const char* kForms =
    "rank=R,iteration=I[,kind=kill|stop][,attempt=A] or "
    "rate_per_hour=X[,seed=S][,rank=R][,kind=kill|stop][,attempt=A]";

[[noreturn]] void refuse(const std::string& text, const std::string& why) {
  throw ConfigError(fmt::format("--fault-inject '{}': {} (allowed keys: {}; forms: {})", text, why,
                                kKeys, kForms));
}

/// A whole decimal number >= `min` (digits only), else refuse() naming the key.
int64_t whole(const std::string& text, const std::string& key, const std::string& value,
              int64_t min) {
  bool ok = !value.empty() && value.size() <= 18;
  for (const char c : value) ok = ok && c >= '0' && c <= '9';
  const int64_t v = ok ? std::stoll(value) : -1;
  if (!ok || v < min) {
    refuse(text, fmt::format("{}={}: expected a whole number >= {}", key, value, min));
  }
  return v;
}

}  // namespace

const char* to_string(FaultKind kind) { return kind == FaultKind::kKill ? "kill" : "stop"; }

const char* fault_spec_keys() { return kKeys; }

FaultSpec parse_fault_spec(const std::string& text) {
  FaultSpec s;
  std::set<std::string> seen;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(begin, end - begin);
    begin = end + 1;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) refuse(text, fmt::format("'{}' is not key=value", item));
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (!seen.insert(key).second) refuse(text, fmt::format("key {} given twice", key));
    if (key == "rank") {
      s.rank = whole(text, key, value, 0);
    } else if (key == "iteration") {
      s.iteration = whole(text, key, value, 1);
    } else if (key == "attempt") {
      s.attempt = whole(text, key, value, 0);
    } else if (key == "seed") {
      s.seed = static_cast<uint64_t>(whole(text, key, value, 0));
    } else if (key == "kind") {
      if (value == "kill") {
        s.kind = FaultKind::kKill;
      } else if (value == "stop") {
        s.kind = FaultKind::kStop;
      } else {
        refuse(text, fmt::format("kind={}: expected kill or stop", value));
      }
    } else if (key == "rate_per_hour") {
      const std::optional<double> v = parse_number_text(value);
      if (!v || !(*v > 0))
        refuse(text, fmt::format("rate_per_hour={}: expected a number > 0", value));
      s.rate_per_hour = *v;
    } else {
      const std::string_view near =
          closest_match(key, {"rank", "iteration", "kind", "attempt", "rate_per_hour", "seed"});
      refuse(text, fmt::format("unknown key '{}'{}", key,
                               near.empty() ? "" : fmt::format(" (did you mean {}?)", near)));
    }
  }
  if (s.iteration && s.rate_per_hour) {
    refuse(text, "iteration (a chosen fault) and rate_per_hour (random faults) exclude each other");
  }
  if (!s.iteration && !s.rate_per_hour) refuse(text, "give iteration or rate_per_hour");
  if (s.iteration && !s.rank) refuse(text, "a chosen fault (iteration=I) needs rank=R");
  if (s.iteration && seen.count("seed")) refuse(text, "seed goes with rate_per_hour only");
  return s;
}

std::string to_string(const FaultSpec& s) {
  std::vector<std::string> items;
  if (s.rank) items.push_back(fmt::format("rank={}", *s.rank));
  if (s.iteration) items.push_back(fmt::format("iteration={}", *s.iteration));
  if (s.rate_per_hour) {
    items.push_back(fmt::format("rate_per_hour={}", *s.rate_per_hour));
    items.push_back(fmt::format("seed={}", s.seed));
  }
  items.push_back(fmt::format("kind={}", to_string(s.kind)));
  items.push_back(fmt::format("attempt={}", s.attempt));
  std::string out;
  for (const std::string& i : items) out += (out.empty() ? "" : ",") + i;
  return out;
}

std::optional<FaultSpec> fault_spec_for_attempt(const FaultSpec& spec, int64_t attempt) {
  if (!spec.random()) {
    if (spec.attempt != attempt) return std::nullopt;
    return spec;
  }
  FaultSpec s = spec;
  s.attempt = attempt;
  return s;
}

FaultInjector::FaultInjector(const FaultSpec& spec, int64_t rank, int64_t world_size,
                             int64_t train_iters)
    : spec_(spec), rank_(rank), failing_rank_(spec.rank.value_or(0)) {
  if (spec.rank && *spec.rank >= world_size) {
    throw ConfigError(
        fmt::format("--fault-inject '{}': rank={} but the job has {} rank(s) "
                    "(allowed: 0..{})",
                    to_string(spec), *spec.rank, world_size, world_size - 1));
  }
  if (spec.iteration && *spec.iteration > train_iters) {
    throw ConfigError(
        fmt::format("--fault-inject '{}': iteration={} but training.train_iters is "
                    "{} (allowed: 1..{}): the fault would never fire",
                    to_string(spec), *spec.iteration, train_iters, train_iters));
  }
  if (spec.random()) {
    // The same draws on every rank (seed and launch only), so that every rank agrees on which
    // one fails and only that one acts.
    std::seed_seq seq{static_cast<uint32_t>(spec.seed), static_cast<uint32_t>(spec.seed >> 32),
                      static_cast<uint32_t>(spec.attempt), 0x7a17u};
    std::mt19937_64 rng(seq);
    failure_time_s_ = std::exponential_distribution<double>(*spec.rate_per_hour / 3600.0)(rng);
    const int64_t drawn = std::uniform_int_distribution<int64_t>(0, world_size - 1)(rng);
    failing_rank_ = spec.rank.value_or(drawn);
  }
}

std::optional<FaultKind> FaultInjector::at_iteration_end(int64_t iteration, double elapsed_s) {
  if (fired_ || rank_ != failing_rank_) return std::nullopt;
  const bool now = spec_.random() ? elapsed_s >= *failure_time_s_ : iteration == *spec_.iteration;
  if (!now) return std::nullopt;
  fired_ = true;
  return spec_.kind;
}

std::string FaultInjector::describe(int64_t iteration) const {
  return fmt::format("fault injection: rank {} {} ({}) at iteration {} of attempt {}",
                     failing_rank_, to_string(spec_.kind),
                     spec_.kind == FaultKind::kKill ? "SIGKILL" : "SIGSTOP", iteration,
                     spec_.attempt);
}

void inject_fault(FaultKind kind) { ::raise(kind == FaultKind::kKill ? SIGKILL : SIGSTOP); }

}  // namespace traintwin::exec
