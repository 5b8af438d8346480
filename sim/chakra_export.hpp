// Chakra execution traces out of a Program (issue 30): one ET file per rank in MLCommons Chakra's
// protobuf schema (traces/chakra/et_def.proto), the format ASTRA-sim replays, and the process
// groups its collectives name as the comm-group JSON ASTRA-sim reads with
// --comm-group-configuration. The Program comes from core/program.hpp (lowered one rank at a
// time, so big Programs never sit in memory whole) and each compute op's duration from the timing
// layer (sim/timed_program.hpp). Next in the flow: cli/export_command.cpp writes the files.
//
// One op becomes one node, with node id = 2 x op id (a ring exchange, which Chakra has no
// collective for, becomes a send to the next member of its group, id 2 x op id, and a recv from
// the previous one, id 2 x op id + 1, both with the string attribute traintwin.ring_exchange =
// the group's pg id, which the import reads back as one ring exchange; the group is in the comm
// groups JSON as a collective's):
//   compute     COMP_NODE, duration_micros = the op's time rounded to the microsecond, attributes
//               is_cpu_op false, num_ops (FLOPs, int64) and tensor_size (bytes, uint64) of its
//               kernels, and traintwin.kernels (string): the op's kernels as a JSON list of
//               {"name", "shape", "dtype", "tp", "flops", "bytes"} (chakra_kernels_json), which
//               `simulate --trace chakra --cost-model` prices with traintwin's cost model;
//   collective  COMM_COLL_NODE, comm_type (CollectiveCommType, int64), comm_size (int64 bytes:
//               each rank's input buffer, which is the nccl-tests size for every collective but
//               the all-gather, whose comm_size is the gathered output / group size by default,
//               as ASTRA-sim reads it, or the whole output with ChakraWriteOptions; see
//               sim/chakra_all_gather_size.hpp), pg_name (the group's id in the comm groups);
//   send, recv  COMM_SEND_NODE / COMM_RECV_NODE, comm_src, comm_dst, comm_tag (int32) and
//               comm_size (int64 bytes).
// data_deps are the op's dependencies, ctrl_deps the previous op of its stream (a stream runs its
// ops in order; as in PyTorch-converted traces, ctrl_deps is information, not a dependency:
// Chakra's original feeder waits for data_deps only, and so does the import — the sends and
// recvs of one p2p batch do not wait for each other. ASTRA-sim's feeder_v3 (chakra 90630ca,
// RESOLVE_CTRL_DEPS) waits for both, and so runs a p2p batch in stream order; see
// bench/astra_sim_compare.sh). Every node also carries
// traintwin's own attributes: phase, stream, micro_batch, layer (int64, -1 when none); the
// GlobalMetadata the scenario's name, the all-gather convention (kChakraAllGatherSizeAttr) and its
// rank layout (traintwin.world_size,
// traintwin.rank_order, traintwin.<Megatron size>: tensor_model_parallel_size,
// context_parallel_size, data_parallel_size, pipeline_model_parallel_size,
// expert_model_parallel_size, expert_tensor_parallel_size, num_distributed_optimizer_instances),
// which the import (sim/chakra_import.hpp) reads to give each process group its kind.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "core/program.hpp"
#include "sim/chakra_all_gather_size.hpp"
#include "sim/timed_program.hpp"

namespace traintwin {

/// The version written in each file's GlobalMetadata: Chakra's schema version of the generator
/// in mlcommons/chakra (src/generator/generator.py).
inline constexpr const char* kChakraEtVersion = "1.0.0";

/// The compute-node attribute that lists the node's kernels (chakra_kernels_json()).
inline constexpr const char* kChakraKernelsAttr = "traintwin.kernels";

/// The kernels of compute op `op` of `prog`, in run order, as compact JSON: a list of
/// {"name": KernelKey::name, "shape": [int64...], "dtype": "bf16" | ..., "tp": int64,
/// "flops": double, "bytes": double} (doubles written so that they read back exactly).
std::string chakra_kernels_json(const Program& prog, const Op& op);

/// The process groups the collectives of the exported ranks name: pg_name (a decimal id,
/// group kind x world size + lowest member + 1, never 0, the same on every member) -> members,
/// ascending.
using ChakraCommGroups = std::map<int64_t, std::vector<int64_t>>;

/// How the export writes what Chakra leaves to the writer.
struct ChakraWriteOptions {
  /// What an all-gather's comm_size counts: each rank's input (ASTRA-sim's reading, the default)
  /// or the gathered output (SimAI's, nccl-tests' size). Written to the GlobalMetadata.
  ChakraAllGatherSize all_gather_size = ChakraAllGatherSize::kInput;
};

/// Writes global rank `rank`'s ops as one Chakra ET stream (GlobalMetadata, then its nodes in op
/// order) to `out`, with compute durations from `timed` (which holds the RankProgram `rank` runs,
/// `program_rank`), and adds the groups its collectives use to `groups`. Returns the number of
/// nodes written. Throws InvalidArgument for a rank outside the world or without a RankProgram,
/// or (options.all_gather_size kInput) an all-gather whose bytes do not split evenly over its
/// group, Error when `out` fails.
int64_t write_chakra_rank(const TimedProgram& timed, int64_t rank, int64_t program_rank,
                          std::ostream& out, ChakraCommGroups& groups,
                          const ChakraWriteOptions& options = {});

/// The same for a Program whose compute ops last `compute_s(op id)` seconds (a live run's
/// measured times, say: `train --timeline DIR --timeline-format chakra`).
int64_t write_chakra_rank(const Program& prog, int64_t rank, int64_t program_rank,
                          const std::function<double(uint32_t op)>& compute_s, std::ostream& out,
                          ChakraCommGroups& groups, const ChakraWriteOptions& options = {});

/// `groups` as ASTRA-sim's comm-group JSON: {"<pg_name>": [ranks...], ...}.
std::string chakra_comm_groups_json(const ChakraCommGroups& groups);

/// What export_chakra() wrote.
struct ChakraExport {
  std::vector<std::filesystem::path> files;  ///< DIR/<name>.<rank>.et, by rank
  std::filesystem::path comm_groups;         ///< DIR/<name>.comm_groups.json
  int64_t nodes = 0;                         ///< over all files
};

/// Exports `ranks` (all ranks when empty) of scenario `s`: each rank lowered alone
/// (build_program), timed with `costs` on `gpu`, written to DIR/<s.name>.<rank>.et (whole or not
/// at all), then the comm groups. Throws what build_program and the cost model throw,
/// InvalidArgument for a rank outside the world, Error when a file cannot be written.
ChakraExport export_chakra(const Scenario& s, const CostModel& costs, const GpuSpec& gpu,
                           const std::filesystem::path& dir, const std::vector<int64_t>& ranks,
                           const ChakraWriteOptions& options = {});

/// The same on cluster `topo`: each rank timed on the GPU of its node (gpu_of_node of its
/// place_rank: a mixed cluster's node groups), the rest as above.
ChakraExport export_chakra(const Scenario& s, const CostModel& costs, const TopologySpec& topo,
                           const std::filesystem::path& dir, const std::vector<int64_t>& ranks,
                           const ChakraWriteOptions& options = {});

}  // namespace traintwin
