#include "worker/dataset.hpp"

#include "worker/npy.hpp"

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
#include <optional>
#include <random>
#include <span>
#include <string_view>
#include <system_error>
#include <unordered_map>
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

  /// True when the file is read as it is (not gzip data being decompressed).
  bool direct() const noexcept { return gzdirect(file_) == 1; }

  /// The size of a file read directly, or nothing (gzip data, or the size cannot be read).
  std::optional<std::uint64_t> plain_size() const {
    if (!direct()) return std::nullopt;
    std::error_code ec;
    const std::uintmax_t n = fs::file_size(path_, ec);
    if (ec) return std::nullopt;
    return std::uint64_t(n);
  }

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
  int height = 0;
  int width = 0;
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
  p.height = int(std::min<std::uint64_t>(img_rows, 1u << 30));
  p.width = int(std::min<std::uint64_t>(img_cols, 1u << 30));
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

/// Reads the first `keep` images of an opened pair into out.x, each pixel divided by `divisor`.
result<void> read_idx_images(idx_pair& p, std::size_t keep, dataset& out, float divisor) {
  std::array<float, 256> scale{};
  for (std::size_t i = 0; i < scale.size(); ++i) scale[i] = float(i) / divisor;
  const std::uint64_t declared = std::uint64_t(p.count) * p.features;
  const std::size_t want = keep * p.features;
  out.x.clear();
  // Bounded, so that a corrupt count cannot make us allocate more than the file holds; a plain
  // file that holds what it declares gets its exact size at once.
  const auto size = p.images.plain_size();
  const bool holds_all = size && *size >= 16 && *size - 16 >= declared;
  out.x.reserve(holds_all ? want : std::min<std::size_t>(want, block_bytes * 64));
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
                                 std::size_t limit, int* all_classes, float divisor) {
  auto p = open_idx(images_path, labels_path);
  if (!p) return std::unexpected(std::move(p.error()));
  const std::size_t keep = limit == 0 ? p->count : std::min(limit, p->count);
  dataset d;
  d.rows = keep;
  d.features = p->features;
  d.classes = p->classes;
  d.shape = {1, p->height, p->width};
  if (all_classes != nullptr) *all_classes = p->classes;
  auto ok = read_idx_images(*p, keep, d, divisor);
  if (!ok) return std::unexpected(std::move(ok.error()));
  d.y = std::move(p->labels);
  d.y.resize(keep);
  d.y.shrink_to_fit();
  return d;
}

