// ps::shard_map plans: adding a shard takes an even share from the most loaded shards, draining
// empties a shard onto the others, migrating hands a whole shard over; each plan applied bumps the
// version once and every key stays owned exactly once.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "ps/shard_map.hpp"

namespace coach::ps {
namespace {

/// Every key of the map owned by exactly one shard.
void expect_partition(const shard_map& m) {
  std::vector<int> seen(m.num_params(), 0);
  for (std::uint32_t k = 0; k < m.num_shards(); ++k)
    for (auto r : m.ranges_of(k))
      for (auto i = r.begin; i < r.end; ++i) ++seen[i];
  for (std::size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "key " << i;
}

TEST(shard_map_plan, add_gives_the_new_shard_an_even_share_from_the_most_loaded) {
  auto m = shard_map::even(100, 10, 2);  // 10 slices: 5 + 5
  const auto moves = m.plan_add(2);
  ASSERT_EQ(moves.size(), 3u);  // floor(10 / 3)
  // The donors give their last slices, the most loaded first (ties: lower id).
  EXPECT_EQ(moves[0], (slice_move{4, 0, 2}));
  EXPECT_EQ(moves[1], (slice_move{9, 1, 2}));
  EXPECT_EQ(moves[2], (slice_move{3, 0, 2}));
  m.apply(moves);
  EXPECT_EQ(m.version(), 2u);
  EXPECT_EQ(m.load(), (std::vector<std::size_t>{3, 4, 3}));
  EXPECT_EQ(m.num_shards(), 3u);
  expect_partition(m);
}

TEST(shard_map_plan, add_to_a_single_slice_map_moves_nothing) {
  auto m = shard_map::even(5, 10, 1);
  EXPECT_TRUE(m.plan_add(1).empty());
}

TEST(shard_map_plan, drain_spreads_a_shard_over_the_least_loaded) {
  auto m = shard_map::even(120, 10, 3);  // 12 slices: 4 + 4 + 4
  const auto moves = m.plan_drain(1);
  ASSERT_EQ(moves.size(), 4u);
  for (const auto& mv : moves) EXPECT_EQ(mv.from, 1u);
  m.apply(moves);
  EXPECT_EQ(m.load(), (std::vector<std::size_t>{6, 0, 6}));
  EXPECT_TRUE(m.ranges_of(1).empty());
  EXPECT_TRUE(m.plan_drain(1).empty());  // nothing left to drain
  expect_partition(m);
}

TEST(shard_map_plan, migrate_hands_every_slice_over) {
  auto m = shard_map::even(100, 10, 2);
  const auto before = m.ranges_of(0);
  m.apply(m.plan_migrate(0, 5));
  EXPECT_TRUE(m.ranges_of(0).empty());
  EXPECT_EQ(m.ranges_of(5), before);
  EXPECT_EQ(m.num_shards(), 6u);
  expect_partition(m);
}

TEST(shard_map_plan, random_sequences_keep_a_partition_and_bump_once_per_plan) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    auto m = shard_map::even(1 + rng() % 5000, 1 + rng() % 300, 1 + std::uint32_t(rng() % 4));
    for (int step = 0; step < 20; ++step) {
      const auto n = m.load();
      std::vector<std::uint32_t> live;
      for (std::uint32_t k = 0; k < n.size(); ++k)
        if (n[k] > 0) live.push_back(k);
      std::vector<slice_move> plan;
      switch (rng() % 3) {
        case 0:
          plan = m.plan_add(m.num_shards());
          break;
        case 1:
          if (live.size() > 1) plan = m.plan_drain(live[rng() % live.size()]);
          break;
        case 2:
          plan = m.plan_migrate(live[rng() % live.size()], m.num_shards());
          break;
      }
      const auto v = m.version();
      m.apply(plan);
      ASSERT_EQ(m.version(), v + 1);
      expect_partition(m);
      const auto after = m.load();
      ASSERT_EQ(std::accumulate(after.begin(), after.end(), std::size_t(0)), m.num_slices());
    }
  }
}

}  // namespace
}  // namespace coach::ps
