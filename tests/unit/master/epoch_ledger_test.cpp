// master::epoch_ledger with a manual clock: an epoch's report comes once, when it is both
// complete and evaluated (in either order), with its time from its beginning to its last
// chunk's completion, and its sums, means and layout from what the master told it.
#include "master/epoch_ledger.hpp"

#include <gtest/gtest.h>

#include <limits>

namespace coach::master {
using namespace coach::scheduler;
namespace {

TEST(epoch_ledger, reports_an_epoch_once_it_is_complete_and_evaluated) {
  manual_clock clock;
  epoch_ledger l(clock);
  l.begin(0);
  l.step_opened(0, 0, 3, 2);
  l.step_opened(0, 1, 3, 2);
  clock.advance(seconds(0.5));
  l.reported(0, 0, 64, 128.0, 300000);
  l.ends_with(0, 3, 2);
  l.step_opened(0, 2, 3, 2);
  l.reported(0, 2, 36, 18.0, 200000);
  EXPECT_FALSE(l.take_report(0)) << "neither complete nor evaluated";
  clock.advance(seconds(1.5));
  l.completed(0);
  EXPECT_FALSE(l.take_report(0)) << "not evaluated";
  clock.advance(seconds(7.0));  // the evaluation's time is not the epoch's
  l.evaluated(0, 45, 50, 10.0);
  const auto r = l.take_report(0);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->epoch, 0u);
  EXPECT_EQ(r->samples, 100u);
  EXPECT_EQ(r->steps, 3);
  EXPECT_DOUBLE_EQ(r->train_loss, 146.0 / 100.0);
  EXPECT_DOUBLE_EQ(r->test_accuracy, 0.9);
  EXPECT_DOUBLE_EQ(r->test_loss, 0.2);
  EXPECT_DOUBLE_EQ(r->seconds, 2.0);
  EXPECT_DOUBLE_EQ(r->samples_per_s, 50.0);
  EXPECT_DOUBLE_EQ(r->compute_seconds, 0.5);
  EXPECT_EQ(r->workers, 3u);
  EXPECT_EQ(r->shards, 2u);
  ASSERT_EQ(r->segments.size(), 1u) << "one allocation throughout";
  EXPECT_EQ(r->segments[0].steps, 3);
  EXPECT_EQ(r->segments[0].samples, 100u);
  EXPECT_DOUBLE_EQ(r->segments[0].seconds, 2.0);
  EXPECT_FALSE(l.take_report(0)) << "given once";
}

TEST(epoch_ledger, an_epoch_that_spans_changes_is_split_by_the_steps_run_under_each) {
  manual_clock clock;
  epoch_ledger l(clock);
  l.begin(4);
  // Steps 40-41 with 2 workers (1 s), 42-44 with 4 (1.5 s), 45 with 1 (0.5 s, then done).
  l.step_opened(4, 40, 2, 1);
  l.step_opened(4, 41, 2, 1);
  l.reported(4, 40, 64, 1.0, 0);
  clock.advance(seconds(1.0));
  l.step_opened(4, 42, 4, 1);
  l.reported(4, 41, 64, 1.0, 0);  // a report of the earlier segment, late
  l.step_opened(4, 43, 4, 1);
  l.step_opened(4, 44, 4, 1);
  l.reported(4, 42, 128, 1.0, 0);
  l.reported(4, 43, 128, 1.0, 0);
  clock.advance(seconds(1.5));
  l.step_opened(4, 45, 1, 1);
  l.reported(4, 44, 128, 1.0, 0);
  l.ends_with(4, 1, 1);
  clock.advance(seconds(0.5));
  l.reported(4, 45, 20, 1.0, 0);
  l.completed(4);
  l.evaluated(4, 1, 1, 0.0);
  const auto r = l.take_report(4);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->steps, 6);
  EXPECT_EQ(r->samples, 532u);
  EXPECT_DOUBLE_EQ(r->seconds, 3.0);
  EXPECT_EQ(r->workers, 1u) << "the layout it ended with";
  ASSERT_EQ(r->segments.size(), 3u);
  const std::uint32_t workers[] = {2, 4, 1};
  const std::int64_t first[] = {40, 42, 45}, steps[] = {2, 3, 1};
  const std::uint64_t samples[] = {128, 384, 20};
  const double secs[] = {1.0, 1.5, 0.5};
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(r->segments[i].workers, workers[i]) << i;
    EXPECT_EQ(r->segments[i].shards, 1u) << i;
    EXPECT_EQ(r->segments[i].first_step, first[i]) << i;
    EXPECT_EQ(r->segments[i].steps, steps[i]) << i;
    EXPECT_EQ(r->segments[i].samples, samples[i]) << i;
    EXPECT_DOUBLE_EQ(r->segments[i].seconds, secs[i]) << i;
  }
}

TEST(epoch_ledger, an_evaluation_before_the_last_report_waits_for_completion) {
  manual_clock clock;
  epoch_ledger l(clock);
  l.begin(1);
  l.evaluated(1, 0, 0, 0.0);  // an empty test set: accuracy and loss 0, no division
  EXPECT_FALSE(l.take_report(1));
  clock.advance(seconds(3.0));
  l.step_opened(1, 0, 1, 1);
  l.reported(1, 0, 30, 3.0, 0);
  l.completed(1);
  const auto r = l.take_report(1);
  ASSERT_TRUE(r);
  EXPECT_DOUBLE_EQ(r->test_accuracy, 0.0);
  EXPECT_DOUBLE_EQ(r->test_loss, 0.0);
  EXPECT_DOUBLE_EQ(r->seconds, 3.0);
  EXPECT_DOUBLE_EQ(r->samples_per_s, 10.0);
  EXPECT_FALSE(l.take_report(2)) << "an epoch never seen";
}

TEST(epoch_ledger, progress_counts_the_epoch_so_far) {
  manual_clock clock;
  epoch_ledger l(clock);
  EXPECT_EQ(l.progress(0).samples_done, 0u);
  l.begin(0);
  clock.advance(seconds(4.0));
  l.reported(0, 0, 200, 50.0, 0);
  const auto p = l.progress(0);
  EXPECT_EQ(p.epoch, 0u);
  EXPECT_EQ(p.samples_done, 200u);
  EXPECT_DOUBLE_EQ(p.train_loss, 0.25);
  EXPECT_DOUBLE_EQ(p.seconds, 4.0);
  EXPECT_DOUBLE_EQ(p.samples_per_s, 50.0);
}

TEST(diverged, a_loss_that_is_no_longer_a_number_fails_the_job_naming_the_learning_rate) {
  epoch_report e;
  e.epoch = 2;
  e.train_loss = 0.31;
  EXPECT_FALSE(diverged(e, 0.01));
  e.train_loss = 1e30;  // large, but a number: training may still come back
  EXPECT_FALSE(diverged(e, 0.01));
  e.train_loss = -std::numeric_limits<double>::quiet_NaN();
  auto why = diverged(e, 1e30);
  ASSERT_TRUE(why);
  EXPECT_EQ(why->code, errc::invalid_argument);
  EXPECT_EQ(why->message,
            "training diverged: the training loss is nan after epoch 3 (the parameters are no "
            "longer numbers); lower optimizer.learning_rate (1e+30) or check the data");
  e.train_loss = std::numeric_limits<double>::infinity();
  ASSERT_TRUE(diverged(e, 0.5));
  EXPECT_NE(diverged(e, 0.5)->message.find("is infinite after epoch 3"), std::string::npos);
}

}  // namespace
}  // namespace coach::master
