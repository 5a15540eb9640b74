#pragma once
// worker::dataset: labelled samples held in memory, and the loaders of the two on-disk formats a
// job spec can name (`dataset:` section):
//
//   idx  MNIST's IDX files (Fashion-MNIST, MNIST): `path` is a directory holding
//        train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and
//        t10k-labels-idx1-ubyte, each plain or gzipped (NAME.gz); the plain file wins when both
//        exist. Pixels (bytes) are scaled by 1/255.
//   csv  one sample per line: feature values then the label (a non-negative integer) in the last
//        column, comma-separated, no header, plain or gzipped. Blank lines are skipped. Features
//        are divided by the largest feature value of the file (1 when that is 0), so non-negative
//        data lands in [0, 1]. The rows are shuffled with the job's seed and split into train and
//        test by `test_fraction`.
//
// Every failure is a coach::error whose one-line message names the file and what is wrong with it
// (missing, truncated, wrong magic, counts that disagree, corrupt gzip, ragged or non-numeric CSV).

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"

namespace coach::worker {

/// Labelled samples: `rows` samples of `features` floats each, and one label per sample.
struct dataset {
  std::size_t rows = 0;
  std::size_t features = 0;
  int classes = 0;              ///< labels lie in [0, classes)
  std::vector<float> x;         ///< rows x features, row-major, scaled to [0, 1]
  std::vector<std::int32_t> y;  ///< rows labels
};

/// The training and the test set of a job. Both have the same `features` and `classes`.
struct dataset_pair {
  dataset train;
  dataset test;
};

/// On-disk format of a data set.
enum class dataset_format { idx, csv };

/// The `dataset:` section of a job spec.
struct dataset_config {
  dataset_format format = dataset_format::idx;
  std::string path;             ///< idx: the directory of the four files; csv: the file
  double test_fraction = 0.2;   ///< csv only: fraction of the rows held out for test, in (0, 1)
  std::size_t train_limit = 0;  ///< keep only the first N training samples (0 = all)
  std::size_t test_limit = 0;   ///< keep only the first N test samples (0 = all)
};

/// Largest label a loader accepts; keeps a corrupt label from sizing a huge output layer.
inline constexpr std::int32_t max_label = 65535;

/// Loads one pair of IDX files: images (magic 0x00000803, dims n, rows, cols) and labels (magic
/// 0x00000801, dim n), each plain or gzipped. Returns n samples of rows*cols features scaled by
/// 1/255, with classes = largest label + 1.
/// Errors: not_found (missing file), io_error (unreadable, corrupt gzip), parse_error (wrong magic,
/// file shorter than its header declares), invalid_argument (image and label counts differ).
result<dataset> load_idx(const std::string& images_path, const std::string& labels_path);

/// Loads the training and test sets described by `cfg`. `seed` drives the csv train/test split
/// (a shuffle that gives the same split on every platform for the same seed). Limits apply after
/// the split. Both sets have at least one sample, and classes >= 2.
/// idx: classes comes from the training labels; a test label outside it is an error.
/// csv: classes = largest label of the whole file + 1.
result<dataset_pair> load_dataset(const dataset_config& cfg, std::uint64_t seed);

/// "idx" or "csv".
std::string_view to_string(dataset_format format) noexcept;

/// Parses "idx" | "csv".
result<dataset_format> parse_dataset_format(std::string_view text);

}  // namespace coach::worker
