#pragma once
// worker::detail: the idx format of worker/dataset.hpp: MNIST's IDX image and label files, plain
// or gzipped. Private to the loader sources (worker/dataset.cpp).

#include <cstddef>
#include <string>

#include "common/error.hpp"
#include "worker/dataset.hpp"

namespace coach::worker::detail {

/// Loads the first `limit` samples (0 = all) of an IDX image/label pair, pixels divided by
/// `divisor`. `all_classes`, when not null, gets the largest label of the whole label file + 1
/// (the set's `classes` is the same). Errors as load_idx.
result<dataset> load_idx_limited(const std::string& images_path, const std::string& labels_path,
                                 std::size_t limit, int* all_classes, float divisor);

/// The images of an IDX image file alone, pixels divided by 255, every label 0
/// (load_idx_images_only).
result<dataset> idx_images_alone(const std::string& images_path);

/// The idx data set of cfg.path, a directory of the four IDX files (plain or NAME.gz), with the
/// limits and normalization of cfg.
result<dataset_pair> load_idx_dir(const dataset_config& cfg);

}  // namespace coach::worker::detail
