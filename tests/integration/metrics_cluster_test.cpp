// /metrics of a live cluster: three coach-node processes on 127.0.0.1, each with
// --metrics-listen, train a job; every node serves Prometheus text that `promtool check
// metrics` accepts (where Debian's prometheus package is installed), and the scheduler's
// figures of the job are those `coach status JOB --json` shows.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/integration/process_harness.hpp"

namespace {

using namespace itest;

/// Samples of a Prometheus text by "name{labels}".
std::map<std::string, double> samples_of(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const auto sp = line.rfind(' ');
    out[line.substr(0, sp)] = std::strtod(line.c_str() + sp + 1, nullptr);
  }
  return out;
}

/// Whether `promtool` is on the PATH.
bool have_promtool() {
  return std::system("command -v promtool >/dev/null 2>&1") == 0;
}

class metrics_cluster : public ::testing::Test {
 protected:
  void SetUp() override {
    at_ = free_address();
    const char* names[] = {"node-a", "node-b", "node-c"};
    for (int i = 0; i < 3; ++i) {
      ports_.push_back(free_port());
      std::vector<std::string> args{
          "--listen",         i == 0 ? at_ : free_address(),
          "--name",           names[i],
          "--heartbeat",      "0.25",
          "--metrics-listen", "127.0.0.1:" + std::to_string(ports_.back())};
      if (i == 0) {
        args.insert(args.end(), {"--scheduler", "--store", ""});
      } else {
        args.insert(args.end(), {"--join", at_});
      }
      nodes_.push_back(start_node(args, names[i], std::string("metrics-") + names[i]));
    }
    ASSERT_TRUE(await_nodes_alive(at_, 3)) << logs();
  }
  void TearDown() override {
    if (HasFailure()) std::fprintf(stderr, "%s", logs().c_str());
    stop_nodes(nodes_);
  }
  std::string logs() {
    std::string out;
    for (auto& n : nodes_) out += "---- " + n.name + " ----\n" + slurp(n.log);
    return out;
  }
  httplib::Result get(int port, const std::string& path) {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(10, 0);
    return c.Get(path.c_str());
  }

  std::string at_;
  std::vector<int> ports_;
  std::vector<node_process> nodes_;
};

