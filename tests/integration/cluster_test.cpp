// A cluster of three coach-node processes on 127.0.0.1, driven by the `coach` CLI as a user
// drives it: the nodes join, a Fashion-MNIST job spreads over them and reaches the accuracy of
// `coach train`, status shows bytes between hosts, spec errors come back as one line, a node
// drains on SIGTERM.
#include <gtest/gtest.h>

#include "tests/helpers/example_text.hpp"
#include "tests/integration/process_harness.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

extern char** environ;

namespace {

using namespace itest;

namespace fs = std::filesystem;
using namespace std::chrono_literals;

/// How many of a job's worker_nodes or shard_nodes name a node of this suite ("node-...").
std::size_t node_entries(const std::vector<std::string>& list) {
  return std::size_t(
      std::ranges::count_if(list, [](const std::string& n) { return n.starts_with("node-"); }));
}

class cluster : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    sched_addr_ = free_address();
    nodes_.push_back(start_node({"--listen", sched_addr_, "--scheduler", "--store", "", "--name",
                                 "node-a", "--heartbeat", "0.25", "--placement", "spread"},
                                "node-a"));
    for (const char* name : {"node-b", "node-c"})
      nodes_.push_back(start_node({"--listen", free_address(), "--join", sched_addr_, "--name",
                                   name, "--heartbeat", "0.25"},
                                  name));
    // Up when the scheduler lists all three alive.
    up_ = await_nodes_alive(sched_addr_, 3);
  }
  void SetUp() override { ASSERT_TRUE(up_) << "the 3 nodes did not all come up: " << node_logs(); }
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

  static inline std::string sched_addr_;
  static inline std::vector<node_process> nodes_;
  static inline bool up_ = false;  ///< every node alive after SetUpTestSuite
};

TEST_F(cluster, three_nodes_join_and_are_listed_with_their_resources) {
  auto r = coach("nodes --json --at " + sched_addr_);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(alive_nodes(r.out), 3u) << r.out;
  const auto names = node_names(r.out);
  for (const char* name : {"node-a", "node-b", "node-c"}) EXPECT_TRUE(holds(names, name)) << r.out;
  for (const auto& node : nodes_of(r.out)) {
    EXPECT_GT(number_field(node, "cpus_total"), 0) << r.out;
    EXPECT_GT(number_field(node, "memory_total"), 0) << r.out;
  }
  auto table = coach("nodes --at " + sched_addr_);
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("node-b"), std::string::npos) << table.out;
}

TEST_F(cluster, fashion_mnist_over_three_nodes_reaches_the_accuracy_of_coach_train) {
  // BSP: where the parts run does not change the arithmetic, so the cluster's accuracy is
  // exactly that of the same job in one process.
  const auto report = work_dir() / "fashion-train.json";
  auto t =
      coach("train examples/fashion-mlp.yaml --workers 3 --shards 2 --report " + report.string());
  ASSERT_EQ(t.code, 0) << t.err;
  const double expected = json_number(slurp(report), "test_accuracy");
  EXPECT_GE(expected, 0.87);
  auto r = coach("submit examples/fashion-mlp.yaml --workers 3 --shards 2 --wait --json --at " +
                 sched_addr_);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(state_of(r.out), "succeeded") << r.out;
  EXPECT_DOUBLE_EQ(job_number(r.out, "test_accuracy"), expected) << r.out;
  EXPECT_EQ(job_number(r.out, "epochs_done"), 5) << r.out;

  const double job = json_number(r.out, "job");
  auto st = coach("status " + std::to_string(long(job)) + " --json --at " + sched_addr_);
  ASSERT_EQ(st.code, 0) << st.err;
  EXPECT_EQ(state_of(st.out), "succeeded") << st.out;
  EXPECT_GT(job_number(st.out, "cross_host_bytes"), 1e6) << st.out;
  // Spread: the three workers on three different nodes.
  for (const char* name : {"node-a", "node-b", "node-c"})
    EXPECT_TRUE(runs_on(st.out, name)) << st.out;
  auto all = coach("status --json --at " + sched_addr_);
  ASSERT_EQ(all.code, 0) << all.err;
  const auto jobs = json_field(parse_json(all.out), "jobs");
  EXPECT_TRUE(jobs.is_array() && !jobs.empty() && jobs[0].is_object()) << all.out;
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
}

