// Nodes frozen (SIGSTOP) past the node timeout and thawed (SIGCONT), as a paused VM or a stalled
// host does it, driven through real coach-node processes (issue 37, items 1 and 7):
// - a job that went on without a frozen node's worker, then lost its shard's node, restarts from
//   its checkpoint and completes with every sample of every epoch trained once (the thawed
//   node's stale worker no longer takes the place of the new run's);
// - a thawed worker-only node drops the worker the job went on without, and drains at once;
// - a cancelled job whose step cannot finish (a worker frozen, the node timeout far off) ends
//   within 5 s.
#include <gtest/gtest.h>

#include "tests/helpers/example_text.hpp"
#include "tests/integration/process_harness.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace itest;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

class frozen_node : public ::testing::Test {
 protected:
  void TearDown() override {
    for (auto& n : nodes_)
      if (n.pid > 0) ::kill(n.pid, SIGCONT);  // a failed test may leave one frozen
    if (HasFailure())
      for (auto& n : nodes_)
        std::fprintf(stderr, "---- %s ----\n%s\n", n.name.c_str(), slurp(n.log).c_str());
    stop_nodes(nodes_);
  }

  /// Nodes a (the scheduler, placement spread), b, c, ...: `count` in all, heartbeating every
  /// `heartbeat` s, dead after `timeout` s of silence. Returns once all are alive.
  void start_cluster(int count, const std::string& heartbeat, const std::string& timeout) {
    at_ = free_address();
    nodes_.push_back(
        start_node({"--listen", at_, "--scheduler", "--store", "", "--name", "a", "--heartbeat",
                    heartbeat, "--node-timeout", timeout, "--placement", "spread"},
                   log_prefix() + "a"));
    for (int i = 1; i < count; ++i) {
      const std::string name(1, char('a' + i));
      nodes_.push_back(start_node(
          {"--listen", free_address(), "--join", at_, "--name", name, "--heartbeat", heartbeat},
          log_prefix() + name));
    }
    ASSERT_TRUE(await_nodes_alive(at_, std::size_t(count)));
  }

  static std::string log_prefix() {
    return std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "-";
  }

  node_process& node(const std::string& name) {
    for (auto& n : nodes_)
      if (n.name == log_prefix() + name) return n;
    ADD_FAILURE() << "no node " << name;
    return nodes_.front();
  }

  /// The digits example with EPOCHS epochs, submitted with 2 workers and 1 shard; its id.
  std::string submit_digits(int epochs) {
    const auto spec = work_dir() / ("digits-" + std::to_string(epochs) + ".yaml");
    {
      std::istringstream in(example_files::example_text("digits-mlp.yaml"));
      std::ofstream out(spec);
      for (std::string line; std::getline(in, line);)
        out << (line.starts_with("epochs:") ? "epochs: " + std::to_string(epochs) : line) << "\n";
    }
    auto r = coach("submit " + spec.string() + " --workers 2 --shards 1 --json --at " + at_);
    EXPECT_EQ(r.code, 0) << r.err;
    return std::to_string(long(json_number(r.out, "job")));
  }

  std::string status(const std::string& job) {
    return coach("status " + job + " --json --at " + at_).out;
  }

  /// Polls the job's status every 100 ms until `done(status)` holds or `limit` passes; the last
  /// status seen.
  template <class Pred>
  std::string await_status(const std::string& job, std::chrono::seconds limit, Pred done) {
    const auto deadline = clock_type::now() + limit;
    std::string st;
    while (clock_type::now() < deadline) {
      st = status(job);
      if (done(st)) break;
      std::this_thread::sleep_for(100ms);
    }
    return st;
  }

  /// The job's final status, once it leaves running and queued (up to `limit`).
  std::string await_end(const std::string& job, std::chrono::seconds limit) {
    return await_status(job, limit, [](const std::string& st) {
      const auto s = state_of(st);
      return !s.empty() && s != "running" && s != "queued";
    });
  }

  /// The node `name` as `coach nodes --json` lists it (null if it does not).
  nlohmann::json node_entry(const std::string& name) {
    for (auto& n : nodes_of(coach("nodes --json --at " + at_).out))
      if (string_field(n, "name") == name) return n;
    return nullptr;
  }

  /// Waits (up to 20 s) until `coach nodes` lists `name` with alive == `alive`.
  bool await_alive(const std::string& name, bool alive) {
    for (int i = 0; i < 200; ++i) {
      if (json_field(node_entry(name), "alive") == alive) return true;
      std::this_thread::sleep_for(100ms);
    }
    return false;
  }

  /// Waits (up to 10 s) until `coach nodes` lists `name` running no part; false if it never does.
  bool await_idle(const std::string& name) {
    for (int i = 0; i < 100; ++i) {
      if (number_field(node_entry(name), "actors_running") == 0) return true;
      std::this_thread::sleep_for(100ms);
    }
    return false;
  }

  /// Every epoch of the final status trained each sample once, and there were `epochs`.
  static void expect_every_sample_once(const std::string& final_status, int epochs) {
    const double per_epoch = job_number(final_status, "samples_per_epoch");
    ASSERT_GT(per_epoch, 1000) << final_status;
    const auto done = job_numbers(final_status, "epoch_samples");
    EXPECT_EQ(done.size(), std::size_t(epochs)) << final_status;
    for (std::size_t e = 0; e < done.size(); ++e)
      EXPECT_EQ(done[e], per_epoch) << "epoch " << e + 1;
  }

