// How many tokens an MoE layer moves and computes on one rank per micro-batch: the counts the
// memory model, the Program's byte counts and the FLOP counts of the expert GEMMs share.
//
// Megatron-Core's token dispatchers (megatron/core/transformer/moe/token_dispatcher.py): a rank
// routes its local tokens T (b x s/CP, / TP under sequence parallelism) to k experts each; the
// alltoall dispatcher sends them over the EP group and all-gathers them over the ETP group, the
// allgather dispatcher all-gathers the EP x ETP group's tokens and keeps those of its local
// experts. Either way a rank's E/EP local experts receive, on average, ETP x T x k token copies
// (each of the EP x ETP ranks routes T k copies, spread over E experts, E/EP of them local, and
// every ETP rank computes all of them). Capacity (Megatron's get_capacity, moe_utils.py): each
// expert takes at most ceil(T k / E x capacity_factor) copies from each source rank.
#pragma once

#include <cstdint>

#include "core/scenario.hpp"

namespace traintwin {

/// T: the tokens of one micro-batch one rank routes in an MoE layer, b x s / CP, divided by TP
/// under sequence parallelism (the router runs on the sequence shard). Throws InvalidArgument
/// when CP does not divide seq_length or TP the local tokens under SP.
int64_t moe_local_tokens(const Scenario& s);

/// Megatron's per-expert capacity from one source rank, ceil(T k / E x capacity_factor), at most
/// T: an expert takes each token once (Megatron's drop policy keeps the top-capacity gates over
/// the T tokens; the executor's router keeps min(capacity, T), exec/cpu/moe_router.cpp); 0 when
/// dropless (no capacity factor).
int64_t moe_expert_capacity(const Scenario& s);

/// Token copies the local experts of one rank process per micro-batch in one MoE layer, for the
/// busiest rank: the mean ETP x T x k times cluster.what_if.moe_load_imbalance (1 when not set);
/// with a capacity factor at most ETP x E x capacity (what the local experts can accept), and
/// exactly that with moe_pad_expert_input_to_capacity. Throws InvalidArgument for a dense model.
double moe_expert_tokens_per_rank(const Scenario& s);

}  // namespace traintwin
