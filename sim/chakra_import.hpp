// Chakra execution traces in (issue 30): a set of MLCommons Chakra ET files, one per rank
// (DIR/<name>.<rank>.et, the schema traces/chakra/et_def.proto: a GlobalMetadata message, then
// Node messages, each preceded by its length as a varint), read back into traintwin's Program
// (core/program.hpp), so that the replay engine (sim/replay.hpp) simulates a recorded or exported
// job on any traintwin topology. Before this in the flow: sim/chakra_export.hpp (traintwin's own
// traces), ASTRA-sim's generators, or PyTorch's execution trace converted by chakra_converter.
// Next: simulate_chakra_trace() hands the Program to simulate_program(), then the command
// (cli/simulate_command.cpp, `simulate --trace chakra DIR --topology FILE`) prints the result.
//
// How nodes become ops (one node, one op; op id = the node's place in a topological order of its
// file that keeps the file's order wherever the dependencies allow it):
//   COMP_NODE       compute op of one kernel, kChakraComputeKernel {duration_micros}, whose FLOPs
//                   and bytes are the node's num_ops and tensor_size attributes (0 when absent);
//                   chakra_duration_cost_model() costs it at duration_micros. With
//                   ChakraReadOptions::kernels, a node whose traintwin.kernels (our export's
//                   list, sim/chakra_export.hpp) names only kernels of traintwin's catalogue
//                   (core/kernel_catalogue.hpp) runs those kernels instead, for traintwin's cost
//                   model to price (simulate_chakra_trace's kernel_costs). A node with
//                   is_cpu_op true (a host op: PyTorch's c10d:: calls are COMM_COLL_NODEs) is such
//                   a compute op too, whatever its type, as ASTRA-sim issues it;
//   METADATA_NODE   compute op of no kernel (0 s): it keeps its place in the dependencies;
//   COMM_COLL_NODE  collective of comm_type ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, BROADCAST or
//                   ALL_TO_ALL, comm_size bytes (each rank's input; an ALL_GATHER's comm_size is
//                   read as the file's GlobalMetadata kChakraAllGatherSizeAttr says, else as
//                   ChakraReadOptions::all_gather_size says, else as ASTRA-sim reads it, each
//                   rank's input: sim/chakra_all_gather_size.hpp), over the
//                   members of its process group pg_name: from DIR/<name>.comm_groups.json
//                   ({"<pg_name>": [ranks...]}, ASTRA-sim's --comm-group-configuration); a node
//                   without pg_name (or with "") spans every rank, ASTRA-sim's default;
//   COMM_SEND_NODE  send of comm_size bytes to comm_dst (comm_src must be the file's rank), tag
//   COMM_RECV_NODE  comm_tag; recv of comm_size bytes from comm_src. Without comm_tag, the k-th
//                   untagged send from a to b meets the k-th untagged recv of b from a.
// Dependencies: data_deps (each must complete first). ctrl_deps are not dependencies, as in
// Chakra's feeder, which ASTRA-sim uses (PyTorch-converted traces point them at the host op that
// launched a node, often one the converter dropped; traintwin's export at the previous op of the
// stream, a dependency already where the Program has one). Besides, the GPU
// compute nodes run one at a time in the op order, and the CPU nodes likewise (ASTRA-sim's
// HardwareResource holds one of each in flight; traintwin's own compute stream already is such a
// chain). Every other node type
// (INVALID, MEM_LOAD, MEM_STORE) and collective type (REDUCE, GATHER, SCATTER,
// REDUCE_SCATTER_BLOCK, BARRIER) is refused, naming the file and the node.
// traintwin's attributes (traintwin.phase, .stream, .micro_batch, .layer), when present, restore
// the op's phase, stream, micro-batch and layer; otherwise compute ops run on the compute stream
// in the forward phase, collectives on the communication stream of their group's kind, sends and
// recvs on the pipeline stream.
// Process groups become the groups of a rank layout (core/rank_layout.hpp), the only groups the
// replay knows: the layout traintwin's export writes in the metadata (the group kind of each
// pg_name decoded as the export encodes it, kind x world size + lowest member + 1), else the first
// layout TP x CP x DP x PP (sizes ascending, Megatron's order tp-cp-dp-pp first) in which every
// process group is a TP, CP, DP, PP, DP x CP, model-parallel or world group. A process group no
// layout holds is refused by name.
// A ring exchange our export wrote (a send and a recv, both with the string attribute
// traintwin.ring_exchange = its process group's pg_name, and the same comm_tag) is read back as
// one kRingExchange collective over that group: one op, at the place of the first half, waiting
// for the data_deps of both, and what waited for either half waits for it; so the round trip of
// a CP p2p (ring attention) Program is exact. Sends and recvs without the attribute stay sends
// and recvs.
#pragma once

#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/program.hpp"
#include "sim/chakra_all_gather_size.hpp"
#include "sim/cost_model.hpp"
#include "sim/replay.hpp"
#include "sim/simulation_options.hpp"
#include "topologies/topology.hpp"

