#pragma once
// worker::detail: the ctr format of worker/dataset.hpp (Criteo-layout click data read by
// load_ctr, split by file order). Private to the loader sources (worker/dataset.cpp).

#include "common/error.hpp"
#include "worker/dataset.hpp"

namespace coach::worker::detail {

/// The ctr data set of the file cfg.path: the first rows train, the last cfg.test_fraction of
/// them test (in file order), each cut to its limit; dense features as load_ctr gives them
/// (then cfg.normalize), labels 0/1 (classes 2), categorical values kept per row. Errors:
/// load_ctr's, and a test_fraction that leaves a set empty (naming the file).
result<dataset_pair> load_ctr_split(const dataset_config& cfg);

}  // namespace coach::worker::detail
