// scheduler::job_log: a job's history numbered in one sequence, its epochs' lines kept apart so
// that they cannot push its other lines out, read back merged and from any point on.
#include <gtest/gtest.h>

#include <string>

#include "scheduler/job_log.hpp"

namespace coach::scheduler {
namespace {

TEST(job_log, lines_and_epochs_come_back_merged_in_the_order_they_were_added) {
  job_log log;
  log.add(10, "submitted");
  log.add_epoch(11, "epoch 1");
  log.add(12, "worker 2 joined");
  log.add_epoch(13, "epoch 2");
  const auto all = log.since(0);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0], (job_event{1, 10, "submitted"}));
  EXPECT_EQ(all[1], (job_event{2, 11, "epoch 1"}));
  EXPECT_EQ(all[2], (job_event{3, 12, "worker 2 joined"}));
  EXPECT_EQ(all[3], (job_event{4, 13, "epoch 2"}));
  // A follower that has up to 2 gets 3 and 4; one that has all gets nothing.
  const auto later = log.since(2);
  ASSERT_EQ(later.size(), 2u);
  EXPECT_EQ(later[0].seq, 3u);
  EXPECT_TRUE(log.since(4).empty());
}

TEST(job_log, epochs_are_capped_apart_and_never_push_the_other_lines_out) {
  job_log log;
  log.add(0, "submitted");
  for (std::size_t e = 0; e < 3 * job_log::max_epoch_events; ++e)
    log.add_epoch(1, "epoch " + std::to_string(e + 1));
  const auto all = log.since(0);
  ASSERT_EQ(all.size(), 1 + job_log::max_epoch_events);
  EXPECT_EQ(all.front().text, "submitted");
  EXPECT_EQ(all[1].text, "epoch " + std::to_string(2 * job_log::max_epoch_events + 1))
      << "the latest epochs";
  EXPECT_EQ(all.back().seq, 1 + 3 * job_log::max_epoch_events) << "numbers go on";
}

TEST(job_log, other_lines_keep_the_latest_max_events) {
  job_log log;
  for (std::size_t i = 0; i < job_log::max_events + 5; ++i) log.add(0, std::to_string(i));
  const auto all = log.since(0);
  ASSERT_EQ(all.size(), job_log::max_events);
  EXPECT_EQ(all.front().text, "5");
  EXPECT_EQ(all.front().seq, 6u);
}

}  // namespace
}  // namespace coach::scheduler
