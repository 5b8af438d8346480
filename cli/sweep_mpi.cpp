#include "cli/sweep_mpi.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <cstdio>

#include <cstdlib>
#include <string>

#include "core/error.hpp"
#include "exec/launch_env.hpp"

namespace traintwin::cli {
namespace {

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw Error(std::string("sweep over MPI: ") + what + " failed");
}

SweepStatus parse_status(const std::string& s) {
  for (SweepStatus st : {SweepStatus::kRanked, SweepStatus::kOutOfMemory, SweepStatus::kError,
                         SweepStatus::kInvalid}) {
    if (s == to_string(st)) return st;
  }
  throw Error("sweep over MPI: unknown row status '" + s + "'");
}

}  // namespace

bool launched_by_mpi() { return exec::read_launch_environment().distributed(); }

void run_or_abort_all(const std::function<void()>& work) {
  try {
    work();
  } catch (const std::exception& e) {  // any exception: the other ranks may be waiting
    fmt::print(stderr, "traintwin: error: {}\n", e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
}

std::vector<SweepRow> mpi_sweep(
    const std::vector<SweepConfiguration>& configurations,
    const std::function<std::vector<SweepRow>(const std::vector<SweepConfiguration>&)>& sweep,
    bool& is_root) {
  check(MPI_Init(nullptr, nullptr), "MPI_Init");
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  is_root = rank == 0;
  std::vector<SweepConfiguration> mine;
  for (const SweepConfiguration& c : configurations) {
    if (c.index % size == rank) mine.push_back(c);
  }
  // Every rank's rows as JSON: the configuration index and what the evaluation found.
  nlohmann::json payload = nlohmann::json::array();
  for (const SweepRow& r : sweep(mine)) {
    payload.push_back({{"index", r.config.index},
                       {"status", to_string(r.status)},
                       {"error", r.error},
                       {"tokens_per_s", r.tokens_per_s},
                       {"metrics", r.metrics}});
  }
  const std::string text = payload.dump();
  int length = static_cast<int>(text.size());
  std::vector<int> lengths(static_cast<size_t>(size)), offsets(static_cast<size_t>(size));
  check(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Gather");
  std::string all;
  if (is_root) {
    int total = 0;
    for (int i = 0; i < size; ++i) {
      offsets[static_cast<size_t>(i)] = total;
      total += lengths[static_cast<size_t>(i)];
    }
    all.resize(static_cast<size_t>(total));
  }
  check(MPI_Gatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(),
                    MPI_CHAR, 0, MPI_COMM_WORLD),
        "MPI_Gatherv");
  std::vector<SweepRow> rows;
  if (is_root) {
    for (int i = 0; i < size; ++i) {
      const auto part = nlohmann::ordered_json::parse(
          all.substr(static_cast<size_t>(offsets[static_cast<size_t>(i)]),
                     static_cast<size_t>(lengths[static_cast<size_t>(i)])));
      for (const auto& j : part) {
        SweepRow row;
        row.config = configurations.at(j["index"].get<size_t>());
        row.status = parse_status(j["status"].get<std::string>());
        row.error = j["error"].get<std::string>();
        row.tokens_per_s = j["tokens_per_s"].get<double>();
        row.metrics = j["metrics"];
        rows.push_back(std::move(row));
      }
    }
    rows = rank_rows(std::move(rows));
  }
  MPI_Finalize();
  return rows;
}

}  // namespace traintwin::cli
