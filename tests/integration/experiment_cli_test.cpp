// coach experiment: a study run end to end on coach-nodes it starts itself, with a small job:
// every grid point trained, the table and the chart written, the error and regret computed
// from what was measured; a study it does not know is refused.
#include <gtest/gtest.h>

#include <string>

#include "tests/integration/process_harness.hpp"

namespace {

using namespace itest;

/// Runs `study` on local nodes with the digits job; its output in OUT (work_dir()/study).
run_result run_study(const std::string& study, const std::string& args) {
  return coach("experiment " + study + " " + args +
               " --spec examples/digits-mlp.yaml --train-limit 0 --out " +
               (work_dir() / study).string());
}

TEST(experiment, the_prediction_study_trains_the_grid_and_writes_its_table_and_chart) {
  const auto out = work_dir() / "prediction";
  auto r = run_study("prediction", "--local 2 --epochs 2");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto table = slurp(out / "prediction.md");
  EXPECT_EQ(table, r.out) << "what it printed is what it wrote";
  // A header, its separator and the 8 points of the grid, then the summary.
  EXPECT_EQ(table.rfind("| allocation | measured epoch s | predicted s | error |\n|---|", 0), 0u)
      << table;
  EXPECT_EQ(count(table, "\n| "), 8u) << table;
  EXPECT_EQ(count(table, "| fitted |"), 4u) << table;
  EXPECT_NE(table.find("Fitted on the first 4 of 8 points. Mean error on the others: **"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("regret **"), std::string::npos) << table;
  const auto svg = slurp(out / "prediction.svg");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_EQ(count(svg, "<polyline"), 2u) << "measured and predicted";
  // It ran on two coach-nodes of its own.
  EXPECT_NE(r.err.find("2 coach-node(s)"), std::string::npos) << r.err;
}

TEST(experiment, the_policies_study_runs_the_sequence_under_each_policy_on_contended_nodes) {
  const auto out = work_dir() / "policies";
  auto r = run_study("policies", "--local 3 --epochs 1");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto table = slurp(out / "policies.md");
  EXPECT_EQ(table, r.out) << "what it printed is what it wrote";
  EXPECT_EQ(table.rfind("| policy | makespan s | mean turnaround s | mean wait s |\n|---|", 0), 0u)
      << table;
  for (const char* p : {"| fifo |", "| elastic-fifo |", "| round-robin |", "| coach |"})
    EXPECT_EQ(count(table, p), 1u) << p << "\n" << table;
  // Nodes of 2 slots, so that the five jobs (12 workers asked) contend; said as it was.
  EXPECT_NE(r.err.find("3 coach-node(s) of 2 CPU slots"), std::string::npos) << r.err;
  EXPECT_NE(table.find("3 local nodes of 2 CPU slots"), std::string::npos) << table;
  const auto svg = slurp(out / "policies.svg");
  EXPECT_EQ(count(svg, "<polyline"), 4u) << "a line per policy";
}

TEST(experiment, an_unknown_study_is_refused) {
  auto r = coach("experiment lottery");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "coach: experiment: unknown study 'lottery' (known: scaling, prediction, dynamic, "
            "policies)\n");
}

}  // namespace
