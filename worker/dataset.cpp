#include "worker/dataset.hpp"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <new>
#include <random>
#include <string_view>
#include <system_error>
#include <utility>

namespace coach::worker {
namespace detail {
namespace {

namespace fs = std::filesystem;

constexpr std::uint32_t idx_images_magic = 0x00000803;  // unsigned bytes, 3 dimensions
constexpr std::uint32_t idx_labels_magic = 0x00000801;  // unsigned bytes, 1 dimension
constexpr std::size_t block_bytes = std::size_t{1} << 20;

/// A file read through zlib: gzipped or plain, told apart by zlib itself.
class gz_reader {
 public:
  gz_reader() = default;
  gz_reader(const gz_reader&) = delete;
  gz_reader& operator=(const gz_reader&) = delete;
  gz_reader(gz_reader&& other) noexcept
      : file_(std::exchange(other.file_, nullptr)), path_(std::move(other.path_)) {}
  ~gz_reader() {
    if (file_ != nullptr) gzclose_r(file_);
  }

  /// Opens `path`; not_found when it does not exist, io_error when it cannot be opened.
  static result<gz_reader> open(const std::string& path) {
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    if (st.type() == fs::file_type::not_found) {
      return fail(errc::not_found, "{}: file not found", path);
    }
    if (ec) return fail(errc::io_error, "{}: cannot open: {}", path, ec.message());
    if (st.type() == fs::file_type::directory) {
      return fail(errc::io_error, "{}: is a directory, expected a file", path);
    }
    errno = 0;
    gzFile f = gzopen(path.c_str(), "rb");
    if (f == nullptr) {
      const int err = errno;
      return fail(errc::io_error, "{}: cannot open: {}", path,
                  err != 0 ? std::strerror(err) : "out of memory");
    }
    gzbuffer(f, unsigned(block_bytes));
    gz_reader r;
    r.file_ = f;
    r.path_ = path;
    return r;
  }

  /// Reads up to n bytes; fewer only at the end of the data. io_error on corrupt gzip data,
  /// including a gzip stream cut short.
  result<std::size_t> read(void* dst, std::size_t n) {
    auto* out = static_cast<unsigned char*>(dst);
    std::size_t done = 0;
    while (done < n) {
      const unsigned want = unsigned(std::min<std::size_t>(n - done, std::size_t{1} << 30));
      const int got = gzread(file_, out + done, want);
      if (got < 0) return fail(errc::io_error, "{}: corrupt gzip data ({})", path_, zlib_error());
      done += std::size_t(got);
      if (unsigned(got) < want) {
        int code = Z_OK;
        gzerror(file_, &code);
        if (code == Z_BUF_ERROR) {
          return fail(errc::io_error, "{}: corrupt gzip data (the compressed stream is cut short)",
                      path_);
        }
        if (code != Z_OK) {
          return fail(errc::io_error, "{}: corrupt gzip data ({})", path_, zlib_error());
        }
        break;
      }
    }
    return done;
  }

  const std::string& path() const noexcept { return path_; }

 private:
  std::string zlib_error() {
    int code = Z_OK;
    const char* msg = gzerror(file_, &code);
    if (code == Z_ERRNO) return std::strerror(errno);
    return msg != nullptr && *msg != '\0' ? msg : "unknown zlib error";
  }

