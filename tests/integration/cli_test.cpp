// The `coach` program as a user runs it: exit codes, one-line errors, the JSON report.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/helpers/run_coach.hpp"

namespace {

using coach::testing::temp_file;

coach::testing::run_result run(const std::string& args) {
  return coach::testing::run_coach(args);
}

TEST(cli, version_names_the_backends) {
  auto r = run("version");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.output.find("coach 0."), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cpu"), std::string::npos) << r.output;
}

TEST(cli, spec_error_is_one_line_naming_the_field_with_exit_code_2) {
  auto path =
      temp_file("bad.yaml",
                "name: x\ndataset: {format: csv, path: data/digits.csv.gz}\n"
                "model: {type: mlp, hiden: [8]}\noptimizer: {type: sgd, learning_rate: 0.1}\n"
                "batch_size: 8\nepochs: 1\n");
  auto r = run("train " + path.string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("model.hiden"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(":3:"), std::string::npos) << r.output;  // the line
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
}

TEST(cli, missing_spec_file_and_bad_flags_exit_2) {
  auto r = run("train /nonexistent/job.yaml");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("/nonexistent/job.yaml"), std::string::npos) << r.output;
  r = run("train examples/digits-mlp.yaml --backend gpu");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("gpu"), std::string::npos) << r.output;
  r = run("train examples/digits-mlp.yaml --workers 99");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--workers 99"), std::string::npos) << r.output;
  r = run("frobnicate");
  EXPECT_EQ(r.code, 2);
}

TEST(cli, train_writes_a_report_with_the_accuracy) {
  if (!std::filesystem::exists("data/digits.csv.gz")) GTEST_SKIP() << "run scripts/setup.sh";
  auto report = temp_file("report.json", "");
  auto r = run("train examples/digits-mlp.yaml --workers 2 --shards 2 --report " + report.string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("epoch 20/20"), std::string::npos) << r.output;
  std::stringstream text;
  text << std::ifstream(report).rdbuf();
  const std::string json = text.str();
  EXPECT_NE(json.find("\"test_accuracy\": 0.9"), std::string::npos) << json;
  EXPECT_NE(json.find("\"samples_per_s\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"epoch\": 20"), std::string::npos) << json;
  EXPECT_NE(json.find("\"cancelled\": false"), std::string::npos) << json;
}

TEST(cli, ctrl_c_stops_at_a_step_boundary_and_writes_the_report) {
  if (!std::filesystem::exists("data/digits.csv.gz")) GTEST_SKIP() << "run scripts/setup.sh";
  const auto data = std::filesystem::absolute("data/digits.csv.gz").string();
  auto spec = temp_file("long.yaml", "name: long\ndataset: {format: csv, path: " + data +
                                         "}\nmodel: {type: mlp, hidden: [32]}\n"
                                         "optimizer: {type: sgd, learning_rate: 0.1}\n"
                                         "batch_size: 16\nepochs: 1000000\n");
  auto report = temp_file("stopped.json", "");
  const std::string cmd = std::string(COACH_BINARY_DIR) + "/apps/coach train " + spec.string() +
                          " --report " + report.string() + " > " + report.string() +
                          ".log 2>&1 & pid=$!; "
                          // Interrupted once it trains (its second epoch printed), not before.
                          "for i in $(seq 1200); do grep -q '^epoch 2/' " +
                          report.string() +
                          ".log && break; sleep 0.05; done; kill -INT $pid; wait $pid; echo $?";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[64] = {};
  const std::size_t n = fread(buf, 1, sizeof buf - 1, p);
  pclose(p);
  EXPECT_EQ(std::string(buf, n), "130\n");
  std::stringstream text;
  text << std::ifstream(report).rdbuf();
  EXPECT_NE(text.str().find("\"cancelled\": true"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("\"epoch\": 1,"), std::string::npos) << text.str();
}

}  // namespace
