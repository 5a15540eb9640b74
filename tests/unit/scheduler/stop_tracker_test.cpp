// scheduler::stop_tracker: when a job's earlier runs are stopped everywhere, which stops are
// sent late, asked again, or given up with a lost node.

#include "scheduler/stop_tracker.hpp"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace coach::scheduler {
namespace {

TEST(stop_tracker, a_job_may_start_once_every_host_answered_or_was_lost) {
  stop_tracker t;
  EXPECT_TRUE(t.empty());
  t.ask({2, 3, 4}, 10);
  EXPECT_FALSE(t.empty());
  EXPECT_EQ(t.count(), 3u);
  EXPECT_TRUE(t.stopping(2));
  EXPECT_FALSE(t.answered(2));
  EXPECT_FALSE(t.answered(2)) << "an answer counts once";
  t.lost(3);
  EXPECT_TRUE(t.answered(4)) << "the last answer";
  EXPECT_TRUE(t.empty());
  EXPECT_FALSE(t.answered(9)) << "a host never asked";
}

TEST(stop_tracker, an_earlier_processs_stops_are_sent_when_the_hosts_heartbeat_or_forgotten) {
  stop_tracker t;
  t.ask_unsent({2, 3}, 10);
  EXPECT_EQ(t.unsent(), (std::set<std::uint32_t>{2, 3}));
  EXPECT_EQ(t.unanswered(), (std::set<std::uint32_t>{2, 3}));
  EXPECT_TRUE(t.seen(2));
  EXPECT_FALSE(t.seen(2)) << "sent once";
  EXPECT_TRUE(t.forget_unseen([](std::uint32_t h) { return h == 2; }));
  EXPECT_TRUE(t.unsent().empty()) << "host 3 is taken for dead";
  EXPECT_EQ(t.unanswered(), std::set<std::uint32_t>{2});
  EXPECT_FALSE(t.forget_unseen([](std::uint32_t) { return false; })) << "none unsent";
  EXPECT_EQ(t.unanswered(), std::set<std::uint32_t>{2}) << "sent: waits for its answer";
}

TEST(stop_tracker, unanswered_stops_to_live_hosts_are_asked_again_once_overdue) {
  stop_tracker t;
  t.ask_unsent({2, 3}, 10);
  EXPECT_TRUE(t.seen(2));
  const auto alive = [](std::uint32_t h) { return h != 4; };
  EXPECT_TRUE(t.overdue(15, 5, alive).empty()) << "5 s: not more than 5";
  EXPECT_EQ(t.overdue(16, 5, alive), std::vector<std::uint32_t>{2}) << "3 was never sent";
  EXPECT_EQ(t.asked_at(), 16.0);
  EXPECT_TRUE(t.overdue(20, 5, alive).empty()) << "asked again at 16";
  t.ask({2, 4}, 30);
  EXPECT_EQ(t.overdue(40, 5, alive), std::vector<std::uint32_t>{2}) << "4 is not alive";
}

}  // namespace
}  // namespace coach::scheduler
