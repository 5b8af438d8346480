// The names of the scenario's enums: one table {value, name} per enum of core/scenario.hpp, the
// spelling a scenario file, a Megatron flag and every printed report use. The to_string()
// functions of core/scenario.hpp and the schema's allowed values (core/scenario_schema.hpp, next
// in the flow) both read these tables; no other list of the names exists.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>
#include <utility>

#include "core/scenario.hpp"

namespace traintwin {

/// The names of the values of enum E, in declaration order: `entries` pairs each value with its
/// spelling (a string literal, so name().data() is NUL-terminated).
template <typename E, size_t N>
struct EnumTable {
  std::array<std::pair<E, std::string_view>, N> entries;

  /// The spelling of `v`; "?" for a value outside the table.
  constexpr std::string_view name(E v) const {
    for (const auto& [value, text] : entries) {
      if (value == v) return text;
    }
    return "?";
  }
  /// The value spelt `text` exactly; nullopt for any other text.
  constexpr std::optional<E> parse(std::string_view text) const {
    for (const auto& [value, spelling] : entries) {
      if (spelling == text) return value;
    }
    return std::nullopt;
  }
  /// Every spelling, in declaration order.
  constexpr std::array<std::string_view, N> names() const {
    std::array<std::string_view, N> out{};
    for (size_t i = 0; i < N; ++i) out[i] = entries[i].second;
    return out;
  }
};

template <typename E, typename... Names>
constexpr EnumTable<E, sizeof...(Names)> enum_table(std::pair<E, Names>... entries) {
  return {{{std::pair<E, std::string_view>(entries.first, entries.second)...}}};
}

/// EnumNames<E>::table is E's name table (specialised below for every scenario enum).
template <typename E>
struct EnumNames;

#define TRAINTWIN_ENUM_NAMES(E, ...)                              \
  template <>                                                     \
  struct EnumNames<E> {                                           \
    static constexpr auto table = enum_table<E>(__VA_ARGS__);     \
  }

TRAINTWIN_ENUM_NAMES(Precision, std::pair{Precision::kFp32, "fp32"},
                     std::pair{Precision::kFp16, "fp16"}, std::pair{Precision::kBf16, "bf16"},
                     std::pair{Precision::kFp8, "fp8"}, std::pair{Precision::kTf32, "tf32"},
                     std::pair{Precision::kFp32Bf16, "fp32-bf16"});
TRAINTWIN_ENUM_NAMES(Float32MatmulPrecision,
                     std::pair{Float32MatmulPrecision::kHighest, "highest"},
                     std::pair{Float32MatmulPrecision::kHigh, "high"},
                     std::pair{Float32MatmulPrecision::kMedium, "medium"});
TRAINTWIN_ENUM_NAMES(RecomputeGranularity, std::pair{RecomputeGranularity::kNone, "none"},
                     std::pair{RecomputeGranularity::kSelective, "selective"},
                     std::pair{RecomputeGranularity::kFull, "full"});
TRAINTWIN_ENUM_NAMES(SelectiveAcOption, std::pair{SelectiveAcOption::kCoreAttn, "core_attn"},
                     std::pair{SelectiveAcOption::kOp, "op"});
TRAINTWIN_ENUM_NAMES(CrossEntropyLoss, std::pair{CrossEntropyLoss::kVocabParallel, "vocab_parallel"},
                     std::pair{CrossEntropyLoss::kTorch, "torch"});
TRAINTWIN_ENUM_NAMES(DataParallelShardingStrategy,
                     std::pair{DataParallelShardingStrategy::kNoShard, "no_shard"},
                     std::pair{DataParallelShardingStrategy::kOptim, "optim"},
                     std::pair{DataParallelShardingStrategy::kOptimGrads, "optim_grads"},
                     std::pair{DataParallelShardingStrategy::kOptimGradsParams,
                               "optim_grads_params"});
TRAINTWIN_ENUM_NAMES(AttentionBackend, std::pair{AttentionBackend::kUnfused, "unfused"},
                     std::pair{AttentionBackend::kFlash, "flash"},
                     std::pair{AttentionBackend::kFused, "fused"});
TRAINTWIN_ENUM_NAMES(PipelineScheduleKind, std::pair{PipelineScheduleKind::kGPipe, "gpipe"},
                     std::pair{PipelineScheduleKind::k1F1B, "1f1b"},
                     std::pair{PipelineScheduleKind::kZbH1, "zb-h1"},
                     std::pair{PipelineScheduleKind::kZbH2, "zb-h2"},
                     std::pair{PipelineScheduleKind::kZbV, "zb-v"},
                     std::pair{PipelineScheduleKind::kDualPipe, "dualpipe"},
                     std::pair{PipelineScheduleKind::kDualPipeV, "dualpipev"});
TRAINTWIN_ENUM_NAMES(LrDecayStyle, std::pair{LrDecayStyle::kConstant, "constant"},
                     std::pair{LrDecayStyle::kLinear, "linear"},
                     std::pair{LrDecayStyle::kCosine, "cosine"});
TRAINTWIN_ENUM_NAMES(Normalization, std::pair{Normalization::kLayerNorm, "layernorm"},
                     std::pair{Normalization::kRmsNorm, "rmsnorm"});
TRAINTWIN_ENUM_NAMES(Activation, std::pair{Activation::kGelu, "gelu"},
                     std::pair{Activation::kSwiglu, "swiglu"},
                     std::pair{Activation::kSquaredRelu, "squared_relu"});
TRAINTWIN_ENUM_NAMES(PositionEmbedding,
                     std::pair{PositionEmbedding::kLearnedAbsolute, "learned_absolute"},
                     std::pair{PositionEmbedding::kRope, "rope"});
TRAINTWIN_ENUM_NAMES(Fp8Format, std::pair{Fp8Format::kHybrid, "hybrid"},
                     std::pair{Fp8Format::kE4m3, "e4m3"});
TRAINTWIN_ENUM_NAMES(Fp8Recipe, std::pair{Fp8Recipe::kDelayed, "delayed"},
                     std::pair{Fp8Recipe::kTensorwise, "tensorwise"},
                     std::pair{Fp8Recipe::kBlockwise, "blockwise"},
                     std::pair{Fp8Recipe::kMxfp8, "mxfp8"});
TRAINTWIN_ENUM_NAMES(CpCommType, std::pair{CpCommType::kP2p, "p2p"},
                     std::pair{CpCommType::kA2a, "a2a"},
                     std::pair{CpCommType::kAllGather, "all_gather"});
TRAINTWIN_ENUM_NAMES(MoeTokenDispatcher, std::pair{MoeTokenDispatcher::kAllToAll, "alltoall"},
                     std::pair{MoeTokenDispatcher::kAllGather, "allgather"});
TRAINTWIN_ENUM_NAMES(MoeLoadBalancing, std::pair{MoeLoadBalancing::kAuxLoss, "aux_loss"},
                     std::pair{MoeLoadBalancing::kNone, "none"});

#undef TRAINTWIN_ENUM_NAMES

/// The spelling of `v` from its enum's table ("?" outside it).
template <typename E>
constexpr std::string_view enum_name(E v) {
  return EnumNames<E>::table.name(v);
}

/// Every spelling of enum E, in declaration order.
template <typename E>
inline constexpr auto kEnumNames = EnumNames<E>::table.names();

}  // namespace traintwin
