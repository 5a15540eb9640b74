// master::snapshot_assembler: versions are asked of the shards once and in order, a version is
// whole when every key arrived exactly once from any number of pieces, late answers are ignored,
// bad pieces are refused with the reason, and an epoch's reopened end forgets its version.
#include "master/snapshot_assembler.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace coach::master {
using namespace coach::ps;
namespace {

TEST(snapshot_assembler, asks_each_version_once_and_assembles_it_from_pieces) {
  snapshot_assembler a(6);
  a.request(10, 0, false);
  a.request(4, 0, false);
  a.request(20, 1, false);
  EXPECT_FALSE(a.asked(10)) << "wanted, not asked yet";
  EXPECT_EQ(a.to_ask(12), (std::vector<std::int64_t>{4, 10}));
  EXPECT_TRUE(a.asked(10));
  EXPECT_FALSE(a.asked(20));
  EXPECT_FALSE(a.asked(11)) << "never wanted";
  EXPECT_TRUE(a.to_ask(12).empty()) << "asked once";
  EXPECT_EQ(a.to_ask(20), (std::vector<std::int64_t>{20}));

  const std::vector<float> low{1, 2}, high{5, 6}, mid{3, 4};
  const key_range r1[] = {{0, 2}, {4, 6}};
  const std::span<const float> p1[] = {low, high};
  auto first = a.add(10, r1, p1);
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_FALSE(*first) << "keys [2, 4) missing";
  const key_range r2[] = {{2, 4}};
  const std::span<const float> p2[] = {mid};
  auto whole = a.add(10, r2, p2);
  ASSERT_TRUE(whole) << whole.error().message;
  ASSERT_TRUE(*whole);
  EXPECT_EQ((*whole)->version, 10);
  EXPECT_EQ((*whole)->epoch, 0u);
  EXPECT_FALSE((*whole)->final);
  EXPECT_EQ(*(*whole)->values, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(a.pending(), 2u);
  EXPECT_FALSE(a.asked(10)) << "whole: no longer asked";

  auto late = a.add(10, r2, p2);  // a version no longer wanted
  ASSERT_TRUE(late);
  EXPECT_FALSE(*late);
}

TEST(snapshot_assembler, refuses_bad_pieces_with_the_reason_and_takes_nothing_of_them) {
  snapshot_assembler a(4);
  a.request(3, 0, true);
  const std::vector<float> three{1, 2, 3}, two{1, 2}, four{1, 2, 3, 4};
  const key_range short_range[] = {{0, 2}};
  const std::span<const float> too_long[] = {three};
  auto wrong = a.add(3, short_range, too_long);
  ASSERT_FALSE(wrong);
  EXPECT_NE(wrong.error().message.find("piece 0 has 3 floats for range [0, 2)"), std::string::npos)
      << wrong.error().message;
  const key_range past[] = {{3, 5}};
  const std::span<const float> p_two[] = {two};
  EXPECT_FALSE(a.add(3, past, p_two)) << "keys past the vector";
  const key_range first[] = {{0, 2}};
  ASSERT_TRUE(a.add(3, first, p_two));
  auto twice = a.add(3, first, p_two);
  EXPECT_FALSE(twice) << "keys already received";
  const key_range all[] = {{0, 4}};
  const std::span<const float> p_four[] = {four};
  EXPECT_FALSE(a.add(3, all, p_four)) << "overlaps what arrived";
  const key_range rest[] = {{2, 4}};
  auto done = a.add(3, rest, p_two);
  ASSERT_TRUE(done);
  ASSERT_TRUE(*done);
  EXPECT_TRUE((*done)->final);
  EXPECT_EQ(*(*done)->values, (std::vector<float>{1, 2, 1, 2}));
}

TEST(snapshot_assembler, a_reopened_epoch_forgets_its_version_but_not_the_final_one) {
  snapshot_assembler a(2);
  a.request(8, 2, false);
  a.request(9, 3, false);
  a.request(5, 2, true);  // the job's last version, cancelled during epoch 2
  a.request(9, 3, true);  // asked again as final: stays, final
  a.reopen({2, 3});
  EXPECT_EQ(a.pending(), 2u);
  EXPECT_EQ(a.to_ask(100), (std::vector<std::int64_t>{5, 9}));
}

}  // namespace
}  // namespace coach::master
