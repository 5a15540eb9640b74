// worker::dataset: the real data sets load with the right shapes and values, the csv split is
// reproducible, and every kind of broken file gets an error that names the file and the fault.

#include "worker/dataset.hpp"
#include "worker/dataset_cache.hpp"

#include <gtest/gtest.h>
#include <zlib.h>

#include <unistd.h>
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <string>
#include <string_view>
#include <vector>

namespace coach::worker {
namespace {

namespace fs = std::filesystem;
using bytes = std::vector<unsigned char>;

const char* const fashion_dir = "/usr/share/datasets/fashion-mnist";

/// The repository's data/digits.csv.gz (made by scripts/setup.sh), found from this file's path.
fs::path digits_path() {
  return fs::path(__FILE__).parent_path().parent_path().parent_path() / "data" / "digits.csv.gz";
}

::testing::AssertionResult has(const std::string& text, std::string_view part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << text << "' does not contain '" << part << "'";
}

void put_be32(bytes& b, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<unsigned char>(v >> s));
}

/// An IDX image file: n images of rows x cols, pixel k of image i = (i * 7 + k) % 256.
bytes idx_images(std::uint32_t n, std::uint32_t rows, std::uint32_t cols) {
  bytes b;
  put_be32(b, 0x00000803);
  put_be32(b, n);
  put_be32(b, rows);
  put_be32(b, cols);
  for (std::uint32_t i = 0; i < n; ++i) {
    for (std::uint32_t k = 0; k < rows * cols; ++k) b.push_back((i * 7 + k) % 256);
  }
  return b;
}

bytes idx_labels(const std::vector<unsigned char>& labels) {
  bytes b;
  put_be32(b, 0x00000801);
  put_be32(b, std::uint32_t(labels.size()));
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

class dataset_files : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("coach_dataset_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string write(const std::string& name, const bytes& data) {
    const fs::path p = dir_ / name;
    std::ofstream out(p, std::ios::binary);
    out.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
    return p.string();
  }
  std::string write(const std::string& name, std::string_view text) {
    return write(name, bytes(text.begin(), text.end()));
  }
  std::string write_gz(const std::string& name, const bytes& data) {
    const fs::path p = dir_ / name;
    gzFile f = gzopen(p.c_str(), "wb");
    EXPECT_NE(f, nullptr);
    EXPECT_EQ(gzwrite(f, data.data(), unsigned(data.size())), int(data.size()));
    gzclose(f);
    return p.string();
  }
  std::string write_gz(const std::string& name, std::string_view text) {
    return write_gz(name, bytes(text.begin(), text.end()));
  }
  static bytes read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return bytes(std::istreambuf_iterator<char>(in), {});
  }

  /// A complete idx directory: 5 training and 3 test images of 2 x 3 pixels.
  void write_idx_dir(bool gz) {
    const auto put = [&](const std::string& name, const bytes& b) {
      gz ? write_gz(name + ".gz", b) : write(name, b);
    };
    put("train-images-idx3-ubyte", idx_images(5, 2, 3));
    put("train-labels-idx1-ubyte", idx_labels({0, 1, 2, 1, 0}));
    put("t10k-images-idx3-ubyte", idx_images(3, 2, 3));
    put("t10k-labels-idx1-ubyte", idx_labels({2, 2, 1}));
  }

  fs::path dir_;
};

// --- the real data sets ---------------------------------------------------------------------

