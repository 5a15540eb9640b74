#pragma once
// worker::ctr_data: click-through-rate (CTR) data in the Criteo layout, the input of the sparse
// models of issue 43 (DLRM and its kind), read into memory as a ctr_set (docs/sparse.md).
//
// The layout (Criteo's display-advertising sets): one row a line, tab-separated,
//   label <TAB> I1 .. I<n_dense> <TAB> C1 .. C<n_fields>
// - label: 0 or 1 (clicked);
// - I: integer counts; a cell may be empty (missing) or negative;
// - C: categorical values, already hashed by the publisher to up to 8 hex digits (Criteo writes
//   8, lower case); a cell may be empty (missing).
// The file may be gzipped (told apart by zlib, as every loader here).
//
// The transforms, as DLRM's data loader does them:
// - a dense value x becomes log(1 + x) for x > 0, and 0 when x <= 0 or missing
//   (ctr_dense_transform), so counts spanning orders of magnitude become a few units;
// - a categorical value is kept as the 32-bit number its hex digits spell; a missing one is
//   ctr_missing (0xFFFFFFFF), which a file may therefore not hold (an error; the generator's
//   hash never produces it). The sparse tables hash or map these numbers to rows.
//
// Every error names the file and the line (and the column: I3, C12): a wrong column count, a
// label other than 0 or 1, an integer that does not parse, a categorical value that is not hex.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace coach::worker {

/// The categorical value of a missing cell.
inline constexpr std::uint32_t ctr_missing = 0xFFFFFFFFu;
/// The categorical value that stands for every value too rare to keep (dataset_config::
/// min_count), one per field. A file's own fffffffe (one value in 2^32) shares its row.
inline constexpr std::uint32_t ctr_rare = 0xFFFFFFFEu;

/// The dense feature of integer `v`: log(1 + v) for v > 0, else 0 (as DLRM). A missing cell
/// is 0 too. Rounded once to float from the double log1p, so any two programs agree bitwise.
inline float ctr_dense_transform(std::int64_t v) noexcept {
  return v > 0 ? static_cast<float>(std::log1p(static_cast<double>(v))) : 0.0f;
}

/// What to read.
struct ctr_options {
  std::string path;           ///< the TSV file, plain or gzipped
  std::size_t n_dense = 13;   ///< integer columns after the label (Criteo: 13)
  std::size_t n_fields = 26;  ///< categorical columns after them (Criteo: 26)
  std::size_t max_rows = 0;   ///< read at most this many rows; 0: all
};

/// A CTR data set in memory, row-major.
struct ctr_set {
  std::size_t rows = 0;
  std::size_t n_dense = 0;
  std::size_t n_fields = 0;
  std::vector<float> labels;               ///< rows: 0 or 1
  std::vector<float> dense;                ///< rows x n_dense, ctr_dense_transform'ed
  std::vector<std::uint32_t> categorical;  ///< rows x n_fields; ctr_missing when missing

  const float* dense_row(std::size_t r) const noexcept { return dense.data() + r * n_dense; }
  const std::uint32_t* categorical_row(std::size_t r) const noexcept {
    return categorical.data() + r * n_fields;
  }
};

/// Reads the file of `opt` (one pass, streaming; blank lines are skipped). Errors: not_found /
/// io_error for the file (and corrupt gzip data), invalid_argument for n_dense + n_fields == 0,
/// parse_error naming file, line and column for a malformed row, parse_error for a file with
/// no rows.
result<ctr_set> load_ctr(const ctr_options& opt);

}  // namespace coach::worker
