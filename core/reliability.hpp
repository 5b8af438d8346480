// What can interrupt or slow a long training run, and what a restart and a checkpoint cost: the
// scenario's `cluster.reliability` mapping (scenarios/README.md), read by
// core/scenario_reader.cpp and used by sim/goodput.hpp's whole-run simulation
// (`traintwin goodput`).
//
// Failure rates are per 1000 node-days (a node: the topology's node of gpus_per_node GPUs), by
// component class, each a renewal process per node with Weibull inter-failure times of the
// given shape (1 = exponential). The defaults are the 419 unexpected interruptions of the Llama 3
// 405B pre-training snapshot (Dubey et al. 2024, "The Llama 3 Herd of Models", sec. 3.3.4 and
// Table 5: 54 days on 16,384 H100 GPUs = 2,048 nodes of 8, 110,592 node-days), grouped:
//   gpu      184 = faulty GPU 148 + GPU SRAM 19 + GPU system processor 17   -> 1.6638
//   hbm       72 = GPU HBM3 memory                                          -> 0.6510
//   network   35 = network switch and cable                                 -> 0.3165
//   cpu        2 = CPU                                                      -> 0.0181
//   other    126 = the rest of the table (software, host maintenance, NIC,
//                  NCCL watchdog, silent data corruption, thermal, SSD, PSU...) -> 1.1393
// (in all 3.789 per 1000 node-days: one interruption every 3.09 h at 2,048 nodes, the paper's
// "every three hours"), and its 47 planned interruptions (automated maintenance) -> 0.4250.
// The time costs have no published source of that kind; their defaults are stated assumptions
// except detection, PyTorch's default NCCL timeout (ProcessGroupNCCL, 10 minutes; Megatron's
// --distributed-timeout-minutes 10), and the file system, Llama 3's Tectonic (sec. 3.3.1: 2 TB/s
// sustained).
//
// Degraded, not down: episodes in which the job keeps running at a slower iteration time
// (sim/degraded_states.hpp replays each such state once). Each kind is a Poisson process of
// episodes per node (rate per 1000 node-days, as the failures) with exponential durations of the
// given mean; every rate defaults to 0 (off). Stragglers are reported by ByteDance ("Understanding
// Stragglers in Large Model Training Using What-if Analysis", Lin et al., OSDI 2025) and by
// Kokolis et al. ("Revisiting Reliability in Large-Scale ML Research Clusters", HPCA 2025), but
// we found no per-node rate, slowdown or duration in a form to copy here: every default below is
// an assumption, and the feature is off until a rate is set.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace traintwin {

/// One component class's failures.
struct FailureClassSpec {
  double rate_per_1000_node_days = 0;  ///< > 0
  double weibull_shape = 1.0;          ///< > 0; 1 = exponential (memoryless)
};

/// One kind of degraded episode (the job runs on, slower).
struct DegradationSpec {
  double rate_per_1000_node_days = 0;  ///< episodes per node, >= 0; 0 = off
  double duration_s = 3600;            ///< mean duration of one episode (exponential), > 0
};

/// cluster.reliability: failures, interruptions, restart and checkpoint costs.
struct ReliabilitySpec {
  /// Component class -> its failures (default: Llama 3's, file comment).
  std::map<std::string, FailureClassSpec> failures;
  /// Planned interruptions (maintenance; the job saves first, so no progress is lost) per 1000
  /// node-days, >= 0.
  double planned_interruptions_per_1000_node_days = 0;
  double detection_s = 600;         ///< failure until the job is declared dead, >= 0
  double requeue_s = 120;           ///< re-queue and node swap (a spare is ready), >= 0
  double process_start_s = 60;      ///< process start, imports, model build, >= 0
  double communicator_init_s = 10;  ///< NCCL/communicator setup, fixed part, >= 0
  double communicator_init_s_per_1000_gpus = 2;  ///< and its growth with the world size, >= 0
  /// Checkpoint storage: each node writes (reads) its share at the per-node rate, all nodes
  /// together at most at the file system's aggregate rate. > 0.
  double storage_write_GBps_per_node = 10;
  double storage_read_GBps_per_node = 10;
  double filesystem_GBps = 2000;
  /// Asynchronous save (Megatron's --async-save, PyTorch DCP async_save): training stalls only
  /// for async_save_stall_s (a copy to host memory) while the write runs in the background; a
  /// failure before the write ends loses that checkpoint.
  bool async_save = false;
  double async_save_stall_s = 5;  ///< >= 0
  /// Spare nodes that replace a failed one at once; without one the job waits for a repair.
  int64_t spare_nodes = 32;       ///< >= 0, at most the job's nodes
  double node_repair_hours = 24;  ///< a failed node's return to the spare pool, > 0

  /// A straggler: a GPU whose compute ops last straggler_slowdown times longer (thermal
  /// throttling, a slow host, memory thrashing), replayed as its TP group slowed (it holds the
  /// group up at every TP collective); a synchronous step waits for it. Assumptions: a 1-hour
  /// mean episode, 2x slower.
  DegradationSpec straggler;
  double straggler_slowdown = 2.0;  ///< >= 1
  /// A leaf-spine link down: its flows spread over the leaf's other uplinks (assumption: 4 h to
  /// repair a cable or transceiver).
  DegradationSpec link_down{0, 4 * 3600.0};
  /// A NIC down: its rail's traffic moves over NVLink to the next NIC (PXN), which then carries
  /// both (assumption: 4 h to replace the NIC or drain the node at the next restart).
  DegradationSpec nic_down{0, 4 * 3600.0};
  /// A flapping link (a NIC-leaf link retraining, running at reduced bandwidth; assumption: 1 h
  /// until it is taken out or settles, at half its bandwidth).
  DegradationSpec link_flap;
  double link_flap_bandwidth_factor = 0.5;  ///< in (0, 1]
};

/// The kinds of degraded episode, in ReliabilitySpec's order.
enum class DegradedKind { kStraggler, kLinkDown, kNicDown, kLinkFlap };
inline constexpr std::array<DegradedKind, 4> kDegradedKinds = {
    DegradedKind::kStraggler, DegradedKind::kLinkDown, DegradedKind::kNicDown,
    DegradedKind::kLinkFlap};

/// "straggler", "link_down", "nic_down", "link_flap": the prefix of the kind's
/// cluster.reliability keys (straggler_rate_per_1000_node_days, ...).
std::string_view to_string(DegradedKind kind);

/// The episodes of `kind` in `r`.
const DegradationSpec& episodes(const ReliabilitySpec& r, DegradedKind kind);

/// The defaults above, with the Llama 3 failure classes.
ReliabilitySpec default_reliability();

}  // namespace traintwin