  gzFile file_ = nullptr;
  std::string path_;
};

std::uint32_t be32(const unsigned char* p) noexcept {
  return (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) |
         std::uint32_t(p[3]);
}

/// "0x00000803".
std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", unsigned(v));
  return buf;
}

/// Reads an IDX header of `1 + dims` big-endian words and checks its magic.
result<std::array<std::uint32_t, 3>> read_idx_header(gz_reader& in, std::uint32_t magic, int dims,
                                                     std::string_view what) {
  std::array<unsigned char, 16> raw{};
  const std::size_t header = 4 * std::size_t(1 + dims);
  auto got = in.read(raw.data(), header);
  if (!got) return std::unexpected(std::move(got.error()));
  if (*got >= 4 && be32(raw.data()) != magic) {
    const std::uint32_t found = be32(raw.data());
    std::string hint;
    if (found == idx_images_magic) hint = " (this is an IDX image file)";
    if (found == idx_labels_magic) hint = " (this is an IDX label file)";
    if ((found >> 8) == 0x1f8b08) hint = " (gzip data inside a gzip file?)";
    return fail(errc::parse_error, "{}: wrong magic {}, expected {} for IDX {}{}", in.path(),
                hex32(found), hex32(magic), what, hint);
  }
  if (*got < header) {
    return fail(errc::parse_error,
                "{}: truncated header: expected {} bytes, got {} (file too short for IDX {})",
                in.path(), header, *got, what);
  }
  std::array<std::uint32_t, 3> d{};
  for (int i = 0; i < dims; ++i) d[std::size_t(i)] = be32(raw.data() + 4 * (1 + i));
  return d;
}

/// Reads `count` bytes of the data an IDX header declares, or fails saying how many were there.
/// `declared` is the whole data size, `already` the bytes read before this call.
result<std::size_t> read_declared(gz_reader& in, void* dst, std::size_t count,
                                  std::uint64_t declared, std::uint64_t already,
                                  std::size_t header) {
  auto got = in.read(dst, count);
  if (!got) return std::unexpected(std::move(got.error()));
  if (*got < count) {
    return fail(errc::parse_error,
                "{}: truncated data: expected {} bytes after the {}-byte header, got {}", in.path(),
                declared, header, already + *got);
  }
  return *got;
}

/// An IDX pair opened and checked: counts agree, labels read in full.
struct idx_pair {
  gz_reader images;
  std::size_t count = 0;
  std::size_t features = 0;
  std::vector<std::int32_t> labels;
  int classes = 0;
};

result<idx_pair> open_idx(const std::string& images_path, const std::string& labels_path) {
  auto images = gz_reader::open(images_path);
  if (!images) return std::unexpected(std::move(images.error()));
  auto ih = read_idx_header(*images, idx_images_magic, 3, "images");
  if (!ih) return std::unexpected(std::move(ih.error()));
  auto labels = gz_reader::open(labels_path);
  if (!labels) return std::unexpected(std::move(labels.error()));
  auto lh = read_idx_header(*labels, idx_labels_magic, 1, "labels");
  if (!lh) return std::unexpected(std::move(lh.error()));

  const auto [n, img_rows, img_cols] = *ih;
  if ((*lh)[0] != n) {
    return fail(errc::invalid_argument, "{} holds {} images but {} holds {} labels", images_path, n,
                labels_path, (*lh)[0]);
  }
  if (img_rows == 0 || img_cols == 0) {
    return fail(errc::parse_error, "{}: images of {} x {} pixels are empty", images_path, img_rows,
                img_cols);
  }

  const std::uint64_t pixels = std::uint64_t(img_rows) * img_cols;
  if (n != 0 && pixels > (std::numeric_limits<std::uint64_t>::max() / sizeof(float)) / n) {
    return fail(errc::parse_error, "{}: header declares {} images of {} x {} pixels, too large",
                images_path, n, img_rows, img_cols);
  }

  idx_pair p{std::move(*images)};
  p.count = n;
  p.features = std::size_t(img_rows) * std::size_t(img_cols);
  // Read in blocks so that a corrupt count cannot make us allocate more than the file holds.
  std::vector<unsigned char> block(std::min<std::size_t>(block_bytes, std::max<std::size_t>(n, 1)));
  p.labels.reserve(std::min<std::size_t>(n, block_bytes * 16));
  int max_seen = -1;
  for (std::size_t done = 0; done < n;) {
    const std::size_t want = std::min(block.size(), n - done);
    auto got = read_declared(*labels, block.data(), want, n, done, 8);
    if (!got) return std::unexpected(std::move(got.error()));
    for (std::size_t i = 0; i < want; ++i) {
      p.labels.push_back(block[i]);
      max_seen = std::max(max_seen, int(block[i]));
    }
    done += want;
  }
  p.classes = max_seen + 1;
  return p;
}

/// Reads the first `keep` images of an opened pair into out.x, scaled by 1/255.
result<void> read_idx_images(idx_pair& p, std::size_t keep, dataset& out) {
  std::array<float, 256> scale{};
  for (std::size_t i = 0; i < scale.size(); ++i) scale[i] = float(i) / 255.0f;
  const std::uint64_t declared = std::uint64_t(p.count) * p.features;
  const std::size_t want = keep * p.features;
  out.x.clear();
  // Bounded, so that a corrupt count cannot make us allocate more than the file holds.
  out.x.reserve(std::min<std::size_t>(want, block_bytes * 64));
  std::vector<unsigned char> block(std::min(block_bytes, std::max<std::size_t>(want, 1)));
  std::size_t done = 0;
  while (done < want) {
    const std::size_t n = std::min(block.size(), want - done);
    auto got = read_declared(p.images, block.data(), n, declared, done, 16);
    if (!got) return std::unexpected(std::move(got.error()));
    const std::size_t old = out.x.size();
    out.x.resize(old + n);
    float* dst = out.x.data() + old;
    for (std::size_t i = 0; i < n; ++i) dst[i] = scale[block[i]];
    done += n;
  }
  return {};
}

result<dataset> load_idx_limited(const std::string& images_path, const std::string& labels_path,
                                 std::size_t limit, int* all_classes) {
  auto p = open_idx(images_path, labels_path);
  if (!p) return std::unexpected(std::move(p.error()));
  const std::size_t keep = limit == 0 ? p->count : std::min(limit, p->count);
  dataset d;
  d.rows = keep;
  d.features = p->features;
  d.classes = p->classes;
  if (all_classes != nullptr) *all_classes = p->classes;
  auto ok = read_idx_images(*p, keep, d);
  if (!ok) return std::unexpected(std::move(ok.error()));
  d.y = std::move(p->labels);
  d.y.resize(keep);
  d.y.shrink_to_fit();
  return d;
}

std::string existing_idx_file(const fs::path& dir, std::string_view base) {
  const fs::path plain = dir / base;
  std::error_code ec;
  if (fs::exists(plain, ec)) return plain.string();
  fs::path gz = plain;
  gz += ".gz";
  if (fs::exists(gz, ec)) return gz.string();
  return {};
}

result<dataset_pair> load_idx_dir(const dataset_config& cfg) {
  std::error_code ec;
  const fs::file_status st = fs::status(cfg.path, ec);
  if (st.type() == fs::file_type::not_found) {
    return fail(errc::not_found, "{}: data set directory not found", cfg.path);
  }
  if (st.type() != fs::file_type::directory) {
    return fail(errc::invalid_argument,
                "{}: is not a directory (format idx expects the directory of the IDX files)",
                cfg.path);
  }
  constexpr std::array<std::string_view, 4> names{
      "train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
      "t10k-labels-idx1-ubyte"};
  std::array<std::string, 4> files;
  for (std::size_t i = 0; i < names.size(); ++i) {
    files[i] = existing_idx_file(cfg.path, names[i]);
    if (files[i].empty()) {
      return fail(errc::not_found, "{}: file not found (nor {}.gz)",
                  (fs::path(cfg.path) / names[i]).string(), names[i]);
    }
  }
  dataset_pair out;
  auto train = load_idx_limited(files[0], files[1], cfg.train_limit, nullptr);
  if (!train) return std::unexpected(std::move(train.error()));
  out.train = std::move(*train);
  int test_classes = 0;
  auto test = load_idx_limited(files[2], files[3], cfg.test_limit, &test_classes);
  if (!test) return std::unexpected(std::move(test.error()));
  out.test = std::move(*test);

  if (out.test.features != out.train.features) {
    return fail(errc::invalid_argument, "{} has {} pixels per image but {} has {}", files[2],
                out.test.features, files[0], out.train.features);
  }
  if (test_classes > out.train.classes) {
    return fail(errc::invalid_argument,
                "{}: test label {} is outside the training set's classes [0, {}) from {}", files[3],
                test_classes - 1, out.train.classes, files[1]);
  }
  out.test.classes = out.train.classes;
  if (out.train.rows == 0) return fail(errc::invalid_argument, "{}: holds no samples", files[0]);
  if (out.test.rows == 0) return fail(errc::invalid_argument, "{}: holds no samples", files[2]);
  if (out.train.classes < 2) {
    return fail(errc::invalid_argument,
                "{}: every label is 0; a classifier needs 2 classes or more", files[1]);
  }
  return out;
}

// --- csv ------------------------------------------------------------------------------------

/// A token quoted for an error message: printable, at most 40 characters.
std::string printable(std::string_view token) {
  std::string s;
  for (char c : token.substr(0, 40)) {
    s.push_back(static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? '?' : c);
  }
  if (token.size() > 40) s += "...";
  return s;
}

std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

bool parse_number(std::string_view token, double& value) noexcept {
  if (!token.empty() && token.front() == '+') token.remove_prefix(1);
  if (token.empty()) return false;
  const auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), value);
  return ec == std::errc() && ptr == token.data() + token.size() && std::isfinite(value);
}

