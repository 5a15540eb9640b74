// worker::ctr_data: the Criteo layout read with its transforms (log(1 + x), missing cells),
// plain and gzipped, with a row limit; and every malformed row gets an error naming the file,
// the line and the column.

#include "worker/ctr_data.hpp"

#include <gtest/gtest.h>
#include <zlib.h>

#include <unistd.h>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

namespace coach::worker {
namespace {

namespace fs = std::filesystem;

class ctr_data_test : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ctr_data_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  std::string write_gz(const std::string& name, const std::string& text) {
    const std::string p = (dir_ / name).string();
    gzFile f = gzopen(p.c_str(), "wb");
    gzwrite(f, text.data(), unsigned(text.size()));
    gzclose(f);
    return p;
  }
  /// Options for a small layout: 2 integer and 3 categorical columns.
  static ctr_options small(const std::string& path) {
    ctr_options o;
    o.path = path;
    o.n_dense = 2;
    o.n_fields = 3;
    return o;
  }
  std::string error_of(const ctr_options& o) {
    auto r = load_ctr(o);
    return r ? std::string("no error") : r.error().message;
  }

  fs::path dir_;
};

// Two rows: the second has a missing integer, a negative one, and missing categorical cells.
const std::string two_rows =
    "1\t5\t0\t68fd1e64\t80e26c9b\tfb936136\n"
    "0\t\t-3\t\t0A\t\r\n";

TEST_F(ctr_data_test, reads_labels_transformed_integers_and_hex_values_with_missing_cells) {
  auto set = load_ctr(small(write("a.tsv", two_rows)));
  ASSERT_TRUE(set) << set.error().message;
  EXPECT_EQ(set->rows, 2u);
  EXPECT_EQ(set->n_dense, 2u);
  EXPECT_EQ(set->n_fields, 3u);
  EXPECT_EQ(set->labels, (std::vector<float>{1, 0}));
  EXPECT_EQ(set->dense, (std::vector<float>{float(std::log1p(5.0)), 0, 0, 0}));
  EXPECT_EQ(set->categorical, (std::vector<std::uint32_t>{0x68fd1e64, 0x80e26c9b, 0xfb936136,
                                                          ctr_missing, 0x0a, ctr_missing}));
  EXPECT_EQ(set->dense_row(0)[0], float(std::log1p(5.0)));
  EXPECT_EQ(set->categorical_row(1)[1], 0x0au);
}

TEST_F(ctr_data_test, the_dense_transform_is_dlrms) {
  EXPECT_EQ(ctr_dense_transform(0), 0.0f);
  EXPECT_EQ(ctr_dense_transform(-1), 0.0f);
  EXPECT_EQ(ctr_dense_transform(1), float(std::log(2.0)));
  EXPECT_EQ(ctr_dense_transform(999), float(std::log(1000.0)));
}

TEST_F(ctr_data_test, a_gzipped_file_reads_the_same_and_the_row_limit_stops_early) {
  auto plain = load_ctr(small(write("a.tsv", two_rows)));
  auto gz = load_ctr(small(write_gz("a.tsv.gz", two_rows)));
  ASSERT_TRUE(plain && gz) << (gz ? plain.error().message : gz.error().message);
  EXPECT_EQ(gz->labels, plain->labels);
  EXPECT_EQ(gz->dense, plain->dense);
  EXPECT_EQ(gz->categorical, plain->categorical);
  // A row limit of 1 never reads the broken third line.
  auto o = small(write("b.tsv", two_rows + "7\n"));
  o.max_rows = 1;
  auto one = load_ctr(o);
  ASSERT_TRUE(one) << one.error().message;
  EXPECT_EQ(one->rows, 1u);
  EXPECT_EQ(one->categorical.size(), 3u);
}

TEST_F(ctr_data_test, the_criteo_default_is_13_integers_and_26_categories) {
  std::string row = "0";
  for (int i = 0; i < 13; ++i) row += "\t" + std::to_string(i);
  for (int f = 0; f < 26; ++f) row += "\t" + std::string(f % 2 ? "05db9164" : "");
  ctr_options o;
  o.path = write("criteo.tsv", row + "\n\n" + row + "\n");  // a blank line is skipped
  auto set = load_ctr(o);
  ASSERT_TRUE(set) << set.error().message;
  EXPECT_EQ(set->rows, 2u);
  EXPECT_EQ(set->dense[12], float(std::log1p(12.0)));
  EXPECT_EQ(set->categorical[0], ctr_missing);
  EXPECT_EQ(set->categorical[1], 0x05db9164u);
}

TEST_F(ctr_data_test, each_malformed_row_names_the_file_line_and_column) {
  const std::string good = "1\t5\t0\t68fd1e64\t80e26c9b\tfb936136\n";
  std::string p = write("cols.tsv", good + "1\t5\t0\t68fd1e64\t80e26c9b\n");
  EXPECT_EQ(error_of(small(p)),
            p + ": line 2: row has 5 tab-separated columns, expected 6 (the label, 2 integer and "
                "3 categorical)");
  p = write("label.tsv", "2\t5\t0\t1\t2\t3\n");
  EXPECT_EQ(error_of(small(p)), p + ": line 1, column 1: label '2' must be 0 or 1");
  p = write("label2.tsv", good + "\t5\t0\t1\t2\t3\n");
  EXPECT_EQ(error_of(small(p)), p + ": line 2, column 1: label '' must be 0 or 1");
  p = write("int.tsv", "0\t5\t1.5\t1\t2\t3\n");
  EXPECT_EQ(error_of(small(p)), p + ": line 1, column 3 (I2): '1.5' is not an integer");
  p = write("int2.tsv", "0\tabc\t1\t1\t2\t3\n");
  EXPECT_EQ(error_of(small(p)), p + ": line 1, column 2 (I1): 'abc' is not an integer");
  p = write("hex.tsv", "0\t5\t1\t1\tzz12\t3\n");
  EXPECT_EQ(error_of(small(p)),
            p + ": line 1, column 5 (C2): 'zz12' is not a categorical value (1 to 8 hex digits)");
  p = write("hex9.tsv", "0\t5\t1\t1\t2\t123456789\n");
  EXPECT_EQ(error_of(small(p)),
            p + ": line 1, column 6 (C3): '123456789' is not a categorical value (1 to 8 hex "
                "digits)");
  p = write("reserved.tsv", "0\t5\t1\tffffffff\t2\t3\n");
  EXPECT_EQ(error_of(small(p)),
            p + ": line 1, column 4 (C1): ffffffff is reserved for a missing value");
  p = write("empty.tsv", "\n\n");
  EXPECT_EQ(error_of(small(p)), p + ": no data rows");
  const std::string missing = (dir_ / "missing.tsv").string();
  EXPECT_EQ(load_ctr(small(missing)).error().code, errc::not_found);
  auto none = small(p);
  none.n_dense = none.n_fields = 0;
  EXPECT_EQ(error_of(none), p + ": a CTR row needs integer or categorical columns");
}

}  // namespace
}  // namespace coach::worker
