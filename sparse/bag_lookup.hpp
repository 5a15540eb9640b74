#pragma once
// sparse::bag_lookup: a worker's side of an embedding table for one batch — which rows the batch
// needs (each once), and the pooled rows of each sample's bag forward and their gradients
// backward (PyTorch's EmbeddingBag, CPU).
//
// A batch looks up a bag of ids per sample in each table (one id per sample in a one-hot
// categorical field; several in a multi-hot one): ids sample after sample, offsets[b] the first of
// sample b's, offsets[batch] = ids.size() (PyTorch's `offsets` plus the end). unique_rows() turns
// them into the rows to pull, ascending and each once, and for each lookup its row's position in
// that list, so forward reads pulled rows and backward sums a row's gradient over every lookup
// of it before it is pushed: a step moves each touched row once each way, whatever its count.
//
// Pooling: sum adds a bag's rows; mean divides the sum by the bag's size (an empty bag gives
// zeros, both ways, as PyTorch). Backward adds into the row gradients in lookup order, so the
// result does not depend on threads or on the order rows were pulled in.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "common/error.hpp"

namespace coach::sparse {

enum class pooling { sum, mean };

/// "sum" | "mean"; anything else: invalid_argument naming the value.
result<pooling> parse_pooling(std::string_view text);
std::string_view to_string(pooling p) noexcept;

/// The rows a batch's lookups need, and where each lookup finds its row.
struct bag_rows {
  std::vector<std::uint64_t> rows;   ///< ascending, each once
  std::vector<std::uint32_t> local;  ///< per lookup: index into rows
};

/// The distinct rows of `ids` and each id's index among them.
bag_rows unique_rows(std::span<const std::uint64_t> ids);

/// Where a table's pooled output goes: sample b's `dim` floats at out[b * stride + column].
struct bag_output {
  std::span<float> out;
  std::size_t stride = 0;
  std::size_t column = 0;
};

/// Writes each sample's pooled bag. `pulled` holds the rows of unique_rows' list, row after row
/// (rows.size() * dim floats). REQUIRES: offsets ascending from 0 to local.size(), every local
/// index < rows, the output large enough.
void bag_forward(pooling p, std::span<const std::uint32_t> offsets,
                 std::span<const std::uint32_t> local, std::span<const float> pulled,
                 std::size_t dim, bag_output to);

/// The gradient of each pulled row: `grad_rows` (rows * dim floats) is set to the sum over the
/// lookups of that row of its sample's output gradient (read like bag_forward's output), divided
/// by the bag's size for mean pooling.
void bag_backward(pooling p, std::span<const std::uint32_t> offsets,
                  std::span<const std::uint32_t> local, const float* grad_out,
                  std::size_t grad_stride, std::size_t grad_column, std::size_t dim,
                  std::span<float> grad_rows);

}  // namespace coach::sparse
