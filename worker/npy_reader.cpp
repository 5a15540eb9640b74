#include "worker/npy_reader.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <limits>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "worker/dataset_split.hpp"
#include "worker/gz_reader.hpp"
#include "worker/npy.hpp"

namespace coach::worker::detail {
namespace {

namespace fs = std::filesystem;

// --- one file -------------------------------------------------------------------------------

/// An opened .npy file, positioned at its first element.
struct npy_file {
  gz_reader in;
  npy_header h;
  std::uint64_t rows = 0;      ///< shape[0]
  std::size_t row_values = 1;  ///< elements per row: the product of the other dimensions

  const std::string& path() const noexcept { return in.path(); }
  std::size_t row_bytes() const noexcept { return row_values * size_of(h.dtype); }
};

/// Reads the preamble of an opened .npy file: magic, version and the header length.
result<npy_preamble> read_npy_preamble(gz_reader& in, const std::string& path) {
  std::array<char, npy_preamble_v2> pre{};
  auto got = in.read(pre.data(), npy_preamble_v1);
  if (!got) return std::unexpected(std::move(got.error()));
  auto p = parse_npy_preamble(std::string_view(pre.data(), *got), path);
  if (!p) return std::unexpected(std::move(p.error()));
  std::size_t have = *got;
  if (p->preamble_bytes > have) {
    auto more = in.read(pre.data() + have, p->preamble_bytes - have);
    if (!more) return std::unexpected(std::move(more.error()));
    have += *more;
    if (have < p->preamble_bytes) {
      return fail(errc::parse_error, "{}: truncated header: expected at least {} bytes, got {}",
                  path, p->preamble_bytes, have);
    }
    p = parse_npy_preamble(std::string_view(pre.data(), have), path);
    if (!p) return std::unexpected(std::move(p.error()));
  }
  return p;
}

/// Reads and parses the header text that follows the preamble `p`.
result<npy_header> read_npy_header(gz_reader& in, const std::string& path, const npy_preamble& p) {
  std::string text(p.header_bytes, '\0');
  auto text_got = in.read(text.data(), text.size());
  if (!text_got) return std::unexpected(std::move(text_got.error()));
  if (*text_got < text.size()) {
    return fail(errc::parse_error, "{}: truncated header: expected {} bytes, got {}", path,
                p.preamble_bytes + text.size(), p.preamble_bytes + *text_got);
  }
  return parse_npy_header(text, path, p.preamble_bytes + text.size());
}

result<npy_file> open_npy(const std::string& path) {
  auto in = gz_reader::open(path);
  if (!in) return std::unexpected(std::move(in.error()));
  if (!in->direct()) {
    return fail(errc::invalid_argument,
                "{}: is gzip-compressed; format npy reads plain .npy files (gunzip it)", path);
  }
  auto p = read_npy_preamble(*in, path);
  if (!p) return std::unexpected(std::move(p.error()));
  auto h = read_npy_header(*in, path, *p);
  if (!h) return std::unexpected(std::move(h.error()));
  const std::uint64_t data_bytes = h->elements * size_of(h->dtype);
  if (const auto size = in->plain_size()) {
    const std::uint64_t after = *size > h->data_offset ? *size - h->data_offset : 0;
    if (after < data_bytes) {
      return fail(errc::parse_error,
                  "{}: truncated data: shape {} of {} needs {} bytes after the {}-byte header, "
                  "got {}",
                  path, shape_text(h->shape), to_string(h->dtype), data_bytes, h->data_offset,
                  after);
    }
  }
  npy_file f{std::move(*in), std::move(*h)};
  if (!f.h.shape.empty()) {
    f.rows = f.h.shape[0];
    for (std::size_t i = 1; i < f.h.shape.size(); ++i) f.row_values *= f.h.shape[i];
  }
  return f;
}

/// Checks that `f` is an x array: C order, (rows, d1, ...) with no empty dimension after rows.
result<void> check_x(const npy_file& f) {
  if (f.h.shape.size() < 2) {
    return fail(errc::invalid_argument,
                "{}: shape {} has {} dimension(s); x needs (rows, features) or (rows, d1, d2, ...)",
                f.path(), shape_text(f.h.shape), f.h.shape.size());
  }
  if (f.h.fortran_order) {
    return fail(errc::invalid_argument,
                "{}: fortran_order is True; only C-order arrays are read (save "
                "numpy.ascontiguousarray(x))",
                f.path());
  }
  if (f.row_values == 0) {
    return fail(errc::invalid_argument, "{}: shape {} gives rows of 0 features", f.path(),
                shape_text(f.h.shape));
  }
  if (f.row_values > std::size_t(std::numeric_limits<std::int32_t>::max())) {
    return fail(errc::invalid_argument, "{}: shape {} gives rows of {} features, too many",
                f.path(), shape_text(f.h.shape), f.row_values);
  }
  return {};
}

/// Checks that `y` is a label array of `x`: (rows,) or (rows, 1), as many rows as x.
result<void> check_y(const npy_file& y, const npy_file& x) {
  const auto& s = y.h.shape;
  if (!(s.size() == 1 || (s.size() == 2 && s[1] == 1))) {
    return fail(errc::invalid_argument,
                "{}: shape {} is not (rows,); y holds one class index per row (for one-hot "
                "labels save y.argmax(axis=1))",
                y.path(), shape_text(s));
  }
  if (y.rows != x.rows) {
    return fail(errc::invalid_argument, "{} holds {} rows but {} holds {} labels", x.path(), x.rows,
                y.path(), y.rows);
  }
  return {};
}

/// An x/y pair of files: both opened and checked (check_x, check_y).
struct npy_xy {
  npy_file x;
  npy_file y;
};

result<npy_xy> open_npy_pair(const std::string& x_path, const std::string& y_path) {
  auto x = open_npy(x_path);
  if (!x) return std::unexpected(std::move(x.error()));
  if (auto ok = check_x(*x); !ok) return std::unexpected(std::move(ok.error()));
  auto y = open_npy(y_path);
  if (!y) return std::unexpected(std::move(y.error()));
  if (auto ok = check_y(*y, *x); !ok) return std::unexpected(std::move(ok.error()));
  return npy_xy{std::move(*x), std::move(*y)};
}

/// The sample shape of x's rows: {1, h, w} for (rows, h, w), {c, h, w} for (rows, c, h, w).
std::array<int, 3> sample_shape_of(const npy_file& x) {
  const auto& s = x.h.shape;
  const auto fits = [](std::uint64_t d) { return d <= std::uint64_t(1) << 30; };
  if (s.size() == 3 && fits(s[1]) && fits(s[2])) return {1, int(s[1]), int(s[2])};
  if (s.size() == 4 && fits(s[1]) && fits(s[2]) && fits(s[3])) {
    return {int(s[1]), int(s[2]), int(s[3])};
  }
  return {0, 0, 0};
}

// --- elements -------------------------------------------------------------------------------

/// Reads exactly `n` bytes, or fails as truncated.
result<void> read_exact(npy_file& f, void* dst, std::size_t n, std::uint64_t done) {
  auto got = f.in.read(dst, n);
  if (!got) return std::unexpected(std::move(got.error()));
  if (*got < n) {
    return fail(errc::parse_error,
                "{}: truncated data: expected {} bytes after the {}-byte header, got {}", f.path(),
                f.h.elements * size_of(f.h.dtype), f.h.data_offset, done + *got);
  }
  return {};
}

/// Reads the labels of rows [0, count) in blocks, checks each and hands it to sink(row, label).
template <class Sink>
result<void> read_npy_labels(npy_file& y, std::uint64_t count, Sink&& sink) {
  const std::size_t size = size_of(y.h.dtype);
  std::vector<unsigned char> block(std::min<std::uint64_t>(block_bytes, count * size + 1));
  const std::size_t per_block = std::max<std::size_t>(block.size() / size, 1);
  for (std::uint64_t done = 0; done < count;) {
    const std::size_t n = std::size_t(std::min<std::uint64_t>(per_block, count - done));
    if (auto ok = read_exact(y, block.data(), n * size, done * size); !ok) return ok;
    for (std::size_t i = 0; i < n; ++i) {
      const double v = npy_to_double(y.h.dtype, block.data() + i * size);
      if (!(v >= 0 && v <= double(max_label) && v == std::floor(v))) {
        return fail(errc::parse_error, "{}: label {} of row {} must be an integer in [0, {}]",
                    y.path(), v, done + i, max_label);
      }
      sink(done + i, std::int32_t(v));
    }
    done += n;
  }
  return {};
}

/// What read_npy_labels learns about a y file: classes = its largest label + 1, and its number
/// of distinct labels.
struct label_stats {
  std::vector<bool> seen = std::vector<bool>(std::size_t(max_label) + 1, false);
  std::int32_t max_seen = -1;
  std::size_t distinct = 0;