namespace traintwin {

/// A Chakra ET file (or set of them) that cannot be replayed: missing or truncated files, a
/// message that is no Chakra node, an unknown node or collective type, a dependency (data_deps)
/// on a node the file lacks, a dependency cycle, a process group that cannot be resolved. The
/// message names the file and, where one is at fault, the node (id and name).
class ChakraTraceError : public DataError {
 public:
  using DataError::DataError;
};

/// The kernel name of a compute node read from a trace: shape {duration_micros}.
inline constexpr const char* kChakraComputeKernel = "chakra_node";

/// A set of Chakra ET files read into a Program.
struct ChakraTrace {
  std::string name;                          ///< <name> of DIR/<name>.<rank>.et
  std::vector<std::filesystem::path> files;  ///< by rank, 0 .. world - 1
  std::filesystem::path comm_groups;         ///< DIR/<name>.comm_groups.json; empty when absent
  /// Every rank with its own RankProgram (rp.rank = rp.coord's rank in program.layout);
  /// program.scenario holds only the name (the GlobalMetadata's traintwin.scenario, else
  /// `name`), the layout's sizes and order, and cluster.num_gpus = world.
  Program program;
  /// How program.layout was chosen: "traintwin metadata" or "inferred from the process groups".
  std::string layout_source;
  /// How the ALL_GATHER nodes' comm_size was read, and why: "traintwin metadata",
  /// "--all-gather-comm-size" (ChakraReadOptions::all_gather_size) or "ASTRA-sim's reading (default)".
  ChakraAllGatherSize all_gather_size = ChakraAllGatherSize::kInput;
  std::string all_gather_size_source;
  int64_t nodes = 0;  ///< over all files
  /// Compute nodes (COMP_NODE and host ops) over all files, and those of them read as
  /// traintwin kernels (ChakraReadOptions::kernels): the rest run at their trace durations.
  int64_t compute_nodes = 0;
  int64_t kernel_nodes = 0;

  explicit ChakraTrace(Program p) : program(std::move(p)) {}
  ChakraTrace(ChakraTrace&&) = default;
  ChakraTrace& operator=(ChakraTrace&&) = default;
  ChakraTrace(const ChakraTrace&) = delete;  // ops point into `names`
  ChakraTrace& operator=(const ChakraTrace&) = delete;

  /// The nodes' names, which the ops' Op::what point to (a deque: moving it keeps them).
  std::deque<std::string> names;
};

/// How read_chakra_trace() reads compute nodes.
struct ChakraReadOptions {
  /// Read a compute node as the kernels its traintwin.kernels lists when every one is a kernel
  /// of traintwin's catalogue (then a cost model prices it), else at its duration_micros.
  bool kernels = false;
  /// What an ALL_GATHER's comm_size counts in a trace whose GlobalMetadata does not say
  /// (kChakraAllGatherSizeAttr; traces of other tools): unset reads ASTRA-sim's convention, each
  /// rank's input. A trace that says is read as it says; a value here that contradicts it is
  /// refused.
  std::optional<ChakraAllGatherSize> all_gather_size;
};

/// Reads the Chakra ET files `where` names: a folder holding DIR/<name>.<rank>.et for one name
/// (ranks 0 .. N-1, each once), or the prefix DIR/<name> (ASTRA-sim's
/// --workload-configuration). Throws ChakraTraceError for a folder without ET files or with
/// several names, a missing rank (naming its file), files whose GlobalMetadata name different
/// all-gather conventions or one that options.all_gather_size contradicts, an
/// kChakraAllGatherSizeAttr other than "input" or "output", and every refusal of the file comment;
/// ConfigError (from read_input_file) for a file that cannot be read; with options.kernels, a
/// traintwin.kernels that is no kernel list (naming file, node and attribute).
ChakraTrace read_chakra_trace(const std::filesystem::path& where,
                              const ChakraReadOptions& options = {});

/// The cost model of a trace's compute nodes: kChakraComputeKernel {d} lasts d microseconds
/// (CostSource::kMeasured: a trace's duration is a measurement or the exporter's timing).
/// duration() throws CostModelError for any other kernel.
std::unique_ptr<CostModel> chakra_duration_cost_model();

/// Simulates one iteration of `trace` on `topo` (its first world-size GPUs), compute nodes at
/// their trace durations and the traintwin kernels read with ChakraReadOptions::kernels costed
/// by `kernel_costs` (required then: without it such a kernel throws CostModelError), with
/// `opts` (its
/// what-if GPU speed, straggler, degraded links and options apply as to any Program). Every rank
/// is replayed: exact_reductions and aggregate_tp are switched off, since a trace's ranks need
/// not be alike. Creates the process's SimGrid engine: call at most once per process. Throws
/// ConfigError when the topology holds fewer GPUs than the trace has ranks, and what
/// simulate_program() throws (Error when the trace cannot complete: a send without its recv, a
/// collective some member never reaches, naming the ranks and nodes left waiting).
SimulationResult simulate_chakra_trace(const ChakraTrace& trace, const TopologySpec& topo,
                                       SimulationOptions opts = {},
                                       const CostModel* kernel_costs = nullptr);

}  // namespace traintwin
