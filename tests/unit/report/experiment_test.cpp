// scheduler::experiment: the arithmetic of `coach experiment`: a run's typical epoch, the
// prediction study's error and regret, the policies study's makespan, turnaround and wait, and
// the tables and charts it writes.
#include "report/experiment.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "report/perf_model.hpp"

namespace coach::scheduler::experiment {
namespace {

TEST(experiment, the_typical_epoch_is_the_median_after_the_first) {
  EXPECT_FALSE(typical_epoch({}));
  const double one[] = {3.0};
  EXPECT_DOUBLE_EQ(*typical_epoch(one), 3.0);
  const double odd[] = {9.0, 1.0, 3.0, 2.0};  // the first (9: loading) left out
  EXPECT_DOUBLE_EQ(*typical_epoch(odd), 2.0);
  const double even[] = {9.0, 1.0, 4.0};
  EXPECT_DOUBLE_EQ(*typical_epoch(even), 2.5);
}

TEST(experiment, points_from_the_models_own_family_are_predicted_exactly_enough) {
  // Epoch times from a curve of the model's family: fitted on four, the other four within 5%.
  const perf_theta truth{0.3, 0.5, 0.01, 0.005, 0.04};
  std::vector<measured_point> pts;
  for (auto [w, p] : {std::pair{1, 1}, {4, 2}, {1, 2}, {4, 1}, {2, 1}, {3, 2}, {3, 1}, {2, 2}})
    pts.push_back({w, p, epoch_seconds(truth, w, p)});
  const auto r = predict_from_first(pts, 4);
  EXPECT_EQ(r.fit_points, 4u);
  ASSERT_EQ(r.points.size(), 8u);
  EXPECT_TRUE(r.points[3].fitted);
  EXPECT_FALSE(r.points[4].fitted);
  EXPECT_LT(r.mean_abs_rel_error, 0.05);
  // The fastest is 4 workers, 1 shard; the regret of the model's pick is small.
  EXPECT_EQ(r.best.workers, 4);
  EXPECT_EQ(r.best.shards, 1);
  EXPECT_LT(r.regret, 0.05);
  EXPECT_GE(r.regret, 0.0);
}

TEST(experiment, regret_is_the_speed_lost_by_the_predicted_best) {
  // A model fitted on two points that knows nothing of the third, which is the fastest.
  const std::vector<measured_point> pts{{1, 1, 10.0}, {2, 1, 6.0}, {4, 1, 12.0}};
  const auto r = predict_from_first(pts, 2);
  EXPECT_EQ(r.best.workers, 2);
  // Whatever it picked, regret = 1 - best / picked (measured).
  EXPECT_DOUBLE_EQ(r.regret, 1 - 6.0 / r.predicted_best.epoch_s);
  const double err = std::abs(r.points[2].predicted_s - 12.0) / 12.0;
  EXPECT_DOUBLE_EQ(r.mean_abs_rel_error, err) << "only the point not fitted counts";
}

TEST(experiment, makespan_turnaround_and_wait) {
  const std::vector<job_times> jobs{{"a", 0, 0, 10}, {"b", 2, 10, 14}, {"c", 4, 4, 8}};
  const auto f = policy_metrics(jobs);
  EXPECT_DOUBLE_EQ(f.makespan_s, 14);
  EXPECT_DOUBLE_EQ(f.mean_turnaround_s, (10 + 12 + 4) / 3.0);
  EXPECT_DOUBLE_EQ(f.mean_wait_s, (0 + 8 + 0) / 3.0);
  EXPECT_DOUBLE_EQ(policy_metrics({}).makespan_s, 0);
}

TEST(experiment, a_markdown_table_and_a_self_contained_chart) {
  EXPECT_EQ(markdown_table({"a", "b"}, {{"1", "2"}, {"3", "4"}}),
            "| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |\n");
  const auto svg = line_chart_svg("T <1>", "x", "y", {"p", "q", "r"},
                                  {{"one", {1.0, 2.0, std::nullopt}}, {"two", {0.5, 0.5, 0.5}}});
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_NE(svg.find("T &lt;1&gt;"), std::string::npos) << "text escaped";
  EXPECT_EQ(svg.find("http", 40), std::string::npos) << "nothing fetched";
  std::size_t lines = 0;
  for (auto at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1))
    ++lines;
  EXPECT_EQ(lines, 2u);
  std::size_t dots = 0;
  for (auto at = svg.find("<circle"); at != std::string::npos; at = svg.find("<circle", at + 1))
    ++dots;
  EXPECT_EQ(dots, 5u) << "no dot where a series has no point";
}

}  // namespace
}  // namespace coach::scheduler::experiment