  void add(std::int32_t label) {
    if (!seen[std::size_t(label)]) {
      seen[std::size_t(label)] = true;
      ++distinct;
    }
    max_seen = std::max(max_seen, label);
  }
  int classes() const noexcept { return max_seen + 1; }
};

/// Checks the floats just read from x (non-finite values are refused) and keeps the largest.
result<void> check_values(const npy_file& x, const float* v, std::size_t n,
                          std::uint64_t first_value, float& largest) {
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(v[i])) {
      const std::uint64_t at = first_value + i;
      return fail(errc::parse_error, "{}: row {}, value {}: {} is not a finite float", x.path(),
                  at / x.row_values, at % x.row_values, v[i]);
    }
    largest = std::max(largest, v[i]);
  }
  return {};
}

/// Reads `count` rows of <f4 data straight into out, which holds them one after the other.
result<void> read_f4_in_place(npy_file& x, std::uint64_t count, float* out, float& largest) {
  // In pieces of at most 1 GiB so that a reader error names a sane offset.
  const std::uint64_t total = count * x.row_values;
  for (std::uint64_t done = 0; done < total;) {
    const std::size_t n =
        std::size_t(std::min<std::uint64_t>(total - done, std::uint64_t{1} << 28));
    if (auto ok = read_exact(x, out + done, n * sizeof(float), done * sizeof(float)); !ok) {
      return ok;
    }
    if (auto ok = check_values(x, out + done, n, done, largest); !ok) return ok;
    done += n;
  }
  return {};
}