TEST(dataset_real, fashion_mnist_loads_with_mnist_shapes) {
  if (!fs::is_directory(fashion_dir)) {
    GTEST_SKIP() << fashion_dir << " is missing (Debian package dataset-fashion-mnist)";
  }
  dataset_config cfg;
  cfg.path = fashion_dir;
  const auto start = std::chrono::steady_clock::now();
  auto d = load_dataset(cfg, 1);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(d) << d.error().to_string();
  std::printf("fashion-mnist loaded in %.3f s\n", seconds);
  // The target is well under 2 s; the bound leaves room for a loaded shared machine.
  EXPECT_LT(seconds, 10.0);

  EXPECT_EQ(d->train.rows, 60000u);
  EXPECT_EQ(d->test.rows, 10000u);
  EXPECT_EQ(d->train.features, 784u);
  EXPECT_EQ(d->test.features, 784u);
  EXPECT_EQ(d->train.classes, 10);
  EXPECT_EQ(d->test.classes, 10);
  ASSERT_EQ(d->train.x.size(), 60000u * 784u);
  ASSERT_EQ(d->test.x.size(), 10000u * 784u);
  ASSERT_EQ(d->train.y.size(), 60000u);
  ASSERT_EQ(d->test.y.size(), 10000u);
  const auto [lo, hi] = std::minmax_element(d->train.x.begin(), d->train.x.end());
  EXPECT_EQ(*lo, 0.0f);
  EXPECT_EQ(*hi, 1.0f);
  // Fashion-MNIST is balanced: 6,000 training and 1,000 test images per class.
  std::array<int, 10> train_count{}, test_count{};
  for (auto l : d->train.y) ++train_count.at(std::size_t(l));
  for (auto l : d->test.y) ++test_count.at(std::size_t(l));
  for (int c = 0; c < 10; ++c) {
    EXPECT_EQ(train_count[std::size_t(c)], 6000) << "class " << c;
    EXPECT_EQ(test_count[std::size_t(c)], 1000) << "class " << c;
  }
  // The first images of both sets are ankle boots (class 9).
  EXPECT_EQ(d->train.y[0], 9);
  EXPECT_EQ(d->test.y[0], 9);
}

TEST(dataset_real, fashion_mnist_limits_keep_the_first_samples) {
  if (!fs::is_directory(fashion_dir)) {
    GTEST_SKIP() << fashion_dir << " is missing (Debian package dataset-fashion-mnist)";
  }
  auto full = load_idx(std::string(fashion_dir) + "/t10k-images-idx3-ubyte.gz",
                       std::string(fashion_dir) + "/t10k-labels-idx1-ubyte.gz");
  ASSERT_TRUE(full) << full.error().to_string();
  dataset_config cfg;
  cfg.path = fashion_dir;
  cfg.train_limit = 1000;
  cfg.test_limit = 100;
  auto d = load_dataset(cfg, 1);
  ASSERT_TRUE(d) << d.error().to_string();
  EXPECT_EQ(d->train.rows, 1000u);
  EXPECT_EQ(d->train.x.size(), 1000u * 784u);
  EXPECT_EQ(d->train.y.size(), 1000u);
  EXPECT_EQ(d->test.rows, 100u);
  EXPECT_EQ(d->train.classes, 10);
  EXPECT_TRUE(std::equal(d->test.x.begin(), d->test.x.end(), full->x.begin()));
  EXPECT_TRUE(std::equal(d->test.y.begin(), d->test.y.end(), full->y.begin()));
}

