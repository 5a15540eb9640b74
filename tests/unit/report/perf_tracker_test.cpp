// scheduler::perf_tracker: an epoch that spans a change is split by the steps run under each
// allocation, each part observed as the epoch time it implies; every observation is predicted
// before it is seen; each change keeps the prediction made for the new allocation and the speed
// then observed; the JSON that `coach status JOB --json` and the report show.
#include "report/perf_tracker.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace coach::scheduler {
namespace {

epoch_segment segment(std::uint32_t workers, std::int64_t first, std::int64_t steps,
                      std::uint64_t samples, double seconds) {
  epoch_segment s;
  s.workers = workers;
  s.shards = 1;
  s.first_step = first;
  s.steps = steps;
  s.samples = samples;
  s.seconds = seconds;
  return s;
}

/// An epoch of 1000 samples at `workers` taking `seconds`, one allocation throughout.
epoch_report whole(std::uint32_t epoch, std::uint32_t workers, double seconds) {
  epoch_report e;
  e.epoch = epoch;
  e.workers = workers;
  e.shards = 1;
  e.samples = 1000;
  e.seconds = seconds;
  e.segments = {segment(workers, epoch * 10, 10, 1000, seconds)};
  return e;
}

TEST(perf_tracker, an_epoch_under_one_allocation_is_one_observation) {
  const auto o = observations_of(whole(0, 3, 7.5));
  ASSERT_EQ(o.size(), 1u);
  EXPECT_EQ(o[0].workers, 3);
  EXPECT_EQ(o[0].shards, 1);
  EXPECT_DOUBLE_EQ(o[0].epoch_seconds, 7.5);
  epoch_report legacy = whole(0, 2, 4.0);  // a report without segments (an older master)
  legacy.segments.clear();
  ASSERT_EQ(observations_of(legacy).size(), 1u);
  EXPECT_DOUBLE_EQ(observations_of(legacy)[0].epoch_seconds, 4.0);
}

TEST(perf_tracker, an_epoch_that_spans_changes_gives_each_allocation_its_own_epoch_time) {
  epoch_report e;
  e.epoch = 4;
  e.workers = 1;  // the layout it ended with: what the old accounting credited the whole epoch to
  e.shards = 1;
  e.samples = 1000;
  e.seconds = 9.2;
  // 2 workers: 400 samples in 2 s (5 s an epoch); 4 workers: 500 in 1.5 s (3 s an epoch);
  // 1 worker: 2 steps, 100 samples (too little to say anything: mostly the change's pause).
  e.segments = {segment(2, 40, 4, 400, 2.0), segment(4, 44, 5, 500, 1.5),
                segment(1, 49, 2, 100, 5.7)};
  const auto o = observations_of(e);
  ASSERT_EQ(o.size(), 2u);
  EXPECT_EQ(o[0].workers, 2);
  EXPECT_DOUBLE_EQ(o[0].epoch_seconds, 5.0);
  EXPECT_EQ(o[1].workers, 4);
  EXPECT_DOUBLE_EQ(o[1].epoch_seconds, 3.0);
}

TEST(perf_tracker, each_change_keeps_the_prediction_made_before_its_steps_and_what_came) {
  // The truth: 12 s an epoch at 1 worker, 1 + 11/w at w.
  const auto truth = [](double w) { return 1 + 11 / w; };
  perf_model model;
  perf_tracker t(7, "mlp");
  EXPECT_FALSE(t.epoch(whole(0, 1, truth(1)), model)) << "nothing to predict the first from";
  for (std::uint32_t k = 1; k < 4; ++k) EXPECT_TRUE(t.epoch(whole(k, 1, truth(1)), model));
  // Epoch 4 goes from 1 worker to 2 halfway.
  epoch_report e;
  e.epoch = 4;
  e.workers = 2;
  e.shards = 1;
  e.samples = 1000;
  e.seconds = truth(1) / 2 + truth(2) / 2;
  e.segments = {segment(1, 40, 5, 500, truth(1) / 2), segment(2, 45, 5, 500, truth(2) / 2)};
  // What the model predicts for 2 workers once it has seen everything before their first step:
  // the same epochs replayed into a second model, the first half of epoch 4 included.
  perf_model replay;
  for (int k = 0; k < 5; ++k) replay.observe(7, "mlp", 1, 1, truth(1));
  const auto before = replay.predict(7, "mlp", 2, 1);
  ASSERT_TRUE(before);
  t.epoch(e, model);
  ASSERT_EQ(t.changes().size(), 1u);
  const auto c = t.changes()[0];
  EXPECT_EQ(c.epoch, 4u);
  EXPECT_EQ(c.from_workers, 1);
  EXPECT_EQ(c.workers, 2);
  ASSERT_TRUE(c.predicted_s);
  EXPECT_DOUBLE_EQ(*c.predicted_s, *before) << "made before any step at 2 workers was seen";
  EXPECT_DOUBLE_EQ(c.observed_s, truth(2));
  EXPECT_DOUBLE_EQ(*c.error(), std::abs(*before - truth(2)) / truth(2));
  EXPECT_DOUBLE_EQ(*t.mean_change_error(), *c.error());
  EXPECT_EQ(t.predictions(), 5u) << "epochs 1-3 and both halves of epoch 4";
  // Fitted to what 2 workers did (6.5 s), not to the whole epoch credited to its last step's
  // allocation (9.25 s).
  const auto after = model.predict(7, "mlp", 2, 1);
  ASSERT_TRUE(after);
  EXPECT_LT(std::abs(*after - truth(2)), std::abs(*after - e.seconds));
  // Back to 1 worker for a whole epoch: a second change.
  t.epoch(whole(5, 1, truth(1)), model);
  ASSERT_EQ(t.changes().size(), 2u);
  EXPECT_EQ(t.changes()[1].from_workers, 2);
  EXPECT_EQ(t.changes()[1].workers, 1);

  const auto j = t.to_json();
  EXPECT_EQ(j["predictions"], 6);
  ASSERT_EQ(j["changes"].size(), 2u) << j.dump();
  EXPECT_EQ(j["changes"][0]["epoch"], 5) << "1-based";
  EXPECT_EQ(j["changes"][0]["from"], json::array({1, 1})) << j.dump();
  EXPECT_EQ(j["changes"][0]["to"], json::array({2, 1})) << j.dump();
  EXPECT_NEAR(j["changes"][0]["observed_epoch_s"].get<double>(), truth(2), 1e-5);
  EXPECT_NEAR(j["changes"][0]["error"].get<double>(), *c.error(), 1e-5);
  EXPECT_TRUE(j["mean_change_error"].is_number()) << j.dump();
  EXPECT_NEAR(j["last_observed_s"].get<double>(), truth(1), 1e-5);
}

TEST(perf_tracker, a_job_with_no_epoch_yet_has_null_figures) {
  const auto j = perf_tracker(1, "m").to_json();
  EXPECT_EQ(j["predictions"], 0);
  EXPECT_TRUE(j["mean_abs_rel_error"].is_null());
  EXPECT_TRUE(j["mean_change_error"].is_null());
  EXPECT_TRUE(j["changes"].empty());
}

}  // namespace
}  // namespace coach::scheduler
