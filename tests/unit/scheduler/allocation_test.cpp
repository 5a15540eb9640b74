// scheduler::allocation: where a job's parts run as the scheduler counts them — a launch's
// hosts, a policy's resize followed (planned parts first to go, new ones planned), a user's
// rescale trimmed, and a change that took effect kept.
#include <gtest/gtest.h>

#include <vector>

#include "scheduler/allocation.hpp"

namespace coach::scheduler {
namespace {

using hosts = std::vector<std::uint32_t>;

TEST(allocation, a_launch_places_rank_r_and_shard_k_on_the_given_hosts) {
  allocation a;
  a.assign(hosts{7, 8, 7}, hosts{9});
  EXPECT_EQ(a.workers(), 3);
  EXPECT_EQ(a.shards(), 1);
  EXPECT_EQ(a.worker_hosts(), (hosts{7, 8, 7}));
  EXPECT_EQ(a.shard_at.at(0), 9u);
  a.assign(hosts{1}, hosts{2, 3});
  EXPECT_EQ(a.worker_hosts(), hosts{1}) << "a launch starts over";
  EXPECT_EQ(a.shard_hosts(), (hosts{2, 3}));
}

TEST(allocation, a_resize_plans_new_parts_and_takes_planned_ones_first) {
  allocation a;
  a.assign(hosts{1, 2}, hosts{1});
  // Grown to 4 workers and 2 shards: the executor kept the prefix and appended.
  a.follow(hosts{1, 2, 3, 4}, hosts{1, 2});
  EXPECT_EQ(a.worker_at.size(), 2u);
  EXPECT_EQ(a.planned_workers, (std::deque<std::uint32_t>{3, 4}));
  EXPECT_EQ(a.worker_hosts(), (hosts{1, 2, 3, 4}));
  EXPECT_EQ(a.shards(), 2);
  // Shrunk to 3 before the master asked for them: a planned one leaves, no live worker.
  a.follow(hosts{1, 2, 3}, hosts{1, 2});
  EXPECT_EQ(a.worker_at.size(), 2u);
  EXPECT_EQ(a.planned_workers, std::deque<std::uint32_t>{3});
  // To 1: the planned first, then the highest rank.
  a.follow(hosts{1}, hosts{1});
  EXPECT_TRUE(a.planned_workers.empty());
  EXPECT_EQ(a.worker_hosts(), hosts{1});
  EXPECT_TRUE(a.planned_shards.empty());
  EXPECT_EQ(a.shards(), 1);
}

TEST(allocation, a_rescale_trims_and_zero_leaves_a_part_kind_as_it_is) {
  allocation a;
  a.assign(hosts{1, 2, 3}, hosts{4, 5});
  a.planned_workers.push_back(6);
  a.trim(2, 0);
  EXPECT_EQ(a.worker_hosts(), (hosts{1, 2}));
  EXPECT_EQ(a.shards(), 2) << "0: shards unchanged";
  a.trim(5, 1);
  EXPECT_EQ(a.workers(), 2) << "more than now changes nothing";
  EXPECT_EQ(a.shard_hosts(), hosts{4});
}

TEST(allocation, a_change_that_took_effect_keeps_its_members_and_live_shards) {
  allocation a;
  a.assign(hosts{1, 2, 3, 4}, hosts{5, 6, 7});
  EXPECT_EQ(a.keep(hosts{0, 2}, hosts{1}), 4u) << "workers 1 and 3, shards 0 and 2 left";
  EXPECT_EQ(a.worker_at, (std::map<std::uint32_t, std::uint32_t>{{0, 1}, {2, 3}}));
  EXPECT_EQ(a.shard_at, (std::map<std::uint32_t, std::uint32_t>{{1, 6}}));
  a.clear();
  EXPECT_EQ(a, allocation{});
}

}  // namespace
}  // namespace coach::scheduler
