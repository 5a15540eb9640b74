// A job's bytes between hosts against its placement (issue 42): five coach-node processes on
// 127.0.0.1 (--cpus 2 each; the scheduler, named z, sorts last, so spread and dltap place the
// digits job's 2 workers and 2 shards on a-d and z only runs the job's master). A spread run puts
// every part on a node of its own: each link between two part nodes is then what one part sent
// another, and every worker sends a shard (and the shard every worker) the same bytes, those of
// the shard's key range. From those bytes and the nodes `coach status --json` names for every
// part of a dltap run of the same job (BSP, one seed: the same steps, the same messages), each
// link of the dltap run between two nodes is predicted to the byte; the job's cross_host_bytes
// is the sum of its links between two different nodes and holds no answer to a `coach` client.
// Run again after other jobs, the same job lands on the same nodes and moves the same bytes.
#include <gtest/gtest.h>

#include "tests/helpers/example_text.hpp"
#include "tests/integration/process_harness.hpp"

#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace {

using namespace itest;

/// A job's status: the nodes of its parts and its links, by node name.
struct job_bytes {
  std::string text;  ///< `coach submit --wait --json`'s output
  std::vector<std::string> workers, shards;
  std::map<std::pair<std::string, std::string>, double> links;  ///< (src, dst) -> bytes
  double cross = -1;                                            ///< cross_host_bytes
  bool only_nodes = true;  ///< every link joins two nodes (none goes to a client)
};

class placement_bytes : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    sched_addr_ = free_address();
    nodes_.push_back(start_node({"--listen", sched_addr_, "--scheduler", "--store", "", "--name",
                                 "z", "--heartbeat", "0.25", "--cpus", "2"},
                                "z", "placement-bytes-z"));
    for (const char* name : {"a", "b", "c", "d"})
      nodes_.push_back(start_node({"--listen", free_address(), "--join", sched_addr_, "--name",
                                   name, "--heartbeat", "0.25", "--cpus", "2"},
                                  name, std::string("placement-bytes-") + name));
    up_ = await_nodes_alive(sched_addr_, 5);
    if (!up_) return;
    for (const auto& n : nodes_of(coach("nodes --json --at " + sched_addr_).out))
      names_[number_field(n, "host")] = string_field(n, "name");
  }
  void SetUp() override { ASSERT_TRUE(up_) << "the 5 nodes did not all come up"; }
  static void TearDownTestSuite() { stop_nodes(nodes_); }
  void TearDown() override {
    if (HasFailure())
      for (auto& n : nodes_)
        std::fprintf(stderr, "---- %s ----\n%s\n", n.name.c_str(), slurp(n.log).c_str());
  }

  /// Runs the digits job (2 epochs) with `placement` and these counts to its end.
  static job_bytes run(const std::string& placement, int workers, int shards) {
    const auto spec = work_dir() / ("bytes-" + placement + ".yaml");
    std::ofstream(spec) << example_files::example_text("digits-mlp.yaml")
                        << "placement: " << placement << "\n";
    auto r = coach("submit " + spec.string() + " --workers " + std::to_string(workers) +
                   " --shards " + std::to_string(shards) + " --wait --json --at " + sched_addr_);
    job_bytes out;
    out.text = r.out + r.err;
    if (r.code != 0 || state_of(r.out) != "succeeded" ||
        r.out.find("\"traffic_final\":true") == std::string::npos)
      return out;
    out.workers = job_strings(r.out, "worker_nodes");
    out.shards = job_strings(r.out, "shard_nodes");
    out.cross = job_number(r.out, "cross_host_bytes");
    for (const auto& l : json_field(job_json(r.out), "traffic")) {
      const auto src = names_.find(number_field(l, "src_host"));
      const auto dst = names_.find(number_field(l, "dst_host"));
      if (src == names_.end() || dst == names_.end()) {
        out.only_nodes = false;
        continue;
      }
      out.links[{src->second, dst->second}] += number_field(l, "bytes");
    }
    return out;
  }

  /// The bytes of the job's link from node `src` to node `dst` (0: none).
  static double link(const job_bytes& j, const std::string& src, const std::string& dst) {
    const auto it = j.links.find({src, dst});
    return it == j.links.end() ? 0.0 : it->second;
  }

  /// The sum of the job's links between two different nodes.
  static double cross_links(const job_bytes& j) {
    double n = 0;
    for (const auto& [link, bytes] : j.links)
      if (link.first != link.second) n += bytes;
    return n;
  }

  static inline std::string sched_addr_;
  static inline std::vector<node_process> nodes_;
  static inline std::map<double, std::string> names_;  ///< host id -> node name
  static inline bool up_ = false;
};

