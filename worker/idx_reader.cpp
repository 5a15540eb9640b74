#include "worker/idx_reader.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "worker/dataset_split.hpp"
#include "worker/gz_reader.hpp"

namespace coach::worker::detail {
namespace {

namespace fs = std::filesystem;

constexpr std::uint32_t idx_images_magic = 0x00000803;  // unsigned bytes, 3 dimensions
constexpr std::uint32_t idx_labels_magic = 0x00000801;  // unsigned bytes, 1 dimension

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

/// Reads the `n` labels of an opened label file into p.labels and sets p.classes.
result<void> read_idx_labels(gz_reader& labels, std::size_t n, idx_pair& p) {
  // Read in blocks so that a corrupt count cannot make us allocate more than the file holds.
  std::vector<unsigned char> block(std::min<std::size_t>(block_bytes, std::max<std::size_t>(n, 1)));
  p.labels.reserve(std::min<std::size_t>(n, block_bytes * 16));
  int max_seen = -1;
  for (std::size_t done = 0; done < n;) {
    const std::size_t want = std::min(block.size(), n - done);
    auto got = read_declared(labels, block.data(), want, n, done, 8);
    if (!got) return std::unexpected(std::move(got.error()));
    for (std::size_t i = 0; i < want; ++i) {
      p.labels.push_back(block[i]);
      max_seen = std::max(max_seen, int(block[i]));
    }
    done += want;
  }
  p.classes = max_seen + 1;
  return {};
}

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
  if (auto ok = read_idx_labels(*labels, n, p); !ok) return std::unexpected(std::move(ok.error()));
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

std::string existing_idx_file(const fs::path& dir, std::string_view base) {
  const fs::path plain = dir / base;
  std::error_code ec;
  if (fs::exists(plain, ec)) return plain.string();
  fs::path gz = plain;
  gz += ".gz";
  if (fs::exists(gz, ec)) return gz.string();
  return {};
}

/// The four files of the idx directory cfg.path: training images and labels, test images and
/// labels. Errors: a missing directory or file, a path that is not a directory.
result<std::array<std::string, 4>> find_idx_files(const dataset_config& cfg) {
  if (auto dir =
          check_data_directory(cfg.path, "format idx expects the directory of the IDX files");
      !dir)
    return std::unexpected(dir.error());
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
  return files;
}

}  // namespace

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

result<dataset_pair> load_idx_dir(const dataset_config& cfg) {
  auto found = find_idx_files(cfg);
  if (!found) return std::unexpected(std::move(found.error()));
  const auto& files = *found;
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

}  // namespace coach::worker::detail
