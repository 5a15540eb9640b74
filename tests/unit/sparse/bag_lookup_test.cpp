#include "sparse/bag_lookup.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace coach::sparse {
namespace {

TEST(BagLookup, UniqueRowsAreAscendingAndEachLookupFindsItsRow) {
  const std::vector<std::uint64_t> ids = {9, 3, 9, 1000000007, 3, 0};
  const auto r = unique_rows(ids);
  EXPECT_EQ(r.rows, (std::vector<std::uint64_t>{0, 3, 9, 1000000007}));
  EXPECT_EQ(r.local, (std::vector<std::uint32_t>{2, 1, 2, 3, 1, 0}));
  EXPECT_TRUE(unique_rows({}).rows.empty());
}

// Two samples into a table of dim 2 written at column 1 of a 4-wide output: sample 0's bag is
// rows {a, b, a}, sample 1's is empty, sample 2's is {b}.
TEST(BagLookup, ForwardPoolsEachBagBySumOrMean) {
  const std::vector<std::uint32_t> offsets = {0, 3, 3, 4};
  const std::vector<std::uint32_t> local = {0, 1, 0, 1};
  const std::vector<float> pulled = {1, 2, 10, 20};  // a = (1, 2), b = (10, 20)
  std::vector<float> out(12, -1.0f);
  bag_forward(pooling::sum, offsets, local, pulled, 2, {out, 4, 1});
  EXPECT_EQ(out, (std::vector<float>{-1, 12, 24, -1, -1, 0, 0, -1, -1, 10, 20, -1}));
  bag_forward(pooling::mean, offsets, local, pulled, 2, {out, 4, 1});
  EXPECT_FLOAT_EQ(out[1], 4.0f);
  EXPECT_FLOAT_EQ(out[2], 8.0f);
  EXPECT_EQ(out[5], 0.0f) << "an empty bag gives zeros";
  EXPECT_EQ(out[9], 10.0f);
}

// Backward is the derivative of forward: a loss L = sum c_i out_i, its gradient with respect to
// each pulled element measured by central differences matches bag_backward's.
TEST(BagLookup, BackwardIsForwardsDerivative) {
  for (const auto p : {pooling::sum, pooling::mean}) {
    const std::vector<std::uint32_t> offsets = {0, 2, 5, 5, 6};
    const std::vector<std::uint32_t> local = {0, 2, 1, 2, 2, 0};
    const std::size_t dim = 3, batch = 4, rows = 3;
    std::vector<float> pulled(rows * dim);
    for (std::size_t i = 0; i < pulled.size(); ++i) pulled[i] = 0.1f * float(i) - 0.3f;
    std::vector<float> c(batch * dim);
    for (std::size_t i = 0; i < c.size(); ++i) c[i] = std::sin(float(i) + 1);
    const auto loss = [&](const std::vector<float>& w) {
      std::vector<float> out(batch * dim);
      bag_forward(p, offsets, local, w, dim, {out, dim, 0});
      double l = 0;
      for (std::size_t i = 0; i < out.size(); ++i) l += double(c[i]) * out[i];
      return l;
    };
    std::vector<float> grad(rows * dim);
    bag_backward(p, offsets, local, c.data(), dim, 0, dim, grad);
    for (std::size_t i = 0; i < pulled.size(); ++i) {
      auto plus = pulled, minus = pulled;
      plus[i] += 1e-2f;
      minus[i] -= 1e-2f;
      const double numeric = (loss(plus) - loss(minus)) / 2e-2;
      EXPECT_NEAR(grad[i], numeric, 1e-4) << to_string(p) << " element " << i;
    }
  }
}

TEST(BagLookup, PoolingParsesItsTwoNames) {
  EXPECT_EQ(parse_pooling("sum").value(), pooling::sum);
  EXPECT_EQ(parse_pooling("mean").value(), pooling::mean);
  EXPECT_EQ(parse_pooling("max").error().message, "pooling 'max' is not one of sum, mean");
}

}  // namespace
}  // namespace coach::sparse