TEST(dataset_real, digits_csv_splits_reproducibly) {
  const fs::path path = digits_path();
  if (!fs::exists(path)) GTEST_SKIP() << path << " is missing (run scripts/setup.sh)";
  dataset_config cfg;
  cfg.format = dataset_format::csv;
  cfg.path = path.string();
  cfg.test_fraction = 0.2;
  auto a = load_dataset(cfg, 42);
  ASSERT_TRUE(a) << a.error().to_string();
  // round(0.2 * 1797) = 359 held out.
  EXPECT_EQ(a->train.rows, 1438u);
  EXPECT_EQ(a->test.rows, 359u);
  EXPECT_EQ(a->train.features, 64u);
  EXPECT_EQ(a->test.features, 64u);
  EXPECT_EQ(a->train.classes, 10);
  EXPECT_EQ(a->test.classes, 10);
  ASSERT_EQ(a->train.x.size(), 1438u * 64u);
  ASSERT_EQ(a->test.x.size(), 359u * 64u);
  // Pixels 0..16 are divided by 16.
  const auto [lo, hi] = std::minmax_element(a->train.x.begin(), a->train.x.end());
  EXPECT_EQ(*lo, 0.0f);
  EXPECT_EQ(*hi, 1.0f);
  for (float v : a->train.x) ASSERT_EQ(v * 16.0f, std::round(v * 16.0f));

  // The split is a partition of the file: the class counts of digits add up.
  std::array<int, 10> count{};
  for (auto l : a->train.y) ++count.at(std::size_t(l));
  for (auto l : a->test.y) ++count.at(std::size_t(l));
  EXPECT_EQ(count, (std::array<int, 10>{178, 182, 177, 183, 181, 182, 181, 179, 174, 180}));

  auto same = load_dataset(cfg, 42);
  ASSERT_TRUE(same);
  EXPECT_EQ(same->train.x, a->train.x);
  EXPECT_EQ(same->train.y, a->train.y);
  EXPECT_EQ(same->test.x, a->test.x);
  EXPECT_EQ(same->test.y, a->test.y);

  auto other = load_dataset(cfg, 43);
  ASSERT_TRUE(other);
  EXPECT_EQ(other->test.rows, 359u);
  EXPECT_NE(other->test.y, a->test.y);
  EXPECT_NE(other->train.x, a->train.x);

  // The shuffle is our own Fisher-Yates over mt19937_64, so seed 42 gives these test labels on
  // every platform and standard library.
  const std::vector<std::int32_t> first_test(a->test.y.begin(), a->test.y.begin() + 12);
  EXPECT_EQ(first_test, (std::vector<std::int32_t>{7, 6, 3, 4, 5, 1, 0, 0, 4, 3, 3, 7}));

  cfg.test_fraction = 0.5;
  auto half = load_dataset(cfg, 42);
  ASSERT_TRUE(half);
  EXPECT_EQ(half->test.rows, 899u);  // round(898.5) rounds half away from zero
  EXPECT_EQ(half->train.rows, 898u);
}

TEST(dataset_real, digits_csv_limits_keep_the_first_rows_of_the_split) {
  const fs::path path = digits_path();
  if (!fs::exists(path)) GTEST_SKIP() << path << " is missing (run scripts/setup.sh)";
  dataset_config cfg;
  cfg.format = dataset_format::csv;
  cfg.path = path.string();
  auto full = load_dataset(cfg, 7);
  ASSERT_TRUE(full);
  cfg.train_limit = 100;
  cfg.test_limit = 10;
  auto d = load_dataset(cfg, 7);
  ASSERT_TRUE(d) << d.error().to_string();
  EXPECT_EQ(d->train.rows, 100u);
  EXPECT_EQ(d->test.rows, 10u);
  EXPECT_EQ(d->train.classes, 10);
  EXPECT_TRUE(std::equal(d->train.x.begin(), d->train.x.end(), full->train.x.begin()));
  EXPECT_TRUE(std::equal(d->test.y.begin(), d->test.y.end(), full->test.y.begin()));
  // A limit beyond the set keeps everything.
  cfg.train_limit = 1'000'000;
  auto all = load_dataset(cfg, 7);
  ASSERT_TRUE(all);
  EXPECT_EQ(all->train.rows, full->train.rows);
}

// --- idx files ------------------------------------------------------------------------------

TEST_F(dataset_files, idx_plain_and_gz_read_the_same) {
  const auto img = write("img", idx_images(4, 3, 2));
  const auto lab = write("lab", idx_labels({3, 0, 1, 2}));
  const auto img_gz = write_gz("img.gz", idx_images(4, 3, 2));
  const auto lab_gz = write_gz("lab.gz", idx_labels({3, 0, 1, 2}));
  auto plain = load_idx(img, lab);
  ASSERT_TRUE(plain) << plain.error().to_string();
  auto gz = load_idx(img_gz, lab_gz);
  ASSERT_TRUE(gz) << gz.error().to_string();
  EXPECT_EQ(plain->rows, 4u);
  EXPECT_EQ(plain->features, 6u);
  EXPECT_EQ(plain->classes, 4);
  EXPECT_EQ(plain->y, (std::vector<std::int32_t>{3, 0, 1, 2}));
  ASSERT_EQ(plain->x.size(), 24u);
  for (std::size_t i = 0; i < 4; ++i) {
    for (std::size_t k = 0; k < 6; ++k) {
      EXPECT_EQ(plain->x[i * 6 + k], float((i * 7 + k) % 256) / 255.0f);
    }
  }
  EXPECT_EQ(gz->x, plain->x);
  EXPECT_EQ(gz->y, plain->y);
  // Mixed: a gzipped image file with a plain label file.
  auto mixed = load_idx(img_gz, lab);
  ASSERT_TRUE(mixed);
  EXPECT_EQ(mixed->x, plain->x);
}

