// A script's model (model: {script: ...}) on a cluster of coach-node processes on 127.0.0.1,
// submitted with `coach submit` as a user does: the NumPy softmax worker
// (examples/numpy/softmax.yaml) spread over three nodes learns its planted data, submitted from a
// copy of its folder that is deleted as soon as `coach submit` returns (the nodes run their own
// copies, written under their TMPDIR and removed when the job ends); with `replicas: 2` the
// node of a primary shard is SIGKILLed mid-job and the job still trains every sample of every
// epoch once; a folder over the limit and a script that fails before init are one line from
// `coach submit`, exit 2 and 1, before any scheduler is asked. Needs Debian's python3 with
// NumPy (python3-numpy); skips with the reason otherwise.
#include <gtest/gtest.h>

#include "tests/helpers/numpy_python.hpp"
#include "tests/integration/process_harness.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace itest;

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const std::string& python = coach_tests::numpy_python;
using coach_tests::have_numpy;

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

/// The files of `dir` and below (folders too), as paths relative to it.
std::vector<std::string> listing(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    out.push_back(it->path().lexically_relative(dir).string());
  return out;
}

class script_cluster : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_numpy())
      GTEST_SKIP() << python << " cannot import numpy (apt-get install python3-numpy)";
    // Each test's nodes write script jobs' files under a TMPDIR of its own, looked at below.
    tmp_ = work_dir() / ("tmp-" + test_name());
    fs::remove_all(tmp_);
    fs::create_directories(tmp_);
  }

  void TearDown() override {
    if (HasFailure()) std::fprintf(stderr, "%s", logs().c_str());
    for (auto& n : nodes_) stop_node(n);
    fs::remove_all(tmp_);  // a SIGKILLed node leaves its job's folder behind
  }

  static std::string test_name() {
    return ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }

  /// A scheduler node and `joiners` more, each running script processes with /usr/bin/python3.
  void start(int joiners) {
    ::setenv("TMPDIR", tmp_.c_str(), 1);
    at_ = free_address();
    nodes_.push_back(start_node({"--listen", at_, "--scheduler", "--store", "", "--name", "node-a",
                                 "--heartbeat", "0.25", "--python", python},
                                "node-a", test_name() + "-node-a"));
    for (int i = 0; i < joiners; ++i) {
      const std::string name = std::string("node-") + char('b' + i);
      nodes_.push_back(start_node({"--listen", free_address(), "--join", at_, "--name", name,
                                   "--heartbeat", "0.25", "--python", python},
                                  name, test_name() + "-" + name));
    }
    ::unsetenv("TMPDIR");
    ASSERT_TRUE(await_nodes_alive(at_, std::size_t(joiners) + 1)) << logs();
  }

  /// A copy of examples/numpy (the worker and its spec) in a folder of the test's, with `spec`
  /// (YAML) as its spec: the folder `coach submit` reads.
  fs::path user_folder(const std::string& name, const std::string& spec) {
    const auto dir = work_dir() / ("user-" + name);
    fs::remove_all(dir);
    fs::create_directories(dir);
    fs::copy_file(fs::path(COACH_SOURCE_DIR) / "examples/numpy/softmax_worker.py",
                  dir / "softmax_worker.py");
    std::ofstream(dir / "softmax.yaml") << spec;
    return dir;
  }

  /// `coach submit` of the folder's spec: the job's id ("" and a failed check when refused).
  std::string submit(const fs::path& dir) {
    auto r = coach("submit " + (dir / "softmax.yaml").string() + " --python " + python +
                   " --json --at " + at_);
    EXPECT_EQ(r.code, 0) << r.err;
    const double id = json_number(r.out, "job");
    return id > 0 ? std::to_string(long(id)) : "";
  }

  std::string status(const std::string& job) {
    return coach("status " + job + " --json --at " + at_).out;
  }

  template <class Pred>
  std::string poll(const std::string& job, Pred pred, std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    std::string st;
    while (std::chrono::steady_clock::now() < deadline) {
      st = status(job);
      if (pred(st)) return st;
      std::this_thread::sleep_for(50ms);
    }
    return st;
  }

  /// Polls until the job ended (or `limit`: a safeguard against a hang, not a timing claim).
  std::string wait_for_end(const std::string& job, std::chrono::milliseconds limit) {
    return poll(
        job,
        [](const std::string& s) {
          const auto state = state_of(s);
          return state == "succeeded" || state == "failed" || state == "cancelled";
        },
        limit);
  }

  static void stop_node(node_process& n) {
    if (n.pid <= 0) return;
    ::kill(n.pid, SIGKILL);
    ::waitpid(n.pid, nullptr, 0);
    n.pid = -1;
  }

  std::string logs() {
    std::string out;
    for (auto& n : nodes_) out += "---- " + n.log.string() + " ----\n" + slurp(n.log) + "\n";
    return out;
  }

  fs::path tmp_;
  std::string at_;
  std::vector<node_process> nodes_;
};