TEST_F(placement_bytes, cross_host_bytes_are_what_the_parts_on_two_nodes_sent_each_other) {
  const auto spread = run("spread", 2, 2);
  ASSERT_EQ(spread.workers.size(), 2u) << spread.text;
  ASSERT_EQ(spread.shards.size(), 2u) << spread.text;
  // Every part on a node of its own, none on the scheduler's.
  std::set<std::string> used(spread.workers.begin(), spread.workers.end());
  used.insert(spread.shards.begin(), spread.shards.end());
  ASSERT_EQ(used.size(), 4u) << spread.text;
  ASSERT_FALSE(used.contains("z")) << spread.text;
  // What each part sent each other part: worker r to shard k, shard k to worker r.
  std::map<std::pair<int, int>, double> to_shard, to_worker;
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 2; ++k) {
      const auto rk = std::pair(r, k);
      to_shard[rk] = link(spread, spread.workers[r], spread.shards[k]);
      to_worker[rk] = link(spread, spread.shards[k], spread.workers[r]);
      EXPECT_GT(to_shard[rk], 1e5) << spread.text;
      EXPECT_GT(to_worker[rk], 1e5) << spread.text;
    }
  // Key ranges: every worker exchanges with shard k the same bytes; the shards' differ with
  // their ranges (5 slices of the digits MLP: 3 and 2).
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(to_shard[std::pair(0, k)], to_shard[std::pair(1, k)]) << spread.text;
    EXPECT_EQ(to_worker[std::pair(0, k)], to_worker[std::pair(1, k)]) << spread.text;
  }
  EXPECT_TRUE(spread.only_nodes) << "a link to no node (a client) counted: " << spread.text;
  EXPECT_EQ(spread.cross, cross_links(spread)) << spread.text;

  const auto dltap = run("dltap", 2, 2);
  ASSERT_EQ(dltap.workers.size(), 2u) << dltap.text;
  ASSERT_EQ(dltap.shards.size(), 2u) << dltap.text;
  EXPECT_TRUE(dltap.only_nodes) << dltap.text;
  EXPECT_EQ(dltap.cross, cross_links(dltap)) << dltap.text;
  // Each link between two different nodes of parts, predicted from the parts on its ends.
  std::map<std::pair<std::string, std::string>, double> predicted;
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 2; ++k) {
      const auto& w = dltap.workers[r];
      const auto& s = dltap.shards[k];
      if (w == s) continue;
      predicted[{w, s}] += to_shard[std::pair(r, k)];
      predicted[{s, w}] += to_worker[std::pair(r, k)];
    }
  std::map<std::pair<std::string, std::string>, double> measured;
  for (const auto& [link, bytes] : dltap.links)
    if (link.first != link.second && link.first != "z" && link.second != "z")
      measured[link] = bytes;
  EXPECT_EQ(measured, predicted) << dltap.text;
  // dltap pairs each shard with a worker: half the pairs cross, against all of spread's.
  double spread_data = 0, dltap_data = 0;
  for (const auto& [rk, b] : to_shard) spread_data += b + to_worker[rk];
  for (const auto& [link, b] : predicted) dltap_data += b;
  EXPECT_LE(dltap_data, 0.6 * spread_data);
  EXPECT_LE(dltap.cross, 0.6 * spread.cross) << dltap.text;
  std::fprintf(stderr, "cross-host bytes: spread %.0f, dltap %.0f (ratio %.3f)\n", spread.cross,
               dltap.cross, dltap.cross / spread.cross);
}

TEST_F(placement_bytes,
       the_same_job_lands_on_the_same_nodes_and_moves_the_same_bytes_after_others) {
  const auto first = run("dltap", 2, 2);
  ASSERT_EQ(first.workers.size(), 2u) << first.text;
  // Other jobs end just before: a larger one of each placement.
  for (const char* p : {"spread", "dltap"}) {
    const auto other = run(p, 4, 2);
    ASSERT_EQ(other.workers.size(), 4u) << other.text;
  }
  const auto again = run("dltap", 2, 2);
  EXPECT_EQ(again.workers, first.workers) << again.text;
  EXPECT_EQ(again.shards, first.shards) << again.text;
  // The data path's links, byte for byte (the master's, to and from z, follow its timers).
  auto data = [](const job_bytes& j) {
    std::map<std::pair<std::string, std::string>, double> out;
    for (const auto& [link, bytes] : j.links)
      if (link.first != link.second && link.first != "z" && link.second != "z") out[link] = bytes;
    return out;
  };
  EXPECT_EQ(data(again), data(first)) << again.text;
  EXPECT_FALSE(data(first).empty()) << first.text;
}

}  // namespace