TEST_F(dataset_files, idx_directory_plain_or_gz) {
  for (bool gz : {false, true}) {
    SCOPED_TRACE(gz ? "gz" : "plain");
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    write_idx_dir(gz);
    dataset_config cfg;
    cfg.path = dir_.string();
    auto d = load_dataset(cfg, 1);
    ASSERT_TRUE(d) << d.error().to_string();
    EXPECT_EQ(d->train.rows, 5u);
    EXPECT_EQ(d->test.rows, 3u);
    EXPECT_EQ(d->train.features, 6u);
    EXPECT_EQ(d->train.classes, 3);
    EXPECT_EQ(d->test.classes, 3);
    EXPECT_EQ(d->test.y, (std::vector<std::int32_t>{2, 2, 1}));

    cfg.train_limit = 2;
    cfg.test_limit = 1;
    auto lim = load_dataset(cfg, 1);
    ASSERT_TRUE(lim) << lim.error().to_string();
    EXPECT_EQ(lim->train.rows, 2u);
    EXPECT_EQ(lim->train.x.size(), 12u);
    EXPECT_EQ(lim->train.y, (std::vector<std::int32_t>{0, 1}));
    EXPECT_TRUE(std::equal(lim->train.x.begin(), lim->train.x.end(), d->train.x.begin()));
    EXPECT_EQ(lim->test.rows, 1u);
    // Classes come from all training labels, not only the kept ones.
    EXPECT_EQ(lim->train.classes, 3);
  }
}

TEST_F(dataset_files, idx_missing_file) {
  const auto lab = write("lab", idx_labels({1, 0}));
  const std::string missing = (dir_ / "no-such-images").string();
  auto d = load_idx(missing, lab);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, errc::not_found);
  EXPECT_TRUE(has(d.error().message, missing));
  EXPECT_TRUE(has(d.error().message, "not found"));

  write_idx_dir(false);
  fs::remove(dir_ / "t10k-labels-idx1-ubyte");
  dataset_config cfg;
  cfg.path = dir_.string();
  auto p = load_dataset(cfg, 1);
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().code, errc::not_found);
  EXPECT_TRUE(has(p.error().message, "t10k-labels-idx1-ubyte"));

  cfg.path = (dir_ / "no-such-dir").string();
  auto q = load_dataset(cfg, 1);
  ASSERT_FALSE(q);
  EXPECT_EQ(q.error().code, errc::not_found);
  EXPECT_TRUE(has(q.error().message, cfg.path));
}

TEST_F(dataset_files, idx_truncated_header) {
  bytes b = idx_images(2, 2, 2);
  b.resize(10);
  const auto img = write("img", b);
  const auto lab = write("lab", idx_labels({1, 0}));
  auto d = load_idx(img, lab);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, errc::parse_error);
  EXPECT_TRUE(has(d.error().message, img));
  EXPECT_TRUE(has(d.error().message, "truncated header"));
  EXPECT_TRUE(has(d.error().message, "expected 16 bytes, got 10"));

  const auto empty = write("empty", bytes{});
  auto e = load_idx(empty, lab);
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().code, errc::parse_error);
  EXPECT_TRUE(has(e.error().message, "expected 16 bytes, got 0"));
}