/// The example's spec (examples/numpy/softmax.yaml) with `more` after it.
std::string example_spec(const std::string& more) {
  return slurp(fs::path(COACH_SOURCE_DIR) / "examples/numpy/softmax.yaml") + more;
}

TEST_F(script_cluster, a_numpy_script_spread_over_three_nodes_learns_from_files_that_travelled) {
  start(2);
  if (HasFatalFailure()) return;
  const auto dir = user_folder("spread", example_spec("placement: spread\n"));
  const std::string job = submit(dir);
  ASSERT_FALSE(job.empty());
  // The submitter's folder is gone at once: every process of the job runs from a node's copy.
  fs::remove_all(dir);
  const auto st = wait_for_end(job, 300s);
  EXPECT_EQ(state_of(st), "succeeded") << st;
  // 0.91 measured (coach train reaches the same: BSP does not depend on where parts run).
  EXPECT_GE(job_number(st, "test_accuracy"), 0.88) << st;
  EXPECT_EQ(job_numbers(st, "epoch_samples"), std::vector<double>(3, 2000)) << st;
  const auto workers = job_strings(st, "worker_nodes"), shards = job_strings(st, "shard_nodes");
  ASSERT_EQ(workers.size(), 2u) << st;
  ASSERT_EQ(shards.size(), 2u) << st;
  EXPECT_NE(workers[0], workers[1]) << "spread: the two workers on two nodes: " << st;
  // Each node of a worker wrote the files under its own TMPDIR and ran the script from there;
  // the scheduler's node, the evaluator's copy too.
  for (const auto& n : nodes_) {
    const auto log = slurp(n.log);
    if (holds(workers, n.name) || n.name == "node-a") {
      EXPECT_TRUE(has(log, "the script softmax_worker.py and 1 more file(s) written to " +
                               (tmp_ / ("coach-node-" + n.name)).string() + "/job-" + job))
          << n.name << ":\n"
          << log;
    }
    EXPECT_FALSE(has(log, dir.string())) << n.name << " named the submitter's folder:\n" << log;
  }
  // Removed when the job ended on each node (the stop that follows a job's end is asynchronous:
  // waited for).
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  std::vector<std::string> left;
  do {
    left.clear();
    for (const auto& n : nodes_)
      for (const auto& f : listing(tmp_ / ("coach-node-" + n.name)))
        left.push_back(n.name + "/" + f);
    if (left.empty()) break;
    std::this_thread::sleep_for(100ms);
  } while (std::chrono::steady_clock::now() < deadline);
  EXPECT_TRUE(left.empty()) << ::testing::PrintToString(left);
}