result<dataset> idx_images_alone(const std::string& images_path) {
  auto images = gz_reader::open(images_path);
  if (!images) return std::unexpected(std::move(images.error()));
  auto ih = read_idx_header(*images, idx_images_magic, 3, "images");
  if (!ih) return std::unexpected(std::move(ih.error()));
  const auto [n, rows, cols] = *ih;
  if (rows == 0 || cols == 0 || rows > (1u << 15) || cols > (1u << 15))
    return fail(errc::parse_error, "{}: images of {} x {} pixels", images_path, rows, cols);
  idx_pair p{std::move(*images)};
  p.count = n;
  p.features = std::size_t(rows) * cols;
  dataset d;
  d.rows = n;
  d.features = p.features;
  d.shape = {1, int(rows), int(cols)};
  auto ok = read_idx_images(p, n, d, 255.0f);
  if (!ok) return std::unexpected(std::move(ok.error()));
  d.y.assign(n, 0);
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

// --- shared by the formats -------------------------------------------------------------------

/// A token quoted for an error message: printable, at most 40 characters.
std::string printable(std::string_view token) {
  std::string s;
  for (char c : token.substr(0, 40)) {
    s.push_back(static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? '?' : c);
  }
  if (token.size() > 40) s += "...";
  return s;
}

/// The map of `kind` for data whose largest raw value is `largest`, with the statistics of
/// `train` (raw) for standardize.
feature_transform make_transform(normalization kind, std::size_t features, float largest,
                                 const dataset& train) {
  feature_transform t;
  t.kind = kind;
  t.offset.assign(features, 0.0f);
  t.scale.assign(features, 1.0f);
  switch (kind) {
    case normalization::none:
      break;
    case normalization::max:
      t.scale.assign(features, largest > 0.0f ? largest : 1.0f);
      break;
    case normalization::standardize: {
      // Two passes in double: the mean, then the squared distances to it (population variance).
      std::vector<double> sum(features, 0.0);
      for (std::size_t r = 0; r < train.rows; ++r) {
        const float* row = train.x.data() + r * features;
        for (std::size_t c = 0; c < features; ++c) sum[c] += double(row[c]);
      }
      const double n = double(std::max<std::size_t>(train.rows, 1));
      for (std::size_t c = 0; c < features; ++c) sum[c] /= n;
      std::vector<double> sq(features, 0.0);
      for (std::size_t r = 0; r < train.rows; ++r) {
        const float* row = train.x.data() + r * features;
        for (std::size_t c = 0; c < features; ++c) {
          const double d = double(row[c]) - sum[c];
          sq[c] += d * d;
        }
      }
      for (std::size_t c = 0; c < features; ++c) {
        t.offset[c] = float(sum[c]);
        const float sd = float(std::sqrt(sq[c] / n));
        t.scale[c] = sd > 0.0f && std::isfinite(sd) ? sd : 1.0f;
      }
      break;
    }
  }
  return t;
}

void apply_in_place(const feature_transform& t, std::span<float> x) noexcept {
  if (t.kind == normalization::none || t.offset.empty()) return;
  const std::size_t features = t.offset.size();
  for (std::size_t r = 0; r + features <= x.size(); r += features) {
    float* row = x.data() + r;
    for (std::size_t c = 0; c < features; ++c) row[c] = (row[c] - t.offset[c]) / t.scale[c];
  }
}

/// Sets out.transform from the raw features of both sets and applies it to them.
void normalize_pair(dataset_pair& out, normalization kind, float largest) {
  out.transform = make_transform(kind, out.train.features, largest, out.train);
  apply_in_place(out.transform, out.train.x);
  apply_in_place(out.transform, out.test.x);
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

result<void> check_test_fraction(const dataset_config& cfg) {
  if (!(cfg.test_fraction > 0.0 && cfg.test_fraction < 1.0)) {
    return fail(errc::invalid_argument, "{}: test_fraction {} must be in (0, 1)", cfg.path,
                cfg.test_fraction);
  }
  return {};
}

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

/// The plan for `rows` rows of `what`. Errors: a split that leaves a set empty.
result<split_plan> plan_split(const std::string& what, std::size_t rows, const dataset_config& cfg,
                              std::uint64_t seed) {
  if (rows > std::numeric_limits<std::uint32_t>::max()) {
    return fail(errc::resource_exhausted, "{}: {} rows are more than the {} a data set may hold",
                what, rows, std::numeric_limits<std::uint32_t>::max());
  }
  split_plan p;
  p.n_test = std::size_t(std::llround(cfg.test_fraction * double(rows)));
  if (p.n_test == 0 || p.n_test >= rows) {
    return fail(errc::invalid_argument, "{}: test_fraction {} of {} rows leaves the {} set empty",
                what, cfg.test_fraction, rows, p.n_test == 0 ? "test" : "training");
  }
  p.n_train = rows - p.n_test;
  p.keep_train = cfg.train_limit == 0 ? p.n_train : std::min(cfg.train_limit, p.n_train);
  p.keep_test = cfg.test_limit == 0 ? p.n_test : std::min(cfg.test_limit, p.n_test);
  // Fisher-Yates, written out so the split is the same on every platform for a seed.
  std::vector<std::uint32_t> order(rows);
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = std::uint32_t(i);
  std::mt19937_64 rng(seed);
  for (std::size_t i = order.size() - 1; i > 0; --i) {
    std::swap(order[i], order[std::size_t(uniform_below(rng, i + 1))]);
  }
  p.slot.resize(rows);
  for (std::size_t i = 0; i < rows; ++i) p.slot[order[i]] = std::uint32_t(i);
  return p;
}

/// A set sized for the rows a plan keeps.
dataset sized_set(std::size_t rows, std::size_t features) {
  dataset d;
  d.rows = rows;
  d.features = features;
  d.x.resize(rows * features);
  d.y.resize(rows);
  return d;
}

/// Where file row `r` goes under `plan`: a row of out.train or out.test, or nowhere (nullptr,
/// beyond a limit).
std::pair<dataset*, std::size_t> target_of(const split_plan& plan, std::size_t r,
                                           dataset_pair& out) noexcept {
  const std::size_t pos = plan.slot[r];
  if (pos < plan.n_train) {
    if (pos < plan.keep_train) return {&out.train, pos};
    return {nullptr, 0};
  }
  const std::size_t t = pos - plan.n_train;
  if (t < plan.keep_test) return {&out.test, t};
  return {nullptr, 0};
}

/// The doubt about a label column that yields too many classes, or "" when it is plausible.
std::string implausible_classes_doubt(std::int64_t classes, std::size_t distinct,
                                      std::size_t rows) {
  if (classes > implausible_classes) {
    return coach::format("gives {} classes (more than {})", classes, implausible_classes);
  }
  if (rows >= implausible_label_min_rows && distinct * 2 > rows) {
    return coach::format("gives {} distinct values in {} rows (more than half)", distinct, rows);
  }
  return {};
}

// --- idx ------------------------------------------------------------------------------------

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
  // max divides by 255 while reading, as it always has; none and standardize read raw bytes.
  const bool by_255 = cfg.normalize == normalization::max;
  const float divisor = by_255 ? 255.0f : 1.0f;
  dataset_pair out;
  auto train = load_idx_limited(files[0], files[1], cfg.train_limit, nullptr, divisor);
  if (!train) return std::unexpected(std::move(train.error()));
  out.train = std::move(*train);
  int test_classes = 0;
  auto test = load_idx_limited(files[2], files[3], cfg.test_limit, &test_classes, divisor);
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
  if (by_255) {
    // Already divided (the same float division apply_transform does).
    out.transform = make_transform(normalization::max, out.train.features, 255.0f, out.train);
  } else {
    normalize_pair(out, cfg.normalize, 255.0f);
  }
  return out;
}

// --- csv ------------------------------------------------------------------------------------

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

/// "tab", "space" or the character itself, for messages.
std::string delimiter_name(char d) {
  if (d == '\t') return "tab";
  if (d == ' ') return "space";
  return std::string("'") + d + "'";
}

/// The lines of a text file, read through gz_reader one block at a time. A line is handed out
/// without its '\n' (a '\r' before it stays: trim drops it) and may be changed in place; it is
/// valid until the next call.
class line_reader {
 public:
  explicit line_reader(gz_reader in) : in_(std::move(in)), buf_(block_bytes, '\0') {}

  /// The next line, or false at the end of the file. The first line loses a UTF-8 byte-order
  /// mark. Errors: those of gz_reader::read, and a line longer than max_line bytes.
  result<bool> next(std::span<char>& line) {
    for (;;) {
      const void* nl =
          scan_ < end_ ? std::memchr(buf_.data() + scan_, '\n', end_ - scan_) : nullptr;
      if (nl != nullptr || (eof_ && begin_ < end_)) {
        const std::size_t stop =
            nl != nullptr ? std::size_t(static_cast<const char*>(nl) - buf_.data()) : end_;
        line = std::span<char>(buf_.data() + begin_, stop - begin_);
        begin_ = scan_ = nl != nullptr ? stop + 1 : end_;
        if (++line_no_ == 1 && line.size() >= 3 &&
            std::memcmp(line.data(), "\xEF\xBB\xBF", 3) == 0) {
          line = line.subspan(3);
        }
        return true;
      }
      if (eof_) return false;
      // Keep the unfinished line, at the front; grow only for a line longer than the buffer.
      scan_ = end_;
      if (begin_ > 0) {
        std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
        end_ -= begin_;
        scan_ -= begin_;
        begin_ = 0;
      }
      if (end_ == buf_.size()) {
        if (buf_.size() >= max_line) {
          return fail(errc::parse_error, "{}: line {} is longer than {} bytes; is it a CSV file?",
                      in_.path(), line_no_ + 1, max_line);
        }
        buf_.resize(buf_.size() * 2);
      }
      auto got = in_.read(buf_.data() + end_, buf_.size() - end_);
      if (!got) return std::unexpected(std::move(got.error()));
      if (*got < buf_.size() - end_) eof_ = true;
      end_ += *got;
    }
  }

  /// The 1-based number of the line last returned.
  std::size_t line_no() const noexcept { return line_no_; }
  const std::string& path() const noexcept { return in_.path(); }

  static constexpr std::size_t max_line = std::size_t{64} << 20;

 private:
  gz_reader in_;
  std::string buf_;
  std::size_t begin_ = 0;  // the unread data is buf_[begin_, end_)
  std::size_t end_ = 0;
  std::size_t scan_ = 0;  // no '\n' in buf_[begin_, scan_)
  bool eof_ = false;
  std::size_t line_no_ = 0;
};

enum class split_status { ok, unterminated_quote, text_after_quote };

/// Splits `line` into its cells at `delim`: blanks around a cell are dropped; a cell in double
/// quotes may hold the delimiter, and "" in it stands for one quote (unescaped in place, so the
/// cells point into `line`). On a quote error `cells` ends with the cell at fault.
split_status split_cells(std::span<char> line, char delim, std::vector<std::string_view>& cells) {
  cells.clear();
  char* s = line.data();
  const std::size_t n = line.size();
  const auto blank = [delim](char c) { return (c == ' ' || c == '\t' || c == '\r') && c != delim; };
  std::size_t i = 0;
  for (;;) {
    while (i < n && blank(s[i])) ++i;
    if (i < n && s[i] == '"') {
      std::size_t r = i + 1;
      std::size_t w = i + 1;
      bool closed = false;
      while (r < n) {
        if (s[r] == '"') {
          if (r + 1 < n && s[r + 1] == '"') {
            s[w++] = '"';
            r += 2;
            continue;
          }
          closed = true;
          ++r;
          break;
        }
        s[w++] = s[r++];
      }
      cells.emplace_back(s + i + 1, w - i - 1);
      if (!closed) return split_status::unterminated_quote;
      while (r < n && blank(s[r])) ++r;
      if (r < n && s[r] != delim) return split_status::text_after_quote;
      if (r >= n) return split_status::ok;
      i = r + 1;
    } else {
      std::size_t e = i;
      while (e < n && s[e] != delim) ++e;
      cells.push_back(trim(std::string_view(s + i, e - i)));
      if (e >= n) return split_status::ok;
      i = e + 1;
    }
  }
}

bool blank_line(std::span<const char> line) noexcept {
  return trim(std::string_view(line.data(), line.size())).empty();
}

/// What the first pass over a csv file learns.
struct csv_layout {
  std::size_t columns = 0;
  std::size_t label = 0;           ///< the label's column, 0-based
  std::size_t rows = 0;            ///< data rows
  std::size_t first_line = 0;      ///< the line of the first row (the header, if any)
  std::vector<std::string> names;  ///< the header's cells; empty without a header
};

/// " ('name')" for column c when the file has a header, else "".
std::string column_name(const csv_layout& layout, std::size_t c) {
  if (c >= layout.names.size()) return {};
  return " ('" + printable(layout.names[c]) + "')";
}

result<void> check_split(const std::string& path, std::size_t line, std::size_t cells,
                         split_status status) {
  switch (status) {
    case split_status::ok:
      return {};
    case split_status::unterminated_quote:
      return fail(errc::parse_error, "{}: line {}, column {}: a quote is not closed on its line",
                  path, line, cells);
    case split_status::text_after_quote:
      return fail(errc::parse_error,
                  "{}: line {}, column {}: text after the closing quote (a quoted cell must end "
                  "at the delimiter)",
                  path, line, cells);
  }
  return {};
}

std::string ragged_message(const std::string& path, std::size_t line, std::size_t cells,
                           const csv_layout& layout) {
  return coach::format("{}: line {}: row has {} columns, expected {} (as on line {})", path, line,
                       cells, layout.columns, layout.first_line);
}

/// Resolves cfg.label_column against the first row (the header, if any).
result<std::size_t> resolve_label_column(const dataset_config& cfg, const csv_layout& layout) {
  const column_ref& want = cfg.label_column;
  if (!want.name.empty()) {
    if (!cfg.header) {
      return fail(errc::invalid_argument,
                  "{}: label_column '{}' is a column name, but header is false; set header: true",
                  cfg.path, printable(want.name));
    }
    std::vector<std::size_t> found;
    for (std::size_t c = 0; c < layout.names.size(); ++c) {
      if (layout.names[c] == want.name) found.push_back(c);
    }
    if (found.size() == 1) return found[0];
    if (found.size() > 1) {
      return fail(errc::invalid_argument,
                  "{}: label_column '{}' names {} columns of the header on line {} (0-based {} and "
                  "{}); give its index instead",
                  cfg.path, printable(want.name), found.size(), layout.first_line, found[0],
                  found[1]);
    }
    std::string list;
    for (std::size_t c = 0; c < layout.names.size() && c < 12; ++c) {
      list += (c > 0 ? ", " : "") + printable(layout.names[c]);
    }
    if (layout.names.size() > 12) list += ", ...";
    return fail(errc::invalid_argument,
                "{}: label_column '{}' is not a column of the header on line {} (columns: {})",
                cfg.path, printable(want.name), layout.first_line, list);
  }
  const auto columns = std::int64_t(layout.columns);
  const std::int64_t index = want.index < 0 ? columns + want.index : want.index;
  if (index < 0 || index >= columns) {
    return fail(errc::invalid_argument,
                "{}: label_column {} is outside the {} columns of line {} (0 to {}, or -1 to -{} "
                "from the end)",
                cfg.path, want.index, columns, layout.first_line, columns - 1, columns);
  }
  return std::size_t(index);
}

/// First pass: the columns (from the first row), the label's column and the number of data
/// rows; checks that every row has as many cells as the first.
result<csv_layout> scan_csv(const dataset_config& cfg) {
  auto in = gz_reader::open(cfg.path);
  if (!in) return std::unexpected(std::move(in.error()));
  line_reader lines(std::move(*in));
  csv_layout layout;
  std::vector<std::string_view> cells;
  std::span<char> line;
  for (;;) {
    auto more = lines.next(line);
    if (!more) return std::unexpected(std::move(more.error()));
    if (!*more) break;
    if (blank_line(line)) continue;
    const std::size_t line_no = lines.line_no();
    const split_status status = split_cells(line, cfg.delimiter, cells);
    if (auto ok = check_split(cfg.path, line_no, cells.size(), status); !ok) {
      return std::unexpected(std::move(ok.error()));
    }
    if (layout.columns == 0) {
      if (cells.size() < 2) {
        return fail(errc::parse_error,
                    "{}: line {}: row has 1 column; a row needs features then the label (cells "
                    "separated by {})",
                    cfg.path, line_no, delimiter_name(cfg.delimiter));
      }
      layout.columns = cells.size();
      layout.first_line = line_no;
      if (cfg.header) {
        layout.names.assign(cells.begin(), cells.end());
        continue;
      }
    } else if (cells.size() != layout.columns) {
      return std::unexpected(
          error{errc::parse_error, ragged_message(cfg.path, line_no, cells.size(), layout)});
    }
    ++layout.rows;
  }
  if (layout.rows == 0) return fail(errc::parse_error, "{}: no data rows", cfg.path);
  auto label = resolve_label_column(cfg, layout);
  if (!label) return std::unexpected(std::move(label.error()));
  layout.label = *label;
  return layout;
}

/// Turns the label cells of a csv file into classes (the rules are at the top of dataset.hpp).
/// While the file is read, each row stores a provisional id: an integer label as it is, any
/// other cell as string_base + the order of its first appearance; finish() maps them to classes.
class label_mapper {
 public:
  static constexpr std::int32_t string_base = max_label + 1;

  label_mapper(const dataset_config& cfg, const csv_layout& layout)
      : cfg_(cfg), layout_(layout), seen_(std::size_t(max_label) + 1, false) {}

  /// The provisional id of the label cell of data row `row` (0-based) on line `line`.
  result<std::int32_t> add(std::string_view cell, std::size_t line, std::size_t row) {
    if (cell.empty()) {
      return fail(errc::parse_error, "{}: line {}, column {}{}: the label is empty", cfg_.path,
                  line, layout_.label + 1, column_name(layout_, layout_.label));
    }
    double v = 0;
    if (parse_number(cell, v)) {
      if (v >= 0 && v <= double(max_label) && v == std::floor(v)) {
        const auto label = std::int32_t(v);
        if (!seen_[std::size_t(label)]) {
          seen_[std::size_t(label)] = true;
          ++distinct_ints_;
          max_int_ = std::max(max_int_, label);
        }
        if (float_line_ == 0 && cell.find_first_of(".eE") != std::string_view::npos) {
          float_line_ = line;
          float_text_ = printable(cell);
        }
        return label;
      }
      if (bad_line_ == 0) {
        bad_line_ = line;
        bad_text_ = printable(cell);
      }
    } else {
      ++word_rows_;
      if (row == 0) first_row_word_ = true;
    }
    key_.assign(cell);
    auto it = ids_.find(key_);
    if (it != ids_.end()) return it->second;
    if (strings_.size() >= std::size_t(max_label) + 1) {
      return fail(errc::invalid_argument,
                  "{}: line {}: the label column (label_column {}{}) holds more than {} distinct "
                  "values; is it the label? Set dataset.label_column",
                  cfg_.path, line, layout_.label, column_name(layout_, layout_.label),
                  max_label + 1);
    }
    const auto id = std::int32_t(string_base + std::int32_t(strings_.size()));
    ids_.emplace(key_, id);
    strings_.push_back(key_);
    return id;
  }

  /// Maps the provisional ids of both sets to classes, sets classes and class_names, and adds
  /// the warnings about an implausible label column.
  result<void> finish(dataset_pair& out) {
    const std::string where =
        coach::format("label_column {}{}", layout_.label, column_name(layout_, layout_.label));
    std::int64_t classes = 0;
    std::size_t distinct = 0;
    if (word_rows_ == 0) {
      if (bad_line_ != 0) {
        return fail(errc::parse_error,
                    "{}: line {}, column {}: label {} must be an integer in [0, {}] (if column {} "
                    "is not the label, set dataset.label_column)",
                    cfg_.path, bad_line_, layout_.label + 1, bad_text_, max_label,
                    layout_.label + 1);
      }
      if (max_int_ < 1) {
        return fail(errc::invalid_argument,
                    "{}: every label is 0; a classifier needs 2 classes or more", cfg_.path);
      }
      classes = max_int_ + 1;
      distinct = distinct_ints_;
      out.train.classes = out.test.classes = int(classes);
    } else {
      if (!cfg_.header && first_row_word_ && word_rows_ == 1 && layout_.rows > 1) {
        return fail(errc::parse_error,
                    "{}: line {}, column {}: label '{}' is the only label that is not a number; "
                    "if the first row holds column names, set header: true",
                    cfg_.path, layout_.first_line, layout_.label + 1, printable(first_word()));
      }
      // Classes are the distinct cells in sorted order; integers are named by their text.
      std::vector<std::pair<std::string, std::int32_t>> named;
      named.reserve(distinct_ints_ + strings_.size());
      for (std::size_t v = 0; v < seen_.size(); ++v) {
        if (seen_[v]) named.emplace_back(std::to_string(v), std::int32_t(v));
      }
      for (std::size_t k = 0; k < strings_.size(); ++k) {
        named.emplace_back(std::move(strings_[k]), std::int32_t(string_base + std::int32_t(k)));
      }
      strings_.clear();
      ids_.clear();
      if (named.size() > std::size_t(max_label) + 1) {
        return fail(errc::invalid_argument,
                    "{}: the label column ({}) holds {} distinct values, more than {}; is it the "
                    "label? Set dataset.label_column",
                    cfg_.path, where, named.size(), max_label + 1);
      }
      if (named.size() < 2) {
        return fail(errc::invalid_argument,
                    "{}: every label is '{}'; a classifier needs 2 classes or more", cfg_.path,
                    printable(named.front().first));
      }
      std::sort(named.begin(), named.end());
      std::vector<std::int32_t> to_class(std::size_t(string_base) + named.size(), -1);
      std::vector<std::string> class_names;
      class_names.reserve(named.size());
      for (std::size_t c = 0; c < named.size(); ++c) {
        to_class[std::size_t(named[c].second)] = std::int32_t(c);
        class_names.push_back(std::move(named[c].first));
      }
      for (dataset* d : {&out.train, &out.test}) {
        for (auto& y : d->y) y = to_class[std::size_t(y)];
        d->classes = int(class_names.size());
      }
      classes = std::int64_t(class_names.size());
      distinct = class_names.size();
      out.test.class_names = class_names;
      out.train.class_names = std::move(class_names);
    }
    if (auto doubt = implausible_classes_doubt(classes, distinct, layout_.rows); !doubt.empty()) {
      out.warnings.push_back(coach::format(
          "{}: the label column ({}) {}; if it is not the label, set dataset.label_column to the "
          "label's column (0-based, -1 = the last)",
          cfg_.path, where, doubt));
    }
    if (word_rows_ == 0 && float_line_ != 0) {
      out.warnings.push_back(coach::format(
          "{}: the label column ({}) holds numbers written as floats (e.g. '{}' on line {}); "
          "labels are class indices: if it is not the label, set dataset.label_column to the "
          "label's column (0-based, -1 = the last)",
          cfg_.path, where, float_text_, float_line_));
    }
    return {};
  }

 private:
  /// The one cell that is not a number, when there is only one.
  std::string first_word() const {
    for (const auto& s : strings_) {
      double v = 0;
      if (!parse_number(s, v)) return s;
    }
    return {};
  }

  const dataset_config& cfg_;
  const csv_layout& layout_;
  std::vector<bool> seen_;  // integer labels seen
  std::size_t distinct_ints_ = 0;
  std::int32_t max_int_ = -1;
  std::unordered_map<std::string, std::int32_t> ids_;  // other cells -> provisional id
  std::vector<std::string> strings_;                   // other cells, by first appearance
  std::string key_;
  std::size_t word_rows_ = 0;  // rows whose label is not a number
  bool first_row_word_ = false;
  std::size_t bad_line_ = 0;  // first number that is not a label (1.5, -1, 70000)
  std::string bad_text_;
  std::size_t float_line_ = 0;  // first integer label written as a float (2.0, 1e1)
  std::string float_text_;
};

/// Second pass: parses every data row straight into its place in out.train or out.test.
/// Returns the largest feature value of the file.
result<float> parse_csv_rows(const dataset_config& cfg, const csv_layout& layout,
                             const split_plan& plan, label_mapper& labels, dataset_pair& out) {
  auto in = gz_reader::open(cfg.path);
  if (!in) return std::unexpected(std::move(in.error()));
  line_reader lines(std::move(*in));
  const std::size_t features = layout.columns - 1;
  std::vector<float> scratch(features);  // a row beyond the limits: checked, not kept
  std::vector<std::string_view> cells;
  float largest = -std::numeric_limits<float>::infinity();
  std::size_t row = 0;
  bool header_seen = !cfg.header;
  std::span<char> line;
  for (;;) {
    auto more = lines.next(line);
    if (!more) return std::unexpected(std::move(more.error()));
    if (!*more) break;
    if (blank_line(line)) continue;
    if (!header_seen) {
      header_seen = true;
      continue;
    }
    const std::size_t line_no = lines.line_no();
    const split_status status = split_cells(line, cfg.delimiter, cells);
    if (status != split_status::ok || cells.size() != layout.columns || row >= layout.rows) {
      return fail(errc::io_error, "{}: changed while it was read (line {} differs)", cfg.path,
                  line_no);
    }
    auto [set, at] = target_of(plan, row, out);
    float* dst = set != nullptr ? set->x.data() + at * features : scratch.data();
    for (std::size_t c = 0, f = 0; c < layout.columns; ++c) {
      if (c == layout.label) {
        auto id = labels.add(cells[c], line_no, row);
        if (!id) return std::unexpected(std::move(id.error()));
        if (set != nullptr) set->y[at] = *id;
        continue;
      }
      double v = 0;
      if (!parse_number(cells[c], v)) {
        const bool maybe_header = !cfg.header && row == 0;
        return fail(errc::parse_error, "{}: line {}, column {}{}: '{}' is not a number{}", cfg.path,
                    line_no, c + 1, column_name(layout, c), printable(cells[c]),
                    maybe_header ? " (if the first row holds column names, set header: true)" : "");
      }
      dst[f] = float(v);
      largest = std::max(largest, dst[f]);
      ++f;
    }
    ++row;
  }
  if (row != layout.rows) {
    return fail(errc::io_error, "{}: changed while it was read ({} data rows, then {})", cfg.path,
                layout.rows, row);
  }
  return largest;
}

result<dataset_pair> load_csv(const dataset_config& cfg, std::uint64_t seed) {
  if (auto ok = check_test_fraction(cfg); !ok) return std::unexpected(std::move(ok.error()));
  if (auto d = parse_delimiter(std::string_view(&cfg.delimiter, 1)); !d) {
    return fail(errc::invalid_argument, "{}: delimiter {}", cfg.path, d.error().message);
  }
  auto layout = scan_csv(cfg);
  if (!layout) return std::unexpected(std::move(layout.error()));
  auto plan = plan_split(cfg.path, layout->rows, cfg, seed);
  if (!plan) {
    // A fault in the file comes first: read every row into nowhere, then report the split.
    split_plan nowhere;
    nowhere.n_train = layout->rows;
    nowhere.slot.assign(layout->rows, 0);
    dataset_pair none;
    label_mapper labels(cfg, *layout);
    if (auto ok = parse_csv_rows(cfg, *layout, nowhere, labels, none); !ok) {
      return std::unexpected(std::move(ok.error()));
    }
    if (auto ok = labels.finish(none); !ok) return std::unexpected(std::move(ok.error()));
    return std::unexpected(std::move(plan.error()));
  }
  const std::size_t features = layout->columns - 1;
  dataset_pair out;
  out.train = sized_set(plan->keep_train, features);
  out.test = sized_set(plan->keep_test, features);
  label_mapper labels(cfg, *layout);
  auto largest = parse_csv_rows(cfg, *layout, *plan, labels, out);
  if (!largest) return std::unexpected(std::move(largest.error()));
  plan->slot = {};
  if (auto ok = labels.finish(out); !ok) return std::unexpected(std::move(ok.error()));
  normalize_pair(out, cfg.normalize, *largest);
  return out;
}

// --- npy ------------------------------------------------------------------------------------

/// An opened .npy file, positioned at its first element.
struct npy_file {
  gz_reader in;
  npy_header h;
  std::uint64_t rows = 0;      ///< shape[0]
  std::size_t row_values = 1;  ///< elements per row: the product of the other dimensions

  const std::string& path() const noexcept { return in.path(); }
  std::size_t row_bytes() const noexcept { return row_values * size_of(h.dtype); }
};

result<npy_file> open_npy(const std::string& path) {
  auto in = gz_reader::open(path);
  if (!in) return std::unexpected(std::move(in.error()));
  if (!in->direct()) {
    return fail(errc::invalid_argument,
                "{}: is gzip-compressed; format npy reads plain .npy files (gunzip it)", path);
  }
  std::array<char, npy_preamble_v2> pre{};
  auto got = in->read(pre.data(), npy_preamble_v1);
  if (!got) return std::unexpected(std::move(got.error()));
  auto p = parse_npy_preamble(std::string_view(pre.data(), *got), path);
  if (!p) return std::unexpected(std::move(p.error()));
  std::size_t have = *got;
  if (p->preamble_bytes > have) {
    auto more = in->read(pre.data() + have, p->preamble_bytes - have);
    if (!more) return std::unexpected(std::move(more.error()));
    have += *more;
    if (have < p->preamble_bytes) {
      return fail(errc::parse_error, "{}: truncated header: expected at least {} bytes, got {}",
                  path, p->preamble_bytes, have);
    }
    p = parse_npy_preamble(std::string_view(pre.data(), have), path);
    if (!p) return std::unexpected(std::move(p.error()));
  }
  std::string text(p->header_bytes, '\0');
  auto text_got = in->read(text.data(), text.size());
  if (!text_got) return std::unexpected(std::move(text_got.error()));
  if (*text_got < text.size()) {
    return fail(errc::parse_error, "{}: truncated header: expected {} bytes, got {}", path,
                p->preamble_bytes + text.size(), p->preamble_bytes + *text_got);
  }
  auto h = parse_npy_header(text, path, p->preamble_bytes + text.size());
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

/// Reads rows [0, count) of x in order into the rows `dst(r)` points at (float* of row_values).
/// `contiguous`: dst(r) == dst(0) + r * row_values, so blocks convert straight into place (and
/// <f4 data is read into place with no conversion at all).
template <class Dst>
result<void> read_npy_rows(npy_file& x, std::uint64_t count, bool contiguous, Dst&& dst,
                           float& largest) {
  const std::size_t row_bytes = x.row_bytes();
  if (count == 0) return {};
  if (contiguous && x.h.dtype == npy_dtype::f4) {
    float* out = dst(0);
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

/// The first `limit` rows (0 = all) of an x/y pair, into a fresh set; `classes` gets the largest
/// label of the whole y file + 1 and `distinct` its number of distinct labels.
result<dataset> read_npy_set(npy_file& x, npy_file& y, std::size_t limit, float& largest,
                             int& classes, std::size_t& distinct) {
  const std::uint64_t keep = limit == 0 ? x.rows : std::min<std::uint64_t>(limit, x.rows);
  dataset d = sized_set(std::size_t(keep), x.row_values);
  d.shape = sample_shape_of(x);
  std::vector<bool> seen(std::size_t(max_label) + 1, false);
  std::int32_t max_seen = -1;
  distinct = 0;
  auto ok = read_npy_labels(y, y.rows, [&](std::uint64_t r, std::int32_t label) {
    if (r < keep) d.y[std::size_t(r)] = label;
    if (!seen[std::size_t(label)]) {
      seen[std::size_t(label)] = true;
      ++distinct;
    }
    max_seen = std::max(max_seen, label);
  });
  if (!ok) return std::unexpected(std::move(ok.error()));
  classes = max_seen + 1;
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

result<dataset_pair> load_npy_dir(const dataset_config& cfg, std::uint64_t seed) {
  std::error_code ec;
  const fs::file_status st = fs::status(cfg.path, ec);
  if (st.type() == fs::file_type::not_found) {
    return fail(errc::not_found, "{}: data set directory not found", cfg.path);
  }
  if (st.type() != fs::file_type::directory) {
    return fail(errc::invalid_argument,
                "{}: is not a directory (format npy expects the directory of x_train.npy, "
                "y_train.npy and optionally x_test.npy, y_test.npy)",
                cfg.path);
  }
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

  auto x = open_npy(files[0]);
  if (!x) return std::unexpected(std::move(x.error()));
  if (auto ok = check_x(*x); !ok) return std::unexpected(std::move(ok.error()));
  auto y = open_npy(files[1]);
  if (!y) return std::unexpected(std::move(y.error()));
  if (auto ok = check_y(*y, *x); !ok) return std::unexpected(std::move(ok.error()));
  if (x->rows == 0) return fail(errc::invalid_argument, "{}: holds no samples", files[0]);

  dataset_pair out;
  float largest = -std::numeric_limits<float>::infinity();
  int classes = 0;
  std::size_t distinct = 0;
  std::uint64_t label_rows = x->rows;
  if (has_test) {
    auto train = read_npy_set(*x, *y, cfg.train_limit, largest, classes, distinct);
    if (!train) return std::unexpected(std::move(train.error()));
    out.train = std::move(*train);
    auto tx = open_npy(files[2]);
    if (!tx) return std::unexpected(std::move(tx.error()));
    if (auto ok = check_x(*tx); !ok) return std::unexpected(std::move(ok.error()));
    auto ty = open_npy(files[3]);
    if (!ty) return std::unexpected(std::move(ty.error()));
    if (auto ok = check_y(*ty, *tx); !ok) return std::unexpected(std::move(ok.error()));
    if (tx->row_values != x->row_values) {
      return fail(errc::invalid_argument, "{} has {} features per row ({}) but {} has {} ({})",
                  files[2], tx->row_values, shape_text(tx->h.shape), files[0], x->row_values,
                  shape_text(x->h.shape));
    }
    if (tx->rows == 0) return fail(errc::invalid_argument, "{}: holds no samples", files[2]);
    int test_classes = 0;
    std::size_t test_distinct = 0;
    auto test = read_npy_set(*tx, *ty, cfg.test_limit, largest, test_classes, test_distinct);
    if (!test) return std::unexpected(std::move(test.error()));
    out.test = std::move(*test);
    if (test_classes > classes) {
      return fail(errc::invalid_argument,
                  "{}: test label {} is outside the training set's classes [0, {}) from {}",
                  files[3], test_classes - 1, classes, files[1]);
    }
  } else {
    auto plan = plan_split(files[0], std::size_t(x->rows), cfg, seed);
    if (!plan) return std::unexpected(std::move(plan.error()));
    out.train = sized_set(plan->keep_train, x->row_values);
    out.test = sized_set(plan->keep_test, x->row_values);
    out.train.shape = out.test.shape = sample_shape_of(*x);
    std::vector<bool> seen(std::size_t(max_label) + 1, false);
    std::int32_t max_seen = -1;
    auto ok = read_npy_labels(*y, y->rows, [&](std::uint64_t r, std::int32_t label) {
      auto [set, at] = target_of(*plan, std::size_t(r), out);
      if (set != nullptr) set->y[at] = label;
      if (!seen[std::size_t(label)]) {
        seen[std::size_t(label)] = true;
        ++distinct;
      }
      max_seen = std::max(max_seen, label);
    });
    if (!ok) return std::unexpected(std::move(ok.error()));
    classes = max_seen + 1;
    std::vector<float> scratch(x->row_values);  // a row beyond the limits: checked, not kept
    auto rows = read_npy_rows(
        *x, x->rows, false,
        [&](std::uint64_t r) {
          auto [set, at] = target_of(*plan, std::size_t(r), out);
          return set != nullptr ? set->x.data() + at * x->row_values : scratch.data();
        },
        largest);
    if (!rows) return std::unexpected(std::move(rows.error()));
  }
  if (classes < 2) {
    return fail(errc::invalid_argument,
                "{}: every label is 0; a classifier needs 2 classes or more", files[1]);
  }
  out.train.classes = out.test.classes = classes;
  if (auto doubt = implausible_classes_doubt(classes, distinct, std::size_t(label_rows));
      !doubt.empty()) {
    out.warnings.push_back(
        coach::format("{}: y {}; y should hold one class index per row", files[1], doubt));
  }
  normalize_pair(out, cfg.normalize, largest);
  return out;
}

}  // namespace
}  // namespace detail

result<void> apply_transform(const feature_transform& t, std::span<float> x) {
  if (t.offset.size() != t.scale.size()) {
    return fail(errc::invalid_argument, "feature transform has {} offsets but {} scales",
                t.offset.size(), t.scale.size());
  }
  if (t.offset.empty()) {
    if (t.kind == normalization::none) return {};
    return fail(errc::invalid_argument, "feature transform {} has no features", to_string(t.kind));
  }
  if (x.size() % t.offset.size() != 0) {
    return fail(errc::invalid_argument,
                "{} values are not whole rows of the transform's {} features", x.size(),
                t.offset.size());
  }
  detail::apply_in_place(t, x);
  return {};
}

result<dataset> load_idx(const std::string& images_path, const std::string& labels_path) {
  try {
    return detail::load_idx_limited(images_path, labels_path, 0, nullptr, 255.0f);
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
      case dataset_format::npy:
        return detail::load_npy_dir(cfg, seed);
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
    case dataset_format::npy:
      return "npy";
  }
  return "unknown";
}

result<dataset_format> parse_dataset_format(std::string_view text) {
  if (text == "idx") return dataset_format::idx;
  if (text == "csv") return dataset_format::csv;
  if (text == "npy") return dataset_format::npy;
  return fail(errc::invalid_argument, "unknown data set format '{}' (expected idx, csv or npy)",
              detail::printable(text));
}

std::string_view to_string(normalization kind) noexcept {
  switch (kind) {
    case normalization::none:
      return "none";
    case normalization::max:
      return "max";
    case normalization::standardize:
      return "standardize";
  }
  return "unknown";
}

result<normalization> parse_normalization(std::string_view text) {
  if (text == "none") return normalization::none;
  if (text == "max") return normalization::max;
  if (text == "standardize") return normalization::standardize;
  return fail(errc::invalid_argument,
              "unknown normalization '{}' (expected none, max or standardize)",
              detail::printable(text));
}

result<char> parse_delimiter(std::string_view text) {
  if (text == "tab" || text == "\\t") return '\t';
  if (text == "space") return ' ';
  const auto refuse = [&] {
    return fail(errc::invalid_argument,
                "must be one character such as ',', ';', '|' or tab (not a letter, digit, '.', "
                "'+', '-', a quote or a control character), got '{}'",
                detail::printable(text));
  };
  if (text.size() != 1) return refuse();
  const char c = text[0];
  const auto u = static_cast<unsigned char>(c);
  const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  if (c == '\t' || c == ' ') return c;
  if (u < 0x20 || u >= 0x7f || alnum || c == '.' || c == '+' || c == '-' || c == '"' || c == '\'') {
    return refuse();
  }
  return c;
}

result<dataset> load_idx_images_only(const std::string& images_path) {
  return detail::idx_images_alone(images_path);
}

}  // namespace coach::worker
