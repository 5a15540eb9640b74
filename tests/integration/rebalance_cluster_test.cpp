// dltap's live half on a real cluster, and a user's order that holds against it: two
// coach-node processes on 127.0.0.1, r-a (the scheduler, 2 CPUs) and r-b (1 CPU). A digits job
// of 1 worker and 1 shard fits r-a whole, so dltap puts it there. A user moves its shard to r-b
// (coach migrate): every step's bytes now cross hosts and r-a has room again, yet the shard
// stays where the user put it, pinned, while the job trains on (issue 41: the rebalancer undid
// the move 40 ms later). Once the user releases it (coach migrate --release), the scheduler
// moves it back beside its worker (a live migration, scheduler/rebalance.hpp) without being
// asked, once; the job trains on to its accuracy with every part on one host again, and its
// history (coach logs) names the cause of each change. A second test holds a user's rescale
// against a policy swap (elastic-fifo would grow the job) until the user releases it.
#include <gtest/gtest.h>

#include "tests/helpers/example_text.hpp"
#include "tests/integration/process_harness.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace itest;
using namespace std::chrono_literals;

class rebalance_cluster : public ::testing::Test {
 protected:
  void SetUp() override {
    addr_ = free_address();
    nodes_.push_back(start_node({"--listen", addr_, "--scheduler", "--store", "", "--name", "r-a",
                                 "--heartbeat", "0.25", "--cpus", "2"},
                                "r-a", "rebalance-r-a"));
    nodes_.push_back(start_node({"--listen", free_address(), "--join", addr_, "--name", "r-b",
                                 "--heartbeat", "0.25", "--cpus", "1"},
                                "r-b", "rebalance-r-b"));
    ASSERT_TRUE(await_nodes_alive(addr_, 2)) << "the two nodes did not come up";
  }
  void TearDown() override {
    stop_nodes(nodes_);
    if (HasFailure())
      for (auto& n : nodes_)
        std::fprintf(stderr, "---- %s ----\n%s\n", n.name.c_str(), slurp(n.log).c_str());
  }

  /// Polls the job's status until `done(status)` or `limit`; the last status.
  template <class Pred>
  std::string await_status(const std::string& job, Pred done, std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    std::string last;
    while (std::chrono::steady_clock::now() < deadline) {
      auto st = coach("status " + job + " --json --at " + addr_);
      if (st.code == 0) {
        last = st.out;
        if (done(last)) return last;
      }
      std::this_thread::sleep_for(100ms);
    }
    return last;
  }

  std::string addr_;
  std::vector<node_process> nodes_;
};