result<std::string> read_all(const std::string& path) {
  auto in = gz_reader::open(path);
  if (!in) return std::unexpected(std::move(in.error()));
  std::string text;
  std::size_t done = 0;
  for (;;) {
    text.resize(done + block_bytes);
    auto got = in->read(text.data() + done, block_bytes);
    if (!got) return std::unexpected(std::move(got.error()));
    done += *got;
    if (*got < block_bytes) break;
  }
  text.resize(done);
  return text;
}

/// All rows of a CSV file: raw features (unscaled) and labels.
struct csv_table {
  std::size_t rows = 0;
  std::size_t features = 0;
  std::vector<float> x;
  std::vector<std::int32_t> y;
  float max_feature = 0;
  int classes = 0;
};

result<csv_table> parse_csv(const std::string& path, std::string_view text) {
  csv_table t;
  std::size_t columns = 0;
  std::size_t first_line = 0;
  std::size_t line_no = 0;
  int max_seen = -1;
  bool have_max = false;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    const std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (trim(line).empty()) continue;

    std::size_t col = 0;
    std::size_t start = 0;
    double label = 0;
    for (;;) {
      std::size_t comma = line.find(',', start);
      const bool last = comma == std::string_view::npos;
      if (last) comma = line.size();
      const std::string_view token = trim(line.substr(start, comma - start));
      ++col;
      if (columns != 0 && col > columns) {
        const std::size_t total =
            col + std::size_t(std::count(line.begin() + long(comma), line.end(), ','));
        return fail(errc::parse_error,
                    "{}: line {}: row has {} columns, expected {} (as on line {})", path, line_no,
                    total, columns, first_line);
      }
      double v = 0;
      if (!parse_number(token, v)) {
        return fail(errc::parse_error, "{}: line {}, column {}: '{}' is not a number", path,
                    line_no, col, printable(token));
      }
      if (last) {
        label = v;
        break;
      }
      t.x.push_back(float(v));
      if (!have_max || float(v) > t.max_feature) t.max_feature = float(v);
      have_max = true;
      start = comma + 1;
    }
    if (columns == 0) {
      if (col < 2) {
        return fail(errc::parse_error,
                    "{}: line {}: row has 1 column; a row needs features then the label", path,
                    line_no);
      }
      columns = col;
      first_line = line_no;
    } else if (col != columns) {
      return fail(errc::parse_error, "{}: line {}: row has {} columns, expected {} (as on line {})",
                  path, line_no, col, columns, first_line);
    }
    if (label < 0 || label > double(max_label) || label != std::floor(label)) {
      return fail(errc::parse_error,
                  "{}: line {}, column {}: label {} must be an integer in [0, {}]", path, line_no,
                  col, printable(trim(line.substr(line.rfind(',') + 1))), max_label);
    }
    t.y.push_back(std::int32_t(label));
    max_seen = std::max(max_seen, int(label));
    ++t.rows;
  }
  if (t.rows == 0) return fail(errc::parse_error, "{}: no data rows", path);
  t.features = columns - 1;
  t.classes = max_seen + 1;
  return t;
}

