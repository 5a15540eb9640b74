// master::plan_change, the job master's change planner: the configuration that follows a change,
// the workers and shards it starts (and what happens when one cannot start), and the migrate
// orders: one per (source, destination), adjacent slices merged, a slice moved twice sent
// straight to where it ends. Under random changes with real shards: tests/unit/elastic_test.cpp.
#include "master/change_planner.hpp"

#include <gtest/gtest.h>

namespace coach::master {
using namespace coach::ps;
namespace {

using kind = job_change::kind_type;

job_config start_config(std::uint32_t shards) {
  job_config c;
  c.version = 3;
  c.from_step = 10;
  c.members = {0, 1};
  c.map = shard_map::even(64, 8, shards);  // 8 slices
  return c;
}

TEST(change_planner, workers_join_with_new_ranks_and_the_newest_leave) {
  const auto cfg = start_config(1);
  std::uint32_t next_rank = 5;  // ranks 2..4 were used by workers that left
  std::vector<std::uint32_t> started;
  change_starters start;
  start.worker = [&](std::uint32_t r, const job_config& next) {
    EXPECT_TRUE(next.is_member(r)) << "a new worker learns a configuration that holds it";
    started.push_back(r);
    return true;
  };
  auto grow = plan_change(cfg, {kind::workers, 4, {}}, 20, next_rank, start);
  EXPECT_EQ(grow.next.version, 4u);
  EXPECT_EQ(grow.next.from_step, 20);
  EXPECT_EQ(grow.next.members, (std::vector<std::uint32_t>{0, 1, 5, 6}));
  EXPECT_EQ(grow.added, (std::vector<std::uint32_t>{5, 6}));
  EXPECT_EQ(started, grow.added);
  EXPECT_EQ(next_rank, 7u);
  EXPECT_TRUE(grow.orders.empty());
  EXPECT_EQ(grow.next.map.ranges_of(0), cfg.map.ranges_of(0)) << "no slice moves";

  auto shrink = plan_change(grow.next, {kind::workers, 1, {}}, 30, next_rank, start);
  EXPECT_EQ(shrink.next.members, (std::vector<std::uint32_t>{0}));
  EXPECT_TRUE(shrink.added.empty());
}

TEST(change_planner, a_worker_that_cannot_start_is_left_out_and_no_more_are_added) {
  const auto cfg = start_config(1);
  std::uint32_t next_rank = 2;
  int calls = 0;
  change_starters start;
  start.worker = [&](std::uint32_t r, const job_config&) {
    ++calls;
    return r != 3;  // rank 3's node refuses
  };
  auto p = plan_change(cfg, {kind::workers, 5, {}}, 12, next_rank, start);
  EXPECT_EQ(p.next.members, (std::vector<std::uint32_t>{0, 1, 2}));
  EXPECT_EQ(p.added, (std::vector<std::uint32_t>{2}));
  EXPECT_EQ(calls, 2);
  // Without a way to start workers, nothing is added.
  auto none = plan_change(cfg, {kind::workers, 3, {}}, 12, next_rank, {});
  EXPECT_EQ(none.next.members, cfg.members);
}

TEST(change_planner, an_added_shard_takes_slices_in_one_order_per_source) {
  const auto cfg = start_config(2);  // shard 0: slices 0-3, shard 1: slices 4-7
  std::uint32_t next_rank = 2;
  change_starters start;
  std::uint32_t next_shard = 2;
  start.shard = [&]() -> std::optional<std::uint32_t> { return next_shard++; };
  auto p = plan_change(cfg, {kind::shards, 3, {}}, 15, next_rank, start);
  EXPECT_EQ(next_shard, 3u);
  const auto load = p.next.map.load();
  ASSERT_EQ(load.size(), 3u);
  EXPECT_GT(load[2], 0u);
  std::uint64_t keys = 0;
  for (const auto& o : p.orders) {
    EXPECT_EQ(o.to, 2u);
    EXPECT_EQ(o.at_version, 15);
    EXPECT_EQ(o.config_version, 4u);
    EXPECT_LT(o.from, 2u);
    for (std::size_t i = 1; i < o.ranges.size(); ++i)
      EXPECT_LT(o.ranges[i - 1].end, o.ranges[i].begin) << "adjacent ranges are merged";
    for (const auto& r : o.ranges) {
      keys += r.size();
      for (auto k = r.begin; k < r.end; ++k) {
        EXPECT_EQ(cfg.map.owner(k / 8), o.from);
        EXPECT_EQ(p.next.map.owner(k / 8), 2u);
      }
    }
  }
  EXPECT_EQ(keys, p.moved_keys);
  EXPECT_EQ(keys, load[2] * 8);
  EXPECT_TRUE(emptied_shards(cfg.map, p.next.map).empty());
}

TEST(change_planner, a_migration_moves_every_slice_to_the_shard_started_ahead) {
  const auto cfg = start_config(2);
  std::uint32_t next_rank = 2;
  int started = 0;
  change_starters start;
  start.shard = [&]() -> std::optional<std::uint32_t> {
    ++started;
    return 9;
  };
  auto p = plan_change(cfg, {kind::migrate, 1, 7}, 40, next_rank, start);
  EXPECT_EQ(started, 0) << "the destination was started ahead";
  ASSERT_EQ(p.orders.size(), 1u);
  EXPECT_EQ(p.orders[0], (release_order{1, 7, 40, 4, {{32, 64}}}));
  EXPECT_EQ(p.moved_keys, 32u);
  EXPECT_EQ(p.next.map.ranges_of(7), (std::vector<key_range>{{32, 64}}));
  EXPECT_EQ(emptied_shards(cfg.map, p.next.map), (std::vector<std::uint32_t>{1}));
  // Without a destination, one is started.
  auto q = plan_change(cfg, {kind::migrate, 0, {}}, 40, next_rank, start);
  EXPECT_EQ(started, 1);
  ASSERT_EQ(q.orders.size(), 1u);
  EXPECT_EQ(q.orders[0], (release_order{0, 9, 40, 4, {{0, 32}}}));
}

TEST(change_planner, a_migration_of_a_shard_that_owns_nothing_changes_nothing) {
  const auto cfg = start_config(2);
  std::uint32_t next_rank = 2;
  auto p = plan_change(cfg, {kind::migrate, 5, {}}, 40, next_rank, {});
  EXPECT_EQ(p.ignored, "no shard 5 owns slices; migrate ignored");
  EXPECT_EQ(p.next, cfg);
  EXPECT_TRUE(p.orders.empty());
}

TEST(change_planner, draining_hands_the_newest_shards_slices_to_the_others) {
  const auto cfg = start_config(3);
  std::uint32_t next_rank = 2;
  auto p = plan_change(cfg, {kind::shards, 1, {}}, 50, next_rank, {});
  const auto load = p.next.map.load();
  EXPECT_EQ(load[0], 8u) << "shards 2 then 1 drain; their slices end on shard 0";
  for (const auto& o : p.orders) EXPECT_EQ(o.to, 0u) << "straight to where they end";
  EXPECT_EQ(p.moved_keys, 64u - 8u * cfg.map.load()[0]) << "each slice moves once";
  EXPECT_EQ(emptied_shards(cfg.map, p.next.map), (std::vector<std::uint32_t>{1, 2}));
}

}  // namespace
}  // namespace coach::master