TEST_F(metrics_cluster, every_node_serves_metrics_promtool_accepts_and_the_job_matches_status) {
  const auto spec = work_dir() / "metrics-digits.yaml";
  std::ofstream(spec) << "name: metered\n"
                         "dataset: {format: csv, path: " COACH_SOURCE_DIR
                         "/data/digits.csv.gz, test_fraction: 0.2}\n"
                         "model: {type: mlp, hidden: [64], activation: relu}\n"
                         "optimizer: {type: momentum, learning_rate: 0.05, momentum: 0.9}\n"
                         "batch_size: 32\nepochs: 8\nconsistency: bsp\nseed: 7\nworkers: 2\n"
                         "shards: 2\nplacement: spread\nbackend: cpu\n";
  auto sub = coach("submit " + spec.string() + " --wait --json --at " + at_);
  ASSERT_EQ(sub.code, 0) << sub.err << logs();
  const auto job = nlohmann::json::parse(sub.out);
  const auto id = job.at("job").get<std::uint64_t>();
  const auto st = coach("status " + std::to_string(id) + " --json --at " + at_);
  ASSERT_EQ(st.code, 0) << st.err;
  const auto status = nlohmann::json::parse(st.out).at("jobs").at(0);
  ASSERT_EQ(status.at("state"), "succeeded") << st.out;

  const char* names[] = {"node-a", "node-b", "node-c"};
  for (int i = 0; i < 3; ++i) {
    const auto r = get(ports_[std::size_t(i)], "/metrics");
    ASSERT_TRUE(r) << names[i] << ": no answer from its /metrics";
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->get_header_value("Content-Type").rfind("text/plain; version=0.0.4", 0), 0u);
    const auto s = samples_of(r->body);
    const std::string node = std::string("{node=\"") + names[i] + "\"}";
    EXPECT_GT(s.at("coach_node_cpus" + node), 0) << r->body;
    EXPECT_GT(s.at("coach_node_memory_bytes" + node), 0) << r->body;
    // Each node sent messages of the job (its parts' pushes, pulls or parameters).
    double sent = 0;
    for (const auto& [k, v] : s)
      if (k.rfind("coach_transport_sent_bytes_total{node=\"" + std::string(names[i]), 0) == 0)
        sent += v;
    EXPECT_GT(sent, 0) << r->body;
    if (have_promtool()) {
      const auto file = work_dir() / (std::string("metrics-") + names[i] + ".txt");
      std::ofstream(file) << r->body;
      const auto report = work_dir() / "promtool.out";
      const std::string cmd =
          "promtool check metrics < " + file.string() + " > " + report.string() + " 2>&1";
      EXPECT_EQ(std::system(cmd.c_str()), 0) << names[i] << ": " << slurp(report);
    }
    if (i != 0) {
      EXPECT_EQ(s.count("coach_jobs{state=\"succeeded\"}"), 0u) << "the scheduler's only";
      continue;
    }
    // The scheduler's figures of the job are what coach status --json shows.
    const std::string j = "{job=\"" + std::to_string(id) + "\"}";
    EXPECT_EQ(s.at("coach_jobs{state=\"succeeded\"}"), 1);
    EXPECT_EQ(s.at("coach_nodes{state=\"alive\"}"), 3);
    EXPECT_EQ(s.at("coach_policy_info{policy=\"fifo\"}"), 1);
    EXPECT_EQ(s.at("coach_job_epochs_done" + j), status.at("epochs_done").get<double>());
    EXPECT_EQ(s.at("coach_job_workers" + j), status.at("workers").get<double>());
    EXPECT_EQ(s.at("coach_job_shards" + j), status.at("shards").get<double>());
    auto near = [](double a, double b) { return std::abs(a - b) <= 1e-5 * std::abs(b) + 1e-12; };
    EXPECT_TRUE(near(s.at("coach_job_test_accuracy" + j), status.at("test_accuracy")))
        << s.at("coach_job_test_accuracy" + j) << " vs " << status.at("test_accuracy");
    EXPECT_TRUE(near(s.at("coach_job_loss" + j), status.at("loss")));
    EXPECT_TRUE(near(s.at("coach_job_samples_per_second" + j), status.at("samples_per_s")));
    EXPECT_TRUE(near(s.at("coach_job_last_observed_epoch_seconds" + j),
                     status.at("model").at("last_observed_s")));
    EXPECT_TRUE(near(s.at("coach_job_predicted_epoch_seconds" + j),
                     status.at("model").at("predicted_epoch_s")));
    EXPECT_GE(status.at("test_accuracy").get<double>(), 0.9) << st.out;
  }
  if (!have_promtool())
    GTEST_SKIP() << "promtool (Debian package prometheus) is not installed: the text was checked "
                    "here, not by promtool";
}

TEST(metrics_listen, an_address_that_cannot_be_bound_stops_the_node_with_the_reason) {
  const int port = free_port();
  auto n = start_node({"--listen", free_address(), "--scheduler", "--store", "", "--metrics-listen",
                       "127.0.0.1:" + std::to_string(port), "--name", "first"},
                      "first", "metrics-first");
  bool up = false;
  for (int i = 0; i < 100 && !up; ++i) {
    up = slurp(n.log).find("metrics at http://127.0.0.1:") != std::string::npos;
    if (!up) std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(up) << slurp(n.log);
  // A second node on the same metrics port cannot start (the first holds it).
  auto second =
      start_node({"--listen", free_address(), "--scheduler", "--store", "", "--metrics-listen",
                  "127.0.0.1:" + std::to_string(port), "--name", "second"},
                 "second", "metrics-second");
  EXPECT_EQ(wait_exit(second.pid, 30s), 1);
  EXPECT_NE(slurp(second.log)
                .find("--metrics-listen: cannot listen on 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << slurp(second.log);
  std::vector<node_process> all{n};
  stop_nodes(all);
}

}  // namespace