TEST_F(dataset_files, idx_truncated_data) {
  bytes b = idx_images(3, 2, 2);  // 16 header bytes + 12 data bytes
  b.resize(16 + 7);
  const auto img = write("img", b);
  const auto lab = write("lab", idx_labels({1, 0, 1}));
  auto d = load_idx(img, lab);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, errc::parse_error);
  EXPECT_TRUE(has(d.error().message, img));
  EXPECT_TRUE(has(d.error().message, "truncated data"));
  EXPECT_TRUE(has(d.error().message, "expected 12 bytes"));
  EXPECT_TRUE(has(d.error().message, "got 7"));

  // The same for labels, and through gzip.
  const auto img_ok = write("img_ok", idx_images(3, 2, 2));
  bytes l = idx_labels({1, 0, 1});
  l.pop_back();
  const auto lab_gz = write_gz("lab.gz", l);
  auto e = load_idx(img_ok, lab_gz);
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().code, errc::parse_error);
  EXPECT_TRUE(has(e.error().message, lab_gz));
  EXPECT_TRUE(has(e.error().message, "expected 3 bytes"));
  EXPECT_TRUE(has(e.error().message, "got 2"));
}

TEST_F(dataset_files, idx_wrong_magic) {
  const auto lab = write("lab", idx_labels({1, 0}));
  // Labels given as images.
  auto d = load_idx(lab, lab);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, errc::parse_error);
  EXPECT_TRUE(has(d.error().message, lab));
  EXPECT_TRUE(has(d.error().message, "wrong magic 0x00000801"));
  EXPECT_TRUE(has(d.error().message, "expected 0x00000803"));

  const auto text = write("readme.txt", std::string_view("hello, this is not IDX\n"));
  const auto img = write("img", idx_images(2, 1, 1));
  auto e = load_idx(img, text);
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().code, errc::parse_error);
  EXPECT_TRUE(has(e.error().message, text));
  EXPECT_TRUE(has(e.error().message, "wrong magic 0x68656C6C"));
}

TEST_F(dataset_files, idx_count_mismatch) {
  const auto img = write("img", idx_images(3, 2, 2));
  const auto lab = write("lab", idx_labels({1, 0}));
  auto d = load_idx(img, lab);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, errc::invalid_argument);
  EXPECT_TRUE(has(d.error().message, img + " holds 3 images"));
  EXPECT_TRUE(has(d.error().message, lab + " holds 2 labels"));
}

TEST_F(dataset_files, idx_corrupt_gzip) {
  // Big enough that the damage lands inside the deflate stream.
  const auto good = write_gz("good.gz", idx_images(200, 8, 8));
  bytes b = read(good);
  ASSERT_GT(b.size(), 200u);
  for (std::size_t i = b.size() / 2; i < b.size() / 2 + 16; ++i) b[i] ^= 0x5a;
  const auto bad = write("bad.gz", b);
  std::vector<unsigned char> labels(200, 1);
  const auto lab = write("lab", idx_labels(labels));
  auto d = load_idx(bad, lab);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, errc::io_error);
  EXPECT_TRUE(has(d.error().message, bad));
  EXPECT_TRUE(has(d.error().message, "corrupt gzip"));

  // A gzip stream cut in the middle.
  bytes cut = read(good);
  cut.resize(cut.size() / 2);
  const auto cut_path = write("cut.gz", cut);
  auto e = load_idx(cut_path, lab);
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().code, errc::io_error);
  EXPECT_TRUE(has(e.error().message, cut_path));
  EXPECT_TRUE(has(e.error().message, "corrupt gzip"));
}

TEST_F(dataset_files, idx_test_label_outside_training_classes) {
  write_idx_dir(false);
  write("t10k-labels-idx1-ubyte", idx_labels({2, 7, 1}));
  dataset_config cfg;
  cfg.path = dir_.string();
  auto d = load_dataset(cfg, 1);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, errc::invalid_argument);
  EXPECT_TRUE(has(d.error().message, "t10k-labels-idx1-ubyte"));
  EXPECT_TRUE(has(d.error().message, "test label 7"));
  EXPECT_TRUE(has(d.error().message, "[0, 3)"));
}

TEST_F(dataset_files, idx_directory_expected) {
  const auto file = write("not-a-dir", std::string_view("x"));
  dataset_config cfg;
  cfg.path = file;
  auto d = load_dataset(cfg, 1);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, errc::invalid_argument);
  EXPECT_TRUE(has(d.error().message, file));

  auto e = load_idx(dir_.string(), file);
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().code, errc::io_error);
  EXPECT_TRUE(has(e.error().message, "is a directory"));
}

