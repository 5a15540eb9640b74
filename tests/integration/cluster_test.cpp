// A cluster of three coach-node processes on 127.0.0.1, driven by the `coach` CLI as a user
// drives it: the nodes join, a Fashion-MNIST job spreads over them and reaches the accuracy of
// `coach train`, status shows bytes between hosts, spec errors come back as one line, a node
// drains on SIGTERM.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

extern char** environ;

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

struct run_result {
  int code = -1;
  std::string out;  ///< stdout
  std::string err;  ///< stderr
};

fs::path work_dir() {
  static const fs::path dir = [] {
    auto d = fs::temp_directory_path() / ("coach-cluster-" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Runs `coach ARGS` to completion from the source tree (examples/ paths resolve).
run_result coach(const std::string& args) {
  static int n = 0;
  const auto out = work_dir() / ("out" + std::to_string(++n));
  const auto err = work_dir() / ("err" + std::to_string(n));
  const std::string cmd = "cd " + std::string(COACH_SOURCE_DIR) + " && " +
                          std::string(COACH_BINARY_DIR) + "/apps/coach " + args + " >" +
                          out.string() + " 2>" + err.string();
  const int status = std::system(cmd.c_str());
  run_result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

std::string free_address() {
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::router);
  s.bind("tcp://127.0.0.1:0");
  return s.get(zmq::sockopt::last_endpoint);
}

/// The number after "KEY": in a JSON text (first occurrence), or -1.
double json_number(const std::string& text, const std::string& key, std::size_t from = 0) {
  const auto at = text.find("\"" + key + "\": ", from);
  if (at == std::string::npos) return -1;
  return std::strtod(text.c_str() + at + key.size() + 4, nullptr);
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

struct node_process {
  pid_t pid = -1;
  std::string name;
  fs::path log;
};

node_process start_node(const std::vector<std::string>& args, const std::string& name) {
  node_process p;
  p.name = name;
  p.log = work_dir() / (name + ".log");
  std::vector<std::string> argv_s{std::string(COACH_BINARY_DIR) + "/apps/coach-node"};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, p.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  if (posix_spawn(&p.pid, argv[0], &fa, nullptr, argv.data(), environ) != 0) p.pid = -1;
  posix_spawn_file_actions_destroy(&fa);
  return p;
}

/// Waits up to `limit` for the process to exit; its exit code, or -1 if it did not.
int wait_exit(pid_t pid, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : -2;
    std::this_thread::sleep_for(50ms);
  }
  return -1;
}

class cluster : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    sched_addr_ = free_address();
    nodes_.push_back(start_node(
        {"--listen", sched_addr_, "--scheduler", "--name", "node-a", "--heartbeat", "0.25"},
        "node-a"));
    for (const char* name : {"node-b", "node-c"})
      nodes_.push_back(start_node({"--listen", free_address(), "--join", sched_addr_, "--name",
                                   name, "--heartbeat", "0.25"},
                                  name));
    // Up when the scheduler lists all three alive.
    for (int i = 0; i < 100; ++i) {
      auto r = coach("nodes --json --at " + sched_addr_);
      if (r.code == 0 && count(r.out, "\"alive\": true") == 3) return;
      std::this_thread::sleep_for(200ms);
    }
  }
  static void TearDownTestSuite() {
    for (auto& n : nodes_)
      if (n.pid > 0) ::kill(n.pid, SIGTERM);
    for (auto& n : nodes_) {
      if (n.pid <= 0) continue;
      if (wait_exit(n.pid, 20s) == -1) {
        ::kill(n.pid, SIGKILL);
        ::waitpid(n.pid, nullptr, 0);
      }
    }
    nodes_.clear();
  }
  void TearDown() override {
    if (HasFailure())
      for (auto& n : nodes_)
        std::fprintf(stderr, "---- %s ----\n%s\n", n.name.c_str(), slurp(n.log).c_str());
  }

  static inline std::string sched_addr_;
  static inline std::vector<node_process> nodes_;
};

TEST_F(cluster, three_nodes_join_and_are_listed_with_their_resources) {
  auto r = coach("nodes --json --at " + sched_addr_);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(count(r.out, "\"alive\": true"), 3u) << r.out;
  for (const char* name : {"node-a", "node-b", "node-c"})
    EXPECT_NE(r.out.find(std::string("\"name\": \"") + name + "\""), std::string::npos) << r.out;
  EXPECT_GT(json_number(r.out, "cpus_total"), 0) << r.out;
  EXPECT_GT(json_number(r.out, "memory_total"), 0) << r.out;
  auto table = coach("nodes --at " + sched_addr_);
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("node-b"), std::string::npos) << table.out;
}

