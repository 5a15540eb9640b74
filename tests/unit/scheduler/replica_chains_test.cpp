// scheduler::replica_chains: one job's shard replicas placed, extended and failed over, as the
// registry asks (no store, no nodes: hosts are numbers).

#include "scheduler/replica_chains.hpp"

#include <gtest/gtest.h>

#include <map>
#include <vector>

namespace coach::scheduler {
namespace {

using hosts = std::vector<std::uint32_t>;

TEST(replica_chains, without_replicas_nothing_is_placed_and_a_lost_primary_has_no_copy) {
  replica_chains r;
  const hosts shards{1, 2}, usable{1, 2, 3};
  EXPECT_TRUE(r.place(shards, usable).empty());
  EXPECT_TRUE(r.backups().empty());
  EXPECT_TRUE(r.chains().empty());
  EXPECT_TRUE(r.place_added(2, 3, {{0, 1}, {1, 2}}, usable).empty());
  EXPECT_FALSE(r.fail_over(1, {{0, 1}, {1, 2}})) << "shard 0 had no chain: a recovery";
  const auto f = r.fail_over(3, {{0, 1}, {1, 2}});
  ASSERT_TRUE(f) << "no shard on host 3";
  EXPECT_TRUE(f->heads.empty());
  EXPECT_TRUE(f->cut.empty());
}

TEST(replica_chains, backups_go_beside_no_primary_of_their_shard_and_short_ones_are_named) {
  replica_chains r(3);
  const hosts shards{1, 2}, usable{1, 2, 3};
  EXPECT_TRUE(r.place(shards, usable).empty()) << "3 nodes: a primary and 2 backups each";
  ASSERT_EQ(r.backups().size(), 2u);
  EXPECT_EQ(r.backups()[0], (hosts{3, 2})) << "the node without a copy first";
  EXPECT_EQ(r.backups()[1], (hosts{1, 3})) << "ties to the earlier node";
  ASSERT_EQ(r.chains().size(), 2u);
  EXPECT_EQ(r.chains()[0].head, 0u);
  EXPECT_EQ(r.chains()[0].tail, 2u);
  // 3 backups each need 4 nodes: both shards run short, with the 2 other nodes.
  replica_chains four(4);
  EXPECT_EQ(four.place(shards, usable), (hosts{0, 1}));
  EXPECT_EQ(four.backups()[0].size(), 2u);
  EXPECT_EQ(four.chains()[0].tail, 2u);
  // A second run forgets the first's chains.
  const hosts one{3};
  EXPECT_TRUE(r.place(one, usable).empty());
  EXPECT_EQ(r.backups().size(), 1u);
  EXPECT_EQ(r.chains().size(), 1u);
}

TEST(replica_chains, a_lost_primary_promotes_its_backup_and_a_lost_backup_cuts_the_chain) {
  replica_chains r(2);
  const hosts shards{1, 2}, usable{1, 2, 3};
  ASSERT_TRUE(r.place(shards, usable).empty());
  ASSERT_EQ(r.backups()[0], hosts{3});
  ASSERT_EQ(r.backups()[1], hosts{1});
  std::map<std::uint32_t, std::uint32_t> shard_at{{0, 1}, {1, 2}};
  // Host 1 holds shard 0's primary and shard 1's backup.
  auto f = r.fail_over(1, shard_at);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->heads, (hosts{0, 1})) << "shard 0's replica 1 takes over";
  EXPECT_EQ(f->cut, (hosts{1, 0})) << "shard 1 goes on without its backup";
  ASSERT_EQ(f->promoted.size(), 1u);
  EXPECT_EQ(f->promoted[0], std::pair(0u, 3u)) << "shard 0's primary is on host 3 now";
  EXPECT_EQ(r.chains()[0].head, 1u);
  EXPECT_EQ(r.chains()[1].tail, 0u);
  // Host 3 now holds shard 0's only copy: losing it too is a recovery.
  shard_at[0] = 3;
  EXPECT_FALSE(r.fail_over(3, shard_at));
}

TEST(replica_chains, an_added_shard_gets_backups_on_the_nodes_with_the_fewest_copies) {
  replica_chains r(2);
  const hosts shards{1}, usable{1, 2, 3, 4};
  ASSERT_TRUE(r.place(shards, usable).empty());
  ASSERT_EQ(r.backups()[0], hosts{2});
  // Shard 1 added on host 1: hosts 1 (primary of 0) and 2 (its backup) hold copies already.
  const auto b = r.place_added(1, 1, {{0, 1}, {1, 1}}, usable);
  EXPECT_EQ(b, hosts{3});
  ASSERT_EQ(r.backups().size(), 2u);
  EXPECT_EQ(r.backups()[1], b);
  EXPECT_EQ(r.chains()[1].tail, 1u);
  // A shard that owns no slice any more leaves its chain.
  r.keep_only({{1, 1}});
  EXPECT_EQ(r.chains()[0].head, 0u);
  EXPECT_EQ(r.chains()[0].tail, 0u);
  EXPECT_EQ(r.chains()[1].tail, 1u);
}

}  // namespace
}  // namespace coach::scheduler