/// What one digits job (4 workers, 2 shards) did: its status, and the bytes each node sent to
/// other nodes, by node name.
struct reduce_run {
  std::string status;
  std::map<std::string, double> bytes_out;  ///< node name -> bytes sent to other hosts
};

reduce_run run_digits_job(const std::string& at, bool host_reduce) {
  const auto spec = work_dir() / (host_reduce ? "digits-host-reduce.yaml" : "digits-plain.yaml");
  std::ofstream(spec) << example_files::example_text("digits-mlp.yaml")
                      << (host_reduce ? "host_reduce: true\n" : "");
  reduce_run out;
  auto r = coach("submit " + spec.string() + " --workers 4 --shards 2 --wait --json --at " + at);
  if (r.code != 0) return {r.out + r.err};
  auto st =
      coach("status " + std::to_string(long(json_number(r.out, "job"))) + " --json --at " + at);
  out.status = st.out;
  // The traffic names hosts by id; `coach nodes` says which node each id is.
  std::map<double, std::string> name_of;
  for (const auto& n : nodes_of(coach("nodes --json --at " + at).out))
    name_of[number_field(n, "host")] = string_field(n, "name");
  for (const auto& link : json_field(job_json(st.out), "traffic")) {
    const double src = number_field(link, "src_host"), dst = number_field(link, "dst_host");
    if (src == dst || !name_of.contains(src) || !name_of.contains(dst)) continue;
    out.bytes_out[name_of[src]] += number_field(link, "bytes");
  }
  return out;
}

TEST_F(cluster, host_reduction_sums_the_workers_of_each_node_before_pushing) {
  // 4 workers over 3 nodes: one node runs two, which push one sum per shard. The same job with
  // and without host_reduce, placed alike: the two-worker node sends about half the gradient
  // bytes (one sum instead of two), and the model trains the same.
  const auto plain = run_digits_job(sched_addr_, false);
  const auto reduced = run_digits_job(sched_addr_, true);
  for (const auto* run : {&plain, &reduced}) {
    EXPECT_EQ(state_of(run->status), "succeeded") << run->status;
    EXPECT_GE(job_number(run->status, "test_accuracy"), 0.95) << run->status;
    EXPECT_EQ(job_numbers(run->status, "epoch_samples"), std::vector<double>(20, 1438))
        << run->status;
    // submit --wait returned once every node had reported the job's last bytes.
    EXPECT_NE(run->status.find("\"traffic_final\":true"), std::string::npos) << run->status;
  }
  EXPECT_NEAR(job_number(reduced.status, "test_accuracy"),
              job_number(plain.status, "test_accuracy"), 0.005);
  const auto workers = job_strings(reduced.status, "worker_nodes");
  ASSERT_EQ(node_entries(workers), 4u) << reduced.status;
  ASSERT_EQ(job_strings(plain.status, "worker_nodes"), workers)
      << "the two jobs were placed differently:\n"
      << plain.status << "\n"
      << reduced.status;
  ASSERT_EQ(job_strings(plain.status, "shard_nodes"), job_strings(reduced.status, "shard_nodes"))
      << plain.status << "\n"
      << reduced.status;
  std::string doubled;
  for (const char* n : {"node-a", "node-b", "node-c"})
    if (std::ranges::count(workers, std::string(n)) == 2) doubled = n;
  ASSERT_FALSE(doubled.empty()) << "no node ran two workers: " << reduced.status;
  const auto shards = job_strings(reduced.status, "shard_nodes");
  ASSERT_FALSE(holds(shards, doubled))
      << "spread put a shard beside two workers: " << reduced.status;
  // Measured: 17.9 MB plain, 9.4 MB reduced from the two-worker node (it holds no shard, so
  // it sends pushes only). The others' bytes are mostly answers to pulls, which vary with how
  // the steps fell, so they are not compared.
  const double before = plain.bytes_out.at(doubled), after = reduced.bytes_out.at(doubled);
  EXPECT_LT(after, 0.6 * before) << doubled << " sent " << after << " B reduced, " << before
                                 << " B plain";
  EXPECT_GT(after, 0.4 * before) << doubled << " sent " << after << " B reduced, " << before
                                 << " B plain";
}