TEST_F(cluster, fashion_mnist_over_three_nodes_reaches_the_accuracy_of_coach_train) {
  auto r = coach("submit examples/fashion-mlp.yaml --workers 3 --shards 2 --wait --json --at " +
                 sched_addr_);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("\"state\": \"succeeded\""), std::string::npos) << r.out;
  EXPECT_GE(json_number(r.out, "test_accuracy"), 0.87) << r.out;
  EXPECT_EQ(json_number(r.out, "epochs_done"), 5) << r.out;

  const double job = json_number(r.out, "job");
  auto st = coach("status " + std::to_string(long(job)) + " --json --at " + sched_addr_);
  ASSERT_EQ(st.code, 0) << st.err;
  EXPECT_NE(st.out.find("\"state\": \"succeeded\""), std::string::npos) << st.out;
  EXPECT_GT(json_number(st.out, "cross_host_bytes"), 1e6) << st.out;
  // Spread: the three workers on three different nodes.
  for (const char* name : {"node-a", "node-b", "node-c"})
    EXPECT_NE(st.out.find(std::string("\"") + name + "\""), std::string::npos) << st.out;
  auto all = coach("status --json --at " + sched_addr_);
  ASSERT_EQ(all.code, 0) << all.err;
  EXPECT_NE(all.out.find("\"jobs\": [{"), std::string::npos) << all.out;
}

TEST_F(cluster, a_spec_error_reaches_the_submitter_as_one_line) {
  const auto bad = work_dir() / "bad.yaml";
  std::ofstream(bad) << "name: x\ndataset: {format: csv, path: data/digits.csv.gz}\n"
                        "model: {type: mlp, hidden: [8]}\noptimizer: {type: sgd, lr: 0.1}\n"
                        "batch_size: 8\nepochs: 1\n";
  auto r = coach("submit " + bad.string() + " --at " + sched_addr_);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("optimizer.lr"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(":4:"), std::string::npos) << r.err;
  EXPECT_EQ(count(r.err, "\n"), 1u) << r.err;
  // A schedule of elastic changes runs with `coach train` only in this version: said in a line.
  auto sched = coach("submit examples/elastic.yaml --at " + sched_addr_);
  EXPECT_NE(sched.code, 0);
  EXPECT_NE(sched.err.find("'schedule' runs with `coach train` in this version"), std::string::npos)
      << sched.err;
  EXPECT_EQ(count(sched.err, "\n"), 1u) << sched.err;
}

TEST_F(cluster, unknown_job_and_missing_scheduler_are_clear_errors) {
  auto r = coach("status 999 --at " + sched_addr_);
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("no job 999"), std::string::npos) << r.err;
  auto c = coach("cancel 999 --at " + sched_addr_);
  EXPECT_EQ(c.code, 2) << c.err;
  const std::string nobody = free_address();
  auto n = coach("nodes --at " + nobody);
  EXPECT_EQ(n.code, 1) << n.err;
  EXPECT_NE(n.err.find("no answer"), std::string::npos) << n.err;
  EXPECT_NE(n.err.find(nobody), std::string::npos) << n.err;
}

