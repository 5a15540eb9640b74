// Shard replicas without actors (docs/design.md "Shard replicas"): where a replica stands in its
// chain (ps::replica_chain), where the backups go (scheduler::place_backups), what a worker
// pulls again after a take-over (ps::key_coverage::missing) and which snapshots the master asks
// again (master::snapshot_assembler::lacks).
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "master/snapshot_assembler.hpp"
#include "ps/key_coverage.hpp"
#include "ps/replica_chain.hpp"
#include "scheduler/placement.hpp"

namespace coach {
namespace {

using ps::replica_chain;

TEST(replica_chain, the_head_answers_a_version_only_once_its_backup_holds_it) {
  replica_chain head(0, true, true);
  EXPECT_TRUE(head.may_answer(0));
  EXPECT_EQ(head.applied(1), std::nullopt) << "the head acknowledges to nobody";
  EXPECT_FALSE(head.may_answer(1)) << "applied here, not yet at the backup";
  head.successor_acked(1);
  EXPECT_TRUE(head.may_answer(1));
  // The backup may be ahead of the head's own apply: the head waits for itself too.
  head.successor_acked(2);
  EXPECT_FALSE(head.may_answer(2));
  head.applied(2);
  EXPECT_TRUE(head.may_answer(2));
  // A late, repeated or reordered acknowledgement takes nothing back.
  head.successor_acked(1);
  EXPECT_TRUE(head.may_answer(2));
  EXPECT_EQ(head.held(), 2);
}

TEST(replica_chain, a_middle_replica_acknowledges_what_it_and_the_tail_both_hold) {
  replica_chain tail(10, false, false), middle(10, false, true);
  EXPECT_EQ(tail.applied(11), 11) << "the tail holds what it applied";
  EXPECT_EQ(tail.applied(11), std::nullopt) << "told once";
  EXPECT_EQ(middle.applied(11), std::nullopt) << "its successor has not acknowledged 11";
  EXPECT_EQ(middle.successor_acked(11), 11);
  EXPECT_EQ(middle.successor_acked(12), std::nullopt) << "it has not applied 12 itself";
  EXPECT_EQ(middle.applied(13), 12) << "both hold 12";
  // Its successor is lost: it holds alone what it applied.
  EXPECT_EQ(middle.successor_lost(), 13);
  EXPECT_FALSE(middle.has_next());
  EXPECT_EQ(middle.applied(14), 14);
}

TEST(replica_chain, a_backup_that_takes_over_answers_and_acknowledges_nothing) {
  replica_chain backup(5, false, false);
  EXPECT_FALSE(backup.head());
  EXPECT_EQ(backup.applied(6), 6);
  backup.take_over();
  EXPECT_TRUE(backup.head());
  EXPECT_EQ(backup.applied(7), std::nullopt);
  EXPECT_TRUE(backup.may_answer(7)) << "alone now: what it applied is held";
  EXPECT_FALSE(backup.may_answer(8));
}

TEST(place_backups, keeps_each_copy_of_a_shard_on_its_own_host_and_spreads_them) {
  const std::uint32_t shards[] = {1, 2, 1};
  const std::uint32_t nodes[] = {1, 2, 3, 4};
  const auto b = scheduler::place_backups(shards, 2, nodes);
  ASSERT_EQ(b.size(), 3u);
  for (std::size_t k = 0; k < b.size(); ++k) {
    ASSERT_EQ(b[k].size(), 2u) << k;
    EXPECT_NE(b[k][0], shards[k]);
    EXPECT_NE(b[k][1], shards[k]);
    EXPECT_NE(b[k][0], b[k][1]);
  }
  // Fewest copies first, ties to the earlier node: shard 0 (on 1, which holds 2 primaries) to
  // 3 and 4 (none), shard 1 (on 2) to 3 and 4 again (one each, 1 holds two), shard 2 to 2 and
  // 3 (two copies each on 3 and 4, 2 holds one).
  EXPECT_EQ(b[0], (std::vector<std::uint32_t>{3, 4}));
  EXPECT_EQ(b[1], (std::vector<std::uint32_t>{3, 4}));
  EXPECT_EQ(b[2], (std::vector<std::uint32_t>{2, 3}));
  // Two nodes: one backup each at most, never beside its primary.
  const std::uint32_t two[] = {1, 2};
  const auto few = scheduler::place_backups(shards, 3, two);
  EXPECT_EQ(few[0], std::vector<std::uint32_t>{2});
  EXPECT_EQ(few[1], std::vector<std::uint32_t>{1});
  const std::uint32_t alone[] = {1};
  EXPECT_TRUE(scheduler::place_backups(shards, 1, alone)[0].empty());
  EXPECT_TRUE(scheduler::place_backups(shards, 0, nodes)[1].empty());
}

TEST(key_coverage, lists_the_keys_of_a_range_still_missing) {
  ps::key_coverage c(100);
  const ps::key_range got[] = {{10, 20}, {30, 40}, {40, 45}};
  ASSERT_TRUE(c.add(got));
  std::vector<ps::key_range> gaps;
  c.missing({0, 100}, gaps);
  EXPECT_EQ(gaps, (std::vector<ps::key_range>{{0, 10}, {20, 30}, {45, 100}}));
  gaps.clear();
  c.missing({15, 35}, gaps);
  EXPECT_EQ(gaps, (std::vector<ps::key_range>{{20, 30}}));
  gaps.clear();
  c.missing({12, 18}, gaps);
  EXPECT_TRUE(gaps.empty());
  c.missing({50, 60}, gaps);
  EXPECT_EQ(gaps, (std::vector<ps::key_range>{{50, 60}}));
}

TEST(snapshot_assembler, says_which_shard_ranges_an_asked_version_still_lacks) {
  master::snapshot_assembler a(6);
  a.request(3, 0, false);
  a.request(9, 1, false);
  const ps::key_range low[] = {{0, 3}}, high[] = {{3, 6}};
  EXPECT_FALSE(a.lacks(3, low)) << "not asked yet";
  EXPECT_EQ(a.to_ask(3), std::vector<std::int64_t>{3});
  EXPECT_EQ(a.asked_versions(), std::vector<std::int64_t>{3});
  EXPECT_TRUE(a.lacks(3, low));
  const std::vector<float> v{1, 2, 3};
  const std::span<const float> p[] = {v};
  ASSERT_TRUE(a.add(3, low, p));
  EXPECT_FALSE(a.lacks(3, low)) << "its shard answered before it was lost";
  EXPECT_TRUE(a.lacks(3, high));
}

}  // namespace
}  // namespace coach
