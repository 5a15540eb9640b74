// worker::load_dataset with format ctr: the last test_fraction of the file is the test set, in
// file order; dense features are log(1 + x), labels 0/1, categorical values kept per row
// (ctr_missing where empty); limits, normalization and the split's errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "worker/ctr_data.hpp"
#include "worker/dataset.hpp"

namespace coach::worker {
namespace {

namespace fs = std::filesystem;

class dataset_ctr_test : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ =
        (fs::temp_directory_path() / ("dataset_ctr_test_" + std::to_string(::getpid()))).string();
    // Five rows of 2 integers and 3 categorical values; row r's first integer is r.
    std::ofstream(path_) << "1\t0\t5\ta\tb\tc\n"
                            "0\t1\t\t10\t\t20\n"
                            "1\t2\t7\tff\tfe\tfd\n"
                            "0\t3\t-1\t1\t2\t3\n"
                            "1\t4\t0\t\t0\tffffffe\n";
  }
  void TearDown() override { fs::remove(path_); }

  dataset_config config() const {
    dataset_config c;
    c.format = dataset_format::ctr;
    c.path = path_;
    c.n_dense = 2;
    c.n_fields = 3;
    c.test_fraction = 0.4;
    c.normalize = normalization::none;
    return c;
  }

  std::string path_;
};

TEST_F(dataset_ctr_test, the_last_rows_are_the_test_set_and_the_categories_are_kept) {
  auto d = load_dataset(config(), 123);
  ASSERT_TRUE(d) << d.error().message;
  const dataset& train = d->train;
  const dataset& test = d->test;
  EXPECT_EQ(train.rows, 3u);
  EXPECT_EQ(test.rows, 2u);
  for (const dataset* s : {&train, &test}) {
    EXPECT_EQ(s->features, 2u);
    EXPECT_EQ(s->fields, 3u);
    EXPECT_EQ(s->classes, 2);
    EXPECT_EQ(s->shape, (std::array<int, 3>{0, 0, 0}));
  }
  EXPECT_EQ(train.y, (std::vector<std::int32_t>{1, 0, 1}));
  EXPECT_EQ(test.y, (std::vector<std::int32_t>{0, 1}));
  const auto l = [](double v) { return float(std::log1p(v)); };
  EXPECT_EQ(train.x, (std::vector<float>{0, l(5), l(1), 0, l(2), l(7)}));
  EXPECT_EQ(test.x, (std::vector<float>{l(3), 0, l(4), 0}));
  EXPECT_EQ(train.categorical,
            (std::vector<std::uint32_t>{0xa, 0xb, 0xc, 0x10, ctr_missing, 0x20, 0xff, 0xfe, 0xfd}));
  EXPECT_EQ(test.categorical, (std::vector<std::uint32_t>{1, 2, 3, ctr_missing, 0, 0xffffffe}));
  EXPECT_EQ(d->transform.kind, normalization::none);
  // The seed plays no part: the split is the file's order.
  auto other = load_dataset(config(), 7);
  ASSERT_TRUE(other);
  EXPECT_EQ(other->test.categorical, test.categorical);
}

TEST_F(dataset_ctr_test, limits_keep_the_first_rows_of_each_part_and_normalize_applies) {
  auto c = config();
  c.train_limit = 2;
  c.test_limit = 1;
  c.normalize = normalization::max;
  auto d = load_dataset(c, 1);
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_EQ(d->train.rows, 2u);
  EXPECT_EQ(d->test.rows, 1u);
  EXPECT_EQ(d->train.categorical.size(), 6u);
  EXPECT_EQ(d->test.categorical, (std::vector<std::uint32_t>{1, 2, 3}));
  EXPECT_EQ(d->test.y, std::vector<std::int32_t>{0});
  // max over the rows kept, both sets: log(1 + 7) is not among them (row 2 is past the limit).
  const float largest = float(std::log1p(5.0));
  EXPECT_EQ(d->train.x[1], 1.0f);
  EXPECT_EQ(d->test.x[0], float(std::log1p(3.0)) / largest);
}

TEST_F(dataset_ctr_test, a_split_that_empties_a_set_and_a_bad_file_are_errors) {
  auto c = config();
  c.test_fraction = 0.05;
  EXPECT_EQ(load_dataset(c, 1).error().message,
            path_ + ": test_fraction 0.05 of 5 rows leaves the test set empty");
  c.test_fraction = 0.2;
  c.n_fields = 2;
  auto bad = load_dataset(c, 1);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, errc::parse_error);
  EXPECT_NE(bad.error().message.find(path_), std::string::npos) << bad.error().message;
  EXPECT_EQ(to_string(dataset_format::ctr), "ctr");
  EXPECT_EQ(*parse_dataset_format("ctr"), dataset_format::ctr);
}

}  // namespace
}  // namespace coach::worker