  std::string at_;
  std::vector<node_process> nodes_;
};

TEST_F(frozen_node, a_job_recovered_after_a_thawed_worker_node_completes_every_sample_once) {
  ASSERT_NO_FATAL_FAILURE(start_cluster(4, "0.25", "1"));
  constexpr int epochs = 2500;
  const auto job = submit_digits(epochs);
  // Spread: workers on a and b, the shard on c (d idle).
  auto st = await_status(job, 60s,
                         [](const std::string& s) { return job_number(s, "epochs_done") >= 5; });
  ASSERT_EQ(job_strings(st, "worker_nodes"), (std::vector<std::string>{"a", "b"})) << st;
  ASSERT_EQ(job_strings(st, "shard_nodes"), (std::vector<std::string>{"c"})) << st;
  // b freezes past the node timeout: the job goes on without its worker; then b thaws.
  ASSERT_EQ(::kill(node("b").pid, SIGSTOP), 0);
  st = await_status(job, 20s, [](const std::string& s) {
    return holds(job_strings(s, "worker_nodes"), "b (lost)");
  });
  ASSERT_TRUE(holds(job_strings(st, "worker_nodes"), "b (lost)")) << st;
  ASSERT_EQ(::kill(node("b").pid, SIGCONT), 0);
  ASSERT_TRUE(await_alive("b", true));
  ASSERT_EQ(state_of(status(job)), "running") << "the job ended before its shard's node died";
  // The shard's node dies: no replica, so the job restarts from its checkpoint on a, b and d.
  ASSERT_EQ(::kill(node("c").pid, SIGKILL), 0);
  ::waitpid(node("c").pid, nullptr, 0);
  node("c").pid = -1;
  const auto final_status = await_end(job, 240s);
  EXPECT_EQ(state_of(final_status), "succeeded") << final_status;
  EXPECT_EQ(job_number(final_status, "epochs_done"), epochs) << final_status;
  EXPECT_EQ(job_number(final_status, "recoveries"), 1) << final_status;
  expect_every_sample_once(final_status, epochs);
  EXPECT_GE(job_number(final_status, "test_accuracy"), 0.95) << final_status;
}

TEST_F(frozen_node, a_thawed_worker_only_node_drops_the_worker_its_job_went_on_without) {
  ASSERT_NO_FATAL_FAILURE(start_cluster(3, "0.25", "1"));
  constexpr int epochs = 1500;
  const auto job = submit_digits(epochs);
  auto st = await_status(job, 60s,
                         [](const std::string& s) { return job_number(s, "epochs_done") >= 5; });
  ASSERT_EQ(job_strings(st, "worker_nodes"), (std::vector<std::string>{"a", "b"})) << st;
  ASSERT_EQ(::kill(node("b").pid, SIGSTOP), 0);
  ASSERT_TRUE(await_alive("b", false));
  ASSERT_EQ(::kill(node("b").pid, SIGCONT), 0);
  ASSERT_TRUE(await_alive("b", true));
  // Told to stop what it kept: nothing runs on b while the job goes on without it.
  EXPECT_TRUE(await_idle("b")) << node_entry("b").dump();
  EXPECT_EQ(state_of(status(job)), "running");
  // So it drains at once (it waited for its zombie worker until the drain timeout).
  const auto asked = clock_type::now();
  ASSERT_EQ(::kill(node("b").pid, SIGTERM), 0);
  EXPECT_EQ(wait_exit(node("b").pid, 20s), 0);
  EXPECT_LT(clock_type::now() - asked, 10s);
  node("b").pid = -1;
  const auto final_status = await_end(job, 240s);
  EXPECT_EQ(state_of(final_status), "succeeded") << final_status;
  expect_every_sample_once(final_status, epochs);
  EXPECT_EQ(count(slurp(node("a").log), "protocol_error"), 0u) << slurp(node("a").log);
}

TEST_F(frozen_node, a_cancelled_job_whose_step_cannot_finish_ends_within_5_s) {
  // The node timeout is far off: nothing but the cancel ends the frozen run.
  ASSERT_NO_FATAL_FAILURE(start_cluster(3, "0.5", "60"));
  const auto job = submit_digits(100000);
  auto st = await_status(job, 60s,
                         [](const std::string& s) { return job_number(s, "epochs_done") >= 3; });
  ASSERT_EQ(job_strings(st, "worker_nodes"), (std::vector<std::string>{"a", "b"})) << st;
  // BSP: with worker 1 frozen, no step finishes.
  ASSERT_EQ(::kill(node("b").pid, SIGSTOP), 0);
  const auto asked = clock_type::now();
  auto r = coach("cancel " + job + " --at " + at_);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto final_status = await_end(job, 20s);
  const auto took = clock_type::now() - asked;
  EXPECT_EQ(state_of(final_status), "cancelled") << final_status;
  EXPECT_LT(took, 5s);
  // Thawed, b reads its stop and holds nothing.
  ASSERT_EQ(::kill(node("b").pid, SIGCONT), 0);
  EXPECT_TRUE(await_idle("b")) << node_entry("b").dump();
}

}  // namespace
