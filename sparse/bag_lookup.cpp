#include "sparse/bag_lookup.hpp"

#include <algorithm>
#include <numeric>

#include "common/enforce.hpp"

namespace coach::sparse {

result<pooling> parse_pooling(std::string_view text) {
  if (text == "sum") return pooling::sum;
  if (text == "mean") return pooling::mean;
  return fail(errc::invalid_argument, "pooling '{}' is not one of sum, mean", text);
}

std::string_view to_string(pooling p) noexcept {
  return p == pooling::sum ? "sum" : "mean";
}

bag_rows unique_rows(std::span<const std::uint64_t> ids) {
  bag_rows out;
  // Sort positions by id (stable: equal ids keep lookup order), then number the distinct ids.
  std::vector<std::uint32_t> order(ids.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::uint32_t a, std::uint32_t b) { return ids[a] < ids[b]; });
  out.local.resize(ids.size());
  for (const auto i : order) {
    if (out.rows.empty() || out.rows.back() != ids[i]) out.rows.push_back(ids[i]);
    out.local[i] = static_cast<std::uint32_t>(out.rows.size() - 1);
  }
  return out;
}

void bag_forward(pooling p, std::span<const std::uint32_t> offsets,
                 std::span<const std::uint32_t> local, std::span<const float> pulled,
                 std::size_t dim, bag_output to) {
  COACH_ENFORCE(!offsets.empty() && offsets.back() == local.size(), "bag_forward: offsets");
  const std::size_t batch = offsets.size() - 1;
  for (std::size_t b = 0; b < batch; ++b) {
    float* out = to.out.data() + b * to.stride + to.column;
    std::fill(out, out + dim, 0.0f);
    const std::uint32_t first = offsets[b], end = offsets[b + 1];
    for (std::uint32_t j = first; j < end; ++j) {
      const float* row = pulled.data() + std::size_t{local[j]} * dim;
      for (std::size_t k = 0; k < dim; ++k) out[k] += row[k];
    }
    if (p == pooling::mean && end > first) {
      const float inv = 1.0f / static_cast<float>(end - first);
      for (std::size_t k = 0; k < dim; ++k) out[k] *= inv;
    }
  }
}

void bag_backward(pooling p, std::span<const std::uint32_t> offsets,
                  std::span<const std::uint32_t> local, const float* grad_out,
                  std::size_t grad_stride, std::size_t grad_column, std::size_t dim,
                  std::span<float> grad_rows) {
  COACH_ENFORCE(!offsets.empty() && offsets.back() == local.size(), "bag_backward: offsets");
  std::fill(grad_rows.begin(), grad_rows.end(), 0.0f);
  const std::size_t batch = offsets.size() - 1;
  for (std::size_t b = 0; b < batch; ++b) {
    const float* g = grad_out + b * grad_stride + grad_column;
    const std::uint32_t first = offsets[b], end = offsets[b + 1];
    const float w =
        p == pooling::mean && end > first ? 1.0f / static_cast<float>(end - first) : 1.0f;
    for (std::uint32_t j = first; j < end; ++j) {
      float* row = grad_rows.data() + std::size_t{local[j]} * dim;
      for (std::size_t k = 0; k < dim; ++k) row[k] += g[k] * w;
    }
  }
}

}  // namespace coach::sparse
