#pragma once
// worker::detail: the csv format of worker/dataset.hpp. Private to the loader sources
// (worker/dataset.cpp).

#include <cstdint>

#include "common/error.hpp"
#include "worker/dataset.hpp"

namespace coach::worker::detail {

/// The csv data set of the file cfg.path, read twice (streaming): once to count the rows and
/// check the columns, once to parse each row straight into its place in the training or the
/// test set of the split that `seed` gives.
result<dataset_pair> load_csv(const dataset_config& cfg, std::uint64_t seed);

}  // namespace coach::worker::detail
