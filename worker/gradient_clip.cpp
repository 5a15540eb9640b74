#include "worker/gradient_clip.hpp"

#include <cmath>
#include <utility>
#include <vector>

#include "common/enforce.hpp"

namespace coach::worker {

double clip_gradient(kernels::backend& be, float* grad, std::size_t n, std::uint64_t samples,
                     float max_norm, std::span<const statistic_range> skip) {
  COACH_ENFORCE(max_norm >= 0.0f, "clip_gradient: max_norm must be >= 0");
  // The runs of keys outside the skip ranges, in key order.
  std::vector<std::pair<std::size_t, std::size_t>> runs;
  std::size_t at = 0;
  for (const auto& s : skip) {
    COACH_ENFORCE(s.keys.begin >= at && s.keys.begin <= s.keys.end && s.keys.end <= n,
                  "clip_gradient: skip ranges must be ascending, disjoint and within the vector");
    if (s.keys.begin > at) runs.emplace_back(at, s.keys.begin);
    at = s.keys.end;
  }
  if (at < n) runs.emplace_back(at, n);
  if (samples == 0) return 0.0;
  double squares = 0.0;
  for (const auto& [begin, end] : runs) squares += be.sum_squares(grad + begin, end - begin);
  const double norm = std::sqrt(squares) / double(samples);
  if (max_norm > 0.0f && std::isfinite(norm) && norm > double(max_norm)) {
    const float factor = float(double(max_norm) / norm);
    for (const auto& [begin, end] : runs) be.scale(end - begin, factor, grad + begin);
  }
  return norm;
}

}  // namespace coach::worker