/// Reads rows [0, count) of x in order into the rows `dst(r)` points at (float* of row_values).
/// `contiguous`: dst(r) == dst(0) + r * row_values, so blocks convert straight into place (and
/// <f4 data is read into place with no conversion at all).
template <class Dst>
result<void> read_npy_rows(npy_file& x, std::uint64_t count, bool contiguous, Dst&& dst,
                           float& largest) {
  const std::size_t row_bytes = x.row_bytes();
  if (count == 0) return {};
  if (contiguous && x.h.dtype == npy_dtype::f4) return read_f4_in_place(x, count, dst(0), largest);
  const std::size_t rows_per_block = std::max<std::size_t>(block_bytes / row_bytes, 1);
  std::vector<unsigned char> block(std::min<std::uint64_t>(rows_per_block, count) * row_bytes);
  for (std::uint64_t done = 0; done < count;) {
    const std::size_t n = std::size_t(std::min<std::uint64_t>(rows_per_block, count - done));
    if (auto ok = read_exact(x, block.data(), n * row_bytes, done * row_bytes); !ok) return ok;
    for (std::size_t i = 0; i < n;) {
      // Rows that lie one after the other in the destination convert in one call.
      std::size_t run = 1;
      float* out = dst(done + i);
      if (contiguous) run = n - i;
      npy_to_float(x.h.dtype, block.data() + i * row_bytes, run * x.row_values, out);
      if (auto ok = check_values(x, out, run * x.row_values, (done + i) * x.row_values, largest);
          !ok) {
        return ok;
      }
      i += run;
    }
    done += n;
  }
  return {};
}

