// scheduler::rebalancer: a dltap job's shard moves beside its workers once a node with them has
// room, only when the bytes saved over the rest of the run outweigh the transfer, at most once
// per job per interval (manual clock), and never to a node without room.

#include "scheduler/rebalance.hpp"

#include <gtest/gtest.h>

namespace coach::scheduler {
namespace {

constexpr double mib = 1024.0 * 1024.0;

/// Nodes 1..n with 4 CPUs each; `busy` CPUs taken on each node named.
resource_pool pool_of(int n, std::map<std::uint32_t, double> busy = {}) {
  resource_pool p;
  for (int i = 1; i <= n; ++i) {
    const resources total{0, 4, 8ull << 30};
    resources free = total;
    if (auto it = busy.find(std::uint32_t(i)); it != busy.end()) free.cpus -= it->second;
    p.add_node(std::uint32_t(i), total, free);
  }
  return p;
}

/// 3 workers on node 1, shard 0 (64 MiB) on node 1, shard 1 (64 MiB) on node 2: shard 1's
/// traffic crosses hosts for every worker.
rebalance_job split_job() {
  rebalance_job j;
  j.job = 7;
  j.worker_nodes = {1, 1, 1};
  j.shard_nodes = {1, 2};
  j.shard_bytes = {64 * mib, 64 * mib};
  j.steps_per_s = 5;
  j.seconds_left = 600;
  j.per_shard = {0, 1, 0};
  return j;
}

TEST(rebalancer, moves_the_shard_that_crosses_hosts_to_its_workers_node_once_it_has_room) {
  manual_clock clock;
  rebalancer r(clock);
  auto job = split_job();
  EXPECT_FALSE(r.propose(job, pool_of(2, {{1, 4}}))) << "node 1 is full: nowhere to go";
  auto m = r.propose(job, pool_of(2, {{1, 3}}));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->shard, 1u);
  EXPECT_EQ(m->from, 2u);
  EXPECT_EQ(m->to, 1u);
  // 3 workers × (push + pull) × 64 MiB × 5 steps/s.
  EXPECT_DOUBLE_EQ(m->saved_bytes_per_s, 2 * 64 * mib * 3 * 5);
  EXPECT_DOUBLE_EQ(m->saved_bytes, m->saved_bytes_per_s * 600);
  EXPECT_DOUBLE_EQ(m->moved_bytes, 64 * mib);
}

TEST(rebalancer, never_moves_a_shard_the_user_pinned) {
  manual_clock clock;
  rebalancer r(clock);
  auto job = split_job();
  job.pinned = {false, true};  // coach migrate put shard 1 on node 2
  EXPECT_FALSE(r.propose(job, pool_of(2, {{1, 3}}))) << "the only move that pays is pinned";
  job.pinned = {true, false};
  ASSERT_TRUE(r.propose(job, pool_of(2, {{1, 3}})));
  EXPECT_EQ(r.propose(job, pool_of(2, {{1, 3}}))->shard, 1u);
}

TEST(rebalancer, moves_only_where_the_bytes_saved_outweigh_the_transfer) {
  manual_clock clock;
  rebalancer r(clock, {seconds(60), 2.0});
  auto job = split_job();
  job.state_factor = 3;  // Adam: values and two moments move
  // Saved: 2 × 64 MiB × 3 workers × 5 steps/s × t; moved 3 × 64 MiB. Worth it iff
  // 30 × t > 2 × 3, t > 0.2 s.
  job.seconds_left = 0.2;
  EXPECT_FALSE(r.propose(job, pool_of(2))) << "exactly the bound does not qualify";
  job.seconds_left = 0.21;
  EXPECT_TRUE(r.propose(job, pool_of(2)));
  job.steps_per_s = 0;
  EXPECT_FALSE(r.propose(job, pool_of(2))) << "no step rate yet: no model, no move";
  job.steps_per_s = 5;
  job.seconds_left = 0;
  EXPECT_FALSE(r.propose(job, pool_of(2))) << "no estimate of the time left";
}

TEST(rebalancer, at_most_one_move_per_job_per_interval) {
  manual_clock clock;
  rebalancer r(clock);
  auto job = split_job();
  ASSERT_TRUE(r.propose(job, pool_of(2)));
  EXPECT_TRUE(r.propose(job, pool_of(2))) << "proposing records nothing";
  r.moved(job.job);
  EXPECT_FALSE(r.propose(job, pool_of(2)));
  auto other = job;
  other.job = 8;
  EXPECT_TRUE(r.propose(other, pool_of(2))) << "the interval is per job";
  clock.advance(seconds(59.9));
  EXPECT_FALSE(r.propose(job, pool_of(2)));
  clock.advance(seconds(0.1));
  EXPECT_TRUE(r.propose(job, pool_of(2)));
  r.moved(job.job);
  r.forget(job.job);
  EXPECT_TRUE(r.propose(job, pool_of(2))) << "an ended job's interval is forgotten";
}

TEST(rebalancer, never_moves_a_shard_already_beside_the_most_workers) {
  manual_clock clock;
  rebalancer r(clock);
  rebalance_job job;
  job.job = 1;
  job.worker_nodes = {1, 2};  // one worker each on nodes 1 and 2
  job.shard_nodes = {1, 2};
  job.shard_bytes = {mib, mib};
  job.steps_per_s = 10;
  job.seconds_left = 1e6;
  job.per_shard = {0, 1, 0};
  EXPECT_FALSE(r.propose(job, pool_of(3))) << "a tie saves nothing";
  job.shard_nodes = {3, 3};  // both shards where no worker runs
  auto m = r.propose(job, pool_of(3));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->shard, 0u) << "equal savings: the lower shard id";
  EXPECT_EQ(m->to, 1u) << "then the node first in the pool";
  EXPECT_EQ(m->from, 3u);
}

TEST(rebalancer, prefers_the_move_that_saves_the_most) {
  manual_clock clock;
  rebalancer r(clock);
  rebalance_job job;
  job.job = 1;
  job.worker_nodes = {1, 1, 2};
  job.shard_nodes = {2, 3};
  job.shard_bytes = {mib, 4 * mib};  // shard 1 owns four times the bytes
  job.steps_per_s = 1;
  job.seconds_left = 1e6;
  job.per_shard = {0, 1, 0};
  auto m = r.propose(job, pool_of(3));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->shard, 1u);
  EXPECT_EQ(m->to, 1u);
  EXPECT_DOUBLE_EQ(m->saved_bytes_per_s, 2 * 4 * mib * 2);
  // With node 1 full, shard 1 still gains by going to node 2 (one worker against none).
  auto m2 = r.propose(job, pool_of(3, {{1, 4}}));
  ASSERT_TRUE(m2);
  EXPECT_EQ(m2->shard, 1u);
  EXPECT_EQ(m2->to, 2u);
}

}  // namespace
}  // namespace coach::scheduler