TEST_F(rebalance_cluster, a_shard_moved_away_from_its_workers_comes_back_once_there_is_room) {
  const auto spec = work_dir() / "digits-rebalance.yaml";
  std::string text = example_files::example_text("digits-mlp.yaml");
  text = std::regex_replace(text, std::regex("epochs: 20"), "epochs: 100000");
  std::ofstream(spec) << text << "placement: dltap\n";
  auto r = coach("submit " + spec.string() + " --workers 1 --shards 1 --json --at " + addr_);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const std::string job = std::to_string(long(json_number(r.out, "job")));
  auto running = await_status(
      job, [](const std::string& s) { return state_of(s) == "running"; }, 60s);
  ASSERT_EQ(state_of(running), "running") << running;
  EXPECT_EQ(job_strings(running, "shard_nodes"), std::vector<std::string>{"r-a"})
      << "dltap puts the whole job on the node that holds it: " << running;
  EXPECT_EQ(job_number(running, "aggregation_degree"), 1.0) << running;

  auto m = coach("migrate " + job + " --shard 0 --to r-b --at " + addr_);
  ASSERT_EQ(m.code, 0) << m.out << m.err;
  EXPECT_NE(m.err.find("pinned there until `coach migrate " + job + " --shard ID --release`"),
            std::string::npos)
      << m.err;
  // The user's move: shard 1 on r-b, one node for the job's one shard. It holds while the job
  // trains three more epochs and 5 s more (the scheduler decides, and asks the rebalancer, at
  // least every 2 s; unpinned, the shard went back within 40 ms), though r-a has room beside
  // the worker.
  auto moved = await_status(
      job,
      [](const std::string& s) {
        return job_strings(s, "shard_nodes") == std::vector<std::string>{"r-b"} ||
               state_of(s) != "running";
      },
      60s);
  ASSERT_EQ(job_strings(moved, "shard_nodes"), std::vector<std::string>{"r-b"}) << moved;
  EXPECT_EQ(job_numbers(moved, "shard_ids"), std::vector<double>{1}) << moved;
  EXPECT_EQ(job_strings(moved, "orders"),
            std::vector<std::string>{"shard 1 pinned to 'r-b' (coach migrate)"})
      << moved;
  const double epochs_moved = job_number(moved, "epochs_done");
  const double seconds_moved = job_number(moved, "seconds");
  auto held = await_status(
      job,
      [&](const std::string& s) {
        return (job_number(s, "epochs_done") >= epochs_moved + 3 &&
                job_number(s, "seconds") >= seconds_moved + 5) ||
               state_of(s) != "running" ||
               job_strings(s, "shard_nodes") != std::vector<std::string>{"r-b"};
      },
      120s);
  EXPECT_GE(job_number(held, "epochs_done"), epochs_moved + 3) << held;
  EXPECT_GE(job_number(held, "seconds"), seconds_moved + 5) << held;
  EXPECT_EQ(job_strings(held, "shard_nodes"), std::vector<std::string>{"r-b"})
      << "the user's move holds: " << held;
  EXPECT_EQ(count(slurp(nodes_[0].log), "dltap: job " + job + ":"), 0u) << slurp(nodes_[0].log);
  auto shown = coach("status " + job + " --at " + addr_);
  ASSERT_EQ(shown.code, 0) << shown.err;
  EXPECT_NE(shown.out.find("job " + job + ": shard 1 pinned to 'r-b' (coach migrate)"),
            std::string::npos)
      << shown.out;

  // Releasing a shard that is not pinned says which is; releasing shard 1 lets dltap move it.
  auto wrong = coach("migrate " + job + " --shard 0 --release --at " + addr_);
  EXPECT_EQ(wrong.code, 2) << wrong.err;
  EXPECT_EQ(wrong.err, "coach: job " + job + ": shard 0 is not pinned (pinned: shard 1)\n");
  auto released = coach("migrate " + job + " --shard 1 --release --at " + addr_);
  ASSERT_EQ(released.code, 0) << released.err;
  EXPECT_EQ(released.err,
            "coach: job " + job + ": shard 1 is unpinned; the rebalancer may move it\n");
  auto beside = await_status(
      job,
      [&](const std::string& s) {
        return (job_strings(s, "shard_nodes") == std::vector<std::string>{"r-a"} &&
                job_number(s, "aggregation_degree") == 1.0) ||
               state_of(s) != "running";
      },
      120s);
  EXPECT_EQ(job_strings(beside, "shard_nodes"), std::vector<std::string>{"r-a"}) << beside;
  EXPECT_EQ(job_numbers(beside, "shard_ids"), std::vector<double>{2}) << beside;
  EXPECT_EQ(job_number(beside, "aggregation_degree"), 1.0) << beside;
  EXPECT_TRUE(job_strings(beside, "orders").empty()) << beside;
  const std::string log = slurp(nodes_[0].log);
  EXPECT_EQ(count(log, "dltap: job " + job + ": shard 1 moves from 'r-b' to 'r-a'"), 1u) << log;
  // Every change in the job's history names its cause.
  auto logs = coach("logs " + job + " --at " + addr_);
  ASSERT_EQ(logs.code, 0) << logs.err;
  EXPECT_EQ(count(logs.out, "a change is in effect: 1 worker(s), 1 shard(s) (cause: user)"), 1u)
      << logs.out;
  EXPECT_EQ(count(logs.out, "a change is in effect: 1 worker(s), 1 shard(s) (cause: rebalancer)"),
            1u)
      << logs.out;
  // A migration takes effect in two steps (the new shard with its slices, then the old one
  // gone): both name it.
  EXPECT_EQ(count(logs.out, "a change is in effect: 1 worker(s), 2 shard(s) (cause: user)"), 1u)
      << logs.out;
  EXPECT_EQ(count(logs.out, "a change is in effect: 1 worker(s), 2 shard(s) (cause: rebalancer)"),
            1u)
      << logs.out;
  EXPECT_EQ(count(logs.out, "a change is in effect"), 4u) << logs.out;
  // It trains on beside its shard: more epochs, the accuracy of digits; then the user stops it
  // (the job is long so that the moves happen mid-run on any machine).
  const double epochs_then = job_number(beside, "epochs_done");
  auto later = await_status(
      job,
      [&](const std::string& s) {
        return job_number(s, "epochs_done") >= epochs_then + 3 || state_of(s) != "running";
      },
      120s);
  EXPECT_GE(job_number(later, "epochs_done"), epochs_then + 3) << later;
  EXPECT_GE(job_number(later, "test_accuracy"), 0.95) << later;
  EXPECT_EQ(job_number(later, "aggregation_degree"), 1.0) << later;
  auto c = coach("cancel " + job + " --at " + addr_);
  ASSERT_EQ(c.code, 0) << c.out << c.err;
  auto end = await_status(
      job, [](const std::string& s) { return state_of(s) == "cancelled"; }, 60s);
  EXPECT_EQ(state_of(end), "cancelled") << end;
  EXPECT_EQ(count(slurp(nodes_[0].log), "dltap: job " + job + ":"), 1u)
      << "one move: the shard stays beside its worker";
}

