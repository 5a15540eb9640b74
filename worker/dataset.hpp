#pragma once
// worker::dataset: labelled samples held in memory, and the loaders of the four on-disk formats a
// job spec can name (`dataset:` section):
//
//   idx  MNIST's IDX files (Fashion-MNIST, MNIST): `path` is a directory holding
//        train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and
//        t10k-labels-idx1-ubyte, each plain or gzipped (NAME.gz); the plain file wins when both
//        exist. Pixels are bytes; normalize max (the default) divides them by 255.
//   csv  one sample per line, plain or gzipped; blank lines are skipped, a UTF-8 byte-order mark
//        is ignored. Cells are separated by `delimiter` (one character, default ','); blanks
//        around a cell are dropped; a cell in double quotes may hold the delimiter, and "" inside
//        it stands for one quote. With `header` the first row holds the column names (without
//        it, a first row that is not numbers is an error that suggests header: true). The label
//        is in `label_column` (0-based, negative from the end, default -1 = last; or a name from
//        the header); every other column is a feature and must be a number.
//        Labels: when every label is a number they must be integers in [0, max_label] (1.0 is
//        accepted as 1), used as they are, and class_names stays empty. When one of them is not
//        a number, the column holds class names: the distinct cells, sorted bytewise
//        (std::string's <), are classes 0, 1, ... and class_names lists them; a cell that is an
//        integer is named by its decimal text ("01" and "1.0" are "1"). Sorting makes the
//        indices the same for every seed, split and file that holds the same names.
//        The file is read twice, streaming: once to count the rows and check the columns, once
//        to parse each row straight into its place in the training or the test set (the rows
//        are shuffled with the job's seed and split by `test_fraction`).
//   npy  NumPy .npy arrays (format versions 1.0, 2.0, 3.0; plain, not compressed): `path` is a
//        directory holding x_train.npy and y_train.npy, and optionally x_test.npy and
//        y_test.npy (both or neither; without them the training rows are shuffled with the seed
//        and split by `test_fraction`, as csv). x: C order, shape (rows, d1, ...), each row
//        flattened to d1 * ... features; dtype |u1, |i1, <u2, <i2, <u4, <i4, <u8, <i8, <f4 or <f8,
//        converted to float (non-finite values are an error). (rows, h, w) gives samples of
//        shape 1 x h x w and (rows, c, h, w) of c x h x w (NCHW, as PyTorch); others are flat.
//        y: shape (rows,) or (rows, 1), an integer dtype, or a float one holding whole numbers,
//        in [0, max_label].
//   ctr  click-through-rate rows in the Criteo layout (worker/ctr_data.hpp: label, `n_dense`
//        integer columns, `n_fields` hex categorical columns; tab-separated, plain or gzipped),
//        read by load_ctr: x holds the dense features (log(1 + x) already, so normalize
//        defaults to none in a spec), y the 0/1 labels (classes 2), and `categorical` the
//        categorical values (`fields` per row, ctr_missing where a cell is empty; with
//        min_count, ctr_rare for values seen fewer times in their field's training rows), which a
//        model's embedding tables look up (worker/sparse_batch.hpp). The test set is the LAST
//        test_fraction of the rows, in file order, the training set the rows before them: the
//        generator (worker/ctr_generator.hpp) holds out its last rows, and Criteo's test day is
//        its last. The seed plays no part (the chunk dispenser shuffles the training rows).
//        Memory: load_ctr's vectors become the training set's (moved, then cut to the
//        training rows); only the test rows are copied out first.
//
// Features are then normalized (`normalize`, the same for every format): none keeps them; max
// (the default) divides them by the largest feature value read (idx: by 255; csv: of the whole
// file; npy: of the rows read: all of x_train when it is split, else the kept rows of both
// files), or by 1 when that is <= 0; standardize maps each feature to (x - mean) / std, with the
// mean and the population standard deviation of the training rows that are kept (after
// train_limit), a std of 0 counting as 1. The pair keeps the map it applied (`transform`), so that
// new samples can be mapped the same way (apply_transform).
//
// Memory: a loader holds the kept samples once, in their final vectors, plus O(rows) indices
// (8 bytes a row while the split is planned, 4 while rows are placed) and a 1 MiB read block:
// nothing is parsed into a table first and copied into the sets afterwards.
//
// Every failure is a coach::error whose one-line message names the file and what is wrong with it
// (missing, truncated, wrong magic, counts that disagree, corrupt gzip, ragged or non-numeric CSV,
// an unsupported .npy dtype or layout). Doubts that are not errors (a label column that looks like
// a feature) are returned as `warnings` for the caller to print.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"