/// Polls `coach status JOB` until the job leaves queued/running; its last status.
std::string wait_for_end(const std::string& job, const std::string& at) {
  for (int i = 0; i < 1800; ++i) {
    auto st = coach("status " + job + " --json --at " + at);
    if (st.code == 0 && state_of(st.out) != "running" && state_of(st.out) != "queued")
      return st.out;
    std::this_thread::sleep_for(100ms);
  }
  return "(still running after 180 s)";
}

TEST_F(cluster, an_elastic_schedule_runs_over_nodes_with_the_math_of_coach_train) {
  // examples/elastic.yaml adds a worker, adds two shards, migrates one, adds a worker, drains a
  // shard and removes two workers, all mid-epoch. New parts start on other nodes; BSP makes the
  // result independent of where anything runs, so the accuracy is exactly coach train's.
  const auto report = work_dir() / "elastic-train.json";
  auto t = coach("train examples/elastic.yaml --report " + report.string());
  ASSERT_EQ(t.code, 0) << t.err;
  const double expected = json_number(slurp(report), "test_accuracy");
  ASSERT_GE(expected, 0.95);

  auto r = coach("submit examples/elastic.yaml --wait --json --at " + sched_addr_);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const std::string job = std::to_string(long(json_number(r.out, "job")));
  auto st = coach("status " + job + " --json --at " + sched_addr_);
  ASSERT_EQ(st.code, 0) << st.err;
  EXPECT_EQ(state_of(st.out), "succeeded") << st.out;
  EXPECT_DOUBLE_EQ(job_number(st.out, "test_accuracy"), expected) << st.out;
  // Every sample of every epoch trained once, across all the changes.
  EXPECT_EQ(job_numbers(st.out, "epoch_samples"), std::vector<double>(20, 1438)) << st.out;
  // Four worker ranks ran, on more than one node; two shards are left, one node each (the
  // shards that owned slices: shard_nodes lists one node per shard, shard_ids beside it).
  const auto parts = job_json(st.out);
  ASSERT_TRUE(parts.contains("worker_nodes")) << st.out;
  ASSERT_TRUE(parts.contains("shard_nodes")) << st.out;
  const auto shards = strings_field(parts, "shard_nodes");
  EXPECT_EQ(node_entries(strings_field(parts, "worker_nodes")), 4u) << st.out;
  EXPECT_EQ(node_entries(shards), 2u) << st.out;
  EXPECT_EQ(parts["shard_ids"].size(), 2u) << st.out;
  std::set<std::string> used;
  for (const char* n : {"node-a", "node-b", "node-c"})
    for (const auto& s : shards)
      if (s.find(n) != std::string::npos) used.insert(n);
  EXPECT_GE(used.size(), 2u) << st.out;
  EXPECT_EQ(number_field(parts, "workers"), 2) << st.out;
  EXPECT_EQ(number_field(parts, "shards"), 2) << st.out;
}

