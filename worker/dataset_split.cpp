#include "worker/dataset_split.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <random>
#include <system_error>

namespace coach::worker::detail {
namespace {

/// Uniform integer in [0, bound), the same on every platform (std distributions are not).
std::uint64_t uniform_below(std::mt19937_64& rng, std::uint64_t bound) {
  // Reject the low values that would make `r % bound` favour small results.
  const std::uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const std::uint64_t r = rng();
    if (r >= threshold) return r % bound;
  }
}

/// Sets t.offset and t.scale to the mean and the population standard deviation (std 0 counts
/// as 1) of each feature of `train`.
void standardize_from(const dataset& train, std::size_t features, feature_transform& t) {
  // Two passes in double: the mean, then the squared distances to it (population variance).
  std::vector<double> sum(features, 0.0);
  for (std::size_t r = 0; r < train.rows; ++r) {
    const float* row = train.x.data() + r * features;
    for (std::size_t c = 0; c < features; ++c) sum[c] += double(row[c]);
  }
  const double n = double(std::max<std::size_t>(train.rows, 1));
  for (std::size_t c = 0; c < features; ++c) sum[c] /= n;
  std::vector<double> sq(features, 0.0);
  for (std::size_t r = 0; r < train.rows; ++r) {
    const float* row = train.x.data() + r * features;
    for (std::size_t c = 0; c < features; ++c) {
      const double d = double(row[c]) - sum[c];
      sq[c] += d * d;
    }
  }
  for (std::size_t c = 0; c < features; ++c) {
    t.offset[c] = float(sum[c]);
    const float sd = float(std::sqrt(sq[c] / n));
    t.scale[c] = sd > 0.0f && std::isfinite(sd) ? sd : 1.0f;
  }
}

}  // namespace

std::string printable(std::string_view token) {
  std::string s;
  for (char c : token.substr(0, 40)) {
    s.push_back(static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? '?' : c);
  }
  if (token.size() > 40) s += "...";
  return s;
}

result<void> check_data_directory(const std::string& path, std::string_view expects) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (st.type() == std::filesystem::file_type::not_found)
    return fail(errc::not_found, "{}: data set directory not found", path);
  if (st.type() != std::filesystem::file_type::directory)
    return fail(errc::invalid_argument, "{}: is not a directory ({})", path, expects);
  return {};
}

result<void> check_test_fraction(const dataset_config& cfg) {
  if (!(cfg.test_fraction > 0.0 && cfg.test_fraction < 1.0)) {
    return fail(errc::invalid_argument, "{}: test_fraction {} must be in (0, 1)", cfg.path,
                cfg.test_fraction);
  }
  return {};
}

result<split_plan> plan_split(const std::string& what, std::size_t rows, const dataset_config& cfg,
                              std::uint64_t seed) {
  if (rows > std::numeric_limits<std::uint32_t>::max()) {
    return fail(errc::resource_exhausted, "{}: {} rows are more than the {} a data set may hold",
                what, rows, std::numeric_limits<std::uint32_t>::max());
  }
  split_plan p;
  p.n_test = std::size_t(std::llround(cfg.test_fraction * double(rows)));
  if (p.n_test == 0 || p.n_test >= rows) {
    return fail(errc::invalid_argument, "{}: test_fraction {} of {} rows leaves the {} set empty",
                what, cfg.test_fraction, rows, p.n_test == 0 ? "test" : "training");
  }
  p.n_train = rows - p.n_test;
  p.keep_train = cfg.train_limit == 0 ? p.n_train : std::min(cfg.train_limit, p.n_train);
  p.keep_test = cfg.test_limit == 0 ? p.n_test : std::min(cfg.test_limit, p.n_test);
  // Fisher-Yates, written out so the split is the same on every platform for a seed.
  std::vector<std::uint32_t> order(rows);
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = std::uint32_t(i);
  std::mt19937_64 rng(seed);
  for (std::size_t i = order.size() - 1; i > 0; --i) {
    std::swap(order[i], order[std::size_t(uniform_below(rng, i + 1))]);
  }
  p.slot.resize(rows);
  for (std::size_t i = 0; i < rows; ++i) p.slot[order[i]] = std::uint32_t(i);
  return p;
}

dataset sized_set(std::size_t rows, std::size_t features) {
  dataset d;
  d.rows = rows;
  d.features = features;
  d.x.resize(rows * features);
  d.y.resize(rows);
  return d;
}

std::pair<dataset*, std::size_t> target_of(const split_plan& plan, std::size_t r,
                                           dataset_pair& out) noexcept {
  const std::size_t pos = plan.slot[r];
  if (pos < plan.n_train) {
    if (pos < plan.keep_train) return {&out.train, pos};
    return {nullptr, 0};
  }
  const std::size_t t = pos - plan.n_train;
  if (t < plan.keep_test) return {&out.test, t};
  return {nullptr, 0};
}

feature_transform make_transform(normalization kind, std::size_t features, float largest,
                                 const dataset& train) {
  feature_transform t;
  t.kind = kind;
  t.offset.assign(features, 0.0f);
  t.scale.assign(features, 1.0f);
  switch (kind) {
    case normalization::none:
      break;
    case normalization::max:
      t.scale.assign(features, largest > 0.0f ? largest : 1.0f);
      break;
    case normalization::standardize:
      standardize_from(train, features, t);
      break;
  }
  return t;
}

void apply_in_place(const feature_transform& t, std::span<float> x) noexcept {
  if (t.kind == normalization::none || t.offset.empty()) return;
  const std::size_t features = t.offset.size();
  for (std::size_t r = 0; r + features <= x.size(); r += features) {
    float* row = x.data() + r;
    for (std::size_t c = 0; c < features; ++c) row[c] = (row[c] - t.offset[c]) / t.scale[c];
  }
}

void normalize_pair(dataset_pair& out, normalization kind, float largest) {
  out.transform = make_transform(kind, out.train.features, largest, out.train);
  apply_in_place(out.transform, out.train.x);
  apply_in_place(out.transform, out.test.x);
}

std::string implausible_classes_doubt(std::int64_t classes, std::size_t distinct,
                                      std::size_t rows) {
  if (classes > implausible_classes) {
    return coach::format("gives {} classes (more than {})", classes, implausible_classes);
  }
  if (rows >= implausible_label_min_rows && distinct * 2 > rows) {
    return coach::format("gives {} distinct values in {} rows (more than half)", distinct, rows);
  }
  return {};
}

}  // namespace coach::worker::detail