namespace coach::worker {

/// Labelled samples: `rows` samples of `features` floats each, and one label per sample; for
/// ctr data, also `fields` categorical values per sample.
struct dataset {
  std::size_t rows = 0;
  std::size_t features = 0;
  int classes = 0;  ///< labels lie in [0, classes)
  /// Shape of one sample as an image, {C, H, W}: IDX images 1 x rows x cols, npy arrays of 3 or 4
  /// dimensions (see above); {0, 0, 0} for flat data (the model treats it as 1 x 1 x features).
  std::array<int, 3> shape{0, 0, 0};
  std::vector<float> x;  ///< rows x features, row-major, normalized (dataset_pair::transform)
  std::vector<std::int32_t> y;  ///< rows labels
  /// csv labels that are names: class i is class_names[i] (sorted bytewise, classes entries).
  /// Empty when the labels are integers (every idx and npy set).
  std::vector<std::string> class_names;
  /// ctr: categorical values per sample (the data set's n_fields); 0 for the other formats.
  std::size_t fields = 0;
  /// ctr: rows x fields, row-major; ctr_missing where a cell is empty. Empty for other formats.
  std::vector<std::uint32_t> categorical;
};

/// How raw feature values are mapped before training (`dataset.normalize`).
enum class normalization {
  none,         ///< kept as they are
  max,          ///< divided by the largest value read (idx: by 255); by 1 when that is <= 0
  standardize,  ///< per feature, (x - mean) / std of the kept training rows; std 0 counts as 1
};

/// The map a loader applied to every feature: x' = (x - offset[c]) / scale[c] for feature c,
/// computed in float, so apply_transform gives new samples the exact values the data set has.
/// none: offset 0, scale 1; max: offset 0, scale the largest value (idx: 255); standardize: the
/// training mean and standard deviation.
struct feature_transform {
  normalization kind = normalization::none;
  std::vector<float> offset;  ///< one per feature
  std::vector<float> scale;   ///< one per feature, each > 0
  friend bool operator==(const feature_transform&, const feature_transform&) = default;
};

/// Maps `x`, rows of t.offset.size() raw features each (row-major), in place as the loader mapped
/// its data set. Errors: invalid_argument when x.size() is not a multiple of the features, or
/// when offset and scale differ in size.
result<void> apply_transform(const feature_transform& t, std::span<float> x);

/// The training and the test set of a job. Both have the same `features`, `classes` and
/// `class_names`.
struct dataset_pair {
  dataset train;
  dataset test;
  feature_transform transform;        ///< applied to the features of both sets
  std::vector<std::string> warnings;  ///< one line each, for the caller to print; not errors
};

/// On-disk format of a data set.
enum class dataset_format { idx, csv, npy, ctr };

/// A csv column: by index, or by its name in the header.
struct column_ref {
  std::int64_t index = -1;  ///< 0-based; negative counts from the end (-1 = the last column)
  std::string name;         ///< when not empty: the header column of this name (index ignored)
  friend bool operator==(const column_ref&, const column_ref&) = default;
};

/// The `dataset:` section of a job spec.
struct dataset_config {
  dataset_format format = dataset_format::idx;
  std::string path;  ///< idx, npy: the directory of the files; csv, ctr: the file
  /// csv, npy without test files: rows held out for test, in (0, 1); ctr: the last rows.
  double test_fraction = 0.2;
  std::size_t train_limit = 0;  ///< keep only the first N training samples (0 = all)
  std::size_t test_limit = 0;   ///< keep only the first N test samples (0 = all)
  /// Every format. A spec's default is max, but none for ctr (whose features are log(1 + x)
  /// already); set here, the field means what it says for every format.
  normalization normalize = normalization::max;
  bool header = false;        ///< csv only: the first row holds column names
  column_ref label_column;    ///< csv only: the column of the label; default the last
  char delimiter = ',';       ///< csv only: the cell separator (parse_delimiter)
  std::size_t n_dense = 13;   ///< ctr only: integer columns after the label (Criteo: 13)
  std::size_t n_fields = 26;  ///< ctr only: categorical columns after them (Criteo: 26)
  /// ctr only: a categorical value seen fewer than this many times in its field over the
  /// training rows becomes the field's rare value (ctr_rare), in both sets: rows of ids too
  /// rare to learn from share one row instead of each fitting its few labels (frequency
  /// admission). 0 or 1: off.
  std::size_t min_count = 0;
};

/// Largest label a loader accepts; keeps a corrupt label from sizing a huge output layer.
inline constexpr std::int32_t max_label = 65535;

/// A label column gives a warning when it yields more classes than this (or more distinct values
/// than half the rows, from implausible_label_min_rows rows on, or numbers written as floats).
inline constexpr int implausible_classes = 1000;
inline constexpr std::size_t implausible_label_min_rows = 20;

/// Loads one pair of IDX files: images (magic 0x00000803, dims n, rows, cols) and labels (magic
/// 0x00000801, dim n), each plain or gzipped. Returns n samples of rows*cols features scaled by
/// 1/255, with classes = largest label + 1.
/// Errors: not_found (missing file), io_error (unreadable, corrupt gzip), parse_error (wrong magic,
/// file shorter than its header declares), invalid_argument (image and label counts differ).
result<dataset> load_idx(const std::string& images_path, const std::string& labels_path);

/// Loads an IDX image file alone (plain or gzipped), pixels scaled by 1/255, every label 0:
/// the images `coach predict` classifies. Errors as load_idx.
result<dataset> load_idx_images_only(const std::string& images_path);

/// Loads the training and test sets described by `cfg`. `seed` drives the csv and npy train/test
/// split (a shuffle that gives the same split on every platform for the same seed). Limits apply
/// after the split. Both sets have at least one sample, and classes >= 2.
/// idx, npy with test files: classes comes from the training labels; a test label outside it is
/// an error. csv, npy split: classes = largest label of the whole file + 1 (or the number of
/// class names). ctr: classes 2; the split is by file order (the last rows test), not seeded.
/// Errors: those named in the comment at the top, each with the file (and line, column, row or
/// element) at fault.
result<dataset_pair> load_dataset(const dataset_config& cfg, std::uint64_t seed);

/// "idx", "csv", "npy" or "ctr".
std::string_view to_string(dataset_format format) noexcept;

/// Parses "idx" | "csv" | "npy" | "ctr".
result<dataset_format> parse_dataset_format(std::string_view text);

/// "none", "max" or "standardize".
std::string_view to_string(normalization kind) noexcept;

/// Parses "none" | "max" | "standardize".
result<normalization> parse_normalization(std::string_view text);

/// Parses a csv delimiter: one character, or the words "tab" and "space", or backslash-t (the two
/// characters YAML's single-quoted '\t' gives; a double-quoted "\t" is the tab itself). Refused
/// (invalid_argument, the message says why): letters, digits, '.', '+', '-', quotes and control
/// characters other than tab, which would make cells ambiguous.
result<char> parse_delimiter(std::string_view text);

}  // namespace coach::worker
