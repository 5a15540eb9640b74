// master::change_sequencer, the life of a running job's changes: a change begins at its step
// once the transfers of the one before are acknowledged, holds its step while parts start
// elsewhere, is dropped when a new shard cannot start and goes on without a worker that cannot;
// its orders come with its configuration; emptied shards hold their slices until the last
// acknowledgement; a death re-issues every configuration from its step without the dead.
#include "master/change_sequencer.hpp"

#include <gtest/gtest.h>

namespace coach::master {
using namespace coach::scheduler;
namespace {

using kind = change_sequencer::due::kind_type;

ps::job_config start_config(std::uint32_t shards) {
  ps::job_config c;
  c.version = 1;
  c.members = {0, 1};
  c.map = ps::shard_map::even(64, 8, shards);  // 8 slices
  return c;
}

change_request shards_to(std::uint32_t n) {
  return {{0, schedule_action::kind_type::shards, n}, {}, {}, {}, {}};
}
change_request workers_to(std::uint32_t n) {
  return {{0, schedule_action::kind_type::workers, n}, {}, {}, {}, {}};
}

/// Plans `c` at `step` as the master does, new shards numbered from `next_shard`.
master::change_plan plan(const change_sequencer& seq, const change_request& c, std::int64_t step,
                         std::uint32_t& next_rank, std::uint32_t& next_shard) {
  master::change_starters start;
  start.worker = [](std::uint32_t, const ps::job_config&) { return true; };
  start.shard = [&]() -> std::optional<std::uint32_t> { return next_shard++; };
  return master::plan_change(seq.current(), to_job_change(c), step, next_rank, start);
}

TEST(change_sequencer, a_change_begins_at_its_step_and_the_next_waits_for_its_transfers) {
  change_sequencer seq(start_config(1));
  seq.queue(shards_to(2), 5);
  seq.queue(workers_to(3), 5);  // same step: after the first
  EXPECT_EQ(seq.at(4, false).kind, kind::open);
  auto d = seq.at(5, false);
  ASSERT_EQ(d.kind, kind::begin);
  EXPECT_EQ(d.change->action.kind, schedule_action::kind_type::shards);
  EXPECT_EQ(d.change->action.at_step, 5);
  std::uint32_t next_rank = 2, next_shard = 1;
  EXPECT_TRUE(seq.begun(plan(seq, *d.change, 5, next_rank, next_shard), 0));
  const auto orders = seq.publish();
  ASSERT_EQ(orders.size(), 1u);
  EXPECT_EQ(orders[0].from, 0u);
  EXPECT_EQ(orders[0].to, 1u);
  EXPECT_EQ(orders[0].at_version, 5);
  EXPECT_EQ(seq.current().version, 2u);
  EXPECT_EQ(seq.live_shards(), (std::vector<std::uint32_t>{0, 1}));
  EXPECT_EQ(seq.acks_awaited(), 1u);
  // The workers change is due, but waits for the transfer; the steps go on meanwhile.
  EXPECT_EQ(seq.at(6, false).kind, kind::open);
  EXPECT_EQ(seq.acknowledged(), change_sequencer::ack_news::done);
  EXPECT_EQ(seq.acknowledged(), change_sequencer::ack_news::unexpected);
  d = seq.at(7, false);
  ASSERT_EQ(d.kind, kind::begin);
  EXPECT_EQ(d.change->action.kind, schedule_action::kind_type::workers);
  EXPECT_EQ(seq.at(8, false).kind, kind::open) << "the queue is empty";
}

TEST(change_sequencer, parts_starting_elsewhere_hold_the_step_and_a_failed_shard_drops_it) {
  change_sequencer seq(start_config(1));
  seq.queue(shards_to(3), 2);
  auto d = seq.at(2, false);
  ASSERT_EQ(d.kind, kind::begin);
  std::uint32_t next_rank = 2, next_shard = 1;
  EXPECT_FALSE(seq.begun(plan(seq, *d.change, 2, next_rank, next_shard), 2));
  EXPECT_EQ(seq.at(2, false).kind, kind::wait);
  EXPECT_EQ(seq.planned_live_shards(), (std::vector<std::uint32_t>{0, 1, 2}));
  EXPECT_EQ(seq.part_ready(false, 1, true), change_sequencer::part_news::waiting);
  EXPECT_EQ(seq.part_ready(false, 2, false), change_sequencer::part_news::dropped);
  EXPECT_EQ(seq.next(), nullptr);
  EXPECT_EQ(seq.current().version, 1u) << "the job goes on as it was";
  EXPECT_EQ(seq.at(2, false).kind, kind::open);
  EXPECT_EQ(seq.part_ready(false, 2, true), change_sequencer::part_news::unexpected);
}

TEST(change_sequencer, a_worker_that_cannot_start_is_left_out_and_the_change_goes_on) {
  change_sequencer seq(start_config(1));
  seq.queue(workers_to(4), 3);
  auto d = seq.at(3, false);
  std::uint32_t next_rank = 2, next_shard = 1;
  EXPECT_FALSE(seq.begun(plan(seq, *d.change, 3, next_rank, next_shard), 2));
  EXPECT_EQ(seq.planned_members(), (std::vector<std::uint32_t>{0, 1, 2, 3}));
  EXPECT_EQ(seq.part_ready(true, 2, false), change_sequencer::part_news::waiting);
  EXPECT_EQ(seq.part_ready(true, 3, true), change_sequencer::part_news::ready);
  EXPECT_TRUE(seq.publish().empty());
  EXPECT_EQ(seq.current().members, (std::vector<std::uint32_t>{0, 1, 3}));
  EXPECT_EQ(seq.current().from_step, 3);
}

TEST(change_sequencer, a_drained_shard_holds_its_slices_until_the_last_acknowledgement) {
  change_sequencer seq(start_config(3));
  seq.queue(shards_to(1), 4);
  auto d = seq.at(4, false);
  std::uint32_t next_rank = 2, next_shard = 3;
  EXPECT_TRUE(seq.begun(plan(seq, *d.change, 4, next_rank, next_shard), 0));
  const auto orders = seq.publish();
  EXPECT_EQ(orders.size(), 2u);
  EXPECT_EQ(seq.live_shards(), (std::vector<std::uint32_t>{0}));
  EXPECT_EQ(seq.releasing(), (std::vector<std::uint32_t>{1, 2}));
  std::vector<std::uint32_t> members, shards;
  seq.layout(members, shards);
  EXPECT_EQ(shards, (std::vector<std::uint32_t>{0, 1, 2})) << "still holding their slices";
  EXPECT_EQ(seq.acknowledged(), change_sequencer::ack_news::waiting);
  EXPECT_EQ(seq.acknowledged(), change_sequencer::ack_news::freed);
  EXPECT_TRUE(seq.releasing().empty());
  seq.layout(members, shards);
  EXPECT_EQ(shards, (std::vector<std::uint32_t>{0}));
}

TEST(change_sequencer, a_death_reissues_every_configuration_from_its_step_without_the_dead) {
  change_sequencer seq(start_config(1));
  std::map<std::int64_t, ps::job_config> published{{0, seq.current()}};
  seq.queue(shards_to(2), 5);
  auto s5 = seq.at(5, false);
  std::uint32_t next_rank = 2, next_shard = 1;
  seq.begun(plan(seq, *s5.change, 5, next_rank, next_shard), 0);
  seq.publish();
  published[5] = seq.current();  // slices move to shard 1 from step 5
  seq.acknowledged();
  seq.queue(workers_to(3), 6);
  auto d = seq.at(6, false);
  seq.begun(plan(seq, *d.change, 6, next_rank, next_shard), 0);
  seq.publish();
  published[6] = seq.current();  // members 0, 1, 2 from step 6
  seq.queue(workers_to(4), 9);
  d = seq.at(9, false);
  seq.begun(plan(seq, *d.change, 9, next_rank, next_shard), 1);  // rank 3 starting elsewhere
  // Rank 1 last reported step 3: from step 4 on it is expected no more.
  const auto redo = seq.without({1}, 4, published);
  ASSERT_EQ(redo.size(), 3u);
  EXPECT_EQ(redo[0].from_step, 4);
  EXPECT_EQ(redo[0].members, (std::vector<std::uint32_t>{0}));
  EXPECT_EQ(redo[0].map, published[0].map) << "step 4 keeps the map it had";
  EXPECT_EQ(redo[1].from_step, 5);
  EXPECT_EQ(redo[1].map, published[5].map);
  EXPECT_NE(redo[1].map, redo[0].map);
  EXPECT_EQ(redo[2].from_step, 6);
  EXPECT_EQ(redo[2].members, (std::vector<std::uint32_t>{0, 2}));
  EXPECT_EQ(redo[2].version, redo[1].version + 1);
  EXPECT_EQ(redo[1].version, redo[0].version + 1);
  EXPECT_EQ(seq.current(), redo[2]);
  ASSERT_NE(seq.next(), nullptr);
  EXPECT_EQ(seq.next()->members, (std::vector<std::uint32_t>{0, 2, 3}));
  EXPECT_EQ(seq.next()->version, seq.current().version + 1);
}

TEST(change_sequencer, migrations_prepared_ahead_are_held_then_queued_and_reported) {
  change_sequencer seq(start_config(2));
  change_request m{{0, schedule_action::kind_type::migrate, 0}, "node-b", {}, 5, {}};
  EXPECT_EQ(describe(m), "migrate 0 to node-b");
  seq.preparing(5, m);
  EXPECT_TRUE(seq.is_preparing(5));
  std::vector<std::uint32_t> members, shards;
  seq.layout(members, shards);
  EXPECT_EQ(shards, (std::vector<std::uint32_t>{0, 1, 5}));
  EXPECT_EQ(seq.at(100, true).kind, kind::open) << "a stopping job begins nothing";
  auto c = seq.prepared(5);
  ASSERT_TRUE(c);
  EXPECT_FALSE(seq.prepared(5));
  seq.queue(*c, 8);
  seq.layout(members, shards);
  EXPECT_EQ(shards, (std::vector<std::uint32_t>{0, 1, 5})) << "queued with its shard";
  EXPECT_EQ(to_job_change(*c).to, std::optional<std::uint32_t>(5));
}

}  // namespace
}  // namespace coach::master
