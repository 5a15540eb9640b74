// master/chunk_dispenser: every sample of an epoch exactly once, chunks given back handed out
// again and counted once, and a shuffle that depends on the seed and the epoch only.
#include "master/chunk_dispenser.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

namespace coach::master {
namespace {

TEST(chunk_dispenser, every_sample_of_an_epoch_exactly_once) {
  chunk_dispenser d(1000, 64, 9);
  for (std::uint32_t epoch = 0; epoch < 3; ++epoch) {
    d.begin_epoch(epoch);
    EXPECT_EQ(d.chunks_per_epoch(), 16u);
    std::multiset<std::uint32_t> seen;
    std::vector<chunk> out;
    while (auto c = d.take()) out.push_back(*c);
    EXPECT_TRUE(d.exhausted());
    EXPECT_FALSE(d.epoch_done());
    for (const auto& c : out) {
      for (auto i : d.indices(c)) seen.insert(i);
      EXPECT_TRUE(d.complete(c));
    }
    EXPECT_TRUE(d.epoch_done());
    EXPECT_EQ(d.samples_completed(), 1000u);
    ASSERT_EQ(seen.size(), 1000u);
    EXPECT_EQ(std::set<std::uint32_t>(seen.begin(), seen.end()).size(), 1000u);
  }
}

TEST(chunk_dispenser, given_back_chunks_are_handed_out_again_and_counted_once) {
  chunk_dispenser d(100, 10, 1);
  d.begin_epoch(0);
  auto a = *d.take();
  auto b = *d.take();
  d.give_back(a);
  auto again = *d.take();
  EXPECT_EQ(again.id, a.id);
  EXPECT_TRUE(d.complete(again));
  EXPECT_FALSE(d.complete(again));  // twice: not counted
  EXPECT_FALSE(d.complete(a));
  EXPECT_TRUE(d.complete(b));
  EXPECT_EQ(d.samples_completed(), 20u);
}

TEST(chunk_dispenser, shuffle_depends_on_seed_and_epoch_only) {
  chunk_dispenser a(500, 50, 3), b(500, 50, 3), c(500, 50, 4);
  a.begin_epoch(1);
  b.begin_epoch(1);
  c.begin_epoch(1);
  auto ca = *a.take(), cb = *b.take(), cc = *c.take();
  EXPECT_TRUE(std::ranges::equal(a.indices(ca), b.indices(cb)));
  EXPECT_FALSE(std::ranges::equal(a.indices(ca), c.indices(cc)));
  a.begin_epoch(2);
  auto next = *a.take();
  EXPECT_FALSE(std::ranges::equal(a.indices(next), b.indices(cb)));
}

TEST(portable_shuffle, is_reproducible_and_a_permutation) {
  std::vector<std::uint32_t> v(100);
  std::iota(v.begin(), v.end(), 0u);
  auto w = v;
  portable_shuffle(v, 11);
  portable_shuffle(w, 11);
  EXPECT_EQ(v, w);
  auto sorted = v;
  std::sort(sorted.begin(), sorted.end());
  for (std::uint32_t i = 0; i < 100; ++i) EXPECT_EQ(sorted[i], i);
}

}  // namespace
}  // namespace coach::master