// Issue 41: `coach policy set coach` cut a job the user had rescaled back. A user's rescale
// holds against a policy swap until released: here elastic-fifo, which grows a running job into
// free CPUs, leaves the user's 1 worker alone while the job trains 5 s and 3 epochs, and grows
// it once the user releases the count.
TEST_F(rebalance_cluster, a_users_rescale_holds_against_a_policy_swap_until_released) {
  const auto spec = work_dir() / "digits-hold.yaml";
  std::string text = example_files::example_text("digits-mlp.yaml");
  text = std::regex_replace(text, std::regex("epochs: 20"), "epochs: 100000");
  text =
      std::regex_replace(text, std::regex("shards: \\{min: 1, max: 4, initial: 1\\}"), "shards: 1");
  std::ofstream(spec) << text;
  auto r = coach("submit " + spec.string() + " --workers 2 --json --at " + addr_);
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const std::string job = std::to_string(long(json_number(r.out, "job")));
  auto running = await_status(
      job, [](const std::string& s) { return state_of(s) == "running"; }, 60s);
  ASSERT_EQ(state_of(running), "running") << running;
  auto shrink = coach("rescale " + job + " --workers 1 --at " + addr_);
  ASSERT_EQ(shrink.code, 0) << shrink.err;
  EXPECT_EQ(shrink.err, "coach: job " + job +
                            " goes to 1 worker(s) at its next step; held until `coach rescale " +
                            job + " --release`\n");
  auto one = await_status(
      job,
      [](const std::string& s) {
        return job_number(s, "workers") == 1 || state_of(s) != "running";
      },
      60s);
  ASSERT_EQ(job_number(one, "workers"), 1) << one;
  EXPECT_EQ(job_strings(one, "orders"), std::vector<std::string>{"workers 1 held (coach rescale)"})
      << one;
  auto swap = coach("policy set elastic-fifo --at " + addr_);
  ASSERT_EQ(swap.code, 0) << swap.err;
  const double epochs_then = job_number(one, "epochs_done"),
               seconds_then = job_number(one, "seconds");
  auto held = await_status(
      job,
      [&](const std::string& s) {
        return (job_number(s, "epochs_done") >= epochs_then + 3 &&
                job_number(s, "seconds") >= seconds_then + 5) ||
               job_number(s, "workers") != 1 || state_of(s) != "running";
      },
      120s);
  EXPECT_EQ(job_number(held, "workers"), 1) << "the user's count holds: " << held;
  EXPECT_GE(job_number(held, "seconds"), seconds_then + 5) << held;

  auto released = coach("rescale " + job + " --release --at " + addr_);
  ASSERT_EQ(released.code, 0) << released.err;
  EXPECT_EQ(released.err,
            "coach: job " + job + ": its counts are released; the policies size it again\n");
  auto again = coach("rescale " + job + " --release --at " + addr_);
  EXPECT_EQ(again.code, 2);
  EXPECT_EQ(again.err, "coach: job " + job + " holds no rescale of the user's\n");
  auto grown = await_status(
      job,
      [](const std::string& s) {
        return job_number(s, "workers") == 2 || state_of(s) != "running";
      },
      60s);
  EXPECT_EQ(job_number(grown, "workers"), 2) << grown;
  auto logs = coach("logs " + job + " --at " + addr_);
  ASSERT_EQ(logs.code, 0) << logs.err;
  EXPECT_EQ(count(logs.out, "a change is in effect: 1 worker(s), 1 shard(s) (cause: user)"), 1u)
      << logs.out;
  EXPECT_EQ(count(logs.out,
                  "a change is in effect: 2 worker(s), 1 shard(s) (cause: policy "
                  "elastic-fifo)"),
            1u)
      << logs.out;
  auto c = coach("cancel " + job + " --at " + addr_);
  ASSERT_EQ(c.code, 0) << c.err;
  auto end = await_status(
      job, [](const std::string& s) { return state_of(s) == "cancelled"; }, 60s);
  EXPECT_EQ(state_of(end), "cancelled") << end;
}

}  // namespace
