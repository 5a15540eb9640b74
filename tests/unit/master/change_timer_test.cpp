// master::change_timer with a manual clock: the step time and its spread before a change
// come from the steps completed before its request, the pause is the change's step gap less
// that median, join and transfer times run from their milestones, and samples/s is counted
// over the steps before and after.
#include "master/change_timer.hpp"

#include <gtest/gtest.h>

namespace coach::master {
using namespace coach::scheduler;
namespace {

TEST(change_timer, measures_the_pause_a_change_adds_against_the_steps_before_it) {
  manual_clock clock;
  change_timer t(clock);
  // Steps 0..10 every 10 ms, except step 6 after 16 ms: median 10 ms, spread 6 ms.
  for (std::int64_t s = 0; s <= 10; ++s) {
    clock.advance(seconds(s == 6 ? 0.016 : 0.010));
    t.step_completed(s, 32);
  }
  const auto asked = clock.now();
  clock.advance(seconds(0.004));
  t.begin("workers 3", 12, asked);
  t.adds_workers();
  t.step_completed(11, 32);  // open at the request: not counted before the change
  clock.advance(seconds(0.035));
  t.step_completed(12, 48);  // the change's first step: 35 ms after the one before
  EXPECT_EQ(t.changes_done(), 1u);
  for (std::int64_t s = 13; s <= 14; ++s) {
    clock.advance(seconds(0.008));
    t.step_completed(s, 48);
  }
  const auto reports = t.reports();
  ASSERT_EQ(reports.size(), 1u);
  const auto& r = reports[0];
  EXPECT_EQ(r.what, "workers 3");
  EXPECT_EQ(r.step, 12);
  EXPECT_NEAR(r.step_ms, 10.0, 1e-6);
  EXPECT_NEAR(r.step_spread_ms, 6.0, 1e-6);
  EXPECT_NEAR(r.gap_ms, 35.0, 1e-6);
  EXPECT_NEAR(r.pause_ms, 25.0, 1e-6);
  EXPECT_NEAR(r.join_ms, 4.0 + 35.0, 1e-6) << "request to the first step with the new workers";
  // Before: 10 gaps, 10 steps of 32 samples in 106 ms.
  EXPECT_NEAR(r.samples_per_s_before, 320.0 / 0.106, 1e-6);
  // After: steps 13 and 14, 96 samples in 16 ms.
  EXPECT_NEAR(r.samples_per_s_after, 96.0 / 0.016, 1e-6);
  EXPECT_EQ(r.transfer_ms, -1.0) << "no slices moved";
  EXPECT_EQ(r.prepare_ms, -1.0);
}

TEST(change_timer, a_migration_reports_its_preparation_transfer_and_bytes) {
  manual_clock clock;
  change_timer t(clock);
  const auto asked = clock.now();
  clock.advance(seconds(0.5));
  const auto ready = clock.now();
  clock.advance(seconds(0.1));
  t.begin("migrate 0 to node-b", 40, asked, ready);
  t.add_moved_bytes(4096);
  t.add_moved_bytes(1024);
  t.orders_sent();
  clock.advance(seconds(0.25));
  t.transfers_done();
  EXPECT_EQ(t.changes_done(), 0u) << "its first step has not completed";
  const auto r = t.reports().at(0);
  EXPECT_NEAR(r.prepare_ms, 500.0, 1e-6);
  EXPECT_NEAR(r.transfer_ms, 250.0, 1e-6);
  EXPECT_EQ(r.moved_bytes, 5120u);
  EXPECT_EQ(r.step_ms, -1.0) << "no step completed before the request";
  EXPECT_EQ(r.join_ms, -1.0);
}

TEST(change_timer, milestones_before_any_change_are_ignored) {
  manual_clock clock;
  change_timer t(clock);
  t.adds_workers();
  t.orders_sent();
  t.transfers_done();
  t.add_moved_bytes(7);
  t.step_completed(0, 1);
  EXPECT_TRUE(t.reports().empty());
  EXPECT_EQ(t.changes_done(), 0u);
}

}  // namespace
}  // namespace coach::master
