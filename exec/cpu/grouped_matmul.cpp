// Grouped GEMM over local experts; see grouped_matmul.hpp.
#include "exec/cpu/grouped_matmul.hpp"

#include <string>

#include "exec/cpu/checks.hpp"
#include "exec/cpu/matmul.hpp"

namespace traintwin::exec::cpu {
namespace {

constexpr const char* kLayer = "grouped_matmul";

/// Rows [first, first + rows) of a [M, width] span.
template <typename T>
std::span<T> rows_of(std::span<T> x, int64_t first, int64_t rows, int64_t width) {
  return x.subspan(static_cast<size_t>(first * width), static_cast<size_t>(rows * width));
}

}  // namespace

int64_t grouped_matmul_rows(std::span<const int64_t> rows_per_group, size_t weight,
                            size_t in_rows_size, const char* in_name, size_t out_rows_size,
                            const char* out_name, int64_t channels, int64_t out_channels) {
  require_positive(kLayer, channels, "channels");
  require_positive(kLayer, out_channels, "out_channels");
  int64_t rows = 0;
  for (size_t g = 0; g < rows_per_group.size(); ++g) {
    if (rows_per_group[g] < 0) {
      throw InvalidArgument(std::string(kLayer) + ": group " + std::to_string(g) + " has " +
                            std::to_string(rows_per_group[g]) + " rows");
    }
    rows += rows_per_group[g];
  }
  const auto groups = static_cast<int64_t>(rows_per_group.size());
  require_size(kLayer, weight, groups * out_channels * channels, "weight");
  require_size(kLayer, in_rows_size, rows * channels, in_name);
  require_size(kLayer, out_rows_size, rows * out_channels, out_name);
  return rows;
}

template <typename Scalar>
void grouped_matmul_forward(std::span<Scalar> out, std::span<const Scalar> inp,
                            std::span<const Scalar> weight,
                            std::span<const int64_t> rows_per_group, int64_t channels,
                            int64_t out_channels) {
  grouped_matmul_rows(rows_per_group, weight.size(), inp.size(), "inp", out.size(), "out",
                      channels, out_channels);
  const int64_t w = out_channels * channels;
  for_each_group(rows_per_group, [&](int64_t g, int64_t first, int64_t rows) {
    matmul_forward<Scalar>(rows_of(out, first, rows, out_channels),
                           rows_of(inp, first, rows, channels), rows_of(weight, g, 1, w), {}, 1,
                           rows, channels, out_channels);
  });
}

template <typename Scalar>
void grouped_matmul_backward_data(std::span<Scalar> dinp, std::span<const Scalar> dout,
                                  std::span<const Scalar> weight,
                                  std::span<const int64_t> rows_per_group, int64_t channels,
                                  int64_t out_channels) {
  grouped_matmul_rows(rows_per_group, weight.size(), dinp.size(), "dinp", dout.size(), "dout",
                      channels, out_channels);
  const int64_t w = out_channels * channels;
  for_each_group(rows_per_group, [&](int64_t g, int64_t first, int64_t rows) {
    matmul_backward_data<Scalar>(rows_of(dinp, first, rows, channels),
                                 rows_of(dout, first, rows, out_channels),
                                 rows_of(weight, g, 1, w), 1, rows, channels, out_channels);
  });
}

template <typename Scalar>
void grouped_matmul_backward_weight(std::span<Scalar> dweight, std::span<const Scalar> dout,
                                    std::span<const Scalar> inp,
                                    std::span<const int64_t> rows_per_group, int64_t channels,
                                    int64_t out_channels) {
  grouped_matmul_rows(rows_per_group, dweight.size(), inp.size(), "inp", dout.size(), "dout",
                      channels, out_channels);
  const int64_t w = out_channels * channels;
  for_each_group(rows_per_group, [&](int64_t g, int64_t first, int64_t rows) {
    matmul_backward_weight<Scalar>(rows_of(dweight, g, 1, w), {},
                                   rows_of(dout, first, rows, out_channels),
                                   rows_of(inp, first, rows, channels), 1, rows, channels,
                                   out_channels);
  });
}

#define TRAINTWIN_GROUPED_MATMUL(Scalar)                                                          \
  template void grouped_matmul_forward<Scalar>(std::span<Scalar>, std::span<const Scalar>,        \
                                               std::span<const Scalar>, std::span<const int64_t>, \
                                               int64_t, int64_t);                                 \
  template void grouped_matmul_backward_data<Scalar>(                                             \
      std::span<Scalar>, std::span<const Scalar>, std::span<const Scalar>,                        \
      std::span<const int64_t>, int64_t, int64_t);                                                \
  template void grouped_matmul_backward_weight<Scalar>(                                           \
      std::span<Scalar>, std::span<const Scalar>, std::span<const Scalar>,                        \
      std::span<const int64_t>, int64_t, int64_t);
TRAINTWIN_GROUPED_MATMUL(float)
TRAINTWIN_GROUPED_MATMUL(double)
#undef TRAINTWIN_GROUPED_MATMUL

}  // namespace traintwin::exec::cpu