// --- sets -----------------------------------------------------------------------------------

/// The first `limit` rows (0 = all) of an x/y pair, into a fresh set; `labels` gets every label
/// of the whole y file.
result<dataset> read_npy_set(npy_file& x, npy_file& y, std::size_t limit, float& largest,
                             label_stats& labels) {
  const std::uint64_t keep = limit == 0 ? x.rows : std::min<std::uint64_t>(limit, x.rows);
  dataset d = sized_set(std::size_t(keep), x.row_values);
  d.shape = sample_shape_of(x);
  auto ok = read_npy_labels(y, y.rows, [&](std::uint64_t r, std::int32_t label) {
    if (r < keep) d.y[std::size_t(r)] = label;
    labels.add(label);
  });
  if (!ok) return std::unexpected(std::move(ok.error()));
  float* base = d.x.data();
  const std::size_t width = x.row_values;
  auto rows = read_npy_rows(
      x, keep, true, [&](std::uint64_t r) { return base + std::size_t(r) * width; }, largest);
  if (!rows) return std::unexpected(std::move(rows.error()));
  return d;
}

/// `dir`/`name`, or "" when there is no such file.
std::string existing_file(const fs::path& dir, std::string_view name) {
  const fs::path p = dir / name;
  std::error_code ec;
  return fs::exists(p, ec) ? p.string() : std::string();
}

/// The files of the npy directory cfg.path: x_train, y_train, x_test, y_test; the test files
/// both "" when they are not there. Errors: a missing directory or training file, a path that
/// is not a directory, one test file without the other, a bad test_fraction for a split.
result<std::array<std::string, 4>> find_npy_files(const dataset_config& cfg) {
  if (auto dir = check_data_directory(cfg.path,
                                      "format npy expects the directory of x_train.npy, "
                                      "y_train.npy and optionally x_test.npy, y_test.npy");
      !dir)
    return std::unexpected(dir.error());
  const fs::path dir(cfg.path);
  constexpr std::array<std::string_view, 4> names{"x_train.npy", "y_train.npy", "x_test.npy",
                                                  "y_test.npy"};
  std::array<std::string, 4> files;
  for (std::size_t i = 0; i < names.size(); ++i) files[i] = existing_file(dir, names[i]);
  for (std::size_t i = 0; i < 2; ++i) {
    if (files[i].empty()) {
      return fail(errc::not_found, "{}: file not found", (dir / names[i]).string());
    }
  }
  const bool has_test = !files[2].empty() || !files[3].empty();
  if (has_test && (files[2].empty() || files[3].empty())) {
    const std::size_t missing = files[2].empty() ? 2 : 3;
    return fail(errc::not_found,
                "{}: file not found ({} is there: give both test files, or neither to split "
                "the training files by test_fraction)",
                (dir / names[missing]).string(), names[5 - missing]);
  }
  if (!has_test) {
    if (auto ok = check_test_fraction(cfg); !ok) return std::unexpected(std::move(ok.error()));
  }
  return files;
}

