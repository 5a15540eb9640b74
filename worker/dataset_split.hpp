#pragma once
// worker::detail: what the data set loaders (worker/dataset.hpp) share once the rows are read:
// the seeded train/test split of a file's rows, the normalization of the features, the doubt
// about a label column, and the quoting of file text in messages. Private to the loader sources
// (worker/dataset*.cpp, worker/*_reader.cpp).

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.hpp"
#include "worker/dataset.hpp"

namespace coach::worker::detail {

/// A token quoted for an error message: printable, at most 40 characters.
std::string printable(std::string_view token);

/// Checks that `path` is a directory: not_found ("data set directory not found") or
/// invalid_argument ("is not a directory (<expects>)"), each naming the path.
result<void> check_data_directory(const std::string& path, std::string_view expects);

/// Checks cfg.test_fraction: invalid_argument, naming cfg.path, unless it lies in (0, 1).
result<void> check_test_fraction(const dataset_config& cfg);

/// Where each row of a file goes when the file is shuffled with the seed and split by
/// test_fraction: the first n_train rows of the shuffled order train, the rest test, and of each
/// the first keep_* rows are kept (the limits).
struct split_plan {
  std::size_t n_train = 0;
  std::size_t n_test = 0;
  std::size_t keep_train = 0;
  std::size_t keep_test = 0;
  std::vector<std::uint32_t> slot;  ///< file row -> its position in the shuffled order
};

/// The plan for `rows` rows of `what`: a Fisher-Yates shuffle over mt19937_64(seed), written
/// out so that the split is the same on every platform for a seed. Errors: a split that leaves
/// a set empty, more rows than 2^32 - 1.
result<split_plan> plan_split(const std::string& what, std::size_t rows, const dataset_config& cfg,
                              std::uint64_t seed);

/// A set sized for the rows a plan keeps.
dataset sized_set(std::size_t rows, std::size_t features);

/// Where file row `r` goes under `plan`: a row of out.train or out.test, or nowhere (nullptr,
/// beyond a limit).
std::pair<dataset*, std::size_t> target_of(const split_plan& plan, std::size_t r,
                                           dataset_pair& out) noexcept;

/// The map of `kind` for data whose largest raw value is `largest`, with the statistics of
/// `train` (raw) for standardize.
feature_transform make_transform(normalization kind, std::size_t features, float largest,
                                 const dataset& train);

/// Applies `t` to whole rows of x, unchecked (apply_transform checks the sizes first).
void apply_in_place(const feature_transform& t, std::span<float> x) noexcept;

/// Sets out.transform from the raw features of both sets and applies it to them.
void normalize_pair(dataset_pair& out, normalization kind, float largest);

/// The doubt about a label column that yields too many classes, or "" when it is plausible
/// (implausible_classes, implausible_label_min_rows).
std::string implausible_classes_doubt(std::int64_t classes, std::size_t distinct, std::size_t rows);

}  // namespace coach::worker::detail
