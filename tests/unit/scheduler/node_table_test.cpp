// scheduler::node_table: liveness driven by a manual clock (a node is dead once silent for
// longer than the timeout, reported once, back on its next heartbeat), lookups by name with
// their errors, and the cluster view a policy sees (usable nodes by name, free = what the node
// has less what the scheduler reserved, GPUs capped by what the heartbeat measured free).

#include "scheduler/node_table.hpp"

#include <gtest/gtest.h>

namespace coach::scheduler {
namespace {

using namespace std::chrono_literals;

node_report report(std::uint32_t host, std::string name, std::uint32_t cpus = 4, int gpus = 0,
                   int gpus_free = -1) {
  node_report r;
  r.host = host;
  r.name = std::move(name);
  r.address = "tcp://127.0.0.1:" + std::to_string(7000 + host);
  r.resources.cpus_total = cpus;
  r.resources.cpus_free = cpus;
  r.resources.memory_total = 8ull << 30;
  r.resources.memory_free = 6ull << 30;
  for (int g = 0; g < gpus; ++g) r.resources.gpus_total.push_back(g);
  for (int g = 0; g < (gpus_free < 0 ? gpus : gpus_free); ++g) r.resources.gpus_free.push_back(g);
  return r;
}

TEST(node_table, a_silent_node_dies_once_and_comes_back_with_its_next_heartbeat) {
  manual_clock clock;
  node_table t(clock, seconds(5));
  auto h = t.heartbeat(report(1, "a"));
  EXPECT_TRUE(h.joined);
  EXPECT_TRUE(h.moved);
  t.heartbeat(report(2, "b"));
  clock.advance(seconds(3));
  t.heartbeat(report(2, "b"));
  clock.advance(seconds(2));
  EXPECT_TRUE(t.expire().empty()) << "5 s of silence is not more than the timeout";
  clock.advance(seconds(0.5));
  EXPECT_EQ(t.expire(), (std::vector<std::uint32_t>{1}));
  EXPECT_TRUE(t.expire().empty()) << "reported once";
  EXPECT_FALSE(t.usable(1));
  EXPECT_TRUE(t.usable(2));
  EXPECT_DOUBLE_EQ(t.silent_for(1), 5.5);
  auto back = t.heartbeat(report(1, "a"));
  EXPECT_FALSE(back.joined);
  EXPECT_TRUE(back.back);
  EXPECT_FALSE(back.moved);
  EXPECT_TRUE(t.usable(1));
  auto r = report(1, "a");
  r.address = "tcp://127.0.0.1:9999";
  EXPECT_TRUE(t.heartbeat(r).moved);
}

TEST(node_table, silence_while_the_owner_was_stalled_does_not_count_against_nodes) {
  manual_clock clock;
  node_table t(clock, seconds(5));
  t.heartbeat(report(1, "a"));
  t.heartbeat(report(2, "b"));   // b heartbeats once and then never again
  for (int i = 0; i < 4; ++i) {  // the owner's timer every 0.5 s, a heartbeating
    clock.advance(500ms);
    EXPECT_TRUE(t.expire().empty());
    t.heartbeat(report(1, "a"));
  }
  // The owner is busy for 8 s (loading a data set); its late timer comes before the heartbeats
  // that waited behind it in its mailbox. Neither node is blamed for those 8 s.
  clock.advance(seconds(8));
  EXPECT_TRUE(t.expire().empty());
  EXPECT_DOUBLE_EQ(t.silent_for(1), 0.5);
  EXPECT_DOUBLE_EQ(t.silent_for(2), 2.5)
      << "b's silence counts only while the owner listened (and one check period of the 8 s)";
  t.heartbeat(report(1, "a"));
  // b stays silent: dead once it was silent for more than 5 s the owner could hear.
  for (int i = 0; i < 5; ++i) {
    clock.advance(500ms);
    EXPECT_TRUE(t.expire().empty()) << "after " << (i + 1) * 0.5 << " s more";
    t.heartbeat(report(1, "a"));
  }
  clock.advance(500ms);
  EXPECT_EQ(t.expire(), (std::vector<std::uint32_t>{2}));
  EXPECT_TRUE(t.usable(1));
}

TEST(node_table, a_heartbeat_read_after_the_check_keeps_its_node_alive) {
  // The scheduler checks at T, then reads what its mailbox held (a burst of job API requests
  // with a heartbeat behind them) before it judges: the node whose heartbeat came is alive.
  manual_clock clock;
  node_table t(clock, seconds(2));
  t.heartbeat(report(1, "a"));
  t.heartbeat(report(2, "b"));
  for (int i = 0; i < 5; ++i) {  // checks on time: 2.5 s of silence from both
    clock.advance(seconds(0.5));
    if (i < 4) EXPECT_FALSE(t.check());
  }
  const auto as_of = t.check();
  ASSERT_TRUE(as_of) << "both silent past the timeout";
  EXPECT_EQ(*as_of, clock.now());
  clock.advance(seconds(1.5));  // the backlog, read: a's heartbeat was in it
  t.heartbeat(report(1, "a"));
  EXPECT_EQ(t.expire_as_of(*as_of), (std::vector<std::uint32_t>{2}));
  EXPECT_TRUE(t.usable(1));
  EXPECT_FALSE(t.usable(2));
  EXPECT_TRUE(t.expire_as_of(*as_of).empty()) << "reported once";
}

TEST(node_table, a_short_timeout_expires_a_dead_node_on_time) {
  // --node-timeout 1 once never expired a dead node: each check 0.5 s late counted as a stall
  // and pushed every node's last heartbeat forward.
  manual_clock clock;
  node_table t(clock, seconds(1));
  EXPECT_DOUBLE_EQ(t.check_every().count(), 0.25);
  t.heartbeat(report(1, "a"));
  t.heartbeat(report(2, "b"));  // b dies now
  double waited = 0;
  std::vector<std::uint32_t> dead;
  while (dead.empty() && waited < 5) {
    clock.advance(seconds(0.3));  // the owner's timer, a little late each time
    waited += 0.3;
    t.heartbeat(report(1, "a"));
    dead = t.expire();
  }
  EXPECT_EQ(dead, (std::vector<std::uint32_t>{2}));
  EXPECT_NEAR(waited, 1.2, 1e-9) << "dead at the first check after 1 s of silence";
  EXPECT_TRUE(t.usable(1));
  node_table slow(clock, seconds(5));
  EXPECT_DOUBLE_EQ(slow.check_every().count(), 0.5) << "checks at most every 0.5 s";
}

TEST(node_table, finds_nodes_by_name_and_says_why_one_cannot_take_work) {
  manual_clock clock;
  node_table t(clock, seconds(5));
  t.heartbeat(report(1, "a"));
  auto d = report(2, "b");
  d.draining = true;
  t.heartbeat(d);
  t.heartbeat(report(3, "c"));
  EXPECT_EQ(t.by_name("a").value(), 1u);
  EXPECT_EQ(t.by_name("b").error().message, "node 'b' is draining");
  EXPECT_EQ(t.by_name("x").error().code, errc::not_found);
  EXPECT_EQ(t.by_name("x").error().message, "no node named 'x'");
  clock.advance(seconds(6));
  t.heartbeat(report(1, "a"));
  t.expire();
  EXPECT_EQ(t.by_name("c").error().message, "node 'c' is not heartbeating");
  EXPECT_EQ(t.name(1), "a");
  EXPECT_EQ(t.name(42), "host 42");
}

TEST(node_table, the_view_lists_usable_nodes_by_name_less_what_was_reserved) {
  manual_clock clock;
  node_table t(clock, seconds(5));
  t.heartbeat(report(9, "c", 8, 4, 1));  // 4 GPUs, 3 busy with another program
  t.heartbeat(report(7, "a", 4, 2));
  auto b = report(8, "b");
  b.draining = true;
  t.heartbeat(b);
  std::map<std::uint32_t, resources> reserved{{7, {1, 3, 0}}, {9, {0, 2.5, 0}}};
  const auto v = t.view(reserved);
  ASSERT_EQ(v.nodes.size(), 2u);
  EXPECT_EQ(v.nodes[0].id, 7u);
  EXPECT_EQ(v.nodes[0].total, (resources{2, 4, 8ull << 30}));
  EXPECT_EQ(v.nodes[0].free, (resources{1, 1, 6ull << 30}));
  EXPECT_EQ(v.nodes[1].id, 9u);
  EXPECT_EQ(v.nodes[1].free.gpus, 1) << "capped by what the heartbeat measured free";
  EXPECT_DOUBLE_EQ(v.nodes[1].free.cpus, 5.5);
}

TEST(node_table, cpus_other_programs_keep_busy_are_not_free_and_can_over_commit_a_node) {
  manual_clock clock;
  node_table t(clock, seconds(5));
  auto a = report(1, "a", 8);
  a.resources.cpus_external = 2.5;
  t.heartbeat(a);
  EXPECT_DOUBLE_EQ(t.view({}).nodes[0].free.cpus, 5.5);
  EXPECT_DOUBLE_EQ(t.view({{1, {0, 4, 0}}}).nodes[0].free.cpus, 1.5);
  // Jobs hold 7 of 8 CPUs and the program takes 2.5: 1.5 over, for the policies to shed.
  EXPECT_DOUBLE_EQ(t.view({{1, {0, 7, 0}}}).nodes[0].free.cpus, -1.5);
  // Coach's own over-reservation (a forced move) is not the program's: only its CPUs count.
  EXPECT_DOUBLE_EQ(t.view({{1, {0, 9, 0}}}).nodes[0].free.cpus, -2.5);
  // It ends: the next heartbeat gives the CPUs back.
  a.resources.cpus_external = 0;
  t.heartbeat(a);
  EXPECT_DOUBLE_EQ(t.view({{1, {0, 7, 0}}}).nodes[0].free.cpus, 1.0);
}

TEST(node_table, gpus_are_counted_by_id_owned_ones_taken_shared_ones_free) {
  manual_clock clock;
  node_table t(clock, seconds(5));
  // GPUs 0-3; nvidia-smi sees processes on 0, 1 and 2: on 0 a worker that owns it, on 1 two
  // sharing workers of a job, on 2 another program.
  auto r = report(1, "a", 8, 4);
  r.resources.gpus_free = {3};
  r.resources.gpus_held = {{1, 0, 0, true}, {2, 0, 1, false}, {2, 1, 1, false}};
  t.heartbeat(r);
  EXPECT_EQ(t.view({}).nodes[0].free.gpus, 2) << "1 (only Coach's sharing workers) and 3";
  // The owner's GPU is reserved too: never counted twice.
  EXPECT_EQ(t.view({{1, {1, 1, 0}}}).nodes[0].free.gpus, 2);
  EXPECT_EQ(t.view({{1, {3, 1, 0}}}).nodes[0].free.gpus, 1) << "capped by the reservations";
}

}  // namespace
}  // namespace coach::scheduler
