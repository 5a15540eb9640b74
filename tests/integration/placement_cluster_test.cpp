// Placement on a live cluster: four coach-node processes on 127.0.0.1 (--cpus 2 each, so no node
// holds the whole job; the scheduler's default placement dltap). The same digits job, submitted
// with `placement: spread` and with `placement: dltap`, trains to the same accuracy; `coach
// status --json` names the placement, its aggregation degree, and the bytes the transports
// counted between hosts: dltap's are at most 0.6 of spread's (it pairs each shard with a worker,
// where spread puts each part on its own node).
#include <gtest/gtest.h>

#include "tests/helpers/example_text.hpp"
#include "tests/integration/process_harness.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

namespace {

using namespace itest;

class placement_cluster : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    sched_addr_ = free_address();
    nodes_.push_back(start_node({"--listen", sched_addr_, "--scheduler", "--store", "", "--name",
                                 "node-a", "--heartbeat", "0.25", "--cpus", "2"},
                                "node-a", "placement-node-a"));
    for (const char* name : {"node-b", "node-c", "node-d"})
      nodes_.push_back(start_node({"--listen", free_address(), "--join", sched_addr_, "--name",
                                   name, "--heartbeat", "0.25", "--cpus", "2"},
                                  name, std::string("placement-") + name));
    up_ = await_nodes_alive(sched_addr_, 4);
  }
  void SetUp() override { ASSERT_TRUE(up_) << "the 4 nodes did not all come up: " << node_logs(); }
  static void TearDownTestSuite() { stop_nodes(nodes_); }
  static std::string node_logs() {
    std::string out;
    for (auto& n : nodes_) out += "\n---- " + n.name + " ----\n" + slurp(n.log);
    return out;
  }
  void TearDown() override {
    if (HasFailure())
      for (auto& n : nodes_)
        std::fprintf(stderr, "---- %s ----\n%s\n", n.name.c_str(), slurp(n.log).c_str());
  }

  /// Runs the digits job with `placement:` (empty: none) to its end; its final status, which
  /// `submit --wait` prints once every node reported the job's last bytes (traffic_final).
  static std::string run(const std::string& placement) {
    const auto spec =
        work_dir() / ("digits-" + (placement.empty() ? "default" : placement) + ".yaml");
    std::ofstream(spec) << example_files::example_text("digits-mlp.yaml")
                        << (placement.empty() ? "" : "placement: " + placement + "\n");
    auto r = coach("submit " + spec.string() + " --workers 2 --shards 2 --wait --json --at " +
                   sched_addr_);
    if (r.code != 0) return "submit failed: " + r.out + r.err;
    if (r.out.find("\"traffic_final\":true") == std::string::npos)
      return "the nodes never reported the job's last bytes: " + r.out;
    return r.out;
  }

  static inline std::string sched_addr_;
  static inline std::vector<node_process> nodes_;
  static inline bool up_ = false;  ///< every node alive after SetUpTestSuite
};

TEST_F(placement_cluster, dltap_moves_at_most_six_tenths_of_the_bytes_of_spread) {
  const std::string spread = run("spread");
  const std::string dltap = run("dltap");
  for (const auto* st : {&spread, &dltap}) {
    EXPECT_EQ(state_of(*st), "succeeded") << *st;
    EXPECT_GE(job_number(*st, "test_accuracy"), 0.95) << *st;
  }
  EXPECT_EQ(job_string(spread, "placement"), "spread") << spread;
  EXPECT_EQ(job_string(dltap, "placement"), "dltap") << dltap;
  // The same math wherever the parts run (BSP, fixed seed).
  EXPECT_EQ(job_number(spread, "test_accuracy"), job_number(dltap, "test_accuracy"));
  const double s = job_number(spread, "cross_host_bytes");
  const double d = job_number(dltap, "cross_host_bytes");
  std::fprintf(stderr, "cross-host bytes: spread %.0f, dltap %.0f (ratio %.3f)\n", s, d,
               s > 0 ? d / s : 0.0);
  EXPECT_GT(s, 1e6) << spread;
  EXPECT_LE(d, 0.6 * s) << dltap;
  // Spread put the 4 parts on 4 nodes.
  for (const char* name : {"node-a", "node-b", "node-c", "node-d"})
    EXPECT_TRUE(runs_on(spread, name)) << spread;
}

TEST_F(placement_cluster, a_job_without_placement_gets_the_schedulers_and_status_shows_it) {
  const std::string st = run("");
  EXPECT_EQ(state_of(st), "succeeded") << st;
  EXPECT_EQ(job_string(st, "placement"), "dltap") << st;
  auto table = coach("status --at " + sched_addr_);
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("PLACEMENT"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("dltap"), std::string::npos) << table.out;
}

TEST_F(placement_cluster, a_bad_placement_is_one_line) {
  const auto spec = work_dir() / "digits-bad-placement.yaml";
  std::ofstream(spec) << example_files::example_text("digits-mlp.yaml") << "placement: nearest\n";
  auto r = coach("submit " + spec.string() + " --at " + sched_addr_);
  EXPECT_EQ(r.code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("field 'placement' must be one of spread, best-fit, random, dltap, got "
                       "'nearest'"),
            std::string::npos)
      << r.err;
}

}  // namespace
