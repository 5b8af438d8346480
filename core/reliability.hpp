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
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace traintwin {

/// One component class's failures.
struct FailureClassSpec {
  double rate_per_1000_node_days = 0;  ///< > 0
  double weibull_shape = 1.0;          ///< > 0; 1 = exponential (memoryless)
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
};

/// The defaults above, with the Llama 3 failure classes.
ReliabilitySpec default_reliability();

}  // namespace traintwin