TEST_F(script_cluster, with_replicas_a_killed_primarys_node_loses_no_sample_of_a_script_job) {
  start(3);
  if (HasFatalFailure()) return;
  constexpr int epochs = 300;
  const auto dir = user_folder("replicas",
                               "name: numpy-replicas\nmodel: {script: softmax_worker.py}\n"
                               "optimizer: {type: sgd, learning_rate: 0.05}\n"
                               "batch: {global: 64}\nconsistency: bsp\nseed: 7\n"
                               "epochs: " +
                                   std::to_string(epochs) +
                                   "\nworkers: 2\nshards: 2\nslice_size: 16\n"
                                   "placement: spread\nreplicas: 2\n");
  const std::string job = submit(dir);
  ASSERT_FALSE(job.empty());
  fs::remove_all(dir);
  auto st = poll(
      job, [](const std::string& s) { return job_number(s, "epochs_done") >= 5; }, 120s);
  ASSERT_GE(job_number(st, "epochs_done"), 5) << st;
  ASSERT_EQ(state_of(st), "running") << st;
  // The node of a primary shard that runs no worker (killing a worker's node changes the
  // membership), not the scheduler's.
  const auto shards = job_strings(st, "shard_nodes"), workers = job_strings(st, "worker_nodes");
  node_process* victim = nullptr;
  for (auto& n : nodes_)
    if (n.name != "node-a" && holds(shards, n.name) && !holds(workers, n.name)) victim = &n;
  ASSERT_NE(victim, nullptr) << "no primary alone on a node but the scheduler's: " << st;
  stop_node(*victim);  // SIGKILL, mid-epoch

  const auto final_status = wait_for_end(job, 400s);
  EXPECT_EQ(state_of(final_status), "succeeded") << final_status;
  EXPECT_EQ(job_number(final_status, "epochs_done"), epochs) << final_status;
  EXPECT_EQ(job_numbers(final_status, "epoch_samples"),
            std::vector<double>(std::size_t(epochs), 2000))
      << final_status;
  EXPECT_EQ(job_number(final_status, "failovers"), 1) << final_status;
  EXPECT_EQ(job_number(final_status, "recoveries"), 0) << final_status;
  EXPECT_GE(job_number(final_status, "test_accuracy"), 0.88) << final_status;
  EXPECT_FALSE(runs_on(final_status, victim->name)) << final_status;
}

TEST_F(script_cluster, a_folder_over_the_limit_and_a_broken_script_fail_before_the_cluster) {
  // Nothing listens at --at: what fails, fails before the scheduler is asked anything.
  const std::string nowhere = " --python " + python + " --at " + free_address();
  const auto big = user_folder("big", example_spec(""));
  {
    std::ofstream data(big / "data.bin", std::ios::binary);
    const std::string mib(1 << 20, 'x');
    for (int i = 0; i < 65; ++i) data << mib;
  }
  auto r = coach("submit " + (big / "softmax.yaml").string() + nowhere);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(has(r.err, "coach: the script's folder " + big.string() +
                             " holds 65.0 MiB in 3 files (the largest: data.bin, 65.0 MiB); a "
                             "script job carries at most 64.0 MiB of it to the cluster"))
      << r.err;
  EXPECT_EQ(count(r.err, "\n"), 1u) << r.err;

  const auto broken = user_folder("broken",
                                  "name: broken\nmodel: {script: external_worker.py, "
                                  "args: [fail-before-init]}\n"
                                  "optimizer: {type: sgd, learning_rate: 0.1}\n"
                                  "batch: {global: 16}\nepochs: 1\n");
  fs::copy_file(fs::path(COACH_SOURCE_DIR) / "tests/python/scripts/external_worker.py",
                broken / "external_worker.py");
  r = coach("submit " + (broken / "softmax.yaml").string() + nowhere);
  EXPECT_EQ(r.code, 1) << r.err;
  // The script's traceback, line by line, then the one line of the failure.
  EXPECT_TRUE(has(r.err,
                  "coach: external_worker.py (first process): RuntimeError: the data set "
                  "is not where the script looks\n"))
      << r.err;
  const auto last = r.err.substr(r.err.rfind('\n', r.err.size() - 2) + 1);
  EXPECT_TRUE(has(last, "exited with code 1 before it called init")) << r.err;
  EXPECT_TRUE(has(last, "RuntimeError: the data set is not where the script looks")) << r.err;
  EXPECT_FALSE(has(r.err, "connection")) << r.err;
  fs::remove_all(big);
  fs::remove_all(broken);
}

}  // namespace
