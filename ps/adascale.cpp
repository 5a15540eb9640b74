#include "ps/adascale.hpp"

#include <algorithm>
#include <cmath>

namespace coach::ps {

std::vector<double> grad_stats::to_list() const {
  return {double(version), parts_sq, sum_sq, samples, contributions};
}

std::optional<grad_stats> grad_stats::from_list(std::span<const double> v) {
  if (v.size() != 5) return std::nullopt;
  for (double x : v)
    if (!std::isfinite(x)) return std::nullopt;
  if (v[0] < 1 || v[3] <= 0 || v[4] < 2 || v[1] < 0 || v[2] < 0) return std::nullopt;
  return grad_stats{std::int64_t(v[0]), v[1], v[2], v[3], v[4]};
}

void grad_stats::add(const grad_stats& other) noexcept {
  parts_sq += other.parts_sq;
  sum_sq += other.sum_sq;
}

void add_to_stats(grad_stats& st, std::span<const float* const> parts,
                  std::span<const std::uint64_t> samples, const float* sum, std::size_t n) {
  for (std::size_t k = 0; k < parts.size(); ++k) {
    double sq = 0;
    for (std::size_t i = 0; i < n; ++i) sq += double(parts[k][i]) * double(parts[k][i]);
    st.parts_sq += sq / double(samples[k]);
  }
  double sq = 0;
  for (std::size_t i = 0; i < n; ++i) sq += double(sum[i]) * double(sum[i]);
  st.sum_sq += sq;
}

bool adascale_gain::observe(const grad_stats& st) {
  if (st.version <= version_ || st.contributions < 2 || st.samples <= 0) return false;
  const double n = st.samples;
  const double var = (st.parts_sq - st.sum_sq / n) / (st.contributions - 1);
  const double mu2 = st.sum_sq / (n * n) - var / n;
  if (version_ == 0) {
    var_ = var;
    mu2_ = mu2;
  } else {
    var_ = smoothing * var_ + (1 - smoothing) * var;
    mu2_ = smoothing * mu2_ + (1 - smoothing) * mu2;
  }
  version_ = st.version;
  return true;
}

double adascale_gain::gain(double reference, double samples) const noexcept {
  if (version_ == 0 || reference <= 0 || samples <= 0) return 1.0;
  const double var = std::max(var_, 0.0);
  const double mu2 = std::max(mu2_, 0.0);
  const double below = mu2 + var / samples;
  if (below <= 0) return 1.0;
  const double r = (mu2 + var / reference) / below;
  const double scale = samples / reference;
  return std::clamp(r, std::min(1.0, scale), std::max(1.0, scale));
}

std::vector<double> adascale_gain::state() const {
  if (version_ == 0) return {};
  return {double(version_), var_, mu2_};
}

bool adascale_gain::restore(std::span<const double> s) {
  if (s.empty()) return true;
  if (s.size() != 3 || !std::isfinite(s[0]) || !std::isfinite(s[1]) || !std::isfinite(s[2]) ||
      s[0] < 1)
    return false;
  if (std::int64_t(s[0]) <= version_) return true;
  version_ = std::int64_t(s[0]);
  var_ = s[1];
  mu2_ = s[2];
  return true;
}

void stats_gatherer::take(std::uint64_t shard, std::span<const double> list) {
  if (auto st = grad_stats::from_list(list)) by_version_[st->version][shard] = *st;
}

std::optional<grad_stats> stats_gatherer::total(std::int64_t version) const {
  auto it = by_version_.find(version);
  if (it == by_version_.end() || it->second.empty()) return std::nullopt;
  std::optional<grad_stats> sum;
  for (const auto& [shard, st] : it->second) {
    if (!sum)
      sum = st;
    else
      sum->add(st);
  }
  return sum;
}

void stats_gatherer::forget_before(std::int64_t version) {
  by_version_.erase(by_version_.begin(), by_version_.lower_bound(version));
}

}  // namespace coach::ps