/// The sets of a directory with test files: the training pair `train` (opened), the test
/// pair read from files[2] and files[3]. `labels` gets the training labels.
result<void> read_with_test_files(const dataset_config& cfg,
                                  const std::array<std::string, 4>& files, npy_xy& train,
                                  dataset_pair& out, float& largest, label_stats& labels) {
  auto train_set = read_npy_set(train.x, train.y, cfg.train_limit, largest, labels);
  if (!train_set) return std::unexpected(std::move(train_set.error()));
  out.train = std::move(*train_set);
  auto test = open_npy_pair(files[2], files[3]);
  if (!test) return std::unexpected(std::move(test.error()));
  if (test->x.row_values != train.x.row_values) {
    return fail(errc::invalid_argument, "{} has {} features per row ({}) but {} has {} ({})",
                files[2], test->x.row_values, shape_text(test->x.h.shape), files[0],
                train.x.row_values, shape_text(train.x.h.shape));
  }
  if (test->x.rows == 0) return fail(errc::invalid_argument, "{}: holds no samples", files[2]);
  label_stats test_labels;
  auto test_set = read_npy_set(test->x, test->y, cfg.test_limit, largest, test_labels);
  if (!test_set) return std::unexpected(std::move(test_set.error()));
  out.test = std::move(*test_set);
  if (test_labels.classes() > labels.classes()) {
    return fail(errc::invalid_argument,
                "{}: test label {} is outside the training set's classes [0, {}) from {}", files[3],
                test_labels.classes() - 1, labels.classes(), files[1]);
  }
  return {};
}

/// The sets of a directory without test files: the training pair split as `seed` gives.
result<void> read_split(const dataset_config& cfg, const std::string& x_path, npy_xy& train,
                        std::uint64_t seed, dataset_pair& out, float& largest,
                        label_stats& labels) {
  npy_file& x = train.x;
  auto plan = plan_split(x_path, std::size_t(x.rows), cfg, seed);
  if (!plan) return std::unexpected(std::move(plan.error()));
  out.train = sized_set(plan->keep_train, x.row_values);
  out.test = sized_set(plan->keep_test, x.row_values);
  out.train.shape = out.test.shape = sample_shape_of(x);
  auto ok = read_npy_labels(train.y, train.y.rows, [&](std::uint64_t r, std::int32_t label) {
    auto [set, at] = target_of(*plan, std::size_t(r), out);
    if (set != nullptr) set->y[at] = label;
    labels.add(label);
  });
  if (!ok) return std::unexpected(std::move(ok.error()));
  std::vector<float> scratch(x.row_values);  // a row beyond the limits: checked, not kept
  return read_npy_rows(
      x, x.rows, false,
      [&](std::uint64_t r) {
        auto [set, at] = target_of(*plan, std::size_t(r), out);
        return set != nullptr ? set->x.data() + at * x.row_values : scratch.data();
      },
      largest);
}

}  // namespace

result<dataset_pair> load_npy_dir(const dataset_config& cfg, std::uint64_t seed) {
  auto found = find_npy_files(cfg);
  if (!found) return std::unexpected(std::move(found.error()));
  const auto& files = *found;
  const bool has_test = !files[2].empty();
  auto train = open_npy_pair(files[0], files[1]);
  if (!train) return std::unexpected(std::move(train.error()));
  if (train->x.rows == 0) return fail(errc::invalid_argument, "{}: holds no samples", files[0]);

  dataset_pair out;
  float largest = -std::numeric_limits<float>::infinity();
  label_stats labels;
  const std::uint64_t label_rows = train->x.rows;
  auto read = has_test ? read_with_test_files(cfg, files, *train, out, largest, labels)
                       : read_split(cfg, files[0], *train, seed, out, largest, labels);
  if (!read) return std::unexpected(std::move(read.error()));
  const int classes = labels.classes();
  if (classes < 2) {
    return fail(errc::invalid_argument,
                "{}: every label is 0; a classifier needs 2 classes or more", files[1]);
  }
  out.train.classes = out.test.classes = classes;
  if (auto doubt = implausible_classes_doubt(classes, labels.distinct, std::size_t(label_rows));
      !doubt.empty()) {
    out.warnings.push_back(
        coach::format("{}: y {}; y should hold one class index per row", files[1], doubt));
  }
  normalize_pair(out, cfg.normalize, largest);
  return out;
}

}  // namespace coach::worker::detail