/// Uniform integer in [0, bound), the same on every platform (std distributions are not).
std::uint64_t uniform_below(std::mt19937_64& rng, std::uint64_t bound) {
  // Reject the low values that would make `r % bound` favour small results.
  const std::uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const std::uint64_t r = rng();
    if (r >= threshold) return r % bound;
  }
}

dataset take_rows(const csv_table& t, const std::size_t* idx, std::size_t n, float inv_scale) {
  dataset d;
  d.rows = n;
  d.features = t.features;
  d.classes = t.classes;
  d.x.resize(n * t.features);
  d.y.resize(n);
  for (std::size_t r = 0; r < n; ++r) {
    const float* src = t.x.data() + idx[r] * t.features;
    float* dst = d.x.data() + r * t.features;
    for (std::size_t c = 0; c < t.features; ++c) dst[c] = src[c] * inv_scale;
    d.y[r] = t.y[idx[r]];
  }
  return d;
}

result<dataset_pair> load_csv(const dataset_config& cfg, std::uint64_t seed) {
  if (!(cfg.test_fraction > 0.0 && cfg.test_fraction < 1.0)) {
    return fail(errc::invalid_argument, "{}: test_fraction {} must be in (0, 1)", cfg.path,
                cfg.test_fraction);
  }
  auto text = read_all(cfg.path);
  if (!text) return std::unexpected(std::move(text.error()));
  auto table = parse_csv(cfg.path, *text);
  if (!table) return std::unexpected(std::move(table.error()));
  text->clear();
  text->shrink_to_fit();
  const csv_table& t = *table;

  if (t.classes < 2) {
    return fail(errc::invalid_argument,
                "{}: every label is 0; a classifier needs 2 classes or more", cfg.path);
  }
  const std::size_t n_test = std::size_t(std::llround(cfg.test_fraction * double(t.rows)));
  if (n_test == 0 || n_test >= t.rows) {
    return fail(errc::invalid_argument, "{}: test_fraction {} of {} rows leaves the {} set empty",
                cfg.path, cfg.test_fraction, t.rows, n_test == 0 ? "test" : "training");
  }
  const std::size_t n_train = t.rows - n_test;

  // Fisher-Yates, written out so the split is the same on every platform for a seed.
  std::vector<std::size_t> order(t.rows);
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::mt19937_64 rng(seed);
  for (std::size_t i = order.size() - 1; i > 0; --i) {
    std::swap(order[i], order[std::size_t(uniform_below(rng, i + 1))]);
  }

  const float inv_scale = 1.0f / (t.max_feature > 0.0f ? t.max_feature : 1.0f);
  const std::size_t keep_train =
      cfg.train_limit == 0 ? n_train : std::min(cfg.train_limit, n_train);
  const std::size_t keep_test = cfg.test_limit == 0 ? n_test : std::min(cfg.test_limit, n_test);
  dataset_pair out;
  out.train = take_rows(t, order.data(), keep_train, inv_scale);
  out.test = take_rows(t, order.data() + n_train, keep_test, inv_scale);
  return out;
}

}  // namespace
}  // namespace detail

