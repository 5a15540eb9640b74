// worker::host_reducer: the deposit that completes a step's local members gets the sum, taken in
// rank order whoever arrives last; the leader is the lowest local member; only the local members
// named are waited for; bad deposits are refused with the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "worker/host_reducer.hpp"

namespace coach::worker {
namespace {

constexpr std::size_t n = 1000;

std::shared_ptr<const float_buffer> gradient(std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen) * float(1 << (seed % 7));  // magnitudes that round differently
  return std::make_shared<const float_buffer>(std::move(v));
}

TEST(host_reducer, the_last_deposit_gets_the_rank_order_sum_whatever_the_order) {
  const std::vector<std::uint32_t> members = {0, 1, 2};  // of {0, 1, 2, 3, 5}: 3, 5 elsewhere
  std::vector<std::shared_ptr<const float_buffer>> g = {gradient(1), gradient(2), gradient(3)};
  std::vector<float> expected(n);
  for (std::size_t i = 0; i < n; ++i)
    expected[i] = (g[0]->data()[i] + g[1]->data()[i]) + g[2]->data()[i];
  std::vector<std::uint32_t> order = {0, 1, 2};
  std::int64_t step = 0;
  do {
    host_reducer red(n);
    for (std::size_t i = 0; i < order.size(); ++i) {
      const std::uint32_t r = order[i];
      auto out = red.deposit(step, members, r, 10 + r, g[r]);
      ASSERT_TRUE(out) << out.error().message;
      EXPECT_EQ(out->leader, 0u);
      EXPECT_EQ(out->complete, i + 1 == order.size()) << "deposit " << i;
      if (!out->complete) continue;
      EXPECT_EQ(out->samples, 10u + 11u + 12u);
      ASSERT_TRUE(out->sum);
      EXPECT_EQ(0, std::memcmp(out->sum->data(), expected.data(), n * sizeof(float)))
          << "order " << order[0] << order[1] << order[2];
    }
    EXPECT_EQ(red.open_steps(), 0u);
    ++step;
  } while (std::next_permutation(order.begin(), order.end()));
}

TEST(host_reducer, members_without_samples_count_and_one_gradient_is_passed_on_uncopied) {
  host_reducer red(n);
  const std::vector<std::uint32_t> members = {4, 7};
  auto g = gradient(9);
  auto first = red.deposit(3, members, 7, 0, nullptr);  // no chunk for rank 7 this step
  ASSERT_TRUE(first);
  EXPECT_FALSE(first->complete);
  EXPECT_EQ(first->leader, 4u);
  auto last = red.deposit(3, members, 4, 64, g);
  ASSERT_TRUE(last);
  EXPECT_TRUE(last->complete);
  EXPECT_EQ(last->samples, 64u);
  EXPECT_EQ(last->sum.get(), g.get());
  // No local member had data: complete, nothing to push but empties.
  ASSERT_TRUE(red.deposit(4, members, 4, 0, nullptr));
  auto none = red.deposit(4, members, 7, 0, nullptr);
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->complete);
  EXPECT_EQ(none->samples, 0u);
  EXPECT_FALSE(none->sum);
}

TEST(host_reducer, only_the_named_local_members_are_waited_for) {
  host_reducer red(n);
  // Step 5's configuration keeps 0 and 2 here (1 left at 5).
  ASSERT_FALSE(red.deposit(5, std::vector<std::uint32_t>{0, 2}, 0, 1, gradient(1))->complete);
  EXPECT_TRUE(red.deposit(5, std::vector<std::uint32_t>{0, 2}, 2, 1, gradient(2))->complete);
  // Step 6: rank 2 is the only local member: it leads and completes alone.
  auto alone = red.deposit(6, std::vector<std::uint32_t>{2}, 2, 1, gradient(3));
  ASSERT_TRUE(alone);
  EXPECT_TRUE(alone->complete);
  EXPECT_EQ(alone->leader, 2u);
  EXPECT_EQ(red.open_steps(), 0u);
}

TEST(host_reducer, bad_deposits_are_refused_with_the_reason) {
  host_reducer red(n);
  const std::vector<std::uint32_t> members = {0, 1};
  auto stranger = red.deposit(0, members, 2, 1, gradient(1));
  ASSERT_FALSE(stranger);
  EXPECT_EQ(stranger.error().message, "host reduction: rank 2 is not a local member of step 0");
  auto small = std::make_shared<const float_buffer>(std::vector<float>(10));
  auto wrong = red.deposit(0, members, 0, 1, small);
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.error().message,
            "host reduction: rank 0 deposits a gradient of 10 floats, not 1000");
  ASSERT_TRUE(red.deposit(0, members, 0, 1, gradient(1)));
  auto twice = red.deposit(0, members, 0, 1, gradient(1));
  ASSERT_FALSE(twice);
  EXPECT_EQ(twice.error().message, "host reduction: rank 0 deposits step 0 twice");
  EXPECT_EQ(red.open_steps(), 1u);
}

}  // namespace
}  // namespace coach::worker
