// A scaling study read from a sweep's records (`sweep --num-gpus 128,256,...`): per GPU count the
// best ranked configuration, the layout each row ran (without the GPU count and DP, which follow
// it), and the time and GPU-hours a token budget takes at a throughput. sim/sweep_record.hpp
// (before this in the flow) holds the records; the CLI's scaling table (cli/sweep_command.cpp)
// and the report's scaling charts (viz/sweep_charts.hpp) both read them through this file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "sim/sweep_record.hpp"

namespace traintwin {

/// The best ranked configuration of one GPU count: the lowest rank (highest tokens/s) among the
/// ranked records with that num_gpus.
struct ScalingPoint {
  int64_t num_gpus = 0;
  size_t record = 0;  ///< index of the best record in the records given
};

/// One ScalingPoint per GPU count that has a ranked record, in increasing GPU count. Empty when
/// no record is ranked.
std::vector<ScalingPoint> best_per_gpu_count(const std::vector<SweepRecord>& records);

/// Whether the records hold ranked rows at two or more GPU counts (a scaling study).
bool is_scaling_study(const std::vector<SweepRecord>& records);

/// "TP 4 CP 2 PP 4 VPP 5 mbs 1 recompute none SP on dist-opt on fp8 off" (EP and ETP for MoE
/// layouts, the schedule when not 1F1B): the layout of a row without the GPU count, DP and
/// global batch, which a scaling study derives per GPU count; the same text for the same layout
/// at every GPU count.
std::string scaling_layout_label(const SweepRecordConfiguration& c);

/// The wall time and GPU time a token budget takes.
struct TrainingTime {
  double days = 0;       ///< tokens / tokens_per_s / 86,400
  double gpu_hours = 0;  ///< days x 24 x GPUs
};

/// training_time(tokens, tokens/s, GPUs): days = tokens / tokens_per_s / 86,400 and GPU-hours =
/// days x 24 x num_gpus. Throws InvalidArgument unless tokens > 0, tokens_per_s > 0 and
/// num_gpus >= 1.
TrainingTime training_time(double tokens, double tokens_per_s, int64_t num_gpus);

}  // namespace traintwin
