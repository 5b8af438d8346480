#include "exec/launch_env.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <optional>
#include <string_view>

#include "core/error.hpp"

namespace traintwin::exec {
namespace {

using Getenv = std::function<const char*(const char*)>;

std::optional<int64_t> number(const Getenv& getenv, const char* name) {
  const char* text = getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  const std::string_view s(text);
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 0) {
    throw ConfigError(fmt::format("environment variable {}='{}': not a non-negative integer", name, s));
  }
  return v;
}

/// The count of Slurm's SLURM_TASKS_PER_NODE ("4(x2),3": 4 on nodes 0-1, 3 on node 2) for `node`.
int64_t slurm_tasks_on_node(std::string_view spec, int64_t node) {
  const auto invalid = [&] {
    return ConfigError(fmt::format("environment variable SLURM_TASKS_PER_NODE='{}': not Slurm's "
                                   "form N[(xK)],... (e.g. 4(x2),3)", spec));
  };
  int64_t first_node = 0;
  for (size_t start = 0; start <= spec.size();) {
    const size_t comma = std::min(spec.find(',', start), spec.size());
    const std::string_view item = spec.substr(start, comma - start);
    start = comma + 1;
    int64_t tasks = 0, repeat = 1;
    const char* p = item.data();
    const char* end = item.data() + item.size();
    auto r = std::from_chars(p, end, tasks);
    if (r.ec != std::errc()) throw invalid();
    if (r.ptr != end) {
      const std::string_view rest(r.ptr, static_cast<size_t>(end - r.ptr));
      if (rest.size() < 4 || rest.substr(0, 2) != "(x" || rest.back() != ')') throw invalid();
      auto q = std::from_chars(rest.data() + 2, rest.data() + rest.size() - 1, repeat);
      if (q.ec != std::errc() || q.ptr != rest.data() + rest.size() - 1) throw invalid();
    }
    if (node < first_node + repeat) return tasks;
    first_node += repeat;
  }
  throw ConfigError(fmt::format("environment variable SLURM_TASKS_PER_NODE='{}' has no entry for "
                                "SLURM_NODEID={}", spec, node));
}

void check_rank(const char* rank_name, int64_t rank, const char* size_name, int64_t size) {
  if (size < 1 || rank >= size) {
    throw ConfigError(fmt::format("environment: {}={} is outside [0, {}={})", rank_name, rank,
                                  size_name, size));
  }
}

}  // namespace

LaunchEnvironment read_launch_environment(const Getenv& getenv) {
  LaunchEnvironment e;
  if (const auto size = number(getenv, "OMPI_COMM_WORLD_SIZE")) {
    e.launcher = "mpirun";
    e.world_size = *size;
    e.rank = number(getenv, "OMPI_COMM_WORLD_RANK").value_or(0);
    check_rank("OMPI_COMM_WORLD_RANK", e.rank, "OMPI_COMM_WORLD_SIZE", e.world_size);
    e.local_size = number(getenv, "OMPI_COMM_WORLD_LOCAL_SIZE").value_or(1);
    e.local_rank = number(getenv, "OMPI_COMM_WORLD_LOCAL_RANK").value_or(0);
    check_rank("OMPI_COMM_WORLD_LOCAL_RANK", e.local_rank, "OMPI_COMM_WORLD_LOCAL_SIZE",
               e.local_size);
    return e;
  }
  if (const auto size = number(getenv, "SLURM_NTASKS")) {
    // srun sets SLURM_PROCID and SLURM_STEP_ID per task; the batch script's own shell has
    // SLURM_NTASKS but no job step: it is one process then.
    if (const auto rank = number(getenv, "SLURM_PROCID"); rank && getenv("SLURM_STEP_ID") != nullptr) {
      e.launcher = "srun";
      e.world_size = *size;
      e.rank = *rank;
      check_rank("SLURM_PROCID", e.rank, "SLURM_NTASKS", e.world_size);
      e.local_rank = number(getenv, "SLURM_LOCALID").value_or(0);
      const char* per_node = getenv("SLURM_TASKS_PER_NODE");
      e.local_size = per_node != nullptr
                         ? slurm_tasks_on_node(per_node, number(getenv, "SLURM_NODEID").value_or(0))
                         : 1;
      check_rank("SLURM_LOCALID", e.local_rank, "SLURM_TASKS_PER_NODE (this node)", e.local_size);
      return e;
    }
  }
  std::optional<int64_t> size = number(getenv, "PMIX_SIZE");
  if (!size) size = number(getenv, "PMI_SIZE");
  if (size) {
    e.launcher = "pmi";
    e.world_size = *size;
    std::optional<int64_t> rank = number(getenv, "PMIX_RANK");
    if (!rank) rank = number(getenv, "PMI_RANK");
    e.rank = rank.value_or(0);
    check_rank("PMIX_RANK/PMI_RANK", e.rank, "PMIX_SIZE/PMI_SIZE", e.world_size);
  }
  return e;
}

void require_no_launcher(const LaunchEnvironment& env, const std::string& flag,
                         const std::string& who, const std::string& usage) {
  if (env.launcher == "none") return;
  throw ConfigError(fmt::format(
      "{}: {} launches mpirun itself, but this process was started by {}; run `{}` without "
      "mpirun/srun",
      flag, who, env.launcher, usage));
}

}  // namespace traintwin::exec
