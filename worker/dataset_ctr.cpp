// worker/dataset_ctr.cpp: the ctr format of worker/dataset.hpp.
#include "worker/dataset_ctr.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <utility>

#include "worker/ctr_data.hpp"
#include "worker/dataset_split.hpp"

namespace coach::worker::detail {
namespace {

/// Rows [first, first + n) of `all` (row-major, `width` per row) as a vector of their own.
template <class T>
std::vector<T> copy_rows(const std::vector<T>& all, std::size_t width, std::size_t first,
                         std::size_t n) {
  const auto begin = all.begin() + std::ptrdiff_t(first * width);
  return std::vector<T>(begin, begin + std::ptrdiff_t(n * width));
}

std::vector<std::int32_t> labels_of(const std::vector<float>& labels, std::size_t first,
                                    std::size_t n) {
  std::vector<std::int32_t> y(n);
  for (std::size_t i = 0; i < n; ++i) y[i] = labels[first + i] != 0.0f ? 1 : 0;
  return y;
}

/// Frequency admission (dataset_config::min_count): in each field, the values seen fewer than
/// `min_count` times in the training rows become ctr_rare, in both sets. Counted per field
/// over the training rows only, so the test set tells the model nothing.
void admit_frequent(dataset& train, dataset& test, std::size_t min_count) {
  const std::size_t f = train.fields;
  for (std::size_t field = 0; field < f; ++field) {
    std::unordered_map<std::uint32_t, std::uint32_t> count;
    for (std::size_t r = 0; r < train.rows; ++r) ++count[train.categorical[r * f + field]];
    const auto admit = [&](std::vector<std::uint32_t>& cat, std::size_t rows) {
      for (std::size_t r = 0; r < rows; ++r) {
        auto& v = cat[r * f + field];
        if (v == ctr_missing) continue;
        const auto it = count.find(v);
        if (it == count.end() || it->second < min_count) v = ctr_rare;
      }
    };
    admit(train.categorical, train.rows);
    admit(test.categorical, test.rows);
  }
}

}  // namespace

result<dataset_pair> load_ctr_split(const dataset_config& cfg) {
  if (auto ok = check_test_fraction(cfg); !ok) return std::unexpected(ok.error());
  ctr_options opt;
  opt.path = cfg.path;
  opt.n_dense = cfg.n_dense;
  opt.n_fields = cfg.n_fields;
  auto set = load_ctr(opt);
  if (!set) return std::unexpected(std::move(set.error()));
  const std::size_t rows = set->rows;
  if (rows > std::numeric_limits<std::uint32_t>::max())
    return fail(errc::resource_exhausted, "{}: {} rows are more than the {} a data set may hold",
                cfg.path, rows, std::numeric_limits<std::uint32_t>::max());
  const std::size_t n_test = std::size_t(std::llround(cfg.test_fraction * double(rows)));
  if (n_test == 0 || n_test >= rows)
    return fail(errc::invalid_argument, "{}: test_fraction {} of {} rows leaves the {} set empty",
                cfg.path, cfg.test_fraction, rows, n_test == 0 ? "test" : "training");
  const std::size_t n_train = rows - n_test;
  const std::size_t keep_train =
      cfg.train_limit == 0 ? n_train : std::min(cfg.train_limit, n_train);
  const std::size_t keep_test = cfg.test_limit == 0 ? n_test : std::min(cfg.test_limit, n_test);
  const std::size_t d = set->n_dense, f = set->n_fields;

  dataset_pair out;
  // The test rows are copied out first; then the training set takes load_ctr's vectors and is
  // cut to its rows (a cut keeps the storage: no second copy of the training rows is made).
  dataset& test = out.test;
  test.rows = keep_test;
  test.features = d;
  test.classes = 2;
  test.fields = f;
  test.x = copy_rows(set->dense, d, n_train, keep_test);
  test.categorical = copy_rows(set->categorical, f, n_train, keep_test);
  test.y = labels_of(set->labels, n_train, keep_test);

  dataset& train = out.train;
  train.rows = keep_train;
  train.features = d;
  train.classes = 2;
  train.fields = f;
  train.y = labels_of(set->labels, 0, keep_train);
  set->labels = {};
  train.x = std::move(set->dense);
  train.x.resize(keep_train * d);
  train.categorical = std::move(set->categorical);
  train.categorical.resize(keep_train * f);

  if (cfg.min_count > 1) admit_frequent(train, test, cfg.min_count);

  float largest = 0.0f;
  for (float v : train.x) largest = std::max(largest, v);
  for (float v : test.x) largest = std::max(largest, v);
  normalize_pair(out, cfg.normalize, largest);
  return out;
}

}  // namespace coach::worker::detail
