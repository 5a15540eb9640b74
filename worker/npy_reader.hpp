#pragma once
// worker::detail: the npy format of worker/dataset.hpp: a directory of .npy arrays, read in
// blocks through worker/npy.hpp's header parser and element conversions. Private to the loader
// sources (worker/dataset.cpp).

#include <cstdint>

#include "common/error.hpp"
#include "worker/dataset.hpp"

namespace coach::worker::detail {

/// The npy data set of the directory cfg.path: x_train.npy and y_train.npy, and x_test.npy and
/// y_test.npy when both are there (without them the training rows are split as `seed` gives).
result<dataset_pair> load_npy_dir(const dataset_config& cfg, std::uint64_t seed);

}  // namespace coach::worker::detail