// --- csv files ------------------------------------------------------------------------------

dataset_config csv_config(const std::string& path, double test_fraction = 0.5) {
  dataset_config cfg;
  cfg.format = dataset_format::csv;
  cfg.path = path;
  cfg.test_fraction = test_fraction;
  return cfg;
}

TEST_F(dataset_files, csv_plain_and_gz) {
  const std::string_view text = "0,4,8,0\r\n8,2,0,1\r\n\n1,1,1,2\n 3 , 0 ,+2,1\n";
  for (bool gz : {false, true}) {
    SCOPED_TRACE(gz ? "gz" : "plain");
    const auto path = gz ? write_gz("d.csv.gz", text) : write("d.csv", text);
    auto d = load_dataset(csv_config(path), 5);
    ASSERT_TRUE(d) << d.error().to_string();
    EXPECT_EQ(d->train.rows, 2u);
    EXPECT_EQ(d->test.rows, 2u);
    EXPECT_EQ(d->train.features, 3u);
    EXPECT_EQ(d->train.classes, 3);
    EXPECT_EQ(d->test.classes, 3);
    // Scaled by the largest feature, 8; every original row appears once.
    std::vector<std::vector<float>> rows;
    for (const dataset* s : {&d->train, &d->test}) {
      for (std::size_t r = 0; r < s->rows; ++r) {
        std::vector<float> row(s->x.begin() + long(r * 3), s->x.begin() + long(r * 3 + 3));
        row.push_back(float(s->y[r]));
        rows.push_back(row);
      }
    }
    std::sort(rows.begin(), rows.end());
    EXPECT_EQ(rows, (std::vector<std::vector<float>>{{0.0f, 0.5f, 1.0f, 0.0f},
                                                     {0.125f, 0.125f, 0.125f, 2.0f},
                                                     {0.375f, 0.0f, 0.25f, 1.0f},
                                                     {1.0f, 0.25f, 0.0f, 1.0f}}));
  }
}

TEST_F(dataset_files, a_shared_load_is_one_copy_while_held_and_fresh_once_let_go) {
  const auto path = write("s.csv", std::string_view("0,4,8,0\n8,2,0,1\n1,1,1,2\n3,0,2,1\n"));
  auto a = load_dataset_shared(csv_config(path), 5);
  ASSERT_TRUE(a) << a.error().to_string();
  auto b = load_dataset_shared(csv_config(path), 5);
  ASSERT_TRUE(b);
  EXPECT_EQ(a->get(), b->get()) << "one copy for the same file, split and seed";
  auto other_seed = load_dataset_shared(csv_config(path), 6);
  ASSERT_TRUE(other_seed);
  EXPECT_NE(a->get(), other_seed->get()) << "the csv split depends on the seed";
  auto other_split = load_dataset_shared(csv_config(path, 0.25), 5);
  ASSERT_TRUE(other_split);
  EXPECT_NE(a->get(), other_split->get());
  EXPECT_EQ(other_split->get()->test.rows, 1u);
  // Let go of every copy and change the file: the next load reads the new file.
  a->reset();
  b->reset();
  write("s.csv", std::string_view("0,4,8,0\n8,2,0,1\n1,1,1,2\n3,0,2,1\n5,5,5,0\n7,1,1,2\n"));
  auto c = load_dataset_shared(csv_config(path), 5);
  ASSERT_TRUE(c);
  EXPECT_EQ((*c)->train.rows + (*c)->test.rows, 6u);
  auto missing = load_dataset_shared(csv_config((dir_ / "none.csv").string()), 5);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, errc::not_found);
}