result<dataset> load_idx(const std::string& images_path, const std::string& labels_path) {
  try {
    return detail::load_idx_limited(images_path, labels_path, 0, nullptr);
  } catch (const std::bad_alloc&) {
    return fail(errc::resource_exhausted, "{}: out of memory while loading", images_path);
  } catch (const std::exception& e) {
    return fail(errc::internal, "{}: unexpected failure while loading: {}", images_path, e.what());
  }
}

result<dataset_pair> load_dataset(const dataset_config& cfg, std::uint64_t seed) {
  if (cfg.path.empty()) return fail(errc::invalid_argument, "data set path is empty");
  try {
    switch (cfg.format) {
      case dataset_format::idx:
        return detail::load_idx_dir(cfg);
      case dataset_format::csv:
        return detail::load_csv(cfg, seed);
    }
    return fail(errc::invalid_argument, "{}: unknown data set format {}", cfg.path,
                int(cfg.format));
  } catch (const std::bad_alloc&) {
    return fail(errc::resource_exhausted, "{}: out of memory while loading", cfg.path);
  } catch (const std::exception& e) {
    return fail(errc::internal, "{}: unexpected failure while loading: {}", cfg.path, e.what());
  }
}

std::string_view to_string(dataset_format format) noexcept {
  switch (format) {
    case dataset_format::idx:
      return "idx";
    case dataset_format::csv:
      return "csv";
  }
  return "unknown";
}

result<dataset_format> parse_dataset_format(std::string_view text) {
  if (text == "idx") return dataset_format::idx;
  if (text == "csv") return dataset_format::csv;
  return fail(errc::invalid_argument, "unknown data set format '{}' (expected idx or csv)",
              detail::printable(text));
}

}  // namespace coach::worker