TEST_F(cluster, a_cancelled_job_ends_cancelled) {
  auto r =
      coach("submit examples/fashion-mlp.yaml --workers 2 --shards 1 --json --at " + sched_addr_);
  ASSERT_EQ(r.code, 0) << r.err;
  const long job = long(json_number(r.out, "job"));
  ASSERT_GT(job, 0) << r.out;
  std::this_thread::sleep_for(1500ms);
  auto c = coach("cancel " + std::to_string(job) + " --at " + sched_addr_);
  ASSERT_EQ(c.code, 0) << c.err;
  std::string state;
  for (int i = 0; i < 150 && state != "cancelled"; ++i) {
    auto st = coach("status " + std::to_string(job) + " --json --at " + sched_addr_);
    if (st.out.find("\"state\": \"cancelled\"") != std::string::npos) state = "cancelled";
    std::this_thread::sleep_for(200ms);
  }
  EXPECT_EQ(state, "cancelled");
}

TEST_F(cluster, a_job_outlives_a_killed_node_that_ran_only_a_worker) {
  // A fourth node: workers 0-3 land on nodes a-d, shards on a and b, so d runs worker 3 only.
  auto d = start_node({"--listen", free_address(), "--join", sched_addr_, "--name", "node-d",
                       "--heartbeat", "0.25"},
                      "node-d");
  ASSERT_GT(d.pid, 0);
  bool up = false;
  for (int i = 0; i < 100 && !up; ++i) {
    up = count(coach("nodes --json --at " + sched_addr_).out, "\"alive\": true") == 4;
    if (!up) std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(up) << slurp(d.log);
  auto r =
      coach("submit examples/fashion-mlp.yaml --workers 4 --shards 2 --json --at " + sched_addr_);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string job = std::to_string(long(json_number(r.out, "job")));
  // Mid-epoch: once some samples of the first epoch are done, node d dies without a word.
  bool training = false;
  for (int i = 0; i < 300 && !training; ++i) {
    auto st = coach("status " + job + " --json --at " + sched_addr_);
    training = json_number(st.out, "samples_done") > 5000;
    if (!training) std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(training);
  ASSERT_EQ(::kill(d.pid, SIGKILL), 0);
  ::waitpid(d.pid, nullptr, 0);
  std::string final_status;
  for (int i = 0; i < 1200; ++i) {
    auto st = coach("status " + job + " --json --at " + sched_addr_);
    if (st.out.find("\"state\": \"running\"") == std::string::npos &&
        st.out.find("\"state\": \"queued\"") == std::string::npos) {
      final_status = st.out;
      break;
    }
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_NE(final_status.find("\"state\": \"succeeded\""), std::string::npos) << final_status;
  EXPECT_NE(final_status.find("node-d (lost)"), std::string::npos) << final_status;
  EXPECT_EQ(json_number(final_status, "epochs_done"), 5) << final_status;
  EXPECT_GE(json_number(final_status, "test_accuracy"), 0.85) << final_status;
  // Worker 3's chunks went back to the queue: every epoch trained every sample exactly once.
  EXPECT_NE(final_status.find("\"epoch_samples\": [60000, 60000, 60000, 60000, 60000]"),
            std::string::npos)
      << final_status;
}

// Last (gtest runs a suite's tests in order): it takes a node away.
TEST_F(cluster, sigterm_drains_a_node_which_exits_cleanly) {
  auto& c = nodes_.back();
  ASSERT_EQ(::kill(c.pid, SIGTERM), 0);
  EXPECT_EQ(wait_exit(c.pid, 20s), 0) << slurp(c.log);
  c.pid = -1;
  EXPECT_NE(slurp(c.log).find("stopped"), std::string::npos);
  // The scheduler notices: after the node timeout it is listed dead.
  bool dead = false;
  for (int i = 0; i < 60 && !dead; ++i) {
    auto r = coach("nodes --json --at " + sched_addr_);
    dead = count(r.out, "\"alive\": true") == 2;
    if (!dead) std::this_thread::sleep_for(250ms);
  }
  EXPECT_TRUE(dead);
}

}  // namespace