TEST_F(cluster, rescale_and_migrate_change_a_running_job_from_the_command_line) {
  // Two epochs of Fashion-MNIST: 2 workers and 1 shard to start with.
  const auto spec = work_dir() / "fashion-2.yaml";
  {
    std::ifstream in(std::string(COACH_SOURCE_DIR) + "/examples/fashion-mlp.yaml");
    std::ofstream out(spec);
    for (std::string line; std::getline(in, line);)
      out << (line.starts_with("epochs:") ? "epochs: 2" : line) << "\n";
  }
  auto r = coach("submit " + spec.string() + " --workers 2 --shards 1 --json --at " + sched_addr_);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string job = std::to_string(long(json_number(r.out, "job")));
  bool training = false;
  for (int i = 0; i < 300 && !training; ++i) {
    auto st = coach("status " + job + " --json --at " + sched_addr_);
    training = job_number(st.out, "samples_done") > 3000;
    if (!training) std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(training);

  // Wrong requests: one clear line each, exit code 2, the job untouched.
  auto range = coach("rescale " + job + " --workers 99 --at " + sched_addr_);
  EXPECT_EQ(range.code, 2) << range.err;
  EXPECT_NE(range.err.find("--workers 99 is outside the job's workers range [1, 8]"),
            std::string::npos)
      << range.err;
  EXPECT_EQ(count(range.err, "\n"), 1u) << range.err;
  auto shard = coach("migrate " + job + " --shard 7 --to node-b --at " + sched_addr_);
  EXPECT_EQ(shard.code, 2) << shard.err;
  EXPECT_NE(shard.err.find("shard 7 owns no slices (live shards: 0)"), std::string::npos)
      << shard.err;
  auto node = coach("migrate " + job + " --shard 0 --to node-z --at " + sched_addr_);
  EXPECT_EQ(node.code, 2) << node.err;
  EXPECT_NE(node.err.find("no node named 'node-z'"), std::string::npos) << node.err;
  auto none = coach("rescale 999 --workers 2 --at " + sched_addr_);
  EXPECT_EQ(none.code, 2) << none.err;
  EXPECT_NE(none.err.find("no job 999"), std::string::npos) << none.err;

  // Grow to 3 workers and 2 shards, then move shard 0 to node b: all mid-epoch.
  auto grow = coach("rescale " + job + " --workers 3 --shards 2 --at " + sched_addr_);
  ASSERT_EQ(grow.code, 0) << grow.err;
  EXPECT_NE(grow.err.find("goes to 3 worker(s) and 2 shard(s)"), std::string::npos) << grow.err;
  // The migration once the new shard has its id (1): a migration asked before the rescale's
  // shards change began would take id 1 itself (ids go in the order parts are asked for).
  bool grown = false;
  for (int i = 0; i < 300 && !grown; ++i) {
    auto st = coach("status " + job + " --json --at " + sched_addr_);
    grown = job_number(st.out, "shards") == 2 && job_number(st.out, "workers") == 3;
    if (!grown) std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(grown);
  auto move = coach("migrate " + job + " --shard 0 --to node-b --json --at " + sched_addr_);
  ASSERT_EQ(move.code, 0) << move.err;
  EXPECT_EQ(json_field(parse_json(move.out), "accepted"), true) << move.out;

  const std::string final_status = wait_for_end(job, sched_addr_);
  EXPECT_EQ(state_of(final_status), "succeeded") << final_status;
  EXPECT_GE(job_number(final_status, "test_accuracy"), 0.83) << final_status;
  EXPECT_EQ(job_numbers(final_status, "epoch_samples"), (std::vector<double>{60000, 60000}))
      << final_status;
  EXPECT_EQ(job_number(final_status, "workers"), 3) << final_status;
  EXPECT_EQ(job_number(final_status, "shards"), 2) << final_status;
  // Shards 0 (start), 1 (rescale), 2 (migrate: on node b, shard 0's slices): one node per shard
  // that owns slices, shard 0 gone (issue 41: it listed 3 nodes for 2 shards).
  ASSERT_TRUE(job_json(final_status).contains("shard_nodes")) << final_status;
  const auto shards = job_strings(final_status, "shard_nodes");
  EXPECT_EQ(node_entries(shards), 2u) << final_status;
  EXPECT_EQ(job_numbers(final_status, "shard_ids"), (std::vector<double>{1, 2})) << final_status;
  ASSERT_FALSE(shards.empty()) << final_status;
  EXPECT_EQ(shards.back(), "node-b") << final_status;
  // A finished job cannot change.
  auto late = coach("rescale " + job + " --workers 2 --at " + sched_addr_);
  EXPECT_EQ(late.code, 2) << late.err;
  EXPECT_NE(late.err.find("already succeeded"), std::string::npos) << late.err;
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
  // Cancelled once it trains (its parts started), the case that needs the master to stop it.
  for (int i = 0; i < 300; ++i) {
    auto st = coach("status " + std::to_string(job) + " --json --at " + sched_addr_);
    if (state_of(st.out) == "running") break;
    std::this_thread::sleep_for(100ms);
  }
  auto c = coach("cancel " + std::to_string(job) + " --at " + sched_addr_);
  ASSERT_EQ(c.code, 0) << c.err;
  std::string state;
  for (int i = 0; i < 150 && state != "cancelled"; ++i) {
    auto st = coach("status " + std::to_string(job) + " --json --at " + sched_addr_);
    if (state_of(st.out) == "cancelled") state = "cancelled";
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
    up = alive_nodes(coach("nodes --json --at " + sched_addr_).out) == 4;
    if (!up) std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(up) << slurp(d.log);
  // The digits example, long enough to lose a node mid-run (its epochs last tens of ms).
  const auto spec = work_dir() / "digits-lossy.yaml";
  {
    std::istringstream in(example_files::example_text("digits-mlp.yaml"));
    std::ofstream out(spec);
    for (std::string line; std::getline(in, line);)
      out << (line.starts_with("epochs:") ? "epochs: 150" : line) << "\n";
  }
  auto r = coach("submit " + spec.string() + " --workers 4 --shards 2 --json --at " + sched_addr_);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string job = std::to_string(long(json_number(r.out, "job")));
  // Once a few epochs are done, node d dies without a word.
  bool training = false;
  for (int i = 0; i < 300 && !training; ++i) {
    auto st = coach("status " + job + " --json --at " + sched_addr_);
    training = job_number(st.out, "epochs_done") >= 3;
    if (!training) std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(training);
  ASSERT_EQ(::kill(d.pid, SIGKILL), 0);
  ::waitpid(d.pid, nullptr, 0);
  std::string final_status;
  for (int i = 0; i < 1200; ++i) {
    auto st = coach("status " + job + " --json --at " + sched_addr_);
    if (state_of(st.out) != "running" && state_of(st.out) != "queued") {
      final_status = st.out;
      break;
    }
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(state_of(final_status), "succeeded") << final_status;
  EXPECT_TRUE(holds(job_strings(final_status, "worker_nodes"), "node-d (lost)")) << final_status;
  EXPECT_EQ(job_number(final_status, "epochs_done"), 150) << final_status;
  EXPECT_GE(job_number(final_status, "test_accuracy"), 0.95) << final_status;
  // Worker 3's chunks went back to the queue: every epoch trained every sample exactly once.
  const double per_epoch = job_number(final_status, "samples_per_epoch");
  ASSERT_GT(per_epoch, 1000) << final_status;
  ASSERT_TRUE(job_json(final_status).contains("epoch_samples")) << final_status;
  const auto epochs = job_numbers(final_status, "epoch_samples");
  for (std::size_t e = 0; e < epochs.size(); ++e)
    EXPECT_EQ(epochs[e], per_epoch) << "epoch " << e + 1;
  EXPECT_EQ(epochs.size(), 150u) << final_status;
}

/// Pids of the coach-invocation processes whose parent is one of `parents`.
std::vector<pid_t> invocations_of(const std::vector<node_process>& parents) {
  std::vector<pid_t> out;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid ...: comm may hold spaces, so read after its closing parenthesis.
    const auto close = line.rfind(')');
    const auto open = line.find('(');
    if (close == std::string::npos || open == std::string::npos) continue;
    if (line.substr(open + 1, close - open - 1) != "coach-invocatio") continue;  // comm: 15 chars
    std::istringstream rest(line.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (state == 'Z' || state == 'X') continue;  // exited already: nothing to kill
    for (const auto& n : parents)
      if (n.pid == ppid) out.push_back(pid_t(std::stol(name)));
  }
  return out;
}

TEST_F(cluster, a_function_mode_job_completes_across_nodes_while_its_invocations_are_killed) {
  const auto spec = work_dir() / "digits-functions.yaml";
  {
    std::istringstream in(example_files::example_text("digits-mlp.yaml"));
    std::ofstream out(spec);
    for (std::string line; std::getline(in, line);) {
      if (line.starts_with("epochs:")) line = "epochs: 120";
      if (line.starts_with("consistency:")) line = "consistency: averaging:2";
      out << line << "\n";
    }
    out << "function: {deadline_s: 60, memory_mb: 256, chunks_per_invocation: 6}\n";
  }
  auto r = coach("submit " + spec.string() + " --workers 3 --shards 1 --json --at " + sched_addr_);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string job = std::to_string(long(json_number(r.out, "job")));
  // Kill a running invocation, wait for the job to finish one more epoch, and again: a killed
  // invocation's step goes to the next one; the job never notices but for the time.
  std::mt19937 rng(11);
  int killed = 0;
  double last_epoch = 0;
  std::string st;
  for (int i = 0; i < 3000; ++i) {
    st = coach("status " + job + " --json --at " + sched_addr_).out;
    if (state_of(st) != "running" && state_of(st) != "queued") break;
    const double epoch = job_number(st, "epochs_done");
    if (killed < 12 && epoch > last_epoch) {
      auto pids = invocations_of(nodes_);
      if (!pids.empty()) {
        const pid_t victim = pids[rng() % pids.size()];
        if (::kill(victim, SIGKILL) == 0) {
          ++killed;
          last_epoch = epoch;
        }
      }
    }
    std::this_thread::sleep_for(20ms);  // a poll (3000 at most, the job's end breaks it)
  }
  std::fprintf(stderr, "killed %d invocations while the job ran\n", killed);
  EXPECT_GE(killed, 5) << "the job ended before it could be hurt: " << st;
  EXPECT_EQ(state_of(st), "succeeded") << st;
  EXPECT_EQ(job_number(st, "epochs_done"), 120) << st;
  EXPECT_GE(job_number(st, "test_accuracy"), 0.95) << st;
  EXPECT_EQ(job_number(st, "samples_per_epoch"), 1438) << st;
  EXPECT_EQ(job_numbers(st, "epoch_samples"), std::vector<double>(120, 1438))
      << "every epoch trained every sample: " << st;
  // coach status counts the invocations: the killed ones among those that ended otherwise.
  const auto counts = json_field(job_json(st), "invocations");
  ASSERT_TRUE(counts.is_object()) << st;
  // A kill can land on an invocation that is exiting after its last task (it then ends
  // completed), so not every kill counts; none ended otherwise.
  const double failed = number_field(counts, "failed");
  EXPECT_GE(failed, 1) << counts;
  EXPECT_LE(failed, killed) << counts;
  EXPECT_EQ(number_field(counts, "timed_out"), 0) << counts;
  EXPECT_EQ(number_field(counts, "out_of_memory"), 0) << counts;
  // Every invocation started ended completed or failed, but for at most one per worker still
  // running at the last progress report.
  const double running =
      number_field(counts, "started") - number_field(counts, "completed") - failed;
  EXPECT_GE(running, 0) << counts;
  EXPECT_LE(running, 3) << counts;
  EXPECT_GT(number_field(counts, "peak_memory_bytes"), 1 << 20) << counts;
  const auto table = coach("status --at " + sched_addr_);
  EXPECT_NE(table.out.find("invocations: "), std::string::npos) << table.out;
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
    dead = alive_nodes(r.out) == 2;
    if (!dead) std::this_thread::sleep_for(250ms);
  }
  EXPECT_TRUE(dead);
}

}  // namespace