TEST_F(dataset_files, csv_ragged_row_names_the_line) {
  const auto path = write("r.csv", std::string_view("1,2,3,0\n4,5,6,1\n7,8,1\n"));
  auto d = load_dataset(csv_config(path), 1);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, errc::parse_error);
  EXPECT_TRUE(has(d.error().message, path));
  EXPECT_TRUE(has(d.error().message, "line 3"));
  EXPECT_TRUE(has(d.error().message, "3 columns, expected 4"));

  const auto longer = write("l.csv", std::string_view("1,2,0\n\n1,2,3,4,1\n"));
  auto e = load_dataset(csv_config(longer), 1);
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().code, errc::parse_error);
  EXPECT_TRUE(has(e.error().message, "line 3"));
  EXPECT_TRUE(has(e.error().message, "5 columns, expected 3"));
}

TEST_F(dataset_files, csv_non_number_names_line_and_column) {
  const auto path = write("n.csv", std::string_view("1,2,3,0\n4,5,abc,1\n"));
  auto d = load_dataset(csv_config(path), 1);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, errc::parse_error);
  EXPECT_TRUE(has(d.error().message, path));
  EXPECT_TRUE(has(d.error().message, "line 2, column 3"));
  EXPECT_TRUE(has(d.error().message, "'abc' is not a number"));

  const auto empty_field = write("e.csv", std::string_view("1,,3,0\n"));
  auto e = load_dataset(csv_config(empty_field), 1);
  ASSERT_FALSE(e);
  EXPECT_TRUE(has(e.error().message, "line 1, column 2"));
}

TEST_F(dataset_files, csv_label_must_be_a_non_negative_integer) {
  for (std::string_view bad : {"1.5", "-1", "70000"}) {
    SCOPED_TRACE(bad);
    const auto path = write("l.csv", "1,2,0\n3,4," + std::string(bad) + "\n");
    auto d = load_dataset(csv_config(path), 1);
    ASSERT_FALSE(d);
    EXPECT_EQ(d.error().code, errc::parse_error);
    EXPECT_TRUE(has(d.error().message, "line 2, column 3"));
    EXPECT_TRUE(has(d.error().message, "label " + std::string(bad)));
  }
}

TEST_F(dataset_files, csv_test_fraction_out_of_range) {
  const auto path = write("d.csv", std::string_view("1,0\n2,1\n3,0\n4,1\n"));
  for (double f : {0.0, 1.0, -0.1, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    SCOPED_TRACE(f);
    auto d = load_dataset(csv_config(path, f), 1);
    ASSERT_FALSE(d);
    EXPECT_EQ(d.error().code, errc::invalid_argument);
    EXPECT_TRUE(has(d.error().message, "test_fraction"));
    EXPECT_TRUE(has(d.error().message, "(0, 1)"));
  }
  // In range but leaving one side empty.
  auto d = load_dataset(csv_config(path, 0.05), 1);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, errc::invalid_argument);
  EXPECT_TRUE(has(d.error().message, "test set empty"));
}

TEST_F(dataset_files, csv_missing_and_empty_files) {
  const std::string missing = (dir_ / "none.csv").string();
  auto d = load_dataset(csv_config(missing), 1);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, errc::not_found);
  EXPECT_TRUE(has(d.error().message, missing));

  const auto empty = write("empty.csv", std::string_view("\n\n"));
  auto e = load_dataset(csv_config(empty), 1);
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().code, errc::parse_error);
  EXPECT_TRUE(has(e.error().message, "no data rows"));

  const auto one = write("one.csv", std::string_view("1\n2\n"));
  auto f = load_dataset(csv_config(one), 1);
  ASSERT_FALSE(f);
  EXPECT_EQ(f.error().code, errc::parse_error);
  EXPECT_TRUE(has(f.error().message, "line 1"));

  dataset_config cfg = csv_config("");
  auto g = load_dataset(cfg, 1);
  ASSERT_FALSE(g);
  EXPECT_EQ(g.error().code, errc::invalid_argument);
}

TEST(dataset_format_names, round_trip) {
  for (auto f : {dataset_format::idx, dataset_format::csv}) {
    auto p = parse_dataset_format(to_string(f));
    ASSERT_TRUE(p);
    EXPECT_EQ(*p, f);
  }
  auto bad = parse_dataset_format("parquet");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, errc::invalid_argument);
  EXPECT_TRUE(has(bad.error().message, "'parquet'"));
}

}  // namespace
}  // namespace coach::worker
