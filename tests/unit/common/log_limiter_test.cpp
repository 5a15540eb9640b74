// coach::log_limiter: a flood of bad input logs at most N lines a second, and says how many it
// held back.
#include "common/log_limiter.hpp"

#include <gtest/gtest.h>

namespace {

using namespace std::chrono_literals;

TEST(log_limiter, lets_n_lines_a_second_through_and_counts_the_rest) {
  coach::log_limiter limit(5);
  const auto t0 = coach::log_limiter::clock::time_point{} + 10s;
  int logged = 0;
  for (int i = 0; i < 1000; ++i)
    if (auto s = limit.allow(t0 + i * 1ms)) {  // 1000 lines within one second
      EXPECT_EQ(*s, "");
      ++logged;
    }
  EXPECT_EQ(logged, 5);
  EXPECT_EQ(limit.held_total(), 995u);
  // The next second's first line says what the previous one held back.
  auto s = limit.allow(t0 + 1500ms);
  ASSERT_TRUE(s);
  EXPECT_EQ(*s, " (995 more like it not logged)");
  s = limit.allow(t0 + 1501ms);
  ASSERT_TRUE(s);
  EXPECT_EQ(*s, "") << "said once";
}

}  // namespace
